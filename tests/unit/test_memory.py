"""Memory (analyses/memory.py, docs/metrics.md "Memory"): Kineto's ``[memory]`` instants become
``Trace.memory``; peaks, the op at the peak, per-step figures and the two findings on planted
allocator patterns; figures on the shared real traces against an independent reading of the JSON;
the same tables through the cache, a job and the command line.

Definitions under test (docs/metrics.md, "Memory"):

- "``peak_allocated_bytes`` = the highest allocated level; the peak event is the first event that
  reached it"; "``unused_reserved_at_peak_bytes`` = reserved - allocated there";
- "``cpu_op`` = the innermost CPU op on the allocating thread (same rank, pid and tid) with start <=
  the peak event's time <= end";
- "the peak [of a step] is the highest level in force during the step, which includes the level
  carried in from the device's last event before the step";
- "``memory_fragmentation``: unused reserve >= 1 GiB and reserved >= 1.5 x peak allocated at the
  peak, and a fragmented reservation in the trace or reserved >= 80% of the GPU's memory";
- "``allocation_churn``: at least 2 steps and reserved memory changed in every one of them".
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import traceview
from builders import write_kineto
from traceview.analyses import memory
from traceview.findings import Options
from traceview.jobs import LocalProcesses
from traceview.trace_cache import cache_dir
from traceview.parsers import jsonstream
from traceview.parsers.kineto import reading as kineto_reading
from traceview.pipeline import analyze, select_rank

from conftest import SHARED_TRACES, context, require_shared

GIB = 1 << 30
MIB = 1 << 20
STEP_US = 100_000
KINETO = SHARED_TRACES / "kineto"
WITH_MEMORY = ["hta_df_index_resolver_v100_rank1.json.gz", "tbplugin_resnet50_v100_2021.json.gz",
               "tracelens_qwen05b_h100.json.gz", "tracelens_qwen05b_mi300x.json.gz"]


# ------------------------------------------------------------------------------ a synthetic trace


class MemoryTrace:
    """A Kineto trace with ProfilerSteps, CPU ops and allocator events whose totals it keeps itself
    (so a test states only the allocations, frees and reserve changes it plants)."""

    def __init__(self, device: int = 0, device_type: int = 1) -> None:
        self.events: list[dict[str, Any]] = []
        self.allocated = {(device_type, device): 0}
        self.reserved = {(device_type, device): 0}
        self.device, self.device_type = device, device_type

    def step(self, number: int) -> int:
        """Add ProfilerStep#number and its ops; returns its start (us)."""
        t0 = 1_000_000 + number * STEP_US
        self.events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": 1, "tid": 1, "ts": t0,
             "dur": STEP_US - 10},
            {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": t0 + 1000, "dur": 40_000},
            {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": t0 + 2000, "dur": 1000},
            # another thread's op spans the whole step: never the op of an allocation on thread 1
            {"ph": "X", "cat": "cpu_op", "name": "other_thread_op", "pid": 1, "tid": 2, "ts": t0, "dur": STEP_US},
        ]
        return t0

    def mem(self, ts: int, nbytes: int, reserve: int | None = None, *, tid: int = 1,
            device: int | None = None, device_type: int | None = None) -> None:
        """An allocation (> 0) or free (< 0) at ``ts`` us; ``reserve`` = reserved after it (default:
        unchanged, grown to fit)."""
        key = (self.device_type if device_type is None else device_type, self.device if device is None else device)
        self.allocated[key] = self.allocated.get(key, 0) + nbytes
        reserved = max(self.reserved.get(key, 0), self.allocated[key]) if reserve is None else reserve
        self.reserved[key] = reserved
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1,
                            "tid": tid, "ts": ts, "args": {
                                "Device Type": key[0], "Device Id": key[1], "Addr": 1 << 40, "Bytes": nbytes,
                                "Total Allocated": self.allocated[key], "Total Reserved": reserved}})

    def write(self, path: Path, rank: int = 0, **top: Any) -> Path:
        return write_kineto(path, self.events, **{"distributedInfo": {"rank": rank, "world_size": 2}, **top})


def analyse(path: Path) -> tuple[pd.DataFrame, list]:
    trace = traceview.load(path, use_cache=False)
    result = memory.analyze(context(trace, Options()))
    return result.tables["memory"], result.findings


def whole(table: pd.DataFrame, device_type: str = "cuda") -> pd.Series:
    [row] = table[table["step"].isna() & (table["device_type"] == device_type)].to_dict("records")
    return pd.Series(row)


