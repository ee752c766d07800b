"""The ``traceview`` command's process: every process-wide setting traceview makes, in one place.

Only the command line uses this module (``traceview.cli`` and its commands, ``traceview.commands``;
``tests/test_runtime_isolation.py`` checks that nothing else imports it). ``traceview.load`` and
``traceview.analyze`` called from Python change none of this: a notebook's allocator, collector and
exit stay its own. What is here, and why each pays in a command's process:

* glibc's heap tuned around a parse (:func:`parse_heap`, ``mallopt``) and its free pages handed
  back after it (:func:`release_free_memory`, ``malloc_trim``): the loader gets them as
  :class:`traceview.parsing.ParseHooks` (:func:`cli_parse_hooks`), passed by the command;
* Arrow buffers from the system allocator (:func:`prefer_system_memory_pool`);
* the cyclic collector frozen over the command's long-lived objects and paused while it imports
  (:func:`quiet_collector`, :func:`collector_paused`);
* the exit that skips the interpreter's teardown (:func:`exit_process`).

The command's imports while the parse workers run ("meanwhile") are the command's own work, handed
to the load as an argument (``traceview.load(..., hooks=cli_parse_hooks(meanwhile=work))``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import os
import sys
import threading
from typing import Callable, Iterator

from traceview.parsing import ParseHooks, do_nothing

# ------------------------------------------------------------------------------------ the C heap


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


def release_free_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing elsewhere).

    Why: glibc keeps memory that was freed inside its heap, so a parse's transient objects (1.3 M
    decoded events) and an analysis's temporaries stay resident and the next step's allocations do
    not reuse all of it: on the 141 MB benchmark trace the heap held ~90 MB of free pages after the
    parse. The command calls this after the load (a parse hook) and the Nsight parser between its
    phases; not between analyses: each reuses the free pages the one before left, where a trim
    would make it fault them in again. A trim costs about a millisecond."""
    trim = libc_function("malloc_trim")
    if trim is not None:
        trim(0)


#: glibc's ``mallopt`` parameters (malloc.h) that :func:`parse_heap` sets.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -2, -3, -8
#: While a parse runs (:func:`parse_heap`): blocks below 32 MiB come from the heap, nothing is
#: handed back to the system before 1 GiB lies free at its top, the heap grows 64 MiB at a time,
#: and threads allocate from the one heap (:func:`parse_heap` says why).
PARSE_HEAP_SETTINGS = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 1 << 30, M_TOP_PAD: 64 << 20, M_ARENA_MAX: 1}
#: After it: the ceilings glibc's own sliding thresholds reach once big blocks have been freed (as
#: they have by the end of any big parse; setting one value stops that sliding, so all three are
#: set), and the documented default padding.
AFTER_PARSE_HEAP_SETTINGS = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 64 << 20, M_TOP_PAD: 128 << 10}


class _HeapState:
    """Parses running now (threads of a command may run several) under the settings, and the lock
    that counts them; a forked child gets a lock of its own (the parent's may have been held by
    another thread)."""

    depth = 0
    lock = threading.Lock()

    @classmethod
    def renew_lock(cls) -> None:
        cls.lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_HeapState.renew_lock)


