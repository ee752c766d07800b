"""rocprofv3's JSON output (``--output-format json``: ``<prefix>_results.json``), read into the same
tables as its CSVs (:mod:`.files`' columns), so one assembly (:func:`.build.assemble`) makes the Trace.

The layout, as rocprofiler-sdk's JSON writer (``source/lib/output/generateJSON.cpp``) and its tests
write and read it: ``{"rocprofiler-sdk-tool": [ {tool} ]}`` (one tool entry: one process; a bare
object is taken as that entry), where the entry holds ``metadata.pid``; ``agents`` (``id.handle``,
``type`` 1 CPU / 2 GPU, ``logical_node_id``, ``name``, ``product_name``, ``cu_count``...);
``counters`` (``id.handle``, ``name``); ``strings.buffer_records`` (per record kind, by its number:
``kind`` and its ``operations``' names) and ``strings.marker_api`` (ROCTx messages by correlation id);
``kernel_symbols`` (``kernel_id``, ``formatted_kernel_name``); ``buffer_records.kernel_dispatch``,
``hip_api``, ``hsa_api``, ``marker_api``, ``memory_copy`` (``kind``, ``operation``,
``correlation_id.internal``, ``start_timestamp``, ``end_timestamp``, ``thread_id``; a dispatch's
``dispatch_info`` with ``agent_id``/``queue_id`` handles, ``kernel_id``, ``dispatch_id``,
``workgroup_size``/``grid_size`` ``x, y, z``; a copy's ``src_agent_id``/``dst_agent_id``); and
``callback_records.counter_collection`` (``dispatch_data.dispatch_info``, ``records`` of
``counter_id.handle`` and ``value``, summed per counter over its dimension instances as the CSV's
``Counter_Value`` is). Agents are numbered by ``logical_node_id`` (the CSV's ``Agent N``).

The document is decoded whole (msgspec), and its records become columns one field at a time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from traceview.errors import TraceFormatError, os_error
from traceview.parsers.rocprof.build import RunTables

FORMAT_VERSION = "rocprofv3 JSON"
HINT = "rocprofv3 writes it with --output-format json; copy the whole file again"
#: buffer record sections read, and the role each becomes
SECTIONS = {"kernel_dispatch": "kernel", "hip_api": "hip_api", "hsa_api": "hsa_api", "memory_copy": "memory_copy",
            "marker_api": "marker_api"}


def tool_entry(path: Path) -> dict[str, Any]:
    """The one tool entry of the document (one process)."""
    try:
        doc = msgspec.json.decode(path.read_bytes())
    except OSError as exc:
        raise os_error(path, exc) from None
    except msgspec.DecodeError as exc:
        raise TraceFormatError(path, f"is not complete JSON ({str(exc)[:120]}): truncated or damaged", HINT) from None
    entry = doc.get("rocprofiler-sdk-tool") if isinstance(doc, dict) else None
    if isinstance(entry, list):
        if len(entry) != 1:
            raise TraceFormatError(path, f"holds {len(entry)} tool entries (processes); traceview reads one run "
                                         "per input", "write one JSON file per process (rocprofv3's default)")
        entry = entry[0]
    if not isinstance(entry, dict):
        raise TraceFormatError(path, "has no rocprofiler-sdk-tool entry", HINT)
    return entry


def handle(value: Any) -> int:
    return int(value.get("handle", -1)) if isinstance(value, dict) else int(value if value is not None else -1)


class Names:
    """The entry's string tables: record kinds and operations, kernels, agents, counters, messages."""

    def __init__(self, entry: dict[str, Any]) -> None:
        strings = entry.get("strings") or {}
        self.kinds = list(strings.get("buffer_records") or [])
        self.kernels = {int(k.get("kernel_id", i)): k.get("formatted_kernel_name") or k.get("kernel_name") or ""
                        for i, k in enumerate(entry.get("kernel_symbols") or []) if isinstance(k, dict)}
        self.agents = {handle(a.get("id")): a for a in entry.get("agents") or []}
        self.counters = {handle(c.get("id")): c.get("name", "") for c in entry.get("counters") or []}
        messages = strings.get("marker_api") or {}
        pairs = messages.items() if isinstance(messages, dict) else (
            (m.get("key"), m.get("value")) for m in messages if isinstance(m, dict))
        self.messages = {int(k): str(v) for k, v in pairs if k is not None}

    def kind(self, number: int) -> str:
        return str(self.kinds[number].get("kind", "")) if 0 <= number < len(self.kinds) else ""

    def operation(self, number: int, op: int) -> str:
        ops = self.kinds[number].get("operations", []) if 0 <= number < len(self.kinds) else []
        return str(ops[op]) if 0 <= op < len(ops) else ""

    def agent(self, value: Any) -> str:
        """``Agent N``, N the agent's logical node id (as the CSV writes it)."""
        agent = self.agents.get(handle(value))
        return f"Agent {agent.get('logical_node_id', handle(value))}" if agent else f"Agent {handle(value)}"


