"""Findings a reader can check (issue 30, items 2, 3 and 13; docs/metrics.md "Findings: costs that
add up", docs/reports.md "The claims table").

- Nesting is decided by the claims' containment: a finding goes under the nearest finding of its
  declared chain that holds at least half of its time, never under one that claims no time; its
  ``part_of`` is the code of the parent ``part_of_id`` names, and its claims are a subset of it.
- Evidence rows per rank or GPU state their share on the report's one denominator.
- ``Options(claims="all")`` lists every claimed interval, so disjointness is checkable from the JSON.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from builders import TraceBuilder

import traceview.analyses  # noqa: F401  (registers the analyses' declared parents and precedence)
from traceview import accounting
from traceview.claims import Claims
from traceview.findings import Finding, Options
from traceview.pipeline import analyze
from traceview.registry import finding_parents, finding_precedence

US = 1_000


def sync_in_a_launch_latency_gap() -> Any:
    """One GPU, no steps: a device sync spans the gap [100, 130) us (a sync-bound gap); a stream sync
    blocks the host for [190, 390) us inside the gap [200, 400) us, which the idle-gap rules call
    launch latency (its kernel was queued at 150 us). So the synchronize calls cost 230 us of idle,
    of which the sync-bound gaps hold only 30 us."""
    b = TraceBuilder()
    b.launched("cudaLaunchKernel", 0, 1 * US, 0, 100 * US)
    b.runtime("cudaDeviceSynchronize", 95 * US, 40 * US)
    b.launched("cudaLaunchKernel", 90 * US, 1 * US, 130 * US, 70 * US)
    b.launched("cudaLaunchKernel", 150 * US, 1 * US, 400 * US, 100 * US)
    b.runtime("cudaStreamSynchronize", 190 * US, 200 * US)
    return b.build()


def intervals_by_finding(report: Any) -> dict[str, Claims]:
    """The claims table of a report (``claims="all"``) as Claims per finding id."""
    table = report["claims"]
    assert table["columns"] == ["finding", "rank", "device", "start_ns", "end_ns"]
    assert table["intervals"] == len(table["rows"])
    rows: dict[str, list[list[int]]] = defaultdict(list)
    for fid, *rest in table["rows"]:
        rows[fid].append(rest)
    out = {}
    for fid, part in rows.items():
        r, d, s, e = (np.array(c, dtype=np.int64) for c in zip(*part))
        out[fid] = Claims.of(r, d, s, e)
    return out


def test_a_sync_whose_time_is_mostly_outside_sync_bound_gaps_nests_where_its_time_is() -> None:
    report = analyze(sync_in_a_launch_latency_gap(), Options(claims="all"), use_cache=False)
    by_id = {f["id"]: f for f in report["findings"]}
    sync = next(f for f in report["findings"] if f["code"] == "sync_calls")
    parent = by_id[sync["part_of_id"]]
    # the sync-bound gaps hold 30 of its 230 us: it is not "part of" them but of the idle it lies in
    assert parent["code"] == "low_utilization" and sync["part_of"] == parent["code"]
    assert sync["cost_ns_per_step"] == 230 * US  # not clipped to the 30 us of sync-bound gaps
    claims = intervals_by_finding(report)
    assert claims[sync["id"]].subtract(claims[parent["id"]]).total_ns() == 0
    assert claims[sync["id"]].total_ns() == sync["claims"]["claimed_ns"]


def test_part_of_always_names_the_parent_a_finding_went_under() -> None:
    """A blocking copy declared under sync-bound gaps whose idle the host-bound rule took goes under
    the idle umbrella: its part_of says low_utilization, as its part_of_id does."""
    denom = accounting.Denominator({(0, 0): (0, 1000)}, {})
    util = Finding("low_utilization", "u", "low", "t", "", claims=Claims.of(0, 0, [0, 500], [100, 900]))
    sync = Finding("sync_bound_gaps", "s", "low", "t", "", part_of="low_utilization", claims=Claims.of(0, 0, [0], [100]))
    copy = Finding("blocking_copy", "c", "high", "t", "", part_of="sync_bound_gaps",
                   claims=Claims.of(0, 0, [450], [950]))
    acc = {a.finding.code: a for a in accounting.account([copy, sync, util], denom, finding_parents(),
                                                          finding_precedence())}
    assert acc["blocking_copy"].parent is util


def test_a_finding_mostly_outside_its_declared_parent_stands_on_its_own() -> None:
    """Without an idle umbrella, a sync whose time the sync-bound gaps hold only a tenth of is top
    level and takes its time by precedence (before launch-latency gaps), not clipped to 10%."""
    denom = accounting.Denominator({(0, 0): (0, 1000)}, {})
    gaps = Finding("sync_bound_gaps", "g", "low", "t", "", part_of="low_utilization", claims=Claims.of(0, 0, [0], [20]))
    late = Finding("launch_latency_gaps", "l", "low", "t", "", part_of="low_utilization",
                   claims=Claims.of(0, 0, [20], [200]))
    sync = Finding("sync_calls", "c", "low", "t", "", part_of="sync_bound_gaps", claims=Claims.of(0, 0, [0], [200]))
    acc = {a.finding.code: a for a in accounting.account([gaps, late, sync], denom, finding_parents(),
                                                          finding_precedence())}
    assert acc["sync_calls"].parent is None and acc["sync_calls"].claims.total_ns() == 200
    assert acc["launch_latency_gaps"].claims.total_ns() == 0 and acc["launch_latency_gaps"].ceded_to == ["sync_calls"]


def test_a_costed_finding_never_nests_under_one_that_claims_no_time() -> None:
    """Nested under an uncosted parent, a costed finding's time would be bounded by nothing and
    escape the precedence: two top-level findings would count the same time."""
    denom = accounting.Denominator({(0, 0): (0, 1000)}, {})
    host = Finding("host_bound_gaps", "h", "low", "t", "", rank=0, part_of="low_utilization")  # no claims
    launch = Finding("launch_bound", "l", "low", "t", "", rank=0, part_of="host_bound_gaps",
                     claims=Claims.of(0, 0, [0], [300]))
    sync = Finding("sync_calls", "s", "low", "t", "", rank=0, claims=Claims.of(0, 0, [100], [400]))
    acc = {a.finding.code: a for a in accounting.account([host, launch, sync], denom, finding_parents(),
                                                          finding_precedence())}
    assert acc["launch_bound"].parent is None
    tops = [a for a in acc.values() if a.parent is None and a.claims is not None]
    assert sum(a.claims.total_ns() for a in tops) == Claims.concat([a.claims for a in tops]).total_ns()


def test_evidence_shares_are_on_the_report_denominator() -> None:
    """Two GPUs of two ranks, 2 and 4 steps: each evidence row's share is its cost per step over
    that GPU's window per step, the finding's own denominator (not the analysis's mean step)."""
    denom = accounting.Denominator({(0, 0): (0, 1000), (1, 3): (0, 2000)}, {0: 2, 1: 4})
    f = Finding("many_tiny_kernels", "t", "low", "t", "", claims=Claims.of([0, 1], [0, 3], [0, 0], [100, 400]),
                evidence={"per_gpu": [{"rank": 0, "device": 0, "cost_ns_per_step": 50, "cost_share": 0.9},
                                      {"rank": np.int64(1), "device": 3, "cost_ns_per_step": 100, "cost_share": 0.9}],
                          "per_rank": [{"rank": 1, "exposed_ns_per_step": 100, "share": 0.9, "window_ns": 7},
                                       {"rank": 9, "cost_ns_per_step": 1, "share": 0.5}]})
    accounting.account([f], denom)
    gpu, rank = f.evidence["per_gpu"], f.evidence["per_rank"]
    assert gpu[0]["cost_share"] == pytest.approx(50 / 500) and gpu[1]["cost_share"] == pytest.approx(100 / 500)
    assert rank[0]["share"] == pytest.approx(100 / 500) and rank[0]["window_ns"] == 500
    assert rank[1]["share"] == 0.5  # a rank outside the denominator: as the analysis gave it
    # one GPU's row of a one-GPU finding says what the finding says
    one = accounting.Denominator({(0, 0): (0, 1000)}, {0: 2})
    g = Finding("many_tiny_kernels", "t", "low", "t", "", claims=Claims.of(0, 0, [0], [100]),
                evidence={"per_gpu": [{"rank": 0, "device": 0, "cost_ns_per_step": 50, "cost_share": 0.2}]})
    accounting.account([g], one)
    assert g.evidence["per_gpu"][0]["cost_share"] == pytest.approx(g.cost_share)


def top_level_claims_are_disjoint(report: Any) -> list[str]:
    """From the JSON alone: the pairs of top-level findings that claim the same GPU time."""
    top = {f["id"] for f in report["findings"] if f["parent"] is None}
    by_gpu: dict[tuple[int, int], list[tuple[int, int, str]]] = defaultdict(list)
    for fid, rank, device, start, end in report["claims"]["rows"]:
        if fid in top:
            by_gpu[rank, device].append((start, end, fid))
    clashes = []
    for ivs in by_gpu.values():
        ivs.sort()
        clashes += [f"{a[2]} and {b[2]}" for a, b in zip(ivs, ivs[1:]) if a[1] > b[0]]
    return clashes


def test_the_claims_table_lists_every_claimed_interval() -> None:
    trace = sync_in_a_launch_latency_gap()
    report = analyze(trace, Options(claims="all"), use_cache=False)
    assert report["options"]["claims"] == "all"
    claims = intervals_by_finding(report)
    for f in report["findings"]:
        if f["claims"] is not None:
            assert claims.get(f["id"], Claims.empty()).total_ns() == f["claims"]["claimed_ns"], f["id"]
            assert len(claims.get(f["id"], Claims.empty())) == f["claims"]["intervals"], f["id"]
    assert top_level_claims_are_disjoint(report) == []
    # the default report has no such table (it can be large)
    assert "claims" not in analyze(trace, use_cache=False)


def test_the_disjointness_check_finds_time_claimed_twice() -> None:
    """The JSON check itself can fail: two top-level findings on the same GPU instant."""
    report = {"findings": [{"id": "F1", "parent": None}, {"id": "F2", "parent": None}, {"id": "F2.1", "parent": "F2"}],
              "claims": {"rows": [["F1", 0, 0, 0, 100], ["F2", 0, 0, 50, 150], ["F2.1", 0, 0, 60, 70],
                                  ["F2", 0, 1, 0, 100]]}}
    assert top_level_claims_are_disjoint(report) == ["F1 and F2"]


def test_a_bad_claims_option_is_refused() -> None:
    with pytest.raises(ValueError, match="claims must be one of"):
        Options(claims="every")
