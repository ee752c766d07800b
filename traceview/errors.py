"""Errors a user can act on. The CLI prints them as one line and exits 2; never a traceback."""

from __future__ import annotations


class TraceviewError(Exception):
    """Base class: the message is meant for the user as it is."""


class TraceFormatError(TraceviewError):
    """A file is missing, unreadable, or not a trace traceview can read."""

    def __init__(self, path: object, problem: str, hint: str = "") -> None:
        self.path = str(path)
        self.problem = problem
        self.hint = hint
        text = f"{self.path}: {problem}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)


class DuplicateRankError(TraceviewError):
    """Two input files claim the same rank."""
