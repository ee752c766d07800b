"""The trace, or a time window of it, as Chrome trace JSON that the Perfetto UI (ui.perfetto.dev) and
chrome://tracing open, with traceview's findings and idle gaps added as annotation tracks.

Layout (Chrome Trace Event Format, "JSON Object Format"):

* one process per rank and source process for CPU activity (``rank R: <process name>``), one thread
  per source thread: CPU ops, Python functions, annotations, runtime/driver calls;
* one process per rank and GPU (``rank R: GPU D``), one thread per stream: kernels, copies, sets,
  GPU annotations; the GPU process also holds the annotation threads ``traceview: idle gaps`` and
  ``traceview: F<id> ...`` (one thread per finding, so findings never overlap on a track);
* findings that name no GPU interval go to one ``traceview: job findings`` process;
* flow events (``ph`` ``s``/``f``, category ``launch``) from each launch call to its GPU activity;
* the critical path (the ``critical_path`` analysis's ``segments`` table, docs/metrics.md): every
  exported event with a segment on the path has the arg ``critical_path: true``, and one process
  per rank, ``rank R: critical path``, sorted just above the rank's own processes, holds one slice
  per segment (``category: event``), so the path reads left to right across host and GPU.

Times are microseconds since the trace's first event (``ts``, with ns as 3 decimals: absolute
epoch microseconds with ns would exceed a double's precision); ``otherData.trace_start_ns`` keeps
the origin. Everything shown is read from the Trace and the one Report: the gaps are the report's
gaps table (its largest gaps, as cut by the report), findings are the report's, in its order and
with its ids, the critical path is the analysis's segments (whole from a :class:`Report` made or
cached in process; from a report's JSON only the rows it kept, and ``otherData.critical_path``
says so); nothing is recomputed. Every string from the trace is scrubbed of secrets.

The events are written with Arrow compute kernels on whole columns (no per-event Python loop): each
distinct name is escaped and scrubbed once, then taken by its dictionary index.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceview.errors import TraceviewError
from traceview.model import GPU_KINDS, KINDS, Trace
from traceview.secrets import scrub_text

#: tids of the annotation threads inside a GPU process (above any stream id a profiler gives)
GAPS_TID = 2_000_000_000
FINDING_TID_BASE = 2_000_000_001
#: the category of launch -> GPU activity flow events
FLOW_CATEGORY = "launch"
#: the first tid of the critical-path thread(s) in a rank's critical-path process (one more per
#: lane: steps whose windows overlap, which PyTorch's ProfilerStep ranges can, get separate lanes)
PATH_TID = 1


@dataclass(frozen=True)
class Window:
    """The exported span, ns since the trace's first event (``start_ns`` inclusive, ``end_ns``
    exclusive); events overlapping it are kept and clipped to it."""

    start_ns: int
    end_ns: int


def window_from_ms(trace: Trace, from_ms: float | None, to_ms: float | None) -> Window:
    """The window of ``--from MS --to MS`` (ms since the first event); the whole trace by default.
    A window that is empty or outside the trace is a :class:`TraceviewError` (one line, exit 2)."""
    span_ns = _span_ns(trace)
    start = 0 if from_ms is None else int(round(from_ms * 1e6))
    end = span_ns + 1 if to_ms is None else int(round(to_ms * 1e6))
    if start < 0 or end <= start:
        raise TraceviewError(f"--from {from_ms} --to {to_ms}: the window must start at 0 ms or later and end after "
                             "it starts (milliseconds since the trace's first event)")
    if start > span_ns:
        raise TraceviewError(f"--from {from_ms}: the trace lasts {span_ns / 1e6:.3f} ms; choose a start inside it")
    return Window(start, end)


def _span_ns(trace: Trace) -> int:
    if trace.events.num_rows == 0:
        return 0
    ends = pc.add(trace.events.column("start_ns"), trace.events.column("dur_ns"))
    return int(pc.max(ends).as_py()) - trace.start_ns


def export_chrome_trace(trace: Trace, report: Mapping[str, Any], window: Window | None = None) -> str:
    """The Chrome trace JSON text of ``trace`` (within ``window``) with ``report``'s findings and gaps."""
    origin = trace.start_ns
    window = window or Window(0, _span_ns(trace) + 1)
    events = trace.events
    rel_start = pc.subtract(events.column("start_ns"), origin).to_numpy()
    rel_end = rel_start + events.column("dur_ns").to_numpy()
    keep = (rel_end >= window.start_ns) & (rel_start < window.end_ns)
    keep &= (rel_end > window.start_ns) | (rel_start >= window.start_ns)  # zero-length events at the edge
    rows = np.flatnonzero(keep)
    gpus = active_gpus(trace)
    processes = ProcessMap(trace, rows, annotated_gpus(report, gpus))
    notes = _annotations(trace, report, window, processes, gpus)
    path = PathSegments.of(report)
    on_path = path.event_mask(trace.num_events)[rows] if path is not None else None
    path_lines, path_tracks, exported = path.lines(trace, processes, window) if path is not None else ("", [], 0)
    parts = [
        _metadata_events(trace, processes, notes.tracks, path_tracks),
        _event_lines(trace, rows, processes, window, on_path),
        _flow_lines(trace, keep, processes, window),
        notes.lines,
        path_lines,
    ]
    body = ",\n".join(p for p in parts if p)
    other: dict[str, Any] = {"generator": "traceview export-perfetto", "trace_start_ns": origin,
                             "window_ns": [window.start_ns, window.end_ns],
                             "findings": len(report.get("findings", [])),
                             "schema_version": report.get("schema_version")}
    if path is not None:
        other["critical_path"] = {"segments": path.total_rows, "exported": exported, "complete": path.complete}
    return ('{"displayTimeUnit":"ns","otherData":' + json.dumps(other) + ',"traceEvents":[\n' + body + "\n]}\n")


