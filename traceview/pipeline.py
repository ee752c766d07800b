"""The one pipeline: traces in, one :class:`~traceview.report.Report` out, for every front end.

    source (paths or a Trace) -> batches of ranks: analyses (map) -> reduce across batches -> Report

Every analysis runs once per batch of ranks, on an :class:`~traceview.context.AnalysisContext` of
that batch (:func:`analyze_batch`): one call handles all the batch's ranks, grouping by rank and
device on columns. :func:`reduce_batches` joins the batches: tables are concatenated in rank order,
cross-rank figures come from each analysis's declared ``gather``/``reduce``
(:class:`traceview.registry.AnalysisSpec`), warnings are merged per rank. The in-memory path
(:func:`analyze` on a Trace or on paths) is one batch of all ranks with whole tables; the job path
(``traceview.jobs``: local processes or a Dask cluster) maps files to workers, each analysing its
file's ranks as a batch and sending bounded tables (:func:`bound_batch_tables`: every row any report
figure needs), and hands the batch results to the same :func:`reduce_batches` and
:func:`traceview.report.build_report`. So both give the same report, figure for figure.

Rows: a ``row`` (or ``*_row``) column refers to a row of ``trace.events`` (of all files concatenated
in file order, as ``traceview.load`` builds it), whichever path computed it.
"""

from __future__ import annotations

import os
import pickle
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa

from traceview.context import AnalysisContext, run_analyses
from traceview.findings import AnalysisResult, Finding, Options
from traceview.loading import find_trace_files, load
from traceview.model import RankInfo, Trace
from traceview.packed_frames import (PackedFrame, concat_packed, join_inputs, join_tables, pack_frame,
                                     pack_inputs, shift_packed_rows, unpack_frame, unpack_inputs)
from traceview.registry import AnalysisSpec, TableSpec, analysis_specs, run_order
from traceview.report import REPORT_TABLE_ROWS, Report, TraceOverview, build_report
from traceview.tables import drop_unused_categories, sample_mask, top_order
from traceview.units import compact_ranks

#: rows of a table without a sort key that a rank keeps in a job (the report shows the first ones)
MAX_RANK_TABLE_ROWS = 5000
#: batch results the reduce unpacks before joining each table's (and cross-rank input's) arrays
JOIN_EVERY = 128

Source = str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | Trace
#: ``steps(phase, done, total)``: called at the pipeline's phase boundaries and per analysis / per
#: reduce chunk (never per event), phases "analyses", "reduce", "report"; None: silent. The library
#: prints nothing itself: the CLI draws a bar from it on a terminal's standard error.
StepProgress = Callable[[str, int, int], None]


# ------------------------------------------------------------------------------------ per batch


class TableSink(Protocol):
    """Where the whole tables of an in-memory analysis go as each analysis ends (the report cache's
    writer, :class:`traceview.report_cache.ReportWriter`), each table in the form the whole report
    holds it: so that it is written out at once rather than held to the end, and the report kept in
    memory may be cut (``whole_tables=False``) while the stored one is whole."""

    def add_table(self, analysis: str, table: str, frame: pd.DataFrame) -> None:
        """Table ``table`` of ``analysis``, as the whole report holds it."""

    def order_tables(self, analysis: str, tables: list[str]) -> None:
        """The order of every table given for ``analysis`` in the whole report (called once all
        are given, after the reduce)."""


