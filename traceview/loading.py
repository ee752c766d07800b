"""Loading traces: the files found (:mod:`traceview.discovery`), each parsed or read from the trace
cache (:mod:`traceview.trace_cache`), in this process or side by side in worker processes, their
ranks numbered across files (:mod:`traceview.rank_planning`) and concatenated into one :class:`Trace`.

``traceview.load(path)`` is the entry point for notebooks and the CLI alike. Called from Python it
changes nothing in its host process: the ``traceview`` command passes its heap settings and its
own work for meanwhile explicitly (``hooks``: :class:`traceview.parsing.ParseHooks`, made by
``traceview.runtime.cli_parse_hooks``), and ``--jobs`` as ``jobs``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable

from traceview import parsing
from traceview.discovery import InputFile, Inputs, discover, find_trace_files, inspect_file
from traceview.model import Trace
from traceview.parsing import NO_HOOKS, Once, ParseHooks, ProgressFn, resolve_jobs, stop_leftover_workers
from traceview.rank_planning import assign_ranks
from traceview.trace_cache import entry_path, read_cached_trace, write_cached_trace

#: ``progress(file, bytes_done, bytes_total)`` of a load
LoadProgressFn = Callable[[Path, int, int], None]

__all__ = ["load", "load_file", "load_input", "find_trace_files"]


def load(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | Inputs,
    *,
    use_cache: bool = True,
    progress: LoadProgressFn | None = None,
    step_marker: str | None = None,
    jobs: int | None = None,
    hooks: ParseHooks | None = None,
) -> Trace:
    """Load one or more trace files or directories into one :class:`Trace`.

    ``paths``: files and folders, or the :class:`traceview.discovery.Inputs` a caller already
    found (the files are then not looked for again). ``jobs``: processes a big Kineto file, or many
    files, are parsed with (None: the cores available; 1: this process only); the Trace is the same
    whatever it is. ``hooks``: what the calling process lends the parse (the ``traceview`` command:
    its heap settings, and its own work to run while the parse workers run, which has run by the
    time this returns); None: nothing, and nothing process-wide is changed.

    Ranks come from each file (``distributedInfo``), else from its name (``rank3``, ``worker3``,
    ``rank-3``, ``_rank_3``), else each unresolved file gets a distinct unused rank and a warning.
    Two files claiming the same rank raise :class:`DuplicateRankError` naming both.
    """
    inputs = paths if isinstance(paths, Inputs) else discover(paths)
    hooks = hooks or NO_HOOKS
    meanwhile = Once(hooks.meanwhile)
    hooks = replace(hooks, meanwhile=meanwhile)
    workers = resolve_jobs(jobs)
    if workers > 1 and _spread_over_files(inputs.files, workers):
        traces = _load_in_processes(inputs.files, use_cache, progress, step_marker, workers, hooks)
    else:  # one file at a time, each big one parsed by ``workers`` processes
        traces = []
        for file in inputs.files:
            cb = (lambda done, total, _f=file.path: progress(_f, done, total)) if progress else None
            traces.append(load_input(file, use_cache=use_cache, progress=cb, step_marker=step_marker, jobs=workers,
                                     hooks=hooks))
    meanwhile()  # at the latest now (every file came from the cache): the caller relies on it
    trace = assign_ranks(traces)
    trace.warnings.extend(f"{p}: skipped, not a trace" for p in inputs.skipped)
    hooks.release_memory()
    return trace


def load_input(file: InputFile, *, use_cache: bool = True, progress: ProgressFn | None = None,
               step_marker: str | None = None, jobs: int | None = None, hooks: ParseHooks = NO_HOOKS) -> Trace:
    """Parse one discovered file, through the trace cache when allowed (``jobs``, ``hooks``: as
    :func:`load` takes them)."""
    fmt = file.checked_format()
    key_path = None
    if use_cache and fmt.cacheable and step_marker is None:
        try:
            key_path = entry_path(file.cache_key)
            cached = read_cached_trace(key_path)
            if cached is not None:
                if progress is not None:
                    progress(1, 1)
                return named_as_given(cached, file.path)
        except OSError:
            key_path = None
    if not fmt.runs_meanwhile:
        hooks.meanwhile()
    trace = fmt.parse(file.path, progress=progress, step_marker=step_marker, jobs=resolve_jobs(jobs), hooks=hooks)
    if key_path is not None:
        try:
            write_cached_trace(trace, key_path)
        except OSError:
            pass  # read-only home, full disk: caching is an optimisation only
    return trace


def named_as_given(trace: Trace, path: Path) -> Trace:
    """``trace`` (read from the cache) naming its file ``path``, as this run was given it: the cache
    keys on the resolved path, so the run that parsed it may have named it otherwise (absolute,
    from another directory), in ``RankInfo.source_path`` and in the warnings that quote it."""
    given = str(path)
    for info in trace.ranks.values():
        old = info.source_path
        if old and old != given:
            info.source_path = given
            info.warnings = [w.replace(old, given) for w in info.warnings]
            trace.warnings[:] = [w.replace(old, given) for w in trace.warnings]
    return trace


def load_file(path: str | os.PathLike[str], *, use_cache: bool = True, progress: ProgressFn | None = None,
              step_marker: str | None = None, jobs: int | None = None, hooks: ParseHooks = NO_HOOKS) -> Trace:
    """Parse one file (any supported format), through the cache when allowed (a job's task)."""
    return load_input(inspect_file(Path(path)), use_cache=use_cache, progress=progress, step_marker=step_marker,
                      jobs=jobs, hooks=hooks)


def _spread_over_files(files: list[InputFile], workers: int) -> bool:
    """Parse whole files in ``workers`` processes: enough files, enough bytes, and no file so big
    that it alone would keep one process busy long after the others (that one is better cut into
    ranges, parsers/kineto/parallel.py)."""
    if len(files) < workers:
        return False
    sizes = [f.size for f in files]
    return sum(sizes) >= parsing.PARALLEL_MIN_BYTES and max(sizes) * workers <= 2 * sum(sizes)


def _load_in_processes(files: list[InputFile], use_cache: bool, progress: LoadProgressFn | None,
                       step_marker: str | None, workers: int, hooks: ParseHooks) -> list[Trace]:
    """At least as many files as processes: each file parsed whole by one of ``workers``
    processes (no range merging), Traces returned pickled, in file order. Progress per file as
    each completes."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    hooks.meanwhile()  # before the fork: every worker parses whole files and needs what it imports
    # fork: workers start with every module already imported (see parsers/kineto/parallel.py)
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    before = {child.pid for child in multiprocessing.active_children()}
    with contextlib.ExitStack() as stack, \
            ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method)) as pool:
        stack.callback(stop_leftover_workers, before)  # after the pool's own shutdown (exits first)
        futures = [pool.submit(_load_one, file, use_cache, step_marker, hooks.for_worker()) for file in files]
        traces = []
        try:
            for file, future in zip(files, futures):
                try:
                    traces.append(future.result())
                # whatever failed in the worker (a bad file, a killed process), this process reads
                # the file again: the same Trace, or the error a serial load gives, raised as it would be
                except Exception:
                    traces.append(load_input(file, use_cache=use_cache, step_marker=step_marker, jobs=1, hooks=hooks))
                if progress is not None:
                    progress(file.path, file.size, file.size)
        finally:  # on an error, files not yet started are not parsed for nothing
            for future in futures:
                future.cancel()
        return traces


def _load_one(file: InputFile, use_cache: bool, step_marker: str | None, hooks: ParseHooks) -> Trace:
    return load_input(file, use_cache=use_cache, step_marker=step_marker, jobs=1, hooks=hooks)
