"""``traceview convert PATH -o DIR``: write the canonical Arrow tables as Parquet files
(events, links, steps, memory, counters) plus ranks.json, for use in other tools (DuckDB, Spark, pandas).

Every output goes through ``traceview.secrets`` as the reports do: ranks.json is scrubbed (values
and keys) and lists only the keys of the raw metadata; the string columns of the tables (event
names, categories, process groups, step names) lose their secret parts. ``traceview redact`` makes
a shareable copy of the trace file itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import typer

from traceview.commands._common import check_output_dir, load_with_progress, make_console, write_output_file
from traceview.commands.options import JOBS_OPTION, LOAD_NO_CACHE_OPTION, NO_PROGRESS_OPTION
from traceview.errors import output_error

if TYPE_CHECKING:
    import pyarrow as pa

    from traceview.secrets import Scrubber

# pyarrow is imported inside the functions: the CLI imports every command module at start (traceview/cli.py)


def _scrub_strings(values: pa.Array, scrubber: Scrubber, where: str) -> pa.Array:
    """A string array with each *distinct* value scrubbed once (the scrubber memoises repeats)."""
    import pyarrow as pa

    return pa.array([None if v is None else scrubber.text_cached(v, where) for v in values.to_pylist()],
                    type=values.type)


def _scrub_column(column: pa.ChunkedArray, scrubber: Scrubber, where: str) -> pa.ChunkedArray:
    """A string or dictionary-of-strings column with its secret parts replaced. Only dictionaries
    (distinct values) are scrubbed, so the cost follows the number of distinct names, not events."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = []
    for chunk in column.chunks:
        if pa.types.is_dictionary(chunk.type):
            new_dict = _scrub_strings(chunk.dictionary, scrubber, where)
            chunks.append(pa.DictionaryArray.from_arrays(chunk.indices, new_dict))
        else:
            encoded = pc.dictionary_encode(chunk)
            new_dict = _scrub_strings(encoded.dictionary, scrubber, where)
            chunks.append(pc.take(new_dict, encoded.indices))
    return pa.chunked_array(chunks, type=column.type)


def scrub_table(table: pa.Table, scrubber: Scrubber, label: str) -> pa.Table:
    """``table`` with every string column (plain or dictionary-encoded) scrubbed of secrets."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        kind = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            table = table.set_column(i, field, _scrub_column(table.column(i), scrubber, f"{label}.{field.name}"))
    return table


def _is_ncu(path: Path) -> bool:
    from traceview.parsers.ncu import is_ncu_input

    return path.is_file() and is_ncu_input(path)


def _convert_ncu(console: Any, paths: list[str], output: Path) -> None:
    """Nsight Compute exports: their kernel metrics and rule results as Parquet (scrubbed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from traceview.parsers.ncu import read_ncu
    from traceview.secrets import Scrubber

    ncu = read_ncu(paths)
    scrubber = Scrubber()
    for name, frame in (("kernel_metrics", ncu.metrics), ("kernel_rules", ncu.rules)):
        target = output / f"{name}.parquet"
        table = pa.Table.from_pandas(frame.drop(columns=["pid"]), preserve_index=False)
        try:
            pq.write_table(scrub_table(table, scrubber, name), target, compression="zstd")
        except OSError as exc:
            raise output_error(target, exc) from None
    console.print(f"wrote {len(ncu.kernels):,} Nsight Compute kernel records: {len(ncu.metrics):,} metrics and "
                  f"{len(ncu.rules):,} rule results to {output}/")


def command(
    paths: List[str] = typer.Argument(..., help="Trace files or directories."),
    output: Path = typer.Option(..., "-o", "--output", help="Directory to write the Parquet files into."),
    no_cache: bool = LOAD_NO_CACHE_OPTION,
    jobs: Optional[int] = JOBS_OPTION,
    no_progress: bool = NO_PROGRESS_OPTION,
) -> None:
    """Convert traces to Parquet (events, links, steps, memory and counters .parquet, and ranks.json).

    Example: traceview convert run/ -o run_parquet/
    """
    import pyarrow.parquet as pq

    from traceview.secrets import Scrubber, scrub_metadata, scrub_text

    console = make_console()
    check_output_dir(output)  # before the work: a folder that cannot be written fails at once
    ncu_paths = [p for p in paths if _is_ncu(Path(p))]
    if ncu_paths:
        _convert_ncu(console, ncu_paths, output)
    paths = [p for p in paths if p not in ncu_paths]
    if not paths:
        return
    trace = load_with_progress(paths, use_cache=not no_cache, step_marker=None, jobs=jobs,
                               show_progress=not no_progress)
    scrubber = Scrubber()
    tables = (("events", trace.events), ("links", trace.links), ("steps", trace.steps), ("memory", trace.memory),
              ("counters", trace.counters))
    for name, table in tables:
        target = output / f"{name}.parquet"
        try:
            pq.write_table(scrub_table(table, scrubber, name), target, compression="zstd")
        except OSError as exc:  # pyarrow's IO errors are OSErrors
            raise output_error(target, exc) from None
    ranks = []
    for data in scrub_metadata(dict(trace.ranks)).values():
        # metadata values can hold secrets the scrubber does not recognise: keep only their (scrubbed) keys
        data["raw_metadata"] = sorted(data["raw_metadata"])
        ranks.append(data)
    warnings = [scrub_text(w) for w in trace.warnings]
    write_output_file(output / "ranks.json",
                      json.dumps({"ranks": ranks, "warnings": warnings}, indent=2, default=str).encode("utf-8"))
    console.print(f"wrote {trace.events.num_rows:,} events, {trace.links.num_rows:,} links, "
                  f"{trace.steps.num_rows} steps, {trace.memory.num_rows:,} allocator events and "
                  f"{trace.counters.num_rows:,} counter samples to {output}/")
