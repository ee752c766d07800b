"""``traceview app PATH... [--host 127.0.0.1] [--port 8050]``: the interactive web app.

The app shows only the traces found under the paths given here (files or folders; each set of
per-rank files is one run); the browser refers to runs by index and can never name a file.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from traceview.commands._common import GPU_SPECS_OPTION, MFU_DTYPE_OPTION, MODEL_FLOPS_OPTION
from traceview.errors import TraceviewError


def command(
    paths: Optional[List[str]] = typer.Argument(None, help="Trace files or folders; every run found under them can "
                                                "be opened (none: the --db history's runs whose traces exist here)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (127.0.0.1: this machine only)."),
    port: int = typer.Option(8050, "--port", help="TCP port."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Parse and analyse again instead of reading the caches "
                                  "(traces, reports)."),
    step_marker: Optional[str] = typer.Option(
        None, "--step-marker", help="Regex choosing step ranges among annotations/NVTX ranges."),
    gpu_specs: Optional[Path] = GPU_SPECS_OPTION,
    model_flops: Optional[str] = MODEL_FLOPS_OPTION,
    mfu_dtype: str = MFU_DTYPE_OPTION,
    db: Optional[Path] = typer.Option(None, "--db", help="A `traceview history` database: adds the History page "
                                      "(default: .traceview/history.duckdb when it exists; docs/history.md)."),
) -> None:
    """Interactive web app: overview, timeline, gaps, launches, communication, kernels, compare, findings.

    Example: traceview app run/ --port 8050
    """
    from traceview.app.runs import RunStore, discover_runs
    from traceview.commands._common import checked_gpu_specs, checked_model_flops
    from traceview.runtime import prefer_system_memory_pool
    from traceview.findings import Options

    prefer_system_memory_pool()
    flops, flops_dtype = checked_model_flops(model_flops, mfu_dtype)  # bad input fails here, as one line
    options = Options(gpu_specs=checked_gpu_specs(gpu_specs), model_flops_per_step=flops, mfu_dtype=flops_dtype)
    from traceview.app.history import history_db, reachable_paths

    db_path = history_db(db)  # the History page (app/history.py); without paths, its reachable runs
    runs = discover_runs(paths or (reachable_paths(db_path) if db_path else []))
    if not runs and db_path is None:
        raise TraceviewError("give trace files or folders (e.g. traceview app run/), or --db HISTORY")
    store = RunStore(runs, use_cache=not no_cache, step_marker=step_marker, options=options)
    typer.echo(f"traceview app: {len(runs)} run(s) found:")
    for run in runs[:20]:
        typer.echo(f"  {run.id}: {run.label}")
    if len(runs) > 20:
        typer.echo(f"  ... and {len(runs) - 20} more")
    typer.echo(f"serving on http://{host}:{port}/  (Ctrl+C to stop)")
    from traceview.app.server import serve

    serve(host=host, port=port, store=store, history_db=db_path)
