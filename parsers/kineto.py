"""PyTorch profiler (Kineto) Chrome-trace JSON parser.

Reads ``.json`` and ``.json.gz`` into the canonical :class:`traceview.model.Trace`.

How it stays fast and small
---------------------------
A Kineto file is one JSON object whose ``traceEvents`` array holds millions of small objects.
Decoding it whole into Python dicts costs 5-10x the file size in memory. Instead the file is
streamed (gzip decompressed on the fly) and the event array is cut into chunks of whole events;
each chunk is decoded by msgspec straight into typed structs that keep only the fields traceview
uses (unknown keys are skipped without building objects), turned into Arrow columns, and dropped.
Peak memory is the output columns plus one chunk.

The native column decoder
-------------------------
When the package was built with a C compiler, each chunk is first offered to
``_kineto_columns.decode_chunk`` (parsers/_kineto_columns.c): one strict RFC 8259 scan of the chunk
that fills a column per field traceview reads (strings as codes into the chunk's unique strings,
interned once per chunk; ``ts``/``dur`` as the int or correctly rounded double msgspec would have
put in the struct, plus where their text lies for exact re-reads), with no Python object per event.
It declines (returns None) any chunk with something outside what it reproduces exactly: invalid
JSON, a value of another type than ``_Event``/``_MemoryArgs`` declare, a duplicated known key, an
escaped key, nesting deeper than 64, a ``Process Group Ranks`` list, counter or async events. A
declined chunk is decoded by msgspec exactly as before (the reference path, which also says what is
wrong), so both give the same tables, counts and warnings (``tests/test_kineto_native.py``).
``_ingest`` reads either through the same interface (``_NativeFields`` / ``_StructFields``).
``TRACEVIEW_KINETO_NATIVE=0`` forces the msgspec path; ``NATIVE_CHUNKS`` counts the chunks each took.

Chunk boundaries are found by looking for ``}`` ``,`` ``{`` near the end of the buffer. A cut that
lands inside a string or a nested object makes the chunk fail to decode; then a numpy scan of the
chunk's structure (quotes, escapes, brackets) finds the real boundary. The same scan (in C when the
native decoder is built: ``_events_array_end``) finds the end of the array at end of file, so
metadata written after the events (``baseTimeNanoseconds``, ``traceName``) is read too.

Allocator events
----------------
``[memory]`` instants (``profile_memory=True``) become ``Trace.memory``, not event rows. Their six
args would cost every event of every file time if the event struct declared them (each unknown key
is compared with every field), so chunks are decoded without them until the first chunk that has
allocator events; that chunk's args are read again from its text, from its first allocator event on,
and the rest of the file is decoded with them.

Exact nanoseconds
-----------------
Kineto writes microseconds, recent versions as decimals with three fractional digits. A float64
cannot hold every such value exactly once it exceeds 2**43 us, so times are recovered exactly:
integer values are scaled in int64; a decimal below 2**43 us is the unique integer ``c`` with
``float(c) / 1000 == ts`` (IEEE division is correctly rounded, and distinct ``c`` give distinct
doubles there); larger fractional values are re-read from the JSON text of that chunk. The native
decoder computes that same integer straight from the decimal text (mantissa times a power of ten)
for values with at most three decimals below 2**43 us, so numpy converts only the others.

Counters and async events
-------------------------
Counter events (``ph: "C"``) become ``Trace.counters``: one sample per numeric arg (the series),
named ``name`` or ``name[id]``. Async events become rows of kind OTHER (their category kept as
written, not counted as unmapped): ``b``/``e`` and ``S``/``F`` paired per (pid, category, id or
``id2``'s local/global value, name) in stack order, ``n`` instants as instant rows; ``T``/``p``
steps are skipped. Their args and ids of any shape are read by ``_PhaseProbe``, a second light
decode of only the chunks that hold such events (the slow path keeps a counter's args under
``COUNTER_ARGS_KEY``). Pairing, ``B``/``E`` included, is vectorised (``stack_pairs``).

Every event's fate
------------------
Each entry of ``traceEvents`` is counted once in ``RankInfo.event_counts``: ``mapped`` (a row;
``X``, instants, ``n``, and ``B`` or async begins paired with their end, whose end is
``paired_end`` / ``async_paired_end``), ``metadata``, ``flow``, ``memory``, ``counter``, or
``skipped_<reason>`` (no or out-of-range ``ts``/``dur``, counters without a numeric arg, async
steps, other phases, unmatched begins/ends, non-objects, absurd nesting), so ``events_read`` is
their sum (``counter_samples`` and ``async_instants`` annotate, like ``coerced_*``). Values
changed on the way are counted as ``coerced_<what>`` or ``clamped_<what>``: times beyond +-2**61
ns, integers beyond int64, ``args`` of odd types, counter args that are not numbers, bytes that
are not UTF-8 (replaced in ``jsonstream.Blocks``). Every non-zero count becomes one warning line
(``fate_warnings``) that says exactly what was done; the report carries them to every format.
Chunks with odd value types take a slow path (``_loose_text``) that coerces field by field; clean
traces never pay for it.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from itertools import chain, compress, repeat
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, Union

import msgspec
import numpy as np
import pyarrow as pa

from traceview.errors import TraceFormatError

try:  # the native column decoder: built when a C compiler was present at install
    from traceview.parsers._kineto_columns import (
        array_end as _array_end, decode_chunk as _decode_chunk, first_seen as _first_seen)
except ImportError:  # pragma: no cover - then msgspec decodes every chunk
    _decode_chunk = _first_seen = _array_end = None
from traceview.parsing import NO_HOOKS, ParseHooks
from traceview.registry import InputFormat, register_input_format
from traceview.parsers.jsonstream import (
    UTF8_BOM,
    bracket_depths as _structure,
    find_top_level_key,
    open_bytes as _open_bytes,
)
from traceview.parsers.kineto_autograd import AUTOGRAD_ARG_COLUMNS, autograd_warnings, derive_fwdbwd_links
from traceview.model import (
    hash_keys,
    Kind,
    RankInfo,
    DeviceInfo,
    Trace,
    empty_counters,
    empty_links,
    empty_memory,
    join_on_keys,
    kind_array,
    make_events_table,
    make_counters_table,
    make_links_table,
    make_memory_table,
    steps_from_annotations,
)

ProgressFn = Callable[[int, int], None]

CHUNK_BYTES = 16 * 1024 * 1024

# Source category (lower-cased) -> kind. Spellings from every PyTorch version seen in the wild.
CATEGORY_KINDS: dict[str, Kind] = {
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "cuda_sync": Kind.SYNC,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    # other accelerators' host APIs (Intel XPU, out-of-tree "privateuse1" backends, MTIA)
    "xpu_runtime": Kind.RUNTIME,
    "xpu_driver": Kind.RUNTIME,
    "privateuse1_runtime": Kind.RUNTIME,
    "privateuse1_driver": Kind.RUNTIME,
    "mtia_runtime": Kind.RUNTIME,
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "python_function": Kind.PYTHON_FUNCTION,
    "user_annotation": Kind.ANNOTATION,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
}
#: The name of the allocator's instant events (``ph: "i"``, category ``cpu_instant_event``, or none
#: before PyTorch 1.10): they go to ``Trace.memory``, not to the events.
MEMORY_EVENT_NAME = "[memory]"
#: Flow categories that link a launch to its GPU activity (already covered by correlation ids).
LAUNCH_FLOW_CATEGORIES = {"ac2g", "async_cpu_to_gpu", "async"}

_GPU_KINDS = np.array([int(k) for k in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.GPU_ANNOTATION)])
_ACTIVITY_OR_SYNC = np.array([int(k) for k in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC)])

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_SEPARATOR = re.compile(rb"\}\s*,\s*\{")
_COPY_KIND = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|HtoA|AtoH|AtoD|DtoA|AtoA)\b")

TS_EXACT_LIMIT_US = float(2**43)
#: Times (``ts``, ``dur``, ``baseTimeNanoseconds``) must lie within +-2**61 ns (73 years): the sum
#: of a base time, a start and a duration then still fits int64. Beyond it an event is skipped.
TIME_LIMIT_NS = 2**61
TIME_LIMIT_US = TIME_LIMIT_NS / 1000
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
#: Phases (``ph``) and what becomes of them (the Chrome trace event format's phases).
COMPLETE_PHASES = ("X",)
INSTANT_PHASES = ("i", "I")
FLOW_PHASES = ("s", "f", "t")
COUNTER_PHASES = ("C",)
ASYNC_PHASES = ("b", "e", "n", "S", "T", "p", "F")
#: Async events kept: nestable (b/e) and legacy (S/F) begins and ends pair into duration rows, ``n``
#: instants become instant rows; all of kind OTHER. The legacy steps (T/p) are skipped, counted.
ASYNC_BEGIN_PHASES = ("b", "S")
ASYNC_END_PHASES = ("e", "F")
ASYNC_INSTANT_PHASES = ("n",)
#: The key under which the slow path (``_coerce_event``) keeps the args of counter events, whose
#: keys and types are the trace's own (the typed ``args`` would coerce or fail on them).
COUNTER_ARGS_KEY = "traceview:counter_args"
#: Columns of the events table holding an op's recorded inputs (``record_shapes=True``: "Input Dims",
#: "Input type", "Input Strides", "Concrete Inputs"), each as canonical JSON text (``canonical_json``)
OP_INPUT_COLUMNS = ("input_dims", "input_types", "input_strides", "concrete_inputs")
#: ``_Args`` fields of any JSON value (never coerced by the slow path)
_ANY_JSON_ARGS = frozenset((*OP_INPUT_COLUMNS, "input_dims_old"))


# ---------------------------------------------------------------------- typed decoding


class _Args(msgspec.Struct, frozen=True, gc=False):
    external_id: int = msgspec.field(default=-1, name="External id")
    external_id_old: int = msgspec.field(default=-1, name="external id")  # 2021 runtime events
    correlation: int = -1
    stream: int = -1
    device: int = -1
    bytes: int = -1
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] = ()
    collective: str = msgspec.field(default="", name="Collective name")
    in_nelems: int = msgspec.field(default=-1, name="In msg nelems")
    out_nelems: int = msgspec.field(default=-1, name="Out msg nelems")
    group_size: int = msgspec.field(default=-1, name="Group size")
    # autograd: a forward op's node number and a backward op's forward thread (kineto_autograd.py)
    sequence_number: int = msgspec.field(default=-1, name="Sequence number")
    fwd_thread_id: int = msgspec.field(default=-1, name="Fwd thread id")
    dtype: str = ""
    pg_name: str = msgspec.field(default="", name="Process Group Name")
    pg_ranks: Union[str, list[int], None] = msgspec.field(default=None, name="Process Group Ranks")
    name: str = ""  # metadata events: process_name / thread_name
    # an op's recorded inputs (record_shapes=True), any JSON: kept as canonical JSON text
    # (``OP_INPUT_COLUMNS``); "Input dims" is the 2021 spelling
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_dims_old: Any = msgspec.field(default=None, name="Input dims")
    input_types: Any = msgspec.field(default=None, name="Input type")
    input_strides: Any = msgspec.field(default=None, name="Input Strides")
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")


class _MemoryArgs(_Args, frozen=True, gc=False):
    """``_Args`` plus those of the allocator's ``[memory]`` instants (-1: absent; totals and
    addresses are never negative). A separate struct because every field costs time on every
    decoded event (each unknown key is compared with every field): files without allocator events
    never pay for these."""

    mem_bytes: int = msgspec.field(default=0, name="Bytes")
    total_allocated: int = msgspec.field(default=-1, name="Total Allocated")
    total_reserved: int = msgspec.field(default=-1, name="Total Reserved")
    device_id: int = msgspec.field(default=-1, name="Device Id")
    device_type: int = msgspec.field(default=-1, name="Device Type")
    addr: int = msgspec.field(default=-1, name="Addr")


_NO_ARGS = _Args()
_NO_MEMORY_ARGS = _MemoryArgs()


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = -1
    tid: Union[int, str] = -1
    ts: Union[int, float] = float("nan")  # missing: skipped with a reason, never put at t=0
    dur: Union[int, float] = 0
    id: Union[int, str] = -1
    bp: str = ""
    args: _Args = _NO_ARGS


class _MemoryEvent(_Event, gc=False):
    """An event decoded with the allocator's args (once a file has shown it has allocator events)."""

    args: _MemoryArgs = _NO_MEMORY_ARGS


class _MemoryProbe(msgspec.Struct, gc=False):
    """Only the allocator's args of an event (every other key is skipped)."""

    args: _MemoryArgs = _NO_MEMORY_ARGS


class _PhaseProbe(msgspec.Struct, gc=False):
    """The fields of counter and async events that ``_Event`` leaves out, as written: ``args`` of
    any keys (counter series), ``id`` (empty: absent) and ``id2``. Decoded only for chunks that
    hold such events."""

    id: msgspec.Raw = msgspec.Raw(b"")
    id2: msgspec.Raw = msgspec.Raw(b"")
    args: msgspec.Raw = msgspec.Raw(b"{}")
    counter_args: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name=COUNTER_ARGS_KEY)


class _RawTimes(msgspec.Struct, gc=False):
    ts: msgspec.Raw = msgspec.Raw(b"0")
    dur: msgspec.Raw = msgspec.Raw(b"0")


#: States of a decoded time (``_KinetoFile._times_ns``).
_VALID, _MISSING, _OUT_OF_RANGE = 0, 1, 2

_EVENTS_DECODER = msgspec.json.Decoder(list[_Event])
_MEMORY_EVENTS_DECODER = msgspec.json.Decoder(list[_MemoryEvent])
_MEMORY_PROBE_DECODER = msgspec.json.Decoder(list[_MemoryProbe])
_PHASE_PROBE_DECODER = msgspec.json.Decoder(list[_PhaseProbe])
_RAW_OBJECT_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])
_get_name, _get_pid, _get_tid = attrgetter("name"), attrgetter("pid"), attrgetter("tid")
_get_args, _get_id = attrgetter("args"), attrgetter("id")
_RAW_TIMES_DECODER = msgspec.json.Decoder(list[_RawTimes])
_ANY_DECODER = msgspec.json.Decoder()


# ---------------------------------------------------------------------- public API


def rank_from_filename(path: str | os.PathLike[str]) -> int | None:
    match = _RANK_IN_NAME.search(Path(path).name)
    return int(match.group(1)) if match else None


def parse_kineto(path: str | os.PathLike[str], *, progress: ProgressFn | None = None,
                 jobs: int | None = 1, clock: "PhaseClock | None" = None, hooks: ParseHooks = NO_HOOKS) -> Trace:
    """Parse one Kineto trace file. The rank comes from ``distributedInfo``, else the file name,
    else it is left as -1 (``rank_source == "unknown"``) for the loader to assign.

    ``jobs``: worker processes for a big file (``parsers/kineto_parallel.py``; None: the cores
    available); 1 reads it in this process. The Trace is the same either way. ``clock``: where
    the time of each phase is added (benchmarks). ``hooks``: what the calling process lends the
    parse (:class:`traceview.parsing.ParseHooks`; the default, nothing, changes nothing in it)."""
    path = Path(path)
    with hooks.heap():
        if jobs != 1:
            from traceview.parsers.kineto_parallel import parse_parallel

            return parse_parallel(path, progress=progress, jobs=jobs, clock=clock, hooks=hooks)
        hooks.meanwhile()  # nothing runs beside this parse: the caller's work first
        parser = _KinetoFile(path, progress, clock)
        return parser.parse()


def kineto_reader(path: Path, progress: ProgressFn | None = None, clock: "PhaseClock | None" = None) -> "_KinetoFile":
    """A parser of one file whose reading the caller drives (``parsers/kineto_parallel.py``:
    ``start_events``, ``read_range``, ``finish``)."""
    return _KinetoFile(path, progress, clock)


