"""Per-op cost models: FLOPs and minimum bytes of one ATen op from its recorded inputs.

Pure functions over what Kineto records with ``record_shapes=True`` for one CPU op: its name
("aten::addmm"), "Input Dims" (one shape list per argument, ``[]`` for scalars and None, a list of
shapes for a TensorList), "Input type" ("c10::BFloat16", "float", "Scalar", "" ...), "Input Strides"
and "Concrete Inputs" (scalar arguments as text: "1", "True", "[2, 2]", "" when not recorded).
Argument positions follow the ATen native function schemas (``native_functions.yaml``); the
conventions and their sources are in docs/metrics.md, "Op cost models".

:func:`model_op` returns an :class:`OpCost` or an :class:`Unmodelled` with a reason code and a
line saying what is missing: a shape, flag or dtype that is not recorded is never guessed.
Ops that only dispatch to another op (``aten::linear``, ``aten::matmul``, ``aten::convolution``
...) are ``counted_at_leaf``: their kernels run under the leaf op, which is modelled, so summing
over the ops that own kernels counts every product once.

This module declares no ``SPEC``: it is a library for the analyses, not an analysis.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

__all__ = ["OpCost", "Unmodelled", "REASONS", "model_op", "op_cost", "dtype_of", "modelled_ops", "CallerSizes",
           "SIZES_FROM_CALLER", "OUTPUT_FROM_BACKWARD", "FORWARD_CHAINS"]

#: reason codes of :class:`Unmodelled`
REASONS = ("not_modelled", "counted_at_leaf", "missing_shapes", "inconsistent_shapes", "unknown_dtype",
           "missing_argument")


@dataclass(frozen=True)
class OpCost:
    """Work of one op: ``flops`` (multiply and add counted as 2), minimum ``bytes_read`` and
    ``bytes_written`` (every distinct input element read once, every output element written once),
    the compute ``dtype`` ("bf16", "fp32", "fp8" ...), the ``unit`` whose peak bounds it ("tensor":
    matrix units, for products; "vector": everything else) and the ``model`` that counted it."""

    flops: int
    bytes_read: int
    bytes_written: int
    dtype: str
    unit: str
    model: str


@dataclass(frozen=True)
class Unmodelled:
    """Why an op has no cost: ``reason`` is one of :data:`REASONS`, ``detail`` one line."""

    reason: str
    detail: str


class _Skip(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


# Kineto's "Input type" of a tensor argument (c10 type names) -> (dtype, bits per element)
_DTYPES: dict[str, tuple[str, int]] = {
    "double": ("fp64", 64), "float": ("fp32", 32), "c10::Half": ("fp16", 16), "c10::BFloat16": ("bf16", 16),
    "c10::Float8_e4m3fn": ("fp8", 8), "c10::Float8_e5m2": ("fp8", 8), "c10::Float8_e4m3fnuz": ("fp8", 8),
    "c10::Float8_e5m2fnuz": ("fp8", 8), "c10::Float8_e8m0fnu": ("fp8", 8), "c10::Float4_e2m1fn_x2": ("fp4", 8),
    "long int": ("int64", 64), "long": ("int64", 64), "int": ("int32", 32), "short int": ("int16", 16),
    "short": ("int16", 16), "signed char": ("int8", 8), "unsigned char": ("uint8", 8), "bool": ("bool", 8),
    "c10::complex<float>": ("complex64", 64), "c10::complex<double>": ("complex128", 128),
    "c10::complex<c10::Half>": ("complex32", 32),
}
# ATen ScalarType codes (c10/core/ScalarType.h) as "Concrete Inputs" records a dtype argument
_SCALAR_TYPE_CODES = {0: "unsigned char", 1: "signed char", 2: "short int", 3: "int", 4: "long int", 5: "c10::Half",
                      6: "float", 7: "double", 11: "bool", 15: "c10::BFloat16", 23: "c10::Float8_e5m2",
                      24: "c10::Float8_e4m3fn", 25: "c10::Float8_e5m2fnuz", 26: "c10::Float8_e4m3fnuz"}
# types of arguments that are not tensors ("" = None or not recorded)
_NOT_TENSOR = {"", "Scalar", "ScalarList", "Int", "Bool", "Double", "GenericList", "TensorList", "Device",
               "Layout", "ScalarType", "MemoryFormat", "String", "None"}
_FLOAT_RANK = {"fp8": 1, "fp16": 2, "bf16": 2, "fp32": 3, "fp64": 4}


def dtype_of(type_name: str) -> str | None:
    """traceview's dtype name for a Kineto tensor type name, None when it is not a known tensor type."""
    entry = _DTYPES.get(type_name)
    return entry[0] if entry else None


