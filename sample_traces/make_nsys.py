"""Write a small synthetic Nsight Systems SQLite export and the true values it was built from.

``python sample_traces/make_nsys.py [OUT_DIR]`` writes ``synthetic_nsys.sqlite`` and
``synthetic_nsys.truth.json`` into OUT_DIR (default: this script's folder).

The tables, column names and column types follow real ``nsys export --type sqlite`` output of
Nsight Systems 2024.6/2026.2 (a subset of the tables). The content is a two-process torchrun-like
run, one process per GPU:

* the process on device 0 has the *higher* pid (2002) and the one on device 1 the lower (1001), so
  a parser that orders ranks by pid instead of by device gets it wrong;
* 4 training steps per process, each an NVTX push/pop range ``step_N`` (matches the default step
  marker) holding ``forward``/``backward``/``optimizer`` ranges, an NVTX range in a second
  ("NCCL") domain named through ``textId``, compute kernels on stream 7 launched by
  ``cudaLaunchKernel`` (runtime) and ``cuLaunchKernelEx`` (driver), an
  ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` kernel on stream 13, a host-to-device memcpy, a
  memset, a ``cudaStreamSynchronize`` with its SYNCHRONIZATION record, and non-launch API calls;
* between steps the host pauses (a data-loader stall) for a known time, leaving the GPU idle;
* correlation ids restart at 1 in each process, so the same ids occur in both processes: a join
  on correlation alone pairs launches with the other process's kernels;
* every launch has a chosen launch delay (GPU start minus API call end); some are negative (the
  GPU starts before the call returns), whose true launch delay is 0;
* rank 0 has an NVTX mark, rank 1 an NVTX start/end range that never ended (``end`` NULL);
  ``PROFILER_OVERHEAD`` rows stand for tables a parser does not map.

The truth file is computed from this construction, never by parsing the database.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

DB_NAME = "synthetic_nsys.sqlite"
TRUTH_NAME = "synthetic_nsys.truth.json"

SESSION_UTC_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
SESSION_CLOCK_NS = 1_000_000_000  # the export timeline's value at session start
VM = 1 << 48  # host/VM bits of every globalPid/globalTid in a one-host export
COMPUTE_STREAM = 7
NCCL_STREAM = 13
STEPS = 4
STEP_GAP_NS = 300_000  # host stall between steps (GPU idle)
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
#: launch delays (ns) cycled over a process's launches; negatives start before the call ends
DELAY_CYCLE = (1_500, 2_500, 4_000, -800, 7_000, 3_000, 900, -200, 5_500)
PROCESSES = (  # (pid, device, name); the device-0 process has the larger pid on purpose
    (2002, 0, "python3"),
    (1001, 1, "python3"),
)

# Event type / class ids as in ENUM_NSYS_EVENT_TYPE and ENUM_NSYS_EVENT_CLASS.
NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE = 34, 59, 60, 75
RUNTIME_CLASS, DRIVER_CLASS = 0, 1

SCHEMA = """
CREATE TABLE StringIds (
    id INTEGER NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE ThreadNames (
    nameId INTEGER NOT NULL,
    priority INTEGER,
    globalTid INTEGER
);
CREATE TABLE PROCESSES (
    globalPid INTEGER,
    pid INTEGER,
    name TEXT
);
CREATE TABLE META_DATA_EXPORT (
    name TEXT NOT NULL,
    value TEXT
);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (
    utcEpochNs INTEGER,
    utcTime TEXT,
    localTime TEXT,
    systemClockNs INTEGER
);
CREATE TABLE TARGET_INFO_GPU (
    vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER,
    l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER,
    smCount INTEGER, pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER,
    ctxswDevPath TEXT, ctrlDevPath TEXT, revision INTEGER, nodeMask INTEGER, constantMemory INTEGER,
    maxIPC INTEGER, maxRegistersPerBlock INTEGER, maxShmemPerBlock INTEGER,
    maxShmemPerBlockOptin INTEGER, maxShmemPerSm INTEGER, maxRegistersPerSm INTEGER,
    threadsPerWarp INTEGER, asyncEngines INTEGER, maxWarpsPerSm INTEGER, maxBlocksPerSm INTEGER,
    maxThreadsPerBlock INTEGER, maxBlockDimX INTEGER, maxBlockDimY INTEGER, maxBlockDimZ INTEGER,
    maxGridDimX INTEGER, maxGridDimY INTEGER, maxGridDimZ INTEGER, computeMajor INTEGER,
    computeMinor INTEGER, smMajor INTEGER, smMinor INTEGER
);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_CUPTI_SYNC_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_NSYS_EVENT_CLASS (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
    shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER,
    registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
    gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,
    blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,
    dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL,
    localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER,
    graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER, qmdBulkReleaseDone INTEGER,
    qmdPreexitDone INTEGER, qmdLastCtaDone INTEGER, graphId INTEGER, clusterX INTEGER,
    clusterY INTEGER, clusterZ INTEGER, clusterSchedulingPolicy INTEGER,
    maxPotentialClusterSize INTEGER, maxActiveClusters INTEGER,
    sharedMemoryRequestedPercentage INTEGER, tensorSizeMinusOneElements TEXT NOT NULL
);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
    globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
    returnValue INTEGER NOT NULL, callchainId INTEGER
);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL,
    deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER,
    srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER,
    graphNodeId INTEGER, virtualAddress INTEGER, copyCount INTEGER
);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL,
    graphNodeId INTEGER, memKind INTEGER
);
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, deprecatedSyncType INTEGER,
    syncType INTEGER NOT NULL, eventId INTEGER NOT NULL, eventSyncId INTEGER
);
CREATE TABLE NVTX_EVENTS (
    start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
    category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
    textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER,
    doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL,
    jsonTextId INTEGER, jsonText TEXT, binaryData TEXT
);
CREATE TABLE PROFILER_OVERHEAD (
    start INTEGER NOT NULL, end INTEGER NOT NULL, globalTid INTEGER, nameId INTEGER NOT NULL,
    overheadType INTEGER NOT NULL
);
"""

ENUMS = {
    "ENUM_CUDA_MEMCPY_OPER": [
        (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"), (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"), (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
        (9, "CUDA_MEMCPY_KIND_HTOH", "Host-to-Host"), (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"),
    ],
    "ENUM_CUDA_MEM_KIND": [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
    ],
    "ENUM_CUPTI_SYNC_TYPE": [
        (0, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "Unknown"),
        (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
        (2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait sync"),
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"),
    ],
    "ENUM_NSYS_EVENT_CLASS": [
        (0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime"),
        (1, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver"),
        (2, "TRACE_PROCESS_EVENT_GL", "GL"),
    ],
    "ENUM_NSYS_EVENT_TYPE": [
        (32, "NvtxEvents", "NvtxEvents"), (33, "NvtxCategory", "NvtxCategory"), (34, "NvtxMark", "NvtxMark"),
        (35, "NvtxPushRange", "NvtxPushRange"), (36, "NvtxPopRange", "NvtxPopRange"),
        (37, "NvtxStartRange", "NvtxStartRange"), (38, "NvtxEndRange", "NvtxEndRange"),
        (59, "NvtxPushPopRange", "NvtxPushPopRange"), (60, "NvtxStartEndRange", "NvtxStartEndRange"),
        (75, "NvtxDomainCreate", "NvtxDomainCreate"),
    ],
}

META = [
    ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
    ("EXPORT_PRODUCT_VERSION", "2026.2.1.210"),
    ("EXPORT_PRODUCT_DATE", "2026.2"),
    ("EXPORT_SCHEMA_VERSION", "3.25.0"),
    ("EXPORT_PLATFORM", "linux-desktop"),
    ("EXPORT_PARAM_EXPORT_TYPE", "SQLite"),
    ("EXPORT_PARAM_TIME_NORMALIZE", "false"),
    ("DERIVED_BY", "traceview sample_traces/make_nsys.py (synthetic)"),
]

COMPUTE_KERNELS = {  # phase -> [(name, duration ns, grid, block)]
    "forward": [("ampere_sgemm_128x64_nn", 24_000, (120, 1, 1), (256, 1, 1)),
                ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", 9_000,
                 (1024, 1, 1), (128, 1, 1)),
                ("ampere_sgemm_64x64_tn", 18_000, (64, 2, 1), (128, 1, 1))],
    "backward": [("ampere_sgemm_128x64_nt", 30_000, (120, 1, 1), (256, 1, 1)),
                 ("void at::native::reduce_kernel<512, 1>", 7_000, (256, 1, 1), (512, 1, 1)),
                 ("ampere_sgemm_128x64_tn", 28_000, (120, 2, 1), (256, 1, 1))],
    "optimizer": [("void at::native::multi_tensor_apply_kernel<adam>", 12_000, (320, 1, 1), (512, 1, 1)),
                  ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", 3_000,
                   (32, 1, 1), (128, 1, 1))],
}
NCCL_DUR_NS = 45_000


class _Builder:
    """Accumulates rows for one export; ``strings`` assigns StringIds in order of first use."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {}
        self.rows: dict[str, list[tuple]] = {}

    def sid(self, value: str) -> int:
        if value not in self.strings:
            self.strings[value] = len(self.strings) + 1
        return self.strings[value]

    def add(self, table: str, row: tuple) -> None:
        self.rows.setdefault(table, []).append(row)


