"""Critical path and what-if: what bounds each step, and what the step could take.

On the dependency graph of host threads and GPU streams (:mod:`.dependency_graph`, docs/metrics.md,
"Critical path"), each step's critical path is the chain of binding edges from the step's end back
to its start: its segments partition the step exactly (``path_ns == step_ns``), each in one
category (host compute, untraced host time, launch overhead, synchronisation, GPU compute, memory,
communication, GPU waits, waiting on another rank). A rank without steps has one window, the whole
trace. What-ifs re-time the whole graph with changed lags (communication overlapped, no host
overhead, kernels at their roofline time, and all of these: the achievable step); the median-rank
what-if, and the split of communication into waiting on other ranks, come from collectives matched
across ranks in the reduce step (:mod:`.critical_path_ranks`).

Per rank (run once per batch): ``segments`` (the path), ``contributors`` (events with the most
time on it), ``edges`` (the graph's edges by kind and rule). Across ranks (reduce): ``steps``
(composition and bound-by per step) and ``whatif``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceview import intervals as iv
from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult
from traceview.registry import AnalysisSpec, TableSpec, register_input

from . import classify
from . import critical_path_ranks as ranks_step
from .dependency_graph import (CATEGORIES, COMMUNICATION, DURATION, EDGE_KINDS, GPU_COMPUTE, HOST_COMPUTE,
                               HOST_ORDER, HOST_UNTRACED, INFERRED_EDGES, LAUNCH, SYNC_WAIT, UNLINKED, WAKE,
                               DependencyGraph, dependency_graph)
from .paths import relaxed_times, walk_back
from .steps import NO_STEP, Activity, activity, step_column

NAME = "critical_path"

#: the graph what-ifs (the median-rank one is computed across ranks)
#: what a report says where the critical path went through inferred edges (one message for all ranks)
INFERRED_WARNINGS = {
    "stream_wait": "critical path: cudaStreamWaitEvent dependencies inferred from the recorded calls (the trace "
                   "does not say which event each waited for; counts in the edges table, rule in docs/metrics.md)",
    "wake": "critical path: threads woken by another thread inferred (the trace records no dependency between "
            "threads; counts in the edges table, rule in docs/metrics.md)",
}
#: the graph's rules whose count means some path may be wrong (the others are counted for the record)
UNTRUSTED_RULES = ("edges left out: source after destination (clock skew)", "points on cycles (placed last)")
GRAPH_SCENARIOS = ("comm_overlapped", "no_host_overhead", "roofline", "achievable")
HOST_CATEGORIES = ("host_compute", "host_untraced", "launch_overhead", "sync")
SEGMENT_COLUMNS = ["rank", "step", "start_ns", "end_ns", "dur_ns", "category", "name", "row", "tid", "device",
                   "stream"]


@dataclass
class PathResult:
    """What one context's critical paths give: the per-rank tables and the gathered parts."""

    segments: pd.DataFrame
    edges: pd.DataFrame
    gpu_categories: pd.DataFrame
    rules: pd.DataFrame
    parts: ranks_step.CriticalPathParts


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    result: PathResult = ctx.input("critical_path.result")
    out = AnalysisResult(name=NAME, tables={"segments": result.segments,
                                            "contributors": contributors(result.segments, ctx.options.top_n),
                                            "gpu_categories": result.gpu_categories,
                                            "edges": result.edges, "rules": result.rules})
    rules = result.edges
    inferred = rules[(rules["rule"] == "inferred") & (rules["count"] > 0)]
    rules = result.rules
    for rule in UNTRUSTED_RULES:
        ranks = rules.loc[(rules["rule"] == rule) & (rules["count"] > 0), "rank"].unique()
        out.warn(f"critical path: {rule}: the paths through them may be wrong (counts in the rules table)",
                 [int(r) for r in ranks])
    for edge, message in INFERRED_WARNINGS.items():
        ranks = inferred.loc[inferred["edge"] == edge, "rank"].unique()
        out.warn(message, [int(r) for r in ranks])  # the pipeline says which ranks; counts: the edges table
    return out


def gather(ctx: AnalysisContext) -> ranks_step.CriticalPathParts:
    result: PathResult = ctx.input("critical_path.result")
    return result.parts


