"""The canonical model of a trace: Arrow tables plus per-rank metadata.

Every parser (Kineto JSON, Nsight Systems SQLite) produces a :class:`Trace`; every analysis reads
one. The schema is documented in ``docs/schema.md``; keep the two in step.

Conventions that make vectorised analyses simple:

* one row per event in ``Trace.events``; times are int64 **nanoseconds**, exact;
* ``kind`` is dictionary-encoded with the fixed dictionary :data:`KINDS`, so its indices are stable
  codes (``Kind.KERNEL == 0`` ...) that analyses can compare with numpy;
* identifiers that most events have (device, stream, correlation, external id) use ``-1`` for
  "absent" instead of nulls, so they convert to plain numpy arrays;
* optional, type-specific columns (bytes, grid, collective name, ...) are nullable.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import mmap
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa


class Kind(enum.IntEnum):
    """Event kinds; the value is the index into the ``kind`` dictionary."""

    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2
    SYNC = 3  # GPU-side synchronization activity (Kineto ``cuda_sync``, Nsight SYNCHRONIZATION)
    RUNTIME = 4  # host API call: CUDA runtime or driver, HIP (see ``category`` for which)
    CPU_OP = 5
    PYTHON_FUNCTION = 6
    ANNOTATION = 7  # CPU-side user annotation / NVTX range
    GPU_ANNOTATION = 8
    OTHER = 9


KINDS: list[str] = [k.name.lower() for k in Kind]
KIND_TYPE = pa.dictionary(pa.int8(), pa.string())
NAME_TYPE = pa.dictionary(pa.int32(), pa.string())

#: Kinds that execute on a GPU stream.
GPU_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.GPU_ANNOTATION)
#: Kinds whose union is "GPU activity" in docs/metrics.md (sync events are excluded).
ACTIVITY_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)

#: The events table schema. Column order is part of the contract (docs/schema.md).
EVENT_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("kind", KIND_TYPE, nullable=False),
        pa.field("category", NAME_TYPE, nullable=False),
        pa.field("name", NAME_TYPE, nullable=False),
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("dur_ns", pa.int64(), nullable=False),
        pa.field("pid", pa.int64(), nullable=False),
        pa.field("tid", pa.int64(), nullable=False),
        pa.field("device", pa.int32(), nullable=False),
        pa.field("stream", pa.int64(), nullable=False),
        pa.field("correlation", pa.int64(), nullable=False),
        pa.field("external_id", pa.int64(), nullable=False),
        # optional, typed where the source has them
        pa.field("bytes", pa.int64()),
        pa.field("copy_kind", NAME_TYPE),
        pa.field("grid_x", pa.int32()),
        pa.field("grid_y", pa.int32()),
        pa.field("grid_z", pa.int32()),
        pa.field("block_x", pa.int32()),
        pa.field("block_y", pa.int32()),
        pa.field("block_z", pa.int32()),
        pa.field("collective", NAME_TYPE),
        pa.field("msg_nelems", pa.int64()),
        pa.field("msg_bytes", pa.int64()),
        pa.field("msg_dtype", NAME_TYPE),
        pa.field("group_size", pa.int32()),
        pa.field("process_group", NAME_TYPE),
        pa.field("process_group_ranks", NAME_TYPE),
        # the kernel a launch call names (ROCm's ``kernel`` arg): a graph capture's nodes by name
        pa.field("launch_kernel", NAME_TYPE),
        # a graph-replayed kernel's graph and node ids (Kineto ``graph id``/``graph node id`` args,
        # Nsight ``graphId``/``graphNodeId``): the same node in every replay
        pa.field("graph_id", pa.int64()),
        pa.field("graph_node_id", pa.int64()),
        # the recorded inputs of an op (Kineto ``record_shapes=True``), each the JSON text of the arg
        # as written: shapes per argument, dtypes, strides, scalar arguments (analyses/opmodels.py)
        pa.field("input_dims", NAME_TYPE),
        pa.field("input_types", NAME_TYPE),
        pa.field("input_strides", NAME_TYPE),
        pa.field("concrete_inputs", NAME_TYPE),
        # the cost XLA's HLO cost analysis records for an op (XSpace ``flops``/``bytes_accessed``
        # stats; null in formats that record none): what analyses/efficiency.py puts on the roofline
        pa.field("recorded_flops", pa.float64()),
        pa.field("recorded_bytes", pa.int64()),
    ]
)

#: Links between events: row indices into ``Trace.events``.
LINK_TYPES = ["launch", "cpu_op", "flow"]
LINK_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        # launch: runtime/driver call -> GPU activity (correlation, within one process)
        # cpu_op: CPU op -> runtime call it issued (external id)
        # flow: any other Chrome-trace flow (e.g. fwdbwd), by flow id
        pa.field("type", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("category", NAME_TYPE, nullable=False),
        pa.field("src_row", pa.int64(), nullable=False),
        pa.field("dst_row", pa.int64(), nullable=False),
    ]
)

#: Profiler steps (one row per step per rank).
STEP_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("end_ns", pa.int64(), nullable=False),
    ]
)

#: Every name a step may have by default (ranges with these names never count as CPU context).
DEFAULT_STEP_MARKER = r"^(ProfilerStep#\d+|[Ss]tep[ _#:-]?\d+|[Ii]teration[ _#:-]?\d+)$"

#: The defaults, in order of precedence per rank: PyTorch profiler steps (Kineto, or NVTX under
#: ``emit_nvtx``) win; a rank without them takes ``step_N`` / ``iteration N`` style ranges.
PROFILER_STEP_MARKER = r"^ProfilerStep#\d+$"
GENERIC_STEP_MARKER = r"^([Ss]tep|[Ii]teration)[ _#:-]?\d+$"
#: Categories of CPU ranges that are never steps (OS runtime calls of Nsight exports).
NON_STEP_CATEGORIES = ("os_runtime",)

#: Allocator events (Kineto ``[memory]`` instants): one row per allocation or free, in source order.
#: ``device_type`` is PyTorch's ``c10::DeviceType`` code (0 CPU, 1 CUDA, 6 HIP, ...); CPU memory has
#: ``device`` -1. ``bytes`` is signed (allocation > 0, free < 0); the totals are the allocator's
#: counters for that device after the event, null where the source has none (PyTorch < 1.10).
MEMORY_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("device", pa.int32(), nullable=False),
        pa.field("device_type", pa.int16(), nullable=False),
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("total_allocated_bytes", pa.int64()),
        pa.field("total_reserved_bytes", pa.int64()),
        pa.field("addr", pa.int64()),
        pa.field("pid", pa.int64(), nullable=False),
        pa.field("tid", pa.int64(), nullable=False),
    ]
)

#: Counter samples (Chrome trace ``ph: "C"`` events): one row per numeric arg of each counter event.
#: ``name`` is the counter's name (the event name, with ``[id]`` appended when the event has an
#: ``id``, as the Chrome trace format says); ``series`` is the arg's key (one counter can plot
#: several series); ``value`` is the sample at ``ts_ns``. Rows in source order.
COUNTER_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("pid", pa.int64(), nullable=False),
        pa.field("tid", pa.int64(), nullable=False),
        pa.field("name", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("series", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
    ]
)


@dataclass
class DeviceInfo:
    """One GPU (or other accelerator) as the trace describes it."""

    id: int
    name: str = ""
    sm_count: int | None = None
    total_memory_bytes: int | None = None
    compute_capability: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankInfo:
    """What one rank's source says about itself."""

    rank: int
    source_path: str
    source_format: str  # the registered InputFormat name: "kineto", "nsys", "rocprof", ...
    format_version: str = ""
    rank_source: str = ""  # how the rank was determined: distributedInfo, file name, assigned, ...
    world_size: int | None = None
    devices: list[DeviceInfo] = field(default_factory=list)
    distributed_info: dict[str, Any] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)
    thread_names: dict[str, str] = field(default_factory=dict)  # "pid:tid" -> name
    base_time_ns: int = 0
    #: other top-level metadata as found in the source (may hold secrets: never render raw)
    raw_metadata: dict[str, Any] = field(default_factory=dict)
    #: counts of source events by what became of them: ``events_read`` is the sum of the fates
    #: (``mapped``, ``metadata``, ``flow``, ``memory``, ``counter``, ``paired_end``,
    #: ``async_paired_end``, ``skipped_<reason>``); ``coerced_<what>`` / ``clamped_<what>`` count
    #: values changed or read as absent, ``counter_samples`` / ``async_instants`` annotate (not fates)
    event_counts: dict[str, int] = field(default_factory=dict)
    #: the dropped events that carried or may have carried activity (a time on a CPU thread or a
    #: GPU), by fate reason (a subset of the ``skipped_<reason>`` counts, chosen by the parser):
    #: every figure of the rank leaves them out, and the report says so beside its figures
    activity_dropped: dict[str, int] = field(default_factory=dict)
    #: source categories that had no mapping (kept as kind "other"), with counts
    unmapped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RankInfo":
        data = dict(data)
        data["devices"] = [DeviceInfo(**d) for d in data.get("devices", [])]
        data["process_names"] = {int(k): v for k, v in data.get("process_names", {}).items()}
        return cls(**data)


