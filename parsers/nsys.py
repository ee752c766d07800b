"""Nsight Systems SQLite export parser (``nsys export --type sqlite``).

Reads the tables of an export into the canonical :class:`traceview.model.Trace` with SQL plus
numpy/pyarrow: every table is fetched as columns and transformed column-wise; there is no Python
loop over events (only over distinct names, processes and devices).

How rows are fetched
--------------------
The event tables come through ADBC's SQLite driver (``adbc-driver-sqlite``, used through
``adbc_driver_manager``'s own classes, not its DB-API module, which imports 11 MB of pyarrow's
dataset and file-system modules) straight into Arrow batches of ``ARROW_BATCH_ROWS`` rows, each
copied into growing int64 (or int32: ``NARROW_COLUMNS``) columns and dropped before the next is
read (:class:`_ArrowRows`; see "Memory" below). Issue 12
measured it against DuckDB's SQLite scanner and the standard library's ``sqlite3`` row tuples on
the 292 MB benchmark export (``benchmarks/bench_nsys.py --drivers``; figures in
``benchmarks/README.md``): both Arrow readers fetch 2-3x faster than row tuples and about equally
fast (DuckDB took 6% less wall time for 50% more CPU in the final run, ADBC was ahead in an earlier
one), and ADBC was chosen because it *is* SQLite: the same SQL (``COALESCE``, ``CAST AS BLOB``),
the same locking and busy timeout, the same error words; one small wheel with
no version lock, where DuckDB needs ``duckdb`` pinned to the exact release of a separately
packaged ~50 MB ``sqlite_scanner`` extension (it cannot download it here) and types columns by
their declared type (a REAL in an integer column is then DuckDB's error, and text that is not
UTF-8 a Python ``UnicodeDecodeError``, not traceview's message).
Table names, columns and the small metadata tables are still read with ``sqlite3`` (first: so a
locked or damaged file is said exactly as before). What the driver cannot type as traceview needs
(text, a REAL or a BLOB in an integer column) or cannot read makes that one table go through the
``sqlite3`` reader, which says what is wrong as it always did; ``ROW_READER = "sqlite3"`` selects
that reader for every table (tests and the benchmark compare the two: identical traces). The
runtime table, most of a big export's rows, is read on a second connection in a background thread
while the kernels are built (the driver releases the GIL while SQLite steps).

Two SQLite libraries share the process then (Python's and the driver's own). POSIX locks are per
process, so each library ignores the other's locks on the file; both only read, so nothing can be
damaged, and a writer in another process is seen by both.

Memory
------
Peak RSS is kept near what the finished trace holds (issue 12, the 292 MB benchmark export: 1,124 MB
before these measures, 686 MB after the second pass, ~580 MB after the third, where the trace keeps
~460 MB resident and the interpreter with numpy, pyarrow and pandas held 110 MB before the parse;
``benchmarks/bench_nsys.py`` prints them):

* Batches, not one Arrow table per query: an imported Arrow column keeps its whole batch alive,
  so columns kept zero-copy from one big batch held every column the SQL selected.
* NULL flags are bools, and zeros of their own mapping (no memory until written, ``lazy_zeros``) where
  a column has no NULL; so is the copy kind under its nulls.
* Columns of one value (a kernel's kind and category, an API call's device, stream and copy kind)
  are stride-0 views (``_constant``); codes into string pools and device ids are int32 where every
  value fits (``_narrow``).
* Assembly writes each column in its final order, hands it to Arrow without a copy and releases the
  groups' column before the next; launch links are joined early in it, while the groups are
  smaller than the table; string dictionaries are built through a lookup as long as the pool, and
  the copy kind only for the memcpy rows.
* Arrays smaller than glibc's (rising) mmap threshold come from the C heap and stay resident when
  freed; the heap's free pages are handed back between phases and after each table
  (``ParseHooks.release_memory``: the ``traceview`` command's ``malloc_trim``; a library call's
  process is left alone).
* Ids, string codes and launch dimensions are fetched as int32 while their values fit, and the
  groups keep process keys, thread ids, durations, streams and correlations as int32 where every
  value fits; the assembly writes them straight into the events table's int64 columns.
* The pid (one per rank: a rank is one process, and the events are sorted by rank) and the
  external id (-1: Nsight has none) are runs of one value, chunks that repeat one small array
  (``_runs``), not 37 MB columns each. Readers get the same values (``Table.equals`` holds); a
  reader that wants one numpy array of them makes it (``to_numpy`` of a chunked column copies).
  The rank stays one array: every analysis reads it.
* The collective and message dtype of NCCL kernels are written only on their rows (pages of no
  NCCL kernel cost nothing); equal validity bitmaps (the six launch dimensions') are one buffer.
* Launches are joined to GPU rows a block of ``JOIN_BLOCK_ROWS`` events at a time, the name and
  category codes become the dictionary indices in place, the row destinations are int32 and are
  dropped (but for the kernels') before the columns only kernels have are placed.

What becomes what
-----------------
===================================== ============ =========================================
source table                          kind         category
===================================== ============ =========================================
``CUPTI_ACTIVITY_KIND_KERNEL``        kernel       ``kernel``
``CUPTI_ACTIVITY_KIND_MEMCPY``        memcpy       ``gpu_memcpy``  (name ``Memcpy HtoD`` ...)
``CUPTI_ACTIVITY_KIND_MEMSET``        memset       ``gpu_memset``  (name ``Memset``)
``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` sync       ``cuda_sync``   (name ``Stream Sync`` ...)
``CUPTI_ACTIVITY_KIND_RUNTIME``       runtime      ``cuda_runtime`` or ``cuda_driver``
``NVTX_EVENTS`` push/pop, start/end   annotation   ``nvtx`` (default domain) or ``nvtx:<domain>``
``NVTX_EVENTS`` marks                 other        ``nvtx_mark`` (duration 0)
``OSRT_API`` (``--trace osrt``)       annotation   ``os_runtime`` (``poll``, ``pthread_mutex_lock`` ...)
===================================== ============ =========================================

NVTX ranges and OS runtime calls sit on the thread that made them (``globalTid``), which for a
PyTorch process is the thread that also makes the CUDA calls, so the CPU context of a host-bound
idle gap (``analyses/idle_gaps.py``, which looks at annotations) names them. OS runtime calls are
annotations rather than runtime calls so that nothing counts them as CUDA API calls; they never
become steps (``traceview.model.NON_STEP_CATEGORIES``).

* Names come from ``StringIds``: kernels by ``demangledName``, else ``shortName``, else
  ``mangledName``; API calls by ``nameId``, with the CUPTI version suffix of runtime names removed
  (``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``; driver names such as ``cuMemAlloc_v2`` keep
  theirs, as only suffixes of four or more digits are removed); NVTX ranges by ``text``, else
  ``textId``, without what ``torch.autograd.profiler.emit_nvtx`` appends (``aten::addmm, seq = 7,
  op_id = 9, sizes = [...]`` -> ``aten::addmm``), so that the ranges of one op share a name (each
  name was unique before, and no context or step marker could group them); OS runtime calls by
  ``nameId``.
* Runtime vs driver: ``eventClass`` through ``ENUM_NSYS_EVENT_CLASS`` (built-in: 0 runtime,
  1 driver); for an unknown class, a name starting with ``cu`` but not ``cuda`` is a driver call.
* Memcpy direction (``copy_kind``): ``ENUM_CUDA_MEMCPY_OPER`` when present (``CUDA_MEMCPY_KIND_HTOD``
  -> ``HtoD``), else the built-in CUPTI numbering: 0 Unknown, 1 HtoD, 2 DtoH, 3 HtoA, 4 AtoH, 5 AtoA,
  6 AtoD, 7 DtoA, 8 DtoD, 9 HtoH, 10 PtoP, 11 UVM HtoD, 12 UVM DtoH, 13 UVM DtoD.
* Sync names follow Kineto's ``cuda_sync`` spelling: 1 Event Sync, 2 Stream Wait Event,
  3 Stream Sync, 4 Context Sync (others from ``ENUM_CUPTI_SYNC_TYPE``). CUPTI reports a device id
  of 0 for sync records of every process, so a sync row takes the device of the process's other
  GPU activity on the same stream (else the process's only device); the fix is counted in
  ``event_counts["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION.device_from_activity"]``. Stream
  ``0xFFFFFFFF`` (context-wide) becomes -1.
* NCCL kernels (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``, ``ncclKernel_...``) get ``collective``
  from the name in PyTorch's spelling (``allreduce``, ``allgather``, ``reduce_scatter``,
  ``broadcast``, ``reduce``, ``sendrecv``) and ``msg_dtype`` when the name has one (``f32`` -> ``Float``).
  Nsight has no message sizes unless NVTX payload blobs were exported; they stay null.

Processes, threads and ranks
----------------------------
``pid = (globalTid >> 24) & 0xFFFFFF`` and ``tid = globalTid & 0xFFFFFF``; GPU rows carry only
``globalPid``, so their ``tid`` is -1 (their stream is in ``stream``). A process is identified by
``globalPid >> 24`` (pid plus the host/VM bits), so equal pids on two hosts stay apart.

Every process with events becomes one rank. Processes with GPU activity come first, ordered by
the lowest device id they used, then by pid; then processes with CUDA API calls only (by pid);
then processes with only NVTX events (by pid). Ranks are numbered 0, 1, ... in that order; an
export does not state the distributed rank, so ``RankInfo.rank_source`` says how the number was
given (``"nsys process pid=144 (device 0); rank by device order"``) and ``world_size`` is left
unknown. Rows of processes without events (e.g. only NVTX domain registrations) belong to no
rank; they are counted in the first rank's ``event_counts`` as ``<TABLE>.no_rank``. An export with
Nsight tables but no events gives one empty rank 0 (so its metadata and devices stay visible).

Launch links join a runtime/driver call to the kernels, copies, memsets and sync records it caused
on correlation id **and** process (ids repeat across processes), with category ``correlation``: on
one exact int64 key per row, ``(rank << 32) | correlation`` (a rank is one process), sorted once and
searched, so no match needs checking (``join_on_keys`` hashed the pair and verified every hit: 12x
slower); a correlation id beyond 32 bits falls back to ``join_on_keys``.

Steps
-----
With ``step_marker`` (``--step-marker``), the NVTX ranges whose names match it; else, per rank,
PyTorch profiler steps recorded as NVTX (``ProfilerStep#N``) where the rank has them, else
``step_N`` / ``iteration N`` ranges (``traceview.model.steps_from_annotations``).

Times
-----
Nsight stores int64 nanoseconds. ``start_ns`` is kept on the export's own timeline;
``dur_ns = end - start`` (a negative duration is clamped to 0 and counted in the warnings; an NVTX
range without ``end`` gets duration 0 and a warning). ``RankInfo.base_time_ns`` is the session's
absolute start (``TARGET_INFO_SESSION_START_TIME.utcEpochNs``, 0 if absent);
``raw_metadata["session_start"]`` also holds the timeline value of that instant
(``systemClockNs``, or ``ANALYSIS_DETAILS.startTime``) where the export has it, so
``absolute = base_time_ns + start_ns - session_start["timeline_ns"]``.

Metadata and counts
-------------------
``RankInfo.raw_metadata`` holds ``export`` (``META_DATA_EXPORT`` or ``EXPORT_META_DATA``),
``capture`` (``META_DATA_CAPTURE``; it may hold environment variables, so never render it raw),
``session_start`` and ``layout``. ``format_version`` is the nsys version
(``EXPORT_PRODUCT_VERSION``). Devices come from ``TARGET_INFO_GPU`` or, in old exports,
``TARGET_INFO_CUDA_GPU`` (whose ``globalMemorySize`` is in MiB; it is converted to bytes).

``event_counts`` has, per source table, ``<TABLE>.read`` (rows of this rank's process) and
``<TABLE>.mapped`` (rows that became events), plus ``mapped`` (all events of the rank). Rows read
but not mapped are counted by reason: ``NVTX_EVENTS.skipped_domain_create`` (domain names, used
for the category) and ``NVTX_EVENTS.skipped_other_type`` (NVTX categories, thread names and other
non-range records); ``NVTX_EVENTS.emit_nvtx_suffix_removed`` counts renamed ranges.

Values a hand-edited or exotic export may hold, each counted under its reason and said in the
warnings: a NULL ``start`` (``<TABLE>.skipped_null_start``), a GPU row's NULL ``deviceId``
(``<TABLE>.skipped_null_device``) and a NULL NVTX ``eventType`` (``NVTX_EVENTS.skipped_null_event_type``)
skip the row; a NULL ``end`` keeps it with duration 0 (``<TABLE>.null_end_duration_0``); a NULL
``globalPid``/``globalTid`` belongs to no process, so to no rank (``<TABLE>.no_rank_null_process``, in
the first rank's counts); text that is not UTF-8 (a BLOB, Latin-1) keeps its readable part with U+FFFD
for the bad bytes (``NVTX_EVENTS.text_not_utf8_replaced``, ``StringIds.value_not_utf8_replaced``) and a
NULL ``StringIds`` value is an empty name (``StringIds.value_null_empty``). A table without a column
traceview needs (``start``; ``StringIds.value``) is an error naming table and column. Tables
traceview does not map (OS runtime, scheduling, profiler overhead, ...) are counted once, in the
first rank's ``unmapped``, by table name, so nothing is dropped silently. A kernel's grid or block
size beyond 32 bits is left unknown (null), counted as ``<TABLE>.grid_beyond_32_bits_null``.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from traceview.errors import TraceFormatError, os_error, require_regular_file, sqlite_error
from traceview.parsing import NO_HOOKS, ParseHooks, do_nothing
from traceview.registry import InputFormat, register_input_format
from traceview.model import (
    EVENT_SCHEMA,
    DeviceInfo,
    Kind,
    RankInfo,
    Trace,
    empty_links,
    join_on_keys,
    kind_array,
    lazy_zeros,
    make_events_table,
    make_links_table,
    steps_from_annotations,
)

__all__ = ["parse_nsys", "looks_like_nsys", "export_nsys_rep"]

#: says (at DEBUG) when a table is read with sqlite3 because the ADBC driver could not read it
_log = logging.getLogger(__name__)

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
EXPORT_HINT = "export it first: nsys export --type sqlite --output X.sqlite X.nsys-rep"

KERNEL_T = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_T = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_T = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC_T = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
RUNTIME_T = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_T = "NVTX_EVENTS"
OSRT_T = "OSRT_API"
EVENT_TABLES = (KERNEL_T, MEMCPY_T, MEMSET_T, SYNC_T, RUNTIME_T, NVTX_T, OSRT_T)
#: A file is an Nsight export only if it has at least one of these.
CORE_TABLES = (KERNEL_T, RUNTIME_T, NVTX_T)

#: Tables that describe rather than record events: never counted as unmapped.
_INFO_PREFIXES = ("ENUM_", "TARGET_INFO_", "META_DATA_", "ANALYSIS_", "NVTX_PAYLOAD_", "sqlite_")
_INFO_TABLES = {"StringIds", "ThreadNames", "PROCESSES", "ProcessStreams", "EXPORT_META_DATA",
                "CUDA_CALLCHAINS", "OSRT_CALLCHAINS", "SAMPLING_CALLCHAINS", "UnwindMethodType"}

MEMCPY_KINDS_BUILTIN = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD",
}
SYNC_NAMES_BUILTIN = {0: "Unknown Sync", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync",
                      4: "Context Sync"}
EVENT_CLASS_BUILTIN = {0: "cuda_runtime", 1: "cuda_driver"}
#: NVTX event types (ENUM_NSYS_EVENT_TYPE) when the export has no enum table.
NVTX_RANGE_TYPES_BUILTIN = (59, 60, 70, 71)
NVTX_MARK_TYPES_BUILTIN = (34, 65)
NVTX_DOMAIN_CREATE_BUILTIN = 75

_RUNTIME_VERSION_SUFFIX = r"_v\d{4,}$"
#: What ``torch.autograd.profiler.emit_nvtx`` appends to an op's NVTX range name: sequence number,
#: op id, input shapes (``record_shapes``), input op ids. Removed so ranges of one op share a name.
EMIT_NVTX_SUFFIX = r", (?:seq = -?\d+|op_id = \d+|sizes = \[|input_op_ids = \[).*$"
_NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
_NCCL_COLLECTIVES = {
    "allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv", "send": "send",
    "recv": "recv", "alltoall": "all_to_all",
}
_NCCL_DTYPES = {
    "f32": "Float", "float": "Float", "f16": "Half", "half": "Half", "bf16": "BFloat16",
    "f64": "Double", "double": "Double", "i8": "Char", "int8_t": "Char", "u8": "Byte",
    "uint8_t": "Byte", "i32": "Int", "int32_t": "Int", "u32": "UInt32", "uint32_t": "UInt32",
    "i64": "Long", "int64_t": "Long", "u64": "UInt64", "uint64_t": "UInt64",
    "f8e4m3": "Float8_e4m3fn", "f8e5m2": "Float8_e5m2",
}
_BATCH = 1 << 18
#: The message dtype column (``msg_dtype``; ``dtype`` in the first model version).
_DTYPE_COLUMN = "msg_dtype" if "msg_dtype" in EVENT_SCHEMA.names else "dtype"


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, inverse), by hashing: O(n) where ``np.unique`` sorts every row."""
    # imported here, not at the top: registering this format must not import pandas (~0.25 s),
    # which `traceview analyze` imports while Kineto parse workers run (ParseHooks.meanwhile)
    import pandas as pd

    codes, uniques = pd.factorize(np.asarray(values), sort=True)
    return np.asarray(uniques), np.asarray(codes, dtype=np.int64)


