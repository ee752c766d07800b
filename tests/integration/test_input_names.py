"""Inputs named as the user gave them, without their directories (issue 30, item 4;
docs/reports.md "Redaction": input files are named without their directory, and the inputs'
directories are removed from warnings).

A file with no rank gets the warning "FILE: no rank in distributedInfo or file name; treated as
rank 0". Given as an absolute path, its directory went into the JSON report's ``ranks[].warnings``;
read back from the trace cache by a later run, the warning (and ``info``) named the file as the
first run had been given it. Every format and ``info`` are checked, for an absolute path and a
relative one, through one shared cache (the second run reads the first run's entry)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WARNING = "trace.json: no rank in distributedInfo or file name; treated as rank 0"


def unranked_trace(path: Path) -> Path:
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 100 + 10 * i, "dur": 5,
               "args": {"device": 0, "stream": 7, "correlation": i + 1}} for i in range(5)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def run_cli(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRACEVIEW_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-m", "traceview.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("first", ["absolute", "relative"])
def test_inputs_are_named_without_their_directory(tmp_path: Path, first: str) -> None:
    run_dir = tmp_path / "home" / "someone" / "run"
    run_dir.mkdir(parents=True)
    trace = unranked_trace(run_dir / "trace.json")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    given = {"absolute": (tmp_path, str(trace)), "relative": (run_dir.parent, "run/trace.json")}
    order = [first, "relative" if first == "absolute" else "absolute"]
    for how in order:  # the second run reads the trace the first one cached
        cwd, arg = given[how]
        for fmt in ("json", "markdown", "html", "text"):
            out = out_dir / f"{how}.{fmt}"
            run_cli(cwd, "analyze", arg, "--format", fmt, "-o", str(out))
            text = out.read_text()
            assert str(run_dir) not in text and "someone" not in text, (how, fmt)
            if fmt == "json":
                report = json.loads(text)
                assert [i["file"] for i in report["inputs"]] == ["trace.json"]
                assert WARNING in report["ranks"][0]["warnings"], report["ranks"][0]["warnings"]
                assert WARNING in [w["message"] for w in report["warnings"]]
            elif fmt != "text":  # the terminal summary names no file
                assert WARNING in text, (how, fmt)
        info = run_cli(cwd, "info", arg)
        assert "someone" not in info and WARNING in " ".join(info.split()), (how, info)
