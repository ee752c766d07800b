"""Whole-job analysis rank by rank (traceview.scale): map/reduce gives the same cross-rank figures as
``run_all`` on the loaded multi-rank trace, on local worker processes and on a real Dask cluster;
planted stragglers, imbalance and clock offsets are found; a corrupt rank is reported, not fatal.

Definitions under test (docs/metrics.md "Communication", docs/scaling.md):

- "the k-th occurrence of each (kind, process group) within a step on one rank is matched with the
  k-th on every other rank";
- "clock_offset_ns of a rank = the median, over the occurrences it took part in, of (its end - the
  median end of that occurrence)"; corrected times = raw times - that offset;
- job results: "a row column refers to a row of the events of all files concatenated in file
  order, exactly as in traceview.load(files).events".
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traceview
from traceview.analyses import run_all
from traceview.analyses import communication as comm
from traceview.findings import Finding, Options
from traceview.scale import (
    FileResult,
    analyze_file,
    analyze_job,
    bound_tables,
    merge_findings,
    plan_ranks,
    select_rank,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import gen_job  # noqa: E402  (the benchmark's generator, also the known-answer source here)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
DLRM = SHARED / "kineto" / "param_dlrm_8ranks_v100"
NSYS_2RANK = SHARED / "nsys" / "torchrun_2xh100_nccl_2026.2.sqlite"
SAMPLE_NSYS = REPO / "sample_traces" / "synthetic_nsys.sqlite"
CROSS = ("skew", "arrivals", "stragglers", "alignment", "compute_by_rank", "compute_imbalance")


def require_dlrm() -> Path:
    if not DLRM.exists():
        pytest.skip(f"real traces not available: {DLRM} is absent (../shared/traces sits beside the repo in CI)")
    return DLRM


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory) -> Path:
    """A generated 8-rank job: straggler, compute-heavy rank and per-rank clock offsets planted."""
    out = tmp_path_factory.mktemp("job8")
    gen_job.generate(out, ranks=8, steps=4, layers=8, gz=True)
    return out


@pytest.fixture(scope="module")
def truth(job_dir: Path) -> dict:
    return json.loads((job_dir / "truth.json").read_text())


@pytest.fixture(scope="module")
def dask_scheduler(tmp_path_factory):
    """A real dask.distributed cluster on localhost: a scheduler and 2 worker processes."""
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is not installed (extra 'test')")
    cache = tmp_path_factory.mktemp("dask-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACEVIEW_CACHE_DIR", str(cache))  # workers inherit it: never the user's cache
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                      host="127.0.0.1") as cluster:
            yield cluster.scheduler_address


@pytest.fixture(scope="module")
def local_job(job_dir: Path):
    return analyze_job(job_dir, workers=2, use_cache=False)


def plain(frame: pd.DataFrame) -> pd.DataFrame:
    """Categorical columns as their values: a job's categories are the union of each rank's used
    ones, the in-memory trace's the whole name dictionary."""
    cats = [c for c in frame.columns if isinstance(frame[c].dtype, pd.CategoricalDtype)]
    return frame.astype({c: object for c in cats}) if cats else frame


def assert_cross_rank_equal(a: dict, b: dict) -> None:
    """The communication results of two paths: same tables (exactly), findings and warnings."""
    assert list(a.tables) == list(b.tables)
    for name, table in a.tables.items():
        pd.testing.assert_frame_equal(table, b.tables[name], check_exact=True, obj=name)
    assert [f.to_dict() for f in a.findings] == [f.to_dict() for f in b.findings]
    assert a.warnings == b.warnings


# ------------------------------------------------------------------------------ known answers