class PhaseClock:
    """Wall and CPU seconds per named phase of one parse, for the benchmarks' breakdown
    (``benchmarks/bench_load.py --phases``). CPU is ``time.thread_time``, the CPU time of the
    thread the phase ran in, so on a busy machine it says what the phase costs, where wall time
    says how long it waited for a core too (and the phases of a helper thread, marked so, are
    not counted in those of the thread beside it). Page faults too (``minor_page_faults``):
    memory touched for the first time costs ~2 us a 4 KiB page on the 2-core benchmark machine,
    and a parallel parse's build faults in far more of it than a serial one (benchmarks/README.md,
    eighth pass). ``workers``: one record per range a worker process parsed
    (``kineto_parallel.read_range``)."""

    def __init__(self) -> None:
        self.phases: dict[str, list[float]] = {}  # name -> [wall s, CPU s, times entered, page faults]
        self.workers: list[dict[str, float]] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        wall_s, cpu_s, faults = time.perf_counter(), time.thread_time(), minor_page_faults(thread=True)
        try:
            yield
        finally:
            entry = self.phases.setdefault(name, [0.0, 0.0, 0, 0])
            entry[0] += time.perf_counter() - wall_s
            entry[1] += time.thread_time() - cpu_s
            entry[2] += 1
            entry[3] += minor_page_faults(thread=True) - faults


def minor_page_faults(thread: bool = False) -> int:
    """Page faults served without I/O so far (mostly fresh memory touched for the first time), of
    this process, or of the calling thread where the system counts per thread (Linux); 0 where
    there is no ``resource`` module (Windows)."""
    try:
        import resource
    except ImportError:
        return 0
    who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF) if thread else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_minflt


def timed(clock: PhaseClock | None, name: str) -> contextlib.AbstractContextManager[None]:
    """``clock.phase(name)``, or nothing to time."""
    return contextlib.nullcontext() if clock is None else clock.phase(name)


# ---------------------------------------------------------------------- streaming


@dataclass
class _Chunk:
    """One decoded chunk of events and the per-event columns read from all of them."""

    fields: "_StructFields | _NativeFields"  # the events' fields (msgspec structs or native columns)
    piece: Callable[[], bytes]  # the chunk's JSON text (slow paths only)
    # the chunk's text decoded by another decoder (from the event holding a marker on, if given)
    decode_again: Callable[[msgspec.json.Decoder, bytes | None], list[Any]]
    kind: np.ndarray  # int8 Kind codes, from the category
    category: np.ndarray  # codes in the category memo
    pid: np.ndarray
    tid: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    # async events' pairing key (category, id, name; object str), set by _keep_async when it has any
    async_key: np.ndarray | None = None

    @property
    def events(self) -> list[_Event]:
        """The structs (counter, async and allocator events: only chunks decoded by msgspec hold them)."""
        return self.fields.structs()


