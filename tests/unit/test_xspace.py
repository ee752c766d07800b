"""XSpace input (parsers/xspace): real JAX CPU profiles recorded here, the shared XSpace, bad inputs."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import require_shared
from jax_profiles import STEPS, record

import traceview
from traceview.errors import TraceFormatError
from traceview.model import Kind
from xspace_planes import stat_id

pytest.importorskip("google.protobuf", reason="the xspace extra (protobuf) is not installed")
SHARED_XSPACE = "xplane/xprof_tpu_inference.xplane.pb"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same program profiled twice (two run folders)."""
    pytest.importorskip("jax", reason="jax is not installed (pip install jax jaxlib records the profiles)")
    return record(tmp_path_factory.mktemp("jax_a")), record(tmp_path_factory.mktemp("jax_b"))


def _xplane(run: Path) -> Path:
    (found,) = run.glob("*.xplane.pb")
    return found


def run_cli(*args: str, cache: bool = False) -> subprocess.CompletedProcess:
    """The command as a user runs it (its errors as one line, exit 2)."""
    flags = () if cache else ("--no-cache",)
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args, *flags], capture_output=True,
                          text=True, timeout=300)


#: the tests on recorded JAX profiles: two profiles recorded, ~15 s on the shared machine
slow = pytest.mark.slow


@slow
def test_jax_profile_steps_ops_and_names(runs: tuple[Path, Path]) -> None:
    trace = traceview.load(runs[0])  # the run folder: its XSpace, the JSON views beside it skipped
    assert traceview.load(runs[0]).steps.num_rows == STEPS  # a second load (no cache drops the steps)
    assert len(trace.ranks) == 1 and trace.ranks[0].source_format == "xspace"
    assert trace.steps.num_rows == STEPS
    assert trace.steps.column("step").to_pylist() == list(range(STEPS))
    kinds = trace.kind_codes()
    names = trace.names()
    kernels = set(names[kinds == int(Kind.KERNEL)])
    assert any(n.startswith("dot") for n in kernels) and "wrapped_tanh" in kernels  # XLA op names
    assert (kinds == int(Kind.CPU_OP)).sum() > 0 and "PjitFunction(train_step)" in set(names[kinds == int(Kind.CPU_OP)])
    counts = trace.ranks[0].event_counts
    assert counts["events_read"] == counts["mapped"] + counts.get("skipped_aggregated", 0) == trace.num_events
    # each op of the jitted step ran once per step: one kernel per (op, step)
    per_op = {n: int(((names == n) & (kinds == int(Kind.KERNEL))).sum()) for n in kernels}
    assert set(per_op.values()) == {STEPS}


@slow
def test_recount_from_the_raw_protobuf(runs: tuple[Path, Path]) -> None:
    """Events, XLA ops and their busy time recounted by XLA's own reader (xprof's ProfileData, a C
    library that shares no code with traceview), against the trace and the report."""
    profile_data = pytest.importorskip("xprof.profile_data", reason="xprof is not installed")
    path = _xplane(runs[0])
    data = profile_data.ProfileData.from_file(str(path))
    events, ops = 0, []
    for plane in data.planes:
        for line in plane.lines:
            for event in line.events:
                events += 1
                if any(k == "hlo_op" for k, _v in event.stats):
                    ops.append((event.start_ns, event.start_ns + event.duration_ns))
    trace = traceview.load(path)
    assert trace.ranks[0].event_counts["events_read"] == events == trace.num_events
    kernel = trace.kind_codes() == int(Kind.KERNEL)
    assert int(kernel.sum()) == len(ops)
    spans = np.asarray(sorted(ops))
    busy, end = 0.0, -np.inf
    for lo, hi in spans:  # the union of the op intervals (the CPU backend's one device)
        busy += max(0.0, hi - max(lo, end))
        end = max(end, hi)
    report = traceview.analyze(path, cache=False)
    gpu_busy = report["summary"]["busy_ns"]
    assert abs(gpu_busy - busy) <= len(ops)  # ns rounding: under 1 ns per op


@slow
def test_same_program_twice_diffs_cleanly(runs: tuple[Path, Path]) -> None:
    result = run_cli("diff", str(_xplane(runs[0])), str(_xplane(runs[1])))
    assert result.returncode == 0, (result.stdout + result.stderr)
    assert "Traceback" not in (result.stdout + result.stderr)


@slow
def test_mixed_runs_in_one_folder_exit_2(runs: tuple[Path, Path], tmp_path: Path) -> None:
    profile = tmp_path / "plugins" / "profile"
    for i, run in enumerate(runs):
        shutil.copytree(run, profile / f"run{i}")
    result = run_cli("analyze", str(tmp_path))
    assert result.returncode == 2
    line = (result.stdout + result.stderr).strip()
    assert "2 runs" in line and "give one run's folder" in line and "Traceback" not in line