def build_result(ctx: AnalysisContext) -> PathResult:
    """The derived input ``critical_path.result``: paths, segments, what-ifs of the context's ranks."""
    graph, act = dependency_graph(ctx), activity(ctx)
    windows = _windows(graph, act)
    segments = _segments(ctx, graph, windows)
    main_device = _main_device(act)
    steps = _composition(windows, segments, main_device)
    factor = ctx.input("efficiency.kernel_roofline_factor")
    whatif = _whatifs(graph, act, windows, factor)
    claims = _claims(segments, whatif, graph, factor, main_device)
    parts = ranks_step.CriticalPathParts(steps=steps, whatif=whatif, claims=claims,
                                         collectives=_collectives(ctx, act, segments))
    categories = _gpu_categories(segments, act, ctx.input("kernels.activity_categories"))
    return PathResult(segments=_public_segments(segments), edges=_edge_table(graph), gpu_categories=categories,
                      rules=_rule_table(graph), parts=parts)


def _rule_table(graph: DependencyGraph) -> pd.DataFrame:
    """What the graph could not link, or linked by a rule, counted per rank (docs/metrics.md)."""
    rows = [(int(r), rule, int(n)) for rule, ranks in graph.rules.items()
            for r, n in zip(*np.unique(np.asarray(ranks, dtype=np.int64), return_counts=True))]
    frame = pd.DataFrame(rows, columns=["rank", "rule", "count"])
    return frame.astype({"rank": "int64", "count": "int64"}).sort_values(["rank", "rule"]).reset_index(drop=True)


def _gpu_categories(segments: pd.DataFrame, act: Activity,
                    categories: tuple[np.ndarray, tuple[str, ...]]) -> pd.DataFrame:
    """Per rank and step: the GPU compute on the path by kernel category (the kernels analysis's
    categories: gemm, attention, convolution, elementwise, reduction, other)."""
    columns = ["rank", "step", "kernel_category", "path_ns", "share"]
    gpu = segments[segments["category"] == "gpu_compute"]
    if gpu.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "kernel_category" else "int64") for c in columns})
    rows = gpu["row"].to_numpy(np.int64)
    pos = np.clip(np.searchsorted(act.row, rows), 0, max(len(act) - 1, 0))  # activity rows are sorted
    known = act.row[pos] == rows
    category_of, category_names = categories
    names = np.asarray(category_names, dtype=object)
    category = np.where(known, names[np.clip(category_of[pos], 0, names.size - 1)], "other")
    frame = pd.DataFrame({"rank": gpu["rank"].to_numpy(np.int64), "step": gpu["step"].to_numpy(np.int64),
                          "kernel_category": category, "path_ns": gpu["dur_ns"].to_numpy(np.int64)})
    out = frame.groupby(["rank", "step", "kernel_category"], sort=True)["path_ns"].sum().reset_index()
    out["share"] = out["path_ns"] / out.groupby(["rank", "step"])["path_ns"].transform("sum")
    out = out.sort_values(["rank", "step", "path_ns"], ascending=[True, True, False], kind="stable")
    out["step"] = step_column(out["step"].to_numpy(np.int64))
    return out.reset_index(drop=True)[columns]


# ------------------------------------------------------------------------------------ windows


def _windows(graph: DependencyGraph, act: Activity) -> pd.DataFrame:
    """One row per window: each step of each rank, or the whole trace of a rank without steps, with
    the points its path ends and starts at."""
    steps = act.steps
    frame = pd.DataFrame({"rank": steps.rank, "step": steps.step, "start_ns": steps.start, "end_ns": steps.end})
    n_h = graph.hosts
    # the step's own range event: a host event of the rank with the step's start and end (only the
    # events starting when some step starts are looked at)
    candidates = np.flatnonzero(np.isin(graph.times[:n_h], steps.start))
    events = pd.DataFrame({"rank": graph.rank[candidates], "start_ns": graph.times[candidates],
                           "end_ns": graph.times[n_h + candidates], "host": candidates})
    events = events.drop_duplicates(["rank", "start_ns", "end_ns"])
    frame = frame.merge(events, on=["rank", "start_ns", "end_ns"], how="left")
    # a rank without GPU activity has no critical path to speak of (every figure would be the host's)
    frame = frame[frame["rank"].isin(np.unique(act.rank))]
    host = frame["host"].fillna(-1).to_numpy(np.int64)
    start_point, end_point = host.copy(), np.where(host >= 0, n_h + host, -1)
    missing = np.flatnonzero(host < 0)
    if missing.size:  # no such event (steps from another source): the nearest points of the rank
        rank = frame["rank"].to_numpy(np.int64)[missing]
        start_point[missing] = _nearest_point(graph, rank, frame["start_ns"].to_numpy(np.int64)[missing], after=True)
        end_point[missing] = _nearest_point(graph, rank, frame["end_ns"].to_numpy(np.int64)[missing], after=False)
    frame = frame.assign(start_point=start_point, end_point=end_point).drop(columns="host")
    frame = pd.concat([frame, _whole_windows(graph, set(steps.rank.tolist()))], ignore_index=True)
    frame = frame[(frame["start_point"] >= 0) & (frame["end_point"] >= 0)]
    return frame.sort_values(["rank", "start_ns", "step"], kind="stable").reset_index(drop=True)


