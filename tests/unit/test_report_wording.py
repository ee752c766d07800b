"""What the findings and headings say (issue 30, items 1 and 10).

- A trace without steps: no finding title, table title or column header says "per step" (figures
  are for the whole trace: docs/metrics.md, "Findings").
- A finding merged across ranks says its figure once, on the rank where it is highest, with its
  range ("GPU idle 55.6% on rank 5, 44-56% on all 8 ranks"); warnings that say the same of several
  ranks are one warning naming them.
"""

from __future__ import annotations

import re

from builders import TraceBuilder

from traceview.findings import Finding, Headline, merge_findings
from traceview.model import Kind
from traceview.pipeline import analyze
from traceview.render import get_renderer
from traceview.render.common import column_label
from traceview.report import group_rank_warnings

US = 1_000
PER_STEP = re.compile(r"per step|/ ?step\b|cost/step", re.IGNORECASE)


def busy_host_trace(steps: bool):
    """One GPU: blocking copies, synchronize calls and many tiny kernels, with or without steps."""
    b = TraceBuilder()
    t = 0
    for step in (1, 2):
        start = t
        for _ in range(40):  # tiny kernels launched one by one, each slower to launch than to run
            b.launched("cudaLaunchKernel", t, 6 * US, t + 6 * US, 2 * US)
            t += 8 * US
        b.launched("cudaMemcpy", t, 120 * US, t + 100 * US, 10 * US, kind=Kind.MEMCPY)
        t += 130 * US
        b.launched("cudaLaunchKernel", t, 1 * US, t + 1 * US, 50 * US)
        b.runtime("cudaDeviceSynchronize", t + 2 * US, 150 * US)
        t += 200 * US
        if steps:
            b.step(step, start, t)
    return b.build()


def test_no_per_step_wording_without_steps() -> None:
    report = analyze(busy_host_trace(steps=False), use_cache=False)
    assert report["findings_summary"]["denominator"]["basis"] == "whole trace"
    titles = [f["title"] for f in report["findings"]]
    assert any(f["code"] == "sync_calls" for f in report["findings"]), titles
    assert [t for t in titles if PER_STEP.search(t)] == []
    for fmt in ("markdown", "text", "html"):
        out = str(get_renderer(fmt)(details=True).render(report))
        heads = [line for line in out.splitlines() if line.startswith(("|", "**", "<summary>", "<h3>"))
                 or "<th>" in line or "─" in line or "┃" in line or "Also in the JSON" in line]
        assert [h for h in heads if PER_STEP.search(h) and "costs are not per step" not in h] == [], fmt
    tables = [t["title"] for a in report["analyses"].values() for t in a["tables"].values()]
    assert "Synchronisation, whole trace" in tables and not [t for t in tables if PER_STEP.search(t)]


def test_the_same_trace_with_steps_says_per_step() -> None:
    """The wording follows the steps: the same problems with steps are per step."""
    report = analyze(busy_host_trace(steps=True), use_cache=False)
    sync = next(f for f in report["findings"] if f["code"] == "sync_calls")
    assert "per step" in sync["title"]
    tables = [t["title"] for a in report["analyses"].values() for t in a["tables"].values()]
    assert "Synchronisation per step" in tables


def test_column_labels_say_what_their_figures_are_per() -> None:
    assert column_label("cost_ns_per_step") == "cost / step"
    assert column_label("cost_ns_per_step", per_step=False) == "cost, whole trace"
    assert column_label("calls_per_step", per_step=False) == "calls, whole trace"
    assert column_label("calls_per_step") == "calls per step"  # unchanged with steps
    assert column_label("total_ns", per_step=False) == "total"


def idle(rank: int, share: float, cost: int) -> Finding:
    return Finding("low_utilization", f"GPU {rank} of rank {rank} is idle {100 * share:.1f}% of the time", "high",
                   "temporal", "", cost_ns_per_step=cost, rank=rank, headline=Headline("GPU idle {}", share))


def test_merged_titles_say_the_figure_once() -> None:
    per_rank = [(r, idle(r, s, c)) for r, s, c in [(0, 0.44, 5), (1, 0.556, 9), (2, 0.50, 7)]]
    [merged] = merge_findings(per_rank, n_ranks=3)
    assert merged.title == "GPU idle 55.6% on rank 1, 44-56% on all 3 ranks"
    [some] = merge_findings(per_rank[:2], n_ranks=8)
    assert some.title == "GPU idle 55.6% on rank 1, 44-56% on 2 of 8 ranks"
    [same] = merge_findings([(r, idle(r, 0.5, 1)) for r in range(4)], n_ranks=4)
    assert same.title == "GPU idle 50.0% on all 4 ranks"
    # the highest figure, not the most costly rank, is the one the title quotes
    [other] = merge_findings([(0, idle(0, 0.9, 1)), (1, idle(1, 0.3, 50))], n_ranks=2)
    assert other.title == "GPU idle 90.0% on rank 0, 30-90% on all 2 ranks"
    assert other.evidence["worst_rank"] == 1


def test_a_finding_without_a_headline_keeps_its_worst_title_once() -> None:
    per_rank = [(r, Finding("memory_fragmentation", f"Rank {r} fragments", "low", "memory", "", cost_ns_per_step=r))
                for r in range(3)]
    [merged] = merge_findings(per_rank, n_ranks=3)
    assert merged.title == "Rank 2 fragments (rank 2, the worst of all 3 ranks)"
    assert "headline" not in merged.to_dict()


def test_warnings_of_many_ranks_are_one_line() -> None:
    unmapped = "3 events of categories traceview does not map were kept as kind 'other': Trace (1)"
    warnings = [{"scope": f"rank {r}", "kind": "unmapped", "message": unmapped, "applies_to": [f"rank {r}"]}
                for r in range(8)]
    warnings += [{"scope": "efficiency", "kind": "analysis", "message": f"efficiency: rank {r} GPU {r}: dtype 'int64' "
                  "has no peak in the GPU table" + (f" (rank {r})" if r % 2 else ""), "applies_to": ["efficiency"]}
                 for r in range(8)]
    warnings += [{"scope": "idle_gaps", "kind": "analysis", "message": f"{n} of 9 have no launch (rank {r})",
                  "applies_to": ["idle_gaps"]} for r, n in ((1, 6), (3, 7))]
    warnings += [{"scope": "rank 2", "kind": "input", "message": "only rank 2 says this", "applies_to": ["rank 2"]}]
    out = group_rank_warnings(warnings)
    assert out[0] == {"scope": "ranks 0-7", "kind": "unmapped", "message": unmapped,
                      "applies_to": [f"rank {r}" for r in range(8)]}
    assert out[1]["message"] == "efficiency: dtype 'int64' has no peak in the GPU table (ranks 0-7)"
    # different figures are different warnings; a warning of one rank stays as it was
    assert [w["message"] for w in out[2:]] == ["6 of 9 have no launch (rank 1)", "7 of 9 have no launch (rank 3)",
                                               "only rank 2 says this"]
    assert out[-1]["scope"] == "rank 2"