@dataclass(frozen=True)
class _Args:
    name: str
    dims: Sequence[Any]
    types: Sequence[str]
    strides: Sequence[Any] | None
    concrete: Sequence[str] | None
    #: int[] arguments known from the calling op (:data:`SIZES_FROM_CALLER`), by position, as text
    derived: dict[int, str] = dataclasses.field(default_factory=dict)
    #: the shape of the op's first output, where a linked backward op records it (``output_dims``)
    output: list[int] | None = None

    def tensor(self, i: int, what: str) -> tuple[list[int], str]:
        """(shape, c10 type name) of tensor argument ``i``; raises when absent or not a tensor."""
        if i >= len(self.types) or i >= len(self.dims):
            raise _Skip("missing_shapes", f"{self.name}: argument {i} ({what}) not recorded")
        type_name, shape = self.types[i], self.dims[i]
        if type_name in _NOT_TENSOR:
            raise _Skip("missing_shapes", f"{self.name}: {what} has no recorded tensor (type {type_name!r})")
        if type_name not in _DTYPES:
            raise _Skip("unknown_dtype", f"{self.name}: {what} has type {type_name!r}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise _Skip("inconsistent_shapes", f"{self.name}: {what} has shape {shape!r}")
        return list(shape), type_name

    def optional_tensor(self, i: int, what: str) -> tuple[list[int], str] | None:
        if i < len(self.types) and self.types[i] == "":
            return None  # None passed (or, in traces without it, not recorded: both read no bytes)
        return self.tensor(i, what)

    def unique_elements(self, i: int) -> int:
        """Distinct elements of tensor argument ``i``: a broadcast (stride 0) dimension is read once."""
        shape, _ = self.tensor(i, f"argument {i}")
        strides = self.strides[i] if self.strides is not None and i < len(self.strides) else None
        if isinstance(strides, list) and len(strides) == len(shape):
            return math.prod(d for d, s in zip(shape, strides) if s != 0)
        return math.prod(shape)

    def scalar(self, i: int, what: str) -> str:
        """Concrete text of scalar argument ``i``; raises when it was not recorded."""
        value = self.concrete[i] if self.concrete is not None and i < len(self.concrete) else ""
        value = value or self.derived.get(i, "")
        if value == "":
            raise _Skip("missing_argument", f"{self.name}: {what} not recorded (no Concrete Inputs)")
        return value

    def flag(self, i: int, what: str) -> bool:
        value = self.scalar(i, what)
        if value in ("True", "1"):
            return True
        if value in ("False", "0"):
            return False
        raise _Skip("inconsistent_shapes", f"{self.name}: {what} is {value!r}, not a boolean")

    def int_value(self, i: int, what: str) -> int:
        values = self.int_list(i, what)
        if len(values) != 1:
            raise _Skip("inconsistent_shapes", f"{self.name}: {what} is {values}, not one integer")
        return values[0]

    def int_list(self, i: int, what: str) -> list[int]:
        value = self.scalar(i, what).strip()
        try:
            if value.startswith("[") and value.endswith("]"):
                return [int(v) for v in value[1:-1].split(",") if v.strip()]
            return [int(value)]
        except ValueError:
            raise _Skip("inconsistent_shapes", f"{self.name}: {what} is {value!r}, not a list of integers") from None


def _bytes(numel: int, type_name: str) -> int:
    return numel * _DTYPES[type_name][1] // 8


def _nbytes(shape: list[int], type_name: str) -> int:
    return _bytes(math.prod(shape), type_name)


def _require(condition: bool, name: str, detail: str) -> None:
    if not condition:
        raise _Skip("inconsistent_shapes", f"{name}: {detail}")


# ------------------------------------------------------------------------------------ matrix products


def _product_cost(a: _Args, lhs: int, rhs: int, model: str, extra_read: tuple[int, ...] = ()) -> OpCost:
    """C[b, m, n] = A[b, m, k] @ B[b, k, n] (2-D when the inputs are 2-D); ``extra_read`` are tensor
    arguments read as well (addmm's self, a bias, scales)."""
    (sa, ta), (sb, tb) = a.tensor(lhs, "mat1"), a.tensor(rhs, "mat2")
    _require(len(sa) == len(sb) and len(sa) in (2, 3), a.name, f"operands of shapes {sa} and {sb}")
    _require(sa[-1] == sb[-2] and sa[:-2] == sb[:-2], a.name, f"inner or batch dimensions differ: {sa} @ {sb}")
    _require(ta == tb or model == "scaled_mm", a.name, f"operand types differ: {ta} and {tb}")
    if "fp4" in (_DTYPES[ta][0], _DTYPES[tb][0]):
        raise _Skip("unknown_dtype", f"{a.name}: packed FP4 operands (which dimension is packed is not recorded)")
    batch = math.prod(sa[:-2])
    m, k, n = sa[-2], sa[-1], sb[-1]
    read = a.unique_elements(lhs) * _DTYPES[ta][1] // 8 + a.unique_elements(rhs) * _DTYPES[tb][1] // 8
    for i in extra_read:
        if a.optional_tensor(i, f"argument {i}") is not None:
            read += _bytes(a.unique_elements(i), a.types[i])
    out_type = _product_out_type(a, ta, model)
    return OpCost(2 * batch * m * n * k, read, _bytes(batch * m * n, out_type), _DTYPES[ta][0], "tensor", model)


def _product_out_type(a: _Args, in_type: str, model: str) -> str:
    if model != "scaled_mm":
        return in_type
    if len(a.types) > 6 and a.types[6] == "":
        return in_type  # out_dtype=None: the result has the operands' type
    code = a.scalar(6, "out_dtype")
    if not code.isdigit() or int(code) not in _SCALAR_TYPE_CODES:
        raise _Skip("unknown_dtype", f"{a.name}: out_dtype code {code!r}")
    return _SCALAR_TYPE_CODES[int(code)]


def _mm(a: _Args) -> OpCost:
    return _product_cost(a, 0, 1, "gemm")


def _addmm(a: _Args) -> OpCost:
    beta_used = a.concrete is None or len(a.concrete) < 4 or a.concrete[3] not in ("0", "0.")
    return _product_cost(a, 1, 2, "gemm", (0,) if beta_used else ())


def _scaled_mm(a: _Args) -> OpCost:
    return _product_cost(a, 0, 1, "scaled_mm", (2, 3, 4))


# ------------------------------------------------------------------------------------ convolution


def _conv_out_spatial(a: _Args, x: list[int], w: list[int], pos: dict[str, int], transposed: bool) -> list[int]:
    """Output spatial size from input, kernel, stride, padding, dilation (and output padding)."""
    dims = len(x) - 2
    stride, padding, dilation = (_expand(a.int_list(pos[key], key), dims, a.name)
                                 for key in ("stride", "padding", "dilation"))
    out_pad = _expand(a.int_list(pos["output_padding"], "output_padding"), dims, a.name) if transposed else [0] * dims
    kernel = w[2:]
    _require(min(stride + dilation) > 0 and min(padding + out_pad) >= 0, a.name,
             f"stride {stride}, padding {padding}, dilation {dilation}, output_padding {out_pad}")
    if transposed:
        out = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1
               for i, s, p, d, k, op in zip(x[2:], stride, padding, dilation, kernel, out_pad)]
    else:
        out = [(i + 2 * p - d * (k - 1) - 1) // s + 1 if s > 0 else -1
               for i, s, p, d, k in zip(x[2:], stride, padding, dilation, kernel)]
    _require(all(o > 0 for o in out), a.name, f"no output for input {x}, weight {w}")
    return out


def _expand(values: list[int], dims: int, name: str) -> list[int]:
    if len(values) == 1:
        return values * dims
    _require(len(values) == dims, name, f"{values} for {dims} spatial dimensions")
    return values


def _groups(a: _Args, i: int, x: list[int], w: list[int], transposed: bool) -> int:
    """The recorded groups; when not recorded, the one the shapes imply for a convolution that is not
    transposed (input channels = groups * the weight's input channels)."""
    try:
        return a.int_value(i, "groups")
    except _Skip:
        if transposed or len(x) < 2 or len(w) < 2 or w[1] == 0 or x[1] % w[1]:
            raise
        return x[1] // w[1]


def _conv(a: _Args, pos: dict[str, int]) -> OpCost:
    """Forward convolution; ``pos``: where the schema of this op puts each argument."""
    (x, tx), (w, tw) = a.tensor(0, "input"), a.tensor(1, "weight")
    transposed = pos.get("transposed") == _ALWAYS or ("transposed" in pos and a.flag(pos["transposed"], "transposed"))
    groups = _groups(a, pos["groups"], x, w, transposed)
    _require(len(x) == len(w) >= 3 and groups > 0, a.name, f"input {x}, weight {w}, groups {groups}")
    c_in = w[0] if transposed else w[1] * groups
    c_out = w[1] * groups if transposed else w[0]
    _require(x[1] == c_in and c_out % groups == 0, a.name, f"input {x} does not fit weight {w} with groups {groups}")
    try:
        out = [x[0], c_out, *_conv_out_spatial(a, x, w, pos, transposed)]
        _require(a.output is None or a.output == out, a.name, f"output {out} is not the linked {a.output}")
    except _Skip as skip:
        if skip.reason != "missing_argument" or a.output is None:
            raise
        out = a.output  # stride or padding not recorded: the output its backward op received
        _require(len(out) == len(x) and out[:2] == [x[0], c_out] and min(out) > 0, a.name,
                 f"linked output {out} is not one of input {x} with weight {w}")
    # 2 FLOPs per weight element and per point of the side the kernel slides over
    slid = x if transposed else out
    flops = 2 * math.prod(slid) * math.prod(w[1:])
    read = _bytes(a.unique_elements(0), tx) + _bytes(a.unique_elements(1), tw)
    if "bias" in pos and a.optional_tensor(pos["bias"], "bias") is not None:
        read += _bytes(a.unique_elements(pos["bias"]), a.types[pos["bias"]])
    return OpCost(flops, read, _nbytes(out, tx), _DTYPES[tx][0], "tensor", "conv")


_ALWAYS = -1  # "transposed" of the conv_transpose ops: not an argument, always true
_CONV_ND = {"bias": 2, "stride": 3, "padding": 4, "dilation": 5, "groups": 6}
_CONV_TRANSPOSE_ND = {"bias": 2, "stride": 3, "padding": 4, "output_padding": 5, "groups": 6, "dilation": 7,
                      "transposed": _ALWAYS}
_CONVOLUTION = {"bias": 2, "stride": 3, "padding": 4, "dilation": 5, "transposed": 6, "output_padding": 7, "groups": 8}
_CONV_FORWARD: dict[str, dict[str, int]] = {
    # positions from the ATen schemas (native_functions.yaml)
    "aten::cudnn_convolution_transpose": {"padding": 2, "output_padding": 3, "stride": 4, "dilation": 5, "groups": 6,
                                          "transposed": _ALWAYS},
    "aten::cudnn_convolution": {"padding": 2, "stride": 3, "dilation": 4, "groups": 5},
    "aten::miopen_convolution": {"bias": 2, "padding": 3, "stride": 4, "dilation": 5, "groups": 6},
    "aten::mkldnn_convolution": {"bias": 2, "padding": 3, "stride": 4, "dilation": 5, "groups": 6},
}


