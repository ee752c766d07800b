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
A GPU table without the ``globalPid`` column (some exports' kernel table) has its rows joined to a
process on what the export has (``links.processes_by_launch``): their device where the GPU tables
with ``globalPid`` put it in one process, else the correlation id of the CUDA API calls of one
process (the runtime table's ``globalTid``), else the device among the rows so placed, else the
export's only process; a warning says how many rows each join placed, and rows none places are
skipped (``<TABLE>.no_rank_null_process``). Without this the rows became a rank of their own that
no launch call linked to.

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
import os
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from traceview.errors import os_error, sqlite_error, TraceFormatError
from traceview.model import Trace
from traceview.parsers.nsys.assembly import ExportParser
from traceview.parsers.nsys.rows import ArrowRows, connect_export, file_head, table_names
from traceview.parsers.nsys.schema import CORE_TABLES, EXPORT_HINT, REPORT_SUFFIXES, SQLITE_MAGIC
from traceview.parsing import NO_HOOKS, ParseHooks
from traceview.registry import InputFormat, register_input_format

if TYPE_CHECKING:
    from traceview.secrets import RedactionReport

#: the package's public names (its modules: schema, rows, strings, queries, event_tables, metadata,
#: assembly, links, columns, redact)
__all__ = ["FORMAT", "REPORT_FORMAT", "ROW_READER", "export_nsys_rep", "looks_like_nsys", "parse_nsys"]


def looks_like_nsys(path: str | os.PathLike[str]) -> bool:
    """True for an SQLite file that holds Nsight Systems tables (never raises)."""
    path = Path(path)
    try:
        if file_head(path) != SQLITE_MAGIC:
            return False
        con = connect_export(path)
        try:
            names = set(table_names(con))
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
        from traceview.parsing import cache_dir

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


def parse_nsys(path: str | os.PathLike[str], *, step_marker: str | None = None, hooks: ParseHooks = NO_HOOKS,
               progress: Callable[[int, int], None] | None = None) -> Trace:
    """Parse one Nsight Systems SQLite export (or a ``.nsys-rep``, exported with ``nsys``). ``hooks``:
    what the calling process lends the parse (its ``release_memory`` is called between phases).
    ``progress(done, total)``: called as each event table is read (SQLite tells no bytes read)."""
    path = Path(path)
    try:
        head = file_head(path)
    except OSError as exc:
        raise os_error(path, exc) from None
    if head != SQLITE_MAGIC:
        if path.name.endswith(REPORT_SUFFIXES):
            return parse_nsys(export_nsys_rep(path), step_marker=step_marker, hooks=hooks, progress=progress)
        raise TraceFormatError(
            path, "is not an SQLite database, so not an Nsight Systems export",
            "make one with: nsys export --type sqlite --output X.sqlite X.nsys-rep",
        )
    try:
        con = connect_export(path)
    except sqlite3.Error as exc:
        raise sqlite_error(path, exc) from None
    arrow_rows = ArrowRows(path) if ROW_READER == "adbc" else None
    try:
        parser = ExportParser(con, path, step_marker, arrow_rows, hooks.release_memory)
        parser.progress = progress
        return parser.run()
    except sqlite3.Error as exc:  # locked (in use), damaged, unreadable: errors.sqlite_error tells them apart
        raise sqlite_error(path, exc) from None
    finally:
        if arrow_rows is not None:
            arrow_rows.close()
        con.close()


#: Which reader fetches the rows of the event tables. ``"adbc"`` (the default): ADBC's SQLite
#: driver, straight into Arrow columns. ``"sqlite3"``: the standard library's row tuples, the reader
#: before issue 12, kept so that ``tests/test_nsys_arrow.py`` and ``benchmarks/bench_nsys.py`` can
#: compare the two on the same exports; both give identical traces. Table names, column lists and
#: the small metadata tables are read with ``sqlite3`` by both.
ROW_READER = "adbc"


def _is_sqlite(_path: Path, head: bytes) -> bool:
    return head.startswith(SQLITE_MAGIC)


def _is_report(path: Path, head: bytes) -> bool:
    return path.name.endswith(".nsys-rep") or head[:4] == b"NSYS" or b"QdstrmV" in head[:64]


def _parse(path: Path, *, progress: Callable[[int, int], None] | None = None, step_marker: str | None = None,
           jobs: int = 1, hooks: ParseHooks = NO_HOOKS) -> Trace:
    del jobs  # part of the InputFormat.parse signature; one process reads the export
    return parse_nsys(path, step_marker=step_marker, hooks=hooks, progress=progress)


def _parse_report(path: Path, *, progress: Callable[[int, int], None] | None = None,
                  step_marker: str | None = None, jobs: int = 1, hooks: ParseHooks = NO_HOOKS) -> Trace:
    del jobs  # part of the InputFormat.parse signature; nsys export gives no progress to report, the read does
    return parse_nsys(export_nsys_rep(path), step_marker=step_marker, hooks=hooks, progress=progress)


def _redact(in_path: Path, out_path: Path, *, strict: bool = False) -> RedactionReport:
    """``traceview redact`` of an export (``redact.py``, imported only when a file is redacted)."""
    from traceview.parsers.nsys.redact import redact_nsys

    return redact_nsys(in_path, out_path, strict=strict)


def _refuse_report(in_path: Path, out_path: Path, *, strict: bool = False) -> RedactionReport:
    """A report (.nsys-rep) is redacted through its SQLite export: say how to make it."""
    del out_path, strict  # the InputFormat.redact signature
    raise TraceFormatError(in_path, "is an Nsight Systems report, not its SQLite export",
                           "run `nsys export --type sqlite` first and redact the .sqlite file")


#: an export says nothing of the distributed rank: the parser numbers its processes (rank_source
#: "nsys process ..."), which across several files are given out again (numbers_ranks)
FORMAT = register_input_format(InputFormat(
    name="nsys", description="Nsight Systems SQLite export (nsys export --type sqlite)",
    sniff=_is_sqlite, parse=_parse, suffixes=(".sqlite",), order=10, producer="Nsight Systems SQLite export",
    redact=_redact, vendor="NVIDIA", numbers_ranks=True))
REPORT_FORMAT = register_input_format(InputFormat(
    name="nsys-rep", description="Nsight Systems report (.nsys-rep; exported to SQLite with nsys)",
    sniff=_is_report, parse=_parse_report, suffixes=(".nsys-rep",), cacheable=False, order=30,
    producer="Nsight Systems report", redact=_refuse_report, vendor="NVIDIA", numbers_ranks=True))
