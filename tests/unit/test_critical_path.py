"""The critical path and its what-ifs (analyses/critical_path.py, docs/metrics.md "Critical path and
what-if"): hand-placed traces whose path is known, the longest-path passes (C and Python agree),
and on real traces: every window's path covers it exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from builders import TraceBuilder, synthetic_4rank
from conftest import context
from traceview.analyses import run_all
from traceview.analyses.dependency_graph import build_dependency_graph
from traceview.analyses.paths import IncomingEdges, relaxed_times, walk_back
from traceview.loading import load
from traceview.model import Kind

US = 1000
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
COMPOSITION = ["host_compute_ns", "host_untraced_ns", "launch_overhead_ns", "sync_ns", "gpu_compute_ns", "memory_ns",
               "communication_ns", "gpu_wait_ns", "waiting_on_rank_ns", "unlinked_ns"]


def critical_path(trace):
    return run_all(trace, only=["critical_path"])["critical_path"]


def gpu_bound_with_sync(api: str = "cuda") -> TraceBuilder:
    """Two 400 us kernels queued at once, then a device synchronize the host waits in."""
    b = TraceBuilder()
    b.step(1, 0, 850 * US)
    b.launched(f"{api}LaunchKernel", 10 * US, 5 * US, 20 * US, 400 * US)
    b.launched(f"{api}LaunchKernel", 20 * US, 5 * US, 420 * US, 400 * US)
    b.runtime(f"{api}DeviceSynchronize", 30 * US, 800 * US)
    return b


@pytest.mark.parametrize("api", ["cuda", "hip"])
def test_a_gpu_bound_step_runs_through_its_kernels_and_the_sync(api):
    result = critical_path(gpu_bound_with_sync(api).build())
    steps = result.tables["steps"]
    assert len(steps) == 1
    row = steps.iloc[0]
    assert row["path_ns"] == row["step_ns"] == 850 * US
    assert row["gpu_compute_ns"] == 800 * US
    assert row["launch_overhead_ns"] == 10 * US  # the first kernel's launch latency (10 -> 20 us)
    assert row["sync_ns"] == 10 * US  # the synchronize returns 10 us after the last kernel
    assert row["host_untraced_ns"] == 30 * US  # 0 -> 10 us and 830 -> 850 us, inside the step range only
    assert row["bound_by"] == "gpu"
    segments = result.tables["segments"]
    assert segments["dur_ns"].sum() == 850 * US
    assert (segments["start_ns"].to_numpy()[1:] == segments["end_ns"].to_numpy()[:-1]).all()  # contiguous
    # with no host overhead the kernels start at once and the host waits for them only: 800 us
    whatif = result.tables["whatif"].set_index(["scenario"])
    per_step = whatif[whatif["step"].notna()]
    assert per_step.loc["no_host_overhead", "whatif_ns"] == 800 * US
    assert per_step.loc["comm_overlapped", "saving_ns"] == 0


def test_a_host_bound_loop_is_bound_by_the_host():
    b = TraceBuilder()
    b.step(1, 0, 220 * US)
    for i in range(10):
        op = b.op("aten::add", i * 20 * US + 1 * US, 15 * US)
        b.launched("cudaLaunchKernel", i * 20 * US + 5 * US, 6 * US, i * 20 * US + 12 * US, 2 * US, op=op)
    result = critical_path(b.build())
    row = result.tables["steps"].iloc[0]
    assert row["bound_by"] == "host" and row["bound_share"] == pytest.approx(1.0)
    assert row["gpu_compute_ns"] == 0 and row["path_ns"] == 220 * US
    assert row["launch_overhead_ns"] == 10 * 6 * US
    codes = {f.code for f in result.findings}
    assert "whatif_no_host_overhead" in codes and "critical_path_bound" in codes


def test_a_stream_waiting_for_another_stream_is_inferred_from_the_wait_event_call():
    b = TraceBuilder()
    b.step(1, 0, 1200 * US)
    b.launched("cudaLaunchKernel", 5 * US, 4 * US, 15 * US, 100 * US, stream=7, name="short")
    b.launched("cudaLaunchKernel", 20 * US, 4 * US, 30 * US, 1000 * US, stream=9, name="slow_chain")
    b.runtime("cudaStreamWaitEvent", 40 * US, 3 * US)
    b.launched("cudaLaunchKernel", 50 * US, 4 * US, 1032 * US, 100 * US, stream=7, name="joined")
    b.runtime("cudaStreamSynchronize", 60 * US, 1080 * US)
    result = critical_path(b.build())
    segments = result.tables["segments"]
    on_path = set(segments["name"])
    assert {"slow_chain", "joined"} <= on_path and "short" not in on_path
    waits = segments[segments["category"] == "gpu_wait"]
    assert waits["dur_ns"].sum() == 2 * US  # slow_chain ends at 1030, joined starts at 1032
    edges = result.tables["edges"].set_index("edge")
    assert edges.loc["stream_wait", "count"] == 1 and edges.loc["stream_wait", "rule"] == "inferred"
    rules = result.tables["rules"].set_index("rule")["count"]
    assert rules.get("synchronising calls with no GPU work to wait for", 0) == 0
    assert any("cudaStreamWaitEvent" in w for _, w in result.rank_warnings)


def test_a_rank_without_steps_has_one_whole_trace_window():
    b = gpu_bound_with_sync()
    b.rows = [r for r in b.rows if r["kind"] != int(Kind.ANNOTATION)]
    b.links = [(t, s - 1, d - 1) for t, s, d in b.links]  # the step range was row 0
    steps = critical_path(b.build()).tables["steps"]
    assert len(steps) == 1 and pd.isna(steps.iloc[0]["step"])
    # the GPU window, as every whole-trace figure: the first kernel's start to the last one's end
    assert steps.iloc[0]["path_ns"] == steps.iloc[0]["step_ns"] == (820 - 20) * US
    assert steps.iloc[0]["gpu_compute_ns"] == 800 * US and steps.iloc[0]["bound_by"] == "gpu"


def random_dag(rng: np.random.Generator, nodes: int, edges: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    src = rng.integers(0, nodes - 1, size=edges)
    dst = src + 1 + rng.integers(0, np.maximum(nodes - 1 - src, 1))
    dst = np.minimum(dst, nodes - 1)
    keep = dst > src
    return src[keep], dst[keep], rng.integers(0, 100, size=int(keep.sum()))


def test_the_native_and_python_passes_agree():
    rng = np.random.default_rng(7)
    src, dst, lag = random_dag(rng, 400, 1500)
    anchors = rng.integers(0, 1000, size=400)
    native = IncomingEdges.of(400, src, dst)
    python = IncomingEdges.of(400, src, dst, use_native=False)
    assert native.cyclic == python.cyclic == 0
    times = relaxed_times(native, lag, anchors)
    assert (times == relaxed_times(python, lag, anchors, use_native=False)).all()
    # every edge holds: a node is at least its source's time + lag
    assert (times[dst] >= times[src] + lag).all()
    binding = np.full(400, -1)
    binding[dst] = src  # any predecessor chain will do for the walk
    ends, starts = np.array([399, 250]), np.array([0, 100])
    for a, b in zip(walk_back(binding, times, ends, starts), walk_back(binding, times, ends, starts, use_native=False)):
        assert (a == b).all()


def test_re_timing_the_graph_with_its_lags_gives_back_the_measured_times():
    trace, _ = synthetic_4rank()
    graph = build_dependency_graph(context(trace))
    assert (relaxed_times(graph.incoming, graph.lag, graph.times) == graph.times).all()
    assert (graph.lag >= 0).all()


def test_each_step_of_the_4rank_sample_is_covered_by_its_path():
    trace, _ = synthetic_4rank()
    result = critical_path(trace)
    steps = result.tables["steps"]
    assert len(steps) == 12
    assert (steps["path_ns"] == steps["step_ns"]).all()
    assert (steps[COMPOSITION].sum(axis=1) == steps["path_ns"]).all()
    # rank 3 is the late rank of the sample: the others wait for it at the all-reduce, it waits for none
    waiting = steps.groupby("rank")["waiting_on_rank_ns"].sum()
    assert waiting.loc[3] == 0 and (waiting.loc[[0, 1, 2]] > 0).all()
    whatif = result.tables["whatif"]
    assert (whatif["saving_ns"] >= 0).all() and (whatif["whatif_ns"] <= whatif["step_ns"]).all()
    assert set(whatif["scenario"]) == {"comm_overlapped", "no_host_overhead", "roofline", "median_rank", "achievable"}


SHARED_WITH_STEPS = ["kineto/hta_df_index_resolver_v100_rank1.json.gz", "kineto/hta_trace_diff_control_a100_rank3.json.gz",
                     "kineto/hta_nccl_parser_config_a100.json.gz", "kineto/tbplugin_resnet50_v100_2021.json.gz",
                     "kineto/tracelens_resnet_actckpt_mi300x_rank0.json.gz", "kineto/param_dlrm_8ranks_v100",
                     "kineto/tracelens_xdit_flux1_aiter_sage_profile_mi300x.json.gz", "kineto/hta_trace_filter_2ranks"]


@pytest.mark.parametrize("name", SHARED_WITH_STEPS)
def test_on_shared_traces_each_path_equals_its_step_and_its_composition_adds_up(name):
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared real traces are not on this machine)")
    trace = load(sorted(path.glob("*.json.gz")) if path.is_dir() else [path])
    steps = critical_path(trace).tables["steps"]
    assert len(steps) and steps["step"].notna().all()
    assert (steps["path_ns"] == steps["step_ns"]).all()
    assert (steps[COMPOSITION].sum(axis=1) == steps["path_ns"]).all()
    assert (steps["achievable_ns"] <= steps["step_ns"]).all()


def test_a_stream_synchronize_waits_for_the_stream_its_sync_record_names():
    b = TraceBuilder()
    b.step(1, 0, 120 * US)
    b.launched("cudaLaunchKernel", 2 * US, 3 * US, 10 * US, 90 * US, stream=7, name="on_stream_7")
    b.launched("cudaLaunchKernel", 6 * US, 3 * US, 20 * US, 83 * US, stream=9, name="on_stream_9")
    call = b.runtime("cudaStreamSynchronize", 30 * US, 75 * US)
    record = b.gpu_sync(104 * US, 1 * US, stream=7)  # Kineto's cuda_sync "Stream Sync" on stream 7
    b.launch(call, record)
    names = set(critical_path(b.build()).tables["segments"]["name"])
    assert "on_stream_7" in names and "on_stream_9" not in names


def test_the_main_thread_waiting_for_the_backward_thread_is_woken_by_it():
    b = TraceBuilder()
    b.step(1, 0, 1000 * US)
    fwd = b.op("forward", 10 * US, 190 * US)
    b.launched("cudaLaunchKernel", 20 * US, 5 * US, 30 * US, 50 * US, op=fwd)
    bwd = b.op("autograd::engine::evaluate_function", 205 * US, 675 * US, tid=2)
    b.launched("cudaLaunchKernel", 300 * US, 5 * US, 310 * US, 50 * US, tid=2, op=bwd)
    b.op("Optimizer.step", 890 * US, 100 * US)
    result = critical_path(b.build())
    row = result.tables["steps"].iloc[0]
    assert row["path_ns"] == 1000 * US
    # the 690 us the main thread spent in Python-less waiting are the backward thread's, not untraced
    assert row["host_untraced_ns"] == (10 + 5 + 10 + 10) * US  # step start, two wake-ups, step end
    assert "autograd::engine::evaluate_function" in set(result.tables["segments"]["name"])
    edges = result.tables["edges"].set_index("edge")
    assert edges.loc["wake", "count"] == 2 and edges.loc["wake", "rule"] == "inferred"


def test_each_what_ifs_claims_are_the_path_it_shortens_cut_to_its_saving():
    trace, _ = synthetic_4rank()
    ctx = context(trace)
    import traceview.analyses  # noqa: F401  (declares the inputs)
    parts = ctx.input("critical_path.result").parts
    claims = parts.claims.assign(dur=lambda f: f["end_ns"] - f["start_ns"])
    for scenario in ("comm_overlapped", "no_host_overhead", "roofline"):
        saving = parts.whatif[parts.whatif["scenario"] == scenario].groupby(["rank", "step"])["saving_ns"].sum()
        claimed = claims[claims["scenario"] == scenario].groupby(["rank", "step"])["dur"].sum()
        assert saving.sum() > 0
        assert (claimed.reindex(saving.index, fill_value=0) == saving).all(), scenario
