"""Loading with a progress bar, and writing outputs (``-o``), shared by the commands."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, Iterator, Sequence

from rich.console import Console
from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TaskID, TextColumn,
                           TimeRemainingColumn)

import traceview
from traceview.errors import OutputError, output_error
from traceview.loading import find_trace_files
from traceview.model import Trace

#: below this total size loading is instant: no progress bar
PROGRESS_MIN_BYTES = 32 * 1024 * 1024

#: ``progress(file, bytes_done, bytes_total)``, as :func:`traceview.load` and the pipeline call it
LoadProgress = Callable[[Path, int, int], None]
#: ``progress(files_done, files_total, files_failed)``, as a job's executor calls it
JobProgress = Callable[[int, int, int], None]


def _wants_bar(console: Console) -> bool:
    return console.is_terminal or os.environ.get("TRACEVIEW_PROGRESS") == "1"


@contextlib.contextmanager
def load_progress(paths: Sequence[str], console: Console) -> Iterator[LoadProgress | None]:
    """A progress callback for loading ``paths`` (a bar per file on ``console``), or None when the
    inputs are small or ``console`` is not a terminal (``TRACEVIEW_PROGRESS=1`` forces the bar)."""
    files = find_trace_files(paths)
    total = sum(f.stat().st_size for f in files)
    if total < PROGRESS_MIN_BYTES or not _wants_bar(console):
        yield None
        return
    with Progress(TextColumn("loading {task.description}"), BarColumn(), DownloadColumn(),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        tasks: dict[Path, TaskID] = {}

        def progress(file: Path, done: int, size: int) -> None:
            if file not in tasks:
                tasks[file] = bar.add_task(file.name, total=max(size, 1))
            bar.update(tasks[file], completed=min(done, size))

        yield progress


@contextlib.contextmanager
def job_progress(console: Console) -> Iterator[JobProgress | None]:
    """A progress callback counting a job's files as their tasks complete (None off a terminal)."""
    if not _wants_bar(console):
        yield None
        return
    with Progress(TextColumn("analyzing files"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        task = bar.add_task("", total=None)

        def progress(done: int, total: int, failed: int) -> None:
            bar.update(task, completed=done, total=total, description=f"{failed} failed" if failed else "")

        yield progress


def load_with_progress(paths: Sequence[str], *, use_cache: bool, step_marker: str | None,
                       console: Console) -> Trace:
    """:func:`traceview.load` with a progress bar for big inputs (the commands that need a Trace)."""
    with load_progress(paths, console) as progress:
        return traceview.load(list(paths), use_cache=use_cache, step_marker=step_marker, progress=progress)


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
