"""The findings engine's cost accounting: findings whose costs add up (docs/metrics.md, "Findings").

Every finding that costs GPU time carries :class:`~traceview.claims.Claims` (the intervals its cost is
made of). :func:`account` turns the findings of a report into a tree whose figures can be trusted:

1. **Windows.** Claims are clipped to the whole-trace GPU window of their (rank, device).
2. **Nesting, by containment.** A finding with ``part_of`` goes under the nearest present ancestor
   of its chain (``launch_bound`` -> ``host_bound_gaps`` -> ``low_utilization``) whose claims hold at
   least :data:`CONTAINED_MIN_SHARE` of its own (uncosted findings: whose ranks overlap; a costed
   finding never goes under an uncosted one, whose time could not bound its own); with none, it is
   top-level and competes for its time by precedence. The report's ``part_of`` is the code of the
   parent it went under (``part_of_id``), never a declared parent that does not hold its time.
3. **Precedence.** Top-level findings never claim the same time twice: in precedence order (each
   analysis places its codes on :data:`PRECEDENCE_SCALE`) each takes its claims minus the time
   earlier ones took (a root cause before the symptom it explains: a straggler's waiting before
   exposed communication, a synchronisation before the host-bound gap it causes).
4. **Subsets.** A nested finding claims only time its parent claims (its claims are clipped to its
   parent's), so its cost never exceeds its parent's.
5. **One denominator.** ``cost_ns_per_step`` = sum over GPUs g of claimed_g / (steps_g x GPUs) and
   ``cost_share`` = cost / (the same sum over each GPU's window): the claimed GPU time per step of an
   average GPU of the job, as a share of that GPU's time per step. ``steps_g`` is the number of
   steps of g's rank (1 when it has none: then every figure is for the whole trace).
6. **Evidence on the same denominator.** The per-rank and per-GPU rows of a finding's evidence
   (``per_rank``, ``per_gpu``) that give a cost per step and a share have their share restated on
   that rank's or GPU's part of the denominator (:func:`restate_evidence_shares`), so the evidence and
   the finding divide the same time by the same window.
7. **Severity** follows the share by one rule (:data:`SEVERITY_RULE`); findings that claim no GPU
   time (memory, imbalance) are at most "low" and rank after costed ones.

Top-level shares therefore add up to at most 100% and nested costs never exceed their parent's;
``tests/test_accounting.py`` checks these invariants on generated findings (hypothesis).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any

import numpy as np

from traceview import intervals as iv
from traceview.claims import Claims
from traceview.findings import SEVERITIES, Finding

#: The precedence scale (lower wins time claimed by two top-level findings). Each analysis declares
#: where its codes sit (``AnalysisSpec.finding_precedence``), so adding a finding is one module:
#: root causes before the symptoms they explain, umbrellas last (an orphaned cause keeps its time and
#: the umbrella is what is left). Undeclared codes come after every declared one, by name.
PRECEDENCE_SCALE: tuple[tuple[int, str], ...] = (
    (10, "waiting on a peer rank (straggler)"),
    (20, "communication placed where it cannot overlap (e.g. on the compute stream)"),
    (30, "exposure of one collective kind"),
    (40, "a synchronisation or blocking copy on the host"),
    (50, "idle while the host synchronises"),
    (60, "launch overhead (launch-bound steps, tiny kernels)"),
    (70, "idle while the host does other work"),
    (80, "idle with work queued (late start)"),
    (90, "idle with no known cause"),
    (100, "busy time above the roofline (analyses/efficiency.py)"),
    (190, "umbrella: exposed communication"),
    (200, "umbrella: idle GPU"),
    (250, "a what-if's saving (critical path): time the findings above already name, restated as step time"),
)

#: a finding goes under an ancestor only when that ancestor claims at least this share of its time
#: (else its time is mostly another cause's, and it stands at top level, by precedence)
CONTAINED_MIN_SHARE = 0.5

#: (severity, minimum cost share): the first row whose share the finding reaches; else "info"
SEVERITY_RULE: tuple[tuple[str, float], ...] = (("high", 0.25), ("medium", 0.10), ("low", 0.02))
#: the highest severity a finding that claims no GPU time can have
UNCOSTED_MAX_SEVERITY = "low"


def severity_for_share(share: float) -> str:
    """The severity of a finding costing ``share`` of the GPU time (:data:`SEVERITY_RULE`)."""
    for severity, minimum in SEVERITY_RULE:
        if share >= minimum:
            return severity
    return "info"


@dataclass(frozen=True)
class Denominator:
    """The one denominator of every cost and share in a report: each GPU's whole-trace window and
    the number of steps of its rank."""

    #: (rank, device) -> (window start ns, window end ns)
    windows: Mapping[tuple[int, int], tuple[int, int]]
    #: rank -> number of steps (0 or absent: no steps, figures are for the whole trace)
    steps: Mapping[int, int] = field(default_factory=dict)

    @property
    def per_step(self) -> bool:
        """True when every GPU's rank has steps (costs are per step), else whole-trace figures."""
        return bool(self.windows) and all(self.steps.get(r, 0) > 0 for r, _ in self.windows)

    def weight(self, rank: int) -> float:
        n = max(len(self.windows), 1)
        return 1.0 / (max(self.steps.get(rank, 0), 1) * n)

    def gpu_time_per_step_ns(self) -> float:
        """The GPU time per step of an average GPU (the share denominator)."""
        return float(sum((hi - lo) * self.weight(r) for (r, _), (lo, hi) in self.windows.items()))

    def per_step_windows(self) -> tuple[dict[tuple[int, int], float], dict[int, float]]:
        """The time per step of each GPU's window, and of each rank's average GPU."""
        by_gpu = {(r, d): (hi - lo) / max(self.steps.get(r, 0), 1) for (r, d), (lo, hi) in self.windows.items()}
        spans: dict[int, list[float]] = {}
        for (r, _), t in by_gpu.items():
            spans.setdefault(r, []).append(t)
        return by_gpu, {r: float(np.mean(t)) for r, t in spans.items()}

    def window_claims(self) -> Claims:
        if not self.windows:
            return Claims.empty()
        keys = list(self.windows)
        lo = np.array([self.windows[k][0] for k in keys], dtype=np.int64)
        hi = np.array([self.windows[k][1] for k in keys], dtype=np.int64)
        return Claims.of(np.array([k[0] for k in keys]), np.array([k[1] for k in keys]), lo, hi)

    def cost(self, claims: Claims) -> tuple[int, float | None]:
        """(cost ns per step, share) of ``claims``."""
        total = sum(ns * self.weight(r) for (r, _), ns in claims.by_gpu().items())
        denom = self.gpu_time_per_step_ns()
        return int(round(total)), (total / denom if denom > 0 else None)

    def describe(self) -> dict[str, Any]:
        return {
            "basis": "step" if self.per_step else "whole trace",
            "gpus": len(self.windows),
            "gpu_time_per_step_ns": int(round(self.gpu_time_per_step_ns())) if self.per_step else None,
            "gpu_time_ns": int(sum(hi - lo for lo, hi in self.windows.values())),
            "rule": "cost = claimed GPU time per step of an average GPU (whole trace without steps); "
                    "share = cost / that GPU's time per step",
        }


