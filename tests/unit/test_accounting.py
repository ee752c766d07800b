"""Cost accounting (traceview.accounting, docs/metrics.md "Findings: costs that add up").

Invariants under test, on generated findings and on generated traces (hypothesis):

- top-level findings never claim the same GPU time twice, so their shares add up to at most 100%;
- a nested finding claims a subset of its parent's time: cost <= parent's cost, severity no worse;
- every cost and share is on one denominator (share = cost / GPU time per step of an average GPU);
- severity follows the share by one rule; findings without claims are at most "low";
- accounting is idempotent (a report built twice says the same).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from builders import TraceBuilder

import traceview.analyses  # noqa: F401  (registers the analyses' declared parents and precedence)
from traceview import accounting
from traceview.registry import finding_parents, finding_precedence
from traceview.claims import Claims
from traceview.findings import SEVERITIES, Finding, Options
from traceview.model import Kind
from traceview.pipeline import analyze

#: a small family of codes with the real nesting (child -> parent)
PARENTS = {
    "host_bound_gaps": "low_utilization", "sync_bound_gaps": "low_utilization",
    "launch_bound": "host_bound_gaps", "blocking_copy": "sync_bound_gaps",
    "exposed_collective": "exposed_communication", "straggler_rank": "exposed_communication",
}
CODES = ["low_utilization", "exposed_communication", *PARENTS]
GPUS = [(0, 0), (0, 1), (1, 0), (2, 0)]


def rank_of(s: str) -> int:
    return SEVERITIES.index(s)


@st.composite
def claims_st(draw: st.DrawFn) -> Claims:
    n = draw(st.integers(0, 6))
    parts = []
    for _ in range(n):
        r, d = draw(st.sampled_from(GPUS))
        s = draw(st.integers(-50, 1100))
        parts.append((r, d, s, s + draw(st.integers(0, 400))))
    if not parts:
        return Claims.empty()
    r, d, s, e = map(np.array, zip(*parts))
    return Claims.of(r, d, s, e)


@st.composite
def findings_st(draw: st.DrawFn) -> list[Finding]:
    out = []
    for _ in range(draw(st.integers(1, 8))):
        code = draw(st.sampled_from(CODES))
        costed = draw(st.booleans()) or code in ("low_utilization", "exposed_communication")
        out.append(Finding(code=code, title=code, severity=draw(st.sampled_from(SEVERITIES)), analysis="t",
                           recommendation="", part_of=PARENTS.get(code),
                           rank=draw(st.sampled_from([None, 0, 1, 2])),
                           claims=draw(claims_st()) if costed else None))
    return out


@st.composite
def denominator_st(draw: st.DrawFn) -> accounting.Denominator:
    windows = {}
    for g in GPUS:
        lo = draw(st.integers(0, 100))
        windows[g] = (lo, lo + draw(st.integers(1, 1000)))
    steps = {r: draw(st.integers(0, 5)) for r in {g[0] for g in GPUS}}
    return accounting.Denominator(windows, steps)


def check_invariants(acc: list[accounting.Accounted], denom: accounting.Denominator) -> None:
    tops = [a for a in acc if a.parent is None and a.claims is not None]
    # 1. top-level claims are pairwise disjoint, hence shares add up to at most 1
    for i, a in enumerate(tops):
        for b in tops[i + 1:]:
            assert a.claims.intersect(b.claims).total_ns() == 0, (a.finding.code, b.finding.code)
    assert sum(a.finding.cost_share or 0 for a in tops) <= 1 + 1e-9
    by_id = {id(a.finding): a for a in acc}
    window = denom.window_claims()
    per_step = denom.gpu_time_per_step_ns()
    for a in acc:
        f = a.finding
        if a.claims is None:
            assert f.cost_share is None and rank_of(f.severity) >= rank_of("low")
            continue
        # claims lie inside the GPU windows
        assert a.claims.subtract(window).total_ns() == 0
        # 3. one denominator, 4. one severity rule
        if per_step > 0:
            assert f.cost_share == pytest.approx(sum(ns * denom.weight(r) for (r, _), ns in a.claims.by_gpu().items())
                                                 / per_step)
        assert f.severity == accounting.severity_for_share(f.cost_share or 0)
        # 2. nested: under a costed parent (one that claims no time could not bound its own), a subset
        # of the parent's time, cost and severity no larger
        if a.parent is not None:
            assert a.parent.claims is not None, (f.code, a.parent.code)
            p = by_id[id(a.parent)]
            assert a.claims.subtract(p.claims).total_ns() == 0
            assert f.cost_ns_per_step <= a.parent.cost_ns_per_step
            assert rank_of(f.severity) >= rank_of(a.parent.severity)


@settings(max_examples=300, deadline=None)
@given(findings_st(), denominator_st())
def test_accounting_invariants_on_generated_findings(findings, denom):
    acc = accounting.account(findings, denom, PARENTS, finding_precedence())
    assert {id(a.finding) for a in acc} == {id(f) for f in findings}
    check_invariants(acc, denom)
    # idempotent: costs come from claims, not from the previous pass
    before = [(f.cost_ns_per_step, f.cost_share, f.severity) for f in findings]
    accounting.account(findings, denom, PARENTS, finding_precedence())
    assert [(f.cost_ns_per_step, f.cost_share, f.severity) for f in findings] == before


def test_precedence_gives_shared_time_to_one_cause():
    denom = accounting.Denominator({(0, 0): (0, 1000)}, {0: 2})
    sync = Finding("sync_bound_gaps", "s", "low", "t", "", part_of="low_utilization", claims=Claims.of(0, 0, [0], [300]))
    host = Finding("host_bound_gaps", "h", "low", "t", "", part_of="low_utilization", claims=Claims.of(0, 0, [200], [600]))
    acc = {a.finding.code: a for a in accounting.account([host, sync], denom, finding_parents(), finding_precedence())}
    # no umbrella present: both are top-level; the sync (declared before host-bound idle) keeps [200, 300)
    assert acc["sync_bound_gaps"].claims.total_ns() == 300
    assert acc["host_bound_gaps"].claims.total_ns() == 300 and acc["host_bound_gaps"].ceded_to == ["sync_bound_gaps"]
    assert host.cost_ns_per_step == 150 and host.cost_share == pytest.approx(0.3) and host.severity == "high"


def test_child_goes_to_the_nearest_ancestor_that_holds_its_time():
    """A blocking copy whose idle was attributed host-bound is not nested under sync-bound gaps (which
    hold none of its time) but under the idle umbrella, and never stands beside it at top level."""
    denom = accounting.Denominator({(0, 0): (0, 1000)}, {})
    util = Finding("low_utilization", "u", "low", "t", "", claims=Claims.of(0, 0, [0, 500], [100, 900]))
    sync = Finding("sync_bound_gaps", "s", "low", "t", "", part_of="low_utilization", claims=Claims.of(0, 0, [0], [100]))
    copy = Finding("blocking_copy", "c", "high", "t", "", part_of="sync_bound_gaps",
                   claims=Claims.of(0, 0, [450], [950]))
    acc = {a.finding.code: a for a in accounting.account([copy, sync, util], denom, PARENTS)}
    assert acc["blocking_copy"].parent is util
    assert acc["blocking_copy"].claims.total_ns() == 400  # clipped to the idle it is part of
    assert copy.cost_ns_per_step <= util.cost_ns_per_step


def test_uncosted_findings_are_at_most_low_and_rank_last():
    denom = accounting.Denominator({(0, 0): (0, 1000)}, {0: 1})
    mem = Finding("memory_fragmentation", "m", "high", "memory", "")
    idle = Finding("low_utilization", "u", "low", "t", "", claims=Claims.of(0, 0, [0], [30]))
    acc = accounting.account([mem, idle], denom)
    assert mem.severity == "low" and mem.cost_share is None
    order = [a.finding.code for a, _ in accounting.tree(acc)]
    assert order == ["low_utilization", "memory_fragmentation"]  # 3% costed before uncosted "low"


# ----------------------------------------------------------------------------- generated traces


@st.composite
def traces_st(draw: st.DrawFn):
    """One rank, 1-3 steps: kernels with random gaps, some launched late (host-bound), some blocking
    copies and synchronize calls, some NCCL kernels on a second stream."""
    b = TraceBuilder()
    t = 0
    n_steps = draw(st.integers(1, 3))
    for step in range(1, n_steps + 1):
        start = t
        for _ in range(draw(st.integers(2, 8))):
            what = draw(st.sampled_from(["kernel", "late", "copy", "sync", "nccl", "tiny"]))
            gap = draw(st.integers(0, 5_000))
            dur = draw(st.integers(1, 20_000))
            if what == "late":
                b.launched("cudaLaunchKernel", t + gap, 5_000, t + gap + 5_100, dur)
                t += gap + 5_100 + dur
            elif what == "copy":
                b.launched("cudaMemcpy", t, gap + dur + 100, t + gap, dur, kind=Kind.MEMCPY)
                t += gap + dur + 200
            elif what == "sync":
                b.launched("cudaLaunchKernel", t, 1_000, t + 1_000, dur)
                b.runtime("cudaStreamSynchronize", t + 1_100, dur + gap)
                t += 1_100 + dur + gap
            elif what == "nccl":
                b.launched("cudaLaunchKernel", t, 1_000, t + 1_000 + gap, dur, name="ncclDevKernel_AllReduce_Sum_f32",
                           stream=9)
                t += 1_000 + gap + dur
            elif what == "tiny":
                for _ in range(5):
                    b.launched("cudaLaunchKernel", t, 4_000, t + 4_000, 1_000)
                    t += 5_000
            else:
                b.launched("cudaLaunchKernel", t, 1_000, t + 1_000 + gap, dur)
                t += 1_000 + gap + dur
        b.step(step, start, t + 1)
        t += draw(st.integers(0, 20_000))  # between steps: e.g. a data loader
    return b.build()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces_st())
def test_report_findings_add_up_on_generated_traces(trace):
    report = analyze(trace, Options(claims="all"))
    findings = report["findings"]
    by_id = {f["id"]: f for f in findings}
    # from the JSON alone (the claims table): nested claims lie inside the parent's, part_of names it
    claimed = claims_of_report(report)
    for f in findings:
        parent = by_id.get(f["part_of_id"] or "")
        assert f["part_of"] == (parent["code"] if parent is not None else None), f["id"]
        if parent is not None and f["id"] in claimed:
            assert claimed[f["id"]].subtract(claimed.get(parent["id"], Claims.empty())).total_ns() == 0, f["id"]
    top = [f for f in findings if f["parent"] is None]
    assert sum(f["cost_share"] or 0 for f in top) <= 1 + 1e-9
    assert report["findings_summary"]["denominator"]["basis"] == "step"
    for f in findings:
        if f["cost_share"] is not None:
            assert f["severity"] == accounting.severity_for_share(f["cost_share"])
        parent = by_id.get(f.get("part_of_id") or "")
        if parent is not None and f["claims"] is not None and parent["claims"] is not None:
            assert f["cost_ns_per_step"] <= parent["cost_ns_per_step"]
            assert f["claims"]["claimed_ns"] <= parent["claims"]["claimed_ns"]
            assert rank_of(f["severity"]) >= rank_of(parent["severity"])


def claims_of_report(report) -> dict[str, Claims]:
    """The report's claims table (``claims="all"``) as Claims per finding id."""
    rows: dict[str, list] = {}
    for fid, *rest in report["claims"]["rows"]:
        rows.setdefault(fid, []).append(rest)
    return {fid: Claims.of(*(np.array(c, dtype=np.int64) for c in zip(*part))) for fid, part in rows.items()}