# ------------------------------------------------------------------------------------ processes


class ProcessMap:
    """Output pids: one per (rank, CPU process) and one per (rank, GPU), numbered in rank order."""

    def __init__(self, trace: Trace, rows: np.ndarray, annotated_gpus: set[tuple[int, int]]) -> None:
        kinds = trace.kind_codes()[rows]
        is_gpu = np.isin(kinds, [int(k) for k in GPU_KINDS])
        rank = trace.column("rank")[rows].astype(np.int64)
        ident = np.where(is_gpu, trace.column("device")[rows], trace.column("pid")[rows]).astype(np.int64)
        keys = np.stack([rank, is_gpu.astype(np.int64), ident], axis=1) if rows.size else np.zeros((0, 3), np.int64)
        # GPUs with annotations but no exported event (outside the window) still get their process
        extra = np.array([[r, 1, d] for r, d in sorted(annotated_gpus)], dtype=np.int64).reshape(-1, 3)
        self.keys, inverse = np.unique(np.concatenate([keys, extra]), axis=0, return_inverse=True)
        self.event_pids = inverse.reshape(-1)[: rows.size] + 1
        self.is_gpu = is_gpu
        self._index = {tuple(int(x) for x in k): i + 1 for i, k in enumerate(self.keys)}
        self.job_pid = len(self.keys) + 1
        ranks = np.unique(self.keys[:, 0]) if len(self.keys) else np.zeros(0, np.int64)
        #: each rank's critical-path process, after the job findings process
        self.path_pids = {int(r): self.job_pid + 1 + i for i, r in enumerate(ranks.tolist())}
        first_pid = {int(r): int(np.flatnonzero(self.keys[:, 0] == r)[0]) + 1 for r in ranks.tolist()}
        self._path_sort = {pid: 2 * first_pid[r] - 1 for r, pid in self.path_pids.items()}

    def sort_index(self, pid: int) -> int:
        """Where process ``pid`` is listed: each rank's critical-path process just above the rank's
        first process, the rest in pid order (twice the pid, leaving the odd places for the paths)."""
        return self._path_sort.get(pid, 2 * pid)

    def gpu_pid(self, rank: int, device: int) -> int | None:
        return self._index.get((rank, 1, device))


