"""Writing a redacted copy of a trace file: what every input format's redaction shares (each format
declares its own as ``InputFormat.redact``, in its parser's package).

The copy is written to a temporary file next to the output and renamed at the end: an error never
leaves a partial output file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from traceview.errors import TraceFormatError


@contextlib.contextmanager
def atomic_output(out_path: Path) -> Iterator[Path]:
    """A temporary path next to ``out_path``, renamed over it only when the block succeeds."""
    parent = out_path.parent
    if out_path.is_dir():
        raise TraceFormatError(out_path, "is a directory", "give a file name for the redacted copy")
    if not parent.is_dir():
        raise TraceFormatError(out_path, "output directory does not exist")
    try:
        fd, name = tempfile.mkstemp(dir=parent, prefix=f".{out_path.name}.", suffix=".partial")
    except OSError as exc:
        raise TraceFormatError(out_path, f"cannot be written: {exc.strerror}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out_path)
    except BaseException:
        for leftover in (tmp, Path(name + "-journal"), Path(name + "-wal"), Path(name + "-shm")):
            with contextlib.suppress(OSError):
                leftover.unlink()
        raise


def check_paths(in_path: Path, out_path: Path) -> None:
    """The input exists and the output is not the input (one clear line each)."""
    if not in_path.exists():
        raise TraceFormatError(in_path, "no such file")
    if out_path.exists() and out_path.resolve() == in_path.resolve():
        raise TraceFormatError(out_path, "is the input file", "write the redacted copy to another path")

