#!/usr/bin/env python3
"""Write a synthetic Nsight Systems SQLite export with N nested NVTX push/pop ranges (default 10
million), CUDA runtime launches inside the innermost ones and their kernels, and the true values it
was built from.

    python benchmarks/gen_nsys_nvtx.py                       # 10M ranges -> benchmarks/out/nvtx_10000000.sqlite
    python benchmarks/gen_nsys_nvtx.py --ranges 1e6          # 1M ranges
    python benchmarks/gen_nsys_nvtx.py --ranges 1000 --out /tmp/x.sqlite

The tables, columns, enumerations and metadata are those of ``sample_traces/make_nsys.py`` (the
layout of real ``nsys export --type sqlite`` output, which traceview's Nsight parser reads). One
process on device 0, one thread; the ranges are what a PyTorch model under
``torch.autograd.profiler.emit_nvtx`` plus per-layer ``nvtx.range_push`` gives:

    step_S                                          depth 0 (a step: the default step marker)
      layer_I             (LAYERS x MICRO_BATCHES per step)  depth 1
        attention | mlp                             depth 2
          aten::linear, op_id = K                   depth 3 (no kernel of its own)
            aten::t, op_id = K                      depth 4 (no kernel)
            aten::addmm, seq = Q, op_id = K         depth 4: cudaLaunchKernel -> one kernel
          aten::view, op_id = K                     depth 3 (no kernel)
          aten::bmm / aten::_softmax / aten::gelu   depth 3 or 4: one kernel each

21 ranges and 8 kernels per layer. Op texts carry ``emit_nvtx``'s suffix (``, seq = N, op_id = M``,
unique per range, as in real exports, where they are in the ``text`` column). Every launch is a
``cudaLaunchKernel_v7000`` runtime call inside its innermost range, with the kernel's correlation
id; kernels run on one stream, never overlap, and start a fixed delay after their launch returns
(the host is slower than the GPU, so the stream never queues up).

The requested count is rounded up to whole layers (at most 20 more ranges). Rows are built per
batch of layers with numpy from one layer template and written with ``executemany``, so memory is
bounded by the batch (tens of MB) whatever N. The truth (``<name>.truth.json``) is computed from
the template, never by reading the database: ranges (by depth), launches, kernels, steps, GPU busy
time and the GPU time under each block name (``attention``, ``mlp``) and op name.

Time here (2 shared cores, load ~0.5): 10M ranges (3.8M launches and kernels, 1.3 GB) in 21 s with
a peak RSS of 118 MB; 1M (125 MB) in 2 s. See benchmarks/README.md "gen_nsys_nvtx.py and
bench_modules.py".
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "sample_traces"))

import make_nsys  # noqa: E402  (the schema, enumerations and metadata of the small synthetic export)

DEFAULT_RANGES = 10_000_000
LAYERS = 24  # layer_0 .. layer_23 per micro-batch
MICRO_BATCHES = 8  # passes through the layers per step
PID = 4242
DEVICE = 0
STREAM = 7
GPID = make_nsys.VM | (PID << 24)
GTID = GPID | PID  # the main thread: launches and NVTX ranges on the same thread, as in PyTorch
T0_NS = make_nsys.SESSION_CLOCK_NS + 1_000_000
STEP_PAD_NS = 5_000  # host time in a step before its first layer
STEP_GAP_NS = 50_000  # host stall between steps (GPU idle)
LAYER_GAP_NS = 1_000  # host time between layers
LAUNCH_API = "cudaLaunchKernel_v7000"
LAUNCH_CALL_NS = 3_000
LAUNCH_OFFSET_NS = 1_000  # from the op range's start to its launch call's start
GPU_DELAY_NS = 1_500  # kernel start after its launch call returns
BATCH_LAYERS = 5_000  # layers per executemany batch: 105k NVTX rows, 40k launches and kernels

#: (name, depth, kernel or None, kernel ns, host ns of a leaf); a parent's span covers its children.
#: Names starting with ``aten::`` get emit_nvtx's suffix.
OPS = {
    "attention": [
        ("aten::linear", 3, None, 0, 0), ("aten::t", 4, None, 0, 2_000),
        ("aten::addmm", 4, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 6_000, 9_000),
        ("aten::view", 3, None, 0, 1_500),
        ("aten::bmm", 3, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x128x64", 5_000, 8_000),
        ("aten::softmax", 3, None, 0, 0),
        ("aten::_softmax", 4, "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float>", 2_500, 6_000),
        ("aten::bmm", 3, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x128x64", 5_000, 8_000),
        ("aten::linear", 3, None, 0, 0), ("aten::t", 4, None, 0, 2_000),
        ("aten::addmm", 4, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 6_000, 9_000),
    ],
    "mlp": [
        ("aten::linear", 3, None, 0, 0), ("aten::t", 4, None, 0, 2_000),
        ("aten::addmm", 4, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64", 7_000, 10_000),
        ("aten::gelu", 3, "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
         2_000, 5_000),
        ("aten::linear", 3, None, 0, 0), ("aten::t", 4, None, 0, 2_000),
        ("aten::addmm", 4, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64", 7_000, 10_000),
    ],
}


@dataclass
class LayerTemplate:
    """One layer's rows, times relative to the layer's start; range 0 is the layer itself."""

    names: list[str] = field(default_factory=list)  # without the layer index / emit_nvtx suffix
    depth: list[int] = field(default_factory=list)
    start: list[int] = field(default_factory=list)
    end: list[int] = field(default_factory=list)
    block: list[str] = field(default_factory=list)  # "" for the layer range
    #: per launch: its op's index in the ranges above, call start/end, kernel start/end, kernel name
    launch_range: list[int] = field(default_factory=list)
    call_start: list[int] = field(default_factory=list)
    kernel_start: list[int] = field(default_factory=list)
    kernel_ns: list[int] = field(default_factory=list)
    kernel_name: list[str] = field(default_factory=list)
    span_ns: int = 0

    def add_range(self, name: str, depth: int, start: int, block: str) -> int:
        self.names.append(name)
        self.depth.append(depth)
        self.start.append(start)
        self.end.append(start)
        self.block.append(block)
        return len(self.names) - 1


def _close_to(tpl: LayerTemplate, stack: list[int], depth: int, cursor: int) -> int:
    """End every open range at ``depth`` or deeper (they are popped), from ``cursor``; return the
    host cursor after the pops."""
    while stack and tpl.depth[stack[-1]] >= depth:
        tpl.end[stack.pop()] = cursor
        cursor += 200  # a pop costs host time, so a parent ends after its last child
    return cursor


def build_template() -> LayerTemplate:
    """The layer's ranges and launches, walked with a host cursor (as make_nsys's processes)."""
    tpl = LayerTemplate()
    stack = [tpl.add_range("layer", 1, 0, "")]
    cursor = 500
    for block, ops in OPS.items():
        cursor = _close_to(tpl, stack, 2, cursor)
        cursor += 300
        stack.append(tpl.add_range(block, 2, cursor, block))
        cursor += 300
        for name, depth, kernel, kernel_ns, host_ns in ops:
            cursor = _close_to(tpl, stack, depth, cursor)
            cursor += 400
            i = tpl.add_range(name, depth, cursor, block)
            stack.append(i)
            if kernel is not None:
                call = cursor + LAUNCH_OFFSET_NS
                tpl.launch_range.append(i)
                tpl.call_start.append(call)
                tpl.kernel_start.append(call + LAUNCH_CALL_NS + GPU_DELAY_NS)
                tpl.kernel_ns.append(kernel_ns)
                tpl.kernel_name.append(kernel)
            cursor += host_ns
    cursor = _close_to(tpl, stack, 0, cursor)
    tpl.span_ns = max(tpl.end) + LAYER_GAP_NS
    ends = [s + d for s, d in zip(tpl.kernel_start, tpl.kernel_ns)]
    # the stream never queues: each kernel ends before the next starts, also across layers
    assert all(e < s for e, s in zip(ends, tpl.kernel_start[1:])), "kernels of the template overlap"
    assert ends[-1] < tpl.span_ns + tpl.kernel_start[0], "a layer's last kernel overlaps the next layer's first"
    assert all(tpl.start[r] <= c and c + LAUNCH_CALL_NS <= tpl.end[r] for r, c in zip(tpl.launch_range, tpl.call_start))
    _check_nesting(tpl)
    return tpl


def _check_nesting(tpl: LayerTemplate) -> None:
    """Each range lies strictly inside the last open range one level up, and ends before the next
    range at its level or above starts (push/pop ranges on one thread nest)."""
    open_ranges: list[int] = []
    for i, d in enumerate(tpl.depth):
        while open_ranges and tpl.depth[open_ranges[-1]] >= d:
            assert tpl.end[open_ranges.pop()] < tpl.start[i], f"range {i} starts before its sibling ends"
        if open_ranges:
            parent = open_ranges[-1]
            assert tpl.depth[parent] == d - 1 and tpl.start[parent] < tpl.start[i] and tpl.end[i] < tpl.end[parent]
        open_ranges.append(i)


@dataclass
class Plan:
    """How many steps and layers make at least the requested number of ranges."""

    layers_per_step: int
    layers: int  # in all
    steps: int
    step_ns: int

    @property
    def ranges(self) -> int:
        return self.steps + self.layers * len(TEMPLATE.names)


def plan(requested: int, layers_per_step: int = LAYERS * MICRO_BATCHES) -> Plan:
    if requested < 1 + len(TEMPLATE.names):
        raise ValueError(f"at least {1 + len(TEMPLATE.names)} ranges (one step of one layer)")
    per_step = 1 + layers_per_step * len(TEMPLATE.names)
    full, rest = divmod(requested, per_step)
    layers = full * layers_per_step
    if rest:
        layers += max(1, -(-(rest - 1) // len(TEMPLATE.names)))
    steps = -(-layers // layers_per_step)
    step_ns = STEP_PAD_NS + layers_per_step * TEMPLATE.span_ns + STEP_GAP_NS
    return Plan(layers_per_step, layers, steps, step_ns)


TEMPLATE = build_template()


def layer_starts(p: Plan, first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Start times and step numbers of layers ``first .. first + count - 1``."""
    g = np.arange(first, first + count, dtype=np.int64)
    step, j = np.divmod(g, p.layers_per_step)
    return T0_NS + step * p.step_ns + STEP_PAD_NS + j * TEMPLATE.span_ns, step


