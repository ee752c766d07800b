"""Per-op cost models (analyses/opmodels.py).

The FLOPs are checked against ``torch.utils.flop_counter.FlopCounterMode`` (torch on the CPU): the
real op runs under the counter and under the PyTorch profiler with ``record_shapes=True``, and the
profiler's own Kineto records (names, "Input Dims", "Input type", "Input Strides", "Concrete
Inputs") are what the models read. Ops that only run on a GPU (cuDNN/MIOpen convolution, flash and
efficient attention, ``_scaled_mm``) get records built from torch's own schema of the op, so the
argument positions the models use are checked against the schema, and their FLOPs against
flop_counter's formulas for the same shapes. Norms, softmax, elementwise ops and reductions, which
flop_counter does not count, are checked against the closed forms of docs/metrics.md.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any, Callable

import pytest

from traceview.analyses.opmodels import (OUTPUT_FROM_BACKWARD, SIZES_FROM_CALLER, OpCost, Unmodelled, model_op,
                                         modelled_ops, op_cost)

SHARED = Path("/work/shared/traces/kineto")

# --------------------------------------------------------------------------------------- helpers


def _torch() -> Any:
    return pytest.importorskip("torch")


def recorded(fn: Callable[[], Any], tmp_path: Path) -> list[dict]:
    """The CPU ops ``fn`` runs, as the PyTorch profiler's Kineto trace records them."""
    torch = _torch()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    path = tmp_path / f"trace_{len(list(tmp_path.iterdir()))}.json"
    prof.export_chrome_trace(str(path))
    del torch
    return [_record(e) for e in json.loads(path.read_text())["traceEvents"]
            if e.get("ph") == "X" and "Input Dims" in e.get("args", {})]


def _record(event: dict) -> dict:
    args = event["args"]
    return {"name": event["name"], "dims": args["Input Dims"], "types": args["Input type"],
            "strides": args.get("Input Strides"), "concrete": args.get("Concrete Inputs"),
            "tid": event.get("tid"), "ts": float(event["ts"]), "end": float(event["ts"]) + float(event.get("dur", 0))}


def cost(rec: dict, leaf: bool = False) -> OpCost | Unmodelled:
    return model_op(rec["name"], rec["dims"], rec["types"], rec["strides"], rec["concrete"], leaf=leaf)


def tensor_flops(records: list[dict]) -> int:
    """FLOPs of the matrix-unit ops, each counted at the innermost recorded op that has a product
    model (a composite op with none under it, like _convolution of a transposed CPU convolution,
    is its own leaf)."""
    def is_product(r: dict) -> bool:
        c = cost(r, leaf=True)
        return isinstance(c, OpCost) and c.unit == "tensor"

    products = [r for r in records if is_product(r)]
    total = 0
    for r in products:
        inside = [c for c in products if c is not r and c["tid"] == r["tid"] and r["ts"] <= c["ts"] and c["end"] <= r["end"]]
        c = cost(r, leaf=not inside)
        if isinstance(c, OpCost):
            total += c.flops
    return total


def counted(fn: Callable[[], Any]) -> dict[str, int]:
    """FlopCounterMode's FLOPs of ``fn`` by ATen op name, and the total."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as mode:
        fn()
    by_op = {str(op).split(".")[-1]: n for op, n in mode.get_flop_counts()["Global"].items()}
    return {**by_op, "total": mode.get_total_flops()}


class T:
    """A tensor argument of a schema-built record."""

    def __init__(self, shape: list[int], type_name: str = "float") -> None:
        self.shape, self.type_name = shape, type_name


def schema_record(op: str, overload: str = "default", **values: Any) -> dict:
    """The record Kineto would write for ``aten::op`` called with ``values`` (by argument name), its
    argument order taken from torch's schema of the op."""
    torch = _torch()
    schema = getattr(getattr(torch.ops.aten, op), overload)._schema
    dims: list[list[int]] = []
    types: list[str] = []
    concrete: list[str] = []
    for arg in schema.arguments:
        value = values.pop(arg.name, None)
        if isinstance(value, T):
            entry = (value.shape, value.type_name, "")
        elif value is None:
            entry = ([], "", "")
        else:
            text = str(value) if not isinstance(value, list) else "[" + ", ".join(map(str, value)) + "]"
            entry = ([], "ScalarList" if isinstance(value, list) else "Scalar", text)
        dims.append(entry[0])
        types.append(entry[1])
        concrete.append(entry[2])
    assert not values, f"{op} has no argument {sorted(values)}"
    return {"name": f"aten::{op}", "dims": dims, "types": types, "strides": None, "concrete": concrete}


def only(records: list[dict], name: str) -> list[dict]:
    found = [r for r in records if r["name"] == name]
    assert found, f"the profiler recorded no {name}: {sorted({r['name'] for r in records})}"
    return found


# --------------------------------------------------------------------------------------- matrix products


@pytest.mark.parametrize("case", ["mm", "addmm", "bmm", "baddbmm", "linear2d", "linear3d_nobias", "matmul3d",
                                  "matmul_batched"])
def test_gemm_family_flops_match_flop_counter(case, tmp_path):
    torch = _torch()
    a, b = torch.randn(7, 5), torch.randn(5, 3)
    fns = {
        "mm": lambda: torch.mm(a, b),
        "addmm": lambda: torch.addmm(torch.randn(3), a, b),
        "bmm": lambda: torch.bmm(torch.randn(4, 7, 5), torch.randn(4, 5, 3)),
        "baddbmm": lambda: torch.baddbmm(torch.randn(4, 7, 3), torch.randn(4, 7, 5), torch.randn(4, 5, 3)),
        "linear2d": lambda: torch.nn.functional.linear(a, torch.randn(3, 5), torch.randn(3)),
        "linear3d_nobias": lambda: torch.nn.functional.linear(torch.randn(2, 7, 5), torch.randn(3, 5)),
        "matmul3d": lambda: torch.matmul(torch.randn(2, 7, 5), b),
        "matmul_batched": lambda: torch.matmul(torch.randn(2, 7, 5), torch.randn(2, 5, 3)),
    }
    records = recorded(fns[case], tmp_path)
    expected = counted(fns[case])["total"]
    assert expected > 0
    assert tensor_flops(records) == expected
    for r in records:  # the composite ops are counted at their leaf, never twice
        if r["name"] in ("aten::matmul", "aten::linear"):
            assert cost(r) == Unmodelled("counted_at_leaf", cost(r).detail)


def test_gemm_bytes_dtype_and_broadcast_operand():
    mm = op_cost("aten::mm", [[8944, 1024], [1024, 1024]], ["c10::BFloat16", "c10::BFloat16"],
                 [[1024, 1], [1, 1024]], ["", ""])
    assert mm == OpCost(2 * 8944 * 1024 * 1024, (8944 * 1024 + 1024 * 1024) * 2, 8944 * 1024 * 2, "bf16", "tensor",
                        "gemm")
    # an expanded operand (stride 0) is read once per distinct element
    expanded = op_cost("aten::bmm", [[4, 7, 5], [4, 5, 3]], ["float", "float"], [[35, 5, 1], [0, 3, 1]])
    assert expanded is not None and expanded.bytes_read == (4 * 7 * 5 + 5 * 3) * 4
    # addmm reads its bias; beta=0 does not read it
    bias = op_cost("aten::addmm", [[3], [7, 5], [5, 3], [], []], ["float"] * 3 + ["Scalar"] * 2, None,
                   ["", "", "", "1", "1"])
    no_bias = op_cost("aten::addmm", [[3], [7, 5], [5, 3], [], []], ["float"] * 3 + ["Scalar"] * 2, None,
                      ["", "", "", "0", "1"])
    assert bias is not None and no_bias is not None and bias.bytes_read - no_bias.bytes_read == 3 * 4
    # torch.compile's extern mm(a, b, out=buf) records the output as a third argument
    out = op_cost("aten::mm", [[64, 32], [32, 16], [64, 16]], ["c10::BFloat16"] * 3, None, ["", "", ""])
    assert out is not None and out.flops == 2 * 64 * 32 * 16


