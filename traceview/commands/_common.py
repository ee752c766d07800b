"""Loading and analysing with a progress bar (through :mod:`traceview.api`, the one entry point), and
writing outputs (``-o``), shared by the commands."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence


from traceview.errors import OutputError, output_error

if TYPE_CHECKING:
    from rich.console import Console

    from traceview.api import Inputs
    from traceview.findings import Options
    from traceview.model import Trace
    from traceview.pipeline import StepProgress
    from traceview.report import Report

#: below this total size loading is instant: no progress bar
PROGRESS_MIN_BYTES = 32 * 1024 * 1024
#: the width of piped output, as the terminal report's (``traceview.render.terminal.TEXT_WIDTH``;
#: tests/test_cli.py checks they agree): importing the renderers costs pandas, which ``info`` needs not
PIPED_WIDTH = 160



def make_console() -> Console:
    """A console for standard output, wide enough for tables when output is piped (rich assumes 80)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=PIPED_WIDTH)


def error_console() -> Console:
    """A console for standard error, where the bars go: the command's output stays clean. With
    ``TRACEVIEW_PROGRESS=1`` it draws as on a terminal (rich draws no live bar into a pipe)."""
    from rich.console import Console

    return Console(stderr=True, force_terminal=True if os.environ.get("TRACEVIEW_PROGRESS") == "1" else None)


def _wants_bar(console: Console) -> bool:
    return console.is_terminal or os.environ.get("TRACEVIEW_PROGRESS") == "1"


@contextlib.contextmanager
def step_progress(console: Console | None, enabled: bool = True) -> Iterator[StepProgress | None]:
    """A progress callback for the phases (parse, ranks, analyses, reduce, report: a bar per phase
    on ``console``, standard error), or None when ``enabled`` is False (``--no-progress``),
    ``TRACEVIEW_PROGRESS=0``, or ``console`` is not a terminal (``TRACEVIEW_PROGRESS=1`` forces it)."""
    if console is None or not enabled or os.environ.get("TRACEVIEW_PROGRESS") == "0" or not _wants_bar(console):
        yield None
        return
    # only for a bar: rich.progress and what it imports cost an unattended run ~10 ms
    from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description:>8}"), BarColumn(), TextColumn("{task.fields[figure]}"),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(phase: str, done: int, total: int) -> None:
            done, total = min(done, total), max(total, 1)
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total, figure="")
            bar.update(tasks[phase], completed=done, total=total, figure=phase_figure(phase, done, total))

        yield progress


def phase_figure(phase: str, done: int, total: int) -> str:
    """``412/1,024 MB`` for the parse (bytes), ``3/17`` for the other phases (counts)."""
    if phase == "parse":
        return f"{done / 1e6:,.0f}/{total / 1e6:,.0f} MB"
    return f"{done:,}/{total:,}"


def load_with_progress(paths: Sequence[str], *, use_cache: bool, step_marker: str | None,
                       jobs: int | None = None, show_progress: bool = True) -> Trace:
    """The trace of ``paths`` (:func:`traceview.api.load_inputs`: the inputs found once) with a
    progress bar for big inputs (the "parse" phase; ``show_progress=False``: ``--no-progress``),
    for the commands that need the trace only, parsing with ``jobs`` processes (``--jobs``) and
    the command process's runtime (:mod:`traceview.runtime`). The bar is drawn on standard error,
    only when it is a terminal."""
    # imported here, as in every function of the commands: the CLI imports its modules at start
    from traceview import runtime
    from traceview.api import find_inputs, load_inputs

    runtime.prefer_system_memory_pool()
    inputs = find_inputs(paths)
    big = inputs.size_bytes >= PROGRESS_MIN_BYTES
    with step_progress(error_console() if big else None, show_progress and big) as steps:
        return load_inputs(inputs, step_marker=step_marker, cache=use_cache, jobs=jobs, steps=steps,
                           hooks=runtime.cli_parse_hooks())


def analyze_with_progress(paths: Sequence[str] | Inputs, options: Options, *, use_cache: bool, jobs: int | None = None,
                          whole_tables: bool = True, workers: int | None = None, scheduler: str | None = None,
                          meanwhile: Callable[[], None] | None = None, show_progress: bool = True) -> Report:
    """The report of ``paths`` (or inputs found already) from the one entry point
    (:func:`traceview.api.analyze`: report cache included) with a progress bar on standard error
    (the phases: parse, analyses, reduce, report), or for a job (``workers``/``scheduler``: ranks; the
    executors are imported only for a job), in the command process's runtime
    (:mod:`traceview.runtime`: Arrow's system pool, the heap settings around each parse).
    ``whole_tables=False``: the report is only rendered (``analyze``). ``meanwhile``: the command's
    work to do while the parse workers run (done by the time the load returns).
    ``show_progress=False`` (``--no-progress``): no bar, even on a terminal."""

    from traceview import runtime
    from traceview.api import analyze, find_inputs

    runtime.prefer_system_memory_pool()
    console = error_console()
    if workers is not None or scheduler:
        from traceview.jobs import make_executor

        if meanwhile is not None:
            meanwhile()  # this process parses nothing: the caller's work (and checks) first
        with step_progress(console, show_progress) as steps:  # "ranks" as each file's ranks come back
            return analyze(paths, options, cache=use_cache, steps=steps,
                           executor=make_executor(workers, scheduler, steps=steps))
    inputs = find_inputs(paths)
    with step_progress(console, show_progress) as steps:
        report = analyze(inputs, options, cache=use_cache, jobs=jobs, whole_tables=whole_tables,
                         hooks=runtime.cli_parse_hooks(meanwhile), steps=steps)
    runtime.release_free_memory()  # the analyses' free pages, before the report is rendered
    return report


def check_output_file(path: Path) -> None:
    """Fail before any work when ``path`` (``-o FILE``) cannot be written: its folders are made and
    a probe file is written and removed, so a path under a regular file, a read-only folder or
    /proc is one line (exit 2) at once instead of a traceback after the analysis."""
    if path.is_dir():
        raise OutputError(path, "is a directory", "-o takes a file name")
    check_output_dir(path.parent, named=path)
    probe = path.with_name(path.name + ".tmp")
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise output_error(path, exc) from None


def check_output_dir(folder: Path, named: Path | None = None) -> None:
    """Make the output folder ``folder`` (and its parents) and check a file can be made in it, or
    fail with one line naming ``named`` (the user's ``-o``; default ``folder``)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # FileExistsError: a part of the path is a regular file
        raise output_error(named or folder, exc) from None
    if named is None:
        probe = folder / ".traceview-write-test"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise output_error(folder, exc) from None


def write_output_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file, then a rename)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise output_error(path, exc) from None
