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
from typing import Any

from traceview.render.terminal import (
    finding_cost,
    finding_where,
    fmt_bytes,
    fmt_ns,
    format_cell,
    headline_rows,
    visible_columns,
)
from traceview.report import findings_tree

#: rows per table in the Markdown report (the JSON report has more)
MD_TABLE_ROWS = 10
#: the tables shown per analysis, in order (the others are in the JSON/HTML reports)
MD_TABLES = {
    "temporal": ["breakdown"],
    "idle_gaps": ["by_cause", "largest", "cpu_contexts"],
    "launch_overhead": ["by_api", "tiny_kernel_ops", "steps"],
    "communication": ["summary", "collectives", "stragglers", "compute_imbalance"],
    "kernels": ["top_kernels", "categories", "tiny_kernels"],
    "synchronization": ["sync_summary", "copies", "by_cpu_op"],
}
ANALYSIS_TITLES = {
    "temporal": "Temporal breakdown",
    "idle_gaps": "Idle gaps",
    "launch_overhead": "Launch overhead",
    "communication": "Communication",
    "kernels": "Kernels",
    "synchronization": "Synchronisation and copies",
}
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
    return f"<details{' open' if open_ else ''}>\n<summary>{html_escape(summary)}</summary>\n\n{body.strip()}\n\n</details>"


def report_table(table: dict[str, Any], *, max_rows: int = MD_TABLE_ROWS) -> str:
    cols = visible_columns(table["columns"])
    rows = table["rows"][:max_rows]
    numeric = {c: all(isinstance(r.get(c), (int, float)) or r.get(c) is None for r in rows) and rows for c in cols}
    align = ["---:" if numeric[c] else "---" for c in cols]
    body = [[md_escape(format_cell(c, r.get(c))) for c in cols] for r in rows]
    text = md_table([md_escape(c) for c in cols], body, align)
    total = table["total_rows"]
    if total > len(rows):
        order = f", largest {table['sorted_by']} first" if table.get("sorted_by") else ""
        text += f"\n\n_{len(rows)} of {total:,} rows{md_escape(order)}; the JSON report has more._"
    return text


def _evidence_lines(evidence: dict[str, Any]) -> list[str]:
    lines = []
    for key, value in evidence.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            cols = list(dict.fromkeys(k for v in value for k in v))
            lines.append(f"- {md_escape(key)}:\n")
            body = [[md_escape(format_cell(c, v.get(c))) for c in cols] for v in value[:MD_TABLE_ROWS]]
            lines.append(md_table([md_escape(c) for c in cols], body) + "\n")
        else:
            lines.append(f"- {md_escape(key)}: {md_escape(format_cell(key, value))}")
    return lines


def _findings(report: dict[str, Any]) -> str:
    tree = findings_tree(report)
    if not tree:
        return "No findings: nothing here costs a noticeable share of the step time."
    rows = []
    evidence = []
    for i, (parent, kids) in enumerate(tree, start=1):
        for j, f in enumerate((parent, *kids)):
            label = str(i) if j == 0 else f"{i}.{j}"
            title = f"**{md_escape(f['title'])}**<br>`{f['code']}`" if j == 0 else (
                f"↳ {md_escape(f['title'])}<br>`{f['code']}`, part of \\#{i}: its cost is included there")
            rows.append([label, SEVERITY_MARK.get(f["severity"], f["severity"]), title,
                         md_escape(finding_where(f)), md_escape(finding_cost(f)), md_escape(f["recommendation"])])
            if f.get("evidence"):
                evidence.append(f"**{label}. {md_escape(f['title'])}**\n\n" + "\n".join(_evidence_lines(f["evidence"])))
    text = md_table(["#", "severity", "finding", "where", "cost / step", "recommendation"], rows,
                    ["---:", "---", "---", "---", "---:", "---"])
    if evidence:
        text += "\n\n" + details("Evidence for each finding", "\n\n".join(evidence))
    return text


