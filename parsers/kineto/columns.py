"""Column helpers of the Kineto parser: flow ids, links, coercion of odd values, async ids and
pairing (``stack_pairs``), the event fates, exact nanoseconds from microseconds.
"""

from __future__ import annotations

import re
from decimal import Decimal
from itertools import compress, repeat
from operator import attrgetter
from typing import Any, Sequence

import msgspec
import numpy as np
import pyarrow as pa

from traceview.parsers.jsonstream import bracket_depths as _structure
from traceview.parsers.kineto.events import (
    ANY_DECODER, ANY_JSON_ARGS, Args, COPY_KIND, COUNTER_ARGS_KEY, COUNTER_PHASES, Event, get_id, GPU_KINDS,
    INT64_MAX, MemoryArgs, NO_MEMORY_ARGS, PhaseProbe, RAW_OBJECT_DECODER, TS_EXACT_LIMIT_US,
)
from traceview.parsers.kineto.native import native_array_end


#: flow ids that are all plain decimal integers, one per line (the usual case)
_DECIMAL_LINES = re.compile(r"(?:-?[0-9]+\n)*-?[0-9]+")


def flow_ids(texts: np.ndarray) -> np.ndarray:
    """Flow ids as numbers (NaN: not a number), as ``pd.to_numeric(errors="coerce")`` reads them.
    Ids that are all plain decimal integers (one regular-expression pass over them joined) are
    converted directly: the same int64 values, without pandas' per-value parsing."""
    values = texts.tolist()
    if values and _DECIMAL_LINES.fullmatch("\n".join(values)):
        try:
            return np.array(values, dtype=np.int64)
        except (OverflowError, ValueError):  # beyond int64: pandas decides (uint64 or float)
            pass
    import pandas as pd  # here: see track_codes

    return pd.to_numeric(pd.Series(texts), errors="coerce").to_numpy()


#: the events' columns the CPU-op links are made from
CPU_OP_COLUMNS = ("kind", "external_id", "start_ns", "dur_ns", "pid", "tid")


def without_rows(columns: dict[str, np.ndarray], drop: np.ndarray) -> dict[str, np.ndarray]:
    """The columns without the rows ``drop`` (the begins that never end, as ``_events_table``
    drops them); as they are when there are none."""
    if len(drop) == 0:
        return columns
    keep = np.ones(len(next(iter(columns.values()))), dtype=bool)
    keep[drop] = False
    return {key: values[keep] for key, values in columns.items()}


def cpu_op_link_columns(events: pa.Table) -> dict[str, np.ndarray]:
    """The events' ``CPU_OP_COLUMNS`` as numpy arrays, kind as its codes."""
    columns = {key: events.column(key).to_numpy() for key in CPU_OP_COLUMNS if key != "kind"}
    return {"kind": kind_codes(events), **columns}


def kind_codes(events: pa.Table) -> np.ndarray:
    """The events' kinds as their int8 codes."""
    column = events.column("kind")
    chunk = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return chunk.indices.to_numpy(zero_copy_only=False)


