"""The map task of a job: one trace file in, the results of its ranks out.

:func:`analyze_file` runs in a worker process (a spawned local process or a Dask worker), so it is
a top-level function of an importable module taking and returning picklable objects. It parses the
file through the Arrow cache, gives its ranks the numbers the job planned for them (as
``traceview.load`` would), and runs the core's per-rank step (:func:`traceview.pipeline.analyze_rank`
with bounded tables) on each rank alone; the worker then holds one file's trace at a time.
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
from traceview.model import RankInfo
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
    #: what the task cost: pid, host, seconds, cpu_seconds, peak_rss (bytes), result_bytes
    stats: dict[str, Any] = field(default_factory=dict)

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
    except TraceviewError as exc:
        out.error = str(exc) if str(exc).startswith(task.path) else f"{task.path}: {exc}"
    except MemoryError:
        out.error = f"{task.path}: out of memory while analysing it"
    except Exception as exc:  # a bug or an unexpected input: say where, let the other files finish
        where = traceback.extract_tb(exc.__traceback__)[-1]
        out.error = f"{task.path}: {type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})"
    finally:
        pa.default_memory_pool().release_unused()  # the trace is gone: give its buffers back
    if out.error:
        out = replace(out, batch=None, infos={}, warnings=[], events=0)
    out.stats.update(seconds=time.perf_counter() - started, cpu_seconds=time.process_time() - cpu_started,
                     peak_rss=memory_bytes("VmHWM"), rss_after=memory_bytes("VmRSS"))
    out.stats["result_bytes"] = len(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
    return out


def analyze_ranks(task: FileTask, out: FileResult) -> None:
    """Fill ``out`` with the file's ranks, analysed as one batch by the core's step."""
    options = task.options
    started = time.perf_counter()
    trace = load_file(task.path, use_cache=task.use_cache, step_marker=options.step_marker)
    out.stats["seconds_load"] = time.perf_counter() - started
    if task.rank_map:
        trace = apply_rank_numbers(trace, task.rank_map)
    out.events = trace.num_events
    out.infos = dict(sorted(trace.ranks.items()))
    out.warnings = list(trace.warnings)
    out.batch = analyze_batch(trace, options, bounded=True).shift_rows(task.row_offset).pack()
