"""Synthetic ``modules`` results that follow the analysis's contract (/work/lead/modules_spec.md,
docs/metrics.md "Modules and ranges"): the front ends (diff, history, SQL) are tested on them
without depending on how the analysis builds its range tree.

:func:`synthetic_result` builds, from a real trace and its temporal ``steps`` table, per rank and
step a small model: ``Model_0`` over the step, two layers ``Model_0/Layer_0`` and
``Model_0/Layer_1`` splitting it in halves, and in each layer ``Attention_0`` over its first half
(type paths ``Model``, ``Model/Layer``, ``Model/Layer/Attention``). Each kernel of the rank is
attributed to the innermost range open at its start; the ``ranges``, ``range_gpu``, ``type_paths``
and ``attribution`` tables and the report's summary keys are then derived as the contract defines
them (inclusive = |union| of the kernels of the range and below it). :func:`with_modules` returns
the report with that result added, as the pipeline would hold it; :func:`changed` makes the "after"
side of a diff with a known answer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceview.findings import AnalysisResult
from traceview.intervals import total
from traceview.model import Kind, Trace
from builders import with_analysis_result
from traceview.report import Report

RANGE_COLUMNS = ("rank", "range_id", "parent_id", "depth", "kind", "domain", "name", "path", "type_path", "tid",
                 "start_ns", "end_ns", "row")


def _step_ranges(rank: int, start: int, end: int, first_id: int) -> list[dict[str, Any]]:
    """The ranges of one step (ids from ``first_id``, in start order)."""
    mid = (start + end) // 2
    out = [dict(rank=rank, range_id=first_id, parent_id=-1, depth=0, name="Model_0", path="Model_0",
                type_path="Model", start_ns=start, end_ns=end)]
    for i, (a, b) in enumerate(((start, mid), (mid, end))):
        layer_id = first_id + len(out)
        out.append(dict(rank=rank, range_id=layer_id, parent_id=first_id, depth=1, name=f"Layer_{i}",
                        path=f"Model_0/Layer_{i}", type_path="Model/Layer", start_ns=a, end_ns=b))
        out.append(dict(rank=rank, range_id=layer_id + 1, parent_id=layer_id, depth=2, name="Attention_0",
                        path=f"Model_0/Layer_{i}/Attention_0", type_path="Model/Layer/Attention", start_ns=a,
                        end_ns=(a + b) // 2))
    for r in out:
        r.update(kind="module", domain="", tid=0, row=-1)
    return out


def _kernels(trace: Trace, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, is communication) of the rank's kernels."""
    rows = np.flatnonzero((trace.column("rank") == rank) & (trace.kind_codes() == int(Kind.KERNEL)))
    starts = trace.column("start_ns")[rows].astype(np.int64)
    ends = starts + trace.column("dur_ns")[rows].astype(np.int64)
    names = trace.events.column("name").to_pylist()
    comm = np.array(["nccl" in str(names[r]).lower() for r in rows.tolist()], dtype=bool)
    return starts, ends, comm


def _gpu_rows(ranges: pd.DataFrame, starts: np.ndarray, ends: np.ndarray, comm: np.ndarray,
              busy_ns: int) -> list[dict[str, Any]]:
    """One rank's range_gpu rows: a kernel is in a range's subtree when it starts inside it, and
    its range's own when no child range holds its start."""
    out = []
    children = ranges.groupby("parent_id")
    for r in ranges.itertuples():
        inside = (starts >= r.start_ns) & (starts < r.end_ns)
        own = inside.copy()
        if r.range_id in children.groups:
            for c in ranges.loc[children.groups[r.range_id]].itertuples():
                own &= ~((starts >= c.start_ns) & (starts < c.end_ns))
        if not inside.any():
            continue
        inclusive = total(starts[inside], ends[inside])
        out.append({"rank": r.rank, "range_id": r.range_id, "depth": r.depth, "kind": r.kind, "path": r.path,
                    "type_path": r.type_path, "start_ns": r.start_ns, "end_ns": r.end_ns, "inclusive_ns": inclusive,
                    "exclusive_ns": total(starts[own], ends[own]), "kernels": int(inside.sum()),
                    "compute_ns": total(starts[inside & ~comm], ends[inside & ~comm]),
                    "communication_ns": total(starts[inside & comm], ends[inside & comm]), "memory_ns": 0,
                    "backward_ns": 0, "graph_replay_ns": 0, "share": inclusive / max(busy_ns, 1)})
    return out


def type_paths_of(range_gpu: pd.DataFrame, busy: dict[int, int]) -> pd.DataFrame:
    """The ``type_paths`` table from ``range_gpu`` (sums over the instances, as the contract says)."""
    out = range_gpu.groupby(["rank", "type_path"], as_index=False, sort=True).agg(
        depth=("depth", "first"), instances=("range_id", "size"), inclusive_ns=("inclusive_ns", "sum"),
        exclusive_ns=("exclusive_ns", "sum"), kernels=("kernels", "sum"), backward_ns=("backward_ns", "sum"))
    out["share"] = out["inclusive_ns"] / out["rank"].map(busy).clip(lower=1)
    return out


def type_path_steps_of(range_gpu: pd.DataFrame, temporal_steps: pd.DataFrame, busy: dict[int, int]) -> pd.DataFrame:
    """The ``type_path_steps`` table: per rank, step (the one holding the instance: the synthetic
    tree's ranges lie inside steps) and type path, the sum over its instances there."""
    steps = temporal_steps[["rank", "step", "start_ns"]].rename(columns={"start_ns": "step_start_ns"})
    placed = pd.merge_asof(range_gpu.sort_values("start_ns"), steps.sort_values("step_start_ns"), by="rank",
                           left_on="start_ns", right_on="step_start_ns")
    out = placed.groupby(["rank", "step", "type_path"], as_index=False)["inclusive_ns"].sum()
    out["share"] = out["inclusive_ns"] / out["rank"].map(busy).clip(lower=1)
    return out


