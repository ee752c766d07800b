"""Discovery: the trace files a command or ``traceview.load`` was given, found once.

:func:`discover` expands folders into the trace files they hold, reads each file's head once to
tell its format by content (the extension is only a hint) and keeps one :class:`InputFile` per file:
its path, format, ``stat`` and, computed on first use and then kept, its cache key. Everything
downstream (progress bars, the trace cache, the report cache, the loader) works from that list
instead of finding and sniffing the files again.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from traceview.errors import TraceFormatError, TraceviewError, os_error, require_regular_file
from traceview.registry import INPUT_FORMATS, InputFormat, input_formats

#: how much of each file's (decompressed) start the formats' sniffs see
HEAD_BYTES = 1 << 16

PathLike = str | os.PathLike[str]


@dataclass
class InputFile:
    """One trace file, as discovery found it. A file whose content could not be told (unreadable,
    not a regular file, empty, not a trace) keeps its ``problem``, raised where the file is loaded
    (:meth:`checked_format`), not while the inputs are listed: a folder listing (the app's runs)
    still lists it, and the load names it in one line as it reaches it."""

    #: the path as the user gave it, or as found under a folder they gave (reports name it so)
    path: Path
    #: the registered format that claims its content (None when ``problem`` says why none does)
    format: InputFormat | None
    #: its ``os.stat`` when found (size, mtime, identity); the cache key is of this version of it
    stat: os.stat_result | None
    problem: TraceviewError | None = None
    #: the other files of its run, read with it (``InputFormat.run_files``; empty for most formats)
    companions: tuple[Path, ...] = ()
    _cache_key: str | None = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> int:
        return self.stat.st_size if self.stat is not None else 0

    def checked_format(self) -> InputFormat:
        """The file's format; raises its problem when it has one."""
        if self.problem is not None:
            raise self.problem
        assert self.format is not None  # a file has a format or a problem
        return self.format

    @property
    def cache_key(self) -> str:
        """The trace cache's key of the file (``traceview.trace_cache.cache_key``: 2 MiB read and
        hashed), computed the first time it is asked and kept: the trace cache and the report
        cache of one command read each file once between them. Raises OSError when the file cannot
        be read (and its problem when it has one)."""
        if self._cache_key is None:
            from traceview.trace_cache import cache_key

            self.checked_format()
            key = cache_key(self.path, self.stat)
            if self.companions:  # a run of several files: a change to any of them is a new key
                import hashlib

                parts = [key, *(cache_key(p) for p in self.companions)]
                key = hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]
            self._cache_key = key
        return self._cache_key


@dataclass
class Inputs:
    """What :func:`discover` found: the trace files in order, and the files a folder scan left out
    because they are not traces (a config or truth file beside them), which a report names."""

    files: list[InputFile]
    skipped: list[Path] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        return [f.path for f in self.files]

    @property
    def every_path(self) -> list[Path]:
        """Every file the inputs read: each file's path and the other files of its run."""
        return [p for f in self.files for p in (f.path, *f.companions)]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def registered_formats() -> list[InputFormat]:
    """The input formats, with every parser module imported (so each has registered itself)."""
    from traceview.parsers import register_all

    register_all()
    return input_formats()


