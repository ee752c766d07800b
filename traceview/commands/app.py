"""``traceview app PATH... [--host 127.0.0.1] [--port 8050]``: the interactive web app.

The app shows only the traces found under the paths given here (files or folders; each set of
per-rank files is one run); the browser refers to runs by index and can never name a file.
"""

from __future__ import annotations

from typing import List, Optional

import typer


def command(
    paths: List[str] = typer.Argument(..., help="Trace files or folders; every run found under them can be opened."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (127.0.0.1: this machine only)."),
    port: int = typer.Option(8050, "--port", help="TCP port."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Parse and analyse again instead of reading the caches "
                                  "(traces, reports)."),
    step_marker: Optional[str] = typer.Option(
        None, "--step-marker", help="Regex choosing step ranges among annotations/NVTX ranges."),
) -> None:
    """Interactive web app: overview, timeline, gaps, launches, communication, kernels, compare, findings."""
    from traceview.app.runs import RunStore, discover_runs

    runs = discover_runs(paths)  # a bad path fails here, as one line
    store = RunStore(runs, use_cache=not no_cache, step_marker=step_marker)
    typer.echo(f"traceview app: {len(runs)} run(s) found:")
    for run in runs[:20]:
        typer.echo(f"  {run.id}: {run.label}")
    if len(runs) > 20:
        typer.echo(f"  ... and {len(runs) - 20} more")
    typer.echo(f"serving on http://{host}:{port}/  (Ctrl+C to stop)")
    from traceview.app.server import serve

    serve(host=host, port=port, store=store)