@dataclass
class Trace:
    """A loaded trace: all ranks, one table of events, links between them, and metadata."""

    events: pa.Table
    links: pa.Table
    ranks: dict[int, RankInfo]
    steps: pa.Table
    warnings: list[str] = field(default_factory=list)
    #: allocator events (:data:`MEMORY_SCHEMA`); empty when the source has none
    memory: pa.Table = field(default_factory=lambda: empty_memory())
    #: counter samples (:data:`COUNTER_SCHEMA`); empty when the source has none
    counters: pa.Table = field(default_factory=lambda: empty_counters())

    # ----------------------------------------------------------------- convenience
    @property
    def rank_ids(self) -> list[int]:
        return sorted(self.ranks)

    @property
    def num_events(self) -> int:
        return self.events.num_rows

    def __repr__(self) -> str:
        formats = sorted({info.source_format for info in self.ranks.values()})
        return (f"<Trace {len(self.ranks)} rank(s), {self.num_events:,} events, {self.steps.num_rows} step(s), "
                f"{'/'.join(formats) or 'no'} input>")

    @property
    def start_ns(self) -> int:
        """The first event's start (ns, on the trace's clock): the origin of relative times."""
        import pyarrow.compute as pc  # here: not before the parse workers start (~35 ms; loading.meanwhile)
        if self.events.num_rows == 0:
            return 0
        return int(pc.min(self.events.column("start_ns")).as_py())

    def relative(self, frame: "Any") -> "Any":
        """A copy of a DataFrame with its absolute time columns (``start_ns``, ``end_ns``,
        ``*_start_ns``, ``*_end_ns``, ``first_start_ns``, ``last_end_ns``) made relative to the trace's
        first event: ns since :attr:`start_ns`. Durations (``dur_ns``...) are left as they are."""
        origin = self.start_ns
        out = frame.copy()
        for col in out.columns:
            name = str(col)
            if name in ("start_ns", "end_ns") or name.endswith(("_start_ns", "_end_ns")):
                out[col] = out[col] - origin
        return out

    def column(self, name: str) -> np.ndarray:
        """A column as a numpy array (dictionary columns give their integer codes)."""
        col = self.events.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
            return col.indices.to_numpy(zero_copy_only=False)
        return col.to_numpy()

    def kind_codes(self) -> np.ndarray:
        return self.column("kind")

    def mask(self, *kinds: Kind) -> np.ndarray:
        return np.isin(self.kind_codes(), np.asarray([int(k) for k in kinds], dtype=np.int8))

    def names(self) -> np.ndarray:
        """Event names as an object array (decoded from the dictionary)."""
        return self.events.column("name").to_numpy(zero_copy_only=False)

    def to_pandas(self, kinds: tuple[Kind, ...] | None = None) -> "Any":
        """Events as a pandas DataFrame (optionally only some kinds); index = row in ``events``."""
        import pandas as pd

        table = self.events
        index = np.arange(table.num_rows)
        if kinds is not None:
            keep = self.mask(*kinds)
            index = np.flatnonzero(keep)
            table = table.filter(pa.array(keep))
        frame = table.to_pandas()
        frame.index = pd.Index(index, name="row")
        return frame

    def sql(self, query: str, **options: Any) -> "Any":
        """The result of a DuckDB SQL ``query`` over this trace's views (events, kernels, launches,
        ops, gaps, steps, collectives, ranks, ...: docs/sql.md) as a pandas DataFrame, strings scrubbed
        of secrets. ``options`` are :class:`~traceview.findings.Options` fields (``step_marker``...)."""
        from traceview.sqlviews import sql

        return sql(self, query, **options)

    def launch_links(self) -> tuple[np.ndarray, np.ndarray]:
        """(api_row, gpu_row) pairs: each host launch call and the GPU activity it launched."""
        return self._links_of("launch")

    def cpu_op_links(self) -> tuple[np.ndarray, np.ndarray]:
        """(cpu_op_row, runtime_row) pairs: which CPU op issued each runtime call."""
        return self._links_of("cpu_op")

    def _links_of(self, link_type: str) -> tuple[np.ndarray, np.ndarray]:
        if self.links.num_rows == 0:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty
        types = self.links.column("type").to_numpy(zero_copy_only=False)
        keep = types == link_type
        return (
            self.links.column("src_row").to_numpy()[keep],
            self.links.column("dst_row").to_numpy()[keep],
        )

    def find_steps(self, marker: str | None = None) -> pa.Table:
        """Steps from annotation ranges (Kineto user annotations, NVTX ranges, CPU ops) whose name
        matches ``marker`` (a regex, searched).

        With no marker, the steps the parser found: ``ProfilerStep#N`` (Kineto, or NVTX ranges under
        ``emit_nvtx``), else ``step_N`` / ``iteration N`` ranges (:func:`steps_from_annotations`).
        """
        if marker is None:
            return self.steps
        return steps_from_annotations(self.events, marker)

    def summary(self) -> dict[int, dict[str, Any]]:
        """Per-rank counts by kind, time span and step count (for ``traceview analyze``/``info``)."""
        out: dict[int, dict[str, Any]] = {}
        if self.events.num_rows == 0:
            for rank in self.ranks:
                out[rank] = {"events": 0, "by_kind": {}, "span_ns": 0, "steps": 0}
            return out
        rank_col = self.column("rank")
        kinds = self.kind_codes()
        start = self.column("start_ns")
        end = start + self.column("dur_ns")
        step_ranks = self.steps.column("rank").to_numpy() if self.steps.num_rows else np.empty(0)
        device = self.column("device")
        on_gpu = np.isin(kinds, np.asarray([int(k) for k in ACTIVITY_KINDS], dtype=np.int8))
        for rank in self.rank_ids:
            sel = rank_col == rank
            counts = np.bincount(kinds[sel], minlength=len(KINDS))
            out[rank] = {
                "events": int(sel.sum()),
                "by_kind": {KINDS[i]: int(c) for i, c in enumerate(counts) if c},
                "start_ns": int(start[sel].min()) if sel.any() else 0,
                "end_ns": int(end[sel].max()) if sel.any() else 0,
                "span_ns": int(end[sel].max() - start[sel].min()) if sel.any() else 0,
                "steps": int((step_ranks == rank).sum()),
                "devices": sorted(int(d) for d in np.unique(device[sel & on_gpu]) if d >= 0),
            }
        return out


