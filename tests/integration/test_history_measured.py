"""The history's measured kernels (schema version 5): each run keeps its largest kernels measured by
Nsight Compute (``--ncu``) with their SOL compute and memory %, and ``history show --measured``
names the kernel whose SOL fell. On the generated example of tests/ncu_example.py joined to the
shared ncu exports (skipped without them), a second run's exports edited so that one kernel's SM
throughput drops from ncu's 41.49% to 20.5%."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("duckdb")

from ncu_example import write_example  # noqa: E402
from test_history import run_cli  # noqa: E402

import traceview  # noqa: E402
from traceview.findings import Options  # noqa: E402
from traceview.history import add_runs, files_identity, open_history, schema, show, summarize  # noqa: E402
from traceview.history.render import render_show  # noqa: E402

SHARED_NCU = Path("../shared/traces/ncu")
#: the kernel whose SM throughput the second run's exports lower, and its launch configuration
EDITED = "kernel0003"
#: its key in the history: the normalised name (template arguments dropped, as the kernel series are)
WMMA_KEY = "Kernel2"
SM_METRICS = ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "Compute (SM) Throughput")
NEW_SM_PCT = "20.5"


def _edited_exports(out: Path) -> Path:
    """A copy of the shared exports with the SM throughput of one kernel set to NEW_SM_PCT."""
    shutil.copytree(SHARED_NCU, out)
    for path in out.glob(f"*{EDITED}*.csv"):
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
        at_name, at_value = rows[0].index("Metric Name"), rows[0].index("Metric Value")
        hits = 0
        for row in rows[1:]:
            if len(row) > at_value and row[at_name] in SM_METRICS:
                row[at_value] = NEW_SM_PCT
                hits += 1
        assert hits >= 1, path.name
        buf = io.StringIO()
        csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
        path.write_text(buf.getvalue(), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[traceview.Report, object]]:
    if not SHARED_NCU.is_dir():
        pytest.skip(f"{SHARED_NCU} is absent (the shared traces are not on this machine)")
    tmp = tmp_path_factory.mktemp("runs")
    out = []
    for i, ncu in enumerate((SHARED_NCU, _edited_exports(tmp / "edited_ncu"))):
        (tmp / f"run{i}").mkdir()
        trace = write_example(tmp / f"run{i}" / "example.json")
        if i:  # another run: a different file (its identity), the same kernels
            trace.write_text(trace.read_text(encoding="utf-8") + "\n", encoding="utf-8")
        report = traceview.analyze(str(trace), Options(ncu=(str(ncu),)), cache=False)
        out.append((report, summarize(report, identity=files_identity([trace]), name=f"run{i}", paths=[str(trace)],
                                      tags={})))
    return out


def test_a_run_keeps_its_largest_measured_kernels_with_their_sol(tmp_path, reports):
    report, summary = reports[0]
    table = report.table("measured", "kernels")
    stored = summary.measured
    assert list(stored.columns) == list(schema.MEASURED_COLUMNS)
    assert 0 < len(stored) <= schema.MEASURED_KEPT and list(stored["position"]) == list(range(1, len(stored) + 1))
    assert stored["trace_ns"].is_monotonic_decreasing
    # summed over the table's rows of each kernel and configuration: nothing lost, nothing counted twice
    assert int(stored["kernels"].sum()) == int(table["kernels"].sum())
    assert int(stored["trace_ns"].sum()) == int(table["trace_ns"].sum())
    wmma = stored[(stored["kernel"] == WMMA_KEY) & (stored["grid"] == "(152, 4, 1)")]
    assert len(wmma) == 1 and wmma["sm_throughput_pct"].iloc[0] == pytest.approx(41.49)
    con = open_history(tmp_path / "h.duckdb")
    add_runs(con, [s for _, s in reports])
    back = con.execute("SELECT * FROM measured WHERE run_id = 1 ORDER BY position").df()
    assert back["kernel"].tolist() == stored["kernel"].tolist()
    assert back["sm_throughput_pct"].tolist() == pytest.approx(stored["sm_throughput_pct"].tolist(), nan_ok=True)
    con.close()


def test_show_measured_names_the_kernel_whose_sol_fell(tmp_path, reports):
    db = tmp_path / "h.duckdb"
    con = open_history(db)
    add_runs(con, [s for _, s in reports])
    result = show(con, last=5, measured=True)
    con.close()
    data = json.loads(render_show(result, "json"))
    by = {(m["kernel"], m["grid"]): m for m in data["measured"]}
    wmma = next(m for (k, g), m in by.items() if k == WMMA_KEY and g == "(152, 4, 1)")
    assert wmma["sol_compute_pct"] == [pytest.approx(41.49), pytest.approx(20.5)]
    assert wmma["compute_trend_pt"] == pytest.approx(20.5 - 41.49, abs=1e-3)
    assert wmma["sol_memory_pct"][0] == wmma["sol_memory_pct"][1]
    # every other kernel measured the same in both runs
    others = [m for m in data["measured"] if m is not wmma]
    assert others and all(m["compute_trend_pt"] in (0, None) and m["memory_trend_pt"] in (0, None) for m in others)
    shown = run_cli("show", "--measured", "--db", str(db), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "Measured speed of light per kernel" in shown.stdout
    line = next(x for x in shown.stdout.splitlines() if WMMA_KEY in x and "(152, 4, 1)" in x)
    assert "41.5/" in line and "20.5/" in line and "-21.0 pt" in line
    assert "measured" not in json.loads(render_show(show(open_history(db), last=5), "json"))  # only with it
    refused = run_cli("check", "--measured", "--db", str(db), cwd=tmp_path)
    assert refused.returncode == 2 and "--measured is an option of `history show`" in refused.stderr


def test_migration_v4_to_v5_adds_an_empty_measured_table(tmp_path):
    import duckdb

    path = tmp_path / "v4.duckdb"
    con = duckdb.connect(str(path))
    con.execute(schema.SCHEMA_V1)
    for extra in (schema.V2_ADDITIONS, schema.V3_ADDITIONS, schema.V4_ADDITIONS):
        con.execute(extra)
    con.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    con.execute("INSERT INTO runs (run_id, name, added_at, identity, gpu_model, tags, steps, step_time_ns) VALUES "
                "(1, 'old', TIMESTAMP '2026-01-01', 'id-old', 'H100', '{}', 5, 1000000.0)")
    con.close()
    con = open_history(path)
    assert schema.version_of(con) == 5 == schema.SCHEMA_VERSION
    assert con.execute("SELECT count(*) FROM measured").fetchall()[0][0] == 0
    out = show(con, last=5, measured=True)
    assert out.measured is not None and out.measured.empty
    assert any("no measured kernels stored" in n for n in out.notes)
    assert json.loads(render_show(out, "json"))["measured"] == []
    con.close()
