"""Idle gaps: every interval in which a GPU did nothing, and why.

Definitions (docs/metrics.md), per rank and GPU device; all times int64 ns:

- GPU activity = kernels, memcpy and memset on that device, all streams (not sync events).
- gaps = the intervals of the window not covered by the union of activity (device-wide, not per
  stream); window = last activity end - first activity start.
- Each gap has exactly one cause, judged from the activity that ends the gap (the first activity
  on the device that starts at the gap's end) and its launch call, in this order:

  1. ``host_bound``: the launch call of the activity that ends the gap started after the GPU went
     idle (at or after the gap start). ``cpu_context`` is what the launching thread was doing
     meanwhile: the innermost CPU op, Python function or annotation on the launching thread that
     spans the gap (starts at or before its start, ends at or after its end), e.g. a DataLoader
     Python function or ``aten::item``; step ranges (names matching the step marker) do not count.
     When no range spans the gap (typically the data loader returned just before the launch), the
     innermost range running at the gap start is reported instead and ``context_at_gap_start`` is
     True; when nothing ran at that instant either (the pause between two NVTX-ranged ops of an
     Nsight export), the top-level range overlapping the gap the most (flag True as well).
  2. ``sync_bound``: a synchronize call (runtime API whose name contains ``Synchronize``) or a
     blocking copy (``cudaMemcpy``/``cuMemcpy``/``hipMemcpy`` without ``Async``) on the CPU of the
     same rank spans the gap (starts at or before its start, ends at or after its end); or the
     launch call started after the GPU went idle (rule 1) but the launching thread was blocked in
     such a call when the GPU went idle (it runs at the gap's start) and launched again within
     ``DRAIN_REFILL_NS`` (100 us) after it returned: the synchronisation drained the queue
     (``.item()``, ``.cpu()``), and the host refills it. Checked before rule 1.
     ``cpu_context`` is that call.
  3. ``launch_latency``: launched before the gap started, started late. ``cpu_context`` is the
     launch API.
  4. ``unattributed``: anything else (no launch link for the activity that ends the gap).

  So the totals per cause add up exactly to idle.

Tables: ``gaps`` (whole-trace gaps; ``step`` is the step of the activity that ends the gap),
``step_gaps`` (gaps inside each per-step GPU window), ``by_cause`` (per rank, device and step, plus
``step = None`` for the whole trace: equals the temporal ``idle_ns`` of the same row),
``histogram``, ``largest`` and ``cpu_contexts``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceview.claims import Claims
from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult, Finding, Headline, Options
from traceview.model import DEFAULT_STEP_MARKER, Kind, Trace
from traceview.registry import AnalysisSpec, TableSpec, register_input
from traceview.plain import column_rows, plain
from traceview.report_inputs import ReportInputs
from traceview.tables import top_order
from traceview.tables import masked_int64

from . import classify
from traceview import intervals as iv
from .steps import NO_STEP, Activity, activity, analysed_ranks, per_step

NAME = "idle_gaps"

HOST_BOUND, SYNC_BOUND, LAUNCH_LATENCY, UNATTRIBUTED = (classify.HOST_BOUND, classify.SYNC_BOUND,
                                                         classify.LAUNCH_LATENCY, classify.UNATTRIBUTED)
CAUSES = classify.CAUSES

#: a host-launched gap is sync-bound when the launching thread was in a synchronize call as the GPU
#: went idle and launched again within this long after the call returned (the queue refill)
DRAIN_REFILL_NS = 100_000

BLOCKING_COPY = classify.BLOCKING_COPY
CONTEXT_KINDS = (Kind.CPU_OP, Kind.PYTHON_FUNCTION, Kind.ANNOTATION)

#: histogram bucket upper bounds (ns) and labels
BUCKET_EDGES = np.array([10_000, 100_000, 1_000_000, 10_000_000], dtype=np.int64)
BUCKET_LABELS = ["< 10 us", "10-100 us", "100 us - 1 ms", "1-10 ms", ">= 10 ms"]

#: a cause is reported when its idle is at least this share of the window
REPORT_SHARE = 0.05
MEDIUM_SHARE = 0.10
HIGH_SHARE = 0.25

GAP_COLUMNS = [
    "rank", "device", "step", "start_ns", "end_ns", "dur_ns", "cause", "cpu_context", "context_at_gap_start",
    "next_row", "api_row",
]


class CpuContext:
    """Per-thread nested CPU ranges (ops, Python functions, annotations) for innermost lookups."""

    def __init__(self, ctx: AnalysisContext) -> None:
        trace, options = ctx.trace, ctx.options
        kinds = trace.kind_codes()
        mask = np.isin(kinds, np.array([int(k) for k in CONTEXT_KINDS], dtype=np.int8))
        marker = options.step_marker or DEFAULT_STEP_MARKER
        if mask.any():
            mask &= ~classify.name_matches(ctx, marker)
        self.rows = np.flatnonzero(mask)
        start = trace.column("start_ns")[self.rows]
        end = start + np.maximum(trace.column("dur_ns")[self.rows], 0)
        codes, self.threads = iv.combine_keys(
            trace.column("rank")[self.rows].astype(np.int64), trace.column("pid")[self.rows],
            trace.column("tid")[self.rows],
        )
        self.thread_code = {
            (int(r), int(p), int(t)): i for i, (r, p, t) in enumerate(zip(*self.threads))
        }
        self.index = iv.NestedIndex(codes, start, end)
        depth = self.index.depth  # worked out by the index from its one sort
        # top-level ranges per thread, by (thread, start): what the thread ran at the outermost level
        top = depth == 0
        order = np.lexsort((start[top], codes[top]))
        self.top_rows = self.rows[np.flatnonzero(top)[order]]  # rows in trace.events
        self.top_code, self.top_start, self.top_end = codes[top][order], start[top][order], end[top][order]

    def innermost_spanning(
        self, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> np.ndarray:
        """Row (in trace.events) of the innermost range on each thread covering ``[lo, hi]``; -1 if none."""
        if self.rows.size == 0 or rank.size == 0:
            return np.full(rank.size, -1, dtype=np.int64)
        qcodes, (qr, qp, qt) = iv.combine_keys(rank, pid, tid)
        # a handful of launching threads: map each to its code among the context threads
        lut = np.array([self.thread_code.get((int(r), int(p), int(t)), -1) for r, p, t in zip(qr, qp, qt)],
                       dtype=np.int64)
        hit = self.index.covering(lut[qcodes], lo, hi)
        return np.where(hit >= 0, self.rows[np.clip(hit, 0, None)], -1)

    def most_overlapping(
        self, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> np.ndarray:
        """Row of the top-level range on each thread overlapping ``[lo, hi)`` the most; -1 if none.

        For a gap that starts in the short pause between two ops (Nsight NVTX ranges have no Python
        frames to fill it): the op the thread then ran for most of the gap."""
        out = np.full(rank.size, -1, dtype=np.int64)
        if self.top_rows.size == 0 or rank.size == 0:
            return out
        qcodes, (qr, qp, qt) = iv.combine_keys(rank, pid, tid)
        lut = np.array([self.thread_code.get((int(r), int(p), int(t)), -1) for r, p, t in zip(qr, qp, qt)],
                       dtype=np.int64)
        q = lut[qcodes]
        # from the last range starting at or before lo (it may reach into the gap), within the thread
        first = np.maximum(iv.searchsorted_by(self.top_code, self.top_start, q, lo, side="right") - 1,
                           np.searchsorted(self.top_code, q, side="left"))
        last = iv.searchsorted_by(self.top_code, self.top_start, q, hi, side="left")
        count = np.maximum(last - first, 0) * (q >= 0)
        which = np.repeat(np.arange(rank.size), count)
        cand = np.repeat(first, count) + np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        overlap = np.minimum(self.top_end[cand], hi[which]) - np.maximum(self.top_start[cand], lo[which])
        ok = (self.top_code[cand] == q[which]) & (overlap > 0)
        which, cand, overlap = which[ok], cand[ok], overlap[ok]
        best = np.lexsort((-overlap, which))
        first_of = best[np.r_[True, which[best][1:] != which[best][:-1]]] if best.size else best
        out[which[first_of]] = self.top_rows[cand[first_of]]
        return out


def _sync_calls(ctx: AnalysisContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(row, rank, start, end) of synchronize calls and blocking copies on the CPU."""
    trace, options = ctx.trace, ctx.options
    kinds = trace.kind_codes()
    mask = classify.is_sync_call(ctx) | (
        (kinds == int(Kind.RUNTIME)) & classify.name_matches(ctx, BLOCKING_COPY)
    )
    rows = np.flatnonzero(mask)
    rank = trace.column("rank")[rows].astype(np.int64)
    if options.ranks is not None:
        keep = np.isin(rank, list(options.ranks))
        rows, rank = rows[keep], rank[keep]
    start = trace.column("start_ns")[rows]
    return rows, rank, start, start + np.maximum(trace.column("dur_ns")[rows], 0)


