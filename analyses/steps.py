"""Steps and the per-trace GPU activity context that the time-based analyses share.

Steps: Kineto ``ProfilerStep#N``; for Nsight, NVTX ranges chosen by a step-marker regex
(``Options.step_marker``, default ``traceview.model.DEFAULT_STEP_MARKER``). Every figure exists for
the whole trace and per step.

Each GPU activity is assigned to a step via its launch call (the step whose CPU range contains the
launch call's start), falling back to the step range containing the activity's start; per-step GPU
window = first start .. last end of that step's activity. Activity in no step has step ``-1``
(``NO_STEP``) and counts only in the whole-trace figures.

:func:`activity` computes, once per trace and options, the arrays the temporal, idle-gap and
launch-overhead analyses all need (it is cached on the trace object, by identity).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from traceview.findings import Options
from traceview.model import Trace

from . import classify
from traceview import intervals as iv

NO_STEP = -1


@dataclass
class StepTable:
    """Steps of the selected ranks, sorted by rank then start."""

    rank: np.ndarray
    step: np.ndarray
    name: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return int(self.rank.size)

    def counts(self) -> dict[int, int]:
        """Number of steps per rank."""
        ranks, counts = np.unique(self.rank, return_counts=True)
        return {int(r): int(c) for r, c in zip(ranks, counts)}

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {"rank": self.rank, "step": self.step, "name": self.name, "start_ns": self.start, "end_ns": self.end}
        )


def step_table(trace: Trace, options: Options) -> StepTable:
    """The steps (``Options.step_marker`` or the parser's), limited to ``Options.ranks``."""
    table = trace.find_steps(options.step_marker)
    rank = table.column("rank").to_numpy().astype(np.int64)
    step = table.column("step").to_numpy().astype(np.int64)
    name = np.asarray(table.column("name").to_pylist(), dtype=object)
    start = table.column("start_ns").to_numpy().astype(np.int64)
    end = table.column("end_ns").to_numpy().astype(np.int64)
    keep = np.ones(rank.size, dtype=bool) if options.ranks is None else np.isin(rank, list(options.ranks))
    sel = np.flatnonzero(keep)
    sel = sel[np.lexsort((start[sel], rank[sel]))]
    return StepTable(rank[sel], step[sel], name[sel], start[sel], end[sel])


def assign_to_steps(steps: StepTable, rank: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Step number of the step (of the same rank) whose range contains ``t``; ``NO_STEP`` else.

    Ranges are half-open ``[start, end)``; if steps overlap, the one that started last wins.
    """
    rank = np.asarray(rank, dtype=np.int64)
    out = np.full(rank.size, NO_STEP, dtype=np.int64)
    if len(steps) == 0 or rank.size == 0:
        return out
    hit = iv.innermost_covering(steps.rank, steps.start, steps.end, rank, t, np.asarray(t) + 1)
    ok = hit >= 0
    out[ok] = steps.step[hit[ok]]
    return out


@dataclass
class Activity:
    """GPU activity (kernel, memcpy, memset) of the selected ranks, one entry per event.

    ``api_*`` describe the launch call (from the launch link), ``-1`` when there is none.
    """

    row: np.ndarray  # row in trace.events
    rank: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    kind: np.ndarray
    cls: np.ndarray  # classify.COMPUTE / COMMUNICATION / MEMORY
    start: np.ndarray
    end: np.ndarray
    api_row: np.ndarray
    api_start: np.ndarray
    api_end: np.ndarray
    step: np.ndarray  # step number or NO_STEP
    steps: StepTable

    def __len__(self) -> int:
        return int(self.row.size)

    @property
    def has_steps(self) -> bool:
        return len(self.steps) > 0


_CACHE: dict[tuple[int, str, Any], tuple[weakref.ref, Any]] = {}


def cached(trace: Trace, name: str, options: Options, fn: Callable[[], Any]) -> Any:
    """Compute ``fn()`` once per (trace object, name, options)."""
    key = (id(trace), name, dataclasses.astuple(options))
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is trace:
        return hit[1]
    value = fn()
    for k in [k for k, (ref, _) in _CACHE.items() if ref() is None]:
        del _CACHE[k]
    _CACHE[key] = (weakref.ref(trace), value)
    return value


def clear_cache() -> None:
    """Forget every cached per-trace result (benchmarks call this between timed runs)."""
    _CACHE.clear()


def activity(trace: Trace, options: Options) -> Activity:
    """The shared activity context (cached)."""
    return cached(trace, "activity", options, lambda: _build_activity(trace, options))


def _build_activity(trace: Trace, options: Options) -> Activity:
    cls_all = classify.activity_class(trace)
    rank_all = trace.column("rank").astype(np.int64)
    keep = cls_all != classify.NONE
    if options.ranks is not None:
        keep &= np.isin(rank_all, list(options.ranks))
    rows = np.flatnonzero(keep)
    start_all = trace.column("start_ns")
    dur_all = trace.column("dur_ns")
    start = start_all[rows]
    end = start + np.maximum(dur_all[rows], 0)

    # launch call of each activity (a GPU row has at most one launch call; keep the first)
    api_of = np.full(trace.num_events, -1, dtype=np.int64)
    api_rows, gpu_rows = trace.launch_links()
    if api_rows.size:
        rev = slice(None, None, -1)  # assign in reverse so the first link wins
        api_of[gpu_rows[rev]] = api_rows[rev]
    api_row = api_of[rows]
    has_api = api_row >= 0
    safe = np.where(has_api, api_row, 0)
    api_start = np.where(has_api, start_all[safe], -1)
    api_end = np.where(has_api, start_all[safe] + np.maximum(dur_all[safe], 0), -1)

    steps = step_table(trace, options)
    rank = rank_all[rows]
    step = np.full(rows.size, NO_STEP, dtype=np.int64)
    if len(steps):
        step[has_api] = assign_to_steps(steps, rank[has_api], api_start[has_api])
        missing = step == NO_STEP
        step[missing] = assign_to_steps(steps, rank[missing], start[missing])

    return Activity(
        row=rows,
        rank=rank,
        device=trace.column("device")[rows].astype(np.int64),
        stream=trace.column("stream")[rows].astype(np.int64),
        kind=trace.kind_codes()[rows],
        cls=cls_all[rows],
        start=start,
        end=end,
        api_row=api_row,
        api_start=api_start,
        api_end=api_end,
        step=step,
        steps=steps,
    )


def per_step(total: int, steps: int) -> int:
    """A whole-trace cost spread over the steps (the cost itself when there are no steps)."""
    return int(round(total / steps)) if steps > 0 else int(total)


def step_column(steps: np.ndarray | pd.Series) -> pd.arrays.IntegerArray:
    """Step numbers for output tables: nullable Int64, missing (``<NA>``) for the whole-trace rows."""
    values = np.array(steps, dtype=np.int64)  # a copy: the result must not share memory with the input
    return pd.arrays.IntegerArray(values, values == NO_STEP)


__all__ = [
    "NO_STEP",
    "Activity",
    "StepTable",
    "activity",
    "assign_to_steps",
    "cached",
    "clear_cache",
    "per_step",
    "step_column",
    "step_table",
]
