"""SQL over a trace: DuckDB queries on the canonical Arrow tables, as documented views.

>>> trace = traceview.load("sample_traces/synthetic_4rank")                  # doctest: +SKIP
>>> trace.sql("SELECT name, count(*) AS n FROM kernels GROUP BY name ORDER BY n DESC")   # doctest: +SKIP

The views (docs/sql.md lists their columns and meaning; :data:`VIEWS` is the same list):

* ``events``, ``links``, ``steps``, ``memory``, ``counters``, ``ranks``: the trace's own tables
  (docs/schema.md), read by DuckDB straight from the Arrow buffers (registered, never copied; a
  ``row`` column and ``end_ns`` are added), dictionary columns seen as text;
* ``launches`` (launch call joined to the GPU activity it launched, through the ``launch`` links)
  and ``ops`` (CPU ops with the runtime calls and GPU activity they issued): SQL views over those;
* ``kernels`` (with the step, class and category the analyses give each kernel), ``gaps`` (the
  idle_gaps analysis's ``gaps`` table) and ``collectives`` (the communication analysis's table):
  they need the analyses' shared activity context, so they are computed only when a query names
  them (``SELECT count(*) FROM events`` runs no analysis), then kept for the trace object;
* ``critical_path_segments``, ``critical_path_steps``, ``critical_path_whatif``: the critical_path
  analysis's ``segments``, ``steps`` and ``whatif`` tables (docs/metrics.md, "Critical path"), from
  that analysis and the analyses it requires run on the session's trace, then its cross-rank step,
  as the pipeline runs them (:func:`analysis_result`): computed once per session when a query
  names one of them.
* ``ranges`` and ``range_gpu``: the modules analysis's range tree and GPU time per range
  (docs/metrics.md, "Modules and ranges"), computed the same way when a query names one of them.

Secrets: every string that enters the database (names, categories, op arguments, process groups,
file names) is first scrubbed by :mod:`traceview.secrets` exactly as the report scrubs the names it
shows (non-strict: tokens, keys, passwords, ...), once per distinct value of a dictionary. A query
therefore cannot return, filter on, or take apart a secret the trace holds. DuckDB's file access
is disabled (``enable_external_access = false``): a query reads the views only and writes nothing;
``traceview sql -o`` writes the result.

``traceview.sql`` is :func:`sql`. This module is core-level: it imports no feature (renderers, app,
commands, rich, typer).
"""

from __future__ import annotations

import difflib
import functools
import re
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceview.errors import TraceviewError
from traceview.findings import Options
from traceview.context import AnalysisContext
from traceview.model import EVENT_SCHEMA, Kind, Trace
from traceview.secrets import Scrubber

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from traceview.findings import AnalysisResult


class SqlError(TraceviewError):
    """A query DuckDB refused (syntax, unknown view or column, a type error): one line."""


@dataclass(frozen=True)
class View:
    """A documented view: its name, what one row is, its columns as (name, meaning), and whether it
    needs the analyses (computed only when a query names it)."""

    name: str
    row: str
    columns: tuple[tuple[str, str], ...]
    analysis: bool = False
    #: (analysis, table) when the view is one of a registered analysis's tables (its columns as
    #: declared here, in this order)
    table_of: tuple[str, str] | None = None


_EVENT_COLUMN_TEXT = {
    "rank": "the rank", "kind": "kernel, memcpy, memset, sync, runtime, cpu_op, python_function, annotation, "
    "gpu_annotation or other", "category": "the source's own category", "name": "kernel, op, API or range name",
    "start_ns": "start (ns, the trace's clock)", "dur_ns": "duration (ns)", "pid": "process (GPU events: device)",
    "tid": "thread (GPU events: stream)", "device": "GPU index (-1: not on a GPU)", "stream": "GPU stream (-1: none)",
    "correlation": "launch correlation id (-1: none)", "external_id": "Kineto External id (-1: none)",
    "recorded_flops": "FLOPs XLA recorded for the op (XSpace flops stat; null elsewhere)",
    "recorded_bytes": "bytes accessed XLA recorded for the op (XSpace bytes_accessed stat; null elsewhere)",
}

#: the critical_path analysis's tables (docs/metrics.md, "Critical path"; docs/sql.md)
_PATH_CATEGORIES = ("host_compute", "host_untraced", "launch_overhead", "sync", "gpu_compute", "memory",
                    "communication", "gpu_wait", "waiting_on_rank", "unlinked")