@contextlib.contextmanager
def parse_heap() -> Iterator[None]:
    """Within this block the C heap keeps what a parse frees for the parse's next allocations
    (glibc's ``mallopt``; nothing elsewhere); on leaving it, glibc's own ceilings are set.

    Why: a parse allocates and frees columns of a few MB chunk after chunk. With glibc's sliding
    thresholds those blocks start out as mappings of their own and the heap's top is handed back
    whenever it is free, so the next chunk faults the same amount of fresh pages in again. Each
    process of a parallel parse (forked with this setting) starts that over: on the 141 MB
    benchmark trace ``--jobs 2`` took 0.355 s with glibc's defaults and 0.287 s with these (fresh
    processes, medians of 7; ``--jobs 1`` 0.423 -> 0.412 s; benchmarks/README.md, seventh pass).
    The command trims after the parse (:func:`release_free_memory`), which hands back what lies
    free in the main heap whatever the thresholds; not the free top of a thread's own heap (an
    "arena"), which glibc shrinks only in ``free`` and only past the trim threshold. So threads
    share the main heap (``M_ARENA_MAX`` 1): else the parallel parse's CPU-op-links thread kept
    ~22 MB in its arena, in about half the runs, through the whole analysis (``traceview analyze
    --jobs 2`` peaked at 274-279 MB PSS against 245-256). glibc fixes the arena limit the first
    time a thread asks for an arena, for the life of the process: that one setting is not undone
    (Python's GIL serialises most of its threads' allocations), which is one reason this belongs
    to the command's process only. Nested or concurrent blocks (a parallel parse falling back to a
    serial one, parses in threads) set on entering the first and restore on leaving the last.
    ``TRACEVIEW_PARSE_HEAP=0`` leaves glibc's settings alone (benchmarks compare both)."""
    mallopt = libc_function("mallopt") if os.environ.get("TRACEVIEW_PARSE_HEAP", "").strip() != "0" else None
    with _HeapState.lock:
        _HeapState.depth += 1
        if mallopt is not None and _HeapState.depth == 1:
            for parameter, value in PARSE_HEAP_SETTINGS.items():
                mallopt(parameter, value)
    try:
        yield
    finally:
        with _HeapState.lock:
            _HeapState.depth -= 1
            if mallopt is not None and _HeapState.depth == 0:
                for parameter, value in AFTER_PARSE_HEAP_SETTINGS.items():
                    mallopt(parameter, value)


def cli_parse_hooks(meanwhile: Callable[[], None] | None = None) -> ParseHooks:
    """The hooks a command's loads run with: the heap settings around each parse, its free pages
    handed back after, and ``meanwhile`` (the command's own work) while the parse workers run."""
    return ParseHooks(heap=parse_heap, release_memory=release_free_memory, meanwhile=meanwhile or do_nothing)


def prefer_system_memory_pool() -> None:
    """Give Arrow buffers the system allocator in command processes, unless the user chose a pool
    (``ARROW_DEFAULT_MEMORY_POOL``). pyarrow's default, mimalloc, keeps freed memory for reuse, so a
    parse's transient columns stayed resident through the analyses: the peak memory of an
    ``analyze`` of the 141 MB benchmark trace fell by about 50 MB with the system pool at the same
    speed (benchmarks/README.md, "Peak memory"). Only the commands set it: a library user's process
    keeps the pool its owner chose."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


# ------------------------------------------------------------------------------------ the collector

#: whether this process freezes the collector at exit (registered once, by :func:`quiet_collector`)
_FREEZE_AT_EXIT: list[bool] = []


@contextlib.contextmanager
def quiet_collector() -> Iterator[None]:
    """The block runs with the objects alive at its start (imported modules, classes, functions:
    none of them garbage) in the cyclic collector's permanent generation, and the collector paused
    while the command's imports run (:func:`collector_paused`); afterwards it is as before.

    Why: an ``analyze`` of the 141 MB benchmark trace imports ~80k long-lived objects (pandas,
    pyarrow, the analyses) that the collector walked ~200 times while they were imported and at
    every later full collection, and interpreter exit ran its own collections over everything
    alive: 0.1-0.4 s of wall time in all on a loaded 2-core machine, for no garbage found (see
    benchmarks/bench_e2e.py). The exit one is avoided by freezing again at exit (registered once
    per process; a frozen object is still freed by its reference count, only cycles wait)."""
    if not _FREEZE_AT_EXIT:
        atexit.register(gc.freeze)
        _FREEZE_AT_EXIT.append(True)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()  # a test calling a command in its own process gets its collector back as it was


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector paused through the block (meant for imports: nothing they make is
    garbage), then what the block made frozen with the rest (see :func:`quiet_collector`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


# ------------------------------------------------------------------------------------ exit


def exit_process(code: int) -> None:
    """End the command's process with ``code``: standard output and error flushed, the exit
    handlers run (``atexit``: logging, multiprocessing, the collector's freeze), then an exit that
    skips the interpreter's teardown.

    Why: tearing down an ``analyze`` process (clearing ~1,500 modules, freeing every table and
    report object one by one) took ~25 ms of its 1.8 s on the 141 MB benchmark trace, for memory
    the system takes back at once anyway (benchmarks/README.md, issue 12, sixth pass). Everything
    traceview writes is closed before the command returns. Elsewhere than CPython: a normal exit."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (traceview analyze ... | head): nothing more to say
            pass
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's; elsewhere a normal exit
    if run_exit_handlers is None:
        raise SystemExit(code)
    run_exit_handlers()
    os._exit(code)