def fragmented(tmp_path: Path) -> Path:
    """Every step: 2 GiB live, a 1 GiB request that the 4 GiB cached unused cannot serve (reserve grows
    by 1 GiB), then it is freed: the peak is 3 GiB allocated with 7, 8, 9 GiB reserved."""
    t = MemoryTrace()
    t.mem(900_000, 2 * GIB, 6 * GIB)
    for n in range(3):
        t0 = t.step(n)
        t.mem(t0 + 2500, GIB, t.reserved[(1, 0)] + GIB)  # inside aten::empty: a fragmented reservation
        t.mem(t0 + 50_000, -GIB)
    return t.write(tmp_path / "fragmented.json")


def healthy(tmp_path: Path, **top: Any) -> Path:
    """A warm cache: 6 GiB live, 12 GiB reserved before the trace, never grown (no fragmentation in
    the window), 1 GiB allocated and freed per step."""
    t = MemoryTrace()
    t.mem(900_000, 6 * GIB, 12 * GIB)
    for n in range(3):
        t0 = t.step(n)
        t.mem(t0 + 2500, GIB)
        t.mem(t0 + 50_000, -GIB)
    return t.write(tmp_path / "healthy.json", **top)


def churning(tmp_path: Path, steps: int = 4, every_step: bool = True, with_steps: bool = True) -> Path:
    """Each step reserves a new 512 MiB segment and releases it at the end (empty_cache in the loop)."""
    t = MemoryTrace()
    t.mem(900_000, GIB, GIB)
    for n in range(steps):
        t0 = t.step(n) if with_steps else 1_000_000 + n * STEP_US
        grow = every_step or n == 0
        t.mem(t0 + 2500, 512 * MIB, t.reserved[(1, 0)] + (512 * MIB if grow else 0))
        t.mem(t0 + 50_000, -512 * MIB, GIB if grow else None)
    if not with_steps:
        t.events = [e for e in t.events if not e["name"].startswith("ProfilerStep")]
    return t.write(tmp_path / "churn.json")


# ------------------------------------------------------------------------------ parser and model


def test_memory_instants_become_the_memory_table(tmp_path):
    t = MemoryTrace()
    t.step(0)
    t.mem(1_000_500, 4096)
    t.mem(1_000_600, 8, device=-1, device_type=0)
    t.mem(1_000_700, -4096)
    t.events.append({"ph": "i", "s": "t", "name": "Iteration Start: PyTorch Profiler", "pid": 1, "tid": 1,
                     "ts": 1_000_000})
    tr = traceview.load(t.write(tmp_path / "t.json", rank=3, baseTimeNanoseconds=5000), use_cache=False)
    mem = tr.memory.to_pandas()
    assert mem["rank"].tolist() == [3, 3, 3] and mem["device"].tolist() == [0, -1, 0]
    assert mem["device_type"].tolist() == [1, 0, 1] and mem["bytes"].tolist() == [4096, 8, -4096]
    assert mem["ts_ns"].tolist() == [1_000_500_000 + 5000, 1_000_600_000 + 5000, 1_000_700_000 + 5000]
    assert mem["total_allocated_bytes"].tolist() == [4096, 8, 0]
    info = tr.ranks[3]
    # every event read is accounted for: rows, memory rows, or (the other instant) an unmapped row
    assert info.event_counts["memory"] == 3 and info.event_counts["events_read"] == len(t.events)
    assert info.event_counts["mapped"] == tr.num_events == len(t.events) - 3
    assert info.unmapped == {"(no category)": 1}
    assert "[memory]" not in tr.events.column("name").to_pylist()


def test_memory_table_whatever_the_chunking_key_order_or_value_types(tmp_path, monkeypatch):
    """The parser decodes allocator args only from the first chunk that has allocator events on (read
    again from its text), so: events before and after that point, in many chunks, in any key order,
    with numbers written as text, all give the same table."""
    t = MemoryTrace()
    for n in range(40):
        t0 = t.step(n)
        t.mem(t0 + 2500, (n + 1) * MIB)
        t.mem(t0 + 3000, -(n + 1) * MIB, tid=2)
    path = t.write(tmp_path / "plain.json")
    expected = traceview.load(path, use_cache=False).memory
    assert expected.num_rows == 80 and expected.column("bytes").to_pylist()[:2] == [MIB, -MIB]
    args_first = [{"args": e["args"], **{k: v for k, v in e.items() if k != "args"}}
                  if e["name"] == "[memory]" else e for e in t.events]
    as_text = [{**e, "args": {k: str(v) for k, v in e["args"].items()}} if e["name"] == "[memory]" else e
               for e in t.events]
    monkeypatch.setattr(kineto_reading, "CHUNK_BYTES", 2048)  # a chunk holds a few events
    monkeypatch.setattr(jsonstream, "READ_BYTES", 1024)
    for events in (t.events, args_first, as_text):
        t.events = events
        tr = traceview.load(t.write(tmp_path / "variant.json"), use_cache=False)
        assert tr.memory.equals(expected)
        assert tr.num_events == 160 and tr.ranks[0].event_counts["memory"] == 80