def _precedence(code: str, precedence: Mapping[str, int]) -> tuple[int, str]:
    return (precedence.get(code, 1_000), code)


def _ancestors(code: str | None, parents: Mapping[str, str]) -> list[str]:
    out: list[str] = []
    while code is not None and code not in out:
        out.append(code)
        code = parents.get(code)
    return out


def _ranks_of(f: Finding) -> set[int] | None:
    if f.claims is not None and f.claims:
        return f.claims.ranks()
    if f.rank is not None:
        return {int(f.rank)}
    per_rank = f.evidence.get("per_rank") if isinstance(f.evidence, dict) else None
    if isinstance(per_rank, list):
        return {int(p["rank"]) for p in per_rank if isinstance(p, dict) and p.get("rank") is not None} or None
    return None


def _overlap(child: Finding, candidate: Finding, raw: Mapping[int, Claims]) -> float:
    """How much of ``child`` ``candidate`` covers (ns for costed children, 1/0 for uncosted)."""
    c, p = raw.get(id(child)), raw.get(id(candidate))
    if c is not None and p is not None:
        return float(c.intersect(p).total_ns())
    mine, theirs = _ranks_of(child), _ranks_of(candidate)
    return 1.0 if mine is None or theirs is None or bool(mine & theirs) else 0.0


def _choose_parent(f: Finding, by_code: Mapping[str, list[Finding]], parents: Mapping[str, str],
                   raw: Mapping[int, Claims]) -> Finding | None:
    """The nearest present ancestor of ``f`` that holds at least :data:`CONTAINED_MIN_SHARE` of its
    claimed time (the one holding most); for an uncosted ``f``, the nearest whose ranks overlap."""
    mine = raw.get(id(f))
    need = CONTAINED_MIN_SHARE * mine.total_ns() if mine is not None else 0.0
    for code in _ancestors(f.part_of, parents):
        best, best_overlap = None, 0.0
        for cand in by_code.get(code, []):
            if cand is f or (mine is not None and id(cand) not in raw):
                continue  # a costed finding under an uncosted one would escape the precedence
            ov = _overlap(f, cand, raw)
            if ov > best_overlap and ov >= need:
                best, best_overlap = cand, ov
        if best is not None:
            return best
    return None


