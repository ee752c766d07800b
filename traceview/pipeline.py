"""The one pipeline: traces in, one :class:`~traceview.report.Report` out, for every front end.

    source (paths or a Trace) -> per rank: analyses (map) -> reduce across ranks -> Report

Every analysis runs on one rank at a time (:func:`analyze_rank`), and :func:`reduce_ranks` joins the
ranks: per-rank tables are concatenated in rank order, cross-rank figures come from each analysis's
declared ``gather``/``reduce`` (:class:`traceview.registry.AnalysisSpec`), per-rank warnings are
merged. The in-memory path (:func:`analyze` on a Trace or on paths) maps the ranks inline and keeps
whole tables; the job path (``traceview.jobs``: local processes or a Dask cluster) maps files in
workers, which send bounded tables (:func:`bound_rank_tables`: every row any report figure needs), and
hands the per-rank results to the same :func:`reduce_ranks` and :func:`traceview.report.build_report`.
So both give the same report, figure for figure. In memory, the analyses of a big rank may run in
two processes side by side (:class:`ForkedSplit`, under ``--jobs``): each analysis still runs whole,
on the same trace, in one of them, so the report is again the same.

Rows: a ``row`` (or ``*_row``) column refers to a row of ``trace.events`` (of all files concatenated
in file order, as ``traceview.load`` builds it), whichever path computed it.
"""

from __future__ import annotations

import gc
import io
import os
import pickle
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from traceview.findings import AnalysisResult, Finding, Options
from traceview.loading import find_trace_files, load, release_free_memory
from traceview.model import RankInfo, Trace
from traceview.registry import AnalysisSpec, TableSpec
from traceview.report import REPORT_TABLE_ROWS, Report, TraceOverview, build_report
from traceview.tables import concat_tables, drop_unused_categories, sample_mask, top_order

#: rows of a table without a sort key that a rank keeps in a job (the report shows the first ones)
MAX_RANK_TABLE_ROWS = 5000
#: ranks unpacked and concatenated at a time by the reduce step (bounds its transient memory)
REDUCE_BATCH = 256

Source = str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | Trace


# ------------------------------------------------------------------------------------ per rank


@dataclass
class RankResult:
    """What the analyses produced for one rank: its tables (whole, or bounded in a job), the number of
    rows each table had before any cut, its findings and warnings per analysis, and the inputs of the
    cross-rank steps. ``pack()`` pickles and compresses the tables (one bytes object travels and waits
    in a driver holding thousands of ranks); ``unpack()`` gives them back."""

    rank: int
    info: RankInfo
    summary: dict[str, Any]
    tables: dict[str, dict[str, pd.DataFrame]]
    table_rows: dict[tuple[str, str], int]
    findings: dict[str, list[Finding]]
    warnings: dict[str, list[str]]
    gathered: dict[str, Any]
    #: warnings of the file the rank came from (parser warnings)
    trace_warnings: list[str] = field(default_factory=list)
    payload: bytes = b""

    def pack(self) -> "RankResult":
        if not self.payload:
            data = pickle.dumps((self.tables, self.gathered), protocol=pickle.HIGHEST_PROTOCOL)
            self.payload = zlib.compress(data, 1)
            self.tables, self.gathered = {}, {}
        return self

    def unpack(self) -> tuple[dict[str, dict[str, pd.DataFrame]], dict[str, Any]]:
        """(tables, gathered cross-rank inputs), whether packed or not."""
        if self.payload:
            tables, gathered = pickle.loads(zlib.decompress(self.payload))
            return tables, gathered
        return self.tables, self.gathered

    def remap_rows(self, rows: np.ndarray | None, offset: int) -> "RankResult":
        """Row columns moved to the rows of a larger trace (see :func:`map_rows`)."""
        if rows is None and not offset:
            return self
        tables, gathered = self.unpack()
        self.tables = {a: {t: map_rows(f, rows, offset) for t, f in ts.items()} for a, ts in tables.items()}
        self.gathered = {a: g.remap_rows(rows, offset) for a, g in gathered.items()}
        self.payload = b""
        return self


