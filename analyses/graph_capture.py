"""Graph captures: the ops and ranges of a CUDA/HIP graph's nodes, read from a trace of its capture
and given to the kernels a replay trace shows under one graph launch (docs/metrics.md, "Modules and
ranges", graph replays).

A replayed kernel's trace has its launch call (``cudaGraphLaunch``/``hipGraphLaunch``) and nothing
of the op, module or shapes that made it. A trace of the capture (``--graph-capture capture.json``,
``Options.graph_capture``) has them: between ``*StreamBeginCapture`` and ``*StreamEndCapture`` on a
thread, each launch call records a node of the graph, under the op and the ranges that issued it.

- **Templates**: per capture window, its node calls in order, each with the kernel it names (the
  call's ``kernel`` arg, ROCm; ``memcpy``/``memset`` for copy and set calls), its op and the ranges
  open on the thread that started inside the window (the path *within* the graph).
- **Matching** (rule ``capture``): a replay's activity, in start order, is matched to the nodes of
  the capture whose (kernel name, occurrence of that name) pairs it shares most: the k-th run of a
  kernel name in the replay is the k-th node of that name in the capture, so nodes reordered across
  streams still match and a node missing on one side leaves the others matched. Captures whose calls
  name no kernel (CUDA) are matched by position only when the replay has exactly as many activities
  as the capture has nodes and runs on one stream (rule ``capture_order``). Nothing else is guessed:
  what matches no node is counted in the ``graph_capture`` table and keeps the launch's range (rule
  ``graph_replay``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from traceview import intervals as iv
from traceview.context import AnalysisContext
from traceview.errors import TraceviewError
from traceview.model import Kind

from . import classify

BEGIN_CAPTURE = re.compile(r"^(?:cuda|hip)StreamBeginCapture", re.IGNORECASE)
END_CAPTURE = re.compile(r"^(?:cuda|hip)StreamEndCapture", re.IGNORECASE)
#: calls that add a node to the graph being captured: kernel launches, async copies and sets
NODE_CALL = re.compile(r"^(?:cuda|cu|hip)\w*?(?:Launch\w*?Kernel|Memcpy\w*?Async|Memset\w*?Async|MemsetD)",
                       re.IGNORECASE)
COPY_CALL = re.compile(r"Memcpy", re.IGNORECASE)
SET_CALL = re.compile(r"Memset", re.IGNORECASE)
MEMCPY_NODE, MEMSET_NODE = "[memcpy]", "[memset]"
#: the rules of a match: by kernel name and occurrence, by position
MATCH_RULES = ("capture", "capture_order")


@dataclass(frozen=True)
class Templates:
    """The nodes of every captured graph (``graph``: its capture window, ``order``: position in it),
    each with the kernel it names (None: unnamed), its op and its innermost range within the graph
    (index into the ``range_*`` arrays, -1: none); the ranges' parents are within the graph too."""

    graph: np.ndarray
    order: np.ndarray
    kernel: np.ndarray
    op: np.ndarray
    node_range: np.ndarray
    range_name: np.ndarray
    range_kind: np.ndarray
    range_domain: np.ndarray
    range_parent: np.ndarray
    graph_source: tuple[str, ...]
    graph_nodes: np.ndarray

    @property
    def graphs(self) -> int:
        return len(self.graph_source)


