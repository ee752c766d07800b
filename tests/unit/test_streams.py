"""Streams analysis: known answers on hand-made traces, cross-checks on real traces.

Definitions under test (docs/metrics.md, "Streams"; analyses/streams.py):

- busy = |union of the stream's activity|; window_share = busy / the device's GPU window.
- mean_active_streams = stream_busy_ns / busy_ns; max_active_streams = most streams busy at one
  instant; concurrent_ns = time two or more streams are busy (half-open intervals).
- communication_on_compute_stream: a stream runs communication and compute kernels; cost =
  |U(comm on the stream) - U(compute on the device)|, reported from 5% of the device window.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import traceview
from traceview import intervals as iv
from traceview.analyses import run_all, specs, streams, temporal
from traceview.analyses import classify
from traceview.analyses.steps import activity
from traceview.findings import Options
from traceview.model import Kind, Trace
from traceview.pipeline import analyze as pipeline_analyze

from conftest import context
from conftest import SAMPLE_TRACES, require_shared
from builders import TraceBuilder
from conftest import METRICS_DOC

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


def tables(trace: Trace) -> tuple[pd.DataFrame, pd.DataFrame]:
    result = streams.analyze(context(trace, Options()))
    return result.tables["streams"], result.tables["devices"]


def stream_row(table: pd.DataFrame, stream: int, device: int = 0) -> pd.Series:
    rows = table[(table["device"] == device) & (table["stream"] == stream)]
    assert len(rows) == 1
    return rows.iloc[0]


def three_streams() -> Trace:
    """Device 0: stream 7 computes and also runs an all-reduce, stream 9 is a communication stream,
    stream 11 a side compute stream; device 1: one stream, compute only."""
    b = TraceBuilder()
    b.kernel(0, 10, name="gemm", stream=7)
    b.kernel(20, 10, name="gemm", stream=7)
    b.kernel(30, 5, name="relu", stream=7)
    b.memcpy(40, 5, stream=7)
    b.kernel(50, 20, name=NCCL, stream=7)               # communication on the compute stream
    b.kernel(5, 20, name="ncclDevKernel_SendRecv", stream=9)
    b.memset(60, 2, stream=9)
    b.kernel(8, 4, name="attn", stream=11)
    b.kernel(65, 3, name="attn2", stream=11)            # overlaps 3 ns of the stream-7 all-reduce
    b.gpu_sync(0, 100, stream=7)                        # sync events are not activity
    b.kernel(1000, 50, name="gemm", device=1, stream=7)
    b.kernel(1100, 50, name="gemm", device=1, stream=7)
    return b.build()


# ----------------------------------------------------------------------------- known answers


def test_per_stream_figures():
    per_stream, _ = tables(three_streams())
    keys = list(per_stream[["device", "stream"]].itertuples(index=False, name=None))
    assert keys == [(0, 7), (0, 9), (0, 11), (1, 7)]
    s7, s9, s11 = (stream_row(per_stream, s) for s in (7, 9, 11))
    assert (s7["kernels"], s7["memcpys"], s7["memsets"]) == (4, 1, 0)
    assert (s9["kernels"], s9["memcpys"], s9["memsets"]) == (1, 0, 1)
    # [0,10) + [20,35) + [40,45) + [50,70)
    assert (s7["busy_ns"], s7["compute_ns"], s7["communication_ns"], s7["memory_ns"]) == (50, 25, 20, 5)
    assert (s9["busy_ns"], s9["compute_ns"], s9["communication_ns"], s9["memory_ns"]) == (22, 0, 20, 2)
    assert (s11["busy_ns"], s11["compute_ns"]) == (7, 7)
    assert s7["window_share"] == pytest.approx(50 / 70)          # device window [0, 70)
    assert (s7["first_start_ns"], s7["last_end_ns"]) == (0, 70)
    # gemm (2 x 10) ties the all-reduce (20): the name that sorts first wins
    assert (s7["top_kernel"], s7["top_kernel_ns"]) == ("gemm", 20)
    assert (s9["top_kernel"], s9["top_kernel_ns"]) == ("ncclDevKernel_SendRecv", 20)
    assert (s11["top_kernel"], s11["top_kernel_ns"]) == ("attn", 4)
    d1 = stream_row(per_stream, 7, device=1)
    assert (d1["busy_ns"], d1["window_share"], d1["top_kernel_ns"]) == (100, pytest.approx(100 / 150), 100)


def test_per_device_concurrency():
    _, per_device = tables(three_streams())
    d0 = per_device[per_device["device"] == 0].iloc[0]
    d1 = per_device[per_device["device"] == 1].iloc[0]
    # device busy: [0,35) + [40,45) + [50,70) = 60; streams: 50 + 22 + 7 = 79
    assert (d0["streams"], d0["window_ns"], d0["busy_ns"], d0["stream_busy_ns"]) == (3, 70, 60, 79)
    assert d0["mean_active_streams"] == pytest.approx(79 / 60)
    # three streams busy in [8,10); two in [5,8), [10,12), [20,25), [60,62), [65,68)
    assert d0["max_active_streams"] == 3
    assert d0["concurrent_ns"] == 3 + 2 + 2 + 5 + 2 + 3
    assert (d1["streams"], d1["max_active_streams"], d1["concurrent_ns"], d1["mean_active_streams"]) == (1, 1, 0, 1.0)


def test_touching_streams_do_not_overlap():
    b = TraceBuilder()
    b.kernel(0, 10, stream=1)
    b.kernel(10, 10, stream=2)
    _, per_device = tables(b.build())
    row = per_device.iloc[0]
    assert (row["max_active_streams"], row["concurrent_ns"], row["busy_ns"], row["stream_busy_ns"]) == (1, 0, 20, 20)


def test_communication_on_compute_stream_finding():
    result = streams.analyze(context(three_streams(), Options()))
    assert [f.code for f in result.findings] == ["communication_on_compute_stream"]
    f = result.findings[0]
    # stream 7's all-reduce [50,70) minus compute anywhere on device 0 ([65,68) on stream 11)
    assert f.evidence["exposed_comm_ns"] == 17 and f.cost_ns_per_step == 17      # no steps: the whole cost
    assert f.cost_share == pytest.approx(17 / 70) and f.severity == "high"
    assert (f.rank, f.evidence["device"], f.evidence["stream"]) == (0, 0, 7)
    assert f.part_of == "exposed_communication"
    assert f.code in streams.SPEC.finding_codes


def test_communication_on_compute_stream_claims():
    """The claims are U(comm on the stream) - U(compute on the device): stream 7's all-reduce
    [50, 70) minus [65, 68) of stream 11."""
    (f,) = streams.analyze(context(three_streams(), Options())).findings
    assert f.claims is not None and f.claims.total_ns() == f.evidence["exposed_comm_ns"] == 17
    assert sorted(f.claims.largest(5)) == [(0, 0, 50, 65), (0, 0, 68, 70)]
    assert f.evidence["families"] == ["nccl"]


DEEPEP_COMBINE = "void deep_ep::intranode::combine<8, 768, 8192>(int4*, float*, int const*)"


def test_deepep_on_the_compute_stream_is_recognised():
    """DeepEP kernels are communication (analyses/comm_rules.py): on the compute stream they are
    exposed by construction, and said so; a user rule does the same for a kernel the table misses."""
    b = TraceBuilder()
    b.kernel(0, 100, name="gemm", stream=7)
    b.kernel(100, 100, name=DEEPEP_COMBINE, stream=7)
    b.kernel(150, 20, name="attn", stream=9)  # compute elsewhere on the device hides [150, 170)
    b.kernel(200, 100, name="my_exchange_kernel", stream=7)
    trace = b.build()
    (f,) = streams.analyze(context(trace, Options())).findings
    assert f.evidence["families"] == ["deepep"] and "(deepep)" in f.title
    assert f.claims is not None and f.claims.by_gpu() == {(0, 0): 80} and f.evidence["exposed_comm_ns"] == 80
    assert f.part_of == "exposed_communication"
    (g,) = streams.analyze(context(trace, Options(comm_patterns=("mylib=my_exchange",)))).findings
    assert g.evidence["families"] == ["deepep", "mylib"] and g.claims is not None
    assert g.claims.by_gpu() == {(0, 0): 180}


def test_no_finding_when_communication_has_its_own_stream_or_is_small():
    b = TraceBuilder()
    b.kernel(0, 100, name="gemm", stream=7)
    b.kernel(100, 50, name=NCCL, stream=9)              # exposed, but on a stream of its own
    assert streams.analyze(context(b.build(), Options())).findings == []
    b = TraceBuilder()
    b.kernel(0, 1000, name="gemm", stream=7)
    b.kernel(1000, 49, name=NCCL, stream=7)             # 49 / 1049 < 5% of the window
    assert streams.analyze(context(b.build(), Options())).findings == []
    b.kernel(1049, 20, name=NCCL, stream=7)             # 69 / 1069 >= 5%: medium
    (f,) = streams.analyze(context(b.build(), Options())).findings
    assert (f.severity, f.evidence["exposed_comm_ns"]) == ("medium", 69)


def test_cost_is_per_step():
    b = TraceBuilder()
    for step in range(2):
        t0 = step * 1000
        b.step(step, t0, t0 + 1000)
        b.launched("cudaLaunchKernel", t0, 5, t0 + 10, 500, name="gemm")
        b.launched("cudaLaunchKernel", t0 + 6, 5, t0 + 510, 100, name=NCCL)
    (f,) = streams.analyze(context(b.build(), Options())).findings
    assert f.evidence["exposed_comm_ns"] == 200 and f.cost_ns_per_step == 100


def test_no_activity_gives_empty_tables_with_columns():
    b = TraceBuilder()
    b.runtime("cudaMalloc", 0, 10)
    per_stream, per_device = tables(b.build())
    assert per_stream.empty and list(per_stream.columns) == list(streams.STREAM_COLUMNS)
    assert per_device.empty and list(per_device.columns) == list(streams.DEVICE_COLUMNS)


def test_definitions_are_documented():
    text = METRICS_DOC.read_text()
    assert "## Streams" in text
    for phrase in ("mean_active_streams", "max_active_streams", "concurrent_ns", "window_share",
                   "communication_on_compute_stream", "|U(comm on the stream) - U(compute on the device)|"):
        assert phrase in text and phrase in (streams.__doc__ or "")


# ----------------------------------------------------------------------------- the pipeline


def test_declared_and_reported_by_the_pipeline():
    assert streams.SPEC in specs()
    report = pipeline_analyze(SAMPLE_TRACES / "synthetic_4rank")
    section = report["analyses"]["streams"]
    assert section["title"] == streams.SPEC.title
    assert {name: t["title"] for name, t in section["tables"].items()} == {t.name: t.title for t in streams.SPEC.tables}
    # rank by rank (the pipeline) gives the tables of the whole trace in memory
    whole = run_all(report.trace, Options(), only=["streams"])["streams"]
    for name in ("streams", "devices"):
        pd.testing.assert_frame_equal(report.table("streams", name).reset_index(drop=True), whole.tables[name],
                                      check_dtype=False)


# ----------------------------------------------------------------------------- real traces

REAL = [
    "nsys/torchrun_2xh100_nccl_2026.2.sqlite",
    "kineto/hta_trace_diff_control_a100_rank3.json.gz",
    "kineto/hta_df_index_resolver_v100_rank1.json.gz",
    "kineto/tracelens_resnet_actckpt_mi300x_rank0.json.gz",
    "kineto/param_dlrm_8ranks_v100",
]


@pytest.fixture(scope="module", params=REAL)
def real(request) -> tuple[Trace, pd.DataFrame, pd.DataFrame, pd.DataFrame, list]:
    shared = require_shared()
    trace = traceview.load([shared / request.param])
    result = streams.analyze(context(trace, Options()))
    breakdown = temporal.breakdown(context(trace, Options()))
    whole = breakdown[breakdown["step"].isna()]
    return trace, result.tables["streams"], result.tables["devices"], whole, result.findings


def test_real_stream_busy_against_the_temporal_breakdown(real):
    trace, per_stream, per_device, whole, _ = real
    merged = per_device.merge(whole, on=["rank", "device"], suffixes=("", "_temporal"))
    assert len(merged) == len(per_device) == len(whole)
    summed = per_stream.groupby(["rank", "device"])["busy_ns"].sum().reset_index(name="summed")
    merged = merged.merge(summed, on=["rank", "device"])
    assert (merged["summed"] == merged["stream_busy_ns"]).all()
    assert (merged["busy_ns"] == merged["busy_ns_temporal"]).all()
    assert (merged["stream_busy_ns"] >= merged["busy_ns"]).all()
    # the streams overlap exactly when the sum of their busy times exceeds the device's busy time
    assert ((merged["stream_busy_ns"] == merged["busy_ns"]) == (merged["concurrent_ns"] == 0)).all()
    assert ((merged["max_active_streams"] == 1) == (merged["concurrent_ns"] == 0)).all()
    two = merged["max_active_streams"] <= 2   # with at most two streams at once, the excess is the overlap
    assert (merged.loc[two, "stream_busy_ns"] - merged.loc[two, "busy_ns"] == merged.loc[two, "concurrent_ns"]).all()


def test_real_stream_figures_by_a_loop(real):
    """Each stream recomputed on its own with the flat interval functions."""
    trace, per_stream, _, _, _ = real
    ctx = context(trace, Options())
    act = activity(ctx)
    kernel = act.kind == int(Kind.KERNEL)
    for row in per_stream.itertuples(index=False):
        on = (act.rank == row.rank) & (act.device == row.device) & (act.stream == row.stream)
        assert row.busy_ns == iv.total(act.start[on], act.end[on])
        comm = on & (act.cls == classify.COMMUNICATION)
        assert row.communication_ns == iv.total(act.start[comm], act.end[comm])
        assert row.kernels == int((on & kernel).sum())
        if row.kernels:
            names = classify.names_categorical(ctx, act.row[on & kernel]).astype(str)
            totals = pd.Series((act.end - act.start)[on & kernel]).groupby(np.asarray(names)).sum()
            assert row.top_kernel_ns == totals.max() and totals[row.top_kernel] == totals.max()


def test_real_findings_match_their_definition(real):
    trace, per_stream, _, whole, findings = real
    by_device = whole.set_index(["rank", "device"])
    flagged = {(f.rank, f.evidence["device"], f.evidence["stream"]) for f in findings}
    act = activity(context(trace, Options()))
    for row in per_stream[(per_stream["compute_ns"] > 0) & (per_stream["communication_ns"] > 0)].itertuples():
        dev = (act.rank == row.rank) & (act.device == row.device)
        comm = dev & (act.stream == row.stream) & (act.cls == classify.COMMUNICATION)
        compute = dev & (act.cls == classify.COMPUTE)
        exposed = iv.total(*iv.subtract((act.start[comm], act.end[comm]), (act.start[compute], act.end[compute])))
        window = int(by_device.loc[(row.rank, row.device), "window_ns"])
        assert ((row.rank, row.device, row.stream) in flagged) == (exposed >= 0.05 * window)
        # on a device with one stream, the stream's exposure is the device's exposed communication
        if (per_stream["device"][per_stream["rank"] == row.rank] == row.device).sum() == 1:
            assert exposed == int(by_device.loc[(row.rank, row.device), "exposed_comm_ns"])
    for f in findings:
        assert f.evidence["exposed_comm_ns"] <= by_device.loc[(f.rank, f.evidence["device"]), "exposed_comm_ns"]


def test_real_nccl_on_the_compute_stream_is_found():
    """The 2xH100 torchrun trace runs its NCCL SendRecv kernels on the one compute stream of each GPU
    (README of the shared traces): every device has such a stream, and where its exposure passes the
    threshold (judged with the temporal breakdown's figures) it is reported."""
    trace = traceview.load([require_shared() / "nsys/torchrun_2xh100_nccl_2026.2.sqlite"])
    result = streams.analyze(context(trace, Options()))
    per_stream = result.tables["streams"]
    shared = per_stream[(per_stream["compute_ns"] > 0) & (per_stream["communication_ns"] > 0)]
    assert sorted(shared["rank"]) == sorted(trace.rank_ids)
    breakdown = temporal.breakdown(context(trace, Options()))
    whole = breakdown[breakdown["step"].isna()]
    expected = sorted(int(r) for r, e, w in zip(whole["rank"], whole["exposed_comm_ns"], whole["window_ns"])
                      if e >= temporal.EXPOSED_COMM_SHARE * w)
    assert expected and sorted(f.rank for f in result.findings) == expected
