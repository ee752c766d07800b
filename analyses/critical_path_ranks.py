"""The critical path's cross-rank step (a helper of :mod:`.critical_path`, no analysis): every
batch's per-step compositions and what-ifs joined, communication on the path split into waiting on
another rank (collectives matched across ranks: a collective ends when its last participant
arrives), the median-rank what-if, the findings and the report's summary figures.

Waiting on another rank: the part of a collective kernel on the path between its own start and the
start of the last rank's matching kernel. Median rank: the part of it after the median arrival (the
wait that would go if no rank arrived later than the median) is the rank's saving; unlike the graph
what-ifs this one is computed on the path (the graph of other ranks is not at hand across batches),
which the assumption column says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from traceview.claims import Claims
from traceview.findings import AnalysisResult, Finding, Options
from traceview.report_inputs import ReportInputs
from traceview.units import fmt_ns

from .collectives import match_collectives
from .steps import NO_STEP, step_column

NAME = "critical_path"

SCENARIOS = ("comm_overlapped", "no_host_overhead", "roofline", "median_rank", "achievable")
ASSUMPTIONS = {
    "comm_overlapped": "collective kernels take no time on the path (communication fully overlapped with "
                       "compute); everything else as measured",
    "no_host_overhead": "the host is infinitely fast: no host compute, launch or synchronisation time, no launch "
                        "latency; GPU work and its stream order as measured",
    "roofline": "every kernel of an op with a cost model runs at the op's roofline time (FLOPs / peak, bytes / "
                "bandwidth); other kernels as measured",
    "median_rank": "no rank reaches a collective later than the median rank (on the path: the wait after the "
                   "median arrival goes)",
    "achievable": "communication overlapped, no host overhead and modelled kernels at their roofline, together "
                  "(waiting on other ranks goes with the communication): the speed-of-light step of this "
                  "program on this hardware, for the modelled share of its kernel time",
}
CODES = {"comm_overlapped": "whatif_comm_overlap", "no_host_overhead": "whatif_no_host_overhead",
         "roofline": "whatif_roofline", "median_rank": "whatif_median_rank"}
FINDING_CODES = ("critical_path_bound", *CODES.values(), "achievable_step")
#: each costed what-if's time is part of an existing umbrella's
FINDING_PARENTS = (("whatif_comm_overlap", "exposed_communication"), ("whatif_no_host_overhead", "low_utilization"),
                   ("whatif_median_rank", "straggler_rank"), ("whatif_roofline", "below_roofline"))
PHRASES = {"comm_overlapped": "communication were fully overlapped with compute",
           "no_host_overhead": "host and launch overhead were zero",
           "roofline": "every modelled kernel ran at its roofline time",
           "median_rank": "the slowest rank reached each collective with the median rank"}
RECOMMENDATIONS = {
    "comm_overlapped": "Overlap the collectives on the critical path with compute (bucket and start gradients' "
                       "all-reduce during backward, prefetch FSDP all-gathers, put communication on its own stream).",
    "no_host_overhead": "Cut host time on the critical path: capture the step in a CUDA graph, fuse small ops "
                        "(torch.compile), remove synchronisations and move data loading off the main thread.",
    "roofline": "The kernels on the critical path run well below their roofline: check their shapes, dtypes and "
                "layouts (tensor-core alignment, TF32/bf16) and fusion.",
    "median_rank": "Find why the late rank arrives late (its own compute, data loading, a slower GPU) and balance it.",
}
#: a what-if saving below this share of the step is not worth a finding
MIN_SAVING_SHARE = 0.01
GROUPS = {"host": ("host_compute", "host_untraced", "launch_overhead", "sync"),
          "gpu": ("gpu_compute", "memory", "gpu_wait"),
          "communication": ("communication", "waiting_on_rank")}
GROUP_TEXT = {"host": "host thread", "gpu": "GPU work", "communication": "communication"}
STEP_COLUMNS = ["rank", "step", "start_ns", "end_ns", "step_ns", "path_ns", "host_compute_ns", "host_untraced_ns",
                "launch_overhead_ns", "sync_ns", "gpu_compute_ns", "memory_ns", "communication_ns", "gpu_wait_ns",
                "waiting_on_rank_ns", "unlinked_ns", "bound_by", "bound_share", "top_name", "top_ns", "achievable_ns"]
WHATIF_COLUMNS = ["rank", "step", "scenario", "step_ns", "whatif_ns", "saving_ns", "saving_share", "modelled_share",
                  "assumption"]


@dataclass
class CriticalPathParts:
    """What one batch of ranks gives the cross-rank step: per window its composition (``steps``) and
    its graph what-ifs (``whatif``), the path segments each costed what-if shortens (``claims``), and
    the collective kernels with their time on the path (``collectives``). No event rows: nothing to
    remap across files."""

    #: the reduce starts by concatenating each frame over the parts: a driver may join them first
    #: (``traceview.packed_frames.merge_inputs``)
    merge_fields: ClassVar[bool] = True

    steps: pd.DataFrame
    whatif: pd.DataFrame
    claims: pd.DataFrame
    collectives: pd.DataFrame

    def remap_rows(self, rows: Any, offset: int = 0) -> "CriticalPathParts":
        del rows, offset  # no row columns
        return self

    def compact(self) -> "CriticalPathParts":
        return self


def reduce_parts(parts: list[CriticalPathParts], options: Options) -> AnalysisResult:
    """The ``steps`` and ``whatif`` tables and the findings from every batch's parts."""
    del options  # nothing to choose: every figure is per rank and step
    steps = pd.concat([p.steps for p in parts], ignore_index=True) if parts else pd.DataFrame()
    if steps.empty:
        return AnalysisResult(name=NAME, tables={"steps": _empty(STEP_COLUMNS), "whatif": _empty(WHATIF_COLUMNS)})
    whatif = pd.concat([p.whatif for p in parts], ignore_index=True).drop(columns="window")
    claims = pd.concat([p.claims for p in parts], ignore_index=True)
    waits, wait_claims = rank_waits(pd.concat([p.collectives for p in parts], ignore_index=True))
    steps = steps.merge(waits, on=["rank", "step"], how="left")
    for column in ("waiting_on_rank_ns", "median_saving_ns"):
        steps[column] = steps[column].fillna(0).astype(np.int64)
    steps["communication_ns"] -= steps["waiting_on_rank_ns"]
    median = steps[["rank", "step", "step_ns"]].assign(scenario="median_rank", saving_ns=steps["median_saving_ns"],
                                                     modelled_share=np.nan)
    whatif = pd.concat([whatif, median], ignore_index=True)
    claims = pd.concat([claims, wait_claims], ignore_index=True)
    whatif["whatif_ns"] = whatif["step_ns"] - whatif["saving_ns"]
    achievable = whatif[whatif["scenario"] == "achievable"][["rank", "step", "whatif_ns"]]
    steps = steps.merge(achievable.rename(columns={"whatif_ns": "achievable_ns"}), on=["rank", "step"], how="left")
    steps = _bound(steps)
    findings = _findings(steps, whatif, claims)
    return AnalysisResult(name=NAME, tables={"steps": _steps_table(steps), "whatif": _whatif_table(whatif)},
                          findings=findings)


