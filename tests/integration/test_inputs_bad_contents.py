"""Files whose contents are not a trace (issue 30, item 9): a gzip file cut inside its header or
first block says it is truncated or corrupt (not "is empty"), and a JSON document with no event
object at all is not a trace. Each is one line, exit 2, no traceback, through the CLI."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRACEVIEW_DEBUG"}
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=REPO)


def one_line_exit_2(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def small_gzip_trace() -> bytes:
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 5,
               "args": {"device": 0, "stream": 7, "correlation": 1}}]
    return gzip.compress(json.dumps({"traceEvents": events}).encode())


@pytest.mark.parametrize("cut", [2, 5, 10, 14, 18])
def test_cut_gzip_is_truncated_not_empty(tmp_path: Path, cut: int) -> None:
    data = small_gzip_trace()
    assert len(data) > 18
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(data[:cut])  # 10 bytes: the gzip header alone
    line = one_line_exit_2(run_cli("analyze", str(path), "--no-cache"))
    assert "rank0.json.gz" in line
    assert "empty" not in line, line
    assert "truncated" in line or "corrupt" in line, line


def test_gzip_of_nothing_is_still_empty(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(b""))
    assert "is empty" in one_line_exit_2(run_cli("analyze", str(path), "--no-cache"))


@pytest.mark.parametrize("text", ["[1,2,3]", '{"traceEvents": [1, "two", [3]]}', '["a"]'])
def test_no_event_object_is_not_a_trace(tmp_path: Path, text: str) -> None:
    path = tmp_path / "trace.json"
    path.write_text(text)
    line = one_line_exit_2(run_cli("analyze", str(path), "--no-cache"))
    assert "trace.json" in line and "not a trace" in line and "event object" in line, line


def test_an_empty_events_array_is_still_an_empty_trace(tmp_path: Path) -> None:
    # not every file without events is refused: an empty array is a trace of nothing (as before)
    path = tmp_path / "trace.json"
    path.write_text('{"traceEvents": []}')
    proc = run_cli("analyze", str(path), "--no-cache")
    assert proc.returncode == 0, proc.stderr
