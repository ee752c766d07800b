"""A performance gate for CI: rules with limits (:mod:`traceview.compare.rules`), judged on the
report of one trace (and the report of a baseline).

``traceview check PATH --max-idle 20% --min-overlap 50% --max-regression 5% --baseline BASE`` exits 1
when a rule is violated (and says which: rule, limit, measured value, rank, step), 0 otherwise, and 2
when a rule is malformed or the input is unusable (docs/diff_and_check.md).

``max-regression`` needs a baseline and uses the diff's noise rule (:mod:`traceview.compare.diff`):
a step-time increase above the limit that is within noise passes (and says so). Traces without steps
are judged on the GPU window instead of the step time. Figures are whole-trace, as the findings are
(idle between steps counts); per-step costs are whole-trace figures divided by the rank's number of
steps. Figures come from the report's tables (the temporal breakdown and steps, the launches, the
critical path's what-if rows).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

from traceview.compare.diff import DiffOptions, diff_reports, multi_device, require_whole_tables
from traceview.compare.rules import RULES, Limit, RuleError, RuleSpec
from traceview.report import Report
from traceview.units import fmt_ns, fmt_share

__all__ = ["CheckReport", "RuleResult", "evaluate"]

#: digits of the shares a check prints (limits are often given to a tenth of a percent)
SHARE_DIGITS = 2


@dataclass
class RuleResult:
    """One rule judged on one rank (and GPU): ``value`` is a fraction (share form) or ns."""

    rule: str
    limit: str
    form: str
    value: float | None
    measured: str
    passed: bool
    rank: int | None = None
    device: int | None = None
    step: int | None = None  # the worst step, where the figure has one
    detail: str = ""

    def line(self) -> str:
        where = []
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        if self.device is not None:
            where.append(f"GPU {self.device}")
        if self.step is not None:
            where.append(f"step {self.step}")
        at = f" on {' '.join(where)}" if where else ""
        op = "<" if RULES[self.rule].kind == "min" else ">"
        text = f"{self.rule}: measured {self.measured}{at}, limit {op}= {self.limit}"
        if not self.passed:
            text = f"{self.rule}: measured {self.measured}{at} {op} limit {self.limit}"
        return text + (f" ({self.detail})" if self.detail else "")


@dataclass
class CheckReport:
    path: str
    baseline: str | None
    rules: dict[str, str]
    results: list[RuleResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def violations(self) -> list[RuleResult]:
        return [r for r in self.results if not r.passed]

    def worst(self) -> list[RuleResult]:
        """Per rule, the failing result (or the closest to its limit), in rule order."""
        out = []
        for name in RULES:
            rows = [r for r in self.results if r.rule == name]
            if not rows:
                continue
            pool = [r for r in rows if not r.passed] or rows
            known = [r for r in pool if r.value is not None]
            if not known:
                out.append(pool[0])
                continue
            pick = min if RULES[name].kind == "min" else max
            out.append(pick(known, key=lambda r: float(r.value or 0.0)))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "baseline": self.baseline, "passed": self.passed, "rules": dict(self.rules),
                "violations": [asdict(r) for r in self.violations], "results": [asdict(r) for r in self.results],
                "notes": list(self.notes)}


def _share(x: float) -> str:
    return fmt_share(x, SHARE_DIGITS)


def _measured(form: str, value: float) -> str:
    return _share(value) if form == "share" else fmt_ns(value)


def _passes(spec: RuleSpec, value: float, limit: Limit) -> bool:
    return value >= limit.value if spec.kind == "min" else value <= limit.value


def _worst_step(table: pd.DataFrame, rank: int, device: int, column: str) -> str:
    """``worst step N: S of its GPU window`` for the step of this rank and GPU where ``column``
    takes the largest share of the window ("" without steps)."""
    steps = table[(table["rank"] == rank) & (table["device"] == device) & table["step"].notna()]
    if not len(steps):
        return ""
    shares = steps[column] / steps["window_ns"].where(steps["window_ns"] > 0)
    if not shares.notna().any():
        return ""
    worst = steps.loc[shares.idxmax()]
    return f"worst step {int(worst['step'])}: {_share(float(shares.max()))} of its GPU window"


def _share_or_time_rule(name: str, limit: Limit, report: Report, column: str, what: str) -> list[RuleResult]:
    """max-idle / max-exposed-comm on the whole-trace row of each rank and GPU."""
    spec = RULES[name]
    table = report.table("temporal", "breakdown")
    if table.empty:
        return []
    counts = {int(r["rank"]): int(r.get("steps") or 0) for r in report["ranks"]}
    multi = multi_device(table)
    out = []
    for _, row in table[table["step"].isna()].iterrows():
        rank, device = int(row["rank"]), int(row["device"])
        window, amount = int(row["window_ns"]), int(row[column])
        n = counts.get(rank, 0)
        if limit.form == "share":
            if window <= 0:
                continue
            value = amount / window
            detail = f"{fmt_ns(amount)} {what} in a {fmt_ns(window)} GPU window"
        else:
            value = float(amount / n) if n else float(amount)
            detail = f"{what} per step over {n} steps" if n else f"{what} in the whole trace (no steps)"
        worst = _worst_step(table, rank, device, column)
        if worst:
            detail += f"; {worst}"
        out.append(RuleResult(name, limit.text, limit.form, value, _measured(limit.form, value),
                              _passes(spec, value, limit), rank, device if multi.get(rank, False) else None,
                              None, detail))
    return out


def _overlap_rule(limit: Limit, report: Report) -> tuple[list[RuleResult], list[str]]:
    spec = RULES["min-overlap"]
    table = report.table("temporal", "breakdown")
    out: list[RuleResult] = []
    if table.empty:
        return out, []
    multi = multi_device(table)
    for _, row in table[table["step"].isna()].iterrows():
        comm = int(row["communication_ns"])
        if comm <= 0:
            continue
        rank, device = int(row["rank"]), int(row["device"])
        value = int(row["overlap_ns"]) / comm
        detail = f"{fmt_ns(int(row['overlap_ns']))} of {fmt_ns(comm)} communication under compute"
        out.append(RuleResult("min-overlap", limit.text, "share", value, _share(value), _passes(spec, value, limit),
                              rank, device if multi.get(rank, False) else None, None, detail))
    notes = [] if out else ["min-overlap: no rank has communication kernels; the rule does not apply"]
    return out, notes


def _launch_delay_rule(limit: Limit, report: Report) -> tuple[list[RuleResult], list[str]]:
    spec = RULES["max-launch-delay-p50"]
    table = report.table("launch_overhead", "launches")
    if table.empty:
        return [], ["max-launch-delay-p50: no launch calls linked to GPU activity; the rule does not apply"]
    out = []
    for rank, group in table.groupby("rank", sort=True):
        # missing: the later activities of a graph replay, which have no launch delay of their own
        delays = group["launch_delay_ns"].dropna().to_numpy(dtype=np.float64)
        value = float(np.median(delays))
        out.append(RuleResult("max-launch-delay-p50", limit.text, "time", value, fmt_ns(value),
                              _passes(spec, value, limit), int(rank), None, None,
                              f"median of {len(delays):,} launches"))
    return out, []


def _achievable_rule(limit: Limit, report: Report) -> tuple[list[RuleResult], list[str]]:
    """max-achievable-gap on each rank's ``achievable`` what-if row (step null: the mean over its
    steps; a rank without steps has only its whole-trace row), the worst step named."""
    spec = RULES["max-achievable-gap"]
    table = report.table("critical_path", "whatif")
    rows = table[table["scenario"] == "achievable"] if len(table) else table
    if rows.empty:
        return [], ["max-achievable-gap: the report has no critical path (no GPU activity, or no critical_path "
                    "analysis); the rule does not apply"]
    out = []
    for rank, group in rows.groupby("rank", sort=True):
        steps = group[group["step"].notna()]
        whole = group[group["step"].isna()]
        row = (whole if len(whole) else group).iloc[0]
        value = float(row["saving_share"] if limit.form == "share" else row["saving_ns"])
        detail = f"step {fmt_ns(row['step_ns'])}, achievable {fmt_ns(row['whatif_ns'])}"
        if not pd.isna(row.get("modelled_share")):
            detail += f", {_share(float(row['modelled_share']))} of the kernel time modelled"
        if len(steps) > 1:
            worst = steps.loc[steps["saving_share"].idxmax()]
            detail += f"; worst step {int(worst['step'])}: {_share(float(worst['saving_share']))} of its time"
        out.append(RuleResult("max-achievable-gap", limit.text, limit.form, value, _measured(limit.form, value),
                              _passes(spec, value, limit), int(rank), None, None, detail))
    return out, []


def _signed(value: float, form: str) -> str:
    """``+9.12%`` (a share) or ``+68.2 us`` (a time)."""
    sign = "+" if value >= 0 else "-"
    return sign + (_share(abs(value)) if form == "share" else fmt_ns(abs(value)))


def _regression_rule(limit: Limit, report: Report, baseline: Report,
                     diff_options: DiffOptions | None) -> tuple[list[RuleResult], list[str]]:
    spec = RULES["max-regression"]
    diff = diff_reports(baseline, report, options=diff_options)
    out: list[RuleResult] = []
    for rank in sorted({m.rank for m in diff.metrics}):
        metric, label = diff.metric("step_time_ns", rank), "step time"
        if metric is None or metric.change.delta is None:
            metric = next((m for m in diff.metrics if m.metric == "gpu_window_ns" and m.rank == rank
                           and m.change.delta is not None), None)
            label = "GPU window"
        if metric is None:
            continue
        c = metric.change
        assert c.delta is not None and c.base is not None
        if limit.form == "share" and not c.base:
            continue
        value = c.delta / c.base if limit.form == "share" else c.delta
        detail = f"{label} {fmt_ns(c.base)} -> {fmt_ns(c.new)} per step"
        over = not _passes(spec, value, limit)
        if over and not c.significant:
            detail += f"; above the limit but within noise, threshold {fmt_ns(c.threshold)}"
        elif c.significant:
            detail += f"; beyond noise, threshold {fmt_ns(c.threshold)}"
        if not c.noise_estimated:
            detail += "; noise cannot be estimated (single step)"
        out.append(RuleResult("max-regression", limit.text, limit.form, value, _signed(value, limit.form),
                              not (over and c.significant), rank, metric.device, None, detail))
    return out, list(diff.notes)


def evaluate(rules: Mapping[str, Limit], report: Report, baseline: Report | None = None, *,
             diff_options: DiffOptions | None = None, path: str = "", baseline_path: str | None = None) -> CheckReport:
    """Judge ``rules`` on the report of a trace (and the report of its baseline, for
    ``max-regression``). Both must be analysed in this process (whole tables)."""
    require_whole_tables(report, path or "the trace")
    check = CheckReport(path, baseline_path, {name: limit.text for name, limit in rules.items()})
    for name in RULES:
        limit = rules.get(name)
        if limit is None:
            continue
        rows: list[RuleResult]
        notes: list[str] = []
        if name == "max-idle":
            rows = _share_or_time_rule(name, limit, report, "idle_ns", "idle")
        elif name == "max-exposed-comm":
            rows = _share_or_time_rule(name, limit, report, "exposed_comm_ns", "exposed communication")
        elif name == "min-overlap":
            rows, notes = _overlap_rule(limit, report)
        elif name == "max-launch-delay-p50":
            rows, notes = _launch_delay_rule(limit, report)
        elif name == "max-achievable-gap":
            rows, notes = _achievable_rule(limit, report)
        else:  # max-regression
            if baseline is None:
                raise RuleError("max-regression needs a baseline: --baseline PATH (or baseline = \"...\" in the "
                                "rules file)")
            rows, notes = _regression_rule(limit, report, baseline, diff_options)
        check.results += rows
        check.notes += notes
    if not check.results:
        check.notes.append("no rule applied to this trace (no GPU activity?)")
    return check
