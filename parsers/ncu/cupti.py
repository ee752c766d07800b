"""CUPTI range-profiler results in a PyTorch profiler (Kineto) trace, as kernel metric records.

PyTorch's ``torch.profiler`` with ``experimental_config=_ExperimentalConfig(profiler_metrics=[...],
profiler_measure_per_kernel=True)`` runs Kineto's CUPTI range profiler (``CuptiRangeProfiler.cpp``):
one event per profiled kernel, category ``cuda_profiler_range``, named by the demangled kernel name,
with one argument per metric (Kineto expands ``kineto__cuda_core_flops`` into the
``smsp__sass_thread_inst_executed_op_*`` counts and ``kineto__tensor_core_insts`` into
``sm__inst_executed_pipe_tensor.sum``). Kineto spreads these events evenly over the profiling
span (their times are not the kernels'), and the range profiler runs alone (no kernel activity in
the same trace), so the events are joined to another trace's kernels, like an ncu export:
``traceview analyze TRACE --ncu ranges.json``. Records have no launch configuration; their order
per kernel name is their invocation.

Units are not written: a metric whose name holds ``pct`` is ``%``; one of ``bytes`` ``byte`` (per
second: ``byte/s``); of ``cycles`` ``cycle``; else a count (``''``).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from traceview.errors import TraceFormatError, os_error
from traceview.parsers.ncu.reading import FileRows, convert

CATEGORY = "cuda_profiler_range"
#: arguments Kineto writes beside the metrics
NOT_METRICS = {"device", "deviceId", "stream", "correlation", "External id", "context"}
HINT = ("record the ranges with torch.profiler's experimental_config=_ExperimentalConfig(profiler_metrics=[...], "
        "profiler_measure_per_kernel=True)")


def unit_of(metric: str) -> str:
    name = metric.lower()
    if "pct" in name:
        return "%"
    if "bytes" in name:
        return "byte/s" if "per_second" in name else "byte"
    if "cycles" in name:
        return "cycle"
    return ""


def _load(path: Path) -> Any:
    try:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        return json.loads(data)
    except OSError as exc:
        raise os_error(path, exc) from None
    except (ValueError, EOFError) as exc:
        raise TraceFormatError(path, f"is not a readable JSON trace ({str(exc)[:120]})", HINT) from None


def read_ranges(path: Path) -> FileRows:
    """The ``cuda_profiler_range`` events of a Kineto trace as metric rows (one record per event)."""
    doc = _load(path)
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise TraceFormatError(path, "is JSON without a traceEvents list, so neither an ncu export nor a Kineto "
                               "trace", HINT)
    ranges = [e for e in events if isinstance(e, dict) and str(e.get("cat", "")).lower() == CATEGORY]
    if not ranges:
        raise TraceFormatError(path, f"is a Kineto trace without CUPTI range-profiler events ({CATEGORY})", HINT)
    rows: list[tuple[int, int, str, str, str]] = []
    skipped = 0
    for i, event in enumerate(ranges):
        given = event.get("args")
        args: dict[str, Any] = given if isinstance(given, dict) else {}
        device = args.get("device", event.get("pid", -1))
        for key, value in args.items():
            if key in NOT_METRICS:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                skipped += 1
                continue
            rows.append((int(device) if isinstance(device, int) else -1, i, str(event.get("name", "")), key,
                         str(value)))
    frame = pd.DataFrame(rows, columns=["pid", "ncu_id", "kernel", "metric", "raw_value"])
    for prefix in ("grid", "block"):
        for axis in "xyz":
            frame[f"{prefix}_{axis}"] = np.int64(-1)
    frame["section"] = "CUPTI range profiler"
    frame["raw_unit"] = [unit_of(m) for m in frame["metric"]]
    counts = {"range_events": len(ranges), "metric_values": len(frame), "args_not_numbers": skipped,
              "other_events": len(events) - len(ranges)}
    metrics = convert(frame, counts)
    rules = pd.DataFrame(columns=["pid", "ncu_id", "kernel", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
                                  "block_z", "section", "rule", "rule_type", "description", "speedup_type",
                                  "speedup_pct"])
    return FileRows("kineto cuda_profiler_range", metrics, rules, counts)