def _nearest_point(graph: DependencyGraph, rank: np.ndarray, t: np.ndarray, after: bool) -> np.ndarray:
    """The first point of the rank at or after ``t`` (``after``), else the last at or before it; -1 for none."""
    order = np.lexsort((graph.times, graph.rank))
    r, times = graph.rank[order], graph.times[order]
    pos = (iv.searchsorted_by(r, times, rank, t, side="left") if after
           else iv.searchsorted_by(r, times, rank, t, side="right") - 1)
    ok = (pos >= 0) & (pos < r.size)
    ok[ok] &= r[pos[ok]] == rank[ok]
    return np.where(ok, order[np.clip(pos, 0, max(r.size - 1, 0))], -1)


def _whole_windows(graph: DependencyGraph, with_steps: set[int]) -> pd.DataFrame:
    """The whole-trace window of each rank without steps: its GPU window (first activity start to the
    activity that ends last), as every whole-trace figure of the report."""
    gpu = np.arange(graph.times.size) >= 2 * graph.hosts
    frame = pd.DataFrame({"rank": graph.rank[gpu], "t": graph.times[gpu],
                          "point": np.flatnonzero(gpu)})
    frame = frame[~frame["rank"].isin(list(with_steps))]
    if frame.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64")
                             for c in ("rank", "step", "start_ns", "end_ns", "start_point", "end_point")})
    first = frame.loc[frame.groupby("rank")["t"].idxmin()].set_index("rank")
    last = frame.loc[frame.groupby("rank")["t"].idxmax()].set_index("rank")
    return pd.DataFrame({"rank": first.index.to_numpy(np.int64), "step": NO_STEP,
                         "start_ns": first["t"].to_numpy(np.int64), "end_ns": last["t"].to_numpy(np.int64),
                         "start_point": first["point"].to_numpy(np.int64),
                         "end_point": last["point"].to_numpy(np.int64)})


# ------------------------------------------------------------------------------------ segments


def _segments(ctx: AnalysisContext, graph: DependencyGraph, windows: pd.DataFrame) -> pd.DataFrame:
    """Every window's path as segments (window, start, end, category, owner row, lane), merged where
    consecutive segments are the same event's time in the same category."""
    starts = windows["start_ns"].to_numpy(np.int64)
    runs = walk_back(graph.binding_source, graph.times, windows["end_point"].to_numpy(np.int64), starts)
    lengths = np.fromiter((r.size for r in runs), dtype=np.int64, count=len(runs))
    if lengths.sum() == 0:
        return _empty_segments()
    flat = np.concatenate(runs)
    del runs  # each array is dropped as soon as no later line reads it: on a big trace these
    # per-point temporaries, not the graph, set the analysis's peak memory
    window = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    is_last = np.zeros(flat.size, dtype=bool)
    is_last[np.cumsum(lengths) - 1] = True
    dst_at = np.flatnonzero(~is_last)[::-1]  # each window's segments in time order
    del is_last
    dst, src, w = flat[dst_at], flat[dst_at + 1], window[dst_at]
    del flat, window, dst_at
    edge = np.where(src >= 0, graph.binding[dst], -1)
    safe = np.maximum(edge, 0)
    columns = {
        "window": w,
        "start_ns": np.maximum(np.where(src >= 0, graph.times[np.maximum(src, 0)], starts[w]), starts[w]),
        "end_ns": graph.times[dst],
        "category": np.where(edge >= 0, graph.category[safe], UNLINKED).astype(np.int64),
        "row": np.where(edge >= 0, graph.owner[safe], -1),
        # drawn on the launch call's thread for a launch latency, else on the point it ends at
        "lane": np.where((edge >= 0) & (graph.kind[safe] == LAUNCH), src, dst),
    }
    del dst, src, edge, safe
    order = np.argsort(w, kind="stable")  # windows in order, each in time order
    del w
    keep = order[columns["end_ns"][order] > columns["start_ns"][order]]
    del order
    for key in columns:  # one column at a time: the whole set is never held twice
        columns[key] = columns[key][keep]
    return _with_lanes(ctx, graph, windows, _merged(columns))


