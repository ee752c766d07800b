"""The XSpace message types (``tsl/profiler/protobuf/xplane.proto``, package ``tensorflow.profiler``),
declared as a protobuf descriptor so that the ``protobuf`` package decodes the file.

No installable distribution ships the generated ``xplane_pb2`` module outside TensorFlow (``xprof``
2.24 has the other profiler protos and a C library, not this one), so the message layout is declared
here: field names, numbers and types as ``xplane.proto`` states them. The decoding itself is
``protobuf``'s (``ParseFromString``), never traceview's; the types live in a private descriptor pool
so they never clash with a ``xplane_pb2`` another package registers in the default one.
"""

from __future__ import annotations

import functools
from typing import Any

PACKAGE = "tensorflow.profiler"

# (message, [(field name, number, type, label, message type or "")]); label "r": repeated
_I64, _U64, _DBL, _STR, _BYT, _MSG = "int64", "uint64", "double", "string", "bytes", "message"
MESSAGES: tuple[tuple[str, tuple[tuple[str, int, str, str, str], ...]], ...] = (
    ("XSpace", (("planes", 1, _MSG, "r", "XPlane"), ("errors", 2, _STR, "r", ""),
                ("warnings", 3, _STR, "r", ""), ("hostnames", 4, _STR, "r", ""))),
    ("XPlane", (("id", 1, _I64, "", ""), ("name", 2, _STR, "", ""), ("lines", 3, _MSG, "r", "XLine"),
                ("event_metadata", 4, _MSG, "r", "XPlane.EventMetadataEntry"),
                ("stat_metadata", 5, _MSG, "r", "XPlane.StatMetadataEntry"),
                ("stats", 6, _MSG, "r", "XStat"))),
    ("XLine", (("id", 1, _I64, "", ""), ("display_id", 10, _I64, "", ""), ("name", 2, _STR, "", ""),
               ("display_name", 11, _STR, "", ""), ("timestamp_ns", 3, _I64, "", ""),
               ("duration_ps", 9, _I64, "", ""), ("events", 4, _MSG, "r", "XEvent"))),
    ("XEvent", (("metadata_id", 1, _I64, "", ""), ("offset_ps", 2, _I64, "", "data"),
                ("num_occurrences", 5, _I64, "", "data"), ("duration_ps", 3, _I64, "", ""),
                ("stats", 4, _MSG, "r", "XStat"))),
    ("XStat", (("metadata_id", 1, _I64, "", ""), ("double_value", 2, _DBL, "", "value"),
               ("uint64_value", 3, _U64, "", "value"), ("int64_value", 4, _I64, "", "value"),
               ("str_value", 5, _STR, "", "value"), ("bytes_value", 6, _BYT, "", "value"),
               ("ref_value", 7, _U64, "", "value"))),
    ("XEventMetadata", (("id", 1, _I64, "", ""), ("name", 2, _STR, "", ""),
                        ("display_name", 4, _STR, "", ""), ("metadata", 3, _BYT, "", ""),
                        ("stats", 5, _MSG, "r", "XStat"), ("child_id", 6, _I64, "r", ""))),
    ("XStatMetadata", (("id", 1, _I64, "", ""), ("name", 2, _STR, "", ""),
                       ("description", 3, _STR, "", ""))),
)
#: the two map fields of XPlane: int64 key -> metadata message
MAP_ENTRIES = (("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata"))


def _add_field(message: Any, name: str, number: int, kind: str, label: str, type_name: str,
               oneof_index: int | None) -> None:
    from google.protobuf import descriptor_pb2 as dpb

    fd = message.field.add(name=name, number=number)
    fd.type = getattr(dpb.FieldDescriptorProto, f"TYPE_{kind.upper()}")
    fd.label = dpb.FieldDescriptorProto.LABEL_REPEATED if label == "r" else dpb.FieldDescriptorProto.LABEL_OPTIONAL
    if type_name:
        fd.type_name = f".{PACKAGE}.{type_name}"
    if oneof_index is not None:
        fd.oneof_index = oneof_index


def _file_descriptor() -> Any:
    from google.protobuf import descriptor_pb2 as dpb

    fdp = dpb.FileDescriptorProto(name="traceview_xplane.proto", package=PACKAGE, syntax="proto3")
    for message_name, fields in MESSAGES:
        message = fdp.message_type.add(name=message_name)
        oneofs: dict[str, int] = {}
        for name, number, kind, label, extra in fields:
            type_name = extra if kind == _MSG else ""
            oneof = extra if kind != _MSG and extra else None
            if oneof is not None and oneof not in oneofs:
                oneofs[oneof] = len(oneofs)
                message.oneof_decl.add(name=oneof)
            _add_field(message, name, number, kind, label, type_name, oneofs.get(oneof) if oneof else None)
        if message_name == "XPlane":
            for entry_name, value_type in MAP_ENTRIES:
                entry = message.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                _add_field(entry, "key", 1, _I64, "", "", None)
                _add_field(entry, "value", 2, _MSG, "", value_type, None)
    return fdp


@functools.lru_cache(maxsize=1)
def xspace_class() -> Any:
    """The ``XSpace`` message class (built once per process; raises ImportError without protobuf)."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.XSpace"))