# ------------------------------------------------------------------------- builders


def empty_links() -> pa.Table:
    return LINK_SCHEMA.empty_table()


def empty_steps() -> pa.Table:
    return STEP_SCHEMA.empty_table()


def empty_memory() -> pa.Table:
    return MEMORY_SCHEMA.empty_table()


def empty_counters() -> pa.Table:
    return COUNTER_SCHEMA.empty_table()


def make_counters_table(columns: dict[str, Any]) -> pa.Table:
    """A counters table from columns named as in :data:`COUNTER_SCHEMA` (all required): numpy
    arrays, or for ``name``/``series`` anything ``dictionary_column`` takes."""
    arrays = [dictionary_column(columns[f.name]) if pa.types.is_dictionary(f.type)
              else pa.array(np.asarray(columns[f.name]).astype(f.type.to_pandas_dtype(), copy=False), type=f.type)
              for f in COUNTER_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=COUNTER_SCHEMA)


def make_memory_table(columns: dict[str, np.ndarray], masks: dict[str, np.ndarray] | None = None) -> pa.Table:
    """A memory table from numpy columns named as in :data:`MEMORY_SCHEMA` (all required);
    ``masks`` marks the null entries of the nullable ones (True = null)."""
    masks = masks or {}
    arrays = [pa.array(np.asarray(columns[f.name]).astype(f.type.to_pandas_dtype(), copy=False),
                       type=f.type, mask=masks.get(f.name)) for f in MEMORY_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=MEMORY_SCHEMA)