def _merged(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Consecutive segments (in time) of one window, category and owner joined into one."""
    n = columns["window"].size
    if n == 0:
        return columns
    same = np.ones(n - 1, dtype=bool)
    for key in ("window", "category", "row"):
        same &= columns[key][1:] == columns[key][:-1]
    same &= columns["start_ns"][1:] == columns["end_ns"][:-1]
    first = np.flatnonzero(np.concatenate([[True], ~same]))
    last = np.append(first[1:] - 1, n - 1)
    out = {k: v[first] for k, v in columns.items()}
    out["end_ns"] = columns["end_ns"][last]
    return out


def _with_lanes(ctx: AnalysisContext, graph: DependencyGraph, windows: pd.DataFrame,
                columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """Segments with rank, step, name and the lane (host thread ``tid``, or GPU ``device``/``stream``)."""
    trace = ctx.trace
    lane = columns["lane"]
    lane_row = graph.row[lane]
    on_host = lane < 2 * graph.hosts
    row, category = columns["row"], columns["category"]
    # time inside a step's own range event (a ProfilerStep CPU op in older traces) with no op open
    # is untraced host time, as inside an annotation
    step_rows = graph.row[windows["start_point"].to_numpy(np.int64)]
    category = np.where((category == HOST_COMPUTE) & np.isin(row, step_rows), HOST_UNTRACED, category)
    w = columns["window"]
    return pd.DataFrame({
        "window": w,
        "rank": windows["rank"].to_numpy(np.int64)[w],
        "step": windows["step"].to_numpy(np.int64)[w],
        "start_ns": columns["start_ns"],
        "end_ns": columns["end_ns"],
        "category_code": category,
        "name": _segment_names(ctx, row, category),
        "row": row,
        "tid": np.where(on_host, trace.column("tid")[lane_row], -1).astype(np.int64),
        "device": np.where(on_host, -1, trace.column("device")[lane_row]).astype(np.int64),
        "stream": np.where(on_host, -1, trace.column("stream")[lane_row]).astype(np.int64),
        "dur_ns": columns["end_ns"] - columns["start_ns"],
        "category": pd.Categorical.from_codes(category, categories=list(CATEGORIES)),
    })


def _segment_names(ctx: AnalysisContext, row: np.ndarray, category: np.ndarray) -> pd.Categorical:
    """The event name of each segment (a categorical: a path has many segments of few names), or
    what the time is when no event owns it."""
    names = classify.names_categorical(ctx, row)
    special = ["(no known predecessor)", "(no host event)"]
    categories = pd.Index(list(names.categories) + [s for s in special if s not in set(names.categories)])
    codes = np.asarray(names.codes, dtype=np.int64).copy()
    codes[row < 0] = categories.get_loc("(no host event)")
    codes[category == UNLINKED] = categories.get_loc("(no known predecessor)")
    return pd.Categorical.from_codes(codes, categories=categories)


def _empty_segments() -> pd.DataFrame:
    columns = {"window": "int64", "rank": "int64", "step": "int64", "start_ns": "int64", "end_ns": "int64",
               "category_code": "int64", "name": object, "row": "int64", "tid": "int64", "device": "int64",
               "stream": "int64", "dur_ns": "int64", "category": object}
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def _public_segments(segments: pd.DataFrame) -> pd.DataFrame:
    out = segments[SEGMENT_COLUMNS].copy()
    out["step"] = step_column(out["step"].to_numpy(np.int64))
    rank, start = out["rank"].to_numpy(), out["start_ns"].to_numpy()
    ordered = bool(((rank[1:] > rank[:-1]) | ((rank[1:] == rank[:-1]) & (start[1:] >= start[:-1]))).all())
    if ordered:  # windows in order, each in time order: nothing to sort unless windows overlap
        return out.reset_index(drop=True)
    return out.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)


def contributors(segments: pd.DataFrame, top_n: int) -> pd.DataFrame:
    """The events with the most time on the critical paths of each rank (all its windows)."""
    columns = ["rank", "category", "name", "path_ns", "count", "share"]
    if segments.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("category", "name") else "int64") for c in columns})
    grouped = (segments.groupby(["rank", "category", "name"], sort=False, observed=True)["dur_ns"]
               .agg(path_ns="sum", count="size").reset_index())
    total = grouped.groupby("rank")["path_ns"].transform("sum").to_numpy(np.float64)
    grouped["share"] = grouped["path_ns"].to_numpy(np.float64) / np.maximum(total, 1.0)
    grouped = grouped.sort_values(["rank", "path_ns", "name"], ascending=[True, False, True], kind="stable")
    return grouped.groupby("rank", sort=False).head(top_n).reset_index(drop=True)[columns]


# ------------------------------------------------------------------------------------ composition


def _main_device(act: Activity) -> dict[int, int]:
    """The device each rank's activity mostly ran on (the GPU a host segment's claims go to)."""
    if len(act) == 0:
        return {}
    frame = pd.DataFrame({"rank": act.rank, "device": act.device, "dur": act.end - act.start})
    best = frame.groupby(["rank", "device"])["dur"].sum().reset_index().sort_values(
        ["rank", "dur", "device"], ascending=[True, False, True]).drop_duplicates("rank")
    return dict(zip(best["rank"].astype(int), best["device"].astype(int)))


def _composition(windows: pd.DataFrame, segments: pd.DataFrame, main_device: dict[int, int]) -> pd.DataFrame:
    """Per window: the path's time by category and the event with most time on it."""
    frame = windows[["rank", "step", "start_ns", "end_ns"]].copy()
    frame["step_ns"] = frame["end_ns"] - frame["start_ns"]
    frame["device"] = frame["rank"].map(main_device).fillna(-1).astype(np.int64)
    by_cat = np.zeros((len(windows), len(CATEGORIES)), dtype=np.int64)
    if len(segments):
        np.add.at(by_cat, (segments["window"].to_numpy(np.int64), segments["category_code"].to_numpy(np.int64)),
                  segments["dur_ns"].to_numpy(np.int64))
    for i, name in enumerate(CATEGORIES):
        frame[f"{name}_ns"] = by_cat[:, i]
    frame["path_ns"] = by_cat.sum(axis=1)
    frame["top_name"], frame["top_ns"] = None, 0
    if len(segments):
        top = (segments.groupby(["window", "name"], sort=False)["dur_ns"].sum().reset_index()
               .sort_values(["window", "dur_ns", "name"], ascending=[True, False, True]).drop_duplicates("window"))
        frame.loc[top["window"].to_numpy(), "top_name"] = top["name"].to_numpy()
        frame.loc[top["window"].to_numpy(), "top_ns"] = top["dur_ns"].to_numpy(np.int64)
    frame["top_ns"] = frame["top_ns"].astype(np.int64)
    return frame


