"""Streams: how each GPU's work spreads over its streams, and whether communication has a stream of
its own.

Definitions (docs/metrics.md, "Streams"), per rank, GPU device and stream, for the whole trace (no
per-step rows); all times int64 ns:

- GPU activity = kernels, memcpy and memset (not sync events), as in the temporal breakdown; a
  stream is a (rank, device, stream id) with at least one such event.
- ``kernels``, ``memcpys``, ``memsets`` = counts of those events on the stream.
- busy = |union of the stream's activity|; ``compute_ns``, ``communication_ns``, ``memory_ns`` =
  |union| of each class on the stream (classes as in ``analyses/classify.py``).
- ``window_share`` = busy / the device's GPU window (last activity end - first activity start on
  that device, all streams: the window of the temporal breakdown, taken from it).
- ``top_kernel`` = the kernel name with the largest sum of durations on the stream
  (``top_kernel_ns``; ties: the name that sorts first); empty when the stream ran no kernel.
- Per device: ``streams`` = streams with activity; ``stream_busy_ns`` = sum over its streams of
  their busy time; ``busy_ns`` = |union of all its activity| (the temporal breakdown's);
  ``mean_active_streams`` = stream_busy_ns / busy_ns (the time-weighted mean number of streams
  busy while the device is busy; 1 = the streams never overlap); ``max_active_streams`` = the
  largest number of streams busy at one instant; ``concurrent_ns`` = time during which two or more
  streams are busy. Intervals are half-open: streams that only touch do not overlap.

Finding ``communication_on_compute_stream``: a stream runs both communication kernels (any family of
the communication rule table, ``analyses/comm_rules.py``, and the user's rules) and compute kernels.
Work on one stream runs in order, so that communication can never overlap the compute of its own
stream. Cost = the part of the stream's communication time that no compute kernel on any
stream of the device overlaps (|U(comm on the stream) - U(compute on the device)|), the share of
the device's exposed communication this stream placement accounts for. Reported when that is at
least 5% of the device's GPU window (high from 20%: the thresholds of ``exposed_communication``),
under which it is nested (``part_of``): its time is part of that finding's. Its claims are those
intervals: U(comm on the stream) - U(compute on the device).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview import intervals as iv
from traceview.claims import Claims
from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult, Finding
from traceview.model import Kind, Trace
from traceview.registry import AnalysisSpec, TableSpec

from . import classify
from .comm_rules import rule_table
from .steps import Activity, activity, per_step

NAME = "streams"

STREAM_COLUMNS = {
    "rank": "int64", "device": "int64", "stream": "int64", "kernels": "int64", "memcpys": "int64",
    "memsets": "int64", "busy_ns": "int64", "window_share": "float64", "compute_ns": "int64",
    "communication_ns": "int64", "memory_ns": "int64", "first_start_ns": "int64", "last_end_ns": "int64",
    "top_kernel": "object", "top_kernel_ns": "int64",
}
DEVICE_COLUMNS = {
    "rank": "int64", "device": "int64", "streams": "int64", "window_ns": "int64", "busy_ns": "int64",
    "stream_busy_ns": "int64", "mean_active_streams": "float64", "max_active_streams": "int64",
    "concurrent_ns": "int64",
}


def _empty(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def _count_by(codes: np.ndarray, mask: np.ndarray, groups: int) -> np.ndarray:
    return np.bincount(codes[mask], minlength=groups).astype(np.int64)


def _union_by_class(codes: np.ndarray, act: Activity, mask: np.ndarray, groups: int) -> np.ndarray:
    keys, totals = iv.total_by(codes[mask], act.start[mask], act.end[mask])
    return iv.lookup(keys, totals, np.arange(groups, dtype=np.int64))


def kernel_names(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(code per row, sorted distinct names) of the ``name`` column at ``rows``. Only the dictionary
    entries these rows use are decoded (a trace's dictionary holds every CPU op name too), and equal
    names under several dictionary entries share one code."""
    column = trace.events.column("name")
    column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    used, inverse = np.unique(column.indices.to_numpy(zero_copy_only=False)[rows], return_inverse=True)
    values = np.asarray([str(v) for v in column.dictionary.take(used).to_pylist()], dtype=object)
    names, remap = np.unique(values, return_inverse=True)
    return remap.reshape(-1)[inverse.reshape(-1)].astype(np.int64), names


