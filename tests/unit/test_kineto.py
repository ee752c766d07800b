"""Kineto parser: exact times, every format spelling, ranks, errors, cache, and conformance with
an independent count of every shared real trace."""

from __future__ import annotations

import collections
import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

import traceview
from builders import write_kineto
from traceview.errors import DuplicateRankError, TraceFormatError
from traceview.model import Kind
from traceview.parsers import kineto as kp
from traceview.parsers.kineto import reading as kineto_reading

from conftest import SHARED_TRACES, require_shared

KINETO_DIR = SHARED_TRACES / "kineto"

# An independent statement of which source categories are which kind (not the parser's table).
EXPECTED_KIND = {
    "kernel": "kernel", "Kernel": "kernel",
    "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
    "gpu_memset": "memset", "Memset": "memset",
    "cuda_sync": "sync",
    "cuda_runtime": "runtime", "Runtime": "runtime", "cuda_driver": "runtime",
    "xpu_runtime": "runtime", "xpu_driver": "runtime", "privateuse1_runtime": "runtime",
    "privateuse1_driver": "runtime", "mtia_runtime": "runtime",
    "cpu_op": "cpu_op", "Operator": "cpu_op",
    "python_function": "python_function",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
}


def write_trace(path: Path, events: list[dict], **top) -> Path:
    return write_kineto(path, events, indent=1, **top)


def kernel(name, ts, dur, corr, stream=7, device=0, **args):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": device, "stream": stream, "correlation": corr, **args}}


def runtime(name, ts, dur, corr, ext=-1, pid=100, tid=100, cat="cuda_runtime"):
    args = {"correlation": corr}
    if ext >= 0:
        args["External id"] = ext
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


# ------------------------------------------------------------------------------ exact times


def test_fractional_microseconds_become_exact_nanoseconds():
    # values above 2**42 us: a naive float * 1000 is off by a nanosecond for many of them
    rng = np.random.default_rng(1)
    exact = rng.integers(2**42 * 1000, 2**43 * 1000 - 1, size=200_000, dtype=np.int64)
    text = [f"{v // 1000}.{v % 1000:03d}" for v in exact.tolist()]
    floats = np.array([float(t) for t in text])
    naive = np.rint(floats * 1000).astype(np.int64)
    assert (naive != exact).any(), "the test values must be ones a float product gets wrong"
    ns, ambiguous = kp.microseconds_to_ns(floats)
    assert not ambiguous.any()
    np.testing.assert_array_equal(ns, exact)


def test_huge_fractional_timestamps_are_reread_from_text(tmp_path):
    # 1.7e15 us with a fraction: beyond what float64 holds to the nanosecond
    # written as text: Python's float repr would already have lost the digits
    text = """{"traceEvents": [
      {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1700000000000000.123, "dur": 1.5},
      {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 1700000000000001.999, "dur": 0.001},
      {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 1700000000000002.1, "dur": 2},
      {"ph": "X", "cat": "cpu_op", "name": "d", "pid": 1, "tid": 1, "ts": 1.7000000000000035e15, "dur": 0}
    ]}"""
    path = tmp_path / "t.json"
    path.write_text(text)
    tr = traceview.load(path, use_cache=False)
    assert tr.events.column("start_ns").to_pylist() == [
        1700000000000000123, 1700000000000001999, 1700000000000002100, 1700000000000003500]
    assert tr.events.column("dur_ns").to_pylist() == [1500, 1, 2000, 0]


def test_integer_and_float_timestamps_and_base_time(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "int", "pid": 1, "tid": 1, "ts": 5, "dur": 3},
        {"ph": "X", "cat": "cpu_op", "name": "float", "pid": 1, "tid": 1, "ts": 7.25, "dur": 0.5},
    ]
    path = tmp_path / "t.json"
    doc = {"schemaVersion": 1, "traceEvents": events, "traceName": "x", "baseTimeNanoseconds": 1_000_000_000}
    path.write_text(json.dumps(doc))
    tr = traceview.load(path, use_cache=False)
    assert tr.events.column("start_ns").to_pylist() == [1_000_005_000, 1_000_007_250]
    assert tr.events.column("dur_ns").to_pylist() == [3000, 500]
    assert tr.ranks[0].base_time_ns == 1_000_000_000


def test_negative_duration_is_clamped_and_warned(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 1, "tid": 1, "ts": 10, "dur": -2}]
    tr = traceview.load(write_trace(tmp_path / "t.json", events), use_cache=False)
    assert tr.events.column("dur_ns").to_pylist() == [0]
    assert any("negative" in w for w in tr.ranks[0].warnings)


# ------------------------------------------------------------------------------ mapping


