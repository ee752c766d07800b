"""Shared test helpers: where the real traces live, and skipping cleanly when they don't."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
SAMPLE_TRACES = REPO / "sample_traces"
METRICS_DOC = REPO / "docs" / "metrics.md"

sys.path.insert(0, str(Path(__file__).resolve().parent))


def require_shared() -> Path:
    if not SHARED_TRACES.exists():
        pytest.skip(f"real traces not available: {SHARED_TRACES} is absent (it sits beside the repo in CI)")
    return SHARED_TRACES


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Tests never read or write the user's cache."""
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
