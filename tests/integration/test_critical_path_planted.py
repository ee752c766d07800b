"""The critical path on traces whose path is planted (sample_traces/make_planted_paths.py): each step's
path length, its composition by category and its what-if step times match the truth the generator
computed while placing the events (within 1% of the planted value, or of 0.25% of the step for the
small categories). ``benchmarks/bench_critical_path.py`` prints the same comparison as a table.

The first tests check the planted traces themselves against the analyses that exist without the
critical path (the step windows and the late rank's lateness), so the truth is the trace's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import traceview

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_traces"))

import make_planted_paths as mpp  # noqa: E402

CASES = list(mpp.CASES)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[mpp.PathCase, Any]]:
    """Every case, generated once and analysed once (no cache)."""
    out = tmp_path_factory.mktemp("cp-planted")
    done = {}
    for kind in CASES:
        case = mpp.build_case(kind)
        done[kind] = (case, traceview.analyze(mpp.write_case(case, out), cache=False))
    return done


def _critical_path(report: Any, kind: str) -> dict[str, Any]:
    if "critical_path" not in report["analyses"]:
        pytest.fail(f"{kind}: the report has no critical_path analysis")
    return report.tables("critical_path")


def _failures(checks: list[mpp.Check]) -> str:
    bad = [c for c in checks if not c.ok]
    return "; ".join(f"rank {c.rank} step {c.step} {c.what}: planted {c.planted:,.0f} ns, found "
                     f"{'missing' if c.found is None else f'{c.found:,.0f} ns'}" for c in bad[:12]) \
        + (f" (+{len(bad) - 12} more)" if len(bad) > 12 else "")


@pytest.mark.parametrize("kind", CASES)
def test_planted_windows_are_the_steps_traceview_finds(kind: str, analysed: dict) -> None:
    case, report = analysed[kind]
    found = {(int(r["rank"]), int(r["step"])): (int(r["start_ns"]), int(r["end_ns"]))
             for r in report.table("temporal", "steps").to_dict("records")}
    planted = {(t.rank, t.step): (t.start_ns, t.end_ns) for t in case.truth}
    assert found == planted
    for t in case.truth:
        assert sum(t.composition.values()) == t.step_ns
        assert all(t.whatif[s] <= t.step_ns for s in mpp.SCENARIOS)


def test_late_rank_waiting_is_the_lateness_traceview_measures(analysed: dict) -> None:
    """The others' planted waiting_on_rank per step is the late rank's lateness in the arrivals table."""
    case, report = analysed["late_rank_allreduce"]
    arrivals = report.table("communication", "arrivals")
    late = arrivals[(arrivals["rank"] == mpp.LATE_RANK) & (arrivals["occurrence"] == 0)]
    lateness = {int(r["step"]): int(r["lateness_ns"]) for r in late.to_dict("records")}
    for t in case.truth:
        expected = 0 if t.rank == mpp.LATE_RANK else lateness[t.step]
        assert t.composition["waiting_on_rank"] == expected, (t.rank, t.step)
        assert lateness[t.step] > 0.03 * t.step_ns


def _group(t: mpp.StepTruth, group: str) -> int:
    return sum(t.composition[c] for c in mpp.GROUPS[group])


@pytest.mark.parametrize("kind", CASES)
def test_whatif_truth_has_the_closed_forms_of_the_model(kind: str) -> None:
    """The re-placed schedules give what the model's arithmetic gives on these paths: with the host
    infinitely fast a GPU-bound step is its GPU path (the untraced gap between steps gone; a stream
    idle at the step's start restarts one turnaround after the last step's work); overlapping the
    communication saves the path's collective time; median_rank saves the waiting beyond the median."""
    first_idle = {"graph_replay": True, "item_sync": False, "second_stream_wait": False, "late_rank_allreduce": False}
    for t in mpp.build_case(kind).truth:
        gap = mpp.STEP_GAP_NS if t.step > 1 else 0
        assert t.whatif["comm_overlapped"] == t.step_ns - _group(t, "communication")
        assert t.whatif["median_rank"] == t.step_ns - t.composition["waiting_on_rank"]
        assert t.whatif["roofline"] == t.step_ns
        if kind in ("graph_replay", "second_stream_wait", "late_rank_allreduce"):
            restart = mpp.TURNAROUND_NS if first_idle[kind] and t.step > 1 else 0
            assert t.whatif["no_host_overhead"] == _group(t, "gpu") + _group(t, "communication") + restart - gap
            assert t.whatif["achievable"] == _group(t, "gpu") + restart - gap
        assert t.whatif["no_host_overhead"] < t.step_ns


@pytest.mark.parametrize("kind", CASES)
def test_path_composition_matches_the_planted_path(kind: str, analysed: dict) -> None:
    case, report = analysed[kind]
    tables = _critical_path(report, kind)
    checks = [c for c in mpp.compare(case, tables["steps"], tables["whatif"]) if not c.what.startswith("whatif:")]
    assert all(c.ok for c in checks), f"{kind}: {_failures(checks)}"
    found = {key: row["bound_by"] for key, row in mpp.rows_by_key(tables["steps"], ("rank", "step")).items()}
    assert found == {(t.rank, t.step): t.bound_by for t in case.truth}


@pytest.mark.parametrize("kind", CASES)
def test_whatif_step_times_match_the_planted_ones(kind: str, analysed: dict) -> None:
    case, report = analysed[kind]
    tables = _critical_path(report, kind)
    checks = [c for c in mpp.compare(case, tables["steps"], tables["whatif"]) if c.what.startswith("whatif:")]
    if len(case.traces) == 1:  # median_rank is cross-rank: a one-rank job need not have its rows
        present = {(rank, step) for rank, step, scenario in mpp.rows_by_key(tables["whatif"], ("rank", "step", "scenario"))
                   if scenario == "median_rank"}
        checks = [c for c in checks if c.what != "whatif:median_rank" or (c.rank, c.step) in present]
    assert all(c.ok for c in checks), f"{kind}: {_failures(checks)}"
