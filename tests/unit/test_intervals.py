"""Interval algebra (traceview.intervals): known answers and properties against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from traceview import intervals as iv

SPAN = 60  # brute force works on a small integer line


def cover(starts, ends, span=SPAN) -> np.ndarray:
    """Boolean coverage of [0, span) by half-open intervals (brute force)."""
    out = np.zeros(span, dtype=bool)
    for s, e in zip(starts, ends):
        if e > s:
            out[max(s, 0) : max(min(e, span), 0)] = True
    return out


def runs(mask: np.ndarray) -> tuple[list[int], list[int]]:
    """Maximal runs of True as (starts, ends)."""
    s, e = [], []
    i = 0
    while i < mask.size:
        if mask[i]:
            j = i
            while j < mask.size and mask[j]:
                j += 1
            s.append(i)
            e.append(j)
            i = j
        else:
            i += 1
    return s, e


interval = st.tuples(st.integers(0, SPAN - 1), st.integers(0, 20)).map(lambda t: (t[0], min(t[0] + t[1], SPAN)))
interval_lists = st.lists(interval, max_size=25)
keyed = st.lists(st.tuples(st.integers(0, 3), interval), max_size=30)


def arrays(items):
    s = np.array([a for a, _ in items], dtype=np.int64)
    e = np.array([b for _, b in items], dtype=np.int64)
    return s, e


# ----------------------------------------------------------------------------- known answers


def test_union_merges_overlapping_and_touching_and_drops_empty():
    s, e = iv.union([5, 0, 3, 20, 9, 30], [9, 4, 6, 25, 9, 30])
    assert s.tolist() == [0, 20] and e.tolist() == [9, 25]
    s, e = iv.union([0, 5], [5, 9])  # touching: no gap between them
    assert s.tolist() == [0] and e.tolist() == [9]


def test_total_counts_overlap_once():
    assert iv.total([0, 2, 100], [10, 5, 101]) == 11
    assert iv.total([], []) == 0


def test_intersect_and_measure():
    a = ([0, 10], [5, 20])
    b = ([3, 12], [11, 30])
    s, e = iv.intersect(a, b)
    assert list(zip(s.tolist(), e.tolist())) == [(3, 5), (10, 11), (12, 20)]
    assert iv.measure_intersection(a, b) == 11
    assert iv.measure_intersection(a, ([], [])) == 0


def test_gaps_inside_window():
    s, e = iv.gaps(([2, 8], [4, 9]), (0, 12))
    assert list(zip(s.tolist(), e.tolist())) == [(0, 2), (4, 8), (9, 12)]
    s, e = iv.gaps(([], []), (3, 7))
    assert list(zip(s.tolist(), e.tolist())) == [(3, 7)]


def test_clip_returns_positions_of_kept():
    s, e, idx = iv.clip([0, 5, 20], [4, 15, 30], 3, 12)
    assert s.tolist() == [3, 5] and e.tolist() == [4, 12] and idx.tolist() == [0, 1]


def test_grouped_union_gaps_intersection():
    k, s, e = iv.union_by([1, 0, 1, 0], [0, 0, 2, 5], [3, 4, 9, 6])
    assert list(zip(k.tolist(), s.tolist(), e.tolist())) == [(0, 0, 4), (0, 5, 6), (1, 0, 9)]
    k, s, e = iv.gaps_by(([1, 0, 1], [0, 0, 2], [3, 4, 9]), [0, 1, 2], [0, 0, 0], [10, 10, 5])
    assert list(zip(k.tolist(), s.tolist(), e.tolist())) == [(0, 4, 10), (1, 9, 10), (2, 0, 5)]
    keys, totals = iv.measure_intersection_by(([0, 1], [0, 0], [10, 10]), ([0, 1], [5, 20], [7, 30]))
    assert keys.tolist() == [0] and totals.tolist() == [2]


def test_combine_keys_and_lookup():
    codes, (a, b) = iv.combine_keys(np.array([1, 0, 1, 1]), np.array([3, 3, 2, 3]))
    assert codes.tolist() == [2, 0, 1, 2]
    assert a.tolist() == [0, 1, 1] and b.tolist() == [3, 2, 3]
    assert iv.lookup(np.array([2, 5]), np.array([20, 50]), np.array([5, 3, 2])).tolist() == [50, 0, 20]


def test_innermost_covering_picks_deepest():
    keys = np.array([0, 0, 0, 0, 1])
    s = np.array([0, 1, 2, 6, 0])
    e = np.array([10, 5, 4, 9, 10])
    q = iv.innermost_covering(keys, s, e, np.array([0, 0, 0, 1, 0]), np.array([3, 4, 7, 3, 12]), np.array([4, 5, 8, 4, 13]))
    assert q.tolist() == [2, 1, 3, 4, -1]


def test_huge_timestamps_and_many_groups_use_exact_compression():
    """Epoch-ns times near the int64 limit with many groups cannot be shifted; results stay exact."""
    base = np.int64(9_000_000_000_000_000_000)
    keys = np.arange(6, dtype=np.int64) % 3
    s = base + np.array([0, 0, 0, 5, 5, 5], dtype=np.int64)
    e = s + 10
    s[0] = -base  # force a span that overflows when multiplied by the group count
    e[0] = -base + 1
    k, us, ue = iv.union_by(keys, s, e)
    b = int(base)
    assert list(zip(k.tolist(), us.tolist(), ue.tolist())) == [
        (0, -b, -b + 1),
        (0, b + 5, b + 15),
        (1, b, b + 15),
        (2, b, b + 15),
    ]


# ----------------------------------------------------------------------------- properties


@settings(max_examples=300, deadline=None)
@given(interval_lists)
def test_union_is_canonical_idempotent_and_exact(items):
    s, e = arrays(items)
    us, ue = iv.union(s, e)
    assert iv.is_union(us, ue)
    us2, ue2 = iv.union(us, ue)
    assert us2.tolist() == us.tolist() and ue2.tolist() == ue.tolist()
    bs, be = runs(cover(s, e))
    assert us.tolist() == bs and ue.tolist() == be
    assert iv.total(s, e) == int(cover(s, e).sum()) <= int(np.maximum(e - s, 0).sum())


@settings(max_examples=300, deadline=None)
@given(interval_lists, interval_lists)
def test_intersection_and_subtraction_match_brute_force(a, b):
    a_s, a_e = arrays(a)
    b_s, b_e = arrays(b)
    ca, cb = cover(a_s, a_e), cover(b_s, b_e)
    s, e = iv.intersect((a_s, a_e), (b_s, b_e))
    assert (s.tolist(), e.tolist()) == runs(ca & cb)
    assert iv.measure_intersection((a_s, a_e), (b_s, b_e)) == int((ca & cb).sum())
    # overlap never exceeds either side
    assert iv.measure_intersection((a_s, a_e), (b_s, b_e)) <= min(iv.total(a_s, a_e), iv.total(b_s, b_e))
    s, e = iv.subtract((a_s, a_e), (b_s, b_e))
    assert (s.tolist(), e.tolist()) == runs(ca & ~cb)


@settings(max_examples=300, deadline=None)
@given(interval_lists)
def test_gaps_partition_the_window(items):
    s, e = arrays(items)
    nonempty = e > s
    if not nonempty.any():
        return
    lo, hi = int(s[nonempty].min()), int(e[nonempty].max())
    gs, ge = iv.gaps((s, e), (lo, hi))
    window = hi - lo
    busy = iv.total(s, e)
    assert busy <= window
    assert int((ge - gs).sum()) == window - busy
    # gaps and the union do not overlap and together cover the window
    assert iv.measure_intersection((gs, ge), (s, e)) == 0
    assert iv.total(np.r_[gs, s], np.r_[ge, e]) == window


@settings(max_examples=200, deadline=None)
@given(keyed, keyed)
def test_grouped_functions_equal_per_group_flat_functions(a, b):
    ak = np.array([k for k, _ in a], dtype=np.int64)
    a_s, a_e = arrays([x for _, x in a])
    bk = np.array([k for k, _ in b], dtype=np.int64)
    b_s, b_e = arrays([x for _, x in b])
    k, s, e = iv.union_by(ak, a_s, a_e)
    ik, is_, ie = iv.intersect_by((ak, a_s, a_e), (bk, b_s, b_e))
    wk, wlo, whi = iv.window_by(ak, a_s, a_e)
    gk, gs, ge = iv.gaps_by((ak, a_s, a_e), wk, wlo, whi)
    tk, tt = iv.total_by(ak, a_s, a_e)
    for g in range(4):
        fs, fe = iv.union(a_s[ak == g], a_e[ak == g])
        assert s[k == g].tolist() == fs.tolist() and e[k == g].tolist() == fe.tolist()
        xs, xe = iv.intersect((a_s[ak == g], a_e[ak == g]), (b_s[bk == g], b_e[bk == g]))
        assert is_[ik == g].tolist() == xs.tolist() and ie[ik == g].tolist() == xe.tolist()
        assert int(iv.lookup(tk, tt, np.array([g]))[0]) == iv.total(a_s[ak == g], a_e[ak == g])
        if (wk == g).any():
            lo, hi = int(wlo[wk == g][0]), int(whi[wk == g][0])
            ps, pe = iv.gaps((a_s[ak == g], a_e[ak == g]), (lo, hi))
            assert gs[gk == g].tolist() == ps.tolist() and ge[gk == g].tolist() == pe.tolist()


@settings(max_examples=200, deadline=None)
@given(interval_lists, interval_lists)
def test_overlap_per_interval_matches_brute_force(items, other):
    s, e = arrays(items)
    us, ue = iv.union(*arrays(other))
    got = iv.overlap_per_interval(s, e, (us, ue))
    c = cover(us, ue)
    for i in range(s.size):
        assert got[i] == (int(c[s[i] : e[i]].sum()) if e[i] > s[i] else 0)


nested = st.recursive(
    st.just([]),
    lambda children: st.lists(children, max_size=3),
    max_leaves=12,
)


def _layout(tree, start, out, depth=0):
    """Lay out a tree of nested intervals on the line; returns the end."""
    t = start
    for child in tree:
        s = t
        t = _layout(child, t + 1, out, depth + 1) + 1
        out.append((s, t))
        t += 1
    return t


@settings(max_examples=200, deadline=None)
@given(nested, st.lists(st.integers(0, 80), max_size=10))
def test_innermost_covering_point_matches_brute_force(tree, points):
    items: list[tuple[int, int]] = []
    _layout(tree, 0, items)
    s, e = arrays(items)
    keys = np.zeros(s.size, dtype=np.int64)
    q = np.array(points, dtype=np.int64)
    got = iv.innermost_covering(keys, s, e, np.zeros(q.size, dtype=np.int64), q, q + 1)
    for j, p in enumerate(points):
        containing = [i for i in range(s.size) if s[i] <= p < e[i]]
        if not containing:
            assert got[j] == -1
        else:
            inner = min(containing, key=lambda i: e[i] - s[i])
            assert got[j] == inner


@settings(max_examples=100, deadline=None)
@given(nested, st.lists(st.integers(0, 80), max_size=10))
def test_innermost_covering_exact_with_epoch_times_and_far_groups(tree, points):
    """Times near the int64 limit plus a far-away second group force the rank-compressed path."""
    items: list[tuple[int, int]] = []
    _layout(tree, 0, items)
    if not items:
        return
    base = 9_000_000_000_000_000_000
    s, e = arrays(items)
    s_all = np.r_[s + base, -base]
    e_all = np.r_[e + base, -base + 5]
    keys = np.r_[np.zeros(s.size, dtype=np.int64), 1]
    q = np.array(points, dtype=np.int64) + base
    index = iv.NestedIndex(keys, s_all, e_all)
    assert index.compressed
    got = index.covering(np.zeros(q.size, dtype=np.int64), q, q + 1)
    for j, p in enumerate(points):
        containing = [i for i in range(s.size) if s[i] <= p < e[i]]
        expect = min(containing, key=lambda i: e[i] - s[i]) if containing else -1
        assert got[j] == expect


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50)), max_size=30), st.integers(0, 4), st.integers(-2, 52))
def test_searchsorted_by_matches_lexicographic_insert(data, qk, qt):
    data = sorted(data)
    k = np.array([a for a, _ in data], dtype=np.int64)
    t = np.array([b for _, b in data], dtype=np.int64)
    for side in ("left", "right"):
        pos = int(iv.searchsorted_by(k, t, np.array([qk]), np.array([qt]), side=side)[0])
        expect = sum(1 for x in data if (x < (qk, qt) if side == "left" else x <= (qk, qt)))
        assert pos == expect


def test_nesting_depth_counts_open_ancestors():
    d = iv.nesting_depth(np.zeros(4, dtype=np.int64), np.array([0, 1, 2, 6]), np.array([10, 5, 4, 9]))
    assert d.tolist() == [0, 1, 2, 1]


@pytest.mark.parametrize("n", [0, 1])
def test_small_inputs(n):
    s = np.arange(n, dtype=np.int64)
    assert iv.total(s, s + 1) == n
    assert iv.union_by(s, s, s + 1)[0].size == n


def test_sorted_codes_equal_pandas_factorize_sorted():
    # the table-lookup coding of small-range integer keys gives pd.factorize(sort=True)'s codes
    import pandas as pd

    from traceview.intervals import sorted_codes

    rng = np.random.default_rng(7)
    cases = [rng.integers(-5, 5, 1000).astype(np.int32), rng.integers(0, 2, 50).astype(bool),
             rng.integers(0, 300, 999).astype(np.uint16), rng.integers(0, 2**40, 500),
             np.array([2**63 + 5, 2**63 + 1, 2**63 + 5], dtype=np.uint64), np.array([7, 7, 7]),
             rng.choice(np.array(["b", "a", "c"], dtype=object), 100), np.array([1.5, np.nan, -2.0])]
    for values in cases:
        codes, count = sorted_codes(values)
        want_codes, want_uniques = pd.factorize(values, sort=True)
        assert codes.dtype == np.int64 and np.array_equal(codes, want_codes) and count == len(want_uniques)


def test_hull_gaps_by_equals_gaps_by_over_the_hull():
    # the shortcut for windows that are each group's hull gives gaps_by's gaps, zero-length and
    # reversed intervals included (a group of only empty intervals is one whole-hull gap)
    rng = np.random.default_rng(11)
    for _ in range(500):
        n = int(rng.integers(0, 40))
        k = rng.integers(0, 4, n)
        s = rng.integers(0, 100, n)
        e = s + rng.integers(-3, 20, n) * (rng.random(n) < 0.8)
        want = iv.gaps_by((k, s, e), *iv.window_by(k, s, e))
        got = iv.hull_gaps_by(k, s, e)
        assert all(np.array_equal(a, b) for a, b in zip(want, got))
    k, s, e = np.array([0, 0, 1, 1]), np.array([0, 7, 3, 12]), np.array([0, 7, 9, 15])
    assert [x.tolist() for x in iv.hull_gaps_by(k, s, e)] == [[0, 1], [0, 9], [7, 12]]


def test_nested_index_depth_equals_nesting_depth():
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        k = rng.integers(0, 3, n)
        s = rng.integers(0, 50, n)
        e = s + rng.integers(0, 30, n)
        assert np.array_equal(iv.NestedIndex(k, s, e).depth, iv.nesting_depth(k, s, e))
    assert iv.NestedIndex(np.empty(0), np.empty(0), np.empty(0)).depth.size == 0


def test_unique_inverse_and_combine_keys_with_constant_columns():
    import pandas as pd

    rng = np.random.default_rng(9)
    for values in (rng.integers(0, 9, 300), np.full(50, 123456789), rng.integers(0, 2**40, 200)):
        uniq, inverse = iv.unique_inverse(values)
        codes, want = pd.factorize(values, sort=True)
        assert np.array_equal(uniq, want) and np.array_equal(inverse, codes)
    rank, pid, tid = np.zeros(6, dtype=np.int64), np.full(6, 77), np.array([5, 3, 5, 9, 3, 5])
    codes, (r, p, t) = iv.combine_keys(rank, pid, tid)
    assert codes.tolist() == [1, 0, 1, 2, 0, 1] and t.tolist() == [3, 5, 9] and r.tolist() == [0, 0, 0]
    codes, (r, p) = iv.combine_keys(rank, pid)
    assert codes.tolist() == [0] * 6 and p.tolist() == [77]


def test_nesting_depth_of_zero_length_intervals():
    """A marker (zero length) alone is outermost; at an op's start it is inside the op, and the op
    keeps its depth; two markers at one point are siblings (XSpace ThreadpoolListener markers)."""
    k = np.zeros(5, dtype=np.int64)
    d = iv.nesting_depth(k, np.array([0, 0, 20, 30, 30]), np.array([10, 0, 20, 30, 30]))
    assert d.tolist() == [0, 1, 0, 0, 0]
    d = iv.nesting_depth(np.zeros(4, dtype=np.int64), np.array([0, 0, 0, 2]), np.array([10, 0, 5, 2]))
    assert d.tolist() == [0, 2, 1, 2]
    k, s, e = np.zeros(3, dtype=np.int64), np.array([0, 0, 4]), np.array([0, 8, 4])
    assert np.array_equal(iv.NestedIndex(k, s, e).depth, iv.nesting_depth(k, s, e))
    assert iv.nesting_depth(k, s, e).tolist() == [1, 0, 1]
