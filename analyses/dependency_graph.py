"""The dependency graph of a trace's host threads and GPU streams (a helper module, no analysis): the
derived input ``dependency_graph`` that the critical-path analysis walks and re-times.

Points are the start and end of every host event (CPU ops, runtime calls, annotations; python
functions are not points) and of every GPU activity of the analysed ranks. Edges (docs/metrics.md,
"Critical path"), each with a lag in ns:

* ``duration``: a GPU activity's start -> its end (its work);
* ``host_order``: consecutive points of one host thread (the time between is owned by the innermost
  host event open then, or is untraced host time);
* ``launch``: a launch call's start -> the start of the activity it launched (correlation; a graph
  launch -> every kernel of its replay);
* ``stream_order``: the previous activity's end on the same stream -> an activity's start;
* ``sync_wait``: the activity a synchronising call drained -> the call's end;
* ``stream_wait``: (inferred) the activity of another stream an activity waited for.

A point's time is the maximum over its incoming edges of source time + lag. The *binding* edge of a
point is the one from the latest source (ties: :data:`TIE_PRIORITY`); it carries the measured time
difference, every other edge a nominal lag no larger than its measured difference, so re-timing the
graph with the lags as they are gives back every measured time, and changing lags answers what-ifs.
Everything is built with column operations over all ranks at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from traceview import intervals as iv
from traceview.context import AnalysisContext
from traceview.model import Kind
from traceview.registry import register_input

from . import classify
from .paths import IncomingEdges
from .steps import Activity, activity, analysed_ranks, cpu_op_nesting, launch_links

EDGE_KINDS = ("duration", "host_order", "launch", "stream_order", "sync_wait", "stream_wait", "wake")
DURATION, HOST_ORDER, LAUNCH, STREAM_ORDER, SYNC_WAIT, STREAM_WAIT, WAKE = range(len(EDGE_KINDS))
#: the edges whose dependency the trace does not record (docs/metrics.md says the rule of each)
INFERRED_EDGES = (STREAM_WAIT, WAKE)
#: when two incoming edges' sources are equally late, the higher wins (the GPU work a call waited
#: for before the host's own order)
TIE_PRIORITY = np.array([0, 1, 2, 3, 5, 4, 6], dtype=np.int8)

#: segment categories of the critical path (``waiting_on_rank`` is split out of ``communication``
#: across ranks by the analysis's reduce step)
CATEGORIES = ("host_compute", "host_untraced", "launch_overhead", "sync", "gpu_compute", "memory",
              "communication", "gpu_wait", "unlinked")
(HOST_COMPUTE, HOST_UNTRACED, LAUNCH_OVERHEAD, SYNC, GPU_COMPUTE, MEMORY, COMMUNICATION, GPU_WAIT,
 UNLINKED) = range(len(CATEGORIES))

HOST_KINDS = (Kind.CPU_OP, Kind.RUNTIME, Kind.ANNOTATION)
STREAM_WAIT_API = re.compile(r"StreamWaitEvent", re.IGNORECASE)
#: an activity that starts this much later than its stream and launch allow, after a wait-event
#: call, is taken to wait for another stream (shorter delays are the GPU's own turnaround)
STREAM_WAIT_MIN_NS = 2_000
#: a host thread that resumes after at least this long with no event open, within ``WAKE_MAX_NS``
#: of the end of an event of another thread of its rank (both threads launch GPU work), was woken by
#: it: the main thread resuming when autograd's backward thread finishes, the backward thread
#: starting when the main thread calls backward
WAKE_MIN_GAP_NS = 50_000
WAKE_MAX_NS = 200_000
#: candidates looked at per query when the nearest one does not qualify (another rank, the same stream)
_LOOKBACK = 8


def index_type(n: int) -> type[np.signedinteger]:
    """int32 for indices into ``n`` items where every index fits, else int64."""
    return np.int32 if n < 2**31 else np.int64


@dataclass(frozen=True)
class DependencyGraph:
    """Points (``times``, the event ``row`` and ``rank`` of each), edges (``src``, ``dst``,
    ``kind``, ``lag``, the segment ``category`` and the event row ``owner`` naming the time an edge
    covers) and, per point, its ``binding`` edge (-1 for a point without incoming edges). Host event
    ``i`` has points ``i`` (start) and ``hosts + i`` (end); activity ``j`` of the ``activity`` input
    has ``2 * hosts + j`` and ``2 * hosts + activities + j``. ``rules`` counts what was inferred or
    left out: the rank of every counted item, by rule."""

    times: np.ndarray
    row: np.ndarray
    rank: np.ndarray
    hosts: int
    activities: int
    src: np.ndarray
    dst: np.ndarray
    kind: np.ndarray
    lag: np.ndarray
    category: np.ndarray
    owner: np.ndarray
    binding: np.ndarray
    incoming: IncomingEdges
    host_rows: np.ndarray
    host_thread: np.ndarray  # (rank, pid, tid) code of each host event
    rules: dict[str, np.ndarray] = field(default_factory=dict)

    def activity_start(self, j: np.ndarray | slice = slice(None)) -> np.ndarray:
        return (2 * self.hosts + np.arange(self.activities, dtype=np.int64))[j]

    def activity_end(self, j: np.ndarray | slice = slice(None)) -> np.ndarray:
        return (2 * self.hosts + self.activities + np.arange(self.activities, dtype=np.int64))[j]

    @property
    def binding_source(self) -> np.ndarray:
        """Each point's binding predecessor (-1 at a root)."""
        return np.where(self.binding >= 0, self.src[np.maximum(self.binding, 0)], -1)


