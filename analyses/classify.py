"""Shared classification of GPU activity (docs/metrics.md), so every analysis counts alike.

* GPU activity = kernels, memcpy and memset (not sync events), all streams of a device.
* Communication kernel: a kernel that a rule of the communication table matches
  (``analyses/comm_rules.py``: NCCL/RCCL, DeepEP, NVSHMEM, symmetric memory, custom all-reduce,
  MSCCL/MSCCL++, all-to-all, send/recv by name; collective args), plus the user's rules
  (``Options.comm_patterns``).
* Compute = the other kernels. Memory = memcpy + memset.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from traceview import intervals as iv
from traceview.claims import Claims, gpu_key
from traceview.context import AnalysisContext
from traceview.model import Kind, Trace
from traceview.registry import register_input

from .comm_rules import rule_table

#: class codes returned by :func:`activity_class`
NONE = -1
COMPUTE = 0
COMMUNICATION = 1
MEMORY = 2
CLASS_NAMES = {COMPUTE: "compute", COMMUNICATION: "communication", MEMORY: "memory"}

#: the NCCL/RCCL name rule alone (the kernel categories use it on names without events)
COMM_NAME = re.compile(r"nccl|rccl", re.IGNORECASE)
#: the runtime API calls that block the host until the GPU catches up
SYNC_API = re.compile(r"Synchronize")
#: the runtime copy calls that block the host until the copy is done (not the Async ones)
BLOCKING_COPY = re.compile(r"^(cuda|cu|hip)Memcpy(?!.*Async)", re.IGNORECASE)

#: the causes of GPU idle gaps (the idle-gap analysis attributes each gap to one; others read them)
HOST_BOUND = "host_bound"
SYNC_BOUND = "sync_bound"
LAUNCH_LATENCY = "launch_latency"
UNATTRIBUTED = "unattributed"
CAUSES = (HOST_BOUND, SYNC_BOUND, LAUNCH_LATENCY, UNATTRIBUTED)

#: exposed communication (share of a GPU's window) from which the temporal and streams analyses
#: report it, and from which it is "high"
EXPOSED_COMM_SHARE = 0.05
EXPOSED_COMM_SHARE_HIGH = 0.20


@dataclass(frozen=True)
class KernelRule:
    """One row of the kernel-category table: a kernel whose name ``pattern`` matches (searched, case
    ignored) is of ``category``; ``matches`` says which kernels, in words (docs/metrics.md)."""

    category: str
    pattern: str
    matches: str
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern, re.IGNORECASE))


#: the kernel categories by name, tried in this order (the first rule that matches decides;
#: communication and memory are decided before, from the event). docs/metrics.md, "Kernel
#: breakdown", holds this table as :func:`kernel_rules_markdown` writes it (a test compares them).
KERNEL_RULES: tuple[KernelRule, ...] = (
    KernelRule("attention", r"flash|fmha|attention|attn|sdpa",
               "FlashAttention, cuDNN/CUTLASS/Composable Kernel `fmha` (`ck_tile::FmhaFwdKernel`), "
               "`*attention*`, Triton `_attn_fwd`, `sdpa`; before GEMM (`fmha_cutlassF` is attention)"),
    KernelRule("attention", r"(?<![a-z])sage_?(?:fwd|bwd|attn)",
               "SageAttention (`sage_fwd`, `sageattn_*`)"),
    KernelRule("convolution", r"conv(?!ert)|implicit_?gemm|winograd|(?<![a-z])(?:fprop|dgrad|wgrad)(?![a-z])",
               "`conv` (not `convert`), `implicit_gemm`, `winograd`, `fprop`/`dgrad`/`wgrad` as a word "
               "(cuDNN `xmma_fprop_*`, `wgrad_alg0_engine`, CUTLASS conv); before GEMM: implicit-GEMM "
               "convolutions say `gemm` too"),
    KernelRule("convolution", r"(?<![a-z])igemm_(?:fwd|bwd|wrw)|(?<![a-z])im[23]d2col|[sh]cudnn_",
               "MIOpen implicit-GEMM convolutions (`igemm_fwd_gtcx_*`, `igemm_bwd_*`, `igemm_wrw_*`), "
               "MIOpen `Im2d2Col`/`Im3d2Col`, cuDNN `scudnn_`/`hcudnn_` convolution kernels"),
    KernelRule("gemm", r"gemm|gemv|cutlass|cublas|matmul|wgmma",
               "`gemm` (sgemm, hgemm, cuBLAS/cuBLASLt, CUTLASS 2 and 3 (`cutlass3x_*gemm*`), rocBLAS "
               "`rocblas_gemm_*`, Composable Kernel `ck::kernel_gemm_*` / `ck_tile::GemmKernel`, aiter "
               "`gemm_a8w8*`, `sm90_xmma_gemm_*`), `gemv`, `cutlass`, `cublas`, `matmul` (Triton "
               "`matmul_kernel`), `wgmma`"),
    KernelRule("gemm", r"(?<![a-z0-9])cijk_",
               "Tensile GEMMs of hipBLASLt and rocBLAS (`Cijk_Alik_Bljk_*`, `Cijk_Ailk_Bljk_*`, "
               "`Custom_Cijk_*`)"),
    KernelRule("gemm", r"(?<![a-z])nvjet_|(?<![a-z])sm\d+_xmma_",
               "cuBLAS's `nvjet_*` GEMMs, other `smNN_xmma_*` kernels (convolutions are matched before)"),
    KernelRule("gemm", r"(?<![a-z])fmoe_|fused_moe_kernel",
               "fused mixture-of-experts GEMMs: aiter `fmoe_*`, Triton `fused_moe_kernel`"),
    KernelRule("gemm", r"triton_tem_\w*mm|(?:^|[^a-z])(?:b|add)?mm(?:[^a-z]|$)",
               "Triton (Inductor) matmul templates `triton_tem_*mm`, `mm`/`bmm`/`addmm` as a word"),
    KernelRule("elementwise", r"elementwise|triton_poi_",
               "`elementwise` (`vectorized_elementwise_kernel`, `unrolled_elementwise_kernel`, "
               "`elementwise_kernel`, `ck::kernel_elementwise`), Triton pointwise `triton_poi_`; before "
               "reduction (`distribution_elementwise_grid_stride_kernel<... normal ...>`)"),
    KernelRule("elementwise", r"(?<![a-z])subtensorop",
               "MIOpen sub-tensor operations (`SubTensorOpWithScalar1d`, `SubTensorOpWithCastTensor1d`)"),
    KernelRule("reduction", r"reduce|reduction|softmax|norm|(?<![a-z])bn_(?:fw|bw)|triton_red_|triton_per_",
               "`reduce`, `reduction`, `softmax`, `norm` (layer/batch/group/RMS norm, CK "
               "`kernel_normalization`, MIOpen `BatchNorm`), cuDNN batch norm `bn_fw`/`bn_bw`, Triton "
               "`triton_red_`/`triton_per_`"),
)


def kernel_category_of_name(name: str) -> str | None:
    """The category of the first rule of :data:`KERNEL_RULES` that matches ``name`` (None: none)."""
    for rule in KERNEL_RULES:
        if rule.regex.search(name):
            return rule.category
    return None


def markdown_code(text: str) -> str:
    """``text`` as a Markdown code span inside a table cell (``|`` escaped)."""
    return "`" + text.replace("|", "\\|") + "`"


def kernel_rules_markdown() -> str:
    """:data:`KERNEL_RULES` as the Markdown table of docs/metrics.md."""
    lines = ["| # | category | regex (searched in the name, case ignored) | what it matches |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {i} | {r.category} | {markdown_code(r.pattern)} | {r.matches} |"
              for i, r in enumerate(KERNEL_RULES, 1)]
    return "\n".join(lines)


def name_matches(ctx: AnalysisContext, pattern: re.Pattern[str] | str) -> np.ndarray:
    """Boolean per event: its name matches ``pattern`` (regex search; evaluated per distinct name)."""
    return column_matches(ctx, "name", pattern)


def column_matches(ctx: AnalysisContext, column: str, pattern: re.Pattern[str] | str) -> np.ndarray:
    """Boolean per event: the dictionary column ``column`` matches ``pattern`` (null: False)."""
    n = ctx.trace.events.num_rows
    if n == 0:
        return np.zeros(0, dtype=bool)
    pat = re.compile(pattern) if isinstance(pattern, str) else pattern
    codes, dictionary = dictionary_codes(ctx, column)
    hit = np.array([bool(v is not None and pat.search(v)) for v in dictionary] + [False], dtype=bool)
    return hit[codes]  # a null (-1) is the last entry: False


def dictionary_codes(ctx: AnalysisContext, column: str = "name") -> tuple[np.ndarray, list[Any]]:
    """(int64 code of every event, -1 for null; the dictionary's values) of a dictionary column
    (read-only codes). The names' codes, which most analyses read, are worked out once per context
    (the derived input ``classify.codes.name``); other columns' each time (kept, each would hold 8
    bytes per event until the analyses are done)."""
    if column != "name":
        return column_codes(ctx.trace, column)
    codes: tuple[np.ndarray, list[Any]] = ctx.input("classify.codes.name")
    return codes


def column_codes(trace: Trace, column: str) -> tuple[np.ndarray, list[Any]]:
    """:func:`dictionary_codes` of ``trace``, worked out now."""
    col = trace.events.column(column)
    col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    indices = col.indices
    # fill_null copies every code through a compute kernel: only when there are nulls to fill
    indices = indices.fill_null(-1) if indices.null_count else indices
    codes = indices.to_numpy(zero_copy_only=False).astype(np.int64)
    codes.flags.writeable = False
    return codes, col.dictionary.to_pylist()


def dictionary_codes_at(ctx: AnalysisContext, column: str, rows: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """``dictionary_codes(ctx, column)`` at ``rows`` (rows of events, >= 0) only: (int64 codes,
    -1 for null; the dictionary's values). A column other than the names is not kept, and its
    codes over every event (8 bytes each) are more than a few rows need."""
    if column == "name":
        codes, dictionary = dictionary_codes(ctx, column)
        return codes[rows], dictionary
    col = ctx.trace.events.column(column)
    col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    indices = col.indices.take(pa.array(np.asarray(rows, dtype=np.int64)))
    indices = indices.fill_null(-1) if indices.null_count else indices
    return indices.to_numpy(zero_copy_only=False).astype(np.int64), col.dictionary.to_pylist()


class EventNames:
    """The events' names, decoded only at the rows asked for: ``names[rows]`` equals
    ``trace.names()[rows]`` (an object array, None for a null name) without decoding every
    event's name (a few ms per call on a million events)."""

    def __init__(self, ctx: AnalysisContext, column: str = "name") -> None:
        self.codes, values = dictionary_codes(ctx, column)
        self.values = np.asarray(values + [None], dtype=object)  # a null (-1) is the last entry

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        return self.values[self.codes[rows]]


def comm_rule_of(ctx: AnalysisContext) -> np.ndarray:
    """int16 per event: the index in ``comm_rules.rule_table(ctx.options.comm_patterns)`` of the
    first rule that matches the kernel, ``NONE`` (-1) for a kernel no rule matches and for every
    other event.

    Name rules are evaluated once per distinct kernel name (only the names kernels use: a trace's
    dictionary holds every CPU op name too). Worked out once per context (read-only)."""
    rules: np.ndarray = ctx.input("classify.comm_rule_of")
    return rules


def build_comm_rule_of(ctx: AnalysisContext) -> np.ndarray:
    """:func:`comm_rule_of`, worked out now."""
    trace = ctx.trace
    rules = rule_table(ctx.options.comm_patterns)
    out = np.full(trace.num_events, NONE, dtype=np.int16)
    kernel = np.flatnonzero(trace.kind_codes() == int(Kind.KERNEL))
    if kernel.size == 0:
        out.flags.writeable = False
        return out
    all_codes, dictionary = dictionary_codes(ctx, "name")
    codes = all_codes[kernel]
    used, inverse = iv.unique_inverse(codes)  # np.unique's answer, by a table over the small code range
    names = ["" if c < 0 or dictionary[c] is None else str(dictionary[c]) for c in used.tolist()]
    rule_of_kernel = np.full(kernel.size, NONE, dtype=np.int16)
    for index, rule in enumerate(rules):
        if rule.pattern is not None:
            hit = np.array([rule.matches_name(n) for n in names], dtype=bool)[inverse.reshape(-1)]
        else:
            column = trace.events.column(str(rule.arg))
            hit = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)[kernel]
        rule_of_kernel[(rule_of_kernel == NONE) & hit] = index
    out[kernel] = rule_of_kernel
    out.flags.writeable = False
    return out


