"""A graph capture and its replay, with a known answer: ``python sample_traces/make_graph_pair.py OUT``.

Writes two pairs of Kineto traces of one small model (``Model_0/Layer_{0..L-1}/{Attention_0,MLP_0}``
as ``nn.Module`` python functions, ops under them, one kernel per op):

* ``hip/``: a HIP program. ``capture.json.gz`` records the capture (``hipStreamBeginCapture``, a
  ``hipLaunchKernel`` per node naming its kernel in the ``kernel`` arg, as ROCm's profiler writes
  it, ``hipStreamEndCapture``); ``replay.json.gz`` records ``REPLAYS`` ``hipGraphLaunch`` calls
  under a ``decode`` annotation, each running the graph's kernels on two streams (the second
  stream's kernels start out of capture order). The capture has one node more than each replay
  runs (``DROPPED_NODE``: a node the replay skips), and each replay runs one kernel the capture
  does not have (``EXTRA_KERNEL``): both must be counted, never guessed.
* ``cuda/``: the same program on CUDA, whose launch calls name no kernel, on one stream: matched
  by position, as many replayed kernels as captured nodes.
* ``cuda_nodes/``: the CUDA program on two streams, its replayed kernels carrying ``graph id`` and
  ``graph node id`` args (newer Kineto): matched by position in node id order.

``truth.json`` holds, per pair, the replayed activities, those that must be matched and the GPU
time per module path, summed over the replays (``decode/Model_0/Layer_1/MLP_0``: the replay
annotation's path, then the capture's).
Deterministic: no clock, no randomness.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

_HERE = pathlib.Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

import kineto_writer as kw  # noqa: E402

LAYERS = 3
REPLAYS = 4
PID, TID = 4242, 4242
DEVICE, STREAM, SIDE_STREAM = 0, 7, 9
BASE_TIME_NS = 1_760_000_000_000_000_000
T0_NS = 3_215_000_000_000_000
#: per layer: (module, op, kernel, GPU ns, stream)
NODES = [("Attention_0", "aten::mm", "Cijk_Alik_Bljk_HHS_BH_MT128x128x32_qkv", 40_000, STREAM),
         ("Attention_0", "aten::_flash_attention_forward", "attn_fwd", 60_000, STREAM),
         ("MLP_0", "aten::mm", "Cijk_Alik_Bljk_HHS_BH_MT256x128x64_mlp", 50_000, SIDE_STREAM),
         ("MLP_0", "aten::gelu", "triton_poi_fused_gelu_0", 10_000, SIDE_STREAM)]
DROPPED_NODE = (LAYERS - 1, 3)  # (layer, node): captured, never replayed
EXTRA_KERNEL = ("void at::native::vectorized_elementwise_kernel<4, FillFunctor>", 5_000)


def node_list() -> list[tuple[int, int, tuple[str, str, str, int, int]]]:
    return [(layer, i, node) for layer in range(LAYERS) for i, node in enumerate(NODES)]


def header() -> dict[str, Any]:
    return {"deviceProperties": kw.device_properties([DEVICE]), "distributedInfo": kw.distributed_info(0, 1)}


def capture_events(named: bool) -> list[dict[str, Any]]:
    """The capture: the model's forward once, every launch between begin and end of the capture."""
    api = "hipLaunchKernel" if named else "cudaLaunchKernel"
    prefix = "hip" if named else "cuda"
    events: list[dict[str, Any]] = []
    t, corr = T0_NS, 1
    events.append(kw.x_event("cuda_runtime", f"{prefix}StreamBeginCapture", PID, TID, kw.micros(t), kw.micros(2_000),
                             {"correlation": corr}))
    t += 5_000
    nodes = node_list()
    model_start = t
    for layer in range(LAYERS):
        layer_start = t
        for module in ("Attention_0", "MLP_0"):
            module_start = t
            for (_, _, (mod, op, kernel, _, _)) in [n for n in nodes if n[0] == layer and n[2][0] == module]:
                corr += 1
                events.append(kw.x_event("cpu_op", op, PID, TID, kw.micros(t), kw.micros(8_000),
                                         {"External id": corr}))
                args: dict[str, Any] = {"External id": corr, "correlation": corr}
                if named:
                    args["kernel"] = kernel
                events.append(kw.x_event("cuda_runtime", api, PID, TID, kw.micros(t + 2_000), kw.micros(4_000), args))
                t += 10_000
            events.append(kw.x_event("python_function", f"nn.Module: {module}", PID, TID, kw.micros(module_start - 500),
                                     kw.micros(t - module_start + 1_000)))
            t += 2_000
        events.append(kw.x_event("python_function", f"nn.Module: Layer_{layer}", PID, TID,
                                 kw.micros(layer_start - 1_000), kw.micros(t - layer_start + 2_000)))
        t += 3_000
    events.append(kw.x_event("python_function", "nn.Module: Model_0", PID, TID, kw.micros(model_start - 2_000),
                             kw.micros(t - model_start + 4_000)))
    events.append(kw.x_event("cuda_runtime", f"{prefix}StreamEndCapture", PID, TID, kw.micros(t + 5_000),
                             kw.micros(2_000), {"correlation": corr + 1}))
    return events