# ------------------------------------------------------------------------------------ what-if


def scenario_lags(graph: DependencyGraph, factor: np.ndarray) -> dict[str, np.ndarray]:
    """The graph's lags as each what-if changes them (docs/metrics.md, "What-if")."""
    lag = graph.lag
    duration = graph.kind == DURATION
    comm = duration & (graph.category == COMMUNICATION)
    host = np.isin(graph.kind, [HOST_ORDER, LAUNCH, SYNC_WAIT, WAKE])
    roof = np.ones(lag.size, dtype=np.float64)
    gpu_dur = np.flatnonzero(duration & (graph.category == GPU_COMPUTE))
    j = graph.dst[gpu_dur] - 2 * graph.hosts - graph.activities  # the activity whose end the edge ends at
    roof[gpu_dur] = np.where(np.isnan(factor[j]), 1.0, factor[j])
    roofed = np.round(lag * roof).astype(np.int64)
    comm_overlapped = np.where(comm, 0, lag)
    no_host = np.where(host, 0, lag)
    achievable = np.where(comm | host, 0, roofed)
    return {"comm_overlapped": comm_overlapped, "no_host_overhead": no_host, "roofline": roofed,
            "achievable": achievable}


def activity_windows(act: Activity, windows: pd.DataFrame) -> np.ndarray:
    """The window of each activity (its rank's step; a rank without steps: its whole-trace window),
    -1 for activity in no window."""
    w_rank, w_step = windows["rank"].to_numpy(np.int64), windows["step"].to_numpy(np.int64)
    codes, _ = iv.combine_keys(np.concatenate([w_rank, act.rank]), np.concatenate([w_step, act.step]))
    of_code = np.full(int(codes.max()) + 1 if codes.size else 0, -1, dtype=np.int64)
    of_code[codes[:w_rank.size]] = np.arange(w_rank.size, dtype=np.int64)
    return of_code[codes[w_rank.size:]]