def test_old_and_new_category_spellings_map_to_the_same_kinds(tmp_path):
    new = [
        kernel("k", 10, 5, 1), runtime("cudaLaunchKernel", 5, 2, 1, ext=1),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 100, "ts": 4, "dur": 5, "args": {"External id": 1}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 20, "dur": 1,
         "args": {"stream": 7, "correlation": 2, "bytes": 64, "device": 0}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 22, "dur": 1, "args": {"stream": 7, "correlation": 3}},
    ]
    old = [
        {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 10, "dur": 5, "args": {"correlation": 1}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": "100", "ts": 5, "dur": 2,
         "args": {"correlation": 1, "external id": 1}},
        {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 100, "tid": "100", "ts": 4, "dur": 5, "args": {"External id": 1}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 7", "ts": 20, "dur": 1,
         "args": {"correlation": 2, "bytes": 64}},
        {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": "stream 7", "ts": 22, "dur": 1, "args": {"correlation": 3}},
    ]
    a = traceview.load(write_trace(tmp_path / "new.json", new), use_cache=False)
    b = traceview.load(write_trace(tmp_path / "old.json", old), use_cache=False)
    for tr in (a, b):
        kinds = tr.events.column("kind").to_pylist()
        assert sorted(kinds) == sorted(["kernel", "runtime", "cpu_op", "memcpy", "memset"])
        df = tr.to_pandas()
        k = df[df.kind == "kernel"].iloc[0]
        assert (k.device, k.stream, k.correlation) == (0, 7, 1)
        m = df[df.kind == "memcpy"].iloc[0]
        assert (m.bytes, m.copy_kind) == (64, "HtoD")
        api, gpu = tr.launch_links()
        assert len(api) == 1 and df.loc[api[0], "name"] == "cudaLaunchKernel" and df.loc[gpu[0], "kind"] == "kernel"


def test_hip_triton_and_cuda_graph_launches_link_to_their_kernels(tmp_path):
    events = [
        runtime("hipLaunchKernel", 0, 2, 10),
        kernel("hip_kernel", 5, 1, 10),
        runtime("cuLaunchKernel", 10, 2, 11, cat="cuda_driver"),
        kernel("triton_poi_fused_add_0", 15, 1, 11),
        runtime("cudaGraphLaunch", 20, 3, 12),
        kernel("graph_k1", 25, 1, 12), kernel("graph_k2", 27, 1, 12), kernel("graph_k3", 29, 1, 12),
    ]
    tr = traceview.load(write_trace(tmp_path / "t.json", events), use_cache=False)
    names = np.array(tr.events.column("name").to_pylist())
    api, gpu = tr.launch_links()
    pairs = sorted(zip(names[api].tolist(), names[gpu].tolist()))
    assert pairs == [
        ("cuLaunchKernel", "triton_poi_fused_add_0"),
        ("cudaGraphLaunch", "graph_k1"), ("cudaGraphLaunch", "graph_k2"), ("cudaGraphLaunch", "graph_k3"),
        ("hipLaunchKernel", "hip_kernel"),
    ]
    cats = dict(zip(tr.events.column("name").to_pylist(), tr.events.column("category").to_pylist()))
    assert cats["cuLaunchKernel"] == "cuda_driver"


def test_unmapped_events_are_counted_not_dropped(tmp_path):
    events = [
        {"ph": "X", "cat": "mtia_ccp_events", "name": "accel op", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 2, "s": "t"},
        {"ph": "C", "name": "counter", "pid": 1, "tid": 1, "ts": 3, "args": {"v": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
    ]
    tr = traceview.load(write_trace(tmp_path / "t.json", events), use_cache=False)
    info = tr.ranks[0]
    # the allocator's [memory] instant is a row of Trace.memory, not an unmapped event
    assert info.unmapped == {"mtia_ccp_events": 1}  # kept as kind 'other': only categories are
    assert tr.num_events == 2  # the counter has no duration semantics: a sample of Trace.counters, not an event row
    assert info.event_counts["counter"] == 1 and tr.counters.num_rows == 1
    assert any("counter" in w and "samples" in w for w in info.warnings)
    assert tr.memory.num_rows == 1 and info.event_counts["memory"] == 1
    assert info.event_counts["events_read"] == 4


def test_non_gpu_accelerator_trace_loads(tmp_path):
    # an XPU-style trace: its own runtime category, kernels on device 0, no CUDA names at all
    events = [
        {"ph": "X", "cat": "xpu_runtime", "name": "urEnqueueKernelLaunch", "pid": 5, "tid": 5, "ts": 1, "dur": 2,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "gemm_xpu", "pid": 0, "tid": 1, "ts": 5, "dur": 3,
         "args": {"correlation": 1, "device": 0, "queue": 1}},
        {"ph": "X", "cat": "mtia_ccp_events", "name": "ccp", "pid": 0, "tid": 2, "ts": 9, "dur": 1},
    ]
    tr = traceview.load(write_trace(tmp_path / "xpu.json", events, deviceProperties=[]), use_cache=False)
    assert sorted(tr.events.column("kind").to_pylist()) == ["kernel", "other", "runtime"]
    assert len(tr.launch_links()[0]) == 1
    from traceview.analyses import run_all
    results = run_all(tr)
    assert "temporal" in results


def test_integers_beyond_64_bits_in_args_do_not_break_parsing(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
         "args": {"Comms Id": 2**70, "External id": 2**65, "correlation": 3}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 2, "dur": 1},
    ]
    tr = traceview.load(write_trace(tmp_path / "t.json", events), use_cache=False)
    assert tr.num_events == 2
    assert tr.events.column("external_id").to_pylist()[1] == -1


def test_collective_args_become_typed_columns(tmp_path):
    events = [{
        "ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
        "args": {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "Group size": 8,
                 "dtype": "Float", "Process Group Name": "0", "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}}]
    row = traceview.load(write_trace(tmp_path / "t.json", events), use_cache=False).to_pandas().iloc[0]
    assert (row.collective, row.msg_nelems, row.msg_bytes, row.group_size, row.msg_dtype, row.process_group) == (
        "allreduce", 1000, 4000, 8, "Float", "0")
    assert row.process_group_ranks == "[0, 1, 2, 3, 4, 5, 6, 7]"


def test_chunk_boundaries_inside_strings_and_nested_objects(tmp_path, monkeypatch):
    # tiny chunks force cuts everywhere, including inside strings that look like separators
    monkeypatch.setattr(kineto_reading, "CHUNK_BYTES", 300)
    from traceview.parsers import jsonstream

    monkeypatch.setattr(jsonstream, "READ_BYTES", 64)
    tricky = 'x"}, {"ph": "X", \\"quoted\\" \\\\'
    events = []
    for i in range(60):
        events.append({"ph": "X", "cat": "cpu_op", "name": f"{tricky}{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1,
                       "args": {"nested": [{"a": "}, {"}, {"b": [1, 2]}], "External id": i}})
    path = write_trace(tmp_path / "t.json.gz", events, deviceProperties=[{"id": 0, "name": "G"}])
    tr = traceview.load(path, use_cache=False)
    assert tr.events.column("name").to_pylist() == [e["name"] for e in events]
    assert tr.events.column("external_id").to_pylist() == list(range(60))


def test_json_array_format_and_minified_input(tmp_path):
    events = [kernel("k", 1, 1, 1), runtime("cudaLaunchKernel", 0, 1, 1)]
    path = tmp_path / "array.json"
    path.write_text(json.dumps(events, separators=(",", ":")))
    tr = traceview.load(path, use_cache=False)
    assert tr.num_events == 2 and len(tr.launch_links()[0]) == 1


# ------------------------------------------------------------------------------ ranks


def test_rank_from_distributed_info_then_file_name_then_assigned(tmp_path):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]
    d = tmp_path / "job"
    d.mkdir()
    write_trace(d / "a.json", ev, distributedInfo={"rank": 5, "world_size": 8})
    write_trace(d / "trace_rank-3.json", ev)
    write_trace(d / "worker1.json", ev)
    write_trace(d / "x_rank_2_.json", ev)
    write_trace(d / "nothing.json", ev)
    tr = traceview.load(d, use_cache=False)
    by_file = {Path(i.source_path).name: (r, i.rank_source) for r, i in tr.ranks.items()}
    assert by_file["a.json"] == (5, "distributedInfo")
    assert by_file["trace_rank-3.json"] == (3, "file name")
    assert by_file["worker1.json"] == (1, "file name")
    assert by_file["x_rank_2_.json"] == (2, "file name")
    assigned_rank, source = by_file["nothing.json"]
    assert assigned_rank not in (1, 2, 3, 5) and source.startswith("assigned")
    assert any("nothing.json" in w for w in tr.warnings)
    assert sorted(set(tr.events.column("rank").to_pylist())) == sorted(r for r, _ in by_file.values())


def test_files_without_rank_are_never_merged(tmp_path):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]
    a = write_trace(tmp_path / "a.json", ev)
    b = write_trace(tmp_path / "b.json", ev)
    tr = traceview.load([a, b], use_cache=False)
    assert len(tr.ranks) == 2


def test_duplicate_ranks_name_both_files(tmp_path):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]
    a = write_trace(tmp_path / "a.json", ev, distributedInfo={"rank": 0})
    b = write_trace(tmp_path / "b.json", ev, distributedInfo={"rank": 0})
    with pytest.raises(DuplicateRankError) as err:
        traceview.load([a, b], use_cache=False)
    assert "a.json" in str(err.value) and "b.json" in str(err.value)


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"", "empty"),
        (b"hello world", "not a trace"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1', "truncated"),
        (b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "a"}], "x": ', "truncated"),
        (b'{"schemaVersion": 1}', "no traceEvents"),
        (gzip.compress(b'{"traceEvents": []}', mtime=0)[:-12], "gzip"),
        (b"\x1f\x8b\x08\x00garbage-garbage-garbage", "gzip"),
    ],
)
def test_bad_input_raises_one_clear_error(tmp_path, content, expected):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError) as err:
        traceview.load(path, use_cache=False)
    assert str(path) in str(err.value)
    assert expected in str(err.value)


