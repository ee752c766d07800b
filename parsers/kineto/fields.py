"""An event chunk's fields as columns, whichever decoder read them (``StructFields`` from msgspec
structs, ``NativeFields`` from the native decoder), and the string -> code memos.
"""

from __future__ import annotations

from itertools import compress
from operator import attrgetter
from typing import Any, Callable, Iterator, Sequence

import msgspec
import numpy as np
import pyarrow as pa

from traceview.parsers.kineto.columns import (
    canonical_json, int_arg_column, is_not_none, ranks_text, string_id, three_dims,
)
from traceview.parsers.kineto.events import (
    Args, ASYNC_PHASES, COUNTER_PHASES, Event, get_args, get_id, OP_INPUT_COLUMNS, RAW_TIMES_DECODER,
)
from traceview.parsers.kineto.native import native_first_seen


#: Optional columns a chunk may lack; filled with nulls so every chunk has every column.
OPTIONAL_COLUMNS = {
    "collective": pa.string(), "msg_nelems": pa.int64(), "msg_bytes": pa.int64(), "msg_dtype": pa.string(),
    "group_size": pa.int32(), "process_group": pa.string(), "process_group_ranks": pa.string(),
    "copy_kind": pa.string(), "launch_kernel": pa.string(), "graph_id": pa.int64(), "graph_node_id": pa.int64(),
}


def op_input_memo(column: str) -> str:
    """The reader attribute holding the memo of one of ``OP_INPUT_COLUMNS`` (its codes' strings)."""
    return f"{column}_memo"


DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1,
    "byte": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "complexfloat": 8,
    "complexdouble": 16,
}


class Codes(dict):
    """String -> dense integer code, assigned on first sight. ``codes()`` maps a whole column in
    C (dict lookups through ``map``), about twice as fast as building an Arrow string array and
    dictionary-encoding it."""

    def __missing__(self, key: str) -> int:
        code = len(self)
        self[key] = code
        return code

    def codes(self, values: Iterator[str], n: int) -> np.ndarray:
        return np.fromiter(map(self.__getitem__, values), dtype=np.int32, count=n)

    def values(self) -> list[str]:  # type: ignore[override]
        return list(self.keys())

    def dictionary_array(self, codes: np.ndarray, mask: np.ndarray | None = None) -> pa.DictionaryArray:
        """``codes`` (``mask``: True where null) as a dictionary array of the memo's strings."""
        return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=mask),
                                              pa.array(self.values(), pa.string()))

    def codes_of_local(self, local: np.ndarray, strings: list[str]) -> np.ndarray:
        """Codes for ``strings[local]``: new strings get codes in the order of their first row,
        as ``codes()`` would give them reading the rows one by one (the memo's order is the
        dictionary's order in the tables)."""
        local = np.ascontiguousarray(local, dtype=np.int32)
        used = native_first_seen(local, len(strings)) if native_first_seen is not None else []
        table = np.zeros(len(strings), dtype=np.int32)
        table[used] = [self[strings[code]] for code in used]  # new strings get the next codes, in order
        return table[local]


#: Chunks decoded by the native column decoder, and chunks it declined (msgspec decoded them);
#: tests read it to check the native path is taken.
NATIVE_CHUNKS = {"native": 0, "fallback": 0}


