"""Modules and ranges: where the GPU time goes in the model's terms (docs/metrics.md, "Modules and ranges").

Ranges, per rank: ``nn.Module: X`` python-function events (``with_modules``/``with_stack`` traces),
CPU-side user annotations (``record_function``) and Nsight NVTX ranges (with their domain); step
ranges are not ranges. On each thread they nest into a tree: ``path`` joins the names from the
root (``Qwen2Model_0/Qwen2DecoderLayer_11/Qwen2Attention_0``), ``type_path`` drops each name's
trailing index (``Qwen2Model/Qwen2DecoderLayer/Qwen2Attention``: every layer's attention at once).

Each GPU activity is attributed through its launch call to the innermost range open on the
launching thread at the call's start (rule ``range``); a backward kernel, launched on autograd's
thread, to the innermost range open at its forward op's start (through the ``fwdbwd`` flow; rule
``backward``); a kernel replayed from a graph launched under a range, to that range (rule
``graph_replay``: not attributed to the ops inside the graph); else to none. A range's inclusive GPU
time is the union of the activity attributed to it or below it, its exclusive time that of its own.
Column operations over all ranks: one nesting sort, one stab of the ranges per activity, one union
per (range, level) pair set; paths are built per distinct (parent path, name), not per range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from traceview import intervals as iv
from traceview.claims import gpu_key
from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult
from traceview.model import Kind
from traceview.registry import AnalysisSpec, TableSpec, register_input
from traceview.report_inputs import ReportInputs

from . import classify, graph_capture
from .steps import activity, analysed_ranks, flow_links, step_column

NAME = "modules"
MODULE = re.compile(r"^nn\.Module: ")
STEP_RANGE = re.compile(r"^ProfilerStep#\d+$")
INDEX_SUFFIX = re.compile(r"_\d+$")
KINDS = ("module", "annotation", "nvtx", "device")
MODULE_KIND, ANNOTATION_KIND, NVTX_KIND, DEVICE_KIND = range(len(KINDS))
RULES = ("range", "backward", "graph_replay", "capture", "device", "none")
RANGE, BACKWARD, GRAPH_REPLAY, CAPTURE, DEVICE, NONE = range(len(RULES))
#: the thread key of a device's ranges (GPU annotations, XLA modules and ops), nested per rank and
#: device: a tid no host thread has (traces give non-numeric ids small negative numbers)
DEVICE_LANE = -(2**62)
#: device-side step ranges are steps, not ranges (XSpace's ``Steps`` line)
DEVICE_STEP_CATEGORIES = frozenset({"xla_step"})
#: the summary's layers: the deepest type paths holding at least this share of the GPU busy time
TOP_LAYER_SHARE = 0.10
TOP_LAYERS = 5


@dataclass(frozen=True)
class RangeTree:
    """The ranges of the context's ranks, sorted by rank then start: event ``row``, ``rank``,
    ``thread`` (code of (rank, pid, tid)), ``tid``, ``start``/``end``, ``kind`` (into KINDS),
    ``domain``, ``name``, ``parent`` (index, -1 at the top), ``depth``, and the path and type path as
    codes into ``paths`` / ``type_paths``."""

    row: np.ndarray
    rank: np.ndarray
    thread: np.ndarray
    tid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    domain: np.ndarray
    name: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    path: np.ndarray
    type_path: np.ndarray
    paths: np.ndarray
    type_paths: np.ndarray
    threads: tuple[np.ndarray, np.ndarray, np.ndarray]
    #: False for the ranges a graph capture gave (``row`` -1, ``thread`` -1): never stabbed by events
    recorded: np.ndarray
    #: graph-replayed activity (entries of the ``activity`` input) matched to a captured node, and
    #: the capture range (index here) each inherits (analyses/graph_capture.py)
    replay_acts: np.ndarray
    replay_range: np.ndarray

    def __len__(self) -> int:
        return int(self.row.size)

    def on_host(self) -> np.ndarray:
        """Whether each range is a host thread's (not a device's)."""
        return self.kind != DEVICE_KIND

    def index(self) -> tuple[iv.NestedIndex, np.ndarray]:
        """The nesting index over the recorded ranges, and their positions here."""
        rows = np.flatnonzero(self.recorded)
        return iv.NestedIndex(self.thread[rows], self.start[rows], self.end[rows], self.depth[rows]), rows


def build_tree(ctx: AnalysisContext) -> RangeTree:
    """The derived input ``modules.ranges``: the recorded ranges, and those a graph capture gives
    the kernels of graph replays (``Options.graph_capture``)."""
    tree = recorded_tree(ctx)
    if not ctx.options.graph_capture:
        return tree
    return with_captured_ranges(ctx, tree, ctx.input("modules.capture_match"))


def recorded_tree(ctx: AnalysisContext) -> RangeTree:
    """The ranges the trace records."""
    trace = ctx.trace
    kinds = trace.kind_codes()
    module = (kinds == int(Kind.PYTHON_FUNCTION)) & classify.name_matches(ctx, MODULE)
    not_step = ~classify.name_matches(ctx, STEP_RANGE)
    annotation = (kinds == int(Kind.ANNOTATION)) & not_step
    device = (kinds == int(Kind.GPU_ANNOTATION)) & not_step
    rank_all = trace.column("rank").astype(np.int64)
    rows = np.flatnonzero((module | annotation | device) & np.isin(rank_all, analysed_ranks(ctx)))
    category_codes, categories = classify.dictionary_codes_at(ctx, "category", rows)
    # per distinct category, not per range (10 M NVTX ranges share a few)
    labels = [c or "" for c in categories] + [""]
    steps = np.asarray([c in DEVICE_STEP_CATEGORIES for c in labels], dtype=bool)[category_codes]
    rows, category_codes = rows[~(steps & device[rows])], category_codes[~(steps & device[rows])]
    start = trace.column("start_ns")[rows].astype(np.int64)
    order = np.lexsort((start, rank_all[rows]))
    rows, start, category_codes = rows[order], start[order], category_codes[order]
    end = start + np.maximum(trace.column("dur_ns")[rows], 0)
    rank = rank_all[rows]
    on_device = device[rows]
    # a device's ranges nest together whatever their stream (an annotation spans several)
    pid = np.where(on_device, trace.column("device")[rows], trace.column("pid")[rows])
    thread, threads = iv.combine_keys(rank, pid, np.where(on_device, DEVICE_LANE, trace.column("tid")[rows]))
    nvtx = np.asarray([c.startswith("nvtx") for c in labels], dtype=bool)[category_codes]
    kind = np.select([module[rows], on_device, nvtx], [MODULE_KIND, DEVICE_KIND, NVTX_KIND],
                     ANNOTATION_KIND).astype(np.int8)
    domain = np.asarray([c.partition(":")[2] if c.startswith("nvtx") else "" for c in labels],
                        dtype=object)[category_codes]
    name_codes, dictionary = classify.dictionary_codes(ctx)
    names = np.asarray([MODULE.sub("", n or "") for n in dictionary] + [""], dtype=object)
    name_code = name_codes[rows]
    parent = iv.nesting_parents(thread, start, end)
    depth = _depths(parent)
    path, paths = _paths(parent, depth, name_code, names, strip=False)
    type_path, type_paths = _paths(parent, depth, name_code, names, strip=True)
    none = np.zeros(0, dtype=np.int64)
    return RangeTree(row=rows, rank=rank, thread=thread, tid=trace.column("tid")[rows].astype(np.int64),
                     start=start, end=end, kind=kind, domain=domain, name=names[name_code], parent=parent,
                     depth=depth, path=path, type_path=type_path, paths=paths, type_paths=type_paths,
                     threads=(threads[0], threads[1], threads[2]), recorded=np.ones(rows.size, dtype=bool),
                     replay_acts=none, replay_range=none)


def with_captured_ranges(ctx: AnalysisContext, tree: RangeTree, match: Any) -> RangeTree:
    """``tree`` plus, under the recorded range open at each graph launch (or at the top), the
    capture's ranges that its matched nodes ran under: one range per (launch range, capture range).
    Every matched activity is given its capture range, or the launch's range when its node ran under
    none inside the graph."""
    templates = ctx.input("modules.graph_capture")
    act = activity(ctx)
    matched = match.node >= 0
    acts, node = match.acts[matched], match.node[matched]
    c_range = templates.node_range[node]
    launch_range = _stab(ctx.trace, tree, tree.index(), act.api_row[acts], act.api_start[acts])
    # (rank, launch range, capture range) of every capture range used and of its ancestors
    rank = act.rank[acts].astype(np.int64)
    keys = [(rank, launch_range, c_range)]
    up = c_range
    while (up >= 0).any():
        up = np.where(up >= 0, templates.range_parent[np.maximum(up, 0)], -1)
        keys.append((rank, launch_range, up))
    k_rank, k_launch, k_range = (np.concatenate(col) for col in zip(*keys))
    used = k_range >= 0
    code, (v_rank, v_launch, v_range) = iv.combine_keys(k_rank[used], k_launch[used], k_range[used])
    n, m = len(tree), v_rank.size
    v_parent_range = templates.range_parent[v_range]
    parent_key = iv.codes_among((v_rank, v_launch, v_range), (v_rank, v_launch, v_parent_range))
    v_parent = np.where(v_parent_range >= 0, n + parent_key, v_launch)
    own = iv.codes_among((v_rank, v_launch, v_range), (rank, launch_range, c_range))
    span_start = np.where(v_launch >= 0, tree.start[np.maximum(v_launch, 0)], 0)
    span_end = np.where(v_launch >= 0, tree.end[np.maximum(v_launch, 0)], 0)
    parent = np.concatenate([tree.parent, v_parent])
    depth = _depths(parent)
    name = np.concatenate([tree.name, templates.range_name[v_range]])
    name_code, names = pd.factorize(name)
    labels = np.asarray(names, dtype=object)
    path, paths = _paths(parent, depth, name_code, labels, strip=False)
    type_path, type_paths = _paths(parent, depth, name_code, labels, strip=True)
    minus = np.full(m, -1, dtype=np.int64)
    return RangeTree(
        row=np.concatenate([tree.row, minus]), rank=np.concatenate([tree.rank, v_rank]),
        thread=np.concatenate([tree.thread, minus]), tid=np.concatenate([tree.tid, minus]),
        start=np.concatenate([tree.start, span_start]), end=np.concatenate([tree.end, span_end]),
        kind=np.concatenate([tree.kind, templates.range_kind[v_range]]),
        domain=np.concatenate([tree.domain, templates.range_domain[v_range]]), name=name, parent=parent,
        depth=depth, path=path, type_path=type_path, paths=paths, type_paths=type_paths, threads=tree.threads,
        recorded=np.concatenate([tree.recorded, np.zeros(m, dtype=bool)]),
        # a node under no range inside the graph (torch.compile's graphs have none) keeps the launch's range
        replay_acts=acts[(own >= 0) | (launch_range >= 0)],
        replay_range=np.where(own >= 0, n + own, launch_range)[(own >= 0) | (launch_range >= 0)])


def _depths(parent: np.ndarray) -> np.ndarray:
    """Each range's depth (0 at the top), one pass per level."""
    depth = np.zeros(parent.size, dtype=np.int64)
    up = parent.copy()
    while (up >= 0).any():
        has = up >= 0
        depth[has] += 1
        up[has] = parent[up[has]]
    return depth