def test_missing_file_error(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file"):
        traceview.load(tmp_path / "missing.json")


# ------------------------------------------------------------------------------ cache


def test_cache_round_trip_is_identical_and_invalidated_by_change(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path / "cache"))
    events = [kernel("k", 10, 5, 1), runtime("cudaLaunchKernel", 5, 2, 1)]
    path = write_trace(tmp_path / "t.json", events, distributedInfo={"rank": 2})
    first = traceview.load(path)
    assert list((tmp_path / "cache").glob("*.arrow"))
    second = traceview.load(path)
    assert second.events.equals(first.events)
    assert second.links.equals(first.links)
    assert second.ranks[2].rank_source == "distributedInfo"
    # rewrite with different content: the cache must not serve the old events
    events[0]["dur"] = 9
    write_trace(path, events, distributedInfo={"rank": 2})
    os.utime(path, ns=(1, 1))
    third = traceview.load(path)
    assert third.events.column("dur_ns").to_pylist()[0] == 9000


def test_cache_key_changes_with_the_parser_code(tmp_path, monkeypatch):
    """A parser edited or rebuilt in place (an editable install): the old Trace is not read back."""
    from traceview import trace_cache

    path = write_trace(tmp_path / "t.json", [kernel("k", 10, 5, 1)])
    before = trace_cache.cache_key(path)
    assert trace_cache.cache_key(path) == before
    monkeypatch.setattr(trace_cache, "parser_fingerprint", lambda: "another parser")
    assert trace_cache.cache_key(path) != before