def _distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (hash based, without the per-row codes ``_factorize`` also makes)."""
    import pandas as pd  # see _factorize

    return np.sort(pd.unique(np.asarray(values)))


def _distinct_rows(*columns: np.ndarray) -> list[tuple[int, ...]]:
    """Distinct combinations of equally long integer columns (hash based), in order of first
    appearance. Columns whose value ranges multiply to less than 2**62 are packed into one integer
    per row first (one hash per row instead of a frame of several columns)."""
    if len(columns[0]) == 0:
        return []
    import pandas as pd  # see _factorize

    lows = [int(c.min()) for c in columns]
    spans = [int(c.max()) - lo + 1 for c, lo in zip(columns, lows)]
    if math.prod(spans) < (1 << 62):
        packed = np.zeros(len(columns[0]), dtype=np.int64)
        for c, lo, span in zip(columns, lows, spans):
            packed = packed * span + (c.astype(np.int64) - lo)
        distinct = pd.unique(packed)
        parts = []
        for lo, span in zip(reversed(lows), reversed(spans)):
            parts.append(distinct % span + lo)
            distinct = distinct // span
        return [tuple(int(v) for v in row) for row in zip(*reversed(parts))]
    frame = pd.DataFrame({i: c for i, c in enumerate(columns)}).drop_duplicates()
    return [tuple(int(v) for v in row) for row in frame.itertuples(index=False, name=None)]


def _constant(value: int, n: int, dtype: type[np.integer]) -> np.ndarray:
    """A read-only column of ``n`` times ``value`` with no memory behind it (a stride-0 view): a
    group's columns that one value fills (the kind and category of a kernel table, the device of a
    CUDA API call) would otherwise cost a full column each until the events are assembled."""
    return np.broadcast_to(np.asarray(value, dtype=dtype), (n,))


def _narrow(values: np.ndarray) -> np.ndarray:
    """An int64 column as int32 where every value fits (codes into string pools, device ids): half
    the memory while the groups wait for assembly. Values that do not fit stay int64, so what is
    written into the events table is the same either way."""
    if values.dtype != np.int64 or len(values) == 0:
        return values
    if values.strides == (0,):
        return _constant(int(values[0]), len(values), np.int32) if -(1 << 31) <= values[0] < (1 << 31) else values
    if -(1 << 31) <= values.min() and values.max() < (1 << 31):
        return values.astype(np.int32)
    return values


def _used_positions(codes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct codes, inverse) for codes in ``[0, size)`` in linear time."""
    present = np.zeros(size, dtype=bool)
    present[codes] = True
    used = np.flatnonzero(present)
    rank = np.cumsum(present, dtype=np.int64) - 1
    return used, rank[codes]


def _sparse_dictionary(n: int, rows: np.ndarray, indices: np.ndarray, dictionary: pa.Array) -> pa.DictionaryArray:
    """A dictionary column of ``n`` rows that only ``rows`` (distinct) have, with ``indices`` there,
    null elsewhere. The indices are :func:`~traceview.model.lazy_zeros`, of which only the pages of ``rows`` are ever
    written: a column that few rows have (a memcpy's copy kind, an NCCL kernel's collective) costs
    next to no memory, where a dense one costs 4 bytes a row (18 MB at 4.6 M events)."""
    out = lazy_zeros(n, np.int32)
    out[rows] = indices
    validity = None
    if len(rows) < n:  # the bitmap straight from the rows (no bool column as long as the table)
        bits = np.zeros((n + 7) // 8, dtype=np.uint8)
        np.bitwise_or.at(bits, rows >> 3, (np.uint8(1) << (rows & 7).astype(np.uint8)))
        validity = pa.py_buffer(bits)
    arr = pa.Array.from_buffers(pa.int32(), n, [validity, pa.py_buffer(out)], null_count=n - len(rows))
    return pa.DictionaryArray.from_arrays(arr, dictionary)


def _decode_text(raw: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
    """Binary values as a string array, and which rows were not UTF-8 (None when all were).

    A bad value keeps its readable part with U+FFFD for the bad bytes."""
    try:
        return raw.cast(pa.string()), None  # validates UTF-8 in C
    except pa.ArrowInvalid:
        pass
    # hostile input only: find and repair the bad values one by one (a clean export never gets here)
    values = raw.to_pylist()
    bad = np.zeros(len(values), dtype=bool)
    for i, v in enumerate(values):
        if v is not None:
            try:
                values[i] = v.decode("utf-8")
            except UnicodeDecodeError:
                values[i], bad[i] = v.decode("utf-8", "replace"), True
    return pa.array(values, pa.string()), bad


# ----------------------------------------------------------------------------- detection


def _head(path: Path, n: int = 16) -> bytes:
    require_regular_file(path)  # before open: a FIFO would block it forever
    with open(path, "rb") as f:
        return f.read(n)


#: how long a read waits for a lock another program holds before the database is "locked"
BUSY_TIMEOUT_S = 5.0


def _connect(path: Path) -> sqlite3.Connection:
    uri = Path(os.path.abspath(path)).as_uri() + "?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)


def _table_names(con: sqlite3.Connection) -> list[str]:
    return [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]


def looks_like_nsys(path: str | os.PathLike[str]) -> bool:
    """True for an SQLite file that holds Nsight Systems tables (never raises)."""
    path = Path(path)
    try:
        if _head(path) != SQLITE_MAGIC:
            return False
        con = _connect(path)
        try:
            names = set(_table_names(con))
        finally:
            con.close()
    except (OSError, sqlite3.Error, TraceFormatError):
        return False
    return bool(names & set(CORE_TABLES)) or ("StringIds" in names and any(
        n.startswith("CUPTI_ACTIVITY_KIND_") or n.startswith("TARGET_INFO_") for n in names))


def export_nsys_rep(path: str | os.PathLike[str]) -> Path:
    """Export a ``.nsys-rep`` report to SQLite with the ``nsys`` CLI; returns the ``.sqlite`` path.

    The export is cached (by path, size and mtime) under the traceview cache directory
    (``$TRACEVIEW_CACHE_DIR``, else ``$XDG_CACHE_HOME/traceview``, else ``~/.cache/traceview``), in
    ``nsys-export/``; a temporary directory is used when that is not writable. Without ``nsys`` on
    PATH, raises :class:`TraceFormatError` saying how to export by hand.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError(path, "no such file")
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    target_name = f"{path.stem}-{key}.sqlite"
    try:
        from traceview.trace_cache import cache_dir

        out_dir = cache_dir() / "nsys-export"
        out_dir.mkdir(parents=True, exist_ok=True)
        if not os.access(out_dir, os.W_OK):
            raise OSError("not writable")
    except OSError:
        out_dir = Path(tempfile.mkdtemp(prefix="traceview-nsys-"))
    target = out_dir / target_name
    if target.is_file() and target.stat().st_size > 0:
        return target  # exported before: nsys is not needed again
    nsys = shutil.which("nsys")
    if nsys is None:
        raise TraceFormatError(
            path,
            "is an Nsight Systems report (.nsys-rep); traceview reads its SQLite export, and no nsys "
            "binary is on PATH to make one",
            f"run: nsys export --type sqlite --output {path.with_suffix('.sqlite').name} {path.name}",
        )
    tmp = out_dir / f".{path.stem}-{key}.{os.getpid()}.tmp.sqlite"
    cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(tmp), str(path)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TraceFormatError(path, f"nsys export failed ({exc})", EXPORT_HINT) from None
    if proc.returncode != 0 or not tmp.is_file():
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()
        detail = tail[-1] if tail else f"exit code {proc.returncode}"
        tmp.unlink(missing_ok=True)
        raise TraceFormatError(path, f"nsys export failed: {detail}", EXPORT_HINT)
    os.replace(tmp, target)
    return target


# ------------------------------------------------------------------------------ entry


def parse_nsys(path: str | os.PathLike[str], *, step_marker: str | None = None, hooks: ParseHooks = NO_HOOKS) -> Trace:
    """Parse one Nsight Systems SQLite export (or a ``.nsys-rep``, exported with ``nsys``). ``hooks``:
    what the calling process lends the parse (its ``release_memory`` is called between phases)."""
    path = Path(path)
    try:
        head = _head(path)
    except OSError as exc:
        raise os_error(path, exc) from None
    if head != SQLITE_MAGIC:
        if path.name.endswith(REPORT_SUFFIXES):
            return parse_nsys(export_nsys_rep(path), step_marker=step_marker, hooks=hooks)
        raise TraceFormatError(
            path, "is not an SQLite database, so not an Nsight Systems export",
            "make one with: nsys export --type sqlite --output X.sqlite X.nsys-rep",
        )
    try:
        con = _connect(path)
    except sqlite3.Error as exc:
        raise sqlite_error(path, exc) from None
    arrow_rows = _ArrowRows(path) if ROW_READER == "adbc" else None
    try:
        return _Parser(con, path, step_marker, arrow_rows, hooks.release_memory).run()
    except sqlite3.Error as exc:  # locked (in use), damaged, unreadable: errors.sqlite_error tells them apart
        raise sqlite_error(path, exc) from None
    finally:
        if arrow_rows is not None:
            arrow_rows.close()
        con.close()


# ------------------------------------------------------------------------ Arrow rows


#: Which reader fetches the rows of the event tables. ``"adbc"`` (the default): ADBC's SQLite
#: driver, straight into Arrow columns. ``"sqlite3"``: the standard library's row tuples, the reader
#: before issue 12, kept so that ``tests/test_nsys_arrow.py`` and ``benchmarks/bench_nsys.py`` can
#: compare the two on the same exports; both give identical traces. Table names, column lists and
#: the small metadata tables are read with ``sqlite3`` by both.
ROW_READER = "adbc"

#: SQLite's own words for the errors that must not be retried with the ``sqlite3`` reader (a lock
#: would be waited for twice) -> the result code :func:`traceview.errors.sqlite_error` knows.
_DRIVER_LOCKED = {"database is locked": "SQLITE_BUSY", "database table is locked": "SQLITE_LOCKED"}
#: rows per Arrow batch. Each batch is copied into the growing result columns and dropped before
#: the next is read: Arrow arrays imported from the driver keep their whole batch alive while any
#: column of it is referenced, so one batch per table kept every column the SQL selected (~300 MB
#: on the 292 MB benchmark export) alive as long as the groups used any of them. The driver types
#: a column by its first batch; a later value of another type is its error, and that table goes
#: through the ``sqlite3`` reader, as a mistyped value always did.
ARROW_BATCH_ROWS = 1 << 16
#: Columns of ids and sizes that nsys writes as 32-bit values (devices, streams, correlation and
#: string ids, event classes, launch dimensions). An expression of these alone is read as int32
#: (half the memory of the fetched columns and of the groups made of them) until a value does not
#: fit: then as int64 (:class:`_Growing`), so the values are the same either way; every reader of
#: them takes either width. Times, ``globalPid``/``globalTid`` and byte counts stay int64.
NARROW_COLUMNS = frozenset({
    "deviceId", "streamId", "correlationId", "nameId", "eventClass", "demangledName", "shortName",
    "mangledName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
})
_IS_NULL = " IS NULL"


class _ArrowRows:
    """The rows of one export through ADBC's SQLite driver, as Arrow columns.

    One connection, opened at the first query, and one more for a prefetched table (each reads
    in its own transaction: the file does not change while nsys is not writing it, and a writer's
    lock is waited for, then said, as with sqlite3). Anything the driver cannot
    type as traceview needs (an integer column holding text, a REAL or a BLOB) or cannot read
    (a damaged page) makes :meth:`fetch` return None, so the ``sqlite3`` reader reads that table
    and reports what is wrong exactly as before; a locked database is said at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._con: _DriverConnection | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[str, Future[_Fetched | None]] = {}  # SQL -> its result, being read

    def _uri(self) -> str:
        return Path(os.path.abspath(self.path)).as_uri() + "?mode=ro"

    def _connection(self) -> _DriverConnection:
        if self._con is None:
            self._con = _DriverConnection(self._uri())
        return self._con

    def close(self) -> None:
        if self._pool is not None:  # a prefetch nobody asked for (the parse stopped early) is dropped
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool, self._pending = None, {}
        if self._con is not None:
            self._con.close()
            self._con = None

    def query(self, sql: str, plan: _Plan) -> _Fetched | None:
        """The result of ``sql`` as columns (prefetched if :meth:`prefetch` was given it); None
        where the driver could not read or type it."""
        try:
            pending = self._pending.pop(sql, None)
            return pending.result() if pending is not None else self._connection().run(sql, plan)
        except ImportError:
            return None
        except Exception as exc:  # noqa: BLE001 - driver errors have no common base with pyarrow's
            text = str(exc)
            words = next((w for w in _DRIVER_LOCKED if w in text), None)
            if words is None:
                return None
            error = sqlite3.OperationalError(words)
            error.sqlite_errorname = _DRIVER_LOCKED[words]  # read by errors.sqlite_error
            raise error from None

    def prefetch(self, table: str, exprs: list[str], text: str | None = None, order: str = "") -> None:
        """Start reading what :meth:`fetch` will be asked for ``table`` in a background thread, on a
        connection of its own: the driver lets go of the GIL while SQLite steps through rows, so a
        big table is read while the one before it is turned into columns, where a second core is
        free. One table at a time; its result waits in memory until asked for."""
        sql, in_sql, null_of = self.statement(table, exprs, text, order)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="traceview-nsys")
        self._pending[sql] = self._pool.submit(self._query_alone, sql, _Plan.of(exprs, in_sql, null_of, text))

    def _query_alone(self, sql: str, plan: _Plan) -> _Fetched | None:
        con = _DriverConnection(self._uri())
        try:
            return con.run(sql, plan)
        finally:
            con.close()

    @staticmethod
    def statement(table: str, exprs: list[str], text: str | None,
                  order: str) -> tuple[str, list[int], dict[int, int]]:
        """(SQL, positions of ``exprs`` it selects, flag position -> position of the expression
        whose NULL test the flag is: read from the Arrow validity bitmap, not computed by SQLite)."""
        plain = {e: i for i, e in enumerate(exprs) if not e.endswith(_IS_NULL)}
        null_of = {i: plain[e.removesuffix(_IS_NULL)] for i, e in enumerate(exprs)
                   if e.endswith(_IS_NULL) and e.removesuffix(_IS_NULL) in plain}
        in_sql = [i for i in range(len(exprs)) if i not in null_of]
        sql_exprs = [exprs[i] for i in in_sql]
        if text is not None:
            sql_exprs += [f"COALESCE(CAST({text} AS BLOB), X'')", f"{text}{_IS_NULL}"]
        return "SELECT " + ", ".join(sql_exprs) + f' FROM "{table}" {order}', in_sql, null_of

    def fetch(self, table: str, exprs: list[str], text: str | None,
              order: str) -> tuple[list[np.ndarray], pa.Array | None, np.ndarray | None] | None:
        """What :meth:`_Parser.fetch` returns (plus the rows whose text was not UTF-8), or None.

        A flag ``X IS NULL`` of an expression ``X`` that is itself selected is read from the Arrow
        validity bitmap rather than computed by SQLite (as bools, not 0/1 integers). The text is
        selected as ``COALESCE(CAST(text AS BLOB), X'')`` with its NULL flag beside it: the driver
        types a column by its first batch, and a first batch of NULLs would type it as integers."""
        sql, in_sql, null_of = self.statement(table, exprs, text, order)
        result = self.query(sql, _Plan.of(exprs, in_sql, null_of, text))
        if result is None:
            return None
        texts = replaced = None
        if result.text is not None:
            texts, replaced = _decode_text(result.text)
        columns = [result.nulls[null_of[i]] if i in null_of else result.values[i] for i in range(len(exprs))]
        return columns, texts, replaced


class _DriverConnection:
    """One connection of ADBC's SQLite driver, through ``adbc_driver_manager``'s own classes: its
    DB-API module imports pyarrow's dataset, Parquet, Acero and file-system modules, 11 MB resident
    for nothing a read uses (issue 12 measures the parse's peak memory). As that module's
    connection does, it reads in a transaction (autocommit off) and waits for a writer's lock as
    long as ``sqlite3`` does."""

    def __init__(self, uri: str) -> None:
        import adbc_driver_manager  # here, not at import: Kineto-only runs skip it
        import adbc_driver_sqlite

        self._manager = adbc_driver_manager
        self.database = adbc_driver_sqlite.connect(uri)
        try:
            self.connection = adbc_driver_manager.AdbcConnection(self.database)
            self.connection.set_autocommit(False)
            self._execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}", lambda reader: reader.read_all())
        except BaseException:
            self.close()
            raise

    def _execute(self, sql: str, consume: Callable[[pa.RecordBatchReader], Any]) -> Any:
        statement = self._manager.AdbcStatement(self.connection)
        try:
            statement.set_options(**{"adbc.sqlite.query.batch_rows": str(ARROW_BATCH_ROWS)})
            statement.set_sql_query(sql)
            stream, _ = statement.execute_query()
            reader = pa.RecordBatchReader.from_stream(stream)
            try:
                return consume(reader)
            finally:
                reader.close()  # (a result read in part: the statement cannot close over an open stream)
        finally:
            statement.close()

    def run(self, sql: str, plan: _Plan) -> _Fetched | None:
        """The result of ``sql`` read into columns (:func:`_read_batches`)."""
        return self._execute(sql, lambda reader: _read_batches(reader, plan))

    def close(self) -> None:
        for part in ("connection", "database"):
            handle = getattr(self, part, None)
            if handle is not None:
                try:
                    handle.close()
                except Exception:  # noqa: BLE001 - closing a read-only connection: nothing to lose
                    pass
                setattr(self, part, None)