def select_rank(trace: Trace, rank: int) -> tuple[Trace, np.ndarray | None]:
    """The events, links and steps of one rank as a trace of their own, and for each of its rows the
    row in ``trace`` (None when the trace holds that rank only)."""
    if len(trace.ranks) == 1:
        return trace, None
    rows = np.flatnonzero(trace.column("rank") == rank).astype(np.int64)
    events = trace.events.take(pa.array(rows))
    new_row = np.full(trace.num_events, -1, dtype=np.int64)
    new_row[rows] = np.arange(rows.size, dtype=np.int64)
    links = trace.links
    if links.num_rows:
        links = links.filter(pa.array(links.column("rank").to_numpy() == rank))
        for name in ("src_row", "dst_row"):
            i = links.schema.get_field_index(name)
            links = links.set_column(i, links.schema.field(name), pa.array(new_row[links.column(name).to_numpy()]))
    steps = trace.steps
    if steps.num_rows:
        steps = steps.filter(pa.array(steps.column("rank").to_numpy() == rank))
    memory, counters = (t.filter(pa.array(t.column("rank").to_numpy() == rank)) if t.num_rows else t
                        for t in (trace.memory, trace.counters))
    sub = Trace(events=events, links=links, ranks={rank: trace.ranks[rank]}, steps=steps,
                warnings=list(trace.warnings), memory=memory, counters=counters)
    return sub, rows


def row_columns(frame: pd.DataFrame) -> list[str]:
    """The columns of ``frame`` that hold event row numbers (``row``, ``*_row``)."""
    return [c for c in frame.columns if (c == "row" or str(c).endswith("_row"))
            and pd.api.types.is_integer_dtype(frame[c].dtype)]


def map_rows(frame: pd.DataFrame, rows: np.ndarray | None, offset: int = 0) -> pd.DataFrame:
    """Row columns: rank-local rows -> rows of the trace they were cut from (``rows[row]``) -> rows
    across files (``+ offset``). Missing rows (negative or NA) stay missing."""
    cols = row_columns(frame)
    if not cols or (rows is None and not offset) or frame.empty:
        return frame
    frame = frame.copy()
    for c in cols:
        nullable = pd.api.types.is_extension_array_dtype(frame[c].dtype)
        mask = frame[c].isna().to_numpy() if nullable else np.zeros(len(frame), dtype=bool)
        vals = frame[c].fillna(-1).to_numpy(dtype=np.int64) if nullable else frame[c].to_numpy().astype(np.int64)
        ok = (vals >= 0) & ~mask
        new = vals.copy()
        if rows is not None:
            new[ok] = rows[vals[ok]]
        new[ok] += offset
        if nullable:
            frame[c] = pd.array([None if m else int(v) for m, v in zip(mask, new)], dtype=frame[c].dtype)
        else:
            frame[c] = new.astype(frame[c].dtype)
    return frame


def analyze_rank(trace: Trace, rank: int, rows: np.ndarray | None, options: Options, *,
                 bounded: bool = False) -> RankResult:
    """Run every analysis on ``trace`` (one rank's events: see :func:`select_rank`) and gather the
    cross-rank inputs. ``rows`` maps its rows to the trace it was cut from. ``bounded``: cut each table
    to the rows a report can need (:func:`bound_rank_tables`) as its analysis ends, for a job's
    workers and for a report that is only rendered (the per-event tables of the first analyses
    then no longer take memory while the others run)."""
    from traceview.analyses import specs
    from traceview.analyses.steps import clear_cache

    try:
        tables: dict[str, dict[str, pd.DataFrame]] = {}
        findings: dict[str, list[Finding]] = {}
        warnings: dict[str, list[str]] = {}
        gathered: dict[str, Any] = {}
        table_rows: dict[tuple[str, str], int] = {}
        outputs = run_specs(trace, specs(), options, rows, bounded)
        for spec in specs():
            out = outputs[spec.name]
            tables[spec.name] = out.tables
            table_rows.update(((spec.name, t), n) for t, n in out.table_rows.items())
            findings[spec.name] = out.findings
            if out.warnings:
                warnings[spec.name] = out.warnings
            if out.gathered is not None:
                gathered[spec.name] = out.gathered
        tables = {a: {t: map_rows(f, rows) for t, f in ts.items()} for a, ts in tables.items()}
        return RankResult(rank=rank, info=trace.ranks[rank], summary=trace.summary().get(rank, {}), tables=tables,
                          table_rows=table_rows, findings=findings, warnings=warnings, gathered=gathered,
                          trace_warnings=list(trace.warnings))
    finally:
        clear_cache()
        release_free_memory()


