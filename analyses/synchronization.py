"""Synchronisation and copies: where the host thread waits for the GPU, and copies that make it.

Definitions (docs/metrics.md, "Synchronisation and copies"), per rank; all times int64 ns:

- Synchronize call: a runtime/driver API call whose name contains ``Synchronize``
  (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``, ``cudaEventSynchronize``,
  ``cuCtxSynchronize``, ``cuStreamSynchronize``, ``hipDeviceSynchronize``, ...). ``call_type``:
  ``device_sync`` (Device/Ctx), ``stream_sync``, ``event_sync``. The CPU thread is blocked for
  the call's duration (``blocked_ns``).
- ``stream_wait_event`` (``cudaStreamWaitEvent``, ``hipStreamWaitEvent``, ``cuStreamWaitEvent``):
  listed, but it makes a *stream* wait, not the CPU thread, so it has no cost.
- Copies (GPU memcpy events, with their launch call from the launch link); ``call_type``:

  - ``blocking_copy``: launched by a synchronous copy API (``^(cuda|cu|hip)Memcpy`` without
    ``Async``: ``cudaMemcpy``, ``cuMemcpyDtoH_v2``, ``hipMemcpyWithStream``; the idle-gap rule);
  - ``copy_then_sync``: launched by an async copy API and the next runtime call on the same thread
    is a synchronize call (PyTorch's ``.item()``, ``.cpu()``, ``.to(device)`` without
    ``non_blocking``: ``cudaMemcpyAsync`` + ``cudaStreamSynchronize``); both calls are rows of
    this type, and that synchronize call is not counted as an explicit sync;
  - ``pageable_copy``: any other copy whose name says the host side is pageable memory (Kineto
    ``Memcpy DtoH (Device -> Pageable)``); such copies are staged and block the host. Nsight
    exports do not name the memory kind, so none is reported there.
- Issuing CPU op: ``cpu_op`` is the op linked to the call (``Trace.cpu_op_links``, innermost when
  several; a link counts only if the op contains the call on the same thread), else the innermost
  CPU op on the same thread that contains the call;
  ``top_cpu_op`` is the outermost CPU op on that thread containing the call (e.g. ``aten::item``
  around ``aten::_local_scalar_dense``).
- Cost (GPU idle the call causes): the rank's GPU activity (kernels, memcpy, memset; all its
  devices and streams) is united. ``gpu_idle_during_ns`` = idle of that union while the call runs,
  ``[start, end)``; ``gpu_idle_after_ns`` = when the GPU is idle at the call's end, the rest of
  that idle gap (until the GPU resumes). ``cost_ns`` = min(call duration, idle in
  ``[start, resume)``): without the call, the host would have issued its next work earlier by at
  most the time it was blocked, so the idle can shrink by at most that much (for ``.item()`` in a
  loop the idle is the refill of the emptied queue, shorter than the wait; before a long data
  load it is the wait itself). Calls are taken in start order per rank and a call's window begins
  after the windows of earlier calls, so no idle is counted twice. ``stream_wait_event`` costs
  nothing. For a blocking copy pair, both calls are rows; the cost is nearly all the sync's.
- Step of a call: the step whose CPU range contains the call's start (``analyses/steps.py``).

Tables: ``calls`` (every synchronize / wait-event call and every copy API call of a blocking or
pageable copy), ``sync_summary`` (per rank, API), ``by_cpu_op`` (per rank, issuing op and type),
``copies`` (per rank, direction, memory, blocking), ``by_step`` (per rank and step, plus ``step``
None for the whole trace), ``gpu_sync_events`` (GPU-side sync events, e.g. Kineto ``cuda_sync``).

Findings (only calls inside steps count when the trace has steps; reported from 1% of the step's
GPU window, low; medium from 3%, high from 10%; cost = ``cost_ns`` per step):
``blocking_copy`` (top issuing ops; advice on ``.item()``, ``.cpu()``, ``non_blocking=True``),
``sync_calls`` (explicit synchronize calls), ``pageable_copy`` (pageable copies not already
counted as blocking; advice: ``pin_memory=True``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from . import classify
from traceview import intervals as iv
from .steps import (NO_STEP, Activity, activity, assign_to_steps, count_per, cpu_op_links, cpu_op_nesting,
                    launch_links, step_column)
from traceview.claims import Claims
from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult, Finding, Headline
from traceview.model import Kind
from traceview.registry import AnalysisSpec, TableSpec
from traceview.tables import masked_int64

NAME = "synchronization"

STREAM_WAIT = re.compile(r"^(cuda|cu|hip)StreamWaitEvent", re.IGNORECASE)
PAGEABLE = re.compile(r"pageable", re.IGNORECASE)
_DIRECTION = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|HtoA|AtoH|AtoD|DtoA|AtoA)\b")
_MEMORY = re.compile(r"\((\w+)\s*->\s*(\w+)\)")

COST_LOW = 0.01
COST_MEDIUM = 0.03
COST_HIGH = 0.10

CALL_COLUMNS = ["rank", "row", "api", "call_type", "step", "tid", "start_ns", "dur_ns", "cpu_op", "top_cpu_op",
                "copy_kind", "memory", "bytes", "gpu_row", "gpu_idle_during_ns", "gpu_idle_after_ns", "cost_ns",
                "cost_from_ns", "cost_to_ns"]


def _sync_type(name: str) -> str | None:
    if STREAM_WAIT.search(name):
        return "stream_wait_event"
    if not classify.SYNC_API.search(name):
        return None
    low = name.lower()
    if "stream" in low:
        return "stream_sync"
    if "event" in low:
        return "event_sync"
    return "device_sync"


class _PerName:
    """``fn(name)`` of the events, evaluated once per distinct name and looked up only at the rows
    asked for (``per_name[rows]``): an object array of every event's value held 8 bytes per event
    through the analysis's peak."""

    def __init__(self, ctx: AnalysisContext, fn: Callable[[str], object]) -> None:
        self.codes, dictionary = classify.dictionary_codes(ctx, "name")
        self.values = np.array([fn(v or "") for v in dictionary] + [fn("")], dtype=object)

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        return self.values[self.codes[rows]]  # a null (-1) is the last entry

    def present(self) -> np.ndarray:
        """Boolean per event: its value is not None."""
        return pd.notna(self.values)[self.codes]


