"""The map task of a job: trace files in (one, or a group of small ones), the results of their ranks out.

:func:`analyze_file` runs in a worker process (a spawned local process or a Dask worker), so it is
a top-level function of an importable module taking and returning picklable objects. It parses the
file through the Arrow cache, gives its ranks the numbers the job planned for them (as
``traceview.load`` would), and runs the core's per-rank step (:func:`traceview.pipeline.analyze_rank`
with bounded tables) on each rank alone; the worker then holds one file's trace at a time.

Small files travel in groups (:func:`analyze_group`): their traces are concatenated and analysed as
one batch, so the analyses' fixed cost per call (pandas on tiny frames, ~0.7 s of CPU for a rank of
2,500 events) is paid once per group instead of once per file. Each file still gets its own
:class:`FileResult` (rank metadata, warnings, events); the group's batch rides on its first readable
file's result, with ``batch_files`` naming the files whose ranks it holds.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from traceview.errors import TraceviewError
from traceview.findings import Options
from traceview.loading import load_file
from traceview.rank_planning import apply_rank_numbers
from traceview.model import RankInfo, Trace, concat_traces
from traceview.pipeline import BatchResult, analyze_batch


@dataclass(frozen=True)
class FileTask:
    """One file of the job to analyse, and how (everything a worker needs)."""

    path: str
    #: the file's place in the job (its order in ``traceview.load``'s concatenation)
    index: int
    options: Options
    use_cache: bool = True
    #: ``{old rank: new rank}``: the numbers the job gives the file's ranks (see ``plan_ranks``)
    rank_map: dict[int, int] | None = None
    #: event rows of the files before this one, when already known (else the driver moves them)
    row_offset: int = 0


@dataclass
class FileResult:
    """One task's answer: the ranks of one file, or why the file failed."""

    file: str
    index: int
    #: the file's analysed ranks as one batch, packed (tables and cross-rank inputs as one
    #: compressed bytes object); None when the file failed
    batch: BatchResult | None = None
    #: metadata of every rank of the file (also those ``Options.ranks`` leaves out), by rank
    infos: dict[int, RankInfo] = field(default_factory=dict)
    #: the file's own warnings (parser warnings), as ``Trace.warnings``
    warnings: list[str] = field(default_factory=list)
    #: rows of the file's events table (row numbers across files are offsets by these)
    events: int = 0
    #: the offset the ranks' row columns already include
    row_offset: int = 0
    error: str | None = None
    #: what the task cost: pid, host, seconds, cpu_seconds, peak_rss (bytes), result_bytes (empty for
    #: the other files of a group: the group's cost is on the result that carries its batch)
    stats: dict[str, Any] = field(default_factory=dict)
    #: the file indices whose ranks ``batch`` holds, in the order their rows are concatenated in it
    #: (a group of files analysed as one batch); empty: this file's ranks only
    batch_files: tuple[int, ...] = ()

    def failed(self, reason: str) -> "FileResult":
        """This file as a failure (``reason`` names the file), keeping what the task cost."""
        return FileResult(file=self.file, index=self.index, error=reason, stats=self.stats)


def failed_task(task: FileTask, reason: str) -> FileResult:
    """The answer for a task that never returned one (its worker died, the cluster lost it)."""
    message = reason if reason.startswith(task.path) else f"{task.path}: {reason}"
    return FileResult(file=task.path, index=task.index, error=message)