def is_communication(ctx: AnalysisContext) -> np.ndarray:
    """Boolean per event: a communication kernel (see module docstring; the user's rules too)."""
    return comm_rule_of(ctx) != NONE


def activity_class(ctx: AnalysisContext) -> np.ndarray:
    """int8 per event: COMPUTE, COMMUNICATION, MEMORY, or NONE (not GPU activity), with the user's
    communication rules (``Options.comm_patterns``)."""
    kinds = ctx.trace.kind_codes()
    out = np.full(kinds.size, NONE, dtype=np.int8)
    out[kinds == int(Kind.KERNEL)] = COMPUTE
    out[is_communication(ctx)] = COMMUNICATION
    out[(kinds == int(Kind.MEMCPY)) | (kinds == int(Kind.MEMSET))] = MEMORY
    return out


def is_sync_call(ctx: AnalysisContext) -> np.ndarray:
    """Boolean per event: a host runtime call whose name contains ``Synchronize``."""
    return (ctx.trace.kind_codes() == int(Kind.RUNTIME)) & name_matches(ctx, SYNC_API)


def names_categorical(ctx: AnalysisContext, rows: np.ndarray, column: str = "name",
                      missing: str = "") -> pd.Categorical:
    """Values of a dictionary column at ``rows`` as a pandas Categorical (cheap for many rows).

    Rows ``-1`` and nulls become ``missing``.
    """
    rows = np.asarray(rows, dtype=np.int64)
    codes_all, _ = dictionary_codes(ctx, column)
    remap, categories = categories_of_column(ctx, column, missing)
    codes = np.full(rows.size, -1, dtype=np.int64)  # -1: the appended ``missing`` (nulls too)
    ok = rows >= 0
    codes[ok] = codes_all[rows[ok]]
    return pd.Categorical.from_codes(remap[codes], categories=pd.Index(categories, dtype=object))


