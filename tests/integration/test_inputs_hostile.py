"""Hostile inputs and outputs (issue 11): a FIFO, an unreadable directory, ``-o`` where nothing can be
written, a huge kernel name. Each gets one line and exit 2 (or loads within bounded memory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import traceview
from traceview.analyses import classify
from traceview.errors import TraceFormatError

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "synthetic_nsys.sqlite"


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRACEVIEW_DEBUG"}
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)


def assert_one_line_exit_2(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def kineto_trace(path: Path, names: list[str]) -> Path:
    events = [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": 100 + 10 * i, "dur": 5,
               "args": {"device": 0, "stream": 7, "correlation": i + 1}} for i, n in enumerate(names)]
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 1}}))
    return path


# ---------------------------------------------------------------------------------- inputs


def test_fifo_input_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    # before the fix the CLI opened the FIFO and waited for a writer forever
    proc = run_cli("analyze", str(fifo), timeout=60)
    assert_one_line_exit_2(proc, str(fifo), "not a regular file", "FIFO")
    with pytest.raises(TraceFormatError, match="not a regular file"):
        traceview.load(fifo, use_cache=False)


def test_fifo_is_not_an_nsight_export(tmp_path):
    from traceview.parsers.nsys import looks_like_nsys, parse_nsys

    fifo = tmp_path / "x.sqlite"
    os.mkfifo(fifo)
    assert not looks_like_nsys(fifo)
    with pytest.raises(TraceFormatError, match="not a regular file"):
        parse_nsys(fifo)


def test_unreadable_directory_is_cannot_read_not_empty(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    folder.mkdir()
    kineto_trace(folder / "rank0.json", ["k"])
    real_scandir = os.scandir

    def refusing_scandir(path=None):  # what the OS answers a user without read permission
        if Path(os.fsdecode(path)) == folder:
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", refusing_scandir)
    with pytest.raises(TraceFormatError) as exc:
        traceview.load(folder, use_cache=False)
    assert "permission denied" in str(exc.value) and "no trace files" not in str(exc.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a directory whatever its mode")
def test_unreadable_directory_for_real(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    kineto_trace(folder / "rank0.json", ["k"])
    folder.chmod(0)
    try:
        assert_one_line_exit_2(run_cli("analyze", str(folder)), "permission denied")
    finally:
        folder.chmod(0o755)


# --------------------------------------------------------------------------------- outputs


def _blocked_outputs(tmp_path: Path) -> list[tuple[str, str]]:
    """(output path, what the line must say): under a regular file, in /proc, in a read-only place."""
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    cases = [(str(plain / "report.json"), "not a directory"), ("/proc/traceview-report.json", "cannot write")]
    # sysfs refuses new files even to root: a read-only directory every user has
    if Path("/sys/kernel").is_dir():
        cases.append(("/sys/kernel/traceview-report.json", "cannot write"))
    return cases


@pytest.mark.parametrize("command", ["analyze", "convert"])
def test_output_that_cannot_be_written_is_one_line(tmp_path, command):
    for target, said in _blocked_outputs(tmp_path):
        args = ["-o", target] + (["-f", "json"] if command == "analyze" else [])
        proc = run_cli(command, str(SAMPLE), "--no-cache", *args)
        assert_one_line_exit_2(proc, target, said)
        assert not Path(target).exists()


# ---------------------------------------------------------------------------- huge names


def test_names_categorical_memory_does_not_scale_with_longest_name(tmp_path):
    """Thirty kernel names, one of them 1 MB: a fixed-width string array of 31 x 1 MB x 4 bytes
    (124 MB) was built before; the names themselves are ~1 MB."""
    names = ["k" * (1 << 20)] + [f"short_{i}" for i in range(30)]
    trace = traceview.load(kineto_trace(tmp_path / "big.json", names), use_cache=False)
    rows = np.arange(trace.num_events)
    tracemalloc.start()
    try:
        cat = classify.names_categorical(trace, rows)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak_bytes < 20 << 20, peak_bytes
    assert sorted(cat.categories) == sorted(set(names) | {""})
    assert [str(v) for v in cat] == trace.events.column("name").to_pylist()
