"""Compare two reports (before/after): what changed, by how much, and whether it is more than noise.

Pure functions over two :class:`~traceview.report.Report` objects made by the one pipeline
(:func:`traceview.pipeline.analyze`); the rules are documented in ``docs/diff_and_check.md`` and
repeated here.

**Figures compared**, per rank (and GPU, when a rank drives several), as a mean per step:

* ``step_time_ns``: the step's CPU range (``ProfilerStep#N`` or the step marker), ``end - start``
  (the temporal analysis's ``steps`` table);
* from the temporal breakdown (its ``breakdown`` table, docs/metrics.md): ``gpu_window_ns``,
  ``busy_ns``, ``idle_ns``, ``compute_ns``, ``communication_ns``, ``exposed_comm_ns``, ``memory_ns``
  and ``overlap_pct``;
* per kernel: total GPU time per step (kernels, memcpy and memset, from the kernel analysis's
  ``kernels`` and ``kernels_by_step`` tables), with names matched as described below;
* findings: the report's own list (``report["findings"]``: merged across ranks, numbered as in every
  other format), by (code, rank);
* efficiency (the efficiency analysis, docs/metrics.md "Efficiency"): per op type (rank, device, op
  name, dtype, unit) its GPU time, efficiency and achieved TFLOP/s in each report (its ``op_types``
  table), and per rank and device the modelled share of the op-linked kernel time (``coverage``) and
  the whole-trace HFU (``steps``). These are whole-trace ratios with no per-step samples: they are
  shown side by side, not judged by the noise rule, and do not enter the verdict;
* the critical path (the critical_path analysis, docs/metrics.md "Critical path";
  :mod:`traceview.compare.critical_path`): per rank, the path's time per segment category and the
  achievable step time (per-step samples, judged by the noise rule), what bounds most of its
  steps, and the report summary's figures side by side. A significant change there, or a changed
  bound, makes the verdict ``changed`` when the step time did not move;
* layers (the modules analysis, docs/metrics.md "Modules and ranges";
  :mod:`traceview.compare.modules`): per rank, each module type path's inclusive GPU time per step
  (per-step samples, judged by the noise rule), its share of the rank's GPU busy time side by side.
  A significant change of a layer makes the verdict ``changed`` when the step time did not move.

**Samples.** Each per-step row of a report is one sample; the value compared is the mean of the
samples (activity outside every step is not in them). A trace without steps gives one sample, the
whole trace. A kernel that does not run in some step counts 0 for that step. Step numbers need not
match between the two traces: the steps are samples, not pairs.

**Noise rule** (:mod:`traceview.compare.noise`). ``delta = mean(new) - mean(base)``; significant
when ``|delta| > max(k * s_pooled, abs_floor, rel_floor * |mean(base)|)``. A delta of exactly 0 is
``unchanged``; under the threshold ``within_noise``; a significant one is ``worse`` or ``better``
(more time is worse; more overlap is better).

**Kernel name matching** (per rank): first by the exact name; then, among the names left on both
sides, by the normalised name (:func:`~traceview.compare.names.normalize_kernel_name`), so that
renamed instantiations still match. Names that share a normalised name are summed on each side.
What is left is ``appeared`` (only in the new trace) or ``vanished`` (only in the base).

**Findings** are keyed by (code, rank); a finding the report merged across ranks has no rank
(findings of the same key are summed: cost, highest severity). ``new``: only in the new report;
``fixed``: only in the base; ``worse``/``better``: the severity rose/fell, or the cost per step
changed by more than ``max(k * s_pooled(step time of that rank; for rank-less findings the largest
over ranks), finding_rel_floor * base cost, abs_floor)``; otherwise ``unchanged``.

The diff needs whole tables: reports analysed in this process (a job's report keeps bounded ones).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from traceview.compare.critical_path import PathDelta, diff_critical_path, summary_figures
from traceview.compare.measured import MeasuredDelta, diff_measured
from traceview.compare.modules import LayerDelta, diff_layers, layer_notes
from traceview.compare.names import normalize_kernel_name
from traceview.compare.noise import Change, DiffOptions, compare, pooled_std
from traceview.errors import TraceviewError
from traceview.findings import SEVERITIES
from traceview.report import Report
from traceview.secrets import scrub_text

__all__ = ["METRICS", "SCHEMA_VERSION", "Change", "DiffOptions", "EfficiencyOverall", "FindingDelta", "KernelDelta",
           "MetricDelta", "OpTypeDelta", "Side", "TraceDiff", "compare", "diff_efficiency", "diff_reports",
           "finding_groups", "kernel_samples", "metric_samples", "normalize_kernel_name", "pooled_std",
           "require_whole_tables", "steps_per_rank"]

#: JSON schema version of :meth:`TraceDiff.to_dict`
SCHEMA_VERSION = 1

#: metric -> (unit, higher is worse, label)
METRICS: dict[str, tuple[str, bool, str]] = {
    "step_time_ns": ("ns", True, "step time"),
    "gpu_window_ns": ("ns", True, "GPU window"),
    "busy_ns": ("ns", True, "GPU busy"),
    "idle_ns": ("ns", True, "GPU idle"),
    "compute_ns": ("ns", True, "compute"),
    "communication_ns": ("ns", True, "communication"),
    "exposed_comm_ns": ("ns", True, "exposed communication"),
    "memory_ns": ("ns", True, "memcpy/memset"),
    "overlap_pct": ("pct", False, "comm/compute overlap"),
}
#: temporal breakdown column of each metric (step time comes from the steps table)
_BREAKDOWN_COLUMNS = {
    "gpu_window_ns": "window_ns",
    "busy_ns": "busy_ns",
    "idle_ns": "idle_ns",
    "compute_ns": "compute_ns",
    "communication_ns": "communication_ns",
    "exposed_comm_ns": "exposed_comm_ns",
    "memory_ns": "memory_ns",
    "overlap_pct": "overlap_pct",
}
#: order of the finding statuses in the diff (most urgent first)
_FINDING_STATUS_ORDER = {"new": 0, "worse": 1, "fixed": 2, "better": 3, "unchanged": 4}

#: (rank, device); device is None when the rank drives a single GPU
Where = tuple[int, "int | None"]
#: (finding code, rank); rank is None for a finding merged across ranks or about the whole job
FindingKey = tuple[str, "int | None"]
#: per-step samples of one kernel: (total ns per step, launches per step)
KernelSamples = tuple[np.ndarray, np.ndarray]


# ------------------------------------------------------------------------------------------------
# Results


@dataclass
class MetricDelta:
    metric: str
    unit: str
    rank: int
    device: int | None
    change: Change


@dataclass
class KernelDelta:
    rank: int
    device: int | None
    #: ``exact`` (same name), ``normalized`` (renamed, matched on the normalised name),
    #: ``appeared``, ``vanished``
    match: str
    key: str  # the normalised name
    base_names: list[str]
    new_names: list[str]
    base_count: float | None  # launches per step (mean)
    new_count: float | None
    change: Change

    @property
    def name(self) -> str:
        names = self.base_names or self.new_names
        return names[0] if len(names) == 1 else self.key

    @property
    def renamed(self) -> bool:
        return self.match == "normalized" and self.base_names != self.new_names


@dataclass
class FindingDelta:
    code: str
    rank: int | None
    status: str  # new, fixed, worse, better, unchanged
    base_severity: str | None
    new_severity: str | None
    base_cost_ns: int | None
    new_cost_ns: int | None
    threshold_ns: int | None
    title: str
    analysis: str
    #: the finding's id in each report (F1, F2.1, ...: as every format of that report numbers it)
    base_id: str | None = None
    new_id: str | None = None


@dataclass
class OpTypeDelta:
    """One op type's efficiency figures in each report (None where it is absent or has no roof)."""

    rank: int
    device: int | None
    name: str
    dtype: str
    unit: str
    match: str  # both, appeared (only in the new report), vanished (only in the base)
    base_gpu_ns: int | None
    new_gpu_ns: int | None
    base_efficiency: float | None
    new_efficiency: float | None
    base_tflops: float | None
    new_tflops: float | None

    @property
    def efficiency_delta_pp(self) -> float | None:
        """The change of efficiency in percentage points."""
        if self.base_efficiency is None or self.new_efficiency is None:
            return None
        return 100.0 * (self.new_efficiency - self.base_efficiency)

    @property
    def tflops_delta_pct(self) -> float | None:
        """The change of achieved TFLOP/s in percent of the base."""
        if self.base_tflops is None or self.new_tflops is None or self.base_tflops <= 0:
            return None
        return 100.0 * (self.new_tflops - self.base_tflops) / self.base_tflops


