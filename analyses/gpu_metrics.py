"""Nsight Systems GPU metrics per step: SM and tensor-pipe activity, DRAM bandwidth, clocks.

Reads the counter rows ``parsers/nsys/gpu_metrics.py`` makes of an export's ``GPU_METRICS`` table
(counter name "GPU Metrics", one series per metric, ``pid`` the CUDA device). Metrics are recognised
by the start of their name (unit in brackets removed, case ignored): :data:`ROLES`. A sample belongs
to the step of its rank whose window holds it; without steps, to the whole trace (step null).

Tables: ``metrics`` (every metric recorded per rank and device: unit, samples, mean, min, max) and
``steps`` (per rank, device and step: the mean of each role over the step's samples, and the GEMM
share of the step's kernel time).

Findings (no GPU time is claimed: a clock or a pipe's activity is a cause to look at, not a time to
add up): ``clock_throttling`` (a step whose mean GPC clock is more than 10% below the GPU's median
over the trace) and ``tensor_pipes_idle`` (steps whose kernel time is at least half GEMMs while the
tensor pipes are active under 5% of the time: the GEMMs do not run on tensor cores, e.g. fp32
without TF32).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from traceview import intervals as iv
from traceview.claims import gpu_key
from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult, Finding
from traceview.model import Kind
from traceview.registry import AnalysisSpec, TableSpec

from . import classify
from .steps import NO_STEP, activity

NAME = "gpu_metrics"
COUNTER = "GPU Metrics"
#: metric name start (lower case) -> role column
ROLES = (("sm active", "sm_active_pct"), ("tensor active", "tensor_active_pct"),
         ("dram read bandwidth", "dram_read_pct"), ("dram write bandwidth", "dram_write_pct"),
         ("gpc clock frequency", "gpc_clock_mhz"), ("sys clock frequency", "sys_clock_mhz"),
         ("pcie rx throughput", "pcie_rx_pct"), ("pcie tx throughput", "pcie_tx_pct"),
         ("nvlink rx", "nvlink_rx_pct"), ("nvlink tx", "nvlink_tx_pct"))
ROLE_COLUMNS = [c for _, c in ROLES]
STEP_COLUMNS = ["rank", "device", "step", "samples", *ROLE_COLUMNS, "gemm_share"]
METRIC_COLUMNS = ["rank", "device", "metric", "unit", "role", "samples", "mean", "min", "max"]
#: a step's clock below the GPU's median by more than this is throttled
THROTTLE = 0.10
#: GEMM-dominated: GEMMs at least this share of the step's kernel time
GEMM_SHARE = 0.5
#: tensor pipes idle: active below this (%)
TENSOR_IDLE_PCT = 5.0
#: a DRAM-bound step: DRAM read + write bandwidth at least this share of the peak (%), the level
#: from which Nsight Compute's speed-of-light calls a unit the bottleneck (60% of peak)
DRAM_BOUND_PCT = 60.0
#: the kernels the per-kernel windows table keeps (most GPU time first)
TOP_KERNELS = 20
KERNEL_COLUMNS = ["rank", "device", "name", "kernels", "gpu_ns", "samples", *ROLE_COLUMNS]


def role_of(metric: str) -> str:
    base = metric.split("[", 1)[0].strip().lower()
    return next((col for start, col in ROLES if base.startswith(start)), "")


def unit_of(metric: str) -> str:
    from traceview.parsers.nsys.gpu_metrics import metric_unit

    return metric_unit(metric)


def samples(ctx: AnalysisContext) -> pd.DataFrame:
    """rank, device, metric, ts_ns, value of the GPU metric counters of the analysed ranks."""
    counters = ctx.trace.counters
    if counters.num_rows == 0:
        return pd.DataFrame(columns=["rank", "device", "metric", "ts_ns", "value"])
    mine = counters.filter(pc.equal(counters.column("name").cast("string"), COUNTER))
    if ctx.options.ranks is not None:
        mine = mine.filter(pc.is_in(mine.column("rank"), pa_values(ctx.options.ranks)))
    return pd.DataFrame({"rank": mine.column("rank").to_numpy(), "device": mine.column("pid").to_numpy(),
                         "metric": mine.column("series").to_pandas(), "ts_ns": mine.column("ts_ns").to_numpy(),
                         "value": mine.column("value").to_numpy()})


def pa_values(ranks: tuple[int, ...]) -> object:
    import pyarrow as pa

    return pa.array(list(ranks), pa.int32())


def step_of(frame: pd.DataFrame, steps: object) -> np.ndarray:
    """The step of each sample (its rank's step whose window holds it), -1 outside steps."""
    out = np.full(len(frame), -1, dtype=np.int64)
    rank_s, step_s = np.asarray(steps.rank), np.asarray(steps.step)  # type: ignore[attr-defined]
    start_s, end_s = np.asarray(steps.start), np.asarray(steps.end)  # type: ignore[attr-defined]
    ranks, ts = frame["rank"].to_numpy(), frame["ts_ns"].to_numpy()
    for r in np.unique(ranks):
        sel = np.flatnonzero(ranks == r)
        mine = np.flatnonzero(rank_s == r)
        if not mine.size:
            continue
        order = mine[np.argsort(start_s[mine], kind="stable")]
        i = np.searchsorted(start_s[order], ts[sel], side="right") - 1
        ok = (i >= 0) & (ts[sel] < end_s[order][np.maximum(i, 0)])
        out[sel[ok]] = step_s[order][i[ok]]
    return out


def gemm_share(ctx: AnalysisContext) -> pd.DataFrame:
    """rank, device, step, gemm_share: GEMMs' share of each step's kernel time."""
    act = activity(ctx)
    codes, names = ctx.input("kernels.activity_categories")
    kernel = act.kind == int(Kind.KERNEL)
    gemm = np.asarray(codes) == list(names).index("gemm") if "gemm" in names else np.zeros(len(act), bool)
    frame = pd.DataFrame({"rank": act.rank[kernel], "device": act.device[kernel], "step": act.step[kernel],
                          "dur": (act.end - act.start)[kernel], "gemm": (act.end - act.start)[kernel] * gemm[kernel]})
    sums = frame.groupby(["rank", "device", "step"], as_index=False)[["dur", "gemm"]].sum()
    sums["gemm_share"] = np.where(sums["dur"] > 0, sums["gemm"] / sums["dur"].clip(lower=1), np.nan)
    return sums[["rank", "device", "step", "gemm_share"]]


def metric_table(frame: pd.DataFrame) -> pd.DataFrame:
    stats = frame.groupby(["rank", "device", "metric"], as_index=False, observed=True)["value"].agg(
        samples="size", mean="mean", min="min", max="max")
    stats["unit"] = [unit_of(str(m)) for m in stats["metric"]]
    stats["role"] = [role_of(str(m)) for m in stats["metric"]]
    return stats[METRIC_COLUMNS]


def step_table(frame: pd.DataFrame, shares: pd.DataFrame) -> pd.DataFrame:
    roles = frame.assign(role=frame["metric"].map({m: role_of(str(m)) for m in frame["metric"].unique()}))
    roles = roles[roles["role"] != ""]
    wide = roles.pivot_table(index=["rank", "device", "step"], columns="role", values="value", aggfunc="mean",
                             observed=True)
    counts = frame.groupby(["rank", "device", "step"], observed=True).size().rename("samples")
    out = wide.reindex(columns=ROLE_COLUMNS).join(counts, how="outer").reset_index()
    out = out.merge(shares, on=["rank", "device", "step"], how="left")
    out["step"] = out["step"].where(out["step"] != NO_STEP).astype("Int64")
    return out[STEP_COLUMNS]


def throttle_findings(frame: pd.DataFrame, table: pd.DataFrame) -> list[Finding]:
    clock = frame[frame["metric"].map({m: role_of(str(m)) for m in frame["metric"].unique()}) == "gpc_clock_mhz"]
    findings = []
    for (rank, device), samples_ in clock.groupby(["rank", "device"]):
        median = float(samples_["value"].median())
        steps_ = table[(table["rank"] == rank) & (table["device"] == device) & table["step"].notna()]
        low = steps_[steps_["gpc_clock_mhz"] < (1 - THROTTLE) * median]
        if median <= 0 or low.empty:
            continue
        worst = low.loc[low["gpc_clock_mhz"].idxmin()]
        findings.append(Finding(
            code="clock_throttling", severity="low", analysis=NAME, rank=int(rank), step=int(worst["step"]),
            title=f"GPU {device} of rank {rank}: the GPC clock fell to {worst['gpc_clock_mhz']:.0f} MHz in step "
                  f"{int(worst['step'])}, {1 - worst['gpc_clock_mhz'] / median:.0%} below its median {median:.0f} MHz "
                  f"({len(low)} step(s) more than {THROTTLE:.0%} below)",
            recommendation="Check power and thermal limits (nvidia-smi -q -d PERFORMANCE,POWER: clocks event "
                           "reasons) and the application clocks; a throttled step is slower for a reason "
                           "outside the program.",
            evidence={"device": int(device), "median_clock_mhz": median,
                      "steps": {int(s): float(c) for s, c in zip(low["step"], low["gpc_clock_mhz"])}}))
    return findings


def tensor_findings(table: pd.DataFrame) -> list[Finding]:
    gemm = table[(table["gemm_share"] >= GEMM_SHARE) & (table["tensor_active_pct"] < TENSOR_IDLE_PCT)
                 & table["step"].notna()]
    findings = []
    for (rank, device), rows in gemm.groupby(["rank", "device"]):
        findings.append(Finding(
            code="tensor_pipes_idle", severity="low", analysis=NAME, rank=int(rank),
            title=f"GPU {device} of rank {rank}: {len(rows)} GEMM-dominated step(s) (GEMMs "
                  f"{rows['gemm_share'].mean():.0%} of the kernel time) with the tensor pipes active "
                  f"{rows['tensor_active_pct'].mean():.1f}% of the time",
            recommendation="The matrix products do not run on tensor cores: use bf16/fp16 (autocast), or allow TF32 "
                           "for fp32 (torch.backends.cuda.matmul.allow_tf32 = True), and dimensions multiple of 8.",
            evidence={"device": int(device), "steps": [int(s) for s in rows["step"]],
                      "gemm_share": float(rows["gemm_share"].mean()),
                      "tensor_active_pct": float(rows["tensor_active_pct"].mean())}))
    return findings


def dram_findings(table: pd.DataFrame) -> list[Finding]:
    """Steps whose DRAM traffic is at least DRAM_BOUND_PCT of the peak: memory-bound phases."""
    busy = table["dram_read_pct"].fillna(0) + table["dram_write_pct"].fillna(0)
    bound = table[(busy >= DRAM_BOUND_PCT) & table["step"].notna()].assign(dram_pct=busy)
    findings = []
    for (rank, device), rows in bound.groupby(["rank", "device"]):
        findings.append(Finding(
            code="dram_bound_phase", severity="info", analysis=NAME, rank=int(rank),
            title=f"GPU {device} of rank {rank}: {len(rows)} step(s) DRAM-bound (DRAM read + write "
                  f"{rows['dram_pct'].mean():.0f}% of its peak bandwidth, SM active "
                  f"{rows['sm_active_pct'].mean():.0f}%)",
            recommendation="These steps are limited by memory bandwidth: fuse elementwise and normalisation "
                           "ops (torch.compile), keep activations in bf16/fp16, and reuse data in shared memory "
                           "or L2 (larger tiles) before adding compute.",
            evidence={"device": int(device), "steps": [int(v) for v in rows["step"]],
                      "dram_pct": float(rows["dram_pct"].mean()), "threshold_pct": DRAM_BOUND_PCT}))
    return findings


def kernel_table(ctx: AnalysisContext, frame: pd.DataFrame) -> pd.DataFrame:
    """Per rank, device and kernel name (the TOP_KERNELS of most GPU time): the mean of each
    metric over the samples taken while one of its kernels ran on that GPU (a sample is given to
    the kernel that started last before it and had not ended)."""
    act = activity(ctx)
    kernel = np.flatnonzero(act.kind == int(Kind.KERNEL))
    if kernel.size == 0 or frame.empty:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    key = gpu_key(act.rank[kernel], act.device[kernel])
    order = np.lexsort((act.start[kernel], key))
    kernel, key = kernel[order], key[order]
    s_key = gpu_key(frame["rank"].to_numpy(), frame["device"].to_numpy())
    ts = frame["ts_ns"].to_numpy()
    at = iv.searchsorted_by(key, act.start[kernel], s_key, ts, side="right") - 1
    safe = np.maximum(at, 0)
    hit = (at >= 0) & (key[safe] == s_key) & (ts < act.end[kernel[safe]])
    codes, names = classify.dictionary_codes(ctx)
    labels = np.asarray(list(names) + [None], dtype=object)
    inside = frame[hit].assign(name=labels[codes[act.row[kernel[safe[hit]]]]])
    inside = inside.assign(role=inside["metric"].map({m: role_of(str(m)) for m in inside["metric"].unique()}))
    wide = inside[inside["role"] != ""].pivot_table(index=["rank", "device", "name"], columns="role",
                                                   values="value", aggfunc="mean", observed=True)
    counts = inside.groupby(["rank", "device", "name"], observed=True).size().rename("samples")
    times = pd.DataFrame({"rank": act.rank[kernel], "device": act.device[kernel],
                          "name": labels[codes[act.row[kernel]]], "dur": (act.end - act.start)[kernel]})
    totals = times.groupby(["rank", "device", "name"]).agg(kernels=("dur", "size"), gpu_ns=("dur", "sum"))
    out = wide.reindex(columns=ROLE_COLUMNS).join(counts, how="inner").join(totals, how="left").reset_index()
    return out.sort_values("gpu_ns", ascending=False, kind="stable").head(TOP_KERNELS).reset_index(
        drop=True)[KERNEL_COLUMNS]


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    frame = samples(ctx)
    if frame.empty:
        return AnalysisResult(name=NAME, tables={"metrics": pd.DataFrame(columns=METRIC_COLUMNS),
                                                 "steps": pd.DataFrame(columns=STEP_COLUMNS),
                                                 "kernels": pd.DataFrame(columns=KERNEL_COLUMNS)})
    frame["step"] = step_of(frame, activity(ctx).steps)
    frame.loc[frame["step"] < 0, "step"] = NO_STEP
    table = step_table(frame, gemm_share(ctx))
    result = AnalysisResult(name=NAME, tables={"metrics": metric_table(frame), "steps": table,
                                               "kernels": kernel_table(ctx, frame)})
    result.findings.extend(throttle_findings(frame, table))
    result.findings.extend(tensor_findings(table))
    result.findings.extend(dram_findings(table))
    return result


SPEC = AnalysisSpec(
    name=NAME,
    title="GPU metrics (Nsight Systems)",
    run=analyze,
    requires=("activity", "kernels.activity_categories", "classify.codes.name"),
    order=93,
    tables=(
        TableSpec("steps", "GPU metrics per step: SM and tensor activity, DRAM bandwidth, clocks",
                  title_without_steps="GPU metrics over the whole trace: SM and tensor activity, DRAM bandwidth, "
                  "clocks"),
        TableSpec("kernels", "GPU metrics while each top kernel ran (samples inside its executions)",
                  sort_by="gpu_ns"),
        TableSpec("metrics", "Every GPU metric recorded, with its unit"),
    ),
    finding_codes=("clock_throttling", "tensor_pipes_idle", "dram_bound_phase"),
    headline_table="steps",
)
