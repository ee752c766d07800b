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

Chunk boundaries are found by looking for ``}`` ``,`` ``{`` near the end of the buffer. A cut that
lands inside a string or a nested object makes the chunk fail to decode; then a numpy scan of the
chunk's structure (quotes, escapes, brackets) finds the real boundary. The same scan finds the end
of the array at end of file, so metadata written after the events (``baseTimeNanoseconds``,
``traceName``) is read too.

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
doubles there); larger fractional values are re-read from the JSON text of that chunk.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from itertools import compress, repeat
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, Union

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceview.errors import TraceFormatError
from traceview.registry import InputFormat, register_input_format
from traceview.intervals import NestedIndex
from traceview.parsers.jsonstream import bracket_depths as _structure, open_bytes as _open_bytes
from traceview.model import (
    hash_keys,
    Kind,
    RankInfo,
    DeviceInfo,
    Trace,
    empty_links,
    empty_memory,
    join_on_keys,
    kind_array,
    make_events_table,
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
    dtype: str = ""
    pg_name: str = msgspec.field(default="", name="Process Group Name")
    pg_ranks: Union[str, list[int], None] = msgspec.field(default=None, name="Process Group Ranks")
    name: str = ""  # metadata events: process_name / thread_name


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
    ts: Union[int, float] = 0
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


class _RawTimes(msgspec.Struct, gc=False):
    ts: msgspec.Raw = msgspec.Raw(b"0")
    dur: msgspec.Raw = msgspec.Raw(b"0")


_EVENTS_DECODER = msgspec.json.Decoder(list[_Event])
_MEMORY_EVENTS_DECODER = msgspec.json.Decoder(list[_MemoryEvent])
_MEMORY_PROBE_DECODER = msgspec.json.Decoder(list[_MemoryProbe])
_get_ph, _get_cat, _get_name = attrgetter("ph"), attrgetter("cat"), attrgetter("name")
_get_pid, _get_tid, _get_args = attrgetter("pid"), attrgetter("tid"), attrgetter("args")
_get_collective = attrgetter("collective")
_get_id = attrgetter("id")
_RAW_TIMES_DECODER = msgspec.json.Decoder(list[_RawTimes])
_ANY_DECODER = msgspec.json.Decoder()


# ---------------------------------------------------------------------- public API


def rank_from_filename(path: str | os.PathLike[str]) -> int | None:
    match = _RANK_IN_NAME.search(Path(path).name)
    return int(match.group(1)) if match else None


def parse_kineto(path: str | os.PathLike[str], *, progress: ProgressFn | None = None) -> Trace:
    """Parse one Kineto trace file. The rank comes from ``distributedInfo``, else the file name,
    else it is left as -1 (``rank_source == "unknown"``) for the loader to assign."""
    path = Path(path)
    parser = _KinetoFile(path, progress)
    return parser.parse()


# ---------------------------------------------------------------------- streaming


@dataclass
class _Chunk:
    """One decoded chunk of events and the per-event columns read from all of them."""

    events: list[_Event]
    piece: Callable[[], bytes]  # the chunk's JSON text (slow paths only)
    # the chunk's text decoded by another decoder (from the event holding a marker on, if given)
    decode_again: Callable[[msgspec.json.Decoder, bytes | None], list[Any]]
    kind: np.ndarray  # int8 Kind codes, from the category
    category: np.ndarray  # codes in the category memo
    pid: np.ndarray
    tid: np.ndarray
    start_ns: np.ndarray


class _KinetoFile:
    def __init__(self, path: Path, progress: ProgressFn | None) -> None:
        self.path = path
        self.progress = progress
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
        self.string_ids: dict[str, int] = {}
        self.n_rows = 0
        self.imprecise_ts = 0
        self._need_more = False
        # string -> code memos shared by all chunks, so codes agree without unifying dictionaries
        self.ph_memo = _Codes()
        self.cat_memo = _Codes()
        self.name_memo = _Codes()

    # -- reading -----------------------------------------------------------------------
    def parse(self) -> Trace:
        raw, chunks = _open_bytes(self.path)
        with raw:
            self._read(raw, chunks)
        return self._build()

    def _report(self, raw: io.BufferedReader) -> None:
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

    def _read_events(self, raw: io.BufferedReader, chunks: Iterator[bytes], buf: bytearray,
                     array_document: bool) -> None:
        """Decode the events array chunk by chunk (``buf`` starts with its ``[``)."""
        at_eof = False
        while True:
            if not at_eof and (len(buf) < CHUNK_BYTES or self._need_more):
                self._need_more = False
                for block in chunks:
                    buf += block
                    if len(buf) >= CHUNK_BYTES:
                        break
                else:
                    at_eof = True
                self._report(raw)
            if at_eof:
                self._final_chunk(buf, array_document)
                return
            cut = self._find_cut(buf)
            if cut is None:
                self._need_more = True
                continue  # one event larger than a chunk: read more
            consumed = self._decode_events(buf, 1, cut)
            del buf[1:consumed]

    def _find_events_key(self, buf: bytearray) -> int:
        for match in _TRACE_EVENTS_KEY.finditer(buf):
            brackets, depth = _structure(bytes(buf[: match.start()]))
            # a real top-level key: outside any string, directly inside the outer object
            quotes_before = bytes(buf[: match.start()]).count(b'"') - bytes(buf[: match.start()]).count(b'\\"')
            if (len(depth) == 0 or depth[-1] == 1) and quotes_before % 2 == 0:
                return match.end()
        return -1

    def _find_cut(self, buf: bytearray) -> int | None:
        """Position just after the last complete event in ``buf`` (the ``}``), or None."""
        search_from = max(0, len(buf) - 1024 * 1024)
        while True:
            last = None
            for match in _EVENT_SEPARATOR.finditer(buf, search_from):
                last = match
            if last is not None:
                return last.start() + 1
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
        try:
            events = self._decode_in_place(buf, start, end, self.decoder)
        except msgspec.ValidationError:
            events = self._decode_loose(_piece(buf, start, end))
        except msgspec.DecodeError:
            # the cut fell inside a string or nested object: find the real last event boundary
            boundary = self._last_event_boundary(buf, start, end)
            if boundary is None:
                self._need_more = True
                return start
            if boundary >= end:
                raise TraceFormatError(self.path, f"malformed JSON in traceEvents near byte {start}",
                                       "the file is damaged or not a Chrome trace") from None
            return self._decode_events(buf, start, boundary)
        self._ingest(events, lambda: _piece(buf, start, end),
                     lambda decoder, marker: self._decode_tail(buf, start, end, decoder, marker))
        return end

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

    def _decode_loose(self, piece: bytes) -> list[_Event]:
        """Slow path for chunks with unexpected value types: coerce field by field."""
        try:
            items = _ANY_DECODER.decode(piece)
        except msgspec.DecodeError as exc:
            raise TraceFormatError(self.path, f"malformed JSON in traceEvents ({exc})") from None
        fixed = sum(_coerce_event(item) for item in items if isinstance(item, dict))
        if fixed:
            self.counts["coerced_fields"] = self.counts.get("coerced_fields", 0) + fixed
        # with the allocator's args: a slow path already, and its events may be the first of them
        return list(_MEMORY_EVENTS_DECODER.decode(msgspec.json.encode(items)))

    def _final_chunk(self, buf: bytearray, array_document: bool) -> None:
        brackets, depth = _structure(memoryview(buf)[1:])
        brackets = brackets + 1
        ends = np.flatnonzero(depth == -1)
        if len(ends) == 0:
            raise TraceFormatError(self.path, "JSON is truncated: the traceEvents array never closes",
                                   "the file was cut short (profiler killed, or an incomplete copy)")
        array_end = int(brackets[ends[0]])
        events_end = self._rstrip_separators(buf, array_end)
        position = 1
        while position < events_end:
            consumed = self._decode_events(buf, position, events_end)
            if consumed <= position:
                raise TraceFormatError(self.path, "malformed JSON in traceEvents near the end of the file")
            position = consumed
        if not array_document:
            tail = bytes(buf[array_end + 1:]).strip()
            if not tail.endswith(b"}"):
                raise TraceFormatError(self.path, "JSON is truncated after the traceEvents array",
                                       "the file was cut short")
            tail = tail.lstrip(b", \t\r\n")
            self.tail = self._decode_object(b"{" + tail, closing=False) if tail != b"}" else {}

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
        return value if isinstance(value, dict) else {}

    def _no_events_array(self, text: bytes) -> None:
        try:
            value = _ANY_DECODER.decode(text)
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
    def _ingest(self, events: list[_Event], piece: Callable[[], bytes],
                decode_again: Callable[[msgspec.json.Decoder, bytes | None], list[Any]]) -> None:
        """Turn one decoded chunk into columns. Each field is read once for all events (C-level
        ``map(attrgetter)``), then rows are selected with numpy masks."""
        n = len(events)
        if n == 0:
            return
        ph_codes = self.ph_memo.codes(map(_get_ph, events), n)
        ph_values = self.ph_memo.values()

        def ph_mask(wanted: tuple[str, ...]) -> np.ndarray:
            return np.isin(ph_codes, [i for i, p in enumerate(ph_values) if p in wanted])

        is_complete = ph_mask(("X", "i", "I"))
        is_flow = ph_mask(("s", "f", "t"))
        is_meta = ph_mask(("M",))
        other_ph = ~(is_complete | is_flow | is_meta)
        self._count("events_read", n)
        self._count("metadata", int(is_meta.sum()))
        self._count("flow", int(is_flow.sum()))
        if other_ph.any():
            for code, count in zip(*np.unique(ph_codes[other_ph], return_counts=True)):
                key = f"ph={ph_values[code]}"
                self.unmapped[key] = self.unmapped.get(key, 0) + int(count)
            self._count("unmapped_ph", int(other_ph.sum()))
        if is_meta.any():  # a few dozen per file
            self._metadata_names(events, is_meta)

        cat_codes = self.cat_memo.codes(map(_get_cat, events), n)
        cat_values = self.cat_memo.values()
        cat_kinds = np.array([int(CATEGORY_KINDS.get(c.lower(), Kind.OTHER)) for c in cat_values] or [0], dtype=np.int8)
        chunk = _Chunk(
            events=events,
            piece=piece,
            decode_again=decode_again,
            kind=cat_kinds[cat_codes],
            category=cat_codes,
            pid=_int_ids(list(map(_get_pid, events)), self.string_ids),
            tid=_int_ids(list(map(_get_tid, events)), self.string_ids),
            start_ns=self._exact_ns(events, "ts", piece),
        )
        if is_flow.any():
            self._keep_flows(chunk, ph_codes, is_flow)
        is_instant = ph_mask(("i", "I"))
        if is_instant.any():  # a few per file, or one per allocation when memory is profiled
            is_memory = self._memory_rows(chunk, is_instant)
            is_complete &= ~is_memory
        if is_complete.any():
            self._ingest_complete(chunk, is_complete)

    def _memory_rows(self, chunk: _Chunk, is_instant: np.ndarray) -> np.ndarray:
        """Keep the allocator events among the chunk's instants as memory rows; returns their mask."""
        rows = np.flatnonzero(is_instant)
        names = map(_get_name, compress(chunk.events, is_instant))
        rows = rows[np.fromiter(map(MEMORY_EVENT_NAME.__eq__, names), dtype=bool, count=rows.size)]
        is_memory = np.zeros(len(chunk.events), dtype=bool)
        if rows.size == 0:
            return is_memory
        is_memory[rows] = True
        m = int(rows.size)
        args = self._memory_args(chunk, is_memory)
        self.memory.append({
            "device": _int_arg(args, "device_id", m), "device_type": _int_arg(args, "device_type", m),
            "ts_ns": chunk.start_ns[rows], "bytes": _int_arg(args, "mem_bytes", m),
            "total_allocated_bytes": _int_arg(args, "total_allocated", m),
            "total_reserved_bytes": _int_arg(args, "total_reserved", m),
            "addr": _int_arg(args, "addr", m), "pid": chunk.pid[rows], "tid": chunk.tid[rows],
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
        except msgspec.ValidationError:
            probe = self._decode_loose(chunk.piece())
        return list(map(_get_args, compress(probe, is_memory)))

    def _metadata_names(self, events: list[_Event], is_meta: np.ndarray) -> None:
        """Process and thread names from the metadata (``ph == "M"``) events."""
        for i in np.flatnonzero(is_meta).tolist():
            ev = events[i]
            if ev.name == "process_name" and isinstance(ev.pid, int):
                self.process_names[ev.pid] = ev.args.name
            elif ev.name == "thread_name":
                self.thread_names[f"{ev.pid}:{ev.tid}"] = ev.args.name

    def _keep_flows(self, chunk: _Chunk, ph_codes: np.ndarray, is_flow: np.ndarray) -> None:
        """Keep the flow events of the chunk, except launch flows (ac2g ...): those duplicate
        correlation ids."""
        cat_values = self.cat_memo.values()
        launch_cats = [i for i, c in enumerate(cat_values) if c.lower() in LAUNCH_FLOW_CATEGORIES]
        keep = is_flow & ~np.isin(chunk.category, launch_cats)
        if keep.any():
            self.flows.append({
                "ph": ph_codes[keep], "cat": chunk.category[keep],
                "id": np.array(list(map(str, map(_get_id, compress(chunk.events, keep)))), dtype=object),
                "pid": chunk.pid[keep], "tid": chunk.tid[keep], "ts": chunk.start_ns[keep],
            })

    def _ingest_complete(self, chunk: _Chunk, is_complete: np.ndarray) -> None:
        """Append the columns of the complete (``X``) and instant (``i``/``I``) events of a chunk."""
        events = chunk.events
        rows = np.flatnonzero(is_complete)
        m = len(rows)
        every_row = m == len(events)

        def take(values: np.ndarray) -> np.ndarray:
            return values if every_row else values[rows]

        kind = take(chunk.kind)
        category = take(chunk.category)
        self._count_unmapped_categories(category[kind == int(Kind.OTHER)])
        self._count("mapped", m)
        name_codes = self.name_memo.codes(map(_get_name, events if every_row else compress(events, is_complete)), m)
        dur_ns = take(self._exact_ns(events, "dur", chunk.piece))
        negative = dur_ns < 0
        if negative.any():
            self.warnings.append(f"{int(negative.sum())} events had a negative duration; set to 0")
            dur_ns = np.where(negative, 0, dur_ns)
        pid = take(chunk.pid)
        tid = take(chunk.tid)
        args = list(map(_get_args, events if every_row else compress(events, is_complete)))
        external_id = _int_arg(args, "external_id", m)
        device, stream = _device_stream(kind, args, pid, tid, m)
        nbytes = _int_arg(args, "bytes", m)
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
            "correlation": _int_arg(args, "correlation", m),
            "external_id": np.where(external_id < 0, _int_arg(args, "external_id_old", m), external_id),
            "bytes": pa.array(nbytes, mask=nbytes < 0),
        }
        self._launch_geometry(cols, kind, args, m)
        self._collective_columns(cols, args, m)
        memcpy_rows = np.flatnonzero(kind == int(Kind.MEMCPY))
        if len(memcpy_rows):
            copy_kinds = np.array([_copy_kind(s) for s in self.name_memo.values()], dtype=object)
            copy_full = np.full(m, None, dtype=object)
            copy_full[memcpy_rows] = copy_kinds[name_codes[memcpy_rows]]
            cols["copy_kind"] = pa.array(copy_full, pa.string())
        for key, null_type in _OPTIONAL_COLUMNS.items():
            if key not in cols:
                cols[key] = pa.nulls(m, null_type)
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

    @staticmethod
    def _launch_geometry(cols: dict[str, Any], kind: np.ndarray, args: list[_Args], m: int) -> None:
        kernel_rows = np.flatnonzero(kind == int(Kind.KERNEL))
        for prefix in ("grid", "block"):
            dims = np.full((m, 3), -1, dtype=np.int64)
            if len(kernel_rows):
                values = [getattr(args[i], prefix) for i in kernel_rows.tolist()]
                try:
                    dims[kernel_rows] = np.array(values, dtype=np.int64).reshape(len(values), 3)
                except ValueError:  # missing or not 3-dimensional: pad with 1s, absent stays -1
                    padded = [tuple(v[:3]) + (1,) * (3 - len(v[:3])) if v else (-1, -1, -1) for v in values]
                    dims[kernel_rows] = np.asarray(padded, dtype=np.int64)
            for axis, suffix in enumerate("xyz"):
                col = dims[:, axis]
                cols[f"{prefix}_{suffix}"] = pa.array(col.astype(np.int32), mask=col < 0)

    @staticmethod
    def _collective_columns(cols: dict[str, Any], args: list[_Args], m: int) -> None:
        collective = list(map(_get_collective, args))
        has_collective = np.fromiter(map(len, collective), dtype=np.int64, count=m) > 0
        if not has_collective.any():
            return
        idx = np.flatnonzero(has_collective).tolist()

        def strings(values: Sequence[str | None]) -> pa.Array:
            full = np.full(m, None, dtype=object)
            full[idx] = [v or None for v in values]
            return pa.array(full, pa.string())

        cols["collective"] = strings([collective[i] for i in idx])
        in_nelems = np.array([args[i].in_nelems for i in idx], dtype=np.int64)
        out_nelems = np.array([args[i].out_nelems for i in idx], dtype=np.int64)
        nelems_full = np.full(m, -1, dtype=np.int64)
        nelems_full[idx] = np.maximum(in_nelems, out_nelems)
        cols["msg_nelems"] = pa.array(nelems_full, mask=nelems_full < 0)
        dtypes = [args[i].dtype for i in idx]
        cols["msg_dtype"] = strings(dtypes)
        elem_size = np.array([_DTYPE_BYTES.get(d.lower(), -1) for d in dtypes], dtype=np.int64)
        msg_bytes = np.full(m, -1, dtype=np.int64)
        msg_bytes[idx] = np.where((elem_size > 0) & (nelems_full[idx] >= 0), nelems_full[idx] * elem_size, -1)
        cols["msg_bytes"] = pa.array(msg_bytes, mask=msg_bytes < 0)
        group = np.full(m, -1, dtype=np.int64)
        group[idx] = [args[i].group_size for i in idx]
        cols["group_size"] = pa.array(group.astype(np.int32), mask=group < 0)
        cols["process_group"] = strings([args[i].pg_name for i in idx])
        cols["process_group_ranks"] = strings([_ranks_text(args[i].pg_ranks) for i in idx])

    def _exact_ns(self, events: list[_Event], field: str, piece: Callable[[], bytes]) -> np.ndarray:
        """Exact int64 ns for ``ts`` or ``dur`` of all the events of a chunk (``piece``: its JSON text)."""
        raw_values = list(map(attrgetter(field), events))
        if set(map(type, raw_values)) == {int}:  # older traces: integers, exact in int64
            try:
                return np.fromiter(raw_values, dtype=np.int64, count=len(raw_values)) * 1000
            except OverflowError:
                pass
        values = np.array(raw_values)
        if values.dtype.kind in "iu":
            return values.astype(np.int64) * 1000
        ns, ambiguous = microseconds_to_ns(values.astype(np.float64))
        n_ambiguous = int(ambiguous.sum())
        if n_ambiguous:
            # a float64 cannot tell these decimals apart: re-read them from the JSON text
            raw = _RAW_TIMES_DECODER.decode(piece())
            where = np.flatnonzero(ambiguous)
            get = attrgetter(field)
            ns[where] = decimal_text_to_ns([bytes(get(raw[r])) for r in where.tolist()])
            self.imprecise_ts += n_ambiguous
        return ns

    def _count(self, key: str, n: int) -> None:
        if n:
            self.counts[key] = self.counts.get(key, 0) + n

    # -- assembling ---------------------------------------------------------------------
    def _build(self) -> Trace:
        meta = {**self.head, **self.tail}
        base_time_ns = meta.get("baseTimeNanoseconds")
        base_time_ns = int(base_time_ns) if isinstance(base_time_ns, (int, float)) else 0
        raw_dist = meta.get("distributedInfo")
        dist: dict[str, Any] = raw_dist if isinstance(raw_dist, dict) else {}
        rank, rank_source = -1, "unknown"
        if isinstance(dist.get("rank"), int):
            rank, rank_source = int(dist["rank"]), "distributedInfo"
        else:
            from_name = rank_from_filename(self.path)
            if from_name is not None:
                rank, rank_source = from_name, "file name"
        world_size = dist.get("world_size") if isinstance(dist.get("world_size"), int) else None
        devices: list[DeviceInfo] = []
        for dev in meta.get("deviceProperties") or []:
            if not isinstance(dev, dict):
                continue
            major, minor = dev.get("computeMajor"), dev.get("computeMinor")
            devices.append(
                DeviceInfo(
                    id=int(dev.get("id", len(devices))),
                    name=str(dev.get("name", "")),
                    sm_count=dev.get("numSms"),
                    total_memory_bytes=dev.get("totalGlobalMem"),
                    compute_capability=f"{major}.{minor}" if major is not None else None,
                    extra={k: v for k, v in dev.items() if k not in ("id", "name", "numSms", "totalGlobalMem")},
                )
            )
        version = meta.get("schemaVersion")
        info = RankInfo(
            rank=rank,
            source_path=str(self.path),
            source_format="kineto",
            format_version=f"schemaVersion {version}" if version is not None else "unversioned (pre-2021 format)",
            rank_source=rank_source,
            world_size=world_size,
            devices=devices,
            distributed_info=dist,
            process_names=self.process_names,
            thread_names=self.thread_names,
            base_time_ns=base_time_ns,
            raw_metadata={k: v for k, v in meta.items() if k not in ("deviceProperties", "distributedInfo")},
            event_counts=dict(self.counts),
            unmapped=dict(self.unmapped),
            warnings=list(self.warnings),
        )
        if self.imprecise_ts:
            info.event_counts["times_reread_exactly"] = self.imprecise_ts
        events = self._events_table(rank, base_time_ns)
        links = self._links(events, rank)
        steps = steps_from_annotations(events)
        return Trace(events=events, links=links, ranks={rank: info}, steps=steps, warnings=[],
                     memory=self._memory_table(rank, base_time_ns))

    def _memory_table(self, rank: int, base_time_ns: int) -> pa.Table:
        if not self.memory:
            return empty_memory()
        cols = {key: np.concatenate([part[key] for part in self.memory]) for key in self.memory[0]}
        cols["ts_ns"] = cols["ts_ns"] + base_time_ns
        cols["rank"] = np.full(cols["ts_ns"].size, rank, dtype=np.int32)
        # -1 marks an absent total or address (Kineto before PyTorch 1.10 wrote only Bytes)
        masks = {key: cols[key] < 0 for key in ("total_allocated_bytes", "total_reserved_bytes", "addr")}
        return make_memory_table(cols, masks)

    def _events_table(self, rank: int, base_time_ns: int) -> pa.Table:
        n = self.n_rows
        if n == 0:
            return make_events_table({}, 0)
        cols: dict[str, Any] = {}
        for key, parts in self.columns.items():
            if key == "kind":
                cols[key] = kind_array(np.concatenate(parts))
            elif key in ("category", "name"):
                memo = self.cat_memo if key == "category" else self.name_memo
                cols[key] = memo.dictionary_array(np.concatenate(parts))
            elif isinstance(parts[0], np.ndarray):
                cols[key] = np.concatenate(parts)
            else:
                cols[key] = pa.chunked_array(parts).combine_chunks() if not pa.types.is_dictionary(parts[0].type) \
                    else pa.chunked_array(parts).unify_dictionaries().combine_chunks()
        cols["start_ns"] = cols["start_ns"] + base_time_ns
        cols["rank"] = np.full(n, rank, dtype=np.int32)
        return make_events_table(cols, n)

    def _links(self, events: pa.Table, rank: int) -> pa.Table:
        if events.num_rows == 0:
            return empty_links()
        kind_column = events.column("kind")
        kind_chunk = kind_column.chunk(0) if kind_column.num_chunks == 1 else kind_column.combine_chunks()
        kind = kind_chunk.indices.to_numpy(zero_copy_only=False)
        correlation = events.column("correlation").to_numpy()
        external = events.column("external_id").to_numpy()
        tables = []
        # launch -> GPU activity: one file is one process, so correlation alone is the key
        api = np.flatnonzero((kind == int(Kind.RUNTIME)) & (correlation >= 0))
        gpu = np.flatnonzero(np.isin(kind, _ACTIVITY_OR_SYNC) & (correlation >= 0))
        left, right = join_on_keys([correlation[api]], [correlation[gpu]])
        if len(left):
            tables.append(make_links_table(np.full(len(left), rank), "launch", "correlation", api[left], gpu[right]))
        tables.extend(self._cpu_op_links(events, rank, kind, external))
        flow_table = self._flow_links(events, rank, kind)
        if flow_table is not None:
            tables.append(flow_table)
        if not tables:
            return empty_links()
        return pa.concat_tables(tables).unify_dictionaries().combine_chunks()

    @staticmethod
    def _cpu_op_links(events: pa.Table, rank: int, kind: np.ndarray, external: np.ndarray) -> list[pa.Table]:
        """Runtime call -> the CPU op (or annotation) that issued it.

        By ``External id`` when the op with that id encloses the call on the same thread (some
        traces reuse the correlation id as the runtime's External id, which would point at an
        unrelated op); otherwise the innermost op enclosing the call on its thread.
        """
        start = events.column("start_ns").to_numpy()
        end = start + events.column("dur_ns").to_numpy()
        thread = hash_keys([events.column("pid").to_numpy(), events.column("tid").to_numpy()])
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
            tables.append(make_links_table(np.full(len(rt_rows), rank), "cpu_op", "external_id", op_rows, rt_rows))
            linked[np.searchsorted(runtime, np.unique(rt_rows))] = True
        pending = runtime[~linked]
        all_ops = np.flatnonzero(is_op)
        if len(pending) and len(all_ops):
            index = NestedIndex(thread[all_ops], start[all_ops], end[all_ops])
            found = index.covering(thread[pending], start[pending], end[pending])
            ok = found >= 0
            if ok.any():
                tables.append(make_links_table(np.full(int(ok.sum()), rank), "cpu_op", "enclosing",
                                               all_ops[found[ok]], pending[ok]))
        return tables

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
        ids = pd.to_numeric(pd.Series(flows["id"]), errors="coerce").to_numpy()
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
        cat_list = [cat_values[c] for c in flows["cat"][starts[s_idx][ok]].tolist()]
        return make_links_table(np.full(int(ok.sum()), rank), "flow", cat_list, src[ok], dst[ok])

    def _base_time(self) -> int:
        meta = {**self.head, **self.tail}
        value = meta.get("baseTimeNanoseconds")
        return int(value) if isinstance(value, (int, float)) else 0


#: Optional columns a chunk may lack; filled with nulls so every chunk has every column.
_OPTIONAL_COLUMNS = {
    "collective": pa.string(), "msg_nelems": pa.int64(), "msg_bytes": pa.int64(), "msg_dtype": pa.string(),
    "group_size": pa.int32(), "process_group": pa.string(), "process_group_ranks": pa.string(),
    "copy_kind": pa.string(),
}

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

    def dictionary_array(self, codes: np.ndarray) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(self.values(), pa.string()))


def _piece(buf: bytearray, start: int, end: int) -> bytes:
    """A standalone JSON array of the events in buf[start:end] (slow paths only)."""
    return b"[" + bytes(buf[start:end]) + b"]"


def _coerce_event(item: dict[str, Any]) -> int:
    """Coerce the fields of one decoded event to the types ``_Event`` expects, in place; returns
    how many fields were changed or dropped."""
    fixed = 0
    for key in ("ph", "cat", "name", "bp"):
        if key in item and not isinstance(item[key], str):
            item[key] = "" if item[key] is None else str(item[key])
            fixed += 1
    for key in ("pid", "tid", "id"):
        if key in item and not isinstance(item[key], (int, str)) or (key in item and isinstance(item[key], bool)):
            item[key] = str(item[key])
            fixed += 1
    for key in ("ts", "dur"):
        if key in item and (not isinstance(item[key], (int, float)) or isinstance(item[key], bool)):
            try:
                item[key] = float(item[key])
            except (TypeError, ValueError):
                item.pop(key)
            fixed += 1
    args = item.get("args")
    if isinstance(args, dict):
        fixed += _coerce_args(args)
    elif args is not None:
        item.pop("args")
        fixed += 1
    return fixed


def _coerce_args(args: dict[str, Any]) -> int:
    """Coerce the ``args`` of one event to the types of ``_MemoryArgs``, in place (a value that cannot be
    coerced is dropped); returns how many values were changed or dropped."""
    fixed = 0
    for fld, encoded in zip(_MemoryArgs.__struct_fields__, _MemoryArgs.__struct_encode_fields__):
        if encoded not in args:
            continue
        value = args[encoded]
        default = getattr(_NO_MEMORY_ARGS, fld)
        if isinstance(default, int) and not isinstance(value, int) or isinstance(value, bool):
            try:
                args[encoded] = int(value)
            except (TypeError, ValueError, OverflowError):
                args.pop(encoded)
            fixed += 1
        elif isinstance(default, str) and not isinstance(value, str):
            args[encoded] = str(value)
            fixed += 1
        elif isinstance(default, tuple) and not (isinstance(value, list) and all(isinstance(v, int) for v in value)):
            args.pop(encoded)
            fixed += 1
        elif isinstance(value, int) and not -(2**63) <= value < 2**63:
            args.pop(encoded)
            fixed += 1
    return fixed


def _device_stream(kind: np.ndarray, args: list[_Args], pid: np.ndarray, tid: np.ndarray,
                   m: int) -> tuple[np.ndarray, np.ndarray]:
    """Device and stream of each row: from the args on GPU rows, else (older traces) the trace's
    pid and tid, which Kineto sets to the device and stream there; -1 on other rows."""
    device = _int_arg(args, "device", m)
    stream = _int_arg(args, "stream", m)
    is_gpu = np.isin(kind, _GPU_KINDS)
    device = np.where(is_gpu & (device < 0), pid, device)
    device = np.where(is_gpu, device, -1)
    stream = np.where(is_gpu & (stream < 0), tid, stream)
    stream = np.where(is_gpu, stream, -1)
    return device, stream


def _copy_kind(name: str | None) -> str | None:
    match = _COPY_KIND.search(name or "")
    return match.group(1) if match else None


def _int_arg(args: Sequence[_Args], field: str, n: int) -> np.ndarray:
    """One integer arg as int64; values beyond 64 bits (seen in real traces) become -1."""
    try:
        return np.fromiter(map(attrgetter(field), args), dtype=np.int64, count=n)
    except OverflowError:
        limit = 2**63
        return np.array([v if -limit <= v < limit else -1 for v in map(attrgetter(field), args)], dtype=np.int64)


def _ranks_text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _int_ids(values: list[Any], string_ids: dict[str, int]) -> np.ndarray:
    """pid/tid values as int64. Numeric strings ("1890023232", "stream 7") become numbers; other
    strings ("Spans", "PyTorch Profiler") get stable negative ids."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        pass
    is_int = np.fromiter(map(isinstance, values, repeat(int)), dtype=bool, count=len(values))
    out = np.empty(len(values), dtype=np.int64)
    out[is_int] = np.fromiter(compress(values, is_int), dtype=np.int64, count=int(is_int.sum()))
    memo: dict[Any, int] = {}
    for i in np.flatnonzero(~is_int).tolist():  # string ids: a handful, or old formats
        v = values[i]
        if v not in memo:
            text = str(v).strip()
            digits = re.search(r"(\d+)\s*$", text)
            if digits and (text.isdigit() or text.lower().startswith("stream")):
                memo[v] = int(digits.group(1))
            else:
                memo[v] = string_ids.setdefault(text, -2 - len(string_ids))
        out[i] = memo[v]
    return out


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
    return head.lstrip()[:1] in (b"{", b"[")


def _in_directory(path: Path, head: bytes) -> bool:
    """In a directory scan, only JSON that looks like a trace (not a config or truth file beside it)."""
    return _claims(path, head) and (b'"traceEvents"' in head or b'"ph"' in head)


def _parse(path: Path, *, progress: ProgressFn | None = None, step_marker: str | None = None) -> Trace:
    del step_marker  # part of the InputFormat.parse signature; Kineto marks steps itself (ProfilerStep#N)
    return parse_kineto(path, progress=progress)


FORMAT = register_input_format(InputFormat(
    name="kineto", description="PyTorch profiler (Kineto) Chrome-trace JSON (.json, .json.gz)",
    sniff=_claims, scan=_in_directory, parse=_parse, suffixes=(".json", ".json.gz", ".gz"), order=20))