@dataclass
class BatchResult:
    """What the analyses produced for one batch of ranks: their tables (whole, or bounded in a job),
    the number of rows each table had before any cut, the findings and the warnings (rank, message)
    per analysis, and the inputs of the cross-rank steps. ``pack()`` pickles and compresses the
    tables (one bytes object travels and waits in a driver holding thousands of ranks);
    ``unpack()`` gives them back."""

    ranks: list[int]
    infos: dict[int, RankInfo]
    summaries: dict[int, dict[str, Any]]
    tables: dict[str, dict[str, pd.DataFrame]]
    table_rows: dict[tuple[str, str], int]
    findings: dict[str, list[Finding]]
    warnings: dict[str, list[tuple[int, str]]]
    gathered: dict[str, Any]
    payload: bytes = b""

    def pack(self) -> "BatchResult":
        if not self.payload:
            tables = {a: {t: pack_frame(f) for t, f in ts.items()} for a, ts in self.tables.items()}
            gathered = {a: pack_inputs(g) for a, g in self.gathered.items()}
            data = pickle.dumps((tables, gathered), protocol=pickle.HIGHEST_PROTOCOL)
            self.payload = zlib.compress(data, 1)
            self.tables, self.gathered = {}, {}
        return self

    def unpack(self) -> tuple[dict[str, dict[str, pd.DataFrame]], dict[str, Any]]:
        """(tables, gathered cross-rank inputs), whether packed or not."""
        tables, gathered = self.unpack_packed()
        return ({a: {t: unpack_frame(f) for t, f in ts.items()} for a, ts in tables.items()},
                {a: unpack_inputs(g) for a, g in gathered.items()})

    def unpack_packed(self) -> tuple[dict[str, dict[str, PackedFrame]], dict[str, Any]]:
        """(tables as column arrays, gathered cross-rank inputs, packed where their type declares
        ``merge_fields``): what the reduce joins, without a DataFrame per rank."""
        if self.payload:
            tables, gathered = pickle.loads(zlib.decompress(self.payload))
            return tables, gathered
        whole = {a: {t: PackedFrame(len(f), list(f.columns), [], [], [], frame=f) for t, f in ts.items()}
                 for a, ts in self.tables.items()}  # (in memory: the frames themselves)
        return whole, self.gathered

    def shift_rows(self, offset: int) -> "BatchResult":
        """Row columns moved by ``offset`` (the rows of the files before this batch's); a packed
        batch stays packed (its tables moved as column arrays)."""
        if not offset:
            return self
        if not self.payload:
            self.tables = {a: {t: map_rows(f, None, offset) for t, f in ts.items()} for a, ts in self.tables.items()}
            self.gathered = {a: g.remap_rows(None, offset) for a, g in self.gathered.items()}
            return self
        tables, gathered = self.unpack_packed()
        moved = {a: {t: shift_packed_rows(f, offset) for t, f in ts.items()} for a, ts in tables.items()}
        inputs = {a: pack_inputs(unpack_inputs(g).remap_rows(None, offset)) for a, g in gathered.items()}
        self.payload = zlib.compress(pickle.dumps((moved, inputs), protocol=pickle.HIGHEST_PROTOCOL), 1)
        return self


def select_rank(trace: Trace, rank: int) -> tuple[Trace, np.ndarray | None]:
    """The events, links and steps of one rank as a trace of their own, and for each of its rows the
    row in ``trace`` (None when the trace holds that rank only): for comparing one rank analysed
    alone with the batch it belongs to."""
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
    """Row columns: rows of a trace cut from another (``rows[row]``) -> rows across files
    (``+ offset``). Missing rows (negative or NA) stay missing."""
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
            values = pd.array(new, dtype=frame[c].dtype)
            values[mask] = pd.NA
            frame[c] = values
        else:
            frame[c] = new.astype(frame[c].dtype)
    return frame


def analysed_ranks(trace: Trace, options: Options) -> list[int]:
    """The ranks of ``trace`` the analyses cover (``Options.ranks`` of them)."""
    return [r for r in trace.rank_ids if options.ranks is None or r in options.ranks]


