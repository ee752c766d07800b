"""Shared classification of GPU activity (docs/metrics.md), so every analysis counts alike.

* GPU activity = kernels, memcpy and memset (not sync events), all streams of a device.
* Communication kernel: the name contains ``nccl`` or ``rccl`` (any case; covers ``ncclKernel_*``
  and ``ncclDevKernel_*``), or the event carries collective args (non-null ``collective``).
* Compute = the other kernels. Memory = memcpy + memset.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceview.model import Kind, Trace

#: class codes returned by :func:`activity_class`
NONE = -1
COMPUTE = 0
COMMUNICATION = 1
MEMORY = 2
CLASS_NAMES = {COMPUTE: "compute", COMMUNICATION: "communication", MEMORY: "memory"}

COMM_NAME = re.compile(r"nccl|rccl", re.IGNORECASE)
#: the runtime API calls that block the host until the GPU catches up
SYNC_API = re.compile(r"Synchronize")


def name_matches(trace: Trace, pattern: re.Pattern[str] | str) -> np.ndarray:
    """Boolean per event: its name matches ``pattern`` (regex search; evaluated per distinct name)."""
    return column_matches(trace, "name", pattern)


def column_matches(trace: Trace, column: str, pattern: re.Pattern[str] | str) -> np.ndarray:
    """Boolean per event: the dictionary column ``column`` matches ``pattern`` (null: False)."""
    n = trace.events.num_rows
    if n == 0:
        return np.zeros(0, dtype=bool)
    col = trace.events.column(column)
    col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    pat = re.compile(pattern) if isinstance(pattern, str) else pattern
    dictionary = col.dictionary.to_pylist()
    hit = np.array([bool(v is not None and pat.search(v)) for v in dictionary] + [False], dtype=bool)
    codes = col.indices.fill_null(len(dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)
    return hit[codes]


def is_communication(trace: Trace) -> np.ndarray:
    """Boolean per event: a communication kernel (see module docstring)."""
    kinds = trace.kind_codes()
    collective = trace.events.column("collective")
    has_collective = np.asarray(collective.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    return (kinds == int(Kind.KERNEL)) & (name_matches(trace, COMM_NAME) | has_collective)


def activity_class(trace: Trace) -> np.ndarray:
    """int8 per event: COMPUTE, COMMUNICATION, MEMORY, or NONE (not GPU activity)."""
    kinds = trace.kind_codes()
    out = np.full(kinds.size, NONE, dtype=np.int8)
    out[kinds == int(Kind.KERNEL)] = COMPUTE
    out[is_communication(trace)] = COMMUNICATION
    out[(kinds == int(Kind.MEMCPY)) | (kinds == int(Kind.MEMSET))] = MEMORY
    return out


def is_sync_call(trace: Trace) -> np.ndarray:
    """Boolean per event: a host runtime call whose name contains ``Synchronize``."""
    return (trace.kind_codes() == int(Kind.RUNTIME)) & name_matches(trace, SYNC_API)


def names_categorical(trace: Trace, rows: np.ndarray, column: str = "name", missing: str = "") -> pd.Categorical:
    """Values of a dictionary column at ``rows`` as a pandas Categorical (cheap for many rows).

    Rows ``-1`` and nulls become ``missing``.
    """
    rows = np.asarray(rows, dtype=np.int64)
    col = trace.events.column(column)
    col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    dictionary = np.asarray(col.dictionary.to_pylist() + [missing], dtype=object)
    dictionary[pd.isna(dictionary)] = missing
    codes_all = col.indices.fill_null(len(dictionary) - 1).to_numpy(zero_copy_only=False).astype(np.int64)
    codes = np.full(rows.size, len(dictionary) - 1, dtype=np.int64)
    ok = rows >= 0
    codes[ok] = codes_all[rows[ok]]
    # the dictionary may repeat values (and holds ``missing``): map codes onto distinct categories
    categories, remap = np.unique(dictionary.astype(str), return_inverse=True)
    return pd.Categorical.from_codes(remap.reshape(-1)[codes], categories=categories)
