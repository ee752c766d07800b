"""Filters shared by every page (ranks, steps, time range) and the filtered trace they select.

A filter selects *events*; the analyses then run on the selected events as on any trace, so every
figure the app shows still comes from the analysis modules:

* ranks: the events of those ranks (and ``Options.ranks``);
* steps ``[first, last]``: GPU activity whose step (as the analyses assign it: the step of its
  launch call, ``traceview.analyses.steps.activity``) is in the range, and every other event whose
  start lies in one of those steps' CPU ranges;
* time range ``[t0, t1)`` (ns since the run's first event): the events that start in it.

Links whose two ends are both kept are kept (row indices renumbered).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from traceview.findings import Options
from traceview.model import Trace


@dataclass(frozen=True)
class StepInfo:
    """What the filter controls need to know about a run (computed once per run)."""

    origin_ns: int  # first event start: time 0 of the app's time axes
    end_ns: int  # last event end
    ranks: tuple[int, ...]
    steps: tuple[int, ...]  # distinct step numbers, sorted
    step_start_ns: tuple[int, ...]  # per step number: earliest CPU start over ranks (absolute)
    step_end_ns: tuple[int, ...]  # per step number: latest CPU end over ranks (absolute)

    @property
    def span_ns(self) -> int:
        return max(0, self.end_ns - self.origin_ns)

    def step_range_ns(self, first: int, last: int) -> tuple[int, int] | None:
        """Absolute CPU range covering steps ``first..last`` (None when there are none)."""
        idx = [i for i, s in enumerate(self.steps) if first <= s <= last]
        if not idx:
            return None
        return min(self.step_start_ns[i] for i in idx), max(self.step_end_ns[i] for i in idx)


def step_info(trace: Trace, step_marker: str | None = None) -> StepInfo:
    from traceview.analyses import steps as steps_mod

    if trace.num_events:
        start = trace.column("start_ns")
        end = start + trace.column("dur_ns")
        origin, last = int(start.min()), int(end.max())
    else:
        origin = last = 0
    table = steps_mod.step_table(trace, Options(step_marker=step_marker))
    numbers = sorted({int(s) for s in table.step})
    first: dict[int, int] = {}
    final: dict[int, int] = {}
    for n, s, e in zip(table.step.tolist(), table.start.tolist(), table.end.tolist()):
        first[n] = min(first.get(n, s), s)
        final[n] = max(final.get(n, e), e)
    return StepInfo(
        origin_ns=origin, end_ns=last, ranks=tuple(trace.rank_ids), steps=tuple(numbers),
        step_start_ns=tuple(int(first[n]) for n in numbers), step_end_ns=tuple(int(final[n]) for n in numbers),
    )


@dataclass(frozen=True)
class Filters:
    """The filters of the app's header. ``None`` means "all"."""

    ranks: tuple[int, ...] | None = None
    steps: tuple[int, int] | None = None  # first and last step number, inclusive
    time_ns: tuple[int, int] | None = None  # [t0, t1) in ns since the run's first event

    @property
    def active(self) -> bool:
        return self.ranks is not None or self.steps is not None or self.time_ns is not None

    def normalized(self, info: StepInfo) -> "Filters":
        """Clamped to what the run has; a filter that selects everything becomes ``None`` (so equal
        selections share one cache entry)."""
        ranks = None
        if self.ranks is not None:
            chosen = tuple(sorted({int(r) for r in self.ranks if int(r) in info.ranks}))
            ranks = chosen if chosen and chosen != info.ranks else None
        steps = None
        if self.steps is not None and info.steps:
            lo, hi = sorted(int(s) for s in self.steps)
            lo, hi = max(lo, info.steps[0]), min(hi, info.steps[-1])
            if lo <= hi and (lo, hi) != (info.steps[0], info.steps[-1]):
                steps = (lo, hi)
        time_ns = None
        if self.time_ns is not None:
            t0, t1 = (int(t) for t in self.time_ns)
            t0, t1 = max(0, t0), min(info.span_ns, t1)
            if t1 > t0 and (t0, t1) != (0, info.span_ns):
                time_ns = (t0, t1)
        return Filters(ranks=ranks, steps=steps, time_ns=time_ns)

    def describe(self) -> str:
        parts = []
        if self.ranks is not None:
            parts.append("ranks " + ", ".join(str(r) for r in self.ranks))
        if self.steps is not None:
            parts.append(f"steps {self.steps[0]}-{self.steps[1]}" if self.steps[0] != self.steps[1]
                         else f"step {self.steps[0]}")
        if self.time_ns is not None:
            parts.append(f"{self.time_ns[0] / 1e6:.3f}-{self.time_ns[1] / 1e6:.3f} ms")
        return "; ".join(parts) if parts else "whole run"

    # ------------------------------------------------------------------ from the browser
    @classmethod
    def from_controls(cls, ranks: Any, steps: Any, t0_ms: Any, t1_ms: Any) -> "Filters":
        """Build from the header controls' values, ignoring each control whose value is unusable
        (callbacks use :func:`traceview.app.validate.filters`, which says what was wrong instead)."""
        from . import validate  # validate builds Filters: imported here, not at the top

        def lenient(fn: Any, *args: Any) -> Any:
            try:
                return fn(*args)
            except validate.BadValue:
                return None

        time = lenient(validate.filters, None, None, t0_ms, t1_ms)
        if time is None:  # one end unusable: keep the other, as a typed-in half range
            time = (lenient(validate.filters, None, None, t0_ms, None)
                    or lenient(validate.filters, None, None, None, t1_ms) or cls())
        return cls(ranks=lenient(validate.ranks, ranks), steps=lenient(validate.steps, steps), time_ns=time.time_ns)


