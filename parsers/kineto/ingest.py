"""One decoded chunk of Kineto events into columns: rows kept by phase, flows, counters, async and
allocator events, the fate of every event counted.
"""

from __future__ import annotations

from itertools import chain, compress
from typing import Any, Callable, Sequence

import msgspec
import numpy as np
import pyarrow as pa

from traceview.model import Kind
from traceview.parsers.kineto.build import TableBuilder
from traceview.parsers.kineto.columns import (
    async_ids, coerce_event, copy_kind, decimal_text_to_ns, decode_raws, device_stream, get_counter_args,
    int_ids, microseconds_to_ns, NUMBER_TYPES, string_id,
)
from traceview.parsers.kineto.events import (
    ANY_DECODER, ASYNC_BEGIN_PHASES, ASYNC_END_PHASES, ASYNC_INSTANT_PHASES, ASYNC_PHASES, CATEGORY_KINDS,
    COMPLETE_PHASES, COUNTER_PHASES, FLOW_PHASES, get_args, get_id, get_name, get_pid, get_tid, INSTANT_PHASES,
    INT32_MAX, INT64_MAX, LAUNCH_FLOW_CATEGORIES, MEMORY_EVENT_NAME, MEMORY_EVENTS_DECODER,
    MEMORY_PROBE_DECODER, MemoryArgs, MISSING, OP_INPUT_COLUMNS, OUT_OF_RANGE, PHASE_PROBE_DECODER, PhaseProbe,
    TIME_LIMIT_US, VALID,
)
from traceview.parsers.kineto.fields import DTYPE_BYTES, NativeFields, op_input_memo, OPTIONAL_COLUMNS, StructFields
from traceview.parsers.kineto.state import Chunk


