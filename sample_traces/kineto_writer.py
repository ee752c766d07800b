"""The one writer of PyTorch profiler (Kineto) JSON for every trace generator of the project.

``sample_traces/make_*.py`` and ``benchmarks/gen_*.py`` build their events from their own models
and write them through this module: the document's structure (``schemaVersion`` first, the header
fields, ``traceEvents``, then ``traceName``, ``displayTimeUnit``, ``baseTimeNanoseconds``), the
header values (``deviceProperties``, ``distributedInfo``), the events (complete ``X``, flow ``s``/
``f``, instant ``i``, metadata ``M``, the profiler's ``Trace`` span), the time format and gzip.

Two ways to write, for two kinds of generator:

* **text, in Kineto's own layout** (the way ``libkineto``'s JSON output lays a trace out: one key
  group per line, ``ts``/``dur`` microseconds with exactly three decimals): :func:`document_head`,
  :func:`event_text` and its shorthands, :func:`document_tail`. Streamed generators write a
  document piece by piece, so their memory stays bounded whatever the size;
* **dicts**, a document built in memory (:func:`x_event`, :func:`flow_event`, :func:`document`...)
  and written by :func:`dumps` with any ``json.dumps`` layout, or one event per line
  (:func:`event_line`). A time that must read as Kineto's three-decimal microseconds inside a dict
  is :func:`micros` (``json`` would drop trailing zeros of a float).

Everything is deterministic: no clock, gzip with mtime 0 and no file name. Not installed:
``sample_traces/`` puts its own folder on ``sys.path``, ``benchmarks/`` adds ``../sample_traces``.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO, cast

#: one H100 as Kineto describes it in ``deviceProperties`` (with its ``"id"`` added per device)
H100 = {
    "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936,
    "computeMajor": 9, "computeMinor": 0,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536, "warpSize": 32,
    "sharedMemPerBlock": 49152, "numSms": 132,
    "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472,
}
#: how Kineto groups a device's properties on lines (the rest go on a last line led by a comma)
_DEVICE_LINE_SIZES = (3, 2, 2, 2, 2)

_MICROS_TOKEN = "@us@"
_MICROS_QUOTED = re.compile('"' + _MICROS_TOKEN + r'(-?\d+\.\d{3})"')


# ----------------------------------------------------------------------------- values


def us(ns: int) -> str:
    """Kineto's time text: microseconds with exactly three decimals (exact to the ns)."""
    if ns < 0:
        raise ValueError(f"negative time {ns} ns")
    return f"{ns // 1000}.{ns % 1000:03d}"


def micros(ns: int) -> str:
    """A time inside a dict document: :func:`dumps` writes it as the number ``us(ns)``."""
    return _MICROS_TOKEN + us(ns)


class Raw(str):
    """A value already rendered as JSON text (written as is)."""


@functools.lru_cache(maxsize=8192)
def json_string(text: str) -> str:
    """A JSON string literal (UTF-8 kept as is); cached: event names repeat."""
    return json.dumps(text, ensure_ascii=False)


def json_text(value: Any, sort_keys: bool = False) -> str:
    """``value`` as JSON text, as Kineto writes scalars and small objects."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, str):
        return json_string(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=sort_keys)


def fields(*pairs: tuple[str, Any]) -> str:
    """``"key": value, "key": value`` (one line of an event)."""
    return ", ".join(f"{json_string(k)}: {json_text(v)}" for k, v in pairs)


# ----------------------------------------------------------------------------- header values


def device_properties(devices: Iterable[int], properties: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """``deviceProperties``: one entry per device index (an H100 unless ``properties``)."""
    return [{"id": d, **(H100 if properties is None else properties)} for d in devices]


def distributed_info(rank: int, world_size: int, *, nccl_version: str | None = "2.26.2", ranks: Any = None,
                     process_groups: bool = True) -> dict[str, Any]:
    """``distributedInfo`` of one rank of an NCCL job: its default process group over ``ranks``
    (all ranks unless given; Kineto writes a long list as text such as ``"[0 .. 63]"``);
    ``process_groups=False``: only backend, rank and world size, as older PyTorch writes it."""
    info: dict[str, Any] = {"backend": "nccl", "rank": rank, "world_size": world_size}
    if not process_groups:
        return info
    info["pg_count"] = 1
    info["pg_config"] = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                          "pg_size": world_size, "ranks": list(range(world_size)) if ranks is None else ranks}]
    if nccl_version is not None:
        info["nccl_version"] = nccl_version
    return info


def device_properties_text(devices: Sequence[dict[str, Any]]) -> Raw:
    """The ``deviceProperties`` array in Kineto's layout (for :func:`document_head`)."""
    entries = []
    for device in devices:
        items = [f"{json_string(k)}: {json_text(v)}" for k, v in device.items()]
        lines, at = [], 0
        for size in _DEVICE_LINE_SIZES:
            if at < len(items):
                lines.append(", ".join(items[at:at + size]))
            at += size
        text = "    {\n      " + ",\n      ".join(lines)
        if at < len(items):
            text += "\n    , " + ", ".join(items[at:])
        entries.append(text + "\n    }")
    return Raw("[\n" + ",\n".join(entries) + "\n  ]")


