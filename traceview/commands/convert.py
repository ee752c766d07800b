"""``traceview convert PATH -o DIR``: write the canonical Arrow tables as Parquet files
(events, links, steps) plus ranks.json, for use in other tools (DuckDB, Spark, pandas).

ranks.json is scrubbed of secrets (``traceview.secrets``) and lists only the keys of the raw
metadata; the tables are the trace's own events (``traceview redact`` first to share them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pyarrow.parquet as pq
import typer

from traceview.commands._common import load_with_progress
from traceview.render.terminal import make_console
from traceview.secrets import scrub_metadata, scrub_text


def command(
    paths: List[str] = typer.Argument(..., help="Trace files or directories."),
    output: Path = typer.Option(..., "-o", "--output", help="Directory to write the Parquet files into."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Parse again instead of reading the cache."),
) -> None:
    """Convert traces to Parquet (events.parquet, links.parquet, steps.parquet, ranks.json)."""
    console = make_console()
    trace = load_with_progress(paths, use_cache=not no_cache, step_marker=None, console=console)
    output.mkdir(parents=True, exist_ok=True)
    pq.write_table(trace.events, output / "events.parquet", compression="zstd")
    pq.write_table(trace.links, output / "links.parquet", compression="zstd")
    pq.write_table(trace.steps, output / "steps.parquet", compression="zstd")
    ranks = []
    for data in scrub_metadata(dict(trace.ranks)).values():
        # metadata values can hold secrets the scrubber does not recognise: keep only their keys
        data["raw_metadata"] = sorted(data["raw_metadata"])
        ranks.append(data)
    warnings = [scrub_text(w) for w in trace.warnings]
    (output / "ranks.json").write_text(json.dumps({"ranks": ranks, "warnings": warnings}, indent=2, default=str))
    console.print(f"wrote {trace.events.num_rows:,} events, {trace.links.num_rows:,} links, "
                  f"{trace.steps.num_rows} steps to {output}/")
