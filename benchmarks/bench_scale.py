#!/usr/bin/env python3
"""Whole-job benchmark: a job (``traceview.jobs``) on a generated job larger than half of RAM.

    python benchmarks/bench_scale.py                              # 64 ranks x 210 MB (> 12 GiB of JSON)
    python benchmarks/bench_scale.py --ranks 8 --size-mb 20       # quick check
    python benchmarks/bench_scale.py --job DIR                    # an existing job (gen_job.py output)
    python benchmarks/bench_scale.py --small-ranks 128 --workers-list 2 --no-warm --reduce-ranks 0 --dask
                                                  # 1,024 small real ranks, local processes and Dask

It generates the job with ``gen_job.py`` into ``benchmarks/out/`` (unless ``--job``), checks the
free disk first, then runs ``traceview.pipeline.analyze(job, executor=LocalProcesses(n))`` in a fresh
driver process per configuration:

1. ``--workers`` 1, then 2 (``--workers-list``), each with an empty ``TRACEVIEW_CACHE_DIR``: a
   first analysis (parse, write the Arrow cache, analyse, reduce);
2. the last worker count again on the warm cache (what a second look at the same job costs);
   with ``--dask``, each cold run is also made on a ``dask.distributed`` ``LocalCluster`` the
   benchmark starts on this machine (that many single-threaded worker processes; the cluster's
   start is timed apart), through ``traceview.jobs.DaskCluster``;
3. the driver's reduce alone at ``--reduce-ranks`` ranks (default 1,024 and 4,096): rank 0's
   result (with ``--reduce-tables``, default "whole": ``Options(whole_only=True)``) is replicated
   (each replica renumbered, with its own clock offset and arrival jitter), and the core's
   ``reduce_batches`` and ``build_report`` run on all of them in a fresh process: their time and peak
   RSS, and the RSS of the driver just holding the results, are what a job of that many ranks costs
   the driver.

Per run: wall time, ranks per second, uncompressed MB per second, peak RSS of the driver (its own
``VmHWM``) and of every worker process (each task reads its process's ``VmHWM`` when it ends: the
high-water mark of that worker over all the ranks it analysed), the size of each rank's pickled
result (what travels to the driver), and whether the planted straggler, heavy rank and clock
offsets were found (not with ``--small-ranks``: the shared 8-rank DLRM job copied that many times,
``bench_ranks.make_job``, ranks renumbered, no planted answers), and the CPU seconds of the whole
process tree (driver and workers). ``--json FILE`` writes all figures. Caches are deleted after each run and the
generated job at the end (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _measure import machine_line, mb, run_child, table  # noqa: E402

CHILD = """
import os, json
os.environ["TRACEVIEW_CACHE_DIR"] = {cache!r}
from traceview.jobs import DaskCluster, LocalProcesses
from traceview.pipeline import analyze
cluster_seconds = None
if {dask!r}:
    import time
    from distributed import Client, LocalCluster
    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers={workers}, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    client.wait_for_workers({workers})
    cluster_seconds = time.perf_counter() - t0
    executor = DaskCluster(client)
else:
    executor = LocalProcesses({workers})
with _Timer() as t:
    report = analyze({job!r}, use_cache=True, executor=executor)
if {dask!r}:
    client.close()
    cluster.close()
ex = report["execution"]
found = dict(ranks=ex["ranks"], missing=len(ex["missing"]), execution=ex, result_bytes=ex["result_bytes_per_rank"],
             events=report["summary"]["events"], matched=int(len(report.table("communication", "skew"))),
             cluster_seconds=cluster_seconds, map_seconds=ex["seconds"])