def in_rank_order(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its ranks' rows in rank order (each rank's rows in their own order), as the
    tables of ranks analysed one by one and concatenated are: ties in a sort key are then broken by
    rank whichever batches the ranks were analysed in."""
    if "rank" not in frame or len(frame) < 2:
        return frame
    rank = frame["rank"].to_numpy()
    if rank.dtype == object or (rank[1:] >= rank[:-1]).all():
        return frame
    return frame.iloc[np.argsort(rank, kind="stable")].reset_index(drop=True)


def analyze_batch(trace: Trace, options: Options, *, bounded: bool = False,
                  steps: StepProgress | None = None, sink: TableSink | None = None) -> BatchResult:
    """Run every analysis once on ``trace`` (the batch's ranks) and gather the cross-rank inputs.
    ``bounded``: cut each table to the rows a report can need (:func:`bound_batch_tables`) as its
    analysis ends, for a job's workers and for a report that is only rendered (the per-event tables
    of the first analyses then no longer take memory while the others run). ``sink``: given each
    table but the cross-rank ones as the whole report of this one batch holds it
    (:func:`whole_table`), before any cut: for the in-memory path only."""
    import traceview.analyses  # noqa: F401  (registers every analysis and derived input)

    ctx = AnalysisContext(trace, options)
    ranks = analysed_ranks(trace, options)
    out = BatchResult(ranks=ranks, infos={r: trace.ranks[r] for r in ranks},
                      summaries={r: s for r, s in trace.summary().items() if r in ranks},
                      tables={}, table_rows={}, findings={}, warnings={}, gathered={})

    specs = run_order(analysis_specs())
    done = [0]
    if steps is not None:
        steps("analyses", 0, len(specs))

    def keep(spec: AnalysisSpec, result: AnalysisResult) -> None:
        tables = {name: in_rank_order(frame) for name, frame in result.tables.items()}
        out.table_rows.update(((spec.name, t), int(len(f))) for t, f in tables.items())
        if sink is not None:
            for name, frame in tables.items():
                if not spec.table(name).cross_rank:
                    sink.add_table(spec.name, name, whole_table(frame, spec.table(name), options))
        out.tables[spec.name] = bound_batch_tables(spec, tables, options) if bounded else tables
        out.findings[spec.name] = list(result.findings)
        out.warnings[spec.name] = [(r, w) for r in ranks for w in result.warnings] + list(result.rank_warnings)
        if spec.gather is not None:
            with ctx.limited_to(spec.requires):
                out.gathered[spec.name] = spec.gather(ctx).compact()
        done[0] += 1
        if steps is not None:
            steps("analyses", done[0], len(specs))

    run_analyses(ctx, specs, keep)
    return out


# ------------------------------------------------------------------------------------ bounding


def rank_positions(rank: np.ndarray) -> np.ndarray:
    """The position of each row among the rows of its rank, in the given order (0 for the first)."""
    if rank.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(rank, kind="stable")
    sorted_rank = rank[order]
    starts = np.flatnonzero(np.concatenate([[True], sorted_rank[1:] != sorted_rank[:-1]]))
    counts = np.diff(np.append(starts, rank.size))
    pos = np.empty(rank.size, dtype=np.int64)
    pos[order] = np.arange(rank.size, dtype=np.int64) - np.repeat(starts, counts)
    return pos


def bound_table(frame: pd.DataFrame, table: TableSpec, rows: int) -> pd.DataFrame:
    """``frame`` cut to what any report figure can need of it, per rank, rows kept in their order:
    each rank's top ``rows`` by the table's sort key (and its sample rows), or its first rows when
    the table has no key."""
    rank = frame["rank"].to_numpy(np.int64) if "rank" in frame else np.zeros(len(frame), dtype=np.int64)
    if table.sort_by is None or table.sort_by not in frame:
        keep = rank_positions(rank) < MAX_RANK_TABLE_ROWS
    else:
        order = top_order(frame, table.sort_by)
        keep = np.zeros(len(frame), dtype=bool)
        keep[order[rank_positions(rank[order]) < rows]] = True
        if table.sample_by:
            for r in np.unique(rank).tolist():  # each rank's own sample (a few ranks per batch)
                mine = np.flatnonzero(rank == r)
                keep[mine[sample_mask(frame.iloc[mine], table.sample_by, table.sample_rows)]] = True
    if keep.all():
        return frame
    return frame.iloc[np.flatnonzero(keep)].reset_index(drop=True)


def bound_batch_tables(spec: AnalysisSpec, tables: dict[str, pd.DataFrame],
                       options: Options) -> dict[str, pd.DataFrame]:
    """A batch's tables of one analysis, cut for a job (see :func:`bound_table`). With
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


