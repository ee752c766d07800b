"""The step budget (analyses/step_budget.py): an analysis built only from two other analyses'
results, which it declares in ``requires``; the pipeline runs it after them, and the context refuses
a result it did not declare."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import traceview
from conftest import SAMPLE_TRACES, require_shared
from traceview.context import AnalysisContext, UndeclaredInput, run_analyses
from traceview.findings import AnalysisResult, Options
from traceview.registry import ANALYSES, run_order, with_requirements


@pytest.fixture(scope="module")
def report() -> traceview.Report:
    return traceview.analyze(SAMPLE_TRACES / "synthetic_4rank", use_cache=False)


def test_budget_adds_up_with_the_analyses_it_reads(report: traceview.Report) -> None:
    budget = report.table("step_budget", "budget")
    breakdown = report.table("temporal", "breakdown")
    steps = report.table("temporal", "steps")
    assert len(budget) == int(breakdown["step"].notna().sum()) > 0
    causes = [c for c in budget.columns if c.endswith("_ns") and c not in
              ("step_ns", "window_ns", "busy_ns", "idle_ns")]
    assert set(causes) == {"host_bound_ns", "sync_bound_ns", "launch_latency_ns", "unattributed_ns"}
    # the idle of each step and GPU, split by cause, adds up to the temporal breakdown's idle time
    np.testing.assert_array_equal(budget[causes].sum(axis=1).to_numpy(), budget["idle_ns"].to_numpy())
    durations = dict(zip(zip(steps["rank"], steps["step"]), steps["end_ns"] - steps["start_ns"]))
    assert [durations[(r, s)] for r, s in zip(budget["rank"], budget["step"])] == budget["step_ns"].tolist()
    assert ((budget["busy_share"] > 0) & (budget["busy_share"] <= 1)).all()
    top = budget[causes].to_numpy().argmax(axis=1)
    assert budget["top_idle_cause"].tolist() == [causes[i].removesuffix("_ns") for i in top]


def test_budget_is_in_every_report_format(report: traceview.Report) -> None:
    section = report["analyses"]["step_budget"]
    assert section["title"] == "Step budget" and section["tables"]["budget"]["rows"]


def test_runs_after_what_it_requires() -> None:
    order = [s.name for s in run_order(list(ANALYSES.values()))]
    assert order.index("step_budget") > max(order.index("temporal"), order.index("idle_gaps"))
    # asking for it alone brings what it requires
    assert [s.name for s in with_requirements([ANALYSES["step_budget"]])][-1] == "step_budget"
    assert {"temporal", "idle_gaps"} <= {s.name for s in with_requirements([ANALYSES["step_budget"]])}


def test_a_result_it_does_not_declare_is_refused() -> None:
    trace = traceview.load(SAMPLE_TRACES / "synthetic_4rank", use_cache=False)
    ctx = AnalysisContext(trace, Options())
    undeclared = dataclasses.replace(ANALYSES["step_budget"], requires=("temporal",))
    specs = [ANALYSES["temporal"], ANALYSES["idle_gaps"], undeclared]
    with pytest.raises(UndeclaredInput, match="idle_gaps"):
        run_analyses(ctx, specs, lambda spec, result: None)


def test_empty_without_steps() -> None:
    shared = require_shared()
    report = traceview.analyze(shared / "kineto" / "hta_alexnet_a100.json.gz", use_cache=False)
    budget = report.table("step_budget", "budget")
    assert budget.empty and "idle_ns" in budget.columns
    assert isinstance(report.results["step_budget"], AnalysisResult)