@dataclass
class _Edges:
    """Edges as they are found, one list per column."""

    parts: list[tuple[np.ndarray, ...]] = field(default_factory=list)

    def add(self, src: np.ndarray, dst: np.ndarray, kind: int, category: np.ndarray | int,
            owner: np.ndarray) -> None:
        n = src.size
        cat = np.broadcast_to(np.asarray(category, dtype=np.int8), (n,))
        self.parts.append((src.astype(np.int64), dst.astype(np.int64), np.full(n, kind, dtype=np.int8), cat,
                           owner.astype(np.int64)))

    def columns(self) -> tuple[np.ndarray, ...]:
        """The edges as columns; the parts are let go (the graph's largest arrays are not held twice)."""
        if not self.parts:
            return tuple(np.zeros(0, dtype=t) for t in (np.int64, np.int64, np.int8, np.int8, np.int64))
        out = tuple(np.concatenate([p[i] for p in self.parts]) for i in range(5))
        self.parts.clear()
        return out


def dependency_graph(ctx: AnalysisContext) -> DependencyGraph:
    """The context's :class:`DependencyGraph` (the derived input ``dependency_graph``)."""
    graph: DependencyGraph = ctx.input("dependency_graph")
    return graph


def build_dependency_graph(ctx: AnalysisContext) -> DependencyGraph:
    """:func:`dependency_graph`, built now."""
    trace, act = ctx.trace, activity(ctx)
    kinds = trace.kind_codes()
    rank_all = trace.column("rank").astype(np.int64)
    host = np.isin(kinds, [int(k) for k in HOST_KINDS]) & np.isin(rank_all, analysed_ranks(ctx))
    host[_folded_ops(ctx)] = False
    hrows = np.flatnonzero(host)
    hs = trace.column("start_ns")[hrows].astype(np.int64)
    he = hs + np.maximum(trace.column("dur_ns")[hrows], 0)
    thread, _ = iv.combine_keys(rank_all[hrows], trace.column("pid")[hrows], trace.column("tid")[hrows])
    n_h, n_g = hrows.size, len(act)
    times = np.concatenate([hs, he, act.start, act.end]).astype(np.int64)
    rows = np.concatenate([hrows, hrows, act.row, act.row]).astype(np.int64)
    ranks = np.concatenate([rank_all[hrows], rank_all[hrows], act.rank, act.rank]).astype(np.int64)
    host_index = np.full(trace.num_events, -1, dtype=np.int64)
    host_index[hrows] = np.arange(n_h)
    rules: dict[str, np.ndarray] = {}
    edges = _Edges()
    host_category = _host_categories(ctx, hrows)
    chain = _host_order_edges(edges, thread, hs, he, hrows, host_category)
    _wake_edges(ctx, edges, chain, thread, times, hrows)
    g_start = 2 * n_h + np.arange(n_g, dtype=np.int64)
    g_end = g_start + n_g
    gpu_category = np.select([act.cls == classify.COMMUNICATION, act.cls == classify.MEMORY],
                             [COMMUNICATION, MEMORY], GPU_COMPUTE).astype(np.int8)
    edges.add(g_start, g_end, DURATION, gpu_category, act.row)
    api_host = np.where(act.api_row >= 0, host_index[np.maximum(act.api_row, 0)], -1)
    linked = api_host >= 0
    rules["activities without a launch call"] = act.rank[~linked]
    edges.add(api_host[linked], g_start[linked], LAUNCH, LAUNCH_OVERHEAD, act.api_row[linked])
    stream_prev = _stream_order_edges(edges, act, g_start, g_end, rules)
    _sync_wait_edges(ctx, edges, act, hrows, hs, he, g_end, n_h, rules)
    _stream_wait_edges(ctx, edges, act, stream_prev, api_host, g_start, g_end, times)
    src, dst, kind, category, owner = edges.columns()
    backwards = times[src] > times[dst]
    rules["edges left out: source after destination (clock skew)"] = ranks[dst[backwards]]
    keep = ~backwards
    # points, edges and event rows as int32 where every index fits (the graph's largest arrays:
    # a few per event); times and lags stay int64
    point_type, row_type = index_type(times.size), index_type(trace.num_events)
    src, dst = src[keep].astype(point_type), dst[keep].astype(point_type)
    kind, category, owner = kind[keep], category[keep], owner[keep].astype(row_type)
    rows = rows.astype(row_type)
    binding, lag = _binding_and_lags(times, src, dst, kind, act, n_h)
    binding = binding.astype(index_type(src.size))
    incoming = IncomingEdges.of(times.size, src, dst)
    rules["points on cycles (placed last)"] = ranks[incoming.order[times.size - incoming.cyclic:]]
    return DependencyGraph(times=times, row=rows, rank=ranks, hosts=n_h, activities=n_g, src=src, dst=dst,
                           kind=kind, lag=lag, category=category, owner=owner, binding=binding, incoming=incoming,
                           host_rows=hrows, host_thread=thread, rules=rules)


