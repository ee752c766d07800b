"""Flat XSpace events (:mod:`traceview.parsers.xspace.reading`) -> the canonical :class:`Trace`.

What becomes what is decided per plane and line (a handful of each), then applied to the event
columns with numpy; the table is in the package docstring (``parsers/xspace/__init__.py``).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from traceview.model import (STEP_SCHEMA, DeviceInfo, Kind, RankInfo, Trace, empty_links, join_on_keys,
                             make_events_table, make_links_table, steps_from_annotations)
from traceview.parsers.xspace.reading import FlatEvents

#: ``/device:TPU:3`` -> ("TPU", 3); ``/device:GPU:0`` -> ("GPU", 0)
DEVICE_PLANE = re.compile(r"^/device:([A-Za-z_]+):(\d+)")
HOST_PLANE = "/host:CPU"
#: device lines that hold what ran (raw GPU stream lines), not a derived view of it
STREAM_LINE = re.compile(r"^Stream #|^Stream\b")
MEMCPY_NAME = re.compile(r"(?i)memcpy|\bcopy(?:HtoD|DtoH|DtoD)")
MEMSET_NAME = re.compile(r"(?i)memset")
#: host API calls that launch device work (CUPTI's API lines on the host plane)
LAUNCH_API = re.compile(r"^(?:cu[A-Z]|cuda[A-Z]|hip[A-Z])")
#: names XLA gives derived device lines
DEVICE_LINE_CATEGORY = {"XLA Ops": "xla_op", "XLA Modules": "xla_module", "Steps": "xla_step"}


def _column(values: list[Any], default: int = -1) -> np.ndarray:
    """An int64 column of stat values (absent, not an integer or beyond int64: ``default``)."""
    lo, hi = -(2**63), 2**63
    return np.fromiter((v if type(v) is int and lo <= v < hi else default for v in values), dtype=np.int64,
                       count=len(values))


def _recorded(values: list[Any], dtype: Any) -> pa.Array:
    """A nullable column of a recorded cost stat (``flops``, ``bytes_accessed``): a number >= 0 as
    the stat holds it (an integer stat or a double), null where absent, negative or not a number."""
    hi = 2**63

    def usable(v: Any) -> bool:
        return type(v) in (int, float) and 0 <= v < hi and v == v

    mask = np.fromiter((not usable(v) for v in values), dtype=bool, count=len(values))
    data = np.fromiter((v if usable(v) else 0 for v in values), dtype=dtype, count=len(values))
    return pa.array(data, mask=mask)


def _present(values: list[Any]) -> np.ndarray:
    return np.fromiter((v is not None and v != "" for v in values), dtype=bool, count=len(values))


def _line_table(flat: FlatEvents) -> tuple[list[str], list[int], list[int]]:
    """Per (plane, line), flattened: line name, line id, and the plane of each entry."""
    names, ids, planes = [], [], []
    for p, info in enumerate(flat.planes):
        for line_id, name in info.lines:
            names.append(name)
            ids.append(line_id)
            planes.append(p)
    return names, ids, planes


def _plane_devices(flat: FlatEvents) -> tuple[np.ndarray, np.ndarray, list[DeviceInfo]]:
    """Per plane: its device index (-1: not a device plane), whether it is the host plane, and the
    devices of the file."""
    device = np.full(len(flat.planes), -1, dtype=np.int64)
    host = np.zeros(len(flat.planes), dtype=bool)
    devices = []
    for p, info in enumerate(flat.planes):
        match = DEVICE_PLANE.match(info.name)
        if match:
            device[p] = int(match.group(2))
            devices.append(DeviceInfo(id=int(match.group(2)), name=match.group(1),
                                      extra={"plane": info.name, "accelerator": match.group(1)}))
        host[p] = info.name == HOST_PLANE
    return device, host, devices


def classify(flat: FlatEvents) -> dict[str, np.ndarray]:
    """Kind, category code, device, stream, pid and tid of every event."""
    n = len(flat.name)
    plane = np.asarray(flat.plane, dtype=np.int64)
    line_names, line_ids, _ = _line_table(flat)
    offsets = np.cumsum([0] + [len(info.lines) for info in flat.planes])
    line_key = offsets[plane] + np.asarray(flat.line, dtype=np.int64) if n else np.zeros(0, np.int64)
    plane_device, plane_host, _ = _plane_devices(flat)
    has_streams = {p for p, info in enumerate(flat.planes) if any(STREAM_LINE.match(nm) for _i, nm in info.lines)}
    name_codes, names = _codes(flat.name)
    hlo = _present(flat.stats["hlo_op"])
    step = _present(flat.stats["step_num"])
    corr = _column(flat.stats["correlation_id"])
    on_device = plane_device[plane] >= 0 if n else np.zeros(0, bool)
    on_host = plane_host[plane] if n else np.zeros(0, bool)
    kind = np.full(n, int(Kind.OTHER), dtype=np.int8)
    category = np.empty(n, dtype=object)
    category[:] = [flat.planes[p].name for p in flat.plane]
    # device planes: per line
    for key in np.unique(line_key[on_device]):
        rows = on_device & (line_key == key)
        line_name, p = line_names[key], int(plane[rows][0])
        derived = p in has_streams and not STREAM_LINE.match(line_name)
        if STREAM_LINE.match(line_name) or (line_name == "XLA Ops" and not derived):
            kind[rows], category[rows] = _device_activity(names, name_codes, rows, line_name)
        else:
            kind[rows] = int(Kind.GPU_ANNOTATION)
            category[rows] = DEVICE_LINE_CATEGORY.get(line_name, f"xla:{line_name}")
    # the host plane: XLA ops run there only with the CPU backend (no device plane)
    cpu_backend = not bool((plane_device >= 0).any())
    is_python = np.asarray([nm.startswith("$") for nm in names] + [False], dtype=bool)[name_codes]
    host_rules = (
        (hlo & cpu_backend, Kind.KERNEL, "xla_op"), (hlo, Kind.CPU_OP, "xla_op_host"),
        (step & ~is_python, Kind.ANNOTATION, "xla_step"), (is_python, Kind.PYTHON_FUNCTION, "python"),
        ((corr >= 0) & _launch_names(names, name_codes), Kind.RUNTIME, "xla_launch_api"),
        (np.ones(n, dtype=bool), Kind.CPU_OP, "xla_host"),
    )
    left = on_host.copy()
    for mask, k, cat in host_rules:
        rows = left & mask
        kind[rows], category[rows] = int(k), cat
        left &= ~rows
    device = np.where(on_device, plane_device[plane] if n else 0, -1)
    host_kernel = on_host & (kind == int(Kind.KERNEL))
    device[host_kernel] = np.maximum(_column(flat.stats["device_ordinal"], 0)[host_kernel], 0)
    lid = np.asarray(line_ids, dtype=np.int64)[line_key] if n else np.zeros(0, np.int64)
    stream = np.where(on_device, lid, -1)
    stream[host_kernel] = np.asarray(flat.line, dtype=np.int64)[host_kernel]
    stream_stat = _column(flat.stats["stream_id"])
    stream = np.where(on_device & (stream_stat >= 0), stream_stat, stream)
    process = np.asarray([_int(info.stats.get("process_id"), p) for p, info in enumerate(flat.planes)], np.int64)
    pid = np.where(on_device, device, process[plane] if n else 0)
    tid = np.where(on_device, stream, lid)
    return {"kind": kind, "category": category, "name_codes": name_codes, "names": np.asarray(names, dtype=object),
            "device": device.astype(np.int32), "stream": stream, "pid": pid, "tid": tid, "correlation": corr,
            "step": step}


def _int(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def _codes(values: list[str]) -> tuple[np.ndarray, list[str]]:
    lookup: dict[str, int] = {}
    codes = np.fromiter((lookup.setdefault(v, len(lookup)) for v in values), dtype=np.int64, count=len(values))
    return codes, list(lookup)


def _launch_names(names: list[str], codes: np.ndarray) -> np.ndarray:
    return np.asarray([bool(LAUNCH_API.match(nm)) for nm in names] + [False], dtype=bool)[codes]


def _device_activity(names: list[str], codes: np.ndarray, rows: np.ndarray, line_name: str) -> tuple[np.ndarray, Any]:
    """Kinds and categories of the events of one device line that holds what ran."""
    del line_name  # every executing line is read alike; the name only chose the rule
    memcpy = np.asarray([bool(MEMCPY_NAME.search(nm)) for nm in names] + [False], dtype=bool)[codes[rows]]
    memset = np.asarray([bool(MEMSET_NAME.search(nm)) for nm in names] + [False], dtype=bool)[codes[rows]]
    kind = np.where(memset, int(Kind.MEMSET), np.where(memcpy, int(Kind.MEMCPY), int(Kind.KERNEL))).astype(np.int8)
    category = np.where(memset, "gpu_memset", np.where(memcpy, "gpu_memcpy", "xla_op")).astype(object)
    return kind, category


def _steps(flat: FlatEvents, cls: dict[str, np.ndarray], start: np.ndarray, end: np.ndarray) -> pa.Table:
    """One step per ``step_num`` of the host's step annotations (outermost extent); else the
    device planes' ``Steps`` line, numbered by its names where they are numbers."""
    step_num = _column(flat.stats["step_num"])
    rows = np.flatnonzero(cls["kind"] == int(Kind.ANNOTATION))
    if rows.size == 0:
        rows = np.flatnonzero((cls["category"] == "xla_step") & (cls["device"] == _first_device(cls)))
        names = cls["names"][cls["name_codes"][rows]]
        step_num[rows] = [int(nm) if str(nm).isdigit() else i for i, nm in enumerate(names)]
    if rows.size == 0:
        return pa.Table.from_pylist([], schema=STEP_SCHEMA)
    numbers, first = np.unique(step_num[rows], return_index=True)
    lo = np.full(numbers.size, np.iinfo(np.int64).max)
    hi = np.full(numbers.size, np.iinfo(np.int64).min)
    slot = np.searchsorted(numbers, step_num[rows])
    np.minimum.at(lo, slot, start[rows])
    np.maximum.at(hi, slot, end[rows])
    label = cls["names"][cls["name_codes"][rows[first]]]
    order = np.argsort(lo, kind="stable")
    return pa.Table.from_arrays(
        [pa.array(np.zeros(numbers.size, np.int32)), pa.array(numbers[order]),
         pa.array([f"{label[i]}#{numbers[i]}" for i in order], pa.string()),
         pa.array(lo[order]), pa.array(hi[order])], schema=STEP_SCHEMA)