@dataclass
class _Plan:
    """What :func:`_read_batches` makes of each result column."""

    selected: list[int]  # expression index of each integer column of the result, in order
    null_flags: set[int]  # expressions whose NULL flags are asked for
    text: bool  # the result ends with a text column (binary) and its NULL flag
    narrow: set[int] = field(default_factory=set)  # expressions read as int32 while their values fit

    @classmethod
    def of(cls, exprs: list[str], in_sql: list[int], null_of: dict[int, int], text: str | None) -> _Plan:
        narrow = {i for i in in_sql if set(re.findall(r'"([^"]*)"', exprs[i])) <= NARROW_COLUMNS}
        return cls(selected=in_sql, null_flags=set(null_of.values()), text=text is not None, narrow=narrow)


@dataclass
class _Fetched:
    """A result as columns: int64 values (NULL -> -1) and NULL flags by expression index, and the
    text (binary, NULL where its flag says so) where one was selected."""

    values: dict[int, np.ndarray]
    nulls: dict[int, np.ndarray]
    text: pa.Array | None


class _Growing:
    """One column filled batch by batch. It grows by ``realloc`` (``ndarray.resize``): for big
    arrays glibc moves pages rather than bytes, and the unused end of the capacity is never
    touched, so it costs address space, not memory; no list of parts is joined at the end.

    A column started as int32 (``NARROW_COLUMNS``) becomes int64 at the first batch whose values
    do not fit, so every value is kept exactly either way."""

    def __init__(self, dtype: type[np.generic]) -> None:
        self.data = np.empty(0, dtype=dtype)
        self.size = 0

    def append(self, values: np.ndarray) -> None:
        if self.data.dtype == np.int32 and values.dtype == np.int64 and len(values) and (
                values.min() < -(1 << 31) or values.max() >= (1 << 31)):
            wide = self.data[:self.size].astype(np.int64)
            self.data = wide  # (the int32 column is freed here)
        end = self.size + len(values)
        if end > len(self.data):
            self.data.resize(max(end, 2 * len(self.data), ARROW_BATCH_ROWS), refcheck=False)
        self.data[self.size:end] = values
        self.size = end

    def finish(self) -> np.ndarray:
        self.data.resize(self.size, refcheck=False)
        return self.data


def _read_batches(reader: pa.RecordBatchReader, plan: _Plan) -> _Fetched | None:
    """Read a result batch by batch into columns, each batch dropped before the next is read
    (see ``ARROW_BATCH_ROWS``); None where the driver typed a column as traceview cannot use."""
    values = {i: _Growing(np.int32 if i in plan.narrow else np.int64) for i in plan.selected}
    nulls = {i: _Growing(np.bool_) for i in plan.null_flags}
    text_chunks: list[pa.Array] = []
    text_null = _Growing(np.int64)
    for batch in reader:
        for k, i in enumerate(plan.selected):
            column = batch.column(k)
            ints = _int_column(column)
            if ints is None:
                return None
            values[i].append(ints)
            if i in nulls:
                nulls[i].append(_null_flags(column))
        if plan.text:
            chunk, flag = batch.column(len(plan.selected)), _int_column(batch.column(len(plan.selected) + 1))
            if flag is None or not pa.types.is_binary(chunk.type):
                return None
            text_chunks.append(chunk)
            text_null.append(flag)
        del batch
    text = None
    if plan.text:
        raw = pa.concat_arrays(text_chunks) if text_chunks else pa.array([], pa.binary())
        text = _with_nulls(raw, text_null.finish() == 1)
    flags = {i: _zeros_if_clean(g.finish()) for i, g in nulls.items()}
    return _Fetched(values={i: g.finish() for i, g in values.items()}, nulls=flags, text=text)


def _zeros_if_clean(flags: np.ndarray) -> np.ndarray:
    """NULL flags; where no row is NULL (a clean export), :func:`~traceview.model.lazy_zeros` instead: pages nobody
    writes cost no memory."""
    return flags if flags.any() else lazy_zeros(len(flags), np.bool_)


def _null_flags(values: pa.Array) -> np.ndarray:
    """Which rows of a result column are NULL, as bools (``X IS NULL`` read from the validity bitmap)."""
    if values.null_count == 0:
        return np.zeros(len(values), dtype=bool)
    return np.asarray(values.is_null(), dtype=bool)


def _int_column(values: pa.Array) -> np.ndarray | None:
    """An integer result column as int64 with NULL -> -1 (as ``COALESCE(x, -1)``); None when the
    driver typed it as anything else (REAL, text: the ``sqlite3`` reader says what to do)."""
    import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
    if pa.types.is_null(values.type):
        return np.full(len(values), -1, dtype=np.int64)
    if not pa.types.is_int64(values.type):
        return None
    if values.null_count:
        values = pc.fill_null(values, -1)
    return values.to_numpy(zero_copy_only=False)


def _with_nulls(values: pa.Array, null: np.ndarray) -> pa.Array:
    """``values`` with the rows where ``null`` is True set to NULL."""
    import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
    if not null.any():
        return values
    return pc.if_else(pa.array(null), pa.scalar(None, values.type), values)


# ---------------------------------------------------------------------------- strings


