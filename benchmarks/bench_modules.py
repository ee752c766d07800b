#!/usr/bin/env python3
"""What the ``modules`` analysis (issue 28) costs on a generated Nsight export with millions of
nested NVTX ranges, and whether it still projects them right.

    python benchmarks/bench_modules.py                         # 1M ranges, one run of each kind
    python benchmarks/bench_modules.py --ranges 1e6,1e7        # 1M, then 10M ranges
    python benchmarks/bench_modules.py --ranges 10M --runs 3   # medians of 3
    python benchmarks/bench_modules.py --trace FILE            # any trace (no truth to check)

The exports are ``benchmarks/gen_nsys_nvtx.py``'s (``benchmarks/out/nvtx_<N>.sqlite``, generated
when absent or older than the generator; 10M ranges: 1.3 GB, ~20 s), each read once first so it is
in the page cache. For each size, alternating fresh processes (``_measure.run_child``) load the
export (no cache, one process, so that its CPU time is the process's own) and run
``traceview.analyze`` on it with every registered analysis, or with ``modules`` removed from the
registry (as ``bench_critical_path.py --overhead`` removes ``critical_path``); medians of wall and
CPU time for the load and the analyses, the peak RSS of each process (``VmHWM``), and in the "with"
runs the modules analysis's own time: its derived inputs (``modules.*``: the range tree and the
attribution), its run and its report summary, each timed where the pipeline calls it (the run asks
for its inputs, so they are built inside it: each part is printed inclusive, and the total counts
each second once).

The "with" runs also check the projection against the generator's truth (``<name>.truth.json``):
every range is in the ``ranges`` table, all GPU time is attributed, and the inclusive GPU time of
``step/layer/attention`` and ``step/layer/mlp`` equals the kernels' time the generator put under
them. Exit status 1 when a check misses or a run fails. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _measure  # noqa: E402
import gen_nsys_nvtx  # noqa: E402

NAME = "modules"

CHILD = """
import dataclasses, sys, time
import traceview, traceview.analyses
from traceview.registry import ANALYSES, DERIVED_INPUTS
NAME = {name!r}
own = {{}}
depth = [0]

def timed(label, fn):
    # the run builds the derived inputs it asks for inside itself: each part is timed inclusively,
    # and "total" only at the outermost timed call, so nothing is counted twice
    def run(*a, **k):
        t0, c0 = time.perf_counter(), time.process_time()
        depth[0] += 1
        try:
            return fn(*a, **k)
        finally:
            depth[0] -= 1
            dw, dc = time.perf_counter() - t0, time.process_time() - c0
            for key in (label, "total") if depth[0] == 0 else (label,):
                w, c = own.get(key, (0.0, 0.0))
                own[key] = (w + dw, c + dc)
    return run

spec = ANALYSES.get(NAME)
if {without}:
    ANALYSES.pop(NAME, None)
elif spec is not None:
    for key in [k for k in DERIVED_INPUTS if k.startswith(NAME + ".")]:
        DERIVED_INPUTS[key] = dataclasses.replace(DERIVED_INPUTS[key], build=timed(key, DERIVED_INPUTS[key].build))
    changes = dict(run=timed("run", spec.run))
    for field in ("reduce", "summary"):
        if getattr(spec, field, None) is not None:
            changes[field] = timed(field, getattr(spec, field))
    ANALYSES[NAME] = dataclasses.replace(spec, **changes)
with _Timer() as t:
    t0, c0 = time.perf_counter(), time.process_time()
    trace = traceview.load({path!r}, use_cache=False, jobs=1)  # one process: its CPU time is all here
    load_s, load_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    report = traceview.analyze(trace, cache=False)
checks = {{}}
if NAME in report["analyses"]:
    tables = report.tables(NAME)
    tp = tables["type_paths"].groupby("type_path")["inclusive_ns"].sum()
    checks = dict(ranges=len(tables["ranges"]), attributed_share=report["summary"].get("attributed_share"),
                  inclusive_ns={{p: int(tp.get(p, -1)) for p in {paths!r}}})
_report(t, own=own, load_s=load_s, load_cpu_s=load_cpu_s, registered=spec is not None,
        present=NAME in report["analyses"], checks=checks)
"""

#: type path of each block of the generator's layers
BLOCK_PATHS = {block: f"step/layer/{block}" for block in gen_nsys_nvtx.OPS}


def export_for(ranges: int) -> tuple[Path, dict[str, Any]]:
    """The generator's export of ``ranges`` ranges and its truth, written when absent or stale."""
    path = gen_nsys_nvtx.default_path(ranges)
    truth_path = path.with_name(path.stem + ".truth.json")
    generator = Path(gen_nsys_nvtx.__file__)
    stale = not path.exists() or not truth_path.exists() or path.stat().st_mtime < generator.stat().st_mtime
    if stale:
        gen_nsys_nvtx.generate(path, ranges)
    return path, json.loads(truth_path.read_text())


def warm(path: Path) -> None:
    """Read the file once (in 64 MB pieces) so every run finds it in the page cache."""
    with open(path, "rb") as fh:
        while fh.read(64 << 20):
            pass


