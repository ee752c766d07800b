"""One entry point for every front end (issue 26, item 3).

* Every command that analyses traces declares the same analysis options, with the same help
  (walked on the CLI's click commands), checks them before any work, and hands them to the analyses.
* The CLI, the Python API and the app read and write the same report cache entries: what one of
  them analysed, the others read back without running the pipeline.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

import traceview
from traceview import report_cache
from traceview.cli import app as cli_app
from traceview.cli import readable_metavars
from traceview.findings import Options

from conftest import SAMPLE_TRACES

#: the analysis options every command that analyses takes (issue 26: --comm-pattern, --comm-config,
#: --step-marker, --gpu-specs, --model-flops, --no-cache, --jobs; --mfu-dtype goes with --model-flops)
ANALYSIS_FLAGS = {"--step-marker", "--comm-pattern", "--comm-config", "--gpu-specs", "--model-flops", "--mfu-dtype",
                  "--ncu", "--graph-capture", "--no-cache", "--jobs", "--no-progress"}
#: the commands the issue names as analysing
ANALYSING = {"analyze", "diff", "check", "app", "export-perfetto", "history", "sql"}
#: the commands that read traces without analysing them: the loading options only
LOAD_ONLY = {"info": {"--no-cache", "--jobs", "--no-progress"}, "convert": {"--no-cache", "--jobs", "--no-progress"}}
FOLDER = SAMPLE_TRACES / "synthetic_4rank"  # four ranks and a truth.json the folder scan skips


def _commands() -> dict[str, Any]:
    root = readable_metavars(typer.main.get_command(cli_app))
    return dict(root.commands)  # type: ignore[attr-defined]


def _long_options(command: Any) -> dict[str, Any]:
    return {opt: param for param in command.params for opt in param.opts if opt.startswith("--")}


def _described(param: Any) -> tuple:
    """What a user sees and gets of an option: its names, help, default, value name and kind."""
    return (tuple(param.opts), tuple(param.secondary_opts), param.help, param.default, param.metavar,
            param.multiple, param.is_flag, param.type.name, param.envvar)


def test_every_command_that_analyses_declares_the_same_analysis_options() -> None:
    commands = _commands()
    analysing = {name for name, command in commands.items()
                 if ANALYSIS_FLAGS & set(_long_options(command)) and name not in LOAD_ONLY}
    assert ANALYSING <= analysing, sorted(ANALYSING - analysing)
    reference: tuple[str, dict[str, tuple]] | None = None
    for name in sorted(analysing):
        options = _long_options(commands[name])
        missing = ANALYSIS_FLAGS - set(options)
        assert not missing, f"{name} lacks {sorted(missing)}"
        group = {flag: _described(options[flag]) for flag in ANALYSIS_FLAGS}
        assert all(d[2] for d in group.values()), f"{name}: an analysis option without help"
        if reference is None:
            reference = (name, group)
            continue
        for flag in sorted(ANALYSIS_FLAGS):
            assert group[flag] == reference[1][flag], f"{flag} of {name} differs from {reference[0]}'s"
    for name, flags in LOAD_ONLY.items():
        assert set(_long_options(commands[name])) & ANALYSIS_FLAGS == flags, name


def test_the_group_is_declared_once() -> None:
    """The options module declares the group; no command module declares one of its options."""
    from traceview.commands import options

    declared = {d for o in options.ANALYSIS_GROUP for d in o.option.param_decls if d.startswith("--")}
    assert declared == ANALYSIS_FLAGS
    commands_dir = Path(options.__file__).parent
    for module in sorted(commands_dir.glob("*.py")):
        if module.name == "options.py":
            continue
        text = module.read_text(encoding="utf-8")
        for flag in ANALYSIS_FLAGS:
            assert f'"{flag}"' not in text, f"{module.name} declares {flag}"


def _invocations(tmp_path: Path, trace: str) -> dict[str, list[str]]:
    """Each analysing command's arguments for one trace (the analysis options come after them)."""
    return {"analyze": ["analyze", trace, "-f", "json", "-o", str(tmp_path / "r.json")],
            "diff": ["diff", trace, trace, "-f", "json"],
            "check": ["check", trace, "--max-exposed-comm", "99%"],
            "app": ["app", trace],
            "export-perfetto": ["export-perfetto", trace, "-o", str(tmp_path / "p.json")],
            "history": ["history", "add", trace, "--db", str(tmp_path / "h.duckdb")],
            "sql": ["sql", trace, "SELECT count(*) AS n FROM collectives"]}