def step_rows(p: Plan) -> list[tuple[Any, ...]]:
    """The step ranges: from the step's start to just after its last layer."""
    rows = []
    for s in range(p.steps):
        layers = min(p.layers_per_step, p.layers - s * p.layers_per_step)
        start = T0_NS + s * p.step_ns
        rows.append((start, start + STEP_PAD_NS + layers * TEMPLATE.span_ns + 500, f"step_{s}"))
    return rows


class _Texts:
    """NVTX texts of each template range for a batch of layers; emit_nvtx's op_id counts every op
    range and seq every op with a kernel (an autograd op), both from 1 across the whole run."""

    def __init__(self) -> None:
        self.op_id = 0
        self.seq = 0
        self.is_op = [n.startswith("aten::") for n in TEMPLATE.names]
        self.has_kernel = [False] * len(TEMPLATE.names)
        for r in TEMPLATE.launch_range:
            self.has_kernel[r] = True

    def batch(self, layer_index: np.ndarray) -> list[str]:
        out: list[str] = []
        for li in (layer_index % LAYERS).tolist():
            for name, op, seq in zip(TEMPLATE.names, self.is_op, self.has_kernel):
                if not op:
                    out.append(f"layer_{li}" if name == "layer" else name)
                    continue
                self.op_id += 1
                if seq:
                    self.seq += 1
                    out.append(f"{name}, seq = {self.seq}, op_id = {self.op_id}")
                else:
                    out.append(f"{name}, op_id = {self.op_id}")
        return out