def categories_of_column(ctx: AnalysisContext, column: str, missing: str) -> tuple[np.ndarray, np.ndarray]:
    """(category of each dictionary code, then of ``missing`` last; the distinct categories sorted)
    of a dictionary column: the names with ``missing=""`` once per context (the derived input
    ``classify.categories.name``), anything else now."""
    if column == "name" and missing == "":
        value: tuple[np.ndarray, np.ndarray] = ctx.input("classify.categories.name")
        return value
    return build_categories(dictionary_codes(ctx, column)[1], missing)


def build_categories(values: list[Any], missing: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`categories_of_column` of a dictionary's ``values``."""
    dictionary = np.asarray(values + [missing], dtype=object)
    dictionary[pd.isna(dictionary)] = missing
    # the dictionary may repeat values (and holds ``missing``): map codes onto distinct categories.
    # Hashing the object array keeps each name's own size; ``np.unique(dictionary.astype(str))``
    # made a fixed-width array of (distinct names x longest name): 1 MB name -> 1 GB resident.
    remap, categories = pd.factorize(dictionary, sort=True)
    return remap, np.asarray(categories, dtype=object)


register_input("classify.codes.name", lambda ctx: column_codes(ctx.trace, "name"))
register_input("classify.categories.name", lambda ctx: build_categories(dictionary_codes(ctx, "name")[1], ""),
               requires=("classify.codes.name",))
register_input("classify.comm_rule_of", build_comm_rule_of, requires=("classify.codes.name",))


def exposed_claims(cls: np.ndarray, rank: np.ndarray, device: np.ndarray, start: np.ndarray, end: np.ndarray,
                   comm: np.ndarray | None = None) -> Claims:
    """Exposed communication as claims, per GPU: U(communication ``comm`` (default: every
    communication entry of ``cls``)) - U(compute), of GPU activity given as columns."""
    comm = (cls == COMMUNICATION) if comm is None else comm
    comp = cls == COMPUTE
    key = gpu_key(rank, device)
    k, s, e = iv.subtract_by((key[comm], start[comm], end[comm]), (key[comp], start[comp], end[comp]))
    return Claims(k, s, e, normalized=True)