def test_old_format_without_totals_gives_nulls(tmp_path):
    events = [{"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 10 + i,
               "args": {"Device Type": 1, "Device Id": 0, "Bytes": b}} for i, b in enumerate([100, 50, -100])]
    tr = traceview.load(_write(tmp_path, events), use_cache=False)
    mem = tr.memory
    assert mem.column("total_allocated_bytes").null_count == 3 and mem.column("addr").null_count == 3
    table = memory.analyze(context(tr, Options())).tables["memory"]
    row = whole(table)
    # net since the trace started: 100, 150, 50 -> the peak is 150 at the second event
    assert row["peak_allocated_bytes"] == 150 and row["totals"] == memory.NET_TOTALS
    assert pd.isna(row["reserved_at_peak_bytes"]) and row["allocations"] == 2 and row["freed_bytes"] == 100


def _write(tmp_path: Path, events: list[dict]) -> Path:
    return write_kineto(tmp_path / "events.json", events, schema_version=False)


def test_cache_and_rank_numbering_keep_the_memory_table(tmp_path):
    path = fragmented(tmp_path)
    first = traceview.load(path)
    second = traceview.load(path)  # from the cache
    assert list(cache_dir().glob("*.arrow.memory"))  # the second load read this
    assert first.memory.num_rows == 7 and second.memory.equals(first.memory)
    # two files, ranks from their distributedInfo: each rank keeps its own rows, also alone
    other = MemoryTrace()
    other.mem(5, 3 * MIB)
    both = traceview.load([path, other.write(tmp_path / "r1.json", rank=1)], use_cache=False)
    assert sorted(set(both.memory.column("rank").to_pylist())) == [0, 1]
    sub, _ = select_rank(both, 1)
    assert sub.memory.column("bytes").to_pylist() == [3 * MIB]


# ------------------------------------------------------------------------------ figures


def test_peak_op_and_per_step_figures(tmp_path):
    table, _ = analyse(fragmented(tmp_path))
    row = whole(table)
    assert row["peak_allocated_bytes"] == 3 * GIB and row["reserved_at_peak_bytes"] == 7 * GIB
    assert row["unused_reserved_at_peak_bytes"] == 4 * GIB and row["peak_reserved_bytes"] == 9 * GIB
    assert row["cpu_op"] == "aten::empty"  # the innermost op of the allocating thread, not thread 2's
    assert row["allocations"] == 4 and row["frees"] == 3 and row["fragmented_reservations"] == 3
    assert row["reserve_increases"] == 3 and row["reserve_decreases"] == 0
    steps = table[table["step"].notna() & (table["device_type"] == "cuda")]
    assert steps["step"].tolist() == [0, 1, 2]
    assert steps["allocated_bytes"].tolist() == [GIB] * 3 and steps["freed_bytes"].tolist() == [GIB] * 3
    assert steps["peak_allocated_bytes"].tolist() == [3 * GIB] * 3
    assert steps["reserved_at_peak_bytes"].tolist() == [7 * GIB, 8 * GIB, 9 * GIB]
    # peak_at: ns after the rank's first event (the first allocation at 900 ms)
    assert steps["peak_at_ns"].tolist() == [(100_000 + n * STEP_US + 2500) * 1000 for n in range(3)]


def test_a_step_peak_includes_the_level_carried_in(tmp_path):
    t = MemoryTrace()
    t.mem(900_000, 5 * GIB)  # before the steps, outside any op
    t0 = t.step(0)
    t.mem(t0 + 10_000, -2 * GIB)  # the step only frees: its peak is the level it started with
    t.mem(t0 + 20_000, GIB)
    table, _ = analyse(t.write(tmp_path / "carry.json"))
    [step] = table[table["step"] == 0].to_dict("records")
    assert step["peak_allocated_bytes"] == 5 * GIB and step["events"] == 2 and step["allocations"] == 1
    assert step["peak_at_ns"] == (t0 - 900_000) * 1000  # the step's start, after the first event
    assert step["cpu_op"] is None and step["cpu_op_row"] == -1  # the allocation happened outside any op