def _blocked_at(
    trace: Trace, syncs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], rank: np.ndarray,
    api_row: np.ndarray, t: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Row (-1 if none) and end of the synchronize call or blocking copy running at ``t`` on the
    thread of each launch call ``api_row`` (of ``rank``)."""
    rows, s_rank, s_start, s_end = syncs
    pid, tid = trace.column("pid"), trace.column("tid")
    n = rows.size
    codes, _ = iv.combine_keys(np.concatenate([s_rank, rank]), np.concatenate([pid[rows], pid[api_row]]),
                               np.concatenate([tid[rows], tid[api_row]]))
    hit = iv.innermost_covering(codes[:n], s_start, s_end, codes[n:], t, t + 1)
    safe = np.clip(hit, 0, None)
    return np.where(hit >= 0, rows[safe] if n else -1, -1), np.where(hit >= 0, s_end[safe] if n else 0, 0)


def _gaps_of(
    act: Activity, sel: np.ndarray, key_cols: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """Gaps per group of ``key_cols`` over activity ``sel``.

    Returns (gap_start, gap_end, next_activity (index into act), group code, group key values).
    """
    codes, keyvals = iv.combine_keys(*[c[sel] for c in key_cols])
    idx = np.flatnonzero(sel)
    start, end = act.start[idx], act.end[idx]
    gk, gs, ge = iv.hull_gaps_by(codes, start, end)
    # the activity that ends each gap: first (by start) at the gap end; ties -> linked, earliest call
    no_api = act.api_row[idx] < 0
    api_start = np.where(no_api, np.iinfo(np.int64).max, act.api_start[idx])
    order = np.lexsort((api_start, no_api, start, codes))
    pos = iv.searchsorted_by(codes[order], start[order], gk, ge, side="left")
    pos = np.clip(pos, 0, max(order.size - 1, 0))
    nxt = idx[order[pos]] if order.size else np.empty(0, dtype=np.int64)
    return gs, ge, nxt, gk, keyvals


def _attribute(
    ctx: AnalysisContext, act: Activity, gs: np.ndarray, ge: np.ndarray, nxt: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cause code (index into CAUSES), CPU-context row (-1: none) of each gap, and whether the
    host-bound context is the fallback (contains only the gap start)."""
    trace = ctx.trace
    n = gs.size
    cause = np.full(n, CAUSES.index(UNATTRIBUTED), dtype=np.int8)
    context = np.full(n, -1, dtype=np.int64)
    fallback = np.zeros(n, dtype=bool)
    if n == 0:
        return cause, context, fallback
    api_row = act.api_row[nxt]
    api_start = act.api_start[nxt]
    linked = api_row >= 0
    host = linked & (api_start >= gs)

    rows, s_rank, s_start, s_end = _sync_calls(ctx)
    sync_hit = iv.innermost_covering(s_rank, s_start, s_end, act.rank[nxt], gs, ge)
    sync = (sync_hit >= 0) & ~host
    # launched after the GPU went idle, but the launching thread was blocked in a synchronize call or
    # a blocking copy at that instant: the sync drained the queue (``.item()``), not a slow host
    drained = np.full(n, -1, dtype=np.int64)
    if host.any() and rows.size:
        h = np.flatnonzero(host)
        blocked, blocked_end = _blocked_at(trace, (rows, s_rank, s_start, s_end), act.rank[nxt[h]], api_row[h], gs[h])
        # ... and went straight back to launching: a host that then works on something else for
        # longer (a data loader after the step's sync) is the cause, not the sync
        refill = api_start[h] - blocked_end
        drained[h] = np.where((blocked >= 0) & (refill <= DRAIN_REFILL_NS), blocked, -1)
    host &= drained < 0
    latency = linked & ~host & ~sync & (drained < 0)

    cause[latency] = CAUSES.index(LAUNCH_LATENCY)
    context[latency] = api_row[latency]
    cause[sync] = CAUSES.index(SYNC_BOUND)
    context[sync] = rows[sync_hit[sync]]
    cause[drained >= 0] = CAUSES.index(SYNC_BOUND)
    context[drained >= 0] = drained[drained >= 0]
    cause[host] = CAUSES.index(HOST_BOUND)
    if host.any():
        cpu = ctx.input("idle_gaps.cpu_context")
        h = np.flatnonzero(host)
        ar = api_row[h]
        rank, pid, tid = act.rank[nxt[h]], trace.column("pid")[ar], trace.column("tid")[ar]
        found = cpu.innermost_spanning(rank, pid, tid, gs[h], ge[h])
        # nothing but the step spans the gap (e.g. the data loader returned just before the launch):
        # fall back to what the thread was running when the GPU went idle
        none = found < 0
        if none.any():
            found[none] = cpu.innermost_spanning(rank[none], pid[none], tid[none], gs[h][none], gs[h][none] + 1)
            # nothing ran at that instant either (a pause between two ops): the op run most in the gap
            still = found < 0
            found[still] = cpu.most_overlapping(rank[still], pid[still], tid[still], gs[h][still], ge[h][still])
            fallback[h[none]] = found[none] >= 0
        context[h] = found
    return cause, context, fallback


