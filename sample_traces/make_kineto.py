"""Synthetic 4-rank PyTorch-profiler (Kineto) traces with planted, known answers.

``main(out_dir)`` writes ``out_dir/synthetic_4rank/rank{0,1,2,3}.json.gz`` and
``out_dir/synthetic_4rank/truth.json``. The output is byte-identical on every run: all times are
integers (ns) drawn from seeded generators, nothing reads the clock, gzip headers carry mtime 0,
and truth.json is written with sorted keys.

How the job is built (all times absolute int64 ns, converted to Kineto's relative float
microseconds only when written):

* one DDP training job, 4 ranks, one H100 each (rank r on device r), 3 profiled steps
  (``ProfilerStep#2..#4``); a 3-block MLP under autocast with a GradScaler and fused AdamW;
* the GPU timeline of stream 7 is laid out with a cursor: each activity either starts where the
  previous one ended (the CPU is ahead, the kernel was queued) or after a *planted* gap whose
  cause is arranged on the CPU side (see ``_launch``); assertions check that no unplanned gap can
  appear and that each planted gap meets the definition of its cause in docs/metrics.md;
* communication: two DDP buckets per step, ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` on
  stream 20. Bucket 1 runs under backward compute (fully overlapped), bucket 2 after the last
  backward kernel (fully exposed). Rank 3 is the straggler: its DataLoader is slower, so it
  reaches each allreduce exactly ``STRAGGLER_LATE_NS`` after the latest of the other ranks, and
  the other ranks' NCCL kernels wait for it (they run longer);
* rank 2 was captured with a different ``baseTimeNanoseconds`` (``BASE_OFFSET_NS``); absolute
  times (base + ts) agree across ranks.

The truth is accounted from the construction (durations and gaps as placed), not by analysing the
written events; an independent interval union is only used as an internal assertion.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import random
import sys
import zlib
from dataclasses import dataclass, field
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import kineto_writer as kw  # noqa: E402  (the Kineto JSON every generator writes)

SEED = 20251122
WORLD_SIZE = 4
STEPS = (2, 3, 4)
STRAGGLER = 3
STRAGGLER_LATE_NS = 150_000
UNATTRIBUTED_STEP = 3
COMPUTE_STREAM = 7
COMM_STREAM = 20
NUM_SMS = 132

BASE0_NS = 1_762_000_000_000_000_000  # a whole second, as Kineto writes it
BASE_OFFSET_NS = {0: 0, 1: 0, 2: 3_600_000_000_000, 3: 0}  # rank 2's profiler base is 1 h later
TRACE_START_NS = BASE0_NS + 5_000_123_400_000_000  # ts ~ 5.0e12 us > 2**42 us: floats lose ns
PIDS = {0: 3171204, 1: 3171205, 2: 3171206, 3: 3171207}
AUTOGRAD_TID_OFFSET = 412
CORR0 = {0: 18_200, 1: 18_297, 2: 18_394, 3: 18_491}

LAUNCH_MIN_LEAD_NS = 1_000  # a queued activity's launch call ends at least this long before it starts
DL_MIN_NS = 600_000  # shortest DataLoader fetch

SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize")
CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaDeviceSynchronize": 165,
    "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 147,
}

# ----------------------------------------------------------------------------------------------
# Kernels: name, base duration (ns), grid, block, registers per thread, shared memory, occupancy %

_EW = "void at::native::vectorized_elementwise_kernel<4, "
KERNELS: dict[str, tuple[str, int, tuple[int, int, int], tuple[int, int, int], int, int, int]] = {
    "gemm_in": (
        "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        9_300, (128, 4, 1), (128, 1, 1), 168, 98_304, 6),
    "ln_fwd": (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float>(int, float, c10"
        "::Half const*, c10::Half const*, c10::Half const*, float*, float*, c10::Half*)",
        13_400, (16384, 1, 1), (128, 1, 1), 30, 0, 100),
    "gemm1": (
        "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        71_200, (16, 128, 1), (128, 1, 1), 168, 196_608, 6),
    "gelu": (
        _EW + "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}"
              "::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::Half)#1}, std::array<char*, "
              "2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
              "::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::Half)#1}, std"
              "::array<char*, 2ul>)",
        21_800, (65536, 1, 1), (128, 1, 1), 22, 0, 100),
    "gemm2": (
        "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize256x128x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        68_900, (4, 64, 1), (256, 1, 1), 168, 213_504, 12),
    "add": (
        _EW + "at::native::CUDAFunctor_add<c10::Half>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10"
              "::Half>, std::array<char*, 3ul>)",
        11_600, (16384, 1, 1), (128, 1, 1), 24, 0, 100),
    "gemm_head": (
        "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        54_300, (16, 128, 1), (256, 1, 1), 168, 221_184, 12),
    "log_softmax": (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::Half, float, float, at::native"
        "::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, c10::Half const*, int)",
        17_900, (16384, 1, 1), (512, 1, 1), 40, 64, 94),
    "nll": (
        "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, "
        "float*, float const*, long const*, float const*, bool, long, long, long, long)",
        8_700, (1, 1, 1), (32, 1, 1), 32, 2_048, 0),
    "scale_mul": (
        _EW + "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, std"
              "::array<char*, 2ul> >(int, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal"
              "::MulFunctor<float> >, std::array<char*, 2ul>)",
        2_100, (1, 1, 1), (128, 1, 1), 16, 0, 0),
    "fill": (
        _EW + "at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std"
              "::array<char*, 1ul>)",
        1_700, (1, 1, 1), (128, 1, 1), 16, 0, 0),
    "mul_bwd": (
        _EW + "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, std"
              "::array<char*, 2ul> >(int, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal"
              "::MulFunctor<float> >, std::array<char*, 2ul>)",
        2_000, (1, 1, 1), (128, 1, 1), 16, 0, 0),
    "nll_bwd": (
        "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(float*, float "
        "const*, long const*, float const*, float const*, bool, int, int, long, long)",
        7_800, (1, 1, 1), (256, 1, 1), 28, 0, 0),
    "log_softmax_bwd": (
        "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<8, c10::Half, float, float, at::native"
        "::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(c10::Half*, float const*, float const*, long)",
        16_500, (16384, 1, 1), (512, 1, 1), 38, 64, 94),
    "gemm_dgrad": (
        "sm90_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        66_500, (16, 128, 1), (128, 1, 1), 168, 196_608, 6),
    "gemm_wgrad": (
        "sm90_xmma_gemm_f16f16_f16f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        63_800, (16, 4, 1), (128, 1, 1), 168, 196_608, 6),
    "bias_sum": (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::Half, at::native::func_wrapper_t<c10"
        "::Half, at::native::sum_functor<c10::Half, float, c10::Half>::operator()(at::TensorIterator&)"
        "::{lambda(float, float)#1}>, unsigned int, c10::Half, 4, 4> >(at::native::ReduceOp<c10::Half, at::native"
        "::func_wrapper_t<c10::Half, at::native::sum_functor<c10::Half, float, c10::Half>::operator()(at"
        "::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, c10::Half, 4, 4>)",
        9_900, (128, 16, 1), (32, 16, 1), 32, 4_112, 100),
    "gelu_bwd": (
        _EW + "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}"
              "::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::Half, c10::Half)#1}, std"
              "::array<char*, 3ul> >(int, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native"
              "::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::Half, "
              "c10::Half)#1}, std::array<char*, 3ul>)",
        24_300, (65536, 1, 1), (128, 1, 1), 26, 0, 100),
    "ln_bwd_input": (
        "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::Half, float>(c10"
        "::Half const*, c10::Half const*, float const*, float const*, c10::Half const*, c10::Half*, int)",
        15_900, (16384, 1, 1), (128, 1, 1), 40, 0, 100),
    "ln_bwd_gamma": (
        "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<c10::Half, float>(long, long, c10"
        "::Half const*, c10::Half const*, float const*, float const*, c10::Half*, c10::Half*)",
        12_300, (16, 1, 1), (32, 32, 1), 64, 8_448, 50),
    "unscale": (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)"
        "::TensorListMetadata<1>, at::native::(anonymous namespace)::UnaryOpFunctor<float, 1, 1, 0>, at::native"
        "::(anonymous namespace)::_amp_non_finite_check_and_unscale_cuda_(at::TensorList, at::Tensor&, at::Tensor "
        "const&)::{lambda()#1}::operator()() const::{lambda()#1}::operator()() const::{lambda(float)#1}>(at::native"
        "::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::UnaryOpFunctor<float, "
        "1, 1, 0>, at::native::(anonymous namespace)::_amp_non_finite_check_and_unscale_cuda_(at::TensorList, at"
        "::Tensor&, at::Tensor const&)::{lambda()#1}::operator()() const::{lambda()#1}::operator()() const"
        "::{lambda(float)#1})",
        38_600, (320, 1, 1), (512, 1, 1), 32, 0, 100),
    "adam": (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)"
        "::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
        "(at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, bool, float*, float*>(at"
        "::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)"
        "::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, double, double, double, "
        "double, bool, float*, float*)",
        108_000, (320, 1, 1), (512, 1, 1), 72, 0, 50),
    "update_scale": (
        "void at::native::amp_update_scale_cuda_kernel(float*, int*, float const*, double, double, int)",
        2_600, (1, 1, 1), (1, 1, 1), 16, 0, 0),
}
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
#: (nelems, duration once every rank has arrived)
BUCKETS = {1: (4_201_984, 212_000), 2: (4_234_752, 318_000)}

MEMCPY_HTOD = "Memcpy HtoD (Pinned -> Device)"
MEMCPY_DTOH = "Memcpy DtoH (Device -> Pinned)"
MEMSET = "Memset (Device)"

DEVICE_PROPERTIES = kw.H100
assert DEVICE_PROPERTIES["numSms"] == NUM_SMS


def _crc(*parts: Any) -> int:
    return zlib.crc32(":".join(str(p) for p in parts).encode())


def kernel_dur(step: int, key: str, instance: str) -> int:
    """Duration of one kernel instance: the same on every rank (same model, same GPUs)."""
    base = KERNELS[key][1]
    return base * (970 + _crc(SEED, step, key, instance) % 61) // 1000


def copy_dur(nbytes: int, gbps: int = 49) -> int:
    return 1_400 + nbytes // gbps


fmt_us = kw.us  # Kineto's timestamp text: microseconds with exactly three decimals


# ----------------------------------------------------------------------------------------------
# The objects the builder places


@dataclass(eq=False)
class Op:
    """A CPU-side range: cpu_op, user_annotation or python_function."""

    cat: str
    name: str
    tid: int
    start: int
    end: int | None = None
    args: list[tuple[str, Any]] = field(default_factory=list)
    ext: int | None = None

    def covers(self, a: int, b: int) -> bool:
        return self.start <= a and self.end >= b


@dataclass(eq=False)
class Api:
    """A CUDA runtime call."""

    name: str
    tid: int
    start: int
    end: int
    owner: Op | None
    corr: int | None = None
    gpu: list[Gpu] = field(default_factory=list)


@dataclass(eq=False)
class Gpu:
    """A GPU activity: kernel, memcpy or memset."""

    cat: str  # kernel | gpu_memcpy | gpu_memset
    name: str
    stream: int
    start: int
    dur: int
    api: Api | None
    cls: str  # compute | communication | memory
    step: int
    args: list[tuple[str, Any]] = field(default_factory=list)
    key: str = ""
    phantom_corr: Api | None = None  # a launch record that was lost: gives the correlation only
    bucket: int = 0  # DDP bucket of a NCCL kernel

    @property
    def end(self) -> int:
        return self.start + self.dur


@dataclass
class Gap:
    start: int
    end: int
    cause: str
    ended_by: Gpu
    step: int | None
    expect_context: str | None = None
    #: a host-launched gap that starts while the launching thread sits in a synchronize call (the
    #: sync drained the queue: ``.item()``): its cause is sync_bound (docs/metrics.md, idle gaps rule 0)
    drained: bool = False


@dataclass
class StepResult:
    step: int
    g0: int
    a1: int
    a2: int
    ps: Op | None = None
    items: list[Gpu] = field(default_factory=list)  # stream-7 activity, in order
    comm: list[Gpu] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    cpu_end: int = 0


class RankBuilder:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.pid = PIDS[rank]
        self.main = self.pid
        self.bwd = self.pid + AUTOGRAD_TID_OFFSET
        self.device = rank
        self.base = BASE0_NS + BASE_OFFSET_NS[rank]
        self.ops: list[Op] = []
        self.apis: list[Api] = []
        self.gpus: list[Gpu] = []
        self.gpu_annotations: list[tuple[str, int, int, Op]] = []
        self.created: list[Op | Api] = []
        self.cur: dict[int, int] = {self.main: 0, self.bwd: 0}
        self.stack: dict[int, list[Op]] = {self.main: [], self.bwd: []}
        self.g = 0  # stream-7 cursor: end of the last placed activity
        self.rng = random.Random(0)
        self.step = 0
        self.result: StepResult | None = None
        self.steps: list[StepResult] = []
        self.inter_step_gaps: list[Gap] = []
        self.trace_start = TRACE_START_NS + rank * 23_417
        self.trace_end = 0
        self.root_frames: list[Op] = []

    # -- CPU side ------------------------------------------------------------------------------
    def r(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def open(self, tid: int, cat: str, name: str, args: list[tuple[str, Any]] | None = None,
             pre: tuple[int, int] = (800, 2_400), at: int | None = None) -> Op:
        start = self.cur[tid] if at is None else at
        op = Op(cat, name, tid, start, None, list(args or []))
        self.ops.append(op)
        self.created.append(op)
        self.stack[tid].append(op)
        self.cur[tid] = start + self.r(*pre)
        return op

    def close(self, tid: int, post: tuple[int, int] = (400, 1_400), at: int | None = None) -> Op:
        op = self.stack[tid].pop()
        end = self.cur[tid] if at is None else at
        op.end = end
        self.cur[tid] = end + self.r(*post)
        return op

    def work(self, tid: int, ns: int) -> None:
        self.cur[tid] += ns

    def api(self, tid: int, name: str, dur: int) -> Api:
        owner = next((o for o in reversed(self.stack[tid]) if o.cat in ("cpu_op", "user_annotation")), None)
        start = self.cur[tid]
        a = Api(name, tid, start, start + dur, owner)
        self.apis.append(a)
        self.created.append(a)
        self.cur[tid] = a.end + self.r(300, 900)
        return a

    def shift_since(self, mark: int, delta: int, tid: int) -> None:
        for obj in self.created[mark:]:
            obj.start += delta
            obj.end += delta
        self.cur[tid] += delta

    # -- GPU side ------------------------------------------------------------------------------
    def _gpu(self, cat: str, name: str, stream: int, start: int, dur: int, api: Api | None, cls: str,
             args: list[tuple[str, Any]], key: str = "") -> Gpu:
        g = Gpu(cat, name, stream, start, dur, api, cls, self.step, args, key)
        if api is not None:
            api.gpu.append(g)
        self.gpus.append(g)
        if stream == COMPUTE_STREAM:
            self.result.items.append(g)
        else:
            self.result.comm.append(g)
        return g

    def _start_for(self, api: Api, mode: str, gap: int = 0, at: int | None = None,
                   context: str | None = None) -> tuple[int, Gap | None]:
        """Where a stream-7 activity starts, given how its gap (if any) is caused.

        queue          -- the launch ended well before the stream was free: starts at the cursor.
        launch_latency -- launched before the GPU went idle, yet starts ``gap`` after it.
        sync           -- as launch_latency, while the CPU sits in a synchronize (checked later).
        host           -- launched after the GPU went idle: starts a few us after the call returns.
        at             -- waits for an event at time ``at`` (cross-stream): starts then.
        """
        gs = self.g
        if mode == "queue":
            assert api.end + LAUNCH_MIN_LEAD_NS <= gs, (self.rank, self.step, api.name, api.end, gs)
            return gs, None
        if mode in ("launch_latency", "sync"):
            assert api.start < gs and api.end + LAUNCH_MIN_LEAD_NS <= gs, (self.rank, self.step, mode)
            start = gs + gap
            cause = "launch_latency" if mode == "launch_latency" else "sync_bound"
            return start, Gap(gs, start, cause, None, self.step, context)  # type: ignore[arg-type]
        if mode == "host":
            assert api.start >= gs, (self.rank, self.step, "host-bound launch before the GPU went idle")
            start = api.end + self.r(2_400, 3_600)
            return start, Gap(gs, start, "host_bound", None, self.step, context)  # type: ignore[arg-type]
        if mode == "at":
            assert at is not None and at >= gs and api.end + LAUNCH_MIN_LEAD_NS <= at
            return at, None
        raise ValueError(mode)

    def _place7(self, cat: str, name: str, dur: int, api: Api | None, cls: str, args, mode: str,
                gap: int = 0, at: int | None = None, context: str | None = None, key: str = "") -> Gpu:
        if api is None:  # launch record lost: the gap before it cannot be attributed
            start, gp = self.g + gap, (Gap(self.g, self.g + gap, "unattributed", None, self.step) if gap else None)
        else:
            start, gp = self._start_for(api, mode, gap, at, context)
        g = self._gpu(cat, name, COMPUTE_STREAM, start, dur, api, cls, args, key)
        if gp is not None:
            gp.ended_by = g
            self.result.gaps.append(gp)
        self.g = g.end
        return g

    def kernel_args(self, key: str, stream: int) -> list[tuple[str, Any]]:
        nccl = (NCCL_KERNEL, 0, (16, 1, 1), (640, 1, 1), 96, 17_440, 0)
        _, _, grid, block, regs, smem, occ = KERNELS.get(key, nccl)
        blocks = grid[0] * grid[1] * grid[2]
        threads = block[0] * block[1] * block[2]
        bps = blocks / NUM_SMS
        wps = bps * ((threads + 31) // 32)
        return [
            ("External id", "EXT"), ("queued", 0), ("device", self.device), ("context", 1),
            ("stream", stream), ("correlation", "CORR"), ("registers per thread", regs),
            ("shared memory", smem), ("blocks per SM", kw.Raw(f"{bps:.6f}")), ("warps per SM", kw.Raw(f"{wps:.6f}")),
            ("grid", list(grid)), ("block", list(block)), ("est. achieved occupancy %", occ),
        ]

    def launch_kernel(self, tid: int, key: str, instance: str, mode: str = "queue", gap: int = 0,
                      at: int | None = None, context: str | None = None) -> Gpu:
        a = self.api(tid, "cudaLaunchKernel", self.r(4_200, 7_600))
        dur = kernel_dur(self.step, key, instance)
        return self._place7("kernel", KERNELS[key][0], dur, a, "compute", self.kernel_args(key, COMPUTE_STREAM),
                            mode, gap, at, context, key)

    def copy_args(self, nbytes: int, dur: int) -> list[tuple[str, Any]]:
        return [("External id", "EXT"), ("device", self.device), ("context", 1), ("stream", COMPUTE_STREAM),
                ("correlation", "CORR"), ("bytes", nbytes), ("memory bandwidth (GB/s)", kw.Raw(repr(nbytes / dur)))]

    def launch_copy(self, tid: int, name: str, nbytes: int, mode: str = "queue", gap: int = 0,
                    context: str | None = None, api: Api | None = None) -> Gpu:
        a = api or self.api(tid, "cudaMemcpyAsync", self.r(9_000, 13_500))
        dur = copy_dur(nbytes)
        return self._place7("gpu_memcpy", name, dur, a, "memory", self.copy_args(nbytes, dur), mode, gap, None, context)

    def op_chain(self, tid: int, names: list[tuple[str, list]], body) -> Any:
        """Open nested cpu_ops, run ``body()`` at the innermost level, close them."""
        for name, args in names:
            self.open(tid, "cpu_op", name, args)
        out = body()
        for _ in names:
            self.close(tid)
        return out


# ----------------------------------------------------------------------------------------------
# Shapes shown in the cpu_op args (record_shapes=True)

def shapes(dims: list, types: list, strides: list | None = None, concrete: list | None = None) -> list:
    n = len(dims)
    return [
        ("Record function id", 0),
        ("Concrete Inputs", concrete if concrete is not None else [""] * n),
        ("Input type", types),
        ("Input Strides", strides if strides is not None else [[] for _ in range(n)]),
        ("Input Dims", dims),
    ]


H = "c10::Half"
TOK, HID, FFN, VOCAB, FEAT = 16384, 512, 2048, 4096, 128
LINEAR_ARGS = {
    "gemm_in": shapes([[64, 256, FEAT], [HID, FEAT], [HID]], [H, "float", "float"]),
    "gemm1": shapes([[64, 256, HID], [FFN, HID], [FFN]], [H, "float", "float"]),
    "gemm2": shapes([[64, 256, FFN], [HID, FFN], [HID]], [H, "float", "float"]),
    "gemm_head": shapes([[64, 256, HID], [VOCAB, HID], [VOCAB]], [H, "float", "float"]),
}
_ADDMM_TYPES = [H, H, H, "Scalar", "Scalar"]
_ADDMM_CONCRETE = ["", "", "", "1", "1"]
ADDMM_ARGS = {
    "gemm_in": shapes([[HID], [TOK, FEAT], [FEAT, HID], [], []], _ADDMM_TYPES, concrete=_ADDMM_CONCRETE),
    "gemm1": shapes([[FFN], [TOK, HID], [HID, FFN], [], []], _ADDMM_TYPES, concrete=_ADDMM_CONCRETE),
    "gemm2": shapes([[HID], [TOK, FFN], [FFN, HID], [], []], _ADDMM_TYPES, concrete=_ADDMM_CONCRETE),
    "gemm_head": shapes([[VOCAB], [TOK, HID], [HID, VOCAB], [], []], _ADDMM_TYPES, concrete=_ADDMM_CONCRETE),
}
NO_SHAPES = [("Record function id", 0)]


def collective_args(nelems: int) -> list[tuple[str, Any]]:
    return [
        ("Collective name", "allreduce"), ("In msg nelems", nelems), ("Out msg nelems", nelems),
        ("Group size", WORLD_SIZE), ("dtype", "Float"), ("In split size", "[]"), ("Out split size", "[]"),
        ("Process Group Name", "0"), ("Process Group Description", "default_pg"),
        ("Process Group Ranks", "[0, 1, 2, 3]"),
    ]


# ----------------------------------------------------------------------------------------------
# One training step


def _linear(b: RankBuilder, key: str, inst: str, mode: str = "queue", gap: int = 0) -> Gpu:
    t = b.main
    b.open(t, "cpu_op", "aten::linear", LINEAR_ARGS[key])
    b.open(t, "cpu_op", "aten::addmm", ADDMM_ARGS[key])
    g = b.launch_kernel(t, key, inst, mode, gap)
    b.close(t)
    b.close(t)
    return g


def _simple(b: RankBuilder, tid: int, names: list[str], key: str, inst: str, mode: str = "queue",
            args: list | None = None) -> Gpu:
    for i, n in enumerate(names):
        b.open(tid, "cpu_op", n, args if (args is not None and i == 0) else NO_SHAPES)
    g = b.launch_kernel(tid, key, inst, mode)
    for _ in names:
        b.close(tid)
    return g


def _evaluate(b: RankBuilder, fn: str, seq: int, kernels: list[tuple[str, str, str]]) -> None:
    """autograd::engine::evaluate_function: <fn> on the autograd thread, launching ``kernels``."""
    t = b.bwd
    b.open(t, "cpu_op", f"autograd::engine::evaluate_function: {fn}",
           [("Record function id", 0), ("Sequence number", seq), ("Fwd thread id", 1)], pre=(1_000, 2_000))
    b.open(t, "cpu_op", fn, [("Record function id", 0), ("Sequence number", seq), ("Fwd thread id", 1)],
           pre=(600, 1_200))
    for aten, key, inst in kernels:
        b.open(t, "cpu_op", aten, NO_SHAPES, pre=(900, 1_800))
        b.launch_kernel(t, key, inst)
        b.close(t, post=(300, 800))
    b.close(t, post=(300, 700))
    b.close(t, post=(500, 1_200))


def _bucket(b: RankBuilder, bucket: int, arrival: int, end: int | None) -> Gpu:
    """DDP allreduce of one gradient bucket, launched on the autograd thread."""
    t = b.bwd
    nelems, _ = BUCKETS[bucket]
    b.open(t, "user_annotation", "nccl:all_reduce", NO_SHAPES, pre=(1_500, 2_500))
    b.open(t, "cpu_op", "record_param_comms",
           [("Record function id", 0), ("Rank", b.rank), ("Global rank start", 0), ("Global rank stride", 1)]
           + collective_args(nelems), pre=(2_000, 3_500))
    b.api(t, "cudaEventRecord", b.r(2_000, 3_000))
    b.api(t, "cudaStreamWaitEvent", b.r(1_500, 2_500))
    a = b.api(t, "cudaLaunchKernel", b.r(6_000, 9_000))
    b.close(t)
    b.close(t)
    assert a.end + LAUNCH_MIN_LEAD_NS <= arrival, (b.rank, b.step, "nccl launch too late")
    dur = (end - arrival) if end is not None else 1
    g = b._gpu("kernel", NCCL_KERNEL, COMM_STREAM, arrival, dur, a, "communication",
               b.kernel_args("nccl", COMM_STREAM) + collective_args(nelems), "nccl")
    g.bucket = bucket
    return g


def build_step(b: RankBuilder, step: int, g0: int, e1: int | None = None, e2: int | None = None,
               ps_start: int | None = None) -> StepResult:
    """Lay out one step whose first GPU activity starts at ``g0``.

    With ``e1``/``e2`` unset this is the measuring pass: it stops after the backward pass and only
    the returned ``a1``/``a2`` (bucket arrivals) matter. The same generators give the same draws in
    both passes because everything before the arrivals is relative to ``g0``.
    """
    b.step = step
    b.rng = random.Random(SEED * 1_000 + b.rank * 100 + step)
    res = StepResult(step, g0, 0, 0)
    b.result = res
    t = b.main
    b.g = g0

    # ---- input copies: the first activity of the step, issued by the data wrapper (host-bound) ----
    mark = len(b.created)
    b.cur[t] = 0
    b.open(t, "cpu_op", "aten::to", shapes([[64, 256, FEAT], [], [], [], [], []],
                                          [H, "ScalarType", "", "", "Scalar", ""],
                                          concrete=["", "5", "", "", "True", ""]))
    b.open(t, "cpu_op", "aten::_to_copy", NO_SHAPES)
    b.open(t, "cpu_op", "aten::copy_", NO_SHAPES)
    a_in = b.api(t, "cudaMemcpyAsync", b.r(9_000, 13_500))
    b.close(t)
    b.close(t)
    b.close(t)
    lam = b.r(2_400, 3_600)
    b.shift_since(mark, g0 - lam - a_in.end, t)
    chain_start = b.created[mark].start
    in_bytes = 64 * 256 * FEAT * 2
    g_in = b._gpu("gpu_memcpy", MEMCPY_HTOD, COMPUTE_STREAM, g0, copy_dur(in_bytes), a_in, "memory",
                  b.copy_args(in_bytes, copy_dur(in_bytes)))
    b.g = g_in.end
    # labels
    b.open(t, "cpu_op", "aten::to", shapes([[64, 256], [], [], [], [], []],
                                          ["long int", "ScalarType", "", "", "Scalar", ""],
                                          concrete=["", "4", "", "", "True", ""]))
    b.open(t, "cpu_op", "aten::_to_copy", NO_SHAPES)
    b.open(t, "cpu_op", "aten::copy_", NO_SHAPES)
    b.launch_copy(t, MEMCPY_HTOD, 64 * 256 * 8)
    b.close(t)
    b.close(t)
    wrapper_end = b.close(t).end + b.r(3_500, 5_000)  # the wrapper returns after the copy has started
    b.cur[t] = wrapper_end
    if step == UNATTRIBUTED_STEP:
        # a memset whose cudaMemsetAsync record was dropped: correlation without a launch
        phantom = Api("cudaMemsetAsync", t, b.g - 30_000, b.g - 25_000, None)
        m = b._place7("gpu_memset", MEMSET, 2_400, None, "memory",
                      [("External id", 0), ("device", b.device), ("context", 1), ("stream", COMPUTE_STREAM),
                       ("correlation", "CORR"), ("bytes", 131072),
                       ("memory bandwidth (GB/s)", kw.Raw(repr(131072 / 2_400)))], "queue", gap=7_000)
        m.phantom_corr = phantom

    # ---- train_step -----------------------------------------------------------------------------
    b.cur[t] += b.r(1_500, 3_000)
    b.open(t, "python_function", "train.py(74): train_step")
    b.open(t, "user_annotation", "Optimizer.zero_grad#AdamW.zero_grad", NO_SHAPES)
    b.work(t, b.r(4_000, 7_000))
    b.close(t)
    b.open(t, "user_annotation", "DistributedDataParallel.forward", NO_SHAPES)
    b.open(t, "python_function", "model.py(88): forward")
    _linear(b, "gemm_in", "in")
    for layer in range(3):
        _simple(b, t, ["aten::layer_norm", "aten::native_layer_norm"], "ln_fwd", f"ln{layer}",
                args=shapes([[64, 256, HID], [], [HID], [HID], []], [H, "", "float", "float", "Scalar"]))
        if layer == 0:
            # launch latency: gemm1 of block 0 was queued long before, yet starts late
            _linear(b, "gemm1", f"l{layer}", mode="launch_latency", gap=b.r(9_000, 16_000))
        else:
            _linear(b, "gemm1", f"l{layer}")
        _simple(b, t, ["aten::gelu"], "gelu", f"l{layer}",
                args=shapes([[64, 256, FFN], []], [H, ""], concrete=["", "none"]))
        _linear(b, "gemm2", f"l{layer}")
        _simple(b, t, ["aten::add"], "add", f"l{layer}",
                args=shapes([[64, 256, HID], [64, 256, HID], []], [H, H, "Scalar"], concrete=["", "", "1"]))
        if layer == 0:
            # host-bound: Python builds a mask on the CPU, then copies it; the GPU drains meanwhile
            b.open(t, "python_function", "model.py(61): _build_loss_mask")
            assert b.stack[t][-1].start < b.g, "GPU must still be busy when the mask building starts"
            b.open(t, "cpu_op", "aten::ones", shapes([[], [], [], [], []], ["ScalarList", "Scalar", "", "", ""]))
            b.work(t, b.r(6_000, 9_000))
            b.close(t)
            b.open(t, "cpu_op", "aten::tril", shapes([[64, 256, 256], []], ["bool", "Scalar"], concrete=["", "0"]))
            b.work(t, b.r(40_000, 60_000))
            b.close(t)
            b.work(t, b.r(230_000, 320_000))  # pure Python
            b.open(t, "cpu_op", "aten::to", shapes([[64, 256, 256], [], [], [], [], []],
                                                  ["bool", "", "", "", "Scalar", ""],
                                                  concrete=["", "", "", "", "True", ""]))
            b.open(t, "cpu_op", "aten::_to_copy", NO_SHAPES)
            b.open(t, "cpu_op", "aten::copy_", NO_SHAPES)
            b.launch_copy(t, MEMCPY_HTOD, 64 * 256 * 256, mode="host", context="model.py(61): _build_loss_mask")
            b.close(t)
            b.close(t)
            b.close(t)
            b.work(t, b.r(3_500, 5_000))
            b.close(t)
    _linear(b, "gemm_head", "head")
    b.close(t)  # model.forward
    b.close(t)  # DDP.forward
    b.open(t, "cpu_op", "aten::cross_entropy_loss", NO_SHAPES)
    _simple(b, t, ["aten::log_softmax", "aten::_log_softmax"], "log_softmax", "fwd",
            args=shapes([[TOK, VOCAB], [], []], [H, "Scalar", ""], concrete=["", "1", ""]))
    _simple(b, t, ["aten::nll_loss_nd", "aten::nll_loss", "aten::nll_loss_forward"], "nll", "fwd",
            args=shapes([[TOK, VOCAB], [TOK], [], [], []], ["float", "long int", "", "Scalar", "Scalar"]))
    b.close(t)
    _simple(b, t, ["aten::mul"], "scale_mul", "scale", args=shapes([[], []], ["float", "float"]))

    # ---- backward -------------------------------------------------------------------------------
    b.open(t, "python_function", "torch/_tensor.py(648): backward")
    b.open(t, "python_function", "torch/autograd/__init__.py(353): backward")
    _simple(b, t, ["aten::ones_like", "aten::fill_"], "fill", "grad_seed",
            args=shapes([[], [], [], [], [], []], ["float", "", "", "", "", ""]))
    bt = b.bwd
    b.cur[bt] = b.cur[t] + b.r(4_000, 7_000)
    seq = 900 + step * 60
    _evaluate(b, "MulBackward0", seq, [("aten::mul", "mul_bwd", "scale")])
    # NllLossBackward0 zeroes grad_input with a memset, then runs its kernel
    b.open(bt, "cpu_op", "autograd::engine::evaluate_function: NllLossBackward0",
           [("Record function id", 0), ("Sequence number", seq - 1), ("Fwd thread id", 1)])
    b.open(bt, "cpu_op", "NllLossBackward0",
           [("Record function id", 0), ("Sequence number", seq - 1), ("Fwd thread id", 1)])
    b.open(bt, "cpu_op", "aten::nll_loss_backward", NO_SHAPES)
    b.open(bt, "cpu_op", "aten::zero_", NO_SHAPES)
    ams = b.api(bt, "cudaMemsetAsync", b.r(4_500, 6_500))
    memset = b._place7("gpu_memset", MEMSET, 1_900,
                       ams, "memory", [("External id", "EXT"), ("device", b.device), ("context", 1),
                                       ("stream", COMPUTE_STREAM), ("correlation", "CORR"), ("bytes", 262144),
                                       ("memory bandwidth (GB/s)", kw.Raw(repr(262144 / 1_900)))], "queue")
    b.close(bt)
    b.launch_kernel(bt, "nll_bwd", "bwd")
    b.close(bt)
    b.close(bt)
    b.close(bt)
    _evaluate(b, "LogSoftmaxBackward0", seq - 2, [("aten::_log_softmax_backward_data", "log_softmax_bwd", "bwd")])
    _evaluate(b, "AddmmBackward0", seq - 3, [("aten::mm", "gemm_dgrad", "head"), ("aten::mm", "gemm_wgrad", "head"),
                                             ("aten::sum", "bias_sum", "head")])
    for layer in (2, 1, 0):
        s0 = seq - 10 - (2 - layer) * 5
        _evaluate(b, "AddmmBackward0", s0, [("aten::mm", "gemm_dgrad", f"l{layer}.2"),
                                            ("aten::mm", "gemm_wgrad", f"l{layer}.2"),
                                            ("aten::sum", "bias_sum", f"l{layer}.2")])
        _evaluate(b, "GeluBackward0", s0 - 1, [("aten::gelu_backward", "gelu_bwd", f"l{layer}")])
        _evaluate(b, "AddmmBackward0", s0 - 2, [("aten::mm", "gemm_dgrad", f"l{layer}.1"),
                                                ("aten::mm", "gemm_wgrad", f"l{layer}.1"),
                                                ("aten::sum", "bias_sum", f"l{layer}.1")])
        _evaluate(b, "NativeLayerNormBackward0", s0 - 3,
                  [("aten::native_layer_norm_backward", "ln_bwd_input", f"l{layer}"),
                   ("aten::native_layer_norm_backward", "ln_bwd_gamma", f"l{layer}")])
        if layer == 2:
            res.a1 = b.g
            assert memset.end <= res.a1
            _bucket(b, 1, res.a1, e1)
    _evaluate(b, "AddmmBackward0", seq - 30, [("aten::mm", "gemm_wgrad", "in"), ("aten::sum", "bias_sum", "in")])
    res.a2 = b.g
    _bucket(b, 2, res.a2, e2)
    b.api(bt, "cudaStreamWaitEvent", b.r(1_500, 2_500))  # DDP finalize: stream 7 waits for the allreduce
    bwd_done = b.cur[bt]
    b.cur[t] = max(b.cur[t], bwd_done + b.r(3_000, 6_000))
    b.close(t)
    b.close(t)
    if e1 is None:
        return res
    assert e1 <= res.a2, "bucket 1 must end under backward compute"

    # ---- GradScaler.step: unscale (waits for the allreduce), found_inf.item(), fused AdamW ------
    b.open(t, "python_function", "torch/amp/grad_scaler.py(451): step")
    b.open(t, "python_function", "torch/amp/grad_scaler.py(338): unscale_")
    b.open(t, "cpu_op", "aten::_amp_foreach_non_finite_check_and_unscale_", NO_SHAPES)
    b.launch_kernel(t, "unscale", "unscale", mode="at", at=e2)
    b.close(t)
    b.close(t)
    b.open(t, "python_function", "torch/amp/grad_scaler.py(355): _maybe_opt_step")
    b.open(t, "cpu_op", "aten::item", shapes([[]], ["float"]))
    b.open(t, "cpu_op", "aten::_local_scalar_dense", shapes([[]], ["float"]))
    a_dtoh = b.api(t, "cudaMemcpyAsync", b.r(9_000, 12_000))
    dtoh = b.launch_copy(t, MEMCPY_DTOH, 4, mode="sync", gap=b.r(14_000, 26_000), api=a_dtoh,
                         context="cudaStreamSynchronize")
    sync_start = b.cur[t]
    assert sync_start <= res.gaps[-1].start, "the synchronize must already be waiting when the GPU goes idle"
    wake = b.r(3_000, 5_000)
    sync = b.api(t, "cudaStreamSynchronize", dtoh.end + wake - sync_start)
    b.close(t)
    b.close(t)
    b.work(t, b.r(6_000, 14_000))
    b.open(t, "python_function", "torch/optim/optimizer.py(493): wrapper")
    b.open(t, "user_annotation", "Optimizer.step#AdamW.step", NO_SHAPES)
    b.open(t, "cpu_op", "aten::_fused_adamw_", NO_SHAPES, pre=(6_000, 9_000))
    b.launch_kernel(t, "adam", "chunk0", mode="host", context="torch/amp/grad_scaler.py(355): _maybe_opt_step")
    b.launch_kernel(t, "adam", "chunk1")
    b.close(t)
    b.close(t)
    b.close(t)
    b.close(t)  # _maybe_opt_step
    b.close(t)  # GradScaler.step
    b.open(t, "python_function", "torch/amp/grad_scaler.py(640): update")
    _simple(b, t, ["aten::_amp_update_scale_"], "update_scale", "update")
    b.close(t)
    train_step = b.close(t)
    assert sync.end > dtoh.end

    # ---- the step's CPU range, the data wrapper and DataLoader before the first copy ---------------
    pre = random.Random(SEED * 1_000 + b.rank * 100 + step + 50)
    assert ps_start is not None
    ps = Op("user_annotation", f"ProfilerStep#{step}", t, ps_start, None, list(NO_SHAPES))
    b.ops.append(ps)
    res.ps = ps
    w0 = ps_start + pre.randint(3_000, 6_000)
    wrapper = Op("python_function", "data.py(41): __next__", t, w0, wrapper_end)
    dl_start = w0 + pre.randint(2_000, 4_000)
    dl_end = chain_start - pre.randint(1_500, 3_000)
    assert dl_end - dl_start >= DL_MIN_NS, (b.rank, step, dl_end - dl_start)
    dl = Op("python_function", "torch/utils/data/dataloader.py(733): __next__", t, dl_start, dl_end)
    it = Op("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t,
            dl_start + pre.randint(1_000, 2_000), dl_end - pre.randint(500, 1_000), list(NO_SHAPES))
    b.ops += [wrapper, dl, it]
    boundary = train_step.end + pre.randint(12_000, 18_000)
    ps.end = boundary
    b.ops.append(Op("python_function", "torch/profiler/profiler.py(797): step", t,
                    train_step.end + pre.randint(2_000, 4_000), boundary + pre.randint(1_000, 2_000)))
    res.cpu_end = boundary
    assert train_step.start > wrapper_end
    last = max(g.end for g in res.items)
    b.gpu_annotations.append((f"ProfilerStep#{step}", g0, last, ps))
    return res


# ----------------------------------------------------------------------------------------------
# The whole job


def build_job() -> tuple[list[RankBuilder], dict]:
    ranks = [RankBuilder(r) for r in range(WORLD_SIZE)]
    for b in ranks:
        b.cur[b.main] = b.trace_start + 40_000
        top = Op("python_function", "train.py(131): <module>", b.main, b.trace_start + 20_000)
        main = Op("python_function", "train.py(117): main", b.main, b.trace_start + 21_500)
        b.ops += [top, main]
        b.root_frames = [top, main]
        # the schedule's transition into the active phase happens inside prof.step()
        b.ops.append(Op("python_function", "torch/profiler/profiler.py(797): step", b.main,
                        b.trace_start + 55_000, b.trace_start + 79_000))
    next_ps = {b.rank: b.trace_start + 78_000 for b in ranks}
    collectives = []
    for step in STEPS:
        rel = {}
        for b in ranks:
            scratch = RankBuilder(b.rank)
            rel[b.rank] = build_step(scratch, step, 0)
        post = {r: rel[r].a2 - rel[r].a1 for r in rel}
        assert len(set(post.values())) == 1, "backward after bucket 1 must be identical on all ranks"
        jr = random.Random(SEED + step)
        jit = {r: jr.randint(0, 6_000) for r in range(WORLD_SIZE) if r != STRAGGLER}
        dl_extra = jr.randint(250_000, 600_000)
        # earliest first-copy time per rank: DataLoader at least DL_MIN plus the wrapper overheads
        g0_min = {r: next_ps[r] + 20_000 + DL_MIN_NS + 40_000 for r in rel}
        a1_base = max(g0_min[r] + rel[r].a1 - jit[r] for r in jit) + dl_extra
        arrival1 = {r: a1_base + jit[r] for r in jit}
        arrival1[STRAGGLER] = a1_base + max(jit.values()) + STRAGGLER_LATE_NS
        g0 = {r: arrival1[r] - rel[r].a1 for r in rel}
        arrival2 = {r: g0[r] + rel[r].a2 for r in rel}
        e1 = max(arrival1.values()) + BUCKETS[1][1]
        e2 = max(arrival2.values()) + BUCKETS[2][1]
        assert e1 <= min(arrival2.values())
        for b in ranks:
            res = build_step(b, step, g0[b.rank], e1, e2, next_ps[b.rank])
            assert (res.a1, res.a2) == (arrival1[b.rank], arrival2[b.rank])
            b.steps.append(res)
            next_ps[b.rank] = res.cpu_end
        for bucket, arrival, end in ((1, arrival1, e1), (2, arrival2, e2)):
            others = max(v for r, v in arrival.items() if r != STRAGGLER)
            collectives.append({
                "step": step, "bucket": bucket, "collective": "allreduce", "nelems": BUCKETS[bucket][0],
                "arrival_ns": {str(r): arrival[r] for r in sorted(arrival)},
                "end_ns": end,
                "wait_ns": {str(r): arrival[STRAGGLER] - arrival[r] for r in sorted(arrival)},
                "straggler_late_by_ns": arrival[STRAGGLER] - others,
            })
    # inter-step gaps, profiler stop
    for b in ranks:
        for prev, nxt in zip(b.steps, b.steps[1:]):
            gs = max(g.end for g in prev.items + prev.comm)
            first = nxt.items[0]
            b.inter_step_gaps.append(Gap(gs, first.start, "host_bound", first, None, "data.py(41): __next__"))
        t = b.main
        last_gpu = max(g.end for g in b.gpus)
        stop = Op("python_function", "torch/profiler/profiler.py(816): __exit__", t, b.steps[-1].cpu_end + 9_000)
        b.ops.append(stop)
        b.cur[t] = stop.start + 4_000
        b.open(t, "python_function", "torch/profiler/profiler.py(740): stop")
        sync = b.api(t, "cudaDeviceSynchronize", last_gpu + 6_500 - b.cur[t])
        assert sync.start < last_gpu
        b.close(t)
        stop.end = b.cur[t] + 2_000
        b.trace_end = stop.end + 30_000
        for f in b.root_frames:
            f.end = b.trace_end - 10_000 + (1_000 if f.name.endswith("<module>") else 0)
    return ranks, {"collectives": collectives}


# ----------------------------------------------------------------------------------------------
# Writing Kineto JSON


def _assign_ids(b: RankBuilder) -> None:
    cpu = sorted((o for o in b.ops if o.cat in ("cpu_op", "user_annotation")), key=lambda o: (o.start, -o.end))
    for i, o in enumerate(cpu, start=1):
        o.ext = i
    calls: list[Api] = list(b.apis) + [g.phantom_corr for g in b.gpus if g.phantom_corr is not None]
    calls.sort(key=lambda a: (a.start, a.end))
    rng = random.Random(SEED * 7 + b.rank)
    corr = CORR0[b.rank]
    for a in calls:
        a.corr = corr
        corr += 1 + (2 if rng.random() < 0.25 else 0)  # ids taken by calls the profiler filters out


def _fill(args: list[tuple[str, Any]], ext: int, corr: int) -> list[tuple[str, Any]]:
    out = []
    for k, v in args:
        if v == "EXT":
            v = ext
        elif v == "CORR":
            v = corr
        out.append((k, v))
    return out


#: one rendered trace event: (JSON text, category or None, ph)
_Rendered = tuple[str, str | None, str]


def render_rank(b: RankBuilder) -> tuple[str, dict[str, dict[str, int]]]:
    _assign_ids(b)
    cpu_events, ev_idx = _cpu_op_events(b, 0)
    python_events, ev_idx = _python_events(b, ev_idx)
    events = (cpu_events + python_events + _activity_events(b) + _gpu_annotation_events(b)
              + _metadata_events(b))
    counts: dict[str, dict[str, int]] = {}
    for _, cat, ph in events:
        c = counts.setdefault(cat or "", {})
        c[ph] = c.get(ph, 0) + 1
    return _document(b, events), counts


def _x(b: RankBuilder, cat: str, name: str, pid: int, tid: int, start: int, dur: int,
       args: list[tuple[str, Any]]) -> _Rendered:
    return kw.x_event_text(cat, name, pid, tid, start - b.base, dur, kw.fields(*args)), cat, "X"


def _cpu_op_events(b: RankBuilder, ev_idx: int) -> tuple[list[_Rendered], int]:
    """The CPU ops (not Python frames), in time order; returns them and the next ``Ev Idx``."""
    events: list[_Rendered] = []
    for o in sorted((o for o in b.ops if o.cat != "python_function"), key=lambda o: (o.start, -o.end, o.name)):
        assert o.end is not None and o.end >= o.start, o
        args = [("External id", o.ext)] + o.args + [("Ev Idx", ev_idx)]
        ev_idx += 1
        events.append(_x(b, o.cat, o.name, b.pid, o.tid, o.start, o.end - o.start, args))
    return events, ev_idx


def _python_events(b: RankBuilder, ev_idx: int) -> tuple[list[_Rendered], int]:
    """The Python frames with their ids and parents (by nesting on each thread), in time order."""
    py = sorted((o for o in b.ops if o.cat == "python_function"), key=lambda o: (o.tid, o.start, -o.end, o.name))
    py_id: dict[int, int] = {}
    parent: dict[int, int | None] = {}
    stack: list[Op] = []
    for i, o in enumerate(py, start=1):
        py_id[id(o)] = i
        while stack and not (stack[-1].tid == o.tid and stack[-1].start <= o.start and o.end <= stack[-1].end):
            assert stack[-1].tid != o.tid or stack[-1].end <= o.start, ("python frames overlap", stack[-1].name, o.name)
            stack.pop()
        parent[id(o)] = py_id[id(stack[-1])] if stack else None
        stack.append(o)
    events: list[_Rendered] = []
    for o in sorted(py, key=lambda o: (o.start, -o.end, o.name)):
        args = [("Python parent id", parent[id(o)]), ("Python id", py_id[id(o)]), ("Ev Idx", ev_idx)]
        ev_idx += 1
        events.append(_x(b, "python_function", o.name, b.pid, o.tid, o.start, o.end - o.start, args))
    return events, ev_idx


def _activity_events(b: RankBuilder) -> list[_Rendered]:
    """Runtime calls and GPU activity in time order, each followed by its flow event."""
    acts: list[tuple[int, int, Any]] = [(a.start, 0, a) for a in b.apis] + [(g.start, 1, g) for g in b.gpus]
    acts.sort(key=lambda x: (x[0], x[1], x[2].corr if isinstance(x[2], Api) else (x[2].api.corr if x[2].api else 0)))
    events: list[_Rendered] = []
    for _, kind, x in acts:
        if kind == 0:
            events += _runtime_events(b, x)
        else:
            events += _gpu_events(b, x)
    return events


def _runtime_events(b: RankBuilder, a: Api) -> list[_Rendered]:
    args = (([("External id", a.owner.ext)] if a.owner is not None else [])
            + [("cbid", CBID[a.name]), ("correlation", a.corr)])
    events = [_x(b, "cuda_runtime", a.name, b.pid, a.tid, a.start, a.end - a.start, args)]
    if a.gpu:
        events.append((kw.flow_event_text("s", a.corr, b.pid, a.tid, a.start - b.base), "ac2g", "s"))
    return events


def _gpu_events(b: RankBuilder, g: Gpu) -> list[_Rendered]:
    corr = g.api.corr if g.api is not None else g.phantom_corr.corr
    ext = g.api.owner.ext if (g.api is not None and g.api.owner is not None) else 0
    events = [_x(b, g.cat, g.name, b.device, g.stream, g.start, g.dur, _fill(g.args, ext, corr))]
    if g.api is not None:
        events.append((kw.flow_event_text("f", corr, b.device, g.stream, g.start - b.base), "ac2g", "f"))
    return events


def _gpu_annotation_events(b: RankBuilder) -> list[_Rendered]:
    return [_x(b, "gpu_user_annotation", name, b.device, COMPUTE_STREAM, s, e - s, [("External id", ps.ext)])
            for name, s, e, ps in b.gpu_annotations]


def _metadata_events(b: RankBuilder) -> list[_Rendered]:
    """Process and thread names, and the profiler's own trace span and markers."""
    base = b.base
    t0 = b.trace_start + 21_000
    meta = [(b.pid, 0, "process_name", {"name": "python3"}), (b.pid, 0, "process_labels", {"labels": "CPU"}),
            (b.pid, 0, "process_sort_index", {"sort_index": b.pid})]
    for d in range(WORLD_SIZE):
        meta += [(d, 0, "process_name", {"name": "python3"}), (d, 0, "process_labels", {"labels": f"GPU {d}"}),
                 (d, 0, "process_sort_index", {"sort_index": 5000000 + d})]
    for s in (COMPUTE_STREAM, COMM_STREAM):
        meta += [(b.device, s, "thread_name", {"name": f"stream {s} "}),
                 (b.device, s, "thread_sort_index", {"sort_index": s})]
    meta += [(b.pid, b.main, "thread_name", {"name": f"thread {b.main} (python3)"}),
             (b.pid, b.main, "thread_sort_index", {"sort_index": b.main}),
             (b.pid, b.bwd, "thread_name", {"name": f"thread {b.bwd} (pt_autograd_0)"}),
             (b.pid, b.bwd, "thread_sort_index", {"sort_index": b.bwd})]
    events: list[_Rendered] = [(kw.metadata_event_text(name, pid, tid, t0 - base, a), None, "M")
                               for pid, tid, name, a in meta]
    start_ts = kw.us(b.trace_start - base)
    span = kw.us(b.trace_end - b.trace_start)
    events += [
        # this sample keeps the span's pid, tid and name on one line
        (kw.event_text(f'"ph": "X", "cat": "Trace", "ts": {start_ts}, "dur": {span}',
                       kw.fields(("pid", "Spans"), ("tid", "PyTorch Profiler"), ("name", "PyTorch Profiler (0)")),
                       args=kw.fields(("Op count", 0))), "Trace", "X"),
        (kw.event_text(f'"name": "process_sort_index", "ph": "M", "ts": {start_ts}',
                       kw.fields(("pid", "Spans"), ("tid", 0)), args=kw.fields(("sort_index", 536870912))), None, "M"),
        (kw.instant_event_text("Iteration Start: PyTorch Profiler", "Traces", "Trace PyTorch Profiler",
                               b.trace_start - base), None, "i"),
        (kw.instant_event_text("Record Window End", "", "", b.trace_end + 1_000 - base), None, "i"),
    ]
    return events


