"""The Kineto events as the parser decodes them: the msgspec structs of an event and of its args,
the decoders, the category -> kind table, the phases and the limits of the time values.
"""

from __future__ import annotations

import re
from operator import attrgetter
from typing import Any, Union

import msgspec
import numpy as np

from traceview.model import Kind


# Source category (lower-cased) -> kind. Spellings from every PyTorch version seen in the wild.
CATEGORY_KINDS: dict[str, Kind] = {
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "cuda_sync": Kind.SYNC,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    # other accelerators' host APIs (Intel XPU, out-of-tree "privateuse1" backends, MTIA)
    "xpu_runtime": Kind.RUNTIME,
    "xpu_driver": Kind.RUNTIME,
    "privateuse1_runtime": Kind.RUNTIME,
    "privateuse1_driver": Kind.RUNTIME,
    "mtia_runtime": Kind.RUNTIME,
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "python_function": Kind.PYTHON_FUNCTION,
    "user_annotation": Kind.ANNOTATION,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
}
#: The name of the allocator's instant events (``ph: "i"``, category ``cpu_instant_event``, or none
#: before PyTorch 1.10): they go to ``Trace.memory``, not to the events.
MEMORY_EVENT_NAME = "[memory]"
#: Flow categories that link a launch to its GPU activity (already covered by correlation ids).
LAUNCH_FLOW_CATEGORIES = {"ac2g", "async_cpu_to_gpu", "async"}

GPU_KINDS = np.array([int(k) for k in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.GPU_ANNOTATION)])
ACTIVITY_OR_SYNC = np.array([int(k) for k in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC)])

RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
EVENT_SEPARATOR = re.compile(rb"\}\s*,\s*\{")
COPY_KIND = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|HtoA|AtoH|AtoD|DtoA|AtoA)\b")

TS_EXACT_LIMIT_US = float(2**43)
#: Times (``ts``, ``dur``, ``baseTimeNanoseconds``) must lie within +-2**61 ns (73 years): the sum
#: of a base time, a start and a duration then still fits int64. Beyond it an event is skipped.
TIME_LIMIT_NS = 2**61
TIME_LIMIT_US = TIME_LIMIT_NS / 1000
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
#: Phases (``ph``) and what becomes of them (the Chrome trace event format's phases).
COMPLETE_PHASES = ("X",)
INSTANT_PHASES = ("i", "I")
FLOW_PHASES = ("s", "f", "t")
COUNTER_PHASES = ("C",)
ASYNC_PHASES = ("b", "e", "n", "S", "T", "p", "F")
#: Async events kept: nestable (b/e) and legacy (S/F) begins and ends pair into duration rows, ``n``
#: instants become instant rows; all of kind OTHER. The legacy steps (T/p) are skipped, counted.
ASYNC_BEGIN_PHASES = ("b", "S")
ASYNC_END_PHASES = ("e", "F")
ASYNC_INSTANT_PHASES = ("n",)
#: The key under which the slow path (``coerce_event``) keeps the args of counter events, whose
#: keys and types are the trace's own (the typed ``args`` would coerce or fail on them).
COUNTER_ARGS_KEY = "traceview:counter_args"
#: Columns of the events table holding an op's recorded inputs (``record_shapes=True``: "Input Dims",
#: "Input type", "Input Strides", "Concrete Inputs"), each as canonical JSON text (``canonical_json``)
OP_INPUT_COLUMNS = ("input_dims", "input_types", "input_strides", "concrete_inputs")
#: ``Args`` fields of any JSON value (never coerced by the slow path)
ANY_JSON_ARGS = frozenset((*OP_INPUT_COLUMNS, "input_dims_old"))


