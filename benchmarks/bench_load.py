#!/usr/bin/env python3
"""Kineto load benchmark: traceview (no cache, and from the cache) against HTA on one big trace.

    python benchmarks/bench_load.py                     # >= 500 MB trace in benchmarks/out/, full run
    python benchmarks/bench_load.py --size-mb 50        # quick check
    python benchmarks/bench_load.py --trace FILE.json   # any existing trace instead
    python benchmarks/bench_load.py --trace FILE.json --phases --runs 7   # where a parse's time goes
    python benchmarks/bench_load.py --trace FILE.json --phases --glibc-heap   # ... and without the command's parse_heap

Every measurement runs in a fresh Python process, which reports its own wall time, CPU time and peak
RSS (``VmHWM``). The file is read once before the runs so every run sees it in the page cache: the
figures are parse speed, not disk speed. Peak RSS is the whole process (interpreter and imports
included). MB = 10**6 bytes of uncompressed JSON.

Targets: >= 100 MB/s per core, >= 10x HTA's load speed, peak RSS <= 2x the uncompressed file,
cache >= 20x faster than parsing. Issue 12 (parse across cores): >= 200 MB/s per core in one process
(``--jobs 1``), >= 1.7x that wall speed with 2 worker processes (``--jobs 2``) on an idle 2-core
machine, and single-process speed >= 0.8x msgspec's typed decode of the same file (a struct with the
fields traceview reads, the whole file decoded in one call: the floor of any msgspec-based parser).
With ``--jobs N`` the CPU time and peak memory include the worker processes: CPU is the parent's
plus its waited-for children's; memory is the larger of the parent's VmHWM and the summed PSS of the
parent and its workers sampled every 50 ms (PSS splits pages a fork shares, so they count once).
traceview's modules are imported before the timer. ``--gzip`` also measures a gzip copy of the
trace (``--jobs 1`` and ``3``).

``--phases`` measures only the parse (``parse_kineto``, with a ``PhaseClock``), the ``--jobs``
values interleaved run by run: the wall and CPU seconds and the page faults (thousands) of each
phase in the parent (CPU and faults per thread: the CPU-op links of a parallel parse run in a
helper thread), the workers' ranges (parse and result writing, their times and faults), and an
idle-machine estimate built from CPU times only, which a loaded machine disturbs far less than
wall time: the parent main thread's serial CPU, plus the longer of its own ranges and the
busiest worker's, plus what the helper thread takes beyond the work beside it. Wall time spent
waiting (for a worker's exit, say) is not in the estimate.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gen_kineto  # noqa: E402
from _measure import (ChildError, Series, check, fmt_rate, machine_line, mb, probe, run_child,  # noqa: E402
                      table)

DEFAULT_HTA_PYTHON = "/work/hta-venv/bin/python"
TARGET_MB_S_PER_CORE = 100.0
TARGET_VS_HTA = 10.0
TARGET_RSS_RATIO = 2.0
TARGET_CACHE_SPEEDUP = 20.0
TARGET_MB_S_PER_CORE_ISSUE12 = 200.0
TARGET_TWO_WORKERS = 1.7
TARGET_VS_MSGSPEC = 0.8

TRACEVIEW_CHILD = """
import traceview
import glob, resource, threading
# imported before the timer, as a long-lived process has them: the figure is the parse (pandas
# too: the parser imports it at its first use, so that `traceview analyze` imports it while its
# parse workers run; here it is imported first, as the parser did before)
import pandas, traceview.loading, traceview.parsers.kineto, traceview.parsers.kineto.parallel
import traceview.discovery, traceview.runtime
traceview.discovery.registered_formats()
# the parse as the traceview command runs it: with the command's heap settings (traceview.runtime)
hooks = traceview.runtime.cli_parse_hooks()
path, use_cache, touch, jobs = {path!r}, {use_cache!r}, {touch!r}, {jobs!r}

def _children():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024

