"""Planted problems (sample_traces/make_planted.py): each is found with its code and a cost within 5%
of the planted cost, and nothing above "info" fires that should not (healthy twins: nothing at all).

The fast subset: the small size, one seed per case. ``benchmarks/planted.py`` runs every size and
seed and prints the table.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import traceview

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_traces"))

import make_planted  # noqa: E402


def _describe(f: dict) -> str:
    return f"{f['code']} ({f['severity']}, {(f.get('cost_ns_per_step') or 0) / 1e3:,.1f} us/step)"


@pytest.mark.parametrize("kind", list(make_planted.CASES))
def test_planted_case(kind: str, tmp_path: Path) -> None:
    case = next(make_planted.planted_cases(("small",), (1,), kinds=(kind,)))
    report = traceview.analyze(make_planted.write_case(case, tmp_path), use_cache=False)
    findings = list(report["findings"])
    sc = make_planted.score(case.expected, findings)
    found, false_alarms = sc.found, [_describe(f) for f in sc.false_alarms]
    fired = ", ".join(_describe(f) for f in findings)
    assert not false_alarms, f"{case.name}: false alarms {false_alarms}"
    if case.expected is not None:
        planted = case.expected.cost_ns_per_step
        assert found, (f"{case.name}: expected {' or '.join(case.expected.codes)}"
                          + ("" if planted is None else f" costing {planted / 1e3:,.1f} us/step")
                          + f"; findings: {fired}")


def test_generation_is_deterministic() -> None:
    a = next(make_planted.planted_cases(("small",), (2,), kinds=("straggler",)))
    b = next(make_planted.planted_cases(("small",), (2,), kinds=("straggler",)))
    assert a.traces == b.traces and a.expected == b.expected
    c = next(make_planted.planted_cases(("small",), (3,), kinds=("straggler",)))
    assert c.traces != a.traces  # the seed changes the jitter


def test_planted_costs_are_what_was_planted() -> None:
    """Costs come from the construction: the straggler's wait and the planted idle are positive and
    of the size the case aims for (a share of the step, not a rounding error)."""
    by_kind = {c.kind: c for c in make_planted.planted_cases(("small",), (1,))}
    for kind in ("host_bound_dataloader", "item_sync", "launch_bound", "straggler", "pageable_copy"):
        e = by_kind[kind].expected
        assert e is not None and e.cost_ns_per_step is not None and e.cost_ns_per_step > 50_000, kind
    assert by_kind["fragmentation"].expected.cost_ns_per_step is None  # type: ignore[union-attr]
    assert all(by_kind[k].healthy for k in make_planted.HEALTHY)


def _f(code: str, severity: str = "low", cost: int = 0) -> dict:
    return {"code": code, "severity": severity, "cost_ns_per_step": cost, "title": ""}


def test_score() -> None:
    exp = make_planted.Expected(("launch_bound",), 1_000_000.0, ("host_bound_gaps", "low_utilization"))
    ok = make_planted.score(exp, [_f("low_utilization", "high", 1_200_000), _f("launch_bound", "high", 1_040_000)])
    assert ok.found and ok.cost_error == pytest.approx(0.04) and not ok.false_alarms
    off = make_planted.score(exp, [_f("launch_bound", "high", 1_060_000)])
    assert not off.found and off.cost_error == pytest.approx(0.06)
    stray = make_planted.score(exp, [_f("launch_bound", "high", 1_000_000), _f("many_tiny_kernels", "low"),
                                     _f("dominant_kernels", "info")])
    assert stray.found and [f["code"] for f in stray.false_alarms] == ["many_tiny_kernels"]
    healthy = make_planted.score(None, [_f("dominant_kernels", "info"), _f("sync_calls", "low", 5)])
    assert [f["code"] for f in healthy.false_alarms] == ["sync_calls"]
    assert not make_planted.score(exp, []).found