@slow
def test_truncated_protobuf_exit_2(runs: tuple[Path, Path], tmp_path: Path) -> None:
    data = _xplane(runs[0]).read_bytes()
    bad = tmp_path / "host.xplane.pb"
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(TraceFormatError, match="not a complete XSpace protobuf"):
        traceview.load(bad)
    result = run_cli("analyze", str(bad))
    assert result.returncode == 2 and len((result.stdout + result.stderr).strip().splitlines()) <= 2, (result.stdout + result.stderr)


@slow
@pytest.mark.parametrize("view", ["perfetto_trace.json.gz", "*.trace.json.gz"])
def test_json_view_reads_as_the_xspace(runs: tuple[Path, Path], view: str) -> None:
    """The JSON views beside the XSpace, named explicitly, give the XSpace's events, kinds, ops and
    steps (and a folder scan of the run reads the XSpace alone)."""
    (path,) = runs[0].glob(view)
    with gzip.open(path, "rb") as f:
        assert b'"traceEvents"' in f.read(4096)
    from_json, from_pb = traceview.load(path, use_cache=False), traceview.load(_xplane(runs[0]))
    assert from_json.ranks[0].source_format == "xspace-json"
    assert from_json.num_events == from_pb.num_events == from_json.ranks[0].event_counts["mapped"]
    # the same events in the same order (both sorted by start); times equal within the 1 ns the
    # view's decimal µs may round a tie differently from the XSpace's ps
    for column in ("kind", "name", "device", "stream", "category"):  # pid: the view has no process_id
        assert from_json.events.column(column).to_pylist() == from_pb.events.column(column).to_pylist(), column
    for column in ("start_ns", "dur_ns"):
        gap = np.abs(from_json.column(column) - from_pb.column(column))
        assert gap.max() <= 1, column
    assert from_json.steps.column("step").to_pylist() == from_pb.steps.column("step").to_pylist()
    assert np.abs(from_json.steps.column("start_ns").to_numpy() - from_pb.steps.column("start_ns").to_numpy()).max() <= 1
    assert len(traceview.load(runs[0]).ranks) == 1


def test_shared_xspace(tmp_path: Path) -> None:
    """The shared TPU XSpace: analysed, or, where its bytes were damaged by a text copy, one line."""
    path = require_shared() / SHARED_XSPACE
    if not path.exists():
        pytest.skip(f"{path} is absent")
    if path.read_bytes().count(b"\xef\xbf\xbd") > 1000:
        result = run_cli("analyze", str(path))
        assert result.returncode == 2 and "saved as text" in (result.stdout + result.stderr), (result.stdout + result.stderr)
        pytest.skip("the shared XSpace was stored as text (its non-UTF-8 bytes replaced by U+FFFD): undecodable")
    report = traceview.analyze(path, cache=False)
    assert report["summary"]["busy_ns"] > 0


# ------------------------------------------------------------------ a hand-made TPU XSpace


def tpu_xspace(path: Path) -> Path:
    """Host plane with two step annotations and a source path naming a user; one TPU plane with an
    ``XLA Ops`` line (a fusion and an all-reduce per step), an ``XLA Modules`` line and ``Steps``."""
    from traceview.parsers.xspace.schema import xspace_class

    space = xspace_class()()
    space.hostnames.append("tpu-host-7")
    host, tpu = space.planes.add(name="/host:CPU"), space.planes.add(name="/device:TPU:0")
    events = {"train": 1, "fusion.1": 2, "all-reduce.3": 3, "jit_fn": 4, "0": 5, "1": 6}
    for plane in (host, tpu):
        for name, i in events.items():
            plane.event_metadata[i].id, plane.event_metadata[i].name = i, name
    hmeta: dict[str, int] = {}
    src = stat_id(hmeta, host, "experimental/users/davelacey/model.py:35")
    line = host.lines.add(id=1, name="python", timestamp_ns=1000)
    for step in range(2):
        ev = line.events.add(metadata_id=1, offset_ps=step * 10_000_000, duration_ps=9_000_000)
        ev.stats.add(metadata_id=stat_id(hmeta, host, "step_num"), int64_value=step)
        ev.stats.add(metadata_id=stat_id(hmeta, host, "source"), ref_value=src)
    dmeta: dict[str, int] = {}
    ops, modules, steps = (tpu.lines.add(id=i, name=n, timestamp_ns=1000)
                           for i, n in ((2, "XLA Ops"), (1, "XLA Modules"), (0, "Steps")))
    for step in range(2):
        t0 = step * 10_000_000 + 1_000_000
        steps.events.add(metadata_id=5 + step, offset_ps=t0, duration_ps=8_000_000)
        modules.events.add(metadata_id=4, offset_ps=t0, duration_ps=7_000_000)
        fusion = ops.events.add(metadata_id=2, offset_ps=t0, duration_ps=4_000_000)
        fusion.stats.add(metadata_id=stat_id(dmeta, tpu, "flops"), uint64_value=10**9)
        ops.events.add(metadata_id=3, offset_ps=t0 + 4_500_000, duration_ps=2_000_000)
    path.write_bytes(space.SerializeToString())
    return path