def test_scaled_mm_fp8_matches_flop_counter_formula():
    torch = _torch()
    from torch.utils.flop_counter import flop_registry

    fp8 = "c10::Float8_e4m3fn"
    rec = schema_record("_scaled_mm", self=T([64, 128], fp8), mat2=T([128, 32], fp8), scale_a=T([]), scale_b=T([]),
                        out_dtype=15, use_fast_accum=False)  # 15: ScalarType BFloat16
    c = cost(rec)
    assert isinstance(c, OpCost)
    assert c.flops == flop_registry[torch.ops.aten._scaled_mm]((64, 128), (128, 32), (), ())
    assert (c.dtype, c.unit, c.bytes_written) == ("fp8", "tensor", 64 * 32 * 2)
    assert c.bytes_read == 64 * 128 + 128 * 32 + 2 * 4
    rec["concrete"] = None  # a trace without Concrete Inputs: the result type is unknown
    assert cost(rec).reason == "missing_argument"


# --------------------------------------------------------------------------------------- convolution

CONV_CASES = [  # (spatial dims, N, Cin, Cout, kernel, stride, padding, dilation, groups, size)
    (2, 2, 4, 6, 3, 1, 1, 1, 1, 9),
    (2, 2, 4, 6, 3, 2, 1, 1, 2, 9),
    (2, 1, 6, 6, 3, 1, 0, 2, 6, 11),  # depthwise, dilated
    (1, 2, 3, 4, 5, 3, 2, 1, 1, 17),
    (3, 1, 2, 4, 3, 2, 1, 1, 2, 6),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_convolution_forward_and_backward_flops(case, tmp_path):
    torch = _torch()
    dims, n, c_in, c_out, k, stride, padding, dilation, groups, size = case
    x = torch.randn(n, c_in, *[size] * dims, requires_grad=True)
    w = torch.randn(c_out, c_in // groups, *[k] * dims, requires_grad=True)
    conv = getattr(torch.nn.functional, f"conv{dims}d")

    def forward_backward():
        conv(x, w, torch.randn(c_out), stride=stride, padding=padding, dilation=dilation, groups=groups).sum().backward()

    records = recorded(forward_backward, tmp_path)
    fc = counted(forward_backward)
    out_size = (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    closed_form = 2 * n * c_out * out_size ** dims * (c_in // groups) * k ** dims
    assert fc["convolution"] == closed_form
    backward = [cost(r) for r in only(records, "aten::convolution_backward")]
    assert all(isinstance(c, OpCost) for c in backward)
    backward_flops = sum(c.flops for c in backward if isinstance(c, OpCost))
    # grad_input and grad_weight are each a convolution as large as the forward one
    assert backward_flops == 2 * closed_form
    if groups == 1:
        assert backward_flops == fc["convolution_backward"]
    else:  # flop_counter's grad_weight term uses all input channels: `groups` times the forward
        assert fc["convolution_backward"] == closed_form * (1 + groups)
    assert tensor_flops(records) == closed_form + backward_flops


def test_transposed_convolution_matches_flop_counter(tmp_path):
    torch = _torch()
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)

    def fn():
        torch.nn.functional.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1).sum().backward()

    records = recorded(fn, tmp_path)
    assert tensor_flops(records) == counted(fn)["total"] > 0
    # on the CPU no backend op is recorded under _convolution: it is the leaf
    conv = only(records, "aten::_convolution")[0]
    assert cost(conv).reason == "counted_at_leaf"
    assert cost(conv, leaf=True).flops == counted(lambda: torch.nn.functional.conv_transpose2d(
        x, w, stride=2, padding=1, output_padding=1))["total"]


def test_gpu_convolution_ops_read_their_schema_positions():
    """cudnn/miopen convolution put padding before stride (unlike convolution): a swapped pair
    would change the output size and so the FLOPs."""
    x, w = T([2, 8, 15, 15], "c10::BFloat16"), T([16, 4, 3, 3], "c10::BFloat16")
    out = (15 + 2 * 1 - 2) // 2 + 1
    expected = 2 * 2 * 16 * out * out * 4 * 9
    common: dict[str, Any] = dict(padding=[1, 1], stride=[2, 2], dilation=[1, 1], groups=2, benchmark=False,
                                  deterministic=False)
    for rec in (schema_record("cudnn_convolution", self=x, weight=w, allow_tf32=True, **common),
                schema_record("miopen_convolution", self=x, weight=w, bias=None, **common),
                schema_record("mkldnn_convolution", self=x, weight=w, bias=None, padding=[1, 1], stride=[2, 2],
                              dilation=[1, 1], groups=2)):
        c = cost(rec)
        assert isinstance(c, OpCost) and c.flops == expected, rec["name"]
        assert c.bytes_written == 2 * 16 * out * out * 2
    transpose = schema_record("cudnn_convolution_transpose", self=T([2, 8, 5, 5]), weight=T([8, 3, 3, 3]),
                              padding=[1, 1], output_padding=[1, 1], stride=[2, 2], dilation=[1, 1], groups=2,
                              benchmark=False, deterministic=False, allow_tf32=True)
    assert cost(transpose).flops == 2 * 2 * 8 * 25 * 3 * 9  # every input point times the weight's fan-out


def test_cudnn_convolution_without_concrete_inputs_is_not_guessed():
    """2021 traces record no Concrete Inputs: stride and padding, hence the output, are unknown."""
    rec = {"name": "aten::cudnn_convolution", "dims": [[32, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], [], [], []],
           "types": ["float", "float", "GenericList", "GenericList", "GenericList", "Int", "Bool", "Bool", "Bool"],
           "strides": None, "concrete": None}
    c = cost(rec)
    assert isinstance(c, Unmodelled) and c.reason == "missing_argument" and "stride not recorded" in c.detail


# cudnn_convolution_backward_input/_weight (PyTorch 1.x; torch 2 has only convolution_backward):
# (self_size or weight_size, grad_output, weight or self, padding, stride, dilation, groups,
# benchmark, deterministic, allow_tf32), as tbplugin_resnet50_v100_2021 records them (shapes only)
V100_BACKWARD_INPUT = ([[], [32, 2048, 7, 7], [2048, 512, 1, 1], [], [], [], [], [], [], []],
                       ["GenericList", "float", "float", "GenericList", "GenericList", "GenericList", "Int", "Bool",
                        "Bool", "Bool"])
V100_BACKWARD_WEIGHT = ([[], [32, 2048, 7, 7], [32, 512, 7, 7], [], [], [], [], [], [], []], V100_BACKWARD_INPUT[1])


def _list_text(values: list[int]) -> str:
    return "[" + ", ".join(map(str, values)) + "]"


def split_backward_record(which: str, size: list[int], g: list[int], other: list[int], stride: int, padding: int,
                          dilation: int, groups: int | None, prefix: str = "cudnn") -> dict:
    """A record of ``aten::{prefix}_convolution_backward_{which}`` in the old schema, with Concrete
    Inputs as a newer profiler would write them (groups "" when not recorded)."""
    dims, types = (list(x) for x in V100_BACKWARD_INPUT)
    dims[1], dims[2] = g, other
    spatial = len(g) - 2
    concrete = [_list_text(size), "", "", _list_text([padding] * spatial), _list_text([stride] * spatial),
                _list_text([dilation] * spatial), "" if groups is None else str(groups), "False", "False", "True"]
    return {"name": f"aten::{prefix}_convolution_backward_{which}", "dims": dims, "types": types, "strides": None,
            "concrete": concrete}


@pytest.mark.parametrize("case", CONV_CASES)
def test_split_convolution_backward_matches_flop_counter(case):
    """backward_input and backward_weight are each the forward's product; flop_counter counts the
    same shapes through aten::convolution_backward with one output asked for."""
    torch = _torch()
    dims, n, c_in, c_out, k, stride, padding, dilation, groups, size = case
    x = torch.randn(n, c_in, *[size] * dims)
    w = torch.randn(c_out, c_in // groups, *[k] * dims)
    g = torch.ops.aten.convolution(x, w, None, [stride] * dims, [padding] * dims, [dilation] * dims, False,
                                   [0] * dims, groups)

    def backward(mask: list[bool]) -> int:
        return counted(lambda: torch.ops.aten.convolution_backward(
            g, x, w, None, [stride] * dims, [padding] * dims, [dilation] * dims, False, [0] * dims, groups, mask))[
            "total"]

    forward = counted(lambda: torch.ops.aten.convolution(x, w, None, [stride] * dims, [padding] * dims,
                                                         [dilation] * dims, False, [0] * dims, groups))["total"]
    shapes = [list(t.shape) for t in (x, g, w)]
    for prefix in ("cudnn", "miopen", "miopen_depthwise"):
        grad_input = cost(split_backward_record("input", shapes[0], shapes[1], shapes[2], stride, padding, dilation,
                                                groups, prefix))
        grad_weight = cost(split_backward_record("weight", shapes[2], shapes[1], shapes[0], stride, padding, dilation,
                                                 None, prefix))
        assert isinstance(grad_input, OpCost) and isinstance(grad_weight, OpCost)
        assert grad_input.flops == backward([True, False, False]) == forward
        # flop_counter's grad_weight term uses all input channels: groups times the forward
        assert grad_weight.flops * groups == backward([False, True, False]) and grad_weight.flops == forward
        assert (grad_input.bytes_read, grad_input.bytes_written) == ((g.numel() + w.numel()) * 4, x.numel() * 4)
        assert (grad_weight.bytes_read, grad_weight.bytes_written) == ((g.numel() + x.numel()) * 4, w.numel() * 4)
        assert grad_input.unit == grad_weight.unit == "tensor"


def test_split_convolution_backward_needs_its_size_argument():
    """Before "Concrete Inputs" the int[] self_size / weight_size is not recorded: grad_input's bytes
    (its spatial size needs stride and padding) and grad_weight's kernel size are unknown."""
    for name, (dims, types), what in (("input", V100_BACKWARD_INPUT, "self_size"),
                                      ("weight", V100_BACKWARD_WEIGHT, "weight_size")):
        c = model_op(f"aten::cudnn_convolution_backward_{name}", dims, types)
        assert isinstance(c, Unmodelled) and c.reason == "missing_argument" and what in c.detail
    # the same records with the size recorded: a 1x1 convolution, 2048 -> 512 channels, 7x7 output
    grad_input = cost(split_backward_record("input", [32, 512, 7, 7], [32, 2048, 7, 7], [2048, 512, 1, 1], 1, 0, 1, 1))
    assert grad_input == OpCost(2 * 32 * 2048 * 49 * 512, (32 * 2048 * 49 + 2048 * 512) * 4, 32 * 512 * 49 * 4,
                                "fp32", "tensor", "conv_backward")
    grad_weight = cost(split_backward_record("weight", [2048, 512, 1, 1], [32, 2048, 7, 7], [32, 512, 7, 7], 1, 0, 1,
                                             None))
    assert isinstance(grad_weight, OpCost) and grad_weight.flops == 2 * 32 * 2048 * 49 * 512
    # groups that do not fit the channels, and a weight whose output channels are not grad_output's
    wrong_groups = split_backward_record("input", [32, 512, 7, 7], [32, 2048, 7, 7], [2048, 512, 1, 1], 1, 0, 1, 2)
    wrong_weight = split_backward_record("weight", [1024, 512, 1, 1], [32, 2048, 7, 7], [32, 512, 7, 7], 1, 0, 1, 1)
    # a recorded stride of 2 cannot give a 7x7 output from a 7x7 input with a 1x1 kernel
    wrong_stride = split_backward_record("input", [32, 512, 7, 7], [32, 2048, 7, 7], [2048, 512, 1, 1], 2, 0, 1, 1)
    for rec in (wrong_groups, wrong_weight, wrong_stride):
        assert cost(rec).reason == "inconsistent_shapes", rec


def test_split_convolution_backward_takes_its_size_from_the_calling_op():
    """PyTorch 1.x: cudnn_convolution_backward(self, grad_output, weight, ...) calls
    _backward_input(self.sizes(), grad_output, weight, ...) and _backward_weight(weight.sizes(),
    grad_output, self, ...): the caller's recorded shapes give the int[] argument, once the
    tensors both record are the same; with any other caller nothing is taken."""
    caller = [[32, 512, 7, 7], [32, 2048, 7, 7], [2048, 512, 1, 1]] + [[]] * 8
    expected = {"input": OpCost(2 * 32 * 2048 * 49 * 512, (32 * 2048 * 49 + 2048 * 512) * 4, 32 * 512 * 49 * 4,
                                "fp32", "tensor", "conv_backward"),
                "weight": OpCost(2 * 32 * 2048 * 49 * 512, (32 * 2048 * 49 + 32 * 512 * 49) * 4, 2048 * 512 * 4,
                                 "fp32", "tensor", "conv_backward")}
    for which, (dims, types) in (("input", V100_BACKWARD_INPUT), ("weight", V100_BACKWARD_WEIGHT)):
        for prefix in ("cudnn", "miopen"):
            name = f"aten::{prefix}_convolution_backward_{which}"
            assert model_op(name, dims, types, caller_dims=caller) == expected[which]
            assert name in SIZES_FROM_CALLER
            other = [[32, 512, 7, 7], [32, 1024, 7, 7], [2048, 512, 1, 1]] + [[]] * 8  # another grad_output
            assert model_op(name, dims, types, caller_dims=other).reason == "missing_argument"
            swapped = [caller[2], caller[1], caller[0]] + [[]] * 8  # tensors in other places
            assert model_op(name, dims, types, caller_dims=swapped).reason == "missing_argument"
            # a recorded size wins over the caller's (and is checked as before)
            concrete = ["[32, 512, 7, 7]" if which == "input" else "[2048, 512, 1, 1]"] + [""] * 9
            assert model_op(name, dims, types, None, concrete, caller_dims=caller) == expected[which]


def test_forward_convolution_output_from_its_backward_node():
    """Without stride and padding (2021 records), a forward convolution takes its output from the
    gradient its backward node received; with them, that output must agree."""
    dims = [[32, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], [], [], []]
    types = ["float", "float", "GenericList", "GenericList", "GenericList", "Int", "Bool", "Bool", "Bool"]
    c = model_op("aten::cudnn_convolution", dims, types, output_dims=[32, 64, 112, 112])
    assert c == OpCost(2 * 32 * 64 * 112 * 112 * 3 * 49, (32 * 3 * 224 * 224 + 64 * 3 * 49) * 4, 32 * 64 * 112 * 112 * 4,
                       "fp32", "tensor", "conv")
    for wrong in ([32, 32, 112, 112], [16, 64, 112, 112], [32, 64, 112], [32, 64, 0, 112]):
        assert model_op("aten::cudnn_convolution", dims, types, output_dims=wrong).reason == "inconsistent_shapes"
    concrete = ["", "", "[3, 3]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"]
    assert model_op("aten::cudnn_convolution", dims, types, None, concrete, output_dims=[32, 64, 112, 112]) == c
    assert model_op("aten::cudnn_convolution", dims, types, None, concrete,
                    output_dims=[32, 64, 56, 56]).reason == "inconsistent_shapes"
    assert "aten::cudnn_convolution" in OUTPUT_FROM_BACKWARD and "aten::addmm" not in OUTPUT_FROM_BACKWARD


@pytest.mark.parametrize(("kernel", "stride", "padding", "dilation", "ceil", "size"), [
    (3, 2, 1, 1, False, 112), (3, 2, 1, 1, True, 9), (2, None, 0, 1, False, 7), (2, None, 0, 1, True, 7),
    (3, 3, 1, 2, True, 10), ((3, 2), (2, 1), (1, 0), 1, False, 8)])
def test_max_pool_output_matches_torch(tmp_path, kernel, stride, padding, dilation, ceil, size):
    """The output size (ATen's pooling_output_shape, ceil_mode included) is torch's own; one
    comparison per window element of each output; indices are int64. FlopCounterMode counts no
    pooling (0 FLOPs), so only the closed form is checked."""
    torch = _torch()
    x = torch.randn(2, 3, size, size + 1, requires_grad=True)

    def fn():
        y = torch.nn.functional.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil)
        y.backward(torch.randn_like(y))  # a dense gradient (sum().backward() gives an expanded one)
        fn.out = list(y.shape)  # type: ignore[attr-defined]

    records = recorded(fn, tmp_path)
    out = fn.out  # type: ignore[attr-defined]
    window = math.prod(kernel) if isinstance(kernel, tuple) else kernel * kernel
    forward = cost(only(records, "aten::max_pool2d_with_indices")[0])
    assert forward == OpCost(math.prod(out) * window, x.numel() * 4, math.prod(out) * (4 + 8), "fp32", "vector", "pool")
    backward = cost(only(records, "aten::max_pool2d_with_indices_backward")[0])
    assert backward == OpCost(math.prod(out), math.prod(out) * (4 + 8), x.numel() * 4, "fp32", "vector",
                              "pool_backward")
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as mode:
        torch.nn.functional.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil)
    assert mode.get_total_flops() == 0


def test_max_pool_of_2021_records():
    """2021 records lack the pool's arguments: the forward is not guessed; its backward needs none."""
    fwd = model_op("aten::max_pool2d_with_indices", [[32, 64, 112, 112], [], [], [], [], []],
                   ["float", "GenericList", "GenericList", "GenericList", "GenericList", "Bool"])
    assert isinstance(fwd, Unmodelled) and fwd.reason == "missing_argument"
    back = model_op("aten::max_pool2d_with_indices_backward",
                    [[32, 64, 56, 56], [32, 64, 112, 112], [], [], [], [], [], [32, 64, 56, 56]],
                    ["float", "float", "GenericList", "GenericList", "GenericList", "GenericList", "Bool", "long int"])
    n = 32 * 64 * 56 * 56
    assert back == OpCost(n, n * 12, 32 * 64 * 112 * 112 * 4, "fp32", "vector", "pool_backward")
    wrong = model_op("aten::max_pool2d_with_indices_backward",
                     [[32, 64, 56, 56], [32, 32, 112, 112], [], [], [], [], [], [32, 64, 56, 56]],
                     ["float", "float", "GenericList", "GenericList", "GenericList", "GenericList", "Bool", "long int"])
    assert wrong.reason == "inconsistent_shapes"


def test_mse_loss_and_threshold_closed_forms(tmp_path):
    torch = _torch()
    a, b = torch.randn(4, 5, requires_grad=True), torch.randn(4, 5)

    def fn():
        torch.nn.functional.mse_loss(a, b).backward()
        torch.nn.functional.mse_loss(a, b, reduction="none")
        torch.threshold(b, 0.1, 0.0)
        torch.threshold_(b.clone(), 0.1, 0.0)

    records = recorded(fn, tmp_path)
    mean, none = only(records, "aten::mse_loss")[:2]
    # subtract, square (+ the sum of a reduction) per element
    assert cost(mean) == OpCost(3 * 20, 2 * 20 * 4, 4, "fp32", "vector", "loss")
    assert cost(none) == OpCost(2 * 20, 2 * 20 * 4, 20 * 4, "fp32", "vector", "loss")
    back = cost(only(records, "aten::mse_loss_backward")[0])  # a 0-dim gradient, self, target
    assert back == OpCost(3 * 20, (1 + 2 * 20) * 4, 20 * 4, "fp32", "vector", "loss_backward")
    assert cost(only(records, "aten::threshold")[0]) == OpCost(20, 20 * 4, 20 * 4, "fp32", "vector", "elementwise")
    assert cost(only(records, "aten::threshold_")[0]) == OpCost(20, 20 * 4, 20 * 4, "fp32", "vector", "elementwise")


# --------------------------------------------------------------------------------------- attention


def _bshd(b: int, s: int, h: int, d: int) -> T:
    return T([b, s, h, d], "c10::BFloat16")


@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 2)])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_flops_match_flop_counter_formulas(hq, hkv, causal):
    _torch()
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    b, sq, sk, d = 2, 64, 96, 32
    q, k, v = [b, hq, sq, d], [b, hkv, sk, d], [b, hkv, sk, d]
    forward = sdpa_flop_count(q, k, v) // (2 if causal else 1)
    backward = sdpa_backward_flop_count(q, q, k, v) // (2 if causal else 1)
    assert backward * 2 == forward * 5  # flash-attention's convention: backward = 2.5 x forward
    bq, bk = _bshd(b, sq, hq, d), _bshd(b, sk, hkv, d)
    records = {
        "flash": (schema_record("_flash_attention_forward", query=bq, key=bk, value=bk, max_q=sq, max_k=sk,
                                dropout_p=0.0, is_causal=causal, return_debug_mask=False), forward),
        "efficient": (schema_record("_efficient_attention_forward", query=bq, key=bk, value=bk, dropout_p=0.0,
                                    custom_mask_type=int(causal), compute_log_sumexp=True), forward),
        "cudnn": (schema_record("_scaled_dot_product_cudnn_attention", query=T(q, "c10::BFloat16"),
                                key=T(k, "c10::BFloat16"), value=T(v, "c10::BFloat16"), compute_log_sumexp=True,
                                dropout_p=0.0, is_causal=causal, return_debug_mask=False), forward),
        "flash_backward": (schema_record("_flash_attention_backward", grad_out=bq, query=bq, key=bk, value=bk,
                                         out=bq, logsumexp=T([b, hq, sq]), max_q=sq, max_k=sk, dropout_p=0.0,
                                         is_causal=causal, rng_state=T([2], "long int"),
                                         unused=T([0], "long int")), backward),
        "efficient_backward": (schema_record("_efficient_attention_backward", grad_out_=bq, query=bq, key=bk,
                                             value=bk, out=bq, logsumexp=T([b, hq, sq]), dropout_p=0.0,
                                             philox_seed=T([], "long int"), philox_offset=T([], "long int"),
                                             custom_mask_type=int(causal), bias_requires_grad=False), backward),
    }
    for what, (rec, expected) in records.items():
        c = cost(rec)
        assert isinstance(c, OpCost), (what, c)
        assert (c.flops, c.dtype, c.unit) == (expected, "bf16", "tensor"), what
    fwd = cost(records["flash"][0])
    assert fwd.bytes_read == (b * sq * hq * d + 2 * b * sk * hkv * d) * 2 and fwd.bytes_written == b * sq * hq * d * 2