def one_category(text: str, n: int) -> pa.DictionaryArray:
    """``n`` links of one category, as ``dictionary_column([text] * n)`` encodes them (without
    building and hashing n strings)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)),
                                          pa.array([text] if n else [], pa.string()))


def events_array_end(buf: bytearray) -> int | None:
    """Position of the bracket closing the events array whose ``[`` is ``buf[0]``, or None.
    The native scan when built (one pass, no arrays of positions), else ``bracket_depths``: the
    same rules, so the same answer on any text."""
    if native_array_end is not None:
        end: int | None = native_array_end(buf, 1)
        return end
    brackets, depth = _structure(memoryview(buf)[1:])
    ends = np.flatnonzero(depth == -1)
    return int(brackets[ends[0]]) + 1 if len(ends) else None


def buffer_piece(buf: bytearray, start: int, end: int) -> bytes:
    """A standalone JSON array of the events in buf[start:end] (slow paths only)."""
    return b"[" + bytes(buf[start:end]) + b"]"


# plus id2, which only async events use (read by PhaseProbe)
_EVENT_KEYS = frozenset(f.encode_name for f in msgspec.structs.fields(Event)) | {"id2"}
_ARG_KEYS = frozenset(MemoryArgs.__struct_encode_fields__)
_INT64_RANGE = range(-(2**63), 2**63)


def coerce_event(item: dict[str, Any]) -> list[str]:
    """Coerce the fields of one decoded event to the types ``Event`` expects, in place; returns
    the reason of each change (``coerced_*``). Keys traceview does not read are dropped first, so
    nothing unread can fail the typed decoder. A ``ts`` that is not a number is removed (the
    event is then skipped as having none); a ``dur`` that is not a number becomes 0."""
    reasons: list[str] = []
    for key in [k for k in item if k not in _EVENT_KEYS]:
        del item[key]
    for key in ("ph", "cat", "name", "bp"):
        if key in item and not isinstance(item[key], str):
            item[key] = "" if item[key] is None else str(item[key])
            reasons.append("coerced_field_to_text")
    for key in ("pid", "tid", "id"):
        value = item.get(key)
        if key in item and (isinstance(value, bool) or not isinstance(value, (int, str))):
            item[key] = str(value)
            reasons.append("coerced_field_to_text")
        elif isinstance(value, int) and value not in _INT64_RANGE:
            item[key] = str(value)  # a stable id of its own (``int_ids``), counted there
    for key in ("ts", "dur"):
        value = item.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value not in _INT64_RANGE:
            item[key] = float("inf") if abs(value) >= 2**1000 else float(value)  # out of range: skipped later
        elif key in item and (isinstance(value, bool) or not isinstance(value, (int, float))):
            if key == "ts":
                del item[key]
            else:
                item[key] = 0
                reasons.append("coerced_dur_not_a_number")
    _keep_phase_fields(item)
    args = item.get("args")
    if isinstance(args, dict):
        reasons += _coerce_args(args)
    elif "args" in item:
        del item["args"]
        if args is not None:
            reasons.append("coerced_args_not_an_object")
    return reasons


def _keep_phase_fields(item: dict[str, Any]) -> None:
    """Keep, in place, what counter and async events need past the coercion of ``args``: a
    counter's args move under ``COUNTER_ARGS_KEY`` (their keys and types are the trace's own;
    values that are not numbers become null, counted when the samples are read); an ``id2`` that is
    not a flat object of ids is dropped (the event is then matched by its ``id``)."""
    id2 = item.get("id2")
    if "id2" in item and not (isinstance(id2, dict) and all(isinstance(v, (str, int)) for v in id2.values())):
        del item["id2"]
    args = item.get("args")
    if item.get("ph") in COUNTER_PHASES and isinstance(args, dict):
        del item["args"]
        item[COUNTER_ARGS_KEY] = {k: v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
                                  for k, v in args.items()}


def _coerce_args(args: dict[str, Any]) -> list[str]:
    """Coerce the ``args`` of one event to the types of ``MemoryArgs``, in place (a value that
    cannot be coerced is dropped: read as absent); returns the reason of each change."""
    reasons: list[str] = []
    for key in [k for k in args if k not in _ARG_KEYS]:
        del args[key]
    for fld, encoded in zip(MemoryArgs.__struct_fields__, MemoryArgs.__struct_encode_fields__):
        if encoded not in args or fld in ANY_JSON_ARGS:  # an op's inputs: any JSON is kept as it is
            continue
        value, default = args[encoded], getattr(NO_MEMORY_ARGS, fld)
        reason = _coerce_arg(args, encoded, value, default)
        if reason:
            reasons.append(reason)
    return reasons


def _coerce_arg(args: dict[str, Any], key: str, value: Any, default: Any) -> str | None:
    """Coerce one arg in place; returns the reason, or None when it was fine."""
    if isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            if value in _INT64_RANGE:
                return None
            del args[key]
            return "coerced_arg_out_of_range"
        try:
            number = int(value)
        except (TypeError, ValueError, OverflowError):
            del args[key]
            return "coerced_arg_not_a_number"
        if number not in _INT64_RANGE:
            del args[key]
            return "coerced_arg_out_of_range"
        args[key] = number
        return "coerced_arg_to_number"
    if isinstance(default, str):
        if isinstance(value, str):
            return None
        args[key] = "" if value is None else str(value)
        return "coerced_arg_to_text"
    if isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            del args[key]
            return "coerced_arg_not_a_number"
        if not all(v in _INT64_RANGE for v in value):
            del args[key]
            return "coerced_arg_out_of_range"
        return None
    # Process Group Ranks: text or a list of ranks; anything else is kept as its text
    if value is None or isinstance(value, str):
        return None
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v in _INT64_RANGE
                                       for v in value):
        return None
    args[key] = ranks_text(value)
    return "coerced_arg_to_text"


def device_stream(kind: np.ndarray, device: np.ndarray, stream: np.ndarray, pid: np.ndarray,
                   tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Device and stream of each row: from the args (``device``, ``stream``; -1: absent) on GPU
    rows, else (older traces) the trace's pid and tid, which Kineto sets to the device and stream
    there; -1 on other rows."""
    is_gpu = np.isin(kind, GPU_KINDS)
    device = np.where(is_gpu & (device < 0), pid, device)
    device = np.where(is_gpu, device, -1)
    stream = np.where(is_gpu & (stream < 0), tid, stream)
    stream = np.where(is_gpu, stream, -1)
    return device, stream