def synthetic_result(trace: Trace, temporal_steps: pd.DataFrame) -> AnalysisResult:
    """The contract's tables for ``trace`` (see the module docstring)."""
    ranges: list[dict[str, Any]] = []
    gpu: list[dict[str, Any]] = []
    attribution = []
    busy: dict[int, int] = {}
    for rank, steps in temporal_steps.sort_values(["rank", "start_ns"]).groupby("rank", sort=True):
        rank = int(rank)
        mine: list[dict[str, Any]] = []
        for s in steps.itertuples():
            mine += _step_ranges(rank, int(s.start_ns), int(s.end_ns), len(mine))
        starts, ends, comm = _kernels(trace, rank)
        busy[rank] = total(starts, ends)
        frame = pd.DataFrame(mine, columns=list(RANGE_COLUMNS))
        rows = _gpu_rows(frame, starts, ends, comm, busy[rank])
        top = [r for r in rows if r["depth"] == 0]
        covered = np.zeros(len(starts), dtype=bool)
        for r in top:
            covered |= (starts >= r["start_ns"]) & (starts < r["end_ns"])
        for rule, mask in (("range", covered), ("none", ~covered), ("attributed", covered),
                           ("unattributed", ~covered)):
            gpu_ns = total(starts[mask], ends[mask])
            attribution.append({"rank": rank, "rule": rule, "activities": int(mask.sum()), "gpu_ns": gpu_ns,
                                "busy_ns": busy[rank], "share": gpu_ns / max(busy[rank], 1)})
        ranges += mine
        gpu += rows
    range_gpu = pd.DataFrame(gpu)
    tables = {"ranges": pd.DataFrame(ranges, columns=list(RANGE_COLUMNS)), "range_gpu": range_gpu,
              "type_paths": type_paths_of(range_gpu, busy),
              "type_path_steps": type_path_steps_of(range_gpu, temporal_steps, busy),
              "attribution": pd.DataFrame(attribution)}
    return AnalysisResult(name="modules", tables=tables)


def summary_keys(result: AnalysisResult) -> dict[str, Any]:
    """``top_layers`` and ``attributed_share`` as the contract defines them (whole job)."""
    paths = result.tables["type_paths"]
    if paths.empty:
        return {"top_layers": None, "attributed_share": None}
    att = result.tables["attribution"]
    busy = float(att.groupby("rank")["busy_ns"].first().sum())
    job = paths.groupby("type_path", as_index=False).agg(inclusive_ns=("inclusive_ns", "sum"), depth=("depth", "max"))
    job["share"] = job["inclusive_ns"] / max(busy, 1.0)
    held = job[job["share"] >= 0.10]
    deepest = held[[not any(o.startswith(p + "/") for o in held["type_path"]) for p in held["type_path"]]]
    top = deepest.sort_values("inclusive_ns", ascending=False).head(5)
    attributed = float(att.loc[att["rule"] == "attributed", "gpu_ns"].sum()) / max(busy, 1.0)
    return {"top_layers": [{"type_path": str(r.type_path), "inclusive_ns": int(r.inclusive_ns),
                            "share": float(r.share)} for r in top.itertuples()], "attributed_share": attributed}


def with_modules(report: Report, result: AnalysisResult | None = None) -> Report:
    """``report`` with a modules result (default: :func:`synthetic_result` of its trace) in its
    results, its report section (tables as bounded records) and its summary keys."""
    if result is None:
        assert report.trace is not None, "synthetic modules need the report's trace"
        result = synthetic_result(report.trace, report.table("temporal", "steps"))
    return with_analysis_result(report, "modules", "Modules and ranges", result, summary_keys(result))


def changed(result: AnalysisResult, temporal_steps: pd.DataFrame, type_path: str, add_ns: int) -> AnalysisResult:
    """A copy of ``result`` whose every instance of ``type_path`` (and so each of its ancestors) has
    ``add_ns`` more inclusive GPU time: the "after" side of a diff with a known answer."""
    gpu = result.tables["range_gpu"].copy()
    hit = gpu["type_path"] == type_path
    # the type paths of type_path and its ancestors ("Model/Layer" -> "Model", "Model/Layer")
    parts = type_path.split("/")
    lineage = gpu["type_path"].isin(["/".join(parts[: i + 1]) for i in range(len(parts))]).to_numpy()
    # each range gains add_ns per instance of type_path in its subtree (the synthetic tree: by time)
    for row in gpu[hit].itertuples():
        above = (gpu["rank"] == row.rank) & (gpu["start_ns"] <= row.start_ns) & (gpu["end_ns"] >= row.end_ns) & \
            lineage
        gpu.loc[above, "inclusive_ns"] += add_ns
    busy = result.tables["attribution"].groupby("rank")["busy_ns"].first().to_dict()
    per_step = type_path_steps_of(gpu, temporal_steps, busy)
    return AnalysisResult(name="modules", tables={**result.tables, "range_gpu": gpu,
                                                  "type_paths": type_paths_of(gpu, busy), "type_path_steps": per_step})


def without_modules(report: Report) -> Report:
    """``report`` as a report without module ranges: its result, section and summary keys removed."""
    data = dict(report.data)
    data["summary"] = {k: v for k, v in report.summary.items() if k not in ("top_layers", "attributed_share")}
    data["analyses"] = {k: v for k, v in report["analyses"].items() if k != "modules"}
    return Report(data, {k: v for k, v in report.results.items() if k != "modules"}, report.trace)
