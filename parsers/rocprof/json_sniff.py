"""Telling a rocprofv3 JSON output apart, without the builder (pyarrow.compute): every format is
sniffed in every process that reads a trace."""

from __future__ import annotations

from pathlib import Path

#: the document's first key
KEY = b'"rocprofiler-sdk-tool"'


def looks_like_rocprof_json(_path: Path, head: bytes) -> bool:
    """A JSON object whose first key is rocprofv3's tool entry."""
    return head.lstrip()[:1] == b"{" and KEY in head[:256]
