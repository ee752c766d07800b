#!/usr/bin/env python3
"""Generate a large, realistic, deterministic PyTorch profiler (Kineto) trace for benchmarks.

    python benchmarks/gen_kineto.py OUT.json --size-mb 500          # at least 500 MB of JSON
    python benchmarks/gen_kineto.py OUT.json.gz --size-mb 500 --gz  # same JSON, gzip-compressed
    python benchmarks/gen_kineto.py OUT.json --events 2000000       # at least 2M trace events

The trace has the shape of a PyTorch 2.x DDP training run on one rank of 8 H100s, written the way
Kineto writes it (pretty-printed, one key group per line, float microseconds with 3 decimals):

* header: ``schemaVersion``, ``deviceProperties`` (8 GPUs), CUPTI/CUDA versions, profiler flags,
  ``distributedInfo``, ``trace_id``;
* CPU section: ``ProfilerStep#N`` and other ``user_annotation`` ranges, nested ``cpu_op`` events
  with ``External id``, ``Sequence number``, ``Record function id``, ``Concrete Inputs``,
  ``Input type``, ``Input Strides``, ``Input Dims``, ``Ev Idx``; forward ops on the main thread,
  backward ops on the autograd thread, ``fwdbwd`` flow pairs between them; ``record_param_comms``
  with collective args for the DDP all-reduces;
* ``cpu_instant_event`` ``[memory]`` events (allocations and frees), then ``python_function``
  events (with_stack / with_modules: ``nn.Module: X_n`` frames, ``Python id``/``parent id``);
* GPU section in CUPTI buffer order: ``kernel`` (long templated C++ names, grid/block/registers/
  occupancy args), ``gpu_memcpy``, ``gpu_memset`` and NCCL kernels on their own stream with
  collective args, each followed by its ``ac2g`` flow end, and the ``cuda_runtime`` call
  (``cudaLaunchKernel``, ``cudaLaunchKernelExC``, ``cudaMemcpyAsync``, ...) with its flow start;
  ``gpu_user_annotation`` ranges;
* ``M`` metadata (process/thread names, labels, sort indices), the ``Trace`` span, the iteration
  instants, and the trailing ``traceName``/``displayTimeUnit``/``baseTimeNanoseconds``.

The output is streamed: each training step is generated, written and dropped, and the sections that
Kineto writes after the CPU ops are spilled to temporary files next to OUT and appended at the end,
so memory stays bounded whatever the size. Same arguments, same bytes (fixed seed; gzip with mtime 0
and no file name). The document's structure and events are written by ``sample_traces/kineto_writer.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sample_traces"))

import kineto_writer as kw  # noqa: E402  (the Kineto JSON every generator writes)

# ----------------------------------------------------------------------------- constants

SEED = 20240522
PID = 1837402
MAIN_TID = 1837402
BWD_TID = 1837755
GPU = 0  # this rank's device: Kineto uses the device index as the GPU "pid"
COMPUTE_STREAM = 7
NCCL_STREAM = 20
RANK = 0
WORLD = 8
START_NS = 4_871_203_416_431_397  # ~4.87e12 us: below 2**43 us, like real traces
BASE_TIME_NS = 1_761_955_200_000_000_000
NUM_SMS = 132

# model: a 24-layer, 2048-wide decoder-only transformer trained in bf16 with DDP
BATCH, SEQ, HIDDEN, HEADS, VOCAB = 4, 2048, 2048, 16, 32000
HEAD_DIM = HIDDEN // HEADS
FFN = 4 * HIDDEN
TOKENS = BATCH * SEQ
BF16 = "c10::BFloat16"

GEMM_TN = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1"
           "_execute_segment_k_off_kernel__5x_cublas")
GEMM_NN = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1"
           "_execute_segment_k_off_kernel__5x_cublas")
GEMM_NT = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize256x128x64_warpgroupsize2x1x1"
           "_execute_segment_k_off_kernel__5x_cublas")
CUTLASS_GEMM = ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_nn_align8>"
                "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_nn_align8::Params)")
LN_FWD = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
          "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, "
          "c10::BFloat16*)")
LN_BWD_INPUT = ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized"
                "<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, "
                "c10::BFloat16 const*, c10::BFloat16*, int)")
LN_BWD_GAMMA = ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<c10::BFloat16, "
                "float, 32u, 32u, 256u, false, true, true>(long, long, c10::BFloat16 const*, c10::BFloat16 const*, "
                "float const*, float const*, c10::BFloat16*, c10::BFloat16*)")
_FLASH_TRAITS_FWD = ("pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
                     "pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >")
_FLASH_TRAITS_BWD = ("pytorch_flash::Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, "
                     "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >")
FLASH_FWD = (f"void pytorch_flash::flash_fwd_kernel<{_FLASH_TRAITS_FWD}, true, false, false, false, true, true, "
             "false, false>(pytorch_flash::Flash_fwd_params)")
FLASH_BWD_DOT = (f"void pytorch_flash::flash_bwd_dot_do_o_kernel<true, {_FLASH_TRAITS_BWD} >"
                 "(pytorch_flash::Flash_bwd_params)")
FLASH_BWD_MAIN = (f"void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<{_FLASH_TRAITS_BWD}, true, "
                  "false, false, false, false, true, false, false>(pytorch_flash::Flash_bwd_params)")
FLASH_BWD_CONVERT = (f"void pytorch_flash::flash_bwd_convert_dq_kernel<{_FLASH_TRAITS_BWD} >"
                     "(pytorch_flash::Flash_bwd_params, int)")
_GELU_LAMBDA = ("at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::"
                "operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}")
GELU_FWD = (f"void at::native::vectorized_elementwise_kernel<4, {_GELU_LAMBDA}, std::array<char*, 2ul> >"
            f"(int, {_GELU_LAMBDA}, std::array<char*, 2ul>)")
_GELU_BWD_LAMBDA = ("at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
                    "{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
                    "{lambda(c10::BFloat16, c10::BFloat16)#1}")
GELU_BWD = (f"void at::native::vectorized_elementwise_kernel<4, {_GELU_BWD_LAMBDA}, std::array<char*, 3ul> >"
            f"(int, {_GELU_BWD_LAMBDA}, std::array<char*, 3ul>)")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
       "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
MUL_SCALAR = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<c10::BFloat16, "
              "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
              "std::array<char*, 2ul> >(int, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, "
              "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)")
_COPY_LAMBDA = ("at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
                "{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}")
COPY = (f"void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<{_COPY_LAMBDA}>"
        f"(at::TensorIteratorBase&, {_COPY_LAMBDA} const&)::{{lambda(int)#1}}>(int, "
        f"at::native::gpu_kernel_impl_nocast<{_COPY_LAMBDA}>(at::TensorIteratorBase&, {_COPY_LAMBDA} const&)::"
        "{lambda(int)#1})")
CAT = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::(anonymous "
       "namespace)::OpaqueType<2u>, unsigned int, 3, 128, 1>(at::native::(anonymous namespace)::OpaqueType<2u>*, "
       "at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::"
       "OpaqueType<2u>, unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, "
       "4u>, int, unsigned int)")
EMBED_FWD = ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, "
             "2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo"
             "<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, "
             "unsigned int, unsigned int, long)")
EMBED_BWD = ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::BFloat16, float, "
             "long>(long const*, c10::BFloat16 const*, c10::BFloat16*, int, long, int, int)")
SOFTMAX_FWD = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, float, "
               "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, c10::BFloat16 const*, int)")
SOFTMAX_BWD = ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, c10::BFloat16, float, c10::"
               "BFloat16, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(c10::BFloat16*, "
               "c10::BFloat16 const*, c10::BFloat16 const*, long)")
NLL_FWD = ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<c10::BFloat16, float, "
           "long>(c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, long const*, c10::BFloat16 const*, bool, "
           "long, long, long, long)")
NLL_BWD = ("void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<c10::BFloat16, long>"
           "(c10::BFloat16*, c10::BFloat16 const*, long const*, c10::BFloat16 const*, c10::BFloat16 const*, bool, "
           "int, int, long, long)")
_ADAM_META = "at::native::(anonymous namespace)::TensorListMetadata<4>"
_ADAM_FUNCTOR = ("at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, "
                 "(at::native::ADAM_MODE)1, false>")
ADAM = (f"void at::native::(anonymous namespace)::multi_tensor_apply_kernel<{_ADAM_META}, {_ADAM_FUNCTOR}, double, "
        f"double, double, double, double, bool, bool, float const*, float const*>({_ADAM_META}, {_ADAM_FUNCTOR}, "
        "double, double, double, double, double, bool, bool, float const*, float const*)")
NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

#: kernel name -> (registers per thread, static shared memory bytes, block size)
KERNEL_INFO = {
    GEMM_TN: (168, 213248, 384), GEMM_NN: (154, 197632, 384), GEMM_NT: (168, 229376, 384),
    CUTLASS_GEMM: (232, 0, 256), LN_FWD: (40, 0, 128), LN_BWD_INPUT: (48, 0, 128), LN_BWD_GAMMA: (96, 0, 1024),
    FLASH_FWD: (255, 49152, 128), FLASH_BWD_DOT: (30, 0, 256), FLASH_BWD_MAIN: (255, 90112, 256),
    FLASH_BWD_CONVERT: (64, 36864, 256), GELU_FWD: (30, 0, 128), GELU_BWD: (32, 0, 128), ADD: (22, 0, 128),
    MUL_SCALAR: (18, 0, 128), COPY: (26, 0, 128), CAT: (40, 0, 128), EMBED_FWD: (28, 0, 512),
    EMBED_BWD: (38, 0, 1024), SOFTMAX_FWD: (40, 0, 1024), SOFTMAX_BWD: (40, 0, 1024), NLL_FWD: (42, 2048, 32),
    NLL_BWD: (24, 0, 32), ADAM: (96, 0, 512), NCCL_ALLREDUCE: (96, 87568, 640),
}

CBID = {"cudaLaunchKernel": 211, "cudaLaunchKernelExC": 430, "cudaMemcpyAsync": 41, "cudaMemsetAsync": 51,
        "cudaStreamSynchronize": 131, "cudaEventRecord": 135, "cudaStreamWaitEvent": 147}

TFLOPS_BF16 = 750e12  # achievable dense bf16 on H100 SXM
HBM_BYTES_PER_S = 3.0e12


us = kw.us  # Kineto's time format: microseconds with exactly three decimals
#: the GPUs of this node: H100s as this generator always described them (a little more memory)
DEVICES = kw.device_properties(range(8), {**kw.H100, "totalGlobalMem": 85021163520})


def _jl(value) -> str:
    return json.dumps(value)


# ----------------------------------------------------------------------------- shapes


def _strides(dims: list) -> list:
    out = []
    for d in dims:
        if not isinstance(d, list) or not d:
            out.append([])
            continue
        acc, st = 1, []
        for n in reversed(d):
            st.append(acc)
            acc *= n
        out.append(list(reversed(st)))
    return out


_SHAPE_CACHE: dict[tuple, str] = {}


def shapes(dims: list, types: list, concrete: Optional[list] = None, strides: Optional[list] = None) -> str:
    """The record_shapes args of a cpu_op, as one line fragment (cached: layers repeat shapes)."""
    key = (_jl(dims), _jl(types), _jl(concrete), _jl(strides))
    text = _SHAPE_CACHE.get(key)
    if text is None:
        concrete = concrete if concrete is not None else [""] * len(dims)
        strides = strides if strides is not None else _strides(dims)
        text = (f'"Concrete Inputs": {_jl(concrete)}, "Input type": {_jl(types)}, '
                f'"Input Strides": {_jl(strides)}, "Input Dims": {_jl(dims)}')
        _SHAPE_CACHE[key] = text
    return text


NO_SHAPES = ""


# ----------------------------------------------------------------------------- writer


class Section:
    """One part of the events array. Text is buffered per step and flushed to its file."""

    def __init__(self, handle: IO[str]):
        self.handle = handle
        self.parts: list = []
        self.bytes = 0
        self.events = 0

    def flush(self) -> None:
        if self.parts:
            text = "".join(self.parts)
            self.handle.write(text)
            self.bytes += len(text)
            self.parts.clear()


@dataclass
class _Frame:
    slot: int
    start: int
    ext: int
    text: tuple  # (prefix-with-name, args-before-Ev-Idx, ev_idx) filled at close


class Thread:
    def __init__(self, tid: int, section: list):
        self.tid = tid
        self.t = 0
        self.out = section  # list of str (or None placeholders until an op closes)
        self.stack: list = []


class Generator:
    def __init__(self, seed: int = SEED, layers: int = 24):
        self.seed = seed
        self.layers = layers
        self.ext = 0
        self.corr = 0
        self.ev_idx = 0
        self.seq = 0
        self.flow = 0
        self.py_id = 2  # 1 and 2 are the <module> and main() frames spanning the whole run
        self.module_ids: dict[str, int] = {}
        self.stream_t = {COMPUTE_STREAM: START_NS, NCCL_STREAM: START_NS}
        self.clock = START_NS + 120_000  # CPU time where the next step starts
        self.events = 0
        self.allocated = 4_200_000_000
        self.reserved = 6_442_450_944
        self.next_addr = 139_872_311_459_840
        self.first_step = 5
        # per-step buffers
        self.cpu: list = []
        self.bwd: list = []
        self.mem: list = []
        self.py: list = []
        self.gpu: list = []
        self.gpu_ann: list = []
        self.py_stack: list = []
        self.rng = random.Random(seed)

    # ---- small helpers --------------------------------------------------------------
    def gap(self, th: Thread, lo: int = 300, hi: int = 2500) -> None:
        th.t += self.rng.randint(lo, hi)

    def next_ext(self) -> int:
        self.ext += 1
        return self.ext

    def next_ev(self) -> int:
        self.ev_idx += 1
        return self.ev_idx - 1

    # ---- CPU ops ---------------------------------------------------------------------
    def op_begin(self, th: Thread, name: str, shape_args: str = NO_SHAPES, cat: str = "cpu_op",
                 seq: Optional[int] = None, fwd_thread: int = 0, extra: str = "") -> _Frame:
        self.gap(th, 400, 3000)
        ext = self.next_ext()
        args = f'"External id": {ext},'
        if seq is not None:
            args += f'"Sequence number": {seq}, "Fwd thread id": {fwd_thread}, '
        args += '"Record function id": 0'
        if shape_args:
            args += ", " + shape_args
        if extra:
            args += ", " + extra
        frame = _Frame(len(th.out), th.t, ext, (name, cat, args, self.next_ev()))
        th.out.append(None)
        th.stack.append(frame)
        self.events += 1
        return frame

    def op_end(self, th: Thread, lo: int = 800, hi: int = 6000) -> _Frame:
        frame = th.stack.pop()
        self.gap(th, lo, hi)
        name, cat, args, ev = frame.text
        th.out[frame.slot] = kw.x_event_text(cat, name, PID, th.tid, frame.start, th.t - frame.start,
                                             f'{args}, "Ev Idx": {ev}') + ",\n"
        return frame

    def leaf(self, th: Thread, name: str, shape_args: str = NO_SHAPES, lo: int = 500, hi: int = 3000) -> None:
        self.op_begin(th, name, shape_args)
        self.op_end(th, lo, hi)

    def flow_start(self, th: Thread, flow_id: int, ts: int) -> None:
        th.out.append(kw.flow_event_text("s", flow_id, PID, th.tid, ts, "fwdbwd") + ",\n")
        self.events += 1

    def flow_end(self, th: Thread, flow_id: int, ts: int) -> None:
        th.out.append(kw.flow_event_text("f", flow_id, PID, th.tid, ts, "fwdbwd") + ",\n")
        self.events += 1

    # ---- python frames (main thread) ----------------------------------------------------
    def py_begin(self, th: Thread, name: str, module: Optional[str] = None) -> None:
        self.gap(th, 200, 1200)
        self.py_id += 1
        parent = self.py_stack[-1][1] if self.py_stack else 2
        mod = None
        if module is not None:
            mod = self.module_ids.setdefault(module, len(self.module_ids))
        self.py_stack.append((len(self.py), self.py_id, parent, name, th.t, mod, self.next_ev()))
        self.py.append(None)
        self.events += 1

    def py_end(self, th: Thread) -> None:
        slot, pid_, parent, name, start, mod, ev = self.py_stack.pop()
        self.gap(th, 200, 900)
        module = f'"Python module id": {mod}, ' if mod is not None else ""
        self.py[slot] = kw.x_event_text("python_function", name, PID, th.tid, start, th.t - start,
                                        f'"Python parent id": {parent}, "Python id": {pid_}, {module}"Ev Idx": {ev}'
                                        ) + ",\n"

    def py_leaf(self, th: Thread, name: str) -> None:
        self.py_begin(th, name)
        self.py_end(th)

    # ---- memory events -----------------------------------------------------------------
    def alloc(self, th: Thread, nbytes: int) -> tuple[int, int]:
        nbytes = (nbytes + 511) // 512 * 512
        addr = self.next_addr
        self.next_addr += (nbytes + 2 * 1024 * 1024 - 1) // (2 * 1024 * 1024) * (2 * 1024 * 1024)
        if self.next_addr > 139_872_311_459_840 + (60 << 30):
            self.next_addr = 139_872_311_459_840
        self.allocated += nbytes
        while self.reserved < self.allocated:
            self.reserved += 2 << 30
        self._mem_event(th, addr, nbytes)
        return addr, nbytes

    def free(self, th: Thread, block: tuple[int, int]) -> None:
        addr, nbytes = block
        self.allocated -= nbytes
        self._mem_event(th, addr, -nbytes)

    def _mem_event(self, th: Thread, addr: int, nbytes: int) -> None:
        self.mem.append(kw.event_text(
            '"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]"', f'"pid": {PID}, "tid": {th.tid}',
            f'"ts": {us(th.t)}',
            args=(f'"Total Reserved": {self.reserved}, "Total Allocated": {self.allocated}, "Bytes": {nbytes}, '
                  f'"Addr": {addr}, "Device Id": {GPU}, "Device Type": 1, "Ev Idx": {self.next_ev()}')) + ",\n")
        self.events += 1

    # ---- GPU activity ------------------------------------------------------------------
    def _runtime(self, th: Thread, lo: int, hi: int) -> tuple[int, int, int]:
        """Advance the thread over one CUDA runtime call: (start, duration, correlation id)."""
        self.gap(th, 300, 1500)
        start = th.t
        th.t += self.rng.randint(lo, hi)
        self.corr += 1
        return start, th.t - start, self.corr

    def _runtime_text(self, th: Thread, api: str, start: int, dur: int, corr: int, ext: Optional[int],
                      flow: bool) -> None:
        ext_arg = f'"External id": {ext},      ' if ext is not None else ""
        text = kw.x_event_text("cuda_runtime", api, PID, th.tid, start, dur,
                               f'{ext_arg}"cbid": {CBID[api]}, "correlation": {corr}') + ",\n"
        self.events += 1
        if flow:
            text += kw.flow_event_text("s", corr, PID, th.tid, start) + ",\n"
            self.events += 1
        self.gpu.append(text)

    def _gpu_slot(self, stream: int, ready: int, dur: int) -> int:
        start = max(self.stream_t[stream], ready) + self.rng.randint(600, 2200)
        self.stream_t[stream] = start + dur
        return start

    def launch(self, th: Thread, kernel: str, dur_ns: int, grid: tuple, api: str = "cudaLaunchKernel",
               stream: int = COMPUTE_STREAM, extra: str = "") -> tuple[int, int]:
        ext = th.stack[-1].ext if th.stack else None
        start, rt_dur, corr = self._runtime(th, 2500, 9000)
        regs, smem, block = KERNEL_INFO[kernel]
        k_start = self._gpu_slot(stream, start + self.rng.randint(3000, 7000), dur_ns)
        blocks = grid[0] * grid[1] * grid[2]
        per_sm = blocks / NUM_SMS
        warps = per_sm * block / 32
        occ = min(100, int(warps / 64 * 100)) if regs < 200 else min(100, int(warps / 64 * 50))
        ext_arg = f'"External id": {ext},      ' if ext is not None else ""
        args = (f'{ext_arg}"queued": 0, "device": {GPU}, "context": 1,      "stream": {stream}, '
                f'"correlation": {corr},      "registers per thread": {regs},      "shared memory": {smem},      '
                f'"blocks per SM": {per_sm:.6f},      "warps per SM": {warps:.6f},      '
                f'"grid": [{grid[0]}, {grid[1]}, {grid[2]}],      "block": [{block}, 1, 1],      '
                f'"est. achieved occupancy %": {occ}{extra}')
        self.gpu.append(kw.x_event_text("kernel", kernel, GPU, stream, k_start, dur_ns, args) + ",\n"
                        + kw.flow_event_text("f", corr, GPU, stream, k_start) + ",\n")
        self.events += 2
        self._runtime_text(th, api, start, rt_dur, corr, ext, True)
        return k_start, k_start + dur_ns

    def memory_op(self, th: Thread, api: str, name: str, cat: str, nbytes: int, gbps: float) -> None:
        ext = th.stack[-1].ext if th.stack else None
        start, rt_dur, corr = self._runtime(th, 3000, 12000)
        dur = max(700, int(nbytes / gbps) + self.rng.randint(300, 1500))  # bytes / (GB/s) = ns
        k_start = self._gpu_slot(COMPUTE_STREAM, start + self.rng.randint(2000, 5000), dur)
        ext_arg = f'"External id": {ext},      ' if ext is not None else ""
        args = (f'{ext_arg}"device": {GPU}, "context": 1,      "stream": {COMPUTE_STREAM}, "correlation": {corr},'
                f'      "bytes": {nbytes}, "memory bandwidth (GB/s)": {nbytes / dur!r}')
        self.gpu.append(kw.x_event_text(cat, name, GPU, COMPUTE_STREAM, k_start, dur, args) + ",\n"
                        + kw.flow_event_text("f", corr, GPU, COMPUTE_STREAM, k_start) + ",\n")
        self.events += 2
        self._runtime_text(th, api, start, rt_dur, corr, ext, True)

    def runtime_only(self, th: Thread, api: str, lo: int = 1500, hi: int = 6000) -> None:
        ext = th.stack[-1].ext if th.stack else None
        start, dur, corr = self._runtime(th, lo, hi)
        self._runtime_text(th, api, start, dur, corr, ext, False)

    def sync(self, th: Thread, stream: int = COMPUTE_STREAM) -> None:
        """cudaStreamSynchronize: the CPU waits for the stream to drain."""
        ext = th.stack[-1].ext if th.stack else None
        self.gap(th, 300, 1500)
        start = th.t
        th.t = max(th.t + 2000, self.stream_t[stream] + self.rng.randint(2000, 6000))
        self.corr += 1
        self._runtime_text(th, "cudaStreamSynchronize", start, th.t - start, self.corr, ext, False)

    def gpu_annotation(self, name: str, stream: int, start: int, end: int, ext: int) -> None:
        self.gpu_ann.append(kw.x_event_text("gpu_user_annotation", name, GPU, stream, start, end - start,
                                            f'"External id": {ext}') + ",\n")
        self.events += 1

    # ---- cost models -------------------------------------------------------------------
    def gemm_ns(self, m: int, n: int, k: int) -> int:
        return int(2 * m * n * k / (TFLOPS_BF16 * self.rng.uniform(0.55, 0.8)) * 1e9)

    def mem_ns(self, nbytes: int) -> int:
        return int(nbytes / (HBM_BYTES_PER_S * self.rng.uniform(0.6, 0.85)) * 1e9) + 1500

    @staticmethod
    def grid_for(n_elems: int, per_block: int) -> tuple:
        return (max(1, min(2 ** 31 - 1, (n_elems + per_block - 1) // per_block)), 1, 1)

    # ---- model pieces (forward, main thread) -----------------------------------------------
    def module_enter(self, th: Thread, cls: str, idx: int, forward: str) -> None:
        self.py_begin(th, "torch/nn/modules/module.py(1773): _wrapped_call_impl")
        self.py_begin(th, "torch/nn/modules/module.py(1784): _call_impl")
        self.py_begin(th, f"nn.Module: {cls}_{idx}", module=f"{cls}_{idx}")
        self.py_begin(th, forward)

    def module_exit(self, th: Thread) -> None:
        for _ in range(4):
            self.py_end(th)

    def fwd_op(self, th: Thread, name: str, shape_args: str, saved: list) -> _Frame:
        """A forward op that records an autograd node: sequence number and the fwdbwd flow start."""
        self.seq += 1
        frame = self.op_begin(th, name, shape_args, seq=self.seq, fwd_thread=0)
        self.flow += 1
        self.flow_start(th, self.flow, frame.start)
        saved.append((self.seq, self.flow))
        return frame

    def linear(self, th: Thread, idx: int, n_in: int, n_out: int, saved: list, acts: list) -> None:
        self.module_enter(th, "Linear", idx, "torch/nn/modules/linear.py(125): forward")
        self.py_begin(th, "<built-in function linear>")
        self.fwd_op(th, "aten::linear", shapes([[BATCH, SEQ, n_in], [n_out, n_in], []], [BF16, BF16, ""]), saved)
        self.op_begin(th, "aten::t", shapes([[n_out, n_in]], [BF16]))
        self.op_begin(th, "aten::transpose", shapes([[n_out, n_in], [], []], [BF16, "Scalar", "Scalar"],
                                                    ["", "0", "1"]))
        self.leaf(th, "aten::as_strided", shapes([[n_out, n_in], [], [], []], [BF16, "", "", ""]))
        self.op_end(th)
        self.op_end(th)
        self.op_begin(th, "aten::matmul", shapes([[BATCH, SEQ, n_in], [n_in, n_out]], [BF16, BF16],
                                                 strides=[[SEQ * n_in, n_in, 1], [1, n_in]]))
        self.op_begin(th, "aten::view", shapes([[BATCH, SEQ, n_in], []], [BF16, ""], ["", f"[{TOKENS}, {n_in}]"]))
        self.op_end(th, 300, 1500)
        self.op_begin(th, "aten::mm", shapes([[TOKENS, n_in], [n_in, n_out]], [BF16, BF16],
                                             strides=[[n_in, 1], [1, n_in]]))
        acts.append(self.alloc(th, TOKENS * n_out * 2))
        self.launch(th, GEMM_TN, self.gemm_ns(TOKENS, n_out, n_in), (n_out // 256, TOKENS // 128, 1),
                    api="cudaLaunchKernelExC")
        self.op_end(th)
        self.op_begin(th, "aten::_unsafe_view", shapes([[TOKENS, n_out], []], [BF16, ""],
                                                       ["", f"[{BATCH}, {SEQ}, {n_out}]"]))
        self.op_end(th, 300, 1500)
        self.op_end(th)  # matmul
        self.op_end(th)  # linear
        self.py_end(th)
        self.module_exit(th)

    def layer_norm(self, th: Thread, idx: int, saved: list, acts: list) -> None:
        self.module_enter(th, "LayerNorm", idx, "torch/nn/modules/normalization.py(229): forward")
        self.py_begin(th, "torch/nn/functional.py(2900): layer_norm")
        self.py_begin(th, "<built-in method layer_norm of type object at 0x7f3c2a1b8f40>")
        self.fwd_op(th, "aten::layer_norm", shapes([[BATCH, SEQ, HIDDEN], [], [HIDDEN], [HIDDEN], [], []],
                                                   [BF16, "ScalarList", BF16, BF16, "Scalar", "Scalar"],
                                                   ["", f"[{HIDDEN}]", "", "", "1e-05", "True"]), saved)
        self.op_begin(th, "aten::native_layer_norm", shapes([[BATCH, SEQ, HIDDEN], [], [HIDDEN], [HIDDEN], []],
                                                            [BF16, "ScalarList", BF16, BF16, "Scalar"],
                                                            ["", f"[{HIDDEN}]", "", "", "1e-05"]))
        for nbytes in (TOKENS * HIDDEN * 2, TOKENS * 4, TOKENS * 4):
            self.leaf(th, "aten::empty", shapes([[], [], [], [], [], []], ["ScalarList", "Scalar", "", "", "", ""],
                                                [f"[{TOKENS}]", "15", "", "", "", ""]))
            acts.append(self.alloc(th, nbytes))
        self.launch(th, LN_FWD, self.mem_ns(TOKENS * HIDDEN * 4), (TOKENS, 1, 1))
        self.op_end(th)
        self.op_end(th)
        self.py_end(th)
        self.py_end(th)
        self.module_exit(th)

    def elementwise(self, th: Thread, name: str, kernel: str, n_elems: int, saved: list, acts: list,
                    n_inputs: int = 2) -> None:
        dims = [[BATCH, SEQ, n_elems // TOKENS]] * n_inputs
        types = [BF16] * n_inputs
        if name == "aten::add":
            dims, types = dims + [[]], types + ["Scalar"]
        self.fwd_op(th, name, shapes(dims, types, [""] * n_inputs + (["1"] if name == "aten::add" else [])),
                    saved)
        acts.append(self.alloc(th, n_elems * 2))
        self.launch(th, kernel, self.mem_ns(n_elems * 2 * (n_inputs + 1)), self.grid_for(n_elems, 512))
        self.op_end(th)

    def attention(self, th: Thread, saved: list, acts: list) -> None:
        qkv = [BATCH, SEQ, 3 * HIDDEN]
        self.fwd_op(th, "aten::view", shapes([qkv, []], [BF16, ""], ["", f"[{BATCH}, {SEQ}, 3, {HEADS}, "
                                                                          f"{HEAD_DIM}]"]), saved)
        self.op_end(th, 300, 1500)
        self.fwd_op(th, "aten::unbind", shapes([[BATCH, SEQ, 3, HEADS, HEAD_DIM], []], [BF16, "Scalar"],
                                               ["", "2"]), saved)
        for _ in range(3):
            self.op_begin(th, "aten::select", shapes([[BATCH, SEQ, 3, HEADS, HEAD_DIM], [], []],
                                                     [BF16, "Scalar", "Scalar"], ["", "2", "0"]))
            self.leaf(th, "aten::as_strided", shapes([[BATCH, SEQ, 3, HEADS, HEAD_DIM], [], [], []],
                                                     [BF16, "", "", ""]), 200, 900)
            self.op_end(th, 300, 1200)
        self.op_end(th)
        for _ in range(3):
            self.fwd_op(th, "aten::transpose", shapes([[BATCH, SEQ, HEADS, HEAD_DIM], [], []],
                                                      [BF16, "Scalar", "Scalar"], ["", "1", "2"]), saved)
            self.leaf(th, "aten::as_strided", shapes([[BATCH, SEQ, HEADS, HEAD_DIM], [], [], []],
                                                     [BF16, "", "", ""]), 200, 900)
            self.op_end(th, 300, 1200)
        self.py_begin(th, "<built-in function scaled_dot_product_attention>")
        head = [BATCH, HEADS, SEQ, HEAD_DIM]
        self.fwd_op(th, "aten::scaled_dot_product_attention",
                    shapes([head, head, head, [], [], [], [], []],
                           [BF16, BF16, BF16, "", "Scalar", "Scalar", "", "Scalar"],
                           ["", "", "", "", "0.0", "True", "", "False"]), saved)
        self.op_begin(th, "aten::_scaled_dot_product_flash_attention",
                      shapes([head, head, head, [], [], [], []], [BF16, BF16, BF16, "Scalar", "Scalar", "Scalar", ""],
                             ["", "", "", "0.0", "True", "False", ""]))
        self.op_begin(th, "aten::_flash_attention_forward",
                      shapes([[BATCH, SEQ, HEADS, HEAD_DIM]] * 3 + [[], [], [], [], [], [], [], [], [], []],
                             [BF16, BF16, BF16, "", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "", "",
                              ""], ["", "", "", "", "", str(SEQ), str(SEQ), "0.0", "True", "False", "", "", ""]))
        self.leaf(th, "aten::empty_like", shapes([[BATCH, SEQ, HEADS, HEAD_DIM], [], [], [], [], []],
                                                 [BF16, "", "", "", "", ""]))
        acts.append(self.alloc(th, TOKENS * HIDDEN * 2))
        self.leaf(th, "aten::empty", shapes([[], [], [], [], [], []], ["ScalarList", "Scalar", "", "", "", ""],
                                            [f"[{BATCH}, {HEADS}, {SEQ}]", "6", "", "", "", ""]))
        acts.append(self.alloc(th, BATCH * HEADS * SEQ * 4))
        flops = 4 * BATCH * SEQ * SEQ * HIDDEN // 2  # causal
        self.launch(th, FLASH_FWD, int(flops / (TFLOPS_BF16 * self.rng.uniform(0.45, 0.6)) * 1e9),
                    (SEQ // 128, BATCH * HEADS, 1))
        self.op_end(th)
        self.op_end(th)
        self.op_end(th)
        self.py_end(th)
        self.fwd_op(th, "aten::transpose", shapes([head, [], []], [BF16, "Scalar", "Scalar"], ["", "1", "2"]), saved)
        self.op_end(th, 300, 1500)
        self.op_begin(th, "aten::contiguous", shapes([[BATCH, SEQ, HEADS, HEAD_DIM], []], [BF16, "Scalar"],
                                                     ["", "0"]))
        self.fwd_op(th, "aten::clone", shapes([[BATCH, SEQ, HEADS, HEAD_DIM], []], [BF16, "Scalar"], ["", "0"]),
                    saved)
        self.leaf(th, "aten::empty_like", shapes([[BATCH, SEQ, HEADS, HEAD_DIM], [], [], [], [], []],
                                                 [BF16, "", "", "", "", ""]))
        acts.append(self.alloc(th, TOKENS * HIDDEN * 2))
        self.op_begin(th, "aten::copy_", shapes([[BATCH, SEQ, HEADS, HEAD_DIM]] * 2 + [[]], [BF16, BF16, "Scalar"],
                                                ["", "", "False"]))
        self.launch(th, COPY, self.mem_ns(TOKENS * HIDDEN * 4), self.grid_for(TOKENS * HIDDEN, 512))
        self.op_end(th)
        self.op_end(th)
        self.op_end(th)
        self.fwd_op(th, "aten::view", shapes([[BATCH, SEQ, HEADS, HEAD_DIM], []], [BF16, ""],
                                             ["", f"[{BATCH}, {SEQ}, {HIDDEN}]"]), saved)
        self.op_end(th, 300, 1500)

    def block_forward(self, th: Thread, layer: int, saved: list, acts: list) -> None:
        self.module_enter(th, "TransformerBlock", layer, "model.py(118): forward")
        self.layer_norm(th, 2 * layer, saved, acts)
        self.module_enter(th, "CausalSelfAttention", layer, "model.py(71): forward")
        self.linear(th, 4 * layer, HIDDEN, 3 * HIDDEN, saved, acts)
        self.attention(th, saved, acts)
        self.linear(th, 4 * layer + 1, HIDDEN, HIDDEN, saved, acts)
        self.module_exit(th)
        self.elementwise(th, "aten::add", ADD, TOKENS * HIDDEN, saved, acts)
        self.layer_norm(th, 2 * layer + 1, saved, acts)
        self.module_enter(th, "MLP", layer, "model.py(96): forward")
        self.linear(th, 4 * layer + 2, HIDDEN, FFN, saved, acts)
        self.module_enter(th, "GELU", layer, "torch/nn/modules/activation.py(734): forward")
        self.py_begin(th, "<built-in function gelu>")
        self.elementwise(th, "aten::gelu", GELU_FWD, TOKENS * FFN, saved, acts, n_inputs=1)
        self.py_end(th)
        self.module_exit(th)
        self.linear(th, 4 * layer + 3, FFN, HIDDEN, saved, acts)
        self.module_exit(th)
        self.elementwise(th, "aten::add", ADD, TOKENS * HIDDEN, saved, acts)
        self.module_exit(th)

    # ---- backward (autograd thread) ------------------------------------------------------
    def node(self, th: Thread, node: str, seq: int, flow_id: int) -> None:
        """Open ``evaluate_function: node`` and ``node``, with the end of the fwdbwd flow that starts at
        the forward op with the same sequence number."""
        self.op_begin(th, f"autograd::engine::evaluate_function: {node}", seq=seq, fwd_thread=1)
        inner = self.op_begin(th, node, seq=seq, fwd_thread=1)
        self.flow_end(th, flow_id, inner.start)

    def node_end(self, th: Thread) -> None:
        self.op_end(th, 500, 2500)
        self.op_end(th, 500, 2500)

    def mm_backward(self, th: Thread, seq: int, flow_id: int, n_in: int, n_out: int) -> None:
        self.node(th, "MmBackward0", seq, flow_id)
        self.leaf(th, "aten::t", shapes([[n_in, n_out]], [BF16]))
        self.op_begin(th, "aten::mm", shapes([[TOKENS, n_out], [n_out, n_in]], [BF16, BF16]))
        grad_in = self.alloc(th, TOKENS * n_in * 2)
        self.launch(th, GEMM_NN, self.gemm_ns(TOKENS, n_in, n_out), (max(1, n_in // 128), TOKENS // 128, 1),
                    api="cudaLaunchKernelExC")
        self.op_end(th)
        self.leaf(th, "aten::t", shapes([[TOKENS, n_out]], [BF16]))
        self.op_begin(th, "aten::mm", shapes([[n_out, TOKENS], [TOKENS, n_in]], [BF16, BF16],
                                             strides=[[1, n_out], [n_in, 1]]))
        self.launch(th, GEMM_NT, self.gemm_ns(n_out, n_in, TOKENS), (max(1, n_in // 256), max(1, n_out // 128), 1),
                    api="cudaLaunchKernelExC")
        self.op_end(th)
        self.node_end(th)
        self.free(th, grad_in)

    def simple_backward(self, th: Thread, node: str, seq: int, flow_id: int, op: Optional[str] = None,
                        kernels: tuple = (), n_elems: int = TOKENS * HIDDEN) -> None:
        self.node(th, node, seq, flow_id)
        if op is not None:
            self.op_begin(th, op, shapes([[BATCH, SEQ, n_elems // TOKENS]] * 2, [BF16, BF16]))
            tmp = self.alloc(th, n_elems * 2) if kernels else None
            for k in kernels:
                self.launch(th, k, self.mem_ns(n_elems * 6), self.grid_for(n_elems, 512))
            self.op_end(th)
            if tmp is not None:
                self.free(th, tmp)
        self.node_end(th)

    def accumulate_grad(self, th: Thread) -> None:
        self.op_begin(th, "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad")
        self.op_begin(th, "torch::autograd::AccumulateGrad")
        self.op_begin(th, "aten::detach", shapes([[HIDDEN, HIDDEN]], [BF16]))
        self.leaf(th, "detach", shapes([[HIDDEN, HIDDEN]], [BF16]), 200, 800)
        self.op_end(th, 300, 1000)
        self.op_end(th)
        self.op_end(th)

    def allreduce(self, th: Thread, nelems: int) -> None:
        ranks = "[" + ", ".join(str(r) for r in range(WORLD)) + "]"
        coll = (f'"Collective name": "allreduce", "In msg nelems": {nelems}, "Out msg nelems": {nelems}, '
                f'"Group size": {WORLD}, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]", '
                f'"Process Group Name": "0", "Process Group Description": "default_pg", '
                f'"Process Group Ranks": "{ranks}"')
        # the bucket is divided by the world size before it is reduced
        self.op_begin(th, "aten::div_", shapes([[nelems], []], [BF16, "Scalar"], ["", str(WORLD)]))
        self.launch(th, MUL_SCALAR, self.mem_ns(nelems * 4), self.grid_for(nelems, 512))
        self.op_end(th)
        frame = self.op_begin(
            th, "record_param_comms",
            shapes([[[nelems]], [], [], [], [], [], [], [], [], []],
                   ["TensorList", "", "", "Scalar", "", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar"],
                   ["", "", "", "0", "", "[]", "[]", "0", "1", str(WORLD)], [[[1]], [], [], [], [], [], [], [], [],
                                                                            []]),
            extra=(f'"Collective name": "allreduce", "Process Group Description": "default_pg", "dtype": "BFloat16", '
                   f'"Rank": {RANK}, "Out msg nelems": {nelems}, "Process Group Name": "0", "Global rank stride": 1, '
                   f'"Out split size": "[]", "In split size": "[]", "Process Group Ranks": "{ranks}", '
                   f'"Group size": {WORLD}, "Global rank start": 0, "In msg nelems": {nelems}'))
        ann = self.op_begin(th, "nccl:all_reduce", cat="user_annotation")
        self.runtime_only(th, "cudaEventRecord", 1500, 4000)
        self.runtime_only(th, "cudaStreamWaitEvent", 1200, 3500)
        # NCCL waits for the compute stream (the event) before it starts
        self.stream_t[NCCL_STREAM] = max(self.stream_t[NCCL_STREAM], self.stream_t[COMPUTE_STREAM])
        dur = int(nelems * 2 * 2 * (WORLD - 1) / WORLD / (180e9 * self.rng.uniform(0.7, 1.0)) * 1e9) + 8000
        k0, k1 = self.launch(th, NCCL_ALLREDUCE, dur, (16, 1, 1), api="cudaLaunchKernelExC", stream=NCCL_STREAM,
                             extra=", " + coll)
        self.runtime_only(th, "cudaEventRecord", 1500, 4000)
        self.op_end(th)
        self.op_end(th)
        self.gpu_annotation("nccl:all_reduce", NCCL_STREAM, k0 - 1200, k1 + 800, ann.ext)
        del frame

    def block_backward(self, th: Thread, saved: list, acts: list) -> None:
        """Backward of one block; ``saved`` holds (seq, fwd start) of its forward ops in order."""
        it = iter(reversed(saved))

        def nxt():
            return next(it)

        self.simple_backward(th, "AddBackward0", *nxt())                               # residual 2
        self.mm_backward(th, *nxt(), FFN, HIDDEN)
        self.simple_backward(th, "GeluBackward0", *nxt(), op="aten::gelu_backward", kernels=(GELU_BWD,),
                             n_elems=TOKENS * FFN)
        self.mm_backward(th, *nxt(), HIDDEN, FFN)                                      # fc1
        self.simple_backward(th, "NativeLayerNormBackward0", *nxt(), op="aten::native_layer_norm_backward",
                             kernels=(LN_BWD_INPUT, LN_BWD_GAMMA))
        for _ in range(2):
            self.accumulate_grad(th)
        self.simple_backward(th, "AddBackward0", *nxt())                               # residual 1
        self.mm_backward(th, *nxt(), HIDDEN, HIDDEN)                                   # out proj
        self.simple_backward(th, "ViewBackward0", *nxt(), op="aten::reshape")
        self.simple_backward(th, "CloneBackward0", *nxt())
        self.simple_backward(th, "TransposeBackward0", *nxt(), op="aten::transpose")
        seq, flow_id = nxt()  # sdpa
        self.node(th, "ScaledDotProductFlashAttentionBackward0", seq, flow_id)
        self.op_begin(th, "aten::_scaled_dot_product_flash_attention_backward",
                      shapes([[BATCH, HEADS, SEQ, HEAD_DIM]] * 5, [BF16] * 5))
        self.op_begin(th, "aten::_flash_attention_backward",
                      shapes([[BATCH, SEQ, HEADS, HEAD_DIM]] * 5, [BF16] * 5))
        dq = self.alloc(th, TOKENS * HIDDEN * 4)
        self.op_begin(th, "aten::zeros", shapes([[], [], [], [], []], ["ScalarList", "Scalar", "", "", ""],
                                                [f"[{BATCH}, {SEQ}, {HEADS}, {HEAD_DIM}]", "6", "", "", ""]))
        self.op_begin(th, "aten::zero_", shapes([[BATCH, SEQ, HEADS, HEAD_DIM]], ["float"]))
        self.memory_op(th, "cudaMemsetAsync", "Memset (Device)", "gpu_memset", TOKENS * HIDDEN * 4, 2200.0)
        self.op_end(th)
        self.op_end(th)
        flops = 10 * BATCH * SEQ * SEQ * HIDDEN // 2
        for kern, cost in ((FLASH_BWD_DOT, self.mem_ns(TOKENS * HIDDEN * 4)),
                           (FLASH_BWD_MAIN, int(flops / (TFLOPS_BF16 * self.rng.uniform(0.35, 0.5)) * 1e9)),
                           (FLASH_BWD_CONVERT, self.mem_ns(TOKENS * HIDDEN * 6))):
            self.launch(th, kern, cost, (SEQ // 128, BATCH * HEADS, 1))
        self.op_end(th)
        self.op_end(th)
        self.node_end(th)
        self.free(th, dq)
        for _ in range(3):
            self.simple_backward(th, "TransposeBackward0", *nxt(), op="aten::transpose")
        self.simple_backward(th, "UnbindBackward0", *nxt(), op="aten::stack", kernels=(CAT,),
                             n_elems=TOKENS * 3 * HIDDEN)
        self.simple_backward(th, "ViewBackward0", *nxt(), op="aten::reshape")
        self.mm_backward(th, *nxt(), HIDDEN, 3 * HIDDEN)                               # qkv
        self.simple_backward(th, "NativeLayerNormBackward0", *nxt(), op="aten::native_layer_norm_backward",
                             kernels=(LN_BWD_INPUT, LN_BWD_GAMMA))
        # the residual stream's two gradients are summed by the engine
        self.op_begin(th, "aten::add", shapes([[BATCH, SEQ, HIDDEN]] * 2 + [[]], [BF16, BF16, "Scalar"],
                                              ["", "", "1"]))
        self.launch(th, ADD, self.mem_ns(TOKENS * HIDDEN * 6), self.grid_for(TOKENS * HIDDEN, 512))
        self.op_end(th)
        for _ in range(6):
            self.accumulate_grad(th)
        for block in acts:
            self.free(th, block)
        # one DDP bucket per block (12 * hidden^2 weights + 4 norm vectors)
        self.allreduce(th, 12 * HIDDEN * HIDDEN + 4 * HIDDEN)

    # ---- one training step ----------------------------------------------------------------
    def step(self, n: int) -> None:
        self.rng = random.Random(self.seed * 1_000_003 + n)
        m = Thread(MAIN_TID, self.cpu)
        m.t = self.clock
        step_frame = self.op_begin(m, f"ProfilerStep#{n}", cat="user_annotation")
        gpu_step_start = None
        self.py_begin(m, "train.py(341): train_step")
        # data loading and host-to-device copies
        self.py_begin(m, "torch/utils/data/dataloader.py(733): __next__")
        self.op_begin(m, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", cat="user_annotation")
        self.py_leaf(m, "torch/utils/data/dataloader.py(789): _next_data")
        for _ in range(2):
            self.op_begin(m, "aten::stack", shapes([[], []], ["TensorList", "Scalar"], ["", "0"]))
            self.op_begin(m, "aten::cat", shapes([[], []], ["TensorList", "Scalar"], ["", "0"]))
            self.op_end(m, 20_000, 60_000)
            self.op_end(m)
        self.op_end(m)
        self.py_end(m)
        for _ in range(2):
            self.py_begin(m, "<method 'to' of 'torch._C.TensorBase' objects>")
            self.op_begin(m, "aten::to", shapes([[BATCH, SEQ], [], [], [], [], [], [], []],
                                                ["long int", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar",
                                                 "Scalar", ""], ["", "4", "0", "1", "0", "True", "False", ""]))
            self.op_begin(m, "aten::_to_copy", shapes([[BATCH, SEQ], [], [], [], [], [], []],
                                                      ["long int", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar",
                                                       ""]))
            self.leaf(m, "aten::empty_strided", shapes([[], [], [], [], [], []],
                                                       ["ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar",
                                                        "Scalar"], [f"[{BATCH}, {SEQ}]", f"[{SEQ}, 1]", "4", "0",
                                                                    "1", "False"]))
            self.op_begin(m, "aten::copy_", shapes([[BATCH, SEQ], [BATCH, SEQ], []], ["long int", "long int",
                                                                                       "Scalar"], ["", "", "True"]))
            self.memory_op(m, "cudaMemcpyAsync", "Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", TOKENS * 8, 22.0)
            if gpu_step_start is None:
                gpu_step_start = self.stream_t[COMPUTE_STREAM] - 2000
            self.op_end(m)
            self.op_end(m)
            self.op_end(m)
            self.py_end(m)
        # forward
        self.py_begin(m, "torch/nn/modules/module.py(1773): _wrapped_call_impl")
        self.py_begin(m, "torch/nn/modules/module.py(1784): _call_impl")
        self.py_begin(m, "nn.Module: DistributedDataParallel_0", module="DistributedDataParallel_0")
        self.py_begin(m, "torch/nn/parallel/distributed.py(1658): forward")
        fwd = self.op_begin(m, "DistributedDataParallel.forward", cat="user_annotation")
        fwd_gpu0 = self.stream_t[COMPUTE_STREAM]
        self.module_enter(m, "GPT", 0, "model.py(203): forward")
        top_saved: list = []
        top_acts: list = []
        self.module_enter(m, "Embedding", 0, "torch/nn/modules/sparse.py(191): forward")
        self.py_begin(m, "torch/nn/functional.py(2516): embedding")
        self.fwd_op(m, "aten::embedding", shapes([[VOCAB, HIDDEN], [BATCH, SEQ], [], [], []],
                                                 [BF16, "long int", "Scalar", "Scalar", "Scalar"],
                                                 ["", "", "-1", "False", "False"]), top_saved)
        self.leaf(m, "aten::reshape", shapes([[BATCH, SEQ], []], ["long int", ""], ["", "[-1]"]))
        self.op_begin(m, "aten::index_select", shapes([[VOCAB, HIDDEN], [], [TOKENS]], [BF16, "Scalar", "long int"],
                                                      ["", "0", ""]))
        top_acts.append(self.alloc(m, TOKENS * HIDDEN * 2))
        self.launch(m, EMBED_FWD, self.mem_ns(TOKENS * HIDDEN * 4), self.grid_for(TOKENS * HIDDEN, 1024))
        self.op_end(m)
        self.op_end(m)
        self.py_end(m)
        self.module_exit(m)
        per_layer: list = []
        for layer in range(self.layers):
            saved: list = []
            acts: list = []
            self.block_forward(m, layer, saved, acts)
            per_layer.append((saved, acts))
        self.layer_norm(m, 2 * self.layers, top_saved, top_acts)
        self.linear(m, 4 * self.layers, HIDDEN, VOCAB, top_saved, top_acts)
        self.module_exit(m)
        # loss
        self.py_begin(m, "torch/nn/functional.py(3462): cross_entropy")
        self.py_begin(m, "<built-in function cross_entropy_loss>")
        self.op_begin(m, "aten::cross_entropy_loss", shapes([[TOKENS, VOCAB], [TOKENS], [], [], [], []],
                                                            [BF16, "long int", "", "Scalar", "Scalar", "Scalar"],
                                                            ["", "", "", "1", "-100", "0.0"]))
        self.fwd_op(m, "aten::log_softmax", shapes([[TOKENS, VOCAB], [], []], [BF16, "Scalar", ""], ["", "1", ""]),
                    top_saved)
        self.op_begin(m, "aten::_log_softmax", shapes([[TOKENS, VOCAB], [], []], [BF16, "Scalar", "Scalar"],
                                                      ["", "1", "False"]))
        top_acts.append(self.alloc(m, TOKENS * VOCAB * 2))
        self.launch(m, SOFTMAX_FWD, self.mem_ns(TOKENS * VOCAB * 4), (TOKENS, 1, 1))
        self.op_end(m)
        self.op_end(m)
        self.fwd_op(m, "aten::nll_loss_nd", shapes([[TOKENS, VOCAB], [TOKENS], [], [], []],
                                                   [BF16, "long int", "", "Scalar", "Scalar"],
                                                   ["", "", "", "1", "-100"]), top_saved)
        self.op_begin(m, "aten::nll_loss", shapes([[TOKENS, VOCAB], [TOKENS], [], [], []],
                                                  [BF16, "long int", "", "Scalar", "Scalar"]))
        self.op_begin(m, "aten::nll_loss_forward", shapes([[TOKENS, VOCAB], [TOKENS], [], [], []],
                                                          [BF16, "long int", "", "Scalar", "Scalar"]))
        self.launch(m, NLL_FWD, self.mem_ns(TOKENS * 64), (1, 1, 1))
        self.op_end(m)
        self.op_end(m)
        self.op_end(m)
        self.op_end(m)
        self.py_end(m)
        self.py_end(m)
        self.op_end(m)  # DDP forward annotation
        self.gpu_annotation("DistributedDataParallel.forward", COMPUTE_STREAM, fwd_gpu0,
                            self.stream_t[COMPUTE_STREAM], fwd.ext)
        for _ in range(4):
            self.py_end(m)
        # backward: the main thread waits in run_backward while the autograd thread works
        self.py_begin(m, "torch/_tensor.py(648): backward")
        self.py_begin(m, "torch/autograd/__init__.py(353): backward")
        self.py_begin(m, "torch/autograd/graph.py(824): _engine_run_backward")
        self.py_begin(m, "<method 'run_backward' of 'torch._C._EngineBase' objects>")
        b = Thread(BWD_TID, self.bwd)
        b.t = m.t + self.rng.randint(5000, 15000)
        it = iter(reversed(top_saved))
        self.simple_backward(b, "NllLossBackward0", *next(it), op="aten::nll_loss_backward", kernels=(NLL_BWD,),
                             n_elems=TOKENS * VOCAB)
        self.simple_backward(b, "LogSoftmaxBackward0", *next(it), op="aten::_log_softmax_backward_data",
                             kernels=(SOFTMAX_BWD,), n_elems=TOKENS * VOCAB)
        self.mm_backward(b, *next(it), HIDDEN, VOCAB)  # lm head
        self.simple_backward(b, "NativeLayerNormBackward0", *next(it), op="aten::native_layer_norm_backward",
                             kernels=(LN_BWD_INPUT, LN_BWD_GAMMA))
        for layer in reversed(range(self.layers)):
            saved, acts = per_layer[layer]
            self.block_backward(b, saved, acts)
        self.simple_backward(b, "EmbeddingBackward0", *next(it), op="aten::embedding_dense_backward",
                             kernels=(EMBED_BWD,))
        for _ in range(3):
            self.accumulate_grad(b)
        self.allreduce(b, VOCAB * HIDDEN + 2 * HIDDEN)
        for block in top_acts:
            self.free(b, block)
        # the engine waits for the reducer's last bucket: compute stream waits on NCCL
        self.runtime_only(b, "cudaStreamWaitEvent")
        self.stream_t[COMPUTE_STREAM] = max(self.stream_t[COMPUTE_STREAM], self.stream_t[NCCL_STREAM])
        m.t = max(m.t, b.t) + self.rng.randint(3000, 9000)
        for _ in range(4):
            self.py_end(m)
        # optimizer
        self.py_begin(m, "torch/optim/optimizer.py(485): wrapper")
        opt = self.op_begin(m, "Optimizer.step#AdamW.step", cat="user_annotation")
        opt_gpu0 = self.stream_t[COMPUTE_STREAM]
        self.py_begin(m, "torch/optim/adamw.py(208): step")
        n_params = self.layers * 8 + 4
        self.op_begin(m, "aten::_fused_adamw_", shapes([[]] * 15, ["TensorList"] * 5 + ["Scalar"] * 7 + ["", "", ""],
                                                       [""] * 5 + ["0.0003", "0.9", "0.95", "0.1", "1e-08", "False",
                                                                   "False", "", "", ""]))
        for _ in range((n_params + 47) // 48):
            self.launch(m, ADAM, self.mem_ns(48 * HIDDEN * HIDDEN * 2 * 4), (320, 1, 1))
        self.op_end(m)
        self.py_end(m)
        self.op_end(m)
        self.gpu_annotation("Optimizer.step#AdamW.step", COMPUTE_STREAM, opt_gpu0, self.stream_t[COMPUTE_STREAM],
                            opt.ext)
        self.py_end(m)
        self.py_begin(m, "torch/optim/optimizer.py(1001): zero_grad")
        self.op_begin(m, "Optimizer.zero_grad#AdamW.zero_grad", cat="user_annotation")
        self.op_end(m, 30_000, 90_000)
        self.py_end(m)
        # loss.item(): a device-to-host copy and a sync
        self.py_begin(m, "<method 'item' of 'torch._C.TensorBase' objects>")
        self.op_begin(m, "aten::item", shapes([[]], [BF16]))
        self.op_begin(m, "aten::_local_scalar_dense", shapes([[]], [BF16]))
        self.memory_op(m, "cudaMemcpyAsync", "Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", 2, 0.001)
        self.sync(m)
        self.op_end(m)
        self.op_end(m)
        self.py_end(m)
        self.py_end(m)  # train_step
        self.op_end(m, 2000, 6000)  # ProfilerStep
        self.gpu_annotation(f"ProfilerStep#{n}", COMPUTE_STREAM, gpu_step_start, self.stream_t[COMPUTE_STREAM],
                            step_frame.ext)
        self.clock = m.t + self.rng.randint(20_000, 60_000)


# ----------------------------------------------------------------------------- file layout


def _header(gen: Generator) -> str:
    header = {
        "deviceProperties": kw.device_properties_text(DEVICES), "cupti_version": 24, "cuda_runtime_version": 12040,
        "distributedInfo": kw.distributed_info(RANK, WORLD, nccl_version="2.21.5"),
        "record_shapes": 1, "profile_memory": 1, "with_stack": 1, "with_modules": 1, "cuda_driver_version": 12080,
        "trace_id": f"{random.Random(gen.seed).getrandbits(128):032X}",
    }
    return kw.document_head(header)


def _metadata_events(t0: int, t_end: int) -> tuple[str, int]:
    """The metadata events, the profiler's span and markers (the last event: no comma after it)."""
    meta = [("process_name", PID, 0, {"name": "python3"}), ("process_labels", PID, 0, {"labels": "CPU"}),
            ("process_sort_index", PID, 0, {"sort_index": PID})]
    for dev in range(8):
        meta += [("process_name", dev, 0, {"name": "python3"}), ("process_labels", dev, 0, {"labels": f"GPU {dev}"}),
                 ("process_sort_index", dev, 0, {"sort_index": 16777216 + dev})]
    for stream in (COMPUTE_STREAM, NCCL_STREAM):
        meta += [("thread_name", GPU, stream, {"name": f"stream {stream} "}),
                 ("thread_sort_index", GPU, stream, {"sort_index": stream + 268435456})]
    meta += [("thread_name", PID, MAIN_TID, {"name": f"thread {MAIN_TID} (python3)"}),
             ("thread_sort_index", PID, MAIN_TID, {"sort_index": MAIN_TID}),
             ("thread_name", PID, BWD_TID, {"name": f"thread {BWD_TID} (pt_autograd_0)"}),
             ("thread_sort_index", PID, BWD_TID, {"sort_index": BWD_TID})]
    events = [kw.metadata_event_text(name, pid, tid, t0, args) for name, pid, tid, args in meta]
    events += [
        kw.profiler_span_text(t0, t_end - t0),
        kw.event_text(f'"name": "process_sort_index", "ph": "M", "ts": {us(t0)}', '"pid": "Spans", "tid": 0',
                      args='"sort_index": 536870912'),
        kw.instant_event_text("Iteration Start: PyTorch Profiler", "Traces", "Trace PyTorch Profiler", t0),
        kw.instant_event_text("Record Window End", "", "", t_end + 1_234_567),
    ]
    return ",\n".join(events), len(events)


