"""Kineto traces with planted, known performance problems, and healthy twins, for measuring findings.

Each case is one training or inference job laid out on a timeline that this module controls, so
what is planted is known exactly: every GPU idle gap, every exposed communication interval and
every straggler wait is recorded while the events are placed, and the planted cost per step is
computed from those records (never by running traceview). A self-check then recomputes the idle
gaps from the written activity with an independent interval union and asserts that nothing else
left the GPU idle, so a planted case has exactly one problem and a healthy twin none.

Planted problems (expected finding code in brackets; the cost is planted GPU time / steps):

* ``host_bound_dataloader``: each step starts with a DataLoader ``__next__`` on the main thread
  while the GPU has run dry [``host_bound_gaps``];
* ``item_sync``: ``.item()`` calls (``aten::item`` -> ``aten::_local_scalar_dense`` -> a DtoH copy
  and ``cudaStreamSynchronize``, or a blocking ``cudaMemcpy`` for odd seeds) drain the queue; the
  idle from the copy's end until the host launches again is planted [``sync_bound_gaps`` or
  ``blocking_copy``];
* ``launch_bound``: thousands of 2-4 us elementwise kernels, each launched by a ~6 us
  ``cudaLaunchKernel`` inside a ~15-20 us eager op [``launch_bound``];
* ``exposed_allreduce``: 4 DDP ranks; one bucket's all-reduce runs under backward compute, the
  last one on its own stream after backward with nothing under it [``exposed_collective`` or
  ``exposed_communication``];
* ``straggler``: 4 ranks; one rank's GPU is a few % slower, so it reaches every all-reduce late and
  the others wait (cost: their waiting GPU time per step of an average GPU, the report's one
  denominator: the other ranks' waits summed, over all ranks) [``straggler_rank``];
* ``pageable_copy``: the batch (a dict of tensors) is copied from pageable memory (``Memcpy HtoD
  (Pageable -> Device)``): each copy blocks the host until it is done, leaving the GPU idle until
  the next launch [``pageable_copy``]; every copy lasts longer than the host work after it, so the
  idle it leaves is also no more than the time the host was blocked (both readings of the cost
  agree);
* ``fragmentation``: a compute-bound step with ``[memory]`` events whose ``Total Reserved`` is
  2.5-3.5x the peak ``Total Allocated`` [``memory_fragmentation``, no GPU cost].

Healthy twins (nothing above "info" should fire): ``compute_bound`` (back-to-back GEMMs, with
healthy ``[memory]`` events), ``cuda_graph_replay`` (``cudaGraphLaunch`` -> many back-to-back short
kernels sharing its correlation id, replayed ahead of the GPU) and ``deepep_overlap`` (DeepEP
``dispatch``/``combine`` kernels on a communication stream, always under compute).

Use as a module: ``planted_cases(sizes, seeds)`` yields :class:`Case` objects (name, one Kineto JSON
dict per rank, :class:`Expected`); ``write_case`` writes one; ``score`` judges a report's findings
against the expectation. As a script: ``python sample_traces/make_planted.py OUT_DIR``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

_HERE = pathlib.Path(__file__).resolve().parent
for _p in (_HERE, _HERE.parent / "benchmarks"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import gen_kineto  # noqa: E402  (the benchmark generator: transformer kernel names)
import kineto_writer as kw  # noqa: E402  (the Kineto JSON every generator writes)
import make_kineto  # noqa: E402  (the 4-rank sample: kernel table, NCCL args)

#: (steps, kernels per step): the compute per step; cases scale their own work from it
SIZES: dict[str, tuple[int, int]] = {"small": (4, 120), "medium": (6, 400), "large": (10, 1200)}
SEEDS = (1, 2, 3)
#: a planted cost is recalled when the finding's cost is within this fraction of it
COST_TOLERANCE = 0.05
ABOVE_INFO = ("high", "medium", "low")

COMPUTE_STREAM = make_kineto.COMPUTE_STREAM
COMM_STREAM = make_kineto.COMM_STREAM
EP_STREAM = 24
BASE_TIME_NS = 1_760_000_000_000_000_000
T0_NS = 3_215_000_000_000_000  # 3.2e12 us: below 2**43 us, so float microseconds stay exact
PID0 = 2_410_000
CBID = {**make_kineto.CBID, "cudaMemcpy": 31, "cudaGraphLaunch": 311, "cudaLaunchKernelExC": 430}

MEMCPY_DTOH_PAGEABLE = "Memcpy DtoH (Device -> Pageable)"
MEMCPY_HTOD_PAGEABLE = "Memcpy HtoD (Pageable -> Device)"
DATALOADER_ANNOTATION = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
DATALOADER_FRAME = "torch/utils/data/dataloader.py(733): __next__"


def _k(key: str) -> tuple[str, int]:
    """(kernel name, base duration ns) from the 4-rank sample's kernel table."""
    return make_kineto.KERNELS[key][0], make_kineto.KERNELS[key][1]


#: one layer of an MLP training step: (cpu ops from outer to inner, kernel key)
FORWARD = [(("aten::linear", "aten::addmm"), "gemm1"), (("aten::gelu",), "gelu"),
           (("aten::linear", "aten::addmm"), "gemm2"), (("aten::add",), "add"),
           (("aten::layer_norm", "aten::native_layer_norm"), "ln_fwd")]