# ----------------------------------------------------------------------------- text documents


def document_head(header: dict[str, Any], sort_keys: bool = False) -> str:
    """From ``{`` to the opening of ``traceEvents``: ``schemaVersion`` (1 unless ``header`` says),
    then the header fields in the order given, one per line."""
    header = {"schemaVersion": 1, **header}
    lines = "".join(f"  {json_string(k)}: {json_text(v, sort_keys)},\n" for k, v in header.items())
    return "{\n" + lines + '  "traceEvents": [\n'


def document_tail(trace_name: str, base_time_ns: int, display_time_unit: str = "ms") -> str:
    """From the end of the last event to the end of the document."""
    return (f'\n  ],\n  "traceName": {json_string(trace_name)},\n  "displayTimeUnit": {json_string(display_time_unit)},'
            f'\n  "baseTimeNanoseconds": {base_time_ns}\n}}\n')


def event_text(*lines: str, args: str | None = None) -> str:
    """One event in Kineto's layout: its key groups one per line (each made by :func:`fields` or
    by hand), then the ``args`` object (its rendered body) when given. No separator after it."""
    text = "  {\n    " + ",\n    ".join(lines)
    if args is not None:
        text += ',\n    "args": {\n      ' + args + "\n    }"
    return text + "\n  }"


def _id_text(value: int | str) -> str:
    """A pid or tid: a number, or a string (``"Spans"``)."""
    return str(value) if type(value) is int else json_string(str(value))


def x_event_text(cat: str, name: str, pid: int | str, tid: int | str, ts_ns: int, dur_ns: int,
                 args: str | None) -> str:
    """A complete (``X``) event: ``ts_ns`` from the document's time origin. The layout of
    :func:`event_text` with two lines, written out: it is every generator's hot path."""
    if ts_ns < 0 or dur_ns < 0:
        raise ValueError(f"negative time: ts {ts_ns} ns, dur {dur_ns} ns")
    text = (f'  {{\n    "ph": "X", "cat": {json_string(cat)}, "name": {json_string(name)}, "pid": {_id_text(pid)}, '
            f'"tid": {_id_text(tid)},\n    "ts": {ts_ns // 1000}.{ts_ns % 1000:03d}, '
            f'"dur": {dur_ns // 1000}.{dur_ns % 1000:03d}')
    if args is not None:
        return text + ',\n    "args": {\n      ' + args + "\n    }\n  }"
    return text + "\n  }"


def flow_event_text(ph: str, flow_id: int, pid: int | str, tid: int | str, ts_ns: int, cat: str = "ac2g") -> str:
    """A flow start (``s``) or end (``f``, bound to its enclosing slice: ``"bp": "e"``)."""
    bp = ', "bp": "e"' if ph == "f" else ""
    return (f'  {{\n    "ph": "{ph}", "id": {flow_id}, "pid": {_id_text(pid)}, "tid": {_id_text(tid)}, '
            f'"ts": {us(ts_ns)},\n    "cat": {json_string(cat)}, "name": {json_string(cat)}{bp}\n  }}')


def instant_event_text(name: str, pid: int | str, tid: int | str, ts_ns: int, scope: str = "g") -> str:
    """An instant (``i``) event without arguments (the profiler's iteration and window markers)."""
    return event_text(f'"name": {json_string(name)}, "ph": "i", "s": "{scope}"',
                      f'"pid": {_id_text(pid)}, "tid": {_id_text(tid)}, "ts": {us(ts_ns)}')


def metadata_event_text(name: str, pid: int | str, tid: int | str, ts_ns: int, args: dict[str, Any]) -> str:
    """A metadata (``M``) event: process and thread names, labels and sort indices."""
    return event_text(f'"name": {json_string(name)}, "ph": "M", "ts": {us(ts_ns)}, "pid": {_id_text(pid)}, '
                      f'"tid": {_id_text(tid)}', args=fields(*args.items()))


