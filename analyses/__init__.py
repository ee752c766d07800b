"""Analyses: one module each, a pure function ``Trace + Options -> AnalysisResult``.

Every module of this package that declares ``SPEC`` (a :class:`traceview.registry.AnalysisSpec`) is
an analysis: importing the package imports them all and registers their specs, so adding an analysis
is adding one module. :func:`run_all` runs them on one trace in memory; the report pipeline
(:mod:`traceview.pipeline`) runs them rank by rank and reduces, which gives the same figures.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

from traceview.findings import AnalysisResult, Options
from traceview.model import Trace
from traceview.registry import AnalysisSpec, analysis_specs, register_analysis

__all__ = ["drop_unread_inputs", "inputs_read", "run_all", "run_analysis", "specs"]


#: per analysis, the cached inputs its module declares it reads (``CACHED_INPUTS``); None: it
#: declares none, so it may read any
_INPUTS: dict[str, frozenset[str] | None] = {}


def _register_modules() -> None:
    for module in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{module.name}")
        spec = getattr(mod, "SPEC", None)
        if isinstance(spec, AnalysisSpec):
            register_analysis(spec)
            inputs = getattr(mod, "CACHED_INPUTS", None)
            _INPUTS[spec.name] = frozenset(inputs) if inputs is not None else None


def inputs_read(names: Iterable[str]) -> frozenset[str] | None:
    """The cached inputs (``steps.cached`` names) the analyses ``names`` declare they read; None
    when one of them declares none (it may read any)."""
    out: set[str] = set()
    for name in names:
        inputs = _INPUTS.get(name)
        if inputs is None:
            return None
        out |= inputs
    return frozenset(out)


def drop_unread_inputs(trace: Trace, still_to_run: Iterable[str]) -> None:
    """Forget the cached inputs of ``trace`` that some analysis declares and none of the analyses
    ``still_to_run`` reads: the pipeline calls this as each analysis ends, else the last analyses
    ran beside every earlier one's inputs (~70 MB on the 141 MB benchmark trace). Inputs no
    analysis declares stay until ``steps.clear_cache``."""
    from .steps import drop_inputs

    keep = inputs_read(still_to_run)
    if keep is not None:
        drop_inputs(trace, keep, frozenset().union(*(i for i in _INPUTS.values() if i is not None)))


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
