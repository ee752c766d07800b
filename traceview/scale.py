"""Analyze a whole job rank by rank: hundreds of ranks in bounded memory, locally or on a Dask cluster.

``traceview.load`` + ``run_all`` hold every rank's events at once. For a job of hundreds or
thousands of ranks this module maps and reduces instead:

* **map** (one task per trace file, in a worker process): parse the file, through the Arrow cache
  (:func:`traceview.loading.load_file`); for each rank in it run every analysis on that rank alone
  (:func:`traceview.analyses.run_all`) and keep a small :class:`RankResult`: the analyses' tables
  with the per-event ones cut to their top rows (largest gaps, slowest launches, costliest calls,
  heaviest kernels), the findings and warnings, the rank's metadata, and the per-rank inputs of the
  cross-rank figures (:class:`traceview.analyses.communication.CrossRankInputs`: one row per
  collective kernel with its kind, process group, step, start, end and bytes; per-step compute and
  GPU windows). The worker then drops the trace: its memory is one rank's trace at a time.
* **reduce** (in the driver, from the RankResults only): collective skew, stragglers, clock
  alignment, compute imbalance and the communication findings come from
  :func:`traceview.analyses.communication.cross_rank`, the same function ``run_all`` uses on a
  multi-rank trace, so both give identical cross-rank figures. Other findings are merged per code
  into job-level findings ("on 60 of 64 ranks ..."); the per-rank tables are concatenated.

Executors: local processes (``concurrent.futures.ProcessPoolExecutor`` with the ``spawn`` start
method; ``workers`` defaults to the number of cores), or a running ``dask.distributed`` cluster
(``scheduler="tcp://host:port"`` or ``$TRACEVIEW_SCHEDULER``) whose workers read the traces from a
path they share with the driver. A file that fails (unreadable, corrupt, a worker that died) is
reported with its reason in :attr:`JobResult.missing` while the others complete.

Rows: a ``row`` (or ``*_row``) column refers to a row of the events of all files concatenated in
file order, exactly as in ``traceview.load(files).events``; so a job's tables match the in-memory
path's even in their row numbers.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import pickle
import socket
import time
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from traceview.errors import TraceviewError
from traceview.findings import SEVERITIES, AnalysisResult, Finding, Options, merge_findings, rank_findings
from traceview.loading import _renumber, find_trace_files, load_file
from traceview.model import RankInfo, Trace

SCHEDULER_ENV = "TRACEVIEW_SCHEDULER"
#: rows kept of each per-event table (the top ones by the column named in ``TOP_TABLES``), when
#: not given: ``Options.top_n`` (20 by default)
ROW_LIMIT = None
#: any other per-rank table longer than this is cut (and the cut is recorded)
MAX_TABLE_ROWS = 5000
#: per-event tables and the column their top rows are chosen by (largest first)
TOP_TABLES: dict[tuple[str, str], str] = {
    ("idle_gaps", "gaps"): "dur_ns",
    ("idle_gaps", "step_gaps"): "dur_ns",
    ("launch_overhead", "launches"): "launch_delay_ns",
    ("synchronization", "calls"): "cost_ns",
    ("kernels", "kernels"): "total_ns",
    ("kernels", "kernels_by_step"): "total_ns",
}
#: tables that hold the top rows over all ranks (not per rank): the job keeps the top
#: ``Options.top_n`` of the ranks' tops, in the analysis's own order (columns, ascending)
GLOBAL_TOP: dict[tuple[str, str], tuple[list[str], list[bool]]] = {
    ("idle_gaps", "largest"): (["dur_ns", "start_ns"], [False, True]),
}
#: ranks unpacked and concatenated at a time by the reduce step (bounds its transient memory)
REDUCE_BATCH = 256
#: the CLI keeps only the whole-trace rows of per-rank tables for jobs of more files than this
WHOLE_TABLES_ABOVE = 256
#: cross-rank tables: computed by the reduce step, never per rank
CROSS_RANK_TABLES = ("skew", "arrivals", "stragglers", "alignment", "compute_by_rank", "compute_imbalance")

ProgressFn = Callable[[int, int, "FileResult"], None]


# ------------------------------------------------------------------------------- results


@dataclass
class RankResult:
    """What one rank sends to the driver: bounded tables, findings, warnings, metadata.

    The tables and the cross-rank inputs travel and wait in the driver packed (``payload``: pickled,
    zlib level 1, about 4x smaller, and one bytes object instead of ~30 small DataFrames, whose
    fixed overhead would otherwise dominate a driver holding thousands of ranks); :meth:`unpack`
    gives them back. The rest is small and stays as it is.
    """

    rank: int
    file: str
    file_index: int
    info: RankInfo
    summary: dict[str, Any]  # Trace.summary() of this rank
    tables: dict[str, dict[str, pd.DataFrame]]  # analysis -> table -> (bounded) frame; {} when packed
    truncated: dict[str, int]  # "analysis.table" -> rows before the cut
    findings: dict[str, list[Finding]]  # analysis -> findings of this rank alone
    warnings: dict[str, list[str]]  # analysis -> warnings
    comm: Any  # communication.CrossRankInputs; None when packed
    payload: bytes = b""

    def pack(self) -> "RankResult":
        if not self.payload:
            self.payload = zlib.compress(pickle.dumps((self.tables, self.comm), protocol=pickle.HIGHEST_PROTOCOL), 1)
            self.tables, self.comm = {}, None
        return self

    def unpack(self) -> tuple[dict[str, dict[str, pd.DataFrame]], Any]:
        """(tables, cross-rank inputs), whether packed or not."""
        if self.payload:
            return pickle.loads(zlib.decompress(self.payload))
        return self.tables, self.comm


@dataclass
class FileResult:
    """One task's answer: the ranks of one file, or why the file failed."""

    file: str
    index: int
    ranks: list[RankResult] = field(default_factory=list)
    events: int = 0  # rows of the file's events table (for row numbers across files)
    error: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class MissingRank:
    file: str
    rank: int | None  # from the file name when the file could not be read
    reason: str


