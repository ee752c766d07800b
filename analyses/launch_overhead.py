"""Launch overhead: how long launches take, how late GPU work starts, graph replays, launch-bound steps.

Definitions (docs/metrics.md, "Launch overhead"); all times int64 ns:

- Graph launch: a launch call whose name matches :data:`GRAPH_LAUNCH_API` (``cudaGraphLaunch``,
  ``cudaGraphLaunch_v10000``, ``cuGraphLaunch``, ``cuGraphLaunch_ptsz``, ``hipGraphLaunch`` ...).
  One such call is linked (same correlation) to every kernel, memcpy and memset of the graph: a
  *graph replay*. The GPU activity of a replay is *graph-replayed*.
- launch delay = max(0, gpu start - (launch call start + launch call duration)), for every launch
  link of every launch API. A graph replay has ONE launch delay, from the launch call's end to the
  start of its first GPU activity; its other activities get none (``launch_delay_ns`` missing).
- Short kernel: a kernel launched one by one (not graph-replayed) whose GPU duration is shorter
  than its launch call's duration. Graph-replayed kernels are never short.
- Kernel launched one by one: a kernel whose launch call matches :data:`KERNEL_LAUNCH_API`
  (``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``hipLaunchKernel``, ``hipModuleLaunchKernel`` ...).
- Launch-scale gap: a host-bound idle gap (idle_gaps' ``gaps`` table) ended by a kernel launched one
  by one and no longer than ``LAUNCH_SCALE_FACTOR`` x the median duration of the rank's
  kernel-launch calls, kept within [``LAUNCH_SCALE_FLOOR_NS``, ``LAUNCH_SCALE_CAP_NS``]: the GPU
  waited for the host's per-kernel work, not for a data loader, a scheduler or a synchronisation.
- Launch-bound step: at least ``MIN_LAUNCHED_KERNELS`` kernels launched one by one, more than half
  of them short, and launch-scale gaps more than half of the step's host-bound idle (gaps belong to
  the step of the activity that ends them).

The CPU op that issued a launch is the one linked to the launch call by ``cpu_op_links`` (the
innermost when several are), else the innermost CPU op on the launching thread that contains the
call's start (Nsight exports and traces without external ids).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from typing import Any

import numpy as np
import pandas as pd

from traceview import intervals as iv
from traceview.claims import Claims
from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult, Finding, Headline, Options
from traceview.model import Kind, Trace
from traceview.registry import AnalysisSpec, TableSpec, register_input
from traceview.plain import column_rows
from traceview.report_inputs import ReportInputs
from traceview.tables import sample_mask

from . import classify
from .steps import NO_STEP, Activity, activity, analysed_ranks, issuing_cpu_op, per_step, step_column

NAME = "launch_overhead"

#: graph launches, CUDA runtime (any ABI suffix: ``_v10000``, ``_ptsz``) and driver, and HIP
GRAPH_LAUNCH_API = re.compile(r"^(?:cuda|cu|hip)GraphLaunch", re.IGNORECASE)
#: calls that launch one kernel: runtime, driver, HIP, cooperative and extended variants
KERNEL_LAUNCH_API = re.compile(r"^(?:cuda|cu|hip)\w*?Launch\w*?Kernel", re.IGNORECASE)

#: launch-bound verdict: kernels launched one by one per judged step, short share, launch-scale share
MIN_LAUNCHED_KERNELS = 50
SHORT_SHARE = 0.5
LAUNCH_SCALE_SHARE = 0.5
#: launch-scale gap bound: this many median kernel-launch calls, never less than the floor. Eager
#: frameworks spend 5-20 launch calls' worth of Python, dispatcher and autograd work per kernel (median
#: host-bound gap 46 us for 7 us launch calls on hta_df_index_resolver_v100_rank1), while data loading,
#: optimizer steps, schedulers and syncs take milliseconds
LAUNCH_SCALE_FACTOR = 20
LAUNCH_SCALE_FLOOR_NS = 50_000
#: ... and never more than this: first calls that load modules lazily can take milliseconds
LAUNCH_SCALE_CAP_NS = 1_000_000
#: the finding is raised when launch-scale gaps are at least this share of the launch-bound steps' window
REPORT_SHARE = 0.05
HIGH_SHARE = 0.25
#: a few CPU ops causing at least this share of short kernels -> recommend fusion
FUSION_SHARE = 0.5
FUSION_TOP = 3

LAUNCH_COLUMNS = [
    "rank", "device", "step", "api", "kernel", "kind", "cpu_op", "api_start_ns", "api_dur_ns", "gpu_start_ns",
    "gpu_dur_ns", "launch_delay_ns", "short", "graph_replay", "correlation", "api_row", "gpu_row", "cpu_op_row",
]
REPLAY_COLUMNS = [
    "rank", "device", "step", "api", "cpu_op", "api_start_ns", "api_dur_ns", "kernels", "gpu_activities",
    "first_start_ns", "last_end_ns", "gpu_span_ns", "gpu_busy_ns", "launch_delay_ns", "host_gap_ns", "api_row",
]
GRAPH_SUMMARY_COLUMNS = [
    "rank", "replays", "kernels", "median_kernels_per_replay", "graph_busy_ns", "gpu_busy_ns", "graph_busy_share",
    "median_launch_delay_ns", "median_host_gap_ns",
]
STEP_COLUMNS = [
    "rank", "step", "kernels", "graph_kernels", "short_kernels", "short_share", "idle_ns", "host_bound_idle_ns",
    "host_bound_share", "launch_scale_gaps", "launch_scale_idle_ns", "launch_scale_share", "launch_scale_max_ns",
    "launch_bound",
]


@dataclass
class LaunchKinds:
    """How each GPU activity entry (of :func:`steps.activity`) was launched."""

    graph: np.ndarray  # graph-replayed (its launch call is a graph launch)
    first: np.ndarray  # the first activity (by start) of its graph replay
    one_by_one: np.ndarray  # a kernel launched by a kernel-launch API


def launch_kinds(ctx: AnalysisContext) -> LaunchKinds:
    """Graph-replayed / first-of-replay / launched-one-by-one flags per activity entry (cached)."""
    value = ctx.input("launch_overhead.kinds")
    return value


def graph_replayed(ctx: AnalysisContext) -> np.ndarray:
    """Boolean per activity entry of :func:`steps.activity`: launched by a graph launch call."""
    return launch_kinds(ctx).graph


def _launch_kinds(ctx: AnalysisContext, act: Activity) -> LaunchKinds:
    has = act.api_row >= 0
    safe = np.where(has, act.api_row, 0)
    n = len(act)
    graph = has & classify.name_matches(ctx, GRAPH_LAUNCH_API)[safe] if n else np.zeros(0, dtype=bool)
    kernel_api = classify.name_matches(ctx, KERNEL_LAUNCH_API)[safe] if n else np.zeros(0, dtype=bool)
    one_by_one = has & ~graph & kernel_api & (act.kind == int(Kind.KERNEL))
    first = np.zeros(n, dtype=bool)
    g = np.flatnonzero(graph)
    if g.size:
        order = g[np.lexsort((act.end[g], act.start[g], act.api_row[g]))]
        api = act.api_row[order]
        first[order[np.concatenate([[True], api[1:] != api[:-1]])]] = True
    return LaunchKinds(graph=graph, first=first, one_by_one=one_by_one)


def launch_table(ctx: AnalysisContext, act: Activity) -> pd.DataFrame:
    """One row per launch link (launch call -> GPU activity)."""
    trace = ctx.trace
    kinds = launch_kinds(ctx)
    sel = np.flatnonzero(act.api_row >= 0)
    api = act.api_row[sel]
    gpu = act.row[sel]
    api_dur = act.api_end[sel] - act.api_start[sel]
    gpu_dur = act.end[sel] - act.start[sel]
    graph = kinds.graph[sel]
    # a graph replay has one launch delay (its first activity's); the others have none
    delay = pd.arrays.IntegerArray(np.maximum(0, act.start[sel] - act.api_end[sel]), graph & ~kinds.first[sel])
    kind = act.kind[sel]
    op = issuing_cpu_op(ctx, api)
    return pd.DataFrame(
        {
            "rank": act.rank[sel],
            "device": act.device[sel],
            "step": step_column(act.step[sel]),
            "api": classify.names_categorical(ctx, api),
            "kernel": classify.names_categorical(ctx, gpu),
            "kind": pd.Categorical.from_codes(
                kind.astype(np.int64) - int(Kind.KERNEL), categories=["kernel", "memcpy", "memset"]
            ),
            "cpu_op": classify.names_categorical(ctx, op),
            "api_start_ns": act.api_start[sel],
            "api_dur_ns": api_dur,
            "gpu_start_ns": act.start[sel],
            "gpu_dur_ns": gpu_dur,
            "launch_delay_ns": delay,
            "short": (kind == int(Kind.KERNEL)) & ~graph & (gpu_dur < api_dur),
            "graph_replay": graph,
            "correlation": trace.column("correlation")[gpu],
            "api_row": api,
            "gpu_row": gpu,
            "cpu_op_row": op,
        },
        columns=LAUNCH_COLUMNS,
    )


def _by_api(launches: pd.DataFrame) -> pd.DataFrame:
    """Per rank and API: launch calls, GPU activities, kernels, short kernels, call durations (one
    per call) and launch delays (one per call for graph launches, one per activity otherwise)."""
    cols = ["rank", "api", "launches", "gpu_activities", "kernels", "short_kernels", "api_dur_mean_ns",
            "api_dur_median_ns", "launch_delay_mean_ns", "launch_delay_median_ns", "launch_delay_p95_ns",
            "launch_delay_max_ns"]
    if launches.empty:
        return pd.DataFrame(columns=cols)
    # one int64 code per (rank, API) in the order the sorted groupby on them used (the API is a
    # Categorical: its category order), then pandas' own mean/median/quantile on that one key
    group, (g_rank, g_api) = iv.combine_keys(launches["rank"].to_numpy(np.int64),
                                             launches["api"].cat.codes.to_numpy().astype(np.int64))
    n_groups = g_rank.size
    first = np.full(n_groups, len(launches), dtype=np.int64)
    np.minimum.at(first, group, np.arange(len(launches), dtype=np.int64))
    out = launches[["rank", "api"]].take(first).reset_index(drop=True)
    one_per_call = ~launches["api_row"].duplicated().to_numpy()
    calls = pd.Series(launches["api_dur_ns"].to_numpy()[one_per_call]).groupby(group[one_per_call])
    delay = pd.Series(launches["launch_delay_ns"].astype("float64").to_numpy()).groupby(group)
    out["launches"] = np.bincount(group[one_per_call], minlength=n_groups).astype(np.int64)
    out["gpu_activities"] = np.bincount(group, minlength=n_groups).astype(np.int64)
    out["kernels"] = np.bincount(group, weights=(launches["kind"] == "kernel").to_numpy(),
                                 minlength=n_groups).astype(np.int64)
    out["short_kernels"] = np.bincount(group, weights=launches["short"].to_numpy(bool),
                                       minlength=n_groups).astype(np.int64)
    out["api_dur_mean_ns"] = calls.mean().round().astype(np.int64).to_numpy()
    out["api_dur_median_ns"] = calls.median().round().astype(np.int64).to_numpy()
    out["launch_delay_mean_ns"] = delay.mean().round().astype(np.int64).to_numpy()
    out["launch_delay_median_ns"] = delay.median().round().astype(np.int64).to_numpy()
    out["launch_delay_p95_ns"] = delay.quantile(0.95).round().astype(np.int64).to_numpy()
    out["launch_delay_max_ns"] = delay.max().astype(np.int64).to_numpy()
    return out.sort_values(["rank", "launches"], ascending=[True, False]).reset_index(drop=True)[cols]


def _tiny_kernel_ops(launches: pd.DataFrame, options: Options) -> pd.DataFrame:
    short = launches.loc[launches["short"], ["rank", "cpu_op", "gpu_dur_ns", "api_dur_ns"]]
    if short.empty or not isinstance(short["cpu_op"].dtype, pd.CategoricalDtype):
        frame = short.assign(cpu_op=short["cpu_op"].astype(str).replace("", "(unknown)"))
        g = frame.groupby(["rank", "cpu_op"], sort=False)
        out = pd.DataFrame({"short_kernels": g.size(), "short_gpu_ns": g["gpu_dur_ns"].sum(),
                            "launch_api_ns": g["api_dur_ns"].sum()}).reset_index()
    else:
        out = _short_by_op(short)
    out = out.sort_values(["rank", "short_kernels", "cpu_op"], ascending=[True, False, True])
    return out.groupby("rank", sort=True).head(options.top_n).reset_index(drop=True)


def _short_by_op(short: pd.DataFrame) -> pd.DataFrame:
    """Short kernels and their time per (rank, op label): the groupby on the op names, worked out on
    the category codes. Rows in key order: the caller's sort on (rank, count, name) has no ties, so
    the order it starts from does not matter."""
    labels = np.array(["(unknown)" if c == "" else str(c) for c in short["cpu_op"].cat.categories], dtype=object)
    distinct, place = np.unique(labels, return_inverse=True)  # an op named "(unknown)" joins the unknown
    op = place.reshape(-1).astype(np.int64)[short["cpu_op"].cat.codes.to_numpy().astype(np.int64)]
    group, (k_rank, k_op) = iv.combine_keys(short["rank"].to_numpy(), op)
    out = pd.DataFrame({"rank": k_rank, "cpu_op": pd.array(distinct[k_op], dtype="str"),
                        "short_kernels": np.bincount(group, minlength=k_rank.size).astype(np.int64)})
    for name, source in (("short_gpu_ns", "gpu_dur_ns"), ("launch_api_ns", "api_dur_ns")):
        sums = np.zeros(k_rank.size, dtype=np.int64)
        np.add.at(sums, group, short[source].to_numpy(np.int64))
        out[name] = sums
    return out


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns})


def graph_replay_table(ctx: AnalysisContext, act: Activity) -> pd.DataFrame:
    """One row per graph replay (graph launch call): its GPU activities, span, launch delay, and the
    host gap since the previous graph launch call on the same thread."""
    trace = ctx.trace
    g = np.flatnonzero(launch_kinds(ctx).graph)
    if g.size == 0:
        return _empty(REPLAY_COLUMNS)
    order = g[np.lexsort((act.end[g], act.start[g], act.api_row[g]))]
    api_of = act.api_row[order]
    head = np.flatnonzero(np.concatenate([[True], api_of[1:] != api_of[:-1]]))
    first = order[head]  # the replay's first activity (earliest start)
    api = api_of[head]
    kernels = np.add.reduceat((act.kind[order] == int(Kind.KERNEL)).astype(np.int64), head)
    last_end = np.maximum.reduceat(act.end[order], head)
    busy_key, busy = iv.total_by(api_of, act.start[order], act.end[order])  # omits zero-length replays
    busy_full = np.zeros(api.size, dtype=np.int64)
    busy_full[np.searchsorted(api, busy_key)] = busy
    api_start, api_end = act.api_start[first], act.api_end[first]
    return pd.DataFrame(
        {
            "rank": act.rank[first],
            "device": act.device[first],
            "step": step_column(act.step[first]),
            "api": classify.names_categorical(ctx, api),
            "cpu_op": classify.names_categorical(ctx, issuing_cpu_op(ctx, api)),
            "api_start_ns": api_start,
            "api_dur_ns": api_end - api_start,
            "kernels": kernels,
            "gpu_activities": np.diff(np.append(head, order.size)),
            "first_start_ns": act.start[first],
            "last_end_ns": last_end,
            "gpu_span_ns": last_end - act.start[first],
            "gpu_busy_ns": busy_full,
            "launch_delay_ns": np.maximum(0, act.start[first] - api_end),
            "host_gap_ns": _host_gaps(trace, act.rank[first], api, api_start, api_end),
            "api_row": api,
        },
        columns=REPLAY_COLUMNS,
    )


def _host_gaps(
    trace: Trace, rank: np.ndarray, api: np.ndarray, start: np.ndarray, end: np.ndarray
) -> pd.arrays.IntegerArray:
    """Per graph launch call: its start minus the end of the previous graph launch call on the same
    (rank, process, thread); missing for a thread's first."""
    codes, _ = iv.combine_keys(rank, trace.column("pid")[api], trace.column("tid")[api])
    order = np.lexsort((start, codes))
    gap = np.zeros(api.size, dtype=np.int64)
    missing = np.ones(api.size, dtype=bool)
    same = codes[order][1:] == codes[order][:-1]
    later = order[1:][same]
    gap[later] = np.maximum(0, start[later] - end[order[:-1][same]])
    missing[later] = False
    return pd.arrays.IntegerArray(gap, missing)


