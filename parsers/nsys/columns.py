"""numpy column helpers of the Nsight parser: distinct values, narrowing, dictionaries, runs of one
value, masks, process and thread ids.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from traceview.model import DeviceInfo, lazy_zeros


def factorize_sorted(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, inverse), by hashing: O(n) where ``np.unique`` sorts every row."""
    # imported here, not at the top: registering this format must not import pandas (~0.25 s),
    # which `traceview analyze` imports while Kineto parse workers run (ParseHooks.meanwhile)
    import pandas as pd

    codes, uniques = pd.factorize(np.asarray(values), sort=True)
    return np.asarray(uniques), np.asarray(codes, dtype=np.int64)


def distinct_values(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (hash based, without the per-row codes ``factorize_sorted`` also makes)."""
    import pandas as pd  # see factorize_sorted

    return np.sort(pd.unique(np.asarray(values)))


def distinct_rows(*columns: np.ndarray) -> list[tuple[int, ...]]:
    """Distinct combinations of equally long integer columns (hash based), in order of first
    appearance. Columns whose value ranges multiply to less than 2**62 are packed into one integer
    per row first (one hash per row instead of a frame of several columns)."""
    if len(columns[0]) == 0:
        return []
    import pandas as pd  # see factorize_sorted

    lows = [int(c.min()) for c in columns]
    spans = [int(c.max()) - lo + 1 for c, lo in zip(columns, lows)]
    if math.prod(spans) < (1 << 62):
        packed = np.zeros(len(columns[0]), dtype=np.int64)
        for c, lo, span in zip(columns, lows, spans):
            packed = packed * span + (c.astype(np.int64) - lo)
        distinct = pd.unique(packed)
        parts = []
        for lo, span in zip(reversed(lows), reversed(spans)):
            parts.append(distinct % span + lo)
            distinct = distinct // span
        return [tuple(int(v) for v in row) for row in zip(*reversed(parts))]
    frame = pd.DataFrame({i: c for i, c in enumerate(columns)}).drop_duplicates()
    return [tuple(int(v) for v in row) for row in frame.itertuples(index=False, name=None)]


def constant(value: int, n: int, dtype: type[np.integer]) -> np.ndarray:
    """A read-only column of ``n`` times ``value`` with no memory behind it (a stride-0 view): a
    group's columns that one value fills (the kind and category of a kernel table, the device of a
    CUDA API call) would otherwise cost a full column each until the events are assembled."""
    return np.broadcast_to(np.asarray(value, dtype=dtype), (n,))


def narrowed(values: np.ndarray) -> np.ndarray:
    """An int64 column as int32 where every value fits (codes into string pools, device ids): half
    the memory while the groups wait for assembly. Values that do not fit stay int64, so what is
    written into the events table is the same either way."""
    if values.dtype != np.int64 or len(values) == 0:
        return values
    if values.strides == (0,):
        return constant(int(values[0]), len(values), np.int32) if -(1 << 31) <= values[0] < (1 << 31) else values
    if -(1 << 31) <= values.min() and values.max() < (1 << 31):
        return values.astype(np.int32)
    return values


def used_positions(codes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct codes, inverse) for codes in ``[0, size)`` in linear time."""
    present = np.zeros(size, dtype=bool)
    present[codes] = True
    used = np.flatnonzero(present)
    rank = np.cumsum(present, dtype=np.int64) - 1
    return used, rank[codes]


