"""``traceview history add|show|check``: a run history in a DuckDB file, trends, and a regression
gate over many runs (docs/history.md). One command with an ACTION argument; an option of another
action is refused (one line, exit 2) rather than ignored. The analysis options (the group every
analysing command takes: traceview/commands/options.py) are ``add``'s: it analyses the run as
``traceview analyze`` does, through the one entry point, report cache included."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, List, Optional

import typer

from traceview.commands.format_help import ANY_TRACE_FORMAT
from traceview.commands.options import ANALYSIS_OPTIONS, AnalysisArgs, with_analysis_options
from traceview.errors import TraceviewError

ACTIONS = ("add", "show", "check")
_TIME = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ns|us|µs|ms|s)\s*$")
_NS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}


def parse_time_ns(option: str, text: str) -> float:
    """``1us``, ``250 ns``, ``0.5ms`` -> ns (one line, exit 2, otherwise)."""
    m = _TIME.match(text)
    if m is None:
        raise TraceviewError(f"{option}: cannot read {text!r} (expected a time with a unit, e.g. 1us or 0.5ms)")
    return float(m.group(1)) * _NS[m.group(2)]


_SHARE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(%?)\s*$")


def parse_share_option(option: str, text: str) -> float:
    """``5%`` or ``0.05`` -> 0.05 (one line, exit 2, otherwise; a bare number above 1 is ambiguous).
    The same syntax as ``check``'s shares, without importing ``traceview.compare`` (start time)."""
    m = _SHARE.match(text)
    if m is None:
        raise TraceviewError(f"{option}: cannot read {text!r} (expected a share such as 5% or 0.05)")
    value = float(m.group(1))
    if not m.group(2) and value > 1:
        raise TraceviewError(f"{option}: {text!r} is ambiguous (write {text}% for a share)")
    return value / 100.0 if m.group(2) else value


@with_analysis_options
def command(
    action: str = typer.Argument(..., help="add (store a run), show (trends) or check (regression gate)."),
    paths: Optional[List[str]] = typer.Argument(None, help="add: the run's trace files or folder(s), "
                                                + ANY_TRACE_FORMAT),
    db: Path = typer.Option(Path(".traceview/history.duckdb"), "--db", help="The history database (DuckDB file)."),
    run_name: Optional[str] = typer.Option(None, "--run", help="add: the run's name (default: the first path's name)."),
    tag: Optional[List[str]] = typer.Option(None, "--tag", help="key=value (repeatable). add: stored with the run "
                                            "(commit, branch, model, batch size); show/check: only runs so tagged."),
    kernel: Optional[str] = typer.Option(None, "--kernel", help="show: kernels whose normalised name matches this "
                                         "regex (default: the newest run's largest)."),
    last: int = typer.Option(10, "--last", min=1, help="show: the last N runs."),
    top: int = typer.Option(10, "--top", min=1, help="show: how many kernels without --kernel."),
    layers: bool = typer.Option(False, "--layers", help="show: also the largest layers (module type paths: "
                                "inclusive GPU time per GPU and step, share) of each run."),
    measured: bool = typer.Option(False, "--measured", help="show: also the SOL compute and memory % of peak of "
                                  "the largest kernels measured by Nsight Compute (runs added with --ncu)."),
    fmt: str = typer.Option("table", "--format", "-f", help="show/check: table, markdown or json."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="check: compare the newest run with this run "
                                           "(id or name) or the runs tagged key=value, instead of the change-point "
                                           "search over the last runs."),
    max_regression: str = typer.Option("5%", "--max-regression", help="check: a rise must exceed this share of "
                                       "the baseline (and the noise)."),
    noise_k: Optional[float] = typer.Option(None, "--noise-k", help="check: ... and this many standard errors (from "
                                            "the MAD); default: chosen for the number of series and splits tested "
                                            "(Bonferroni, 5% chance of any false alarm per check, at least 4)."),
    min_delta: str = typer.Option("1us", "--min-delta", help="check: ... and this much time per step."),
    window: int = typer.Option(20, "--window", min=1, help="check: the change may start in any of the last N runs "
                               "(each judged against up to 20 runs before it)."),
    any_gpu: bool = typer.Option(False, "--any-gpu", help="check: compare runs on every GPU model (default: the "
                                 "newest run's model only)."),
    analysis: AnalysisArgs = ANALYSIS_OPTIONS,
) -> None:
    """Keep every run's kernels, collectives and step time in a database; show trends; gate regressions.
    The analysis options (--step-marker to --jobs) are those of `add`, as `analyze` takes them.

    \b
    Examples:
      traceview history add traces/ --run nightly-1432 --tag commit=$GIT_SHA --tag branch=main
      traceview history show --kernel 'gemm|flash' --last 20
      traceview history show --layers --top 8    # the largest layers (module type paths)
      traceview history show --measured          # SOL % of the measured kernels (runs added with --ncu)
      traceview history check --max-regression 5% --format markdown   # exit 1 when something regressed
      traceview history check --baseline branch=main
    """
    from traceview.commands.formats import require_format, require_noise_k
    from traceview.history import query, render

    if action not in ACTIONS:
        raise TraceviewError(f"history: {action!r} is not one of {', '.join(ACTIONS)} (e.g. traceview history add "
                             "traces/)")
    _refuse_foreign_options(action, {
        "--run": run_name is not None, **analysis.given(),
        "--kernel": kernel is not None, "--last": last != 10, "--top": top != 10, "--layers": layers,
        "--measured": measured,
        "--baseline": baseline is not None, "--max-regression": max_regression != "5%",
        "--noise-k": noise_k is not None, "--min-delta": min_delta != "1us", "--window": window != 20,
        "--any-gpu": any_gpu})
    tags = query.parse_tags(tag or [])
    if action == "add":
        _add(db, paths or [], run_name, dict(tags), analysis)
        return
    if paths:
        raise TraceviewError(f"history {action}: takes no paths (it reads the database; --db FILE)")
    require_format(fmt, render.SHOW_FORMATS)
    if action == "show":
        with _opened(db) as con:
            result = query.show(con, kernel=kernel, tags=tags, last=last, top=top, layers=layers,
                                measured=measured)
        typer.echo(render.render_show(result, fmt), nl=False)
        return
    if noise_k is not None:
        require_noise_k(noise_k)
    options = _detect_options(max_regression, noise_k, min_delta, window)
    with _opened(db) as con:
        checked = query.check(con, options=options, tags=tags, baseline=baseline, any_gpu=any_gpu)
    typer.echo(render.render_check(checked, fmt), nl=False)
    if checked.regressed:
        raise typer.Exit(1)