def _conv_backward(a: _Args) -> OpCost:
    """convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    transposed, output_padding, groups, output_mask): each of grad_input and grad_weight is a
    convolution as large as the forward one; grad_bias is a reduction of grad_output."""
    (g, tg), (x, tx), (w, tw) = a.tensor(0, "grad_output"), a.tensor(1, "input"), a.tensor(2, "weight")
    transposed = a.flag(7, "transposed")
    groups = a.int_value(9, "groups")
    mask = a.scalar(10, "output_mask").strip("[]").replace(" ", "").split(",")
    _require(len(mask) == 3 and set(mask) <= {"True", "False"}, a.name, f"output_mask {mask}")
    _require(len(g) == len(x) == len(w) >= 3 and g[0] == x[0] and groups > 0, a.name, f"shapes {g}, {x}, {w}")
    c_out = w[1] * groups if transposed else w[0]
    c_in = w[0] if transposed else w[1] * groups
    _require(g[1] == c_out and x[1] == c_in, a.name, f"grad_output {g} and input {x} do not fit weight {w}")
    forward_flops = 2 * math.prod(x if transposed else g) * math.prod(w[1:])
    want_input, want_weight, want_bias = (m == "True" for m in mask)
    flops = forward_flops * (int(want_input) + int(want_weight))
    read = _bytes(a.unique_elements(0), tg)
    read += _bytes(a.unique_elements(2), tw) if want_input else 0
    read += _bytes(a.unique_elements(1), tx) if want_weight else 0
    written = (_nbytes(x, tx) if want_input else 0) + (_nbytes(w, tw) if want_weight else 0)
    written += _bytes(c_out, tg) if want_bias else 0
    return OpCost(flops, read, written, _DTYPES[tx][0], "tensor", "conv_backward")


def _split_conv_shapes(a: _Args, x: list[int], g: list[int], w: list[int]) -> None:
    """Input ``x``, grad_output ``g`` and weight ``w`` of one (not transposed) convolution: the
    batch, the output channels and the groups (recorded, or the ones the shapes imply) must fit."""
    _require(len(x) == len(g) == len(w) >= 3 and x[0] == g[0] and g[1] == w[0] and w[1] > 0 and min(x + w) >= 0, a.name,
             f"input {x}, grad_output {g}, weight {w}")
    groups = _groups(a, 6, x, w, False)
    _require(groups > 0 and x[1] == w[1] * groups and w[0] % groups == 0, a.name,
             f"input {x} does not fit weight {w} with groups {groups}")
    try:
        out = _conv_out_spatial(a, x, w, {"padding": 3, "stride": 4, "dilation": 5}, False)
    except _Skip as skip:
        if skip.reason != "missing_argument":
            raise
        return  # stride and padding not recorded: the spatial sizes cannot be cross-checked
    _require(out == g[2:], a.name, f"grad_output {g} is not the output of input {x} with weight {w}")


def _conv_backward_input(a: _Args) -> OpCost:
    """cudnn/miopen_convolution_backward_input(self_size, grad_output, weight, padding, stride,
    dilation, groups, ...) (PyTorch 1.x): one convolution as large as the forward one, whose
    FLOPs the grad_output and the weight give; the grad_input written has the int[] ``self_size``,
    which only "Concrete Inputs" records (the input's spatial size needs stride and padding)."""
    (g, tg), (w, tw) = a.tensor(1, "grad_output"), a.tensor(2, "weight")
    x = a.int_list(0, "self_size (the shape of grad_input)")
    _split_conv_shapes(a, x, g, w)
    read = _bytes(a.unique_elements(1), tg) + _bytes(a.unique_elements(2), tw)
    return OpCost(2 * math.prod(g) * math.prod(w[1:]), read, _bytes(math.prod(x), tg), _DTYPES[tg][0], "tensor",
                  "conv_backward")


def _conv_backward_weight(a: _Args) -> OpCost:
    """cudnn/miopen_convolution_backward_weight(weight_size, grad_output, self, padding, stride,
    dilation, groups, ...) (PyTorch 1.x): one convolution as large as the forward one; the
    kernel size and channels per group are in the int[] ``weight_size``, which only "Concrete
    Inputs" records."""
    (g, tg), (x, tx) = a.tensor(1, "grad_output"), a.tensor(2, "input")
    w = a.int_list(0, "weight_size (the shape of grad_weight)")
    _split_conv_shapes(a, x, g, w)
    read = _bytes(a.unique_elements(1), tg) + _bytes(a.unique_elements(2), tx)
    return OpCost(2 * math.prod(g) * math.prod(w[1:]), read, _bytes(math.prod(w), tx), _DTYPES[tx][0], "tensor",
                  "conv_backward")


@dataclass(frozen=True)
class CallerSizes:
    """An int[] argument of a PyTorch 1.x op that its calling op passes as one of its own tensors'
    sizes. ATen 1.x (``native/cudnn/ConvShared.cpp``, ``native/miopen/Conv_miopen.cpp``):
    ``cudnn_convolution_backward(self, grad_output, weight, ...)`` calls
    ``cudnn_convolution_backward_input(self.sizes(), grad_output, weight, ...)`` and
    ``cudnn_convolution_backward_weight(weight.sizes(), grad_output, self, ...)``. Kineto records
    the caller's tensor shapes, not the callee's int[] (before "Concrete Inputs"), so the caller's
    "Input Dims" give it, once the tensors both record are seen to be the same (``same``)."""

    callers: tuple[str, ...]  # the ops that make this call
    argument: int  # the op's int[] argument
    caller_tensor: int  # the caller's tensor argument whose shape it is
    same: tuple[tuple[int, int], ...]  # (op's tensor argument, caller's tensor argument) of equal shape


_CUDNN_BACKWARD = ("aten::cudnn_convolution_backward",)
_MIOPEN_BACKWARD = ("aten::miopen_convolution_backward",)
_MIOPEN_DEPTHWISE_BACKWARD = ("aten::miopen_depthwise_convolution_backward",)
#: op name -> where its int[] size argument comes from (see :class:`CallerSizes`)
SIZES_FROM_CALLER: dict[str, CallerSizes] = {
    "aten::cudnn_convolution_backward_input": CallerSizes(_CUDNN_BACKWARD, 0, 0, ((1, 1), (2, 2))),
    "aten::cudnn_convolution_backward_weight": CallerSizes(_CUDNN_BACKWARD, 0, 2, ((1, 1), (2, 0))),
    "aten::miopen_convolution_backward_input": CallerSizes(_MIOPEN_BACKWARD, 0, 0, ((1, 1), (2, 2))),
    "aten::miopen_convolution_backward_weight": CallerSizes(_MIOPEN_BACKWARD, 0, 2, ((1, 1), (2, 0))),
    "aten::miopen_depthwise_convolution_backward_input": CallerSizes(_MIOPEN_DEPTHWISE_BACKWARD, 0, 0,
                                                                     ((1, 1), (2, 2))),
    "aten::miopen_depthwise_convolution_backward_weight": CallerSizes(_MIOPEN_DEPTHWISE_BACKWARD, 0, 2,
                                                                      ((1, 1), (2, 0))),
}


def _from_caller(name: str, dims: Sequence[Any], caller_dims: Sequence[Any] | None) -> dict[int, str]:
    """The int[] arguments of ``name`` that its caller's recorded shapes give (empty when none)."""
    spec = SIZES_FROM_CALLER.get(name)
    if spec is None or not isinstance(caller_dims, (list, tuple)):
        return {}
    pairs = (*spec.same, (None, spec.caller_tensor))
    if any(c >= len(caller_dims) or (i is not None and (i >= len(dims) or dims[i] != caller_dims[c]))
           for i, c in pairs):
        return {}  # not the call it should be: nothing is taken from it
    shape = caller_dims[spec.caller_tensor]
    if not isinstance(shape, list) or not shape or not all(type(d) is int for d in shape):
        return {}
    return {spec.argument: "[" + ", ".join(map(str, shape)) + "]"}


# ------------------------------------------------------------------------------------ attention


