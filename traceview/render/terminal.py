"""Terminal rendering (rich): the default output of ``traceview analyze``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from traceview.findings import AnalysisResult, rank_findings
from traceview.model import Trace


def fmt_ns(ns: float | int | None) -> str:
    """Human time from ns: 1.23 s, 45.6 ms, 789 us, 12 ns."""
    if ns is None or (isinstance(ns, float) and pd.isna(ns)):
        return "-"
    value = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}" if abs(value) / scale < 100 else f"{value / scale:.0f} {unit}"
    return f"{value:.0f} ns"


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def make_console() -> Console:
    """A console that is wide enough for tables when output is piped (rich assumes 80 columns)."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)
    return console


def render_summary(trace: Trace, console: Console) -> None:
    summary = trace.summary()
    table = Table(title="Trace summary", title_justify="left")
    for col in ("rank", "file", "format", "GPU", "span", "events", "kernels", "steps", "not mapped"):
        table.add_column(col, overflow="fold", justify="right" if col in ("events", "kernels", "steps") else "left")
    for rank in trace.rank_ids:
        info = trace.ranks[rank]
        s = summary[rank]
        names = {d.id: d.name for d in info.devices}
        used = s.get("devices", [])
        gpu_text = ", ".join(sorted({names.get(d) or f"device {d}" for d in used})) or "-"
        if len(used) > 1:
            gpu_text += f" (x{len(used)})"
        unmapped = ", ".join(f"{k} {v:,}" for k, v in sorted(info.unmapped.items(), key=lambda kv: -kv[1])) or "-"
        table.add_row(
            str(rank),
            Path(info.source_path).name,
            f"{info.source_format}, rank from {info.rank_source}",
            gpu_text,
            fmt_ns(s["span_ns"]),
            f"{s['events']:,}",
            f"{s['by_kind'].get('kernel', 0):,}",
            str(s["steps"]),
            unmapped,
        )
    console.print(table)
    warnings = list(trace.warnings)
    for info in trace.ranks.values():
        warnings.extend(w for w in info.warnings if w not in warnings)
    for w in warnings:
        console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)


def render_table(df: pd.DataFrame, title: str, console: Console, max_rows: int = 15) -> None:
    if df is None or df.empty:
        return
    table = Table(title=title, title_justify="left")
    shown = df.head(max_rows)
    for col in shown.columns:
        table.add_column(str(col), overflow="fold", justify="right" if pd.api.types.is_numeric_dtype(shown[col]) else "left")
    for _, row in shown.iterrows():
        table.add_row(*[_cell(col, row[col]) for col in shown.columns])
    console.print(table)
    if len(df) > max_rows:
        console.print(f"  ({len(df) - max_rows:,} more rows: use --format json or the Python API)", style="dim")


def _cell(col: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    if col.endswith("_ns"):
        return fmt_ns(value)
    if col.endswith("_pct"):
        return f"{float(value):.2f}%"
    if col.endswith("_bytes"):
        return fmt_bytes(int(value))
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def render_results(results: dict[str, AnalysisResult], console: Console, top_n: int = 10) -> None:
    for name, result in results.items():
        headline = result.tables.get("summary")
        if headline is not None and not headline.empty:
            render_table(headline, f"{name}", console)
        for w in result.warnings:
            console.print(f"[yellow]warning ({name}):[/yellow] {w}", highlight=False)
    findings = rank_findings([f for r in results.values() for f in r.findings])
    console.print()
    if not findings:
        console.print("[green]No findings: nothing here costs a noticeable share of the step time.[/green]")
        return
    table = Table(title=f"Findings, most costly first ({len(findings)})", title_justify="left", show_lines=True)
    for col in ("#", "severity", "finding", "where", "cost / step", "recommendation"):
        table.add_column(col, overflow="fold")
    colors = {"high": "red", "medium": "yellow", "low": "cyan", "info": "dim"}
    for i, f in enumerate(findings[:top_n], start=1):
        where = []
        if f.rank is not None:
            where.append(f"rank {f.rank}")
        if f.step is not None:
            where.append(f"step {f.step}")
        cost = fmt_ns(f.cost_ns_per_step) if f.cost_ns_per_step else "-"
        if f.cost_share is not None:
            cost += f" ({100 * f.cost_share:.1f}%)"
        table.add_row(str(i), f"[{colors[f.severity]}]{f.severity}[/]", f"{f.title}\n[dim]{f.code}[/dim]",
                      ", ".join(where) or "all", cost, f.recommendation)
    console.print(table)
    if len(findings) > top_n:
        console.print(f"  ({len(findings) - top_n} more findings: --top {len(findings)} shows all)", style="dim")
