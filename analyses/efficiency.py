"""Efficiency: how far ops, steps and collectives are from the hardware's peak (roofline, HFU, bus bandwidth).

Definitions (docs/metrics.md, "Efficiency"), per rank and GPU device; times int64 ns:

- Attribution. Each compute kernel (not communication, not memcpy/memset) belongs to the CPU op that
  issued its launch call: launch call -> op by the ``cpu_op`` link (External id; where several ops
  are linked, the innermost, i.e. latest start) or, without one, the innermost CPU op on the
  launching thread containing the call (``steps.issuing_cpu_op``). Every op has its own
  External id in the shared Kineto traces and the runtime call carries the innermost op's, so a
  nested ``aten::linear -> aten::addmm`` gives the kernel to ``aten::addmm``. Kernels without an op
  are *unattributed*, by reason, with their time, never guessed: ``graph_replay`` (launched by a
  graph launch: the ops ran at capture time), ``no_launch_call`` (launched before the profiling
  window, or no link), ``no_cpu_op`` (no op around the launch call), ``annotation_only`` (only a
  user annotation around it).
- Op cost. An op that owns kernels is modelled by ``analyses/opmodels.py`` from its recorded
  ``input_dims``/``input_types``/``input_strides``/``concrete_inputs`` (each JSON text decoded once
  per distinct text); it is a *leaf* (a composite such as ``aten::linear`` is then modelled itself)
  unless an op nested in it owns kernels too. Where its own record lacks a size, two records of
  the same call give it: the calling op's shapes (``opmodels.SIZES_FROM_CALLER``: PyTorch 1.x's
  split convolution backward ops) and the gradient shape of the autograd node a ``fwdbwd`` link
  pairs with a forward convolution (its output); never a guess. ``gpu_ns`` of an op = the sum of
  its kernels' durations (not a union).
- Recorded cost. A compute kernel whose event carries XLA's recorded cost (``recorded_flops`` /
  ``recorded_bytes``: the XSpace ``flops`` / ``bytes_accessed`` stats) is its own op instance,
  model ``xla recorded``, with those FLOPs and bytes, beside the modelled ops
  (``efficiency_recorded.py``); XLA records no dtype, so its peak is the dense tensor peak of
  ``Options.mfu_dtype``. Traces without the columns are unchanged.
- Roof. The GPU is matched by the device name the trace records (``traceview.hardware``; a user
  file via ``Options.gpu_specs``). peak = the dense peak of the op's dtype on its unit (tensor for
  products, vector otherwise; a product in a dtype the tensor units have no published peak for, e.g.
  fp32, uses the vector peak: PyTorch's default with TF32 off, unless that op name's calls ran faster
  than it allows: then on the TF32 tensor peak; a bf16/fp16 vector op without a vector peak uses the
  fp32 one: PyTorch computes them in fp32; an op of no FLOPs needs only the bandwidth; an integer or
  boolean op off the tensor units, index arithmetic and masks, has no published peak and is not
  judged, which is no warning); bandwidth = device memory bandwidth.
  Only verified figures are used: an unverified or missing one leaves the roof empty and ``roof``
  says why.
- Per op: intensity = FLOPs / bytes; ridge = peak / bandwidth; bound = compute when intensity >=
  ridge, else memory; roofline_ns = max(FLOPs / peak, bytes / bandwidth); efficiency = roofline_ns /
  gpu_ns; above_roofline_ns = max(gpu_ns - roofline_ns, 0). Per op type (name, dtype, unit): sums
  over its calls, achieved TFLOP/s = FLOPs / gpu_ns, achieved GB/s = bytes / gpu_ns.
- Per step (and whole trace, ``step`` None): window = the temporal breakdown's GPU window; compute
  roof time = sum over modelled ops of FLOPs / peak; HFU (hardware FLOPs utilisation) = compute
  roof time / window (= FLOPs / (peak x window) for one dtype). MFU (model FLOPs utilisation, when
  the user gives the model's FLOPs per step and GPU, ``Options.model_flops_per_step``) = model
  FLOPs / (dense tensor peak of ``Options.mfu_dtype`` x window); whole trace: over its steps. Above
  100% it is a broken input (the FLOPs or the peak), never a result: no figure, a warning.
- Coverage: ``op_ns`` = kernel time attributed to an op; ``modelled_ns`` = that of ops with a cost;
  ``modelled_pct`` = 100 x modelled / op.
- Collectives (cross-rank): each communication kernel with a known message size S (``msg_bytes``)
  and group size n. time = the shortest duration of that collective instance (the k-th occurrence
  of its kind and process group in its step, ``collectives.match_collectives``) over the ranks
  when all n ranks are in the trace (the others' durations include waiting), else the rank's own
  (``time_basis`` says which); algbw = S / time; busbw = algbw x factor (nccl-tests: AllReduce
  2(n-1)/n, AllGather, ReduceScatter, AllToAll (n-1)/n, Broadcast, Reduce, SendRecv 1; other
  kinds have none); link_share = busbw / the GPU's one-direction link bandwidth (the table's
  ``interconnect_gbs``, both directions, halved), verified figures only; a group spanning nodes is
  bound by the network instead, which the table does not know.

Findings: ``below_roofline`` (per op family and dtype: efficiency below 50% and the time above the
roofline at least 2% of the GPU window; claims: the last (1 - efficiency) of each of its kernels),
``tiny_gemms`` (matrix products that would take under 2 us at peak: launch and ramp-up dominate;
their claims are left out of ``below_roofline``'s), ``collective_bandwidth`` (a collective kind
below 25% of the link's bandwidth, every instance timed over its whole group; claims: per instance
the last (time - S x factor / link) of its kernel, the time above the link-bandwidth roofline,
where it is exposed; part of ``exposed_collective``). An unknown GPU or an unverified peak raises
no finding: a warning says what could not be computed, once per distinct cause (no rank or GPU in
its text: the report names the ranks that gave it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import numpy as np
import pandas as pd

from traceview import hardware as hw
from traceview import intervals as iv
from traceview.claims import Claims
from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult, Finding, Headline, Options
from traceview.model import DeviceInfo, Kind, Trace
from traceview.registry import AnalysisSpec, TableSpec, register_input
from traceview.units import fmt_ns

from . import classify
from .efficiency_recorded import (RECORDED_DTYPE, RECORDED_MODEL, not_gpu_warnings, recorded_costs, recorded_ops,
                                  roof_note)
from .efficiency_rollup import INTEGER_DTYPES, family_table, report_summary
from .collectives import match_collectives
from .opmodels import FORWARD_CHAINS, OUTPUT_FROM_BACKWARD, SIZES_FROM_CALLER, OpCost, model_op
from .steps import (NO_STEP, Activity, activity, count_per, flow_links, issuing_cpu_op, per_step, step_column,
                    time_per)

NAME = "efficiency"

#: attribution of a compute kernel (index = code)
ATTRIBUTION = ("op", "graph_replay", "no_launch_call", "no_cpu_op", "annotation_only")
#: below_roofline fires for an op family under this efficiency ...
LOW_EFFICIENCY = 0.5
#: ... whose time above the roofline is at least this share of the GPU window
MIN_ABOVE_SHARE = 0.02
#: a matrix product that would take less than this at peak cannot fill the GPU
TINY_GEMM_NS = 2_000
TINY_GEMM_MODELS = ("gemm", "scaled_mm")
#: tiny_gemms fires when tiny products take at least this share of the GPU window
TINY_GEMM_SHARE = 0.02
#: collective_bandwidth fires for a kind under this share of the link, taking this share of the window
LOW_LINK_SHARE = 0.25
MIN_COLLECTIVE_SHARE = 0.02
TIMED_OVER_GROUP = "shortest over the group"
#: efficiency above this is not a result: bytes served from cache, or a roof too low (TF32)
OVER_ROOF = 1.05
#: nccl-tests bus-bandwidth factors by collective kind, for a group of n ranks (other kinds have none)
BUS_FACTORS = {"AllReduce": "2(n-1)/n", "AllGather": "(n-1)/n", "ReduceScatter": "(n-1)/n", "AllToAll": "(n-1)/n",
               "Broadcast": "1", "Reduce": "1", "SendRecv": "1", "Send": "1", "Recv": "1"}
_FAMILY_LABEL = {"gemm": "GEMMs", "scaled_mm": "FP8 scaled GEMMs", "conv": "convolutions",
                 "conv_backward": "convolution backward", "attention": "attention", "attention_backward":
                 "attention backward", "elementwise": "elementwise ops", "copy": "copies", "reduction":
                 "reductions", "layer_norm": "layer norms", "rms_norm": "RMS norms", "layer_norm_backward":
                 "layer norm backward", "batch_norm": "batch norms", "softmax": "softmax", "softmax_backward":
                 "softmax backward", "gather": "gathers (embedding)", "scatter_add": "embedding backward",
                 "pool": "max pooling", "pool_backward": "max pooling backward", "loss": "losses",
                 "loss_backward": "loss backward", RECORDED_MODEL: "XLA ops (recorded cost)"}


# ------------------------------------------------------------------------------------ the roof


@dataclass(frozen=True)
class Roof:
    """The peaks one op type is judged against on one GPU; None figures come with ``why``."""

    peak_flops: float | None
    bandwidth: float | None
    label: str


def gpu_specs(path: str | None) -> dict[str, hw.GpuSpec]:
    """The GPU table: built in, with the user file ``path`` (``Options.gpu_specs``) applied (read
    once per analysis context: the derived input ``efficiency.gpu_specs``)."""
    return hw.load_specs(Path(path) if path else None)


def gpu_of(ctx: AnalysisContext, rank: int, device: int) -> tuple[str, hw.GpuSpec | None]:
    """(recorded device name, matched spec or None) of one rank's GPU."""
    trace = ctx.trace
    info = trace.ranks.get(rank)
    devices: list[DeviceInfo] = info.devices if info is not None else []
    name = next((d.name for d in devices if d.id == device), "")
    if not name and len(devices) == 1:
        name = devices[0].name  # one GPU per process: its ids differ when *_VISIBLE_DEVICES remaps them
    return name, (hw.match_gpu(name, ctx.input("efficiency.gpu_specs")) if name else None)


