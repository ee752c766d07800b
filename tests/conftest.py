"""Shared test helpers: where the real traces live, and skipping cleanly when they don't.

The tests sit in three folders, all collected from here (pyproject.toml ``testpaths``):
``unit/`` (one module or analysis at a time), ``integration/`` (whole commands, the app, jobs, real
traces end to end) and ``browser/`` (a real Chromium: the HTML report and the app). Shared helpers
stay beside this file (``builders.py``: the hand-made traces; ``fuzz_strategies.py``); every folder
is on ``sys.path``, so ``from conftest import REPO`` and ``from builders import TraceBuilder`` work
from any of them, and so do the few imports of one test module's helpers from another."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult, Options
from traceview.model import Trace

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
SAMPLE_TRACES = REPO / "sample_traces"
METRICS_DOC = REPO / "docs" / "metrics.md"

TESTS = Path(__file__).resolve().parent
for _folder in (TESTS / "browser", TESTS / "integration", TESTS / "unit", TESTS):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))


def require_shared() -> Path:
    if not SHARED_TRACES.exists():
        pytest.skip(f"real traces not available: {SHARED_TRACES} is absent (it sits beside the repo in CI)")
    return SHARED_TRACES


def context(trace: Trace, options: Options | None = None) -> AnalysisContext:
    """A fresh analysis context of ``trace`` (what the pipeline gives each analysis), for calling an
    analysis or one of its helpers directly."""
    return AnalysisContext(trace, options)


def warning_messages(result: AnalysisResult) -> list[str]:
    """Every warning of an analysis result: those of all its ranks, then the per-rank ones (each
    message once, in order)."""
    return list(dict.fromkeys([*result.warnings, *(message for _, message in result.rank_warnings)]))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Tests never read or write the user's cache."""
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
