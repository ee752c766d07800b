"""Counter (``ph: "C"``) and async (``b``/``e``, ``S``/``F``, ``n``) events are kept, not dropped
(issue 11): counters as samples in ``Trace.counters``, async pairs as duration rows of kind OTHER,
each with a fate counted in ``RankInfo.event_counts`` and a warning that says what was done."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import traceview
from builders import write_kineto
from conftest import SAMPLE_TRACES
from traceview.rank_planning import renumber_ranks
from traceview.model import Trace, concat_traces
from traceview.parsers import kineto as kp
from traceview.render import get_renderer

#: event_counts keys that annotate (not a fate of an event read)
NOT_FATES = ("events_read", "coerced", "clamped", "flows_unresolved", "times_reread_exactly", "counter_samples",
             "async_instants")


def write(tmp_path: Path, events: list[dict[str, Any]], name: str = "t.json", **top: Any) -> Path:
    return write_kineto(tmp_path / name, events, **top)


def parse(tmp_path: Path, events: list[dict[str, Any]], **top: Any) -> Trace:
    return kp.parse_kineto(write(tmp_path, events, **top))


def counts_of(tr: Trace) -> dict[str, int]:
    (info,) = tr.ranks.values()
    counts = info.event_counts
    fates = sum(v for k, v in counts.items() if not k.startswith(NOT_FATES))
    assert fates == counts["events_read"], counts
    return counts


def op(name: str, ts: float, dur: float = 1, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


# ------------------------------------------------------------------------------ counters


def test_counter_events_become_samples_with_exact_values_and_times(tmp_path: Path) -> None:
    events = [
        op("aten::mm", 10),
        {"ph": "C", "name": "memory", "pid": 1, "tid": 2, "ts": 11.125, "args": {"allocated": 1.5, "reserved": 4}},
        {"ph": "C", "name": "memory", "pid": 1, "tid": 2, "ts": 12, "args": {"allocated": 2.5, "reserved": 4}},
        {"ph": "C", "name": "queue", "id": 7, "pid": 3, "tid": 0, "ts": 13, "args": {"depth": -2}},
        {"ph": "C", "name": "big", "pid": 1, "tid": 2, "ts": 14, "args": {"n": 2**70}},
    ]
    tr = parse(tmp_path, events, baseTimeNanoseconds=1_000_000)
    got = tr.counters.to_pylist()
    assert got == [
        {"rank": -1, "pid": 1, "tid": 2, "name": "memory", "series": "allocated", "ts_ns": 1_011_125, "value": 1.5},
        {"rank": -1, "pid": 1, "tid": 2, "name": "memory", "series": "reserved", "ts_ns": 1_011_125, "value": 4.0},
        {"rank": -1, "pid": 1, "tid": 2, "name": "memory", "series": "allocated", "ts_ns": 1_012_000, "value": 2.5},
        {"rank": -1, "pid": 1, "tid": 2, "name": "memory", "series": "reserved", "ts_ns": 1_012_000, "value": 4.0},
        # the Chrome trace format: an id is part of the counter's name
        {"rank": -1, "pid": 3, "tid": 0, "name": "queue[7]", "series": "depth", "ts_ns": 1_013_000, "value": -2.0},
        {"rank": -1, "pid": 1, "tid": 2, "name": "big", "series": "n", "ts_ns": 1_014_000, "value": float(2**70)},
    ]
    assert tr.counters.schema == traceview.model.COUNTER_SCHEMA
    counts = counts_of(tr)
    assert counts["counter"] == 4 and counts["counter_samples"] == 6 and counts["mapped"] == 1
    assert tr.num_events == 1  # counters are not events
    (info,) = tr.ranks.values()
    assert "4 counter events (ph 'C') kept as 6 samples in the counters table (not as events)" in info.warnings


def test_counter_values_that_are_not_numbers_are_dropped_and_counted(tmp_path: Path) -> None:
    events = [
        {"ph": "C", "name": "mix", "pid": 1, "tid": 1, "ts": 1, "args": {"a": 1, "b": "x", "c": True, "d": None,
                                                                          "e": [1], "f": {"g": 1}}},
        {"ph": "C", "name": "text", "pid": 1, "tid": 1, "ts": 2, "args": {"a": "12"}},
        {"ph": "C", "name": "empty", "pid": 1, "tid": 1, "ts": 3, "args": {}},
        {"ph": "C", "name": "none", "pid": 1, "tid": 1, "ts": 4},
        {"ph": "C", "name": "no time", "pid": 1, "tid": 1, "args": {"a": 1}},
    ]
    tr = parse(tmp_path, events)
    assert tr.counters.to_pydict()["series"] == ["a"] and tr.counters.to_pydict()["value"] == [1.0]
    counts = counts_of(tr)
    assert counts["counter"] == 1
    assert counts["coerced_counter_arg_dropped"] == 5  # b c d e f beside the number a
    assert counts["skipped_counter_no_value"] == 3
    assert counts["skipped_no_ts"] == 1
    (info,) = tr.ranks.values()
    text = "\n".join(info.warnings)
    assert "3 counter events (ph 'C') skipped: no arg holds a finite number" in text
    assert "5 counter args that are not finite numbers dropped" in text


def test_a_counter_value_beyond_a_double_drops_only_that_value(tmp_path: Path) -> None:
    path = tmp_path / "t.json"  # 1e999 is valid JSON that no double holds (json.dumps cannot write it)
    path.write_text('{"traceEvents": [{"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 1, '
                    '"args": {"huge": 1e999, "ok": 2}}]}')
    tr = kp.parse_kineto(path)
    assert tr.counters.to_pydict()["series"] == ["ok"] and tr.counters.to_pydict()["value"] == [2.0]
    counts = counts_of(tr)
    assert counts["counter"] == 1 and counts["coerced_counter_arg_dropped"] == 1


def test_counters_survive_the_slow_path(tmp_path: Path) -> None:
    """A chunk with odd value types is coerced field by field; a counter's args keep their own
    keys and values there too (even keys that traceview's typed args would coerce)."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 1.5, "tid": 1, "ts": 1, "dur": 1},  # forces the slow path
        {"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 2, "args": {"bytes": 1.5, "device": 3, "x": "no"}},
        {"ph": "b", "cat": "a", "name": "r", "id2": {"global": "0x9"}, "pid": 1, "tid": 1, "ts": 3},
        {"ph": "e", "cat": "a", "name": "r", "id2": {"global": "0x9"}, "pid": 1, "tid": 1, "ts": 5},
    ]
    tr = parse(tmp_path, events)
    counts = counts_of(tr)
    assert counts.get("coerced_field_to_text", 0) >= 1  # the slow path ran
    assert tr.counters.to_pydict()["series"] == ["bytes", "device"]
    assert tr.counters.to_pydict()["value"] == [1.5, 3.0]
    assert counts["coerced_counter_arg_dropped"] == 1
    assert counts["async_paired_end"] == 1
    assert sorted(tr.events.column("dur_ns").to_pylist()) == [1000, 2000]


# ------------------------------------------------------------------------------ async events


def test_async_pairs_become_other_durations_in_stack_order(tmp_path: Path) -> None:
    a = {"cat": "kernel", "name": "req", "id": "0x1", "pid": 1}  # a GPU category: still kind OTHER
    events = [
        op("aten::mm", 1, 100),
        {**a, "ph": "b", "tid": 1, "ts": 10},
        {**a, "ph": "b", "tid": 2, "ts": 12},  # nested on the same id: tid is not part of the key
        {**a, "ph": "e", "tid": 1, "ts": 15},  # closes the latest open (ts 12)
        {**a, "ph": "e", "tid": 1, "ts": 30.5},  # closes ts 10
        {**a, "ph": "e", "tid": 1, "ts": 31},  # nothing open: skipped
        {"ph": "b", "cat": "kernel", "name": "req", "id": "0x2", "pid": 1, "tid": 1, "ts": 11},  # never ends
        {"ph": "S", "cat": "legacy", "name": "load", "id": 5, "pid": 1, "tid": 1, "ts": 40},
        {"ph": "T", "cat": "legacy", "name": "load", "id": 5, "pid": 1, "tid": 1, "ts": 41},
        {"ph": "p", "cat": "legacy", "name": "load", "id": 5, "pid": 1, "tid": 1, "ts": 42},
        {"ph": "F", "cat": "legacy", "name": "load", "id": 5, "pid": 1, "tid": 1, "ts": 47},
        {"ph": "b", "cat": "s", "name": "x", "id2": {"local": "0x3"}, "pid": 1, "tid": 1, "ts": 50},
        {"ph": "b", "cat": "s", "name": "x", "id2": {"global": "0x3"}, "pid": 1, "tid": 1, "ts": 51},
        {"ph": "e", "cat": "s", "name": "x", "id2": {"local": "0x3"}, "pid": 1, "tid": 1, "ts": 60},  # ts 50's
        {"ph": "e", "cat": "s", "name": "x", "id2": {"global": "0x3"}, "pid": 1, "tid": 1, "ts": 52},  # ts 51's
        {"ph": "n", "cat": "mark", "name": "hit", "id": 1, "pid": 1, "tid": 1, "ts": 55, "dur": 9},
    ]
    tr = parse(tmp_path, events)
    df = tr.events.to_pandas()[["kind", "category", "name", "start_ns", "dur_ns"]]
    rows = sorted(map(tuple, df.astype({"kind": str, "category": str}).itertuples(index=False)), key=lambda r: r[3])
    assert rows == [
        ("cpu_op", "cpu_op", "aten::mm", 1000, 100_000),
        ("other", "kernel", "req", 10_000, 20_500),
        ("other", "kernel", "req", 12_000, 3_000),
        ("other", "legacy", "load", 40_000, 7_000),
        ("other", "s", "x", 50_000, 10_000),
        ("other", "s", "x", 51_000, 1_000),
        ("other", "mark", "hit", 55_000, 0),
    ]
    counts = counts_of(tr)
    assert counts["async_paired_end"] == 5 and counts["async_instants"] == 1
    assert counts["skipped_async_unmatched_end"] == 1 and counts["skipped_async_unmatched_begin"] == 1
    assert counts["skipped_async_step"] == 2
    assert "skipped_unmatched_begin" not in counts  # B/E accounting is apart
    (info,) = tr.ranks.values()
    assert info.unmapped == {}  # kind OTHER by phase: not an unmapped category
    text = "\n".join(info.warnings)
    for line in ("5 async b/e (or S/F) pairs kept as kind 'other' duration events (category as given)",
                 "1 async instants (ph 'n') kept as kind 'other' instant events",
                 "1 async end events (ph 'e'/'F') skipped: no open begin",
                 "1 async begin events (ph 'b'/'S') skipped: no matching end",
                 "2 async step events (ph 'T'/'p') skipped"):
        assert line in text, line


def test_begin_end_pairs_still_pair_per_thread(tmp_path: Path) -> None:
    events = [
        {"ph": "B", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "B", "cat": "cpu_op", "name": "inner", "pid": 1, "tid": 1, "ts": 2},
        {"ph": "B", "cat": "cpu_op", "name": "other thread", "pid": 1, "tid": 2, "ts": 2},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 4},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 9},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 10},
    ]
    tr = parse(tmp_path, events)
    durs = dict(zip(tr.events.column("name").to_pylist(), tr.events.column("dur_ns").to_pylist()))
    assert durs == {"outer": 8000, "inner": 2000}
    counts = counts_of(tr)
    assert counts["paired_end"] == 2 and counts["skipped_unmatched_end"] == 1
    assert counts["skipped_unmatched_begin"] == 1