def test_generated_job_straggler_imbalance_and_clock_offsets(local_job, truth) -> None:
    job = local_job
    assert sorted(job.ranks) == list(range(8)) and not job.missing
    # clock offsets: the estimates equal the planted offsets up to one common constant; the
    # generator's end jitter (+-150 ns) bounds the error by 4 x 150 ns = 600 ns < 1 us
    planted = {int(r): v for r, v in truth["clock"]["offset_ns"].items()}
    est = dict(zip(job.alignment["rank"], job.alignment["clock_offset_ns"]))
    diff = np.array([est[r] - planted[r] for r in range(8)], dtype=np.int64)
    assert np.abs(diff - np.median(diff)).max() <= truth["clock"]["tolerance_ns"]
    assert (job.alignment["collectives"] == truth["straggler"]["collectives"]).all()
    assert "clock-corrected" in job.alignment_note and "+180" in job.alignment_note
    # the straggler: raw clocks point at the rank whose clock is 180 ms ahead; corrected ones at the
    # planted straggler, which was last in every collective
    strag = job.results["communication"].tables["stragglers"].set_index("rank")
    s = truth["straggler"]["rank"]
    assert strag.loc[s, "corrected_times_last"] == truth["straggler"]["times_last"] == truth["straggler"]["collectives"]
    assert abs(int(strag.loc[s, "corrected_mean_late_by_ns"]) - truth["straggler"]["mean_late_by_ns"]) <= 1000
    fast_clock = max(planted, key=planted.get)
    assert strag.loc[fast_clock, "times_last"] == truth["straggler"]["collectives"]  # raw: fooled
    [finding] = [f for f in job.findings if f.code == "straggler_rank"]
    assert finding.rank == s and "end-aligned" in finding.evidence["clock_basis"]
    # per collective: who was last and by how much (true clock), within the tolerance
    skew = job.results["communication"].tables["skew"]
    got = {(r.collective, int(r.step), int(r.occurrence)): r for r in skew.itertuples()}
    for c in truth["collectives"]:
        row = got[(c["collective"], c["step"], c["occurrence"])]
        assert row.corrected_straggler == c["last_rank"]
        assert abs(row.corrected_late_by_ns - c["late_by_ns"]) <= truth["clock"]["tolerance_ns"]
        assert abs(row.corrected_skew_ns - c["skew_ns"]) <= truth["clock"]["tolerance_ns"]
        assert row.corrected_end_spread_ns <= 4 * truth["clock"]["end_jitter_ns"]
    # compute imbalance: the heavy rank is the busiest in every step
    [imb] = [f for f in job.findings if f.code == "compute_imbalance"]
    assert imb.rank == truth["heavy_rank"]["rank"]
    assert imb.evidence["times_busiest"] == truth["job"]["steps"]


def test_generated_job_same_on_local_processes_dask_and_in_memory(local_job, job_dir, dask_scheduler) -> None:
    in_memory = run_all(traceview.load(job_dir, use_cache=False), Options())
    assert_cross_rank_equal(in_memory["communication"], local_job.results["communication"])
    on_dask = analyze_job(job_dir, scheduler=dask_scheduler)
    assert on_dask.execution["executor"].startswith("dask")
    assert_cross_rank_equal(local_job.results["communication"], on_dask.results["communication"])
    pd.testing.assert_frame_equal(local_job.alignment, on_dask.alignment, check_exact=True)
    # the per-rank tables too (the executor does not matter)
    for name, res in local_job.results.items():
        for tname, table in res.tables.items():
            pd.testing.assert_frame_equal(table, on_dask.results[name].tables[tname], check_exact=True,
                                          obj=f"{name}.{tname}")
    assert [f.to_dict() for f in local_job.findings] == [f.to_dict() for f in on_dask.findings]
    # memory is measured in the workers: two worker processes, each below the driver's budget
    peaks = on_dask.execution["worker_peak_rss"]
    assert len(peaks) == 2 and all(v > 0 for v in peaks.values())


