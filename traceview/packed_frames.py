"""Tables as plain column arrays, for a driver that holds and joins thousands of ranks' results.

A job's driver receives one small result per rank, each with a few dozen tables of a few rows.
Unpickling and concatenating them as pandas DataFrames costs about a millisecond per frame (a
DataFrame and its blocks built, then taken apart again by ``pd.concat``): most of a 4,096-rank
reduce. :class:`PackedFrame` keeps a table as its column arrays (numpy arrays, categorical codes
with their categories, Arrow string arrays, the values and mask of nullable integers), which pickle
as a few buffers; :func:`concat_packed` joins the same table of many ranks column by column and
builds one DataFrame at the end, equal to :func:`traceview.tables.concat_tables` of the frames (a
column whose dtypes differ between ranks, or any other dtype, goes through that function).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from traceview.tables import concat_tables

#: column kinds: a numpy array, categorical codes, an Arrow string array, nullable Int64
NUMPY, CATEGORY, STRING, MASKED = "numpy", "category", "string", "masked"


@dataclass
class PackedFrame:
    """A DataFrame with a default index as (name, kind, dtype, arrays) per column; ``frame`` holds
    the DataFrame itself when it cannot be packed (another index, repeated names, other dtypes)."""

    rows: int
    names: list[Any]
    kinds: list[str]
    dtypes: list[Any]
    data: list[tuple[Any, ...]]
    frame: pd.DataFrame | None = None


def pack_frame(frame: pd.DataFrame) -> PackedFrame:
    """``frame`` as column arrays (see the module docstring)."""
    index = frame.index
    plain = isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1
    names = list(frame.columns)
    if not plain or len(set(map(repr, names))) != len(names):
        return PackedFrame(len(frame), names, [], [], [], frame=frame)
    kinds: list[str] = []
    dtypes: list[Any] = []
    data: list[tuple[Any, ...]] = []
    for name, dtype in zip(names, frame.dtypes.tolist()):
        array = frame[name].array
        parts: tuple[Any, ...]
        if isinstance(dtype, pd.CategoricalDtype):
            kind, parts = CATEGORY, (np.asarray(array.codes), dtype)
        elif isinstance(dtype, np.dtype):
            kind, parts = NUMPY, (np.asarray(array),)
        elif isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow":
            kind, parts = STRING, (pa.chunked_array(pa.array(array)).combine_chunks(),)
        elif str(dtype) == "Int64":
            mask = np.asarray(array.isna())
            kind, parts = MASKED, (np.asarray(array.to_numpy(dtype=np.int64, na_value=1)), mask)
        else:
            return PackedFrame(len(frame), names, [], [], [], frame=frame)
        kinds.append(kind)
        dtypes.append(dtype)
        data.append(parts)
    return PackedFrame(len(frame), names, kinds, dtypes, data)


def column_of(kind: str, dtype: Any, parts: tuple[Any, ...]) -> Any:
    """The pandas array of one packed column."""
    if kind == CATEGORY:
        return pd.Categorical.from_codes(parts[0], dtype=parts[1])
    if kind == NUMPY:
        return parts[0]
    if kind == STRING:
        return pd.array(parts[0], dtype=dtype)
    return pd.arrays.IntegerArray(parts[0], parts[1])


def unpack_frame(packed: PackedFrame) -> pd.DataFrame:
    if packed.frame is not None:
        return packed.frame
    columns = [column_of(k, d, p) for k, d, p in zip(packed.kinds, packed.dtypes, packed.data)]
    frame = frame_of(packed.names, columns, packed.rows)
    # an object column stays one: pandas 3 infers Arrow strings from an object ndarray of strings
    objects = {n: object for n, d in zip(packed.names, packed.dtypes) if isinstance(d, np.dtype) and d.kind == "O"}
    return frame.astype(objects) if objects else frame


def frame_of(names: list[Any], columns: list[Any], rows: int) -> pd.DataFrame:
    if not names:
        return pd.DataFrame(index=pd.RangeIndex(rows))
    frame = pd.DataFrame(dict(zip(range(len(names)), columns)), index=pd.RangeIndex(rows), copy=False)
    frame.columns = pd.Index(names)
    return frame


def shift_packed_rows(packed: PackedFrame, offset: int) -> PackedFrame:
    """Row columns (``row``, ``*_row``, integer) moved by ``offset`` where present (>= 0), as
    :func:`traceview.pipeline.map_rows` moves them."""
    if packed.frame is not None or not offset:
        return packed
    data = list(packed.data)
    for i, (name, kind) in enumerate(zip(packed.names, packed.kinds)):
        if not (name == "row" or str(name).endswith("_row")):
            continue
        if kind == NUMPY and np.issubdtype(packed.dtypes[i], np.integer):
            values = data[i][0]
            data[i] = (np.where(values >= 0, values + offset, values).astype(values.dtype),)
        elif kind == MASKED:
            values, mask = data[i]
            data[i] = (np.where((values >= 0) & ~mask, values + offset, values), mask)
    return PackedFrame(packed.rows, packed.names, packed.kinds, packed.dtypes, data)


def concat_packed(frames: list[PackedFrame]) -> pd.DataFrame:
    """:func:`traceview.tables.concat_tables` of the unpacked frames, joined column by column."""
    frames = join_tables(frames)
    nonempty = [f for f in frames if f.rows]
    if len(nonempty) <= 1:  # (as concat_tables: the only frame with rows, else the first)
        return unpack_frame(nonempty[0] if nonempty else frames[0]).reset_index(drop=True)
    return concat_tables([unpack_frame(f) for f in frames])


def join_tables(frames: list[PackedFrame]) -> list[PackedFrame]:
    """``frames`` as one packed frame holding :func:`traceview.tables.concat_tables` of them, or
    as they are where their layouts differ (the reduce joins a job's ranks a few hundred at a time,
    so the memory held is the tables' arrays, not thousands of small objects)."""
    nonempty = [f for f in frames if f.rows]
    if not nonempty:
        return frames[:1]
    if len(nonempty) == 1 or not same_layout(nonempty):
        return nonempty
    return [joined(nonempty, union=True)]


def joined(frames: list[PackedFrame], *, union: bool) -> PackedFrame:
    """One packed frame of ``frames`` (all of one layout), categories united (``union``: as
    ``concat_tables`` does) or all the same (as ``pd.concat`` keeps them)."""
    first = frames[0]
    data: list[tuple[Any, ...]] = []
    for i, (kind, dtype) in enumerate(zip(first.kinds, first.dtypes)):
        parts = [f.data[i] for f in frames]
        if kind == CATEGORY:
            data.append(concat_categorical(parts) if union else (np.concatenate([p[0] for p in parts]), dtype))
        elif kind == NUMPY:
            data.append((np.concatenate([p[0] for p in parts]),))
        elif kind == STRING:
            data.append((pa.concat_arrays([p[0] for p in parts]),))
        else:
            data.append((np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])))
    dtypes = [d[1] if k == CATEGORY else t for k, t, d in zip(first.kinds, first.dtypes, data)]
    return PackedFrame(sum(f.rows for f in frames), list(first.names), list(first.kinds), dtypes, data)


