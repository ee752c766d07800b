"""``traceview diff BASE NEW``: compare two traces (before/after) and say what changed beyond noise.

BASE and NEW are each a trace file or a directory of per-rank files; each becomes a report through
the one pipeline, and :func:`traceview.compare.diff_reports` compares the reports. The rules
(figures compared, kernel-name matching, the noise rule) are in ``traceview/compare/diff.py`` and
docs/diff_and_check.md.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import List, Optional

import typer

from traceview.commands.formats import check_compare_options, report_of
from traceview.commands.options import ANALYSIS_OPTIONS, AnalysisArgs, checked_ncu, with_analysis_options
from traceview.errors import TraceviewError


@with_analysis_options
def command(
    base: str = typer.Argument(..., help="The baseline: a trace file or a directory of per-rank files."),
    new: str = typer.Argument(..., help="The trace to compare with it: a file or a directory."),
    fmt: str = typer.Option("text", "--format", "-f", help="Output format: text, markdown or json."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the output to this file."),
    noise_k: float = typer.Option(3.0, "--noise-k", help="Significant beyond this many pooled per-step standard "
                                  "deviations."),
    rel_floor: str = typer.Option("1%", "--min-change", help="Smallest relative change that can be significant "
                                  "(e.g. 1%)."),
    top: int = typer.Option(15, "--top", help="How many kernel rows to show in text and Markdown."),
    base_ncu: Optional[List[Path]] = typer.Option(None, "--base-ncu", metavar="FILE|DIR", help="Nsight Compute "
                                                  "exports of the baseline (default: those of --ncu, for both)."),
    analysis: AnalysisArgs = ANALYSIS_OPTIONS,
) -> None:
    """Compare two traces: step time, busy/idle, communication, kernels and findings, with noise.

    Example: traceview diff before/ after/ --format markdown
    """
    from traceview.compare import DiffOptions, diff_reports, parse_share
    from traceview.compare.render import FORMATS, render, render_text
    from traceview.render.terminal import make_console

    check_compare_options(fmt, FORMATS, noise_k)
    # one Options for both traces: a bad value fails before any trace is read
    options = analysis.options()
    diff_options = DiffOptions(k=noise_k, rel_floor=parse_share("--min-change", rel_floor))
    if output is not None and output.is_dir():
        raise TraceviewError(f"{output}: is a directory; -o takes a file name")
    base_options = dataclasses.replace(options, ncu=checked_ncu(tuple(base_ncu))) if base_ncu else options
    base_report = report_of(base, base_options, analysis)
    new_report = report_of(new, options, analysis)
    diff = diff_reports(base_report, new_report, options=diff_options, base_label=base, new_label=new)
    if output is not None:
        output.write_text(render(diff, fmt, top=top), encoding="utf-8")
        typer.echo(f"wrote {fmt} diff to {output}: {diff.verdict()}")
    elif fmt == "text":
        render_text(diff, make_console(), top=top)
    else:
        typer.echo(render(diff, fmt, top=top), nl=False)
