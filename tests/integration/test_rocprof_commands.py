"""rocprofv3 runs through every front end, by the format registry alone (issue 32): ``analyze``,
``info``, ``convert``, ``sql``, ``diff``, ``history``, ``--workers`` and the app on the shared
llama.cpp run (and a generated run), and bad runs as one line with exit 2."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import require_shared

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path = REPO, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRACEVIEW_DEBUG"}
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


def one_line_exit_2(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert needle in lines[0], lines[0]


def csv_rows(path: Path) -> int:
    with open(path, newline="") as f:
        return sum(1 for _ in csv.DictReader(f))


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shared run (its own cache folder: the commands' caches stay in the test's tmp)."""
    folder = tmp_path_factory.mktemp("rocprof") / "llamacpp"
    shutil.copytree(require_shared() / "rocprof", folder)
    for p in folder.iterdir():
        p.chmod(0o644)
    return folder


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = importlib.util.spec_from_file_location("make_rocprof", REPO / "sample_traces" / "make_rocprof.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    folder = tmp_path_factory.mktemp("rocprof_gen") / "run"
    module.write_run(folder)
    (folder / "truth.json").unlink()
    return folder


def test_analyze_info_convert(shared: Path, tmp_path: Path) -> None:
    proc = run_cli("analyze", str(shared))
    assert proc.returncode == 0, proc.stderr
    assert "rocprof, 1 file" in proc.stdout and "mul_mat_vec_q" in proc.stdout
    info = run_cli("info", str(shared))
    assert info.returncode == 0, info.stderr
    assert "rocprofv3 run (process 2684120)" in info.stdout
    proc = run_cli("convert", str(shared), "-o", str(tmp_path / "pq"))
    assert proc.returncode == 0, proc.stderr
    import pyarrow.parquet as pq

    events = pq.read_table(tmp_path / "pq" / "events.parquet")
    kernels = csv_rows(shared / "rocprofv3_llamacpp_decode_kernel_trace.csv")
    hip = csv_rows(shared / "rocprofv3_llamacpp_decode_hip_api_trace.csv")
    assert events.num_rows == kernels + hip
    counters = sum(csv_rows(p) for p in shared.glob("*_counter_collection.csv"))
    assert pq.read_table(tmp_path / "pq" / "counters.parquet").num_rows == counters


def test_sql(shared: Path) -> None:
    proc = run_cli("sql", str(shared), "SELECT count(*) AS n FROM kernels", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["n"] == csv_rows(shared / "rocprofv3_llamacpp_decode_kernel_trace.csv")


def test_diff_of_the_same_run_is_clean(shared: Path, tmp_path: Path) -> None:
    copy = tmp_path / "again"
    shutil.copytree(shared, copy)
    proc = run_cli("diff", str(shared), str(copy), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    diff = json.loads(proc.stdout)
    assert diff["summary"]["verdict"] == "no significant change", diff["summary"]
    assert diff["summary"]["kernels_appeared"] == diff["summary"]["kernels_vanished"] == 0


def test_workers_give_the_same_report(shared: Path, tmp_path: Path) -> None:
    reports = []
    for extra in ([], ["--workers", "2"]):
        out = tmp_path / f"r{len(reports)}.json"
        proc = run_cli("analyze", str(shared), "--no-cache", "--format", "json", "-o", str(out), *extra)
        assert proc.returncode == 0, proc.stderr
        reports.append(json.loads(out.read_text()))
    assert reports[0]["summary"] == reports[1]["summary"]
    assert [f["title"] for f in reports[0]["findings"]] == [f["title"] for f in reports[1]["findings"]]


def test_history_keys_on_every_file_of_the_run(shared: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(shared, run)
    db = tmp_path / "h.duckdb"
    first = run_cli("history", "add", str(run), "--db", str(db), "--run", "a")
    assert first.returncode == 0, first.stderr
    again = run_cli("history", "add", str(run), "--db", str(db), "--run", "b")
    assert again.returncode != 0 and "already in" in again.stderr
    hip = run / "rocprofv3_llamacpp_decode_hip_api_trace.csv"  # a companion file changes: another run
    hip.write_text(hip.read_text() + '"HIP_RUNTIME_API_EXT","hipGetDevice","2684120","2684120","1",'
                                     '"342331487543011","342331487543012"\n')
    changed = run_cli("history", "add", str(run), "--db", str(db), "--run", "c")
    assert changed.returncode == 0, changed.stderr
    show = run_cli("history", "show", "--db", str(db), "--format", "json")
    assert show.returncode == 0, show.stderr
    assert [r["name"] for r in json.loads(show.stdout)["runs"]] == ["a", "c"]


def test_app_pages_render(shared: Path, generated: Path) -> None:
    pytest.importorskip("dash")
    from traceview.app import pages
    from traceview.app.server import create_app

    app = create_app([str(shared), str(generated)], warm=False)
    ctl: Any = app.traceview_controller
    assert len(ctl.store.runs) == 2
    for spec in ctl.store.runs:
        for page in pages.page_list():
            body, status = ctl.render_page(page.path, "", spec.id)
            assert "internal error" not in str(body), (spec.label, page.path)
            assert spec.label in status


@pytest.mark.parametrize("damage, needle", [
    ("column", "without the column Kernel_Name"),
    ("truncated", "truncated"),
    ("mixed", "more than one rocprofv3 run"),
    ("counters", "another program"),
])
def test_bad_runs_are_one_line(generated: Path, tmp_path: Path, damage: str, needle: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(generated, run)
    kernels = run / "synth_kernel_trace.csv"
    if damage == "column":
        kernels.write_text(kernels.read_text().replace('"Kernel_Name"', '"Name"', 1))
    elif damage == "truncated":
        kernels.write_bytes(kernels.read_bytes()[:-7])
    elif damage == "mixed":
        shutil.copy(run / "synth_marker_api_trace.csv", run / "other_marker_api_trace.csv")
    else:
        counters = run / "synth_counter_collection.csv"
        counters.write_text(counters.read_text().replace('"layer_2_gemm"', '"softmax"'))
    one_line_exit_2(run_cli("analyze", str(run)), needle)
    one_line_exit_2(run_cli("analyze", str(kernels)), needle)  # a file of the run, named alone
