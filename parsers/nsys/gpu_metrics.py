"""Nsight Systems GPU metrics (``nsys profile --gpu-metrics-devices=...``) into the counters table.

NVIDIA's SQLite schema: ``TARGET_INFO_GPU_METRICS(typeId, sourceId, typeName, metricId, metricName)``
names the metrics; ``GPU_METRICS(rawTimestamp, timestamp, typeId, metricId, value)`` holds one
sample per row (``timestamp`` in ns on the export's timeline, NULL when it could not be converted).
``typeId`` carries the GPU in its low byte (``typeId & 0xFF``: the GPU's ``pwGpuId``), mapped to the
CUDA device through ``TARGET_INFO_GPU`` (``pwGpuId``, else ``id``, -> ``cuDevice``) when that table has
the columns, else taken as the device itself. Metric names carry their unit in brackets
(``SM Active [Throughput %]``, ``GPC Clock Frequency [MHz]``): :func:`metric_unit` reads it.

Each sample becomes one counter row: ``name`` "GPU Metrics", ``series`` the metric's name as nsys
wrote it, ``pid`` the CUDA device, ``tid`` -1, ``rank`` the first rank whose kernels ran on that
device (a device no rank used goes to the first rank: counted as ``GPU_METRICS.device_without_rank``).
Counted in the first rank's ``event_counts``: ``GPU_METRICS.read``, ``.mapped``,
``.skipped_null_timestamp``, ``.skipped_unknown_metric`` (a metric id the names table lacks).
"""

from __future__ import annotations

import sqlite3

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from traceview.model import COUNTER_SCHEMA, RankInfo, empty_counters

if TYPE_CHECKING:  # pandas is imported when an export has GPU metrics: parsers stay light to import
    import pandas as pd

COUNTER_NAME = "GPU Metrics"
TABLE = "GPU_METRICS"
NAMES_TABLE = "TARGET_INFO_GPU_METRICS"
#: bracketed unit (lower case) -> the unit traceview gives it
_UNITS = {"throughput %": "%", "%": "%", "mhz": "MHz", "ghz": "GHz", "khz": "kHz", "w": "W", "watts": "W",
          "requests": "requests", "warps": "warps", "bytes": "byte", "mib": "MiB", "c": "C"}


def metric_unit(name: str) -> str:
    """The unit in a metric name's trailing brackets (``[Throughput %]`` -> ``%``); '' without one."""
    text = name.rstrip()
    if not text.endswith("]") or "[" not in text:
        return ""
    inner = text[text.rindex("[") + 1:-1].strip()
    return _UNITS.get(inner.lower(), inner)


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")').fetchall()]


def _device_of_gpu(con: sqlite3.Connection, tables: set[str]) -> dict[int, int]:
    cols = set(_columns(con, "TARGET_INFO_GPU")) if "TARGET_INFO_GPU" in tables else set()
    key = "pwGpuId" if "pwGpuId" in cols else "id"
    if not {key, "cuDevice"} <= cols:
        return {}
    rows = con.execute(f'SELECT {key}, cuDevice FROM "TARGET_INFO_GPU"').fetchall()
    return {int(i): int(d) for i, d in rows if isinstance(i, int) and isinstance(d, int)}


def _names(con: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    import pandas as pd

    if NAMES_TABLE not in tables:
        return pd.DataFrame(columns=["typeId", "metricId", "metricName"])
    cols = _columns(con, NAMES_TABLE)
    type_col = "typeId" if "typeId" in cols else "NULL"
    frame = pd.DataFrame(con.execute(f'SELECT {type_col}, metricId, metricName FROM "{NAMES_TABLE}"').fetchall(),
                         columns=["typeId", "metricId", "metricName"])
    return frame.drop_duplicates(["typeId", "metricId"])


def gpu_metric_counters(con: sqlite3.Connection, tables: set[str], ranks: dict[int, RankInfo]) -> pa.Table:
    """The export's GPU metric samples as counter rows (empty without ``GPU_METRICS``)."""
    if TABLE not in tables or not ranks:
        return empty_counters()
    import pandas as pd

    cols = _columns(con, TABLE)
    type_col = "typeId" if "typeId" in cols else "0"
    samples = pd.DataFrame(con.execute(f'SELECT timestamp, {type_col}, metricId, value FROM "{TABLE}"').fetchall(),
                           columns=["ts", "typeId", "metricId", "value"])
    counts = ranks[min(ranks)].event_counts
    counts[f"{TABLE}.read"] = len(samples)
    ranks[min(ranks)].unmapped.pop(TABLE, None)
    null_ts = samples["ts"].isna().to_numpy()
    counts[f"{TABLE}.skipped_null_timestamp"] = int(null_ts.sum())
    samples = samples[~null_ts]
    names = _names(con, tables)
    typed = names["typeId"].notna().any()
    on = ["typeId", "metricId"] if typed else ["metricId"]
    merged = samples.merge(names[[*on, "metricName"]] if typed else names[["metricId", "metricName"]], on=on,
                           how="left")
    unknown = merged["metricName"].isna().to_numpy()
    counts[f"{TABLE}.skipped_unknown_metric"] = int(unknown.sum())
    merged = merged[~unknown]
    gpu = merged["typeId"].astype(np.int64).to_numpy() & 0xFF
    to_device = _device_of_gpu(con, tables)
    device = np.array([to_device.get(int(g), int(g)) for g in np.unique(gpu)], dtype=np.int64)
    device = device[np.searchsorted(np.unique(gpu), gpu)] if len(gpu) else np.zeros(0, np.int64)
    owner: dict[int, int] = {}
    for r in sorted(ranks):
        for dev in ranks[r].devices:
            owner.setdefault(int(dev.id), r)
    rank = np.array([owner.get(int(d), -1) for d in device], dtype=np.int64) if len(device) else np.zeros(0, np.int64)
    counts[f"{TABLE}.device_without_rank"] = int((rank < 0).sum())
    rank = np.where(rank < 0, min(ranks), rank)
    counts[f"{TABLE}.mapped"] = int(len(merged))
    series = pa.array(merged["metricName"].astype(str).tolist(), pa.string()).dictionary_encode()
    return pa.table({
        "rank": pa.array(rank.astype(np.int32)), "pid": pa.array(device), "tid": pa.array(np.full(len(device), -1)),
        "name": pa.array([COUNTER_NAME] * len(device), pa.string()).dictionary_encode(),
        "series": series, "ts_ns": pa.array(merged["ts"].astype(np.int64).to_numpy()),
        "value": pa.array(merged["value"].astype(np.float64).to_numpy()),
    }, schema=COUNTER_SCHEMA).sort_by([("rank", "ascending"), ("ts_ns", "ascending")])
