"""Findings and analysis results: what every analysis returns and every renderer shows.

An analysis is a pure function ``(Trace, Options) -> AnalysisResult``. Results hold pandas
DataFrames (times in int64 ns) and ranked :class:`Finding` objects. Renderers (terminal, Markdown,
HTML, JSON, web app) only format these; they never recompute a metric.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from traceview.claims import Claims

if TYPE_CHECKING:  # the tables' type only: `traceview info` loads traces without pandas
    import pandas as pd

SEVERITIES = ("high", "medium", "low", "info")
#: the values of ``Options.claims``
CLAIMS_LISTINGS = ("largest", "all")


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
    #: keep only the whole-trace rows of per-rank tables, and no per-event tables (jobs of
    #: thousands of ranks: per-step figures then exist only in the cross-rank tables)
    whole_only: bool = False
    #: the user's communication rules, ``REGEX`` or ``FAMILY=REGEX`` each, tried before the built-in
    #: table (``analyses/comm_rules.py``; CLI ``--comm-pattern``/``--comm-config``). A tuple of
    #: strings, so options stay a cache key (``analyses.steps.cached``) and travel to job workers
    comm_patterns: tuple[str, ...] = ()
    #: a GPU specification TOML file overriding or extending the built-in peaks (traceview/hardware,
    #: docs/metrics.md "Hardware peaks"); read by the efficiency analysis
    gpu_specs: str | None = None
    #: the model FLOPs of one step on one GPU (e.g. 6 x parameters x tokens per GPU per step for a
    #: dense transformer's training step): with it the efficiency analysis gives model FLOPs
    #: utilisation per step, MFU = model FLOPs / (dense peak of ``mfu_dtype`` x step window)
    model_flops_per_step: float | None = None
    #: the dtype whose dense tensor peak MFU divides by
    mfu_dtype: str = "bf16"
    #: Nsight Compute exports (``ncu --csv`` files, ``.ncu-rep`` reports or directories of them)
    #: whose kernel records the measured analysis joins to the trace's kernels (CLI ``--ncu``)
    ncu: tuple[str, ...] = ()
    #: traces of the capture of the CUDA/HIP graphs a trace replays (CLI ``--graph-capture``): their
    #: nodes' ops and ranges are given to the replayed kernels (analyses/graph_capture.py)
    graph_capture: tuple[str, ...] = ()
    #: which claimed intervals the report lists: "largest" (each finding's longest, in its
    #: ``claims`` record) or "all" (also the report's ``claims`` table: every claimed interval of
    #: every finding, so a reader can check from the JSON alone that no time is claimed twice)
    claims: str = "largest"

    def __post_init__(self) -> None:
        # a list from the Python API would make the options unhashable as a cache key
        self.comm_patterns = tuple(self.comm_patterns)
        self.ncu = (self.ncu,) if isinstance(self.ncu, str) else tuple(str(p) for p in self.ncu)
        self.graph_capture = tuple(str(p) for p in self.graph_capture)
        if self.claims not in CLAIMS_LISTINGS:
            raise ValueError(f"claims must be one of {CLAIMS_LISTINGS}, not {self.claims!r}")


@dataclass(frozen=True)
class Headline:
    """The one figure a finding's title quotes, with what it measures, so that findings of several
    ranks merged into one (:func:`merge_findings`) say it once: ``text`` ``GPU idle {}`` with
    ``value`` 0.556 (``unit`` "%": a fraction, shown as a percentage; "": a count) reads, merged,
    "GPU idle 55.6% on rank 5, 44-56% on all 8 ranks" (the figure replaces the first ``{}``)."""

    text: str
    value: float
    unit: str = "%"

    def figure(self, value: float | None = None) -> str:
        v = self.value if value is None else value
        return f"{100 * v:.1f}%" if self.unit == "%" else f"{v:.0f}"

    def span(self, lo: float, hi: float) -> str:
        """The range ``lo``..``hi`` in whole units: ``44-56%``, ``8-10``, or one figure when they round alike."""
        scale, unit = (100.0, "%") if self.unit == "%" else (1.0, "")
        a, b = round(scale * lo), round(scale * hi)
        return f"{a:.0f}{unit}" if a == b else f"{a:.0f}-{b:.0f}{unit}"


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
    #: the ``code`` of an umbrella finding whose cost already includes this one (e.g. an
    #: ``exposed_collective`` is part of ``exposed_communication``); such findings are listed
    #: under their umbrella and never added to totals twice (see :mod:`traceview.accounting`)
    part_of: str | None = None
    #: the GPU time this finding's cost is made of (intervals per rank and device). When set, the
    #: findings engine (:mod:`traceview.accounting`) derives ``cost_ns_per_step``, ``cost_share``
    #: and ``severity`` from it; a finding without claims costs no GPU time (e.g. a memory finding)
    claims: Claims | None = field(default=None, repr=False, compare=False)
    #: the figure its title quotes (what merging it across ranks says once); not in the report
    headline: Headline | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        claims, headline, self.claims, self.headline = self.claims, self.headline, None, None
        try:
            out = asdict(self)
            out.pop("claims", None)
            out.pop("headline", None)
            return out
        finally:
            self.claims, self.headline = claims, headline


@dataclass
class AnalysisResult:
    """What one analysis produced: named tables, findings, and warnings about trust."""

    name: str
    tables: MutableMapping[str, pd.DataFrame] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    #: figures that cannot be trusted, and why (rendered next to the figures), for every rank the
    #: analysis ran on
    warnings: list[str] = field(default_factory=list)
    #: the same for some ranks only: (rank, message); the pipeline merges them across ranks
    #: ("(ranks 0-3)") with ``warnings``
    rank_warnings: list[tuple[int, str]] = field(default_factory=list)

    def warn(self, message: str, ranks: Iterable[int]) -> None:
        """Add ``message`` as a warning of each of ``ranks`` (nothing when there are none)."""
        self.rank_warnings.extend((int(r), message) for r in ranks)


def merge_findings(per_rank: list[tuple[int, Finding]], n_ranks: int) -> list[Finding]:
    """Findings of the same code from several ranks become one job-level finding.

    Severity = the worst; its claims = every rank's claims (:mod:`traceview.accounting` then costs
    it on the job's denominator; for uncosted findings ``cost_ns_per_step`` = the mean over the
    affected ranks of each rank's cost); ``rank`` = the rank when only one is affected. The evidence lists every
    affected rank (``per_rank``), the worst rank and that rank's own evidence. A code raised by one
    rank only is kept as it is. Findings that name a subject (``evidence["category"]``, e.g. the
    dominant kernel category) are merged per code and subject.
    """
    order = {s: i for i, s in enumerate(SEVERITIES)}
    groups: dict[tuple, list[tuple[int, Finding]]] = {}
    for rank, f in per_rank:
        ev = f.evidence if isinstance(f.evidence, dict) else {}
        # findings that name what they are about (a kernel category) are merged per subject
        groups.setdefault((f.code, str(ev.get("category", "")), str(ev.get("collective", ""))), []).append((rank, f))
    out = []
    for (code, _, _), items in groups.items():
        if len(items) == 1:
            out.append(items[0][1])
            continue
        best: dict[int, Finding] = {}
        for rank, f in items:
            cur = best.get(rank)
            if cur is None or (f.cost_ns_per_step or 0) > (cur.cost_ns_per_step or 0):
                best[rank] = f
        worst_rank, worst = min(best.items(), key=lambda kv: (order[kv[1].severity], -(kv[1].cost_ns_per_step or 0)))
        costs = [f.cost_ns_per_step or 0 for f in best.values()]
        shares = [f.cost_share for f in best.values() if f.cost_share is not None]
        ranks = sorted(best)
        title = worst.title if len(ranks) == 1 else merged_title(best, worst_rank, n_ranks)
        kwargs: dict[str, Any] = dict(
            code=code, title=title, severity=worst.severity, analysis=worst.analysis,
            recommendation=worst.recommendation, cost_ns_per_step=int(round(float(np.mean(costs)))),
            cost_share=float(np.mean(shares)) if shares else None,
            rank=ranks[0] if len(ranks) == 1 else None, step=worst.step if len(ranks) == 1 else None,
            evidence={
                "ranks": len(ranks), "of_ranks": n_ranks, "findings": len(items), "worst_rank": worst_rank,
                "per_rank": [{"rank": r, "severity": f.severity, "cost_ns_per_step": f.cost_ns_per_step,
                              "cost_share": f.cost_share} for r, f in sorted(best.items())],
                "worst": worst.evidence,
            },
        )
        if getattr(worst, "part_of", None) is not None:  # umbrella findings (traceview.accounting)
            kwargs["part_of"] = worst.part_of
        # the job's finding claims every rank's time; traceview.accounting costs it from these
        kwargs["claims"] = Claims.concat(f.claims for _, f in items) if any(
            f.claims is not None for _, f in items) else None
        out.append(Finding(**kwargs))
    return out


def merged_title(best: dict[int, Finding], worst_rank: int, n_ranks: int) -> str:
    """The title of a finding merged from ``best`` (rank -> that rank's finding): its headline figure
    once, on the rank where it is highest, and its range, "GPU idle 55.6% on rank 5, 44-56% on all 8
    ranks" ("... on all 8 ranks" when it is the same everywhere), when every rank's finding has a
    headline of the same text; else the worst rank's title, saying how many ranks share it."""
    where = f"all {n_ranks}" if len(best) == n_ranks else f"{len(best)} of {n_ranks}"
    head = best[worst_rank].headline
    heads = {r: f.headline for r, f in best.items()}
    if head is None or any(h is None or (h.text, h.unit) != (head.text, head.unit) for h in heads.values()):
        return f"{best[worst_rank].title} (rank {worst_rank}, the worst of {where} ranks)"
    values = {r: h.value for r, h in heads.items() if h is not None}
    top = max(values, key=lambda r: (values[r], r == worst_rank))
    said = head.text.replace("{}", head.figure(values[top]), 1)
    lo, hi = min(values.values()), max(values.values())
    if head.span(lo, hi) == head.span(hi, hi):
        return f"{said} on {where} ranks"
    return f"{said} on rank {top}, {head.span(lo, hi)} on {where} ranks"