def kind_array(codes: np.ndarray) -> pa.DictionaryArray:
    """Build the ``kind`` column from int8 codes (values of :class:`Kind`)."""
    # the dictionary is made here, not at import: pa.array imports pandas, which reading a
    # cached trace (`traceview info`) needs not
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()), pa.array(KINDS, pa.string()))


def dictionary_column(values: Any, index_type: pa.DataType = pa.int32()) -> pa.DictionaryArray:
    """Dictionary-encode a sequence of strings (None allowed)."""
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values, pa.string())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        return arr
    encoded = arr.dictionary_encode()
    if encoded.indices.type != index_type:
        encoded = pa.DictionaryArray.from_arrays(encoded.indices.cast(index_type), encoded.dictionary)
    return encoded


#: below this, :func:`lazy_zeros` is ``np.zeros``: a mapping of its own is worth it for big arrays only
OWN_MAPPING_BYTES = 1 << 20


def lazy_zeros(n: int, dtype: type[np.generic]) -> np.ndarray:
    """Zeros that cost no memory until written: an anonymous private mapping of their own, whose
    pages the kernel supplies (zeroed) when first touched, and reading a page never touched maps
    the one shared zero page. ``np.zeros`` asks ``calloc``, which maps a block of its own only above
    glibc's mmap threshold; the threshold rises to 32 MB as big arrays are freed, and below it
    ``calloc`` clears heap memory, making every page resident (18 MB for an int32 column of a
    4.6 M-row Nsight export that a thousand memcpy rows use)."""
    nbytes = n * np.dtype(dtype).itemsize
    if nbytes < OWN_MAPPING_BYTES or not hasattr(mmap, "MAP_PRIVATE"):
        return np.zeros(n, dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE), dtype=dtype)