def _reference_pairs(track: list[int], ts: list[int], is_begin: list[bool]) -> tuple[set, set, set]:
    """The Chrome rule, one event at a time: each end closes its track's latest open begin."""
    order = sorted(range(len(track)), key=lambda i: (track[i], ts[i], i))
    stacks: dict[int, list[int]] = {}
    pairs, unmatched = set(), set()
    for i in order:
        if is_begin[i]:
            stacks.setdefault(track[i], []).append(i)
        elif stacks.get(track[i]):
            pairs.add((stacks[track[i]].pop(), i))
        else:
            unmatched.add(i)
    return pairs, unmatched, {i for s in stacks.values() for i in s}


@pytest.mark.parametrize("seed", range(40))
def test_stack_pairs_matches_the_one_at_a_time_rule(seed: int) -> None:
    rnd = random.Random(seed)
    n = rnd.randint(0, 60)
    track = [rnd.randint(0, 3) for _ in range(n)]
    ts = [rnd.randint(0, 10) for _ in range(n)]  # many ties: file order decides
    is_begin = [rnd.random() < 0.55 for _ in range(n)]
    opened, closed, unmatched, never = kp.stack_pairs(np.array(track, dtype=np.int64), np.array(ts, dtype=np.int64),
                                                      np.arange(n, dtype=np.int64), np.array(is_begin, dtype=bool))
    pairs, ref_unmatched, ref_never = _reference_pairs(track, ts, is_begin)
    assert set(zip(opened.tolist(), closed.tolist())) == pairs
    assert set(unmatched.tolist()) == ref_unmatched and set(never.tolist()) == ref_never


