"""Efficiency analysis (analyses/efficiency.py): known answers on planted traces, edge cases, and
coverage on the shared traces once the parser fills the op input columns."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import context, warning_messages
from conftest import require_shared
from builders import TraceBuilder
from conftest import METRICS_DOC

import traceview
from traceview import hardware as hw
from traceview.analyses import efficiency, run_all
from traceview.findings import Options
from traceview.model import DeviceInfo, Kind, Trace, concat_traces, dictionary_column, make_links_table

GPU = "Testium T1"
# round peaks, so the expected figures below can be worked out by hand
SPEC_TOML = f"""
[gpus.testium]
name = "{GPU}"
vendor = "Test"
architecture = "Test"
match = ['Testium T1']
memory_bandwidth_gbs = 1000
interconnect = "TestLink"
interconnect_gbs = 400
vector_tflops = {{ fp32 = 10 }}
tensor_tflops = {{ bf16 = 100, tf32 = 50 }}
"""
PEAK_BF16, PEAK_TF32, PEAK_FP32, BANDWIDTH = 100e12, 50e12, 10e12, 1000e9  # FLOP/s, FLOP/s, FLOP/s, byte/s


@pytest.fixture
def options(tmp_path: Path) -> Options:
    path = tmp_path / "gpus.toml"
    path.write_text(SPEC_TOML)
    return Options(gpu_specs=str(path))


def with_inputs(trace: Trace, inputs: dict[int, tuple], device_name: str | None = GPU) -> Trace:
    """``trace`` with the input columns of rows set ((dims, types, strides, concrete) each a Python
    value, written as the JSON text Kineto has) and its rank's GPU named ``device_name``."""
    n = trace.num_events
    events = trace.events
    for i, column in enumerate(("input_dims", "input_types", "input_strides", "concrete_inputs")):
        values = np.full(n, None, dtype=object)
        for row, args in inputs.items():
            values[row] = None if args[i] is None else json.dumps(args[i])
        at = events.schema.get_field_index(column)
        events = events.set_column(at, events.schema.field(column), dictionary_column(pa.array(values, pa.string())))
    ranks = {r: dataclasses.replace(info, devices=[DeviceInfo(id=0, name=device_name)] if device_name else [])
             for r, info in trace.ranks.items()}
    return dataclasses.replace(trace, events=events, ranks=ranks)


def mm_inputs(m: int, k: int, n: int) -> tuple:
    return ([[m, k], [k, n]], ["c10::BFloat16", "c10::BFloat16"], [[k, 1], [n, 1]], ["", ""])


ADD_INPUTS = ([[1_000_000], [1_000_000], []], ["float", "float", "Scalar"], [[1], [1], []], ["", "", "1"])
MM = (256, 512, 1024)
MM_FLOPS = 2 * 256 * 512 * 1024
MM_BYTES = (256 * 512 + 512 * 1024 + 256 * 1024) * 2
ADD_FLOPS, ADD_BYTES = 1_000_000, 3 * 4 * 1_000_000


def planted(inputs: bool = True, device_name: str | None = GPU) -> tuple[Trace, dict]:
    """One step: two aten::mm (under aten::linear) of 10 us, one aten::add of 24 us, one aten::cat of
    5 us (no model), and unattributed kernels: one with no launch call, one graph replay, one whose
    launch call has no op around it."""
    b = TraceBuilder()
    b.step(0, 0, 400_000)
    kernels: dict[str, list[int]] = {"mm": [], "add": [], "cat": [], "unattributed": []}
    ops: dict[int, tuple] = {}
    for i in range(2):
        t = 10_000 + i * 50_000
        linear = b.op("aten::linear", t, 20_000)
        mm = b.op("aten::mm", t + 1_000, 15_000)
        api, g = b.launched("cudaLaunchKernel", t + 2_000, 3_000, 100_000 + i * 20_000, 10_000, op=linear)
        b.issued_by(mm, api)  # the launch is linked to both: the innermost (mm) wins
        kernels["mm"].append(g)
        ops[mm] = mm_inputs(*MM)
        ops[linear] = ([[256, 512], [1024, 512], []], ["c10::BFloat16", "c10::BFloat16", ""], None, None)
    add = b.op("aten::add", 120_000, 10_000)
    kernels["add"].append(b.launched("cudaLaunchKernel", 121_000, 3_000, 150_000, 24_000, op=add)[1])
    ops[add] = ADD_INPUTS
    cat = b.op("aten::cat", 140_000, 10_000)
    kernels["cat"].append(b.launched("cudaLaunchKernel", 141_000, 3_000, 180_000, 5_000, op=cat)[1])
    ops[cat] = ([[4], [4]], ["float", "float"], None, None)
    kernels["unattributed"].append(b.kernel(190_000, 5_000, name="orphan"))  # launched before the window
    graph_op = b.op("aten::add", 200_000, 10_000)
    kernels["unattributed"].append(b.launched("cudaGraphLaunch", 201_000, 3_000, 200_000, 3_000, op=graph_op)[1])
    kernels["unattributed"].append(b.launched("cudaLaunchKernel", 230_000, 1_000, 240_000, 2_000)[1])
    trace = b.build()
    return with_inputs(trace, ops if inputs else {}, device_name), kernels


