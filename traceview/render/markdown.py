"""GitHub-flavoured Markdown report (for GitHub issues and internal bugs), from the report model.

Layout: a headline summary table; the ranked findings with cost and recommendation (nested
findings marked as part of their umbrella); trust warnings; compact tables per analysis, long
detail inside ``<details>`` blocks; the environment. Every string from the trace is escaped, so
kernel names such as ``void f<float>(float*)`` show as written and never become HTML or emphasis.
"""

from __future__ import annotations

import html
import json
import re
from typing import TYPE_CHECKING, Any, Mapping

from traceview.registry import ANALYSES, Renderer, register_renderer
from traceview.render.common import (
    cost_heading,
    nested_note,
    column_label,
    display_rows,
    finding_cost,
    finding_groups,
    finding_where,
    grouped_warnings,
    format_cell,
    headline_rows,
    input_warnings,
    unmapped_line,
)
from traceview.units import fmt_bytes, fmt_ns

if TYPE_CHECKING:
    from traceview.report import Report

# The Markdown report must fit a GitHub comment (65,536 characters) with room to spare: under 20 KB
# for the shared 8-rank job. The limits below are what is shown; the JSON report has everything.
#: rows per table in the Markdown report (the JSON report has more)
MD_TABLE_ROWS = 5
#: tables shown per analysis: its headline table (``AnalysisSpec.headline_table``) first, then its
#: other tables that are not one row per event, up to this many
MD_TABLES_PER_ANALYSIS = 1
#: rows of a list in a finding's evidence
MD_EVIDENCE_ROWS = 5
#: characters of a table cell or an evidence value (long kernel names, nested records)
MD_CELL_CHARS = 64
SEVERITY_MARK = {"high": "🔴 high", "medium": "🟠 medium", "low": "🟡 low", "info": "ℹ️ info"}

#: characters with inline meaning in GFM (escaped text never starts a line, so block markers such as
#: ``#`` and ``-`` are safe); ``$`` because GitHub renders ``$...$`` as math
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~$])")


def md_escape(text: Any) -> str:
    """Text safe in Markdown (also inside table cells): HTML escaped, punctuation backslashed, one line."""
    s = "" if text is None else str(text)
    s = s.replace("\r", " ").replace("\n", " ")
    s = html.escape(s, quote=False)  # & < >  (before the backslashes, which html.escape leaves alone)
    s = _MD_SPECIAL.sub(r"\\\1", s)
    return s


def html_escape(text: Any) -> str:
    """Text inside raw HTML (``<summary>``): entities only."""
    return html.escape("" if text is None else str(text), quote=True)


def md_table(headers: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    """A GFM table; cells must already be escaped."""
    align = align or ["---"] * len(headers)
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(c if c else " " for c in row) + " |")
    return "\n".join(lines)


def details(summary: str, body: str, *, open_: bool = False) -> str:
    """A ``<details>`` block whose body is Markdown (blank lines around it, as GitHub needs)."""
    head = f"<details{' open' if open_ else ''}>\n<summary>{html_escape(summary)}</summary>"
    return f"{head}\n\n{body.strip()}\n\n</details>"


def report_table(table: Mapping[str, Any], *, steps: int = 0, max_rows: int = MD_TABLE_ROWS) -> str:
    """A report table as GFM (see :func:`traceview.render.common.display_rows` for the rows shown)."""
    cols, all_rows = display_rows(table, steps)
    rows = all_rows[:max_rows]
    numeric = {c: all(isinstance(r.get(c), (int, float)) or r.get(c) is None for r in rows) and rows for c in cols}
    align = ["---:" if numeric[c] else "---" for c in cols]
    body = [[md_escape(clip(format_cell(c, r.get(c)))) for c in cols] for r in rows]
    text = md_table([md_escape(column_label(c, steps > 0)) for c in cols], body, align)
    total = table["total_rows"] if len(all_rows) == len(table["rows"]) else len(all_rows)
    if total > len(rows):
        order = f", largest {column_label(table['sorted_by'])} first" if table.get("sorted_by") else ""
        text += f"\n\n_{len(rows)} of {total:,} rows{md_escape(order)}; the JSON report has more._"
    return text


