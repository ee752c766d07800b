"""Memory: what the caching allocator held, per rank and device, from Kineto's ``[memory]`` events.

Definitions (docs/metrics.md, "Memory"); sizes in bytes, times int64 ns. The input is
``Trace.memory`` (one row per allocation or free, docs/schema.md); a *device* is a (rank, device
type, device id): CPU memory (device type 0, device -1) is kept in rows of its own and never judged.

- ``allocated`` after an event = the allocator's ``Total Allocated`` counter it carries; ``reserved``
  = its ``Total Reserved``. Traces from before PyTorch 1.10 carry neither: there ``allocated`` is the
  net bytes allocated since the device's first event in the trace (the cumulative sum of ``Bytes``;
  the level before the trace is unknown), reserved figures are missing, and ``totals`` says
  ``net since trace start`` instead of ``allocator``. CPU memory has no reserve (Kineto writes 0):
  its reserved figures are missing too.
- Events are ordered by time (ties: source order); a device's level between two events is the one
  after the earlier event.
- ``peak_allocated_bytes`` = the highest allocated level; the peak event is the first event that
  reached it. ``reserved_at_peak_bytes`` = reserved at that event; ``unused_reserved_at_peak_bytes`` =
  reserved - allocated there (cached by the allocator but holding no tensor at the busiest moment);
  ``peak_reserved_bytes`` = the highest reserved level.
- ``peak_at_ns`` = when the peak was reached, ns after the rank's first event (trace or memory).
- ``cpu_op`` / ``cpu_op_row`` = the innermost CPU op (kind ``cpu_op``) on the allocating thread
  (same rank, pid and tid) with start <= the peak event's time <= end; none when the allocation
  happened outside any op.
- ``allocations`` / ``frees`` = events with ``Bytes`` > 0 / < 0; ``allocated_bytes`` /
  ``freed_bytes`` = the sum of their sizes.
- ``reserve_increases`` / ``reserve_decreases`` = events after which reserved is above / below the
  device's previous event: the allocator reserved (cudaMalloc) / released (cudaFree) memory there.
- ``fragmented_reservations`` = reserved grew at an allocation of at least 1 MiB although the memory
  the allocator held unused just before (reserved - allocated at the previous event) was at least
  the request: no cached block fitted, so the allocator reserved more (the signature of
  fragmentation; requests under 1 MiB are left out because they come from a separate small-block
  pool).
- Per step (steps of ``analyses/steps.py``): an event belongs to the step whose CPU range holds its
  time. Counts and sums are over the step's events; the peak is the highest level in force during
  the step, which includes the level carried in from the device's last event before the step
  (``peak_at_ns`` is then the step's start, and ``cpu_op`` the op of the event that set the level).
  One row per rank, device and step, plus a ``step`` = None row for the whole trace.

Findings (they cost no GPU time: ``claims`` None, severity "low"), on GPU devices with allocator
totals, whole trace:

- ``memory_fragmentation``: at the allocation peak ``unused_reserved_at_peak_bytes`` >= 1 GiB and
  ``reserved_at_peak_bytes`` >= 1.5 x ``peak_allocated_bytes``, and either the allocator made at
  least one fragmented reservation in the trace, or the reserved memory at the peak is >= 80% of the
  GPU's memory (deviceProperties). A large unused reserve that neither grew by fragmentation in the
  window nor crowds the GPU is left alone: it may come from an earlier, larger phase, and costs
  nothing while memory is plentiful.
- ``allocation_churn``: the rank has at least 2 steps and in every one of them the allocator both
  released and reserved memory (``reserve_decreases`` >= 1 and ``reserve_increases`` >= 1 in each
  step): cudaFree and cudaMalloc, which synchronise the device, every step instead of reusing its
  cache (``torch.cuda.empty_cache()`` in the loop, or frees to retry allocations under memory
  pressure). A reserve that only grows is growth (or fragmentation, above), not churn; allocating and
  freeing tensors every step is what the caching allocator is for and is not judged; traces without
  steps are not judged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceview import intervals as iv
from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult, Finding
from traceview.model import Trace, join_on_keys
from traceview.registry import AnalysisSpec, TableSpec, register_input
from traceview.units import fmt_bytes

from .steps import NO_STEP, StepTable, cpu_op_nesting, step_column, step_table

NAME = "memory"

MIB = 1 << 20
GIB = 1 << 30
#: memory_fragmentation: unused reserve at the peak, its ratio, and the share of the GPU's memory
FRAGMENTATION_MIN_UNUSED_BYTES = GIB
FRAGMENTATION_MIN_RATIO = 1.5
FRAGMENTATION_DEVICE_SHARE = 0.8
#: requests from this size come from the allocator's large-block pool (smaller ones: 2 MiB segments)
LARGE_REQUEST_BYTES = MIB
#: allocation_churn needs at least this many steps
CHURN_MIN_STEPS = 2

CPU_DEVICE_TYPE = 0
#: PyTorch's c10::DeviceType codes, as Kineto writes them in ``Device Type``
DEVICE_TYPE_NAMES = {0: "cpu", 1: "cuda", 6: "hip", 9: "xla", 12: "xpu", 13: "mps", 15: "hpu", 19: "mtia",
                     20: "privateuse1"}
ALLOCATOR_TOTALS = "allocator"
NET_TOTALS = "net since trace start"

COLUMNS = {
    "rank": "int64", "device_type": "object", "device": "int64", "step": "Int64", "events": "int64",
    "allocations": "int64", "frees": "int64", "allocated_bytes": "int64", "freed_bytes": "int64",
    "peak_allocated_bytes": "int64", "reserved_at_peak_bytes": "Int64", "unused_reserved_at_peak_bytes": "Int64",
    "peak_reserved_bytes": "Int64", "peak_at_ns": "int64", "cpu_op": "object", "cpu_op_row": "int64",
    "reserve_increases": "int64", "reserve_decreases": "int64", "fragmented_reservations": "int64",
    "totals": "object",
}


@dataclass
class MemoryEvents:
    """Allocator events of the selected ranks, sorted by device (rank, type, id), time, source order.

    ``group`` is the dense device code (``group_*`` its key); ``reserved`` is -1 where unknown."""

    group: np.ndarray
    group_rank: np.ndarray
    group_type: np.ndarray
    group_device: np.ndarray
    group_known: np.ndarray  # the device's events carry the allocator's totals
    group_reserved: np.ndarray  # ... and it has a reserve (not CPU memory, whose reserve Kineto writes as 0)
    rank: np.ndarray
    ts: np.ndarray
    nbytes: np.ndarray
    level: np.ndarray
    reserved: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    reserve_increase: np.ndarray
    reserve_decrease: np.ndarray
    fragmented: np.ndarray

    def __len__(self) -> int:
        return int(self.ts.size)


def _column(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if col.null_count:
        col = pc.fill_null(col, -1)
    return col.to_numpy().astype(np.int64)


def memory_events(ctx: AnalysisContext) -> MemoryEvents:
    """The sorted allocator events with their levels (cached per trace and options)."""
    value = ctx.input("memory.events")
    return value


def _build_events(ctx: AnalysisContext) -> MemoryEvents:
    trace, options = ctx.trace, ctx.options
    table = trace.memory
    if options.ranks is not None and table.num_rows:
        table = table.filter(pa.array(np.isin(table.column("rank").to_numpy(), list(options.ranks))))
    c = {name: _column(table, name) for name in table.column_names}
    group, (g_rank, g_type, g_device) = iv.combine_keys(c["rank"], c["device_type"], c["device"])
    order = np.lexsort((np.arange(group.size), c["ts_ns"], group))
    group, c = group[order], {k: v[order] for k, v in c.items()}
    n_groups = int(g_rank.size)
    first = np.ones(group.size, dtype=bool)
    first[1:] = group[1:] != group[:-1]
    # a device's totals are the allocator's only when every one of its events carries both
    missing = (c["total_allocated_bytes"] < 0) | (c["total_reserved_bytes"] < 0)
    known = np.ones(n_groups, dtype=bool)
    known[group[missing]] = False
    csum = np.cumsum(c["bytes"])
    net = csum - (csum - c["bytes"])[np.flatnonzero(first)][group]  # groups are contiguous, codes dense
    has_reserve = known & (g_type != CPU_DEVICE_TYPE)
    level = np.where(known[group], c["total_allocated_bytes"], net)
    reserved = np.where(has_reserve[group], c["total_reserved_bytes"], -1)
    prev_reserved, prev_level = np.roll(reserved, 1), np.roll(level, 1)
    comparable = ~first & has_reserve[group]
    increase = comparable & (reserved > prev_reserved)
    fragmented = increase & (c["bytes"] >= LARGE_REQUEST_BYTES) & (prev_reserved - prev_level >= c["bytes"])
    return MemoryEvents(
        group=group, group_rank=g_rank, group_type=g_type, group_device=g_device, group_known=known,
        group_reserved=has_reserve,
        rank=c["rank"], ts=c["ts_ns"], nbytes=c["bytes"], level=level, reserved=reserved, pid=c["pid"],
        tid=c["tid"], reserve_increase=increase, reserve_decrease=comparable & (reserved < prev_reserved),
        fragmented=fragmented,
    )


@dataclass
class _Candidates:
    """The events a set of table rows is computed from: ``key`` = the row, ``pos`` = the event,
    ``counted`` = it counts in the row's sums (carried-in levels only compete for the peak),
    ``floor_ns`` = the earliest time the row's peak can be (the step's start)."""

    key: np.ndarray
    pos: np.ndarray
    counted: np.ndarray
    floor_ns: np.ndarray


def _step_candidates(ev: MemoryEvents, steps: StepTable) -> tuple[_Candidates, np.ndarray, np.ndarray]:
    """Candidates of the per-step rows, and each row's (device group, step index)."""
    in_step = iv.innermost_covering(steps.rank, steps.start, steps.end, ev.rank, ev.ts, ev.ts + 1)
    own = np.flatnonzero(in_step >= 0)
    # the level carried into each step of each device: its last event before the step starts
    gi, sj = join_on_keys([ev.group_rank], [steps.rank])
    before = iv.searchsorted_by(ev.group, ev.ts, gi, steps.start[sj], "left") - 1
    carried = (before >= 0) & (ev.group[np.maximum(before, 0)] == gi)
    g = np.concatenate([gi[carried], ev.group[own]])
    s = np.concatenate([sj[carried], in_step[own]])
    pos = np.concatenate([before[carried], own])
    counted = np.concatenate([np.zeros(int(carried.sum()), dtype=bool), np.ones(own.size, dtype=bool)])
    key, (row_group, row_step) = iv.combine_keys(g, s)
    return _Candidates(key, pos, counted, steps.start[s]), row_group, row_step