def _folded_ops(ctx: AnalysisContext) -> np.ndarray:
    """Rows of the CPU ops nested in another op that contain no runtime call: their time is host
    compute of the op around them, the same on any path, so they are not points (on a training trace
    about half the ops: ``aten::empty``, ``aten::view`` ... under the op that launches)."""
    trace = ctx.trace
    nest = cpu_op_nesting(ctx)
    inner = np.flatnonzero(nest.depth > 0)
    if inner.size == 0:
        return inner
    calls = np.flatnonzero(trace.kind_codes() == int(Kind.RUNTIME))
    ops = nest.rows[inner]
    start = trace.column("start_ns")[ops]
    end = start + np.maximum(trace.column("dur_ns")[ops], 0)
    call_thread = nest.thread_codes(trace.column("rank")[calls].astype(np.int64), trace.column("pid")[calls],
                                    trace.column("tid")[calls])
    known = call_thread >= 0
    call_thread, call_start = call_thread[known], trace.column("start_ns")[calls[known]]
    order = np.lexsort((call_start, call_thread))
    call_thread, call_start = call_thread[order], call_start[order]
    op_thread = nest.codes[inner]
    first = iv.searchsorted_by(call_thread, call_start, op_thread, start, side="left")
    after = iv.searchsorted_by(call_thread, call_start, op_thread, end, side="left")
    return ops[after == first]  # no call starts inside [start, end) on the op's thread


def _host_categories(ctx: AnalysisContext, hrows: np.ndarray) -> np.ndarray:
    """Category of the time each host event owns: a synchronising call (or blocking copy) ``sync``,
    a call that launched GPU work ``launch_overhead``, anything else ``host_compute``."""
    kinds = ctx.trace.kind_codes()[hrows]
    runtime = kinds == int(Kind.RUNTIME)
    blocking = (classify.is_sync_call(ctx) | classify.name_matches(ctx, classify.BLOCKING_COPY))[hrows] & runtime
    api_rows, _ = launch_links(ctx)
    launched = np.isin(hrows, api_rows) & runtime
    # time inside an annotation (record_function, NVTX) with no op open is host work the annotation
    # names: host compute (a step's own range is untraced host time: the critical path says so)
    return np.select([blocking, launched], [SYNC, LAUNCH_OVERHEAD], HOST_COMPUTE).astype(np.int8)


