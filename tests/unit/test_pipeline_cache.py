"""What the analyses share lives in one :class:`~traceview.context.AnalysisContext` per batch of ranks
(traceview/context.py), declared, never found in a global:

- each analysis reads only the derived inputs and results its spec ``requires`` (with what those
  inputs require): the pipeline runs it limited to that set, so an undeclared read raises
  :class:`~traceview.context.UndeclaredInput` instead of working by the accident of run order;
- the pipeline releases every derived input after the last analysis that declares it, and holds
  nothing once the analyses are done;
- each derived input is built at most once per context.

Checked by running the real pipeline (``traceview.pipeline.analyze_batch``) on the sample traces and
on a few shared traces."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE_TRACES, SHARED_TRACES, require_shared

import traceview
from traceview import pipeline
import traceview.analyses  # noqa: F401  (registers the derived inputs the contexts here build)
from traceview.context import AnalysisContext, UndeclaredInput, run_analyses
from traceview.findings import AnalysisResult, Options
from traceview.registry import ANALYSES, AnalysisSpec, DerivedInput, analysis_specs, derived_inputs, run_order

SAMPLES = ["synthetic_4rank", "synthetic_nsys.sqlite", "torch_cpu_mlp.json.gz", "efficiency_roofline.json.gz",
           "regression_pair/new"]
#: a few shared traces: several ranks, an Nsight export of two ranks, CUDA graphs, an AMD trace
SHARED = ["kineto/param_dlrm_8ranks_v100", "kineto/hta_trace_filter_2ranks", "nsys/torchrun_2xh100_nccl_2026.2.sqlite",
          "kineto/tracelens_vllm_piecewise_cudagraph.json.gz", "kineto/tracelens_resnet_actckpt_mi300x_rank0.json.gz"]


def _load(where: str, name: str) -> traceview.Trace:
    if where == "shared":
        path = require_shared() / name
        if not path.exists():
            pytest.skip(f"{path} is absent")
    else:
        path = SAMPLE_TRACES / name
    return traceview.load(path, use_cache=False, jobs=1)


TRACES = [("sample", n) for n in SAMPLES] + [("shared", n) for n in SHARED]
TRACE_IDS = [Path(n).name for _, n in TRACES]


@pytest.fixture(scope="module", params=TRACES, ids=TRACE_IDS)
def trace(request: pytest.FixtureRequest) -> traceview.Trace:
    return _load(*request.param)


def _counting(counts: Counter[str]) -> dict[str, DerivedInput]:
    """A copy of the declared inputs whose builds count themselves in ``counts``."""
    def wrap(declared: DerivedInput) -> Callable[[AnalysisContext], Any]:
        def build(ctx: AnalysisContext) -> Any:
            counts[declared.name] += 1
            return declared.build(ctx)
        return build

    return {name: DerivedInput(name, wrap(d), d.requires) for name, d in derived_inputs().items()}


def _recording_pipeline(monkeypatch: pytest.MonkeyPatch, inputs: dict[str, DerivedInput] | None = None,
                        ) -> list[tuple[str, set[str], set[str]]]:
    """Patch the pipeline so that its contexts use ``inputs`` (when given) and, as each analysis
    ends (before the pipeline releases what it read last), record (analysis, inputs held, results
    held); then one more entry ``("end", held, results)`` once every analysis has run."""
    seen: list[tuple[str, set[str], set[str]]] = []
    real_run = run_analyses

    def make_context(trace: traceview.Trace, options: Options | None = None) -> AnalysisContext:
        return AnalysisContext(trace, options, inputs=inputs)

    def recording(ctx: AnalysisContext, specs: list[AnalysisSpec],
                  on_result: Callable[[AnalysisSpec, AnalysisResult], None]) -> None:
        def record(spec: AnalysisSpec, result: AnalysisResult) -> None:
            on_result(spec, result)  # the pipeline's own step (the cross-rank gather) first
            seen.append((spec.name, ctx.held(), set(ctx.results)))

        real_run(ctx, specs, record)
        seen.append(("end", ctx.held(), set(ctx.results)))

    if inputs is not None:
        monkeypatch.setattr(pipeline, "AnalysisContext", make_context)
    monkeypatch.setattr(pipeline, "run_analyses", recording)
    return seen


# ------------------------------------------------------------------------------------ declarations


def test_every_requirement_names_a_declared_input_or_analysis() -> None:
    """A name in ``requires`` that nothing declares would be allowed and never built: a typo that
    hides an undeclared read. Every analysis and every input declares what it reads."""
    declared = derived_inputs()
    known = set(declared) | set(ANALYSES)
    for spec in analysis_specs():
        assert set(spec.requires) <= known, (spec.name, set(spec.requires) - known)
    for name, d in declared.items():
        assert set(d.requires) <= set(declared), (name, set(d.requires) - set(declared))


def test_reading_an_undeclared_input_or_result_raises() -> None:
    """The check the pipeline runs with bites: an analysis that reads an input, or another
    analysis's result, its spec does not require fails at once (the check below would else prove
    nothing)."""
    trace = _load("sample", "torch_cpu_mlp.json.gz")
    ctx = AnalysisContext(trace, Options())

    def reads(name: str) -> Callable[[AnalysisContext], AnalysisResult]:
        def run(c: AnalysisContext) -> AnalysisResult:
            c.input(name)
            return AnalysisResult("zz_reader")
        return run

    declared = AnalysisSpec(name="zz_declared", title="x", run=reads("activity"), requires=("activity",))
    sneaky = AnalysisSpec(name="zz_sneaky", title="x", run=reads("cpu_op_nesting"), requires=("activity",))
    results: list[str] = []
    run_analyses(ctx, [declared], lambda spec, _: results.append(spec.name))
    assert results == ["zz_declared"]
    with pytest.raises(UndeclaredInput, match="cpu_op_nesting"):
        run_analyses(ctx, [sneaky], lambda spec, _: None)
    # what a declared input requires may be read: activity is built from the comm rules and links
    with ctx.limited_to(["activity"]):
        ctx.input("classify.comm_rule_of")
        with pytest.raises(UndeclaredInput):
            ctx.input("memory.table")
    ctx.results["zz_declared"] = AnalysisResult("zz_declared")
    with ctx.limited_to(["activity"]), pytest.raises(UndeclaredInput, match="zz_declared"):
        ctx.result("zz_declared")
    with ctx.limited_to(["zz_declared"]):
        assert ctx.result("zz_declared").name == "zz_declared"


# ------------------------------------------------------------------------------------ on real traces


def test_each_analysis_reads_only_what_it_declares(trace: traceview.Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline's batch step runs every analysis (and its cross-rank gather) limited to what it
    requires: it completes, so no analysis reads anything else."""
    seen = _recording_pipeline(monkeypatch)
    batch = pipeline.analyze_batch(trace, Options())
    names = [spec.name for spec in run_order(analysis_specs())]
    assert [name for name, _, _ in seen] == [*names, "end"]
    assert sorted(batch.tables) == sorted(names)
    assert sorted(batch.gathered) == sorted(s.name for s in analysis_specs() if s.gather is not None)