def reduce_batches(batches: list[BatchResult], options: Options, steps: StepProgress | None = None) -> Reduced:
    """Join batch results (in rank order): tables concatenated (``top_overall`` tables cut again),
    findings kept per rank (the report merges them across ranks), warnings merged, and each
    analysis's cross-rank step run on every batch's gathered inputs."""
    import traceview.analyses  # noqa: F401  (registers every analysis: a driver may not have imported them)

    batches = sorted(batches, key=lambda b: min(b.ranks, default=0))
    pieces: dict[tuple[str, str], list[PackedFrame]] = {}
    gathered: dict[str, list[Any]] = {}
    table_rows: dict[tuple[str, str], int] = {}
    for i, batch in enumerate(batches, start=1):
        tables, parts = batch.unpack_packed()
        for name, ts in tables.items():
            for tname, frame in ts.items():
                pieces.setdefault((name, tname), []).append(frame)
        for name, part in parts.items():
            gathered.setdefault(name, []).append(part)
        for key, n in batch.table_rows.items():
            table_rows[key] = table_rows.get(key, 0) + n
        if i % JOIN_EVERY == 0 or i == len(batches):  # the arrays joined: no object per rank held
            pieces = {key: join_tables(frames) for key, frames in pieces.items()}
            gathered = {name: join_inputs(ps) for name, ps in gathered.items()}
            if steps is not None:
                steps("reduce", i, len(batches))
    n_ranks = sum(len(b.ranks) for b in batches)
    inputs = {name: [unpack_inputs(p) for p in ps] for name, ps in gathered.items()}
    results: dict[str, AnalysisResult] = {}
    for spec in analysis_specs():
        result = concatenated(spec, pieces, table_rows, options)
        result.findings = [f for b in batches for f in b.findings.get(spec.name, [])]
        result.warnings = merge_messages(sorted((w for b in batches for w in b.warnings.get(spec.name, [])),
                                                key=lambda rw: rw[0]), n_ranks)
        cross_rank_step(spec, result, inputs.get(spec.name), table_rows, options)
        results[spec.name] = result
    return Reduced(results=results, table_rows=table_rows)


def concatenated(spec: AnalysisSpec, pieces: dict[tuple[str, str], list[PackedFrame]],
                 table_rows: dict[tuple[str, str], int], options: Options) -> AnalysisResult:
    """The result of ``spec`` with its per-batch tables concatenated (``top_overall`` ones cut)."""
    result = AnalysisResult(name=spec.name)
    for (name, tname), frames in pieces.items():
        if name != spec.name or spec.table(tname).cross_rank:
            continue
        table = concat_packed(frames)
        if spec.table(tname).top_overall and len(table):
            table = top_overall_cut(table, spec.table(tname), options)
            table_rows[(name, tname)] = len(table)
        result.tables[tname] = table
    return result


def top_overall_cut(frame: pd.DataFrame, table: TableSpec, options: Options) -> pd.DataFrame:
    """The ``top_n`` rows of a ``top_overall`` table across ranks, by its declared key."""
    cols, asc = [c for c, _ in table.top_overall], [a for _, a in table.top_overall]
    return frame.sort_values(cols, ascending=asc, kind="stable").head(options.top_n).reset_index(drop=True)


def whole_table(frame: pd.DataFrame, table: TableSpec, options: Options) -> pd.DataFrame:
    """A table of one batch (in rank order) as :func:`reduce_batches` of that batch alone, with
    whole tables, gives it: the same rows renumbered, a ``top_overall`` table cut."""
    frame = frame.reset_index(drop=True)
    return top_overall_cut(frame, table, options) if table.top_overall and len(frame) else frame


def declared_order(spec: AnalysisSpec, tables: Iterable[str]) -> list[str]:
    """``tables`` in the order ``spec`` declares them (undeclared ones last, as given)."""
    declared = [t.name for t in spec.tables]
    return sorted(tables, key=lambda t: declared.index(t) if t in declared else len(declared))


def sink_cross_rank_tables(sink: TableSink, batch: BatchResult, reduced: "Reduced") -> None:
    """Give ``sink`` the cross-rank tables of the reduce of ``batch`` alone, and the order of every
    analysis's tables in the whole report."""
    for spec in analysis_specs():
        result = reduced.results.get(spec.name)
        if result is None:
            continue
        cross = [t for t in result.tables if spec.table(t).cross_rank]
        for name in cross:
            sink.add_table(spec.name, name, result.tables[name])
        given = [t for (a, t) in batch.table_rows if a == spec.name and not spec.table(t).cross_rank]
        sink.order_tables(spec.name, declared_order(spec, given + cross))


def cross_rank_step(spec: AnalysisSpec, result: AnalysisResult, gathered: list[Any] | None,
                    table_rows: dict[tuple[str, str], int], options: Options) -> None:
    """Add the cross-rank tables, findings and warnings of ``spec`` to ``result``; tables in the
    spec's declared order."""
    if spec.reduce is not None and gathered:
        cross = spec.reduce(gathered, options)
        for tname, frame in cross.tables.items():
            result.tables[tname] = frame
            table_rows[(spec.name, tname)] = len(frame)
        result.findings.extend(cross.findings)
        result.warnings.extend(cross.warnings)
    result.tables = {t: result.tables[t] for t in declared_order(spec, result.tables)}