def zero_buffer(num_bytes: int) -> pa.Buffer:
    """A buffer of ``num_bytes`` zero bytes whose pages cost no memory until written
    (:func:`lazy_zeros`). Arrow buffers are never written once built."""
    return pa.py_buffer(lazy_zeros(num_bytes, np.uint8))


def null_array(data_type: pa.DataType, num_rows: int, zeros: pa.Buffer | None = None,
               dictionary: pa.Array | None = None) -> pa.Array:
    """An all-null column of a fixed-width or dictionary type, backed by ``zeros`` (a
    :func:`zero_buffer` of at least ``8 * num_rows`` bytes, shared by every such column of a
    table) for both its validity bitmap and its values. ``pa.nulls`` writes zeros into a buffer of
    its own per column: on the 141 MB benchmark trace the 11 columns its Kineto events lack (message
    sizes, process groups, op inputs ...) held ~19 MB, resident through the analyses. A dictionary
    column gets ``dictionary`` (default: an empty one)."""
    zeros = zeros if zeros is not None else zero_buffer(8 * num_rows)
    if pa.types.is_dictionary(data_type):
        indices = pa.Array.from_buffers(data_type.index_type, num_rows, [zeros, zeros], null_count=num_rows)
        return pa.DictionaryArray.from_arrays(
            indices, dictionary if dictionary is not None else pa.array([], data_type.value_type))
    if pa.types.is_integer(data_type) or pa.types.is_floating(data_type):
        return pa.Array.from_buffers(data_type, num_rows, [zeros, zeros], null_count=num_rows)
    return pa.nulls(num_rows, data_type)


def make_events_table(columns: dict[str, Any], num_rows: int) -> pa.Table:
    """Assemble an events table from whatever columns a parser has; missing ones get defaults.

    Required identifier columns default to -1; optional columns default to all-null (sharing one
    zero buffer: :func:`null_array`).
    """
    arrays = []
    zeros: pa.Buffer | None = None
    for fld in EVENT_SCHEMA:
        value = columns.get(fld.name)
        if value is None:
            if fld.name in ("device", "stream", "correlation", "external_id", "pid", "tid"):
                value = pa.array(np.full(num_rows, -1, dtype=fld.type.to_pandas_dtype()))
            elif fld.name == "rank":
                value = pa.array(np.zeros(num_rows, dtype=np.int32))
            else:
                zeros = zeros if zeros is not None else zero_buffer(8 * num_rows)
                value = null_array(fld.type, num_rows, zeros)
        elif pa.types.is_dictionary(fld.type):
            if not isinstance(value, pa.DictionaryArray):
                value = dictionary_column(value, fld.type.index_type)
            elif value.type != fld.type:
                value = pa.DictionaryArray.from_arrays(
                    value.indices.cast(fld.type.index_type), value.dictionary.cast(pa.string())
                )
        else:
            if not isinstance(value, (pa.Array, pa.ChunkedArray)):
                value = pa.array(value, fld.type)
            elif value.type != fld.type:
                value = value.cast(fld.type)
        if len(value) != num_rows:
            raise ValueError(f"column {fld.name} has {len(value)} rows, expected {num_rows}")
        arrays.append(value)
    return pa.Table.from_arrays(arrays, schema=EVENT_SCHEMA)


def make_links_table(rank: np.ndarray, link_type: str, category: Any, src: np.ndarray, dst: np.ndarray) -> pa.Table:
    n = len(src)
    type_arr = pa.DictionaryArray.from_arrays(
        pa.array(np.full(n, LINK_TYPES.index(link_type), dtype=np.int8)), pa.array(LINK_TYPES)
    )
    if isinstance(category, str):
        category = [category] * n
    return pa.Table.from_arrays(
        [
            pa.array(np.asarray(rank, dtype=np.int32)),
            type_arr,
            dictionary_column(category),
            pa.array(np.asarray(src, dtype=np.int64)),
            pa.array(np.asarray(dst, dtype=np.int64)),
        ],
        schema=LINK_SCHEMA,
    )