# ------------------------------------------------------------------------------------ analyses side by side

#: the split is opt-in: ``TRACEVIEW_SPLIT_MIN_EVENTS=N`` lets a rank of at least N events (100000 is
#: a good value) run its analyses in two processes. Off by default: on the 141 MB benchmark trace on
#: 2 cores it saved 0.15 s of 2.5 s (6%) for 16% more peak memory (benchmarks/README.md, issue 12,
#: third pass), and a fork from a library call (a notebook's kernel has threads of its own) is
#: only safe where the caller knows its process
MIN_SPLIT_EVENTS: int | None = None


@dataclass
class SpecOutput:
    """What one analysis gave on one rank (its gathered cross-rank input already remapped)."""

    tables: dict[str, pd.DataFrame]
    findings: list[Finding]
    warnings: list[str]
    gathered: Any = None
    #: each table's rows before any cut
    table_rows: dict[str, int] = field(default_factory=dict)


def run_spec(spec: AnalysisSpec, trace: Trace, options: Options, rows: np.ndarray | None,
             bounded: bool = False, still_to_run: Sequence[str] | None = None) -> SpecOutput:
    """One analysis on one rank, with its cross-rank input (rows remapped by ``rows``); its tables
    cut to what a report can need when ``bounded`` (:func:`bound_rank_tables`). ``still_to_run``:
    the analyses this process runs on the rank after this one; the cached inputs none of them reads
    are dropped as this one ends (:func:`traceview.analyses.drop_unread_inputs`)."""
    result = spec.run(trace, options)
    tables, findings, warnings = dict(result.tables), list(result.findings), list(result.warnings)
    table_rows = {name: int(len(frame)) for name, frame in tables.items()}
    if bounded:
        tables = bound_rank_tables(spec, tables, options)
    del result  # its whole tables (when cut), before the trim below
    gathered = spec.gather(trace, options).remap_rows(rows, 0).compact() if spec.gather is not None else None
    if still_to_run is not None:
        from traceview.analyses import drop_unread_inputs

        drop_unread_inputs(trace, still_to_run)
    # no trim of the C heap here: the next analysis reuses the free pages this one left, where a
    # trim hands them back and every analysis faults them in again (on the 141 MB benchmark trace
    # ~50k more page faults and ~0.2 s of 1.9 s, for a parent's peak RSS 8 MB lower, the tree's
    # peak PSS the same: benchmarks/README.md, issue 12, sixth pass); the heap is trimmed once the
    # rank's analyses end (analyze_rank)
    return SpecOutput(tables=tables, findings=list(findings), warnings=list(warnings), gathered=gathered,
                      table_rows=table_rows)


def split_processes(trace: Trace) -> int:
    """How many processes the analyses of ``trace`` (one rank) may use: 2 when ``--jobs`` (the
    :func:`traceview.loading.parse_jobs` setting; default the cores available, 1 in a worker process)
    allows it, the rank is big enough (:data:`MIN_SPLIT_EVENTS`), processes can be forked and this
    is the main thread; else 1."""
    from traceview.loading import wanted_parse_jobs

    least = MIN_SPLIT_EVENTS
    setting = os.environ.get("TRACEVIEW_SPLIT_MIN_EVENTS", "").strip()
    if setting.isdigit():
        least = int(setting)
    if least is None or trace.num_events < least or not hasattr(os, "fork") or wanted_parse_jobs() < 2:
        return 1
    # a fork copies only the calling thread: from the main thread of a command (whose only other
    # thread may be a progress bar's) it is safe; from a worker thread (a threaded Dask worker, a
    # server) another thread could hold a lock the child then waits on forever
    return 2 if threading.current_thread() is threading.main_thread() else 1


