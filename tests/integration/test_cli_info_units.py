"""``traceview info`` prints times for people, and :mod:`traceview.units` picks the unit per magnitude."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import SAMPLE_TRACES
from traceview.units import fmt_clock_ns, fmt_epoch_ns, fmt_ns


def test_durations_take_the_unit_of_their_magnitude() -> None:
    assert [fmt_ns(v) for v in (3, 3_000, 3_000_000, 3_000_000_000)] == ["3 ns", "3 us", "3 ms", "3 s"]
    assert fmt_ns(1_234_567) == "1.23 ms" and fmt_ns(999) == "999 ns" and fmt_ns(None) == "-"


def test_clock_values_read_as_dates_only_when_they_are_unix_time() -> None:
    assert fmt_epoch_ns(1_694_128_201_422_502_000) == "2023-09-07 23:10:01.422502 UTC"
    assert fmt_epoch_ns(1_002_000_000) is None  # since boot or since the session: not a date
    assert fmt_clock_ns(1_002_000_000) == "1,002,000,000 ns on the profiler's clock"
    assert fmt_epoch_ns(None) is None and fmt_clock_ns(float("nan")) == "-"


def test_info_prints_dates_and_no_raw_epoch_ns(tmp_path) -> None:
    env = dict(os.environ, COLUMNS="200", TRACEVIEW_CACHE_DIR=str(tmp_path / "cache"))
    shown = subprocess.run([sys.executable, "-m", "traceview.cli", "info", str(SAMPLE_TRACES / "synthetic_nsys.sqlite")],
                           capture_output=True, text=True, env=env, timeout=300)
    assert shown.returncode == 0, shown.stderr
    lines = [line for line in shown.stdout.splitlines() if "first event" in line or "base time" in line]
    assert lines and all(" UTC" in line for line in lines), lines
    assert "1767225600000000000" not in shown.stdout  # the session start as a date, not epoch ns
