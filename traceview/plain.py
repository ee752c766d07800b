"""Plain values: what the report model holds (JSON-able Python values), from numpy, pandas and
Arrow cells. Shared by the report and by the analyses' report hooks (which must not import the
report itself: it is a higher layer)."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

from traceview.secrets import ColumnRows


def is_missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    try:
        return bool(pd.isna(value)) if np.isscalar(value) else False
    except (TypeError, ValueError):
        return False


def plain(value: Any, key: str = "") -> Any:
    """JSON-able copy of ``value``: numpy scalars to Python, NaN/NA to None, ``*_ns`` to int."""
    # exact built-in types first: a report holds tens of thousands of them, and the ABC checks of
    # the general path (``Mapping``, numpy scalars, ``pd.isna``) cost ten times a type lookup
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return _plain_float(value, key)
    if kind is dict:
        return {str(k): plain(v, str(k)) for k, v in value.items()}
    if kind is list:
        return [plain(v, key) for v in value]
    return _plain_other(value, key)


def _plain_float(value: float, key: str) -> float | int | None:
    if math.isnan(value) or math.isinf(value):
        return None
    if key.endswith("_ns") or key.endswith("_ns_per_step"):
        return int(round(value))
    return value


def _plain_other(value: Any, key: str) -> Any:
    """:func:`plain` of anything but an exact str, int, bool, float, dict, list or None."""
    if isinstance(value, ColumnRows):
        return value  # its cells went through plain() column by column (column_rows)
    if isinstance(value, Mapping):
        return {str(k): plain(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, np.ndarray)):
        items = sorted(value) if isinstance(value, set) else list(value)
        return [plain(v, key) for v in items]
    if is_missing(value):
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return _plain_float(float(value), key)
    if isinstance(value, (str, np.str_)):
        return str(value)
    return str(value)


def records(frame: pd.DataFrame, columns: list[str]) -> list[dict[str, Any]]:
    """The rows of ``frame`` as dicts keyed by ``columns`` (its columns, renamed), each cell through
    :func:`plain`: the same values as :func:`plain` of each cell that ``itertuples`` gives (converted
    from one object array: :func:`column_rows`)."""
    return column_rows(frame, columns).rows()


def column_rows(frame: pd.DataFrame, columns: list[str], rows: np.ndarray | None = None) -> ColumnRows:
    """:func:`records` held as columns: :func:`plain` of each cell of each column of ``frame`` (as
    iterating the column gives the cell), by position (names may repeat), of the rows at positions
    ``rows`` (all when None). Taken from one object array of the whole frame: a Series per column
    (``frame.items()``: 13 us a column) or a frame of the chosen rows (``iloc``: 0.3 ms) costs more
    than converting a report table's few rows."""
    if not len(frame.columns):
        return ColumnRows(columns, [])
    # every NA (NaN, None, pd.NA, NaT) becomes None, which is plain() of it; numpy and nullable
    # numbers become Python ones, as iterating the column gives
    array = frame.to_numpy(dtype=object, na_value=None)
    cells = (array if rows is None else array[rows]).T.tolist()
    return ColumnRows(columns, [plain_cells(column, key) for column, key in zip(cells, columns)])


#: the types :func:`plain` returns as they are
_PLAIN_AS_IS = frozenset({str, int, bool, type(None)})


def plain_cells(cells: list[Any], key: str) -> list[Any]:
    """``[plain(v, key) for v in cells]``, without a call for a column of plain values (ints,
    strings: most of a report's cells)."""
    if set(map(type, cells)) <= _PLAIN_AS_IS:
        return cells
    return [v if type(v) in _PLAIN_AS_IS else plain(v, key) for v in cells]


# ------------------------------------------------------------------------------------ sections
