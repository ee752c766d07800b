"""Steps from a user marker (Kineto user annotations, NVTX ranges) and, with no steps, the
candidate markers traceview lists (``analyses.steps.step_marker_candidates``)."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import traceview
from traceview.analyses.steps import candidates_hint, fold_step_name, step_marker_candidates
from traceview.cli import app, main
from traceview.findings import Options

from conftest import SAMPLE_TRACES, context, require_shared

ITERATIONS = 4
ITERATION_US = 1000
NSYS_SAMPLE = SAMPLE_TRACES / "synthetic_nsys.sqlite"


def _kineto_without_profiler_steps(path: Path) -> Path:
    """A Kineto trace whose iterations are ``record_function("train_iter_N")`` user annotations,
    each launching three kernels; no ProfilerStep#N."""
    events, corr = [], 1
    for i in range(ITERATIONS):
        t0 = 1000 + i * ITERATION_US
        events.append({"ph": "X", "cat": "user_annotation", "name": f"train_iter_{i}", "pid": 1, "tid": 1,
                       "ts": t0, "dur": 800})
        events.append({"ph": "X", "cat": "user_annotation", "name": "loss", "pid": 1, "tid": 1,
                       "ts": t0 + 700, "dur": 50})
        for j in range(3):
            ts = t0 + 10 + j * 200
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": ts, "dur": 5, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": ts + 20,
                           "dur": 100, "args": {"device": 0, "stream": 7, "correlation": corr}})
            corr += 1
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 0}}))
    return path


@pytest.fixture()
def kineto(tmp_path: Path) -> Path:
    return _kineto_without_profiler_steps(tmp_path / "iters.json")


def _warnings(report) -> list[str]:
    return [w["message"] for w in report["warnings"]]


def test_step_marker_selects_kineto_user_annotations(kineto):
    assert traceview.load(kineto, use_cache=False).steps.num_rows == 0  # not a default step name
    report = traceview.analyze(kineto, step_marker=r"^train_iter_\d+$", use_cache=False)
    steps = report.table("temporal", "steps")
    assert list(steps["step"]) == list(range(ITERATIONS))
    assert list(steps["end_ns"] - steps["start_ns"]) == [800_000] * ITERATIONS
    assert not any("no steps found" in w for w in _warnings(report))
    breakdown = report.table("temporal", "breakdown")
    assert breakdown["step"].notna().sum() == ITERATIONS  # one row per step besides the whole trace


def test_no_steps_lists_candidates_with_the_marker_to_pass(kineto):
    trace = traceview.load(kineto, use_cache=False)
    candidates = step_marker_candidates(context(trace, Options()))
    best = candidates.iloc[0]
    assert (best["name"], best["marker"], best["kind"]) == ("train_iter_#", r"^train_iter_\d+$", "annotation")
    assert (best["count"], best["ranks"], best["median_dur_ns"]) == (ITERATIONS, 1, 800_000)
    assert best["covered_ns"] == ITERATIONS * 800_000 and best["sequential"]
    span_ns = trace.summary()[0]["span_ns"]
    assert best["coverage"] == pytest.approx(ITERATIONS * 800_000 / span_ns)
    assert list(candidates["name"]) == ["train_iter_#", "loss"]  # the runtime calls are no candidates
    report = traceview.analyze(kineto, use_cache=False)
    hint = [w for w in _warnings(report) if "no steps found" in w]
    assert len(hint) == 1 and r"--step-marker '^train_iter_\d+$' (train_iter_#)" in hint[0]
    assert "loss" not in hint[0]  # covers 5% of the trace: not step-like
    # the suggested marker, passed back, gives the steps
    marker = re.search(r"--step-marker '([^']+)'", hint[0]).group(1)
    assert len(traceview.analyze(kineto, step_marker=marker, use_cache=False).table("temporal", "steps")) == ITERATIONS


def test_cli_step_marker_and_a_bad_one(kineto, monkeypatch, capsys):
    runner = CliRunner()
    ok = runner.invoke(app, ["analyze", str(kineto), "--no-cache", "--step-marker", r"^train_iter_\d+$",
                             "--format", "json"])
    assert ok.exit_code == 0, ok.output
    assert len(json.loads(ok.stdout)["analyses"]["temporal"]["tables"]["steps"]["rows"]) == ITERATIONS
    monkeypatch.setattr(sys, "argv", ["traceview", "analyze", str(kineto), "--no-cache", "--step-marker", "iter_("])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "not a valid regular expression" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_nsys_candidates_when_steps_are_named_otherwise(tmp_path):
    """The synthetic export's step_N NVTX ranges renamed to batch_N: no default steps; the top
    candidate is batch_# on both ranks, and its marker gives the original steps back."""
    work = tmp_path / "batches.sqlite"
    shutil.copyfile(NSYS_SAMPLE, work)
    work.chmod(work.stat().st_mode | stat.S_IWUSR)
    con = sqlite3.connect(work)
    con.execute("UPDATE NVTX_EVENTS SET text = 'batch_' || substr(text, 6) WHERE text LIKE 'step!_%' ESCAPE '!'")
    con.commit()
    con.close()
    original = traceview.load(NSYS_SAMPLE, use_cache=False).steps
    trace = traceview.load(work, use_cache=False)
    assert trace.steps.num_rows == 0
    candidates = step_marker_candidates(context(trace, Options()))
    # each rank's own candidates (a batch of ranks gives what each rank alone gives), best first
    best = candidates.groupby("rank", sort=True).head(1)
    steps_per_rank = original.to_pandas().groupby("rank").size()
    assert best["rank"].tolist() == steps_per_rank.index.tolist() and len(best) == 2
    assert set(best["name"]) == {"batch_#"} and set(best["marker"]) == {r"^batch_\d+$"}
    assert best["count"].tolist() == steps_per_rank.tolist() and (best["ranks"] == 1).all()
    assert "--step-marker '^batch_\\d+$' (batch_#)" in candidates_hint(candidates)
    found = trace.find_steps(best["marker"].iloc[0])
    assert found.column("step").to_pylist() == original.column("step").to_pylist()
    assert found.column("start_ns").to_pylist() == original.column("start_ns").to_pylist()


@pytest.mark.parametrize("name, shown, marker", [
    ("step_12", "step_#", r"^step_\d+$"),
    ("ProfilerStep#3", "ProfilerStep#N", r"^ProfilerStep#\d+$"),
    ("forward", "forward", r"^forward$"),
    ("Optimizer.step#SGD.step", "Optimizer.step#SGD.step", r"^Optimizer\.step#SGD\.step$"),
    ("layer (3) [x] 7", "layer (3) [x] #", r"^layer \(3\) \[x\] \d+$"),
])
def test_fold_step_name(name, shown, marker):
    assert fold_step_name(name) == (shown, marker)
    assert re.search(marker, name)


def test_shared_trace_without_steps_gets_an_honest_hint():
    """The torchrun export has no step ranges; its most repeated NVTX ops cover little of the trace
    each, so none is offered as a step marker."""
    path = require_shared() / "nsys" / "torchrun_2xh100_nccl_2026.2.sqlite"
    if not path.exists():
        pytest.skip(f"{path.name} is absent")
    trace = traceview.load(path, use_cache=False)
    assert trace.steps.num_rows == 0
    candidates = step_marker_candidates(context(trace, Options()))
    assert len(candidates) and (candidates["typical_coverage"] < 0.25).all()
    assert candidates_hint(candidates).startswith("no repeated range covers 25% of the trace")