_PATH_CATEGORY_TEXT = ", ".join(_PATH_CATEGORIES[:-1]) + f" or {_PATH_CATEGORIES[-1]}"
CRITICAL_PATH_VIEWS: tuple[View, ...] = (
    View("critical_path_segments", "one segment of a step's critical path (the critical_path analysis's segments "
         "table): the path of each step partitions its window", (
        ("rank", ""), ("step", "null: the whole-trace window of a rank without steps"), ("start_ns", ""),
        ("end_ns", ""), ("dur_ns", ""), ("category", _PATH_CATEGORY_TEXT),
        ("name", "the event's name (empty for untraced host time)"),
        ("row", "the event's row in events (-1: untraced host time, a lag between events)"),
        ("tid", "host segments: the thread (-1 else)"), ("device", "GPU segments (-1 else)"),
        ("stream", "GPU segments (-1 else)"),
    ), analysis=True, table_of=("critical_path", "segments")),
    View("critical_path_steps", "one step of one rank: its critical path's length and composition", (
        ("rank", ""), ("step", "null: the whole trace of a rank without steps"), ("start_ns", ""), ("end_ns", ""),
        ("step_ns", ""), ("path_ns", "the path's length (= step_ns)"),
        *[(f"{c}_ns", "time of the path in this category") for c in _PATH_CATEGORIES],
        ("bound_by", "host, gpu or communication: the largest group"), ("bound_share", "that group's share"),
        ("top_name", "the event with most time on the path"), ("top_ns", "its time on the path"),
        ("achievable_ns", "the achievable step (the what-if 'achievable')"),
    ), analysis=True, table_of=("critical_path", "steps")),
    View("critical_path_whatif", "one what-if scenario of one rank and step (step null: the mean over its steps)", (
        ("rank", ""), ("step", ""),
        ("scenario", "comm_overlapped, no_host_overhead, roofline, median_rank or achievable"),
        ("step_ns", ""), ("whatif_ns", "the step's time in the scenario"), ("saving_ns", "step_ns - whatif_ns"),
        ("saving_share", "saving_ns / step_ns"),
        ("modelled_share", "roofline, achievable: share of kernel time with a roofline model (else null)"),
        ("assumption", "what the scenario assumes"),
    ), analysis=True, table_of=("critical_path", "whatif")),
)

#: the modules analysis's tables (docs/metrics.md, "Modules and ranges"; docs/sql.md)
MODULE_VIEWS: tuple[View, ...] = (
    View("ranges", "one range of one rank's range tree (nn.Module, annotation or NVTX; the modules analysis's "
         "ranges table)", (
        ("rank", ""), ("range_id", "0.. per rank, in start order"), ("parent_id", "the enclosing range (-1: top)"),
        ("depth", "0 at the top"), ("kind", "module, annotation or nvtx"), ("domain", "the NVTX domain ('' else)"),
        ("name", ""), ("path", "names from the root joined by /"),
        ("type_path", "the path with each name's trailing _<number> removed"), ("tid", "the thread"),
        ("start_ns", ""), ("end_ns", ""), ("row", "the range's event in events"),
    ), analysis=True, table_of=("modules", "ranges")),
    View("range_gpu", "one range with GPU activity attributed at or below it (the modules analysis's range_gpu "
         "table)", (
        ("rank", ""), ("range_id", "as in ranges"), ("depth", ""), ("kind", ""), ("path", ""), ("type_path", ""),
        ("start_ns", ""), ("end_ns", ""), ("inclusive_ns", "|union| of the activity at or below the range"),
        ("exclusive_ns", "|union| of the activity attributed to it alone"), ("kernels", "inclusive count"),
        ("compute_ns", "inclusive, per class"), ("communication_ns", ""), ("memory_ns", ""),
        ("backward_ns", "inclusive time of backward kernels (attributed through the fwdbwd flow)"),
        ("graph_replay_ns", "inclusive time of graph replays attributed to the range around the launch"),
        ("share", "inclusive_ns / the rank's GPU busy time"),
    ), analysis=True, table_of=("modules", "range_gpu")),
)