def test_dlrm_8_ranks_same_on_local_processes_dask_and_in_memory(dask_scheduler) -> None:
    path = require_dlrm()
    in_memory = run_all(traceview.load(path, use_cache=False), Options())
    local = analyze_job(path, workers=2, use_cache=False)
    on_dask = analyze_job(path, scheduler=dask_scheduler, use_cache=False)
    assert sorted(local.ranks) == list(range(8))
    assert_cross_rank_equal(in_memory["communication"], local.results["communication"])
    assert_cross_rank_equal(in_memory["communication"], on_dask.results["communication"])
    # the 8 DLRM ranks: 3 AllReduce + 5 SendRecv matched on every rank; clocks within a few us, so
    # raw timestamps are used, and rank 7 is the straggler
    strag = local.results["communication"].tables["stragglers"]
    assert (strag["matched"] == 8).all()
    assert local.alignment["clock_offset_ns"].abs().max() <= 1000
    [f] = [f for f in local.findings if f.code == "straggler_rank"]
    assert f.rank == 7 and f.evidence["clock_basis"] == "raw timestamps"
    # per-rank tables that are not cut match the in-memory ones row for row (rows across files too)
    for name in ("temporal", "launch_overhead"):
        for tname in ("breakdown", "steps", "by_api"):
            if tname in in_memory[name].tables:
                a, b = in_memory[name].tables[tname], local.results[name].tables[tname]
                assert len(a) == len(b)
                pd.testing.assert_frame_equal(plain(a), plain(b), check_exact=True, obj=tname)


def test_nsight_file_with_two_ranks_is_split_per_rank() -> None:
    """One Nsight export holding two ranks: each is analysed alone, rows map back to the file."""
    for path in (SAMPLE_NSYS, NSYS_2RANK):
        if not path.exists():
            continue
        in_memory = run_all(traceview.load(path, use_cache=False), Options())
        job = analyze_job(path, inline=True, use_cache=False)
        assert sorted(job.ranks) == [0, 1]
        assert_cross_rank_equal(in_memory["communication"], job.results["communication"])
        # the largest gaps over both ranks (row numbers included), the idle by cause per rank
        pd.testing.assert_frame_equal(plain(in_memory["idle_gaps"].tables["largest"]),
                                      plain(job.results["idle_gaps"].tables["largest"]), check_exact=True)
        a = in_memory["idle_gaps"].tables["by_cause"].sort_values(["rank", "device"], kind="stable")
        pd.testing.assert_frame_equal(plain(a.reset_index(drop=True)), plain(job.results["idle_gaps"].tables["by_cause"]),
                                      check_exact=True)


# ------------------------------------------------------------------------------ failures


