"""Redaction: shareable copies of trace files with every secret replaced (``traceview redact``).

What counts as a secret, and the scrubbing itself, is :mod:`traceview.secrets`. How a file is
copied with its secrets replaced is its format's own: each :class:`traceview.registry.InputFormat`
declares ``redact`` (Kineto JSON: ``traceview.parsers.kineto.redact``, streamed chunk by chunk,
unchanged events copied byte for byte; Nsight SQLite: ``traceview.parsers.nsys.redact``, every
text column scrubbed, then ``VACUUM``). :func:`redact_file` finds the format by content and asks
it; a third format that declares its redaction needs no edit here.

Every redaction writes to a temporary file next to the output and renames it at the end: an error
never leaves a partial output file (``traceview.redaction``).
"""

from __future__ import annotations

import os
from pathlib import Path

from traceview.errors import TraceFormatError
from traceview.parsers.kineto.redact import redact_kineto
from traceview.parsers.nsys.redact import redact_nsys
from traceview.registry import InputFormat
from traceview.secrets import (HIGH_ENTROPY_BITS, REDACTED, RedactionReport, is_secret_key, looks_secret, scrub,
                               scrub_metadata, scrub_text, scrub_with_report)

__all__ = [
    "REDACTED",
    "HIGH_ENTROPY_BITS",
    "RedactionReport",
    "is_secret_key",
    "looks_secret",
    "scrub",
    "scrub_text",
    "scrub_with_report",
    "scrub_metadata",
    "redact_file",
    "redact_kineto",
    "redact_nsys",
]


def redact_file(in_path: str | os.PathLike[str], out_path: str | os.PathLike[str], *,
                strict: bool = False) -> tuple[InputFormat, RedactionReport]:
    """Write a shareable copy of ``in_path`` to ``out_path`` with its format's redaction; returns the
    format and what was replaced. A format without a redaction is one clear line."""
    from traceview.discovery import detect_format, format_named

    path = Path(in_path)
    fmt = format_named(detect_format(path))
    assert fmt is not None  # detect_format names a registered format
    if fmt.redact is None:
        raise TraceFormatError(path, f"is {fmt.description}, which traceview cannot redact")
    return fmt, fmt.redact(path, Path(out_path), strict=strict)