def graph_summary(replays: pd.DataFrame, act: Activity, graph: np.ndarray) -> pd.DataFrame:
    """Per rank with graph replays: replays, kernels, median kernels per replay, GPU time in graphs
    (union of graph-replayed activity, summed over devices) and its share of GPU busy time, median
    launch delay and median host gap between replays."""
    if replays.empty:
        return _empty(GRAPH_SUMMARY_COLUMNS)
    keys, _ = iv.combine_keys(act.rank, act.device)
    gk, graph_busy = iv.total_by(keys[graph], act.start[graph], act.end[graph])
    ak, busy = iv.total_by(keys, act.start, act.end)
    rank_of_key = np.zeros(int(keys.max()) + 1, dtype=np.int64)
    rank_of_key[keys] = act.rank
    per_rank = pd.Series(busy).groupby(rank_of_key[ak]).sum()
    in_graph = pd.Series(graph_busy).groupby(rank_of_key[gk]).sum()
    g = replays.assign(gap=replays["host_gap_ns"].astype("float64")).groupby("rank", sort=True)
    out = pd.DataFrame(
        {
            "replays": g.size(),
            "kernels": g["kernels"].sum(),
            "median_kernels_per_replay": g["kernels"].median().astype("float64"),
            "median_launch_delay_ns": g["launch_delay_ns"].median().round().astype(np.int64),
            "median_host_gap_ns": pd.array(g["gap"].median().round(), dtype="Int64"),
        }
    )
    out["graph_busy_ns"] = in_graph.reindex(out.index, fill_value=0).astype(np.int64)
    out["gpu_busy_ns"] = per_rank.reindex(out.index, fill_value=0).astype(np.int64)
    out["graph_busy_share"] = out["graph_busy_ns"] / out["gpu_busy_ns"].clip(lower=1)
    return out.reset_index()[GRAPH_SUMMARY_COLUMNS]