def memory_bytes(key: str) -> int | None:
    """``VmHWM`` (peak) or ``VmRSS`` (current) resident memory of this process, in bytes, from
    /proc; the peak from ``getrusage`` where there is no /proc."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if key == "VmHWM":
        import resource

        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux
    return None


def analyze_file(task: FileTask) -> FileResult:
    """The map task: parse one file, analyze each of its ranks alone, return a small result.

    Never raises for a bad file: the error (naming the file) is in the result, so the other files
    of the job complete."""
    started, cpu_started = time.perf_counter(), time.process_time()
    out = FileResult(file=task.path, index=task.index, row_offset=task.row_offset)
    out.stats.update(pid=os.getpid(), host=socket.gethostname(), rss_before=memory_bytes("VmRSS"))
    try:
        analyze_ranks(task, out)
    except Exception as exc:  # a bad file, a bug or an unexpected input: say where, let the others finish
        out.error = error_message(task, exc)
    finally:
        pa.default_memory_pool().release_unused()  # the trace is gone: give its buffers back
    if out.error:
        out = replace(out, batch=None, infos={}, warnings=[], events=0)
    out.stats.update(seconds=time.perf_counter() - started, cpu_seconds=time.process_time() - cpu_started,
                     peak_rss=memory_bytes("VmHWM"), rss_after=memory_bytes("VmRSS"))
    out.stats["result_bytes"] = len(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
    return out


def analyze_group(tasks: list[FileTask]) -> list[FileResult]:
    """The map task of a group of files: each file parsed alone (a bad file fails alone), the
    readable ones concatenated in the group's order and analysed as one batch (see the module doc).
    One result per file, in the group's order. Should the batch's analysis fail, every file is
    analysed alone instead, so only the file at fault fails. A group of one is :func:`analyze_file`."""
    if len(tasks) == 1:
        return [analyze_file(tasks[0])]
    started, cpu_started = time.perf_counter(), time.process_time()
    rss_before = memory_bytes("VmRSS")
    outs: list[FileResult] = []
    traces = []
    for task in tasks:
        out = FileResult(file=task.path, index=task.index, row_offset=task.row_offset)
        try:
            trace = load_task_trace(task, out)
        except Exception as exc:  # (as analyze_file says it) the other files of the group go on
            outs.append(replace(failed_task(task, error_message(task, exc)), stats={}))
            continue
        traces.append(trace)
        outs.append(out)
    ok = [out for out in outs if out.error is None]
    if ok:
        try:
            batch = analyze_batch(concat_traces(traces), tasks[0].options, bounded=True).pack()
        except Exception:  # analysed alone, each file's own error (if any) is kept
            del traces
            pa.default_memory_pool().release_unused()
            return [analyze_file(task) for task in tasks]
        ok[0].batch, ok[0].batch_files = batch, tuple(out.index for out in ok)
        ok[0].row_offset = 0  # rows of the group's files concatenated: the driver places them
    del traces
    pa.default_memory_pool().release_unused()
    carrier = ok[0] if ok else outs[0]
    carrier.stats.update(pid=os.getpid(), host=socket.gethostname(), rss_before=rss_before,
                         seconds=time.perf_counter() - started, cpu_seconds=time.process_time() - cpu_started,
                         peak_rss=memory_bytes("VmHWM"), rss_after=memory_bytes("VmRSS"), files=len(tasks))
    carrier.stats["result_bytes"] = len(pickle.dumps(outs, protocol=pickle.HIGHEST_PROTOCOL))
    return outs


def error_message(task: FileTask, exc: BaseException) -> str:
    """What a failed file's result says (naming the file), as :func:`analyze_file` words it."""
    if isinstance(exc, TraceviewError):
        return str(exc) if str(exc).startswith(task.path) else f"{task.path}: {exc}"
    if isinstance(exc, MemoryError):
        return f"{task.path}: out of memory while analysing it"
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{task.path}: {type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})"


def load_task_trace(task: FileTask, out: FileResult) -> Trace:
    """The file of ``task`` parsed (through the Arrow cache) and numbered as planned; its metadata,
    warnings and events in ``out``."""
    started = time.perf_counter()
    trace = load_file(task.path, use_cache=task.use_cache, step_marker=task.options.step_marker)
    out.stats["seconds_load"] = time.perf_counter() - started
    if task.rank_map:
        trace = apply_rank_numbers(trace, task.rank_map)
    out.events = trace.num_events
    out.infos = dict(sorted(trace.ranks.items()))
    out.warnings = list(trace.warnings)
    return trace


def analyze_ranks(task: FileTask, out: FileResult) -> None:
    """Fill ``out`` with the file's ranks, analysed as one batch by the core's step."""
    trace = load_task_trace(task, out)
    out.batch = analyze_batch(trace, task.options, bounded=True).shift_rows(task.row_offset).pack()