def measure(path: Path, runs: int) -> dict[str, list[dict[str, Any]]] | None:
    """``runs`` with and without the analysis, alternating which goes first."""
    out: dict[str, list[dict[str, Any]]] = {"with": [], "without": []}
    for i in range(runs):
        for label in ("with", "without") if i % 2 == 0 else ("without", "with"):
            code = CHILD.format(name=NAME, without=label == "without", path=str(path),
                                paths=sorted(BLOCK_PATHS.values()))
            try:
                out[label].append(_measure.run_child(sys.executable, code, cwd=str(HERE.parent)))
            except _measure.ChildError as exc:
                print(f"bench_modules: the {label} run on {path.name} failed: {exc}", file=sys.stderr)
                return None
    return out


def _med(rs: list[dict[str, Any]], fn: Any) -> float:
    return statistics.median(fn(r) for r in rs)


def print_runs(runs: dict[str, list[dict[str, Any]]]) -> None:
    rows = []
    for label, rs in runs.items():
        rows.append([f"{label} {NAME}", f"{_med(rs, lambda r: r['seconds']):.2f}",
                     f"{_med(rs, lambda r: r['cpu_seconds']):.2f}", f"{_med(rs, lambda r: r['load_s']):.2f}",
                     f"{_med(rs, lambda r: r['seconds'] - r['load_s']):.2f}",
                     f"{_med(rs, lambda r: r['cpu_seconds'] - r['load_cpu_s']):.2f}",
                     f"{max(r['peak_rss'] for r in rs) / 1e6:,.0f}"])
    print(_measure.table(["load (1 process) + analyze", "wall s", "CPU s", "load s", "analyze s",
                          "analyze CPU s", "peak RSS MB"], rows))


def print_own(runs: dict[str, list[dict[str, Any]]]) -> None:
    """The analysis's own time, part by part, and what it adds."""
    with_runs = runs["with"]
    if not with_runs[0]["registered"]:
        print(f"no {NAME!r} analysis registered: both kinds ran the same analyses")
        return
    labels = [k for k in with_runs[0]["own"] if k != "total"]
    parts = ", ".join(f"{k} {_med(with_runs, lambda r: r['own'].get(k, (0, 0))[1]):.2f}" for k in labels)
    own_s = _med(with_runs, lambda r: r["own"]["total"][0])
    own_cpu = _med(with_runs, lambda r: r["own"]["total"][1])
    without_cpu = _med(runs["without"], lambda r: r["cpu_seconds"])
    rss = [max(r["peak_rss"] for r in runs[k]) for k in ("with", "without")]
    print(f"{NAME} itself: {own_s:.2f} s wall, {own_cpu:.2f} s CPU (CPU s of each part, inclusive: {parts}) = "
          f"{100 * own_cpu / without_cpu:.1f}% of the CPU time without it; peak RSS {rss[0] / 1e6:,.0f} MB "
          f"vs {rss[1] / 1e6:,.0f} MB ({100 * (rss[0] / rss[1] - 1):+.1f}%)")


def check_truth(runs: dict[str, list[dict[str, Any]]], truth: dict[str, Any] | None) -> int:
    """Misses of the projection against the generator's truth (0 without truth or analysis)."""
    got = runs["with"][0]["checks"]
    if truth is None or not got:
        return 0
    want = {"ranges": truth["nvtx_ranges"], "attributed_share": 1.0,
            **{f"inclusive {p}": truth["gpu_ns_by_block"][b] for b, p in BLOCK_PATHS.items()}}
    found = {"ranges": got["ranges"], "attributed_share": got["attributed_share"],
             **{f"inclusive {p}": got["inclusive_ns"][p] for p in BLOCK_PATHS.values()}}
    misses = 0
    for key, value in want.items():
        ok = found[key] is not None and abs(found[key] - value) <= 1e-9 * max(1, abs(value))
        misses += not ok
        print(f"  {key}: {found[key]:,} (truth {value:,}) {_measure.check(ok)}")
    return misses


def bench_one(path: Path, truth: dict[str, Any] | None, runs: int) -> int:
    warm(path)
    what = f"{truth['nvtx_ranges']:,} NVTX ranges, {truth['kernels']:,} kernels, " if truth else ""
    print(f"\n{path} ({what}{path.stat().st_size / 1e6:,.0f} MB), {_measure.machine_line()}")
    load_before = os.getloadavg()
    result = measure(path, runs)
    if result is None:
        return 1
    load_after = os.getloadavg()
    print_runs(result)
    print_own(result)
    misses = check_truth(result, truth)
    print(f"load average before {' '.join(f'{x:.2f}' for x in load_before)}, after "
          f"{' '.join(f'{x:.2f}' for x in load_after)}")
    return 1 if misses else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranges", default="1e6",
                    help="comma-separated sizes of the generated export, in NVTX ranges (default 1e6; 1e7 = 10M)")
    ap.add_argument("--trace", type=Path, help="measure this trace instead of generated ones (no truth checked)")
    ap.add_argument("--runs", type=int, default=1, help="measured runs of each kind per size (default 1)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.trace is not None:
        if not args.trace.is_file():
            ap.error(f"no such trace: {args.trace}")
        return bench_one(args.trace, None, args.runs)
    try:
        sizes = [gen_nsys_nvtx.parse_count(s) for s in args.ranges.split(",") if s.strip()]
    except argparse.ArgumentTypeError as exc:
        ap.error(f"--ranges: {exc}")
    status = 0
    for n in sizes:
        try:
            path, truth = export_for(n)
        except ValueError as exc:
            ap.error(f"--ranges {n}: {exc}")
        status |= bench_one(path, truth, args.runs)
    return status


if __name__ == "__main__":
    sys.exit(main())
