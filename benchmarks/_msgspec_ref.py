"""msgspec's typed decode of a Kineto trace: the one reference of issue 12's ">= 0.8x msgspec" target.

bench_kineto_native.py and bench_load.py both time ``decode`` on the same file, freeing the structs
after the timer, so both ratios mean the same thing. The structs decode every field traceview's
Kineto parser reads from an event, typed as the parser types them (``parsers/kineto/events.py``: ``Event``
and ``MemoryArgs``): the event keys ``EVENT_KEYS`` and the args keys ``ARGS_KEYS``; every other key
is skipped, as the parser skips it. The native decoder reads exactly these keys
(``_kineto_columns.decoded_keys()``; tests/unit/test_kineto_native.py checks the two agree), so the
reference does the parser's job, no less (an easier task than the parser's) and no more (a slower
reference that would flatter traceview).

Written here, not imported from traceview: the figure is msgspec's, whatever traceview does. The
whole file is decoded in one call into structs that are then dropped: no column is built, so this is
the floor of any parser that builds Python structs first.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec


class Args(msgspec.Struct, frozen=True, gc=False):
    """The args keys the parser reads (op, kernel, memcpy, collective, autograd, allocator, metadata)."""

    external_id: int = msgspec.field(default=-1, name="External id")
    external_id_old: int = msgspec.field(default=-1, name="external id")
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
    sequence_number: int = msgspec.field(default=-1, name="Sequence number")
    fwd_thread_id: int = msgspec.field(default=-1, name="Fwd thread id")
    graph_id: int = msgspec.field(default=-1, name="graph id")
    graph_node_id: int = msgspec.field(default=-1, name="graph node id")
    dtype: str = ""
    pg_name: str = msgspec.field(default="", name="Process Group Name")
    pg_ranks: Union[str, list[int], None] = msgspec.field(default=None, name="Process Group Ranks")
    name: str = ""
    launch_kernel: str = msgspec.field(default="", name="kernel")
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_dims_old: Any = msgspec.field(default=None, name="Input dims")
    input_types: Any = msgspec.field(default=None, name="Input type")
    input_strides: Any = msgspec.field(default=None, name="Input Strides")
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")
    mem_bytes: int = msgspec.field(default=0, name="Bytes")
    total_allocated: int = msgspec.field(default=-1, name="Total Allocated")
    total_reserved: int = msgspec.field(default=-1, name="Total Reserved")
    device_id: int = msgspec.field(default=-1, name="Device Id")
    device_type: int = msgspec.field(default=-1, name="Device Type")
    addr: int = msgspec.field(default=-1, name="Addr")


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = -1
    tid: Union[int, str] = -1
    ts: Union[int, float] = float("nan")
    dur: Union[int, float] = 0
    id: Union[int, str] = -1
    bp: str = ""
    args: Args = Args()


class Document(msgspec.Struct, gc=False):
    traceEvents: list[Event] = []


def _keys(struct: type[msgspec.Struct]) -> tuple[str, ...]:
    return tuple(field.encode_name for field in msgspec.structs.fields(struct))


EVENT_KEYS = _keys(Event)
ARGS_KEYS = _keys(Args)
DECODER = msgspec.json.Decoder(Document)

#: One line for the benchmarks' output: what the reference decodes.
DESCRIPTION = (f"msgspec {msgspec.__version__} typed decode of the whole file in one call into structs of the "
               f"event keys {', '.join(EVENT_KEYS)} and the {len(ARGS_KEYS)} args keys the parser reads "
               f"({', '.join(ARGS_KEYS)}), typed as the parser types them; other keys skipped; "
               f"freeing the structs not timed")


def decode(data: bytes) -> Document:
    """The whole Kineto JSON document decoded into the structs. Time this call alone and drop the
    result after the timer: freeing the structs (~0.2 s for 650 k events) is not counted, so the
    reference is msgspec's decode at its fastest, the strict reading of the target."""
    return DECODER.decode(data)
