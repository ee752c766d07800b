"""Reports kept on disk beside the Arrow cache of traces: the same analysis of the same trace files
with the same options and the same code is read back instead of computed again (a second
``traceview analyze``, ``diff`` or ``check`` of a trace, the app's first page after a restart).

The key (:func:`report_key`) covers the inputs (each file's :func:`traceview.trace_cache.cache_key`:
path, size, mtime, both ends of the file, the parser cache version; and the files a directory scan
skipped, which the report's warnings name), every :class:`Options` field,
and the code a report depends on (:func:`code_fingerprint`: the traceview version and the name,
size and mtime of every module of the core, the analyses and the parsers). Changing any of them
makes a new key; the 16 most recently used files are kept.

The file is data, never pickle, so a file planted in the cache folder can at worst show wrong
figures, not run code::

    MAGIC | Arrow IPC streams | header (UTF-8 JSON) | header length (8 bytes, little-endian) | END

Each table's IPC stream is written as its analysis ends (:class:`ReportWriter`, the pipeline's
table sink), so a computed report's tables are not held to the end nor copied into one blob; the
header comes last and holds the format version, the report's JSON data and, per analysis, its
warnings and where each table's IPC stream lies (offset and length after MAGIC). The file is
written under a temporary name and renamed once complete, so a run killed midway leaves nothing
that is read; it is read back through a memory map (:func:`read_report`). A damaged, foreign or
older file fails to decode (:class:`CacheFormatError`) and the report is computed again. A table
that would not come back identical (a column of mixed Python objects) leaves the report uncached
rather than shown differently from the cache. What is not stored: the analyses' ``Finding`` objects
(their content is in the report data: ``report["findings"]``), so ``report.results[a].findings``
of a report read back is empty; the trace is the one loaded again (from its own Arrow cache).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from traceview.discovery import InputFile
from traceview.findings import AnalysisResult, Options
from traceview.model import Trace
from traceview.report import Report

#: bump when the file layout or the meaning of its contents changes
FORMAT_VERSION = "5"
#: the first bytes of a cache file
MAGIC = b"TRACEVIEW-RESULTS\n"
SUFFIX = ".tvresults"
#: how many report files are kept (least recently used go first)
KEEP = 16
#: bytes of the header length field
LENGTH_BYTES = 8
#: the last bytes of a complete cache file
END = b"\nTRACEVIEW-RESULTS-END\n"
#: the ending of a cache file being written (renamed to ``SUFFIX`` when complete)
TEMP_SUFFIX = ".tmp"
#: a temporary file this old is a writer's that was killed midway, whatever its process id says
STALE_TEMP_S = 24 * 3600

log = logging.getLogger("traceview.report_cache")
_FINGERPRINT: str | None = None


class CacheFormatError(Exception):
    """A cache file (or a report) that cannot be stored or read back exactly."""


# ------------------------------------------------------------------------------------ where and key


def cache_folder() -> Path:
    """The folder of the report files, inside traceview's cache folder."""
    from traceview.trace_cache import cache_dir

    return cache_dir() / "reports"


def cache_path(key: str) -> Path:
    """The file of the cached report ``key``."""
    return cache_folder() / f"{key}{SUFFIX}"