def test_docs_state_the_definitions():
    text = METRICS_DOC.read_text()
    assert "## Efficiency" in text
    for sentence in ("roofline_ns = max(FLOPs / peak, bytes / bandwidth)", "efficiency = roofline_ns / gpu_ns",
                     "busbw = algbw x factor"):
        assert sentence in text.replace("\n", " "), sentence
        assert sentence in " ".join((efficiency.__doc__ or "").split()), sentence


def test_known_answer_per_op_type(options: Options):
    trace, _ = planted()
    result = run_all(trace, options, only=["efficiency"])["efficiency"]
    types = result.tables["op_types"].set_index("name")
    mm = types.loc["aten::mm"]
    assert (mm["calls"], mm["gpu_ns"], mm["flops"], mm["bytes"]) == (2, 20_000, 2 * MM_FLOPS, 2 * MM_BYTES)
    mm_roof_ns = max(MM_FLOPS / PEAK_BF16, MM_BYTES / BANDWIDTH) * 1e9  # compute-bound: 2684.35456 ns
    assert mm["roofline_ns"] == pytest.approx(2 * mm_roof_ns)
    assert mm["efficiency"] == pytest.approx(2 * mm_roof_ns / 20_000)
    assert mm["above_roofline_ns"] == pytest.approx(20_000 - 2 * mm_roof_ns)
    assert mm["achieved_tflops"] == pytest.approx(2 * MM_FLOPS / 20_000e-9 / 1e12)
    assert mm["intensity"] == pytest.approx(MM_FLOPS / MM_BYTES)
    assert mm["ridge"] == pytest.approx(PEAK_BF16 / BANDWIDTH)
    assert mm["bound"] == "compute" and mm["dtype"] == "bf16" and mm["unit"] == "tensor"
    add = types.loc["aten::add"]
    assert (add["flops"], add["bytes"]) == (ADD_FLOPS, ADD_BYTES)
    add_roof_ns = max(ADD_FLOPS / PEAK_FP32, ADD_BYTES / BANDWIDTH) * 1e9  # memory-bound: 12 us
    assert add["bound"] == "memory" and add["efficiency"] == pytest.approx(add_roof_ns / 24_000)
    assert add["achieved_gbs"] == pytest.approx(ADD_BYTES / 24_000)
    assert "aten::linear" not in types.index  # its kernels belong to the leaf, aten::mm


def test_coverage_attribution_and_steps(options: Options):
    trace, kernels = planted()
    result = run_all(trace, options, only=["efficiency"])["efficiency"]
    cov = result.tables["coverage"].iloc[0]
    assert cov["gpu"] == GPU
    assert (cov["op_ns"], cov["modelled_ns"]) == (20_000 + 24_000 + 5_000, 20_000 + 24_000)
    assert cov["modelled_pct"] == pytest.approx(100 * 44_000 / 49_000)
    assert (cov["no_launch_call_ns"], cov["graph_replay_ns"], cov["no_cpu_op_ns"]) == (5_000, 3_000, 2_000)
    assert cov["kernel_ns"] == 49_000 + 10_000
    unmodelled = result.tables["unmodelled"]
    assert unmodelled[["name", "reason", "gpu_ns"]].values.tolist() == [["aten::cat", "unknown_dtype", 5_000]]
    # HFU: FLOPs at peak over the step's GPU window (first kernel start .. last kernel end)
    starts = trace.column("start_ns")[np.concatenate(list(kernels.values()))]
    ends = starts + trace.column("dur_ns")[np.concatenate(list(kernels.values()))]
    window = int(ends.max() - starts.min())
    step = result.tables["steps"].dropna(subset=["step"]).iloc[0]
    assert step["window_ns"] == window
    compute_ns = (2 * MM_FLOPS / PEAK_BF16 + ADD_FLOPS / PEAK_FP32) * 1e9
    assert step["hfu"] == pytest.approx(compute_ns / window)
    assert step["flops"] == 2 * MM_FLOPS + ADD_FLOPS


def test_below_roofline_finding_claims_the_time_above_the_roofline(options: Options):
    trace, kernels = planted()
    result = run_all(trace, options, only=["efficiency"])["efficiency"]
    below = [f for f in result.findings if f.code == "below_roofline"]
    assert [f.evidence["category"] for f in below] == ["gemm bf16"]  # add runs at exactly 50%: not below
    share = MM_FLOPS / PEAK_BF16 * 1e9 / 10_000
    starts = trace.column("start_ns")[kernels["mm"]]
    expected = sorted((int(s + round(10_000 * share)), int(s + 10_000)) for s in starts)
    claims = below[0].claims
    assert claims is not None
    assert sorted(zip(claims.start_ns.tolist(), claims.end_ns.tolist())) == expected


def test_the_report_costs_below_roofline_from_its_claims(options: Options):
    """Through the whole pipeline: the findings engine costs the finding by its claims (one step, one GPU)."""
    from traceview.pipeline import analyze

    trace, _ = planted()
    report = analyze(trace, options)
    finding = next(f for f in report["findings"] if f["code"] == "below_roofline")
    cut = round(10_000 * MM_FLOPS / PEAK_BF16 * 1e9 / 10_000)
    assert finding["cost_ns_per_step"] == 2 * (10_000 - cut)
    assert report.table("efficiency", "coverage")["modelled_ns"].tolist() == [44_000]


