"""Formatting of times, sizes and shares for people: the one place every renderer, the app and the
commands take them from. Inputs are the report's units: ns, bytes, fractions in [0, 1]."""

from __future__ import annotations

import math
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