def capture_windows(ctx: AnalysisContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(thread key rows, begin start, end end) of each capture window: a begin call paired with the
    first end call after it on its thread."""
    trace = ctx.trace
    runtime = trace.kind_codes() == int(Kind.RUNTIME)
    begins = np.flatnonzero(runtime & classify.name_matches(ctx, BEGIN_CAPTURE))
    ends = np.flatnonzero(runtime & classify.name_matches(ctx, END_CAPTURE))
    empty = np.zeros(0, dtype=np.int64)
    if begins.size == 0 or ends.size == 0:
        return empty, empty, empty, empty
    start = trace.column("start_ns").astype(np.int64)
    stop = start + np.maximum(trace.column("dur_ns"), 0)
    key = iv.combine_keys(*(trace.column(c)[np.concatenate([begins, ends])].astype(np.int64)
                            for c in ("rank", "pid", "tid")))[0]
    b_key, e_key = key[:begins.size], key[begins.size:]
    # the first end at or after each begin on its thread: one sorted search per thread block
    order = np.lexsort((start[ends], e_key))
    e_key, e_rows = e_key[order], ends[order]
    found = iv.searchsorted_by(e_key, start[e_rows], b_key, start[begins], side="left")
    ok = (found < e_rows.size) & (e_key[np.minimum(found, e_rows.size - 1)] == b_key)
    return begins[ok], start[begins[ok]], stop[e_rows[found[ok]]], b_key[ok]


def read_templates(ctx: AnalysisContext, tree_of: Any) -> Templates:
    """The templates of ``Options.graph_capture``'s files (``tree_of(ctx)``: a context's range tree,
    the modules analysis's ``build_tree``, passed in so that this module does not import it)."""
    from traceview.loading import load

    parts = []
    for path in ctx.options.graph_capture:
        if not Path(path).exists():
            raise TraceviewError(f"{path}: the graph capture trace given with --graph-capture does not exist")
        trace = load(path, jobs=1)
        options = dataclasses.replace(ctx.options, graph_capture=(), ranks=None)
        parts.append(templates_of(AnalysisContext(trace, options), tree_of, path))
    return concat_templates(parts)


def templates_of(ctx: AnalysisContext, tree_of: Any, source: str) -> Templates:
    """The captured graphs of one capture trace."""
    trace = ctx.trace
    begin_rows, w_start, w_end, _ = capture_windows(ctx)
    thread_cols = [trace.column(c).astype(np.int64) for c in ("rank", "pid", "tid")]
    w_thread, w_threads = iv.combine_keys(*(c[begin_rows] for c in thread_cols))
    runtime = trace.kind_codes() == int(Kind.RUNTIME)
    calls = np.flatnonzero(runtime & classify.name_matches(ctx, NODE_CALL))
    windows = iv.NestedIndex(w_thread, w_start, w_end)
    call_start = trace.column("start_ns")[calls].astype(np.int64)
    window = windows.covering(iv.codes_among(tuple(w_threads), tuple(c[calls] for c in thread_cols)),
                              call_start, call_start + 1) if begin_rows.size else np.full(calls.size, -1)
    calls, window, call_start = calls[window >= 0], window[window >= 0], call_start[window >= 0]
    order = np.lexsort((call_start, window))
    calls, window = calls[order], window[order]
    position = np.arange(calls.size) - np.searchsorted(window, window, side="left")
    tree = tree_of(ctx)
    node_range, inner, position_of = inner_ranges(trace, tree, windows, w_threads, thread_cols, calls)
    up = tree.parent[inner]
    parent = np.where(up >= 0, position_of[np.maximum(up, 0)], -1) if inner.size else up
    return Templates(graph=window, order=position, kernel=node_kernels(ctx, calls), op=node_ops(ctx, calls),
                     node_range=node_range, range_name=tree.name[inner], range_kind=tree.kind[inner],
                     range_domain=tree.domain[inner], range_parent=parent,
                     graph_source=(source,) * begin_rows.size,
                     graph_nodes=np.bincount(window, minlength=begin_rows.size).astype(np.int64))


def inner_ranges(trace: Any, tree: Any, windows: iv.NestedIndex, w_threads: list[np.ndarray],
                 thread_cols: list[np.ndarray], calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(each call's innermost range that opened inside its capture window, as a position among the
    ranges inside a window; the tree rows of those ranges; each tree range's position, -1 outside)."""
    position_of = np.full(len(tree), -1, dtype=np.int64)
    if len(tree) == 0 or calls.size == 0:
        return np.full(calls.size, -1, dtype=np.int64), np.zeros(0, dtype=np.int64), position_of
    r_thread = iv.codes_among(tuple(w_threads), (tree.rank, *(c[tree.row] for c in thread_cols[1:])))
    r_window = windows.covering(r_thread, tree.start, np.maximum(tree.end, tree.start + 1))
    # host ranges only: a device's ranges are not the capturing thread's
    inner = np.flatnonzero((r_thread >= 0) & (r_window >= 0) & tree.on_host())
    position_of[inner] = np.arange(inner.size)
    index = iv.NestedIndex(tree.thread, tree.start, tree.end, tree.depth)
    c_thread = iv.codes_among(tree.threads, tuple(c[calls] for c in thread_cols))
    c_start = trace.column("start_ns")[calls].astype(np.int64)
    innermost = np.where(c_thread >= 0, index.covering(c_thread, c_start, c_start + 1), -1)
    return np.where(innermost >= 0, position_of[np.maximum(innermost, 0)], -1), inner, position_of


def node_kernels(ctx: AnalysisContext, calls: np.ndarray) -> np.ndarray:
    """The kernel each node call names (object array; None where the call names none)."""
    out = np.full(calls.size, None, dtype=object)
    if calls.size == 0:
        return out
    out[classify.name_matches(ctx, COPY_CALL)[calls]] = MEMCPY_NODE
    out[classify.name_matches(ctx, SET_CALL)[calls]] = MEMSET_NODE
    if "launch_kernel" in ctx.trace.events.column_names:
        codes, values = classify.dictionary_codes_at(ctx, "launch_kernel", calls)
        kernel = np.asarray(list(values) + [None], dtype=object)[codes]
        out = np.where(kernel != None, kernel, out)  # noqa: E711 (element-wise)
    return out


def node_ops(ctx: AnalysisContext, calls: np.ndarray) -> np.ndarray:
    """The op that issued each node call (its ``cpu_op`` link), None where none did."""
    out = np.full(calls.size, None, dtype=object)
    op_rows, runtime_rows = ctx.trace.cpu_op_links()
    if calls.size == 0 or runtime_rows.size == 0:
        return out
    order = np.argsort(runtime_rows, kind="stable")
    at = np.searchsorted(runtime_rows[order], calls)
    ok = (at < order.size) & (runtime_rows[order][np.minimum(at, order.size - 1)] == calls)
    codes, names = classify.dictionary_codes(ctx)
    labels = np.asarray(list(names) + [None], dtype=object)
    out[ok] = labels[codes[op_rows[order][at[ok]]]]
    return out


def concat_templates(parts: list[Templates]) -> Templates:
    """One set of templates from several capture traces (graphs and ranges renumbered)."""
    if not parts:
        empty, none = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object)
        return Templates(empty, empty, none, none, empty, none, np.zeros(0, dtype=np.int8), none, empty, (), empty)
    graph_base = np.cumsum([0] + [p.graphs for p in parts])[:-1]
    range_base = np.cumsum([0] + [p.range_name.size for p in parts])[:-1]
    return Templates(
        graph=np.concatenate([p.graph + g for p, g in zip(parts, graph_base)]),
        order=np.concatenate([p.order for p in parts]),
        kernel=np.concatenate([p.kernel for p in parts]), op=np.concatenate([p.op for p in parts]),
        node_range=np.concatenate([np.where(p.node_range >= 0, p.node_range + r, -1)
                                   for p, r in zip(parts, range_base)]),
        range_name=np.concatenate([p.range_name for p in parts]),
        range_kind=np.concatenate([p.range_kind for p in parts]),
        range_domain=np.concatenate([p.range_domain for p in parts]),
        range_parent=np.concatenate([np.where(p.range_parent >= 0, p.range_parent + r, -1)
                                     for p, r in zip(parts, range_base)]),
        graph_source=sum((p.graph_source for p in parts), ()),
        graph_nodes=np.concatenate([p.graph_nodes for p in parts]))


# ------------------------------------------------------------------------------------ matching


@dataclass(frozen=True)
class Match:
    """Per graph-replayed activity (``acts``: entries of the ``activity`` input): the template node
    it was matched to (-1: none), the graph chosen for its replay (-1: none) and the rule
    (``capture``, ``capture_order`` or None)."""

    acts: np.ndarray
    node: np.ndarray
    graph: np.ndarray
    rule: np.ndarray


def recorded_node_ids(ctx: AnalysisContext, act: Any, acts: np.ndarray) -> np.ndarray:
    """Each activity's recorded graph node id (-1: none)."""
    if "graph_node_id" not in ctx.trace.events.column_names:
        return np.full(acts.size, -1, dtype=np.int64)
    column = ctx.trace.events.column("graph_node_id")
    if column.null_count == len(column):
        return np.full(acts.size, -1, dtype=np.int64)
    return column.take(act.row[acts]).fill_null(-1).to_numpy().astype(np.int64)


def node_table(ctx: AnalysisContext, act: Any, graph_replayed: np.ndarray) -> pd.DataFrame:
    """Per rank, graph id and node id the trace records (newer Kineto, Nsight with
    ``--cuda-graph-trace=node``): the node's kernel, how many replays ran it, its total and mean
    GPU time (a node followed across replays)."""
    columns = ["rank", "graph_id", "graph_node_id", "name", "replays", "gpu_ns", "mean_ns"]
    acts = np.flatnonzero(graph_replayed)
    node_id = recorded_node_ids(ctx, act, acts)
    acts, node_id = acts[node_id >= 0], node_id[node_id >= 0]
    if acts.size == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "name" else "int64") for c in columns})
    graph_id = ctx.trace.events.column("graph_id").take(act.row[acts]).fill_null(-1).to_numpy().astype(np.int64)
    frame = pd.DataFrame({"rank": act.rank[acts].astype(np.int64), "graph_id": graph_id, "graph_node_id": node_id,
                          "name": pd.Categorical(activity_labels(ctx, act, acts)),
                          "dur": (act.end - act.start)[acts].astype(np.int64)})
    out = (frame.groupby(["rank", "graph_id", "graph_node_id"], sort=True, observed=True)
           .agg(name=("name", "first"), replays=("dur", "size"), gpu_ns=("dur", "sum")).reset_index())
    out["mean_ns"] = (out["gpu_ns"] / out["replays"]).round().astype(np.int64)
    out["name"] = out["name"].astype(object)
    return out.sort_values(["rank", "gpu_ns"], ascending=[True, False], kind="stable").reset_index(drop=True)[columns]


