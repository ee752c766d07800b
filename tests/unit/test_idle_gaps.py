"""Idle gaps: causes, CPU contexts, totals; known answers and properties.

Definitions under test (docs/metrics.md):

- "gaps = the intervals of the window not covered by the union of activity (device-wide, not per stream)."
- host-bound: the launch call of the activity that ends the gap started after the GPU went idle;
  sync-bound: a synchronize call or blocking copy on the CPU spans the gap; launch latency: launched
  before the gap started, started late; unattributed: no launch link. Totals per cause add up to idle.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import given, settings
from conftest import context
from hypothesis import strategies as st
from builders import TraceBuilder, synthetic_4rank, truth_scopes
from conftest import SAMPLE_TRACES as SAMPLES
from traceview.analyses import idle_gaps, temporal

import traceview
from traceview.findings import Options
from traceview.model import Kind


def tables(trace, options=None):
    return idle_gaps.compute(context(trace, options or Options()))


def test_gaps_are_device_wide_not_per_stream():
    b = TraceBuilder()
    b.kernel(0, 10, stream=7)
    b.kernel(5, 20, stream=8)   # covers stream 7's idle time
    b.kernel(40, 10, stream=7)
    gaps = tables(b.build())["gaps"]
    assert gaps[["start_ns", "end_ns", "dur_ns"]].values.tolist() == [[25, 40, 15]]


def test_host_bound_gap_with_dataloader_context():
    b = TraceBuilder()
    b.step(1, 0, 10_000)
    b.launched("cudaLaunchKernel", 100, 10, 200, 1000)                  # GPU busy [200, 1200)
    dl = b.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1100, 5000)
    b.op("torch/utils/data/dataloader.py(628): __next__", 1150, 4900, kind=Kind.PYTHON_FUNCTION)
    b.op("aten::stack", 1300, 200)                                       # inside, does not span the gap
    b.launched("cudaMemcpyAsync", 5900, 10, 6000, 100, kind=Kind.MEMCPY)  # launched inside the data loader
    gaps = tables(b.build())["gaps"]
    assert len(gaps) == 1
    g = gaps.iloc[0]
    assert (g["start_ns"], g["end_ns"], g["cause"]) == (1200, 6000, "host_bound")
    # innermost range on the launching thread spanning the whole gap
    assert g["cpu_context"] == "torch/utils/data/dataloader.py(628): __next__"
    assert not g["context_at_gap_start"]
    assert dl >= 0


def test_host_bound_context_falls_back_to_the_range_running_at_gap_start():
    """The data loader returns, then the next launch: nothing but the step spans the gap."""
    b = TraceBuilder()
    b.step(1, 0, 10_000)
    b.launched("cudaLaunchKernel", 100, 10, 200, 1000)       # GPU busy [200, 1200)
    b.op("DataLoader.__next__", 1100, 4000)                   # [1100, 5100): contains the gap start only
    b.launched("cudaLaunchKernel", 5200, 10, 5300, 100)
    g = tables(b.build())["gaps"].iloc[0]
    assert (g["cause"], g["cpu_context"], g["context_at_gap_start"]) == ("host_bound", "DataLoader.__next__", True)


def test_host_bound_gap_inside_item():
    """A host sync via .item(): the next kernel is launched from inside aten::item after the GPU idled."""
    b = TraceBuilder()
    b.launched("cudaLaunchKernel", 0, 10, 100, 500)  # GPU [100, 600)
    item = b.op("aten::item", 50, 2000)
    b.op("aten::_local_scalar_dense", 60, 1000)
    b.launched("cudaLaunchKernel", 1800, 10, 1900, 100)
    g = tables(b.build())["gaps"].iloc[0]
    assert g["cause"] == "host_bound" and g["cpu_context"] == "aten::item"
    assert item >= 0


def test_sync_bound_gap():
    """The host blocks in cudaStreamSynchronize across the whole gap; the next copy was queued before it."""
    b = TraceBuilder()
    b.launched("cudaLaunchKernel", 0, 10, 100, 500)                       # GPU [100, 600)
    b.launched("cudaMemcpyAsync", 20, 10, 900, 50, kind=Kind.MEMCPY)     # queued early, starts late
    b.runtime("cudaStreamSynchronize", 40, 2000)                          # spans [600, 900)
    g = tables(b.build())["gaps"].iloc[0]
    assert (g["start_ns"], g["end_ns"], g["cause"], g["cpu_context"]) == (600, 900, "sync_bound", "cudaStreamSynchronize")


def test_blocking_copy_is_sync_bound():
    b = TraceBuilder()
    b.launched("cudaLaunchKernel", 0, 10, 100, 500)
    b.launched("cudaMemcpy", 300, 1000, 800, 100, kind=Kind.MEMCPY)  # blocking copy spans [600, 800)
    g = tables(b.build())["gaps"].iloc[0]
    assert g["cause"] == "sync_bound" and g["cpu_context"] == "cudaMemcpy"


def test_launch_latency_and_unattributed():
    b = TraceBuilder()
    b.launched("cudaLaunchKernel", 0, 10, 100, 500)    # [100, 600)
    b.launched("cudaLaunchKernel", 20, 10, 700, 100)   # launched long before, starts late -> latency
    b.kernel(900, 100)                                  # no launch link -> unattributed
    gaps = tables(b.build())["gaps"]
    assert gaps["cause"].astype(str).tolist() == ["launch_latency", "unattributed"]
    assert gaps["cpu_context"].tolist() == ["cudaLaunchKernel", ""]


def test_causes_sum_to_idle_per_scope_and_match_temporal():
    b = TraceBuilder()
    b.step(1, 0, 5000)
    b.step(2, 5000, 10_000)
    b.launched("cudaLaunchKernel", 10, 10, 100, 500)
    b.launched("cudaLaunchKernel", 20, 10, 700, 100)
    b.launched("cudaLaunchKernel", 5100, 10, 5200, 100)
    b.launched("cudaLaunchKernel", 6000, 10, 6100, 100)
    b.kernel(6400, 10)
    trace = b.build()
    by_cause = tables(trace)["by_cause"]
    bd = temporal.analyze(context(trace, Options())).tables["breakdown"]
    assert len(bd) == 3  # whole trace and two steps
    for i in range(len(bd)):
        rank, device, step = int(bd["rank"].iloc[i]), int(bd["device"].iloc[i]), bd["step"].iloc[i]
        sel = (by_cause["rank"] == rank) & (by_cause["device"] == device)
        sel &= by_cause["step"].isna() if pd.isna(step) else by_cause["step"] == step
        assert int(by_cause.loc[sel, "idle_ns"].sum()) == int(bd["idle_ns"].iloc[i])


def test_histogram_largest_and_min_gap():
    b = TraceBuilder()
    t = 0
    for gap in (5_000, 50_000, 500_000, 5_000_000, 50_000_000):
        b.kernel(t, 100)
        t += 100 + gap
    b.kernel(t, 100)
    tb = tables(b.build(), Options(top_n=2, min_gap_ns=10_000))
    assert tb["histogram"]["gaps"].tolist() == [1, 1, 1, 1, 1]
    assert tb["histogram"]["idle_ns"].sum() == 55_555_000
    assert tb["largest"]["dur_ns"].tolist() == [50_000_000, 5_000_000]
    tb = tables(b.build(), Options(top_n=10, min_gap_ns=1_000_000))
    assert tb["largest"]["dur_ns"].tolist() == [50_000_000, 5_000_000]


def test_findings_host_bound_with_contexts_and_costs():
    b = TraceBuilder()
    for step, base in ((1, 0), (2, 100_000)):
        b.step(step, base, base + 100_000)
        b.launched("cudaLaunchKernel", base + 10, 10, base + 100, 10_000)
        b.op("DataLoader.__next__", base + 50, 60_000)
        b.launched("cudaLaunchKernel", base + 60_010, 10, base + 60_100, 10_000)
    result = idle_gaps.analyze(context(b.build(), Options()))
    codes = [f.code for f in result.findings]
    assert codes == ["host_bound_gaps"]
    f = result.findings[0]
    assert f.evidence["top_cpu_contexts"][0]["cpu_context"] == "DataLoader.__next__"
    total_host = int(result.tables["by_cause"].query("cause == 'host_bound'")["idle_ns"][result.tables["by_cause"]["step"].isna()].sum())
    assert f.cost_ns_per_step == total_host // 2


def test_healthy_trace_has_no_alarming_findings():
    b = TraceBuilder()
    t = 0
    for i in range(100):
        b.launched("cudaLaunchKernel", t - 500 if t >= 500 else 0, 10, t, 1000)
        t += 1010
    result = idle_gaps.analyze(context(b.build(), Options()))
    assert all(f.severity in ("low", "info") for f in result.findings)


# ----------------------------------------------------------------------------- properties

events = st.lists(
    st.tuples(
        st.integers(0, 2000),    # gpu start
        st.integers(0, 300),     # gpu dur
        st.integers(0, 2500),    # api start
        st.integers(0, 200),     # api dur
        st.integers(0, 3),       # 0 linked kernel, 1 unlinked kernel, 2 linked memcpy, 3 other stream
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(events, st.lists(st.tuples(st.integers(0, 2500), st.integers(0, 800)), max_size=4), st.booleans())
def test_gap_causes_sum_exactly_to_idle(evs, syncs, with_steps):
    b = TraceBuilder()
    if with_steps:
        b.step(1, 0, 1000)
        b.step(2, 1000, 3000)
    for gs, gd, a_s, a_d, kind in evs:
        if kind == 1:
            b.kernel(gs, gd)
        elif kind == 2:
            b.launched("cudaMemcpyAsync", a_s, a_d, gs, gd, kind=Kind.MEMCPY)
        else:
            b.launched("cudaLaunchKernel", a_s, a_d, gs, gd, stream=7 if kind == 0 else 9)
    for s, d in syncs:
        b.runtime("cudaDeviceSynchronize", s, d)
    trace = b.build()
    tb = tables(trace)
    bd = temporal.analyze(context(trace, Options())).tables["breakdown"]
    gaps = tb["gaps"]
    by_cause = tb["by_cause"]
    whole = bd[bd["step"].isna()]
    for _, row in whole.iterrows():
        mine = gaps[(gaps["rank"] == row["rank"]) & (gaps["device"] == row["device"])]
        assert int(mine["dur_ns"].sum()) == int(row["idle_ns"])
        sel = by_cause["step"].isna() & (by_cause["device"] == row["device"])
        assert int(by_cause.loc[sel, "idle_ns"].sum()) == int(row["idle_ns"])
        assert (mine["dur_ns"] > 0).all()
        assert (mine["end_ns"] <= row["last_end_ns"]).all() and (mine["start_ns"] >= row["first_start_ns"]).all()
    steps = bd[bd["step"].notna()]
    for _, row in steps.iterrows():
        sel = (by_cause["step"] == row["step"]) & (by_cause["device"] == row["device"])
        assert int(by_cause.loc[sel, "idle_ns"].sum()) == int(row["idle_ns"])
    # every host-bound gap's launch call started at or after the gap start
    host = gaps[gaps["cause"] == "host_bound"]
    start = trace.column("start_ns")
    assert (start[host["api_row"].to_numpy()] >= host["start_ns"].to_numpy()).all()


# ----------------------------------------------------------------------------- sample traces


def test_synthetic_4rank_gaps_causes_and_contexts_match_truth():
    trace, truth = synthetic_4rank()
    tb = tables(trace)
    checked = 0
    for rank, device, step, expected in truth_scopes(truth):
        frame = tb["gaps"] if step is None else tb["step_gaps"]
        mine = frame[(frame["rank"] == rank) & (frame["device"] == device)]
        if step is not None:
            mine = mine[mine["step"] == step]
        got = [[int(s), int(e), str(c)] for s, e, c in zip(mine["start_ns"], mine["end_ns"], mine["cause"])]
        assert got == expected["gaps"], (rank, step)
        by_cause = tb["by_cause"]
        sel = (by_cause["rank"] == rank) & (by_cause["device"] == device)
        sel &= by_cause["step"].isna() if step is None else by_cause["step"] == step
        totals = {c: int(v) for c, v in zip(by_cause.loc[sel, "cause"], by_cause.loc[sel, "idle_ns"]) if v}
        assert totals == expected["idle_by_cause_ns"], (rank, step)
        if step is None:
            for (_, g), detail in zip(mine.iterrows(), expected["gap_details"]):
                want = detail["cpu_context"]["name"] if detail["cpu_context"] else ""
                have = g["cpu_context"] if g["cause"] in ("host_bound", "sync_bound") else ""
                assert have == want, (rank, detail)
                checked += 1
    assert checked > 0


def test_synthetic_nsys_gaps_match_truth():
    path = SAMPLES / "synthetic_nsys.sqlite"
    truth_path = SAMPLES / "synthetic_nsys.truth.json"
    if not (path.exists() and truth_path.exists()):
        pytest.skip("sample_traces/synthetic_nsys.sqlite or its truth file is absent")
    truth = json.loads(truth_path.read_text())
    gaps = tables(traceview.load(path, use_cache=False))["gaps"]
    for rank, t in truth["ranks"].items():
        mine = gaps[(gaps["rank"] == int(rank)) & (gaps["device"] == t["device"])]
        assert mine["dur_ns"].tolist() == t["gpu_idle_gaps_ns"]
        # the planted between-step host stalls are host-bound
        stalls = mine[mine["dur_ns"] >= truth["step_gap_ns"]]
        assert len(stalls) == t["steps"] and (stalls["cause"] == "host_bound").all()
