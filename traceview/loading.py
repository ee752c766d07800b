"""Loading traces: find files, detect their format by content, parse (or read the cache), assign
ranks, and concatenate into one :class:`Trace`.

``traceview.load(path)`` is the entry point for notebooks and the CLI alike.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import threading
import zlib
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from traceview.errors import DuplicateRankError, TraceFormatError, os_error, require_regular_file
from traceview.registry import INPUT_FORMATS, InputFormat, input_formats
from traceview.model import (
    RankInfo,
    Trace,
    concat_traces,
    metadata_from_bytes,
    metadata_to_bytes,
    steps_from_annotations,
)

#: Bump when parser output changes, so stale cache entries are never read.
CACHE_VERSION = "7"  # 2: allocator events in Trace.memory (a ".memory" file beside the events);
# 3: counter samples in Trace.counters (".counters"), async b/e pairs and n instants as events;
# 4: text pid/tid ids numbered in event order (the same with any --jobs); RankInfo.activity_dropped
# 5: op input columns (input_dims, input_types, input_strides, concrete_inputs), still empty;
# 6: those columns filled by the Kineto parser; 7: fwdbwd links derived from sequence numbers
# (parsers/kineto_autograd.py). Besides, every key holds parser_fingerprint(): a parser edited or
# rebuilt in place (an editable install) never reads a Trace its old code wrote.

ProgressFn = Callable[[int, int], None]

#: Processes a parse may use (``--jobs``; set with :func:`parse_jobs`); None: the cores available.
_PARSE_JOBS: ContextVar[int | None] = ContextVar("traceview_parse_jobs", default=None)


@contextlib.contextmanager
def parse_jobs(jobs: int | None) -> Iterator[None]:
    """Within this block, parsers that can use several processes (Kineto: parsers/kineto_parallel.py)
    and the analyses of a big rank (traceview/pipeline.py, ``split_processes``) use at most ``jobs``
    (None: the cores available; 1: this process only). A context variable, so every command and the
    pipeline reach the parsers without passing it through each call."""
    token = _PARSE_JOBS.set(jobs)
    try:
        yield
    finally:
        _PARSE_JOBS.reset(token)


_MEANWHILE: ContextVar[list[Callable[[], None]] | None] = ContextVar("traceview_meanwhile", default=None)


@contextlib.contextmanager
def meanwhile(work: Callable[[], None]) -> Iterator[None]:
    """Within this block, a load runs ``work`` once: while its parse workers run when it has any
    (a big Kineto file: parsers/kineto_parallel.py), else before it parses (:func:`run_meanwhile`),
    so the caller's next step overlaps the parse. ``traceview analyze`` imports the analyses this
    way (pandas alone takes ~0.25 s): the parse workers, forked before those imports, start at once
    and parse more of the file meanwhile. ``work`` runs at the latest when the block ends (a trace
    read from the cache), so code after the block can rely on it; an error it raises stops the load."""
    pending = [work]
    token = _MEANWHILE.set(pending)
    try:
        yield
        run_meanwhile()
    finally:
        _MEANWHILE.reset(token)


def run_meanwhile() -> None:
    """Run the work :func:`meanwhile` set, if not run yet (parsers call this once their workers
    run; nothing happens outside a :func:`meanwhile` block)."""
    pending = _MEANWHILE.get()
    while pending:
        pending.pop()()


def wanted_parse_jobs() -> int:
    """The processes a parse may use now: the innermost :func:`parse_jobs` setting, else the cores
    this process may run on (its CPU affinity) in a main process, and 1 in a worker process (a
    job's workers already share the cores)."""
    jobs = _PARSE_JOBS.get()
    if jobs is not None:
        return max(1, jobs)
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def read_head(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of a file, decompressed when it is gzip (raises OSError,
    zlib.error): enough to tell the format by content."""
    with open(path, "rb") as f:
        head = f.read(size)
    if head[:2] == b"\x1f\x8b":
        head = zlib.decompressobj(wbits=31).decompress(head, size)
    return head


def detect_format(path: Path) -> str:
    """The name of the registered input format that claims the file ("kineto", "nsys", "nsys-rep"),
    decided by content (the extension is only a hint)."""
    require_regular_file(path)  # before any open: a FIFO would block it forever
    try:
        head = read_head(path, 4096)
    except OSError as exc:
        raise os_error(path, exc) from None
    except zlib.error as exc:
        raise TraceFormatError(path, f"corrupt gzip data ({exc})", "the file is damaged; copy it again") from None
    if not head:
        raise TraceFormatError(path, "is empty")
    for fmt in registered_formats():
        if fmt.sniff(path, head):
            return fmt.name
    raise TraceFormatError(
        path,
        "is not a trace traceview can read",
        "expected " + " or ".join(f.description for f in registered_formats()),
    )


def registered_formats() -> list[InputFormat]:
    """The input formats, with every parser module imported (so each has registered itself)."""
    from traceview.parsers import register_all

    register_all()
    return input_formats()


def find_trace_files(paths: Sequence[str | os.PathLike[str]], skipped: list[Path] | None = None) -> list[Path]:
    """Expand directories into the trace files they hold (sorted); keep files as given.

    Inside a directory, JSON files that are not traces (no ``traceEvents``/``ph`` near the start,
    e.g. a truth or config file next to the traces) are skipped and appended to ``skipped``;
    a file named explicitly is always kept, so a bad one gets a clear error.
    """
    found: list[Path] = []
    suffixes = tuple(s for fmt in registered_formats() for s in fmt.suffixes)
    for p in paths:
        path = Path(p)
        if path.is_dir():
            inside = sorted(q for q in _files_under(path) if q.name.endswith(suffixes) and not q.name.startswith("."))
            traces = [q for q in inside if _looks_like_trace(q)]
            if skipped is not None:
                skipped.extend(q for q in inside if q not in traces)
            if not traces:
                raise TraceFormatError(path, "directory holds no trace files",
                                       "expected PyTorch profiler *.json/*.json.gz or Nsight *.sqlite files")
            found.extend(traces)
        elif path.exists():
            found.append(path)
        else:
            raise TraceFormatError(path, "no such file or directory")
    return found


def _files_under(folder: Path) -> list[Path]:
    """The regular files anywhere under ``folder``. A folder that cannot be listed is an error
    naming it (``Path.rglob`` skips it silently: an unreadable folder looked empty)."""

    def refuse(exc: OSError) -> None:
        raise os_error(exc.filename or folder, exc) from None

    found: list[Path] = []
    for root, _dirs, files in os.walk(folder, onerror=refuse):
        found.extend(q for q in (Path(root, f) for f in files) if q.is_file())
    return found


def _looks_like_trace(path: Path) -> bool:
    """Cheap content sniff for directory scans (the parser does the real validation)."""
    try:
        head = read_head(path, 1 << 16)
    except (OSError, zlib.error):
        return True  # let the parser report what is wrong with it
    return any(fmt.in_directory(path, head) for fmt in registered_formats())


# ------------------------------------------------------------------------------- cache


def cache_dir() -> Path:
    root = os.environ.get("TRACEVIEW_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "traceview" if xdg else Path.home() / ".cache" / "traceview"


#: cache keys computed inside :func:`remembered_cache_keys`, by the file's identity (path,
#: device, inode, size, mtime): a cached ``analyze`` keys the report and then loads the trace, and
#: each asked for the same files' keys (2 MiB read and hashed per file, twice)
_KEY_MEMO: ContextVar[dict[tuple[str, int, int, int, int], str] | None] = ContextVar(
    "traceview_cache_key_memo", default=None)


@contextlib.contextmanager
def remembered_cache_keys() -> Iterator[None]:
    """Inside the block, a file whose identity is unchanged gets the key computed the first time,
    without being read again. Scoped to one operation (one command): across operations a file
    rewritten with the same size within the file system's time resolution must be read again."""
    token = _KEY_MEMO.set({})
    try:
        yield
    finally:
        _KEY_MEMO.reset(token)


def cache_key(path: Path) -> str:
    """Identity and content: resolved path, size, mtime, and a hash of the first and last MiB.

    Hashing the whole file would cost as much as parsing it; size + mtime + both ends catch
    rewrites in practice, and the parser version invalidates old entries. Inside
    :func:`remembered_cache_keys` a file is read once.
    """
    st = require_regular_file(path)  # before opening: a FIFO would block the open forever
    identity = (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    memo = _KEY_MEMO.get()
    if memo is not None and identity in memo:
        return memo[identity]
    key = _content_key(path, identity[0], st)
    if memo is not None:
        memo[identity] = key
    return key


_PARSER_FINGERPRINT: str | None = None


def parser_fingerprint() -> str:
    """The name, size and mtime of every parser module and native decoder (``traceview.parsers``)
    and of the model's schema (``traceview/model.py``), as one digest (computed once)."""
    global _PARSER_FINGERPRINT
    if _PARSER_FINGERPRINT is None:
        import traceview.parsers as parsers

        folder = Path(parsers.__file__).parent
        files = [*sorted(f for pattern in ("*.py", "*.so", "*.pyd") for f in folder.glob(pattern)),
                 Path(__file__).with_name("model.py")]
        digest = hashlib.sha256()
        for f in files:
            with contextlib.suppress(OSError):
                st = f.stat()
                digest.update(f"{f.name}|{st.st_size}|{st.st_mtime_ns}".encode())
        _PARSER_FINGERPRINT = digest.hexdigest()[:16]
    return _PARSER_FINGERPRINT


#: how much of each end of a file its content key reads
FILE_END_BYTES = 1 << 20


def digest_file_ends(digest: Any, path: Path, size: int) -> None:
    """Feed ``digest`` the first :data:`FILE_END_BYTES` of ``path`` (of ``size`` bytes) and, when the
    file is longer than both ends, its last ones: a content key that costs 2 MiB of reading whatever
    the file's size (the trace cache's keys, the run history's identities)."""
    with open(path, "rb") as f:
        digest.update(f.read(FILE_END_BYTES))
        if size > 2 * FILE_END_BYTES:
            f.seek(-FILE_END_BYTES, os.SEEK_END)
            digest.update(f.read(FILE_END_BYTES))


def _content_key(path: Path, resolved: str, st: os.stat_result) -> str:
    digest = hashlib.sha256()
    digest.update(f"{CACHE_VERSION}|{parser_fingerprint()}|{resolved}|{st.st_size}|{st.st_mtime_ns}".encode())
    digest_file_ends(digest, path, st.st_size)
    return digest.hexdigest()[:32]


def _write_cache(trace: Trace, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    meta = metadata_to_bytes(trace.ranks, trace.warnings)
    events = trace.events.replace_schema_metadata({b"traceview": meta})
    with pa.OSFile(str(tmp), "wb") as sink:
        with ipc.new_file(sink, events.schema) as writer:
            writer.write_table(events)
    for suffix, table in ((".links", trace.links), (".memory", trace.memory), (".counters", trace.counters)):
        with pa.OSFile(str(tmp) + suffix, "wb") as sink:
            with ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
        os.replace(str(tmp) + suffix, str(target) + suffix)
    os.replace(tmp, target)


def _read_cache(target: Path) -> Trace | None:
    links_path = Path(str(target) + ".links")
    memory_path = Path(str(target) + ".memory")
    counters_path = Path(str(target) + ".counters")
    if not all(p.exists() for p in (target, links_path, memory_path, counters_path)):
        return None
    try:
        events = ipc.open_file(pa.memory_map(str(target))).read_all()
        links = ipc.open_file(pa.memory_map(str(links_path))).read_all()
        memory = ipc.open_file(pa.memory_map(str(memory_path))).read_all()
        counters = ipc.open_file(pa.memory_map(str(counters_path))).read_all()
        meta = (events.schema.metadata or {}).get(b"traceview")
        if meta is None:
            return None
        ranks, warnings = metadata_from_bytes(meta)
    except (pa.ArrowInvalid, OSError, ValueError, KeyError):
        return None  # a damaged cache entry is re-parsed, never trusted
    events = events.replace_schema_metadata(None)
    return Trace(events=events, links=links, ranks=ranks, steps=steps_from_annotations(events), warnings=warnings,
                 memory=memory, counters=counters)


# ------------------------------------------------------------------------------- loading


def load_file(path: str | os.PathLike[str], *, use_cache: bool = True, progress: ProgressFn | None = None,
              step_marker: str | None = None) -> Trace:
    """Parse one file (any supported format), through the cache when allowed."""
    path = Path(path)
    fmt = detect_format(path)
    key_path = None
    if use_cache and INPUT_FORMATS[fmt].cacheable and step_marker is None:
        try:
            key_path = cache_dir() / f"{cache_key(path)}.arrow"
            cached = _read_cache(key_path)
            if cached is not None:
                if progress is not None:
                    progress(1, 1)
                return cached
        except OSError:
            key_path = None
    if not INPUT_FORMATS[fmt].runs_meanwhile:
        run_meanwhile()
    trace = INPUT_FORMATS[fmt].parse(path, progress=progress, step_marker=step_marker)
    if key_path is not None:
        try:
            _write_cache(trace, key_path)
        except OSError:
            pass  # read-only home, full disk: caching is an optimisation only
    return trace


def load(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    use_cache: bool = True,
    progress: Callable[[Path, int, int], None] | None = None,
    step_marker: str | None = None,
    jobs: int | None = None,
) -> Trace:
    """Load one or more trace files or directories into one :class:`Trace`.

    ``jobs``: processes a big Kineto file is parsed with (default: as :func:`parse_jobs` set, else
    the cores available; 1: this process only); the Trace is the same whatever it is.

    Ranks come from each file (``distributedInfo``), else from its name (``rank3``, ``worker3``,
    ``rank-3``, ``_rank_3``), else each unresolved file gets a distinct unused rank and a warning.
    Two files claiming the same rank raise :class:`DuplicateRankError` naming both.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    skipped: list[Path] = []
    files = find_trace_files(list(paths), skipped)
    with parse_jobs(jobs) if jobs is not None else contextlib.nullcontext():
        workers = wanted_parse_jobs()
        if workers > 1 and _spread_over_files(files, workers):
            traces = _load_in_processes(files, use_cache, progress, step_marker, workers)
        else:  # one file at a time, each big one parsed by ``workers`` processes
            traces = []
            for file in files:
                cb = (lambda done, total, _f=file: progress(_f, done, total)) if progress else None
                traces.append(load_file(file, use_cache=use_cache, progress=cb, step_marker=step_marker))
    trace = _assign_ranks(traces)
    trace.warnings.extend(f"{p}: skipped, not a trace" for p in skipped)
    release_free_memory()
    return trace


def release_free_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing elsewhere).

    Why: glibc keeps memory that was freed inside its heap, so a parse's transient objects (1.3 M
    decoded events) and an analysis's temporaries stay resident and the next step's allocations do
    not reuse all of it: on the 141 MB benchmark trace the heap held ~90 MB of free pages after the
    parse. The pipeline calls this after the load and after a rank's analyses, not between them:
    each analysis reuses the free pages the one before left, where a trim would make it fault them
    in again (traceview.pipeline.run_spec). A trim costs about a millisecond per call there."""
    trim = libc_function("malloc_trim")
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=None)
def libc_function(name: str) -> Callable[..., int] | None:
    """A function of the C library this process runs on, or None (not POSIX, or not that library);
    looked up once per name (every trim and every parse asks)."""
    import ctypes

    if os.name != "posix":
        return None
    try:  # the symbols this process already has (libc among them); not ctypes.util: it runs ldconfig
        return getattr(ctypes.CDLL(None), name, None)
    except OSError:
        return None


#: glibc's ``mallopt`` parameters (malloc.h) that ``parse_heap`` sets.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -2, -3, -8
#: While a parse runs (``parse_heap``): blocks below 32 MiB come from the heap, nothing is handed
#: back to the system before 1 GiB lies free at its top, the heap grows 64 MiB at a time, and
#: threads allocate from the one heap (``parse_heap`` says why).
PARSE_HEAP_SETTINGS = {_M_MMAP_THRESHOLD: 32 << 20, _M_TRIM_THRESHOLD: 1 << 30, _M_TOP_PAD: 64 << 20,
                       _M_ARENA_MAX: 1}
#: After it: the ceilings glibc's own sliding thresholds reach once big blocks have been freed (as
#: they have by the end of any big parse; setting one value stops that sliding, so all three are
#: set), and the documented default padding.
AFTER_PARSE_HEAP_SETTINGS = {_M_MMAP_THRESHOLD: 32 << 20, _M_TRIM_THRESHOLD: 64 << 20, _M_TOP_PAD: 128 << 10}
_PARSE_HEAP_DEPTH: list[int] = [0]  # parses running (threads of a Dask worker may run several)
_PARSE_HEAP_LOCK = threading.Lock()


def _new_parse_heap_lock() -> None:
    """A forked child gets a lock of its own: the parent's may have been held by another thread."""
    global _PARSE_HEAP_LOCK
    _PARSE_HEAP_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_parse_heap_lock)


@contextlib.contextmanager
def parse_heap() -> Iterator[None]:
    """Within this block the C heap keeps what a parse frees for the parse's next allocations
    (glibc's ``mallopt``; nothing elsewhere); on leaving it, free memory is handed back.

    Why: a parse allocates and frees columns of a few MB chunk after chunk. With glibc's sliding
    thresholds those blocks start out as mappings of their own and the heap's top is handed back
    whenever it is free, so the next chunk faults the same amount of fresh pages in again. Each
    process of a parallel parse (forked with this setting) starts that over: on the 141 MB
    benchmark trace ``--jobs 2`` took 0.355 s with glibc's defaults and 0.287 s with these (fresh
    processes, medians of 7; ``--jobs 1`` 0.423 -> 0.412 s; benchmarks/README.md, seventh pass).
    The caller trims after the parse (``release_free_memory``), which hands back what lies free
    in the main heap whatever the thresholds; not the free top of a thread's own heap (an
    "arena"), which glibc shrinks only in ``free`` and only past the trim threshold. So threads
    share the main heap (``M_ARENA_MAX`` 1): else the parallel parse's CPU-op-links thread
    (``_KinetoFile._tables``) kept ~22 MB in its arena, in about half the runs, through the whole
    analysis (``traceview analyze --jobs 2`` peaked at 274-279 MB PSS against 245-256). glibc
    fixes the arena limit the first time a thread asks for an arena, for the life of the process:
    that one setting is not undone (Python's GIL serialises most of its threads' allocations).
    Nested or concurrent blocks (a parallel parse falling back to a serial one, parses in threads)
    set on entering the first and restore on leaving the last.
    ``TRACEVIEW_PARSE_HEAP=0`` leaves glibc's settings alone (benchmarks compare both)."""
    mallopt = libc_function("mallopt") if os.environ.get("TRACEVIEW_PARSE_HEAP", "").strip() != "0" else None
    with _PARSE_HEAP_LOCK:
        _PARSE_HEAP_DEPTH[0] += 1
        if mallopt is not None and _PARSE_HEAP_DEPTH[0] == 1:
            for parameter, value in PARSE_HEAP_SETTINGS.items():
                mallopt(parameter, value)
    try:
        yield
    finally:
        with _PARSE_HEAP_LOCK:
            _PARSE_HEAP_DEPTH[0] -= 1
            if mallopt is not None and _PARSE_HEAP_DEPTH[0] == 0:
                for parameter, value in AFTER_PARSE_HEAP_SETTINGS.items():
                    mallopt(parameter, value)


#: Below this much input, parsing in several processes costs more than it saves (process start,
#: shipping columns back): measured in benchmarks/README.md ("Parallel parse").
PARALLEL_MIN_BYTES = 32 * 1024 * 1024


def _spread_over_files(files: list[Path], workers: int) -> bool:
    """Parse whole files in ``workers`` processes: enough files, enough bytes, and no file so big
    that it alone would keep one process busy long after the others (that one is better cut into
    ranges, parsers/kineto_parallel.py)."""
    if len(files) < workers:
        return False
    sizes = [f.stat().st_size for f in files]
    return sum(sizes) >= PARALLEL_MIN_BYTES and max(sizes) * workers <= 2 * sum(sizes)


def _load_in_processes(files: list[Path], use_cache: bool, progress: Callable[[Path, int, int], None] | None,
                       step_marker: str | None, workers: int) -> list[Trace]:
    """At least as many files as processes: each file parsed whole by one of ``workers``
    processes (no range merging), Traces returned pickled, in file order. Progress per file as
    each completes."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    run_meanwhile()  # before the fork: every worker parses whole files and needs what it imports
    # fork: workers start with every module already imported (see parsers/kineto_parallel.py)
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    before = {child.pid for child in multiprocessing.active_children()}
    with contextlib.ExitStack() as stack, \
            ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method)) as pool:
        stack.callback(stop_leftover_workers, before)  # after the pool's own shutdown (exits first)
        futures = [pool.submit(_load_one, file, use_cache, step_marker) for file in files]
        traces = []
        try:
            for file, future in zip(files, futures):
                try:
                    traces.append(future.result())
                # whatever failed in the worker (a bad file, a killed process), this process reads
                # the file again: the same Trace, or the error a serial load gives, raised as it would be
                except Exception:
                    traces.append(load_file(file, use_cache=use_cache, step_marker=step_marker))
                if progress is not None:
                    size = file.stat().st_size
                    progress(file, size, size)
        finally:  # on an error, files not yet started are not parsed for nothing
            for future in futures:
                future.cancel()
        return traces


def stop_leftover_workers(before: set[int | None]) -> None:
    """End the worker processes started since ``before`` (pids of the children then) that outlived
    their pool's shutdown. When a task fails while workers are still starting, CPython 3.11's
    ProcessPoolExecutor can leave a worker waiting for a task that never comes, and interpreter
    exit then waits for it forever (seen under pytest with the serial fallback of a parse)."""
    import multiprocessing

    for child in multiprocessing.active_children():
        if child.pid not in before:
            child.terminate()
            child.join(5)


def _load_one(file: Path, use_cache: bool, step_marker: str | None) -> Trace:
    with parse_jobs(1):
        return load_file(file, use_cache=use_cache, step_marker=step_marker)


@dataclass
class RankPlan:
    """How ranks are numbered across the files of one run (see :func:`plan_ranks`)."""

    #: file index -> ``{old rank: new rank}`` for every file some of whose ranks get a number
    maps: dict[int, dict[int, int]] = field(default_factory=dict)
    #: file index -> (rank, the file that claimed it first, this file): a rank two files claim
    conflicts: dict[int, tuple[int, str, str]] = field(default_factory=dict)
    #: warnings about files that state no rank, in file order
    warnings: list[str] = field(default_factory=list)

    def renumbered(self) -> dict[int, dict[int, int]]:
        """The files whose rank numbers change."""
        return {i: m for i, m in self.maps.items() if any(old != new for old, new in m.items())}


def unranked_warning(source_path: str, rank: int) -> str:
    """What loading says of a file that states no rank."""
    return f"{source_path}: no rank in distributedInfo or file name; treated as rank {rank}"


def plan_ranks(files: Sequence[tuple[int, Mapping[int, RankInfo]]], *, several: bool,
               reserved: Mapping[int, str] | None = None) -> RankPlan:
    """Give every rank a distinct number across files (``files``: (file index, ranks), in file order).

    Ranks a file states (Kineto ``distributedInfo``, a file name) are kept; a file stating a rank an
    earlier file stated is a conflict. Ranks a parser only numbered (Nsight processes, when there are
    several files: an export does not say which global rank a process was) and files with no rank at
    all get the lowest free numbers, in file order, with a warning for the latter. ``reserved``:
    numbers no file may be given (a file that could not be read keeps the rank its name says).
    """
    plan = RankPlan()
    claimed: dict[int, str] = {}

    def numbered_only(info: RankInfo) -> bool:
        return several and info.rank_source.startswith("nsys")

    for index, infos in files:
        stated = [(rank, info) for rank, info in infos.items() if rank >= 0 and not numbered_only(info)]
        clash = [(rank, info) for rank, info in stated if rank in claimed and several]
        if clash:
            rank, info = clash[0]
            plan.conflicts[index] = (rank, claimed[rank], info.source_path)
            continue
        claimed.update((rank, info.source_path) for rank, info in stated)
    for rank, name in (reserved or {}).items():
        claimed.setdefault(rank, name)
    next_free = 0
    for index, infos in files:
        if index in plan.conflicts:
            continue
        mapping: dict[int, int] = {}
        for rank, info in sorted(infos.items()):
            if rank >= 0 and not numbered_only(info):
                continue
            while next_free in claimed:
                next_free += 1
            mapping[rank] = next_free
            claimed[next_free] = info.source_path
            if rank < 0 and several:
                plan.warnings.append(unranked_warning(info.source_path, next_free))
        if mapping:
            plan.maps[index] = mapping
    return plan


def number_rank_infos(infos: Mapping[int, RankInfo], mapping: Mapping[int, int]) -> None:
    """Rank metadata numbered as planned (``{old: new}``; ``infos`` keyed by the old numbers): the new
    rank, how it was found, a warning when the file stated none."""
    for old, new in mapping.items():
        info = infos.get(old)
        if info is None:
            continue
        info.rank = new
        if old < 0:
            info.rank_source = "assigned (no rank in file or file name)"
            info.warnings.append(unranked_warning(info.source_path, new))
        else:
            info.rank_source += f"; renumbered {old} -> {new} across files"


def apply_rank_numbers(trace: Trace, mapping: Mapping[int, int]) -> Trace:
    """``trace`` with its ranks numbered as planned (:func:`number_rank_infos`, and the rank columns
    renamed when a number changes)."""
    number_rank_infos(trace.ranks, mapping)
    if any(old != new for old, new in mapping.items()):
        trace = renumber_ranks(trace, dict(mapping))
    return trace


def _assign_ranks(traces: list[Trace]) -> Trace:
    """Number every rank across files (:func:`plan_ranks`) and concatenate; two files stating the
    same rank is an error naming both."""
    plan = plan_ranks(list(enumerate(tr.ranks for tr in traces)), several=len(traces) > 1)
    if plan.conflicts:
        rank, first, second = plan.conflicts[min(plan.conflicts)]
        raise DuplicateRankError(f"rank {rank} appears in two files: {first} and {second} "
                                 "(load one run at a time, or check the files' distributedInfo)")
    remapped = [apply_rank_numbers(tr, plan.maps.get(i, {})) for i, tr in enumerate(traces)]
    merged = concat_traces(remapped)
    merged.warnings = list(dict.fromkeys(merged.warnings + plan.warnings))
    return merged


def _with_ranks(table: pa.Table, mapping: dict[int, int]) -> pa.Table:
    """``table`` with its ``rank`` column (the first) renamed by ``mapping``."""
    if table.num_rows == 0:
        return table
    rank = table.column("rank").to_numpy()
    new_rank = rank.copy()
    for old, new in mapping.items():
        new_rank[rank == old] = new
    return table.set_column(0, table.schema.field("rank"), pa.array(new_rank.astype(np.int32)))


def renumber_ranks(tr: Trace, mapping: dict[int, int]) -> Trace:
    """``tr`` with its ranks renamed (``{old: new}``) in its events, links, steps, memory, counters
    and ranks dict (``traceview.jobs`` renames a file's ranks with it as :func:`load` does)."""
    events, links, steps, memory, counters = (_with_ranks(t, mapping) for t in
                                              (tr.events, tr.links, tr.steps, tr.memory, tr.counters))
    ranks = {mapping.get(r, r): info for r, info in tr.ranks.items()}
    return Trace(events=events, links=links, ranks=ranks, steps=steps, warnings=tr.warnings, memory=memory,
                 counters=counters)