def code_fingerprint() -> str:
    """A digest of the code and data a report depends on: the version, and the name, size and mtime
    of every module of the core (``traceview/*.py``), the analyses, the parsers (with the native
    decoder's binary) and the hardware table (``traceview/hardware``: the peaks the efficiency
    analysis divides by) (computed once)."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        import traceview
        import traceview.analyses as analyses
        import traceview.hardware as hardware
        import traceview.parsers as parsers

        folders = (Path(traceview.__file__).parent, Path(analyses.__file__).parent, Path(parsers.__file__).parent,
                   Path(hardware.__file__).parent)
        digest = hashlib.sha256(traceview.__version__.encode())
        # the parsers' subpackages too (parsers/kineto/): an edited parser module changes the reports
        files = (f for folder in folders for pattern in ("*.py", "*.so", "*.pyd", "*.toml")
                 for f in sorted(folder.rglob(pattern) if folder == folders[2] else folder.glob(pattern)))
        for f in files:
            try:
                st = f.stat()
            except OSError:
                continue
            digest.update(f"{f.parent.name}/{f.name}|{st.st_size}|{st.st_mtime_ns}".encode())
        _FINGERPRINT = digest.hexdigest()[:16]
    return _FINGERPRINT


def ncu_identity(paths: Sequence[str]) -> str:
    """The ncu exports of ``Options.ncu`` by name, size and mtime (a directory: of each file in it),
    so that an edited or added export gives another report."""
    parts = []
    for given in paths:
        path = Path(given)
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        for f in files:
            st = f.stat()
            parts.append(f"{f}|{st.st_size}|{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest() if parts else ""


def report_key(files: Sequence[Path | InputFile], options: Options, skipped: Sequence[Path] = ()) -> str | None:
    """The key of the report of ``files`` (as :func:`traceview.discovery.discover` lists them: its
    records, whose cache keys the load has already computed, or their paths) under ``options``;
    None when a file cannot be read (then nothing is cached). ``skipped``: the files a directory
    scan left out, which the report names in a warning each (as found)."""
    from traceview.trace_cache import cache_key

    try:
        parts = [f.cache_key if isinstance(f, InputFile) else cache_key(Path(f)) for f in files]
        # the user's GPU table by content: an edited file gives new peaks under the same path
        specs = hashlib.sha256(Path(options.gpu_specs).read_bytes()).hexdigest() if options.gpu_specs else ""
        specs += ncu_identity(options.ncu)
        # graph captures by identity (both ends and size, as the trace cache keys a trace)
        parts += [cache_key(Path(p)) for p in options.graph_capture]
    except OSError:
        return None
    settings = json.dumps(asdict(options), sort_keys=True, default=str)
    text = "|".join([FORMAT_VERSION, code_fingerprint(), settings, specs, json.dumps([str(p) for p in skipped]),
                     *parts])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# ------------------------------------------------------------------------------------ read and write


def read_report(key: str, trace: Trace | None, *, logger: logging.Logger = log) -> Report | None:
    """The cached report of ``key`` (its data and its analyses' tables and warnings), attached to
    ``trace``; None when absent. The file is memory-mapped, not read into memory: its tables are
    converted from the mapping when first used. A damaged, foreign or older file is ignored with a
    line on ``logger`` (INFO)."""
    path = cache_path(key)
    try:
        mapped = pa.memory_map(str(path), "r")
    except FileNotFoundError:
        return None  # not cached yet
    except (OSError, pa.ArrowException) as exc:  # (an empty file cannot be mapped)
        logger.info("result cache: ignoring %s (%s); the analyses run again", path.name, exc)
        return None
    try:
        data, results = decode_report(mapped.read_buffer(), path)
    except CacheFormatError as exc:
        logger.info("result cache: ignoring %s (%s); the analyses run again", path.name, exc)
        return None
    try:
        os.utime(path)  # recently used: pruned last
    except OSError:
        pass
    return Report(data, results, trace)


def write_report(key: str, report: Report, *, logger: logging.Logger = log) -> None:
    """Store a whole report under ``key`` at once (its tables given one by one to a
    :class:`ReportWriter`)."""
    writer = ReportWriter(key, logger=logger)
    for name, result in report.results.items():
        for table, frame in result.tables.items():
            writer.add_table(name, table, frame)
        writer.order_tables(name, list(result.tables))
    writer.finish(report)


class ReportWriter:
    """The cache file of one report, written as the report is computed: each table is written as
    its analysis ends (:class:`traceview.pipeline.TableSink`: the pipeline calls
    :meth:`add_table`), so the tables are not held to the end nor copied into one blob; the report's
    data and warnings come last (:meth:`finish`). The file is written under a temporary name and
    renamed at the end: a run killed midway leaves no file that is read (its temporary file is
    removed by a later writer). A table or report that would not read back identical stops the
    writing and nothing is stored (:class:`CacheFormatError`, logged at INFO)."""

    def __init__(self, key: str, *, logger: logging.Logger = log) -> None:
        self.key = key
        self.logger = logger
        self.tables: dict[str, dict[str, list[Any]]] = {}
        self.order: dict[str, list[str]] = {}
        self.file: Any = None
        self.temp_path: Path | None = None
        self.failed = False

    def add_table(self, analysis: str, table: str, frame: pd.DataFrame) -> None:
        """Append ``frame`` (table ``table`` of ``analysis``) to the file, as one Arrow IPC stream."""
        if self.failed:
            return
        try:
            if self.file is None:
                self._open()
            start = self.file.tell()
            object_columns = write_table(self.file, frame, f"{analysis}.{table}")
            self.tables.setdefault(analysis, {})[table] = [start - len(MAGIC), self.file.tell() - start,
                                                           object_columns]
        except CacheFormatError as exc:
            self.logger.info("result cache: not storing report %s (%s)", self.key, exc)
            self.abandon()
        except (OSError, pa.ArrowException):
            self.abandon()  # a read-only or full disk: the cache is an optimisation only

    def order_tables(self, analysis: str, tables: list[str]) -> None:
        """The order of ``analysis``'s tables in the report (every one of them given before)."""
        self.order[analysis] = list(tables)

    def finish(self, report: Report) -> None:
        """Write the report's data and each analysis's warnings and tables' places, rename the file
        to its key's name and prune the folder to the :data:`KEEP` most recent."""
        if self.failed:
            return
        try:
            if self.file is None:
                self._open()
            header = encode_header(report.data, report.results, self.tables, self.order)
            self.file.write(header)
            self.file.write(len(header).to_bytes(LENGTH_BYTES, "little"))
            self.file.write(END)
            self.file.close()
            self.file = None
            assert self.temp_path is not None
            os.replace(self.temp_path, cache_path(self.key))
            prune(cache_folder())
        except CacheFormatError as exc:
            self.logger.info("result cache: not storing report %s (%s)", self.key, exc)
            self.abandon()
        except (OSError, pa.ArrowException):
            self.abandon()

    def abandon(self) -> None:
        """Stop writing and remove the temporary file (a failed table, a failed run)."""
        self.failed = True
        if self.file is not None:
            try:
                self.file.close()
            except (OSError, pa.ArrowException):
                pass
            self.file = None
        if self.temp_path is not None:
            try:
                self.temp_path.unlink()
            except OSError:
                pass

    def _open(self) -> None:
        folder = cache_folder()
        folder.mkdir(parents=True, exist_ok=True)
        self.temp_path = folder / f".{self.key}.{os.getpid()}{TEMP_SUFFIX}"
        self.file = pa.OSFile(str(self.temp_path), "wb")
        self.file.write(MAGIC)


def prune(folder: Path) -> None:
    """Keep the :data:`KEEP` most recent report files of ``folder``, and remove the temporary files
    of writers that are gone (killed midway) or older than :data:`STALE_TEMP_S`."""
    entries = sorted(folder.glob("*" + SUFFIX), key=lambda f: f.stat().st_mtime, reverse=True)
    for old in entries[KEEP:]:
        old.unlink()
    now = time.time()
    for temp in folder.glob(".*" + TEMP_SUFFIX):
        try:
            pid = int(temp.name.rsplit(".", 2)[-2])
            alive = pid == os.getpid() or _process_alive(pid)
            if not alive or now - temp.stat().st_mtime > STALE_TEMP_S:
                temp.unlink()
        except (OSError, ValueError, IndexError):
            continue


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process
    return True


def clear() -> None:
    """Forget every cached report (the Arrow cache of traces is kept); also removes the pickle
    files of older versions of the app's cache, which are never read."""
    folder = cache_folder()
    if folder.is_dir():
        for f in [*folder.glob("*.pkl"), *folder.glob("*" + SUFFIX)]:
            try:
                f.unlink()
            except OSError:
                pass


# ------------------------------------------------------------------------------------ the file format


def _object_columns(frame: pd.DataFrame) -> list[str]:
    """The columns of Python objects (strings mostly) and categoricals of object categories, which
    Arrow reads back with string dtype (restored on reading, so the frame is the same)."""
    out = []
    for column, dtype in frame.dtypes.items():
        is_object = pd.api.types.is_object_dtype
        if is_object(dtype) or isinstance(dtype, pd.CategoricalDtype) and is_object(dtype.categories.dtype):
            out.append(str(column))
    return out


def write_table(sink: Any, frame: pd.DataFrame, where: str) -> list[str]:
    """Write ``frame`` to ``sink`` (an Arrow output stream) as one Arrow IPC stream, once it is
    checked to convert back to an equal frame; its object columns (restored on reading)."""
    object_columns = _object_columns(frame)
    try:
        table = pa.Table.from_pandas(frame, preserve_index=None)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise CacheFormatError(f"table {where} has no Arrow form: {exc}") from None
    back = _frame_of(table, where, object_columns)
    if not back.equals(frame) or not back.dtypes.equals(frame.dtypes) or not back.index.equals(frame.index):
        raise CacheFormatError(f"table {where} does not read back identical")
    del back
    # an empty table has no batches, and a stream without a batch has no dictionaries: the
    # categories of an empty categorical column would be lost, so write one empty batch
    batches = table.to_batches() or [pa.RecordBatch.from_arrays([c.combine_chunks() for c in table.columns],
                                                                schema=table.schema)]
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return object_columns


def _table_bytes(frame: pd.DataFrame, where: str) -> tuple[bytes, list[str]]:
    """``frame`` as the bytes of one Arrow IPC stream (:func:`write_table`), and its object columns."""
    sink = pa.BufferOutputStream()
    object_columns = write_table(sink, frame, where)
    return sink.getvalue().to_pybytes(), object_columns


def _frame_from(blob: bytes | memoryview | pa.Buffer, where: str, object_columns: list[str]) -> pd.DataFrame:
    """The frame of one IPC stream (the buffer is not copied: numeric columns are converted from it)."""
    try:
        table = pa.ipc.open_stream(blob if isinstance(blob, pa.Buffer) else pa.py_buffer(blob)).read_all()
        table.validate(full=True)
    except (pa.ArrowException, OSError, TypeError, ValueError) as exc:  # (a damaged stream: OSError)
        raise CacheFormatError(f"table {where} is damaged: {exc}") from None
    return _frame_of(table, where, object_columns)


def _frame_of(table: pa.Table, where: str, object_columns: list[str]) -> pd.DataFrame:
    try:
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


def encode_header(data: Mapping[str, Any], results: Mapping[str, AnalysisResult],
                  tables: Mapping[str, Mapping[str, list[Any]]], order: Mapping[str, list[str]]) -> bytes:
    """The header of a cache file: the report's ``data``, and per analysis of ``results`` its
    warnings and where each of its tables lies (``tables``: offset and length in the IPC area and
    object columns, by analysis and table; ``order``: each analysis's tables in report order)."""
    analyses: dict[str, Any] = {}
    for name, result in results.items():
        written = tables.get(name, {})
        names = order.get(name, list(written))
        if set(names) != set(written):
            raise CacheFormatError(f"analysis {name!r}: tables {sorted(written)} written, {sorted(names)} in order")
        analyses[name] = {"warnings": list(result.warnings), "tables": {t: written[t] for t in names}}
    header_doc = {"version": FORMAT_VERSION, "data": data, "analyses": analyses}
    try:
        header = json.dumps(header_doc, allow_nan=True).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise CacheFormatError(f"report data is not JSON: {exc}") from None
    if json.loads(header)["data"] != _nan_free(data):
        raise CacheFormatError("report data does not read back identical from JSON")
    return header


def encode_report(data: Mapping[str, Any], results: Mapping[str, AnalysisResult]) -> bytes:
    """The bytes of one cache file for a report's ``data`` and its analyses' ``results`` (the file
    :class:`ReportWriter` writes, in memory)."""
    blobs: list[bytes] = []
    offset = 0
    tables: dict[str, dict[str, list[Any]]] = {}
    for name, result in results.items():
        for table_name, frame in result.tables.items():
            blob, object_columns = _table_bytes(frame, f"{name}.{table_name}")
            tables.setdefault(name, {})[table_name] = [offset, len(blob), object_columns]
            blobs.append(blob)
            offset += len(blob)
    header = encode_header(data, results, tables, {name: list(r.tables) for name, r in results.items()})
    return b"".join([MAGIC, *blobs, header, len(header).to_bytes(LENGTH_BYTES, "little"), END])


def _nan_free(value: Any) -> Any:
    """``value`` as its JSON round trip compares (NaN is never equal to itself: compare as None)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_free(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_free(v) for v in value]
    return value


def decode_report(raw: bytes | memoryview | pa.Buffer,
                  source: Path | None = None) -> tuple[dict[str, Any], dict[str, AnalysisResult]]:
    """(data, results) from the bytes of a cache file (or its memory map, of file ``source``);
    :class:`CacheFormatError` for anything that is not a complete file of this format version. The
    tables are converted when first used (:class:`MappedTables`)."""
    view = memoryview(raw).cast("B") if not isinstance(raw, memoryview) else raw.cast("B")
    trailer = LENGTH_BYTES + len(END)
    if len(view) < len(MAGIC) + trailer or bytes(view[:len(MAGIC)]) != MAGIC:
        raise CacheFormatError("not a traceview result cache file")
    if bytes(view[len(view) - len(END):]) != END:
        raise CacheFormatError("truncated file")
    length = int.from_bytes(view[len(view) - trailer:len(view) - len(END)], "little")
    header_start = len(view) - trailer - length
    if header_start < len(MAGIC):
        raise CacheFormatError("truncated header")
    try:
        header = json.loads(bytes(view[header_start:header_start + length]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CacheFormatError(f"damaged header: {exc}") from None
    if not isinstance(header, dict) or header.get("version") != FORMAT_VERSION:
        raise CacheFormatError(f"format version {_version_of(header)!r}, this traceview reads {FORMAT_VERSION!r}")
    data, analyses = header.get("data"), header.get("analyses")
    if not isinstance(data, dict) or not isinstance(analyses, dict):
        raise CacheFormatError("header without report data")
    body = (raw if isinstance(raw, pa.Buffer) else pa.py_buffer(raw)).slice(len(MAGIC), header_start - len(MAGIC))
    return data, {name: _result(name, entry, body, source) for name, entry in analyses.items()}


def _version_of(header: Any) -> Any:
    return header.get("version") if isinstance(header, dict) else None


def _result(name: str, entry: Any, body: pa.Buffer, source: Path | None) -> AnalysisResult:
    """One analysis's result from its header entry and the IPC area of the file (its tables
    converted when first used: :class:`MappedTables`)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("tables"), dict):
        raise CacheFormatError(f"analysis {name!r}: damaged entry")
    warnings = entry.get("warnings")
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise CacheFormatError(f"analysis {name!r}: damaged warnings")
    stored: dict[str, tuple[pa.Buffer, list[str]]] = {}
    for table_name, where in entry["tables"].items():
        if (not isinstance(where, list) or len(where) != 3 or not all(type(v) is int and v >= 0 for v in where[:2])
                or where[0] + where[1] > body.size or not isinstance(where[2], list)
                or not all(isinstance(c, str) for c in where[2])):
            raise CacheFormatError(f"table {name}.{table_name}: bad entry {str(where)[:80]}")
        offset, length, object_columns = where
        stream = body.slice(offset, length)
        try:  # the stream's first message only (its schema): the data pages are not read here
            pa.ipc.open_stream(stream).schema
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise CacheFormatError(f"table {name}.{table_name} is damaged: {exc}") from None
        stored[table_name] = (stream, object_columns)
    return AnalysisResult(name=name, tables=MappedTables(name, stored, source), findings=[], warnings=list(warnings))