def _paths(parent: np.ndarray, depth: np.ndarray, name_code: np.ndarray, names: np.ndarray,
           strip: bool) -> tuple[np.ndarray, np.ndarray]:
    """(code of each range's path, the distinct paths): level by level, each distinct (parent path,
    name) gets one code and one string, so repeated layers cost nothing per range. ``strip``: the
    type path (each name without its trailing ``_<index>``: names that differ only by it share one)."""
    if strip:
        # factorized as objects: a fixed-width string array is (names x the longest name) bytes
        canonical, uniques = pd.factorize(np.asarray([INDEX_SUFFIX.sub("", str(n)) for n in names], dtype=object))
        name_code = canonical[name_code]
        labels = np.asarray(uniques, dtype=object)
    else:
        labels = names
    code = np.full(parent.size, -1, dtype=np.int64)
    strings: list[str] = []
    for level in range(int(depth.max()) + 1 if depth.size else 0):
        at = np.flatnonzero(depth == level)
        above = code[parent[at]] if level else np.full(at.size, -1, dtype=np.int64)
        # one int64 key per (parent path, name): a 1-D factorization (np.unique over rows of pairs was
        # half of the analysis on 10 M ranges)
        width = np.int64(max(len(labels), 1))
        inverse, keys = pd.factorize((above + 1) * width + name_code[at], sort=True)
        code[at] = len(strings) + inverse
        for up, nc in zip((keys // width - 1).tolist(), (keys % width).tolist()):
            text = str(labels[nc])
            strings.append(text if up < 0 else f"{strings[up]}/{text}")
    return code, np.asarray(strings, dtype=object)


# ------------------------------------------------------------------------------------ attribution


@dataclass(frozen=True)
class Attribution:
    """Per entry of the ``activity`` input: the range it is attributed to (-1 for none) and the rule
    (index into RULES)."""

    range: np.ndarray
    rule: np.ndarray


def attribute(ctx: AnalysisContext) -> Attribution:
    """The derived input ``modules.attribution``."""
    tree: RangeTree = ctx.input("modules.ranges")
    act, trace = activity(ctx), ctx.trace
    out = np.full(len(act), -1, dtype=np.int64)
    rule = np.full(len(act), NONE, dtype=np.int8)
    if len(tree) == 0 or len(act) == 0:
        return Attribution(out, rule)
    index = tree.index()
    api = act.api_row
    has = np.flatnonzero(api >= 0)
    stab = _stab(trace, tree, index, api[has], act.api_start[has])
    out[has] = stab
    rule[has[stab >= 0]] = RANGE
    graph = ctx.input("launch_overhead.kinds").graph
    rule[(out >= 0) & graph] = GRAPH_REPLAY
    missing = np.flatnonzero((out < 0) & (api >= 0))
    if missing.size:
        forward = _forward_ranges(ctx, tree, index, api[missing], act.api_start[missing])
        out[missing] = forward
        rule[missing[forward >= 0]] = BACKWARD
    out[tree.replay_acts] = tree.replay_range
    rule[tree.replay_acts] = CAPTURE
    left = np.flatnonzero(out < 0)
    if left.size and (tree.kind == DEVICE_KIND).any():
        # the device's own ranges (GPU annotations; XLA modules and ops) around the activity's start
        lane = iv.codes_among(tree.threads, (act.rank[left].astype(np.int64), act.device[left].astype(np.int64),
                                             np.full(left.size, DEVICE_LANE, dtype=np.int64)))
        found = index[0].covering(lane, act.start[left], act.start[left] + 1)
        hit = (lane >= 0) & (found >= 0)
        out[left[hit]] = index[1][found[hit]]
        rule[left[hit]] = DEVICE
    return Attribution(out, rule)


def _thread_codes(trace: Any, tree: RangeTree, rows: np.ndarray) -> np.ndarray:
    """The code of each event's thread among the ranges' threads (-1 for a thread without ranges)."""
    return iv.codes_among(tree.threads, (trace.column("rank")[rows].astype(np.int64), trace.column("pid")[rows],
                                         trace.column("tid")[rows]))


def _stab(trace: Any, tree: RangeTree, index: tuple[iv.NestedIndex, np.ndarray], rows: np.ndarray,
          t: np.ndarray) -> np.ndarray:
    """The innermost recorded range open on each event's thread at ``t`` (-1 for none)."""
    thread = _thread_codes(trace, tree, rows)
    found = index[0].covering(thread, t, t + 1)
    return np.where((thread >= 0) & (found >= 0), index[1][np.maximum(found, 0)], -1)


def _forward_ranges(ctx: AnalysisContext, tree: RangeTree, index: tuple[iv.NestedIndex, np.ndarray],
                    api_rows: np.ndarray, api_start: np.ndarray) -> np.ndarray:
    """For launch calls under a backward op (the destination of a ``fwdbwd`` flow from its forward
    op): the innermost range open at the forward op's start on its thread; -1 for others."""
    trace = ctx.trace
    out = np.full(api_rows.size, -1, dtype=np.int64)
    fwd, bwd = flow_links(trace, "fwdbwd")
    if fwd.size == 0:
        return out
    bwd, first = np.unique(bwd, return_index=True)
    fwd = fwd[first]
    b_start = trace.column("start_ns")[bwd]
    b_end = b_start + np.maximum(trace.column("dur_ns")[bwd], 0)
    b_thread, b_threads = iv.combine_keys(trace.column("rank")[bwd].astype(np.int64), trace.column("pid")[bwd],
                                          trace.column("tid")[bwd])
    backward_ops = iv.NestedIndex(b_thread, b_start, b_end)
    # the calls' threads among the backward ops' threads
    call_thread = iv.codes_among(tuple(b_threads), (trace.column("rank")[api_rows].astype(np.int64),
                                                    trace.column("pid")[api_rows], trace.column("tid")[api_rows]))
    hit = backward_ops.covering(call_thread, api_start, api_start + 1)
    ok = (call_thread >= 0) & (hit >= 0)
    forward_op = fwd[hit[ok]]
    out[ok] = _stab(trace, tree, index, forward_op, trace.column("start_ns")[forward_op].astype(np.int64))
    return out


# ------------------------------------------------------------------------------------ tables


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    tree: RangeTree = ctx.input("modules.ranges")
    attribution: Attribution = ctx.input("modules.attribution")
    act = activity(ctx)
    busy = _busy_by_rank(act)
    models = KernelModels(flops=ctx.input("efficiency.kernel_flops"),
                          roofline_factor=ctx.input("efficiency.kernel_roofline_factor"))
    gpu = range_gpu(tree, attribution, act, busy, models)
    match, templates = ctx.input("modules.capture_match"), ctx.input("modules.graph_capture")
    tables = {"ranges": _range_table(tree), "range_gpu": gpu, "type_paths": type_path_table(gpu),
              "type_path_steps": type_path_steps(tree, attribution, act, busy),
              "attribution": _attribution_table(act, attribution, busy),
              "graph_capture": graph_capture.match_table(act, match, captured=bool(ctx.options.graph_capture)),
              "graph_ops": graph_capture.op_table(act, match, templates),
              "graph_nodes": graph_capture.node_table(ctx, act, ctx.input("launch_overhead.kinds").graph)}
    result = AnalysisResult(name=NAME, tables=tables)
    ranks_without = sorted(set(np.unique(act.rank).tolist()) - set(np.unique(tree.rank).tolist()))
    result.warn("modules: no nn.Module, record_function or NVTX range on this rank (profile with with_modules=True "
                "or with_stack=True, or add NVTX ranges): no GPU time is attributed to the model's layers",
                ranks_without)
    return result


def _busy_by_rank(act: Any) -> dict[int, int]:
    keys, total = iv.total_by(act.rank, act.start, act.end) if len(act) else (np.zeros(0, np.int64),) * 2
    return {int(k): int(v) for k, v in zip(keys, total)}


def _pairs(tree: RangeTree, attribution: Attribution) -> tuple[np.ndarray, np.ndarray]:
    """(range, activity) for each activity and every range at or above the one it is attributed to."""
    acts = np.flatnonzero(attribution.range >= 0)
    ranges = attribution.range[acts]
    out_r, out_a = [ranges], [acts]
    up = tree.parent[ranges]
    while (up >= 0).any():
        keep = up >= 0
        acts, up = acts[keep], up[keep]
        out_r.append(up)
        out_a.append(acts)
        up = tree.parent[up]
    return np.concatenate(out_r), np.concatenate(out_a)


def _union_by(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.int64)
    if keys.size:
        k, total = iv.total_by(keys, starts, ends)
        out[k] = total
    return out


@dataclass(frozen=True)
class KernelModels:
    """Per entry of the ``activity`` input, the efficiency analysis's figures: the FLOPs its op's
    cost model gives it and the share of its time the op's roofline allows (NaN: not modelled)."""

    flops: np.ndarray
    roofline_factor: np.ndarray


def range_gpu(tree: RangeTree, attribution: Attribution, act: Any, busy: dict[int, int],
              models: KernelModels) -> pd.DataFrame:
    """Per range with GPU activity: inclusive and exclusive unions, per class and rule, and the
    modelled kernels' FLOPs and roofline time (docs/metrics.md)."""
    n = len(tree)
    ranges, acts = _pairs(tree, attribution)
    start, end = act.start[acts], act.end[acts]
    inclusive = _union_by(ranges, start, end, n)
    own = np.flatnonzero(attribution.range >= 0)
    exclusive = _union_by(attribution.range[own], act.start[own], act.end[own], n)
    columns: dict[str, Any] = {"inclusive_ns": inclusive, "exclusive_ns": exclusive,
                               "kernels": np.bincount(ranges, minlength=n).astype(np.int64)}
    # one union keyed (range, class): one sort, not one per class
    by_class = _union_by(ranges * 3 + act.cls[acts], start, end, 3 * n).reshape(n, 3)
    for name, code in (("compute_ns", classify.COMPUTE), ("communication_ns", classify.COMMUNICATION),
                       ("memory_ns", classify.MEMORY)):
        columns[name] = by_class[:, code]
    columns["exposed_comm_ns"] = _exposed_comm(ranges, acts, act, n)
    rule = attribution.rule[acts]
    for name, code in (("backward_ns", BACKWARD), ("graph_replay_ns", GRAPH_REPLAY)):
        sel = rule == code  # few of the pairs: a union of those alone
        columns[name] = _union_by(ranges[sel], start[sel], end[sel], n)
    columns.update(_modelled(ranges, acts, act, models, n))
    # only the ranges with GPU activity, chosen before the frame is made (10 M ranges, few with kernels)
    keep = np.flatnonzero(columns["kernels"] > 0)
    frame = pd.DataFrame({"rank": tree.rank[keep], "range_id": _range_ids(tree)[keep], "depth": tree.depth[keep],
                          "kind": kinds_column(tree.kind[keep]),
                          "path": pd.Categorical.from_codes(tree.path[keep], categories=pd.Index(tree.paths)),
                          "type_path": pd.Categorical.from_codes(tree.type_path[keep], categories=pd.Index(
                              tree.type_paths)),
                          "start_ns": tree.start[keep], "end_ns": tree.end[keep],
                          **{k: v[keep] for k, v in columns.items()}})
    frame["share"] = frame["inclusive_ns"] / frame["rank"].map(busy).fillna(0).clip(lower=1).to_numpy(np.float64)
    return frame


def kinds_column(kind: np.ndarray) -> pd.Categorical:
    """A range kind column (codes into KINDS) as a categorical: no string per row."""
    return pd.Categorical.from_codes(kind.astype(np.int64), categories=pd.Index(KINDS))


def strings_column(values: np.ndarray) -> pd.Categorical:
    """An object column of few distinct strings (names, domains) as a categorical: pandas would
    otherwise copy each row into an Arrow string array."""
    codes, uniques = pd.factorize(values)
    return pd.Categorical.from_codes(codes, categories=pd.Index(uniques, dtype=object)) if codes.size else \
        pd.Categorical([], categories=pd.Index([], dtype=object))


def _exposed_comm(ranges: np.ndarray, acts: np.ndarray, act: Any, n: int) -> np.ndarray:
    """Per range (inclusive): the union of its communication kernels' time that no compute on their
    GPU overlapped (exposed communication, "Communication"), by cutting each kernel to its GPU's
    exposed intervals (one sorted search per kernel, no loop)."""
    comm = act.cls[acts] == classify.COMMUNICATION
    if not comm.any():
        return np.zeros(n, dtype=np.int64)
    exposed = classify.exposed_claims(act.cls, act.rank, act.device, act.start, act.end)
    r, a = ranges[comm], acts[comm]
    key = gpu_key(act.rank[a], act.device[a])
    s, e = act.start[a], act.end[a]
    lo = iv.searchsorted_by(exposed.key, exposed.end_ns, key, s, side="right")  # first exposed ending after s
    hi = iv.searchsorted_by(exposed.key, exposed.start_ns, key, e, side="left")  # past the last starting before e
    count = np.maximum(hi - lo, 0)
    piece = np.repeat(np.arange(r.size), count)
    at = np.repeat(lo, count) + (np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count))
    start = np.maximum(exposed.start_ns[at], s[piece])
    end = np.minimum(exposed.end_ns[at], e[piece])
    keep = end > start
    return _union_by(r[piece][keep], start[keep], end[keep], n)


def _modelled(ranges: np.ndarray, acts: np.ndarray, act: Any, models: KernelModels, n: int) -> dict[str, Any]:
    """Per range (inclusive): the kernel time with a cost model and roof, its roofline time, the
    modelled FLOPs, and efficiency = roofline / modelled time (NaN without a model)."""
    factor = models.roofline_factor[acts]
    roofed = ~np.isnan(factor)
    dur = (act.end - act.start)[acts].astype(np.float64)
    modelled = np.bincount(ranges[roofed], weights=dur[roofed], minlength=n)
    roofline = np.bincount(ranges[roofed], weights=(dur * factor)[roofed], minlength=n)
    flops = models.flops[acts]
    counted = ~np.isnan(flops)
    with np.errstate(invalid="ignore", divide="ignore"):
        efficiency = np.where(modelled > 0, roofline / modelled, np.nan)
    return {"modelled_ns": np.round(modelled).astype(np.int64), "roofline_ns": np.round(roofline).astype(np.int64),
            "flops": np.bincount(ranges[counted], weights=flops[counted], minlength=n), "efficiency": efficiency}


def type_path_steps(tree: RangeTree, attribution: Attribution, act: Any, busy: dict[int, int]) -> pd.DataFrame:
    """Per rank, step and type path: the union of the GPU time attributed at or below its instances
    in that step (activity in a step by its launch, as everywhere)."""
    columns = ["rank", "step", "type_path", "inclusive_ns", "share"]
    ranges, acts = _pairs(tree, attribution)
    if ranges.size == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "type_path" else "int64") for c in columns})
    key, (rank, step, type_path) = iv.combine_keys(tree.rank[ranges], act.step[acts], tree.type_path[ranges])
    total = _union_by(key, act.start[acts], act.end[acts], rank.size)
    frame = pd.DataFrame({"rank": rank, "step": step_column(step), "type_path": tree.type_paths[type_path],
                          "inclusive_ns": total})
    frame["share"] = frame["inclusive_ns"] / frame["rank"].map(busy).fillna(0).clip(lower=1).to_numpy(np.float64)
    return frame.sort_values(["rank", "step", "inclusive_ns"], ascending=[True, True, False],
                             kind="stable").reset_index(drop=True)[columns]


