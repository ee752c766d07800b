"""Steps and the per-trace GPU activity context that the time-based analyses share.

Steps: CPU ranges chosen by ``Options.step_marker`` (a regex searched in the names of Kineto user
annotations / ``record_function`` ranges, CPU ops and NVTX ranges). Without one, per rank:
``ProfilerStep#N`` (Kineto, or NVTX under ``emit_nvtx``), else ``step_N`` / ``iteration N`` ranges
(``traceview.model.steps_from_annotations``). Every figure exists for the whole trace and per step.
With no steps, :func:`step_marker_candidates` lists the repeated ranges that could mark them.

Each GPU activity is assigned to a step via its launch call (the step whose CPU range contains the
launch call's start), falling back to the step range containing the activity's start; per-step GPU
window = first start .. last end of that step's activity. Activity in no step has step ``-1``
(``NO_STEP``) and counts only in the whole-trace figures.

:func:`activity` is the derived input ``activity``: the arrays the temporal, idle-gap,
launch-overhead and most other analyses need, built once per analysis context.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from traceview.context import AnalysisContext
from traceview.findings import Options
from traceview.model import Kind, Trace, step_range_rows
from traceview.registry import register_input

from . import classify
from traceview import intervals as iv

NO_STEP = -1


@dataclass
class StepTable:
    """Steps of the selected ranks, sorted by rank then start."""

    rank: np.ndarray
    step: np.ndarray
    name: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return int(self.rank.size)

    def counts(self) -> dict[int, int]:
        """Number of steps per rank."""
        ranks, counts = np.unique(self.rank, return_counts=True)
        return {int(r): int(c) for r, c in zip(ranks, counts)}

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {"rank": self.rank, "step": self.step, "name": self.name, "start_ns": self.start, "end_ns": self.end}
        )


def step_table(trace: Trace, options: Options) -> StepTable:
    """The steps (``Options.step_marker`` or the parser's), limited to ``Options.ranks``."""
    table = trace.find_steps(options.step_marker)
    rank = table.column("rank").to_numpy().astype(np.int64)
    step = table.column("step").to_numpy().astype(np.int64)
    name = np.asarray(table.column("name").to_pylist(), dtype=object)
    start = table.column("start_ns").to_numpy().astype(np.int64)
    end = table.column("end_ns").to_numpy().astype(np.int64)
    keep = np.ones(rank.size, dtype=bool) if options.ranks is None else np.isin(rank, list(options.ranks))
    sel = np.flatnonzero(keep)
    sel = sel[np.lexsort((start[sel], rank[sel]))]
    return StepTable(rank[sel], step[sel], name[sel], start[sel], end[sel])


def analysed_ranks(ctx: AnalysisContext) -> np.ndarray:
    """The ranks of the context's trace the analyses cover (``Options.ranks`` of them), sorted."""
    ranks = np.asarray(ctx.trace.rank_ids, dtype=np.int64)
    if ctx.options.ranks is not None:
        ranks = ranks[np.isin(ranks, list(ctx.options.ranks))]
    return np.sort(ranks)


def assign_to_steps(steps: StepTable, rank: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Step number of the step (of the same rank) whose range contains ``t``; ``NO_STEP`` else.

    Ranges are half-open ``[start, end)``; if steps overlap, the one that started last wins.
    """
    rank = np.asarray(rank, dtype=np.int64)
    out = np.full(rank.size, NO_STEP, dtype=np.int64)
    if len(steps) == 0 or rank.size == 0:
        return out
    hit = iv.innermost_covering(steps.rank, steps.start, steps.end, rank, t, np.asarray(t) + 1)
    ok = hit >= 0
    out[ok] = steps.step[hit[ok]]
    return out


@dataclass
class Activity:
    """GPU activity (kernel, memcpy, memset) of the selected ranks, one entry per event.

    ``api_*`` describe the launch call (from the launch link), ``-1`` when there is none.
    """

    row: np.ndarray  # row in trace.events
    rank: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    kind: np.ndarray
    cls: np.ndarray  # classify.COMPUTE / COMMUNICATION / MEMORY
    start: np.ndarray
    end: np.ndarray
    api_row: np.ndarray
    api_start: np.ndarray
    api_end: np.ndarray
    step: np.ndarray  # step number or NO_STEP
    steps: StepTable

    def __len__(self) -> int:
        return int(self.row.size)

    @property
    def has_steps(self) -> bool:
        return len(self.steps) > 0


def launch_links(ctx: AnalysisContext) -> tuple[np.ndarray, np.ndarray]:
    """``Trace.launch_links()`` (api_row, gpu_row), found once per context (read-only)."""
    links: tuple[np.ndarray, np.ndarray] = ctx.input("links.launch")
    return links


def cpu_op_links(ctx: AnalysisContext) -> tuple[np.ndarray, np.ndarray]:
    """``Trace.cpu_op_links()`` (cpu_op_row, runtime_row), found once per context (read-only)."""
    links: tuple[np.ndarray, np.ndarray] = ctx.input("links.cpu_op")
    return links


def column_equals(table: pa.Table, column: str, value: str) -> np.ndarray:
    """Rows of a dictionary column of ``table`` (events, links) equal to ``value``, compared by
    dictionary code (not by decoding every row)."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=bool)
    col = table.column(column).combine_chunks()
    words = col.dictionary.to_pylist()
    if value not in words:
        return np.zeros(table.num_rows, dtype=bool)
    return col.indices.fill_null(-1).to_numpy(zero_copy_only=False) == words.index(value)


def flow_links(trace: Trace, category: str) -> tuple[np.ndarray, np.ndarray]:
    """(source rows, destination rows) of the trace's flow links of ``category`` (``fwdbwd``: a
    forward op -> its backward op)."""
    links = trace.links
    flow = column_equals(links, "type", "flow") & column_equals(links, "category", category)
    return (links.column("src_row").to_numpy()[flow].astype(np.int64),
            links.column("dst_row").to_numpy()[flow].astype(np.int64))


def links_of(trace: Trace, link_type: str) -> tuple[np.ndarray, np.ndarray]:
    """The links of one type, selected on the type column's dictionary codes (comparing the
    decoded strings of every link cost more than the rest of the lookup)."""
    links = trace.links
    column = links.column("type")
    column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if links.num_rows == 0 or not isinstance(column, pa.DictionaryArray):
        src, dst = trace.launch_links() if link_type == "launch" else trace.cpu_op_links()
    else:
        wanted = np.flatnonzero(np.asarray(column.dictionary.to_pylist(), dtype=object) == link_type)
        keep = np.isin(column.indices.to_numpy(zero_copy_only=False), wanted)
        src = links.column("src_row").to_numpy()[keep]
        dst = links.column("dst_row").to_numpy()[keep]
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    src.flags.writeable = dst.flags.writeable = False  # shared by every analysis
    return src, dst


def activity(ctx: AnalysisContext) -> Activity:
    """The GPU activity of the context's trace (the derived input ``activity``)."""
    act: Activity = ctx.input("activity")
    return act


def build_activity(ctx: AnalysisContext) -> Activity:
    """:func:`activity`, built now."""
    trace, options = ctx.trace, ctx.options
    cls_all = classify.activity_class(ctx)
    rank_all = trace.column("rank").astype(np.int64)
    keep = cls_all != classify.NONE
    if options.ranks is not None:
        keep &= np.isin(rank_all, list(options.ranks))
    rows = np.flatnonzero(keep)
    start_all = trace.column("start_ns")
    dur_all = trace.column("dur_ns")
    start = start_all[rows]
    end = start + np.maximum(dur_all[rows], 0)

    # launch call of each activity (a GPU row has at most one launch call; keep the first)
    api_of = np.full(trace.num_events, -1, dtype=np.int64)
    api_rows, gpu_rows = launch_links(ctx)
    if api_rows.size:
        rev = slice(None, None, -1)  # assign in reverse so the first link wins
        api_of[gpu_rows[rev]] = api_rows[rev]
    api_row = api_of[rows]
    has_api = api_row >= 0
    safe = np.where(has_api, api_row, 0)
    api_start = np.where(has_api, start_all[safe], -1)
    api_end = np.where(has_api, start_all[safe] + np.maximum(dur_all[safe], 0), -1)

    steps = step_table(trace, options)
    rank = rank_all[rows]
    step = np.full(rows.size, NO_STEP, dtype=np.int64)
    if len(steps):
        step[has_api] = assign_to_steps(steps, rank[has_api], api_start[has_api])
        missing = step == NO_STEP
        step[missing] = assign_to_steps(steps, rank[missing], start[missing])

    return Activity(
        row=rows,
        rank=rank,
        device=trace.column("device")[rows].astype(np.int64),
        stream=trace.column("stream")[rows].astype(np.int64),
        kind=trace.kind_codes()[rows],
        cls=cls_all[rows],
        start=start,
        end=end,
        api_row=api_row,
        api_start=api_start,
        api_end=api_end,
        step=step,
        steps=steps,
    )


#: columns of :func:`step_marker_candidates` (and ``rank``, last)
CANDIDATE_COLUMNS = ["marker", "name", "kind", "count", "ranks", "median_dur_ns", "covered_ns", "coverage",
                     "typical_coverage", "sequential"]
#: the "no steps found" warning suggests candidates whose typical coverage is at least this
HINT_MIN_COVERAGE = 0.25
_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$", re.DOTALL)
_REGEX_SPECIAL = re.compile(r"([.^$*+?{}\[\]\\|()])")


def _escape(text: str) -> str:
    """``re.escape`` for the characters that are special in a regex only (``#``, spaces and ``:``
    stay readable in the suggested ``--step-marker``)."""
    return _REGEX_SPECIAL.sub(r"\\\1", text)


def fold_step_name(name: str) -> tuple[str, str]:
    """(shown name, regex) of a range name with its trailing number folded: ``step_12`` ->
    (``step_#``, ``^step_\\d+$``); a name without one stands for itself."""
    m = _TRAILING_NUMBER.match(name)
    if m is None:
        return name, f"^{_escape(name)}$"
    prefix = m.group(1)
    shown = prefix + ("N" if prefix.endswith("#") else "#")  # ProfilerStep#12 -> ProfilerStep#N
    return shown, f"^{_escape(prefix)}\\d+$"


def step_marker_candidates(ctx: AnalysisContext) -> pd.DataFrame:
    """Repeated CPU ranges that could mark steps, per rank, each rank's best first (one row per rank
    and folded name, ``rank`` the last column: a batch of ranks gives what each rank alone gives).

    Ranges: annotations (Kineto user annotations, NVTX ranges) and top-level CPU ops, names with a
    trailing number folded (``step_12`` -> ``step_#``); a candidate repeats (>= 2 ranges) on at
    least one rank. Columns: ``marker`` (the ``--step-marker`` regex that selects them), ``name``,
    ``kind`` (annotation / cpu_op), ``count`` (the rank's ranges), ``ranks`` (1: the rank),
    ``median_dur_ns``, ``covered_ns`` (their union), ``coverage`` (``covered_ns`` over the rank's
    time span: how much of its trace they cover),
    ``typical_coverage`` (the same with every range lasting the median, capped at ``coverage``:
    high for step-like markers, low for a name such as ``aten::to`` whose coverage is a few long
    outliers), ``sequential`` (no two of them overlap, as steps do). Sorted by rank, then
    sequential, typical coverage, count; ``Options.top_n`` rows per rank.
    """
    candidates: pd.DataFrame = ctx.input("steps.candidates")
    return candidates


def _candidate_rows(trace: Trace, options: Options) -> np.ndarray:
    """Annotation rows, and the CPU ops that are outermost on their thread, of the selected ranks."""
    rows = step_range_rows(trace.events)
    rank = trace.column("rank")[rows].astype(np.int64)
    if options.ranks is not None:
        rows, rank = rows[np.isin(rank, list(options.ranks))], rank[np.isin(rank, list(options.ranks))]
    is_op = trace.kind_codes()[rows] == int(Kind.CPU_OP)
    if is_op.any():
        ops = rows[is_op]
        start = trace.column("start_ns")[ops]
        end = start + np.maximum(trace.column("dur_ns")[ops], 0)
        codes, _ = iv.combine_keys(rank[is_op], trace.column("pid")[ops], trace.column("tid")[ops])
        outer = iv.nesting_depth(codes, start, end) == 0
        rows = np.concatenate([rows[~is_op], ops[outer]])
    return np.sort(rows)


def _candidates(trace: Trace, options: Options) -> pd.DataFrame:
    rows = _candidate_rows(trace, options)
    if rows.size == 0:
        return pd.DataFrame({c: [] for c in [*CANDIDATE_COLUMNS, "rank"]})
    names = trace.events.column("name").combine_chunks()
    dictionary = names.dictionary.to_pylist()
    folded = [fold_step_name(n or "") for n in dictionary]
    shown, shown_code = np.unique(np.array([f[0] for f in folded], dtype=object), return_inverse=True)
    marker_of = {f[0]: f[1] for f in folded}
    group = shown_code[names.indices.to_numpy(zero_copy_only=False)[rows]].astype(np.int64)
    rank = trace.column("rank")[rows].astype(np.int64)
    start = trace.column("start_ns")[rows]
    dur = np.maximum(trace.column("dur_ns")[rows], 0)
    frame = pd.DataFrame({"group": group, "rank": rank, "dur": dur,
                          "kind": trace.kind_codes()[rows] == int(Kind.CPU_OP)})
    per_rank = frame.groupby(["group", "rank"], sort=True).agg(n=("dur", "size"), total=("dur", "sum"))
    keys, _ = iv.combine_keys(group, rank)
    covered_keys, covered = iv.total_by(keys, start, start + dur)
    per_rank["covered"] = iv.lookup(covered_keys, covered, np.arange(len(per_rank)))
    per_rank["span"] = per_rank.index.get_level_values("rank").map(_rank_spans(trace)).to_numpy()
    per_rank = per_rank[per_rank["n"] >= 2]
    if per_rank.empty:
        return pd.DataFrame({c: [] for c in [*CANDIDATE_COLUMNS, "rank"]})
    kept = frame.groupby(["group", "rank"], sort=True).agg(median=("dur", "median"), op=("kind", "all"))
    kept = kept.loc[per_rank.index]
    groups = per_rank.index.get_level_values("group").to_numpy()
    count = per_rank["n"].to_numpy(np.int64)
    covered = per_rank["covered"].to_numpy(np.float64)
    span = np.maximum(per_rank["span"].to_numpy(np.float64), 1.0)
    median = kept["median"].to_numpy(np.float64)
    out = pd.DataFrame({
        "rank": per_rank.index.get_level_values("rank").to_numpy(np.int64),
        "marker": [marker_of[shown[g]] for g in groups],
        "name": [shown[g] for g in groups],
        "kind": np.where(kept["op"].to_numpy(bool), "cpu_op", "annotation"),
        "count": count,
        "ranks": np.ones(count.size, dtype=np.int64),
        "median_dur_ns": np.round(median).astype(np.int64),
        "covered_ns": per_rank["covered"].to_numpy(np.int64),
        "coverage": covered / span,
        "typical_coverage": np.minimum(covered, count * median) / span,
        "sequential": per_rank["total"].to_numpy() <= per_rank["covered"].to_numpy(),
    })
    out = out.sort_values(["rank", "sequential", "typical_coverage", "count", "name"],
                          ascending=[True, False, False, False, True])
    return out.groupby("rank", sort=False).head(options.top_n).reset_index(drop=True)[[*CANDIDATE_COLUMNS, "rank"]]


def _rank_spans(trace: Trace) -> dict[int, int]:
    """Time span (first start .. last end, ns) of every rank's events."""
    spans = trace.summary()
    return {int(r): int(v["span_ns"]) for r, v in spans.items()}


def candidates_hint(candidates: pd.DataFrame, limit: int = 3) -> str:
    """The best few candidates as command-line options, for the "no steps found" warning; names
    only (no figures), so the same hint from several ranks merges into one warning."""
    best = candidates[candidates["sequential"] & (candidates["typical_coverage"] >= HINT_MIN_COVERAGE)].head(limit)
    if best.empty:
        return (f"no repeated range covers {HINT_MIN_COVERAGE:.0%} of the trace as steps would "
                "(pass --step-marker REGEX to choose step ranges)")
    shown = [f"--step-marker {shlex.quote(m)} ({n})" for m, n in zip(best["marker"], best["name"])]
    return "ranges that could mark steps: " + "; ".join(shown)


def per_step(total: int, steps: int) -> int:
    """A whole-trace cost spread over the steps (the cost itself when there are no steps)."""
    return int(round(total / steps)) if steps > 0 else int(total)


def count_per(steps: int) -> str:
    """How a count from :func:`per_step` is said: "per step", or "in the whole trace" without steps
    (a finding's title says what its figures are per: docs/metrics.md, "Findings")."""
    return "per step" if steps > 0 else "in the whole trace"


def time_per(steps: int) -> str:
    """The unit after a time from :func:`per_step`: "/step", or " over the whole trace" without steps."""
    return "/step" if steps > 0 else " over the whole trace"


def step_column(steps: np.ndarray | pd.Series) -> pd.arrays.IntegerArray:
    """Step numbers for output tables: nullable Int64, missing (``<NA>``) for the whole-trace rows."""
    values = np.array(steps, dtype=np.int64)  # a copy: the result must not share memory with the input
    return pd.arrays.IntegerArray(values, values == NO_STEP)


@dataclass(frozen=True)
class CpuOpNesting:
    """The CPU ops of a trace nested per thread (rank, pid, tid), built once per trace for every
    "which op was running" lookup (synchronize calls, memory peaks): op ``rows`` (of
    ``trace.events``), their thread ``codes`` (into the sorted distinct ``threads``), nesting
    ``depth``, an index over all of them and one over the outermost (depth 0) ones."""

    rows: np.ndarray
    threads: tuple[np.ndarray, np.ndarray, np.ndarray]
    codes: np.ndarray
    depth: np.ndarray
    index: iv.NestedIndex
    outer_index: iv.NestedIndex
    outer: np.ndarray  # positions (into ``rows``) of the outermost ops

    def thread_codes(self, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        """The code of each query's thread among the ops' threads; -1 for a thread with no op."""
        return iv.codes_among(self.threads, (np.asarray(rank, dtype=np.int64), pid, tid))


def cpu_op_nesting(ctx: AnalysisContext) -> CpuOpNesting:
    """The trace's :class:`CpuOpNesting` (the derived input ``cpu_op_nesting``)."""
    nesting: CpuOpNesting = ctx.input("cpu_op_nesting")
    return nesting


def build_cpu_op_nesting(trace: Trace) -> CpuOpNesting:
    """:func:`cpu_op_nesting`, built now."""
    rows = np.flatnonzero(trace.mask(Kind.CPU_OP))
    start = trace.column("start_ns")[rows]
    end = start + np.maximum(trace.column("dur_ns")[rows], 0)
    codes, (rank, pid, tid) = iv.combine_keys(trace.column("rank")[rows].astype(np.int64), trace.column("pid")[rows],
                                              trace.column("tid")[rows])
    index = iv.NestedIndex(codes, start, end)
    depth = index.depth  # worked out by the index from its one sort
    outer = np.flatnonzero(depth == 0)
    return CpuOpNesting(rows=rows, threads=(rank, pid, tid), codes=codes, depth=depth,
                        index=index,
                        outer_index=iv.NestedIndex(codes[outer], start[outer], end[outer], depth[outer]), outer=outer)


def issuing_cpu_op(ctx: AnalysisContext, api_rows: np.ndarray) -> np.ndarray:
    """Row of the CPU op that issued each runtime call (-1 when unknown)."""
    trace = ctx.trace
    out = np.full(api_rows.size, -1, dtype=np.int64)
    if api_rows.size == 0:
        return out
    rt_u, op_u = ctx.input("links.runtime_ops")
    if rt_u.size:
        pos = np.clip(np.searchsorted(rt_u, api_rows), 0, rt_u.size - 1)
        hit = rt_u[pos] == api_rows
        out[hit] = op_u[pos[hit]]
    missing = np.flatnonzero(out < 0)
    if missing.size:
        # the innermost CPU op on the call's thread running at its start (the nesting of every
        # thread's ops is built once per trace and shared with the other analyses)
        nest = cpu_op_nesting(ctx)
        if nest.rows.size:
            q = api_rows[missing]
            qk = nest.thread_codes(trace.column("rank")[q].astype(np.int64), trace.column("pid")[q],
                                   trace.column("tid")[q])
            t = trace.column("start_ns")[q]
            hit = nest.index.covering(qk, t, t + 1)
            out[missing] = np.where(hit >= 0, nest.rows[np.clip(hit, 0, None)], -1)
    return out


def build_runtime_ops(ctx: AnalysisContext) -> tuple[np.ndarray, np.ndarray]:
    """(runtime row, its linked CPU op) for every linked runtime call, by runtime row: of several
    ops linked to one call, the innermost (latest start)."""
    trace = ctx.trace
    op_rows, rt_rows = cpu_op_links(ctx)
    order = np.lexsort((trace.column("start_ns")[op_rows], rt_rows))
    rt_sorted, op_sorted = rt_rows[order], op_rows[order]
    last = np.flatnonzero(np.concatenate([rt_sorted[1:] != rt_sorted[:-1], [True]])) if rt_sorted.size else order
    return rt_sorted[last], op_sorted[last]


register_input("links.launch", lambda ctx: links_of(ctx.trace, "launch"))
register_input("links.cpu_op", lambda ctx: links_of(ctx.trace, "cpu_op"))
register_input("activity", build_activity, requires=("classify.comm_rule_of", "links.launch"))
register_input("steps.candidates", lambda ctx: _candidates(ctx.trace, ctx.options))
register_input("cpu_op_nesting", lambda ctx: build_cpu_op_nesting(ctx.trace))
register_input("links.runtime_ops", build_runtime_ops, requires=("links.cpu_op",))

__all__ = [
    "NO_STEP",
    "Activity",
    "CpuOpNesting",
    "cpu_op_nesting",
    "StepTable",
    "activity",
    "analysed_ranks",
    "assign_to_steps",
    "candidates_hint",
    "fold_step_name",
    "issuing_cpu_op",
    "step_marker_candidates",
    "column_equals",
    "cpu_op_links",
    "flow_links",
    "launch_links",
    "per_step",
    "step_column",
    "step_table",
]
