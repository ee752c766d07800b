"""Kineto parsing across cores: the events array cut into byte ranges at event boundaries, each
range parsed in a worker process, the workers' columns merged in file order in the parent.

Why processes
-------------
msgspec holds the GIL while it decodes, and building columns from the decoded structs is Python
too, so threads do not help; processes do. ``jobs - 1`` workers claim ranges one at a time from
the start of the file (``claim_range``); the parent first does its caller's work for meanwhile
(``ParseHooks.meanwhile``: ``traceview analyze`` imports the analyses, and pandas, while
the workers parse; the workers are forked before those imports, so they start at once and with
less memory), then claims ranges from the end, until the two meet. A range
is parsed by the same code as a serial parse (``kineto_reader(...).read_range``), the ranges of
one process reusing one read buffer; a worker sends back its reader's accumulated state (numpy
and Arrow column chunks, counts, string memos) as a file in the spool folder: a pickle whose
array buffers lie after it, mapped by the parent rather than copied, the big ones each on its
own (``dump_result``, ``load_result``). Only the head (read in small blocks, ``HEAD_BYTES``) and
the cuts come before the workers start; after them the parent merges and builds the tables, with
the CPU-op links made by a helper thread beside the rest (``KinetoFile._build``).
``benchmarks/bench_load.py --phases`` prints the time of each phase.

Where a range may start
-----------------------
Ranges start at a ``{`` found by ``RANGE_START``: ``}``, ``,``, ``{`` and then a ``"`` followed by
a letter. In valid JSON a quote followed by a letter opens a string (a closing quote is followed
by ``,`` ``:`` ``}`` ``]`` or space), so that ``{`` lies outside every string: a ``},{`` inside a
name never becomes a boundary. It could still lie inside an event (a list of objects in ``args``):
then a worker's range fails to decode, and the file is parsed again in one process, so odd files
give exactly the serial result and the serial error messages.

Merging
-------
Ranges are merged in file order, so everything assigned on first sight comes out as in a serial
parse: string codes (names, categories, phases) are remapped through lookup arrays built by
feeding each worker's memo, in its order, into the parent's; row numbers and event sequence
numbers (``row``, ``seq`` in the per-chunk dicts: B/E and async pairing, done once in the parent
after the merge because it is global) are shifted by what came before. Every other accumulated
attribute is merged by its type (lists appended, integer dicts and integers summed, other dicts
updated), so state a parser change adds is carried without touching this module. pid/tid texts
get ids on first sight too; a range whose text ids would differ from the serial ones (a text
first seen in a later range before one seen earlier) is parsed again in the parent.

Memory
------
Plain files: workers read their ranges themselves (``os.pread``), chunk by chunk as a serial
parse does, so the text in flight is one chunk per worker. Gzip: decompression is one stream, so
the parent decompresses and hands ranges of text (files in the spool folder) to ``jobs - 1``
workers (the parent's work takes a core: ``GZIP_MIN_JOBS``); at most one range more than there
are workers is in flight. Results come back through the spool folder too (``read_range``), in RAM
where there is ``/dev/shm``, each file removed once merged, the folder when the parse ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.abc
import multiprocessing
import os
import mmap
import pickle
import struct
import re
import shutil
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa

from traceview import parsing
from traceview.parsing import NO_HOOKS, ParseHooks, ProgressFn
from traceview.model import Trace
from traceview.parsers.jsonstream import READ_BYTES, UTF8_BOM, Blocks, open_bytes
from traceview.parsers.kineto import kineto_reader, parse_kineto
from traceview.parsers.kineto.clock import PhaseClock, minor_page_faults, timed
from traceview.parsers.kineto.events import OP_INPUT_COLUMNS
from traceview.parsers.kineto.fields import op_input_memo


#: Ranges per process: many, so that where the parent, taking ranges from the end, meets the
#: workers the last range is short (a process finishing early idles for at most one range) and a
#: worker slowed by a busy core does not hold up the end. On the 141 MB benchmark trace, 2 jobs:
#: 4 ranges of >= 16 MB per process took 0.403 s, 8 of >= 8 MB 0.37-0.39 s, 12 of >= 4 MB 0.368 s
#: (serial 0.49-0.53 s; in-process medians of 5, load 0.3-0.6).
RANGES_PER_JOB = 12
#: No range smaller than this (per-range costs: a process task, a result file, a merge).
MIN_RANGE_BYTES = 4 * 1024 * 1024
#: Gzip: the parent ships ranges of this much decompressed text.
GZIP_RANGE_BYTES = 32 * 1024 * 1024
#: Gzip: decompression (zlib, ~330 MB/s of JSON) and cutting and writing the text keep the parent
#: busy, so a gzip file uses workers only from this many jobs on (``jobs - 1`` workers): on 2
#: cores a parallel parse measured 0.7-0.99x the serial speed (docs/scaling.md).
GZIP_MIN_JOBS = 3
#: How far past a planned cut to look for an event boundary.
BOUNDARY_WINDOW_BYTES = 1024 * 1024
#: Plain files: the metadata before the events is read in blocks this size, doubling up to
#: ``READ_BYTES``: the events start within the first kilobytes of a Kineto file, and until the
#: head is read no worker parses (one 4 MB block costs ~30 ms to read, copy and search).
HEAD_BYTES = 64 * 1024

#: Spool folders are named ``SPOOL_PREFIX<pid of the parsing process>-<random>``.
SPOOL_PREFIX = "traceview-parse-"
SPOOL_NAME = re.compile(re.escape(SPOOL_PREFIX) + r"(\d+)-[A-Za-z0-9_]+")
RANGE_START = re.compile(rb'\}\s*,\s*(\{)\s*"[A-Za-z_]')
#: A worker's result file starts with the sizes of its pickle and of its table of buffers.
_RESULT_HEADER = struct.Struct("<QQ")
#: Attributes of a reader that are not parse results (or that the parent keeps its own of).
_NOT_STATE = frozenset({"path", "progress", "decoder", "total_bytes", "head", "dur_fixes", "whole_events"})
#: Per-chunk columns that hold codes of a string memo: (attribute, column) -> memo attribute.
_CODE_COLUMNS = {("columns", "category"): "cat_memo", ("columns", "name"): "name_memo",
                 ("flows", "ph"): "ph_memo", ("flows", "cat"): "cat_memo",
                 **{("columns", key): op_input_memo(key) for key in OP_INPUT_COLUMNS}}


@dataclass
class _RangeTask:
    path: Path
    slot: int  # index of this range in the shared progress counters
    last: bool
    array_document: bool
    allocator_args: bool = False  # decode the allocator's args from the start (profile_memory)
    begin: int = 0  # plain files: the byte range of the file
    end: int = 0
    text_file: str = ""  # gzip: a file holding the range's decompressed text (begin, end: 0, its size)
    spool: str = ""  # folder (in RAM where there is /dev/shm) the worker writes its result into


def parse_parallel(path: Path, *, progress: ProgressFn | None = None, jobs: int | None = None,
                   min_bytes: int | None = None, range_bytes: int | None = None,
                   clock: PhaseClock | None = None, hooks: ParseHooks = NO_HOOKS) -> Trace:
    """Parse one Kineto file with ``jobs`` worker processes (None: the cores available); a file
    with less than ``min_bytes`` of JSON (default ``PARALLEL_MIN_BYTES``), or ``jobs == 1``, is
    parsed in this process. ``range_bytes`` sets the size of the ranges (tests force many).
    ``clock``: where the time of each phase is added (benchmarks). ``hooks``: the caller's
    (:class:`traceview.parsing.ParseHooks`): its work for meanwhile runs once the workers run."""
    jobs = parsing.resolve_jobs(jobs)
    gzip = _is_gzip(path)
    too_few = jobs < (GZIP_MIN_JOBS if gzip else 2)
    if too_few or _json_bytes(path, gzip) < (parsing.PARALLEL_MIN_BYTES if min_bytes is None else min_bytes):
        return parse_kineto(path, progress=progress, jobs=1, clock=clock, hooks=hooks)
    try:
        driver = _Driver(path, progress, max(jobs - 1, 1) if gzip else jobs, range_bytes, clock, hooks)
        trace = driver.run_gzip() if gzip else driver.run_plain()
    except _SerialNeeded:
        trace = None
    # a file the ranges cannot be read from (damaged, or a boundary inside an event) is parsed
    # serially: the same result, or the same error message, as --jobs 1
    return trace if trace is not None else parse_kineto(path, progress=progress, jobs=1, clock=clock, hooks=hooks)


class _SerialNeeded(Exception):
    """The file is parsed again in one process."""


class _Driver:
    def __init__(self, path: Path, progress: ProgressFn | None, jobs: int, range_bytes: int | None,
                 clock: PhaseClock | None = None, hooks: ParseHooks = NO_HOOKS) -> None:
        self.path = path
        self.hooks = hooks
        self.progress = progress
        self.jobs = jobs
        self.range_bytes = range_bytes
        self.clock = clock
        self.total_bytes = path.stat().st_size
        self.parent = kineto_reader(path, clock=clock)
        self.invalid_utf8 = 0
        self.shared: Any = None  # per-range bytes read, written by the workers
        self.claims: Any = None  # plain files: the ranges not claimed yet (claim_range)
        self.first = 0  # plain files: where the events start in the file
        self.spool = ""  # where workers write their results (``read_range``)
        self.buffer = bytearray()  # the read buffer of the ranges this process parses (``parse_range``)

    # -- plain files: workers read their own ranges ----------------------------------------
    def run_plain(self) -> Trace | None:
        raw, _ = open_bytes(self.path)
        with raw, timed(self.clock, "parallel: head and cuts"):
            bom = len(UTF8_BOM) if raw.read(len(UTF8_BOM)) == UTF8_BOM else 0
            raw.seek(0)
            chunks = Blocks(_head_blocks(raw))
            buf = bytearray()
            start = self.parent.start_events(buf, chunks)
            if start is None or chunks.invalid_utf8:
                return None  # no events array, or a repaired head (offsets would not match the file)
            first = bom + start[0]
            n_ranges = self._n_ranges(self.total_bytes - first)
            cuts = plan_cuts(self.path, first, self.total_bytes, n_ranges)
        if not cuts:
            return None  # one range: a worker would only add its start-up
        bounds = [first, *cuts, self.total_bytes]
        memory = self.parent.allocator_events_expected()
        tasks = [_RangeTask(self.path, i, last=i == len(bounds) - 2, array_document=start[1], allocator_args=memory,
                            begin=b, end=e) for i, (b, e) in enumerate(zip(bounds, bounds[1:]))]
        self.first = first
        with self._pool(len(tasks), self.jobs - 1) as pool:
            self._run_ranges(tasks, pool)
            # the workers exit while the tables are built (the pool's end joins them)
            pool.shutdown(wait=False, cancel_futures=True)
            return self.parent.finish(self.invalid_utf8, threads=self.jobs)

    def _run_ranges(self, tasks: list[_RangeTask], pool: ProcessPoolExecutor) -> None:
        """The ``jobs - 1`` workers claim ranges from the start of the file, one at a time
        (``read_claimed_ranges``); this process first does the caller's work for meanwhile
        (``ParseHooks.meanwhile``: ``traceview analyze``'s imports), then claims ranges from the
        end, until the two meet: no process idles for more than the range it is finishing,
        however long that work takes or however busy a core is. Ranges are merged in file order."""
        self.claims[0], self.claims[1] = 0, len(tasks) - 1
        spooled = [dataclasses.replace(task, spool=self.spool) for task in tasks]
        with timed(self.clock, "parallel: start workers"):
            futures = [pool.submit(read_claimed_ranges, spooled) for _ in range(self.jobs - 1)]
        try:
            with timed(self.clock, "parallel: meanwhile"):
                self.hooks.meanwhile()
            done: dict[int, tuple[dict[str, Any], int]] = {}
            with timed(self.clock, "parallel: parse own ranges"):
                while (slot := claim_range(self.claims, from_end=True)) is not None:
                    done[slot] = self._parse_here(tasks[slot])
            theirs = {slot: answer for future in futures for slot, answer in self._result_of(future)}
            self.buffer = bytearray()  # every range is read: its ~20 MB are not held through the build
            for task in tasks:
                self._merge(task, done.pop(task.slot) if task.slot in done else self._load(theirs.pop(task.slot)))
        finally:
            with self.claims.get_lock():  # on an error here: workers claim no further range
                self.claims[0] = self.claims[1] + 1
            for future in futures:
                future.cancel()

    def _n_ranges(self, events_bytes: int) -> int:
        size = self.range_bytes or max(MIN_RANGE_BYTES, events_bytes // (self.jobs * RANGES_PER_JOB) + 1)
        return max(1, -(-events_bytes // size))

    # -- gzip: the parent decompresses and ships text ---------------------------------------
    def run_gzip(self) -> Trace | None:
        # before the fork: this process is busy decompressing, and the workers inherit the modules
        self.hooks.meanwhile()
        raw, chunks = open_bytes(self.path)
        with raw, self._pool(1 << 16, self.jobs) as pool:
            buf = bytearray()
            start = self.parent.start_events(buf, chunks)
            if start is None:
                return None
            del buf[: start[0]]
            memory = self.parent.allocator_events_expected()
            size = self.range_bytes or GZIP_RANGE_BYTES
            pending: deque[tuple[_RangeTask, Future[Any]]] = deque()
            slot = 0
            try:
                for block in chunks:
                    buf += block
                    cut = _last_boundary(buf) if len(buf) >= size else None
                    if cut is None:
                        continue
                    task = self._spooled(_RangeTask(self.path, slot, last=False, array_document=start[1],
                                                    allocator_args=memory), buf, cut)
                    del buf[:cut]
                    slot += 1
                    pending.append((task, pool.submit(read_range, task)))
                    while len(pending) > self.jobs:  # bounded: workers + 1 ranges of text in flight
                        self._merge_oldest(pending, raw.tell)
                task = self._spooled(_RangeTask(self.path, slot, last=True, array_document=start[1],
                                                allocator_args=memory), buf, len(buf))
                del buf[:]
                pending.append((task, pool.submit(read_range, task)))
                while pending:
                    self._merge_oldest(pending, raw.tell)
            finally:
                for _, future in pending:
                    future.cancel()
            self.invalid_utf8 += chunks.invalid_utf8
        return self.parent.finish(self.invalid_utf8, threads=self.jobs)

    def _spooled(self, task: _RangeTask, buf: bytearray, end: int) -> _RangeTask:
        """``task`` with ``buf[:end]`` written to a file of the spool for its worker to read (a
        file in RAM, not the pool's pipe: see ``read_range``)."""
        text_file = os.path.join(self.spool, f"{task.slot}.json")
        with open(text_file, "wb") as fh, memoryview(buf) as view, view[:end] as text:
            fh.write(text)
        return dataclasses.replace(task, spool=self.spool, text_file=text_file, end=end)

    def _merge_oldest(self, pending: deque[tuple[_RangeTask, Future[Any]]], done: Callable[[], int]) -> None:
        task, future = pending.popleft()
        self._merge(task, self._load(self._result_of(future, done)))
        os.unlink(task.text_file)

    # -- shared ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _pool(self, n_ranges: int, workers: int) -> Iterator[ProcessPoolExecutor]:
        # fork: a worker starts in milliseconds with every module already imported (a fresh
        # interpreter would spend ~0.5 s importing pyarrow, pandas and msgspec first)
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        context = multiprocessing.get_context(method)
        self.shared = context.RawArray("q", min(n_ranges, 1 << 16))
        self.claims = context.Array("q", 2)  # [first, last] range no process has claimed yet
        ram = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        remove_orphan_spools(ram or tempfile.gettempdir())
        self.spool = tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-", dir=ram)
        before = {child.pid for child in multiprocessing.active_children()}
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                                   initargs=(self.shared, self.claims, self.hooks.for_worker()))
        try:
            yield pool
        finally:
            with timed(self.clock, "parallel: stop workers"):
                pool.shutdown(wait=True, cancel_futures=True)
                parsing.stop_leftover_workers(before)
                shutil.rmtree(self.spool, ignore_errors=True)

    def _result_of(self, future: Future[Any], done: Callable[[], int] | None = None) -> Any:
        """A worker's answer, reporting progress while it works (``done``: bytes read so far,
        default the ranges' counters); a worker that failed makes the whole file be parsed
        serially."""
        done = done or (lambda: self.first + int(sum(self.shared)))
        with timed(self.clock, "parallel: wait for workers"):
            while not wait([future], timeout=0.25).done:
                self._report(done())
        self._report(done())
        try:
            return future.result()
        # whatever went wrong in a worker (damaged JSON, a cut inside an event, a worker killed),
        # the serial parse that follows gives the real result or error
        except Exception as exc:
            raise _SerialNeeded() from exc

    def _load(self, answer: tuple[str, dict[str, float]]) -> tuple[dict[str, Any], int]:
        """A range's result from the file a worker wrote (``read_range``), the file removed."""
        target, times = answer
        try:
            with timed(self.clock, "parallel: load results"):
                result: tuple[dict[str, Any], int] = load_result(target)
                os.unlink(target)
        except Exception as exc:  # as for a failed worker
            raise _SerialNeeded() from exc
        if self.clock is not None:
            self.clock.workers.append(times)
        return result

    def _report(self, done: int) -> None:
        if self.progress is not None:
            self.progress(min(done, self.total_bytes), self.total_bytes)

    def _merge(self, task: _RangeTask, result: tuple[dict[str, Any], int]) -> None:
        state, invalid_utf8 = result
        with timed(self.clock, "parallel: merge"):
            absorbed = absorb(self.parent, state)
        if absorbed:
            self.invalid_utf8 += invalid_utf8
            return
        # text pid/tid ids would differ from a serial parse's: read this range here, in order
        self._read_here(task)

    def _read_here(self, task: _RangeTask) -> None:
        """Read a range in this process, straight into the merged state (ranges come in order)."""
        blocks = _range_blocks(task)
        try:
            self.parent.read_range(iter(blocks), last=task.last, array_document=task.array_document,
                                   allocator_args=task.allocator_args, buffer=self.buffer)
        # as for a worker's range: the serial parse that follows gives the real result or error
        except Exception as exc:
            raise _SerialNeeded() from exc
        self.invalid_utf8 += blocks.invalid_utf8 if isinstance(blocks, Blocks) else 0

    def _parse_here(self, task: _RangeTask) -> tuple[dict[str, Any], int]:
        """A range parsed in this process with a reader of its own (merged later, in order)."""

        def publish(done: int, _total: int) -> None:
            if task.slot < len(self.shared):
                self.shared[task.slot] = done
            self._report(self.first + int(sum(self.shared)))

        try:
            return parse_range(task, publish, self.buffer)
        except Exception as exc:  # as for a worker's range
            raise _SerialNeeded() from exc


def remove_orphan_spools(root: str) -> list[str]:
    """Remove the spool folders under ``root`` whose parse died without cleaning up (killed by
    the OOM killer or SIGKILL: no ``finally`` runs), so that /dev/shm, which is RAM, does not
    fill up crash after crash. A folder is an orphan when the process id in its name
    (``SPOOL_PREFIX<pid>-``) no longer runs; a live id, even a reused one, keeps its folder.
    Returns the folders removed."""
    removed: list[str] = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        match = SPOOL_NAME.fullmatch(name)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        removed.append(name)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


# ---------------------------------------------------------------------- workers

_shared_progress: Any = None
#: plain files: the ranges no process has claimed yet (``claim_range``)
_claims: Any = None
#: a worker's read buffer, reused by the ranges it parses (``parse_range``); freed with the worker
_worker_buffer = bytearray()
#: the parse's hooks, as a worker gets them (``ParseHooks.for_worker``)
_worker_hooks: ParseHooks = NO_HOOKS


def _init_worker(shared: Any, claims: Any, hooks: ParseHooks) -> None:
    global _shared_progress, _claims, _worker_buffer, _worker_hooks
    _shared_progress = shared
    _claims = claims
    _worker_hooks = hooks
    _worker_buffer = bytearray()  # not the forked parent's
    if "pandas" not in sys.modules:
        arrow_without_pandas()


class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        del path, target  # the import system's arguments: only the name matters here
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError("pandas is not imported by a parse worker", name=name)
        return None


def arrow_without_pandas() -> None:
    """Make pyarrow in this process work as where pandas is not installed, without importing it.

    Why: a worker forked before its parent imported pandas (``traceview analyze`` imports it while
    the workers parse: ``ParseHooks.meanwhile``) would otherwise import it at its first
    ``pa.array`` (pyarrow asks whether the values are a pandas Series), ~0.25 s of its parse time
    for nothing: a range's numpy columns convert the same either way. pyarrow looks for pandas once
    per process and remembers the answer, so pandas is hidden for that one look only; this module's
    own ``import pandas`` (none on a range's path today) still works afterwards. A pyarrow that
    looked again would make the worker import pandas: slower, the same columns."""
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array(np.zeros(1, dtype=np.int8), mask=np.zeros(1, dtype=bool))
    finally:
        sys.meta_path.remove(finder)


def claim_range(claims: Any, *, from_end: bool = False) -> int | None:
    """The first (or last) range no process has claimed yet, now claimed; None when none is left.
    ``claims``: a shared ``[first, last]`` pair with a lock (``_Driver._pool``)."""
    with claims.get_lock():
        first, last = claims[0], claims[1]
        if first > last:
            return None
        if from_end:
            claims[1] = last - 1
            return int(last)
        claims[0] = first + 1
        return int(first)


def read_claimed_ranges(tasks: list[_RangeTask]) -> list[tuple[int, tuple[str, dict[str, float]]]]:
    """Worker: parse ranges claimed from the start of the file one at a time, until the parent,
    claiming from the end, has the rest: each range's answer (``read_range``) by its slot. Ranges
    are claimed as they are started, not queued: a range waiting in the pool's queue for this
    worker could not be taken by the parent, which then waited for it."""
    global _worker_buffer
    answers = []
    while (slot := claim_range(_claims)) is not None:
        answers.append((slot, read_range(tasks[slot])))
    # this worker's part is done, but it lives on while the parent builds the tables (it exits
    # when the parent's pool next gets the GIL): its read buffer and the heap the parse kept
    # (the heap hook's settings, inherited) are handed back now, not held through the parent's peak
    _worker_buffer = bytearray()
    _worker_hooks.release_memory()
    return answers


def read_range(task: _RangeTask) -> tuple[str, dict[str, float]]:
    """Worker: parse one range; writes the reader's accumulated state and the number of byte
    sequences replaced because they were not UTF-8 (pickled) into the spool folder and returns the
    file's path, and the worker's times (``PhaseClock.workers``). Not through the pool's pipe: the
    parent's pipe reader is a thread, which gets the GIL only between the parent's own parse steps,
    and a worker blocked writing a 15 MB result into a 64 KB pipe waits for it instead of parsing
    its next range."""
    shared, slot = _shared_progress, task.slot

    def publish(done: int, _total: int) -> None:
        if shared is not None and slot < len(shared):
            shared[slot] = done

    began_s, cpu_s, faults = time.monotonic(), time.process_time(), minor_page_faults()
    result = parse_range(task, publish, _worker_buffer)
    parsed_s, parsed_cpu_s, parsed_faults = time.monotonic(), time.process_time(), minor_page_faults()
    target = os.path.join(task.spool, f"{task.slot}.pickle")
    dump_result(result, target)
    times = {"slot": task.slot, "pid": os.getpid(), "began_s": began_s, "parse_s": parsed_s - began_s,
             "parse_cpu_s": parsed_cpu_s - cpu_s, "dump_s": time.monotonic() - parsed_s,
             "dump_cpu_s": time.process_time() - parsed_cpu_s, "bytes": task.end - task.begin,
             "parse_faults": parsed_faults - faults, "dump_faults": minor_page_faults() - parsed_faults}
    return target, times


#: A buffer at least this big gets a mapping of its own (``load_result``), at a page boundary.
OWN_MAPPING_BYTES = 64 * 1024


def dump_result(result: Any, target: str) -> None:
    """Write ``result`` for ``load_result``: pickle protocol 5 with the array buffers (nearly all
    of the bytes) out of band, after the pickle: the small ones first, each at a 64-byte boundary
    (Arrow's alignment), then the big ones (``OWN_MAPPING_BYTES``), each at a page boundary, so
    the parent maps them instead of copying them, each on its own (``load_result``)."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(result, protocol=5, buffer_callback=buffers.append)
    views = [buffer.raw() for buffer in buffers]  # contiguous bytes (numpy and Arrow buffers are)
    order = sorted(range(len(views)), key=lambda i: views[i].nbytes >= OWN_MAPPING_BYTES)  # small ones first
    offsets, position = [0] * len(views), _RESULT_HEADER.size + len(data)
    for i in order:
        position += -position % (mmap.ALLOCATIONGRANULARITY if views[i].nbytes >= OWN_MAPPING_BYTES else 64)
        offsets[i] = position
        position += views[i].nbytes
    table = pickle.dumps([(offset, view.nbytes) for offset, view in zip(offsets, views)], protocol=5)
    with open(target, "wb") as fh:
        fh.write(_RESULT_HEADER.pack(len(data), len(table)))
        fh.write(data)
        for i in order:
            fh.write(bytes(offsets[i] - fh.tell()))
            fh.write(views[i])
        fh.write(table)


def load_result(target: str) -> Any:
    """A result written by ``dump_result``, its buffers mapped from the file (copy-on-write:
    private and writable, without a copy of the bytes). Each big buffer has a mapping of its own,
    which lives as long as the arrays on it: the merged table frees a range's columns one by one
    as it is built (one mapping of the whole file held every column until the last was built:
    ~50 MB more at the parse's peak on the 141 MB benchmark trace with ``--jobs 2``); the small
    ones and the pickle share one."""
    with open(target, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            raise ValueError(f"{target} is empty")
        data_bytes, table_bytes = _RESULT_HEADER.unpack(os.pread(fh.fileno(), _RESULT_HEADER.size, 0))
        spans = pickle.loads(os.pread(fh.fileno(), table_bytes, size - table_bytes))
        big = [nbytes >= OWN_MAPPING_BYTES for _, nbytes in spans]
        small_end = max([_RESULT_HEADER.size + data_bytes] + [o + n for (o, n), b in zip(spans, big) if not b])
        head = memoryview(mmap.mmap(fh.fileno(), small_end, access=mmap.ACCESS_COPY))
        buffers = [memoryview(mmap.mmap(fh.fileno(), nbytes, access=mmap.ACCESS_COPY, offset=offset)) if is_big
                   else head[offset : offset + nbytes] for (offset, nbytes), is_big in zip(spans, big)]
    data = head[_RESULT_HEADER.size : _RESULT_HEADER.size + data_bytes]
    return pickle.loads(data, buffers=buffers)


def parse_range(task: _RangeTask, progress: ProgressFn, buffer: bytearray | None = None) -> tuple[dict[str, Any], int]:
    """Parse one range with a reader of its own (in a worker, or in the parent for its share);
    ``buffer``: the read buffer the process's ranges share (``_KinetoFile.read_range``)."""
    reader = kineto_reader(task.path, progress)
    blocks = _range_blocks(task)
    reader.read_range(iter(blocks), last=task.last, array_document=task.array_document,
                      allocator_args=task.allocator_args, buffer=buffer)
    state = {key: value for key, value in vars(reader).items() if key not in _NOT_STATE and not key.startswith("_")}
    return state, blocks.invalid_utf8 if isinstance(blocks, Blocks) else 0


def _head_blocks(raw: Any) -> Iterator[bytes]:
    """A plain file's blocks from its start, ``HEAD_BYTES`` first, each twice the last up to
    ``READ_BYTES``."""
    size = HEAD_BYTES
    while block := raw.read(size):
        yield block
        size = min(2 * size, READ_BYTES)


def _range_blocks(task: _RangeTask) -> Blocks | Iterator[bytes]:
    if task.text_file:  # already valid UTF-8 (repaired by the parent's stream)
        return _pread_blocks(Path(task.text_file), task.begin, task.end)
    return Blocks(_pread_blocks(task.path, task.begin, task.end))


def _pread_blocks(path: Path, begin: int, end: int) -> Iterator[bytes]:
    fd = os.open(path, os.O_RDONLY)
    try:
        position = begin
        while position < end:
            block = os.pread(fd, min(READ_BYTES, end - position), position)
            if not block:
                return
            position += len(block)
            yield block
    finally:
        os.close(fd)


# ---------------------------------------------------------------------- cutting


def plan_cuts(path: Path, first: int, size: int, n_ranges: int) -> list[int]:
    """File offsets where ranges 2..n start: the first event boundary at or after each of
    ``n_ranges - 1`` even cuts."""
    cuts: list[int] = []
    with open(path, "rb") as fh:
        for k in range(1, n_ranges):
            target = first + int((size - first) * (k / n_ranges))
            if cuts and target <= cuts[-1]:
                continue
            window = os.pread(fh.fileno(), BOUNDARY_WINDOW_BYTES, target)
            match = RANGE_START.search(window)
            if match is not None:
                cuts.append(target + match.start(1))
    return cuts


def _last_boundary(buf: bytearray) -> int | None:
    """Position in ``buf`` of the ``{`` of the last event boundary in its last window, or None."""
    search_from = max(0, len(buf) - BOUNDARY_WINDOW_BYTES)
    # positions only, and on a copy: a match object would lock ``buf`` against resizing
    starts = [m.start(1) for m in RANGE_START.finditer(bytes(buf[search_from:]))]
    return search_from + starts[-1] if starts else None


def _is_gzip(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == b"\x1f\x8b"
    except OSError:
        return False  # the serial parse says what is wrong


def _json_bytes(path: Path, gzip: bool) -> int:
    """The size of the JSON: the file's, or for gzip the size its trailer states (modulo 2**32;
    a file that compresses less than that says is taken at 8x its size)."""
    try:
        size = path.stat().st_size
        if not gzip or size < 18:
            return size
        with open(path, "rb") as fh:
            fh.seek(-4, os.SEEK_END)
            stated = int.from_bytes(fh.read(4), "little")
        return stated if stated >= size else size * 8
    except OSError:
        return 0


# ---------------------------------------------------------------------- merging


def absorb(parent: Any, state: dict[str, Any]) -> bool:
    """Merge one range's reader state (``read_range``) into ``parent``, the reader of the ranges
    before it. Returns False, changing nothing, when the range's text pid/tid ids differ from
    those a serial parse gives (the caller reads the range itself)."""
    new_ids = _text_ids_in_order(parent.string_ids, state["string_ids"])
    if new_ids is None:
        return False
    parent.string_ids.update(new_ids)
    memo_type = type(parent.ph_memo)
    lookups = {key: _lookup(getattr(parent, key), value) for key, value in state.items()
               if isinstance(value, memo_type)}
    offsets = {"row": parent.n_rows, "seq": parent.counts.get("events_read", 0)}
    for key, value in state.items():
        if key in lookups or key == "string_ids":
            continue
        current = getattr(parent, key)
        if key == "tail":  # the metadata after the array: only the last range has any
            parent.tail = value or parent.tail
        elif key == "columns":
            for column, parts in value.items():
                memo = _CODE_COLUMNS.get((key, column))
                current.setdefault(column, []).extend([_recode(lookups[memo], p) for p in parts] if memo else parts)
        elif isinstance(value, list):
            current.extend(_shift(part, key, offsets, lookups) if isinstance(part, dict) else part for part in value)
        elif isinstance(value, dict) and all(isinstance(v, int) for v in value.values()):
            for name, count in value.items():
                current[name] = current.get(name, 0) + count
        elif isinstance(value, dict):
            current.update(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            setattr(parent, key, current + value)
    return True


def _shift(part: dict[str, np.ndarray], key: str, offsets: dict[str, int],
           lookups: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One per-chunk dict of a range in the whole file's numbering."""
    out = {}
    for column, values in part.items():
        memo = _CODE_COLUMNS.get((key, column))
        if memo is not None:
            values = _recode(lookups[memo], values)
        elif column in offsets:
            values = values + offsets[column]
        out[column] = values
    return out


def _recode(lookup: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """A range's codes in the whole file's memo; -1 (absent: op input columns) stays -1."""
    if len(codes) == 0 or codes.min() >= 0:
        return lookup[codes]
    return np.append(lookup, -1).astype(np.int32)[codes]  # -1 picks the appended -1


def _lookup(parent_memo: Any, memo: Any) -> np.ndarray:
    """Range code -> whole-file code: the range's strings, in their order, fed to the parent's memo."""
    return np.asarray(parent_memo.codes(iter(memo.values()), len(memo)), dtype=np.int32)


def _text_ids_in_order(known: dict[str, int], ranged: dict[str, int]) -> dict[str, int] | None:
    """The ids the range's pid/tid texts get in a serial parse (assigned on first sight after
    ``known``), or None when they differ from those the range used."""
    new: dict[str, int] = {}
    for text, used in ranged.items():
        serial = known.get(text, new.get(text))
        if serial is None:
            serial = new[text] = -2 - len(known) - len(new)
        if serial != used:
            return None
    return new