def test_sdpa_wrappers_are_counted_at_their_kernel_op_unless_leaf():
    _torch()
    from torch.utils.flop_counter import sdpa_flop_count

    shape = [16, 16, 559, 64]  # the qwen trace's SDPA, causal
    rec = schema_record("_scaled_dot_product_flash_attention", query=T(shape, "c10::BFloat16"),
                        key=T(shape, "c10::BFloat16"), value=T(shape, "c10::BFloat16"), dropout_p=0.0, is_causal=True,
                        return_debug_mask=False)
    assert cost(rec).reason == "counted_at_leaf"
    assert cost(rec, leaf=True).flops == sdpa_flop_count(shape, shape, shape) // 2


def test_packed_varlen_attention_is_not_modelled():
    rec = schema_record("_flash_attention_forward", query=_bshd(1, 100, 4, 32), key=_bshd(1, 100, 4, 32),
                        value=_bshd(1, 100, 4, 32), cum_seq_q=T([3], "int"), cum_seq_k=T([3], "int"), max_q=60,
                        max_k=60, dropout_p=0.0, is_causal=False, return_debug_mask=False)
    assert cost(rec).reason == "not_modelled"


# --------------------------------------------------------------------------------------- norms, softmax


def test_norms_and_softmax_closed_forms(tmp_path):
    torch = _torch()
    x = torch.randn(6, 10, requires_grad=True)
    rows, n = 6, 10

    def fn():
        weight, bias = torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)
        torch.nn.functional.layer_norm(x, (n,), weight, bias).sum().backward()
        torch.nn.functional.rms_norm(x, (n,), torch.randn(n))
        torch.softmax(x, -1).sum().backward()
        torch.nn.functional.batch_norm(x, torch.zeros(n), torch.ones(n), torch.randn(n), torch.randn(n), training=True)

    records = recorded(fn, tmp_path)
    ln = cost(only(records, "aten::native_layer_norm")[0])
    # mean 1 + variance 2 + normalise 2 + affine 2 per element; output, and mean and rstd per row in fp32
    assert ln == OpCost(7 * rows * n, (rows * n + 2 * n) * 4, rows * n * 4 + 2 * rows * 4, "fp32", "vector",
                        "layer_norm")
    ln_back = cost(only(records, "aten::native_layer_norm_backward")[0])
    # twice the normalisation for grad_input, 2 per element for each of grad_weight and grad_bias
    assert isinstance(ln_back, OpCost) and ln_back.flops == rows * n * (2 * 5 + 2 + 2)
    assert ln_back.bytes_written == rows * n * 4 + 2 * n * 4
    rms = cost(only(records, "aten::_fused_rms_norm")[0])
    assert rms == OpCost(5 * rows * n, (rows * n + n) * 4, rows * n * 4 + rows * 4, "fp32", "vector", "rms_norm")
    sm = cost(only(records, "aten::_softmax")[0])
    assert sm == OpCost(5 * rows * n, rows * n * 4, rows * n * 4, "fp32", "vector", "softmax")
    smb_rec = only(records, "aten::_softmax_backward_data")[0]
    # sum().backward() hands softmax an expanded scalar gradient (strides 0): one element is read
    assert smb_rec["strides"][0] == [0, 0]
    assert cost(smb_rec) == OpCost(4 * rows * n, 4 + rows * n * 4, rows * n * 4, "fp32", "vector", "softmax_backward")
    bn = cost(only(records, "aten::native_batch_norm")[0])
    assert isinstance(bn, OpCost) and bn.flops == 7 * rows * n
    assert bn.bytes_written == rows * n * 4 + 2 * n * 4 + 2 * n * 4  # out, saved stats, running stats


