"""Analyses: one module each, a pure function ``Trace + Options -> AnalysisResult``.

Every module of this package that declares ``SPEC`` (a :class:`traceview.registry.AnalysisSpec`) is
an analysis: importing the package imports them all and registers their specs, so adding an analysis
is adding one module. :func:`run_all` runs them on one trace in memory; the report pipeline
(:mod:`traceview.pipeline`) runs them rank by rank and reduces, which gives the same figures.
"""

from __future__ import annotations

import importlib
import pkgutil

from traceview.findings import AnalysisResult, Options
from traceview.model import Trace
from traceview.registry import AnalysisSpec, analysis_specs, register_analysis

__all__ = ["run_all", "run_analysis", "specs"]


def _register_modules() -> None:
    for module in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{module.name}")
        spec = getattr(mod, "SPEC", None)
        if isinstance(spec, AnalysisSpec):
            register_analysis(spec)


def specs() -> list[AnalysisSpec]:
    """Every analysis, in run and display order."""
    return analysis_specs()


def run_analysis(spec: AnalysisSpec, trace: Trace, options: Options) -> AnalysisResult:
    """One analysis on a whole trace: its per-rank function, then (when it has one) its cross-rank
    reduction over the trace's own inputs."""
    result = spec.run(trace, options)
    if spec.reduce is not None and spec.gather is not None:
        cross = spec.reduce([spec.gather(trace, options)], options)
        result.tables.update(cross.tables)
        result.findings.extend(cross.findings)
        result.warnings.extend(cross.warnings)
    return result


def run_all(trace: Trace, options: Options | None = None, only: list[str] | None = None) -> dict[str, AnalysisResult]:
    """Run every analysis (or ``only`` those) on ``trace`` in memory and return results by name."""
    options = options or Options()
    return {spec.name: run_analysis(spec, trace, options) for spec in specs()
            if only is None or spec.name in only}


_register_modules()
