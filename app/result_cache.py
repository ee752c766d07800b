"""The app's result cache file format: data only (JSON and Arrow IPC), never pickle.

Layout of one file::

    MAGIC | header length (8 bytes, little-endian) | header (UTF-8 JSON) | Arrow IPC streams

The header holds the format version, the report's JSON data and, per analysis, its warnings and
where each table's IPC stream lies (offset and length after the header). Nothing in a file is
executed or imported: a damaged or planted file fails to decode (:class:`CacheFormatError`) and
the caller computes the report again. A table that would not come back identical (a column of
mixed Python objects) makes the report uncachable rather than shown differently from the cache.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
import pyarrow as pa

from traceview.findings import AnalysisResult

_LENGTH_BYTES = 8


class CacheFormatError(Exception):
    """A cache file (or a report) that cannot be stored or read back exactly."""


def _object_columns(frame: pd.DataFrame) -> list[str]:
    """The columns of Python objects (strings mostly) and categoricals of object categories, which
    Arrow reads back with string dtype (restored on reading, so the frame is the same)."""
    out = []
    for column, dtype in frame.dtypes.items():
        is_object = pd.api.types.is_object_dtype
        if is_object(dtype) or isinstance(dtype, pd.CategoricalDtype) and is_object(dtype.categories.dtype):
            out.append(str(column))
    return out


def _table_bytes(frame: pd.DataFrame, where: str) -> bytes:
    """``frame`` as one Arrow IPC stream, checked to decode back to an equal frame."""
    try:
        table = pa.Table.from_pandas(frame, preserve_index=None)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise CacheFormatError(f"table {where} has no Arrow form: {exc}") from None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    blob = sink.getvalue().to_pybytes()
    back = _frame_from(blob, where, _object_columns(frame))
    if not back.equals(frame) or not back.dtypes.equals(frame.dtypes) or not back.index.equals(frame.index):
        raise CacheFormatError(f"table {where} does not read back identical")
    return blob


def _frame_from(blob: bytes, where: str, object_columns: list[str]) -> pd.DataFrame:
    try:
        table = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
        table.validate(full=True)
        frame = table.to_pandas()
        for column in object_columns:
            values = frame[column]
            if isinstance(values.dtype, pd.CategoricalDtype):
                frame[column] = values.cat.set_categories(values.cat.categories.astype(object))
            else:
                frame[column] = values.astype(object)
        return frame
    except (pa.ArrowException, TypeError, ValueError, KeyError) as exc:
        raise CacheFormatError(f"table {where} is damaged: {exc}") from None


def encode_report(data: Mapping[str, Any], results: Mapping[str, AnalysisResult], *, magic: bytes,
                  version: str) -> bytes:
    """The bytes of one cache file for a report's ``data`` and its analyses' ``results``."""
    blobs: list[bytes] = []
    offset = 0
    analyses: dict[str, Any] = {}
    for name, result in results.items():
        tables = {}
        for table_name, frame in result.tables.items():
            blob = _table_bytes(frame, f"{name}.{table_name}")
            tables[table_name] = [offset, len(blob), _object_columns(frame)]
            blobs.append(blob)
            offset += len(blob)
        analyses[name] = {"warnings": list(result.warnings), "tables": tables}
    header_doc = {"version": version, "data": data, "analyses": analyses}
    try:
        header = json.dumps(header_doc, allow_nan=True).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise CacheFormatError(f"report data is not JSON: {exc}") from None
    if json.loads(header)["data"] != _nan_free(data):
        raise CacheFormatError("report data does not read back identical from JSON")
    return b"".join([magic, len(header).to_bytes(_LENGTH_BYTES, "little"), header, *blobs])


def _nan_free(value: Any) -> Any:
    """``value`` as its JSON round trip compares (NaN is never equal to itself: compare as None)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_free(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_free(v) for v in value]
    return value


def decode_report(raw: bytes, *, magic: bytes, version: str) -> tuple[dict[str, Any], dict[str, AnalysisResult]]:
    """(data, results) from the bytes of a cache file; :class:`CacheFormatError` for anything
    that is not a complete file of this ``version``."""
    if not raw.startswith(magic):
        raise CacheFormatError("not a traceview result cache file")
    start = len(magic) + _LENGTH_BYTES
    length = int.from_bytes(raw[len(magic):start], "little")
    if len(raw) < start + length:
        raise CacheFormatError("truncated header")
    try:
        header = json.loads(raw[start:start + length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CacheFormatError(f"damaged header: {exc}") from None
    if not isinstance(header, dict) or header.get("version") != version:
        raise CacheFormatError(f"format version {_version_of(header)!r}, this app reads {version!r}")
    data, analyses = header.get("data"), header.get("analyses")
    if not isinstance(data, dict) or not isinstance(analyses, dict):
        raise CacheFormatError("header without report data")
    body = memoryview(raw)[start + length:]
    return data, {name: _result(name, entry, body) for name, entry in analyses.items()}


def _version_of(header: Any) -> Any:
    return header.get("version") if isinstance(header, dict) else None


def _result(name: str, entry: Any, body: memoryview) -> AnalysisResult:
    """One analysis's result from its header entry and the IPC area of the file."""
    if not isinstance(entry, dict) or not isinstance(entry.get("tables"), dict):
        raise CacheFormatError(f"analysis {name!r}: damaged entry")
    warnings = entry.get("warnings")
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise CacheFormatError(f"analysis {name!r}: damaged warnings")
    tables = {}
    for table_name, where in entry["tables"].items():
        if (not isinstance(where, list) or len(where) != 3 or not all(type(v) is int and v >= 0 for v in where[:2])
                or where[0] + where[1] > len(body) or not isinstance(where[2], list)
                or not all(isinstance(c, str) for c in where[2])):
            raise CacheFormatError(f"table {name}.{table_name}: bad entry {str(where)[:80]}")
        offset, length, object_columns = where
        tables[table_name] = _frame_from(bytes(body[offset:offset + length]), f"{name}.{table_name}", object_columns)
    return AnalysisResult(name=name, tables=tables, findings=[], warnings=list(warnings))