class _KinetoFile:
    def __init__(self, path: Path, progress: ProgressFn | None, clock: PhaseClock | None = None) -> None:
        self.path = path
        self.progress = progress
        self._clock = clock  # not parse state: kineto_parallel ships no "_" attribute
        self.total_bytes = path.stat().st_size if path.exists() else 0
        self.columns: dict[str, list[Any]] = {}
        self.head: dict[str, Any] = {}
        self.tail: dict[str, Any] = {}
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[str, str] = {}
        self.flows: list[dict[str, np.ndarray]] = []  # per chunk: ph, cat codes, id, pid, tid, ts_ns
        self.memory: list[dict[str, np.ndarray]] = []  # per chunk: the memory table's columns
        # _MEMORY_EVENTS_DECODER from the first allocator event on
        self.decoder: msgspec.json.Decoder[Any] = _EVENTS_DECODER
        self.counts: dict[str, int] = {}
        self.unmapped: dict[str, int] = {}
        self.warnings: list[str] = []
        self.autograd_warnings: list[str] = []  # said once the links are made (_derived_fwdbwd)
        self.string_ids: dict[str, int] = {}
        self.n_rows = 0
        self.imprecise_ts = 0
        # B and E events (Chrome duration pairs), paired per thread once the file is read
        self.begins: list[dict[str, np.ndarray]] = []  # row (in the events table), pid, tid, ts, seq
        self.ends: list[dict[str, np.ndarray]] = []  # pid, tid, ts, seq
        # async begins and ends (b/e, S/F), paired per (pid, key: category, id, name) the same way
        self.async_begins: list[dict[str, np.ndarray]] = []  # row, pid, key (object str), ts, seq
        self.async_ends: list[dict[str, np.ndarray]] = []  # pid, key, ts, seq
        # per chunk: the counter table's columns but rank (name and series as object str arrays)
        self.counters: list[dict[str, np.ndarray]] = []
        self.unsupported_phases: dict[str, int] = {}
        self.dur_fixes = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))  # B rows, their durations
        self._need_more = False
        self.whole_events = False  # read_range: the input ends where an event ends, not with the array
        # string -> code memos shared by all chunks, so codes agree without unifying dictionaries
        self.ph_memo = _Codes()
        self.cat_memo = _Codes()
        self.name_memo = _Codes()
        # one per OP_INPUT_COLUMNS column (``<column>_memo``): its texts as codes, so the column is
        # dictionary-encoded once, from codes, instead of hashing every row's text at the end
        for key in OP_INPUT_COLUMNS:
            setattr(self, op_input_memo(key), _Codes())

    # -- reading -----------------------------------------------------------------------
    def parse(self) -> Trace:
        raw, chunks = _open_bytes(self.path)
        with raw, timed(self._clock, "read and decode"):
            self._read(raw, chunks)
        self._count("coerced_invalid_utf8", chunks.invalid_utf8)
        return self._build()

    # -- reading in byte ranges (parsers/kineto_parallel.py) ------------------------------
    def start_events(self, buf: bytearray, chunks: Iterator[bytes]) -> tuple[int, bool] | None:
        """Read blocks into ``buf`` up to the events array and keep the metadata before it; returns
        (position in ``buf`` of the array's first byte after ``[``, whether the document is a bare
        array), or None when there is no events array (a serial parse says what is wrong)."""
        events_start, array_document = self._read_head(buf, chunks)
        if events_start < 0:
            return None
        if not array_document:
            self.head = self._decode_object(bytes(buf[:events_start]), closing=True)
        return events_start, array_document

    def read_range(self, blocks: Iterator[bytes], *, last: bool, array_document: bool,
                   allocator_args: bool = False, buffer: bytearray | None = None) -> None:
        """Decode one byte range of the events array that starts at an event: ``last``, it runs
        to the end of the file (the array's end and the metadata after it are read as usual);
        otherwise it ends where the next event starts. ``allocator_args``: decode the allocator's
        args from the start (``allocator_events_expected``), instead of reading the first chunk
        with allocator events a second time, which every range would do. ``buffer``: the read
        buffer to use (its contents are overwritten; a range that is not the last leaves its
        room as it is): the ranges a process reads one after another reuse the memory of one,
        instead of faulting in ~20 MB of fresh pages each (~5 ms a range)."""
        self.whole_events = not last
        if allocator_args:
            self.decoder = _MEMORY_EVENTS_DECODER
        source = _Consumed(blocks)
        buf = bytearray(b"[") if buffer is None else buffer
        if not buf:
            buf.append(0x5B)
        buf[0] = 0x5B
        self._read_events(source, iter(source), buf, array_document, size=1)

    def allocator_events_expected(self) -> bool:
        """Whether the metadata before the events says memory was profiled (``profile_memory``)."""
        flag = self.head.get("profile_memory")
        return flag is True or (isinstance(flag, int) and flag > 0)

    def finish(self, invalid_utf8: int, threads: int = 1) -> Trace:
        """The Trace from what was read (``invalid_utf8``: byte sequences replaced on the way);
        ``threads`` > 1: the parse may use that many cores (``_build``)."""
        self._count("coerced_invalid_utf8", invalid_utf8)
        return self._build(threads)

    def _report(self, raw: "io.BufferedReader | _Consumed") -> None:
        if self.progress is not None:
            try:
                self.progress(raw.tell(), self.total_bytes)
            except (OSError, ValueError):
                pass

    def _read(self, raw: io.BufferedReader, chunks: Iterator[bytes]) -> None:
        buf = bytearray()
        # 1. the head: everything up to the opening bracket of traceEvents
        events_start, array_document = self._read_head(buf, chunks)
        if events_start < 0:
            if not buf.strip():
                raise TraceFormatError(self.path, "is empty")
            self._no_events_array(bytes(buf))
            return
        if not array_document:
            self.head = self._decode_object(bytes(buf[:events_start]), closing=True)
        # keep the array's "[" at position 0: chunks decode in place as buf[0:cut] + "]"
        del buf[: events_start - 1]
        # 2. the events, chunk by chunk
        self._read_events(raw, chunks, buf, array_document)

    def _read_head(self, buf: bytearray, chunks: Iterator[bytes]) -> tuple[int, bool]:
        """Read blocks into ``buf`` up to the opening bracket of the events array.

        Returns (position just after that bracket, or -1 when there is none; whether the document
        is a bare array of events rather than an object with ``traceEvents``).
        """
        for block in chunks:
            buf += block
            stripped = buf.lstrip()
            if not stripped:
                continue
            if stripped[:1] == b"[":
                return len(buf) - len(stripped) + 1, True
            if stripped[:1] != b"{":
                raise TraceFormatError(self.path, "is not a JSON trace (does not start with '{' or '[')",
                                       "expected PyTorch profiler JSON or an Nsight Systems .sqlite export")
            events_start = self._find_events_key(buf)
            if events_start >= 0:
                return events_start, False
            if len(buf) > 256 * 1024 * 1024:
                break
        return -1, False

    def _read_events(self, raw: "io.BufferedReader | _Consumed", chunks: Iterator[bytes], buf: bytearray,
                     array_document: bool, size: int | None = None) -> None:
        """Decode the events array chunk by chunk (``buf`` starts with its ``[``; ``size``: how
        many of its bytes are in use, default all).

        ``buf`` keeps its room between chunks: ``size`` bytes of it are in use, blocks are copied
        in after them and the undecoded tail moved to the front, by same-length slice assignments
        (a bytearray that shrinks below half its room reallocates, and refilling it grows it
        block by block: each chunk's memory freshly faulted in, ~0.1 s of 141 MB).
        """
        size = len(buf) if size is None else size
        at_eof = False
        while True:
            if not at_eof and (size < CHUNK_BYTES or self._need_more):
                self._need_more = False
                for block in chunks:
                    end = size + len(block)
                    if end > len(buf):
                        buf += bytes(end - len(buf))  # room, once (or for an event larger than a chunk)
                    buf[size:end] = block
                    size = end
                    if size >= CHUNK_BYTES:
                        break
                else:
                    at_eof = True
                self._report(raw)
            if at_eof:
                if self.whole_events:  # a range cut before an event: no array end, and the room is kept
                    self._decode_all(buf, self._rstrip_separators(buf, size))
                    return
                del buf[size:]
                self._final_chunk(buf, array_document)
                return
            cut = self._find_cut(buf, size)
            if cut is None:
                self._need_more = True
                continue  # one event larger than a chunk: read more
            consumed = self._decode_events(buf, 1, cut)
            tail = size - consumed
            buf[1 : 1 + tail] = buf[consumed:size]
            size = 1 + tail

    def _find_events_key(self, buf: bytearray) -> int:
        # a real top-level key: outside any string, directly inside the outer object
        return find_top_level_key(buf, _TRACE_EVENTS_KEY)

    def _find_cut(self, buf: bytearray, size: int) -> int | None:
        """Position just after the last complete event in ``buf[:size]`` (the ``}``), or None."""
        search_from = max(0, size - 64 * 1024)  # events are small: the last boundary is near the end
        while True:
            # positions only: a match object locks ``buf`` against resizing while it lives
            starts = [m.start() for m in _EVENT_SEPARATOR.finditer(buf, search_from, size)]
            if starts:
                return starts[-1] + 1
            if search_from == 0:
                return None
            search_from = max(0, search_from - 8 * 1024 * 1024)

    def _decode_events(self, buf: bytearray, start: int, end: int) -> int:
        """Decode the events in ``buf[start:end]`` (``start >= 1``); returns where the decoded
        events end (a cut that fell inside a string or nested object decodes only up to the
        last real boundary).

        The chunk is decoded in place, without copying: the bytes just before and after it are
        temporarily replaced by ``[`` and ``]``.
        """
        while start < end and buf[start] in b" \t\r\n,":
            start += 1
        if start >= end:
            return end
        native = self._native_fields(buf, start, end)
        if native is not None:
            self._ingest(native, lambda: _piece(buf, start, end),
                         lambda decoder, marker: self._decode_tail(buf, start, end, decoder, marker))
            return end
        try:
            events = self._decode_in_place(buf, start, end, self.decoder)
        except (msgspec.ValidationError, RecursionError):
            # odd value types, non-object entries or absurd nesting: the slow path, value by value
            try:
                text = self._loose_text(_piece(buf, start, end))
            except msgspec.DecodeError:  # and the cut fell inside a string (the typed decoder stopped before it)
                return self._decode_to_boundary(buf, start, end)
            self._ingest_text(text)
            return end
        except msgspec.DecodeError:
            return self._decode_to_boundary(buf, start, end)
        self._ingest(_StructFields(events), lambda: _piece(buf, start, end),
                     lambda decoder, marker: self._decode_tail(buf, start, end, decoder, marker))
        return end

    def _native_fields(self, buf: bytearray, start: int, end: int) -> "_NativeFields | None":
        """The chunk's columns from the native decoder, or None when it is off, absent, or declines
        the chunk (then msgspec decodes it, as the reference path)."""
        if _decode_chunk is None or os.environ.get("TRACEVIEW_KINETO_NATIVE", "1") == "0":
            return None
        result = _decode_chunk(buf, start, end)
        fields = _NativeFields.of(result, buf) if result is not None else None
        NATIVE_CHUNKS["native" if fields is not None else "fallback"] += 1
        return fields

    def _decode_to_boundary(self, buf: bytearray, start: int, end: int) -> int:
        """The cut fell inside a string or nested object: decode up to the real last event boundary."""
        boundary = self._last_event_boundary(buf, start, end)
        if boundary is None:
            self._need_more = True
            return start
        if boundary >= end:
            raise TraceFormatError(self.path, f"malformed JSON in traceEvents near byte {start}",
                                   "the file is damaged or not a Chrome trace")
        return self._decode_events(buf, start, boundary)

    @staticmethod
    def _decode_in_place(buf: bytearray, start: int, end: int, decoder: msgspec.json.Decoder) -> list[Any]:
        appended = end == len(buf)
        if appended:
            buf.append(0x5D)
        before, after = buf[start - 1], buf[end]
        buf[start - 1], buf[end] = 0x5B, 0x5D
        try:
            with memoryview(buf) as view, view[start - 1 : end + 1] as piece:
                return decoder.decode(piece)
        finally:
            buf[start - 1], buf[end] = before, after
            if appended:
                del buf[-1]

    def _decode_tail(self, buf: bytearray, start: int, end: int, decoder: msgspec.json.Decoder,
                     marker: bytes | None) -> list[Any]:
        """The events of ``buf[start:end]`` decoded by ``decoder``; with ``marker``, only those from
        the event holding its first occurrence on, found as the last ``{`` before it (a guess: the
        caller checks the count, and a wrong guess fails to decode)."""
        if marker is not None:
            at = buf.find(marker, start, end)
            brace = buf.rfind(b"{", start, at) if at >= 0 else -1
            start = max(start, brace)
        return self._decode_in_place(buf, start, end, decoder)

    def _last_event_boundary(self, buf: bytearray, start: int, end: int) -> int | None:
        """End (exclusive) of the last complete top-level event in ``buf[start:end]``."""
        brackets, depth = _structure(bytes(buf[start:end]))
        closes = brackets[depth == 0]
        if len(closes) == 0:
            return None
        return int(closes[-1]) + start + 1

    def _loose_text(self, piece: bytes) -> bytes:
        """Slow path for chunks with unexpected values: decode as plain JSON, keep the objects,
        coerce their fields to the types ``_Event`` expects (each change counted by reason), and
        return them re-encoded, ready for the typed decoder."""
        try:
            items = _ANY_DECODER.decode(piece)
        except RecursionError:
            items = self._decode_each(piece)
        objects = [item for item in items if isinstance(item, dict)]
        # entries that never reach the typed decoder are read (and skipped) here
        self._count("events_read", len(items) - len(objects))
        self._count("skipped_not_an_object", len(items) - len(objects))
        for item in objects:
            for reason in _coerce_event(item):
                self._count(reason, 1)
        return msgspec.json.encode(objects)

    def _decode_each(self, piece: bytes) -> list[Any]:
        """The entries of a chunk decoded one by one, for a chunk nested too deeply to decode whole:
        the entries too deep to decode are skipped (counted)."""
        brackets, depth = _structure(piece)
        opens = np.diff(depth, prepend=0) > 0
        firsts = brackets[opens & (depth == 2)]  # entries are at depth 1 inside the chunk's [ ]
        lasts = brackets[~opens & (depth == 1)]
        if len(firsts) != len(lasts) or depth[-1] != 0:
            raise msgspec.DecodeError("truncated: the chunk does not end with a whole event")
        items: list[Any] = []
        for first, last in zip(firsts.tolist(), lasts.tolist()):
            try:
                items.append(_ANY_DECODER.decode(piece[first : last + 1]))
            except (RecursionError, msgspec.DecodeError):
                self._count("events_read", 1)
                self._count("skipped_nested_too_deep", 1)
        return items

    def _ingest_text(self, text: bytes) -> None:
        """Decode and ingest a standalone JSON array of well-typed events (the slow paths' output)."""
        holder = bytearray(text)
        events: list[_Event] = list(_MEMORY_EVENTS_DECODER.decode(text))
        self._ingest(_StructFields(events), lambda: text,
                     lambda decoder, marker: self._decode_tail(holder, 1, len(holder) - 1, decoder, marker))

    def _final_chunk(self, buf: bytearray, array_document: bool) -> None:
        array_end = _events_array_end(buf)
        if array_end is None and array_document:
            # the Chrome JSON array format may omit the closing bracket: the events end with the file
            array_end = len(buf)
        if array_end is None:
            raise TraceFormatError(self.path, "JSON is truncated: the traceEvents array never closes",
                                   "the file was cut short (profiler killed, or an incomplete copy)")
        self._decode_all(buf, self._rstrip_separators(buf, array_end))
        if not array_document:
            tail = bytes(buf[array_end + 1:]).strip()
            if not tail.endswith(b"}"):
                raise TraceFormatError(self.path, "JSON is truncated after the traceEvents array",
                                       "the file was cut short")
            tail = tail.lstrip(b", \t\r\n")
            self.tail = self._decode_object(b"{" + tail, closing=False) if tail != b"}" else {}
            self._second_events_array(self.tail.pop("traceEvents", None))

    def _decode_all(self, buf: bytearray, events_end: int) -> None:
        """Decode every event of ``buf[1:events_end]`` (the last chunk)."""
        position = 1
        while position < events_end:
            consumed = self._decode_events(buf, position, events_end)
            if consumed <= position:
                raise TraceFormatError(self.path, "malformed JSON in traceEvents near the end of the file")
            position = consumed

    def _second_events_array(self, extra: Any) -> None:
        """A second top-level ``traceEvents`` (scripts that merge traces write one): its events are
        read too, and said; anything else under that key is said to be ignored."""
        if extra is None:
            return
        if not isinstance(extra, list):
            self.warnings.append("a second top-level 'traceEvents' key holds no array; ignored")
            return
        if extra:
            self._ingest_text(self._loose_text(msgspec.json.encode(extra)))
        self.warnings.append(f"the file has a second top-level traceEvents array: its {len(extra):,} entries were "
                             "read too (their fates are counted with the others)")

    @staticmethod
    def _rstrip_separators(buf: bytearray, end: int) -> int:
        while end > 0 and buf[end - 1] in b" \t\r\n,":
            end -= 1
        return end

    def _decode_object(self, text: bytes, closing: bool) -> dict[str, Any]:
        if closing:
            text = text.rstrip()
            # text ends with '"traceEvents": [' : drop that key and close the object
            key_at = text.rfind(b'"traceEvents"')
            text = text[:key_at].rstrip().rstrip(b",") + b"}"
        try:
            value = _ANY_DECODER.decode(text)
        except msgspec.DecodeError as exc:
            raise TraceFormatError(self.path, f"malformed JSON outside traceEvents ({exc})") from None
        except RecursionError:
            raise TraceFormatError(self.path, "metadata outside traceEvents is nested too deeply to read",
                                   "the file is damaged or not a profiler trace") from None
        return value if isinstance(value, dict) else {}

    def _no_events_array(self, text: bytes) -> None:
        try:
            value = _ANY_DECODER.decode(text)
        except RecursionError:
            raise TraceFormatError(self.path, "is JSON nested too deeply to be a trace") from None
        except msgspec.DecodeError as exc:
            msg = str(exc)
            if "truncated" in msg or "end of" in msg.lower():
                raise TraceFormatError(self.path, "JSON is truncated", "the file was cut short") from None
            raise TraceFormatError(self.path, f"is not valid JSON ({msg})",
                                   "expected a PyTorch profiler trace (.json or .json.gz)") from None
        if isinstance(value, dict):
            raise TraceFormatError(self.path, "is JSON but has no traceEvents array",
                                   "expected a PyTorch profiler / Chrome trace")
        raise TraceFormatError(self.path, "is JSON but not a trace")

    # -- columns --------------------------------------------------------------------------
    def _ingest(self, fields: "_StructFields | _NativeFields", piece: Callable[[], bytes],
                decode_again: Callable[[msgspec.json.Decoder, bytes | None], list[Any]]) -> None:
        """Turn one decoded chunk into columns. Each field is read once for all events (a column
        of the native decoder, or C-level ``map(attrgetter)`` over structs), then rows are
        selected with numpy masks. Every event gets one fate, counted in ``self.counts``: mapped,
        metadata, flow, memory, or ``skipped_<reason>``."""
        n = fields.n
        if n == 0:
            return
        first_seq = self.counts.get("events_read", 0)
        self._count("events_read", n)
        ph_codes = fields.codes(self.ph_memo, "ph")
        ph_values = self.ph_memo.values()

        present = np.bincount(ph_codes, minlength=len(ph_values)) > 0  # the phases this chunk has

        def ph_mask(wanted: tuple[str, ...]) -> np.ndarray:
            table = np.array([p in wanted for p in ph_values], dtype=bool)
            # a chunk has a few phases: most masks are all False or all True, without a lookup per event
            if not (table & present).any():
                return np.zeros(n, dtype=bool)
            if (table | ~present).all():
                return np.ones(n, dtype=bool)
            return table[ph_codes]  # a lookup per code

        is_meta = ph_mask(("M",))
        self._count("metadata", int(is_meta.sum()))
        if is_meta.any():  # a few dozen per file
            self._metadata_names(fields, is_meta)
        start_ns, ts_state = self._times_ns(fields, "ts", piece)
        self._count("skipped_no_ts", int((~is_meta & (ts_state == _MISSING)).sum()))
        self._count("skipped_ts_out_of_range", int((~is_meta & (ts_state == _OUT_OF_RANGE)).sum()))
        timed = ~is_meta & (ts_state == _VALID)
        dur_ns, dur_state = self._times_ns(fields, "dur", piece)
        is_complete = ph_mask(COMPLETE_PHASES + INSTANT_PHASES) & timed
        bad_dur = is_complete & (dur_state != _VALID)
        self._count("skipped_dur_out_of_range", int(bad_dur.sum()))
        is_complete &= ~bad_dur
        is_flow = ph_mask(FLOW_PHASES) & timed
        is_begin, is_end = ph_mask(("B",)) & timed, ph_mask(("E",)) & timed
        is_counter = ph_mask(COUNTER_PHASES) & timed
        is_async = {role: ph_mask(phases) & timed for role, phases in
                    (("begin", ASYNC_BEGIN_PHASES), ("end", ASYNC_END_PHASES), ("instant", ASYNC_INSTANT_PHASES))}
        async_any = is_async["begin"] | is_async["end"] | is_async["instant"]
        self._count("flow", int(is_flow.sum()))
        self._skip_phases(ph_codes, timed & ~(is_complete | is_flow | is_begin | is_end | bad_dur | is_counter
                                               | async_any))

        cat_codes = fields.codes(self.cat_memo, "cat")
        cat_values = self.cat_memo.values()
        cat_kinds = np.array([int(CATEGORY_KINDS.get(c.lower(), Kind.OTHER)) for c in cat_values] or [0], dtype=np.int8)
        pid, tid = self._thread_ids(fields)
        chunk = _Chunk(
            fields=fields, piece=piece, decode_again=decode_again, kind=cat_kinds[cat_codes], category=cat_codes,
            pid=pid, tid=tid, start_ns=start_ns, dur_ns=dur_ns,
        )
        if is_flow.any():
            self._keep_flows(chunk, ph_codes, is_flow)
        is_instant = ph_mask(INSTANT_PHASES) & is_complete
        if is_instant.any():  # a few per file, or one per allocation when memory is profiled
            is_memory = self._memory_rows(chunk, is_instant)
            is_complete &= ~is_memory
        if is_counter.any() or async_any.any():
            self._phase_events(chunk, is_counter, is_async, first_seq)
        self._keep_rows(chunk, is_complete, is_begin, is_end, is_async, first_seq)

    def _phase_events(self, chunk: _Chunk, is_counter: np.ndarray, is_async: dict[str, np.ndarray],
                      first_seq: int) -> None:
        """Counter samples and async begins/ends of a chunk (their args and ids read again by
        ``_phase_probes``); async begins and instants are made rows of kind OTHER."""
        probes = self._phase_probes(chunk)
        if is_counter.any():
            self._counter_samples(chunk, probes, is_counter)
        if (is_async["begin"] | is_async["end"] | is_async["instant"]).any():
            self._keep_async(chunk, probes, is_async, first_seq)

    def _keep_rows(self, chunk: _Chunk, is_complete: np.ndarray, is_begin: np.ndarray, is_end: np.ndarray,
                   is_async: dict[str, np.ndarray], first_seq: int) -> None:
        """Rows of the chunk (``X``, instants, ``B``, async begins and ``n``), and the row numbers of
        its begins for the pairing once the file is read."""
        if is_end.any():
            self.ends.append({"pid": chunk.pid[is_end], "tid": chunk.tid[is_end], "ts": chunk.start_ns[is_end],
                              "seq": first_seq + np.flatnonzero(is_end)})
        by_phase = is_async["begin"] | is_async["instant"]  # rows of kind OTHER whatever their category
        kept = is_complete | is_begin | by_phase
        if not kept.any():
            return
        rows = np.flatnonzero(kept)
        for mask, parts, key in ((is_begin, self.begins, "tid"), (is_async["begin"], self.async_begins, "key")):
            begins = np.flatnonzero(mask[rows])
            if begins.size:
                at = rows[begins]
                track = chunk.tid[at] if chunk.async_key is None or key == "tid" else chunk.async_key[at]
                parts.append({"row": self.n_rows + begins, "pid": chunk.pid[at], key: track,
                              "ts": chunk.start_ns[at], "seq": first_seq + at})
        self._ingest_complete(chunk, kept, by_phase)

    def _skip_phases(self, ph_codes: np.ndarray, skipped: np.ndarray) -> None:
        """Count the events of phases traceview keeps no rows for, by reason."""
        if not skipped.any():
            return
        ph_values = self.ph_memo.values()
        for code, count in zip(*np.unique(ph_codes[skipped], return_counts=True)):
            ph = ph_values[code]
            if ph in ASYNC_PHASES:  # the others are kept: only the legacy steps T and p come here
                self._count("skipped_async_step", int(count))
            else:
                self._count("skipped_unsupported_phase", int(count))
                shown = ph if ph.isascii() and ph.isprintable() and 0 < len(ph) <= 4 else "(other)"
                self.unsupported_phases[shown] = self.unsupported_phases.get(shown, 0) + int(count)

    def _thread_ids(self, fields: "_StructFields | _NativeFields") -> tuple[np.ndarray, np.ndarray]:
        """pid and tid of each event as int64 (``_int_ids``). Texts get ids on first sight in
        event order, pid before tid, so the ids do not depend on where chunks (or the byte ranges
        of a parallel parse) are cut."""
        if isinstance(fields, _NativeFields):
            pid, tid, beyond = fields.thread_ids(self.string_ids)
            self._count("coerced_id_beyond_64_bits", beyond)
            return pid, tid
        events = fields.events
        pids, tids = list(map(_get_pid, events)), list(map(_get_tid, events))
        n = len(events)
        try:
            return np.fromiter(pids, dtype=np.int64, count=n), np.fromiter(tids, dtype=np.int64, count=n)
        except (TypeError, ValueError, OverflowError):
            pass
        # a chunk with texts or numbers beyond int64 (old formats): name them in event order first
        for value in chain.from_iterable(zip(pids, tids)):
            if type(value) is not int or not -(2**63) <= value <= INT64_MAX:
                _string_id(str(value).strip(), self.string_ids)
        return self._ids(pids), self._ids(tids)

    def _ids(self, values: list[Any]) -> np.ndarray:
        ids, beyond = _int_ids(values, self.string_ids)
        self._count("coerced_id_beyond_64_bits", beyond)
        return ids

    def _memory_rows(self, chunk: _Chunk, is_instant: np.ndarray) -> np.ndarray:
        """Keep the allocator events among the chunk's instants as memory rows; returns their mask."""
        rows = np.flatnonzero(is_instant)
        names = chunk.fields.strings("name", is_instant)
        rows = rows[np.fromiter(map(MEMORY_EVENT_NAME.__eq__, names), dtype=bool, count=rows.size)]
        is_memory = np.zeros(chunk.fields.n, dtype=bool)
        if rows.size == 0:
            return is_memory
        is_memory[rows] = True
        m = int(rows.size)
        memory: _StructFields | _NativeFields
        if isinstance(chunk.fields, _NativeFields):  # the native decoder read the allocator's args too
            self.decoder = _MEMORY_EVENTS_DECODER  # as _memory_args would: for chunks msgspec decodes
            memory = chunk.fields.take(rows)
        else:
            memory = _StructFields([], args=self._memory_args(chunk, is_memory))
        self.memory.append({
            "device": memory.int_arg("device_id", self.counts),
            "device_type": memory.int_arg("device_type", self.counts),
            "ts_ns": chunk.start_ns[rows], "bytes": memory.int_arg("mem_bytes", self.counts),
            "total_allocated_bytes": memory.int_arg("total_allocated", self.counts),
            "total_reserved_bytes": memory.int_arg("total_reserved", self.counts),
            "addr": memory.int_arg("addr", self.counts), "pid": chunk.pid[rows], "tid": chunk.tid[rows],
        })
        self._count("memory", m)
        return is_memory

    def _memory_args(self, chunk: _Chunk, is_memory: np.ndarray) -> list[_MemoryArgs]:
        """The allocator args of the chunk's memory rows. The first chunk that has any was decoded
        without them (files without allocator events never pay for their fields): read them from
        its text, from the first allocator event on, every other key skipped; then decode the rest
        of the file with them."""
        args = list(map(_get_args, compress(chunk.events, is_memory)))
        if isinstance(args[0], _MemoryArgs):
            return args
        self.decoder = _MEMORY_EVENTS_DECODER
        first = int(np.argmax(is_memory))
        try:
            tail = chunk.decode_again(_MEMORY_PROBE_DECODER, b'"' + MEMORY_EVENT_NAME.encode() + b'"')
        except (msgspec.DecodeError, msgspec.ValidationError):
            tail = []
        if len(tail) == len(chunk.events) - first:  # the tail starts at the first allocator event
            return list(map(_get_args, compress(tail, is_memory[first:])))
        try:
            probe = chunk.decode_again(_MEMORY_PROBE_DECODER, None)
        except (msgspec.ValidationError, RecursionError):
            probe = _MEMORY_EVENTS_DECODER.decode(self._loose_text(chunk.piece()))
        return list(map(_get_args, compress(probe, is_memory)))

    def _metadata_names(self, fields: "_StructFields | _NativeFields", is_meta: np.ndarray) -> None:
        """Process and thread names from the metadata (``ph == "M"``) events."""
        for name, pid, tid, value in fields.metadata(is_meta):
            if name == "process_name" and isinstance(pid, int):
                self.process_names[pid] = value
            elif name == "thread_name":
                self.thread_names[f"{pid}:{tid}"] = value

    def _keep_flows(self, chunk: _Chunk, ph_codes: np.ndarray, is_flow: np.ndarray) -> None:
        """Keep the flow events of the chunk, except launch flows (ac2g ...): those duplicate
        correlation ids."""
        cat_values = self.cat_memo.values()
        launch_cats = [i for i, c in enumerate(cat_values) if c.lower() in LAUNCH_FLOW_CATEGORIES]
        keep = is_flow & ~np.isin(chunk.category, launch_cats)
        if keep.any():
            self.flows.append({
                "ph": ph_codes[keep], "cat": chunk.category[keep],
                "id": np.array(chunk.fields.id_texts(keep), dtype=object),
                "pid": chunk.pid[keep], "tid": chunk.tid[keep], "ts": chunk.start_ns[keep],
            })

    def _phase_probes(self, chunk: _Chunk) -> list[_PhaseProbe]:
        """The fields of the chunk's counter and async events that ``_Event`` leaves out, read
        again from its text (only chunks holding such events pay for it). The text decoded as the
        events did, so this cannot fail but on values the typed pass skipped unseen: then every
        event reads as having none (counters skipped as having no value, counted)."""
        try:  # from a copy: a Raw keeps its source buffer exported, and the read buffer must resize
            probes: list[_PhaseProbe] = _PHASE_PROBE_DECODER.decode(chunk.piece())
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            probes = []
        return probes if len(probes) == len(chunk.events) else [_PhaseProbe()] * len(chunk.events)

    def _counter_samples(self, chunk: _Chunk, probes: list[_PhaseProbe], is_counter: np.ndarray) -> None:
        """Keep each numeric arg of the chunk's counter (``C``) events as a sample of series ``arg``
        of counter ``name`` (``name[id]`` when the event has an id). Columnar: the args of all the
        counter events are decoded in one call and flattened with C-level ``map``/``chain``."""
        rows = np.flatnonzero(is_counter)
        chosen = list(compress(probes, is_counter))
        # the slow path moved the args of counter events under COUNTER_ARGS_KEY (see _coerce_event)
        slow = any(map(len, map(_get_counter_args, chosen)))
        raws = list(map(_get_counter_args if slow else _get_args, chosen))
        decoded = [d if isinstance(d, dict) else {} for d in _decode_raws(raws, default={})]
        lengths = np.fromiter(map(len, decoded), dtype=np.int64, count=len(decoded))
        series = np.array(list(chain.from_iterable(decoded)), dtype=object)
        values = list(chain.from_iterable(map(dict.values, decoded)))
        numeric = np.fromiter(map(_NUMBER_TYPES.__contains__, map(type, values)), dtype=bool, count=len(values))
        numbers = np.full(len(values), np.nan)
        try:
            numbers[numeric] = np.fromiter(compress(values, numeric), dtype=np.float64, count=int(numeric.sum()))
        except OverflowError:  # an integer beyond a double: not finite, dropped below
            numbers[numeric] = [float(v) if abs(v) < 2**1023 else np.inf for v in compress(values, numeric)]
        ok = np.isfinite(numbers)
        event_of = np.repeat(np.arange(len(rows)), lengths)
        kept_per_event = np.bincount(event_of[ok], minlength=len(rows))
        has_value = kept_per_event > 0
        self._count("counter", int(has_value.sum()))
        self._count("skipped_counter_no_value", int((~has_value).sum()))
        self._count("coerced_counter_arg_dropped", int((~ok & has_value[event_of]).sum()))
        self._count("counter_samples", int(ok.sum()))
        if not ok.any():
            return
        names = np.array(list(map(_get_name, compress(chunk.events, is_counter))), dtype=object)
        has_id = np.fromiter(map(len, map(_get_id, chosen)), dtype=np.int64, count=len(chosen)) > 0
        if has_id.any():  # the Chrome trace format: an id is part of the counter's name
            ids = np.array(list(map(str, map(_get_id, compress(chunk.events, is_counter)))), dtype=object)
            names[has_id] = names[has_id] + "[" + ids[has_id] + "]"
        at = rows[event_of[ok]]
        self.counters.append({"pid": chunk.pid[at], "tid": chunk.tid[at], "name": names[event_of[ok]],
                              "series": series[ok], "ts_ns": chunk.start_ns[at], "value": numbers[ok]})

    def _keep_async(self, chunk: _Chunk, probes: list[_PhaseProbe], is_async: dict[str, np.ndarray],
                    first_seq: int) -> None:
        """Async events: begins and instants become rows of kind OTHER (duration 0 until paired),
        begins and ends are kept for pairing per (pid, category, id, name) (``_pair_begin_end``)."""
        by_phase = is_async["begin"] | is_async["instant"]
        chunk.kind[by_phase] = int(Kind.OTHER)
        chunk.dur_ns[by_phase] = 0
        self._count("async_instants", int(is_async["instant"].sum()))
        paired = is_async["begin"] | is_async["end"]
        if not paired.any():
            return
        cat_values = np.array(self.cat_memo.values(), dtype=object)
        ids = _async_ids(list(compress(chunk.events, paired)), list(compress(probes, paired)))
        names = np.array(list(map(_get_name, compress(chunk.events, paired))), dtype=object)
        key_of = np.empty(len(chunk.events), dtype=object)
        key_of[paired] = cat_values[chunk.category[paired]] + "\x1f" + ids + "\x1f" + names
        ends = is_async["end"]
        if ends.any():
            self.async_ends.append({"pid": chunk.pid[ends], "key": key_of[ends], "ts": chunk.start_ns[ends],
                                    "seq": first_seq + np.flatnonzero(ends)})
        chunk.async_key = key_of  # the begins' keys, kept with their rows by _keep_rows

    def _ingest_complete(self, chunk: _Chunk, is_complete: np.ndarray, by_phase: np.ndarray | None = None) -> None:
        """Append the columns of the complete (``X``) and instant (``i``/``I``) events of a chunk
        (and ``B``, async begins and ``n``); ``by_phase`` marks rows made kind OTHER by their phase
        (async events): their categories are not counted as unmapped."""
        rows = np.flatnonzero(is_complete)
        m = len(rows)
        every_row = m == chunk.fields.n
        fields = chunk.fields if every_row else chunk.fields.take(rows)

        def take(values: np.ndarray) -> np.ndarray:
            return values if every_row else values[rows]

        kind = take(chunk.kind)
        category = take(chunk.category)
        other = kind == int(Kind.OTHER)
        self._count_unmapped_categories(category[other if by_phase is None else other & ~take(by_phase)])
        self._count("mapped", m)
        name_codes = fields.codes(self.name_memo, "name")
        dur_ns = take(chunk.dur_ns)
        negative = dur_ns < 0
        if negative.any():
            self._count("coerced_negative_dur", int(negative.sum()))
            dur_ns = np.where(negative, 0, dur_ns)
        pid = take(chunk.pid)
        tid = take(chunk.tid)
        external_id = fields.int_arg("external_id", self.counts)
        device, stream = _device_stream(kind, fields.int_arg("device", self.counts),
                                        fields.int_arg("stream", self.counts), pid, tid)
        nbytes = fields.int_arg("bytes", self.counts)
        cols: dict[str, Any] = {
            "kind": kind,
            "category": category,
            "name": name_codes,
            "start_ns": take(chunk.start_ns),
            "dur_ns": dur_ns,
            "pid": pid,
            "tid": tid,
            "device": device.astype(np.int32),
            "stream": stream,
            "correlation": fields.int_arg("correlation", self.counts),
            "external_id": np.where(external_id < 0, fields.int_arg("external_id_old", self.counts), external_id),
            "bytes": pa.array(nbytes, mask=nbytes < 0),
            # not event columns: for the fwdbwd links of traces without fwdbwd flows (_links)
            "sequence_number": fields.int_arg("sequence_number", self.counts),
            "fwd_thread_id": fields.int_arg("fwd_thread_id", self.counts),
        }
        self._launch_geometry(cols, kind, fields, m)
        self._collective_columns(cols, fields, m)
        for key in OP_INPUT_COLUMNS:  # int32 codes in the column's memo, -1 absent
            cols[key] = fields.op_input_codes(key, getattr(self, op_input_memo(key)))
        memcpy_rows = np.flatnonzero(kind == int(Kind.MEMCPY))
        if len(memcpy_rows):
            copy_kinds = np.array([_copy_kind(s) for s in self.name_memo.values()], dtype=object)
            copy_full = np.full(m, None, dtype=object)
            copy_full[memcpy_rows] = copy_kinds[name_codes[memcpy_rows]]
            cols["copy_kind"] = pa.array(copy_full, pa.string())
        for key in _OPTIONAL_COLUMNS:
            if key not in cols:
                # all null: the chunk's row count stands for it (_events_table), not pa.nulls, whose
                # buffers every chunk held through the read (13 MB on the 141 MB benchmark trace)
                cols[key] = m
        for key, value in cols.items():
            self.columns.setdefault(key, []).append(value)
        self.n_rows += m

    def _count_unmapped_categories(self, other_codes: np.ndarray) -> None:
        """Count events whose category maps to no kind, by category name."""
        if len(other_codes) == 0:
            return
        cat_values = self.cat_memo.values()
        for code, count in zip(*np.unique(other_codes, return_counts=True)):
            key = cat_values[code] or "(no category)"
            self.unmapped[key] = self.unmapped.get(key, 0) + int(count)

    def _launch_geometry(self, cols: dict[str, Any], kind: np.ndarray, fields: "_StructFields | _NativeFields",
                         m: int) -> None:
        """Grid and block dimensions of kernels (int32 columns): a dimension outside 0..2**31-1
        is read as absent and counted, never wrapped."""
        kernel_rows = np.flatnonzero(kind == int(Kind.KERNEL))
        for prefix in ("grid", "block"):
            dims = np.full((m, 3), -1, dtype=np.int64)
            if len(kernel_rows):
                dims[kernel_rows] = fields.launch_dims(prefix, kernel_rows)
                beyond = (dims > INT32_MAX) | (dims < -1)
                self._count("clamped_launch_dims", int(beyond.sum()))
                dims[beyond] = -1
            for axis, suffix in enumerate("xyz"):
                col = dims[:, axis]
                cols[f"{prefix}_{suffix}"] = pa.array(col.astype(np.int32), mask=col < 0)

    def _collective_columns(self, cols: dict[str, Any], fields: "_StructFields | _NativeFields", m: int) -> None:
        has_collective = fields.has_text("collective")
        if not has_collective.any():
            return
        chosen = fields.take(np.flatnonzero(has_collective))
        idx = np.flatnonzero(has_collective).tolist()

        def strings(values: Sequence[str | None]) -> pa.Array:
            full = np.full(m, None, dtype=object)
            full[idx] = [v or None for v in values]
            return pa.array(full, pa.string())

        cols["collective"] = strings(chosen.strings("collective"))
        in_nelems = chosen.int_arg("in_nelems", self.counts)
        out_nelems = chosen.int_arg("out_nelems", self.counts)
        nelems_full = np.full(m, -1, dtype=np.int64)
        nelems_full[idx] = np.maximum(in_nelems, out_nelems)
        cols["msg_nelems"] = pa.array(nelems_full, mask=nelems_full < 0)
        dtypes = chosen.strings("dtype")
        cols["msg_dtype"] = strings(dtypes)
        elem_size = np.array([_DTYPE_BYTES.get(d.lower(), -1) for d in dtypes], dtype=np.int64)
        # bytes = elements x element size only where the product fits int64
        fits = nelems_full[idx] <= INT64_MAX // np.maximum(elem_size, 1)
        self._count("clamped_collective_values", int((~fits & (elem_size > 0)).sum()))
        msg_bytes = np.full(m, -1, dtype=np.int64)
        msg_bytes[idx] = np.where((elem_size > 0) & (nelems_full[idx] >= 0) & fits,
                                  np.where(fits, nelems_full[idx], 0) * elem_size, -1)
        cols["msg_bytes"] = pa.array(msg_bytes, mask=msg_bytes < 0)
        group = np.full(m, -1, dtype=np.int64)
        group[idx] = chosen.int_arg("group_size", self.counts)
        too_big = group > INT32_MAX
        self._count("clamped_collective_values", int(too_big.sum()))
        group[too_big] = -1
        cols["group_size"] = pa.array(group.astype(np.int32), mask=group < 0)
        cols["process_group"] = strings(chosen.strings("pg_name"))
        cols["process_group_ranks"] = strings(chosen.ranks_texts())

    def _times_ns(self, fields: "_StructFields | _NativeFields", field: str,
                  piece: Callable[[], bytes]) -> tuple[np.ndarray, np.ndarray]:
        """Exact int64 ns for ``ts`` or ``dur`` of all the events of a chunk (``piece``: its JSON
        text), and each value's state: ``_VALID``, ``_MISSING`` (absent, null or not a number: NaN
        from the decoder's default or the slow path) or ``_OUT_OF_RANGE`` (not finite, or beyond
        ``TIME_LIMIT_NS``); only valid values are converted, so nothing wraps int64."""
        n = fields.n
        us = fields.integer_times(field)
        if us is not None:  # older traces: integers, exact in int64
            valid = (us > -TIME_LIMIT_US) & (us < TIME_LIMIT_US)
            if valid.all():
                return us * 1000, np.zeros(n, dtype=np.int8)
        values = fields.float_times(field)
        finite = np.isfinite(values)
        valid = finite & (np.abs(values) < TIME_LIMIT_US)
        state = np.where(valid, _VALID, np.where(np.isnan(values), _MISSING, _OUT_OF_RANGE)).astype(np.int8)
        ns = np.zeros(n, dtype=np.int64)
        rest = valid  # values converted here: those the native decoder did not read exactly
        exact = fields.exact_times(field)
        if exact is not None:
            ns, rest = exact[0].copy(), valid & ~exact[1]  # exact rows are valid; the others hold 0
        if rest.all():
            ns, ambiguous, where = *microseconds_to_ns(values), None
        else:
            where = np.flatnonzero(rest)
            ns[where], ambiguous = microseconds_to_ns(values[where])
        n_ambiguous = int(ambiguous.sum())
        if n_ambiguous:
            # a float64 cannot tell these decimals apart: re-read them from the JSON text
            rows = np.flatnonzero(ambiguous) if where is None else where[ambiguous]
            ns[rows] = decimal_text_to_ns(fields.time_texts(field, rows, piece))
            self.imprecise_ts += n_ambiguous
        return ns, state

    def _count(self, key: str, n: int) -> None:
        if n:
            self.counts[key] = self.counts.get(key, 0) + n

    # -- assembling ---------------------------------------------------------------------
    def _build(self, threads: int = 1) -> Trace:
        """The Trace (``threads``: see ``_tables``)."""
        meta = {**self.head, **self.tail}
        base_time_ns = self._base_time()
        raw_dist = meta.get("distributedInfo")
        dist: dict[str, Any] = raw_dist if isinstance(raw_dist, dict) else {}
        rank, rank_source = -1, "unknown"
        dist_rank = dist.get("rank")
        if isinstance(dist_rank, int) and not isinstance(dist_rank, bool) and 0 <= dist_rank <= INT32_MAX:
            rank, rank_source = int(dist_rank), "distributedInfo"
        else:
            if dist_rank is not None:
                self.warnings.append("distributedInfo.rank is not a rank (an integer 0..2**31-1); ignored")
            from_name = rank_from_filename(self.path)
            if from_name is not None and from_name <= INT32_MAX:
                rank, rank_source = from_name, "file name"
        world_size = dist.get("world_size") if isinstance(dist.get("world_size"), int) else None
        version = meta.get("schemaVersion")
        with timed(self._clock, "build: pair begins and ends"):
            drop = self._pair_begin_end()
        info = RankInfo(
            rank=rank,
            source_path=str(self.path),
            source_format="kineto",
            format_version=f"schemaVersion {version}" if version is not None else "unversioned (pre-2021 format)",
            rank_source=rank_source,
            world_size=world_size,
            devices=self._devices(meta.get("deviceProperties")),
            distributed_info=dist,
            process_names=self.process_names,
            thread_names=self.thread_names,
            base_time_ns=base_time_ns,
            raw_metadata={k: v for k, v in meta.items() if k not in ("deviceProperties", "distributedInfo")},
            event_counts=dict(self.counts),
            activity_dropped={k: self.counts[k] for k in ACTIVITY_LOSS_REASONS if self.counts.get(k)},
            unmapped=dict(self.unmapped),
            warnings=list(self.warnings) + fate_warnings(self.counts, self.unsupported_phases),
        )
        if self.imprecise_ts:
            info.event_counts["times_reread_exactly"] = self.imprecise_ts
        trace = self._tables(rank, base_time_ns, drop, threads)
        trace.ranks = {rank: info}
        info.warnings.extend(self.autograd_warnings)
        return trace

    def _tables(self, rank: int, base_time_ns: int, drop: np.ndarray, threads: int) -> Trace:
        """The Trace's tables (its ranks left to the caller). ``threads`` > 1 (a parallel parse,
        which may use that many cores): the CPU-op links, the largest part of the work here, are
        made by a second thread from the first columns of the events table while this one makes
        the rest (numpy releases the GIL in the sorts and searches they are made of); the tables
        are the same either way."""
        helper = ThreadPoolExecutor(1, thread_name_prefix="traceview-links") if threads > 1 else None
        started: list[Future[list[pa.Table]]] = []

        def start_cpu_op_links(columns: dict[str, np.ndarray]) -> None:
            if helper is not None:
                started.append(helper.submit(self._helper_cpu_op_links, columns, rank))

        try:
            with timed(self._clock, "build: events table"):
                events = self._events_table(rank, base_time_ns, drop, start_cpu_op_links if helper else None)
            with timed(self._clock, "build: steps, memory, counters"):
                steps = steps_from_annotations(events)
                memory, counters = self._memory_table(rank, base_time_ns), self._counters_table(rank, base_time_ns)
            links = self._links(events, rank, drop, started[0] if started else None)
        finally:
            if helper is not None:
                helper.shutdown(wait=True, cancel_futures=True)
        return Trace(events=events, links=links, ranks={}, steps=steps, warnings=[], memory=memory, counters=counters)

    def _devices(self, properties: Any) -> list[DeviceInfo]:
        """``deviceProperties``: a list of objects; anything else, or an entry whose id is not an
        integer, is left out with a warning."""
        if properties is None:
            return []
        if not isinstance(properties, list):
            self.warnings.append("deviceProperties is not a list; ignored")
            return []
        devices: list[DeviceInfo] = []
        odd = 0
        for dev in properties:
            dev_id = dev.get("id", len(devices)) if isinstance(dev, dict) else None
            if not isinstance(dev_id, int) or isinstance(dev_id, bool) or not 0 <= dev_id <= INT32_MAX:
                odd += 1
                continue
            major, minor = dev.get("computeMajor"), dev.get("computeMinor")
            devices.append(DeviceInfo(
                id=dev_id, name=str(dev.get("name", "")), sm_count=_plain_int(dev.get("numSms")),
                total_memory_bytes=_plain_int(dev.get("totalGlobalMem")),
                compute_capability=f"{major}.{minor}" if major is not None else None,
                extra={k: v for k, v in dev.items() if k not in ("id", "name", "numSms", "totalGlobalMem")},
            ))
        if odd:
            self.warnings.append(f"{odd} deviceProperties entries are not objects with an integer id; ignored")
        return devices

    def _pair_begin_end(self) -> np.ndarray:
        """Pair ``B``/``E`` events per thread, and async begins/ends (``b``/``e``, ``S``/``F``) per
        (pid, category, id, name), in stack order (the Chrome trace format's rule); sets the
        duration of each paired begin row and returns the rows of begins that never end (dropped,
        counted). Vectorised (``stack_pairs``): a hostile file may hold millions."""
        be_rows, be_durs, be_drop = self._pair_kind(self.begins, self.ends, "tid", "")
        as_rows, as_durs, as_drop = self._pair_kind(self.async_begins, self.async_ends, "key", "async_")
        self.dur_fixes = (np.concatenate([be_rows, as_rows]), np.concatenate([be_durs, as_durs]))
        return np.sort(np.concatenate([be_drop, as_drop]))

    def _pair_kind(self, begin_parts: list[dict[str, np.ndarray]], end_parts: list[dict[str, np.ndarray]],
                   track_key: str, prefix: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Pair one kind of begins and ends on tracks (pid, ``track_key``); counts ``<prefix>paired_end``
        and ``skipped_<prefix>unmatched_begin/end``. Returns (paired begin rows, their durations,
        rows of begins never closed)."""
        none = np.zeros(0, dtype=np.int64)
        begins, ends = _concat(begin_parts), _concat(end_parts)
        if not begins and not ends:
            return none, none, none
        parts = [p for p in (begins, ends) if p]
        keys = {k: np.concatenate([p[k] for p in parts]) for k in ("pid", track_key, "ts", "seq")}
        n_begin = len(begins["row"]) if begins else 0
        row = np.concatenate([begins["row"] if begins else none, np.full(len(keys["ts"]) - n_begin, -1, np.int64)])
        track = _track_codes(keys["pid"], keys[track_key])
        opened, closed, unmatched_end, never = stack_pairs(track, keys["ts"], keys["seq"], row >= 0)
        self._count(f"{prefix}paired_end", len(closed))
        self._count(f"skipped_{prefix}unmatched_end", len(unmatched_end))
        self._count(f"skipped_{prefix}unmatched_begin", len(never))
        self._count("mapped", -len(never))
        return row[opened], keys["ts"][closed] - keys["ts"][opened], row[never]

    def _counters_table(self, rank: int, base_time_ns: int) -> pa.Table:
        if not self.counters:
            return empty_counters()
        cols: dict[str, Any] = _concat(self.counters)
        cols["ts_ns"] = cols["ts_ns"] + base_time_ns
        cols["rank"] = np.full(cols["ts_ns"].size, rank, dtype=np.int32)
        return make_counters_table(cols)

    def _memory_table(self, rank: int, base_time_ns: int) -> pa.Table:
        if not self.memory:
            return empty_memory()
        cols = {key: np.concatenate([part[key] for part in self.memory]) for key in self.memory[0]}
        cols["ts_ns"] = cols["ts_ns"] + base_time_ns
        cols["rank"] = np.full(cols["ts_ns"].size, rank, dtype=np.int32)
        # -1 marks an absent total or address (Kineto before PyTorch 1.10 wrote only Bytes)
        masks = {key: cols[key] < 0 for key in ("total_allocated_bytes", "total_reserved_bytes", "addr")}
        return make_memory_table(cols, masks)

    def _events_table(self, rank: int, base_time_ns: int, drop: np.ndarray,
                      link_columns: Callable[[dict[str, np.ndarray]], None] | None = None) -> pa.Table:
        """The events table; ``link_columns`` is given its ``_CPU_OP_COLUMNS`` (kind as codes) as
        soon as they are made, before the other columns (for a helper thread)."""
        n = self.n_rows
        if n == 0:
            return make_events_table({}, 0)
        # each column's chunks are let go as the column is made (every one but the autograd ones,
        # which _derived_fwdbwd reads): else the chunks (~60 MB on the 141 MB benchmark trace) and
        # the table were all held at once, the parse's peak
        cols: dict[str, Any] = {key: np.concatenate(self.columns.pop(key)) for key in _CPU_OP_COLUMNS}
        cols["start_ns"] += base_time_ns
        paired_rows, paired_durs = self.dur_fixes
        cols["dur_ns"][paired_rows] = paired_durs
        if link_columns is not None:
            link_columns(_without_rows({key: cols[key] for key in _CPU_OP_COLUMNS}, drop))
        cols["kind"] = kind_array(cols["kind"])
        for key in [key for key in self.columns if key not in AUTOGRAD_ARG_COLUMNS]:
            parts = self.columns.pop(key)
            if key in ("category", "name"):
                memo = self.cat_memo if key == "category" else self.name_memo
                cols[key] = memo.dictionary_array(np.concatenate(parts))
            elif key in OP_INPUT_COLUMNS:
                codes = np.concatenate(parts)
                if (codes < 0).all():
                    continue  # no op recorded it: make_events_table's nulls
                # the dictionary dictionary_encode() makes: the texts in the order first seen
                cols[key] = getattr(self, op_input_memo(key)).dictionary_array(codes, mask=codes < 0)
            elif isinstance(parts[0], np.ndarray):
                cols[key] = np.concatenate(parts)
            elif all(isinstance(part, int) or part.null_count == len(part) for part in parts):
                continue  # all null (most optional columns of most files): make_events_table's nulls
            else:
                arrays = [pa.nulls(part, _OPTIONAL_COLUMNS[key]) if isinstance(part, int) else part for part in parts]
                cols[key] = pa.chunked_array(arrays).combine_chunks() if not pa.types.is_dictionary(arrays[0].type) \
                    else pa.chunked_array(arrays).unify_dictionaries().combine_chunks()
        cols["rank"] = np.full(n, rank, dtype=np.int32)
        table = make_events_table(cols, n)
        if len(drop):
            keep = np.ones(n, dtype=bool)
            keep[drop] = False
            table = table.filter(pa.array(keep))
        return table

    def _links(self, events: pa.Table, rank: int, drop: np.ndarray,
               cpu_op: "Future[list[pa.Table]] | None" = None) -> pa.Table:
        """The links of the events; ``cpu_op``: the CPU-op links being made by a helper thread
        (``_helper_cpu_op_links``), else they are made here."""
        if events.num_rows == 0:
            return empty_links()
        kind = _kind_codes(events)
        correlation = events.column("correlation").to_numpy()
        tables = []
        with timed(self._clock, "build: links, launch"):
            # launch -> GPU activity: one file is one process, so correlation alone is the key
            api = np.flatnonzero((kind == int(Kind.RUNTIME)) & (correlation >= 0))
            gpu = np.flatnonzero(np.isin(kind, _ACTIVITY_OR_SYNC) & (correlation >= 0))
            left, right = join_on_keys([correlation[api]], [correlation[gpu]])
            if len(left):
                tables.append(make_links_table(np.full(len(left), rank), "launch",
                                               _one_category("correlation", len(left)), api[left], gpu[right]))
        with timed(self._clock, "build: links, flows"):
            flow_table = self._flow_links(events, rank, kind)
        with timed(self._clock, "build: links, fwdbwd"):
            derived = self._derived_fwdbwd(events, rank, kind, drop, flow_table)
        if cpu_op is None:
            with timed(self._clock, "build: links, cpu_op"):
                tables.extend(self._cpu_op_links(_link_columns(events), rank))
        else:
            with timed(self._clock, "build: links, wait for the helper thread"):
                tables.extend(cpu_op.result())
        tables.extend(table for table in (flow_table, derived) if table is not None)
        if not tables:
            return empty_links()
        with timed(self._clock, "build: links, concatenate"):
            return pa.concat_tables(tables).unify_dictionaries().combine_chunks()

    def _helper_cpu_op_links(self, columns: dict[str, np.ndarray], rank: int) -> list[pa.Table]:
        """``_cpu_op_links`` in a helper thread, while ``_events_table`` makes the other columns."""
        with timed(self._clock, "build: links, cpu_op (helper thread)"):
            return self._cpu_op_links(columns, rank)

    @staticmethod
    def _cpu_op_links(columns: dict[str, np.ndarray], rank: int) -> list[pa.Table]:
        """Runtime call -> the CPU op (or annotation) that issued it (``columns``: the events'
        ``_CPU_OP_COLUMNS``, kind as its codes).

        By ``External id`` when the op with that id encloses the call on the same thread (some
        traces reuse the correlation id as the runtime's External id, which would point at an
        unrelated op); otherwise the innermost op enclosing the call on its thread.
        """
        kind, external = columns["kind"], columns["external_id"]
        start = columns["start_ns"]
        end = start + columns["dur_ns"]
        thread = hash_keys([columns["pid"], columns["tid"]])
        is_op = np.isin(kind, [int(Kind.CPU_OP), int(Kind.ANNOTATION)])
        runtime = np.flatnonzero(kind == int(Kind.RUNTIME))
        tables = []
        linked = np.zeros(len(runtime), dtype=bool)
        ops = np.flatnonzero(is_op & (external >= 0))
        has_id = np.flatnonzero(external[runtime] >= 0)
        left, right = join_on_keys([external[ops]], [external[runtime[has_id]]])
        op_rows, rt_rows = ops[left], runtime[has_id][right]
        encloses = (
            (thread[op_rows] == thread[rt_rows]) & (start[op_rows] <= start[rt_rows]) & (end[rt_rows] <= end[op_rows])
        )
        op_rows, rt_rows = op_rows[encloses], rt_rows[encloses]
        if len(rt_rows):
            tables.append(make_links_table(np.full(len(rt_rows), rank), "cpu_op",
                                           _one_category("external_id", len(rt_rows)), op_rows, rt_rows))
            linked[np.searchsorted(runtime, np.unique(rt_rows))] = True
        pending = runtime[~linked]
        all_ops = np.flatnonzero(is_op)
        if len(pending) and len(all_ops):
            from traceview.intervals import NestedIndex  # here: see _track_codes

            index = NestedIndex(thread[all_ops], start[all_ops], end[all_ops])
            found = index.covering(thread[pending], start[pending], end[pending])
            ok = found >= 0
            if ok.any():
                n_found = int(ok.sum())
                tables.append(make_links_table(np.full(n_found, rank), "cpu_op", _one_category("enclosing", n_found),
                                               all_ops[found[ok]], pending[ok]))
        return tables

    def _derived_fwdbwd(self, events: pa.Table, rank: int, kind: np.ndarray, drop: np.ndarray,
                        flow_table: pa.Table | None) -> pa.Table | None:
        """``fwdbwd`` links from the ops' autograd sequence numbers (``kineto_autograd``) when the
        file has no ``fwdbwd`` flow of its own (PyTorch before ~1.11 wrote none)."""
        import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
        if flow_table is not None and pc.any(pc.equal(flow_table.column("category").cast(pa.string()),
                                                      "fwdbwd")).as_py():
            return None
        seq, fwd = (np.concatenate(self.columns.get(key) or [np.empty(0, np.int64)])
                    for key in ("sequence_number", "fwd_thread_id"))
        if len(drop) and len(seq) == self.n_rows:  # the rows _events_table dropped
            keep = np.ones(self.n_rows, dtype=bool)
            keep[drop] = False
            seq, fwd = seq[keep], fwd[keep]
        if len(seq) != events.num_rows or not (fwd > 0).any():
            return None
        start, tid = events.column("start_ns").to_numpy(), events.column("tid").to_numpy()
        found = derive_fwdbwd_links(np.arange(events.num_rows), kind == int(Kind.CPU_OP), tid,
                                    start, start + events.column("dur_ns").to_numpy(), seq, fwd)
        self.autograd_warnings = autograd_warnings(found)
        if len(found.src_row) == 0:
            return None
        return make_links_table(np.full(len(found.src_row), rank), "flow", _one_category("fwdbwd", len(found.src_row)),
                                found.src_row, found.dst_row)

    def _flow_links(self, events: pa.Table, rank: int, kind: np.ndarray) -> pa.Table | None:
        """Resolve non-launch flows (e.g. ``fwdbwd``): each flow point binds to the slice that
        starts at the same instant on the same thread; ``s`` and ``f`` pair up by (category, id)."""
        if not self.flows:
            return None
        flows = {key: np.concatenate([f[key] for f in self.flows]) for key in self.flows[0]}
        ph_values = np.array(self.ph_memo.values(), dtype=object)
        cat_values = self.cat_memo.values()
        ph = ph_values[flows["ph"]]
        fts = flows["ts"] + self._base_time()
        start = events.column("start_ns").to_numpy()
        # only slices that start at some flow instant can match: prefilter, then join small sets
        candidates = np.flatnonzero((kind != int(Kind.OTHER)) & np.isin(start, fts))
        pid = events.column("pid").to_numpy()[candidates]
        tid = events.column("tid").to_numpy()[candidates]
        left, right = join_on_keys([flows["pid"], flows["tid"], fts], [pid, tid, start[candidates]])
        row_of_flow = np.full(len(fts), -1, dtype=np.int64)
        row_of_flow[left] = candidates[right]  # several slices at one instant: the last (innermost) wins
        starts = np.flatnonzero(ph == "s")
        finishes = np.flatnonzero(ph == "f")
        ids = _flow_ids(flows["id"])
        if np.isnan(ids).any() or (np.abs(ids) >= 2.0**62).any():  # string ids: join on text
            keys = np.array([f"{c}|{i}" for c, i in zip(flows["cat"].tolist(), flows["id"].tolist())], dtype=object)
            s_idx, f_idx = join_on_keys([keys[starts]], [keys[finishes]])
        else:
            ids = ids.astype(np.int64)
            s_idx, f_idx = join_on_keys([flows["cat"][starts], ids[starts]], [flows["cat"][finishes], ids[finishes]])
        src = row_of_flow[starts[s_idx]]
        dst = row_of_flow[finishes[f_idx]]
        ok = (src >= 0) & (dst >= 0)
        unresolved = int(len(src) - ok.sum())
        if unresolved:
            self.counts["flows_unresolved"] = unresolved
        if not ok.any():
            return None
        # the categories dictionary-encoded as dictionary_encode() would: values in first-seen order
        codes = flows["cat"][starts[s_idx][ok]]
        used, first = np.unique(codes, return_index=True)
        used = used[np.argsort(first)]
        local = np.zeros(len(cat_values), dtype=np.int32)
        local[used] = np.arange(len(used), dtype=np.int32)
        categories = pa.DictionaryArray.from_arrays(pa.array(local[codes], pa.int32()),
                                                    pa.array([cat_values[c] for c in used.tolist()], pa.string()))
        return make_links_table(np.full(int(ok.sum()), rank), "flow", categories, src[ok], dst[ok])

    def _base_time(self) -> int:
        """``baseTimeNanoseconds``, or 0 with a warning when it is not a time within +-2**61 ns
        (beyond it, start times would overflow int64)."""
        meta = {**self.head, **self.tail}
        value = meta.get("baseTimeNanoseconds")
        if value is None:
            return 0
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < TIME_LIMIT_NS:
            return int(value)
        warning = "baseTimeNanoseconds is not a time within +-2**61 ns; ignored (times are relative)"
        if warning not in self.warnings:
            self.warnings.append(warning)
        return 0


#: Optional columns a chunk may lack; filled with nulls so every chunk has every column.
_OPTIONAL_COLUMNS = {
    "collective": pa.string(), "msg_nelems": pa.int64(), "msg_bytes": pa.int64(), "msg_dtype": pa.string(),
    "group_size": pa.int32(), "process_group": pa.string(), "process_group_ranks": pa.string(),
    "copy_kind": pa.string(),
}


def op_input_memo(column: str) -> str:
    """The reader attribute holding the memo of one of ``OP_INPUT_COLUMNS`` (its codes' strings)."""
    return f"{column}_memo"

_DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1,
    "byte": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "complexfloat": 8,
    "complexdouble": 16,
}


class _Codes(dict):
    """String -> dense integer code, assigned on first sight. ``codes()`` maps a whole column in
    C (dict lookups through ``map``), about twice as fast as building an Arrow string array and
    dictionary-encoding it."""

    def __missing__(self, key: str) -> int:
        code = len(self)
        self[key] = code
        return code

    def codes(self, values: Iterator[str], n: int) -> np.ndarray:
        return np.fromiter(map(self.__getitem__, values), dtype=np.int32, count=n)

    def values(self) -> list[str]:  # type: ignore[override]
        return list(self.keys())

    def dictionary_array(self, codes: np.ndarray, mask: np.ndarray | None = None) -> pa.DictionaryArray:
        """``codes`` (``mask``: True where null) as a dictionary array of the memo's strings."""
        return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=mask),
                                              pa.array(self.values(), pa.string()))

    def codes_of_local(self, local: np.ndarray, strings: list[str]) -> np.ndarray:
        """Codes for ``strings[local]``: new strings get codes in the order of their first row,
        as ``codes()`` would give them reading the rows one by one (the memo's order is the
        dictionary's order in the tables)."""
        local = np.ascontiguousarray(local, dtype=np.int32)
        used = _first_seen(local, len(strings)) if _first_seen is not None else []
        table = np.zeros(len(strings), dtype=np.int32)
        table[used] = [self[strings[code]] for code in used]  # new strings get the next codes, in order
        return table[local]