def test_batch_norm_backward_closed_forms(tmp_path):
    """native_batch_norm_backward as the CPU profiler records it, training and with running
    statistics: grad_input twice the forward normalisation (5 per element training, 2 not), 2 per
    element for each of grad_weight and grad_bias. flop_counter counts no norm, so it says 0."""
    torch = _torch()
    n, c, hw = 4, 3, 25
    numel = n * c * hw
    x = torch.randn(n, c, 5, 5, requires_grad=True)
    weight, bias = torch.randn(c, requires_grad=True), torch.randn(c, requires_grad=True)

    def fn(training: bool) -> None:
        torch.nn.functional.batch_norm(x, torch.zeros(c), torch.ones(c), weight, bias, training=training).sum().backward()

    from torch.utils.flop_counter import FlopCounterMode

    for training, normalise in ((True, 5), (False, 2)):
        with FlopCounterMode(display=False) as mode:
            fn(training)
        assert mode.get_total_flops() == 0
        rec = only(recorded(lambda: fn(training), tmp_path), "aten::native_batch_norm_backward")[0]
        assert rec["strides"][0] == [0, 0, 0, 0]  # sum().backward()'s gradient is one expanded element
        # read: grad_out (once), input, two statistics and the weight per channel; written:
        # grad_input, grad_weight and grad_bias
        assert cost(rec) == OpCost(numel * (2 * normalise + 2 + 2), (1 + numel + 3 * c) * 4, (numel + 2 * c) * 4,
                                   "fp32", "vector", "batch_norm_backward"), training
    # only grad_input asked for, not training: the input itself is not read
    rec = schema_record("native_batch_norm_backward", grad_out=T([n, c, 5, 5]), input=T([n, c, 5, 5]), weight=T([c]),
                        running_mean=T([c]), running_var=T([c]), save_mean=T([c]), save_invstd=T([c]), train=False,
                        eps=1e-5, output_mask=[True, False, False])
    assert cost(rec) == OpCost(numel * 4, (numel + 3 * c) * 4, numel * 4, "fp32", "vector", "batch_norm_backward")
    assert model_op(rec["name"], rec["dims"], rec["types"]).reason == "missing_argument"  # train not recorded


