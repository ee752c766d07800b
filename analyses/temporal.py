"""Temporal breakdown: how a GPU's time splits into busy, idle, compute, communication, memory.

Definitions (docs/metrics.md), per rank and GPU device; all times int64 ns:

- GPU activity = kernels, memcpy and memset on that device, all streams (not sync events).
- Communication kernel: a kernel that a rule of the communication table matches
  (``analyses/comm_rules.py``: NCCL/RCCL, DeepEP, NVSHMEM, symmetric memory, custom all-reduce,
  MSCCL, all-to-all, send/recv, collective args, and the user's ``--comm-pattern`` rules).
  Compute = the other kernels. Memory = memcpy + memset.
- window = last activity end - first activity start; busy = |union of activity|;
  idle = window - busy.
- compute, communication, memory = |union| of each class; overlap % = 100 x |U(compute) ∩ U(comm)| /
  |U(comm)| (none when there is no communication); exposed communication = |U(comm)| - that
  intersection.
- utilization = busy / window.

One row per rank, device and step, plus a ``step = None`` row per rank and device for the whole
trace (which also counts activity that belongs to no step).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceview.claims import Claims
from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult, Finding, Headline
from traceview.registry import AnalysisSpec, TableSpec, register_input
from traceview.plain import records
from traceview.report_inputs import ReportInputs

from . import classify
from traceview import intervals as iv
from .steps import (HINT_MIN_COVERAGE, NO_STEP, Activity, activity, candidates_hint, per_step,
                    step_column, step_marker_candidates, analysed_ranks)

NAME = "temporal"

#: utilization below which a step is reported (and the levels for severity)
LOW_UTILIZATION = 0.80
LOW_UTILIZATION_HIGH = 0.50
#: exposed communication (share of the window) from which it is reported
EXPOSED_COMM_SHARE = classify.EXPOSED_COMM_SHARE
EXPOSED_COMM_SHARE_HIGH = classify.EXPOSED_COMM_SHARE_HIGH

COLUMNS = [
    "rank",
    "device",
    "step",
    "window_ns",
    "busy_ns",
    "idle_ns",
    "compute_ns",
    "communication_ns",
    "memory_ns",
    "overlap_ns",
    "overlap_pct",
    "exposed_comm_ns",
    "utilization",
    "first_start_ns",
    "last_end_ns",
    "kernels",
]


def figures(key: np.ndarray, start: np.ndarray, end: np.ndarray, cls: np.ndarray) -> dict[str, np.ndarray]:
    """The temporal figures for every group of ``key`` (int64 group codes), vectorised.

    Returns arrays aligned with the sorted distinct keys (under ``"key"``).
    """
    uniq, lo, hi = iv.window_by(key, start, end)
    out: dict[str, np.ndarray] = {"key": uniq, "first_start_ns": lo, "last_end_ns": hi, "window_ns": hi - lo}

    def union_of(mask: np.ndarray) -> iv.KeyedIntervals:
        return iv.union_by(key[mask], start[mask], end[mask])

    def measure(u: iv.KeyedIntervals) -> np.ndarray:
        k, t = iv.sum_by(u[0], u[2] - u[1])
        return iv.lookup(k, t, uniq)

    comp = cls == classify.COMPUTE
    comm = cls == classify.COMMUNICATION
    memory = cls == classify.MEMORY
    # each class's union once; busy is the union of those unions (and of any other activity): the
    # same set, so the same canonical intervals, from far fewer of them
    u_comp, u_comm, u_mem = union_of(comp), union_of(comm), union_of(memory)
    rest = union_of(~(comp | comm | memory))
    busy = iv.union_by(*(np.concatenate(parts) for parts in zip(u_comp, u_comm, u_mem, rest)))
    out["busy_ns"] = measure(busy)
    out["idle_ns"] = out["window_ns"] - out["busy_ns"]
    out["compute_ns"] = measure(u_comp)
    out["communication_ns"] = measure(u_comm)
    out["memory_ns"] = measure(u_mem)
    k, t = iv.measure_intersection_by(u_comp, u_comm)
    out["overlap_ns"] = iv.lookup(k, t, uniq)
    out["exposed_comm_ns"] = out["communication_ns"] - out["overlap_ns"]
    k, n = iv.sum_by(key[cls != classify.MEMORY], np.ones(int((cls != classify.MEMORY).sum()), dtype=np.int64))
    out["kernels"] = iv.lookup(k, n, uniq)
    return out


def breakdown_table(act: Activity) -> pd.DataFrame:
    """The ``breakdown`` table for an activity context (whole-trace rows first per rank/device)."""
    frames = []
    device = act.device
    # whole trace: per rank and device
    codes, (ranks, devices) = iv.combine_keys(act.rank, device)
    if codes.size:
        f = figures(codes, act.start, act.end, act.cls)
        frames.append(_frame(f, ranks[f["key"]], devices[f["key"]], np.full(f["key"].size, NO_STEP)))
    in_step = act.step != NO_STEP
    if in_step.any():
        codes, (ranks, devices, steps) = iv.combine_keys(act.rank[in_step], device[in_step], act.step[in_step])
        f = figures(codes, act.start[in_step], act.end[in_step], act.cls[in_step])
        frames.append(_frame(f, ranks[f["key"]], devices[f["key"]], steps[f["key"]]))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in COLUMNS})
    table = pd.concat(frames, ignore_index=True)
    order = np.lexsort((table["step_sort"].to_numpy(), table["device"].to_numpy(), table["rank"].to_numpy()))
    table = table.iloc[order].drop(columns="step_sort").reset_index(drop=True)
    return table[COLUMNS]


def _dtype(column: str) -> str:
    if column in ("overlap_pct", "utilization"):
        return "float64"
    if column == "step":
        return "Int64"
    return "int64"


def _frame(f: dict[str, np.ndarray], ranks: np.ndarray, devices: np.ndarray, steps: np.ndarray) -> pd.DataFrame:
    window = f["window_ns"]
    comm = f["communication_ns"]
    with np.errstate(divide="ignore", invalid="ignore"):
        overlap_pct = np.where(comm > 0, 100.0 * f["overlap_ns"] / np.where(comm > 0, comm, 1), np.nan)
        utilization = np.where(window > 0, f["busy_ns"] / np.where(window > 0, window, 1), np.nan)
    step = step_column(steps)
    data = {
        "rank": ranks.astype(np.int64),
        "device": devices.astype(np.int64),
        "step": step,
        "step_sort": np.where(steps == NO_STEP, np.iinfo(np.int64).min, steps),
        "overlap_pct": overlap_pct,
        "utilization": utilization,
    }
    for c in COLUMNS:
        if c not in data:
            data[c] = f[c].astype(np.int64)
    return pd.DataFrame(data)


def breakdown(ctx: AnalysisContext) -> pd.DataFrame:
    """The temporal breakdown table (the derived input ``temporal.breakdown``)."""
    table: pd.DataFrame = ctx.input("temporal.breakdown")
    return table


def exposed_claims(act: Activity, comm: np.ndarray | None = None) -> Claims:
    """Exposed communication as claims: U(communication ``comm``, default all) - U(compute), per GPU."""
    return classify.exposed_claims(act.cls, act.rank, act.device, act.start, act.end, comm)


def idle_claims(gaps: pd.DataFrame) -> Claims:
    """Idle time as claims: the intervals of an idle-gap table (rank, device, start_ns, end_ns)."""
    return Claims.of(gaps["rank"].to_numpy(np.int64), gaps["device"].to_numpy(np.int64),
                     gaps["start_ns"].to_numpy(np.int64), gaps["end_ns"].to_numpy(np.int64))


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    act = activity(ctx)
    table = breakdown(ctx)
    result = AnalysisResult(name=NAME, tables={"breakdown": table.copy(deep=False), "steps": act.steps.to_frame()})
    ranks = analysed_ranks(ctx)
    idle_ranks = np.setdiff1d(ranks, act.rank)
    result.warn("no GPU activity (kernels, memcpy, memset) in the trace: nothing to break down", idle_ranks)
    no_steps = np.setdiff1d(np.setdiff1d(ranks, act.steps.rank), idle_ranks)
    if no_steps.size:
        candidates = step_marker_candidates(ctx)
        candidates = candidates[candidates["rank"].isin(no_steps)].reset_index(drop=True)
        for rank in no_steps.tolist():  # one warning per rank without steps, naming its own candidates
            result.warn("no steps found (no ProfilerStep#N and no annotation matching the step marker): "
                        "figures are for the whole trace only and costs are not per step; "
                        + candidates_hint(candidates[candidates["rank"] == rank]), [rank])
        # what the user could pass as --step-marker (each rank's own candidates)
        result.tables["step_candidates"] = candidates.assign(
            suggested=candidates["sequential"] & (candidates["typical_coverage"] >= HINT_MIN_COVERAGE))
    findings = _findings(table, act)
    if findings:
        _claim(findings, ctx, act)
    result.findings.extend(findings)
    return result


def _claim(findings: list[Finding], ctx: AnalysisContext, act: Activity) -> None:
    """Each finding claims its GPU's idle gaps (low_utilization) or exposed communication."""
    gaps = ctx.input("idle_gaps.tables")["gaps"]
    idle = idle_claims(gaps)
    exposed = exposed_claims(act)
    for f in findings:
        whole = idle if f.code == "low_utilization" else exposed
        f.claims = whole.only_gpu(int(f.rank or 0), int(f.evidence["device"]))