class ChunkIngest(TableBuilder):
    """Turning one decoded chunk of events into columns: each event's fate counted, its row kept
    or not."""

    def _loose_text(self, piece: bytes) -> bytes:
        """Slow path for chunks with unexpected values: decode as plain JSON, keep the objects,
        coerce their fields to the types ``Event`` expects (each change counted by reason), and
        return them re-encoded, ready for the typed decoder."""
        try:
            items = ANY_DECODER.decode(piece)
        except RecursionError:
            items = self._decode_each(piece)
        objects = [item for item in items if isinstance(item, dict)]
        # entries that never reach the typed decoder are read (and skipped) here
        self._count("events_read", len(items) - len(objects))
        self._count("skipped_not_an_object", len(items) - len(objects))
        for item in objects:
            for reason in coerce_event(item):
                self._count(reason, 1)
        return msgspec.json.encode(objects)

    # -- columns --------------------------------------------------------------------------
    def _ingest(self, fields: "StructFields | NativeFields", piece: Callable[[], bytes],
                decode_again: Callable[[msgspec.json.Decoder, bytes | None], list[Any]]) -> None:
        """Turn one decoded chunk into columns. Each field is read once for all events (a column
        of the native decoder, or C-level ``map(attrgetter)`` over structs), then rows are
        selected with numpy masks. Every event gets one fate, counted in ``self.counts``: mapped,
        metadata, flow, memory, or ``skipped_<reason>``."""
        n = fields.n
        if n == 0:
            return
        first_seq = self.counts.get("events_read", 0)
        self._count("events_read", n)
        ph_codes = fields.codes(self.ph_memo, "ph")
        ph_values = self.ph_memo.values()

        present = np.bincount(ph_codes, minlength=len(ph_values)) > 0  # the phases this chunk has

        def ph_mask(wanted: tuple[str, ...]) -> np.ndarray:
            table = np.array([p in wanted for p in ph_values], dtype=bool)
            # a chunk has a few phases: most masks are all False or all True, without a lookup per event
            if not (table & present).any():
                return np.zeros(n, dtype=bool)
            if (table | ~present).all():
                return np.ones(n, dtype=bool)
            return table[ph_codes]  # a lookup per code

        is_meta = ph_mask(("M",))
        self._count("metadata", int(is_meta.sum()))
        if is_meta.any():  # a few dozen per file
            self._metadata_names(fields, is_meta)
        start_ns, ts_state = self._times_ns(fields, "ts", piece)
        self._count("skipped_no_ts", int((~is_meta & (ts_state == MISSING)).sum()))
        self._count("skipped_ts_out_of_range", int((~is_meta & (ts_state == OUT_OF_RANGE)).sum()))
        timed = ~is_meta & (ts_state == VALID)
        dur_ns, dur_state = self._times_ns(fields, "dur", piece)
        is_complete = ph_mask(COMPLETE_PHASES + INSTANT_PHASES) & timed
        bad_dur = is_complete & (dur_state != VALID)
        self._count("skipped_dur_out_of_range", int(bad_dur.sum()))
        is_complete &= ~bad_dur
        is_flow = ph_mask(FLOW_PHASES) & timed
        is_begin, is_end = ph_mask(("B",)) & timed, ph_mask(("E",)) & timed
        is_counter = ph_mask(COUNTER_PHASES) & timed
        is_async = {role: ph_mask(phases) & timed for role, phases in
                    (("begin", ASYNC_BEGIN_PHASES), ("end", ASYNC_END_PHASES), ("instant", ASYNC_INSTANT_PHASES))}
        async_any = is_async["begin"] | is_async["end"] | is_async["instant"]
        self._count("flow", int(is_flow.sum()))
        self._skip_phases(ph_codes, timed & ~(is_complete | is_flow | is_begin | is_end | bad_dur | is_counter
                                               | async_any))

        cat_codes = fields.codes(self.cat_memo, "cat")
        cat_values = self.cat_memo.values()
        cat_kinds = np.array([int(CATEGORY_KINDS.get(c.lower(), Kind.OTHER)) for c in cat_values] or [0], dtype=np.int8)
        pid, tid = self._thread_ids(fields)
        chunk = Chunk(
            fields=fields, piece=piece, decode_again=decode_again, kind=cat_kinds[cat_codes], category=cat_codes,
            pid=pid, tid=tid, start_ns=start_ns, dur_ns=dur_ns,
        )
        if is_flow.any():
            self._keep_flows(chunk, ph_codes, is_flow)
        is_instant = ph_mask(INSTANT_PHASES) & is_complete
        if is_instant.any():  # a few per file, or one per allocation when memory is profiled
            is_memory = self._memory_rows(chunk, is_instant)
            is_complete &= ~is_memory
        if is_counter.any() or async_any.any():
            self._phase_events(chunk, is_counter, is_async, first_seq)
        self._keep_rows(chunk, is_complete, is_begin, is_end, is_async, first_seq)

    def _phase_events(self, chunk: Chunk, is_counter: np.ndarray, is_async: dict[str, np.ndarray],
                      first_seq: int) -> None:
        """Counter samples and async begins/ends of a chunk (their args and ids read again by
        ``_phase_probes``); async begins and instants are made rows of kind OTHER."""
        probes = self._phase_probes(chunk)
        if is_counter.any():
            self._counter_samples(chunk, probes, is_counter)
        if (is_async["begin"] | is_async["end"] | is_async["instant"]).any():
            self._keep_async(chunk, probes, is_async, first_seq)

    def _keep_rows(self, chunk: Chunk, is_complete: np.ndarray, is_begin: np.ndarray, is_end: np.ndarray,
                   is_async: dict[str, np.ndarray], first_seq: int) -> None:
        """Rows of the chunk (``X``, instants, ``B``, async begins and ``n``), and the row numbers of
        its begins for the pairing once the file is read."""
        if is_end.any():
            self.ends.append({"pid": chunk.pid[is_end], "tid": chunk.tid[is_end], "ts": chunk.start_ns[is_end],
                              "seq": first_seq + np.flatnonzero(is_end)})
        by_phase = is_async["begin"] | is_async["instant"]  # rows of kind OTHER whatever their category
        kept = is_complete | is_begin | by_phase
        if not kept.any():
            return
        rows = np.flatnonzero(kept)
        for mask, parts, key in ((is_begin, self.begins, "tid"), (is_async["begin"], self.async_begins, "key")):
            begins = np.flatnonzero(mask[rows])
            if begins.size:
                at = rows[begins]
                track = chunk.tid[at] if chunk.async_key is None or key == "tid" else chunk.async_key[at]
                parts.append({"row": self.n_rows + begins, "pid": chunk.pid[at], key: track,
                              "ts": chunk.start_ns[at], "seq": first_seq + at})
        self._ingest_complete(chunk, kept, by_phase)

    def _skip_phases(self, ph_codes: np.ndarray, skipped: np.ndarray) -> None:
        """Count the events of phases traceview keeps no rows for, by reason."""
        if not skipped.any():
            return
        ph_values = self.ph_memo.values()
        for code, count in zip(*np.unique(ph_codes[skipped], return_counts=True)):
            ph = ph_values[code]
            if ph in ASYNC_PHASES:  # the others are kept: only the legacy steps T and p come here
                self._count("skipped_async_step", int(count))
            else:
                self._count("skipped_unsupported_phase", int(count))
                shown = ph if ph.isascii() and ph.isprintable() and 0 < len(ph) <= 4 else "(other)"
                self.unsupported_phases[shown] = self.unsupported_phases.get(shown, 0) + int(count)

    def _thread_ids(self, fields: "StructFields | NativeFields") -> tuple[np.ndarray, np.ndarray]:
        """pid and tid of each event as int64 (``int_ids``). Texts get ids on first sight in
        event order, pid before tid, so the ids do not depend on where chunks (or the byte ranges
        of a parallel parse) are cut."""
        if isinstance(fields, NativeFields):
            pid, tid, beyond = fields.thread_ids(self.string_ids)
            self._count("coerced_id_beyond_64_bits", beyond)
            return pid, tid
        events = fields.events
        pids, tids = list(map(get_pid, events)), list(map(get_tid, events))
        n = len(events)
        try:
            return np.fromiter(pids, dtype=np.int64, count=n), np.fromiter(tids, dtype=np.int64, count=n)
        except (TypeError, ValueError, OverflowError):
            pass
        # a chunk with texts or numbers beyond int64 (old formats): name them in event order first
        for value in chain.from_iterable(zip(pids, tids)):
            if type(value) is not int or not -(2**63) <= value <= INT64_MAX:
                string_id(str(value).strip(), self.string_ids)
        return self._ids(pids), self._ids(tids)

    def _ids(self, values: list[Any]) -> np.ndarray:
        ids, beyond = int_ids(values, self.string_ids)
        self._count("coerced_id_beyond_64_bits", beyond)
        return ids

    def _memory_rows(self, chunk: Chunk, is_instant: np.ndarray) -> np.ndarray:
        """Keep the allocator events among the chunk's instants as memory rows; returns their mask."""
        rows = np.flatnonzero(is_instant)
        names = chunk.fields.strings("name", is_instant)
        rows = rows[np.fromiter(map(MEMORY_EVENT_NAME.__eq__, names), dtype=bool, count=rows.size)]
        is_memory = np.zeros(chunk.fields.n, dtype=bool)
        if rows.size == 0:
            return is_memory
        is_memory[rows] = True
        m = int(rows.size)
        memory: StructFields | NativeFields
        if isinstance(chunk.fields, NativeFields):  # the native decoder read the allocator's args too
            self.decoder = MEMORY_EVENTS_DECODER  # as _memory_args would: for chunks msgspec decodes
            memory = chunk.fields.take(rows)
        else:
            memory = StructFields([], args=self._memory_args(chunk, is_memory))
        self.memory.append({
            "device": memory.int_arg("device_id", self.counts),
            "device_type": memory.int_arg("device_type", self.counts),
            "ts_ns": chunk.start_ns[rows], "bytes": memory.int_arg("mem_bytes", self.counts),
            "total_allocated_bytes": memory.int_arg("total_allocated", self.counts),
            "total_reserved_bytes": memory.int_arg("total_reserved", self.counts),
            "addr": memory.int_arg("addr", self.counts), "pid": chunk.pid[rows], "tid": chunk.tid[rows],
        })
        self._count("memory", m)
        return is_memory

    def _memory_args(self, chunk: Chunk, is_memory: np.ndarray) -> list[MemoryArgs]:
        """The allocator args of the chunk's memory rows. The first chunk that has any was decoded
        without them (files without allocator events never pay for their fields): read them from
        its text, from the first allocator event on, every other key skipped; then decode the rest
        of the file with them."""
        args = list(map(get_args, compress(chunk.events, is_memory)))
        if isinstance(args[0], MemoryArgs):
            return args
        self.decoder = MEMORY_EVENTS_DECODER
        first = int(np.argmax(is_memory))
        try:
            tail = chunk.decode_again(MEMORY_PROBE_DECODER, b'"' + MEMORY_EVENT_NAME.encode() + b'"')
        except (msgspec.DecodeError, msgspec.ValidationError):
            tail = []
        if len(tail) == len(chunk.events) - first:  # the tail starts at the first allocator event
            return list(map(get_args, compress(tail, is_memory[first:])))
        try:
            probe = chunk.decode_again(MEMORY_PROBE_DECODER, None)
        except (msgspec.ValidationError, RecursionError):
            probe = MEMORY_EVENTS_DECODER.decode(self._loose_text(chunk.piece()))
        return list(map(get_args, compress(probe, is_memory)))

    def _metadata_names(self, fields: "StructFields | NativeFields", is_meta: np.ndarray) -> None:
        """Process and thread names from the metadata (``ph == "M"``) events."""
        for name, pid, tid, value in fields.metadata(is_meta):
            if name == "process_name" and isinstance(pid, int):
                self.process_names[pid] = value
            elif name == "thread_name":
                self.thread_names[f"{pid}:{tid}"] = value

    def _keep_flows(self, chunk: Chunk, ph_codes: np.ndarray, is_flow: np.ndarray) -> None:
        """Keep the flow events of the chunk, except launch flows (ac2g ...): those duplicate
        correlation ids."""
        cat_values = self.cat_memo.values()
        launch_cats = [i for i, c in enumerate(cat_values) if c.lower() in LAUNCH_FLOW_CATEGORIES]
        keep = is_flow & ~np.isin(chunk.category, launch_cats)
        if keep.any():
            self.flows.append({
                "ph": ph_codes[keep], "cat": chunk.category[keep],
                "id": np.array(chunk.fields.id_texts(keep), dtype=object),
                "pid": chunk.pid[keep], "tid": chunk.tid[keep], "ts": chunk.start_ns[keep],
            })

    def _phase_probes(self, chunk: Chunk) -> list[PhaseProbe]:
        """The fields of the chunk's counter and async events that ``Event`` leaves out, read
        again from its text (only chunks holding such events pay for it). The text decoded as the
        events did, so this cannot fail but on values the typed pass skipped unseen: then every
        event reads as having none (counters skipped as having no value, counted)."""
        try:  # from a copy: a Raw keeps its source buffer exported, and the read buffer must resize
            probes: list[PhaseProbe] = PHASE_PROBE_DECODER.decode(chunk.piece())
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            probes = []
        return probes if len(probes) == len(chunk.events) else [PhaseProbe()] * len(chunk.events)

    def _counter_samples(self, chunk: Chunk, probes: list[PhaseProbe], is_counter: np.ndarray) -> None:
        """Keep each numeric arg of the chunk's counter (``C``) events as a sample of series ``arg``
        of counter ``name`` (``name[id]`` when the event has an id). Columnar: the args of all the
        counter events are decoded in one call and flattened with C-level ``map``/``chain``."""
        rows = np.flatnonzero(is_counter)
        chosen = list(compress(probes, is_counter))
        # the slow path moved the args of counter events under COUNTER_ARGS_KEY (see coerce_event)
        slow = any(map(len, map(get_counter_args, chosen)))
        raws = list(map(get_counter_args if slow else get_args, chosen))
        decoded = [d if isinstance(d, dict) else {} for d in decode_raws(raws, default={})]
        lengths = np.fromiter(map(len, decoded), dtype=np.int64, count=len(decoded))
        series = np.array(list(chain.from_iterable(decoded)), dtype=object)
        values = list(chain.from_iterable(map(dict.values, decoded)))
        numeric = np.fromiter(map(NUMBER_TYPES.__contains__, map(type, values)), dtype=bool, count=len(values))
        numbers = np.full(len(values), np.nan)
        try:
            numbers[numeric] = np.fromiter(compress(values, numeric), dtype=np.float64, count=int(numeric.sum()))
        except OverflowError:  # an integer beyond a double: not finite, dropped below
            numbers[numeric] = [float(v) if abs(v) < 2**1023 else np.inf for v in compress(values, numeric)]
        ok = np.isfinite(numbers)
        event_of = np.repeat(np.arange(len(rows)), lengths)
        kept_per_event = np.bincount(event_of[ok], minlength=len(rows))
        has_value = kept_per_event > 0
        self._count("counter", int(has_value.sum()))
        self._count("skipped_counter_no_value", int((~has_value).sum()))
        self._count("coerced_counter_arg_dropped", int((~ok & has_value[event_of]).sum()))
        self._count("counter_samples", int(ok.sum()))
        if not ok.any():
            return
        names = np.array(list(map(get_name, compress(chunk.events, is_counter))), dtype=object)
        has_id = np.fromiter(map(len, map(get_id, chosen)), dtype=np.int64, count=len(chosen)) > 0
        if has_id.any():  # the Chrome trace format: an id is part of the counter's name
            ids = np.array(list(map(str, map(get_id, compress(chunk.events, is_counter)))), dtype=object)
            names[has_id] = names[has_id] + "[" + ids[has_id] + "]"
        at = rows[event_of[ok]]
        self.counters.append({"pid": chunk.pid[at], "tid": chunk.tid[at], "name": names[event_of[ok]],
                              "series": series[ok], "ts_ns": chunk.start_ns[at], "value": numbers[ok]})

    def _keep_async(self, chunk: Chunk, probes: list[PhaseProbe], is_async: dict[str, np.ndarray],
                    first_seq: int) -> None:
        """Async events: begins and instants become rows of kind OTHER (duration 0 until paired),
        begins and ends are kept for pairing per (pid, category, id, name) (``_pair_begin_end``)."""
        by_phase = is_async["begin"] | is_async["instant"]
        chunk.kind[by_phase] = int(Kind.OTHER)
        chunk.dur_ns[by_phase] = 0
        self._count("async_instants", int(is_async["instant"].sum()))
        paired = is_async["begin"] | is_async["end"]
        if not paired.any():
            return
        cat_values = np.array(self.cat_memo.values(), dtype=object)
        ids = async_ids(list(compress(chunk.events, paired)), list(compress(probes, paired)))
        names = np.array(list(map(get_name, compress(chunk.events, paired))), dtype=object)
        key_of = np.empty(len(chunk.events), dtype=object)
        key_of[paired] = cat_values[chunk.category[paired]] + "\x1f" + ids + "\x1f" + names
        ends = is_async["end"]
        if ends.any():
            self.async_ends.append({"pid": chunk.pid[ends], "key": key_of[ends], "ts": chunk.start_ns[ends],
                                    "seq": first_seq + np.flatnonzero(ends)})
        chunk.async_key = key_of  # the begins' keys, kept with their rows by _keep_rows

    def _ingest_complete(self, chunk: Chunk, is_complete: np.ndarray, by_phase: np.ndarray | None = None) -> None:
        """Append the columns of the complete (``X``) and instant (``i``/``I``) events of a chunk
        (and ``B``, async begins and ``n``); ``by_phase`` marks rows made kind OTHER by their phase
        (async events): their categories are not counted as unmapped."""
        rows = np.flatnonzero(is_complete)
        m = len(rows)
        every_row = m == chunk.fields.n
        fields = chunk.fields if every_row else chunk.fields.take(rows)

        def take(values: np.ndarray) -> np.ndarray:
            return values if every_row else values[rows]

        kind = take(chunk.kind)
        category = take(chunk.category)
        other = kind == int(Kind.OTHER)
        self._count_unmapped_categories(category[other if by_phase is None else other & ~take(by_phase)])
        self._count("mapped", m)
        name_codes = fields.codes(self.name_memo, "name")
        dur_ns = take(chunk.dur_ns)
        negative = dur_ns < 0
        if negative.any():
            self._count("coerced_negative_dur", int(negative.sum()))
            dur_ns = np.where(negative, 0, dur_ns)
        pid = take(chunk.pid)
        tid = take(chunk.tid)
        external_id = fields.int_arg("external_id", self.counts)
        device, stream = device_stream(kind, fields.int_arg("device", self.counts),
                                        fields.int_arg("stream", self.counts), pid, tid)
        nbytes = fields.int_arg("bytes", self.counts)
        cols: dict[str, Any] = {
            "kind": kind,
            "category": category,
            "name": name_codes,
            "start_ns": take(chunk.start_ns),
            "dur_ns": dur_ns,
            "pid": pid,
            "tid": tid,
            "device": device.astype(np.int32),
            "stream": stream,
            "correlation": fields.int_arg("correlation", self.counts),
            "external_id": np.where(external_id < 0, fields.int_arg("external_id_old", self.counts), external_id),
            "bytes": pa.array(nbytes, mask=nbytes < 0),
            # not event columns: for the fwdbwd links of traces without fwdbwd flows (_links)
            "sequence_number": fields.int_arg("sequence_number", self.counts),
            "fwd_thread_id": fields.int_arg("fwd_thread_id", self.counts),
        }
        self._launch_geometry(cols, kind, fields, m)
        self._collective_columns(cols, fields, m)
        self._launch_kernel_column(cols, fields, m)
        for key in ("graph_id", "graph_node_id"):  # CUPTI's ids are never negative: -1 is absent
            ids = fields.int_arg(key, self.counts)
            if (ids >= 0).any():
                cols[key] = pa.array(ids, mask=ids < 0)
        for key in OP_INPUT_COLUMNS:  # int32 codes in the column's memo, -1 absent
            cols[key] = fields.op_input_codes(key, getattr(self, op_input_memo(key)))
        memcpy_rows = np.flatnonzero(kind == int(Kind.MEMCPY))
        if len(memcpy_rows):
            copy_kinds = np.array([copy_kind(s) for s in self.name_memo.values()], dtype=object)
            copy_full = np.full(m, None, dtype=object)
            copy_full[memcpy_rows] = copy_kinds[name_codes[memcpy_rows]]
            cols["copy_kind"] = pa.array(copy_full, pa.string())
        for key in OPTIONAL_COLUMNS:
            if key not in cols:
                # all null: the chunk's row count stands for it (_events_table), not pa.nulls, whose
                # buffers every chunk held through the read (13 MB on the 141 MB benchmark trace)
                cols[key] = m
        for key, value in cols.items():
            self.columns.setdefault(key, []).append(value)
        self.n_rows += m

    def _count_unmapped_categories(self, other_codes: np.ndarray) -> None:
        """Count events whose category maps to no kind, by category name."""
        if len(other_codes) == 0:
            return
        cat_values = self.cat_memo.values()
        for code, count in zip(*np.unique(other_codes, return_counts=True)):
            key = cat_values[code] or "(no category)"
            self.unmapped[key] = self.unmapped.get(key, 0) + int(count)

    def _launch_geometry(self, cols: dict[str, Any], kind: np.ndarray, fields: "StructFields | NativeFields",
                         m: int) -> None:
        """Grid and block dimensions of kernels (int32 columns): a dimension outside 0..2**31-1
        is read as absent and counted, never wrapped."""
        kernel_rows = np.flatnonzero(kind == int(Kind.KERNEL))
        for prefix in ("grid", "block"):
            dims = np.full((m, 3), -1, dtype=np.int64)
            if len(kernel_rows):
                dims[kernel_rows] = fields.launch_dims(prefix, kernel_rows)
                beyond = (dims > INT32_MAX) | (dims < -1)
                self._count("clamped_launch_dims", int(beyond.sum()))
                dims[beyond] = -1
            for axis, suffix in enumerate("xyz"):
                col = dims[:, axis]
                cols[f"{prefix}_{suffix}"] = pa.array(col.astype(np.int32), mask=col < 0)

    @staticmethod
    def _launch_kernel_column(cols: dict[str, Any], fields: "StructFields | NativeFields", m: int) -> None:
        """The kernel a launch call names (ROCm's ``kernel`` arg): what a graph capture's calls are
        matched on (analyses/graph_capture.py); absent in CUDA traces, whose calls name no kernel."""
        has = fields.has_text("launch_kernel")
        if not has.any():
            return
        rows = np.flatnonzero(has)
        full = np.full(m, None, dtype=object)
        full[rows] = fields.take(rows).strings("launch_kernel")
        cols["launch_kernel"] = pa.array(full, pa.string())

    def _collective_columns(self, cols: dict[str, Any], fields: "StructFields | NativeFields", m: int) -> None:
        has_collective = fields.has_text("collective")
        if not has_collective.any():
            return
        chosen = fields.take(np.flatnonzero(has_collective))
        idx = np.flatnonzero(has_collective).tolist()

        def strings(values: Sequence[str | None]) -> pa.Array:
            full = np.full(m, None, dtype=object)
            full[idx] = [v or None for v in values]
            return pa.array(full, pa.string())

        cols["collective"] = strings(chosen.strings("collective"))
        in_nelems = chosen.int_arg("in_nelems", self.counts)
        out_nelems = chosen.int_arg("out_nelems", self.counts)
        nelems_full = np.full(m, -1, dtype=np.int64)
        nelems_full[idx] = np.maximum(in_nelems, out_nelems)
        cols["msg_nelems"] = pa.array(nelems_full, mask=nelems_full < 0)
        dtypes = chosen.strings("dtype")
        cols["msg_dtype"] = strings(dtypes)
        elem_size = np.array([DTYPE_BYTES.get(d.lower(), -1) for d in dtypes], dtype=np.int64)
        # bytes = elements x element size only where the product fits int64
        fits = nelems_full[idx] <= INT64_MAX // np.maximum(elem_size, 1)
        self._count("clamped_collective_values", int((~fits & (elem_size > 0)).sum()))
        msg_bytes = np.full(m, -1, dtype=np.int64)
        msg_bytes[idx] = np.where((elem_size > 0) & (nelems_full[idx] >= 0) & fits,
                                  np.where(fits, nelems_full[idx], 0) * elem_size, -1)
        cols["msg_bytes"] = pa.array(msg_bytes, mask=msg_bytes < 0)
        group = np.full(m, -1, dtype=np.int64)
        group[idx] = chosen.int_arg("group_size", self.counts)
        too_big = group > INT32_MAX
        self._count("clamped_collective_values", int(too_big.sum()))
        group[too_big] = -1
        cols["group_size"] = pa.array(group.astype(np.int32), mask=group < 0)
        cols["process_group"] = strings(chosen.strings("pg_name"))
        cols["process_group_ranks"] = strings(chosen.ranks_texts())

    def _times_ns(self, fields: "StructFields | NativeFields", field: str,
                  piece: Callable[[], bytes]) -> tuple[np.ndarray, np.ndarray]:
        """Exact int64 ns for ``ts`` or ``dur`` of all the events of a chunk (``piece``: its JSON
        text), and each value's state: ``VALID``, ``MISSING`` (absent, null or not a number: NaN
        from the decoder's default or the slow path) or ``OUT_OF_RANGE`` (not finite, or beyond
        ``TIME_LIMIT_NS``); only valid values are converted, so nothing wraps int64."""
        n = fields.n
        us = fields.integer_times(field)
        if us is not None:  # older traces: integers, exact in int64
            valid = (us > -TIME_LIMIT_US) & (us < TIME_LIMIT_US)
            if valid.all():
                return us * 1000, np.zeros(n, dtype=np.int8)
        values = fields.float_times(field)
        finite = np.isfinite(values)
        valid = finite & (np.abs(values) < TIME_LIMIT_US)
        state = np.where(valid, VALID, np.where(np.isnan(values), MISSING, OUT_OF_RANGE)).astype(np.int8)
        ns = np.zeros(n, dtype=np.int64)
        rest = valid  # values converted here: those the native decoder did not read exactly
        exact = fields.exact_times(field)
        if exact is not None:
            ns, rest = exact[0].copy(), valid & ~exact[1]  # exact rows are valid; the others hold 0
        if rest.all():
            ns, ambiguous = microseconds_to_ns(values)
            where = None
        else:
            where = np.flatnonzero(rest)
            ns[where], ambiguous = microseconds_to_ns(values[where])
        n_ambiguous = int(ambiguous.sum())
        if n_ambiguous:
            # a float64 cannot tell these decimals apart: re-read them from the JSON text
            rows = np.flatnonzero(ambiguous) if where is None else where[ambiguous]
            ns[rows] = decimal_text_to_ns(fields.time_texts(field, rows, piece))
            self.imprecise_ts += n_ambiguous
        return ns, state
