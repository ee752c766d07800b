"""Table helpers shared by the report model and the pipeline: ordering, sampling, concatenation.

The report shows the top rows of a table by its sort key and draws scatter charts from a sample of
it; a job keeps, per rank, exactly the rows those need. Both sides use these functions, so the rows
are the same whether the ranks were analysed together or one by one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def masked_int64(values: np.ndarray, missing: np.ndarray) -> pd.arrays.IntegerArray:
    """``values`` as a nullable Int64 array, missing where ``missing`` is True: what
    ``pd.array([None if m else int(v) ...], dtype="Int64")`` gives (1 under the mask, as pandas
    fills it), without a Python loop over the rows."""
    missing = np.asarray(missing, dtype=bool)
    return pd.arrays.IntegerArray(np.where(missing, 1, values).astype(np.int64), missing)


def row_hash(values: np.ndarray) -> np.ndarray:
    """A fixed pseudo-random uint64 per value (splitmix64): the sample key of a row id."""
    with np.errstate(over="ignore"):
        z = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def sample_mask(frame: pd.DataFrame, column: str, rows: int) -> np.ndarray:
    """The ``rows`` rows of ``frame`` with the smallest hash of ``column`` (a uniform sample that is the
    same whether taken over all ranks at once or over each rank's own sample)."""
    mask = np.zeros(len(frame), dtype=bool)
    if rows <= 0 or column not in frame or frame.empty:
        return mask
    if len(frame) <= rows:
        mask[:] = True
        return mask
    keys = row_hash(frame[column].fillna(-1).to_numpy(dtype=np.int64))
    mask[np.argsort(keys, kind="stable")[:rows]] = True
    return mask


def top_order(frame: pd.DataFrame, column: str) -> np.ndarray:
    """Row positions, largest ``column`` first (missing values last; ties keep their order)."""
    values = pd.to_numeric(frame[column], errors="coerce").astype("float64").fillna(-np.inf).to_numpy()
    return np.argsort(-values, kind="stable")


def drop_unused_categories(frame: pd.DataFrame) -> pd.DataFrame:
    """Categorical columns keep only the categories they use (else each carries the trace's whole name
    dictionary, which can be most of a rank's result)."""
    # by the dtypes Series: ``frame[c]`` per column built a Series for each (a tenth of a rank's cut)
    cats = list(dict.fromkeys(c for c, dtype in frame.dtypes.items() if isinstance(dtype, pd.CategoricalDtype)))
    if not cats:
        return frame
    frame = frame.copy()
    for c in cats:
        frame[c] = frame[c].cat.remove_unused_categories()
    return frame


def concat_tables(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-rank tables; categorical columns stay categorical: the categories are the
    values used, in sorted order (what ``astype("category")`` of the concatenated values gives),
    and every frame's codes are recoded to them before the concatenation (no column of Python
    strings in between: the reduce of thousands of ranks concatenates this way)."""
    nonempty = [f for f in frames if len(f)]
    if not nonempty:
        return frames[0].reset_index(drop=True)
    if len(nonempty) == 1:
        return nonempty[0].reset_index(drop=True)
    cats = [c for c in nonempty[0].columns if isinstance(nonempty[0][c].dtype, pd.CategoricalDtype)]
    shared = [c for c in cats if all(c in f and isinstance(f.dtypes[c], pd.CategoricalDtype) for f in nonempty)]
    loose = [c for c in cats if c not in shared]
    if loose:
        nonempty = [f.astype({c: object for c in loose if c in f}) for f in nonempty]
    if shared:
        dtypes = {c: union_dtype([f[c] for f in nonempty]) for c in shared}
        nonempty = [recoded(f, dtypes) for f in nonempty]
    table = pd.concat(nonempty, ignore_index=True)
    for c in loose:
        table[c] = table[c].astype("category")
    return table


def recoded(frame: pd.DataFrame, dtypes: dict[str, pd.CategoricalDtype]) -> pd.DataFrame:
    """``frame`` with the categorical columns of ``dtypes`` on those categories, in their order
    (unordered dtypes compare equal whatever the order, so ``astype`` would keep a frame's own)."""
    change = [c for c, dtype in dtypes.items() if not frame.dtypes[c].categories.equals(dtype.categories)]
    if not change:
        return frame
    frame = frame.copy(deep=False)
    for c in change:
        frame[c] = frame[c].cat.set_categories(dtypes[c].categories)
    return frame


def union_dtype(columns: list[pd.Series]) -> pd.CategoricalDtype:
    """The categorical dtype ``astype("category")`` gives the concatenation of ``columns``
    (categorical Series): the categories any of them uses, as that inference orders them, found
    from the distinct values only."""
    used = []
    for col in columns:
        codes = np.asarray(col.cat.codes)
        present = np.unique(codes[codes >= 0])
        used.append(col.cat.categories.take(present).astype(object))
    values = pd.Index(np.concatenate(used) if used else np.empty(0, dtype=object), dtype=object).unique()
    dtype = pd.Series(values, dtype=object).astype("category").dtype
    assert isinstance(dtype, pd.CategoricalDtype)
    return dtype
