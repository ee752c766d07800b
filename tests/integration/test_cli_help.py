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


def _help(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args, "--help"], capture_output=True, text=True,
                          env=env, timeout=120)


#: typer's own type labels, which read as markup or Python rather than as what to type
RAW_TYPES = re.compile(r"<(str|int|float|bool|path|int range|float range|list\[[a-z]+\])>")


@pytest.mark.parametrize("name", COMMANDS)
def test_help_has_an_example_and_readable_value_names(name: str) -> None:
    shown = _help(name)
    assert shown.returncode == 0, shown.stderr
    assert "Example" in shown.stdout, f"{name} --help has no example"
    assert not RAW_TYPES.search(shown.stdout), RAW_TYPES.findall(shown.stdout)


def test_bracketed_words_survive_and_values_are_named() -> None:
    page = _flat(_help("check").stdout)
    assert "TOML rules file ([check] table; options override it)." in page
    assert "--max-idle TEXT" in page and "--noise-k NUMBER" in page and "-j, --jobs N" in page
    assert "--config PATH" in page and "Usage: traceview check [OPTIONS] {PATH}" in page
    root = _help()
    assert root.returncode == 0 and "--version" in root.stdout and "Example" in root.stdout


def test_version() -> None:
    import traceview

    shown = subprocess.run([sys.executable, "-m", "traceview.cli", "--version"], capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"traceview {traceview.__version__}"
