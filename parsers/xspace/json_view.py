"""The Chrome-trace JSON view of an XSpace (``*.trace.json.gz``, ``perfetto_trace.json.gz``).

The JAX and TensorFlow profilers write it beside the ``.xplane.pb``: one process per plane
(``process_name`` = the plane's name), one thread per line (``thread_name``), one complete event
(``ph: "X"``, ``ts``/``dur`` in µs with ns decimals) per timed XSpace event, with the stats as
``args`` (text). It is read into the same flat events as the protobuf and built into the trace the
same way, so both give the same kinds, devices, streams and steps (``tests/unit/test_xspace.py``
compares them). Times are decoded as decimals and made ns exactly; the profiler rounded them from
the XSpace's ps, so a tie can be 1 ns off the XSpace's own rounding. Accounting: ``events_read`` is
every record of ``traceEvents``; ``mapped`` the complete events, ``metadata`` the ``M`` records,
``skipped_phase_<ph>`` any other record (none in the files the profilers write).
"""

from __future__ import annotations

import gzip
import zlib
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from traceview.errors import TraceFormatError, os_error
from traceview.parsers.xspace.reading import INT_STATS, READ_STATS, FlatEvents, PlaneInfo

#: what a head of this view holds (its first records name the planes)
PLANE_NAMES = (b'"/host:', b'"/device:')


def looks_like_json_view(head: bytes) -> bool:
    """Chrome-trace JSON whose processes are XSpace planes (and not a PyTorch/Kineto trace)."""
    start = head.lstrip()[:1]
    return (start == b"{" and b'"process_name"' in head and any(p in head for p in PLANE_NAMES)
            and b'"schemaVersion"' not in head and b'"deviceProperties"' not in head)


def _decode(path: Path) -> Any:
    import msgspec

    try:
        with open(path, "rb") as f:
            data = f.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        return msgspec.json.Decoder(float_hook=Decimal).decode(data)
    except OSError as exc:
        if isinstance(exc, gzip.BadGzipFile):
            raise TraceFormatError(path, f"corrupt gzip data ({exc})", "the file is damaged; copy it again") from None
        raise os_error(path, exc) from None
    except (EOFError, zlib.error) as exc:
        raise TraceFormatError(path, f"is truncated or corrupt gzip ({exc})", "copy the file again") from None
    except msgspec.DecodeError as exc:
        raise TraceFormatError(path, f"is not valid JSON ({exc})", "profile again or copy the file again") from None


def _ns(value: Any) -> int | None:
    """µs (a number, or text) -> ns, exactly; None when it is not a number."""
    try:
        return int(Decimal(value) * 1000) if not isinstance(value, bool) else None
    except (InvalidOperation, TypeError, ValueError):
        return None


def _stat(key: str, value: Any) -> Any:
    if key in INT_STATS and isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
        if key == "flops":  # a double stat is written as its decimal text
            try:
                return float(value)
            except ValueError:
                pass
    return value


def _metadata(records: list[Any]) -> tuple[dict[Any, str], dict[tuple[Any, Any], str]]:
    processes, threads = {}, {}
    for r in records:
        if isinstance(r, dict) and r.get("ph") == "M" and isinstance(r.get("args"), dict):
            if r.get("name") == "process_name":
                processes[r.get("pid")] = str(r["args"].get("name", ""))
            elif r.get("name") == "thread_name":
                threads[(r.get("pid"), r.get("tid"))] = str(r["args"].get("name", ""))
    return processes, threads


def _place(out: FlatEvents, planes: dict[Any, int], lines: dict[tuple[Any, Any], int], processes: dict[Any, str],
           threads: dict[tuple[Any, Any], str], pid: Any, tid: Any) -> tuple[int, int]:
    """The plane and line ordinals of (pid, tid), made on first sight."""
    if pid not in planes:
        planes[pid] = len(out.planes)
        out.planes.append(PlaneInfo(name=processes.get(pid, str(pid)), id=pid if isinstance(pid, int) else -1,
                                    stats={}))
    plane = out.planes[planes[pid]]
    if (pid, tid) not in lines:
        lines[(pid, tid)] = len(plane.lines)
        plane.lines.append((tid if isinstance(tid, int) else -1, threads.get((pid, tid), str(tid))))
    return planes[pid], lines[(pid, tid)]


def read_json_view(path: Path) -> FlatEvents:
    """The flat events of a JSON view (see the module docstring)."""
    doc = _decode(path)
    records = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(records, list):
        raise TraceFormatError(path, "has no traceEvents list", "give the profiler's *.trace.json.gz")
    processes, threads = _metadata(records)
    out = FlatEvents(source_format="xspace-json")
    planes: dict[Any, int] = {}
    lines: dict[tuple[Any, Any], int] = {}
    fates: dict[str, int] = {}
    for r in records:
        ph = r.get("ph") if isinstance(r, dict) else None
        start, dur = (_ns(r.get("ts")), _ns(r.get("dur", 0))) if ph == "X" else (None, None)
        if ph != "X" or start is None or dur is None:
            fate = "metadata" if ph == "M" else f"skipped_phase_{ph}" if ph == "X" or ph else "skipped_no_phase"
            fate = "skipped_no_time" if ph == "X" else fate
            fates[fate] = fates.get(fate, 0) + 1
            continue
        p, line = _place(out, planes, lines, processes, threads, r.get("pid"), r.get("tid"))
        args = r.get("args") if isinstance(r.get("args"), dict) else {}
        out.plane.append(p)
        out.line.append(line)
        out.name.append(str(r.get("name", "")))
        out.start_ns.append(start)
        out.end_ns.append(start + max(dur, 0))
        for key in READ_STATS:
            out.stats[key].append(_stat(key, args.get(key)))
    out.other_fates = fates
    return out