@dataclass
class EfficiencyOverall:
    """Per rank and device: the modelled share of the op-linked kernel time and the whole-trace HFU
    in each report (None where absent)."""

    rank: int
    device: int | None
    base_modelled_pct: float | None
    new_modelled_pct: float | None
    base_hfu: float | None
    new_hfu: float | None


@dataclass
class Side:
    """What one trace was: its label (path), ranks and steps per rank, and its report's warnings."""

    label: str
    ranks: list[int]
    steps: dict[int, int]
    warnings: list[str] = field(default_factory=list)


@dataclass
class TraceDiff:
    base: Side
    new: Side
    options: DiffOptions
    metrics: list[MetricDelta]
    kernels: list[KernelDelta]
    findings: list[FindingDelta]
    notes: list[str] = field(default_factory=list)
    #: efficiency per op type and per rank (shown, not judged: see the module docstring)
    op_types: list[OpTypeDelta] = field(default_factory=list)
    efficiency: list[EfficiencyOverall] = field(default_factory=list)
    #: the critical path per rank, and the reports' job-wide critical-path figures side by side
    critical_path: list[PathDelta] = field(default_factory=list)
    critical_path_summary: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: per rank and module type path, its inclusive GPU time per step (the largest change first)
    layers: list[LayerDelta] = field(default_factory=list)
    #: per kernel group measured by Nsight Compute (--ncu), its figures before and after (shown, not judged)
    measured: list[MeasuredDelta] = field(default_factory=list)

    def metric(self, metric: str, rank: int, device: int | None = None) -> MetricDelta | None:
        for m in self.metrics:
            if m.metric == metric and m.rank == rank and m.device == device:
                return m
        return None

    def significant_metrics(self) -> list[MetricDelta]:
        return [m for m in self.metrics if m.change.significant]

    def kernels_by_match(self, match: str) -> list[KernelDelta]:
        return [k for k in self.kernels if k.match == match]

    def summary(self) -> dict[str, Any]:
        def count(items: Iterable[Any], status: str) -> int:
            return sum(1 for x in items if x.change.status == status)

        def findings(status: str) -> int:
            return sum(1 for f in self.findings if f.status == status)

        kernels = self.kernels
        s: dict[str, Any] = {
            "metrics_worse": count(self.metrics, "worse"),
            "metrics_better": count(self.metrics, "better"),
            "metrics_within_noise": count(self.metrics, "within_noise"),
            "metrics_unchanged": count(self.metrics, "unchanged"),
            "kernels_worse": count(kernels, "worse"),
            "kernels_better": count(kernels, "better"),
            "kernels_within_noise": count(kernels, "within_noise") + count(kernels, "unchanged"),
            "kernels_appeared": sum(1 for k in kernels if k.match == "appeared"),
            "kernels_vanished": sum(1 for k in kernels if k.match == "vanished"),
            "kernels_renamed": sum(1 for k in kernels if k.renamed),
            "findings_new": findings("new"),
            "findings_fixed": findings("fixed"),
            "findings_worse": findings("worse"),
            "findings_better": findings("better"),
            "critical_path_bound_changed": sum(1 for p in self.critical_path if p.bound_changed),
            "achievable_worse": sum(1 for p in self.critical_path if p.achievable.status == "worse"),
            "achievable_better": sum(1 for p in self.critical_path if p.achievable.status == "better"),
            "layers_worse": count(self.layers, "worse"),
            "layers_better": count(self.layers, "better"),
            "layers_appeared": sum(1 for x in self.layers if x.match == "appeared" and x.change.significant),
            "layers_vanished": sum(1 for x in self.layers if x.match == "vanished" and x.change.significant),
        }
        s["noise_estimated"] = all(m.change.noise_estimated for m in self.metrics) if self.metrics else False
        s["verdict"] = self.verdict()
        return s

    def verdict(self) -> str:
        """``regressed`` / ``improved`` (by the step time, else the GPU window), ``changed`` (other
        significant changes), or ``no significant change``."""
        headline = [m for m in self.metrics if m.metric == "step_time_ns"] or \
            [m for m in self.metrics if m.metric == "gpu_window_ns"]
        statuses = {m.change.status for m in headline}
        if "worse" in statuses:
            return "regressed"
        if "better" in statuses:
            return "improved"
        if any(m.change.significant for m in self.metrics) or any(k.change.significant for k in self.kernels) \
                or any(f.status in ("new", "fixed", "worse", "better") for f in self.findings) \
                or any(p.significant for p in self.critical_path) or any(x.change.significant for x in self.layers):
            return "changed"
        return "no significant change"

    def to_dict(self) -> dict[str, Any]:
        """Stable JSON-ready form: fixed keys, times as int ns, percentages as floats."""
        return {
            "schema_version": SCHEMA_VERSION,
            "base": asdict(self.base) | {"steps": {str(k): v for k, v in sorted(self.base.steps.items())}},
            "new": asdict(self.new) | {"steps": {str(k): v for k, v in sorted(self.new.steps.items())}},
            "options": asdict(self.options),
            "summary": self.summary(),
            "metrics": [
                {"metric": m.metric, "unit": m.unit, "rank": m.rank, "device": m.device,
                 **_change_dict(m.change, m.unit)}
                for m in self.metrics
            ],
            "kernels": [
                {"rank": k.rank, "device": k.device, "match": k.match, "key": k.key, "name": k.name,
                 "base_names": k.base_names, "new_names": k.new_names,
                 "base_count": _round(k.base_count, 3), "new_count": _round(k.new_count, 3),
                 **_change_dict(k.change, "ns")}
                for k in self.kernels
            ],
            "findings": [asdict(f) for f in self.findings],
            "efficiency": {
                "op_types": [asdict(o) | {"base_efficiency": _round(o.base_efficiency, 4),
                                          "new_efficiency": _round(o.new_efficiency, 4),
                                          "base_tflops": _sig(o.base_tflops), "new_tflops": _sig(o.new_tflops),
                                          "efficiency_delta_pp": _round(o.efficiency_delta_pp, 2),
                                          "tflops_delta_pct": _round(o.tflops_delta_pct, 2)}
                             for o in self.op_types],
                "overall": [asdict(e) | {k: _round(getattr(e, k), 4) for k in ("base_modelled_pct",
                                                                               "new_modelled_pct", "base_hfu",
                                                                               "new_hfu")}
                            for e in self.efficiency],
            },
            "critical_path": {"summary": self.critical_path_summary,
                              "ranks": [_path_dict(p) for p in self.critical_path]},
            "layers": [{"rank": x.rank, "type_path": x.type_path, "depth": x.depth, "match": x.match,
                        "base_share": _round(x.base_share, 4), "new_share": _round(x.new_share, 4),
                        **_change_dict(x.change, "ns")} for x in self.layers],
            "measured": [m.to_dict() for m in self.measured],
            "notes": list(self.notes),
        }