@dataclass(frozen=True)
class _Attention:
    """Where an attention op's schema puts q/k/v (and grad_out), its layout and its causal flag."""

    q: int
    layout: str  # "bhsd" (SDPA ops) or "bshd" (the flash/efficient kernels' own ops)
    causal: int
    causal_is_mask_type: bool = False  # efficient kernels: custom_mask_type (0 none, 1-2 causal)
    backward: bool = False
    varlen: int | None = None  # position of cum_seq_q: when set, the batch is packed sequences


_ATTENTION: dict[str, _Attention] = {
    "aten::_scaled_dot_product_cudnn_attention": _Attention(0, "bhsd", 6),
    "aten::_scaled_dot_product_cudnn_attention_backward": _Attention(1, "bhsd", 14, backward=True, varlen=9),
    "aten::_flash_attention_forward": _Attention(0, "bshd", 8, varlen=3),
    "aten::_flash_attention_backward": _Attention(1, "bshd", 11, backward=True, varlen=6),
    "aten::_efficient_attention_forward": _Attention(0, "bshd", 9, causal_is_mask_type=True, varlen=4),
    "aten::_efficient_attention_backward": _Attention(1, "bshd", 14, causal_is_mask_type=True, backward=True,
                                                      varlen=6),
}


def _bhsd(shape: list[int], layout: str) -> list[int]:
    return shape if layout == "bhsd" else [shape[0], shape[2], shape[1], shape[3]]


def _attention(a: _Args, spec: _Attention) -> OpCost:
    """Forward: 2*B*Hq*Sq*Sk*(Dqk + Dv) (QK^T and PV); backward: 2*B*Hq*Sq*Sk*(3*Dqk + 2*Dv) (QK^T
    recomputed, dV, dP, dQ, dK); both halved when the op is causal (the masked half is skipped)."""
    if spec.varlen is not None and spec.varlen < len(a.types) and a.types[spec.varlen] not in _NOT_TENSOR:
        raise _Skip("not_modelled", f"{a.name}: packed variable-length sequences (cum_seq) need the lengths")
    (q, tq), (k, _), (v, _) = (a.tensor(spec.q + i, n) for i, n in enumerate(("query", "key", "value")))
    _require(len(q) == len(k) == len(v) == 4, a.name, f"q {q}, k {k}, v {v} are not 4-D")
    (b, hq, sq, dqk), (bk, hk, sk, dk), (bv, hv, sv, dv) = (_bhsd(s, spec.layout) for s in (q, k, v))
    _require(b == bk == bv and hk == hv and sk == sv and dqk == dk and hk > 0 and hq % hk == 0, a.name,
             f"q {q}, k {k}, v {v} do not fit one attention")
    if spec.causal_is_mask_type:
        mask_type = a.int_value(spec.causal, "custom_mask_type")
        causal = mask_type in (1, 2)
    else:
        causal = a.flag(spec.causal, "is_causal")
    out = [b, hq, sq, dv]
    if spec.backward:
        flops = 2 * b * hq * sq * sk * (3 * dqk + 2 * dv)
        read = sum(_bytes(a.unique_elements(i), a.types[i]) for i in (0, 1, 2, 3))  # grad_out, q, k, v
        read += _nbytes(out, tq)  # out
        written = _nbytes(q, tq) + _nbytes(k, a.types[spec.q + 1]) + _nbytes(v, a.types[spec.q + 2])
    else:
        flops = 2 * b * hq * sq * sk * (dqk + dv)
        read = sum(_bytes(a.unique_elements(spec.q + i), a.types[spec.q + i]) for i in range(3))
        written = _nbytes(out, tq)
    if causal:
        flops //= 2
    model = "attention_backward" if spec.backward else "attention"
    return OpCost(flops, read, written, _DTYPES[tq][0], "tensor", model)


# ------------------------------------------------------------------------------------ norms and softmax

# FLOPs per element (conventions, docs/metrics.md): statistics (mean 1, variance 2), normalisation
# (subtract, multiply by the reciprocal deviation: 2), affine (multiply, add: 2); RMS norm has no mean
_LAYER_NORM_FLOPS = 5
_RMS_NORM_FLOPS = 3
_AFFINE_FLOPS = 2


def _rows(a: _Args, x: list[int], normalized_pos: int, weight_pos: int) -> tuple[int, int]:
    """(rows, row length) of a norm over the trailing ``normalized_shape`` dimensions; when it is not
    recorded, the weight's shape, which the op requires to equal it."""
    try:
        normalized = a.int_list(normalized_pos, "normalized_shape")
    except _Skip:
        weight = a.optional_tensor(weight_pos, "weight")
        if weight is None:
            raise
        normalized = weight[0]
    _require(0 < len(normalized) <= len(x) and x[len(x) - len(normalized):] == normalized, a.name,
             f"normalized_shape {normalized} does not end input {x}")
    n = math.prod(normalized)
    return math.prod(x) // n if n else 0, n


def _layer_norm(a: _Args, rms: bool = False) -> OpCost:
    """native_layer_norm(input, normalized_shape, weight, bias, eps) -> (out, mean, rstd);
    _fused_rms_norm(input, normalized_shape, weight, eps) -> (out, rstd). Statistics are float32."""
    x, tx = a.tensor(0, "input")
    rows, n = _rows(a, x, 1, 2)
    params = [i for i in ((2,) if rms else (2, 3)) if a.optional_tensor(i, "weight/bias") is not None]
    per_element = (_RMS_NORM_FLOPS if rms else _LAYER_NORM_FLOPS) + (_AFFINE_FLOPS if params else 0)
    read = _bytes(a.unique_elements(0), tx) + sum(_bytes(a.unique_elements(i), a.types[i]) for i in params)
    stats = 1 if rms else 2
    written = _nbytes(x, tx) + stats * rows * 4
    return OpCost(per_element * rows * n, read, written, _DTYPES[tx][0], "vector", "rms_norm" if rms else "layer_norm")


def _layer_norm_backward(a: _Args) -> OpCost:
    """native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
    output_mask): counted as twice the forward normalisation per element, plus 2 per element for
    each of grad_weight and grad_bias."""
    (g, tg), (x, tx) = a.tensor(0, "grad_out"), a.tensor(1, "input")
    _require(g == x, a.name, f"grad_out {g} and input {x} differ")
    rows, n = _rows(a, x, 2, 5)
    mask = [m == "True" for m in a.scalar(7, "output_mask").strip("[]").replace(" ", "").split(",")]
    _require(len(mask) == 3, a.name, f"output_mask {mask}")
    flops = rows * n * (2 * _LAYER_NORM_FLOPS * mask[0] + 2 * mask[1] + 2 * mask[2])
    read = _bytes(a.unique_elements(0), tg) + _bytes(a.unique_elements(1), tx) + 2 * rows * 4
    weight = a.optional_tensor(5, "weight")
    read += _nbytes(weight[0], weight[1]) if weight is not None else 0
    written = _nbytes(x, tx) * mask[0] + _bytes(n, weight[1] if weight else tx) * (mask[1] + mask[2])
    return OpCost(flops, read, written, _DTYPES[tx][0], "vector", "layer_norm_backward")


def _batch_norm(a: _Args) -> OpCost:
    """native/cudnn/miopen_batch_norm(input, weight, bias, running_mean, running_var, training, ...):
    per-channel statistics over N and the spatial dimensions when training, the running ones when not."""
    x, tx = a.tensor(0, "input")
    training = a.flag(5, "training")
    _require(len(x) >= 2, a.name, f"input {x} has no channel dimension")
    channels = x[1]
    per_element = (_LAYER_NORM_FLOPS if training else 2) + _AFFINE_FLOPS
    params = [i for i in (1, 2, 3, 4) if a.optional_tensor(i, "parameter") is not None]
    read = _bytes(a.unique_elements(0), tx) + sum(_bytes(a.unique_elements(i), a.types[i]) for i in params)
    # training also writes the saved mean and inverse deviation and updates the running statistics
    stats_written = 0
    if training:
        stats_written = 2 * channels * 4 + sum(_nbytes(*a.tensor(i, "running")) for i in params if i >= 3)
    return OpCost(per_element * math.prod(x), read, _nbytes(x, tx) + stats_written, _DTYPES[tx][0], "vector",
                  "batch_norm")


