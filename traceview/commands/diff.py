"""``traceview diff BASE NEW``: compare two traces (before/after) and say what changed beyond noise.

BASE and NEW are each a trace file or a directory of per-rank files. The rules (figures compared,
kernel-name matching, the noise rule) are in ``traceview/diff.py`` and docs/diff_and_check.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from traceview.commands._common import load_with_progress
from traceview.errors import TraceviewError
from traceview.findings import Options
from traceview.render.terminal import make_console

FORMATS = ("text", "markdown", "json")


def command(
    base: str = typer.Argument(..., help="The baseline: a trace file or a directory of per-rank files."),
    new: str = typer.Argument(..., help="The trace to compare with it: a file or a directory."),
    fmt: str = typer.Option("text", "--format", "-f", help="Output format: text, markdown or json."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the output to this file."),
    noise_k: float = typer.Option(3.0, "--noise-k", help="Significant beyond this many pooled per-step standard deviations."),
    rel_floor: str = typer.Option("1%", "--min-change", help="Smallest relative change that can be significant (e.g. 1%)."),
    top: int = typer.Option(15, "--top", help="How many kernel rows to show in text and Markdown."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Parse again instead of reading the cache."),
    step_marker: Optional[str] = typer.Option(
        None, "--step-marker", help="Regex choosing step ranges among annotations/NVTX ranges."),
) -> None:
    """Compare two traces: step time, busy/idle, communication, kernels and findings, with noise."""
    from traceview.check import parse_share
    from traceview.diff import DiffOptions, diff_results
    from traceview.render.diff import render, render_text

    if fmt not in FORMATS:
        raise TraceviewError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    if noise_k <= 0:
        raise TraceviewError(f"--noise-k: must be positive, not {noise_k:g}")
    options = DiffOptions(k=noise_k, rel_floor=parse_share("--min-change", rel_floor))
    console = make_console()
    err_console = make_console() if output else console
    base_trace = load_with_progress([base], use_cache=not no_cache, step_marker=step_marker, console=err_console)
    new_trace = load_with_progress([new], use_cache=not no_cache, step_marker=step_marker, console=err_console)
    from traceview.analyses import run_all

    analysis_options = Options(step_marker=step_marker)
    diff = diff_results(run_all(base_trace, analysis_options), run_all(new_trace, analysis_options),
                        options=options, base_label=base, new_label=new)
    if output is not None:
        output.write_text(render(diff, fmt, top=top), encoding="utf-8")
        typer.echo(f"wrote {fmt} diff to {output}: {diff.verdict()}")
        return
    if fmt == "text":
        render_text(diff, console, top=top)
    else:
        typer.echo(render(diff, fmt, top=top), nl=False)
