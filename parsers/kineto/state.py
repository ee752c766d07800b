"""The parse state of one Kineto file (``FileState``) and one decoded chunk of events (``Chunk``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import msgspec
import numpy as np

from traceview.parsers.kineto.clock import PhaseClock
from traceview.parsers.kineto.events import Event, EVENTS_DECODER, OP_INPUT_COLUMNS
from traceview.parsers.kineto.fields import Codes, NativeFields, op_input_memo, StructFields
from traceview.parsing import ProgressFn


@dataclass
class Chunk:
    """One decoded chunk of events and the per-event columns read from all of them."""

    fields: "StructFields | NativeFields"  # the events' fields (msgspec structs or native columns)
    piece: Callable[[], bytes]  # the chunk's JSON text (slow paths only)
    # the chunk's text decoded by another decoder (from the event holding a marker on, if given)
    decode_again: Callable[[msgspec.json.Decoder, bytes | None], list[Any]]
    kind: np.ndarray  # int8 Kind codes, from the category
    category: np.ndarray  # codes in the category memo
    pid: np.ndarray
    tid: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    # async events' pairing key (category, id, name; object str), set by _keep_async when it has any
    async_key: np.ndarray | None = None

    @property
    def events(self) -> list[Event]:
        """The structs (counter, async and allocator events: only chunks decoded by msgspec hold them)."""
        return self.fields.structs()


class FileState:
    """The parse state of one Kineto file (every stage reads and fills it) and the counts of events
    by fate."""

    #: a chunk needs more of the file before it can be decoded (set and read while reading)
    _need_more: bool

    def __init__(self, path: Path, progress: ProgressFn | None, clock: PhaseClock | None = None) -> None:
        self.path = path
        self.progress = progress
        self._clock = clock  # not parse state: parallel.py ships no "_" attribute
        self.total_bytes = path.stat().st_size if path.exists() else 0
        self.columns: dict[str, list[Any]] = {}
        self.head: dict[str, Any] = {}
        self.tail: dict[str, Any] = {}
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[str, str] = {}
        self.flows: list[dict[str, np.ndarray]] = []  # per chunk: ph, cat codes, id, pid, tid, ts_ns
        self.memory: list[dict[str, np.ndarray]] = []  # per chunk: the memory table's columns
        # MEMORY_EVENTS_DECODER from the first allocator event on
        self.decoder: msgspec.json.Decoder[Any] = EVENTS_DECODER
        self.counts: dict[str, int] = {}
        self.unmapped: dict[str, int] = {}
        self.warnings: list[str] = []
        self.autograd_warnings: list[str] = []  # said once the links are made (_derived_fwdbwd)
        self.string_ids: dict[str, int] = {}
        self.n_rows = 0
        self.imprecise_ts = 0
        # B and E events (Chrome duration pairs), paired per thread once the file is read
        self.begins: list[dict[str, np.ndarray]] = []  # row (in the events table), pid, tid, ts, seq
        self.ends: list[dict[str, np.ndarray]] = []  # pid, tid, ts, seq
        # async begins and ends (b/e, S/F), paired per (pid, key: category, id, name) the same way
        self.async_begins: list[dict[str, np.ndarray]] = []  # row, pid, key (object str), ts, seq
        self.async_ends: list[dict[str, np.ndarray]] = []  # pid, key, ts, seq
        # per chunk: the counter table's columns but rank (name and series as object str arrays)
        self.counters: list[dict[str, np.ndarray]] = []
        self.unsupported_phases: dict[str, int] = {}
        self.dur_fixes = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))  # B rows, their durations
        self._need_more = False
        self.whole_events = False  # read_range: the input ends where an event ends, not with the array
        # string -> code memos shared by all chunks, so codes agree without unifying dictionaries
        self.ph_memo = Codes()
        self.cat_memo = Codes()
        self.name_memo = Codes()
        # one per OP_INPUT_COLUMNS column (``<column>_memo``): its texts as codes, so the column is
        # dictionary-encoded once, from codes, instead of hashing every row's text at the end
        for key in OP_INPUT_COLUMNS:
            setattr(self, op_input_memo(key), Codes())

    def _count(self, key: str, n: int) -> None:
        if n:
            self.counts[key] = self.counts.get(key, 0) + n
