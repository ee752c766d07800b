"""``traceview analyze PATH...``: load traces, print a per-rank summary, run every analysis and
list the findings ranked by what they cost; or write the report as Markdown, HTML or JSON."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import List, Optional

import typer

from traceview.commands._common import load_with_progress
from traceview.errors import TraceviewError
from traceview.findings import Options
from traceview.render.terminal import make_console, render_results, render_summary


class Format(str, enum.Enum):
    text = "text"
    markdown = "markdown"
    html = "html"
    json = "json"


def command(
    paths: List[str] = typer.Argument(..., help="Trace files or directories (Kineto .json/.json.gz, Nsight .sqlite)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Parse again instead of reading the cache."),
    step_marker: Optional[str] = typer.Option(
        None, "--step-marker", help="Regex choosing step ranges among annotations/NVTX ranges."),
    top: int = typer.Option(10, "--top", help="How many findings to list."),
    summary_only: bool = typer.Option(False, "--summary-only", help="Print the trace summary, skip the analyses."),
    fmt_name: str = typer.Option("text", "--format", "-f", help="text (terminal), markdown (GitHub issues), "
                                 "html (one self-contained file) or json (docs/report.schema.json)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report to this file and print "
                                          "where (default: standard output)."),
    workers: Optional[int] = typer.Option(
        None, "--workers", "-w", help="Analyze rank by rank in N local worker processes (0: one per core), "
        "reducing per-rank results: bounded memory for jobs of many ranks (docs/scaling.md)."),
    scheduler: Optional[str] = typer.Option(
        None, "--scheduler", envvar="TRACEVIEW_SCHEDULER", help="Analyze rank by rank on a running Dask cluster "
        "(tcp://HOST:PORT; its workers must see the trace files at the same paths)."),
) -> None:
    """Analyze traces: summary per rank, breakdowns, and ranked findings."""
    console = make_console()
    if workers is not None or scheduler:
        from traceview.scale import run_cli

        run_cli(paths, workers=workers, scheduler=scheduler, no_cache=no_cache, step_marker=step_marker, top=top,
                summary_only=summary_only, console=console, fmt=fmt_name, output=output)
        return
    try:
        fmt = Format(fmt_name.lower())
    except ValueError:
        raise TraceviewError(f"--format {fmt_name}: not a report format; choose one of "
                             + ", ".join(f.value for f in Format)) from None
    if fmt is not Format.text or output is not None:
        _report(paths, no_cache=no_cache, step_marker=step_marker, top=top, fmt=fmt, output=output, console=console)
        return
    trace = load_with_progress(paths, use_cache=not no_cache, step_marker=step_marker, console=console)
    render_summary(trace, console)
    if summary_only:
        return
    from traceview.analyses import run_all

    results = run_all(trace, Options(step_marker=step_marker, top_n=max(top, 20)))
    render_results(results, console, top_n=top, n_ranks=len(trace.ranks))


def _report(paths, *, no_cache, step_marker, top, fmt, output, console) -> None:
    from traceview.analyses import run_all
    from traceview.report import build_report

    if output is not None and output.exists() and output.is_dir():
        raise TraceviewError(f"{output}: is a directory; -o takes a file name")
    quiet = make_console() if output is not None else _stderr_console()
    trace = load_with_progress(paths, use_cache=not no_cache, step_marker=step_marker, console=quiet)
    options = Options(step_marker=step_marker, top_n=max(top, 20))
    results = run_all(trace, options)
    if fmt is Format.text:
        import io

        from rich.console import Console

        buffer = io.StringIO()
        file_console = Console(file=buffer, width=140, force_terminal=False, color_system=None)
        render_summary(trace, file_console)
        render_results(results, file_console, top_n=top, n_ranks=len(trace.ranks))
        text = buffer.getvalue()
    else:
        report = build_report(trace, results, options=options)
        if fmt is Format.markdown:
            from traceview.render.markdown import render_markdown

            text = render_markdown(report)
        elif fmt is Format.html:
            from traceview.render.html import render_html

            text = render_html(report, trace=trace)
        else:
            from traceview.render.json import render_json

            text = render_json(report)
    if output is None:
        typer.echo(text, nl=False)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(output)
    console.print(f"wrote the {fmt.value} report to {output} ({_size(len(text.encode()))})", highlight=False)


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


def _size(n: int) -> str:
    for unit, scale in (("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