def _path_dict(p: PathDelta) -> dict[str, Any]:
    return {"rank": p.rank, "base_bound_by": p.base_bound_by, "new_bound_by": p.new_bound_by,
            "base_bound_steps": p.base_bound_steps, "new_bound_steps": p.new_bound_steps,
            "base_steps": p.base_steps, "new_steps": p.new_steps, "bound_changed": p.bound_changed,
            "path": _change_dict(p.path, "ns"), "achievable": _change_dict(p.achievable, "ns"),
            "categories": [{"category": c.category, **_change_dict(c.change, "ns")} for c in p.categories]}


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(float(x), digits)


def _sig(x: float | None, digits: int = 6) -> float | None:
    """``x`` to ``digits`` significant digits (TFLOP/s of tiny ops would round to 0 at fixed decimals)."""
    return None if x is None else float(f"{float(x):.{digits}g}")


def _as_ns(x: float | None) -> int | None:
    return None if x is None else int(round(x))


def _change_dict(c: Change, unit: str) -> dict[str, Any]:
    def conv(x: float | None) -> float | int | None:
        return _as_ns(x) if unit == "ns" else _round(x, 4)

    return {
        "base": conv(c.base),
        "new": conv(c.new),
        "delta": conv(c.delta),
        "delta_pct": _round(c.delta_pct, 3),
        "threshold": conv(c.threshold),
        "pooled_std": conv(c.pooled_std),
        "noise_estimated": c.noise_estimated,
        "base_steps": c.base_steps,
        "new_steps": c.new_steps,
        "significant": c.significant,
        "status": c.status,
    }


