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
  rendered cut its tables as each analysis ends. The cache stores whole tables all the same (a
  cached report serves every front end): its writer (:class:`traceview.report_cache.ReportWriter`)
  is the pipeline's table sink, writing each analysis's whole tables to the file as it ends. A job
  (``executor``) maps the files on workers: its report is the same data with bounded tables, so it
  is neither read from nor written to the cache.
* ``jobs`` (the processes a parse may use) is an argument, passed to the load; the command's
  process-wide settings (heap, the work done while parse workers run) come as ``hooks`` from the
  CLI only (:mod:`traceview.runtime`): called from Python, nothing process-wide changes.

This module is core-level: it imports no feature; the pipeline, the report cache and pandas are
imported when a report is made, after the load started (``traceview analyze`` imports them while
parse workers run: its ``hooks.meanwhile``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Union

if TYPE_CHECKING:
    from traceview import discovery
    from traceview.findings import Options
    from traceview.model import Trace
    from traceview.parsing import ParseHooks
    from traceview.pipeline import TableSink
    from traceview.report import Report

#: ``progress(file, bytes_done, bytes_total)`` while files load
LoadProgress = Callable[[Path, int, int], None]
PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Inputs:
    """The trace files of one operation, found once (:func:`find_inputs`).

    ``paths``: as the user gave them; ``found``: what :func:`traceview.discovery.discover` found
    (one record per trace file: path, format, ``stat``, cache key read once, in load order, and the
    files a folder scan left out as not traces, which the report names in a warning each and which
    are part of the report's cache key)."""

    paths: tuple[str, ...]
    found: "discovery.Inputs" = dataclasses.field(compare=False)

    @classmethod
    def of_files(cls, files: Iterable[PathLike], skipped: Iterable[PathLike] = ()) -> "Inputs":
        """Inputs already listed (the app's runs): the files as they are, no folder scanned."""
        from traceview import discovery

        records = discovery.one_per_run([discovery.inspect_file(Path(f)) for f in files])
        return cls(paths=tuple(str(r.path) for r in records),
                   found=discovery.Inputs(records, [Path(s) for s in skipped]))

    @property
    def files(self) -> tuple[Path, ...]:
        """The trace files, in the order they are loaded."""
        return tuple(self.found.paths)

    @property
    def skipped(self) -> tuple[Path, ...]:
        return tuple(self.found.skipped)

    @property
    def size_bytes(self) -> int:
        """The files' total size (0 for a file that cannot be read: the load names it)."""
        return self.found.total_bytes


def find_inputs(source: "PathLike | Iterable[PathLike] | Inputs") -> Inputs:
    """The trace files under ``source`` (files and folders, each folder scanned once and each
    file's head read once: :func:`traceview.discovery.discover`); ``Inputs`` are returned as they
    are. A missing path or a folder without traces raises
    :class:`~traceview.errors.TraceFormatError` (one line)."""
    if isinstance(source, Inputs):
        return source
    from traceview import discovery

    paths = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    return Inputs(paths=tuple(os.fspath(p) for p in paths), found=discovery.discover(paths))


def report_key(inputs: Inputs, options: "Options") -> str | None:
    """The report cache's key of ``inputs`` analysed under ``options`` (None when a file cannot be
    read: nothing is cached), the same for every front end (:func:`traceview.report_cache.report_key`)."""
    from traceview import report_cache

    return report_cache.report_key(list(inputs.found.files), options, list(inputs.skipped))


def merged_options(options: "Options | None", fields: dict[str, Any]) -> "Options":
    """``options`` (default: the defaults) with the :class:`~traceview.findings.Options` fields given
    by name (``step_marker=...``); an unknown name raises TypeError."""
    from traceview.findings import Options

    base = options if options is not None else Options()
    return dataclasses.replace(base, **fields) if fields else base


def load_inputs(source: "PathLike | Iterable[PathLike] | Inputs", *, step_marker: str | None = None,
                cache: bool = True, jobs: int | None = None, progress: LoadProgress | None = None,
                hooks: "ParseHooks | None" = None, steps: "Callable[[str, int, int], None] | None" = None) -> "Trace":
    """The :class:`~traceview.model.Trace` of ``source`` (paths or :class:`Inputs`) through the trace
    cache (``cache``), parsed with ``jobs`` processes (None: the cores), for the front ends that need
    the trace only. ``hooks``: what the calling process lends the parse (the ``traceview`` command's
    runtime, :func:`traceview.runtime.cli_parse_hooks`); None from Python: nothing process-wide.
    ``steps``: the load told as a "parse" phase in bytes of every input
    (:func:`traceview.progress.parse_progress`), besides ``progress``."""
    from traceview.loading import load
    from traceview.progress import combined, parse_progress

    inputs = find_inputs(source)
    if steps is not None:
        progress = combined(progress, parse_progress(steps, [(f.path, f.size) for f in inputs.found.files]))
    return load(inputs.found, use_cache=cache, progress=progress, step_marker=step_marker, jobs=jobs, hooks=hooks)


def analyze(source: Any, options: "Options | None" = None, *, cache: bool = True, executor: Any = None,
            jobs: int | None = None, progress: LoadProgress | None = None, whole_tables: bool = True,
            trace: "Trace | None" = None, on_compute: "Callable[[Trace], None] | None" = None,
            use_cache: bool | None = None, hooks: "ParseHooks | None" = None,
            steps: "Callable[[str, int, int], None] | None" = None, **fields: Any) -> "Report":
    """Analyze trace files, folders of per-rank files, :class:`Inputs` or a loaded
    :class:`~traceview.model.Trace`, and return the :class:`~traceview.report.Report` every front end
    shows (the CLI's reports, the app, ``diff``/``check``, the Python API).

    ``options``: :class:`~traceview.findings.Options` (default: the defaults), with any of its fields
    given by name over it (``step_marker=r"^train_step"``, ``top_n=30``).
    ``cache``: read the report from the report cache when the same files were analysed with the
    same options by the same code (whichever front end did), else compute and store it; the trace
    is loaded through its own cache either way. ``use_cache`` is the older name of ``cache``.
    ``executor``: analyze batches of ranks elsewhere (``traceview.jobs.make_executor(workers=4)``;
    never cached: a job's tables are bounded). ``jobs``: processes a parse may use (None: the cores).
    ``progress(file, done, total)``: called while files load. ``whole_tables=False``: a report only
    rendered may cut its tables to what the report shows (the cache stores them whole).
    ``trace``: the trace ``source`` loads to, when the caller holds it already (the app): not loaded
    again. ``on_compute(trace)``: called before the analyses run (not for a cached report).
    ``hooks``: what the calling process lends the parse (:func:`load_inputs`).
    ``steps(phase, done, total)``: the computation's phases (:data:`traceview.pipeline.StepProgress`:
    "parse" while the files load, in bytes of every input; "ranks" as a job's ranks come back;
    "analyses", "reduce", "report"; those three not called for a cached report); None: silent.
    """
    from traceview.model import Trace

    options = merged_options(options, fields)
    cache = cache if use_cache is None else use_cache
    if isinstance(source, Trace) or executor is not None:
        if isinstance(source, Trace) and on_compute is not None:
            on_compute(source)
        return run_pipeline(source.paths if isinstance(source, Inputs) else source, options, cache=cache,
                            executor=executor, progress=progress, whole_tables=whole_tables, steps=steps)
    inputs = find_inputs(source)
    if trace is None:
        trace = load_inputs(inputs, step_marker=options.step_marker, cache=cache, jobs=jobs, progress=progress,
                            hooks=hooks, steps=steps)
    # the pipeline and the report cache (pandas with them) are imported after the load: a command's
    # hooks may have imported them while the parse workers ran
    from traceview import report_cache

    key = report_key(inputs, options) if cache else None
    if key is not None:
        cached = report_cache.read_report(key, trace)
        if cached is not None:
            return cached
    if on_compute is not None:
        on_compute(trace)
    # the cache file is written as each analysis ends (whole tables), whatever the report in memory keeps
    writer = report_cache.ReportWriter(key) if key is not None else None
    try:
        report = run_pipeline(trace, options, cache=cache, executor=None, progress=None,
                              whole_tables=whole_tables, steps=steps, sink=writer)
    except BaseException:
        if writer is not None:
            writer.abandon()
        raise
    if writer is not None:
        writer.finish(report)
    return report


def run_pipeline(source: Any, options: "Options", *, cache: bool, executor: Any, progress: LoadProgress | None,
                 whole_tables: bool, steps: "Callable[[str, int, int], None] | None" = None,
                 sink: "TableSink | None" = None) -> "Report":
    """:func:`traceview.pipeline.analyze`, the computation itself; ``sink``: the report cache's
    writer, given each whole table as its analysis ends."""
    from traceview.pipeline import analyze as pipeline_analyze

    return pipeline_analyze(source, options, use_cache=cache, executor=executor, progress=progress,
                            whole_tables=whole_tables, steps=steps, sink=sink)
