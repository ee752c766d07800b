#!/usr/bin/env python3
"""Start-up benchmark: how long ``traceview --help`` takes against ``python -c "import typer, rich"``,
and a cached ``traceview analyze`` (trace and report already in the cache).

    python benchmarks/bench_start.py                 # 9 fresh processes of each, alternating
    python benchmarks/bench_start.py --runs 15
    python benchmarks/bench_start.py --info TRACE    # also `traceview info TRACE` (its cache is warmed first)
    python benchmarks/bench_start.py --analyze benchmarks/out/k150.json   # also cached `traceview analyze`

Every sample is a fresh process started by this script and timed from ``Popen`` to exit (wall
clock): interpreter start, site (the editable install's import hook included), imports, the help
text. The two commands alternate so that a change in the machine's load hits both alike. Printed:
the median and the spread of each, the load average before and after, and the ratio against the
target (issue 12: ``traceview --help`` <= 2x the baseline). ``--info`` adds ``traceview info`` on a
trace and lists which heavy libraries it imported (``-X importtime``): pandas comes in when pyarrow
first converts data to numpy (pyarrow imports it then), plotly and dash must not. ``--analyze``
adds ``traceview analyze TRACE`` (terminal report, piped) after one run that fills the trace and
report caches (target: <= 1.0 s); a sample that found no cached report (the code changed under it:
the key covers the code) is counted and left out. Each figure also has its CPU time (user + sys of
the child), which a busy machine inflates much less than wall time.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

TARGET_HELP_RATIO = 2.0
TARGET_CACHED_ANALYZE_S = 1.0
BASELINE = [sys.executable, "-c", "import typer, rich"]
HEAVY = ("numpy", "pyarrow", "pandas", "plotly", "dash", "pydantic", "rich", "msgspec")


def traceview_command() -> list[str]:
    """The installed ``traceview`` script beside this Python (what a user runs), else the module."""
    script = Path(sys.executable).with_name("traceview")
    if script.exists():
        return [str(script)]
    found = shutil.which("traceview")
    return [found] if found else [sys.executable, "-m", "traceview.cli"]


def report_files() -> set[str]:
    """The report cache's files now (a new one after a run: that run computed its report)."""
    from traceview import report_cache

    folder = report_cache.cache_folder()
    return {f.name for f in folder.glob("*" + report_cache.SUFFIX)} if folder.is_dir() else set()


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one fresh process running ``command`` (output discarded; must
    exit 0). CPU: the child's user + sys time (``RUSAGE_CHILDREN`` sums over waited children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def sample(commands: dict[str, list[str]], runs: int) -> tuple[dict[str, list[tuple[float, float]]], int]:
    """``runs`` (wall, CPU) times of each command, alternating between them, after one warm-up each
    (the first run may write byte-code, fill the caches and load files into the page cache); and
    how many samples of ``traceview analyze`` computed their report (left out)."""
    for command in commands.values():
        timed(command)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    missed = 0
    for _ in range(runs):
        for name, command in commands.items():
            known = report_files() if name == "traceview analyze" else set()
            result = timed(command)
            if name == "traceview analyze" and report_files() - known:
                missed += 1
                continue
            times[name].append(result)
    return times, missed


def heavy_imports(command: list[str]) -> list[str]:
    """The libraries of :data:`HEAVY` that ``command`` (a traceview command line) imports."""
    args = command[1:] if command[0].endswith("traceview") else command[3:]
    code = "import sys; sys.argv = ['traceview', *sys.argv[1:]]; from traceview.cli import main; main()"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code, *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, cwd=REPO)
    names = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return [h for h in HEAVY if h in names]


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def summary(values: list[tuple[float, float]]) -> str:
    if not values:
        return "no sample"
    wall = [w for w, _ in values]
    cpu = statistics.median(c for _, c in values)
    return (f"median {statistics.median(wall):.3f} s (min {min(wall):.3f}, max {max(wall):.3f}, n={len(wall)}); "
            f"CPU median {cpu:.3f} s")


def median_wall(values: list[tuple[float, float]]) -> float:
    return statistics.median(w for w, _ in values) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=9, help="fresh processes per command (>= 7; default 9)")
    ap.add_argument("--info", type=Path, help="also time `traceview info` on this trace (cache warmed first)")
    ap.add_argument("--analyze", type=Path, help="also time a cached `traceview analyze` of this trace")
    args = ap.parse_args()
    if args.runs < 7:
        raise SystemExit("--runs: at least 7 (the figures are medians)")
    tv = traceview_command()
    commands = {"python -c 'import typer, rich'": BASELINE, "traceview --help": [*tv, "--help"]}
    if args.info is not None:
        commands["traceview info"] = [*tv, "info", str(args.info)]
    if args.analyze is not None:
        commands["traceview analyze"] = [*tv, "analyze", str(args.analyze)]
    print(f"python {sys.version.split()[0]} at {sys.executable}; traceview: {' '.join(tv)}; cores: {os.cpu_count()}")
    print(f"load average before: {loadavg()}")
    times, missed = sample(commands, args.runs)
    print(f"load average after:  {loadavg()}")
    for name, values in times.items():
        print(f"  {name:<34} {summary(values)}")
    base = median_wall(times["python -c 'import typer, rich'"])
    ratio = median_wall(times["traceview --help"]) / base
    verdict = "meets" if ratio <= TARGET_HELP_RATIO else "MISSES"
    print(f"traceview --help / baseline: {ratio:.2f}x (target <= {TARGET_HELP_RATIO:.1f}x: {verdict})")
    heavy = ", ".join(heavy_imports(commands["traceview --help"])) or "none"
    print(f"heavy libraries imported by `traceview --help`: {heavy}")
    if args.info is not None:
        info_ratio = median_wall(times["traceview info"]) / base
        print(f"traceview info / baseline: {info_ratio:.2f}x (no target); heavy libraries it imports: "
              f"{', '.join(heavy_imports(commands['traceview info'])) or 'none'}")

    if args.analyze is not None:
        cached = median_wall(times["traceview analyze"])
        verdict = "meets" if cached <= TARGET_CACHED_ANALYZE_S else "MISSES"
        print(f"cached traceview analyze: {cached:.3f} s (target <= {TARGET_CACHED_ANALYZE_S:.1f} s: {verdict}); "
              f"{missed} sample(s) computed the report (code changed under the run) and are left out")


if __name__ == "__main__":
    main()