# ------------------------------------------------------------------------------------------------
# Samples from a report


def require_whole_tables(report: Report, label: str) -> None:
    """Fail with one line when ``report`` was made by a job: its tables are cut to what the report
    shows, and per-step kernel samples or launch delays from them would be wrong."""
    executor = dict(report.get("execution") or {}).get("executor")
    if executor not in (None, "in-process"):
        raise TraceviewError(f"{label}: this report was analyzed by a job ({executor}), which keeps only bounded "
                             "tables; compare reports analyzed in this process (traceview.pipeline.analyze "
                             "without an executor)")


def _steps_frame(report: Report) -> pd.DataFrame:
    steps = report.table("temporal", "steps")
    if steps.empty:
        return pd.DataFrame(columns=["rank", "step", "start_ns", "end_ns"])
    return steps


def steps_per_rank(report: Report) -> dict[int, list[int]]:
    """rank -> its step numbers in start order."""
    steps = _steps_frame(report)
    out: dict[int, list[int]] = {}
    for rank, group in steps.groupby("rank", sort=True):
        out[int(rank)] = [int(s) for s in group.sort_values("start_ns")["step"]]
    return out


def multi_device(frame: pd.DataFrame) -> dict[int, bool]:
    """rank -> whether it drives more than one device (then device ids are part of the key)."""
    if frame.empty:
        return {}
    n = frame.groupby("rank")["device"].nunique()
    return {int(r): int(c) > 1 for r, c in n.items()}


