"""Regression tests of issue 11 found while integrating: the redactor's key scan and step numbers
beyond int64 (each failed before its fix)."""

from __future__ import annotations

import json
import subprocess
import sys

EVENTS = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
           "args": {"device": 0, "stream": 7, "correlation": 1}}]


def _cli(*args: str, tmp_path) -> subprocess.CompletedProcess:
    env = {"TRACEVIEW_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_redact_finds_events_after_a_string_ending_in_a_backslash(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"dir": "C:\\runs\\", "traceEvents": EVENTS}))
    out = tmp_path / "o.json"
    r = _cli("redact", str(path), "-o", str(out), tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["traceEvents"][0]["name"] == "k"


def test_a_step_number_beyond_int64_does_not_crash(tmp_path):
    path = tmp_path / "t.json"
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#99999999999999999999", "pid": 1, "tid": 1,
            "ts": 0, "dur": 100}
    path.write_text(json.dumps({"traceEvents": [*EVENTS, step]}))
    r = _cli("analyze", str(path), "--format", "json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["summary"]["steps"] == 1


def _nsys_copy(tmp_path, sql: str):
    import shutil
    import sqlite3

    from conftest import SAMPLE_TRACES

    path = tmp_path / "x.sqlite"
    shutil.copy(SAMPLE_TRACES / "synthetic_nsys.sqlite", path)
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()
    return path


def test_nsys_start_at_the_int64_minimum_is_skipped_and_counted(tmp_path):
    import traceview

    path = _nsys_copy(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = -9223372036854775808")
    trace = traceview.load(path, use_cache=False)
    assert trace.column("start_ns").min() > 0
    counts = trace.ranks[0].event_counts
    assert counts["CUPTI_ACTIVITY_KIND_RUNTIME.skipped_time_out_of_range"] == counts["CUPTI_ACTIVITY_KIND_RUNTIME.read"]
    r = _cli("analyze", str(path), tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr


def test_nsys_float_beyond_int64_in_an_integer_column_is_one_line_exit_2(tmp_path):
    path = _nsys_copy(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET syncType = 1e308")
    r = _cli("analyze", str(path), tmp_path=tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert str(path) in r.stderr and "beyond 64-bit" in r.stderr