class _Strings:
    """Integer codes for strings from several sources, turned into one dictionary at the end.

    Codes index a list of string blocks (``StringIds`` values first); duplicates across blocks are
    merged by :meth:`dictionary_array`. Everything is vectorised; only distinct values are touched.
    """

    def __init__(self, ids: np.ndarray | None = None, values: pa.Array | None = None) -> None:
        self.ids = ids if ids is not None else np.empty(0, dtype=np.int64)
        first = values if values is not None else pa.array([], pa.string())
        self.blocks: list[pa.Array] = [first]
        self.size = len(first)
        self._consts: dict[str, int] = {}
        self.missing = 0

    def add_block(self, values: pa.Array) -> int:
        base = self.size
        values = values.cast(pa.string()).fill_null("")
        self.blocks.append(values)
        self.size += len(values)
        return base

    def const(self, value: str) -> int:
        if value not in self._consts:
            self._consts[value] = self.add_block(pa.array([value], pa.string()))
        return self._consts[value]

    def consts(self, values: list[str]) -> np.ndarray:
        return np.array([self.const(v) for v in values], dtype=np.int64)

    def from_ids(self, ids: np.ndarray, transform: Callable[[pa.Array], pa.Array] | None = None) -> np.ndarray:
        """Codes for ``StringIds`` ids (unknown ids -> ``""``, counted in ``missing``): int64, or
        int32 while the pool is far from 2**31 strings (callers may write more codes into them)."""
        empty = self.const("")
        if len(self.ids) == 0 or len(ids) == 0:
            self.missing += int(len(ids))
            return np.full(len(ids), empty, dtype=np.int64)
        # look up each distinct id once (a table refers to few names): its code, then spread to
        # the rows, so that the only arrays as long as the rows are the inverse and the codes
        distinct_ids, inverse = _factorize(np.asarray(ids))
        distinct_pos = np.minimum(np.searchsorted(self.ids, distinct_ids), len(self.ids) - 1)
        found = self.ids[distinct_pos] == distinct_ids
        self.missing += int(np.bincount(inverse, minlength=len(distinct_ids))[~found].sum())
        code_of = np.full(len(distinct_ids), empty, dtype=np.int64)
        if transform is None:
            code_of[found] = distinct_pos[found]
        else:  # the distinct ids are sorted, so are their positions: one block in pool order
            base = self.add_block(transform(self.blocks[0].take(pa.array(distinct_pos[found]))))
            code_of[found] = base + np.arange(int(found.sum()), dtype=np.int64)
        return code_of.astype(np.int32 if self.size < (1 << 30) else np.int64)[inverse]

    def ids_matching(self, ids: np.ndarray, pattern: str) -> np.ndarray:
        """Boolean per id: its ``StringIds`` value matches ``pattern`` (unknown ids: False)."""
        import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
        ids = np.asarray(ids, dtype=np.int64)
        out = np.zeros(len(ids), dtype=bool)
        if len(self.ids) == 0 or len(ids) == 0:
            return out
        pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        found = self.ids[pos] == ids
        uniq, inverse = _used_positions(pos[found], len(self.ids))
        hits = pc.match_substring_regex(self.blocks[0].take(pa.array(uniq)), pattern).fill_null(False)
        out[found] = np.asarray(hits, dtype=bool)[inverse]
        return out

    def from_strings(self, values: pa.Array) -> np.ndarray:
        """Codes for a string array (nulls -> ``""``)."""
        encoded = values.cast(pa.string()).dictionary_encode()
        base = self.add_block(encoded.dictionary)
        idx = encoded.indices
        out = np.full(len(values), self.const(""), dtype=np.int64)
        valid = np.asarray(idx.is_valid())
        out[valid] = base + np.asarray(idx.drop_null(), dtype=np.int64)
        return out

    def dictionary_array(self, codes: np.ndarray, mask: np.ndarray | None = None, *,
                         reuse: bool = False) -> pa.DictionaryArray:
        """A compact int32 dictionary array of ``codes`` (any integer type); rows where ``mask`` is
        True are null. The codes are mapped through a lookup as long as the pool, so the only array
        as long as the rows that is made is the int32 indices themselves; with ``reuse`` (the
        caller's own int32 codes, not read again) not even that: the codes become the indices."""
        masked = mask is not None and bool(mask.any())
        if masked:
            assert mask is not None
            fill = codes[~mask][0] if (~mask).any() else self.const("")
            codes = np.where(mask, fill, codes)
        if len(codes) == 0:
            return pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string()))
        lookup, dictionary = self._lookup(codes)
        if reuse and not masked and codes.dtype == np.int32:
            for first in range(0, len(codes), JOIN_BLOCK_ROWS):  # in place, a block at a time
                block = codes[first:first + JOIN_BLOCK_ROWS]
                block[...] = lookup[block]
            indices = codes
        else:
            indices = lookup[codes]
        arr = pa.array(indices, pa.int32(), mask=mask if masked else None)
        return pa.DictionaryArray.from_arrays(arr, dictionary)

    def sparse_dictionary_array(self, n: int, rows: np.ndarray, codes: np.ndarray) -> pa.DictionaryArray:
        """``dictionary_array(full, mask=full < 0)`` of a column that only ``rows`` (distinct, at
        least one) of ``n`` have, with ``codes`` there (the copy kind of memcpy rows), without a
        column of codes as long as the table. Under the nulls are zeros (:func:`~traceview.model.lazy_zeros`) (where
        ``dictionary_array`` repeats the first row's index): only the pages of ``rows`` are ever
        written, so a column that a few thousand copies have costs next to no memory."""
        lookup, dictionary = self._lookup(codes)
        return _sparse_dictionary(n, rows, lookup[codes], dictionary)

    def _lookup(self, codes: np.ndarray) -> tuple[np.ndarray, pa.Array]:
        """(pool position -> index into the dictionary, the dictionary) of the strings ``codes`` use,
        each distinct string once."""
        present = np.zeros(self.size, dtype=bool)
        present[codes] = True
        used = np.flatnonzero(present)
        values = pa.concat_arrays([b.cast(pa.string()) for b in self.blocks]).take(pa.array(used))
        merged = values.dictionary_encode()
        lookup = np.zeros(self.size, dtype=np.int32)
        lookup[used] = np.asarray(merged.indices, dtype=np.int32)
        return lookup, merged.dictionary


# ------------------------------------------------------------------------------ parser


#: grid and block sizes are 32-bit values (``EVENT_SCHEMA``'s int32 columns)
GRID_LIMIT = 1 << 31
#: times must lie within +-2**61 ns (as the Kineto parser's): beyond it sums of times wrap int64
TIME_LIMIT_NS = 2**61


@dataclass
class _Group:
    """Rows read from one source table (all rows; ``keep`` marks those that become events)."""

    table: str
    proc: np.ndarray  # globalPid >> 24, -1 when absent
    tid: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    kind: np.ndarray  # int8 codes
    category: np.ndarray  # codes in the category pool
    name: np.ndarray  # codes in the name pool
    device: np.ndarray
    stream: np.ndarray
    corr: np.ndarray
    keep: np.ndarray
    copy_kind: np.ndarray  # codes in the name pool of the copy kind (memcpy rows), -1 elsewhere
    optional: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # name -> (values, valid)
    #: rows counted in ``event_counts["<table>.<note>"]``: why a row was skipped, or what was done to it
    notes: dict[str, np.ndarray] = field(default_factory=dict)


