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


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """The command as a user runs it (its errors as one line, exit 2)."""
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args, "--no-cache"], capture_output=True,
                          text=True, timeout=300)


pytestmark = pytest.mark.slow  # two JAX profiles recorded: ~15 s on the shared machine


def test_jax_profile_steps_ops_and_names(runs: tuple[Path, Path]) -> None:
    trace = traceview.load(runs[0])  # the run folder: its XSpace, the JSON views beside it skipped
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
    assert abs(gpu_busy - busy) <= len(ops)  # ns flooring: under 1 ns per op


def test_same_program_twice_diffs_cleanly(runs: tuple[Path, Path]) -> None:
    result = run_cli("diff", str(_xplane(runs[0])), str(_xplane(runs[1])))
    assert result.returncode == 0, (result.stdout + result.stderr)
    assert "Traceback" not in (result.stdout + result.stderr)


def test_mixed_runs_in_one_folder_exit_2(runs: tuple[Path, Path], tmp_path: Path) -> None:
    profile = tmp_path / "plugins" / "profile"
    for i, run in enumerate(runs):
        shutil.copytree(run, profile / f"run{i}")
    result = run_cli("analyze", str(tmp_path))
    assert result.returncode == 2
    line = (result.stdout + result.stderr).strip()
    assert "2 runs" in line and "give one run's folder" in line and "Traceback" not in line


def test_truncated_protobuf_exit_2(runs: tuple[Path, Path], tmp_path: Path) -> None:
    data = _xplane(runs[0]).read_bytes()
    bad = tmp_path / "host.xplane.pb"
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(TraceFormatError, match="not a complete XSpace protobuf"):
        traceview.load(bad)
    result = run_cli("analyze", str(bad))
    assert result.returncode == 2 and len((result.stdout + result.stderr).strip().splitlines()) <= 2, (result.stdout + result.stderr)


def test_json_view_named_explicitly_loads(runs: tuple[Path, Path]) -> None:
    """The perfetto_trace.json.gz beside the XSpace is Chrome-trace JSON: the Kineto reader takes it."""
    view = runs[0] / "perfetto_trace.json.gz"
    with gzip.open(view, "rb") as f:
        assert b'"traceEvents"' in f.read(4096)
    trace = traceview.load(view)
    assert trace.num_events > 0


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
