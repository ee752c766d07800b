"""Write a small synthetic rocprofv3 run (CSV output) and the true values it was built from.

``python sample_traces/make_rocprof.py OUT_DIR [--steps N] [--layers N]`` writes, into OUT_DIR,
``synth_kernel_trace.csv``, ``synth_hip_api_trace.csv``, ``synth_memory_copy_trace.csv``,
``synth_marker_api_trace.csv``, ``synth_counter_collection.csv``, ``synth_agent_info.csv`` and
``truth.json``. Made on the fly
(tests, ``tmp_path``), not stored.

The columns follow rocprofv3's CSV output as its documentation shows it (ROCm 6.2-6.4: agents as
``Agent N``, a kernel trace with ``Stream_Id`` and per-axis sizes, work-item grid sizes). The run is one
process (pid = tid = 7301) on one GPU (agent 2, an MI300X with 304 compute units in
``agent_info.csv``), the CPU being agent 0:

* ``steps`` ROCTx ranges ``step_N`` (the default step marker), each holding ``layers`` ranges
  ``layer_L``; in each layer a ``hipLaunchKernel`` (with ``__hipPushCallConfiguration`` /
  ``__hipPopCallConfiguration`` compiler-API calls around it) launches kernel ``layer_L_gemm`` on
  stream 1, 3 us after the call returns, lasting ``40 + 10 * L`` us;
* each step starts with a ``hipMemcpyAsync`` whose host-to-device copy lasts 20 us and ends with a
  ``hipStreamSynchronize``; one mark ``checkpoint`` (no duration) and one ``roctxGetThreadId`` call
  (the ROCTx API's own, not a range) per run;
* a counter collection of the same process, two counters per dispatch (``SQ_WAVES`` = work-items /
  64, ``FETCH_SIZE`` = 1.5 per KiB of grid), with the kernel trace's dispatch ids.

The truth is counted from this construction, never by reading the files back.

``write_json_run(OUT_DIR)`` (``--json``) writes the same run as rocprofv3's JSON output instead
(``synth_results.json``), in the layout rocprofiler-sdk's JSON writer and its tests use (no real JSON
file was at hand to copy it from; see parsers/rocprof/json_output.py).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

PID = 7301
T0_NS = 5_000_000_000_000
US = 1000
KERNEL_HEADER = ["Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
                 "Correlation_Id", "Start_Timestamp", "End_Timestamp", "Private_Segment_Size", "Group_Segment_Size",
                 "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y",
                 "Grid_Size_Z"]
API_HEADER = ["Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id", "Start_Timestamp", "End_Timestamp"]
COPY_HEADER = ["Kind", "Direction", "Stream_Id", "Source_Agent_Id", "Destination_Agent_Id", "Correlation_Id",
               "Start_Timestamp", "End_Timestamp"]
COUNTER_HEADER = ["Correlation_Id", "Dispatch_Id", "Agent_Id", "Queue_Id", "Process_Id", "Thread_Id", "Grid_Size",
                  "Kernel_Id", "Kernel_Name", "Workgroup_Size", "LDS_Block_Size", "Scratch_Size", "VGPR_Count",
                  "Accum_VGPR_Count", "SGPR_Count", "Counter_Name", "Counter_Value", "Start_Timestamp",
                  "End_Timestamp"]
AGENT_HEADER = ["Node_Id", "Logical_Node_Id", "Agent_Type", "Cpu_Cores_Count", "Simd_Count", "Wave_Front_Size",
                "Num_Xcc", "Cu_Count", "Name", "Product_Name"]
AGENTS = [[0, 0, "CPU", 96, 0, 0, 0, 0, "AMD EPYC 9454", "AMD EPYC 9454"],
          [2, 2, "GPU", 0, 1216, 64, 8, 304, "gfx942", "AMD Instinct MI300X"]]


class Run:
    """The rows of each file, built in time order, and the truth."""

    def __init__(self) -> None:
        self.kernels: list[list[Any]] = []
        self.api: list[list[Any]] = []
        self.copies: list[list[Any]] = []
        self.markers: list[list[Any]] = []
        self.counters: list[list[Any]] = []
        self.correlation = 0
        self.layer_gpu_ns: dict[str, int] = {}

    def next_correlation(self) -> int:
        self.correlation += 1
        return self.correlation

    def call(self, name: str, start: int, dur: int, domain: str = "HIP_RUNTIME_API_EXT") -> int:
        corr = self.next_correlation()
        self.api.append([domain, name, PID, PID, corr, start, start + dur])
        return corr

    def kernel(self, layer: int, launch_end: int) -> int:
        """A layer's launch's kernel (and its counters); returns its end."""
        corr = self.correlation
        start, dur = launch_end + 3 * US, (40 + 10 * layer) * US
        grid, group = 4096 * (layer + 1), 256
        dispatch = len(self.kernels) + 1
        name = f"layer_{layer}_gemm"
        self.kernels.append(["KERNEL_DISPATCH", "Agent 2", 1, 1, PID, dispatch, 10 + layer, name, corr, start,
                             start + dur, 0, 0, group, 1, 1, grid, 1, 1])
        for counter, value in (("SQ_WAVES", grid / 64), ("FETCH_SIZE", 1.5 * grid / 1024)):
            self.counters.append([corr, dispatch, "Agent 2", 1, PID, PID, grid, 10 + layer, name, group, 0, 0, 16, 0,
                                  128, counter, f"{value:.6f}", start, start + dur])
        self.layer_gpu_ns[f"layer_{layer}"] = self.layer_gpu_ns.get(f"layer_{layer}", 0) + dur
        return start + dur

    def step(self, number: int, start: int, layers: int) -> int:
        """One step from ``start``; returns its end."""
        t = start + 2 * US
        corr = self.call("hipMemcpyAsync", t, 4 * US)
        self.copies.append(["MEMORY_COPY", "MEMORY_COPY_HOST_TO_DEVICE", 1, "Agent 0", "Agent 2", corr,
                            t + 5 * US, t + 25 * US])
        t += 30 * US
        for layer in range(layers):
            layer_start = t
            self.call("__hipPushCallConfiguration", t, 1 * US, "HIP_COMPILER_API_EXT")
            self.call("__hipPopCallConfiguration", t + 1 * US, 1 * US, "HIP_COMPILER_API_EXT")
            self.call("hipLaunchKernel", t + 2 * US, 5 * US)
            end = self.kernel(layer, t + 7 * US)
            t = end + 2 * US
            self.markers.append(["MARKER_CORE_API", f"layer_{layer}", PID, PID, self.next_correlation(),
                                 layer_start, t])
        self.call("hipStreamSynchronize", t, 3 * US)
        t += 5 * US
        self.markers.append(["MARKER_CORE_API", f"step_{number}", PID, PID, self.next_correlation(), start, t])
        return t + 50 * US  # the host pauses between steps


def build(steps: int, layers: int) -> tuple[Run, dict[str, Any]]:
    run = Run()
    run.markers.append(["MARKER_CORE_API", "roctxGetThreadId", PID, PID, run.next_correlation(), T0_NS, T0_NS + US])
    t = T0_NS + 10 * US
    for s in range(steps):
        t = run.step(s, t, layers)
    run.markers.append(["MARKER_CORE_API", "checkpoint", PID, PID, run.next_correlation(), t, t])
    kernel_ns = sum(k[10] - k[9] for k in run.kernels)  # kernels never overlap: their sum is their union
    copy_ns = sum(c[7] - c[6] for c in run.copies)
    truth = {
        "kernels": len(run.kernels), "kernel_busy_ns": kernel_ns, "copies": len(run.copies), "copy_busy_ns": copy_ns,
        "runtime_calls": len(run.api), "ranges": steps * (layers + 1), "steps": steps, "marks": 1,
        "other_markers": 2, "launch_links": len(run.kernels) + len(run.copies), "counter_samples": len(run.counters),
        "rows": len(run.kernels) + len(run.api) + len(run.copies) + len(run.markers) + len(run.counters)
        + len(AGENTS), "agents": len(AGENTS), "layer_gpu_ns": run.layer_gpu_ns, "pid": PID, "device": 2,
        "device_name": AGENTS[1][-1], "compute_units": AGENTS[1][7],
    }
    return run, truth


def write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def write_run(out: Path, steps: int = 3, layers: int = 4, prefix: str = "synth") -> dict[str, Any]:
    """The run's files and ``truth.json`` in ``out``; returns the truth."""
    out.mkdir(parents=True, exist_ok=True)
    run, truth = build(steps, layers)
    write_csv(out / f"{prefix}_kernel_trace.csv", KERNEL_HEADER, run.kernels)
    write_csv(out / f"{prefix}_hip_api_trace.csv", API_HEADER, sorted(run.api, key=lambda r: r[5]))
    write_csv(out / f"{prefix}_memory_copy_trace.csv", COPY_HEADER, run.copies)
    write_csv(out / f"{prefix}_marker_api_trace.csv", API_HEADER, run.markers)
    write_csv(out / f"{prefix}_counter_collection.csv", COUNTER_HEADER, run.counters)
    write_csv(out / f"{prefix}_agent_info.csv", AGENT_HEADER, AGENTS)
    (out / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True))
    return truth