def run_specs(trace: Trace, todo: Sequence[AnalysisSpec], options: Options,
              rows: np.ndarray | None, bounded: bool = False) -> dict[str, SpecOutput]:
    """Every analysis of ``todo`` on one rank, by name: in this process, or in this process and a
    forked one side by side (:func:`split_processes`). Either way each analysis runs the same code
    on the same trace, so the outputs are the same (tables cut as they end when ``bounded``)."""
    if split_processes(trace) < 2 or len(todo) < 2:
        names = [spec.name for spec in todo]
        return {spec.name: run_spec(spec, trace, options, rows, bounded, names[i + 1:])
                for i, spec in enumerate(todo)}
    from traceview.analyses.steps import activity

    activity(trace, options)  # the context nearly every analysis reads: built once, inherited by the fork
    return ForkedSplit(trace, todo, options, rows, bounded).run()


class ForkedSplit:
    """The analyses of one rank in two processes: this one takes them from the front of the list,
    a forked child from the back, each claiming the next under a lock until they meet, so the split
    follows the real costs on this trace and analyses that share cached inputs (the list's
    neighbours mostly do) tend to stay together. The child inherits the trace and the caches built
    so far copy-on-write (nothing is copied to start it), and streams its outputs back pickled
    through a pipe. Should the child fail (an analysis raising, killed), whatever it did not send
    is run here, so errors surface as in one process."""

    def __init__(self, trace: Trace, todo: Sequence[AnalysisSpec], options: Options,
                 rows: np.ndarray | None, bounded: bool = False) -> None:
        import multiprocessing

        self.trace, self.todo, self.options, self.rows, self.bounded = trace, list(todo), options, rows, bounded
        ctx = multiprocessing.get_context("fork")
        # [next from the front, next from the back]: claimed under the lock
        self.bounds = ctx.Array("l", [0, len(self.todo) - 1], lock=True)

    def claim(self, from_back: bool) -> int | None:
        """The index of the next analysis to run (from the back of the list or the front), or None
        when every one is taken."""
        with self.bounds.get_lock():
            front, back = self.bounds[0], self.bounds[1]
            if front > back:
                return None
            if from_back:
                self.bounds[1] = back - 1
                return int(back)
            self.bounds[0] = front + 1
            return int(front)

    def drop_unread(self) -> None:
        """Forget this process's cached inputs that no analysis left unclaimed reads (the other
        process has its own copy of what it needs)."""
        from traceview.analyses import drop_unread_inputs

        with self.bounds.get_lock():
            front, back = self.bounds[0], self.bounds[1]
        drop_unread_inputs(self.trace, [spec.name for spec in self.todo[front:back + 1]])
        release_free_memory()

    def run(self) -> dict[str, SpecOutput]:
        from traceview.analyses.steps import clear_cache

        read_fd, write_fd = os.pipe()
        # the objects alive now go to the collector's permanent generation, so the child's
        # collections do not write to (and so copy) every page of them: its memory stays shared;
        # left frozen here when the caller had frozen them (a command: _common.quiet_collector)
        thaw = gc.unfreeze if gc.get_freeze_count() == 0 else (lambda: None)
        gc.freeze()
        try:
            pid = os.fork()
        except OSError:  # no process to be had (limits, memory): all of them here, as with --jobs 1
            thaw()
            os.close(read_fd)
            os.close(write_fd)
            return {spec.name: run_spec(spec, self.trace, self.options, self.rows, self.bounded) for spec in self.todo}
        if pid == 0:  # the child: never returns
            os.close(read_fd)
            self.child(write_fd)
        thaw()
        os.close(write_fd)
        received = False
        # the pipe is drained as the child writes (a full pipe would stop the child at its first
        # output); os.read releases the GIL, so the thread costs this process's analyses nothing
        chunks: list[bytes] = []
        reader = threading.Thread(target=drain, args=(read_fd, chunks), daemon=True)
        reader.start()
        try:
            outputs: dict[str, SpecOutput] = {}
            while (i := self.claim(from_back=False)) is not None:
                spec = self.todo[i]
                outputs[spec.name] = run_spec(spec, self.trace, self.options, self.rows, self.bounded)
                self.drop_unread()
            # nothing here reads this process's cached inputs again: freed while the child ends
            clear_cache()
            release_free_memory()
            reader.join()
            outputs.update(self.receive(chunks))
            received = True
        finally:
            reap(pid, kill=not received)
            reader.join()
            os.close(read_fd)
        for spec in self.todo:  # what the child did not send (it failed): here, in order
            if spec.name not in outputs:
                outputs[spec.name] = run_spec(spec, self.trace, self.options, self.rows, self.bounded)
        return outputs

    def child(self, write_fd: int) -> None:
        from traceview.analyses.steps import clear_cache

        code = 0
        try:
            with os.fdopen(write_fd, "wb") as out:
                while (i := self.claim(from_back=True)) is not None:
                    spec = self.todo[i]
                    try:
                        output = run_spec(spec, self.trace, self.options, self.rows, self.bounded)
                    except BaseException:  # the parent runs it again and raises it there
                        code = 1
                        break
                    pickle.dump((spec.name, output), out, protocol=pickle.HIGHEST_PROTOCOL)
                    # the child's cached inputs go with each analysis: its peak adds to this
                    # process's (the tree's ~8 MB less on the benchmark trace), for a few shared
                    # inputs computed twice (~0.05 s there)
                    del output
                    clear_cache()
                    release_free_memory()
        except BaseException:
            code = 1
        finally:
            os._exit(code)  # no atexit handlers, no flushing of the parent's buffers

    @staticmethod
    def receive(chunks: list[bytes]) -> dict[str, SpecOutput]:
        """The child's outputs (whole records only: one cut short by a failing child is dropped)."""
        data = io.BytesIO(b"".join(chunks))
        chunks.clear()
        got: dict[str, SpecOutput] = {}
        while True:
            try:
                name, output = pickle.load(data)
            except Exception:  # the end of the data, or a record cut short
                return got
            got[name] = output