def _findings(table: pd.DataFrame, act: Activity) -> list[Finding]:
    """Judged on the whole-trace row of each rank and device (it also holds the idle time between
    steps, e.g. a data-loader stall, which no per-step GPU window covers); costs are spread over
    the steps of that rank."""
    findings: list[Finding] = []
    step_counts = act.steps.counts()
    whole_rows = table[table["step"].isna()]
    for _, whole in whole_rows.iterrows():
        rank, device = int(whole["rank"]), int(whole["device"])
        if int(whole["window_ns"]) <= 0:
            continue
        step_rows = table[(table["rank"] == rank) & (table["device"] == device) & table["step"].notna()]
        n_steps = step_counts.get(rank, 0)
        for finding in (_low_utilization(whole, step_rows, n_steps), _exposed_communication(whole, n_steps)):
            if finding is not None:
                findings.append(finding)
    return findings


def _time_range(whole: pd.Series) -> tuple[int, int]:
    return (int(whole["first_start_ns"]), int(whole["last_end_ns"]))


def _low_utilization(whole: pd.Series, step_rows: pd.DataFrame, n_steps: int) -> Finding | None:
    """The GPU of a whole-trace row is busy less than LOW_UTILIZATION of its window (``step_rows``:
    the same GPU per step, for the worst step)."""
    rank, device = int(whole["rank"]), int(whole["device"])
    window = int(whole["window_ns"])
    idle = int(whole["idle_ns"])
    busy = int(whole["busy_ns"])
    util = busy / window
    if util >= LOW_UTILIZATION:
        return None
    worst = step_rows.sort_values("utilization").iloc[0] if len(step_rows) else whole
    return Finding(
        code="low_utilization",
        title=f"GPU {device} of rank {rank} is idle {100 * idle / window:.1f}% of the time "
        f"(utilization {100 * util:.1f}%)",
        severity="high" if util < LOW_UTILIZATION_HIGH else "medium",
        analysis=NAME,
        recommendation="See the idle-gap analysis for what the host was doing while the GPU "
        "waited (data loading, synchronisation, launch overhead) and remove the largest cause.",
        cost_ns_per_step=per_step(idle, n_steps),
        cost_share=idle / window,
        rank=int(rank),
        headline=Headline("GPU idle {}", idle / window),
        time_range_ns=_time_range(whole),
        evidence={
            "device": int(device),
            "steps": n_steps,
            "window_ns": window,
            "busy_ns": busy,
            "idle_ns": idle,
            "utilization": util,
            "worst_step": None if pd.isna(worst["step"]) else int(worst["step"]),
            "worst_step_utilization": float(worst["utilization"]),
        },
    )


