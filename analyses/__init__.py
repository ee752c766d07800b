"""Analyses: one module each, a pure function ``AnalysisContext -> AnalysisResult``.

Every module of this package that declares ``SPEC`` (a :class:`traceview.registry.AnalysisSpec`) is
an analysis: importing the package imports them all, which registers their specs and the derived
inputs they declare (``traceview.registry.register_input``), so adding an analysis is adding one
module. :func:`run_all` runs them on one trace in memory, as the report pipeline
(:mod:`traceview.pipeline`) does, which gives the same figures.
"""

from __future__ import annotations

import importlib
import pkgutil

from traceview.context import AnalysisContext, run_analyses
from traceview.findings import AnalysisResult, Options
from traceview.model import Trace
from traceview.registry import AnalysisSpec, analysis_specs, register_analysis, with_requirements

__all__ = ["run_all", "specs"]


def register_modules() -> None:
    """Import every module of the package and register its ``SPEC``."""
    for module in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{module.name}")
        spec = getattr(mod, "SPEC", None)
        if isinstance(spec, AnalysisSpec):
            register_analysis(spec)


def specs() -> list[AnalysisSpec]:
    """Every analysis, in display order."""
    return analysis_specs()


def run_all(trace: Trace, options: Options | None = None, only: list[str] | None = None, *,
            context: AnalysisContext | None = None) -> dict[str, AnalysisResult]:
    """Run every analysis (or ``only`` those, with the analyses they require) on ``trace`` in memory
    and return the results by name (of ``only`` when given), each with its cross-rank step. On
    ``context`` when given (a context of ``trace``, whose derived inputs other callers share)."""
    chosen = [s for s in specs() if only is None or s.name in only]
    ctx = context if context is not None else AnalysisContext(trace, options or Options())
    results: dict[str, AnalysisResult] = {}

    def keep(spec: AnalysisSpec, result: AnalysisResult) -> None:
        if spec.reduce is not None and spec.gather is not None:
            with ctx.limited_to(spec.requires):
                cross = spec.reduce([spec.gather(ctx)], ctx.options)
            result.tables.update(cross.tables)
            result.findings.extend(cross.findings)
            result.warnings.extend(cross.warnings)
        results[spec.name] = result

    run_analyses(ctx, with_requirements(chosen), keep)
    return {s.name: results[s.name] for s in chosen}


register_modules()
