#!/usr/bin/env python3
"""End to end: a whole ``traceview analyze --no-cache`` against HTA 0.5.0 loading the same trace and
running five analyses, plus the cached ``analyze``; each a fresh process, as a user runs it.

    python benchmarks/bench_e2e.py                 # >= 140 MB trace derived from a real V100 trace
    python benchmarks/bench_e2e.py --copies 1      # the real trace itself (54 MB)
    python benchmarks/bench_e2e.py --trace F.json  # any trace
    python benchmarks/bench_e2e.py --jobs 2 --split     # also a rank's analyses in two processes
    python benchmarks/bench_e2e.py --sizes-gb 1,4 --out-dir /big   # issue 31: 1 GB and 4 GB, HTA on the first

``--sizes-gb``: one trace per size, derived from the V100 trace as below with as many copies as reach
the size (21 copies: 0.99 GB; 85: 4.0 GB), each run once through ``traceview analyze --no-cache``
with the memory sampler: wall and CPU time, peak RSS and PSS, the peak's ratio to the file size and
bytes per event; HTA 0.5.0 on the first size only (its time and peak, or its failure). Issue 31's
target: peak <= 1.0x the file size.

The trace: ``shared/traces/kineto/hta_df_index_resolver_v100_rank1.json.gz`` (rank 1 of a 2 x V100
DDP run; 216k events), its events repeated ``--copies`` times one after another in time, with
correlation ids, External ids, flow ids and ProfilerStep numbers shifted so every copy stays a
distinct, consistent step range (default 3 copies: 141 MB of JSON).

What is timed: the wall time of the whole process (interpreter start, imports, parse, analyses and,
for traceview, writing the JSON report), and, in separate runs (``--memory-runs``, after the timed
ones: the sampler's own reads of /proc cost CPU the timed run would compete for), the peak memory
of its process tree, sampled every 5 ms from /proc: the sum over the process and every descendant
(traceview's parse workers) of its resident memory (RSS) and of its proportional share of it
(PSS: a page shared by forked workers counted once in all, not once per process; see
``_tree_memory``). The memory target is judged on both; PSS is the memory the tree really holds.
HTA: ``TraceAnalysis(trace_dir)`` and ``get_temporal_breakdown``, ``get_idle_time_breakdown``,
``get_gpu_kernel_breakdown``, ``get_comm_comp_overlap``, ``get_cuda_kernel_launch_stats``
(visualize off), in HTA's own environment (``--hta-python``).
Runs alternate between the tools; medians are printed with the spread and the load average, and
the CPU time (user + system) of each run's whole process tree beside its wall time: on a loaded
machine the wall time says more about the other processes than about the run (``--no-hta`` leaves
HTA out, for quick runs while changing traceview).

Targets (issue 12): traceview >= 8x faster than HTA, peak memory <= 1/3 of HTA's; cached
``analyze`` <= 1.0 s.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO.parent / "shared" / "traces" / "kineto" / "hta_df_index_resolver_v100_rank1.json.gz"
OUT = REPO / "benchmarks" / "out"
DEFAULT_HTA_PYTHON = "/work/hta-venv/bin/python"
TARGET_SPEEDUP = 8.0
TARGET_RSS_RATIO = 1 / 3
TARGET_CACHED_S = 1.0
#: issue 31: peak RSS of ``traceview analyze`` at most this times the size of the Kineto JSON
TARGET_FILE_RATIO = 1.0
#: JSON bytes of one copy of the V100 trace in :func:`derive_trace` (47.18 MB)
BYTES_PER_COPY = 47_180_000
#: the source folders of the installed package (pyproject.toml's package-dir)
PACKAGE_DIRS = ("traceview", "parsers", "analyses", "app")

HTA_SCRIPT = """
import logging, sys, warnings
warnings.simplefilter("ignore")
from hta.configs.config import logger
logger.setLevel(logging.ERROR)
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
ranks = sorted(a.t.traces)  # the per-rank analyses default to rank 0
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(ranks=ranks, visualize=False)
a.get_gpu_kernel_breakdown(visualize=False)
a.get_comm_comp_overlap(visualize=False)
a.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
"""

#: integer ids that link events; each copy's are shifted past the previous copy's
_SHIFTED_ARGS = ("External id", "correlation")


def derive_trace(source: Path, target: Path, copies: int) -> dict:
    """Write ``copies`` back-to-back copies of ``source``'s events into ``target`` (see the module doc)."""
    with gzip.open(source, "rt") as fh:
        doc = json.load(fh)
    events = doc.pop("traceEvents")
    timed = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t0
    max_id = {k: max((e.get("args") or {}).get(k, 0) for e in events if isinstance((e.get("args") or {}).get(k), int))
              for k in _SHIFTED_ARGS}
    max_flow = max((e["id"] for e in events if isinstance(e.get("id"), int)), default=0)
    steps = sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    with open(target, "w") as out:
        out.write(json.dumps(doc)[:-1] + ', "traceEvents": [\n')
        first = True
        for copy in range(copies):
            for e in events:
                if e.get("ph") == "M" and copy:
                    continue
                e2 = _shifted(e, copy, span + 1000, max_id, max_flow, steps)
                out.write(("" if first else ",\n") + json.dumps(e2))
                first = False
        out.write("\n]}\n")
    return {"bytes": target.stat().st_size, "events": copies * len(timed) + (len(events) - len(timed))}


