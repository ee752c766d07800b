"""Analyses: one module each, a pure function ``Trace + Options -> AnalysisResult``.

Modules register themselves with :func:`register`; :func:`run_all` runs every registered analysis
(the CLI, reports and web app all go through it). Importing this package imports every analysis
module so the registry is complete.
"""

from __future__ import annotations

import importlib
from typing import Callable

from traceview.findings import AnalysisResult, Options
from traceview.model import Trace

AnalysisFn = Callable[[Trace, Options], AnalysisResult]

#: name -> function, in the order they run (and are shown)
REGISTRY: dict[str, AnalysisFn] = {}

#: modules holding analyses, in display order
ANALYSIS_MODULES = (
    "temporal",
    "idle_gaps",
    "launch_overhead",
    "communication",
    "kernels",
    "synchronization",
)


def register(name: str) -> Callable[[AnalysisFn], AnalysisFn]:
    def decorator(fn: AnalysisFn) -> AnalysisFn:
        REGISTRY[name] = fn
        return fn

    return decorator


def _import_all() -> None:
    for module in ANALYSIS_MODULES:
        try:
            importlib.import_module(f"{__name__}.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{module}":
                raise


def run_all(trace: Trace, options: Options | None = None, only: list[str] | None = None) -> dict[str, AnalysisResult]:
    """Run every registered analysis (or ``only`` those) and return results by name."""
    _import_all()
    options = options or Options()
    results: dict[str, AnalysisResult] = {}
    for name, fn in REGISTRY.items():
        if only is not None and name not in only:
            continue
        results[name] = fn(trace, options)
    return results