def _warnings_for(report: dict[str, Any], scope: str) -> list[str]:
    return [w["message"] for w in report.get("warnings", []) if w["scope"] == scope]


def _environment(report: dict[str, Any]) -> str:
    env = report.get("environment") or {}
    rows = []
    for g in env.get("gpus") or []:
        spec = ", ".join(x for x in (
            f"{g['sm_count']} SMs" if g.get("sm_count") else "",
            fmt_bytes(g["memory_bytes"]) if g.get("memory_bytes") else "",
            f"compute capability {g['compute_capability']}" if g.get("compute_capability") else "",
        ) if x)
        rows.append(["GPU", md_escape(f"{g['count']} × {g.get('model') or 'unnamed GPU'}" + (f" ({spec})" if spec else ""))])
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


def _ranks(report: dict[str, Any]) -> str:
    rows = []
    for r in report.get("ranks", []):
        gpus = ", ".join(f"{g['device']}" for g in r["gpus"]) or "-"
        util = ", ".join(format_cell("utilization", b["utilization"]) for b in r["breakdown"]) or "-"
        unmapped = sum(r["unmapped"].values()) if r.get("unmapped") else 0
        rows.append([str(r["rank"]), md_escape(r["file"]), md_escape(f"{r['format']} {r.get('format_version') or ''}".strip()),
                     md_escape(r.get("rank_source") or "-"), md_escape(gpus), f"{r['events']:,}", str(r["steps"]),
                     md_escape(fmt_ns(r["span_ns"])), md_escape(util), f"{unmapped:,}" if unmapped else "-"])
    return md_table(["rank", "file", "format", "rank from", "GPUs", "events", "steps", "span", "utilization",
                     "unmapped events"], rows, ["---:", "---", "---", "---", "---", "---:", "---:", "---:", "---:", "---:"])


def render_markdown(report: dict[str, Any]) -> str:
    """The report as GitHub-flavoured Markdown."""
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
    out.append("### Summary\n\n" + md_table(
        ["", "", "note"],
        [[f"**{md_escape(label)}**", md_escape(value), ("⚠️ " + md_escape(note)) if note else ""]
         for label, value, note in headline_rows(report)],
    ))
    trust = [w for w in report.get("warnings", []) if w["scope"] == "trace" or w["scope"].startswith("rank ")]
    if trust:
        body = "\n".join(f"- **{md_escape(w['scope'])}**: {md_escape(w['message'])}" for w in trust)
        out.append("### Trust warnings\n\n" + body if len(trust) <= 5 else
                   "### Trust warnings\n\n" + details(f"{len(trust)} warnings about the input", body, open_=True))
    out.append("### Findings, most costly first\n\n" + _findings(report))
    out.append("### Details")
    for name, analysis in report.get("analyses", {}).items():
        parts = []
        for w in analysis.get("warnings", []):
            parts.append(f"> ⚠️ {md_escape(w)}")
        for tname in MD_TABLES.get(name, list(analysis["tables"])[:3]):
            table = analysis["tables"].get(tname)
            if table is None or not table["rows"]:
                continue
            parts.append(f"**{md_escape(table['title'])}**\n\n" + report_table(table))
        if not parts:
            continue
        title = ANALYSIS_TITLES.get(name, name)
        n = analysis.get("findings", 0)
        out.append(details(f"{title} ({n} finding{'s' if n != 1 else ''})", "\n\n".join(parts)))
    out.append("### Environment\n\n" + _environment(report))
    out.append(details(f"Ranks ({len(report.get('ranks', []))})", _ranks(report)))
    out.append(details("Report data (JSON summary)", "```json\n" + json.dumps(
        {"schema_version": report["schema_version"], "summary": report["summary"]}, indent=1, ensure_ascii=False)
        .replace("```", "'''") + "\n```"))
    return "\n\n".join(out) + "\n"
