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


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1), st.sampled_from([1, 7, 10_000, 2**40, 2**62]),
       st.lists(st.integers(0, 60), max_size=40), st.lists(st.integers(0, 60), max_size=40, unique=True))
def test_one_key_join_matches_a_naive_nested_loop(base, step, left_steps, right_steps):
    # one int64 key: unique right keys close together take the lookup table, spread or repeated
    # ones the sort; keys near the ends of int64 must not wrap around
    def keys(steps):
        return np.array([min(max(base + k * step, -(2**63)), 2**63 - 1) for k in steps], dtype=np.int64)

    left, right = [keys(left_steps)], [keys(right_steps)]
    lpos, rpos = join_on_keys(left, right)
    assert list(zip(lpos.tolist(), rpos.tolist())) == naive_join(left, right)
    assert lpos.dtype == rpos.dtype == np.int64


def test_one_key_join_takes_the_lookup_table_only_for_unique_close_keys():
    from traceview.model import unique_dense_join

    right = np.array([5, 9, 7], dtype=np.int64)
    assert unique_dense_join(np.array([7, 5, 6], dtype=np.int64), right) is not None
    assert unique_dense_join(np.array([7], dtype=np.int64), np.array([5, 5], dtype=np.int64)) is None  # repeated
    assert unique_dense_join(np.array([7], dtype=np.int64), np.array([0, 10**9], dtype=np.int64)) is None  # spread


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


# ------------------------------------------------------------------------- steps


def _ranges(rows: list[tuple[int, str, str, int, int]]):
    """An events table of CPU ranges: (rank, kind, name, start, end) each; category from the kind."""
    from traceview.model import Kind, kind_array, make_events_table

    kinds = np.array([int(Kind[k.upper().removesuffix("_OS")]) for _, k, _, _, _ in rows], dtype=np.int8)
    category = ["os_runtime" if k == "annotation_os" else ("user_annotation" if k == "annotation" else "cpu_op")
                for _, k, _, _, _ in rows]
    return make_events_table({
        "rank": np.array([r for r, *_ in rows], dtype=np.int32),
        "kind": kind_array(kinds),
        "category": category,
        "name": [n for _, _, n, _, _ in rows],
        "start_ns": np.array([s for *_, s, _ in rows], dtype=np.int64),
        "dur_ns": np.array([e - s for *_, s, e in rows], dtype=np.int64),
    }, len(rows))


def test_default_steps_prefer_profiler_steps_per_rank():
    from traceview.model import steps_from_annotations

    events = _ranges([
        (0, "annotation", "ProfilerStep#7", 0, 100), (0, "annotation", "step_1", 10, 90),
        (0, "annotation", "ProfilerStep#8", 100, 200), (0, "annotation", "step_2", 110, 190),
        (1, "annotation", "iteration 4", 0, 100), (1, "cpu_op", "Step-5", 100, 150),
        (1, "annotation", "stepper_9", 150, 160),
    ])
    steps = steps_from_annotations(events).to_pydict()
    assert list(zip(steps["rank"], steps["step"], steps["name"])) == [
        (0, 7, "ProfilerStep#7"), (0, 8, "ProfilerStep#8"), (1, 4, "iteration 4"), (1, 5, "Step-5")]


def test_marker_steps_are_numbered_by_their_name_else_in_time_order():
    from traceview.model import steps_from_annotations

    events = _ranges([
        (0, "annotation", "fwd_layer_3", 300, 400), (0, "annotation", "fwd_layer_3", 0, 100),  # repeated numbers
        (1, "annotation", "batch", 50, 60), (1, "annotation", "batch", 10, 20),  # no numbers
        (2, "annotation", "batch_12", 0, 10), (2, "annotation", "batch_11", 20, 30),
    ])
    steps = steps_from_annotations(events, r"^(fwd_layer_\d+|batch(_\d+)?)$").to_pydict()
    assert list(zip(steps["rank"], steps["step"], steps["start_ns"])) == [
        (0, 0, 0), (0, 1, 300), (1, 0, 10), (1, 1, 50), (2, 12, 0), (2, 11, 20)]


def test_os_runtime_calls_are_never_steps_and_bad_markers_are_user_errors():
    import pytest

    from traceview.errors import TraceviewError
    from traceview.model import steps_from_annotations

    events = _ranges([(0, "annotation_os", "step_1", 0, 10), (0, "annotation", "step_2", 20, 30)])
    assert steps_from_annotations(events).column("name").to_pylist() == ["step_2"]
    assert steps_from_annotations(events, "step").column("name").to_pylist() == ["step_2"]
    with pytest.raises(TraceviewError, match="not a valid regular expression"):
        steps_from_annotations(events, "step(")
