"""Compare two traces (before/after): what changed, by how much, and whether it is more than noise.

Pure functions over the analysis results of two traces (``traceview.analyses.run_all``); the rules
are documented in ``docs/diff_and_check.md`` and repeated here.

**Figures compared**, per rank (and GPU, when a rank drives several), as a mean per step:

* ``step_time_ns``: the step's CPU range (``ProfilerStep#N`` or the step marker), ``end - start``;
* from the temporal breakdown (docs/metrics.md): ``gpu_window_ns``, ``busy_ns``, ``idle_ns``,
  ``compute_ns``, ``communication_ns``, ``exposed_comm_ns``, ``memory_ns`` and ``overlap_pct``;
* per kernel: total GPU time per step (kernels, memcpy and memset, from the kernel breakdown), with
  names matched as described below;
* findings, by (code, rank).

**Samples.** Each per-step row of a trace is one sample; the value compared is the mean of the
samples (activity outside every step is not in them). A trace without steps gives one sample, the
whole trace. A kernel that does not run in some step counts 0 for that step. Step numbers need not
match between the two traces: the steps are samples, not pairs.

**Noise rule.** ``delta = mean(new) - mean(base)``. The change is significant when
``|delta| > threshold`` with ``threshold = max(k * s_pooled, abs_floor, rel_floor * |mean(base)|)``,
where ``s_pooled = sqrt(((n_b - 1) s_b^2 + (n_n - 1) s_n^2) / (n_b + n_n - 2))`` is the pooled sample
standard deviation of the per-step values (``DiffOptions``: ``k = 3``, ``rel_floor = 1%``,
``abs_floor = 1 us``; for ``overlap_pct`` the floor is 1 percentage point and there is no relative
floor). It needs at least two steps on one side; otherwise the noise cannot be estimated, only the
floors apply and the result says so. A delta of exactly 0 is ``unchanged``; a delta under the
threshold is ``within_noise``; a significant one is ``worse`` or ``better`` (more time is worse;
more overlap is better).

**Kernel name matching** (per rank): first by the exact name; then, among the names left on both
sides, by the normalised name (:func:`normalize_kernel_name`), so that renamed instantiations
(another template argument, Inductor's ``triton_poi_fused_add_0`` -> ``triton_poi_fused_add_1``)
still match. Names that share a normalised name are summed on each side. What is left is
``appeared`` (only in the new trace) or ``vanished`` (only in the base).

**Findings** are keyed by (code, rank) (findings of the same key are summed: cost, highest
severity). ``new``: only in the new trace; ``fixed``: only in the base; ``worse``/``better``: the
severity rose/fell, or the cost per step changed by more than ``max(k * s_pooled(step time of that
rank; for rank-less findings the largest over ranks), finding_rel_floor * base cost, abs_floor)``;
otherwise ``unchanged``.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from traceview.findings import SEVERITIES, AnalysisResult

#: JSON schema version of :meth:`TraceDiff.to_dict`
SCHEMA_VERSION = 1

# ------------------------------------------------------------------------------------------------
# Options and results


@dataclass
class DiffOptions:
    """Thresholds of the noise rule (see the module docstring)."""

    #: a change is significant beyond k pooled per-step standard deviations ...
    k: float = 3.0
    #: ... and beyond this share of the base value ...
    rel_floor: float = 0.01
    #: ... and beyond this absolute amount (ns) ...
    abs_floor_ns: int = 1_000
    #: ... (percentage points, for overlap_pct)
    abs_floor_pct: float = 1.0
    #: a finding's cost must change by this share of its base cost (and beyond noise) to count
    finding_rel_floor: float = 0.10


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

#: Where = (rank, device); device is None when the rank drives a single GPU (or for step time).
Where = tuple[int, "int | None"]


@dataclass
class Change:
    """The noise-rule verdict on one pair of sample sets."""

    base: float | None
    new: float | None
    delta: float | None
    delta_pct: float | None  # 100 x delta / |base| (None when base is 0 or missing, and for percentages)
    base_steps: int
    new_steps: int
    pooled_std: float | None  # None: noise cannot be estimated
    threshold: float | None
    significant: bool
    status: str  # unchanged, within_noise, worse, better, only_base, only_new

    @property
    def noise_estimated(self) -> bool:
        return self.pooled_std is not None


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


@dataclass
class Side:
    """What one trace was: its label (path), ranks and steps per rank."""

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

    # -------------------------------------------------------------- queries
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

        kernels = self.kernels
        s = {
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
            "findings_new": sum(1 for f in self.findings if f.status == "new"),
            "findings_fixed": sum(1 for f in self.findings if f.status == "fixed"),
            "findings_worse": sum(1 for f in self.findings if f.status == "worse"),
            "findings_better": sum(1 for f in self.findings if f.status == "better"),
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
                or any(f.status in ("new", "fixed", "worse", "better") for f in self.findings):
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
                {"metric": m.metric, "unit": m.unit, "rank": m.rank, "device": m.device, **_change_dict(m.change, m.unit)}
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
            "notes": list(self.notes),
        }


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(float(x), digits)


def _as_ns(x: float | None) -> int | None:
    return None if x is None else int(round(x))


def _change_dict(c: Change, unit: str) -> dict[str, Any]:
    conv = _as_ns if unit == "ns" else (lambda x: _round(x, 4))
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
# Kernel name normalisation

#: suffixes stripped from the end of a name, repeatedly: ``_123`` (Inductor's kernel counter,
#: ``_0``), a Triton signature specialisation (``_0d1d2de``), a hash (8+ hex digits, at least one
#: a digit)
_SUFFIX = re.compile(r"_(?:\d+|(?:\d+[cde]+)+|(?=[0-9a-f]*\d)[0-9a-f]{8,})$")
_RETURN_TYPE = re.compile(r"^(?:void|static|__global__|inline)\s+")
_SPACES = re.compile(r"\s+")


def _strip_groups(text: str, open_: str, close: str) -> str:
    """Remove balanced ``open_ ... close`` groups (nested). An unbalanced opener is kept as is;
    ``->`` is not a closer, and ``operator<``/``operator<<`` keep their brackets."""
    out: list[str] = []
    depth = 0
    start = 0  # where the current outermost group began in ``text``
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == open_ and open_ == "<" and text.endswith("operator", 0, i):
            # operator< / operator<< / operator<= are names, not template brackets
            j = i
            while j < len(text) and text[j] in "<=":
                j += 1
            if depth == 0:
                out.append(text[i:j])
            i = j
            continue
        if ch == open_:
            if depth == 0:
                start = i
            depth += 1
        elif ch == close and depth > 0 and not (close == ">" and i > 0 and text[i - 1] == "-"):
            depth -= 1
        elif depth == 0:
            out.append(ch)
        i += 1
    if depth > 0:  # unbalanced: keep the rest verbatim
        out.append(text[start:])
    return "".join(out)


def _strip_trailing_args(text: str) -> str:
    """Remove trailing balanced ``(...)`` groups (the argument list), with qualifiers after them
    (``const``)."""
    s = text.rstrip()
    while True:
        s2 = re.sub(r"\s*(?:const|volatile|noexcept|&&|&)\s*$", "", s)
        if not s2.endswith(")"):
            return s2
        depth = 0
        for i in range(len(s2) - 1, -1, -1):
            if s2[i] == ")":
                depth += 1
            elif s2[i] == "(":
                depth -= 1
                if depth == 0:
                    break
        else:
            return s2  # unbalanced
        if i == 0:
            return s2  # the whole name is parenthesised: keep it
        s = s2[:i].rstrip()


def normalize_kernel_name(name: str) -> str:
    """The name under which renamed instantiations of one kernel still match.

    Rules, in order (docs/diff_and_check.md):

    1. template arguments are removed: every balanced ``<...>`` group, nested ones included
       (``void at::native::vectorized_elementwise_kernel<4, ...>(...)`` ->
       ``void at::native::vectorized_elementwise_kernel(...)``);
    2. the argument list is removed: trailing balanced ``(...)`` groups and qualifiers such as
       ``const`` after them;
    3. a leading return type is removed (``void``, ``static``, ``__global__``; and for a C++ name
       containing ``::``, everything before the last top-level space);
    4. whitespace is collapsed;
    5. suffixes are removed from the end, repeatedly, as long as something remains: a numeric
       suffix ``_0``/``_123`` (Inductor's counter: ``triton_poi_fused_add_0`` ->
       ``triton_poi_fused_add``), a Triton signature specialisation (``_0d1d2de``), or a hash-like
       suffix (``_`` + 8 or more hex digits, at least one of them a digit).

    Returns the name unchanged when the rules would leave nothing.
    """
    s = name.strip()
    s = _strip_groups(s, "<", ">")
    s = _strip_trailing_args(s)
    s = _RETURN_TYPE.sub("", s)
    if "::" in s:
        s = _last_top_level_token(s)
    s = _SPACES.sub(" ", s).strip()
    while True:
        m = _SUFFIX.search(s)
        if m is None or m.start() == 0:
            break
        s = s[: m.start()]
    return s or name


def _last_top_level_token(s: str) -> str:
    """``std::enable_if::type at::native::foo`` -> ``at::native::foo`` (spaces inside parentheses,
    as in ``(anonymous namespace)``, do not split)."""
    depth = 0
    cut = -1
    for i, ch in enumerate(s):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == " " and depth == 0:
            cut = i
    return s[cut + 1:] if cut >= 0 else s


# ------------------------------------------------------------------------------------------------
# The noise rule


def pooled_std(base: Sequence[float], new: Sequence[float]) -> float | None:
    """Pooled sample standard deviation of two sample sets (None with fewer than 2 samples on both
    sides: no degree of freedom)."""
    df = max(len(base) - 1, 0) + max(len(new) - 1, 0)
    if df < 1:
        return None
    ss = 0.0
    for xs in (base, new):
        if len(xs) > 1:
            arr = np.asarray(xs, dtype=np.float64)
            ss += float(((arr - arr.mean()) ** 2).sum())
    return math.sqrt(ss / df)


def compare(base: Sequence[float] | None, new: Sequence[float] | None, *, options: DiffOptions,
            higher_is_worse: bool = True, unit: str = "ns") -> Change:
    """Apply the noise rule to the per-step samples of one figure in the two traces."""
    nb = len(base) if base is not None else 0
    nn = len(new) if new is not None else 0
    mb = float(np.mean(base)) if nb else None
    mn = float(np.mean(new)) if nn else None
    if mb is None or mn is None:
        return Change(mb, mn, None, None, nb, nn, None, None, False, "only_base" if mn is None else "only_new")
    delta = mn - mb
    sp = pooled_std(base, new)
    if unit == "pct":
        floor = options.abs_floor_pct
    else:
        floor = max(float(options.abs_floor_ns), options.rel_floor * abs(mb))
    threshold = floor if sp is None else max(options.k * sp, floor)
    significant = abs(delta) > threshold
    if delta == 0:
        status = "unchanged"
    elif not significant:
        status = "within_noise"
    else:
        status = "worse" if (delta > 0) == higher_is_worse else "better"
    pct = 100.0 * delta / abs(mb) if mb and unit != "pct" else None
    return Change(mb, mn, delta, pct, nb, nn, sp, threshold, significant, status)


# ------------------------------------------------------------------------------------------------
# Samples from analysis results


def _steps_frame(results: dict[str, AnalysisResult]) -> pd.DataFrame:
    temporal = results.get("temporal")
    if temporal is None or "steps" not in temporal.tables:
        return pd.DataFrame(columns=["rank", "step", "start_ns", "end_ns"])
    return temporal.tables["steps"]


def steps_per_rank(results: dict[str, AnalysisResult]) -> dict[int, list[int]]:
    steps = _steps_frame(results)
    out: dict[int, list[int]] = {}
    for rank, group in steps.groupby("rank", sort=True):
        out[int(rank)] = [int(s) for s in group.sort_values("start_ns")["step"]]
    return out


def _device_keys(frame: pd.DataFrame) -> dict[int, bool]:
    """rank -> whether it drives more than one device (then device ids are part of the key)."""
    if frame.empty:
        return {}
    n = frame.groupby("rank")["device"].nunique()
    return {int(r): int(c) > 1 for r, c in n.items()}


def metric_samples(results: dict[str, AnalysisResult]) -> dict[tuple[str, int, int | None], list[float]]:
    """(metric, rank, device) -> per-step samples (the whole trace when the rank has no steps)."""
    out: dict[tuple[str, int, int | None], list[float]] = {}
    steps = _steps_frame(results)
    for rank, group in steps.groupby("rank", sort=True):
        group = group.sort_values("start_ns")
        out[("step_time_ns", int(rank), None)] = [float(x) for x in (group["end_ns"] - group["start_ns"])]
    temporal = results.get("temporal")
    table = temporal.tables.get("breakdown") if temporal is not None else None
    if table is None or table.empty:
        return out
    multi = _device_keys(table)
    for (rank, device), group in table.groupby(["rank", "device"], sort=True):
        rank, device = int(rank), int(device)
        per_step = group[group["step"].notna()]
        rows = per_step if len(per_step) else group[group["step"].isna()]
        rows = rows.sort_values("first_start_ns")
        key_device = device if multi.get(rank) else None
        for metric, column in _BREAKDOWN_COLUMNS.items():
            values = [float(v) for v in rows[column] if not pd.isna(v)]
            if values:
                out[(metric, rank, key_device)] = values
    return out


def kernel_samples(results: dict[str, AnalysisResult]) -> dict[tuple[int, int | None], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """(rank, device) -> kernel name -> (per-step total ns, per-step launches), aligned on the rank's
    steps in start order (0 where the kernel did not run); one sample when the rank has no steps."""
    out: dict[tuple[int, int | None], dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    kernels = results.get("kernels")
    if kernels is None:
        return out
    whole = kernels.tables.get("kernels")
    by_step = kernels.tables.get("kernels_by_step")
    if whole is None or whole.empty:
        return out
    multi = _device_keys(whole)
    steps = steps_per_rank(results)
    for (rank, device), group in whole.groupby(["rank", "device"], sort=True):
        rank, device = int(rank), int(device)
        key = (rank, device if multi.get(rank) else None)
        rank_steps = steps.get(rank, [])
        names: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if rank_steps and by_step is not None:
            index = {s: i for i, s in enumerate(rank_steps)}
            rows = by_step[(by_step["rank"] == rank) & (by_step["device"] == device)]
            for name in group["name"]:
                names[str(name)] = (np.zeros(len(rank_steps)), np.zeros(len(rank_steps)))
            for name, step, total, count in zip(rows["name"], rows["step"], rows["total_ns"], rows["count"]):
                if pd.isna(step) or int(step) not in index:
                    continue
                totals, counts = names.setdefault(str(name), (np.zeros(len(rank_steps)), np.zeros(len(rank_steps))))
                totals[index[int(step)]] += float(total)
                counts[index[int(step)]] += float(count)
        else:
            for name, total, count in zip(group["name"], group["total_ns"], group["count"]):
                names[str(name)] = (np.array([float(total)]), np.array([float(count)]))
        out[key] = names
    return out


def finding_groups(results: dict[str, AnalysisResult]) -> dict[tuple[str, int | None], dict[str, Any]]:
    """(code, rank) -> summed cost per step, highest severity, title of the costliest, analysis."""
    order = {s: i for i, s in enumerate(SEVERITIES)}  # 0 = high
    groups: dict[tuple[str, int | None], dict[str, Any]] = {}
    for result in results.values():
        for f in result.findings:
            key = (f.code, f.rank)
            g = groups.get(key)
            if g is None:
                groups[key] = {"cost": int(f.cost_ns_per_step or 0), "severity": f.severity, "title": f.title,
                               "analysis": f.analysis, "best_cost": int(f.cost_ns_per_step or 0)}
                continue
            g["cost"] += int(f.cost_ns_per_step or 0)
            if order[f.severity] < order[g["severity"]]:
                g["severity"] = f.severity
            if int(f.cost_ns_per_step or 0) > g["best_cost"]:
                g["best_cost"], g["title"] = int(f.cost_ns_per_step or 0), f.title
    return groups


# ------------------------------------------------------------------------------------------------
# The diff


def diff_results(base: dict[str, AnalysisResult], new: dict[str, AnalysisResult], *,
                 options: DiffOptions | None = None, base_label: str = "base", new_label: str = "new") -> TraceDiff:
    """Compare the analysis results of two traces (``run_all`` output)."""
    options = options or DiffOptions()
    base_steps, new_steps = steps_per_rank(base), steps_per_rank(new)
    base_ms, new_ms = metric_samples(base), metric_samples(new)
    base_ranks = sorted({k[1] for k in base_ms} | set(base_steps))
    new_ranks = sorted({k[1] for k in new_ms} | set(new_steps))
    side_b = Side(base_label, base_ranks, {r: len(base_steps.get(r, [])) for r in base_ranks})
    side_n = Side(new_label, new_ranks, {r: len(new_steps.get(r, [])) for r in new_ranks})
    for side, results in ((side_b, base), (side_n, new)):
        for name, result in results.items():
            side.warnings.extend(f"{name}: {w}" for w in result.warnings)

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

    notes = _notes(side_b, side_n, metrics)
    return TraceDiff(side_b, side_n, options, metrics, kernels, findings, notes)


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


def _diff_kernels(base: dict, new: dict, options: DiffOptions) -> list[KernelDelta]:
    out: list[KernelDelta] = []
    for where in sorted(set(base) | set(new), key=lambda w: (w[0], -1 if w[1] is None else w[1])):
        b = base.get(where, {})
        n = new.get(where, {})
        pairs: list[tuple[str, list[str], list[str]]] = []
        for name in sorted(set(b) & set(n)):
            pairs.append(("exact", [name], [name]))
        left_b = sorted(set(b) - set(n))
        left_n = sorted(set(n) - set(b))
        groups_b: dict[str, list[str]] = {}
        groups_n: dict[str, list[str]] = {}
        for name in left_b:
            groups_b.setdefault(normalize_kernel_name(name), []).append(name)
        for name in left_n:
            groups_n.setdefault(normalize_kernel_name(name), []).append(name)
        for key in sorted(set(groups_b) & set(groups_n)):
            pairs.append(("normalized", groups_b.pop(key), groups_n.pop(key)))
        for names in groups_b.values():
            pairs.extend(("vanished", [name], []) for name in names)
        for names in groups_n.values():
            pairs.extend(("appeared", [], [name]) for name in names)
        for match, bn, nn in pairs:
            bt, bc = _sum_samples(b, bn)
            nt, ncount = _sum_samples(n, nn)
            change = compare(bt, nt, options=options, higher_is_worse=True, unit="ns")
            if match == "appeared":
                change.status = "appeared"
                change.significant = True
            elif match == "vanished":
                change.status = "vanished"
                change.significant = True
            key = normalize_kernel_name((bn or nn)[0])
            out.append(KernelDelta(where[0], where[1], match, key, bn, nn,
                                   None if bc is None else float(np.mean(bc)),
                                   None if ncount is None else float(np.mean(ncount)), change))
    return out


def _sum_samples(samples: dict[str, tuple[np.ndarray, np.ndarray]], names: list[str]):
    if not names:
        return None, None
    totals = sum(samples[n][0] for n in names)
    counts = sum(samples[n][1] for n in names)
    return list(totals), list(counts)


def _diff_findings(base: dict, new: dict, options: DiffOptions, step_noise: dict[int, float | None]) -> list[FindingDelta]:
    order = {s: i for i, s in enumerate(SEVERITIES)}  # smaller = more severe
    noise_values = [v for v in step_noise.values() if v is not None]
    out: list[FindingDelta] = []
    for key in sorted(set(base) | set(new), key=lambda k: (k[0], -1 if k[1] is None else k[1])):
        code, rank = key
        b, n = base.get(key), new.get(key)
        if b is None or n is None:
            g = n or b
            out.append(FindingDelta(code, rank, "new" if b is None else "fixed", b and b["severity"],
                                    n and n["severity"], b and b["cost"], n and n["cost"], None, g["title"],
                                    g["analysis"]))
            continue
        sp = step_noise.get(rank) if rank is not None else (max(noise_values) if noise_values else None)
        threshold = max(options.finding_rel_floor * b["cost"], float(options.abs_floor_ns),
                        options.k * sp if sp is not None else 0.0)
        delta = n["cost"] - b["cost"]
        if order[n["severity"]] < order[b["severity"]]:
            status = "worse"
        elif order[n["severity"]] > order[b["severity"]]:
            status = "better"
        elif delta > threshold:
            status = "worse"
        elif delta < -threshold:
            status = "better"
        else:
            status = "unchanged"
        out.append(FindingDelta(code, rank, status, b["severity"], n["severity"], b["cost"], n["cost"],
                                int(round(threshold)), n["title"], n["analysis"]))
    rank_order = {"new": 0, "worse": 1, "fixed": 2, "better": 3, "unchanged": 4}
    out.sort(key=lambda f: (rank_order[f.status], -max(f.new_cost_ns or 0, f.base_cost_ns or 0), f.code,
                            -1 if f.rank is None else f.rank))
    return out


def diff_traces(base_trace: Any, new_trace: Any, *, options: DiffOptions | None = None,
                analysis_options: Any = None, base_label: str = "base", new_label: str = "new") -> TraceDiff:
    """Run every analysis on both traces and compare them."""
    from traceview.analyses import run_all

    return diff_results(run_all(base_trace, analysis_options), run_all(new_trace, analysis_options),
                        options=options, base_label=base_label, new_label=new_label)