#: the actions each action-specific option applies to
_OPTION_ACTIONS = {**dict.fromkeys(("--run", *AnalysisArgs().given()), "add"),
                   **dict.fromkeys(("--kernel", "--last", "--top", "--layers", "--measured"), "show"),
                   **dict.fromkeys(("--baseline", "--max-regression", "--noise-k", "--min-delta", "--window",
                                    "--any-gpu"), "check")}


def _refuse_foreign_options(action: str, given: dict[str, bool]) -> None:
    """One line (exit 2) for an option of another action: it would be silently ignored otherwise."""
    for option, used in given.items():
        if used and _OPTION_ACTIONS[option] != action:
            raise TraceviewError(f"history {action}: {option} is an option of `history {_OPTION_ACTIONS[option]}`")


def _detect_options(max_regression: str, noise_k: float | None, min_delta: str, window: int) -> Any:
    from traceview.history import DetectOptions

    share = parse_share_option("--max-regression", max_regression)
    return DetectOptions(max_regression=share, k=noise_k, min_delta_ns=parse_time_ns("--min-delta", min_delta),
                         window=window)


class _opened:
    """The history database opened for the block and closed after it (missing: one line, exit 2)."""

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self.path, self.create, self.con = path, create, None

    def __enter__(self) -> Any:
        from traceview.history import open_history

        self.con = open_history(self.path, create=self.create)
        return self.con

    def __exit__(self, *_exc: object) -> None:
        if self.con is not None:
            self.con.close()


def _add(db: Path, paths: List[str], run_name: Optional[str], tags: dict[str, str], analysis: AnalysisArgs) -> None:
    """Analyse the run as ``traceview analyze`` does (same options, same report cache) and store it."""
    from traceview.api import find_inputs
    from traceview.commands._common import analyze_with_progress
    from traceview.commands.analyze import MIN_TABLE_TOP_N
    from traceview.history import DuplicateRunError, add_runs
    from traceview.history.schema import first_row
    from traceview.history.summary import files_identity, summarize

    if not paths:
        raise TraceviewError("history add: give the run's trace files or folder (e.g. traceview history add traces/)")
    options = analysis.options(top_n=MIN_TABLE_TOP_N)  # a bad value fails before any trace is read
    inputs = find_inputs(paths)  # once: the run's identity and its analysis
    if not inputs.files:
        raise TraceviewError(f"{paths[0]}: no trace files found; give trace files (traceview analyze --help lists "
                             "the formats)")
    identity = files_identity(inputs.found.every_path)  # a several-file run (rocprofv3): all its files
    with _opened(db, create=True) as con:
        known = first_row(con, "SELECT run_id, name FROM runs WHERE identity = ?", [identity])
        if known is not None:  # before the analysis: refusing costs nothing
            raise DuplicateRunError(f"{paths[0]}: these trace files are already in {db} as run {known[0]} "
                                    f"({known[1]}); nothing added")
        report = analyze_with_progress(inputs, options, use_cache=analysis.use_cache, jobs=analysis.jobs,
                                       show_progress=analysis.show_progress)
        # absolute paths: the app opens a stored run from them, whatever folder it starts in
        summary = summarize(report, identity=identity, name=run_name or Path(paths[0]).name or paths[0],
                            paths=[str(Path(p).resolve()) for p in paths], tags=tags)
        run_id, = add_runs(con, [summary])
    kernels = int((summary.series["kind"] == "kernel").sum())
    typer.echo(f"added run {run_id} ({summary.name}) to {db}: {summary.gpu_model or 'GPU model unknown'}, "
               f"{summary.figures['steps']} step(s), {kernels} kernel(s)")