def _peaks(ev: MemoryEvents, cand: _Candidates, n_rows: int) -> np.ndarray:
    """Per row, the candidate index of the first event (in time) with the highest level."""
    order = np.lexsort((cand.pos, -ev.level[cand.pos], cand.key))
    firsts = np.flatnonzero(np.concatenate([[True], cand.key[order][1:] != cand.key[order][:-1]]))
    out = np.empty(n_rows, dtype=np.int64)
    out[cand.key[order][firsts]] = order[firsts]
    return out


def _sums(cand: _Candidates, values: np.ndarray, n_rows: int) -> np.ndarray:
    keys, sums = iv.sum_by(cand.key, np.where(cand.counted, values, 0).astype(np.int64))
    return iv.lookup(keys, sums, np.arange(n_rows, dtype=np.int64))


def _rows(ctx: AnalysisContext, ev: MemoryEvents, cand: _Candidates, group: np.ndarray,
          step: np.ndarray) -> pd.DataFrame:
    """Table rows (``group``: each row's device group, ``step``: its step number or NO_STEP)."""
    n = int(group.size)
    nb = ev.nbytes[cand.pos]
    at_peak = _peaks(ev, cand, n)
    peak = cand.pos[at_peak]
    peak_ns = np.maximum(ev.ts[peak], cand.floor_ns[at_peak])
    known, has_reserve = ev.group_known[group], ev.group_reserved[group]
    reserved_at_peak = ev.reserved[peak]
    # highest reserved level per row: the last of each row's candidates sorted by reserved
    order = np.lexsort((ev.reserved[cand.pos], cand.key))
    last = np.flatnonzero(np.concatenate([cand.key[order][1:] != cand.key[order][:-1], [True]]))
    res_keys, res_max = cand.key[order][last], ev.reserved[cand.pos][order][last]
    op_row, op_name = cpu_op_at(ctx, ev.rank[peak], ev.pid[peak], ev.tid[peak], ev.ts[peak])
    origin = rank_origins(ctx, ev)
    return pd.DataFrame({
        "rank": ev.group_rank[group], "device_type": [device_type_name(t) for t in ev.group_type[group].tolist()],
        "device": ev.group_device[group], "step": step_column(step),
        "events": _sums(cand, np.ones(cand.key.size, dtype=np.int64), n),
        "allocations": _sums(cand, nb > 0, n), "frees": _sums(cand, nb < 0, n),
        "allocated_bytes": _sums(cand, np.maximum(nb, 0), n), "freed_bytes": _sums(cand, np.maximum(-nb, 0), n),
        "peak_allocated_bytes": ev.level[peak],
        "reserved_at_peak_bytes": _nullable(reserved_at_peak, has_reserve),
        "unused_reserved_at_peak_bytes": _nullable(reserved_at_peak - ev.level[peak], has_reserve),
        "peak_reserved_bytes": _nullable(iv.lookup(res_keys, res_max, np.arange(n, dtype=np.int64)), has_reserve),
        "peak_at_ns": peak_ns - origin[group],
        "cpu_op": op_name, "cpu_op_row": op_row,
        "reserve_increases": _sums(cand, ev.reserve_increase[cand.pos], n),
        "reserve_decreases": _sums(cand, ev.reserve_decrease[cand.pos], n),
        "fragmented_reservations": _sums(cand, ev.fragmented[cand.pos], n),
        "totals": np.where(known, ALLOCATOR_TOTALS, NET_TOTALS).astype(object),
    })