def _first_device(cls: dict[str, np.ndarray]) -> int:
    devices = cls["device"][cls["device"] >= 0]
    return int(devices.min()) if devices.size else -1


def _launch_links(kind: np.ndarray, corr: np.ndarray) -> pa.Table:
    src = np.flatnonzero((kind == int(Kind.RUNTIME)) & (corr >= 0))
    gpu = np.isin(kind, [int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET)])
    dst = np.flatnonzero(gpu & (corr >= 0))
    if src.size == 0 or dst.size == 0:
        return empty_links()
    left, right = join_on_keys([corr[src]], [corr[dst]])
    return make_links_table(np.zeros(left.size, np.int32), "launch", "correlation", src[left], dst[right])


def build_trace(path: Path, flat: FlatEvents, step_marker: str | None = None) -> Trace:
    """The :class:`Trace` of one XSpace file (one rank: a file is one host's profile)."""
    n = len(flat.name)
    cls = classify(flat)
    start = np.asarray(flat.start_ns, dtype=np.int64)
    end = np.asarray(flat.end_ns, dtype=np.int64)
    order = np.argsort(start, kind="stable")
    cols = {k: cls[k][order] for k in ("kind", "device", "stream", "pid", "tid", "correlation")}
    names = pa.DictionaryArray.from_arrays(pa.array(cls["name_codes"][order].astype(np.int32)),
                                           pa.array(list(cls["names"]), pa.string()))
    flops = _recorded(flat.stats["flops"], np.float64).take(pa.array(order))
    accessed = _recorded(flat.stats["bytes_accessed"], np.int64).take(pa.array(order))
    columns: dict[str, Any] = {
        "kind": pa.DictionaryArray.from_arrays(pa.array(cols["kind"]), pa.array([k.name.lower() for k in Kind])),
        "category": list(cls["category"][order]), "name": names, "start_ns": start[order],
        "dur_ns": (end - start)[order], **{k: cols[k] for k in ("device", "stream", "pid", "tid", "correlation")},
        "recorded_flops": flops, "recorded_bytes": accessed,
    }
    events = make_events_table(columns, n)
    steps = steps_from_annotations(events, step_marker) if step_marker else _steps(flat, cls, start, end)
    links = _launch_links(cols["kind"], cols["correlation"])
    info = rank_info(path, flat, cls, len(flops) - flops.null_count)
    return Trace(events=events, links=links, ranks={0: info}, steps=steps, warnings=list(info.warnings))


