#!/usr/bin/env python3
"""Many small ranks: whole ``traceview analyze JOB --no-cache`` processes against HTA 0.5.0 loading
the same folder and running its five analyses, on an 8-rank job and a 64-rank job made from it;
then the CPU time of traceview's analyses of the 8-rank job alone, in one process (issue 26).

    python benchmarks/bench_ranks.py                      # both jobs, 5 runs (8 ranks), 3 (64 ranks)
    python benchmarks/bench_ranks.py --ranks 8 --runs 7   # the 8-rank job only
    python benchmarks/bench_ranks.py --no-hta             # traceview only (quick runs while changing it)
    python benchmarks/bench_ranks.py --cpu-ranks 8,64     # the analyses' CPU of both jobs

The jobs: ``shared/traces/kineto/param_dlrm_8ranks_v100`` (8 Kineto files of a DLRM run on 8 x
V100, 436 KB gzip, 20k events), read where it lies, and a 64-rank job written into a temporary
folder at each run: 8 copies of the 8 files, copy ``c`` of rank ``r`` stating
``distributedInfo.rank = r + 8 c`` and ``world_size`` 64, everything else byte for byte as Kineto
wrote it (gzip JSON). HTA 0.5.0 finds a folder's ranks by the first ``"rank": N`` in each
``.json``/``.gz`` file (any name); traceview by ``distributedInfo``, else the file name: the copies
are named ``worker{rank}_...`` so both agree, and the script checks HTA's rule finds 64 ranks.

Timed (as ``bench_e2e.py``, whose helpers this uses): the wall time of each whole process,
interpreter start and imports included; traceview prints its terminal report (to /dev/null); HTA
runs ``TraceAnalysis`` and the same five analyses as ``bench_e2e.py``, in its own environment
(``--hta-python``). Runs alternate (traceview, HTA, traceview, HTA, ...); medians, min-max and the
CPU time of each process tree are printed, with the load average before and after each job.

The analyses' CPU: a fresh process loads the job once (``traceview.load(path, use_cache=False)``),
then times ``traceview.analyze(trace)`` (``time.process_time``: user + system of the process) ``--cpu-runs``
times; the first run (which pays lazy imports and first touches) is printed apart, the target is
judged on the median of the others. That call is the whole in-memory path after loading: every
analysis of every rank, the reduction across ranks and the report object (not its rendering).

Targets (issue 26): 8 ranks >= 4x and 64 ranks >= 5x faster than HTA (whole processes); analyses of
the 8-rank job <= 0.5 s of CPU.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _measure import check, machine_line, probe, run_child  # noqa: E402  (the benchmarks' own helpers, beside this file)
from bench_e2e import DEFAULT_HTA_PYTHON, HTA_SCRIPT, PACKAGE_DIRS, REPO, run_measured  # noqa: E402

SOURCE_JOB = REPO.parent / "shared" / "traces" / "kineto" / "param_dlrm_8ranks_v100"
#: ranks of the job -> target speed-up over HTA (whole processes)
TARGET_SPEEDUP = {8: 4.0, 64: 5.0}
TARGET_ANALYSES_CPU_S = 0.5
HTA_LABEL = "HTA (load + 5 analyses)"
TV_LABEL = "traceview analyze --no-cache"

#: HTA 0.5.0's rule for a file's rank (hta/common/trace_file.py: the first match, line by line)
HTA_RANK_RE = re.compile(r'"rank":\s+(\d+)')
_DIST_RE = re.compile(rb'("distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*)(\d+)')
_WORLD_RE = re.compile(rb'("distributedInfo"\s*:\s*\{[^{}]*?"world_size"\s*:\s*)(\d+)')
_TRACE_NAME_RE = re.compile(rb'("traceName"\s*:\s*")[^"]*(")')


def make_job(source: Path, target: Path, copies: int) -> list[Path]:
    """Write ``copies`` copies of ``source``'s Kineto files into ``target`` as one job of
    ``copies x n`` ranks (see the module doc); returns the files written."""
    files = sorted(p for p in source.iterdir() if p.name.endswith((".json", ".json.gz")))
    if not files:
        raise SystemExit(f"{source}: no Kineto files (.json, .json.gz)")
    world = copies * len(files)
    written = []
    for path in files:
        raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
        found = _DIST_RE.search(raw)
        if found is None:
            raise SystemExit(f"{path}: no distributedInfo.rank to renumber")
        rank = int(found.group(2))
        for copy in range(copies):
            new_rank = rank + copy * len(files)
            name = re.sub(r"worker\d+", f"worker{new_rank}", path.name, count=1)
            if name == path.name and copy:
                name = f"rank{new_rank}_{path.name}"
            name = name if name.endswith(".gz") else name + ".gz"
            body = _DIST_RE.sub(rb"\g<1>%d" % new_rank, raw, count=1)
            body = _WORLD_RE.sub(rb"\g<1>%d" % world, body, count=1)
            body = _TRACE_NAME_RE.sub(rb"\g<1>" + name[:-3].encode() + rb"\g<2>", body, count=1)
            out = target / name
            out.write_bytes(gzip.compress(body, compresslevel=6))
            written.append(out)
    return written


def hta_rank(path: Path) -> int | None:
    """The rank HTA 0.5.0 gives ``path``: the first ``"rank": N`` of its first line that has one."""
    with gzip.open(path, "rt") if path.name.endswith(".gz") else open(path) as fh:
        for line in fh:
            found = HTA_RANK_RE.search(line)
            if found:
                return int(found.group(1))
    return None


def check_job(files: list[Path], world: int) -> None:
    """Stop unless HTA's rule gives the files the ranks 0..world-1, one each."""
    ranks = sorted(r for r in (hta_rank(p) for p in files) if r is not None)
    if ranks != list(range(world)):
        raise SystemExit(f"the {world}-rank job's files do not state ranks 0..{world - 1} as HTA reads them: "
                         f"{ranks[:10]}...")


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def time_job(job: Path, ranks: int, runs: int, hta_python: str | None, cache_dir: Path) -> dict[str, list[dict]]:
    """Alternating whole-process runs of traceview and HTA on ``job``; every run's figures."""
    commands = {TV_LABEL: ([sys.executable, "-m", "traceview.cli", "analyze", str(job), "--no-cache"],
                           {"TRACEVIEW_CACHE_DIR": str(cache_dir)})}
    if hta_python:
        commands[HTA_LABEL] = ([hta_python, "-c", HTA_SCRIPT, str(job)], {})
    results: dict[str, list[dict]] = {label: [] for label in commands}
    print(f"\n{ranks} ranks ({job}): load average before {load_avg()}")
    for _ in range(runs):  # alternate, so a change in the machine's load hits both
        for label, (cmd, env) in commands.items():
            results[label].append(run_measured(cmd, env, memory=False))
    print_job(results, ranks)
    print(f"load average after {load_avg()}")
    return results


