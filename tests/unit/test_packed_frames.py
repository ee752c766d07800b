"""Packed tables (traceview.packed_frames): what a job's driver joins equals what pandas gives."""

from __future__ import annotations

import dataclasses
import pickle
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from traceview.packed_frames import (concat_packed, join_inputs, join_tables, pack_frame, pack_inputs,
                                     shift_packed_rows, unpack_frame, unpack_inputs)
from traceview.pipeline import map_rows
from traceview.tables import concat_tables

NAMES = ["b", "a", "zz", "é", "c"]


def objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def rank_frame(rng: np.random.Generator, n: int, rank: int) -> pd.DataFrame:
    """A table of one rank with every packed column kind, categories in the rank's own order."""
    picks = rng.integers(-1, len(NAMES), n)
    cats = list(rng.permutation(NAMES)[: int(rng.integers(3, len(NAMES) + 1))])
    values = [NAMES[i] if i >= 0 and NAMES[i] in cats else None for i in picks]
    row = rng.integers(-1, 1000, n)
    return pd.DataFrame({
        "name": pd.Categorical(values, categories=cats),
        "rank": np.full(n, rank, dtype=np.int64),
        "dur_ns": rng.integers(0, 10**9, n),
        "share": rng.random(n),
        "row": row,
        "src_row": pd.array([None if r < 0 else int(r) for r in row], dtype="Int64"),
        "label": pd.array([None if i < 0 else f"k{i}" for i in picks], dtype="str"),
        "things": objects([("x",) * (i % 3) for i in range(n)]),
        "flag": row % 2 == 0,
    })


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_concat_packed_equals_concat_tables(seed: int) -> None:
    rng = np.random.default_rng(seed)
    frames = [rank_frame(rng, int(rng.integers(0, 12)), r) for r in range(40)]
    packed = [pickle.loads(pickle.dumps(pack_frame(f))) for f in frames]
    expected = concat_tables(frames)
    pd.testing.assert_frame_equal(concat_packed(packed), expected)
    # joined a few at a time (as the reduce does), then all: the same table
    chunks = [f for i in range(0, len(packed), 7) for f in join_tables(packed[i:i + 7])]
    pd.testing.assert_frame_equal(concat_packed(chunks), expected)


def test_unpacked_frame_is_the_frame() -> None:
    frame = rank_frame(np.random.default_rng(3), 9, 2)
    pd.testing.assert_frame_equal(unpack_frame(pack_frame(frame)), frame)


def test_layouts_that_differ_go_through_pandas() -> None:
    rng = np.random.default_rng(4)
    a, b = rank_frame(rng, 5, 0), rank_frame(rng, 4, 1)
    b["dur_ns"] = b["dur_ns"].astype(np.float64)  # another dtype on one rank
    c = rank_frame(rng, 3, 2).set_index("rank")  # not a default index: kept as a DataFrame
    frames = [a, b, c.reset_index(drop=True)]
    pd.testing.assert_frame_equal(concat_packed([pack_frame(f) for f in frames]), concat_tables(frames))
    assert pack_frame(c).frame is c


def test_empty_tables() -> None:
    empty = rank_frame(np.random.default_rng(5), 0, 0)
    got = concat_packed([pack_frame(empty), pack_frame(empty.copy())])
    pd.testing.assert_frame_equal(got, concat_tables([empty, empty.copy()]))


def test_shifted_rows_as_map_rows() -> None:
    frame = rank_frame(np.random.default_rng(6), 20, 0)
    moved = unpack_frame(shift_packed_rows(pack_frame(frame), 1000))
    pd.testing.assert_frame_equal(moved, map_rows(frame, None, 1000))


@dataclasses.dataclass
class Parts:
    merge_fields: ClassVar[bool] = True
    a: pd.DataFrame
    b: pd.DataFrame


def test_inputs_joined_as_pd_concat_when_their_layouts_agree() -> None:
    rng = np.random.default_rng(7)
    same = pd.CategoricalDtype(NAMES)
    parts = []
    for r in range(6):
        f = rank_frame(rng, int(rng.integers(0, 6)), r)
        f["name"] = f["name"].astype(object).astype(same)
        parts.append(Parts(f, f[["rank", "dur_ns"]].copy()))
    joined = join_inputs([pack_inputs(p) for p in parts])
    assert len(joined) == 1
    got = unpack_inputs(joined[0])
    pd.testing.assert_frame_equal(got.a, pd.concat([p.a for p in parts], ignore_index=True))
    pd.testing.assert_frame_equal(got.b, pd.concat([p.b for p in parts], ignore_index=True))


def test_inputs_with_other_categories_stay_apart() -> None:
    rng = np.random.default_rng(8)
    parts = [Parts(rank_frame(rng, 5, r), rank_frame(rng, 2, r)) for r in range(3)]  # categories differ
    packed = [pack_inputs(p) for p in parts]
    joined = join_inputs(packed)
    assert joined == packed
    for part, back in zip(parts, (unpack_inputs(p) for p in joined)):
        pd.testing.assert_frame_equal(back.a, part.a)


@dataclasses.dataclass
class UnitedParts:
    """A cross-rank input whose reduce concatenates its frames with ``concat_tables``."""

    merge_fields: ClassVar[bool] = True
    merge_unites_categories: ClassVar[bool] = True
    a: pd.DataFrame
    b: pd.DataFrame


def test_inputs_with_other_categories_are_joined_as_concat_tables_when_declared() -> None:
    """Parts whose categories differ (each rank its own names) are joined into one part, equal to
    ``concat_tables`` of the parts (categories united); empty parts add nothing."""
    rng = np.random.default_rng(9)
    parts = [UnitedParts(rank_frame(rng, int(rng.integers(0, 6)), r), rank_frame(rng, 2, r)) for r in range(6)]
    parts.append(UnitedParts(rank_frame(rng, 0, 6), rank_frame(rng, 0, 6)))
    joined = join_inputs([pack_inputs(p) for p in parts])
    assert len(joined) == 1
    got = unpack_inputs(joined[0])
    pd.testing.assert_frame_equal(got.a, concat_tables([p.a for p in parts]))
    pd.testing.assert_frame_equal(got.b, concat_tables([p.b for p in parts]))