def _range_ids(tree: RangeTree) -> np.ndarray:
    """Each range's id within its rank (0 .. in start order: the tree is sorted by rank, start)."""
    if len(tree) == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.concatenate([[True], tree.rank[1:] != tree.rank[:-1]])
    begin = np.maximum.accumulate(np.where(first, np.arange(len(tree)), 0))
    return np.arange(len(tree), dtype=np.int64) - begin


def _range_table(tree: RangeTree) -> pd.DataFrame:
    ids = _range_ids(tree)
    parent_id = np.where(tree.parent >= 0, ids[np.maximum(tree.parent, 0)], -1)
    return pd.DataFrame({
        "rank": tree.rank, "range_id": ids, "parent_id": parent_id, "depth": tree.depth,
        "kind": kinds_column(tree.kind), "domain": strings_column(tree.domain), "name": strings_column(tree.name),
        "path": pd.Categorical.from_codes(tree.path, categories=pd.Index(tree.paths)),
        "type_path": pd.Categorical.from_codes(tree.type_path, categories=pd.Index(tree.type_paths)),
        "tid": tree.tid, "start_ns": tree.start, "end_ns": tree.end, "row": tree.row})


def type_path_table(gpu: pd.DataFrame) -> pd.DataFrame:
    """Per rank and type path: its instances' times summed (instances of one type path do not
    overlap on a thread), largest first."""
    columns = ["rank", "type_path", "depth", "instances", "inclusive_ns", "exclusive_ns", "kernels", "backward_ns",
               "share", "modelled_ns", "roofline_ns", "flops", "efficiency"]
    if gpu.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "type_path" else "int64") for c in columns})
    grouped = (gpu.groupby(["rank", "type_path"], observed=True, sort=False)
               .agg(depth=("depth", "min"), instances=("range_id", "size"), inclusive_ns=("inclusive_ns", "sum"),
                    exclusive_ns=("exclusive_ns", "sum"), kernels=("kernels", "sum"),
                    backward_ns=("backward_ns", "sum"), modelled_ns=("modelled_ns", "sum"),
                    roofline_ns=("roofline_ns", "sum"), flops=("flops", "sum"), share=("share", "sum"))
               .reset_index())
    with np.errstate(invalid="ignore", divide="ignore"):
        grouped["efficiency"] = np.where(grouped["modelled_ns"] > 0, grouped["roofline_ns"] / grouped["modelled_ns"],
                                         np.nan)
    grouped["type_path"] = grouped["type_path"].astype(str)
    return grouped.sort_values(["rank", "inclusive_ns", "type_path"], ascending=[True, False, True],
                               kind="stable").reset_index(drop=True)[columns]