def print_job(results: dict[str, list[dict]], ranks: int) -> None:
    print(f"{'run':32} {'median s':>9} {'min-max s':>13} {'CPU s':>6}")
    medians = {}
    for label, runs in results.items():
        secs = [r["seconds"] for r in runs]
        medians[label] = statistics.median(secs)
        cpu = statistics.median(r["cpu_seconds"] for r in runs)
        print(f"{label:32} {medians[label]:9.2f} {min(secs):6.2f}-{max(secs):6.2f} {cpu:6.2f}")
    if HTA_LABEL in medians:
        speedup = medians[HTA_LABEL] / medians[TV_LABEL]
        target = TARGET_SPEEDUP.get(ranks)
        goal = f" (target >= {target:g}x: {check(speedup >= target)})" if target else ""
        print(f"{ranks} ranks: HTA / traceview = {speedup:.2f}x{goal}, medians of {len(results[TV_LABEL])}")


#: run in a fresh process after _measure's prelude (its _Timer and _report); JOB_PATH and ANALYZE_RUNS filled in
CPU_CHILD = """
import statistics, time
import traceview

with _Timer() as timer:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    try:
        trace = traceview.load(JOB_PATH, use_cache=False)
    except TypeError:  # an API without the keyword: the caller's empty TRACEVIEW_CACHE_DIR
        trace = traceview.load(JOB_PATH)
    load_cpu, load_wall = time.process_time() - cpu0, time.perf_counter() - wall0
    cpu, wall = [], []
    for _ in range(ANALYZE_RUNS):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        report = traceview.analyze(trace)
        cpu.append(time.process_time() - cpu0)
        wall.append(time.perf_counter() - wall0)
        del report
_report(timer, load_cpu=load_cpu, load_wall=load_wall, cpu=cpu, wall=wall, ranks=len(trace.ranks),
        events=getattr(getattr(trace, "events", None), "num_rows", -1))
"""