def join_on_keys(
    left_keys: list[np.ndarray], right_keys: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Inner equi-join of two key sets; returns (left_positions, right_positions), ordered by
    left position, then right position.

    Many-to-many matches are all returned, which is what CUDA graph launches need (one
    ``cudaGraphLaunch`` correlation -> many kernels). Integer keys use a sort-based join in numpy
    (several keys are hashed into one and every match is verified component by component), or,
    for one key whose right side is unique and spans few values (ids: correlations, External
    ids), a direct lookup table (``unique_dense_join``); other key types go through Arrow's
    hash join.
    """
    n_left, n_right = len(left_keys[0]), len(right_keys[0])
    empty = np.empty(0, dtype=np.int64)
    if n_left == 0 or n_right == 0:
        return empty, empty
    left_keys = [np.asarray(k) for k in left_keys]
    right_keys = [np.asarray(k) for k in right_keys]
    if not all(k.dtype.kind in "iub" for k in left_keys + right_keys):
        return _arrow_join(left_keys, right_keys)
    if len(left_keys) == 1:
        left_hash, right_hash = left_keys[0].astype(np.int64), right_keys[0].astype(np.int64)
        dense = unique_dense_join(left_hash, right_hash)
        if dense is not None:
            return dense
    else:
        left_hash, right_hash = hash_keys(left_keys), hash_keys(right_keys)
    order = np.argsort(right_hash, kind="stable")
    sorted_right = right_hash[order]
    lo = np.searchsorted(sorted_right, left_hash, "left")
    hi = np.searchsorted(sorted_right, left_hash, "right")
    counts = hi - lo
    total = int(counts.sum())
    if total == 0:
        return empty, empty
    lpos = np.repeat(np.arange(n_left, dtype=np.int64), counts)
    within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    rpos = order[np.repeat(lo, counts) + within].astype(np.int64)
    if len(left_keys) == 1:  # the stable argsort kept each key's right positions in order
        return lpos, rpos
    ok = np.ones(total, dtype=bool)  # drop hash collisions
    for lk, rk in zip(left_keys, right_keys):
        ok &= lk[lpos] == rk[rpos]
    lpos, rpos = lpos[ok], rpos[ok]
    # stable argsort kept equal hashes in right order, but hashes interleave keys: re-sort
    final = np.lexsort((rpos, lpos))
    return lpos[final], rpos[final]


#: ``unique_dense_join`` builds its table when the right keys span at most this many values per
#: key of both sides (plus a constant): the table is then about as big as the keys themselves.
DENSE_JOIN_SPAN_PER_KEY = 4


def unique_dense_join(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``join_on_keys`` of one int64 key when every right key is distinct and they span few values:
    a table from key to right position, looked up for every left key. No sort: 176k left keys
    against 127k distinct right keys among 1M ids took 2.1 ms in shuffled order against 50 ms
    sorted, and 1.1 against 4.6 ms in the nearly sorted order of the 141 MB benchmark trace's
    External ids. None when the right keys repeat or spread too far: the caller sorts."""
    low, high = int(right.min()), int(right.max())
    span = high - low + 1
    if span > DENSE_JOIN_SPAN_PER_KEY * (len(left) + len(right)) + 4096:
        return None
    position_type = np.int32 if len(right) < 2**31 else np.int64
    table: np.ndarray = np.full(span, -1, dtype=position_type)
    table[right - low] = np.arange(len(right), dtype=position_type)
    if np.count_nonzero(table >= 0) != len(right):
        return None  # a key repeats: one entry per key cannot hold it
    # left keys outside [low, high] match nothing (and would wrap around when shifted)
    candidates = np.flatnonzero((left >= low) & (left <= high))
    found = table[left[candidates] - low]
    matched = found >= 0
    return candidates[matched].astype(np.int64), found[matched].astype(np.int64)


def hash_keys(keys: list[np.ndarray]) -> np.ndarray:
    """Mix several integer columns into one int64 (collisions are checked by the caller)."""
    mixed = np.zeros(len(keys[0]), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for key in keys:
            mixed = (mixed ^ key.astype(np.int64).view(np.uint64)) * np.uint64(0x9E3779B97F4A7C15)
            mixed ^= mixed >> np.uint64(29)
    return mixed.view(np.int64)


def _arrow_join(left_keys: list[np.ndarray], right_keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    n_keys = len(left_keys)
    left = pa.table({**{f"k{i}": left_keys[i] for i in range(n_keys)}, "lpos": np.arange(len(left_keys[0]))})
    right = pa.table({**{f"k{i}": right_keys[i] for i in range(n_keys)}, "rpos": np.arange(len(right_keys[0]))})
    joined = left.join(right, keys=[f"k{i}" for i in range(n_keys)], join_type="inner")
    lpos = joined.column("lpos").to_numpy()
    rpos = joined.column("rpos").to_numpy()
    order = np.lexsort((rpos, lpos))
    return lpos[order], rpos[order]


def compile_step_marker(marker: str) -> re.Pattern[str]:
    """The step-marker regex, compiled; a bad one is a :class:`TraceviewError` (one line, exit 2)."""
    from traceview.errors import TraceviewError

    try:
        return re.compile(marker)
    except re.error as exc:
        raise TraceviewError(f"--step-marker {marker!r} is not a valid regular expression ({exc})") from None


def step_range_rows(events: pa.Table) -> np.ndarray:
    """Rows that may be steps: annotations (Kineto user annotations, NVTX ranges) and CPU ops (the
    oldest Kineto format records ``ProfilerStep#N`` as an ``Operator``); OS runtime calls never."""
    if events.num_rows == 0:
        return np.empty(0, dtype=np.int64)
    # one chunk (a parser's table) is used as it is: combine_chunks would copy it
    kind_col, category_col = events.column("kind"), events.column("category")
    kind = (kind_col.chunk(0) if kind_col.num_chunks == 1 else kind_col.combine_chunks()).indices.to_numpy(
        zero_copy_only=False)
    # two comparisons (np.isin looks int8 codes up through an int64 copy as long as the rows), a
    # block of rows at a time: over the whole column they held two bool columns (9 MB at 4.6 M
    # events) on top of a finished trace, the peak of an Nsight parse
    block = 1 << 20
    rows = np.concatenate([np.empty(0, dtype=np.int64)] + [
        np.flatnonzero((kind[i:i + block] == int(Kind.ANNOTATION)) | (kind[i:i + block] == int(Kind.CPU_OP))) + i
        for i in range(0, len(kind), block)])
    category = category_col.chunk(0) if category_col.num_chunks == 1 else category_col.combine_chunks()
    excluded = np.isin(np.asarray(category.dictionary.to_pylist(), dtype=object), list(NON_STEP_CATEGORIES))
    if excluded.any():
        # the categories of these rows only: a copy of the whole column (int32 per event, 18 MB at
        # 4.6 M events, on top of a finished trace at a parse's end) is not needed
        codes = category.indices.take(pa.array(rows)).fill_null(0).to_numpy(zero_copy_only=False)
        rows = rows[~excluded[codes]]
    return rows


def _names_matching(names: pa.DictionaryArray, pattern: re.Pattern[str]) -> np.ndarray:
    """Boolean per row of a dictionary name column: the name matches ``pattern`` (once per name)."""
    dictionary = names.dictionary.to_pylist()
    hit = np.array([bool(n is not None and pattern.search(n)) for n in dictionary] + [False], dtype=bool)
    return hit[names.indices.fill_null(len(dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)]


def _step_numbers(names: pa.DictionaryArray, rank: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The last integer of each step name (``ProfilerStep#12`` -> 12). A rank whose names have no
    number, or repeat one (a marker matching ``layer_3`` in every step), is numbered 0, 1, ... in
    time order instead, so step numbers are unique per rank."""
    dictionary = names.dictionary.to_pylist()
    last_int = [re.findall(r"\d+", n or "") for n in dictionary]
    # a number beyond int64 (a hand-edited name) counts as no number: the rank gets ordinals
    per_name = np.array([int(d[-1]) if d and len(d[-1]) < 19 else -1 for d in last_int] + [-1], dtype=np.int64)
    numbers = per_name[names.indices.fill_null(len(dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)]
    order = np.lexsort((start, rank))  # rows by rank, then time (callers pass at least one row)
    r, n = rank[order], numbers[order]
    new_rank = np.r_[True, r[1:] != r[:-1]]
    rank_id = np.cumsum(new_rank) - 1
    ordinal = np.arange(r.size) - np.flatnonzero(new_rank)[rank_id]
    by_number = np.lexsort((n, rank_id))
    repeated = np.zeros(r.size, dtype=bool)
    repeated[by_number[1:]] = (rank_id[by_number][1:] == rank_id[by_number][:-1]) & (
        n[by_number][1:] == n[by_number][:-1])
    needs_ordinals = np.bincount(rank_id, weights=(repeated | (n < 0)).astype(np.float64)) > 0
    out = np.empty(r.size, dtype=np.int64)
    out[order] = np.where(needs_ordinals[rank_id], ordinal, n)
    return out


def steps_from_annotations(events: pa.Table, marker: str | None = None) -> pa.Table:
    """Step table from CPU ranges (:func:`step_range_rows`) whose name matches ``marker`` (a regex,
    searched). With no marker, the defaults per rank: ``ProfilerStep#N`` where the rank has it, else
    ``step_N`` / ``iteration N`` style names (:data:`GENERIC_STEP_MARKER`).

    The step number is the last integer in the name, else (or where numbers repeat) the ordinal."""
    rows = step_range_rows(events)
    if rows.size == 0:
        return empty_steps()
    # only the columns read below: taking every column of ~all CPU ranges cost ~0.1 s per million events
    ann = events.select(["name", "rank", "start_ns", "dur_ns"]).take(pa.array(rows))
    names = ann.column("name").combine_chunks()
    rank = ann.column("rank").to_numpy()
    if marker is None:
        profiler = _names_matching(names, re.compile(PROFILER_STEP_MARKER))
        generic = _names_matching(names, re.compile(GENERIC_STEP_MARKER))
        keep = profiler | (generic & ~np.isin(rank, np.unique(rank[profiler])))
    else:
        keep = _names_matching(names, compile_step_marker(marker))
    if not keep.any():
        return empty_steps()
    ann = ann.filter(pa.array(keep))
    names = ann.column("name").combine_chunks()
    rank = ann.column("rank").to_numpy()
    start = ann.column("start_ns").to_numpy()
    end = start + np.maximum(ann.column("dur_ns").to_numpy(), 0)
    numbers = _step_numbers(names, rank, start)
    order = np.lexsort((start, rank))
    return pa.Table.from_arrays(
        [
            pa.array(rank[order], pa.int32()),
            pa.array(numbers[order]),
            names.take(pa.array(order)).cast(pa.string()),
            pa.array(start[order]),
            pa.array(end[order]),
        ],
        schema=STEP_SCHEMA,
    )


def combined(table: pa.Table) -> pa.Table:
    """``table.combine_chunks()``, except that its all-null fixed-width and dictionary columns share one
    zero buffer (:func:`null_array`) instead of each holding its chunks' zeros copied together."""
    n = table.num_rows
    if n == 0 or not any(c.null_count == n for c in table.columns):
        return table.combine_chunks()
    zeros = zero_buffer(8 * n)
    columns = []
    for field_, column in zip(table.schema, table.columns):
        empty = column.null_count == n and (pa.types.is_dictionary(field_.type) or pa.types.is_integer(field_.type)
                                            or pa.types.is_floating(field_.type))
        # a dictionary column keeps its (unified) dictionary, as combine_chunks() would
        dictionary = column.chunk(0).dictionary if empty and pa.types.is_dictionary(field_.type) else None
        columns.append(null_array(field_.type, n, zeros, dictionary) if empty else column.combine_chunks())
    return pa.Table.from_arrays(columns, schema=table.schema)


def concat_traces(traces: list[Trace]) -> Trace:
    """Concatenate per-file traces (different ranks) into one; link rows are re-based."""
    import pyarrow.compute as pc  # here: not before the parse workers start (~35 ms; loading.meanwhile)
    if len(traces) == 1:
        return traces[0]
    ranks: dict[int, RankInfo] = {}
    offsets = 0
    link_tables = []
    for tr in traces:
        for r, info in tr.ranks.items():
            ranks[r] = info
        if tr.links.num_rows:
            shifted = tr.links.set_column(
                3, LINK_SCHEMA.field("src_row"), pc.add(tr.links.column("src_row"), pa.scalar(offsets, pa.int64()))
            )
            shifted = shifted.set_column(
                4, LINK_SCHEMA.field("dst_row"), pc.add(shifted.column("dst_row"), pa.scalar(offsets, pa.int64()))
            )
            link_tables.append(shifted)
        offsets += tr.events.num_rows
    events = combined(pa.concat_tables([t.events for t in traces]).unify_dictionaries())
    links = (
        pa.concat_tables(link_tables).unify_dictionaries().combine_chunks() if link_tables else empty_links()
    )
    steps = pa.concat_tables([t.steps for t in traces]).combine_chunks()
    memory = pa.concat_tables([t.memory for t in traces]).combine_chunks()
    counters = pa.concat_tables([t.counters for t in traces]).unify_dictionaries().combine_chunks()
    warnings = [w for t in traces for w in t.warnings]
    return Trace(events=events, links=links, ranks=dict(sorted(ranks.items())), steps=steps, warnings=warnings,
                 memory=memory, counters=counters)


def metadata_to_bytes(ranks: dict[int, RankInfo], warnings: list[str]) -> bytes:
    return json.dumps(
        {"ranks": [r.to_json() for r in ranks.values()], "warnings": warnings}, default=str
    ).encode()


def metadata_from_bytes(data: bytes) -> tuple[dict[int, RankInfo], list[str]]:
    obj = json.loads(data)
    ranks = {r["rank"]: RankInfo.from_json(r) for r in obj["ranks"]}
    return ranks, list(obj.get("warnings", []))