def test_cpu_memory_is_kept_apart_and_never_judged(tmp_path):
    t = MemoryTrace()
    t0 = t.step(0)
    # CPU "memory" with a huge reserve: its own rows, reserve figures missing, no finding
    t.mem(t0 + 2500, 2 * GIB, 20 * GIB, device=-1, device_type=0)
    t.mem(t0 + 2600, MIB)
    table, findings = analyse(t.write(tmp_path / "cpu.json"))
    cpu = whole(table, "cpu")
    assert cpu["device"] == -1 and cpu["peak_allocated_bytes"] == 2 * GIB and pd.isna(cpu["reserved_at_peak_bytes"])
    assert whole(table)["peak_allocated_bytes"] == MIB
    assert findings == []


# ------------------------------------------------------------------------------ findings


def test_fragmentation_fires_on_a_fragmented_allocator(tmp_path):
    _, findings = analyse(fragmented(tmp_path))
    [f] = findings
    assert f.code == "memory_fragmentation" and f.severity == "low" and f.claims is None
    assert f.rank == 0 and f.evidence["unused_reserved_at_peak_bytes"] == 4 * GIB
    assert f.evidence["fragmented_reservations"] == 3
    assert "4.3 GB" in f.title and "7.5 GB" in f.title  # 4 GiB unused of 7 GiB reserved


def test_a_healthy_warm_cache_raises_nothing(tmp_path):
    table, findings = analyse(healthy(tmp_path))
    row = whole(table)
    # 12 GiB reserved, at most 7 GiB used: a large unused reserve, but it never grew in the window
    assert row["unused_reserved_at_peak_bytes"] == 5 * GIB and row["fragmented_reservations"] == 0
    assert findings == []


def test_an_unused_reserve_that_crowds_the_gpu_fires(tmp_path):
    props = [{"id": 0, "name": "GPU", "totalGlobalMem": 14 * GIB}]
    _, findings = analyse(healthy(tmp_path, deviceProperties=props))
    [f] = findings
    assert f.code == "memory_fragmentation" and "86% of the GPU" in f.title  # 12 of 14 GiB
    # the same reserve on a 16 GiB GPU (75%) is left alone
    props[0]["totalGlobalMem"] = 16 * GIB
    assert analyse(healthy(tmp_path, deviceProperties=props))[1] == []


def test_churn_fires_when_the_reserve_changes_every_step(tmp_path):
    table, findings = analyse(churning(tmp_path))
    [f] = findings
    assert f.code == "allocation_churn" and f.severity == "low" and f.claims is None
    assert f.evidence["steps"] == 4 and f.evidence["reserve_decreases"] == 4 and "(4 releases)" in f.title
    steps = table[table["step"].notna()]
    assert (steps["reserve_increases"] == 1).all() and (steps["reserve_decreases"] == 1).all()


def test_churn_needs_every_step_and_steps(tmp_path):
    assert analyse(churning(tmp_path, every_step=False))[1] == []  # only the first step reserved
    # a reserve that grows every step without release is growth, not churn (fragmented() grows by 1 GiB)
    assert [f.code for f in analyse(fragmented(tmp_path))[1]] == ["memory_fragmentation"]
    assert analyse(churning(tmp_path, with_steps=False))[1] == []  # no steps: not judged


def test_findings_reach_the_report(tmp_path):
    report = analyze(fragmented(tmp_path), use_cache=False)
    codes = [f["code"] for f in report["findings"]]
    assert "memory_fragmentation" in codes
    assert report.table("memory", "memory")["peak_allocated_bytes"].max() == 3 * GIB


# ------------------------------------------------------------------------------ real traces


