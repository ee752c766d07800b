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


def _line_events(out: FlatEvents, line: Any, names: dict[int, str], wanted: dict[int, str],
                 stat_names: dict[int, str], found: list[tuple[int, str, Any]]) -> list[int]:
    """Append the timed events of one line; their wanted stats go to ``found`` as (row, stat,
    value). Returns the events' metadata ids (one per appended row)."""
    base_ps = line.timestamp_ns * 1000
    row = len(out.start_ns)
    starts, ends, event_names, metadata_ids = out.start_ns, out.end_ns, out.name, []
    for event in line.events:
        if event.WhichOneof("data") == "num_occurrences":
            out.aggregated += 1
            continue
        start = (base_ps + event.offset_ps + 500) // 1000
        starts.append(start)
        ends.append(start + (max(event.duration_ps, 0) + 500) // 1000)
        metadata_ids.append(event.metadata_id)
        event_names.append(names.get(event.metadata_id, ""))
        for stat in event.stats:
            key = wanted.get(stat.metadata_id)
            if key is not None:
                found.append((row, key, _value(stat, stat_names)))
        row += 1
    return metadata_ids


def _metadata_stats(first_row: int, metadata_ids: list[int], meta_stats: dict[int, dict[str, Any]],
                    found: list[tuple[int, str, Any]]) -> None:
    """The wanted stats an event's metadata holds, for each row of one line (before the event's own,
    which are applied after and so win)."""
    for offset, metadata_id in enumerate(metadata_ids):
        stats = meta_stats.get(metadata_id)
        if stats:
            found.extend((first_row + offset, key, value) for key, value in stats.items())


def flatten(message: Any) -> FlatEvents:
    """The events of every plane and line of a decoded ``XSpace``, in file order."""
    out = FlatEvents(hostnames=list(message.hostnames), errors=list(message.errors),
                     warnings=list(message.warnings))
    from_metadata: list[tuple[int, str, Any]] = []
    from_events: list[tuple[int, str, Any]] = []
    for plane_index, plane in enumerate(message.planes):
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        wanted = {k: name for k, name in stat_names.items() if name in READ_STATS}
        names = {k: v.name for k, v in plane.event_metadata.items()}
        meta_stats = {k: {key: value for key, value in _stat_dict(v.stats, stat_names).items() if key in READ_STATS}
                      for k, v in plane.event_metadata.items() if v.stats}
        info = PlaneInfo(name=plane.name, id=plane.id, stats=_stat_dict(plane.stats, stat_names))
        for line_index, line in enumerate(plane.lines):
            info.lines.append((line.id, line.display_name or line.name))
            first_row = len(out.start_ns)
            metadata_ids = _line_events(out, line, names, wanted, stat_names, from_events)
            out.plane.extend([plane_index] * len(metadata_ids))
            out.line.extend([line_index] * len(metadata_ids))
            _metadata_stats(first_row, metadata_ids, meta_stats, from_metadata)
        out.planes.append(info)
    n = len(out.start_ns)
    out.stats = {key: [None] * n for key in READ_STATS}
    for row, key, value in from_metadata + from_events:
        out.stats[key][row] = value
    return out


def read_flat(path: str | os.PathLike[str]) -> FlatEvents:
    """:func:`flatten` of :func:`load_xspace`."""
    return flatten(load_xspace(Path(path)))