def _launch_scale_bounds(act: Activity, kinds: LaunchKinds) -> pd.Series:
    """Per rank: the longest host-bound gap that still counts as launch-scale (see module docstring)."""
    sel = kinds.one_by_one
    dur = pd.Series(act.api_end[sel] - act.api_start[sel]).groupby(act.rank[sel]).median()
    return (LAUNCH_SCALE_FACTOR * dur).round().clip(LAUNCH_SCALE_FLOOR_NS, LAUNCH_SCALE_CAP_NS).astype(np.int64)


def launch_scale_gaps(ctx: AnalysisContext) -> np.ndarray:
    """Boolean per row of idle_gaps' ``gaps`` table: a launch-scale gap (see module docstring)."""
    value = ctx.input("launch_overhead.launch_scale")
    return value


def _launch_scale_gaps(ctx: AnalysisContext) -> np.ndarray:
    trace = ctx.trace
    gaps = ctx.input("idle_gaps.tables")["gaps"]
    if gaps.empty:
        return np.zeros(0, dtype=bool)
    bounds = _launch_scale_bounds(activity(ctx), launch_kinds(ctx))
    api = gaps["api_row"].to_numpy()
    safe = np.where(api >= 0, api, 0)
    one_by_one = classify.name_matches(ctx, KERNEL_LAUNCH_API) & ~classify.name_matches(ctx, GRAPH_LAUNCH_API)
    kernel = trace.kind_codes()[gaps["next_row"].to_numpy()] == int(Kind.KERNEL)
    bound = gaps["rank"].map(bounds).fillna(-1).to_numpy(dtype=np.int64)  # -1: no kernel launched one by one
    return ((gaps["cause"] == classify.HOST_BOUND).to_numpy() & (api >= 0) & one_by_one[safe] & kernel
            & (gaps["dur_ns"].to_numpy() <= bound))


