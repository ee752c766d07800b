"""A Kineto trace with planted op shapes and kernel durations: the known answer of the efficiency analysis.

One rank on one H100, three steps (``ProfilerStep#1..3``). Each step runs, back to back on stream 7:

* ``aten::linear`` -> ``aten::addmm`` (bf16): bias[N], mat1[M, K], mat2[K, N] with M = N = 2000,
  K = 4000, one kernel of 80 us; the launch call carries the External id of ``aten::addmm`` (the
  innermost op), as PyTorch writes it;
* ``aten::mul`` (fp32) of two 8,000,000-element tensors, one kernel of 60 us;
* ``aten::cat`` (no cost model), one kernel of 10 us.

Before the first step one kernel runs whose launch call is outside the window (unattributed).

With the peaks of ``efficiency_roofline.gpus.toml`` (bf16 tensor 1000 TFLOP/s, fp32 vector
50 TFLOP/s, 2000 GB/s) the answers are round: the addmm needs max(3.2e10 FLOP / 1e6 FLOP/ns,
40,004,000 B / 2000 B/ns) = 32,000 ns (efficiency 0.4, compute-bound); the mul needs max(160,
48,000) = 48,000 ns (0.8, memory-bound). ``efficiency_roofline.truth.json`` holds every expected
figure, counted here from the planted shapes and durations (never by running traceview).

The file is byte-identical on every run (integer times, fixed order, gzip mtime 0).
``python sample_traces/make_efficiency.py [OUT_DIR]``.
"""

from __future__ import annotations

import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import kineto_writer as kw  # noqa: E402  (the Kineto JSON every generator writes)

NAME = "efficiency_roofline"
STEPS = 3
BASE_US = 2_000_000_000  # ts origin, in us
M, N, K = 2000, 2000, 4000
MUL_ELEMENTS = 8_000_000
ADDMM_NS, MUL_NS, CAT_NS, ORPHAN_NS = 80_000, 60_000, 10_000, 5_000
PEAKS = {"bf16_tensor_flop_per_ns": 1_000_000, "fp32_vector_flop_per_ns": 50_000, "bytes_per_ns": 2000}
SPEC_TOML = """# Round peaks for the efficiency_roofline sample (make_efficiency.py): pass this file as
# Options(gpu_specs=...) (docs/metrics.md, "Hardware peaks" and "Efficiency")
[gpus.h100_sxm]
memory_bandwidth_gbs = 2000
vector_tflops = { fp32 = 50 }
tensor_tflops = { bf16 = 1000 }
"""


