"""Run history: every run's summary in an embedded DuckDB database, trends, and regression
detection over many runs (``traceview history add|show|check``; docs/history.md).

A feature on top of the core: a run becomes a :class:`~traceview.report.Report` through the one
pipeline (as ``traceview analyze`` makes it, report cache included), :mod:`.summary` keeps its
aggregates, :mod:`.store` writes and reads them, :mod:`.detect` finds regressions (numpy over a
runs x series matrix), :mod:`.query` selects runs and series, :mod:`.render` prints.
"""

from traceview.history.detect import DetectOptions, Detection, against_baseline, change_points
from traceview.history.query import CheckResult, ShowResult, check, parse_tags, show
from traceview.history.schema import SCHEMA_VERSION
from traceview.history.store import DEFAULT_DB, DuplicateRunError, Selection, add_runs, matrix, open_history, runs

#: names of :mod:`.summary`, imported on first use: it brings in ``traceview.compare`` (for kernel
#: names), which ``history show`` and ``check`` do not need (start time of the command)
_SUMMARY_NAMES = ("RunSummary", "files_identity", "summarize")


def __getattr__(name: str) -> object:
    if name in _SUMMARY_NAMES:
        from traceview.history import summary

        return getattr(summary, name)
    raise AttributeError(f"module 'traceview.history' has no attribute {name!r}")

__all__ = ["DEFAULT_DB", "SCHEMA_VERSION", "CheckResult", "DetectOptions", "Detection", "DuplicateRunError",
           "RunSummary", "Selection", "ShowResult", "add_runs", "against_baseline", "change_points", "check",
           "files_identity", "matrix", "open_history", "parse_tags", "runs", "show", "summarize"]