def profiler_span_text(ts_ns: int, dur_ns: int, name: str = "PyTorch Profiler (0)") -> str:
    """The profiler's own ``Trace`` span over the whole capture."""
    return event_text(f'"ph": "X", "cat": "Trace", "ts": {us(ts_ns)}, "dur": {us(dur_ns)}',
                      '"pid": "Spans", "tid": "PyTorch Profiler"', f'"name": {json_string(name)}',
                      args='"Op count": 0')


# ----------------------------------------------------------------------------- dict documents


def x_event(cat: str, name: str, pid: int | str, tid: int | str, ts: Any, dur: Any,
            args: dict[str, Any] | None = None) -> dict[str, Any]:
    """A complete (``X``) event; ``ts``/``dur`` as the document writes them (:func:`micros`, or
    float microseconds); no ``args`` key when ``args`` is None."""
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args is not None:
        event["args"] = args
    return event


def flow_event(ph: str, flow_id: int, pid: int | str, tid: int | str, ts: Any, cat: str = "ac2g") -> dict[str, Any]:
    """A flow start (``s``) or end (``f``, ``"bp": "e"``)."""
    event = {"ph": ph, "id": flow_id, "pid": pid, "tid": tid, "ts": ts, "cat": cat, "name": cat}
    if ph == "f":
        event["bp"] = "e"
    return event


def instant_event(name: str, pid: int | str, tid: int | str, ts: Any, args: dict[str, Any] | None = None,
                  cat: str | None = None, scope: str = "t") -> dict[str, Any]:
    """An instant (``i``) event, e.g. ``[memory]`` (``cat="cpu_instant_event"``)."""
    event: dict[str, Any] = {"ph": "i"}
    if cat is not None:
        event["cat"] = cat
    event.update({"s": scope, "name": name, "pid": pid, "tid": tid, "ts": ts})
    if args is not None:
        event["args"] = args
    return event


def metadata_event(name: str, pid: int | str, tid: int | str, ts: Any, args: dict[str, Any]) -> dict[str, Any]:
    """A metadata (``M``) event; ``ts`` None: none written."""
    event: dict[str, Any] = {"name": name, "ph": "M"}
    if ts is not None:
        event["ts"] = ts
    event.update({"pid": pid, "tid": tid, "args": args})
    return event


def profiler_span(ts: Any, dur: Any, name: str = "PyTorch Profiler (0)") -> dict[str, Any]:
    """The profiler's own ``Trace`` span."""
    return {"ph": "X", "cat": "Trace", "ts": ts, "dur": dur, "pid": "Spans", "tid": "PyTorch Profiler",
            "name": name, "args": {"Op count": 0}}


def document(header: dict[str, Any], events: list[dict[str, Any]], *, trace_name: str, base_time_ns: int,
             display_time_unit: str = "ms") -> dict[str, Any]:
    """The whole document, keys in Kineto's order."""
    return {"schemaVersion": 1, **header, "traceEvents": events, "traceName": trace_name,
            "displayTimeUnit": display_time_unit, "baseTimeNanoseconds": base_time_ns}


def dumps(value: Any, **json_options: Any) -> str:
    """``json.dumps(value, **json_options)``, :func:`micros` times written as numbers."""
    text = json.dumps(value, **json_options)
    return _MICROS_QUOTED.sub(r"\1", text) if _MICROS_TOKEN in text else text


def event_line(event: dict[str, Any], sort_keys: bool = False) -> str:
    """One event on one line of ``traceEvents`` (a compact layout between :func:`document_head`
    and :func:`document_tail`)."""
    return "    " + dumps(event, sort_keys=sort_keys)


# ----------------------------------------------------------------------------- files


def gzip_bytes(data: bytes, level: int = 9) -> bytes:
    """A whole document gzipped in memory (mtime 0: the same bytes on every run).

    ``gzip.compress`` and the streamed :func:`open_output` give the same deflate stream but not the
    same header on Python >= 3.11 (operating-system byte 3 against 255): the committed samples were
    written one way or the other, so both stay."""
    return gzip.compress(data, compresslevel=level, mtime=0)


def open_output(path: str | Path, gz: bool = False, level: int = 9) -> BinaryIO:
    """A binary file to stream a document into: gzip when ``gz`` (mtime 0 and no file name in the
    header: the same bytes on every run), closing the file under it when closed."""
    raw = open(path, "wb")
    if not gz:
        return raw
    return cast(BinaryIO, _ClosingGzipFile(raw, level))


class _ClosingGzipFile(gzip.GzipFile):
    """A GzipFile that also closes the file it writes into."""

    def __init__(self, raw: BinaryIO, level: int) -> None:
        super().__init__(filename="", mode="wb", fileobj=raw, compresslevel=level, mtime=0)
        self.raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.raw.close()