class _Process:
    """One process's timeline; records true counts and launch delays while emitting rows."""

    def __init__(self, b: _Builder, rank: int, pid: int, device: int, t0: int) -> None:
        self.b, self.rank, self.pid, self.device = b, rank, pid, device
        self.gpid = VM | (pid << 24)
        self.gtid = self.gpid | pid  # main thread
        self.cursor = t0
        self.corr = 0
        self.launch_index = 0
        self.stream_end = {COMPUTE_STREAM: 0, NCCL_STREAM: 0}
        self.grid_id = 0
        self.counts = dict(kernels=0, nccl_kernels=0, memcpy=0, memset=0, sync=0, runtime_calls=0,
                           cuda_runtime_calls=0, cuda_driver_calls=0, nvtx_ranges=0, nvtx_marks=0,
                           nvtx_open_ranges=0, steps=0, launches=0)
        self.delays: dict[str, int] = {}
        self.gpu_intervals: list[tuple[int, int]] = []

    # -- host API calls
    def api(self, name: str, event_class: int, dur: int, start: int | None = None) -> tuple[int, int, int]:
        self.corr += 1
        start = self.cursor if start is None else start
        end = start + dur
        row = (start, end, event_class, self.gtid, self.corr, self.b.sid(name), 0, None)
        self.b.add("CUPTI_ACTIVITY_KIND_RUNTIME", row)
        self.counts["runtime_calls"] += 1
        self.counts["cuda_runtime_calls" if event_class == RUNTIME_CLASS else "cuda_driver_calls"] += 1
        self.cursor = end + 2_000
        return self.corr, start, end

    def launch(self, api_name: str, event_class: int, stream: int, gpu_dur: int) -> tuple[int, int, int]:
        """A launch call and its GPU start/end; the call waits if the stream is still busy."""
        delay = DELAY_CYCLE[(self.launch_index + self.rank) % len(DELAY_CYCLE)]
        self.launch_index += 1
        call_dur = 4_000 + 500 * (self.launch_index % 3)
        earliest = self.stream_end[stream] + 1_000 - delay - call_dur
        start = max(self.cursor, earliest)
        corr, start, end = self.api(api_name, event_class, call_dur, start)
        gpu_start = end + delay
        gpu_end = gpu_start + gpu_dur
        assert gpu_start > self.stream_end[stream]
        self.stream_end[stream] = gpu_end
        self.delays[f"{self.pid}:{corr}"] = max(0, delay)
        self.counts["launches"] += 1
        self.gpu_intervals.append((gpu_start, gpu_end))
        return corr, gpu_start, gpu_end

    def kernel(self, name: str, dur: int, grid: tuple, block: tuple, stream: int, via_driver: bool) -> int:
        api_name = "cuLaunchKernelEx" if via_driver else "cudaLaunchKernel_v7000"
        corr, s, e = self.launch(api_name, DRIVER_CLASS if via_driver else RUNTIME_CLASS, stream, dur)
        self.grid_id += 1
        nid = self.b.sid(name)
        short = self.b.sid(name.split("<")[0].replace("void ", "").split("::")[-1])
        self.b.add("CUPTI_ACTIVITY_KIND_KERNEL", (
            s, e, self.device, 1, 0, stream, corr, self.gpid, nid, short, None, 1, 1, 64, *grid, *block,
            0, 0, 0, 0, self.grid_id, 0, None, 0, None, None, None, None, 0, 0, 0, 0, 0, 0, 0, "[]"))
        self.counts["kernels"] += 1
        if name.startswith("nccl"):
            self.counts["nccl_kernels"] += 1
        return e

    def memcpy(self, copy_kind: int, nbytes: int, dur: int) -> None:
        corr, s, e = self.launch("cudaMemcpyAsync_v3020", RUNTIME_CLASS, COMPUTE_STREAM, dur)
        src, dst = (0, 2) if copy_kind == 1 else (2, 0)
        self.b.add("CUPTI_ACTIVITY_KIND_MEMCPY", (s, e, self.device, 1, 0, COMPUTE_STREAM, corr, self.gpid, nbytes,
                                                  copy_kind, None, src, dst, None, None, None, None, None, None,
                                                  None, 1))
        self.counts["memcpy"] += 1

    def memset(self, nbytes: int, dur: int) -> None:
        corr, s, e = self.launch("cudaMemsetAsync_v3020", RUNTIME_CLASS, COMPUTE_STREAM, dur)
        self.b.add("CUPTI_ACTIVITY_KIND_MEMSET", (s, e, self.device, 1, 0, COMPUTE_STREAM, corr, self.gpid, 0, nbytes,
                                                  None, 2))
        self.counts["memset"] += 1

    def stream_sync(self) -> None:
        start = self.cursor
        wait_until = max(self.stream_end[COMPUTE_STREAM], start + 1_000)
        corr, s, e = self.api("cudaStreamSynchronize_v3020", RUNTIME_CLASS, wait_until + 3_000 - start, start)
        # CUPTI reports device 0 for sync records whatever the device (as in real exports)
        self.b.add("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", (s + 500, wait_until, 0, 1, 0, COMPUTE_STREAM, corr,
                                                           self.gpid, None, 3, 0xFFFFFFFF, None))
        self.counts["sync"] += 1

    # -- NVTX
    def nvtx(self, start: int, end: int | None, *, text: str | None = None, text_id: int | None = None,
             domain: int = 0, event_type: int = NVTX_PUSHPOP, range_id: int | None = None) -> None:
        self.b.add("NVTX_EVENTS", (start, end, event_type, range_id, None, None, text, self.gtid, None, text_id,
                                   domain, None, None, None, None, None, None, None, None, None))
        if event_type == NVTX_MARK:
            self.counts["nvtx_marks"] += 1
        elif event_type in (NVTX_PUSHPOP, NVTX_STARTEND):
            self.counts["nvtx_ranges"] += 1
            if end is None:
                self.counts["nvtx_open_ranges"] += 1

    def run(self) -> None:
        self.nvtx(self.cursor, None, text="NCCL", domain=1, event_type=NVTX_DOMAIN_CREATE)
        self.api("cudaMalloc_v3020", RUNTIME_CLASS, 150_000)
        self.api("cuModuleGetLoadingMode", DRIVER_CLASS, 1_200)
        self.api("cudaEventCreateWithFlags_v3020", RUNTIME_CLASS, 3_000)
        via_driver = False
        for step in range(STEPS):
            step_start = self.cursor
            self.cursor += 1_000
            self.memcpy(1, 4 << 20, 40_000)
            self.memset(1 << 16, 2_000)
            for phase in ("forward", "backward"):
                p0 = self.cursor
                for name, dur, grid, block in COMPUTE_KERNELS[phase]:
                    self.kernel(name, dur, grid, block, COMPUTE_STREAM, via_driver)
                    via_driver = not via_driver
                self.nvtx(p0, self.cursor - 500, text=phase)
            c0 = self.cursor
            self.kernel(f"{NCCL_KERNEL}(ncclDevKernelArgsStorage<4096>)", NCCL_DUR_NS, (2, 1, 1), (640, 1, 1),
                        NCCL_STREAM, True)
            self.nvtx(c0, self.cursor - 200, text_id=self.b.sid("ncclAllReduce"), domain=1)
            o0 = self.cursor
            for name, dur, grid, block in COMPUTE_KERNELS["optimizer"]:
                self.kernel(name, dur, grid, block, COMPUTE_STREAM, via_driver)
                via_driver = not via_driver
            self.nvtx(o0, self.cursor - 500, text="optimizer")
            self.api("cudaEventRecord_v3020", RUNTIME_CLASS, 2_500)
            # the step ends when the NCCL stream is done too; sync the compute stream
            self.stream_end[COMPUTE_STREAM] = max(self.stream_end[COMPUTE_STREAM], self.stream_end[NCCL_STREAM])
            self.stream_sync()
            self.nvtx(step_start, self.cursor, text=f"step_{step}")
            self.counts["steps"] += 1
            self.cursor += STEP_GAP_NS  # data-loader stall: GPU idle
        self.memcpy(2, 4, 3_000)
        self.stream_sync()
        if self.rank == 0:
            self.nvtx(self.cursor, self.cursor, text="checkpoint_saved", event_type=NVTX_MARK)
        else:
            self.nvtx(self.cursor, None, text="shutdown", event_type=NVTX_STARTEND, range_id=1)
        overhead = self.b.sid("CUPTI buffer flush")
        for i in range(2):
            self.b.add("PROFILER_OVERHEAD", (self.cursor + i * 10_000, self.cursor + i * 10_000 + 1_500, self.gtid,
                                             overhead, 1))

    def gpu_truth(self) -> dict:
        """Busy time and idle gaps of the union of this process's GPU activity."""
        merged: list[list[int]] = []
        for s, e in sorted(self.gpu_intervals):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        gaps = [b[0] - a[1] for a, b in zip(merged, merged[1:])]
        return {"gpu_busy_ns": sum(e - s for s, e in merged), "gpu_span_ns": merged[-1][1] - merged[0][0],
                "gpu_idle_gaps_ns": gaps}


