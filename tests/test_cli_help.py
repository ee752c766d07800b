"""Every option's help reaches ``traceview CMD --help`` whole: rich reads ``[word]`` as markup and
silently drops it (``--comm-config`` once said "top level or )."), so brackets must be escaped."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import typer

from traceview.cli import COMMANDS, app


def _flat(text: str) -> str:
    """Text without rich's box drawing and line wrapping."""
    return re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", text)).strip()


def _option_helps(name: str) -> list[str]:
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    return [p.help for p in command.params if getattr(p, "help", None)]


@pytest.mark.parametrize("name", COMMANDS)
def test_option_help_text_is_shown_whole(name: str) -> None:
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1", "TERM": "dumb"}
    shown = subprocess.run([sys.executable, "-m", "traceview.cli", name, "--help"], capture_output=True, text=True,
                           env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    page = _flat(shown.stdout)
    for text in _option_helps(name):
        plain = _flat(text.replace("\\[", "["))
        # rich may wrap a long help between words only: compare word sequences
        assert plain in page, f"{name}: help text not shown whole: {plain!r}"
