"""Vectorised interval algebra on int64 nanoseconds.

Intervals are half-open ``[start, end)`` and given as two parallel int64 arrays. A *union* is a
sorted, disjoint set of non-empty intervals where neighbours do not touch (``end[i] < start[i+1]``);
:func:`union` produces one from any input. Every function is numpy-vectorised: there is no Python
loop over intervals.

Grouped variants (``*_by``) take an int64 ``keys`` array (rank, device, step, or a code built
with :func:`combine_keys`) and work on every group at once. Inside they shift each group onto its
own stretch of the number line (group index x span), so one flat pass handles all groups; when
that would overflow int64 the coordinates are first compressed to their ranks, which is exact.

Conventions:

* empty intervals (``end <= start``) contribute nothing and never appear in a result;
* touching intervals are merged (``[0, 5) + [5, 9) -> [0, 9)``): touching activity leaves no gap;
* ``total`` is always the measure of the union, so overlapping input is never double counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]
KeyedIntervals = tuple[np.ndarray, np.ndarray, np.ndarray]

_I64 = np.int64
_EMPTY = np.empty(0, dtype=_I64)
# keep shifted coordinates well inside int64
_LIMIT = np.int64(2**62)


def _arr(x: Sequence[int] | np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, dtype=_I64).reshape(-1))


def _empty2() -> Intervals:
    return _EMPTY.copy(), _EMPTY.copy()


def _empty3() -> KeyedIntervals:
    return _EMPTY.copy(), _EMPTY.copy(), _EMPTY.copy()


def unique_sorted(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values (sort-based: numpy's hash-based ``np.unique`` is much slower here)."""
    s = np.sort(_arr(x))
    if s.size == 0:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def unique_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(sorted distinct values, index of each element's value)`` (hash-based factorisation:
    group keys have few distinct values, for which it is several times faster than sorting)."""
    a = _arr(x)
    if a.size == 0:
        return a.copy(), _EMPTY.copy()
    codes, n = sorted_codes(a)
    uniques = np.empty(n, dtype=_I64)
    uniques[codes] = a  # every distinct value lands on its own code
    return uniques, codes


# --------------------------------------------------------------------------- flat (one group)


def union(starts: Sequence[int] | np.ndarray, ends: Sequence[int] | np.ndarray) -> Intervals:
    """Union of intervals: sorted, disjoint, non-touching, non-empty ``(starts, ends)``."""
    s = _arr(starts)
    e = _arr(ends)
    if s.shape != e.shape:
        raise ValueError("starts and ends differ in length")
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    if s.size == 0:
        return _empty2()
    order = np.argsort(s, kind="stable")
    s = s[order]
    e = e[order]
    reach = np.maximum.accumulate(e)
    # a new merged interval begins where a start lies beyond everything before it
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    np.greater(s[1:], reach[:-1], out=new[1:])
    first = np.flatnonzero(new)
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = s.size - 1
    return s[first], reach[last]


def is_union(starts: np.ndarray, ends: np.ndarray) -> bool:
    """Whether ``(starts, ends)`` is already in the canonical form :func:`union` returns."""
    s = _arr(starts)
    e = _arr(ends)
    if s.size == 0:
        return True
    return bool(np.all(e > s) and np.all(s[1:] > e[:-1]))


def total(starts: Sequence[int] | np.ndarray, ends: Sequence[int] | np.ndarray) -> int:
    """Measure (ns) of the union of the intervals."""
    s, e = union(starts, ends)
    return int((e - s).sum())


def _overlaps(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> Intervals:
    """The overlaps of two unions, in order: each interval of ``a`` against the run of ``b``
    intervals it meets (two ``searchsorted``, no sort of the boundary points). For unions the
    overlaps are themselves a union (pieces are parted by the gaps of ``a`` or ``b``)."""
    first = np.searchsorted(b_e, a_s, side="right")  # the first b interval ending after a starts
    stop = np.searchsorted(b_s, a_e, side="left")  # b intervals starting before a ends
    count = np.maximum(stop - first, 0)
    i = np.repeat(np.arange(a_s.size, dtype=_I64), count)
    offset = np.arange(int(count.sum()), dtype=_I64) - np.repeat(np.cumsum(count) - count, count)
    j = np.repeat(first, count) + offset
    s = np.maximum(a_s[i], b_s[j])
    e = np.minimum(a_e[i], b_e[j])
    keep = e > s
    return s[keep], e[keep]


def _complement(s: np.ndarray, e: np.ndarray) -> Intervals:
    """The gaps of a union over the whole int64 line (a union too: its pieces are parted by it)."""
    lo, hi = np.iinfo(_I64).min, np.iinfo(_I64).max
    gs = np.concatenate([[lo], e]).astype(_I64)
    ge = np.concatenate([s, [hi]]).astype(_I64)
    keep = ge > gs
    return gs[keep], ge[keep]


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two interval sets (each is made a union first)."""
    a_s, a_e = a if is_union(*a) else union(*a)
    b_s, b_e = b if is_union(*b) else union(*b)
    a_s, a_e, b_s, b_e = map(_arr, (a_s, a_e, b_s, b_e))
    if a_s.size == 0 or b_s.size == 0:
        return _empty2()
    return _overlaps(a_s, a_e, b_s, b_e)