def top_kernels(trace: Trace, act: Activity, codes: np.ndarray, groups: int) -> tuple[list[str | None], np.ndarray]:
    """Per stream group: the kernel name with the largest sum of durations, and that sum (ns)."""
    names: list[str | None] = [None] * groups
    totals = np.zeros(groups, dtype=np.int64)
    is_kernel = act.kind == int(Kind.KERNEL)
    if not is_kernel.any():
        return names, totals
    name_code, categories = kernel_names(trace, act.row[is_kernel])
    pair, (group, name_code) = iv.combine_keys(codes[is_kernel], name_code)
    pair_keys, pair_ns = iv.sum_by(pair, (act.end - act.start)[is_kernel])
    group, name_code = group[pair_keys], name_code[pair_keys]
    # per group the largest sum first, then the first name: the first row of each group wins
    order = np.lexsort((name_code, -pair_ns, group))
    first = order[np.concatenate([[True], group[order][1:] != group[order][:-1]])]
    for g, n, ns in zip(group[first].tolist(), name_code[first].tolist(), pair_ns[first].tolist()):
        names[g], totals[g] = str(categories[n]), ns
    return names, totals


def active_streams(device_of_stream: np.ndarray, act: Activity, codes: np.ndarray,
                   devices: int) -> tuple[np.ndarray, np.ndarray]:
    """Per device group: the most streams busy at one instant, and the time two or more are busy.

    A sweep over the boundaries of every stream's union (disjoint within a stream, so the depth is
    the number of busy streams), all devices at once: sorted by device, time, closings first."""
    key, start, end = iv.union_by(codes, act.start, act.end)
    device = device_of_stream[key]
    points = np.concatenate([start, end])
    delta = np.concatenate([np.ones(start.size, dtype=np.int64), np.full(end.size, -1, dtype=np.int64)])
    owner = np.concatenate([device, device])
    order = np.lexsort((delta, points, owner))
    points, delta, owner = points[order], delta[order], owner[order]
    depth = np.cumsum(delta)  # back to 0 at the end of each device: its +1s and -1s balance
    max_depth = np.zeros(devices, dtype=np.int64)
    np.maximum.at(max_depth, owner, depth)
    # segment i lies between points i and i+1 of the same device at depth[i]
    same = owner[1:] == owner[:-1]
    seg = np.where(same & (depth[:-1] >= 2), points[1:] - points[:-1], 0)
    seg_keys, seg_ns = iv.sum_by(owner[:-1], seg)
    return max_depth, iv.lookup(seg_keys, seg_ns, np.arange(devices, dtype=np.int64))


