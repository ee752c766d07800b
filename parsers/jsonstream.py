"""Streaming JSON primitives shared by the Kineto parser and ``traceview redact``.

* :func:`open_bytes` reads a file as a stream of byte blocks, decompressing gzip on the fly (and
  concatenated gzip members), so a trace is never held whole in memory; a damaged file raises one
  :class:`~traceview.errors.TraceFormatError`.
* :func:`bracket_depths` finds the brackets of a JSON text that lie outside strings and the nesting
  depth after each, vectorised with numpy (used to find real event boundaries and the end of the
  ``traceEvents`` array).
"""

from __future__ import annotations

import codecs
import io
import re
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from traceview.errors import TraceFormatError

READ_BYTES = 4 * 1024 * 1024

UTF8_BOM = b"\xef\xbb\xbf"


class Blocks:
    """The decompressed byte blocks of a file, as valid UTF-8 without a byte-order mark.

    msgspec rejects a string that is not UTF-8 (Latin-1 text, a stray ``\\xff``) with an error
    that names no file; every reader of JSON traces (analyze, redact, convert, check, diff) gets
    its blocks here, so invalid sequences are replaced by U+FFFD once, at the source, and counted
    in ``invalid_utf8``. Pure-ASCII blocks (nearly all traces) skip the check: ``isascii`` is ~6x
    cheaper than decoding.
    """

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self._blocks = blocks
        self._first = True
        self._carry = b""  # the start of a multi-byte character cut by the block boundary
        self.invalid_utf8 = 0  # replacement characters written for invalid byte sequences

    def __iter__(self) -> "Blocks":
        return self

    def __next__(self) -> bytes:
        block = next(self._blocks, None)
        if block is None:
            if not self._carry:
                raise StopIteration
            tail, self._carry = self._carry, b""
            return self._repair(tail, final=True)
        if self._first:
            self._first = False
            if block.startswith(UTF8_BOM):
                block = block[len(UTF8_BOM):]
        if self._carry:
            block, self._carry = self._carry + block, b""
        if block.isascii():
            return block
        decoder = codecs.getincrementaldecoder("utf-8")("strict")
        try:
            decoder.decode(block)
        except UnicodeDecodeError:
            return self._repair(block, final=False)
        pending = decoder.getstate()[0]
        if pending:
            self._carry = pending
            return block[: len(block) - len(pending)]
        return block

    def _repair(self, block: bytes, final: bool) -> bytes:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(block, final)
        pending = decoder.getstate()[0]
        self._carry = pending
        self.invalid_utf8 += text.count("\ufffd") - block.count("\ufffd".encode())
        return text.encode("utf-8")


def open_bytes(path: Path) -> tuple[io.BufferedReader, Blocks]:
    try:
        raw = open(path, "rb")
    except FileNotFoundError:
        raise TraceFormatError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(path, "is a directory, expected a trace file") from None
    except OSError as exc:
        raise TraceFormatError(path, f"cannot be read: {exc.strerror}") from None
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return raw, Blocks(_gunzip_chunks(path, raw))
    return raw, Blocks(_plain_chunks(raw))


def _plain_chunks(raw: io.BufferedReader) -> Iterator[bytes]:
    while True:
        block = raw.read(READ_BYTES)
        if not block:
            return
        yield block


