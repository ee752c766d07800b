"""Shared classification of GPU activity (docs/metrics.md), so every analysis counts alike.

* GPU activity = kernels, memcpy and memset (not sync events), all streams of a device.
* Communication kernel: a kernel that a rule of the communication table matches
  (``analyses/comm_rules.py``: NCCL/RCCL, DeepEP, NVSHMEM, symmetric memory, custom all-reduce,
  MSCCL/MSCCL++, all-to-all, send/recv by name; collective args), plus the user's rules
  (``Options.comm_patterns``).
* Compute = the other kernels. Memory = memcpy + memset.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceview.model import Kind, Trace

from .comm_rules import rule_table

#: class codes returned by :func:`activity_class`
NONE = -1
COMPUTE = 0
COMMUNICATION = 1
MEMORY = 2
CLASS_NAMES = {COMPUTE: "compute", COMMUNICATION: "communication", MEMORY: "memory"}

#: the NCCL/RCCL name rule alone (the kernel categories use it on names without events)
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


def comm_rule_of(trace: Trace, patterns: tuple[str, ...] = ()) -> np.ndarray:
    """int16 per event: the index in ``comm_rules.rule_table(patterns)`` of the first rule that
    matches the kernel, ``NONE`` (-1) for a kernel no rule matches and for every other event.

    Name rules are evaluated once per distinct kernel name (only the names kernels use: a trace's
    dictionary holds every CPU op name too)."""
    rules = rule_table(patterns)
    out = np.full(trace.num_events, NONE, dtype=np.int16)
    kernel = np.flatnonzero(trace.kind_codes() == int(Kind.KERNEL))
    if kernel.size == 0:
        return out
    col = trace.events.column("name")
    col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    codes = col.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)[kernel]
    used, inverse = np.unique(codes, return_inverse=True)
    names = col.dictionary.take(np.maximum(used, 0)).to_pylist()
    names = ["" if c < 0 or n is None else str(n) for c, n in zip(used.tolist(), names)]
    rule_of_kernel = np.full(kernel.size, NONE, dtype=np.int16)
    for index, rule in enumerate(rules):
        if rule.pattern is not None:
            hit = np.array([rule.matches_name(n) for n in names], dtype=bool)[inverse.reshape(-1)]
        else:
            column = trace.events.column(str(rule.arg))
            hit = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)[kernel]
        rule_of_kernel[(rule_of_kernel == NONE) & hit] = index
    out[kernel] = rule_of_kernel
    return out


def is_communication(trace: Trace, patterns: tuple[str, ...] = ()) -> np.ndarray:
    """Boolean per event: a communication kernel (see module docstring)."""
    return comm_rule_of(trace, patterns) != NONE


def activity_class(trace: Trace, patterns: tuple[str, ...] = ()) -> np.ndarray:
    """int8 per event: COMPUTE, COMMUNICATION, MEMORY, or NONE (not GPU activity); ``patterns``:
    the user's communication rules (``Options.comm_patterns``)."""
    kinds = trace.kind_codes()
    out = np.full(kinds.size, NONE, dtype=np.int8)
    out[kinds == int(Kind.KERNEL)] = COMPUTE
    out[is_communication(trace, patterns)] = COMMUNICATION
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
    # the dictionary may repeat values (and holds ``missing``): map codes onto distinct categories.
    # Hashing the object array keeps each name's own size; ``np.unique(dictionary.astype(str))``
    # made a fixed-width array of (distinct names x longest name): 1 MB name -> 1 GB resident.
    remap, categories = pd.factorize(dictionary, sort=True)
    return pd.Categorical.from_codes(remap[codes], categories=pd.Index(categories, dtype=object))