class StructFields:
    """The fields of a chunk's events decoded by msgspec into ``Event`` structs (the reference
    path), read a column at a time with C-level ``map(attrgetter)``."""

    def __init__(self, events: list[Event], args: Sequence[Args] | None = None) -> None:
        """``args`` alone (``events`` empty): fields of those args only (the allocator's)."""
        self.events = events
        self.n = len(events) if args is None else len(args)
        self._args = args

    def structs(self) -> list[Event]:
        return self.events

    def args(self) -> Sequence[Args]:
        if self._args is None:
            self._args = list(map(get_args, self.events))
        return self._args

    def take(self, rows: np.ndarray) -> "StructFields":
        return StructFields([self.events[i] for i in rows.tolist()])

    def codes(self, memo: Codes, field: str) -> np.ndarray:
        return memo.codes(map(attrgetter(field), self.events), self.n)

    def strings(self, field: str, mask: np.ndarray | None = None) -> list[str]:
        """An event field (ph/cat/name) or a string arg (collective, dtype, pg_name) of each event."""
        if field in ("ph", "cat", "name"):
            return list(map(attrgetter(field), self.events if mask is None else compress(self.events, mask)))
        return list(map(attrgetter(field), self.args() if mask is None else compress(self.args(), mask)))

    def ranks_texts(self) -> list[str | None]:
        return [ranks_text(a.pg_ranks) for a in self.args()]

    def has_text(self, field: str) -> np.ndarray:
        """Whether each event's string arg ``field`` is non-empty."""
        return np.fromiter(map(len, self.strings(field)), dtype=np.int64, count=self.n) > 0

    def metadata(self, mask: np.ndarray) -> list[tuple[str, Any, Any, str]]:
        return [(ev.name, ev.pid, ev.tid, ev.args.name) for ev in compress(self.events, mask)]

    def id_texts(self, mask: np.ndarray) -> list[str]:
        return list(map(str, map(get_id, compress(self.events, mask))))

    def int_arg(self, field: str, counts: dict[str, int]) -> np.ndarray:
        return int_arg_column(self.args(), field, self.n, counts)

    def op_inputs(self, field: str) -> np.ndarray | None:
        """One of ``OP_INPUT_COLUMNS`` per event as canonical JSON text (None: absent), or None
        when no event has it."""
        values = list(map(attrgetter(field), self.args()))
        if field == "input_dims":
            old = list(map(attrgetter("input_dims_old"), self.args()))
            values = [v if v is not None else o for v, o in zip(values, old)]
        present = np.fromiter(map(is_not_none, values), dtype=bool, count=self.n)
        if not present.any():
            return None
        texts = np.full(self.n, None, dtype=object)
        texts[present] = [msgspec.json.encode(v).decode() for v in compress(values, present)]
        return texts

    def op_input_codes(self, field: str, memo: Codes) -> np.ndarray:
        """``op_inputs`` as int32 codes in ``memo`` (-1: absent), assigned in row order."""
        codes = np.full(self.n, -1, dtype=np.int32)
        texts = self.op_inputs(field)
        if texts is not None:
            present = np.fromiter(map(is_not_none, texts), dtype=bool, count=self.n)
            codes[present] = memo.codes(iter(texts[present]), int(present.sum()))
        return codes

    @staticmethod
    def exact_times(field: str) -> tuple[np.ndarray, np.ndarray] | None:  # noqa: ARG004
        """Exact ns read from the text by the native decoder: none here (``microseconds_to_ns``)."""
        return None

    def integer_times(self, field: str) -> np.ndarray | None:
        """``ts``/``dur`` as int64 when every event has an integer within int64, else None."""
        raw_values = list(map(attrgetter(field), self.events))
        if set(map(type, raw_values)) != {int}:
            return None
        try:
            return np.fromiter(raw_values, dtype=np.int64, count=self.n)
        except OverflowError:
            return None

    def float_times(self, field: str) -> np.ndarray:
        raw_values = list(map(attrgetter(field), self.events))
        try:
            return np.array(raw_values, dtype=np.float64)
        except OverflowError:  # an integer beyond a double's range
            return np.array([v if isinstance(v, float) or abs(v) < 2**1000 else np.inf for v in raw_values],
                            dtype=np.float64)

    @staticmethod
    def time_texts(field: str, rows: np.ndarray, piece: Callable[[], bytes]) -> list[bytes]:
        """The JSON texts of ``ts``/``dur`` of some events, read again from the chunk's text."""
        raw = RAW_TIMES_DECODER.decode(piece())
        get = attrgetter(field)
        return [bytes(get(raw[r])) for r in rows.tolist()]

    def launch_dims(self, prefix: str, rows: np.ndarray) -> np.ndarray:
        """grid or block of some events as (rows, 3) int64 (``three_dims``)."""
        args = self.args()
        values = [getattr(args[i], prefix) for i in rows.tolist()]
        try:
            return np.array(values, dtype=np.int64).reshape(len(values), 3)
        except (ValueError, OverflowError):  # not 3-dimensional, or beyond int64: row by row
            return np.asarray([three_dims(v) for v in values], dtype=np.int64)


