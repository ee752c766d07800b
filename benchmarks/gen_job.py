#!/usr/bin/env python3
"""Generate a realistic, deterministic N-rank PyTorch profiler (Kineto) job: one trace per rank,
collectives that line up across ranks, a planted straggler, a compute-heavy rank and per-rank
clock offsets, with ``truth.json`` holding what was planted.

    python benchmarks/gen_job.py OUT_DIR --ranks 8 --steps 4                 # small, for tests
    python benchmarks/gen_job.py OUT_DIR --ranks 64 --size-mb 210 --workers 2  # ~13 GB, for benchmarks

The job is a DDP bf16 training run of a decoder-only transformer, one GPU per rank (rank r on device
r mod 8 of its node). Each step on each rank:

* ``ProfilerStep#N`` (user annotation, main thread) around everything below;
* the DataLoader (``enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__``), during which
  the GPU idles; the **straggler rank**'s DataLoader takes ``--late-ms`` longer every step;
* the batch copy (``aten::to`` > ``aten::copy_`` > ``cudaMemcpyAsync`` > ``Memcpy HtoD``);
* DDP's buffer ``Broadcast`` (``record_param_comms`` + ``nccl:broadcast`` + an NCCL kernel on stream 20);
* forward: per layer ten kernels (layer norm, GEMMs through ``aten::linear`` > ``aten::addmm``,
  flash attention, GELU, residual adds), each with its ``cpu_op``, ``cudaLaunchKernel`` call and
  ``ac2g`` flow, all with ``External id`` / ``correlation``;
* backward on the autograd thread (``autograd::engine::evaluate_function: ...Backward0``), sixteen
  kernels per layer; every ``--bucket-layers`` layers a gradient bucket is all-reduced
  (``record_param_comms`` + ``nccl:all_reduce``, ``cudaStreamWaitEvent``, an
  ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` with collective args on stream 20);
* the optimizer (``Optimizer.step#AdamW.step``, fused AdamW kernels) after the compute stream waited
  for the last bucket, then ``loss.item()`` (DtoH copy + ``cudaStreamSynchronize``).

The **heavy rank**'s compute kernels run ``--heavy-factor`` times longer (uneven work: a compute
imbalance). How collectives line up: the NCCL kernel of a collective starts on a rank when that
rank arrives (its bucket is ready on the compute stream, its launch call has returned and its NCCL
stream is free); the collective then ends at one common instant, the latest arrival plus the
transfer time (ring all-reduce: 2(n-1)/n x bytes / 100 GB/s + 15 us), plus a per-rank end jitter
uniform in [-``--end-jitter-ns``, +``--end-jitter-ns``] (NCCL kernels do not retire at exactly the
same ns). So everyone waits for the last rank to arrive, as in real NCCL.

**Clocks.** Times are simulated on one true clock; rank r writes them as true time +
``offset_r`` (deterministic, uniform in +-3 ms, and one badly synchronised host at +180 ms), and
each rank's ``baseTimeNanoseconds`` differs (rank r: base + r s, as if each profiler started a second
later), its ``ts`` being smaller by the same amount, so only ``offset_r`` remains in the absolute
times (``baseTimeNanoseconds + ts``).

**How it is generated.** Every rank is a Python coroutine that simulates its CPU threads and CUDA
streams and *yields* at each collective with its arrival time, receiving the collective's end. Pass
1 runs all ranks' coroutines in lockstep without writing anything, to get every collective's end
per rank; pass 2 runs each rank again (in ``--workers`` processes), feeding it those ends, and
writes its file. Both passes draw the same random numbers (one ``random.Random`` per rank, seeded by
``--seed`` and the rank), so the files agree with the plan; the same arguments give the same bytes.
Memory stays small: each rank's text is written one step at a time.

truth.json (times in ns): ``straggler`` (rank, extra DataLoader time per step, times it was last,
mean late-by on the true clock), ``heavy_rank`` (rank, factor), ``clock`` (``offset_ns`` and
``base_time_ns`` per rank, the end jitter, and ``tolerance_ns`` = 1000: an estimate of a rank's
offset from collective ends is off by at most twice the end jitter, and a difference of two
estimates by four times it, 600 ns with the default 150 ns jitter), ``collectives`` (per matched
collective: kind, step, occurrence, the rank that arrived last and by how much, the skew and the
common end on the true clock), ``files`` and their sizes.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Generator, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sample_traces"))

import kineto_writer as kw  # noqa: E402  (the Kineto JSON every generator writes)

# ----------------------------------------------------------------------------- constants

SEED = 20251122
BASE_TIME_NS = 1_763_769_600_000_000_000  # wall clock of rank 0's profiler start
TS0_NS = 4_870_000_000_000_000  # where each rank's ts begin (~4.87e12 us, like real traces)
PID_BASE = 2_193_400
COMPUTE_STREAM = 7
NCCL_STREAM = 20
GPUS_PER_NODE = 8
HIDDEN, SEQ, BATCH, FFN = 4096, 4096, 2, 16384
TOKENS = SEQ * BATCH
BF16 = "c10::BFloat16"
BUCKET_NELEMS = 13_107_200  # 25 MiB of bf16 gradients: DDP's default bucket_cap_mb
BUFFER_NELEMS = 262_144
BUS_BYTES_PER_NS = 100.0  # 100 GB/s of NCCL bus bandwidth
NCCL_LATENCY_NS = 15_000
DATALOADER_NS = 900_000

GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1"
        "_execute_segment_k_off_kernel__5x_cublas")
GEMM_DGRAD = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1"
              "_execute_segment_k_off_kernel__5x_cublas")
GEMM_WGRAD = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize256x128x64_warpgroupsize2x1x1"
              "_execute_segment_k_off_kernel__5x_cublas")
LN = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
      "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)")
LN_BWD = ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>"
          "(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, "
          "c10::BFloat16*, int)")
LN_GAMMA = ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<c10::BFloat16, float, "
            "32u, 32u, 256u, false, true, true>(long, long, c10::BFloat16 const*, c10::BFloat16 const*, "
            "float const*, float const*, c10::BFloat16*, c10::BFloat16*)")
FLASH = ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, "
         "false, cutlass::bfloat16_t>, true, false, false, false, true, true, false, false>"
         "(pytorch_flash::Flash_fwd_params)")
FLASH_BWD = ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::Flash_bwd_kernel_"
             "traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t>, true, false, false, false, "
             "false, true, false, false>(pytorch_flash::Flash_bwd_params)")
FLASH_DOT = ("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, pytorch_flash::Flash_bwd_kernel_traits<128, 64, "
             "128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t> >(pytorch_flash::Flash_bwd_params)")
FLASH_CVT = ("void pytorch_flash::flash_bwd_convert_dq_kernel<pytorch_flash::Flash_bwd_kernel_traits<128, 64, "
             "128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t> >(pytorch_flash::Flash_bwd_params, int)")
GELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
        "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >"
        "(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::"
        "operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)")
GELU_BWD = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl(at::"
            "TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda(c10::BFloat16, "
            "c10::BFloat16)#1}, std::array<char*, 3ul> >(int, at::native::GeluBackwardCUDAKernelImpl(at::"
            "TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda(c10::BFloat16, "
            "c10::BFloat16)#1}, std::array<char*, 3ul>)")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
       "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, "
        "(at::native::ADAM_MODE)1, false>, double, double, double, double, double, bool, bool, float const*, "
        "float const*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous "
        "namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, (at::native::ADAM_MODE)1, false>, double, double, "
        "double, double, double, bool, bool, float const*, float const*)")
NLL = ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<c10::BFloat16, float, long>"
       "(c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, long const*, c10::BFloat16 const*, bool, long, long, "
       "long, long)")
NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_BROADCAST = "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

H, T = HIDDEN, TOKENS
#: forward of one layer: (cpu op, outer op or None, kernel, nominal ns, input dims, grid)
FORWARD = [
    ("aten::native_layer_norm", "aten::layer_norm", LN, 28_000, [[BATCH, SEQ, H], [H], [H]], (T, 1, 1)),
    ("aten::addmm", "aten::linear", GEMM, 330_000, [[BATCH, SEQ, H], [3 * H, H], [3 * H]], (96, 64, 1)),
    ("aten::_flash_attention_forward", "aten::scaled_dot_product_attention", FLASH, 390_000,
     [[BATCH, SEQ, 32, 128]] * 3, (32, 64, 1)),
    ("aten::addmm", "aten::linear", GEMM, 115_000, [[BATCH, SEQ, H], [H, H], [H]], (32, 64, 1)),
    ("aten::add", None, ADD, 32_000, [[BATCH, SEQ, H], [BATCH, SEQ, H], []], (T * H // 2048, 1, 1)),
    ("aten::native_layer_norm", "aten::layer_norm", LN, 28_000, [[BATCH, SEQ, H], [H], [H]], (T, 1, 1)),
    ("aten::addmm", "aten::linear", GEMM, 440_000, [[BATCH, SEQ, H], [FFN, H], [FFN]], (128, 64, 1)),
    ("aten::gelu", None, GELU, 64_000, [[BATCH, SEQ, FFN], []], (T * FFN // 2048, 1, 1)),
    ("aten::addmm", "aten::linear", GEMM, 440_000, [[BATCH, SEQ, FFN], [H, FFN], [H]], (32, 64, 1)),
    ("aten::add", None, ADD, 32_000, [[BATCH, SEQ, H], [BATCH, SEQ, H], []], (T * H // 2048, 1, 1)),
]
#: backward of one layer: (autograd node, cpu op, kernel, nominal ns)
BACKWARD = [
    ("AddBackward0", "aten::add", ADD, 30_000),
    ("AddmmBackward0", "aten::mm", GEMM_DGRAD, 430_000),
    ("AddmmBackward0", "aten::mm", GEMM_WGRAD, 450_000),
    ("GeluBackward0", "aten::gelu_backward", GELU_BWD, 95_000),
    ("AddmmBackward0", "aten::mm", GEMM_DGRAD, 430_000),
    ("AddmmBackward0", "aten::mm", GEMM_WGRAD, 450_000),
    ("NativeLayerNormBackward0", "aten::native_layer_norm_backward", LN_BWD, 45_000),
    ("NativeLayerNormBackward0", "aten::native_layer_norm_backward", LN_GAMMA, 38_000),
    ("AddmmBackward0", "aten::mm", GEMM_DGRAD, 112_000),
    ("AddmmBackward0", "aten::mm", GEMM_WGRAD, 118_000),
    ("ScaledDotProductFlashAttentionBackward0", "aten::_flash_attention_backward", FLASH_DOT, 36_000),
    ("ScaledDotProductFlashAttentionBackward0", "aten::_flash_attention_backward", FLASH_BWD, 940_000),
    ("ScaledDotProductFlashAttentionBackward0", "aten::_flash_attention_backward", FLASH_CVT, 30_000),
    ("AddmmBackward0", "aten::mm", GEMM_DGRAD, 325_000),
    ("AddmmBackward0", "aten::mm", GEMM_WGRAD, 340_000),
    ("NativeLayerNormBackward0", "aten::native_layer_norm_backward", LN_BWD, 45_000),
]
FWD_NS = sum(k[3] for k in FORWARD)
BWD_NS = sum(k[3] for k in BACKWARD)


us = kw.us  # Kineto's time format: microseconds with exactly three decimals


# ----------------------------------------------------------------------------- configuration


@dataclass
class Job:
    ranks: int = 8
    steps: int = 4
    layers: int = 8
    bucket_layers: int = 2
    seed: int = SEED
    straggler: int = -1  # -1: chosen from the seed
    heavy: int = -1
    late_ns: int = -1  # -1: 30% of a step's nominal compute
    heavy_factor: float = 1.2
    end_jitter_ns: int = 150
    first_step: int = 10
    offsets_ns: list = field(default_factory=list)
    base_times_ns: list = field(default_factory=list)

    def resolve(self) -> "Job":
        rng = random.Random(f"{self.seed}:job")
        if self.ranks < 2:
            raise ValueError("a job needs at least 2 ranks")
        if self.straggler < 0:
            self.straggler = rng.randrange(self.ranks)
        if self.heavy < 0:
            choices = [r for r in range(self.ranks) if r != self.straggler]
            self.heavy = rng.choice(choices)
        if self.late_ns < 0:
            self.late_ns = int(0.3 * self.layers * (FWD_NS + BWD_NS))
        if not self.offsets_ns:
            self.offsets_ns = [rng.randint(-3_000_000, 3_000_000) for _ in range(self.ranks)]
            bad = rng.randrange(self.ranks)
            self.offsets_ns[bad] = 180_000_000 + rng.randint(0, 999)
        if not self.base_times_ns:
            self.base_times_ns = [BASE_TIME_NS + r * 1_000_000_000 + rng.randint(0, 999_999) * 1000
                                  for r in range(self.ranks)]
        return self

    @property
    def buckets(self) -> int:
        return math.ceil(self.layers / self.bucket_layers)


@dataclass
class Arrival:
    """What a rank's coroutine yields at a collective."""

    kind: str
    step: int
    occurrence: int
    arrival_ns: int
    nelems: int


