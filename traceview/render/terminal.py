"""The terminal: the default output of ``traceview analyze``, leading with the answer.

The first screen (at most 40 lines at 160 columns on an 8-rank job) holds the job in one line; the
headline (median and p90 step time, GPU utilization, where the GPU window goes: compute, exposed
communication, memory alone, idle); the top findings with their cost per step; the top kernels; and
one line each for the warnings worth knowing. ``--details`` adds the per-rank table, every finding
with its nested ones and recommendations, every warning and each analysis's tables.
"""

from __future__ import annotations

import functools
import io
from typing import TYPE_CHECKING, Any, Mapping

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from traceview.registry import ANALYSES, Renderer, register_renderer
from traceview.render.common import (
    critical_path_text,
    efficiency_text,
    layers_text,
    cost_heading,
    nested_note,
    column_label,
    display_rows,
    finding_cost,
    finding_where,
    findings_count_text,
    format_cell,
    input_warnings,
    is_unmapped_warning,
    job_line,
    shares_text,
    top_kernels,
    top_level,
    unmapped_line,
)
from traceview.units import fmt_ns, fmt_share

if TYPE_CHECKING:
    from traceview.report import Report

#: top-level findings and kernels on the first screen (``--top`` changes the findings')
DEFAULT_TOP = 5
TOP_KERNELS = 5
#: rows per analysis table under ``--details``
DETAIL_ROWS = 10
#: the width text output is laid out for when it does not go to a terminal
TEXT_WIDTH = 160
SEVERITY_STYLE = {"high": "red", "medium": "yellow", "low": "cyan", "info": "dim"}


@functools.lru_cache(maxsize=65536)
def safe(text: str) -> str:
    """``text`` with secrets scrubbed and rich markup escaped: every string from a trace that the
    terminal prints goes through this (the report already holds scrubbed strings; this is the
    terminal's own guard)."""
    from traceview.secrets import scrub_text

    return escape(scrub_text(text))


def make_console() -> Console:
    """A console that is wide enough for tables when output is piped (rich assumes 80 columns)."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=TEXT_WIDTH)
    return console


def _table(title: str | None = None) -> Table:
    """A compact table: header, one rule under it, no borders (every line is content)."""
    return Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False,
                 pad_edge=False, padding=(0, 1))


def _fitted_table(console: Console, title: str, headers: list[str], rows: list[list[str]], *, flexible: int,
                  right: tuple[str, ...] = ()) -> Table:
    """One line per row: every column as wide as its widest cell but column ``flexible``, which
    takes the rest of the console's width and ends in an ellipsis when its text is longer."""
    table = _table(title)
    widths = [max([len(h)] + [Text.from_markup(r[i]).cell_len for r in rows]) for i, h in enumerate(headers)]
    # a column's width includes its padding (one space each side); one divider between columns
    widths = [w + 2 for w in widths]
    rest = console.width - sum(w for i, w in enumerate(widths) if i != flexible) - (len(widths) - 1)
    widths[flexible] = max(12, min(widths[flexible], rest))
    for header, width in zip(headers, widths):
        table.add_column(header, no_wrap=True, overflow="ellipsis", width=width,
                         justify="right" if header in right else "left")
    for row in rows:
        table.add_row(*row)
    return table


# ------------------------------------------------------------------------------------ first screen


def print_headline(report: Mapping[str, Any], console: Console) -> None:
    """The job in one line, then step time, utilization and where the GPU window goes."""
    s = report["summary"]
    console.print(f"[bold]traceview[/bold] · {safe(job_line(report))}", highlight=False)
    if s.get("median_step_time_ns") is not None:
        line = (f"[bold]step time[/bold] median {fmt_ns(s.get('median_step_time_ns'))}, "
                f"p90 {fmt_ns(s.get('p90_step_time_ns'))}")
    else:
        line = "[bold]no steps[/bold]: every figure is for the whole trace"
    if s.get("window_ns"):
        gpus = s.get("gpus") or 0
        line += (f" · [bold]GPU utilization[/bold] {fmt_share(s.get('utilization'))} (busy {fmt_ns(s['busy_ns'])} of "
                 f"{fmt_ns(s['window_ns'])} over {gpus} GPU{'s' if gpus != 1 else ''})")
        console.print(line, highlight=False)
        console.print(f"[bold]where GPU time goes[/bold] (share of the GPU window) {shares_text(report)}",
                      highlight=False)
    else:
        console.print(line + " · [bold]GPU utilization[/bold] -", highlight=False)
    path = critical_path_text(report)
    if path:
        console.print(f"[bold]critical path[/bold] {safe(path)}", highlight=False)
    layers = layers_text(report)
    if layers:
        console.print(f"[bold]by layer[/bold] {safe(layers)}", highlight=False)
    rolled = efficiency_text(report)
    if rolled:
        console.print(f"[bold]efficiency[/bold] (per GPU) {safe(rolled)}", highlight=False)
    for key, note in (s.get("notes") or {}).items():
        console.print(f"[yellow]note:[/yellow] {safe(str(note))}", highlight=False)
    execution = report.get("execution") or {}
    if execution.get("executor") not in (None, "in-process"):
        console.print(f"[dim]{safe(execution_text(execution))}[/dim]", highlight=False)