@dataclass(frozen=True)
class _BatchNormBackward:
    """Where a batch-norm backward op's schema puts its arguments."""

    grad: int
    input: int
    stats: tuple[int, int]  # the statistics read: saved mean and inverse deviation (training)
    train: int | None = None  # position of the flag; None: the op exists for training only
    mask: int | None = None  # position of output_mask; None: all three gradients
    reserve: int | None = None  # cuDNN's reserve space, written by the forward, read here


_BATCH_NORM_BACKWARD: dict[str, _BatchNormBackward] = {
    "aten::native_batch_norm_backward": _BatchNormBackward(0, 1, (5, 6), train=7, mask=9),
    # "You can only use this if you used cudnn_batch_norm training=True" (native_functions.yaml); the
    # derivative of cudnn/miopen_batch_norm calls native_batch_norm_backward when not training
    "aten::cudnn_batch_norm_backward": _BatchNormBackward(1, 0, (5, 6), reserve=8),
    "aten::miopen_batch_norm_backward": _BatchNormBackward(1, 0, (5, 6)),
}


def _batch_norm_backward(a: _Args, spec: _BatchNormBackward) -> OpCost:
    """grad_input: twice the forward normalisation per element (its statistics part only when
    training); grad_weight and grad_bias: 2 per element each, as for layer norm. Without running
    statistics (not training), the running mean and variance are read instead of the saved ones."""
    (g, tg), (x, tx) = a.tensor(spec.grad, "grad_output"), a.tensor(spec.input, "input")
    _require(g == x and len(x) >= 2, a.name, f"grad_output {g} and input {x} differ or have no channels")
    training = True if spec.train is None else a.flag(spec.train, "train")
    mask = [True] * 3
    if spec.mask is not None:
        items = a.scalar(spec.mask, "output_mask").strip("[]").replace(" ", "").split(",")
        _require(len(items) == 3 and set(items) <= {"True", "False"}, a.name, f"output_mask {items}")
        mask = [m == "True" for m in items]
    numel, channels = math.prod(x), x[1]
    normalise = _LAYER_NORM_FLOPS if training else 2
    flops = numel * (2 * normalise * mask[0] + 2 * mask[1] + 2 * mask[2])
    weight = a.optional_tensor(2, "weight")
    params = [i for i in (spec.stats if training else (3, 4)) if a.optional_tensor(i, "statistics") is not None]
    params += [2] if weight is not None else []
    _require(all(a.tensor(i, "parameter")[0] == [channels] for i in params), a.name,
             f"statistics or weight do not have the {channels} channels of input {x}")
    if spec.reserve is not None and a.optional_tensor(spec.reserve, "reserveSpace") is not None:
        params.append(spec.reserve)
    read = _bytes(a.unique_elements(spec.grad), tg) + sum(_bytes(a.unique_elements(i), a.types[i]) for i in params)
    read += _bytes(a.unique_elements(spec.input), tx) if training or mask[1] else 0  # x enters through x_hat
    param_type = weight[1] if weight is not None else tx
    written = _nbytes(x, tx) * mask[0] + _bytes(channels, param_type) * (mask[1] + mask[2])
    return OpCost(flops, read, written, _DTYPES[tx][0], "vector", "batch_norm_backward")


# softmax: max, subtract, exp, sum, divide (log_softmax: max, subtract, exp, sum, subtract the log)
_SOFTMAX_FLOPS = 5
# backward: softmax dx = y*(dy - sum(dy*y)): multiply, sum, subtract, multiply; log_softmax
# dx = dy - exp(y)*sum(dy): exp, multiply, sum, subtract
_SOFTMAX_BACKWARD_FLOPS = 4


def _softmax(a: _Args) -> OpCost:
    """_softmax / _log_softmax(self, dim, half_to_float): a float16/bfloat16 input gives a float32
    output when half_to_float is set."""
    x, tx = a.tensor(0, "self")
    out_type = tx
    if _DTYPES[tx][1] == 16:
        out_type = "float" if a.flag(2, "half_to_float") else tx
    return OpCost(_SOFTMAX_FLOPS * math.prod(x), _bytes(a.unique_elements(0), tx), _nbytes(x, out_type),
                  _DTYPES[tx][0], "vector", "softmax")


def _softmax_backward(a: _Args) -> OpCost:
    """_softmax_backward_data(grad_output, output, dim, input_dtype); before PyTorch 1.11 the fourth
    argument was the input tensor itself, whose type is then the result's."""
    (g, tg), (y, ty) = a.tensor(0, "grad_output"), a.tensor(1, "output")
    _require(g == y, a.name, f"grad_output {g} and output {y} differ")
    if len(a.types) > 3 and a.types[3] in _DTYPES:
        out_type = a.types[3]
    else:
        code = a.int_value(3, "input_dtype")
        if code not in _SCALAR_TYPE_CODES:
            raise _Skip("unknown_dtype", f"{a.name}: input_dtype code {code}")
        out_type = _SCALAR_TYPE_CODES[code]
    read = _bytes(a.unique_elements(0), tg) + _bytes(a.unique_elements(1), ty)
    return OpCost(_SOFTMAX_BACKWARD_FLOPS * math.prod(g), read, _nbytes(g, out_type), _DTYPES[tg][0], "vector",
                  "softmax_backward")


# ------------------------------------------------------------------------------------ elementwise and reductions

# FLOPs per output element (convention: one per arithmetic or transcendental function; two for
# the fused multiply-add forms); 0 for ops that only move data
_ELEMENTWISE_FLOPS: dict[str, int] = {
    **dict.fromkeys(("abs neg exp exp2 log log2 log1p expm1 sqrt rsqrt sin cos tan tanh sigmoid relu gelu silu "
                     "mish erf erfinv reciprocal sign floor ceil round trunc clamp clamp_min clamp_max hardtanh "
                     "hardswish hardsigmoid leaky_relu elu softplus threshold square pow nan_to_num logical_not "
                     "bitwise_not "
                     "add sub rsub mul div remainder fmod maximum minimum atan2 where masked_fill lerp "
                     "threshold_backward gelu_backward silu_backward sigmoid_backward tanh_backward "
                     "hardtanh_backward leaky_relu_backward logical_and logical_or bitwise_and bitwise_or "
                     "bitwise_xor").split(), 1),
    **dict.fromkeys(("eq ne lt le gt ge").split(), 1),
    "addcmul": 2, "addcdiv": 2, "fill": 0, "zero": 0, "copy": 0,
}
_COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not"}
_WRITE_ONLY = {"fill", "zero"}  # in place, the destination's old values are not read
#: the number of arguments Kineto records for an op's functional form (``mul.Tensor(self, other)``:
#: 2; ``add.Tensor(self, other, *, alpha)``: 3; the shortest overload where several differ only in
#: trailing scalars or strings). An ``out=`` overload (``mul.out(self, other, *, out)``) has one more,
#: a tensor, last (ATen's schemas put ``out`` last): written, not read. Ops absent are never taken
#: for out= forms.
_FUNCTIONAL_ARITY: dict[str, int] = {
    **dict.fromkeys(("abs neg exp exp2 log log2 log1p expm1 sqrt rsqrt sin cos tan tanh sigmoid relu silu mish "
                     "erf erfinv reciprocal sign floor ceil round trunc hardswish hardsigmoid square logical_not "
                     "bitwise_not zero").split(), 1),
    **dict.fromkeys(("mul div remainder fmod maximum minimum atan2 pow logical_and logical_or bitwise_and "
                     "bitwise_or bitwise_xor eq ne lt le gt ge fill clamp_min clamp_max silu_backward "
                     "sigmoid_backward tanh_backward gelu leaky_relu").split(), 2),
    **dict.fromkeys(("add sub rsub where masked_fill lerp clamp hardtanh softplus threshold threshold_backward "
                     "gelu_backward copy").split(), 3),
    **dict.fromkeys(("addcmul addcdiv elu nan_to_num hardtanh_backward leaky_relu_backward").split(), 4),
    # reductions: sum/prod/mean(self, *, dtype), amax/amin(self, dim, keepdim)
    **dict.fromkeys(("sum mean prod").split(), 2), **dict.fromkeys(("amax amin").split(), 3),
}