def _pss(pid):
    try:
        with open(f"/proc/{{pid}}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0

class _PssSampler(threading.Thread):
    # the summed PSS (shared pages split between the processes that map them) of this process and
    # its worker processes, every 50 ms: the memory the parse really holds at once
    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.stop = 0, threading.Event()

    def run(self):
        while not self.stop.wait(0.05):
            kids = []
            for f in glob.glob("/proc/self/task/*/children"):
                try:
                    kids += open(f).read().split()
                except OSError:
                    pass
            self.peak = max(self.peak, _pss("self") + sum(_pss(k) for k in kids))

def _touch_all(trace):
    # read one byte of every page of every column buffer: a cached load memory-maps the Arrow
    # file, so without this nothing has been read from it yet
    import numpy as np
    import pyarrow as pa
    total = 0
    for tbl in (trace.events, trace.links, trace.steps):
        for col in tbl.columns:
            for chunk in col.chunks:
                arrays = [chunk] + ([chunk.dictionary] if pa.types.is_dictionary(chunk.type) else [])
                for arr in arrays:
                    for buf in arr.buffers():
                        if buf is not None and buf.size:
                            total += int(np.frombuffer(buf, dtype=np.uint8)[::4096].sum())
    return total

children_cpu0, _ = _children()
sampler = _PssSampler()
sampler.start()
with _Timer() as t:
    trace = traceview.load(path, use_cache=use_cache, jobs=jobs, hooks=hooks)
    if touch:
        _touch_all(trace)
sampler.stop.set()
sampler.join()
children_cpu, children_rss = _children()
rank = next(iter(trace.ranks.values()))
_report(t, rows=trace.events.num_rows, links=trace.links.num_rows,
        events_read=rank.event_counts.get("events_read"), children_cpu=children_cpu - children_cpu0,
        children_peak_rss=children_rss, peak_pss_all=sampler.peak)
"""

#: one parse with a clock on its phases (``--phases``): the parent's wall and CPU seconds per phase,
#: and each range a worker process parsed (when it began, its parse and result-writing times)
PHASES_CHILD = """
import time, resource
from pathlib import Path
import pandas  # as in TRACEVIEW_CHILD
import traceview.discovery, traceview.runtime, traceview.parsers.kineto as kineto, traceview.parsers.kineto.parallel
traceview.discovery.registered_formats()
hooks = traceview.runtime.cli_parse_hooks()  # as the traceview command parses
path, jobs = {path!r}, {jobs!r}
clock = kineto.PhaseClock()
children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
origin, main_cpu, faults = time.monotonic(), time.thread_time(), kineto.minor_page_faults()
with _Timer() as t:
    trace = kineto.parse_kineto(Path(path), jobs=jobs, clock=clock, hooks=hooks)
main_cpu = time.thread_time() - main_cpu
faults = kineto.minor_page_faults() - faults
children = resource.getrusage(resource.RUSAGE_CHILDREN)
_report(t, phases=clock.phases, workers=[dict(w, began_s=w["began_s"] - origin) for w in clock.workers],
        main_cpu=main_cpu, faults=faults,
        children_cpu=children.ru_utime + children.ru_stime - children0.ru_utime - children0.ru_stime,
        rows=trace.events.num_rows)
"""

#: msgspec's typed decode of the whole file: the reference bench_kineto_native.py times too
#: (benchmarks/_msgspec_ref.py: structs of the fields traceview's parser reads; not imported from
#: traceview, so the figure is msgspec's); the structs are freed after the timer
MSGSPEC_CHILD = """
import gzip, sys
sys.path.insert(0, {here!r})
import _msgspec_ref
path = {path!r}
data = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
with _Timer() as t:
    doc = _msgspec_ref.decode(data)
n = len(doc.traceEvents)
del doc
_report(t, events=n)
"""

HTA_CHILD = """
import logging
from hta.configs.config import logger
logger.setLevel(logging.ERROR)
import warnings
warnings.simplefilter("ignore")
from hta.common.trace import parse_trace_file
from hta.configs.parser_config import ParserBackend, ParserConfig
cfg = ParserConfig.get_default_cfg()
cfg.set_parser_backend(ParserBackend({backend!r}))
with _Timer() as t:
    meta, df, symbols = parse_trace_file({path!r}, cfg)
_report(t, rows=len(df))
"""


def _generator_digest() -> str:
    return hashlib.sha256(Path(gen_kineto.__file__).read_bytes()).hexdigest()[:16]


def ensure_trace(out_dir: Path, size_mb: float, seed: int) -> tuple[Path, dict]:
    """Generate the trace unless a file made by the same generator with the same settings exists."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"kineto_{size_mb:g}mb.json"
    side = path.with_name(path.name + ".meta.json")
    want = {"size_mb": size_mb, "seed": seed, "generator": _generator_digest()}
    if path.exists() and side.exists():
        try:
            meta = json.loads(side.read_text())
            if all(meta.get(k) == v for k, v in want.items()) and meta.get("bytes") == path.stat().st_size:
                print(f"reusing {path} ({mb(meta['bytes']):.1f} MB, {meta['events']:,} events)")
                return path, meta
        except (OSError, ValueError):
            pass
    print(f"generating {path} (>= {size_mb:g} MB) ...", flush=True)
    res = gen_kineto.generate(path, size_mb=size_mb, seed=seed, quiet=True)
    meta = dict(want, bytes=res["bytes"], events=res["events"], steps=res["steps"])
    side.write_text(json.dumps(meta, indent=1))
    print(f"  {mb(res['bytes']):.1f} MB, {res['events']:,} events, {res['steps']} steps, "
          f"in {res['seconds']:.1f} s")
    return path, meta


def warm_page_cache(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(16 << 20):
            pass


def measure(label: str, python: str, code: str, runs: int, *, env: dict | None = None,
            timeout: float | None = None) -> Series:
    series = Series(label)
    for i in range(runs):
        r = run_child(python, code, env=env, timeout=timeout)
        series.runs.append(r)
        print(f"  {label} run {i + 1}/{runs}: {r['seconds']:.2f} s, cpu {r['cpu_seconds']:.2f} s, "
              f"peak RSS {mb(r['peak_rss']):.0f} MB", flush=True)
    return series


def code_version() -> str:
    """Which traceview was measured: git HEAD, plus a digest of the parser when it has local edits."""
    import subprocess
    root = HERE.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "parsers", "traceview"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    digest = hashlib.sha256()
    for module in sorted((root / "parsers" / "kineto").glob("*.py")):  # the parser's package
        digest.update(module.read_bytes())
    return f"{head or '?'}{' + local edits' if dirty else ''} (parsers/kineto/*.py sha256 {digest.hexdigest()[:10]})"


def _jobs_key(jobs: int) -> str:
    return "tv" if jobs == 1 else f"tv_j{jobs}"


def measure_cache(path: Path, args: argparse.Namespace, cache: str, results: dict) -> str:
    """The cached loads (warm-up, then as returned and reading every page); returns a note."""
    env = {"TRACEVIEW_CACHE_DIR": cache}
    print("traceview, cache warm-up (parses and writes the cache):", flush=True)
    warm = measure("warm-up", args.python, TRACEVIEW_CHILD.format(path=str(path), use_cache=True, touch=False,
                                                                    jobs=None), 1, env=env)
    cache_files = list(Path(cache).iterdir())
    cache_bytes = sum(p.stat().st_size for p in cache_files)
    print(f"  cache: {len(cache_files)} files, {mb(cache_bytes):.0f} MB")
    for key, touch in (("cache", False), ("cache_read", True)):
        what = "and reading every page of it" if touch else "as returned (memory-mapped)"
        print(f"traceview, from cache, {what} ({args.cache_runs} runs):", flush=True)
        code = TRACEVIEW_CHILD.format(path=str(path), use_cache=True, touch=touch, jobs=None)
        results[key] = measure("cached", args.python, code, args.cache_runs, env=env)
    return f"cache {mb(cache_bytes):.0f} MB in {len(cache_files)} files; the warm-up that wrote it took " \
           f"{warm.median_s:.1f} s"


def measure_gzip(path: Path, args: argparse.Namespace) -> dict:
    """--jobs 1 and 3 on a gzip copy of the trace (made once, level 6): decompression is one stream,
    done by the parent, which ships ranges of text to jobs - 1 workers (gzip uses workers only from
    3 jobs on: parsers/kineto/parallel.py GZIP_MIN_JOBS)."""
    import gzip
    import shutil

    gz = path.with_name(path.name + ".gz")
    if not gz.exists() or gz.stat().st_mtime < path.stat().st_mtime:
        print(f"writing {gz} ...", flush=True)
        with open(path, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 16 << 20)
    warm_page_cache(gz)
    out = {}
    for jobs in (1, 3):
        code = TRACEVIEW_CHILD.format(path=str(gz), use_cache=False, touch=False, jobs=jobs)
        out[jobs] = measure(f"gzip --jobs {jobs}", args.python, code, args.runs)
    return out


#: what the parent's main thread does while a helper thread makes the CPU-op links (jobs > 1)
BESIDE_HELPER = ("build: events table", "build: steps, memory, counters", "build: links, launch", "build: links, flows",
                 "build: links, fwdbwd")


def idle_estimate_s(run: dict) -> tuple[float, float]:
    """(the CPU seconds of the parent's main thread outside the stretch where it parses its own
    ranges, the wall time an idle machine with a core per process would take): each process (and
    the parent's helper thread) runs on its own core at its CPU speed, so the parse takes the main
    thread's serial part, plus the longer of its own ranges and the busiest worker's ranges (parse
    and result writing), plus what the helper thread takes beyond the main thread's work beside
    it. With one job: the main thread's CPU time."""
    phases = run["phases"]

    def cpu(name: str) -> float:
        return phases.get(name, [0.0, 0.0])[1]

    own = cpu("parallel: parse own ranges")
    serial = run["main_cpu"] - own
    per_worker: dict[int, float] = {}
    for w in run["workers"]:
        per_worker[w["pid"]] = per_worker.get(w["pid"], 0.0) + w["parse_cpu_s"] + w["dump_cpu_s"]
    helper = cpu("build: links, cpu_op (helper thread)")
    beyond = max(0.0, helper - sum(map(cpu, BESIDE_HELPER))) if helper else 0.0
    return serial, serial + max([own, *per_worker.values()]) + beyond


def measure_phases(path: Path, args: argparse.Namespace) -> None:
    """``--phases``: the parse's phases, ``--jobs`` values interleaved run by run, medians printed;
    with ``--glibc-heap`` each also with glibc's own heap settings (``TRACEVIEW_PARSE_HEAP=0``:
    what ``traceview.runtime.parse_heap`` changes), interleaved with the others, wall medians."""
    runs: dict[int, list[dict]] = {jobs: [] for jobs in args.jobs}
    glibc: dict[int, list[float]] = {jobs: [] for jobs in args.jobs} if args.glibc_heap else {}
    loads = [os.getloadavg()[0]]
    for i in range(args.runs):
        for jobs in args.jobs:
            r = run_child(args.python, PHASES_CHILD.format(path=str(path), jobs=jobs))
            runs[jobs].append(r)
            print(f"  --jobs {jobs} run {i + 1}/{args.runs}: {r['seconds']:.3f} s, cpu {r['cpu_seconds']:.3f} s "
                  f"+ workers {r['children_cpu']:.3f} s", flush=True)
            if glibc:
                g = run_child(args.python, PHASES_CHILD.format(path=str(path), jobs=jobs),
                              env={"TRACEVIEW_PARSE_HEAP": "0"})
                glibc[jobs].append(g["seconds"])
        loads.append(os.getloadavg()[0])
    print_phases(runs)
    for jobs, seconds in glibc.items():
        print(f"--jobs {jobs} with glibc's own heap settings (TRACEVIEW_PARSE_HEAP=0): median wall "
              f"{_median(seconds):.3f} s against {_median(r['seconds'] for r in runs[jobs]):.3f} s")
    if 1 in glibc and 2 in glibc:
        print(f"with glibc's own heap settings, wall medians --jobs 2 over --jobs 1: "
              f"{_median(glibc[1]) / _median(glibc[2]):.2f}x")
    estimates = {jobs: _median(idle_estimate_s(r)[1] for r in rs) for jobs, rs in runs.items()}
    walls = {jobs: _median(r["seconds"] for r in rs) for jobs, rs in runs.items()}
    if 1 in runs and 2 in runs:
        print(f"idle-machine estimate --jobs 2 over --jobs 1: {estimates[1] / estimates[2]:.2f}x "
              f"(target >= {TARGET_TWO_WORKERS:g}x); wall medians here {walls[1] / walls[2]:.2f}x; "
              f"load average {min(loads):.2f}-{max(loads):.2f}")


def _median(values: Any) -> float:
    import statistics

    return statistics.median(values)


def _phase_entry(run: dict, name: str) -> list:
    """A phase's [wall s, CPU s, times entered, page faults] in one run (zeros where it did not run)."""
    return run["phases"].get(name, [0.0, 0.0, 0, 0])


def print_phases(runs: dict[int, list[dict]]) -> None:
    """The medians of each phase, of the workers' ranges and of the idle-machine estimate."""
    names = list(dict.fromkeys(name for rs in runs.values() for r in rs for name in r["phases"]))
    headers = ["phase (parent process)"] + [f"--jobs {j} {what}" for j in runs
                                             for what in ("wall s", "CPU s", "faults k")]
    # page faults: memory touched for the first time (~2 us a 4 KiB page on the benchmark machine)
    rows = [[name] + [f"{_median(_phase_entry(r, name)[k] for r in rs) / (1000 if k == 3 else 1):.3f}"
                      for rs in runs.values() for k in (0, 1, 3)] for name in names]
    for label, key in (("main thread", "main_cpu"), ("all the parent's threads", "cpu_seconds")):
        cells = []
        for rs in runs.values():  # wall, CPU, the whole process's page faults
            cells += [f"{_median(r['seconds'] for r in rs):.3f}", f"{_median(r[key] for r in rs):.3f}",
                      f"{_median(r['faults'] for r in rs) / 1000:.3f}"]
        rows.append([f"whole parse (CPU: {label})", *cells])
    print(table(headers, rows))
    for jobs, rs in runs.items():
        work = [r for r in rs if r["workers"]]
        if work:
            sums = {f: _median(sum(w[f] for w in r["workers"]) for r in work)
                    for f in ("parse_s", "parse_cpu_s", "dump_s", "dump_cpu_s", "parse_faults", "dump_faults")}
            first = _median(min(w["began_s"] for w in r["workers"]) for r in work)
            print(f"--jobs {jobs}: {len(work[0]['workers'])} ranges parsed by workers; the first began {first:.3f} s "
                  "after the call; " + ", ".join(f"{f} {v:.3f}" if f.endswith("_s") else f"{f} {v:,.0f}"
                                                 for f, v in sums.items()) + " (medians of the sums)")
        serial, estimate = (_median(x) for x in zip(*map(idle_estimate_s, rs)))
        everything = _median(r["cpu_seconds"] + r["children_cpu"] for r in rs)
        print(f"--jobs {jobs}: the parent main thread's serial CPU {serial:.3f} s; idle-machine estimate "
              f"{estimate:.3f} s (median wall here {_median(r['seconds'] for r in rs):.3f} s, CPU of all processes "
              f"{everything:.3f} s)")


def with_workers(series: Series) -> tuple[float, int]:
    """(median CPU seconds including the worker processes, peak summed PSS of the process and its
    workers sampled every 50 ms; the process's VmHWM where nothing was sampled)."""
    import statistics

    cpu = statistics.median(r["cpu_seconds"] + r.get("children_cpu", 0.0) for r in series.runs)
    return cpu, max(max(r.get("peak_pss_all", 0), r["peak_rss"]) for r in series.runs)


def print_report(path: Path, version: str, json_bytes: int, events: int | None, results: dict, gz: dict,
                 note: str) -> None:
    size_mb = mb(json_bytes)
    print()
    print(f"trace: {path}: {size_mb:.1f} MB JSON" + (f", {events:,} events" if events else ""))
    print(f"traceview: {version}; {machine_line()}")
    headers = ["loader", "runs", "median s", "range s", "MB/s", "CPU s", "cores", "MB/s/core", "events/s",
               "peak MB", "peak/file"]
    labels = {"cache": "traceview, cached (mmap)", "cache_read": "traceview, cached + read all",
              "hta": "HTA parse_trace_file", "msgspec": "msgspec typed decode (whole file)"}
    series = [(labels.get(k) or f"{s.label}, no cache", s) for k, s in results.items()]
    series += [(f"{s.label} (.gz)", s) for s in gz.values()]
    rows = []
    for label, s in series:
        cpu, rss = with_workers(s)
        rows.append([label, len(s.runs), f"{s.median_s:.3f}", s.spread(), f"{size_mb / s.median_s:.0f}",
                     f"{cpu:.2f}", f"{cpu / s.median_s:.2f}", f"{size_mb / max(cpu, 1e-9):.0f}",
                     fmt_rate(events / s.median_s) if events else "?", f"{mb(rss):.0f}", f"{rss / json_bytes:.2f}"])
    print(table(headers, rows))
    print("MB/s = MB of JSON / median wall s; CPU s = user+sys of the process and its worker processes; MB/s/core = "
          "MB / median CPU s, which a busy machine disturbs less than wall time; peak = the larger of the process's "
          "VmHWM and the summed PSS of it and its workers sampled every 50 ms; the msgspec row holds the file's "
          "bytes too.")
    print()
    print(table(["measure", "measured", "target", ""], [[a, b, c, check(ok)] for a, b, c, ok in
                                                         target_lines(size_mb, json_bytes, results, gz)]))
    tv = results["tv"]
    print(f"({note}; HTA peak RSS / traceview's: "
          f"{results['hta'].peak_rss / tv.peak_rss:.1f}x)" if "hta" in results else f"({note})")
    print(f"traceview output: {tv.runs[0].get('rows'):,} events, {tv.runs[0].get('links'):,} links; RSS before the "
          f"load (interpreter + imports): {mb(tv.runs[0]['rss_before']):.0f} MB")


def target_lines(size_mb: float, json_bytes: int, results: dict, gz: dict) -> list:
    tv = results["tv"]
    per_core = size_mb / tv.median_cpu
    lines = [
        ("traceview --jobs 1 speed per core", f"{per_core:.0f} MB/s/core (wall: {size_mb / tv.median_s:.0f} MB/s)",
         f">= {TARGET_MB_S_PER_CORE_ISSUE12:g} MB/s/core (issue 12; {TARGET_MB_S_PER_CORE:g} before)",
         per_core >= TARGET_MB_S_PER_CORE_ISSUE12),
        ("traceview --jobs 1 peak RSS / file", f"{tv.peak_rss / json_bytes:.2f}x ({mb(tv.peak_rss):.0f} MB)",
         f"<= {TARGET_RSS_RATIO:g}x", tv.peak_rss <= TARGET_RSS_RATIO * json_bytes),
    ]
    two = results.get("tv_j2")
    if two is not None:
        ratio = tv.median_s / two.median_s
        _, rss = with_workers(two)
        lines.append(("--jobs 2 wall speed-up over --jobs 1", f"{ratio:.2f}x ({size_mb / two.median_s:.0f} MB/s)",
                      f">= {TARGET_TWO_WORKERS:g}x (idle 2-core machine)", ratio >= TARGET_TWO_WORKERS))
        lines.append(("--jobs 2 peak memory (all its processes) / file", f"{rss / json_bytes:.2f}x",
                      f"<= {TARGET_RSS_RATIO:g}x", rss <= TARGET_RSS_RATIO * json_bytes))
    ms = results.get("msgspec")
    if ms is not None:
        ratio = ms.median_cpu / tv.median_cpu
        lines.append(("--jobs 1 speed / msgspec typed decode", f"{ratio:.2f}x (msgspec {size_mb / ms.median_cpu:.0f} "
                      "MB/s/core)", f">= {TARGET_VS_MSGSPEC:g}x", ratio >= TARGET_VS_MSGSPEC))
    if gz:
        ratio = gz[1].median_s / gz[3].median_s
        lines.append(("gzip: --jobs 3 (parent + 2 workers) over --jobs 1", f"{ratio:.2f}x", "(no target)", True))
    if "cache" in results:
        speedup = tv.median_s / results["cache"].median_s
        speedup_read = tv.median_s / results["cache_read"].median_s
        lines.append(("cache speed-up (no-cache / cached)", f"{speedup:.0f}x (reading every page: {speedup_read:.0f}x)",
                      f">= {TARGET_CACHE_SPEEDUP:g}x", min(speedup, speedup_read) >= TARGET_CACHE_SPEEDUP))
    if "hta" in results:
        hta = results["hta"]
        best = min((s for k, s in results.items() if k.startswith("tv")), key=lambda s: s.median_s)
        vs = hta.median_s / best.median_s
        lines.append(("traceview vs HTA load speed", f"{vs:.1f}x wall ({best.label}), "
                      f"{hta.median_cpu / tv.median_cpu:.1f}x CPU time (--jobs 1)", f">= {TARGET_VS_HTA:g}x",
                      vs >= TARGET_VS_HTA))
    return lines


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=500.0, help="size of the generated trace (default 500)")
    ap.add_argument("--trace", type=Path, help="benchmark this existing trace instead of a generated one")
    ap.add_argument("--out-dir", type=Path, default=HERE / "out")
    ap.add_argument("--seed", type=int, default=gen_kineto.SEED)
    ap.add_argument("--python", default=sys.executable, help="Python with traceview installed")
    ap.add_argument("--runs", type=int, default=3, help="no-cache runs (median; default 3)")
    ap.add_argument("--cache-runs", type=int, default=5, help="cached runs (median; default 5)")
    ap.add_argument("--hta-python", default=DEFAULT_HTA_PYTHON,
                    help=f"Python with holistictraceanalysis installed (default {DEFAULT_HTA_PYTHON})")
    ap.add_argument("--hta-backend", default="ijson_batch_and_compress",
                    choices=["json", "ijson", "ijson_batched", "ijson_batch_and_compress"],
                    help="HTA parser backend (default ijson_batch_and_compress: the fastest measured, see README)")
    ap.add_argument("--hta-runs", type=int, default=1)
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the results here as JSON")
    ap.add_argument("--jobs", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2],
                    help="--jobs values to measure, comma-separated (default 1,2; 1 is always measured)")
    ap.add_argument("--no-cache-runs", action="store_true", help="skip the cached loads")
    ap.add_argument("--gzip", action="store_true", help="also measure a gzip copy with --jobs 1 and 2")
    ap.add_argument("--phases", action="store_true",
                    help="only the parse's phases (parent's wall and CPU per phase, workers' ranges) for each --jobs "
                         "value, runs interleaved, and an idle-machine estimate from CPU times")
    ap.add_argument("--glibc-heap", action="store_true",
                    help="with --phases: also each --jobs value with glibc's own heap settings "
                         "(TRACEVIEW_PARSE_HEAP=0)")
    args = ap.parse_args(argv)
    args.jobs = sorted(set(args.jobs) | {1})

    version = code_version()
    print(f"machine: {machine_line()}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"traceview: {version}")
    if args.trace:
        path = args.trace.resolve()
        meta = {"bytes": None, "events": None}
    else:
        path, meta = ensure_trace(args.out_dir, args.size_mb, args.seed)
    json_bytes = meta.get("bytes") or path.stat().st_size
    if path.name.endswith(".gz"):
        import gzip
        with gzip.open(path, "rb") as fh:
            json_bytes = sum(len(b) for b in iter(lambda: fh.read(16 << 20), b""))
    warm_page_cache(path)
    if args.phases:
        measure_phases(path, args)
        return 0

    results: dict[str, Series] = {}
    print(f"traceview, no cache ({args.runs} runs):", flush=True)
    for jobs in args.jobs:
        code = TRACEVIEW_CHILD.format(path=str(path), use_cache=False, touch=False, jobs=jobs)
        results[_jobs_key(jobs)] = measure(f"traceview --jobs {jobs}", args.python, code, args.runs)
    events = meta.get("events") or results["tv"].runs[0].get("events_read")
    import _msgspec_ref  # the description only: the child imports it again
    print(f"msgspec typed decode of the whole file ({args.runs} runs): {_msgspec_ref.DESCRIPTION}", flush=True)
    code = MSGSPEC_CHILD.format(path=str(path), here=str(HERE))
    results["msgspec"] = measure("msgspec", args.python, code, args.runs)
    gz_results = measure_gzip(path, args) if args.gzip else {}

    note = "cache not measured (--no-cache-runs)"
    if not args.no_cache_runs:
        with tempfile.TemporaryDirectory(prefix="tv-bench-cache-") as cache:
            note = measure_cache(path, args, cache, results)

    hta_version = None
    if not args.no_hta:
        hta_version = probe(args.hta_python, "hta", "holistictraceanalysis")
        if hta_version is None:
            print(f"HTA: not importable from {args.hta_python}: skipped (see README for the venv)")
        else:
            print(f"HTA {hta_version} ({args.hta_python}), hta.common.trace.parse_trace_file, "
                  f"backend={args.hta_backend} ({args.hta_runs} run):", flush=True)
            code = HTA_CHILD.format(path=str(path), backend=args.hta_backend)
            try:
                results["hta"] = measure("HTA", args.hta_python, code, args.hta_runs, timeout=4 * 3600)
                results["hta"].note = f"HTA {hta_version}, parse_trace_file, backend {args.hta_backend}"
            except ChildError as exc:
                print(f"HTA failed: {exc}")

    print_report(path, version, json_bytes, events, results, gz_results, note)
    if args.json:
        payload = {
            "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine_line(), "traceview": version,
            "trace": str(path), "json_bytes": json_bytes, "events": events,
            "results": {k: {"runs": s.runs, "median_s": s.median_s, "median_cpu_s": s.median_cpu,
                            "cores": s.cores, "peak_rss": s.peak_rss, "note": s.note} for k, s in results.items()},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