def _cli(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """``traceview ARGS`` in this process (its exit status), as the console script runs it; the
    command process's Arrow memory pool (traceview.runtime) is given back to this test process."""
    import pyarrow as pa

    from traceview.cli import main

    pool = pa.default_memory_pool()
    monkeypatch.setattr(sys, "argv", ["traceview", *args])
    try:
        main()
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        pa.set_memory_pool(pool)
    return 0


@pytest.mark.parametrize("name", sorted(ANALYSING))
def test_a_bad_analysis_option_fails_before_any_work(name: str, tmp_path: Path, capsys: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The options are checked before the inputs are looked at: on a trace path that does not exist,
    the error is the option's (one line, exit 2), not the missing file's."""
    args = _invocations(tmp_path, str(tmp_path / "no-such-trace.json"))[name]
    assert _cli(monkeypatch, *args) == 2  # the missing file alone: an error, so the path is used
    assert "no-such-trace.json" in capsys.readouterr().err
    assert _cli(monkeypatch, *args, "--comm-pattern", "lib=(") == 2
    err = capsys.readouterr().err
    assert "--comm-pattern 'lib=(': not a regular expression" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("name", sorted(ANALYSING))
def test_every_analysing_command_hands_its_options_to_the_analyses(name: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """--comm-pattern, --step-marker and --model-flops reach the Options the analyses run with
    (``check --max-exposed-comm`` judges communication classified with the user's rules)."""
    import traceview.pipeline
    import traceview.sqlviews

    seen: list[Options] = []
    pipeline_analyze = traceview.pipeline.analyze

    def recording(source: Any, options: Options | None = None, **kwargs: Any) -> Any:
        seen.append(options or Options())
        return pipeline_analyze(source, options, **kwargs)

    class RecordingSession(traceview.sqlviews.SqlSession):
        def __init__(self, trace: Any, options: Options | None = None) -> None:
            seen.append(options or Options())
            super().__init__(trace, options)

    def serve(*, store: Any, **_kwargs: Any) -> None:
        store.context(0)  # what the first page asks for

    monkeypatch.setattr(traceview.pipeline, "analyze", recording)
    monkeypatch.setattr(traceview.sqlviews, "SqlSession", RecordingSession)
    monkeypatch.setattr("traceview.app.server.serve", serve)
    args = _invocations(tmp_path, str(FOLDER))[name]
    code = _cli(monkeypatch, *args, "--comm-pattern", "mine=ncclKernel", "--step-marker", r"^ProfilerStep#\d+$",
                "--model-flops", "6*1e9*4096", "--no-cache", "--jobs", "1")
    assert code in (0, 1), code  # check: 1 when a rule is broken
    assert seen, f"{name}: no analysis ran"
    for options in seen:
        assert options.comm_patterns == ("mine=ncclKernel",), name
        assert options.step_marker == r"^ProfilerStep#\d+$" and options.model_flops_per_step == 6 * 1e9 * 4096, name


@pytest.mark.parametrize("name", sorted(ANALYSING) + sorted(LOAD_ONLY))
def test_a_command_scans_each_folder_once(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inputs are found once per command and passed down (not found again to load, to key the
    report and to size the progress bar): the folder's truth.json, which only a folder scan reads,
    is read once per folder given."""
    import traceview.discovery

    scans: list[str] = []
    read_head = traceview.discovery.read_head

    def counting(path: Path, *args: Any, **kwargs: Any) -> bytes:
        if Path(path).name == "truth.json":
            scans.append(str(Path(path).parent))
        return read_head(path, *args, **kwargs)

    monkeypatch.setattr(traceview.discovery, "read_head", counting)
    monkeypatch.setattr("traceview.app.server.serve", lambda *, store, **_kw: store.context(0))
    args = {**_invocations(tmp_path, str(FOLDER)), "info": ["info", str(FOLDER)],
            "convert": ["convert", str(FOLDER), "-o", str(tmp_path / "parquet")]}[name]
    assert _cli(monkeypatch, *args) in (0, 1)
    assert scans == [str(FOLDER)] * (2 if name == "diff" else 1), scans


# ------------------------------------------------------------------------------------ one report cache


def _entries() -> set[str]:
    folder = report_cache.cache_folder()
    return {f.name for f in folder.glob("*" + report_cache.SUFFIX)} if folder.is_dir() else set()


def _no_computing(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, running the analyses fails the test: a report must come from the cache."""
    import traceview.pipeline

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the analyses ran again: the report cache entry was not shared")

    monkeypatch.setattr(traceview.pipeline, "analyze", refuse)


def _json(report: traceview.Report) -> str:
    from traceview.render import get_renderer

    return str(get_renderer("json")(top=5, details=False, summary_only=False).render(report))


def test_analyze_writes_the_entry_the_python_api_and_the_app_read(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "report.json"
    shown = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(FOLDER), "-f", "json", "-o",
                            str(out)], capture_output=True, text=True, timeout=600)
    assert shown.returncode == 0, shown.stderr
    [entry] = _entries()
    _no_computing(monkeypatch)

    report = traceview.analyze(str(FOLDER))  # the Python API, with its default options
    assert _json(report) == out.read_text(encoding="utf-8")
    assert "truth.json: skipped, not a trace" in str(report.data["warnings"])

    from traceview.app.runs import RunStore, discover_runs

    ctx = RunStore(discover_runs([str(FOLDER)])).context(0)
    assert ctx.from_disk and ctx.report.data == report.data and ctx.report.trace is ctx.trace
    # the other commands that analyse read it too
    assert _cli(monkeypatch, "check", str(FOLDER), "--max-idle", "99%") == 0
    assert _cli(monkeypatch, "diff", str(FOLDER), str(FOLDER), "-f", "json") == 0
    assert _cli(monkeypatch, "export-perfetto", str(FOLDER), "-o", str(tmp_path / "p.json")) == 0
    assert _cli(monkeypatch, "history", "add", str(FOLDER), "--db", str(tmp_path / "h.duckdb")) == 0
    assert _entries() == {entry}


def test_analysis_options_key_the_same_entry_on_every_front_end(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The same --comm-pattern and --step-marker: one entry; ``check`` and the app read what
    ``analyze`` wrote, and the Python API given the same Options fields."""
    rules = ["--comm-pattern", "mine=ncclKernel", "--step-marker", r"^ProfilerStep#\d+$"]
    assert _cli(monkeypatch, "analyze", str(FOLDER), "-f", "json", "-o", str(tmp_path / "r.json"), *rules) == 0
    [entry] = _entries()
    _no_computing(monkeypatch)
    assert _cli(monkeypatch, "check", str(FOLDER), "--max-exposed-comm", "99%", *rules) == 0
    report = traceview.analyze(FOLDER, comm_patterns=("mine=ncclKernel",), step_marker=r"^ProfilerStep#\d+$")
    assert _json(report) == (tmp_path / "r.json").read_text(encoding="utf-8")

    stores: list[Any] = []
    monkeypatch.setattr("traceview.app.server.serve", lambda *, store, **_kw: stores.append(store))
    assert _cli(monkeypatch, "app", str(FOLDER), *rules) == 0
    ctx = stores[0].context(0)
    assert ctx.from_disk and ctx.report.data == report.data
    assert _entries() == {entry}


def _twelve_ranks(folder: Path) -> Path:
    """Twelve ranks (from the file names) and a JSON file that is not a trace: rank10 sorts before
    rank2 in a folder scan, and the scan skips notes.json."""
    folder.mkdir()
    doc = json.loads(gzip.decompress((SAMPLE_TRACES / "torch_cpu_mlp.json.gz").read_bytes()))
    for rank in range(12):
        (folder / f"rank{rank}.json").write_text(json.dumps(doc))
    (folder / "notes.json").write_text('{"not": "a trace"}')
    return folder


def test_a_run_the_app_analysed_is_read_by_the_cli_and_the_python_api(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from traceview.app.runs import RunStore, discover_runs

    folder = _twelve_ranks(tmp_path / "job")
    [run] = discover_runs([str(folder)])
    ctx = RunStore([run]).context(0)
    assert not ctx.from_disk and len(ctx.trace.ranks) == 12
    [entry] = _entries()
    _no_computing(monkeypatch)
    assert _cli(monkeypatch, "analyze", str(folder), "-f", "json", "-o", str(tmp_path / "r.json")) == 0
    assert (tmp_path / "r.json").read_text(encoding="utf-8") == _json(ctx.report)
    assert traceview.analyze(str(folder)).data == ctx.report.data
    assert _entries() == {entry}


def test_a_job_and_a_trace_are_never_cached(tmp_path: Path) -> None:
    """A job's report has bounded tables and a loaded Trace has no files to key: neither is stored."""
    from traceview.jobs import make_executor

    job = traceview.analyze(str(FOLDER), executor=make_executor(1))
    trace = traceview.load(str(FOLDER))
    in_memory = traceview.analyze(trace)
    assert not _entries()
    assert job.data["summary"] == in_memory.data["summary"]
