"""A figure that depends on dropped data says so next to it (issue 11): when a parser drops events
that may have been activity (no usable time, an unmatched ``B``/``E``, a NULL start in an Nsight
export), ``RankInfo.activity_dropped`` counts them by reason and every front end says, beside the
GPU figures, that they leave those events out. A clean trace carries no such note."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import traceview
from builders import write_kineto
from conftest import SAMPLE_TRACES
from traceview.jobs import make_executor
from traceview.render import get_renderer
from traceview.render.common import headline_rows
from traceview.report import Report


def _events(bad_ts: Any | None) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}}]
    for i in range(4):
        ts = 100.0 + 50 * i
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, "tid": 1,
                       "ts": ts, "dur": 4, "args": {"correlation": i + 1}})
        events.append({"ph": "X", "cat": "kernel", "name": f"gemm_{i}", "pid": 0, "tid": 7,
                       "ts": ts + 10 if (i != 2 or bad_ts is None) else bad_ts, "dur": 20,
                       "args": {"device": 0, "stream": 7, "correlation": i + 1}})
    return events


def _kineto(tmp_path: Path, bad_ts: Any | None, name: str = "t.json") -> Path:
    return write_kineto(tmp_path / name, _events(bad_ts))


def _rendered(report: Report) -> dict[str, str]:
    return {fmt: get_renderer(fmt)().render(report) for fmt in ("markdown", "html", "json")}


@pytest.mark.parametrize("bad_ts", ["soon", 1e308])
def test_kineto_figures_say_they_leave_out_dropped_events(tmp_path: Path, bad_ts: Any) -> None:
    report = traceview.analyze(_kineto(tmp_path, bad_ts), use_cache=False)
    (rank,) = report["ranks"]
    reason = "skipped_no_ts" if bad_ts == "soon" else "skipped_ts_out_of_range"
    assert rank["activity_dropped"] == {reason: 1}
    note = report["summary"]["notes"]["dropped_activity"]
    assert note.startswith("1 events that may have been activity were dropped as unusable (rank 0: 1;")
    out = _rendered(report)
    assert json.loads(out["json"])["summary"]["notes"]["dropped_activity"] == note
    for fmt in ("markdown", "html"):
        # beside the utilization figure, and a short mark beside the idle and exposed figures
        assert "every figure of those ranks leaves them out" in out[fmt], fmt
        assert out[fmt].count("leaves out dropped events") >= 2, fmt
    # the Markdown summary has a trust-note column because a figure carries a note
    assert "|  |  | trust note |" in out["markdown"]


def test_a_clean_trace_has_no_dropped_activity_note(tmp_path: Path) -> None:
    report = traceview.analyze(_kineto(tmp_path, None), use_cache=False)
    assert report["ranks"][0]["activity_dropped"] == {}
    assert "dropped_activity" not in report["summary"]["notes"]
    for fmt, text in _rendered(report).items():
        assert "leaves out dropped events" not in text and "were dropped as unusable" not in text, fmt



def test_markdown_summary_has_a_note_column_only_when_a_figure_has_a_note(tmp_path: Path) -> None:
    """An always-empty note column reads as a rendering bug."""
    sample = SAMPLE_TRACES / "synthetic_4rank"
    with_notes = traceview.analyze(_kineto(tmp_path, None), use_cache=False)  # no steps: a noted figure
    without = traceview.analyze(sample, use_cache=False)
    for report, expected in ((with_notes, True), (without, False)):
        assert any(note for _, _, note in headline_rows(report)) is expected
        summary = get_renderer("markdown")().render(report).split("### Summary", 1)[1].split("###", 1)[0]
        assert ("|  |  | trust note |" in summary) is expected
        assert ("|  |  |\n| --- | --- |\n" in summary) is not expected


def test_the_job_path_carries_the_note(tmp_path: Path) -> None:
    """Ranks analysed by worker processes: the overview is rebuilt from their metadata."""
    folder = tmp_path / "job"
    folder.mkdir()
    _kineto(folder, None, "rank0.json")
    _kineto(folder, "soon", "rank1.json")
    report = traceview.analyze(folder, use_cache=False, executor=make_executor(1))
    assert [r["activity_dropped"] for r in report["ranks"]] == [{}, {"skipped_no_ts": 1}]
    assert "(rank 1: 1;" in report["summary"]["notes"]["dropped_activity"]


def test_app_overview_marks_its_cards(tmp_path: Path) -> None:
    pytest.importorskip("dash")
    from traceview.app.runs import RunStore, discover_runs
    from traceview.app.views import AppController

    path = _kineto(tmp_path, "soon")
    ctl = AppController(RunStore(discover_runs([str(path)]), use_cache=False))
    body, _ = ctl.render_page("/", "", 0)
    text = json.dumps(body, default=lambda o: o.to_plotly_json() if hasattr(o, "to_plotly_json") else str(o))
    assert "leaves out dropped events (see note)" in text
    assert "every figure of those ranks leaves them out" in text


def test_nsys_null_start_is_dropped_activity(tmp_path: Path) -> None:
    work = tmp_path / "n.sqlite"
    shutil.copy(SAMPLE_TRACES / "synthetic_nsys.sqlite", work)
    con = sqlite3.connect(work)
    # rebuilt without its NOT NULL constraints (CREATE TABLE AS keeps none), as an edited export may be
    con.execute("CREATE TABLE loose AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("ALTER TABLE loose RENAME TO CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = NULL WHERE rowid IN (1, 2)")
    con.commit()
    con.close()
    report = traceview.analyze(work, use_cache=False)
    dropped = {r["rank"]: r["activity_dropped"] for r in report["ranks"] if r["activity_dropped"]}
    assert sum(n for d in dropped.values() for n in d.values()) == 2
    assert all(set(d) == {"CUPTI_ACTIVITY_KIND_KERNEL.skipped_null_start"} for d in dropped.values())
    assert "2 events that may have been activity" in report["summary"]["notes"]["dropped_activity"]