def drain(fd: int, chunks: list[bytes]) -> None:
    """Read ``fd`` to its end into ``chunks``."""
    while block := os.read(fd, 1 << 20):
        chunks.append(block)


def reap(pid: int, *, kill: bool) -> None:
    """Wait for the forked child, killed first when ``kill`` (this process failed: its outputs are
    no longer wanted)."""
    import signal

    try:
        if kill:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ChildProcessError, ProcessLookupError):
        pass


# ------------------------------------------------------------------------------------ bounding


def bound_table(frame: pd.DataFrame, table: TableSpec, rows: int) -> pd.DataFrame:
    """``frame`` cut to what any report figure can need of it, rows kept in their order: its top
    ``rows`` by the table's sort key (and its sample rows), or its first rows when it has no key."""
    if table.sort_by is None or table.sort_by not in frame:
        return frame if len(frame) <= MAX_RANK_TABLE_ROWS else frame.iloc[:MAX_RANK_TABLE_ROWS].reset_index(drop=True)
    if len(frame) <= rows:
        return frame
    keep = np.zeros(len(frame), dtype=bool)
    keep[top_order(frame, table.sort_by)[:rows]] = True
    if table.sample_by:
        keep |= sample_mask(frame, table.sample_by, table.sample_rows)
    return frame.iloc[np.flatnonzero(keep)].reset_index(drop=True)


def bound_rank_tables(spec: AnalysisSpec, tables: dict[str, pd.DataFrame], options: Options) -> dict[str, pd.DataFrame]:
    """One rank's tables of one analysis, cut for a job (see :func:`bound_table`). With
    ``options.whole_only`` the per-event tables are left out and tables that have a whole-trace row
    (``step`` missing) keep only it; tables of one row per step and no whole-trace row (the steps
    themselves, which the summary's step count and step times come from) are kept."""
    out: dict[str, pd.DataFrame] = {}
    for name, frame in tables.items():
        table = spec.table(name)
        if options.whole_only:
            if table.per_event:
                continue
            if "step" in frame and not table.top_overall and frame["step"].isna().any():
                frame = frame[frame["step"].isna()].reset_index(drop=True)
        rows = max(REPORT_TABLE_ROWS, table.keep_rows, options.top_n)
        out[name] = drop_unused_categories(bound_table(frame, table, rows))
    return out


