"""The model's building blocks: the vectorised join used for every link."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traceview.model import join_on_keys


def naive_join(left, right):
    pairs = []
    for i in range(len(left[0])):
        for j in range(len(right[0])):
            if all(lk[i] == rk[j] for lk, rk in zip(left, right)):
                pairs.append((i, j))
    return pairs


keys = st.lists(st.integers(-3, 3), min_size=0, max_size=30)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3).flatmap(lambda k: st.tuples(
    st.lists(st.lists(st.integers(-3, 3), min_size=k, max_size=k), max_size=30),
    st.lists(st.lists(st.integers(-3, 3), min_size=k, max_size=k), max_size=30),
    st.just(k))))
def test_join_matches_a_naive_nested_loop(case):
    left_rows, right_rows, k = case
    left = [np.array([r[i] for r in left_rows], dtype=np.int64) for i in range(k)]
    right = [np.array([r[i] for r in right_rows], dtype=np.int64) for i in range(k)]
    lpos, rpos = join_on_keys(left, right)
    assert list(zip(lpos.tolist(), rpos.tolist())) == naive_join(left, right)


def test_string_keys_use_the_same_contract():
    left = [np.array(["a", "b", "b"], dtype=object)]
    right = [np.array(["b", "c", "a", "b"], dtype=object)]
    lpos, rpos = join_on_keys(left, right)
    assert list(zip(lpos.tolist(), rpos.tolist())) == [(0, 2), (1, 0), (1, 3), (2, 0), (2, 3)]


def test_hash_collisions_are_verified_away():
    # many distinct multi-keys: any hash collision would show up as a wrong pair
    rng = np.random.default_rng(0)
    a = rng.integers(0, 1 << 40, 50_000)
    b = rng.integers(0, 1 << 40, 50_000)
    lpos, rpos = join_on_keys([a, b], [a[::-1].copy(), b[::-1].copy()])
    assert len(lpos) == 50_000 or len(set(zip(a.tolist(), b.tolist()))) < 50_000
    assert (a[lpos] == a[::-1][rpos]).all() and (b[lpos] == b[::-1][rpos]).all()