#: the native decoder's dense columns that are not int64
_NATIVE_DTYPES = {"ph": np.int32, "cat": np.int32, "name": np.int32, "ts_kind": np.uint8, "dur_kind": np.uint8,
                  "ts_length": np.uint16, "dur_length": np.uint16, "ts_exact": np.uint8, "dur_exact": np.uint8}
#: its sparse columns (a value for each event that has the field), their dtypes and defaults
_NATIVE_SPARSE = {
    **{key: (np.int64, -1) for key in ("id", "external_id", "external_id_old", "correlation", "stream", "device",
                                       "bytes", "in_nelems", "out_nelems", "group_size", "sequence_number",
                                       "fwd_thread_id", "graph_id", "graph_node_id", "total_allocated",
                                       "total_reserved", "device_id", "device_type", "addr")},
    "mem_bytes": (np.int64, 0),
    # codes into the chunk's strings: -1 a number (ids), 0 the empty string (string args: their default)
    **{key: (np.int32, -1) for key in ("pid_text", "tid_text", "id_text")},
    **{key: (np.int32, 0) for key in ("collective", "dtype", "pg_name", "pg_ranks", "arg_name", "launch_kernel")},
    # codes of the raw JSON texts of an op's recorded inputs, -1 absent
    **{key: (np.int32, -1) for key in (*OP_INPUT_COLUMNS, "input_dims_old")},
    "grid_length": (np.int32, 0), "block_length": (np.int32, 0),
}
#: columns with one value per event (grid and block are flat: ``grid_length`` values per event)
_NATIVE_FLAT = ("grid", "block")
#: phases whose handling reads struct fields the native decoder does not provide
_STRUCT_ONLY_PHASES = frozenset(COUNTER_PHASES + ASYNC_PHASES)
#: what ``Event`` holds for an absent ts (NaN: skipped) and dur (the integer 0)
_ABSENT_TIME = {"ts": np.nan, "dur": 0.0}


def _native_column(result: dict[str, Any], key: str) -> np.ndarray:
    """One column of the native decoder's result, a value per event of the chunk: sparse columns
    filled with their defaults; ``ts``/``dur`` as ``<field>_int``, ``<field>_is_int`` and
    ``<field>_float``, what the struct field holds (an int, or a float; absent: the struct's
    default); ``grid_start``/``block_start``: where each event's values start in the flat column."""
    n = int(result["n"])
    if key in _NATIVE_SPARSE:
        dtype, default = _NATIVE_SPARSE[key]
        column = np.full(n, default, dtype=dtype)
        column[np.frombuffer(result[f"{key}_index"], dtype=np.int32)] = np.frombuffer(result[f"{key}_value"], dtype)
        return column
    field, _, part = key.partition("_")
    if field in _ABSENT_TIME and part in ("int", "is_int", "float"):
        kind = np.frombuffer(result[f"{field}_kind"], dtype=np.uint8)
        raw = np.frombuffer(result[f"{field}_value"], dtype=np.int64)
        if part == "is_int":
            return kind == 1 if field == "ts" else kind != 2  # an absent dur is the integer 0
        if part == "int":
            return np.where(kind == 1, raw, 0)
        # ints as the nearest double, as float(int) makes them; absent ones the struct's default
        return np.where(kind == 2, raw.view(np.float64), np.where(kind == 1, raw.astype(np.float64),
                                                                  _ABSENT_TIME[field]))
    if part == "start" and field in _NATIVE_FLAT:
        lengths = _native_column(result, f"{field}_length")
        return np.cumsum(lengths, dtype=np.int64) - lengths
    return np.frombuffer(result[key], dtype=_NATIVE_DTYPES.get(key, np.int64))