def measure_intersection(a: Intervals, b: Intervals) -> int:
    """|union(a) ∩ union(b)| in ns."""
    s, e = intersect(a, b)
    return int((e - s).sum())


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """union(a) minus union(b)."""
    a_s, a_e = a if is_union(*a) else union(*a)
    b_s, b_e = b if is_union(*b) else union(*b)
    a_s, a_e, b_s, b_e = map(_arr, (a_s, a_e, b_s, b_e))
    if a_s.size == 0 or b_s.size == 0:
        return a_s.copy(), a_e.copy()
    # inside a and outside b: a against the gaps of b (a union minus a union is a union)
    return _overlaps(a_s, a_e, *_complement(b_s, b_e))


def clip(
    starts: Sequence[int] | np.ndarray,
    ends: Sequence[int] | np.ndarray,
    lo: int | np.ndarray,
    hi: int | np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clip intervals to ``[lo, hi)`` (scalars or per-interval arrays); drop what becomes empty.

    Returns ``(starts, ends, index)`` where ``index`` gives the position of each kept interval in
    the input.
    """
    s = np.maximum(_arr(starts), np.asarray(lo, dtype=_I64))
    e = np.minimum(_arr(ends), np.asarray(hi, dtype=_I64))
    idx = np.flatnonzero(e > s)
    return s[idx], e[idx], idx


def gaps(union_: Intervals, window: tuple[int, int]) -> Intervals:
    """Parts of ``window = (lo, hi)`` not covered by ``union_`` (any interval set)."""
    lo, hi = int(window[0]), int(window[1])
    if hi <= lo:
        return _empty2()
    s, e = union(*union_) if not is_union(*union_) else (_arr(union_[0]), _arr(union_[1]))
    s, e, _ = clip(s, e, lo, hi)
    gs = np.concatenate([[lo], e]).astype(_I64)
    ge = np.concatenate([s, [hi]]).astype(_I64)
    keep = ge > gs
    return gs[keep], ge[keep]


def overlap_per_interval(starts: np.ndarray, ends: np.ndarray, union_: Intervals) -> np.ndarray:
    """For each interval, how many ns of it ``union_`` covers (the union must be canonical)."""
    s = _arr(starts)
    e = _arr(ends)
    us, ue = _arr(union_[0]), _arr(union_[1])
    if us.size == 0 or s.size == 0:
        return np.zeros(s.size, dtype=_I64)
    # prefix of covered measure at any point t: cover(t) = sum of |[us, ue) ∩ (-inf, t)|
    cum = np.concatenate([[0], np.cumsum(ue - us)])

    def cover(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(ue, t, side="right")  # intervals fully before t
        partial = np.zeros(t.size, dtype=_I64)
        has = i < us.size
        j = i[has]
        partial[has] = np.clip(t[has] - us[j], 0, None)
        return cum[i] + partial

    return np.where(e > s, cover(e) - cover(s), 0)


def contains(union_: Intervals, points: np.ndarray) -> np.ndarray:
    """Index of the union interval containing each point (``start <= p < end``), else -1."""
    us, ue = _arr(union_[0]), _arr(union_[1])
    p = _arr(points)
    if us.size == 0:
        return np.full(p.size, -1, dtype=_I64)
    i = np.searchsorted(us, p, side="right") - 1
    ok = (i >= 0) & (p < ue[np.clip(i, 0, None)])
    return np.where(ok, i, -1)


# --------------------------------------------------------------------------- grouped


def combine_keys(*columns: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Dense int64 group code for each row of several key columns, and the distinct key values.

    ``codes, (ranks, devices) = combine_keys(rank, device)``: row ``i`` belongs to group
    ``codes[i]`` whose key is ``(ranks[codes[i]], devices[codes[i]])``. Groups are in lexicographic
    order of the key columns.
    """
    cols = [np.asarray(c).reshape(-1) for c in columns]
    if not cols:
        raise ValueError("no key columns")
    n = cols[0].size
    if n == 0:
        return _EMPTY.copy(), [c[:0] for c in cols]
    # factorise each column (sorted), then the mixed-radix code of the tuple, which keeps the
    # lexicographic order; fall back to a lexsort if the radix product could overflow
    parts = [sorted_codes(c) for c in cols]
    sizes = [max(count, 1) for _, count in parts]
    if float(np.prod(np.asarray(sizes, dtype=np.float64))) < 2.0**62:
        # a column with one value (one rank, one process) adds nothing to the order or the groups
        varying = [(codes, size) for (codes, _), size in zip(parts, sizes) if size > 1]
        if not varying:
            group, n_groups = np.zeros(n, dtype=_I64), 1
        elif len(varying) == 1:  # one column: its sorted codes are the group codes already
            group, n_groups = varying[0]
        else:
            mixed = varying[0][0]
            for codes, size in varying[1:]:
                mixed = mixed * size + codes
            group, n_groups = sorted_codes(mixed)
        first = np.empty(n_groups, dtype=_I64)
        first[group[::-1]] = np.arange(n - 1, -1, -1, dtype=_I64)  # first row of each group
        return group, [c[first] for c in cols]
    order = np.lexsort(tuple(reversed(cols)))
    changed = np.zeros(n, dtype=bool)
    changed[0] = True
    for c in cols:
        cs = c[order]
        changed[1:] |= cs[1:] != cs[:-1]
    group_sorted = np.cumsum(changed) - 1
    codes = np.empty(n, dtype=_I64)
    codes[order] = group_sorted
    firsts = order[changed]
    return codes, [c[firsts] for c in cols]


#: integer keys spanning at most this many values per row (or 64 Ki values) are coded by a table
#: lookup instead of hashing: keys are ranks, devices, streams, steps and codes, dense in practice
_DENSE_SPAN_PER_ROW = 4


def sorted_codes(values: np.ndarray) -> tuple[np.ndarray, int]:
    """``pd.factorize(values, sort=True)``'s codes (int64) and its number of distinct values.

    Integer keys over a small range (the usual case) are coded by marking the values present in a
    table over the range and counting: the same codes, without hashing (several times faster)."""
    if values.dtype.kind in "iub" and values.size:
        lo, hi = int(values.min()), int(values.max())
        if lo == hi:  # one value (one rank, one process): nothing to look up
            return np.zeros(values.size, dtype=_I64), 1
        span = hi - lo + 1
        if span <= max(_DENSE_SPAN_PER_ROW * values.size, 1 << 16) and hi < 2**63:  # (uint64 beyond int64)
            offset = values.astype(_I64) - lo if lo else values.astype(_I64, copy=False)
            present = np.zeros(span, dtype=bool)
            present[offset] = True
            rank = np.cumsum(present, dtype=_I64) - 1
            return rank[offset], int(rank[-1]) + 1
    import pandas as pd  # here, not at the top: the Kineto parser's workers use this module without pandas

    codes, uniques = pd.factorize(values, sort=True)
    return codes.astype(_I64, copy=False), len(uniques)


def _group_codes(key_arrays: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The sorted distinct keys of all arrays, and each array's keys as indexes into them."""
    if key_arrays and all(k.size < 2 or bool(np.all(k[1:] >= k[:-1])) for k in key_arrays):
        # sorted keys (unions, claims): the distinct keys are the heads of runs, found without hashing
        heads = [k[np.concatenate([[True], k[1:] != k[:-1]])] for k in key_arrays if k.size]
        uniq = unique_sorted(np.concatenate(heads)) if heads else _EMPTY.copy()
        return uniq, [np.searchsorted(uniq, k).astype(_I64) for k in key_arrays]
    keys = np.concatenate(key_arrays) if key_arrays else _EMPTY
    uniq, inverse = unique_inverse(keys)
    inverse = inverse.astype(_I64).reshape(-1)
    bounds = np.cumsum([0] + [k.size for k in key_arrays])
    return uniq, [inverse[bounds[i] : bounds[i + 1]] for i in range(len(key_arrays))]


class _Shift:
    """Maps (group, time) onto one number line so that groups never interact."""

    def __init__(self, key_arrays: list[np.ndarray], time_arrays: list[np.ndarray]) -> None:
        self.uniq, self.group = _group_codes(key_arrays)
        times = [t for t in time_arrays if t.size]
        self.compressed = False
        if times:
            lo = min(int(t.min()) for t in times)
            hi = max(int(t.max()) for t in times)
        else:
            lo = hi = 0
        span = hi - lo + 1
        if span * max(len(self.uniq), 1) >= int(_LIMIT):
            # rank-compress coordinates (exact: order is all the algorithms need)
            self.compressed = True
            self.values = unique_sorted(np.concatenate(times)) if times else _EMPTY
            lo, span = 0, len(self.values) + 1
        self.lo = lo
        self.span = span

    def fwd(self, which: int, t: np.ndarray) -> np.ndarray:
        g = self.group[which]
        if self.compressed:
            t = np.searchsorted(self.values, t).astype(_I64)
        else:
            t = t - self.lo
        return g * self.span + t

    def back(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shifted start coordinates -> (key, time)."""
        g = x // self.span
        t = x - g * self.span
        t = self.values[t] if self.compressed else t + self.lo
        return self.uniq[g], t

    def back_end(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        t = x - g * self.span
        return self.values[t] if self.compressed else t + self.lo


def union_by(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> KeyedIntervals:
    """Union per group: ``(keys, starts, ends)`` sorted by key then start."""
    k, s, e = _arr(keys), _arr(starts), _arr(ends)
    keep = e > s
    k, s, e = k[keep], s[keep], e[keep]
    if s.size == 0:
        return _empty3()
    sh = _Shift([k], [s, e])
    us, ue = union(sh.fwd(0, s), sh.fwd(0, e))
    g = us // sh.span
    key, start = sh.back(us)
    return key, start, sh.back_end(ue, g)


def is_union_by(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> bool:
    """Whether ``(keys, starts, ends)`` is already in the form :func:`union_by` returns: sorted by
    key then start, non-empty, and disjoint and non-touching within each group."""
    k, s, e = _arr(keys), _arr(starts), _arr(ends)
    if k.size == 0:
        return True
    if not (np.all(e > s) and np.all(k[1:] >= k[:-1])):
        return False
    return bool(np.all((k[1:] != k[:-1]) | (s[1:] > e[:-1])))


def _as_union_by(a: KeyedIntervals) -> KeyedIntervals:
    """:func:`union_by` of ``a``, without its sort when ``a`` is one already (claims always are)."""
    if is_union_by(*a):
        return _arr(a[0]).copy(), _arr(a[1]).copy(), _arr(a[2]).copy()  # copies, as union_by gives
    return union_by(*a)


def total_by(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Measure of the union per group: ``(unique_keys, totals)`` (groups with no measure omitted)."""
    k, s, e = union_by(keys, starts, ends)
    return sum_by(k, e - s)


def sum_by(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact int64 sum of ``values`` per distinct key: ``(unique_keys, sums)``."""
    k = _arr(keys)
    if k.size == 0:
        return _EMPTY.copy(), _EMPTY.copy()
    order = np.argsort(k, kind="stable")
    ks = k[order]
    first = np.flatnonzero(np.concatenate([[True], ks[1:] != ks[:-1]]))
    return ks[first], np.add.reduceat(_arr(values)[order], first)


def lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray, default: int = 0) -> np.ndarray:
    """``values`` of the (sorted, unique) ``keys`` at each ``query`` key, ``default`` if absent."""
    keys = _arr(keys)
    q = _arr(query)
    values = np.asarray(values)
    if keys.size == 0:
        return np.full(q.size, default, dtype=values.dtype if values.size else _I64)
    i = np.clip(np.searchsorted(keys, q), 0, keys.size - 1)
    return np.where(keys[i] == q, values[i], default)


def intersect_by(a: KeyedIntervals, b: KeyedIntervals) -> KeyedIntervals:
    """Per-group intersection of two keyed interval sets (each made a per-group union first)."""
    ak, as_, ae = _as_union_by(a)
    bk, bs, be = _as_union_by(b)
    if as_.size == 0 or bs.size == 0:
        return _empty3()
    sh = _Shift([ak, bk], [as_, ae, bs, be])
    s, e = intersect((sh.fwd(0, as_), sh.fwd(0, ae)), (sh.fwd(1, bs), sh.fwd(1, be)))
    if s.size == 0:
        return _empty3()
    g = s // sh.span
    key, start = sh.back(s)
    return key, start, sh.back_end(e, g)


def measure_intersection_by(a: KeyedIntervals, b: KeyedIntervals) -> tuple[np.ndarray, np.ndarray]:
    """``(unique_keys, |U(a) ∩ U(b)|)`` per group (groups with an empty intersection omitted)."""
    k, s, e = intersect_by(a, b)
    return sum_by(k, e - s)


def subtract_by(a: KeyedIntervals, b: KeyedIntervals) -> KeyedIntervals:
    """Per-group ``U(a) - U(b)``."""
    ak, as_, ae = _as_union_by(a)
    bk, bs, be = _as_union_by(b)
    if as_.size == 0:
        return _empty3()
    if bs.size == 0:
        return ak, as_, ae
    sh = _Shift([ak, bk], [as_, ae, bs, be])
    s, e = subtract((sh.fwd(0, as_), sh.fwd(0, ae)), (sh.fwd(1, bs), sh.fwd(1, be)))
    if s.size == 0:
        return _empty3()
    g = s // sh.span
    key, start = sh.back(s)
    return key, start, sh.back_end(e, g)


def clip_by(
    keys: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    window_keys: np.ndarray,
    window_lo: np.ndarray,
    window_hi: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Clip each interval to the window of its group (``window_keys`` unique).

    Intervals of groups without a window are dropped. Returns ``(keys, starts, ends, index)``.
    """
    k = _arr(keys)
    wk = _arr(window_keys)
    order = np.argsort(wk, kind="stable")
    wk, wlo, whi = wk[order], _arr(window_lo)[order], _arr(window_hi)[order]
    if wk.size == 0 or k.size == 0:
        return _EMPTY.copy(), _EMPTY.copy(), _EMPTY.copy(), _EMPTY.copy()
    i = np.clip(np.searchsorted(wk, k), 0, wk.size - 1)
    has = wk[i] == k
    lo = np.where(has, wlo[i], 0)
    hi = np.where(has, whi[i], 0)
    s, e, idx = clip(starts, ends, lo, hi)
    ok = has[idx]
    idx = idx[ok]
    return k[idx], s[ok], e[ok], idx


def gaps_by(
    union_: KeyedIntervals, window_keys: np.ndarray, window_lo: np.ndarray, window_hi: np.ndarray
) -> KeyedIntervals:
    """Per-group parts of each window not covered by the group's intervals.

    ``union_`` is any keyed interval set; windows are one per key (``window_keys`` unique). Groups
    with a window but no intervals yield the whole window.
    """
    wk, wlo, whi = _arr(window_keys), _arr(window_lo), _arr(window_hi)
    w_ok = whi > wlo
    wk, wlo, whi = wk[w_ok], wlo[w_ok], whi[w_ok]
    if wk.size == 0:
        return _empty3()
    k, s, e = union_by(*union_)
    k, s, e, _ = clip_by(k, s, e, wk, wlo, whi)
    # gaps = window minus union, per group
    return subtract_by((wk, wlo, whi), (k, s, e))


def hull_gaps_by(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> KeyedIntervals:
    """``gaps_by((keys, starts, ends), *window_by(keys, starts, ends))``: per group, the parts of
    its hull (first start .. last end) its intervals leave uncovered, sorted by key then start.

    The hull holds the union, so the gaps are the spaces between the union's consecutive intervals,
    plus the ends of the hull that only empty intervals reach: no clipping and no subtraction."""
    wk, wlo, whi = window_by(keys, starts, ends)
    w_ok = whi > wlo
    wk, wlo, whi = wk[w_ok], wlo[w_ok], whi[w_ok]
    if wk.size == 0:
        return _empty3()
    uk, us, ue = union_by(keys, starts, ends)
    # per group: gaps start at [lo, e_1, ..., e_n] and end at [s_1, ..., s_n, hi]; a stable sort on
    # the key puts each group's bounds in order (unions are sorted by key then start)
    gap_key = np.concatenate([wk, uk])
    by_key = np.argsort(gap_key, kind="stable")
    gs = np.concatenate([wlo, ue])[by_key]
    ge = np.concatenate([us, whi])[np.argsort(np.concatenate([uk, wk]), kind="stable")]
    gap_key = gap_key[by_key]
    keep = ge > gs
    return gap_key[keep], gs[keep], ge[keep]


def window_by(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> KeyedIntervals:
    """``(unique_keys, first start, last end)`` per group."""
    k, s, e = _arr(keys), _arr(starts), _arr(ends)
    if k.size == 0:
        return _empty3()
    order = np.argsort(k, kind="stable")
    ks = k[order]
    first = np.flatnonzero(np.concatenate([[True], ks[1:] != ks[:-1]]))
    return ks[first], np.minimum.reduceat(s[order], first), np.maximum.reduceat(e[order], first)


def _order_start_then_longest(xs: np.ndarray, xe: np.ndarray) -> np.ndarray:
    """Argsort by start, then by end descending (outer before inner on equal starts).

    One ``argsort`` plus a ``lexsort`` of only the tied elements (much cheaper than a full lexsort).
    """
    order = np.argsort(xs, kind="stable")
    sx = xs[order]
    if sx.size < 2:
        return order
    same = sx[1:] == sx[:-1]
    if not same.any():
        return order
    tied = np.zeros(sx.size, dtype=bool)
    tied[1:] |= same
    tied[:-1] |= same
    pos = np.flatnonzero(tied)  # whole runs of equal starts, in sorted order
    sub = order[pos]
    order[pos] = sub[np.lexsort((-xe[sub], xs[sub]))]
    return order


def _depth_from_order(order: np.ndarray, xs: np.ndarray, xe: np.ndarray) -> np.ndarray:
    opened_before = np.empty(order.size, dtype=_I64)
    opened_before[order] = np.arange(order.size, dtype=_I64)  # intervals ordered before this one
    closed = np.searchsorted(np.sort(xe), xs, side="right")  # ended at or before this start
    zero = xe <= xs
    if zero.any():
        # a zero-length interval at an interval's start "ends at or before" that start without having
        # been open around it: itself, and those ordered after it at the same point, are not closed
        # ancestors (else a lone marker had depth -1, and an op with a marker at its start one too few)
        zero_xs, zero_pos = np.sort(xs[zero]), np.sort(opened_before[zero])
        closed = closed - (np.searchsorted(zero_xs, xs, side="right") - np.searchsorted(zero_pos, opened_before))
    return opened_before - closed


def nesting_depth(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Depth of each interval among the intervals of its group (0 = outermost).

    Depth = how many intervals of the group are open when it starts (ties: the longer one is the
    outer one). For properly nested intervals (the CPU ops of one thread) the intervals of one
    depth are disjoint.
    """
    k, s, e = _arr(keys), _arr(starts), _arr(ends)
    if k.size == 0:
        return _EMPTY.copy()
    sh = _Shift([k], [s, e])
    xs, xe = sh.fwd(0, s), sh.fwd(0, np.maximum(e, s))
    return _depth_from_order(_order_start_then_longest(xs, xe), xs, xe)


class NestedIndex:
    """Index over nested intervals per group (e.g. the CPU ranges of each thread) answering
    "deepest interval of group k with ``start <= lo`` and ``end >= hi``" for many queries at once.

    Built once (one sort by start, a radix sort by depth), queried with one ``searchsorted`` per
    nesting level. Groups are laid side by side on one number line; when that would overflow
    int64, coordinates are compressed to ranks instead (exact either way).
    """

    def __init__(self, keys: np.ndarray, starts: np.ndarray, ends: np.ndarray, depth: np.ndarray | None = None) -> None:
        k, s, e = _arr(keys), _arr(starts), _arr(ends)
        self.keys, self.starts, self.ends = k, s, e
        self.size = int(k.size)
        self.depth = _EMPTY.copy()
        if self.size == 0:
            return
        self.uniq_keys, group = unique_inverse(k)
        e_eff = np.maximum(e, s)
        self.lo = int(s.min())
        hi = int(e_eff.max())
        span = hi - self.lo + 2  # room for "before every start" at offset 0
        self.compressed = span * self.uniq_keys.size >= 2**62
        if self.compressed:
            # ranks among all starts and ends keep every start/end comparison exact
            self.values = unique_sorted(np.concatenate([s, e_eff]))
            self.width = np.int64(self.values.size + 1)
            xs = group * self.width + np.searchsorted(self.values, s).astype(_I64) + 1
            xe = group * self.width + np.searchsorted(self.values, e_eff).astype(_I64) + 1
        else:
            self.hi = hi
            self.width = np.int64(span)
            xs = group * self.width + (s - (self.lo - 1))
            xe = group * self.width + (e_eff - (self.lo - 1))
        order = _order_start_then_longest(xs, xe)
        if depth is None:
            depth = _depth_from_order(order, xs, xe)
        #: nesting depth of each interval (as :func:`nesting_depth` gives): a caller that needs
        #: both reads it here instead of sorting the intervals again
        self.depth = depth
        # by depth, then by start: a stable sort of the (small) depths of the start-ordered list
        d = depth[order]
        # a stable sort of 16-bit integers is a radix sort (depths are small): several times faster
        narrow = np.int16 if d.size == 0 or int(d.max()) < 2**15 else np.int32
        by_level = order[np.argsort(d.astype(narrow), kind="stable")]
        d_sorted = depth[by_level]
        bounds = np.flatnonzero(np.concatenate([[True], d_sorted[1:] != d_sorted[:-1], [True]]))
        self.levels = [(by_level[a:b], xs[by_level[a:b]]) for a, b in zip(bounds[:-1], bounds[1:])]

    def covering(self, query_keys: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Index (into the intervals) of the deepest covering interval per query, or -1."""
        qk, qlo, qhi = _arr(query_keys), _arr(lo), _arr(hi)
        out = np.full(qk.size, -1, dtype=_I64)
        if self.size == 0 or qk.size == 0:
            return out
        gi = np.clip(np.searchsorted(self.uniq_keys, qk), 0, self.uniq_keys.size - 1).astype(_I64)
        known = self.uniq_keys[gi] == qk
        if self.compressed:
            # floor rank of lo among the starts: start <= lo  <=>  rank(start) <= floor_rank(lo)
            qcoord = gi * self.width + np.searchsorted(self.values, qlo, side="right").astype(_I64)
        else:
            qcoord = gi * self.width + (np.clip(qlo, self.lo - 1, self.hi) - (self.lo - 1))
        for idx, level in self.levels:  # outermost level first; deeper levels overwrite
            p = np.searchsorted(level, qcoord, side="right") - 1
            cand = idx[np.clip(p, 0, None)]
            ok = known & (p >= 0) & (self.keys[cand] == qk) & (self.starts[cand] <= qlo) & (self.ends[cand] >= qhi)
            out[ok] = cand[ok]
        return out


def innermost_covering(
    keys: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    query_keys: np.ndarray,
    query_lo: np.ndarray,
    query_hi: np.ndarray,
    depth: np.ndarray | None = None,
) -> np.ndarray:
    """For each query, the deepest interval of its group with ``start <= lo`` and ``end >= hi``.

    Returns an index into the intervals, or -1. To find the innermost interval containing a point
    ``t`` (``start <= t < end``) pass ``lo = t`` and ``hi = t + 1``. Vectorised: one
    ``searchsorted`` per nesting level (a few dozen for deep Python stacks), none per query. Use
    :class:`NestedIndex` directly to query the same intervals several times.
    """
    return NestedIndex(keys, starts, ends, depth).covering(query_keys, query_lo, query_hi)


def codes_among(known: tuple[np.ndarray, ...], query: tuple[np.ndarray, ...]) -> np.ndarray:
    """For each query key (a tuple of columns, e.g. rank, pid, tid), the position of the same key
    among the distinct ``known`` keys (given as parallel columns, each key once); -1 for a key not
    among them. One joint factorization of both, no per-key Python."""
    n = _arr(known[0]).size
    codes, _ = combine_keys(*(np.concatenate([_arr(k), _arr(q)]) for k, q in zip(known, query)))
    if codes.size == 0:
        return _EMPTY.copy()
    position = np.full(int(codes.max()) + 1, -1, dtype=_I64)
    position[codes[:n]] = np.arange(n, dtype=_I64)
    return position[codes[n:]]


def nesting_parents(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each interval, the innermost other interval of its group that contains it (-1 at the top):
    one sort of the intervals' start and end points, then the nesting depth read off it (the latest
    start that brought the group to the depth just before this start). Exact for nested intervals;
    of two with the same start and end, the first (by index) is the parent of the second."""
    n = _arr(keys).size
    if n == 0:
        return _EMPTY.copy()
    k, s, e = _arr(keys), _arr(starts), np.maximum(_arr(ends), _arr(starts))
    point_key = np.concatenate([k, k])
    point_time = np.concatenate([s, e])
    is_start = np.concatenate([np.ones(n, dtype=np.int8), np.zeros(n, dtype=np.int8)])
    # at one time: ends before starts; of two starts the outer (longer, then earlier index) first
    tie = np.concatenate([-(e - s), e - s])
    index = np.concatenate([np.arange(n), -np.arange(n)])
    order = np.lexsort((index, tie, is_start, point_time, point_key))
    depth = np.cumsum(np.where(order < n, 1, -1))  # balanced per group: 0 between groups
    position = np.arange(order.size, dtype=_I64)
    width = _I64(order.size + 1)
    starts_at = position[order < n]
    keys_sorted = depth[order < n] * width + starts_at
    by_key = np.argsort(keys_sorted, kind="stable")
    keys_sorted, starts_at = keys_sorted[by_key], starts_at[by_key]
    # the interval open just before each start: the latest start at or before the previous point
    # that reached the depth the group had there
    own = np.flatnonzero(order < n)
    before = own - 1
    depth_before = np.where(before >= 0, depth[np.maximum(before, 0)], 0)
    same_group = (before >= 0) & (point_key[order[np.maximum(before, 0)]] == point_key[order[own]])
    found = np.searchsorted(keys_sorted, depth_before * width + before, side="right") - 1
    ok = same_group & (depth_before > 0) & (found >= 0)
    ok[ok] &= keys_sorted[found[ok]] // width == depth_before[ok]
    out = np.full(n, -1, dtype=_I64)
    out[order[own[ok]]] = order[starts_at[found[ok]]]
    return out


def searchsorted_by(
    keys: np.ndarray, times: np.ndarray, query_keys: np.ndarray, query_times: np.ndarray,
    side: Literal["left", "right"] = "left",
) -> np.ndarray:
    """``searchsorted`` within groups: data sorted by (key, time); returns global positions.

    The position is where ``(query_key, query_time)`` would be inserted in the lexicographic order
    of ``(keys, times)``; check ``keys[pos] == query_key`` for a hit inside the group.
    """
    k, t, qk, qt = _arr(keys), _arr(times), _arr(query_keys), _arr(query_times)
    if k.size == 0:
        return np.zeros(qk.size, dtype=_I64)
    sh = _Shift([k, qk], [t, qt])
    x = sh.fwd(0, t)
    # keys of queries absent from the data still order correctly: groups are dense over both
    return np.searchsorted(x, sh.fwd(1, qt), side=side).astype(_I64)


__all__ = [
    "NestedIndex",
    "codes_among",
    "nesting_parents",
    "clip",
    "clip_by",
    "combine_keys",
    "contains",
    "gaps",
    "gaps_by",
    "hull_gaps_by",
    "innermost_covering",
    "intersect",
    "intersect_by",
    "is_union",
    "is_union_by",
    "lookup",
    "measure_intersection",
    "measure_intersection_by",
    "nesting_depth",
    "overlap_per_interval",
    "searchsorted_by",
    "subtract",
    "subtract_by",
    "sum_by",
    "total",
    "total_by",
    "union",
    "union_by",
    "unique_inverse",
    "unique_sorted",
    "window_by",
]
