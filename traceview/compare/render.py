"""Rendering of a :class:`~traceview.compare.diff.TraceDiff` (text: rich tables; Markdown:
GitHub-ready; JSON: stable keys, times in int ns) and of a :class:`~traceview.compare.check.CheckReport`
(text; its JSON is ``to_dict``). Renderers only format: every figure comes from the diff or the
check, every time and share through :mod:`traceview.units`."""

from __future__ import annotations

import io
import json
from typing import Any, Callable

from rich.console import Console
from rich.table import Table

from traceview.compare.check import CheckReport
from traceview.compare.critical_path import PATH_CATEGORIES, PathDelta, shown_categories
from traceview.compare.measured import MeasuredDelta
from traceview.compare.modules import LayerDelta
from traceview.compare.diff import METRICS, Change, EfficiencyOverall, FindingDelta, KernelDelta, OpTypeDelta, Side, \
    TraceDiff
from traceview.compare.rules import RULES
from traceview.units import fmt_bytes, fmt_ns, fmt_pct

__all__ = ["DEFAULT_TOP", "FORMATS", "render", "render_check_text", "render_text", "to_json", "to_markdown",
           "to_text"]

#: how many kernel rows the text and Markdown outputs show (JSON has all)
DEFAULT_TOP = 15
#: the formats of a diff
FORMATS = ("text", "markdown", "json")
#: kernel names longer than this are cut (with an ellipsis) in text and Markdown
NAME_WIDTH = 90
#: width of the plain text written to a file
TEXT_WIDTH = 160

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
_VERDICT_STYLE = {"regressed": "red", "improved": "green", "changed": "yellow"}
_VERDICT_ICON = {"regressed": "🔴", "improved": "🟢", "changed": "🟡"}


# ------------------------------------------------------------------------------------------------
# cells shared by text and Markdown


def _signed_ns(ns: float | None) -> str:
    if ns is None:
        return "-"
    if ns == 0:
        return "0"
    return ("+" if ns > 0 else "-") + fmt_ns(abs(ns))


def _signed_pct(pct: float) -> str:
    return ("+" if pct >= 0 else "-") + fmt_pct(abs(pct), 1)


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return fmt_pct(value, 1) if unit == "pct" else fmt_ns(value)


def _delta(change: Change, unit: str) -> str:
    if change.delta is None:
        return "-"
    if unit == "pct":
        return f"{change.delta:+.1f} pp"
    return _signed_ns(change.delta)


def _delta_pct(change: Change, unit: str) -> str:
    if unit == "pct" or change.delta_pct is None:
        return "-"
    return _signed_pct(change.delta_pct)


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


def _styled_status(change: Change) -> str:
    style = _STATUS_STYLE.get(change.status)
    return f"[{style}]{_status(change)}[/]" if style else _status(change)


def _where(rank: int | None, device: int | None) -> str:
    if rank is None:
        return "all ranks"
    return f"rank {rank}" + (f" GPU {device}" if device is not None else "")


