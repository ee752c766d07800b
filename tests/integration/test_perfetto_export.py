"""``traceview export-perfetto``: the JSON is a Chrome trace that Perfetto-style consumers accept.

No Perfetto binary is available offline, so :func:`validate_chrome_trace` checks what the Chrome
Trace Event Format (the "JSON Object Format", as Perfetto's JSON importer reads it) requires:
an object with a ``traceEvents`` list; each event's ``ph`` known, ``ts``/``pid``/``tid`` numbers;
complete events with a non-negative ``dur``; metadata events naming processes and threads; flow
events paired by id (one ``s``, one ``f``) and each end inside a slice of its thread (else the
arrow binds to nothing); GPU streams and the added annotation tracks nested, never partly overlapping (Perfetto's
importer flags or truncates those).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from conftest import SAMPLE_TRACES, require_shared
from traceview.export_perfetto import GAPS_TID, FINDING_TID_BASE, Window, export_chrome_trace, window_from_ms
from traceview.errors import TraceviewError
from traceview.pipeline import analyze

#: the slices that must nest: GPU activity on a stream, and the annotations the export adds
NESTED_CATEGORIES = {"kernel", "memcpy", "memset", "traceview"}
PHASES = {"X", "B", "E", "i", "I", "C", "M", "s", "t", "f", "b", "e", "n"}


def validate_chrome_trace(doc: Any) -> dict[str, list[dict[str, Any]]]:
    """Raise AssertionError where ``doc`` breaks the format; the events by phase otherwise."""
    assert isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list), "no traceEvents list"
    assert doc.get("displayTimeUnit", "ms") in ("ms", "ns")
    by_phase: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        assert e.get("ph") in PHASES, f"unknown phase: {e}"
        assert isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int), f"pid/tid not integers: {e}"
        assert isinstance(e.get("name"), str), f"no name: {e}"
        if e["ph"] != "M":
            assert isinstance(e.get("ts"), (int, float)) and e["ts"] >= 0, f"bad ts: {e}"
        if e["ph"] == "X":
            assert isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, f"bad dur: {e}"
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
            assert "name" in e["args"] or "sort_index" in e["args"]
        if e["ph"] in ("s", "f"):
            assert "id" in e and isinstance(e.get("cat"), str), f"flow without id or cat: {e}"
        by_phase[e["ph"]].append(e)
    _check_flows(by_phase)
    # CPU threads are checked as the profiler wrote them elsewhere: PyTorch's ProfilerStep starts inside
    # profiler.step() and outlives it, a partial overlap of the source that an export must not hide
    _check_nesting([e for e in by_phase["X"] if e.get("cat") in NESTED_CATEGORIES])
    return by_phase


def _slices_by_thread(slices: list[dict[str, Any]]) -> dict[tuple[int, int], np.ndarray]:
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in slices:
        tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    # by start, the longer first at equal starts (the enclosing slice before what it holds)
    return {k: np.array(sorted(v, key=lambda se: (se[0], -se[1]))) for k, v in tracks.items()}


def _check_flows(by_phase: dict[str, list[dict[str, Any]]]) -> None:
    starts = {(e["cat"], e["id"]): e for e in by_phase["s"]}
    ends = {(e["cat"], e["id"]): e for e in by_phase["f"]}
    assert len(starts) == len(by_phase["s"]) and len(ends) == len(by_phase["f"]), "flow ids repeat"
    assert starts.keys() == ends.keys(), "flows not paired"
    tracks = _slices_by_thread(by_phase["X"])
    for e in [*by_phase["s"], *by_phase["f"]]:
        spans = tracks.get((e["pid"], e["tid"]))
        assert spans is not None, f"flow end on a thread without slices: {e}"
        inside = (spans[:, 0] <= e["ts"]) & (e["ts"] <= spans[:, 1])
        assert inside.any(), f"flow end outside every slice of its thread: {e}"


def _check_nesting(slices: list[dict[str, Any]]) -> None:
    """On each thread a slice starting inside another ends inside it too (ties at the ends allowed)."""
    tol = 1e-3  # 1 ns, as the ts are written to the ns
    for key, spans in _slices_by_thread(slices).items():
        stack: list[float] = []
        for start, end in spans:
            while stack and stack[-1] <= start + tol:
                stack.pop()
            assert not stack or end <= stack[-1] + tol, f"slices partly overlap on thread {key}: ends at {end}"
            stack.append(end)


@pytest.fixture(scope="module")
def sample_report():
    return analyze(SAMPLE_TRACES / "synthetic_4rank", use_cache=False)


def test_sample_export_is_a_valid_chrome_trace(sample_report):
    trace = sample_report.trace
    doc = json.loads(export_chrome_trace(trace, sample_report))
    by_phase = validate_chrome_trace(doc)
    assert len(by_phase["X"]) >= trace.num_events  # every event, plus the annotations
    links = trace.launch_links()[0].size
    assert links and len(by_phase["s"]) == links  # one arrow per launch link
    names = {e["args"]["name"] for e in by_phase["M"] if e["name"] == "process_name"}
    for rank in trace.rank_ids:
        assert any(n.startswith(f"rank {rank}: GPU") for n in names), names
    ids = {e["args"].get("id") for e in by_phase["X"] if e["cat"] == "traceview"}
    assert ids >= {f["id"] for f in sample_report["findings"]}  # every finding is drawn, by its id
    gaps = [e for e in by_phase["X"] if e["tid"] == GAPS_TID]
    assert len(gaps) == len(sample_report["analyses"]["idle_gaps"]["tables"]["gaps"]["rows"])


def test_window_is_respected(sample_report):
    trace = sample_report.trace
    whole = validate_chrome_trace(json.loads(export_chrome_trace(trace, sample_report)))
    window = window_from_ms(trace, 1.0, 3.0)
    part = validate_chrome_trace(json.loads(export_chrome_trace(trace, sample_report, window)))
    assert 0 < len(part["X"]) < len(whole["X"])
    for e in part["X"]:
        assert 1000 <= e["ts"] and e["ts"] + e["dur"] <= 3000 + 1e-6, e
    for e in [*part["s"], *part["f"]]:
        assert 1000 <= e["ts"] <= 3000, e
    assert len(part["s"]) < len(whole["s"])


def test_bad_windows_are_one_line_errors(sample_report):
    trace = sample_report.trace
    for start, end in ((5.0, 2.0), (-1.0, 2.0), (1e9, None)):
        with pytest.raises(TraceviewError):
            window_from_ms(trace, start, end)
    assert window_from_ms(trace, None, None) == Window(0, window_from_ms(trace, None, None).end_ns)


def test_annotation_tracks_are_named_and_findings_do_not_share_a_track(sample_report):
    doc = json.loads(export_chrome_trace(sample_report.trace, sample_report))
    named = {(e["pid"], e["tid"]) for e in doc["traceEvents"] if e["name"] == "thread_name"}
    notes = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "traceview"]
    assert notes and all((e["pid"], e["tid"]) in named for e in notes)
    for e in notes:
        if e["tid"] >= FINDING_TID_BASE:
            assert e["name"].startswith(e["args"]["id"] + " ")


HF = "hf_" + "Zx9Vb8Nm7Lk6Jh5Gf4Ds3Aq2Wr1EtYuIoP"


def _planted(path: Path) -> Path:
    events = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": f"main HF_TOKEN={HF}"}},
              {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": f"python {HF}"}}]
    for i in range(4):
        t = 100 * i
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t,
                       "dur": 5, "args": {"correlation": i + 1}})
        events.append({"ph": "X", "cat": "kernel", "name": f"gemm<{HF}>", "pid": 0, "tid": 7, "ts": t + 10,
                       "dur": 40, "args": {"correlation": i + 1, "stream": 7, "device": 0}})
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}], "traceEvents": events}
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    return path


def _cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200", TRACEVIEW_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_cli_writes_a_scrubbed_trace_and_rejects_bad_windows(tmp_path):
    path = _planted(tmp_path / "rank0.json.gz")
    out = tmp_path / "out" / "trace.json"
    r = _cli("export-perfetto", str(path), "-o", str(out), tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert str(out) in r.stdout and "ui.perfetto.dev" in r.stdout
    text = out.read_text()
    by_phase = validate_chrome_trace(json.loads(text))
    assert len(by_phase["s"]) == 4
    assert HF not in text and HF[:16] not in text and "<redacted>" in text
    bad = _cli("export-perfetto", str(path), "-o", str(out), "--from", "5", "--to", "1", tmp_path=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "--from" in bad.stderr


def test_the_8rank_job_exports_and_validates():
    folder = require_shared() / "kineto" / "param_dlrm_8ranks_v100"
    report = analyze(folder, use_cache=False)
    by_phase = validate_chrome_trace(json.loads(export_chrome_trace(report.trace, report)))
    names = [e["args"]["name"] for e in by_phase["M"] if e["name"] == "process_name"]
    assert sum(n.endswith(f"GPU {r}") and n.startswith(f"rank {r}:") for r in range(8) for n in names) == 8
    assert len(by_phase["s"]) == report.trace.launch_links()[0].size
    if _analysis_landed():  # the critical path of every rank, its events marked
        doc = {"traceEvents": [e for phase in by_phase.values() for e in phase]}
        segments = report.table("critical_path", "segments")
        assert set(_path_slices(doc)) == set(range(8))
        assert sum(len(v) for v in _path_slices(doc).values()) == len(segments)
        assert _marked(doc) == _expected_marks(report.trace, [int(r) for r in segments["row"] if r >= 0])


# ------------------------------------------------------------------------------ the critical path


def _analysis_landed() -> bool:
    import traceview.analyses  # noqa: F401  (registers every analysis)
    from traceview.registry import ANALYSES

    return "critical_path" in ANALYSES


@pytest.fixture(scope="module")
def path_report(sample_report):
    """The sample's report with a contract-shaped critical path (tests/cp_synthetic.py)."""
    from cp_synthetic import synthetic_result, with_critical_path

    return with_critical_path(sample_report, synthetic_result(sample_report.trace,
                                                              sample_report.table("temporal", "steps")))


