"""``traceview sql PATH... "SELECT ..."``: a DuckDB query over a trace's views (docs/sql.md), printed
as a table or written as CSV, JSON or Parquet. It takes the analysis options of every analysing
command (traceview/commands/options.py), checked as everywhere: the step marker and the
communication rules shape the steps, kernels, gaps and collectives views as they shape ``analyze``'s
report; no view shows the efficiency analysis's figures yet, so ``--gpu-specs``, ``--model-flops``
and ``--mfu-dtype`` change no result here."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import typer

from traceview.commands._common import PIPED_WIDTH, check_output_file, load_with_progress, write_output_file
from traceview.commands.options import ANALYSIS_OPTIONS, AnalysisArgs, with_analysis_options
from traceview.errors import TraceviewError

if TYPE_CHECKING:
    import pyarrow as pa

    from traceview.findings import Options

FORMATS = ("table", "csv", "json", "parquet")
#: ``-o`` file extensions and the format each implies when ``--format`` is not given
EXTENSIONS = {".csv": "csv", ".json": "json", ".parquet": "parquet", ".pq": "parquet", ".txt": "table"}
#: rows the table format prints before saying how many more there are
DEFAULT_MAX_ROWS = 50
#: characters a table cell shows (longer kernel names are cut with "...")
MAX_CELL = 80
#: the widest table printed (wider results: fewer columns, or -o FILE.csv)
MAX_TABLE_WIDTH = 1000


@with_analysis_options
def command(
    args: List[str] = typer.Argument(None, metavar="PATH... QUERY", help="Trace files or directories, then one SQL "
                                     "query (in quotes)."),
    fmt: Optional[str] = typer.Option(None, "--format", "-f", help="table (default), csv, json (an array of "
                                      "objects) or parquet (needs -o)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the result to this file; its "
                                          "extension (.csv .json .parquet .txt) sets the format when --format is "
                                          "not given."),
    views: bool = typer.Option(False, "--views", help="List the views and their columns, and stop."),
    max_rows: int = typer.Option(DEFAULT_MAX_ROWS, "--max-rows", min=1, help="Rows the table format prints "
                                 "(the count of the rest is said)."),
    analysis: AnalysisArgs = ANALYSIS_OPTIONS,
) -> None:
    """Query traces with SQL (DuckDB) over the views events, kernels, launches, ops, gaps, steps,
    collectives, critical_path_segments, critical_path_steps, critical_path_whatif, ranks, links, memory
    and counters (docs/sql.md).

    Example: traceview sql run/ "SELECT name, count(*) AS n, sum(dur_ns) AS total_ns FROM kernels
    GROUP BY name ORDER BY total_ns DESC LIMIT 10" -o top.csv
    """
    from traceview.sqlviews import view_help

    paths, query = split_arguments(list(args or []), views)
    if views and not paths:
        typer.echo(view_help())
        return
    kind = output_format(fmt, output)
    options = analysis.options()  # a bad value fails before any trace is read
    if output is not None:
        check_output_file(output)  # before loading: a path that cannot be written fails at once
    found = run_query(paths, query, views=views, options=options, use_cache=analysis.use_cache, jobs=analysis.jobs,
                      max_rows=max_rows if kind == "table" else None, show_progress=analysis.show_progress)
    if found is None:
        return
    table, total = found
    if kind == "table":
        print_table(table, total, output)
        return
    data = encode(table, kind)
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        write_output_file(output, data)
        typer.echo(f"wrote {table.num_rows:,} rows to {output}", err=True)


def split_arguments(args: list[str], views: bool) -> tuple[list[str], str]:
    """(paths, query): the query is the last argument, unless ``--views`` lists views."""
    if views:
        return args, ""
    if len(args) < 2:
        raise TraceviewError("give one or more trace paths, then a query in quotes: traceview sql run/ "
                             "\"SELECT count(*) FROM kernels\" (traceview sql --views lists the views)")
    query = args[-1]
    if Path(query).exists() and not query.lstrip().lower().startswith(("select", "with", "from", "describe",
                                                                       "summarize", "pivot", "show")):
        raise TraceviewError(f"{query}: the last argument is a path, not a query: put the query in quotes after "
                             "the paths (traceview sql --views lists the views)")
    return args[:-1], query


def output_format(fmt: Optional[str], output: Optional[Path]) -> str:
    """The output format: ``--format``, else the extension of ``-o``, else a table."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise TraceviewError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
        kind = fmt
    elif output is not None:
        kind = EXTENSIONS.get(output.suffix.lower(), "")
        if not kind:
            raise TraceviewError(f"{output}: cannot tell the format from the extension {output.suffix!r} "
                                 f"(use .csv .json .parquet .txt, or --format {'|'.join(FORMATS)})")
    else:
        kind = "table"
    if kind == "parquet" and output is None:
        raise TraceviewError("--format parquet writes a binary file: give -o FILE.parquet")
    return kind