def rank_info(path: Path, flat: FlatEvents, cls: dict[str, np.ndarray], with_flops: int) -> RankInfo:
    """Metadata and the accounting of every event read."""
    _dev, _host, devices = _plane_devices(flat)
    if not devices and (cls["kind"] == int(Kind.KERNEL)).any():
        devices = [DeviceInfo(id=0, name="CPU", extra={"accelerator": "CPU", "plane": HOST_PLANE,
                                                       "note": "XLA CPU backend: ops run on host threads"})]
    mapped = len(flat.name)
    per_plane = Counter(flat.planes[p].name for p in flat.plane)
    counts = {"events_read": mapped + flat.aggregated + sum(flat.other_fates.values()), "mapped": mapped,
              **flat.other_fates}
    if flat.aggregated:
        counts["skipped_aggregated"] = flat.aggregated
    counts.update({f"{name}.read": c for name, c in sorted(per_plane.items())})
    if with_flops:
        counts["xla_flops_recorded"] = with_flops
    other = cls["kind"] == int(Kind.OTHER)
    unmapped = dict(Counter(cls["category"][other]))
    meta = {info.name: info.stats for info in flat.planes if info.stats and not info.name.startswith("/device:")}
    versions = meta.get("/host:metadata", {})
    version = " ".join(f"{k.removesuffix('_version')} {v}" for k, v in sorted(versions.items())
                       if k.endswith("_version") and isinstance(v, str) and v[:1].isdigit())
    warnings = [f"the profiler reported: {w}" for w in flat.errors + flat.warnings]
    warnings += [f"{c:,} records of the JSON view skipped ({fate.removeprefix('skipped_').replace('_', ' ')})"
                 for fate, c in sorted(flat.other_fates.items()) if fate.startswith("skipped_")]
    if flat.aggregated:
        warnings.append(f"{flat.aggregated:,} aggregated XSpace events (a count, no time) skipped")
    task = meta.get("Task Environment", {})
    start = task.get("profile_start_time")
    base = int(start) if isinstance(start, int) and flat.start_ns and min(flat.start_ns) < int(start) else 0
    return RankInfo(rank=0, source_path=str(path), source_format=flat.source_format, format_version=version,
                    rank_source="assigned (an XSpace file is one host's profile)", devices=devices,
                    process_names={_int(i.stats.get("process_id"), p): i.name for p, i in enumerate(flat.planes)},
                    base_time_ns=base, event_counts=counts, unmapped=unmapped, warnings=warnings,
                    raw_metadata={"planes": [i.name for i in flat.planes], "plane_stats": meta,
                                  "hostnames": flat.hostnames})
