"""``traceview analyze PATH...``: one path for every format and every way of running. The analysis
options (the group every analysing command takes: traceview/commands/options.py) become
:class:`~traceview.findings.Options`; :func:`traceview.api.analyze`, the one entry point, gives the
:class:`~traceview.report.Report` (from the report cache, in this process, or rank by rank on local
worker processes or a Dask cluster: the same report); the renderer named by ``--format`` formats it,
to ``-o FILE`` or to standard output (the terminal text in colour when standard output is a terminal)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

from traceview.commands._common import analyze_with_progress, check_output_file, write_output_file
from traceview.commands.format_help import ANY_TRACE_FORMAT
from traceview.commands.options import ANALYSIS_OPTIONS, AnalysisArgs, with_analysis_options
from traceview.errors import TraceviewError
from traceview.units import fmt_bytes

#: the analyses' top-N tables keep at least this many rows, whatever ``--top`` lists
MIN_TABLE_TOP_N = 20


@with_analysis_options
def command(
    paths: List[str] = typer.Argument(..., help="Trace files or directories, " + ANY_TRACE_FORMAT),
    analysis: AnalysisArgs = ANALYSIS_OPTIONS,
    top: int = typer.Option(5, "--top", min=1, help="How many findings the terminal lists first."),
    details: bool = typer.Option(False, "--details", help="Terminal: also the per-rank table, every finding with its "
                                 "nested ones and recommendations, every warning and each analysis's table."),
    summary_only: bool = typer.Option(False, "--summary-only", help="Terminal: the job, the headline, the per-rank "
                                      "table and the warnings only (the analyses still run: the headline needs them)."),
    fmt_name: str = typer.Option("text", "--format", "-f", help="text (terminal), markdown (GitHub issues), "
                                 "html (one self-contained file) or json (docs/report.schema.json)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report to this file and print "
                                          "where (default: standard output)."),
    workers: Optional[int] = typer.Option(
        None, "--workers", "-w", help="Analyze rank by rank in N local worker processes (0: one per core): bounded "
        "memory for jobs of many ranks, the same report (docs/scaling.md)."),
    scheduler: Optional[str] = typer.Option(
        None, "--scheduler", envvar="TRACEVIEW_SCHEDULER", help="Analyze rank by rank on a running Dask cluster "
        "(tcp://HOST:PORT; its workers must see the trace files at the same paths)."),
    max_findings: Optional[int] = typer.Option(
        None, "--max-findings", min=1, metavar="N", help="Markdown and HTML: list at most N top-level findings (with "
        "those nested under them), in the report's order; the JSON report keeps them all."),
    claims: str = typer.Option(
        "largest", "--claims", metavar="largest|all", help="JSON: each finding lists its longest claimed intervals "
        "(largest), or the report also has the claims table of every claimed interval of every finding (all), so "
        "anyone can check that no GPU time is claimed twice (docs/reports.md)."),
    plotlyjs: str = typer.Option(
        "cdn", "--plotlyjs", metavar="cdn|inline", help="HTML: load plotly.js from its CDN (a small file; every "
        "number reads offline, the charts need the network) or inline it (~4.8 MB more; charts work offline)."),
) -> None:
    """Analyze traces: the answer first (step time, utilization, where time goes, top findings and
    kernels); --details or --format markdown|html|json for everything.

    Example: traceview analyze run/ -f markdown -o report.md --max-findings 5
    """
    from traceview.runtime import collector_paused, quiet_collector  # the command process's runtime

    with quiet_collector():
        # imported here, not at the top: the CLI imports every command module at start (traceview/cli.py);
        # the analyses, the report and the renderers (pandas with them) while the trace is parsed (_analyze)
        with collector_paused():
            from traceview.discovery import registered_formats

            registered_formats()  # the parsers' modules
        _analyze(paths, analysis, top=top, details=details, summary_only=summary_only, fmt_name=fmt_name,
                 output=output, workers=workers, scheduler=scheduler, max_findings=max_findings, plotlyjs=plotlyjs,
                 claims=claims)


def _analyze(paths: List[str], analysis: AnalysisArgs, *, top: int, details: bool, summary_only: bool, fmt_name: str,
             output: Optional[Path], workers: Optional[int], scheduler: Optional[str], max_findings: Optional[int],
             plotlyjs: str, claims: str = "largest") -> None:
    """The command's work (its options as :func:`command` documents them)."""
    from rich.console import Console

    if plotlyjs not in ("cdn", "inline"):
        raise TraceviewError(f"--plotlyjs {plotlyjs}: choose cdn or inline")
    if claims not in ("largest", "all"):
        raise TraceviewError(f"--claims {claims}: choose largest or all")
    if output is not None:
        check_output_file(output)  # before the work: a path that cannot be written fails at once
    options = analysis.options(top_n=max(top, MIN_TABLE_TOP_N), claims=claims)

    from traceview.runtime import collector_paused

    def prepare() -> None:
        """What comes after the parse, done while parse workers run: the imports (~0.3 s, pandas
        among them) and the check that needs them (a bad --format fails as the work starts)."""
        with collector_paused():
            import traceview.analyses  # noqa: F401
            import traceview.pipeline  # noqa: F401
            import traceview.report_cache  # noqa: F401
            from traceview.render import get_renderer
        get_renderer(fmt_name)

    report = analyze_with_progress(paths, options, use_cache=analysis.use_cache, jobs=analysis.jobs,
                                   whole_tables=False, workers=workers, scheduler=scheduler, meanwhile=prepare,
                                   show_progress=analysis.show_progress)
    from traceview.render import get_renderer  # imported by prepare(), which the load ran

    renderer = get_renderer(fmt_name)(top=top, details=details, summary_only=summary_only, max_findings=max_findings,
                                      plotlyjs=plotlyjs)
    if output is None:
        _to_stdout(renderer, report)
        return
    content = renderer.render(report)
    data = content if isinstance(content, bytes) else content.encode("utf-8")
    write_output_file(output, data)
    Console().print(f"wrote the {renderer.name} report to {output} ({fmt_bytes(len(data))})", highlight=False,
                    soft_wrap=True)


def _to_stdout(renderer: Any, report: Any) -> None:
    from traceview.render.terminal import TextRenderer, make_console

    if isinstance(renderer, TextRenderer):
        renderer.print(report, make_console())  # colour when standard output is a terminal
        return
    content = renderer.render(report)
    if isinstance(content, bytes):
        sys.stdout.buffer.write(content)
        sys.stdout.flush()
    else:
        typer.echo(content, nl=False)