@dataclass
class JobResult:
    """A whole job, reduced from per-rank results."""

    #: analysis name -> result, like ``run_all``'s: per-rank tables concatenated (per-event tables
    #: cut to their top rows), cross-rank tables, job-level findings
    results: dict[str, AnalysisResult]
    ranks: dict[int, RankInfo]
    #: one row per rank: what it is, its headline figures, and what analysing it cost
    rank_table: pd.DataFrame
    missing: list[MissingRank]
    #: ranks the job should have (``world_size``) that no file provided
    absent_ranks: list[int]
    world_size: int | None
    warnings: list[str]
    alignment: pd.DataFrame
    alignment_note: str
    #: executor, workers, wall time, ranks per second, peak RSS of the driver and of each worker,
    #: per-rank result sizes
    execution: dict[str, Any]
    files: list[str]
    truncated: dict[str, int] = field(default_factory=dict)

    @property
    def findings(self) -> list[Finding]:
        return rank_findings([f for r in self.results.values() for f in r.findings])

    @property
    def rank_ids(self) -> list[int]:
        return sorted(self.ranks)


# ------------------------------------------------------------------------------- the map task


def _status_bytes(key: str) -> int | None:
    """``VmHWM`` / ``VmRSS`` of this process from /proc (bytes); ru_maxrss elsewhere."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if key == "VmHWM":
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
    return None


def _rank_from_name(path: str) -> int | None:
    from traceview.parsers.kineto import _RANK_IN_NAME

    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


def analyze_file(path: str, index: int, options: Options | None = None, use_cache: bool = True,
                 rank_map: dict[int, int] | None = None, several: bool = True,
                 row_limit: int | None = ROW_LIMIT, tables: str = "all") -> FileResult:
    """The map task: parse one file (through the cache), analyze each of its ranks alone, and
    return a small :class:`FileResult`. Never raises for a bad file: the error is in the result.

    A top-level function of an importable module, so it can be sent to spawned processes and to
    Dask workers. ``rank_map`` renames ranks (``{old: new}``) before the analysis, as
    ``traceview.load`` does for files without a rank (see :func:`plan_ranks`). ``row_limit``: rows
    kept of each per-event table (default ``options.top_n``; 0 drops those tables); ``tables``:
    "all" (every per-rank table, bounded) or "whole" (whole-trace rows only: see :func:`bound_tables`).
    """
    from traceview.analyses.steps import clear_cache

    options = options or Options()
    started = time.perf_counter()
    cpu_started = time.process_time()
    out = FileResult(file=str(path), index=index)
    stats = out.stats
    stats.update(pid=os.getpid(), host=socket.gethostname(), rss_before=_status_bytes("VmRSS"))
    try:
        trace = load_file(path, use_cache=use_cache, step_marker=options.step_marker)
        stats["seconds_load"] = time.perf_counter() - started
        out.events = trace.num_events
        if rank_map:
            trace = _apply_rank_map(trace, rank_map, several)
        for rank in sorted(trace.ranks):
            if options.ranks is not None and rank not in options.ranks:
                continue
            sub, rows = select_rank(trace, rank)
            out.ranks.append(analyze_rank(sub, rank, rows, str(path), index, options, row_limit, tables).pack())
            del sub
            clear_cache()
        del trace
    except TraceviewError as exc:
        out.error = str(exc)
    except MemoryError:
        out.error = f"{path}: out of memory while analysing it"
    except Exception as exc:  # a bug or an unexpected input: report it, let the other ranks finish
        where = traceback.extract_tb(exc.__traceback__)[-1]
        out.error = f"{path}: {type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})"
    finally:
        clear_cache()
        try:
            pa.default_memory_pool().release_unused()
        except Exception:
            pass
    if out.error:
        out.ranks = []
    stats["seconds"] = time.perf_counter() - started
    stats["cpu_seconds"] = time.process_time() - cpu_started  # all threads of this process
    stats["peak_rss"] = _status_bytes("VmHWM")
    stats["rss_after"] = _status_bytes("VmRSS")
    stats["result_bytes"] = 0
    stats["result_bytes"] = len(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
    return out


def _apply_rank_map(trace: Trace, mapping: dict[int, int], several: bool) -> Trace:
    """Rename ranks as ``traceview.loading._assign_ranks`` does (same metadata and warnings)."""
    for old, new in mapping.items():
        info = trace.ranks.get(old)
        if info is None:
            continue
        info.rank = new
        if old < 0:
            info.rank_source = "assigned (no rank in file or file name)"
            info.warnings.append(f"{info.source_path}: no rank in distributedInfo or file name; "
                                 f"treated as rank {new}")
        else:
            info.rank_source += f"; renumbered {old} -> {new} across files"
    if any(old != new for old, new in mapping.items()):
        trace = _renumber(trace, mapping)
    return trace


def select_rank(trace: Trace, rank: int) -> tuple[Trace, np.ndarray | None]:
    """The events, links and steps of one rank as a trace of their own, and for each of its rows
    the row in ``trace`` (None when the trace holds that rank only)."""
    if len(trace.ranks) == 1:
        return trace, None
    rank_col = trace.column("rank")
    rows = np.flatnonzero(rank_col == rank).astype(np.int64)
    events = trace.events.take(pa.array(rows))
    new_row = np.full(trace.num_events, -1, dtype=np.int64)
    new_row[rows] = np.arange(rows.size, dtype=np.int64)
    links = trace.links
    if links.num_rows:
        keep = links.column("rank").to_numpy() == rank
        links = links.filter(pa.array(keep))
        links = links.set_column(3, links.schema.field("src_row"),
                                 pa.array(new_row[links.column("src_row").to_numpy()]))
        links = links.set_column(4, links.schema.field("dst_row"),
                                 pa.array(new_row[links.column("dst_row").to_numpy()]))
    steps = trace.steps
    if steps.num_rows:
        steps = steps.filter(pa.array(steps.column("rank").to_numpy() == rank))
    sub = Trace(events=events, links=links, ranks={rank: trace.ranks[rank]}, steps=steps,
                warnings=list(trace.warnings))
    return sub, rows


def _row_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if (c == "row" or str(c).endswith("_row"))
            and pd.api.types.is_integer_dtype(frame[c].dtype)]


def _map_rows(frame: pd.DataFrame, rows: np.ndarray | None, offset: int = 0) -> pd.DataFrame:
    """Row columns: rank-local rows -> file rows (``rows``) -> rows across files (+ ``offset``)."""
    cols = _row_columns(frame)
    if not cols or (rows is None and not offset) or frame.empty:
        return frame
    frame = frame.copy()
    for c in cols:
        values = frame[c].to_numpy()
        if pd.api.types.is_extension_array_dtype(frame[c].dtype):
            mask = frame[c].isna().to_numpy()
            vals = np.where(mask, -1, frame[c].fillna(-1).to_numpy(dtype=np.int64))
        else:
            mask = np.zeros(len(values), dtype=bool)
            vals = values.astype(np.int64)
        ok = (vals >= 0) & ~mask
        new = vals.copy()
        if rows is not None:
            new[ok] = rows[vals[ok]]
        new[ok] += offset
        if pd.api.types.is_extension_array_dtype(frame[c].dtype):
            frame[c] = pd.array(np.where(mask, None, new).tolist(), dtype=frame[c].dtype)
        else:
            frame[c] = new.astype(values.dtype)
    return frame


def bound_tables(results: dict[str, AnalysisResult], row_limit: int = 20, max_rows: int = MAX_TABLE_ROWS,
                 whole_only: bool = False) -> tuple[dict[str, dict[str, pd.DataFrame]], dict[str, int]]:
    """The analyses' tables of one rank with the per-event ones cut to their top ``row_limit``
    rows (by the column in :data:`TOP_TABLES`, largest first, kept in their original order) and any
    other table to ``max_rows``; returns the tables and ``{"analysis.table": rows before}``.

    ``whole_only`` (for jobs of thousands of ranks): the per-event tables and ``kernels_by_step``
    are left out, and the other tables keep only their whole-trace rows (``step`` missing), except
    ``idle_gaps.largest``; per-step figures then exist only in the cross-rank tables."""
    tables: dict[str, dict[str, pd.DataFrame]] = {}
    truncated: dict[str, int] = {}
    for name, res in results.items():
        out = {}
        for tname, frame in res.tables.items():
            if tname in CROSS_RANK_TABLES and name == "communication":
                continue
            n = len(frame)
            key = TOP_TABLES.get((name, tname))
            if whole_only:
                if key is not None or (name, tname) == ("kernels", "kernels_by_step"):
                    truncated[f"{name}.{tname}"] = n
                    continue
                if "step" in frame and (name, tname) not in GLOBAL_TOP:
                    frame = frame[frame["step"].isna()].reset_index(drop=True)
            if key is not None and n > row_limit and key in frame:
                if row_limit <= 0:
                    truncated[f"{name}.{tname}"] = n
                    continue
                order = np.argsort(-frame[key].fillna(0).to_numpy(dtype=np.float64), kind="stable")[:row_limit]
                frame = frame.iloc[np.sort(order)].reset_index(drop=True)
                truncated[f"{name}.{tname}"] = n
            elif n > max_rows:
                frame = frame.iloc[:max_rows].reset_index(drop=True)
                truncated[f"{name}.{tname}"] = n
            out[tname] = _drop_unused_categories(frame)
        tables[name] = out
    return tables, truncated


def _drop_unused_categories(frame: pd.DataFrame) -> pd.DataFrame:
    """Categorical columns keep only the categories they use (else each one carries the whole name
    dictionary of the trace, which can be most of a rank's result)."""
    cats = [c for c in frame.columns if isinstance(frame[c].dtype, pd.CategoricalDtype)]
    if not cats:
        return frame
    frame = frame.copy()
    for c in cats:
        frame[c] = frame[c].cat.remove_unused_categories()
    return frame


def analyze_rank(trace: Trace, rank: int, rows: np.ndarray | None, path: str, index: int,
                 options: Options, row_limit: int | None = ROW_LIMIT, tables: str = "all") -> RankResult:
    """Run every analysis on a one-rank trace and keep what the driver needs."""
    from traceview.analyses import communication, run_all

    results = run_all(trace, options)
    comm = communication.cross_rank_inputs(trace, options)
    if rows is not None and not comm.kernels.empty:
        kernels = comm.kernels.copy()
        kernels["row"] = rows[kernels["row"].to_numpy()]
        comm = communication.CrossRankInputs(kernels, comm.collectives, comm.compute, comm.windows,
                                             comm.whole_windows, comm.steps, comm.active_ranks)
    if tables not in ("all", "whole"):
        raise ValueError(f"tables must be 'all' or 'whole', not {tables!r}")
    whole_only = tables == "whole"
    if whole_only and len(comm.collectives):
        comm = communication.CrossRankInputs(comm.kernels, comm.collectives[comm.collectives["step"].isna()]
                                             .reset_index(drop=True), comm.compute, comm.windows,
                                             comm.whole_windows, comm.steps, comm.active_ranks)
    comm = comm.compact()
    tables, truncated = bound_tables(results, row_limit=options.top_n if row_limit is None else row_limit,
                                     whole_only=whole_only)
    if "communication" in tables:  # the per-rank collectives table is the one the cross-rank inputs hold
        tables["communication"]["collectives"] = comm.collectives
    if rows is not None:
        tables = {a: {t: _map_rows(f, rows) for t, f in ts.items()} for a, ts in tables.items()}
    summary = trace.summary().get(rank, {})
    return RankResult(
        rank=rank, file=path, file_index=index, info=trace.ranks[rank], summary=summary, tables=tables,
        truncated=truncated, findings={n: list(r.findings) for n, r in results.items()},
        warnings={n: list(r.warnings) for n, r in results.items() if r.warnings}, comm=comm,
    )


# ------------------------------------------------------------------------------- executors


class _Local:
    """Local worker processes (spawned: safe with the threads pyarrow and numpy start)."""

    def __init__(self, workers: int):
        self.workers = max(1, int(workers))
        self.name = f"local processes ({self.workers})"

    def run(self, tasks: list[tuple], done: Callable[[tuple, FileResult], None]) -> None:
        ctx = multiprocessing.get_context("spawn")
        pending = list(tasks)
        with cf.ProcessPoolExecutor(max_workers=min(self.workers, max(1, len(pending))), mp_context=ctx) as pool:
            futures = {pool.submit(analyze_file, *t): t for t in pending}
            broken = []
            for fut in cf.as_completed(futures):
                t = futures[fut]
                try:
                    res = fut.result()
                except cf.process.BrokenProcessPool:
                    broken.append(t)
                    continue
                except Exception as exc:
                    res = _failed(t, f"{type(exc).__name__}: {exc}")
                done(t, res)
        # a worker died (killed, out of memory): the pool is gone and every unfinished task with it;
        # run those again one per process, so the file that kills its worker is the only one lost
        if broken:
            def isolated(t: tuple) -> FileResult:
                try:
                    with cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as one:
                        return one.submit(analyze_file, *t).result()
                except cf.process.BrokenProcessPool:
                    return _failed(t, "the worker process died while analysing it (killed, or out of memory)")
                except Exception as exc:
                    return _failed(t, f"{type(exc).__name__}: {exc}")

            with cf.ThreadPoolExecutor(max_workers=self.workers) as threads:
                futures = {threads.submit(isolated, t): t for t in broken}
                for fut in cf.as_completed(futures):
                    done(futures[fut], fut.result())


class _Inline:
    """In this process, one file after the other (debugging; no memory isolation)."""

    workers = 1
    name = "in-process"

    def run(self, tasks: list[tuple], done: Callable[[tuple, FileResult], None]) -> None:
        for t in tasks:
            done(t, analyze_file(*t))


class _Dask:
    """A running dask.distributed cluster; its workers must see the trace files at the same paths."""

    def __init__(self, scheduler: Any):
        try:
            import distributed
        except ImportError:
            raise TraceviewError("--scheduler needs dask.distributed: pip install 'traceview[scale]'") from None
        self.distributed = distributed
        self.own = not isinstance(scheduler, distributed.Client)
        try:
            self.client = distributed.Client(scheduler, timeout="20s") if self.own else scheduler
        except (OSError, TimeoutError) as exc:
            raise TraceviewError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
        info = self.client.scheduler_info()
        self.address = info.get("address", str(scheduler))
        workers = info.get("workers", {})
        self.workers = max(1, len(workers))
        threads = sum(int(w.get("nthreads", 1)) for w in workers.values()) or 1
        self.name = f"dask {self.address} ({len(workers)} workers, {threads} threads)"

    def run(self, tasks: list[tuple], done: Callable[[tuple, FileResult], None]) -> None:
        import uuid

        token = uuid.uuid4().hex[:8]
        futures = {}
        for t in tasks:
            fut = self.client.submit(analyze_file, *t, pure=False, key=f"traceview-analyze-{token}-{t[1]}")
            futures[fut] = t
        try:
            for fut in self.distributed.as_completed(list(futures)):
                t = futures[fut]
                try:
                    res = fut.result()
                except Exception as exc:  # KilledWorker, a lost worker, a cancelled task
                    res = _failed(t, f"the Dask task failed: {type(exc).__name__}: {exc}")
                done(t, res)
                fut.release()
        finally:
            if self.own:
                self.client.close()


def _failed(task: tuple, reason: str) -> FileResult:
    path = str(task[0])
    return FileResult(file=path, index=int(task[1]), error=reason if reason.startswith(path) else f"{path}: {reason}")


def make_executor(workers: int | None = None, scheduler: Any = None, inline: bool = False) -> Any:
    """The executor for these settings: Dask when a scheduler is given (or, when neither ``workers``
    nor ``inline`` is, ``$TRACEVIEW_SCHEDULER``), else local processes (``workers``, default: the
    number of cores)."""
    if scheduler is None and workers is None and not inline:
        scheduler = os.environ.get(SCHEDULER_ENV) or None
    if scheduler is not None:
        return _Dask(scheduler)
    if inline:
        return _Inline()
    return _Local(workers or os.cpu_count() or 1)


# ------------------------------------------------------------------------------- the driver


def analyze_job(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    workers: int | None = None,
    scheduler: Any = None,
    options: Options | None = None,
    use_cache: bool = True,
    progress: ProgressFn | None = None,
    inline: bool = False,
    row_limit: int | None = ROW_LIMIT,
    tables: str = "all",
) -> JobResult:
    """Analyze every rank of a job file by file and reduce the results (see the module docstring).

    ``scheduler``: a Dask scheduler address or ``distributed.Client`` (default
    ``$TRACEVIEW_SCHEDULER``); otherwise ``workers`` local processes (default: number of cores).
    ``progress(done_files, total_files, result)`` is called as each file completes. ``row_limit``:
    rows of each per-event table (gaps, launches, calls, kernels) each rank sends (default
    ``options.top_n``; 0: none). ``tables``: "all" per-rank tables (bounded), or "whole": only their
    whole-trace rows, for jobs of thousands of ranks (see :func:`bound_tables`; the cross-rank
    tables are complete either way).
    """
    started = time.perf_counter()
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    options = options or Options()
    skipped: list[Path] = []
    files = [f.resolve() for f in find_trace_files(list(paths), skipped)]
    executor = make_executor(workers, scheduler, inline)
    results: dict[int, FileResult] = {}
    total = len(files)

    def done(task: tuple, res: FileResult) -> None:
        results[res.index] = res
        if progress is not None:
            progress(len(results), total, res)

    several = len(files) > 1
    tasks = [(str(f), i, options, use_cache, None, several, row_limit, tables) for i, f in enumerate(files)]
    executor.run(tasks, done)
    # ranks the files did not state (or Nsight processes of several files) are numbered as
    # traceview.load numbers them; those files are analysed again under their final numbers
    maps, conflicts, _ = plan_ranks([results[i] for i in sorted(results)], several)
    for index, reason in conflicts.items():
        results[index] = FileResult(file=results[index].file, index=index, error=reason,
                                    stats=results[index].stats)
    if maps:
        again = [(str(files[i]), i, options, use_cache, maps[i], several, row_limit, tables) for i in sorted(maps)]
        rerun = make_executor(workers, scheduler, inline) if isinstance(executor, _Dask) else executor
        rerun.run(again, lambda t, res: results.__setitem__(res.index, res))
    wall = time.perf_counter() - started
    job = reduce_job([results[i] for i in sorted(results)], [str(f) for f in files], options, tables)
    # (plan_ranks' warnings repeat what each renumbered rank's own warnings say)
    job.warnings[:0] = [f"{p}: skipped, not a trace" for p in skipped]
    job.execution.update(executor=executor.name, workers=executor.workers, seconds=wall,
                         seconds_with_reduce=time.perf_counter() - started,
                         ranks_per_second=len(job.ranks) / wall if wall > 0 else None,
                         driver_peak_rss=_status_bytes("VmHWM"))
    return job


def plan_ranks(file_results: list[FileResult], several: bool
               ) -> tuple[dict[int, dict[int, int]], dict[int, str], list[str]]:
    """Rank numbers across files, following ``traceview.loading._assign_ranks``: ranks a file
    states are kept; Nsight processes (when there are several files) and files without a rank get
    the lowest free numbers in file order. Returns ``{file index: {old: new}}`` for the files to
    renumber, ``{file index: reason}`` for files that claim a rank another file already claimed
    (``traceview.load`` refuses the whole job then; here only the later file is left out), and the
    warnings ``traceview.load`` would give."""
    claimed: dict[int, str] = {}
    conflicts: dict[int, str] = {}
    warnings: list[str] = []

    def numbered_only(info: RankInfo) -> bool:
        return several and info.rank_source.startswith("nsys")

    ok = [fr for fr in file_results if fr.error is None and fr.ranks]
    # a file that could not be read keeps the rank its name says, so no other file is given it
    reserved = {r for r in (_rank_from_name(fr.file) for fr in file_results if fr.error) if r is not None}
    for fr in ok:
        stated = [(rr.rank, rr.info) for rr in fr.ranks if rr.rank >= 0 and not numbered_only(rr.info)]
        clash = [(r, info) for r, info in stated if r in claimed and several]
        if clash:
            r, info = clash[0]
            conflicts[fr.index] = (f"rank {r} appears in two files: {claimed[r]} and {info.source_path} "
                                   "(this file is left out; check the files' distributedInfo)")
            continue
        for r, info in stated:
            claimed[r] = info.source_path
    for r in reserved:
        claimed.setdefault(r, "(a file that could not be read)")
    maps: dict[int, dict[int, int]] = {}
    next_free = 0
    for fr in ok:
        if fr.index in conflicts:
            continue
        mapping: dict[int, int] = {}
        for rr in sorted(fr.ranks, key=lambda rr: rr.rank):
            if rr.rank >= 0 and not numbered_only(rr.info):
                continue
            while next_free in claimed:
                next_free += 1
            mapping[rr.rank] = next_free
            claimed[next_free] = rr.info.source_path
            if rr.rank < 0 and several:
                warnings.append(f"{rr.info.source_path}: no rank in distributedInfo or file name; "
                                f"treated as rank {next_free}")
        if mapping and any(old != new for old, new in mapping.items()):
            maps[fr.index] = mapping
    return maps, conflicts, warnings


def reduce_job(file_results: list[FileResult], files: list[str], options: Options | None = None,
               tables: str = "all") -> JobResult:
    """The reduce step: job-level tables, cross-rank figures and findings from the per-file results
    (``tables="whole"`` also leaves out the cross-rank ``arrivals`` table, ranks x collectives rows)."""
    from traceview.analyses import REGISTRY, _import_all
    from traceview.analyses import communication as comm_mod

    _import_all()
    options = options or Options()
    missing = [MissingRank(fr.file, _rank_from_name(fr.file), fr.error) for fr in file_results if fr.error]
    # row numbers across files: the offset of each file in the concatenation traceview.load builds
    offsets: dict[int, int] = {}
    running = 0
    for fr in sorted(file_results, key=lambda f: f.index):
        offsets[fr.index] = running
        running += fr.events
    ranks: list[RankResult] = sorted((rr for fr in file_results if not fr.error for rr in fr.ranks),
                                     key=lambda rr: rr.rank)
    names = [n for n in REGISTRY]
    results: dict[str, AnalysisResult] = {n: AnalysisResult(name=n) for n in names}
    truncated: dict[str, int] = {}
    # per-rank tables, concatenated in rank order (row columns moved to rows across files); ranks are
    # unpacked a batch at a time, so only one batch of small frames exists at once
    pieces: dict[tuple[str, str], list[pd.DataFrame]] = {}
    comm_parts: list[Any] = []
    for start in range(0, len(ranks), REDUCE_BATCH):
        batch: dict[tuple[str, str], list[pd.DataFrame]] = {}
        comms = []
        for rr in ranks[start:start + REDUCE_BATCH]:
            off = offsets.get(rr.file_index, 0)
            rank_tables, rank_comm = rr.unpack()
            for name, ts in rank_tables.items():
                for tname, frame in ts.items():
                    if (name, tname) == ("communication", "collectives"):
                        continue  # the cross-rank inputs hold it
                    batch.setdefault((name, tname), []).append(_map_rows(frame, None, off) if off else frame)
            comms.append(rank_comm.shift_rows(off))
            for key, n in rr.truncated.items():
                truncated[key] = truncated.get(key, 0) + n
        for key, frames in batch.items():
            pieces.setdefault(key, []).append(_concat_tables(frames))
        comm_parts.append(comm_mod.CrossRankInputs.concat(comms).compact())
        del batch, comms
    for (name, tname), frames in pieces.items():
        table = _concat_tables(frames)
        if (name, tname) in GLOBAL_TOP and len(table):
            cols, asc = GLOBAL_TOP[(name, tname)]
            table = table.sort_values(cols, ascending=asc, kind="stable").head(options.top_n).reset_index(drop=True)
        results.setdefault(name, AnalysisResult(name=name)).tables[tname] = table
    # cross-rank figures, from the per-rank inputs only
    inputs = comm_mod.CrossRankInputs.concat(comm_parts)
    comm_result = results.setdefault(comm_mod.NAME, AnalysisResult(name=comm_mod.NAME))
    cross = comm_mod.cross_rank(inputs, arrivals_table=tables != "whole")
    comm_tables = {"collectives": inputs.collectives}
    if "summary" in comm_result.tables:
        comm_tables["summary"] = comm_result.tables["summary"]
    comm_tables.update({k: v for k, v in comm_result.tables.items() if k not in comm_tables})
    comm_tables.update(cross.tables)
    comm_result.tables = comm_tables
    comm_result.findings = list(cross.findings)
    comm_result.warnings = list(cross.warnings)
    # other analyses: per-rank findings merged per code into job-level ones
    n_ranks = len(ranks)
    for name in names:
        if name == comm_mod.NAME:
            continue
        per_rank = [(rr.rank, f) for rr in ranks for f in rr.findings.get(name, [])]
        results[name].findings = merge_findings(per_rank, n_ranks)
        results[name].warnings = _merge_messages([(rr.rank, w) for rr in ranks for w in rr.warnings.get(name, [])],
                                                 n_ranks)
    # metadata, warnings, the rank table
    infos = {rr.rank: rr.info for rr in ranks}
    trace_warnings = _merge_messages([(rr.rank, w) for rr in ranks for w in rr.info.warnings], n_ranks)
    world = _world_size(infos)
    absent = sorted(set(range(world)) - set(infos)) if world else []
    alignment = cross.tables.get("alignment", comm_mod._empty(["rank", "collectives", "clock_offset_ns",
                                                               "residual_mad_ns", "residual_max_ns"]))
    note = comm_mod.alignment_note(alignment if len(alignment) else None)
    execution = _execution_stats(file_results)
    rank_table = _rank_table(ranks, results, alignment, cross.tables.get("stragglers"), file_results,
                             inputs.compute)
    return JobResult(results=results, ranks=infos, rank_table=rank_table, missing=missing, absent_ranks=absent,
                     world_size=world, warnings=trace_warnings, alignment=alignment, alignment_note=note,
                     execution=execution, files=list(files), truncated=truncated)


def _concat_tables(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-rank tables; columns that were categorical stay categorical (with the
    union of the ranks' categories) instead of falling back to object."""
    nonempty = [f for f in frames if len(f)]
    if not nonempty:
        return frames[0]
    if len(nonempty) == 1:
        return nonempty[0].reset_index(drop=True)
    cats = [c for c in nonempty[0].columns if isinstance(nonempty[0][c].dtype, pd.CategoricalDtype)]
    if cats:
        nonempty = [f.astype({c: object for c in cats if c in f}) for f in nonempty]
    table = pd.concat(nonempty, ignore_index=True)
    for c in cats:
        table[c] = table[c].astype("category")
    return table


def _world_size(infos: dict[int, RankInfo]) -> int | None:
    sizes = [i.world_size for i in infos.values() if i.world_size]
    return max(sizes) if sizes else None


def _compact(ranks: Sequence[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    ranks = sorted(set(int(r) for r in ranks))
    parts = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ", ".join(parts)


def _merge_messages(per_rank: list[tuple[int, str]], n_ranks: int) -> list[str]:
    """Each distinct message once, saying which ranks gave it."""
    seen: dict[str, list[int]] = {}
    for rank, msg in per_rank:
        seen.setdefault(msg, []).append(rank)
    out = []
    for msg, ranks in seen.items():
        if n_ranks <= 1:
            out.append(msg)
        elif len(set(ranks)) == n_ranks:
            out.append(f"{msg} (all ranks)")
        else:
            out.append(f"{msg} (rank{'s' if len(set(ranks)) > 1 else ''} {_compact(ranks)})")
    return out


def _execution_stats(file_results: list[FileResult]) -> dict[str, Any]:
    per_worker: dict[str, int] = {}
    sizes = []
    seconds = []
    cpu: list[float] = []
    for fr in file_results:
        s = fr.stats or {}
        if s.get("peak_rss"):
            key = f"{s.get('host', '?')}:{s.get('pid', '?')}"
            per_worker[key] = max(per_worker.get(key, 0), int(s["peak_rss"]))
        if s.get("result_bytes") and not fr.error:
            sizes.append(int(s["result_bytes"]) / max(1, len(fr.ranks)))
        if s.get("seconds") is not None:
            seconds.append(float(s["seconds"]))
        if s.get("cpu_seconds") is not None:
            cpu.append(float(s["cpu_seconds"]))
    return {
        "files": len(file_results),
        "failed_files": sum(1 for fr in file_results if fr.error),
        "worker_peak_rss": dict(sorted(per_worker.items())),
        "max_worker_peak_rss": max(per_worker.values()) if per_worker else None,
        "result_bytes_per_rank": {"mean": float(np.mean(sizes)), "max": int(max(sizes)), "min": int(min(sizes))}
        if sizes else None,
        "task_seconds": {"mean": float(np.mean(seconds)), "max": float(max(seconds)), "sum": float(sum(seconds))}
        if seconds else None,
        "task_cpu_seconds": {"mean": float(np.mean(cpu)), "max": float(max(cpu)), "sum": float(sum(cpu))}
        if cpu else None,
    }


def _rank_table(ranks: list[RankResult], results: dict[str, AnalysisResult], alignment: pd.DataFrame,
                strag: pd.DataFrame | None, file_results: list[FileResult], compute: pd.DataFrame) -> pd.DataFrame:
    stats = {fr.index: fr.stats for fr in file_results}
    breakdown = results.get("temporal", AnalysisResult("temporal")).tables.get("breakdown")
    whole = breakdown[breakdown["step"].isna()] if breakdown is not None and len(breakdown) else None
    offsets = dict(zip(alignment["rank"], alignment["clock_offset_ns"])) if len(alignment) else {}
    last: dict[int, int] = {}
    if strag is not None and len(strag):
        from traceview.analyses.communication import CLOCK_OFFSET_NS

        col = "corrected_times_last" if (strag["clock_offset_ns"].abs() > CLOCK_OFFSET_NS).any() else "times_last"
        last = dict(zip(strag["rank"], strag[col]))
    per_rank: dict[int, tuple[float, int, int]] = {}
    if whole is not None and len(whole):
        g = whole.groupby("rank")
        agg = pd.DataFrame({"u": g["utilization"].mean(), "i": g["idle_ns"].sum(), "e": g["exposed_comm_ns"].sum()})
        per_rank = {int(r): (float(u), int(i), int(e)) for r, u, i, e in zip(agg.index, agg["u"], agg["i"], agg["e"])}
    comp_whole: dict[int, int] = {}
    if len(compute):
        w = compute[compute["step"] < 0]
        comp_whole = {int(r): int(v) for r, v in zip(w["rank"], w["compute_ns"])}
    rows = []
    for rr in ranks:
        s = rr.summary or {}
        st = stats.get(rr.file_index, {})
        util, idle, exposed = per_rank.get(rr.rank, (np.nan, 0, 0))
        rows.append({
            "rank": rr.rank,
            "file": Path(rr.file).name,
            "events": int(s.get("events", 0)),
            "kernels": int(s.get("by_kind", {}).get("kernel", 0)),
            "steps": int(s.get("steps", 0)),
            "span_ns": int(s.get("span_ns", 0)),
            "utilization": util,
            "idle_ns": idle,
            "exposed_comm_ns": exposed,
            "compute_ns": comp_whole.get(rr.rank, 0),
            "clock_offset_ns": int(offsets[rr.rank]) if rr.rank in offsets else 0,
            "times_last": int(last.get(rr.rank, 0)),
            "findings": int(sum(len(v) for v in rr.findings.values())),
            "seconds": float(st.get("seconds", np.nan)),
            "peak_rss_bytes": int(st.get("peak_rss") or 0),
            "result_bytes": int(st.get("result_bytes") or 0),
            "worker": f"{st.get('host', '?')}:{st.get('pid', '?')}",
        })
    cols = ["rank", "file", "events", "kernels", "steps", "span_ns", "utilization", "idle_ns", "exposed_comm_ns",
            "compute_ns", "clock_offset_ns", "times_last", "findings", "seconds", "peak_rss_bytes", "result_bytes",
            "worker"]
    return pd.DataFrame(rows, columns=cols)


# ------------------------------------------------------------------------------- terminal output


def _mb(n: int | float | None) -> str:
    return "-" if not n else f"{n / 1e6:,.0f} MB"


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """Missing values as None, which the terminal renderer shows as '-'."""
    return frame.astype(object).where(frame.notna(), None)


def render_job(job: JobResult, console: Any, top_n: int = 10, summary_only: bool = False) -> None:
    """The job in the terminal: ranks, missing ranks, clock alignment, cross-rank figures, memory,
    then the analyses' headline tables and the ranked job-level findings."""
    from traceview.render.terminal import fmt_ns, render_results, render_table

    ex = job.execution
    n = len(job.ranks)
    rate = ex.get("ranks_per_second")
    console.print(
        f"[bold]Job:[/bold] {n} ranks from {len(job.files)} files"
        + (f" (world size {job.world_size})" if job.world_size else "")
        + f", analysed rank by rank on {ex.get('executor')} in {ex.get('seconds', 0):.1f} s"
        + (f" ({rate:.2f} ranks/s)" if rate else ""), highlight=False)
    for m in job.missing:
        where = f"rank {m.rank}" if m.rank is not None else "rank ?"
        console.print(f"[red]missing {where}:[/red] {Path(m.file).name}: {m.reason}", highlight=False)
    if job.missing or job.absent_ranks:
        gone = sorted({m.rank for m in job.missing if m.rank is not None} | set(job.absent_ranks))
        console.print(f"[red]ranks missing from the job:[/red] {_compact(gone) if gone else 'unknown'}"
                      f" ({len(job.missing)} file(s) failed; the figures below cover the other ranks)",
                      highlight=False)
    table = job.rank_table
    if len(table):
        shown = table if len(table) <= 32 else table.sort_values(["times_last", "idle_ns"], ascending=False).head(16)
        title = "Ranks" if len(table) <= 32 else f"Ranks (16 of {len(table)}: most often last, then most idle)"
        view = shown[["rank", "file", "kernels", "steps", "span_ns", "idle_ns", "exposed_comm_ns", "clock_offset_ns",
                      "times_last", "seconds", "peak_rss_bytes"]].copy()
        view.insert(5, "util_pct", 100.0 * shown["utilization"])
        view = view.rename(columns={"exposed_comm_ns": "exposed_ns", "clock_offset_ns": "clock_ns",
                                    "times_last": "last", "peak_rss_bytes": "rss_bytes", "seconds": "s"})
        render_table(_plain(view), title, console, max_rows=32)
    console.print(f"[bold]Clock alignment:[/bold] {job.alignment_note}", highlight=False)
    if len(job.alignment):
        a = job.alignment.reindex(job.alignment["clock_offset_ns"].abs().sort_values(ascending=False).index)
        render_table(_plain(a.head(16)), "Per-rank clock corrections (largest first)", console, max_rows=16)
    comm = job.results.get("communication")
    skew = comm.tables.get("skew") if comm else None
    if skew is not None and len(skew):
        from traceview.analyses.communication import CLOCK_OFFSET_NS

        strag = comm.tables.get("stragglers")
        corrected = strag is not None and bool((strag["clock_offset_ns"].abs() > CLOCK_OFFSET_NS).any())
        col = "corrected_skew_ns" if corrected else "skew_ns"
        v = skew[col].to_numpy(dtype=np.float64)
        console.print(
            f"[bold]Collective skew[/bold] ({'clock-corrected' if corrected else 'raw clocks'}, {len(v)} matched "
            f"collectives): median {fmt_ns(np.median(v))}, p95 {fmt_ns(np.percentile(v, 95))}, "
            f"max {fmt_ns(v.max())}", highlight=False)
        if strag is not None and len(strag):
            p = "corrected_" if corrected else ""
            top = strag.sort_values(f"{p}times_last", ascending=False).head(5)
            render_table(_plain(top[["rank", "matched", f"{p}times_last", f"{p}share_last", f"{p}mean_late_by_ns",
                                     f"{p}wait_caused_ns", "clock_offset_ns"]]), "Stragglers (most often last)", console)
    imb = comm.tables.get("compute_imbalance") if comm else None
    if imb is not None and len(imb):
        whole = imb[imb["step"].isna()]
        if len(whole):
            w = whole.iloc[0]
            console.print(f"[bold]Compute imbalance[/bold] (whole trace): max {fmt_ns(w['max_ns'])} on rank "
                          f"{int(w['max_rank'])}, mean {fmt_ns(w['mean_ns'])}, min {fmt_ns(w['min_ns'])} on rank "
                          f"{int(w['min_rank'])}: {w['imbalance_pct']:.1f}% above the mean", highlight=False)
    peaks = ex.get("worker_peak_rss") or {}
    size = ex.get("result_bytes_per_rank") or {}
    console.print(
        f"[bold]Memory:[/bold] driver peak RSS {_mb(ex.get('driver_peak_rss'))}; worker peak RSS max "
        f"{_mb(ex.get('max_worker_peak_rss'))} over {len(peaks)} worker process(es); result per rank "
        f"{size.get('mean', 0) / 1e3:,.0f} kB on average (max {size.get('max', 0) / 1e3:,.0f} kB)", highlight=False)
    for w in job.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    if job.truncated:
        cut = ", ".join(f"{k} ({v:,} rows)" for k, v in sorted(job.truncated.items()))
        console.print(f"[dim]per-rank tables cut to their top rows: {cut}[/dim]", highlight=False)
    if summary_only:
        return
    render_results(job.results, console, top_n=top_n)


def progress_bar(console: Any, total: int) -> Any:
    """A rich progress bar over the job's files (ranks); use as a context manager, call with
    ``(done, total, result)``."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    class _Bar:
        def __enter__(self):
            self.bar = Progress(TextColumn("analysing ranks"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[failed]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                                console=console, transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task("ranks", total=total, failed="")
            self.failed = 0
            return self

        def __call__(self, done: int, total_: int, res: FileResult) -> None:
            if res.error:
                self.failed += 1
            self.bar.update(self.task, completed=done, total=total_,
                            failed=f"[red]{self.failed} failed[/red]" if self.failed else "")

        def __exit__(self, *exc):
            return self.bar.__exit__(*exc)

    return _Bar()


def run_cli(paths: Sequence[str], *, workers: int | None, scheduler: str | None, no_cache: bool,
            step_marker: str | None, top: int, summary_only: bool, console: Any, fmt: str = "text",
            output: Path | None = None) -> JobResult:
    """``traceview analyze --workers N`` / ``--scheduler ADDR``: the job path of the analyze command.

    The text report goes to the console (or to ``output``); other report formats need a loaded
    trace and are not produced here yet.
    """
    if str(fmt).lower() not in ("text", "format.text"):
        raise TraceviewError(f"--format {fmt} is not available with --workers/--scheduler yet "
                             "(the job path prints the text report; -o FILE writes it to a file)")
    if workers is not None and workers < 0:
        raise TraceviewError("--workers must be 0 (one per core) or more")
    files = find_trace_files(list(paths))
    show = console.is_terminal or os.environ.get("TRACEVIEW_PROGRESS") == "1"
    options = Options(step_marker=step_marker, top_n=max(top, 20))
    kwargs = dict(workers=workers or None, scheduler=scheduler or None, options=options, use_cache=not no_cache,
                  tables="all" if len(files) <= WHOLE_TABLES_ABOVE else "whole")
    if show:
        with progress_bar(console, len(files)) as bar:
            job = analyze_job(files, progress=bar, **kwargs)
    else:
        job = analyze_job(files, **kwargs)
    if not job.ranks:
        reasons = "; ".join(m.reason for m in job.missing[:3])
        raise TraceviewError(f"no rank could be analysed: {reasons}")
    if output is not None:
        import io

        from rich.console import Console

        buffer = io.StringIO()
        render_job(job, Console(file=buffer, width=140, force_terminal=False, color_system=None), top_n=top,
                   summary_only=summary_only)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(buffer.getvalue(), encoding="utf-8")
        console.print(f"wrote the text report to {output}", highlight=False)
    else:
        render_job(job, console, top_n=top, summary_only=summary_only)
    return job


__all__ = [
    "FileResult", "JobResult", "MissingRank", "RankResult", "analyze_file", "analyze_job", "bound_tables",
    "make_executor", "merge_findings", "plan_ranks", "progress_bar", "reduce_job", "render_job", "run_cli",
    "select_rank",
]
