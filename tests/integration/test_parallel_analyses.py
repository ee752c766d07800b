"""Analyses of one rank split over two processes (traceview/pipeline.py, ``ForkedSplit``) give the
same report, figure for figure, as one process: the JSON report is compared on the sample traces and
on every shared trace, with the split forced on (``MIN_SPLIT_EVENTS = 0``). A failing child falls
back to this process; an analysis that raises raises as it does in one process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES, SHARED_TRACES, require_shared

import traceview
from traceview import pipeline
from traceview.findings import Options
from traceview.loading import parse_jobs

SAMPLES = ["synthetic_4rank", "synthetic_nsys.sqlite", "torch_cpu_mlp.json.gz", "efficiency_roofline.json.gz",
           "regression_pair/new"]
SHARED = sorted([*SHARED_TRACES.glob("kineto/*"), *SHARED_TRACES.glob("nsys/*.sqlite")]) \
    if SHARED_TRACES.exists() else []

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="the split forks: POSIX only")


def _json(trace: traceview.Trace, jobs: int) -> str:
    from traceview.render import get_renderer

    with parse_jobs(jobs):
        return get_renderer("json")().render(pipeline.analyze(trace, Options()))


def _same_both_ways(path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    trace = traceview.load(path, use_cache=False, jobs=1)
    serial = _json(trace, jobs=1)
    monkeypatch.setattr(pipeline, "MIN_SPLIT_EVENTS", 0)
    ran_in = tmp_path / "pids"
    real_run_spec = pipeline.run_spec

    def recording(spec, *args):  # type: ignore[no-untyped-def]
        with open(ran_in, "a") as fh:  # the child's calls land here too
            fh.write(f"{os.getpid()}\n")
        return real_run_spec(spec, *args)

    monkeypatch.setattr(pipeline, "run_spec", recording)
    assert _json(trace, jobs=2) == serial
    pids = set(ran_in.read_text().split())  # this process and a child per rank
    assert str(os.getpid()) in pids and len(pids) >= 2, "the analyses did not run in two processes"


@needs_fork
@pytest.mark.parametrize("name", SAMPLES)
def test_sample_traces_same_report_split(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _same_both_ways(SAMPLE_TRACES / name, monkeypatch, tmp_path)


@needs_fork
@pytest.mark.parametrize("path", SHARED or [None], ids=lambda p: p.name if p else "absent")
def test_shared_traces_same_report_split(path: Path | None, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    require_shared()
    if path is None:
        pytest.skip("no traces in the shared folder")
    _same_both_ways(path, monkeypatch, tmp_path)


def test_no_split_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The split is opt-in (its measured gain is small for its memory): without the setting, none."""
    trace = traceview.load(SAMPLE_TRACES / "torch_cpu_mlp.json.gz", use_cache=False, jobs=1)
    monkeypatch.delenv("TRACEVIEW_SPLIT_MIN_EVENTS", raising=False)
    with parse_jobs(2):
        assert pipeline.split_processes(trace) == 1
    monkeypatch.setenv("TRACEVIEW_SPLIT_MIN_EVENTS", "0")
    with parse_jobs(2):
        assert pipeline.split_processes(trace) == (2 if hasattr(os, "fork") else 1)


def test_no_split_with_one_job_or_a_small_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = traceview.load(SAMPLE_TRACES / "torch_cpu_mlp.json.gz", use_cache=False, jobs=1)
    monkeypatch.setattr(pipeline, "MIN_SPLIT_EVENTS", trace.num_events + 1)
    with parse_jobs(2):
        assert pipeline.split_processes(trace) == 1
    monkeypatch.setenv("TRACEVIEW_SPLIT_MIN_EVENTS", "0")  # the override wins
    with parse_jobs(2):
        assert pipeline.split_processes(trace) == (2 if hasattr(os, "fork") else 1)
    with parse_jobs(1):
        assert pipeline.split_processes(trace) == 1


@needs_fork
def test_failing_child_falls_back_to_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = traceview.load(SAMPLE_TRACES / "synthetic_4rank", use_cache=False, jobs=1)
    serial = _json(trace, jobs=1)
    monkeypatch.setattr(pipeline, "MIN_SPLIT_EVENTS", 0)
    parent = os.getpid()
    real_run_spec = pipeline.run_spec

    def failing_in_child(spec, *args):  # type: ignore[no-untyped-def]
        if os.getpid() != parent:
            raise RuntimeError("child failure")
        return real_run_spec(spec, *args)

    monkeypatch.setattr(pipeline, "run_spec", failing_in_child)
    assert _json(trace, jobs=2) == serial


@needs_fork
def test_analysis_error_raises_as_in_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = traceview.load(SAMPLE_TRACES / "synthetic_4rank", use_cache=False, jobs=1)
    monkeypatch.setattr(pipeline, "MIN_SPLIT_EVENTS", 0)
    real_run_spec = pipeline.run_spec

    def broken(spec, *args):  # type: ignore[no-untyped-def]
        if spec.name == "temporal":
            raise ValueError("broken analysis")
        return real_run_spec(spec, *args)

    monkeypatch.setattr(pipeline, "run_spec", broken)
    with parse_jobs(2), pytest.raises(ValueError, match="broken analysis"):
        pipeline.analyze(trace, Options())


def test_no_split_off_the_main_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    trace = traceview.load(SAMPLE_TRACES / "torch_cpu_mlp.json.gz", use_cache=False, jobs=1)
    monkeypatch.setattr(pipeline, "MIN_SPLIT_EVENTS", 0)
    seen: list[int] = []

    def probe() -> None:
        with parse_jobs(2):
            seen.append(pipeline.split_processes(trace))

    worker = threading.Thread(target=probe)
    worker.start()
    worker.join()
    with parse_jobs(2):
        here = pipeline.split_processes(trace)
    assert seen == [1] and here == (2 if hasattr(os, "fork") else 1)


@needs_fork
def test_fork_refused_runs_everything_here(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = traceview.load(SAMPLE_TRACES / "synthetic_4rank", use_cache=False, jobs=1)
    serial = _json(trace, jobs=1)
    monkeypatch.setattr(pipeline, "MIN_SPLIT_EVENTS", 0)

    def refused() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refused)
    assert _json(trace, jobs=2) == serial