def _by_step(parts: list[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]) -> pd.DataFrame:
    """Exact int64 sums of each part's value columns per (rank, step_key): the whole trace
    (``NO_STEP``) and each step, over the keys of all parts (0 where a part has no row of a key),
    in key order. A part is (rank, step_key, {column: values})."""
    ranks, steps = [], []
    for rank, step_key, _ in parts:
        in_step = step_key != NO_STEP
        ranks += [rank, rank[in_step]]
        steps += [np.full(rank.size, NO_STEP, dtype=np.int64), step_key[in_step]]
    codes, (k_rank, k_step) = iv.combine_keys(np.concatenate(ranks).astype(np.int64),
                                              np.concatenate(steps).astype(np.int64))
    out: dict[str, np.ndarray] = {"rank": k_rank, "step_key": k_step}
    offset = 0
    for rank, step_key, values in parts:
        in_step = step_key != NO_STEP
        mine = codes[offset:offset + rank.size + int(in_step.sum())]
        offset += mine.size
        for name, value in values.items():
            sums = np.zeros(k_rank.size, dtype=np.int64)
            np.add.at(sums, mine, np.concatenate([value, value[in_step]]).astype(np.int64))
            out[name] = sums
    return pd.DataFrame(out)


def _steps(ctx: AnalysisContext, act: Activity, gaps: pd.DataFrame) -> pd.DataFrame:
    """Per rank and step (and whole trace, step None): the launch-bound verdict and its inputs."""
    kinds = launch_kinds(ctx)
    kernel = act.kind == int(Kind.KERNEL)
    counts = {
        "kernels": kinds.one_by_one.astype(np.int64), "graph_kernels": (kinds.graph & kernel).astype(np.int64),
        "short_kernels": (kinds.one_by_one & (act.end - act.start < act.api_end - act.api_start)).astype(np.int64),
    }
    dur = gaps["dur_ns"].to_numpy()
    scale = launch_scale_gaps(ctx)
    idle = {
        "idle_ns": dur, "host_bound_idle_ns": np.where(gaps["cause"] == classify.HOST_BOUND, dur, 0),
        "launch_scale_gaps": scale.astype(np.int64), "launch_scale_idle_ns": np.where(scale, dur, 0),
    }
    out = _by_step([(act.rank, act.step, counts), (gaps["rank"].to_numpy(),
                                                   gaps["step"].fillna(NO_STEP).to_numpy(dtype=np.int64), idle)])
    share = np.divide(out["short_kernels"], out["kernels"].clip(lower=1))
    out["short_share"] = np.where(out["kernels"] > 0, share, 0.0)
    out["host_bound_share"] = out["host_bound_idle_ns"] / out["idle_ns"].clip(lower=1)
    out["launch_scale_share"] = out["launch_scale_idle_ns"] / out["host_bound_idle_ns"].clip(lower=1)
    bounds = _launch_scale_bounds(act, kinds)
    out["launch_scale_max_ns"] = pd.array(out["rank"].map(bounds), dtype="Int64")
    out["launch_bound"] = ((out["kernels"] >= MIN_LAUNCHED_KERNELS) & (out["short_share"] > SHORT_SHARE)
                           & (out["launch_scale_share"] > LAUNCH_SCALE_SHARE))
    out["step"] = step_column(out["step_key"])
    out = out.sort_values(["rank", "step_key"]).reset_index(drop=True)
    return out[STEP_COLUMNS]


