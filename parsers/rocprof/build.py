"""One rocprofv3 run's tables into a :class:`traceview.model.Trace` (what becomes what: the package
docstring). Column operations only: no Python loop over records."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceview.errors import TraceFormatError
from traceview.model import (DeviceInfo, Kind, RankInfo, Trace, empty_counters, join_on_keys,
                             kind_array, make_counters_table, make_events_table, make_links_table,
                             steps_from_annotations)
from traceview.parsers.rocprof.files import RunFiles, read_table

#: ``Direction`` of a memory copy -> traceview's ``copy_kind``
COPY_KINDS = {"MEMORY_COPY_HOST_TO_DEVICE": "HtoD", "MEMORY_COPY_DEVICE_TO_HOST": "DtoH",
              "MEMORY_COPY_DEVICE_TO_DEVICE": "DtoD", "MEMORY_COPY_HOST_TO_HOST": "HtoH"}
#: marker domains whose records with a duration are ROCTx ranges
RANGE_DOMAINS = ("MARKER_CORE_API", "MARKER_CORE_RANGE_API")
FORMAT_VERSION = "rocprofv3 CSV"


@dataclass
class Parts:
    """The events of each file, as columns, before they are concatenated (one dict per file)."""

    blocks: list[dict[str, pa.Array]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def count(self, key: str, n: int) -> None:
        if n:
            self.counts[key] = self.counts.get(key, 0) + int(n)


def int_col(table: pa.Table, name: str) -> np.ndarray:
    # one chunk first: a chunked column's to_numpy imports pandas (1.3 s cold), which a parse needs not
    # (and an empty field is -1, absent, as traceview's ids are)
    column = pc.fill_null(table.column(name).combine_chunks(), -1)
    return column.to_numpy().astype(np.int64, copy=False)


def agent_numbers(column: pa.ChunkedArray, path: Path) -> np.ndarray:
    """``Agent 1`` (rocprofv3 >= ROCm 6.2) or ``1``: the agent's number."""
    digits = pc.utf8_trim_whitespace(pc.replace_substring(column, "Agent ", ""))
    try:
        return digits.cast(pa.int64()).to_numpy().astype(np.int64, copy=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise TraceFormatError(path, "has an agent id that is neither a number nor 'Agent N'",
                               "rocprofv3 writes Agent_Id as 'Agent N'") from None


def durations(start: np.ndarray, end: np.ndarray, parts: Parts, role: str) -> np.ndarray:
    dur = end - start
    parts.count(f"{role}.clamped_negative_duration", int((dur < 0).sum()))
    return np.maximum(dur, 0)


def block(kind: Kind | np.ndarray, category: pa.Array, name: pa.Array, start: np.ndarray, dur: np.ndarray,
          **columns: object) -> dict[str, object]:
    n = len(start)
    codes = np.full(n, int(kind), dtype=np.int8) if isinstance(kind, Kind) else kind.astype(np.int8)
    return {"kind": kind_array(codes), "category": category, "name": name, "start_ns": start, "dur_ns": dur,
            **columns}


def repeat(text: str, n: int) -> pa.Array:
    return pa.array(np.full(n, text, dtype=object), pa.string())


def kernel_block(table: pa.Table, path: Path, pid: int, parts: Parts, role: str) -> dict[str, object]:
    """Kernel dispatches (a kernel trace, or a counter collection's dispatches where there is none)."""
    start, end = int_col(table, "Start_Timestamp"), int_col(table, "End_Timestamp")
    n = table.num_rows
    if "Grid_Size_X" in table.column_names:
        dims = {axis: (int_col(table, f"Grid_Size_{axis.upper()}"), int_col(table, f"Workgroup_Size_{axis.upper()}"))
                for axis in "xyz"}
    else:  # a counter collection states the sizes as totals (one dimension)
        ones = np.ones(n, dtype=np.int64)
        dims = {"x": (int_col(table, "Grid_Size"), int_col(table, "Workgroup_Size")), "y": (ones, ones),
                "z": (ones, ones)}
    geometry: dict[str, object] = {}
    for axis, (grid, group) in dims.items():
        # rocprofv3's grid size counts work-items; traceview's grid counts workgroups (CUDA's blocks)
        geometry[f"grid_{axis}"] = np.where(group > 0, -(-grid // np.maximum(group, 1)), grid).astype(np.int32)
        geometry[f"block_{axis}"] = group.astype(np.int32)
    stream_col = "Stream_Id" if "Stream_Id" in table.column_names else "Queue_Id"
    parts.count(f"{role}.mapped", n)
    return block(Kind.KERNEL, repeat("kernel", n), table.column("Kernel_Name").combine_chunks(), start,
                 durations(start, end, parts, role), device=agent_numbers(table.column("Agent_Id"), path),
                 stream=int_col(table, stream_col), correlation=int_col(table, "Correlation_Id"),
                 pid=np.full(n, pid, dtype=np.int64), **geometry)


def api_block(table: pa.Table, role: str, parts: Parts) -> dict[str, object]:
    """HIP and HSA API calls: runtime calls on their thread, category the record's domain."""
    start, end = int_col(table, "Start_Timestamp"), int_col(table, "End_Timestamp")
    parts.count(f"{role}.mapped", table.num_rows)
    return block(Kind.RUNTIME, table.column("Domain").combine_chunks(), table.column("Function").combine_chunks(),
                 start, durations(start, end, parts, role), pid=int_col(table, "Process_Id"),
                 tid=int_col(table, "Thread_Id"), correlation=int_col(table, "Correlation_Id"))


def marker_block(table: pa.Table, parts: Parts) -> dict[str, object]:
    """ROCTx: ranges (core domain, a duration) are annotations of category ``roctx``; marks (no
    duration) are ``other``/``roctx_mark``; the ROCTx API's own calls and the other domains' records
    (profiler pause/resume, thread names) are ``other`` with the domain as category."""
    start, end = int_col(table, "Start_Timestamp"), int_col(table, "End_Timestamp")
    dur = durations(start, end, parts, "marker_api")
    domain = table.column("Domain").combine_chunks()
    name = table.column("Function").combine_chunks()
    core = pc.is_in(domain, pa.array(RANGE_DOMAINS)).to_numpy(zero_copy_only=False)
    api_call = pc.starts_with(name, "roctx").to_numpy(zero_copy_only=False)
    is_range = core & ~api_call & (dur > 0)
    is_mark = core & ~api_call & (dur == 0)
    kind = np.where(is_range, int(Kind.ANNOTATION), int(Kind.OTHER))
    category = pc.if_else(pa.array(is_range), "roctx", pc.if_else(pa.array(is_mark), "roctx_mark", domain))
    parts.count("marker_api.mapped", table.num_rows)
    parts.count("marker_api.ranges", int(is_range.sum()))
    parts.count("marker_api.marks", int(is_mark.sum()))
    return block(kind, category, name, start, dur, pid=int_col(table, "Process_Id"), tid=int_col(table, "Thread_Id"),
                 correlation=int_col(table, "Correlation_Id"))


def copy_block(table: pa.Table, path: Path, pid: int, parts: Parts) -> dict[str, object]:
    """Memory copies: ``Memcpy HtoD`` ..., on the GPU end of the copy (the destination of a host to
    device copy, else the source), stream ``Stream_Id`` (0 where the file has none)."""
    start, end = int_col(table, "Start_Timestamp"), int_col(table, "End_Timestamp")
    n = table.num_rows
    direction = table.column("Direction").combine_chunks()
    kinds = pa.array([COPY_KINDS.get(d, d.replace("MEMORY_COPY_", "")) for d in direction.dictionary_encode()
                      .dictionary.to_pylist()], pa.string())
    copy_kind = pa.DictionaryArray.from_arrays(direction.dictionary_encode().indices, kinds)
    to_device = pc.equal(direction, "MEMORY_COPY_HOST_TO_DEVICE").to_numpy(zero_copy_only=False)
    device = np.where(to_device, agent_numbers(table.column("Destination_Agent_Id"), path),
                      agent_numbers(table.column("Source_Agent_Id"), path))
    stream = int_col(table, "Stream_Id") if "Stream_Id" in table.column_names else np.zeros(n, dtype=np.int64)
    nbytes = table.column("Bytes").combine_chunks() if "Bytes" in table.column_names else None
    parts.count("memory_copy.mapped", n)
    return block(Kind.MEMCPY, repeat("memory_copy", n),
                 pc.binary_join_element_wise("Memcpy ", copy_kind.cast(pa.string()), ""), start,
                 durations(start, end, parts, "memory_copy"), device=device, stream=stream,
                 correlation=int_col(table, "Correlation_Id"), copy_kind=copy_kind, bytes=nbytes,
                 pid=np.full(n, pid, dtype=np.int64))


def concat_blocks(blocks: list[dict[str, object]]) -> tuple[dict[str, pa.Array], int]:
    """The blocks' columns concatenated (a column a block lacks gets its defaults there)."""
    sizes = [len(b["start_ns"]) for b in blocks]  # type: ignore[arg-type]
    tables = [make_events_table(dict(b), n) for b, n in zip(blocks, sizes)]
    if not tables:
        return {}, 0
    table = pa.concat_tables(tables).unify_dictionaries().combine_chunks()
    return {name: table.column(name).chunk(0) if table.num_rows else table.column(name).combine_chunks()
            for name in table.column_names}, table.num_rows


def launch_links(events: pa.Table) -> pa.Table:
    """Each HIP/HSA call to the kernels and copies of its correlation id (one process: the run's)."""
    kinds = events.column("kind").combine_chunks().indices.to_numpy(zero_copy_only=False)
    correlation = events.column("correlation").to_numpy()
    api = np.flatnonzero((kinds == int(Kind.RUNTIME)) & (correlation >= 0))
    gpu = np.flatnonzero(np.isin(kinds, [int(Kind.KERNEL), int(Kind.MEMCPY)]) & (correlation >= 0))
    left, right = join_on_keys([correlation[api]], [correlation[gpu]])
    src, dst = api[left], gpu[right]
    return make_links_table(np.zeros(len(src), dtype=np.int32), "launch", "correlation", src, dst)


def counter_table(counters: list[tuple[Path, pa.Table]], kernels: pa.Table | None, parts: Parts) -> pa.Table:
    """One sample per counter record: name the counter, series ``dispatch <id>``, at the start of the
    kernel dispatch the trace holds with that dispatch id (its own pass's start where none does).
    A dispatch id whose kernel has another name in the trace means another program: an error."""
    if not counters:
        return empty_counters()
    out = []
    for path, table in counters:
        dispatch = int_col(table, "Dispatch_Id")
        ts = int_col(table, "Start_Timestamp").copy()
        matched = np.zeros(len(dispatch), dtype=bool)
        if kernels is not None and kernels.num_rows:
            left, right = join_on_keys([dispatch], [int_col(kernels, "Dispatch_Id")])
            same = pc.equal(table.column("Kernel_Name").take(pa.array(left)),
                            kernels.column("Kernel_Name").take(pa.array(right))).to_numpy(zero_copy_only=False)
            if not same.all():
                first = int(dispatch[left[~same][0]])
                raise TraceFormatError(path, f"is a counter collection of another program: dispatch {first} "
                                             "ran another kernel than in the kernel trace",
                                       "give the folder of one run: move each run's files to a folder of its own")
            ts[left] = int_col(kernels, "Start_Timestamp")[right]
            matched[left] = True
        parts.count("counter", len(dispatch))
        parts.count("counter.dispatch_not_in_trace", int((~matched).sum()) if kernels is not None else 0)
        out.append(make_counters_table({
            "rank": np.zeros(len(dispatch), dtype=np.int32), "pid": int_col(table, "Process_Id"),
            "tid": int_col(table, "Thread_Id"), "name": table.column("Counter_Name").combine_chunks(),
            "series": pc.binary_join_element_wise("dispatch ", pa.array(dispatch).cast(pa.string()), ""),
            "ts_ns": ts, "value": table.column("Counter_Value").to_numpy()}))
    return pa.concat_tables(out).unify_dictionaries().combine_chunks()


def run_pid(tables: dict[str, pa.Table], path: Path) -> int:
    """The run's process: the one process of its API and marker traces (-1 when they have none)."""
    pids = np.unique(np.concatenate([np.empty(0, dtype=np.int64)] + [
        int_col(t, "Process_Id") for role, t in tables.items() if role.endswith("_api")]))
    if len(pids) > 1:
        raise TraceFormatError(path, f"holds API traces of {len(pids)} processes ({pids[0]}, {pids[1]}): "
                                     "more than one rocprofv3 run", "give the folder of one run")
    return int(pids[0]) if len(pids) else -1


def counter_kernels(counters: list[tuple[Path, pa.Table]]) -> pa.Table | None:
    """The kernel dispatches of the first counter collection (one row per dispatch): the run's
    kernels when it has no kernel trace."""
    if not counters:
        return None
    table = counters[0][1]
    dispatch = int_col(table, "Dispatch_Id")
    _, first = np.unique(dispatch, return_index=True)
    return table.take(pa.array(np.sort(first)))


@dataclass
class RunTables:
    """A run's records as tables with the CSV output's columns (from its CSVs, or from its JSON)."""

    tables: dict[str, pa.Table]
    counters: list[tuple[Path, pa.Table]]
    #: the file each role came from (errors name it)
    sources: dict[str, Path]
    #: the run's files by role, as ``RankInfo.raw_metadata["files"]`` lists them
    files: dict[str, str]
    format_version: str = FORMAT_VERSION
    #: the registered format's name (``RankInfo.source_format``)
    source_format: str = "rocprof"
    #: records read and not mapped, by reason (``skipped_<reason>`` fates: the JSON's other sections)
    skipped: dict[str, int] = field(default_factory=dict)


def read_run(run: RunFiles) -> RunTables:
    """The tables of a run's CSVs."""
    files = {role: p.name for role, p in run.files.items()}
    if run.counters:
        files["counter"] = ", ".join(p.name for p in run.counters)
    sources = dict(run.files)
    if run.counters:
        sources["counter"] = run.counters[0]
    return RunTables(tables={role: read_table(p, role) for role, p in run.files.items()},
                     counters=[(p, read_table(p, "counter")) for p in run.counters], sources=sources, files=files)


def build_trace(run: RunFiles, given: Path, step_marker: str | None) -> Trace:
    """The run's Trace: one rank (the run's process), its files read and joined."""
    return assemble(read_run(run), given, step_marker)


def event_blocks(rt: RunTables, pid: int, parts: Parts) -> tuple[list[dict[str, object]], pa.Table | None]:
    """Each role's events as a block of columns, and the kernels counters are joined to."""
    tables = rt.tables
    kernels = tables.get("kernel")
    blocks: list[dict[str, object]] = []
    if kernels is not None:
        blocks.append(kernel_block(kernels, rt.sources["kernel"], pid, parts, "kernel"))
    else:
        kernels = counter_kernels(rt.counters)
        if kernels is not None:
            blocks.append(kernel_block(kernels, rt.sources["counter"], pid, parts, "counter.dispatch_kernels"))
            parts.counts.pop("counter.dispatch_kernels.mapped", None)
            parts.count("counter.dispatch_kernels", kernels.num_rows)
    for role in ("hip_api", "hsa_api"):
        if role in tables:
            blocks.append(api_block(tables[role], role, parts))
    if "memory_copy" in tables:
        blocks.append(copy_block(tables["memory_copy"], rt.sources["memory_copy"], pid, parts))
    if "marker_api" in tables:
        blocks.append(marker_block(tables["marker_api"], parts))
    return blocks, kernels


def assemble(rt: RunTables, given: Path, step_marker: str | None) -> Trace:
    """The Trace of a run's tables: one rank, events, launch links, counters, every row counted."""
    parts = Parts()
    for role, table in rt.tables.items():
        parts.count(f"{role}.read", table.num_rows)
    parts.count("counter.read", sum(t.num_rows for _, t in rt.counters))
    pid = run_pid(rt.tables, given)
    blocks, kernels = event_blocks(rt, pid, parts)
    columns, n = concat_blocks(blocks)
    events = make_events_table(columns, n) if n else make_events_table({}, 0)
    counter_samples = counter_table(rt.counters, kernels, parts)
    for reason, n in rt.skipped.items():
        parts.count(f"skipped_{reason}", n)
    read = sum(v for k, v in parts.counts.items() if k.endswith(".read")) + sum(rt.skipped.values())
    mapped = sum(v for k, v in parts.counts.items() if k.endswith(".mapped"))
    metadata = rt.tables["agent_info"].num_rows if "agent_info" in rt.tables else 0
    counts = {"events_read": read, "mapped": mapped, **({"counter": parts.counts["counter"]}
                                                        if "counter" in parts.counts else {}),
              **({"metadata": metadata} if metadata else {}),
              **{k: v for k, v in parts.counts.items() if k != "counter"}}
    info = rank_info(rt, given, pid, events, counts)
    return Trace(events=events, links=launch_links(events) if n else make_links_table(
        np.empty(0, np.int32), "launch", "correlation", np.empty(0, np.int64), np.empty(0, np.int64)),
        ranks={0: info}, steps=steps_from_annotations(events, step_marker), warnings=[], counters=counter_samples)


def devices_of(events: pa.Table, agents: pa.Table | None) -> list[DeviceInfo]:
    """The GPU agents of ``agent_info.csv`` (``Logical_Node_Id`` is the ``N`` of ``Agent N``: name,
    compute units), else the agents the GPU rows ran on, unnamed."""
    if agents is not None and agents.num_rows:
        out = []
        for row in agents.to_pylist():  # one row per agent: a handful
            if str(row.get("Agent_Type", "")).upper() != "GPU":
                continue
            name = row.get("Product_Name") or row.get("Name") or ""
            out.append(DeviceInfo(id=int(row["Logical_Node_Id"]), name=str(name), sm_count=row.get("Cu_Count"),
                                  extra={k: row[k] for k in ("Name", "Wave_Front_Size", "Node_Id") if k in row}))
        return out
    device = events.column("device").to_numpy() if events.num_rows else np.empty(0, dtype=np.int32)
    return [DeviceInfo(id=int(a), name="", extra={"agent": f"Agent {int(a)}"}) for a in np.unique(device[device >= 0])]


def rank_info(rt: RunTables, given: Path, pid: int, events: pa.Table, counts: dict[str, int]) -> RankInfo:
    """The rank's metadata: the run's files by role, its process, its GPU agents."""
    warnings = []
    if counts.get("counter.dispatch_not_in_trace"):
        warnings.append(f"{counts['counter.dispatch_not_in_trace']:,} counter samples measured dispatches the kernel "
                        "trace does not hold: they keep their own pass's timestamps")
    clamped = sum(v for k, v in counts.items() if k.endswith("clamped_negative_duration"))
    if clamped:
        warnings.append(f"{clamped:,} records end before they start: their duration is 0")
    return RankInfo(rank=0, source_path=str(given), source_format=rt.source_format, format_version=rt.format_version,
                    rank_source=f"rocprofv3 run (process {pid})" if pid >= 0 else "rocprofv3 run",
                    devices=devices_of(events, rt.tables.get("agent_info")),
                    process_names={pid: ""} if pid >= 0 else {}, raw_metadata={"files": rt.files},
                    event_counts=counts, warnings=warnings)
