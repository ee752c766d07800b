"""``traceview info PATH``: what the trace says about itself (format, rank, devices, steps).

Metadata values are not echoed (they can carry secrets such as tokens in environment
variables); only their keys are listed. Other strings from the trace (names, warnings) are
scrubbed of secrets before they are printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer
from rich.table import Table

from traceview.commands._common import load_with_progress
from traceview.render.terminal import make_console
from traceview.secrets import scrub_text
from traceview.units import fmt_bytes, fmt_ns


def command(
    paths: List[str] = typer.Argument(..., help="Trace files or directories."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Parse again instead of reading the cache."),
) -> None:
    """Print the metadata of traces."""
    console = make_console()
    trace = load_with_progress(paths, use_cache=not no_cache, step_marker=None, console=console)
    summary = trace.summary()
    for rank in trace.rank_ids:
        info = trace.ranks[rank]
        table = Table(title=f"rank {rank}: {scrub_text(Path(info.source_path).name)}", title_justify="left",
                      show_header=False)
        table.add_column("field", style="bold")
        table.add_column("value", overflow="fold")
        table.add_row("format", f"{info.source_format} {info.format_version}")
        table.add_row("rank", f"{rank} (from {info.rank_source})")
        table.add_row("world size", str(info.world_size) if info.world_size is not None else "-")
        if info.distributed_info.get("backend"):
            table.add_row("backend", scrub_text(str(info.distributed_info.get("backend"))))
        for dev in info.devices:
            details = [x for x in (
                f"{dev.sm_count} SMs" if dev.sm_count else "",
                fmt_bytes(dev.total_memory_bytes) if dev.total_memory_bytes else "",
                f"compute {dev.compute_capability}" if dev.compute_capability else "",
            ) if x]
            name = scrub_text(dev.name) if dev.name else "(unnamed)"
            table.add_row(f"device {dev.id}", f"{name} {', '.join(details)}")
        table.add_row("base time", f"{info.base_time_ns} ns")
        s = summary[rank]
        table.add_row("time span", fmt_ns(s["span_ns"]))
        table.add_row("events", f"{s['events']:,} ({', '.join(f'{k} {v:,}' for k, v in s['by_kind'].items())})")
        table.add_row("source events", ", ".join(f"{k} {v:,}" for k, v in info.event_counts.items()) or "-")
        table.add_row("not mapped", ", ".join(f"{scrub_text(k)} {v:,}" for k, v in info.unmapped.items()) or "-")
        table.add_row("steps", str(s["steps"]))
        table.add_row("processes", ", ".join(f"{pid}" for pid in sorted(info.process_names)) or "-")
        table.add_row("threads named", str(len(info.thread_names)))
        table.add_row("other metadata keys", ", ".join(sorted(scrub_text(str(k)) for k in info.raw_metadata)) or "-")
        for w in info.warnings:
            table.add_row("warning", scrub_text(w))
        console.print(table)