def compute(ctx: AnalysisContext) -> dict[str, pd.DataFrame]:
    value = ctx.input("launch_overhead.tables")
    return value


def _compute(ctx: AnalysisContext) -> dict[str, pd.DataFrame]:
    options = ctx.options
    act = activity(ctx)
    launches = launch_table(ctx, act)
    replays = graph_replay_table(ctx, act)
    gaps = ctx.input("idle_gaps.tables")["gaps"]
    return {
        "launches": launches,
        "by_api": _by_api(launches),
        "graph_replays": replays,
        "graph_summary": graph_summary(replays, act, launch_kinds(ctx).graph),
        "tiny_kernel_ops": _tiny_kernel_ops(launches, options),
        "steps": _steps(ctx, act, gaps),
    }


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    act = activity(ctx)
    tables = compute(ctx)
    # shallow copies: a caller adding columns does not alter the cached tables other analyses read
    result = AnalysisResult(name=NAME, tables={k: v.copy(deep=False) for k, v in tables.items()})
    ranks = analysed_ranks(ctx)
    idle = np.setdiff1d(ranks, act.rank)
    result.warn("no GPU activity in the trace: no launches to analyse", idle)
    result.warn("no launch links (correlation ids) between host calls and GPU activity",
                np.setdiff1d(np.setdiff1d(ranks, tables["launches"]["rank"].to_numpy(np.int64)), idle))
    if tables["launches"].empty:
        return result
    for rank, note in _graph_notes(tables["graph_summary"], tables["graph_replays"]):
        result.warn(note, [rank])
    gaps = ctx.input("idle_gaps.tables")["gaps"]
    result.findings.extend(_findings(tables, act, gaps[launch_scale_gaps(ctx)]))
    return result


