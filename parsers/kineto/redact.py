"""Redacting a Kineto trace (``traceview redact``; the format's ``InputFormat.redact``).

``redact_kineto`` streams: the decompressed input is cut into chunks of whole events (found with
a vectorised bracket/string scan), each event is decoded with msgspec into ``{key: raw JSON}``
and only ``name`` and ``args`` are looked at; an event that needs no change is written back
byte for byte, so timestamps, ids and numbers keep their exact text and analysis results are
identical. Memory is bounded by the chunk size (8 MiB) plus the top-level metadata. Top-level
metadata before and after ``traceEvents`` is scrubbed whole (strict mode learns host and user
names from the metadata before the events). Output compression follows the output suffix
(``.gz`` -> gzip, ``.json`` -> plain), else the input's. What counts as a secret is
:mod:`traceview.secrets`.
"""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path
from typing import Any, Iterator, Protocol

import msgspec
import numpy as np

from traceview.errors import TraceFormatError
from traceview.parsers.jsonstream import bracket_depths, find_top_level_key, open_bytes
from traceview.redaction import atomic_output, check_paths
from traceview.secrets import RedactionReport, Scrubber, is_host_key, is_secret_key, is_user_key

#: decompressed bytes handled at a time (memory is bounded by this plus the top-level metadata)
CHUNK_BYTES = 8 * 1024 * 1024

_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_RAW_DICT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')

