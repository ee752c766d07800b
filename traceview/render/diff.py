"""Rendering of a :class:`traceview.diff.TraceDiff`: text (rich tables), Markdown (GitHub-ready) and
JSON (stable keys, times in int ns). Renderers only format; every figure comes from the diff."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from traceview.diff import METRICS, Change, KernelDelta, MetricDelta, TraceDiff
from traceview.units import fmt_ns

#: how many kernel rows the text and Markdown outputs show (JSON has all)
DEFAULT_TOP = 15
NAME_WIDTH = 90

_STATUS_TEXT = {
    "worse": "worse",
    "better": "better",
    "within_noise": "within noise",
    "unchanged": "no change",
    "only_base": "only in base",
    "only_new": "only in new",
    "appeared": "appeared",
    "vanished": "vanished",
}
_STATUS_STYLE = {"worse": "red", "better": "green", "within_noise": "dim", "unchanged": "dim",
                 "appeared": "yellow", "vanished": "cyan", "new": "red", "fixed": "green"}


# ------------------------------------------------------------------------------------------------
# formatting helpers shared by text and Markdown


def _signed_ns(ns: float | None) -> str:
    if ns is None:
        return "-"
    if ns == 0:
        return "0"
    return ("+" if ns > 0 else "-") + fmt_ns(abs(ns))


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}%" if unit == "pct" else fmt_ns(value)


def _delta(change: Change, unit: str) -> str:
    if change.delta is None:
        return "-"
    if unit == "pct":
        return f"{change.delta:+.1f} pp"
    return _signed_ns(change.delta)


def _delta_pct(change: Change, unit: str) -> str:
    if unit == "pct" or change.delta_pct is None:
        return "-"
    return f"{change.delta_pct:+.1f}%"


def _threshold(change: Change, unit: str) -> str:
    if change.threshold is None:
        return "-"
    text = f"{change.threshold:.1f} pp" if unit == "pct" else fmt_ns(change.threshold)
    if not change.noise_estimated:
        text += " (floor only)"
    return text


def _status(change: Change) -> str:
    text = _STATUS_TEXT.get(change.status, change.status)
    if change.status in ("worse", "better") and not change.noise_estimated:
        text += " (noise n/a)"
    return text


def _where(rank: int | None, device: int | None) -> str:
    if rank is None:
        return "all ranks"
    return f"rank {rank}" + (f" GPU {device}" if device is not None else "")


def _short(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _kernel_label(k: KernelDelta) -> str:
    if k.renamed:
        return f"{_short(k.base_names[0], 45)} -> {_short(k.new_names[0], 45)}" if len(k.base_names) == 1 \
            and len(k.new_names) == 1 else f"{k.key} ({len(k.base_names)} -> {len(k.new_names)} names)"
    return _short(k.name)


def _headline(diff: TraceDiff) -> str:
    verdict = diff.verdict()
    parts = []
    for m in diff.metrics:
        if m.metric == "step_time_ns" and m.change.delta_pct is not None:
            parts.append(f"{_where(m.rank, m.device)} {m.change.delta_pct:+.1f}%")
    text = verdict
    if parts:
        text += " (step time: " + ", ".join(parts) + ")"
    return text


def _side(side: Any) -> str:
    steps = sorted(set(side.steps.values()))
    if steps in ([], [0]):
        step_text = "no steps"
    else:
        n = f"{steps[0]}" if len(steps) == 1 else f"{steps[0]}-{steps[-1]}"
        step_text = f"{n} step{'s' if steps[-1] != 1 else ''} per rank"
    return f"{side.label} ({len(side.ranks)} rank{'s' if len(side.ranks) != 1 else ''}, {step_text})"


def _noise_rule(diff: TraceDiff) -> str:
    o = diff.options
    return (f"mean per step; a change is significant when |delta| > max({o.k:g} x pooled per-step std, "
            f"{fmt_ns(o.abs_floor_ns)}, {100 * o.rel_floor:g}% of base)")


def _kernel_rows(diff: TraceDiff, top: int) -> tuple[list[KernelDelta], int]:
    """Significant, appeared, vanished and renamed kernels, largest change first; and how many rows
    are within noise and not shown."""
    shown = [k for k in diff.kernels if k.change.significant or k.renamed]
    def size(k: KernelDelta) -> float:
        c = k.change
        if c.delta is not None:
            return abs(c.delta)
        return abs(c.new if c.new is not None else (c.base or 0.0))

    shown.sort(key=lambda k: (-size(k), k.rank, k.key))
    quiet = len(diff.kernels) - len(shown)
    return shown[:top], quiet + max(0, len(shown) - top)


def _finding_cost(f: Any, arrow: str = "->") -> str:
    b = fmt_ns(f.base_cost_ns) if f.base_cost_ns else "-"
    n = fmt_ns(f.new_cost_ns) if f.new_cost_ns else "-"
    return f"{b} {arrow} {n}"


# ------------------------------------------------------------------------------------------------
# text


def render_text(diff: TraceDiff, console: Console, top: int = DEFAULT_TOP) -> None:
    console.print(f"[bold]traceview diff[/bold]: {_side(diff.base)} -> {_side(diff.new)}", highlight=False,
                  soft_wrap=True)
    style = {"regressed": "red", "improved": "green", "changed": "yellow"}.get(diff.verdict(), "green")
    console.print(f"Verdict: [{style}]{_headline(diff)}[/]", highlight=False)

    table = Table(title=f"Per-step figures ({_noise_rule(diff)})", title_justify="left")
    for col in ("figure", "where", "base", "new", "delta", "delta %", "noise threshold", "verdict"):
        table.add_column(col, justify="left" if col in ("figure", "where", "verdict") else "right")
    for m in diff.metrics:
        c = m.change
        table.add_row(METRICS[m.metric][2], _where(m.rank, m.device), _value(c.base, m.unit), _value(c.new, m.unit),
                      _delta(c, m.unit), _delta_pct(c, m.unit), _threshold(c, m.unit),
                      f"[{_STATUS_STYLE.get(c.status, '')}]{_status(c)}[/]" if c.status in _STATUS_STYLE else _status(c))
    console.print(table)

    rows, quiet = _kernel_rows(diff, top)
    if rows:
        table = Table(title="Kernels: GPU time per step (changed, appeared, vanished, renamed)", title_justify="left")
        for col in ("kernel", "where", "match", "base", "new", "delta", "delta %", "threshold", "verdict"):
            table.add_column(col, overflow="fold",
                             justify="left" if col in ("kernel", "where", "match", "verdict") else "right")
        for k in rows:
            c = k.change
            table.add_row(_kernel_label(k), _where(k.rank, k.device), k.match, _value(c.base, "ns"),
                          _value(c.new, "ns"), _delta(c, "ns"), _delta_pct(c, "ns"), _threshold(c, "ns"),
                          f"[{_STATUS_STYLE.get(c.status, '')}]{_status(c)}[/]")
        console.print(table)
    if not rows:
        console.print(f"Kernels: all {len(diff.kernels)} kernel rows are within noise or unchanged.", highlight=False)
    elif quiet:
        console.print(f"  {quiet} more kernel rows are within noise or not shown (--format json lists all)",
                      style="dim", highlight=False)

    if diff.findings:
        table = Table(title="Findings by code and rank", title_justify="left")
        for col in ("status", "finding", "where", "severity", "cost / step"):
            table.add_column(col, overflow="fold")
        for f in diff.findings:
            sev = f"{f.base_severity or '-'} -> {f.new_severity or '-'}"
            table.add_row(f"[{_STATUS_STYLE.get(f.status, 'dim')}]{f.status}[/]", f"{f.title}\n[dim]{f.code}[/dim]",
                          _where(f.rank, None), sev, _finding_cost(f))
        console.print(table)
    else:
        console.print("Findings: none in either trace.")
    for note in diff.notes:
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False)


def to_text(diff: TraceDiff, top: int = DEFAULT_TOP, width: int = 160) -> str:
    """The text rendering as a plain string (no colour), e.g. for ``-o FILE``."""
    console = Console(width=width, record=True, file=_NullFile(), color_system=None, force_terminal=False)
    render_text(diff, console, top=top)
    return console.export_text()


class _NullFile:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


# ------------------------------------------------------------------------------------------------
# Markdown


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_code(text: str) -> str:
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`"


def to_markdown(diff: TraceDiff, top: int = DEFAULT_TOP) -> str:
    out: list[str] = []
    out.append("## traceview diff")
    out.append("")
    out.append(f"**{_md(_side(diff.base))}** → **{_md(_side(diff.new))}**")
    out.append("")
    icon = {"regressed": "🔴", "improved": "🟢", "changed": "🟡"}.get(diff.verdict(), "⚪")
    out.append(f"**Verdict: {icon} {_md(_headline(diff))}**")
    out.append("")
    out.append("### Per-step figures")
    out.append("")
    out.append(f"_{_md(_noise_rule(diff))}_")
    out.append("")
    out.append("| figure | where | base | new | delta | delta % | noise threshold | verdict |")
    out.append("|---|---|---:|---:|---:|---:|---:|---|")
    for m in diff.metrics:
        c = m.change
        verdict = _status(c)
        if c.status in ("worse", "better"):
            verdict = f"**{verdict}**"
        out.append(f"| {METRICS[m.metric][2]} | {_where(m.rank, m.device)} | {_value(c.base, m.unit)} | "
                   f"{_value(c.new, m.unit)} | {_delta(c, m.unit)} | {_delta_pct(c, m.unit)} | "
                   f"{_threshold(c, m.unit)} | {verdict} |")
    out.append("")
    rows, quiet = _kernel_rows(diff, top)
    out.append("### Kernels")
    out.append("")
    if rows:
        out.append("| kernel | where | match | base | new | delta | delta % | verdict |")
        out.append("|---|---|---|---:|---:|---:|---:|---|")
        for k in rows:
            c = k.change
            label = _md_code(_kernel_label(k))
            out.append(f"| {label} | {_where(k.rank, k.device)} | {k.match} | {_value(c.base, 'ns')} | "
                       f"{_value(c.new, 'ns')} | {_delta(c, 'ns')} | {_delta_pct(c, 'ns')} | {_status(c)} |")
        out.append("")
    if not rows:
        out.append(f"All {len(diff.kernels)} kernel rows are within noise or unchanged.")
    elif quiet:
        out.append(f"{quiet} more kernel rows are within noise or not shown (`--format json` lists all).")
    out.append("")
    out.append("### Findings")
    out.append("")
    if diff.findings:
        out.append("| status | finding | code | where | severity | cost / step |")
        out.append("|---|---|---|---|---|---|")
        for f in diff.findings:
            status = f"**{f.status}**" if f.status in ("new", "worse") else f.status
            out.append(f"| {status} | {_md(f.title)} | `{f.code}` | {_where(f.rank, None)} | "
                       f"{f.base_severity or '-'} → {f.new_severity or '-'} | {_md(_finding_cost(f, '→'))} |")
    else:
        out.append("No findings in either trace.")
    if diff.notes:
        out.append("")
        for note in diff.notes:
            out.append(f"> **Note:** {_md(note)}")
    out.append("")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------
# JSON


def to_json(diff: TraceDiff) -> str:
    return json.dumps(diff.to_dict(), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def render(diff: TraceDiff, fmt: str, top: int = DEFAULT_TOP) -> str:
    """``text`` (plain), ``markdown`` or ``json`` as a string."""
    if fmt == "json":
        return to_json(diff)
    if fmt == "markdown":
        return to_markdown(diff, top=top)
    return to_text(diff, top=top)


__all__ = ["render", "render_text", "to_json", "to_markdown", "to_text", "DEFAULT_TOP", "MetricDelta"]