def test_tpu_planes_map_to_kernels_annotations_and_steps(tmp_path: Path) -> None:
    trace = traceview.load(tpu_xspace(tmp_path / "tpu.xplane.pb"))
    kinds, names = trace.kind_codes(), trace.names()
    kernels = kinds == int(Kind.KERNEL)
    assert sorted(names[kernels]) == ["all-reduce.3", "all-reduce.3", "fusion.1", "fusion.1"]
    assert set(trace.column("device")[kernels]) == {0} and set(trace.column("stream")[kernels]) == {2}
    assert int((kinds == int(Kind.GPU_ANNOTATION)).sum()) == 4  # modules and device steps
    assert trace.steps.column("step").to_pylist() == [0, 1]
    assert trace.steps.column("name").to_pylist() == ["train#0", "train#1"]
    info = trace.ranks[0]
    assert [d.name for d in info.devices] == ["TPU"]
    assert info.event_counts["events_read"] == info.event_counts["mapped"] == 10
    starts = trace.column("start_ns")[kernels]
    assert sorted(starts.tolist()) == [2000, 6500, 12000, 16500]  # 1000 ns + the offsets in ps


def test_tpu_all_reduce_is_xla_communication(tmp_path: Path) -> None:
    report = traceview.analyze(tpu_xspace(tmp_path / "tpu.xplane.pb"), cache=False)
    assert report["summary"]["communication_ns"] == 2 * 2000  # two all-reduce.3 of 2 us
    assert report["summary"]["busy_ns"] == 2 * (4000 + 2000)


def test_redaction_covers_the_user_in_source_paths_and_host_names(tmp_path: Path) -> None:
    src = tpu_xspace(tmp_path / "tpu.xplane.pb")
    assert b"davelacey" in src.read_bytes() and b"tpu-host-7" in src.read_bytes()
    out = tmp_path / "shared.xplane.pb"
    result = run_cli("redact", str(src), "-o", str(out), cache=True)
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    assert b"davelacey" not in data and b"tpu-host-7" not in data
    assert b"experimental/users/<redacted>/model.py" in data
    assert traceview.load(out).num_events == traceview.load(src).num_events


def test_without_protobuf_one_line_saying_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tpu_xspace(tmp_path / "tpu.xplane.pb")
    monkeypatch.setitem(sys.modules, "google.protobuf.message", None)
    with pytest.raises(TraceFormatError, match=r"pip install 'traceview\[xspace\]'"):
        traceview.load(src, use_cache=False)


def test_tpu_has_no_gpu_peak_and_efficiency_says_why(tmp_path: Path) -> None:
    options = traceview.Options(model_flops_per_step=1e12)
    report = traceview.analyze(tpu_xspace(tmp_path / "tpu.xplane.pb"), options, cache=False)
    warnings = report["analyses"]["efficiency"]["warnings"]
    assert any("TPU is not a GPU" in w for w in warnings), warnings
    assert report["summary"]["gpu_models"] == ["TPU"]


def gpu_xspace(path: Path) -> Path:
    """A GPU run's layout: host launch calls with correlation ids on a thread; ``/device:GPU:1`` with a
    ``Stream #14(Compute)`` line (a kernel with ``hlo_op`` and a memcpy, each with its correlation
    id), and the derived ``XLA Ops`` line beside it."""
    from traceview.parsers.xspace.schema import xspace_class

    space = xspace_class()()
    host, gpu = space.planes.add(name="/host:CPU"), space.planes.add(name="/device:GPU:1")
    for plane in (host, gpu):
        for i, name in enumerate(["cuLaunchKernel", "cuMemcpyHtoDAsync", "fusion.7", "MemcpyH2D"], 1):
            plane.event_metadata[i].id, plane.event_metadata[i].name = i, name
    hmeta: dict[str, int] = {}
    thread = host.lines.add(id=77, name="pjrt_thread", timestamp_ns=0)
    for corr, (meta, at) in enumerate(((1, 1_000_000), (2, 3_000_000)), 100):
        ev = thread.events.add(metadata_id=meta, offset_ps=at, duration_ps=500_000)
        ev.stats.add(metadata_id=stat_id(hmeta, host, "correlation_id"), uint64_value=corr)
    dmeta: dict[str, int] = {}
    stream = gpu.lines.add(id=14, name="Stream #14(Compute)", timestamp_ns=0)
    derived = gpu.lines.add(id=15, name="XLA Ops", timestamp_ns=0)
    for corr, (meta, at) in enumerate(((3, 2_000_000), (4, 4_000_000)), 100):
        ev = stream.events.add(metadata_id=meta, offset_ps=at, duration_ps=1_000_000)
        ev.stats.add(metadata_id=stat_id(dmeta, gpu, "correlation_id"), uint64_value=corr)
        if meta == 3:
            ev.stats.add(metadata_id=stat_id(dmeta, gpu, "hlo_op"), str_value="fusion.7")
    derived.events.add(metadata_id=3, offset_ps=2_000_000, duration_ps=1_000_000)
    path.write_bytes(space.SerializeToString())
    return path