def test_faster_than_the_roofline_is_not_a_result(options: Options):
    fp32 = ([[256, 512], [512, 1024]], ["float", "float"], [[512, 1], [1024, 1]], ["", ""])
    trace = ops_trace("aten::mm", fp32, [2_000])  # faster than even the TF32 roof (5.4 us)
    result = run_all(trace, options, only=["efficiency"])["efficiency"]
    row = result.tables["op_types"].iloc[0]
    assert bool(row["over_roofline"]) and np.isnan(row["efficiency"]) and np.isnan(row["above_roofline_ns"])
    assert any("faster than its roofline" in w for w in warning_messages(result))
    assert not result.findings


def test_unknown_gpu_says_what_could_not_be_computed(options: Options):
    trace, _ = planted(device_name="Mystery Accelerator 9000")
    result = run_all(trace, options, only=["efficiency"])["efficiency"]
    assert not [f for f in result.findings if f.code in ("below_roofline", "tiny_gemms")]
    assert any("unknown GPU 'Mystery Accelerator 9000'" in w for w in warning_messages(result))
    types = result.tables["op_types"]
    assert types["roofline_ns"].isna().all() and types["efficiency"].isna().all()
    assert result.tables["op_types"].set_index("name").loc["aten::mm", "flops"] == 2 * MM_FLOPS  # still counted
    assert result.tables["steps"]["hfu"].isna().all()


def test_no_shapes_means_nothing_modelled_and_a_warning(options: Options):
    trace, _ = planted(inputs=False)
    result = run_all(trace, options, only=["efficiency"])["efficiency"]
    assert result.tables["coverage"].iloc[0]["modelled_ns"] == 0
    reasons = result.tables["unmodelled"].set_index("name")["reason"]
    assert reasons["aten::mm"] == reasons["aten::add"] == "missing_shapes"
    assert any("record_shapes=True" in w for w in warning_messages(result))


def test_unverified_peak_is_not_used(options: Options, monkeypatch: pytest.MonkeyPatch):
    table = efficiency.gpu_specs(options.gpu_specs)
    unverified = {key: dataclasses.replace(spec, verified=frozenset()) for key, spec in table.items()}
    monkeypatch.setattr(efficiency, "gpu_specs", lambda path: unverified)
    trace, _ = planted()
    result = run_all(trace, options, only=["efficiency"])["efficiency"]
    assert result.tables["op_types"]["efficiency"].isna().all()
    assert any("not verified" in w for w in warning_messages(result))
    assert hw.peak_flops(unverified["testium"], "bf16") is None  # what the analysis relies on


def test_leaf_is_the_innermost_op_owning_kernels(options: Options):
    """A composite op that launches kernels itself, with no child owning any, is modelled as a whole."""
    b = TraceBuilder()
    linear = b.op("aten::linear", 0, 10_000)
    b.launched("cudaLaunchKernel", 1_000, 1_000, 20_000, 10_000, op=linear)
    trace = with_inputs(b.build(), {linear: ([[256, 512], [1024, 512], []], ["c10::BFloat16"] * 2 + [""], None,
                                             None)})
    types = run_all(trace, options, only=["efficiency"])["efficiency"].tables["op_types"]
    assert types[["name", "flops"]].values.tolist() == [["aten::linear", MM_FLOPS]]


def ops_trace(name: str, inputs: tuple, durations: list[int]) -> Trace:
    """One op per duration, each launching one kernel of that duration, back to back."""
    b = TraceBuilder()
    rows = {}
    for i, dur in enumerate(durations):
        op = b.op(name, i * 100_000, 50_000)
        b.launched("cudaLaunchKernel", i * 100_000 + 1_000, 1_000, 1_000_000 + i * 100_000, dur, op=op)
        rows[op] = inputs
    return with_inputs(b.build(), rows)


def test_fp32_products_faster_than_the_fp32_peak_are_judged_on_tf32(options: Options):
    fp32 = ([[256, 512], [512, 1024]], ["float", "float"], [[512, 1], [1024, 1]], ["", ""])
    trace = ops_trace("aten::mm", fp32, [20_000])  # 13.4 TFLOP/s: more than the 10 of the fp32 peak
    row = run_all(trace, options, only=["efficiency"])["efficiency"].tables["op_types"].iloc[0]
    roof_ns = max(MM_FLOPS / PEAK_TF32, MM_BYTES * 2 / BANDWIDTH) * 1e9
    assert "TF32" in row["roof"] and row["efficiency"] == pytest.approx(roof_ns / 20_000)


def test_tiny_gemms_are_their_own_finding(options: Options):
    trace = ops_trace("aten::mm", mm_inputs(16, 16, 16), [5_000] * 20)
    result = run_all(trace, options, only=["efficiency"])["efficiency"]
    assert [f.code for f in result.findings] == ["tiny_gemms"]
    finding = result.findings[0]
    roof_ns = max(2 * 16**3 / PEAK_BF16, 3 * 16 * 16 * 2 / BANDWIDTH) * 1e9  # memory-bound: 1.536 ns
    assert finding.claims is not None and finding.claims.total_ns() == 20 * (5_000 - round(roof_ns))