def three_dims(value: tuple[int, ...]) -> tuple[int, int, int]:
    """Launch dimensions as three (missing ones 1, absent -1; beyond int64 -2: counted and
    cleared by the caller)."""
    if not value:
        return (-1, -1, -1)
    dims = [v if -1 <= v <= INT64_MAX else -2 for v in value[:3]]
    dims += [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


def concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]} if parts else {}


get_counter_args = attrgetter("counter_args")
NUMBER_TYPES = frozenset({int, float})  # not bool: true/false are no samples


def decode_raws(raws: list[Any], default: Any) -> list[Any]:
    """JSON texts (``msgspec.Raw``) decoded in one call; when that fails (a value nested too
    deeply, a number beyond a double such as ``1e999``), one by one: an object value by value
    (a value that fails reads as null, so its numeric neighbours survive), anything else that
    fails as ``default``."""
    try:
        return list(ANY_DECODER.decode(b"[" + b",".join(raws) + b"]"))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass
    out = []
    for raw in raws:  # only for the events of a chunk that failed above
        try:
            out.append(ANY_DECODER.decode(raw) if len(raw) else default)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            out.append(_decode_each_value(raw, default))
    return out


def _decode_each_value(raw: Any, default: Any) -> Any:
    try:
        values = RAW_OBJECT_DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return default
    out: dict[str, Any] = {}
    for key, value in values.items():
        try:
            out[key] = ANY_DECODER.decode(value)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            out[key] = None
    return out


def async_ids(events: list[Event], probes: list[PhaseProbe]) -> np.ndarray:
    """The id of each async event as text: ``id2``'s ``local:``/``global:`` value when it has one
    (the Chrome trace format's scoped ids), else its ``id``, else ""."""
    ids = np.array(list(map(str, map(get_id, events))), dtype=object)
    ids[np.fromiter(map(len, map(get_id, probes)), dtype=np.int64, count=len(probes)) == 0] = ""
    id2_raws = list(map(attrgetter("id2"), probes))
    has_id2 = np.fromiter(map(len, id2_raws), dtype=np.int64, count=len(id2_raws)) > 0
    if has_id2.any():  # rare (Perfetto-era producers): a function per such event
        id2 = list(map(_id2_text, decode_raws(list(compress(id2_raws, has_id2)), default=None)))
        found = np.array([t is not None for t in id2], dtype=bool)
        where = np.flatnonzero(has_id2)
        ids[where[found]] = np.array([t for t in id2 if t is not None], dtype=object)
    return ids


def _id2_text(value: Any) -> str | None:
    """``{"local": x}`` -> "local:x", ``{"global": x}`` -> "global:x"; None for anything else."""
    if isinstance(value, dict):
        for scope in ("local", "global"):
            if isinstance(value.get(scope), (str, int)) and not isinstance(value.get(scope), bool):
                return f"{scope}:{value[scope]}"
    return None