def event_mask(trace: Trace, filters: Filters, info: StepInfo, step_marker: str | None = None) -> np.ndarray:
    """Boolean per event of ``trace``: selected by ``filters``."""
    n = trace.num_events
    keep = np.ones(n, dtype=bool)
    if n == 0:
        return keep
    rank = trace.column("rank")
    start = trace.column("start_ns")
    if filters.ranks is not None:
        keep &= np.isin(rank, np.asarray(filters.ranks, dtype=rank.dtype))
    if filters.time_ns is not None:
        t0, t1 = filters.time_ns
        keep &= (start >= info.origin_ns + t0) & (start < info.origin_ns + t1)
    if filters.steps is not None:
        from traceview.analyses import steps as steps_mod

        from traceview.context import AnalysisContext

        act = steps_mod.activity(AnalysisContext(trace, Options(step_marker=step_marker)))
        step_of = steps_mod.assign_to_steps(act.steps, rank.astype(np.int64), start)
        step_of[act.row] = act.step  # GPU activity: the step of its launch call
        lo, hi = filters.steps
        keep &= (step_of >= lo) & (step_of <= hi) & (step_of != steps_mod.NO_STEP)
    return keep


def subset_trace(trace: Trace, filters: Filters, info: StepInfo, step_marker: str | None = None) -> Trace:
    """The trace restricted to the events ``filters`` select (the trace itself when none)."""
    if not filters.active:
        return trace
    keep = event_mask(trace, filters, info, step_marker)
    if keep.all():
        return trace
    events = trace.events.filter(pa.array(keep))
    new_row = np.cumsum(keep, dtype=np.int64) - 1
    links = trace.links
    if links.num_rows:
        src = links.column("src_row").to_numpy()
        dst = links.column("dst_row").to_numpy()
        ok = keep[src] & keep[dst]
        links = links.filter(pa.array(ok))
        links = links.set_column(3, links.schema.field("src_row"), pa.array(new_row[src[ok]]))
        links = links.set_column(4, links.schema.field("dst_row"), pa.array(new_row[dst[ok]]))
    steps = trace.steps
    if steps.num_rows:
        srank = steps.column("rank").to_numpy()
        snum = steps.column("step").to_numpy()
        sstart = steps.column("start_ns").to_numpy()
        sk = np.ones(steps.num_rows, dtype=bool)
        if filters.ranks is not None:
            sk &= np.isin(srank, np.asarray(filters.ranks, dtype=srank.dtype))
        if filters.steps is not None:
            sk &= (snum >= filters.steps[0]) & (snum <= filters.steps[1])
        if filters.time_ns is not None:
            sk &= (sstart >= info.origin_ns + filters.time_ns[0]) & (sstart < info.origin_ns + filters.time_ns[1])
        steps = steps.filter(pa.array(sk))
    ranks = trace.ranks if filters.ranks is None else {r: i for r, i in trace.ranks.items() if r in filters.ranks}
    return Trace(events=events, links=links, ranks=ranks, steps=steps, warnings=list(trace.warnings),
                 memory=_subset_memory(trace.memory, filters, info),
                 counters=_subset_memory(trace.counters, filters, info))


def _subset_memory(memory: pa.Table, filters: Filters, info: StepInfo) -> pa.Table:
    """The ``[memory]`` (or counter) rows of the selected ranks and time range (steps select by time:
    their rows stay, the memory analysis assigns them to steps); any table with ``rank`` and ``ts_ns``."""
    if memory.num_rows == 0:
        return memory
    keep = np.ones(memory.num_rows, dtype=bool)
    if filters.ranks is not None:
        rank = memory.column("rank").to_numpy()
        keep &= np.isin(rank, np.asarray(filters.ranks, dtype=rank.dtype))
    if filters.time_ns is not None:
        ts = memory.column("ts_ns").to_numpy()
        keep &= (ts >= info.origin_ns + filters.time_ns[0]) & (ts < info.origin_ns + filters.time_ns[1])
    return memory if keep.all() else memory.filter(pa.array(keep))
