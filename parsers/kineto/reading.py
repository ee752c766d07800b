"""Reading a Kineto file: the metadata around ``traceEvents``, the array cut into chunks of whole
events and each chunk decoded (the native decoder, else msgspec, else field by field).
"""

from __future__ import annotations

import io
import os
from typing import Any, Iterator

import msgspec
import numpy as np

from traceview.errors import TraceFormatError
from traceview.model import Trace
from traceview.parsers.jsonstream import bracket_depths as _structure, find_top_level_key, open_bytes as _open_bytes
from traceview.parsers.kineto.clock import timed
from traceview.parsers.kineto.columns import buffer_piece, events_array_end
from traceview.parsers.kineto.events import ANY_DECODER, Event, EVENT_SEPARATOR, MEMORY_EVENTS_DECODER, TRACE_EVENTS_KEY
from traceview.parsers.kineto.fields import Consumed, NATIVE_CHUNKS, NativeFields, StructFields
from traceview.parsers.kineto.ingest import ChunkIngest
from traceview.parsers.kineto.native import native_decode_chunk


CHUNK_BYTES = 16 * 1024 * 1024


class FileReader(ChunkIngest):
    """Reading the file: the metadata around the events array and the array cut into chunks of
    whole events, each decoded (natively, else by msgspec, else field by field)."""

    _need_more: bool  # (FileState's: declared here too for mypy, which sees the base as Any)

    def _report(self, raw: "io.BufferedReader | Consumed") -> None:
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

    def _read_events(self, raw: "io.BufferedReader | Consumed", chunks: Iterator[bytes], buf: bytearray,
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
        return find_top_level_key(buf, TRACE_EVENTS_KEY)

    def _find_cut(self, buf: bytearray, size: int) -> int | None:
        """Position just after the last complete event in ``buf[:size]`` (the ``}``), or None."""
        search_from = max(0, size - 64 * 1024)  # events are small: the last boundary is near the end
        while True:
            # positions only: a match object locks ``buf`` against resizing while it lives
            starts = [m.start() for m in EVENT_SEPARATOR.finditer(buf, search_from, size)]
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
            self._ingest(native, lambda: buffer_piece(buf, start, end),
                         lambda decoder, marker: self._decode_tail(buf, start, end, decoder, marker))
            return end
        try:
            events = self._decode_in_place(buf, start, end, self.decoder)
        except (msgspec.ValidationError, RecursionError):
            # odd value types, non-object entries or absurd nesting: the slow path, value by value
            try:
                text = self._loose_text(buffer_piece(buf, start, end))
            except msgspec.DecodeError:  # and the cut fell inside a string (the typed decoder stopped before it)
                return self._decode_to_boundary(buf, start, end)
            self._ingest_text(text)
            return end
        except msgspec.DecodeError:
            return self._decode_to_boundary(buf, start, end)
        self._ingest(StructFields(events), lambda: buffer_piece(buf, start, end),
                     lambda decoder, marker: self._decode_tail(buf, start, end, decoder, marker))
        return end

    def _native_fields(self, buf: bytearray, start: int, end: int) -> "NativeFields | None":
        """The chunk's columns from the native decoder, or None when it is off, absent, or declines
        the chunk (then msgspec decodes it, as the reference path)."""
        if native_decode_chunk is None or os.environ.get("TRACEVIEW_KINETO_NATIVE", "1") == "0":
            return None
        result = native_decode_chunk(buf, start, end)
        fields = NativeFields.of(result, buf) if result is not None else None
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
                items.append(ANY_DECODER.decode(piece[first : last + 1]))
            except (RecursionError, msgspec.DecodeError):
                self._count("events_read", 1)
                self._count("skipped_nested_too_deep", 1)
        return items

    def _ingest_text(self, text: bytes) -> None:
        """Decode and ingest a standalone JSON array of well-typed events (the slow paths' output)."""
        holder = bytearray(text)
        events: list[Event] = list(MEMORY_EVENTS_DECODER.decode(text))
        self._ingest(StructFields(events), lambda: text,
                     lambda decoder, marker: self._decode_tail(holder, 1, len(holder) - 1, decoder, marker))

    def _final_chunk(self, buf: bytearray, array_document: bool) -> None:
        array_end = events_array_end(buf)
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
            value = ANY_DECODER.decode(text)
        except msgspec.DecodeError as exc:
            raise TraceFormatError(self.path, f"malformed JSON outside traceEvents ({exc})") from None
        except RecursionError:
            raise TraceFormatError(self.path, "metadata outside traceEvents is nested too deeply to read",
                                   "the file is damaged or not a profiler trace") from None
        return value if isinstance(value, dict) else {}

    def _no_events_array(self, text: bytes) -> None:
        try:
            value = ANY_DECODER.decode(text)
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


class KinetoFile(FileReader):
    """A parser of one Kineto file: :meth:`parse` reads it whole; ``start_events``, ``read_range``
    and ``finish`` let ``parsers/kineto/parallel.py`` drive the reading range by range."""

    # -- reading -----------------------------------------------------------------------
    def parse(self) -> Trace:
        raw, chunks = _open_bytes(self.path)
        with raw, timed(self._clock, "read and decode"):
            self._read(raw, chunks)
        self._count("coerced_invalid_utf8", chunks.invalid_utf8)
        return self._build()

    # -- reading in byte ranges (parsers/kineto/parallel.py) ------------------------------
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
            self.decoder = MEMORY_EVENTS_DECODER
        source = Consumed(blocks)
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