truth_path = os.path.join({job!r}, "truth.json")
if os.path.exists(truth_path):
    truth = json.load(open(truth_path))
    strag = [f["rank"] for f in report["findings"] if f["code"] == "straggler_rank"]
    heavy = [f["rank"] for f in report["findings"] if f["code"] == "compute_imbalance"]
    planted = {{int(r): v for r, v in truth["clock"]["offset_ns"].items()}}
    alignment = report.table("communication", "alignment")
    est = dict(zip(alignment["rank"].tolist(), alignment["clock_offset_ns"].tolist()))
    diffs = sorted(est[r] - planted[r] for r in est)
    med = diffs[len(diffs) // 2] if diffs else 0
    found.update(straggler_found=strag, straggler_planted=truth["straggler"]["rank"], heavy_found=heavy,
                 heavy_planted=truth["heavy_rank"]["rank"],
                 offset_error_max_ns=max(abs(d - med) for d in diffs) if diffs else None)
_report(t, **found)
"""


SAMPLE_CHILD = """
import pickle
from traceview.findings import Options
from traceview.jobs import FileTask, analyze_file
with _Timer() as t:
    res = analyze_file(FileTask({path!r}, 0, Options(whole_only={whole_only!r}), use_cache=False))
open({out!r}, "wb").write(pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL))
rr = res.batch
tables, gathered = rr.unpack()
# uncompressed pickled sizes of the parts (the payload travels zlib-compressed)
parts = {{"findings": len(pickle.dumps(rr.findings)), "info": len(pickle.dumps(rr.infos)),
          "warnings": len(pickle.dumps(rr.warnings)), "summary": len(pickle.dumps(rr.summaries)),
          "packed_payload": len(rr.payload)}}
for name, part in gathered.items():
    parts["cross_rank_inputs." + name] = len(pickle.dumps(part))
for name, ts in tables.items():
    parts["tables." + name] = len(pickle.dumps(ts))
_report(t, result_bytes=res.stats["result_bytes"], parts=parts, kernels=len(gathered["communication"].kernels))
"""

REDUCE_CHILD = """
import dataclasses, pickle, numpy as np, pandas as pd
from traceview.claims import Claims, gpu_key, split_gpu_key
from traceview.findings import Options
from traceview.pipeline import reduce_batches
from traceview.report import TraceOverview, build_report
blob = open({sample!r}, "rb").read()
rng = np.random.default_rng(0)
n = {ranks}


def renumbered(frame, rank):
    if isinstance(frame, pd.DataFrame) and "rank" in frame and len(frame):
        frame = frame.copy()
        frame["rank"] = np.full(len(frame), rank, dtype=frame["rank"].dtype)
    return frame


def moved_claims(claims, rank):
    # a replica's findings claim its own GPUs' time (as a real rank's do)
    if claims is None or not len(claims):
        return claims
    _, device = split_gpu_key(claims.key)
    return Claims(gpu_key(rank, device), claims.start_ns, claims.end_ns, normalized=True)


ranks, infos, summaries = [], {{}}, {{}}
for i in range(n):
    rr = pickle.loads(blob).batch
    (old_rank,) = rr.ranks
    info, summary = rr.infos[old_rank], rr.summaries[old_rank]
    info.rank = i
    rr.ranks, rr.infos, rr.summaries = [i], {{i: info}}, {{i: summary}}
    rr.warnings = {{a: [(i, w) for _, w in ws] for a, ws in rr.warnings.items()}}
    tables, gathered = rr.unpack()
    tables = {{a: {{t: renumbered(f, i) for t, f in ts.items()}} for a, ts in tables.items()}}
    for found in rr.findings.values():
        for f in found:
            f.rank = i if f.rank is not None else None
            f.claims = moved_claims(f.claims, i)
    for name, part in list(gathered.items()):
        if hasattr(part, "renumber"):
            part = part.renumber({{old_rank: i}})
        else:  # every frame of the inputs with a rank column
            part = dataclasses.replace(part, **{{fld.name: renumbered(getattr(part, fld.name), i)
                                                for fld in dataclasses.fields(part)}})
        gathered[name] = part
    c = gathered["communication"]
    k = c.kernels
    # each replica: its own clock offset, arrival jitter and end jitter
    off = int(rng.integers(-2_000_000, 2_000_000))
    k["start"] = k["start"].to_numpy() + off + rng.integers(0, 300_000, len(k))
    k["end"] = k["end"].to_numpy() + off + rng.integers(-150, 150, len(k))
    rr.tables, rr.gathered, rr.payload = tables, gathered, b""
    rr.pack()  # as it arrives from a worker
    ranks.append(rr)
    infos[i], summaries[i] = info, summary
del blob
import gc; gc.collect()
held = _status_bytes("VmRSS")
options = Options(whole_only={whole_only!r})
with _Timer() as t:
    reduced = reduce_batches(ranks, options)
    reduce_seconds = _time.perf_counter() - t.t0
    report = build_report(TraceOverview(infos, summaries), reduced.results, options=options,
                          table_rows=reduced.table_rows)