def active_gpus(trace: Trace) -> dict[int, list[int]]:
    """Per rank, the devices with GPU events (sorted)."""
    gpu = np.isin(trace.kind_codes(), [int(k) for k in GPU_KINDS])
    pairs = np.unique(np.stack([trace.column("rank")[gpu], trace.column("device")[gpu]], axis=1), axis=0)
    out: dict[int, list[int]] = {}
    for rank, device in pairs.tolist():
        out.setdefault(int(rank), []).append(int(device))
    return out


def finding_spans(finding: Mapping[str, Any], gpus: Mapping[int, list[int]]) -> list[tuple[int, int, int, int]]:
    """A finding's GPU intervals as (rank, device, start ns, end ns) on the trace's clock: the
    report's claimed intervals, else its time range on its rank's first GPU; none for the rest."""
    spans = [(int(r), int(d), int(a), int(b))
             for r, d, a, b in (finding.get("claims") or {}).get("largest_intervals") or []]
    rng, rank = finding.get("time_range_ns"), finding.get("rank")
    if not spans and rng and rank is not None and gpus.get(int(rank)):
        spans.append((int(rank), gpus[int(rank)][0], int(rng[0]), int(rng[1])))
    return spans


def annotated_gpus(report: Mapping[str, Any], gpus: Mapping[int, list[int]]) -> set[tuple[int, int]]:
    """The (rank, device) pairs the gaps and findings are drawn on."""
    pairs = {(int(g["rank"]), int(g["device"])) for g in gap_rows(report)}
    for finding in report.get("findings", []):
        pairs.update((r, d) for r, d, _, _ in finding_spans(finding, gpus))
    return pairs


def gap_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The report's gaps (its ``idle_gaps`` ``gaps`` table: the largest, as the report keeps them)."""
    gaps = (((report.get("analyses") or {}).get("idle_gaps") or {}).get("tables") or {}).get("gaps") or {}
    return [g for g in gaps.get("rows", []) if g.get("start_ns") is not None and g.get("device") is not None]


def _process_names(trace: Trace, processes: ProcessMap) -> Iterable[tuple[int, str]]:
    for i, (rank, gpu, ident) in enumerate(processes.keys):
        info = trace.ranks.get(int(rank))
        if gpu:
            yield i + 1, f"rank {rank}: GPU {ident}"
        else:
            label = (info.process_names.get(int(ident)) if info else None) or f"process {ident}"
            yield i + 1, f"rank {rank}: {scrub_text(str(label))} (pid {ident})"


def _metadata_events(trace: Trace, processes: ProcessMap, tracks: list[tuple[int, int, str]],
                     path_tracks: list[tuple[int, int, str]]) -> str:
    """Process and thread names and their order (``ph`` ``M``)."""
    lines = []
    path_processes = [(processes.path_pids[r], f"rank {r}: critical path") for r in sorted(processes.path_pids)
                      if any(pid == processes.path_pids[r] for pid, _, _ in path_tracks)]
    for pid, name in [*_process_names(trace, processes), (processes.job_pid, "traceview: job findings"),
                      *path_processes]:
        lines.append(_meta(pid, 0, "process_name", name))
        lines.append(json.dumps({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                                 "args": {"sort_index": processes.sort_index(pid)}}))
    for pid, tid, name in path_tracks:
        lines.append(_meta(pid, tid, "thread_name", name))
    for i, (rank, gpu, ident) in enumerate(processes.keys):
        info = trace.ranks.get(int(rank))
        if gpu or info is None:
            continue
        for key, name in info.thread_names.items():
            pid_text, _, tid_text = str(key).partition(":")
            if pid_text == str(ident) and tid_text.lstrip("-").isdigit():
                lines.append(_meta(i + 1, int(tid_text), "thread_name", scrub_text(str(name))))
    for pid, tid, name in tracks:
        lines.append(_meta(pid, tid, "thread_name", name))
        lines.append(json.dumps({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                                 "args": {"sort_index": -1 if tid >= GAPS_TID else tid}}))
    return ",\n".join(lines)


