"""The rules of ``traceview check``: their names, the forms of their limits (a share such as ``20%``
or a time such as ``5ms``), and rules files (TOML). Judging them on a report is
:mod:`traceview.compare.check`.

| rule | share form (``20%`` or ``0.2``) | time form (``5ms``, ``50us``) |
|---|---|---|
| ``max-idle`` | GPU idle / GPU window, whole trace, per rank and GPU | idle per step |
| ``min-overlap`` | overlapped / total communication time (ranks with communication) | - |
| ``max-exposed-comm`` | exposed communication / GPU window | exposed communication per step |
| ``max-launch-delay-p50`` | - | median launch delay (launch call end to GPU start), per rank |
| ``max-regression`` | mean step time increase / baseline step time, per rank | increase per step |
| ``max-achievable-gap`` | (step - achievable step) / step, mean over steps, per rank | step - achievable, per step |

``max-achievable-gap`` reads the critical_path analysis's ``achievable`` what-if (docs/metrics.md):
how much of the step the speed-of-light step of the same program would save.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from traceview.errors import TraceviewError

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
        RuleSpec("max-achievable-gap", ("share", "time"), "max",
                 "step time above the achievable step (critical path what-if): share of the step (40%) or "
                 "time per step (2ms)"),
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
