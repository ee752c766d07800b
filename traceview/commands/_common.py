"""Loading with a progress bar, shared by the commands."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

import traceview
from traceview.loading import find_trace_files
from traceview.model import Trace

#: below this total size loading is instant: no progress bar
PROGRESS_MIN_BYTES = 32 * 1024 * 1024


def load_with_progress(paths: Sequence[str], *, use_cache: bool, step_marker: str | None,
                       console: Console) -> Trace:
    files = find_trace_files(paths)
    total = sum(f.stat().st_size for f in files)
    if total < PROGRESS_MIN_BYTES or not console.is_terminal and os.environ.get("TRACEVIEW_PROGRESS") != "1":
        return traceview.load(files, use_cache=use_cache, step_marker=step_marker)
    with Progress(TextColumn("loading {task.description}"), BarColumn(), DownloadColumn(),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        tasks: dict[Path, int] = {}

        def progress(file: Path, done: int, size: int) -> None:
            if file not in tasks:
                tasks[file] = bar.add_task(file.name, total=max(size, 1))
            bar.update(tasks[file], completed=min(done, size))

        return traceview.load(files, use_cache=use_cache, step_marker=step_marker, progress=progress)