def metric_samples(report: Report) -> dict[tuple[str, int, int | None], list[float]]:
    """(metric, rank, device) -> per-step samples (the whole trace when the rank has no steps)."""
    out: dict[tuple[str, int, int | None], list[float]] = {}
    for rank, group in _steps_frame(report).groupby("rank", sort=True):
        group = group.sort_values("start_ns")
        out[("step_time_ns", int(rank), None)] = [float(x) for x in (group["end_ns"] - group["start_ns"])]
    table = report.table("temporal", "breakdown")
    if table.empty:
        return out
    multi = multi_device(table)
    for (rank, device), group in table.groupby(["rank", "device"], sort=True):
        per_step = group[group["step"].notna()]
        rows = (per_step if len(per_step) else group[group["step"].isna()]).sort_values("first_start_ns")
        key_device = int(device) if multi.get(int(rank)) else None
        for metric, column in _BREAKDOWN_COLUMNS.items():
            values = [float(v) for v in rows[column] if not pd.isna(v)]
            if values:
                out[(metric, int(rank), key_device)] = values
    return out


def _per_step_samples(names: list[str], rows: pd.DataFrame, rank_steps: list[int]) -> dict[str, KernelSamples]:
    """name -> (total ns, launches) per step of ``rank_steps`` from one rank and GPU's rows of the
    ``kernels_by_step`` table (0 where a kernel did not run; rows outside every step are left out)."""
    row_names = rows["name"].astype(str).to_numpy()
    all_names = pd.Index(names).append(pd.Index(row_names)).unique()
    step_pos = pd.Index(rank_steps).get_indexer(pd.to_numeric(rows["step"], errors="coerce"))
    name_pos = all_names.get_indexer(row_names)
    inside = step_pos >= 0
    totals = np.zeros((len(all_names), len(rank_steps)))
    counts = np.zeros((len(all_names), len(rank_steps)))
    np.add.at(totals, (name_pos[inside], step_pos[inside]), rows["total_ns"].to_numpy(dtype=np.float64)[inside])
    np.add.at(counts, (name_pos[inside], step_pos[inside]), rows["count"].to_numpy(dtype=np.float64)[inside])
    return {str(name): (totals[i], counts[i]) for i, name in enumerate(all_names)}


def kernel_samples(report: Report) -> dict[Where, dict[str, KernelSamples]]:
    """(rank, device) -> kernel name -> (per-step total ns, per-step launches), aligned on the rank's
    steps in start order (0 where the kernel did not run); one sample when the rank has no steps."""
    out: dict[Where, dict[str, KernelSamples]] = {}
    whole = report.table("kernels", "kernels")
    if whole.empty:
        return out
    by_step = report.table("kernels", "kernels_by_step")
    step_groups = dict(iter(by_step.groupby(["rank", "device"], sort=False, observed=True))) if len(by_step) else {}
    multi = multi_device(whole)
    steps = steps_per_rank(report)
    for (rank, device), group in whole.groupby(["rank", "device"], sort=True, observed=True):
        rank, device = int(rank), int(device)
        key = (rank, device if multi.get(rank) else None)
        rank_steps = steps.get(rank, [])
        names = [str(n) for n in group["name"]]
        if rank_steps and "name" in by_step:
            rows = step_groups.get((rank, device), by_step.iloc[:0])
            out[key] = _per_step_samples(names, rows, rank_steps)
        else:
            out[key] = {name: (np.array([float(total)]), np.array([float(count)]))
                        for name, total, count in zip(names, group["total_ns"], group["count"])}
    return out