class _Parser:
    def __init__(self, con: sqlite3.Connection, path: Path, step_marker: str | None,
                 arrow_rows: _ArrowRows | None = None, release_memory: Callable[[], None] = do_nothing) -> None:
        self.con = con
        #: hands the C heap's free pages back (the caller's hook; the command's ``malloc_trim``).
        #: Arrays smaller than glibc's mmap threshold, which rises to 32 MB as big arrays are freed,
        #: come from the heap; freed, they stay resident until trimmed, so an export's fetch and
        #: assembly left 50-110 MB of free memory counted in the process's RSS, under the peak that
        #: followed. Called between the phases and after each table is read: a few milliseconds.
        self.release_memory = release_memory
        self.arrow_rows = arrow_rows  # None: every table through sqlite3 row tuples
        self.path = path
        self.step_marker = step_marker
        self.tables = set(_table_names(con))
        self._columns: dict[str, set[str]] = {}
        self.warnings: list[str] = []
        self.categories = _Strings()
        #: rows of a table whose text was not UTF-8 (repaired with U+FFFD), by table
        self.text_replaced: dict[str, np.ndarray] = {}
        #: NULL flags (start, end, process, device) of the table being read, for repair_nulls
        self.pending_nulls: list[np.ndarray] = []
        #: counts about the file rather than a rank's rows (``StringIds`` values): in the first rank's
        self.file_counts: dict[str, int] = {}

    # -- helpers -----------------------------------------------------------------------
    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            self._columns[table] = {r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')}
        return self._columns[table]

    def col(self, table: str, *names: str, default: str = "NULL") -> str:
        """SQL for the first of ``names`` that the table has (COALESCE of all present ones)."""
        present = [f'"{n}"' for n in names if n in self.columns(table)]
        if not present:
            return default
        if default != "NULL":
            present.append(default)
        return present[0] if len(present) == 1 else f"COALESCE({', '.join(present)})"

    def fetch(self, table: str, exprs: list[str], text: str | None = None,
              order: str = "") -> tuple[list[np.ndarray], pa.Array | None]:
        """Integer columns ``exprs`` (NULL -> -1) of ``table`` as int64 arrays (a flag ``X IS NULL``
        of a selected ``X`` may come as bools instead), and optionally one text column as a pyarrow
        string array.

        Through ADBC straight into Arrow (:class:`_ArrowRows`) unless ``ROW_READER`` says
        ``"sqlite3"`` or the driver cannot type the table's values (then :meth:`fetch_tuples`, the
        reader every value of any SQLite type goes through, says what is wrong)."""
        if self.arrow_rows is not None:
            fetched = self.arrow_rows.fetch(table, exprs, text, order)
            if fetched is not None:
                columns, texts, replaced = fetched
                if replaced is not None:
                    self.text_replaced[table] = replaced
                return columns, texts
            _log.debug("%s: table %s read with sqlite3: the driver could not read or type it", self.path, table)
        return self.fetch_tuples(table, exprs, text, order)

    def fetch_tuples(self, table: str, exprs: list[str], text: str | None = None,
                     order: str = "") -> tuple[list[np.ndarray], pa.Array | None]:
        """:meth:`fetch` through ``sqlite3`` row tuples (the reader before issue 12).

        Rows are taken in batches and flattened by ``np.fromiter`` over the row tuples: C loops only.
        """
        k = len(exprs)
        sql = "SELECT " + ", ".join(f"COALESCE({e}, -1)" for e in exprs) + f' FROM "{table}" {order}'
        cur = self.con.execute(sql)
        blocks: list[np.ndarray] = []
        try:
            while True:
                batch = cur.fetchmany(_BATCH)
                if not batch:
                    break
                flat = np.fromiter(itertools.chain.from_iterable(batch), dtype=np.int64, count=len(batch) * k)
                blocks.append(flat.reshape(-1, k))
        except (TypeError, ValueError) as exc:
            raise TraceFormatError(self.path, f"table {table} holds values of an unexpected type ({exc})") from None
        except OverflowError:
            raise TraceFormatError(self.path, f"table {table} holds a number beyond 64-bit integers where nsys writes "
                                   "integers", "re-export the report with nsys export --type sqlite") from None
        flat = np.concatenate(blocks) if blocks else np.empty((0, k), dtype=np.int64)
        columns = [np.ascontiguousarray(flat[:, i]) for i in range(k)]
        texts = None
        if text is not None:
            texts = self.fetch_text(table, text, order)
            if len(texts) != len(flat):
                raise TraceFormatError(self.path, f"table {table} changed while it was read")
        return columns, texts

    def fetch_text(self, table: str, text: str, order: str) -> pa.Array:
        """One text column as a pyarrow string array. Values are read as bytes (``CAST AS BLOB``):
        a BLOB, an integer or text that is not UTF-8 would otherwise stop sqlite3 or pyarrow. Text
        that is not UTF-8 is decoded with U+FFFD for the bad bytes; its rows are in
        ``self.text_replaced[table]`` (counted by the caller)."""
        cur = self.con.execute(f'SELECT CAST({text} AS BLOB) FROM "{table}" {order}')
        parts = []
        while True:
            batch = cur.fetchmany(_BATCH)
            if not batch:
                break
            parts.append(pa.array(list(itertools.chain.from_iterable(batch)), pa.binary()))
        raw = pa.concat_arrays(parts) if parts else pa.array([], pa.binary())
        texts, replaced = _decode_text(raw)
        if replaced is not None:
            self.text_replaced[table] = replaced
        return texts

    def require(self, table: str, *names: str) -> None:
        """Stop with one line when ``table`` lacks a column traceview cannot do without (SQLite would
        read a missing ``"column"`` as the string literal, and every row would be a type error)."""
        for name in names:
            if name not in self.columns(table):
                raise TraceFormatError(self.path, f"the export lacks column {name} of table {table}",
                                       "nsys version? export it again with a current nsys")

    def enum(self, table: str) -> dict[int, tuple[str, str]]:
        if table not in self.tables:
            return {}
        cols = self.columns(table)
        name = '"name"' if "name" in cols else "''"
        label = '"label"' if "label" in cols else "''"
        rows = self.con.execute(f'SELECT id, {name}, {label} FROM "{table}"')
        return {int(r[0]): (r[1] or "", r[2] or "") for r in rows}

    def durations(self, table: str, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """``end - start``, negative ones clamped to 0 (and said). ``end`` is overwritten: every
        caller passes a column of its own that it does not read again (no second int64 column)."""
        if end.dtype == np.int64 and end.flags.writeable and not np.may_share_memory(end, start):
            dur = np.subtract(end, start, out=end)
        else:
            dur = end - start
        negative = int((dur < 0).sum())
        if negative:
            self.warnings.append(f"{table}: {negative} rows end before they start (duration set to 0)")
            dur = np.maximum(dur, 0)
        return dur

    def group(self, table: str, proc: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray,
              kind: Kind | np.ndarray, category: int | np.ndarray, name: int | np.ndarray, *, device=None,
              stream=None, corr=None, keep=None) -> _Group:
        """One table's rows; a category or name given as one code is that code on every row."""
        n = len(start)
        if isinstance(category, int):
            category = _constant(category, n, np.int32)
        if isinstance(name, int):
            name = _constant(name, n, np.int32)
        minus = _constant(-1, n, np.int64)
        kinds = _constant(int(kind), n, np.int8) if isinstance(kind, Kind) else kind.astype(np.int8)
        # ids, durations and process keys as int32 where every value fits (_narrow): the groups
        # wait for the assembly, which writes them into the events table's int64 columns
        return _Group(
            table=table, proc=_narrow(proc), tid=_narrow(tid), start=start,
            dur=_narrow(self.durations(table, start, end)), kind=kinds,
            category=_narrow(category), name=_narrow(name),
            device=minus if device is None else _narrow(device),
            stream=minus if stream is None else _narrow(np.where(stream == 0xFFFFFFFF, -1, stream)),
            corr=minus if corr is None else _narrow(corr),
            keep=np.ones(n, dtype=bool) if keep is None else keep,
            copy_kind=_constant(-1, n, np.int32),
        )

    # -- readers -----------------------------------------------------------------------
    def read_strings(self) -> _Strings:
        if "StringIds" not in self.tables:
            self.warnings.append("no StringIds table: names are empty")
            return _Strings()
        self.require("StringIds", "id", "value")
        (ids,), values = self.fetch("StringIds", ['"id"'], text='"value"', order='ORDER BY "id"')
        assert values is not None  # fetch returns the text column it was asked for
        repaired = int(self.text_replaced.get("StringIds", np.zeros(0, bool)).sum())
        missing = values.null_count
        for what, n in (("value_not_utf8_replaced", repaired), ("value_null_empty", missing)):
            if n:
                self.file_counts[f"StringIds.{what}"] = n
        if repaired:
            self.warnings.append(f"StringIds: {repaired} names are not UTF-8 (bad bytes shown as U+FFFD)")
        if missing:
            self.warnings.append(f"StringIds: {missing} names are NULL (left empty)")
        return _Strings(ids, values.fill_null(""))

    def end_expr(self, table: str) -> str:
        """``end`` as it is (NULL where unknown: the caller puts the start there, by its NULL flag,
        which the Arrow reader gets from the validity bitmap, so SQLite computes no COALESCE), or
        ``start`` for a table without the column."""
        return '"end"' if "end" in self.columns(table) else '"start"'

    def null_checks(self, table: str, *names: str) -> list[str]:
        """SQL flags (1/0) for NULL in each of ``names`` (0 where the table lacks the column)."""
        return [f'"{n}" IS NULL' if n in self.columns(table) else "0" for n in names]

    def _gpu_common(self, table: str, extra: list[str]) -> tuple[list[Any], np.ndarray, np.ndarray]:
        """The columns every GPU activity table has, then ``extra``; the NULL flags of start, end,
        globalPid and deviceId are kept for :meth:`repair_nulls` in ``self.pending_nulls``."""
        t = table
        self.require(t, "start")
        exprs = ['"start"', self.end_expr(t), self.col(t, "deviceId"), self.col(t, "streamId"),
                 self.col(t, "correlationId"), self.col(t, "globalPid")]
        flags = self.null_checks(t, "start", "end", "globalPid", "deviceId")
        cols, _ = self.fetch(t, exprs + extra + flags)
        self.pending_nulls = cols[-4:]
        cols = cols[:-4]
        cols[1] = _start_where_no_end(cols[0], cols[1], self.pending_nulls[1])
        gpid = cols[5]
        proc = _process_key(gpid)
        return cols, proc, _constant(-1, len(gpid), np.int64)

    def repair_nulls(self, g: _Group) -> _Group:
        """Rows with NULL where a value is needed: skipped (no start, no process, a GPU row without
        device) or repaired (no end: duration 0), each counted in ``event_counts`` under its reason
        and said in the warnings. Without this a NULL start read as -1 (a span of the whole clock),
        a NULL process became an extra rank and a NULL device a "GPU -1"."""
        null_start, null_end, null_proc, null_device = (f.astype(bool, copy=False) for f in self.pending_nulls)
        self.pending_nulls = []
        if g.table == SYNC_T:  # sync rows take the device of their stream's activity (_fix_sync_devices)
            null_device = np.zeros_like(null_device)
        skipped = np.zeros(len(g.start), dtype=bool)
        # one range for every time, as the Kineto parser's (+-2**61 ns): beyond it sums of times wrap
        with np.errstate(over="ignore"):
            # (not np.abs: the absolute value of the int64 minimum is itself)
            bad_time = (g.start > TIME_LIMIT_NS) | (g.start < -TIME_LIMIT_NS) | (g.dur < 0) | (g.dur > TIME_LIMIT_NS)
        bad_time &= ~null_start
        reasons = (("skipped_null_start", null_start, "have no start (NULL): skipped"),
                   ("skipped_time_out_of_range", bad_time,
                    "have a start or duration beyond +-2**61 ns (or an end before the start): skipped"),
                   ("no_rank_null_process", null_proc, "have no process (NULL globalPid/globalTid): skipped"),
                   ("skipped_null_device", null_device, "have no device (NULL deviceId): skipped"))
        for note, flag, said in reasons:
            rows = flag & ~skipped & g.keep
            skipped |= rows
            if rows.any():
                g.notes[note] = rows
                self.warnings.append(f"{g.table}: {int(rows.sum())} rows {said}")
        g.keep = g.keep & ~skipped
        no_end = null_end & g.keep
        if no_end.any():
            g.dur = np.where(no_end, 0, g.dur)
            g.notes["null_end_duration_0"] = no_end
            self.warnings.append(f"{g.table}: {int(no_end.sum())} rows have no end (NULL): kept with duration 0")
        return g

    def read_kernels(self, names: _Strings) -> _Group | None:
        t = KERNEL_T
        if t not in self.tables:
            return None
        dims = ["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"]
        extra = [self.col(t, "demangledName", "shortName", "mangledName", default="-1")]
        extra += [self.col(t, d, default="-1") for d in dims]
        cols, proc, tid = self._gpu_common(t, extra)
        start, end, device, stream, corr = cols[:5]
        n = len(start)
        g = self.group(t, proc, tid, start, end, Kind.KERNEL, self.categories.const("kernel"),
                       names.from_ids(cols[6]), device=device, stream=stream, corr=corr)
        beyond = np.zeros(n, dtype=bool)  # a launch dimension is a 32-bit value: a bigger one is no size
        for i, d in enumerate(dims):
            v = cols[7 + i]
            fits = v < GRID_LIMIT
            beyond |= ~fits
            g.optional[f"{d[:-1].lower()}_{d[-1].lower()}"] = (
                (_narrow(v), v >= 0) if fits.all() else (_narrow(np.where(fits, v, -1)), (v >= 0) & fits))
        g = self.repair_nulls(g)
        beyond &= g.keep
        if beyond.any():
            g.notes["grid_beyond_32_bits_null"] = beyond
            self.warnings.append(f"{t}: {int(beyond.sum())} rows have a grid or block size beyond 32 bits "
                                 "(left unknown)")
        return g

    def _memcpy_kind_names(self) -> dict[int, str]:
        table = self.enum("ENUM_CUDA_MEMCPY_OPER")
        if not table:
            return dict(MEMCPY_KINDS_BUILTIN)
        out = {}
        for i, (name, label) in table.items():
            short = name.removeprefix("CUDA_MEMCPY_KIND_")
            m = re.fullmatch(r"(UVM_)?([A-Z])TO([A-Z])", short)
            if m:
                out[i] = ("UVM " if m.group(1) else "") + f"{m.group(2)}to{m.group(3)}"
            else:
                out[i] = MEMCPY_KINDS_BUILTIN.get(i, label or short.capitalize())
        return out

    def read_memcpy(self, names: _Strings) -> _Group | None:
        t = MEMCPY_T
        if t not in self.tables:
            return None
        extra = [self.col(t, "bytes", default="-1"), self.col(t, "copyKind", default="0")]
        cols, proc, tid = self._gpu_common(t, extra)
        start, end, device, stream, corr, _, nbytes, copy_kind = cols
        mapping = self._memcpy_kind_names()
        uniq, inverse = _factorize(copy_kind)
        texts = [mapping.get(int(k), f"kind {int(k)}") for k in uniq]
        name_codes = names.consts([f"Memcpy {x}" for x in texts])[inverse]
        copy_codes = names.consts(texts)[inverse]
        g = self.group(t, proc, tid, start, end, Kind.MEMCPY, self.categories.const("gpu_memcpy"),
                       name_codes, device=device, stream=stream, corr=corr)
        g.optional["bytes"] = (nbytes, nbytes >= 0)
        g.copy_kind = _narrow(copy_codes)
        return self.repair_nulls(g)

    def read_memset(self, names: _Strings) -> _Group | None:
        t = MEMSET_T
        if t not in self.tables:
            return None
        cols, proc, tid = self._gpu_common(t, [self.col(t, "bytes", default="-1")])
        start, end, device, stream, corr, _, nbytes = cols
        g = self.group(t, proc, tid, start, end, Kind.MEMSET, self.categories.const("gpu_memset"),
                       names.const("Memset"), device=device, stream=stream, corr=corr)
        g.optional["bytes"] = (nbytes, nbytes >= 0)
        return self.repair_nulls(g)

    def read_sync(self, names: _Strings) -> _Group | None:
        t = SYNC_T
        if t not in self.tables:
            return None
        cols, proc, tid = self._gpu_common(t, [self.col(t, "syncType", "deprecatedSyncType", default="0")])
        start, end, device, stream, corr, _, sync_type = cols
        labels = {i: label or name for i, (name, label) in self.enum("ENUM_CUPTI_SYNC_TYPE").items()}
        uniq, inverse = _factorize(sync_type)
        texts = [SYNC_NAMES_BUILTIN.get(int(k)) or labels.get(int(k)) or f"Sync type {int(k)}" for k in uniq]
        return self.repair_nulls(self.group(
            t, proc, tid, start, end, Kind.SYNC, self.categories.const("cuda_sync"),
            names.consts(texts)[inverse], device=device, stream=stream, corr=corr))

    def runtime_exprs(self) -> list[str]:
        t = RUNTIME_T
        exprs = ['"start"', self.end_expr(t), self.col(t, "eventClass"), self.col(t, "globalTid"),
                 self.col(t, "correlationId"), self.col(t, "nameId")]
        return exprs + self.null_checks(t, "start", "end", "globalTid")

    def read_runtime(self, names: _Strings) -> _Group | None:
        import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
        t = RUNTIME_T
        if t not in self.tables:
            return None
        self.require(t, "start")
        cols, _ = self.fetch(t, self.runtime_exprs())
        start, end, event_class, gtid, corr, name_id = cols[:6]
        end = _start_where_no_end(start, end, cols[7])
        self.pending_nulls = [*cols[6:], lazy_zeros(len(start), np.bool_)]
        del cols  # each column is held by its name now, and dropped once used: most of the rows are here
        strip = lambda values: pc.replace_substring_regex(values, _RUNTIME_VERSION_SUFFIX, "")  # noqa: E731
        name_codes = names.from_ids(name_id, transform=strip)
        del name_id
        # category: event class through the enum, else the name
        class_enum = {i: n for i, (n, _) in self.enum("ENUM_NSYS_EVENT_CLASS").items()}
        uniq, inverse = _factorize(event_class)
        per_class: list[str] = []  # "" where the class is unknown
        for c in uniq.tolist():
            sym = class_enum.get(c, "")
            if "CUDA_RUNTIME" in sym:
                per_class.append("cuda_runtime")
            elif "CUDA_DRIVER" in sym:
                per_class.append("cuda_driver")
            elif not class_enum and c in EVENT_CLASS_BUILTIN:
                per_class.append(EVENT_CLASS_BUILTIN[c])
            else:
                per_class.append("")
        runtime_code, driver_code = self.categories.const("cuda_runtime"), self.categories.const("cuda_driver")
        by_class = np.array([{"cuda_runtime": runtime_code, "cuda_driver": driver_code}.get(p, -1) for p in per_class],
                            dtype=np.int32)  # (category codes: a handful)
        category = by_class[inverse] if len(uniq) else np.empty(0, dtype=np.int32)
        del event_class, inverse
        unknown = category < 0
        if unknown.any():
            # driver API names start with "cu" but not "cuda"
            u_codes, u_inv = _factorize(name_codes[unknown])
            texts = pa.concat_arrays([b.cast(pa.string()) for b in names.blocks]).take(pa.array(u_codes))
            is_driver = np.asarray(pc.and_(pc.starts_with(texts, "cu"), pc.invert(pc.starts_with(texts, "cuda"))))
            category[unknown] = np.where(is_driver, driver_code, runtime_code)[u_inv]
        proc, tid = _process_key(gtid), _thread_id(gtid)
        del gtid
        return self.repair_nulls(self.group(t, proc, tid, start, end, Kind.RUNTIME, category, name_codes, corr=corr))

    def read_nvtx(self, names: _Strings) -> _Group | None:
        import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
        t = NVTX_T
        if t not in self.tables:
            return None
        self.require(t, "start")
        end_exprs = ['"end" IS NULL', 'COALESCE("end", "start")'] if "end" in self.columns(t) else ["1", '"start"']
        exprs = ['"start"', *end_exprs, self.col(t, "eventType", default="59"), self.col(t, "globalTid"),
                 self.col(t, "textId"), self.col(t, "domainId", default="0")]
        flags = self.null_checks(t, "start", "globalTid", "eventType")
        cols, text = self.fetch(t, exprs + flags, text=self.col(t, "text"))
        assert text is not None  # fetch returns the text column it was asked for
        start, end_null, end, event_type, gtid, text_id, domain = cols[:7]
        null_type = cols[9].astype(bool)
        # a NULL end is an open range (counted apart), not a repair: only start and process are checked
        self.pending_nulls = [cols[7], lazy_zeros(len(start), np.bool_), cols[8], lazy_zeros(len(start), np.bool_)]
        ranges, marks, domain_create = self._nvtx_types()
        # NULL eventType read as 59 (COALESCE default for exports without the column): not a range
        is_range = np.isin(event_type, ranges) & ~null_type
        is_mark = np.isin(event_type, marks) & ~null_type
        # names: text, else textId
        has_text = np.asarray(text.is_valid())
        name_codes = names.from_ids(np.where(has_text, -1, text_id), transform=_strip_emit_nvtx)
        names.missing -= int((has_text | (text_id < 0)).sum())  # rows without textId are not "missing"
        suffixed = names.ids_matching(np.where(has_text, -1, text_id), EMIT_NVTX_SUFFIX)
        if has_text.any():
            texts = text.filter(pa.array(has_text))
            name_codes[has_text] = names.from_strings(_strip_emit_nvtx(texts))
            suffixed[has_text] = np.asarray(pc.match_substring_regex(texts, EMIT_NVTX_SUFFIX).fill_null(False))
        # domain names from domain-create rows (text holds the name)
        domain_names: dict[int, str] = {}
        created = np.flatnonzero(event_type == domain_create)
        if len(created):
            dom_text = text.take(pa.array(created)).to_pylist()
            for d, s in zip(domain[created].tolist(), dom_text):
                if s:
                    domain_names[int(d)] = s
        uniq, inverse = _factorize(domain)
        cat_names = ["nvtx" if d == 0 else f"nvtx:{domain_names.get(int(d), f'domain{int(d)}')}" for d in uniq.tolist()]
        category = self.categories.consts(cat_names)[inverse] if len(uniq) else np.empty(0, np.int64)
        category = np.where(is_mark, self.categories.const("nvtx_mark"), category)
        kind = np.where(is_mark, int(Kind.OTHER), int(Kind.ANNOTATION)).astype(np.int8)
        open_ranges = is_range & (end_null == 1)
        end = np.where(is_range & (end_null == 0), end, start)
        proc, tid = _process_key(gtid), _thread_id(gtid)
        g = self.group(t, proc, tid, start, end, kind, category, name_codes, keep=is_range | is_mark)
        g.optional["_open"] = (open_ranges.astype(np.int64), open_ranges)
        skipped = ~(is_range | is_mark)
        g.notes["skipped_domain_create"] = (event_type == domain_create) & ~null_type
        g.notes["skipped_other_type"] = skipped & (event_type != domain_create) & ~null_type
        g.notes["emit_nvtx_suffix_removed"] = suffixed & (is_range | is_mark)
        if null_type.any():  # NULL eventType: neither range nor mark can be told, so not guessed
            g.notes["skipped_null_event_type"] = null_type
            self.warnings.append(f"{t}: {int(null_type.sum())} rows have no eventType (NULL): skipped")
        replaced = self.text_replaced.get(t)
        if replaced is not None and replaced.any():
            g.notes["text_not_utf8_replaced"] = replaced
            self.warnings.append(f"{t}: {int(replaced.sum())} texts are not UTF-8 (bad bytes shown as U+FFFD)")
        return self.repair_nulls(g)

    def read_osrt(self, names: _Strings) -> _Group | None:
        """OS runtime calls (``--trace osrt``: ``poll``, ``pthread_mutex_lock``, ``read`` ...) as
        annotations of category ``os_runtime`` on their thread, so the CPU-context lookup of
        host-bound gaps sees them; they never become steps or launch calls."""
        t = OSRT_T
        if t not in self.tables:
            return None
        self.require(t, "start")
        exprs = ['"start"', self.col(t, "end", default='"start"'), self.col(t, "globalTid"), self.col(t, "nameId")]
        cols, _ = self.fetch(t, exprs + self.null_checks(t, "start", "end", "globalTid"))
        start, end, gtid, name_id = cols[:4]
        self.pending_nulls = [*cols[4:], lazy_zeros(len(start), np.bool_)]
        proc, tid = _process_key(gtid), _thread_id(gtid)
        return self.repair_nulls(self.group(t, proc, tid, start, end, Kind.ANNOTATION,
                                            self.categories.const("os_runtime"), names.from_ids(name_id)))

    def _nvtx_types(self) -> tuple[list[int], list[int], int]:
        table = self.enum("ENUM_NSYS_EVENT_TYPE")
        if not table:
            return list(NVTX_RANGE_TYPES_BUILTIN), list(NVTX_MARK_TYPES_BUILTIN), NVTX_DOMAIN_CREATE_BUILTIN
        ranges = [i for i, (n, _) in table.items()
                  if n.startswith("Nvtx") and n.endswith(("PushPopRange", "StartEndRange"))]
        marks = [i for i, (n, _) in table.items() if n in ("NvtxMark", "NvtxtMark")]
        create = next((i for i, (n, _) in table.items() if n == "NvtxDomainCreate"), NVTX_DOMAIN_CREATE_BUILTIN)
        return ranges or list(NVTX_RANGE_TYPES_BUILTIN), marks or list(NVTX_MARK_TYPES_BUILTIN), create

    # -- metadata ----------------------------------------------------------------------
    def key_values(self, table: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if table not in self.tables or not {"name", "value"} <= self.columns(table):
            return out
        for name, value in self.con.execute(f'SELECT name, value FROM "{table}"'):
            if name in out:
                prev = out[name]
                out[name] = (prev if isinstance(prev, list) else [prev]) + [value]
            else:
                out[name] = value
        return out

    def metadata(self) -> tuple[dict[str, Any], str, int]:
        export_table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in self.tables), None)
        export = self.key_values(export_table) if export_table else {}
        meta: dict[str, Any] = {"export": export}
        capture = self.key_values("META_DATA_CAPTURE")
        if capture:
            meta["capture"] = capture
        version = export.get("EXPORT_PRODUCT_VERSION")
        if not isinstance(version, str):
            version = next((v for k, v in export.items() if "VERSION" in k and isinstance(v, str)
                            and re.match(r"\d{4}\.\d", v)), None)
        format_version = version or "unknown (no export metadata table)"
        base = 0
        session: dict[str, Any] = {}
        if "TARGET_INFO_SESSION_START_TIME" in self.tables:
            cur = self.con.execute("SELECT * FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
            row = cur.fetchone()
            if row is not None:
                session = dict(zip([d[0] for d in cur.description], row))
                if isinstance(session.get("utcEpochNs"), int):
                    base = int(session["utcEpochNs"])
                if isinstance(session.get("systemClockNs"), int):
                    session["timeline_ns"] = session["systemClockNs"]
        analysis = "ANALYSIS_DETAILS" in self.tables and "startTime" in self.columns("ANALYSIS_DETAILS")
        if "timeline_ns" not in session and analysis:
            row = self.con.execute("SELECT startTime FROM ANALYSIS_DETAILS LIMIT 1").fetchone()
            if row is not None and isinstance(row[0], int):
                session["timeline_ns"] = row[0]
        meta["session_start"] = session
        meta["layout"] = ("TARGET_INFO_GPU" if "TARGET_INFO_GPU" in self.tables else
                          "TARGET_INFO_CUDA_GPU" if "TARGET_INFO_CUDA_GPU" in self.tables else "no GPU info table")
        if export_table:
            meta["export_table"] = export_table
        return meta, format_version, base

    def devices(self) -> dict[tuple[int, int], DeviceInfo]:
        """(vm, device id) -> DeviceInfo; vm is ``vmId >> 48`` (the host bits of a globalPid)."""
        out: dict[tuple[int, int], DeviceInfo] = {}
        if "TARGET_INFO_GPU" in self.tables:
            table, id_col = "TARGET_INFO_GPU", "id"
            fields = {"name": "name", "sm": "smCount", "mem": "totalMemory", "major": "computeMajor",
                      "minor": "computeMinor"}
            mem_in_mib = False
        elif "TARGET_INFO_CUDA_GPU" in self.tables:
            table, id_col = "TARGET_INFO_CUDA_GPU", "deviceId"
            fields = {"name": "name", "sm": "numMultiprocessors", "mem": "globalMemorySize",
                      "major": "computeCapabilityMajor", "minor": "computeCapabilityMinor"}
            mem_in_mib = True
        else:
            return out
        cur = self.con.execute(f'SELECT * FROM "{table}"')
        names = [d[0] for d in cur.description]
        for row in cur.fetchall():
            rec = dict(zip(names, row))
            dev_id = rec.get(id_col)
            if not isinstance(dev_id, int):
                continue
            vm = (rec.get("vmId") or 0) >> 48 if isinstance(rec.get("vmId"), int) else 0
            if (vm, dev_id) in out:
                continue
            mem = rec.get(fields["mem"])
            extra = {k: v for k, v in rec.items() if k not in (id_col, *fields.values()) and v is not None}
            if isinstance(mem, int) and mem_in_mib and mem < (1 << 24):
                extra[f"{fields['mem']}_MiB"] = mem
                mem = mem << 20
            major, minor = rec.get(fields["major"]), rec.get(fields["minor"])
            out[(vm, dev_id)] = DeviceInfo(
                id=int(dev_id),
                name=str(rec.get(fields["name"]) or ""),
                sm_count=rec.get(fields["sm"]),
                total_memory_bytes=mem if isinstance(mem, int) else None,
                compute_capability=f"{major}.{minor}" if major is not None else None,
                extra=extra,
            )
        return out

    def process_names(self) -> dict[int, str]:
        """process key (globalPid >> 24) -> name."""
        out: dict[int, str] = {}
        if "PROCESSES" in self.tables and {"globalPid", "name"} <= self.columns("PROCESSES"):
            for gpid, name in self.con.execute("SELECT globalPid, name FROM PROCESSES"):
                if isinstance(gpid, int) and name:
                    out[gpid >> 24] = name
        return out

    def thread_names(self, names: _Strings) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(process key, tid, name code) of ``ThreadNames`` rows."""
        if "ThreadNames" not in self.tables or not {"nameId", "globalTid"} <= self.columns("ThreadNames"):
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, empty
        (gtid, name_id), _ = self.fetch("ThreadNames", ['"globalTid"', '"nameId"'])
        before = names.missing
        codes = names.from_ids(name_id)
        names.missing = before
        return gtid >> 24, gtid & 0xFFFFFF, codes

    def unmapped_tables(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in sorted(self.tables):
            if t in EVENT_TABLES or t in _INFO_TABLES or t.startswith(_INFO_PREFIXES):
                continue
            n = self.con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]
            if n:
                out[t] = int(n)
        return out

    # -- assembly ----------------------------------------------------------------------
    def run(self) -> Trace:
        self._check_core_tables()
        if self.arrow_rows is not None and RUNTIME_T in self.tables and "start" in self.columns(RUNTIME_T):
            # the CUDA API calls are most of a big export's rows: read while the kernels are built
            self.arrow_rows.prefetch(RUNTIME_T, self.runtime_exprs())
        names = self.read_strings()
        groups = []
        for read in (self.read_kernels, self.read_memcpy, self.read_memset, self.read_sync, self.read_runtime,
                     self.read_nvtx, self.read_osrt):
            group = read(names)
            if group is not None:
                groups.append(group)
            self.release_memory()  # the fetched columns and the group's temporaries, before the next table
        if names.missing:
            self.warnings.append(f"{names.missing} names refer to string ids missing from StringIds (left empty)")
        rank_map = _rank_map(groups)
        sync_fixed = _fix_sync_devices(groups, rank_map)
        tally = _tally_rows(groups, rank_map, sync_fixed)  # takes the "_open" markers out: before the columns
        for g in groups:
            g.notes = {}  # counted
        tally.no_rank.update(self.file_counts)
        if tally.counts:
            tally.counts[0].update(self.file_counts)
        self.release_memory()  # what the fetch and the counts left free, before the assembly's peak
        rows = self._assemble_events(groups, rank_map, names)
        del groups
        self.release_memory()
        ranks, all_warnings = self._rank_infos(rank_map, names, tally, rows)
        self.release_memory()
        steps = steps_from_annotations(rows.events, self.step_marker)
        return Trace(events=rows.events, links=rows.links, ranks=ranks, steps=steps,
                     warnings=[f"{self.path}: {w}" for w in all_warnings])

    def _check_core_tables(self) -> None:
        if not self.tables & set(CORE_TABLES):
            what = "has no tables at all" if not self.tables else "has none of the Nsight Systems tables"
            raise TraceFormatError(
                self.path,
                f"is an SQLite database but {what} (expected {', '.join(CORE_TABLES)})",
                "is it an Nsight Systems export? make one with: nsys export --type sqlite --output X.sqlite X.nsys-rep",
            )

    def _assemble_events(self, groups: list[_Group], rank_map: _RankMap, names: _Strings) -> _Rows:
        """The kept rows of every group as one events table, by rank, then start.

        Each column is written in its final order, handed to Arrow without a copy, and the groups'
        column released before the next is made, so that the peak memory is the events table plus
        about one column rather than the groups and the table side by side."""
        placement = _Placement.of(groups, self.release_memory)
        rank, start = _sorted_rank_start(groups, rank_map, placement)
        placement.release("keep")  # (the placement has the kept rows' positions)
        n = len(start)
        bounds = np.searchsorted(rank, np.arange(rank_map.n_ranks + 1, dtype=rank.dtype))  # rows of each rank
        columns: dict[str, Any] = {"start_ns": pa.array(start)}
        del start
        kind = placement.column("kind").astype(np.int8, copy=False)
        columns["kind"] = kind_array(kind)
        corr = placement.column("corr", np.int64)
        columns["correlation"] = pa.array(corr)
        # the links now: their search needs ~100 MB for a while on a 4.6 M-row export, which here
        # comes on top of the groups' columns not yet placed rather than on top of the whole table
        links = _launch_links(rank, kind, corr, exact=self.arrow_rows is not None)
        columns["rank"] = pa.array(rank)  # flat: every analysis reads it, and a chunked column is copied to be read
        del rank
        # one value per rank (a rank is one process), or one in all: runs of one value (_runs)
        columns["pid"] = _runs([_pid_of(p) for p in rank_map.ordered], bounds, np.int64)
        columns["external_id"] = _runs([-1], np.array([0, n]), np.int64)  # Nsight has no external ids
        placement.release("proc")
        # the table only grows from here (int32 and constant parts become full columns), and each
        # column is made while its groups' parts still exist: the columns whose parts are biggest
        # first, so the last steps, on top of an almost whole table, add the least
        name_array = names.dictionary_array(placement.column("name"), reuse=True)
        columns["name"] = name_array
        columns["category"] = self.categories.dictionary_array(placement.column("category"), reuse=True)
        for attr, column_name in (("dur", "dur_ns"), ("tid", "tid"), ("stream", "stream")):
            columns[column_name] = pa.array(placement.column(attr, np.int64))
        columns["device"] = pa.array(placement.column("device", np.int32))
        placement.keep_destinations_of([bool(g.optional) or g.copy_kind.strides != (0,) for g in groups])
        columns.update(placement.optional_columns())
        copy_rows, copy_codes = placement.set_rows("copy_kind")  # memcpy rows only
        if len(copy_rows):
            columns["copy_kind"] = names.sparse_dictionary_array(n, copy_rows, copy_codes)
        del placement  # its row destinations: not needed once every column is placed
        self.release_memory()
        self._collectives(columns, name_array, kind)
        unknown = set(columns) - set(EVENT_SCHEMA.names)
        assert not unknown, f"columns not in EVENT_SCHEMA: {sorted(unknown)}"
        self.release_memory()  # and the dictionaries' temporaries, before make_events_table adds external_id
        # the columns an export has no data for (message sizes, process groups ...) are made there,
        # all-null over one shared buffer of untouched zero pages (model.null_array)
        return _Rows(events=make_events_table(columns, n), links=links, rows_per_rank=np.diff(bounds))

    def _rank_infos(self, rank_map: _RankMap, names: _Strings, tally: _Tally,
                    rows: _Rows) -> tuple[dict[int, RankInfo], list[str]]:
        """One RankInfo per process that became a rank, and the trace's warnings."""
        meta, format_version, base = self.metadata()
        device_info = self.devices()
        pnames = self.process_names()
        t_proc, t_tid, t_codes = self.thread_names(names)
        t_names = names.dictionary_array(t_codes) if len(t_codes) else None
        unmapped = self.unmapped_tables()
        mapped_per_rank = rows.rows_per_rank
        several_vms = len({p >> 24 for p in rank_map.ordered}) > 1
        ranks: dict[int, RankInfo] = {}
        all_warnings = list(self.warnings)
        for r, p in enumerate(rank_map.ordered):
            pid = _pid_of(p)
            used = sorted(rank_map.devices.get(p, ()))
            devs = [_device_of(device_info, p, d) for d in used]
            where = f"device {used[0]}" if len(used) == 1 else (f"devices {used}" if used else
                    ("CUDA API calls only" if p in rank_map.api_procs else "NVTX only"))
            host = f" vm={p >> 24}" if several_vms else ""
            warnings = []
            if tally.open_per_rank[r]:
                warnings.append(f"{int(tally.open_per_rank[r])} NVTX ranges have no end (kept with duration 0)")
            threads = _threads_of(p, pid, t_proc, t_tid, t_names)
            pname = pnames.get(p) or threads.get(f"{pid}:{pid}")
            tally.counts[r]["mapped"] = int(mapped_per_rank[r])
            ranks[r] = RankInfo(
                rank=r,
                source_path=str(self.path),
                source_format="nsys",
                format_version=format_version,
                rank_source=f"nsys process pid={pid}{host} ({where}); rank by device order",
                world_size=None,
                devices=devs,
                process_names={pid: pname} if pname else {},
                thread_names=threads,
                base_time_ns=base,
                raw_metadata=dict(meta),
                event_counts=tally.counts[r],
                activity_dropped={k: v for k, v in tally.counts[r].items() if v and k.endswith(ACTIVITY_LOSS_SUFFIXES)},
                unmapped=dict(unmapped) if r == 0 else {},
                warnings=warnings + list(self.warnings),
            )
            all_warnings += [f"rank {r} (pid {pid}): {w}" for w in warnings]
        if not ranks:  # Nsight tables but no rows: one empty rank keeps the metadata visible
            ranks[0] = RankInfo(
                rank=0, source_path=str(self.path), source_format="nsys", format_version=format_version,
                rank_source="nsys export without events", devices=sorted(device_info.values(), key=lambda d: d.id),
                base_time_ns=base, raw_metadata=dict(meta), event_counts={**tally.no_rank, "mapped": 0},
                unmapped=dict(unmapped), warnings=["the export holds no events"] + list(self.warnings),
            )
            all_warnings.append("the export holds no events")
        return ranks, all_warnings

    def _collectives(self, columns: dict[str, Any], name_array: pa.DictionaryArray, kind: np.ndarray) -> None:
        """Fill ``collective``/``dtype`` of NCCL kernels from their names (per distinct name)."""
        dictionary = name_array.dictionary.to_pylist()
        coll_of, dtype_of = [], []
        for text in dictionary:
            m = _NCCL_KERNEL.match(text or "")
            coll = dt = None
            if m:
                coll = _NCCL_COLLECTIVES.get(m.group(1).lower(), m.group(1).lower())
                base = (text or "").split("(", 1)[0]
                dt = next((_NCCL_DTYPES[tok] for tok in base.split("_")[2:] if tok in _NCCL_DTYPES), None)
            coll_of.append(coll)
            dtype_of.append(dt)
        if not any(coll_of):
            return
        idx = name_array.indices.to_numpy()  # int32, no copy
        is_nccl = np.array([c is not None for c in coll_of], dtype=bool)
        # the NCCL kernels: a few per step, so both columns are sparse (see _sparse_dictionary);
        # found a block at a time, as the table is complete by now and at its largest
        rows = np.concatenate([np.empty(0, dtype=np.int64)] + [np.flatnonzero(is_nccl[idx[i:i + JOIN_BLOCK_ROWS]] & (
            kind[i:i + JOIN_BLOCK_ROWS] == int(Kind.KERNEL))) + i for i in range(0, len(idx), JOIN_BLOCK_ROWS)])
        for column, per_name in (("collective", coll_of), (_DTYPE_COLUMN, dtype_of)):
            values = sorted({v for v in per_name if v})
            if not values:
                continue
            code_of = np.array([values.index(v) if v else -1 for v in per_name], dtype=np.int32)
            codes = code_of[idx[rows]]
            have = codes >= 0
            columns[column] = _sparse_dictionary(len(idx), rows[have], codes[have], pa.array(values, pa.string()))


# ---------------------------------------------------------------------------- assembly


#: up to this many processes, ranks are found by one comparison per process rather than a search
_FEW_PROCESSES = 8


@dataclass
class _RankMap:
    """Processes -> ranks. A process that ran GPU activity ranks by its lowest device id; then
    processes with CUDA API calls only, then the others (NVTX only); ties by pid."""

    ordered: list[int]  # process keys (globalPid >> 24), by rank
    api_procs: set[int]  # processes with CUDA runtime or synchronisation rows
    stream_device: dict[tuple[int, int], int]  # (process, stream) -> lowest device of its activity
    devices: dict[int, set[int]]  # process -> devices of its kernels, copies and memsets
    proc_sorted: np.ndarray  # the process keys, sorted
    rank_lookup: np.ndarray  # rank of each of proc_sorted

    @property
    def n_ranks(self) -> int:
        return len(self.ordered)

    def ranks_for(self, proc: np.ndarray) -> np.ndarray:
        """Rank of each process key; -1 for a process that is no rank."""
        if len(self.proc_sorted) <= _FEW_PROCESSES:  # one comparison per process beats a search
            out = np.full(len(proc), -1, dtype=np.int64)
            for p, r in zip(self.proc_sorted.tolist(), self.rank_lookup.tolist()):
                out[proc == p] = r
            return out
        pos = np.minimum(np.searchsorted(self.proc_sorted, proc), len(self.proc_sorted) - 1)
        return np.where(self.proc_sorted[pos] == proc, self.rank_lookup[pos], -1)


#: The skip reasons (``<TABLE>.<reason>``) of rows that were activity (a kernel, copy, API call or
#: range with a time): every figure of the rank leaves them out (``RankInfo.activity_dropped``).
ACTIVITY_LOSS_SUFFIXES = (".skipped_null_start", ".skipped_time_out_of_range", ".skipped_null_device")


@dataclass
class _Tally:
    """Row counts for the rank infos."""

    counts: list[dict[str, int]]  # per rank: "<table>.read", "<table>.mapped", ...
    no_rank: dict[str, int]  # "<table>.no_rank": rows of processes that are no rank
    open_per_rank: np.ndarray  # NVTX ranges without an end, per rank


@dataclass
class _Rows:
    """The assembled events and launch links, and the columns of the events the rank infos need."""

    events: pa.Table
    links: pa.Table
    rows_per_rank: np.ndarray  # events of each rank (the events are by rank, then start)


def _rank_map(groups: list[_Group]) -> _RankMap:
    proc_all = np.concatenate([g.proc[g.keep] for g in groups]) if groups else np.empty(0, np.int64)
    procs = _distinct(proc_all)
    min_device: dict[int, int] = {}
    stream_device: dict[tuple[int, int], int] = {}
    devices: dict[int, set[int]] = {}
    for g in groups:
        if g.table not in (KERNEL_T, MEMCPY_T, MEMSET_T):
            continue
        sel = g.keep & (g.device >= 0)
        if not sel.any():
            continue
        for p, s, d in _distinct_rows(g.proc[sel], g.stream[sel], g.device[sel]):
            devices.setdefault(p, set()).add(d)
            min_device[p] = min(d, min_device.get(p, d))
            stream_device[(p, s)] = min(d, stream_device.get((p, s), d))
    api_procs: set[int] = set()
    for g in groups:
        if g.table in (RUNTIME_T, SYNC_T):
            api_procs |= {int(p) for p in _distinct(g.proc)}
    proc_list = procs.tolist()

    def order_key(p: int) -> tuple[int, int, int, int]:
        if p in min_device:
            return (0, min_device[p], p & 0xFFFFFF, p)
        if p in api_procs:
            return (1, 0, p & 0xFFFFFF, p)
        return (2, 0, p & 0xFFFFFF, p)

    ordered = sorted(proc_list, key=order_key)
    rank_of = {p: r for r, p in enumerate(ordered)}
    return _RankMap(
        ordered=ordered, api_procs=api_procs, stream_device=stream_device, devices=devices,
        proc_sorted=np.asarray(proc_list, dtype=np.int64),
        rank_lookup=np.asarray([rank_of[p] for p in proc_list], dtype=np.int64),
    )


def _fix_sync_devices(groups: list[_Group], rank_map: _RankMap) -> np.ndarray:
    """Give synchronisation rows the device of the same (process, stream) activity, else the
    process's only device (in place); returns how many rows changed, per rank."""
    stream_device = rank_map.stream_device
    devices_per_proc: dict[int, set[int]] = {}
    for (p, _s), d in stream_device.items():
        devices_per_proc.setdefault(p, set()).add(d)
    sync_fixed = np.zeros(rank_map.n_ranks, dtype=np.int64)
    for g in groups:
        if g.table != SYNC_T or len(g.proc) == 0:
            continue
        lookup: dict[tuple[int, int], int] = {}
        for p, s in _distinct_rows(g.proc, g.stream):
            if (p, s) in stream_device:
                lookup[(p, s)] = stream_device[(p, s)]
            elif len(devices_per_proc.get(p, ())) == 1:
                lookup[(p, s)] = next(iter(devices_per_proc[p]))
        if not lookup:
            continue
        kp = np.array([k[0] for k in lookup], dtype=np.int64)
        ks = np.array([k[1] for k in lookup], dtype=np.int64)
        kd = np.array(list(lookup.values()), dtype=np.int64)
        li, ri = join_on_keys([g.proc, g.stream], [kp, ks])
        new_device = g.device.copy()
        new_device[li] = kd[ri]
        changed_ranks = rank_map.ranks_for(g.proc[new_device != g.device])
        sync_fixed += np.bincount(changed_ranks[changed_ranks >= 0], minlength=rank_map.n_ranks)
        g.device = new_device
    return sync_fixed


def _tally_rows(groups: list[_Group], rank_map: _RankMap, sync_fixed: np.ndarray) -> _Tally:
    """Rows read and mapped per table and rank; takes the ``_open`` markers out of the groups."""
    n_ranks = rank_map.n_ranks
    counts: list[dict[str, int]] = [{} for _ in range(n_ranks)]
    no_rank: dict[str, int] = {}
    open_per_rank = np.zeros(n_ranks, dtype=np.int64)
    for g in groups:
        r_all = rank_map.ranks_for(g.proc)
        read = np.bincount(r_all[r_all >= 0], minlength=n_ranks)
        mapped = np.bincount(r_all[(r_all >= 0) & g.keep], minlength=n_ranks)
        for r in range(n_ranks):
            counts[r][f"{g.table}.read"] = int(read[r])
            counts[r][f"{g.table}.mapped"] = int(mapped[r])
        # rows with a NULL process have their own reason; the others of no rank are "no_rank"
        orphan = g.notes.pop("no_rank_null_process", np.zeros(len(r_all), dtype=bool))
        if orphan.any():
            no_rank[f"{g.table}.no_rank_null_process"] = int(orphan.sum())
        if ((r_all < 0) & ~orphan).any():
            no_rank[f"{g.table}.no_rank"] = int(((r_all < 0) & ~orphan).sum())
        if "_open" in g.optional:
            opened = g.optional.pop("_open")[1]
            open_per_rank += np.bincount(r_all[opened & (r_all >= 0)], minlength=n_ranks)
        for note, rows in g.notes.items():
            per_rank = np.bincount(r_all[rows & (r_all >= 0)], minlength=n_ranks)
            for hit in np.flatnonzero(per_rank).tolist():
                counts[hit][f"{g.table}.{note}"] = int(per_rank[hit])
    for r in range(n_ranks):
        if sync_fixed[r]:
            counts[r][f"{SYNC_T}.device_from_activity"] = int(sync_fixed[r])
    if n_ranks and no_rank:
        counts[0].update(no_rank)
    return _Tally(counts=counts, no_rank=no_rank, open_per_rank=open_per_rank)


def _sorted_rank_start(groups: list[_Group], rank_map: _RankMap,
                       placement: _Placement) -> tuple[np.ndarray, np.ndarray]:
    """Rank (int32) and start of the kept rows in events-table order (by rank, then start), with
    every group's rows placed in ``placement``; the groups' starts are released."""
    start = _concat_kept(groups, "start")
    for g in groups:
        g.start = _RELEASED  # copied: released before the sort's working arrays are made
    rank = (np.concatenate([rank_map.ranks_for(g.proc[g.keep]).astype(np.int32) for g in groups])
            if groups else np.empty(0, dtype=np.int32))
    # by rank, then start: a stable sort by time (timsort: the tables are runs already in time
    # order), then a stable radix sort by rank
    order = np.argsort(start, kind="stable")
    rank_dtype = np.int16 if rank_map.n_ranks < 32000 else np.int32
    order = order[np.argsort(rank[order].astype(rank_dtype), kind="stable")]
    placement.place_rows(order)
    return rank[order], start[order]


def _concat_kept(groups: list[_Group], attr: str) -> np.ndarray:
    """One column of the kept rows of every group, in group order."""
    parts = [getattr(g, attr)[g.keep] for g in groups]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


#: what a group's column holds once :meth:`_Placement.column` has placed it
_RELEASED = np.empty(0, dtype=np.int8)


@dataclass
class _Placement:
    """Where the kept rows of every group go in the events table, so that each column is written
    straight to its final order (one pass) rather than concatenated and then reordered (two)."""

    groups: list[_Group]
    kept: list[np.ndarray | None]  # per group: positions of its kept rows (None: all kept)
    offsets: list[int]  # per group: its first row among the kept rows of all groups
    dest: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    #: per group, its rows' destinations of its own, once :meth:`keep_destinations_of` dropped ``dest``
    own_dest: list[np.ndarray | None] = field(default_factory=list)
    n_rows: int = 0
    #: the parse's ``release_memory`` hook (``_Parser.release_memory``)
    release_memory: Callable[[], None] = do_nothing

    @classmethod
    def of(cls, groups: list[_Group], release_memory: Callable[[], None] = do_nothing) -> _Placement:
        kept = [None if g.keep.all() else np.flatnonzero(g.keep) for g in groups]
        sizes = [len(g.keep) if k is None else len(k) for g, k in zip(groups, kept)]
        return cls(groups=groups, kept=kept, offsets=np.concatenate([[0], np.cumsum(sizes)]).tolist(),
                   release_memory=release_memory)

    def place_rows(self, order: np.ndarray) -> None:
        """Row ``order[i]`` of the concatenated kept rows becomes row ``i``."""
        # int32 where the rows fit: the destinations live through the whole assembly
        dtype = np.int32 if len(order) < (1 << 31) else np.int64
        self.dest = np.empty(len(order), dtype=dtype)
        self.dest[order] = np.arange(len(order), dtype=dtype)
        self.n_rows = len(order)

    def _where(self, i: int) -> np.ndarray:
        """The events-table rows of group ``i``'s kept rows."""
        own = self.own_dest[i] if self.own_dest else None
        return own if own is not None else self.dest[self.offsets[i]: self.offsets[i + 1]]

    def keep_destinations_of(self, needed: list[bool]) -> None:
        """Keep the destinations of the groups ``needed`` marks only (a copy each), dropping the
        whole permutation: the columns that some tables have (launch dimensions, byte counts) are
        placed last, on top of an almost whole table, and need the kernels' rows, not every row's."""
        self.own_dest = [self.dest[self.offsets[i]: self.offsets[i + 1]].copy() if need else None
                         for i, need in enumerate(needed)]
        self.dest = _RELEASED

    def _write(self, out: np.ndarray, i: int, values: np.ndarray) -> None:
        k = self.kept[i]
        where = self._where(i)
        if values.strides == (0,) and len(values):  # a _constant: one value, no rows to gather
            out[where] = values[0]
        else:
            out[where] = values if k is None else values[k]

    def column(self, attr: str, dtype: type[np.integer] | None = None) -> np.ndarray:
        """One column of the kept rows of every group, in events-table order, as ``dtype`` (the
        events table's: the groups' narrower values are widened as they are written), else the
        groups' common type. The groups' own column is released once placed (nothing reads the
        groups after assembly): that keeps the peak memory near the size of the events table
        rather than twice it."""
        if dtype is None:
            dtype = np.result_type(*[getattr(g, attr) for g in self.groups]).type if self.groups else np.int64
        out = np.empty(self.n_rows, dtype=dtype)
        for i, g in enumerate(self.groups):
            self._write(out, i, getattr(g, attr))
            setattr(g, attr, _RELEASED)
        # the groups' columns were mostly below glibc's mmap threshold: freed, they stay resident
        # until trimmed, and each placed column would add its whole size to the RSS
        self.release_memory()
        return out

    def release(self, attr: str) -> None:
        """Drop the groups' column ``attr`` unplaced (the events table does not need it as a column)."""
        for g in self.groups:
            setattr(g, attr, _RELEASED)

    def set_rows(self, attr: str) -> tuple[np.ndarray, np.ndarray]:
        """(events-table rows, values) where ``attr`` is set (>= 0), for a column few rows have (the
        copy kind of memcpy rows): groups where it is the constant -1 are skipped, not written out
        as a column as long as the table. The groups' columns are released."""
        rows, values = [], []
        for i, g in enumerate(self.groups):
            column = getattr(g, attr)
            setattr(g, attr, _RELEASED)
            if len(column) == 0 or (column.strides == (0,) and column[0] < 0):
                continue
            k = self.kept[i]
            kept = column if k is None else column[k]
            hit = kept >= 0
            rows.append(self._where(i)[hit])
            values.append(kept[hit])
        if not rows:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        return np.concatenate(rows), np.concatenate(values)

    def optional_columns(self) -> dict[str, pa.Array]:
        """The columns only some tables have (null on the rows of the others)."""
        columns: dict[str, pa.Array] = {}
        bitmaps: list[np.ndarray] = []  # validity bitmaps made so far, shared where equal
        for col_name in sorted({k for g in self.groups for k in g.optional}):
            have = [(i, g.optional.pop(col_name)) for i, g in enumerate(self.groups) if col_name in g.optional]
            values = lazy_zeros(self.n_rows, np.result_type(*[v for _, (v, _) in have]).type)
            present = lazy_zeros(self.n_rows, np.bool_)
            for i, (v, ok) in have:
                self._write(values, i, v)
                self._write(present, i, ok)
            del have
            columns[col_name] = _masked_array(values, present, EVENT_SCHEMA.field(col_name).type, bitmaps)
            del values, present
            self.release_memory()  # as in column()
        return columns


#: rows of each repeated piece of a column of runs (:func:`_runs`): 2 MB of int64
RUN_PIECE_ROWS = 1 << 18


def _runs(values: list[int], bounds: np.ndarray, dtype: type[np.integer]) -> pa.ChunkedArray:
    """A column whose rows ``bounds[i]:bounds[i + 1]`` all hold ``values[i]`` (the rank and pid of
    events sorted by rank; the -1 external ids of an export that has none), as chunks that are one
    small array per value (``RUN_PIECE_ROWS`` rows) repeated, and a slice of it at the end of a run:
    2 MB per value where a flat column costs 8 bytes a row (37 MB at 4.6 M events) though it says
    one number per rank. Arrow tables hold chunked columns as they hold single arrays (a reader
    that needs one array combines the chunks, as for any chunked table), and every value is the
    same as in a flat column."""
    chunks: list[pa.Array] = []
    for value, lo, hi in zip(values, bounds[:-1].tolist(), bounds[1:].tolist()):
        if hi <= lo:
            continue
        piece = pa.array(np.full(min(hi - lo, RUN_PIECE_ROWS), value, dtype=dtype))
        chunks += [piece if hi - at >= len(piece) else piece.slice(0, hi - at) for at in range(lo, hi, len(piece))]
    return pa.chunked_array(chunks, type=pa.from_numpy_dtype(np.dtype(dtype)))


def _start_where_no_end(start: np.ndarray, end: np.ndarray, end_null: np.ndarray) -> np.ndarray:
    """``end``, with the start where the end is NULL (``end_null``: 1 or True), in place."""
    no_end = end_null == 1
    if no_end.any():
        end = end.copy() if not end.flags.writeable else end
        end[no_end] = start[no_end]
    return end


def _process_key(global_id: np.ndarray) -> np.ndarray:
    """``globalPid >> 24`` (of a globalPid or globalTid), -1 where absent (-1), as int32 where every
    key fits (the groups keep it until the assembly)."""
    key = global_id >> 24
    key[global_id == -1] = -1
    return _narrow(key)


def _thread_id(global_tid: np.ndarray) -> np.ndarray:
    """``globalTid & 0xFFFFFF``, -1 where absent (-1), as int32."""
    tid = (global_tid & 0xFFFFFF).astype(np.int32)
    tid[global_tid == -1] = -1
    return tid


def _pid_of(proc: int) -> int:
    """The pid of a process key (``globalPid >> 24``; -1: no process)."""
    return proc & 0xFFFFFF if proc != -1 else -1


#: columns ``make_events_table`` fills with -1 or 0 rather than nulls
def _masked_array(values: np.ndarray, present: np.ndarray, target: pa.DataType,
                  bitmaps: list[np.ndarray]) -> pa.Array:
    """``values`` as an Arrow array, null where not ``present``: the values buffer is shared, not
    copied, and it is narrowed to int32 here when ``target`` is int32 and every value fits (else it
    stays int64, and ``make_events_table``'s checked cast says what does not fit). The validity
    bitmap is one of ``bitmaps`` where an equal one was made before (the six launch dimensions are
    valid on the same rows: one bitmap, not six), else it is added to them."""
    if pa.types.is_int32(target) and len(values) and -(1 << 31) <= values.min() and values.max() < (1 << 31):
        values = values.astype(np.int32, copy=False)
    arrow_type = pa.from_numpy_dtype(values.dtype)
    if present.all():
        return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])
    bits = np.packbits(present, bitorder="little")
    bits = next((b for b in bitmaps if np.array_equal(b, bits)), bits)
    if not any(b is bits for b in bitmaps):
        bitmaps.append(bits)
    validity = pa.py_buffer(bits)
    return pa.Array.from_buffers(arrow_type, len(values), [validity, pa.py_buffer(values)],
                                 null_count=int(len(values) - np.count_nonzero(present)))