def replay_events(named: bool, node_ids: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The replays, and their known answer."""
    launch_api = "hipGraphLaunch" if named else "cudaGraphLaunch"
    events: list[dict[str, Any]] = []
    t, corr = T0_NS, 100
    replayed = matched = 0  # activities
    by_path: dict[str, int] = {}
    for _ in range(REPLAYS):
        corr += 1
        step_start = t
        events.append(kw.x_event("cuda_runtime", launch_api, PID, TID, kw.micros(t + 3_000), kw.micros(9_000),
                                 {"correlation": corr}))
        gpu = {STREAM: t + 20_000, SIDE_STREAM: t + 20_000}
        kernels = [n for n in node_list() if not named or (n[0], n[1]) != DROPPED_NODE]
        for node_id, (layer, _, (module, _, kernel, dur, stream)) in enumerate(kernels):
            # CUDA without node ids: one stream (matching by position needs the capture's order)
            stream = stream if named or node_ids else STREAM
            start = gpu[stream]
            # the side stream runs ahead: its kernels start out of the capture's order
            gpu[stream] = start + dur + (1_000 if stream == STREAM else 500)
            args: dict[str, Any] = {"device": DEVICE, "stream": stream, "correlation": corr}
            if node_ids:
                args.update({"graph id": 7, "graph node id": 1000 + node_id})
            events.append(kw.x_event("kernel", kernel, DEVICE, stream, kw.micros(start), kw.micros(dur), args))
            replayed += 1
            matched += 1
            path = f"decode/Model_0/Layer_{layer}/{module}"
            by_path[path] = by_path.get(path, 0) + dur
        if named:
            extra_start = max(gpu.values()) + 1_000
            events.append(kw.x_event("kernel", EXTRA_KERNEL[0], DEVICE, STREAM, kw.micros(extra_start),
                                     kw.micros(EXTRA_KERNEL[1]), {"device": DEVICE, "stream": STREAM,
                                                                  "correlation": corr}))
            replayed += 1
            gpu[STREAM] = extra_start + EXTRA_KERNEL[1]
        t = max(gpu.values()) + 50_000
        events.append(kw.x_event("user_annotation", "decode", PID, TID, kw.micros(step_start),
                                 kw.micros(t - step_start)))
    truth = {"replayed_activities": replayed, "matched_activities": matched,
             "gpu_ns_by_path": by_path, "rule": "capture" if named else "capture_order"}
    return events, truth


def write(out: pathlib.Path) -> dict[str, Any]:
    truth: dict[str, Any] = {}
    for folder, named, node_ids in (("hip", True, False), ("cuda", False, False), ("cuda_nodes", False, True)):
        target = out / folder
        target.mkdir(parents=True, exist_ok=True)
        replay, answer = replay_events(named, node_ids)
        for name, events in (("capture", capture_events(named)), ("replay", replay)):
            doc = kw.document(header(), events, trace_name=name, base_time_ns=BASE_TIME_NS)
            (target / f"{name}.json.gz").write_bytes(kw.gzip_bytes(kw.dumps(doc).encode()))
        truth[folder] = answer
    (out / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")
    return truth


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=pathlib.Path, nargs="?", default=_HERE / "graph_pair")
    write(ap.parse_args(argv).out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