class Args(msgspec.Struct, frozen=True, gc=False):
    external_id: int = msgspec.field(default=-1, name="External id")
    external_id_old: int = msgspec.field(default=-1, name="external id")  # 2021 runtime events
    correlation: int = -1
    stream: int = -1
    device: int = -1
    bytes: int = -1
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] = ()
    collective: str = msgspec.field(default="", name="Collective name")
    in_nelems: int = msgspec.field(default=-1, name="In msg nelems")
    out_nelems: int = msgspec.field(default=-1, name="Out msg nelems")
    group_size: int = msgspec.field(default=-1, name="Group size")
    # autograd: a forward op's node number and a backward op's forward thread (autograd.py)
    sequence_number: int = msgspec.field(default=-1, name="Sequence number")
    fwd_thread_id: int = msgspec.field(default=-1, name="Fwd thread id")
    # a graph-replayed kernel's graph and node (newer Kineto, CUPTI's graphId/graphNodeId)
    graph_id: int = msgspec.field(default=-1, name="graph id")
    graph_node_id: int = msgspec.field(default=-1, name="graph node id")
    dtype: str = ""
    pg_name: str = msgspec.field(default="", name="Process Group Name")
    pg_ranks: Union[str, list[int], None] = msgspec.field(default=None, name="Process Group Ranks")
    name: str = ""  # metadata events: process_name / thread_name
    # a launch call's kernel (ROCm's hipLaunchKernel & co.): names the graph nodes a capture records
    launch_kernel: str = msgspec.field(default="", name="kernel")
    # an op's recorded inputs (record_shapes=True), any JSON: kept as canonical JSON text
    # (``OP_INPUT_COLUMNS``); "Input dims" is the 2021 spelling
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_dims_old: Any = msgspec.field(default=None, name="Input dims")
    input_types: Any = msgspec.field(default=None, name="Input type")
    input_strides: Any = msgspec.field(default=None, name="Input Strides")
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")


class MemoryArgs(Args, frozen=True, gc=False):
    """``Args`` plus those of the allocator's ``[memory]`` instants (-1: absent; totals and
    addresses are never negative). A separate struct because every field costs time on every
    decoded event (each unknown key is compared with every field): files without allocator events
    never pay for these."""

    mem_bytes: int = msgspec.field(default=0, name="Bytes")
    total_allocated: int = msgspec.field(default=-1, name="Total Allocated")
    total_reserved: int = msgspec.field(default=-1, name="Total Reserved")
    device_id: int = msgspec.field(default=-1, name="Device Id")
    device_type: int = msgspec.field(default=-1, name="Device Type")
    addr: int = msgspec.field(default=-1, name="Addr")


_NO_ARGS = Args()
NO_MEMORY_ARGS = MemoryArgs()


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = -1
    tid: Union[int, str] = -1
    ts: Union[int, float] = float("nan")  # missing: skipped with a reason, never put at t=0
    dur: Union[int, float] = 0
    id: Union[int, str] = -1
    bp: str = ""
    args: Args = _NO_ARGS


class _MemoryEvent(Event, gc=False):
    """An event decoded with the allocator's args (once a file has shown it has allocator events)."""

    args: MemoryArgs = NO_MEMORY_ARGS


class _MemoryProbe(msgspec.Struct, gc=False):
    """Only the allocator's args of an event (every other key is skipped)."""

    args: MemoryArgs = NO_MEMORY_ARGS


class PhaseProbe(msgspec.Struct, gc=False):
    """The fields of counter and async events that ``Event`` leaves out, as written: ``args`` of
    any keys (counter series), ``id`` (empty: absent) and ``id2``. Decoded only for chunks that
    hold such events."""

    id: msgspec.Raw = msgspec.Raw(b"")
    id2: msgspec.Raw = msgspec.Raw(b"")
    args: msgspec.Raw = msgspec.Raw(b"{}")
    counter_args: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name=COUNTER_ARGS_KEY)


class _RawTimes(msgspec.Struct, gc=False):
    ts: msgspec.Raw = msgspec.Raw(b"0")
    dur: msgspec.Raw = msgspec.Raw(b"0")


#: States of a decoded time (``KinetoFile._times_ns``).
VALID, MISSING, OUT_OF_RANGE = 0, 1, 2

EVENTS_DECODER = msgspec.json.Decoder(list[Event])
MEMORY_EVENTS_DECODER = msgspec.json.Decoder(list[_MemoryEvent])
MEMORY_PROBE_DECODER = msgspec.json.Decoder(list[_MemoryProbe])
PHASE_PROBE_DECODER = msgspec.json.Decoder(list[PhaseProbe])
RAW_OBJECT_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])
get_name, get_pid, get_tid = attrgetter("name"), attrgetter("pid"), attrgetter("tid")
get_args, get_id = attrgetter("args"), attrgetter("id")
RAW_TIMES_DECODER = msgspec.json.Decoder(list[_RawTimes])
ANY_DECODER = msgspec.json.Decoder()