def test_cudnn_and_miopen_batch_norm_backward_are_training_only():
    """Their schemas have no training flag (native_functions.yaml: "You can only use this if you
    used cudnn_batch_norm training=True"; not training, autograd calls native_batch_norm_backward)
    and no output_mask: all three gradients, as native_batch_norm_backward(train=True) counts."""
    shapes: dict[str, Any] = dict(input=T([8, 16, 6, 6], "c10::Half"), grad_output=T([8, 16, 6, 6], "c10::Half"),
                                  weight=T([16]), running_mean=T([16]), running_var=T([16]), save_mean=T([16]),
                                  save_var=T([16]))
    cudnn = cost(schema_record("cudnn_batch_norm_backward", epsilon=1e-5, reserveSpace=T([64], "unsigned char"),
                               **shapes))
    miopen = cost(schema_record("miopen_batch_norm_backward", epsilon=1e-5, **shapes))
    native = cost(schema_record("native_batch_norm_backward", grad_out=shapes["grad_output"], input=shapes["input"],
                                weight=T([16]), running_mean=T([16]), running_var=T([16]), save_mean=T([16]),
                                save_invstd=T([16]), train=True, eps=1e-5, output_mask=[True, True, True]))
    numel = 8 * 16 * 36
    assert isinstance(cudnn, OpCost) and isinstance(miopen, OpCost) and isinstance(native, OpCost)
    assert cudnn.flops == miopen.flops == native.flops == numel * 14
    assert miopen.bytes_read == native.bytes_read == 2 * numel * 2 + 3 * 16 * 4
    assert cudnn.bytes_read == miopen.bytes_read + 64  # the reserve space written by the forward
    assert cudnn.bytes_written == miopen.bytes_written == numel * 2 + 2 * 16 * 4
    assert cudnn.dtype == "fp16"


# as the shared traces record them (shapes only): tbplugin_resnet50_v100_2021 (no Concrete Inputs)
# and tracelens_resnet_actckpt_mi300x_rank0
V100_CUDNN_BN_BACKWARD = ([[32, 2048, 7, 7], [32, 2048, 7, 7], [2048], [2048], [2048], [2048], [2048], [], [0]],
                          ["float"] * 7 + ["Double", "unsigned char"])
V100_CUDNN_BN = ([[32, 64, 112, 112], [64], [64], [64], [64], [], [], []], ["float"] * 5 + ["Bool", "Double", "Double"])
MI300X_NATIVE_BN_BACKWARD = ([[10, 512, 7, 7], [10, 512, 7, 7], [512], [512], [512], [512], [512], [], [], []],
                             ["c10::BFloat16"] * 5 + ["float", "float", "Scalar", "Scalar", "ScalarList"],
                             ["", "", "", "", "", "", "", "True", "1.0000000000000001e-05", "[True, True, True]"])


def test_batch_norm_records_of_the_shared_traces():
    numel = 32 * 2048 * 49
    assert op_cost("aten::cudnn_batch_norm_backward", *V100_CUDNN_BN_BACKWARD) == OpCost(
        numel * 14, (2 * numel + 3 * 2048) * 4, (numel + 2 * 2048) * 4, "fp32", "vector", "batch_norm_backward")
    # the forward's FLOPs depend on `training` (statistics or not), which 2021 traces do not record
    c = model_op("aten::cudnn_batch_norm", *V100_CUDNN_BN)
    assert isinstance(c, Unmodelled) and c.reason == "missing_argument" and "training" in c.detail
    numel = 10 * 512 * 49
    dims, types, concrete = MI300X_NATIVE_BN_BACKWARD
    assert op_cost("aten::native_batch_norm_backward", dims, types, None, concrete) == OpCost(
        numel * 14, 2 * numel * 2 + 512 * 2 + 2 * 512 * 4, numel * 2 + 2 * 512 * 2, "bf16", "vector",
        "batch_norm_backward")


def test_half_softmax_needs_half_to_float():
    dims, types = [[4, 8], [], []], ["c10::BFloat16", "Scalar", "Scalar"]
    assert op_cost("aten::_softmax", dims, types, None, ["", "-1", "True"]).bytes_written == 4 * 8 * 4
    assert op_cost("aten::_softmax", dims, types, None, ["", "-1", "False"]).bytes_written == 4 * 8 * 2
    assert model_op("aten::_softmax", dims, types).reason == "missing_argument"
    # an fp32 input gives an fp32 output whatever the flag: no need for it
    assert op_cost("aten::_softmax", dims, ["float", "Int", "Bool"]).bytes_written == 4 * 8 * 4


def test_layer_norm_shape_from_weight_when_not_recorded():
    """HTA's traces have no Concrete Inputs; normalized_shape must equal the weight's shape."""
    c = op_cost("aten::native_layer_norm", [[1024, 512], [], [512], [512], []],
                ["float", "", "float", "float", "Scalar"])
    assert c is not None and c.flops == 7 * 1024 * 512
    assert model_op("aten::native_layer_norm", [[1024, 512], [], [], [], []],
                    ["float", "", "", "", "Scalar"]).reason == "missing_argument"


# --------------------------------------------------------------------------------------- elementwise, reductions