def _meta(pid: int, tid: int, what: str, name: str) -> str:
    return json.dumps({"ph": "M", "name": what, "pid": pid, "tid": tid, "args": {"name": name}}, ensure_ascii=False)


# ------------------------------------------------------------------------------------ events


def _us_text(ns: np.ndarray) -> pa.Array:
    """Microseconds with ns as 3 decimals, as text (``12.345``), for non-negative ns."""
    ns = np.asarray(ns, dtype=np.int64)
    whole = pc.cast(pa.array(ns // 1000), pa.string())
    frac = pc.utf8_lpad(pc.cast(pa.array(ns % 1000), pa.string()), 3, "0")
    return pc.binary_join_element_wise(whole, frac, ".")


def _json_strings(values: Iterable[Any]) -> list[str]:
    return [json.dumps(scrub_text(str(v or "")), ensure_ascii=False) for v in values]


def _dict_text(column: pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """A dictionary column's values at ``rows`` as scrubbed JSON strings: each distinct value once."""
    arr = column.combine_chunks()
    if not isinstance(arr, pa.DictionaryArray):
        arr = arr.dictionary_encode()
    quoted = pa.array(_json_strings(arr.dictionary.to_pylist()), pa.string())
    indices = arr.indices.take(pa.array(rows)).fill_null(0) if len(quoted) else pa.nulls(len(rows), pa.int32())
    return quoted.take(indices) if len(quoted) else pa.array(['""'] * len(rows))


def _num_text(trace: Trace, name: str, rows: np.ndarray) -> pa.Array:
    return pc.cast(trace.events.column(name).take(pa.array(rows)), pa.string())


def _optional_arg(trace: Trace, key: str, names: tuple[str, ...], rows: np.ndarray) -> pa.Array:
    """``,"key":"a,b,c"`` where the columns ``names`` are all set, else empty text."""
    cols = [trace.events.column(n).take(pa.array(rows)) for n in names]
    valid = cols[0].is_valid()
    texts = [pc.cast(c, pa.string()).fill_null("") for c in cols]
    joined = pc.binary_join_element_wise(*texts, "x") if len(texts) > 1 else texts[0]
    quote = '"' if len(texts) > 1 else ""
    text = pc.binary_join_element_wise(f',"{key}":{quote}', joined, quote, "")
    return pc.if_else(valid, text, "")


def _event_lines(trace: Trace, rows: np.ndarray, processes: ProcessMap, window: Window,
                 on_path: np.ndarray | None = None) -> str:
    """One complete event (``ph`` ``X``) per kept event, clipped to the window; ``on_path`` (per
    kept event): the arg ``critical_path: true`` where set."""
    if rows.size == 0:
        return ""
    origin = trace.start_ns
    start = trace.column("start_ns")[rows] - origin
    end = start + trace.column("dur_ns")[rows]
    start_c, end_c = np.maximum(start, window.start_ns), np.minimum(end, window.end_ns)
    tid = np.where(processes.is_gpu, trace.column("stream")[rows], trace.column("tid")[rows])
    kind_names = pa.array([json.dumps(k) for k in KINDS]).take(pa.array(trace.kind_codes()[rows].astype(np.int32)))
    pieces = ['{"ph":"X","name":', _dict_text(trace.events.column("name"), rows), ',"cat":', kind_names,
              ',"ts":', _us_text(start_c), ',"dur":', _us_text(end_c - start_c),
              ',"pid":', pc.cast(pa.array(processes.event_pids), pa.string()),
              ',"tid":', pc.cast(pa.array(tid), pa.string()),
              ',"args":{"rank":', _num_text(trace, "rank", rows),
              ',"category":', _dict_text(trace.events.column("category"), rows),
              ',"correlation":', _num_text(trace, "correlation", rows),
              ',"external id":', _num_text(trace, "external_id", rows),
              ',"device":', _num_text(trace, "device", rows),
              ',"stream":', _num_text(trace, "stream", rows),
              _optional_arg(trace, "grid", ("grid_x", "grid_y", "grid_z"), rows),
              _optional_arg(trace, "block", ("block_x", "block_y", "block_z"), rows),
              _optional_arg(trace, "bytes", ("bytes",), rows),
              "" if on_path is None else pc.if_else(pa.array(on_path), ',"critical_path":true', ""), "}}"]
    return _join_rows(pieces, rows.size)


def _join_rows(pieces: list[Any], n: int) -> str:
    arrays = [p if isinstance(p, (pa.Array, pa.ChunkedArray)) else pa.array([p] * n, pa.string()) for p in pieces]
    lines = pc.binary_join_element_wise(*arrays, "")
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    # large strings: the joined text of a big trace passes the 2 GiB offsets of plain strings
    listed = pa.LargeListArray.from_arrays(pa.array([0, n], pa.int64()), lines.cast(pa.large_string()))
    return str(pc.binary_join(listed, pa.scalar(",\n", pa.large_string()))[0].as_py())


def _flow_lines(trace: Trace, keep: np.ndarray, processes: ProcessMap, window: Window) -> str:
    """A flow start (``s``) on each launch call and its end (``f``, bound to the enclosing slice)
    on the GPU activity it launched, for links whose both ends are exported."""
    src, dst = trace.launch_links()
    both = keep[src] & keep[dst] if src.size else np.zeros(0, bool)
    src, dst = src[both], dst[both]
    if src.size == 0:
        return ""
    pid_of_row = np.zeros(keep.size, np.int64)
    pid_of_row[np.flatnonzero(keep)] = processes.event_pids
    origin = trace.start_ns
    ids = pc.cast(pa.array(np.arange(1, src.size + 1)), pa.string())
    ends = []
    for ph, rows, tid_col, extra in (("s", src, "tid", ""), ("f", dst, "stream", ',"bp":"e"')):
        ts = np.clip(trace.column("start_ns")[rows] - origin, window.start_ns, window.end_ns - 1)
        tid = pc.cast(pa.array(trace.column(tid_col)[rows]), pa.string())
        ends.append(_join_rows([f'{{"ph":"{ph}","name":"launch","cat":"{FLOW_CATEGORY}","id":', ids,
                                ',"ts":', _us_text(ts), ',"pid":', pc.cast(pa.array(pid_of_row[rows]), pa.string()),
                                ',"tid":', tid, f"{extra}}}"], src.size))
    return ",\n".join(ends)


# ------------------------------------------------------------------------------------ annotations


@dataclass
class Annotations:
    lines: str
    tracks: list[tuple[int, int, str]]  # (pid, tid, thread name)


def _slice(name: str, pid: int, tid: int, start_ns: int, end_ns: int, window: Window, args: Mapping[str, Any]
           ) -> str | None:
    start, end = max(start_ns, window.start_ns), min(end_ns, window.end_ns)
    if end < start or start_ns >= window.end_ns or end_ns < window.start_ns:
        return None
    return json.dumps({"ph": "X", "name": scrub_text(name), "cat": "traceview", "ts": round(start / 1000, 3),
                       "dur": round((end - start) / 1000, 3), "pid": pid, "tid": tid, "args": args},
                      ensure_ascii=False, default=str)


def _annotations(trace: Trace, report: Mapping[str, Any], window: Window, processes: ProcessMap,
                 gpus: Mapping[int, list[int]]) -> Annotations:
    lines: list[str] = []
    tracks: dict[tuple[int, int], str] = {}
    origin = trace.start_ns
    for gap in gap_rows(report):
        pid = processes.gpu_pid(int(gap["rank"]), int(gap["device"]))
        if pid is None:
            continue
        args = {k: gap.get(k) for k in ("rank", "device", "step", "dur_ns", "cause", "cpu_context")}
        line = _slice(f"idle: {gap.get('cause')}", pid, GAPS_TID, int(gap["start_ns"]) - origin,
                      int(gap["end_ns"]) - origin, window, scrub_args(args))
        if line:
            lines.append(line)
            tracks[(pid, GAPS_TID)] = "traceview: idle gaps (the report's largest)"
    for number, finding in enumerate(report.get("findings", [])):
        lines.extend(_finding_slices(finding, number, trace, window, processes, tracks, gpus))
    return Annotations(",\n".join(lines), [(p, t, n) for (p, t), n in sorted(tracks.items())])


def scrub_args(args: Mapping[str, Any]) -> dict[str, Any]:
    return {k: scrub_text(v) if isinstance(v, str) else v for k, v in args.items()}


def _finding_slices(finding: Mapping[str, Any], number: int, trace: Trace, window: Window, processes: ProcessMap,
                    tracks: dict[tuple[int, int], str], gpus: Mapping[int, list[int]]) -> list[str]:
    """A finding's slices: on its GPU intervals (:func:`finding_spans`), else one slice over the
    window on the job findings process."""
    origin = trace.start_ns
    name = f"{finding.get('id')} {finding.get('severity')}: {finding.get('title')}"
    args = scrub_args({"id": finding.get("id"), "code": finding.get("code"), "severity": finding.get("severity"),
                       "cost_ns_per_step": finding.get("cost_ns_per_step"), "cost_share": finding.get("cost_share"),
                       "recommendation": finding.get("recommendation"), "parent": finding.get("parent")})
    tid = FINDING_TID_BASE + number
    track = f"traceview: {finding.get('id')} {finding.get('code')}"
    spans = [(processes.gpu_pid(r, d), a - origin, b - origin) for r, d, a, b in finding_spans(finding, gpus)]
    if not spans:
        spans.append((processes.job_pid, window.start_ns, min(window.end_ns, _span_ns(trace))))
    out = []
    for pid, start, end in spans:
        if pid is None:
            continue
        line = _slice(name, pid, tid, start, end, window, args)
        if line:
            out.append(line)
            tracks[(pid, tid)] = scrub_text(track)
    return out


# ------------------------------------------------------------------------------------ critical path


#: the columns of the segments table the export reads
SEGMENT_COLUMNS = ("rank", "step", "start_ns", "end_ns", "category", "name", "row")


@dataclass
class PathSegments:
    """The ``critical_path`` analysis's ``segments`` as columns (read, never recomputed): ``complete``
    is false when only a report's kept rows were available (``total_rows`` of them in all)."""

    rank: np.ndarray
    step: np.ndarray  # -1: a whole-trace window (a rank without steps)
    start_ns: np.ndarray
    end_ns: np.ndarray
    category: pa.Array
    name: pa.Array
    row: np.ndarray  # -1: no event (untraced host time, a lag between events)
    total_rows: int
    complete: bool

    @classmethod
    def of(cls, report: Mapping[str, Any]) -> PathSegments | None:
        """The segments of ``report``: the whole table of a :class:`~traceview.report.Report` (made in
        this process or read from the report cache), else the rows its JSON kept; None without them."""
        table = getattr(report, "table", None)
        frame = table("critical_path", "segments") if callable(table) else None
        if frame is not None and len(frame.columns):
            columns = pa.Table.from_pandas(frame[list(SEGMENT_COLUMNS)], preserve_index=False)
            total = len(frame)
        else:
            section = (((report.get("analyses") or {}).get("critical_path") or {}).get("tables") or {}).get("segments")
            if not section:
                return None
            rows = section.get("rows") or []
            types = {"category": pa.string(), "name": pa.string()}
            columns = pa.table({c: pa.array([r.get(c) for r in rows], types.get(c, pa.int64()))
                                for c in SEGMENT_COLUMNS})
            total = int(section.get("total_rows") or len(rows))

        def ints(name: str) -> np.ndarray:
            return np.asarray(pc.fill_null(pc.cast(columns.column(name), pa.int64()), -1).to_numpy(), np.int64)

        def text(name: str) -> pa.Array:
            return pc.fill_null(pc.cast(columns.column(name), pa.string()), "").combine_chunks()

        return cls(ints("rank"), ints("step"), ints("start_ns"), ints("end_ns"), text("category"), text("name"),
                   ints("row"), total, columns.num_rows == total)

    def event_mask(self, num_events: int) -> np.ndarray:
        """Per event of the trace: whether a segment of the path is (part of) it."""
        mask = np.zeros(num_events, bool)
        rows = self.row[(self.row >= 0) & (self.row < num_events)]
        mask[rows] = True
        return mask

    def lanes(self) -> np.ndarray:
        """Per segment its lane on its rank's track: 0, or the next free one where its step's window
        overlaps an earlier step's (slices on one thread must nest). A loop over windows, not segments."""
        keys, inverse = np.unique(np.stack([self.rank, self.step], axis=1), axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        starts = np.full(len(keys), np.iinfo(np.int64).max)
        ends = np.full(len(keys), np.iinfo(np.int64).min)
        np.minimum.at(starts, inverse, self.start_ns)
        np.maximum.at(ends, inverse, self.end_ns)
        window_lane = np.zeros(len(keys), np.int64)
        lane_ends: dict[int, list[int]] = {}  # per rank, the end of each lane's last window
        for w in np.lexsort((starts, keys[:, 0])).tolist():
            taken = lane_ends.setdefault(int(keys[w, 0]), [])
            free = next((i for i, e in enumerate(taken) if e <= starts[w]), len(taken))
            taken[free:free + 1] = [int(ends[w])]
            window_lane[w] = free
        return window_lane[inverse]

    def lines(self, trace: Trace, processes: ProcessMap, window: Window) -> tuple[str, list[tuple[int, int, str]], int]:
        """One slice (``cat`` ``traceview``) per segment inside ``window`` on its rank's critical-path
        process; the tracks drawn; how many segments were exported."""
        origin = trace.start_ns
        start, end = self.start_ns - origin, self.end_ns - origin
        pid = np.zeros(self.rank.size, np.int64)
        for rank, path_pid in processes.path_pids.items():
            pid[self.rank == rank] = path_pid
        keep = (end > window.start_ns) & (start < window.end_ns) & (pid > 0)
        if not keep.any():
            return "", [], 0
        tid = PATH_TID + self.lanes()
        idx = np.flatnonzero(keep)
        take = pa.array(idx)
        start_c, end_c = np.maximum(start[idx], window.start_ns), np.minimum(end[idx], window.end_ns)
        category, name = self.category.take(take), self.name.take(take)
        label = pc.if_else(pc.equal(name, ""), category, pc.binary_join_element_wise(category, name, ": "))
        step = self.step[idx]
        step_text = pc.if_else(pa.array(step >= 0), _ints(step), "null")
        pieces = ['{"ph":"X","name":', _quoted(label), ',"cat":"traceview","ts":', _us_text(start_c),
                  ',"dur":', _us_text(end_c - start_c), ',"pid":', _ints(pid[idx]), ',"tid":', _ints(tid[idx]),
                  ',"args":{"rank":', _ints(self.rank[idx]), ',"step":', step_text,
                  ',"category":', _quoted(category), ',"event":', _quoted(name),
                  ',"row":', _ints(self.row[idx]), ',"dur_ns":', _ints(self.end_ns[idx] - self.start_ns[idx]), "}}"]
        tracks = sorted(set(zip(pid[idx].tolist(), tid[idx].tolist())))
        named = [(p, t, "critical path" if t == PATH_TID else f"critical path (lane {t - PATH_TID + 1}: steps "
                  "overlapping an earlier one)") for p, t in tracks]
        return _join_rows(pieces, idx.size), named, int(idx.size)


def _quoted(values: pa.Array) -> pa.Array:
    """Text as scrubbed JSON strings, each distinct value escaped once."""
    encoded = values.dictionary_encode()
    quoted = pa.array(_json_strings(encoded.dictionary.to_pylist()), pa.string())
    return quoted.take(encoded.indices)


def _ints(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(np.asarray(values, np.int64)), pa.string())