def stream_tables(ctx: AnalysisContext) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``streams`` (per rank, device, stream) and ``devices`` (per rank, device) tables."""
    trace = ctx.trace
    act = activity(ctx)
    if len(act) == 0:
        return _empty(STREAM_COLUMNS), _empty(DEVICE_COLUMNS)
    codes, (rank, device, stream) = iv.combine_keys(act.rank, act.device, act.stream)
    groups = rank.size
    device_of_stream, (dev_rank, dev_device) = iv.combine_keys(rank, device)
    devices = dev_rank.size

    whole = ctx.input("temporal.breakdown")
    whole = whole[whole["step"].isna()]
    dev_key = pd.MultiIndex.from_arrays([whole["rank"].to_numpy(), whole["device"].to_numpy()])
    at = dev_key.get_indexer(pd.MultiIndex.from_arrays([dev_rank, dev_device]))
    window_ns = whole["window_ns"].to_numpy()[at].astype(np.int64)
    busy_ns = whole["busy_ns"].to_numpy()[at].astype(np.int64)

    everything = np.ones(len(act), dtype=bool)
    stream_busy = _union_by_class(codes, act, everything, groups)
    _, first, last = iv.window_by(codes, act.start, act.end)
    window_of_stream = window_ns[device_of_stream]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(window_of_stream > 0, stream_busy / np.maximum(window_of_stream, 1), np.nan)
    names, top_ns = top_kernels(trace, act, codes, groups)
    streams = pd.DataFrame({
        "rank": rank, "device": device, "stream": stream,
        "kernels": _count_by(codes, act.kind == int(Kind.KERNEL), groups),
        "memcpys": _count_by(codes, act.kind == int(Kind.MEMCPY), groups),
        "memsets": _count_by(codes, act.kind == int(Kind.MEMSET), groups),
        "busy_ns": stream_busy, "window_share": share,
        "compute_ns": _union_by_class(codes, act, act.cls == classify.COMPUTE, groups),
        "communication_ns": _union_by_class(codes, act, act.cls == classify.COMMUNICATION, groups),
        "memory_ns": _union_by_class(codes, act, act.cls == classify.MEMORY, groups),
        "first_start_ns": first, "last_end_ns": last,
        "top_kernel": pd.Series(names, dtype=object), "top_kernel_ns": top_ns,
    }).astype(STREAM_COLUMNS)

    sum_keys, sums = iv.sum_by(device_of_stream, stream_busy)
    stream_busy_sum = iv.lookup(sum_keys, sums, np.arange(devices, dtype=np.int64))
    max_active, concurrent = active_streams(device_of_stream, act, codes, devices)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_active = np.where(busy_ns > 0, stream_busy_sum / np.maximum(busy_ns, 1), np.nan)
    per_device = pd.DataFrame({
        "rank": dev_rank, "device": dev_device,
        "streams": np.bincount(device_of_stream, minlength=devices), "window_ns": window_ns, "busy_ns": busy_ns,
        "stream_busy_ns": stream_busy_sum, "mean_active_streams": mean_active,
        "max_active_streams": max_active, "concurrent_ns": concurrent,
    }).astype(DEVICE_COLUMNS)
    return streams, per_device


def exposed_on_shared_streams(act: Activity, codes: np.ndarray, device_of_stream: np.ndarray,
                              shared: np.ndarray) -> np.ndarray:
    """Per stream group in ``shared`` (sorted group codes): |U(its communication) - U(compute on its
    device)|. The device's compute events are repeated once per shared stream of that device, so
    one keyed intersection handles every stream at once."""
    comm = (act.cls == classify.COMMUNICATION) & np.isin(codes, shared)
    comm_keys, comm_ns = iv.total_by(codes[comm], act.start[comm], act.end[comm])
    shared_by_device = shared[np.argsort(device_of_stream[shared], kind="stable")]
    per_device = np.bincount(device_of_stream[shared], minlength=int(device_of_stream.max()) + 1)
    offset = np.concatenate([[0], np.cumsum(per_device)[:-1]])
    compute = np.flatnonzero(act.cls == classify.COMPUTE)
    compute_device = device_of_stream[codes[compute]]
    repeats = per_device[compute_device]
    event = np.repeat(compute, repeats)
    nth = np.arange(event.size) - np.repeat(np.cumsum(repeats) - repeats, repeats)
    key = shared_by_device[offset[np.repeat(compute_device, repeats)] + nth]
    overlap_keys, overlap_ns = iv.measure_intersection_by(
        (codes[comm], act.start[comm], act.end[comm]), (key, act.start[event], act.end[event]))
    return iv.lookup(comm_keys, comm_ns, shared) - iv.lookup(overlap_keys, overlap_ns, shared)


def exposed_claims_on_stream(act: Activity, codes: np.ndarray, group: int) -> Claims:
    """The intervals of stream group ``group`` where its communication runs and no compute of its
    device does: U(comm on the stream) - U(compute on the device), on the rank's own clock (the
    temporal analysis's exposed communication, of this stream's kernels only)."""
    return classify.exposed_claims(act.cls, act.rank, act.device, act.start, act.end,
                                   (act.cls == classify.COMMUNICATION) & (codes == group))


def families_on_stream(ctx: AnalysisContext, act: Activity, codes: np.ndarray, group: int) -> list[str]:
    """The families (``comm_rules``: nccl, deepep, ...) of the communication kernels of a stream group."""
    options = ctx.options
    comm = (act.cls == classify.COMMUNICATION) & (codes == group)
    rules = rule_table(options.comm_patterns)
    used = np.unique(classify.comm_rule_of(ctx)[act.row[comm]])
    return sorted({rules[int(i)].family for i in used if i >= 0})


def shared_stream_findings(ctx: AnalysisContext, streams: pd.DataFrame,
                           per_device: pd.DataFrame) -> list[Finding]:
    act = activity(ctx)
    codes, _ = iv.combine_keys(act.rank, act.device, act.stream)
    device_of_stream, _ = iv.combine_keys(streams["rank"].to_numpy(), streams["device"].to_numpy())
    shared = np.flatnonzero((streams["compute_ns"].to_numpy() > 0) & (streams["communication_ns"].to_numpy() > 0))
    if shared.size == 0:
        return []
    exposed = exposed_on_shared_streams(act, codes, device_of_stream, shared)
    window = per_device["window_ns"].to_numpy()[device_of_stream[shared]]
    step_counts = act.steps.counts()
    findings = []
    for g, exposed_ns, window_ns in zip(shared.tolist(), exposed.tolist(), window.tolist()):
        if window_ns <= 0 or exposed_ns < classify.EXPOSED_COMM_SHARE * window_ns:
            continue
        row = streams.iloc[g]
        finding = stream_finding(row, int(exposed_ns), int(window_ns), step_counts.get(int(row["rank"]), 0),
                                 families_on_stream(ctx, act, codes, g))
        finding.claims = exposed_claims_on_stream(act, codes, g)
        findings.append(finding)
    return findings


def stream_finding(row: pd.Series, exposed_ns: int, window_ns: int, steps: int, families: list[str]) -> Finding:
    """The communication_on_compute_stream finding of one row of the ``streams`` table."""
    rank, device, stream = int(row["rank"]), int(row["device"]), int(row["stream"])
    share = exposed_ns / window_ns
    return Finding(
        code="communication_on_compute_stream",
        title=f"Communication kernels ({', '.join(families)}) on GPU {device} of rank {rank} run on compute "
        f"stream {stream}, so they cannot overlap its compute: {100 * share:.1f}% of the time is exposed "
        "communication there",
        severity="high" if share >= classify.EXPOSED_COMM_SHARE_HIGH else "medium",
        analysis=NAME,
        recommendation="Issue collectives on a stream of their own, ordered against compute with CUDA "
        "events, so they can run during compute (torch.distributed's NCCL backend does this by default: "
        "look for communication issued on the current stream, e.g. custom NCCL bindings, custom all-reduce "
        "kernels or synchronous P2P).",
        cost_ns_per_step=per_step(exposed_ns, steps),
        cost_share=share,
        rank=rank,
        time_range_ns=(int(row["first_start_ns"]), int(row["last_end_ns"])),
        evidence={"device": device, "stream": stream, "communication_ns": int(row["communication_ns"]),
                  "compute_ns": int(row["compute_ns"]), "exposed_comm_ns": exposed_ns,
                  "window_ns": window_ns, "steps": steps, "families": families},
        part_of="exposed_communication",
    )


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    streams, per_device = stream_tables(ctx)
    result = AnalysisResult(name=NAME, tables={"streams": streams, "devices": per_device})
    if len(streams):
        result.findings.extend(shared_stream_findings(ctx, streams, per_device))
    return result


SPEC = AnalysisSpec(
    name=NAME,
    title="Streams",
    run=analyze,
    tables=(
        TableSpec("streams", "GPU work per rank, device and stream (whole trace)", sort_by="busy_ns"),
        TableSpec("devices", "Stream concurrency per rank and device (whole trace)"),
    ),
    finding_codes=("communication_on_compute_stream",),
    finding_parents=(("communication_on_compute_stream", "exposed_communication"),),
    finding_precedence=(("communication_on_compute_stream", 20),),
    requires=("activity", "classify.comm_rule_of", "temporal.breakdown"),
    order=70,
    page=None,
    headline_table="streams",
)
