"""The CLI as a user runs it: exit codes, one-line errors, the summary, info and convert."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import SAMPLE_TRACES, SHARED_TRACES, require_shared


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def small_trace(path: Path, rank: int | None = 0) -> Path:
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Test GPU", "numSms": 4, "totalGlobalMem": 1 << 30}],
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 10,
             "args": {"External id": 7}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 5,
             "args": {"correlation": 1, "External id": 7}},
            {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 10, "dur": 50,
             "args": {"correlation": 1, "stream": 7, "device": 0}},
        ],
    }
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 1}
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "content, fragment",
    [
        (None, "no such file"),
        (b"", "is empty"),
        (b"not a trace at all", "not a trace"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1', "truncated"),
        (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage", "gzip"),
        (b"SQLite format 3\x00" + b"\x00" * 200, "sqlite"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, fragment):
    path = tmp_path / "input.json"
    if content is not None:
        path.write_bytes(content)
    result = run("analyze", str(path))
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert str(path) in lines[0]
    assert fragment.lower() in lines[0].lower()


def test_analyze_prints_the_summary(tmp_path):
    path = small_trace(tmp_path / "run.json")
    result = run("analyze", str(path), "--summary-only", "--no-cache")
    assert result.returncode == 0, result.stderr
    assert "Test GPU" in result.stdout
    assert "run.json" in result.stdout


def test_analyze_runs_the_analyses_without_error(tmp_path):
    path = small_trace(tmp_path / "run.json")
    result = run("analyze", str(path), "--no-cache")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_info_lists_metadata_keys_not_values(tmp_path):
    path = tmp_path / "secret.json"
    small_trace(path)
    doc = json.loads(path.read_text())
    doc["metadata"] = {"env": {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123456789"}}
    path.write_text(json.dumps(doc))
    result = run("info", str(path), "--no-cache")
    assert result.returncode == 0, result.stderr
    assert "Test GPU" in result.stdout and "metadata" in result.stdout
    assert "hf_abcdefghijklmnop" not in result.stdout


def test_convert_writes_parquet_that_round_trips(tmp_path):
    path = small_trace(tmp_path / "run.json")
    out = tmp_path / "out"
    result = run("convert", str(path), "-o", str(out), "--no-cache")
    assert result.returncode == 0, result.stderr
    events = pq.read_table(out / "events.parquet")
    assert events.num_rows == 4
    assert sorted(events.column("kind").to_pylist()) == ["annotation", "cpu_op", "kernel", "runtime"]
    assert pq.read_table(out / "links.parquet").num_rows == 2  # launch + cpu_op
    assert json.loads((out / "ranks.json").read_text())["ranks"][0]["rank"] == 0


def test_duplicate_rank_is_an_error_naming_both_files(tmp_path):
    a = small_trace(tmp_path / "a.json", rank=0)
    b = small_trace(tmp_path / "b.json", rank=0)
    result = run("analyze", str(a), str(b), "--summary-only")
    assert result.returncode == 2
    assert "a.json" in result.stderr and "b.json" in result.stderr
    assert "Traceback" not in result.stderr


def test_format_is_detected_by_content_not_extension(tmp_path):
    path = tmp_path / "trace.data"
    path.write_bytes(gzip.compress(small_trace(tmp_path / "x.json").read_bytes()))
    result = run("analyze", str(path), "--summary-only", "--no-cache")
    assert result.returncode == 0, result.stderr
    assert "Test GPU" in result.stdout


def test_bundled_sample_analyzes():
    sample = SAMPLE_TRACES / "synthetic_4rank"
    if not sample.exists():
        pytest.fail(f"bundled sample missing: {sample}")
    result = run("analyze", str(sample), "--no-cache", "--details")
    assert result.returncode == 0, result.stderr
    for rank in range(4):
        assert f"rank{rank}.json.gz" in result.stdout
    # a problem every rank has is listed once for the job, not once per rank
    assert "on all 4 ranks" in result.stdout
    assert "straggler_rank" in result.stdout
    # the first screen leads with the answer and fits one screen
    first = run("analyze", str(sample))
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert len(lines) <= 40 and lines[0].startswith("traceview · 4 ranks")
    assert "step time median" in first.stdout and "GPU utilization" in first.stdout
    assert "F1 " in first.stdout and "Top kernels" in first.stdout and "rank0.json.gz" not in first.stdout


def test_analyze_options_and_formats_for_a_job(tmp_path):
    """--workers gives every format, and the same findings as the in-memory path."""
    sample = str(SAMPLE_TRACES / "synthetic_4rank")
    out = tmp_path / "job.json"
    job = run("analyze", sample, "--workers", "2", "--format", "json", "-o", str(out))
    assert job.returncode == 0, job.stderr
    local = run("analyze", sample, "--format", "json")
    assert local.returncode == 0, local.stderr
    job_data, local_data = json.loads(out.read_text()), json.loads(local.stdout)
    assert job_data["findings"] == local_data["findings"]
    assert job_data["execution"]["executor"] != local_data["execution"]["executor"]
    text = run("analyze", sample, "--workers", "2", "--top", "2")
    assert text.returncode == 0, text.stderr
    assert "F1 " in text.stdout and "F2 " in text.stdout and "F3 " not in text.stdout
    assert "more findings: --top" in text.stdout and "analyzed by" in text.stdout


def test_bad_format_and_output_are_one_line_errors(tmp_path):
    sample = str(SAMPLE_TRACES / "synthetic_4rank")
    result = run("analyze", sample, "--format", "yaml")
    assert result.returncode == 2 and "yaml" in result.stderr and "markdown" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = run("analyze", sample, "-o", str(tmp_path))
    assert result.returncode == 2 and "is a directory" in result.stderr


def test_every_shared_trace_analyzes_without_error():
    require_shared()
    paths = sorted(str(p) for p in (SHARED_TRACES / "kineto").glob("*.json.gz"))
    paths += [str(SHARED_TRACES / "kineto" / "hta_trace_filter_2ranks"),
              str(SHARED_TRACES / "kineto" / "param_dlrm_8ranks_v100")]
    paths += sorted(str(p) for p in (SHARED_TRACES / "nsys").glob("*.sqlite"))
    failures = []
    for path in paths:
        result = run("analyze", path, "--no-cache")
        if result.returncode != 0 or "Traceback" in result.stderr:
            failures.append(f"{path}: exit {result.returncode}: {result.stderr.strip()[-300:]}")
    assert not failures, "\n".join(failures)


def test_usage_errors_exit_2_without_a_traceback(tmp_path):
    result = run("analyze", "--no-such-flag", str(tmp_path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    result = run("analyze")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_help_exits_0():
    result = run("--help")
    assert result.returncode == 0
    assert "analyze" in result.stdout


#: run the CLI in a fresh process, then print the top-level modules it imported
_LIST_MODULES = ("import sys; sys.argv = ['traceview', *sys.argv[1:]]\n"
                 "from traceview.cli import main\n"
                 "try:\n    main()\nfinally:\n    print('MODULES', ' '.join(sorted(sys.modules)))\n")


def imported_modules(*args: str) -> set[str]:
    result = subprocess.run([sys.executable, "-c", _LIST_MODULES, *args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("MODULES "))
    return set(line.split()[1:])


@pytest.mark.parametrize("args", [("--help",), ("analyze", "--help"), ("app", "--help")])
def test_help_imports_no_heavy_library(args):
    """Fast start (issue 12): help needs typer only; numpy, pyarrow, pandas, plotly, dash and rich's
    help formatting would triple its start time (benchmarks/bench_start.py)."""
    modules = imported_modules(*args)
    assert "traceview.commands.analyze" in modules  # every command was registered
    heavy = {m for m in modules if m.split(".")[0] in {"numpy", "pyarrow", "pandas", "plotly", "dash", "msgspec"}}
    assert not heavy, sorted(heavy)[:10]
    assert "typer.rich_utils" not in modules and "rich.console" not in modules


def test_info_imports_no_report_or_front_end(tmp_path):
    """`traceview info` reads the trace, not the analyses, the report, the renderers or the app."""
    modules = imported_modules("info", str(small_trace(tmp_path / "t.json")))
    assert "traceview.loading" in modules  # it did load the trace
    unwanted = {m for m in modules if m.split(".")[0] in {"plotly", "dash"}
                or m.startswith(("traceview.pipeline", "traceview.report", "traceview.render", "traceview.analyses",
                                 "traceview.app"))}
    assert not unwanted, sorted(unwanted)


def test_commands_pipe_as_wide_as_the_terminal_report():
    from traceview.commands._common import PIPED_WIDTH
    from traceview.render.terminal import TEXT_WIDTH

    assert PIPED_WIDTH == TEXT_WIDTH


def test_console_script_flushes_a_big_report_and_keeps_the_exit_status(tmp_path):
    """``traceview`` (``cli.run``) ends without the interpreter's teardown: the whole JSON report
    piped to standard output still arrives, and the exit status is main's (0; 2 for bad input)."""
    shown = run("analyze", str(SAMPLE_TRACES / "synthetic_4rank"), "--no-cache", "-f", "json")
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)  # cut short, it would not parse
    assert len(shown.stdout) > 100_000 and report["findings"]
    bad = run("analyze", str(tmp_path / "missing.json"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_console_script_runs_the_exit_handlers(tmp_path):
    """Handlers registered with atexit (logging's flush, multiprocessing's clean-up) still run."""
    marker = tmp_path / "ran"
    code = ("import atexit, sys, pathlib\n"
            f"atexit.register(pathlib.Path({str(marker)!r}).write_text, 'yes')\n"
            "sys.argv = ['traceview', '--version']\n"
            "from traceview.cli import run\n"
            "run()\n")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and shown.stdout.startswith("traceview ")
    assert marker.read_text() == "yes"


@pytest.mark.parametrize("code, status, printed", [(None, 0, ""), (3, 3, ""), ("no such thing", 1, "no such thing")])
def test_exit_status_is_the_interpreters(code, status, printed, capsys):
    from traceview.cli import exit_status

    assert exit_status(code) == status
    assert capsys.readouterr().err.strip() == printed