#: Chunks decoded by the native column decoder, and chunks it declined (msgspec decoded them);
#: tests read it to check the native path is taken.
NATIVE_CHUNKS = {"native": 0, "fallback": 0}


class _StructFields:
    """The fields of a chunk's events decoded by msgspec into ``_Event`` structs (the reference
    path), read a column at a time with C-level ``map(attrgetter)``."""

    def __init__(self, events: list[_Event], args: Sequence[_Args] | None = None) -> None:
        """``args`` alone (``events`` empty): fields of those args only (the allocator's)."""
        self.events = events
        self.n = len(events) if args is None else len(args)
        self._args = args

    def structs(self) -> list[_Event]:
        return self.events

    def args(self) -> Sequence[_Args]:
        if self._args is None:
            self._args = list(map(_get_args, self.events))
        return self._args

    def take(self, rows: np.ndarray) -> "_StructFields":
        return _StructFields([self.events[i] for i in rows.tolist()])

    def codes(self, memo: _Codes, field: str) -> np.ndarray:
        return memo.codes(map(attrgetter(field), self.events), self.n)

    def strings(self, field: str, mask: np.ndarray | None = None) -> list[str]:
        """An event field (ph/cat/name) or a string arg (collective, dtype, pg_name) of each event."""
        if field in ("ph", "cat", "name"):
            return list(map(attrgetter(field), self.events if mask is None else compress(self.events, mask)))
        return list(map(attrgetter(field), self.args() if mask is None else compress(self.args(), mask)))

    def ranks_texts(self) -> list[str | None]:
        return [_ranks_text(a.pg_ranks) for a in self.args()]

    def has_text(self, field: str) -> np.ndarray:
        """Whether each event's string arg ``field`` is non-empty."""
        return np.fromiter(map(len, self.strings(field)), dtype=np.int64, count=self.n) > 0

    def metadata(self, mask: np.ndarray) -> list[tuple[str, Any, Any, str]]:
        return [(ev.name, ev.pid, ev.tid, ev.args.name) for ev in compress(self.events, mask)]

    def id_texts(self, mask: np.ndarray) -> list[str]:
        return list(map(str, map(_get_id, compress(self.events, mask))))

    def int_arg(self, field: str, counts: dict[str, int]) -> np.ndarray:
        return _int_arg(self.args(), field, self.n, counts)

    def op_inputs(self, field: str) -> np.ndarray | None:
        """One of ``OP_INPUT_COLUMNS`` per event as canonical JSON text (None: absent), or None
        when no event has it."""
        values = list(map(attrgetter(field), self.args()))
        if field == "input_dims":
            old = list(map(attrgetter("input_dims_old"), self.args()))
            values = [v if v is not None else o for v, o in zip(values, old)]
        present = np.fromiter(map(_is_not_none, values), dtype=bool, count=self.n)
        if not present.any():
            return None
        texts = np.full(self.n, None, dtype=object)
        texts[present] = [msgspec.json.encode(v).decode() for v in compress(values, present)]
        return texts

    def op_input_codes(self, field: str, memo: _Codes) -> np.ndarray:
        """``op_inputs`` as int32 codes in ``memo`` (-1: absent), assigned in row order."""
        codes = np.full(self.n, -1, dtype=np.int32)
        texts = self.op_inputs(field)
        if texts is not None:
            present = np.fromiter(map(_is_not_none, texts), dtype=bool, count=self.n)
            codes[present] = memo.codes(iter(texts[present]), int(present.sum()))
        return codes

    @staticmethod
    def exact_times(field: str) -> tuple[np.ndarray, np.ndarray] | None:  # noqa: ARG004
        """Exact ns read from the text by the native decoder: none here (``microseconds_to_ns``)."""
        return None

    def integer_times(self, field: str) -> np.ndarray | None:
        """``ts``/``dur`` as int64 when every event has an integer within int64, else None."""
        raw_values = list(map(attrgetter(field), self.events))
        if set(map(type, raw_values)) != {int}:
            return None
        try:
            return np.fromiter(raw_values, dtype=np.int64, count=self.n)
        except OverflowError:
            return None

    def float_times(self, field: str) -> np.ndarray:
        raw_values = list(map(attrgetter(field), self.events))
        try:
            return np.array(raw_values, dtype=np.float64)
        except OverflowError:  # an integer beyond a double's range
            return np.array([v if isinstance(v, float) or abs(v) < 2**1000 else np.inf for v in raw_values],
                            dtype=np.float64)

    @staticmethod
    def time_texts(field: str, rows: np.ndarray, piece: Callable[[], bytes]) -> list[bytes]:
        """The JSON texts of ``ts``/``dur`` of some events, read again from the chunk's text."""
        raw = _RAW_TIMES_DECODER.decode(piece())
        get = attrgetter(field)
        return [bytes(get(raw[r])) for r in rows.tolist()]

    def launch_dims(self, prefix: str, rows: np.ndarray) -> np.ndarray:
        """grid or block of some events as (rows, 3) int64 (``_three_dims``)."""
        args = self.args()
        values = [getattr(args[i], prefix) for i in rows.tolist()]
        try:
            return np.array(values, dtype=np.int64).reshape(len(values), 3)
        except (ValueError, OverflowError):  # not 3-dimensional, or beyond int64: row by row
            return np.asarray([_three_dims(v) for v in values], dtype=np.int64)