# ------------------------------------------------------------------------------------ reduce


def compact_ranks(ranks: Sequence[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    ordered = sorted({int(r) for r in ranks})
    parts = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(parts)


def merge_messages(per_rank: list[tuple[int, str]], n_ranks: int) -> list[str]:
    """Each distinct message once, saying which ranks gave it (nothing added for a one-rank job)."""
    seen: dict[str, list[int]] = {}
    for rank, msg in per_rank:
        seen.setdefault(msg, []).append(rank)
    out = []
    for msg, ranks in seen.items():
        distinct = set(ranks)
        if n_ranks <= 1:
            out.append(msg)
        elif len(distinct) == n_ranks:
            out.append(f"{msg} (all ranks)")
        else:
            out.append(f"{msg} (rank{'s' if len(distinct) > 1 else ''} {compact_ranks(ranks)})")
    return out


@dataclass
class Reduced:
    """The reduce step's output: results per analysis and the true row count of every table."""

    results: dict[str, AnalysisResult]
    table_rows: dict[tuple[str, str], int]


def reduce_ranks(ranks: list[RankResult], options: Options) -> Reduced:
    """Join per-rank results (in rank order): tables concatenated (``top_overall`` tables cut again),
    findings kept per rank (the report merges them across ranks), warnings merged, and each
    analysis's cross-rank step run on every rank's gathered inputs."""
    from traceview.analyses import specs

    ranks = sorted(ranks, key=lambda r: r.rank)
    pieces: dict[tuple[str, str], list[pd.DataFrame]] = {}
    gathered: dict[str, list[Any]] = {}
    table_rows: dict[tuple[str, str], int] = {}
    for start in range(0, len(ranks), REDUCE_BATCH):
        batch: dict[tuple[str, str], list[pd.DataFrame]] = {}
        for rr in ranks[start:start + REDUCE_BATCH]:
            tables, parts = rr.unpack()
            for name, ts in tables.items():
                for tname, frame in ts.items():
                    batch.setdefault((name, tname), []).append(frame)
            for name, part in parts.items():
                gathered.setdefault(name, []).append(part)
            for key, n in rr.table_rows.items():
                table_rows[key] = table_rows.get(key, 0) + n
        for key, frames in batch.items():
            pieces.setdefault(key, []).append(concat_tables(frames))
    results: dict[str, AnalysisResult] = {}
    for spec in specs():
        results[spec.name] = _reduce_analysis(spec, ranks, pieces, gathered.get(spec.name), table_rows, options)
    return Reduced(results=results, table_rows=table_rows)


def _reduce_analysis(spec: AnalysisSpec, ranks: list[RankResult], pieces: dict[tuple[str, str], list[pd.DataFrame]],
                     gathered: list[Any] | None, table_rows: dict[tuple[str, str], int],
                     options: Options) -> AnalysisResult:
    result = AnalysisResult(name=spec.name)
    for (name, tname), frames in pieces.items():
        if name != spec.name or spec.table(tname).cross_rank:
            continue
        table = concat_tables(frames)
        top = spec.table(tname).top_overall
        if top and len(table):
            cols, asc = [c for c, _ in top], [a for _, a in top]
            table = table.sort_values(cols, ascending=asc, kind="stable").head(options.top_n).reset_index(drop=True)
            table_rows[(name, tname)] = len(table)
        result.tables[tname] = table
    n_ranks = len(ranks)
    result.findings = [f for rr in ranks for f in rr.findings.get(spec.name, [])]
    result.warnings = merge_messages([(rr.rank, w) for rr in ranks for w in rr.warnings.get(spec.name, [])], n_ranks)
    if spec.reduce is not None and gathered:
        cross = spec.reduce(gathered, options)
        for tname, frame in cross.tables.items():
            result.tables[tname] = frame
            table_rows[(spec.name, tname)] = len(frame)
        result.findings.extend(cross.findings)
        result.warnings.extend(cross.warnings)
    declared = [t.name for t in spec.tables]
    order = sorted(result.tables, key=lambda t: declared.index(t) if t in declared else len(declared))
    result.tables = {t: result.tables[t] for t in order}
    return result


# ------------------------------------------------------------------------------------ the pipeline


def overview_of(trace: Trace, summaries: dict[int, dict[str, Any]] | None = None) -> TraceOverview:
    """What the report says about the inputs of an in-memory trace."""
    return TraceOverview(ranks=dict(trace.ranks), summaries=summaries if summaries is not None else trace.summary(),
                         warnings=list(trace.warnings))


class Executor(Protocol):
    """Runs the map step somewhere else (``traceview.jobs``: local processes, a Dask cluster): analyzes
    every rank of ``files`` and returns the per-rank results with what the report says of the inputs
    and of the execution."""

    def analyze_files(self, files: list[Path], options: Options, *, use_cache: bool,
                      skipped: list[Path]) -> "Mapped": ...


@dataclass
class Mapped:
    """An executor's answer: per-rank results (packed or not), the inputs' overview, and how it ran."""

    ranks: list[RankResult]
    overview: TraceOverview
    execution: dict[str, Any] = field(default_factory=dict)


def map_trace(trace: Trace, options: Options, *, whole_tables: bool = True) -> list[RankResult]:
    """The map step in this process: every rank of ``trace`` analysed on its own, tables whole (or
    cut as a job's are: ``whole_tables=False``)."""
    out = []
    for rank in trace.rank_ids:
        if options.ranks is not None and rank not in options.ranks:
            continue
        sub, rows = select_rank(trace, rank)
        out.append(analyze_rank(sub, rank, rows, options, bounded=not whole_tables))
    return out


def analyze(source: Source, options: Options | None = None, *, use_cache: bool = True,
            executor: Executor | None = None, progress: Callable[[Path, int, int], None] | None = None,
            step_marker: str | None = None, whole_tables: bool = True) -> Report:
    """Analyze traces and return the :class:`~traceview.report.Report` every front end renders.

    ``source``: a :class:`Trace`, or trace files and directories (any registered input format).
    ``executor``: run the map step elsewhere (``traceview.jobs.LocalProcesses(n)``,
    ``traceview.jobs.DaskCluster(address)``); the report is the same as in memory.
    ``whole_tables=False``: each analysis's tables are cut, as it ends, to the rows any report
    figure needs (as a job's are: :func:`bound_rank_tables`), so ``report.table(...)`` holds those
    rows only; the report's data is the same. For a report that is only rendered (``traceview
    analyze --no-cache``): the per-event tables of the first analyses do not stay in memory while
    the others run.
    """
    options = options or Options()
    if step_marker is not None:
        options = Options(**{**options.__dict__, "step_marker": step_marker})
    if executor is not None:
        if isinstance(source, Trace):
            raise TypeError("an executor analyzes files: pass paths, not a loaded Trace")
        skipped: list[Path] = []
        files = find_trace_files(_paths(source), skipped)
        mapped = executor.analyze_files(files, options, use_cache=use_cache, skipped=skipped)
        reduced = reduce_ranks(mapped.ranks, options)
        return build_report(mapped.overview, reduced.results, options=options, table_rows=reduced.table_rows,
                            execution=mapped.execution)
    trace = source if isinstance(source, Trace) else load(_paths(source), use_cache=use_cache, progress=progress,
                                                          step_marker=options.step_marker)
    ranks = map_trace(trace, options, whole_tables=whole_tables)
    reduced = reduce_ranks(ranks, options)
    overview = overview_of(trace, {rr.rank: rr.summary for rr in ranks})
    return build_report(overview, reduced.results, options=options, table_rows=reduced.table_rows,
                        execution={"executor": "in-process"}, trace=trace)


def _paths(source: Any) -> list[str | os.PathLike[str]]:
    if isinstance(source, (str, os.PathLike)):
        return [source]
    return list(source)