def format_named(name: str) -> InputFormat | None:
    """The registered format called ``name`` (a Trace's ``RankInfo.source_format``), or None."""
    registered_formats()
    return INPUT_FORMATS.get(name)


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of a file, decompressed when it is gzip (raises OSError,
    zlib.error): enough to tell the format by content."""
    with open(path, "rb") as f:
        head = f.read(size)
    if head[:2] == b"\x1f\x8b":
        stream = zlib.decompressobj(wbits=31)
        raw = head
        head = stream.decompress(raw, size)
        if not head and not stream.eof and len(raw) < size:
            # the whole file was read and it ends before its first byte of data: a gzip cut inside
            # its header or first block (a gzip of nothing is 20 bytes and ends its stream)
            raise zlib.error(f"the gzip stream ends after {len(raw)} bytes, before any data")
    return head


def checked_head(path: Path) -> bytes:
    """:func:`read_head`, with a read error or damaged gzip as the one-line error naming the file."""
    try:
        return read_head(path)
    except OSError as exc:
        raise os_error(path, exc) from None
    except zlib.error as exc:
        raise TraceFormatError(path, f"is a truncated or corrupt gzip file ({exc})",
                               "the file is damaged or was cut short; copy it again") from None


def sniffed_format(path: Path, head: bytes) -> InputFormat:
    """The first registered format whose sniff claims ``head`` (the start of ``path``)."""
    if not head:
        raise TraceFormatError(path, "is empty")
    formats = registered_formats()
    for fmt in formats:
        if fmt.sniff(path, head):
            return fmt
    raise TraceFormatError(path, "is not a trace traceview can read",
                           "expected " + " or ".join(f.description for f in formats))


def inspect_file(path: Path, head: bytes | None = None) -> InputFile:
    """One file: checked to be a regular file before anything opens it (a FIFO would block the
    open forever), its head read once (unless given) and its format sniffed; what is wrong with it
    kept as its problem."""
    st = None
    try:
        st = require_regular_file(path)
        fmt = sniffed_format(path, checked_head(path) if head is None else head)
        if fmt.run_files is None:
            return InputFile(path=path, format=fmt, stat=st)
    except TraceviewError as exc:
        return InputFile(path=path, format=None, stat=st, problem=exc)
    return run_input(path, fmt, st)


def run_input(path: Path, fmt: InputFormat, st: os.stat_result) -> InputFile:
    """The run a file of a several-file format belongs to, as the file standing for it with the
    others as its companions (``InputFormat.run_files``); what is wrong with the run as its problem."""
    assert fmt.run_files is not None
    try:
        primary, others = fmt.run_files(path)
        primary_stat = st if primary == path else require_regular_file(primary)
    except TraceviewError as exc:
        return InputFile(path=path, format=None, stat=st, problem=exc)
    return InputFile(path=primary, format=fmt, stat=primary_stat, companions=tuple(others))


def one_per_run(files: list[InputFile]) -> list[InputFile]:
    """Each run once: the files of a several-file run all stand for it, in its first file's place."""
    seen: set[Path] = set()
    out = []
    for f in files:
        if f.problem is None and f.path in seen:
            continue
        seen.add(f.path)
        out.append(f)
    return out


def detect_format(path: Path) -> str:
    """The name of the registered input format that claims the file ("kineto", "nsys", "nsys-rep"),
    decided by content; raises what is wrong with the file."""
    return inspect_file(Path(path)).checked_format().name


def discover(paths: PathLike | Iterable[PathLike]) -> Inputs:
    """The trace files of ``paths`` (files and folders), in order: a folder's in sorted order.

    Inside a folder, files that are not traces (no ``traceEvents``/``ph`` near the start of a JSON
    file: a truth or config file next to the traces) are skipped and listed in ``Inputs.skipped``;
    a file named explicitly is always kept, so a bad one gets a clear error."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found = Inputs(files=[])
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found.files.extend(_scan_folder(path, found.skipped))
        elif path.exists():
            found.files.append(inspect_file(path))
        else:
            raise TraceFormatError(path, "no such file or directory")
    found.files = one_per_run(found.files)
    return found


def find_trace_files(paths: Sequence[PathLike], skipped: list[Path] | None = None) -> list[Path]:
    """The paths of :func:`discover` (the files a folder scan left out appended to ``skipped``)."""
    inputs = discover(list(paths))
    if skipped is not None:
        skipped.extend(inputs.skipped)
    return inputs.paths


def _scan_folder(folder: Path, skipped: list[Path]) -> list[InputFile]:
    formats = registered_formats()
    suffixes = tuple(s for fmt in formats for s in fmt.suffixes)
    inside = sorted(q for q in _files_under(folder) if q.name.endswith(suffixes) and not q.name.startswith("."))
    traces = []
    for q in inside:
        if any(fmt.shadows is not None and fmt.shadows(q) for fmt in formats):
            skipped.append(q)  # read from the file beside it that holds the same run
            continue
        try:
            head = read_head(q)
        except (OSError, zlib.error):
            traces.append(inspect_file(q))  # kept: its load says what is wrong with it
            continue
        if any(fmt.in_directory(q, head) for fmt in formats):
            traces.append(inspect_file(q, head))
        else:
            skipped.append(q)
    if not traces:
        raise TraceFormatError(folder, "directory holds no trace files",
                               "expected PyTorch profiler *.json/*.json.gz, Nsight *.sqlite, rocprofv3 *.csv or XSpace "
                               "*.xplane.pb files")
    for fmt in formats:
        if fmt.check_inputs is not None:
            mine = [t.path for t in traces if t.format is fmt]
            if mine:
                fmt.check_inputs(mine)
    return traces


def _files_under(folder: Path) -> list[Path]:
    """The regular files anywhere under ``folder``. A folder that cannot be listed is an error
    naming it (``Path.rglob`` skips it silently: an unreadable folder looked empty)."""

    def refuse(exc: OSError) -> None:
        raise os_error(exc.filename or folder, exc) from None

    found: list[Path] = []
    for root, _dirs, files in os.walk(folder, onerror=refuse):
        found.extend(q for q in (Path(root, f) for f in files) if q.is_file())
    return found
