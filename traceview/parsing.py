"""What a parser gets from its caller besides the file: how many processes it may use, and the hooks
of the process it runs in (:class:`ParseHooks`).

Parsers import this module, never the loader (``traceview.loading`` imports the parsers). The
hooks default to doing nothing: ``traceview.load`` called from Python changes nothing in its host
process. The ``traceview`` command passes its own (``traceview.runtime.cli_parse_hooks``: glibc's
heap settings around a parse, its free pages handed back after, the command's imports while the
parse workers run).
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, ContextManager

#: ``progress(bytes_done, bytes_total)`` of one file's parse
ProgressFn = Callable[[int, int], None]

#: Below this much input, parsing in several processes costs more than it saves (process start,
#: shipping columns back): measured in benchmarks/README.md ("Parallel parse").
PARALLEL_MIN_BYTES = 32 * 1024 * 1024


def do_nothing() -> None:
    """The default of every hook: a library call leaves its host process as it found it."""


def no_heap_settings() -> ContextManager[None]:
    """The default heap hook: the parse runs with whatever the host process's allocator does."""
    return contextlib.nullcontext()


class Once:
    """``work``, run at most once however often it is called (from any thread); an error it raises
    reaches the first caller and it counts as run. The parse calls it as soon as it can (while its
    workers run, else before it parses) and the loader once more at the end, so the caller's code
    after ``load`` can rely on it having run."""

    def __init__(self, work: Callable[[], None]) -> None:
        self.work: Callable[[], None] | None = work
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            work, self.work = self.work, None
        if work is not None:
            work()


@dataclass(frozen=True)
class ParseHooks:
    """What the process a parse runs in lends it (each defaults to nothing):

    ``heap``: a context manager the whole parse runs in (worker processes forked inside it inherit
    what it set); ``release_memory``: called where a parse has just freed much memory (after it,
    between an export's phases); ``meanwhile``: the caller's own work, called once, as soon as the
    parse's worker processes run (else before a serial parse), so that it overlaps the parse.
    Module-level functions pickle: the hooks travel to worker processes (without ``meanwhile``,
    which runs in the caller's process only: :meth:`for_worker`)."""

    heap: Callable[[], ContextManager[None]] = no_heap_settings
    release_memory: Callable[[], None] = do_nothing
    meanwhile: Callable[[], None] = do_nothing

    def for_worker(self) -> "ParseHooks":
        """These hooks for a worker process (the caller's work runs in the caller's process)."""
        return replace(self, meanwhile=do_nothing)


#: the hooks of a library call: none
NO_HOOKS = ParseHooks()


def cache_dir() -> Path:
    """traceview's cache folder (the trace cache's, and where a parser keeps files it derives, such as
    the SQLite export of an Nsight report): ``$TRACEVIEW_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/traceview``, else ``~/.cache/traceview``."""
    root = os.environ.get("TRACEVIEW_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "traceview" if xdg else Path.home() / ".cache" / "traceview"


def default_jobs() -> int:
    """The processes a parse may use when the caller does not say (``jobs=None``): the cores this
    process may run on (its CPU affinity) in a main process, and 1 in a worker process (a job's
    workers already share the cores)."""
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def resolve_jobs(jobs: int | None) -> int:
    """``--jobs``: None means :func:`default_jobs`; anything else at least 1."""
    return default_jobs() if jobs is None else max(1, int(jobs))


def stop_leftover_workers(before: set[int | None]) -> None:
    """End the worker processes started since ``before`` (pids of the children then) that outlived
    their pool's shutdown. When a task fails while workers are still starting, CPython 3.11's
    ProcessPoolExecutor can leave a worker waiting for a task that never comes, and interpreter
    exit then waits for it forever (seen under pytest with the serial fallback of a parse)."""
    import multiprocessing

    for child in multiprocessing.active_children():
        if child.pid not in before:
            child.terminate()
            child.join(5)