#: the native decoder's dense columns that are not int64
_NATIVE_DTYPES = {"ph": np.int32, "cat": np.int32, "name": np.int32, "ts_kind": np.uint8, "dur_kind": np.uint8,
                  "ts_length": np.uint16, "dur_length": np.uint16, "ts_exact": np.uint8, "dur_exact": np.uint8}
#: its sparse columns (a value for each event that has the field), their dtypes and defaults
_NATIVE_SPARSE = {
    **{key: (np.int64, -1) for key in ("id", "external_id", "external_id_old", "correlation", "stream", "device",
                                       "bytes", "in_nelems", "out_nelems", "group_size", "sequence_number",
                                       "fwd_thread_id", "total_allocated",
                                       "total_reserved", "device_id", "device_type", "addr")},
    "mem_bytes": (np.int64, 0),
    # codes into the chunk's strings: -1 a number (ids), 0 the empty string (string args: their default)
    **{key: (np.int32, -1) for key in ("pid_text", "tid_text", "id_text")},
    **{key: (np.int32, 0) for key in ("collective", "dtype", "pg_name", "pg_ranks", "arg_name")},
    # codes of the raw JSON texts of an op's recorded inputs, -1 absent
    **{key: (np.int32, -1) for key in (*OP_INPUT_COLUMNS, "input_dims_old")},
    "grid_length": (np.int32, 0), "block_length": (np.int32, 0),
}
#: columns with one value per event (grid and block are flat: ``grid_length`` values per event)
_NATIVE_FLAT = ("grid", "block")
#: phases whose handling reads struct fields the native decoder does not provide
_STRUCT_ONLY_PHASES = frozenset(COUNTER_PHASES + ASYNC_PHASES)
#: what ``_Event`` holds for an absent ts (NaN: skipped) and dur (the integer 0)
_ABSENT_TIME = {"ts": np.nan, "dur": 0.0}