def _host_order_edges(edges: _Edges, thread: np.ndarray, hs: np.ndarray, he: np.ndarray, hrows: np.ndarray,
                      host_category: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Consecutive points of each thread; the time between is owned by the innermost event open.
    Returns the edges' (source, destination, owning host event or -1)."""
    n = hrows.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int8)
    dur = he - hs
    point_thread = np.concatenate([thread, thread])
    point_time = np.concatenate([hs, he])
    is_start = np.concatenate([np.ones(n, dtype=np.int8), np.zeros(n, dtype=np.int8)])
    # at one time: ends before starts; the outer of two starts first, the inner of two ends first
    tie = np.concatenate([-dur, dur])
    order = np.lexsort((tie, _thread_time_key(point_thread, point_time, is_start)))
    same = point_thread[order[1:]] == point_thread[order[:-1]]
    src, dst = order[:-1][same], order[1:][same]
    owner = _open_event(order, n)[:-1][same]
    # events that overlap without nesting (malformed traces) break the stack the owner is read from:
    # those intervals ask the nesting index instead
    t0, t1 = point_time[src], point_time[dst]
    safe = np.maximum(owner, 0)
    wrong = (t1 > t0) & ((owner < 0) | (hs[safe] > t0) | (he[safe] < t1))
    if wrong.any():
        index = iv.NestedIndex(thread, hs, he)
        owner[wrong] = index.covering(point_thread[src[wrong]], t0[wrong], t1[wrong])
    has = (owner >= 0) & (point_time[dst] > point_time[src])
    category = np.where(has, host_category[np.maximum(owner, 0)], HOST_UNTRACED).astype(np.int8)
    edges.add(src, dst, HOST_ORDER, category, np.where(has, hrows[np.maximum(owner, 0)], -1))
    return src, dst, np.where(has, owner, -1)


def _thread_time_key(thread: np.ndarray, t: np.ndarray, is_start: np.ndarray) -> np.ndarray:
    """One int64 key ordering points by thread, time, then ends before starts (one sort key instead of
    three); where thread x span would not fit in int64, each point's rank in that order (exact either
    way)."""
    lo = int(t.min())
    span = int(t.max()) - lo + 1
    threads = int(thread.max()) + 1
    if threads * span * 2 >= 2**62:
        ranks = np.empty(t.size, dtype=np.int64)
        ranks[np.lexsort((is_start, t, thread))] = np.arange(t.size, dtype=np.int64)
        return ranks
    return (thread.astype(np.int64) * span + (t - lo)) * 2 + is_start


def _open_event(order: np.ndarray, n: int) -> np.ndarray:
    """For each point in thread order (``order``: points of host event ``i`` are ``i`` and ``n + i``),
    the innermost event open just after it (-1 for none), read off the nesting depth: the latest
    start at or before it that brought the thread to its current depth. Exact for nested events."""
    is_start = order < n
    depth = np.cumsum(np.where(is_start, 1, -1))  # each thread's points balance: 0 between threads
    position = np.arange(order.size, dtype=np.int64)
    width = np.int64(order.size + 1)
    starts = position[is_start]
    start_keys = depth[is_start] * width + starts  # sorted by depth, then position
    by_key = np.argsort(start_keys, kind="stable")
    start_keys, starts = start_keys[by_key], starts[by_key]
    found = np.searchsorted(start_keys, depth * width + position, side="right") - 1
    ok = (depth > 0) & (found >= 0)
    ok[ok] &= start_keys[found[ok]] // width == depth[ok]
    out = np.full(order.size, -1, dtype=np.int64)
    out[ok] = order[starts[found[ok]]]
    return out


