"""The help of the commands that take traces names the input formats and docs/formats.md, whose
table lists every registered input format (the registry is the truth; the doc must follow it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from traceview.discovery import registered_formats

ROOT = Path(__file__).resolve().parents[2]


def _page(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1", "TERM": "dumb"}
    shown = subprocess.run([sys.executable, "-m", "traceview.cli", *args, "--help"], capture_output=True, text=True,
                           env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    return re.sub(r"\s+", " ", shown.stdout)


@pytest.mark.parametrize("command", [("analyze",), ("export-perfetto",), ("history",), ("redact",)])
def test_trace_arguments_name_the_formats_and_their_list(command: tuple[str, ...]) -> None:
    page = _page(*command)
    assert "docs/formats.md" in page
    for name in ("Kineto", "Nsight Systems", "XSpace"):
        assert name in page, (command, name)


def test_the_formats_doc_lists_every_registered_format() -> None:
    table = {m.group(1) for m in re.finditer(r"^\| `([a-z0-9-]+)` \|", (ROOT / "docs" / "formats.md").read_text(),
                                             re.M)}
    traces = {f.name for f in registered_formats() if f.suffixes}
    # rocprof-json is documented in the rocprof row (one parser, two layouts)
    missing = traces - table - {"rocprof-json"}
    assert not missing, f"docs/formats.md has no row for {sorted(missing)}"
