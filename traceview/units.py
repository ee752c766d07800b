"""Formatting of times, sizes and shares for people: the one place every renderer, the app and the
commands take them from. Inputs are the report's units: ns, bytes, fractions in [0, 1]."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def is_missing(value: Any) -> bool:
    """None or NaN (a figure that does not exist)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_ns(ns: Any, unit: str | None = None) -> str:
    """A duration from ns: ``1.23 s``, ``45.6 ms``, ``789 us``, ``12 ns`` (3 significant digits), or in a
    fixed ``unit`` ("s", "ms", "us", "ns"); ``-`` when missing."""
    if is_missing(ns):
        return "-"
    value = float(ns)
    scales = (("s", 1e9), ("ms", 1e6), ("us", 1e3), ("ns", 1.0))
    if unit is not None:
        scale = dict(scales)[unit]
        return f"{value / scale:,.3f} {unit}" if unit != "ns" else f"{value:,.0f} ns"
    for name, scale in scales[:3]:
        if abs(value) >= scale:
            scaled = value / scale
            return f"{scaled:.3g} {name}" if abs(scaled) < 100 else f"{scaled:.0f} {name}"
    return f"{value:.0f} ns"


def duration_unit(max_ns: Any) -> tuple[str, float]:
    """The unit a set of durations whose largest is ``max_ns`` reads best in, and its size in ns:
    the largest of s, ms, us, ns in which that value is at least 1 (a chart axis, a column)."""
    value = 0.0 if is_missing(max_ns) else abs(float(max_ns))
    for name, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if value >= scale:
            return name, scale
    return "ns", 1.0


def fmt_bytes(n: Any) -> str:
    """A size from bytes, decimal units: ``1.5 GB``, ``320.0 KB``, ``12 B``; ``-`` when missing."""
    if is_missing(n):
        return "-"
    size = int(n)
    for name, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(size) >= scale:
            return f"{size / scale:.1f} {name}"
    return f"{size} B"


def fmt_share(share: Any, digits: int = 1) -> str:
    """A fraction as a percentage: ``0.1234`` -> ``12.3%``; ``-`` when missing."""
    if is_missing(share):
        return "-"
    return f"{100 * float(share):.{digits}f}%"


def fmt_pct(pct: Any, digits: int = 2) -> str:
    """A percentage (already x100): ``12.345`` -> ``12.35%``; ``-`` when missing."""
    if is_missing(pct):
        return "-"
    return f"{float(pct):.{digits}f}%"


#: clock values (ns) from this one on are read as Unix time: 2001-09-09. Profilers' other clocks (time
#: since boot, since the session started) are far below it for any machine up less than 31 years.
EPOCH_MIN_NS = 1_000_000_000 * 1_000_000_000
#: ... and up to this one (2100-01-01): beyond, the value is not a date either
EPOCH_MAX_NS = 4_102_444_800 * 1_000_000_000


def fmt_epoch_ns(ns: Any) -> str | None:
    """A Unix time in ns as a UTC date to the microsecond (``2023-09-07 23:16:41.422502 UTC``); None
    when missing or not a plausible Unix time (a clock that starts at boot or at the session)."""
    import datetime

    if is_missing(ns) or not EPOCH_MIN_NS <= int(ns) < EPOCH_MAX_NS:
        return None
    seconds, rest_ns = divmod(int(ns), 1_000_000_000)
    when = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return f"{when:%Y-%m-%d %H:%M:%S}.{rest_ns // 1000:06d} UTC"


def fmt_clock_ns(ns: Any) -> str:
    """A clock value in ns for people: its UTC date when it is a Unix time, else the value with
    digit grouping and what it is (``1,234,567 ns on the profiler's clock``); ``-`` when missing."""
    if is_missing(ns):
        return "-"
    return fmt_epoch_ns(ns) or f"{int(ns):,} ns on the profiler's clock"


def compact_ranks(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    ordered = sorted({int(r) for r in ranks})
    parts = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(parts)