def _cpu_ops(ctx: AnalysisContext, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cpu_op, top_cpu_op) names for runtime ``rows`` (see module docstring); None when absent."""
    trace = ctx.trace
    n = rows.size
    inner = np.full(n, -1, dtype=np.int64)
    top = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return np.empty(0, dtype=object), np.empty(0, dtype=object)
    names = classify.EventNames(ctx)
    start, dur = trace.column("start_ns"), trace.column("dur_ns")

    def end(at: np.ndarray) -> np.ndarray:  # at the rows asked for only: no array over every event
        return start[at] + np.maximum(dur[at], 0)

    # 1. the linked op (innermost = the latest-starting one when a call has several)
    op_rows, rt_rows = cpu_op_links(ctx)
    if op_rows.size:
        # trust a link only when the op contains the call on the same thread (some old traces
        # reuse the correlation id as the runtime call's "External id", linking unrelated ops)
        rank, pid, tid = trace.column("rank"), trace.column("pid"), trace.column("tid")
        ok = (
            (start[op_rows] <= start[rt_rows]) & (end(op_rows) >= end(rt_rows)) & (rank[op_rows] == rank[rt_rows])
            & (pid[op_rows] == pid[rt_rows]) & (tid[op_rows] == tid[rt_rows])
        )
        op_rows, rt_rows = op_rows[ok], rt_rows[ok]
    if op_rows.size:
        inner = _latest_linked_op(op_rows, rt_rows, start[op_rows], rows)
    # 2. containing ops on the same thread
    nest = cpu_op_nesting(ctx)
    if nest.rows.size:
        qk = nest.thread_codes(trace.column("rank")[rows], trace.column("pid")[rows], trace.column("tid")[rows])
        hit = nest.index.covering(qk, start[rows], end(rows))
        missing = (inner < 0) & (hit >= 0)
        inner[missing] = nest.rows[hit[missing]]
        hit0 = nest.outer_index.covering(qk, start[rows], end(rows))
        top[hit0 >= 0] = nest.rows[nest.outer][hit0[hit0 >= 0]]
    return _names_at(names, inner), _names_at(names, top)


def _latest_linked_op(op_rows: np.ndarray, rt_rows: np.ndarray, op_start_ns: np.ndarray,
                      rows: np.ndarray) -> np.ndarray:
    """For each runtime row of ``rows``, its linked op that starts last (ties: the last link), or -1."""
    order = np.lexsort((op_start_ns, rt_rows))  # stable: among equal starts the last link stays last
    rt_sorted, op_sorted = rt_rows[order], op_rows[order]
    last = np.ones(rt_sorted.size, dtype=bool)
    last[:-1] = rt_sorted[1:] != rt_sorted[:-1]
    keys, ops = rt_sorted[last], op_sorted[last].astype(np.int64)
    pos = np.clip(np.searchsorted(keys, rows), 0, max(keys.size - 1, 0))
    found = keys[pos] == rows if keys.size else np.zeros(rows.size, dtype=bool)
    return np.where(found, ops[pos] if keys.size else -1, -1).astype(np.int64)


def _names_at(names: classify.EventNames, rows: np.ndarray) -> np.ndarray:
    """``names[row]`` for each row (an object array), None where the row is -1."""
    out = names[np.maximum(rows, 0)].astype(object)
    out[rows < 0] = None
    return out


def _labels(column: pd.Series, blank: str) -> np.ndarray:
    """``_text(v) or blank`` for every cell of ``column``, worked out once per distinct value."""
    codes, uniques = pd.factorize(column)
    labels = np.array([_text(u) or blank for u in uniques] + [blank], dtype=object)
    return labels[codes]


def _nonnegative_or_missing(column: pd.Series) -> pd.arrays.IntegerArray:
    """Int64 of ``column``: its integer values, missing where the cell is missing or negative."""
    values = column.to_numpy(dtype=object)
    missing = pd.isna(values)
    as_int = np.where(missing, -1, values).astype(np.int64)
    return masked_int64(as_int, missing | (as_int < 0))


def _rank_gaps(act: Activity) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Idle gaps of each rank's GPU activity union (all devices): (rank, start, end), sorted."""
    if len(act) == 0:
        e = np.empty(0, dtype=np.int64)
        return e, e, e
    return iv.hull_gaps_by(act.rank, act.start, act.end)


def call_table(ctx: AnalysisContext, act: Activity) -> pd.DataFrame:
    """The ``calls`` table: synchronize calls and the launch calls of blocking/pageable copies."""
    trace = ctx.trace
    rank_all = trace.column("rank")  # its own dtype (no int64 copy of every event's): cast where kept
    runtime = trace.kind_codes() == int(Kind.RUNTIME)
    # ranks of the activity context (Options.ranks); every rank when there is no GPU activity
    in_ranks = _in_ranks(rank_all, act) if len(act) else np.ones(rank_all.size, dtype=bool)
    sync_type = _PerName(ctx, _sync_type)
    names = classify.EventNames(ctx)
    # copies and their launch calls
    api_rows, gpu_rows = launch_links(ctx)
    memcpy = trace.mask(Kind.MEMCPY)
    sel = memcpy[gpu_rows] & runtime[api_rows] & in_ranks[api_rows] if api_rows.size else np.zeros(0, bool)
    is_call = runtime & in_ranks
    next_call = _next_runtime_call(ctx, is_call, rank_all, api_rows[sel])
    copies = _copy_calls(ctx, api_rows[sel], gpu_rows[sel], next_call, sync_type, names)
    syncs = _sync_calls(np.flatnonzero(is_call & sync_type.present()), sync_type, copies)
    calls = pd.concat([copies, syncs], ignore_index=True) if len(copies) else syncs
    if calls.empty:
        return _empty(CALL_COLUMNS)
    for c in ("copy_kind", "memory"):
        if c not in calls:
            calls[c] = None
    if "bytes" not in calls:
        calls["bytes"] = -1
    rows = calls["row"].to_numpy().astype(np.int64)
    start = trace.column("start_ns")
    calls["rank"] = rank_all[rows].astype(np.int64)
    calls["api"] = names[rows]
    calls["tid"] = trace.column("tid")[rows]
    calls["start_ns"] = start[rows]
    calls["dur_ns"] = np.maximum(trace.column("dur_ns")[rows], 0)
    calls["step"] = assign_to_steps(act.steps, rank_all[rows], start[rows]) if len(act.steps) else NO_STEP
    cpu_op, top_op = _cpu_ops(ctx, rows)
    calls["cpu_op"] = cpu_op
    calls["top_cpu_op"] = top_op
    calls["bytes"] = _nonnegative_or_missing(calls["bytes"])
    calls = calls.sort_values(["rank", "start_ns", "row"]).reset_index(drop=True)
    _gpu_idle(calls, act)
    calls["step"] = step_column(calls["step"])
    calls["gpu_row"] = calls["gpu_row"].astype(np.int64)
    return calls[CALL_COLUMNS]


