"""The pipeline's step-progress hook: the phases in order on a sample trace, nothing drawn off a
terminal, and the same standard output with the bar forced on."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from traceview.commands._common import step_progress
from traceview.findings import Options
from traceview.pipeline import analyze

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "efficiency_roofline.json.gz"


def test_steps_come_in_phase_order() -> None:
    seen: list[tuple[str, int, int]] = []
    analyze(SAMPLE, Options(), use_cache=False, steps=lambda p, d, t: seen.append((p, d, t)))
    phases = [p for p, _, _ in seen]
    first = {p: phases.index(p) for p in dict.fromkeys(phases)}
    assert list(first) == ["analyses", "reduce", "report"]
    analyses = [(d, t) for p, d, t in seen if p == "analyses"]
    total = analyses[0][1]
    assert total > 1 and analyses == [(i, total) for i in range(total + 1)]  # one call per analysis
    assert seen[-1] == ("report", 1, 1)


def test_no_bar_off_a_terminal(monkeypatch) -> None:
    monkeypatch.delenv("TRACEVIEW_PROGRESS", raising=False)
    err = io.StringIO()
    with step_progress(Console(file=err, force_terminal=False)) as steps:
        assert steps is None
    assert err.getvalue() == ""


def _run(env_progress: str, tmp: Path) -> subprocess.CompletedProcess[bytes]:
    import os

    env = {**os.environ, "TRACEVIEW_PROGRESS": env_progress, "TRACEVIEW_CACHE_DIR": str(tmp)}
    return subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(SAMPLE), "--no-cache", "-f", "json"],
                          capture_output=True, env=env, check=True)


def test_stdout_identical_with_forced_progress(tmp_path: Path) -> None:
    plain, forced = _run("0", tmp_path), _run("1", tmp_path)
    assert forced.stdout == plain.stdout and plain.stdout


# ------------------------------------------------------------------------------------ parse phase

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces"


def _phases(seen: list[tuple[str, int, int]]) -> list[str]:
    return list(dict.fromkeys(p for p, _, _ in seen))


def test_parse_phase_counts_the_file_bytes_before_the_analyses() -> None:
    from traceview import api

    seen: list[tuple[str, int, int]] = []
    api.analyze(SAMPLE, cache=False, steps=lambda p, d, t: seen.append((p, d, t)))
    assert _phases(seen) == ["parse", "analyses", "reduce", "report"]
    parse = [(d, t) for p, d, t in seen if p == "parse"]
    size = SAMPLE.stat().st_size
    assert parse[0] == (0, size) and parse[-1] == (size, size)
    assert [d for d, _ in parse] == sorted(d for d, _ in parse)


def test_parse_phase_sums_the_files_of_a_multi_rank_load() -> None:
    from traceview import api

    files = sorted((SAMPLES / "synthetic_4rank").glob("rank*.json.gz"))
    seen: list[tuple[str, int, int]] = []
    api.load_inputs(files, cache=False, jobs=1, steps=lambda p, d, t: seen.append((p, d, t)))
    total = sum(f.stat().st_size for f in files)
    assert {t for _, _, t in seen} == {total}
    assert seen[0] == ("parse", 0, total) and seen[-1] == ("parse", total, total)


def test_parse_progress_scales_each_file_to_its_share() -> None:
    from traceview.progress import parse_progress

    seen: list[tuple[str, int, int]] = []
    a, b = Path("a"), Path("b")
    progress = parse_progress(lambda p, d, t: seen.append((p, d, t)), [(a, 100), (b, 300)])
    progress(a, 1, 2)  # half of a: 50 bytes
    progress(b, 1, 1)  # b read whole (a cache hit tells 1 of 1)
    progress(a, 2, 2)
    assert seen == [("parse", 0, 400), ("parse", 50, 400), ("parse", 350, 400), ("parse", 400, 400)]


def test_nsight_export_tells_its_tables() -> None:
    from traceview.parsers.nsys import parse_nsys

    seen: list[tuple[int, int]] = []
    parse_nsys(SAMPLES / "synthetic_nsys.sqlite", progress=lambda d, t: seen.append((d, t)))
    assert len(seen) > 2 and all(t == seen[0][1] for _, t in seen)
    assert [d for d, _ in seen] == list(range(1, len(seen) + 1)) and seen[-1][0] < seen[-1][1]


def test_xspace_tells_start_and_end(tmp_path: Path) -> None:
    from traceview import api
    from traceview.parsers.xspace.schema import xspace_class

    space = xspace_class()()
    plane = space.planes.add(name="/device:GPU:0")
    plane.event_metadata[1].name = "kernel"
    line = plane.lines.add(name="Stream #1", timestamp_ns=1_000)
    line.events.add(metadata_id=1, offset_ps=0, duration_ps=1_000_000)
    xplane = tmp_path / "one.xplane.pb"
    xplane.write_bytes(space.SerializeToString())
    seen: list[tuple[str, int, int]] = []
    api.load_inputs([xplane], cache=False, steps=lambda p, d, t: seen.append((p, d, t)))
    size = xplane.stat().st_size
    assert seen == [("parse", 0, size), ("parse", 0, size), ("parse", size, size)]


# ------------------------------------------------------------------------------------ job ranks


def test_job_tells_ranks_as_they_come_back() -> None:
    from traceview.jobs import InProcess

    files = sorted((SAMPLES / "synthetic_4rank").glob("rank*.json.gz"))
    executor = InProcess()
    seen: list[tuple[str, int, int]] = []
    executor.steps = lambda p, d, t: seen.append((p, d, t))
    analyze(files, Options(), use_cache=False, executor=executor, steps=executor.steps)
    ranks = [(d, t) for p, d, t in seen if p == "ranks"]
    assert ranks[0] == (0, len(files)) and ranks[-1] == (4, 4)
    assert _phases(seen) == ["ranks", "reduce", "report"]


# ------------------------------------------------------------------------------------ --no-progress


def _cli(args: list[str], env_progress: str | None, tmp: Path) -> subprocess.CompletedProcess[bytes]:
    import os

    env = {k: v for k, v in os.environ.items() if k != "TRACEVIEW_PROGRESS"}
    env["TRACEVIEW_CACHE_DIR"] = str(tmp)
    if env_progress is not None:
        env["TRACEVIEW_PROGRESS"] = env_progress
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args], capture_output=True, env=env, check=True)


def test_forced_bar_draws_the_phases_on_stderr(tmp_path: Path) -> None:
    err = _cli(["analyze", str(SAMPLE), "--no-cache", "-f", "json"], "1", tmp_path).stderr.decode()
    assert "parse" in err and "analyses" in err


def test_no_progress_flag_and_no_terminal_print_nothing(tmp_path: Path) -> None:
    args = ["analyze", str(SAMPLE), "--no-cache", "-f", "json"]
    flagged = _cli([*args, "--no-progress"], "1", tmp_path)  # the flag wins over the forcing variable
    piped = _cli(args, None, tmp_path)  # stderr is a pipe here: not a terminal
    for run in (flagged, piped):
        assert "analyses" not in run.stderr.decode() and "parse" not in run.stderr.decode()
    assert flagged.stdout == piped.stdout and piped.stdout


def test_no_progress_on_the_load_only_commands(tmp_path: Path) -> None:
    out = _cli(["info", str(SAMPLE), "--no-cache", "--no-progress"], "1", tmp_path)
    assert "parse" not in out.stderr.decode()
