"""The one entry point: trace files (or a loaded Trace) in, the :class:`~traceview.report.Report` out,
for every front end: ``traceview analyze``, ``diff``, ``check``, ``history add``, ``export-perfetto``,
the app's runs and the Python API (``traceview.analyze``) call :func:`analyze`; ``sql``, ``info`` and
``convert``, which need the trace only, call :func:`load_inputs`.

    paths -> find_inputs (once) -> load (trace cache) -> report cache? -> traceview.pipeline.analyze

* The inputs are found once per operation (:func:`find_inputs`: a folder's trace files, and the
  files its scan skipped, which the report names) and passed down as :class:`Inputs`.
* The report cache (:mod:`traceview.report_cache`) is read and written here only, under the key of
  the inputs and every :class:`~traceview.findings.Options` field (:func:`report_key`): whichever
  front end analysed a trace, the others read its report.
* A report computed in this process keeps whole tables and its trace (``report.trace``: the HTML
  timeline, the app, ``export-perfetto``); ``whole_tables=False`` lets a report that is only
  rendered cut its tables as each analysis ends, unless it is stored in the cache (a cached report
  serves every front end, so it is whole). A job (``executor``) maps the files on workers: its report
  is the same data with bounded tables, so it is neither read from nor written to the cache.
* ``jobs`` (the processes a parse may use) is applied in one place, :func:`parse_processes`.

This module is core-level: it imports no feature; the pipeline, the report cache and pandas are
imported when a report is made, after the load started (``traceview analyze`` imports them while
parse workers run: ``traceview.loading.meanwhile``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Union

if TYPE_CHECKING:
    from traceview.findings import Options
    from traceview.model import Trace
    from traceview.report import Report

#: ``progress(file, bytes_done, bytes_total)`` while files load
LoadProgress = Callable[[Path, int, int], None]
PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Inputs:
    """The trace files of one operation, found once (:func:`find_inputs`).

    ``paths``: as the user gave them; ``files``: the trace files, in the order they are loaded (a
    folder's sorted, files named kept as given); ``skipped``: the files a folder scan left out as
    not traces (the report names each in a warning, and they are part of the report's cache key)."""

    paths: tuple[str, ...]
    files: tuple[Path, ...]
    skipped: tuple[Path, ...] = ()

    @classmethod
    def of_files(cls, files: Iterable[PathLike], skipped: Iterable[PathLike] = ()) -> "Inputs":
        """Inputs already found (the app's runs): the files as they are, no folder scanned."""
        found = tuple(Path(f) for f in files)
        return cls(paths=tuple(str(f) for f in found), files=found, skipped=tuple(Path(s) for s in skipped))

    @property
    def size_bytes(self) -> int:
        """The files' total size (0 for a file that cannot be read: the load names it)."""
        total = 0
        for f in self.files:
            try:
                total += f.stat().st_size
            except OSError:
                pass
        return total


def find_inputs(source: "PathLike | Iterable[PathLike] | Inputs") -> Inputs:
    """The trace files under ``source`` (files and folders; :func:`traceview.loading.find_trace_files`
    scans each folder once); ``Inputs`` are returned as they are. A missing path or a folder without
    traces raises :class:`~traceview.errors.TraceFormatError` (one line)."""
    if isinstance(source, Inputs):
        return source
    from traceview.loading import find_trace_files

    paths = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    skipped: list[Path] = []
    files = find_trace_files(paths, skipped)
    return Inputs(paths=tuple(os.fspath(p) for p in paths), files=tuple(files), skipped=tuple(skipped))


@contextlib.contextmanager
def parse_processes(jobs: int | None) -> Iterator[None]:
    """The one place ``jobs`` (``--jobs``: the processes parsers and the analyses of a big rank may
    use; None: the cores available) reaches the loading code and the pipeline: the setting of
    :func:`traceview.loading.parse_jobs` through the block."""
    if jobs is None:
        yield
        return
    from traceview.loading import parse_jobs

    with parse_jobs(jobs):
        yield


def report_key(inputs: Inputs, options: "Options") -> str | None:
    """The report cache's key of ``inputs`` analysed under ``options`` (None when a file cannot be
    read: nothing is cached), the same for every front end (:func:`traceview.report_cache.report_key`)."""
    from traceview import report_cache

    return report_cache.report_key(list(inputs.files), options, list(inputs.skipped))


def merged_options(options: "Options | None", fields: dict[str, Any]) -> "Options":
    """``options`` (default: the defaults) with the :class:`~traceview.findings.Options` fields given
    by name (``step_marker=...``); an unknown name raises TypeError."""
    from traceview.findings import Options

    base = options if options is not None else Options()
    return dataclasses.replace(base, **fields) if fields else base


def load_inputs(source: "PathLike | Iterable[PathLike] | Inputs", *, step_marker: str | None = None,
                cache: bool = True, jobs: int | None = None, progress: LoadProgress | None = None) -> "Trace":
    """The :class:`~traceview.model.Trace` of ``source`` (paths or :class:`Inputs`) through the trace
    cache (``cache``), parsed with ``jobs`` processes, for the front ends that need the trace only."""
    inputs = find_inputs(source)
    with parse_processes(jobs):
        return load_found(inputs, step_marker=step_marker, cache=cache, progress=progress)


def load_found(inputs: Inputs, *, step_marker: str | None, cache: bool, progress: LoadProgress | None) -> "Trace":
    """:func:`traceview.load` of files already found: the folders are not scanned again, and the
    files their scan skipped are named as ``traceview.load`` names them (the same report whichever
    way a trace is loaded)."""
    from traceview.loading import load

    trace = load(list(inputs.files), use_cache=cache, progress=progress, step_marker=step_marker)
    trace.warnings.extend(f"{p}: skipped, not a trace" for p in inputs.skipped)
    return trace


def analyze(source: Any, options: "Options | None" = None, *, cache: bool = True, executor: Any = None,
            jobs: int | None = None, progress: LoadProgress | None = None, whole_tables: bool = True,
            trace: "Trace | None" = None, on_compute: "Callable[[Trace], None] | None" = None,
            use_cache: bool | None = None, **fields: Any) -> "Report":
    """Analyze trace files, folders of per-rank files, :class:`Inputs` or a loaded
    :class:`~traceview.model.Trace`, and return the :class:`~traceview.report.Report` every front end
    shows (the CLI's reports, the app, ``diff``/``check``, the Python API).

    ``options``: :class:`~traceview.findings.Options` (default: the defaults), with any of its fields
    given by name over it (``step_marker=r"^train_step"``, ``top_n=30``).
    ``cache``: read the report from the report cache when the same files were analysed with the
    same options by the same code (whichever front end did), else compute and store it; the trace
    is loaded through its own cache either way. ``use_cache`` is the older name of ``cache``.
    ``executor``: analyze rank by rank elsewhere (``traceview.jobs.make_executor(workers=4)``; never
    cached: a job's tables are bounded). ``jobs``: processes a parse may use (None: the cores).
    ``progress(file, done, total)``: called while files load. ``whole_tables=False``: a report only
    rendered may cut its tables to what the report shows (kept whole when it is cached).
    ``trace``: the trace ``source`` loads to, when the caller holds it already (the app): not loaded
    again. ``on_compute(trace)``: called before the analyses run (not for a cached report).
    """
    from traceview.model import Trace

    options = merged_options(options, fields)
    cache = cache if use_cache is None else use_cache
    with parse_processes(jobs):
        if isinstance(source, Trace) or executor is not None:
            if isinstance(source, Trace) and on_compute is not None:
                on_compute(source)
            return run_pipeline(source.paths if isinstance(source, Inputs) else source, options, cache=cache,
                                executor=executor, progress=progress, whole_tables=whole_tables)
        return analyze_inputs(find_inputs(source), options, cache=cache, progress=progress,
                              whole_tables=whole_tables, trace=trace, on_compute=on_compute)


def analyze_inputs(inputs: Inputs, options: "Options", *, cache: bool, progress: LoadProgress | None,
                   whole_tables: bool, trace: "Trace | None", on_compute: "Callable[[Trace], None] | None") -> "Report":
    """The report of ``inputs`` in this process: loaded (unless ``trace`` is given), read from the
    report cache or computed and stored there (see :func:`analyze`)."""
    from traceview.loading import remembered_cache_keys, run_meanwhile

    # the load and the report key read each file's key once between them
    with remembered_cache_keys():
        if trace is None:
            trace = load_found(inputs, step_marker=options.step_marker, cache=cache, progress=progress)
        # the caller's work for meanwhile (traceview.loading.meanwhile), if the load did not run it:
        # it may be importing the pipeline and the report cache, imported next
        run_meanwhile()
        from traceview import report_cache

        key = report_key(inputs, options) if cache else None
    if key is not None:
        cached = report_cache.read_report(key, trace)
        if cached is not None:
            return cached
    if on_compute is not None:
        on_compute(trace)
    report = run_pipeline(trace, options, cache=cache, executor=None, progress=None,
                          whole_tables=whole_tables or key is not None)
    if key is not None:
        report_cache.write_report(key, report)
    return report


def run_pipeline(source: Any, options: "Options", *, cache: bool, executor: Any, progress: LoadProgress | None,
                 whole_tables: bool) -> "Report":
    """:func:`traceview.pipeline.analyze`, the computation itself (no report cache)."""
    from traceview.pipeline import analyze as pipeline_analyze

    return pipeline_analyze(source, options, use_cache=cache, executor=executor, progress=progress,
                            whole_tables=whole_tables)