def _native_column(result: dict[str, Any], key: str) -> np.ndarray:
    """One column of the native decoder's result, a value per event of the chunk: sparse columns
    filled with their defaults; ``ts``/``dur`` as ``<field>_int``, ``<field>_is_int`` and
    ``<field>_float``, what the struct field holds (an int, or a float; absent: the struct's
    default); ``grid_start``/``block_start``: where each event's values start in the flat column."""
    n = int(result["n"])
    if key in _NATIVE_SPARSE:
        dtype, default = _NATIVE_SPARSE[key]
        column = np.full(n, default, dtype=dtype)
        column[np.frombuffer(result[f"{key}_index"], dtype=np.int32)] = np.frombuffer(result[f"{key}_value"], dtype)
        return column
    field, _, part = key.partition("_")
    if field in _ABSENT_TIME and part in ("int", "is_int", "float"):
        kind = np.frombuffer(result[f"{field}_kind"], dtype=np.uint8)
        raw = np.frombuffer(result[f"{field}_value"], dtype=np.int64)
        if part == "is_int":
            return kind == 1 if field == "ts" else kind != 2  # an absent dur is the integer 0
        if part == "int":
            return np.where(kind == 1, raw, 0)
        # ints as the nearest double, as float(int) makes them; absent ones the struct's default
        return np.where(kind == 2, raw.view(np.float64), np.where(kind == 1, raw.astype(np.float64),
                                                                  _ABSENT_TIME[field]))
    if part == "start" and field in _NATIVE_FLAT:
        lengths = _native_column(result, f"{field}_length")
        return np.cumsum(lengths, dtype=np.int64) - lengths
    return np.frombuffer(result[key], dtype=_NATIVE_DTYPES.get(key, np.int64))


