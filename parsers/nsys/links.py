"""Launch links of an Nsight Systems export: each kernel, copy or memset joined to the runtime or
driver call that launched it, on correlation id and process.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from typing import TYPE_CHECKING

from traceview.model import empty_links, join_on_keys, Kind, lazy_zeros, make_links_table

if TYPE_CHECKING:
    from traceview.parsers.nsys.queries import Group


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


# ------------------------------------------------------------------------------------ processes of GPU rows


def processes_by_launch(gpu: "Group", api_proc: np.ndarray, api_corr: np.ndarray,
                        known: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, int]:
    """Give the rows of a GPU table without ``globalPid`` (an export whose kernel table lacks the
    column: every row's process is -1) a process, in place; rows no join places are skipped
    (``keep`` off, noted as ``no_rank_null_process``).

    Joins, in order: the device, where the GPU tables that have ``globalPid`` (``known``: their
    ``(process, device)`` columns) put it in one process; else the correlation id, where the CUDA
    API calls of one process only carry it (``api_proc``/``api_corr``: the runtime table's process,
    from its ``globalTid``, and correlation id); else the device again, where the rows the
    correlation placed put it in one process; else the export's only process. Returns how many
    rows each placed (``device``, ``correlation``, ``device_of_correlated``, ``only_process``) and
    how many none did (``none``)."""
    rows = np.flatnonzero(gpu.keep & (gpu.proc < 0))
    device = gpu.device[rows].astype(np.int64)
    proc = np.full(len(rows), -1, dtype=np.int64)
    placed = {"device": _place_by_device(proc, device, known)}
    todo = proc < 0
    proc[todo] = _process_by_correlation(gpu.corr[rows][todo].astype(np.int64), api_proc, api_corr)
    placed["correlation"] = int((todo & (proc >= 0)).sum())
    placed["device_of_correlated"] = _place_by_device(proc, device, [(proc[todo & (proc >= 0)],
                                                                       device[todo & (proc >= 0)])])
    processes = set(np.unique(api_proc[api_proc >= 0]).tolist())
    for known_proc, _ in known:
        processes |= set(np.unique(known_proc[known_proc >= 0]).tolist())
    todo = proc < 0
    if len(processes) == 1:
        proc[todo] = processes.pop()
    placed["only_process"] = int((todo & (proc >= 0)).sum())
    none = proc < 0
    placed["none"] = int(none.sum())
    gpu.proc = gpu.proc.astype(np.int64)
    gpu.proc[rows] = proc
    if none.any():
        skipped = np.zeros(len(gpu.keep), dtype=bool)
        skipped[rows[none]] = True
        gpu.notes["no_rank_null_process"] = skipped
        gpu.keep = gpu.keep & ~skipped
    return placed


def _place_by_device(proc: np.ndarray, device: np.ndarray, pairs: list[tuple[np.ndarray, np.ndarray]]) -> int:
    """Rows of ``proc`` still -1 given the process that alone uses their device in ``pairs``, in
    place; how many."""
    todo = proc < 0
    for d, p in _device_processes(pairs).items():
        proc[todo & (device == d)] = p
    return int((todo & (proc >= 0)).sum())


def _process_by_correlation(corr: np.ndarray, api_proc: np.ndarray, api_corr: np.ndarray) -> np.ndarray:
    """The process of the API calls with each correlation id ``corr``, where one process alone has
    calls with it; -1 elsewhere."""
    out = np.full(len(corr), -1, dtype=np.int64)
    ok = (api_proc >= 0) & (api_corr > 0)
    if not ok.any() or not len(corr):
        return out
    pairs = np.unique(np.stack([api_corr[ok].astype(np.int64), api_proc[ok].astype(np.int64)]), axis=1)
    values, first, count = np.unique(pairs[0], return_index=True, return_counts=True)
    values, owner = values[count == 1], pairs[1][first[count == 1]]
    if not len(values):
        return out
    pos = np.minimum(np.searchsorted(values, corr), len(values) - 1)
    hit = (corr > 0) & (values[pos] == corr)
    out[hit] = owner[pos[hit]]
    return out


def _device_processes(pairs: list[tuple[np.ndarray, np.ndarray]]) -> dict[int, int]:
    """device -> its process, for the devices that one process alone uses in ``pairs`` ((process,
    device) columns)."""
    owners: dict[int, set[int]] = {}
    for proc, device in pairs:
        keep = proc >= 0
        if not keep.any():
            continue
        for p, d in np.unique(np.stack([proc[keep].astype(np.int64), device[keep].astype(np.int64)]), axis=1).T:
            owners.setdefault(int(d), set()).add(int(p))
    return {d: next(iter(ps)) for d, ps in owners.items() if len(ps) == 1}
