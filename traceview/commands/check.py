"""``traceview check PATH [--baseline BASE] --max-idle 20% ...``: a performance gate for CI.

Exit status: 0 when every rule holds, 1 when one is violated (each violation is printed: rule,
measured value, rank, limit), 2 for a malformed rule or unusable input (one line). The trace (and
the baseline) become reports through the one pipeline; :func:`traceview.compare.evaluate` judges
the rules on them. Rules and their forms are described in ``traceview/compare/rules.py`` and
docs/diff_and_check.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from traceview.commands.formats import check_compare_options, report_of
from traceview.commands.options import ANALYSIS_OPTIONS, AnalysisArgs, with_analysis_options
from traceview.errors import TraceviewError

#: the formats of a check
FORMATS = ("text", "json")


@with_analysis_options
def command(
    path: str = typer.Argument(..., help="The trace to judge: a file or a directory of per-rank files."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Baseline trace for --max-regression."),
    max_idle: Optional[str] = typer.Option(None, "--max-idle", help="GPU idle: share of the window (20%) or per step "
                                           "(5ms)."),
    min_overlap: Optional[str] = typer.Option(None, "--min-overlap", help="Communication overlapped with compute "
                                              "(50%)."),
    max_regression: Optional[str] = typer.Option(
        None, "--max-regression", help="Step time increase over the baseline (5%, or 2ms per step); beyond noise."),
    max_exposed_comm: Optional[str] = typer.Option(
        None, "--max-exposed-comm", help="Exposed communication: share of the window (10%) or per step (2ms)."),
    max_launch_delay_p50: Optional[str] = typer.Option(
        None, "--max-launch-delay-p50", help="Median launch delay, launch call end to GPU start (50us)."),
    max_achievable_gap: Optional[str] = typer.Option(
        None, "--max-achievable-gap", help="Step time above the achievable step of the critical path's what-if: "
        "share of the step (40%) or per step (2ms)."),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML rules file ([check] table; options "
                                          "override it)."),
    fmt: str = typer.Option("text", "--format", "-f", help="Output format: text or json."),
    noise_k: float = typer.Option(3.0, "--noise-k", help="Noise rule for --max-regression: k pooled per-step std."),
    analysis: AnalysisArgs = ANALYSIS_OPTIONS,
) -> None:
    """Fail (exit 1) when a trace breaks a performance rule; 0 when all hold; 2 for bad input.

    Example: traceview check run/ --max-idle 20% --baseline main/ --max-regression 5%
    """
    from traceview.compare import DiffOptions, RuleError, evaluate, gather_rules
    from traceview.compare.render import render_check_text
    from traceview.render.terminal import make_console

    check_compare_options(fmt, FORMATS, noise_k)
    # one Options for the trace and its baseline: a bad value fails before any trace is read
    options = analysis.options()
    # rules first: a malformed rule fails before any trace is read
    rules, config_baseline = gather_rules({
        "max-idle": max_idle,
        "min-overlap": min_overlap,
        "max-exposed-comm": max_exposed_comm,
        "max-launch-delay-p50": max_launch_delay_p50,
        "max-regression": max_regression,
        "max-achievable-gap": max_achievable_gap,
    }, config)
    if not rules:
        raise RuleError("no rules given: use --max-idle, --min-overlap, --max-exposed-comm, "
                        "--max-launch-delay-p50, --max-regression, --max-achievable-gap or --config rules.toml")
    baseline_path = baseline or (str(config_baseline) if config_baseline is not None else None)
    wants_baseline = "max-regression" in rules
    if wants_baseline and baseline_path is None:
        raise RuleError("max-regression needs a baseline: --baseline PATH (or baseline = \"...\" in the rules file)")

    report = report_of(path, options, analysis)
    base_report = None
    if wants_baseline and baseline_path is not None:
        base_report = report_of(baseline_path, options, analysis)
    check = evaluate(rules, report, base_report, diff_options=DiffOptions(k=noise_k), path=path,
                     baseline_path=baseline_path if base_report is not None else None)
    if not check.results:
        raise TraceviewError(f"{path}: no rule could be judged on this trace ({'; '.join(check.notes)})")

    if fmt == "json":
        typer.echo(json.dumps(check.to_dict(), indent=2, default=str))
    else:
        render_check_text(check, make_console())
    if not check.passed:
        # SystemExit, not typer.Exit: the CLI runs click with standalone_mode=False, which turns
        # typer.Exit into a return value that cli.main drops
        raise SystemExit(1)
