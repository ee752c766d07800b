"""Synthetic ``critical_path`` results that follow the analysis's contract
(/work/lead/critical_path_spec.md, docs/metrics.md): the front ends (Perfetto export, diff, check,
history, SQL) are tested on them without depending on how the analysis finds its path.

:func:`synthetic_result` builds, from a real trace and its temporal ``steps`` table, for every rank
and step a path that partitions the step window exactly: the step's kernels in start order (GPU
segments: ``gpu_compute`` or ``communication``, with their event rows), the time between them
``host_untraced`` (row -1). The ``steps``, ``whatif``, ``contributors`` and ``edges`` tables and the
report's summary keys are derived from those segments as the contract defines them;
``achievable_ns`` is the step's GPU compute and memory time (a figure of the right shape: any value
at most the step). :func:`with_critical_path` returns the report with that result added (tables,
report section and summary keys), as the pipeline would hold it."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from traceview.findings import AnalysisResult
from traceview.model import Kind, Trace
from builders import with_analysis_result
from traceview.report import Report

CATEGORIES = ("host_compute", "host_untraced", "launch_overhead", "sync", "gpu_compute", "memory", "communication",
              "gpu_wait", "waiting_on_rank", "unlinked")
GROUPS = {"host": ("host_compute", "host_untraced", "launch_overhead", "sync"),
          "gpu": ("gpu_compute", "memory", "gpu_wait"), "communication": ("communication", "waiting_on_rank")}
SCENARIOS = ("comm_overlapped", "no_host_overhead", "roofline", "median_rank", "achievable")
SEGMENT_COLUMNS = ("rank", "step", "start_ns", "end_ns", "dur_ns", "category", "name", "row", "tid", "device",
                   "stream")


def _window_segments(trace: Trace, rank: int, step: Any, start: int, end: int) -> list[dict[str, Any]]:
    """One window's segments: its kernels in start order, the time between them untraced host time."""
    kinds = trace.kind_codes()
    starts = trace.column("start_ns")
    ends = starts + trace.column("dur_ns")
    rows = np.flatnonzero((trace.column("rank") == rank) & (kinds == int(Kind.KERNEL)) & (starts >= start)
                          & (starts < end))
    rows = rows[np.argsort(starts[rows], kind="stable")]
    names = trace.events.column("name").to_pylist()
    out: list[dict[str, Any]] = []
    cursor = start

    def add(a: int, b: int, category: str, name: str, row: int, device: int = -1, stream: int = -1) -> None:
        out.append({"rank": rank, "step": step, "start_ns": a, "end_ns": b, "dur_ns": b - a, "category": category,
                    "name": name, "row": row, "tid": 0 if row < 0 else -1, "device": device, "stream": stream})

    for row in rows.tolist():
        a, b = int(starts[row]), min(int(ends[row]), end)
        if b <= cursor:
            continue  # under an earlier kernel (another stream): not on this synthetic path
        if a > cursor:
            add(cursor, a, "host_untraced", "", -1)
        name = str(names[row])
        category = "communication" if "nccl" in name.lower() else "gpu_compute"
        add(max(a, cursor), b, category, name, row, int(trace.column("device")[row]),
            int(trace.column("stream")[row]))
        cursor = b
    if cursor < end:
        add(cursor, end, "host_untraced", "", -1)
    return out


def _steps_row(rank: int, step: Any, start: int, end: int, segments: pd.DataFrame) -> dict[str, Any]:
    per = segments.groupby("category")["dur_ns"].sum()
    row: dict[str, Any] = {"rank": rank, "step": step, "start_ns": start, "end_ns": end, "step_ns": end - start,
                           "path_ns": int(segments["dur_ns"].sum())}
    row.update({f"{c}_ns": int(per.get(c, 0)) for c in CATEGORIES})
    groups = {g: sum(row[f"{c}_ns"] for c in cs) for g, cs in GROUPS.items()}
    bound = max(groups, key=lambda g: groups[g])
    named = segments[segments["row"] >= 0].groupby("name")["dur_ns"].sum()
    row.update(bound_by=bound, bound_share=groups[bound] / max(row["path_ns"], 1),
               top_name=str(named.idxmax()) if len(named) else "", top_ns=int(named.max()) if len(named) else 0,
               achievable_ns=row["gpu_compute_ns"] + row["memory_ns"])
    return row