# ------------------------------------------------------------------------------ the model around it


def test_cache_round_trip_keeps_counters(tmp_path: Path) -> None:
    path = write(tmp_path, [op("a", 1), {"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 2, "args": {"v": 3}}],
                 name="rank2.json")
    first = traceview.load(path)  # parses, writes the cache
    second = traceview.load(path)  # reads the cache
    assert first.counters.num_rows == 1
    assert second.counters.equals(first.counters)
    assert second.counters.to_pydict()["rank"] == [2]


def test_ranks_renumbered_and_concatenated_keep_counters(tmp_path: Path) -> None:
    traces = [parse(tmp_path, [op("a", 1), {"ph": "C", "name": f"c{r}", "pid": 1, "tid": 1, "ts": 2,
                                            "args": {"v": r}}]) for r in range(2)]
    merged = concat_traces([renumber_ranks(tr, {-1: r}) for r, tr in enumerate(traces)])
    assert merged.counters.to_pydict()["rank"] == [0, 1]
    assert merged.counters.to_pydict()["name"] == ["c0", "c1"]


def test_app_subset_keeps_the_counters_of_the_chosen_ranks(tmp_path: Path) -> None:
    from traceview.app.filters import Filters, step_info, subset_trace

    for r in range(2):
        write(tmp_path, [op("a", 1), {"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 2, "args": {"v": r}}],
              name=f"rank{r}.json")
    tr = traceview.load(tmp_path, use_cache=False)
    sub = subset_trace(tr, Filters(ranks=(1,)), step_info(tr))
    assert sub.counters.to_pydict()["value"] == [1.0]


# ------------------------------------------------------------------------------ reports


def _sample_events() -> dict[str, Any]:
    with gzip.open(SAMPLE_TRACES / "synthetic_4rank" / "rank0.json.gz", "rt") as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def _with_async_and_counters(doc: dict[str, Any]) -> dict[str, Any]:
    """The same trace plus async pairs, async instants and counters inside its span, on its CPU
    threads and with categories of real activity (they must stay kind OTHER)."""
    timed = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + e.get("dur", 0) for e in timed)
    pid, tid = timed[0]["pid"], timed[0]["tid"]
    extra: list[dict[str, Any]] = []
    for i in range(20):
        ts = t0 + (t1 - t0) * i / 20
        for cat in ("cpu_op", "kernel", "cuda_runtime", "user_annotation"):
            key = {"cat": cat, "name": "ProfilerStep#99", "id": i, "pid": pid, "tid": tid}
            extra += [{**key, "ph": "b", "ts": ts}, {**key, "ph": "e", "ts": ts + (t1 - t0) / 40}]
        extra.append({"ph": "n", "cat": "kernel", "name": "mark", "id": i, "pid": pid, "tid": tid, "ts": ts})
        extra.append({"ph": "C", "name": "queue", "pid": pid, "tid": tid, "ts": ts, "args": {"a": i, "b": 2 * i}})
    return {**doc, "traceEvents": doc["traceEvents"] + extra}


def _tables(report: Any) -> dict[str, pd.DataFrame]:
    """Every analysis table; categorical columns as their values (the added events add names to
    the dictionaries, never to the values)."""
    return {f"{a}/{name}": df.apply(lambda c: c.astype(object) if isinstance(c.dtype, pd.CategoricalDtype) else c)
            for a, result in report.results.items() for name, df in result.tables.items() if df is not None}


def test_async_events_and_counters_change_no_analysis_table(tmp_path: Path) -> None:
    doc = _sample_events()
    (tmp_path / "base").mkdir()
    (tmp_path / "more").mkdir()
    base_path = tmp_path / "base" / "rank0.json"
    more_path = tmp_path / "more" / "rank0.json"
    base_path.write_text(json.dumps(doc))
    more_path.write_text(json.dumps(_with_async_and_counters(doc)))
    base = traceview.analyze(base_path, use_cache=False)
    more = traceview.analyze(more_path, use_cache=False)
    more_counts = more["ranks"][0]["event_counts"]
    assert more_counts["async_paired_end"] == 80 and more_counts["counter"] == 20
    base_tables, more_tables = _tables(base), _tables(more)
    assert base_tables.keys() == more_tables.keys()
    for key, df in base_tables.items():
        pd.testing.assert_frame_equal(df.reset_index(drop=True), more_tables[key].reset_index(drop=True), obj=key)
    assert base["findings"] == more["findings"]


def test_the_fate_sentences_reach_every_format(tmp_path: Path) -> None:
    path = write(tmp_path, [
        op("a", 1, 10),
        {"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 2, "args": {"v": 3, "w": 4}},
        {"ph": "b", "cat": "x", "name": "r", "id": 1, "pid": 1, "tid": 1, "ts": 3},
        {"ph": "e", "cat": "x", "name": "r", "id": 1, "pid": 1, "tid": 1, "ts": 4},
    ], name="rank0.json")
    report = traceview.analyze(path, use_cache=False)
    for fmt in ("markdown", "html", "json"):
        out = get_renderer(fmt)().render(report)
        for sentence in ("1 counter events (ph 'C') kept as 2 samples", "1 async b/e (or S/F) pairs kept as kind"):
            escaped = (sentence.replace("'", "&#x27;"), sentence.replace("'", "&#39;"))
            assert sentence in out or any(e in out for e in escaped), (fmt, sentence)


def test_info_shows_counter_samples_and_series(tmp_path: Path) -> None:
    path = write(tmp_path, [op("a", 1), {"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 2, "args": {"v": 3, "w": 4}},
                            {"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 3, "args": {"v": 5}}], name="rank0.json")
    result = subprocess.run([sys.executable, "-m", "traceview.cli", "info", str(path), "--no-cache"],
                            capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
    assert result.returncode == 0, result.stderr
    assert "3 samples in 2 series of 1 counters" in result.stdout