def _marked(doc: dict[str, Any]) -> list[tuple[float, str]]:
    return sorted((e["ts"], e["name"]) for e in doc["traceEvents"]
                  if e["ph"] == "X" and e.get("args", {}).get("critical_path") is True)


def _expected_marks(trace, rows) -> list[tuple[float, str]]:
    names = trace.events.column("name").to_pylist()
    starts = trace.column("start_ns")
    return sorted((round((int(starts[r]) - trace.start_ns) / 1000, 3), str(names[r])) for r in set(rows))


def _path_slices(doc: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    """rank -> the slices of its critical-path process."""
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        name = names.get(e["pid"], "")
        if e["ph"] == "X" and name.endswith(": critical path"):
            out[int(name.split()[1].rstrip(":"))].append(e)
    return out


def test_critical_path_events_marked_and_one_track_per_rank(path_report):
    trace = path_report.trace
    segments = path_report.table("critical_path", "segments")
    doc = json.loads(export_chrome_trace(trace, path_report))
    validate_chrome_trace(doc)  # the path's slices nest on their track
    rows = [int(r) for r in segments["row"] if r >= 0]
    assert rows and _marked(doc) == _expected_marks(trace, rows)  # exactly the events on the path
    slices = _path_slices(doc)
    assert set(slices) == set(trace.rank_ids)
    for rank, group in segments.groupby("rank"):
        drawn = slices[int(rank)]
        assert len(drawn) == len(group)
        # the segments partition the steps: the track covers exactly the step time
        steps = path_report.table("critical_path", "steps")
        assert sum(e["args"]["dur_ns"] for e in drawn) == int(steps.loc[steps["rank"] == rank, "step_ns"].sum())
        labels = {e["name"] for e in drawn}
        assert {f"{c}: {n}" if n else c for c, n in zip(group["category"], group["name"])} == labels
    assert doc["otherData"]["critical_path"] == {"segments": len(segments), "exported": len(segments),
                                                 "complete": True}


def test_critical_path_process_is_listed_above_its_rank(path_report):
    doc = json.loads(export_chrome_trace(path_report.trace, path_report))
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    order = [names[e["pid"]] for e in sorted((e for e in doc["traceEvents"] if e["name"] == "process_sort_index"),
                                             key=lambda e: e["args"]["sort_index"])]
    for rank in path_report.trace.rank_ids:
        at = order.index(f"rank {rank}: critical path")
        assert order[at + 1].startswith(f"rank {rank}:") and not order[at + 1].endswith("critical path")
        assert at == 0 or not order[at - 1].startswith(f"rank {rank}:")


def test_critical_path_within_a_window(path_report):
    trace = path_report.trace
    window = window_from_ms(trace, 1.0, 3.0)
    doc = json.loads(export_chrome_trace(trace, path_report, window))
    validate_chrome_trace(doc)
    segments = path_report.table("critical_path", "segments")
    rel_start, rel_end = segments["start_ns"] - trace.start_ns, segments["end_ns"] - trace.start_ns
    inside = (rel_end > window.start_ns) & (rel_start < window.end_ns)
    assert 0 < inside.sum() < len(segments)
    assert doc["otherData"]["critical_path"]["exported"] == int(inside.sum())
    assert sum(len(v) for v in _path_slices(doc).values()) == int(inside.sum())
    for e in sum(_path_slices(doc).values(), []):
        assert 1000 <= e["ts"] and e["ts"] + e["dur"] <= 3000 + 1e-6


def test_overlapping_steps_get_their_own_lane(path_report):
    """Step windows that overlap (PyTorch's ProfilerStep can) never partly overlap on one thread."""
    from cp_synthetic import with_critical_path
    from traceview.findings import AnalysisResult

    segments = path_report.table("critical_path", "segments")
    first = segments[(segments["rank"] == 0) & (segments["step"] == segments["step"].min())]
    shifted = first.assign(step=first["step"] + 100, start_ns=first["start_ns"] + 500_000,
                           end_ns=first["end_ns"] + 500_000, row=-1)
    result = AnalysisResult(name="critical_path", tables={**path_report.results["critical_path"].tables,
                                                          "segments": pd.concat([segments, shifted])})
    report = with_critical_path(path_report, result)
    doc = json.loads(export_chrome_trace(report.trace, report))
    validate_chrome_trace(doc)
    lanes = {e["tid"] for e in _path_slices(doc)[0]}
    assert lanes == {1, 2}
    named = {(e["pid"], e["tid"]) for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert all((e["pid"], e["tid"]) in named for e in _path_slices(doc)[0])


def test_a_report_as_json_marks_the_rows_it_kept(path_report):
    """From a report's JSON (bounded tables) only its kept rows are marked, and the export says so."""
    data = json.loads(path_report.to_json())
    kept = data["analyses"]["critical_path"]["tables"]["segments"]
    doc = json.loads(export_chrome_trace(path_report.trace, data))
    assert kept["shown_rows"] < kept["total_rows"]
    assert _marked(doc) == _expected_marks(path_report.trace, [r["row"] for r in kept["rows"] if r["row"] >= 0])
    assert doc["otherData"]["critical_path"] == {"segments": kept["total_rows"], "exported": kept["shown_rows"],
                                                 "complete": False}


def test_without_a_critical_path_nothing_is_added(sample_report):
    from cp_synthetic import without_critical_path

    report = without_critical_path(sample_report)
    doc = json.loads(export_chrome_trace(report.trace, report))
    assert not _marked(doc) and not _path_slices(doc) and "critical_path" not in doc["otherData"]


def test_the_analysis_path_reaches_the_export(sample_report):
    """On the analysis itself: the marked events are exactly the rows of its segments table."""
    if not _analysis_landed():
        pytest.skip("the critical_path analysis is not on this branch yet")
    segments = sample_report.table("critical_path", "segments")
    doc = json.loads(export_chrome_trace(sample_report.trace, sample_report))
    validate_chrome_trace(doc)
    assert _marked(doc) == _expected_marks(sample_report.trace, [int(r) for r in segments["row"] if r >= 0])
    assert sum(len(v) for v in _path_slices(doc).values()) == len(segments)
