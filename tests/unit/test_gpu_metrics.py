"""Nsight Systems GPU metrics (parsers/nsys/gpu_metrics.py) and their per-step analysis
(analyses/gpu_metrics.py), on the committed synthetic export with GPU_METRICS tables added to
NVIDIA's documented schema."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import traceview
from conftest import REPO
from traceview.parsers.nsys import parse_nsys

SAMPLE = REPO / "sample_traces" / "synthetic_nsys.sqlite"
#: (metricId, metricName) as nsys names them (units in brackets)
METRICS = ((0, "GPC Clock Frequency [MHz]"), (1, "SM Active [Throughput %]"), (2, "Tensor Active [Throughput %]"),
           (3, "DRAM Read Bandwidth [Throughput %]"), (4, "DRAM Write Bandwidth [Throughput %]"))
TYPE_BASE = 0x10000  # typeId: a metric set's id with the GPU (pwGpuId) in its low byte
PERIOD_NS = 10_000  # 100 kHz sampling
MEDIAN_MHZ, THROTTLED_MHZ = 1755.0, 1410.0


def export_with_metrics(tmp_path: Path, *, throttled_step_start: int | None, pw_of_device=(2, 5)) -> Path:
    """The synthetic export with GPU metrics for both GPUs over the whole trace; the GPC clock of GPU
    0 drops to THROTTLED_MHZ from ``throttled_step_start`` for 150 us; tensor pipes idle (fp32 sgemm)."""
    db = tmp_path / "with_metrics.sqlite"
    shutil.copyfile(SAMPLE, db)
    db.chmod(0o644)
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER NOT NULL, sourceId INTEGER NOT NULL,
            typeName TEXT NOT NULL, metricId INTEGER NOT NULL, metricName TEXT NOT NULL);
        CREATE TABLE GPU_METRICS (rawTimestamp INTEGER NOT NULL, timestamp INTEGER, typeId INTEGER NOT NULL,
            metricId INTEGER NOT NULL, value INTEGER NOT NULL);
    """)
    con.execute("UPDATE TARGET_INFO_GPU SET pwGpuId = ? WHERE cuDevice = 0", (pw_of_device[0],))
    con.execute("UPDATE TARGET_INFO_GPU SET pwGpuId = ? WHERE cuDevice = 1", (pw_of_device[1],))
    first, last = con.execute("SELECT min(start), max(\"end\") FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    rows = []
    for device, pw in enumerate(pw_of_device):
        type_id = TYPE_BASE | pw
        for metric_id, name in METRICS:
            con.execute("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, 1, 'GH100', ?, ?)", (type_id, metric_id, name))
        for ts in range(first, last, PERIOD_NS):
            clock = MEDIAN_MHZ
            throttled = throttled_step_start is not None and 0 <= ts - throttled_step_start < 150_000
            if device == 0 and throttled:
                clock = THROTTLED_MHZ
            for metric_id, value in ((0, clock), (1, 80), (2, 0), (3, 30), (4, 10)):
                rows.append((ts, ts, type_id, metric_id, value))
    rows.append((0, None, TYPE_BASE | pw_of_device[0], 1, 5))  # a sample nsys could not convert
    rows.append((first, first, TYPE_BASE | pw_of_device[0], 99, 5))  # a metric the names table lacks
    con.executemany("INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    return db


def _step_start(rank: int, step: int) -> int:
    t = parse_nsys(SAMPLE)
    s = t.steps.to_pandas()
    return int(s[(s["rank"] == rank) & (s["step"] == step)]["start_ns"].iloc[0])


def test_samples_become_counters_with_devices_ranks_and_counts(tmp_path):
    db = export_with_metrics(tmp_path, throttled_step_start=None)
    con = sqlite3.connect(db)
    total = con.execute("SELECT count(*) FROM GPU_METRICS").fetchone()[0]
    per_gpu = dict(con.execute("SELECT typeId & 255, count(*) FROM GPU_METRICS WHERE timestamp IS NOT NULL "
                               "AND metricId < 99 GROUP BY 1").fetchall())
    con.close()
    trace = parse_nsys(db)
    c = trace.counters.to_pandas()
    counts = trace.ranks[0].event_counts
    assert counts["GPU_METRICS.read"] == total
    assert counts["GPU_METRICS.skipped_null_timestamp"] == 1 and counts["GPU_METRICS.skipped_unknown_metric"] == 1
    assert counts["GPU_METRICS.mapped"] == len(c) == total - 2
    assert "GPU_METRICS" not in trace.ranks[0].unmapped
    # pwGpuId 2 is CUDA device 0 (rank 0), pwGpuId 5 device 1 (rank 1)
    assert (c["pid"] == c["rank"]).all()
    assert c.groupby("pid").size().to_dict() == {0: per_gpu[2], 1: per_gpu[5]}
    assert set(c["series"]) == {name for _, name in METRICS}
    assert (c["name"] == "GPU Metrics").all()


def test_per_step_metrics_and_a_throttled_step(tmp_path):
    start = _step_start(0, 2)
    db = export_with_metrics(tmp_path, throttled_step_start=start)
    report = traceview.analyze(db, cache=False)
    steps = report.table("gpu_metrics", "steps")
    metrics = report.table("gpu_metrics", "metrics")
    assert set(metrics["unit"]) == {"MHz", "%"}
    mine = steps[(steps["rank"] == 0) & steps["step"].notna()].set_index("step")
    assert mine.loc[2, "gpc_clock_mhz"] < 0.9 * MEDIAN_MHZ
    assert mine.loc[1, "gpc_clock_mhz"] == pytest.approx(MEDIAN_MHZ)
    assert mine["sm_active_pct"].tolist() == pytest.approx([80.0] * 4)
    assert mine["dram_read_pct"].tolist() == pytest.approx([30.0] * 4)
    found = {f["code"]: f for f in report["findings"] if f["analysis"] == "gpu_metrics"}
    throttled = [f for f in report["findings"] if f["code"] == "clock_throttling"]
    assert len(throttled) == 1 and throttled[0]["step"] == 2 and throttled[0]["rank"] == 0
    assert {int(s) for s in throttled[0]["evidence"]["steps"]} == {2}
    # sgemm (fp32) kernels dominate every step while the tensor pipes are idle
    assert "tensor_pipes_idle" in found
    assert np.all(steps.loc[steps["step"].notna(), "gemm_share"] >= 0.5)


def test_no_throttling_without_a_clock_drop(tmp_path):
    db = export_with_metrics(tmp_path, throttled_step_start=None)
    report = traceview.analyze(db, cache=False)
    assert not [f for f in report["findings"] if f["code"] == "clock_throttling"]


def test_dram_bound_steps_and_kernel_windows(tmp_path):
    """DRAM read + write at 70% of peak in every sample: each step is DRAM-bound (one finding per GPU);
    the per-kernel table averages only the samples inside each kernel's executions, recounted here."""
    db = export_with_metrics(tmp_path, throttled_step_start=None)
    con = sqlite3.connect(db)
    con.execute("UPDATE GPU_METRICS SET value = 50 WHERE metricId = 3")
    con.execute("UPDATE GPU_METRICS SET value = 20 WHERE metricId = 4")
    kernels = con.execute("SELECT start, \"end\", deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    stamps = [r[0] for r in con.execute("SELECT DISTINCT timestamp FROM GPU_METRICS WHERE timestamp IS NOT NULL "
                                        "AND metricId = 1 AND (typeId & 255) = 2")]
    con.commit()
    con.close()
    report = traceview.analyze(str(db), cache=False)
    dram = [f for f in report["findings"] if f["code"] == "dram_bound_phase"]
    # one finding per GPU, merged across ranks into one (the title quotes the figure)
    assert dram and all("70% of its peak bandwidth" in f["title"] or "70%" in f["title"] for f in dram), dram
    table = report.table("gpu_metrics", "kernels")
    assert not table.empty and (table["dram_read_pct"] == 50).all() and (table["sm_active_pct"] == 80).all()
    # by hand, the rule the table states: a sample of GPU 0 belongs to the kernel of device 0 that
    # started last at or before it, if that kernel has not ended
    spans = sorted((s, e) for s, e, d in kernels if d == 0)
    inside = 0
    for t in stamps:
        started = [(s, e) for s, e in spans if s <= t]
        inside += bool(started) and t < started[-1][1]
    got = table[table["device"] == 0]["samples"].sum()
    # each sample instant has five metrics (SM, tensor, DRAM read and write, clock)
    assert len(table) < 20 and got == inside * 5