def _graph_notes(summary: pd.DataFrame, replays: pd.DataFrame) -> list[tuple[int, str]]:
    """A note per rank with graph replays: how they are counted (so their figures read right)."""
    notes = []
    for row in summary.itertuples(index=False):
        apis = ", ".join(sorted({str(a) for a in replays.loc[replays["rank"] == row.rank, "api"]}))
        notes.append((int(row.rank),
            f"rank {row.rank}: {row.replays:,} graph replays ({apis}) ran {row.kernels:,} kernels "
            f"({100 * row.graph_busy_share:.0f}% of GPU busy time): each replay has one launch delay (launch call "
            "end to its first kernel); graph-replayed kernels are neither short nor counted as launched one by one"
        ))
    return notes


def _windows(act: Activity) -> dict[tuple[int, int], int]:
    """GPU window per (rank, step) summed over devices; step NO_STEP = whole trace."""
    out: dict[tuple[int, int], int] = {}
    for steps_key in (np.full(len(act), NO_STEP), act.step):
        sel = steps_key != NO_STEP if steps_key is act.step else np.ones(len(act), dtype=bool)
        codes, (r, _, s) = iv.combine_keys(act.rank[sel], act.device[sel], steps_key[sel])
        k, lo, hi = iv.window_by(codes, act.start[sel], act.end[sel])
        for i in range(k.size):
            key = (int(r[k[i]]), int(s[k[i]]))
            out[key] = out.get(key, 0) + int(hi[i] - lo[i])
    return out