class _NativeFields:
    """The fields of a chunk's events as columns filled by the native decoder (``_kineto_columns``):
    strings as int32 codes into the chunk's ``strings``, numbers as int64/float64 arrays. Answers
    what ``_StructFields`` answers, with the same values. Columns are made when first asked for,
    for the whole chunk (shared by the fields of its row subsets, ``take``)."""

    def __init__(self, result: dict[str, Any], buf: bytearray, rows: np.ndarray | None = None,
                 whole: dict[str, np.ndarray] | None = None) -> None:
        self.result = result
        self.strings_list: list[str] = result["strings"]
        self.buf = buf
        self.rows = rows
        self.n = int(result["n"]) if rows is None else len(rows)
        self.whole: dict[str, np.ndarray] = {} if whole is None else whole
        self.mine: dict[str, np.ndarray] = {}

    @classmethod
    def of(cls, result: dict[str, Any], buf: bytearray) -> "_NativeFields | None":
        """The decoder's result as fields, or None for a chunk holding events whose handling
        needs structs (counters, async events)."""
        strings: list[str] = result["strings"]
        phases = {strings[c] for c in np.unique(np.frombuffer(result["ph"], dtype=np.int32)).tolist()}
        return None if phases & _STRUCT_ONLY_PHASES else cls(result, buf)

    def column(self, key: str, rows: bool = True) -> np.ndarray:
        """A column for this subset's rows (``rows=False``: for the whole chunk)."""
        whole = self.whole.get(key)
        if whole is None:
            whole = self.whole[key] = _native_column(self.result, key)
        if self.rows is None or not rows:
            return whole
        mine = self.mine.get(key)
        if mine is None:
            mine = self.mine[key] = whole[self.rows]
        return mine

    @property
    def string_array(self) -> np.ndarray:
        if "strings" not in self.whole:
            self.whole["strings"] = np.array(self.strings_list, dtype=object)
        return self.whole["strings"]

    def structs(self) -> list[_Event]:
        raise RuntimeError("the native decoder declines chunks with counter or async events")

    def take(self, rows: np.ndarray) -> "_NativeFields":
        return _NativeFields(self.result, self.buf, rows if self.rows is None else self.rows[rows], self.whole)

    def codes(self, memo: _Codes, field: str) -> np.ndarray:
        return memo.codes_of_local(self.column(field), self.strings_list)

    def strings(self, field: str, mask: np.ndarray | None = None) -> list[str]:
        codes = self.column(field)
        return self.string_array[codes if mask is None else codes[mask]].tolist()

    def ranks_texts(self) -> list[str | None]:
        return [text or None for text in self.string_array[self.column("pg_ranks")].tolist()]

    def has_text(self, field: str) -> np.ndarray:
        """Whether each event's string arg ``field`` is non-empty."""
        if "lengths" not in self.whole:
            self.whole["lengths"] = np.fromiter(map(len, self.strings_list), dtype=np.int64,
                                                count=len(self.strings_list))
        return self.whole["lengths"][self.column(field)] > 0

    def values(self, field: str, mask: np.ndarray) -> list[int | str]:
        """pid, tid or id of some events as decoded: an int, or the text it was written as."""
        values: list[int | str] = self.column(field)[mask].tolist()
        texts = self.column(f"{field}_text")[mask]
        for i in np.flatnonzero(texts >= 0).tolist():  # text ids: a handful per file
            values[i] = self.strings_list[texts[i]]
        return values

    def metadata(self, mask: np.ndarray) -> list[tuple[str, Any, Any, str]]:
        return list(zip(self.strings("name", mask), self.values("pid", mask), self.values("tid", mask),
                        self.strings("arg_name", mask)))

    def id_texts(self, mask: np.ndarray) -> list[str]:
        return list(map(str, self.values("id", mask)))

    def int_arg(self, field: str, counts: dict[str, int]) -> np.ndarray:  # noqa: ARG002 (none beyond int64)
        return self.column(field)

    def op_input_codes(self, field: str, memo: _Codes) -> np.ndarray:
        """As ``_StructFields.op_input_codes``: only the distinct raw texts are made canonical,
        and codes go to their canonical texts in the order of their first row."""
        codes = self.column(field)
        if field == "input_dims":
            codes = np.where(codes >= 0, codes, self.column("input_dims_old"))
        out = np.full(self.n, -1, dtype=np.int32)
        present = codes >= 0
        if not present.any():
            return out
        local = codes[present]
        texts = list(self.strings_list)
        for code in np.unique(local).tolist():
            texts[code] = canonical_json(texts[code])
        out[present] = memo.codes_of_local(local, texts)
        return out

    def thread_ids(self, string_ids: dict[str, int]) -> tuple[np.ndarray, np.ndarray, int]:
        """pid and tid as ``_KinetoFile._thread_ids`` makes them, and how many were numbers beyond
        int64 written as text: texts get ids (``_string_id``) in the order first seen, pid before tid."""
        pid, tid = self.column("pid"), self.column("tid")
        texts = np.stack([self.column("pid_text"), self.column("tid_text")], axis=1).ravel()
        written = texts >= 0
        if not written.any():
            return pid, tid, 0
        used, first = np.unique(texts[written], return_index=True)
        ids = np.zeros(len(self.strings_list), dtype=np.int64)
        huge = np.zeros(len(self.strings_list), dtype=np.int64)
        for code in used[np.argsort(first)].tolist():
            ids[code], huge[code] = _string_id(self.strings_list[code].strip(), string_ids)
        both = np.stack([pid, tid], axis=1).ravel().copy()
        both[written] = ids[texts[written]]
        return both[0::2].copy(), both[1::2].copy(), int(huge[texts[written]].sum())

    def integer_times(self, field: str) -> np.ndarray | None:
        return self.column(f"{field}_int") if self.column(f"{field}_is_int").all() else None

    def exact_times(self, field: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``ts``/``dur`` in exact ns where the decoder computed them from the decimal text (at most
        3 decimals, below ``TS_EXACT_LIMIT_US``: what ``microseconds_to_ns`` gives there), and where."""
        if f"{field}_ns" not in self.result:  # a decoder built before it gave them (a stale build)
            return None
        return self.column(f"{field}_ns"), self.column(f"{field}_exact").view(bool)

    def float_times(self, field: str) -> np.ndarray:
        return self.column(f"{field}_float")

    def time_texts(self, field: str, rows: np.ndarray, piece: Callable[[], bytes]) -> list[bytes]:  # noqa: ARG002
        """The JSON texts of ``ts``/``dur`` of some events, where the decoder found them in the buffer."""
        offsets = self.column(f"{field}_offset")[rows].tolist()
        lengths = self.column(f"{field}_length")[rows].tolist()
        return [bytes(self.buf[o : o + k]) for o, k in zip(offsets, lengths)]

    def launch_dims(self, prefix: str, rows: np.ndarray) -> np.ndarray:
        """grid or block of some events as (rows, 3) int64, as ``_three_dims`` makes them: missing
        dimensions 1, absent -1."""
        lengths = self.column(f"{prefix}_length")[rows]
        starts = self.column(f"{prefix}_start")[rows]
        flat = self.column(prefix, rows=False)
        dims = np.ones((len(rows), 3), dtype=np.int64)
        dims[lengths == 0] = -1
        for axis in range(3):
            has = lengths > axis
            dims[has, axis] = flat[starts[has] + axis]
        return dims


class _Consumed:
    """Blocks of one byte range, counting the bytes handed out: ``tell()`` for the progress
    callback, as a file's position is for a whole file."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self._blocks = blocks
        self.consumed = 0

    def __iter__(self) -> Iterator[bytes]:
        for block in self._blocks:
            self.consumed += len(block)
            yield block

    def tell(self) -> int:
        return self.consumed


#: flow ids that are all plain decimal integers, one per line (the usual case)
_DECIMAL_LINES = re.compile(r"(?:-?[0-9]+\n)*-?[0-9]+")


def _flow_ids(texts: np.ndarray) -> np.ndarray:
    """Flow ids as numbers (NaN: not a number), as ``pd.to_numeric(errors="coerce")`` reads them.
    Ids that are all plain decimal integers (one regular-expression pass over them joined) are
    converted directly: the same int64 values, without pandas' per-value parsing."""
    values = texts.tolist()
    if values and _DECIMAL_LINES.fullmatch("\n".join(values)):
        try:
            return np.array(values, dtype=np.int64)
        except (OverflowError, ValueError):  # beyond int64: pandas decides (uint64 or float)
            pass
    import pandas as pd  # here: see _track_codes

    return pd.to_numeric(pd.Series(texts), errors="coerce").to_numpy()


#: the events' columns the CPU-op links are made from
_CPU_OP_COLUMNS = ("kind", "external_id", "start_ns", "dur_ns", "pid", "tid")


def _without_rows(columns: dict[str, np.ndarray], drop: np.ndarray) -> dict[str, np.ndarray]:
    """The columns without the rows ``drop`` (the begins that never end, as ``_events_table``
    drops them); as they are when there are none."""
    if len(drop) == 0:
        return columns
    keep = np.ones(len(next(iter(columns.values()))), dtype=bool)
    keep[drop] = False
    return {key: values[keep] for key, values in columns.items()}


def _link_columns(events: pa.Table) -> dict[str, np.ndarray]:
    """The events' ``_CPU_OP_COLUMNS`` as numpy arrays, kind as its codes."""
    columns = {key: events.column(key).to_numpy() for key in _CPU_OP_COLUMNS if key != "kind"}
    return {"kind": _kind_codes(events), **columns}


def _kind_codes(events: pa.Table) -> np.ndarray:
    """The events' kinds as their int8 codes."""
    column = events.column("kind")
    chunk = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return chunk.indices.to_numpy(zero_copy_only=False)


def _one_category(text: str, n: int) -> pa.DictionaryArray:
    """``n`` links of one category, as ``dictionary_column([text] * n)`` encodes them (without
    building and hashing n strings)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)),
                                          pa.array([text] if n else [], pa.string()))


def _events_array_end(buf: bytearray) -> int | None:
    """Position of the bracket closing the events array whose ``[`` is ``buf[0]``, or None.
    The native scan when built (one pass, no arrays of positions), else ``bracket_depths``: the
    same rules, so the same answer on any text."""
    if _array_end is not None:
        end: int | None = _array_end(buf, 1)
        return end
    brackets, depth = _structure(memoryview(buf)[1:])
    ends = np.flatnonzero(depth == -1)
    return int(brackets[ends[0]]) + 1 if len(ends) else None


def _piece(buf: bytearray, start: int, end: int) -> bytes:
    """A standalone JSON array of the events in buf[start:end] (slow paths only)."""
    return b"[" + bytes(buf[start:end]) + b"]"


# plus id2, which only async events use (read by _PhaseProbe)
_EVENT_KEYS = frozenset(f.encode_name for f in msgspec.structs.fields(_Event)) | {"id2"}
_ARG_KEYS = frozenset(_MemoryArgs.__struct_encode_fields__)
_INT64_RANGE = range(-(2**63), 2**63)


def _coerce_event(item: dict[str, Any]) -> list[str]:
    """Coerce the fields of one decoded event to the types ``_Event`` expects, in place; returns
    the reason of each change (``coerced_*``). Keys traceview does not read are dropped first, so
    nothing unread can fail the typed decoder. A ``ts`` that is not a number is removed (the
    event is then skipped as having none); a ``dur`` that is not a number becomes 0."""
    reasons: list[str] = []
    for key in [k for k in item if k not in _EVENT_KEYS]:
        del item[key]
    for key in ("ph", "cat", "name", "bp"):
        if key in item and not isinstance(item[key], str):
            item[key] = "" if item[key] is None else str(item[key])
            reasons.append("coerced_field_to_text")
    for key in ("pid", "tid", "id"):
        value = item.get(key)
        if key in item and (isinstance(value, bool) or not isinstance(value, (int, str))):
            item[key] = str(value)
            reasons.append("coerced_field_to_text")
        elif isinstance(value, int) and value not in _INT64_RANGE:
            item[key] = str(value)  # a stable id of its own (``_int_ids``), counted there
    for key in ("ts", "dur"):
        value = item.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value not in _INT64_RANGE:
            item[key] = float("inf") if abs(value) >= 2**1000 else float(value)  # out of range: skipped later
        elif key in item and (isinstance(value, bool) or not isinstance(value, (int, float))):
            if key == "ts":
                del item[key]
            else:
                item[key] = 0
                reasons.append("coerced_dur_not_a_number")
    _keep_phase_fields(item)
    args = item.get("args")
    if isinstance(args, dict):
        reasons += _coerce_args(args)
    elif "args" in item:
        del item["args"]
        if args is not None:
            reasons.append("coerced_args_not_an_object")
    return reasons


def _keep_phase_fields(item: dict[str, Any]) -> None:
    """Keep, in place, what counter and async events need past the coercion of ``args``: a
    counter's args move under ``COUNTER_ARGS_KEY`` (their keys and types are the trace's own;
    values that are not numbers become null, counted when the samples are read); an ``id2`` that is
    not a flat object of ids is dropped (the event is then matched by its ``id``)."""
    id2 = item.get("id2")
    if "id2" in item and not (isinstance(id2, dict) and all(isinstance(v, (str, int)) for v in id2.values())):
        del item["id2"]
    args = item.get("args")
    if item.get("ph") in COUNTER_PHASES and isinstance(args, dict):
        del item["args"]
        item[COUNTER_ARGS_KEY] = {k: v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
                                  for k, v in args.items()}


def _coerce_args(args: dict[str, Any]) -> list[str]:
    """Coerce the ``args`` of one event to the types of ``_MemoryArgs``, in place (a value that
    cannot be coerced is dropped: read as absent); returns the reason of each change."""
    reasons: list[str] = []
    for key in [k for k in args if k not in _ARG_KEYS]:
        del args[key]
    for fld, encoded in zip(_MemoryArgs.__struct_fields__, _MemoryArgs.__struct_encode_fields__):
        if encoded not in args or fld in _ANY_JSON_ARGS:  # an op's inputs: any JSON is kept as it is
            continue
        value, default = args[encoded], getattr(_NO_MEMORY_ARGS, fld)
        reason = _coerce_arg(args, encoded, value, default)
        if reason:
            reasons.append(reason)
    return reasons


def _coerce_arg(args: dict[str, Any], key: str, value: Any, default: Any) -> str | None:
    """Coerce one arg in place; returns the reason, or None when it was fine."""
    if isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            if value in _INT64_RANGE:
                return None
            del args[key]
            return "coerced_arg_out_of_range"
        try:
            number = int(value)
        except (TypeError, ValueError, OverflowError):
            del args[key]
            return "coerced_arg_not_a_number"
        if number not in _INT64_RANGE:
            del args[key]
            return "coerced_arg_out_of_range"
        args[key] = number
        return "coerced_arg_to_number"
    if isinstance(default, str):
        if isinstance(value, str):
            return None
        args[key] = "" if value is None else str(value)
        return "coerced_arg_to_text"
    if isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            del args[key]
            return "coerced_arg_not_a_number"
        if not all(v in _INT64_RANGE for v in value):
            del args[key]
            return "coerced_arg_out_of_range"
        return None
    # Process Group Ranks: text or a list of ranks; anything else is kept as its text
    if value is None or isinstance(value, str):
        return None
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v in _INT64_RANGE
                                       for v in value):
        return None
    args[key] = _ranks_text(value)
    return "coerced_arg_to_text"


def _device_stream(kind: np.ndarray, device: np.ndarray, stream: np.ndarray, pid: np.ndarray,
                   tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Device and stream of each row: from the args (``device``, ``stream``; -1: absent) on GPU
    rows, else (older traces) the trace's pid and tid, which Kineto sets to the device and stream
    there; -1 on other rows."""
    is_gpu = np.isin(kind, _GPU_KINDS)
    device = np.where(is_gpu & (device < 0), pid, device)
    device = np.where(is_gpu, device, -1)
    stream = np.where(is_gpu & (stream < 0), tid, stream)
    stream = np.where(is_gpu, stream, -1)
    return device, stream


def _three_dims(value: tuple[int, ...]) -> tuple[int, int, int]:
    """Launch dimensions as three (missing ones 1, absent -1; beyond int64 -2: counted and
    cleared by the caller)."""
    if not value:
        return (-1, -1, -1)
    dims = [v if -1 <= v <= INT64_MAX else -2 for v in value[:3]]
    dims += [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]} if parts else {}


_get_counter_args = attrgetter("counter_args")
_NUMBER_TYPES = frozenset({int, float})  # not bool: true/false are no samples


def _decode_raws(raws: list[Any], default: Any) -> list[Any]:
    """JSON texts (``msgspec.Raw``) decoded in one call; when that fails (a value nested too
    deeply, a number beyond a double such as ``1e999``), one by one: an object value by value
    (a value that fails reads as null, so its numeric neighbours survive), anything else that
    fails as ``default``."""
    try:
        return list(_ANY_DECODER.decode(b"[" + b",".join(raws) + b"]"))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass
    out = []
    for raw in raws:  # only for the events of a chunk that failed above
        try:
            out.append(_ANY_DECODER.decode(raw) if len(raw) else default)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            out.append(_decode_each_value(raw, default))
    return out