def roof_of(name: str, spec: hw.GpuSpec | None, dtype: str, unit: str, flops: int = 1) -> Roof:
    """The roof of ``dtype`` on ``unit`` (see the module docstring), or why there is none. An op of
    no FLOPs (a copy, a gather) needs only the bandwidth."""
    bandwidth = hw.memory_bandwidth_bytes_per_s(spec) if spec is not None else None
    if spec is not None and flops == 0 and bandwidth is not None:
        return Roof(np.inf, bandwidth, f"{spec.name}: {bandwidth / 1e9:.4g} GB/s (no FLOPs)")
    if is_bookkeeping(dtype, unit):
        return Roof(None, None, f"{dtype} on the vector units: {BOOKKEEPING_ROOF}")
    tensor, compute_dtype = unit == "tensor", dtype
    if spec is not None and tensor and hw.normalize_dtype(dtype) not in spec.tensor_tflops:
        tensor = False  # no tensor-unit peak for this dtype: products run on the vector units
    if spec is not None and not tensor and dtype in _OPMATH_FP32 and hw.normalize_dtype(dtype) not in \
            spec.vector_tflops:
        compute_dtype = "fp32"  # PyTorch's vector kernels compute 16-bit floats in fp32 (opmath)
    why = hw.missing_peak_reason(name, spec, compute_dtype, tensor)
    if spec is None or why is not None:
        return Roof(None, None, why or "no roof")
    peak = hw.peak_flops(spec, compute_dtype, tensor)
    assert peak is not None and bandwidth is not None  # missing_peak_reason said both exist
    units = "tensor" if tensor else "vector"
    return Roof(peak, bandwidth, f"{spec.name}: {compute_dtype} {units} {peak / 1e12:.4g} TFLOP/s, "
                                 f"{bandwidth / 1e9:.4g} GB/s")


_OPMATH_FP32 = ("bf16", "fp16")
BOOKKEEPING_ROOF = "an integer (index or bookkeeping) op: no vendor publishes an integer vector peak, not judged"


def is_bookkeeping(dtype: str, unit: str) -> bool:
    """An op of an integer or boolean dtype off the tensor units (index arithmetic, masks, counts):
    it has no FLOP peak to be judged on, and that is no warning (an int8 product on the tensor units
    is judged on its int8 peak)."""
    return unit != "tensor" and str(dtype) in INTEGER_DTYPES


# ------------------------------------------------------------------------------------ attribution


@dataclass
class OpKernels:
    """Compute kernels with their op, and the modelled op instances (one entry per op row)."""

    rank: np.ndarray
    device: np.ndarray
    step: np.ndarray
    start: np.ndarray
    end: np.ndarray
    attribution: np.ndarray  # index into ATTRIBUTION
    instance: np.ndarray  # index into ``ops`` (-1 when unattributed)
    ops: pd.DataFrame  # per op instance: row, rank, device, step, name, gpu_ns, kernels, cost figures


def _codes(ctx: AnalysisContext, column: str) -> tuple[np.ndarray, list[Any]]:
    """Dictionary codes of a column (-1 for null) and its dictionary."""
    return classify.dictionary_codes(ctx, column)


def attribute(ctx: AnalysisContext) -> OpKernels:
    """Compute kernels and the ops they belong to (cached per trace and options)."""
    value = ctx.input("efficiency.attribute")
    return value


def _attribute(ctx: AnalysisContext) -> OpKernels:
    trace = ctx.trace
    act = activity(ctx)
    sel = np.flatnonzero((act.kind == int(Kind.KERNEL)) & (act.cls == classify.COMPUTE))
    graph = ctx.input("launch_overhead.kinds").graph[sel]
    api = act.api_row[sel]
    op = np.full(sel.size, -1, dtype=np.int64)
    ask = (api >= 0) & ~graph
    op[ask] = issuing_cpu_op(ctx, api[ask])
    # a kernel with XLA's recorded cost is its own op instance (efficiency_recorded), not its CPU op's
    recorded, rec_flops, rec_bytes = recorded_costs(trace, act.row[sel])
    is_op = (op >= 0) & (trace.kind_codes()[np.maximum(op, 0)] == int(Kind.CPU_OP)) & ~recorded
    attribution = np.select([is_op | recorded, graph, api < 0, op < 0], [0, 1, 2, 3], 4).astype(np.int64)
    instance = np.full(sel.size, -1, dtype=np.int64)
    rows, inverse = np.unique(op[is_op], return_inverse=True)
    instance[is_op] = inverse
    dur = act.end[sel] - act.start[sel]
    first = np.full(rows.size, np.iinfo(np.int64).max)
    np.minimum.at(first, inverse, act.start[sel][is_op])
    at_first = is_op.copy()
    at_first[is_op] = act.start[sel][is_op] == first[inverse]
    kernel_of = np.full(rows.size, -1, dtype=np.int64)
    kernel_of[instance[at_first][::-1]] = np.flatnonzero(at_first)[::-1]  # the first kernel of each op
    ops = pd.DataFrame({
        "row": rows, "rank": act.rank[sel][kernel_of], "device": act.device[sel][kernel_of],
        "step": act.step[sel][kernel_of],
        "gpu_ns": np.bincount(inverse, weights=dur[is_op], minlength=rows.size).astype(np.int64),
        "kernels": np.bincount(inverse, minlength=rows.size).astype(np.int64),
    })
    ops = _with_costs(ctx, ops, _leaf(trace, rows))
    if recorded.any():
        at = np.flatnonzero(recorded)
        instance[at] = len(ops) + np.arange(at.size)
        names = trace.names()[act.row[sel][at]] if at.size else np.zeros(0, object)
        ops = pd.concat([ops, recorded_ops(act.row[sel][at], names, act.rank[sel][at], act.device[sel][at],
                                           act.step[sel][at], dur[at], rec_flops[at], rec_bytes[at])],
                        ignore_index=True)
    return OpKernels(act.rank[sel], act.device[sel], act.step[sel], act.start[sel], act.end[sel], attribution,
                     instance, ops)