@dataclass
class Accounted:
    """One finding after accounting: its place in the tree and its claimed time."""

    finding: Finding
    parent: Finding | None
    raw_ns: int
    claims: Claims | None
    ceded_to: list[str] = field(default_factory=list)


def _tree(findings: list[Finding], parents: Mapping[str, str], raw: Mapping[int, Claims]) -> dict[int, Finding | None]:
    by_code: dict[str, list[Finding]] = {}
    for f in findings:
        by_code.setdefault(f.code, []).append(f)
    parent: dict[int, Finding | None] = {}
    for f in findings:
        parent[id(f)] = _choose_parent(f, by_code, parents, raw) if f.part_of else None
    # a cycle of part_of (two findings each under the other) is broken by making the first top-level
    for f in findings:
        seen = {id(f)}
        p = parent[id(f)]
        while p is not None:
            if id(p) in seen:
                parent[id(f)] = None
                break
            seen.add(id(p))
            p = parent[id(p)]
    return parent


def _depth(f: Finding, parent: Mapping[int, Finding | None]) -> int:
    d, p = 0, parent[id(f)]
    while p is not None:
        d, p = d + 1, parent[id(p)]
    return d


def account(findings: list[Finding], denominator: Denominator, parents: Mapping[str, str] | None = None,
            precedence: Mapping[str, int] | None = None) -> list[Accounted]:
    """Nest, de-duplicate and cost ``findings`` (see the module docstring). ``parents``: code ->
    umbrella code; ``precedence``: code -> place on :data:`PRECEDENCE_SCALE` (both declared by the
    analyses, ``traceview.registry``). Returns one entry per finding, parents before their children;
    findings are updated in place (cost, share, severity)."""
    precedence = precedence or {}
    parents = dict(parents or {})
    for f in findings:
        if f.part_of and f.code not in parents:
            parents[f.code] = f.part_of
    window = denominator.window_claims()
    step_windows = denominator.per_step_windows()
    raw: dict[int, Claims] = {id(f): in_window(f.claims, window) for f in findings if f.claims is not None}
    parent = _tree(findings, parents, raw)
    order = sorted(findings, key=lambda f: (_depth(f, parent), _precedence(f.code, precedence)))
    final: dict[int, Claims] = {}
    out: list[Accounted] = []
    taken = Claims.empty()
    owner: list[tuple[str, Claims]] = []
    for f in order:
        claims = raw.get(id(f))
        ceded: list[str] = []
        p = parent[id(f)]
        if claims is not None:
            if p is None:
                mine = claims.subtract(taken)
                ceded = [code for code, c in owner if claims.intersect(c)]
                taken = taken.union(mine)
                owner.append((f.code, mine))
                claims = mine
            elif id(p) in final:
                claims = claims.intersect(final[id(p)])
            final[id(f)] = claims
        _set_cost(f, claims, denominator)
        restate_evidence_shares(f, step_windows)
        out.append(Accounted(f, p, raw[id(f)].total_ns() if id(f) in raw else 0, claims, ceded))
    return out


def in_window(claims: Claims, window: Claims) -> Claims:
    """``claims.intersect(window)``: the claims themselves when each of their intervals lies inside
    a window interval of its GPU (a finding claims the time of the trace's own GPU events, so
    nearly always), found by one lookup per interval instead of the general intersection (1 ms per
    60k intervals, and a report intersects each finding's claims with the window)."""
    key, wkey = claims.key, window.key
    if key.size and wkey.size and iv.is_union_by(key, claims.start_ns, claims.end_ns) \
            and iv.is_union_by(wkey, window.start_ns, window.end_ns):
        at = np.minimum(np.searchsorted(wkey, key), wkey.size - 1)  # the GPU's first window interval
        if bool(np.all(wkey[at] == key) and np.all(window.start_ns[at] <= claims.start_ns)
                and np.all(claims.end_ns <= window.end_ns[at])):
            return claims
    return claims.intersect(window)


#: the evidence lists whose rows :func:`restate_evidence_shares` restates, and in each row the cost
#: per step a share divides (the first present) and the share keys it restates
EVIDENCE_ROWS = ("per_rank", "per_gpu")
EVIDENCE_COSTS = ("cost_ns_per_step", "exposed_ns_per_step")
EVIDENCE_SHARES = ("share", "cost_share")


