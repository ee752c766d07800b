"""Run history (issue 14): the DuckDB store, its migration, regression detection on generated
histories with planted regressions, and ``traceview history add|show|check`` on real traces.
Everything runs against real DuckDB files in a temporary folder (no mocks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import traceview
from traceview.errors import TraceviewError
from traceview.history import (DetectOptions, DuplicateRunError, add_runs, change_points, check, files_identity,
                               open_history, show, summarize)
from traceview.history import schema, store
from traceview.discovery import find_trace_files

from conftest import require_shared

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_traces"))

import make_history  # noqa: E402

PAIR = ROOT / "sample_traces" / "regression_pair"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "traceview.cli", "history", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


def planted_db(tmp_path: Path, **kwargs) -> tuple[object, make_history.Planted]:
    planted = make_history.planted_history(**kwargs)
    con = open_history(tmp_path / "h.duckdb")
    add_runs(con, planted.summaries)
    return con, planted


def found(result) -> set[tuple[str, str, str, str]]:
    return {(r.kind, r.key, r.status, r.start_name) for r in result.regressions.itertuples()}


# ------------------------------------------------------------------------------ planted regressions


@pytest.mark.parametrize("seed", [14, 3, 27])
def test_planted_regressions_exactly_with_their_start(tmp_path, seed):
    con, planted = planted_db(tmp_path, seed=seed, other_gpu_runs=5)
    result = check(con, options=DetectOptions())
    assert found(result) == {
        ("kernel", make_history.PLANTED_SLOW, "slower", f"nightly-{make_history.SLOW_FROM}"),
        ("kernel", make_history.PLANTED_NEW, "appeared", f"nightly-{make_history.NEW_FROM}")}
    assert result.gpu_model == make_history.GPU
    assert len(result.runs) == 40  # window 20 + baseline 20, the other GPU's runs left out
    assert set(result.runs["gpu_model"]) == {make_history.GPU}
    slow = result.regressions.set_index("key").loc[make_history.PLANTED_SLOW]
    assert 6.0 < slow["delta_pct"] < 10.0  # planted 8%
    assert slow["runs_since"] == 50 - make_history.SLOW_FROM + 1
    assert slow["raw_names"] == [f"void {make_history.PLANTED_SLOW}<128>(float*)"]


def test_heavier_tailed_noise_no_false_alarm_and_start_never_early(tmp_path):
    """Normal noise (sd 2-3%) has runs 6-9% off: the first runs of an 8% step can look unchanged, so
    the start may be found late (on 80 such histories: 7 late, 6 of them by one run), never early;
    nothing else may fire."""
    exact = 0
    for seed in range(10):
        con, _ = planted_db(tmp_path / str(seed), seed=seed, gaussian=True)
        result = check(con, options=DetectOptions())
        keys = {r.key: int(r.start_name.split("-")[1]) for r in result.regressions.itertuples()}
        assert set(keys) == {make_history.PLANTED_SLOW, make_history.PLANTED_NEW}, seed
        assert keys[make_history.PLANTED_NEW] == make_history.NEW_FROM
        assert keys[make_history.PLANTED_SLOW] >= make_history.SLOW_FROM
        exact += keys[make_history.PLANTED_SLOW] == make_history.SLOW_FROM
        con.close()
    assert exact >= 8


def test_no_change_no_regression(tmp_path):
    con = open_history(tmp_path / "h.duckdb")
    add_runs(con, make_history.bulk_history(60, 300, seed=5))
    assert check(con, options=DetectOptions()).regressions.empty


def test_before_the_change_nothing_and_any_gpu_mixes_models(tmp_path):
    con, planted = planted_db(tmp_path, other_gpu_runs=5)
    # the runs up to 30 (the slow kernel not slow yet): a history cut there finds nothing
    con2 = open_history(tmp_path / "cut.duckdb")
    add_runs(con2, [s for s in planted.summaries if s.gpu_model == make_history.GPU][:30])
    assert check(con2, options=DetectOptions()).regressions.empty
    mixed = check(con, options=DetectOptions(), any_gpu=True)
    assert mixed.gpu_model is None
    assert set(mixed.runs["gpu_model"]) == {make_history.GPU, make_history.OTHER_GPU}


def test_detection_is_vectorised_over_series_and_matches_one_by_one():
    rng = np.random.default_rng(0)
    values = 100_000.0 * (1 + 0.02 * rng.uniform(-1, 1, (45, 30)))  # ns per step
    values[30:, 4] *= 1.2
    whole = change_points(values, DetectOptions())
    for j in range(values.shape[1]):  # each column alone gives the same verdict
        one = change_points(values[:, j:j + 1], DetectOptions())
        assert one.regressed[0] == whole.regressed[j] and one.start[0] == whole.start[j]
    assert np.flatnonzero(whole.regressed).tolist() == [4]
    assert whole.start[4] == 30


def test_too_few_runs_judge_nothing(tmp_path):
    con = open_history(tmp_path / "h.duckdb")
    add_runs(con, make_history.bulk_history(4, 10))
    result = check(con, options=DetectOptions())
    assert result.regressions.empty and "nothing judged" in result.notes[0]


def test_explicit_baseline_by_tag_and_by_run(tmp_path):
    con, planted = planted_db(tmp_path)
    by_run = check(con, options=DetectOptions(), baseline="10")
    assert by_run.mode == "baseline" and list(by_run.runs["run_id"]) == [10, 50]
    assert make_history.PLANTED_NEW in set(by_run.regressions["key"])
    assert "1 baseline run(s)" in by_run.notes[0]
    with pytest.raises(TraceviewError, match="--baseline"):
        check(con, options=DetectOptions(), baseline="branch=nope")
    by_tag = check(con, options=DetectOptions(), baseline="branch=main")  # runs 11-30: before the change
    assert list(by_tag.runs["run_id"]) == [*range(11, 31), 50]
    assert set(by_tag.regressions["key"]) == {make_history.PLANTED_SLOW, make_history.PLANTED_NEW}


def test_show_trends_and_kernel_filter(tmp_path):
    con, _ = planted_db(tmp_path)
    result = show(con, kernel="flash|layer_norm", last=5)
    assert list(result.runs["name"]) == [f"nightly-{i}" for i in range(46, 51)]
    assert list(result.series["key"]) == ["step_time", make_history.PLANTED_SLOW, make_history.PLANTED_NEW]
    assert result.values.shape == (3, 5)
    with pytest.raises(TraceviewError, match="--kernel"):
        show(con, kernel="(")


# ------------------------------------------------------------------------------ storage


def test_duplicate_identity_refused_and_nothing_written(tmp_path):
    con, planted = planted_db(tmp_path)
    before = con.execute("SELECT count(*) FROM series").fetchall()[0][0]
    with pytest.raises(DuplicateRunError, match="already in the history as run 3"):
        add_runs(con, [planted.summaries[2]])
    assert con.execute("SELECT count(*) FROM series").fetchall()[0][0] == before
    assert con.execute("SELECT count(*) FROM runs").fetchall()[0][0] == 50


def test_storage_is_aggregates_names_once(tmp_path):
    con, _ = planted_db(tmp_path)
    assert con.execute("SELECT count(*) FROM series_names").fetchall()[0][0] == 40 + 1 + 1 + 1
    assert con.execute("SELECT count(*) FROM raw_names").fetchall()[0][0] == 41
    first, last = con.execute("SELECT first_run, last_run FROM raw_names WHERE name LIKE '%layer_norm%'").fetchall()[0]
    assert (first, last) == (make_history.NEW_FROM, 50)


def test_migration_v1_to_v2(tmp_path):
    import duckdb

    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute(schema.SCHEMA_V1)
    con.execute("INSERT INTO runs (run_id, name, added_at, identity, gpu_model, tags, steps) VALUES "
                "(1, 'a', TIMESTAMP '2026-01-01', 'id-a', 'H100', '{\"commit\": \"abc\", \"branch\": \"main\"}', 5), "
                "(2, 'b', TIMESTAMP '2026-01-02', 'id-b', 'H100', '{\"branch\": \"dev\"}', 5)")
    con.close()
    with pytest.raises(TraceviewError, match="needs a migration"):  # read-only (the app): not migrated
        open_history(path, read_only=True)
    con = open_history(path)
    assert schema.version_of(con) == schema.SCHEMA_VERSION  # v1 -> v2 -> v3, one step at a time
    assert sorted(con.execute("SELECT run_id, key, value FROM run_tags").fetchall()) == [
        (1, "branch", "main"), (1, "commit", "abc"), (2, "branch", "dev")]
    assert list(store.runs(con, store.Selection(tags=(("branch", "dev"),)))["name"]) == ["b"]
    con.close()
    # opening again does not migrate twice
    con = open_history(path)
    assert con.execute("SELECT count(*) FROM run_tags").fetchall()[0][0] == 3


def test_newer_or_foreign_database_refused(tmp_path):
    import duckdb

    newer = tmp_path / "newer.duckdb"
    con = open_history(newer)
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(TraceviewError, match="newer"):
        open_history(newer)
    foreign = tmp_path / "foreign.duckdb"
    duckdb.connect(str(foreign)).execute("CREATE TABLE x (a INTEGER)").close()
    with pytest.raises(TraceviewError, match="not a traceview history"):
        open_history(foreign)
    text = tmp_path / "text.duckdb"
    text.write_text("hello")
    with pytest.raises(TraceviewError, match="cannot open"):
        open_history(text)


# ------------------------------------------------------------------------------ from reports


def test_summary_of_the_sample_pair_matches_the_report():
    report = traceview.analyze(str(PAIR / "base"))
    files = find_trace_files([str(PAIR / "base")])
    s = summarize(report, identity=files_identity(files), name="base", paths=[str(PAIR / "base")], tags={})
    steps = report.table("temporal", "steps")
    per_step = (steps["end_ns"] - steps["start_ns"]).groupby(steps["step"]).mean()
    step = s.series.set_index("key").loc["step_time"]
    assert step["median_ns"] == pytest.approx(float(np.median(per_step)))
    kernels = report.table("kernels", "kernels")
    gemm = s.series[s.series["key"].str.contains("nn_n_tilesize")].iloc[0]
    raw = kernels[kernels["name"].str.contains("nn_n_tilesize")]
    assert gemm["calls"] == raw["count"].sum() and gemm["total_ns"] == raw["total_ns"].sum()
    # 2 GPUs, 5 steps: per GPU and step
    assert gemm["per_step_ns"] == pytest.approx(raw["total_ns"].sum() / 2 / 5, rel=1e-9)
    assert s.gpu_model == "NVIDIA H100 80GB HBM3"
    assert s.figures["steps"] == 5 and s.figures["gpus"] == 2
    # a copy elsewhere has the same identity; the other trace another
    assert files_identity(files) != files_identity(find_trace_files([str(PAIR / "new")]))


def test_cli_add_refuse_check_show(tmp_path):
    db = str(tmp_path / "h.duckdb")
    add = run_cli("add", str(PAIR / "base"), "--db", db, "--run", "base", "--tag", "commit=a1", cwd=tmp_path)
    assert add.returncode == 0, add.stderr
    assert "added run 1 (base)" in add.stdout
    again = run_cli("add", str(PAIR / "base"), "--db", db, cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr.strip().count("\n") == 0 and "already in" in again.stderr and "run 1" in again.stderr
    assert run_cli("add", str(PAIR / "new"), "--db", db, "--run", "new", cwd=tmp_path).returncode == 0
    gate = run_cli("check", "--db", db, "--baseline", "base", "--format", "json", cwd=tmp_path)
    assert gate.returncode == 1, gate.stderr
    out = json.loads(gate.stdout)
    assert out["verdict"] == "regressed" and out["mode"] == "baseline"
    names = {(r["kind"], r["status"]) for r in out["regressions"]}
    assert ("step", "slower") in names and ("kernel", "appeared") in names
    gemm = [r for r in out["regressions"] if "nn_n_tilesize" in r["name"]]
    assert len(gemm) == 1 and 25 < gemm[0]["delta_pct"] < 35  # the planted +30% GEMM
    assert not any("fp32" in r["name"] or "cast" in r["name"] for r in out["regressions"])
    md = run_cli("check", "--db", db, "--baseline", "1", "--format", "markdown", cwd=tmp_path)
    assert md.returncode == 1 and md.stdout.startswith("## REGRESSED") and "| kind | name |" in md.stdout
    # change-point mode with two runs: too few to judge, exit 0 and a note
    cp = run_cli("check", "--db", db, cwd=tmp_path)
    assert cp.returncode == 0 and "nothing judged" in cp.stdout
    shown = run_cli("show", "--db", db, "--format", "json", "--tag", "commit=a1", cwd=tmp_path)
    assert shown.returncode == 0
    assert [r["name"] for r in json.loads(shown.stdout)["runs"]] == ["base"]


def test_cli_default_db_in_working_directory(tmp_path):
    assert run_cli("add", str(PAIR / "base"), cwd=tmp_path).returncode == 0
    assert (tmp_path / ".traceview" / "history.duckdb").is_file()
    assert run_cli("show", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("args, message", [
    (("frobnicate",), "not one of add, show, check"),
    (("add",), "give the run's trace files"),
    (("add", "sample_traces/regression_pair/base", "--tag", "nokey"), "not key=value"),
    (("show", "--db", "missing.duckdb"), "no history database"),
    (("check", "--max-regression", "20"), "ambiguous"),
    (("check", "--min-delta", "5"), "--min-delta"),
    (("show", "--format", "html"), "--format"),
    (("show", "extra/path"), "takes no paths"),
    (("show", "--baseline", "3"), "--baseline is an option of `history check`"),
    (("add", "sample_traces/regression_pair/base", "--kernel", "x"), "--kernel is an option of `history show`"),
])
def test_cli_usage_errors_one_line_exit_2(tmp_path, args, message):
    args = tuple(str(ROOT / a) if a.startswith("sample_traces") else a for a in args)
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and result.stderr.strip().count("\n") == 0
    assert "Traceback" not in result.stderr


def test_cli_planted_history_gate_exit_codes(tmp_path):
    db = tmp_path / "h.duckdb"
    con, planted = planted_db(tmp_path)
    con.close()
    result = run_cli("check", "--db", str(db), "--format", "json", cwd=tmp_path)
    assert result.returncode == 1
    starts = {r["name"]: r["start_name"] for r in json.loads(result.stdout)["regressions"]}
    assert starts == {make_history.PLANTED_SLOW: "nightly-31", make_history.PLANTED_NEW: "nightly-44"}
    # with a threshold above the planted 8% only the appeared kernel is left
    loose = run_cli("check", "--db", str(db), "--max-regression", "10%", "--format", "json", cwd=tmp_path)
    assert {r["name"] for r in json.loads(loose.stdout)["regressions"]} == {make_history.PLANTED_NEW}
    table = run_cli("show", "--db", str(db), "--kernel", "flash", cwd=tmp_path)
    assert table.returncode == 0 and make_history.PLANTED_SLOW in table.stdout


def test_shared_trace_added_and_shown(tmp_path):
    shared = require_shared()
    trace = shared / "kineto" / "hta_nccl_parser_config_a100.json.gz"
    db = str(tmp_path / "h.duckdb")
    result = run_cli("add", str(trace), "--db", db, "--tag", "model=nccl-test", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    con = open_history(Path(db))
    run = store.runs(con).iloc[0]
    assert "A100" in run["gpu_model"]
    kinds = set(con.execute("SELECT kind FROM series_names").df()["kind"])
    assert {"kernel", "collective"} <= kinds
    if _analysis_landed():  # the run's critical-path figures, as its report's summary has them
        summary = traceview.analyze(str(trace)).summary
        assert run["achievable_step_ns"] == pytest.approx(summary["achievable_step_ns"], abs=1)
        assert run["critical_path_bound_by"] == summary["critical_path_bound_by"]
    con.close()
    assert run_cli("add", str(trace), "--db", db, cwd=tmp_path).returncode == 2


def test_k_is_chosen_for_the_number_of_tests():
    """Bonferroni: a 5% chance of any false alarm shared by every series and split, at least 4; a
    given k wins; the check reports the k it applied."""
    from statistics import NormalDist

    from traceview.history.detect import effective_k

    assert effective_k(DetectOptions(), 41 * 20) == 4.0  # the planted history: the floor
    k_big = effective_k(DetectOptions(), 2001 * 20)
    assert k_big == pytest.approx(NormalDist().inv_cdf(1 - 0.05 / 40_020)) and 4.6 < k_big < 4.8
    assert effective_k(DetectOptions(k=3.0), 40_020) == 3.0
    values = np.random.default_rng(3).normal(100_000, 2_500, size=(40, 2000))
    found = change_points(values, DetectOptions())
    assert found.k == pytest.approx(effective_k(DetectOptions(), 2000 * 20))


# ------------------------------------------------------------------------------ the critical path


def _analysis_landed() -> bool:
    import traceview.analyses  # noqa: F401  (registers every analysis)
    from traceview.registry import ANALYSES

    return "critical_path" in ANALYSES


def test_migration_v2_to_v3_adds_the_critical_path_columns(tmp_path):
    import duckdb

    path = tmp_path / "v2.duckdb"
    con = duckdb.connect(str(path))
    con.execute(schema.SCHEMA_V1)
    con.execute(schema.V2_ADDITIONS)
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.execute("INSERT INTO runs (run_id, name, added_at, identity, gpu_model, tags, steps, step_time_ns) VALUES "
                "(1, 'old', TIMESTAMP '2026-01-01', 'id-old', 'H100', '{}', 5, 1000000.0)")
    con.close()
    con = open_history(path)
    assert schema.version_of(con) == schema.SCHEMA_VERSION  # v2 -> v3 -> v4
    run = store.runs(con).iloc[0]
    assert run["name"] == "old" and run["step_time_ns"] == 1_000_000
    for column in ("achievable_step_ns", "critical_path_step_ns", "critical_path_bound_share"):
        assert np.isnan(run[column])  # the run's report is not kept: nothing to fill them from
    assert run["critical_path_bound_by"] is None
    out = show(con, last=5)
    from traceview.history.render import render_show
    assert "achievable" in render_show(out, "table")
    assert json.loads(render_show(out, "json"))["runs"][0]["achievable_step_ns"] is None
    con.close()


@pytest.fixture(scope="module")
def path_summaries():
    """The pair's base and new reports with contract-shaped critical paths (tests/cp_synthetic.py),
    the new one bound by the host with a 300 us longer achievable step, as history summaries."""
    from cp_synthetic import changed, synthetic_result, with_critical_path

    out = []
    for side, kwargs in (("base", {}), ("new", {"achievable_ns": 300_000, "bound_by": "host"})):
        report = traceview.analyze(str(PAIR / side), use_cache=False)
        result = synthetic_result(report.trace, report.table("temporal", "steps"))
        report = with_critical_path(report, changed(result, **kwargs))
        files = find_trace_files([str(PAIR / side)])
        out.append((report, summarize(report, identity=files_identity(files), name=side, paths=[str(PAIR / side)],
                                      tags={})))
    return out


def test_runs_record_the_critical_path(tmp_path, path_summaries):
    con = open_history(tmp_path / "h.duckdb")
    add_runs(con, [s for _, s in path_summaries])
    runs = store.runs(con)
    for (report, _), run in zip(path_summaries, runs.itertuples()):
        s = report.summary
        assert run.achievable_step_ns == pytest.approx(s["achievable_step_ns"])
        assert run.critical_path_step_ns == pytest.approx(s["critical_path_step_ns"])
        assert run.critical_path_bound_by == s["critical_path_bound_by"]
        assert run.critical_path_bound_share == pytest.approx(s["critical_path_bound_share"])
    assert runs["achievable_step_ns"].iloc[1] > runs["achievable_step_ns"].iloc[0]
    from traceview.history.render import render_show
    from traceview.units import fmt_ns
    result = show(con, last=5)
    table = render_show(result, "table")
    assert "bound by" in table and "achievable" in table
    for run in runs.itertuples():
        assert fmt_ns(run.achievable_step_ns) in table and run.critical_path_bound_by in table
    assert "| bound by | achievable |" in render_show(result, "markdown")
    rows = json.loads(render_show(result, "json"))["runs"]
    assert [r["critical_path_bound_by"] for r in rows] == list(runs["critical_path_bound_by"])
    assert [r["achievable_step_ns"] for r in rows] == [pytest.approx(v) for v in runs["achievable_step_ns"]]
    con.close()


def test_cli_add_stores_the_analysis_path(tmp_path):
    if not _analysis_landed():
        pytest.skip("the critical_path analysis is not on this branch yet")
    db = str(tmp_path / "h.duckdb")
    assert run_cli("add", str(PAIR / "base"), "--db", db, cwd=tmp_path).returncode == 0
    shown = run_cli("show", "--db", db, "--format", "json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    run = json.loads(shown.stdout)["runs"][0]
    summary = traceview.analyze(str(PAIR / "base")).summary
    assert run["achievable_step_ns"] == pytest.approx(summary["achievable_step_ns"], abs=1)
    assert run["critical_path_bound_by"] == summary["critical_path_bound_by"]


# ------------------------------------------------------------------------------ layers (modules)


def test_migration_v3_to_v4_adds_the_layers_table(tmp_path):
    import duckdb

    path = tmp_path / "v3.duckdb"
    con = duckdb.connect(str(path))
    con.execute(schema.SCHEMA_V1)
    con.execute(schema.V2_ADDITIONS)
    con.execute(schema.V3_ADDITIONS)
    con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    con.execute("INSERT INTO runs (run_id, name, added_at, identity, gpu_model, tags, steps, step_time_ns) VALUES "
                "(1, 'old', TIMESTAMP '2026-01-01', 'id-old', 'H100', '{}', 5, 1000000.0)")
    con.close()
    con = open_history(path)
    assert schema.version_of(con) == schema.SCHEMA_VERSION  # v3 -> v4 -> v5
    assert con.execute("SELECT count(*) FROM layers").fetchall()[0][0] == 0  # nothing to fill it from
    out = show(con, last=5, layers=True)
    assert out.layers is not None and out.layers.empty
    assert any("no layers stored" in n for n in out.notes)
    from traceview.history.render import render_show
    assert json.loads(render_show(out, "json"))["layers"] == []
    con.close()


@pytest.fixture(scope="module")
def layer_summaries():
    """The pair's base and new reports with contract-shaped module ranges (tests/mod_synthetic.py),
    every ``Model/Layer/Attention`` instance of the new one 2 ms longer, as history summaries."""
    from mod_synthetic import changed, synthetic_result, with_modules

    out = []
    for side, add_ns in (("base", 0), ("new", 2_000_000)):
        report = traceview.analyze(str(PAIR / side), use_cache=False)
        result = synthetic_result(report.trace, report.table("temporal", "steps"))
        if add_ns:
            result = changed(result, report.table("temporal", "steps"), "Model/Layer/Attention", add_ns)
        report = with_modules(report, result)
        files = find_trace_files([str(PAIR / side)])
        out.append((report, summarize(report, identity=files_identity(files), name=side, paths=[str(PAIR / side)],
                                      tags={})))
    return out


def test_runs_record_their_largest_layers(tmp_path, layer_summaries):
    con = open_history(tmp_path / "h.duckdb")
    add_runs(con, [s for _, s in layer_summaries])
    stored = con.execute("SELECT run_id, position, type_path, depth, instances, inclusive_ns, per_step_ns, share "
                         "FROM layers ORDER BY run_id, position").df()
    for run_id, (report, summary) in enumerate(layer_summaries, start=1):
        paths = report.table("modules", "type_paths")
        busy = report.table("modules", "attribution").groupby("rank")["busy_ns"].first().sum()
        per_gpu_step = summary.figures["gpus"] * summary.figures["steps"]
        mine = stored[stored["run_id"] == run_id]
        assert len(mine) == min(paths["type_path"].nunique(), schema.LAYERS_KEPT)
        assert list(mine["position"]) == list(range(1, len(mine) + 1))
        assert mine["inclusive_ns"].is_monotonic_decreasing
        for r in mine.itertuples():
            rows = paths[paths["type_path"] == r.type_path]
            assert r.inclusive_ns == rows["inclusive_ns"].sum() and r.instances == rows["instances"].sum()
            assert r.per_step_ns == pytest.approx(rows["inclusive_ns"].sum() / per_gpu_step, abs=1)
            assert r.share == pytest.approx(rows["inclusive_ns"].sum() / busy)
    result = show(con, last=5, layers=True)
    assert result.layers is not None and result.layer_values is not None
    at = list(result.layers["type_path"]).index("Model/Layer/Attention")
    base_v, new_v = result.layer_values[at]
    report, summary = layer_summaries[0]
    instances = report.table("modules", "type_paths").query("type_path == 'Model/Layer/Attention'")["instances"].sum()
    per_gpu_step = summary.figures["gpus"] * summary.figures["steps"]
    # the planted 2 ms per instance, give or take the pair's own small differences in those kernels
    assert new_v - base_v == pytest.approx(2_000_000 * instances / per_gpu_step, rel=0.01)
    from traceview.history.render import render_show
    table = render_show(result, "table")
    assert "Time by layer per GPU and step" in table and "Model/Layer/Attention" in table
    assert "| layer (type path) |" in render_show(result, "markdown")
    data = json.loads(render_show(result, "json"))
    entry = next(x for x in data["layers"] if x["type_path"] == "Model/Layer/Attention")
    assert entry["trend_pct"] > 0 and entry["depth"] == 2 and len(entry["values_ns"]) == 2
    assert "layers" not in json.loads(render_show(show(con, last=5), "json"))  # only with --layers
    con.close()


def test_cli_show_layers(tmp_path, layer_summaries):
    db = tmp_path / "h.duckdb"
    con = open_history(db)
    add_runs(con, [s for _, s in layer_summaries])
    con.close()
    shown = run_cli("show", "--layers", "--top", "3", "--db", str(db), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "Time by layer per GPU and step" in shown.stdout and "Model/Layer/Attention" in shown.stdout
    refused = run_cli("check", "--layers", "--db", str(db), cwd=tmp_path)
    assert refused.returncode == 2 and "--layers is an option of `history show`" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_cli_add_stores_the_analysis_layers(tmp_path):
    import traceview.analyses  # noqa: F401
    from traceview.registry import ANALYSES

    if "modules" not in ANALYSES:
        pytest.skip("the modules analysis is not on this branch yet")
    path = require_shared() / "kineto" / "tracelens_qwen05b_h100.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    db = str(tmp_path / "h.duckdb")
    added = run_cli("add", str(path), "--db", db, cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    data = json.loads(run_cli("show", "--layers", "--db", db, "--format", "json", cwd=tmp_path).stdout)
    top = traceview.analyze(str(path)).summary["top_layers"]
    assert data["layers"] and top
    # the summary's top layers hold >= 10% each: among the run's largest type paths
    assert {t["type_path"] for t in top} <= {x["type_path"] for x in data["layers"]}