def _out_argument(a: _Args, base: str) -> int | None:
    """Position of the ``out=`` tensor of an elementwise or reduction op, None for the functional
    and in-place forms: the last argument, a tensor, beyond the functional form's arguments."""
    n = len(a.types)
    arity = _FUNCTIONAL_ARITY.get(base)
    if a.name.endswith("_") or arity is None or n <= arity or a.types[-1] in _NOT_TENSOR or n > len(a.dims):
        return None
    return n - 1


def _broadcast(name: str, shapes: list[list[int]]) -> list[int]:
    ndim = max(len(s) for s in shapes)
    out = []
    for axis in range(ndim):
        sizes = {s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0} - {1}
        _require(len(sizes) <= 1, name, f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return out


def _promote(name: str, typed: list[tuple[list[int], str]]) -> str:
    """Result type of an elementwise op: the widest type among the tensors with dimensions; a 0-dim
    tensor (a wrapped Python number) only decides when every tensor is 0-dim."""
    if not typed:
        raise _Skip("unknown_dtype", f"{name}: the result type comes from Python scalars, whose type is not recorded")
    dimensioned = [t for s, t in typed if s] or [t for _, t in typed]
    categories = {_category(t) for t in dimensioned}
    zero_dim_categories = {_category(t) for s, t in typed if not s}
    if zero_dim_categories and max(zero_dim_categories) > max(categories):
        raise _Skip("unknown_dtype", f"{name}: result type depends on whether a 0-dim argument is a Python number")
    dimensioned = [t for t in dimensioned if _category(t) == max(categories)]  # int with float: float
    widest = max(dimensioned, key=lambda t: (_FLOAT_RANK.get(_DTYPES[t][0], 0), _DTYPES[t][1]))
    if {_DTYPES[t][0] for t in dimensioned} >= {"fp16", "bf16"} and widest in ("c10::Half", "c10::BFloat16"):
        return "float"  # float16 with bfloat16 promotes to float32
    return widest


def _category(type_name: str) -> int:
    dtype = _DTYPES[type_name][0]
    return 0 if dtype == "bool" else 2 if dtype.startswith(("fp", "bf")) else 3 if dtype.startswith("complex") else 1


def _elementwise(a: _Args, base: str) -> OpCost:
    """One output element per broadcast position of the tensor arguments; an in-place op (name
    ending in "_") writes its first argument (and reads it, unless it only fills it); an ``out=``
    overload (:func:`_out_argument`) writes its out tensor, in the out tensor's type, and does not
    read it."""
    in_place = a.name.endswith("_")
    out_arg = _out_argument(a, base)
    tensors = [i for i, t in enumerate(a.types) if t not in _NOT_TENSOR and i < len(a.dims) and i != out_arg]
    if not tensors:
        raise _Skip("missing_shapes", f"{a.name}: no tensor argument recorded")
    if base == "copy":
        tensors = tensors[:2]  # copy_(self, src, non_blocking)
    typed = [a.tensor(i, f"argument {i}") for i in tensors]
    out = _broadcast(a.name, [s for s, _ in typed])
    if in_place:
        _require(out == typed[0][0], a.name, f"in-place result {out} is not the destination {typed[0][0]}")
    value_args = typed[1:] if base == "where" else typed[:1] if base == "masked_fill" else typed
    out_type = typed[0][1] if in_place else "bool" if base in _COMPARISONS else _promote(a.name, value_args)
    read_args = tensors[1:] if in_place and base in _WRITE_ONLY | {"copy"} else tensors
    read = sum(_bytes(a.unique_elements(i), a.types[i]) for i in read_args)
    compute = out_type if base not in _COMPARISONS else typed[0][1]
    if out_arg is not None:
        out_type = a.tensor(out_arg, "out")[1]  # computed in the promoted type, stored in out's
    return OpCost(_ELEMENTWISE_FLOPS[base] * math.prod(out), read, _nbytes(out, out_type),
                  _DTYPES[compute][0], "vector", "copy" if base == "copy" else "elementwise")


_REDUCTIONS = {"sum", "mean", "amax", "amin", "prod"}


def _reduction(a: _Args, base: str) -> OpCost:
    """sum/mean(self, dim, keepdim, dtype) or (self, dtype), amax/amin(self, dim, keepdim): one FLOP
    per input element; dim None or [] reduces every dimension."""
    x, tx = a.tensor(0, "self")
    full = len(a.types) <= 2 or a.types[1] == ""
    reduced = [] if full else a.int_list(1, "dim")
    ndim = max(len(x), 1)
    _require(all(-ndim <= d < ndim for d in reduced), a.name, f"dim {reduced} for shape {x}")
    kept = {d % ndim for d in reduced}
    out_numel = 1 if not reduced else math.prod(s for i, s in enumerate(x) if i not in kept)
    dtype_pos = 1 if len(a.types) == 2 else 3
    out_type = tx
    if base in ("sum", "mean", "prod") and dtype_pos < len(a.types) and a.types[dtype_pos] != "":
        code = a.int_value(dtype_pos, "dtype")
        if code not in _SCALAR_TYPE_CODES:
            raise _Skip("unknown_dtype", f"{a.name}: dtype code {code}")
        out_type = _SCALAR_TYPE_CODES[code]
    elif base in ("sum", "prod") and _category(tx) < 2:
        out_type = "long int"  # integer and bool sums accumulate in int64
    out_arg = _out_argument(a, base)
    if out_arg is not None:  # sum.IntList_out / mean.out ...: stored in the out tensor's type
        out_type = a.tensor(out_arg, "out")[1]
    return OpCost(math.prod(x), _bytes(a.unique_elements(0), tx), _bytes(out_numel, out_type), _DTYPES[tx][0],
                  "vector", "reduction")


# ------------------------------------------------------------------------------------ pooling and losses


def _pool_out(a: _Args, x: list[int], kernel: list[int], first: int) -> list[int]:
    """Output spatial size of max_pool{1,2,3}d(self, kernel_size, stride, padding, dilation,
    ceil_mode) from the arguments at ``first`` ... ``first + 4`` (ATen's pooling_output_shape: an
    empty stride is the kernel size; with ceil_mode the last window must start inside the input or
    its left padding)."""
    dims = len(kernel)
    stride_text = a.scalar(first + 1, "stride")
    stride = kernel if stride_text.strip() == "[]" else _expand(a.int_list(first + 1, "stride"), dims, a.name)
    padding = _expand(a.int_list(first + 2, "padding"), dims, a.name)
    dilation = _expand(a.int_list(first + 3, "dilation"), dims, a.name)
    ceil = a.flag(first + 4, "ceil_mode")
    _require(min(stride + dilation + kernel) > 0 and min(padding) >= 0, a.name,
             f"kernel {kernel}, stride {stride}, padding {padding}, dilation {dilation}")
    out = []
    for i, k, s, p, d in zip(x[len(x) - dims:], kernel, stride, padding, dilation):
        span = i + 2 * p - d * (k - 1) - 1
        o = (span + (s - 1 if ceil else 0)) // s + 1
        if ceil and (o - 1) * s >= i + p:
            o -= 1
        out.append(o)
    _require(all(o > 0 for o in out), a.name, f"no output for input {x}")
    return out


def _max_pool(a: _Args) -> OpCost:
    """max_pool{1,2,3}d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) ->
    (out, indices): one comparison per window element of each output element; the input read
    once, the output and its int64 indices written."""
    x, tx = a.tensor(0, "self")
    kernel = a.int_list(1, "kernel_size")
    dims = 3 if "3d" in a.name else 2
    kernel = _expand(kernel, dims, a.name)
    _require(len(x) in (dims + 1, dims + 2), a.name, f"input {x} for a {dims}-D pool")
    out = [*x[:len(x) - dims], *_pool_out(a, x, kernel, 1)]
    numel = math.prod(out)
    return OpCost(numel * math.prod(kernel), _bytes(a.unique_elements(0), tx), _nbytes(out, tx) + numel * 8,
                  _DTYPES[tx][0], "vector", "pool")


def _max_pool_backward(a: _Args) -> OpCost:
    """max_pool{1,2,3}d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
    dilation, ceil_mode, indices): each gradient element added into the input position its index
    names (one FLOP each); grad_output and indices read, grad_input (self's shape) written. The
    shapes are all recorded: no scalar argument is needed."""
    (g, tg), (x, tx), (idx, ti) = a.tensor(0, "grad_output"), a.tensor(1, "self"), a.tensor(7, "indices")
    dims = 3 if "3d" in a.name else 2
    _require(g == idx and len(g) == len(x) in (dims + 1, dims + 2) and g[:len(g) - dims] == x[:len(x) - dims],
             a.name, f"grad_output {g}, self {x}, indices {idx}")
    return OpCost(math.prod(g), _bytes(a.unique_elements(0), tg) + _bytes(a.unique_elements(7), ti), _nbytes(x, tx),
                  _DTYPES[tg][0], "vector", "pool_backward")


_MSE_FLOPS = 2  # subtract, square (a reduction adds one per element)
_MSE_BACKWARD_FLOPS = 3  # subtract, multiply by 2/N, multiply by the gradient


def _mse_loss(a: _Args) -> OpCost:
    """mse_loss(self, target, reduction): reduction 0 (none) writes one element per input, 1-2
    (mean, sum) one scalar and adds every element."""
    (x, tx), (t, tt) = a.tensor(0, "self"), a.tensor(1, "target")
    out = _broadcast(a.name, [x, t])
    reduction = a.int_value(2, "reduction")
    _require(reduction in (0, 1, 2), a.name, f"reduction {reduction}")
    numel = math.prod(out)
    flops = numel * (_MSE_FLOPS + (reduction > 0))
    read = _bytes(a.unique_elements(0), tx) + _bytes(a.unique_elements(1), tt)
    return OpCost(flops, read, _bytes(numel if reduction == 0 else 1, tx), _DTYPES[tx][0], "vector", "loss")


def _mse_loss_backward(a: _Args) -> OpCost:
    """mse_loss_backward(grad_output, self, target, reduction): grad_input = 2 (self - target)
    grad_output (/ N for the mean); every tensor argument read once, grad_input written."""
    (_, tg), (x, tx), (t, _) = a.tensor(0, "grad_output"), a.tensor(1, "self"), a.tensor(2, "target")
    out = _broadcast(a.name, [x, t])
    read = sum(_bytes(a.unique_elements(i), a.types[i]) for i in (0, 1, 2))
    return OpCost(_MSE_BACKWARD_FLOPS * math.prod(out), read, _nbytes(out, tx), _DTYPES[tg][0], "vector",
                  "loss_backward")


# ------------------------------------------------------------------------------------ embedding, optimizer


def _index_select(a: _Args) -> OpCost:
    """index_select(self, dim, index): the kernel of an embedding lookup; reads the selected slices
    and the indices, writes them; no arithmetic."""
    (x, tx), (idx, ti) = a.tensor(0, "self"), a.tensor(2, "index")
    dim = a.int_value(1, "dim")
    _require(-len(x) <= dim < len(x) and len(idx) <= 1, a.name, f"dim {dim} of {x} with index {idx}")
    out = list(x)
    out[dim % len(x)] = math.prod(idx)
    return OpCost(0, _nbytes(out, tx) + _nbytes(idx, ti), _nbytes(out, tx), _DTYPES[tx][0], "vector", "gather")


def _embedding_backward(a: _Args) -> OpCost:
    """embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    every gradient row is added into its weight row (one FLOP per element); the dense gradient of
    num_weights rows is written."""
    (g, tg), (idx, ti) = a.tensor(0, "grad_output"), a.tensor(1, "indices")
    num_weights = a.int_value(2, "num_weights")
    _require(num_weights >= 0, a.name, f"num_weights {num_weights}")
    _require(len(g) >= 1 and math.prod(g[:-1]) == math.prod(idx), a.name, f"grad_output {g} for indices {idx}")
    return OpCost(math.prod(g), _nbytes(g, tg) + _nbytes(idx, ti), _bytes(num_weights * g[-1], tg), _DTYPES[tg][0],
                  "vector", "scatter_add")


def _tensor_lists(a: _Args) -> OpCost:
    """Optimizer steps, _foreach_ ops and cat take TensorLists, whose element types Kineto does not
    record (cat moves bytes only, but how many per element is the unknown)."""
    raise _Skip("unknown_dtype", f"{a.name}: the element types of TensorList arguments are not recorded")


#: forward ops that take their output shape from their backward node (``model_op(output_dims=...)``)
OUTPUT_FROM_BACKWARD = frozenset((*_CONV_FORWARD, "aten::convolution", "aten::_convolution",
                                  *(f"aten::conv{d}d" for d in (1, 2, 3)),
                                  *(f"aten::conv_transpose{d}d" for d in (1, 2, 3))))
#: the ops of one forward call chain whose result is the same tensor (conv2d -> convolution ->
#: _convolution -> cudnn_convolution): a fwdbwd link on any of them gives the output of all
FORWARD_CHAINS = OUTPUT_FROM_BACKWARD

# ------------------------------------------------------------------------------------ the table of ops

#: ops whose kernels run under a child op that is modelled (composite ops): counting them too
#: would count the same work twice
_COUNTED_AT_LEAF: dict[str, str] = {
    "aten::matmul": "aten::mm/aten::bmm", "aten::linear": "aten::addmm/aten::mm",
    "aten::conv1d": "the backend convolution", "aten::conv2d": "the backend convolution",
    "aten::conv3d": "the backend convolution", "aten::conv_transpose1d": "the backend convolution",
    "aten::conv_transpose2d": "the backend convolution", "aten::conv_transpose3d": "the backend convolution",
    "aten::convolution": "the backend convolution (cudnn/miopen/mkldnn)",
    "aten::cudnn_convolution_backward": "aten::cudnn_convolution_backward_input/_weight (PyTorch 1.x)",
    "aten::miopen_convolution_backward": "aten::miopen_convolution_backward_input/_weight/_bias (PyTorch 1.x)",
    "aten::_convolution": "the backend convolution (cudnn/miopen/mkldnn)",
    "aten::scaled_dot_product_attention": "the flash/efficient/cuDNN/math attention op",
    "aten::_scaled_dot_product_flash_attention": "aten::_flash_attention_forward",
    "aten::_scaled_dot_product_flash_attention_backward": "aten::_flash_attention_backward",
    "aten::_scaled_dot_product_efficient_attention": "aten::_efficient_attention_forward",
    "aten::_scaled_dot_product_efficient_attention_backward": "aten::_efficient_attention_backward",
    "aten::layer_norm": "aten::native_layer_norm", "aten::rms_norm": "aten::_fused_rms_norm or its elementwise ops",
    "aten::batch_norm": "aten::native/cudnn/miopen_batch_norm",
    "aten::_batch_norm_impl_index": "aten::native/cudnn/miopen_batch_norm",
    "aten::softmax": "aten::_softmax", "aten::log_softmax": "aten::_log_softmax",
    "aten::max_pool2d": "aten::max_pool2d_with_indices", "aten::max_pool3d": "aten::max_pool3d_with_indices",
    "aten::embedding": "aten::index_select", "aten::to": "aten::copy_", "aten::_to_copy": "aten::copy_",
    "aten::clone": "aten::copy_", "aten::contiguous": "aten::copy_",
}

_MODELS: dict[str, Callable[[_Args], OpCost]] = {
    "aten::mm": _mm, "aten::bmm": _mm, "aten::addmm": _addmm, "aten::baddbmm": _addmm,
    "aten::_scaled_mm": _scaled_mm,
    **{name: partial(_conv, pos=pos) for name, pos in _CONV_FORWARD.items()},
    "aten::convolution_backward": _conv_backward,
    **{name: partial(_attention, spec=spec) for name, spec in _ATTENTION.items()},
    "aten::native_layer_norm": _layer_norm, "aten::_fused_rms_norm": lambda a: _layer_norm(a, rms=True),
    "aten::native_layer_norm_backward": _layer_norm_backward,
    "aten::native_batch_norm": _batch_norm, "aten::cudnn_batch_norm": _batch_norm,
    "aten::miopen_batch_norm": _batch_norm,
    **{name: partial(_batch_norm_backward, spec=spec) for name, spec in _BATCH_NORM_BACKWARD.items()},
    **dict.fromkeys(("aten::cudnn_convolution_backward_input", "aten::miopen_convolution_backward_input",
                     "aten::miopen_depthwise_convolution_backward_input"), _conv_backward_input),
    **dict.fromkeys(("aten::cudnn_convolution_backward_weight", "aten::miopen_convolution_backward_weight",
                     "aten::miopen_depthwise_convolution_backward_weight"), _conv_backward_weight),
    "aten::_softmax": _softmax, "aten::_log_softmax": _softmax,
    "aten::_softmax_backward_data": _softmax_backward, "aten::_log_softmax_backward_data": _softmax_backward,
    "aten::index_select": _index_select, "aten::embedding_dense_backward": _embedding_backward,
    **dict.fromkeys((f"aten::max_pool{d}d_with_indices" for d in (2, 3)), _max_pool),
    **dict.fromkeys((f"aten::max_pool{d}d_with_indices_backward" for d in (2, 3)), _max_pool_backward),
    "aten::mse_loss": _mse_loss, "aten::mse_loss_backward": _mse_loss_backward,
    "aten::cat": _tensor_lists,
    "aten::_fused_adam_": _tensor_lists, "aten::_fused_adamw_": _tensor_lists, "aten::_fused_sgd_": _tensor_lists,
}


def _linear(a: _Args) -> OpCost:
    """linear(input[..., K], weight[N, K], bias[N]): out[..., N]."""
    (x, tx), (w, tw) = a.tensor(0, "input"), a.tensor(1, "weight")
    _require(len(x) >= 1 and len(w) == 2 and x[-1] == w[1] and tx == tw, a.name, f"input {x} ({tx}), weight {w} ({tw})")
    rows = math.prod(x[:-1])
    read = _bytes(a.unique_elements(0), tx) + _bytes(a.unique_elements(1), tw)
    if a.optional_tensor(2, "bias") is not None:
        read += _bytes(a.unique_elements(2), a.types[2])
    return OpCost(2 * rows * w[0] * w[1], read, _bytes(rows * w[0], tx), _DTYPES[tx][0], "tensor", "gemm")


def _embedding(a: _Args) -> OpCost:
    """embedding(weight[V, D], indices, ...): the rows of the indices, gathered."""
    (w, tw), (idx, ti) = a.tensor(0, "weight"), a.tensor(1, "indices")
    _require(len(w) == 2, a.name, f"weight {w} is not 2-D")
    out = math.prod(idx) * w[1]
    return OpCost(0, _bytes(out, tw) + _nbytes(idx, ti), _bytes(out, tw), _DTYPES[tw][0], "vector", "gather")


#: composite ops modelled as a whole when no recorded op under them launches the kernels
#: (``model_op(..., leaf=True)``: e.g. a transposed convolution on the CPU runs under _convolution)
_COMPOSITE_MODELS: dict[str, Callable[[_Args], OpCost]] = {
    "aten::linear": _linear, "aten::embedding": _embedding,
    "aten::convolution": partial(_conv, pos=_CONVOLUTION), "aten::_convolution": partial(_conv, pos=_CONVOLUTION),
    **{f"aten::conv{d}d": partial(_conv, pos=_CONV_ND) for d in (1, 2, 3)},
    **{f"aten::conv_transpose{d}d": partial(_conv, pos=_CONV_TRANSPOSE_ND) for d in (1, 2, 3)},
    "aten::_scaled_dot_product_flash_attention": partial(_attention, spec=_Attention(0, "bhsd", 4)),
    "aten::_scaled_dot_product_efficient_attention": partial(_attention, spec=_Attention(0, "bhsd", 6)),
    "aten::_scaled_dot_product_flash_attention_backward": partial(
        _attention, spec=_Attention(1, "bhsd", 11, backward=True, varlen=6)),
    "aten::_scaled_dot_product_efficient_attention_backward": partial(
        _attention, spec=_Attention(1, "bhsd", 11, backward=True)),
    "aten::layer_norm": _layer_norm,
    "aten::batch_norm": _batch_norm, "aten::_batch_norm_impl_index": _batch_norm,
}


def _model_for(name: str) -> Callable[[_Args], OpCost] | None:
    if name in _MODELS:
        return _MODELS[name]
    if name.startswith("aten::_foreach_"):
        return _tensor_lists
    base = name.removeprefix("aten::").rstrip("_")
    if not name.startswith("aten::"):
        return None
    if base in _ELEMENTWISE_FLOPS:
        return lambda a: _elementwise(a, base)
    if base in _REDUCTIONS and not name.endswith("_"):
        return lambda a: _reduction(a, base)
    return None


def modelled_ops() -> list[str]:
    """The op names with a model (elementwise, reduction and _foreach_ ops by their base names)."""
    names = set(_MODELS) | set(_COMPOSITE_MODELS) | {f"aten::{b}" for b in (*_ELEMENTWISE_FLOPS, *_REDUCTIONS)}
    return sorted(names)


def model_op(name: str, dims: Sequence[Any], types: Sequence[str], strides: Sequence[Any] | None = None,
             concrete: Sequence[str] | None = None, *, leaf: bool = False,
             caller_dims: Sequence[Any] | None = None, output_dims: Any = None) -> OpCost | Unmodelled:
    """Cost of one op from its recorded "Input Dims", "Input type", "Input Strides" and "Concrete
    Inputs" (``None`` where the trace has no such field), or why it has none.

    ``leaf``: no recorded op under this one launches its kernels. A composite op (linear,
    convolution, layer_norm ...) is then modelled itself; by default it is ``counted_at_leaf``.
    ``caller_dims``: the "Input Dims" of the op that called this one, for the ops of
    :data:`SIZES_FROM_CALLER` (an int[] argument that is the caller's tensor's shape).
    ``output_dims``: the shape of the op's first output where another record gives it (the
    gradient its backward op received: "Input Dims"[0] of the autograd node that a ``fwdbwd``
    link pairs with it); used by the forward convolutions when stride or padding is not recorded,
    and checked against them when it is."""
    if name in _COUNTED_AT_LEAF and not (leaf and name in _COMPOSITE_MODELS):
        return Unmodelled("counted_at_leaf", f"{name}: its kernels run under {_COUNTED_AT_LEAF[name]}")
    model = _COMPOSITE_MODELS.get(name) if leaf else None
    model = model or _model_for(name)
    if model is None:
        return Unmodelled("not_modelled", f"{name}: no cost model")
    if not isinstance(dims, (list, tuple)) or not isinstance(types, (list, tuple)) or len(dims) != len(types):
        return Unmodelled("missing_shapes", f"{name}: Input Dims and Input type missing or of different lengths")
    try:
        output = output_dims if isinstance(output_dims, list) and all(type(d) is int for d in output_dims) else None
        return model(_Args(name, dims, types, strides, concrete, _from_caller(name, dims, caller_dims), output))
    except _Skip as skip:
        return Unmodelled(skip.reason, skip.detail)


def op_cost(name: str, dims: Sequence[Any], types: Sequence[str], strides: Sequence[Any] | None = None,
            concrete: Sequence[str] | None = None, *, leaf: bool = False,
            caller_dims: Sequence[Any] | None = None, output_dims: Any = None) -> OpCost | None:
    """:func:`model_op`, None when the op has no cost."""
    result = model_op(name, dims, types, strides, concrete, leaf=leaf, caller_dims=caller_dims,
                      output_dims=output_dims)
    return result if isinstance(result, OpCost) else None
