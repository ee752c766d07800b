"""``traceview info PATH``: what the trace says about itself (format, rank, devices, steps).

Metadata values are not echoed (they can carry secrets such as tokens in environment
variables); only their keys are listed. Other strings from the trace (names, warnings) are
scrubbed of secrets before they are printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import typer

from traceview.commands._common import load_with_progress, make_console
from traceview.commands.options import JOBS_OPTION, LOAD_NO_CACHE_OPTION, NO_PROGRESS_OPTION
from traceview.units import fmt_bytes, fmt_clock_ns, fmt_ns

if TYPE_CHECKING:
    import pyarrow as pa


def command(
    paths: List[str] = typer.Argument(..., help="Trace files or directories."),
    no_cache: bool = LOAD_NO_CACHE_OPTION,
    jobs: Optional[int] = JOBS_OPTION,
    no_progress: bool = NO_PROGRESS_OPTION,
) -> None:
    """Print the metadata of traces: format, rank, devices, when the trace was taken, events, steps.

    Example: traceview info run/rank0.json.gz
    """
    # imported here: the CLI imports every command module at start (traceview/cli.py)
    from rich.table import Table

    from traceview.secrets import input_dirs, scrub_text, without_input_dirs

    console = make_console()
    ncu_paths = [p for p in paths if _is_ncu(Path(p))]
    for path in ncu_paths:
        _describe_ncu(console, path)
    paths = [p for p in paths if p not in ncu_paths]
    if not paths:
        return
    trace = load_with_progress(paths, use_cache=not no_cache, step_marker=None, jobs=jobs,
                               show_progress=not no_progress)
    summary = trace.summary()
    starts = _rank_starts(trace)
    dirs = input_dirs(info.source_path for info in trace.ranks.values())
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
        s = summary[rank]
        if rank in starts:
            table.add_row("first event", _first_event_text(starts[rank], info.base_time_ns))
        if info.base_time_ns:  # the clock's origin as the profiler recorded it (Kineto baseTimeNanoseconds)
            table.add_row("base time", fmt_clock_ns(info.base_time_ns))
        table.add_row("time span", fmt_ns(s["span_ns"]))
        table.add_row("events", f"{s['events']:,} ({', '.join(f'{k} {v:,}' for k, v in s['by_kind'].items())})")
        table.add_row("source events", ", ".join(f"{k} {v:,}" for k, v in info.event_counts.items()) or "-")
        table.add_row("not mapped", ", ".join(f"{scrub_text(k)} {v:,}" for k, v in info.unmapped.items()) or "-")
        table.add_row("counters", _counter_line(trace.counters, rank))
        table.add_row("steps", str(s["steps"]))
        table.add_row("processes", ", ".join(f"{pid}" for pid in sorted(info.process_names)) or "-")
        table.add_row("threads named", str(len(info.thread_names)))
        table.add_row("other metadata keys", ", ".join(sorted(scrub_text(str(k)) for k in info.raw_metadata)) or "-")
        for w in info.warnings:  # the file named as in the title (and the reports): by its name
            table.add_row("warning", scrub_text(without_input_dirs(w, dirs)))
        console.print(table)


def _is_ncu(path: Path) -> bool:
    """An Nsight Compute export given alone (a file, not a directory of traces)."""
    from traceview.parsers.ncu import is_ncu_input

    return path.is_file() and is_ncu_input(path)


def _describe_ncu(console: "Any", path: str) -> None:
    """What an ncu export holds: its kernel records, metrics by unit, rule results."""
    from rich.table import Table

    from traceview.parsers.ncu import read_ncu
    from traceview.secrets import scrub_text

    ncu = read_ncu([path])
    name, layout, counts = ncu.files[0]
    table = Table(title=f"{scrub_text(Path(name).name)}: Nsight Compute export (not a trace: join it with "
                  "traceview analyze TRACE --ncu FILE)", title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("layout", f"ncu --csv --page {layout}")
    table.add_row("rows", ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    for rec in ncu.kernels.itertuples(index=False):
        table.add_row(f"kernel ID {rec.ncu_id}", f"{scrub_text(str(rec.kernel))} grid ({rec.grid_x}, {rec.grid_y}, "
                      f"{rec.grid_z}) block ({rec.block_x}, {rec.block_y}, {rec.block_z}), invocation "
                      f"{rec.invocation}, {rec.metrics} metrics")
    units = ncu.metrics.groupby("unit")["metric"].size()
    table.add_row("metrics by unit", ", ".join(f"{u or '(count)'} {n:,}" for u, n in units.items()))
    table.add_row("values n/a", f"{int(ncu.metrics['value'].isna().sum()):,}")
    rules = ncu.rules
    with_speedup = rules[rules["speedup_pct"].fillna(0) > 0]
    table.add_row("rule results", f"{len(rules):,} ({len(with_speedup):,} with an estimated speedup)")
    console.print(table)


def _first_event_text(start_ns: int, base_time_ns: int) -> str:
    """When the first event happened: its date when the trace's clock is Unix time, or when it counts
    from a base time that is (an Nsight session start), else the clock value."""
    from traceview.units import fmt_epoch_ns

    direct = fmt_epoch_ns(start_ns)
    if direct is None and base_time_ns and fmt_epoch_ns(base_time_ns) and fmt_epoch_ns(base_time_ns + start_ns):
        return f"{fmt_epoch_ns(base_time_ns + start_ns)} (base time + {fmt_ns(start_ns)})"
    return direct or fmt_clock_ns(start_ns)


def _rank_starts(trace: "Any") -> dict[int, int]:
    """Each rank's first event start (ns, on the trace's clock)."""
    if trace.events.num_rows == 0:
        return {}
    firsts = trace.events.group_by("rank").aggregate([("start_ns", "min")])
    return dict(zip(firsts.column("rank").to_pylist(), firsts.column("start_ns_min").to_pylist()))


def _counter_line(counters: "pa.Table", rank: int) -> str:
    """Counter samples of one rank, and in how many series (a counter name and arg key) of how
    many counters: the counter table is not in the events, so say it is there."""
    import pyarrow.compute as pc  # here, not at the top: commands import lazily for a fast start

    mine = counters.filter(pc.equal(counters.column("rank"), rank)) if counters.num_rows else counters
    if mine.num_rows == 0:
        return "-"
    names = mine.column("name").combine_chunks().dictionary_decode()
    series = pc.binary_join_element_wise(names, mine.column("series").combine_chunks().dictionary_decode(), "\x00")
    n_series, n_names = len(pc.unique(series)), len(pc.unique(names))
    return f"{mine.num_rows:,} samples in {n_series:,} series of {n_names:,} counters"