def _shifted(e: dict, copy: int, dt: float, max_id: dict, max_flow: int, steps: int) -> dict:
    if not copy:
        return e
    e = dict(e)
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = e["ts"] + copy * dt
    if isinstance(e.get("id"), int):
        e["id"] = e["id"] + copy * (max_flow + 1)
    args = e.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for k in _SHIFTED_ARGS:
            if isinstance(args.get(k), int) and args[k] >= 0:
                args[k] = args[k] + copy * (max_id[k] + 1)
        e["args"] = args
    name = e.get("name")
    if isinstance(name, str) and name.startswith("ProfilerStep#") and name[13:].isdigit():
        e["name"] = f"ProfilerStep#{int(name[13:]) + copy * steps}"
    return e


def _tree_memory(pid: int) -> tuple[int, int]:
    """(resident bytes, proportional bytes) of ``pid`` and all its descendants.

    RSS counts a page shared by several processes once in each: traceview's forked parse workers
    share the parent's imported modules copy-on-write, so a sum of RSS counts those ~100 MB twice.
    PSS (``Pss`` in ``/proc/PID/smaps_rollup``) divides each shared page among the processes that
    map it, so the sum over the tree is the memory the tree really holds; for one process the two
    differ only by the libraries it shares with other programs."""
    rss = pss = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    stack.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return rss, pss