def _attribution_table(act: Any, attribution: Attribution, busy: dict[int, int]) -> pd.DataFrame:
    """Per rank: a row per rule (how many activities, the union of their time: rules overlap where
    their kernels ran at once), then ``attributed`` (the union of every attributed activity) and
    ``unattributed`` (busy time outside it), which add up to the busy time exactly."""
    columns = ["rank", "rule", "activities", "gpu_ns", "busy_ns", "share"]
    if len(act) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "rule" else "int64") for c in columns})
    key, (rank, rule) = iv.combine_keys(act.rank, attribution.rule.astype(np.int64))
    per_rule = pd.DataFrame({"rank": rank, "rule": np.asarray(RULES, dtype=object)[rule],
                             "activities": np.bincount(key, minlength=rank.size).astype(np.int64),
                             "gpu_ns": _union_by(key, act.start, act.end, rank.size)})
    ranks = np.asarray(sorted(busy), dtype=np.int64)
    attributed = attribution.range >= 0
    covered = dict(zip(*iv.total_by(act.rank[attributed], act.start[attributed], act.end[attributed]))) \
        if attributed.any() else {}
    total = np.asarray([busy[int(r)] for r in ranks], dtype=np.int64)
    done = np.asarray([covered.get(int(r), 0) for r in ranks], dtype=np.int64)
    counts = np.bincount(act.rank[attributed], minlength=int(ranks.max()) + 1 if ranks.size else 0)
    everyone = np.bincount(act.rank, minlength=counts.size)
    summary = pd.DataFrame({"rank": np.repeat(ranks, 2), "rule": ["attributed", "unattributed"] * ranks.size,
                            "activities": np.stack([counts[ranks], everyone[ranks] - counts[ranks]], 1).reshape(-1),
                            "gpu_ns": np.stack([done, total - done], 1).reshape(-1)})
    frame = pd.concat([per_rule, summary], ignore_index=True).sort_values("rank", kind="stable")
    frame["busy_ns"] = frame["rank"].map(busy).fillna(0).astype(np.int64)
    frame["share"] = frame["gpu_ns"] / frame["busy_ns"].clip(lower=1)
    return frame.reset_index(drop=True)[columns]


