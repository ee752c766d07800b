"""The tables of a parsed Kineto file: events, launch/flow/fwdbwd links, memory, counters, rank metadata.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from traceview.errors import TraceFormatError
from traceview.model import (
    DeviceInfo, empty_counters, empty_links, empty_memory, hash_keys, join_on_keys, Kind, kind_array,
    make_counters_table, make_events_table, make_links_table, make_memory_table, RankInfo,
    steps_from_annotations, Trace,
)
from traceview.parsers.kineto.autograd import AUTOGRAD_ARG_COLUMNS, autograd_warnings, derive_fwdbwd_links
from traceview.parsers.kineto.clock import timed
from traceview.parsers.kineto.columns import (
    ACTIVITY_LOSS_REASONS, concat, CPU_OP_COLUMNS, cpu_op_link_columns, fate_warnings, flow_ids, kind_codes,
    one_category, plain_int, stack_pairs, track_codes, without_rows,
)
from traceview.parsers.kineto.events import ACTIVITY_OR_SYNC, INT32_MAX, OP_INPUT_COLUMNS, RANK_IN_NAME, TIME_LIMIT_NS
from traceview.parsers.kineto.fields import op_input_memo, OPTIONAL_COLUMNS
from traceview.parsers.kineto.state import FileState


def rank_from_filename(path: str | os.PathLike[str]) -> int | None:
    match = RANK_IN_NAME.search(Path(path).name)
    return int(match.group(1)) if match else None


class TableBuilder(FileState):
    """Building the Trace from the columns read: the events, links, memory and counter tables and
    the rank metadata."""

    # -- assembling ---------------------------------------------------------------------
    def _require_event_objects(self) -> None:
        """An events array of entries none of which is an object (``[1, 2, 3]``) is not a trace:
        one line, not an empty report (an empty array still is an empty trace)."""
        read = self.counts.get("events_read", 0)
        if read > 0 and self.counts.get("skipped_not_an_object", 0) == read:
            raise TraceFormatError(self.path, f"is JSON but not a trace: none of its {read:,} entries is an "
                                   "event object (they are numbers, strings or lists)",
                                   "expected a PyTorch profiler / Chrome trace")

    def _build(self, threads: int = 1) -> Trace:
        """The Trace (``threads``: see ``_tables``)."""
        self._require_event_objects()
        meta = {**self.head, **self.tail}
        base_time_ns = self._base_time()
        raw_dist = meta.get("distributedInfo")
        dist: dict[str, Any] = raw_dist if isinstance(raw_dist, dict) else {}
        rank, rank_source = -1, "unknown"
        dist_rank = dist.get("rank")
        if isinstance(dist_rank, int) and not isinstance(dist_rank, bool) and 0 <= dist_rank <= INT32_MAX:
            rank, rank_source = int(dist_rank), "distributedInfo"
        else:
            if dist_rank is not None:
                self.warnings.append("distributedInfo.rank is not a rank (an integer 0..2**31-1); ignored")
            from_name = rank_from_filename(self.path)
            if from_name is not None and from_name <= INT32_MAX:
                rank, rank_source = from_name, "file name"
        world_size = dist.get("world_size") if isinstance(dist.get("world_size"), int) else None
        version = meta.get("schemaVersion")
        with timed(self._clock, "build: pair begins and ends"):
            drop = self._pair_begin_end()
        info = RankInfo(
            rank=rank,
            source_path=str(self.path),
            source_format="kineto",
            format_version=f"schemaVersion {version}" if version is not None else "unversioned (pre-2021 format)",
            rank_source=rank_source,
            world_size=world_size,
            devices=self._devices(meta.get("deviceProperties")),
            distributed_info=dist,
            process_names=self.process_names,
            thread_names=self.thread_names,
            base_time_ns=base_time_ns,
            raw_metadata={k: v for k, v in meta.items() if k not in ("deviceProperties", "distributedInfo")},
            event_counts=dict(self.counts),
            activity_dropped={k: self.counts[k] for k in ACTIVITY_LOSS_REASONS if self.counts.get(k)},
            unmapped=dict(self.unmapped),
            warnings=list(self.warnings) + fate_warnings(self.counts, self.unsupported_phases),
        )
        if self.imprecise_ts:
            info.event_counts["times_reread_exactly"] = self.imprecise_ts
        trace = self._tables(rank, base_time_ns, drop, threads)
        trace.ranks = {rank: info}
        info.warnings.extend(self.autograd_warnings)
        return trace

    def _tables(self, rank: int, base_time_ns: int, drop: np.ndarray, threads: int) -> Trace:
        """The Trace's tables (its ranks left to the caller). ``threads`` > 1 (a parallel parse,
        which may use that many cores): the CPU-op links, the largest part of the work here, are
        made by a second thread from the first columns of the events table while this one makes
        the rest (numpy releases the GIL in the sorts and searches they are made of); the tables
        are the same either way."""
        helper = ThreadPoolExecutor(1, thread_name_prefix="traceview-links") if threads > 1 else None
        started: list[Future[list[pa.Table]]] = []

        def start_cpu_op_links(columns: dict[str, np.ndarray]) -> None:
            if helper is not None:
                started.append(helper.submit(self._helper_cpu_op_links, columns, rank))

        try:
            with timed(self._clock, "build: events table"):
                events = self._events_table(rank, base_time_ns, drop, start_cpu_op_links if helper else None)
            with timed(self._clock, "build: steps, memory, counters"):
                steps = steps_from_annotations(events)
                memory, counters = self._memory_table(rank, base_time_ns), self._counters_table(rank, base_time_ns)
            links = self._links(events, rank, drop, started[0] if started else None)
        finally:
            if helper is not None:
                helper.shutdown(wait=True, cancel_futures=True)
        return Trace(events=events, links=links, ranks={}, steps=steps, warnings=[], memory=memory, counters=counters)

    def _devices(self, properties: Any) -> list[DeviceInfo]:
        """``deviceProperties``: a list of objects; anything else, or an entry whose id is not an
        integer, is left out with a warning."""
        if properties is None:
            return []
        if not isinstance(properties, list):
            self.warnings.append("deviceProperties is not a list; ignored")
            return []
        devices: list[DeviceInfo] = []
        odd = 0
        for dev in properties:
            dev_id = dev.get("id", len(devices)) if isinstance(dev, dict) else None
            if not isinstance(dev_id, int) or isinstance(dev_id, bool) or not 0 <= dev_id <= INT32_MAX:
                odd += 1
                continue
            major, minor = dev.get("computeMajor"), dev.get("computeMinor")
            devices.append(DeviceInfo(
                id=dev_id, name=str(dev.get("name", "")), sm_count=plain_int(dev.get("numSms")),
                total_memory_bytes=plain_int(dev.get("totalGlobalMem")),
                compute_capability=f"{major}.{minor}" if major is not None else None,
                extra={k: v for k, v in dev.items() if k not in ("id", "name", "numSms", "totalGlobalMem")},
            ))
        if odd:
            self.warnings.append(f"{odd} deviceProperties entries are not objects with an integer id; ignored")
        return devices

    def _pair_begin_end(self) -> np.ndarray:
        """Pair ``B``/``E`` events per thread, and async begins/ends (``b``/``e``, ``S``/``F``) per
        (pid, category, id, name), in stack order (the Chrome trace format's rule); sets the
        duration of each paired begin row and returns the rows of begins that never end (dropped,
        counted). Vectorised (``stack_pairs``): a hostile file may hold millions."""
        be_rows, be_durs, be_drop = self._pair_kind(self.begins, self.ends, "tid", "")
        as_rows, as_durs, as_drop = self._pair_kind(self.async_begins, self.async_ends, "key", "async_")
        self.dur_fixes = (np.concatenate([be_rows, as_rows]), np.concatenate([be_durs, as_durs]))
        return np.sort(np.concatenate([be_drop, as_drop]))

    def _pair_kind(self, begin_parts: list[dict[str, np.ndarray]], end_parts: list[dict[str, np.ndarray]],
                   track_key: str, prefix: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Pair one kind of begins and ends on tracks (pid, ``track_key``); counts ``<prefix>paired_end``
        and ``skipped_<prefix>unmatched_begin/end``. Returns (paired begin rows, their durations,
        rows of begins never closed)."""
        none = np.zeros(0, dtype=np.int64)
        begins, ends = concat(begin_parts), concat(end_parts)
        if not begins and not ends:
            return none, none, none
        parts = [p for p in (begins, ends) if p]
        keys = {k: np.concatenate([p[k] for p in parts]) for k in ("pid", track_key, "ts", "seq")}
        n_begin = len(begins["row"]) if begins else 0
        row = np.concatenate([begins["row"] if begins else none, np.full(len(keys["ts"]) - n_begin, -1, np.int64)])
        track = track_codes(keys["pid"], keys[track_key])
        opened, closed, unmatched_end, never = stack_pairs(track, keys["ts"], keys["seq"], row >= 0)
        self._count(f"{prefix}paired_end", len(closed))
        self._count(f"skipped_{prefix}unmatched_end", len(unmatched_end))
        self._count(f"skipped_{prefix}unmatched_begin", len(never))
        self._count("mapped", -len(never))
        return row[opened], keys["ts"][closed] - keys["ts"][opened], row[never]

    def _counters_table(self, rank: int, base_time_ns: int) -> pa.Table:
        if not self.counters:
            return empty_counters()
        cols: dict[str, Any] = concat(self.counters)
        cols["ts_ns"] = cols["ts_ns"] + base_time_ns
        cols["rank"] = np.full(cols["ts_ns"].size, rank, dtype=np.int32)
        return make_counters_table(cols)

    def _memory_table(self, rank: int, base_time_ns: int) -> pa.Table:
        if not self.memory:
            return empty_memory()
        cols = {key: np.concatenate([part[key] for part in self.memory]) for key in self.memory[0]}
        cols["ts_ns"] = cols["ts_ns"] + base_time_ns
        cols["rank"] = np.full(cols["ts_ns"].size, rank, dtype=np.int32)
        # -1 marks an absent total or address (Kineto before PyTorch 1.10 wrote only Bytes)
        masks = {key: cols[key] < 0 for key in ("total_allocated_bytes", "total_reserved_bytes", "addr")}
        return make_memory_table(cols, masks)

    def _events_table(self, rank: int, base_time_ns: int, drop: np.ndarray,
                      link_columns: Callable[[dict[str, np.ndarray]], None] | None = None) -> pa.Table:
        """The events table; ``link_columns`` is given its ``CPU_OP_COLUMNS`` (kind as codes) as
        soon as they are made, before the other columns (for a helper thread)."""
        n = self.n_rows
        if n == 0:
            return make_events_table({}, 0)
        # each column's chunks are let go as the column is made (every one but the autograd ones,
        # which _derived_fwdbwd reads): else the chunks (~60 MB on the 141 MB benchmark trace) and
        # the table were all held at once, the parse's peak
        cols: dict[str, Any] = {key: np.concatenate(self.columns.pop(key)) for key in CPU_OP_COLUMNS}
        cols["start_ns"] += base_time_ns
        paired_rows, paired_durs = self.dur_fixes
        cols["dur_ns"][paired_rows] = paired_durs
        if link_columns is not None:
            link_columns(without_rows({key: cols[key] for key in CPU_OP_COLUMNS}, drop))
        cols["kind"] = kind_array(cols["kind"])
        for key in [key for key in self.columns if key not in AUTOGRAD_ARG_COLUMNS]:
            parts = self.columns.pop(key)
            if key in ("category", "name"):
                memo = self.cat_memo if key == "category" else self.name_memo
                cols[key] = memo.dictionary_array(np.concatenate(parts))
            elif key in OP_INPUT_COLUMNS:
                codes = np.concatenate(parts)
                if (codes < 0).all():
                    continue  # no op recorded it: make_events_table's nulls
                # the dictionary dictionary_encode() makes: the texts in the order first seen
                cols[key] = getattr(self, op_input_memo(key)).dictionary_array(codes, mask=codes < 0)
            elif isinstance(parts[0], np.ndarray):
                cols[key] = np.concatenate(parts)
            elif all(isinstance(part, int) or part.null_count == len(part) for part in parts):
                continue  # all null (most optional columns of most files): make_events_table's nulls
            else:
                arrays = [pa.nulls(part, OPTIONAL_COLUMNS[key]) if isinstance(part, int) else part for part in parts]
                cols[key] = pa.chunked_array(arrays).combine_chunks() if not pa.types.is_dictionary(arrays[0].type) \
                    else pa.chunked_array(arrays).unify_dictionaries().combine_chunks()
        cols["rank"] = np.full(n, rank, dtype=np.int32)
        table = make_events_table(cols, n)
        if len(drop):
            keep = np.ones(n, dtype=bool)
            keep[drop] = False
            table = table.filter(pa.array(keep))
        return table

    def _links(self, events: pa.Table, rank: int, drop: np.ndarray,
               cpu_op: "Future[list[pa.Table]] | None" = None) -> pa.Table:
        """The links of the events; ``cpu_op``: the CPU-op links being made by a helper thread
        (``_helper_cpu_op_links``), else they are made here."""
        if events.num_rows == 0:
            return empty_links()
        kind = kind_codes(events)
        correlation = events.column("correlation").to_numpy()
        tables = []
        with timed(self._clock, "build: links, launch"):
            # launch -> GPU activity: one file is one process, so correlation alone is the key
            api = np.flatnonzero((kind == int(Kind.RUNTIME)) & (correlation >= 0))
            gpu = np.flatnonzero(np.isin(kind, ACTIVITY_OR_SYNC) & (correlation >= 0))
            left, right = join_on_keys([correlation[api]], [correlation[gpu]])
            if len(left):
                tables.append(make_links_table(np.full(len(left), rank), "launch",
                                               one_category("correlation", len(left)), api[left], gpu[right]))
        with timed(self._clock, "build: links, flows"):
            flow_table = self._flow_links(events, rank, kind)
        with timed(self._clock, "build: links, fwdbwd"):
            derived = self._derived_fwdbwd(events, rank, kind, drop, flow_table)
        if cpu_op is None:
            with timed(self._clock, "build: links, cpu_op"):
                tables.extend(self._cpu_op_links(cpu_op_link_columns(events), rank))
        else:
            with timed(self._clock, "build: links, wait for the helper thread"):
                tables.extend(cpu_op.result())
        tables.extend(table for table in (flow_table, derived) if table is not None)
        if not tables:
            return empty_links()
        with timed(self._clock, "build: links, concatenate"):
            return pa.concat_tables(tables).unify_dictionaries().combine_chunks()

    def _helper_cpu_op_links(self, columns: dict[str, np.ndarray], rank: int) -> list[pa.Table]:
        """``_cpu_op_links`` in a helper thread, while ``_events_table`` makes the other columns."""
        with timed(self._clock, "build: links, cpu_op (helper thread)"):
            return self._cpu_op_links(columns, rank)

    @staticmethod
    def _cpu_op_links(columns: dict[str, np.ndarray], rank: int) -> list[pa.Table]:
        """Runtime call -> the CPU op (or annotation) that issued it (``columns``: the events'
        ``CPU_OP_COLUMNS``, kind as its codes).

        By ``External id`` when the op with that id encloses the call on the same thread (some
        traces reuse the correlation id as the runtime's External id, which would point at an
        unrelated op); otherwise the innermost op enclosing the call on its thread.
        """
        kind, external = columns["kind"], columns["external_id"]
        start = columns["start_ns"]
        end = start + columns["dur_ns"]
        thread = hash_keys([columns["pid"], columns["tid"]])
        is_op = np.isin(kind, [int(Kind.CPU_OP), int(Kind.ANNOTATION)])
        runtime = np.flatnonzero(kind == int(Kind.RUNTIME))
        tables = []
        linked = np.zeros(len(runtime), dtype=bool)
        ops = np.flatnonzero(is_op & (external >= 0))
        has_id = np.flatnonzero(external[runtime] >= 0)
        left, right = join_on_keys([external[ops]], [external[runtime[has_id]]])
        op_rows, rt_rows = ops[left], runtime[has_id][right]
        encloses = (
            (thread[op_rows] == thread[rt_rows]) & (start[op_rows] <= start[rt_rows]) & (end[rt_rows] <= end[op_rows])
        )
        op_rows, rt_rows = op_rows[encloses], rt_rows[encloses]
        if len(rt_rows):
            tables.append(make_links_table(np.full(len(rt_rows), rank), "cpu_op",
                                           one_category("external_id", len(rt_rows)), op_rows, rt_rows))
            linked[np.searchsorted(runtime, np.unique(rt_rows))] = True
        pending = runtime[~linked]
        all_ops = np.flatnonzero(is_op)
        if len(pending) and len(all_ops):
            from traceview.intervals import NestedIndex  # here: see track_codes

            index = NestedIndex(thread[all_ops], start[all_ops], end[all_ops])
            found = index.covering(thread[pending], start[pending], end[pending])
            ok = found >= 0
            if ok.any():
                n_found = int(ok.sum())
                tables.append(make_links_table(np.full(n_found, rank), "cpu_op", one_category("enclosing", n_found),
                                               all_ops[found[ok]], pending[ok]))
        return tables

    def _derived_fwdbwd(self, events: pa.Table, rank: int, kind: np.ndarray, drop: np.ndarray,
                        flow_table: pa.Table | None) -> pa.Table | None:
        """``fwdbwd`` links from the ops' autograd sequence numbers (``parsers/kineto/autograd.py``) when the
        file has no ``fwdbwd`` flow of its own (PyTorch before ~1.11 wrote none)."""
        import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
        if flow_table is not None and pc.any(pc.equal(flow_table.column("category").cast(pa.string()),
                                                      "fwdbwd")).as_py():
            return None
        seq, fwd = (np.concatenate(self.columns.get(key) or [np.empty(0, np.int64)])
                    for key in ("sequence_number", "fwd_thread_id"))
        if len(drop) and len(seq) == self.n_rows:  # the rows _events_table dropped
            keep = np.ones(self.n_rows, dtype=bool)
            keep[drop] = False
            seq, fwd = seq[keep], fwd[keep]
        if len(seq) != events.num_rows or not (fwd > 0).any():
            return None
        start, tid = events.column("start_ns").to_numpy(), events.column("tid").to_numpy()
        found = derive_fwdbwd_links(np.arange(events.num_rows), kind == int(Kind.CPU_OP), tid,
                                    start, start + events.column("dur_ns").to_numpy(), seq, fwd)
        self.autograd_warnings = autograd_warnings(found)
        if len(found.src_row) == 0:
            return None
        return make_links_table(np.full(len(found.src_row), rank), "flow", one_category("fwdbwd", len(found.src_row)),
                                found.src_row, found.dst_row)

    def _flow_links(self, events: pa.Table, rank: int, kind: np.ndarray) -> pa.Table | None:
        """Resolve non-launch flows (e.g. ``fwdbwd``): each flow point binds to the slice that
        starts at the same instant on the same thread; ``s`` and ``f`` pair up by (category, id)."""
        if not self.flows:
            return None
        flows = {key: np.concatenate([f[key] for f in self.flows]) for key in self.flows[0]}
        ph_values = np.array(self.ph_memo.values(), dtype=object)
        cat_values = self.cat_memo.values()
        ph = ph_values[flows["ph"]]
        fts = flows["ts"] + self._base_time()
        start = events.column("start_ns").to_numpy()
        # only slices that start at some flow instant can match: prefilter, then join small sets
        candidates = np.flatnonzero((kind != int(Kind.OTHER)) & np.isin(start, fts))
        pid = events.column("pid").to_numpy()[candidates]
        tid = events.column("tid").to_numpy()[candidates]
        left, right = join_on_keys([flows["pid"], flows["tid"], fts], [pid, tid, start[candidates]])
        row_of_flow = np.full(len(fts), -1, dtype=np.int64)
        row_of_flow[left] = candidates[right]  # several slices at one instant: the last (innermost) wins
        starts = np.flatnonzero(ph == "s")
        finishes = np.flatnonzero(ph == "f")
        ids = flow_ids(flows["id"])
        if np.isnan(ids).any() or (np.abs(ids) >= 2.0**62).any():  # string ids: join on text
            keys = np.array([f"{c}|{i}" for c, i in zip(flows["cat"].tolist(), flows["id"].tolist())], dtype=object)
            s_idx, f_idx = join_on_keys([keys[starts]], [keys[finishes]])
        else:
            ids = ids.astype(np.int64)
            s_idx, f_idx = join_on_keys([flows["cat"][starts], ids[starts]], [flows["cat"][finishes], ids[finishes]])
        src = row_of_flow[starts[s_idx]]
        dst = row_of_flow[finishes[f_idx]]
        ok = (src >= 0) & (dst >= 0)
        unresolved = int(len(src) - ok.sum())
        if unresolved:
            self.counts["flows_unresolved"] = unresolved
        if not ok.any():
            return None
        # the categories dictionary-encoded as dictionary_encode() would: values in first-seen order
        codes = flows["cat"][starts[s_idx][ok]]
        used, first = np.unique(codes, return_index=True)
        used = used[np.argsort(first)]
        local = np.zeros(len(cat_values), dtype=np.int32)
        local[used] = np.arange(len(used), dtype=np.int32)
        categories = pa.DictionaryArray.from_arrays(pa.array(local[codes], pa.int32()),
                                                    pa.array([cat_values[c] for c in used.tolist()], pa.string()))
        return make_links_table(np.full(int(ok.sum()), rank), "flow", categories, src[ok], dst[ok])

    def _base_time(self) -> int:
        """``baseTimeNanoseconds``, or 0 with a warning when it is not a time within +-2**61 ns
        (beyond it, start times would overflow int64)."""
        meta = {**self.head, **self.tail}
        value = meta.get("baseTimeNanoseconds")
        if value is None:
            return 0
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < TIME_LIMIT_NS:
            return int(value)
        warning = "baseTimeNanoseconds is not a time within +-2**61 ns; ignored (times are relative)"
        if warning not in self.warnings:
            self.warnings.append(warning)
        return 0
