"""Reading one export with SQL: ``ExportQueries`` (tables, columns, fetches) and the ``Group`` of
columns each event table becomes.
"""

from __future__ import annotations

import itertools
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from traceview.errors import TraceFormatError
from traceview.model import Kind
from traceview.parsers.nsys.columns import constant, decode_text, narrowed, process_key, start_where_no_end
from traceview.parsers.nsys.rows import ArrowRows, table_names
from traceview.parsers.nsys.schema import BATCH, log, SYNC_T
from traceview.parsers.nsys.strings import Strings
from traceview.parsing import do_nothing


#: grid and block sizes are 32-bit values (``EVENT_SCHEMA``'s int32 columns)
GRID_LIMIT = 1 << 31
#: times must lie within +-2**61 ns (as the Kineto parser's): beyond it sums of times wrap int64
TIME_LIMIT_NS = 2**61


@dataclass
class Group:
    """Rows read from one source table (all rows; ``keep`` marks those that become events)."""

    table: str
    proc: np.ndarray  # globalPid >> 24, -1 when absent
    tid: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    kind: np.ndarray  # int8 codes
    category: np.ndarray  # codes in the category pool
    name: np.ndarray  # codes in the name pool
    device: np.ndarray
    stream: np.ndarray
    corr: np.ndarray
    keep: np.ndarray
    copy_kind: np.ndarray  # codes in the name pool of the copy kind (memcpy rows), -1 elsewhere
    optional: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # name -> (values, valid)
    #: rows counted in ``event_counts["<table>.<note>"]``: why a row was skipped, or what was done to it
    notes: dict[str, np.ndarray] = field(default_factory=dict)


