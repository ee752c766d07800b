"""The pipeline drops each cached analysis input once no analysis left to run declares it
(``CACHED_INPUTS`` of each analysis module, ``traceview.analyses.drop_unread_inputs``): a module
must list every input it reads, else the input may be dropped before it runs and be computed twice
(the same figures, more time). Checked on the sample traces and every shared trace by running the
analyses in the pipeline's order, dropping as it does, and recording which inputs each one asks for."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES, SHARED_TRACES, require_shared

import traceview
from traceview import pipeline
from traceview.analyses import drop_unread_inputs, inputs_read, specs, steps
from traceview.findings import Options

SAMPLES = ["synthetic_4rank", "synthetic_nsys.sqlite", "torch_cpu_mlp.json.gz", "efficiency_roofline.json.gz",
           "regression_pair/new"]
SHARED = sorted([*SHARED_TRACES.glob("kineto/*"), *SHARED_TRACES.glob("nsys/*.sqlite")]) \
    if SHARED_TRACES.exists() else []


def _undeclared_reads(path: Path) -> dict[str, set[str]]:
    """Per analysis, the cached inputs it asked for that its module does not list."""
    trace = traceview.load(path, use_cache=False, jobs=1)
    todo = [spec.name for spec in specs()]
    undeclared: dict[str, set[str]] = {}
    for rank in trace.rank_ids:
        sub, rows = pipeline.select_rank(trace, rank)
        steps.clear_cache()
        steps.names_read()
        for i, spec in enumerate(specs()):
            pipeline.run_spec(spec, sub, Options(), rows, True, todo[i + 1:])  # dropping as the pipeline does
            missing = steps.names_read() - (inputs_read([spec.name]) or set())
            if missing:
                undeclared.setdefault(spec.name, set()).update(missing)
    steps.clear_cache()
    return undeclared


def test_every_analysis_declares_its_inputs() -> None:
    assert all(inputs_read([spec.name]) is not None for spec in specs())


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_traces_every_input_declared(name: str) -> None:
    assert _undeclared_reads(SAMPLE_TRACES / name) == {}


@pytest.mark.parametrize("path", SHARED or [None], ids=lambda p: p.name if p else "absent")
def test_shared_traces_every_input_declared(path: Path | None) -> None:
    require_shared()
    if path is None:
        pytest.skip("no traces in the shared folder")
    assert _undeclared_reads(path) == {}


def test_drop_keeps_what_a_later_analysis_reads() -> None:
    trace = traceview.load(SAMPLE_TRACES / "torch_cpu_mlp.json.gz", use_cache=False, jobs=1)
    other = traceview.load(SAMPLE_TRACES / "torch_cpu_mlp.json.gz", use_cache=False, jobs=1)
    steps.clear_cache()
    first = steps.activity(trace, Options())
    steps.activity(other, Options())
    steps.cached(trace, "declared by no analysis", Options(), lambda: 1)
    drop_unread_inputs(trace, ["memory", "efficiency"])  # efficiency reads the activity context
    assert steps.activity(trace, Options()) is first
    drop_unread_inputs(trace, ["memory"])  # memory does not: dropped (made again if asked)
    assert steps.held(trace) == {"declared by no analysis"}  # an input no analysis declares stays
    assert "activity" in steps.held(other)  # another trace's inputs stay
    assert steps.activity(trace, Options()) is not first
    steps.clear_cache()


def test_an_analysis_declaring_nothing_keeps_every_input() -> None:
    """An analysis with no ``CACHED_INPUTS`` (here: a name no module registers) may read any input."""
    trace = traceview.load(SAMPLE_TRACES / "torch_cpu_mlp.json.gz", use_cache=False, jobs=1)
    steps.clear_cache()
    steps.activity(trace, Options())
    assert inputs_read(["memory", "not an analysis"]) is None
    drop_unread_inputs(trace, ["memory", "not an analysis"])
    assert "activity" in steps.held(trace)
    steps.clear_cache()


def test_pipeline_drops_inputs_as_analyses_end() -> None:
    """Before each analysis no input is held that only the analyses done read; none after the last."""
    trace = traceview.load(SAMPLE_TRACES / "efficiency_roofline.json.gz", use_cache=False, jobs=1)
    steps.clear_cache()
    held_before: list[set[str]] = []
    real_run_spec = pipeline.run_spec

    def recording(spec, *args):  # type: ignore[no-untyped-def]
        held_before.append(steps.held(trace))
        return real_run_spec(spec, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "run_spec", recording)
        outputs = pipeline.run_specs(trace, specs(), Options(), None, True)
    names = [spec.name for spec in specs()]
    assert list(outputs) == names
    for i, held in enumerate(held_before):
        assert held <= (inputs_read(names[i:]) or set()), names[i]
    assert any(held_before), "the analyses cached nothing: the check above tested nothing"
    assert not steps.held(trace) & (inputs_read(names) or set())
    steps.clear_cache()