Attribution = tuple[np.ndarray, np.ndarray, np.ndarray]


def _attribute_reusing(
    ctx: AnalysisContext, act: Activity, gs: np.ndarray, ge: np.ndarray, nxt: np.ndarray,
    known: tuple[np.ndarray, np.ndarray, np.ndarray, Attribution],
) -> Attribution:
    """:func:`_attribute`, taking each gap's cause from ``known`` (gaps already attributed: their
    start, end, next activity and attribution) where the same gap (same start, end and next
    activity) is there: a gap's cause depends on nothing else, and most gaps inside the step windows
    are whole-trace gaps too."""
    k_gs, k_ge, k_nxt, (k_cause, k_context, k_fallback) = known
    if k_nxt.size == 0 or gs.size == 0:
        return _attribute(ctx, act, gs, ge, nxt)
    index = np.full(len(act), -1, dtype=np.int64)
    index[k_nxt] = np.arange(k_nxt.size, dtype=np.int64)  # a whole-trace gap per next activity at most
    hit = index[nxt]
    safe = np.maximum(hit, 0)
    same = (hit >= 0) & (k_gs[safe] == gs) & (k_ge[safe] == ge)
    cause, context, fallback = k_cause[safe], k_context[safe], k_fallback[safe]
    new = np.flatnonzero(~same)
    if new.size:
        n_cause, n_context, n_fallback = _attribute(ctx, act, gs[new], ge[new], nxt[new])
        cause[new], context[new], fallback[new] = n_cause, n_context, n_fallback
    return cause, context, fallback