class ExportQueries:
    """The SQL side of reading one export: its tables and columns, typed fetches into numpy
    columns (Arrow through ADBC, else sqlite3 rows), strings, enumerations and NULL repairs."""

    def __init__(self, con: sqlite3.Connection, path: Path, step_marker: str | None,
                 arrow_rows: ArrowRows | None = None, release_memory: Callable[[], None] = do_nothing) -> None:
        self.con = con
        #: hands the C heap's free pages back (the caller's hook; the command's ``malloc_trim``).
        #: Arrays smaller than glibc's mmap threshold, which rises to 32 MB as big arrays are freed,
        #: come from the heap; freed, they stay resident until trimmed, so an export's fetch and
        #: assembly left 50-110 MB of free memory counted in the process's RSS, under the peak that
        #: followed. Called between the phases and after each table is read: a few milliseconds.
        self.release_memory = release_memory
        self.arrow_rows = arrow_rows  # None: every table through sqlite3 row tuples
        self.path = path
        self.step_marker = step_marker
        self.tables = set(table_names(con))
        self._columns: dict[str, set[str]] = {}
        self.warnings: list[str] = []
        self.categories = Strings()
        #: rows of a table whose text was not UTF-8 (repaired with U+FFFD), by table
        self.text_replaced: dict[str, np.ndarray] = {}
        #: NULL flags (start, end, process, device) of the table being read, for repair_nulls
        self.pending_nulls: list[np.ndarray] = []
        #: counts about the file rather than a rank's rows (``StringIds`` values): in the first rank's
        self.file_counts: dict[str, int] = {}

    # -- helpers -----------------------------------------------------------------------
    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            self._columns[table] = {r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')}
        return self._columns[table]

    def col(self, table: str, *names: str, default: str = "NULL") -> str:
        """SQL for the first of ``names`` that the table has (COALESCE of all present ones)."""
        present = [f'"{n}"' for n in names if n in self.columns(table)]
        if not present:
            return default
        if default != "NULL":
            present.append(default)
        return present[0] if len(present) == 1 else f"COALESCE({', '.join(present)})"

    def fetch(self, table: str, exprs: list[str], text: str | None = None,
              order: str = "") -> tuple[list[np.ndarray], pa.Array | None]:
        """Integer columns ``exprs`` (NULL -> -1) of ``table`` as int64 arrays (a flag ``X IS NULL``
        of a selected ``X`` may come as bools instead), and optionally one text column as a pyarrow
        string array.

        Through ADBC straight into Arrow (:class:`ArrowRows`) unless ``ROW_READER`` says
        ``"sqlite3"`` or the driver cannot type the table's values (then :meth:`fetch_tuples`, the
        reader every value of any SQLite type goes through, says what is wrong)."""
        if self.arrow_rows is not None:
            fetched = self.arrow_rows.fetch(table, exprs, text, order)
            if fetched is not None:
                columns, texts, replaced = fetched
                if replaced is not None:
                    self.text_replaced[table] = replaced
                return columns, texts
            log.debug("%s: table %s read with sqlite3: the driver could not read or type it", self.path, table)
        return self.fetch_tuples(table, exprs, text, order)

    def fetch_tuples(self, table: str, exprs: list[str], text: str | None = None,
                     order: str = "") -> tuple[list[np.ndarray], pa.Array | None]:
        """:meth:`fetch` through ``sqlite3`` row tuples (the reader before issue 12).

        Rows are taken in batches and flattened by ``np.fromiter`` over the row tuples: C loops only.
        """
        k = len(exprs)
        sql = "SELECT " + ", ".join(f"COALESCE({e}, -1)" for e in exprs) + f' FROM "{table}" {order}'
        cur = self.con.execute(sql)
        blocks: list[np.ndarray] = []
        try:
            while True:
                batch = cur.fetchmany(BATCH)
                if not batch:
                    break
                flat = np.fromiter(itertools.chain.from_iterable(batch), dtype=np.int64, count=len(batch) * k)
                blocks.append(flat.reshape(-1, k))
        except (TypeError, ValueError) as exc:
            raise TraceFormatError(self.path, f"table {table} holds values of an unexpected type ({exc})") from None
        except OverflowError:
            raise TraceFormatError(self.path, f"table {table} holds a number beyond 64-bit integers where nsys writes "
                                   "integers", "re-export the report with nsys export --type sqlite") from None
        flat = np.concatenate(blocks) if blocks else np.empty((0, k), dtype=np.int64)
        columns = [np.ascontiguousarray(flat[:, i]) for i in range(k)]
        texts = None
        if text is not None:
            texts = self.fetch_text(table, text, order)
            if len(texts) != len(flat):
                raise TraceFormatError(self.path, f"table {table} changed while it was read")
        return columns, texts

    def fetch_text(self, table: str, text: str, order: str) -> pa.Array:
        """One text column as a pyarrow string array. Values are read as bytes (``CAST AS BLOB``):
        a BLOB, an integer or text that is not UTF-8 would otherwise stop sqlite3 or pyarrow. Text
        that is not UTF-8 is decoded with U+FFFD for the bad bytes; its rows are in
        ``self.text_replaced[table]`` (counted by the caller)."""
        cur = self.con.execute(f'SELECT CAST({text} AS BLOB) FROM "{table}" {order}')
        parts = []
        while True:
            batch = cur.fetchmany(BATCH)
            if not batch:
                break
            parts.append(pa.array(list(itertools.chain.from_iterable(batch)), pa.binary()))
        raw = pa.concat_arrays(parts) if parts else pa.array([], pa.binary())
        texts, replaced = decode_text(raw)
        if replaced is not None:
            self.text_replaced[table] = replaced
        return texts

    def require(self, table: str, *names: str) -> None:
        """Stop with one line when ``table`` lacks a column traceview cannot do without (SQLite would
        read a missing ``"column"`` as the string literal, and every row would be a type error)."""
        for name in names:
            if name not in self.columns(table):
                raise TraceFormatError(self.path, f"the export lacks column {name} of table {table}",
                                       "nsys version? export it again with a current nsys")

    def enum(self, table: str) -> dict[int, tuple[str, str]]:
        if table not in self.tables:
            return {}
        cols = self.columns(table)
        name = '"name"' if "name" in cols else "''"
        label = '"label"' if "label" in cols else "''"
        rows = self.con.execute(f'SELECT id, {name}, {label} FROM "{table}"')
        return {int(r[0]): (r[1] or "", r[2] or "") for r in rows}

    def durations(self, table: str, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """``end - start``, negative ones clamped to 0 (and said). ``end`` is overwritten: every
        caller passes a column of its own that it does not read again (no second int64 column)."""
        if end.dtype == np.int64 and end.flags.writeable and not np.may_share_memory(end, start):
            dur = np.subtract(end, start, out=end)
        else:
            dur = end - start
        negative = int((dur < 0).sum())
        if negative:
            self.warnings.append(f"{table}: {negative} rows end before they start (duration set to 0)")
            dur = np.maximum(dur, 0)
        return dur

    def group(self, table: str, proc: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray,
              kind: Kind | np.ndarray, category: int | np.ndarray, name: int | np.ndarray, *, device=None,
              stream=None, corr=None, keep=None) -> Group:
        """One table's rows; a category or name given as one code is that code on every row."""
        n = len(start)
        if isinstance(category, int):
            category = constant(category, n, np.int32)
        if isinstance(name, int):
            name = constant(name, n, np.int32)
        minus = constant(-1, n, np.int64)
        kinds = constant(int(kind), n, np.int8) if isinstance(kind, Kind) else kind.astype(np.int8)
        # ids, durations and process keys as int32 where every value fits (narrowed): the groups
        # wait for the assembly, which writes them into the events table's int64 columns
        return Group(
            table=table, proc=narrowed(proc), tid=narrowed(tid), start=start,
            dur=narrowed(self.durations(table, start, end)), kind=kinds,
            category=narrowed(category), name=narrowed(name),
            device=minus if device is None else narrowed(device),
            stream=minus if stream is None else narrowed(np.where(stream == 0xFFFFFFFF, -1, stream)),
            corr=minus if corr is None else narrowed(corr),
            keep=np.ones(n, dtype=bool) if keep is None else keep,
            copy_kind=constant(-1, n, np.int32),
        )

    # -- readers -----------------------------------------------------------------------
    def read_strings(self) -> Strings:
        if "StringIds" not in self.tables:
            self.warnings.append("no StringIds table: names are empty")
            return Strings()
        self.require("StringIds", "id", "value")
        (ids,), values = self.fetch("StringIds", ['"id"'], text='"value"', order='ORDER BY "id"')
        assert values is not None  # fetch returns the text column it was asked for
        repaired = int(self.text_replaced.get("StringIds", np.zeros(0, bool)).sum())
        missing = values.null_count
        for what, n in (("value_not_utf8_replaced", repaired), ("value_null_empty", missing)):
            if n:
                self.file_counts[f"StringIds.{what}"] = n
        if repaired:
            self.warnings.append(f"StringIds: {repaired} names are not UTF-8 (bad bytes shown as U+FFFD)")
        if missing:
            self.warnings.append(f"StringIds: {missing} names are NULL (left empty)")
        return Strings(ids, values.fill_null(""))

    def end_expr(self, table: str) -> str:
        """``end`` as it is (NULL where unknown: the caller puts the start there, by its NULL flag,
        which the Arrow reader gets from the validity bitmap, so SQLite computes no COALESCE), or
        ``start`` for a table without the column."""
        return '"end"' if "end" in self.columns(table) else '"start"'

    def null_checks(self, table: str, *names: str) -> list[str]:
        """SQL flags (1/0) for NULL in each of ``names`` (0 where the table lacks the column)."""
        return [f'"{n}" IS NULL' if n in self.columns(table) else "0" for n in names]

    def _gpu_common(self, table: str, extra: list[str]) -> tuple[list[Any], np.ndarray, np.ndarray]:
        """The columns every GPU activity table has, then ``extra``; the NULL flags of start, end,
        globalPid and deviceId are kept for :meth:`repair_nulls` in ``self.pending_nulls``."""
        t = table
        self.require(t, "start")
        exprs = ['"start"', self.end_expr(t), self.col(t, "deviceId"), self.col(t, "streamId"),
                 self.col(t, "correlationId"), self.col(t, "globalPid")]
        flags = self.null_checks(t, "start", "end", "globalPid", "deviceId")
        cols, _ = self.fetch(t, exprs + extra + flags)
        self.pending_nulls = cols[-4:]
        cols = cols[:-4]
        cols[1] = start_where_no_end(cols[0], cols[1], self.pending_nulls[1])
        gpid = cols[5]
        proc = process_key(gpid)
        return cols, proc, constant(-1, len(gpid), np.int64)

    def repair_nulls(self, g: Group) -> Group:
        """Rows with NULL where a value is needed: skipped (no start, no process, a GPU row without
        device) or repaired (no end: duration 0), each counted in ``event_counts`` under its reason
        and said in the warnings. Without this a NULL start read as -1 (a span of the whole clock),
        a NULL process became an extra rank and a NULL device a "GPU -1"."""
        null_start, null_end, null_proc, null_device = (f.astype(bool, copy=False) for f in self.pending_nulls)
        self.pending_nulls = []
        if g.table == SYNC_T:  # sync rows take the device of their stream's activity (_fix_sync_devices)
            null_device = np.zeros_like(null_device)
        skipped = np.zeros(len(g.start), dtype=bool)
        # one range for every time, as the Kineto parser's (+-2**61 ns): beyond it sums of times wrap
        with np.errstate(over="ignore"):
            # (not np.abs: the absolute value of the int64 minimum is itself)
            bad_time = (g.start > TIME_LIMIT_NS) | (g.start < -TIME_LIMIT_NS) | (g.dur < 0) | (g.dur > TIME_LIMIT_NS)
        bad_time &= ~null_start
        reasons = (("skipped_null_start", null_start, "have no start (NULL): skipped"),
                   ("skipped_time_out_of_range", bad_time,
                    "have a start or duration beyond +-2**61 ns (or an end before the start): skipped"),
                   ("no_rank_null_process", null_proc, "have no process (NULL globalPid/globalTid): skipped"),
                   ("skipped_null_device", null_device, "have no device (NULL deviceId): skipped"))
        for note, flag, said in reasons:
            rows = flag & ~skipped & g.keep
            skipped |= rows
            if rows.any():
                g.notes[note] = rows
                self.warnings.append(f"{g.table}: {int(rows.sum())} rows {said}")
        g.keep = g.keep & ~skipped
        no_end = null_end & g.keep
        if no_end.any():
            g.dur = np.where(no_end, 0, g.dur)
            g.notes["null_end_duration_0"] = no_end
            self.warnings.append(f"{g.table}: {int(no_end.sum())} rows have no end (NULL): kept with duration 0")
        return g