def finding_groups(report: Report) -> dict[FindingKey, dict[str, Any]]:
    """(code, rank) -> summed cost per step, highest severity, and the title, analysis and id of the
    costliest of the report's findings (``report["findings"]``, nested ones included) of that key."""
    order = {s: i for i, s in enumerate(SEVERITIES)}  # 0 = high
    groups: dict[FindingKey, dict[str, Any]] = {}
    for f in report["findings"]:
        rank = None if f.get("rank") is None else int(f["rank"])
        cost = int(f.get("cost_ns_per_step") or 0)
        g = groups.get((f["code"], rank))
        if g is None:
            groups[(f["code"], rank)] = {"cost": cost, "severity": f["severity"], "title": f["title"],
                                         "analysis": f["analysis"], "id": f["id"], "best_cost": cost}
            continue
        g["cost"] += cost
        if order[f["severity"]] < order[g["severity"]]:
            g["severity"] = f["severity"]
        if cost > g["best_cost"]:
            g.update(best_cost=cost, title=f["title"], id=f["id"])
    return groups


# ------------------------------------------------------------------------------------------------
# The diff


def _side(report: Report, label: str, metrics: Mapping[tuple[str, int, int | None], Any],
          steps: dict[int, list[int]]) -> Side:
    ranks = sorted({k[1] for k in metrics} | set(steps))
    warnings = [f"{w['scope']}: {w['message']}" for w in report.get("warnings", [])]
    return Side(label, ranks, {r: len(steps.get(r, [])) for r in ranks}, warnings)


def diff_reports(base: Report, new: Report, *, options: DiffOptions | None = None, base_label: str = "base",
                 new_label: str = "new") -> TraceDiff:
    """Compare two reports (:func:`traceview.pipeline.analyze` of the base and of the new trace)."""
    require_whole_tables(base, base_label)
    require_whole_tables(new, new_label)
    options = options or DiffOptions()
    base_steps, new_steps = steps_per_rank(base), steps_per_rank(new)
    base_ms, new_ms = metric_samples(base), metric_samples(new)
    side_b = _side(base, base_label, base_ms, base_steps)
    side_n = _side(new, new_label, new_ms, new_steps)

    metrics: list[MetricDelta] = []
    order = {m: i for i, m in enumerate(METRICS)}
    for key in sorted(set(base_ms) | set(new_ms), key=lambda k: (k[1], -1 if k[2] is None else k[2], order[k[0]])):
        metric, rank, device = key
        unit, worse_up, _ = METRICS[metric]
        change = compare(base_ms.get(key), new_ms.get(key), options=options, higher_is_worse=worse_up, unit=unit)
        metrics.append(MetricDelta(metric, unit, rank, device, change))

    kernels = _diff_kernels(kernel_samples(base), kernel_samples(new), options)
    step_noise = {m.rank: m.change.pooled_std for m in metrics if m.metric == "step_time_ns"}
    findings = _diff_findings(finding_groups(base), finding_groups(new), options, step_noise)
    op_types, overall = diff_efficiency(base, new)
    notes = _notes(side_b, side_n, metrics) + layer_notes(base, new)
    return TraceDiff(side_b, side_n, options, metrics, kernels, findings, notes, op_types, overall,
                     diff_critical_path(base, new, options), summary_figures(base, new),
                     diff_layers(base, new, options), diff_measured(base, new))


def _notes(b: Side, n: Side, metrics: list[MetricDelta]) -> list[str]:
    notes = []
    only_b = sorted(set(b.ranks) - set(n.ranks))
    only_n = sorted(set(n.ranks) - set(b.ranks))
    if only_b:
        notes.append(f"ranks only in the base trace (not compared): {', '.join(map(str, only_b))}")
    if only_n:
        notes.append(f"ranks only in the new trace (not compared): {', '.join(map(str, only_n))}")
    nb = max(b.steps.values(), default=0)
    nn = max(n.steps.values(), default=0)
    if nb == 0 and nn == 0:
        notes.append("no steps in either trace: whole-trace figures are compared, step time is not, and the "
                     "noise cannot be estimated (only the floors of the noise rule apply)")
    elif nb == 0 or nn == 0:
        which = "base" if nb == 0 else "new"
        notes.append(f"the {which} trace has no steps: whole-trace figures there, step time not compared")
    if any(not m.change.noise_estimated and m.change.delta is not None for m in metrics):
        if not (nb == 0 and nn == 0):
            notes.append("noise cannot be estimated where both traces have a single step: only the floors of "
                         "the noise rule apply there")
    return notes