def ints(records: list[dict[str, Any]], *keys: str) -> pa.Array:
    """One integer column from a nested field of each record (-1 where absent)."""
    def get(record: dict[str, Any]) -> int:
        value: Any = record
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return handle(value) if isinstance(value, dict) else int(value) if value is not None else -1
    return pa.array([get(r) for r in records], pa.int64())


def common(records: list[dict[str, Any]]) -> dict[str, pa.Array]:
    return {"Correlation_Id": ints(records, "correlation_id", "internal"),
            "Start_Timestamp": ints(records, "start_timestamp"), "End_Timestamp": ints(records, "end_timestamp")}


def kernel_table(records: list[dict[str, Any]], names: Names) -> pa.Table:
    info = [r.get("dispatch_info") or {} for r in records]
    stream = "stream_id" if any("stream_id" in r for r in records) else None
    columns = {"Agent_Id": pa.array([names.agent(i.get("agent_id")) for i in info], pa.string()),
               "Queue_Id": ints(info, "queue_id"), "Dispatch_Id": ints(info, "dispatch_id"),
               "Kernel_Name": pa.array([names.kernels.get(int(i.get("kernel_id", -1)), "") for i in info]),
               **common(records),
               **{f"Workgroup_Size_{a.upper()}": ints(info, "workgroup_size", a) for a in "xyz"},
               **{f"Grid_Size_{a.upper()}": ints(info, "grid_size", a) for a in "xyz"}}
    if stream:
        columns["Stream_Id"] = ints(records, "stream_id")
    return pa.table(columns)


def api_table(records: list[dict[str, Any]], names: Names, pid: int, markers: bool) -> pa.Table:
    kinds = [int(r.get("kind", -1)) for r in records]
    ops = [names.operation(k, int(r.get("operation", -1))) for k, r in zip(kinds, records)]
    correlation = ints(records, "correlation_id", "internal")
    if markers:  # a ROCTx record is named by its message where the entry has one
        ops = [names.messages.get(c, op) for c, op in zip(correlation.to_pylist(), ops)]
    return pa.table({"Domain": pa.array([names.kind(k) for k in kinds], pa.string()),
                     "Function": pa.array(ops, pa.string()), "Process_Id": pa.array([pid] * len(records), pa.int64()),
                     "Thread_Id": ints(records, "thread_id"), **common(records)})


def copy_table(records: list[dict[str, Any]], names: Names) -> pa.Table:
    directions = [names.operation(int(r.get("kind", -1)), int(r.get("operation", -1))) for r in records]
    columns = {"Direction": pa.array(directions, pa.string()),
               "Source_Agent_Id": pa.array([names.agent(r.get("src_agent_id")) for r in records], pa.string()),
               "Destination_Agent_Id": pa.array([names.agent(r.get("dst_agent_id")) for r in records], pa.string()),
               **common(records)}
    if any("stream_id" in r for r in records):
        columns["Stream_Id"] = ints(records, "stream_id")
    if any("bytes" in r for r in records):
        columns["Bytes"] = ints(records, "bytes")
    return pa.table(columns)


