"""``traceview export-perfetto PATH -o OUT.json [--from MS --to MS]``: the trace (or a window of it)
as Chrome trace JSON for the Perfetto UI, with traceview's findings and idle gaps as annotation
tracks and the critical path marked (traceview/export_perfetto.py). The report comes from the one
entry point (from the report cache when the same files were analysed with the same options, by any
front end), with its trace; nothing is recomputed for the export."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from traceview.commands._common import analyze_with_progress, check_output_file, write_output_file
from traceview.commands.format_help import ANY_TRACE_FORMAT
from traceview.commands.options import ANALYSIS_OPTIONS, AnalysisArgs, with_analysis_options


@with_analysis_options
def command(
    paths: List[str] = typer.Argument(..., help="Trace files or directories, " + ANY_TRACE_FORMAT),
    output: Path = typer.Option(..., "--output", "-o", metavar="FILE",
                                help="Where to write the Chrome trace JSON (open it at https://ui.perfetto.dev)."),
    from_ms: Optional[float] = typer.Option(None, "--from", metavar="MS", help="Window start, milliseconds since the "
                                            "trace's first event (default: the start)."),
    to_ms: Optional[float] = typer.Option(None, "--to", metavar="MS", help="Window end, milliseconds since the "
                                          "trace's first event (default: the end)."),
    analysis: AnalysisArgs = ANALYSIS_OPTIONS,
) -> None:
    """Write the trace, or a time window of it, as Chrome trace JSON that the Perfetto UI opens:
    processes and threads per rank, CPU ops, runtime calls, GPU streams, launch -> kernel flows,
    traceview's findings and idle gaps as annotation tracks, and the critical path (a track per rank;
    its events carry the arg critical_path: true).

    Example: traceview export-perfetto run/ -o run.perfetto.json --from 100 --to 250
    """
    # imported here: the CLI imports every command module at start (traceview/cli.py)
    from traceview.export_perfetto import export_chrome_trace, window_from_ms
    from traceview.units import fmt_bytes, fmt_ns

    options = analysis.options()  # a bad value fails before any work
    check_output_file(output)  # before the work: a path that cannot be written fails at once
    report = analyze_with_progress(paths, options, use_cache=analysis.use_cache, jobs=analysis.jobs,
                                   show_progress=analysis.show_progress)
    trace = report.trace  # an in-process report holds its trace (traceview.api.analyze)
    if trace is None:
        raise RuntimeError("the report of an in-process analysis has no trace")
    window = window_from_ms(trace, from_ms, to_ms)
    data = export_chrome_trace(trace, report, window).encode("utf-8")
    write_output_file(output, data)
    span = f"{fmt_ns(window.start_ns)} to {fmt_ns(window.end_ns)}" if from_ms is not None or to_ms is not None \
        else "the whole trace"
    typer.echo(f"wrote {output} ({fmt_bytes(len(data))}, {span}): open it at https://ui.perfetto.dev")