def _in_ranks(rank_all: np.ndarray, act: Activity) -> np.ndarray:
    """Boolean per event: of a rank that has GPU activity (one comparison when there is one rank)."""
    ranks = np.unique(act.rank)
    return rank_all == ranks[0] if ranks.size == 1 else np.isin(rank_all, ranks)


def _next_runtime_call(ctx: AnalysisContext, is_call: np.ndarray, rank_all: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``, the row of the next runtime call (``is_call``) on the same thread; -1
    for the last call of a thread and for a row that is no call."""
    trace = ctx.trace
    start = trace.column("start_ns")
    rt = np.flatnonzero(is_call)
    # one code per thread, in (rank, pid, tid) order: the same order as sorting on the three
    thread = iv.combine_keys(rank_all[rt], trace.column("pid")[rt], trace.column("tid")[rt])[0]
    order = np.lexsort((start[rt], thread))
    rt_sorted, thread = rt[order], thread[order]
    same_next = np.zeros(rt_sorted.size, dtype=bool)
    if rt_sorted.size > 1:
        same_next[:-1] = thread[1:] == thread[:-1]
    next_sorted = np.full(rt_sorted.size, -1, dtype=np.int64)
    next_sorted[:-1][same_next[:-1]] = rt_sorted[1:][same_next[:-1]]
    # the asked rows among the calls (rt is sorted): no array over every event
    pos = np.clip(np.searchsorted(rt, rows), 0, max(rt.size - 1, 0))
    found = rt[pos] == rows if rt.size else np.zeros(rows.size, dtype=bool)
    in_sorted = np.empty(rt.size, dtype=np.int64)
    in_sorted[order] = np.arange(rt.size, dtype=np.int64)
    return np.where(found, next_sorted[in_sorted[pos]] if rt.size else -1, -1).astype(np.int64)


def _copy_calls(ctx: AnalysisContext, copy_api: np.ndarray, copy_gpu: np.ndarray, nxt: np.ndarray,
                sync_type: _PerName, names: classify.EventNames) -> pd.DataFrame:
    """One row per (launch call, copy) that blocks the host: a blocking copy API
    (``blocking_copy``), an async copy followed by a synchronize call on its thread
    (``copy_then_sync``) or a copy from/to pageable memory (``pageable_copy``). ``nxt``: the next
    runtime call on the thread of each of ``copy_api`` (-1: none)."""
    trace = ctx.trace
    if not copy_api.size:
        return pd.DataFrame(columns=["row", "call_type", "gpu_row", "pair_sync"])
    blocking_api = _per_value(names[copy_api], lambda n: bool(classify.BLOCKING_COPY.search(n))).astype(bool)
    nxt_is_sync = (nxt >= 0) & np.isin(sync_type[np.maximum(nxt, 0)], ["device_sync", "stream_sync", "event_sync"])
    how = np.where(blocking_api, "sync_api", np.where(nxt_is_sync, "async_then_sync", ""))
    pageable = _per_value(names[copy_gpu], lambda n: bool(PAGEABLE.search(n))).astype(bool)
    keep = (how != "") | pageable
    copy_api, copy_gpu, how, pageable, nxt = copy_api[keep], copy_gpu[keep], how[keep], pageable[keep], nxt[keep]
    direction = _per_value(names[copy_gpu], _direction_of)
    memory = _per_value(names[copy_gpu], _memory_of)
    nbytes = trace.events.column("bytes").fill_null(-1).to_numpy()
    call_type = np.where(how == "sync_api", "blocking_copy",
                         np.where(how == "async_then_sync", "copy_then_sync", "pageable_copy"))
    return pd.DataFrame(
        {
            "row": copy_api,
            "call_type": call_type,
            "gpu_row": copy_gpu,
            "copy_kind": direction,
            "memory": memory,
            "bytes": nbytes[copy_gpu],
            "pair_sync": np.where(how == "async_then_sync", nxt, -1),
        }
    )


def _per_value(names: np.ndarray, fn: Callable[[str], object]) -> np.ndarray:
    """``fn(name or "")`` for each of ``names`` (an object array), evaluated once per distinct name."""
    codes, uniques = pd.factorize(names)  # a missing name is code -1: the last entry, fn("")
    mapped = np.array([fn(u or "") for u in uniques] + [fn("")], dtype=object)
    return mapped[codes]


def _direction_of(name: str) -> str | None:
    m = _DIRECTION.search(name)
    return m.group(1) if m else None


def _memory_of(name: str) -> str | None:
    m = _MEMORY.search(name)
    return f"{m.group(1)} -> {m.group(2)}" if m else None


def _sync_calls(sync_rows: np.ndarray, sync_type: _PerName, copies: pd.DataFrame) -> pd.DataFrame:
    """One row per synchronize call; the sync call of a copy_then_sync pair carries the copy's details."""
    paired = copies.loc[copies["pair_sync"] >= 0, "pair_sync"].to_numpy() if len(copies) else np.empty(0, np.int64)
    call_type = np.where(np.isin(sync_rows, paired), "copy_then_sync", sync_type[sync_rows]).astype(object)
    syncs = pd.DataFrame(
        {
            "row": sync_rows,
            "call_type": call_type if sync_rows.size else [],
            "gpu_row": -1,
            "pair_sync": -1,
        }
    )
    if len(copies):
        pair = copies[copies["pair_sync"] >= 0].drop_duplicates("pair_sync").set_index("pair_sync")
        for c in ("gpu_row", "copy_kind", "memory", "bytes"):
            syncs[c] = syncs["row"].map(pair[c]) if c in pair else None
        syncs["gpu_row"] = syncs["gpu_row"].fillna(-1).astype(np.int64)
    return syncs


def _gpu_idle(calls: pd.DataFrame, act: Activity) -> None:
    """Fill gpu_idle_during_ns / gpu_idle_after_ns / cost_ns (see module docstring)."""
    n = len(calls)
    during = np.zeros(n, dtype=np.int64)
    after = np.zeros(n, dtype=np.int64)
    cost = np.zeros(n, dtype=np.int64)
    cost_from = np.zeros(n, dtype=np.int64)
    cost_to = np.zeros(n, dtype=np.int64)
    gk, gs, ge = _rank_gaps(act)
    idx = np.flatnonzero(calls["call_type"].to_numpy() != "stream_wait_event")
    if gs.size and idx.size:
        rank = calls["rank"].to_numpy().astype(np.int64)[idx]
        s = calls["start_ns"].to_numpy()[idx]
        e = s + calls["dur_ns"].to_numpy()[idx]
        # the GPU resumes at the end of the gap that contains the call's end (if it is idle then)
        pos = iv.searchsorted_by(gk, gs, rank, e, side="right") - 1
        i = np.clip(pos, 0, gs.size - 1)
        idle_at_end = (pos >= 0) & (gk[i] == rank) & (gs[i] <= e) & (e < ge[i])
        resume = np.where(idle_at_end, ge[i], e)
        during[idx] = _covered(gk, gs, ge, rank, s, e)
        after[idx] = _covered(gk, gs, ge, rank, e, resume)
        # never count idle twice: in start order per rank, a call's window starts after the
        # windows of the calls before it (a running maximum of their ends)
        order = np.lexsort((s, rank))
        r_o, s_o, w_o = rank[order], s[order], resume[order]
        first = np.concatenate([[True], r_o[1:] != r_o[:-1]])
        grp = np.cumsum(first) - 1
        running = pd.Series(w_o).groupby(grp).cummax().to_numpy().astype(np.int64)
        prev_end = np.empty_like(running)
        prev_end[1:] = running[:-1]
        prev_end[first] = np.iinfo(np.int64).min
        lo_o = np.maximum(s_o, prev_end)
        counted = _covered(gk, gs, ge, r_o, lo_o, np.maximum(w_o, lo_o))
        dur_o = (e - s)[order]
        c = np.zeros(idx.size, dtype=np.int64)
        c[order] = np.minimum(counted, dur_o)
        cost[idx] = c
        # the window the cost was counted in: the call's claims are the idle in it (capped at cost)
        lo, hi = np.zeros(idx.size, dtype=np.int64), np.zeros(idx.size, dtype=np.int64)
        lo[order], hi[order] = lo_o, np.maximum(w_o, lo_o)
        cost_from[idx], cost_to[idx] = lo, hi
    calls["gpu_idle_during_ns"] = during
    calls["gpu_idle_after_ns"] = after
    calls["cost_ns"] = cost
    calls["cost_from_ns"] = cost_from
    calls["cost_to_ns"] = cost_to


def _covered(
    gk: np.ndarray, gs: np.ndarray, ge: np.ndarray, qk: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """|gaps of rank qk ∩ [lo, hi)| per query (gaps sorted by rank then start, disjoint)."""
    out = np.zeros(qk.size, dtype=np.int64)
    if gs.size == 0 or qk.size == 0:
        return out
    ok = hi > lo
    cum = np.concatenate([[0], np.cumsum(ge - gs)])

    def cover(t: np.ndarray) -> np.ndarray:
        # measure of gaps of the query's rank before t
        first = iv.searchsorted_by(gk, gs, qk, np.full(qk.size, gs.min()))  # first gap of the rank
        pos = iv.searchsorted_by(gk, ge, qk, t, side="right")  # gaps of the rank ending at or before t
        i = np.clip(pos, 0, gs.size - 1)
        partial = np.where((pos < gs.size) & (gk[i] == qk), np.clip(t - gs[i], 0, ge[i] - gs[i]), 0)
        return cum[pos] - cum[first] + partial

    out[ok] = (cover(hi) - cover(lo))[ok]
    return out


def _text(value: object) -> str | None:
    """A string value, or None for missing values (None, NaN, NA)."""
    return value if isinstance(value, str) and value else None


def _empty(columns: list[str]) -> pd.DataFrame:
    objects = {"api", "call_type", "cpu_op", "top_cpu_op", "copy_kind", "memory", "name"}
    nullable = {"step", "bytes"}
    floats = {"mean_ns"}
    return pd.DataFrame(
        {
            c: pd.Series(dtype=object if c in objects else "Int64" if c in nullable else "float64" if c in floats
                         else "int64")
            for c in columns
        }
    )


_SYNC_COLS = ["rank", "api", "call_type", "count", "blocked_ns", "mean_ns", "max_ns", "cost_ns", "cpu_op"]
_OP_COLS = ["rank", "cpu_op", "top_cpu_op", "call_type", "api", "count", "blocked_ns", "cost_ns"]
_COPY_COLS = ["rank", "copy_kind", "memory", "call_type", "count", "bytes", "blocked_ns", "cost_ns"]
_STEP_COLS = ["rank", "step", "sync_calls", "sync_blocked_ns", "sync_cost_ns", "blocking_copies",
              "blocking_copy_blocked_ns", "blocking_copy_cost_ns", "pageable_copies", "pageable_cost_ns"]


def _sorted_groups(frame: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """What ``frame.groupby(keys)`` (sorted, missing keys left out) groups, from numpy codes:
    (rows kept, their group, the groups' keys as a frame in group order, dtypes kept)."""
    codes = [pd.factorize(frame[k], sort=True)[0] for k in keys]
    rows = np.flatnonzero(np.logical_and.reduce([c >= 0 for c in codes]))
    group, _ = iv.combine_keys(*[c[rows] for c in codes])
    n_groups = int(group.max()) + 1 if group.size else 0
    first = np.full(n_groups, len(frame), dtype=np.int64)
    np.minimum.at(first, group, rows)
    out = frame[keys].take(first).reset_index(drop=True)
    for k in keys:
        if out[k].dtype == object:  # groupby's keys are an Index of the distinct values: inferred (str)
            out[k] = pd.Index(out[k].to_numpy(dtype=object))
    return rows, group, out


def _group_sums(frame: pd.DataFrame, rows: np.ndarray, group: np.ndarray, n_groups: int,
                columns: dict[str, str]) -> dict[str, np.ndarray]:
    """Exact int64 sums of ``frame[source]`` per group, as ``{output: sums}`` for ``{output: source}``."""
    out = {}
    for name, source in columns.items():
        sums = np.zeros(n_groups, dtype=np.int64)
        np.add.at(sums, group, frame[source].to_numpy(np.int64)[rows])
        out[name] = sums
    return out


def _most_common(values: pd.Series, rows: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, its most frequent value (ties: the one seen first), as ``value_counts().index[0]``
    of each group gives."""
    code, uniques = pd.factorize(values.to_numpy()[rows])
    pair, (p_group, p_code) = iv.combine_keys(group, code)
    count = np.bincount(pair, minlength=p_group.size)
    seen = np.full(p_group.size, rows.size, dtype=np.int64)
    np.minimum.at(seen, pair, np.arange(rows.size, dtype=np.int64))
    best = np.lexsort((seen, -count, p_group))
    head = best[np.r_[True, p_group[best][1:] != p_group[best][:-1]]]
    out = np.empty(n_groups, dtype=object)
    out[p_group[head]] = np.asarray(uniques, dtype=object)[p_code[head]]
    return out


def _sync_summary(c: pd.DataFrame) -> pd.DataFrame:
    """Synchronize / wait calls per rank, API and call type, with the CPU op that issues them most."""
    syncs = c[c["api"].str.contains("Synchronize|StreamWaitEvent", regex=True)]
    if not len(syncs):
        return _empty(_SYNC_COLS)
    rows, group, s = _sorted_groups(syncs, ["rank", "api", "call_type"])
    n_groups = len(s)
    s["count"] = np.bincount(group, minlength=n_groups).astype(np.int64)
    for name, values in _group_sums(syncs, rows, group, n_groups, {"blocked_ns": "dur_ns"}).items():
        s[name] = values
    longest = np.full(n_groups, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(longest, group, syncs["dur_ns"].to_numpy(np.int64)[rows])
    s["max_ns"] = longest
    s["cost_ns"] = _group_sums(syncs, rows, group, n_groups, {"cost_ns": "cost_ns"})["cost_ns"]
    s["mean_ns"] = s["blocked_ns"] / s["count"]
    s["cpu_op"] = _most_common(syncs["cpu_op_key"], rows, group, n_groups)
    return s.sort_values(["rank", "blocked_ns"], ascending=[True, False])[_SYNC_COLS].reset_index(drop=True)


def _by_cpu_op(c: pd.DataFrame) -> pd.DataFrame:
    """Blocking calls per rank, CPU op (and its top-level op), call type and API, costliest first."""
    c = c.assign(top_key=_labels(c["top_cpu_op"], "(none)"))
    rows, group, o = _sorted_groups(c, ["rank", "cpu_op_key", "top_key", "call_type", "api"])
    o["count"] = np.bincount(group, minlength=len(o)).astype(np.int64)
    for name, values in _group_sums(c, rows, group, len(o), {"blocked_ns": "dur_ns", "cost_ns": "cost_ns"}).items():
        o[name] = values
    o = o.rename(columns={"cpu_op_key": "cpu_op", "top_key": "top_cpu_op"})
    return o.sort_values(["rank", "cost_ns", "blocked_ns"], ascending=[True, False, False])[
        _OP_COLS].reset_index(drop=True)


def _copies(c: pd.DataFrame) -> pd.DataFrame:
    """Blocking copies per rank, copy kind, memory and call type, costliest first."""
    cp = c[c["gpu_row"] >= 0].copy()
    if not len(cp):
        return _empty(_COPY_COLS)
    # one row per copy: the copy's launch call row (the pair's sync row carries the same gpu_row)
    cp["copy_kind"] = _labels(cp["copy_kind"], "?")
    cp["memory"] = _labels(cp["memory"], "?")
    cp = cp.groupby(["rank", "gpu_row"], as_index=False).agg(
        copy_kind=("copy_kind", "first"), memory=("memory", "first"), call_type=("call_type", "first"),
        bytes=("bytes", "first"), blocked_ns=("dur_ns", "sum"), cost_ns=("cost_ns", "sum"))
    g = cp.groupby(["rank", "copy_kind", "memory", "call_type"])
    k = g.agg(count=("gpu_row", "size"), bytes=("bytes", "sum"), blocked_ns=("blocked_ns", "sum"),
              cost_ns=("cost_ns", "sum")).reset_index()
    k["bytes"] = k["bytes"].astype("Int64")
    return k.sort_values(["rank", "cost_ns"], ascending=[True, False])[_COPY_COLS].reset_index(drop=True)


#: the per-step totals: output column -> (flag column, value column, or None to count the flags)
_STEP_SUMS = {
    "sync_calls": ("is_sync", None),
    "sync_blocked_ns": ("is_sync", "dur_ns"),
    "sync_cost_ns": ("is_sync", "cost_ns"),
    "blocking_copies": ("copy_count", None),
    "blocking_copy_blocked_ns": ("is_copy", "dur_ns"),
    "blocking_copy_cost_ns": ("is_copy", "cost_ns"),
    "pageable_copies": ("is_pageable", None),
    "pageable_cost_ns": ("is_pageable", "cost_ns"),
}


def _step_flags(c: pd.DataFrame) -> dict[str, np.ndarray]:
    """The flag columns of :data:`_STEP_SUMS`, one bool array per flag."""
    call_type = c["call_type"]
    is_copy = call_type.isin(["blocking_copy", "copy_then_sync"]).to_numpy()
    pair_sync = (call_type.eq("copy_then_sync") & c["api"].str.contains("Synchronize")).to_numpy()
    return {
        "is_sync": call_type.isin(["device_sync", "stream_sync", "event_sync"]).to_numpy(),
        "is_copy": is_copy,
        "is_pageable": (call_type == "pageable_copy").to_numpy(),
        "copy_count": is_copy & ~pair_sync,  # a copy_then_sync pair is one copy (its copy call's row)
    }


def _by_step(c: pd.DataFrame) -> pd.DataFrame:
    """Sync and copy totals per rank for the whole trace (step blank) and per step.

    Each total is an exact int64 sum over the group of the value where the call has the flag, else
    0 (one pass over the calls for all groups: a trace has hundreds of steps)."""
    flags = _step_flags(c)
    rank = c["rank"].to_numpy().astype(np.int64)
    step = c["step"].to_numpy(dtype=np.int64, na_value=NO_STEP)
    in_step = step != NO_STEP
    # every call counts in its rank's whole-trace row, and calls in a step in that step's row too
    codes, (k_rank, k_step) = iv.combine_keys(np.concatenate([rank, rank[in_step]]),
                                              np.concatenate([np.full(rank.size, NO_STEP, dtype=np.int64),
                                                              step[in_step]]))
    out: dict[str, Any] = {"rank": k_rank, "step": step_column(k_step)}
    for name, (flag, value) in _STEP_SUMS.items():
        per_call = flags[flag].astype(np.int64) if value is None else np.where(
            flags[flag], c[value].to_numpy().astype(np.int64), 0)
        sums = np.zeros(k_rank.size, dtype=np.int64)
        np.add.at(sums, codes, np.concatenate([per_call, per_call[in_step]]))
        out[name] = sums
    return pd.DataFrame(out, columns=_STEP_COLS)


def summaries(calls: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The summaries of the blocking calls (:func:`call_table`): sync calls, by CPU op, copies, by step."""
    if calls.empty:
        return {"sync_summary": _empty(_SYNC_COLS), "by_cpu_op": _empty(_OP_COLS), "copies": _empty(_COPY_COLS),
                "by_step": _empty(_STEP_COLS)}
    c = calls.copy()
    c["cpu_op_key"] = _labels(c["cpu_op"], "(none)")
    return {"sync_summary": _sync_summary(c), "by_cpu_op": _by_cpu_op(c), "copies": _copies(c), "by_step": _by_step(c)}


def gpu_sync_events(ctx: AnalysisContext, act: Activity) -> pd.DataFrame:
    trace = ctx.trace
    cols = ["rank", "device", "name", "count", "total_ns"]
    sel = trace.mask(Kind.SYNC)
    if len(act):
        sel &= _in_ranks(trace.column("rank"), act)
    if not sel.any():
        return _empty(cols)
    f = pd.DataFrame({"rank": trace.column("rank")[sel].astype(np.int64), "device": trace.column("device")[sel].astype(
        np.int64), "name": classify.EventNames(ctx)[sel], "dur": trace.column("dur_ns")[sel]})
    g = f.groupby(["rank", "device", "name"]).agg(count=("dur", "size"), total_ns=("dur", "sum")).reset_index()
    return g[cols]


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    options = ctx.options
    act = activity(ctx)
    calls = call_table(ctx, act)
    if options.ranks is not None and len(calls):
        calls = calls[calls["rank"].isin(list(options.ranks))].reset_index(drop=True)
    tables = {"calls": calls, **summaries(calls), "gpu_sync_events": gpu_sync_events(ctx, act)}
    result = AnalysisResult(name=NAME, tables=tables)
    if calls.empty:
        return result
    result.findings.extend(_findings(calls, act))
    return result



#: umbrella findings whose cost already holds ours (docs/metrics.md: the costs overlap)
_PART_OF = {"blocking_copy": "sync_bound_gaps", "sync_calls": "sync_bound_gaps", "pageable_copy": "sync_bound_gaps"}

_ADVICE = {
    "blocking_copy": "Keep values on the GPU inside the loop: avoid .item(), .cpu(), .tolist(), .numpy(), printing "
    "or Python control flow on CUDA tensors every step (accumulate losses/metrics as tensors and read them "
    "every N steps); for host-to-device copies use pinned memory and .to(device, non_blocking=True).",
    "sync_calls": "Remove torch.cuda.synchronize() (and stream/event synchronize) from the training loop; it is "
    "only needed for timing. Use CUDA events (elapsed_time) or the profiler for timing, and "
    "torch.cuda.Event / stream.wait_event for ordering between streams.",
    "pageable_copy": "Copy from pinned memory: DataLoader(pin_memory=True) or tensor.pin_memory(), then "
    ".to(device, non_blocking=True); pageable copies go through a staging buffer and block the host.",
}


class _SyncRank(TypedDict):
    """Evidence of a synchronisation finding, per rank."""

    rank: int
    steps: int
    calls: int
    calls_per_step: float
    blocked_ns: int
    cost_ns: int
    cost_ns_per_step: int
    share: float
    apis: list[str]
    copy_kinds: list[str]
    top_cpu_ops: list[dict[str, Any]]


_WHAT = {"blocking_copy": "blocking copies", "sync_calls": "synchronize calls",
         "pageable_copy": "pageable-memory copies"}


def call_claims(calls: pd.DataFrame, act: Activity) -> Claims:
    """The GPU idle the ``calls`` cost, as claims: the idle of the rank's GPUs inside each call's
    cost window (``cost_from_ns`` .. ``cost_to_ns``), earliest first, capped at the call's
    ``cost_ns``; on every device of the rank (the rank's GPUs are all idle then)."""
    _, rank, device, start, end = _claim_pieces(calls, act)
    return Claims.of(rank, device, start, end)


def _claim_pieces(calls: pd.DataFrame, act: Activity) -> tuple[np.ndarray, ...]:
    """(position in ``calls`` of the call, rank, device, start, end) of each piece of
    :func:`call_claims`."""
    empty = np.zeros(0, dtype=np.int64)
    positive = np.flatnonzero(calls["cost_ns"].to_numpy(np.int64) > 0)
    c = calls.iloc[positive]
    gk, gs, ge = _rank_gaps(act)
    if c.empty or gs.size == 0:
        return empty, empty, empty, empty, empty
    rank = c["rank"].to_numpy(np.int64)
    lo, hi = c["cost_from_ns"].to_numpy(np.int64), c["cost_to_ns"].to_numpy(np.int64)
    # the gaps (sorted by rank, start; disjoint) overlapping each window: gaps j0 .. j1-1
    j0 = iv.searchsorted_by(gk, ge, rank, lo, side="right")
    j1 = iv.searchsorted_by(gk, gs, rank, hi, side="left")
    n = np.maximum(j1 - j0, 0)
    owner = np.repeat(np.arange(rank.size), n)
    first = np.cumsum(n) - n
    j = j0[owner] + (np.arange(owner.size) - first[owner])
    ok = gk[j] == rank[owner] if j.size else np.zeros(0, dtype=bool)
    owner, j = owner[ok], j[ok]
    ps, pe = np.maximum(gs[j], lo[owner]), np.minimum(ge[j], hi[owner])
    # cap each call's pieces at its cost: keep the earliest pieces up to cost_ns (pieces are in order)
    length = np.maximum(pe - ps, 0)
    before = pd.Series(length).groupby(owner).cumsum().to_numpy() - length
    room = np.maximum(c["cost_ns"].to_numpy(np.int64)[owner] - before, 0)
    pe = np.minimum(pe, ps + room)
    devices = pd.DataFrame({"rank": act.rank, "device": act.device}).drop_duplicates()
    pieces = pd.DataFrame({"owner": owner, "rank": rank[owner], "start_ns": ps, "end_ns": pe}).merge(devices, on="rank")
    return (positive[pieces["owner"].to_numpy(np.int64)], pieces["rank"].to_numpy(np.int64),
            pieces["device"].to_numpy(np.int64), pieces["start_ns"].to_numpy(np.int64),
            pieces["end_ns"].to_numpy(np.int64))


#: the finding code of each call type, in the order findings are listed
_CODE_OF = {"blocking_copy": "blocking_copy", "copy_then_sync": "blocking_copy", "device_sync": "sync_calls",
            "stream_sync": "sync_calls", "event_sync": "sync_calls", "pageable_copy": "pageable_copy"}
_CODES = ("blocking_copy", "sync_calls", "pageable_copy")


def _step_windows(act: Activity) -> dict[int, float]:
    """Per rank: its mean step window (first start .. last end of the step's activity, over the
    rank's devices), or its activity's span when it has no steps."""
    out: dict[int, float] = {}
    if len(act) == 0:
        return out
    span = pd.DataFrame({"rank": act.rank, "start": act.start, "end": act.end}).groupby("rank").agg(
        start=("start", "min"), end=("end", "max"))
    out.update({int(r): float(e - s) for r, s, e in zip(span.index, span["start"], span["end"])})
    in_step = act.step != NO_STEP
    if in_step.any():
        codes, (r, st) = iv.combine_keys(act.rank[in_step], act.step[in_step])
        k, lo, hi = iv.window_by(codes, act.start[in_step], act.end[in_step])
        means = pd.Series(hi - lo).groupby(r[k]).mean()
        out.update({int(rank): float(w) for rank, w in means.items()})
    return out


def _findings(calls: pd.DataFrame, act: Activity) -> list[Finding]:
    """One finding per kind of problem and rank where it costs at least COST_LOW, judged on every
    (kind, rank) at once."""
    step_counts = act.steps.counts()
    code = calls["call_type"].map(_CODE_OF)
    steps = calls["rank"].map(step_counts).fillna(0).astype(np.int64)
    # calls outside steps (e.g. at profiler exit) do not count on a rank with steps
    counted = code.notna() & ((steps == 0) | calls["step"].notna())
    c = calls[counted.to_numpy(bool)].assign(code=code[counted], n_steps=steps[counted])
    if c.empty:
        return []
    per = c.groupby(["code", "rank"], sort=False).agg(cost_ns=("cost_ns", "sum"), steps=("n_steps", "first"))
    windows = _step_windows(act)
    window = np.array([windows.get(int(r), np.nan) for r in per.index.get_level_values("rank")], dtype=np.float64)
    n = per["steps"].to_numpy(np.int64)
    cost = per["cost_ns"].to_numpy(np.int64)
    per["cost_ns_per_step"] = np.where(n > 0, np.round(cost / np.maximum(n, 1)), cost).astype(np.int64)
    per["share"] = per["cost_ns_per_step"].to_numpy(np.float64) / np.where(window > 0, window, np.nan)
    per = per[per["share"].to_numpy(np.float64) >= COST_LOW]
    if per.empty:
        return []
    keys = pd.MultiIndex.from_arrays([c["code"], c["rank"]])
    c = c[keys.isin(per.index)].reset_index(drop=True)
    evidence = _evidence(c, per)
    owner, rank, device, start, end = _claim_pieces(c, act)
    piece_key = pd.MultiIndex.from_arrays([c["code"].to_numpy()[owner], rank]) if owner.size else None
    findings = []
    for key in sorted(evidence, key=lambda k: (_CODES.index(k[0]), k[1])):
        sel = piece_key.get_locs([key[0], key[1]]) if piece_key is not None and key in piece_key else []
        claims = Claims.of(rank[sel], device[sel], start[sel], end[sel]) if len(sel) else Claims.empty()
        findings.append(_finding(key[0], [evidence[key]], claims))
    return findings


def _evidence(c: pd.DataFrame, per: pd.DataFrame) -> dict[tuple[str, int], _SyncRank]:
    """The evidence of each qualifying (code, rank) of ``per``, from its calls in ``c``."""
    gpu = c["gpu_row"].to_numpy(np.int64)
    # a copy is one event even when two calls (copy + sync) are listed for it
    one = np.where(gpu >= 0, gpu, -c["row"].to_numpy(np.int64) - 1)
    op = [_text(t) or _text(u) or "(no CPU op)" for t, u in zip(c["top_cpu_op"].tolist(), c["cpu_op"].tolist())]
    frame = c.assign(op=op, one=one)
    groups = frame.groupby(["code", "rank"], sort=False)
    totals = groups.agg(blocked_ns=("dur_ns", "sum"), calls=("one", "size"))
    copies = frame[gpu >= 0].groupby(["code", "rank"], sort=False)["gpu_row"].nunique()
    apis = groups["api"].agg(lambda v: sorted(set(v.tolist())))
    kinds = groups["copy_kind"].agg(lambda v: sorted({k for k in v.tolist() if isinstance(k, str)}))
    ops = (frame.groupby(["code", "rank", "op"], sort=True).agg(calls=("one", "nunique"), cost_ns=("cost_ns", "sum"))
           .reset_index().sort_values("cost_ns", ascending=False, kind="stable"))
    top = ops.groupby(["code", "rank"], sort=False).head(5)
    top_of: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for code, rank, name, n_calls, cost in zip(top["code"], top["rank"], top["op"], top["calls"], top["cost_ns"]):
        top_of.setdefault((code, int(rank)), []).append({"cpu_op": str(name), "calls": int(n_calls),
                                                         "cost_ns": int(cost)})
    out: dict[tuple[str, int], _SyncRank] = {}
    for (code, rank), row in per.iterrows():
        key = (str(code), int(rank))
        n_steps = int(row["steps"])
        n_calls = int(totals.loc[(code, rank), "calls"]) if code == "sync_calls" else int(copies.get((code, rank), 0))
        out[key] = {
            "rank": int(rank), "steps": n_steps, "calls": n_calls,
            "calls_per_step": n_calls / n_steps if n_steps else float(n_calls),
            "blocked_ns": int(totals.loc[(code, rank), "blocked_ns"]), "cost_ns": int(row["cost_ns"]),
            "cost_ns_per_step": int(row["cost_ns_per_step"]), "share": float(row["share"]),
            "apis": apis.loc[(code, rank)], "copy_kinds": kinds.loc[(code, rank)],
            "top_cpu_ops": top_of.get(key, []),
        }
    return out


def _finding(code: str, per_rank: list[_SyncRank], claims: Claims) -> Finding:
    """One finding of kind ``code`` over the ranks where it costs enough."""
    cost = int(round(float(np.mean([p["cost_ns_per_step"] for p in per_rank]))))
    share = float(np.mean([p["share"] for p in per_rank]))
    worst = max(per_rank, key=lambda p: p["share"])
    per = float(np.mean([p["calls_per_step"] for p in per_rank]))
    top = worst["top_cpu_ops"][0]["cpu_op"] if worst["top_cpu_ops"] else "(no CPU op)"
    lead = f" (mostly from {top})" if top != "(no CPU op)" else ""
    where = f"Rank {per_rank[0]['rank']}" if len(per_rank) == 1 else f"{len(per_rank)} ranks"
    return Finding(
        code=code,
        title=f"{where}: {per:.0f} {_WHAT[code]} {count_per(min(p['steps'] for p in per_rank))}{lead} block the "
        "host while the GPU has nothing "
        "queued",
        severity="high" if worst["share"] >= COST_HIGH else "medium" if worst["share"] >= COST_MEDIUM else "low",
        analysis=NAME,
        recommendation=_ADVICE[code],
        cost_ns_per_step=cost,
        cost_share=share,
        rank=per_rank[0]["rank"] if len(per_rank) == 1 else None,
        evidence={"worst_rank": worst["rank"], "top_cpu_ops": worst["top_cpu_ops"], "per_rank": per_rank},
        claims=claims,
        headline=Headline(f"{{}} {_WHAT[code]} {count_per(min(p['steps'] for p in per_rank))} block the host while "
                          "the GPU has nothing queued", per, unit=""),
        # the idle-gap analysis's sync_bound gaps are the idle during these calls
        part_of=_PART_OF.get(code),
    )


SPEC = AnalysisSpec(
    name=NAME,
    title="Synchronisation",
    run=analyze,
    requires=("activity", "links.launch", "links.cpu_op", "classify.codes.name", "cpu_op_nesting"),
    order=60,
    tables=(
        TableSpec("calls", "Synchronising calls", sort_by="cost_ns", per_event=True),
        TableSpec("sync_summary", "Synchronize calls per API"),
        TableSpec("by_cpu_op", "Synchronising calls by CPU op", sort_by="cost_ns"),
        TableSpec("copies", "Blocking and pageable copies"),
        TableSpec("by_step", "Synchronisation per step", title_without_steps="Synchronisation, whole trace"),
        TableSpec("gpu_sync_events", "GPU-side sync events"),
    ),
    finding_codes=("sync_calls", "blocking_copy", "pageable_copy"),
    finding_parents=tuple(_PART_OF.items()),
    finding_precedence=(("sync_calls", 40), ("blocking_copy", 41), ("pageable_copy", 42)),
    headline_table="sync_summary",
)
