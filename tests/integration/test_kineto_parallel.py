"""A Kineto file parsed in byte ranges by worker processes (parsers/kineto/parallel.py) gives the
Trace and the report a one-process parse gives: every table, every event count, figure for figure.

Real files are small, so the parallel path is forced (no size threshold, ranges of a few hundred
KB): every file is cut into several ranges, both as gzip (the parent decompresses and ships text)
and as plain JSON (workers read their own ranges).
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLE_TRACES, SHARED_TRACES, require_shared
from traceview import loading, parsing
from traceview.errors import TraceFormatError
from traceview.parsers.kineto import parallel as kineto_parallel
from traceview.parsers.kineto import reading as kineto_reading
from traceview.parsers.jsonstream import structure_at
from traceview.parsers.kineto import PhaseClock, parse_kineto
from traceview.parsers.kineto.parallel import parse_parallel
from traceview.parsing import ParseHooks

TABLES = ("events", "links", "memory", "steps", "counters")
SAMPLE_KINETO = sorted(p for p in SAMPLE_TRACES.rglob("*.json.gz"))
SHARED_KINETO = sorted((SHARED_TRACES / "kineto").rglob("*.json*")) if SHARED_TRACES.exists() else []


@pytest.fixture(autouse=True)
def _gzip_in_parallel(monkeypatch: pytest.MonkeyPatch):
    # gzip files use workers only from 3 cores on (the parent decompresses): tests run them with 2
    monkeypatch.setattr(kineto_parallel, "GZIP_MIN_JOBS", 2)
    yield
    # every worker process has exited once a parse returns (a leaked one would hang the exit)
    leaked = multiprocessing.active_children()
    assert not leaked, f"worker processes still alive after the test: {leaked}"


def _ranges(path: Path) -> int:
    """A range size that cuts the file's JSON into about five ranges."""
    size = len(gzip.decompress(path.read_bytes())) if path.name.endswith(".gz") else path.stat().st_size
    return max(4096, size // 5)


def _assert_same(serial, parallel, what: str) -> None:
    for name in TABLES:
        a, b = getattr(serial, name, None), getattr(parallel, name, None)
        if a is None and b is None:
            continue
        assert a.schema.equals(b.schema), f"{what}: {name} schema differs"
        assert a.num_rows == b.num_rows, f"{what}: {name} has {a.num_rows} rows serially, {b.num_rows} in parallel"
        for column in a.column_names:
            assert a.column(column).equals(b.column(column)), f"{what}: {name}.{column} differs"
    assert serial.ranks.keys() == parallel.ranks.keys()
    for rank, info in serial.ranks.items():
        other = parallel.ranks[rank]
        assert info.event_counts == other.event_counts, what
        assert info == other, f"{what}: rank info differs"
    assert serial.warnings == parallel.warnings


def _both_ways(path: Path, tmp_path: Path) -> None:
    serial = parse_kineto(path)
    parallel = parse_parallel(path, jobs=2, min_bytes=0, range_bytes=_ranges(path))
    _assert_same(serial, parallel, f"{path.name} (gzip)")
    if path.name.endswith(".gz"):  # the same JSON as a plain file: workers read their own ranges
        plain = tmp_path / path.name.removesuffix(".gz")
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        parallel = parse_parallel(plain, jobs=2, min_bytes=0, range_bytes=_ranges(plain))
        serial_plain = parse_kineto(plain)
        _assert_same(serial_plain, parallel, f"{path.name} (plain)")


@pytest.mark.parametrize("path", SAMPLE_KINETO, ids=lambda p: str(p.relative_to(SAMPLE_TRACES)))
def test_sample_traces_same_in_parallel(path: Path, tmp_path: Path) -> None:
    _both_ways(path, tmp_path)


@pytest.mark.parametrize("path", SHARED_KINETO or [None], ids=lambda p: p.name if p else "absent")
def test_shared_traces_same_in_parallel(path: Path | None, tmp_path: Path) -> None:
    require_shared()
    if path is None:
        pytest.skip("no Kineto traces in the shared folder")
    _both_ways(path, tmp_path)


def _json_report(paths: list[str], jobs: int) -> dict:
    from traceview.pipeline import analyze
    from traceview.render import get_renderer

    trace = loading.load(paths, use_cache=False, jobs=jobs)
    return json.loads(get_renderer("json")().render(analyze(trace)))


@pytest.mark.parametrize("folder", ["synthetic_4rank", "regression_pair/new"])
def test_json_report_same_with_jobs_1_and_2(folder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [str(SAMPLE_TRACES / folder)]
    serial = _json_report(paths, jobs=1)
    # forced: files parsed side by side (several files), and each file cut into ranges (one file)
    monkeypatch.setattr(parsing, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(kineto_parallel, "MIN_RANGE_BYTES", 4096)
    assert _json_report(paths, jobs=2) == serial
    first = sorted((SAMPLE_TRACES / folder).glob("*.json.gz"))[0]
    assert _json_report([str(first)], jobs=2) == _json_report([str(first)], jobs=1)


def test_shared_job_report_same_with_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = require_shared() / "kineto" / "param_dlrm_8ranks_v100"
    if not folder.exists():
        pytest.skip(f"{folder} is absent")
    serial = _json_report([str(folder)], jobs=1)
    monkeypatch.setattr(parsing, "PARALLEL_MIN_BYTES", 0)
    assert _json_report([str(folder)], jobs=2) == serial


def _event(i: int, name: str, args: str = "{}") -> str:
    return (f'{{"ph": "X", "cat": "cpu_op", "name": {json.dumps(name)}, "pid": 1, "tid": {1 + i % 3}, '
            f'"ts": {1000 + i}.125, "dur": 0.5, "args": {args}}}')


def _write_trace(path: Path, events: list[str]) -> Path:
    path.write_text('{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(events) + '\n], "traceName": "t"}')
    return path


def test_boundary_inside_a_string_is_never_a_cut(tmp_path: Path) -> None:
    # names holding what looks like an event boundary, in every spelling JSON allows in a string
    tricky = ['a},{b', 'x},{\\"ph\\": \\"X\\"', '},\n{', '"},{"', '\\\\},{"']
    names = [json.loads(json.dumps(t)) for t in tricky]
    events = [_event(i, names[i % len(names)] * (1 + i % 4)) for i in range(3000)]
    path = _write_trace(tmp_path / "tricky.json", events)
    text = path.read_bytes()
    starts = np.array([m.start(1) for m in kineto_parallel.RANGE_START.finditer(text)], dtype=np.int64)
    in_string, depth = structure_at(text, starts)
    assert len(starts) > 0 and not in_string.any() and (depth == 2).all()  # inside traceEvents, at an event
    for range_bytes in (600, 4096, 50_000):
        _assert_same(parse_kineto(path), parse_parallel(path, jobs=2, min_bytes=0, range_bytes=range_bytes),
                     f"ranges of {range_bytes} bytes")


def test_cut_inside_an_event_falls_back_to_one_process(tmp_path: Path) -> None:
    # args holding a list of objects: a planned cut can land between two of them, inside an event
    nested = '{"shapes": [' + ",".join(f'{{"dim": {k}}}' for k in range(400)) + "]}"
    events = [_event(i, f"op{i}", nested if i % 7 == 0 else "{}") for i in range(600)]
    path = _write_trace(tmp_path / "nested.json", events)
    cuts = kineto_parallel.plan_cuts(path, 0, path.stat().st_size, 50)
    text = path.read_bytes()
    _, depth = structure_at(text, np.array(cuts, dtype=np.int64))
    assert (depth > 2).any(), "the test needs a cut inside an event"
    _assert_same(parse_kineto(path), parse_parallel(path, jobs=2, min_bytes=0, range_bytes=len(text) // 50),
                 "cuts inside events")


def test_text_ids_of_threads_same_in_parallel(tmp_path: Path) -> None:
    # text pids/tids get ids on first sight: later ranges see texts in another order
    events = [_event(i, "op").replace('"pid": 1', f'"pid": "{["Spans", "Traces", "x"][(i // 500) % 3]}"')
              .replace(f'"tid": {1 + i % 3}', f'"tid": "{["main", "stream 7", "w"][(i // 300) % 3]}"')
              for i in range(3000)]
    path = _write_trace(tmp_path / "text_ids.json", events)
    _assert_same(parse_kineto(path), parse_parallel(path, jobs=2, min_bytes=0, range_bytes=20_000), "text ids")


def test_text_ids_do_not_depend_on_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [_event(i, "op").replace('"pid": 1', f'"pid": "{["A", "B"][(i // 7) % 2]}"')
              .replace(f'"tid": {1 + i % 3}', f'"tid": "{["C", "D"][(i // 5) % 2]}"') for i in range(400)]
    path = _write_trace(tmp_path / "ids.json", events)
    whole = parse_kineto(path)
    monkeypatch.setattr(kineto_reading, "CHUNK_BYTES", 700)
    _assert_same(whole, parse_kineto(path), "small chunks")


def test_damaged_file_gives_the_serial_error(tmp_path: Path) -> None:
    events = [_event(i, f"op{i}") for i in range(2000)]
    path = _write_trace(tmp_path / "bad.json", events)
    text = path.read_text()
    middle = text.index('"name": "op1000"')
    path.write_text(text[:middle] + '"name": op1000' + text[middle + len('"name": "op1000"'):])
    with pytest.raises(TraceFormatError) as serial:
        parse_kineto(path)
    with pytest.raises(TraceFormatError) as parallel:
        parse_parallel(path, jobs=2, min_bytes=0, range_bytes=20_000)
    assert str(parallel.value) == str(serial.value)
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) * 2 // 3])
    with pytest.raises(TraceFormatError, match="truncated"):
        parse_parallel(cut, jobs=2, min_bytes=0, range_bytes=20_000)


def test_small_files_stay_in_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write_trace(tmp_path / "small.json", [_event(i, "op") for i in range(100)])

    def no_pool(*_args, **_kwargs):
        raise AssertionError("a small file started worker processes")

    monkeypatch.setattr(kineto_parallel, "ProcessPoolExecutor", no_pool)
    assert parse_parallel(path, jobs=4).events.num_rows == 100


def test_gzip_on_two_cores_stays_in_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_parallel, "GZIP_MIN_JOBS", 3)
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(_write_trace(tmp_path / "t.json", [_event(i, "op") for i in range(500)])
                                   .read_bytes()))

    def no_pool(*_args, **_kwargs):
        raise AssertionError("gzip with 2 jobs started worker processes")

    monkeypatch.setattr(kineto_parallel, "ProcessPoolExecutor", no_pool)
    assert parse_parallel(path, jobs=2, min_bytes=0).events.num_rows == 500


