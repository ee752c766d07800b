"""The step-progress hook's "parse" phase: a load's per-file progress summed over its files.

``steps(phase, done, total)`` (:data:`traceview.pipeline.StepProgress`) is how the library tells a
front end how far a long computation is; the parsers tell ``progress(done, total)`` per file (bytes
read for Kineto JSON and gzip, event tables read for Nsight exports, start and end for XSpace).
:func:`parse_progress` turns those into one "parse" phase counted in bytes of all the inputs, so a
front end draws one bar for a load of one file or of a thousand ranks. Nothing here imports a
parser or anything heavy: this module is imported before any input is read."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Iterable

#: ``steps(phase, done, total)`` (the same as :data:`traceview.pipeline.StepProgress`, which this
#: light module cannot import)
StepCallback = Callable[[str, int, int], None]
#: ``progress(file, done, total)`` of a load (:func:`traceview.loading.load`)
FileProgress = Callable[[Path, int, int], None]

#: the phase a load's progress is told as
PARSE_PHASE = "parse"


def parse_progress(steps: StepCallback, files: Iterable[tuple[Path, int]]) -> FileProgress:
    """A load's ``progress(file, done, total)`` that calls ``steps("parse", bytes_done, bytes_total)``
    summed over ``files`` (path, size in bytes): a file's ``done / total`` (bytes, tables, or 0 and
    1, as its parser tells) is that share of its size. ``steps("parse", 0, total)`` is called at once."""
    sizes_bytes = {path: max(size, 1) for path, size in files}
    total_bytes = sum(sizes_bytes.values())
    done_bytes: dict[Path, int] = {}
    so_far = [0]  # the sum of done_bytes, kept as it changes: a load of many files calls once per file
    lock = threading.Lock()  # a parallel Kineto parse tells its progress from several threads
    steps(PARSE_PHASE, 0, total_bytes)

    def progress(file: Path, done: int, total: int) -> None:
        size = sizes_bytes.get(file, 0)
        share = size if total <= 0 else size * min(max(done, 0), total) // total
        with lock:
            so_far[0] += share - done_bytes.get(file, 0)
            done_bytes[file] = share
            now = so_far[0]
        steps(PARSE_PHASE, min(now, total_bytes), total_bytes)

    return progress


def combined(first: FileProgress | None, second: FileProgress | None) -> FileProgress | None:
    """A load progress calling both (either may be None)."""
    if first is None or second is None:
        return first or second
    one, two = first, second

    def both(file: Path, done: int, total: int) -> None:
        one(file, done, total)
        two(file, done, total)

    return both