def _gpu_extent(graph: DependencyGraph, windows: pd.DataFrame, act_window: np.ndarray,
                times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per window: its activities' first start and last end in ``times`` (int64 min/max sentinels for
    a window without activity)."""
    first = np.full(len(windows), np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(len(windows), np.iinfo(np.int64).min, dtype=np.int64)
    inside = act_window >= 0
    np.minimum.at(first, act_window[inside], times[graph.activity_start()][inside])
    np.maximum.at(last, act_window[inside], times[graph.activity_end()][inside])
    return first, last


def _gpu_spans(windows: pd.DataFrame, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Per window: how long the GPU work of its step takes on its own: the end of its last activity
    minus the previous window's (ends kept increasing along the rank's windows), the first window from
    its first activity's start; 0 for a window without activity."""
    has = last > np.iinfo(np.int64).min
    rank = windows["rank"].to_numpy(np.int64)
    done = pd.Series(last).groupby(rank).cummax().to_numpy(np.int64)
    previous = pd.Series(done).groupby(rank).shift(1, fill_value=np.iinfo(np.int64).min).to_numpy(np.int64)
    begin = np.where(previous > np.iinfo(np.int64).min, previous, first)
    return np.where(has, np.maximum(done - np.where(has, begin, 0), 0), 0).astype(np.int64)


def _whatif_span(graph: DependencyGraph, windows: pd.DataFrame, act_window: np.ndarray, times: np.ndarray,
                 host_free: bool) -> np.ndarray:
    """A window's time in a re-timed graph: its range (start point to end point; a whole-trace window
    to the last event); with the host infinitely fast (``host_free``) at least its GPU work's span,
    which then bounds it."""
    start = times[windows["start_point"].to_numpy(np.int64)]
    end = times[windows["end_point"].to_numpy(np.int64)]
    first, last = _gpu_extent(graph, windows, act_window, times)
    whole = windows["step"].to_numpy(np.int64) == NO_STEP
    end = np.where(whole, np.maximum(end, last), end)
    span = end - start
    if host_free:
        span = np.maximum(span, _gpu_spans(windows, first, last))
    return span


def _whatifs(graph: DependencyGraph, act: Activity, windows: pd.DataFrame,
             factor: np.ndarray) -> pd.DataFrame:
    """Per window and graph scenario: the saving and the what-if step time (docs/metrics.md)."""
    lags = scenario_lags(graph, factor)
    act_window = activity_windows(act, windows)
    base = _whatif_span(graph, windows, act_window, graph.times, host_free=False)
    step_ns = (windows["end_ns"] - windows["start_ns"]).to_numpy(np.int64)
    kernel = act.cls == classify.COMPUTE
    kernel_ns = np.bincount(act.rank[kernel], weights=(act.end - act.start)[kernel]) if kernel.any() else np.zeros(1)
    modelled_ns = np.bincount(act.rank[kernel & ~np.isnan(factor)],
                              weights=(act.end - act.start)[kernel & ~np.isnan(factor)], minlength=kernel_ns.size) \
        if kernel.any() else np.zeros(1)
    rank = windows["rank"].to_numpy(np.int64)
    safe = np.clip(rank, 0, kernel_ns.size - 1)
    modelled_share = np.where(rank < kernel_ns.size, modelled_ns[safe] / np.maximum(kernel_ns[safe], 1), np.nan)
    frames = []
    for scenario in GRAPH_SCENARIOS:
        times = relaxed_times(graph.incoming, lags.pop(scenario), graph.times)  # each let go once used
        span = _whatif_span(graph, windows, act_window, times,
                            host_free=scenario in ("no_host_overhead", "achievable"))
        saving = np.clip(base - span, 0, step_ns)  # a what-if never makes a step slower
        frames.append(pd.DataFrame({
            "window": np.arange(len(windows), dtype=np.int64), "rank": rank,
            "step": windows["step"].to_numpy(np.int64), "scenario": scenario, "step_ns": step_ns,
            "saving_ns": saving.astype(np.int64),
            "modelled_share": modelled_share if scenario in ("roofline", "achievable") else np.nan,
        }))
    return pd.concat(frames, ignore_index=True)


