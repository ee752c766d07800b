"""Reading an XSpace file (``*.xplane.pb``) into flat per-event columns.

The file is decoded by ``protobuf`` (:mod:`traceview.parsers.xspace.schema`); this module walks the
planes and lines once and writes one entry per ``XEvent`` into plain lists: the plane and line it
sits on, its name (the event metadata's), start and end in ns, and the stats traceview reads
(:data:`READ_STATS`), taken from the event and, where the event has none of that name, from its
metadata. Reference stats (``ref_value``) are resolved to the stat metadata's name, which is how XLA
stores ``hlo_op`` and ``hlo_module``. Times: the start ``line.timestamp_ns * 1000 + offset_ps`` in ps
and the duration ``duration_ps`` each rounded to the nearest ns (halves up), as the profiler's JSON
view writes them, so both give the same trace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceview.errors import TraceFormatError, os_error

#: the extra a user installs for this format
INSTALL_HINT = "install protobuf: pip install 'traceview[xspace]'"
#: stats read into the events table (all others are left in the file)
READ_STATS = ("hlo_op", "hlo_module", "program_id", "correlation_id", "step_num", "group_id", "device_ordinal",
              "flops", "bytes_accessed", "run_id", "memcpy_details", "stream_id", "context_id")
INT_STATS = ("program_id", "correlation_id", "step_num", "group_id", "device_ordinal", "run_id", "stream_id",
             "flops", "bytes_accessed")
#: U+FFFD as UTF-8: a binary file decoded as text and written back holds it where every non-UTF-8 byte was
REPLACEMENT = b"\xef\xbf\xbd"


@dataclass
class PlaneInfo:
    """One plane: its name, id, stats (name -> value as text or number) and line names by ordinal."""

    name: str
    id: int
    stats: dict[str, Any]
    lines: list[tuple[int, str]] = field(default_factory=list)  # (line id, line name)


@dataclass
class FlatEvents:
    """Every event of the file, one entry per list index."""

    plane: list[int] = field(default_factory=list)
    line: list[int] = field(default_factory=list)  # ordinal of the line in its plane
    name: list[str] = field(default_factory=list)
    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)
    stats: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in READ_STATS})
    #: aggregated events (``num_occurrences`` instead of a time): read, not placed on the timeline
    aggregated: int = 0
    planes: list[PlaneInfo] = field(default_factory=list)
    hostnames: list[str] = field(default_factory=list)
    #: the format read ("xspace"; "xspace-json" for the Chrome-trace JSON view)
    source_format: str = "xspace"
    #: records read that are not events (JSON view: metadata records, skipped phases), by fate
    other_fates: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def load_xspace(path: Path) -> Any:
    """The decoded ``XSpace`` message of ``path``; a missing package or a damaged file is one line."""
    try:
        from google.protobuf.message import DecodeError

        from traceview.parsers.xspace.schema import xspace_class
    except ImportError:
        raise TraceFormatError(path, "is an XSpace profile (.xplane.pb), which needs the protobuf package",
                               INSTALL_HINT) from None
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise os_error(path, exc) from None
    message = xspace_class()()
    try:
        message.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise TraceFormatError(path, damage_reason(data, exc),
                               "profile again, or copy the file again as binary") from None
    if not message.planes and data:
        raise TraceFormatError(path, "is not an XSpace profile (no planes in it)",
                               "give the *.xplane.pb that jax.profiler / TensorFlow wrote")
    return message


def damage_reason(data: bytes, exc: Exception) -> str:
    """Why the bytes do not decode, in words: a file saved as text, else truncated or damaged."""
    replaced = data.count(REPLACEMENT)
    if replaced > 16 and replaced * 3 * 200 > len(data):
        return (f"is an XSpace file that was saved as text: {replaced:,} bytes were replaced by U+FFFD, so its "
                "protobuf cannot be decoded")
    return f"is not a complete XSpace protobuf (truncated or damaged: {exc})"


def _value(stat: Any, stat_names: dict[int, str]) -> Any:
    which = stat.WhichOneof("value")
    if which is None:
        return None
    if which == "ref_value":
        return stat_names.get(stat.ref_value, "")
    return getattr(stat, which)


def _stat_dict(stats: Any, stat_names: dict[int, str]) -> dict[str, Any]:
    return {stat_names.get(s.metadata_id, ""): _value(s, stat_names) for s in stats}


def _line_events(out: FlatEvents, plane_index: int, line_index: int, line: Any, meta: dict[int, tuple[str, dict]],
                 stat_names: dict[int, str]) -> None:
    base_ps = line.timestamp_ns * 1000
    for event in line.events:
        if event.WhichOneof("data") == "num_occurrences":
            out.aggregated += 1
            continue
        name, meta_stats = meta.get(event.metadata_id, ("", {}))
        start_ps = base_ps + event.offset_ps
        out.plane.append(plane_index)
        out.line.append(line_index)
        out.name.append(name)
        out.start_ns.append((start_ps + 500) // 1000)
        out.end_ns.append((start_ps + 500) // 1000 + (max(event.duration_ps, 0) + 500) // 1000)
        own = {stat_names.get(s.metadata_id, ""): s for s in event.stats}
        for key in READ_STATS:
            column = out.stats[key]
            if key in own:
                column.append(_value(own[key], stat_names))
            else:
                column.append(meta_stats.get(key))


def flatten(message: Any) -> FlatEvents:
    """The events of every plane and line of a decoded ``XSpace``, in file order."""
    out = FlatEvents(hostnames=list(message.hostnames), errors=list(message.errors),
                     warnings=list(message.warnings))
    for plane_index, plane in enumerate(message.planes):
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        meta = {k: (v.name, _stat_dict(v.stats, stat_names)) for k, v in plane.event_metadata.items()}
        info = PlaneInfo(name=plane.name, id=plane.id, stats=_stat_dict(plane.stats, stat_names))
        for line_index, line in enumerate(plane.lines):
            info.lines.append((line.id, line.display_name or line.name))
            _line_events(out, plane_index, line_index, line, meta, stat_names)
        out.planes.append(info)
    return out


def read_flat(path: str | os.PathLike[str]) -> FlatEvents:
    """:func:`flatten` of :func:`load_xspace`."""
    return flatten(load_xspace(Path(path)))