def activity_labels(ctx: AnalysisContext, act: Any, acts: np.ndarray) -> np.ndarray:
    """What a replayed activity is matched on: its kernel name, or the memcpy/memset token."""
    codes, names = classify.dictionary_codes(ctx)
    labels = np.asarray(list(names) + [None], dtype=object)[codes[act.row[acts]]]
    kind = act.kind[acts]
    labels[kind == int(Kind.MEMCPY)] = MEMCPY_NODE
    labels[kind == int(Kind.MEMSET)] = MEMSET_NODE
    return labels


def match_replays(ctx: AnalysisContext, act: Any, graph_replayed: np.ndarray, templates: Templates) -> Match:
    """Each graph-replayed activity matched to a node of the best-matching captured graph."""
    acts = np.flatnonzero(graph_replayed)
    none = np.full(acts.size, -1, dtype=np.int64)
    if acts.size == 0 or templates.graph.size == 0:
        return Match(acts, none, none.copy(), np.full(acts.size, None, dtype=object))
    node_id = recorded_node_ids(ctx, act, acts)
    # in node id order where the trace records ids (the same order in every replay, whatever the
    # streams' timing), else in start order
    order = np.lexsort((act.start[acts], node_id, act.api_row[acts]))
    acts, node_id = acts[order], node_id[order]
    launch = act.api_row[acts]
    replay = pd.DataFrame({"launch": launch, "label": activity_labels(ctx, act, acts), "i": np.arange(acts.size),
                           "stream": act.stream[acts], "node_id": node_id})
    replay["occurrence"] = replay.groupby(["launch", "label"], sort=False, dropna=False).cumcount()
    replay["position"] = replay.groupby("launch", sort=False).cumcount()
    named = templates.kernel != None  # noqa: E711 (element-wise)
    nodes = pd.DataFrame({"graph": templates.graph, "label": templates.kernel, "node": np.arange(templates.graph.size)})
    nodes = nodes[named]
    nodes["occurrence"] = nodes.groupby(["graph", "label"], sort=False).cumcount()
    pairs = replay.merge(nodes, on=["label", "occurrence"], how="inner")
    node, graph, rule = none.copy(), none.copy(), np.full(acts.size, None, dtype=object)
    if not pairs.empty:
        score = pairs.groupby(["launch", "graph"], sort=False).size().rename("score").reset_index()
        best = score.sort_values(["launch", "score", "graph"], ascending=[True, False, True]).drop_duplicates("launch")
        chosen = pairs.merge(best[["launch", "graph"]], on=["launch", "graph"], how="inner")
        node[chosen["i"].to_numpy()] = chosen["node"].to_numpy()
        rule[chosen["i"].to_numpy()] = "capture"
        # each activity's launch looked up among the launches' chosen graphs (sorted by launch)
        best_launch, best_graph = best["launch"].to_numpy(), best["graph"].to_numpy()
        at = np.minimum(np.searchsorted(best_launch, launch), max(best_launch.size - 1, 0))
        graph[:] = np.where(best_launch[at] == launch, best_graph[at], -1)
    _match_by_position(replay, templates, named, node, graph, rule)
    back = np.empty_like(order)
    back[order] = np.arange(order.size)
    return Match(acts[back], node[back], graph[back], rule[back])


