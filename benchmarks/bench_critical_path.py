#!/usr/bin/env python3
"""The critical_path analysis against planted truth, and what it adds to ``traceview analyze``.

    python benchmarks/bench_critical_path.py                  # the planted cases, found vs planted
    python benchmarks/bench_critical_path.py -v               # ... and every rank and step
    python benchmarks/bench_critical_path.py --overhead e2e   # cost on the 141 MB trace (bench_e2e.py's)
    python benchmarks/bench_critical_path.py --overhead gen   # ... on a 141 MB gen_kineto.py trace
    python benchmarks/bench_critical_path.py --overhead FILE --runs 5

Accuracy: generates the cases of ``sample_traces/make_planted_paths.py`` (a host-bound loop, a slow
chain on a second stream joined by ``cudaStreamWaitEvent``, an ``.item()`` sync, an exposed
all-reduce with a late rank, a CUDA-graph replay) into a temporary directory, runs
``traceview.analyze(path)`` on each and prints, per case, each path category's time, the path
length and each what-if step time, planted against found (means per step; a row counts when within
1% of the planted value, or of 0.25% of the step for small ones). Exit status 1 on any miss.

Overhead: alternating fresh processes, each loading TRACE (no cache, one process, so that its CPU
time is the process's own) and running every analysis
(``traceview.analyze`` of the loaded trace, the report included) with every analysis, or with every
analysis but critical_path (removed from the registry before the run); medians of wall and CPU time,
the critical_path analysis's own time (its run and cross-rank reduce, timed in the "with" runs), the
peak RSS of each process (``VmHWM``) and the load average. Issue 27's target: the graph and path
add at most 25% to ``traceview analyze``. ``e2e``: ``benchmarks/out/v100_x3.json``, derived by
``bench_e2e.py`` from the shared V100 trace (141 MB); ``gen``: ``benchmarks/out/kineto_141mb.json``
from ``gen_kineto.py --size-mb 141``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "sample_traces"))
sys.path.insert(0, str(HERE))

import _measure  # noqa: E402
import make_planted_paths as mpp  # noqa: E402

# ---------------------------------------------------------------------------------------------- accuracy


def run_case(kind: str, out: Path, steps: int, seed: int) -> tuple[mpp.PathCase, list[mpp.Check], float]:
    import traceview

    case = mpp.build_case(kind, seed, steps)
    path = mpp.write_case(case, out)
    started = time.perf_counter()
    report = traceview.analyze(path, cache=False)
    seconds = time.perf_counter() - started
    if "critical_path" not in report["analyses"]:
        return case, [], seconds
    tables = report.tables("critical_path")
    return case, mpp.compare(case, tables.get("steps"), tables.get("whatif")), seconds


def case_rows(checks: list[mpp.Check]) -> list[list[str]]:
    """One row per category / what-if: planted and found means per step, the worst miss, ok count."""
    rows = []
    for what in dict.fromkeys(c.what for c in checks):
        mine = [c for c in checks if c.what == what]
        planted = statistics.fmean(c.planted for c in mine)
        found = [c.found for c in mine if c.found is not None]
        worst = max(mine, key=lambda c: abs((c.found or 0) - c.planted))
        rows.append([what, f"{planted / 1e3:,.1f}", f"{statistics.fmean(found) / 1e3:,.1f}" if found else "-",
                     f"{((worst.found or 0) - worst.planted) / 1e3:+,.1f}" if found else "-",
                     f"{sum(c.ok for c in mine)}/{len(mine)}"])
    return rows


def accuracy(args: argparse.Namespace) -> int:
    misses, started = 0, time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cp-planted-") as tmp:
        for kind in mpp.CASES:
            case, checks, seconds = run_case(kind, Path(tmp), args.steps, args.seed)
            ranks = len(case.traces)
            print(f"{kind}: {ranks} rank{'s' * (ranks > 1)} x {args.steps} steps, analyzed in {seconds:.2f} s")
            if not checks:
                print("  no critical_path analysis in the report\n")
                misses += 1
                continue
            print(_measure.table(["", "planted us/step", "found us/step", "worst diff us", "ok"], case_rows(checks)))
            bad = [c for c in checks if not c.ok]
            misses += len(bad)
            for c in bad if args.verbose else bad[:5]:
                found = "missing" if c.found is None else f"{c.found / 1e3:,.3f} us"
                print(f"  MISS rank {c.rank} step {c.step} {c.what}: planted {c.planted / 1e3:,.3f} us, found {found}")
            print()
    load = os.getloadavg()
    print(f"{misses} misses; {time.perf_counter() - started:.1f} s, load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f} on {os.cpu_count()} cores")
    return 1 if misses else 0


# ---------------------------------------------------------------------------------------------- overhead

CHILD = """
import dataclasses, sys, time
import traceview, traceview.analyses
from traceview.registry import ANALYSES
own = [0.0, 0.0]

