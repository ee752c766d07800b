"""The Nsight reader through ADBC/Arrow (``ROW_READER = "adbc"``) against the reader before it
(``"sqlite3"`` row tuples and ``join_on_keys``): identical traces (events, links, steps, memory,
counters, rank infos, warnings) and an identical JSON report on every shared export, the bundled
sample, and exports made hostile here (NULLs, BLOBs, REALs and text in integer columns, missing
columns and tables); the same one-line error where the old reader stopped."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import traceview
import traceview.parsers.nsys as nsys_module
from traceview.parsers.nsys import columns as nsys_columns, links as nsys_links, rows as nsys_rows
from traceview.errors import TraceFormatError
from traceview.parsers.nsys import parse_nsys
from traceview.render.json import render_json

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "synthetic_nsys.sqlite"
NSYS_DIR = Path(__file__).resolve().parents[3] / "shared" / "traces" / "nsys"
SHARED = sorted(NSYS_DIR.glob("*.sqlite")) if NSYS_DIR.is_dir() else []
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
FALLBACK_SAID = "read with sqlite3"


def parse_with(reader: str, path: Path, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> Any:
    """The trace ``reader`` makes of ``path``, or the one-line error it stops with."""
    monkeypatch.setattr(nsys_module, "ROW_READER", reader)
    try:
        return parse_nsys(path, **kwargs)
    except TraceFormatError as exc:
        return f"error: {exc}"


def assert_same(old: Any, new: Any, report: bool = False) -> None:
    if isinstance(old, str) or isinstance(new, str):
        assert old == new
        return
    for table in ("events", "links", "steps", "memory", "counters"):
        if hasattr(old, table):
            a, b = getattr(old, table), getattr(new, table)
            assert a.schema == b.schema, table
            assert a.equals(b), f"{table} differ"
    assert old.ranks == new.ranks
    assert old.warnings == new.warnings
    if report:
        assert render_json(traceview.analyze(old, use_cache=False)) == render_json(
            traceview.analyze(new, use_cache=False))


def editable_copy(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    dst.chmod(dst.stat().st_mode | stat.S_IWUSR)
    return dst


def edited(tmp_path: Path, *statements: str, loosen: str | None = None) -> Path:
    """A copy of the sample with ``statements`` applied; ``loosen`` rebuilds that table without its
    NOT NULL constraints first (as a hand-edited export may be)."""
    work = editable_copy(SAMPLE, tmp_path / "case.sqlite")
    con = sqlite3.connect(work)
    if loosen:
        con.execute(f"CREATE TABLE loose AS SELECT * FROM {loosen}")
        con.execute(f"DROP TABLE {loosen}")
        con.execute(f"ALTER TABLE loose RENAME TO {loosen}")
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()
    return work


# ------------------------------------------------------------------------- clean exports


@pytest.mark.parametrize("path", [SAMPLE, *SHARED], ids=lambda p: p.name)
def test_old_and_new_reader_give_identical_traces_and_reports(path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger=nsys_module.__name__)
    old = parse_with("sqlite3", path, monkeypatch)
    caplog.clear()
    new = parse_with("adbc", path, monkeypatch)
    # a clean export is read by the driver, every table: no table fell back to sqlite3
    assert not [r for r in caplog.records if FALLBACK_SAID in r.getMessage()]
    assert new.events.num_rows > 0
    assert_same(old, new, report=True)


def test_shared_exports_are_present_or_skipped():
    if not SHARED:
        pytest.skip(f"real Nsight exports not available: {NSYS_DIR} is absent (it sits beside the repo)")
    assert len(SHARED) >= 3


def test_step_marker_gives_identical_steps(monkeypatch):
    old = parse_with("sqlite3", SAMPLE, monkeypatch, step_marker="step_")
    new = parse_with("adbc", SAMPLE, monkeypatch, step_marker="step_")
    assert new.steps.num_rows > 0
    assert_same(old, new)


# ----------------------------------------------------------------------- hostile exports

def _set(table: str, column: str, value: str, where: str) -> tuple[str, str]:
    return table, f"UPDATE {table} SET {column} = {value} WHERE {where}"


HOSTILE_SETS = [
    _set(table, column, value, where)
    for table, column in [(KERNEL, "start"), (KERNEL, "end"), (KERNEL, "deviceId"), (KERNEL, "correlationId"),
                          (KERNEL, "demangledName"), (KERNEL, "gridX"), (RUNTIME, "globalTid"),
                          (RUNTIME, "nameId"), (RUNTIME, "correlationId"), (NVTX, "eventType"), (NVTX, "text"),
                          (NVTX, "textId"), (NVTX, "end"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind"),
                          ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "streamId")]
    for value in ("NULL", "'abc'", "1.5", "x'ff00fe'", "9223372036854775807", "-1", "1e308", "''")
    for where in ("rowid = 1", "rowid % 2 = 0")
]


@pytest.mark.parametrize("table, statement", HOSTILE_SETS, ids=[s for _, s in HOSTILE_SETS])
def test_hostile_values_give_what_the_old_reader_gave(table, statement, tmp_path, monkeypatch):
    work = edited(tmp_path, statement, loosen=table)
    assert_same(parse_with("sqlite3", work, monkeypatch), parse_with("adbc", work, monkeypatch))


@pytest.mark.parametrize("statements", [
    ("UPDATE StringIds SET value = CAST(X'6b65726e656cff' AS BLOB) WHERE id % 3 = 0",
     "UPDATE StringIds SET value = NULL WHERE id % 5 = 0"),
    ("UPDATE StringIds SET value = 7 WHERE id % 2 = 0",),
    (f"UPDATE {NVTX} SET text = X'66ff' WHERE text IS NOT NULL",),
    ("UPDATE ThreadNames SET nameId = NULL WHERE rowid % 2 = 0",),
    (f"ALTER TABLE {KERNEL} DROP COLUMN demangledName", f"ALTER TABLE {KERNEL} DROP COLUMN gridX"),
    (f"ALTER TABLE {KERNEL} DROP COLUMN start",),
    (f"ALTER TABLE {NVTX} DROP COLUMN text",),
    (f"ALTER TABLE {NVTX} DROP COLUMN \"end\"",),
    (f"ALTER TABLE {RUNTIME} DROP COLUMN globalTid",),
    ("ALTER TABLE StringIds DROP COLUMN value",),
    (f"DROP TABLE {KERNEL}",),
    ("DROP TABLE StringIds",),
    (f"DELETE FROM {KERNEL}", f"DELETE FROM {RUNTIME}", f"DELETE FROM {NVTX}"),
    (f"INSERT INTO {RUNTIME} SELECT * FROM {RUNTIME} WHERE rowid <= 2",),
], ids=lambda s: " | ".join(s))
def test_hostile_layouts_give_what_the_old_reader_gave(statements, tmp_path, monkeypatch):
    loosen = "StringIds" if "StringIds SET" in statements[0] else NVTX if f"{NVTX} SET" in statements[0] else \
        "ThreadNames" if "ThreadNames SET" in statements[0] else None
    work = edited(tmp_path, *statements, loosen=loosen)
    assert_same(parse_with("sqlite3", work, monkeypatch), parse_with("adbc", work, monkeypatch))


def test_text_in_an_integer_column_falls_back_and_is_said_the_same(tmp_path, monkeypatch, caplog):
    """The driver types a column of integers and text as text: that table is read with sqlite3,
    so the error is the old reader's, word for word."""
    caplog.set_level(logging.DEBUG, logger=nsys_module.__name__)
    work = edited(tmp_path, f"UPDATE {KERNEL} SET start = 'abc' WHERE rowid = 1", loosen=KERNEL)
    new = parse_with("adbc", work, monkeypatch)
    assert isinstance(new, str) and f"table {KERNEL} holds values of an unexpected type" in new
    assert any(FALLBACK_SAID in r.getMessage() and KERNEL in r.getMessage() for r in caplog.records)
    assert new == parse_with("sqlite3", work, monkeypatch)