def test_kernel_under_an_annotation_only_is_unattributed(options: Options):
    b = TraceBuilder()
    annotation = b.op("my_block", 0, 10_000, kind=Kind.ANNOTATION)
    b.launched("cuLaunchKernel", 1_000, 1_000, 20_000, 7_000, op=annotation, name="triton_poi_fused_add_0")
    coverage = run_all(with_inputs(b.build(), {}), options, only=["efficiency"])["efficiency"].tables["coverage"]
    assert coverage[["op_ns", "annotation_only_ns"]].values.tolist() == [[0, 7_000]]


def test_bus_bandwidth_known_answer(options: Options):
    """An all-reduce of 8 MB on 2 ranks, 100 us on rank 0 (it waited) and 60 us on rank 1: both are
    timed at 60 us; algbw = 8e6 / 60e3 ns; busbw = algbw x 2(n-1)/n = algbw; link = 400 / 2 GB/s."""
    traces = []
    for rank, dur in ((0, 100_000), (1, 60_000)):
        b = TraceBuilder(rank=rank)
        b.launched("cudaLaunchKernel", 0, 1_000, 10_000, dur, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
        trace = with_inputs(b.build(), {})
        events = trace.events
        n = events.num_rows
        for column, value in (("collective", "allreduce"), ("msg_bytes", 8_000_000), ("group_size", 2)):
            values = [value if k == int(Kind.KERNEL) else None for k in trace.kind_codes().tolist()]
            field = events.schema.field(column)
            array = dictionary_column(pa.array(values, pa.string())) if column == "collective" else pa.array(
                values, field.type)
            events = events.set_column(events.schema.get_field_index(column), field, array)
        assert events.num_rows == n
        traces.append(dataclasses.replace(trace, events=events))
    result = run_all(concat_traces(traces), options, only=["efficiency"])["efficiency"]
    rows = result.tables["collectives"]
    assert rows["time_ns"].tolist() == [60_000, 60_000]
    assert set(rows["time_basis"]) == {efficiency.TIMED_OVER_GROUP}
    algbw = 8_000_000 / 60_000
    assert rows["algbw_gbs"].tolist() == pytest.approx([algbw, algbw])
    assert rows["busbw_gbs"].tolist() == pytest.approx([algbw * 2 * (2 - 1) / 2] * 2)
    assert rows["link_share"].tolist() == pytest.approx([algbw / 200] * 2)
    kinds = result.tables["collective_kinds"]
    assert kinds["timed_over_group"].tolist() == [1, 1]


def collective_pair(msg_bytes: int, compute: tuple[int, int] | None = None) -> Trace:
    """Two ranks' all-reduce of ``msg_bytes``: 100 us on rank 0 (it waited 40 us) and 60 us on rank 1,
    both kernels from 10 us; ``compute``: a compute kernel (start, dur) on rank 0's other stream."""
    traces = []
    for rank, dur in ((0, 100_000), (1, 60_000)):
        b = TraceBuilder(rank=rank)
        b.launched("cudaLaunchKernel", 0, 1_000, 10_000, dur, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
        if compute is not None and rank == 0:
            b.launched("cudaLaunchKernel", 2_000, 1_000, compute[0], compute[1], name="gemm", stream=8)
        trace = with_inputs(b.build(), {})
        events = trace.events
        comm = [k == int(Kind.KERNEL) and name.startswith("nccl") for k, name in
                zip(trace.kind_codes().tolist(), trace.names().tolist())]
        for column, value in (("collective", "allreduce"), ("msg_bytes", msg_bytes), ("group_size", 2)):
            values = [value if c else None for c in comm]
            field = events.schema.field(column)
            array = dictionary_column(pa.array(values, pa.string())) if column == "collective" else pa.array(
                values, field.type)
            events = events.set_column(events.schema.get_field_index(column), field, array)
        traces.append(dataclasses.replace(trace, events=events))
    return concat_traces(traces)


def test_collective_bandwidth_claims_the_exposed_time_above_the_link_roofline(options: Options):
    """1.2 MB in 60 us (the shortest over the group): busbw = algbw = 20 GB/s, 10% of the 200 GB/s
    link, which would move it in 6 us: the last 54 us of each kernel are above the roofline. On
    rank 0 a compute kernel overlaps the kernel's last 20 us: only the 34 us exposed are claimed."""
    result = run_all(collective_pair(1_200_000, compute=(90_000, 20_000)), options, only=["efficiency"])["efficiency"]
    assert result.tables["collective_kinds"]["link_share"].tolist() == pytest.approx([0.1, 0.1])
    found = {f.rank: f for f in result.findings if f.code == "collective_bandwidth"}
    assert sorted(found) == [0, 1]
    claims = {rank: f.claims.largest(5) for rank, f in found.items()}
    assert claims == {0: [(0, 0, 56_000, 90_000)], 1: [(1, 0, 16_000, 70_000)]}
    assert (found[0].cost_ns_per_step, found[1].cost_ns_per_step) == (34_000, 54_000)
    assert dict(efficiency.SPEC.finding_parents) == {"collective_bandwidth": "exposed_collective"}
    # at the link's bandwidth (200 GB/s x 60 us = 12 MB) there is no finding and no time above the roof
    result = run_all(collective_pair(12_000_000), options, only=["efficiency"])["efficiency"]
    assert not [f for f in result.findings if f.code == "collective_bandwidth"]


@pytest.mark.parametrize(("kind", "n", "factor"), [("AllReduce", 8, 2 * 7 / 8), ("AllGather", 4, 3 / 4),
                                                   ("ReduceScatter", 4, 3 / 4), ("AllToAll", 2, 1 / 2),
                                                   ("Broadcast", 8, 1.0), ("SendRecv", 2, 1.0)])
def test_bus_factors_are_the_nccl_tests_ones(kind: str, n: int, factor: float):
    assert efficiency.bus_factor(kind, n) == pytest.approx(factor)


def test_unknown_collective_kinds_have_no_bus_bandwidth():
    assert np.isnan(efficiency.bus_factor("Gather", 4)) and np.isnan(efficiency.bus_factor("AllReduce", 0))


# ----------------------------------------------------------------------------- shared traces

COVERAGE_TRACES = ["tracelens_qwen05b_h100.json.gz", "tracelens_qwen05b_mi300x.json.gz",
                   "tracelens_resnet_actckpt_mi300x_rank0.json.gz"]


@pytest.mark.parametrize("name", COVERAGE_TRACES)
def test_shared_traces_model_most_op_linked_time(name: str):
    """Issue 13's bar: >= 80% of the op-linked kernel time modelled on the transformer and ResNet
    traces. Needs the parser to fill the input columns; skips with the reason until it does."""
    path = require_shared() / "kineto" / name
    trace = traceview.load(path)
    if trace.events.column("input_dims").null_count == trace.num_events:
        pytest.skip("the Kineto parser does not fill input_dims yet")
    coverage = run_all(trace, Options(), only=["efficiency"])["efficiency"].tables["coverage"]
    assert (coverage["modelled_pct"] >= 80).all(), coverage.to_dict("records")


def fwdbwd_from_sequence_numbers(trace: Trace, path: Path) -> Trace:
    """``trace`` with the ``fwdbwd`` links a newer profiler writes, made here from the raw records'
    "Sequence number" the way PyTorch pairs them (per forward thread and sequence number, the op
    that started last is the one that created the autograd node; the node names its forward thread
    in "Fwd thread id"). The 2021 trace has the numbers but no such links; the parser derives them
    (parsers/kineto/autograd.py, checked against this in tests/unit/test_kineto_autograd.py)."""
    import gzip

    ops = [e for e in json.loads(gzip.open(path).read())["traceEvents"]
           if e.get("ph") == "X" and "Sequence number" in e.get("args", {})]
    threads = {e["tid"] for e in ops if e["args"]["Fwd thread id"] == 0}
    assert len(threads) == 1  # one forward thread: the node's "Fwd thread id" cannot point elsewhere
    forward: dict[int, dict] = {}
    for e in ops:
        if e["args"]["Fwd thread id"] == 0 and e["ts"] >= forward.get(e["args"]["Sequence number"], e)["ts"]:
            forward[e["args"]["Sequence number"]] = e
    pairs = [(forward[e["args"]["Sequence number"]]["args"]["External id"], e["args"]["External id"])
             for e in ops if e["args"]["Fwd thread id"] > 0 and e["args"]["Sequence number"] in forward]
    cpu_ops = np.flatnonzero(trace.kind_codes() == int(Kind.CPU_OP))
    row_of = dict(zip(trace.column("external_id")[cpu_ops].tolist(), cpu_ops.tolist()))
    src, dst = np.array([[row_of[f], row_of[b]] for f, b in pairs]).T
    links = make_links_table(np.zeros(len(src)), "flow", "fwdbwd", src, dst)
    return dataclasses.replace(trace, links=pa.concat_tables([trace.links, links]))


def test_resnet50_2021_convolutions_from_the_op_chain():
    """The 2021 ResNet-50 trace lacks Concrete Inputs. Its split convolution backward ops take their
    size argument from the calling cudnn_convolution_backward; its forward convolutions need their
    backward node's gradient shape (a fwdbwd link the parser derives from the Sequence numbers):
    without those links they are not modelled; with them >= 80% of the op-linked time is modelled,
    and the forward convolutions' FLOPs, from the nodes' gradients, equal the weight gradients', from
    the callers' weight shapes."""
    path = require_shared() / "kineto" / "tbplugin_resnet50_v100_2021.json.gz"
    trace = traceview.load(path)
    fwdbwd = (trace.links.column("category").cast(pa.string()).to_numpy(zero_copy_only=False) == "fwdbwd")
    unlinked = dataclasses.replace(trace, links=trace.links.filter(pa.array(~fwdbwd)))
    result = run_all(unlinked, Options(), only=["efficiency"])["efficiency"]
    unmodelled = set(result.tables["unmodelled"]["name"])
    assert not {"aten::cudnn_convolution_backward_input", "aten::cudnn_convolution_backward_weight"} & unmodelled
    assert "aten::cudnn_convolution" in unmodelled
    result = run_all(trace, Options(), only=["efficiency"])["efficiency"]
    assert "aten::cudnn_convolution" not in set(result.tables["unmodelled"]["name"])
    coverage = result.tables["coverage"]
    assert (coverage["modelled_pct"] >= 80).all(), coverage.to_dict("records")
    types = result.tables["op_types"].groupby("name")[["calls", "flops"]].sum()
    forward, weight = types.loc["aten::cudnn_convolution"], types.loc["aten::cudnn_convolution_backward_weight"]
    assert forward["calls"] == weight["calls"] == 318 and forward["flops"] == weight["flops"]


def test_forward_convolutions_without_stride_take_the_output_from_fwdbwd_links():
    """The MI300X ResNet trace with its convolutions' Concrete Inputs removed: each forward
    convolution whose aten::convolution is fwdbwd-linked to its backward node takes its output from
    the node, and costs what it cost with stride and padding; the ones recomputed in the backward
    pass (activation checkpointing: no link) are not guessed."""
    path = require_shared() / "kineto" / "tracelens_resnet_actckpt_mi300x_rank0.json.gz"
    trace = traceview.load(path)

    def conv_costs(t: Trace) -> dict[int, int]:
        ops = efficiency.attribute(context(t, Options())).ops
        conv = ops[(ops["name"] == "aten::miopen_convolution") & ops["modelled"]]
        return dict(zip(conv["row"].tolist(), conv["flops"].tolist()))

    names = trace.names()
    chain = np.isin(names, ["aten::conv2d", "aten::convolution", "aten::_convolution", "aten::miopen_convolution"])
    concrete = trace.events.column("concrete_inputs").to_pylist()
    stripped = [None if c else v for c, v in zip(chain.tolist(), concrete)]
    events = trace.events.set_column(trace.events.schema.get_field_index("concrete_inputs"),
                                     trace.events.schema.field("concrete_inputs"),
                                     dictionary_column(pa.array(stripped, pa.string())))
    full, linked = conv_costs(trace), conv_costs(dataclasses.replace(trace, events=events))
    flows = trace.links.to_pandas()
    fwdbwd = flows[(flows["category"] == "fwdbwd") & (names[flows["src_row"]] == "aten::convolution")]
    assert len(full) > len(linked) == len(fwdbwd) > 50
    assert linked == {row: full[row] for row in linked}
    no_links = dataclasses.replace(trace, events=events, links=trace.links.slice(0, 0))
    assert conv_costs(no_links) == {}  # without the links, nothing is guessed


def test_shared_gemm_flops_are_2mnk():
    """GEMM FLOPs over the qwen H100 trace equal 2*M*N*K of its recorded mm/addmm, worked out here from
    the raw JSON independently of opmodels."""
    import gzip

    path = require_shared() / "kineto" / "tracelens_qwen05b_h100.json.gz"
    trace = traceview.load(path)
    if trace.events.column("input_dims").null_count == trace.num_events:
        pytest.skip("the Kineto parser does not fill input_dims yet")
    raw = json.loads(gzip.open(path).read())
    expected = 0
    for event in raw["traceEvents"]:
        if event.get("cat") == "cpu_op" and event.get("name") in ("aten::mm", "aten::addmm"):
            dims = event["args"]["Input Dims"]
            a, b = (dims[0], dims[1]) if event["name"] == "aten::mm" else (dims[1], dims[2])
            expected += 2 * a[0] * a[1] * b[1]
    types = run_all(trace, Options(), only=["efficiency"])["efficiency"].tables["op_types"]
    gemm = types[types["name"].isin(["aten::mm", "aten::addmm"])]
    assert int(gemm["flops"].sum()) == expected


# ----------------------------------------------------------------------------- the sample trace

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces"


def _make_efficiency():
    import importlib.util

    spec = importlib.util.spec_from_file_location("sample_make_efficiency", SAMPLE / "make_efficiency.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sample_regenerates_byte_identical(tmp_path: Path):
    _make_efficiency().main(tmp_path)
    for suffix in (".json.gz", ".truth.json", ".gpus.toml"):
        name = f"efficiency_roofline{suffix}"
        assert (tmp_path / name).read_bytes() == (SAMPLE / name).read_bytes(), f"{name}: rerun make_efficiency.py"


def test_sample_known_answer():
    """The planted sample: every expected figure of its truth file (counted by the generator from the
    planted shapes and durations), on the round peaks of its GPU file."""
    truth = json.loads((SAMPLE / "efficiency_roofline.truth.json").read_text())
    trace = traceview.load(SAMPLE / "efficiency_roofline.json.gz")
    if trace.events.column("input_dims").null_count == trace.num_events:
        pytest.skip("the Kineto parser does not fill input_dims yet")
    options = Options(gpu_specs=str(SAMPLE / "efficiency_roofline.gpus.toml"))
    result = run_all(trace, options, only=["efficiency"])["efficiency"]
    types = result.tables["op_types"].set_index("name")
    for name, expected in truth["op_types"].items():
        row = types.loc[name]
        for column, value in expected.items():
            assert row[column] == pytest.approx(value), (name, column)
    steps = result.tables["steps"].dropna(subset=["step"])
    assert len(steps) == truth["steps"]
    for column, value in truth["per_step"].items():
        assert steps[column].tolist() == pytest.approx([value] * truth["steps"]), column
    coverage = result.tables["coverage"].iloc[0]
    for column, value in truth["coverage"].items():
        assert coverage[column] == value, column
    unmodelled = result.tables["unmodelled"].set_index("name")["gpu_ns"].to_dict()
    assert unmodelled == truth["unmodelled"]
    assert [f.evidence["category"] for f in result.findings if f.code == "below_roofline"] == ["gemm bf16"]


def test_cli_gpu_specs_option_checks_the_file_and_keys_the_report_cache_on_its_content(tmp_path: Path):
    """``--gpu-specs``: a bad file is one line and exit 2 before any work; an edited file under the
    same path gives a new report cache key (its peaks change the efficiency figures)."""
    import subprocess
    import sys

    from traceview import report_cache

    bad = tmp_path / "bad.toml"
    bad.write_text("[gpus.x\n")
    run = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(SAMPLE / "efficiency_roofline.json.gz"),
                          "--gpu-specs", str(bad)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "TOML" in lines[0], run.stderr
    table = tmp_path / "gpus.toml"
    table.write_bytes((SAMPLE / "efficiency_roofline.gpus.toml").read_bytes())
    files = [SAMPLE / "efficiency_roofline.json.gz"]
    first = report_cache.report_key(files, Options(gpu_specs=str(table)))
    table.write_bytes(table.read_bytes() + b"\n# edited\n")
    assert report_cache.report_key(files, Options(gpu_specs=str(table))) != first


def test_mfu_known_answer_and_a_broken_input_is_no_result():
    """MFU = model FLOPs / (dense bf16 peak x step window): the sample's steps have 0.150 ms GPU
    windows on a 1000 TFLOP/s bf16 peak, so 75 GFLOP per step is exactly 50%; the whole-trace row
    is over its steps. Model FLOPs above what the peak allows in the window are a broken input:
    no figure, a warning naming it."""
    trace = traceview.load(SAMPLE / "efficiency_roofline.json.gz")
    specs = str(SAMPLE / "efficiency_roofline.gpus.toml")
    steps = efficiency.analyze(context(trace, Options(gpu_specs=specs))).tables["steps"]
    assert steps["mfu"].isna().all()  # no model FLOPs given: no MFU
    windows = steps.dropna(subset=["step"])["window_ns"].to_numpy()
    flops = 0.5 * 1000e12 * windows[0] / 1e9
    assert (windows == windows[0]).all()
    result = efficiency.analyze(context(trace, Options(gpu_specs=specs, model_flops_per_step=flops)))
    assert result.tables["steps"]["mfu"].tolist() == pytest.approx([0.5] * len(steps))
    broken = efficiency.analyze(context(trace, Options(gpu_specs=specs, model_flops_per_step=3 * flops)))
    assert broken.tables["steps"]["mfu"].isna().all()
    assert any("above 100%" in w and "model FLOPs" in w for w in warning_messages(broken))
    unknown = efficiency.analyze(context(trace, Options(gpu_specs=specs, model_flops_per_step=flops, mfu_dtype="fp64")))
    assert unknown.tables["steps"]["mfu"].isna().all()
    assert any("no MFU" in w for w in warning_messages(unknown))


@pytest.mark.parametrize("value, ok", [("6*1e9*4096", True), ("2.5e13", True), ("6*x", False), ("-1", False),
                                       ("0", False), ("inf", False)])
def test_cli_model_flops_is_checked_before_any_work(value: str, ok: bool):
    from traceview.commands.options import checked_model_flops
    from traceview.errors import TraceviewError

    if ok:
        flops, dtype = checked_model_flops(value, "c10::BFloat16")
        assert flops > 0 and dtype == "bf16"
    else:
        with pytest.raises(TraceviewError, match="--model-flops"):
            checked_model_flops(value, "bf16")
    with pytest.raises(TraceviewError, match="--mfu-dtype"):
        checked_model_flops(value, "float13")


def test_integer_bookkeeping_ops_are_not_judged_and_no_warning(options: Options):
    """Index arithmetic (an int64 add) has no published peak: it is not judged, and that is not a
    warning (the V100 job's Efficiency page had one 'dtype int64 has no peak' per rank)."""
    int64 = ([[4096], [4096]], ["long int", "long int"], [[1], [1]], ["", ""])
    result = run_all(ops_trace("aten::add", int64, [5_000]), options, only=["efficiency"])["efficiency"]
    row = result.tables["op_types"].iloc[0]
    assert (row["dtype"], row["unit"]) == ("int64", "vector") and row["flops"] > 0
    assert np.isnan(row["efficiency"]) and "integer (index or bookkeeping) op" in row["roof"]
    assert warning_messages(result) == []
    assert efficiency.is_bookkeeping("int32", "vector") and efficiency.is_bookkeeping("bool", "vector")
    assert not efficiency.is_bookkeeping("int8", "tensor") and not efficiency.is_bookkeeping("fp32", "vector")


def test_one_warning_per_distinct_cause_whatever_the_rank(options: Options):
    """The same missing roof on every rank is one message (no rank or GPU in its text), given by each
    rank: the report then prints it once with the ranks that gave it."""
    from traceview.pipeline import merge_messages

    traces = []
    for rank in range(3):  # one process per rank, each its own GPU (device = rank), named alike
        b = TraceBuilder(rank=rank)
        op = b.op("aten::mm", 0, 50_000)
        b.launched("cudaLaunchKernel", 1_000, 1_000, 1_000_000, 20_000, op=op)
        traces.append(with_inputs(b.build(), {op: mm_inputs(256, 512, 1024)}, device_name="Mystery Accelerator 9000"))
    result = run_all(concat_traces(traces), options, only=["efficiency"])["efficiency"]
    per_rank = list(result.rank_warnings)
    assert {r for r, _ in per_rank} == {0, 1, 2}
    assert per_rank and all("rank" not in m and "GPU 0" not in m for _, m in per_rank)
    lines = merge_messages(per_rank, 3)
    assert len(lines) == len({m for _, m in per_rank}) == 1
    assert lines[0].endswith("(all ranks)") and "unknown GPU 'Mystery Accelerator 9000'" in lines[0]


def test_rollup_per_family_and_dtype_known_answer(options: Options):
    """Issue 30.11: GEMMs at X% of peak, elementwise at W% of the memory bandwidth, per family and
    dtype (families table), over the job (summary) and in the headline (every front end)."""
    from traceview.pipeline import analyze
    from traceview.render.common import efficiency_text, headline_rows

    trace, _ = planted()
    report = analyze(trace, options)
    fam = report.table("efficiency", "families").set_index(["family", "dtype"])
    assert sorted(fam.index) == [("GEMM", "bf16"), ("elementwise", "fp32")]  # aten::cat has no model
    gemm, add = fam.loc[("GEMM", "bf16")], fam.loc[("elementwise", "fp32")]
    assert (gemm["calls"], gemm["gpu_ns"], gemm["flops"]) == (2, 20_000, 2 * MM_FLOPS)
    assert gemm["peak_share"] == pytest.approx(2 * MM_FLOPS / PEAK_BF16 * 1e9 / 20_000)  # 26.8%
    assert gemm["bandwidth_share"] == pytest.approx(2 * MM_BYTES / BANDWIDTH * 1e9 / 20_000)
    assert gemm["achieved_tflops"] == pytest.approx(2 * MM_FLOPS / 20_000 / 1e3)
    assert add["bandwidth_share"] == pytest.approx(ADD_BYTES / BANDWIDTH * 1e9 / 24_000)  # 50%
    assert add["peak_share"] == pytest.approx(ADD_FLOPS / PEAK_FP32 * 1e9 / 24_000)
    rows = report["summary"]["efficiency_families"]
    assert [(r["family"], r["dtype"], r["judged_by"]) for r in rows] == [
        ("elementwise", "fp32", "bandwidth"), ("GEMM", "bf16", "peak")]  # largest GPU time first
    assert rows[1]["peak_share"] == pytest.approx(gemm["peak_share"]) and rows[0]["gpu_share"] == pytest.approx(24 / 44)
    text = efficiency_text(report)
    assert text == ("elementwise fp32 at 500 GB/s = 50.0% of memory bandwidth · GEMM bf16 537 MFLOP at 26.8 TFLOP/s "
                    "= 26.8% of peak")
    assert ("efficiency (per GPU, modelled ops)", text) in [(label, value) for label, value, _ in headline_rows(report)]


def test_rollup_without_a_verified_roof_says_so(options: Options):
    from traceview.pipeline import analyze
    from traceview.render.common import efficiency_text

    trace, _ = planted(device_name="Mystery Accelerator 9000")
    report = analyze(trace, options)
    rows = report["summary"]["efficiency_families"]
    assert all(r["peak_share"] is None and r["bandwidth_share"] is None and r["roofed_share"] == 0 for r in rows)
    assert efficiency_text(report).count("(no verified roof)") == 2


def test_v100_job_efficiency_warnings_are_one_line_per_cause():
    """The 8-rank V100 job: its Efficiency page had 24 warnings (an unverified fp32 peak and int64 /
    int32 'no peak' on every rank); now each distinct cause is one line naming its ranks, and the
    integer bookkeeping ops are none."""
    job = require_shared() / "kineto" / "param_dlrm_8ranks_v100"
    report = traceview.analyze(str(job))
    lines = [w["message"] for w in report["warnings"] if w.get("scope") == "efficiency"]
    assert lines and len(lines) == len(set(lines)) <= 2, lines
    assert not any("int64" in m or "int32" in m for m in lines)
    assert all("rank " not in m.split(" (")[0] for m in lines)
    assert any(m.endswith("(all ranks)") and "fp32 vector peak is not verified" in m for m in lines)


def test_rollup_integer_bookkeeping_is_counted_not_judged(options: Options):
    from traceview.pipeline import analyze
    from traceview.render.common import efficiency_text

    int64 = ([[4096], [4096]], ["long int", "long int"], [[1], [1]], ["", ""])
    report = analyze(ops_trace("aten::add", int64, [5_000]), options)
    [row] = report["summary"]["efficiency_families"]
    assert (row["family"], row["dtype"], row["judged_by"]) == ("elementwise", "int64", "none")
    assert row["bandwidth_share"] is None and row["gpu_ns"] == 5_000
    assert efficiency_text(report).endswith("(integer op: not judged)")
