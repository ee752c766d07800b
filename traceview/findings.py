"""Findings and analysis results: what every analysis returns and every renderer shows.

An analysis is a pure function ``(Trace, Options) -> AnalysisResult``. Results hold pandas
DataFrames (times in int64 ns) and ranked :class:`Finding` objects. Renderers (terminal, Markdown,
HTML, JSON, web app) only format these; they never recompute a metric.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

SEVERITIES = ("high", "medium", "low", "info")


@dataclass
class Options:
    """Options shared by all analyses (CLI flags map onto these)."""

    #: regex selecting step ranges among annotations (None: Kineto ProfilerStep#N / NVTX default)
    step_marker: str | None = None
    #: how many rows the "top" tables keep (largest gaps, top kernels, ...)
    top_n: int = 20
    #: a gap shorter than this is not reported on its own (it still counts in totals)
    min_gap_ns: int = 0
    #: ranks to analyse (None: all)
    ranks: tuple[int, ...] | None = None


@dataclass
class Finding:
    """One quantified problem (or notable fact) with a recommendation.

    ``code`` is stable across versions (tools and CI gates key on it); ``cost_ns_per_step`` is the
    estimated GPU time the problem costs per step, and ``cost_share`` that cost as a fraction of
    the step time (None when there are no steps or the cost is not additive).
    """

    code: str
    title: str
    severity: str
    analysis: str
    recommendation: str
    cost_ns_per_step: int = 0
    cost_share: float | None = None
    rank: int | None = None
    step: int | None = None
    time_range_ns: tuple[int, int] | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AnalysisResult:
    """What one analysis produced: named tables, findings, and warnings about trust."""

    name: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    #: figures that cannot be trusted, and why (rendered next to the figures)
    warnings: list[str] = field(default_factory=list)


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Most costly first; severity breaks ties; info findings last."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(
        findings,
        key=lambda f: (f.severity == "info", -(f.cost_ns_per_step or 0), order[f.severity], f.code, f.rank or 0),
    )