def _claims(segments: pd.DataFrame, whatif: pd.DataFrame, graph: DependencyGraph, factor: np.ndarray,
            main_device: dict[int, int]) -> pd.DataFrame:
    """Per window and costed scenario: the path's segments the scenario shortens, latest first, cut
    so that their time is the window's saving (a what-if never saves more than it shortens the path)."""
    columns = ["rank", "device", "step", "scenario", "start_ns", "end_ns"]
    if segments.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "scenario" else "int64") for c in columns})
    cat = segments["category_code"].to_numpy(np.int64)
    host = [CATEGORIES.index(c) for c in HOST_CATEGORIES]
    parts = []
    for scenario, shortened in (("comm_overlapped", cat == COMMUNICATION),
                                ("no_host_overhead", np.isin(cat, host)),
                                ("roofline", cat == GPU_COMPUTE)):
        seg = segments[shortened]
        length = seg["dur_ns"].to_numpy(np.float64)
        if scenario == "roofline":
            row_factor = _row_factor(graph, factor, seg["row"].to_numpy(np.int64))
            length = length * (1.0 - np.nan_to_num(row_factor, nan=1.0))
        saving = whatif[whatif["scenario"] == scenario].set_index("window")["saving_ns"]
        parts.append(_cut_to(seg, np.round(length).astype(np.int64), saving, scenario, main_device))
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