def test_progress_reaches_the_end(tmp_path: Path) -> None:
    path = _write_trace(tmp_path / "progress.json", [_event(i, f"op{i}") for i in range(5000)])
    seen: list[tuple[int, int]] = []
    parse_parallel(path, jobs=2, min_bytes=0, range_bytes=50_000, progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1] == path.stat().st_size
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_jobs_option(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from traceview.cli import app

    path = SAMPLE_KINETO[0]
    runner = CliRunner()
    one = runner.invoke(app, ["info", "--jobs", "1", "--no-cache", str(path)])
    two = runner.invoke(app, ["info", "-j", "2", "--no-cache", str(path)])
    assert one.exit_code == 0 and two.exit_code == 0 and one.output == two.output
    bad = runner.invoke(app, ["analyze", "--jobs", "0", str(path)])
    assert bad.exit_code == 2 and re.search(r"--jobs|-j", bad.output)


def test_every_phase_merged_across_ranges(tmp_path: Path) -> None:
    # B/E and async pairs, flows, counters, allocator events and metadata, spread over many ranges:
    # row and sequence numbers, string codes and per-chunk tables must all be renumbered
    events = ['{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "main"}}']
    for i in range(1500):
        ts = 1000 + 10 * i
        events += [_event(i, f"op{i % 37}"),
                   f'{{"ph": "B", "name": "b{i % 5}", "pid": 1, "tid": 9, "ts": {ts}}}',
                   # the end at the next begin's time: file order (``seq``) decides which comes first
                   f'{{"ph": "E", "pid": 1, "tid": 9, "ts": {ts + 10}}}' if i % 11 else
                   f'{{"ph": "E", "pid": 1, "tid": 8, "ts": {ts + 4}}}',
                   f'{{"ph": "b", "cat": "async{i % 3}", "name": "req", "id": {i % 4}, "pid": 1, "ts": {ts}}}',
                   f'{{"ph": "e", "cat": "async{i % 3}", "name": "req", "id": {i % 4}, "pid": 1, "ts": {ts + 30}}}',
                   f'{{"ph": "C", "name": "mem", "pid": 1, "ts": {ts}, "args": {{"used": {i}, "free": {2 * i}}}}}',
                   f'{{"ph": "s", "cat": "fwdbwd", "id": {i}, "pid": 1, "tid": 1, "ts": {1000 + i}.125}}',
                   f'{{"ph": "f", "cat": "fwdbwd", "id": {i}, "pid": 1, "tid": 2, "ts": {1001 + i}.125, "bp": "e"}}']
        if i % 50 == 0:
            events.append(f'{{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, '
                          f'"ts": {ts}, "args": {{"Bytes": {i}, "Total Allocated": {i * 2}, "Device Id": 0}}}}')
    path = _write_trace(tmp_path / "phases.json", events)
    serial = parse_kineto(path)
    counts = next(iter(serial.ranks.values())).event_counts
    assert counts.get("paired_end") and counts.get("memory") and counts.get("flow"), counts
    for range_bytes in (3000, 40_000):
        _assert_same(serial, parse_parallel(path, jobs=2, min_bytes=0, range_bytes=range_bytes),
                     f"ranges of {range_bytes} bytes")


def test_many_files_side_by_side_same_trace_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for rank in range(4):
        _write_trace(tmp_path / f"rank{rank}.json", [_event(i, f"op{rank}_{i % 9}") for i in range(300 + rank)])
    serial = loading.load([str(tmp_path)], use_cache=False, jobs=1)
    monkeypatch.setattr(parsing, "PARALLEL_MIN_BYTES", 0)
    _assert_same(serial, loading.load([str(tmp_path)], use_cache=False, jobs=2), "files side by side")
    text = (tmp_path / "rank2.json").read_text()
    (tmp_path / "rank2.json").write_text(text[: len(text) // 2])
    with pytest.raises(TraceFormatError) as one:
        loading.load([str(tmp_path)], use_cache=False, jobs=1)
    with pytest.raises(TraceFormatError) as two:
        loading.load([str(tmp_path)], use_cache=False, jobs=2)
    assert str(two.value) == str(one.value)


def _launches_with_dropped_rows(tmp_path: Path) -> Path:
    """CPU ops enclosing runtime calls that launch kernels, with begins that never end (rows
    dropped once the file is read) between them, over three threads."""
    events = []
    for i in range(600):
        ts, tid = 10_000 + 100 * i, 1 + i % 3
        events += [
            f'{{"ph": "X", "cat": "cpu_op", "name": "op{i % 7}", "pid": 1, "tid": {tid}, "ts": {ts}.5, "dur": 50,'
            f' "args": {{"External id": {i}}}}}',
            f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": {tid}, '
            f'"ts": {ts + 10}.25, "dur": 5, "args": {{"External id": {i + (i % 4 == 0)}, "correlation": {i}}}}}',
            f'{{"ph": "X", "cat": "kernel", "name": "k{i % 5}", "pid": 0, "tid": 7, "ts": {ts + 20}, "dur": 3,'
            f' "args": {{"correlation": {i}, "device": 0, "stream": 7}}}}',
        ]
        if i % 13 == 0:
            events.append(f'{{"ph": "B", "name": "never ends", "pid": 1, "tid": 5, "ts": {ts}}}')
    return _write_trace(tmp_path / "launches.json", events)


def test_links_made_beside_the_build_are_the_serial_ones(tmp_path: Path) -> None:
    # a parallel parse makes the CPU-op links in a helper thread from the columns as read
    # (_helper_cpu_op_links): the rows of begins that never end are dropped there as in the table
    path = _launches_with_dropped_rows(tmp_path)
    serial = parse_kineto(path)
    counts = next(iter(serial.ranks.values())).event_counts
    assert counts.get("skipped_unmatched_begin") == 47, counts
    kinds = serial.links.column("type").to_pylist()
    assert kinds.count("cpu_op") == 600 and kinds.count("launch") == 600, set(kinds)
    for range_bytes in (5000, 60_000):
        _assert_same(serial, parse_parallel(path, jobs=2, min_bytes=0, range_bytes=range_bytes),
                     f"ranges of {range_bytes} bytes")


def test_phase_clock_times_every_process(tmp_path: Path) -> None:
    path = _launches_with_dropped_rows(tmp_path)
    clock = PhaseClock()
    parse_parallel(path, jobs=2, min_bytes=0, range_bytes=20_000, clock=clock)
    assert {"parallel: parse own ranges", "build: events table", "build: links, cpu_op (helper thread)"} <= \
        clock.phases.keys(), clock.phases
    assert all(wall >= 0 and cpu >= 0 and times >= 1 and faults >= 0 for wall, cpu, times, faults in clock.phases.values())
    # the ranges workers parsed, each with its times; with the parent's, they cover the events
    assert clock.workers and all(w["parse_cpu_s"] > 0 and w["bytes"] > 0 for w in clock.workers), clock.workers
    assert all(w["parse_faults"] >= 0 and w["dump_faults"] >= 0 for w in clock.workers), clock.workers
    serial = PhaseClock()
    parse_kineto(path, clock=serial)
    assert "read and decode" in serial.phases and "build: links, cpu_op" in serial.phases and not serial.workers


def test_spools_of_dead_parses_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    """A parse killed outright (OOM killer, SIGKILL) leaves its spool in /dev/shm, which is RAM:
    the next parallel parse removes the folders whose process no longer runs."""
    import subprocess
    import sys

    from traceview.parsers.kineto.parallel import SPOOL_PREFIX, remove_orphan_spools

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # its pid names a process that has ended
    dead = tmp_path / f"{SPOOL_PREFIX}{child.pid}-abc123"
    live = tmp_path / f"{SPOOL_PREFIX}{os.getpid()}-def456"
    other = tmp_path / "traceview-parse-notapid"
    for folder in (dead, live, other):
        folder.mkdir()
        (folder / "0.pickle").write_bytes(b"x" * 1024)
    assert remove_orphan_spools(str(tmp_path)) == [dead.name]
    assert not dead.exists() and live.exists() and other.exists()
    assert remove_orphan_spools(str(tmp_path / "missing")) == []


@pytest.mark.parametrize("path", [*SAMPLE_KINETO[:2], *SHARED_KINETO[:2]], ids=lambda p: p.name)
def test_meanwhile_runs_once_while_workers_parse_and_workers_skip_pandas(path: Path, tmp_path: Path) -> None:
    # traceview analyze imports the analyses while the workers parse (ParseHooks.meanwhile):
    # the work runs once, after the workers started, and a worker forked before the parent imported
    # pandas never imports it (it would cost it ~0.25 s; kineto_parallel.arrow_without_pandas), with
    # the tables of a one-process parse. In a fresh interpreter: this one has pandas imported.
    plain = tmp_path / path.name.removesuffix(".gz")
    plain.write_bytes(gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes())
    script = f"""
import multiprocessing, sys
from pathlib import Path
from traceview import discovery
from traceview.parsing import ParseHooks
from traceview.parsers.kineto import parallel as kineto_parallel
assert "pandas" not in sys.modules, "the parser imports pandas"
discovery.registered_formats()  # every parser, as traceview analyze imports them before the parse
assert "pyarrow.compute" not in sys.modules, "pyarrow.compute (~35 ms) is imported before the workers start"
read_range = kineto_parallel.read_range
def checked(task):
    target, times = read_range(task)
    return target, {{**times, "pandas": float("pandas" in sys.modules)}}
kineto_parallel.read_range = checked
from traceview.parsers.kineto import PhaseClock, parse_kineto
clock, calls = PhaseClock(), []
def work():
    calls.append(len(multiprocessing.active_children()))
    import pandas  # noqa: F401  (what traceview analyze does meanwhile)
path = Path({str(plain)!r})
parallel = kineto_parallel.parse_parallel(path, jobs=2, min_bytes=0, range_bytes={_ranges(plain)}, clock=clock,
                                          hooks=ParseHooks(meanwhile=work))
assert calls == [1], calls
assert clock.workers and not any(w["pandas"] for w in clock.workers), clock.workers
serial = parse_kineto(path, jobs=1)
for name in {TABLES!r}:
    a, b = getattr(serial, name), getattr(parallel, name)
    assert (a is None and b is None) or a.equals(b), name
assert serial.ranks == parallel.ranks and serial.warnings == parallel.warnings
"""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_meanwhile_runs_before_a_serial_parse_and_stops_it_on_error(tmp_path: Path) -> None:
    path = _write_trace(tmp_path / "serial.json", [_event(i, f"op{i}") for i in range(200)])
    order: list[str] = []
    loading.load([path], use_cache=False, jobs=1, progress=lambda *_: order.append("parse"),
                 hooks=ParseHooks(meanwhile=lambda: order.append("work")))
    assert order[0] == "work" and order.count("work") == 1 and "parse" in order

    def fails() -> None:
        raise TraceFormatError(path, "a check of the caller's", "fix it")

    with pytest.raises(TraceFormatError, match="a check of the caller's"):
        parse_parallel(path, jobs=2, min_bytes=0, range_bytes=2_000, hooks=ParseHooks(meanwhile=fails))


def test_an_error_stops_the_workers_at_their_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # workers claim ranges one at a time: after an error in the parent they claim no further one,
    # so the error comes out without the rest of the file being parsed first
    import time

    path = _write_trace(tmp_path / "many.json", [_event(i, f"op{i}") for i in range(20_000)])
    log = tmp_path / "ranges.log"
    read_range = kineto_parallel.read_range

    def logged(task):  # runs in the (forked) worker
        answer = read_range(task)
        with open(log, "a") as fh:
            fh.write(f"{task.slot}\n")
        return answer

    monkeypatch.setattr(kineto_parallel, "read_range", logged)

    def fails() -> None:
        time.sleep(0.2)  # the worker claims and parses ranges meanwhile
        raise TraceFormatError(path, "a check of the caller's", "")

    range_bytes = 5_000
    with pytest.raises(TraceFormatError):
        parse_parallel(path, jobs=2, min_bytes=0, range_bytes=range_bytes, hooks=ParseHooks(meanwhile=fails))
    parsed = log.read_text().split() if log.exists() else []
    assert len(parsed) < path.stat().st_size // range_bytes - 10, f"the worker went on: {len(parsed)} ranges"


def test_results_round_trip_with_big_buffers_mapped_each_on_its_own(tmp_path: Path) -> None:
    import mmap

    import pyarrow as pa

    big = np.arange(100_000, dtype=np.int64)  # 800 KB: a mapping of its own
    small = np.arange(7, dtype=np.int32)
    strings = pa.array(["a", None, "ccc"] * 30_000)
    state = {"columns": {"start_ns": [big, big[:5] * 2], "tid": [small]}, "names": strings, "count": 3,
             "empty": np.zeros(0, dtype=np.int64)}
    target = str(tmp_path / "result")
    kineto_parallel.dump_result(state, target)
    back = kineto_parallel.load_result(target)
    assert np.array_equal(back["columns"]["start_ns"][0], big) and np.array_equal(back["columns"]["start_ns"][1], big[:5] * 2)
    assert np.array_equal(back["columns"]["tid"][0], small) and back["count"] == 3 and len(back["empty"]) == 0
    assert back["names"].equals(strings)
    back["columns"]["start_ns"][0][0] = -1  # private: writable, the file unchanged
    again = kineto_parallel.load_result(target)
    assert again["columns"]["start_ns"][0][0] == 0
    # a big buffer's array is on a mapping of its own (freed with it), not on one of the whole file
    base = back["columns"]["start_ns"][0].base
    while not isinstance(base, mmap.mmap):
        base = base.obj if isinstance(base, memoryview) else base.base
    assert len(base) == big.nbytes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="page faults are counted per thread on Linux")
def test_minor_page_faults_count_memory_touched_for_the_first_time() -> None:
    import mmap

    from traceview.parsers.kineto import minor_page_faults

    before_thread, before_process = minor_page_faults(thread=True), minor_page_faults()
    fresh = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        for offset in range(0, len(fresh), mmap.PAGESIZE):  # one write a page: each page faults in once
            fresh[offset] = 1
    finally:
        fresh.close()
    touched_thread, touched_process = minor_page_faults(thread=True) - before_thread, minor_page_faults() - before_process
    # 2048 pages of 4 KiB, or a few where the system backs the mapping with huge pages; counted
    # for this thread and for the process alike (the two are read one after the other)
    assert touched_thread > 0 and touched_process > 0, (touched_thread, touched_process)