BACKWARD = [(("autograd::engine::evaluate_function: AddmmBackward0", "aten::mm"), "gemm_dgrad"),
            (("autograd::engine::evaluate_function: AddmmBackward0", "aten::mm"), "gemm_wgrad"),
            (("autograd::engine::evaluate_function: GeluBackward0", "aten::gelu_backward"), "gelu_bwd"),
            (("autograd::engine::evaluate_function: NativeLayerNormBackward0",
              "aten::native_layer_norm_backward"), "ln_bwd_input"),
            (("autograd::engine::evaluate_function: AddmmBackward0", "aten::sum"), "bias_sum"),
            (("autograd::engine::evaluate_function: AddmmBackward0", "aten::mm"), "gemm_dgrad")]
#: eager elementwise ops of a for-loop optimizer on many small tensors: (op, kernel key)
TINY_OPS = [("aten::mul_", "scale_mul"), ("aten::add_", "mul_bwd"), ("aten::addcmul_", "mul_bwd"),
            ("aten::fill_", "fill"), ("aten::mul_", "scale_mul")]
#: one decoder layer of an inference step replayed from a CUDA graph: (kernel name, min ns, max ns)
_RMS = "void vllm::rms_norm_kernel<c10::BFloat16, 8, 4>(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 " \
       "const*, float, int, int)"
_ROPE = "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, " \
        "c10::BFloat16 const*, int, long, long, int, int, int)"
_SILU = "void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>(c10::" \
        "BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)"
GRAPH_LAYER = [(_RMS, 2_600, 3_800), (gen_kineto.GEMM_TN, 7_000, 11_000), (_ROPE, 2_200, 3_000),
               (gen_kineto.FLASH_FWD, 6_000, 10_000), (gen_kineto.GEMM_NN, 4_500, 7_000),
               (_RMS, 2_600, 3_800), (gen_kineto.GEMM_NT, 9_000, 14_000), (_SILU, 2_800, 3_800),
               (gen_kineto.GEMM_NN, 6_000, 9_500)]  # batch-8 decode: most kernels under 10 us
DEEPEP_NAMES = {
    "deep_ep": ("void deep_ep::internode::notify_dispatch<false, 8>(int const*, int*, int, int const*, int*, int, "
                "int, int, bool const*, int*, int*, int*, int*, void*, int, int, int, void**, int, int**, int, "
                "bool)",
                "void deep_ep::internode::dispatch<false, false, 8, 2, 7168>(int4*, float*, long*, float*, "
                "SourceMeta*, int4 const*, float const*, long const*, float const*, int*, int*, int*, int*, int, "
                "int, int, int, int, int, bool const*, void*, int, int, void**, int, int)",
                "void deep_ep::internode::combine<false, 8, 2, 7168, 8, 4>(int4*, float*, int4 const*, float "
                "const*, bool const*, int const*, int4 const*, SourceMeta const*, int4 const*, int const*, int, "
                "int, void*, int, int, void**, int, int, int, int)"),
    "dpsk": ("void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, int*, int, int const*, int*, int, "
             "int, int, bool const*, int*, int*, int*, int*, void*, int, int, int, void**, int, int**, int, bool)",
             "void dpsk::ep::internode::dispatch<false, false, 8, 2, 7168>(int4*, float*, long*, float*, "
             "SourceMeta*, int4 const*, float const*, long const*, float const*, int*, int*, int*, int*, int, "
             "int, int, int, int, int, bool const*, void*, int, int, void**, int, int)",
             "void dpsk::ep::internode::combine<false, 8, 2, 7168, 8, 4>(int4*, float*, int4 const*, float "
             "const*, bool const*, int const*, int4 const*, SourceMeta const*, int4 const*, int const*, int, "
             "int, void*, int, int, void**, int, int, int, int)"),
}


# ----------------------------------------------------------------------------------------------
# What a case expects


@dataclass(frozen=True)
class Expected:
    """What a planted case should produce (None for a healthy twin).

    ``codes``: the finding codes that diagnose the planted problem; recall = one of them is present
    (anywhere in the findings) with a cost within ``COST_TOLERANCE`` of ``cost_ns_per_step``
    (presence is enough when that is None). ``acceptable``: other codes that may fire above "info"
    without being a false alarm (the umbrellas of the expected code's ``part_of`` chain, its nested
    children, and findings that describe the same planted time from another side).
    """

    codes: tuple[str, ...]
    cost_ns_per_step: float | None
    acceptable: tuple[str, ...] = ()
    #: the planted cost per step of each rank (the expectation is their mean)
    per_rank_ns: dict[int, float] = field(default_factory=dict)


@dataclass
class Case:
    name: str  # kind-size-sN
    kind: str
    size: str
    seed: int
    traces: dict[int, dict[str, Any]]  # rank -> Kineto JSON document
    expected: Expected | None

    @property
    def healthy(self) -> bool:
        return self.expected is None


@dataclass
class Call:
    """One CUDA runtime call as placed: its times, correlation id, launching op and event."""

    start: int
    end: int
    corr: int
    ext: int
    event: dict[str, Any]


@dataclass
class Score:
    found: bool
    cost_error: float | None  # |finding cost - planted| / planted of the closest expected finding
    matched: dict[str, Any] | None  # that finding
    false_alarms: list[dict[str, Any]]


#: the critical path's what-if findings (see :func:`score`)
WHATIF_PREFIX = "whatif_"