#: the measured analysis's tables (docs/metrics.md, "Measured efficiency"; docs/sql.md): empty without --ncu
MEASURED_VIEWS: tuple[View, ...] = (
    View("kernel_metrics", "one metric of one Nsight Compute kernel record (--ncu exports; the measured analysis's "
         "kernel_metrics table)", (
        ("file", "the export's file name"), ("ncu_id", "ncu's ID of the record in its export"),
        ("kernel", "ncu's Kernel Name"), ("grid", "(x, y, z)"), ("block", "(x, y, z)"),
        ("invocation", "0.. the record's order among records of one name and launch configuration"),
        ("section", "ncu's section ('' for raw-page metrics)"), ("metric", "ncu's metric name"),
        ("unit", "the base unit: byte, ns, hz, byte/s, %, cycle, warp, ... ('' a count)"),
        ("value", "the value in that unit (null: n/a)"), ("raw_unit", "the unit as ncu wrote it"),
        ("raw_value", "the value as ncu wrote it"),
    ), analysis=True, table_of=("measured", "kernel_metrics")),
    View("measured_kernels", "one trace kernel group (rank, name, grid, block) with its ncu measurements (the "
         "measured analysis's kernels table)", tuple((c, "docs/metrics.md, Measured efficiency") for c in (
             "rank", "name", "grid", "block", "kernels", "trace_ns", "measured_on_invocation", "match_rule",
             "bound_by", "sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct",
             "achieved_occupancy_pct", "l2_hit_rate_pct", "dram_bytes", "duration_ns", "measured_flops",
             "modelled_flops", "flops_ratio", "model_off", "top_rule", "top_speedup_pct")),
         analysis=True, table_of=("measured", "kernels")),
    View("gpu_metrics", "one step of one GPU with the means of its Nsight Systems GPU metrics (the gpu_metrics "
         "analysis's steps table; empty without GPU_METRICS in the export)", tuple((c, "docs/metrics.md, GPU metrics")
                                                                                  for c in (
             "rank", "device", "step", "samples", "sm_active_pct", "tensor_active_pct", "dram_read_pct",
             "dram_write_pct", "gpc_clock_mhz", "sys_clock_mhz", "pcie_rx_pct", "pcie_tx_pct", "nvlink_rx_pct",
             "nvlink_tx_pct", "gemm_share")), analysis=True, table_of=("gpu_metrics", "steps")),
)