def _launch_links(rank: np.ndarray, kind: np.ndarray, corr: np.ndarray, exact: bool = True) -> pa.Table:
    """Launch links: API call -> GPU activity with the same correlation id in one process (= one rank).

    With ``exact``, on one packed integer key per (rank, correlation) (:func:`_exact_links`); else
    (``ROW_READER = "sqlite3"``, the reader before issue 12, or a correlation id beyond 32 bits)
    with ``join_on_keys``'s hashed search."""
    is_api = (kind == int(Kind.RUNTIME)) & (corr > 0)
    gpu_rows = np.flatnonzero(_kind_in(kind, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC)) & (corr > 0))
    if not (len(gpu_rows) and is_api.any()):
        return empty_links()
    # a key fits when every correlation id does (ranks always do): checked on the whole column,
    # which needs no gathered copy of the API calls' ids
    right_key = _packed_key(rank[gpu_rows], corr[gpu_rows]) if exact and corr.max() < (1 << 32) else None
    if right_key is not None:
        src, dst = _exact_links(is_api, rank, corr, gpu_rows, right_key)
    else:
        api_rows = np.flatnonzero(is_api)
        left, right = join_on_keys([rank[api_rows], corr[api_rows]], [rank[gpu_rows], corr[gpu_rows]])
        src, dst = api_rows[left], gpu_rows[right]
        del api_rows, left, right
    del is_api, gpu_rows, right_key
    if not len(src):
        return empty_links()
    # the category as a dictionary array built here (indices: untouched zeros), where
    # make_links_table would encode a Python list of one string per link
    category = pa.DictionaryArray.from_arrays(pa.array(lazy_zeros(len(src), np.int32)),
                                              pa.array(["correlation"], pa.string()))
    return make_links_table(rank[src], "launch", category, src, dst)