def _wake_edges(ctx: AnalysisContext, edges: _Edges, chain: tuple[np.ndarray, np.ndarray, np.ndarray],
                thread: np.ndarray, times: np.ndarray, hrows: np.ndarray) -> None:
    """Threads woken by another thread of their rank (inferred: the trace records no dependency
    between threads): see :data:`WAKE_MIN_GAP_NS`."""
    src, dst, owner = chain
    n_h = hrows.size
    # no op or call open: untraced time, or only an annotation (a step range, record_function)
    annotation = ctx.trace.kind_codes()[hrows] == int(Kind.ANNOTATION)
    free = (owner < 0) | annotation[np.maximum(owner, 0)]
    api_rows, _ = launch_links(ctx)
    launching = np.unique(thread[np.isin(hrows, api_rows)])
    point_thread = np.concatenate([thread, thread])
    gap = free & (times[dst] - times[src] >= WAKE_MIN_GAP_NS)
    gap &= np.isin(point_thread[dst], launching)
    # a thread's first point has no predecessor at all: it may have been started by another thread
    has_pred = np.zeros(2 * n_h, dtype=bool)
    has_pred[dst] = True
    first = np.flatnonzero(~has_pred & np.isin(point_thread, launching))
    targets = np.concatenate([dst[gap], first])
    gap_start = np.concatenate([times[src[gap]], times[first] - WAKE_MAX_NS])
    rank = ctx.trace.column("rank")[hrows].astype(np.int64)
    ends = n_h + np.flatnonzero(np.isin(thread, launching))  # end points of the launching threads' events
    if targets.size == 0 or ends.size == 0:
        return
    order = ends[np.lexsort((times[ends], rank[ends - n_h]))]
    target_rank = rank[np.where(targets < n_h, targets, targets - n_h)]

    def other_thread_in_gap(q: np.ndarray, p: np.ndarray) -> np.ndarray:
        return (point_thread[order[p]] != point_thread[targets[q]]) & (times[order[p]] >= gap_start[q])

    found = _latest_before(rank[order - n_h], times[order], target_rank, times[targets], other_thread_in_gap)
    ok = found >= 0
    ok[ok] &= times[targets[ok]] - times[order[found[ok]]] <= WAKE_MAX_NS
    edges.add(order[found[ok]], targets[ok], WAKE, HOST_UNTRACED, np.full(int(ok.sum()), -1, dtype=np.int64))


def _stream_order_edges(edges: _Edges, act: Activity, g_start: np.ndarray, g_end: np.ndarray,
                        rules: dict[str, np.ndarray]) -> np.ndarray:
    """On each (rank, device, stream): the activity that ended last at or before an activity's start
    (of those that started before it) -> that activity. On a serial stream that is the previous one;
    where activities overlap on one stream (the concurrent branches of a graph replay), it is the
    last one it could have waited for. Returns each activity's stream predecessor (-1 for none)."""
    prev = np.full(len(act), -1, dtype=np.int64)
    if len(act) == 0:
        return prev
    key, _ = iv.combine_keys(act.rank, act.device, act.stream)
    by_start = np.lexsort((act.end, act.start, key))
    same = key[by_start[1:]] == key[by_start[:-1]]
    overlapping = same & (act.end[by_start[:-1]] > act.start[by_start[1:]])
    rules["activities overlapping the previous one on their stream"] = act.rank[by_start[1:][overlapping]]
    order = np.lexsort((act.start, act.end, key))

    def started_before(q: np.ndarray, p: np.ndarray) -> np.ndarray:
        j = order[p]
        return (j != q) & ((act.start[j] < act.start[q]) | ((act.start[j] == act.start[q]) & (j < q)))

    found = _latest_before(key[order], act.end[order], key, act.start, started_before)
    has = found >= 0
    b = np.flatnonzero(has)
    a = order[found[has]]
    prev[b] = a
    edges.add(g_end[a], g_start[b], STREAM_ORDER, GPU_WAIT, act.row[b])
    return prev


