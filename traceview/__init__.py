"""traceview: GPU profiler traces (PyTorch/Kineto JSON, Nsight Systems SQLite) into answers.

>>> import traceview
>>> report = traceview.analyze("sample_traces/synthetic_4rank")     # doctest: +SKIP
>>> report.findings                   # one row per finding, ranked, as in every report format
>>> report.table("kernels", "kernels")                              # any analysis's table
>>> trace = traceview.load("run/")    # the canonical Arrow tables, for your own questions
>>> traceview.sql("run/", "SELECT name, sum(dur_ns) FROM kernels GROUP BY name")  # SQL (docs/sql.md)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from traceview.errors import TraceFormatError, TraceviewError

if TYPE_CHECKING:
    from traceview.api import analyze
    from traceview.findings import Finding, Options
    from traceview.loading import load
    from traceview.model import Kind, RankInfo, Trace
    from traceview.report import Report
    from traceview.sqlviews import sql

#: public names loaded on first use (PEP 562): ``traceview --help`` imports this package, and
#: numpy, pyarrow and pandas would triple its start time. ``analyze`` is :func:`traceview.api.analyze`,
#: the one entry point of every front end (the CLI, the app, the Python API)
_LAZY = {"analyze": "traceview.api", "load": "traceview.loading", "Trace": "traceview.model",
         "Kind": "traceview.model", "RankInfo": "traceview.model", "Options": "traceview.findings",
         "Finding": "traceview.findings", "Report": "traceview.report", "sql": "traceview.sqlviews"}

__all__ = ["analyze", "load", "sql", "Report", "Trace", "Kind", "RankInfo", "Options", "Finding", "TraceFormatError",
           "TraceviewError"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'traceview' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