def score(expected: Expected | None, findings: Sequence[dict[str, Any]]) -> Score:
    """Judge a report's findings (``report["findings"]``: dicts with code, severity, cost_ns_per_step)."""
    if expected is None:
        return Score(True, None, None, [f for f in findings if f["severity"] in ABOVE_INFO])
    allowed = set(expected.codes) | set(expected.acceptable)
    # a what-if (critical path: the step time a change would save) restates a planted problem's
    # consequence rather than detecting another; on a healthy twin it is still a false alarm
    false = [f for f in findings if f["severity"] in ABOVE_INFO and f["code"] not in allowed
             and not str(f["code"]).startswith(WHATIF_PREFIX)]
    hits = [f for f in findings if f["code"] in expected.codes]
    if not hits:
        return Score(False, None, None, false)
    if expected.cost_ns_per_step is None:
        return Score(True, None, hits[0], false)
    planted = expected.cost_ns_per_step

    def error(f: dict[str, Any]) -> float:
        return abs(float(f.get("cost_ns_per_step") or 0) - planted) / planted

    best = min(hits, key=error)
    return Score(error(best) <= COST_TOLERANCE, error(best), best, false)


# ----------------------------------------------------------------------------------------------
# One rank's timeline


class RankTrace:
    """The events of one rank, placed on a CPU cursor (main thread) and per-stream GPU cursors.

    ``place`` records every device-wide idle gap it opens (a kernel starting after all earlier
    activity ended): as planted when the case said so (``plant_next_gap``), else as unplanted.
    """

    def __init__(self, rank: int, world: int, rng: random.Random, devices: int = 8) -> None:
        self.rank, self.world, self.rng = rank, world, rng
        self.pid = PID0 + 131 * rank
        self.tid = self.pid
        self.device = rank % devices
        self.host = T0_NS + rank * 7_919 + rng.randint(0, 5_000)
        self.events: list[dict[str, Any]] = []
        self.stack: list[tuple[str, str, int, int, dict[str, Any]]] = []
        self.corr = 4_000 + 977 * rank
        self.ext = 0
        self.free: dict[int, int] = {}
        self.device_free: int | None = None
        self.plant_next_gap = False
        self.planted_gaps: list[tuple[int, int]] = []
        self.unplanted_gaps: list[tuple[int, int]] = []
        self.activity: list[tuple[int, int, str]] = []  # (start, end, class)
        self.steps = 0
        self.stretch = 1.0  # GPU slowness (a straggler's kernels run longer)
        self.allocated = 0
        self.reserved = 0
        self.reserve_factor = 1.0

    def r(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    # -- CPU side ------------------------------------------------------------------------------
    @contextmanager
    def span(self, cat: str, name: str, pre: tuple[int, int] = (2_000, 4_000),
             post: tuple[int, int] = (800, 2_000), args: dict[str, Any] | None = None) -> Iterator[None]:
        """A CPU range on the main thread; ``pre``/``post``: its own time before and after the body."""
        self.ext += 1
        start = self.host
        self.stack.append((cat, name, start, self.ext, dict(args or {})))
        self.host += self.r(*pre)
        yield
        self.host += self.r(*post)
        cat, name, start, ext, a = self.stack.pop()
        ev_args = {"External id": ext, "Record function id": 0, **a} if cat != "python_function" else a
        self.events.append(self._x(cat, name, self.pid, self.tid, start, self.host - start, ev_args))

    def work(self, ns: int) -> None:
        self.host += ns

    def call(self, api: str, dur: int) -> Call:
        """A CUDA runtime call at the CPU cursor; the cursor moves past it."""
        self.corr += 1 + (2 if self.rng.random() < 0.2 else 0)
        ext = next((s[3] for s in reversed(self.stack) if s[0] in ("cpu_op", "user_annotation")), 0)
        start = self.host
        event = self._x("cuda_runtime", api, self.pid, self.tid, start, dur,
                        {"External id": ext, "cbid": CBID[api], "correlation": self.corr})
        self.events.append(event)
        self.host = start + dur + self.r(300, 900)
        return Call(start, start + dur, self.corr, ext, event)

    def end_call_at(self, c: Call, end: int) -> None:
        """A call that blocks the host until ``end`` (a synchronous copy returns when it is done)."""
        c.end = end
        c.event["dur"] = _us(end - c.start)
        self.host = end + self.r(300, 900)

    def flow_start(self, c: Call) -> None:
        """The ``ac2g`` flow from a launch call to its GPU activity (one per correlation id)."""
        self.events.append(kw.flow_event("s", c.corr, self.pid, self.tid, _us(c.start)))

    # -- GPU side ------------------------------------------------------------------------------
    def place(self, cat: str, name: str, stream: int, start: int, dur: int, c: Call, cls: str = "compute",
              args: dict[str, Any] | None = None) -> tuple[int, int]:
        """Put one GPU activity at ``start`` and account the device-wide gap it may open."""
        end = start + dur
        if self.device_free is not None and start > self.device_free:
            gap = (self.device_free, start)
            (self.planted_gaps if self.plant_next_gap else self.unplanted_gaps).append(gap)
            self.plant_next_gap = False
        self.device_free = max(end, self.device_free or end)
        self.free[stream] = max(end, self.free.get(stream, end))
        self.activity.append((start, end, cls))
        a = {"External id": c.ext, "queued": 0, "device": self.device, "context": 1, "stream": stream,
             "correlation": c.corr, **(args or {})}
        self.events.append(self._x(cat, name, self.device, stream, start, dur, a))
        self.events.append(kw.flow_event("f", c.corr, self.device, stream, _us(start)))
        return start, end

    def launch(self, name: str, dur: int, stream: int = COMPUTE_STREAM, api: str = "cudaLaunchKernel",
               after: int = 0, cls: str = "compute", args: dict[str, Any] | None = None) -> tuple[int, int]:
        """Launch one kernel: it starts when its stream is free and the call has returned (+ latency)."""
        c = self.call(api, self.r(4_800, 6_800))
        self.flow_start(c)
        start = max(self.free.get(stream, 0), c.end + self.r(1_500, 3_000), after)
        geometry = {"grid": [132, 4, 1], "block": [256, 1, 1], "registers per thread": 128}
        return self.place("kernel", name, stream, start, int(dur * self.stretch), c, cls, {**geometry, **(args or {})})

    def op_kernel(self, ops: Sequence[str], key: str) -> tuple[int, int]:
        """Nested CPU ops launching one kernel of the sample's kernel table (duration jittered)."""
        name, base = _k(key)
        return self._nest(ops, lambda: self.launch(name, base * self.r(970, 1_030) // 1_000))

    def _nest(self, ops: Sequence[str], body: Callable[[], tuple[int, int]]) -> tuple[int, int]:
        if not ops:
            return body()
        with self.span("cpu_op", ops[0], pre=(1_500, 3_000), post=(600, 1_500)):
            return self._nest(ops[1:], body)

    def memory(self, nbytes: int) -> None:
        """A ``[memory]`` instant event; reserved grows to ``reserve_factor`` x the allocated peak."""
        self.allocated += nbytes
        need = int(self.allocated * self.reserve_factor)
        if need > self.reserved:
            self.reserved = -(-need // (20 << 20)) * (20 << 20)  # the allocator reserves 20 MiB segments
        self.events.append(kw.instant_event("[memory]", self.pid, self.tid, _us(self.host), cat="cpu_instant_event",
                                            args={"Total Reserved": self.reserved, "Total Allocated": self.allocated,
                                                  "Bytes": nbytes, "Addr": 0x7F3A_0000_0000 + (self.ext << 21),
                                                  "Device Id": self.device, "Device Type": 1}))

    @staticmethod
    def _x(cat: str, name: str, pid: int, tid: int, start: int, dur: int, args: dict[str, Any]) -> dict[str, Any]:
        return kw.x_event(cat, name, pid, tid, _us(start), _us(dur), args)

    # -- the document --------------------------------------------------------------------------
    def document(self) -> dict[str, Any]:
        end = max([self.host] + [e for _, e, _ in self.activity])
        start = T0_NS - 50_000
        meta = [("process_name", self.pid, 0, {"name": "python3"}), ("process_labels", self.pid, 0, {"labels": "CPU"}),
                ("thread_name", self.pid, self.tid, {"name": f"thread {self.tid} (python3)"}),
                ("process_name", self.device, 0, {"name": "python3"}),
                ("process_labels", self.device, 0, {"labels": f"GPU {self.device}"})]
        meta += [("thread_name", self.device, s, {"name": f"stream {s} "}) for s in sorted(self.free)]
        events = sorted(self.events, key=lambda e: (e["ts"], e["ph"] != "X"))
        events += [kw.metadata_event(n, p, t, _us(start), a) for n, p, t, a in meta]
        events.append(kw.profiler_span(_us(start), _us(end - start + 10_000)))
        header = {"deviceProperties": kw.device_properties(range(8)), "cupti_version": 24,
                  "cuda_runtime_version": 12080, "cuda_driver_version": 12080,
                  "distributedInfo": kw.distributed_info(self.rank, self.world), "record_shapes": 1,
                  "profile_memory": 1, "with_stack": 0, "trace_id": f"{self.rank:04X}PLANTED{self.pid:08X}"}
        return kw.document(header, events, trace_name=f"rank{self.rank}.pt.trace.json", base_time_ns=BASE_TIME_NS)


def _us(ns: int) -> float:
    """Kineto's float microseconds; exact to the ns below 2**43 us (int / int is correctly rounded)."""
    return ns / 1000


@contextmanager
def profiler_step(r: RankTrace, n: int) -> Iterator[None]:
    with r.span("user_annotation", f"ProfilerStep#{n}", pre=(3_000, 6_000), post=(2_000, 4_000)):
        yield
    r.steps += 1


# ----------------------------------------------------------------------------------------------
# Building blocks of a step


def forward(r: RankTrace, layers: int, mem_bytes: int = 0) -> None:
    for _ in range(layers):
        for ops, key in FORWARD:
            r.op_kernel(ops, key)
            if mem_bytes:
                r.memory(mem_bytes)


def backward(r: RankTrace, layers: int, mem_bytes: int = 0) -> None:
    for _ in range(layers):
        for ops, key in BACKWARD:
            r.op_kernel(ops, key)
            if mem_bytes:
                r.memory(-mem_bytes * len(FORWARD) // len(BACKWARD))


def optimizer(r: RankTrace, after: int = 0) -> None:
    name, base = _k("adam")
    with r.span("user_annotation", "Optimizer.step#AdamW.step"):
        with r.span("cpu_op", "aten::_fused_adamw_"):
            r.launch(name, base * r.r(980, 1_020) // 1_000, after=after)


def layers_for(kernels: int) -> int:
    return max(2, kernels // (len(FORWARD) + len(BACKWARD)))


def plain_step(r: RankTrace, n: int, kernels: int, mem_bytes: int = 0) -> None:
    with profiler_step(r, n):
        forward(r, layers_for(kernels), mem_bytes)
        backward(r, layers_for(kernels), mem_bytes)
        optimizer(r)


# ----------------------------------------------------------------------------------------------
# The cases: each returns (ranks, expected) and plants its problem on the timeline


def case_compute_bound(rng: random.Random, steps: int, kernels: int) -> tuple[list[RankTrace], None]:
    r = RankTrace(0, 1, rng)
    r.reserve_factor = 1.0 + r.r(20, 50) / 1_000
    r.memory(r.r(10_000, 14_000) << 20)  # weights and optimizer state
    for n in range(1, steps + 1):
        plain_step(r, n, kernels, mem_bytes=r.r(180, 260) << 20)
    return [r], None


def case_fragmentation(rng: random.Random, steps: int, kernels: int) -> tuple[list[RankTrace], Expected]:
    r = RankTrace(0, 1, rng)
    r.reserve_factor = r.r(2_500, 3_500) / 1_000
    r.memory(r.r(10_000, 14_000) << 20)
    for n in range(1, steps + 1):
        plain_step(r, n, kernels, mem_bytes=r.r(180, 260) << 20)
    return [r], Expected(("memory_fragmentation",), None)


def case_host_bound_dataloader(rng: random.Random, steps: int, kernels: int) -> tuple[list[RankTrace], Expected]:
    r = RankTrace(0, 1, rng)
    step_gpu_ns = kernels * 38_000
    for n in range(1, steps + 1):
        with profiler_step(r, n):
            wanted_gap = step_gpu_ns * r.r(150, 300) // 1_000
            gpu_free = r.device_free if r.device_free is not None else r.host
            with r.span("user_annotation", DATALOADER_ANNOTATION, pre=(1_000, 2_000)):
                with r.span("python_function", DATALOADER_FRAME, pre=(500, 1_000)):
                    r.work(max(50_000, gpu_free + wanted_gap - r.host))
            r.plant_next_gap = True
            forward(r, layers_for(kernels))
            backward(r, layers_for(kernels))
            optimizer(r)
    return [r], Expected(("host_bound_gaps",), _idle_per_step([r]), ("low_utilization",),
                         _per_rank_idle([r]))


def _item(r: RankTrace, blocking: bool) -> None:
    """``loss.item()``: a 4-byte DtoH copy the host waits for; the GPU idles until the next launch."""
    with r.span("cpu_op", "aten::item"), r.span("cpu_op", "aten::_local_scalar_dense"):
        c = r.call("cudaMemcpy" if blocking else "cudaMemcpyAsync", r.r(6_000, 9_000))
        r.flow_start(c)
        start = max(r.free.get(COMPUTE_STREAM, 0), (c.start if blocking else c.end) + r.r(1_500, 3_000))
        _, end = r.place("gpu_memcpy", MEMCPY_DTOH_PAGEABLE, COMPUTE_STREAM, start, r.r(1_300, 2_200), c,
                         "memory", {"bytes": 4})
        if blocking:  # the synchronous copy returns once the copy is done
            r.end_call_at(c, end + r.r(2_000, 4_000))
        else:
            r.call("cudaStreamSynchronize", max(2_000, end + r.r(2_000, 4_000) - r.host))
    r.plant_next_gap = True
    with r.span("python_function", "train.py(97): log_metrics", pre=(5_000, 25_000), post=(500, 1_000)):
        pass


def case_item_sync(rng: random.Random, steps: int, kernels: int, blocking: bool) -> tuple[list[RankTrace], Expected]:
    r = RankTrace(0, 1, rng)
    for n in range(1, steps + 1):
        with profiler_step(r, n):
            for _ in range(layers_for(kernels)):  # a metric read after each layer, with work queued before it
                forward(r, 1)
                _item(r, blocking)
            backward(r, layers_for(kernels))
            optimizer(r)
    return [r], Expected(("sync_bound_gaps", "blocking_copy"), _idle_per_step([r]),
                         ("low_utilization", "sync_bound_gaps", "blocking_copy", "sync_calls"), _per_rank_idle([r]))


def case_launch_bound(rng: random.Random, steps: int, kernels: int) -> tuple[list[RankTrace], Expected]:
    r = RankTrace(0, 1, rng)
    for n in range(1, steps + 1):
        with profiler_step(r, n):
            with r.span("user_annotation", "Optimizer.step#SGD.step"):
                for i in range(2 * kernels):
                    op, key = TINY_OPS[i % len(TINY_OPS)]
                    with r.span("cpu_op", op, pre=(6_000, 10_000), post=(3_000, 5_000)):
                        r.plant_next_gap = True
                        r.launch(_k(key)[0], r.r(2_000, 4_000))
    return [r], Expected(("launch_bound",), _idle_per_step([r]),
                         ("host_bound_gaps", "low_utilization", "many_tiny_kernels"), _per_rank_idle([r]))


def case_pageable_copy(rng: random.Random, steps: int, kernels: int) -> tuple[list[RankTrace], Expected]:
    r = RankTrace(0, 1, rng)
    for n in range(1, steps + 1):
        with profiler_step(r, n):
            for i in range(max(3, kernels // 30) + r.r(0, 2)):  # one copy per tensor of the batch dict
                with r.span("python_function", f"train.py(71): <dictcomp> [{i}]", pre=(20_000, 60_000)):
                    with r.span("cpu_op", "aten::to"), r.span("cpu_op", "aten::_to_copy"), \
                            r.span("cpu_op", "aten::copy_"):
                        nbytes = r.r(1_024, 4_096) << 10  # copies outlast the host work after them
                        c = r.call("cudaMemcpyAsync", 0)
                        r.flow_start(c)
                        start = max(r.free.get(COMPUTE_STREAM, 0), c.start + r.r(3_000, 5_000))
                        _, end = r.place("gpu_memcpy", MEMCPY_HTOD_PAGEABLE, COMPUTE_STREAM, start,
                                         nbytes * 1_000 // r.r(9_000, 12_000), c, "memory", {"bytes": nbytes})
                        r.end_call_at(c, end + r.r(3_000, 6_000))  # staged through pinned memory: returns when done
                r.plant_next_gap = True
            forward(r, layers_for(kernels))
            backward(r, layers_for(kernels))
            optimizer(r)
    return [r], Expected(("pageable_copy",), _idle_per_step([r]), ("sync_bound_gaps", "low_utilization"),
                         _per_rank_idle([r]))


def _all_reduce(ranks: list[RankTrace], nelems: int, dur: int) -> list[tuple[int, int]]:
    """One DDP bucket on every rank: each NCCL kernel starts when its rank's gradients are ready
    (the compute stream's work so far) and all end together, ``dur`` after the last arrival."""
    issued = []
    for r in ranks:
        args = dict(make_kineto.collective_args(nelems))
        with r.span("user_annotation", "nccl:all_reduce"), r.span("cpu_op", "record_param_comms", args=args):
            r.call("cudaEventRecord", r.r(2_000, 3_000))
            r.call("cudaStreamWaitEvent", r.r(1_500, 2_500))
            c = r.call("cudaLaunchKernel", r.r(6_000, 9_000))
            r.flow_start(c)
        ready = max(r.free[COMPUTE_STREAM], r.free.get(COMM_STREAM, 0), c.end + r.r(2_000, 3_000))
        issued.append((ready, c, args))
    end = max(ready for ready, _, _ in issued) + dur
    return [r.place("kernel", make_kineto.NCCL_KERNEL, COMM_STREAM, ready, end - ready, c, "communication",
                    {"grid": [16, 1, 1], "block": [640, 1, 1], **args})
            for r, (ready, c, args) in zip(ranks, issued)]


def case_exposed_allreduce(rng: random.Random, steps: int, kernels: int) -> tuple[list[RankTrace], Expected]:
    ranks = [RankTrace(rank, 4, random.Random(rng.random())) for rank in range(4)]
    layers = layers_for(kernels)
    for n in range(1, steps + 1):
        with ExitStack() as open_steps:
            for r in ranks:
                open_steps.enter_context(profiler_step(r, n))
                forward(r, layers)
                backward(r, layers - layers // 2)
            tail_ns = (layers // 2) * sum(_k(key)[1] for _, key in BACKWARD)
            _all_reduce(ranks, 4_201_984, tail_ns * rng.randint(300, 450) // 1_000)  # overlapped by backward
            for r in ranks:
                backward(r, layers // 2)
            ends = _all_reduce(ranks, 4_234_752, kernels * 38_000 * rng.randint(80, 150) // 1_000)  # exposed
            for r, (_, end) in zip(ranks, ends):
                r.call("cudaStreamWaitEvent", r.r(1_500, 2_500))
                optimizer(r, after=end)
    per_rank = {r.rank: _exposed_ns(r) / r.steps for r in ranks}
    # the exposed bucket is planted slow (long for its 17 MB), so its bus bandwidth is far below an
    # H100's NVLink: collective_bandwidth describes the same planted time from the link's side
    return ranks, Expected(("exposed_collective", "exposed_communication"), _mean(per_rank),
                           ("exposed_collective", "exposed_communication", "collective_bandwidth"), per_rank)


def case_straggler(rng: random.Random, steps: int, kernels: int) -> tuple[list[RankTrace], Expected]:
    ranks = [RankTrace(rank, 4, random.Random(rng.random())) for rank in range(4)]
    slow = rng.randrange(4)
    layers = layers_for(kernels)
    waits = []
    for n in range(1, steps + 1):
        with ExitStack() as open_steps:
            for r in ranks:
                r.stretch = 1.0 + (rng.randint(40, 70) / 1_000 if r.rank == slow else 0.0)
                open_steps.enter_context(profiler_step(r, n))
                forward(r, layers)
                backward(r, layers)
                r.stretch = 1.0
            placed = _all_reduce(ranks, 4_234_752, kernels * 38_000 * rng.randint(30, 60) // 1_000)
            late = placed[slow][0]
            assert all(start < late for rank, (start, _) in enumerate(placed) if rank != slow), "not last"
            # the waiting GPU time of the job, as the report's one denominator counts it: per step of
            # an average GPU (the others' waits summed, over all 4 GPUs; docs/metrics.md "Findings")
            waits.append(sum(late - placed[r.rank][0] for r in ranks if r.rank != slow) / len(ranks))
            for r, (_, end) in zip(ranks, placed):
                r.call("cudaStreamWaitEvent", r.r(1_500, 2_500))
                optimizer(r, after=end)
    return ranks, Expected(("straggler_rank",), sum(waits) / steps,
                           ("exposed_communication", "exposed_collective", "compute_imbalance"),
                           {slow: sum(waits) / steps})


def _replay(r: RankTrace, per_graph: int) -> None:
    """One decode iteration replayed from a CUDA graph: one cudaGraphLaunch, the graph's kernels back
    to back with its correlation id, then the sampled tokens copied into the next input."""
    with r.span("python_function", "vllm/worker/model_runner.py(1711): execute_model", pre=(20_000, 40_000)):
        with r.span("python_function", "torch/cuda/graphs.py(88): replay"):
            c = r.call("cudaGraphLaunch", r.r(9_000, 16_000))
            r.flow_start(c)
            at = max(r.free.get(COMPUTE_STREAM, 0), c.end + r.r(2_000, 4_000))
            for i in range(per_graph):
                name, lo, hi = GRAPH_LAYER[i % len(GRAPH_LAYER)]
                at = r.place("kernel", name, COMPUTE_STREAM, at, r.r(lo, hi), c, args={"graph node id": 1_000 + i})[1]
        with r.span("cpu_op", "aten::copy_"):
            r.launch(gen_kineto.COPY, r.r(10_000, 14_000))


def case_cuda_graph_replay(rng: random.Random, steps: int, kernels: int) -> tuple[list[RankTrace], None]:
    """Decode steps replayed from CUDA graphs; the host launches the next replay while one runs."""
    r = RankTrace(0, 1, rng)
    for n in range(1, steps + 1):
        with profiler_step(r, n):
            for _ in range(4):
                _replay(r, max(len(GRAPH_LAYER), kernels // 4))
    return [r], None


def case_host_bound_graphed(rng: random.Random, steps: int, kernels: int) -> tuple[list[RankTrace], Expected]:
    """The same graphed decode, but each step starts in the serving scheduler while the GPU has run
    dry: host-bound, although every kernel is already replayed from a graph (no launch overhead)."""
    r = RankTrace(0, 1, rng)
    per_graph = max(len(GRAPH_LAYER), kernels // 4)
    for n in range(1, steps + 1):
        with profiler_step(r, n):
            gpu_free = r.device_free if r.device_free is not None else r.host
            wanted_gap = 4 * per_graph * 6_500 * r.r(150, 300) // 1_000
            with r.span("python_function", "vllm/core/scheduler.py(1221): schedule", pre=(1_000, 2_000)):
                r.work(max(30_000, gpu_free + wanted_gap - r.host))
            r.plant_next_gap = True
            for _ in range(4):
                _replay(r, per_graph)
    return [r], Expected(("host_bound_gaps",), _idle_per_step([r]), ("low_utilization",), _per_rank_idle([r]))


def case_deepep_overlap(rng: random.Random, steps: int, kernels: int, family: str) -> tuple[list[RankTrace], None]:
    """MoE layers: GEMMs back to back on the compute stream; DeepEP notify/dispatch/combine on a
    communication stream, each placed inside compute that is already queued (fully overlapped)."""
    r = RankTrace(0, 16, rng)
    notify, dispatch, combine = DEEPEP_NAMES[family]
    gemms = [gen_kineto.GEMM_TN, gen_kineto.GEMM_NN, gen_kineto.GEMM_NT, gen_kineto.CUTLASS_GEMM]
    for n in range(1, steps + 1):
        with profiler_step(r, n):
            for layer in range(max(2, kernels // 8)):
                starts = []
                for i in range(8):
                    with r.span("cpu_op", "aten::mm"):
                        starts.append(r.launch(gemms[(layer + i) % 4], r.r(40_000, 90_000))[0])
                begin = starts[0]
                horizon = r.free[COMPUTE_STREAM] - 5_000
                for name, share in ((notify, 20), (dispatch, 350), (combine, 350)):
                    with r.span("cpu_op", "deep_ep::Buffer::internode_dispatch" if name != combine
                                else "deep_ep::Buffer::internode_combine"):
                        c = r.call("cudaLaunchKernelExC", r.r(5_000, 8_000))
                        r.flow_start(c)
                        start = max(begin, c.end + 2_000, r.free.get(EP_STREAM, 0))
                        dur = min((horizon - begin) * share // 1_000, horizon - start)
                        assert dur > 1_000, "DeepEP kernel does not fit under the compute"
                        r.place("kernel", name, EP_STREAM, start, dur, c, "communication",
                                {"grid": [24, 1, 1], "block": [768, 1, 1]})
    assert _exposed_ns(r) == 0, "DeepEP communication is not fully overlapped"
    return [r], None


def case_exposed_deepep(rng: random.Random, steps: int, kernels: int, family: str) -> tuple[list[RankTrace], Expected]:
    """MoE layers without overlap: the expert GEMMs wait for DeepEP's dispatch and the next layer for
    its combine, so the dispatch and combine kernels run with nothing under them."""
    r = RankTrace(0, 16, rng)
    names = DEEPEP_NAMES[family]
    gemms = [gen_kineto.GEMM_TN, gen_kineto.GEMM_NN, gen_kineto.GEMM_NT, gen_kineto.CUTLASS_GEMM]
    for n in range(1, steps + 1):
        with profiler_step(r, n):
            for layer in range(max(2, kernels // 8)):
                after = 0
                for part in range(2):  # attention before dispatch, experts before combine
                    for i in range(4):
                        with r.span("cpu_op", "aten::mm"):
                            r.launch(gemms[(layer + i) % 4], r.r(40_000, 90_000), after=after if i == 0 else 0)
                    after = _deepep(r, names[1 + part], "internode_combine" if part else "internode_dispatch",
                                    r.r(30_000, 70_000))
                r.free[COMPUTE_STREAM] = max(r.free[COMPUTE_STREAM], after)  # the next layer waits for combine
    per_rank = {0: _exposed_ns(r) / r.steps}
    return [r], Expected(("exposed_communication", "exposed_collective"), per_rank[0],
                         ("exposed_communication", "exposed_collective"), per_rank)


def _deepep(r: RankTrace, name: str, op: str, dur: int) -> int:
    """A DeepEP kernel on its stream after the compute queued so far; returns its end."""
    with r.span("cpu_op", f"deep_ep::Buffer::{op}"):
        c = r.call("cudaLaunchKernelExC", r.r(5_000, 8_000))
        r.flow_start(c)
        start = max(r.free[COMPUTE_STREAM], c.end + 2_000, r.free.get(EP_STREAM, 0))
        return r.place("kernel", name, EP_STREAM, start, dur, c, "communication",
                       {"grid": [24, 1, 1], "block": [768, 1, 1]})[1]


# ----------------------------------------------------------------------------------------------
# Planted costs, from the construction, and the self-check


def _merge(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _idle_gaps(r: RankTrace) -> list[tuple[int, int]]:
    """Device-wide idle gaps inside the GPU window, from an independent union of the activity."""
    u = _merge([(s, e) for s, e, _ in r.activity])
    return [(a[1], b[0]) for a, b in zip(u, u[1:])]


def _exposed_ns(r: RankTrace) -> int:
    """|U(communication) - U(compute and memory)|: communication with nothing else under it."""
    comm = _merge([(s, e) for s, e, c in r.activity if c == "communication"])
    other = _merge([(s, e) for s, e, c in r.activity if c != "communication"])
    covered, j = 0, 0
    for s, e in comm:
        while j < len(other) and other[j][1] <= s:
            j += 1
        k = j
        while k < len(other) and other[k][0] < e:
            covered += min(e, other[k][1]) - max(s, other[k][0])
            k += 1
    return sum(e - s for s, e in comm) - covered


def _per_rank_idle(ranks: list[RankTrace]) -> dict[int, float]:
    return {r.rank: sum(e - s for s, e in r.planted_gaps) / r.steps for r in ranks}


def _idle_per_step(ranks: list[RankTrace]) -> float:
    return _mean(_per_rank_idle(ranks))


def _mean(values: dict[int, float] | dict[int, int]) -> float:
    return sum(values.values()) / len(values)


def self_check(name: str, ranks: list[RankTrace]) -> None:
    """Every idle gap of the written activity is one the case planted: nothing else costs GPU time."""
    for r in ranks:
        gaps = [g for g in _idle_gaps(r) if g[1] > g[0]]
        planted = sorted(r.planted_gaps)
        if gaps != planted or r.unplanted_gaps:
            extra = sorted(set(gaps) - set(planted))[:3]
            raise AssertionError(f"{name} rank {r.rank}: unplanted idle {extra or r.unplanted_gaps[:3]} "
                                 f"({len(gaps)} gaps, {len(planted)} planted)")


# ----------------------------------------------------------------------------------------------
# The catalogue

Builder = Callable[[random.Random, int, int], tuple[list[RankTrace], Expected | None]]

CASES: dict[str, Builder] = {
    "host_bound_dataloader": case_host_bound_dataloader,
    "item_sync": lambda rng, s, k: case_item_sync(rng, s, k, blocking=False),
    "item_sync_memcpy": lambda rng, s, k: case_item_sync(rng, s, k, blocking=True),
    "launch_bound": case_launch_bound,
    "exposed_allreduce": case_exposed_allreduce,
    "straggler": case_straggler,
    "pageable_copy": case_pageable_copy,
    "host_bound_graphed": case_host_bound_graphed,
    "exposed_deepep": lambda rng, s, k: case_exposed_deepep(rng, s, k, "dpsk" if rng.random() < 0.5 else "deep_ep"),
    "fragmentation": case_fragmentation,
    "compute_bound": case_compute_bound,
    "cuda_graph_replay": case_cuda_graph_replay,
    "deepep_overlap": lambda rng, s, k: case_deepep_overlap(rng, s, k, "dpsk" if rng.random() < 0.5 else "deep_ep"),
}
HEALTHY = ("compute_bound", "cuda_graph_replay", "deepep_overlap")


def planted_cases(sizes: Sequence[str] = ("small",), seeds: Sequence[int] = (1,),
                  kinds: Sequence[str] | None = None) -> Iterator[Case]:
    """Every case kind at every size and seed (same arguments, same traces)."""
    for kind in kinds or CASES:
        for size in sizes:
            steps, kernels = SIZES[size]
            for seed in seeds:
                rng = random.Random(f"{kind}:{size}:{seed}")
                ranks, expected = CASES[kind](rng, steps, kernels)
                name = f"{kind}-{size}-s{seed}"
                self_check(name, ranks)
                yield Case(name, kind, size, seed, {r.rank: r.document() for r in ranks}, expected)


def write_case(case: Case, out_dir: pathlib.Path) -> pathlib.Path:
    """One file for a one-rank case, else a directory of ``rank{r}.json``; returns what to analyse."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if len(case.traces) == 1:
        path = out_dir / f"{case.name}.json"
        path.write_text(kw.dumps(next(iter(case.traces.values())), separators=(",", ":")))
        return path
    folder = out_dir / case.name
    folder.mkdir(exist_ok=True)
    for rank, doc in case.traces.items():
        (folder / f"rank{rank}.json").write_text(kw.dumps(doc, separators=(",", ":")))
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=pathlib.Path, help="output directory")
    ap.add_argument("--sizes", default="small", help=f"comma-separated, of {', '.join(SIZES)} (default small)")
    ap.add_argument("--seeds", default="1", help="comma-separated integers (default 1)")
    args = ap.parse_args(argv)
    sizes = args.sizes.split(",")
    bad = [s for s in sizes if s not in SIZES]
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        bad.append(args.seeds)
    if bad:
        print(f"make_planted: unknown size or seed {bad[0]!r}", file=sys.stderr)
        return 2
    truth = {}
    for case in planted_cases(sizes, seeds):
        path = write_case(case, args.out)
        e = case.expected
        truth[case.name] = None if e is None else {"path": path.name, "codes": e.codes, "acceptable": e.acceptable,
                                                   "cost_ns_per_step": e.cost_ns_per_step,
                                                   "per_rank_ns": e.per_rank_ns}
    (args.out / "expected.json").write_text(json.dumps(truth, indent=1, sort_keys=True))
    print(f"{len(truth)} cases in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