def json_document(run: Run) -> dict[str, Any]:
    """The run as rocprofv3's JSON output: string tables, agents, counters, buffer and callback records."""
    kinds = [{"kind": "NONE", "operations": []},
             {"kind": "HIP_RUNTIME_API_EXT", "operations": ["hipMemcpyAsync", "hipLaunchKernel",
                                                            "hipStreamSynchronize"]},
             {"kind": "HIP_COMPILER_API_EXT", "operations": ["__hipPushCallConfiguration",
                                                             "__hipPopCallConfiguration"]},
             {"kind": "MARKER_CORE_API", "operations": ["roctxMarkA", "roctxRangePushA", "roctxGetThreadId"]},
             {"kind": "MEMORY_COPY", "operations": ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST",
                                                    "MEMORY_COPY_HOST_TO_DEVICE"]},
             {"kind": "KERNEL_DISPATCH", "operations": ["KERNEL_DISPATCH_COMPLETE"]}]
    kind_of = {k["kind"]: i for i, k in enumerate(kinds)}
    agent_handle = {0: 1000, 2: 3000}  # handles are not node ids

    def span(corr: int, start: int, end: int) -> dict[str, Any]:
        return {"correlation_id": {"internal": corr, "external": 0}, "start_timestamp": start, "end_timestamp": end}

    def api(row: list[Any]) -> dict[str, Any]:
        kind = kind_of[row[0]]
        return {"kind": kind, "operation": kinds[kind]["operations"].index(row[1]), "thread_id": row[3],
                **span(row[4], row[5], row[6])}

    def marker(row: list[Any]) -> dict[str, Any]:
        op = 2 if row[1] == "roctxGetThreadId" else 0 if row[5] == row[6] else 1
        return {"kind": kind_of["MARKER_CORE_API"], "operation": op, "thread_id": row[3],
                **span(row[4], row[5], row[6])}

    def dispatch_info(row: list[Any]) -> dict[str, Any]:
        return {"agent_id": {"handle": agent_handle[int(row[1].split()[-1])]}, "queue_id": {"handle": 777},
                "kernel_id": row[6], "dispatch_id": row[5],
                "workgroup_size": {"x": row[13], "y": row[14], "z": row[15]},
                "grid_size": {"x": row[16], "y": row[17], "z": row[18]}}

    counters = {"SQ_WAVES": 1, "FETCH_SIZE": 2}
    by_dispatch: dict[int, list[list[Any]]] = {}
    for row in run.counters:
        by_dispatch.setdefault(row[1], []).append(row)
    kernels = {k[5]: k for k in run.kernels}
    return {"rocprofiler-sdk-tool": [{
        "metadata": {"pid": PID},
        "agents": [{"id": {"handle": agent_handle[a[1]]}, "type": 1 if a[2] == "CPU" else 2, "node_id": a[0],
                    "logical_node_id": a[1], "name": a[8], "product_name": a[9], "cu_count": a[7],
                    "wave_front_size": a[5]} for a in AGENTS],
        "counters": [{"id": {"handle": h}, "name": n} for n, h in counters.items()],
        "strings": {"buffer_records": kinds,
                    "marker_api": [{"key": m[4], "value": m[1]} for m in run.markers if m[1] != "roctxGetThreadId"]},
        "kernel_symbols": [{"kernel_id": 10 + i, "formatted_kernel_name": f"layer_{i}_gemm"}
                           for i in range(len({k[7] for k in run.kernels}))],
        "buffer_records": {
            "kernel_dispatch": [{"kind": kind_of["KERNEL_DISPATCH"], "operation": 0, "thread_id": k[4],
                                 "stream_id": {"handle": k[3]},
                                 "dispatch_info": dispatch_info(k), **span(k[8], k[9], k[10])} for k in run.kernels],
            "hip_api": [api(r) for r in sorted(run.api, key=lambda r: r[5])],
            "marker_api": [marker(m) for m in run.markers],
            "memory_copy": [{"kind": kind_of["MEMORY_COPY"], "operation": 2, "thread_id": PID,
                             "stream_id": {"handle": c[2]},
                             "src_agent_id": {"handle": agent_handle[0]}, "dst_agent_id": {"handle": agent_handle[2]},
                             **span(c[5], c[6], c[7])} for c in run.copies],
            "hsa_api": [],
            "scratch_memory": [{"kind": 9, "operation": 1, "thread_id": PID, **span(0, T0_NS, T0_NS + US)}]},
        "callback_records": {"counter_collection": [
            {"thread_id": PID, "dispatch_data": {"dispatch_info": dispatch_info(kernels[d])},
             "records": [{"counter_id": {"handle": counters[r[15]]}, "value": float(r[16])} for r in rows],
             **span(rows[0][0], rows[0][17], rows[0][18])} for d, rows in by_dispatch.items()]},
    }]}


def write_json_run(out: Path, steps: int = 3, layers: int = 4, prefix: str = "synth") -> dict[str, Any]:
    """The run as rocprofv3's JSON output (one file) and ``truth.json`` in ``out``; returns the truth."""
    out.mkdir(parents=True, exist_ok=True)
    run, truth = build(steps, layers)
    (out / f"{prefix}_results.json").write_text(json.dumps(json_document(run), indent=2))
    (out / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True))
    return truth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="write rocprofv3's JSON output instead of its CSVs")
    args = parser.parse_args()
    (write_json_run if args.json else write_run)(args.out, args.steps, args.layers)


if __name__ == "__main__":
    main()
