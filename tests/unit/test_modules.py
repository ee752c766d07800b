"""GPU time by module, layer and range (analyses/modules.py, docs/metrics.md "Modules and ranges"):
hand-made trees with known answers, and on real traces an independent recount."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builders import TraceBuilder
from traceview import intervals as iv
from traceview.analyses import run_all
from traceview.loading import load
from traceview.model import Kind

US = 1000
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces"


def modules(trace):
    return run_all(trace, only=["modules"])["modules"]


def two_layers() -> TraceBuilder:
    """Model_0 > Layer_0 > Linear_0, Model_0 > Layer_1 > Linear_0: one kernel each Linear, one in Layer_1 itself."""
    b = TraceBuilder()
    b.step(1, 0, 1000 * US)
    b.op("nn.Module: Model_0", 10 * US, 900 * US, kind=Kind.PYTHON_FUNCTION)
    for i, base in enumerate((20, 400)):
        b.op(f"nn.Module: Layer_{i}", base * US, 300 * US, kind=Kind.PYTHON_FUNCTION)
        b.op("nn.Module: Linear_0", (base + 10) * US, 100 * US, kind=Kind.PYTHON_FUNCTION)
        b.launched("cudaLaunchKernel", (base + 20) * US, 5 * US, (base + 30) * US, 50 * US)
    b.launched("cudaLaunchKernel", 600 * US, 5 * US, 610 * US, 40 * US)  # in Layer_1, outside its Linear
    b.launched("cudaLaunchKernel", 950 * US, 5 * US, 960 * US, 20 * US)  # after Model_0: unattributed
    return b


def test_paths_type_paths_and_inclusive_exclusive_times():
    result = modules(two_layers().build())
    gpu = result.tables["range_gpu"].set_index("path")
    assert gpu.loc["Model_0", "inclusive_ns"] == (50 + 50 + 40) * US
    assert gpu.loc["Model_0", "exclusive_ns"] == 0
    assert gpu.loc["Model_0/Layer_1", "inclusive_ns"] == 90 * US
    assert gpu.loc["Model_0/Layer_1", "exclusive_ns"] == 40 * US
    assert gpu.loc["Model_0/Layer_0/Linear_0", "kernels"] == 1
    types = result.tables["type_paths"].set_index("type_path")
    assert types.loc["Model/Layer/Linear", "instances"] == 2
    assert types.loc["Model/Layer/Linear", "inclusive_ns"] == 100 * US
    rules = result.tables["attribution"].set_index("rule")
    assert rules.loc["attributed", "gpu_ns"] + rules.loc["unattributed", "gpu_ns"] == rules.loc["attributed", "busy_ns"]
    assert rules.loc["unattributed", "gpu_ns"] == 20 * US
    ranges = result.tables["ranges"]
    assert list(ranges["depth"]) == [0, 1, 2, 1, 2]
    assert list(ranges["parent_id"]) == [-1, 0, 1, 0, 3]


def test_a_backward_kernel_counts_for_its_forward_module():
    b = TraceBuilder()
    b.step(1, 0, 1000 * US)
    b.op("nn.Module: Linear_0", 10 * US, 100 * US, kind=Kind.PYTHON_FUNCTION)
    fwd = b.op("aten::linear", 20 * US, 50 * US)
    bwd = b.op("AddmmBackward0", 500 * US, 100 * US, tid=2)  # autograd's thread: no module open
    b.launched("cudaLaunchKernel", 510 * US, 5 * US, 520 * US, 30 * US, tid=2, op=bwd)
    b.flow(fwd, bwd)
    trace = b.build()
    result = modules(trace)
    gpu = result.tables["range_gpu"].set_index("path")
    assert gpu.loc["Linear_0", "inclusive_ns"] == 30 * US and gpu.loc["Linear_0", "backward_ns"] == 30 * US
    assert result.tables["attribution"].set_index("rule").loc["backward", "activities"] == 1


def test_a_rank_without_ranges_says_so():
    b = TraceBuilder()
    b.launched("cudaLaunchKernel", 0, 5 * US, 10 * US, 10 * US)
    result = modules(b.build())
    assert result.tables["range_gpu"].empty
    assert any("no nn.Module" in w for _, w in result.rank_warnings)


def test_nesting_parents_match_a_plain_stack():
    rng = np.random.default_rng(3)
    starts, ends, keys = [], [], []
    for key in range(3):  # random nested intervals: split ranges recursively
        stack = [(0, 10_000, 0)]
        while stack:
            lo, hi, depth = stack.pop()
            starts.append(lo), ends.append(hi), keys.append(key)
            if depth < 4 and hi - lo > 10:
                cuts = np.sort(rng.integers(lo + 1, hi, size=4))
                for a, b in zip(cuts[::2], cuts[1::2]):
                    if b > a:
                        stack.append((int(a), int(b), depth + 1))
    s, e, k = np.array(starts), np.array(ends), np.array(keys)
    parents = iv.nesting_parents(k, s, e)
    for i in range(s.size):  # the innermost other interval of the group containing it
        inside = [j for j in range(s.size) if j != i and k[j] == k[i] and s[j] <= s[i] and e[i] <= e[j]]
        best = min(inside, key=lambda j: (e[j] - s[j], -j)) if inside else -1
        if best >= 0 and parents[i] >= 0:
            assert e[parents[i]] - s[parents[i]] == e[best] - s[best]
        else:
            assert parents[i] == best


REAL = ["kineto/tracelens_qwen05b_h100.json.gz", "kineto/tracelens_resnet_actckpt_mi300x_rank0.json.gz",
        "nsys/torchrun_2xh100_nccl_2026.2.sqlite", "nsys/fuser_matmul_h100_2024.6.sqlite"]


@pytest.mark.parametrize("name", REAL)
def test_on_real_traces_the_attribution_adds_up_and_a_recount_agrees(name):
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared real traces are not on this machine)")
    trace = load([path])
    result = modules(trace)
    rules = result.tables["attribution"]
    for _, mine in rules.groupby("rank"):
        by = mine.set_index("rule")
        assert by.loc["attributed", "gpu_ns"] + by.loc["unattributed", "gpu_ns"] == by.loc["attributed", "busy_ns"]
    # independent recount: kernels whose launch call (by correlation) started inside a range's time span
    # on its thread, counted for the innermost such range, summed over the top-level ranges' subtrees
    ranges, gpu = result.tables["ranges"], result.tables["range_gpu"]
    api, act = trace.launch_links()
    kinds = trace.kind_codes()[act]
    keep = np.isin(kinds, [int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET)])
    api = api[keep]
    start = trace.column("start_ns")[api]
    tid, rank = trace.column("tid")[api], trace.column("rank")[api]
    recount = 0
    # the host threads' ranges (a device's own ranges hold the activity none of these holds: rule device)
    top = ranges[(ranges["depth"] == 0) & (ranges["kind"] != "device")]
    for r in top.itertuples():
        recount += int(((rank == r.rank) & (tid == r.tid) & (start >= r.start_ns) & (start < r.end_ns)).sum())
    host = gpu[(gpu["depth"] == 0) & (gpu["kind"] != "device")]
    counted = int(host["kernels"].sum())  # inclusive: every kernel of the subtrees
    by_rule = rules.set_index("rule")
    backward = int(by_rule.loc["backward", "activities"].sum()) if "backward" in by_rule.index else 0
    assert counted - backward == recount


def test_the_summary_names_the_layers_and_the_first_screen_prints_them():
    path = SHARED / "kineto/tracelens_qwen05b_h100.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared real traces are not on this machine)")
    import traceview
    from traceview.render.common import layers_text, short_path

    report = traceview.analyze(path, cache=False)
    layers = report["summary"]["top_layers"]
    assert layers[0]["type_path"] == "Qwen2Model/Qwen2DecoderLayer/Qwen2Attention"
    assert all(layer["share"] >= 0.10 for layer in layers)
    assert 0.5 < report["summary"]["attributed_share"] <= 1.0
    assert layers_text(report).startswith("…/Qwen2DecoderLayer/Qwen2Attention 34.")
    assert short_path("A/B") == "A/B" and short_path("A/B/C") == "…/B/C"


def test_exposed_communication_inside_a_range():
    b = TraceBuilder()
    b.step(1, 0, 1000 * US)
    b.op("nn.Module: Block_0", 10 * US, 500 * US, kind=Kind.PYTHON_FUNCTION)
    b.launched("cudaLaunchKernel", 20 * US, 5 * US, 100 * US, 100 * US, stream=7)  # compute 100-200
    api = b.runtime("ncclKernel launch", 30 * US, 5 * US)
    kernel = b.nccl(150 * US, 200 * US)  # 150-350: 50 us under compute, 150 us exposed
    b.launch(api, kernel)
    gpu = modules(b.build()).tables["range_gpu"].set_index("path")
    assert gpu.loc["Block_0", "communication_ns"] == 200 * US
    assert gpu.loc["Block_0", "exposed_comm_ns"] == 150 * US