# ------------------------------------------------------------------------------------ the pipeline


def overview_of(trace: Trace, summaries: dict[int, dict[str, Any]] | None = None) -> TraceOverview:
    """What the report says about the inputs of an in-memory trace."""
    return TraceOverview(ranks=dict(trace.ranks), summaries=summaries if summaries is not None else trace.summary(),
                         warnings=list(trace.warnings))


class Executor(Protocol):
    """Runs the map step somewhere else (``traceview.jobs``: local processes, a Dask cluster): analyzes
    every rank of ``files`` and returns the batch results with what the report says of the inputs
    and of the execution."""

    def analyze_files(self, files: list[Path], options: Options, *, use_cache: bool,
                      skipped: list[Path]) -> "Mapped": ...


@dataclass
class Mapped:
    """An executor's answer: batch results (packed or not), the inputs' overview, and how it ran."""

    batches: list[BatchResult]
    overview: TraceOverview
    execution: dict[str, Any] = field(default_factory=dict)


def analyze(source: Source, options: Options | None = None, *, use_cache: bool = True,
            executor: Executor | None = None, progress: Callable[[Path, int, int], None] | None = None,
            step_marker: str | None = None, whole_tables: bool = True, steps: StepProgress | None = None,
            sink: TableSink | None = None) -> Report:
    """Analyze traces and return the :class:`~traceview.report.Report` every front end renders.

    ``source``: a :class:`Trace`, or trace files and directories (any registered input format).
    ``executor``: run the map step elsewhere (``traceview.jobs.LocalProcesses(n)``,
    ``traceview.jobs.DaskCluster(address)``); the report is the same as in memory.
    ``whole_tables=False``: each analysis's tables are cut, as it ends, to the rows any report
    figure needs (as a job's are: :func:`bound_batch_tables`), so ``report.table(...)`` holds those
    rows only; the report's data is the same. For a report that is only rendered (``traceview
    analyze --no-cache``): the per-event tables of the first analyses do not stay in memory while
    the others run. ``steps(phase, done, total)``: :data:`StepProgress` (None: silent).
    ``sink``: given the whole report's tables as each analysis ends (:class:`TableSink`: the report
    cache's writer), whatever ``whole_tables``; in memory only (not with an ``executor``).
    """
    options = options or Options()
    if step_marker is not None:
        options = Options(**{**options.__dict__, "step_marker": step_marker})
    if executor is not None:
        if sink is not None:
            raise TypeError("a job's tables are bounded: no table sink with an executor")
        if isinstance(source, Trace):
            raise TypeError("an executor analyzes files: pass paths, not a loaded Trace")
        skipped: list[Path] = []
        files = find_trace_files(_paths(source), skipped)
        mapped = executor.analyze_files(files, options, use_cache=use_cache, skipped=skipped)
        reduced = reduce_batches(mapped.batches, options, steps)
        return _reported(steps, lambda: build_report(mapped.overview, reduced.results, options=options,
                                                     table_rows=reduced.table_rows, execution=mapped.execution))
    trace = source if isinstance(source, Trace) else load(_paths(source), use_cache=use_cache, progress=progress,
                                                          step_marker=options.step_marker)
    batch = analyze_batch(trace, options, bounded=not whole_tables, steps=steps, sink=sink)
    reduced = reduce_batches([batch], options, steps)
    if sink is not None:
        sink_cross_rank_tables(sink, batch, reduced)
    overview = overview_of(trace, batch.summaries)
    return _reported(steps, lambda: build_report(overview, reduced.results, options=options,
                                                 table_rows=reduced.table_rows, execution={"executor": "in-process"},
                                                 trace=trace))


def _reported(steps: StepProgress | None, build: Callable[[], Report]) -> Report:
    """``build()`` (the report) between a "report" step at 0 and at 1."""
    if steps is not None:
        steps("report", 0, 1)
    report = build()
    if steps is not None:
        steps("report", 1, 1)
    return report


def _paths(source: Any) -> list[str | os.PathLike[str]]:
    if isinstance(source, (str, os.PathLike)):
        return [source]
    return list(source)