# ------------------------------------------------------------------------------------ summary


def report_summary(inputs: ReportInputs) -> tuple[dict[str, Any], dict[str, str]]:
    """The summary's ``top_layers``, ``attributed_share`` and graph-replay shares (docs/reports.md)."""
    types, rules = inputs.table(NAME, "type_paths"), inputs.table(NAME, "attribution")
    empty = {"top_layers": None, "attributed_share": None, "graph_replay_share": None,
             "graph_replay_matched_share": None}
    if types is None or types.empty or rules is None or rules.empty:
        return empty, {}
    busy = float(rules.drop_duplicates("rank")["busy_ns"].sum())
    attributed = float(rules.loc[rules["rule"] == "attributed", "gpu_ns"].sum())
    job = types.groupby("type_path", sort=False)["inclusive_ns"].sum()
    share = job / max(busy, 1.0)
    held = share[share >= TOP_LAYER_SHARE]
    # the deepest: a type path none of whose descendants also holds the share
    names = list(held.index)
    deepest = [p for p in names if not any(q.startswith(p + "/") for q in names)]
    top = held.loc[deepest].sort_values(ascending=False).head(TOP_LAYERS)
    layers = [{"type_path": str(p), "inclusive_ns": int(job[p]), "share": float(v)} for p, v in top.items()]
    summary = {**empty, "top_layers": layers or None, "attributed_share": attributed / max(busy, 1.0)}
    summary.update(replay_shares(inputs.table(NAME, "graph_capture"), busy))
    return summary, {}