def _match_names(base: Iterable[str], new: Iterable[str]) -> list[tuple[str, list[str], list[str]]]:
    """(match, base names, new names): exact names first, then normalised names among those left,
    then what vanished and what appeared."""
    b, n = set(base), set(new)
    pairs: list[tuple[str, list[str], list[str]]] = [("exact", [name], [name]) for name in sorted(b & n)]
    groups_b: dict[str, list[str]] = {}
    groups_n: dict[str, list[str]] = {}
    for name in sorted(b - n):
        groups_b.setdefault(normalize_kernel_name(name), []).append(name)
    for name in sorted(n - b):
        groups_n.setdefault(normalize_kernel_name(name), []).append(name)
    for key in sorted(set(groups_b) & set(groups_n)):
        pairs.append(("normalized", groups_b.pop(key), groups_n.pop(key)))
    for names in groups_b.values():
        pairs.extend(("vanished", [name], []) for name in names)
    for names in groups_n.values():
        pairs.extend(("appeared", [], [name]) for name in names)
    return pairs


def _diff_kernels(base: dict[Where, dict[str, KernelSamples]], new: dict[Where, dict[str, KernelSamples]],
                  options: DiffOptions) -> list[KernelDelta]:
    out: list[KernelDelta] = []
    for where in sorted(set(base) | set(new), key=lambda w: (w[0], -1 if w[1] is None else w[1])):
        b = base.get(where, {})
        n = new.get(where, {})
        for match, bn, nn in _match_names(b, n):
            bt, bc = _sum_samples(b, bn)
            nt, ncount = _sum_samples(n, nn)
            change = compare(bt, nt, options=options, higher_is_worse=True, unit="ns")
            if match in ("appeared", "vanished"):
                change.status = match
                change.significant = True
            # names come from the trace: scrubbed of secrets like every string the report shows
            out.append(KernelDelta(where[0], where[1], match, scrub_text(normalize_kernel_name((bn or nn)[0])),
                                   [scrub_text(x) for x in bn], [scrub_text(x) for x in nn],
                                   None if bc is None else float(np.mean(bc)),
                                   None if ncount is None else float(np.mean(ncount)), change))
    return out


def _sum_samples(samples: dict[str, KernelSamples], names: list[str]) -> tuple[list[float] | None, list[float] | None]:
    if not names:
        return None, None
    totals = np.sum([samples[n][0] for n in names], axis=0)
    counts = np.sum([samples[n][1] for n in names], axis=0)
    return [float(x) for x in totals], [float(x) for x in counts]


def _finding_status(b: dict[str, Any], n: dict[str, Any], threshold: float) -> str:
    order = {s: i for i, s in enumerate(SEVERITIES)}  # smaller = more severe
    delta = n["cost"] - b["cost"]
    if order[n["severity"]] < order[b["severity"]]:
        return "worse"
    if order[n["severity"]] > order[b["severity"]]:
        return "better"
    if delta > threshold:
        return "worse"
    if delta < -threshold:
        return "better"
    return "unchanged"


def _one_sided(code: str, rank: int | None, b: dict[str, Any] | None, n: dict[str, Any] | None) -> FindingDelta:
    """A finding only in the new report (``new``) or only in the base (``fixed``)."""
    side_b, side_n = b or {}, n or {}
    shown = side_n or side_b
    return FindingDelta(code, rank, "new" if b is None else "fixed", side_b.get("severity"), side_n.get("severity"),
                        side_b.get("cost"), side_n.get("cost"), None, shown["title"], shown["analysis"],
                        side_b.get("id"), side_n.get("id"))