def _latest_before(keys: np.ndarray, times: np.ndarray, query_keys: np.ndarray, query_times: np.ndarray,
                   accept: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Per query, the position (into data sorted by (keys, times)) of the latest entry of its key with
    time <= the query's that ``accept(query_index, candidate_position)`` allows, looking back a few
    entries; -1 for none."""
    out = np.full(query_keys.size, -1, dtype=np.int64)
    if keys.size == 0 or query_keys.size == 0:
        return out
    pos = iv.searchsorted_by(keys, times, query_keys, query_times, side="right") - 1
    open_q = np.arange(query_keys.size)
    for _ in range(_LOOKBACK):
        p = pos[open_q]
        valid = (p >= 0)
        valid[valid] &= keys[p[valid]] == query_keys[open_q[valid]]
        open_q, p = open_q[valid], p[valid]
        ok = accept(open_q, p)
        out[open_q[ok]] = p[ok]
        open_q = open_q[~ok]
        pos[open_q] = p[~ok] - 1
        if open_q.size == 0:
            break
    return out


def _sync_wait_edges(ctx: AnalysisContext, edges: _Edges, act: Activity, hrows: np.ndarray, hs: np.ndarray,
                     he: np.ndarray, g_end: np.ndarray, n_h: int, rules: dict[str, np.ndarray]) -> None:
    """A synchronising call (or blocking copy) waits for the rank's activity, launched before the
    call started, that ended last before the call ended."""
    trace = ctx.trace
    blocking = (classify.is_sync_call(ctx) | classify.name_matches(ctx, classify.BLOCKING_COPY))[hrows]
    blocking &= trace.kind_codes()[hrows] == int(Kind.RUNTIME)
    calls = np.flatnonzero(blocking)
    if calls.size == 0 or len(act) == 0:
        return
    launched_at = np.where(act.api_row >= 0, act.api_start, act.start)
    order = np.lexsort((act.end, act.rank))
    call_rank = trace.column("rank")[hrows[calls]].astype(np.int64)
    call_stream = _synchronized_stream(ctx, hrows[calls])
    rules["synchronising calls whose stream is recorded"] = call_rank[call_stream >= 0]

    def launched_before(q: np.ndarray, p: np.ndarray) -> np.ndarray:
        j = order[p]
        return (launched_at[j] <= hs[calls[q]]) & ((call_stream[q] < 0) | (act.stream[j] == call_stream[q]))

    found = _latest_before(act.rank[order], act.end[order], call_rank, he[calls], launched_before)
    has = found >= 0
    rules["synchronising calls with no GPU work to wait for"] = call_rank[~has]
    j = order[found[has]]
    edges.add(g_end[j], n_h + calls[has], SYNC_WAIT, SYNC, hrows[calls[has]])


def _synchronized_stream(ctx: AnalysisContext, call_rows: np.ndarray) -> np.ndarray:
    """The stream each synchronising call drained where the trace records it (-1 else): the stream
    of its GPU-side ``Stream Sync`` record (Kineto ``cuda_sync``, Nsight SYNCHRONIZATION), linked to
    the call by correlation. Device, context and event syncs name no one stream."""
    out = np.full(call_rows.size, -1, dtype=np.int64)
    api_rows, gpu_rows = launch_links(ctx)
    trace = ctx.trace
    is_sync = trace.kind_codes()[gpu_rows] == int(Kind.SYNC)
    names = classify.name_matches(ctx, re.compile(r"^Stream Sync", re.IGNORECASE))
    keep = is_sync & names[gpu_rows] & (trace.column("stream")[gpu_rows] >= 0)
    api, gpu = api_rows[keep], gpu_rows[keep]
    if api.size == 0:
        return out
    order = np.argsort(api, kind="stable")
    api, gpu = api[order], gpu[order]
    pos = np.clip(np.searchsorted(api, call_rows), 0, api.size - 1)
    hit = api[pos] == call_rows
    out[hit] = trace.column("stream")[gpu[pos[hit]]]
    return out


def _stream_wait_edges(ctx: AnalysisContext, edges: _Edges, act: Activity, stream_prev: np.ndarray,
                       api_host: np.ndarray, g_start: np.ndarray, g_end: np.ndarray, times: np.ndarray) -> None:
    """cudaStreamWaitEvent / hipStreamWaitEvent, inferred (the events' ids are not in the trace): an
    activity that starts later than its stream and its launch allow, launched after a wait-event call
    that followed its stream predecessor's launch, waits for the activity of another stream of its
    device that ended last before it started."""
    trace = ctx.trace
    waits = np.flatnonzero((trace.kind_codes() == int(Kind.RUNTIME)) & classify.name_matches(ctx, STREAM_WAIT_API))
    if waits.size == 0 or len(act) == 0:
        return
    ready = np.where(api_host >= 0, times[np.where(api_host >= 0, api_host, 0)], np.iinfo(np.int64).min)
    has_prev = stream_prev >= 0
    ready = np.where(has_prev, np.maximum(ready, act.end[np.maximum(stream_prev, 0)]), ready)
    late = (act.start - ready > STREAM_WAIT_MIN_NS) & (ready > np.iinfo(np.int64).min)
    # a wait-event call on the rank after the stream predecessor's launch and before this launch
    wait_rank = trace.column("rank")[waits].astype(np.int64)
    wait_start = trace.column("start_ns")[waits].astype(np.int64)
    w_order = np.lexsort((wait_start, wait_rank))
    wait_rank, wait_start = wait_rank[w_order], wait_start[w_order]
    prev_launch = np.where(has_prev, act.api_start[np.maximum(stream_prev, 0)], np.iinfo(np.int64).min // 2)
    cand = np.flatnonzero(late & (act.api_row >= 0))
    after = iv.searchsorted_by(wait_rank, wait_start, act.rank[cand], prev_launch[cand], side="right")
    upto = iv.searchsorted_by(wait_rank, wait_start, act.rank[cand], act.api_start[cand], side="right")
    cand = cand[upto > after]
    if cand.size == 0:
        return
    gpu, _ = iv.combine_keys(act.rank, act.device)
    order = np.lexsort((act.end, gpu))

    def other_stream(q: np.ndarray, p: np.ndarray) -> np.ndarray:
        return act.stream[order[p]] != act.stream[cand[q]]

    found = _latest_before(gpu[order], act.end[order], gpu[cand], act.start[cand], other_stream)
    ok = found >= 0
    j, src = cand[ok], order[found[ok]]
    useful = act.end[src] > ready[j]  # it explains some of the delay
    j, src = j[useful], src[useful]
    edges.add(g_end[src], g_start[j], STREAM_WAIT, GPU_WAIT, act.row[j])


def _binding_and_lags(times: np.ndarray, src: np.ndarray, dst: np.ndarray, kind: np.ndarray, act: Activity,
                      n_h: int) -> tuple[np.ndarray, np.ndarray]:
    """Each point's binding edge (latest source, ties by :data:`TIE_PRIORITY`), and every edge's lag:
    measured on binding edges; elsewhere nominal (launch: the rank's median measured launch latency;
    stream order: the stream's median measured turnaround; others 0), capped at the measured."""
    binding = np.full(times.size, -1, dtype=np.int64)
    measured = times[dst] - times[src]
    if src.size == 0:
        return binding, measured
    # one key per edge: its source time (relative: no overflow) then its tie priority; the largest
    # key per destination binds (of equal keys the last edge, as a stable sort would pick)
    key = (times[src] - times.min()) * 8 + TIE_PRIORITY[kind]
    best = np.full(times.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(best, dst, key)
    candidates = np.flatnonzero(key == best[dst])
    binding[dst[candidates]] = candidates  # ascending: the last of equal keys is written last
    is_binding = np.zeros(src.size, dtype=bool)
    is_binding[binding[binding >= 0]] = True
    nominal = np.zeros(src.size, dtype=np.int64)
    stream_key, _ = iv.combine_keys(act.rank, act.device, act.stream)
    for edge_kind, group_of in ((LAUNCH, act.rank), (STREAM_ORDER, stream_key)):
        sel = np.flatnonzero(kind == edge_kind)
        if sel.size == 0:
            continue
        j = dst[sel] - 2 * n_h  # the activity whose start the edge ends at
        groups = group_of[j]
        frame = pd.DataFrame({"g": groups, "lag": measured[sel], "b": is_binding[sel]})
        medians = frame[frame["b"]].groupby("g")["lag"].median()
        typical = frame["g"].map(medians).fillna(0).to_numpy(np.float64)
        nominal[sel] = np.minimum(measured[sel], np.round(typical).astype(np.int64))
    return binding, np.where(is_binding, measured, np.maximum(nominal, 0))


register_input("dependency_graph", build_dependency_graph,
               requires=("activity", "links.launch", "classify.codes.name", "classify.comm_rule_of", "cpu_op_nesting"))

__all__ = ["CATEGORIES", "EDGE_KINDS", "DependencyGraph", "dependency_graph"]
