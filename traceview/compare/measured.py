"""Measured kernels in a diff: Nsight Compute's figures of the same kernel before and after.

Read from the measured analysis's ``kernels`` table (docs/metrics.md, "Measured efficiency"), never
recomputed: each kernel group (rank, kernel name, grid, block) of either report, the first row of
each (its most time). Shown, not judged (the verdict stays the timeline's): a row *changed* when
a throughput or the occupancy moved by at least 5 percentage points, the DRAM bytes by at least
20%, or the bound-by label changed. ``traceview diff BASE NEW --ncu NEW_NCU --base-ncu BASE_NCU``
gives each side its own exports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from traceview.report import Report
from traceview.secrets import scrub_text

ANALYSIS = "measured"
#: the figures compared: (column, changed when |new - base| reaches this, relative?)
FIGURES: tuple[tuple[str, float, bool], ...] = (
    ("sm_throughput_pct", 5.0, False), ("memory_throughput_pct", 5.0, False),
    ("achieved_occupancy_pct", 5.0, False), ("dram_bytes", 0.2, True), ("duration_ns", 0.2, True))
KEY = ["rank", "name", "grid", "block"]


@dataclass
class MeasuredDelta:
    """One kernel group in both reports (None where a report lacks it or the figure)."""

    rank: int
    name: str
    grid: str
    block: str
    base: dict[str, float | None]
    new: dict[str, float | None]
    base_bound_by: str | None
    new_bound_by: str | None

    @property
    def match(self) -> str:
        if self.base_bound_by is None:
            return "appeared"
        return "vanished" if self.new_bound_by is None else "both"

    @property
    def changed(self) -> bool:
        if self.match != "both":
            return True
        if self.base_bound_by != self.new_bound_by:
            return True
        for column, limit, relative in FIGURES:
            b, n = self.base.get(column), self.new.get(column)
            if b is None or n is None:
                continue
            moved = abs(n - b) / abs(b) if relative and b else abs(n - b)
            if moved >= limit:
                return True
        return False

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "name": self.name, "grid": self.grid, "block": self.block, "match": self.match,
                "changed": self.changed, "base_bound_by": self.base_bound_by, "new_bound_by": self.new_bound_by,
                **{f"base_{c}": self.base.get(c) for c, _, _ in FIGURES},
                **{f"new_{c}": self.new.get(c) for c, _, _ in FIGURES}}


def _rows(report: Report) -> dict[tuple[Any, ...], dict[str, Any]]:
    table = report.table(ANALYSIS, "kernels")
    if not len(table):
        return {}
    table = table.sort_values("trace_ns", ascending=False, kind="stable").drop_duplicates(KEY)
    out = {}
    for row in table.to_dict("records"):
        out[tuple(row[k] for k in KEY)] = row
    return out


def _figure(row: dict[str, Any] | None, column: str) -> float | None:
    if row is None:
        return None
    value = row.get(column)
    return None if value is None or pd.isna(value) or (isinstance(value, float) and math.isnan(value)) \
        else float(value)


def diff_measured(base: Report, new: Report) -> list[MeasuredDelta]:
    """Every kernel group measured in either report, changed ones first, then by rank and name."""
    b, n = _rows(base), _rows(new)
    out = []
    for key in sorted(set(b) | set(n), key=lambda k: (k[0], str(k[1]), str(k[2]), str(k[3]))):
        rb, rn = b.get(key), n.get(key)
        out.append(MeasuredDelta(
            rank=int(key[0]), name=scrub_text(str(key[1])), grid=str(key[2]), block=str(key[3]),
            base={c: _figure(rb, c) for c, _, _ in FIGURES}, new={c: _figure(rn, c) for c, _, _ in FIGURES},
            base_bound_by=None if rb is None else str(rb.get("bound_by")),
            new_bound_by=None if rn is None else str(rn.get("bound_by"))))
    return sorted(out, key=lambda d: not d.changed)