def _short(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _kernel_label(k: KernelDelta) -> str:
    if k.renamed:
        if len(k.base_names) == 1 and len(k.new_names) == 1:
            return f"{_short(k.base_names[0], 45)} -> {_short(k.new_names[0], 45)}"
        return f"{k.key} ({len(k.base_names)} -> {len(k.new_names)} names)"
    return _short(k.name)


def _finding_ref(f: FindingDelta) -> str:
    """Where the finding is in the reports: ``F2`` (the new report's id) or ``base F3``."""
    return f.new_id if f.new_id else (f"base {f.base_id}" if f.base_id else "")


def _headline(diff: TraceDiff) -> str:
    parts = [f"{_where(m.rank, m.device)} {_signed_pct(m.change.delta_pct)}" for m in diff.metrics
             if m.metric == "step_time_ns" and m.change.delta_pct is not None]
    text = diff.verdict()
    if parts:
        text += " (step time: " + ", ".join(parts) + ")"
    return text


def _side(side: Side) -> str:
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
    are within noise or not shown."""
    shown = [k for k in diff.kernels if k.change.significant or k.renamed]

    def size(k: KernelDelta) -> float:
        c = k.change
        if c.delta is not None:
            return abs(c.delta)
        return abs(c.new if c.new is not None else (c.base or 0.0))

    shown.sort(key=lambda k: (-size(k), k.rank, k.key))
    quiet = len(diff.kernels) - len(shown)
    return shown[:top], quiet + max(0, len(shown) - top)


#: the efficiency section's title (whole-trace ratios: shown, not judged)
_EFFICIENCY_TITLE = "Efficiency per op type (whole trace; shown side by side, not judged by the noise rule)"


def _eff(value: float | None) -> str:
    return "-" if value is None else fmt_pct(100.0 * value, 1)


def _tflops(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _op_type_cells(o: OpTypeDelta) -> list[str]:
    """op type, where, dtype/unit, GPU time, efficiency base/new/delta, TFLOP/s base/new/delta."""
    label = o.name + ("" if o.match == "both" else f" ({o.match})")
    pp = o.efficiency_delta_pp
    pct = o.tflops_delta_pct
    return [_short(label), _where(o.rank, o.device), f"{o.dtype} {o.unit}",
            f"{_value(o.base_gpu_ns, 'ns')} -> {_value(o.new_gpu_ns, 'ns')}", _eff(o.base_efficiency),
            _eff(o.new_efficiency), "-" if pp is None else f"{pp:+.1f} pp", _tflops(o.base_tflops),
            _tflops(o.new_tflops), "-" if pct is None else _signed_pct(pct)]


_OP_TYPE_HEAD = ("op type", "where", "dtype", "GPU time", "efficiency base", "new", "delta", "TFLOP/s base", "new",
                 "delta %")


def _overall_cells(e: EfficiencyOverall) -> list[str]:
    def pct(v: float | None) -> str:
        return "-" if v is None else fmt_pct(v, 1)

    return [_where(e.rank, e.device), pct(e.base_modelled_pct), pct(e.new_modelled_pct), _eff(e.base_hfu),
            _eff(e.new_hfu)]


_OVERALL_HEAD = ("where", "modelled base", "modelled new", "HFU base", "HFU new")


#: the critical-path section's title
_PATH_TITLE = "Critical path per step (mean; what bounds the step, docs/metrics.md)"
_PATH_HEAD = ("figure", "where", "base", "new", "delta", "delta %", "noise threshold", "verdict")


def _bound_text(bound: str | None, steps: int, total: int) -> str:
    if bound is None:
        return "-"
    return f"{bound} ({steps} of {total} step{'s' if total != 1 else ''})" if total > 1 else bound


def _path_rows(p: PathDelta) -> list[tuple[list[str], Change | None]]:
    """One rank's rows: what bounds it, the path, each category with time on it, the achievable
    step (cells up to the verdict, and the change the verdict is of; None for the bound row)."""
    where = _where(p.rank, None)
    bound = ["bound by", where, _bound_text(p.base_bound_by, p.base_bound_steps, p.base_steps),
             _bound_text(p.new_bound_by, p.new_bound_steps, p.new_steps), "", "", "",
             "changed" if p.bound_changed else "same"]
    rows: list[tuple[list[str], Change | None]] = [(bound, None)]
    parts = [(f"  {PATH_CATEGORIES[c.category]}", c.change) for c in shown_categories(p)]
    figures = [("path (= step)", p.path), *parts, ("achievable step", p.achievable)]
    for label, c in figures:
        rows.append(([label, where, _value(c.base, "ns"), _value(c.new, "ns"), _delta(c, "ns"), _delta_pct(c, "ns"),
                      _threshold(c, "ns")], c))
    return rows


def _path_ranks(diff: TraceDiff, top: int) -> tuple[list[PathDelta], str]:
    """The ranks whose critical path changed (bound, achievable step or a category beyond noise),
    the largest change of the path first, at most ``top``; and a line about the others."""
    changed = sorted((p for p in diff.critical_path if p.significant),
                     key=lambda p: (-abs(p.path.delta or 0.0), p.rank))
    quiet = len(diff.critical_path) - len(changed)
    more = max(0, len(changed) - top)
    parts = [f"{quiet} rank(s) with no significant change in the critical path"] if quiet else []
    if more:
        parts.append(f"{more} more changed rank(s) not shown (--format json lists all)")
    return changed[:top], "; ".join(parts)


def _path_headline(diff: TraceDiff) -> str:
    """The job-wide figures: ``step 4.1 ms -> 4.3 ms, bound by gpu 42% -> host 51%; achievable ...``."""
    s = diff.critical_path_summary

    def pair(key: str, fmt: Any) -> str:
        side = s.get(key) or {}
        return " -> ".join(fmt(side.get(x)) if side.get(x) is not None else "-" for x in ("base", "new"))

    if not s:
        return ""
    share = s.get("critical_path_bound_share") or {}
    bound = s.get("critical_path_bound_by") or {}
    bounds = " -> ".join(f"{bound.get(x) or '-'}" + (f" {fmt_pct(100 * share[x], 0)}" if share.get(x) is not None
                                                       else "") for x in ("base", "new"))
    return (f"critical path (median step): {pair('critical_path_step_ns', fmt_ns)}, bound by {bounds}; "
            f"achievable ~{pair('achievable_step_ns', fmt_ns)}")


#: the layers section's title
_LAYER_TITLE = "Layers: GPU time per step by module type path (inclusive; the largest changes; docs/metrics.md)"
_LAYER_HEAD = ("layer (type path)", "where", "share base", "share new", "base", "new", "delta", "delta %",
               "noise threshold", "verdict")


def _share(share: float | None) -> str:
    return "-" if share is None else fmt_pct(100 * share, 1)


def _layer_cells(x: LayerDelta) -> list[str]:
    """One layer's cells up to the verdict."""
    c = x.change
    return [_short(x.type_path), _where(x.rank, None), _share(x.base_share), _share(x.new_share),
            _value(c.base, "ns"), _value(c.new, "ns"), _delta(c, "ns"), _delta_pct(c, "ns"), _threshold(c, "ns")]


def _layer_rows(diff: TraceDiff, top: int) -> tuple[list[LayerDelta], str]:
    """The layers whose time changed beyond noise (appeared and vanished ones included), the
    largest change first, at most ``top``; and a line about the others."""
    changed = [x for x in diff.layers if x.change.significant]
    quiet = len(diff.layers) - len(changed)
    more = max(0, len(changed) - top)
    parts = [f"{quiet} layer row(s) within noise or unchanged"] if quiet else []
    if more:
        parts.append(f"{more} more changed layer row(s) not shown (--format json lists all)")
    return changed[:top], "; ".join(parts)


def _finding_cost(f: FindingDelta, arrow: str = "->") -> str:
    b = fmt_ns(f.base_cost_ns) if f.base_cost_ns else "-"
    n = fmt_ns(f.new_cost_ns) if f.new_cost_ns else "-"
    return f"{b} {arrow} {n}"


# ------------------------------------------------------------------------------------------------
# text


def _metrics_table(diff: TraceDiff) -> Table:
    table = Table(title=f"Per-step figures ({_noise_rule(diff)})", title_justify="left")
    for col in ("figure", "where", "base", "new", "delta", "delta %", "noise threshold", "verdict"):
        table.add_column(col, justify="left" if col in ("figure", "where", "verdict") else "right")
    for m in diff.metrics:
        c = m.change
        table.add_row(METRICS[m.metric][2], _where(m.rank, m.device), _value(c.base, m.unit), _value(c.new, m.unit),
                      _delta(c, m.unit), _delta_pct(c, m.unit), _threshold(c, m.unit), _styled_status(c))
    return table


def _kernels_table(rows: list[KernelDelta]) -> Table:
    table = Table(title="Kernels: GPU time per step (changed, appeared, vanished, renamed)", title_justify="left")
    for col in ("kernel", "where", "match", "base", "new", "delta", "delta %", "threshold", "verdict"):
        table.add_column(col, overflow="fold", justify="left" if col in ("kernel", "where", "match", "verdict")
                         else "right")
    for k in rows:
        c = k.change
        table.add_row(_kernel_label(k), _where(k.rank, k.device), k.match, _value(c.base, "ns"), _value(c.new, "ns"),
                      _delta(c, "ns"), _delta_pct(c, "ns"), _threshold(c, "ns"), _styled_status(c))
    return table


def _findings_table(diff: TraceDiff) -> Table:
    table = Table(title="Findings by code and rank", title_justify="left")
    for col in ("status", "finding", "where", "severity", "cost / step"):
        table.add_column(col, overflow="fold")
    for f in diff.findings:
        sev = f"{f.base_severity or '-'} -> {f.new_severity or '-'}"
        ref = _finding_ref(f)
        table.add_row(f"[{_STATUS_STYLE.get(f.status, 'dim')}]{f.status}[/]",
                      f"{f.title}\n[dim]{f.code}{'  ' + ref if ref else ''}[/dim]", _where(f.rank, None), sev,
                      _finding_cost(f))
    return table


def _path_text(diff: TraceDiff, console: Console, top: int) -> None:
    if not diff.critical_path:
        return
    shown, others = _path_ranks(diff, top)
    headline = _path_headline(diff)
    if shown:
        table = Table(title=_PATH_TITLE, title_justify="left")
        for col in _PATH_HEAD:
            table.add_column(col, justify="left" if col in ("figure", "where", "verdict") else "right")
        for p in shown:
            for cells, change in _path_rows(p):
                status = _styled_status(change) if change is not None else \
                    (f"[yellow]{cells[-1]}[/]" if p.bound_changed else cells[-1])
                table.add_row(*cells[:7], status)
        console.print(table)
    for line in (headline, others):
        if line:
            console.print(f"  {line}", highlight=False)


def _layers_text(diff: TraceDiff, console: Console, top: int) -> None:
    if not diff.layers:
        return
    shown, others = _layer_rows(diff, top)
    if shown:
        table = Table(title=_LAYER_TITLE, title_justify="left")
        for col in _LAYER_HEAD:
            table.add_column(col, overflow="fold", justify="left" if col in ("layer (type path)", "where", "verdict")
                             else "right")
        for x in shown:
            table.add_row(*_layer_cells(x), _styled_status(x.change))
        console.print(table)
    else:
        console.print(f"Layers: all {len(diff.layers)} layer rows are within noise or unchanged.", highlight=False)
    if others and shown:
        console.print(f"  {others}", style="dim", highlight=False)


_MEASURED_TITLE = "Measured kernels (Nsight Compute, --ncu / --base-ncu): shown, not judged"
_MEASURED_HEAD = ("kernel", "grid x block", "where", "bound by", "SM %", "memory %", "occupancy %", "DRAM")


def _pair(b: float | None, n: float | None, fmt: Callable[[float], str]) -> str:
    return f"{'-' if b is None else fmt(b)} -> {'-' if n is None else fmt(n)}"


def _measured_cells(m: MeasuredDelta) -> list[str]:
    pct = "{:.1f}".format
    return [m.name, f"{m.grid} x {m.block}", f"rank {m.rank}",
            f"{m.base_bound_by or '-'} -> {m.new_bound_by or '-'}",
            _pair(m.base["sm_throughput_pct"], m.new["sm_throughput_pct"], pct),
            _pair(m.base["memory_throughput_pct"], m.new["memory_throughput_pct"], pct),
            _pair(m.base["achieved_occupancy_pct"], m.new["achieved_occupancy_pct"], pct),
            _pair(m.base["dram_bytes"], m.new["dram_bytes"], lambda v: fmt_bytes(int(v)))]


def _measured_text(diff: TraceDiff, console: Console, top: int) -> None:
    changed = [m for m in diff.measured if m.changed][:top]
    if not diff.measured:
        return
    if not changed:
        console.print(f"Measured kernels: all {len(diff.measured)} unchanged.", highlight=False)
        return
    table = Table(title=_MEASURED_TITLE, title_justify="left")
    for col in _MEASURED_HEAD:
        table.add_column(col, overflow="fold", justify="left" if col in ("kernel", "grid x block", "where",
                                                                         "bound by") else "right")
    for m in changed:
        table.add_row(*_measured_cells(m))
    console.print(table)


def _md_measured(diff: TraceDiff, top: int) -> list[str]:
    if not diff.measured:
        return []
    changed = [m for m in diff.measured if m.changed][:top]
    out = ["### Measured kernels", "", f"_{_md(_MEASURED_TITLE)}_", ""]
    if not changed:
        return out + [f"All {len(diff.measured)} measured kernel groups unchanged.", ""]
    rows = [[_md_code(c[0])] + [_md(x) for x in c[1:]] for c in map(_measured_cells, changed)]
    return out + _md_table(_MEASURED_HEAD, rows, 4) + [""]


def _efficiency_text(diff: TraceDiff, console: Console, top: int) -> None:
    if not diff.op_types:
        console.print("Efficiency: no modelled op types in either trace.", highlight=False)
    else:
        table = Table(title=_EFFICIENCY_TITLE, title_justify="left")
        for col in _OP_TYPE_HEAD:
            table.add_column(col, overflow="fold", justify="left" if col in ("op type", "where", "dtype") else "right")
        for o in diff.op_types[:top]:
            table.add_row(*_op_type_cells(o))
        console.print(table)
        if len(diff.op_types) > top:
            console.print(f"  {len(diff.op_types) - top} more op types (--format json lists all)", style="dim",
                          highlight=False)
    if diff.efficiency:
        table = Table(title="Efficiency coverage (modelled share of op-linked kernel time) and HFU, whole trace",
                      title_justify="left")
        for col in _OVERALL_HEAD:
            table.add_column(col, justify="left" if col == "where" else "right")
        for e in diff.efficiency:
            table.add_row(*_overall_cells(e))
        console.print(table)


def render_text(diff: TraceDiff, console: Console, top: int = DEFAULT_TOP) -> None:
    """The diff as rich tables on ``console``."""
    console.print(f"[bold]traceview diff[/bold]: {_side(diff.base)} -> {_side(diff.new)}", highlight=False,
                  soft_wrap=True)
    console.print(f"Verdict: [{_VERDICT_STYLE.get(diff.verdict(), 'green')}]{_headline(diff)}[/]", highlight=False)
    console.print(_metrics_table(diff))
    _path_text(diff, console, top)
    _layers_text(diff, console, top)
    _measured_text(diff, console, top)
    rows, quiet = _kernel_rows(diff, top)
    if rows:
        console.print(_kernels_table(rows))
        if quiet:
            console.print(f"  {quiet} more kernel rows are within noise or not shown (--format json lists all)",
                          style="dim", highlight=False)
    else:
        console.print(f"Kernels: all {len(diff.kernels)} kernel rows are within noise or unchanged.", highlight=False)
    if diff.findings:
        console.print(_findings_table(diff))
    else:
        console.print("Findings: none in either trace.")
    _efficiency_text(diff, console, top)
    for note in diff.notes:
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False)