def execution_text(execution: Mapping[str, Any]) -> str:
    """How a job ran, in one line: ``analyzed by local processes (2): 8 ranks from 8 files in 3.1 s``."""
    text = f"analyzed by {execution.get('executor')}"
    if execution.get("ranks") is not None and execution.get("files") is not None:
        text += f": {execution['ranks']} ranks from {execution['files']} files"
    if execution.get("seconds") is not None:
        text += f" in {execution['seconds']:.1f} s"
    if execution.get("failed_files"):
        text += f"; {execution['failed_files']} file(s) failed"
    return text


def print_top_findings(report: Mapping[str, Any], console: Console, top: int) -> None:
    """The first ``top`` top-level findings, one line each, in the report's order and with its ids."""
    parents = top_level(report)
    if not parents:
        console.print("[green]No findings: nothing here costs a noticeable share of the GPU time.[/green]")
        return
    rows = [[f["id"], f"[{SEVERITY_STYLE.get(f['severity'], '')}]{f['severity']}[/]", safe(str(f["title"])),
             finding_where(f), finding_cost(f)] for f in parents[:top]]
    table = _fitted_table(console, f"Findings: {findings_count_text(report)}",
                          ["id", "severity", "finding", "where", cost_heading(report)], rows, flexible=2,
                          right=(cost_heading(report),))
    console.print(table)
    total = len(report.get("findings", []))
    if len(parents) > top:
        console.print(f"  {len(parents) - top} more findings: --top {len(parents)} lists them, --details lists all "
                      f"{total} with nested ones and recommendations", style="dim", highlight=False)
    elif total > len(parents):
        console.print(f"  --details lists all {total} findings, with nested ones and recommendations", style="dim",
                      highlight=False)


def print_top_kernels(report: Mapping[str, Any], console: Console, n: int = TOP_KERNELS) -> None:
    kernels = top_kernels(report, n)
    if not kernels:
        return
    rows = [[safe(str(k.get("name"))), safe(str(k.get("category") or "-")), fmt_ns(k.get("total_ns")),
             format_cell("share_pct", k.get("share_pct")), f"{int(k.get('count') or 0):,}",
             fmt_ns(k.get("mean_ns")), f"{int(k.get('gpus') or 0):,}"] for k in kernels]
    table = _fitted_table(console, "Top kernels (whole job: all ranks and GPUs, largest total first)",
                          ["kernel", "category", "total time", "share of GPU time", "count", "mean", "GPUs"], rows,
                          flexible=0, right=("total time", "share of GPU time", "count", "mean", "GPUs"))
    console.print(table)


def print_warning_lines(report: Mapping[str, Any], console: Console, *, details: bool) -> None:
    """Warnings about the inputs and the analyses: every one with ``details``, else one line with
    their count; the unmapped-category line only when those events are many."""
    unmapped = unmapped_line(report, always=details)
    if unmapped:
        console.print(f"[yellow]unmapped:[/yellow] {safe(unmapped)}", highlight=False)
    warnings = [w for w in report.get("warnings", []) if not is_unmapped_warning(w)]
    if not warnings:
        return
    if details:
        for w in warnings:
            console.print(f"[yellow]warning ({safe(w['scope'])}):[/yellow] {safe(w['message'])}", highlight=False)
        return
    inputs = len(input_warnings(report))
    scopes = sorted({w["scope"] for w in warnings if w not in input_warnings(report)})
    parts = ([f"{inputs} about the inputs"] if inputs else []) + ([f"{len(warnings) - inputs} from "
                                                                    + ", ".join(scopes)] if scopes else [])
    console.print(f"[yellow]{len(warnings)} warning{'s' if len(warnings) != 1 else ''}[/yellow] "
                  f"({safe(', '.join(parts))}): --details shows them", highlight=False)


# ------------------------------------------------------------------------------------ details


def print_ranks(report: Mapping[str, Any], console: Console) -> None:
    table = _table("Ranks (whole trace per GPU)")
    for col in ("rank", "file", "format", "GPU", "span", "events", "steps", "utilization", "compute",
                "exposed comm.", "idle", "unmapped"):
        table.add_column(col, overflow="fold",
                         justify="left" if col in ("file", "format", "GPU") else "right")
    for r in report.get("ranks", []):
        bd = r.get("breakdown") or [{}]
        for i, b in enumerate(bd):
            window = b.get("window_ns") or 0
            share = (lambda key: fmt_share(b.get(key, 0) / window) if window else "-")  # noqa: E731
            first = i == 0
            unmapped = sum((r.get("unmapped") or {}).values())
            table.add_row(str(r["rank"]) if first else "", safe(r["file"]) if first else "",
                          safe(str(r.get("format") or "-")) if first else "", str(b.get("device", "-")),
                          fmt_ns(r["span_ns"]) if first else "", f"{r['events']:,}" if first else "",
                          str(r["steps"]) if first else "", fmt_share(b.get("utilization")), share("compute_ns"),
                          share("exposed_comm_ns"), share("idle_ns"), f"{unmapped:,}" if first and unmapped else "")
    console.print(table)