def _wants_gzip(in_path: Path, out_path: Path) -> bool:
    name = out_path.name.lower()
    if name.endswith(".gz"):
        return True
    if name.endswith(".json"):
        return False
    with open(in_path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


class _ByteSink(Protocol):
    """Where a redacted copy is written: a binary file or a gzip stream."""

    def write(self, data: bytes, /) -> int: ...


class _KinetoRedactor:
    def __init__(self, path: Path, out: _ByteSink, scrubber: Scrubber, chunk_bytes: int) -> None:
        self.path = path
        self.out = out
        self.s = scrubber
        self.chunk_bytes = max(1024, chunk_bytes)
        self.first_event = True
        self._name_memo: dict[bytes, tuple[bytes | None, tuple[tuple[str, str], ...]]] = {}

    # -- driver --------------------------------------------------------------------
    def run(self) -> None:
        raw, blocks = open_bytes(self.path)
        with raw:
            buf = bytearray()
            # 1. the head: everything before the events array
            start, array_document, eof = self._read_head(buf, blocks)
            self._write_head(bytes(buf[:start]), array_document)
            del buf[:start]
            # 2. the events, in chunks of whole events
            self._copy_events(buf, blocks, eof)
            # 3. the rest: last events, the closing bracket, metadata after the events
            self._write_tail(bytes(buf), array_document)

    def _read_head(self, buf: bytearray, blocks: Iterator[bytes]) -> tuple[int, bool, bool]:
        """Read blocks into ``buf`` up to the opening bracket of the events array.

        Returns (position just after that bracket; whether the document is a bare array of events
        rather than an object with ``traceEvents``; whether the input is exhausted).
        """
        eof = False
        while True:
            block = next(blocks, None)
            if block is None:
                eof = True
            else:
                buf += block
            stripped = buf.lstrip()
            if stripped[:1] == b"[":
                return len(buf) - len(stripped) + 1, True, eof
            if stripped and stripped[:1] != b"{":
                raise TraceFormatError(self.path, "is not a JSON trace (does not start with '{' or '[')",
                                       "expected PyTorch profiler JSON or an Nsight Systems .sqlite export")
            start = self._find_events_key(buf)
            if start >= 0:
                return start, False, eof
            if eof:
                if not bytes(buf).strip():
                    raise TraceFormatError(self.path, "is empty")
                raise TraceFormatError(self.path, "has no traceEvents array (JSON, but not a profiler trace)",
                                       "expected a PyTorch profiler / Chrome trace")

    def _write_head(self, head_text: bytes, array_document: bool) -> None:
        """Write the document up to the events array's ``[`` (the head's members scrubbed)."""
        if array_document:
            self.out.write(b"[")
            return
        head = self._decode_object(head_text, closing=True)
        self.s.learn({k: self._loads(v) for k, v in head.items()})
        self.out.write(b"{")
        self._write_members(head, "")
        self.out.write(b"," if head else b"")
        self.out.write(b'"traceEvents":[')

    def _copy_events(self, buf: bytearray, blocks: Iterator[bytes], eof: bool) -> None:
        """Scrub and write the events, in chunks of whole events, until the input is exhausted
        (what is left in ``buf`` is the last chunk and the document's tail)."""
        while True:
            while not eof and len(buf) < self.chunk_bytes:
                block = next(blocks, None)
                if block is None:
                    eof = True
                else:
                    buf += block
            if eof:
                return
            cut = self._last_event_end(buf)
            if cut is None:
                # no complete event yet (one event larger than a chunk): read more
                block = next(blocks, None)
                if block is None:
                    eof = True
                else:
                    buf += block
                    self.chunk_bytes = max(self.chunk_bytes, len(buf) + 1)
                continue
            self._events(bytes(buf[:cut]))
            del buf[:cut]

    def _write_tail(self, data: bytes, array_document: bool) -> None:
        """Write the last events, the closing bracket and the members after the events array."""
        brackets, depth = bracket_depths(data)
        closing = np.flatnonzero(depth == -1)
        if len(closing) == 0:
            raise TraceFormatError(self.path, "JSON is truncated: the traceEvents array never closes",
                                   "the file was cut short (profiler killed, or an incomplete copy)")
        array_end = int(brackets[closing[0]])
        self._events(data[:array_end])
        self.out.write(b"]")
        rest = data[array_end + 1:].strip()
        if array_document:
            if rest:
                raise TraceFormatError(self.path, "has data after the closing ']' of the event array")
            return
        if not rest.endswith(b"}"):
            raise TraceFormatError(self.path, "JSON is truncated after the traceEvents array", "the file was cut short")
        inner = rest[:-1].strip().lstrip(b",").strip()
        if inner:
            tail = self._decode_object(b"{" + inner + b"}", closing=False)
            self.s.learn({k: self._loads(v) for k, v in tail.items()})
            self.out.write(b",")
            self._write_members(tail, "")
        self.out.write(b"}")

    def _find_events_key(self, buf: bytearray) -> int:
        # the parsers' scan: one pass, escapes counted (a string ending in a backslash), decoys ignored
        return find_top_level_key(buf, _TRACE_EVENTS_KEY)

    @staticmethod
    def _last_event_end(buf: bytearray) -> int | None:
        """End (exclusive) of the last complete event in ``buf`` (which starts between events)."""
        window = bytes(buf)
        brackets, depth = bracket_depths(window)
        ends = np.flatnonzero(depth == 0)
        if len(ends) == 0:
            return None
        if (depth < 0).any():
            return None  # the array closes in this buffer: leave it for the final pass
        return int(brackets[ends[-1]]) + 1

    # -- pieces --------------------------------------------------------------------
    def _decode_object(self, text: bytes, closing: bool) -> dict[str, msgspec.Raw]:
        if closing:
            text = text.rstrip()
            key_at = text.rfind(b'"traceEvents"')
            text = text[:key_at].rstrip().rstrip(b",") + b"}"
        try:
            return _RAW_DICT.decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise TraceFormatError(self.path, f"malformed JSON outside traceEvents ({exc})") from None

    def _loads(self, raw: msgspec.Raw) -> Any:
        return _ANY.decode(raw)

    def _write_members(self, members: dict[str, msgspec.Raw], where: str) -> None:
        new = self._scrub_members(members, where)
        self.out.write(msgspec.json.encode(new if new is not None else members)[1:-1])

    def _scrub_members(self, members: dict[str, msgspec.Raw], where: str) -> dict[str, msgspec.Raw] | None:
        """Scrubbed copy of a ``{key: raw JSON}`` object, or None when nothing changed."""
        out: dict[str, msgspec.Raw] | None = None
        for key, raw in members.items():
            data = bytes(raw)
            child = f"{where}.{key}" if where else key
            secret = is_secret_key(key)
            strict_key = self.s.strict and (is_host_key(key) or is_user_key(key))
            if not secret and not strict_key and b'"' not in data:
                continue  # numbers, booleans, null, containers without strings
            if data in (b"true", b"false", b"null"):
                continue
            value: Any = self._loads(raw)
            new: Any = self.s.keyed(key, value, child)
            if new != value or type(new) is not type(value):
                if out is None:
                    out = dict(members)
                out[key] = msgspec.Raw(msgspec.json.encode(new))
        return out

    def _events(self, data: bytes) -> None:
        body = data.strip().strip(b",").strip()
        if not body:
            return
        try:
            events = _RAW_LIST.decode(b"[" + body + b"]")
        except msgspec.DecodeError as exc:
            raise TraceFormatError(self.path, f"malformed JSON in traceEvents ({exc})",
                                   "the file is damaged or not a Chrome trace") from None
        pieces = []
        for raw in events:
            pieces.append(self._event(raw))
        if not pieces:
            return
        if not self.first_event:
            self.out.write(b",")
        self.first_event = False
        self.out.write(b",".join(pieces))

    def _event(self, raw: msgspec.Raw) -> bytes:
        data = bytes(raw)
        if data[:1] != b"{":
            return data
        try:
            event = _RAW_DICT.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return data
        changed: dict[str, msgspec.Raw] | None = None
        name = event.get("name")
        if name is not None:
            new_name = self._name(bytes(name))
            if new_name is not None:
                changed = dict(event)
                changed["name"] = msgspec.Raw(new_name)
        args = event.get("args")
        if args is not None:
            args_data = bytes(args)
            if args_data[:1] == b"{" and len(args_data) > 2:
                try:
                    members = _RAW_DICT.decode(args_data)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    members = None
                if members:
                    new_args = self._scrub_members(members, "event args")
                    if new_args is not None:
                        changed = changed if changed is not None else dict(event)
                        changed["args"] = msgspec.Raw(msgspec.json.encode(new_args))
        if changed is None:
            return data
        return msgspec.json.encode(changed)

    def _name(self, raw_name: bytes) -> bytes | None:
        """New JSON for an event name, or None when it is unchanged (memoised, hits replayed)."""
        found = self._name_memo.get(raw_name)
        if found is not None:
            self.s.replay(found[1])
            return found[0]
        result: bytes | None = None
        hits: tuple[tuple[str, str], ...] = ()
        if raw_name[:1] == b'"':
            name = _ANY.decode(raw_name)
            new, hits = self.s.capture(self.s.text, name, "event name")
            if new != name:
                result = msgspec.json.encode(new)
        if len(self._name_memo) > 200_000:
            self._name_memo.clear()
        self._name_memo[raw_name] = (result, hits)
        return result


def redact_kineto(in_path: str | os.PathLike[str], out_path: str | os.PathLike[str], *, strict: bool = False,
                  chunk_bytes: int = CHUNK_BYTES) -> RedactionReport:
    """Write a shareable copy of a Kineto trace (``.json`` or ``.json.gz``); see the module docstring.

    Top-level metadata values and event ``args`` values are scrubbed; event names only lose
    secrets (and, with ``strict``, directory parts of paths). Everything else is copied as is.
    """
    in_path, out_path = Path(in_path), Path(out_path)
    check_paths(in_path, out_path)
    scrubber = Scrubber(strict)
    scrubber.report.input_format = "kineto"
    compress = _wants_gzip(in_path, out_path)
    try:
        _redact_kineto_to(in_path, out_path, scrubber, compress, chunk_bytes)
    except (RecursionError, UnicodeDecodeError):
        # msgspec's errors for absurd nesting and undecodable text are not msgspec errors
        raise TraceFormatError(in_path, "holds JSON nested too deeply (or text not decodable) to redact safely",
                               "no output was written") from None
    return scrubber.report


def _redact_kineto_to(in_path: Path, out_path: Path, scrubber: Scrubber, compress: bool, chunk_bytes: int) -> None:
    with atomic_output(out_path) as tmp:
        with open(tmp, "wb") as sink:
            if compress:
                # no file name and a zero mtime in the gzip header: nothing about the machine
                with gzip.GzipFile(filename="", mode="wb", fileobj=sink, compresslevel=6, mtime=0) as gz:
                    _KinetoRedactor(in_path, gz, scrubber, chunk_bytes).run()
            else:
                _KinetoRedactor(in_path, sink, scrubber, chunk_bytes).run()