def _decode_each_value(raw: Any, default: Any) -> Any:
    try:
        values = _RAW_OBJECT_DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return default
    out: dict[str, Any] = {}
    for key, value in values.items():
        try:
            out[key] = _ANY_DECODER.decode(value)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            out[key] = None
    return out


def _async_ids(events: list[_Event], probes: list[_PhaseProbe]) -> np.ndarray:
    """The id of each async event as text: ``id2``'s ``local:``/``global:`` value when it has one
    (the Chrome trace format's scoped ids), else its ``id``, else ""."""
    ids = np.array(list(map(str, map(_get_id, events))), dtype=object)
    ids[np.fromiter(map(len, map(_get_id, probes)), dtype=np.int64, count=len(probes)) == 0] = ""
    id2_raws = list(map(attrgetter("id2"), probes))
    has_id2 = np.fromiter(map(len, id2_raws), dtype=np.int64, count=len(id2_raws)) > 0
    if has_id2.any():  # rare (Perfetto-era producers): a function per such event
        id2 = list(map(_id2_text, _decode_raws(list(compress(id2_raws, has_id2)), default=None)))
        found = np.array([t is not None for t in id2], dtype=bool)
        where = np.flatnonzero(has_id2)
        ids[where[found]] = np.array([t for t in id2 if t is not None], dtype=object)
    return ids


def _id2_text(value: Any) -> str | None:
    """``{"local": x}`` -> "local:x", ``{"global": x}`` -> "global:x"; None for anything else."""
    if isinstance(value, dict):
        for scope in ("local", "global"):
            if isinstance(value.get(scope), (str, int)) and not isinstance(value.get(scope), bool):
                return f"{scope}:{value[scope]}"
    return None


def stack_pairs(track: np.ndarray, ts: np.ndarray, seq: np.ndarray,
                is_begin: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pair begins and ends per track in stack order (each end closes the latest open begin of
    its track; events ordered by ``ts``, then ``seq``), without a loop over events: within a
    track, the stack depth before each event (an end with none open is unmatched and leaves it
    at 0) gives each begin and end a level; at one level of one track begins and ends then
    alternate, so each begin pairs with the next event at its level.

    Returns indices into the inputs: (paired begins, their ends, unmatched ends, begins never
    closed)."""
    n = len(track)
    order = np.lexsort((seq, ts, track))
    t, begin = track[order], is_begin[order]
    step = np.where(begin, 1, -1).astype(np.int64)
    first = np.ones(n, dtype=bool)
    first[1:] = t[1:] != t[:-1]
    segment = np.cumsum(first) - 1
    total = np.cumsum(step)
    depth = total - (total - step)[first][segment]  # running sum within the track
    # running minimum within the track: later tracks shifted below every earlier value
    shift = segment * (2 * n + 1)
    low = np.minimum.accumulate(depth - shift) + shift
    low_before = np.where(first, 0, np.roll(low, 1))
    before = (depth - step) - np.minimum(low_before, 0)  # open begins before the event
    unmatched_end = ~begin & (before == 0)
    level = np.where(begin, before + 1, before)
    live = np.flatnonzero(~unmatched_end)
    by_level = live[np.lexsort((live, level[live], t[live]))]
    same_next = np.zeros(len(by_level), dtype=bool)
    same_next[:-1] = (t[by_level[1:]] == t[by_level[:-1]]) & (level[by_level[1:]] == level[by_level[:-1]])
    opens = begin[by_level]
    pair_at = np.flatnonzero(opens & same_next)
    return (order[by_level[pair_at]], order[by_level[pair_at + 1]], order[np.flatnonzero(unmatched_end)],
            order[by_level[opens & ~same_next]])


def _track_codes(*columns: np.ndarray) -> np.ndarray:
    """One int64 code per distinct tuple of the columns (exact: factorised, not hashed)."""
    # pandas is imported where it is used, not at the top: parse workers forked before their
    # parent imports it (ParseHooks.meanwhile) do not import it (~0.25 s) for their ranges
    import pandas as pd

    code = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        values, uniques = pd.factorize(column)
        code = code * max(len(uniques), 1) + values
        code = pd.factorize(code)[0].astype(np.int64)  # keep codes below the number of rows
    return code


def _plain_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


#: The skip reasons of events that carried or may have carried activity (a time on a thread or a
#: GPU): every figure of the rank leaves them out (``RankInfo.activity_dropped``). Entries that are
#: not objects, and phases traceview does not read (counters, async, object snapshots...), are not.
ACTIVITY_LOSS_REASONS = ("skipped_no_ts", "skipped_ts_out_of_range", "skipped_dur_out_of_range",
                         "skipped_nested_too_deep", "skipped_unmatched_begin", "skipped_unmatched_end")

#: What each event count means in words (``fate_warnings``); ``{n}`` is the count.
FATE_TEXT = {
    "skipped_no_ts": "{n} events skipped: 'ts' missing, null or not a number (not placed at time 0)",
    "skipped_ts_out_of_range": "{n} events skipped: 'ts' not finite or beyond +-2**61 ns",
    "skipped_dur_out_of_range": "{n} events skipped: 'dur' not finite or beyond +-2**61 ns",
    "skipped_not_an_object": "{n} entries of traceEvents skipped: not JSON objects",
    "skipped_nested_too_deep": "{n} events skipped: nested too deeply to decode",
    "skipped_counter_no_value": "{n} counter events (ph 'C') skipped: no arg holds a finite number",
    "skipped_async_step": "{n} async step events (ph 'T'/'p') skipped: only async begins, ends and instants are read",
    "skipped_unmatched_begin": "{n} 'B' events skipped: no matching 'E' on their thread",
    "skipped_unmatched_end": "{n} 'E' events skipped: no open 'B' on their thread",
    "skipped_async_unmatched_begin": "{n} async begin events (ph 'b'/'S') skipped: no matching end with the same "
                                     "pid, category, id and name",
    "skipped_async_unmatched_end": "{n} async end events (ph 'e'/'F') skipped: no open begin with the same "
                                   "pid, category, id and name",
    "paired_end": "{n} B/E pairs became duration events",
    "counter": "{n} counter events (ph 'C') kept as {samples} samples in the counters table (not as events)",
    "async_paired_end": "{n} async b/e (or S/F) pairs kept as kind 'other' duration events (category as given)",
    "async_instants": "{n} async instants (ph 'n') kept as kind 'other' instant events (category as given)",
    "coerced_counter_arg_dropped": "{n} counter args that are not finite numbers dropped (the numeric args of "
                                   "their events kept)",
    "coerced_invalid_utf8": "{n} byte sequences that are not UTF-8 replaced by U+FFFD in strings",
    "coerced_dur_not_a_number": "{n} events had a 'dur' that is not a number; set to 0",
    "coerced_negative_dur": "{n} events had a negative duration; set to 0",
    "coerced_id_beyond_64_bits": "{n} pid/tid values beyond 64 bits given ids of their own",
    "coerced_arg_not_a_number": "{n} integer args that are not numbers read as absent",
    "coerced_arg_out_of_range": "{n} integer args beyond 64 bits read as absent",
    "coerced_arg_to_number": "{n} integer args written as text read as numbers",
    "coerced_arg_to_text": "{n} text args of another type read as their text",
    "coerced_field_to_text": "{n} event fields of another type read as text",
    "coerced_args_not_an_object": "{n} events' args that are not objects ignored",
    "clamped_launch_dims": "{n} kernel launch dimensions beyond 2**31-1 read as absent",
    "clamped_collective_values": "{n} collective sizes too large for their column read as absent",
}


def fate_warnings(counts: dict[str, int], unsupported_phases: dict[str, int]) -> list[str]:
    """One line per skip or coercion reason that occurred, saying exactly what was done."""
    samples = f"{counts.get('counter_samples', 0):,}"
    lines = [text.format(n=f"{counts[key]:,}", samples=samples) for key, text in FATE_TEXT.items() if counts.get(key)]
    if counts.get("skipped_unsupported_phase"):
        phases = ", ".join(f"'{ph}' ({n:,})" for ph, n in sorted(unsupported_phases.items()))
        lines.append(f"{counts['skipped_unsupported_phase']:,} events of phases traceview does not read skipped: "
                     + phases)
    return lines


def _copy_kind(name: str | None) -> str | None:
    match = _COPY_KIND.search(name or "")
    return match.group(1) if match else None


def _int_arg(args: Sequence[_Args], field: str, n: int, counts: dict[str, int]) -> np.ndarray:
    """One integer arg as int64. Values beyond int64 (the decoder accepts up to 2**64; seen in real
    traces) become -1, read as absent, and are counted in ``counts``."""
    try:
        return np.fromiter(map(attrgetter(field), args), dtype=np.int64, count=n)
    except OverflowError:
        values = [v if -(2**63) <= v <= INT64_MAX else None for v in map(attrgetter(field), args)]
        beyond = values.count(None)
        counts["coerced_arg_out_of_range"] = counts.get("coerced_arg_out_of_range", 0) + beyond
        return np.array([-1 if v is None else v for v in values], dtype=np.int64)


def canonical_json(text: str) -> str:
    """A JSON text written the one way msgspec writes its value (no spaces): the native decoder
    keeps an arg's text as written, the msgspec path re-encodes the decoded value."""
    return msgspec.json.encode(msgspec.json.decode(text)).decode()


def _is_not_none(value: Any) -> bool:
    return value is not None


def _ranks_text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _int_ids(values: list[Any], string_ids: dict[str, int]) -> tuple[np.ndarray, int]:
    """pid/tid values as int64, and how many were beyond 64 bits. Numeric strings ("1890023232",
    "stream 7") become numbers; other strings ("Spans", "PyTorch Profiler") and numbers beyond
    int64 get stable negative ids of their own."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values)), 0
    except (TypeError, ValueError, OverflowError):
        pass
    is_int = np.fromiter(map(isinstance, values, repeat(int)), dtype=bool, count=len(values))
    out = np.empty(len(values), dtype=np.int64)
    try:
        out[is_int] = np.fromiter(compress(values, is_int), dtype=np.int64, count=int(is_int.sum()))
    except OverflowError:  # some beyond int64: those go the slow way below
        is_int[is_int] = [-(2**63) <= v <= INT64_MAX for v in compress(values, is_int)]
        out[is_int] = np.fromiter(compress(values, is_int), dtype=np.int64, count=int(is_int.sum()))
    memo: dict[Any, tuple[int, bool]] = {}  # value -> (id, whether it was a number beyond int64)
    beyond = 0
    for i in np.flatnonzero(~is_int).tolist():  # string ids: a handful, or old formats; huge numbers
        v = values[i]
        if v not in memo:
            memo[v] = _string_id(str(v).strip(), string_ids)
        out[i], huge = memo[v]
        beyond += huge
    return out, beyond


def _string_id(text: str, string_ids: dict[str, int]) -> tuple[int, bool]:
    """The id of a pid/tid written as text (or a number beyond int64), and whether it is such a
    number: digits ("1890023232", "stream 7") are the number; other text a stable negative id."""
    digits = re.search(r"(\d+)\s*$", text)
    numeric = text.lstrip("-").isdigit()
    if digits and (numeric or text.lower().startswith("stream")):
        number = int(digits.group(1))
        if number <= INT64_MAX:
            return (-number if text.startswith("-") else number), False
    return string_ids.setdefault(text, -2 - len(string_ids)), numeric


def microseconds_to_ns(ts_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact int64 ns from float64 microseconds written as decimals with up to 3 fractional digits.

    Returns (ns, ambiguous): ``ambiguous`` marks values at or above 2**43 us, where one float64
    stands for several nanosecond decimals; the caller re-reads those from the JSON text.
    """
    ts_us = np.asarray(ts_us, dtype=np.float64)
    small = np.abs(ts_us) < TS_EXACT_LIMIT_US
    ns = np.zeros(len(ts_us), dtype=np.int64)
    if small.any():
        values = ts_us[small]
        guess = np.rint(values * 1000.0).astype(np.int64)
        chosen = guess.copy()
        found = np.zeros(len(guess), dtype=bool)
        # the exact c satisfies float(c) / 1000 == ts (c < 2**53, and division is correctly
        # rounded); the float product can be off by a little, so try the neighbours
        for delta in (0, -1, 1, -2, 2):
            cand = guess + delta
            hit = ~found & (cand.astype(np.float64) / 1000.0 == values)
            chosen[hit] = cand[hit]
            found |= hit
        # values with more than 3 decimals (sub-ns) keep the nearest ns: the honest answer
        ns[small] = chosen
    ambiguous = ~small
    if ambiguous.any():
        whole = np.floor(ts_us[ambiguous])
        ns[ambiguous] = whole.astype(np.int64) * 1000 + np.rint((ts_us[ambiguous] - whole) * 1000).astype(np.int64)
    return ns, ambiguous


def decimal_text_to_ns(texts: list[bytes]) -> np.ndarray:
    """Exact ns from JSON number texts in microseconds ("1700000000000000.123" -> ...123).

    Vectorised with Arrow string kernels; exponent notation goes through Decimal.
    """
    import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
    arr = pa.array(texts, pa.binary()).cast(pa.string())
    negative = pc.starts_with(arr, "-").to_numpy(zero_copy_only=False)
    unsigned = pc.utf8_ltrim(arr, "-+")
    parts = pc.split_pattern(unsigned, ".", max_splits=1)
    lengths = pc.list_value_length(parts).to_numpy(zero_copy_only=False)
    exponent = pc.match_substring_regex(arr, "[eE]").to_numpy(zero_copy_only=False)
    whole_text = pc.list_element(parts, 0)
    whole_text = pc.if_else(pc.equal(whole_text, ""), "0", whole_text)
    safe = ~exponent
    out = np.zeros(len(texts), dtype=np.int64)
    if safe.any():
        mask = pa.array(safe)
        whole = pc.cast(pc.filter(whole_text, mask), pa.int64()).to_numpy(zero_copy_only=False)
        frac_parts = pc.filter(parts, mask)
        has_frac = lengths[safe] > 1
        frac = np.zeros(int(safe.sum()), dtype=np.int64)
        if has_frac.any():
            frac_text = pc.list_element(pc.filter(frac_parts, pa.array(has_frac)), 1)
            padded = pc.utf8_rpad(frac_text, 4, "0")
            first3 = pc.cast(pc.utf8_slice_codeunits(padded, 0, 3), pa.int64()).to_numpy(zero_copy_only=False)
            fourth = pc.cast(pc.utf8_slice_codeunits(padded, 3, 4), pa.int64()).to_numpy(zero_copy_only=False)
            frac[has_frac] = first3 + (fourth >= 5)
        out[safe] = whole * 1000 + frac
    for i in np.flatnonzero(exponent).tolist():
        out[i] = abs(int((Decimal(texts[i].decode()) * 1000).to_integral_value()))
    return np.where(negative, -out, out)


def _claims(_path: Path, head: bytes) -> bool:
    """A JSON document: Kineto's (the parser says clearly when it is JSON of another kind)."""
    return head.removeprefix(UTF8_BOM).lstrip()[:1] in (b"{", b"[")


def _in_directory(path: Path, head: bytes) -> bool:
    """In a directory scan, only JSON that looks like a trace (not a config or truth file beside it)."""
    return _claims(path, head) and (b'"traceEvents"' in head or b'"ph"' in head)


def _parse(path: Path, *, progress: ProgressFn | None = None, step_marker: str | None = None, jobs: int = 1,
           hooks: ParseHooks = NO_HOOKS) -> Trace:
    del step_marker  # part of the InputFormat.parse signature; Kineto marks steps itself (ProfilerStep#N)
    return parse_kineto(path, progress=progress, jobs=jobs, hooks=hooks)


FORMAT = register_input_format(InputFormat(
    name="kineto", description="PyTorch profiler (Kineto) Chrome-trace JSON (.json, .json.gz)",
    sniff=_claims, scan=_in_directory, parse=_parse, suffixes=(".json", ".json.gz", ".gz"), order=20,
    runs_meanwhile=True))