def stack_pairs(track: np.ndarray, ts: np.ndarray, seq: np.ndarray,
                is_begin: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pair begins and ends per track in stack order (each end closes the latest open begin of
    its track; events ordered by ``ts``, then ``seq``), without a loop over events: within a
    track, the stack depth before each event (an end with none open is unmatched and leaves it
    at 0) gives each begin and end a level; at one level of one track begins and ends then
    alternate, so each begin pairs with the next event at its level.

    Returns indices into the inputs: (paired begins, their ends, unmatched ends, begins never
    closed)."""
    n = len(track)
    order = np.lexsort((seq, ts, track))
    t, begin = track[order], is_begin[order]
    step = np.where(begin, 1, -1).astype(np.int64)
    first = np.ones(n, dtype=bool)
    first[1:] = t[1:] != t[:-1]
    segment = np.cumsum(first) - 1
    total = np.cumsum(step)
    depth = total - (total - step)[first][segment]  # running sum within the track
    # running minimum within the track: later tracks shifted below every earlier value
    shift = segment * (2 * n + 1)
    low = np.minimum.accumulate(depth - shift) + shift
    low_before = np.where(first, 0, np.roll(low, 1))
    before = (depth - step) - np.minimum(low_before, 0)  # open begins before the event
    unmatched_end = ~begin & (before == 0)
    level = np.where(begin, before + 1, before)
    live = np.flatnonzero(~unmatched_end)
    by_level = live[np.lexsort((live, level[live], t[live]))]
    same_next = np.zeros(len(by_level), dtype=bool)
    same_next[:-1] = (t[by_level[1:]] == t[by_level[:-1]]) & (level[by_level[1:]] == level[by_level[:-1]])
    opens = begin[by_level]
    pair_at = np.flatnonzero(opens & same_next)
    return (order[by_level[pair_at]], order[by_level[pair_at + 1]], order[np.flatnonzero(unmatched_end)],
            order[by_level[opens & ~same_next]])


def track_codes(*columns: np.ndarray) -> np.ndarray:
    """One int64 code per distinct tuple of the columns (exact: factorised, not hashed)."""
    # pandas is imported where it is used, not at the top: parse workers forked before their
    # parent imports it (ParseHooks.meanwhile) do not import it (~0.25 s) for their ranges
    import pandas as pd

    code = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        values, uniques = pd.factorize(column)
        code = code * max(len(uniques), 1) + values
        code = pd.factorize(code)[0].astype(np.int64)  # keep codes below the number of rows
    return code


def plain_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


#: The skip reasons of events that carried or may have carried activity (a time on a thread or a
#: GPU): every figure of the rank leaves them out (``RankInfo.activity_dropped``). Entries that are
#: not objects, and phases traceview does not read (counters, async, object snapshots...), are not.
ACTIVITY_LOSS_REASONS = ("skipped_no_ts", "skipped_ts_out_of_range", "skipped_dur_out_of_range",
                         "skipped_nested_too_deep", "skipped_unmatched_begin", "skipped_unmatched_end")

#: What each event count means in words (``fate_warnings``); ``{n}`` is the count.
FATE_TEXT = {
    "skipped_no_ts": "{n} events skipped: 'ts' missing, null or not a number (not placed at time 0)",
    "skipped_ts_out_of_range": "{n} events skipped: 'ts' not finite or beyond +-2**61 ns",
    "skipped_dur_out_of_range": "{n} events skipped: 'dur' not finite or beyond +-2**61 ns",
    "skipped_not_an_object": "{n} entries of traceEvents skipped: not JSON objects",
    "skipped_nested_too_deep": "{n} events skipped: nested too deeply to decode",
    "skipped_counter_no_value": "{n} counter events (ph 'C') skipped: no arg holds a finite number",
    "skipped_async_step": "{n} async step events (ph 'T'/'p') skipped: only async begins, ends and instants are read",
    "skipped_unmatched_begin": "{n} 'B' events skipped: no matching 'E' on their thread",
    "skipped_unmatched_end": "{n} 'E' events skipped: no open 'B' on their thread",
    "skipped_async_unmatched_begin": "{n} async begin events (ph 'b'/'S') skipped: no matching end with the same "
                                     "pid, category, id and name",
    "skipped_async_unmatched_end": "{n} async end events (ph 'e'/'F') skipped: no open begin with the same "
                                   "pid, category, id and name",
    "paired_end": "{n} B/E pairs became duration events",
    "counter": "{n} counter events (ph 'C') kept as {samples} samples in the counters table (not as events)",
    "async_paired_end": "{n} async b/e (or S/F) pairs kept as kind 'other' duration events (category as given)",
    "async_instants": "{n} async instants (ph 'n') kept as kind 'other' instant events (category as given)",
    "coerced_counter_arg_dropped": "{n} counter args that are not finite numbers dropped (the numeric args of "
                                   "their events kept)",
    "coerced_invalid_utf8": "{n} byte sequences that are not UTF-8 replaced by U+FFFD in strings",
    "coerced_dur_not_a_number": "{n} events had a 'dur' that is not a number; set to 0",
    "coerced_negative_dur": "{n} events had a negative duration; set to 0",
    "coerced_id_beyond_64_bits": "{n} pid/tid values beyond 64 bits given ids of their own",
    "coerced_arg_not_a_number": "{n} integer args that are not numbers read as absent",
    "coerced_arg_out_of_range": "{n} integer args beyond 64 bits read as absent",
    "coerced_arg_to_number": "{n} integer args written as text read as numbers",
    "coerced_arg_to_text": "{n} text args of another type read as their text",
    "coerced_field_to_text": "{n} event fields of another type read as text",
    "coerced_args_not_an_object": "{n} events' args that are not objects ignored",
    "clamped_launch_dims": "{n} kernel launch dimensions beyond 2**31-1 read as absent",
    "clamped_collective_values": "{n} collective sizes too large for their column read as absent",
}


def fate_warnings(counts: dict[str, int], unsupported_phases: dict[str, int]) -> list[str]:
    """One line per skip or coercion reason that occurred, saying exactly what was done."""
    samples = f"{counts.get('counter_samples', 0):,}"
    lines = [text.format(n=f"{counts[key]:,}", samples=samples) for key, text in FATE_TEXT.items() if counts.get(key)]
    if counts.get("skipped_unsupported_phase"):
        phases = ", ".join(f"'{ph}' ({n:,})" for ph, n in sorted(unsupported_phases.items()))
        lines.append(f"{counts['skipped_unsupported_phase']:,} events of phases traceview does not read skipped: "
                     + phases)
    return lines


def copy_kind(name: str | None) -> str | None:
    match = COPY_KIND.search(name or "")
    return match.group(1) if match else None


def int_arg_column(args: Sequence[Args], field: str, n: int, counts: dict[str, int]) -> np.ndarray:
    """One integer arg as int64. Values beyond int64 (the decoder accepts up to 2**64; seen in real
    traces) become -1, read as absent, and are counted in ``counts``."""
    try:
        return np.fromiter(map(attrgetter(field), args), dtype=np.int64, count=n)
    except OverflowError:
        values = [v if -(2**63) <= v <= INT64_MAX else None for v in map(attrgetter(field), args)]
        beyond = values.count(None)
        counts["coerced_arg_out_of_range"] = counts.get("coerced_arg_out_of_range", 0) + beyond
        return np.array([-1 if v is None else v for v in values], dtype=np.int64)


def canonical_json(text: str) -> str:
    """A JSON text written the one way msgspec writes its value (no spaces): the native decoder
    keeps an arg's text as written, the msgspec path re-encodes the decoded value."""
    return msgspec.json.encode(msgspec.json.decode(text)).decode()


def is_not_none(value: Any) -> bool:
    return value is not None


def ranks_text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def int_ids(values: list[Any], string_ids: dict[str, int]) -> tuple[np.ndarray, int]:
    """pid/tid values as int64, and how many were beyond 64 bits. Numeric strings ("1890023232",
    "stream 7") become numbers; other strings ("Spans", "PyTorch Profiler") and numbers beyond
    int64 get stable negative ids of their own."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values)), 0
    except (TypeError, ValueError, OverflowError):
        pass
    is_int = np.fromiter(map(isinstance, values, repeat(int)), dtype=bool, count=len(values))
    out = np.empty(len(values), dtype=np.int64)
    try:
        out[is_int] = np.fromiter(compress(values, is_int), dtype=np.int64, count=int(is_int.sum()))
    except OverflowError:  # some beyond int64: those go the slow way below
        is_int[is_int] = [-(2**63) <= v <= INT64_MAX for v in compress(values, is_int)]
        out[is_int] = np.fromiter(compress(values, is_int), dtype=np.int64, count=int(is_int.sum()))
    memo: dict[Any, tuple[int, bool]] = {}  # value -> (id, whether it was a number beyond int64)
    beyond = 0
    for i in np.flatnonzero(~is_int).tolist():  # string ids: a handful, or old formats; huge numbers
        v = values[i]
        if v not in memo:
            memo[v] = string_id(str(v).strip(), string_ids)
        out[i], huge = memo[v]
        beyond += huge
    return out, beyond


def string_id(text: str, string_ids: dict[str, int]) -> tuple[int, bool]:
    """The id of a pid/tid written as text (or a number beyond int64), and whether it is such a
    number: digits ("1890023232", "stream 7") are the number; other text a stable negative id."""
    digits = re.search(r"(\d+)\s*$", text)
    numeric = text.lstrip("-").isdigit()
    if digits and (numeric or text.lower().startswith("stream")):
        number = int(digits.group(1))
        if number <= INT64_MAX:
            return (-number if text.startswith("-") else number), False
    return string_ids.setdefault(text, -2 - len(string_ids)), numeric


def microseconds_to_ns(ts_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact int64 ns from float64 microseconds written as decimals with up to 3 fractional digits.

    Returns (ns, ambiguous): ``ambiguous`` marks values at or above 2**43 us, where one float64
    stands for several nanosecond decimals; the caller re-reads those from the JSON text.
    """
    ts_us = np.asarray(ts_us, dtype=np.float64)
    small = np.abs(ts_us) < TS_EXACT_LIMIT_US
    ns = np.zeros(len(ts_us), dtype=np.int64)
    if small.any():
        values = ts_us[small]
        guess = np.rint(values * 1000.0).astype(np.int64)
        chosen = guess.copy()
        found = np.zeros(len(guess), dtype=bool)
        # the exact c satisfies float(c) / 1000 == ts (c < 2**53, and division is correctly
        # rounded); the float product can be off by a little, so try the neighbours
        for delta in (0, -1, 1, -2, 2):
            cand = guess + delta
            hit = ~found & (cand.astype(np.float64) / 1000.0 == values)
            chosen[hit] = cand[hit]
            found |= hit
        # values with more than 3 decimals (sub-ns) keep the nearest ns: the honest answer
        ns[small] = chosen
    ambiguous = ~small
    if ambiguous.any():
        whole = np.floor(ts_us[ambiguous])
        ns[ambiguous] = whole.astype(np.int64) * 1000 + np.rint((ts_us[ambiguous] - whole) * 1000).astype(np.int64)
    return ns, ambiguous


def decimal_text_to_ns(texts: list[bytes]) -> np.ndarray:
    """Exact ns from JSON number texts in microseconds ("1700000000000000.123" -> ...123).

    Vectorised with Arrow string kernels; exponent notation goes through Decimal.
    """
    import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
    arr = pa.array(texts, pa.binary()).cast(pa.string())
    negative = pc.starts_with(arr, "-").to_numpy(zero_copy_only=False)
    unsigned = pc.utf8_ltrim(arr, "-+")
    parts = pc.split_pattern(unsigned, ".", max_splits=1)
    lengths = pc.list_value_length(parts).to_numpy(zero_copy_only=False)
    exponent = pc.match_substring_regex(arr, "[eE]").to_numpy(zero_copy_only=False)
    whole_text = pc.list_element(parts, 0)
    whole_text = pc.if_else(pc.equal(whole_text, ""), "0", whole_text)
    safe = ~exponent
    out = np.zeros(len(texts), dtype=np.int64)
    if safe.any():
        mask = pa.array(safe)
        whole = pc.cast(pc.filter(whole_text, mask), pa.int64()).to_numpy(zero_copy_only=False)
        frac_parts = pc.filter(parts, mask)
        has_frac = lengths[safe] > 1
        frac = np.zeros(int(safe.sum()), dtype=np.int64)
        if has_frac.any():
            frac_text = pc.list_element(pc.filter(frac_parts, pa.array(has_frac)), 1)
            padded = pc.utf8_rpad(frac_text, 4, "0")
            first3 = pc.cast(pc.utf8_slice_codeunits(padded, 0, 3), pa.int64()).to_numpy(zero_copy_only=False)
            fourth = pc.cast(pc.utf8_slice_codeunits(padded, 3, 4), pa.int64()).to_numpy(zero_copy_only=False)
            frac[has_frac] = first3 + (fourth >= 5)
        out[safe] = whole * 1000 + frac
    for i in np.flatnonzero(exponent).tolist():
        out[i] = abs(int((Decimal(texts[i].decode()) * 1000).to_integral_value()))
    return np.where(negative, -out, out)
