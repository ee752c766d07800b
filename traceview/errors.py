"""Errors a user can act on. The CLI prints them as one line and exits 2; never a traceback.

This is also the one place that turns what the operating system and SQLite say into such a line
(:func:`os_error`, :func:`sqlite_error`, :func:`output_error`), and that checks an input is a
regular file before anything opens it (:func:`require_regular_file`: opening a FIFO blocks).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat


class TraceviewError(Exception):
    """Base class: the message is meant for the user as it is."""


class PathError(TraceviewError):
    """Something is wrong with one path: ``"<path>: <problem> (<what to do>)"``."""

    def __init__(self, path: object, problem: str, hint: str = "") -> None:
        self.path = str(path)
        self.problem = problem
        self.hint = hint
        text = f"{self.path}: {problem}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)


class TraceFormatError(PathError):
    """A file is missing, unreadable, or not a trace traceview can read."""


class OutputError(PathError):
    """An output (``-o``) cannot be written where the user asked."""


class DuplicateRankError(TraceviewError):
    """Two input files claim the same rank."""


#: errno -> (what is wrong, what to do)
_ERRNO_TEXT: dict[int, tuple[str, str]] = {
    errno.ENOENT: ("no such file or directory", "check the path"),
    errno.EACCES: ("permission denied", "check the permissions (ls -ld)"),
    errno.EPERM: ("operation not permitted", "check the permissions (ls -ld)"),
    errno.EISDIR: ("is a directory", "give a file name"),
    errno.ENOTDIR: ("a part of the path is a file, not a directory", "choose a path whose folders are folders"),
    errno.EEXIST: ("a part of the path is a file, not a directory", "choose a path whose folders are folders"),
    errno.EROFS: ("the file system is read-only", "choose a writable place"),
    errno.ENOSPC: ("no space left on the device", "free some space or choose another disk"),
    errno.EDQUOT: ("disk quota exceeded", "free some space or choose another disk"),
    errno.ENAMETOOLONG: ("the name is too long", "choose a shorter path"),
    errno.ELOOP: ("too many levels of symbolic links", "check the links on the path"),
    errno.EIO: ("input/output error", "the disk or network file system failed; copy the file"),
}
#: reasons that read as a statement about the path itself, not as "cannot be read: ..."
_PLAIN = (errno.ENOENT, errno.EISDIR)


def os_error(path: object, exc: OSError) -> TraceFormatError:
    """The one-line error for an OSError met while reading ``path`` (the failing part is named
    too when it is another path, e.g. a parent folder)."""
    reason, hint = _describe(path, exc)
    return TraceFormatError(path, reason if exc.errno in _PLAIN else f"cannot be read: {reason}", hint)


def output_error(path: object, exc: OSError) -> OutputError:
    """The one-line error for an OSError met while writing the output ``path`` (``-o``)."""
    reason, hint = _describe(path, exc)
    return OutputError(path, f"cannot write the output: {reason}", hint)


def _describe(path: object, exc: OSError) -> tuple[str, str]:
    reason, hint = _ERRNO_TEXT.get(exc.errno or -1, (str(exc.strerror or exc), ""))
    failed = os.fsdecode(exc.filename) if isinstance(exc.filename, (str, bytes)) else None
    if failed is not None and failed != str(path):  # a parent folder, a temporary file ...
        reason += f" (at {failed})"
    return reason, hint


def require_regular_file(path: object) -> os.stat_result:
    """``os.stat`` of an input, checked to be a regular file before anything opens it: opening a
    FIFO waits for a writer forever, and a device can be endless."""
    try:
        st = os.stat(str(path))
    except OSError as exc:
        raise os_error(path, exc) from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceFormatError(path, "is a directory", "give a trace file, or the directory to the commands")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a plain file")
        raise TraceFormatError(path, f"is not a regular file: it is {kind}", "save the trace to a file first")
    return st


#: SQLite primary result codes (``sqlite3.Error.sqlite_errorname``) -> (problem, what to do)
_SQLITE_TEXT: dict[str, tuple[str, str]] = {
    "SQLITE_BUSY": ("is locked: another program is using the database",
                    "wait until it is done (an nsys export still running?) or open a copy of the file"),
    "SQLITE_LOCKED": ("is locked: another program is using the database",
                      "wait until it is done (an nsys export still running?) or open a copy of the file"),
    "SQLITE_CORRUPT": ("is a damaged SQLite database", "export it again with nsys export --type sqlite"),
    "SQLITE_NOTADB": ("is not an SQLite database or is encrypted", "export it again with nsys export --type sqlite"),
    "SQLITE_CANTOPEN": ("cannot be opened as an SQLite database", "check that it and its folder are readable"),
    "SQLITE_IOERR": ("cannot be read: input/output error", "the disk or network file system failed; copy the file"),
    "SQLITE_NOMEM": ("cannot be read: SQLite ran out of memory", "free some memory and try again"),
    "SQLITE_PERM": ("cannot be read: permission denied", "check its permissions (ls -l)"),
    "SQLITE_AUTH": ("cannot be read: permission denied", "check its permissions (ls -l)"),
}


def sqlite_error(path: object, exc: sqlite3.Error) -> TraceFormatError:
    """The one-line error for an SQLite error on the database ``path``: a locked database is in
    use, not damaged."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    key = next((k for k in _SQLITE_TEXT if name == k or name.startswith(k + "_")), None)
    if key is None and "locked" in str(exc).lower():
        key = "SQLITE_BUSY"  # older Pythons give no error name; the message still says it
    if key is None:
        return TraceFormatError(path, f"is a damaged or unreadable SQLite database ({exc})",
                                "export it again with nsys export --type sqlite")
    problem, hint = _SQLITE_TEXT[key]
    return TraceFormatError(path, f"{problem} ({exc})" if key not in ("SQLITE_BUSY", "SQLITE_LOCKED") else problem,
                            hint)
