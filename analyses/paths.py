"""Longest paths over a dependency graph given by its incoming edges (a helper module, no analysis).

The graph of the critical-path analysis (:mod:`traceview.analyses.dependency_graph`) has a few
points per event, so every pass here is linear and runs in C (``_graph_paths.c``, built at install
when a C compiler is present); without the extension the same functions run in Python (the same
results, slower: a compiler-less install is for small traces). ``tests/unit/test_critical_path.py``
checks that both agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

try:
    from traceview.analyses._graph_paths import relax as native_relax
    from traceview.analyses._graph_paths import topological_order as native_topological_order
    from traceview.analyses._graph_paths import walk as native_walk
    NATIVE = True
except ImportError:  # pragma: no cover - no compiler at install
    NATIVE = False

__all__ = ["IncomingEdges", "relaxed_times", "walk_back"]


@dataclass(frozen=True)
class IncomingEdges:
    """Edges grouped by destination: node ``v``'s are ``src[offsets[v]:offsets[v + 1]]`` (their
    positions in the caller's edge arrays are ``edge[...]``), with a topological ``order`` of the
    nodes and how many nodes sat on cycles (placed last; bad timestamps can make them)."""

    offsets: np.ndarray
    src: np.ndarray
    edge: np.ndarray
    order: np.ndarray
    cyclic: int

    @classmethod
    def of(cls, nodes: int, src: np.ndarray, dst: np.ndarray, use_native: bool = True) -> "IncomingEdges":
        # int32 positions where every edge's fits: read only to take the callers' per-edge arrays
        by_dst = np.argsort(dst, kind="stable").astype(np.int32 if src.size < 2**31 else np.int64)
        offsets = np.zeros(nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=nodes), out=offsets[1:])
        src_sorted = np.ascontiguousarray(src[by_dst], dtype=np.int64)
        order = np.zeros(nodes, dtype=np.int64)
        if NATIVE and use_native:
            cyclic = int(native_topological_order(offsets, src_sorted, order))
        else:
            cyclic = _topological_order(offsets, src_sorted, order)
        return cls(offsets, src_sorted, by_dst, order, cyclic)


def relaxed_times(edges: IncomingEdges, lag: np.ndarray, anchors: np.ndarray, use_native: bool = True) -> np.ndarray:
    """Each node's time = max over its incoming edges of (source time + lag), in topological order;
    a node without incoming edges keeps its ``anchors`` time. ``lag`` is per edge (caller's order)."""
    times = np.array(anchors, dtype=np.int64)  # a copy: written in place
    lag_sorted = np.ascontiguousarray(lag[edges.edge], dtype=np.int64)
    if NATIVE and use_native:
        native_relax(edges.order, edges.offsets, edges.src, lag_sorted, times)
    else:
        off, src = edges.offsets, edges.src
        for v in edges.order.tolist():
            a, b = int(off[v]), int(off[v + 1])
            if b > a:
                times[v] = int((times[src[a:b]] + lag_sorted[a:b]).max())
    return times


def walk_back(binding: np.ndarray, times: np.ndarray, ends: np.ndarray, starts: np.ndarray,
              use_native: bool = True) -> list[np.ndarray]:
    """For each window: the nodes from ``ends[w]`` back along ``binding`` (each node's binding
    predecessor, -1 at a root) while their time is after ``starts[w]``, then the first node at or
    before it (-1 when the chain ended at a root first)."""
    binding = np.ascontiguousarray(binding, dtype=np.int64)
    times = np.ascontiguousarray(times, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    if NATIVE and use_native:
        capacity = 2 * (binding.size + 2 * ends.size)
        while True:
            out = np.empty(capacity, dtype=np.int64)
            written = int(native_walk(binding, times, ends, starts, out))
            if written >= 0:
                break
            capacity *= 2
        flat = out[:written]
        cuts = np.flatnonzero(flat == -2)
        return [part[:-1] for part in np.split(flat, cuts + 1)[:-1]]
    runs = []
    for end, start in zip(ends.tolist(), starts.tolist()):
        run, v, steps = [], end, 0
        while v >= 0 and times[v] > start and steps <= binding.size:
            run.append(v)
            v = int(binding[v])
            steps += 1
        run.append(v)
        runs.append(np.asarray(run, dtype=np.int64))
    return runs


def _topological_order(offsets: np.ndarray, src: np.ndarray, order: np.ndarray) -> int:
    """Kahn's algorithm in Python (the extension's ``topological_order``)."""
    n = offsets.size - 1
    indegree = np.diff(offsets).astype(np.int64)
    dst = np.repeat(np.arange(n, dtype=np.int64), indegree)
    by_src = np.argsort(src, kind="stable")
    succ = dst[by_src]
    succ_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=succ_off[1:])
    queue = list(np.flatnonzero(indegree == 0).tolist())
    head = 0
    while head < len(queue):
        u = queue[head]
        head += 1
        for v in succ[succ_off[u]:succ_off[u + 1]].tolist():
            indegree[v] -= 1
            if indegree[v] == 0:
                queue.append(v)
    placed = np.zeros(n, dtype=bool)
    placed[queue] = True
    rest = np.flatnonzero(~placed)
    order[:] = np.concatenate([np.asarray(queue, dtype=np.int64), rest])
    return int(rest.size)
