"""Streaming JSON primitives shared by the Kineto parser and ``traceview redact``.

* :func:`open_bytes` reads a file as a stream of byte blocks, decompressing gzip on the fly (and
  concatenated gzip members), so a trace is never held whole in memory; a damaged file raises one
  :class:`~traceview.errors.TraceFormatError`.
* :func:`bracket_depths` finds the brackets of a JSON text that lie outside strings and the nesting
  depth after each, vectorised with numpy (used to find real event boundaries and the end of the
  ``traceEvents`` array).
"""

from __future__ import annotations

import io
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from traceview.errors import TraceFormatError

READ_BYTES = 4 * 1024 * 1024

def open_bytes(path: Path) -> tuple[io.BufferedReader, Iterator[bytes]]:
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
        return raw, _gunzip_chunks(path, raw)
    return raw, _plain_chunks(raw)


def _plain_chunks(raw: io.BufferedReader) -> Iterator[bytes]:
    while True:
        block = raw.read(READ_BYTES)
        if not block:
            return
        yield block


def _gunzip_chunks(path: Path, raw: io.BufferedReader) -> Iterator[bytes]:
    # zlib directly (not gzip.GzipFile) so concatenated members and corrupt input give one error.
    decomp = zlib.decompressobj(wbits=31)
    try:
        while True:
            block = raw.read(READ_BYTES // 4)
            if not block:
                tail = decomp.flush()
                if tail:
                    yield tail
                if not decomp.eof:
                    raise TraceFormatError(path, "gzip stream is truncated", "the file was cut short; copy it again")
                return
            out = decomp.decompress(block)
            while decomp.eof and decomp.unused_data:
                # another gzip member follows
                rest = decomp.unused_data
                decomp = zlib.decompressobj(wbits=31)
                out += decomp.decompress(rest)
            if out:
                yield out
    except zlib.error as exc:
        raise TraceFormatError(path, f"corrupt gzip data ({exc})", "the file is damaged; copy it again") from None


_STRUCTURE_CLASS = np.zeros(256, dtype=np.uint8)
_STRUCTURE_CLASS[[0x22]] = 1  # "
_STRUCTURE_CLASS[[0x5C]] = 2  # backslash
_STRUCTURE_CLASS[[0x7B, 0x5B]] = 3  # { [
_STRUCTURE_CLASS[[0x7D, 0x5D]] = 4  # } ]
_STRUCTURE_TABLE = bytes(_STRUCTURE_CLASS.tolist())  # for bytes.translate, the fastest classifier


def bracket_depths(buf: bytes | memoryview) -> tuple[np.ndarray, np.ndarray]:
    """Positions of brackets outside strings and the nesting depth after each.

    One table lookup classifies every byte; everything after works on the few structural
    positions. Quotes preceded by an odd run of backslashes are escaped (rare: a short loop).
    """
    data = np.frombuffer(buf, dtype=np.uint8)
    classes = np.frombuffer(bytes(buf).translate(_STRUCTURE_TABLE), dtype=np.uint8)
    positions = np.flatnonzero(classes.view(bool))  # bool view: much faster than != 0
    kinds = classes[positions]
    del classes
    quotes = positions[kinds == 1]
    backslashes = positions[kinds == 2]
    if len(backslashes) and len(quotes):
        maybe_escaped = quotes[np.isin(quotes - 1, backslashes)]
        escaped = []
        for q in maybe_escaped.tolist():
            run = 0
            i = q - 1
            while i >= 0 and data[i] == 0x5C:
                run += 1
                i -= 1
            if run % 2:
                escaped.append(q)
        if escaped:
            quotes = np.setdiff1d(quotes, np.asarray(escaped, dtype=quotes.dtype), assume_unique=True)
    bracket_mask = kinds >= 3
    brackets = positions[bracket_mask]
    opening = kinds[bracket_mask] == 3
    inside_string = (np.searchsorted(quotes, brackets) % 2) == 1
    brackets = brackets[~inside_string]
    depth = np.cumsum(np.where(opening[~inside_string], 1, -1))
    return brackets, depth
