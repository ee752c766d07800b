"""Nsight Compute's units, normalised to one unit per dimension.

``ncu --csv`` writes each value in the unit it chose for it (``--print-units auto``, the default:
``Kbyte``, ``Mbyte``, ``usecond``, ``Ghz``, ...), so the same metric can come in different units on two
rows. Every value is converted to the base unit of its dimension: bytes (``byte``; SI prefixes are
powers of 1000, the ``Ki``/``Mi`` forms powers of 1024), nanoseconds (``ns``), hertz (``hz``), bytes
per second (``byte/s``); ``%``, ``cycle``, ``warp``, ``block``, ... and unitless counts are kept as
they are (their value parsed). A unit this table does not know is kept as written, its value parsed,
and counted (``NcuMetrics.counts["units_kept_as_written"]``).
"""

from __future__ import annotations

#: unit as ncu writes it (lower case) -> (base unit, factor to the base unit)
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15,
           "ki": 1024.0, "mi": 1024.0 ** 2, "gi": 1024.0 ** 3, "ti": 1024.0 ** 4}
_TIME = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


def _table() -> dict[str, tuple[str, float]]:
    out: dict[str, tuple[str, float]] = {}
    for prefix, factor in _PREFIX.items():
        out[f"{prefix}byte"] = ("byte", factor)
        for per, seconds in (("s", 1.0), ("second", 1.0), ("usecond", 1e-6), ("nsecond", 1e-9), ("msecond", 1e-3)):
            out[f"{prefix}byte/{per}"] = ("byte/s", factor / seconds)
        if "i" not in prefix:
            out[f"{prefix}hz"] = ("hz", factor)
    for name, factor in _TIME.items():
        out[name] = ("ns", factor)
    for per, seconds in (("second", 1.0), ("usecond", 1e-6), ("nsecond", 1e-9), ("msecond", 1e-3)):
        out[f"cycle/{per}"] = ("hz", 1.0 / seconds)
    out["%"] = ("%", 1.0)
    out[""] = ("", 1.0)
    for name in ("cycle", "warp", "block", "cluster", "thread", "sector", "request", "inst", "instruction",
                 "register", "register/thread", "byte/block", "sector/request", "inst/cycle", "warp/cycle",
                 "cycle/inst", "sm", "tpc", "gpc", "x"):
        out.setdefault(name, (name, 1.0))
    return out


UNITS: dict[str, tuple[str, float]] = _table()


def normalise_unit(unit: str) -> tuple[str, float, bool]:
    """(base unit, factor, known) of a unit as ncu writes it; an unknown unit is its own base."""
    key = unit.strip()
    hit = UNITS.get(key.lower())
    if hit is None:
        return key, 1.0, False
    return hit[0], hit[1], True


def base_units() -> list[str]:
    """Every base unit a normalised value can carry."""
    return sorted({base for base, _ in UNITS.values()})