def test_a_correlation_beyond_32_bits_still_links(tmp_path, monkeypatch):
    """The packed (rank, correlation) key needs 32-bit correlations; beyond, the general join runs."""
    shift = 1 << 40
    tables = (KERNEL, RUNTIME, "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
              "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    work = edited(tmp_path, *[f"UPDATE {t} SET correlationId = correlationId + {shift}" for t in tables])
    old, new = parse_with("sqlite3", work, monkeypatch), parse_with("adbc", work, monkeypatch)
    assert new.links.num_rows == parse_with("adbc", SAMPLE, monkeypatch).links.num_rows > 0
    assert_same(old, new)


def test_damaged_export_is_one_line_with_the_new_reader(tmp_path, monkeypatch):
    cut = tmp_path / "cut.sqlite"
    data = SAMPLE.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    new = parse_with("adbc", cut, monkeypatch)
    assert isinstance(new, str) and str(cut) in new and "\n" not in new
    assert new == parse_with("sqlite3", cut, monkeypatch)


def test_database_locked_by_another_process_is_in_use(tmp_path, monkeypatch):
    """A lock held by another process (the driver's own SQLite sees only those: POSIX locks are
    per process) is said as in use, not damaged."""
    work = editable_copy(SAMPLE, tmp_path / "busy.sqlite")
    monkeypatch.setattr(nsys_rows, "BUSY_TIMEOUT_S", 0.05)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys, time\n"
         f"con = sqlite3.connect({str(work)!r}); con.execute('BEGIN EXCLUSIVE')\n"
         "print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        new = parse_with("adbc", work, monkeypatch)
    finally:
        holder.communicate("", timeout=30)
    assert isinstance(new, str) and str(work) in new and "locked" in new and "damaged" not in new, new


def test_a_path_that_needs_escaping_in_a_uri_is_read_by_the_driver(tmp_path, monkeypatch, caplog):
    """The driver opens ``file:`` URIs: spaces, ``#``, ``%``, ``?`` and non-ASCII letters in the
    path must reach SQLite escaped, or the driver would open another file (or none)."""
    folder = tmp_path / "a dir #1 %41 ?x ü"
    folder.mkdir()
    work = editable_copy(SAMPLE, folder / "trace #2 %20ü.sqlite")
    caplog.set_level(logging.DEBUG, logger=nsys_module.__name__)
    new = parse_with("adbc", work, monkeypatch)
    assert not [r for r in caplog.records if FALLBACK_SAID in r.getMessage()]
    assert_same(parse_with("sqlite3", work, monkeypatch), new)


# ------------------------------------------------------------------ reading in batches

LAST_ROW = "rowid = (SELECT MAX(rowid) FROM {table})"


def test_reading_in_small_batches_gives_identical_traces(monkeypatch, caplog):
    """Rows come from the driver a batch at a time, each copied into growing columns: with batches
    of 7 rows (every table in many, the growth reallocating again and again) the trace is the one
    the sqlite3 reader makes, and no table falls back."""
    caplog.set_level(logging.DEBUG, logger=nsys_module.__name__)
    monkeypatch.setattr(nsys_rows, "ARROW_BATCH_ROWS", 7)
    old = parse_with("sqlite3", SAMPLE, monkeypatch)
    caplog.clear()
    new = parse_with("adbc", SAMPLE, monkeypatch)
    assert not [r for r in caplog.records if FALLBACK_SAID in r.getMessage()]
    assert new.events.num_rows > 7 * 10
    assert_same(old, new, report=True)


@pytest.mark.parametrize("table, column, value, falls_back", [
    (KERNEL, "gridX", "1.5", True), (KERNEL, "start", "'abc'", True), (RUNTIME, "correlationId", "x'ff00fe'", True),
    (RUNTIME, "end", "NULL", False), (NVTX, "text", "x'66ff'", False), (NVTX, "end", "NULL", False),
    (KERNEL, "deviceId", "NULL", False),
])
def test_a_value_of_another_type_after_the_first_batch_gives_what_the_old_reader_gave(
        table, column, value, falls_back, tmp_path, monkeypatch, caplog):
    """The driver types a column by its first batch; a REAL, text or BLOB in an integer column of
    the last row is its error mid-read, and that table is read again with sqlite3. A NULL there is
    no error (the column keeps its type), nor is a BLOB as NVTX text (read as bytes, then decoded).
    Either way the trace, or the error, is the old reader's."""
    work = edited(tmp_path, f"UPDATE {table} SET {column} = {value} WHERE {LAST_ROW.format(table=table)}",
                  loosen=table)
    monkeypatch.setattr(nsys_rows, "ARROW_BATCH_ROWS", 5)
    caplog.set_level(logging.DEBUG, logger=nsys_module.__name__)
    new = parse_with("adbc", work, monkeypatch)
    fell_back = [r for r in caplog.records if FALLBACK_SAID in r.getMessage() and table in r.getMessage()]
    assert bool(fell_back) == falls_back
    assert_same(parse_with("sqlite3", work, monkeypatch), new)


@pytest.mark.parametrize("table, column", [
    (KERNEL, "streamId"), (KERNEL, "correlationId"), (KERNEL, "gridY"), (RUNTIME, "correlationId"),
    (RUNTIME, "eventClass"), (RUNTIME, "nameId"),
])
def test_an_id_beyond_32_bits_after_the_first_batches_is_kept_exactly(table, column, tmp_path, monkeypatch):
    """Ids and launch dimensions are read as int32 (NARROW_COLUMNS) until a value does not fit; one
    that does not, in the last batch, makes the column int64 from there on, every value kept (the
    old reader read int64 throughout): a wrapped value would change names, links or dimensions."""
    huge = (1 << 40) + 3
    work = edited(tmp_path, f"UPDATE {table} SET {column} = {huge} WHERE {LAST_ROW.format(table=table)}")
    monkeypatch.setattr(nsys_rows, "ARROW_BATCH_ROWS", 5)
    new = parse_with("adbc", work, monkeypatch)
    assert_same(parse_with("sqlite3", work, monkeypatch), new)
    if column == "streamId":
        assert huge in new.events.column("stream").to_pylist()


def test_launch_join_blocks_and_run_pieces_do_not_change_the_trace(monkeypatch):
    """Launches are joined to GPU rows a block of events at a time (JOIN_BLOCK_ROWS), and the pid
    and external-id columns are runs of small repeated pieces (RUN_PIECE_ROWS): blocks and pieces
    of a few rows (block and piece ends everywhere, runs cut mid-piece) give the trace that one
    block and one piece per run give, pid is the process's on every row of a rank, and every
    external id is -1."""
    path = SHARED[-1] if SHARED else SAMPLE
    whole = parse_with("adbc", path, monkeypatch)
    monkeypatch.setattr(nsys_links, "JOIN_BLOCK_ROWS", 5)
    monkeypatch.setattr(nsys_columns, "RUN_PIECE_ROWS", 3)
    small = parse_with("adbc", path, monkeypatch)
    assert small.events.column("pid").num_chunks > whole.events.column("pid").num_chunks
    assert_same(whole, small)
    assert whole.links.num_rows > 0
    assert set(small.events.column("external_id").to_pylist()) == {-1}
    rank, pid = small.events.column("rank").to_pylist(), small.events.column("pid").to_pylist()
    for r, info in small.ranks.items():
        pids = {p for rr, p in zip(rank, pid) if rr == r}
        assert len(pids) == 1 and f"pid={pids.pop()}" in info.rank_source