def replay_shares(matches: pd.DataFrame | None, busy: float) -> dict[str, float | None]:
    """``graph_replay_share`` (graph-replayed GPU time over the busy time) and
    ``graph_replay_matched_share`` (the part of it matched to a captured node), None without replays."""
    if matches is None or matches.empty:
        return {}
    replayed = float(matches.drop_duplicates("rank")["replayed_ns"].sum())
    matched = float(matches.loc[matches["rule"].isin(graph_capture.MATCH_RULES), "gpu_ns"].sum())
    return {"graph_replay_share": replayed / max(busy, 1.0), "graph_replay_matched_share": matched / max(replayed, 1.0)}


register_input("modules.graph_capture", lambda ctx: graph_capture.read_templates(ctx, recorded_tree))
register_input("modules.capture_match", lambda ctx: graph_capture.match_replays(
    ctx, activity(ctx), ctx.input("launch_overhead.kinds").graph, ctx.input("modules.graph_capture")),
    requires=("modules.graph_capture", "activity", "launch_overhead.kinds"))
register_input("modules.ranges", build_tree, requires=("classify.codes.name", "modules.capture_match",
                                                       "modules.graph_capture", "activity", "links.launch"))
register_input("modules.attribution", attribute,
               requires=("modules.ranges", "activity", "launch_overhead.kinds", "links.launch"))