VIEWS: tuple[View, ...] = (
    View("events", "one event (docs/schema.md, Trace.events)", (
        ("row", "the event's row: what *_row columns of other views refer to"),
        *[(f.name, _EVENT_COLUMN_TEXT.get(f.name, "as in docs/schema.md")) for f in EVENT_SCHEMA
          if f.name in ("rank", "kind", "category", "name", "start_ns", "dur_ns")],
        ("end_ns", "start_ns + dur_ns"),
        *[(f.name, _EVENT_COLUMN_TEXT.get(f.name, "as in docs/schema.md (null where absent)")) for f in EVENT_SCHEMA
          if f.name not in ("rank", "kind", "category", "name", "start_ns", "dur_ns")],
    )),
    View("kernels", "one kernel (kind 'kernel'; copies and memsets are in events)", (
        ("row", "its row in events"), ("rank", ""), ("device", ""), ("stream", ""), ("name", "kernel name"),
        ("start_ns", ""), ("dur_ns", ""), ("end_ns", ""),
        ("step", "the step of its launch call (else of its start), as every per-step figure counts it; "
         "null outside steps"),
        ("class", "compute or communication (the communication rule table, docs/metrics.md)"),
        ("category", "the kernels analysis's category: gemm, attention, convolution, elementwise, reduction, "
         "communication or other"),
        ("launch_row", "row of its launch call (null: none linked)"), ("correlation", ""),
        ("grid_x", ""), ("grid_y", ""), ("grid_z", ""), ("block_x", ""), ("block_y", ""), ("block_z", ""),
    ), analysis=True),
    View("launches", "one launch link: a host launch call and one GPU activity it launched (a graph launch "
         "has one row per activity)", (
        ("rank", ""), ("launch_row", "row of the call"), ("gpu_row", "row of the GPU activity"),
        ("api", "the call's name (cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch, hipLaunchKernel ...)"),
        ("name", "the GPU activity's name"), ("gpu_kind", "kernel, memcpy or memset"),
        ("pid", "the calling process"), ("tid", "the calling thread"), ("device", ""), ("stream", ""),
        ("correlation", ""), ("launch_start_ns", ""), ("launch_dur_ns", ""), ("launch_end_ns", ""),
        ("gpu_start_ns", ""), ("gpu_dur_ns", ""), ("gpu_end_ns", ""),
        ("queue_ns", "gpu_start_ns - launch_end_ns: how long the work waited after the call returned "
         "(negative: it started before the call returned)"),
        ("launch_delay_ns", "max(0, queue_ns): the launch overhead analysis's launch delay (for a graph "
         "launch that analysis counts it once, on the first activity)"),
        ("graph", "true when the call is a graph launch (cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch)"),
    )),
    View("ops", "one CPU op (kind 'cpu_op')", (
        ("row", ""), ("rank", ""), ("name", ""), ("category", ""), ("start_ns", ""), ("dur_ns", ""),
        ("end_ns", ""), ("pid", ""), ("tid", ""), ("external_id", ""),
        ("input_dims", "Input Dims as JSON text (record_shapes=True)"), ("input_types", ""),
        ("input_strides", ""), ("concrete_inputs", ""),
        ("runtime_calls", "runtime calls linked to this op (cpu_op links: by External id, else the innermost "
         "enclosing op; so a parent op does not count its children's calls)"),
        ("gpu_events", "GPU activity those calls launched"),
        ("gpu_dur_ns", "sum of the durations of that GPU activity"),
    )),
    View("gaps", "one idle gap of a GPU (the idle_gaps analysis's gaps table, docs/metrics.md)", (
        ("rank", ""), ("device", ""), ("step", "the step of the activity that ends the gap"),
        ("start_ns", ""), ("end_ns", ""), ("dur_ns", ""),
        ("cause", "host_bound, sync_bound, launch_latency or unattributed"),
        ("cpu_context", "what the host was doing (an op, function, range or call name)"),
        ("context_at_gap_start", "true when cpu_context ran at the gap start rather than across it"),
        ("next_row", "row of the activity that ends the gap"), ("api_row", "row of its launch call (-1: none)"),
    ), analysis=True),
    View("steps", "one step of one rank (ProfilerStep#N, or --step-marker ranges)", (
        ("rank", ""), ("step", "the number in its name, else the ordinal"), ("name", ""),
        ("start_ns", "the CPU range's start"), ("end_ns", ""), ("dur_ns", "end_ns - start_ns"),
    )),
    View("collectives", "collectives of one kind and process group on one rank and device, for the whole "
         "trace (step null) and per step (the communication analysis's collectives table)", (
        ("rank", ""), ("device", ""), ("step", "null: the whole trace"), ("collective", "AllReduce, AllGather, ..."),
        ("process_group", "process group name, else its ranks, else empty"), ("count", "kernels"),
        ("total_ns", "sum of kernel durations"), ("mean_ns", ""), ("communication_ns", "|union| of the kernels"),
        ("overlap_ns", "overlapped with compute"), ("overlap_pct", ""), ("exposed_ns", "not overlapped"),
        ("bytes", "sum of msg_bytes where known"), ("group_size", ""),
    ), analysis=True),
    *CRITICAL_PATH_VIEWS,
    *MODULE_VIEWS,
    *MEASURED_VIEWS,
    View("ranks", "one rank (RankInfo)", (
        ("rank", ""), ("file", "the input file's name (no folders)"), ("format", "kineto or nsys"),
        ("format_version", ""), ("rank_source", "how the rank was found"), ("world_size", ""),
        ("gpus", "device names, comma-separated"), ("base_time_ns", ""), ("events", "rows in events"),
        ("steps", "rows in steps"),
    )),
    View("links", "one link between events (docs/schema.md, Trace.links)", (
        ("rank", ""), ("type", "launch, cpu_op or flow"), ("category", ""), ("src_row", ""), ("dst_row", ""),
    )),
    View("memory", "one allocator event (docs/schema.md, Trace.memory)", (
        ("rank", ""), ("device", ""), ("device_type", ""), ("ts_ns", ""), ("bytes", "> 0 allocated, < 0 freed"),
        ("total_allocated_bytes", ""), ("total_reserved_bytes", ""), ("addr", ""), ("pid", ""), ("tid", ""),
    )),
    View("counters", "one counter sample (docs/schema.md, Trace.counters)", (
        ("rank", ""), ("pid", ""), ("tid", ""), ("name", ""), ("series", ""), ("ts_ns", ""), ("value", ""),
    )),
)
VIEW_NAMES = tuple(v.name for v in VIEWS)
#: the view names, as errors list them
_VIEW_LIST = ", ".join(VIEW_NAMES)
_WORDS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: graph launch calls (the launch overhead analysis's rule, in RE2 syntax for DuckDB)
GRAPH_LAUNCH_SQL = r"^(cuda|cu|hip)GraphLaunch"


def view_help() -> str:
    """The views and their columns as plain text (``traceview sql --views``)."""
    lines = []
    for v in VIEWS:
        lines.append(f"{v.name}: {v.row}" + (" [computed by the analyses when named]" if v.analysis else ""))
        lines.extend(f"  {c:<22} {text}".rstrip() for c, text in v.columns)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ scrubbing


def scrub_array(array: pa.Array, scrubber: Scrubber, where: str) -> pa.Array:
    """A string or dictionary-of-string array with every distinct value scrubbed once (the
    dictionary replaced, the indices shared); other arrays as they are."""
    if pa.types.is_dictionary(array.type):
        dictionary = array.dictionary
        if not (pa.types.is_string(dictionary.type) or pa.types.is_large_string(dictionary.type)):
            return array
        values = dictionary.to_pylist()
        clean = [v if v is None else scrubber.text_cached(v, where) for v in values]
        if clean == values:
            return array
        return pa.DictionaryArray.from_arrays(array.indices, pa.array(clean, dictionary.type))
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        encoded = array.dictionary_encode()
        return scrub_array(encoded, scrubber, where).dictionary_decode()
    return array


def scrub_table(table: pa.Table, scrubber: Scrubber, where: str) -> pa.Table:
    """``table`` with its text columns scrubbed (:func:`scrub_array`); other columns shared."""
    for i, field in enumerate(table.schema):
        col = table.column(i)
        if not (pa.types.is_dictionary(field.type) or pa.types.is_string(field.type)
                or pa.types.is_large_string(field.type)):
            continue
        chunks = [scrub_array(c, scrubber, f"{where}.{field.name}") for c in col.chunks]
        if any(new is not old for new, old in zip(chunks, col.chunks)):
            # dictionaries may differ by chunk now: the type stays dictionary<index, string>
            table = table.set_column(i, field, pa.chunked_array(chunks, field.type))
    return table


# ------------------------------------------------------------------------------------ tables


def _analysis_modules() -> Any:
    """The analyses modules the computed views use, imported on first use (a query without a
    computed view never imports them), and called through their modules so tests see what runs."""
    from traceview.analyses import classify, communication, idle_gaps, kernels, steps

    return classify, communication, idle_gaps, kernels, steps


#: the scrubbed events table of each live trace object (by identity), so a second query on the same
#: trace scrubs nothing again; not ``analyses.steps.cached``, which would import the analyses
_EVENTS: dict[int, tuple[weakref.ref[Trace], pa.Table]] = {}


def events_table(trace: Trace) -> pa.Table:
    """The events, scrubbed, with a ``row`` column in front (cached per trace object)."""
    hit = _EVENTS.get(id(trace))
    if hit is not None and hit[0]() is trace and hit[1].num_rows == trace.num_events:
        return hit[1]
    events = scrub_table(trace.events, Scrubber(False), "events")
    events = events.add_column(0, pa.field("row", pa.int64(), nullable=False),
                               pa.array(np.arange(events.num_rows, dtype=np.int64)))
    for key in [k for k, (ref, _) in _EVENTS.items() if ref() is None]:
        del _EVENTS[key]
    _EVENTS[id(trace)] = (weakref.ref(trace), events)
    return events


def ranks_table(trace: Trace, steps: pa.Table) -> pa.Table:
    """One row per rank from the scrubbed metadata (files named without their folders)."""
    from pathlib import PurePath

    from traceview.secrets import scrub_metadata

    safe = scrub_metadata(trace.ranks)
    rank_col = trace.column("rank") if trace.num_events else np.empty(0, dtype=np.int32)
    step_ranks = steps.column("rank").to_numpy() if steps.num_rows else np.empty(0, dtype=np.int32)
    rows = []
    for rank in sorted(safe):
        info = safe[rank]
        rows.append({
            "rank": int(rank), "file": PurePath(str(info.get("source_path") or "")).name,
            "format": info.get("source_format"), "format_version": info.get("format_version") or None,
            "rank_source": info.get("rank_source") or None, "world_size": info.get("world_size"),
            "gpus": ", ".join(str(d.get("name") or f"device {d.get('id')}") for d in info.get("devices", [])) or None,
            "base_time_ns": int(info.get("base_time_ns") or 0), "events": int(np.count_nonzero(rank_col == rank)),
            "steps": int(np.count_nonzero(step_ranks == rank)),
        })
    schema = pa.schema([("rank", pa.int32()), ("file", pa.string()), ("format", pa.string()),
                        ("format_version", pa.string()), ("rank_source", pa.string()), ("world_size", pa.int64()),
                        ("gpus", pa.string()), ("base_time_ns", pa.int64()), ("events", pa.int64()),
                        ("steps", pa.int64())])
    return pa.Table.from_pylist(rows, schema=schema)


def _nullable(values: np.ndarray, missing: np.ndarray) -> pa.Array:
    return pa.array(values, mask=missing)


def _labels(codes: np.ndarray, names: list[str]) -> pa.DictionaryArray:
    """Integer codes as a dictionary array over ``names`` (codes out of range: null)."""
    bad = (codes < 0) | (codes >= len(names))
    return pa.DictionaryArray.from_arrays(pa.array(np.where(bad, 0, codes).astype(np.int32), mask=bad),
                                          pa.array(names, pa.string()))


def kernel_facts(ctx: AnalysisContext) -> pa.Table:
    """For every kernel of the activity context: row, step, class, category, launch_row."""
    classify, _comm, _gaps, kernels, steps = _analysis_modules()
    act = steps.activity(ctx)
    category, _codes, _names = kernels.categories_of(ctx.trace, act)
    keep = act.kind == int(Kind.KERNEL)
    classes = [classify.CLASS_NAMES.get(c, "") for c in range(max(classify.CLASS_NAMES) + 1)]  # code -> name
    return pa.table({
        "row": pa.array(act.row[keep].astype(np.int64)),
        "step": _nullable(act.step[keep], act.step[keep] == steps.NO_STEP),
        "class": _labels(act.cls[keep].astype(np.int64), classes),
        "category": _labels(category[keep].astype(np.int64), list(kernels.CATEGORIES)),
        "launch_row": _nullable(act.api_row[keep], act.api_row[keep] < 0),
    })


def frame_table(frame: "pd.DataFrame") -> pa.Table:
    """An analysis table (pandas) as Arrow, for DuckDB: categorical text stays dictionary-encoded."""
    return pa.Table.from_pandas(frame, preserve_index=False)


def gaps_table(ctx: AnalysisContext) -> pa.Table:
    """The idle_gaps analysis's ``gaps`` table (built once in the session's context)."""
    idle_gaps = _analysis_modules()[2]
    return frame_table(idle_gaps.compute(ctx)["gaps"])


def analysis_result(ctx: AnalysisContext, name: str) -> "AnalysisResult":
    """The result of the registered analysis ``name`` on every rank of ``ctx``: it and the analyses
    it requires, then its cross-rank step, as ``traceview.analyses.run_all`` runs them (so the tables
    are the report's), on the session's context. A name no analysis has is a :class:`SqlError`."""
    from traceview.analyses import run_all  # registers every analysis
    from traceview.registry import ANALYSES

    if name not in ANALYSES:
        raise SqlError(f"this traceview has no {name} analysis, which the view needs")
    return run_all(ctx.trace, ctx.options, only=[name], context=ctx)[name]


def collectives_table(ctx: AnalysisContext) -> pa.Table:
    """The communication analysis's ``collectives`` table for this trace (every rank)."""
    communication = _analysis_modules()[1]
    return frame_table(communication.cross_rank_inputs(ctx).collectives)


# ------------------------------------------------------------------------------------ the session


def _events_view_sql() -> str:
    """``events``: every column of the schema in order, ``row`` first and ``end_ns`` after ``dur_ns``."""
    names = [f.name for f in EVENT_SCHEMA]
    head = ", ".join(names[: names.index("dur_ns") + 1])
    tail = ", ".join(names[names.index("dur_ns") + 1:])
    return f"CREATE VIEW events AS SELECT row, {head}, start_ns + dur_ns AS end_ns, {tail} FROM tv_events"


_LAUNCHES_SQL = f"""
CREATE VIEW launches AS
SELECT l.rank, l.src_row AS launch_row, l.dst_row AS gpu_row, a.name AS api, g.name AS name, g.kind AS gpu_kind,
       a.pid, a.tid, g.device, g.stream, g.correlation,
       a.start_ns AS launch_start_ns, a.dur_ns AS launch_dur_ns, a.end_ns AS launch_end_ns,
       g.start_ns AS gpu_start_ns, g.dur_ns AS gpu_dur_ns, g.end_ns AS gpu_end_ns,
       g.start_ns - a.end_ns AS queue_ns, greatest(g.start_ns - a.end_ns, 0) AS launch_delay_ns,
       coalesce(regexp_matches(a.name, '{GRAPH_LAUNCH_SQL}', 'i'), false) AS graph
FROM tv_links l JOIN events a ON a.row = l.src_row JOIN events g ON g.row = l.dst_row
WHERE l.type = 'launch'
"""

_OPS_SQL = """
CREATE VIEW ops AS
WITH issued AS (
    SELECT src_row AS row, count(*) AS runtime_calls FROM tv_links WHERE type = 'cpu_op' GROUP BY src_row),
gpu AS (
    SELECT c.src_row AS row, count(*) AS gpu_events, sum(g.dur_ns)::BIGINT AS gpu_dur_ns
    FROM tv_links c JOIN tv_links l ON l.src_row = c.dst_row AND l.type = 'launch'
    JOIN tv_events g ON g.row = l.dst_row
    WHERE c.type = 'cpu_op' GROUP BY c.src_row)
SELECT e.row, e.rank, e.name, e.category, e.start_ns, e.dur_ns, e.end_ns, e.pid, e.tid, e.external_id,
       e.input_dims, e.input_types, e.input_strides, e.concrete_inputs,
       coalesce(i.runtime_calls, 0) AS runtime_calls, coalesce(g.gpu_events, 0) AS gpu_events,
       coalesce(g.gpu_dur_ns, 0) AS gpu_dur_ns
FROM events e LEFT JOIN issued i ON i.row = e.row LEFT JOIN gpu g ON g.row = e.row
WHERE e.kind = 'cpu_op'
"""

_KERNELS_SQL = """
CREATE VIEW kernels AS
SELECT e.row, e.rank, e.device, e.stream, e.name, e.start_ns, e.dur_ns, e.end_ns, k.step, k.class, k.category,
       k.launch_row, e.correlation, e.grid_x, e.grid_y, e.grid_z, e.block_x, e.block_y, e.block_z
FROM tv_kernels k JOIN events e ON e.row = k.row
"""


class SqlSession:
    """One DuckDB connection over one trace's views. :meth:`arrow` / :meth:`df` run a query;
    the views that need the analyses are built on the first query that names them
    (:attr:`computed` lists them)."""

    def __init__(self, trace: Trace, options: Options | None = None) -> None:
        import duckdb

        self.trace = trace
        self.options = options or Options()
        #: what the computed views derive from the trace (activity, gaps), built once per session,
        #: on the first query that names one (a context imports the analyses; plain queries do not)
        self.context: AnalysisContext | None = None
        self.computed: list[str] = []
        #: the results of the analyses whose tables are views, by analysis (run once per session)
        self.results: dict[str, AnalysisResult] = {}
        self.con: duckdb.DuckDBPyConnection = duckdb.connect()
        scrubber = Scrubber(False)
        steps = trace.find_steps(self.options.step_marker)
        base = {
            "tv_events": events_table(trace),
            "tv_links": trace.links,
            "tv_steps": scrub_table(steps, scrubber, "steps"),
            "tv_memory": trace.memory,
            "tv_counters": scrub_table(trace.counters, scrubber, "counters"),
            "tv_ranks": ranks_table(trace, steps),
        }
        for name, table in base.items():
            self.con.register(name, table)
        for statement in (_events_view_sql(), _LAUNCHES_SQL, _OPS_SQL,
                          "CREATE VIEW links AS SELECT * FROM tv_links",
                          "CREATE VIEW steps AS SELECT *, end_ns - start_ns AS dur_ns FROM tv_steps",
                          "CREATE VIEW memory AS SELECT * FROM tv_memory",
                          "CREATE VIEW counters AS SELECT * FROM tv_counters",
                          "CREATE VIEW ranks AS SELECT * FROM tv_ranks"):
            self.con.execute(statement)
        # a query reads the views only: no files read or written, no extensions fetched
        self.con.execute("SET enable_external_access = false")

    # -- the views computed on demand ---------------------------------------------------------
    def _builders(self) -> dict[str, Callable[[], None]]:
        tables = {v.name: functools.partial(self._build_table_view, v) for v in VIEWS if v.table_of is not None}
        return {"kernels": self._build_kernels, "gaps": self._build_gaps, "collectives": self._build_collectives,
                **tables}

    def analysis_context(self) -> AnalysisContext:
        """The session's analysis context (made now if no computed view was built yet)."""
        if self.context is None:
            self.context = AnalysisContext(self.trace, self.options)
        return self.context

    def _build_kernels(self) -> None:
        self.con.register("tv_kernels", kernel_facts(self.analysis_context()))
        self.con.execute(_KERNELS_SQL)

    def _build_gaps(self) -> None:
        self.con.register("tv_gaps", scrub_table(gaps_table(self.analysis_context()), Scrubber(False), "gaps"))
        self.con.execute("CREATE VIEW gaps AS SELECT * FROM tv_gaps")

    def _build_collectives(self) -> None:
        table = scrub_table(collectives_table(self.analysis_context()), Scrubber(False), "collectives")
        self.con.register("tv_collectives", table)
        self.con.execute("CREATE VIEW collectives AS SELECT * FROM tv_collectives")

    def _build_table_view(self, view: View) -> None:
        """A view of an analysis's table, its declared columns in order, its text scrubbed."""
        assert view.table_of is not None
        analysis, table = view.table_of
        if analysis not in self.results:
            self.results[analysis] = analysis_result(self.analysis_context(), analysis)
        frame = self.results[analysis].tables.get(table)
        if frame is None:
            raise SqlError(f"{view.name}: the {analysis} analysis made no {table} table on this trace")
        self.con.register(f"tv_{view.name}", scrub_table(frame_table(frame), Scrubber(False), view.name))
        columns = ", ".join(c for c, _ in view.columns)
        try:
            self.con.execute(f"CREATE VIEW {view.name} AS SELECT {columns} FROM tv_{view.name}")
        except duckdb_error() as exc:
            raise SqlError(f"{view.name}: the {analysis} analysis's {table} table does not have the declared "
                           f"columns ({describe_error(exc)})") from None

    def prepare(self, query: str) -> None:
        """Build the computed views ``query`` names (by DuckDB's own parse of it)."""
        import duckdb

        try:
            named = {n.lower() for n in duckdb.get_table_names(query)}
        except duckdb.Error:
            # get_table_names binds as well as parses, and refuses some valid queries (QUALIFY with
            # GROUP BY ALL): then every computed view named as a word is built; a query that is
            # wrong fails next with DuckDB's own message
            named = {m.lower() for m in _WORDS.findall(query)}
        for name, build in self._builders().items():
            if name in named and name not in self.computed:
                build()
                self.computed.append(name)

    # -- queries ------------------------------------------------------------------------------
    def arrow(self, query: str) -> pa.Table:
        """The result of ``query`` as an Arrow table (128-bit integer sums narrowed to int64 where
        they fit). A query DuckDB refuses raises :class:`SqlError` (one line)."""
        import duckdb

        self.prepare(query)
        try:
            result = self.con.sql(query)
            table = result.to_arrow_table() if result is not None else pa.table({})
        except duckdb.Error as exc:
            raise SqlError(describe_error(exc)) from None
        return narrow_integers(table)

    def head(self, query: str, rows: int) -> tuple[pa.Table, int]:
        """The first ``rows`` rows of the result and how many rows it has in all, streamed: the rest
        is counted batch by batch, never held (a table of a million-row result)."""
        import duckdb

        self.prepare(query)
        kept: list[pa.RecordBatch] = []
        have = total = 0
        try:
            result = self.con.sql(query)
            if result is None:
                return pa.table({}), 0
            reader = result.to_arrow_reader()
            for batch in reader:
                total += batch.num_rows
                if have < rows:
                    kept.append(batch.slice(0, rows - have))
                    have += kept[-1].num_rows
            head = pa.Table.from_batches(kept, schema=reader.schema)
        except duckdb.Error as exc:
            raise SqlError(describe_error(exc)) from None
        return narrow_integers(head), total

    def df(self, query: str) -> "pd.DataFrame":
        """The result of ``query`` as a pandas DataFrame (integer columns with nulls: ``Int64``)."""
        return to_pandas(self.arrow(query))

    def columns(self, view: str) -> list[tuple[str, str]]:
        """(column, DuckDB type) of one view, building it when it needs the analyses."""
        if view not in VIEW_NAMES:
            raise SqlError(f"no view named {view!r} (views: {_VIEW_LIST})")
        self.prepare(f"SELECT * FROM {view}")
        return [(str(r[0]), str(r[1])) for r in self.con.execute(f"DESCRIBE {view}").fetchall()]

    def close(self) -> None:
        self.con.close()


def duckdb_error() -> type[Exception]:
    import duckdb

    return duckdb.Error


def describe_error(exc: Exception) -> str:
    """DuckDB's message as one line, with the views a query can name."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    first = lines[0] if lines else type(exc).__name__
    extra = []
    for line in lines[1:]:
        if line.startswith("Candidate bindings:") and len(line) <= 200:
            extra.append(line)
        elif line.startswith("LINE ") and len(line) <= 120:
            extra.append(f"at {line}")
    # DuckDB's own "Did you mean" may name its catalog tables (pg_enum) and never a view not built
    # yet (kernels): the suggestion is made here, among the views
    unknown = re.search(r"Table with name (\S+) does not exist", first)
    close = difflib.get_close_matches(unknown.group(1).lower(), VIEW_NAMES, n=1) if unknown else []
    if close:
        extra.insert(0, f'Did you mean "{close[0]}"?')
    detail = "".join(f" {e}" for e in extra)
    return f"SQL: {first}{detail} (views: {_VIEW_LIST}; traceview sql --views lists their columns)"


def narrow_integers(table: pa.Table) -> pa.Table:
    """DuckDB sums integers as 128-bit (decimal(38, 0) in Arrow): give them back as int64 where
    every value fits, so sums of ns stay exact integers in pandas, CSV and JSON."""
    for i, field in enumerate(table.schema):
        if pa.types.is_decimal(field.type) and field.type.scale == 0:
            try:
                table = table.set_column(i, pa.field(field.name, pa.int64()), pc.cast(table.column(i), pa.int64()))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue  # beyond int64: left as it is
    return table


def to_pandas(table: pa.Table) -> "pd.DataFrame":
    """Arrow -> pandas: integer columns holding nulls become ``Int64`` (not float), others as usual."""
    import pandas as pd

    frame = table.to_pandas()
    for field in table.schema:
        col = table.column(field.name)
        if pa.types.is_integer(field.type) and col.null_count:
            frame[field.name] = col.to_pandas(types_mapper={field.type: pd.Int64Dtype()}.get)
    return frame


def session(trace: Trace, options: Options | None = None) -> SqlSession:
    """A :class:`SqlSession` on ``trace``."""
    return SqlSession(trace, options)


def sql(source: Any, query: str, *, use_cache: bool = True, **options: Any) -> "pd.DataFrame":
    """Run ``query`` on trace files, a folder of per-rank files, or a loaded :class:`Trace`, and
    return a pandas DataFrame. ``options`` are :class:`Options` fields (``step_marker``,
    ``comm_patterns`` ...). The views: docs/sql.md or :func:`view_help`."""
    from traceview.api import load_inputs

    opts = Options(**options)
    trace = source if isinstance(source, Trace) else load_inputs(source, step_marker=opts.step_marker,
                                                                 cache=use_cache)
    conn = SqlSession(trace, opts)
    try:
        return conn.df(query)
    finally:
        conn.close()


__all__ = ["SqlError", "SqlSession", "VIEWS", "View", "session", "sql", "view_help", "describe_error"]
