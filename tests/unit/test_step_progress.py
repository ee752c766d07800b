"""The pipeline's step-progress hook: the phases in order on a sample trace, nothing drawn off a
terminal, and the same standard output with the bar forced on."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from traceview.commands._common import step_progress
from traceview.findings import Options
from traceview.pipeline import analyze

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "efficiency_roofline.json.gz"


def test_steps_come_in_phase_order() -> None:
    seen: list[tuple[str, int, int]] = []
    analyze(SAMPLE, Options(), use_cache=False, steps=lambda p, d, t: seen.append((p, d, t)))
    phases = [p for p, _, _ in seen]
    first = {p: phases.index(p) for p in dict.fromkeys(phases)}
    assert list(first) == ["analyses", "reduce", "report"]
    analyses = [(d, t) for p, d, t in seen if p == "analyses"]
    total = analyses[0][1]
    assert total > 1 and analyses == [(i, total) for i in range(total + 1)]  # one call per analysis
    assert seen[-1] == ("report", 1, 1)


def test_no_bar_off_a_terminal(monkeypatch) -> None:
    monkeypatch.delenv("TRACEVIEW_PROGRESS", raising=False)
    err = io.StringIO()
    with step_progress(Console(file=err, force_terminal=False)) as steps:
        assert steps is None
    assert err.getvalue() == ""


def _run(env_progress: str, tmp: Path) -> subprocess.CompletedProcess[bytes]:
    import os

    env = {**os.environ, "TRACEVIEW_PROGRESS": env_progress, "TRACEVIEW_CACHE_DIR": str(tmp)}
    return subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(SAMPLE), "--no-cache", "-f", "json"],
                          capture_output=True, env=env, check=True)


def test_stdout_identical_with_forced_progress(tmp_path: Path) -> None:
    plain, forced = _run("0", tmp_path), _run("1", tmp_path)
    assert forced.stdout == plain.stdout and plain.stdout
