"""Redacting an Nsight Systems SQLite export (``traceview redact``; the format's ``InputFormat.redact``).

``redact_nsys`` copies the export, scrubs every text column of every table except the constant
``ENUM_*`` tables (``name``/``value`` tables such as ``META_DATA_CAPTURE`` and
``TARGET_INFO_SYSTEM_ENV`` by key, ``StringIds`` values in place so ids stay valid), with
``secure_delete`` on, then ``VACUUM``s so no old text lingers in free pages. What counts as a
secret is :mod:`traceview.secrets`.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from traceview.errors import TraceFormatError
from traceview.redaction import atomic_output, check_paths
from traceview.secrets import (REDACTED, RedactionReport, Scrubber, is_host_key, is_secret_flag, is_secret_key,
                               is_user_key)

_TEXT_TYPES = ("TEXT", "CHAR", "CLOB", "")
_ARGUMENT_NAME = re.compile(r"ARGUMENT_\d+$")


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _scrub_key_value_table(con: sqlite3.Connection, table: str, s: Scrubber) -> None:
    """``name``/``value`` tables (``META_DATA_*``, ``TARGET_INFO_SYSTEM_ENV``): scrub by key, in
    row order so an ``ARGUMENT_n`` holding ``--token`` redacts ``ARGUMENT_n+1``."""
    t = _quote_ident(table)
    try:
        rows = con.execute(f"SELECT rowid, name, value FROM {t} ORDER BY rowid").fetchall()
        by_rowid = True
    except sqlite3.OperationalError:  # WITHOUT ROWID
        rows = [(None, n, v) for n, v in con.execute(f"SELECT name, value FROM {t}")]
        by_rowid = False
    redact_next = False
    for rowid, name, value in rows:
        if not isinstance(value, str):
            continue
        key = name if isinstance(name, str) else ""
        where = f"{table}[{key}]"
        if redact_next and _ARGUMENT_NAME.search(key) and value and not value.startswith("-"):
            s.hit(where, "cli_flag")
            new = REDACTED
            redact_next = False
        else:
            redact_next = bool(_ARGUMENT_NAME.search(key)) and is_secret_flag(value)
            new = s.keyed(key, value, where) if key else s.text_cached(value, where)
        if new != value:
            if by_rowid:
                con.execute(f"UPDATE {t} SET value = ? WHERE rowid = ?", (new, rowid))
            else:
                con.execute(f"UPDATE {t} SET value = ? WHERE name IS ? AND value = ?", (new, name, value))


def _scrub_text_column(con: sqlite3.Connection, table: str, column: str, s: Scrubber) -> None:
    where = f"{table}.{column}"
    column_secret = is_secret_key(column)
    column_identity = s.strict and (is_host_key(column) or is_user_key(column))

    def new_value(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if column_secret or column_identity:
            return s.keyed(column, value, where)
        return s.text_cached(value, where)

    # the WHERE test must not record hits (each changed row is counted once, by the SET)
    pure = Scrubber(s.strict)
    pure.learned_hosts, pure.learned_users = s.learned_hosts, s.learned_users

    def changed(value: Any) -> int:
        if not isinstance(value, str) or len(value) < 4 and not (column_secret or column_identity):
            return 0
        if column_secret or column_identity:
            return int(bool(value) and value != REDACTED)
        return int(pure.text_cached(value, where) != value)

    con.create_function("tv_redact_changed", 1, changed, deterministic=True)
    con.create_function("tv_redact", 1, new_value)
    t, c = _quote_ident(table), _quote_ident(column)
    con.execute(f"UPDATE {t} SET {c} = tv_redact({c}) WHERE typeof({c}) = 'text' AND tv_redact_changed({c})")


def redact_nsys(in_path: str | os.PathLike[str], out_path: str | os.PathLike[str], *,
                strict: bool = False) -> RedactionReport:
    """Write a shareable copy of an Nsight Systems SQLite export; see the module docstring."""
    in_path, out_path = Path(in_path), Path(out_path)
    check_paths(in_path, out_path)
    with open(in_path, "rb") as f:
        if f.read(16) != b"SQLite format 3\x00":
            raise TraceFormatError(in_path, "is not an SQLite database", "expected an Nsight Systems .sqlite export")
    scrubber = Scrubber(strict)
    scrubber.report.input_format = "nsys"
    with atomic_output(out_path) as tmp:
        shutil.copyfile(in_path, tmp)
        try:
            con = sqlite3.connect(str(tmp), isolation_level=None)
        except sqlite3.Error as exc:
            raise TraceFormatError(in_path, f"cannot be opened as SQLite ({exc})") from None
        try:
            con.execute("PRAGMA journal_mode=DELETE")
            con.execute("PRAGMA secure_delete=ON")
            tables = [r[0] for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
            columns = {t: [(r[1], (r[2] or "").upper()) for r in con.execute(f"PRAGMA table_info({_quote_ident(t)})")]
                       for t in tables}
            key_value = [t for t in tables if {"name", "value"} <= {c for c, _ in columns[t]}
                         and not t.startswith("ENUM_")]
            if strict:
                for t in key_value:
                    rows = con.execute(f"SELECT name, value FROM {_quote_ident(t)}").fetchall()
                    scrubber.learn([{str(n): v} for n, v in rows if isinstance(n, str)])
            con.execute("BEGIN")
            for t in tables:
                if t.startswith("ENUM_"):
                    continue  # constant enumerations written by nsys itself
                if t in key_value:
                    _scrub_key_value_table(con, t, scrubber)
                for column, decl in columns[t]:
                    if t in key_value and column == "value":
                        continue
                    if not any(tt in decl for tt in _TEXT_TYPES if tt) and decl != "":
                        continue
                    _scrub_text_column(con, t, column, scrubber)
            con.execute("COMMIT")
            con.execute("VACUUM")
        except sqlite3.DatabaseError as exc:
            raise TraceFormatError(in_path, f"cannot be redacted as SQLite ({exc})",
                                   "the file is damaged or not an Nsight Systems export") from None
        finally:
            con.close()
    return scrubber.report

