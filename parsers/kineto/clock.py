"""Timing the phases of a parse (``PhaseClock``; benchmarks/bench_load.py ``--phases``).
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator


class PhaseClock:
    """Wall and CPU seconds per named phase of one parse, for the benchmarks' breakdown
    (``benchmarks/bench_load.py --phases``). CPU is ``time.thread_time``, the CPU time of the
    thread the phase ran in, so on a busy machine it says what the phase costs, where wall time
    says how long it waited for a core too (and the phases of a helper thread, marked so, are
    not counted in those of the thread beside it). Page faults too (``minor_page_faults``):
    memory touched for the first time costs ~2 us a 4 KiB page on the 2-core benchmark machine,
    and a parallel parse's build faults in far more of it than a serial one (benchmarks/README.md,
    eighth pass). ``workers``: one record per range a worker process parsed
    (``parallel.read_range``)."""

    def __init__(self) -> None:
        self.phases: dict[str, list[float]] = {}  # name -> [wall s, CPU s, times entered, page faults]
        self.workers: list[dict[str, float]] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        wall_s, cpu_s, faults = time.perf_counter(), time.thread_time(), minor_page_faults(thread=True)
        try:
            yield
        finally:
            entry = self.phases.setdefault(name, [0.0, 0.0, 0, 0])
            entry[0] += time.perf_counter() - wall_s
            entry[1] += time.thread_time() - cpu_s
            entry[2] += 1
            entry[3] += minor_page_faults(thread=True) - faults


def minor_page_faults(thread: bool = False) -> int:
    """Page faults served without I/O so far (mostly fresh memory touched for the first time), of
    this process, or of the calling thread where the system counts per thread (Linux); 0 where
    there is no ``resource`` module (Windows)."""
    try:
        import resource
    except ImportError:
        return 0
    who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF) if thread else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_minflt


def timed(clock: PhaseClock | None, name: str) -> contextlib.AbstractContextManager[None]:
    """``clock.phase(name)``, or nothing to time."""
    return contextlib.nullcontext() if clock is None else clock.phase(name)
