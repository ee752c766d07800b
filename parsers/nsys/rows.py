"""Fetching an export's rows: SQLite connections, and the ADBC reader that reads the event tables
straight into Arrow columns (batch by batch, narrowed where the values fit).
"""

from __future__ import annotations

import os
import re
import sqlite3
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from traceview.errors import require_regular_file
from traceview.model import lazy_zeros
from traceview.parsers.nsys.columns import decode_text


def file_head(path: Path, n: int = 16) -> bytes:
    require_regular_file(path)  # before open: a FIFO would block it forever
    with open(path, "rb") as f:
        return f.read(n)


#: how long a read waits for a lock another program holds before the database is "locked"
BUSY_TIMEOUT_S = 5.0


def connect_export(path: Path) -> sqlite3.Connection:
    uri = Path(os.path.abspath(path)).as_uri() + "?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)


def table_names(con: sqlite3.Connection) -> list[str]:
    return [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]


#: SQLite's own words for the errors that must not be retried with the ``sqlite3`` reader (a lock
#: would be waited for twice) -> the result code :func:`traceview.errors.sqlite_error` knows.
_DRIVER_LOCKED = {"database is locked": "SQLITE_BUSY", "database table is locked": "SQLITE_LOCKED"}
#: rows per Arrow batch. Each batch is copied into the growing result columns and dropped before
#: the next is read: Arrow arrays imported from the driver keep their whole batch alive while any
#: column of it is referenced, so one batch per table kept every column the SQL selected (~300 MB
#: on the 292 MB benchmark export) alive as long as the groups used any of them. The driver types
#: a column by its first batch; a later value of another type is its error, and that table goes
#: through the ``sqlite3`` reader, as a mistyped value always did.
ARROW_BATCH_ROWS = 1 << 16
#: Columns of ids and sizes that nsys writes as 32-bit values (devices, streams, correlation and
#: string ids, event classes, launch dimensions). An expression of these alone is read as int32
#: (half the memory of the fetched columns and of the groups made of them) until a value does not
#: fit: then as int64 (:class:`_Growing`), so the values are the same either way; every reader of
#: them takes either width. Times, ``globalPid``/``globalTid`` and byte counts stay int64.
NARROW_COLUMNS = frozenset({
    "deviceId", "streamId", "correlationId", "nameId", "eventClass", "demangledName", "shortName",
    "mangledName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
})
_IS_NULL = " IS NULL"


