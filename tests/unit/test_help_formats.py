"""The help of the commands that take traces names every registered input format, from the registry."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from traceview.commands.format_help import format_list
from traceview.discovery import registered_formats
from traceview.registry import INPUT_FORMATS, InputFormat, register_input_format


def _page(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1", "TERM": "dumb"}
    shown = subprocess.run([sys.executable, "-m", "traceview.cli", *args, "--help"], capture_output=True, text=True,
                           env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    return re.sub(r"\s+", " ", shown.stdout)


@pytest.mark.parametrize("command", [("analyze",), ("export-perfetto",), ("history",)])
def test_trace_arguments_list_every_trace_format(command: tuple[str, ...]) -> None:
    page = _page(*command)
    traces = [f for f in registered_formats() if f.suffixes]
    assert {"kineto", "nsys", "xspace", "rocprof"} <= {f.name for f in traces}
    for fmt in traces:
        assert fmt.description in page, (command, fmt.name)
    assert "Nsight Compute CSV export" not in page  # joined with --ncu, not a trace given as a path


def test_redact_lists_the_formats_it_can_redact() -> None:
    page = _page("redact")
    for fmt in registered_formats():
        if fmt.suffixes:
            assert (fmt.description in page) == (fmt.redact is not None), fmt.name


def test_a_new_format_appears_by_itself() -> None:
    def never(_path: Path, _head: bytes) -> bool:
        return False

    fmt = InputFormat(name="test-fmt", description="Test profiler dump (.tpd)", sniff=never,
                      parse=lambda *_a, **_k: None, suffixes=(".tpd",))  # type: ignore[arg-type, return-value]
    registered_formats()
    register_input_format(fmt)
    try:
        assert "Test profiler dump (.tpd)" in format_list()
        assert "Test profiler dump (.tpd)" not in format_list(redactable=True)  # it has no redaction
    finally:
        INPUT_FORMATS.pop("test-fmt")
    assert "Test profiler dump" not in format_list()
