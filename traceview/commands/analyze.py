"""``traceview analyze PATH...``: load traces, print a per-rank summary, run every analysis and
list the findings ranked by what they cost."""

from __future__ import annotations

from typing import List, Optional

import typer

from traceview.commands._common import load_with_progress
from traceview.render.terminal import make_console
from traceview.findings import Options
from traceview.render.terminal import render_results, render_summary


def command(
    paths: List[str] = typer.Argument(..., help="Trace files or directories (Kineto .json/.json.gz, Nsight .sqlite)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Parse again instead of reading the cache."),
    step_marker: Optional[str] = typer.Option(
        None, "--step-marker", help="Regex choosing step ranges among annotations/NVTX ranges."),
    top: int = typer.Option(10, "--top", help="How many findings to list."),
    summary_only: bool = typer.Option(False, "--summary-only", help="Print the trace summary, skip the analyses."),
) -> None:
    """Analyze traces: summary per rank, breakdowns, and ranked findings."""
    console = make_console()
    trace = load_with_progress(paths, use_cache=not no_cache, step_marker=step_marker, console=console)
    render_summary(trace, console)
    if summary_only:
        return
    from traceview.analyses import run_all

    results = run_all(trace, Options(step_marker=step_marker, top_n=max(top, 20)))
    render_results(results, console, top_n=top)
