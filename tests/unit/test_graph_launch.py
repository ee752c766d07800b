"""Graph-aware launch analysis and the launch-bound verdict (docs/metrics.md, "Launch overhead").

Under test:

- a graph launch (`cudaGraphLaunch`, `cuGraphLaunch`, `hipGraphLaunch`, ...) fanning out to many kernels
  is one replay with ONE launch delay (call end -> first kernel); its kernels are never short and never
  make a step launch-bound; the `graph_replays` / `graph_summary` tables and a note describe the replays;
- `launch_bound` claims only launch-scale host-bound gaps (ended by a kernel launched one by one, no
  longer than the documented bound) of launch-bound steps: not synchronous-memcpy traces, not a long
  gap in a scheduler;
- `many_tiny_kernels` claims idle time before tiny kernels (part of the idle) and gives no "CUDA graph"
  advice for work already replayed from graphs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import context, warning_messages
from conftest import require_shared
from builders import TraceBuilder
from traceview.analyses import idle_gaps, kernels, launch_overhead

import traceview
from traceview.findings import Options
from traceview.model import Kind

US = 1_000


def analyze(trace):
    return launch_overhead.analyze(context(trace, Options()))


def codes(result) -> set[str]:
    return {f.code for f in result.findings}


def graph_trace(api: str = "cudaGraphLaunch", replays: int = 3, per_replay: int = 50, kernel_ns: int = 3 * US,
                host_ns: int = 1_000 * US, host_op: str = "Scheduler.schedule_batch") -> tuple[TraceBuilder, dict]:
    """One replay per step: the host works ``host_ns`` in ``host_op``, then one ``api`` call (20 us)
    launches ``per_replay`` back-to-back kernels that start 5 us after the call returns."""
    b = TraceBuilder()
    expected: dict = {"call_start": [], "first_start": [], "last_end": []}
    t = 0
    for step in range(replays):
        call = t + host_ns
        b.step(step, t, call + 100 * US)
        b.op(host_op, t, host_ns + 25 * US)  # spans the launch call and the GPU's wait for it
        corr = 5_000 + step
        api_row = b.runtime(api, call, 20 * US, correlation=corr)
        start = call + 25 * US
        for i in range(per_replay):
            b.link(api_row, b.kernel(start + i * kernel_ns, kernel_ns, name=f"triton_poi_fused_{i}", correlation=corr))
        expected["call_start"].append(call)
        expected["first_start"].append(start)
        expected["last_end"].append(start + per_replay * kernel_ns)
        t = call + 30 * US
    return b, expected


# ----------------------------------------------------------------------------- recognising graph launches


@pytest.mark.parametrize("api", ["cudaGraphLaunch", "cudaGraphLaunch_v10000", "cudaGraphLaunch_ptsz",
                                 "cuGraphLaunch", "hipGraphLaunch", "hipGraphLaunch_spt"])
def test_graph_launch_apis_are_recognised(api):
    assert launch_overhead.GRAPH_LAUNCH_API.search(api)
    assert not launch_overhead.KERNEL_LAUNCH_API.search(api)


@pytest.mark.parametrize("api", ["cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                                 "cudaLaunchCooperativeKernel", "hipLaunchKernel", "hipModuleLaunchKernel",
                                 "hipExtModuleLaunchKernel"])
def test_kernel_launch_apis_are_recognised(api):
    assert launch_overhead.KERNEL_LAUNCH_API.search(api)
    assert not launch_overhead.GRAPH_LAUNCH_API.search(api)


@pytest.mark.parametrize("api", ["cudaGraphInstantiate", "cudaMemcpyAsync", "hipMemsetAsync", "cudaLaunchHostFunc"])
def test_other_apis_are_neither(api):
    assert not launch_overhead.GRAPH_LAUNCH_API.search(api)
    assert not launch_overhead.KERNEL_LAUNCH_API.search(api)


# ----------------------------------------------------------------------------- one replay, one delay


@pytest.mark.parametrize("api", ["cudaGraphLaunch", "hipGraphLaunch"])
def test_graph_replay_has_one_delay_and_no_short_kernels(api):
    b, exp = graph_trace(api)
    result = analyze(b.build())
    launches = result.tables["launches"].sort_values("gpu_start_ns")
    assert len(launches) == 150 and launches["graph_replay"].all()
    delays = launches["launch_delay_ns"].dropna()
    assert delays.tolist() == [5 * US] * 3  # one per replay: call end -> first kernel
    assert not launches["short"].any()  # 3 us kernels vs a 20 us call, but one call launched them all
    steps = result.tables["steps"]
    assert (steps["kernels"] == 0).all() and not steps["launch_bound"].any()
    assert steps.loc[steps["step"].isna(), "graph_kernels"].tolist() == [150]
    assert "launch_bound" not in codes(result)
    by_api = result.tables["by_api"].iloc[0]
    assert (by_api["api"], by_api["launches"], by_api["gpu_activities"], by_api["short_kernels"]) == (api, 3, 150, 0)
    assert by_api["launch_delay_median_ns"] == 5 * US


def test_graph_replays_table_and_summary():
    b, exp = graph_trace("hipGraphLaunch")
    result = analyze(b.build())
    replays = result.tables["graph_replays"].sort_values("api_start_ns")
    assert replays["api_start_ns"].tolist() == exp["call_start"]
    assert replays["first_start_ns"].tolist() == exp["first_start"]
    assert replays["last_end_ns"].tolist() == exp["last_end"]
    assert (replays["kernels"] == 50).all()
    assert (replays["gpu_span_ns"] == replays["gpu_busy_ns"]).all() and (replays["gpu_span_ns"] == 150 * US).all()
    assert (replays["launch_delay_ns"] == 5 * US).all()
    gaps = np.diff(exp["call_start"]) - 20 * US  # previous call's end -> this call's start
    assert replays["host_gap_ns"].tolist() == [pd.NA, *gaps.tolist()]
    [row] = result.tables["graph_summary"].itertuples(index=False)
    assert (row.replays, row.kernels, row.median_kernels_per_replay) == (3, 150, 50.0)
    assert row.graph_busy_ns == row.gpu_busy_ns == 3 * 150 * US and row.graph_busy_share == 1.0
    assert row.median_host_gap_ns == int(np.median(gaps))
    assert any("3 graph replays (hipGraphLaunch)" in w for w in warning_messages(result))


def test_no_graph_no_graph_tables_rows():
    b = TraceBuilder()
    b.launched("cudaLaunchKernel", 0, 5 * US, 10 * US, 50 * US)
    result = analyze(b.build())
    assert result.tables["graph_replays"].empty and result.tables["graph_summary"].empty
    assert not any("graph replays" in w for w in warning_messages(result))


def test_graph_kernels_are_never_tiny_kernel_graph_advice():
    # 150 tiny graph-replayed kernels per step, the host in the scheduler between replays
    b, exp = graph_trace("cudaGraphLaunch", replays=4, per_replay=150)
    trace = b.build()
    result = kernels.analyze(context(trace, Options()))
    [f] = [f for f in result.findings if f.code == "many_tiny_kernels"]
    assert "CUDA graph (torch.compile" not in f.recommendation and "capture" not in f.recommendation
    assert "already replayed" in f.recommendation and "Scheduler.schedule_batch" in f.recommendation
    assert f.evidence["graph_replayed_share"] == 1.0
    tiny = result.tables["tiny_kernels"]
    assert tiny.loc[tiny["step"].isna(), "tiny_graph_kernels"].tolist() == [600]
    # claims: none. The idle before a replay is the host's (one launch per replay, claimed by the
    # host-bound gaps), not the launch cost of tiny kernels
    assert f.claims is not None and f.claims.total_ns() == 0
    assert len(exp["first_start"]) == 4


def test_tiny_kernel_claims_are_idle_time():
    # eager tiny kernels on two streams: the claims lie inside device-wide idle gaps, each <= the cap
    b = TraceBuilder()
    b.step(0, 0, 10_000 * US)
    t = 0
    for i in range(300):
        b.launched("cudaLaunchKernel", t, 5 * US, t + 6 * US, 2 * US, stream=7 + i % 2,
                   name="vectorized_elementwise_kernel")
        t += 4 * US + (30 * US if i % 3 == 0 else 0)
    trace = b.build()
    [f] = [f for f in kernels.analyze(context(trace, Options())).findings if f.code == "many_tiny_kernels"]
    gaps = idle_gaps.compute(context(trace, Options()))["gaps"]
    s, e = f.claims.start_ns, f.claims.end_ns
    assert len(f.claims) and ((e - s) <= kernels.TINY_GAP_CAP_NS).all()
    pos = np.searchsorted(gaps["start_ns"].to_numpy(), s, side="right") - 1
    assert (gaps["end_ns"].to_numpy()[pos] >= e).all()  # each claim within one idle gap
    assert f.claims.total_ns() == f.cost_ns_per_step  # one step


# ----------------------------------------------------------------------------- launch_bound: what it claims


def eager_steps(steps: int = 2, per_step: int = 200, loader_ns: int = 0,
                marked: bool = True) -> tuple[TraceBuilder, list[tuple]]:
    """Eager tiny kernels (2 us, launched by 6 us calls, 10 us of host work in between) and, per step,
    an optional data-loading gap first; ``marked``: with ProfilerStep ranges. Returns the builder and
    the expected launch-scale gaps."""
    b = TraceBuilder()
    t, prev_end, expected = 0, None, []
    for step in range(steps):
        if marked:
            b.step(step, t, t + loader_ns + per_step * 16 * US + 10 * US)
        if loader_ns:
            b.op("DataLoader.__next__", t, loader_ns, kind=Kind.PYTHON_FUNCTION)
            t += loader_ns
        for _ in range(per_step):
            op = b.op("aten::mul", t, 6_500)
            b.launched("cudaLaunchKernel", t, 6 * US, t + 6_200, 2 * US, op=op)
            if prev_end is not None and t + 6_200 - prev_end <= launch_overhead.LAUNCH_SCALE_FLOOR_NS:
                expected.append((prev_end, t + 6_200))
            prev_end = t + 6_200 + 2 * US
            t += 16 * US
        t += 10 * US
    return b, expected


def test_true_launch_bound_claims_the_launch_scale_gaps():
    b, expected = eager_steps(loader_ns=1_000 * US)
    result = analyze(b.build())
    [f] = result.findings
    assert f.code == "launch_bound" and f.part_of == "host_bound_gaps"
    assert list(zip(f.claims.start_ns.tolist(), f.claims.end_ns.tolist())) == expected
    steps = result.tables["steps"]
    per_step = steps[steps["step"].notna()]
    assert per_step["launch_bound"].all()
    # the data-loading gap (before step 1's first kernel) is host-bound but not launch-scale: not claimed
    assert per_step["host_bound_idle_ns"].iloc[1] - per_step["launch_scale_idle_ns"].iloc[1] >= 1_000 * US
    assert f.evidence["launch_scale_idle_ns"] == sum(e - s for s, e in expected)


@pytest.mark.parametrize("marked", [False, True])
def test_long_host_gap_in_a_scheduler_is_not_launch_overhead(marked):
    # eager tiny kernels, then the GPU waits 463 ms while the host is in the serving scheduler
    b, expected = eager_steps(steps=1, marked=marked)
    t = 10_000 * US
    b.op("Scheduler.event_loop", t, 463_000 * US, kind=Kind.PYTHON_FUNCTION)
    t += 463_000 * US
    for _ in range(10):
        b.launched("cudaLaunchKernel", t, 6 * US, t + 6_200, 2 * US)
        t += 16 * US
    result = analyze(b.build())
    whole = result.tables["steps"].query("step.isna()", engine="python").iloc[0]
    assert whole["launch_scale_idle_ns"] < 10_000 * US < whole["host_bound_idle_ns"]
    if not marked:  # the whole trace is judged: it waits on the scheduler, not on launches
        assert "launch_bound" not in codes(result)
    else:  # the step of eager tiny kernels is launch-bound; the scheduler's gap lies outside it, unclaimed
        [f] = result.findings
        assert list(zip(f.claims.start_ns.tolist(), f.claims.end_ns.tolist())) == expected


def test_sync_memcpy_trace_is_not_launch_bound():
    # 12 kernels and 300 synchronous cudaMemcpy copies with host work between them
    b = TraceBuilder()
    t = 0
    for i in range(300):
        b.launched("cudaMemcpy", t, 40 * US, t + 2 * US, 30 * US, kind=Kind.MEMCPY)
        if i % 25 == 0:
            b.launched("cudaLaunchKernel", t + 45 * US, 6 * US, t + 52 * US, 2 * US)
        t += 120 * US
    result = analyze(b.build())
    assert "launch_bound" not in codes(result)
    whole = result.tables["steps"].iloc[0]
    assert whole["kernels"] == 12 and not whole["launch_bound"]
    gaps = idle_gaps.compute(context(b.build(), Options()))["gaps"]
    # the GPU does wait on the host (a blocking copy drained the queue, or the host worked), but not on launches
    assert gaps["cause"].isin(["host_bound", "sync_bound"]).sum() > 100
    assert (gaps["cause"] == "sync_bound").sum() > 100  # each copy blocks the host as the GPU goes idle


def test_graph_replays_with_idle_gpu_are_not_launch_bound():
    b, _ = graph_trace("cudaGraphLaunch", replays=6, per_replay=200, host_ns=30 * US)
    result = analyze(b.build())
    assert "launch_bound" not in codes(result)
    assert result.tables["steps"]["launch_scale_gaps"].sum() == 0


# ----------------------------------------------------------------------------- a real graph-replay trace


def test_vllm_piecewise_cudagraph_trace():
    path = require_shared() / "kineto" / "tracelens_vllm_piecewise_cudagraph.json.gz"
    if not path.exists():
        pytest.skip(f"{path.name} is absent from the shared traces")
    trace = traceview.load(path)
    result = analyze(trace)
    launches = result.tables["launches"]
    graph = launches["graph_replay"]
    # graph replays, counted independently: distinct graph launch calls with a launch link
    names = np.asarray(trace.events.column("name").to_pylist(), dtype=object)
    api_rows, _ = trace.launch_links()
    replays = len({int(r) for r in api_rows if str(names[r]).startswith("hipGraphLaunch")})
    assert replays > 0 and len(result.tables["graph_replays"]) == replays
    assert launches["launch_delay_ns"].notna().sum() == (~graph).sum() + replays
    assert not launches.loc[graph, "short"].any()
    assert "launch_bound" not in codes(result)
    kinds = trace.kind_codes()[launches["gpu_row"].to_numpy()]
    summary = result.tables["graph_summary"].iloc[0]
    assert summary["kernels"] == int((graph.to_numpy() & (kinds == int(Kind.KERNEL))).sum())
    assert 0.5 < summary["graph_busy_share"] <= 1.0