def run_query(paths: list[str], query: str, *, views: bool, options: Options, use_cache: bool,
              jobs: Optional[int], max_rows: Optional[int],
              show_progress: bool = True) -> "tuple[pa.Table, int] | None":
    """Load the traces (cache, --jobs) and run the query: (its result, or its first ``max_rows``
    rows, and the number of rows in all); with ``views``, print each view's columns and types on
    these traces instead (None). The views the analyses compute use ``options``."""
    from traceview.sqlviews import VIEWS, SqlError, SqlSession

    trace = load_with_progress(paths, use_cache=use_cache, step_marker=options.step_marker, jobs=jobs,
                               show_progress=show_progress)
    conn = SqlSession(trace, options)
    try:
        if views:
            for view in VIEWS:
                typer.echo(f"{view.name}: {view.row}")
                try:
                    cols = conn.columns(view.name)
                except SqlError as exc:  # a view of an analysis this traceview lacks: said, the rest listed
                    typer.echo(f"  (not available on these traces: {exc})")
                    continue
                typer.echo("\n".join(f"  {name:<22} {kind}" for name, kind in cols))
            return None
        if max_rows is not None:
            return conn.head(query, max_rows)
        table = conn.arrow(query)
        return table, table.num_rows
    finally:
        conn.close()


def print_table(shown: "pa.Table", total: int, output: Optional[Path]) -> None:
    """The rows ``shown`` as a rich table, and how many rows the result has in all (``total``)."""
    import pyarrow as pa
    from rich.table import Table
    from rich.text import Text

    from traceview.commands._common import make_console

    # cells and headers as Text: trace names such as "index_put_[...]" are not rich markup
    out = Table(show_header=True, header_style="bold", show_lines=False)
    for field in shown.schema:
        numeric = pa.types.is_integer(field.type) or pa.types.is_floating(field.type) or pa.types.is_decimal(field.type)
        out.add_column(Text(field.name), overflow="fold", justify="right" if numeric else "left")
    for row in shown.to_pylist():
        out.add_row(*[Text(cell_text(v)) for v in row.values()])
    if output is None:
        console = make_console()
        # as wide as the result needs: a SQL result is cut by rows (said below), never squeezed
        console.width = max(console.width, natural_width(shown))
        console.print(out)
        console.print(rows_line(total, shown.num_rows), highlight=False)
        return
    from rich.console import Console

    with open(output, "w", encoding="utf-8") as handle:
        console = Console(file=handle, width=max(PIPED_WIDTH, natural_width(shown)), color_system=None)
        console.print(out)
        console.print(rows_line(total, shown.num_rows), highlight=False)
    typer.echo(f"wrote {shown.num_rows:,} of {total:,} rows to {output}", err=True)


def natural_width(table: "pa.Table") -> int:
    """Columns wide enough for their header and cells (as :func:`cell_text` cuts them), with rich's
    borders and padding (3 characters a column), up to ``MAX_TABLE_WIDTH``."""
    widths = [len(name) for name in table.column_names]
    for row in table.to_pylist():
        for i, value in enumerate(row.values()):
            widths[i] = max(widths[i], len(cell_text(value)))
    return min(sum(widths) + 3 * len(widths) + 1, MAX_TABLE_WIDTH)


def rows_line(total: int, shown: int) -> str:
    if total == shown:
        return f"{total:,} row{'s' if total != 1 else ''}"
    return f"{total:,} rows, the first {shown:,} shown (--max-rows N, or -o FILE.csv for all)"


def cell_text(value: Any) -> str:
    """One cell: NULL, integers as they are (exact ns), floats to 6 significant digits, text cut."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else f"{value:.6g}"
    text = str(value)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 3] + "..."


def encode(table: "pa.Table", kind: str) -> bytes:
    """The whole result as CSV, JSON (an array of objects; NaN as null) or Parquet bytes."""
    import io

    if kind == "csv":
        import pyarrow.csv as pacsv

        buf = io.BytesIO()
        pacsv.write_csv(table, buf)
        return buf.getvalue()
    if kind == "parquet":
        import pyarrow.parquet as pq

        buf = io.BytesIO()
        pq.write_table(table, buf)
        return buf.getvalue()
    rows = [{k: json_value(v) for k, v in row.items()} for row in table.to_pylist()]
    return (json.dumps(rows, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    return str(value)  # decimals beyond int64, dates, intervals: as DuckDB writes them