def batches(p: Plan, sid: dict[str, int]) -> Iterator[tuple[list[tuple], list[tuple], list[tuple]]]:
    """(NVTX rows, runtime rows, kernel rows) per batch of layers, in time order."""
    r_start = np.asarray(TEMPLATE.start, np.int64)
    r_end = np.asarray(TEMPLATE.end, np.int64)
    c_start = np.asarray(TEMPLATE.call_start, np.int64)
    k_start = np.asarray(TEMPLATE.kernel_start, np.int64)
    k_end = k_start + np.asarray(TEMPLATE.kernel_ns, np.int64)
    k_names = [sid[n] for n in TEMPLATE.kernel_name]
    launch_api = sid[LAUNCH_API]
    texts = _Texts()
    per_layer = len(c_start)
    for first in range(0, p.layers, BATCH_LAYERS):
        count = min(BATCH_LAYERS, p.layers - first)
        base, _ = layer_starts(p, first, count)
        starts = (base[:, None] + r_start).ravel().tolist()
        ends = (base[:, None] + r_end).ravel().tolist()
        text = texts.batch(np.arange(first, first + count) % p.layers_per_step)
        nvtx = [(s, e, t) for s, e, t in zip(starts, ends, text)]
        corr = np.arange(first * per_layer + 1, (first + count) * per_layer + 1, dtype=np.int64).tolist()
        calls = (base[:, None] + c_start).ravel().tolist()
        runtime = [(c, c + LAUNCH_CALL_NS, i, launch_api) for c, i in zip(calls, corr)]
        ks = (base[:, None] + k_start).ravel().tolist()
        ke = (base[:, None] + k_end).ravel().tolist()
        names = k_names * count
        grid = list(range(first * per_layer + 1, (first + count) * per_layer + 1))
        kernels = [(s, e, i, n, n, g) for s, e, i, n, g in zip(ks, ke, corr, names, grid)]
        yield nvtx, runtime, kernels