def _document(b: RankBuilder, events: list[_Rendered]) -> str:
    """The whole JSON document of one rank, formatted as Kineto writes it."""
    trace_id = (f"{_crc(SEED, 'trace', b.rank):08X}{_crc(SEED, 'id', b.rank):08X}"
                f"{_crc(b.rank, SEED):08X}{_crc('x', b.rank):08X}")
    header = {
        "deviceProperties": kw.device_properties_text(kw.device_properties(range(WORLD_SIZE))),
        "cupti_version": 24, "cuda_runtime_version": 12080,
        "distributedInfo": kw.distributed_info(b.rank, WORLD_SIZE),
        "record_shapes": 1, "cuda_driver_version": 12080, "with_stack": 1, "trace_id": trace_id,
    }
    return (kw.document_head(header) + ",\n".join(e[0] for e in events)
            + kw.document_tail(f"./traces/rank{b.rank}.pt.trace.json", b.base))


# ----------------------------------------------------------------------------------------------
# Truth, accounted from the construction


def _union_len(intervals: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _context(b: RankBuilder, gap: Gap) -> dict | None:
    """The CPU context of a planted gap, as designed; asserted against the metrics.md rule."""
    g = gap.ended_by
    if gap.cause == "host_bound":
        tid = g.api.tid
        cover = [o for o in b.ops if o.tid == tid and o.covers(gap.start, gap.end)]
        inner = max(cover, key=lambda o: (o.start, -o.end))
        assert inner.name == gap.expect_context, (b.rank, gap.step, inner.name, gap.expect_context)
        return {"name": inner.name, "cat": inner.cat, "tid": tid}
    if gap.cause == "sync_bound" and gap.drained:
        sync = _drained_by(b, dataclasses.replace(gap, cause="host_bound"))
        assert sync is not None and sync.name == gap.expect_context
        return {"name": sync.name, "cat": "cuda_runtime", "tid": sync.tid}
    if gap.cause == "sync_bound":
        syncs = [a for a in b.apis if a.name in SYNC_APIS and a.start <= gap.start and a.end >= gap.end]
        assert len(syncs) == 1 and syncs[0].name == gap.expect_context
        return {"name": syncs[0].name, "cat": "cuda_runtime", "tid": syncs[0].tid}
    # launch latency / unattributed: no synchronize may span the gap
    assert not any(a.name in SYNC_APIS and a.start <= gap.start and a.end >= gap.end for a in b.apis)
    if gap.cause == "launch_latency":
        assert g.api.start < gap.start
    return None


def _gap_detail(b: RankBuilder, gap: Gap) -> dict:
    g = gap.ended_by
    syncs = sum(max(0, min(a.end, gap.end) - max(a.start, gap.start)) for a in b.apis if a.name in SYNC_APIS)
    return {
        "start_ns": gap.start, "end_ns": gap.end, "dur_ns": gap.end - gap.start, "cause": gap.cause,
        "cpu_context": _context(b, gap),
        "ended_by": {"cat": g.cat, "name": g.name,
                     "correlation": g.api.corr if g.api else g.phantom_corr.corr,
                     "launch_api": g.api.name if g.api else None,
                     "launch_start_ns": g.api.start if g.api else None,
                     "launch_tid": g.api.tid if g.api else None},
        "sync_overlap_ns": syncs,
    }


def _kernel_stats(gpus: list[Gpu]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for g in gpus:
        if g.cat != "kernel":
            continue
        s = out.setdefault(g.name, {"count": 0, "total_ns": 0, "min_ns": g.dur, "max_ns": g.dur})
        s["count"] += 1
        s["total_ns"] += g.dur
        s["min_ns"] = min(s["min_ns"], g.dur)
        s["max_ns"] = max(s["max_ns"], g.dur)
    return out


def _drained_by(b: RankBuilder, gap: Gap) -> Api | None:
    """The synchronize call the launching thread of a host-bound gap sits in when the GPU goes idle."""
    g = gap.ended_by
    if gap.cause != "host_bound" or g.api is None:
        return None
    hits = [a for a in b.apis if a.name in SYNC_APIS and a.tid == g.api.tid and a.start <= gap.start < a.end]
    sync = max(hits, key=lambda a: a.start) if hits else None
    # the host launched again soon after the sync returned (DRAIN_REFILL_NS in analyses/idle_gaps.py)
    return sync if sync is not None and g.api.start - sync.end <= 100_000 else None


def _reclassify(b: RankBuilder, gap: Gap) -> Gap:
    sync = _drained_by(b, gap)
    if sync is None:
        return gap
    return dataclasses.replace(gap, cause="sync_bound", expect_context=sync.name, drained=True)


def _metrics(b: RankBuilder, steps: list[StepResult], extra_gaps: list[Gap]) -> dict:
    items = [g for s in steps for g in s.items]
    comm = [g for s in steps for g in s.comm]
    gaps = sorted([_reclassify(b, gp) for s in steps for gp in s.gaps] + [_reclassify(b, gp) for gp in extra_gaps],
                  key=lambda gp: gp.start)
    first = min(g.start for g in items + comm)
    last = max(g.end for g in items + comm)
    compute = sum(g.dur for g in items if g.cls == "compute")
    memory = sum(g.dur for g in items if g.cls == "memory")
    # bucket 1 runs entirely under backward compute, bucket 2 entirely after it (asserted in build)
    overlap = sum(g.dur for g in comm if g.bucket == 1)
    communication = sum(g.dur for g in comm)
    exposed = communication - overlap
    busy = compute + memory + exposed
    window = last - first
    idle = sum(gp.end - gp.start for gp in gaps)
    assert window == busy + idle, (b.rank, [s.step for s in steps], window, busy, idle)
    # independent cross-check of the accounting with a plain interval union
    acts = [(g.start, g.end) for g in items + comm]
    assert _union_len(acts) == busy
    comp_iv = [(g.start, g.end) for g in items if g.cls == "compute"]
    comm_iv = [(g.start, g.end) for g in comm]
    assert _union_len(comp_iv) + _union_len(comm_iv) - _union_len(comp_iv + comm_iv) == overlap
    by_cause: dict[str, int] = {}
    for gp in gaps:
        by_cause[gp.cause] = by_cause.get(gp.cause, 0) + gp.end - gp.start
    return {
        "first_start_ns": first, "last_end_ns": last,
        "window_ns": window, "busy_ns": busy, "idle_ns": idle,
        "compute_ns": compute, "communication_ns": communication, "memory_ns": memory,
        "overlap_ns": overlap, "overlap_pct": round(100 * overlap / communication, 6),
        "exposed_comm_ns": exposed,
        "gaps": [[gp.start, gp.end, gp.cause] for gp in gaps],
        "gap_details": [_gap_detail(b, gp) for gp in gaps],
        "idle_by_cause_ns": by_cause,
        "kernels": _kernel_stats(items + comm),
        "activity_count": len(items) + len(comm),
    }


def build_truth(ranks: list[RankBuilder], job: dict, counts: dict[int, dict]) -> dict:
    out_ranks = {}
    for b in ranks:
        for s in b.steps:
            # every activity of the step was launched inside its ProfilerStep range
            for g in s.items + s.comm:
                t = g.api.start if g.api else g.start
                assert s.ps.start <= t <= s.ps.end, (b.rank, s.step, g.name)
        steps = []
        for s in b.steps:
            m = _metrics(b, [s], [])
            m["kernel_count"] = sum(v["count"] for v in m.pop("kernels").values())  # full stats: overall only
            m.update({"name": s.ps.name, "step": s.step, "cpu_start_ns": s.ps.start, "cpu_end_ns": s.ps.end})
            steps.append(m)
        overall = _metrics(b, b.steps, b.inter_step_gaps)
        delays = {}
        for g in b.gpus:
            if g.api is not None:
                delays[str(g.api.corr)] = max(0, g.start - g.api.end)
        out_ranks[str(b.rank)] = {
            "file": f"rank{b.rank}.json.gz",
            "pid": b.pid, "main_tid": b.main, "autograd_tid": b.bwd, "device": b.device,
            "base_time_ns": b.base,
            "overall": overall,
            "steps": steps,
            "launch_delay_ns": delays,
            "event_counts": counts[b.rank],
        }
    return {
        "description": (
            "Planted truths of sample_traces/synthetic_4rank, accounted from the construction in "
            "sample_traces/make_kineto.py. Times are absolute int ns: baseTimeNanoseconds + ts*1000 "
            "(read ts as a decimal, not a float). Definitions: docs/metrics.md."
        ),
        "generator": "sample_traces/make_kineto.py",
        "seed": SEED,
        "world_size": WORLD_SIZE,
        "steps": [f"ProfilerStep#{s}" for s in STEPS],
        "streams": {"compute": COMPUTE_STREAM, "communication": COMM_STREAM},
        "conventions": {
            "gaps": "[start_ns, end_ns, cause] device-wide, inside the window; causes: host_bound, sync_bound, "
                    "launch_latency, unattributed (decided in that order, docs/metrics.md)",
            "gap_details.cpu_context": "host_bound: innermost cpu_op / python_function / user_annotation on the "
                                       "launching thread covering the whole gap; sync_bound: the synchronize call",
            "step_of_activity": "each activity was launched inside its ProfilerStep range; per-step windows do not "
                                "overlap, and the gaps between steps count only in overall",
            "event_counts": "per category ('' for events without cat) and ph, everything in traceEvents",
            "launch_delay_ns": "max(0, gpu start - launch call end), keyed by correlation",
            "kernels": "cat == kernel only (not memcpy/memset), by full name",
            "overlap_pct": "100 * overlap_ns / communication_ns, rounded to 6 decimals",
        },
        "clock": {
            "base_time_ns": {str(b.rank): b.base for b in ranks},
            "base_offset_vs_rank0_ns": {str(b.rank): b.base - ranks[0].base for b in ranks},
            "note": "rank 2 was captured with a baseTimeNanoseconds 3600 s later than the others, so its ts "
                    "values are 3.6e9 us smaller; absolute times agree (no real clock skew)",
            "ts_above_2_pow_42_us": True,
        },
        "straggler": {
            "rank": STRAGGLER,
            "late_by_ns": STRAGGLER_LATE_NS,
            "meaning": "at every allreduce, rank 3's NCCL kernel starts exactly late_by_ns after the latest of "
                       "the other ranks' (arrival = NCCL kernel start, absolute ns); the other ranks' NCCL "
                       "kernels wait and end together with rank 3's",
            "cause": "rank 3's DataLoader (torch/utils/data/dataloader.py __next__) takes longer every step",
            "collectives": job["collectives"],
        },
        "ranks": out_ranks,
    }


def main(out_dir: pathlib.Path) -> None:
    out = pathlib.Path(out_dir) / "synthetic_4rank"
    out.mkdir(parents=True, exist_ok=True)
    ranks, job = build_job()
    counts = {}
    for b in ranks:
        text, counts[b.rank] = render_rank(b)
        data = kw.gzip_bytes(text.encode("utf-8"))
        (out / f"rank{b.rank}.json.gz").write_bytes(data)
    truth = build_truth(ranks, job, counts)
    (out / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent,
                    help="directory that receives synthetic_4rank/ (default: this script's directory)")
    main(ap.parse_args().out)