def clip(text: str, limit: int = MD_CELL_CHARS) -> str:
    """``text`` cut to ``limit`` characters (``…`` says so)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _evidence_lines(evidence: Mapping[str, Any], per_step: bool = True) -> list[str]:
    lines = []
    for key, value in evidence.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            cols = list(dict.fromkeys(k for v in value for k in v))
            more = f" (the first {MD_EVIDENCE_ROWS} of {len(value)})" if len(value) > MD_EVIDENCE_ROWS else ""
            lines.append(f"- {md_escape(key)}{more}:\n")
            body = [[md_escape(clip(format_cell(c, v.get(c)))) for c in cols] for v in value[:MD_EVIDENCE_ROWS]]
            lines.append(md_table([md_escape(column_label(c, per_step)) for c in cols], body) + "\n")
        else:
            label = key if per_step or not key.endswith("_per_step") else column_label(key, per_step)
            lines.append(f"- {md_escape(label)}: {md_escape(clip(format_cell(key, value), 2 * MD_CELL_CHARS))}")
    return lines


def _findings(report: Mapping[str, Any], max_findings: int | None = None) -> str:
    """The report's findings, in its order, with their ids (``F1``, nested ``F1.1``): at most
    ``max_findings`` top-level ones with the findings nested under them (a cut, never a re-rank);
    the evidence of the top-level ones shown, folded."""
    groups = finding_groups(report)
    if not groups:
        return "No findings: nothing here costs a noticeable share of the GPU time."
    shown = groups if max_findings is None else groups[:max_findings]
    rows = []
    evidence = []
    for f in (f for group in shown for f in group):
        fid = f["id"]
        title = f"**{md_escape(f['title'])}**<br>`{f['code']}`" if f.get("parent") is None else (
            f"↳ {md_escape(f['title'])}<br>`{f['code']}`, {nested_note(f)}")
        rows.append([fid, SEVERITY_MARK.get(f["severity"], f["severity"]), title,
                     md_escape(finding_where(f)), md_escape(finding_cost(f)), md_escape(f["recommendation"])])
        if f.get("evidence") and f.get("parent") is None:
            evidence.append(f"**{fid}. {md_escape(f['title'])}**\n\n" + "\n".join(
                _evidence_lines(f["evidence"], f.get("cost_basis") != "whole trace")))
    text = md_table(["id", "severity", "finding", "where", cost_heading(report), "recommendation"], rows,
                    ["---", "---", "---", "---", "---:", "---"])
    if len(shown) < len(groups):
        text += (f"\n\n_{len(groups) - len(shown)} more top-level findings are left out (--max-findings "
                 f"{max_findings}); the JSON report has them all._")
    if evidence:
        text += "\n\n" + details("Evidence for each finding", "\n\n".join(evidence))
    return text


def _environment(report: Mapping[str, Any]) -> str:
    env = report.get("environment") or {}
    rows = []
    for g in env.get("gpus") or []:
        spec = ", ".join(x for x in (
            f"{g['sm_count']} SMs" if g.get("sm_count") else "",
            fmt_bytes(g["memory_bytes"]) if g.get("memory_bytes") else "",
            f"compute capability {g['compute_capability']}" if g.get("compute_capability") else "",
        ) if x)
        gpu = f"{g['count']} × {g.get('model') or 'unnamed GPU'}" + (f" ({spec})" if spec else "")
        rows.append(["GPU", md_escape(gpu)])
    if env.get("world_size"):
        rows.append(["world size", md_escape(str(env["world_size"]))])
    if env.get("backend"):
        rows.append(["distributed backend", md_escape(env["backend"])])
    for name, v in (env.get("versions") or {}).items():
        rows.append([md_escape(name.replace("_", " ")), md_escape(f"{v['value']} (from {v['source']})")])
    if env.get("profiler"):
        rows.append(["profiler settings", md_escape(", ".join(f"{k}={v}" for k, v in env["profiler"].items()))])
    for f in env.get("trace_formats") or []:
        rows.append(["trace format", md_escape(f)])
    if not rows:
        return "The trace records nothing about its environment."
    return md_table(["", ""], rows)


def _ranks(report: Mapping[str, Any]) -> str:
    rows = []
    for r in report.get("ranks", []):
        gpus = ", ".join(f"{g['device']}" for g in r["gpus"]) or "-"
        util = ", ".join(format_cell("utilization", b["utilization"]) for b in r["breakdown"]) or "-"
        unmapped = sum(r["unmapped"].values()) if r.get("unmapped") else 0
        fmt = f"{r['format']} {r.get('format_version') or ''}".strip()
        rows.append([str(r["rank"]), md_escape(r["file"]), md_escape(fmt),
                     md_escape(r.get("rank_source") or "-"), md_escape(gpus), f"{r['events']:,}", str(r["steps"]),
                     md_escape(fmt_ns(r["span_ns"])), md_escape(util), f"{unmapped:,}" if unmapped else "-"])
    return md_table(["rank", "file", "format", "rank from", "GPUs", "events", "steps", "span", "utilization",
                     "unmapped events"], rows, ["---:"] + ["---"] * 4 + ["---:"] * 5)


def analysis_tables(name: str, analysis: Mapping[str, Any], limit: int = MD_TABLES_PER_ANALYSIS) -> list[str]:
    """The tables a summary shows of an analysis: its declared headline table first, then its other
    tables that are not one row per event (those are in the JSON and HTML reports)."""
    spec = ANALYSES.get(name)
    tables = analysis.get("tables") or {}
    names = [t for t in tables if tables[t]["rows"]]
    if spec is not None:
        names = [t for t in names if not spec.table(t).per_event or t == spec.headline_table]
        if spec.headline_table in names:
            names.remove(spec.headline_table)
            names.insert(0, spec.headline_table)
    return names[:limit]


def _trust(report: Mapping[str, Any]) -> str | None:
    """The warnings about the inputs (unmapped categories once, only when they are many)."""
    lines = [f"- **{md_escape(w['scope'])}**: {md_escape(w['message'])}" for w in input_warnings(report)]
    unmapped = unmapped_line(report)
    if unmapped:
        lines.append(f"- **unmapped events**: {md_escape(unmapped)}")
    if not lines:
        return None
    body = "\n".join(lines)
    return body if len(lines) <= 5 else details(f"{len(lines)} warnings about the input", body, open_=True)


def _details(report: Mapping[str, Any]) -> list[str]:
    """Per analysis, a ``<details>`` block with its warnings and tables."""
    out = []
    steps = int(report["summary"].get("steps") or 0)
    for name, analysis in report.get("analyses", {}).items():
        parts = [f"> ⚠️ {md_escape(w)}" for w in grouped_warnings(analysis.get("warnings", []))]
        shown = analysis_tables(name, analysis)
        for tname in shown:
            table = analysis["tables"][tname]
            parts.append(f"**{md_escape(table['title'])}**\n\n" + report_table(table, steps=steps))
        others = [t for t in (analysis.get("tables") or {}).values() if t["rows"] and t not in
                  [analysis["tables"][n] for n in shown]]
        if others:  # named, so a reader knows what the JSON and HTML reports hold
            parts.append("_Also in the JSON and HTML reports: " + "; ".join(
                f"{md_escape(t['title'])} ({t['total_rows']:,} rows)" for t in others) + "._")
        if not parts:
            continue
        n = analysis.get("findings", 0)
        out.append(details(f"{analysis.get('title') or name} ({n} finding{'s' if n != 1 else ''})",
                           "\n\n".join(parts)))
    return out


def _summary_table(report: Mapping[str, Any]) -> str:
    """The headline as a table; the trust-note column only when some figure carries a note (an
    always-empty column reads as a rendering bug)."""
    rows = headline_rows(report)
    with_notes = any(note for _, _, note in rows)
    cells = [[f"**{md_escape(label)}**", md_escape(value)]
             + ([("⚠️ " + md_escape(note)) if note else ""] if with_notes else [])
             for label, value, note in rows]
    return md_table(["", "", "trust note"] if with_notes else ["", ""], cells)


def render_markdown(report: Mapping[str, Any], *, max_findings: int | None = None) -> str:
    """The report as GitHub-flavoured Markdown (``max_findings``: list at most this many top-level
    findings)."""
    out: list[str] = []
    names = list(dict.fromkeys(i["file"] for i in report.get("inputs", [])))
    # code spans show their content literally (no escapes apply inside them)
    files = ", ".join(f"`{name}`" if "`" not in name and "\n" not in name else md_escape(name) for name in names[:8])
    more = len(names) - 8
    if more > 0:
        files += f" and {more} more"
    gen = report["generator"]
    out.append(f"## traceview report\n\n{files}  \n_{gen['name']} {gen['version']}, report schema "
               f"{report['schema_version']}_")
    out.append("### Summary\n\n" + _summary_table(report))
    trust = _trust(report)
    if trust:
        out.append("### Trust warnings\n\n" + trust)
    out.append("### Findings, most costly first\n\n" + _findings(report, max_findings))
    out.append("### Details")
    out.extend(_details(report))
    out.append("### Environment\n\n" + _environment(report))
    out.append(details(f"Ranks ({len(report.get('ranks', []))})", _ranks(report)))
    fence = "`" * 3
    out.append(details("Report data (JSON summary)", f"{fence}json\n" + json.dumps(
        {"schema_version": report["schema_version"], "summary": report["summary"]}, indent=None, ensure_ascii=False,
        separators=(",", ":"))
        .replace(fence, "'" * 3) + f"\n{fence}"))
    return "\n\n".join(out) + "\n"


@register_renderer
class MarkdownRenderer(Renderer):
    """GitHub-flavoured Markdown, for issues and internal bugs."""

    name = "markdown"
    output_file_extension = ".md"
    description = "GitHub-flavoured Markdown for issues and bugs (tables and <details> blocks)"

    def render(self, report: "Report") -> str:
        return render_markdown(report, max_findings=self.options.get("max_findings"))