def print_all_findings(report: Mapping[str, Any], console: Console) -> None:
    findings = report.get("findings", [])
    if not findings:
        return
    table = Table(title=f"All findings: {findings_count_text(report)}", title_justify="left", title_style="bold",
                  show_lines=True, box=box.SQUARE)
    for col in ("id", "severity", "finding", "where", cost_heading(report), "recommendation"):
        table.add_column(col, overflow="fold", justify="right" if col.startswith("cost") else "left")
    for f in findings:
        sev = f["severity"]
        name = f"{safe(str(f['title']))}\n[dim]{safe(f['code'])}[/dim]"
        if f.get("parent"):
            name = f"↳ {name}\n[dim]({nested_note(f)})[/dim]"
        table.add_row(f["id"], f"[{SEVERITY_STYLE.get(sev, '')}]{sev}[/]", name, finding_where(f), finding_cost(f),
                      safe(str(f.get("recommendation") or "")))
    console.print(table)


def print_report_table(table: Mapping[str, Any], console: Console, steps: int, max_rows: int = DETAIL_ROWS) -> None:
    columns, rows = display_rows(table, steps)
    if not rows:
        return
    out = _table(safe(str(table["title"])))
    for col in columns:
        numeric = all(isinstance(r.get(col), (int, float)) or r.get(col) is None for r in rows)
        # text columns keep short names whole; long ones fold
        longest = max(len(format_cell(col, r.get(col))) for r in rows[:max_rows])
        out.add_column(column_label(col), overflow="fold", justify="right" if numeric else "left",
                       min_width=None if numeric else min(longest, 32))
    for r in rows[:max_rows]:
        out.add_row(*[safe(format_cell(c, r.get(c))) for c in columns])
    console.print(out)
    total = table.get("total_rows", len(rows)) if len(rows) == len(table["rows"]) else len(rows)
    if total > min(max_rows, len(rows)):
        console.print(f"  {min(max_rows, len(rows))} of {total:,} rows (--format json or the Python API for more)",
                      style="dim", highlight=False)


def print_analyses(report: Mapping[str, Any], console: Console) -> None:
    """Each analysis's headline table (``AnalysisSpec.headline_table``), under the analysis's title."""
    steps = int(report["summary"].get("steps") or 0)
    for name, analysis in (report.get("analyses") or {}).items():
        spec = ANALYSES.get(name)
        tables = analysis.get("tables") or {}
        chosen = spec.headline_table if spec is not None and spec.headline_table in tables else next(iter(tables), None)
        if chosen is None or not tables[chosen]["rows"]:
            continue
        console.print(f"\n[bold underline]{safe(str(analysis.get('title') or name))}[/]", highlight=False)
        print_report_table(tables[chosen], console, steps)


def print_report(report: Mapping[str, Any], console: Console, *, top: int = DEFAULT_TOP, details: bool = False,
                 summary_only: bool = False) -> None:
    """The report on ``console``: the first screen, then the details when asked for.
    ``summary_only``: the job, the headline, the ranks and the warnings (no findings, no tables)."""
    print_headline(report, console)
    if summary_only:
        console.print()
        print_ranks(report, console)
        print_warning_lines(report, console, details=True)
        return
    console.print()
    print_top_findings(report, console, top)
    console.print()
    print_top_kernels(report, console)
    console.print()
    print_warning_lines(report, console, details=details)
    if not details:
        console.print("[dim]--details: per-rank tables, every finding with its recommendation, every warning and "
                      "each analysis's table; --format html|markdown|json for a report[/dim]", highlight=False)
        return
    console.print()
    print_ranks(report, console)
    console.print()
    print_all_findings(report, console)
    print_analyses(report, console)


@register_renderer
class TextRenderer(Renderer):
    """Plain text as the terminal shows it (no colour), laid out for ``width`` columns (default 160).
    Options: ``top`` (top-level findings listed), ``details``, ``summary_only``, ``width``."""

    name = "text"
    output_file_extension = ".txt"
    description = "the terminal's text: the answer first, --details for the rest"

    def render(self, report: "Report") -> str:
        console = Console(file=io.StringIO(), width=int(self.options.get("width") or TEXT_WIDTH), record=True,
                          color_system=None, force_terminal=False, soft_wrap=False)
        self.print(report, console)
        return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"

    def print(self, report: "Report | Mapping[str, Any]", console: Console) -> None:
        """To ``console`` directly (with its colours, when it is a terminal)."""
        print_report(report, console, top=int(self.options.get("top") or DEFAULT_TOP),
                     details=bool(self.options.get("details")), summary_only=bool(self.options.get("summary_only")))
