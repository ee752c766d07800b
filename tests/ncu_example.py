"""A small Kineto trace holding kernels of the shared ncu exports (../shared/traces/ncu/), under the
names PyTorch's profiler gives them (namespaces and argument types), for the measured analysis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders import write_kineto

#: (trace kernel name, grid, block, duration us, count): two ncu kernels under their Kineto names,
#: one under ncu's own name, and one whose launch configuration differs from the profiled one
KERNELS = (
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
     "c10::BFloat16, at::native::binary_internal::MulFunctor<float>>, std::array<char*, 3>>(int, "
     "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
     "at::native::binary_internal::MulFunctor<float>>, std::array<char*, 3>)", (42, 1, 1), (128, 1, 1), 6, 4),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8>"
     "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8::Params)", (332, 1, 1), (256, 1, 1), 300, 3),
    ("void Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(Params)", (152, 4, 1),
     (128, 1, 1), 25, 2),
    ("void Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(Params)", (76, 4, 1),
     (128, 1, 1), 14, 1),
    ("void at::native::elementwise_kernel<128, 2>(int)", (10, 1, 1), (128, 1, 1), 3, 2),
)


def kernel_events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    ts = 1000
    for name, grid, block, dur, count in KERNELS:
        for _ in range(count):
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                           "args": {"device": 0, "stream": 7, "grid": list(grid), "block": list(block),
                                    "correlation": len(events) + 1}})
            ts += dur + 2
    return events


def write_example(path: Path) -> Path:
    return write_kineto(path, kernel_events(), deviceProperties=[{"id": 0, "name": "NVIDIA GeForce RTX 5090"}])
