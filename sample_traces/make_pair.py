"""A before/after pair of small Kineto traces with a planted regression, for ``traceview diff`` and
``traceview check``.

``main(out_dir)`` writes ``out_dir/regression_pair/{base,new}/rank{0,1}.json.gz`` and
``out_dir/regression_pair/truth.json``. The output is byte-identical on every run: times are
integer ns drawn from a seeded generator, nothing reads the clock, gzip headers carry mtime 0 and
truth.json is written with sorted keys.

The job: 2 ranks (rank r on GPU r), 5 profiled steps per trace (``ProfilerStep#10..#14`` before,
``#20..#24`` after: step numbers need not match). Each step runs, on compute stream 7, a forward pass
(GEMM, GELU, a Triton pointwise kernel, a cast, softmax), a backward pass (two GEMMs, GELU
backward) with a DDP allreduce on stream 20 fully hidden under the data-gradient GEMM, and a fused
AdamW kernel after a small host-bound gap (10 us). The CPU launches each kernel just before the GPU
needs it, so the GPU runs back to back except at the planted gaps; steps are separated by a small
host-bound gap (8 us, the data loader). Every duration and gap gets independent per-step jitter
(uniform +-2% for kernels, +-1 us for gaps) on each rank and in each trace, so per-step noise can be
estimated. Both ranks start each step, and each allreduce, at the same instant (the collective
synchronises them), so there is no straggler.

Planted changes, after vs before (``truth.json`` under ``changes``):

* the data-gradient GEMM (``..._nn_n_tilesize128x128x64...``) is 30% slower in every step;
* a Triton layer-norm kernel appears (``triton_red_fused_native_layer_norm_2``, 30 us);
* the fp32 cast (``void at::native::elementwise_kernel<128, 2, ...direct_copy_kernel_cuda...>``)
  vanishes;
* the Triton pointwise kernel is renamed by Inductor (``triton_poi_fused_add_mul_0`` ->
  ``triton_poi_fused_add_mul_1``) and is otherwise unchanged: it must still match;
* a ``.item()`` appears after the loss: a 3 us ``Memcpy DtoH (Device -> Pageable)`` launched by
  ``cudaMemcpyAsync`` and followed by ``cudaStreamSynchronize``; the GPU then idles 16 us until the
  CPU launches the backward pass (a new ``blocking_copy`` finding, more idle time).

Everything else (GELU, softmax, the other GEMMs, AdamW, the allreduce) is unchanged up to jitter.
truth.json also holds, per trace, rank and step, the figures the diff compares (step time, GPU
window, busy, idle, compute, communication, memory, exposed communication, per-kernel totals by
plan key, with ``kernel_names`` mapping the keys to names), all accounted from the construction.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import kineto_writer as kw  # noqa: E402  (the Kineto JSON every generator writes)

SEED = 20260214
RANKS = (0, 1)
STEPS = {"base": tuple(range(10, 15)), "new": tuple(range(20, 25))}
COMPUTE_STREAM = 7
COMM_STREAM = 20
BASE_TIME_NS = 1_767_225_600_000_000_000  # baseTimeNanoseconds of both traces
START_NS = {"base": BASE_TIME_NS + 2_000_000_000, "new": BASE_TIME_NS + 2_000_000_000}
PIDS = {0: 41_000, 1: 41_001}

JITTER = 0.02  # kernel durations: uniform +-2%
GAP_JITTER_NS = 1_000  # gaps: uniform +-1 us
STEP_GAP_NS = 8_000  # host-bound gap between steps (data loader)
ADAM_GAP_NS = 10_000  # host-bound gap before the optimizer kernel
ITEM_GAP_NS = 16_000  # idle after the .item() copy until the backward pass is launched
LAUNCH_LEAD_NS = 2_000  # a launch call ends this long before its kernel starts
LAUNCH_CALL_NS = 5_000  # duration of a launch call
STEP_LEAD_NS = 30_000  # ProfilerStep starts this long before the first kernel of the step
COMM_OFFSET_NS = 10_000  # the allreduce starts this long after the data-gradient GEMM
REGRESSION = 1.30  # the data-gradient GEMM is this much slower after

_GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_{}_n_tilesize128x128x64_warpgroupsize1x1x1"
         "_execute_segment_k_off_kernel__5x_cublas")
GEMM_FWD = _GEMM.format("tn")
GEMM_DGRAD = _GEMM.format("nn")
GEMM_WGRAD = _GEMM.format("nt")
GELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
        "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
        "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl("
        "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::"
        "operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)")
GELU_BWD = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl("
            "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::"
            "operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul> >(int, "
            "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
            "{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
            "{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul>)")
TRITON_ADD = {"base": "triton_poi_fused_add_mul_0", "new": "triton_poi_fused_add_mul_1"}
TRITON_LN = "triton_red_fused_native_layer_norm_2"
CAST = ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
        "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::"
        "operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::"
        "{lambda(float)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::"
        "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::"
        "operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::"
        "{lambda(float)#1} const&)::{lambda(int)#1})")
SOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, float, "
           "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, c10::BFloat16 const*, int)")
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
        "(at::native::ADAM_MODE)1, false>, float*, float, float, float, float, float, float, bool, float*, "
        "float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
        "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, float, float, float, float, "
        "float, float, bool, float*, float*)")
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
MEMCPY_DTOH = "Memcpy DtoH (Device -> Pageable)"

# The compute-stream plan of one step: key, CPU op, launch API, base duration (ns), gap before (ns),
# which traces have it. The allreduce is placed separately (under the data-gradient GEMM).
PLAN: list[tuple[str, str, str, int, int, tuple[str, ...]]] = [
    ("gemm_fwd", "aten::mm", "cudaLaunchKernel", 150_000, 0, ("base", "new")),
    ("gelu", "aten::gelu", "cudaLaunchKernel", 40_000, 0, ("base", "new")),
    ("triton_add", "triton_poi_fused_add_mul", "cuLaunchKernel", 35_000, 0, ("base", "new")),
    ("cast", "aten::to", "cudaLaunchKernel", 25_000, 0, ("base",)),
    ("layer_norm", "triton_red_fused_native_layer_norm", "cuLaunchKernel", 30_000, 0, ("new",)),
    ("softmax", "aten::_softmax", "cudaLaunchKernel", 50_000, 0, ("base", "new")),
    ("item_copy", "aten::item", "cudaMemcpyAsync", 3_000, 0, ("new",)),
    ("gemm_dgrad", "aten::mm", "cudaLaunchKernel", 160_000, 0, ("base", "new")),
    ("gemm_wgrad", "aten::mm", "cudaLaunchKernel", 150_000, 0, ("base", "new")),
    ("gelu_bwd", "aten::gelu_backward", "cudaLaunchKernel", 45_000, 0, ("base", "new")),
    ("adam", "aten::_fused_adamw_", "cudaLaunchKernel", 60_000, ADAM_GAP_NS, ("base", "new")),
]
COMM_DUR_NS = 120_000
NAMES = {"gemm_fwd": GEMM_FWD, "gelu": GELU, "cast": CAST, "layer_norm": TRITON_LN, "softmax": SOFTMAX,
         "item_copy": MEMCPY_DTOH, "gemm_dgrad": GEMM_DGRAD, "gemm_wgrad": GEMM_WGRAD, "gelu_bwd": GELU_BWD,
         "adam": ADAM, "allreduce": NCCL}
GEOMETRY = {"gemm_fwd": ((16, 64, 1), (128, 1, 1)), "gemm_dgrad": ((16, 64, 1), (128, 1, 1)),
            "gemm_wgrad": ((16, 64, 1), (128, 1, 1)), "gelu": ((32768, 1, 1), (128, 1, 1)),
            "gelu_bwd": ((32768, 1, 1), (128, 1, 1)), "triton_add": ((8192, 1, 1), (256, 1, 1)),
            "layer_norm": ((4096, 1, 1), (512, 1, 1)), "cast": ((16384, 1, 1), (128, 1, 1)),
            "softmax": ((4096, 1, 1), (512, 1, 1)), "adam": ((1024, 1, 1), (512, 1, 1)),
            "allreduce": ((24, 1, 1), (640, 1, 1))}


def kernel_name(key: str, side: str) -> str:
    return TRITON_ADD[side] if key == "triton_add" else NAMES[key]


class _Rank:
    """Events and per-step figures of one rank of one trace."""

    def __init__(self, side: str, rank: int) -> None:
        self.side, self.rank = side, rank
        self.pid = PIDS[rank]
        self.tid = self.pid  # main thread
        self.events: list[dict] = []
        self.correlation = 1000 + 97 * rank
        self.external_id = 500 + 53 * rank
        self.steps: list[dict] = []

    def _x(self, cat: str, name: str, start: int, dur: int, pid: int, tid: int, args: dict | None = None) -> None:
        """A complete event; ``ts``/``dur`` in absolute ns until :func:`render`."""
        self.events.append(kw.x_event(cat, name, pid, tid, start, dur, args or None))

    def launch(self, api: str, op: str, call_start: int, gpu: dict) -> None:
        """A CPU op around one launch call, and the GPU activity it launched."""
        self.correlation += 1
        self.external_id += 1
        corr, ext = self.correlation, self.external_id
        call_end = call_start + LAUNCH_CALL_NS
        self._x("cpu_op", op, call_start - 1_500, LAUNCH_CALL_NS + 2_500, self.pid, self.tid,
                {"External id": ext, "Record function id": 0, "Sequence number": ext, "Fwd thread id": 0})
        cat = "cuda_driver" if api.startswith("cu") and not api.startswith("cuda") else "cuda_runtime"
        self._x(cat, api, call_start, call_end - call_start, self.pid, self.tid,
                {"External id": ext, "correlation": corr, "cbid": 211 if cat == "cuda_runtime" else 307})
        self._gpu(gpu, corr, ext)

    def _gpu(self, gpu: dict, corr: int, ext: int) -> None:
        args = {"External id": ext, "device": self.rank, "stream": gpu["stream"], "correlation": corr}
        if gpu["kind"] == "memcpy":
            args.update({"bytes": 4, "memory bandwidth (GB/s)": 0.0013})
            self._x("gpu_memcpy", gpu["name"], gpu["start"], gpu["dur"], self.rank, gpu["stream"], args)
        else:
            grid, block = GEOMETRY[gpu["key"]]
            args.update({"grid": list(grid), "block": list(block), "registers per thread": 128,
                         "shared memory": 0})
            self._x("kernel", gpu["name"], gpu["start"], gpu["dur"], self.rank, gpu["stream"], args)


def _jitter(rng: random.Random, dur: int) -> int:
    return int(round(dur * (1.0 + rng.uniform(-JITTER, JITTER))))


def _gap(rng: random.Random, gap: int) -> int:
    return gap + rng.randint(-GAP_JITTER_NS, GAP_JITTER_NS) if gap else 0


def build(side: str) -> tuple[dict[int, _Rank], dict]:
    """Lay out one trace (both ranks) and account its figures from the construction."""
    rng = random.Random(f"{SEED}:{side}")
    ranks = {r: _Rank(side, r) for r in RANKS}
    step_start = START_NS[side]
    figures: dict[int, list[dict]] = {r: [] for r in RANKS}
    step_starts: list[int] = []
    for step in STEPS[side]:
        step_starts.append(step_start)
        # per rank: the compute-stream timeline of this step (durations and gaps drawn per rank)
        timelines: dict[int, list[dict]] = {}
        for r in RANKS:
            cursor = step_start
            items = []
            for key, op, api, dur, gap, sides in PLAN:
                if side not in sides:
                    continue
                if side == "new" and key == "gemm_dgrad":
                    dur = int(round(dur * REGRESSION))
                if side == "new" and key == "gemm_dgrad":
                    gap = ITEM_GAP_NS  # the CPU was blocked in cudaStreamSynchronize (.item())
                start = cursor + _gap(rng, gap)
                d = _jitter(rng, dur)
                kind = "memcpy" if key == "item_copy" else "kernel"
                items.append({"key": key, "op": op, "api": api, "name": kernel_name(key, side), "kind": kind,
                              "stream": COMPUTE_STREAM, "start": start, "dur": d, "gap": start - cursor})
                cursor = start + d
            timelines[r] = items
        # the allreduce starts at the same instant on every rank, under the data-gradient GEMM
        comm_start = max(next(i["start"] for i in timelines[r] if i["key"] == "gemm_dgrad") for r in RANKS) \
            + COMM_OFFSET_NS
        for r in RANKS:
            comm = {"key": "allreduce", "op": "nccl:all_reduce", "api": "cudaLaunchKernel", "name": NCCL,
                    "kind": "kernel", "stream": COMM_STREAM, "start": comm_start, "dur": _jitter(rng, COMM_DUR_NS)}
            dgrad = next(i for i in timelines[r] if i["key"] == "gemm_dgrad")
            assert dgrad["start"] + 5_000 < comm_start and comm["start"] + comm["dur"] < dgrad["start"] + dgrad["dur"]
            _emit_step(ranks[r], timelines[r], comm)
            figures[r].append(_figures(timelines[r], comm))
        step_end_gpu = max(t[-1]["start"] + t[-1]["dur"] for t in timelines.values())
        step_start = step_end_gpu + _gap(rng, STEP_GAP_NS)
    step_starts.append(step_start)  # where the next step would begin: the end of the last one
    for r in RANKS:
        for i, step in enumerate(STEPS[side]):
            begin, end = step_starts[i] - STEP_LEAD_NS, step_starts[i + 1] - STEP_LEAD_NS
            ranks[r]._x("user_annotation", f"ProfilerStep#{step}", begin, end - begin, ranks[r].pid, ranks[r].tid)
            figures[r][i]["step"] = step
            figures[r][i]["step_time_ns"] = end - begin
    return ranks, {str(r): figures[r] for r in RANKS}


def _emit_step(rank: _Rank, items: list[dict], comm: dict) -> None:
    """The CPU side: each launch call ends LAUNCH_LEAD_NS before its activity starts (or, after a
    planted gap, starts after the GPU went idle: host-bound); the .item() copy is launched early and
    followed by cudaStreamSynchronize until the copy is done."""
    previous_end = None
    for i, item in enumerate(items):
        if item["key"] == "item_copy":
            softmax = items[i - 1]
            call_start = softmax["start"] + 1_000
            rank.launch(item["api"], "aten::_local_scalar_dense", call_start, item)
            copy_end = item["start"] + item["dur"]
            sync_start = call_start + LAUNCH_CALL_NS + 500
            sync_end = copy_end + 3_000
            rank._x("cuda_runtime", "cudaStreamSynchronize", sync_start, sync_end - sync_start, rank.pid, rank.tid,
                    {"correlation": rank.correlation + 1, "cbid": 131})
            rank.correlation += 1
            rank._x("cpu_op", "aten::item", call_start - 2_000, sync_end + 1_000 - (call_start - 2_000),
                    rank.pid, rank.tid)
            nxt = items[i + 1]
            # the next launch starts after the sync returned and after the GPU went idle: host-bound
            assert nxt["start"] - LAUNCH_LEAD_NS - LAUNCH_CALL_NS > sync_end + 1_000
            previous_end = copy_end
            continue
        call_start = item["start"] - LAUNCH_LEAD_NS - LAUNCH_CALL_NS
        if item["gap"] > 0:
            assert call_start >= previous_end, "a planted gap must be host-bound"
        rank.launch(item["api"], item["op"], call_start, item)
        if item["key"] == "gemm_dgrad":
            rank.launch(comm["api"], comm["op"], comm["start"] - LAUNCH_LEAD_NS - LAUNCH_CALL_NS, comm)
        previous_end = item["start"] + item["dur"]


def _figures(items: list[dict], comm: dict) -> dict:
    """Per-step figures of one rank, from the construction (docs/metrics.md definitions)."""
    first = items[0]["start"]
    last = items[-1]["start"] + items[-1]["dur"]
    busy = sum(i["dur"] for i in items)  # compute stream back to back; the allreduce lies under a GEMM
    compute = sum(i["dur"] for i in items if i["kind"] == "kernel")
    memory = sum(i["dur"] for i in items if i["kind"] == "memcpy")
    kernels: dict[str, int] = {}
    for i in items + [comm]:
        kernels[i["key"]] = kernels.get(i["key"], 0) + i["dur"]
    return {"gpu_window_ns": last - first, "busy_ns": busy, "idle_ns": last - first - busy, "compute_ns": compute,
            "communication_ns": comm["dur"], "memory_ns": memory, "exposed_comm_ns": 0, "overlap_pct": 100.0,
            "kernels": kernels}


def render(rank: _Rank) -> str:
    """One rank's Kineto JSON, one event per line (ts/dur in us with 3 decimals, relative to
    baseTimeNanoseconds; args with sorted keys)."""
    lines = []
    for e in sorted(rank.events, key=lambda e: (e["ts"], e["pid"], e["tid"], e["name"])):
        event = {**e, "ts": kw.micros(e["ts"] - BASE_TIME_NS), "dur": kw.micros(e["dur"])}
        if "args" in e:
            event["args"] = dict(sorted(e["args"].items()))
        lines.append(kw.event_line(event))
    meta = [
        kw.metadata_event("process_name", rank.pid, 0, None, {"name": "python3"}),
        kw.metadata_event("thread_name", rank.pid, rank.tid, None, {"name": "thread 1 (python3)"}),
        kw.metadata_event("process_name", rank.rank, 0, None, {"name": f"GPU {rank.rank}"}),
    ]
    lines += [kw.event_line(m, sort_keys=True) for m in meta]
    header = {
        "deviceProperties": kw.device_properties([rank.rank], {"name": "NVIDIA H100 80GB HBM3",
                                                              "totalGlobalMem": 85_031_714_816, "computeMajor": 9,
                                                              "computeMinor": 0, "numSms": 132}),
        "distributedInfo": kw.distributed_info(rank.rank, len(RANKS), process_groups=False),
    }
    return (kw.document_head(header, sort_keys=True) + ",\n".join(lines)
            + kw.document_tail(f"rank{rank.rank}.pt.trace.json", BASE_TIME_NS))


def truth(figures: dict[str, dict]) -> dict:
    return {
        "description": "planted changes of regression_pair (new vs base) and the per-step figures of each "
                       "trace, accounted from the construction in make_pair.py",
        "ranks": list(RANKS),
        "steps": {side: list(STEPS[side]) for side in STEPS},
        "figures": figures,
        "kernel_names": {side: {key: kernel_name(key, side) for key, *_, sides in PLAN if side in sides}
                         | {"allreduce": NCCL} for side in STEPS},
        "changes": {
            # per rank, the metrics whose change is real; every other metric is within noise
            "metrics": {"changed": ["step_time_ns", "gpu_window_ns", "busy_ns", "idle_ns", "compute_ns",
                                    "memory_ns"],
                        "worse": ["step_time_ns", "gpu_window_ns", "busy_ns", "idle_ns", "compute_ns",
                                  "memory_ns"]},
            "kernels": {
                "regressed": [{"name": GEMM_DGRAD, "factor": REGRESSION}],
                "appeared": sorted([TRITON_LN, MEMCPY_DTOH]),
                "vanished": [CAST],
                "renamed": [[TRITON_ADD["base"], TRITON_ADD["new"]]],
            },
            "findings": {"new": [["blocking_copy", None]], "fixed": [], "worse": [], "better": []},
        },
        "noise": {"kernel_jitter": JITTER, "gap_jitter_ns": GAP_JITTER_NS},
    }


def main(out_dir: pathlib.Path) -> pathlib.Path:
    out = pathlib.Path(out_dir) / "regression_pair"
    figures = {}
    for side in ("base", "new"):
        ranks, figures[side] = build(side)
        (out / side).mkdir(parents=True, exist_ok=True)
        for r, rank in ranks.items():
            data = kw.gzip_bytes(render(rank).encode("utf-8"))
            (out / side / f"rank{r}.json.gz").write_bytes(data)
    (out / "truth.json").write_text(json.dumps(truth(figures), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent,
                    help="directory that receives regression_pair/ (default: this script's directory)")
    print(main(ap.parse_args().out))
