"""``benchmarks/gen_nsys_nvtx.py``: a small generated export loads with the NVTX ranges, nesting,
launches and links it was built with (its truth), and the commands accept it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import traceview
from traceview.model import Kind
from traceview.parsers.nsys import parse_nsys

REPO = Path(__file__).resolve().parents[2]


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_nsys_nvtx", REPO / "benchmarks" / "gen_nsys_nvtx.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """1,000 requested ranges, 10 layers per step (so several steps, the last one partial)."""
    path = tmp_path_factory.mktemp("nvtx") / "nvtx_1000.sqlite"
    truth = gen.generate(path, 1000, layers_per_step=10, quiet=True)
    return path, truth, parse_nsys(path)


def _depths(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of each range on one thread, by a stack over the ranges in start order (an
    independent recount: the generator never computes depths this way)."""
    order = np.lexsort((-end, start))
    depth = np.empty(len(start), dtype=np.int64)
    stack: list[int] = []
    for i in order.tolist():
        while stack and end[stack[-1]] <= start[i]:
            stack.pop()
        if stack:
            assert end[i] <= end[stack[-1]], "ranges overlap without nesting"
        depth[i] = len(stack)
        stack.append(i)
    return depth


def test_the_count_is_rounded_up_to_whole_layers(small) -> None:
    _, truth, _ = small
    per_layer = truth["ranges_per_layer"]
    assert 1000 <= truth["nvtx_ranges"] < 1000 + per_layer
    assert truth["nvtx_ranges"] == truth["steps"] + truth["layers"] * per_layer
    assert truth["steps"] == -(-truth["layers"] // 10) > 1
    with pytest.raises(ValueError):
        gen.plan(5)
    assert [gen.parse_count(s) for s in ("1e6", "10M", "500k", "1_000")] == [1_000_000, 10_000_000, 500_000, 1000]


def test_ranges_load_with_their_names_and_nesting(small) -> None:
    _, truth, tr = small
    kind, names = tr.kind_codes(), np.asarray(tr.events.column("name").to_pylist(), dtype=object)
    ranges = kind == int(Kind.ANNOTATION)
    assert int(ranges.sum()) == truth["nvtx_ranges"]
    assert not any(", op_id" in n or ", seq" in n for n in names[ranges])  # emit_nvtx's suffix removed
    assert int((names[ranges] == "attention").sum()) == truth["layers"]
    assert {n for n in names[ranges] if n.startswith("layer_")} == {f"layer_{i}" for i in range(10)}
    start, end = tr.column("start_ns")[ranges], tr.column("start_ns")[ranges] + tr.column("dur_ns")[ranges]
    counted = dict(zip(*np.unique(_depths(start, end), return_counts=True)))
    assert {str(int(d)): int(n) for d, n in counted.items()} == truth["ranges_by_depth"]
    assert tr.steps.num_rows == truth["steps"]


def test_every_launch_links_its_kernel_inside_an_op_range(small) -> None:
    _, truth, tr = small
    kind = tr.kind_codes()
    assert int((kind == int(Kind.KERNEL)).sum()) == truth["kernels"]
    assert int((kind == int(Kind.RUNTIME)).sum()) == truth["runtime_calls"]
    api, gpu = tr.launch_links()
    assert len(api) == truth["launches"] == len(np.unique(gpu))
    assert (kind[api] == int(Kind.RUNTIME)).all() and (kind[gpu] == int(Kind.KERNEL)).all()
    start, dur = tr.column("start_ns"), tr.column("dur_ns")
    assert (start[gpu] > start[api] + dur[api]).all()  # kernels start after their launch returns
    assert int(dur[gpu].sum()) == truth["gpu_busy_ns"]
    # the innermost range open at each launch is an aten op (stab by the deepest containing range)
    names = np.asarray(tr.events.column("name").to_pylist(), dtype=object)
    rows = np.flatnonzero(kind == int(Kind.ANNOTATION))
    r_start, r_end = start[rows], start[rows] + dur[rows]
    innermost = []
    for t in start[api].tolist():
        inside = rows[(r_start <= t) & (t < r_end)]
        innermost.append(names[inside[np.argmax(start[inside])]])
    assert set(innermost) == set(truth["gpu_ns_by_op"])


def test_the_modules_analysis_projects_it_as_built(small) -> None:
    path, truth, _ = small
    report = traceview.analyze(path, cache=False)
    if "modules" not in report["analyses"]:
        pytest.skip("no modules analysis registered")
    tp = report.tables("modules")["type_paths"].set_index("type_path")["inclusive_ns"]
    assert {b: int(tp[f"step/layer/{b}"]) for b in truth["gpu_ns_by_block"]} == truth["gpu_ns_by_block"]
    assert report["summary"]["attributed_share"] == pytest.approx(1.0)


@pytest.mark.parametrize("command", ["info", "analyze"])
def test_the_commands_accept_it(small, tmp_path, command) -> None:
    path, truth, _ = small
    env = dict(os.environ, COLUMNS="160", TRACEVIEW_CACHE_DIR=str(tmp_path / "cache"))
    shown = subprocess.run([sys.executable, "-m", "traceview.cli", command, str(path)],
                           capture_output=True, text=True, env=env, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert "Traceback" not in shown.stderr
    if command == "info":
        assert path.name in shown.stdout and f"annotation {truth['nvtx_ranges']:,}" in shown.stdout
    else:
        assert f"{truth['steps']} steps per rank" in shown.stdout
