"""Terminal rendering (rich): the default output of ``traceview analyze``."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from traceview.findings import merge_findings, AnalysisResult, nest_findings
from traceview.model import Trace


@functools.lru_cache(maxsize=65536)
def safe(text: str) -> str:
    """``text`` with secrets scrubbed (traceview.redact.scrub_text): every string from a trace that the
    terminal prints goes through this, as the report renderers' strings go through the report model."""
    from traceview.redact import scrub_text

    return scrub_text(text)


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


def fmt_share(share: float | None) -> str:
    """A fraction as a percentage: 0.1234 -> 12.3%."""
    if share is None or (isinstance(share, float) and pd.isna(share)):
        return "-"
    return f"{100 * float(share):.1f}%"


# ------------------------------------------------------------------ shared by the report renderers

#: columns the report renderers leave out of tables (event row ids, absolute timestamps: they only
#: mean something next to the trace; the JSON report keeps them)
HIDDEN_COLUMNS = frozenset({
    "row", "api_row", "gpu_row", "next_row", "cpu_op_row", "start_ns", "end_ns", "first_start_ns",
    "last_end_ns", "api_start_ns", "gpu_start_ns",
})


def visible_columns(columns: list[str]) -> list[str]:
    return [c for c in columns if c not in HIDDEN_COLUMNS]


