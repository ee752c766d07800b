"""The analysis context: one trace, one set of options, and everything the analyses derive from them.

The pipeline makes one :class:`AnalysisContext` per batch of ranks it analyses (the whole trace in
memory; a worker's files in a job) and runs every :class:`~traceview.registry.AnalysisSpec` on it
in dependency order. What the analyses share is declared, never found in a global:

* a **derived input** (:class:`~traceview.registry.DerivedInput`: the GPU activity intervals, the
  steps, the launch links, the CPU-op nesting, an analysis's intermediate tables) is declared by the
  module that computes it, built at most once per context, on first use (:meth:`AnalysisContext.input`),
  and released by the pipeline after the last analysis that declares it has run;
* the **result** of another analysis (:meth:`AnalysisContext.result`) is available once that
  analysis has run: the pipeline orders analyses so that it has.

An analysis may read only what its spec ``requires`` (with what those inputs themselves require):
while it runs the context is limited to that set, so a missing declaration fails at once instead of
working by the accident of run order. A context belongs to one analysis run; two threads analysing
two traces use two contexts, which share nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from traceview.model import Trace

if TYPE_CHECKING:
    from traceview.findings import AnalysisResult, Options
    from traceview.registry import AnalysisSpec, DerivedInput


class UndeclaredInput(LookupError):
    """An analysis read an input or a result its spec does not require (a bug in the analysis)."""


class AnalysisContext:
    """What the analyses of one batch of ranks read: ``trace``, ``options``, the derived inputs
    (built once, on first use) and the results of the analyses that ran before."""

    def __init__(self, trace: Trace, options: "Options | None" = None,
                 inputs: "Mapping[str, DerivedInput] | None" = None) -> None:
        from traceview.findings import Options
        from traceview.registry import DERIVED_INPUTS

        self.trace = trace
        self.options = options if options is not None else Options()
        #: the derived inputs that may be built: those given, else the registry's (read when an
        #: input is asked for, so modules imported after the context was made count too)
        self.declared: Mapping[str, DerivedInput] = inputs if inputs is not None else DERIVED_INPUTS
        self.values: dict[str, Any] = {}
        self.results: dict[str, AnalysisResult] = {}
        #: while an analysis runs: the inputs and results it may read (None: anything, for
        #: notebooks and front ends that use a context directly)
        self.allowed: frozenset[str] | None = None

    def input(self, name: str) -> Any:
        """The derived input ``name``, built now if this context has not built it yet."""
        if self.allowed is not None and name not in self.allowed:
            raise UndeclaredInput(f"input {name!r} is read but not declared in the running analysis's requires")
        if name in self.values:
            return self.values[name]
        declared = self.declared.get(name)
        if declared is None:
            raise KeyError(f"no derived input is named {name!r}")
        value = declared.build(self)
        self.values[name] = value
        return value

    def result(self, name: str) -> "AnalysisResult":
        """The result of analysis ``name`` (which the pipeline ran before the one asking)."""
        if self.allowed is not None and name not in self.allowed:
            raise UndeclaredInput(f"result of {name!r} is read but not declared in the running analysis's requires")
        if name not in self.results:
            raise KeyError(f"analysis {name!r} has not run in this context")
        return self.results[name]

    def closure(self, names: Iterable[str]) -> frozenset[str]:
        """``names`` with every derived input they require, transitively."""
        out: set[str] = set()
        todo = list(names)
        while todo:
            name = todo.pop()
            if name in out:
                continue
            out.add(name)
            declared = self.declared.get(name)
            if declared is not None:
                todo.extend(declared.requires)
        return frozenset(out)

    @contextmanager
    def limited_to(self, names: Iterable[str]) -> Iterator["AnalysisContext"]:
        """Within the block, only ``names`` (and what they require) may be read."""
        before = self.allowed
        self.allowed = self.closure(names)
        try:
            yield self
        finally:
            self.allowed = before

    def release(self, names: Iterable[str]) -> None:
        """Forget the derived inputs and analysis results ``names`` (no analysis still to run reads them)."""
        for name in names:
            self.values.pop(name, None)
            self.results.pop(name, None)

    def held(self) -> set[str]:
        """The names of the derived inputs built and not released."""
        return set(self.values)


def last_readers(ctx: AnalysisContext, specs: "Sequence[AnalysisSpec]") -> dict[int, list[str]]:
    """For each position in ``specs`` (in run order), the derived inputs and results that no later
    analysis reads (an analysis's own result included when none reads it)."""
    last: dict[str, int] = {}
    for i, spec in enumerate(specs):
        last.setdefault(spec.name, i)
        for name in ctx.closure(spec.requires):
            last[name] = i
    out: dict[int, list[str]] = {}
    for name, i in last.items():
        out.setdefault(i, []).append(name)
    return out


def run_analyses(ctx: AnalysisContext, specs: "Sequence[AnalysisSpec]",
                 on_result: "Callable[[AnalysisSpec, AnalysisResult], None]") -> None:
    """Run ``specs`` (in run order: :func:`traceview.registry.run_order`) on ``ctx``, each limited
    to what it requires. ``on_result(spec, result)`` is called as each ends, while the inputs it
    required are still held (a cross-rank ``gather`` runs then); then every derived input and result
    that no later analysis reads is released, so the last analyses do not run beside every earlier
    one's intermediate tables."""
    releases = last_readers(ctx, specs)
    for i, spec in enumerate(specs):
        with ctx.limited_to(spec.requires):
            result = spec.run(ctx)
        ctx.results[spec.name] = result
        on_result(spec, result)
        ctx.release(releases.get(i, ()))
        del result