def test_every_finding_code_declares_its_precedence_and_umbrella():
    """Each analysis places its costed codes on the precedence scale and names their umbrellas where it
    declares them (traceview.registry), so no list of codes lives anywhere else."""
    from traceview.analyses import specs

    precedence, parents = finding_precedence(), finding_parents()
    scale = {rank for rank, _ in accounting.PRECEDENCE_SCALE}
    for spec in specs():
        for code, rank in spec.finding_precedence:
            assert code in spec.finding_codes and min(scale) <= rank <= max(scale), (spec.name, code)
        for code, parent in spec.finding_parents:
            assert code in spec.finding_codes and (parent in precedence or parent in parents), (spec.name, code)
    assert precedence["straggler_rank"] < precedence["exposed_communication"] < precedence["low_utilization"]
    assert precedence["sync_bound_gaps"] < precedence["host_bound_gaps"]


@pytest.mark.parametrize("sample", ["synthetic_4rank", "synthetic_nsys.sqlite"])
def test_rank_denominators_equal_the_per_rank_filter(sample: str) -> None:
    """One pass over the whole-trace rows gives each rank the denominator a filter per rank gives."""
    from conftest import SAMPLE_TRACES

    import traceview
    from traceview.report import denominator, rank_denominators
    from traceview.report_inputs import ReportInputs

    report = traceview.analyze(SAMPLE_TRACES / sample, use_cache=False)
    inputs = ReportInputs(report.results, {}, [r["rank"] for r in report["ranks"]])
    built = rank_denominators(inputs)
    ranks = sorted(built)
    assert len(ranks) >= 2
    for rank in ranks:
        assert built[rank] == denominator(inputs, [rank])
