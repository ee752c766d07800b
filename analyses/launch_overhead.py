"""Launch overhead: how long launches take, how late GPU work starts, and launch-bound steps.

Definitions (docs/metrics.md); all times int64 ns:

- launch delay = max(0, gpu start - (launch call start + launch call duration)), for every launch
  API (CUDA runtime and driver, HIP ``hip*``, ``cudaGraphLaunch`` fanning out to its kernels, async
  memcpy/memset) — i.e. every launch link, whatever the API name.
- Short kernel: a kernel whose GPU duration is shorter than the duration of its launch call (for a
  ``cudaGraphLaunch``, the call's duration is compared with each kernel of the graph).
- Launch-bound step: host-bound gaps dominate idle (more than half of the step's idle) AND most
  kernels (more than half) are shorter than their launch calls.

The CPU op that issued a launch is the one linked to the launch call by ``cpu_op_links`` (the
innermost when several are), else the innermost CPU op on the launching thread that contains the
call's start (Nsight exports and traces without external ids).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.findings import AnalysisResult, Finding, Options
from traceview.model import Kind, Trace
from traceview.registry import AnalysisSpec, TableSpec

from . import classify
from traceview import intervals as iv
from .idle_gaps import HOST_BOUND
from .idle_gaps import compute as idle_gap_tables
from .steps import NO_STEP, Activity, activity, cached, per_step, step_column

NAME = "launch_overhead"

#: launch-bound verdict thresholds
HOST_BOUND_SHARE = 0.5
SHORT_SHARE = 0.5
#: the finding is raised when launch-bound steps' host-bound idle is at least this share of their window
REPORT_SHARE = 0.05
HIGH_SHARE = 0.25
#: a few CPU ops causing at least this share of short kernels -> recommend fusion
FUSION_SHARE = 0.5
FUSION_TOP = 3

LAUNCH_COLUMNS = [
    "rank",
    "device",
    "step",
    "api",
    "kernel",
    "kind",
    "cpu_op",
    "api_start_ns",
    "api_dur_ns",
    "gpu_start_ns",
    "gpu_dur_ns",
    "launch_delay_ns",
    "short",
    "correlation",
    "api_row",
    "gpu_row",
    "cpu_op_row",
]


def issuing_cpu_op(trace: Trace, options: Options, api_rows: np.ndarray) -> np.ndarray:
    """Row of the CPU op that issued each runtime call (-1 when unknown)."""
    out = np.full(api_rows.size, -1, dtype=np.int64)
    if api_rows.size == 0:
        return out
    start_all = trace.column("start_ns")
    op_rows, rt_rows = trace.cpu_op_links()
    if op_rows.size:
        # innermost = latest start among the ops linked to one call
        order = np.lexsort((start_all[op_rows], rt_rows))
        rt_sorted, op_sorted = rt_rows[order], op_rows[order]
        last = np.flatnonzero(np.concatenate([rt_sorted[1:] != rt_sorted[:-1], [True]]))
        rt_u, op_u = rt_sorted[last], op_sorted[last]
        pos = np.clip(np.searchsorted(rt_u, api_rows), 0, rt_u.size - 1)
        hit = rt_u[pos] == api_rows
        out[hit] = op_u[pos[hit]]
    missing = np.flatnonzero(out < 0)
    if missing.size:
        ops = cached(trace, "launch_overhead.cpu_ops", options, lambda: _cpu_ops(trace))
        if ops[0].size:
            q = api_rows[missing]
            rank = trace.column("rank").astype(np.int64)
            pid, tid = trace.column("pid"), trace.column("tid")
            n = ops[0].size
            codes, _ = iv.combine_keys(
                np.concatenate([rank[ops[0]], rank[q]]),
                np.concatenate([pid[ops[0]], pid[q]]),
                np.concatenate([tid[ops[0]], tid[q]]),
            )
            t = start_all[q]
            hit = iv.innermost_covering(codes[:n], ops[1], ops[2], codes[n:], t, t + 1)
            out[missing] = np.where(hit >= 0, ops[0][np.clip(hit, 0, None)], -1)
    return out


def _cpu_ops(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = np.flatnonzero(trace.kind_codes() == int(Kind.CPU_OP))
    start = trace.column("start_ns")[rows]
    return rows, start, start + np.maximum(trace.column("dur_ns")[rows], 0)


def launch_table(trace: Trace, options: Options, act: Activity) -> pd.DataFrame:
    """One row per launch link (launch call -> GPU activity)."""
    sel = np.flatnonzero(act.api_row >= 0)
    api = act.api_row[sel]
    gpu = act.row[sel]
    api_dur = act.api_end[sel] - act.api_start[sel]
    gpu_dur = act.end[sel] - act.start[sel]
    delay = np.maximum(0, act.start[sel] - act.api_end[sel])
    kind = act.kind[sel]
    op = issuing_cpu_op(trace, options, api)
    return pd.DataFrame(
        {
            "rank": act.rank[sel],
            "device": act.device[sel],
            "step": step_column(act.step[sel]),
            "api": classify.names_categorical(trace, api),
            "kernel": classify.names_categorical(trace, gpu),
            "kind": pd.Categorical.from_codes(
                kind.astype(np.int64) - int(Kind.KERNEL), categories=["kernel", "memcpy", "memset"]
            ),
            "cpu_op": classify.names_categorical(trace, op),
            "api_start_ns": act.api_start[sel],
            "api_dur_ns": api_dur,
            "gpu_start_ns": act.start[sel],
            "gpu_dur_ns": gpu_dur,
            "launch_delay_ns": delay,
            "short": (kind == int(Kind.KERNEL)) & (gpu_dur < api_dur),
            "correlation": trace.column("correlation")[gpu],
            "api_row": api,
            "gpu_row": gpu,
            "cpu_op_row": op,
        },
        columns=LAUNCH_COLUMNS,
    )


def _by_api(launches: pd.DataFrame) -> pd.DataFrame:
    if launches.empty:
        return pd.DataFrame(
            columns=["rank", "api", "launches", "kernels", "short_kernels", "api_dur_mean_ns", "api_dur_median_ns",
                     "launch_delay_mean_ns", "launch_delay_median_ns", "launch_delay_p95_ns", "launch_delay_max_ns"]
        )
    g = launches.groupby(["rank", "api"], sort=True)
    out = pd.DataFrame(
        {
            "launches": g.size(),
            "kernels": g["kind"].agg(lambda k: int((k == "kernel").sum())),
            "short_kernels": g["short"].sum().astype(np.int64),
            "api_dur_mean_ns": g["api_dur_ns"].mean().round().astype(np.int64),
            "api_dur_median_ns": g["api_dur_ns"].median().round().astype(np.int64),
            "launch_delay_mean_ns": g["launch_delay_ns"].mean().round().astype(np.int64),
            "launch_delay_median_ns": g["launch_delay_ns"].median().round().astype(np.int64),
            "launch_delay_p95_ns": g["launch_delay_ns"].quantile(0.95).round().astype(np.int64),
            "launch_delay_max_ns": g["launch_delay_ns"].max().astype(np.int64),
        }
    ).reset_index()
    return out.sort_values(["rank", "launches"], ascending=[True, False]).reset_index(drop=True)


def _tiny_kernel_ops(launches: pd.DataFrame, options: Options) -> pd.DataFrame:
    short = launches.loc[launches["short"], ["rank", "cpu_op", "gpu_dur_ns", "api_dur_ns"]]
    frame = short.assign(cpu_op=short["cpu_op"].astype(str).replace("", "(unknown)"))
    g = frame.groupby(["rank", "cpu_op"], sort=False)
    out = pd.DataFrame(
        {
            "short_kernels": g.size(),
            "short_gpu_ns": g["gpu_dur_ns"].sum(),
            "launch_api_ns": g["api_dur_ns"].sum(),
        }
    ).reset_index()
    out = out.sort_values(["rank", "short_kernels", "cpu_op"], ascending=[True, False, True])
    return out.groupby("rank", sort=True).head(options.top_n).reset_index(drop=True)


def _steps(launches: pd.DataFrame, by_cause: pd.DataFrame) -> pd.DataFrame:
    """Per rank and step (and whole trace, step None): the launch-bound verdict and its inputs."""
    kernels = launches.loc[launches["kind"] == "kernel", ["rank", "step", "short"]]
    ksteps = kernels["step"].fillna(NO_STEP).astype(np.int64)
    per = [
        kernels.assign(step_key=NO_STEP).groupby(["rank", "step_key"])["short"].agg(["size", "sum"]),
        kernels.assign(step_key=ksteps.to_numpy())[ksteps.to_numpy() != NO_STEP]
        .groupby(["rank", "step_key"])["short"].agg(["size", "sum"]),
    ]
    k = pd.concat(per).rename(columns={"size": "kernels", "sum": "short_kernels"})
    bc = by_cause.assign(step_key=by_cause["step"].fillna(NO_STEP).astype(np.int64))
    idle = bc.groupby(["rank", "step_key"])["idle_ns"].sum().rename("idle_ns")
    host = bc[bc["cause"] == HOST_BOUND].groupby(["rank", "step_key"])["idle_ns"].sum().rename("host_bound_idle_ns")
    out = pd.concat([k, idle, host], axis=1).fillna(0).reset_index()
    out = out.rename(columns={"level_0": "rank", "level_1": "step_key"})
    for c in ("kernels", "short_kernels", "idle_ns", "host_bound_idle_ns"):
        out[c] = out[c].astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["short_share"] = np.where(out["kernels"] > 0, out["short_kernels"] / out["kernels"].clip(lower=1), 0.0)
        out["host_bound_share"] = np.where(
            out["idle_ns"] > 0, out["host_bound_idle_ns"] / out["idle_ns"].clip(lower=1), 0.0
        )
    out["launch_bound"] = (out["host_bound_share"] > HOST_BOUND_SHARE) & (out["short_share"] > SHORT_SHARE)
    out["step"] = step_column(out["step_key"])
    out = out.sort_values(["rank", "step_key"]).drop(columns="step_key").reset_index(drop=True)
    return out[["rank", "step", "kernels", "short_kernels", "short_share", "idle_ns", "host_bound_idle_ns",
                "host_bound_share", "launch_bound"]]


def compute(trace: Trace, options: Options) -> dict[str, pd.DataFrame]:
    return cached(trace, "launch_overhead.tables", options, lambda: _compute(trace, options))


def _compute(trace: Trace, options: Options) -> dict[str, pd.DataFrame]:
    act = activity(trace, options)
    launches = launch_table(trace, options, act)
    gaps = idle_gap_tables(trace, options)
    return {
        "launches": launches,
        "by_api": _by_api(launches),
        "tiny_kernel_ops": _tiny_kernel_ops(launches, options),
        "steps": _steps(launches, gaps["by_cause"]),
    }


def analyze(trace: Trace, options: Options) -> AnalysisResult:
    act = activity(trace, options)
    tables = compute(trace, options)
    # shallow copies: a caller adding columns does not alter the cached tables other analyses read
    result = AnalysisResult(name=NAME, tables={k: v.copy(deep=False) for k, v in tables.items()})
    if len(act) == 0:
        result.warnings.append("no GPU activity in the trace: no launches to analyse")
        return result
    if tables["launches"].empty:
        result.warnings.append("no launch links (correlation ids) between host calls and GPU activity")
        return result
    result.findings.extend(_findings(tables, act))
    return result


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


def _findings(tables: dict[str, pd.DataFrame], act: Activity) -> list[Finding]:
    findings: list[Finding] = []
    steps = tables["steps"]
    launches = tables["launches"]
    windows = _windows(act)
    for rank, rows in steps.groupby("rank", sort=True):
        rank = int(rank)
        per_step_rows = rows[rows["step"].notna()]
        judged = per_step_rows if len(per_step_rows) else rows[rows["step"].isna()]
        bound = judged[judged["launch_bound"]]
        if bound.empty:
            continue
        host_idle = int(bound["host_bound_idle_ns"].sum())
        window = sum(windows.get((rank, NO_STEP if pd.isna(s) else int(s)), 0) for s in bound["step"])
        share = host_idle / window if window else 0.0
        if share < REPORT_SHARE:
            continue
        mine = launches.loc[
            (launches["rank"] == rank) & (launches["kind"] == "kernel"), ["api", "api_dur_ns", "gpu_dur_ns", "short"]
        ]
        recommendation, evidence = _recommend(mine, tables["tiny_kernel_ops"], rank)
        n_steps = len(per_step_rows)
        short_pct = 100 * bound["short_kernels"].sum() / max(bound["kernels"].sum(), 1)
        findings.append(
            Finding(
                code="launch_bound",
                part_of="host_bound_gaps",  # its cost is host-bound idle time
                title=f"Rank {rank} is launch-bound in {len(bound)} of {len(judged)} "
                f"{'steps' if n_steps else 'trace windows'}: {short_pct:.0f}% "
                "of kernels run shorter than their launch calls and the GPU waits on the host",
                severity="high" if share >= HIGH_SHARE else "medium",
                analysis=NAME,
                recommendation=recommendation,
                cost_ns_per_step=per_step(host_idle, len(bound)) if n_steps else host_idle,
                cost_share=share,
                rank=rank,
                evidence={
                    "launch_bound_steps": [None if pd.isna(s) else int(s) for s in bound["step"]],
                    "host_bound_idle_ns": host_idle,
                    "window_ns": window,
                    "kernels": int(bound["kernels"].sum()),
                    "short_kernels": int(bound["short_kernels"].sum()),
                    **evidence,
                },
            )
        )
    return findings


def _recommend(kernels: pd.DataFrame, tiny_ops: pd.DataFrame, rank: int) -> tuple[str, dict]:
    short = kernels[kernels["short"]]
    apis = kernels["api"].value_counts()
    graph_share = float(apis[apis.index.str.contains("GraphLaunch")].sum() / max(len(kernels), 1))
    ops = tiny_ops[tiny_ops["rank"] == rank].head(FUSION_TOP)
    top_share = float(ops["short_kernels"].sum() / max(len(short), 1))
    evidence = {
        "median_api_dur_ns": int(kernels["api_dur_ns"].median()) if len(kernels) else 0,
        "median_short_kernel_ns": int(short["gpu_dur_ns"].median()) if len(short) else 0,
        "graph_launch_share": graph_share,
        "top_tiny_kernel_ops": [
            {"cpu_op": r.cpu_op, "short_kernels": int(r.short_kernels)} for r in ops.itertuples()
        ],
    }
    if graph_share > 0.5:
        text = ("Kernels are already replayed from CUDA graphs, yet they are too small to hide the launch: fuse "
                "kernels (torch.compile, fused optimizers/attention) or give each kernel more work (larger batch "
                "or sequence length).")
    elif top_share >= FUSION_SHARE and len(ops):
        names = ", ".join(f"`{n}`" for n in ops["cpu_op"])
        text = (f"A few CPU ops launch most of the tiny kernels ({names}): fuse them (torch.compile, fused "
                "kernels such as foreach/fused optimizers) so one launch does the work of many; CUDA graphs "
                "(torch.compile mode='reduce-overhead', torch.cuda.CUDAGraph) remove the remaining launch cost.")
    else:
        text = ("Many tiny kernels per step are each cheaper than their launch: capture the step in a CUDA graph "
                "(torch.compile mode='reduce-overhead' or torch.cuda.CUDAGraph) so it replays with one launch, "
                "compile it (torch.compile) to fuse kernels, or use larger batches so each kernel does more work.")
    return text, evidence


SPEC = AnalysisSpec(
    name=NAME,
    title="Launch overhead",
    run=analyze,
    order=30,
    tables=(
        TableSpec("launches", "Launches (host call -> GPU activity)", sort_by="launch_delay_ns",
                  sample_by="gpu_start_ns", sample_rows=2000, per_event=True),
        TableSpec("by_api", "Launch APIs"),
        TableSpec("tiny_kernel_ops", "CPU ops launching the most short kernels", sort_by="short_kernels"),
        TableSpec("steps", "Launch-bound steps"),
    ),
    finding_codes=("launch_bound",),
    page=("/launch", "Launch overhead"),
    headline_table="by_api",
)
