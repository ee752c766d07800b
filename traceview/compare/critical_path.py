"""The critical path in a diff: per rank, what the step's critical path is made of (ns per segment
category, mean per step), what bounds its steps, and the achievable step time, before and after.

Everything is read from the ``critical_path`` analysis's ``steps`` table (docs/metrics.md, "Critical
path"): one row per rank and step with ``path_ns`` (= the step), one ``*_ns`` column per segment
category, ``bound_by`` and ``achievable_ns``; a rank without steps has one whole-trace row (step
null), which is then its one sample. Each figure is judged by the diff's noise rule
(:func:`traceview.compare.noise.compare`: per-step samples, more time is worse). ``bound_by`` of a
rank is what bounds most of its steps (ties: host, then gpu, then communication), with how many.
The report summary's job-wide figures (``critical_path_step_ns``, ``critical_path_bound_by``,
``critical_path_bound_share``, ``achievable_step_ns``) are shown side by side, not judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import pandas as pd

from traceview.compare.noise import Change, DiffOptions, compare
from traceview.report import Report

#: the segment categories of the path, in the analysis's column order, with their labels
PATH_CATEGORIES: dict[str, str] = {
    "host_compute": "host compute",
    "host_untraced": "host, untraced",
    "launch_overhead": "launch overhead",
    "sync": "synchronisation",
    "gpu_compute": "GPU compute",
    "memory": "memcpy/memset",
    "communication": "communication",
    "gpu_wait": "GPU waiting",
    "waiting_on_rank": "waiting on another rank",
    "unlinked": "unlinked (no recorded dependency)",
}
#: what can bound a step, in the order ties are broken
BOUND_BY = ("host", "gpu", "communication")
#: the report summary's critical-path figures (shown side by side)
SUMMARY_KEYS = ("critical_path_step_ns", "critical_path_bound_by", "critical_path_bound_share",
                "achievable_step_ns")


@dataclass
class CategoryDelta:
    category: str
    change: Change


@dataclass
class PathDelta:
    """One rank's critical path in both reports (None / empty where a report has none)."""

    rank: int
    base_bound_by: str | None
    new_bound_by: str | None
    base_bound_steps: int  # steps bound by base_bound_by
    new_bound_steps: int
    base_steps: int
    new_steps: int
    path: Change  # the path's length per step (= the step)
    achievable: Change  # the achievable step time
    categories: list[CategoryDelta] = field(default_factory=list)

    @property
    def bound_changed(self) -> bool:
        return self.base_bound_by is not None and self.new_bound_by is not None and \
            self.base_bound_by != self.new_bound_by

    @property
    def significant(self) -> bool:
        return self.bound_changed or self.achievable.significant or any(c.change.significant
                                                                        for c in self.categories)


def path_steps(report: Report) -> pd.DataFrame:
    """The analysis's ``steps`` table, one sample per row: the per-step rows of each rank, else its
    whole-trace row (empty when the report has no critical path)."""
    steps = report.table("critical_path", "steps")
    if steps.empty:
        return steps
    has_steps = steps.groupby("rank")["step"].transform(lambda s: s.notna().any())
    return steps[steps["step"].notna() | ~has_steps].sort_values(["rank", "start_ns"], kind="stable")


def _bound(rows: pd.DataFrame) -> tuple[str | None, int]:
    """What bounds most of ``rows`` (ties in :data:`BOUND_BY` order) and how many rows it bounds."""
    if rows.empty:
        return None, 0
    counts = rows["bound_by"].astype(str).value_counts()
    best = max(counts.index, key=lambda b: (int(counts[b]), -BOUND_BY.index(b) if b in BOUND_BY else -len(BOUND_BY)))
    return str(best), int(counts[best])


def _samples(rows: pd.DataFrame | None, column: str) -> list[float] | None:
    if rows is None or rows.empty or column not in rows:
        return None
    return [float(v) for v in rows[column] if not pd.isna(v)]


def diff_critical_path(base: Report, new: Report, options: DiffOptions) -> list[PathDelta]:
    """Per rank of either report, its critical path before and after (see the module docstring)."""
    b, n = path_steps(base), path_steps(new)
    b_groups = dict(iter(b.groupby("rank"))) if len(b) else {}
    n_groups = dict(iter(n.groupby("rank"))) if len(n) else {}
    out = []
    for rank in sorted(set(b_groups) | set(n_groups)):
        rb, rn = b_groups.get(rank), n_groups.get(rank)
        bb, bb_n = _bound(rb if rb is not None else b.iloc[:0])
        nb, nb_n = _bound(rn if rn is not None else n.iloc[:0])

        def change(column: str, rb: pd.DataFrame | None = rb, rn: pd.DataFrame | None = rn) -> Change:
            return compare(_samples(rb, column), _samples(rn, column), options=options, higher_is_worse=True)

        categories = [CategoryDelta(c, change(f"{c}_ns")) for c in PATH_CATEGORIES]
        out.append(PathDelta(int(rank), bb, nb, bb_n, nb_n, 0 if rb is None else len(rb), 0 if rn is None else len(rn),
                             change("path_ns"), change("achievable_ns"), categories))
    return out


def summary_figures(base: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The reports' job-wide critical-path figures side by side: key -> {base, new}."""
    bs, ns = base.get("summary") or {}, new.get("summary") or {}
    return {key: {"base": bs.get(key), "new": ns.get(key)} for key in SUMMARY_KEYS
            if bs.get(key) is not None or ns.get(key) is not None}


def shown_categories(delta: PathDelta) -> list[CategoryDelta]:
    """The categories with time on the path in either report (the others are 0 on both sides)."""
    return [c for c in delta.categories if (c.change.base or 0) or (c.change.new or 0)]