def test_corrupt_rank_is_reported_missing_while_the_others_complete(job_dir, tmp_path) -> None:
    for f in job_dir.glob("rank*.json.gz"):
        shutil.copy(f, tmp_path / f.name)
    data = (tmp_path / "rank5.json.gz").read_bytes()
    (tmp_path / "rank5.json.gz").write_bytes(data[: len(data) // 3])  # cut short: a truncated copy
    (tmp_path / "rank2.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "na'))
    job = analyze_job(tmp_path, workers=2, use_cache=False)
    assert sorted(job.ranks) == [0, 1, 3, 4, 6, 7]
    missing = {Path(m.file).name: m for m in job.missing}
    assert set(missing) == {"rank2.json.gz", "rank5.json.gz"}
    assert missing["rank5.json.gz"].rank == 5 and "truncated" in missing["rank5.json.gz"].reason
    assert missing["rank2.json.gz"].rank == 2 and "rank2.json.gz" in missing["rank2.json.gz"].reason
    assert job.absent_ranks == [2, 5] and job.world_size == 8
    # the cross-rank figures cover the others
    strag = job.results["communication"].tables["stragglers"]
    assert sorted(strag["rank"]) == [0, 1, 3, 4, 6, 7]


def test_cli_workers_gives_job_level_findings(job_dir, truth) -> None:
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(job_dir), "--workers", "2",
                           "--top", "20"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "8 ranks from 8 files" in out and "local processes (2)" in out
    assert "straggler_rank" in out and f"Rank {truth['straggler']['rank']} is the last" in out
    assert "compute_imbalance" in out and "Collective skew (clock-corrected" in out
    assert "Clock alignment" in out and "Memory: driver peak RSS" in out


def test_cli_workers_reports_a_missing_rank(job_dir, tmp_path) -> None:
    for f in sorted(job_dir.glob("rank*.json.gz"))[:3]:
        shutil.copy(f, tmp_path / f.name)
    data = (job_dir / "rank3.json.gz").read_bytes()
    (tmp_path / "rank3.json.gz").write_bytes(data[: len(data) // 2])
    proc = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(tmp_path), "--workers", "1",
                           "--summary-only"], capture_output=True, text=True, env=dict(os.environ, COLUMNS="200"),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "missing rank 3" in proc.stdout and "ranks missing from the job: 3" in proc.stdout


# ------------------------------------------------------------------------------ the parts


def test_map_task_result_is_small_and_bounded(job_dir) -> None:
    res = analyze_file(str(job_dir / "rank0.json.gz"), 0, Options(top_n=20), False)
    assert res.error is None and len(res.ranks) == 1
    rr = res.ranks[0]
    assert rr.payload and not rr.tables and rr.comm is None  # packed for the trip and the wait
    tables, inputs = rr.unpack()
    assert len(tables["launch_overhead"]["launches"]) == 20  # cut to its top rows ...
    assert rr.truncated["launch_overhead.launches"] > 20  # ... and the cut is recorded
    assert 0 < res.stats["result_bytes"] < 100_000
    assert res.stats["peak_rss"] > 0 and res.stats["pid"] > 0 and res.stats["cpu_seconds"] > 0
    assert len(inputs.kernels) == 20  # one row per collective kernel: 5 per step, 4 steps


def test_bound_tables_keeps_the_top_rows_in_their_order() -> None:
    from traceview.findings import AnalysisResult

    gaps = pd.DataFrame({"rank": 0, "dur_ns": [5, 1, 9, 3, 7], "cause": pd.Categorical(list("abcde"))})
    tables, cut = bound_tables({"idle_gaps": AnalysisResult("idle_gaps", tables={"gaps": gaps})}, row_limit=3)
    kept = tables["idle_gaps"]["gaps"]
    assert list(kept["dur_ns"]) == [5, 9, 7] and cut == {"idle_gaps.gaps": 5}
    assert list(kept["cause"].cat.categories) == ["a", "c", "e"]  # unused categories dropped


def test_select_rank_keeps_links_within_the_rank() -> None:
    if not SAMPLE_NSYS.exists():
        pytest.skip("sample_traces/synthetic_nsys.sqlite is absent")
    trace = traceview.load(SAMPLE_NSYS, use_cache=False)
    for rank in trace.rank_ids:
        sub, rows = select_rank(trace, rank)
        assert set(sub.column("rank")) == {rank} and list(sub.ranks) == [rank]
        api, gpu = sub.launch_links()
        f_api, f_gpu = trace.launch_links()
        mine = trace.column("rank")[f_api] == rank
        assert sorted(zip(rows[api], rows[gpu])) == sorted(zip(f_api[mine], f_gpu[mine]))


def _file(index: int, path: str, ranks: list[tuple[int, str]], error: str | None = None) -> FileResult:
    from traceview.model import RankInfo
    from traceview.scale import RankResult

    rrs = [RankResult(rank=r, file=path, file_index=index, info=RankInfo(rank=r, source_path=path,
                      source_format="kineto", rank_source=src), summary={}, tables={}, truncated={}, findings={},
                      warnings={}, comm=None) for r, src in ranks]
    return FileResult(file=path, index=index, ranks=rrs, error=error)


def test_plan_ranks_follows_load() -> None:
    files = [_file(0, "/j/a.json", [(-1, "")]), _file(1, "/j/rank0.json", [(0, "file name")]),
             _file(2, "/j/rank1.json", [(1, "distributedInfo")]), _file(3, "/j/rank3.json", [], error="corrupt"),
             _file(4, "/j/dup.json", [(1, "distributedInfo")])]
    maps, conflicts, warnings = plan_ranks(files, several=True)
    assert conflicts.keys() == {4} and "rank 1 appears in two files" in conflicts[4]
    # the file without a rank gets the lowest free number; 3 is reserved by the unreadable rank3.json
    assert maps == {0: {-1: 2}}
    assert warnings == ["/j/a.json: no rank in distributedInfo or file name; treated as rank 2"]


def test_merge_findings_per_code() -> None:
    def f(rank: int, cost: int, severity: str = "medium", code: str = "low_utilization") -> Finding:
        return Finding(code=code, title=f"GPU of rank {rank} is idle", severity=severity, analysis="temporal",
                       recommendation="r", cost_ns_per_step=cost, cost_share=cost / 1000, rank=rank)

    merged = merge_findings([(0, f(0, 100)), (1, f(1, 300, "high")), (1, f(1, 200)), (2, f(2, 50, code="x"))], 4)
    [lu] = [m for m in merged if m.code == "low_utilization"]
    assert lu.severity == "high" and lu.cost_ns_per_step == 200 and lu.rank is None  # mean of 100 and 300
    assert lu.title.startswith("On 2 of 4 ranks (worst: rank 1)")
    assert [p["rank"] for p in lu.evidence["per_rank"]] == [0, 1]
    [x] = [m for m in merged if m.code == "x"]
    assert x.rank == 2 and x.cost_ns_per_step == 50  # one rank only: kept as it was


def test_cross_rank_is_independent_of_how_ranks_are_gathered(job_dir) -> None:
    """cross_rank on per-rank inputs, in any order, equals the in-memory analysis."""
    files = sorted(job_dir.glob("rank*.json.gz"))
    trace = traceview.load(files, use_cache=False)
    whole = comm.analyze(trace, Options())
    parts, offset = [], 0
    for f in files:
        one = traceview.load(f, use_cache=False)
        parts.append(comm.cross_rank_inputs(one, Options()).shift_rows(offset))
        offset += one.num_events
    parts.reverse()
    cross = comm.cross_rank(comm.CrossRankInputs.concat(parts))
    for name in CROSS:
        pd.testing.assert_frame_equal(whole.tables[name], cross.tables[name], check_exact=True, obj=name)
    assert [f.to_dict() for f in whole.findings] == [f.to_dict() for f in cross.findings]


def test_whole_trace_tables_for_large_jobs_keep_the_cross_rank_figures(local_job, job_dir) -> None:
    """tables="whole" (thousands of ranks): per-rank tables keep their whole-trace rows only, the
    cross-rank figures and findings are unchanged, and each rank sends much less."""
    job = analyze_job(job_dir, workers=2, use_cache=False, tables="whole")
    a, b = local_job.results["communication"], job.results["communication"]
    for name in CROSS:
        if name != "arrivals":  # (left out: ranks x collectives rows)
            pd.testing.assert_frame_equal(a.tables[name], b.tables[name], check_exact=True, obj=name)
    assert "arrivals" not in b.tables
    assert [f.to_dict() for f in a.findings] == [f.to_dict() for f in b.findings]
    assert b.tables["collectives"]["step"].isna().all() and b.tables["summary"]["step"].isna().all()
    assert "launches" not in job.results["launch_overhead"].tables
    assert len(job.results["idle_gaps"].tables["largest"]) == 20
    assert job.execution["result_bytes_per_rank"]["mean"] < 0.8 * local_job.execution["result_bytes_per_rank"]["mean"]
    pd.testing.assert_frame_equal(local_job.rank_table[["rank", "utilization", "idle_ns", "clock_offset_ns"]],
                                  job.rank_table[["rank", "utilization", "idle_ns", "clock_offset_ns"]])
