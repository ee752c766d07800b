"""XLA's recorded cost per op (XSpace ``flops`` / ``bytes_accessed``) on the efficiency roofline.

A hand-made GPU XSpace whose stream kernels carry the stats (as integers, a double, on the event and
on its metadata), with every figure worked out here from the durations and the round peaks of a GPU
specification file; and a real JAX CPU profile (tests/jax_profiles.py), which records no cost.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import context

import traceview
from traceview.findings import Options
from traceview.model import Kind
from xspace_planes import stat_id

pytest.importorskip("google.protobuf", reason="the xspace extra (protobuf) is not installed")

#: the XSpace parser names a GPU plane's device by its type ("GPU"): a user spec file matches that
SPEC_TOML = """
[gpus.xla_testium]
name = "Testium X1"
vendor = "Test"
architecture = "Test"
match = ['^GPU$']
memory_bandwidth_gbs = 1000
vector_tflops = { fp32 = 10 }
tensor_tflops = { bf16 = 100, fp16 = 80 }
"""
PEAK_BF16, PEAK_FP16, BANDWIDTH = 100e12, 80e12, 1000e9  # FLOP/s, FLOP/s, byte/s
#: name -> (duration ns, recorded FLOPs or None, recorded bytes or None); each runs once per step
KERNELS = {"fusion.1": (100_000, 2e9, 10**6), "fusion.2": (1_000_000, 10**6, 4 * 10**8),
           "copy.3": (500_000, None, 2 * 10**8), "fusion.4": (300_000, None, None)}
STEPS = 2
STEP_NS = 5_000_000


def recorded_xspace(path: Path) -> Path:
    """Host: two ``train`` step annotations and a ``cuLaunchKernel`` per kernel (correlation ids);
    ``/device:GPU:0``: a ``Stream #7(Compute)`` line running :data:`KERNELS` back to back in each
    step. fusion.1's cost sits on its event metadata (uint64 FLOPs), fusion.2's on the events (a
    uint64 and an int64), copy.3 records bytes only (int64), fusion.4 nothing."""
    from traceview.parsers.xspace.schema import xspace_class

    space = xspace_class()()
    host, gpu = space.planes.add(name="/host:CPU"), space.planes.add(name="/device:GPU:0")
    names = ["train", "cuLaunchKernel", *KERNELS]
    for plane in (host, gpu):
        for i, name in enumerate(names, 1):
            plane.event_metadata[i].id, plane.event_metadata[i].name = i, name
    hmeta: dict[str, int] = {}
    dmeta: dict[str, int] = {}
    flops_meta = gpu.event_metadata[names.index("fusion.1") + 1]
    flops_meta.stats.add(metadata_id=stat_id(dmeta, gpu, "flops"), uint64_value=int(KERNELS["fusion.1"][1]))
    flops_meta.stats.add(metadata_id=stat_id(dmeta, gpu, "bytes_accessed"), uint64_value=KERNELS["fusion.1"][2])
    steps = host.lines.add(id=1, name="python", timestamp_ns=0)
    thread = host.lines.add(id=2, name="pjrt_thread", timestamp_ns=0)
    stream = gpu.lines.add(id=7, name="Stream #7(Compute)", timestamp_ns=0)
    corr = 100
    for step in range(STEPS):
        t0 = step * STEP_NS
        ev = steps.events.add(metadata_id=1, offset_ps=t0 * 1000, duration_ps=(STEP_NS - 10_000) * 1000)
        ev.stats.add(metadata_id=stat_id(hmeta, host, "step_num"), int64_value=step)
        at = t0 + 50_000
        for name, (dur, flops, nbytes) in KERNELS.items():
            launch = thread.events.add(metadata_id=2, offset_ps=(at - 20_000) * 1000, duration_ps=5_000_000)
            launch.stats.add(metadata_id=stat_id(hmeta, host, "correlation_id"), uint64_value=corr)
            kernel = stream.events.add(metadata_id=names.index(name) + 1, offset_ps=at * 1000, duration_ps=dur * 1000)
            kernel.stats.add(metadata_id=stat_id(dmeta, gpu, "correlation_id"), uint64_value=corr)
            kernel.stats.add(metadata_id=stat_id(dmeta, gpu, "hlo_op"), str_value=name)
            if name == "fusion.2":
                kernel.stats.add(metadata_id=stat_id(dmeta, gpu, "flops"), uint64_value=int(flops))  # type: ignore[arg-type]
                kernel.stats.add(metadata_id=stat_id(dmeta, gpu, "bytes_accessed"), int64_value=nbytes)
            if name == "copy.3":
                kernel.stats.add(metadata_id=stat_id(dmeta, gpu, "bytes_accessed"), int64_value=nbytes)
            at += dur + 10_000
            corr += 1
    path.write_bytes(space.SerializeToString())
    return path


@pytest.fixture
def options(tmp_path: Path) -> Options:
    table = tmp_path / "gpus.toml"
    table.write_text(SPEC_TOML)
    return Options(gpu_specs=str(table))


def _roofline_ns(flops: float, nbytes: float) -> float:
    """The roofline time of one call, on the bf16 tensor peak (--mfu-dtype's default)."""
    return max(flops / PEAK_BF16, nbytes / BANDWIDTH) * 1e9


def test_recorded_columns_from_event_and_metadata_stats(tmp_path: Path) -> None:
    trace = traceview.load(recorded_xspace(tmp_path / "gpu.xplane.pb"), use_cache=False)
    kernels = trace.kind_codes() == int(Kind.KERNEL)
    names = trace.names()
    flops = trace.events.column("recorded_flops").to_numpy(zero_copy_only=False)
    nbytes = trace.events.column("recorded_bytes").to_pylist()
    for name, (_dur, want_flops, want_bytes) in KERNELS.items():
        rows = np.flatnonzero(kernels & (names == name))
        assert rows.size == STEPS
        got = flops[rows]
        assert (np.isnan(got).all() if want_flops is None else (got == want_flops).all()), (name, got)
        assert [nbytes[r] for r in rows] == [want_bytes] * STEPS, name
    assert np.isnan(flops[~kernels]).all()  # host events and annotations record none
    assert trace.ranks[0].event_counts["xla_flops_recorded"] == 2 * STEPS


def test_recorded_kernels_on_the_roofline(tmp_path: Path, options: Options) -> None:
    report = traceview.analyze(recorded_xspace(tmp_path / "gpu.xplane.pb"), options, cache=False)
    eff = report["analyses"]["efficiency"]
    op_types = {row["name"]: row for row in eff["tables"]["op_types"]["rows"]}
    assert set(op_types) == {"fusion.1", "fusion.2", "copy.3"}  # fusion.4 records no cost
    for name, row in op_types.items():
        dur, flops, nbytes = KERNELS[name]
        roof = _roofline_ns(flops or 0.0, nbytes or 0)
        assert row["model"] == "xla recorded" and row["calls"] == STEPS
        assert row["gpu_ns"] == STEPS * dur and row["flops"] == STEPS * int(flops or 0)
        assert row["bytes"] == STEPS * (nbytes or 0)
        assert row["roofline_ns"] == pytest.approx(STEPS * roof)
        assert row["efficiency"] == pytest.approx(roof / dur)
        assert row["above_roofline_ns"] == pytest.approx(STEPS * (dur - roof))
    assert op_types["fusion.1"]["bound"] == "compute" and op_types["fusion.2"]["bound"] == "memory"
    assert op_types["fusion.1"]["efficiency"] == pytest.approx(0.2)  # 2e9 / 100 TFLOP/s = 20 us of 100 us
    assert "bf16 tensor" in op_types["fusion.1"]["roof"] and "XLA records no dtype" in op_types["fusion.1"]["roof"]
    assert "no FLOPs" in op_types["copy.3"]["roof"]  # bytes only: the bandwidth roof
    # HFU per step: the recorded FLOPs at the peak over the step's GPU window
    compute_ns = (2e9 + 1e6) / PEAK_BF16 * 1e9
    for row in eff["tables"]["steps"]["rows"]:
        if row["step"] is not None:
            assert row["compute_roof_ns"] == pytest.approx(compute_ns)
            assert row["hfu"] == pytest.approx(compute_ns / row["window_ns"])
    # the family of recorded ops: 2 x (20 + 400 + 200) us of roofline over 2 x 1.6 ms
    (finding,) = [f for f in report["findings"] if f["code"] == "below_roofline"]
    roof_total = STEPS * sum(_roofline_ns(f or 0.0, b or 0) for f, b in ((2e9, 1e6), (1e6, 4e8), (None, 2e8)))
    gpu_total = STEPS * (100_000 + 1_000_000 + 500_000)
    assert finding["evidence"]["efficiency"] == pytest.approx(roof_total / gpu_total)
    assert "XLA ops (recorded cost)" in finding["title"]
    coverage = eff["tables"]["coverage"]["rows"][0]
    assert coverage["modelled_ns"] == gpu_total  # fusion.4 is linked to no op and not modelled


def test_mfu_dtype_chooses_the_peak(tmp_path: Path, options: Options) -> None:
    fp16 = Options(gpu_specs=options.gpu_specs, mfu_dtype="fp16")
    report = traceview.analyze(recorded_xspace(tmp_path / "gpu.xplane.pb"), fp16, cache=False)
    row = next(r for r in report["analyses"]["efficiency"]["tables"]["op_types"]["rows"] if r["name"] == "fusion.1")
    assert row["efficiency"] == pytest.approx(2e9 / PEAK_FP16 * 1e9 / 100_000)


def test_derived_inputs_include_recorded_flops(tmp_path: Path, options: Options) -> None:
    from traceview.analyses.steps import activity  # the activity input the derived inputs are aligned to

    trace = traceview.load(recorded_xspace(tmp_path / "gpu.xplane.pb"), use_cache=False)
    ctx = context(trace, options)
    act = activity(ctx)
    names = trace.names()[act.row]
    flops = ctx.input("efficiency.kernel_flops")
    factor = ctx.input("efficiency.kernel_roofline_factor")
    for name, (dur, want, nbytes) in KERNELS.items():
        at = names == name
        if want is None and nbytes is None:
            assert np.isnan(flops[at]).all() and np.isnan(factor[at]).all()
            continue
        assert flops[at] == pytest.approx(np.full(STEPS, want or 0.0))
        assert factor[at] == pytest.approx(np.full(STEPS, _roofline_ns(want or 0.0, nbytes or 0) / dur))


def test_without_a_gpu_spec_no_roof_and_a_reason(tmp_path: Path) -> None:
    report = traceview.analyze(recorded_xspace(tmp_path / "gpu.xplane.pb"), cache=False)
    eff = report["analyses"]["efficiency"]
    assert all(row["efficiency"] is None for row in eff["tables"]["op_types"]["rows"])
    assert any("unknown GPU 'GPU'" in w for w in eff["warnings"]), eff["warnings"]
    assert not [f for f in report["findings"] if f["code"] == "below_roofline"]


@pytest.mark.slow
def test_jax_cpu_profile_records_no_cost(tmp_path: Path) -> None:
    """JAX's CPU backend writes no flops/bytes_accessed stats: the columns stay null, nothing is
    placed on a roofline, and the report says the CPU has no peak."""
    pytest.importorskip("jax", reason="jax is not installed (pip install jax jaxlib records the profiles)")
    from jax_profiles import record

    from traceview.parsers.xspace.reading import load_xspace

    (path,) = record(tmp_path).glob("*.xplane.pb")
    stat_names = {m.name for plane in load_xspace(path).planes for m in plane.stat_metadata.values()}
    assert "flops" not in stat_names and "bytes_accessed" not in stat_names
    trace = traceview.load(path, use_cache=False)
    assert trace.events.column("recorded_flops").null_count == trace.num_events
    assert trace.events.column("recorded_bytes").null_count == trace.num_events
    report = traceview.analyze(path, cache=False)
    eff = report["analyses"]["efficiency"]
    assert eff["tables"]["op_types"]["rows"] == []
    assert any("CPU is not a GPU" in w for w in eff["warnings"]), eff["warnings"]