def _match_by_position(replay: pd.DataFrame, templates: Templates, named: np.ndarray, node: np.ndarray,
                       graph: np.ndarray, rule: np.ndarray) -> None:
    """Replays no named node matched, given the unnamed graph with exactly as many nodes (the
    first such), node by node in order: only replays on one stream, whose start order is the
    capture's order (concurrent streams interleave nodes in any order), or whose every activity has
    a recorded node id (node ids number a graph's nodes as they are added)."""
    unnamed_graphs = np.setdiff1d(np.unique(templates.graph[~named]), np.unique(templates.graph[named]))
    if unnamed_graphs.size == 0:
        return
    by_launch = replay.groupby("launch", sort=False)
    open_launch = by_launch["i"].transform("size")
    one_stream = (by_launch["stream"].transform("nunique").to_numpy() == 1) | \
        (by_launch["node_id"].transform("min").to_numpy() >= 0)
    matched = pd.Series(graph >= 0).groupby(replay["launch"].to_numpy()).transform("any").to_numpy() | ~one_stream
    size_to_graph: dict[int, int] = {}
    for g in unnamed_graphs.tolist():  # one per captured graph: a handful
        size_to_graph.setdefault(int(templates.graph_nodes[g]), g)
    candidate = open_launch.map(size_to_graph)
    ok = (~matched) & candidate.notna().to_numpy()
    if not ok.any():
        return
    g = candidate.to_numpy()[ok].astype(np.int64)
    first_node = np.searchsorted(templates.graph, g, side="left")
    i = replay["i"].to_numpy()[ok]
    node[i] = first_node + replay["position"].to_numpy()[ok]
    graph[i] = g
    rule[i] = "capture_order"