def _exposed_communication(whole: pd.Series, n_steps: int) -> Finding | None:
    """Communication on the GPU of a whole-trace row is not overlapped with compute for at least
    EXPOSED_COMM_SHARE of its window."""
    rank, device = int(whole["rank"]), int(whole["device"])
    window = int(whole["window_ns"])
    comm = int(whole["communication_ns"])
    exposed = int(whole["exposed_comm_ns"])
    # with no compute at all there is nothing to overlap with: exposure is not actionable
    if not (comm > 0 and int(whole["compute_ns"]) > 0 and exposed >= EXPOSED_COMM_SHARE * window):
        return None
    share = exposed / window
    return Finding(
        code="exposed_communication",
        title=f"Communication on GPU {device} of rank {rank} is exposed (not overlapped with "
        f"compute) for {100 * share:.1f}% of the time",
        severity="high" if share >= EXPOSED_COMM_SHARE_HIGH else "medium",
        analysis=NAME,
        recommendation="Overlap collectives with compute: bucket gradients (DDP bucket_cap_mb), "
        "prefetch in FSDP (forward/backward_prefetch), launch collectives asynchronously and wait "
        "late; check the communication analysis for slow or straggling collectives.",
        cost_ns_per_step=per_step(exposed, n_steps),
        cost_share=share,
        rank=int(rank),
        headline=Headline("Communication exposed (not overlapped with compute) {} of the time", share),
        time_range_ns=_time_range(whole),
        evidence={
            "device": int(device),
            "steps": n_steps,
            "communication_ns": comm,
            "overlap_ns": int(whole["overlap_ns"]),
            "exposed_comm_ns": exposed,
            "overlap_pct": 100.0 * (comm - exposed) / comm,
        },
    )