def rank_waits(collectives: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (rank, step): on-path time waiting for the last rank (``waiting_on_rank_ns``) and the part
    of it after the median arrival (``median_saving_ns``); and that part as claims."""
    empty_waits = pd.DataFrame({c: pd.Series(dtype="int64") for c in
                                ("rank", "step", "waiting_on_rank_ns", "median_saving_ns")})
    empty_claims = pd.DataFrame({c: pd.Series(dtype=object if c == "scenario" else "int64")
                                 for c in ("rank", "device", "step", "scenario", "start_ns", "end_ns")})
    if collectives.empty or collectives["rank"].nunique() < 2:
        return empty_waits, empty_claims
    arrivals, _ = match_collectives(collectives)  # its warnings are the communication analysis's
    if arrivals.empty:
        return empty_waits, empty_claims
    start, end = arrivals["start"].to_numpy(np.int64), arrivals["end"].to_numpy(np.int64)
    # on int64 offsets from the occurrence's first start (``start_rel``): absolute ns lose their last
    # digits in float64, which a median goes through
    first = start - arrivals["start_rel"].to_numpy(np.int64)
    group = arrivals.groupby(["collective", "process_group", "step", "occurrence"])["start_rel"]
    last = first + group.transform("max").to_numpy(np.int64)
    median = first + np.round(group.transform("median").to_numpy(np.float64)).astype(np.int64)
    path_start, path_end = arrivals["path_start"].to_numpy(np.int64), arrivals["path_end"].to_numpy(np.int64)
    on_path = path_start >= 0
    wait_end = np.minimum(last, end)
    waited = np.where(on_path, np.clip(np.minimum(wait_end, path_end) - np.maximum(start, path_start), 0, None), 0)
    beyond_start = np.maximum(np.maximum(start, median), path_start)
    beyond_end = np.minimum(wait_end, path_end)
    beyond = np.where(on_path, np.clip(beyond_end - beyond_start, 0, None), 0)
    frame = arrivals[["rank", "step", "device"]].assign(waiting_on_rank_ns=waited, median_saving_ns=beyond)
    waits = frame.groupby(["rank", "step"])[["waiting_on_rank_ns", "median_saving_ns"]].sum().reset_index()
    keep = beyond > 0
    claims = pd.DataFrame({"rank": frame["rank"].to_numpy(np.int64)[keep],
                           "device": frame["device"].to_numpy(np.int64)[keep],
                           "step": frame["step"].to_numpy(np.int64)[keep], "scenario": "median_rank",
                           "start_ns": beyond_start[keep], "end_ns": beyond_end[keep]})
    return waits, claims


def group_totals(steps: pd.DataFrame) -> dict[str, int]:
    """The time of every window's path in each bound-by group (host, gpu, communication)."""
    return {g: int(steps[[f"{c}_ns" for c in cats]].to_numpy(np.int64).sum()) for g, cats in GROUPS.items()}


def _bound(steps: pd.DataFrame) -> pd.DataFrame:
    """``bound_by``: the largest of the host, GPU and communication groups; ``bound_share`` its share."""
    sums = np.stack([steps[[f"{c}_ns" for c in cats]].to_numpy(np.int64).sum(axis=1) for cats in GROUPS.values()],
                    axis=1)
    path = np.maximum(steps["path_ns"].to_numpy(np.float64), 1.0)
    best = sums.argmax(axis=1)
    steps["bound_by"] = np.asarray(list(GROUPS), dtype=object)[best]
    steps["bound_share"] = sums[np.arange(len(steps)), best] / path
    return steps


def _steps_table(steps: pd.DataFrame) -> pd.DataFrame:
    out = steps.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    out["achievable_ns"] = out["achievable_ns"].fillna(out["step_ns"]).astype(np.int64)
    out["step"] = step_column(out["step"].to_numpy(np.int64))
    return out[STEP_COLUMNS]


def _whatif_table(whatif: pd.DataFrame) -> pd.DataFrame:
    """Per rank, step and scenario; then per rank with steps one row per scenario (step empty) with
    the mean over its steps."""
    order = {s: i for i, s in enumerate(SCENARIOS)}
    per_step = whatif[whatif["step"] != NO_STEP]
    means = (per_step.groupby(["rank", "scenario"])[["step_ns", "whatif_ns", "saving_ns", "modelled_share"]].mean()
             .reset_index().assign(step=NO_STEP))
    for column in ("step_ns", "whatif_ns", "saving_ns"):
        means[column] = np.round(means[column]).astype(np.int64)
    out = pd.concat([whatif, means], ignore_index=True)
    out["saving_share"] = out["saving_ns"].to_numpy(np.float64) / np.maximum(out["step_ns"].to_numpy(np.float64), 1.0)
    out["assumption"] = out["scenario"].map(ASSUMPTIONS)
    out = out.assign(_s=out["scenario"].map(order), _whole=out["step"] == NO_STEP)
    out = out.sort_values(["rank", "_whole", "step", "_s"], kind="stable").drop(columns=["_s", "_whole"])
    out["step"] = step_column(out["step"].to_numpy(np.int64))
    return out.reset_index(drop=True)[WHATIF_COLUMNS]


def _empty(columns: list[str]) -> pd.DataFrame:
    text = {"bound_by", "top_name", "scenario", "assumption"}
    return pd.DataFrame({c: pd.Series(dtype=object if c in text else "int64") for c in columns})


# ------------------------------------------------------------------------------------ findings


def _findings(steps: pd.DataFrame, whatif: pd.DataFrame, claims: pd.DataFrame) -> list[Finding]:
    has_steps = bool((steps["step"] != NO_STEP).any())
    unit = "per step" if has_steps else "over the whole trace"
    out = [_bound_finding(steps, has_steps)]
    for scenario, code in CODES.items():
        rows = whatif[whatif["scenario"] == scenario]
        mean_step = float(rows["step_ns"].mean())
        saving = float(rows["saving_ns"].mean())
        if not len(rows) or saving <= 0 or saving < MIN_SAVING_SHARE * mean_step:
            continue
        mine = claims[claims["scenario"] == scenario]
        per_rank = (rows.groupby("rank")[["step_ns", "whatif_ns", "saving_ns"]].mean().round().astype(np.int64)
                    .reset_index().to_dict("records"))
        what = "Steps" if has_steps else "The trace"
        out.append(Finding(
            code=code, severity="low", analysis=NAME, part_of=dict(FINDING_PARENTS)[code],
            title=f"{what} would take {fmt_ns(saving)} less {unit} ({fmt_ns(mean_step)} -> "
                  f"{fmt_ns(mean_step - saving)}) if {PHRASES[scenario]}",
            recommendation=RECOMMENDATIONS[scenario],
            evidence={"scenario": scenario, "step_ns": int(round(mean_step)), "saving_ns": int(round(saving)),
                      "whatif_ns": int(round(mean_step - saving)), "assumption": ASSUMPTIONS[scenario],
                      "basis": unit, "per_rank": per_rank,
                      "cost_note": "the cost counts the part of this saving that is time no finding ranked before "
                                   "it (or its umbrella) already claims: the report never counts an instant twice"},
            claims=Claims.of(mine["rank"].to_numpy(np.int64), mine["device"].to_numpy(np.int64),
                             mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)),
        ))
    achievable = whatif[whatif["scenario"] == "achievable"]
    if len(achievable):
        # medians over windows, as the summary's headline figures
        mean_step, best = float(achievable["step_ns"].median()), float(achievable["whatif_ns"].median())
        modelled = float(achievable["modelled_share"].mean()) if achievable["modelled_share"].notna().any() else 0.0
        what = "step" if has_steps else "time for the whole trace"
        out.append(Finding(
            code="achievable_step", severity="info", analysis=NAME,
            title=f"Achievable {what} ~{fmt_ns(best)} against {fmt_ns(mean_step)} measured (medians) "
                  f"({(best - mean_step) / max(mean_step, 1):+.0%}), with communication overlapped, no host "
                  f"overhead and modelled kernels at their roofline ({modelled:.0%} of the kernel time modelled)",
            recommendation="The what-if table (critical_path: whatif) says what each change alone would give; the "
                           "largest saving is where to start.",
            evidence={"step_ns": int(round(mean_step)), "achievable_ns": int(round(best)), "modelled_share": modelled,
                      "assumption": ASSUMPTIONS["achievable"], "basis": unit}))
    return out