def sparse_dictionary(n: int, rows: np.ndarray, indices: np.ndarray, dictionary: pa.Array) -> pa.DictionaryArray:
    """A dictionary column of ``n`` rows that only ``rows`` (distinct) have, with ``indices`` there,
    null elsewhere. The indices are :func:`~traceview.model.lazy_zeros`, of which only the pages of ``rows`` are ever
    written: a column that few rows have (a memcpy's copy kind, an NCCL kernel's collective) costs
    next to no memory, where a dense one costs 4 bytes a row (18 MB at 4.6 M events)."""
    out = lazy_zeros(n, np.int32)
    out[rows] = indices
    validity = None
    if len(rows) < n:  # the bitmap straight from the rows (no bool column as long as the table)
        bits = np.zeros((n + 7) // 8, dtype=np.uint8)
        np.bitwise_or.at(bits, rows >> 3, (np.uint8(1) << (rows & 7).astype(np.uint8)))
        validity = pa.py_buffer(bits)
    arr = pa.Array.from_buffers(pa.int32(), n, [validity, pa.py_buffer(out)], null_count=n - len(rows))
    return pa.DictionaryArray.from_arrays(arr, dictionary)


def decode_text(raw: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
    """Binary values as a string array, and which rows were not UTF-8 (None when all were).

    A bad value keeps its readable part with U+FFFD for the bad bytes."""
    try:
        return raw.cast(pa.string()), None  # validates UTF-8 in C
    except pa.ArrowInvalid:
        pass
    # hostile input only: find and repair the bad values one by one (a clean export never gets here)
    values = raw.to_pylist()
    bad = np.zeros(len(values), dtype=bool)
    for i, v in enumerate(values):
        if v is not None:
            try:
                values[i] = v.decode("utf-8")
            except UnicodeDecodeError:
                values[i], bad[i] = v.decode("utf-8", "replace"), True
    return pa.array(values, pa.string()), bad


#: rows of each repeated piece of a column of runs (:func:`runs`): 2 MB of int64
RUN_PIECE_ROWS = 1 << 18


def runs(values: list[int], bounds: np.ndarray, dtype: type[np.integer]) -> pa.ChunkedArray:
    """A column whose rows ``bounds[i]:bounds[i + 1]`` all hold ``values[i]`` (the rank and pid of
    events sorted by rank; the -1 external ids of an export that has none), as chunks that are one
    small array per value (``RUN_PIECE_ROWS`` rows) repeated, and a slice of it at the end of a run:
    2 MB per value where a flat column costs 8 bytes a row (37 MB at 4.6 M events) though it says
    one number per rank. Arrow tables hold chunked columns as they hold single arrays (a reader
    that needs one array combines the chunks, as for any chunked table), and every value is the
    same as in a flat column."""
    chunks: list[pa.Array] = []
    for value, lo, hi in zip(values, bounds[:-1].tolist(), bounds[1:].tolist()):
        if hi <= lo:
            continue
        piece = pa.array(np.full(min(hi - lo, RUN_PIECE_ROWS), value, dtype=dtype))
        chunks += [piece if hi - at >= len(piece) else piece.slice(0, hi - at) for at in range(lo, hi, len(piece))]
    return pa.chunked_array(chunks, type=pa.from_numpy_dtype(np.dtype(dtype)))


def start_where_no_end(start: np.ndarray, end: np.ndarray, end_null: np.ndarray) -> np.ndarray:
    """``end``, with the start where the end is NULL (``end_null``: 1 or True), in place."""
    no_end = end_null == 1
    if no_end.any():
        end = end.copy() if not end.flags.writeable else end
        end[no_end] = start[no_end]
    return end


def process_key(global_id: np.ndarray) -> np.ndarray:
    """``globalPid >> 24`` (of a globalPid or globalTid), -1 where absent (-1), as int32 where every
    key fits (the groups keep it until the assembly)."""
    key = global_id >> 24
    key[global_id == -1] = -1
    return narrowed(key)


def thread_id(global_tid: np.ndarray) -> np.ndarray:
    """``globalTid & 0xFFFFFF``, -1 where absent (-1), as int32."""
    tid = (global_tid & 0xFFFFFF).astype(np.int32)
    tid[global_tid == -1] = -1
    return tid


def pid_of(proc: int) -> int:
    """The pid of a process key (``globalPid >> 24``; -1: no process)."""
    return proc & 0xFFFFFF if proc != -1 else -1


#: columns ``make_events_table`` fills with -1 or 0 rather than nulls
def masked_array(values: np.ndarray, present: np.ndarray, target: pa.DataType,
                  bitmaps: list[np.ndarray]) -> pa.Array:
    """``values`` as an Arrow array, null where not ``present``: the values buffer is shared, not
    copied, and it is narrowed to int32 here when ``target`` is int32 and every value fits (else it
    stays int64, and ``make_events_table``'s checked cast says what does not fit). The validity
    bitmap is one of ``bitmaps`` where an equal one was made before (the six launch dimensions are
    valid on the same rows: one bitmap, not six), else it is added to them."""
    if pa.types.is_int32(target) and len(values) and -(1 << 31) <= values.min() and values.max() < (1 << 31):
        values = values.astype(np.int32, copy=False)
    arrow_type = pa.from_numpy_dtype(values.dtype)
    if present.all():
        return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])
    bits = np.packbits(present, bitorder="little")
    bits = next((b for b in bitmaps if np.array_equal(b, bits)), bits)
    if not any(b is bits for b in bitmaps):
        bitmaps.append(bits)
    validity = pa.py_buffer(bits)
    return pa.Array.from_buffers(arrow_type, len(values), [validity, pa.py_buffer(values)],
                                 null_count=int(len(values) - np.count_nonzero(present)))


def device_of(device_info: dict[tuple[int, int], DeviceInfo], proc: int, device: int) -> DeviceInfo:
    """The DeviceInfo of a device a process used: its own VM's, else any VM's with that id, else a bare one."""
    return (device_info.get((proc >> 24, device))
            or next((v for (_vm, i), v in device_info.items() if i == device), None)
            or DeviceInfo(id=device))


def threads_of(proc: int, pid: int, t_proc: np.ndarray, t_tid: np.ndarray,
                t_names: pa.DictionaryArray | None) -> dict[str, str]:
    """``"pid:tid" -> thread name`` of one process, from the ThreadNames rows."""
    threads: dict[str, str] = {}
    if t_names is None:
        return threads
    sel = np.flatnonzero(t_proc == proc)
    if len(sel):
        labels = t_names.take(pa.array(sel)).to_pylist()
        for tid, label in zip(t_tid[sel].tolist(), labels):
            if label:
                threads[f"{pid}:{tid}"] = label
    return threads
