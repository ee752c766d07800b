"""Kineto parser on bad, odd and hostile input (issue 11): every event read has one fate (mapped, or
skipped with a counted reason), out-of-range values are dropped or clamped with a count, and input
that cannot be read is one clear error (exit 2), never an internal error."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import traceview
from builders import kineto_bytes
from traceview.errors import TraceFormatError
from traceview.parsers import kineto as kp
from traceview.parsers.kineto import reading as kineto_reading

#: The event counts that are fates (each event read has exactly one); the others count coercions.
NOT_FATES = ("events_read", "coerced", "flows_unresolved", "times_reread_exactly", "clamped", "counter_samples",
             "async_instants")


def kernel(name: str, ts: Any, dur: Any = 5, corr: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr, **args}}


def op(name: str, ts: Any, dur: Any = 5, tid: int = 1, **extra: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 0, "tid": tid, "ts": ts, "dur": dur, **extra}


def doc_bytes(events: list[Any], **top: Any) -> bytes:
    return kineto_bytes(events, **top)


def load_bytes(tmp_path: Path, data: bytes, name: str = "t.json") -> traceview.Trace:
    path = tmp_path / name
    path.write_bytes(data)
    return kp.parse_kineto(path)


def load(tmp_path: Path, events: list[Any], **top: Any) -> traceview.Trace:
    return load_bytes(tmp_path, doc_bytes(events, **top))


def fates(counts: dict[str, int]) -> int:
    return sum(v for k, v in counts.items() if not k.startswith(NOT_FATES))


def only_info(tr: traceview.Trace) -> Any:
    (info,) = tr.ranks.values()
    assert fates(info.event_counts) == info.event_counts["events_read"], info.event_counts
    return info


def starts(tr: traceview.Trace) -> list[int]:
    return sorted(tr.events.column("start_ns").to_pylist())


# ------------------------------------------------------------------------------ encodings


@pytest.mark.parametrize("raw_name", [b"k\xff", "caf\xe9".encode("latin-1"), b"\xe2\x82"])
def test_invalid_utf8_is_replaced_and_counted(tmp_path, raw_name):
    data = doc_bytes([kernel("PLACEHOLDER", 10), kernel("b", 20)]).replace(b"PLACEHOLDER", raw_name)
    info = only_info(load_bytes(tmp_path, data))
    tr = load_bytes(tmp_path, data)
    assert "\ufffd" in tr.events.column("name").to_pylist()[0]
    assert info.event_counts["coerced_invalid_utf8"] >= 1
    assert any("UTF-8" in w for w in info.warnings)


def test_invalid_utf8_across_a_block_boundary_keeps_valid_characters(tmp_path, monkeypatch):
    from traceview.parsers import jsonstream

    monkeypatch.setattr(jsonstream, "READ_BYTES", 7)  # cuts multi-byte characters in two
    names = ["h\u00e9llo\u4e16\u754c", "\u00e9" * 9]
    tr = load(tmp_path, [kernel(names[0], 10), kernel(names[1], 20)])
    assert tr.events.column("name").to_pylist() == names
    assert "coerced_invalid_utf8" not in only_info(tr).event_counts


def test_utf8_byte_order_mark_is_accepted(tmp_path):
    tr = load_bytes(tmp_path, b"\xef\xbb\xbf" + doc_bytes([kernel("a", 10)]))
    assert tr.num_events == 1
    assert kp.FORMAT.sniff(Path("x.json"), b"\xef\xbb\xbf{")


# ------------------------------------------------------------------------------ structure


def test_backslash_at_the_end_of_a_metadata_string(tmp_path):
    tr = load(tmp_path, [kernel("a", 10)], baseDir="C:\\runs\\", other="\\\"")
    assert tr.num_events == 1
    assert only_info(tr).raw_metadata["baseDir"] == "C:\\runs\\"


def test_decoy_event_arrays_in_metadata_are_not_the_events(tmp_path):
    decoys = [{"traceEvents": []} for _ in range(3)]
    tr = load(tmp_path, [kernel("a", 10)], decoys=decoys, text='"traceEvents": [')
    assert tr.num_events == 1


def test_key_scan_is_linear_in_the_number_of_decoys():
    import re
    import time

    from traceview.parsers.jsonstream import find_top_level_key

    pattern = re.compile(rb'"traceEvents"\s*:\s*\[')

    def seconds(n: int) -> float:
        head = b'{"m": [' + b",".join([b'{"traceEvents": []}'] * n) + b'], "traceEvents": ['
        t0 = time.perf_counter()
        assert find_top_level_key(head, pattern) == len(head)
        return time.perf_counter() - t0

    seconds(100)
    # quadratic before (a full scan per look-alike): 20,000 decoys took minutes
    assert seconds(20_000) < 2.0


def test_second_top_level_trace_events_array_is_read_and_said(tmp_path):
    text = doc_bytes([kernel("a", 10)])[:-1] + b', "traceEvents": [' + json.dumps(kernel("b", 30)).encode() + b"]}"
    tr = load_bytes(tmp_path, text)
    info = only_info(tr)
    assert sorted(tr.events.column("name").to_pylist()) == ["a", "b"]
    assert any("second top-level traceEvents" in w for w in info.warnings)


@pytest.mark.parametrize("closed", [True, False])
def test_chrome_json_array_format_with_or_without_closing_bracket(tmp_path, closed):
    body = "[" + ",\n".join(json.dumps(e) for e in [kernel("a", 10), kernel("b", 20)])
    tr = load_bytes(tmp_path, (body + ("]" if closed else ",\n")).encode())
    assert tr.events.column("name").to_pylist() == ["a", "b"]


def test_non_object_entries_are_skipped_and_counted(tmp_path):
    tr = load(tmp_path, [kernel("a", 10), 1, "x", None, [2], kernel("b", 20)])
    info = only_info(tr)
    assert tr.num_events == 2
    assert info.event_counts["skipped_not_an_object"] == 4


def test_array_of_numbers_is_one_clear_answer(tmp_path):
    # not an empty trace (issue 30): a document without a single event object is not a trace
    with pytest.raises(TraceFormatError, match="not a trace: none of its 3 entries is an event object"):
        load_bytes(tmp_path, b"[1, 2, 3]")
    tr = load_bytes(tmp_path, b'[1, 2, {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}]')
    assert only_info(tr).event_counts["skipped_not_an_object"] == 2


def test_header_only_gzip_says_it_holds_no_data(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b"")[:10])
    with pytest.raises(TraceFormatError, match="no data") as err:
        kp.parse_kineto(path)
    assert "empty" not in str(err.value)
    path.write_bytes(gzip.compress(b""))
    with pytest.raises(TraceFormatError, match="no data"):
        kp.parse_kineto(path)


def test_args_nested_ten_thousand_deep_skips_that_event(tmp_path):
    deep = "[" * 10_000 + "]" * 10_000
    text = doc_bytes([kernel("a", 10), "DEEP", kernel("b", 20)]).replace(
        b'"DEEP"', b'{"ph": "X", "cat": "cpu_op", "name": "d", "ts": 1, "dur": 1, "args": {"x": ' + deep.encode() + b"}}")
    tr = load_bytes(tmp_path, text)
    assert sorted(tr.events.column("name").to_pylist()) == ["a", "b"]
    assert only_info(tr).event_counts["skipped_nested_too_deep"] == 1


# ------------------------------------------------------------------------------ value types and ranges


@pytest.mark.parametrize("ts, reason", [
    (None, "skipped_no_ts"), ("abc", "skipped_no_ts"), ("MISSING", "skipped_no_ts"),
    (1e308, "skipped_ts_out_of_range"), (2**63, "skipped_ts_out_of_range"), (2**60, "skipped_ts_out_of_range"),
    (-(2**62), "skipped_ts_out_of_range"),
])
def test_bad_timestamps_skip_the_event_not_put_it_at_zero(tmp_path, ts, reason):
    bad = op("bad", ts)
    if ts == "MISSING":
        del bad["ts"]
    tr = load(tmp_path, [kernel("a", 10), bad, kernel("b", 20)])
    info = only_info(tr)
    assert starts(tr) == [10_000, 20_000]
    assert info.event_counts[reason] == 1
    assert any("skipped" in w for w in info.warnings)


@pytest.mark.parametrize("dur, reason, rows", [
    ("abc", "coerced_dur_not_a_number", 3), (None, "coerced_dur_not_a_number", 3),
    (1e308, "skipped_dur_out_of_range", 2), (2**63, "skipped_dur_out_of_range", 2),
])
def test_bad_durations_are_counted(tmp_path, dur, reason, rows):
    tr = load(tmp_path, [kernel("a", 10), op("bad", 15, dur), kernel("b", 20)])
    info = only_info(tr)
    assert tr.num_events == rows
    assert info.event_counts[reason] == 1
    assert (tr.events.column("dur_ns").to_numpy() >= 0).all()


def test_times_never_wrap_int64(tmp_path):
    # integer microseconds whose nanoseconds overflow int64 (they wrapped to a negative start)
    tr = load(tmp_path, [kernel("a", 10), kernel("b", 2**54), kernel("c", 20, dur=2**54)])
    assert starts(tr) == [10_000]
    assert only_info(tr).event_counts["skipped_ts_out_of_range"] == 1


def test_ids_beyond_64_bits_get_their_own_ids(tmp_path):
    events = [kernel("a", 10), {**op("o", 11), "pid": 2**65, "tid": -(2**70)}, {**op("p", 12), "pid": 2**65}]
    tr = load(tmp_path, events)
    info = only_info(tr)
    assert tr.num_events == 3
    pid = tr.events.column("pid").to_pylist()
    assert pid[1] == pid[2] != pid[0]
    assert info.event_counts["coerced_id_beyond_64_bits"] == 3


@pytest.mark.parametrize("args, counted", [
    ({"grid": [2**63, 1, 1]}, "clamped_launch_dims"),
    ({"grid": [2**40, 1, 1], "block": [1, 2**31, 1]}, "clamped_launch_dims"),
    ({"correlation": "abc"}, "coerced_arg_not_a_number"),
    ({"stream": 2**63}, "coerced_arg_out_of_range"),
    ({"stream": 2**70}, "coerced_arg_out_of_range"),
    ({"Collective name": "allreduce", "In msg nelems": 2**63, "Group size": 2**63, "dtype": "float"},
     "coerced_arg_out_of_range"),
    ({"Collective name": "allreduce", "In msg nelems": 2**62, "Group size": 2**40, "dtype": "double"},
     "clamped_collective_values"),
    ({"Collective name": "allreduce", "Process Group Ranks": {"a": 1}}, "coerced_arg_to_text"),
    ({"Collective name": "allreduce", "Process Group Ranks": [1, "x", None]}, "coerced_arg_to_text"),
    ({"Collective name": "allreduce", "Process Group Ranks": 7}, "coerced_arg_to_text"),
])
def test_out_of_range_and_odd_args_are_counted_and_said(tmp_path, args, counted):
    tr = load(tmp_path, [kernel("a", 10), kernel("nccl", 12, **args), kernel("b", 20)])
    info = only_info(tr)
    assert tr.num_events == 3 and info.event_counts[counted] >= 1
    assert any(w for w in info.warnings if "arg" in w or "launch" in w or "collective" in w)
    for col in ("grid_x", "block_y", "group_size", "msg_nelems", "msg_bytes"):
        values = [v for v in tr.events.column(col).to_pylist() if v is not None]
        assert all(v >= 0 for v in values), col


def test_args_null_is_no_args(tmp_path):
    tr = load(tmp_path, [kernel("a", 10), op("o", 11, args=None)])
    assert tr.num_events == 2


@pytest.mark.parametrize("top, warned", [
    ({"distributedInfo": {"rank": 2**31}}, "rank"),
    ({"distributedInfo": {"rank": -5}}, "rank"),
    ({"baseTimeNanoseconds": 1e308}, "baseTimeNanoseconds"),
    ({"baseTimeNanoseconds": 2**63}, "baseTimeNanoseconds"),
    ({"deviceProperties": 5}, "deviceProperties"),
    ({"deviceProperties": [{"id": "gpu0", "name": "A"}, {"id": None}, {"id": 2**70}, 7]}, "deviceProperties"),
])
def test_odd_metadata_is_ignored_with_a_warning(tmp_path, top, warned):
    tr = load(tmp_path, [kernel("a", 10)], **top)
    info = only_info(tr)
    assert tr.num_events == 1 and starts(tr) == [10_000]
    assert any(warned in w for w in info.warnings), info.warnings
    assert 0 <= info.rank < 2**31 or info.rank == -1


# ------------------------------------------------------------------------------ Chrome phases


def test_begin_end_pairs_become_durations(tmp_path):
    events = [
        {"ph": "B", "cat": "cpu_op", "name": "outer", "pid": 0, "tid": 1, "ts": 10},
        {"ph": "B", "cat": "cpu_op", "name": "inner", "pid": 0, "tid": 1, "ts": 12},
        {"ph": "B", "cat": "cpu_op", "name": "other thread", "pid": 0, "tid": 2, "ts": 13},
        {"ph": "E", "pid": 0, "tid": 1, "ts": 15},
        {"ph": "E", "pid": 0, "tid": 1, "ts": 20},
        {"ph": "E", "pid": 0, "tid": 3, "ts": 21},  # no B on its thread
        {"ph": "B", "cat": "cpu_op", "name": "never ends", "pid": 0, "tid": 1, "ts": 30},
        {"ph": "E", "pid": 0, "tid": 2, "ts": 33},
    ]
    tr = load(tmp_path, events)
    info = only_info(tr)
    got = sorted(zip(tr.events.column("name").to_pylist(), tr.events.column("start_ns").to_pylist(),
                     tr.events.column("dur_ns").to_pylist()))
    assert got == [("inner", 12_000, 3_000), ("other thread", 13_000, 20_000), ("outer", 10_000, 10_000)]
    counts = info.event_counts
    assert counts["mapped"] == 3 and counts["paired_end"] == 3
    assert counts["skipped_unmatched_begin"] == 1 and counts["skipped_unmatched_end"] == 1
    assert "ph=B" not in info.unmapped and "ph=E" not in info.unmapped


def test_begin_end_pairs_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(kineto_reading, "CHUNK_BYTES", 256)
    events = []
    for i in range(40):
        events.append({"ph": "B", "cat": "cpu_op", "name": f"op{i}", "pid": 0, "tid": 1, "ts": 10 * i})
        events.append({"ph": "E", "pid": 0, "tid": 1, "ts": 10 * i + 4})
    tr = load(tmp_path, events)
    assert tr.num_events == 40
    assert set(tr.events.column("dur_ns").to_pylist()) == {4_000}


def test_counters_and_async_events_are_counted_and_said_exactly(tmp_path):
    events = [
        kernel("a", 10),
        {"ph": "C", "name": "mem", "pid": 0, "ts": 11, "args": {"v": 1}},
        {"ph": "b", "cat": "x", "name": "req", "id": 1, "pid": 0, "tid": 1, "ts": 12},
        {"ph": "e", "cat": "x", "name": "req", "id": 1, "pid": 0, "tid": 1, "ts": 14},
        {"ph": "Z", "name": "?", "pid": 0, "tid": 1, "ts": 15},
    ]
    tr = load(tmp_path, events)
    info = only_info(tr)
    counts = info.event_counts
    # the counter is kept as a sample, the async pair as one duration row (issue 11)
    assert counts["counter"] == 1 and counts["counter_samples"] == 1 and tr.counters.num_rows == 1
    assert counts["async_paired_end"] == 1 and tr.num_events == 2
    assert counts["skipped_unsupported_phase"] == 1
    assert info.unmapped == {}  # async rows are kind 'other' by their phase, not an unmapped category
    text = " ".join(info.warnings)
    assert "1 counter events (ph 'C') kept as 1 samples in the counters table" in text
    assert "1 async b/e (or S/F) pairs kept as kind 'other' duration events" in text
    assert "'Z'" in text


# ------------------------------------------------------------------------------ exit codes


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("data", [
    doc_bytes([kernel("k", 10)]).replace(b'"k"', b'"k\xff"'),
    doc_bytes([kernel("k", 1e308), op("o", 5, args=None), 1], deviceProperties=5,
              distributedInfo={"rank": 2**31}, baseTimeNanoseconds=1e308),
])
def test_cli_gives_an_answer_not_an_internal_error(tmp_path, data):
    path = tmp_path / "t.json"
    path.write_bytes(data)
    for args in (["info", str(path)], ["check", str(path)],
                 ["redact", str(path), "-o", str(tmp_path / "r.json")],
                 ["convert", str(path), "-o", str(tmp_path / "conv")]):
        result = run_cli(*args)
        assert result.returncode in (0, 1, 2), (args, result.stderr[-2000:])
        assert "internal error" not in result.stderr and "Traceback" not in result.stderr, args


def test_redact_of_deep_nesting_is_exit_2(tmp_path):
    path = tmp_path / "t.json"
    deep = "[" * 10_000 + "]" * 10_000
    path.write_bytes(doc_bytes([kernel("k", 10), "DEEP"]).replace(b'"DEEP"', b'{"args": {"x": ' + deep.encode() + b"}}"))
    result = run_cli("redact", str(path), "-o", str(tmp_path / "r.json"))
    assert result.returncode in (0, 2), result.stderr
    assert "internal error" not in result.stderr


def test_every_event_has_one_fate_on_a_mixed_trace(tmp_path):
    rng = np.random.default_rng(3)
    phases = ["X", "i", "B", "E", "C", "b", "e", "M", "s", "f", "Q"]
    events: list[Any] = []
    for i in range(500):
        ph = phases[int(rng.integers(len(phases)))]
        ts: Any = [10 * i, None, "x", 1e308][int(rng.integers(4))] if rng.random() < 0.2 else 10 * i
        events.append({"ph": ph, "cat": "cpu_op", "name": f"e{i % 7}", "pid": 0, "tid": int(rng.integers(3)),
                       "ts": ts, "dur": 3, "id": 1})
    events.insert(7, 42)
    info = only_info(load(tmp_path, events))
    assert info.event_counts["events_read"] == 501


@pytest.mark.parametrize("name", ["hta_triton_example_a100.json.gz", "tracelens_resnet_actckpt_mi300x_rank0.json.gz",
                                  "hta_large_integer.json.gz", "tbplugin_resnet50_oldformat_2021.json.gz"])
def test_real_traces_account_for_every_event(name):
    from conftest import SHARED_TRACES, require_shared

    require_shared()
    path = SHARED_TRACES / "kineto" / name
    info = only_info(kp.parse_kineto(path))  # asserts events_read == the sum of the fates
    assert info.event_counts["mapped"] > 0
    assert not any(k.startswith("skipped") for k in info.event_counts)


def test_odd_values_in_a_chunk_cut_inside_a_string(tmp_path, monkeypatch):
    # the first chunk holds an odd value (slow path) and its cut falls inside a name holding "},{"
    monkeypatch.setattr(kineto_reading, "CHUNK_BYTES", 200)
    events = [op("a", 10, args=None)] + [op('x"},{"y' * 4 + str(i), 20 + i) for i in range(30)]
    tr = load(tmp_path, events)
    assert tr.num_events == 31
    assert only_info(tr).event_counts["mapped"] == 31