def _findings(tables: dict[str, pd.DataFrame], act: Activity, scale_gaps: pd.DataFrame) -> list[Finding]:
    """``launch_bound`` per rank whose launch-bound steps lose enough of their window to launch-scale gaps."""
    findings: list[Finding] = []
    steps = tables["steps"]
    windows = _windows(act)
    # each rank's rows, found once (not a filter of every row per rank)
    gaps_of = scale_gaps.groupby("rank", sort=False).indices if len(scale_gaps) else {}
    launches = tables["launches"]
    kernels = launches[(launches["kind"] == "kernel").to_numpy(bool)]
    kernels = kernels[["rank", "api_dur_ns", "gpu_dur_ns", "short", "graph_replay"]]
    kernels_of = kernels.groupby("rank", sort=False).indices if len(kernels) else {}
    none = np.zeros(0, dtype=np.int64)
    for rank, rows in steps.groupby("rank", sort=True):
        rank = int(rank)
        per_step_rows = rows[rows["step"].notna()]
        judged = per_step_rows if len(per_step_rows) else rows[rows["step"].isna()]
        bound = judged[judged["launch_bound"]]
        if bound.empty:
            continue
        mine = scale_gaps.iloc[gaps_of.get(rank, none)]
        if len(per_step_rows):  # only the gaps of the launch-bound steps
            mine = mine[mine["step"].isin(bound["step"].astype("int64").tolist())]
        claims = Claims.of(mine["rank"].to_numpy(), mine["device"].to_numpy(), mine["start_ns"].to_numpy(),
                           mine["end_ns"].to_numpy())
        window = sum(windows.get((rank, NO_STEP if pd.isna(s) else int(s)), 0) for s in bound["step"])
        share = claims.total_ns() / window if window else 0.0
        if share < REPORT_SHARE:
            continue
        mine_kernels = kernels.iloc[kernels_of.get(rank, none)]
        findings.append(_launch_bound(tables, mine_kernels, rank, judged, bound, claims, share, window,
                                      bool(len(per_step_rows))))
    return findings


def _launch_bound(tables: dict[str, pd.DataFrame], kernels: pd.DataFrame, rank: int, judged: pd.DataFrame,
                  bound: pd.DataFrame, claims: Claims, share: float, window: int, has_steps: bool) -> Finding:
    """The finding of one launch-bound rank (``kernels``: its kernel launches)."""
    recommendation, evidence = _recommend(kernels, tables["tiny_kernel_ops"], rank)
    short_pct = 100 * bound["short_kernels"].sum() / max(int(bound["kernels"].sum()), 1)
    idle = claims.total_ns()
    return Finding(
        code="launch_bound",
        part_of="host_bound_gaps",  # its cost is launch-scale host-bound idle time
        title=f"Rank {rank} is launch-bound in {len(bound)} of {len(judged)} "
        f"{'steps' if has_steps else 'trace windows'}: {short_pct:.0f}% of the kernels launched one by one "
        "run shorter than their launch calls and the GPU waits on launches",
        severity="high" if share >= HIGH_SHARE else "medium",
        analysis=NAME,
        recommendation=recommendation,
        cost_ns_per_step=per_step(idle, len(bound)) if has_steps else idle,
        cost_share=share,
        rank=rank,
        headline=Headline("Launch-bound: {} of the kernels launched one by one run shorter than their launch calls",
                          short_pct / 100),
        claims=claims,
        evidence={
            "launch_bound_steps": [None if pd.isna(s) else int(s) for s in bound["step"]],
            "launch_scale_gaps": len(claims),
            "launch_scale_idle_ns": idle,
            "launch_scale_max_ns": int(bound["launch_scale_max_ns"].iloc[0]),
            "host_bound_idle_ns": int(bound["host_bound_idle_ns"].sum()),
            "window_ns": window,
            "kernels": int(bound["kernels"].sum()),
            "short_kernels": int(bound["short_kernels"].sum()),
            **evidence,
        },
    )