def run_measured(cmd: list[str], env: dict | None = None, *, memory: bool = True,
                 timeout_s: float | None = None) -> dict:
    """Wall seconds, CPU seconds (user + system of ``cmd`` and every process it waited for) and, with
    ``memory``, peak process-tree RSS and PSS of ``cmd`` (else 0); raises on a non-zero exit.

    The memory is sampled from a thread of this process every 5 ms, and reading a tree's
    ``smaps_rollup`` costs CPU: on this 2-core machine a sampled run of ``traceview analyze --jobs 2``
    (which keeps both cores busy) took ~0.2 s longer than an unsampled one. So :func:`main` times
    runs without the sampler and takes the memory from runs of their own."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    peak_rss = peak_pss = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_rss, peak_pss
        while not done.is_set():
            rss, pss = _tree_memory(proc.pid)
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    if memory:
        sampler.start()
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        done.set()
        raise
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    done.set()
    if memory:
        sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... exited {proc.returncode}: {err.decode()[-800:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_rss": peak_rss, "peak_pss": peak_pss}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, help="an existing Kineto trace instead of the derived one")
    ap.add_argument("--copies", type=int, default=3, help="copies of the V100 trace (default 3: 141 MB)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each (default 3; medians), without the "
                    "memory sampler")
    ap.add_argument("--memory-runs", type=int, default=1, help="runs of each with the memory sampler, after the "
                    "timed ones (default 1; the highest peaks)")
    ap.add_argument("--hta-python", default=DEFAULT_HTA_PYTHON)
    ap.add_argument("--no-hta", action="store_true", help="leave HTA out (quick runs; no ratios printed)")
    ap.add_argument("--jobs", default="", help="comma list of --jobs values to pass traceview (empty: its default)")
    ap.add_argument("--split", action="store_true", help="also run each traceview variant with a rank's analyses "
                    "in two processes (TRACEVIEW_SPLIT_MIN_EVENTS=100000, opt-in): the speed/memory trade-off")
    ap.add_argument("--sizes-gb", default="", help="comma list of sizes in GB (10**9 B): the issue-31 run "
                    "(see the module doc); each trace derived once into --out-dir")
    ap.add_argument("--out-dir", type=Path, default=OUT, help="where derived traces are kept (default benchmarks/out)")
    ap.add_argument("--hta-timeout-s", type=float, default=1800.0, help="with --sizes-gb: HTA's time limit")
    args = ap.parse_args(argv)
    if args.sizes_gb:
        return sizes_run([float(v) for v in args.sizes_gb.split(",")], args)
    trace = args.trace or _derived(args.copies, args.out_dir)
    size = trace.stat().st_size
    # byte-code for traceview's modules, as a wheel install has (pip compiles at install; HTA's
    # venv has it): an editable checkout run with PYTHONDONTWRITEBYTECODE=1 would compile every
    # module at every start instead
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(REPO / d) for d in PACKAGE_DIRS)], check=True)
    print(f"trace {trace.name}: {size / 1e6:.1f} MB; load average before: {_load()}")
    hta_ok = os.path.exists(args.hta_python) and not args.no_hta
    with tempfile.TemporaryDirectory() as tmp:
        hta_dir = Path(tmp, "hta")
        hta_dir.mkdir()
        os.symlink(trace.resolve(), hta_dir / trace.name)
        report = Path(tmp, "r.json")
        variants = [v for v in args.jobs.split(",") if v] or [""]
        tv_cmds = {f"traceview{' --jobs ' + v if v else ''}": (_tv_cmd(trace, report, v, no_cache=True), {})
                   for v in variants}
        if args.split:  # the same runs with a rank's analyses in two processes
            tv_cmds.update({f"{label}, analyses split": (cmd, {"TRACEVIEW_SPLIT_MIN_EVENTS": "100000"})
                            for label, (cmd, _) in list(tv_cmds.items())})
        hta_label = "HTA 0.5.0 (load + 5 analyses)"
        results: dict[str, list[dict]] = {k: [] for k in (*tv_cmds, hta_label)}
        commands = dict(tv_cmds)
        if hta_ok:
            commands[hta_label] = ([args.hta_python, "-c", HTA_SCRIPT, str(hta_dir)], {})
        sampled: dict[str, list[dict]] = {k: [] for k in results}
        for runs, memory, into in ((args.runs, False, results), (args.memory_runs, True, sampled)):
            for _ in range(runs):  # alternate, so a change in the machine's load hits both
                for label, (cmd, env) in commands.items():
                    into[label].append(run_measured(cmd, env, memory=memory))
        for label, runs in sampled.items():  # the peaks come from the sampled runs
            for run in results[label]:
                run["peak_rss"] = max((r["peak_rss"] for r in runs), default=0)
                run["peak_pss"] = max((r["peak_pss"] for r in runs), default=0)
        cache = {"TRACEVIEW_CACHE_DIR": str(Path(tmp, "cache"))}
        run_measured(_tv_cmd(trace, report, variants[0], no_cache=False), cache)  # fills the cache
        results["traceview, cached"] = [run_measured(_tv_cmd(trace, report, variants[0], no_cache=False), cache)
                                        for _ in range(max(5, args.runs))]
    _print(results, size, hta_ok, skipped=args.no_hta)
    for label, runs in sampled.items():
        if runs:
            print(f"{label}: with the memory sampler {statistics.median(r['seconds'] for r in runs):.2f} s "
                  f"(median of {len(runs)}; not used for the speed)")
    print(f"load average after: {_load()}")
    return 0


def _derived(copies: int, out_dir: Path = OUT) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"v100_x{copies}.json"
    meta = target.with_name(target.name + ".meta.json")
    if not target.exists() or not meta.exists():
        if not SOURCE.exists():
            raise SystemExit(f"{SOURCE} is missing: give --trace")
        info = derive_trace(SOURCE, target, copies)
        meta.write_text(json.dumps(info))
        print(f"derived {target} ({info['bytes'] / 1e6:.1f} MB, {info['events']:,} events)")
    return target


def _derived_events(trace: Path) -> int:
    """The trace events (JSON objects in ``traceEvents``) of a trace :func:`_derived` wrote."""
    return int(json.loads(trace.with_name(trace.name + ".meta.json").read_text())["events"])


def sizes_run(sizes_gb: list[float], args: argparse.Namespace) -> int:
    """Issue 31: one sampled ``traceview analyze --no-cache`` per size, HTA on the first (see the module doc)."""
    traces = [_derived(max(1, round(gb * 1e9 / BYTES_PER_COPY)), args.out_dir) for gb in sizes_gb]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(REPO / d) for d in PACKAGE_DIRS)], check=True)
    print(f"{'run':34} {'GB':>5} {'events':>10} {'wall s':>7} {'CPU s':>7} {'peak RSS MB':>12} {'PSS MB':>7} "
          f"{'x file':>7} {'B/event':>8}  load before")
    with tempfile.TemporaryDirectory() as tmp:
        for trace in traces:
            _size_line("traceview analyze --no-cache", trace, _tv_cmd(trace, Path(tmp, "r.json"), "", no_cache=True))
        if args.no_hta:
            print("HTA not measured (--no-hta)")
        elif not os.path.exists(args.hta_python):
            print(f"HTA 0.5.0 not measured: no python at {args.hta_python} "
                  "(pip install HolisticTraceAnalysis==0.5.0 into a venv; give --hta-python)")
        else:
            hta_dir = Path(tmp, "hta")
            hta_dir.mkdir()
            os.symlink(traces[0].resolve(), hta_dir / traces[0].name)
            _size_line("HTA 0.5.0 (load + 5 analyses)", traces[0], [args.hta_python, "-c", HTA_SCRIPT, str(hta_dir)],
                       timeout_s=args.hta_timeout_s)
    print(f"target (issue 31): traceview's peak RSS <= {TARGET_FILE_RATIO:g}x the file; load average after: {_load()}")
    return 0


def _size_line(label: str, trace: Path, cmd: list[str], timeout_s: float | None = None) -> None:
    size, events, load = trace.stat().st_size, _derived_events(trace), _load()
    try:
        run = run_measured(cmd, timeout_s=timeout_s)
    except subprocess.TimeoutExpired as exc:  # HTA's failure is a result too
        print(f"{label:34} {size / 1e9:5.2f} {events:10,} FAILED: killed after {exc.timeout:.0f} s  (load {load})")
        return
    except RuntimeError as exc:
        print(f"{label:34} {size / 1e9:5.2f} {events:10,} FAILED: {str(exc)[-300:]}  (load {load})")
        return
    ratio = run["peak_rss"] / size
    verdict = f"  {_verdict(ratio <= TARGET_FILE_RATIO)}" if label.startswith("traceview") else ""
    print(f"{label:34} {size / 1e9:5.2f} {events:10,} {run['seconds']:7.1f} {run['cpu_seconds']:7.1f} "
          f"{run['peak_rss'] / 1e6:12.0f} {run['peak_pss'] / 1e6:7.0f} {ratio:7.2f} {run['peak_rss'] / events:8.0f}"
          f"  {load}{verdict}")


def _tv_cmd(trace: Path, report: Path, jobs: str, *, no_cache: bool) -> list[str]:
    cmd = [sys.executable, "-m", "traceview.cli", "analyze", str(trace), "-f", "json", "-o", str(report)]
    return cmd + (["--no-cache"] if no_cache else []) + (["--jobs", jobs] if jobs else [])


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def _print(results: dict[str, list[dict]], size: int, hta_ok: bool, *, skipped: bool = False) -> None:
    print(f"\n{'run':44} {'median s':>9} {'spread s':>13} {'CPU s':>6} {'MB/s':>7} {'peak RSS MB':>12} "
          f"{'peak PSS MB':>12}")
    med = {}
    for label, runs in results.items():
        if not runs:
            continue
        secs = [r["seconds"] for r in runs]
        # memory: the highest peak of the runs, not the median
        med[label] = (statistics.median(secs), max(r["peak_rss"] for r in runs), max(r["peak_pss"] for r in runs))
        cpu = statistics.median(r["cpu_seconds"] for r in runs)
        print(f"{label:44} {med[label][0]:9.2f} {min(secs):6.2f}-{max(secs):6.2f} {cpu:6.2f} "
              f"{size / 1e6 / med[label][0]:7.1f} {med[label][1] / 1e6:12.0f} {med[label][2] / 1e6:12.0f}")
    hta = med.get("HTA 0.5.0 (load + 5 analyses)")
    for label, (secs, rss, pss) in med.items():
        if label.startswith("traceview") and "cached" not in label and hta:
            speed, mem_rss, mem_pss = hta[0] / secs, rss / hta[1], pss / hta[2]
            print(f"{label}: {speed:.1f}x faster than HTA (target >= {TARGET_SPEEDUP:g}x: "
                  f"{_verdict(speed >= TARGET_SPEEDUP)}); peak memory {mem_pss:.2f} of HTA's by PSS, "
                  f"{mem_rss:.2f} by RSS (target <= {TARGET_RSS_RATIO:.2f}: {_verdict(mem_pss <= TARGET_RSS_RATIO)} "
                  f"by PSS, {_verdict(mem_rss <= TARGET_RSS_RATIO)} by RSS)")
    if skipped:
        print("HTA not measured (--no-hta)")
    elif not hta_ok:
        print("HTA not measured: no python at --hta-python (pip install holistictraceanalysis==0.5.0 in a venv)")
    cached = med.get("traceview, cached")
    if cached:
        print(f"cached analyze: {cached[0]:.2f} s (target <= {TARGET_CACHED_S:g} s: "
              f"{_verdict(cached[0] <= TARGET_CACHED_S)})")


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


if __name__ == "__main__":
    sys.exit(main())
