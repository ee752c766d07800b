"""Jobs (traceview.jobs): analysed rank by rank on local worker processes, on a real Dask cluster or
file by file in this process, a job gives the same report as the in-memory path; planted
stragglers, imbalance and clock offsets are found; a file that fails is reported, not fatal.

Definitions under test (docs/scaling.md, docs/metrics.md "Communication"):

- "the job path produces the same Report as the in-memory path: the JSON is equal apart from the
  ``execution`` key";
- rank numbers "follow traceview.load" and "a row column refers to a row of the events of all
  (readable) files concatenated in file order";
- "clock_offset_ns of a rank = the median, over the occurrences it took part in, of (its end - the
  median end of that occurrence)".
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import traceview
from builders import comparable_report as comparable, json_differences as differences
from traceview.errors import TraceviewError
from traceview.findings import Options
from traceview.jobs import (
    SCHEDULER_ENV,
    DaskCluster,
    FileResult,
    FileTask,
    InProcess,
    LocalProcesses,
    analyze_file,
    analyze_group,
    make_executor,
    plan_ranks,
    conflict_message,
)
from traceview.jobs.driver import interleaved
from traceview.jobs.planning import group_files
from traceview.model import RankInfo
from traceview.parsers.kineto import rank_from_filename
from traceview.pipeline import (
    analyze,
    analyze_batch,
    map_rows,
    overview_of,
    reduce_batches,
    select_rank,
)
from traceview.report import build_report

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import gen_job  # noqa: E402  (the benchmark's generator, also the known-answer source here)

SHARED = REPO.parent / "shared" / "traces"
DLRM = SHARED / "kineto" / "param_dlrm_8ranks_v100"
NSYS_2RANK = SHARED / "nsys" / "torchrun_2xh100_nccl_2026.2.sqlite"
SAMPLE_NSYS = REPO / "sample_traces" / "synthetic_nsys.sqlite"
SAMPLE_4RANK = REPO / "sample_traces" / "synthetic_4rank"
CPU_ONLY = REPO / "sample_traces" / "torch_cpu_mlp.json.gz"


# ------------------------------------------------------------------------------ helpers


def require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"traces not available: {path} is absent (../shared/traces sits beside the repo in CI)")
    return path


def assert_same_report(in_memory: Any, job: Any) -> None:
    diff = differences(comparable(in_memory), comparable(job))
    assert diff == [], f"{len(diff)} differences, first: " + "\n".join(diff[:20])


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory) -> Path:
    """A generated 8-rank job: straggler, compute-heavy rank and per-rank clock offsets planted
    (and a truth.json beside the traces, which the loader skips with a warning)."""
    out = tmp_path_factory.mktemp("job8")
    gen_job.generate(out, ranks=8, steps=4, layers=8, gz=True)
    return out


@pytest.fixture(scope="module")
def truth(job_dir: Path) -> dict:
    return json.loads((job_dir / "truth.json").read_text())


@pytest.fixture(scope="module")
def dask_cluster():
    """A real dask.distributed cluster: a scheduler and 2 single-thread workers in this process."""
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is not installed (extra 'test')")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def in_memory(job_dir: Path):
    return analyze(job_dir, use_cache=False)


@pytest.fixture(scope="module")
def local_job(job_dir: Path):
    return analyze(job_dir, use_cache=False, executor=LocalProcesses(2))


# ------------------------------------------------------------------------------ one report


def test_generated_job_same_report_on_local_processes_dask_and_in_process(in_memory, local_job, job_dir,
                                                                           dask_cluster) -> None:
    assert local_job["execution"]["executor"] == "local processes (2)"
    assert_same_report(in_memory, local_job)
    on_dask = analyze(job_dir, use_cache=False, executor=DaskCluster(dask_cluster.scheduler_address))
    assert on_dask["execution"]["executor"].startswith("dask ") and on_dask["execution"]["workers"] == 2
    assert_same_report(in_memory, on_dask)
    inline = analyze(job_dir, use_cache=False, executor=InProcess())
    assert_same_report(in_memory, inline)
    # what the execution says: every file, no failure, memory measured in the workers
    ex = local_job["execution"]
    assert ex["files"] == 8 and ex["ranks"] == 8 and ex["missing"] == [] and ex["absent_ranks"] == []
    assert len(ex["worker_peak_rss"]) == 2 and all(v > 0 for v in ex["worker_peak_rss"].values())
    assert 0 < ex["result_bytes_per_rank"]["max"] < 200_000 and ex["driver_peak_rss"] > 0


def test_dlrm_8_ranks_same_report_on_local_processes_and_dask(dask_cluster) -> None:
    path = require(DLRM)
    in_memory = analyze(path, use_cache=False)
    local = analyze(path, use_cache=False, executor=LocalProcesses(2))
    assert_same_report(in_memory, local)
    distributed = pytest.importorskip("distributed")
    with distributed.Client(dask_cluster) as client:
        assert_same_report(in_memory, analyze(path, use_cache=False, executor=DaskCluster(client)))
        assert client.status == "running"  # a client given to the executor stays open
    # the 8 DLRM ranks: clocks within a few us, so raw timestamps are used; rank 7 is the straggler
    assert local["summary"]["ranks"] == list(range(8))
    assert local.table("communication", "alignment")["clock_offset_ns"].abs().max() <= 1000
    [straggler] = [f for f in local["findings"] if f["code"] == "straggler_rank"]
    assert straggler["rank"] == 7 and straggler["evidence"]["clock_basis"] == "raw timestamps"


def test_nsight_exports_numbered_and_split_as_in_memory() -> None:
    """One export holding two ranks is split per rank; two exports are numbered 0-3 across files
    (the second file's ranks are analysed again under their new numbers); rows map back."""
    require(SAMPLE_NSYS)
    assert_same_report(analyze(SAMPLE_NSYS, use_cache=False), analyze(SAMPLE_NSYS, use_cache=False,
                                                                     executor=InProcess()))
    both = [SAMPLE_NSYS, require(NSYS_2RANK)]
    in_memory, job = analyze(both, use_cache=False), analyze(both, use_cache=False, executor=InProcess())
    assert job["summary"]["ranks"] == [0, 1, 2, 3]
    assert_same_report(in_memory, job)
    # the launches sampled for the scatter chart (more than 2,000 launches) are the same ones
    assert job["charts"]["launches"]["sampled"] and job["charts"]["launches"]["total"] > 2000


def test_file_without_a_rank_numbered_as_load_does(tmp_path) -> None:
    for f in require(SAMPLE_4RANK).iterdir():
        shutil.copy(f, tmp_path / f.name)
    shutil.copy(require(CPU_ONLY), tmp_path / "extra.json.gz")
    in_memory = analyze(tmp_path, use_cache=False)
    job = analyze(tmp_path, use_cache=False, executor=LocalProcesses(2))
    assert_same_report(in_memory, job)
    messages = [w["message"] for w in job["warnings"]]
    assert "extra.json.gz: no rank in distributedInfo or file name; treated as rank 4" in messages
    assert "truth.json: skipped, not a trace" in messages


def renumbered_copies(src: Path, out: Path, copies: int) -> int:
    """``copies`` copies of the Kineto job of ``src`` (files with a distributedInfo) in ``out``: rank
    r of copy k becomes rank k x (ranks of the job) + r, in its distributedInfo and its file name,
    with the world size of all copies. Returns that world size."""
    jobs = [json.loads(gzip.decompress(f.read_bytes())) for f in sorted(src.glob("*.json.gz"))]
    ranks = len(jobs)
    for k in range(copies):
        for data in jobs:
            info = data["distributedInfo"]
            rank = k * ranks + info["rank"] % ranks
            copy = {**data, "distributedInfo": {**info, "rank": rank, "world_size": ranks * copies}}
            (out / f"rank{rank}.json.gz").write_bytes(gzip.compress(json.dumps(copy).encode(), 1))
    return ranks * copies


@pytest.mark.slow
def test_64_ranks_same_report_in_memory_and_on_local_processes(tmp_path) -> None:
    """64 ranks (16 renumbered copies of the 4-rank sample): one batch of all 64 ranks in memory,
    one batch per file in the workers, the same report."""
    assert renumbered_copies(require(SAMPLE_4RANK), tmp_path, 16) == 64
    in_memory = analyze(tmp_path, use_cache=False)
    assert in_memory["summary"]["ranks"] == list(range(64))
    job = analyze(tmp_path, use_cache=False, executor=LocalProcesses(2))
    assert job["execution"]["files"] == 64 and job["execution"]["ranks"] == 64
    assert_same_report(in_memory, job)


def test_small_files_analysed_in_groups_give_the_in_memory_report(tmp_path) -> None:
    """16 small files on one worker: four groups of four files, each analysed as one batch (rows of
    files apart in file order placed file by file), the same report as in memory."""
    assert renumbered_copies(require(SAMPLE_4RANK), tmp_path, 4) == 16
    files = sorted(tmp_path.glob("*.json.gz"))
    groups = group_files(files, 1)
    assert [len(g) for g in groups] == [4, 4, 4, 4]
    assert sorted(rank_from_filename(files[i]) for i in groups[0]) == [0, 1, 2, 3]
    results = analyze_group([FileTask(str(files[i]), i, Options()) for i in groups[0]])
    assert [r.index for r in results] == groups[0]
    carriers = [r for r in results if r.batch is not None]
    assert len(carriers) == 1 and carriers[0].batch_files == tuple(groups[0])
    assert carriers[0].batch.ranks == [0, 1, 2, 3]
    in_memory = analyze(tmp_path, use_cache=False)
    job = analyze(tmp_path, use_cache=False, executor=InProcess())
    assert job["execution"]["ranks"] == 16
    assert_same_report(in_memory, job)


def test_groups_whose_ranks_interleave_are_analysed_file_by_file(tmp_path) -> None:
    """File names that say other ranks than the files (rank r named rank(5r mod 16)): the groups
    made by name hold ranks that interleave with the other groups', so the driver analyses their
    files again one by one; the report is still the in-memory one."""
    assert renumbered_copies(require(SAMPLE_4RANK), tmp_path, 4) == 16
    for f in sorted(tmp_path.glob("rank*.json.gz")):
        rank = int(f.name[4:].split(".")[0])
        f.rename(tmp_path / f"w{5 * rank % 16}.json.gz")
    for f in tmp_path.glob("w*.json.gz"):
        f.rename(tmp_path / f"rank{f.name[1:]}")
    in_memory = analyze(tmp_path, use_cache=False)
    tasks = []

    class Counting(InProcess):
        def run(self, groups, done):  # type: ignore[no-untyped-def]
            tasks.extend(len(g) for g in groups)
            super().run(groups, done)

    job = analyze(tmp_path, use_cache=False, executor=Counting())
    assert tasks[:4] == [4, 4, 4, 4] and tasks[4:] == [1] * 16  # every group interleaved: all again
    assert_same_report(in_memory, job)


def test_interleaved_rank_spans() -> None:
    assert interleaved([(0, 3, 1), (4, 7, 2), (8, 8, 3)]) == set()
    assert interleaved([(0, 9, 1), (4, 4, 2), (10, 12, 3)]) == {1, 2}
    assert interleaved([(0, 9, 1), (2, 3, 2), (5, 6, 3)]) == {1, 2, 3}


def per_rank_report(trace: traceview.Trace, options: Options) -> Any:
    """The report of ``trace`` built from one batch per rank (each rank selected and analysed alone,
    its rows mapped back to the trace's), reduced and reported as the in-memory path does."""
    batches = []
    for rank in trace.rank_ids:
        sub, rows = select_rank(trace, rank)
        batch = analyze_batch(sub, options)
        batch.tables = {a: {t: map_rows(f, rows) for t, f in ts.items()} for a, ts in batch.tables.items()}
        batch.gathered = {a: g.remap_rows(rows, 0) for a, g in batch.gathered.items()}
        batches.append(batch)
    assert [b.ranks for b in batches] == [[r] for r in trace.rank_ids]
    reduced = reduce_batches(batches, options)
    summaries = {r: s for b in batches for r, s in b.summaries.items()}
    return build_report(overview_of(trace, summaries), reduced.results, options=options,
                        table_rows=reduced.table_rows, execution={"executor": "in-process"}, trace=trace)


@pytest.mark.parametrize("path", [SAMPLE_4RANK, SAMPLE_NSYS, DLRM, NSYS_2RANK], ids=lambda p: p.name)
def test_one_batch_of_all_ranks_equals_one_batch_per_rank(path: Path) -> None:
    """The in-memory path analyses every rank of a trace in one batch; analysed one rank at a time
    (as before issue 26), the ranks give the same report, figure for figure (ties in the row order
    of a table included)."""
    trace = traceview.load(require(path), use_cache=False)
    assert len(trace.rank_ids) >= 2
    options = Options()
    assert_same_report(analyze(trace, options), per_rank_report(trace, options))


# ------------------------------------------------------------------------------ known answers


def test_generated_job_straggler_imbalance_and_clock_offsets(local_job, truth) -> None:
    job = local_job
    assert job["summary"]["ranks"] == list(range(8))
    # clock offsets: the estimates equal the planted offsets up to one common constant; the
    # generator's end jitter (+-150 ns) bounds the error by 4 x 150 ns = 600 ns < 1 us
    planted = {int(r): v for r, v in truth["clock"]["offset_ns"].items()}
    alignment = job.table("communication", "alignment")
    est = dict(zip(alignment["rank"], alignment["clock_offset_ns"]))
    diff = np.array([est[r] - planted[r] for r in range(8)], dtype=np.int64)
    assert np.abs(diff - np.median(diff)).max() <= truth["clock"]["tolerance_ns"]
    assert (alignment["collectives"] == truth["straggler"]["collectives"]).all()
    # the straggler: raw clocks point at the rank whose clock is 180 ms ahead; corrected ones at the
    # planted straggler, which was last in every collective
    strag = job.table("communication", "stragglers").set_index("rank")
    s = truth["straggler"]["rank"]
    assert strag.loc[s, "corrected_times_last"] == truth["straggler"]["times_last"] == truth["straggler"]["collectives"]
    assert abs(int(strag.loc[s, "corrected_mean_late_by_ns"]) - truth["straggler"]["mean_late_by_ns"]) <= 1000
    assert strag.loc[max(planted, key=planted.get), "times_last"] == truth["straggler"]["collectives"]  # raw: fooled
    [finding] = [f for f in job["findings"] if f["code"] == "straggler_rank"]
    assert finding["rank"] == s and "end-aligned" in finding["evidence"]["clock_basis"]
    # per collective: who was last and by how much (true clock), within the tolerance
    skew = job.table("communication", "skew")
    got = {(r.collective, int(r.step), int(r.occurrence)): r for r in skew.itertuples()}
    for c in truth["collectives"]:
        row = got[(c["collective"], c["step"], c["occurrence"])]
        assert row.corrected_straggler == c["last_rank"]
        assert abs(row.corrected_late_by_ns - c["late_by_ns"]) <= truth["clock"]["tolerance_ns"]
        assert abs(row.corrected_skew_ns - c["skew_ns"]) <= truth["clock"]["tolerance_ns"]
    # compute imbalance: the heavy rank is the busiest in every step
    [imbalance] = [f for f in job["findings"] if f["code"] == "compute_imbalance"]
    assert imbalance["rank"] == truth["heavy_rank"]["rank"]
    assert imbalance["evidence"]["times_busiest"] == truth["job"]["steps"]


# ------------------------------------------------------------------------------ failures


def test_failed_files_are_listed_missing_while_the_others_complete(job_dir, tmp_path) -> None:
    for f in job_dir.glob("rank*.json.gz"):
        shutil.copy(f, tmp_path / f.name)
    data = (tmp_path / "rank5.json.gz").read_bytes()
    (tmp_path / "rank5.json.gz").write_bytes(data[: len(data) // 3])  # cut short: a truncated copy
    (tmp_path / "rank2.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "na'))
    seen: list[tuple[int, int, int]] = []
    job = analyze(tmp_path, use_cache=False, executor=LocalProcesses(2, progress=lambda *a: seen.append(a)))
    assert job["summary"]["ranks"] == [0, 1, 3, 4, 6, 7]
    ex = job["execution"]
    missing = {m["file"]: m for m in ex["missing"]}
    assert set(missing) == {"rank2.json.gz", "rank5.json.gz"} and ex["failed_files"] == 2
    assert missing["rank5.json.gz"]["rank"] == 5 and "truncated" in missing["rank5.json.gz"]["reason"]
    assert missing["rank2.json.gz"]["rank"] == 2 and missing["rank2.json.gz"]["reason"].startswith("rank2.json.gz: ")
    assert ex["absent_ranks"] == [2, 5] and ex["world_size"] == 8
    messages = [w["message"] for w in job["warnings"]]
    assert any(m.startswith("left out of the job: rank5.json.gz: ") and "truncated" in m for m in messages)
    assert "ranks 2, 5 of the job (world size 8) in no file: the figures cover the other ranks" in messages
    assert sorted(seen)[-1] == (8, 8, 2)  # progress: files done, in all, failed
    # everything else is the report of the readable files (rows numbered across those files)
    readable = sorted(f for f in tmp_path.glob("rank*.json.gz") if f.name not in missing)
    expected, got = comparable(analyze(readable, use_cache=False)), comparable(job)
    expected.pop("warnings"), got.pop("warnings")
    assert differences(expected, got) == []


def test_a_rank_claimed_twice_leaves_the_later_file_out(job_dir, tmp_path) -> None:
    for name in ("rank0.json.gz", "rank1.json.gz"):
        shutil.copy(job_dir / name, tmp_path / name)
    shutil.copy(job_dir / "rank1.json.gz", tmp_path / "rank1_copy.json.gz")
    with pytest.raises(TraceviewError, match="rank 1 appears in two files"):
        traceview.load(tmp_path, use_cache=False)
    job = analyze(tmp_path, use_cache=False, executor=InProcess())
    assert job["summary"]["ranks"] == [0, 1]
    [missing] = job["execution"]["missing"]
    assert missing["file"] == "rank1_copy.json.gz" and "rank 1 appears in two files" in missing["reason"]


def test_no_readable_file_is_one_clear_error(tmp_path) -> None:
    (tmp_path / "rank0.json").write_text('{"traceEvents": [')
    with pytest.raises(TraceviewError, match="no file of the job could be analysed: .*rank0.json"):
        analyze(tmp_path / "rank0.json", use_cache=False, executor=InProcess())


# ------------------------------------------------------------------------------ executors


def test_make_executor_choices_and_errors(monkeypatch, dask_cluster) -> None:
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    assert isinstance(make_executor(2), LocalProcesses) and make_executor(2).workers == 2
    assert make_executor(0).workers == (os.cpu_count() or 1)
    with pytest.raises(TraceviewError, match="must be 0"):
        make_executor(-1)
    monkeypatch.setenv(SCHEDULER_ENV, dask_cluster.scheduler_address)
    from_env = make_executor()
    assert isinstance(from_env, DaskCluster) and from_env.workers == 2
    from_env.close()
    assert isinstance(make_executor(2), LocalProcesses)  # --workers given: not the environment's cluster
    with pytest.raises(TraceviewError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:9") as err:
        DaskCluster("tcp://127.0.0.1:9", connect_timeout_s=0.5)
    assert "\n" not in str(err.value)


def test_cli_workers_gives_the_in_memory_json(job_dir) -> None:
    """``traceview analyze JOB --workers 2 --format json``: the in-memory JSON, execution apart."""
    def run(*extra: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(job_dir), "--no-cache",
                               "--format", "json", *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        data = json.loads(proc.stdout)
        data.pop("execution")
        return data

    assert differences(run(), run("--workers", "2")) == []


# ------------------------------------------------------------------------------ the parts


def test_map_task_result_is_small_and_bounded(job_dir) -> None:
    res = analyze_file(FileTask(str(job_dir / "rank0.json.gz"), 0, Options(top_n=20), use_cache=False))
    assert res.error is None and res.batch is not None and res.batch.ranks == [0] and list(res.infos) == [0]
    batch = res.batch
    assert batch.payload and not batch.tables  # packed for the trip and the wait
    tables, gathered = batch.unpack()
    # per-event tables cut to the rows a report can need (at least the 50 it shows), the true count kept
    cut = {(a, t): n for (a, t), n in batch.table_rows.items() if len(tables[a][t]) < n}
    assert ("kernels", "kernels_by_step") in cut and all(len(tables[a][t]) >= 50 for a, t in cut)
    assert 0 < res.stats["result_bytes"] < 100_000
    assert res.stats["peak_rss"] > 0 and res.stats["pid"] > 0 and res.stats["cpu_seconds"] > 0
    assert len(gathered["communication"].kernels) == 20  # one row per collective kernel: 5 per step, 4 steps


def test_whole_only_keeps_the_cross_rank_figures(local_job, job_dir) -> None:
    """Options(whole_only=True) (thousands of ranks): per-rank tables keep their whole-trace rows only,
    the cross-rank figures and findings are unchanged, and each rank sends much less."""
    job = analyze(job_dir, Options(whole_only=True), use_cache=False, executor=LocalProcesses(2))
    tables, full = job["analyses"]["communication"]["tables"], local_job["analyses"]["communication"]["tables"]
    for name in ("skew", "stragglers", "alignment", "compute_by_rank", "compute_imbalance"):
        assert tables[name] == full[name]
    assert "arrivals" not in tables
    assert job["findings"] == local_job["findings"]
    assert job.table("communication", "collectives")["step"].isna().all()
    assert "launches" not in job["analyses"]["launch_overhead"]["tables"]
    assert job["summary"] == local_job["summary"] and job["ranks"] == local_job["ranks"]
    size = job["execution"]["result_bytes_per_rank"]["mean"]
    assert size < 0.8 * local_job["execution"]["result_bytes_per_rank"]["mean"]


def test_select_rank_keeps_links_within_the_rank() -> None:
    trace = traceview.load(require(SAMPLE_NSYS), use_cache=False)
    for rank in trace.rank_ids:
        sub, rows = select_rank(trace, rank)
        assert set(sub.column("rank")) == {rank} and list(sub.ranks) == [rank]
        api, gpu = sub.launch_links()
        f_api, f_gpu = trace.launch_links()
        mine = trace.column("rank")[f_api] == rank
        assert sorted(zip(rows[api], rows[gpu])) == sorted(zip(f_api[mine], f_gpu[mine]))


def _file(index: int, path: str, ranks: list[tuple[int, str]], error: str | None = None) -> FileResult:
    fmt = "nsys" if path.endswith(".sqlite") else "kineto"  # as each parser writes it
    infos = {r: RankInfo(rank=r, source_path=path, source_format=fmt, rank_source=src) for r, src in ranks}
    return FileResult(file=path, index=index, infos=infos, error=error)


def test_plan_ranks_follows_load() -> None:
    files = [_file(0, "/j/a.json", [(-1, "")]), _file(1, "/j/rank0.json", [(0, "file name")]),
             _file(2, "/j/rank1.json", [(1, "distributedInfo")]), _file(3, "/j/rank3.json", [], error="corrupt"),
             _file(4, "/j/dup.json", [(1, "distributedInfo")]), _file(5, "/j/p.sqlite", [(0, "nsys"), (1, "nsys")])]
    plan = plan_ranks(files, several=True)
    assert plan.conflicts == {4: (1, "/j/rank1.json", "/j/dup.json")}
    assert "rank 1 appears in two files" in conflict_message(plan, 4, "/j/dup.json")
    # the file without a rank gets the lowest free number; 3 is reserved by the unreadable rank3.json;
    # Nsight processes of several files are numbered after them
    assert plan.maps == {0: {-1: 2}, 5: {0: 4, 1: 5}} and plan.renumbered() == plan.maps
    assert plan.warnings == ["/j/a.json: no rank in distributedInfo or file name; treated as rank 2"]
    alone = plan_ranks([_file(0, "/j/p.sqlite", [(0, "nsys"), (1, "nsys")])], several=False)
    assert alone.maps == {} and alone.warnings == []