def agent_table(names: Names) -> pa.Table:
    agents = list(names.agents.values())
    return pa.table({"Logical_Node_Id": ints(agents, "logical_node_id"),
                     "Agent_Type": pa.array([{1: "CPU", 2: "GPU"}.get(int(a.get("type", 0)), "") for a in agents]),
                     "Name": pa.array([str(a.get("name", "")) for a in agents]),
                     "Product_Name": pa.array([str(a.get("product_name", "")) for a in agents]),
                     "Cu_Count": ints(agents, "cu_count"), "Wave_Front_Size": ints(agents, "wave_front_size")})


def counter_table(records: list[dict[str, Any]], names: Names, pid: int) -> pa.Table:
    """One row per (dispatch record, counter), the counter's values summed over its instances."""
    rows: list[tuple[dict[str, Any], dict[str, Any], str, float]] = []
    for record in records:
        info = (record.get("dispatch_data") or {}).get("dispatch_info") or {}
        sums: dict[str, float] = {}
        for sample in record.get("records") or []:
            name = names.counters.get(handle(sample.get("counter_id")), str(handle(sample.get("counter_id"))))
            sums[name] = sums.get(name, 0.0) + float(sample.get("value", 0.0))
        rows.extend((record, info, name, value) for name, value in sums.items())
    recs, infos = [r[0] for r in rows], [r[1] for r in rows]
    grid = [int(i.get("grid_size", {}).get("x", 1)) * int(i.get("grid_size", {}).get("y", 1))
            * int(i.get("grid_size", {}).get("z", 1)) for i in infos]
    group = [int(i.get("workgroup_size", {}).get("x", 1)) * int(i.get("workgroup_size", {}).get("y", 1))
             * int(i.get("workgroup_size", {}).get("z", 1)) for i in infos]
    return pa.table({"Correlation_Id": ints(infos, "correlation_id", "internal"),
                     "Dispatch_Id": ints(infos, "dispatch_id"),
                     "Agent_Id": pa.array([names.agent(i.get("agent_id")) for i in infos], pa.string()),
                     "Queue_Id": ints(infos, "queue_id"), "Process_Id": pa.array([pid] * len(rows), pa.int64()),
                     "Thread_Id": ints(recs, "thread_id"),
                     "Kernel_Name": pa.array([names.kernels.get(int(i.get("kernel_id", -1)), "") for i in infos],
                                             pa.string()),
                     "Grid_Size": pa.array(grid, pa.int64()), "Workgroup_Size": pa.array(group, pa.int64()),
                     "Counter_Name": pa.array([r[2] for r in rows], pa.string()),
                     "Counter_Value": pa.array([r[3] for r in rows], pa.float64()),
                     "Start_Timestamp": ints(recs, "start_timestamp"), "End_Timestamp": ints(recs, "end_timestamp")})


def read_json_run(path: Path) -> RunTables:
    """The run of one JSON file, as the tables its CSVs would have held."""
    entry = tool_entry(path)
    names = Names(entry)
    pid = int((entry.get("metadata") or {}).get("pid", -1))
    buffers = entry.get("buffer_records") or {}
    tables: dict[str, pa.Table] = {}
    for section, role in SECTIONS.items():
        records = [r for r in buffers.get(section) or [] if isinstance(r, dict)]
        if not records:
            continue
        if role == "kernel":
            tables[role] = kernel_table(records, names)
        elif role == "memory_copy":
            tables[role] = copy_table(records, names)
        else:
            tables[role] = api_table(records, names, pid, markers=role == "marker_api")
    if names.agents:
        tables["agent_info"] = agent_table(names)
    collected = [r for r in (entry.get("callback_records") or {}).get("counter_collection") or []
                 if isinstance(r, dict)]
    counters = [(path, counter_table(collected, names, pid))] if collected else []
    # the sections traceview does not map (RCCL, allocations, scratch memory, PC samples ...): counted
    skipped = {section: len(records) for section, records in buffers.items()
               if section not in SECTIONS and isinstance(records, list) and records}
    return RunTables(tables=tables, counters=counters, sources=dict.fromkeys([*tables, "counter"], path),
                     skipped=skipped,
                     files={"json": path.name}, format_version=FORMAT_VERSION,
                     source_format="rocprof-json")