def test_elementwise_and_reductions(tmp_path):
    torch = _torch()
    a = torch.randn(8, 16)
    bias = torch.randn(16)

    def fn():
        a + bias  # broadcast: the bias is read once
        a.mul_(2.0)
        torch.nn.functional.gelu(a)
        a > 0
        a.sum(dim=1, keepdim=True)
        a.mean()
        a.clone()

    records = recorded(fn, tmp_path)
    add = cost(only(records, "aten::add")[0])
    assert add == OpCost(128, (128 + 16) * 4, 128 * 4, "fp32", "vector", "elementwise")
    mul_ = cost(only(records, "aten::mul_")[0])
    assert isinstance(mul_, OpCost) and (mul_.flops, mul_.bytes_written) == (128, 128 * 4)
    assert cost(only(records, "aten::gelu")[0]).flops == 128
    gt = cost(only(records, "aten::gt")[0])
    assert isinstance(gt, OpCost) and gt.bytes_written == 128  # bool result
    sums = [cost(r) for r in only(records, "aten::sum")]
    assert OpCost(128, 128 * 4, 8 * 4, "fp32", "vector", "reduction") in sums
    assert cost(only(records, "aten::mean")[0]) == OpCost(128, 128 * 4, 4, "fp32", "vector", "reduction")
    copies = [cost(r) for r in only(records, "aten::copy_")]  # clone's copy (others copy scalars)
    assert OpCost(0, 128 * 4, 128 * 4, "fp32", "vector", "copy") in copies
    assert cost(only(records, "aten::clone")[0]).reason == "counted_at_leaf"


def test_type_promotion_and_expanded_inputs():
    # bfloat16 with float16 promotes to float32
    c = op_cost("aten::add", [[4, 4], [4, 4], []], ["c10::BFloat16", "c10::Half", "Scalar"], None, ["", "", "1"])
    assert c is not None and (c.dtype, c.bytes_written) == ("fp32", 16 * 4)
    # a 0-dim tensor (a Python number) does not widen a bfloat16 tensor
    c = op_cost("aten::mul", [[4, 4], []], ["c10::BFloat16", "double"])
    assert c is not None and (c.dtype, c.bytes_written) == ("bf16", 16 * 2)
    # where: the condition takes no part in the result type
    c = op_cost("aten::where", [[1024], [], []], ["bool", "float", "float"])
    assert c is not None and c.bytes_written == 1024 * 4
    # an expanded operand (stride 0 on the broadcast dimension) is read once
    c = op_cost("aten::mul", [[8, 16], [8, 16]], ["float", "float"], [[16, 1], [0, 1]])
    assert c is not None and c.bytes_read == (128 + 16) * 4
    assert model_op("aten::add", [[4, 3], [4, 5]], ["float", "float"]).reason == "inconsistent_shapes"


def test_embedding_forward_and_backward(tmp_path):
    torch = _torch()
    emb = torch.nn.Embedding(50, 8)
    idx = torch.tensor([[1, 2, 3], [4, 5, 6]])
    records = recorded(lambda: emb(idx).sum().backward(), tmp_path)
    gather = cost(only(records, "aten::index_select")[0])
    assert gather == OpCost(0, 6 * 8 * 4 + 6 * 8, 6 * 8 * 4, "fp32", "vector", "gather")
    assert cost(only(records, "aten::embedding")[0]).reason == "counted_at_leaf"
    assert cost(only(records, "aten::embedding")[0], leaf=True).bytes_written == 6 * 8 * 4
    back = cost(only(records, "aten::embedding_dense_backward")[0])
    assert back == OpCost(6 * 8, 6 * 8 * 4 + 6 * 8, 50 * 8 * 4, "fp32", "vector", "scatter_add")


def test_tensor_list_ops_say_why(tmp_path):
    torch = _torch()
    params = [torch.randn(10, 4), torch.randn(3)]
    records = recorded(lambda: torch._foreach_add_(params, params, alpha=0.1), tmp_path)
    c = cost(only(records, "aten::_foreach_add_")[0])
    assert isinstance(c, Unmodelled) and c.reason == "unknown_dtype" and "TensorList" in c.detail
    # cat moves bytes only, but how many per element its TensorList does not say
    rec = only(recorded(lambda: torch.cat([params[0], params[0].double()]), tmp_path), "aten::cat")[0]
    assert rec["types"][0] == "TensorList" and rec["dims"][0] == [[10, 4], [10, 4]]
    c = cost(rec)
    assert isinstance(c, Unmodelled) and c.reason == "unknown_dtype" and "TensorList" in c.detail


@pytest.mark.parametrize("name,dims,types,reason", [
    ("aten::mm", [[4, 5], [6, 3]], ["float", "float"], "inconsistent_shapes"),
    ("aten::mm", [[4, 5], [5, 3]], ["float", "c10::Half"], "inconsistent_shapes"),
    ("aten::mm", [[4, 5], [5, 3]], ["float", "c10::Mystery"], "unknown_dtype"),
    ("aten::mm", [[4, 5]], ["float"], "missing_shapes"),
    ("aten::mm", [[4, 5], [5, 3]], ["float"], "missing_shapes"),
    ("aten::mm", [[4, 5], []], ["float", "Scalar"], "missing_shapes"),
    ("aten::bmm", [[2, 4, 5], [3, 5, 6]], ["float", "float"], "inconsistent_shapes"),
    ("aten::mm", [[4, 5], [5, 3]], ["c10::Float4_e2m1fn_x2"] * 2, "unknown_dtype"),
    ("aten::topk", [[4, 5], []], ["float", "Scalar"], "not_modelled"),
    ("my::custom_op", [[4]], ["float"], "not_modelled"),
    ("aten::linear", [[4, 5], [3, 5], [3]], ["float"] * 3, "counted_at_leaf"),
    ("aten::cudnn_convolution_backward", [[2, 4, 9, 9], [2, 6, 9, 9], [6, 4, 3, 3]] + [[]] * 8,
     ["float"] * 3 + ["GenericList"] * 3 + ["Int"] + ["Bool"] * 4, "counted_at_leaf"),
    ("aten::cudnn_batch_norm_backward", [[2, 4, 3], [2, 4, 3], [5]] + [[]] * 6, ["float"] * 3 + [""] * 6,
     "inconsistent_shapes"),
    ("aten::miopen_batch_norm_backward", [[2, 4, 3], [2, 5, 3], [4]] + [[]] * 5, ["float"] * 3 + [""] * 5,
     "inconsistent_shapes"),
])
def test_unmodelled_reasons(name, dims, types, reason):
    c = model_op(name, dims, types)
    assert isinstance(c, Unmodelled) and c.reason == reason and name in c.detail
    assert op_cost(name, dims, types) is None


def test_linear_as_leaf_equals_its_addmm():
    linear = op_cost("aten::linear", [[16, 559, 1024], [1024, 1024], [1024]], ["c10::BFloat16"] * 3, leaf=True)
    addmm = op_cost("aten::addmm", [[1024], [8944, 1024], [1024, 1024], [], []],
                    ["c10::BFloat16"] * 3 + ["Scalar"] * 2, None, ["", "", "", "1", "1"])
    assert linear is not None and addmm is not None
    assert (linear.flops, linear.bytes_read, linear.bytes_written) == (addmm.flops, addmm.bytes_read,
                                                                       addmm.bytes_written)
    assert "aten::mm" in modelled_ops() and "aten::linear" in modelled_ops()


# --------------------------------------------------------------------------------------- the shared traces


def _trace_ops(path: Path) -> list[dict]:
    data = json.loads(gzip.open(path).read())
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [_record(e) for e in events if isinstance(e.get("args"), dict) and "Input Dims" in e["args"]
            and e.get("ph") == "X"]