def to_text(diff: TraceDiff, top: int = DEFAULT_TOP, width: int = TEXT_WIDTH) -> str:
    """The text rendering as a plain string (no colour), e.g. for ``-o FILE``."""
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None, force_terminal=False)
    render_text(diff, console, top=top)
    return console.export_text()


# ------------------------------------------------------------------------------------------------
# Markdown


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_code(text: str) -> str:
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`"


def _md_metrics(diff: TraceDiff) -> list[str]:
    out = ["### Per-step figures", "", f"_{_md(_noise_rule(diff))}_", "",
           "| figure | where | base | new | delta | delta % | noise threshold | verdict |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for m in diff.metrics:
        c = m.change
        verdict = f"**{_status(c)}**" if c.status in ("worse", "better") else _status(c)
        out.append(f"| {METRICS[m.metric][2]} | {_where(m.rank, m.device)} | {_value(c.base, m.unit)} | "
                   f"{_value(c.new, m.unit)} | {_delta(c, m.unit)} | {_delta_pct(c, m.unit)} | "
                   f"{_threshold(c, m.unit)} | {verdict} |")
    return out + [""]


def _md_critical_path(diff: TraceDiff, top: int) -> list[str]:
    if not diff.critical_path:
        return []
    shown, others = _path_ranks(diff, top)
    out = ["### Critical path", "", f"_{_md(_PATH_TITLE)}_", ""]
    out += [f"{_md(line)}." for line in (_path_headline(diff), others) if line] + [""]
    if not shown:
        return out
    rows = []
    for p in shown:
        for cells, change in _path_rows(p):
            status = cells[-1] if change is None else _status(change)
            if (change is None and p.bound_changed) or (change is not None and change.status in ("worse", "better")):
                status = f"**{status}**"
            rows.append([_md(x) for x in cells[:7]] + [status])
    return out + _md_table(_PATH_HEAD, rows, 2) + [""]


def _md_layers(diff: TraceDiff, top: int) -> list[str]:
    if not diff.layers:
        return []
    shown, others = _layer_rows(diff, top)
    out = ["### Layers", "", f"_{_md(_LAYER_TITLE)}_", ""]
    if not shown:
        return out + [f"All {len(diff.layers)} layer rows are within noise or unchanged.", ""]
    rows = []
    for x in shown:
        cells = _layer_cells(x)
        status = _status(x.change)
        rows.append([_md_code(cells[0])] + [_md(c) for c in cells[1:]]
                    + [f"**{status}**" if x.change.status in ("worse", "better") else status])
    out += _md_table(_LAYER_HEAD, rows, 2) + [""]
    return out + ([f"{_md(others)}.", ""] if others else [])


def _md_kernels(diff: TraceDiff, top: int) -> list[str]:
    rows, quiet = _kernel_rows(diff, top)
    out = ["### Kernels", ""]
    if not rows:
        return out + [f"All {len(diff.kernels)} kernel rows are within noise or unchanged.", ""]
    out += ["| kernel | where | match | base | new | delta | delta % | verdict |",
            "|---|---|---|---:|---:|---:|---:|---|"]
    for k in rows:
        c = k.change
        out.append(f"| {_md_code(_kernel_label(k))} | {_where(k.rank, k.device)} | {k.match} | "
                   f"{_value(c.base, 'ns')} | {_value(c.new, 'ns')} | {_delta(c, 'ns')} | {_delta_pct(c, 'ns')} | "
                   f"{_status(c)} |")
    out.append("")
    if quiet:
        out.append(f"{quiet} more kernel rows are within noise or not shown (`--format json` lists all).")
    return out + [""]


def _md_findings(diff: TraceDiff) -> list[str]:
    out = ["### Findings", ""]
    if not diff.findings:
        return out + ["No findings in either trace."]
    out += ["| status | finding | code | where | severity | cost / step |", "|---|---|---|---|---|---|"]
    for f in diff.findings:
        status = f"**{f.status}**" if f.status in ("new", "worse") else f.status
        ref = _finding_ref(f)
        title = f"{ref}: {f.title}" if ref else f.title
        out.append(f"| {status} | {_md(title)} | `{f.code}` | {_where(f.rank, None)} | "
                   f"{f.base_severity or '-'} → {f.new_severity or '-'} | {_md(_finding_cost(f, '→'))} |")
    return out


def _md_table(head: tuple[str, ...], rows: list[list[str]], right_from: int) -> list[str]:
    align = ["---" if i < right_from else "---:" for i in range(len(head))]
    return (["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
            + ["| " + " | ".join(row) + " |" for row in rows])  # cells already escaped


def _md_efficiency(diff: TraceDiff, top: int) -> list[str]:
    out = ["", "### Efficiency", ""]
    if not diff.op_types:
        out += ["No modelled op types in either trace.", ""]
    else:
        out += [f"_{_md(_EFFICIENCY_TITLE)}_", ""]
        rows = [[_md_code(c[0])] + [_md(x) for x in c[1:]] for c in map(_op_type_cells, diff.op_types[:top])]
        out += _md_table(_OP_TYPE_HEAD, rows, 3)
        if len(diff.op_types) > top:
            out += ["", f"{len(diff.op_types) - top} more op types (`--format json` lists all)."]
        out.append("")
    if diff.efficiency:
        out += ["Modelled share of the op-linked kernel time and HFU (whole trace):", ""]
        out += _md_table(_OVERALL_HEAD, [[_md(x) for x in _overall_cells(e)] for e in diff.efficiency], 1)
    return out


def to_markdown(diff: TraceDiff, top: int = DEFAULT_TOP) -> str:
    """The diff as GitHub-flavoured Markdown (PR comments, job summaries)."""
    icon = _VERDICT_ICON.get(diff.verdict(), "⚪")
    out = ["## traceview diff", "", f"**{_md(_side(diff.base))}** → **{_md(_side(diff.new))}**", "",
           f"**Verdict: {icon} {_md(_headline(diff))}**", ""]
    out += _md_metrics(diff) + _md_critical_path(diff, top) + _md_layers(diff, top) + _md_measured(diff, top)
    out += _md_kernels(diff, top)
    out += _md_findings(diff)
    out += _md_efficiency(diff, top)
    if diff.notes:
        out.append("")
        out += [f"> **Note:** {_md(note)}" for note in diff.notes]
    out.append("")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------
# JSON and dispatch


def to_json(diff: TraceDiff) -> str:
    return json.dumps(diff.to_dict(), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def render(diff: TraceDiff, fmt: str, top: int = DEFAULT_TOP) -> str:
    """``text`` (plain), ``markdown`` or ``json`` as a string."""
    if fmt == "json":
        return to_json(diff)
    if fmt == "markdown":
        return to_markdown(diff, top=top)
    return to_text(diff, top=top)


# ------------------------------------------------------------------------------------------------
# check


def _check_where(r: Any) -> str:
    return " ".join(x for x in (f"rank {r.rank}" if r.rank is not None else "",
                                f"GPU {r.device}" if r.device is not None else "") if x) or "-"


def render_check_text(check: CheckReport, console: Console) -> None:
    """The check as a table (per rule, its worst result), its notes, each violation on one ``FAIL``
    line and the verdict (``PASSED``/``FAILED``)."""
    title = f"traceview check {check.path}" + (f" against {check.baseline}" if check.baseline else "")
    table = Table(title=title, title_justify="left")
    for col in ("rule", "limit", "measured", "where", "result", "detail"):
        table.add_column(col, overflow="fold")
    for r in check.worst():
        failing = sum(1 for x in check.results if x.rule == r.rule and not x.passed)
        total = sum(1 for x in check.results if x.rule == r.rule)
        result = "[red]FAIL[/red]" if not r.passed else "[green]ok[/green]"
        if total > 1:
            result += f" ({failing}/{total} failing)" if failing else f" ({total} checked)"
        op = ">=" if RULES[r.rule].kind == "min" else "<="
        table.add_row(r.rule, f"{op} {r.limit}", r.measured, _check_where(r), result, r.detail)
    console.print(table)
    for note in check.notes:
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    violations = check.violations
    if not violations:
        console.print(f"[green]PASSED[/green]: {len(check.rules)} rules hold", highlight=False)
        return
    for v in violations:
        console.print(f"FAIL {v.line()}", highlight=False, soft_wrap=True)
    rules = sorted({v.rule for v in violations})
    console.print(f"[red]FAILED[/red]: {len(rules)} of {len(check.rules)} rules violated ({', '.join(rules)})",
                  highlight=False)