class MappedTables(MutableMapping[str, pd.DataFrame]):
    """An analysis's tables read back from a cache file: each is converted from the file's memory
    map when first used (and kept), so a cached report whose tables are not all used (a rendered
    report reads its data) neither reads nor copies the rest. A table that fails its full check
    then (a file damaged after its header was read) raises :class:`CacheFormatError`, and the file
    is removed so that the next run computes the report again."""

    def __init__(self, analysis: str, stored: dict[str, tuple[pa.Buffer, list[str]]], source: Path | None) -> None:
        self.analysis = analysis
        self.stored = stored
        self.source = source
        self.names = list(stored)
        self.frames: dict[str, pd.DataFrame] = {}

    def __getitem__(self, name: str) -> pd.DataFrame:
        frame = self.frames.get(name)
        if frame is not None:
            return frame
        if name not in self.stored:
            raise KeyError(name)
        stream, object_columns = self.stored[name]
        try:
            frame = _frame_from(stream, f"{self.analysis}.{name}", object_columns)
        except CacheFormatError:
            if self.source is not None:
                self.source.unlink(missing_ok=True)
            raise
        # (the stream is kept: two threads of the app may convert a table at once, harmlessly)
        self.frames[name] = frame
        return frame

    def __setitem__(self, name: str, frame: pd.DataFrame) -> None:
        self.stored.pop(name, None)
        self.frames[name] = frame
        if name not in self.names:
            self.names.append(name)

    def __delitem__(self, name: str) -> None:
        if name not in self.frames and name not in self.stored:
            raise KeyError(name)
        self.frames.pop(name, None)
        self.stored.pop(name, None)
        self.names.remove(name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.names))

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self.frames or name in self.stored

    def __repr__(self) -> str:
        return f"<MappedTables of {self.analysis}: {', '.join(self.names)}>"