def _whatif(steps: pd.DataFrame) -> pd.DataFrame:
    savings: dict[str, Callable[[pd.Series], int]] = {
        "comm_overlapped": lambda r: int(r["communication_ns"]),
        "no_host_overhead": lambda r: int(sum(r[f"{c}_ns"] for c in GROUPS["host"])),
        "roofline": lambda r: int(r["gpu_compute_ns"] // 10),
        "median_rank": lambda r: 0,
        "achievable": lambda r: int(r["step_ns"] - r["achievable_ns"]),
    }
    rows = []
    for _, r in steps.iterrows():
        for scenario in SCENARIOS:
            saving = savings[scenario](r)
            rows.append({"rank": r["rank"], "step": r["step"], "scenario": scenario, "step_ns": int(r["step_ns"]),
                         "whatif_ns": int(r["step_ns"]) - saving, "saving_ns": saving,
                         "saving_share": saving / max(int(r["step_ns"]), 1),
                         "modelled_share": 0.5 if scenario in ("roofline", "achievable") else np.nan,
                         "assumption": f"synthetic {scenario}"})
    frame = pd.DataFrame(rows)
    means = frame.groupby(["rank", "scenario"], as_index=False, sort=False)[
        ["step_ns", "whatif_ns", "saving_ns", "saving_share", "modelled_share"]].mean()
    means = means.assign(step=pd.NA, assumption=[f"synthetic {s}" for s in means["scenario"]])
    for column in ("step_ns", "whatif_ns", "saving_ns"):
        means[column] = means[column].round().astype(np.int64)
    out = pd.concat([frame, means[frame.columns]], ignore_index=True)
    out["step"] = out["step"].astype("Int64")
    return out


def synthetic_result(trace: Trace, temporal_steps: pd.DataFrame) -> AnalysisResult:
    """The contract's tables for ``trace`` (see the module docstring)."""
    segments: list[dict[str, Any]] = []
    step_rows = []
    for r in temporal_steps.sort_values(["rank", "start_ns"]).itertuples():
        window = _window_segments(trace, int(r.rank), int(r.step), int(r.start_ns), int(r.end_ns))
        segments += window
        step_rows.append(_steps_row(int(r.rank), int(r.step), int(r.start_ns), int(r.end_ns), pd.DataFrame(window)))
    seg = pd.DataFrame(segments, columns=list(SEGMENT_COLUMNS))
    seg["step"] = seg["step"].astype("Int64")
    steps = pd.DataFrame(step_rows)
    steps["step"] = steps["step"].astype("Int64")
    contributors = seg.groupby(["rank", "category", "name"], as_index=False).agg(path_ns=("dur_ns", "sum"),
                                                                                 count=("dur_ns", "size"))
    contributors["share"] = contributors["path_ns"] / contributors.groupby("rank")["path_ns"].transform("sum")
    edges = pd.DataFrame({"rank": sorted(seg["rank"].unique()), "edge": "duration", "count": 1, "binding": 1,
                          "rule": "recorded"})
    return AnalysisResult(name="critical_path", tables={"steps": steps, "whatif": _whatif(steps), "segments": seg,
                                                        "contributors": contributors, "edges": edges})


def summary_keys(result: AnalysisResult) -> dict[str, Any]:
    """The report summary's critical-path keys, as the contract defines them from ``steps``."""
    steps = result.tables["steps"]
    if steps.empty:
        return {}
    bound = steps["bound_by"].mode().iloc[0]
    return {"critical_path_step_ns": int(steps["step_ns"].median()), "critical_path_bound_by": str(bound),
            "critical_path_bound_share": float(steps.loc[steps["bound_by"] == bound, "bound_share"].median()),
            "achievable_step_ns": int(steps["achievable_ns"].median()), "critical_path_steps": int(len(steps))}


def with_critical_path(report: Report, result: AnalysisResult | None = None) -> Report:
    """``report`` with a critical-path result (default: :func:`synthetic_result` of its trace) in its
    results, its report section (tables as bounded records) and its summary keys."""
    if result is None:
        assert report.trace is not None, "a synthetic path needs the report's trace"
        result = synthetic_result(report.trace, report.table("temporal", "steps"))
    return with_analysis_result(report, "critical_path", "Critical path", result, summary_keys(result))


def changed(result: AnalysisResult, *, gpu_compute_ns: int = 0, host_untraced_ns: int = 0,
            achievable_ns: int = 0, bound_by: str | None = None) -> AnalysisResult:
    """A copy of ``result`` whose every step has these amounts added (and ``bound_by`` set): the
    "after" side of a diff with a known answer."""
    steps = result.tables["steps"].copy()
    steps["gpu_compute_ns"] += gpu_compute_ns
    steps["host_untraced_ns"] += host_untraced_ns
    steps["achievable_ns"] += achievable_ns
    for column in ("step_ns", "path_ns"):
        steps[column] += gpu_compute_ns + host_untraced_ns
    if bound_by is not None:
        steps["bound_by"] = bound_by
    return AnalysisResult(name="critical_path", tables={**result.tables, "steps": steps,
                                                        "whatif": _whatif(steps)})


def without_critical_path(report: Report) -> Report:
    """``report`` as a report without a critical path (no GPU activity, or made before the analysis):
    its result, report section and summary keys removed."""
    data = dict(report.data)
    data["summary"] = {k: v for k, v in report.summary.items() if not k.startswith(("critical_path", "achievable"))}
    data["analyses"] = {k: v for k, v in report["analyses"].items() if k != "critical_path"}
    return Report(data, {k: v for k, v in report.results.items() if k != "critical_path"}, report.trace)