def _leaf(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Per op row that owns kernels: no other op owning kernels is nested in it (ops on a thread nest,
    so it is a leaf unless the next owner on its thread, by start, starts before it ends)."""
    if rows.size == 0:
        return np.zeros(0, dtype=bool)
    start = trace.column("start_ns")[rows]
    end = start + np.maximum(trace.column("dur_ns")[rows], 0)
    thread, _ = iv.combine_keys(trace.column("rank")[rows], trace.column("pid")[rows], trace.column("tid")[rows])
    order = np.lexsort((-end, start, thread))  # outer op first where two start together
    t, s, e = thread[order], start[order], end[order]
    contains = np.zeros(rows.size, dtype=bool)
    contains[:-1] = (t[1:] == t[:-1]) & (s[1:] < e[:-1])
    leaf = np.empty(rows.size, dtype=bool)
    leaf[order] = ~contains
    return leaf


_INPUT_COLUMNS = ("input_dims", "input_types", "input_strides", "concrete_inputs")


def _decoded(dictionary: list[Any], used: np.ndarray) -> dict[int, Any]:
    """The JSON texts of a dictionary column decoded once each (only the codes in ``used``); an
    unreadable text decodes to None (the op is then unmodelled for missing shapes)."""
    out: dict[int, Any] = {}
    for code in used.tolist():
        if code < 0 or dictionary[code] is None:
            out[code] = None
            continue
        try:
            out[code] = msgspec.json.decode(dictionary[code])
        except msgspec.DecodeError:
            out[code] = None
    return out


def _distinct_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of integer ``columns`` (each >= -1) as a (k, len(columns)) array, and the
    index of each row's among them: hashed one column at a time (``pd.factorize``), where
    ``np.unique(axis=0)`` sorts whole rows (0.08 s for the 150k ops of the benchmark trace)."""
    n = len(columns[0])
    if n == 0:
        return np.zeros((0, len(columns)), dtype=np.int64), np.zeros(0, dtype=np.int64)
    key = np.zeros(n, dtype=np.int64)
    groups = 1
    for column in columns:
        # key < groups and column + 1 <= max + 1: the pair fits int64 while groups * (max + 2) does
        key, uniques = pd.factorize(key * (int(column.max()) + 2) + (column + 1), sort=False)
        groups = len(uniques)
    any_row = np.zeros(groups, dtype=np.int64)
    any_row[key] = np.arange(n)  # one row of each group: all of its rows hold the same values
    return np.stack(columns, axis=1)[any_row], key.astype(np.int64)


def _with_costs(ctx: AnalysisContext, ops: pd.DataFrame, leaf: np.ndarray) -> pd.DataFrame:
    """``ops`` with the cost of each op: one :func:`model_op` call per distinct (name, inputs, leaf)."""
    trace = ctx.trace
    rows = ops["row"].to_numpy()
    name_codes, names = _codes(ctx, "name")
    columns = [name_codes[rows]]
    decoded = []
    for column in _INPUT_COLUMNS:  # the codes at the ops' rows only (not cached: see dictionary_codes)
        codes, dictionary = classify.dictionary_codes_at(ctx, column, rows)
        columns.append(codes)
        decoded.append(_decoded(dictionary, np.unique(codes)))
    # shapes another op records: the caller's (SIZES_FROM_CALLER), the backward node's (the output)
    for linked in (_callers(trace, rows, name_codes, names), _backward_nodes(trace, rows, name_codes, names)):
        dims_codes, dims_dictionary = classify.dictionary_codes_at(ctx, "input_dims", np.maximum(linked, 0))
        columns.append(np.where(linked >= 0, dims_codes, -1))
        decoded.append(_decoded(dims_dictionary, np.unique(columns[-1])))
    distinct, inverse = _distinct_rows(columns + [leaf.astype(np.int64)])
    results = []
    for k in distinct.tolist():
        dims, types, strides, concrete, caller_dims, node_dims = (decoded[i][k[i + 1]] for i in range(6))
        output = node_dims[0] if isinstance(node_dims, list) and node_dims else None
        results.append(model_op(names[k[0]] or "", dims, types, strides, concrete, leaf=bool(k[7]),
                                caller_dims=caller_dims, output_dims=output))
    per_result = pd.DataFrame(
        [(names[k[0]] or "", True, r.flops, r.bytes_read + r.bytes_written, r.dtype, r.unit, r.model, "", "")
         if isinstance(r, OpCost) else (names[k[0]] or "", False, 0, 0, "", "", "", r.reason, r.detail)
         for k, r in zip(distinct.tolist(), results)],
        columns=["name", "modelled", "flops", "bytes", "dtype", "unit", "model", "reason", "detail"])
    per_op = per_result.iloc[inverse.reshape(-1)].reset_index(drop=True)
    per_op = per_op.astype({"modelled": bool, "flops": np.int64, "bytes": np.int64})
    per_op["has_dims"] = columns[1] >= 0
    return pd.concat([ops.reset_index(drop=True), per_op], axis=1)


def _enclosing(trace: Trace, inner: np.ndarray, outer: np.ndarray) -> np.ndarray:
    """Per row of ``inner``: the latest-starting row of ``outer`` on the same thread that starts at
    or before it and ends at or after it (-1 for none): an as-of join on start time per thread.
    Rows of ``outer`` do not nest in one another, so the latest one before is the only candidate."""
    out = np.full(inner.size, -1, dtype=np.int64)
    if inner.size == 0 or outer.size == 0:
        return out
    both = np.concatenate([inner, outer])
    thread, _ = iv.combine_keys(trace.column("rank")[both], trace.column("pid")[both], trace.column("tid")[both])
    start, dur_ns = trace.column("start_ns"), trace.column("dur_ns")

    def dur(at: np.ndarray) -> np.ndarray:  # at the rows asked for only: no array over every event
        return np.maximum(dur_ns[at], 0)

    left = pd.DataFrame({"at": np.arange(inner.size), "thread": thread[:inner.size], "start": start[inner]})
    right = pd.DataFrame({"outer": outer, "thread": thread[inner.size:], "start": start[outer]})
    found = pd.merge_asof(left.sort_values("start"), right.sort_values("start"), on="start", by="thread",
                          direction="backward").dropna(subset=["outer"])
    at, rows = found["at"].to_numpy(np.int64), found["outer"].to_numpy(np.int64)
    encloses = start[rows] + dur(rows) >= start[inner[at]] + dur(inner[at])
    out[at[encloses]] = rows[encloses]
    return out


def _callers(trace: Trace, rows: np.ndarray, name_codes: np.ndarray, names: list[Any]) -> np.ndarray:
    """Per op row of ``rows``: for the ops of ``SIZES_FROM_CALLER``, the innermost enclosing op of
    one of their caller names on the same thread (-1 for none or other ops)."""
    out = np.full(rows.size, -1, dtype=np.int64)
    spec_of = {i: SIZES_FROM_CALLER[n] for i, n in enumerate(names) if n in SIZES_FROM_CALLER}
    child = np.flatnonzero(np.isin(name_codes[rows], list(spec_of)))
    caller_codes = [i for i, n in enumerate(names) if any(n in spec.callers for spec in spec_of.values())]
    if child.size == 0 or not caller_codes:
        return out
    ops = np.flatnonzero((trace.kind_codes() == int(Kind.CPU_OP)) & np.isin(name_codes, caller_codes))
    callers = _enclosing(trace, rows[child], ops)
    width = len(names) + 1
    allowed = [child_code * width + i for child_code, spec in spec_of.items()
               for i, n in enumerate(names) if n in spec.callers]
    ok = (callers >= 0) & np.isin(name_codes[rows[child]] * width + name_codes[np.maximum(callers, 0)], allowed)
    out[child[ok]] = callers[ok]
    return out


def _backward_nodes(trace: Trace, rows: np.ndarray, name_codes: np.ndarray, names: list[Any]) -> np.ndarray:
    """Per op row of ``rows``: for the ops of ``OUTPUT_FROM_BACKWARD``, the autograd node that a
    ``fwdbwd`` flow link pairs with the op or with an op of its chain enclosing it on its thread
    (``FORWARD_CHAINS``: PyTorch links the op that created the node, e.g. aten::convolution over
    aten::cudnn_convolution); -1 for none or other ops."""
    out = np.full(rows.size, -1, dtype=np.int64)
    src, dst = flow_links(trace, "fwdbwd")
    if src.size == 0:
        return out
    wanted = [i for i, n in enumerate(names) if n in OUTPUT_FROM_BACKWARD]
    inner = np.flatnonzero(np.isin(name_codes[rows], wanted))
    chain = [i for i, n in enumerate(names) if n in FORWARD_CHAINS]
    linked = np.isin(name_codes[src], chain)
    src, dst = src[linked], dst[linked]
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    outer = _enclosing(trace, rows[inner], np.unique(src))
    has = outer >= 0
    out[inner[has]] = dst[np.searchsorted(src, outer[has])]  # one node per forward op: the first link
    return out


def with_roofs(ctx: AnalysisContext, ops: pd.DataFrame) -> pd.DataFrame:
    """Modelled op instances with their roof: ``peak_flops``, ``bandwidth`` (NaN when unknown),
    ``roof`` (the figures used, or why there are none), ``compute_roof_ns`` = FLOPs / peak,
    ``roofline_ns`` = max(FLOPs / peak, bytes / bandwidth), ``tiny_gemm``."""
    ops = ops.assign(instance=np.arange(len(ops)))
    ops = ops[ops["modelled"].to_numpy(dtype=bool)].reset_index(drop=True)
    ops = ops.assign(no_flops=ops["flops"].to_numpy() == 0)
    on = ["rank", "device", "dtype", "unit", "no_flops"]
    roofs = []
    for rank, device, dtype, unit, no_flops in ops[on].drop_duplicates().itertuples(index=False):  # a handful
        gpu_name, spec = gpu_of(ctx, int(rank), int(device))
        recorded = str(dtype) == RECORDED_DTYPE  # XLA's recorded cost: no dtype (efficiency_recorded)
        roof = roof_of(gpu_name, spec, ctx.options.mfu_dtype if recorded else str(dtype), str(unit),
                       0 if no_flops else 1)
        label = roof.label + roof_note(ctx.options.mfu_dtype) if recorded and roof.peak_flops else roof.label
        roofs.append((rank, device, dtype, unit, no_flops, roof.peak_flops or np.nan, roof.bandwidth or np.nan,
                      label))
    table = pd.DataFrame(roofs, columns=on + ["peak_flops", "bandwidth", "roof"])
    ops = _tf32_where_faster(ctx, ops.merge(table, on=on, how="left").drop(columns="no_flops"))
    flops, nbytes = ops["flops"].to_numpy(np.float64), ops["bytes"].to_numpy(np.float64)
    compute_ns = flops / ops["peak_flops"].to_numpy() * 1e9
    memory_ns = nbytes / ops["bandwidth"].to_numpy() * 1e9
    ops["compute_roof_ns"] = compute_ns
    ops["roofline_ns"] = np.fmax(compute_ns, memory_ns) if len(ops) else compute_ns
    ops.loc[ops["peak_flops"].isna() | ops["bandwidth"].isna(), "roofline_ns"] = np.nan
    ops["tiny_gemm"] = ops["model"].isin(TINY_GEMM_MODELS).to_numpy() & (compute_ns < TINY_GEMM_NS)
    return ops


def _tf32_where_faster(ctx: AnalysisContext, ops: pd.DataFrame) -> pd.DataFrame:
    """fp32 products of an op name that ran faster than the fp32 vector peak allows ran on TF32
    tensor units (PyTorch's allow_tf32; cuDNN's default): they are judged on the TF32 peak."""
    fp32 = (ops["unit"] == "tensor").to_numpy() & (ops["dtype"] == "fp32").to_numpy() & ops["peak_flops"].notna()
    if not fp32.any():
        return ops
    sums = ops[fp32].groupby(["rank", "device", "name"])[["flops", "gpu_ns", "peak_flops"]].agg(
        {"flops": "sum", "gpu_ns": "sum", "peak_flops": "first"})
    faster = sums[sums["flops"] / np.maximum(sums["gpu_ns"], 1) * 1e9 > sums["peak_flops"]]
    ops = ops.copy()
    for rank, device, name in faster.index:
        gpu_name, spec = gpu_of(ctx, int(rank), int(device))
        roof = roof_of(gpu_name, spec, "tf32", "tensor")
        if roof.peak_flops is None or spec is None or "tf32" not in spec.tensor_tflops:
            continue  # no TF32 peak: the op type stays over its roofline, and a warning says so
        at = fp32 & (ops["rank"] == rank).to_numpy() & (ops["device"] == device).to_numpy() & (
            ops["name"] == name).to_numpy()
        ops.loc[at, ["peak_flops", "roof"]] = roof.peak_flops, roof.label + " (TF32: faster than the fp32 peak)"
    return ops


def _ratio(num: Any, den: Any) -> np.ndarray:
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


OP_TYPE_COLUMNS = ["rank", "device", "name", "dtype", "unit", "model", "calls", "gpu_ns", "flops", "bytes",
                   "achieved_tflops", "achieved_gbs", "intensity", "ridge", "bound", "roofline_ns", "efficiency",
                   "above_roofline_ns", "above_roofline_ns_per_step", "roof", "over_roofline", "peak_tflops",
                   "bandwidth_gbs"]


def op_type_table(ops: pd.DataFrame, step_counts: dict[int, int]) -> pd.DataFrame:
    """Per rank, device and op type (name, dtype, unit): the figures of the module docstring."""
    if ops.empty:
        return _empty(OP_TYPE_COLUMNS)
    keys = ["rank", "device", "name", "dtype", "unit", "model"]
    frame = ops.assign(roofed=ops["roofline_ns"].notna(), roofline=ops["roofline_ns"].fillna(0.0))
    g = frame.groupby(keys, sort=False)
    out = g.agg(calls=("row", "size"), gpu_ns=("gpu_ns", "sum"), flops=("flops", "sum"), bytes=("bytes", "sum"),
                roofline_ns=("roofline", "sum"), roofed=("roofed", "all"), peak=("peak_flops", "first"),
                bandwidth=("bandwidth", "first"), roof=("roof", "first")).reset_index()
    gpu = out["gpu_ns"].to_numpy()
    out["achieved_tflops"] = _ratio(out["flops"], gpu) / 1e3  # FLOP per ns = 1e9 FLOP/s
    out["achieved_gbs"] = _ratio(out["bytes"], gpu)  # byte per ns = GB/s
    out["intensity"] = _ratio(out["flops"], out["bytes"])
    out["ridge"] = _ratio(out["peak"].replace(np.inf, np.nan), out["bandwidth"])  # none for ops of no FLOPs
    roofed = out["roofed"].to_numpy(bool)
    out["bound"] = np.where(~roofed, "", np.where(out["intensity"].fillna(0) >= out["ridge"], "compute", "memory"))
    out["roofline_ns"] = np.where(roofed, out["roofline_ns"], np.nan)
    out["efficiency"] = np.where(roofed, _ratio(out["roofline_ns"], gpu), np.nan)
    above = np.where(roofed, np.maximum(gpu - np.nan_to_num(out["roofline_ns"].to_numpy()), 0.0), np.nan)
    out["above_roofline_ns"] = above
    steps = np.array([max(step_counts.get(int(r), 0), 1) for r in out["rank"]], dtype=np.float64)
    out["above_roofline_ns_per_step"] = above / steps
    # faster than the roofline is not a result (cache hits, or TF32 judged on the fp32 roof): no figure
    over = out["efficiency"].to_numpy() > OVER_ROOF
    out.loc[over, ["efficiency", "above_roofline_ns", "above_roofline_ns_per_step"]] = np.nan
    out.loc[over, "roof"] = out.loc[over, "roof"] + " (exceeded: see the warnings)"
    out["over_roofline"] = over
    # the roof's figures as numbers, for the app's roofline chart (NaN: no roof, or no FLOPs to bound)
    out["peak_tflops"] = np.where(roofed, out["peak"].replace(np.inf, np.nan) / 1e12, np.nan)
    out["bandwidth_gbs"] = np.where(roofed, out["bandwidth"] / 1e9, np.nan)
    out = out.sort_values(["rank", "device", "gpu_ns", "name"], ascending=[True, True, False, True])
    return out[OP_TYPE_COLUMNS].reset_index(drop=True)


STEP_COLUMNS = ["rank", "device", "step", "window_ns", "modelled_ops", "flops", "achieved_tflops",
                "compute_roof_ns", "hfu", "roofline_ns", "modelled_gpu_ns", "mfu"]


def step_table(ops: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """Per rank, device and step (step None: whole trace): modelled FLOPs over the GPU window and HFU."""
    if windows.empty:
        return _empty(STEP_COLUMNS)
    # every op counts in its (rank, device) whole-trace row (step NO_STEP) and, when it has one, in
    # its step's row: one group code over those keys and the windows' keys
    n = len(ops)
    o_step = ops["step"].to_numpy(np.int64)
    in_step = np.flatnonzero(o_step != NO_STEP)
    take = np.concatenate([np.arange(n, dtype=np.int64), in_step])
    w_step = windows["step"].astype("Float64").fillna(NO_STEP).astype(np.int64)
    w = windows.assign(step=w_step)
    group, distinct = iv.combine_keys(
        np.concatenate([ops["rank"].to_numpy(np.int64)[take], w["rank"].to_numpy(np.int64)]),
        np.concatenate([ops["device"].to_numpy(np.int64)[take], w["device"].to_numpy(np.int64)]),
        np.concatenate([np.full(n, NO_STEP, dtype=np.int64), o_step[in_step], w_step.to_numpy(np.int64)]))
    n_groups, op_group, w_group = distinct[0].size, group[:take.size], group[take.size:]
    out = w[["rank", "device", "step", "window_ns"]].reset_index(drop=True)
    out["modelled_ops"] = np.bincount(op_group, minlength=n_groups).astype(np.int64)[w_group]
    for column, source in (("flops", "flops"), ("modelled_gpu_ns", "gpu_ns")):
        total = np.zeros(n_groups, dtype=np.int64)
        np.add.at(total, op_group, ops[source].to_numpy(np.int64)[take])
        out[column] = total[w_group]
    # float sums by np.add.reduceat over each group's rows in their order: a group's sum depends on
    # its own rows only, so a rank's figures do not change with the other ranks of its batch (pandas'
    # group sum takes reduceat when the ids of all rows are sorted and a compensated loop otherwise)
    roofed = np.flatnonzero(ops["roofline_ns"].notna().to_numpy()[take])
    order = roofed[np.argsort(op_group[roofed], kind="stable")]
    sorted_group = op_group[order]
    first = np.flatnonzero(np.concatenate([[True], sorted_group[1:] != sorted_group[:-1]])) if order.size else order
    for column in ("compute_roof_ns", "roofline_ns"):
        value = np.full(n_groups, np.nan)
        if order.size:
            value[sorted_group[first]] = np.add.reduceat(ops[column].to_numpy(np.float64)[take][order], first)
        # (an ops table without roofs holds the column as objects: the table keeps that dtype)
        out[column] = value[w_group].astype(ops[column].dtype, copy=False)
    out["achieved_tflops"] = _ratio(out["flops"], out["window_ns"]) / 1e3
    out["hfu"] = _ratio(out["compute_roof_ns"], out["window_ns"])
    out.loc[out["hfu"] > 1.0, "hfu"] = np.nan  # above 100% is a broken roof, never a result (see warnings)
    out["mfu"] = np.nan  # with_mfu fills it when the user gives the model's FLOPs
    out = out.sort_values(["rank", "device", "step"]).reset_index(drop=True)
    out["step"] = step_column(out["step"].to_numpy())
    return out[STEP_COLUMNS]


def with_mfu(steps: pd.DataFrame, ctx: AnalysisContext) -> tuple[pd.DataFrame, list[tuple[int, str]]]:
    """``steps`` with model FLOPs utilisation (``Options.model_flops_per_step``): per step, MFU =
    model FLOPs / (peak x window); the whole-trace row, over its steps: model FLOPs x steps / (peak x
    the steps' windows summed). The peak is the GPU's verified dense tensor peak of
    ``options.mfu_dtype``. Above 100% the input (model FLOPs or peak) is broken: no figure, a warning."""
    options = ctx.options
    flops = options.model_flops_per_step
    if flops is None or steps.empty:
        return steps, []
    out = steps.copy()
    warnings: list[tuple[int, str]] = []
    for (rank, device), rows in out.groupby(["rank", "device"]).groups.items():
        name, spec = gpu_of(ctx, int(rank), int(device))
        peak = hw.peak_flops(spec, options.mfu_dtype, tensor=True) if spec is not None else None
        if peak is None:
            warnings.append((int(rank), "efficiency: no MFU: "
                             f"{hw.missing_peak_reason(name, spec, options.mfu_dtype) or 'no peak'}"))
            continue
        frame = out.loc[rows]
        per_step = frame["step"].notna().to_numpy()
        window_s = frame["window_ns"].to_numpy(np.float64) / 1e9
        mfu = np.where(per_step, flops / (peak * window_s), np.nan)
        if per_step.any():
            mfu[~per_step] = flops * per_step.sum() / (peak * window_s[per_step].sum())
        broken = mfu > 1.0
        if broken.any():
            warnings.append((int(rank), f"efficiency: MFU would be above 100% ({name or 'unnamed GPU'}): the model "
                             f"FLOPs per step given ({flops:.4g}) or the GPU's "
                             f"{options.mfu_dtype} peak is wrong; no MFU is reported"))
            mfu[:] = np.nan
        out.loc[rows, "mfu"] = mfu
    return out, warnings


COVERAGE_COLUMNS = ["rank", "device", "gpu", "kernel_ns", "op_ns", "modelled_ns", "modelled_pct",
                    *(f"{a}_ns" for a in ATTRIBUTION[1:])]


def coverage_table(ctx: AnalysisContext, k: OpKernels) -> pd.DataFrame:
    """Per rank and device: compute kernel time, the part attributed to ops, the part modelled, and
    the unattributed time by reason."""
    if k.rank.size == 0:
        return _empty(COVERAGE_COLUMNS)
    modelled = k.ops["modelled"].to_numpy(bool)
    is_modelled = np.zeros(k.rank.size, dtype=bool)
    has = k.instance >= 0
    is_modelled[has] = modelled[k.instance[has]]
    # exact int64 sums per (rank, device) in key order: what the sorted groupby and pivot gave
    dur = (k.end - k.start).astype(np.int64)
    group, (g_rank, g_device) = iv.combine_keys(k.rank, k.device)

    def sums(mask: np.ndarray | None = None) -> np.ndarray:
        total = np.zeros(g_rank.size, dtype=np.int64)
        np.add.at(total, group if mask is None else group[mask], dur if mask is None else dur[mask])
        return total

    out = pd.DataFrame({"rank": g_rank, "device": g_device, "kernel_ns": sums(), "modelled_ns": sums(is_modelled)})
    for code, label in enumerate(ATTRIBUTION):
        column = "op_ns" if code == 0 else f"{label}_ns"
        has = k.attribution == code
        out[column] = sums(has) if has.any() else 0
    out["modelled_pct"] = 100.0 * _ratio(out["modelled_ns"], out["op_ns"])
    out["gpu"] = [_gpu_label(ctx, int(r), int(d)) for r, d in zip(out["rank"], out["device"])]
    return out[COVERAGE_COLUMNS]


def _gpu_label(ctx: AnalysisContext, rank: int, device: int) -> str:
    name, spec = gpu_of(ctx, rank, device)
    if spec is None:
        return f"unknown ({name or 'no name recorded'})"
    return spec.name


UNMODELLED_COLUMNS = ["rank", "device", "name", "reason", "calls", "gpu_ns", "share_pct", "detail"]


def unmodelled_table(k: OpKernels) -> pd.DataFrame:
    """Per rank, device, op name and reason: the op-linked kernel time without a cost, largest first."""
    ops = k.ops[~k.ops["modelled"].to_numpy(bool)]
    if ops.empty:
        return _empty(UNMODELLED_COLUMNS)
    out = _first_seen_groups(ops, ["rank", "device", "name", "reason"], "gpu_ns", "detail")
    op_ns_keys, op_ns = iv.sum_by(iv.combine_keys(k.ops["rank"].to_numpy(np.int64),
                                                  k.ops["device"].to_numpy(np.int64))[0], k.ops["gpu_ns"].to_numpy())
    ops_codes, _ = iv.combine_keys(np.concatenate([k.ops["rank"].to_numpy(np.int64), out["rank"].to_numpy(np.int64)]),
                                   np.concatenate([k.ops["device"].to_numpy(np.int64),
                                                   out["device"].to_numpy(np.int64)]))
    denominator = iv.lookup(op_ns_keys, op_ns, ops_codes[len(k.ops):])
    out["share_pct"] = 100.0 * _ratio(out["gpu_ns"], denominator)
    out = out.sort_values(["rank", "device", "gpu_ns", "name"], ascending=[True, True, False, True])
    return out[UNMODELLED_COLUMNS].reset_index(drop=True)


def _first_seen_groups(frame: pd.DataFrame, keys: list[str], total: str, first: str) -> pd.DataFrame:
    """``frame.groupby(keys, sort=False).agg(calls=size, <total>=sum, <first>=first).reset_index()``
    from numpy group codes: groups in order of first appearance, rows with a missing key left out,
    exact int64 sums, the first non-missing ``first`` of each group."""
    codes = [pd.factorize(frame[c])[0] for c in keys]
    valid = np.logical_and.reduce([c >= 0 for c in codes])
    rows = np.flatnonzero(valid)
    group, _ = iv.combine_keys(*[c[rows] for c in codes])
    n_groups = int(group.max()) + 1 if group.size else 0
    head = np.full(n_groups, rows.size, dtype=np.int64)
    np.minimum.at(head, group, np.arange(rows.size, dtype=np.int64))
    order = np.argsort(head, kind="stable")  # groups by their first row
    rank_of = np.empty(n_groups, dtype=np.int64)
    rank_of[order] = np.arange(n_groups, dtype=np.int64)
    group = rank_of[group]
    out = pd.DataFrame({c: frame[c].take(rows[head[order]]).reset_index(drop=True) for c in keys})
    out["calls"] = np.bincount(group, minlength=n_groups).astype(np.int64)
    sums = np.zeros(n_groups, dtype=np.int64)
    np.add.at(sums, group, frame[total].to_numpy(np.int64)[rows])
    out[total] = sums
    present = frame[first].notna().to_numpy()[rows]
    first_row = np.full(n_groups, len(frame), dtype=np.int64)
    np.minimum.at(first_row, group[present], rows[present])  # the earliest non-missing row
    found = first_row < len(frame)
    values = frame[first].take(np.where(found, first_row, 0)).reset_index(drop=True)
    out[first] = values.where(found)
    return out


def _empty(columns: list[str]) -> pd.DataFrame:
    text = {"name", "dtype", "unit", "model", "bound", "roof", "gpu", "reason", "detail", "collective",
            "process_group", "time_basis"}
    ints = {"rank", "device", "calls", "gpu_ns", "flops", "bytes", "window_ns", "modelled_ops", "kernel_ns", "op_ns",
            "modelled_ns", "modelled_gpu_ns", "count", "timed_over_group", "dur_ns", "time_ns", "group_size",
            "occurrence"}
    return pd.DataFrame({c: pd.Series(dtype=object if c in text else "Int64" if c == "step" else
                                      bool if c == "over_roofline" else
                                      np.int64 if c in ints or c.endswith("_ns") and c.startswith(tuple(ATTRIBUTION))
                                      else np.float64) for c in columns})


# ------------------------------------------------------------------------------------ findings


def _above_claims(k: OpKernels, roofed: pd.DataFrame) -> Claims:
    """The time above the roofline of the op instances ``roofed``: the last (1 - efficiency) of each
    of their kernels (an op's roofline time is spread over its kernels in proportion to duration)."""
    eff = np.full(len(k.ops), np.nan)
    eff[roofed["instance"].to_numpy()] = np.minimum(
        roofed["roofline_ns"].to_numpy() / np.maximum(roofed["gpu_ns"].to_numpy(), 1), 1.0)
    has = k.instance >= 0
    share = np.full(k.rank.size, np.nan)
    share[has] = eff[k.instance[has]]
    sel = ~np.isnan(share)
    dur = k.end[sel] - k.start[sel]
    cut = k.start[sel] + np.round(dur * share[sel]).astype(np.int64)
    return Claims.of(k.rank[sel], k.device[sel], cut, k.end[sel])


def _windows(windows: pd.DataFrame) -> dict[tuple[int, int], int]:
    whole = windows[windows["step"].isna()]
    return {(int(r), int(d)): int(w) for r, d, w in zip(whole["rank"], whole["device"], whole["window_ns"])}


def below_roofline_findings(k: OpKernels, roofed: pd.DataFrame, windows: pd.DataFrame,
                            step_counts: dict[int, int]) -> list[Finding]:
    """``below_roofline`` per rank, device, op family and dtype; ``tiny_gemms`` per rank and device."""
    findings: list[Finding] = []
    window = _windows(windows)
    roofed = roofed[roofed["roofline_ns"].notna()]
    for (rank, device), ops in roofed.groupby(["rank", "device"], sort=True):
        whole = window.get((int(rank), int(device)), 0)
        steps = step_counts.get(int(rank), 0)
        normal = ops[~ops["tiny_gemm"].to_numpy(bool)]
        for (model, dtype), fam in normal.groupby(["model", "dtype"], sort=True):
            gpu_ns, roof_ns = int(fam["gpu_ns"].sum()), float(fam["roofline_ns"].sum())
            efficiency, above = roof_ns / max(gpu_ns, 1), gpu_ns - roof_ns
            if efficiency >= LOW_EFFICIENCY or not whole or above < MIN_ABOVE_SHARE * whole:
                continue
            findings.append(_below_finding(k, fam, int(rank), int(device), str(model), str(dtype), steps, whole))
        tiny = ops[ops["tiny_gemm"].to_numpy(bool)]
        if whole and len(tiny) and tiny["gpu_ns"].sum() >= TINY_GEMM_SHARE * whole:
            findings.append(_tiny_finding(k, tiny, int(rank), int(device), steps, whole))
    return findings


def _below_finding(k: OpKernels, fam: pd.DataFrame, rank: int, device: int, model: str, dtype: str, steps: int,
                   whole: int) -> Finding:
    gpu_ns, roof_ns = int(fam["gpu_ns"].sum()), float(fam["roofline_ns"].sum())
    flops = float(fam["flops"].sum())
    above = per_step(int(round(gpu_ns - roof_ns)), steps)
    peak = float(fam["peak_flops"].iloc[0])
    compute_bound = float(fam["compute_roof_ns"].sum()) >= 0.5 * roof_ns
    label = _FAMILY_LABEL.get(model, model)
    achieved = f"{flops / gpu_ns / 1e3:.3g} TFLOP/s of {peak / 1e12:.4g} peak" if compute_bound else \
        f"{float(fam['bytes'].sum()) / gpu_ns:.4g} GB/s of {float(fam['bandwidth'].iloc[0]) / 1e9:.4g}"
    return Finding(
        code="below_roofline",
        title=f"{label} ({dtype or 'no dtype recorded'}) on GPU {device} of rank {rank} run at "
              f"{roof_ns / gpu_ns:.0%} of their roofline "
              f"({achieved}): {fmt_ns(above)}{time_per(steps)} above roofline",
        severity="low", analysis=NAME,
        recommendation=_ADVICE.get(model, _ADVICE["other"]),
        cost_ns_per_step=above, cost_share=above * max(steps, 1) / whole if whole else None,
        rank=rank, claims=_above_claims(k, fam),
        headline=Headline(f"{label} ({dtype or 'no dtype recorded'}) run at {{}} of their roofline",
                          roof_ns / gpu_ns),
        evidence={"category": f"{model} {dtype}", "model": model, "dtype": dtype, "device": device,
                  "calls": int(len(fam)), "gpu_ns": gpu_ns, "roofline_ns": roof_ns, "efficiency": roof_ns / gpu_ns,
                  "bound": "compute" if compute_bound else "memory", "roof": str(fam["roof"].iloc[0]),
                  "top_ops": fam.groupby("name")["gpu_ns"].sum().nlargest(3).to_dict()},
    )


def _tiny_finding(k: OpKernels, tiny: pd.DataFrame, rank: int, device: int, steps: int, whole: int) -> Finding:
    gpu_ns = int(tiny["gpu_ns"].sum())
    cost = per_step(int(round(gpu_ns - float(tiny["roofline_ns"].sum()))), steps)
    calls = len(tiny) / max(steps, 1)
    return Finding(
        code="tiny_gemms",
        title=f"{calls:.0f} matrix products {count_per(steps)} on GPU {device} of rank {rank} are too small to fill "
              f"the GPU (under {TINY_GEMM_NS / 1000:.0f} us each at peak) and take "
              f"{fmt_ns(per_step(gpu_ns, steps))}{time_per(steps)}",
        severity="low", analysis=NAME,
        recommendation="Batch the small products (grouped GEMM, bmm over stacked weights, larger micro-batches) "
                       "or fuse them into their neighbours (torch.compile); launch and ramp-up dominate them.",
        cost_ns_per_step=cost, cost_share=cost * max(steps, 1) / whole if whole else None, rank=rank,
        claims=_above_claims(k, tiny),
        evidence={"category": "tiny_gemms", "device": device, "calls": int(len(tiny)), "gpu_ns": gpu_ns,
                  "top_ops": tiny.groupby("name")["gpu_ns"].sum().nlargest(3).to_dict()},
    )


_ADVICE = {
    "gemm": "Check the products run on tensor cores in a low-precision dtype (bf16/fp16/fp8, TF32 for fp32), with "
            "dimensions multiples of 8/16 and large enough to fill the GPU; small or skinny products are better "
            "batched or fused (torch.compile).",
    "conv": "Use channels_last memory format, torch.backends.cudnn.benchmark=True and a low-precision dtype.",
    "attention": "Use a fused attention kernel (FlashAttention / SDPA flash or cuDNN backend) with head "
                 "dimensions it supports.",
    "other": "These ops move more time than their data needs: fuse them with their neighbours (torch.compile, "
             "fused norm/activation kernels) so the data is read once.",
}
_ADVICE[RECORDED_MODEL] = ("XLA's own cost analysis says these ops need less time than they took: look at the "
                           "slowest HLO ops in the op types table (their fusion, layouts and dtypes) and at the "
                           "peak they are judged on (--mfu-dtype).")
_ADVICE["scaled_mm"] = _ADVICE["gemm"]
_ADVICE["conv_backward"] = _ADVICE["conv"]
_ADVICE["attention_backward"] = _ADVICE["attention"]


# ------------------------------------------------------------------------------------ the analysis


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    """The per-rank tables, findings and warnings (each warning for the ranks it is about)."""
    k = attribute(ctx)
    step_counts = activity(ctx).steps.counts()
    roofed: pd.DataFrame = ctx.input("efficiency.roofs")
    windows = ctx.input("temporal.breakdown")
    op_types = op_type_table(roofed, step_counts)
    steps, mfu_warnings = with_mfu(step_table(roofed, windows[["rank", "device", "step", "window_ns"]]), ctx)
    tables = {"op_types": op_types, "families": family_table(roofed), "steps": steps,
              "coverage": coverage_table(ctx, k), "unmodelled": unmodelled_table(k)}
    findings = below_roofline_findings(k, roofed, windows, step_counts) if len(roofed) else []
    result = AnalysisResult(name=NAME, tables=tables, findings=findings)
    # one line per distinct cause: no rank or GPU in a message (the report says which ranks gave it)
    _group, (ranks, devs) = iv.combine_keys(k.rank, k.device)  # the (rank, device) pairs, once each
    devices = [(int(r), gpu_of(ctx, int(r), int(d))[0]) for r, d in zip(ranks.tolist(), devs.tolist())]
    for rank, message in dict.fromkeys(not_gpu_warnings(devices) + _warnings(k, roofed, op_types) + mfu_warnings):
        result.warn(message, [rank])
    return result


def _warnings(k: OpKernels, roofed: pd.DataFrame, op_types: pd.DataFrame) -> list[tuple[int, str]]:
    """(rank, warning) of the ranks whose figures cannot be trusted, and why."""
    out: list[tuple[int, str]] = []
    ops = k.ops
    with_ops = np.unique(ops["rank"].to_numpy(np.int64)) if len(ops) else np.empty(0, np.int64)
    for rank in np.setdiff1d(np.unique(k.rank), with_ops).tolist():
        out.append((rank, "efficiency: no compute kernel was launched under a CPU op (the trace records no ops, e.g. "
                    "an Nsight export, or none around the launch calls): nothing is modelled"))
    if len(ops):
        has_dims = ops.groupby("rank", sort=True)["has_dims"].any()
        for rank in has_dims.index[~has_dims.to_numpy(bool)].tolist():
            out.append((int(rank), "efficiency: no op records its input shapes (profile with record_shapes=True, or "
                        "this trace format does not carry them): no op is modelled"))
    no_roof = roofed[roofed["roofline_ns"].isna()].drop_duplicates(["rank", "roof"])
    bookkeeping = [is_bookkeeping(d, u) for d, u in zip(no_roof["dtype"], no_roof["unit"])]
    no_roof = no_roof[~np.asarray(bookkeeping, dtype=bool)] if len(no_roof) else no_roof
    for rank, roof in zip(no_roof["rank"], no_roof["roof"]):
        out.append((int(rank), f"efficiency: {roof}"))
    over = op_types[op_types["over_roofline"].to_numpy(bool)]
    for row in over.itertuples(index=False):
        why = ("its roof is too low (TF32 products judged on the fp32 peak), or its data came from cache"
               if row.unit == "tensor" else "its data came from cache, or the recorded shapes or durations are "
               "not those that ran (a synthetic trace)")
        out.append((int(row.rank), f"efficiency: {row.name} ({row.dtype}) ran faster than its roofline: {why}; no "
                    "efficiency is given for it (the op types table's roof says 'exceeded')"))
    return out


# ------------------------------------------------------------------------------------ collectives


@dataclass
class CollectiveInputs:
    """What one rank gives the cross-rank collective figures: its communication kernels (kind,
    process group, step, start, end, bytes, group size), its GPUs' one-direction link bandwidth
    (``link_gbs``, NaN when unknown, with ``link`` saying why) and GPU windows (whole trace), and
    the exposed intervals of each collective kind (``communication.exposed_intervals``: rank,
    device, collective, process_group, start_ns, end_ns)."""

    #: the reduce starts by concatenating each frame over the parts: a driver may join them first
    #: (``traceview.packed_frames.merge_inputs``)
    merge_fields: ClassVar[bool] = True

    kernels: pd.DataFrame
    gpus: pd.DataFrame
    exposed: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)

    def remap_rows(self, rows: Any, offset: int = 0) -> "CollectiveInputs":
        del rows, offset  # no event rows are kept
        return self

    def compact(self) -> "CollectiveInputs":
        return self


_COLLECTIVE_KEYS = ["rank", "device", "step", "collective", "process_group", "start", "end", "bytes", "group_size"]


def collective_inputs(ctx: AnalysisContext) -> CollectiveInputs:
    inputs = ctx.input("communication.cross_rank_inputs")
    kernels = inputs.kernels[_COLLECTIVE_KEYS].reset_index(drop=True)
    windows = ctx.input("temporal.breakdown")
    whole = windows[windows["step"].isna()]
    counts = activity(ctx).steps.counts()
    gpus = []
    for rank, device, window in zip(whole["rank"], whole["device"], whole["window_ns"]):
        name, spec = gpu_of(ctx, int(rank), int(device))
        link, why = _link(name, spec)
        gpus.append((int(rank), int(device), int(window), counts.get(int(rank), 0), link, why))
    frame = pd.DataFrame(gpus, columns=["rank", "device", "window_ns", "steps", "link_gbs", "link"])
    return CollectiveInputs(kernels, frame, inputs.exposed.reset_index(drop=True))


def _link(name: str, spec: hw.GpuSpec | None) -> tuple[float, str]:
    """One-direction GPU-to-GPU link bandwidth (GB/s; NaN when unknown) and its description."""
    if spec is None:
        return np.nan, f"unknown GPU {name or '(no name recorded)'}"
    if spec.interconnect_gbs is None:
        return np.nan, f"{spec.name}: no GPU-to-GPU link bandwidth in the table"
    if not hw.is_verified(spec, "interconnect_gbs"):
        return np.nan, f"{spec.name}: the table's link bandwidth is not verified against a vendor source"
    one_way = spec.interconnect_gbs / 2
    return one_way, f"{spec.interconnect or 'link'} {one_way:.4g} GB/s per direction"


COLLECTIVE_COLUMNS = ["rank", "device", "step", "collective", "process_group", "occurrence", "bytes", "group_size",
                      "dur_ns", "time_ns", "time_basis", "algbw_gbs", "busbw_gbs", "link_gbs", "link_share"]
KIND_COLUMNS = ["rank", "device", "collective", "process_group", "count", "timed_over_group", "bytes", "time_ns",
                "algbw_gbs",
                "busbw_gbs", "link_gbs", "link_share", "link"]


def collective_table(inputs: CollectiveInputs) -> pd.DataFrame:
    """One row per communication kernel with a known message size (see the module docstring)."""
    if inputs.kernels.empty:
        return _empty(COLLECTIVE_COLUMNS)
    return _per_kernel(inputs)[COLLECTIVE_COLUMNS].reset_index(drop=True)


def _per_kernel(inputs: CollectiveInputs) -> pd.DataFrame:
    """:func:`collective_table`'s rows with the kernels' ``start`` and ``end`` (for the claims)."""
    kernels = inputs.kernels
    kernels = kernels.sort_values(["rank", "start", "end"]).reset_index(drop=True).assign(kid=lambda f: f.index)
    arrivals, _ = match_collectives(kernels)  # its warnings are the communication analysis's
    occ = ["collective", "process_group", "step", "occurrence"]
    kernels["occurrence"] = kernels.groupby(["rank", "collective", "process_group", "step"]).cumcount()
    kernels["dur_ns"] = kernels["end"] - kernels["start"]
    kernels["time_ns"], kernels["ranks"] = kernels["dur_ns"], 1
    if len(arrivals):
        shortest = arrivals.groupby(occ)["dur"].transform("min")
        found = arrivals.assign(shortest=shortest)[["kid", "shortest", "ranks"]].set_index("kid")
        at = kernels["kid"].isin(found.index).to_numpy()
        kernels.loc[at, "time_ns"] = found.loc[kernels.loc[at, "kid"], "shortest"].to_numpy()
        kernels.loc[at, "ranks"] = found.loc[kernels.loc[at, "kid"], "ranks"].to_numpy()
    complete = (kernels["group_size"] > 0) & (kernels["ranks"] == kernels["group_size"])
    kernels["time_ns"] = np.where(complete, kernels["time_ns"], kernels["dur_ns"])
    kernels["time_basis"] = np.where(complete, TIMED_OVER_GROUP, "own (not all ranks in the trace)")
    out = kernels[kernels["bytes"] >= 0].copy()
    out["algbw_gbs"] = _ratio(out["bytes"], out["time_ns"])
    out["busbw_gbs"] = out["algbw_gbs"] * _factors(out)
    out = out.merge(inputs.gpus[["rank", "device", "link_gbs"]], on=["rank", "device"], how="left")
    out["link_share"] = _ratio(out["busbw_gbs"], out["link_gbs"])
    out["step"] = step_column(out["step"].to_numpy())
    for column in ("bytes", "group_size"):
        values = out[column].to_numpy(np.int64)
        out[column] = pd.arrays.IntegerArray(np.maximum(values, 0), values < 0)
    return out.sort_values(["rank", "device", "start"]).reset_index(drop=True)


def bus_factor(kind: str, n: float) -> float:
    """The nccl-tests factor busbw / algbw of ``kind`` for ``n`` ranks (NaN: no factor, or n unknown)."""
    rule = BUS_FACTORS.get(kind)
    if rule is None or not n > 0:
        return float("nan")
    return 1.0 if rule == "1" else (2.0 if rule.startswith("2") else 1.0) * (n - 1) / n


def _factors(frame: pd.DataFrame) -> np.ndarray:
    """:func:`bus_factor` per row, worked out once per distinct (kind, group size)."""
    pairs = frame[["collective", "group_size"]].astype({"group_size": np.float64})
    codes, uniq = pd.factorize(pd.MultiIndex.from_frame(pairs))
    values = np.array([bus_factor(str(kind), n) for kind, n in uniq] + [np.nan])
    return values[codes]


def kind_table(per_kernel: pd.DataFrame, gpus: pd.DataFrame) -> pd.DataFrame:
    """Per rank, device, kind and process group: algbw = sum of bytes / sum of times, busbw alike."""
    if per_kernel.empty:
        return _empty(KIND_COLUMNS)
    frame = per_kernel.assign(bus_bytes=per_kernel["busbw_gbs"] * per_kernel["time_ns"],
                              over_group=per_kernel["time_basis"] == TIMED_OVER_GROUP)
    out = frame.groupby(["rank", "device", "collective", "process_group"], sort=True).agg(
        count=("time_ns", "size"), timed_over_group=("over_group", "sum"), bytes=("bytes", "sum"),
        time_ns=("time_ns", "sum"),
        bus_bytes=("bus_bytes", lambda s: s.sum(min_count=len(s)))).reset_index()
    out["algbw_gbs"] = _ratio(out["bytes"].astype(np.float64), out["time_ns"])
    out["busbw_gbs"] = _ratio(out["bus_bytes"], out["time_ns"])
    out = out.merge(gpus[["rank", "device", "link_gbs", "link"]], on=["rank", "device"], how="left")
    out["link_share"] = _ratio(out["busbw_gbs"], out["link_gbs"])
    return out[KIND_COLUMNS]


def collective_findings(kinds: pd.DataFrame, gpus: pd.DataFrame, per_kernel: pd.DataFrame | None = None,
                        exposed: pd.DataFrame | None = None) -> list[Finding]:
    """``collective_bandwidth``: a kind below ``LOW_LINK_SHARE`` of the link taking at least
    ``MIN_COLLECTIVE_SHARE`` of the rank's GPU window. Its claims (:func:`_bandwidth_claims`): the
    time above the link-bandwidth roofline, where it is exposed."""
    window = {(int(r), int(d)): (int(w), int(s)) for r, d, w, s in
              zip(gpus["rank"], gpus["device"], gpus["window_ns"], gpus["steps"])}
    # a kind timed on some rank's own durations includes waiting for the others: not judged
    low = kinds[(kinds["link_share"] < LOW_LINK_SHARE) & (kinds["timed_over_group"] == kinds["count"])]
    findings = []
    for row in low.itertuples(index=False):
        whole, steps = window.get((int(row.rank), int(row.device)), (0, 0))
        if not whole or row.time_ns < MIN_COLLECTIVE_SHARE * whole:
            continue
        claims = _bandwidth_claims(row, per_kernel, exposed)
        findings.append(Finding(
            code="collective_bandwidth",
            title=f"{row.collective} on rank {row.rank} reaches {row.link_share:.0%} of the link's bandwidth "
                  f"(bus bandwidth {row.busbw_gbs:.3g} GB/s; {row.link})",
            severity="low", analysis=NAME,
            recommendation="Larger messages (bigger DDP buckets, fewer and larger FSDP units) reach more of the "
                           "link; check NCCL uses NVLink/xGMI (NCCL_DEBUG=INFO) and that a group spanning nodes is "
                           "judged against the network, which this figure does not know.",
            rank=int(row.rank), cost_ns_per_step=per_step(claims.total_ns(), steps),
            cost_share=claims.total_ns() / whole, claims=claims, part_of="exposed_collective",
            evidence={"collective": row.collective, "process_group": row.process_group, "count": int(row.count),
                      "bytes": int(row.bytes), "time_ns": int(row.time_ns), "algbw_gbs": float(row.algbw_gbs),
                      "busbw_gbs": float(row.busbw_gbs), "link_gbs": float(row.link_gbs),
                      "time_ns_per_step": per_step(int(row.time_ns), steps)},
        ))
    return findings


def _bandwidth_claims(row: Any, per_kernel: pd.DataFrame | None, exposed: pd.DataFrame | None) -> Claims:
    """The time of one rank's collective kind above the link-bandwidth roofline that is exposed:
    per instance, the last (time - S x factor / link) of its kernel (time = the shortest over the
    group; the first dur - time of a rank's kernel is waiting for the others, the straggler's),
    intersected with the kind's exposed intervals (time that overlapped compute costs nothing)."""
    if per_kernel is None or exposed is None or per_kernel.empty or exposed.empty:
        return Claims.empty()
    mine = per_kernel[(per_kernel["rank"] == row.rank) & (per_kernel["device"] == row.device)
                      & (per_kernel["collective"] == row.collective)
                      & (per_kernel["process_group"] == row.process_group)]
    roof_ns = mine["bytes"].to_numpy(np.float64) * (mine["busbw_gbs"] / mine["algbw_gbs"]).to_numpy() / row.link_gbs
    above = np.nan_to_num(np.maximum(mine["time_ns"].to_numpy(np.float64) - roof_ns, 0.0))
    end = mine["end"].to_numpy(np.int64)
    slowness = Claims.of(mine["rank"].to_numpy(), mine["device"].to_numpy(), end - np.round(above).astype(np.int64),
                         end)
    shown = exposed[(exposed["rank"] == row.rank) & (exposed["device"] == row.device)
                    & (exposed["collective"].astype(object) == row.collective)
                    & (exposed["process_group"].astype(object) == row.process_group)]
    return slowness.intersect(Claims.of(shown["rank"].to_numpy(), shown["device"].to_numpy(),
                                        shown["start_ns"].to_numpy(), shown["end_ns"].to_numpy()))


def reduce_collectives(parts: list[CollectiveInputs], options: Options) -> AnalysisResult:
    """The cross-rank collective tables and findings from every rank's :func:`collective_inputs`;
    ``options.whole_only`` (jobs of thousands of ranks) leaves out the one row per kernel."""
    kernels = pd.concat([p.kernels for p in parts], ignore_index=True) if parts else pd.DataFrame()
    gpus = pd.concat([p.gpus for p in parts], ignore_index=True) if parts else pd.DataFrame()
    exposed = pd.concat([p.exposed for p in parts], ignore_index=True) if parts else pd.DataFrame()
    full = _per_kernel(CollectiveInputs(kernels, gpus)) if len(kernels) else _empty(COLLECTIVE_COLUMNS)
    per_kernel = full[COLLECTIVE_COLUMNS].reset_index(drop=True)
    kinds = kind_table(per_kernel, gpus) if len(per_kernel) else _empty(KIND_COLUMNS)
    tables = {"collective_kinds": kinds} if options.whole_only else {"collectives": per_kernel,
                                                                     "collective_kinds": kinds}
    findings = collective_findings(kinds, gpus, full, exposed) if len(kinds) else []
    return AnalysisResult(name=NAME, tables=tables, findings=findings)


def kernel_roofline_factor(ctx: AnalysisContext) -> np.ndarray:
    """Per entry of the ``activity`` input: the share of its duration its op's roofline allows
    (min(1, roofline_ns / the op's kernel time), the same for every kernel of one op), NaN where no
    cost model and roof apply (the derived input ``efficiency.kernel_roofline_factor``, which the
    critical path's what-if reads)."""
    act = activity(ctx)
    out = np.full(len(act), np.nan)
    attributed: OpKernels = ctx.input("efficiency.attribute")
    if attributed.ops.empty:
        return out
    roofed = ctx.input("efficiency.roofs")
    roofed = roofed[roofed["roofline_ns"].notna()]
    gpu_ns = roofed["gpu_ns"].to_numpy(np.float64)
    share = np.where(gpu_ns > 0, np.minimum(1.0, roofed["roofline_ns"].to_numpy(np.float64) / np.maximum(gpu_ns, 1.0)),
                     np.nan)
    return _of_op_instance(act, attributed, roofed["instance"].to_numpy(np.int64), share)


def _of_op_instance(act: Activity, attributed: OpKernels, instance: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Per entry of the ``activity`` input: ``value`` of its op instance (``value[i]`` belongs to
    instance ``instance[i]``), NaN for activity that is no modelled op's compute kernel."""
    per_instance = np.full(len(attributed.ops), np.nan)
    per_instance[instance] = value
    out = np.full(len(act), np.nan)
    sel = np.flatnonzero((act.kind == int(Kind.KERNEL)) & (act.cls == classify.COMPUTE))
    has = attributed.instance >= 0
    out[sel[has]] = per_instance[attributed.instance[has]]
    return out


def kernel_flops(ctx: AnalysisContext) -> np.ndarray:
    """Per entry of the ``activity`` input: the FLOPs of its op's cost model shared among the op's
    kernels by their time, NaN where the op is not modelled (the derived input
    ``efficiency.kernel_flops``, which the modules analysis sums per range)."""
    act = activity(ctx)
    out = np.full(len(act), np.nan)
    attributed: OpKernels = ctx.input("efficiency.attribute")
    if attributed.ops.empty:
        return out
    roofed = ctx.input("efficiency.roofs")
    instance = roofed["instance"].to_numpy(np.int64)
    flops = _of_op_instance(act, attributed, instance, roofed["flops"].to_numpy(np.float64))
    gpu_ns = _of_op_instance(act, attributed, instance, roofed["gpu_ns"].to_numpy(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN (no model) stays NaN
        return np.where(gpu_ns > 0, flops * (act.end - act.start).astype(np.float64) / gpu_ns, np.nan)


register_input("efficiency.gpu_specs", lambda ctx: gpu_specs(ctx.options.gpu_specs))
# the modelled op instances with their roofs, once per context (this analysis and the critical
# path's what-if read them)
register_input("efficiency.roofs", lambda ctx: with_roofs(ctx, attribute(ctx).ops),
               requires=("efficiency.attribute", "efficiency.gpu_specs"))
register_input("efficiency.kernel_flops", kernel_flops,
               requires=("activity", "efficiency.attribute", "efficiency.roofs"))
register_input("efficiency.kernel_roofline_factor", kernel_roofline_factor,
               requires=("activity", "efficiency.attribute", "efficiency.roofs"))
register_input("efficiency.attribute", _attribute,
               requires=("activity", "launch_overhead.kinds", "links.runtime_ops", "cpu_op_nesting",
                         "classify.codes.name"))

SPEC = AnalysisSpec(
    name=NAME,
    title="Efficiency",
    run=analyze,
    requires=("activity", "efficiency.attribute", "efficiency.gpu_specs", "efficiency.roofs", "temporal.breakdown",
              "communication.cross_rank_inputs"),
    order=90,
    tables=(
        TableSpec("op_types", "Op types against the roofline, per rank and GPU", sort_by="gpu_ns"),
        TableSpec("families", "Roll-up per model family and dtype: share of peak FLOP/s and of memory bandwidth",
                  sort_by="gpu_ns"),
        TableSpec("steps", "FLOPs utilisation per step (HFU; MFU with --model-flops)",
                  title_without_steps="FLOPs utilisation over the whole trace (HFU; MFU with --model-flops)"),
        TableSpec("coverage", "Modelled share of the op-linked kernel time"),
        TableSpec("unmodelled", "Op-linked kernel time without a cost model", sort_by="gpu_ns"),
        TableSpec("collective_kinds", "Collectives: algorithm and bus bandwidth per kind", cross_rank=True),
        TableSpec("collectives", "Bus bandwidth per collective", sort_by="time_ns", per_event=True, cross_rank=True),
    ),
    finding_codes=("below_roofline", "tiny_gemms", "collective_bandwidth"),
    finding_precedence=(("below_roofline", 100), ("tiny_gemms", 100)),
    # its time is part of its kind's exposed communication: the time above the bandwidth roof
    finding_parents=(("collective_bandwidth", "exposed_collective"),),
    gather=collective_inputs,
    reduce=reduce_collectives,
    headline_table="op_types",
    summary=report_summary,
    page=("/efficiency", "Efficiency"),
)
