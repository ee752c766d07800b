"""Nsight Compute kernel records matched to the trace's kernels (the measured analysis's join).

Rules, tried in this order for each ncu record, the first that finds a trace kernel name winning
(every rule used is stated in the ``matches`` table and the warnings):

1. ``exact name``: the trace's kernel name equals ncu's ``Kernel Name``;
2. ``normalised name``: equal once both have white space, a leading ``void``, namespace qualifiers
   (``at::native::``) and the trailing argument list removed (ncu prints names without namespaces
   and with template parameters for argument types: ``(int, T2, T3)``);
3. ``loose name``: equal once, beyond that, ``const``, the lambda numbering marks two demanglers
   spell differently (``{lambda()#3}``, ``[lambda() (instance 3)]``), integer literal suffixes
   (``2ul``) and every character but letters, digits, ``_``, ``<``, ``>``, ``,`` are removed;
4. ``base name (unique)``: the function name with template arguments and namespaces removed
   (:func:`traceview.analyses.kernel_names.normalize_kernel_name`) when exactly one ncu kernel
   name and exactly one trace kernel name have it.

Then the launch configuration: where the trace has grid and block sizes, only kernels with ncu's
grid and block match (``+ grid and block``); a trace without them matches on the name alone
(``+ name only: no launch configuration in the trace``), and a record without them (CUPTI range
events) on the name alone (``+ name only: no launch configuration in the record``). Last, invocation
order: per rank, the trace kernels of one name and configuration in start order take the ncu records of that name and
configuration in invocation order (the k-th kernel the k-th record), the kernels after the last
record the last record; each row says which record ("measured on invocation N").
Nothing is guessed beyond that: a record no rule matches is counted unmatched, with its reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .kernel_names import normalize_kernel_name

_QUALIFIER = re.compile(r"[A-Za-z_][A-Za-z_0-9]*::")
_RETURN = re.compile(r"^void(?=[A-Za-z_])")
#: words and marks two demanglers spell differently: ``const`` qualifiers, lambda numbering
#: (``{lambda()#3}`` vs ``[lambda() (instance 3)]``), integer literal suffixes (``2ul`` vs ``2``)
_LOOSE_WORDS = re.compile(r"\b(?:const|instance)\b")
_INT_SUFFIX = re.compile(r"(?<=[0-9])(?:ull|ul|ll|u|l)(?![A-Za-z0-9_])")
_NOT_KEPT = re.compile(r"[^A-Za-z0-9_<>,]")
KEY = ["kernel", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
DIMS = KEY[1:]


def normalised_name(name: str) -> str:
    """``void at::native::foo<4, at::Bar<float> >(int, float*)`` -> ``foo<4,Bar<float>>``."""
    text = "".join(name.split())
    text = _RETURN.sub("", text)
    text = _QUALIFIER.sub("", text)
    if text.endswith(")"):
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                text = text[:i] if i > 0 else text
                break
    return text


def loose_name(name: str) -> str:
    """:func:`normalised_name` with ``const``, lambda numbering marks, integer literal suffixes and
    every character but letters, digits, ``_``, ``<``, ``>`` and ``,`` removed."""
    text = _INT_SUFFIX.sub("", normalised_name(_LOOSE_WORDS.sub("", name)))
    return _NOT_KEPT.sub("", text)


def base_name(name: str) -> str:
    """The function name without template arguments, arguments or namespaces."""
    return _QUALIFIER.sub("", normalize_kernel_name(name))


@dataclass
class Join:
    """The join of ncu records to trace kernels. ``kernels``: one row per trace kernel matched
    (its activity entry ``entry``, the record's index ``record`` in ``records``). ``records``: the
    ncu records with ``trace_name``, ``rule`` and ``matched`` kernels (0: unmatched, ``reason``)."""

    records: pd.DataFrame
    entry: np.ndarray
    record: np.ndarray


def name_rules(ncu_names: list[str], trace_names: list[str]) -> dict[str, tuple[list[int], str]]:
    """ncu kernel name -> (indices into ``trace_names`` it matches, the rule), by the first rule
    that finds any; names no rule matches are left out."""
    exact: dict[str, list[int]] = {}
    norm: dict[str, list[int]] = {}
    loose: dict[str, list[int]] = {}
    base: dict[str, list[int]] = {}
    for i, name in enumerate(trace_names):
        exact.setdefault(name, []).append(i)
        norm.setdefault(normalised_name(name), []).append(i)
        loose.setdefault(loose_name(name), []).append(i)
        base.setdefault(base_name(name), []).append(i)
    ncu_base: dict[str, int] = {}
    for name in set(ncu_names):
        b = base_name(name)
        ncu_base[b] = ncu_base.get(b, 0) + 1
    out: dict[str, tuple[list[int], str]] = {}
    for name in set(ncu_names):
        b = base_name(name)
        if name in exact:
            out[name] = (exact[name], "exact name")
        elif normalised_name(name) in norm:
            out[name] = (norm[normalised_name(name)], "normalised name")
        elif loose_name(name) in loose:
            out[name] = (loose[loose_name(name)], "loose name")
        elif ncu_base[b] == 1 and len(base.get(b, [])) == 1:
            out[name] = (base[b], "base name (unique)")
    return out


def _rank_order(rank: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions sorted by rank then start, each one's number among its rank's: 0, 1, ...)."""
    order = np.lexsort((start, rank))
    r = rank[order]
    first = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    runs = np.diff(np.r_[first, r.size])
    return order, np.arange(r.size) - np.repeat(first, runs)


def join(records: pd.DataFrame, trace: pd.DataFrame, names: list[str]) -> Join:
    """``records``: one row per ncu record (KEY columns, invocation). ``trace``: one row per trace
    kernel (entry, rank, name_code, start, grid/block, -1 where unknown); ``names``: the name of
    each name code."""
    code = trace["name_code"].to_numpy()
    dim_columns = [trace[d].to_numpy() for d in DIMS]  # 1-D gathers: a 2-D frame's rows are slow to take
    known_all = np.logical_and.reduce([c >= 0 for c in dim_columns]) if len(trace) else np.zeros(0, bool)
    rank, start, entry = (trace[c].to_numpy() for c in ("rank", "start", "entry"))
    # name codes index the names: a narrow copy sorts by radix (a 16-bit key), else a merge sort
    narrow = code.astype(np.uint16) if len(names) <= np.iinfo(np.uint16).max else code
    by_code = np.argsort(narrow, kind="stable")
    sorted_code = code[by_code]
    first = np.flatnonzero(np.r_[True, sorted_code[1:] != sorted_code[:-1]]) if code.size else np.zeros(0, np.int64)
    used, bounds = sorted_code[first], np.r_[first, code.size]
    by_name = name_rules(records["kernel"].tolist(), [names[c] for c in used.tolist()])
    n = len(records)
    trace_name, rule, reason = [""] * n, [""] * n, [""] * n
    matched = np.zeros(n, dtype=np.int64)
    entries, rec_of = [], []
    for (kernel, *dims), group in records.groupby(KEY, sort=False):
        rows = group.sort_values("invocation").index.to_numpy()
        hit = by_name.get(kernel)
        if hit is None:
            for i in rows:
                reason[i] = "no trace kernel of this name"
            continue
        cand = np.sort(np.concatenate([by_code[bounds[i]:bounds[i + 1]] for i in hit[0]]))
        known = known_all[cand]
        if min(dims) < 0:
            how = hit[1] + " + name only: no launch configuration in the record"
        elif known.any():
            cand = cand[np.logical_and.reduce([known, *(col[cand] == d for col, d in zip(dim_columns, dims))])]
            how = hit[1] + " + grid and block"
        else:
            how = hit[1] + " + name only: no launch configuration in the trace"
        if not cand.size:
            for i in rows:
                reason[i] = "trace kernels of this name have another grid or block"
            continue
        order, nth = _rank_order(rank[cand], start[cand])
        pick = rows[np.minimum(nth, len(rows) - 1)]
        entries.append(entry[cand[order]])
        rec_of.append(pick)
        for i in rows:
            rule[i], trace_name[i] = how, names[int(code[cand[0]])]
        matched += np.bincount(pick, minlength=n)
    records = records.assign(trace_name=trace_name, rule=rule, reason=reason, matched=matched)
    return Join(records, np.concatenate(entries) if entries else np.zeros(0, np.int64),
                np.concatenate(rec_of) if rec_of else np.zeros(0, np.int64))
