"""``traceview app PATH... [--host 127.0.0.1] [--port 8050]``: the interactive web app.

The app shows only the traces found under the paths given here (files or folders; each set of
per-rank files is one run); the browser refers to runs by index and can never name a file. It takes
the analysis options of every analysing command (traceview/commands/options.py) and analyses each
run through the one entry point, so a run ``traceview analyze`` analysed with the same options opens
from the report cache (and the other way round).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from traceview.commands.options import ANALYSIS_OPTIONS, AnalysisArgs, with_analysis_options
from traceview.errors import TraceviewError


@with_analysis_options
def command(
    paths: Optional[List[str]] = typer.Argument(None, help="Trace files or folders; every run found under them can "
                                                "be opened (none: the --db history's runs whose traces exist here)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (127.0.0.1: this machine only)."),
    port: int = typer.Option(8050, "--port", help="TCP port."),
    analysis: AnalysisArgs = ANALYSIS_OPTIONS,
    db: Optional[Path] = typer.Option(None, "--db", help="A `traceview history` database: adds the History page "
                                      "(default: .traceview/history.duckdb when it exists; docs/history.md)."),
) -> None:
    """Interactive web app: overview, timeline, gaps, launches, communication, kernels, compare, findings.

    Example: traceview app run/ --port 8050
    """
    from traceview.app.runs import RunStore, discover_runs
    from traceview.runtime import prefer_system_memory_pool

    prefer_system_memory_pool()
    options = analysis.options()  # bad input fails here, as one line
    from traceview.app.history import history_db, reachable_paths

    db_path = history_db(db)  # the History page (app/history.py); without paths, its reachable runs
    runs = discover_runs(paths or (reachable_paths(db_path) if db_path else []))
    if not runs and db_path is None:
        raise TraceviewError("give trace files or folders (e.g. traceview app run/), or --db HISTORY")
    store = RunStore(runs, options, use_cache=analysis.use_cache, jobs=analysis.jobs)
    typer.echo(f"traceview app: {len(runs)} run(s) found:")
    for run in runs[:20]:
        typer.echo(f"  {run.id}: {run.label}")
    if len(runs) > 20:
        typer.echo(f"  ... and {len(runs) - 20} more")
    typer.echo(f"serving on http://{host}:{port}/  (Ctrl+C to stop)")
    from traceview.app.server import serve

    serve(host=host, port=port, store=store, history_db=db_path)
