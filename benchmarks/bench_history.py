#!/usr/bin/env python3
"""Run-history query speed (issue 14): ``history show`` and ``history check`` on a database of
1,000 runs x 2,000 kernels answer in under 1 s.

    python benchmarks/bench_history.py                       # 1000 runs x 2000 kernels, 5 samples each
    python benchmarks/bench_history.py --runs 200 --kernels 500 --samples 3

The database is generated once into a temporary folder (sample_traces/make_history.py:
``bulk_history``, per-kernel aggregates with 2-3% noise, stored by ``add_runs`` as ``history add``
stores them). Timed: the query and its rendering, in this process (``show`` as a table with the
default selection and with ``--kernel``; ``check`` in change-point mode and against a tagged
baseline), each on a freshly opened connection; and the same commands as CLI processes (interpreter
start, imports and the database open included). Printed: the median and the range of each, its CPU
time, the target, and the load average before and after (a busy machine inflates wall time).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "sample_traces"))

TARGET_S = 1.0


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()
    except OSError:
        return "n/a"


def _timed(fn: Callable[[], object], samples: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(samples):
        c0, t0 = _cpu(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(_cpu() - c0)
    return walls, cpus


def _cli(args: list[str], samples: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(samples):
        c0, t0 = _children_cpu(), time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "traceview.cli", "history", *args], capture_output=True,
                              text=True)
        walls.append(time.perf_counter() - t0)
        cpus.append(_children_cpu() - c0)
        if done.returncode not in (0, 1):
            raise SystemExit(f"history {' '.join(args)} failed: {done.stderr.strip()}")
    return walls, cpus


def _line(name: str, walls: list[float], cpus: list[float]) -> str:
    median = statistics.median(walls)
    verdict = "ok" if median < TARGET_S else "OVER"
    return (f"{name:<44} median {median:6.3f} s  (range {min(walls):.3f}-{max(walls):.3f}, cpu "
            f"{statistics.median(cpus):.3f} s)  target < {TARGET_S:.1f} s  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--kernels", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--cli-samples", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tv-history-bench-"))
    try:
        measure(folder / "history.duckdb", args)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure(db: Path, args: argparse.Namespace) -> None:
    """Build the database at ``db`` and print the timings."""
    import make_history

    from traceview.history import DetectOptions, add_runs, check, open_history, show
    from traceview.history.render import render_check, render_show

    t0 = time.perf_counter()
    con = open_history(db)
    batch = 100  # generated and stored 100 runs at a time: bounded memory
    for first in range(0, args.runs, batch):
        summaries = make_history.bulk_history(min(batch, args.runs - first), args.kernels, seed=first)
        for i, s in enumerate(summaries):
            s.identity, s.name = f"bench-{first + i}", f"run-{first + i + 1}"
        add_runs(con, summaries)
    con.close()
    build_s = time.perf_counter() - t0
    size = db.stat().st_size
    print(f"history: {args.runs} runs x {args.kernels} kernels, built in {build_s:.1f} s, "
          f"{size / 1e6:.1f} MB on disk ({size / (args.runs * args.kernels):.1f} bytes per run and kernel)")
    print(f"load average before: {_loadavg()}")

    def run_show(kernel: str | None = None) -> None:
        with open_history(db, read_only=True) as c:
            render_show(show(c, kernel=kernel), "table")

    def run_check(baseline: str | None = None) -> None:
        with open_history(db, read_only=True) as c:
            render_check(check(c, options=DetectOptions(), baseline=baseline), "table")

    run_show(), run_check()  # warm the OS file cache and the imports
    rows = [("show (in process)", *_timed(run_show, args.samples)),
            ("show --kernel 'kernel_00[0-4]' (in process)", *_timed(lambda: run_show("kernel_00[0-4]"), args.samples)),
            ("check, change-point (in process)", *_timed(run_check, args.samples)),
            ("check --baseline branch=main (in process)",
             *_timed(lambda: run_check("branch=main"), args.samples))]
    rows += [("traceview history show (CLI process)", *_cli(["show", "--db", str(db)], args.cli_samples)),
             ("traceview history check (CLI process)", *_cli(["check", "--db", str(db)], args.cli_samples))]
    for name, walls, cpus in rows:
        print(_line(name, walls, cpus))
    with open_history(db, read_only=True) as c:  # the history has no change: every hit is a false alarm
        found = check(c, options=DetectOptions())
    print(f"false alarms of check on this no-change history: {len(found.regressions)} of {found.series_judged} "
          "series")
    print(f"load average after: {_loadavg()}  (cores: {os.cpu_count()})")


if __name__ == "__main__":
    main()