NVTX_SQL = (f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
            f"VALUES (?, ?, {make_nsys.NVTX_PUSHPOP}, ?, {GTID}, 0)")
RUNTIME_SQL = (f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, "
               f"returnValue) VALUES (?, ?, {make_nsys.RUNTIME_CLASS}, {GTID}, ?, ?, 0)")
KERNEL_SQL = ("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, "
              "globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
              "staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId, "
              "launchType, tensorSizeMinusOneElements) "
              f"VALUES (?, ?, {DEVICE}, 1, {STREAM}, ?, {GPID}, ?, ?, 128, 132, 1, 1, 256, 1, 1, 0, 49152, 0, 0, ?, "
              "1, '[]')")


def write_static(con: sqlite3.Connection, sid: dict[str, int]) -> None:
    """Strings, enumerations, metadata, the process, its thread and its GPU (make_nsys's rows)."""
    con.executescript(make_nsys.SCHEMA)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in sid.items()])
    for table, rows in make_nsys.ENUMS.items():
        con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", rows)
    meta = [(k, "traceview benchmarks/gen_nsys_nvtx.py (synthetic)" if k == "DERIVED_BY" else v)
            for k, v in make_nsys.META]
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", meta)
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?, ?)",
                (make_nsys.SESSION_UTC_NS, "2026-01-01T00:00:00", "2026-01-01T00:00:00", make_nsys.SESSION_CLOCK_NS))
    con.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (GPID, PID, "python3"))
    con.execute("INSERT INTO ThreadNames VALUES (?, ?, ?)", (sid["python3"], 20, GTID))
    con.execute(f"INSERT INTO TARGET_INFO_GPU VALUES ({', '.join('?' * 41)})", (
        make_nsys.VM, DEVICE, "NVIDIA H100 80GB HBM3", "0000:1b:00.0", 1, 52428800, 84942979072, 3352320000000,
        1980000000, 132, DEVICE, "00000000-0000-0000-0000-000000000000", 0, "GH100", DEVICE, "", "", 161, 0, 65536,
        0, 65536, 49152, 232448, 233472, 65536, 32, 3, 64, 32, 1024, 1024, 1024, 64, 2147483647, 65535, 65535, 9, 0,
        9, 0))


