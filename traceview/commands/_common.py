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

#: ``progress(file, bytes_done, bytes_total)``, as :func:`traceview.load` and the pipeline call it
LoadProgress = Callable[[Path, int, int], None]
#: ``progress(files_done, files_total, files_failed)``, as a job's executor calls it
JobProgress = Callable[[int, int, int], None]


def make_console() -> Console:
    """A console for standard output, wide enough for tables when output is piped (rich assumes 80)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=PIPED_WIDTH)


def _wants_bar(console: Console) -> bool:
    return console.is_terminal or os.environ.get("TRACEVIEW_PROGRESS") == "1"


@contextlib.contextmanager
def load_progress(inputs: Inputs, console: Console) -> Iterator[LoadProgress | None]:
    """A progress callback for loading ``inputs`` (a bar per file on ``console``), or None when the
    inputs are small or ``console`` is not a terminal (``TRACEVIEW_PROGRESS=1`` forces the bar)."""
    if inputs.size_bytes < PROGRESS_MIN_BYTES or not _wants_bar(console):
        yield None
        return
    # only for a bar: rich.progress and what it imports cost an unattended run ~10 ms
    from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("loading {task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=console, transient=True) as bar:
        tasks: dict[Path, TaskID] = {}

        def progress(file: Path, done: int, size: int) -> None:
            if file not in tasks:
                tasks[file] = bar.add_task(file.name, total=max(size, 1))
            bar.update(tasks[file], completed=min(done, size))

        yield progress


@contextlib.contextmanager
def job_progress(console: Console) -> Iterator[JobProgress | None]:
    """A progress callback counting a job's files as their tasks complete (None off a terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    if not _wants_bar(console):
        yield None
        return
    with Progress(TextColumn("analyzing files"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        task = bar.add_task("", total=None)

        def progress(done: int, total: int, failed: int) -> None:
            bar.update(task, completed=done, total=total, description=f"{failed} failed" if failed else "")

        yield progress


@contextlib.contextmanager
def step_progress(console: Console) -> Iterator[StepProgress | None]:
    """A progress callback for the analysis phases (a bar per phase on ``console``, standard error),
    or None when ``console`` is not a terminal (``TRACEVIEW_PROGRESS=1`` forces it;
    ``TRACEVIEW_PROGRESS=0`` turns it off)."""
    if os.environ.get("TRACEVIEW_PROGRESS") == "0" or not _wants_bar(console):
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console,
                  transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=max(total, 1))
            bar.update(tasks[phase], completed=min(done, total), total=max(total, 1))

        yield progress


def load_with_progress(paths: Sequence[str], *, use_cache: bool, step_marker: str | None,
                       console: Console, jobs: int | None = None) -> Trace:
    """The trace of ``paths`` (:func:`traceview.api.load_inputs`: the inputs found once) with a
    progress bar for big inputs, for the commands that need the trace only, parsing with ``jobs``
    processes (``--jobs``) and the command process's runtime (:mod:`traceview.runtime`)."""
    # imported here, as in every function of the commands: the CLI imports its modules at start
    from traceview import runtime
    from traceview.api import find_inputs, load_inputs

    runtime.prefer_system_memory_pool()
    inputs = find_inputs(paths)
    with load_progress(inputs, console) as progress:
        return load_inputs(inputs, step_marker=step_marker, cache=use_cache, jobs=jobs, progress=progress,
                           hooks=runtime.cli_parse_hooks())


def analyze_with_progress(paths: Sequence[str] | Inputs, options: Options, *, use_cache: bool, jobs: int | None = None,
                          whole_tables: bool = True, workers: int | None = None, scheduler: str | None = None,
                          meanwhile: Callable[[], None] | None = None) -> Report:
    """The report of ``paths`` (or inputs found already) from the one entry point
    (:func:`traceview.api.analyze`: report cache included) with a progress bar on standard error
    for big inputs (files loaded), or for a job (``workers``/``scheduler``: files analysed; the
    executors are imported only for a job), in the command process's runtime
    (:mod:`traceview.runtime`: Arrow's system pool, the heap settings around each parse).
    ``whole_tables=False``: the report is only rendered (``analyze``). ``meanwhile``: the command's
    work to do while the parse workers run (done by the time the load returns)."""
    from rich.console import Console

    from traceview import runtime
    from traceview.api import analyze, find_inputs

    runtime.prefer_system_memory_pool()
    console = Console(stderr=True)
    if workers is not None or scheduler:
        from traceview.jobs import make_executor

        if meanwhile is not None:
            meanwhile()  # this process parses nothing: the caller's work (and checks) first
        with job_progress(console) as counted:
            return analyze(paths, options, cache=use_cache, executor=make_executor(workers, scheduler,
                                                                                   progress=counted))
    inputs = find_inputs(paths)
    with load_progress(inputs, console) as progress, step_progress(console) as steps:
        report = analyze(inputs, options, cache=use_cache, jobs=jobs, progress=progress, whole_tables=whole_tables,
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
