"""Launch overhead: launch delays over every launch link, issuing CPU ops, short kernels, verdicts.

Definition under test (docs/metrics.md): "launch delay = max(0, gpu start - (launch call start +
launch call duration)), for every launch API (CUDA runtime and driver, HIP `hip*`, async memcpy/memset);
a graph replay has one launch delay, from the graph launch call's end to the start of its first GPU
activity — its other activities have none." Graph replays and the graph-aware verdicts are tested in
tests/unit/test_graph_launch.py.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import context
from builders import TraceBuilder, synthetic_4rank
from conftest import METRICS_DOC, SAMPLE_TRACES as SAMPLES
from traceview.analyses import launch_overhead

import traceview
from traceview.findings import Options
from traceview.model import Kind


def launches(trace, options=None):
    return launch_overhead.compute(context(trace, options or Options()))["launches"]


def test_definition_is_in_the_docs():
    text = METRICS_DOC.read_text()
    assert (
        "launch delay = max(0, gpu start - (launch call start + launch call duration)), for every launch API "
        "(CUDA runtime and driver, HIP `hip*`, async memcpy/memset); a graph replay has one launch delay, from the "
        "graph launch call's end to the start of its first GPU activity — its other activities have none."
    ) in text


@pytest.mark.parametrize(
    "api", ["cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "hipLaunchKernel",
            "hipExtModuleLaunchKernel", "cudaMemcpyAsync", "hipMemsetAsync"]
)
def test_delay_for_any_launch_api(api):
    b = TraceBuilder()
    kind = Kind.MEMCPY if "Memcpy" in api else Kind.MEMSET if "Memset" in api else Kind.KERNEL
    b.launched(api, 1000, 300, 1700, 50, kind=kind)
    row = launches(b.build()).iloc[0]
    assert row["api"] == api
    assert (row["api_dur_ns"], row["launch_delay_ns"], row["gpu_dur_ns"]) == (300, 400, 50)


def test_negative_delay_is_zero():
    b = TraceBuilder()
    b.launched("cudaLaunchKernel", 1000, 300, 1100, 50)  # GPU starts before the call returns
    assert launches(b.build())["launch_delay_ns"].tolist() == [0]


def test_graph_launch_fans_out_with_one_delay():
    b = TraceBuilder()
    api = b.runtime("cudaGraphLaunch", 1000, 20, correlation=77)
    for i, start in enumerate((1300, 1100, 1200)):  # linked out of time order: the first is by start
        g = b.kernel(start, 5, name=f"graph_kernel_{i}", correlation=77)
        b.link(api, g)
    table = launches(b.build()).sort_values("gpu_start_ns")
    assert table["api"].tolist() == ["cudaGraphLaunch"] * 3
    assert table["launch_delay_ns"].tolist() == [80, pd.NA, pd.NA]  # one delay: call end -> first kernel
    assert table["short"].tolist() == [False, False, False]  # 5 ns kernels, yet one call launched them all
    assert table["graph_replay"].all()


def test_issuing_cpu_op_from_links_or_enclosing_op():
    b = TraceBuilder()
    outer = b.op("aten::linear", 0, 1000)
    inner = b.op("aten::addmm", 10, 500)
    b.launched("cudaLaunchKernel", 100, 10, 200, 100, op=inner)   # linked by external id
    b.op("aten::relu", 600, 100)
    b.launched("cudaLaunchKernel", 650, 10, 700, 100)             # no link: innermost op on the thread
    b.launched("cudaLaunchKernel", 5000, 10, 5100, 100)           # outside every op
    table = launches(b.build())
    assert table["cpu_op"].tolist() == ["aten::addmm", "aten::relu", ""]
    assert outer >= 0


def test_short_kernels_and_tiny_kernel_ops():
    b = TraceBuilder()
    t = 0
    for i in range(10):
        op = b.op("aten::add_", t, 100)
        b.launched("cudaLaunchKernel", t + 10, 30, t + 50, 5, op=op)      # 5 ns kernel, 30 ns call
        t += 200
    op = b.op("aten::mm", t, 100)
    b.launched("cudaLaunchKernel", t + 10, 30, t + 50, 5000, op=op)       # long kernel
    result = launch_overhead.compute(context(b.build(), Options()))
    assert result["launches"]["short"].sum() == 10
    tiny = result["tiny_kernel_ops"]
    assert tiny["cpu_op"].tolist() == ["aten::add_"] and tiny["short_kernels"].tolist() == [10]
    by_api = result["by_api"].iloc[0]
    assert (by_api["launches"], by_api["short_kernels"], by_api["launch_delay_median_ns"]) == (11, 10, 10)


def _many_tiny_kernels(steps: int = 2, per_step: int = 200, host_gap: int = 10_000) -> TraceBuilder:
    """Eager-mode pattern: each kernel lasts 2 us, its launch call takes 6 us, and Python/dispatcher
    work between launches takes 10 us, so each launch starts after the GPU went idle."""
    b = TraceBuilder()
    t = 0
    for step in range(steps):
        b.step(step, t, t + per_step * (6_000 + host_gap) + 10_000)
        for i in range(per_step):
            op = b.op("aten::mul", t, 6_500)
            b.launched("cudaLaunchKernel", t, 6_000, t + 6_200, 2_000, op=op)
            t += 6_000 + host_gap
        t += 10_000
    return b


def test_launch_bound_verdict_and_recommendation():
    result = launch_overhead.analyze(context(_many_tiny_kernels().build(), Options()))
    steps = result.tables["steps"]
    per_step = steps[steps["step"].notna()]
    assert per_step["launch_bound"].all()
    assert len(result.findings) == 1
    f = result.findings[0]
    assert f.code == "launch_bound" and f.severity == "high"
    assert "aten::mul" in f.recommendation and "CUDA graph" in f.recommendation
    # every host-bound gap here is launch-scale (14 us after 6 us launch calls)
    assert (per_step["launch_scale_idle_ns"] == per_step["host_bound_idle_ns"]).all()
    assert f.claims is not None and f.claims.total_ns() == per_step["launch_scale_idle_ns"].sum()
    assert f.cost_ns_per_step == per_step["launch_scale_idle_ns"].sum() // len(per_step)


def test_long_kernels_are_not_launch_bound():
    b = TraceBuilder()
    t = 0
    for i in range(100):
        b.launched("cudaLaunchKernel", t, 6_000, t + 8_000, 50_000)
        t += 58_000
    result = launch_overhead.analyze(context(b.build(), Options()))
    assert result.findings == []
    assert not result.tables["steps"]["launch_bound"].any()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 500), st.integers(0, 12_000), st.integers(0, 500)),
                min_size=1, max_size=30))
def test_delay_is_never_negative_and_matches_definition(items):
    b = TraceBuilder()
    for a_s, a_d, g_s, g_d in items:
        b.launched("cudaLaunchKernel", a_s, a_d, g_s, g_d)
    table = launches(b.build())
    assert len(table) == len(items)
    expected = sorted(max(0, g_s - (a_s + a_d)) for a_s, a_d, g_s, _ in items)
    assert sorted(table["launch_delay_ns"].tolist()) == expected
    assert (table["short"] == (table["gpu_dur_ns"] < table["api_dur_ns"])).all()


# ----------------------------------------------------------------------------- sample traces


def test_synthetic_nsys_launch_delays_match_truth():
    path = SAMPLES / "synthetic_nsys.sqlite"
    truth_path = SAMPLES / "synthetic_nsys.truth.json"
    if not (path.exists() and truth_path.exists()):
        pytest.skip("sample_traces/synthetic_nsys.sqlite or its truth file is absent")
    truth = json.loads(truth_path.read_text())["launch_delays_ns"]
    trace = traceview.load(path, use_cache=False)
    table = launches(trace)
    pid = trace.column("pid")[table["gpu_row"].to_numpy()]
    got = {f"{p}:{c}": int(d) for p, c, d in zip(pid, table["correlation"], table["launch_delay_ns"])}
    assert got == truth
    # runtime and driver launches both covered
    assert {"cudaLaunchKernel", "cuLaunchKernelEx"} <= set(table["api"])


def test_synthetic_4rank_launch_delays_match_truth():
    trace, truth = synthetic_4rank()
    table = launches(trace)
    for rank, t in truth["ranks"].items():
        mine = table[table["rank"] == int(rank)]
        got = {str(c): int(d) for c, d in zip(mine["correlation"], mine["launch_delay_ns"])}
        assert got == t["launch_delay_ns"], rank