def generate(out: str | os.PathLike, *, size_mb: Optional[float] = None, events: Optional[int] = None,
             gz: bool = False, gz_level: int = 6, seed: int = SEED, layers: int = 24,
             quiet: bool = False) -> dict:
    """Write the trace; returns {"path", "bytes" (uncompressed), "file_bytes", "events", "steps"}."""
    out = Path(out)
    if size_mb is None and events is None:
        size_mb = 100.0
    target_bytes = int(size_mb * 1_000_000) if size_mb is not None else None
    out.parent.mkdir(parents=True, exist_ok=True)
    gen = Generator(seed=seed, layers=layers)
    spill_dir = out.parent
    names = ("mem", "py", "gpu", "gpu_ann")
    spill_paths = {k: spill_dir / f".{out.name}.{k}.part" for k in names}
    started = time.perf_counter()
    handle: IO[bytes] = kw.open_output(out, gz, gz_level)
    try:
        with handle:
            header = _header(gen)
            handle.write(header.encode())
            written = len(header)
            spills = {k: Section(open(p, "w", encoding="ascii", buffering=1 << 20)) for k, p in spill_paths.items()}
            try:
                step = gen.first_step
                t0 = gen.clock
                while True:
                    gen.cpu.clear()
                    gen.bwd.clear()
                    gen.step(step)
                    text = "".join(gen.cpu) + "".join(gen.bwd)
                    handle.write(text.encode())
                    written += len(text)
                    for key, buf in (("mem", gen.mem), ("py", gen.py), ("gpu", gen.gpu), ("gpu_ann", gen.gpu_ann)):
                        spills[key].parts.extend(buf)
                        spills[key].flush()
                        buf.clear()
                    step += 1
                    total = written + sum(s.bytes for s in spills.values())
                    if not quiet and (step - gen.first_step) % 5 == 0:
                        print(f"  step {step - gen.first_step}: {total / 1e6:.0f} MB, {gen.events:,} events",
                              file=sys.stderr)
                    if target_bytes is not None and total >= target_bytes:
                        break
                    if events is not None and gen.events >= events:
                        break
                # the <module> and main() frames span the whole run
                t_end = gen.clock
                py_tail = (
                    kw.x_event_text("python_function", "train.py(412): <module>", PID, MAIN_TID, t0 - 80_000,
                                    t_end - t0 + 90_000,
                                    f'"Python parent id": null, "Python id": 1, "Ev Idx": {gen.next_ev()}') + ",\n"
                    + kw.x_event_text("python_function", "train.py(388): main", PID, MAIN_TID, t0 - 70_000,
                                      t_end - t0 + 75_000,
                                      f'"Python parent id": 1, "Python id": 2, "Ev Idx": {gen.next_ev()}') + ",\n")
                spills["py"].parts.append(py_tail)
                gen.events += 2
                for s in spills.values():
                    s.flush()
                    s.handle.close()
                for key in names:
                    with open(spill_paths[key], "rb") as src:
                        shutil.copyfileobj(src, handle, 8 << 20)
                    written += spills[key].bytes
                meta_text, n_meta = _metadata_events(t0 - 100_000, max(t_end, max(gen.stream_t.values())))
                gen.events += n_meta
                tail = meta_text + kw.document_tail(out.name, BASE_TIME_NS)
                handle.write(tail.encode())
                written += len(tail)
            finally:
                for s in spills.values():
                    if not s.handle.closed:
                        s.handle.close()
    finally:
        for p in spill_paths.values():
            try:
                p.unlink()
            except FileNotFoundError:
                pass
    elapsed = time.perf_counter() - started
    result = {"path": str(out), "bytes": written, "file_bytes": out.stat().st_size, "events": gen.events,
              "steps": step - gen.first_step, "seconds": elapsed}
    return result


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="output path (.json, or .json.gz with --gz)")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--size-mb", type=float, help="at least this many MB (10^6 bytes) of uncompressed JSON "
                                                    "(default 100)")
    size.add_argument("--events", type=int, help="at least this many trace events (whole steps are written)")
    ap.add_argument("--gz", action="store_true", help="gzip the output (appends .gz to OUT if missing)")
    ap.add_argument("--gz-level", type=int, default=6, help="gzip compression level (default 6, as gzip does)")
    ap.add_argument("--layers", type=int, default=24, help="transformer blocks per step (default 24; fewer "
                                                          "makes steps, and so the granularity, smaller)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    out = args.out
    if args.gz and not out.endswith(".gz"):
        out += ".gz"
    res = generate(out, size_mb=args.size_mb, events=args.events, gz=args.gz, gz_level=args.gz_level,
                   seed=args.seed, layers=args.layers, quiet=args.quiet)
    gz_note = f", {res['file_bytes'] / 1e6:.1f} MB gzipped" if args.gz else ""
    print(f"{res['path']}: {res['bytes'] / 1e6:.1f} MB JSON{gz_note}, {res['events']:,} events, "
          f"{res['steps']} steps, in {res['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