def _row_factor(graph: DependencyGraph, factor: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The roofline factor of the activity at each event row (NaN for none)."""
    act_rows = graph.row[2 * graph.hosts: 2 * graph.hosts + graph.activities]  # ascending, as activity's
    out = np.full(rows.size, np.nan)
    if act_rows.size:
        pos = np.clip(np.searchsorted(act_rows, rows), 0, act_rows.size - 1)
        ok = act_rows[pos] == rows
        out[ok] = factor[pos[ok]]
    return out


def _cut_to(seg: pd.DataFrame, length: np.ndarray, saving: pd.Series, scenario: str,
            main_device: dict[int, int]) -> pd.DataFrame:
    """The trailing ``length`` of each segment, latest segments first, until the window's saving."""
    window, end = seg["window"].to_numpy(np.int64), seg["end_ns"].to_numpy(np.int64)
    keep = np.flatnonzero(length > 0)
    keep = keep[np.lexsort((-end[keep], window[keep]))]  # per window, latest first
    window, end, length = window[keep], end[keep], length[keep]
    budget = np.clip(np.nan_to_num(saving.reindex(window).to_numpy(np.float64)), 0, None).astype(np.int64)
    total = np.cumsum(length)
    first = np.concatenate([[True], window[1:] != window[:-1]]) if window.size else np.zeros(0, dtype=bool)
    before = total - length - np.maximum.accumulate(np.where(first, total - length, 0)) if window.size else total
    take = np.clip(budget - before, 0, length)
    rank = seg["rank"].to_numpy(np.int64)[keep]
    frame = pd.DataFrame({"rank": rank, "device": pd.Series(rank).map(main_device).fillna(-1).to_numpy(np.int64),
                          "step": seg["step"].to_numpy(np.int64)[keep], "scenario": scenario,
                          "start_ns": end - take, "end_ns": end})
    return frame[take > 0]


def _collectives(ctx: AnalysisContext, act: Activity, segments: pd.DataFrame) -> pd.DataFrame:
    """The rank's collective kernels (for matching across ranks) with the time each has on the path."""
    comm = np.flatnonzero(act.cls == classify.COMMUNICATION)
    rows = act.row[comm]
    collective = np.asarray(classify.names_categorical(ctx, rows, "collective"), dtype=object)
    names = np.asarray(classify.names_categorical(ctx, rows), dtype=object)
    group = np.asarray(classify.names_categorical(ctx, rows, "process_group"), dtype=object)
    frame = pd.DataFrame({"rank": act.rank[comm], "device": act.device[comm], "row": rows,
                          "collective": np.where(collective == "", names, collective), "process_group": group,
                          "step": act.step[comm], "start": act.start[comm], "end": act.end[comm]})
    on_path = segments[segments["category"] == "communication"]
    spans = on_path.groupby("row").agg(path_start=("start_ns", "min"), path_end=("end_ns", "max"))
    frame = frame.merge(spans, left_on="row", right_index=True, how="left")
    frame["path_start"] = frame["path_start"].fillna(-1).astype(np.int64)
    frame["path_end"] = frame["path_end"].fillna(-1).astype(np.int64)
    return frame.drop(columns="row")


def _edge_table(graph: DependencyGraph) -> pd.DataFrame:
    """The graph's edges per rank and kind (how many, how many bind a point), and the rules' counts."""
    rank = graph.rank[graph.dst]
    bound = np.zeros(graph.src.size, dtype=bool)
    bound[graph.binding[graph.binding >= 0]] = True
    key, (ranks, kinds) = iv.combine_keys(rank, graph.kind.astype(np.int64))
    table = pd.DataFrame({"rank": ranks, "edge": np.asarray(EDGE_KINDS, dtype=object)[kinds],
                          "count": np.bincount(key, minlength=ranks.size).astype(np.int64),
                          "binding": np.bincount(key, weights=bound, minlength=ranks.size).astype(np.int64)})
    inferred = [EDGE_KINDS[k] for k in INFERRED_EDGES]
    table["rule"] = np.where(table["edge"].isin(inferred), "inferred", "recorded")
    table["binding"] = table["binding"].astype(np.int64)
    return table[["rank", "edge", "count", "binding", "rule"]]


register_input("critical_path.result", build_result,
               requires=("dependency_graph", "activity", "efficiency.kernel_roofline_factor",
                         "kernels.activity_categories",
                         "classify.codes.name", "classify.categories.name"))

SPEC = AnalysisSpec(
    name=NAME,
    title="Critical path",
    run=analyze,
    requires=("critical_path.result",),
    order=27,
    tables=(
        TableSpec("steps", "Each step's critical path: composition and what bounds it", cross_rank=True,
                  title_without_steps="Each rank's critical path over the whole trace: composition and what bounds it"),
        TableSpec("whatif", "What-if: step time with communication overlapped, no host overhead, kernels at "
                  "their roofline, the slowest rank at the median, and all together (achievable)", cross_rank=True,
                  title_without_steps="What-if: the whole trace's time with communication overlapped, no host "
                  "overhead, kernels at their roofline, the slowest rank at the median, and all together "
                  "(achievable)"),
        TableSpec("segments", "The critical path's segments", sort_by="dur_ns", per_event=True, keep_rows=2000),
        TableSpec("contributors", "Events with the most time on the critical path", sort_by="path_ns"),
        TableSpec("gpu_categories", "GPU compute on the critical path by kernel category, per step",
                  title_without_steps="GPU compute on the critical path by kernel category, whole trace"),
        TableSpec("edges", "The dependency graph's edges by kind"),
        TableSpec("rules", "What the dependency graph could not link, or linked by a rule, per rank"),
    ),
    finding_codes=ranks_step.FINDING_CODES,
    finding_parents=ranks_step.FINDING_PARENTS,
    # a what-if restates time other findings name: it takes only what none of them claimed
    finding_precedence=tuple((code, 250) for code in ranks_step.CODES.values()),
    gather=gather,
    reduce=ranks_step.reduce_parts,
    headline_table="steps",
    page=("/critical-path", "Critical path"),
    summary=ranks_step.report_summary,
)