class Writer:
    """Events in Kineto's layout; times in ns, written as us with three decimals."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.ids = 100
        self.correlation = 5000

    def x(self, cat: str, name: str, start_ns: int, dur_ns: int, args: dict, pid: int = 1000, tid: int = 1000) -> None:
        self.events.append(kw.x_event(cat, name, pid, tid, kw.micros(BASE_US * 1000 + start_ns), kw.micros(dur_ns),
                                      args))

    def op(self, name: str, start_ns: int, dur_ns: int, inputs: tuple | None) -> int:
        self.ids += 1
        args: dict = {"External id": self.ids, "Record function id": 0}
        if inputs is not None:
            for key, value in zip(("Input Dims", "Input type", "Input Strides", "Concrete Inputs"), inputs):
                if value is not None:
                    args[key] = value
        self.x("cpu_op", name, start_ns, dur_ns, args)
        return self.ids

    def launch(self, external: int | None, api_start_ns: int, kernel: str, gpu_start_ns: int, dur_ns: int) -> None:
        self.correlation += 1
        args = {"cbid": 211, "correlation": self.correlation}
        if external is not None:
            args["External id"] = external
            self.x("cuda_runtime", "cudaLaunchKernel", api_start_ns, 4_000, args)
        self.x("kernel", kernel, gpu_start_ns, dur_ns,
               {"External id": external or 0, "queued": 0, "device": 0, "context": 1, "stream": 7,
                "correlation": self.correlation, "grid": [1024, 1, 1], "block": [256, 1, 1]}, pid=0, tid=7)


def build() -> tuple[dict, dict]:
    w = Writer()
    w.launch(None, 0, "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >", 0,
             ORPHAN_NS)
    addmm_inputs = ([[N], [M, K], [K, N], [], []], ["c10::BFloat16"] * 3 + ["Scalar", "Scalar"],
                    [[1], [K, 1], [1, K], [], []], ["", "", "", "1", "1"])
    mul_inputs = ([[MUL_ELEMENTS], [MUL_ELEMENTS]], ["float", "float"], [[1], [1]], ["", ""])
    cat_inputs = ([[[1000], [1000]], []], ["TensorList", "Int"], [[], []], ["", "0"])
    gpu = 1_000_000
    for step in range(1, STEPS + 1):
        t = step * 1_000_000
        w.x("user_annotation", f"ProfilerStep#{step}", t, 900_000, {"External id": 0, "Record function id": 0})
        w.op("aten::linear", t + 10_000, 60_000, ([[M, K], [N, K], [N]], ["c10::BFloat16"] * 3, None, ["", "", ""]))
        addmm = w.op("aten::addmm", t + 20_000, 40_000, addmm_inputs)
        w.launch(addmm, t + 30_000, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", gpu, ADDMM_NS)
        mul = w.op("aten::mul", t + 100_000, 20_000, mul_inputs)
        w.launch(mul, t + 105_000, "void at::native::vectorized_elementwise_kernel<4, MulFunctor<float> >",
                 gpu + ADDMM_NS, MUL_NS)
        cat = w.op("aten::cat", t + 150_000, 20_000, cat_inputs)
        w.launch(cat, t + 155_000, "void at::native::CatArrayBatchedCopy<float>", gpu + ADDMM_NS + MUL_NS, CAT_NS)
        gpu += 1_000_000
    # the same H100 as the synthetic job
    doc = kw.document({"deviceProperties": kw.device_properties([0]), "record_shapes": 1}, w.events,
                      trace_name=f"{NAME}.pt.trace.json", base_time_ns=0)
    return doc, truth()


def truth() -> dict:
    """The expected figures, from the planted shapes and durations."""
    addmm_flops = 2 * M * N * K
    addmm_bytes = (N + M * K + K * N + M * N) * 2  # bias, mat1, mat2 read once; out written once (bf16)
    mul_flops, mul_bytes = MUL_ELEMENTS, 3 * 4 * MUL_ELEMENTS
    addmm_roof = max(addmm_flops / PEAKS["bf16_tensor_flop_per_ns"], addmm_bytes / PEAKS["bytes_per_ns"])
    mul_roof = max(mul_flops / PEAKS["fp32_vector_flop_per_ns"], mul_bytes / PEAKS["bytes_per_ns"])
    window = ADDMM_NS + MUL_NS + CAT_NS  # the step's kernels run back to back
    compute_roof = addmm_flops / PEAKS["bf16_tensor_flop_per_ns"] + mul_flops / PEAKS["fp32_vector_flop_per_ns"]
    return {
        "gpu": "NVIDIA H100 80GB HBM3", "steps": STEPS, "peaks": PEAKS,
        "op_types": {
            "aten::addmm": {"dtype": "bf16", "calls": STEPS, "gpu_ns": STEPS * ADDMM_NS, "flops": STEPS * addmm_flops,
                            "bytes": STEPS * addmm_bytes, "roofline_ns": STEPS * addmm_roof,
                            "efficiency": addmm_roof / ADDMM_NS, "bound": "compute"},
            "aten::mul": {"dtype": "fp32", "calls": STEPS, "gpu_ns": STEPS * MUL_NS, "flops": STEPS * mul_flops,
                          "bytes": STEPS * mul_bytes, "roofline_ns": STEPS * mul_roof, "efficiency": mul_roof / MUL_NS,
                          "bound": "memory"},
        },
        "per_step": {"window_ns": window, "flops": addmm_flops + mul_flops, "hfu": compute_roof / window},
        "coverage": {"kernel_ns": STEPS * window + ORPHAN_NS, "op_ns": STEPS * window,
                     "modelled_ns": STEPS * (ADDMM_NS + MUL_NS), "no_launch_call_ns": ORPHAN_NS},
        "unmodelled": {"aten::cat": STEPS * CAT_NS},
    }


def main(out: pathlib.Path = HERE) -> pathlib.Path:
    doc, expected = build()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{NAME}.json.gz"
    with kw.open_output(path, gz=True) as gz:
        gz.write(kw.dumps(doc, indent=1).encode())
    (out / f"{NAME}.truth.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    (out / f"{NAME}.gpus.toml").write_text(SPEC_TOML)
    return path


if __name__ == "__main__":
    print(main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE))