class ArrowRows:
    """The rows of one export through ADBC's SQLite driver, as Arrow columns.

    One connection, opened at the first query, and one more for a prefetched table (each reads
    in its own transaction: the file does not change while nsys is not writing it, and a writer's
    lock is waited for, then said, as with sqlite3). Anything the driver cannot
    type as traceview needs (an integer column holding text, a REAL or a BLOB) or cannot read
    (a damaged page) makes :meth:`fetch` return None, so the ``sqlite3`` reader reads that table
    and reports what is wrong exactly as before; a locked database is said at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._con: _DriverConnection | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[str, Future[_Fetched | None]] = {}  # SQL -> its result, being read

    def _uri(self) -> str:
        return Path(os.path.abspath(self.path)).as_uri() + "?mode=ro"

    def _connection(self) -> _DriverConnection:
        if self._con is None:
            self._con = _DriverConnection(self._uri())
        return self._con

    def close(self) -> None:
        if self._pool is not None:  # a prefetch nobody asked for (the parse stopped early) is dropped
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool, self._pending = None, {}
        if self._con is not None:
            self._con.close()
            self._con = None

    def query(self, sql: str, plan: _Plan) -> _Fetched | None:
        """The result of ``sql`` as columns (prefetched if :meth:`prefetch` was given it); None
        where the driver could not read or type it."""
        try:
            pending = self._pending.pop(sql, None)
            return pending.result() if pending is not None else self._connection().run(sql, plan)
        except ImportError:
            return None
        except Exception as exc:  # noqa: BLE001 - driver errors have no common base with pyarrow's
            text = str(exc)
            words = next((w for w in _DRIVER_LOCKED if w in text), None)
            if words is None:
                return None
            error = sqlite3.OperationalError(words)
            error.sqlite_errorname = _DRIVER_LOCKED[words]  # read by errors.sqlite_error
            raise error from None

    def prefetch(self, table: str, exprs: list[str], text: str | None = None, order: str = "") -> None:
        """Start reading what :meth:`fetch` will be asked for ``table`` in a background thread, on a
        connection of its own: the driver lets go of the GIL while SQLite steps through rows, so a
        big table is read while the one before it is turned into columns, where a second core is
        free. One table at a time; its result waits in memory until asked for."""
        sql, in_sql, null_of = self.statement(table, exprs, text, order)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="traceview-nsys")
        self._pending[sql] = self._pool.submit(self._query_alone, sql, _Plan.of(exprs, in_sql, null_of, text))

    def _query_alone(self, sql: str, plan: _Plan) -> _Fetched | None:
        con = _DriverConnection(self._uri())
        try:
            return con.run(sql, plan)
        finally:
            con.close()

    @staticmethod
    def statement(table: str, exprs: list[str], text: str | None,
                  order: str) -> tuple[str, list[int], dict[int, int]]:
        """(SQL, positions of ``exprs`` it selects, flag position -> position of the expression
        whose NULL test the flag is: read from the Arrow validity bitmap, not computed by SQLite)."""
        plain = {e: i for i, e in enumerate(exprs) if not e.endswith(_IS_NULL)}
        null_of = {i: plain[e.removesuffix(_IS_NULL)] for i, e in enumerate(exprs)
                   if e.endswith(_IS_NULL) and e.removesuffix(_IS_NULL) in plain}
        in_sql = [i for i in range(len(exprs)) if i not in null_of]
        sql_exprs = [exprs[i] for i in in_sql]
        if text is not None:
            sql_exprs += [f"COALESCE(CAST({text} AS BLOB), X'')", f"{text}{_IS_NULL}"]
        return "SELECT " + ", ".join(sql_exprs) + f' FROM "{table}" {order}', in_sql, null_of

    def fetch(self, table: str, exprs: list[str], text: str | None,
              order: str) -> tuple[list[np.ndarray], pa.Array | None, np.ndarray | None] | None:
        """What :meth:`ExportParser.fetch` returns (plus the rows whose text was not UTF-8), or None.

        A flag ``X IS NULL`` of an expression ``X`` that is itself selected is read from the Arrow
        validity bitmap rather than computed by SQLite (as bools, not 0/1 integers). The text is
        selected as ``COALESCE(CAST(text AS BLOB), X'')`` with its NULL flag beside it: the driver
        types a column by its first batch, and a first batch of NULLs would type it as integers."""
        sql, in_sql, null_of = self.statement(table, exprs, text, order)
        result = self.query(sql, _Plan.of(exprs, in_sql, null_of, text))
        if result is None:
            return None
        texts = replaced = None
        if result.text is not None:
            texts, replaced = decode_text(result.text)
        columns = [result.nulls[null_of[i]] if i in null_of else result.values[i] for i in range(len(exprs))]
        return columns, texts, replaced


class _DriverConnection:
    """One connection of ADBC's SQLite driver, through ``adbc_driver_manager``'s own classes: its
    DB-API module imports pyarrow's dataset, Parquet, Acero and file-system modules, 11 MB resident
    for nothing a read uses (issue 12 measures the parse's peak memory). As that module's
    connection does, it reads in a transaction (autocommit off) and waits for a writer's lock as
    long as ``sqlite3`` does."""

    def __init__(self, uri: str) -> None:
        import adbc_driver_manager  # here, not at import: Kineto-only runs skip it
        import adbc_driver_sqlite

        self._manager = adbc_driver_manager
        self.database = adbc_driver_sqlite.connect(uri)
        try:
            self.connection = adbc_driver_manager.AdbcConnection(self.database)
            self.connection.set_autocommit(False)
            self._execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}", lambda reader: reader.read_all())
        except BaseException:
            self.close()
            raise

    def _execute(self, sql: str, consume: Callable[[pa.RecordBatchReader], Any]) -> Any:
        statement = self._manager.AdbcStatement(self.connection)
        try:
            statement.set_options(**{"adbc.sqlite.query.batch_rows": str(ARROW_BATCH_ROWS)})
            statement.set_sql_query(sql)
            stream, _ = statement.execute_query()
            reader = pa.RecordBatchReader.from_stream(stream)
            try:
                return consume(reader)
            finally:
                reader.close()  # (a result read in part: the statement cannot close over an open stream)
        finally:
            statement.close()

    def run(self, sql: str, plan: _Plan) -> _Fetched | None:
        """The result of ``sql`` read into columns (:func:`_read_batches`)."""
        return self._execute(sql, lambda reader: _read_batches(reader, plan))

    def close(self) -> None:
        for part in ("connection", "database"):
            handle = getattr(self, part, None)
            if handle is not None:
                try:
                    handle.close()
                except Exception:  # noqa: BLE001 - closing a read-only connection: nothing to lose
                    pass
                setattr(self, part, None)


@dataclass
class _Plan:
    """What :func:`_read_batches` makes of each result column."""

    selected: list[int]  # expression index of each integer column of the result, in order
    null_flags: set[int]  # expressions whose NULL flags are asked for
    text: bool  # the result ends with a text column (binary) and its NULL flag
    narrow: set[int] = field(default_factory=set)  # expressions read as int32 while their values fit

    @classmethod
    def of(cls, exprs: list[str], in_sql: list[int], null_of: dict[int, int], text: str | None) -> _Plan:
        narrow = {i for i in in_sql if set(re.findall(r'"([^"]*)"', exprs[i])) <= NARROW_COLUMNS}
        return cls(selected=in_sql, null_flags=set(null_of.values()), text=text is not None, narrow=narrow)


@dataclass
class _Fetched:
    """A result as columns: int64 values (NULL -> -1) and NULL flags by expression index, and the
    text (binary, NULL where its flag says so) where one was selected."""

    values: dict[int, np.ndarray]
    nulls: dict[int, np.ndarray]
    text: pa.Array | None


class _Growing:
    """One column filled batch by batch. It grows by ``realloc`` (``ndarray.resize``): for big
    arrays glibc moves pages rather than bytes, and the unused end of the capacity is never
    touched, so it costs address space, not memory; no list of parts is joined at the end.

    A column started as int32 (``NARROW_COLUMNS``) becomes int64 at the first batch whose values
    do not fit, so every value is kept exactly either way."""

    def __init__(self, dtype: type[np.generic]) -> None:
        self.data = np.empty(0, dtype=dtype)
        self.size = 0

    def append(self, values: np.ndarray) -> None:
        if self.data.dtype == np.int32 and values.dtype == np.int64 and len(values) and (
                values.min() < -(1 << 31) or values.max() >= (1 << 31)):
            wide = self.data[:self.size].astype(np.int64)
            self.data = wide  # (the int32 column is freed here)
        end = self.size + len(values)
        if end > len(self.data):
            self.data.resize(max(end, 2 * len(self.data), ARROW_BATCH_ROWS), refcheck=False)
        self.data[self.size:end] = values
        self.size = end

    def finish(self) -> np.ndarray:
        self.data.resize(self.size, refcheck=False)
        return self.data


def _read_batches(reader: pa.RecordBatchReader, plan: _Plan) -> _Fetched | None:
    """Read a result batch by batch into columns, each batch dropped before the next is read
    (see ``ARROW_BATCH_ROWS``); None where the driver typed a column as traceview cannot use."""
    values = {i: _Growing(np.int32 if i in plan.narrow else np.int64) for i in plan.selected}
    nulls = {i: _Growing(np.bool_) for i in plan.null_flags}
    text_chunks: list[pa.Array] = []
    text_null = _Growing(np.int64)
    for batch in reader:
        for k, i in enumerate(plan.selected):
            column = batch.column(k)
            ints = _int_column(column)
            if ints is None:
                return None
            values[i].append(ints)
            if i in nulls:
                nulls[i].append(_null_flags(column))
        if plan.text:
            chunk, flag = batch.column(len(plan.selected)), _int_column(batch.column(len(plan.selected) + 1))
            if flag is None or not pa.types.is_binary(chunk.type):
                return None
            text_chunks.append(chunk)
            text_null.append(flag)
        del batch
    text = None
    if plan.text:
        raw = pa.concat_arrays(text_chunks) if text_chunks else pa.array([], pa.binary())
        text = _with_nulls(raw, text_null.finish() == 1)
    flags = {i: _zeros_if_clean(g.finish()) for i, g in nulls.items()}
    return _Fetched(values={i: g.finish() for i, g in values.items()}, nulls=flags, text=text)


def _zeros_if_clean(flags: np.ndarray) -> np.ndarray:
    """NULL flags; where no row is NULL (a clean export), :func:`~traceview.model.lazy_zeros` instead: pages nobody
    writes cost no memory."""
    return flags if flags.any() else lazy_zeros(len(flags), np.bool_)


def _null_flags(values: pa.Array) -> np.ndarray:
    """Which rows of a result column are NULL, as bools (``X IS NULL`` read from the validity bitmap)."""
    if values.null_count == 0:
        return np.zeros(len(values), dtype=bool)
    return np.asarray(values.is_null(), dtype=bool)


def _int_column(values: pa.Array) -> np.ndarray | None:
    """An integer result column as int64 with NULL -> -1 (as ``COALESCE(x, -1)``); None when the
    driver typed it as anything else (REAL, text: the ``sqlite3`` reader says what to do)."""
    import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
    if pa.types.is_null(values.type):
        return np.full(len(values), -1, dtype=np.int64)
    if not pa.types.is_int64(values.type):
        return None
    if values.null_count:
        values = pc.fill_null(values, -1)
    return values.to_numpy(zero_copy_only=False)


def _with_nulls(values: pa.Array, null: np.ndarray) -> pa.Array:
    """``values`` with the rows where ``null`` is True set to NULL."""
    import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
    if not null.any():
        return values
    return pc.if_else(pa.array(null), pa.scalar(None, values.type), values)