def test_the_parser_fingerprint_covers_the_parsers_subpackages():
    """An edit to any module of a parser's subpackage (parsers/kineto/...) reaches the fingerprint."""
    import traceview.parsers as parsers
    from traceview import trace_cache

    folder = Path(parsers.__file__).parent
    nested = [p for p in folder.rglob("*.py") if p.parent != folder]
    assert nested, "no parser subpackage to check"
    before = trace_cache.parser_fingerprint()
    trace_cache.parser_fingerprint.cache_clear()
    st = nested[0].stat()
    try:
        os.utime(nested[0], ns=(st.st_atime_ns, st.st_mtime_ns + 1000))
        assert trace_cache.parser_fingerprint() != before
    finally:
        os.utime(nested[0], ns=(st.st_atime_ns, st.st_mtime_ns))
        trace_cache.parser_fingerprint.cache_clear()


# ------------------------------------------------------------------------------ real traces


def _independent_counts(path: Path) -> tuple[collections.Counter, int, int]:
    """(kinds of the event rows, event rows, allocator [memory] instants, which are not event rows)."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    kinds: collections.Counter = collections.Counter()
    rows = memory = 0
    for ev in events:
        if ev.get("ph") in ("i", "I") and ev.get("name") == "[memory]":
            memory += 1
        elif ev.get("ph") in ("X", "i", "I"):
            rows += 1
            kinds[EXPECTED_KIND.get(ev.get("cat", ""), "other")] += 1
    return kinds, rows, memory


@pytest.mark.parametrize(
    "name",
    sorted(str(p.relative_to(KINETO_DIR)) for p in KINETO_DIR.rglob("*.json.gz")) if KINETO_DIR.exists() else ["(none)"],
)
def test_every_shared_kineto_trace_matches_an_independent_count(name):
    require_shared()
    path = KINETO_DIR / name
    expected, rows, memory = _independent_counts(path)
    tr = traceview.load(path, use_cache=False)
    got = collections.Counter(tr.events.column("kind").to_pylist())
    assert tr.num_events == rows
    assert got == expected
    assert tr.memory.num_rows == memory
    # exactness: every start is the file's decimal us value * 1000 + base time, checked on a sample
    info = next(iter(tr.ranks.values()))
    assert (tr.events.column("dur_ns").to_numpy() >= 0).all()
    assert info.source_format == "kineto"


def test_real_trace_times_are_exact_against_the_text():
    require_shared()
    path = KINETO_DIR / "hta_nccl_parser_config_a100.json.gz"
    with gzip.open(path, "rb") as f:
        text = f.read().decode()
    doc = json.loads(text, parse_float=lambda s: s, parse_int=lambda s: s)  # keep the decimal text
    base = int(doc.get("baseTimeNanoseconds", "0"))
    expected = []
    for ev in doc["traceEvents"]:
        if ev.get("ph") in ("X", "i", "I"):
            whole, _, frac = ev["ts"].partition(".")
            expected.append(base + int(whole) * 1000 + int((frac + "000")[:3]))
    tr = traceview.load(path, use_cache=False)
    assert sorted(tr.events.column("start_ns").to_pylist()) == sorted(expected)


def test_real_rank_sources():
    require_shared()
    tr = traceview.load(KINETO_DIR / "hta_trace_filter_2ranks", use_cache=False)
    assert sorted(tr.ranks) == [0, 1]
    tr = traceview.load(KINETO_DIR / "hta_rank_not_found.json.gz", use_cache=False)
    assert next(iter(tr.ranks.values())).rank_source.startswith("assigned")
    tr = traceview.load(KINETO_DIR / "param_dlrm_8ranks_v100", use_cache=False)
    assert sorted(tr.ranks) == list(range(8))
    assert all(i.world_size == 8 for i in tr.ranks.values())


def test_cuda_graph_launch_fans_out_in_the_vllm_trace():
    require_shared()
    tr = traceview.load(KINETO_DIR / "tracelens_vllm_piecewise_cudagraph.json.gz", use_cache=False)
    names = np.array(tr.events.column("name").to_pylist(), dtype=object)
    api, gpu = tr.launch_links()
    graph = names[api] == "hipGraphLaunch"
    graph |= names[api] == "cudaGraphLaunch"
    assert graph.any()
    per_call = collections.Counter(api[graph].tolist())
    assert max(per_call.values()) > 1


def test_kind_codes_are_stable():
    assert [k.name.lower() for k in Kind][:3] == ["kernel", "memcpy", "memset"]


def test_several_nsys_exports_get_distinct_ranks(tmp_path):
    sample = Path(__file__).resolve().parents[2] / "sample_traces" / "synthetic_nsys.sqlite"
    a = tmp_path / "node0.sqlite"
    b = tmp_path / "node1.sqlite"
    a.write_bytes(sample.read_bytes())
    b.write_bytes(sample.read_bytes())
    single = traceview.load(a, use_cache=False)
    both = traceview.load([a, b], use_cache=False)
    assert len(both.ranks) == 2 * len(single.ranks)
    assert sorted(both.ranks) == list(range(len(both.ranks)))
    assert sorted(set(both.events.column("rank").to_pylist())) == sorted(both.ranks)
    assert both.num_events == 2 * single.num_events


def test_cpu_op_links_need_an_enclosing_op_else_fall_back_to_the_innermost(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::outer", "pid": 1, "tid": 1, "ts": 0, "dur": 100, "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::inner", "pid": 1, "tid": 1, "ts": 10, "dur": 50, "args": {"External id": 2}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::elsewhere", "pid": 1, "tid": 1, "ts": 200, "dur": 10, "args": {"External id": 3}},
        # External id 3 names an op that does not enclose the call (ids reused): must not be trusted
        runtime("cudaLaunchKernel", 20, 5, 9, ext=3, pid=1, tid=1),
        # correct id: kept
        runtime("cudaMemcpyAsync", 30, 5, 10, ext=1, pid=1, tid=1),
        # old spelling of the key
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 70, "dur": 5,
         "args": {"correlation": 11, "external id": 1}},
    ]
    tr = traceview.load(write_trace(tmp_path / "t.json", events), use_cache=False)
    names = tr.events.column("name").to_pylist()
    starts = tr.events.column("start_ns").to_pylist()
    op_rows, rt_rows = tr.cpu_op_links()
    got = sorted((starts[r], names[o]) for o, r in zip(op_rows.tolist(), rt_rows.tolist()))
    assert got == [(20_000, "aten::inner"), (30_000, "aten::outer"), (70_000, "aten::outer")]
    cats = tr.links.to_pandas().query("type == 'cpu_op'").category.tolist()
    assert sorted(cats) == ["enclosing", "external_id", "external_id"]