def _bound_finding(steps: pd.DataFrame, has_steps: bool) -> Finding:
    totals = group_totals(steps)
    path = max(int(steps["path_ns"].sum()), 1)
    group = max(totals, key=lambda g: totals[g])
    median_step = float(steps["step_ns"].median())
    where = f"median step {fmt_ns(median_step)}" if has_steps else f"whole trace {fmt_ns(median_step)}"
    counts = steps["bound_by"].value_counts().to_dict()
    return Finding(
        code="critical_path_bound", severity="info", analysis=NAME,
        title=f"{'Steps are' if has_steps else 'The trace is'} bound by the {GROUP_TEXT[group]}: "
              f"{totals[group] / path:.0%} of the critical path ({where})",
        recommendation="The critical path's segments and contributors (critical_path: segments, contributors) "
                       "name the events that bound the step; shortening anything else does not shorten it.",
        evidence={"shares": {g: totals[g] / path for g in totals}, "windows_by_bound": {str(k): int(v) for k, v in
                                                                                       counts.items()},
                  "basis": "per step" if has_steps else "whole trace"})


# ------------------------------------------------------------------------------------ summary


def report_summary(inputs: ReportInputs) -> tuple[dict[str, Any], dict[str, str]]:
    """The report summary's critical-path figures (docs/reports.md, "summary")."""
    steps = inputs.table(NAME, "steps")
    keys = ("critical_path_step_ns", "critical_path_bound_by", "critical_path_bound_share", "achievable_step_ns",
            "critical_path_steps")
    if steps is None or steps.empty:
        return {k: None for k in keys}, {}
    totals = group_totals(steps)
    group = max(totals, key=lambda g: totals[g])
    path = max(int(steps["path_ns"].sum()), 1)
    notes = {}
    if steps["step"].isna().all():
        notes["critical_path_step_ns"] = "no steps: the critical path of the whole trace"
    return {"critical_path_step_ns": int(round(float(steps["step_ns"].median()))),
            "critical_path_bound_by": group, "critical_path_bound_share": totals[group] / path,
            "achievable_step_ns": int(round(float(steps["achievable_ns"].median()))),
            "critical_path_steps": int(len(steps))}, notes