def _recommend(kernels: pd.DataFrame, tiny_ops: pd.DataFrame, rank: int) -> tuple[str, dict]:
    one_by_one = kernels[~kernels["graph_replay"]]
    short = one_by_one[one_by_one["short"]]
    graph_share = float(kernels["graph_replay"].sum() / max(len(kernels), 1))
    ops = tiny_ops[tiny_ops["rank"] == rank].head(FUSION_TOP)
    top_share = float(ops["short_kernels"].sum() / max(len(short), 1))
    evidence = {
        "median_api_dur_ns": int(one_by_one["api_dur_ns"].median()) if len(one_by_one) else 0,
        "median_short_kernel_ns": int(short["gpu_dur_ns"].median()) if len(short) else 0,
        "graph_kernel_share": graph_share,
        "top_tiny_kernel_ops": [
            {"cpu_op": r.cpu_op, "short_kernels": int(r.short_kernels)} for r in ops.itertuples()
        ],
    }
    names = ", ".join(f"`{n}`" for n in ops["cpu_op"])
    if graph_share > 0:
        text = (f"{100 * graph_share:.0f}% of the kernels are already replayed from graphs; the launch-bound ones "
                f"are launched one by one outside them{f' (mostly by {names})' if len(ops) else ''}: capture "
                "those regions in the graphs too (e.g. full rather than piecewise graphs), or fuse their kernels "
                "(torch.compile, fused kernels) so fewer launches remain.")
    elif top_share >= FUSION_SHARE and len(ops):
        text = (f"A few CPU ops launch most of the tiny kernels ({names}): fuse them (torch.compile, fused "
                "kernels such as foreach/fused optimizers) so one launch does the work of many; CUDA graphs "
                "(torch.compile mode='reduce-overhead', torch.cuda.CUDAGraph) remove the remaining launch cost.")
    else:
        text = ("Many tiny kernels are each cheaper than their launch: capture the step in a CUDA graph "
                "(torch.compile mode='reduce-overhead' or torch.cuda.CUDAGraph) so it replays with one launch, "
                "compile it (torch.compile) to fuse kernels, or use larger batches so each kernel does more work.")
    return text, evidence


register_input("launch_overhead.kinds", lambda ctx: _launch_kinds(ctx, activity(ctx)),
               requires=("activity", "classify.codes.name"))
register_input("launch_overhead.launch_scale", _launch_scale_gaps,
               requires=("idle_gaps.tables", "activity", "launch_overhead.kinds", "classify.codes.name"))
register_input("launch_overhead.tables", _compute,
               requires=("activity", "launch_overhead.kinds", "links.runtime_ops", "cpu_op_nesting",
                         "classify.codes.name", "classify.categories.name", "idle_gaps.tables",
                         "launch_overhead.launch_scale"))

# ------------------------------------------------------------------------------------ report hooks

#: points in the report's launch-overhead scatter (sampled beyond, the count stated)
MAX_LAUNCH_POINTS = 2000


def launch_points(inputs: ReportInputs) -> dict[str, Any]:
    """Up to ``MAX_LAUNCH_POINTS`` launches for the scatter chart: the whole table when it is
    small, else the rows of the table's declared sample (the same rows in memory and in a job)."""
    launches = inputs.table(NAME, "launches")
    if launches is None or launches.empty:
        return {"total": 0, "points": []}
    total, limit = inputs.rows(NAME, "launches"), MAX_LAUNCH_POINTS
    spec = SPEC.table("launches")
    sampled = total > limit
    if sampled and spec.sample_by:
        launches = launches[sample_mask(launches, spec.sample_by, min(limit, spec.sample_rows))]
    else:
        launches = launches.head(limit)
    cols = ["rank", "api", "kernel", "kind", "api_dur_ns", "gpu_dur_ns", "launch_delay_ns", "short"]
    points = column_rows(launches[cols], cols)
    return {"total": total, "points": points, "sampled": sampled}


SPEC = AnalysisSpec(
    name=NAME,
    title="Launch overhead",
    run=analyze,
    requires=("activity", "launch_overhead.tables", "idle_gaps.tables", "launch_overhead.launch_scale"),
    order=30,
    tables=(
        TableSpec("launches", "Launches (host call -> GPU activity)", sort_by="launch_delay_ns",
                  sample_by="gpu_start_ns", sample_rows=2000, per_event=True),
        TableSpec("by_api", "Launch APIs"),
        TableSpec("graph_summary", "Graph replays per rank"),
        TableSpec("graph_replays", "Graph replays (one row per graph launch call)", sort_by="gpu_span_ns",
                  per_event=True),
        TableSpec("tiny_kernel_ops", "CPU ops launching the most short kernels", sort_by="short_kernels"),
        TableSpec("steps", "Launch-bound steps", title_without_steps="Launch-bound windows (no steps: each rank's "
                  "whole trace)"),
    ),
    finding_codes=("launch_bound",),
    finding_parents=(("launch_bound", "host_bound_gaps"),),
    finding_precedence=(("launch_bound", 60),),
    page=("/launch", "Launch overhead"),
    headline_table="by_api",
    charts=(("launches", launch_points),),
)
