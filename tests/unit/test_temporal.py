"""Temporal breakdown: known answers on hand-made traces and the synthetic samples, properties.

Definitions under test (docs/metrics.md):

- "GPU activity = kernels, memcpy and memset on that device, all streams (not sync events)."
- "window = last activity end - first activity start; busy = |union of activity|; idle = window - busy."
- "compute, communication, memory = |union| of each class; overlap % = 100 x |U(compute) ∩ U(comm)| /
  |U(comm)| (none when there is no communication); exposed communication = |U(comm)| - that intersection."
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import given, settings
from conftest import context, warning_messages
from hypothesis import strategies as st
from traceview.analyses import run_all, temporal

import traceview
from builders import TraceBuilder, synthetic_4rank, truth_scopes
from conftest import METRICS_DOC, SAMPLE_TRACES as SAMPLES
from traceview.findings import Options
from traceview.model import (
    Kind,
    Trace,
    concat_traces,
)



def breakdown(trace: Trace, options: Options | None = None) -> pd.DataFrame:
    return temporal.analyze(context(trace, options or Options())).tables["breakdown"]


def whole(table: pd.DataFrame, rank: int = 0, device: int = 0) -> pd.Series:
    rows = table[(table["rank"] == rank) & (table["device"] == device) & table["step"].isna()]
    assert len(rows) == 1
    return rows.iloc[0]


# ----------------------------------------------------------------------------- known answers


def test_docs_state_the_definitions_verbatim():
    text = METRICS_DOC.read_text()
    for sentence in (
        "GPU activity = kernels, memcpy and memset on that device, all streams (not sync events).",
        "window = last activity end - first activity start; busy = |union of activity|; idle = window - busy.",
        "compute, communication, memory = |union| of each class; overlap % = 100 x |U(compute) ∩ U(comm)| / "
        "|U(comm)| (none when there is no communication); exposed communication = |U(comm)| - that intersection.",
        "Communication kernel: a kernel that a rule of the communication table matches",
    ):
        assert sentence in text
    for heading in ("Temporal breakdown", "Idle gaps", "Launch overhead", "Communication", "Kernel breakdown",
                    "Synchronisation and copies"):
        assert f"## {heading}" in text
    assert "GPU activity = kernels, memcpy and memset" in (temporal.__doc__ or "")


def test_hand_made_breakdown():
    b = TraceBuilder()
    b.kernel(0, 10)                                  # compute [0, 10)
    b.kernel(20, 10, stream=8)                       # compute [20, 30) on another stream
    b.kernel(5, 20, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", stream=13)  # comm [5, 25)
    b.memcpy(40, 10)                                 # memory [40, 50)
    b.gpu_sync(55, 100)                              # sync events are not activity
    b.kernel(1000, 5, device=1)                      # another device
    row = whole(breakdown(b.build()))
    assert row["window_ns"] == 50
    assert row["busy_ns"] == 40
    assert row["idle_ns"] == 10
    assert row["compute_ns"] == 20
    assert row["communication_ns"] == 20
    assert row["memory_ns"] == 10
    assert row["overlap_ns"] == 10
    assert row["overlap_pct"] == pytest.approx(50.0)
    assert row["exposed_comm_ns"] == 10
    assert row["utilization"] == pytest.approx(0.8)
    other = whole(breakdown(b.build()), device=1)
    assert other["window_ns"] == 5 and other["busy_ns"] == 5


@pytest.mark.parametrize(
    "name,collective,is_comm",
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float", None, True),
        ("ncclDevKernel_SendRecv", None, True),
        ("NCCLsomething", None, True),
        ("rcclGenericKernel", None, True),
        ("void at::native::vectorized_elementwise_kernel", None, False),
        ("custom_allreduce", "allreduce", True),  # collective args make it communication
    ],
)
def test_communication_classifier(name, collective, is_comm):
    b = TraceBuilder()
    b.kernel(0, 10, name=name, collective=collective)
    row = whole(breakdown(b.build()))
    assert row["communication_ns"] == (10 if is_comm else 0)
    assert row["compute_ns"] == (0 if is_comm else 10)


def test_no_communication_gives_no_overlap_percentage():
    b = TraceBuilder()
    b.kernel(0, 10)
    row = whole(breakdown(b.build()))
    assert pd.isna(row["overlap_pct"]) and row["exposed_comm_ns"] == 0


def test_steps_assigned_by_launch_call_then_by_activity_start():
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.step(2, 100, 200)
    # launched in step 1 (call at 90), runs during step 2's CPU range: belongs to step 1
    b.launched("cudaLaunchKernel", 90, 5, 150, 30)
    # launched in step 2
    b.launched("cudaLaunchKernel", 110, 5, 190, 20)
    # no launch link: falls back to the step containing its start
    b.kernel(120, 10)
    table = breakdown(b.build())
    s1 = table[table["step"] == 1].iloc[0]
    s2 = table[table["step"] == 2].iloc[0]
    assert (s1["first_start_ns"], s1["last_end_ns"], s1["busy_ns"]) == (150, 180, 30)
    assert (s2["first_start_ns"], s2["last_end_ns"], s2["busy_ns"], s2["idle_ns"]) == (120, 210, 30, 60)
    w = whole(table)
    assert (w["window_ns"], w["busy_ns"]) == (90, 60)


def test_step_marker_option_selects_nvtx_like_ranges():
    b = TraceBuilder()
    b.add(Kind.ANNOTATION, "iter 7", 0, 100, tid=1, pid=100)
    b.add(Kind.ANNOTATION, "iter 8", 100, 100, tid=1, pid=100)
    b.launched("cudaLaunchKernel", 10, 5, 20, 30)
    b.launched("cudaLaunchKernel", 110, 5, 120, 50)
    assert breakdown(b.build())["step"].notna().sum() == 0  # the default marker does not match
    table = breakdown(b.build(), Options(step_marker=r"^iter \d+$"))
    steps = table[table["step"].notna()]
    assert steps["step"].tolist() == [7, 8] and steps["busy_ns"].tolist() == [30, 50]


def test_communication_alone_is_not_reported_as_exposed():
    b = TraceBuilder()
    b.kernel(0, 100, name="ncclDevKernel_AllReduce", stream=13)
    result = temporal.analyze(context(b.build(), Options()))
    assert whole(result.tables["breakdown"])["exposed_comm_ns"] == 100
    assert result.findings == []


def test_options_select_ranks():
    a = TraceBuilder(rank=0)
    a.kernel(0, 10)
    c = TraceBuilder(rank=1)
    c.kernel(0, 20)
    trace = concat_traces([a.build(), c.build()])
    table = breakdown(trace, Options(ranks=(1,)))
    assert table["rank"].unique().tolist() == [1]
    assert whole(table, rank=1, device=0)["busy_ns"] == 20


def test_healthy_trace_has_no_findings():
    b = TraceBuilder()
    t = 0
    for i in range(50):
        b.kernel(t, 1000)
        t += 1000 + 20  # 98% busy
    b.kernel(100, 500, name="ncclDevKernel_AllReduce", stream=13)  # fully overlapped with compute
    result = temporal.analyze(context(b.build(), Options()))
    assert result.findings == []


def test_low_utilization_and_exposed_communication_findings():
    b = TraceBuilder()
    b.step(1, 0, 10_000)
    b.step(2, 10_000, 20_000)
    for base in (0, 10_000):
        b.launched("cudaLaunchKernel", base, 10, base + 100, 1000)
        b.launched("cudaLaunchKernel", base + 50, 10, base + 5000, 2000, name="ncclDevKernel_AllReduce", stream=13)
    result = temporal.analyze(context(b.build(), Options()))
    codes = {f.code: f for f in result.findings}
    assert set(codes) == {"low_utilization", "exposed_communication"}
    w = whole(result.tables["breakdown"])
    assert codes["low_utilization"].cost_ns_per_step == w["idle_ns"] // 2
    assert codes["exposed_communication"].cost_ns_per_step == 2000
    assert codes["low_utilization"].severity == "high"


def test_empty_trace_is_quiet():
    b = TraceBuilder()
    b.runtime("cudaMalloc", 0, 10)
    result = temporal.analyze(context(b.build(), Options()))
    assert result.findings == [] and result.tables["breakdown"].empty and warning_messages(result)


# ----------------------------------------------------------------------------- properties

gpu_events = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 500), st.integers(0, 80), st.integers(0, 2)), min_size=1, max_size=40
)


@settings(max_examples=150, deadline=None)
@given(gpu_events)
def test_breakdown_invariants(events):
    b = TraceBuilder()
    for cls, start, dur, stream in events:
        if cls == 0:
            b.kernel(start, dur, stream=stream)
        elif cls == 1:
            b.kernel(start, dur, name="ncclKernel_x", stream=10 + stream)
        elif cls == 2:
            b.memcpy(start, dur, stream=stream)
        else:
            b.memset(start, dur, stream=stream)
    row = whole(breakdown(b.build()))
    assert 0 <= row["busy_ns"] <= row["window_ns"]
    assert row["idle_ns"] == row["window_ns"] - row["busy_ns"]
    assert max(row["compute_ns"], row["communication_ns"], row["memory_ns"]) <= row["busy_ns"]
    assert row["busy_ns"] <= row["compute_ns"] + row["communication_ns"] + row["memory_ns"]
    assert 0 <= row["overlap_ns"] <= min(row["communication_ns"], row["compute_ns"])
    assert row["exposed_comm_ns"] == row["communication_ns"] - row["overlap_ns"]


# ----------------------------------------------------------------------------- sample traces


def test_synthetic_nsys_busy_and_span_match_truth():
    path = SAMPLES / "synthetic_nsys.sqlite"
    truth_path = SAMPLES / "synthetic_nsys.truth.json"
    if not (path.exists() and truth_path.exists()):
        pytest.skip("sample_traces/synthetic_nsys.sqlite or its truth file is absent")
    truth = json.loads(truth_path.read_text())
    table = breakdown(traceview.load(path, use_cache=False))
    for rank, t in truth["ranks"].items():
        row = whole(table, rank=int(rank), device=t["device"])
        assert row["busy_ns"] == t["gpu_busy_ns"]
        assert row["window_ns"] == t["gpu_span_ns"]
        assert row["idle_ns"] == sum(t["gpu_idle_gaps_ns"])
    assert table["step"].notna().sum() == sum(t["steps"] for t in truth["ranks"].values())


TEMPORAL_FIGURES = ("window_ns", "busy_ns", "idle_ns", "compute_ns", "communication_ns", "memory_ns",
                    "overlap_ns", "exposed_comm_ns", "first_start_ns", "last_end_ns")


def test_synthetic_4rank_temporal_matches_truth():
    trace, truth = synthetic_4rank()
    table = breakdown(trace)
    scopes = list(truth_scopes(truth))
    assert len(table) == len(scopes)
    for rank, device, step, expected in scopes:
        rows = table[(table["rank"] == rank) & (table["device"] == device)]
        rows = rows[rows["step"].isna()] if step is None else rows[rows["step"] == step]
        assert len(rows) == 1, (rank, device, step)
        for column in TEMPORAL_FIGURES:
            assert int(rows[column].iloc[0]) == expected[column], (rank, step, column)
        assert rows["overlap_pct"].iloc[0] == pytest.approx(expected["overlap_pct"], abs=1e-6)


def test_run_all_includes_temporal():
    b = TraceBuilder()
    b.kernel(0, 10)
    results = run_all(b.build(), Options(), only=["temporal", "idle_gaps", "launch_overhead"])
    assert set(results) == {"temporal", "idle_gaps", "launch_overhead"}