def timed(fn):
    def run(*a, **k):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return fn(*a, **k)
        finally:
            own[0] += time.perf_counter() - t0
            own[1] += time.process_time() - c0
    return run

spec = ANALYSES.get("critical_path")
if spec is None:
    print("no critical_path analysis registered", file=sys.stderr); sys.exit(3)
if {without}:
    del ANALYSES["critical_path"]
else:
    ANALYSES["critical_path"] = dataclasses.replace(spec, run=timed(spec.run),
                                                    reduce=spec.reduce and timed(spec.reduce))
with _Timer() as t:
    t0, c0 = time.perf_counter(), time.process_time()
    trace = traceview.load({path!r}, use_cache=False, jobs=1)  # one process: its CPU time is all here
    load_s, load_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    report = traceview.analyze(trace, cache=False)
_report(t, own_s=own[0], own_cpu_s=own[1], load_s=load_s, load_cpu_s=load_cpu_s,
        present="critical_path" in report["analyses"])
"""


def overhead_trace(which: str) -> Path:
    if which == "e2e":
        import bench_e2e

        return bench_e2e._derived(3)
    if which == "gen":
        out = HERE / "out" / "kineto_141mb.json"
        if not out.exists():
            import gen_kineto

            gen_kineto.generate(out, size_mb=141, quiet=True)
        return out
    path = Path(which)
    if not path.exists():
        raise SystemExit(f"bench_critical_path: no such trace: {which}")
    return path


def overhead(args: argparse.Namespace) -> int:
    trace = overhead_trace(args.overhead)
    Path(trace).read_bytes()  # into the page cache: parse speeds, not disk speeds
    print(f"{trace} ({trace.stat().st_size / 1e6:.1f} MB), {_measure.machine_line()}")
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {"with": [], "without": []}
    for i in range(args.runs + 1):  # the first pair warms the page cache and imports
        for label in ("with", "without") if i % 2 == 0 else ("without", "with"):
            code = CHILD.format(without=label == "without", path=str(trace))
            try:
                result = _measure.run_child(sys.executable, code, cwd=str(HERE.parent))
            except _measure.ChildError as exc:
                print(f"bench_critical_path: the {label} run failed: {exc}", file=sys.stderr)
                return 1
            if i:
                runs[label].append(result)
    load_after = os.getloadavg()
    rows = []
    for label, rs in runs.items():
        rows.append([f"{label} critical_path", f"{statistics.median(r['seconds'] for r in rs):.2f}",
                     f"{min(r['seconds'] for r in rs):.2f}-{max(r['seconds'] for r in rs):.2f}",
                     f"{statistics.median(r['cpu_seconds'] for r in rs):.2f}",
                     f"{statistics.median(r['load_cpu_s'] for r in rs):.2f}",
                     f"{statistics.median(r['cpu_seconds'] - r['load_cpu_s'] for r in rs):.2f}",
                     f"{max(r['peak_rss'] for r in rs) / 1e6:,.0f}"])
    print(_measure.table(["load (1 process) + analyze", "median s", "range s", "CPU s", "load CPU s",
                          "analyze CPU s", "peak RSS MB"], rows))
    with_s = statistics.median(r["cpu_seconds"] for r in runs["with"])
    without_s = statistics.median(r["cpu_seconds"] for r in runs["without"])
    own_cpu = statistics.median(r["own_cpu_s"] for r in runs["with"])
    rss = [max(r["peak_rss"] for r in runs[k]) for k in ("with", "without")]
    share = own_cpu / without_s
    print(f"critical_path itself: {statistics.median(r['own_s'] for r in runs['with']):.2f} s wall, "
          f"{own_cpu:.2f} s CPU (median of {args.runs}) = {100 * share:.1f}% of the CPU time without it "
          f"(target <= 25%: {_measure.check(share <= 0.25)}); with - without: {100 * (with_s / without_s - 1):+.1f}% "
          f"CPU; peak RSS {rss[0] / 1e6:,.0f} MB vs {rss[1] / 1e6:,.0f} MB ({100 * (rss[0] / rss[1] - 1):+.1f}%)")
    print(f"load average before {' '.join(f'{x:.2f}' for x in load_before)}, after "
          f"{' '.join(f'{x:.2f}' for x in load_after)}")
    return 0 if share <= 0.25 else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=4, help="steps per planted case (default 4)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-v", "--verbose", action="store_true", help="print every miss")
    ap.add_argument("--overhead", metavar="TRACE", help="measure the analysis's cost on TRACE ('e2e', 'gen' or a file)")
    ap.add_argument("--runs", type=int, default=3, help="--overhead: measured runs of each kind (default 3)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.runs < 1:
        ap.error("--steps and --runs must be at least 1")
    return overhead(args) if args.overhead else accuracy(args)


if __name__ == "__main__":
    sys.exit(main())