# ------------------------------------------------------------------------------------ tables

#: why a replayed activity got no node, by the matching's outcome
UNMATCHED_IN_GRAPH = "not matched: no node of its kernel at that occurrence in the chosen capture"
NO_GRAPH = "not matched: no captured graph shares a kernel with its replay"
NO_CAPTURE = "not matched: no capture given (--graph-capture)"


def match_table(act: Any, match: Match, captured: bool) -> pd.DataFrame:
    """Per rank and outcome (``capture``, ``capture_order``, the two reasons for none): the
    replayed activities, the union of their GPU time and its share of the rank's replayed time."""
    columns = ["rank", "rule", "launches", "activities", "gpu_ns", "replayed_ns", "share"]
    if match.acts.size == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "rule" else "int64") for c in columns})
    outcome = np.where(match.rule != None, match.rule,  # noqa: E711 (element-wise)
                       np.where(match.graph >= 0, UNMATCHED_IN_GRAPH, NO_GRAPH if captured else NO_CAPTURE)
                       ).astype(object)
    acts = match.acts
    codes, labels = pd.factorize(outcome)
    key, (rank, code) = iv.combine_keys(act.rank[acts].astype(np.int64), codes.astype(np.int64))
    gpu = np.zeros(rank.size, dtype=np.int64)
    k, total = iv.total_by(key, act.start[acts], act.end[acts])
    gpu[k] = total
    r_keys, replayed = iv.total_by(act.rank[acts].astype(np.int64), act.start[acts], act.end[acts])
    replayed_of = dict(zip(r_keys.tolist(), replayed.tolist()))
    launches = pd.Series(act.api_row[acts]).groupby(key).nunique().reindex(range(rank.size), fill_value=0)
    frame = pd.DataFrame({"rank": rank, "rule": np.asarray(labels, dtype=object)[code], "launches": launches.to_numpy(),
                          "activities": np.bincount(key, minlength=rank.size), "gpu_ns": gpu})
    frame["replayed_ns"] = frame["rank"].map(replayed_of).fillna(0).astype(np.int64)
    frame["share"] = frame["gpu_ns"] / frame["replayed_ns"].clip(lower=1)
    return frame.sort_values(["rank", "gpu_ns"], ascending=[True, False], kind="stable").reset_index(drop=True)[columns]


def op_table(act: Any, match: Match, templates: Templates) -> pd.DataFrame:
    """Per rank and captured op: the replayed activities matched to its nodes and their GPU time
    (the ops a replay's time goes to, which the replay trace alone does not name)."""
    columns = ["rank", "op", "activities", "gpu_ns", "share"]
    matched = match.node >= 0
    ops = templates.op[match.node[matched]]
    known = ops != None  # noqa: E711 (element-wise)
    acts = match.acts[matched][known]
    if acts.size == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "op" else "int64") for c in columns})
    codes, labels = pd.factorize(ops[known])
    key, (rank, code) = iv.combine_keys(act.rank[acts].astype(np.int64), codes.astype(np.int64))
    k, total = iv.total_by(key, act.start[acts], act.end[acts])
    gpu = np.zeros(rank.size, dtype=np.int64)
    gpu[k] = total
    r_keys, replayed = iv.total_by(act.rank[match.acts].astype(np.int64), act.start[match.acts], act.end[match.acts])
    frame = pd.DataFrame({"rank": rank, "op": np.asarray(labels, dtype=object)[code],
                          "activities": np.bincount(key, minlength=rank.size), "gpu_ns": gpu})
    frame["share"] = frame["gpu_ns"] / frame["rank"].map(dict(zip(r_keys.tolist(), replayed.tolist()))).clip(lower=1)
    return frame.sort_values(["rank", "gpu_ns"], ascending=[True, False], kind="stable").reset_index(drop=True)[columns]