def restate_evidence_shares(f: Finding, windows: tuple[Mapping[tuple[int, int], float], Mapping[int, float]]
                            ) -> None:
    """Each ``per_rank``/``per_gpu`` evidence row with a rank, a cost per step and a share gets its
    share (and ``window_ns``, where it has one) on the report's denominator: the cost per step over
    that GPU's time per step (a rank's row without a device: its average GPU's), as the finding's
    own ``cost_share``. ``windows``: :meth:`Denominator.per_step_windows`. Rows of ranks outside the
    denominator are left as the analysis gave them."""
    by_gpu, by_rank = windows
    ev = f.evidence if isinstance(f.evidence, dict) else {}
    for key in EVIDENCE_ROWS:
        rows = ev.get(key)
        for row in rows if isinstance(rows, list) else []:
            if not isinstance(row, dict) or not isinstance(row.get("rank"), Integral):
                continue
            cost = next((row[k] for k in EVIDENCE_COSTS if isinstance(row.get(k), Real)), None)
            shares = [k for k in EVIDENCE_SHARES if isinstance(row.get(k), Real)]
            rank, device = int(row["rank"]), row.get("device")
            window = by_gpu.get((rank, int(device))) if isinstance(device, Integral) else by_rank.get(rank)
            if cost is None or not shares or not window:
                continue
            for k in shares:
                row[k] = float(cost) / window
            if "window_ns" in row:
                row["window_ns"] = int(round(window))


def _set_cost(f: Finding, claims: Claims | None, denominator: Denominator) -> None:
    if claims is None:
        f.cost_ns_per_step, f.cost_share = 0, None
        cap = SEVERITIES.index(UNCOSTED_MAX_SEVERITY)
        f.severity = SEVERITIES[max(SEVERITIES.index(f.severity), cap)]
        return
    f.cost_ns_per_step, f.cost_share = denominator.cost(claims)
    f.severity = severity_for_share(f.cost_share or 0.0)


def rank_key(a: Accounted) -> tuple:
    """Most costly first; severity breaks ties; uncosted after costed; info last."""
    f = a.finding
    return (f.severity == "info", a.claims is None, -(f.cost_ns_per_step or 0), SEVERITIES.index(f.severity),
            f.code, -1 if f.rank is None else f.rank)


def tree(accounted: list[Accounted]) -> list[tuple[Accounted, list[tuple[Accounted, Accounted]]]]:
    """Ranked top-level entries, each with its descendants in depth-first order as (entry, direct
    parent entry) pairs; siblings ranked by :func:`rank_key`."""
    by_id = {id(a.finding): a for a in accounted}
    kids: dict[int, list[Accounted]] = {}
    top: list[Accounted] = []
    for a in accounted:
        if a.parent is None:
            top.append(a)
        else:
            kids.setdefault(id(a.parent), []).append(a)

    def walk(a: Accounted) -> list[tuple[Accounted, Accounted]]:
        out: list[tuple[Accounted, Accounted]] = []
        for k in sorted(kids.get(id(a.finding), []), key=rank_key):
            out.append((k, by_id[id(a.finding)]))
            out.extend(walk(k))
        return out

    return [(a, walk(a)) for a in sorted(top, key=rank_key)]


def claims_record(a: Accounted, denominator: Denominator, *, max_gpus: int = 16,
                  max_intervals: int = 10) -> dict[str, Any] | None:
    """What the report says of a finding's claims: claimed time per GPU (the largest ``max_gpus``),
    the longest intervals, and the time it ceded to findings ranked before it."""
    if a.claims is None:
        return None
    per_gpu = sorted(a.claims.by_gpu().items(), key=lambda kv: -kv[1])
    windows = denominator.windows
    gpus = []
    for (r, d), ns in per_gpu[:max_gpus]:
        lo, hi = windows.get((r, d), (0, 0))
        steps = denominator.steps.get(r, 0)
        gpus.append({"rank": r, "device": d, "claimed_ns": ns,
                     "claimed_ns_per_step": int(round(ns / steps)) if steps else ns,
                     "share_of_gpu": ns / (hi - lo) if hi > lo else None})
    return {
        "claimed_ns": a.claims.total_ns(),
        "unclaimed_ns": max(0, a.raw_ns - a.claims.total_ns()),
        "ceded_to": a.ceded_to,
        "intervals": len(a.claims),
        "gpus": len(per_gpu),
        "per_gpu": gpus,
        "largest_intervals": [list(x) for x in a.claims.largest(max_intervals)],
    }


def windows_from_breakdown(rank: np.ndarray, device: np.ndarray, first_start_ns: np.ndarray,
                           last_end_ns: np.ndarray) -> dict[tuple[int, int], tuple[int, int]]:
    """The denominator's windows from the temporal analysis's whole-trace rows."""
    return {(int(r), int(d)): (int(lo), int(hi))
            for r, d, lo, hi in zip(rank, device, first_start_ns, last_end_ns) if hi > lo}