def _table(
    ctx: AnalysisContext, act: Activity, gs: np.ndarray, ge: np.ndarray, nxt: np.ndarray, step: np.ndarray,
    attribution: Attribution,
) -> pd.DataFrame:
    cause, context, fallback = attribution
    return pd.DataFrame(
        {
            "rank": act.rank[nxt],
            "device": act.device[nxt],
            "step": masked_int64(step, step == NO_STEP),
            "start_ns": gs,
            "end_ns": ge,
            "dur_ns": ge - gs,
            "cause": pd.Categorical.from_codes(cause, categories=list(CAUSES)),
            "cpu_context": classify.names_categorical(ctx, context),
            "context_at_gap_start": fallback,
            "next_row": act.row[nxt],
            "api_row": act.api_row[nxt],
        },
        columns=GAP_COLUMNS,
    )


def compute(ctx: AnalysisContext) -> dict[str, pd.DataFrame]:
    """All gap tables (the derived input ``idle_gaps.tables``)."""
    tables: dict[str, pd.DataFrame] = ctx.input("idle_gaps.tables")
    return tables


def build_tables(ctx: AnalysisContext) -> dict[str, pd.DataFrame]:
    """:func:`compute`, now."""
    options = ctx.options
    act = activity(ctx)
    everything = np.ones(len(act), dtype=bool)
    gs, ge, nxt, _, _ = _gaps_of(act, everything, [act.rank, act.device])
    whole = _attribute(ctx, act, gs, ge, nxt)
    gaps = _table(ctx, act, gs, ge, nxt, act.step[nxt], whole)
    gaps = gaps.sort_values(["rank", "device", "start_ns"], kind="stable").reset_index(drop=True)

    in_step = act.step != NO_STEP
    if in_step.any():
        known = (gs, ge, nxt, whole)
        gs, ge, nxt, _, _ = _gaps_of(act, in_step, [act.rank, act.device, act.step])
        step_gaps = _table(ctx, act, gs, ge, nxt, act.step[nxt],
                           _attribute_reusing(ctx, act, gs, ge, nxt, known))
        step_gaps = step_gaps.sort_values(["rank", "device", "step", "start_ns"], kind="stable").reset_index(drop=True)
    else:
        step_gaps = gaps.iloc[:0].copy()

    by_cause = _by_cause(act, gaps, step_gaps)
    return {
        "gaps": gaps,
        "step_gaps": step_gaps,
        "by_cause": by_cause,
        "histogram": _histogram(gaps),
        "histogram_by_cause": _histogram_by_cause(gaps),
        "largest": _largest(gaps, options),
        "cpu_contexts": _contexts(gaps),
    }