def format_cell(col: str, value: Any) -> str:
    """A table cell as text: times from ns, percentages, shares, bytes; '-' for missing."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict)):
        import json

        return json.dumps(value, ensure_ascii=False)
    if col.endswith("_ns") or col.endswith("_ns_per_step"):
        return fmt_ns(value)
    if col.endswith("_pct"):
        return f"{float(value):.2f}%"
    if col.endswith("_bytes") or col == "bytes":
        return fmt_bytes(int(value))
    if col in ("share", "cost_share") or col.endswith("_share") or col.endswith("utilization"):
        return fmt_share(float(value))
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def finding_where(f: dict[str, Any]) -> str:
    where = []
    if f.get("rank") is not None:
        where.append(f"rank {f['rank']}")
    else:
        per_rank = (f.get("evidence") or {}).get("per_rank")
        if isinstance(per_rank, list) and per_rank:
            ranks = sorted({p.get("rank") for p in per_rank if isinstance(p, dict) and p.get("rank") is not None})
            if ranks:
                where.append("ranks " + ", ".join(str(r) for r in ranks))
    if f.get("step") is not None:
        where.append(f"step {f['step']}")
    return ", ".join(where) or "all"


def finding_cost(f: dict[str, Any]) -> str:
    cost = fmt_ns(f["cost_ns_per_step"]) if f.get("cost_ns_per_step") else "-"
    if f.get("cost_share") is not None:
        cost += f" ({fmt_share(f['cost_share'])})"
    return cost


def headline_rows(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, value, trust note) rows of the report's headline summary."""
    s = report["summary"]
    env = report.get("environment") or {}
    notes = s.get("notes") or {}
    gpus = env.get("gpus") or []
    gpu_text = ", ".join(
        f"{g['count']} × {g.get('model') or 'unnamed GPU'}"
        + (f" ({g['sm_count']} SMs, {fmt_bytes(g['memory_bytes'])})" if g.get("sm_count") and g.get("memory_bytes") else "")
        for g in gpus
    ) or "no GPU activity"
    ranks = s.get("ranks") or []
    world = s.get("world_size")
    rank_text = f"{len(ranks)} rank{'s' if len(ranks) != 1 else ''}" + (f" of world size {world}" if world else "")
    if len(ranks) > 1:
        rank_text += f" ({ranks[0]}–{ranks[-1]})" if ranks == list(range(ranks[0], ranks[-1] + 1)) else f" ({', '.join(map(str, ranks))})"
    steps = s.get("steps") or 0
    step_text = f"{steps} per rank" if steps else "none found"
    rows = [
        ("GPUs", gpu_text, ""),
        ("ranks", rank_text, ""),
        ("steps", step_text, ""),
        ("median step time", fmt_ns(s.get("median_step_time_ns")), notes.get("median_step_time_ns", "")),
    ]
    if s.get("window_ns"):
        rows.append(("GPU utilization", f"{fmt_share(s.get('utilization'))} (busy {fmt_ns(s['busy_ns'])} of "
                     f"{fmt_ns(s['window_ns'])}, summed over {s['gpus']} GPU{'s' if s['gpus'] != 1 else ''})",
                     notes.get("utilization", "")))
        per = "per step and GPU" if steps else "per GPU, whole trace"
        rows.append(("GPU idle", f"{fmt_share(s.get('idle_share'))} ({fmt_ns(s.get('idle_ns_per_step'))} {per})",
                     notes.get("idle_ns", "")))
        rows.append(("exposed communication", f"{fmt_share(s.get('exposed_comm_share'))} "
                     f"({fmt_ns(s.get('exposed_comm_ns_per_step'))} {per})", notes.get("exposed_comm_ns", "")))
    else:
        rows.append(("GPU utilization", "-", notes.get("utilization", "")))
    fs = report.get("findings_summary") or {}
    sev = fs.get("by_severity") or {}
    text = f"{fs.get('top_level', 0)}" + (" (" + ", ".join(f"{n} {k}" for k, n in sev.items() if n) + ")" if any(sev.values()) else "")
    if fs.get("nested"):
        text += f", plus {fs['nested']} nested under them"
    rows.append(("findings", text, ""))
    return rows


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
            safe(Path(info.source_path).name),
            f"{info.source_format}, rank from {info.rank_source}",
            safe(gpu_text),
            fmt_ns(s["span_ns"]),
            f"{s['events']:,}",
            f"{s['by_kind'].get('kernel', 0):,}",
            str(s["steps"]),
            escape(safe(unmapped)),
        )
    console.print(table)
    warnings = list(trace.warnings)
    for info in trace.ranks.values():
        warnings.extend(w for w in info.warnings if w not in warnings)
    for w in warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(safe(w))}", highlight=False)


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
    if isinstance(value, str):
        return escape(safe(value))
    if col.endswith("_ns"):
        return fmt_ns(value)
    if col.endswith("_pct"):
        return f"{float(value):.2f}%"
    if col.endswith("_bytes"):
        return fmt_bytes(int(value))
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def render_results(results: dict[str, AnalysisResult], console: Console, top_n: int = 10,
                   n_ranks: int = 1) -> None:
    for name, result in results.items():
        headline = result.tables.get("summary")
        if headline is not None and not headline.empty:
            render_table(headline, f"{name}", console)
        for w in result.warnings:
            console.print(f"[yellow]warning ({name}):[/yellow] {escape(safe(w))}", highlight=False)
    findings = [f for r in results.values() for f in r.findings]
    if n_ranks > 1:  # one line per problem, not one per rank: "On 3 of 4 ranks (worst: rank 2): ..."
        per_rank = [(f.rank, f) for f in findings if f.rank is not None]
        findings = [f for f in findings if f.rank is None] + merge_findings(per_rank, n_ranks)
    nested = nest_findings(findings)
    console.print()
    if not nested:
        console.print("[green]No findings: nothing here costs a noticeable share of the step time.[/green]")
        return
    n_nested = sum(len(kids) for _, kids in nested)
    title = f"Findings, most costly first ({len(nested)}" + (f", plus {n_nested} nested" if n_nested else "") + ")"
    table = Table(title=title, title_justify="left", show_lines=True)
    for col in ("#", "severity", "finding", "where", "cost / step", "recommendation"):
        table.add_column(col, overflow="fold")
    colors = {"high": "red", "medium": "yellow", "low": "cyan", "info": "dim"}
    for i, (parent, kids) in enumerate(nested[:top_n], start=1):
        for j, f in enumerate((parent, *kids)):
            d = f.to_dict()
            label = str(i) if j == 0 else f"{i}.{j}"
            name = f"{escape(safe(f.title))}\n[dim]{f.code}[/dim]"
            if j:
                name = f"↳ {name}\n[dim](part of #{i}: its cost is included there)[/dim]"
            table.add_row(label, f"[{colors[f.severity]}]{f.severity}[/]", name, finding_where(d),
                          finding_cost(d), escape(safe(f.recommendation)))
    console.print(table)
    if len(nested) > top_n:
        console.print(f"  ({len(nested) - top_n} more findings: --top {len(nested)} shows all)", style="dim")