class NativeFields:
    """The fields of a chunk's events as columns filled by the native decoder (``_kineto_columns``):
    strings as int32 codes into the chunk's ``strings``, numbers as int64/float64 arrays. Answers
    what ``StructFields`` answers, with the same values. Columns are made when first asked for,
    for the whole chunk (shared by the fields of its row subsets, ``take``)."""

    def __init__(self, result: dict[str, Any], buf: bytearray, rows: np.ndarray | None = None,
                 whole: dict[str, np.ndarray] | None = None) -> None:
        self.result = result
        self.strings_list: list[str] = result["strings"]
        self.buf = buf
        self.rows = rows
        self.n = int(result["n"]) if rows is None else len(rows)
        self.whole: dict[str, np.ndarray] = {} if whole is None else whole
        self.mine: dict[str, np.ndarray] = {}

    @classmethod
    def of(cls, result: dict[str, Any], buf: bytearray) -> "NativeFields | None":
        """The decoder's result as fields, or None for a chunk holding events whose handling
        needs structs (counters, async events)."""
        strings: list[str] = result["strings"]
        phases = {strings[c] for c in np.unique(np.frombuffer(result["ph"], dtype=np.int32)).tolist()}
        return None if phases & _STRUCT_ONLY_PHASES else cls(result, buf)

    def column(self, key: str, rows: bool = True) -> np.ndarray:
        """A column for this subset's rows (``rows=False``: for the whole chunk)."""
        whole = self.whole.get(key)
        if whole is None:
            whole = self.whole[key] = _native_column(self.result, key)
        if self.rows is None or not rows:
            return whole
        mine = self.mine.get(key)
        if mine is None:
            mine = self.mine[key] = whole[self.rows]
        return mine

    @property
    def string_array(self) -> np.ndarray:
        if "strings" not in self.whole:
            self.whole["strings"] = np.array(self.strings_list, dtype=object)
        return self.whole["strings"]

    def structs(self) -> list[Event]:
        raise RuntimeError("the native decoder declines chunks with counter or async events")

    def take(self, rows: np.ndarray) -> "NativeFields":
        return NativeFields(self.result, self.buf, rows if self.rows is None else self.rows[rows], self.whole)

    def codes(self, memo: Codes, field: str) -> np.ndarray:
        return memo.codes_of_local(self.column(field), self.strings_list)

    def strings(self, field: str, mask: np.ndarray | None = None) -> list[str]:
        codes = self.column(field)
        return self.string_array[codes if mask is None else codes[mask]].tolist()

    def ranks_texts(self) -> list[str | None]:
        return [text or None for text in self.string_array[self.column("pg_ranks")].tolist()]

    def has_text(self, field: str) -> np.ndarray:
        """Whether each event's string arg ``field`` is non-empty."""
        if "lengths" not in self.whole:
            self.whole["lengths"] = np.fromiter(map(len, self.strings_list), dtype=np.int64,
                                                count=len(self.strings_list))
        return self.whole["lengths"][self.column(field)] > 0

    def values(self, field: str, mask: np.ndarray) -> list[int | str]:
        """pid, tid or id of some events as decoded: an int, or the text it was written as."""
        values: list[int | str] = self.column(field)[mask].tolist()
        texts = self.column(f"{field}_text")[mask]
        for i in np.flatnonzero(texts >= 0).tolist():  # text ids: a handful per file
            values[i] = self.strings_list[texts[i]]
        return values

    def metadata(self, mask: np.ndarray) -> list[tuple[str, Any, Any, str]]:
        return list(zip(self.strings("name", mask), self.values("pid", mask), self.values("tid", mask),
                        self.strings("arg_name", mask)))

    def id_texts(self, mask: np.ndarray) -> list[str]:
        return list(map(str, self.values("id", mask)))

    def int_arg(self, field: str, counts: dict[str, int]) -> np.ndarray:  # noqa: ARG002 (none beyond int64)
        return self.column(field)

    def op_input_codes(self, field: str, memo: Codes) -> np.ndarray:
        """As ``StructFields.op_input_codes``: only the distinct raw texts are made canonical,
        and codes go to their canonical texts in the order of their first row."""
        codes = self.column(field)
        if field == "input_dims":
            codes = np.where(codes >= 0, codes, self.column("input_dims_old"))
        out = np.full(self.n, -1, dtype=np.int32)
        present = codes >= 0
        if not present.any():
            return out
        local = codes[present]
        texts = list(self.strings_list)
        for code in np.unique(local).tolist():
            texts[code] = canonical_json(texts[code])
        out[present] = memo.codes_of_local(local, texts)
        return out

    def thread_ids(self, string_ids: dict[str, int]) -> tuple[np.ndarray, np.ndarray, int]:
        """pid and tid as ``KinetoFile._thread_ids`` makes them, and how many were numbers beyond
        int64 written as text: texts get ids (``string_id``) in the order first seen, pid before tid."""
        pid, tid = self.column("pid"), self.column("tid")
        texts = np.stack([self.column("pid_text"), self.column("tid_text")], axis=1).ravel()
        written = texts >= 0
        if not written.any():
            return pid, tid, 0
        used, first = np.unique(texts[written], return_index=True)
        ids = np.zeros(len(self.strings_list), dtype=np.int64)
        huge = np.zeros(len(self.strings_list), dtype=np.int64)
        for code in used[np.argsort(first)].tolist():
            ids[code], huge[code] = string_id(self.strings_list[code].strip(), string_ids)
        both = np.stack([pid, tid], axis=1).ravel().copy()
        both[written] = ids[texts[written]]
        return both[0::2].copy(), both[1::2].copy(), int(huge[texts[written]].sum())

    def integer_times(self, field: str) -> np.ndarray | None:
        return self.column(f"{field}_int") if self.column(f"{field}_is_int").all() else None

    def exact_times(self, field: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``ts``/``dur`` in exact ns where the decoder computed them from the decimal text (at most
        3 decimals, below ``TS_EXACT_LIMIT_US``: what ``microseconds_to_ns`` gives there), and where."""
        if f"{field}_ns" not in self.result:  # a decoder built before it gave them (a stale build)
            return None
        return self.column(f"{field}_ns"), self.column(f"{field}_exact").view(bool)

    def float_times(self, field: str) -> np.ndarray:
        return self.column(f"{field}_float")

    def time_texts(self, field: str, rows: np.ndarray, piece: Callable[[], bytes]) -> list[bytes]:  # noqa: ARG002
        """The JSON texts of ``ts``/``dur`` of some events, where the decoder found them in the buffer."""
        offsets = self.column(f"{field}_offset")[rows].tolist()
        lengths = self.column(f"{field}_length")[rows].tolist()
        return [bytes(self.buf[o : o + k]) for o, k in zip(offsets, lengths)]

    def launch_dims(self, prefix: str, rows: np.ndarray) -> np.ndarray:
        """grid or block of some events as (rows, 3) int64, as ``three_dims`` makes them: missing
        dimensions 1, absent -1."""
        lengths = self.column(f"{prefix}_length")[rows]
        starts = self.column(f"{prefix}_start")[rows]
        flat = self.column(prefix, rows=False)
        dims = np.ones((len(rows), 3), dtype=np.int64)
        dims[lengths == 0] = -1
        for axis in range(3):
            has = lengths > axis
            dims[has, axis] = flat[starts[has] + axis]
        return dims


class Consumed:
    """Blocks of one byte range, counting the bytes handed out: ``tell()`` for the progress
    callback, as a file's position is for a whole file."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self._blocks = blocks
        self.consumed = 0

    def __iter__(self) -> Iterator[bytes]:
        for block in self._blocks:
            self.consumed += len(block)
            yield block

    def tell(self) -> int:
        return self.consumed