def same_layout(frames: list[PackedFrame]) -> bool:
    """Every frame packed, with the same column names, kinds and (but for categories) dtypes."""
    first = frames[0]
    if first.frame is not None:
        return False
    for f in frames[1:]:
        if f.frame is not None or f.names != first.names or f.kinds != first.kinds:
            return False
        if any(k != CATEGORY and d != d0 for k, d, d0 in zip(f.kinds, f.dtypes, first.dtypes)):
            return False
    return True


def concat_categorical(parts: list[tuple[Any, ...]]) -> tuple[np.ndarray, pd.CategoricalDtype]:
    """(codes, dtype): the categorical codes of many frames on the union of the categories they use, ordered as
    ``astype("category")`` orders them (what :func:`traceview.tables.concat_tables` gives)."""
    used = []
    for codes, dtype in parts:
        present = np.unique(codes[codes >= 0])
        used.append(np.asarray(dtype.categories.take(present), dtype=object))
    values = pd.Index(np.concatenate(used), dtype=object).unique()
    union = pd.Series(values, dtype=object).astype("category").dtype
    assert isinstance(union, pd.CategoricalDtype)
    codes = []
    for part_codes, dtype in parts:
        lookup = np.append(union.categories.get_indexer(dtype.categories), -1)
        codes.append(lookup[part_codes])  # code -1 (missing) takes the appended -1
    return np.concatenate(codes), union


# ------------------------------------------------------------------------ cross-rank inputs


def pack_inputs(part: Any) -> Any:
    """A rank's cross-rank inputs (a dataclass) with its DataFrame fields packed (only for types
    that declare ``merge_fields``, whose parts the driver joins field by field)."""
    if not (getattr(part, "merge_fields", False) and dataclasses.is_dataclass(part)) or isinstance(part, type):
        return part
    frames = {f.name: pack_frame(getattr(part, f.name)) for f in dataclasses.fields(part)
              if isinstance(getattr(part, f.name), pd.DataFrame)}
    return dataclasses.replace(part, **frames) if frames else part


def unpack_inputs(part: Any) -> Any:
    """:func:`pack_inputs` undone."""
    if not dataclasses.is_dataclass(part) or isinstance(part, type):
        return part
    frames = {f.name: unpack_frame(getattr(part, f.name)) for f in dataclasses.fields(part)
              if isinstance(getattr(part, f.name), PackedFrame)}
    return dataclasses.replace(part, **frames) if frames else part


def join_inputs(parts: list[Any]) -> list[Any]:
    """The parts of one analysis's cross-rank inputs (packed, :func:`pack_inputs`), joined into one
    where their type declares ``merge_fields`` (its reduce starts by ``pd.concat`` of each
    DataFrame field over the parts and reads nothing else of them) and every part's fields have the
    same columns and dtypes, categories included (so the joined arrays are what ``pd.concat``
    gives), all its fields being frames; else the parts as they are. A type that also declares
    ``merge_unites_categories`` concatenates with :func:`traceview.tables.concat_tables` (categories
    united): its parts are joined so where only their categories differ. Still packed:
    :func:`unpack_inputs` each."""
    if len(parts) < 2 or not getattr(parts[0], "merge_fields", False) or len({type(p) for p in parts}) > 1:
        return parts
    union = bool(getattr(parts[0], "merge_unites_categories", False))
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(parts[0]):  # (every field a packed frame: nothing else to join)
        values = [getattr(p, f.name) for p in parts]
        if not all(isinstance(v, PackedFrame) for v in values):
            return parts
        if union:
            values = [v for v in values if v.rows] or values[:1]
            if len(values) > 1 and not same_layout(values):
                return parts
        elif not identical_layout(values):
            return parts
        fields[f.name] = joined(values, union=union) if len(values) > 1 else values[0]
    return [dataclasses.replace(parts[0], **fields)]


def identical_layout(frames: list[PackedFrame]) -> bool:
    """Every frame (with rows or not) packed with the same names, kinds and dtypes, categories
    and their order included."""
    first = frames[0]
    if first.frame is not None:
        return False
    return all(f.frame is None and f.names == first.names and f.kinds == first.kinds
               and all(d == d0 and (k != CATEGORY or d.categories.equals(d0.categories))
                       for k, d, d0 in zip(f.kinds, f.dtypes, first.dtypes))
               for f in frames[1:])