def analyses_cpu(job: Path, runs: int, cache_dir: Path) -> dict:
    """CPU and wall seconds of ``runs`` calls of ``traceview.analyze`` on ``job`` loaded once, in a
    fresh process."""
    code = textwrap.dedent(CPU_CHILD).replace("JOB_PATH", repr(str(job))).replace("ANALYZE_RUNS", str(runs))
    return run_child(sys.executable, code, env={"TRACEVIEW_CACHE_DIR": str(cache_dir)}, cwd=str(REPO))


def print_cpu(result: dict, ranks: int) -> None:
    cpu, wall = result["cpu"], result["wall"]
    rest_cpu, rest_wall = cpu[1:] or cpu, wall[1:] or wall
    median = statistics.median(rest_cpu)
    print(f"in one process ({result['ranks']} ranks, {result['events']:,} events): "
          f"load {result['load_cpu']:.3f} s CPU ({result['load_wall']:.3f} s wall); traceview.analyze(trace): "
          f"first run {cpu[0]:.3f} s CPU ({wall[0]:.3f} s wall), then median {median:.3f} s CPU "
          f"(min-max {min(rest_cpu):.3f}-{max(rest_cpu):.3f}), {statistics.median(rest_wall):.3f} s wall, "
          f"of {len(rest_cpu)} runs")
    if ranks == 8:
        print(f"analyses of the 8-rank job: {median:.3f} s CPU (target <= {TARGET_ANALYSES_CPU_S:g} s: "
              f"{check(median <= TARGET_ANALYSES_CPU_S)})")


def hta_python_or_none(args: argparse.Namespace) -> str | None:
    if args.no_hta:
        print("HTA left out (--no-hta)")
        return None
    version = probe(args.hta_python, "hta", "HolisticTraceAnalysis")
    if version is None:
        print(f"HTA not measured: {args.hta_python} cannot import hta (benchmarks/README.md: HTA venv)")
        return None
    print(f"HTA {version} ({args.hta_python})" + ("" if version == "0.5.0" else ": the targets are against 0.5.0"))
    return args.hta_python


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="8,64", help="jobs to time: 8, 64 or both (default 8,64)")
    ap.add_argument("--runs", type=int, default=5, help="alternating runs of each tool, 8 ranks (default 5)")
    ap.add_argument("--runs-64", type=int, default=3, help="the same for 64 ranks (default 3)")
    ap.add_argument("--cpu-ranks", default="8", help="jobs whose analyses' CPU is measured (default 8; '' none)")
    ap.add_argument("--cpu-runs", type=int, default=6, help="analyze calls in that process (default 6: the "
                    "first, then a median of 5)")
    ap.add_argument("--hta-python", default=DEFAULT_HTA_PYTHON)
    ap.add_argument("--no-hta", action="store_true", help="leave HTA out (no ratios printed)")
    ap.add_argument("--json", type=Path, help="write every run's figures to this file")
    args = ap.parse_args(argv)
    if not SOURCE_JOB.is_dir():
        raise SystemExit(f"{SOURCE_JOB} is missing (the shared traces)")
    timed = {int(x) for x in args.ranks.split(",") if x}
    cpu_ranks = {int(x) for x in args.cpu_ranks.split(",") if x}
    if not timed | cpu_ranks <= {8, 64}:
        raise SystemExit("--ranks and --cpu-ranks take 8 and 64")
    # byte-code for traceview's modules, as a wheel install has (as bench_e2e.py does)
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(REPO / d) for d in PACKAGE_DIRS)], check=True)
    print(machine_line())
    hta_python = hta_python_or_none(args)
    out: dict = {"load_before": os.getloadavg(), "jobs": {}, "analyses": {}}
    with tempfile.TemporaryDirectory(prefix="bench_ranks_") as tmp:
        jobs = {8: SOURCE_JOB}
        if 64 in timed | cpu_ranks:
            jobs[64] = Path(tmp, "job64")
            jobs[64].mkdir()
            check_job(make_job(SOURCE_JOB, jobs[64], copies=8), 64)
        cache_dir = Path(tmp, "cache")  # --no-cache writes nothing; a stray cache stays here all the same
        for ranks in sorted(timed):
            runs = args.runs if ranks == 8 else args.runs_64
            out["jobs"][ranks] = time_job(jobs[ranks], ranks, runs, hta_python, cache_dir)
        for ranks in sorted(cpu_ranks):
            print(f"\nanalyses of the {ranks}-rank job: load average before {load_avg()}")
            out["analyses"][ranks] = analyses_cpu(jobs[ranks], max(args.cpu_runs, 1), cache_dir)
            print_cpu(out["analyses"][ranks], ranks)
    out["load_after"] = os.getloadavg()
    print(f"\nload average after all: {load_avg()}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