def _gunzip_chunks(path: Path, raw: io.BufferedReader) -> Iterator[bytes]:
    # zlib directly (not gzip.GzipFile) so concatenated members and corrupt input give one error.
    decomp = zlib.decompressobj(wbits=31)
    produced = 0
    try:
        while True:
            block = raw.read(READ_BYTES // 4)
            if not block:
                tail = decomp.flush()
                if tail:
                    yield tail
                produced += len(tail)
                if not decomp.eof:
                    what = "holds no data: it ends after the gzip header" if produced == 0 else "is truncated"
                    raise TraceFormatError(path, f"gzip stream {what}", "the file was cut short; copy it again")
                if produced == 0:
                    raise TraceFormatError(path, "is a gzip file that holds no data (0 bytes once decompressed)",
                                           "the profiler wrote nothing; record the trace again")
                return
            out = decomp.decompress(block)
            while decomp.eof and decomp.unused_data:
                # another gzip member follows
                rest = decomp.unused_data
                decomp = zlib.decompressobj(wbits=31)
                out += decomp.decompress(rest)
            if out:
                produced += len(out)
                yield out
    except zlib.error as exc:
        raise TraceFormatError(path, f"corrupt gzip data ({exc})", "the file is damaged; copy it again") from None


_STRUCTURE_CLASS = np.zeros(256, dtype=np.uint8)
_STRUCTURE_CLASS[[0x22]] = 1  # "
_STRUCTURE_CLASS[[0x5C]] = 2  # backslash
_STRUCTURE_CLASS[[0x7B, 0x5B]] = 3  # { [
_STRUCTURE_CLASS[[0x7D, 0x5D]] = 4  # } ]
_STRUCTURE_TABLE = bytes(_STRUCTURE_CLASS.tolist())  # for bytes.translate, the fastest classifier


def _unescaped_quotes(quotes: np.ndarray, backslashes: np.ndarray) -> np.ndarray:
    """The quotes that end or start strings: a quote is escaped only when an odd run of
    backslashes precedes it (``"C:\\\\runs\\\\"`` ends with an escaped backslash, not an escaped
    quote). Vectorised: each backslash's run start comes from a running maximum."""
    if len(backslashes) == 0 or len(quotes) == 0:
        return quotes
    after = quotes[np.isin(quotes - 1, backslashes)]
    if len(after) == 0:
        return quotes
    starts_run = np.ones(len(backslashes), dtype=bool)
    starts_run[1:] = backslashes[1:] != backslashes[:-1] + 1
    run_start = np.maximum.accumulate(np.where(starts_run, backslashes, 0))
    last = np.searchsorted(backslashes, after - 1)
    run_length = after - run_start[last]  # backslashes from the run start to just before the quote
    escaped = after[run_length % 2 == 1]
    return np.setdiff1d(quotes, escaped, assume_unique=True) if len(escaped) else quotes


def _classify(buf: bytes | memoryview) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions of string-delimiting quotes, bracket positions, whether each bracket opens)."""
    classes = np.frombuffer(bytes(buf).translate(_STRUCTURE_TABLE), dtype=np.uint8)
    positions = np.flatnonzero(classes.view(bool))  # bool view: much faster than != 0
    kinds = classes[positions]
    del classes
    quotes = _unescaped_quotes(positions[kinds == 1], positions[kinds == 2])
    bracket_mask = kinds >= 3
    return quotes, positions[bracket_mask], kinds[bracket_mask] == 3


def bracket_depths(buf: bytes | memoryview) -> tuple[np.ndarray, np.ndarray]:
    """Positions of brackets outside strings and the nesting depth after each.

    One table lookup classifies every byte; everything after works on the few structural
    positions.
    """
    quotes, brackets, opening = _classify(buf)
    inside_string = (np.searchsorted(quotes, brackets) % 2) == 1
    brackets = brackets[~inside_string]
    depth = np.cumsum(np.where(opening[~inside_string], 1, -1))
    return brackets, depth


def structure_at(buf: bytes | memoryview, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``positions`` (sorted): whether it lies inside a string, and the bracket depth
    there. One scan of ``buf`` for any number of positions, so looking for a key among many
    look-alikes (decoy ``{"traceEvents": []}`` objects in metadata) stays linear."""
    quotes, brackets, opening = _classify(buf)
    positions = np.asarray(positions, dtype=np.int64)
    in_string = (np.searchsorted(quotes, positions) % 2) == 1
    outside = (np.searchsorted(quotes, brackets) % 2) == 0
    brackets = brackets[outside]
    depth = np.cumsum(np.where(opening[outside], 1, -1))
    before = np.searchsorted(brackets, positions)
    depth_at = np.where(before > 0, depth[np.maximum(before - 1, 0)] if len(depth) else 0, 0)
    return in_string, depth_at


def find_top_level_key(buf: bytes | bytearray, pattern: "re.Pattern[bytes]") -> int:
    """End of the first match of ``pattern`` (a key, its colon, and what opens its value) that lies
    directly inside the outermost object and outside any string; -1 when there is none."""
    # match on an immutable copy: a match object or view of a bytearray locks it against resizing,
    # and a sampling profiler (Dask's) may hold this frame's locals while the caller trims ``buf``
    data = bytes(buf)
    spans = [m.span() for m in pattern.finditer(data)]
    if not spans:
        return -1
    starts = np.array([s for s, _ in spans], dtype=np.int64)
    # only the text before the last look-alike matters (the events after it can be megabytes)
    in_string, depth = structure_at(data[: int(starts[-1]) + 1], starts)
    ok = np.flatnonzero(~in_string & (depth == 1))
    return spans[int(ok[0])][1] if len(ok) else -1