def test_inputs_are_released_after_their_last_reader(trace: traceview.Trace,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """When an analysis ends, the context holds only inputs that it or a later analysis declares
    (an input is gone once its last declared reader has run), and nothing when all are done."""
    seen = _recording_pipeline(monkeypatch)
    pipeline.analyze_batch(trace, Options())
    specs = run_order(analysis_specs())
    ctx = AnalysisContext(trace, Options())  # for closure(): what each analysis may read
    last_reader: dict[str, int] = {}
    for i, spec in enumerate(specs):
        for name in ctx.closure(spec.requires):
            last_reader[name] = i
    for i, (name, held, results) in enumerate(seen[:-1]):
        assert name == specs[i].name
        still_read = ctx.closure(r for spec in specs[i:] for r in spec.requires)
        assert held <= still_read, (name, held - still_read)
        gone = {n for n, last in last_reader.items() if last < i}
        assert not held & gone, (name, held & gone)
        assert not results & gone, (name, results & gone)
    assert any(held for _, held, _ in seen[:-1]), "no input was ever held: the checks above tested nothing"
    assert seen[-1] == ("end", set(), set())


def test_each_input_is_built_once_per_context(trace: traceview.Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    counts: Counter[str] = Counter()
    seen = _recording_pipeline(monkeypatch, _counting(counts))
    pipeline.analyze_batch(trace, Options())
    assert seen[-1] == ("end", set(), set())
    assert counts["activity"] == 1 and counts["classify.codes.name"] == 1  # what nearly every analysis reads
    assert max(counts.values()) == 1, {n: c for n, c in counts.items() if c > 1}
    # and a second context builds its own (contexts share nothing)
    pipeline.analyze_batch(trace, Options())
    assert counts["activity"] == 2 and max(counts.values()) == 2


def test_a_context_used_directly_builds_once_and_keeps_what_it_built() -> None:
    """Without the pipeline (a notebook calling an analysis's helpers), a context builds each input
    on first use and keeps it: asking again returns the same object; ``release`` forgets it."""
    from traceview.analyses import idle_gaps, steps

    trace = _load("sample", "synthetic_4rank")
    counts: Counter[str] = Counter()
    ctx = AnalysisContext(trace, Options(), inputs=_counting(counts))
    first = steps.activity(ctx)
    idle_gaps.compute(ctx)
    assert steps.activity(ctx) is first and counts["activity"] == 1
    assert {"activity", "idle_gaps.tables", "classify.codes.name"} <= ctx.held()
    ctx.release(["activity"])
    assert "activity" not in ctx.held() and steps.activity(ctx) is not first and counts["activity"] == 2
    other = AnalysisContext(trace, Options(), inputs=_counting(counts))
    assert steps.activity(other) is not steps.activity(ctx)


def test_unknown_input_is_a_clear_error() -> None:
    ctx = AnalysisContext(_load("sample", "torch_cpu_mlp.json.gz"), Options())
    with pytest.raises(KeyError, match="no derived input is named 'not an input'"):
        ctx.input("not an input")


def test_shared_traces_listed_exist() -> None:
    """The shared traces above are the ones the shared folder holds (a renamed one would be skipped
    silently)."""
    require_shared()
    missing = [n for n in SHARED if not (SHARED_TRACES / n).exists()]
    assert missing == []
