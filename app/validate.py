"""The one validator of what the browser sends (every callback goes through it).

A control value is whatever JSON a browser chooses to send: a number out of any range (``1e303``),
``Infinity``, a string, a list where a number was expected. Each function here turns one control's
value into the type the app computes with, or raises :class:`BadValue` with a line naming the
control and the value, which the callback shows on the page (never a server error).
"""

from __future__ import annotations

import math
from typing import Any

from traceview.errors import TraceviewError

from .filters import Filters

#: times the controls may name (ms since the run's first event): int64 ns holds ~9.2e12 ms, and
#: the trace's own origin (ns since the epoch, ~1.7e18) is added to them
MAX_ABS_MS = 1e12
#: the same bound in ns, for window states and clicked ranges
MAX_ABS_NS = 10**18
#: rank numbers are int32 in the model
MAX_RANK = 2**31 - 1
#: step numbers and table row ids: exact in a float, far beyond any real trace
MAX_INDEX = 2**53
#: a value is quoted in a message at most this long
_QUOTE_CHARS = 40


class BadValue(TraceviewError):
    """A control value the app cannot use; the message names the control and the value."""


def quote(value: Any) -> str:
    """``value`` as a message shows it (long values cut)."""
    text = repr(value)
    return text if len(text) <= _QUOTE_CHARS else text[: _QUOTE_CHARS - 3] + "..."


def number(value: Any, control: str, limit: float) -> float | None:
    """A finite number within ``±limit`` (None for an empty control). Numeric strings are
    accepted, as a typed-in value may arrive as one."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadValue(f"{control}: {quote(value)} is not a number")
    try:
        v = float(value)
    except (ValueError, OverflowError):
        raise BadValue(f"{control}: {quote(value)} is not a number") from None
    if not math.isfinite(v):
        raise BadValue(f"{control}: {quote(value)} is not a finite number")
    if abs(v) > limit:
        raise BadValue(f"{control}: {quote(value)} is out of range (at most {limit:g} either way)")
    return v


def integer(value: Any, control: str, lo: int, hi: int) -> int | None:
    """A whole number in ``[lo, hi]`` (None for an empty control)."""
    v = number(value, control, float(max(abs(lo), abs(hi))))
    if v is None:
        return None
    if not v.is_integer():
        raise BadValue(f"{control}: {quote(value)} is not a whole number")
    out = int(v)
    if not lo <= out <= hi:
        raise BadValue(f"{control}: {quote(value)} is out of range ({lo} to {hi})")
    return out


def ranks(value: Any) -> tuple[int, ...] | None:
    """The ranks dropdown: a list of rank numbers (None or empty: all ranks)."""
    if value is None or value == []:
        return None
    if not isinstance(value, (list, tuple)):
        raise BadValue(f"ranks: {quote(value)} is not a list of rank numbers")
    out = {integer(r, "ranks", 0, MAX_RANK) for r in value}
    if None in out:
        raise BadValue(f"ranks: {quote(value)} holds an empty entry")
    return tuple(sorted(r for r in out if r is not None))


def steps(value: Any) -> tuple[int, int] | None:
    """The steps slider: ``[first, last]`` step numbers (None: all steps)."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise BadValue(f"steps: {quote(value)} is not a [first, last] pair of step numbers")
    first = integer(value[0], "steps", -MAX_INDEX, MAX_INDEX)
    last = integer(value[1], "steps", -MAX_INDEX, MAX_INDEX)
    if first is None or last is None:
        raise BadValue(f"steps: {quote(value)} has an empty end")
    if first > last:
        raise BadValue(f"steps: {quote(value)} ends before it starts (first step {first} > last {last})")
    return first, last


def filters(rank_value: Any, step_value: Any, t0_ms: Any, t1_ms: Any) -> Filters:
    """The header's filters, checked: raises :class:`BadValue` for the first unusable control."""
    lo = number(t0_ms, "from (ms)", MAX_ABS_MS)
    hi = number(t1_ms, "to (ms)", MAX_ABS_MS)
    time_ns = None
    if lo is not None and hi is not None and lo >= hi:
        # an empty or reversed window would select nothing (or, read loosely, everything): say so
        raise BadValue(f"from (ms) {lo:g} is not before to (ms) {hi:g}: give a window that ends after it starts")
    if lo is not None or hi is not None:
        time_ns = (int(round((lo or 0.0) * 1e6)), int(round(hi * 1e6)) if hi is not None else 2**62)
    return Filters(ranks=ranks(rank_value), steps=steps(step_value), time_ns=time_ns)


def window_state(value: Any) -> dict[str, Any]:
    """The timeline's stored window (``t0``/``t1``/``f0``/``f1`` in ns since the origin, a label);
    ``{}`` when there is none yet."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadValue(f"timeline state: {quote(value)} is not a window")
    state: dict[str, Any] = {}
    for key in ("t0", "t1", "f0", "f1"):
        v = integer(value.get(key), f"timeline state {key}", -MAX_ABS_NS, MAX_ABS_NS)
        if v is not None:
            state[key] = v
    label = value.get("label")
    if label is not None:
        state["label"] = str(label)[:200]
    return state


def zoom_range_ms(r0: Any, r1: Any) -> tuple[float, float]:
    """Both ends of a plotly zoom (ms since the origin)."""
    a = number(r0, "zoom range", MAX_ABS_MS)
    b = number(r1, "zoom range", MAX_ABS_MS)
    if a is None or b is None:
        raise BadValue(f"zoom range: [{quote(r0)}, {quote(r1)}] has an empty end")
    return a, b


def clicked_range_ns(cd: Any) -> tuple[int, int]:
    """The ``customdata`` of a clicked gap bar: ``[start, end]`` ns since the origin, end > start."""
    if not isinstance(cd, (list, tuple)) or len(cd) != 2:
        raise BadValue(f"clicked gap: {quote(cd)} is not a [start, end] pair")
    a = integer(cd[0], "clicked gap", -MAX_ABS_NS, MAX_ABS_NS)
    b = integer(cd[1], "clicked gap", -MAX_ABS_NS, MAX_ABS_NS)
    if a is None or b is None or b <= a:
        raise BadValue(f"clicked gap: {quote(cd)} is not a range that ends after it starts")
    return a, b


def switch(value: Any, control: str, option: str) -> bool:
    """A one-option checklist (a switch): ``[option]`` is on, ``[]`` (or None) off; a stored state
    may also hold the boolean itself."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if not isinstance(value, (list, tuple)) or len(value) > 1 or any(v != option for v in value):
        raise BadValue(f"{control}: {quote(value)} is neither [{option!r}] nor []")
    return bool(value)


def row_id(value: Any) -> int:
    """A table row id."""
    out = integer(value, "row", 0, MAX_INDEX)
    if out is None:
        raise BadValue("row: no row id")
    return out