def _count_sum(codes: np.ndarray, dur_ns: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and exact int64 sum of ``dur_ns`` per group code in ``[0, groups)``."""
    counts = np.bincount(codes, minlength=groups).astype(np.int64)
    sums = np.zeros(groups, dtype=np.int64)
    np.add.at(sums, codes, dur_ns.astype(np.int64))
    return counts, sums


def _strings(values: np.ndarray, empty_dtype: type) -> Any:
    """A string column of ``values``; with no rows, an empty column of ``empty_dtype`` (the dtype
    these tables had when they were built by merges, kept so the tables stay the same)."""
    return pd.array(values, dtype="str") if values.size else np.empty(0, dtype=empty_dtype)


def _by_cause(act: Activity, gaps: pd.DataFrame, step_gaps: pd.DataFrame) -> pd.DataFrame:
    """Gaps and idle per cause, for every (rank, device) and (rank, device, step) with activity:
    one row per key (in key order) and cause (in ``CAUSES`` order), zero where no gap."""
    # the keys with activity: each (rank, device) whole and each (rank, device, step), once (the set
    # of keys is all that counts, so the distinct ones stand for every activity)
    _, (a_rank, a_device, a_step) = iv.combine_keys(act.rank, act.device, act.step)
    _, (w_rank, w_device) = iv.combine_keys(a_rank, a_device)
    in_step = a_step != NO_STEP
    n_keys = w_rank.size + int(in_step.sum())
    rank = np.concatenate([w_rank, a_rank[in_step], gaps["rank"].to_numpy(), step_gaps["rank"].to_numpy()])
    device = np.concatenate([w_device, a_device[in_step], gaps["device"].to_numpy(),
                             step_gaps["device"].to_numpy()])
    step = np.concatenate([np.full(w_rank.size, NO_STEP, dtype=np.int64), a_step[in_step].astype(np.int64),
                           np.full(len(gaps), NO_STEP, dtype=np.int64),
                           step_gaps["step"].to_numpy(dtype=np.int64, na_value=NO_STEP)])
    codes, (k_rank, k_device, k_step) = iv.combine_keys(rank.astype(np.int64), device.astype(np.int64), step)
    # only the keys with activity are rows (a gap always ends at an activity of its key)
    present = np.zeros(k_rank.size, dtype=bool)
    present[codes[:n_keys]] = True
    new_code = np.cumsum(present) - 1
    n_causes = len(CAUSES)
    cause = np.concatenate([gaps["cause"].cat.codes.to_numpy(), step_gaps["cause"].cat.codes.to_numpy()])
    gap_keys = codes[n_keys:]
    of_present = present[gap_keys]
    cells = new_code[gap_keys[of_present]] * n_causes + cause[of_present].astype(np.int64)
    dur_ns = np.concatenate([gaps["dur_ns"].to_numpy(), step_gaps["dur_ns"].to_numpy()])[of_present]
    n_present = int(present.sum())
    counts, sums = _count_sum(cells, dur_ns, n_present * n_causes)
    k_step = np.repeat(k_step[present], n_causes)
    return pd.DataFrame({
        "rank": np.repeat(k_rank[present], n_causes).astype(np.int64),
        "device": np.repeat(k_device[present], n_causes).astype(np.int64),
        "step": masked_int64(k_step, k_step == NO_STEP),
        "cause": pd.array(np.tile(np.array(CAUSES, dtype=object), n_present), dtype="str"),
        "gaps": counts,
        "idle_ns": sums,
    })


def _histogram(gaps: pd.DataFrame) -> pd.DataFrame:
    """Gaps and idle time per rank, device and duration bucket (every bucket of every GPU with gaps)."""
    bucket = np.searchsorted(BUCKET_EDGES, gaps["dur_ns"].to_numpy(), side="right")
    codes, (k_rank, k_device) = iv.combine_keys(gaps["rank"].to_numpy(), gaps["device"].to_numpy())
    n_buckets = len(BUCKET_LABELS)
    counts, sums = _count_sum(codes * n_buckets + bucket, gaps["dur_ns"].to_numpy(), k_rank.size * n_buckets)
    buckets = np.tile(np.arange(n_buckets), k_rank.size)
    return pd.DataFrame({
        "rank": np.repeat(k_rank, n_buckets),
        "device": np.repeat(k_device, n_buckets),
        "bucket": buckets,
        "label": _strings(np.array(BUCKET_LABELS, dtype=object)[buckets], np.float64),
        "gaps": counts,
        "idle_ns": sums,
    })


def _histogram_by_cause(gaps: pd.DataFrame) -> pd.DataFrame:
    """Gaps and idle time per rank, device, cause and duration bucket (only the cells that hold gaps),
    sorted by rank, device, cause name and bucket."""
    bucket = np.searchsorted(BUCKET_EDGES, gaps["dur_ns"].to_numpy(), side="right")
    by_name = np.array(sorted(CAUSES), dtype=object)
    name_rank = np.argsort(np.argsort(np.array(CAUSES, dtype=object)))  # cause code -> its rank by name
    cause = name_rank[gaps["cause"].cat.codes.to_numpy().astype(np.int64)]
    codes, (k_rank, k_device, k_cause, k_bucket) = iv.combine_keys(
        gaps["rank"].to_numpy(), gaps["device"].to_numpy(), cause, bucket)
    counts, sums = _count_sum(codes, gaps["dur_ns"].to_numpy(), k_rank.size)
    return pd.DataFrame({
        "rank": k_rank, "device": k_device, "cause": _strings(by_name[k_cause], object),
        "bucket": k_bucket.astype(np.int64), "gaps": counts, "idle_ns": sums,
    })


def _largest(gaps: pd.DataFrame, options: Options) -> pd.DataFrame:
    big = gaps[gaps["dur_ns"] >= options.min_gap_ns]
    longest_first = big.sort_values(["dur_ns", "start_ns"], ascending=[False, True], kind="stable")
    return longest_first.head(options.top_n).reset_index(drop=True)


def _context_labels(cpu_context: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct labels sorted, each category's place among them) of a context column (a
    Categorical of names): labels are the names, "(no CPU op)" for none."""
    labels = np.array(["(no CPU op)" if c == "" else str(c) for c in cpu_context.cat.categories], dtype=object)
    distinct, place = np.unique(labels, return_inverse=True)  # a name spelled "(no CPU op)" joins the none
    return distinct, place.reshape(-1).astype(np.int64)


def _context_sums(host: pd.DataFrame) -> pd.DataFrame:
    """Gaps and idle per (rank, device, context label), sorted by them: the sorted groupby on the
    labels, worked out on the category codes (one label per category, not per gap)."""
    labels, place = _context_labels(host["cpu_context"])
    codes = host["cpu_context"].cat.codes.to_numpy().astype(np.int64)
    group, (k_rank, k_device, k_place) = iv.combine_keys(host["rank"].to_numpy(), host["device"].to_numpy(),
                                                         place[codes])
    counts, sums = _count_sum(group, host["dur_ns"].to_numpy(), k_rank.size)
    return pd.DataFrame({"rank": k_rank, "device": k_device, "cpu_context": pd.array(labels[k_place], dtype="str"),
                         "gaps": counts, "idle_ns": sums})


def _context_totals(gaps: pd.DataFrame) -> pd.DataFrame:
    """Gaps (``size``) and idle (``sum``) per context label (the index, ``ctx``, sorted): the
    groupby on the labels, worked out on the category codes."""
    labels, place = _context_labels(gaps["cpu_context"])
    codes = place[gaps["cpu_context"].cat.codes.to_numpy().astype(np.int64)]
    counts, sums = _count_sum(codes, gaps["dur_ns"].to_numpy(), labels.size)
    seen = counts > 0
    return pd.DataFrame({"size": counts[seen], "sum": sums[seen]},
                        index=pd.Index(pd.array(labels[seen], dtype="str"), name="ctx"))


def _contexts(gaps: pd.DataFrame) -> pd.DataFrame:
    host = gaps[gaps["cause"] == HOST_BOUND]
    if host.empty:
        ctx = host["cpu_context"].astype(str).replace("", "(no CPU op)")
        frame = pd.DataFrame({"rank": host["rank"], "device": host["device"], "cpu_context": ctx,
                              "dur_ns": host["dur_ns"]})
        out = frame.groupby(["rank", "device", "cpu_context"]).agg(gaps=("dur_ns", "size"),
                                                                   idle_ns=("dur_ns", "sum")).reset_index()
    else:
        out = _context_sums(host)
    return out.sort_values(["rank", "device", "idle_ns"], ascending=[True, True, False]).reset_index(drop=True)


# ------------------------------------------------------------------------------ findings

_RECOMMENDATIONS = {
    HOST_BOUND: "The GPU waits for the host to launch work. Look at the CPU contexts: for data loading "
    "use more DataLoader workers, pin_memory=True and prefetching; remove host syncs such as .item(), "
    ".cpu() or printing tensors inside the step; for many small kernels see the launch-overhead analysis "
    "(CUDA graphs, torch.compile).",
    SYNC_BOUND: "The host blocks in a synchronize call or a blocking copy while the GPU has nothing queued. "
    "Remove the synchronisation from the step (avoid .item()/.cpu()/torch.cuda.synchronize(); use "
    "non_blocking=True copies from pinned memory) or queue more work before synchronising.",
    LAUNCH_LATENCY: "Work was launched before the GPU went idle but started late: the GPU waited on a "
    "dependency (an event on another stream, a collective on a peer) or the driver queue stalled. Check "
    "cross-stream waits and the communication analysis.",
}
_TITLES = {
    HOST_BOUND: "host-bound gaps (the GPU waits for the CPU to launch work)",
    SYNC_BOUND: "sync-bound gaps (the CPU blocks in a synchronize call or blocking copy)",
    LAUNCH_LATENCY: "launch-latency gaps (work queued early started late)",
}


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    tables = compute(ctx)
    act = activity(ctx)
    # shallow copies: a caller adding columns does not alter the tables other analyses read
    result = AnalysisResult(name=NAME, tables={k: v.copy(deep=False) for k, v in tables.items()})
    result.warn("no GPU activity in the trace: no idle gaps to analyse", np.setdiff1d(analysed_ranks(ctx), act.rank))
    if len(act) == 0:
        return result
    ranks, per_rank = np.unique(act.rank, return_counts=True)
    unlinked = np.bincount(np.searchsorted(ranks, act.rank[act.api_row < 0]), minlength=ranks.size)
    for rank, n_unlinked, n in zip(ranks[unlinked > 0].tolist(), unlinked[unlinked > 0].tolist(),
                                   per_rank[unlinked > 0].tolist()):  # each rank's own counts
        result.warn(f"{n_unlinked} of {n} GPU activities have no launch call (no correlation link): gaps they "
                    "end are 'unattributed'", [rank])
    result.findings.extend(_findings(tables, act))
    return result


def _findings(tables: dict[str, pd.DataFrame], act: Activity) -> list[Finding]:
    findings: list[Finding] = []
    by_cause = tables["by_cause"]
    whole = by_cause[by_cause["step"].isna()]
    gaps = tables["gaps"]
    step_counts = act.steps.counts()
    windows = {}
    uniq_codes, (r, d) = iv.combine_keys(act.rank, act.device)
    k, lo, hi = iv.window_by(uniq_codes, act.start, act.end)
    for i in range(k.size):
        windows[(int(r[k[i]]), int(d[k[i]]))] = int(hi[i] - lo[i])
    # the gaps of each (rank, device, cause), found once (not a filter of every gap per finding)
    gap_groups = gaps.groupby(["rank", "device", gaps["cause"].astype(str)], sort=False).indices if len(gaps) else {}
    no_gaps = np.zeros(0, dtype=np.int64)
    for (rank, device), rows in whole.groupby(["rank", "device"], sort=True):
        window = windows.get((int(rank), int(device)), 0)
        if window <= 0:
            continue
        idle = int(rows["idle_ns"].sum())
        n_steps = step_counts.get(int(rank), 0)
        for cause in (HOST_BOUND, SYNC_BOUND, LAUNCH_LATENCY):
            row = rows[rows["cause"] == cause]
            cause_idle = int(row["idle_ns"].sum())
            share = cause_idle / window
            if share < REPORT_SHARE:
                continue
            mine = gaps.iloc[gap_groups.get((rank, device, cause), no_gaps)]
            top = _context_totals(mine).sort_values("sum", ascending=False).head(5)
            contexts = [{"cpu_context": c, "gaps": int(v["size"]), "idle_ns": int(v["sum"])} for c, v in top.iterrows()]
            severity = "high" if share >= HIGH_SHARE else "medium" if share >= MEDIUM_SHARE else "low"
            title = f"GPU {device} of rank {rank}: {100 * share:.1f}% of the time in {_TITLES[cause]}"
            if contexts and cause != LAUNCH_LATENCY:
                title += f"; mostly during {contexts[0]['cpu_context']}"
            largest = mine.sort_values("dur_ns", ascending=False).head(1)
            findings.append(
                Finding(
                    code=f"{cause}_gaps",
                    part_of="low_utilization",  # these gaps are part of the idle time
                    title=title,
                    severity=severity,
                    analysis=NAME,
                    recommendation=_RECOMMENDATIONS[cause],
                    cost_ns_per_step=per_step(cause_idle, n_steps),
                    cost_share=share,
                    rank=int(rank),
                    headline=Headline("{} of the time in " + _TITLES[cause], share),
                    claims=Claims.of(int(rank), int(device), mine["start_ns"].to_numpy(np.int64),
                                     mine["end_ns"].to_numpy(np.int64)),
                    time_range_ns=(
                        (int(largest["start_ns"].iloc[0]), int(largest["end_ns"].iloc[0])) if len(largest) else None
                    ),
                    evidence={
                        "device": int(device),
                        "gaps": len(mine),
                        "idle_ns": cause_idle,
                        "total_idle_ns": idle,
                        "window_ns": window,
                        "steps": n_steps,
                        "top_cpu_contexts": contexts,
                    },
                )
            )
    return findings


register_input("idle_gaps.cpu_context", CpuContext, requires=("classify.codes.name",))
register_input("idle_gaps.tables", build_tables,
               requires=("activity", "classify.codes.name", "classify.categories.name", "idle_gaps.cpu_context"))

# ------------------------------------------------------------------------------------ report hooks

#: gaps listed in the report's timeline window
MAX_TIMELINE_GAPS = 500


def gap_histogram(inputs: ReportInputs) -> dict[str, Any]:
    """The gap-histogram chart: gaps and idle time per duration bucket and cause, over the job."""
    by_cause = inputs.table(NAME, "histogram_by_cause")
    hist: dict[str, Any] = {"buckets": list(BUCKET_LABELS), "causes": list(CAUSES),
                            "gaps": {c: [0] * len(BUCKET_LABELS) for c in CAUSES},
                            "idle_ns": {c: [0] * len(BUCKET_LABELS) for c in CAUSES}, "total_gaps": 0}
    if by_cause is None or by_cause.empty:
        return hist
    sums = by_cause.groupby(["cause", "bucket"], sort=True)[["gaps", "idle_ns"]].sum()
    for (cause, bucket), row in sums.iterrows():  # at most causes x buckets rows
        if cause not in hist["gaps"]:
            hist["causes"].append(cause)
            hist["gaps"][cause] = [0] * len(BUCKET_LABELS)
            hist["idle_ns"][cause] = [0] * len(BUCKET_LABELS)
        hist["gaps"][cause][int(bucket)] = int(row["gaps"])
        hist["idle_ns"][cause][int(bucket)] = int(row["idle_ns"])
    hist["total_gaps"] = int(by_cause["gaps"].sum())
    return hist


def timeline_window(inputs: ReportInputs) -> dict[str, Any] | None:
    """The timeline chart: the worst idle gap with the time around it (within its GPU's window,
    from the report's timebase), and the largest gaps of its rank (at most ``MAX_TIMELINE_GAPS``)
    that fall in that window."""
    gaps = inputs.table(NAME, "gaps")
    if gaps is None or gaps.empty:
        return None
    worst = gaps.iloc[int(top_order(gaps, "dur_ns")[0])]
    rank, device = int(worst["rank"]), int(worst["device"])
    start, end = int(worst["start_ns"]), int(worst["end_ns"])
    pad = max(end - start, 100_000)
    lo, hi = start - pad, end + pad
    window = inputs.timebase()[0].get((rank, device))
    if window is not None:
        lo = max(lo, window[0] - pad // 10)
        hi = min(hi, window[1] + pad // 10)
    of_rank = gaps[gaps["rank"] == rank].reset_index(drop=True)
    largest = of_rank.iloc[top_order(of_rank, "dur_ns")[:MAX_TIMELINE_GAPS]]
    inside = largest[(largest["end_ns"] > lo) & (largest["start_ns"] < hi)]
    cols = ["rank", "device", "step", "start_ns", "end_ns", "dur_ns", "cause", "cpu_context"]
    return {
        "rank": rank, "device": device, "start_ns": int(lo), "end_ns": int(hi),
        "worst_gap": {c: plain(worst[c], c) for c in cols},
        "gaps": column_rows(inside[cols], cols),
    }


SPEC = AnalysisSpec(
    name=NAME,
    title="Idle gaps",
    run=analyze,
    requires=("activity", "idle_gaps.tables"),
    order=20,
    tables=(
        # the timeline window of the reports lists a rank's 500 largest gaps: a job keeps them per rank
        TableSpec("gaps", "Idle gaps (whole trace)", sort_by="dur_ns", keep_rows=500, per_event=True),
        TableSpec("step_gaps", "Idle gaps inside step windows", sort_by="dur_ns", per_event=True,
                  title_without_steps="Idle gaps inside step windows (none: no steps)"),
        TableSpec("by_cause", "Idle time by cause"),
        TableSpec("histogram", "Idle gaps by duration"),
        TableSpec("histogram_by_cause", "Idle gaps by duration and cause"),
        TableSpec("largest", "Largest idle gaps", sort_by="dur_ns",
                  top_overall=(("dur_ns", False), ("start_ns", True))),
        TableSpec("cpu_contexts", "What the host was doing in host-bound gaps", sort_by="idle_ns"),
    ),
    finding_codes=tuple(f"{cause}_gaps" for cause in CAUSES),
    finding_parents=tuple((f"{cause}_gaps", "low_utilization") for cause in CAUSES),
    finding_precedence=((f"{SYNC_BOUND}_gaps", 50), (f"{HOST_BOUND}_gaps", 70), (f"{LAUNCH_LATENCY}_gaps", 80),
                        (f"{UNATTRIBUTED}_gaps", 90)),
    page=("/gaps", "Gaps"),
    headline_table="by_cause",
    charts=(("gap_histogram", gap_histogram), ("timeline", timeline_window)),
)
