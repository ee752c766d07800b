"""``traceview export-perfetto PATH -o OUT.json [--from MS --to MS]``: the trace (or a window of it)
as Chrome trace JSON for the Perfetto UI, with traceview's findings and idle gaps as annotation
tracks (traceview/export_perfetto.py). The report is the one pipeline's (from the report cache when
the same files were analysed with the same options); nothing is recomputed for the export."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from traceview.commands._common import JOBS_OPTION, analyze_in_process, check_output_file, write_output_file


def command(
    paths: List[str] = typer.Argument(..., help="Trace files or directories (Kineto .json/.json.gz, Nsight .sqlite)."),
    output: Path = typer.Option(..., "--output", "-o", metavar="FILE",
                                help="Where to write the Chrome trace JSON (open it at https://ui.perfetto.dev)."),
    from_ms: Optional[float] = typer.Option(None, "--from", metavar="MS", help="Window start, milliseconds since the "
                                            "trace's first event (default: the start)."),
    to_ms: Optional[float] = typer.Option(None, "--to", metavar="MS", help="Window end, milliseconds since the "
                                          "trace's first event (default: the end)."),
    step_marker: Optional[str] = typer.Option(
        None, "--step-marker", metavar="REGEX", help="Regex choosing step ranges among annotations/NVTX ranges."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Parse and analyse again instead of reading the caches "
                                  "(traces, reports)."),
    jobs: Optional[int] = JOBS_OPTION,
) -> None:
    """Write the trace, or a time window of it, as Chrome trace JSON that the Perfetto UI opens:
    processes and threads per rank, CPU ops, runtime calls, GPU streams, launch -> kernel flows, and
    traceview's findings and idle gaps as annotation tracks.

    Example: traceview export-perfetto run/ -o run.perfetto.json --from 100 --to 250
    """
    # imported here: the CLI imports every command module at start (traceview/cli.py)
    from rich.console import Console

    from traceview.export_perfetto import export_chrome_trace, window_from_ms
    from traceview.findings import Options
    from traceview.units import fmt_bytes, fmt_ns

    check_output_file(output)  # before the work: a path that cannot be written fails at once
    console = Console(stderr=True)
    report = analyze_in_process(paths, Options(step_marker=step_marker), use_cache=not no_cache, console=console,
                                jobs=jobs)
    trace = report.trace
    if trace is None:  # a report without its trace in memory: load it (from the trace cache)
        from traceview.commands._common import load_with_progress

        trace = load_with_progress(paths, use_cache=not no_cache, step_marker=step_marker, console=console, jobs=jobs)
    window = window_from_ms(trace, from_ms, to_ms)
    data = export_chrome_trace(trace, report, window).encode("utf-8")
    write_output_file(output, data)
    span = f"{fmt_ns(window.start_ns)} to {fmt_ns(window.end_ns)}" if from_ms is not None or to_ms is not None \
        else "the whole trace"
    typer.echo(f"wrote {output} ({fmt_bytes(len(data))}, {span}): open it at https://ui.perfetto.dev")