# ----------------------------------------------------------------------------- one rank


class Out:
    """Event text of one rank, buffered per step; ``None`` in pass 1 (nothing is formatted)."""

    def __init__(self, handle: IO[bytes], shift_ns: int):
        self.handle = handle
        self.shift = shift_ns  # file ts (ns) = true time + shift
        self.parts: list[str] = []
        self.bytes = 0
        self.events = 0

    def flush(self) -> None:
        if self.parts:
            data = "".join(self.parts).encode()
            self.handle.write(data)
            self.bytes += len(data)
            self.parts.clear()


def _dims(dims: list) -> str:
    types = ", ".join(f'"{BF16}"' if d else '"Scalar"' for d in dims)
    return f'"Input Dims": {json.dumps(dims)}, "Input type": [{types}]'


class Rank:
    """One rank's CPU threads and CUDA streams; methods advance them and (in pass 2) write events."""

    def __init__(self, job: Job, rank: int, out: Optional[Out]):
        self.job = job
        self.rank = rank
        self.out = out
        self.rng = random.Random(f"{job.seed}:rank:{rank}")
        self.device = rank % GPUS_PER_NODE
        self.pid = PID_BASE + 97 * rank
        self.main_tid = self.pid
        self.bwd_tid = self.pid + 353
        self.factor = job.heavy_factor if rank == job.heavy else 1.0
        t0 = 2_000_000 + self.rng.randint(0, 40_000)
        self.cpu = {self.main_tid: t0, self.bwd_tid: t0}
        self.free = {COMPUTE_STREAM: t0, NCCL_STREAM: t0}
        self.ext = 0
        self.corr = 0
        self.ev = 0
        self.ranks_text = "[" + ", ".join(str(r) for r in range(job.ranks)) + "]"

    # ---- text helpers (pass 2 only)
    def _x(self, cat: str, name: str, pid: int, tid: int, start: int, dur: int, args: str) -> None:
        out = self.out
        out.parts.append(kw.x_event_text(cat, name, pid, tid, start + out.shift, dur, args) + ",\n")
        out.events += 1

    def _flow(self, ph: str, corr: int, pid: int, tid: int, t: int) -> None:
        out = self.out
        out.parts.append(kw.flow_event_text(ph, corr, pid, tid, t + out.shift) + ",\n")
        out.events += 1

    # ---- CPU side
    def advance(self, tid: int, lo: int, hi: int) -> int:
        self.cpu[tid] += self.rng.randint(lo, hi)
        return self.cpu[tid]

    def op(self, tid: int, name: str, start: int, cat: str = "cpu_op", args: str = "") -> None:
        """Write a CPU range that started at ``start`` and ends now (call after its children)."""
        if self.out is None:
            return
        self.ext += 1
        self.ev += 1
        extra = f", {args}" if args else ""
        self._x(cat, name, self.pid, tid, start, self.cpu[tid] - start,
                f'"External id": {self.ext}, "Record function id": 0, "Ev Idx": {self.ev}{extra}')

    def runtime(self, tid: int, api: str, start: int, dur: int, corr: int, flow: bool) -> None:
        if self.out is None:
            return
        self._x("cuda_runtime", api, self.pid, tid, start, dur,
                f'"External id": {self.ext + 1}, "cbid": 211, "correlation": {corr}')
        if flow:
            self._flow("s", corr, self.pid, tid, start)

    # ---- GPU side
    def launch(self, tid: int, kernel: str, nominal_ns: int, grid: tuple, stream: int = COMPUTE_STREAM,
               ready: int = 0, extra: str = "", compute: bool = True, api: str = "cudaLaunchKernel") -> tuple[int, int]:
        """A launch call on ``tid`` and its kernel on ``stream``; returns the kernel's (start, end)."""
        rng = self.rng
        call = self.advance(tid, 1_500, 4_000)
        call_dur = rng.randint(3_500, 8_500)
        self.cpu[tid] += call_dur
        self.corr += 1
        dur = int(nominal_ns * (self.factor if compute else 1.0) * rng.uniform(0.97, 1.03))
        start = max(self.free[stream], call + call_dur + rng.randint(2_500, 6_000), ready)
        self.free[stream] = start + dur
        self._kernel(tid, api, kernel, call, call_dur, start, dur, grid, stream, extra)
        return start, start + dur

    def _kernel(self, tid, api, kernel, call, call_dur, start, dur, grid, stream, extra) -> None:
        if self.out is None:
            return
        self.runtime(tid, api, call, call_dur, self.corr, True)
        blocks = grid[0] * grid[1] * grid[2]
        self._x("kernel", kernel, self.device, stream, start, dur,
                f'"External id": {self.ext + 1}, "queued": 0, "device": {self.device}, "context": 1, '
                f'"stream": {stream}, "correlation": {self.corr}, "registers per thread": 168, '
                f'"shared memory": 0, "blocks per SM": {blocks / 132:.6f}, "warps per SM": {blocks * 8 / 132:.6f}, '
                f'"grid": [{grid[0]}, {grid[1]}, {grid[2]}], "block": [256, 1, 1], '
                f'"est. achieved occupancy %": {min(100, blocks // 13)}{extra}')
        self._flow("f", self.corr, self.device, stream, start)

    def memcpy(self, tid: int, name: str, nbytes: int, gbps: float) -> tuple[int, int]:
        rng = self.rng
        call = self.advance(tid, 1_500, 4_000)
        call_dur = rng.randint(5_000, 11_000)
        self.cpu[tid] += call_dur
        self.corr += 1
        dur = max(1_200, int(nbytes / gbps)) + rng.randint(200, 900)
        start = max(self.free[COMPUTE_STREAM], call + call_dur + rng.randint(2_000, 5_000))
        self.free[COMPUTE_STREAM] = start + dur
        if self.out is not None:
            self.runtime(tid, "cudaMemcpyAsync", call, call_dur, self.corr, True)
            self._x("gpu_memcpy", name, self.device, COMPUTE_STREAM, start, dur,
                    f'"External id": {self.ext + 1}, "device": {self.device}, "context": 1, '
                    f'"stream": {COMPUTE_STREAM}, "correlation": {self.corr}, "bytes": {nbytes}, '
                    f'"memory bandwidth (GB/s)": {nbytes / dur:.6f}')
            self._flow("f", self.corr, self.device, COMPUTE_STREAM, start)
        return start, start + dur

    def plain_call(self, tid: int, api: str, lo: int = 1_500, hi: int = 4_000) -> None:
        call = self.advance(tid, 800, 2_500)
        dur = self.rng.randint(lo, hi)
        self.cpu[tid] += dur
        self.corr += 1
        if self.out is not None:
            self.runtime(tid, api, call, dur, self.corr, False)

    def collective(self, tid: int, kind: str, step: int, occurrence: int, nelems: int
                   ) -> Generator[Arrival, int, None]:
        """record_param_comms + nccl annotation + the NCCL kernel; yields the arrival, gets the end."""
        name = {"AllReduce": "allreduce", "Broadcast": "broadcast"}[kind]
        kernel = {"AllReduce": NCCL_ALLREDUCE, "Broadcast": NCCL_BROADCAST}[kind]
        coll_args = (f'"Collective name": "{name}", "In msg nelems": {nelems}, "Out msg nelems": {nelems}, '
                     f'"Group size": {self.job.ranks}, "dtype": "BFloat16", "In split size": "[]", '
                     f'"Out split size": "[]", "Process Group Name": "0", "Process Group Description": '
                     f'"default_pg", "Process Group Ranks": "{self.ranks_text}"')
        rpc_start = self.advance(tid, 2_000, 5_000)
        ann_start = self.advance(tid, 1_000, 3_000)
        self.plain_call(tid, "cudaEventRecord")
        self.plain_call(tid, "cudaStreamWaitEvent")
        ready = self.free[COMPUTE_STREAM]  # the NCCL stream waits for the bucket (an event)
        rng = self.rng
        call = self.advance(tid, 1_500, 4_000)
        call_dur = rng.randint(4_000, 9_000)
        self.cpu[tid] += call_dur
        self.corr += 1
        arrival = max(self.free[NCCL_STREAM], ready, call + call_dur + rng.randint(3_000, 6_000))
        end = yield Arrival(kind, step, occurrence, arrival, nelems)
        self.free[NCCL_STREAM] = end
        self._kernel(tid, "cudaLaunchKernelExC", kernel, call, call_dur, arrival, end - arrival, (16, 1, 1),
                     NCCL_STREAM, ", " + coll_args)
        self.plain_call(tid, "cudaEventRecord")
        self.advance(tid, 1_000, 3_000)
        self.op(tid, f"nccl:{name}", ann_start, cat="user_annotation")
        self.advance(tid, 1_000, 2_500)
        self.op(tid, "record_param_comms", rpc_start, args=coll_args)
        if self.out is not None:
            self.out.parts.append(kw.x_event_text("gpu_user_annotation", f"nccl:{name}", self.device, NCCL_STREAM,
                                                  arrival - 800 + self.out.shift, end - arrival + 1_300,
                                                  f'"External id": {self.ext}') + ",\n")
            self.out.events += 1

    # ---- one training step
    def step(self, n: int) -> Generator[Arrival, int, None]:
        job, rng, m, b = self.job, self.rng, self.main_tid, self.bwd_tid
        step_start = self.advance(m, 20_000, 60_000)
        # data loading: the GPU idles; the straggler's loader is slower
        dl_start = self.advance(m, 2_000, 6_000)
        self.cpu[m] += int(DATALOADER_NS * rng.uniform(0.85, 1.15)) + (job.late_ns if self.rank == job.straggler else 0)
        self.op(m, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", dl_start, cat="user_annotation")
        to_start = self.advance(m, 2_000, 5_000)
        copy_start = self.advance(m, 1_000, 3_000)
        self.memcpy(m, "Memcpy HtoD (Pinned -> Device)", T * 8, 25.0)
        self.advance(m, 1_000, 3_000)
        self.op(m, "aten::copy_", copy_start, args=_dims([[BATCH, SEQ], [BATCH, SEQ], []]))
        self.advance(m, 1_000, 3_000)
        self.op(m, "aten::to", to_start, args=_dims([[BATCH, SEQ], [], [], [], []]))
        fwd_start = self.advance(m, 3_000, 8_000)
        yield from self.collective(m, "Broadcast", n, 0, BUFFER_NELEMS)
        for _ in range(job.layers):
            for name, outer, kernel, ns, dims, grid in FORWARD:
                outer_start = self.advance(m, 2_000, 6_000) if outer else 0
                start = self.advance(m, 1_500, 4_000)
                self.launch(m, kernel, ns, grid)
                self.advance(m, 1_000, 3_000)
                self.op(m, name, start, args=_dims(dims))
                if outer:
                    self.advance(m, 800, 2_000)
                    self.op(m, outer, outer_start, args=_dims(dims))
        loss_start = self.advance(m, 2_000, 5_000)
        self.launch(m, NLL, 60_000, (1, 1, 1))
        self.advance(m, 1_000, 3_000)
        self.op(m, "aten::nll_loss_forward", loss_start, args=_dims([[T, 32000], [T], [], [], []]))
        self.advance(m, 3_000, 9_000)
        self.op(m, "DistributedDataParallel.forward", fwd_start, cat="user_annotation")
        # backward on the autograd thread; gradient buckets are all-reduced as they fill
        self.cpu[b] = self.cpu[m] + rng.randint(8_000, 20_000)
        bucket = 0
        for layer in range(job.layers):
            node_start = None
            for i, (node, op, kernel, ns) in enumerate(BACKWARD):
                if i == 0 or BACKWARD[i - 1][0] != node:
                    node_start = self.advance(b, 2_000, 5_000)
                start = self.advance(b, 1_200, 3_500)
                self.launch(b, kernel, ns, (132, 1, 1))
                self.advance(b, 800, 2_500)
                self.op(b, op, start)
                if i + 1 == len(BACKWARD) or BACKWARD[i + 1][0] != node:
                    self.advance(b, 1_000, 3_000)
                    self.op(b, f"autograd::engine::evaluate_function: {node}", node_start)
            if (layer + 1) % job.bucket_layers == 0 or layer + 1 == job.layers:
                yield from self.collective(b, "AllReduce", n, bucket, BUCKET_NELEMS)
                bucket += 1
        # the main thread resumes when backward is done; the optimizer waits for the last bucket
        self.cpu[m] = max(self.cpu[m], self.cpu[b]) + rng.randint(5_000, 15_000)
        opt_start = self.advance(m, 2_000, 6_000)
        self.plain_call(m, "cudaStreamWaitEvent")
        self.free[COMPUTE_STREAM] = max(self.free[COMPUTE_STREAM], self.free[NCCL_STREAM])
        adam_start = self.advance(m, 2_000, 5_000)
        for _ in range(4):
            self.launch(m, ADAM, 45_000 * job.layers // 4 + 20_000, (320, 1, 1))
        self.advance(m, 1_000, 3_000)
        self.op(m, "aten::_fused_adamw_", adam_start)
        self.advance(m, 2_000, 6_000)
        self.op(m, "Optimizer.step#AdamW.step", opt_start, cat="user_annotation")
        # loss.item(): a small DtoH copy, then the CPU waits for it
        item_start = self.advance(m, 3_000, 8_000)
        _, copy_end = self.memcpy(m, "Memcpy DtoH (Device -> Pinned)", 4, 0.004)
        sync_start = self.advance(m, 800, 2_000)
        self.cpu[m] = max(self.cpu[m] + 2_000, copy_end + rng.randint(2_000, 5_000))
        self.corr += 1
        if self.out is not None:
            self.runtime(m, "cudaStreamSynchronize", sync_start, self.cpu[m] - sync_start, self.corr, False)
        self.advance(m, 1_000, 3_000)
        self.op(m, "aten::item", item_start, args=_dims([[]]))
        self.advance(m, 2_000, 6_000)
        self.op(m, f"ProfilerStep#{n}", step_start, cat="user_annotation")

    def program(self) -> Generator[Arrival, int, None]:
        for s in range(self.job.steps):
            yield from self.step(self.job.first_step + s)
            if self.out is not None:
                self.out.flush()


# ----------------------------------------------------------------------------- pass 1: the plan


def transfer_ns(kind: str, nelems: int, ranks: int) -> int:
    nbytes = 2 * nelems
    factor = 2 * (ranks - 1) / ranks if kind == "AllReduce" else 1.0
    return NCCL_LATENCY_NS + int(factor * nbytes / BUS_BYTES_PER_NS)


def plan(job: Job) -> dict:
    """Run every rank in lockstep (no output) and return each collective's end per rank + truth."""
    ranks = [Rank(job, r, None) for r in range(job.ranks)]
    programs = [r.program() for r in ranks]
    jitter = random.Random(f"{job.seed}:ends")
    ends: list[list[int]] = [[] for _ in ranks]
    collectives = []
    pending = [next(p) for p in programs]
    while True:
        first = pending[0]
        for a in pending:
            if (a.kind, a.step, a.occurrence) != (first.kind, first.step, first.occurrence):
                raise RuntimeError("ranks disagree on the collective order")
        arrivals = [a.arrival_ns for a in pending]
        common_end = max(arrivals) + transfer_ns(first.kind, first.nelems, job.ranks)
        order = sorted(range(job.ranks), key=lambda r: (arrivals[r], r))
        last, second = order[-1], order[-2]
        collectives.append({
            "collective": first.kind, "process_group": "0", "step": first.step, "occurrence": first.occurrence,
            "last_rank": last if arrivals[last] > arrivals[second] else None,
            "late_by_ns": arrivals[last] - arrivals[second],
            "skew_ns": arrivals[last] - arrivals[order[0]],
            "end_ns": BASE_TIME_NS + TS0_NS + common_end,
        })
        nxt = []
        finished = 0
        for r, p in enumerate(programs):
            end = common_end + jitter.randint(-job.end_jitter_ns, job.end_jitter_ns)
            ends[r].append(end)
            try:
                nxt.append(p.send(end))
            except StopIteration:
                finished += 1
        if finished:
            if finished != len(programs):
                raise RuntimeError("ranks ran different numbers of collectives")
            break
        pending = nxt
    return {"ends": ends, "collectives": collectives}


# ----------------------------------------------------------------------------- pass 2: the files


#: the GPUs of a node: H100s, as the single-trace generator (gen_kineto.py) describes them
DEVICES = kw.device_properties(range(GPUS_PER_NODE), {**kw.H100, "totalGlobalMem": 85021163520})


def _header(job: Job, rank: int) -> str:
    header = {
        "deviceProperties": kw.device_properties_text(DEVICES), "cupti_version": 24, "cuda_runtime_version": 12040,
        # a long list of ranks is written as text, as Kineto does
        "distributedInfo": kw.distributed_info(rank, job.ranks, nccl_version="2.21.5",
                                               ranks="[0 .. %d]" % (job.ranks - 1)),
        "record_shapes": 1, "profile_memory": 0,
        "trace_id": f"{random.Random(f'{job.seed}:trace:{rank}').getrandbits(128):032X}",
    }
    return kw.document_head(header)


def _metadata(rank: Rank, t_end: int) -> str:
    """The metadata events, the profiler's span and its window marker (the last event)."""
    shift = rank.out.shift
    meta = [("process_name", rank.pid, 0, {"name": "python3"}), ("process_labels", rank.pid, 0, {"labels": "CPU"}),
            ("process_name", rank.device, 0, {"name": "python3"}),
            ("process_labels", rank.device, 0, {"labels": f"GPU {rank.device}"}),
            ("thread_name", rank.pid, rank.main_tid, {"name": f"thread {rank.main_tid} (python3)"}),
            ("thread_name", rank.pid, rank.bwd_tid, {"name": f"thread {rank.bwd_tid} (pt_autograd_0)"})]
    meta += [("thread_name", rank.device, stream, {"name": f"stream {stream} "})
             for stream in (COMPUTE_STREAM, NCCL_STREAM)]
    events = [kw.metadata_event_text(name, pid, tid, shift, args) for name, pid, tid, args in meta]
    events += [kw.profiler_span_text(shift, t_end),
               kw.instant_event_text("Record Window End", "", "", t_end + shift + 1_000_000)]
    return ",\n".join(events)


def file_name(rank: int, gz: bool) -> str:
    return f"rank{rank}.json" + (".gz" if gz else "")


def write_rank(job: Job, rank: int, ends: list[int], out_dir: str, gz: bool, gz_level: int = 6) -> dict:
    """Pass 2 for one rank: run its program with the planned ends and write its file."""
    path = Path(out_dir) / file_name(rank, gz)
    tmp = path.with_name(path.name + ".tmp")
    shift = TS0_NS + job.offsets_ns[rank] - (job.base_times_ns[rank] - BASE_TIME_NS)
    handle = kw.open_output(tmp, gz, gz_level)
    try:
        out = Out(handle, shift)
        header = _header(job, rank).encode()
        handle.write(header)
        out.bytes += len(header)
        r = Rank(job, rank, out)
        prog = r.program()
        it = iter(ends)
        try:
            next(prog)
            while True:
                prog.send(next(it))
        except StopIteration:
            pass
        out.flush()
        t_end = max(max(r.cpu.values()), max(r.free.values()))
        tail = (_metadata(r, t_end) + kw.document_tail(path.name, job.base_times_ns[rank])).encode()
        handle.write(tail)
        out.bytes += len(tail)
    finally:
        handle.close()
    os.replace(tmp, path)
    return {"rank": rank, "path": str(path), "bytes": out.bytes, "file_bytes": path.stat().st_size,
            "events": out.events + 9}


def _write_rank_task(args: tuple) -> dict:
    return write_rank(*args)


def bytes_per_step(job: Job) -> int:
    """Uncompressed bytes one step of rank 0 takes (measured by writing it to a counter)."""

    class Counter:
        n = 0

        def write(self, data: bytes) -> None:
            self.n += len(data)

    probe = Job(**{**asdict(job), "steps": 1})
    counter = Counter()
    r = Rank(probe, 0, Out(counter, 0))
    prog = r.program()
    arrival = next(prog)
    try:
        while True:
            arrival = prog.send(arrival.arrival_ns + 500_000)
    except StopIteration:
        pass
    r.out.flush()
    return counter.n


def generate(out_dir: str | os.PathLike, *, ranks: int = 8, steps: Optional[int] = None,
             size_mb: Optional[float] = None, layers: int = 8, bucket_layers: int = 2, seed: int = SEED,
             straggler: int = -1, heavy: int = -1, late_ms: Optional[float] = None, heavy_factor: float = 1.2,
             end_jitter_ns: int = 150, gz: bool = False, gz_level: int = 6, workers: int = 1,
             quiet: bool = True) -> dict:
    """Write the job into ``out_dir`` (``rank{r}.json[.gz]`` and ``truth.json``); returns the truth."""
    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    job = Job(ranks=ranks, steps=steps or 1, layers=layers, bucket_layers=bucket_layers, seed=seed,
              straggler=straggler, heavy=heavy, late_ns=-1 if late_ms is None else int(late_ms * 1e6),
              heavy_factor=heavy_factor, end_jitter_ns=end_jitter_ns).resolve()
    if steps is None:
        per_step = bytes_per_step(job)
        job.steps = max(1, math.ceil((size_mb or 10.0) * 1e6 / per_step))
        if not quiet:
            print(f"  {per_step / 1e6:.2f} MB per step -> {job.steps} steps per rank", file=sys.stderr)
    plan_started = time.perf_counter()
    planned = plan(job)
    if not quiet:
        print(f"  plan: {len(planned['collectives'])} collectives per rank, "
              f"{time.perf_counter() - plan_started:.1f} s", file=sys.stderr)
    tasks = [(job, r, planned["ends"][r], str(out_dir), gz, gz_level) for r in range(ranks)]
    files = []
    if workers > 1:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(workers) as pool:
            for res in pool.imap_unordered(_write_rank_task, tasks):
                files.append(res)
                if not quiet:
                    print(f"  rank {res['rank']}: {res['bytes'] / 1e6:.0f} MB ({len(files)}/{ranks})", file=sys.stderr)
    else:
        for t in tasks:
            files.append(_write_rank_task(t))
            if not quiet:
                print(f"  rank {t[1]}: {files[-1]['bytes'] / 1e6:.0f} MB ({len(files)}/{ranks})", file=sys.stderr)
    files.sort(key=lambda f: f["rank"])
    colls = planned["collectives"]
    strag = [c for c in colls if c["last_rank"] == job.straggler]
    truth = {
        "generator": "benchmarks/gen_job.py",
        "job": {k: v for k, v in asdict(job).items() if k not in ("offsets_ns", "base_times_ns")},
        "straggler": {
            "rank": job.straggler,
            "dataloader_extra_ns": job.late_ns,
            "collectives": len(colls),
            "times_last": len(strag),
            "mean_late_by_ns": round(sum(c["late_by_ns"] for c in strag) / len(strag)) if strag else 0,
        },
        "heavy_rank": {"rank": job.heavy, "compute_factor": job.heavy_factor},
        "clock": {
            "offset_ns": {str(r): o for r, o in enumerate(job.offsets_ns)},
            "base_time_ns": {str(r): b for r, b in enumerate(job.base_times_ns)},
            "end_jitter_ns": job.end_jitter_ns,
            "tolerance_ns": 1000,
            "note": "absolute time in rank r's file = true time + offset_ns[r]; offsets are only defined up to "
                    "a common constant, so compare differences",
        },
        "collectives": colls,
        "files": files,
        "total_bytes": sum(f["bytes"] for f in files),
        "seconds": round(time.perf_counter() - started, 1),
    }
    (out_dir / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True))
    return truth


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--ranks", type=int, default=8)
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--steps", type=int, help="steps per rank (default: from --size-mb, else 4)")
    size.add_argument("--size-mb", type=float, help="about this many MB (10^6 B) of uncompressed JSON per rank")
    ap.add_argument("--layers", type=int, default=8, help="transformer layers per step (default 8)")
    ap.add_argument("--bucket-layers", type=int, default=2, help="layers per DDP gradient bucket (default 2)")
    ap.add_argument("--straggler", type=int, default=-1, help="the straggler rank (default: from the seed)")
    ap.add_argument("--heavy", type=int, default=-1, help="the compute-heavy rank (default: from the seed)")
    ap.add_argument("--late-ms", type=float, help="the straggler's extra DataLoader time per step "
                                                  "(default: 30%% of a step's nominal compute)")
    ap.add_argument("--heavy-factor", type=float, default=1.2)
    ap.add_argument("--end-jitter-ns", type=int, default=150)
    ap.add_argument("--gz", action="store_true", help="write .json.gz (gzip level --gz-level, mtime 0)")
    ap.add_argument("--gz-level", type=int, default=6)
    ap.add_argument("--workers", type=int, default=1, help="processes writing files in pass 2")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    steps = a.steps if a.steps is not None or a.size_mb is not None else 4
    truth = generate(a.out_dir, ranks=a.ranks, steps=steps, size_mb=a.size_mb, layers=a.layers,
                     bucket_layers=a.bucket_layers, seed=a.seed, straggler=a.straggler, heavy=a.heavy,
                     late_ms=a.late_ms, heavy_factor=a.heavy_factor, end_jitter_ns=a.end_jitter_ns, gz=a.gz,
                     gz_level=a.gz_level, workers=a.workers, quiet=a.quiet)
    s = truth["straggler"]
    print(f"{a.out_dir}: {a.ranks} ranks x {truth['job']['steps']} steps, {truth['total_bytes'] / 1e6:.1f} MB JSON, "
          f"{s['collectives']} collectives per rank; straggler rank {s['rank']} (last in {s['times_last']}), "
          f"heavy rank {truth['heavy_rank']['rank']}; {truth['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
