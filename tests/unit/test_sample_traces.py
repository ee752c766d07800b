"""The traces in sample_traces/ and their planted truths.

These tests check the *data*: regeneration is byte-identical, truth.json is self-consistent, and the
Kineto files agree with it when re-counted here with nothing but gzip + json (parsing ``ts`` as a
decimal, so large timestamps stay exact). They never import traceview's parsers.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from conftest import SAMPLE_TRACES

KINETO = SAMPLE_TRACES / "synthetic_4rank"
RANK_FILES = [f"rank{r}.json.gz" for r in range(4)]
CAUSES = {"host_bound", "sync_bound", "launch_latency", "unattributed"}
ACTIVITY = ("kernel", "gpu_memcpy", "gpu_memset")
METRICS = ("window_ns", "busy_ns", "idle_ns", "compute_ns", "communication_ns", "memory_ns", "overlap_ns",
           "exposed_comm_ns", "first_start_ns", "last_end_ns")


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"_sample_traces_{name}", SAMPLE_TRACES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is created
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def truth() -> dict:
    return json.loads((KINETO / "truth.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def texts() -> dict[int, str]:
    return {r: gzip.decompress((KINETO / f).read_bytes()).decode("utf-8") for r, f in enumerate(RANK_FILES)}


@pytest.fixture(scope="module")
def docs(texts) -> dict[int, dict]:
    return {r: json.loads(t, parse_float=Decimal) for r, t in texts.items()}


# ---- interval helpers (half-open [s, e), touching intervals merge) -------------------------------

def _merge(iv):
    out = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _measure(iv) -> int:
    return sum(e - s for s, e in _merge(iv))


def _intersection(a, b) -> int:
    a, b = _merge(a), _merge(b)
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


# ---- 1. regeneration -------------------------------------------------------------------------------

def test_regeneration_is_byte_identical(tmp_path: Path) -> None:
    _module("make_kineto").main(tmp_path)
    made = sorted(p.name for p in (tmp_path / "synthetic_4rank").iterdir())
    assert made == sorted(RANK_FILES + ["truth.json"])
    for name in made:
        new = (tmp_path / "synthetic_4rank" / name).read_bytes()
        old = (KINETO / name).read_bytes()
        if name.endswith(".gz") and new != old:
            # tell a content change from a different zlib producing other compressed bytes
            assert gzip.decompress(new) == gzip.decompress(old), f"{name}: content differs from the committed file"
        assert new == old, f"{name}: not byte-identical to the committed file (run sample_traces/regenerate.py)"


def test_sizes() -> None:
    assert sum((KINETO / f).stat().st_size for f in RANK_FILES) < 400_000
    cpu = SAMPLE_TRACES / "torch_cpu_mlp.json.gz"
    assert cpu.is_file() and cpu.stat().st_size < 500_000


# ---- 2. truth.json is self-consistent ----------------------------------------------------------------

def _check_row(row: dict, where: str) -> None:
    assert row["busy_ns"] + row["idle_ns"] == row["window_ns"], where
    assert row["window_ns"] == row["last_end_ns"] - row["first_start_ns"], where
    assert 0 <= row["overlap_ns"] <= row["communication_ns"], where
    assert row["exposed_comm_ns"] == row["communication_ns"] - row["overlap_ns"], where
    assert row["overlap_pct"] == pytest.approx(100 * row["overlap_ns"] / row["communication_ns"], abs=1e-6), where
    assert max(row["compute_ns"], row["communication_ns"], row["memory_ns"]) <= row["busy_ns"], where
    assert row["busy_ns"] <= row["compute_ns"] + row["communication_ns"] + row["memory_ns"], where
    gaps = row["gaps"]
    assert sum(e - s for s, e, _ in gaps) == row["idle_ns"], where
    for (s, e, cause), (s2, _, _) in zip(gaps, gaps[1:] + [[row["last_end_ns"], 0, ""]]):
        assert row["first_start_ns"] <= s < e <= row["last_end_ns"], (where, s, e)
        assert e <= s2, (where, "gaps overlap or are unsorted")
        assert cause in CAUSES, where
    assert [[d["start_ns"], d["end_ns"], d["cause"]] for d in row["gap_details"]] == gaps, where
    by_cause: dict[str, int] = {}
    for s, e, c in gaps:
        by_cause[c] = by_cause.get(c, 0) + e - s
    assert row["idle_by_cause_ns"] == by_cause, where


def test_truth_is_self_consistent(truth: dict) -> None:
    assert truth["world_size"] == 4 and sorted(truth["ranks"]) == ["0", "1", "2", "3"]
    for rank, rd in truth["ranks"].items():
        overall = rd["overall"]
        _check_row(overall, f"rank {rank} overall")
        assert [s["name"] for s in rd["steps"]] == truth["steps"]
        prev_end = None
        for st in rd["steps"]:
            _check_row(st, f"rank {rank} {st['name']}")
            assert overall["first_start_ns"] <= st["first_start_ns"] and st["last_end_ns"] <= overall["last_end_ns"]
            assert prev_end is None or prev_end < st["first_start_ns"], "step windows overlap"
            prev_end = st["last_end_ns"]
            assert all(g in overall["gaps"] for g in st["gaps"])
            # each step plants one gap of each attributable cause
            assert {"host_bound", "sync_bound", "launch_latency"} <= {c for _, _, c in st["gaps"]}
        for key in ("compute_ns", "communication_ns", "memory_ns", "overlap_ns", "busy_ns"):
            assert overall[key] == sum(st[key] for st in rd["steps"]), (rank, key)
        assert sum(v["count"] for v in overall["kernels"].values()) == sum(st["kernel_count"] for st in rd["steps"])
        for v in overall["kernels"].values():
            assert v["min_ns"] <= v["max_ns"] and v["min_ns"] * v["count"] <= v["total_ns"] <= v["max_ns"] * v["count"]
        assert all(d >= 0 for d in rd["launch_delay_ns"].values())
    st = truth["straggler"]
    assert st["rank"] == 3 and st["late_by_ns"] > 0 and len(st["collectives"]) == 2 * len(truth["steps"])
    for c in st["collectives"]:
        arr = {int(r): v for r, v in c["arrival_ns"].items()}
        assert c["straggler_late_by_ns"] == st["late_by_ns"]
        assert arr[3] - max(v for r, v in arr.items() if r != 3) == st["late_by_ns"]
        assert c["end_ns"] > arr[3]


# ---- 3. the Kineto files agree with truth.json -----------------------------------------------------

def test_event_counts_match_truth(docs: dict, truth: dict) -> None:
    for r, doc in docs.items():
        counts: dict[str, dict[str, int]] = {}
        for ev in doc["traceEvents"]:
            c = counts.setdefault(ev.get("cat", ""), {})
            c[ev["ph"]] = c.get(ev["ph"], 0) + 1
        assert counts == truth["ranks"][str(r)]["event_counts"], f"rank {r}"


def test_files_look_like_recent_kineto(docs: dict, texts: dict, truth: dict) -> None:
    for r, doc in docs.items():
        keys = list(doc)
        assert keys[0] == "schemaVersion" and keys[-3:] == ["traceName", "displayTimeUnit", "baseTimeNanoseconds"]
        assert keys.index("deviceProperties") < keys.index("traceEvents")
        assert keys.index("distributedInfo") < keys.index("traceEvents")
        info = doc["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("nccl", r, 4)
        assert doc["deviceProperties"][r]["name"].startswith("NVIDIA H100")
        assert doc["baseTimeNanoseconds"] == truth["clock"]["base_time_ns"][str(r)]
        # every timestamp is written with exactly three decimals (ns precision)
        stamps = re.findall(r'"(?:ts|dur)": ([0-9.]+)', texts[r])
        assert stamps and all(re.fullmatch(r"\d+\.\d{3}", s) for s in stamps)
        assert max(Decimal(s) for s in stamps) > 2**42  # beyond what float64 holds to the ns
        cats = {e.get("cat") for e in doc["traceEvents"]}
        assert {"user_annotation", "cpu_op", "cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset", "ac2g",
                "python_function"} <= cats
    offsets = truth["clock"]["base_offset_vs_rank0_ns"]
    assert len(set(offsets.values())) > 1, "one rank must use another base time"


def _abs_ns(base: int, us: Decimal) -> int:
    ns = us * 1000
    assert ns == ns.to_integral_value()
    return base + int(ns)


def _recount(doc: dict) -> tuple[dict, list[dict], dict, dict]:
    """Re-derive the planted figures from the events (definitions of docs/metrics.md)."""
    base = doc["baseTimeNanoseconds"]
    evs = [e for e in doc["traceEvents"] if e.get("ph") == "X" and isinstance(e.get("pid"), int)]
    for e in evs:
        e["_s"] = _abs_ns(base, e["ts"])
        e["_e"] = e["_s"] + int(e["dur"] * 1000)
    runtime = {e["args"]["correlation"]: e for e in evs if e["cat"] == "cuda_runtime"}
    steps = sorted((e for e in evs if e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["_s"])
    acts = [e for e in evs if e["cat"] in ACTIVITY]
    for a in acts:
        launch = runtime.get(a["args"]["correlation"])
        a["_launch"] = launch
        t = launch["_s"] if launch else a["_s"]
        a["_step"] = next((s["name"] for s in steps if s["_s"] <= t <= s["_e"]), None)
        comm = "nccl" in a["name"].lower() or "rccl" in a["name"].lower() or "Collective name" in a["args"]
        a["_cls"] = "memory" if a["cat"] != "kernel" else ("communication" if comm else "compute")
    syncs = [e for e in evs if e["cat"] == "cuda_runtime" and "Synchronize" in e["name"]]
    contexts = [e for e in evs if e["cat"] in ("cpu_op", "python_function", "user_annotation")]

    def figures(sel: list[dict]) -> dict:
        iv = {k: [(a["_s"], a["_e"]) for a in sel if a["_cls"] == k] for k in ("compute", "communication", "memory")}
        allv = [(a["_s"], a["_e"]) for a in sel]
        first, last = min(s for s, _ in allv), max(e for _, e in allv)
        merged = _merge(allv)
        gaps = []
        for (_, e1), (s2, _) in zip(merged, merged[1:]):
            ender = min((a for a in sel if a["_s"] == s2), key=lambda a: a["_e"])
            launch = ender["_launch"]
            ctx = None
            # rule 0: the launching thread sat in a synchronize call as the GPU went idle and
            # launched again within 100 us of its return (the sync drained the queue)
            drained = [s for s in syncs if launch is not None and s["tid"] == launch["tid"] and s["_s"] <= e1 < s["_e"]
                       and launch["_s"] >= e1 and launch["_s"] - s["_e"] <= 100_000]
            if launch is None:
                cause = "unattributed"
            elif drained:
                cause = "sync_bound"
                ctx = max(drained, key=lambda c: c["_s"])["name"]
            elif launch["_s"] >= e1:
                cause = "host_bound"
                cover = [c for c in contexts if c["tid"] == launch["tid"] and c["_s"] <= e1 and c["_e"] >= s2]
                ctx = max(cover, key=lambda c: (c["_s"], -c["_e"]))["name"] if cover else None
            elif any(s["_s"] <= e1 and s["_e"] >= s2 for s in syncs):
                cause = "sync_bound"
                ctx = next(s["name"] for s in syncs if s["_s"] <= e1 and s["_e"] >= s2)
            else:
                cause = "launch_latency"
            gaps.append(([e1, s2, cause], ctx))
        overlap = _intersection(iv["compute"], iv["communication"])
        busy = _measure(allv)
        return {
            "window_ns": last - first, "busy_ns": busy, "idle_ns": last - first - busy,
            "compute_ns": _measure(iv["compute"]), "communication_ns": _measure(iv["communication"]),
            "memory_ns": _measure(iv["memory"]), "overlap_ns": overlap,
            "exposed_comm_ns": _measure(iv["communication"]) - overlap,
            "first_start_ns": first, "last_end_ns": last,
            "gaps": [g for g, _ in gaps], "contexts": [c for _, c in gaps],
        }

    overall = figures(acts)
    per_step = [dict(figures([a for a in acts if a["_step"] == s["name"]]), name=s["name"]) for s in steps]
    delays = {str(a["args"]["correlation"]): max(0, a["_s"] - a["_launch"]["_e"]) for a in acts if a["_launch"]}
    kernels: dict[str, dict[str, int]] = {}
    for a in acts:
        if a["cat"] == "kernel":
            d = a["_e"] - a["_s"]
            k = kernels.setdefault(a["name"], {"count": 0, "total_ns": 0, "min_ns": d, "max_ns": d})
            k["count"] += 1
            k["total_ns"] += d
            k["min_ns"], k["max_ns"] = min(k["min_ns"], d), max(k["max_ns"], d)
    return overall, per_step, delays, kernels


def test_events_reproduce_the_planted_truth(docs: dict, truth: dict) -> None:
    for r, doc in docs.items():
        rd = truth["ranks"][str(r)]
        overall, per_step, delays, kernels = _recount(doc)
        for got, want in [(overall, rd["overall"])] + list(zip(per_step, rd["steps"])):
            where = f"rank {r} {want.get('name', 'overall')}"
            for key in METRICS:
                assert got[key] == want[key], (where, key, got[key], want[key])
            assert got["gaps"] == want["gaps"], where
            assert got["contexts"] == [(d["cpu_context"] or {}).get("name") for d in want["gap_details"]], where
        assert [s["name"] for s in per_step] == [s["name"] for s in rd["steps"]]
        assert delays == rd["launch_delay_ns"], f"rank {r}"
        assert kernels == rd["overall"]["kernels"], f"rank {r}"


def test_straggler_arrivals_are_in_the_files(docs: dict, truth: dict) -> None:
    starts = {}
    for r, doc in docs.items():
        base = doc["baseTimeNanoseconds"]
        starts[r] = sorted(_abs_ns(base, e["ts"]) for e in doc["traceEvents"]
                           if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_AllReduce_Sum_f32_RING_LL"))
    colls = truth["straggler"]["collectives"]
    for r in docs:
        assert starts[r] == sorted(c["arrival_ns"][str(r)] for c in colls)
        ends = sorted(_abs_ns(docs[r]["baseTimeNanoseconds"], e["ts"]) + int(e["dur"] * 1000)
                      for e in docs[r]["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl"))
        assert ends == sorted(c["end_ns"] for c in colls), "all ranks finish each allreduce together"


# ---- the real CPU capture ----------------------------------------------------------------------------

def test_cpu_capture_is_a_scrubbed_profiler_trace() -> None:
    text = gzip.decompress((SAMPLE_TRACES / "torch_cpu_mlp.json.gz").read_bytes()).decode("utf-8")
    doc = json.loads(text)
    names = [e.get("name") for e in doc["traceEvents"]]
    assert {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"} <= set(names)
    assert any(e.get("cat") == "cpu_op" for e in doc["traceEvents"])
    assert not any(e.get("cat") in ACTIVITY for e in doc["traceEvents"])
    assert doc["traceName"] == "torch_cpu_mlp.json"
    for leak in ("/root", "/home/", "/work/", "/tmp/", "host_name", "hostname", "username"):
        assert leak not in text, leak