SPEC = AnalysisSpec(
    name=NAME,
    title="Modules and ranges",
    run=analyze,
    requires=("modules.ranges", "modules.attribution", "activity", "efficiency.kernel_flops",
              "efficiency.kernel_roofline_factor", "modules.capture_match", "modules.graph_capture",
              "launch_overhead.kinds"),
    order=28,
    tables=(
        TableSpec("type_paths", "GPU time by layer type (every instance of a module or range path)",
                  sort_by="inclusive_ns"),
        TableSpec("range_gpu", "GPU time per module and range: inclusive and exclusive", sort_by="inclusive_ns",
                  keep_rows=2000),
        TableSpec("type_path_steps", "GPU time by layer type, per step", sort_by="inclusive_ns"),
        TableSpec("attribution", "How the GPU time was attributed to ranges"),
        TableSpec("graph_capture", "Graph replays matched to a capture (--graph-capture): how, and what was not",
                  sort_by="gpu_ns"),
        TableSpec("graph_ops", "Graph replays: GPU time by the captured op of each node", sort_by="gpu_ns"),
        TableSpec("graph_nodes", "Graph replays: GPU time per graph node the trace identifies (graph node ids)",
                  sort_by="gpu_ns"),
        TableSpec("ranges", "The range tree (nn.Module, record_function, NVTX)", sort_by="end_ns", per_event=True),
    ),
    headline_table="type_paths",
    summary=report_summary,
    page=("/modules", "Modules"),
)
