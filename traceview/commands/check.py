"""``traceview check PATH [--baseline BASE] --max-idle 20% ...``: a performance gate for CI.

Exit status: 0 when every rule holds, 1 when one is violated (each violation is printed: rule,
measured value, rank, limit), 2 for a malformed rule or unusable input (one line). Rules and their
forms are described in ``traceview/check.py`` and docs/diff_and_check.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from traceview.commands._common import load_with_progress
from traceview.errors import TraceviewError
from traceview.findings import Options
from traceview.render.terminal import make_console

FORMATS = ("text", "json")


def command(
    path: str = typer.Argument(..., help="The trace to judge: a file or a directory of per-rank files."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Baseline trace for --max-regression."),
    max_idle: Optional[str] = typer.Option(None, "--max-idle", help="GPU idle: share of the window (20%) or per step (5ms)."),
    min_overlap: Optional[str] = typer.Option(None, "--min-overlap", help="Communication overlapped with compute (50%)."),
    max_regression: Optional[str] = typer.Option(
        None, "--max-regression", help="Step time increase over the baseline (5%, or 2ms per step); beyond noise."),
    max_exposed_comm: Optional[str] = typer.Option(
        None, "--max-exposed-comm", help="Exposed communication: share of the window (10%) or per step (2ms)."),
    max_launch_delay_p50: Optional[str] = typer.Option(
        None, "--max-launch-delay-p50", help="Median launch delay, launch call end to GPU start (50us)."),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML rules file ([check] table; options override it)."),
    fmt: str = typer.Option("text", "--format", "-f", help="Output format: text or json."),
    noise_k: float = typer.Option(3.0, "--noise-k", help="Noise rule for --max-regression: k pooled per-step std."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Parse again instead of reading the cache."),
    step_marker: Optional[str] = typer.Option(
        None, "--step-marker", help="Regex choosing step ranges among annotations/NVTX ranges."),
) -> None:
    """Fail (exit 1) when a trace breaks a performance rule; 0 when all hold; 2 for bad input."""
    from traceview.analyses import run_all
    from traceview.check import RuleError, evaluate, gather_rules
    from traceview.diff import DiffOptions

    if fmt not in FORMATS:
        raise TraceviewError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    if noise_k <= 0:
        raise TraceviewError(f"--noise-k: must be positive, not {noise_k:g}")
    # rules first: a malformed rule fails before any trace is read
    rules, config_baseline = gather_rules({
        "max-idle": max_idle,
        "min-overlap": min_overlap,
        "max-exposed-comm": max_exposed_comm,
        "max-launch-delay-p50": max_launch_delay_p50,
        "max-regression": max_regression,
    }, config)
    if not rules:
        raise RuleError("no rules given: use --max-idle, --min-overlap, --max-exposed-comm, "
                        "--max-launch-delay-p50, --max-regression or --config rules.toml")
    baseline_path = baseline or (str(config_baseline) if config_baseline is not None else None)
    if "max-regression" in rules and baseline_path is None:
        raise RuleError("max-regression needs a baseline: --baseline PATH (or baseline = \"...\" in the rules file)")

    console = make_console()
    options = Options(step_marker=step_marker)
    trace = load_with_progress([path], use_cache=not no_cache, step_marker=step_marker, console=console)
    results = run_all(trace, options)
    base_results = None
    if baseline_path is not None and "max-regression" in rules:
        base_trace = load_with_progress([baseline_path], use_cache=not no_cache, step_marker=step_marker,
                                        console=console)
        base_results = run_all(base_trace, options)
    report = evaluate(rules, results, base_results, diff_options=DiffOptions(k=noise_k), path=path,
                      baseline_path=baseline_path if base_results is not None else None)
    if not report.results:
        raise TraceviewError(f"{path}: no rule could be judged on this trace ({'; '.join(report.notes)})")

    if fmt == "json":
        typer.echo(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        _render(report, console)
    if not report.passed:
        # SystemExit, not typer.Exit: the CLI runs click with standalone_mode=False, which turns
        # typer.Exit into a return value that cli.main drops
        raise SystemExit(1)


def _render(report, console) -> None:
    title = f"traceview check {report.path}" + (f" against {report.baseline}" if report.baseline else "")
    table = Table(title=title, title_justify="left")
    for col in ("rule", "limit", "measured", "where", "result", "detail"):
        table.add_column(col, overflow="fold")
    for r in report.worst():
        where = " ".join(x for x in (f"rank {r.rank}" if r.rank is not None else "",
                                     f"GPU {r.device}" if r.device is not None else "") if x) or "-"
        failing = sum(1 for x in report.results if x.rule == r.rule and not x.passed)
        total = sum(1 for x in report.results if x.rule == r.rule)
        result = "[red]FAIL[/red]" if not r.passed else "[green]ok[/green]"
        if total > 1:
            result += f" ({failing}/{total} failing)" if failing else f" ({total} checked)"
        op = ">=" if r.rule == "min-overlap" else "<="
        table.add_row(r.rule, f"{op} {r.limit}", r.measured, where, result, r.detail)
    console.print(table)
    for note in report.notes:
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    violations = report.violations
    if violations:
        for v in violations:
            console.print(f"FAIL {v.line()}", highlight=False, soft_wrap=True)
        rules = sorted({v.rule for v in violations})
        console.print(f"[red]FAILED[/red]: {len(rules)} of {len(report.rules)} rules violated "
                      f"({', '.join(rules)})", highlight=False)
    else:
        console.print(f"[green]PASSED[/green]: {len(report.rules)} rules hold", highlight=False)