register_input("temporal.breakdown", lambda ctx: breakdown_table(activity(ctx)), requires=("activity",))

# ------------------------------------------------------------------------------------ report hooks
# The report's summary figures, per-rank breakdowns, breakdown chart and its one denominator (the
# GPU windows and steps every finding's cost is shared of) come from this analysis's tables.

#: the breakdown columns a report lists per GPU
_GPU_COLUMNS = ("device", "window_ns", "busy_ns", "idle_ns", "compute_ns", "communication_ns", "memory_ns",
                "overlap_ns", "exposed_comm_ns", "utilization", "overlap_pct")


def whole_rows(inputs: ReportInputs) -> pd.DataFrame:
    """The breakdown's whole-trace rows (one per rank and GPU), once per report."""
    def make() -> pd.DataFrame:
        table = inputs.table(NAME, "breakdown")
        return pd.DataFrame() if table is None or table.empty else table[table["step"].isna()].reset_index(drop=True)
    rows: pd.DataFrame = inputs.once("temporal.whole_rows", make)
    return rows


def step_counts(inputs: ReportInputs) -> dict[int, int]:
    """Number of steps per rank (from the steps table), once per report."""
    def make() -> dict[int, int]:
        steps = inputs.table(NAME, "steps")
        return {} if steps is None or steps.empty else {int(r): int(n) for r, n in steps.groupby("rank").size().items()}
    counts: dict[int, int] = inputs.once("temporal.step_counts", make)
    return counts


def timebase(inputs: ReportInputs) -> tuple[dict[tuple[int, int], tuple[int, int]], dict[int, int]]:
    """Each GPU's whole-trace window (GPUs whose window is not empty) and the steps per rank."""
    whole = whole_rows(inputs)
    if whole.empty:
        return {}, step_counts(inputs)
    windows = {(int(r), int(d)): (int(lo), int(hi)) for r, d, lo, hi in zip(
        whole["rank"], whole["device"], whole["first_start_ns"], whole["last_end_ns"]) if hi > lo}
    return windows, step_counts(inputs)


def _candidates_text(candidates: pd.DataFrame | None, top: int = 3) -> str:
    """The best few candidate step markers, as --step-marker options to try."""
    if candidates is None or candidates.empty or "suggested" not in candidates:
        return ""
    good = candidates[candidates["suggested"].astype(bool)]
    markers = list(dict.fromkeys(str(m) for m in good["marker"]))[:top]
    return ("; repeated ranges that could be steps: " + ", ".join(f"--step-marker '{m}'" for m in markers)
            if markers else "")


def report_summary(inputs: ReportInputs) -> tuple[dict[str, Any], dict[str, str]]:
    """The summary's step and GPU-time figures (docs/reports.md, "summary"), with their notes."""
    whole, counts, steps = whole_rows(inputs), step_counts(inputs), inputs.table(NAME, "steps")
    notes: dict[str, str] = {}
    out: dict[str, Any] = {"gpus": int(len(whole)), "steps": max(counts.values()) if counts else 0,
                           "median_step_time_ns": None, "p90_step_time_ns": None}
    if steps is not None and not steps.empty:
        durations = (steps["end_ns"] - steps["start_ns"]).to_numpy(dtype=np.float64)
        out["median_step_time_ns"] = int(round(float(np.median(durations))))
        out["p90_step_time_ns"] = int(round(float(np.percentile(durations, 90))))
    else:
        notes["median_step_time_ns"] = ("no steps found (no ProfilerStep#N or annotation matching the step marker): "
                                        "no step time, and every figure is for the whole trace"
                                        + _candidates_text(inputs.table(NAME, "step_candidates")))
    out.update(_gpu_figures(whole, counts))
    if not len(whole):
        notes["utilization"] = "no GPU activity (kernels, memcpy, memset) in the trace: no GPU figures"
    elif out["communication_ns"] == 0:
        notes["exposed_comm_ns"] = "no communication kernels in the trace"
    return out, notes


