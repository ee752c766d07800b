"""The trace cache: a parsed :class:`Trace` kept as Arrow IPC files, keyed by the file's identity
and content and by the parser's code, so a second load of the same file is a memory map.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from traceview.errors import require_regular_file
from traceview.model import Trace, metadata_from_bytes, metadata_to_bytes, steps_from_annotations
from traceview.parsing import cache_dir

__all__ = ["CACHE_VERSION", "FILE_END_BYTES", "cache_dir", "cache_key", "digest_file_ends", "entry_path",
           "parser_fingerprint", "read_cached_trace", "write_cached_trace"]

#: Bump when parser output changes, so stale cache entries are never read.
CACHE_VERSION = "8"  # 2: allocator events in Trace.memory (a ".memory" file beside the events);
# 3: counter samples in Trace.counters (".counters"), async b/e pairs and n instants as events;
# 4: text pid/tid ids numbered in event order (the same with any --jobs); RankInfo.activity_dropped
# 5: op input columns (input_dims, input_types, input_strides, concrete_inputs), still empty;
# 6: those columns filled by the Kineto parser; 7: fwdbwd links derived from sequence numbers
# (parsers/kineto/autograd.py); 8: recorded_flops, recorded_bytes (XSpace only).
# Besides, every key holds parser_fingerprint(): a parser edited or
# rebuilt in place (an editable install) never reads a Trace its old code wrote.

#: the tables of a Trace beside its events, each in a file of this suffix next to the events' file
SIDE_TABLES = (".links", ".memory", ".counters")

#: how much of each end of a file its content key reads
FILE_END_BYTES = 1 << 20


def cache_key(path: Path, st: os.stat_result | None = None) -> str:
    """Identity and content: resolved path, size, mtime, and a hash of the first and last MiB.

    Hashing the whole file would cost as much as parsing it; size + mtime + both ends catch
    rewrites in practice, and the parser version invalidates old entries. ``st``: the file's stat
    when the caller has it (``traceview.discovery.InputFile``, which computes its key once)."""
    if st is None:
        st = require_regular_file(path)  # before opening: a FIFO would block the open forever
    digest = hashlib.sha256()
    digest.update(f"{CACHE_VERSION}|{parser_fingerprint()}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    digest_file_ends(digest, path, st.st_size)
    return digest.hexdigest()[:32]


@functools.lru_cache(maxsize=1)
def parser_fingerprint() -> str:
    """The path, size and mtime of every parser module and native decoder (``traceview.parsers``
    and its subpackages) and of the model's schema (``traceview/model.py``), as one digest
    (computed once per process)."""
    import traceview.parsers as parsers

    folder = Path(parsers.__file__).parent
    files = [*sorted(f for pattern in ("*.py", "*.so", "*.pyd") for f in folder.rglob(pattern)),
             Path(__file__).with_name("model.py")]
    digest = hashlib.sha256()
    for f in files:
        with contextlib.suppress(OSError):
            st = f.stat()
            name = f.relative_to(folder) if f.is_relative_to(folder) else Path(f.name)
            digest.update(f"{name.as_posix()}|{st.st_size}|{st.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def digest_file_ends(digest: Any, path: Path, size: int) -> None:
    """Feed ``digest`` the first :data:`FILE_END_BYTES` of ``path`` (of ``size`` bytes) and, when the
    file is longer than both ends, its last ones: a content key that costs 2 MiB of reading whatever
    the file's size (the trace cache's keys, the run history's identities)."""
    with open(path, "rb") as f:
        digest.update(f.read(FILE_END_BYTES))
        if size > 2 * FILE_END_BYTES:
            f.seek(-FILE_END_BYTES, os.SEEK_END)
            digest.update(f.read(FILE_END_BYTES))


def entry_path(key: str) -> Path:
    """The events file of the cache entry ``key`` (its other tables lie beside it)."""
    return cache_dir() / f"{key}.arrow"


def write_cached_trace(trace: Trace, target: Path) -> None:
    """Store ``trace`` as the entry ``target`` (:func:`entry_path`): each table written to a
    temporary file and renamed, the events last, so a reader finds a whole entry or none."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    meta = metadata_to_bytes(trace.ranks, trace.warnings)
    events = trace.events.replace_schema_metadata({b"traceview": meta})
    with pa.OSFile(str(tmp), "wb") as sink:
        with ipc.new_file(sink, events.schema) as writer:
            writer.write_table(events)
    for suffix, table in zip(SIDE_TABLES, (trace.links, trace.memory, trace.counters)):
        with pa.OSFile(str(tmp) + suffix, "wb") as sink:
            with ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
        os.replace(str(tmp) + suffix, str(target) + suffix)
    os.replace(tmp, target)


def read_cached_trace(target: Path) -> Trace | None:
    """The Trace stored as ``target`` (memory-mapped), or None when absent or damaged (a damaged
    entry is parsed again, never trusted)."""
    paths = [target, *(Path(str(target) + suffix) for suffix in SIDE_TABLES)]
    if not all(p.exists() for p in paths):
        return None
    try:
        events, links, memory, counters = (ipc.open_file(pa.memory_map(str(p))).read_all() for p in paths)
        meta = (events.schema.metadata or {}).get(b"traceview")
        if meta is None:
            return None
        ranks, warnings = metadata_from_bytes(meta)
    except (pa.ArrowInvalid, OSError, ValueError, KeyError):
        return None
    events = events.replace_schema_metadata(None)
    return Trace(events=events, links=links, ranks=ranks, steps=steps_from_annotations(events), warnings=warnings,
                 memory=memory, counters=counters)
