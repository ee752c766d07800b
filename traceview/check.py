"""A performance gate for CI: rules with limits, judged on one trace (and a baseline).

``traceview check PATH --max-idle 20% --min-overlap 50% --max-regression 5% --baseline BASE`` exits 1
when a rule is violated (and says which: rule, limit, measured value, rank, step), 0 otherwise, and 2
when a rule is malformed or the input is unusable. The rules (docs/diff_and_check.md):

| rule | share form (``20%`` or ``0.2``) | time form (``5ms``, ``50us``) |
|---|---|---|
| ``max-idle`` | GPU idle / GPU window, whole trace, per rank and GPU | idle per step |
| ``min-overlap`` | overlapped / total communication time (ranks with communication) | - |
| ``max-exposed-comm`` | exposed communication / GPU window | exposed communication per step |
| ``max-launch-delay-p50`` | - | median launch delay (launch call end to GPU start), per rank |
| ``max-regression`` | mean step time increase / baseline step time, per rank | increase per step |

``max-regression`` needs a baseline and uses the diff's noise rule (``traceview.diff``): a step-time
increase above the limit that is within noise passes (and says so). Traces without steps are judged
on the GPU window instead of the step time. Figures are whole-trace, as the findings are (idle
between steps counts); per-step costs are whole-trace figures divided by the rank's number of steps.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from traceview.errors import TraceviewError
from traceview.findings import AnalysisResult


class RuleError(TraceviewError):
    """A rule, its limit or the rules file is malformed (a usage error: exit 2)."""


@dataclass(frozen=True)
class RuleSpec:
    name: str
    forms: tuple[str, ...]  # "share", "time"
    kind: str  # "max" or "min"
    help: str


RULES: dict[str, RuleSpec] = {
    spec.name: spec
    for spec in (
        RuleSpec("max-idle", ("share", "time"), "max",
                 "GPU idle: share of the GPU window (20%, 0.2) or time per step (5ms)"),
        RuleSpec("min-overlap", ("share",), "min", "communication overlapped with compute (50%, 0.5)"),
        RuleSpec("max-exposed-comm", ("share", "time"), "max",
                 "exposed communication: share of the GPU window (10%) or time per step (2ms)"),
        RuleSpec("max-launch-delay-p50", ("time",), "max", "median launch delay (50us)"),
        RuleSpec("max-regression", ("share", "time"), "max",
                 "step time increase over the baseline (5%, or 2ms per step); needs --baseline"),
    )
}
CONFIG_KEYS = set(RULES) | {"baseline"}

_TIME_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_LIMIT = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([-+]?[0-9]+))?\s*(%|ns|us|µs|μs|ms|s)?$")


@dataclass(frozen=True)
class Limit:
    """A parsed limit: a share (fraction, 0.2 for 20%) or a time (int ns)."""

    form: str  # "share" or "time"
    value: float  # fraction for shares, ns for times
    text: str  # as the user wrote it

    def __str__(self) -> str:
        return self.text


def parse_limit(rule: str, raw: Any) -> Limit:
    """Parse ``20%`` / ``0.2`` (shares) and ``5ms`` / ``50us`` / ``1.5s`` / ``800ns`` (times).

    A bare number is a share and must be at most 1 (``20`` is ambiguous: write ``20%``); a time
    needs a unit. Raises :class:`RuleError` naming the rule.
    """
    spec = RULES.get(rule)
    if spec is None:
        raise RuleError(f"unknown rule {rule!r} (known: {', '.join(RULES)})")
    if isinstance(raw, bool) or raw is None or not isinstance(raw, (str, int, float)):
        raise RuleError(f"{rule}: {raw!r} is not a limit ({_expected(spec)})")
    text = str(raw).strip()
    m = _LIMIT.match(text)
    if m is None:
        raise RuleError(f"{rule}: cannot read {text!r} ({_expected(spec)})")
    number = float(m.group(1)) * (10.0 ** int(m.group(2)) if m.group(2) else 1.0)
    unit = m.group(3)
    if not math.isfinite(number):
        raise RuleError(f"{rule}: {text!r} is not a finite number")
    if unit == "%":
        form, value = "share", number / 100.0
    elif unit is None:
        if number > 1:
            hint = f"write {text}% for a share" if "share" in spec.forms else f"give a unit, e.g. {text}us"
            raise RuleError(f"{rule}: {text!r} is ambiguous ({hint}; a bare number is a share from 0 to 1)")
        form, value = "share", number
    else:
        form, value = "time", float(round(number * _TIME_UNITS[unit]))
    if form not in spec.forms:
        raise RuleError(f"{rule}: {text!r} is a {form}, but this rule takes {_expected(spec)}")
    if form == "share" and value > 1 and spec.name != "max-regression":
        raise RuleError(f"{rule}: {text!r} is more than 100%")
    return Limit(form, value, text)


def parse_share(name: str, raw: Any) -> float:
    """A share for an option that only takes shares (``1%`` or ``0.01``)."""
    text = str(raw).strip()
    m = _LIMIT.match(text)
    if m is None or m.group(3) not in (None, "%"):
        raise RuleError(f"{name}: cannot read {text!r} (expected a share such as 1% or 0.01)")
    number = float(m.group(1)) * (10.0 ** int(m.group(2)) if m.group(2) else 1.0)
    value = number / 100.0 if m.group(3) == "%" else number
    if m.group(3) is None and number > 1:
        raise RuleError(f"{name}: {text!r} is ambiguous (write {text}% for a share)")
    return value


def _expected(spec: RuleSpec) -> str:
    forms = []
    if "share" in spec.forms:
        forms.append("a share such as 20% or 0.2")
    if "time" in spec.forms:
        forms.append("a time such as 5ms or 50us")
    return " or ".join(forms)


# ------------------------------------------------------------------------------------------------
# rules files


def _toml_module() -> Any:
    try:
        import tomllib  # Python 3.11+
        return tomllib
    except ModuleNotFoundError:
        try:
            import tomli  # the same parser, for Python 3.10
            return tomli
        except ModuleNotFoundError:
            return None


def load_config(path: Path) -> tuple[dict[str, Limit], Path | None]:
    """Rules (and an optional ``baseline``, relative to the file) from a TOML file.

    The rules are read from ``[tool.traceview.check]`` (so a ``pyproject.toml`` works), else from a
    ``[check]`` table, else from the top level. Keys may use ``-`` or ``_``; values are strings
    (``"20%"``, ``"5ms"``) or numbers (``0.2``). Unknown keys are errors.
    """
    path = Path(path)
    toml = _toml_module()
    if toml is None:
        raise RuleError(f"{path}: reading a TOML rules file needs Python 3.11+ (tomllib) or the tomli "
                        "package (pip install tomli); or give the rules as options")
    try:
        data = toml.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RuleError(f"{path}: no such rules file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path}: cannot read the rules file ({exc})") from None
    except toml.TOMLDecodeError as exc:
        raise RuleError(f"{path}: not valid TOML ({exc})") from None
    table: Any = data.get("tool", {}).get("traceview", {}).get("check") if isinstance(data.get("tool"), dict) else None
    if table is None:
        table = data.get("check", data)
    if not isinstance(table, dict):
        raise RuleError(f"{path}: [check] must be a table of rules")
    rules: dict[str, Limit] = {}
    baseline: Path | None = None
    for key, value in table.items():
        name = str(key).replace("_", "-")
        if name not in CONFIG_KEYS:
            raise RuleError(f"{path}: unknown rule {key!r} (known: {', '.join(sorted(CONFIG_KEYS))})")
        if name == "baseline":
            if not isinstance(value, str) or not value:
                raise RuleError(f"{path}: baseline must be a path (a string)")
            baseline = (path.parent / value) if not Path(value).is_absolute() else Path(value)
            continue
        rules[name] = parse_limit(name, value)
    return rules, baseline


def gather_rules(flags: Mapping[str, Any], config: Path | None = None) -> tuple[dict[str, Limit], Path | None]:
    """Rules from a config file, then from flags (flags win). ``flags``: rule name -> raw limit or None."""
    rules: dict[str, Limit] = {}
    baseline = None
    if config is not None:
        rules, baseline = load_config(config)
    for name, raw in flags.items():
        if raw is not None:
            rules[name] = parse_limit(name, raw)
    return rules, baseline


# ------------------------------------------------------------------------------------------------
# evaluation


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
            failing = [r for r in rows if not r.passed]
            pool = failing or rows
            known = [r for r in pool if r.value is not None]
            if not known:
                out.append(pool[0])
                continue
            pick = min if RULES[name].kind == "min" else max
            out.append(pick(known, key=lambda r: r.value))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "baseline": self.baseline, "passed": self.passed, "rules": dict(self.rules),
                "violations": [asdict(r) for r in self.violations], "results": [asdict(r) for r in self.results],
                "notes": list(self.notes)}


def _fmt_share(x: float) -> str:
    return f"{100 * x:.2f}%"


def _fmt_time(ns: float) -> str:
    from traceview.units import fmt_ns

    return fmt_ns(ns)


def _measured(form: str, value: float) -> str:
    return _fmt_share(value) if form == "share" else _fmt_time(value)


def _breakdown(results: dict[str, AnalysisResult]) -> pd.DataFrame:
    temporal = results.get("temporal")
    if temporal is None:
        return pd.DataFrame()
    return temporal.tables.get("breakdown", pd.DataFrame())


def _step_counts(results: dict[str, AnalysisResult]) -> dict[int, int]:
    temporal = results.get("temporal")
    steps = temporal.tables.get("steps") if temporal is not None else None
    if steps is None or steps.empty:
        return {}
    return {int(r): int(n) for r, n in steps.groupby("rank").size().items()}


def _passes(spec: RuleSpec, value: float, limit: Limit) -> bool:
    return value >= limit.value if spec.kind == "min" else value <= limit.value


def _share_or_time_rule(name: str, limit: Limit, results: dict[str, AnalysisResult], column: str,
                        what: str) -> list[RuleResult]:
    """max-idle / max-exposed-comm on the whole-trace row of each rank and GPU."""
    spec = RULES[name]
    table = _breakdown(results)
    if table.empty:
        return []
    counts = _step_counts(results)
    out = []
    whole = table[table["step"].isna()]
    for _, row in whole.iterrows():
        rank, device = int(row["rank"]), int(row["device"])
        window = int(row["window_ns"])
        amount = int(row[column])
        n = counts.get(rank, 0)
        steps = table[(table["rank"] == rank) & (table["device"] == device) & table["step"].notna()]
        worst_step = None
        if len(steps):
            shares = steps[column] / steps["window_ns"].where(steps["window_ns"] > 0)
            if shares.notna().any():
                worst = steps.loc[shares.idxmax()]
                worst_step = int(worst["step"])
                worst_text = f"worst step {worst_step}: {_fmt_share(float(shares.max()))} of its GPU window"
            else:
                worst_text = ""
        else:
            worst_text = ""
        if limit.form == "share":
            if window <= 0:
                continue
            value = amount / window
            detail = f"{_fmt_time(amount)} {what} in a {_fmt_time(window)} GPU window"
        else:
            value = float(amount / n) if n else float(amount)
            detail = f"{what} per step over {n} steps" if n else f"{what} in the whole trace (no steps)"
        if worst_text:
            detail += f"; {worst_text}"
        out.append(RuleResult(name, limit.text, limit.form, value, _measured(limit.form, value),
                              _passes(spec, value, limit), rank, device if _multi_device(table, rank) else None,
                              None, detail))
    return out


def _multi_device(table: pd.DataFrame, rank: int) -> bool:
    return table[table["rank"] == rank]["device"].nunique() > 1


def _overlap_rule(limit: Limit, results: dict[str, AnalysisResult]) -> tuple[list[RuleResult], list[str]]:
    spec = RULES["min-overlap"]
    table = _breakdown(results)
    out: list[RuleResult] = []
    if table.empty:
        return out, []
    whole = table[table["step"].isna()]
    for _, row in whole.iterrows():
        comm = int(row["communication_ns"])
        if comm <= 0:
            continue
        rank, device = int(row["rank"]), int(row["device"])
        value = int(row["overlap_ns"]) / comm
        detail = f"{_fmt_time(int(row['overlap_ns']))} of {_fmt_time(comm)} communication under compute"
        out.append(RuleResult("min-overlap", limit.text, "share", value, _fmt_share(value), _passes(spec, value, limit),
                              rank, device if _multi_device(table, rank) else None, None, detail))
    notes = [] if out else ["min-overlap: no rank has communication kernels; the rule does not apply"]
    return out, notes


def _launch_delay_rule(limit: Limit, results: dict[str, AnalysisResult]) -> tuple[list[RuleResult], list[str]]:
    spec = RULES["max-launch-delay-p50"]
    launch = results.get("launch_overhead")
    table = launch.tables.get("launches") if launch is not None else None
    if table is None or table.empty:
        return [], ["max-launch-delay-p50: no launch calls linked to GPU activity; the rule does not apply"]
    out = []
    for rank, group in table.groupby("rank", sort=True):
        delays = group["launch_delay_ns"].to_numpy(dtype=np.float64)
        value = float(np.median(delays))
        detail = f"median of {len(delays):,} launches"
        out.append(RuleResult("max-launch-delay-p50", limit.text, "time", value, _fmt_time(value),
                              _passes(spec, value, limit), int(rank), None, None, detail))
    return out, []


def _regression_rule(limit: Limit, results: dict[str, AnalysisResult], baseline: dict[str, AnalysisResult],
                     diff_options: Any) -> tuple[list[RuleResult], list[str]]:
    from traceview.diff import diff_results

    spec = RULES["max-regression"]
    diff = diff_results(baseline, results, options=diff_options)
    out: list[RuleResult] = []
    notes = list(diff.notes)
    ranks = sorted({m.rank for m in diff.metrics})
    for rank in ranks:
        metric = diff.metric("step_time_ns", rank)
        label = "step time"
        if metric is None or metric.change.delta is None:
            candidates = [m for m in diff.metrics if m.metric == "gpu_window_ns" and m.rank == rank
                          and m.change.delta is not None]
            if not candidates:
                continue
            metric, label = candidates[0], "GPU window"
        c = metric.change
        if limit.form == "share":
            if not c.base:
                continue
            value = c.delta / c.base
            measured = f"{100 * value:+.2f}%"
        else:
            value = c.delta
            measured = ("+" if value >= 0 else "-") + _fmt_time(abs(value))
        detail = f"{label} {_fmt_time(c.base)} -> {_fmt_time(c.new)} per step"
        over = not _passes(spec, value, limit)
        passed = not (over and c.significant)
        if over and not c.significant:
            detail += f"; above the limit but within noise, threshold {_fmt_time(c.threshold)}"
        elif c.significant:
            detail += f"; beyond noise, threshold {_fmt_time(c.threshold)}"
        if not c.noise_estimated:
            detail += "; noise cannot be estimated (single step)"
        out.append(RuleResult("max-regression", limit.text, limit.form, value, measured, passed, rank,
                              metric.device, None, detail))
    return out, notes


def evaluate(rules: Mapping[str, Limit], results: dict[str, AnalysisResult],
             baseline: dict[str, AnalysisResult] | None = None, *, diff_options: Any = None,
             path: str = "", baseline_path: str | None = None) -> CheckReport:
    """Judge ``rules`` on the analysis results of a trace (and of its baseline)."""
    report = CheckReport(path, baseline_path, {name: limit.text for name, limit in rules.items()})
    for name in RULES:
        limit = rules.get(name)
        if limit is None:
            continue
        if name == "max-idle":
            report.results += _share_or_time_rule(name, limit, results, "idle_ns", "idle")
        elif name == "max-exposed-comm":
            report.results += _share_or_time_rule(name, limit, results, "exposed_comm_ns", "exposed communication")
        elif name == "min-overlap":
            rows, notes = _overlap_rule(limit, results)
            report.results += rows
            report.notes += notes
        elif name == "max-launch-delay-p50":
            rows, notes = _launch_delay_rule(limit, results)
            report.results += rows
            report.notes += notes
        elif name == "max-regression":
            if baseline is None:
                raise RuleError("max-regression needs a baseline: --baseline PATH (or baseline = \"...\" in the "
                                "rules file)")
            rows, notes = _regression_rule(limit, results, baseline, diff_options)
            report.results += rows
            report.notes += notes
    if not report.results:
        report.notes.append("no rule applied to this trace (no GPU activity?)")
    return report