def truth(p: Plan, path: Path) -> dict[str, Any]:
    """What the export holds, from the template and the plan."""
    by_depth: dict[str, int] = {"0": p.steps}
    for d in TEMPLATE.depth:
        by_depth[str(d)] = by_depth.get(str(d), 0) + p.layers
    block_ns: dict[str, int] = {}
    op_ns: dict[str, int] = {}
    for r, ns in zip(TEMPLATE.launch_range, TEMPLATE.kernel_ns):
        block_ns[TEMPLATE.block[r]] = block_ns.get(TEMPLATE.block[r], 0) + ns * p.layers
        op_ns[TEMPLATE.names[r]] = op_ns.get(TEMPLATE.names[r], 0) + ns * p.layers
    launches = p.layers * len(TEMPLATE.launch_range)
    return {
        "file": path.name, "generator": "benchmarks/gen_nsys_nvtx.py", "pid": PID, "device": DEVICE,
        "nvtx_ranges": p.ranges, "ranges_by_depth": by_depth, "layers": p.layers, "steps": p.steps,
        "layers_per_step": p.layers_per_step, "ranges_per_layer": len(TEMPLATE.names),
        "launches": launches, "kernels": launches, "runtime_calls": launches,
        "gpu_busy_ns": sum(TEMPLATE.kernel_ns) * p.layers, "gpu_ns_by_block": block_ns, "gpu_ns_by_op": op_ns,
        "max_depth": max(TEMPLATE.depth),
    }


def generate(out: Path, ranges: int = DEFAULT_RANGES, *, layers_per_step: int = LAYERS * MICRO_BATCHES,
             quiet: bool = False) -> dict[str, Any]:
    """Write the export to ``out`` (atomically) and its truth beside it; return the truth."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    p = plan(ranges, layers_per_step)
    sid: dict[str, int] = {}
    for s in ["python3", LAUNCH_API, *TEMPLATE.kernel_name]:
        sid.setdefault(s, len(sid) + 1)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    started = time.perf_counter()
    con = sqlite3.connect(tmp)
    try:
        # a scratch file until the rename: no journal, no syncs (3x faster to write)
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        write_static(con, sid)
        con.executemany(NVTX_SQL, step_rows(p))
        done = 0
        for nvtx, runtime, kernels in batches(p, sid):
            con.executemany(NVTX_SQL, nvtx)
            con.executemany(RUNTIME_SQL, runtime)
            con.executemany(KERNEL_SQL, kernels)
            done += len(nvtx)
            if not quiet and sys.stderr.isatty():  # a progress line for people, not for logs
                print(f"\r  {done + p.steps:,} / {p.ranges:,} ranges, {time.perf_counter() - started:.0f} s",
                      end="", file=sys.stderr, flush=True)
        con.commit()
    finally:
        con.close()
    os.replace(tmp, out)
    t = truth(p, out)
    out.with_name(out.stem + ".truth.json").write_text(json.dumps(t, indent=1, sort_keys=True) + "\n")
    if not quiet:
        steps = f"{p.steps:,} step{'s' * (p.steps != 1)}"
        print(f"{out}: {p.ranges:,} NVTX ranges ({steps} x up to {p.layers_per_step} layers), "
              f"{t['kernels']:,} launches and kernels, {out.stat().st_size / 1e6:,.0f} MB in "
              f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
    return t


def parse_count(text: str) -> int:
    """``10000000``, ``1e7`` or ``10M``/``500k`` as an integer."""
    s = text.strip().lower().replace("_", "").replace(",", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(s[-1:], 1)
    try:
        value = float(s[:-1] if scale > 1 else s) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}") from None
    if value != int(value) or value < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole count: {text!r}")
    return int(value)


def default_path(ranges: int) -> Path:
    return HERE / "out" / f"nvtx_{ranges}.sqlite"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranges", type=parse_count, default=DEFAULT_RANGES,
                    help="NVTX ranges to write, rounded up to whole layers (default 10M; 1e6 and 500k work)")
    ap.add_argument("--layers-per-step", type=int, default=LAYERS * MICRO_BATCHES,
                    help=f"layer ranges per step (default {LAYERS} layers x {MICRO_BATCHES} micro-batches)")
    ap.add_argument("--out", type=Path, help="the export to write (default benchmarks/out/nvtx_<ranges>.sqlite)")
    args = ap.parse_args(argv)
    if args.layers_per_step < 1:
        ap.error("--layers-per-step must be at least 1")
    try:
        generate(args.out or default_path(args.ranges), args.ranges, layers_per_step=args.layers_per_step)
    except ValueError as exc:
        ap.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