def build() -> tuple[_Builder, dict]:
    b = _Builder()
    procs = []
    for rank, (pid, device, name) in enumerate(PROCESSES):
        p = _Process(b, rank, pid, device, SESSION_CLOCK_NS + 2_000_000 + rank * 37_000)
        p.run()
        procs.append(p)
        b.add("PROCESSES", (p.gpid, pid, name))
        b.add("ThreadNames", (b.sid(name), 20, p.gtid))
        b.add("ThreadNames", (b.sid("pt_autograd_0"), 20, p.gpid | (pid + 7)))
    for device in range(2):
        b.add("TARGET_INFO_GPU", (
            VM, device, "NVIDIA H100 80GB HBM3", f"0000:{0x1b + device:02x}:00.0", 1, 52428800, 84942979072,
            3352320000000, 1980000000, 132, device, f"00000000-0000-0000-0000-00000000000{device}", 0, "GH100",
            device, "", "", 161, 0, 65536, 0, 65536, 49152, 232448, 233472, 65536, 32, 3, 64, 32, 1024, 1024, 1024,
            64, 2147483647, 65535, 65535, 9, 0, 9, 0))
    truth = {
        "file": DB_NAME,
        "generator": "sample_traces/make_nsys.py",
        "step_gap_ns": STEP_GAP_NS,
        "ranks": {str(p.rank): {"pid": p.pid, "device": p.device, **p.counts, **p.gpu_truth()} for p in procs},
        "launch_delays_ns": {k: v for p in procs for k, v in p.delays.items()},
    }
    corr_sets = [{int(k.split(":")[1]) for k in p.delays} for p in procs]
    truth["correlations_in_both_processes"] = len(corr_sets[0] & corr_sets[1])
    return b, truth


def main(out_dir: Path) -> None:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    b, truth = build()
    db_path = out_dir / DB_NAME
    tmp = out_dir / f".{DB_NAME}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    try:
        con.executescript(SCHEMA)
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in b.strings.items()])
        for table, rows in ENUMS.items():
            con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", rows)
        con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", META)
        con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?, ?)",
                    (SESSION_UTC_NS, "2026-01-01T00:00:00", "2026-01-01T00:00:00", SESSION_CLOCK_NS))
        for table, rows in b.rows.items():
            marks = ", ".join("?" * len(rows[0]))
            con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()
    os.replace(tmp, db_path)
    (out_dir / TRUTH_NAME).write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