_report(t, ranks=n, rss_holding_results=held, matched=int(len(report.table("communication", "skew"))),
        reduce_seconds=reduce_seconds, findings=len(report["findings"]),
        arrivals=int(len(report.table("communication", "arrivals"))))
"""


#: what the reduce figures are measured against
REDUCE_TARGET = "target (issue 31): the reduce of 4,096 ranks in < 30 s, the driver's peak < 2 GB"


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def generate(out: Path, ranks: int, size_mb: float, layers: int, bucket_layers: int, workers: int) -> dict:
    import gen_job

    meta = out / "truth.json"
    want = {"ranks": ranks, "size_mb": size_mb, "layers": layers, "bucket_layers": bucket_layers}
    if meta.exists():
        truth = json.loads(meta.read_text())
        if truth.get("bench_args") == want and all(Path(f["path"]).exists() for f in truth["files"]):
            print(f"reusing {out} ({truth['total_bytes'] / 1e9:.2f} GB)")
            return truth
    if out.exists():
        shutil.rmtree(out)
    print(f"generating {ranks} ranks x {size_mb} MB into {out} with {workers} processes ...", flush=True)
    t0 = time.perf_counter()
    truth = gen_job.generate(out, ranks=ranks, size_mb=size_mb, layers=layers, bucket_layers=bucket_layers,
                             workers=workers, quiet=False)
    truth["bench_args"] = want
    meta.write_text(json.dumps(truth, indent=1, sort_keys=True))
    print(f"generated {truth['total_bytes'] / 1e9:.2f} GB in {time.perf_counter() - t0:.0f} s", flush=True)
    return truth


def run(job: Path, workers: int, cache: Path, python: str, dask: bool = False) -> dict:
    """One whole job in a fresh driver process; ``tree_cpu_seconds``: the CPU of that process and
    of every process it waited for (its workers)."""
    code = CHILD.format(cache=str(cache), job=str(job), workers=workers, dask=dask)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()
    res = run_child(python, code, timeout=6 * 3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    res["tree_cpu_seconds"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    res["load_before"], res["load_after"] = load, os.getloadavg()
    return res


def small_ranks_job(out: Path, copies: int) -> tuple[Path, dict]:
    """The shared 8-rank DLRM job copied ``copies`` times into ``out`` (``bench_ranks.make_job``: copy c
    of rank r states rank r + 8c), and a truth-like summary of its files (no planted answers)."""
    from bench_ranks import SOURCE_JOB, make_job

    job = out / f"dlrm_small_ranks_x{copies}"
    shutil.rmtree(job, ignore_errors=True)
    job.mkdir(parents=True)
    files = make_job(SOURCE_JOB, job, copies)
    listed = [{"path": str(f), "bytes": f.stat().st_size, "rank": i} for i, f in enumerate(files)]
    return job, {"files": listed, "small_ranks": True}


def job_of(a: argparse.Namespace) -> tuple[Path, dict] | None:
    """The job to measure and its truth.json (generated, given, or the small real ranks); None when
    the disk has no room to generate it."""
    if a.small_ranks:
        job, truth = small_ranks_job(a.out, a.small_ranks)
    elif a.job is None:
        job = a.out / f"job_{a.ranks}x{a.size_mb:g}mb"
        need = a.ranks * a.size_mb * 1e6 * 1.5  # the JSON + one Arrow cache (~40% of it) + margin
        have = shutil.disk_usage(a.out if a.out.exists() else a.out.parent).free
        if not (job / "truth.json").exists() and have < need:
            print(f"not enough disk: {have / 1e9:.1f} GB free, {need / 1e9:.1f} GB needed", file=sys.stderr)
            return None
        a.out.mkdir(parents=True, exist_ok=True)
        truth = generate(job, a.ranks, a.size_mb, a.layers, a.bucket_layers, a.gen_workers)
    else:
        job = a.job
        truth = json.loads((job / "truth.json").read_text())
    return job, truth


def whole_job_runs(a: argparse.Namespace, job: Path, plan: list[tuple[int, str]]) -> list[dict]:
    """The whole-job runs of ``plan`` ((workers, cache kind)), each in a fresh driver process; a cold
    run starts from an empty cache."""
    runs: list[dict] = []
    cache = Path(tempfile.mkdtemp(prefix="bench-scale-cache-", dir=str(a.out)))
    try:
        for workers, kind in plan:
            if kind.startswith("cold"):
                shutil.rmtree(cache, ignore_errors=True)
                cache.mkdir(parents=True)
            print(f"analysing with {workers} worker(s), {kind} cache ...", flush=True)
            res = run(job, workers, cache, a.python, dask=kind.endswith("dask"))
            res.update(workers=workers, cache=kind, cache_bytes=dir_bytes(cache))
            ex = res["execution"]
            started = f", cluster started in {res['cluster_seconds']:.1f} s" if res["cluster_seconds"] else ""
            print(f"  {res['seconds']:.1f} s (map {res['map_seconds']:.1f} s){started}, "
                  f"{res['ranks'] / res['seconds']:.2f} ranks/s, "
                  f"CPU of the process tree {res['tree_cpu_seconds']:.1f} s, "
                  f"driver peak {mb(res['peak_rss']):.0f} MB, worker peak {mb(ex['max_worker_peak_rss']):.0f} MB, "
                  f"straggler {res.get('straggler_found')} (planted {res.get('straggler_planted')}), "
                  f"load {' '.join(f'{x:.2f}' for x in res['load_before'])} before, "
                  f"{' '.join(f'{x:.2f}' for x in res['load_after'])} after", flush=True)
            runs.append(res)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return runs


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--size-mb", type=float, default=210.0, help="uncompressed MB per rank (default 210: 64 "
                    "ranks make 13.4 GB = 12.5 GiB, more than half of a 24 GiB machine)")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--bucket-layers", type=int, default=4)
    ap.add_argument("--workers-list", default="1,2", help="worker counts to measure (default 1,2)")
    ap.add_argument("--job", type=Path, help="an existing job directory (with truth.json) instead")
    ap.add_argument("--small-ranks", type=int, default=0, metavar="COPIES",
                    help="instead: the shared 8-rank DLRM job copied COPIES times (128: 1,024 small real ranks)")
    ap.add_argument("--dask", action="store_true", help="also run each cold configuration on a dask.distributed "
                    "LocalCluster of that many worker processes started here")
    ap.add_argument("--out", type=Path, default=HERE / "out", help="where the job is generated")
    ap.add_argument("--gen-workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-warm", action="store_true", help="skip the run on the warm cache")
    ap.add_argument("--keep", action="store_true", help="keep the generated job")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", type=Path, help="where all figures go (default: bench_scale.json in --out)")
    ap.add_argument("--reduce-ranks", default="1024,4096", help="after the runs, replicate rank 0's result "
                    "into this many ranks (comma-separated list) and time the driver's reduce alone, with "
                    "its peak RSS (default 1024,4096; 0: skip)")
    ap.add_argument("--reduce-only", action="store_true", help="only the reduce measurement (needs --job)")
    ap.add_argument("--reduce-tables", default="whole", choices=("all", "whole"),
                    help="per-rank tables in the replicated result (default whole: what a job of thousands of "
                         "ranks keeps: Options(whole_only=True), see traceview.pipeline.bound_rank_tables)")
    a = ap.parse_args(argv)
    a.json = a.json or a.out / "bench_scale.json"

    print(machine_line())
    chosen = job_of(a)
    if chosen is None:
        return 2
    job, truth = chosen
    total = sum(f["bytes"] for f in truth["files"])
    if a.small_ranks:
        print(f"job: {len(truth['files'])} small real ranks (DLRM x {a.small_ranks}), {total / 1e6:.1f} MB gzip JSON")
    else:
        print(f"job: {len(truth['files'])} ranks, {total / 1e9:.2f} GB JSON ({total / 2**30:.2f} GiB), "
              f"{truth['straggler']['collectives']} collectives per rank, {truth['job']['steps']} steps per rank")

    a.out.mkdir(parents=True, exist_ok=True)  # the cache and the sample go there, also with --job
    counts = [int(x) for x in a.workers_list.split(",") if x.strip()]
    plan = [(w, "cold") for w in counts] + ([] if a.no_warm else [(counts[-1], "warm")])
    plan += [(w, "cold, dask") for w in counts] if a.dask else []
    if a.reduce_only:
        plan = []
    runs = whole_job_runs(a, job, plan)

    reduce_runs, sample = [], None
    sizes = [int(x) for x in str(a.reduce_ranks).split(",") if x.strip() and int(x) > 0]
    if sizes:
        sample_path = a.out / "bench-scale-sample.pkl"
        first = sorted(truth["files"], key=lambda f: f["rank"])[0]["path"]  # (file order with --small-ranks)
        print(f"one rank's result, in parts ({Path(first).name}) ...", flush=True)
        whole_only = a.reduce_tables == "whole"
        sample = run_child(a.python, SAMPLE_CHILD.format(path=str(first), out=str(sample_path),
                                                          whole_only=whole_only), timeout=3600)
        sample["tables"] = a.reduce_tables
        try:
            for n in sizes:
                print(f"reduce of {n} ranks (replicas of rank 0's result) ...", flush=True)
                load = os.getloadavg()
                res = run_child(a.python, REDUCE_CHILD.format(sample=str(sample_path), ranks=n,
                                                              whole_only=whole_only), timeout=6 * 3600)
                res["load_before"], res["load_after"] = load, os.getloadavg()
                print(f"  {res['seconds']:.1f} s ({res['cpu_seconds']:.1f} s CPU; "
                      f"reduce {res['reduce_seconds']:.1f} s, "
                      f"report {res['seconds'] - res['reduce_seconds']:.1f} s), driver holding the results "
                      f"{mb(res['rss_holding_results']):.0f} MB, peak {mb(res['peak_rss']):.0f} MB, "
                      f"{res['arrivals']:,} arrivals; load {' '.join(f'{x:.2f}' for x in load)} before, "
                      f"{' '.join(f'{x:.2f}' for x in res['load_after'])} after; {REDUCE_TARGET}", flush=True)
                reduce_runs.append(res)
        finally:
            sample_path.unlink(missing_ok=True)

    rows = []
    for r in runs:
        ex = r["execution"]
        peaks = sorted(ex["worker_peak_rss"].values())
        sizes = r["result_bytes"]
        rows.append([
            f"{r['workers']} worker{'s' if r['workers'] > 1 else ''}, {r['cache']} cache",
            f"{r['seconds']:.1f}", f"{r['tree_cpu_seconds']:.1f}", f"{r['ranks'] / r['seconds']:.2f}",
            f"{total / 1e6 / r['seconds']:.0f}", f"{mb(r['peak_rss']):.0f}",
            " / ".join(f"{mb(p):.0f}" for p in peaks),
            f"{sizes['mean'] / 1e3:.0f} / {sizes['max'] / 1e3:.0f}" if sizes else "-",
            f"{r['missing']}",
        ])
    if rows:
        print()
        print(table(["run", "wall s", "tree CPU s", "ranks/s", "MB/s", "driver peak MB", "worker peak MB (each)",
                     "result kB/rank (mean / max)", "failed"], rows))
        last = runs[-1]
        if a.small_ranks:
            print(f"target (issue 31): the 1,024-rank job of small real ranks in <= 120 s on 2 cores; "
                  f"{last['matched']} matched collectives, {last['events']:,} events")
        else:
            print(f"\nfound: straggler {last['straggler_found']} (planted {last['straggler_planted']}), compute-heavy "
                  f"{last['heavy_found']} (planted {last['heavy_planted']}), clock offsets within "
                  f"{last['offset_error_max_ns']} ns of the planted ones; {last['matched']} matched collectives, "
                  f"{last['events']:,} events")
    if sample:
        print(f"\none rank's result (tables={sample['tables']}): {sample['result_bytes']:,} B pickled "
              f"({sample['kernels']} collective kernels); "
              "parts: " + ", ".join(f"{k} {v:,}" for k, v in sorted(sample["parts"].items(), key=lambda kv: -kv[1])))
    if reduce_runs:
        print(table(["reduce of", "seconds", "CPU s", "driver RSS holding results MB", "driver peak MB",
                     "arrivals rows", "load (1, 5, 15 min) before"],
                    [[f"{r['ranks']} ranks", f"{r['seconds']:.1f}", f"{r['cpu_seconds']:.1f}",
                      f"{mb(r['rss_holding_results']):.0f}", f"{mb(r['peak_rss']):.0f}", f"{r['arrivals']:,}",
                      " ".join(f"{x:.2f}" for x in r["load_before"])] for r in reduce_runs]))
        print(REDUCE_TARGET)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"machine": machine_line(), "job": str(job), "ranks": len(truth["files"]),
                                      "json_bytes": total, "runs": runs, "rank_result": sample,
                                      "reduce": reduce_runs}, indent=1, default=str))
        print(f"wrote {a.json}")
    if (a.job is None or a.small_ranks) and not a.keep:
        shutil.rmtree(job, ignore_errors=True)
        print(f"removed {job}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
