"""Launch links of an Nsight Systems export: each kernel, copy or memset joined to the runtime or
driver call that launched it, on correlation id and process.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from traceview.model import empty_links, join_on_keys, Kind, lazy_zeros, make_links_table


def launch_links(rank: np.ndarray, kind: np.ndarray, corr: np.ndarray, exact: bool = True) -> pa.Table:
    """Launch links: API call -> GPU activity with the same correlation id in one process (= one rank).

    With ``exact``, on one packed integer key per (rank, correlation) (:func:`_exact_links`); else
    (``ROW_READER = "sqlite3"``, the reader before issue 12, or a correlation id beyond 32 bits)
    with ``join_on_keys``'s hashed search."""
    is_api = (kind == int(Kind.RUNTIME)) & (corr > 0)
    gpu_rows = np.flatnonzero(_kind_in(kind, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC)) & (corr > 0))
    if not (len(gpu_rows) and is_api.any()):
        return empty_links()
    # a key fits when every correlation id does (ranks always do): checked on the whole column,
    # which needs no gathered copy of the API calls' ids
    right_key = _packed_key(rank[gpu_rows], corr[gpu_rows]) if exact and corr.max() < (1 << 32) else None
    if right_key is not None:
        src, dst = _exact_links(is_api, rank, corr, gpu_rows, right_key)
    else:
        api_rows = np.flatnonzero(is_api)
        left, right = join_on_keys([rank[api_rows], corr[api_rows]], [rank[gpu_rows], corr[gpu_rows]])
        src, dst = api_rows[left], gpu_rows[right]
        del api_rows, left, right
    del is_api, gpu_rows, right_key
    if not len(src):
        return empty_links()
    # the category as a dictionary array built here (indices: untouched zeros), where
    # make_links_table would encode a Python list of one string per link
    category = pa.DictionaryArray.from_arrays(pa.array(lazy_zeros(len(src), np.int32)),
                                              pa.array(["correlation"], pa.string()))
    return make_links_table(rank[src], "launch", category, src, dst)


#: events searched at a time by :func:`_exact_links`: its working arrays are this long, not as
#: long as the API calls (3 M on the 292 MB benchmark export: ~100 MB of int64 positions and keys)
JOIN_BLOCK_ROWS = 1 << 20


def _exact_links(is_api: np.ndarray, rank: np.ndarray, corr: np.ndarray, gpu_rows: np.ndarray,
                 gpu_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(API call rows, GPU rows) of an inner equi-join on one exact int64 key, ordered by API row,
    then GPU row (as :func:`traceview.model.join_on_keys`). ``gpu_key`` is ``(rank << 32) |
    correlation`` of ``gpu_rows``; the API calls' keys are made and searched a block of events at
    a time. The keys are the values themselves, so no match needs checking, and the result is in
    order as built: blocks and the API rows in them in turn, and for each the GPU rows in row
    order (a stable sort of the GPU keys keeps them so)."""
    order = np.argsort(gpu_key, kind="stable")
    sorted_key = gpu_key[order]
    sorted_rows = gpu_rows[order]
    del order
    srcs, dsts = [], []
    for first_row in range(0, len(is_api), JOIN_BLOCK_ROWS):
        api = np.flatnonzero(is_api[first_row:first_row + JOIN_BLOCK_ROWS])
        api += first_row
        key = _packed_key(rank[api], corr[api])
        assert key is not None  # every rank and correlation id fits (checked by the caller)
        lo = np.searchsorted(sorted_key, key, "left")
        counts = np.searchsorted(sorted_key, key, "right")
        del key
        counts -= lo
        hit = np.flatnonzero(counts)
        lo, counts = lo[hit], counts[hit]
        total = int(counts.sum())
        if total == len(hit):  # one match per matched API call (also: no match at all)
            srcs.append(api[hit])
            dsts.append(sorted_rows[lo])
            continue
        within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        srcs.append(np.repeat(api[hit], counts))
        dsts.append(sorted_rows[np.repeat(lo, counts) + within])
    return np.concatenate(srcs), np.concatenate(dsts)


def _kind_in(kind: np.ndarray, kinds: tuple[Kind, ...]) -> np.ndarray:
    """Rows whose kind is one of ``kinds``, by one comparison each: ``np.isin`` looks int8 codes up
    through an int64 index as long as the rows (35 MB at 4.6 M events)."""
    out = np.zeros(len(kind), dtype=bool)
    for k in kinds:
        out |= kind == int(k)
    return out


def _packed_key(high: np.ndarray, low: np.ndarray) -> np.ndarray | None:
    """``(high << 32) | low`` as int64: one exact integer per (rank, correlation) pair; None when a
    value does not fit (``high`` in ``[0, 2**31)``, ``low`` in ``[0, 2**32)``). ``low`` is taken
    over (overwritten when it is int64: callers pass a fresh gather), so that one key array and one
    shifted copy of ``high`` are all the memory this needs."""
    if len(high) and (high.min() < 0 or high.max() >= 1 << 31 or low.min() < 0 or low.max() >= 1 << 32):
        return None
    key = low.astype(np.int64, copy=False)
    shifted = high.astype(np.int64)
    shifted <<= 32
    key |= shifted
    return key