def _independent_gemm_flops(rec: dict) -> int:
    """2*M*N*K from the recorded operand shapes, written out here without the module's code."""
    d = rec["dims"]
    if rec["name"] == "aten::mm":
        (m, k), (_, n) = d[0], d[1]
        return 2 * m * n * k
    if rec["name"] == "aten::addmm":
        (m, k), (_, n) = d[1], d[2]
        return 2 * m * n * k
    (batch, m, k), (_, _, n) = d[0], d[1]  # bmm
    return 2 * batch * m * n * k


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared traces not present (/work/shared/traces)")
def test_gemm_flops_on_the_shared_traces():
    """Every mm/addmm/bmm with shapes in the shared traces costs 2*M*N*K, and every aten::linear's
    GEMM children (by time containment on its thread) add up to 2*rows*N*K of the linear's shapes."""
    checked_gemms = checked_linears = 0
    for path in sorted(SHARED.glob("*.json.gz")):
        ops = _trace_ops(path)
        gemms = [r for r in ops if r["name"] in ("aten::mm", "aten::addmm", "aten::bmm")]
        for r in gemms:
            c = cost(r)
            assert isinstance(c, OpCost), (path.name, r["name"], c)
            assert c.flops == _independent_gemm_flops(r), (path.name, r)
            checked_gemms += 1
        for lin in (r for r in ops if r["name"] == "aten::linear"):
            inside = [g for g in gemms if g["tid"] == lin["tid"] and lin["ts"] <= g["ts"] and g["end"] <= lin["end"]]
            x, w = lin["dims"][0], lin["dims"][1]
            assert sum(_independent_gemm_flops(g) for g in inside) == 2 * math.prod(x[:-1]) * w[0] * w[1], path.name
            checked_linears += 1
    assert checked_gemms > 1000 and checked_linears > 500, (checked_gemms, checked_linears)


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared traces not present (/work/shared/traces)")
def test_convolutions_on_the_mi300x_resnet_trace():
    """MIOpen convolutions and their backward, recomputed here from the recorded shapes and the
    convolution op's own stride/padding (positions of aten::convolution, not of the MIOpen op)."""
    path = SHARED / "tracelens_resnet_actckpt_mi300x_rank0.json.gz"
    if not path.exists():
        pytest.skip(f"{path.name} not present")
    ops = _trace_ops(path)
    convs = [r for r in ops if r["name"] == "aten::convolution"]
    leaves = [r for r in ops if r["name"] == "aten::miopen_convolution"]
    assert len(convs) == len(leaves) > 0
    for parent, leaf in zip(convs, leaves):
        (n, _, h, w_), (c_out, cpg, kh, kw) = parent["dims"][0], parent["dims"][1]
        stride, padding, dilation = (json.loads(parent["concrete"][i]) for i in (3, 4, 5))
        ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
        wo = (w_ + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        assert cost(leaf).flops == 2 * n * c_out * ho * wo * cpg * kh * kw
        assert cost(parent).reason == "counted_at_leaf"
    for back in (r for r in ops if r["name"] == "aten::convolution_backward"):
        g, w = back["dims"][0], back["dims"][2]
        mask = back["concrete"][10].count("True") - (back["concrete"][10].split(",")[2].strip(" ]") == "True")
        assert cost(back).flops == mask * 2 * math.prod(g) * math.prod(w[1:])


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared traces not present (/work/shared/traces)")
def test_resnet_backward_ops_on_the_shared_traces():
    """Every batch-norm backward of the two ResNet traces costs 14 FLOPs per element (training, all
    three gradients: recomputed here from the records), and every 2021 cuDNN convolution backward
    says which size argument it lacks."""
    checked: dict[str, int] = {}
    for name in ("tbplugin_resnet50_v100_2021", "tracelens_resnet_actckpt_mi300x_rank0"):
        path = SHARED / f"{name}.json.gz"
        if not path.exists():
            pytest.skip(f"{path.name} not present")
        for r in _trace_ops(path):
            c = cost(r)
            if r["name"] in ("aten::native_batch_norm_backward", "aten::cudnn_batch_norm_backward"):
                cudnn = r["name"] == "aten::cudnn_batch_norm_backward"
                grad = r["dims"][1 if cudnn else 0]
                assert cudnn or (r["concrete"][7], r["concrete"][9]) == ("True", "[True, True, True]"), r
                assert isinstance(c, OpCost) and c.flops == 14 * math.prod(grad), (name, r, c)
            elif r["name"].startswith("aten::cudnn_convolution_backward_"):
                what = "self_size" if r["name"].endswith("input") else "weight_size"
                assert isinstance(c, Unmodelled) and c.reason == "missing_argument" and what in c.detail, (r, c)
            else:
                continue
            checked[r["name"]] = checked.get(r["name"], 0) + 1
    assert checked == {"aten::cudnn_batch_norm_backward": 318, "aten::cudnn_convolution_backward_input": 312,
                       "aten::cudnn_convolution_backward_weight": 318,
                       "aten::native_batch_norm_backward": checked.get("aten::native_batch_norm_backward", 0)}
    assert checked["aten::native_batch_norm_backward"] > 50, checked


# --------------------------------------------------------------------------------------- hostile records

BASE_RECORDS = [  # as the shared traces record them
    ("aten::addmm", [[1024], [8944, 1024], [1024, 1024], [], []], ["c10::BFloat16"] * 3 + ["Scalar"] * 2,
     ["", "", "", "1", "1"]),
    ("aten::miopen_convolution", [[10, 256, 14, 14], [512, 256, 3, 3], [], [], [], [], [], [], []],
     ["c10::BFloat16", "c10::BFloat16", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar"],
     ["", "", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False"]),
    ("aten::convolution_backward", [[10, 512, 7, 7], [10, 512, 7, 7], [512, 512, 3, 3]] + [[]] * 8,
     ["c10::BFloat16"] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"],
     ["", "", "", "[0]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, False]"]),
    ("aten::_flash_attention_forward", [[16, 559, 16, 64]] * 3 + [[]] * 12,
     ["c10::BFloat16"] * 3 + ["", ""] + ["Scalar"] * 6 + [""] * 4,
     ["", "", "", "", "", "559", "559", "0.", "True", "False", "0.125", "", "", "", ""]),
    ("aten::native_layer_norm", [[1024, 512], [], [512], [512], []], ["float", "ScalarList", "float", "float", "Scalar"],
     ["", "[512]", "", "", "1e-05"]),
    ("aten::mean", [[16, 559, 1024], [], [], []], ["float", "ScalarList", "Scalar", ""], ["", "[-1]", "True", ""]),
    ("aten::mul", [[1, 559, 64], []], ["float", "double"], ["", ""]),
    ("aten::index_select", [[151936, 1024], [], [8944]], ["c10::BFloat16", "Scalar", "long int"], ["", "0", ""]),
    ("aten::embedding_dense_backward", [[2, 2, 4], [2, 2], [], [], []], ["float", "long int"] + ["Scalar"] * 3,
     ["", "", "10", "-1", "False"]),
    ("aten::_softmax_backward_data", [[3, 5], [3, 5], [], []], ["float", "float", "Scalar", "Scalar"],
     ["", "", "-1", "6"]),
    ("aten::native_batch_norm_backward", *MI300X_NATIVE_BN_BACKWARD),
    ("aten::cudnn_batch_norm_backward", *V100_CUDNN_BN_BACKWARD, [""] * 9),
    ("aten::cudnn_convolution_backward_input", *V100_BACKWARD_INPUT,
     ["[32, 512, 7, 7]", "", "", "[0, 0]", "[1, 1]", "[1, 1]", "1", "False", "False", "True"]),
    ("aten::cudnn_convolution_backward_weight", *V100_BACKWARD_WEIGHT,
     ["[2048, 512, 1, 1]", "", "", "[0, 0]", "[1, 1]", "[1, 1]", "", "False", "False", "True"]),
]
HOSTILE_DIMS: list[Any] = [[], [0], [-1], [3, 0], "x", None, [[1, 2]], [2 ** 40], [1.5], [1, 2, 3, 4, 5], [True]]
HOSTILE_TEXT = ["", "True", "[1, x]", "-5", "0", "[0, 0]", "9999999999", "[]", "nan", "[-3]", "[1, 2, 3]"]
HOSTILE_TYPES = ["", "float", "c10::BFloat16", "Scalar", "TensorList", "weird", "bool", "long int"]


def test_hostile_records_give_a_reason_never_an_exception():
    """Mutated records (shapes, types, scalars, missing arguments) give an Unmodelled or a cost
    with no negative figure, never an exception."""
    import random

    rnd = random.Random(13)
    outcomes = set()
    for name, dims, types, concrete in BASE_RECORDS:
        assert isinstance(model_op(name, dims, types, None, concrete), OpCost), name
        for _ in range(300):
            d, t, c = [list(x) if isinstance(x, list) else x for x in dims], list(types), list(concrete)
            for _ in range(rnd.randint(1, 3)):
                where = rnd.randrange(4)
                if where == 0:
                    d[rnd.randrange(len(d))] = rnd.choice(HOSTILE_DIMS)
                elif where == 1:
                    t[rnd.randrange(len(t))] = rnd.choice(HOSTILE_TYPES)
                elif where == 2:
                    c[rnd.randrange(len(c))] = rnd.choice(HOSTILE_TEXT)
                elif len(d) > 1:
                    d, t, c = d[:-1], t[:-1], c[:-1]
            for leaf in (False, True):
                result = model_op(name, d, t, None, c, leaf=leaf)
                if isinstance(result, OpCost):
                    assert min(result.flops, result.bytes_read, result.bytes_written) >= 0, (name, d, t, c, result)
                    outcomes.add("cost")
                else:
                    assert result.detail.startswith(name), result
                    outcomes.add(result.reason)
    assert {"cost", "inconsistent_shapes", "missing_shapes", "unknown_dtype"} <= outcomes


def test_attention_with_a_different_value_head_dim():
    """D_v != D_qk (the efficient kernels allow it): forward 2*B*H*Sq*Sk*(Dqk + Dv), backward
    2*B*H*Sq*Sk*(3*Dqk + 2*Dv), as flop_counter counts them."""
    _torch()
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    b, h, sq, sk, dqk, dv = 2, 4, 32, 48, 64, 16
    q, k, v, o = [b, h, sq, dqk], [b, h, sk, dqk], [b, h, sk, dv], [b, h, sq, dv]
    as_bshd = {name: T([s[0], s[2], s[1], s[3]], "c10::Half") for name, s in (("q", q), ("k", k), ("v", v), ("o", o))}
    forward = schema_record("_efficient_attention_forward", query=as_bshd["q"], key=as_bshd["k"], value=as_bshd["v"],
                            dropout_p=0.0, custom_mask_type=0, compute_log_sumexp=True)
    backward = schema_record("_efficient_attention_backward", grad_out_=as_bshd["o"], query=as_bshd["q"],
                             key=as_bshd["k"], value=as_bshd["v"], out=as_bshd["o"], logsumexp=T([b, h, sq]),
                             dropout_p=0.0, philox_seed=T([], "long int"), philox_offset=T([], "long int"),
                             custom_mask_type=0, bias_requires_grad=False)
    assert cost(forward).flops == sdpa_flop_count(q, k, v)
    assert cost(backward).flops == sdpa_backward_flop_count(o, q, k, v)
    assert cost(forward).bytes_written == b * h * sq * dv * 2


# ------------------------------------------------------------------------------------ out= and in-place forms


@pytest.mark.parametrize("name, dims, types, read, written", [
    # issue 30 (7): DDP's reducer mul_out, mul.out(self, other, *, out): 1,024 + 8 bytes read, not 2,056
    ("aten::mul", [[512], [], [512]], ["c10::BFloat16", "double", "c10::BFloat16"], 1024 + 8, 1024),
    # records of the shared traces (hta_trace_diff_control_a100_rank3, hta_trace_filter_2ranks,
    # hta_rank_not_found, tracelens_xdit_flux1_aiter_sage_capture_mi300x)
    ("aten::mul", [[96], [], [96]], ["float", "double", "float"], 96 * 4 + 8, 96 * 4),
    ("aten::div", [[2048, 1], [2048, 1], [2048, 1]], ["float"] * 3, 2 * 2048 * 4, 2048 * 4),
    ("aten::neg", [[2048, 1], [2048, 1]], ["float", "float"], 2048 * 4, 2048 * 4),
    ("aten::logical_and", [[1024, 1], [1024, 1], [1024, 1]], ["bool"] * 3, 2 * 1024, 1024),
    ("aten::nan_to_num", [[1024, 64], [], [], [], [1024, 64]], ["float", "Scalar", "", "", "float"],
     65536 * 4, 65536 * 4),
    # an out tensor still to be resized ([0]) is no operand: the op is modelled, not inconsistent
    ("aten::abs", [[512, 512], [0]], ["long int", "long int"], 512 * 512 * 8, 512 * 512 * 8),
    # add.out(self, other, *, alpha, out): the result is stored in out's type (float here)
    ("aten::add", [[512], [512], [], [512]], ["c10::BFloat16", "c10::BFloat16", "Scalar", "float"], 2048, 2048),
    # where.out(condition, self, other, *, out)
    ("aten::where", [[64], [64], [64], [64]], ["bool", "float", "float", "float"], 64 + 2 * 256, 256),
])
def test_out_tensors_are_written_not_read(name, dims, types, read, written):
    c = model_op(name, dims, types)
    assert isinstance(c, OpCost), c
    assert (c.bytes_read, c.bytes_written) == (read, written)


@pytest.mark.parametrize("name, dims, types, read", [
    # functional forms whose last argument is a tensor operand, not an out=
    ("aten::mul", [[512], [512]], ["float", "float"], 2 * 2048),
    ("aten::where", [[64], [64], [64]], ["bool", "float", "float"], 64 + 2 * 256),
    ("aten::clamp", [[64], [64], [64]], ["float"] * 3, 3 * 256),      # clamp.Tensor(self, min, max)
    ("aten::pow", [[64], [64]], ["float", "float"], 2 * 256),          # pow.Tensor_Tensor
    ("aten::sigmoid_backward", [[64], [64]], ["float", "float"], 2 * 256),
    # in place: the destination is read (x.mul_(y)), except by ops that only write it
    ("aten::mul_", [[512], [512]], ["float", "float"], 2 * 2048),
    ("aten::add_", [[512], [512], []], ["float", "float", "Scalar"], 2 * 2048),
    ("aten::fill_", [[512], []], ["float", "float"], 4),
    ("aten::copy_", [[512], [512], []], ["float", "c10::BFloat16", "Scalar"], 1024),
])
def test_functional_and_in_place_forms_read_their_operands(name, dims, types, read):
    c = model_op(name, dims, types)
    assert isinstance(c, OpCost), c
    assert c.bytes_read == read


def test_reduction_out_is_stored_in_its_type():
    # mean.out(self, dim, keepdim, *, dtype, out) of tracelens_resnet_actckpt_mi300x_rank0, and with a
    # float out for a bfloat16 input
    rec = ([[10, 1000], [], [], [], []], ["c10::BFloat16", "ScalarList", "Scalar", "", "c10::BFloat16"],
           ["", "[]", "False", "", ""])
    assert model_op("aten::mean", rec[0], rec[1], None, rec[2]) == OpCost(10_000, 20_000, 2, "bf16", "vector",
                                                                          "reduction")
    c = model_op("aten::sum", [[4, 512], [], [], [], [4]], ["c10::BFloat16", "ScalarList", "Scalar", "", "float"],
                 None, ["", "[1]", "False", "", ""])
    assert isinstance(c, OpCost) and (c.bytes_read, c.bytes_written) == (4096, 16)


def test_matrix_and_other_models_never_read_their_out_tensor():
    # mm.out(self, mat2, *, out), addmm.out(self, mat1, mat2, *, beta, alpha, out),
    # _softmax.out(self, dim, half_to_float, *, out), index_select.out(self, dim, index, *, out)
    assert model_op("aten::mm", [[64, 32], [32, 16], [64, 16]], ["float"] * 3) == \
        model_op("aten::mm", [[64, 32], [32, 16]], ["float"] * 2)
    with_out = model_op("aten::addmm", [[16], [64, 32], [32, 16], [], [], [64, 16]],
                        ["float", "float", "float", "Scalar", "Scalar", "float"], None, ["", "", "", "1", "1", ""])
    plain_addmm = model_op("aten::addmm", [[16], [64, 32], [32, 16], [], []],
                           ["float", "float", "float", "Scalar", "Scalar"], None, ["", "", "", "1", "1"])
    assert with_out == plain_addmm
    assert model_op("aten::_softmax", [[8, 128], [], [], [8, 128]], ["float", "Int", "Bool", "float"],
                    None, ["", "1", "False", ""]) == model_op("aten::_softmax", [[8, 128], [], []],
                                                             ["float", "Int", "Bool"], None, ["", "1", "False"])
    assert model_op("aten::index_select", [[100, 8], [], [10], [10, 8]], ["float", "Int", "long int", "float"],
                    None, ["", "0", "", ""]) == model_op("aten::index_select", [[100, 8], [], [10]],
                                                         ["float", "Int", "long int"], None, ["", "0", ""])


def test_out_forms_on_a_shared_trace():
    """Every three-tensor ``aten::mul`` of hta_trace_diff_control_a100_rank3 (mul.out) reads its two
    operands only."""
    if not SHARED.exists():
        pytest.skip(f"real traces not available: {SHARED} is absent")
    events = json.loads(gzip.open(SHARED / "hta_trace_diff_control_a100_rank3.json.gz").read())["traceEvents"]
    outs = [e["args"] for e in events if e.get("name") == "aten::mul" and e.get("cat") == "cpu_op"
            and len(e.get("args", {}).get("Input type", [])) == 3]
    assert outs
    for args in outs:
        c = model_op("aten::mul", args["Input Dims"], args["Input type"], args.get("Input Strides"))
        assert isinstance(c, OpCost), c
        operands = sum(math.prod(d) * (8 if t in ("double", "long int") else 4 if t == "float" else 2)
                       for d, t in zip(args["Input Dims"][:2], args["Input type"][:2]))
        assert c.bytes_read == operands, args