#: events searched at a time by :func:`_exact_links`: its working arrays are this long, not as
#: long as the API calls (3 M on the 292 MB benchmark export: ~100 MB of int64 positions and keys)
JOIN_BLOCK_ROWS = 1 << 20


def _exact_links(is_api: np.ndarray, rank: np.ndarray, corr: np.ndarray, gpu_rows: np.ndarray,
                 gpu_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(API call rows, GPU rows) of an inner equi-join on one exact int64 key, ordered by API row,
    then GPU row (as :func:`traceview.model.join_on_keys`). ``gpu_key`` is ``(rank << 32) |
    correlation`` of ``gpu_rows``; the API calls' keys are made and searched a block of events at
    a time. The keys are the values themselves, so no match needs checking, and the result is in
    order as built: blocks and the API rows in them in turn, and for each the GPU rows in row
    order (a stable sort of the GPU keys keeps them so)."""
    order = np.argsort(gpu_key, kind="stable")
    sorted_key = gpu_key[order]
    sorted_rows = gpu_rows[order]
    del order
    srcs, dsts = [], []
    for first_row in range(0, len(is_api), JOIN_BLOCK_ROWS):
        api = np.flatnonzero(is_api[first_row:first_row + JOIN_BLOCK_ROWS])
        api += first_row
        key = _packed_key(rank[api], corr[api])
        assert key is not None  # every rank and correlation id fits (checked by the caller)
        lo = np.searchsorted(sorted_key, key, "left")
        counts = np.searchsorted(sorted_key, key, "right")
        del key
        counts -= lo
        hit = np.flatnonzero(counts)
        lo, counts = lo[hit], counts[hit]
        total = int(counts.sum())
        if total == len(hit):  # one match per matched API call (also: no match at all)
            srcs.append(api[hit])
            dsts.append(sorted_rows[lo])
            continue
        within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        srcs.append(np.repeat(api[hit], counts))
        dsts.append(sorted_rows[np.repeat(lo, counts) + within])
    return np.concatenate(srcs), np.concatenate(dsts)


def _kind_in(kind: np.ndarray, kinds: tuple[Kind, ...]) -> np.ndarray:
    """Rows whose kind is one of ``kinds``, by one comparison each: ``np.isin`` looks int8 codes up
    through an int64 index as long as the rows (35 MB at 4.6 M events)."""
    out = np.zeros(len(kind), dtype=bool)
    for k in kinds:
        out |= kind == int(k)
    return out


def _packed_key(high: np.ndarray, low: np.ndarray) -> np.ndarray | None:
    """``(high << 32) | low`` as int64: one exact integer per (rank, correlation) pair; None when a
    value does not fit (``high`` in ``[0, 2**31)``, ``low`` in ``[0, 2**32)``). ``low`` is taken
    over (overwritten when it is int64: callers pass a fresh gather), so that one key array and one
    shifted copy of ``high`` are all the memory this needs."""
    if len(high) and (high.min() < 0 or high.max() >= 1 << 31 or low.min() < 0 or low.max() >= 1 << 32):
        return None
    key = low.astype(np.int64, copy=False)
    shifted = high.astype(np.int64)
    shifted <<= 32
    key |= shifted
    return key


def _device_of(device_info: dict[tuple[int, int], DeviceInfo], proc: int, device: int) -> DeviceInfo:
    """The DeviceInfo of a device a process used: its own VM's, else any VM's with that id, else a bare one."""
    return (device_info.get((proc >> 24, device))
            or next((v for (_vm, i), v in device_info.items() if i == device), None)
            or DeviceInfo(id=device))


def _threads_of(proc: int, pid: int, t_proc: np.ndarray, t_tid: np.ndarray,
                t_names: pa.DictionaryArray | None) -> dict[str, str]:
    """``"pid:tid" -> thread name`` of one process, from the ThreadNames rows."""
    threads: dict[str, str] = {}
    if t_names is None:
        return threads
    sel = np.flatnonzero(t_proc == proc)
    if len(sel):
        labels = t_names.take(pa.array(sel)).to_pylist()
        for tid, label in zip(t_tid[sel].tolist(), labels):
            if label:
                threads[f"{pid}:{tid}"] = label
    return threads


def _strip_emit_nvtx(values: pa.Array) -> pa.Array:
    """NVTX names without the ``emit_nvtx`` suffix (``aten::addmm, seq = 7, op_id = 9`` -> ``aten::addmm``)."""
    import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
    return pc.replace_substring_regex(values, EMIT_NVTX_SUFFIX, "")


def _is_sqlite(_path: Path, head: bytes) -> bool:
    return head.startswith(SQLITE_MAGIC)


def _is_report(path: Path, head: bytes) -> bool:
    return path.name.endswith(".nsys-rep") or head[:4] == b"NSYS" or b"QdstrmV" in head[:64]


def _parse(path: Path, *, progress: Callable[[int, int], None] | None = None, step_marker: str | None = None,
           jobs: int = 1, hooks: ParseHooks = NO_HOOKS) -> Trace:
    del progress, jobs  # part of the InputFormat.parse signature; SQLite gives no progress, one process reads it
    return parse_nsys(path, step_marker=step_marker, hooks=hooks)


def _parse_report(path: Path, *, progress: Callable[[int, int], None] | None = None,
                  step_marker: str | None = None, jobs: int = 1, hooks: ParseHooks = NO_HOOKS) -> Trace:
    del progress, jobs  # part of the InputFormat.parse signature; nsys export gives no progress to report
    return parse_nsys(export_nsys_rep(path), step_marker=step_marker, hooks=hooks)


FORMAT = register_input_format(InputFormat(
    name="nsys", description="Nsight Systems SQLite export (nsys export --type sqlite)",
    sniff=_is_sqlite, parse=_parse, suffixes=(".sqlite",), order=10))
REPORT_FORMAT = register_input_format(InputFormat(
    name="nsys-rep", description="Nsight Systems report (.nsys-rep; exported to SQLite with nsys)",
    sniff=_is_report, parse=_parse_report, suffixes=(".nsys-rep",), cacheable=False, order=30))