def _diff_findings(base: dict[FindingKey, dict[str, Any]], new: dict[FindingKey, dict[str, Any]],
                   options: DiffOptions, step_noise: dict[int, float | None]) -> list[FindingDelta]:
    noise_values = [v for v in step_noise.values() if v is not None]
    out: list[FindingDelta] = []
    for key in sorted(set(base) | set(new), key=lambda k: (k[0], -1 if k[1] is None else k[1])):
        code, rank = key
        b, n = base.get(key), new.get(key)
        if b is None or n is None:
            out.append(_one_sided(code, rank, b, n))
            continue
        sp = step_noise.get(rank) if rank is not None else (max(noise_values) if noise_values else None)
        threshold = max(options.finding_rel_floor * b["cost"], float(options.abs_floor_ns),
                        options.k * sp if sp is not None else 0.0)
        out.append(FindingDelta(code, rank, _finding_status(b, n, threshold), b["severity"], n["severity"], b["cost"],
                                n["cost"], int(round(threshold)), n["title"], n["analysis"], b["id"], n["id"]))
    out.sort(key=lambda f: (_FINDING_STATUS_ORDER[f.status], -max(f.new_cost_ns or 0, f.base_cost_ns or 0), f.code,
                            -1 if f.rank is None else f.rank))
    return out


# ------------------------------------------------------------------------------------------------
# Efficiency (shown side by side, not judged)

#: an op type: (rank, device or None, name, dtype, unit)
OpTypeKey = tuple[int, "int | None", str, str, str]


def _number(value: Any) -> float | None:
    """A table cell as a float; None for a missing figure (NaN, NA, None)."""
    return None if value is None or pd.isna(value) else float(value)


def _op_type_figures(report: Report) -> dict[OpTypeKey, tuple[int, float | None, float | None]]:
    """(rank, device, name, dtype, unit) -> (GPU ns, efficiency, achieved TFLOP/s) of the report's
    ``op_types`` table; the device is None when the rank drives a single GPU (as for kernels)."""
    table = report.table("efficiency", "op_types")
    if table.empty:
        return {}
    multi = multi_device(table)
    out: dict[OpTypeKey, tuple[int, float | None, float | None]] = {}
    for row in table.itertuples(index=False):  # one row per op type: hundreds at most
        rank = int(row.rank)
        key = (rank, int(row.device) if multi.get(rank) else None, scrub_text(str(row.name)), str(row.dtype),
               str(row.unit))
        out[key] = (int(row.gpu_ns), _number(row.efficiency), _number(row.achieved_tflops))
    return out


def _overall_figures(report: Report) -> dict[Where, tuple[float | None, float | None]]:
    """(rank, device) -> (modelled %, whole-trace HFU) from the report's ``coverage`` and ``steps``."""
    coverage = report.table("efficiency", "coverage")
    out: dict[Where, tuple[float | None, float | None]] = {}
    if coverage.empty:
        return out
    multi = multi_device(coverage)
    steps = report.table("efficiency", "steps")
    whole = steps[steps["step"].isna()] if len(steps) else steps
    hfu = {(int(r), int(d)): _number(h) for r, d, h in zip(whole.get("rank", []), whole.get("device", []),
                                                           whole.get("hfu", []))}
    for rank, device, pct in zip(coverage["rank"], coverage["device"], coverage["modelled_pct"]):
        rank, device = int(rank), int(device)
        out[(rank, device if multi.get(rank) else None)] = (_number(pct), hfu.get((rank, device)))
    return out


def diff_efficiency(base: Report, new: Report) -> tuple[list[OpTypeDelta], list[EfficiencyOverall]]:
    """The efficiency figures of both reports side by side: op types matched by (rank, device, name,
    dtype, unit), the largest GPU time first; and per rank and device the coverage and HFU."""
    b, n = _op_type_figures(base), _op_type_figures(new)
    op_types = []
    for key in set(b) | set(n):
        rank, device, name, dtype, unit = key
        bb, nn = b.get(key), n.get(key)
        match = "both" if bb and nn else ("vanished" if bb else "appeared")
        op_types.append(OpTypeDelta(rank, device, name, dtype, unit, match, bb[0] if bb else None,
                                    nn[0] if nn else None, bb[1] if bb else None, nn[1] if nn else None,
                                    bb[2] if bb else None, nn[2] if nn else None))
    op_types.sort(key=lambda o: (-max(o.base_gpu_ns or 0, o.new_gpu_ns or 0), o.rank,
                                 -1 if o.device is None else o.device, o.name, o.dtype, o.unit))
    bo, no = _overall_figures(base), _overall_figures(new)
    overall = []
    for where in sorted(set(bo) | set(no), key=lambda w: (w[0], -1 if w[1] is None else w[1])):
        base_pct, base_hfu = bo.get(where, (None, None))
        new_pct, new_hfu = no.get(where, (None, None))
        overall.append(EfficiencyOverall(where[0], where[1], base_pct, new_pct, base_hfu, new_hfu))
    return op_types, overall