def _gpu_figures(whole: pd.DataFrame, counts: dict[int, int]) -> dict[str, Any]:
    """The job's GPU time: sums over every GPU's whole-trace row, their shares of the GPU window."""
    keys = ("window_ns", "busy_ns", "idle_ns", "compute_ns", "communication_ns", "exposed_comm_ns")
    if not len(whole):
        return {**{k: None for k in keys}, "utilization": None, "idle_share": None, "exposed_comm_share": None,
                "idle_ns_per_step": None, "exposed_comm_ns_per_step": None, "memory_only_ns": None,
                "compute_share": None, "memory_only_share": None}
    out: dict[str, Any] = {k: int(whole[k].sum()) for k in keys}
    window = out["window_ns"]
    out["utilization"] = out["busy_ns"] / window if window else None
    out["idle_share"] = out["idle_ns"] / window if window else None
    out["exposed_comm_share"] = out["exposed_comm_ns"] / window if window else None
    # busy = |U(compute) u U(comm) u U(memory)| = compute + exposed communication + memory alone,
    # so these four shares of the GPU window add up to 1
    out["memory_only_ns"] = max(0, out["busy_ns"] - out["compute_ns"] - out["exposed_comm_ns"])
    out["compute_share"] = out["compute_ns"] / window if window else None
    out["memory_only_share"] = out["memory_only_ns"] / window if window else None
    steps = np.array([counts.get(int(r), 0) for r in whole["rank"]], dtype=np.int64)
    for column, key in (("idle_ns", "idle_ns_per_step"), ("exposed_comm_ns", "exposed_comm_ns_per_step")):
        total = whole[column].to_numpy(np.int64)
        per = [per_step(int(t), int(n)) for t, n in zip(total, steps)]
        out[key] = int(round(float(np.mean(per))))
    return out


def rank_figures(inputs: ReportInputs) -> dict[int, dict[str, Any]]:
    """Per rank: its steps and the breakdown of each of its GPUs (whole trace)."""
    whole, counts = whole_rows(inputs), step_counts(inputs)
    out: dict[int, dict[str, Any]] = {r: {"steps": counts.get(r, 0), "breakdown": []} for r in inputs.ranks}
    if len(whole):
        for rec in records(whole[["rank", *_GPU_COLUMNS]], ["rank", *_GPU_COLUMNS]):
            rank = int(rec.pop("rank"))
            out.setdefault(rank, {"steps": counts.get(rank, 0), "breakdown": []})["breakdown"].append(rec)
    return out


def breakdown_chart(inputs: ReportInputs) -> list[dict[str, Any]]:
    """The breakdown chart: every GPU's whole-trace row, with its memory-only time."""
    whole = whole_rows(inputs)
    if not len(whole):
        return []
    columns = ["rank", *_GPU_COLUMNS]
    rows = records(whole[columns], columns)
    for rec in rows:
        # |U(compute) u U(comm)| = compute + exposed; the rest of busy is memory activity alone
        rec["memory_only_ns"] = max(0, rec["busy_ns"] - rec["compute_ns"] - rec["exposed_comm_ns"])
    return rows


SPEC = AnalysisSpec(
    name=NAME,
    title="Temporal breakdown",
    run=analyze,
    requires=("activity", "temporal.breakdown", "steps.candidates", "idle_gaps.tables"),
    order=10,
    tables=(
        TableSpec("breakdown", "GPU time per rank, device and step (step empty = whole trace)"),
        TableSpec("steps", "Steps (CPU ranges)"),
        TableSpec("step_candidates", "Candidate step markers (no steps found): repeated ranges to pass as "
                  "--step-marker"),
    ),
    finding_codes=("low_utilization", "exposed_communication"),
    finding_precedence=(("exposed_communication", 190), ("low_utilization", 200)),
    page=("/overview", "Overview"),
    headline_table="breakdown",
    summary=report_summary,
    rank_summary=rank_figures,
    charts=(("breakdown", breakdown_chart),),
    timebase=timebase,
)