def _independent(path: Path) -> tuple[dict, list[dict], dict]:
    """Per (device type, device) from the JSON itself: peak allocated (the allocator's total, else the
    running sum of Bytes), peak reserved, allocations, bytes allocated; and the file's CPU ops."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    figures: dict[tuple[int, int], dict[str, Any]] = {}
    for ev in doc["traceEvents"]:
        if ev.get("name") != "[memory]":
            continue
        a = ev["args"]
        fig = figures.setdefault((a["Device Type"], a["Device Id"]), {
            "net": 0, "peak": None, "peak_ts": None, "tid": None, "reserved": 0, "allocations": 0, "bytes": 0})
        fig["net"] += a["Bytes"]
        level = a.get("Total Allocated", fig["net"])
        # the first event to reach the peak (events sorted by time, ties in file order)
        key = (-level, ev["ts"])
        if fig["peak"] is None or key < (-fig["peak"], fig["peak_ts"]):
            fig.update(peak=level, peak_ts=ev["ts"], tid=(ev["pid"], ev["tid"]))
        fig["reserved"] = max(fig["reserved"], a.get("Total Reserved", 0))
        fig["allocations"] += a["Bytes"] > 0
        fig["bytes"] += max(a["Bytes"], 0)
    # the 2021 format writes op tids as text ("25772") and allocator tids as numbers
    ops = [{**ev, "pid": int(ev["pid"]), "tid": int(ev["tid"])} for ev in doc["traceEvents"]
           if ev.get("ph") == "X" and (ev.get("cat") or "").lower() in ("cpu_op", "operator")]
    return figures, ops, doc


@pytest.mark.parametrize("name", WITH_MEMORY)
def test_real_traces_against_the_json(name):
    require_shared()
    path = KINETO / name
    figures, ops, doc = _independent(path)
    trace = traceview.load(path, use_cache=False)
    assert trace.memory.num_rows == sum(1 for e in doc["traceEvents"] if e.get("name") == "[memory]")
    table = memory.analyze(context(trace, Options())).tables["memory"]
    rows = table[table["step"].isna()]
    assert len(rows) == len(figures)
    for row in rows.to_dict("records"):
        code = {v: k for k, v in memory.DEVICE_TYPE_NAMES.items()}[row["device_type"]]
        fig = figures[(code, row["device"])]
        assert row["peak_allocated_bytes"] == fig["peak"]
        assert row["allocations"] == fig["allocations"] and row["allocated_bytes"] == fig["bytes"]
        if row["device_type"] != "cpu" and row["totals"] == memory.ALLOCATOR_TOTALS:
            assert row["peak_reserved_bytes"] == fig["reserved"]
        # the op at the peak: the innermost (shortest) op of the thread spanning the peak's time
        spanning = [o for o in ops if (o["pid"], o["tid"]) == fig["tid"]
                    and o["ts"] <= fig["peak_ts"] <= o["ts"] + o.get("dur", 0)]
        innermost = min(spanning, key=lambda o: (o.get("dur", 0), -o["ts"]))["name"] if spanning else None
        assert row["cpu_op"] == innermost
    info = next(iter(trace.ranks.values()))
    assert "cpu_instant_event" not in info.unmapped and info.event_counts["memory"] == trace.memory.num_rows
    # every event read is accounted for once: an event row, a memory row, a flow, metadata, another ph
    counts = info.event_counts
    fates = ("mapped", "memory", "flow", "metadata", "unmapped_ph")
    assert sum(counts.get(k, 0) for k in fates) == counts["events_read"] == len(doc["traceEvents"])
    assert counts["mapped"] == trace.num_events


def test_shared_traces_raise_no_memory_finding():
    """The real traces are healthy allocators: reserve constant in the window, far from full."""
    require_shared()
    for name in WITH_MEMORY:
        trace = traceview.load(KINETO / name, use_cache=False)
        assert memory.analyze(context(trace, Options())).findings == [], name


# ------------------------------------------------------------------------------ jobs


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory) -> Path:
    """Two ranks with memory events: rank 0 fragmented, rank 1 churning."""
    out = tmp_path_factory.mktemp("memjob")
    scratch = tmp_path_factory.mktemp("scratch")
    fragmented(scratch).rename(out / "rank0.json")
    path = churning(scratch)
    doc = json.loads(path.read_text())
    doc["distributedInfo"]["rank"] = 1
    (out / "rank1.json").write_text(json.dumps(doc))
    return out


def test_job_gives_the_in_memory_memory_tables(job_dir):
    in_memory = analyze(job_dir, use_cache=False)
    job = analyze(job_dir, use_cache=False, executor=LocalProcesses(2))
    a, b = in_memory.table("memory", "memory"), job.table("memory", "memory")
    pd.testing.assert_frame_equal(a, b)
    assert sorted(set(a["rank"])) == [0, 1]
    assert {f["code"] for f in job["findings"]} >= {"memory_fragmentation", "allocation_churn"}
    assert json.loads(in_memory.to_json())["analyses"]["memory"] == json.loads(job.to_json())["analyses"]["memory"]


def test_cli_workers_gives_the_in_memory_memory_json(job_dir):
    def run(*extra: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(job_dir), "--no-cache",
                               "--format", "json", *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    alone, workers = run(), run("--workers", "2")
    assert alone["analyses"]["memory"] == workers["analyses"]["memory"]
    memory_findings = [f for f in alone["findings"] if f["analysis"] == "memory"]
    assert memory_findings and memory_findings == [f for f in workers["findings"] if f["analysis"] == "memory"]
    assert np.isfinite([r["peak_allocated_bytes"] for r in alone["analyses"]["memory"]["tables"]["memory"]["rows"]]).all()
