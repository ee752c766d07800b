#!/usr/bin/env python3
"""Peak RSS of ``traceview analyze`` with the report cache: ``--no-cache``, a fresh run (an empty
cache folder: the trace and the report are computed and stored) and a cached run (the report read
back), each a fresh process, median of ``--repeat`` runs, with the load average. The three reports
must be the same text (checked).

    python benchmarks/bench_report_cache.py TRACE [--repeat 3]
    python benchmarks/bench_report_cache.py --generate DIR     # an NVTX-heavy Nsight export of 291 MB

Target (issue 31, item 3): a fresh run with the cache peaks as ``--no-cache`` does, and a cached
run no higher (each analysis's tables go to the cache file as the analysis ends; a cached report's
tables are converted from the file's memory map when first used). Measured here (2 shared cores,
load 1-4), on ``gen_nsys_nvtx.py --ranges 2.3e6`` (291 MB, a 1.15 GB cache file), in GiB of
``/usr/bin/time``'s maximum RSS: before (one run, load 3.1-4.4), no-cache 3.75, fresh 4.48, cached
2.43 (4.3 s); after (medians of 3, load 1.0-1.5), no-cache 3.79, fresh 3.81, cached 0.35 (1.1 s).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_peak(cmd: list[str], env: dict[str, str]) -> tuple[int, float, bytes]:
    """(peak RSS in bytes of the largest process of ``cmd``'s tree, wall seconds, its stdout)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        if child.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed ({child.returncode})")
        out.seek(0)
        text = out.read()
    return usage.ru_maxrss * 1024, seconds, text


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--generate", type=Path, help="write gen_nsys_nvtx.py --ranges 2.3e6 into this folder and use it")
    args = ap.parse_args(argv)
    trace = args.trace
    if args.generate is not None:
        args.generate.mkdir(parents=True, exist_ok=True)
        trace = args.generate / "nvtx_2300k.sqlite"
        if not trace.exists():
            subprocess.run([sys.executable, str(HERE / "gen_nsys_nvtx.py"), "--ranges", "2.3e6", "--out", str(trace)],
                           check=True)
    if trace is None:
        ap.error("a trace or --generate DIR")
    beside = Path(sys.executable).parent / "traceview"  # the command of this interpreter's environment
    tv = [str(beside) if beside.exists() else shutil.which("traceview") or "traceview", "analyze", str(trace)]
    runs: dict[str, list[tuple[int, float]]] = {"no-cache": [], "fresh": [], "cached": []}
    outputs: set[bytes] = set()
    print(f"{trace} ({trace.stat().st_size / 1e6:.0f} MB), load before: {load()}")
    for _ in range(args.repeat):
        folder = tempfile.mkdtemp(prefix="tv-bench-cache-")
        env = {**os.environ, "TRACEVIEW_CACHE_DIR": folder}
        try:
            for label, extra in (("no-cache", ["--no-cache"]), ("fresh", []), ("cached", [])):
                peak, seconds, text = run_peak(tv + extra, env)
                runs[label].append((peak, seconds))
                outputs.add(text)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"load after: {load()}")
    for label, values in runs.items():
        peak = statistics.median(p for p, _ in values)
        seconds = statistics.median(s for _, s in values)
        print(f"{label:>9}: peak {peak / 1e9:.2f} GB, {seconds:.1f} s (median of {len(values)})")
    no_cache, fresh, cached = (statistics.median(p for p, _ in runs[k]) for k in runs)
    print(f"fresh / no-cache peak: {fresh / no_cache:.2f}, cached / fresh: {cached / fresh:.2f} "
          f"(target: fresh <= no-cache within the run-to-run spread, cached <= fresh)")
    print(f"reports identical: {len(outputs) == 1}")
    return 0 if len(outputs) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