def _nullable(values: np.ndarray, known: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(np.asarray(values, dtype=np.int64).copy(), ~known)


def device_type_name(code: int) -> str:
    return DEVICE_TYPE_NAMES.get(int(code), f"type {int(code)}")


def rank_origins(ctx: AnalysisContext, ev: MemoryEvents) -> np.ndarray:
    """Per device group, its rank's first time: the earliest event or allocator event of the rank."""
    trace = ctx.trace
    first_ts = np.minimum.reduceat(ev.ts, np.flatnonzero(np.concatenate([[True], ev.group[1:] != ev.group[:-1]])))
    origin = pd.Series(first_ts).groupby(ev.group_rank).transform("min").to_numpy().astype(np.int64)
    if trace.num_events:
        ranks, firsts = _event_origins(ctx)
        origin = np.minimum(origin, iv.lookup(ranks, firsts, ev.group_rank, default=np.iinfo(np.int64).max))
    return origin


def _event_origins(ctx: AnalysisContext) -> tuple[np.ndarray, np.ndarray]:
    """(ranks sorted, each rank's earliest event start), once per trace."""
    value = ctx.input("memory.event_origins")
    return value


def _first_starts(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    start = trace.column("start_ns").astype(np.int64, copy=False)
    codes, (ranks,) = iv.combine_keys(trace.column("rank").astype(np.int64))
    if ranks.size == 1:  # one rank (the pipeline analyses one at a time): no grouping
        return ranks, np.array([start.min()], dtype=np.int64)
    firsts = np.full(ranks.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(firsts, codes, start)
    return ranks, firsts


def cpu_op_at(ctx: AnalysisContext, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray,
              ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, name) of the innermost CPU op of the thread (rank, pid, tid) spanning each time
    (start <= ts <= end); row -1 and name None where there is none."""
    trace = ctx.trace
    row = np.full(ts.size, -1, dtype=np.int64)
    names = np.full(ts.size, None, dtype=object)
    if ts.size == 0:
        return row, names
    nest = cpu_op_nesting(ctx)
    if nest.rows.size == 0:
        return row, names
    found = nest.index.covering(nest.thread_codes(rank, pid, tid), ts, ts)
    ops = nest.rows
    ok = found >= 0
    row[ok] = ops[found[ok]]
    if ok.any():
        names[ok] = np.asarray(trace.events.column("name").take(pa.array(row[ok])).to_pylist(), dtype=object)
    return row, names


def memory_table(ctx: AnalysisContext) -> pd.DataFrame:
    """The ``memory`` table: per rank and device the whole-trace row (step None), then its steps."""
    value = ctx.input("memory.table")
    return value


def _build_table(ctx: AnalysisContext) -> pd.DataFrame:
    trace, options = ctx.trace, ctx.options
    ev = memory_events(ctx)
    if len(ev) == 0:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in COLUMNS.items()})
    n_groups = int(ev.group_rank.size)
    whole = _Candidates(ev.group, np.arange(len(ev), dtype=np.int64), np.ones(len(ev), dtype=bool),
                        np.full(len(ev), np.iinfo(np.int64).min, dtype=np.int64))
    groups = [np.arange(n_groups, dtype=np.int64)]
    frames = [_rows(ctx, ev, whole, groups[0], np.full(n_groups, NO_STEP, dtype=np.int64))]
    steps = step_table(trace, options)
    if len(steps):
        cand, row_group, row_step = _step_candidates(ev, steps)
        if row_group.size:
            groups.append(row_group)
            frames.append(_rows(ctx, ev, cand, row_group, steps.step[row_step]))
    table = pd.concat(frames, ignore_index=True)
    step_sort = table["step"].fillna(np.iinfo(np.int64).min).to_numpy(dtype=np.int64)
    order = np.lexsort((step_sort, np.concatenate(groups)))
    return table.iloc[order].reset_index(drop=True).astype(COLUMNS)


# ------------------------------------------------------------------------------------ findings


def device_memory_bytes(trace: Trace, rank: int, device: int) -> int | None:
    """The GPU's memory as the trace's deviceProperties state it, if they do."""
    info = trace.ranks.get(rank)
    for dev in info.devices if info is not None else []:
        if dev.id == device and dev.total_memory_bytes:
            return int(dev.total_memory_bytes)
    return None


def _gpu_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Whole-trace rows of GPU devices whose events carry the allocator's totals."""
    keep = table["step"].isna() & (table["device_type"] != device_type_name(CPU_DEVICE_TYPE))
    return table[keep & (table["totals"] == ALLOCATOR_TOTALS)]


def fragmentation_findings(trace: Trace, table: pd.DataFrame) -> list[Finding]:
    findings = []
    for row in _gpu_rows(table).itertuples(index=False):
        rank, device = int(row.rank), int(row.device)
        peak, reserved, unused = int(row.peak_allocated_bytes), int(row.reserved_at_peak_bytes), \
            int(row.unused_reserved_at_peak_bytes)
        if unused < FRAGMENTATION_MIN_UNUSED_BYTES or reserved < FRAGMENTATION_MIN_RATIO * peak:
            continue
        capacity = device_memory_bytes(trace, rank, device)
        crowded = capacity is not None and reserved >= FRAGMENTATION_DEVICE_SHARE * capacity
        if int(row.fragmented_reservations) == 0 and not crowded:
            continue
        why = (f"the allocator reserved more memory {int(row.fragmented_reservations)} time(s) although enough "
               "was cached unused" if row.fragmented_reservations else
               f"reserved memory fills {100 * reserved / (capacity or reserved):.0f}% of the GPU")
        findings.append(Finding(
            code="memory_fragmentation",
            title=f"{fmt_bytes(unused)} of the {fmt_bytes(reserved)} reserved on GPU {device} of rank {rank} "
            f"hold no tensor at its allocation peak ({reserved / max(peak, 1):.1f}x the peak allocated); {why}",
            severity="low", analysis=NAME,
            recommendation="Let the caching allocator reuse its blocks: set PYTORCH_CUDA_ALLOC_CONF="
            "expandable_segments:True (or max_split_size_mb), allocate long-lived buffers first and keep tensor "
            "shapes stable; call torch.cuda.empty_cache() after a phase that needed much more memory.",
            rank=rank, claims=None,
            evidence={"device": device, "device_type": row.device_type, "peak_allocated_bytes": peak,
                      "reserved_at_peak_bytes": reserved, "unused_reserved_at_peak_bytes": unused,
                      "peak_reserved_bytes": int(row.peak_reserved_bytes),
                      "fragmented_reservations": int(row.fragmented_reservations),
                      "device_memory_bytes": capacity, "cpu_op": row.cpu_op},
        ))
    return findings


def churn_findings(ctx: AnalysisContext, table: pd.DataFrame) -> list[Finding]:
    trace, options = ctx.trace, ctx.options
    steps = step_table(trace, options).counts()
    per_step = table[table["step"].notna() & (table["totals"] == ALLOCATOR_TOTALS)]
    findings = []
    for row in _gpu_rows(table).itertuples(index=False):
        rank, device = int(row.rank), int(row.device)
        n_steps = steps.get(rank, 0)
        mine = per_step[(per_step["rank"] == rank) & (per_step["device"] == device)
                        & (per_step["device_type"] == row.device_type)]
        churning = int(((mine["reserve_increases"] > 0) & (mine["reserve_decreases"] > 0)).sum())
        if n_steps < CHURN_MIN_STEPS or churning < n_steps:
            continue
        cycles = int(mine["reserve_decreases"].sum())
        findings.append(Finding(
            code="allocation_churn",
            title=f"The caching allocator released and reserved GPU memory again in every one of the {n_steps} "
            f"steps on GPU {device} of rank {rank} ({cycles} releases)",
            severity="low", analysis=NAME,
            recommendation="Keep the allocator's cache warm: remove torch.cuda.empty_cache() from the loop, keep "
            "shapes stable (pad variable lengths to a few buckets), and leave memory headroom so the allocator "
            "does not free cached blocks to retry a failed allocation.",
            rank=rank, claims=None,
            evidence={"device": device, "device_type": row.device_type, "steps": n_steps,
                      "reserve_increases": int(mine["reserve_increases"].sum()), "reserve_decreases": cycles,
                      "allocated_bytes_per_step": int(mine["allocated_bytes"].mean()),
                      "allocations_per_step": float(mine["allocations"].mean()),
                      "peak_allocated_bytes": int(row.peak_allocated_bytes)},
        ))
    return findings


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    trace = ctx.trace
    table = memory_table(ctx)
    result = AnalysisResult(name=NAME, tables={"memory": table})
    if len(table):
        result.findings.extend(fragmentation_findings(trace, table))
        result.findings.extend(churn_findings(ctx, table))
    return result


register_input("memory.events", _build_events)
register_input("memory.event_origins", lambda ctx: _first_starts(ctx.trace))
register_input("memory.table", _build_table, requires=("memory.events", "memory.event_origins", "cpu_op_nesting"))

SPEC = AnalysisSpec(
    name=NAME,
    title="Memory",
    run=analyze,
    tables=(TableSpec("memory", "Allocator memory per rank, device and step (step None: whole trace)"),),
    finding_codes=("memory_fragmentation", "allocation_churn"),
    requires=("memory.table",),
    order=80,
    page=None,
    headline_table="memory",
)