def test_gpu_streams_launch_links_and_derived_lines(tmp_path: Path) -> None:
    trace = traceview.load(gpu_xspace(tmp_path / "gpu.xplane.pb"))
    kinds, names = trace.kind_codes(), trace.names()
    by_kind = {Kind(k).name.lower(): sorted(names[kinds == k]) for k in np.unique(kinds)}
    assert by_kind == {"kernel": ["fusion.7"], "memcpy": ["MemcpyH2D"], "runtime": ["cuLaunchKernel", "cuMemcpyHtoDAsync"],
                       "gpu_annotation": ["fusion.7"]}  # the XLA Ops view beside a stream: not counted twice
    src, dst = trace.launch_links()
    pairs = sorted((names[s], names[d]) for s, d in zip(src, dst))
    assert pairs == [("cuLaunchKernel", "fusion.7"), ("cuMemcpyHtoDAsync", "MemcpyH2D")]
    gpu_rows = np.isin(kinds, [int(Kind.KERNEL), int(Kind.MEMCPY)])
    assert set(trace.column("device")[gpu_rows]) == {1} and set(trace.column("stream")[gpu_rows]) == {14}


def test_aggregated_events_are_counted_not_placed(tmp_path: Path) -> None:
    from traceview.parsers.xspace.schema import xspace_class

    path = tpu_xspace(tmp_path / "tpu.xplane.pb")
    space = xspace_class()()
    space.ParseFromString(path.read_bytes())
    space.planes[1].lines[0].events.add(metadata_id=2, num_occurrences=12, duration_ps=5_000)
    path.write_bytes(space.SerializeToString())
    info = traceview.load(path).ranks[0]
    assert info.event_counts["events_read"] == 11 and info.event_counts["mapped"] == 10
    assert info.event_counts["skipped_aggregated"] == 1
    assert any("aggregated" in w for w in info.warnings)


def test_damaged_protobuf_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "host.xplane.pb"
    bad.write_bytes(b"\x0a\xff\xff\xff\xff\x0f/device:TPU:0")
    result = run_cli("info", str(bad))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "not a complete XSpace protobuf" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@slow
def test_every_app_page_renders_for_xspace_runs(runs: tuple[Path, Path], tmp_path: Path) -> None:
    """The app takes XSpace runs like any other (a JAX CPU run, a TPU and a GPU layout): every page
    draws (the timeline's CPU lanes hold zero-length XLA markers)."""
    pytest.importorskip("dash", reason="the app's extra (dash) is not installed")
    from traceview.app import pages
    from traceview.app.server import create_app

    inputs = [runs[0], tpu_xspace(tmp_path / "tpu.xplane.pb"), gpu_xspace(tmp_path / "gpu.xplane.pb")]
    ctl = create_app([str(p) for p in inputs], warm=False).traceview_controller
    assert len(ctl.store.runs) == 3
    for spec in ctl.store.runs:
        for page in pages.page_list():
            body, status = ctl.render_page(page.path, "", spec.id)
            assert spec.label in status
            assert "internal error" not in str(body), (spec.label, page.path)


def test_info_sql_convert_take_the_format(tmp_path: Path) -> None:
    src = tpu_xspace(tmp_path / "tpu.xplane.pb")
    info = run_cli("info", str(src))
    assert info.returncode == 0 and "xspace" in info.stdout and "TPU" in info.stdout, info.stderr
    sql = run_cli("sql", str(src), "select name, count(*) as n from events where kind = 'kernel' group by 1 order by 1")
    assert sql.returncode == 0 and "all-reduce.3" in sql.stdout and "fusion.1" in sql.stdout, sql.stderr
    out = tmp_path / "parquet"
    convert = run_cli("convert", str(src), "-o", str(out))
    assert convert.returncode == 0, convert.stderr
    import pyarrow.parquet as pq

    assert pq.read_table(out / "events.parquet").num_rows == 10
    assert pq.read_table(out / "steps.parquet").column("name").to_pylist() == ["train#0", "train#1"]
