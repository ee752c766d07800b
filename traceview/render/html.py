"""One HTML report, from the report model, small enough to attach (under 1.5 MB for the shared
8-rank job with the default ``plotlyjs="cdn"``).

The first screen answers: the summary, the top findings and the breakdown chart; everything else
(the other findings, the other charts, every analysis's tables, the environment and the ranks) is
folded in ``<details>``; a folded chart is drawn when it is first opened. plotly.js is either
loaded from its CDN, pinned to the version plotly.py bundles (``cdn``, the default: the page is
~4.8 MB smaller and every number still reads offline, only the charts need the network), or inlined
(``inline``: the page opens with charts on an air-gapped machine; a Content-Security-Policy forbids
any request). The report model is not embedded unless asked (``embed_json``): the charts carry only
the data they draw. Every string from the trace is escaped (kernel names contain ``<`` and ``>``;
figure JSON inside ``<script>`` has ``<``, ``>`` and ``&`` written as ``\\u003c``, ``\\u003e``,
``\\u0026`` so no name can close the script). plotly is imported when a page is rendered, not with
this module (``traceview.render`` imports every renderer).
"""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any, Mapping

from traceview.errors import TraceviewError
from traceview.model import Trace
from traceview.registry import Renderer, register_renderer
from traceview.render.common import (
    cost_heading,
    nested_note,
    column_label,
    display_rows,
    finding_cost,
    finding_groups,
    finding_where,
    format_cell,
    headline_rows,
    input_warnings,
    unmapped_line,
)
from traceview.report import report_to_json
from traceview.units import fmt_bytes, fmt_ns

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from traceview.report import Report

#: shown where the timeline would be when the report has no trace in memory (computed by a job)
NO_TRACE_NOTE = ("The timeline around the largest idle gap draws the trace's own events: this report was computed "
                 "rank by rank (--workers/--scheduler) without the trace in memory, so it is left out. Analyze "
                 "in one process (no --workers) to include it.")

#: figure captions and the analysis whose warnings are shown next to each
FIGURES = {
    "breakdown": ("Where GPU time goes", "temporal",
                  "Per rank and GPU over the whole trace. The four parts add up to the GPU window (first activity "
                  "start to last activity end): compute kernels, communication not overlapped with compute, memory "
                  "copies/sets running alone, and idle."),
    "overlap": ("Communication overlap", "communication",
                "Communication kernel time split into the part that ran under compute and the exposed part."),
    "gap_histogram": ("Idle gaps", "idle_gaps",
                      "Idle time in gaps of each length, by cause (docs/metrics.md: host-bound, sync-bound, launch "
                      "latency, unattributed)."),
    "timeline": ("Timeline around the largest idle gap", "idle_gaps",
                 "GPU streams and the busiest CPU threads of one rank; idle gaps are shaded and labelled with "
                 "their cause. Hover for names."),
    "launch_scatter": ("Launch overhead", "launch_overhead",
                       "Each point is one launch. Left: points below the dashed line are kernels shorter than their "
                       "launch call (the host cannot keep the GPU busy). Right: a long launch delay means a deep "
                       "queue (the GPU is the bottleneck), not overhead."),
    "skew_heatmap": ("Cross-rank skew", "communication",
                     "When each rank reached each collective, relative to the first rank: a row that is dark "
                     "everywhere is a straggler."),
}

_CSS = """
body{font-family:Helvetica,Arial,sans-serif;margin:0;color:#222;background:#fafafa}
main{max-width:1400px;margin:0 auto;padding:16px 24px 60px}
h1{font-size:24px;margin:12px 0 4px}
h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}
.meta{color:#666;font-size:13px}
table{border-collapse:collapse;font-size:13px;margin:6px 0 10px;background:#fff}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.warn{background:#fff7e0;border-left:4px solid #f0b400;padding:6px 10px;margin:6px 0;font-size:13px}
.sev{display:inline-block;border-radius:3px;padding:1px 6px;color:#fff;font-size:12px;font-weight:bold}
.sev-high{background:#c62828}.sev-medium{background:#ef6c00}.sev-low{background:#9e9d24}.sev-info{background:#78909c}
tr.nested td{background:#f7f7f7} tr.nested td.title{padding-left:28px}
.code{font-family:Menlo,Consolas,monospace;font-size:12px;color:#555}
.figure{background:#fff;border:1px solid #e3e3e3;margin:10px 0 18px;padding:6px}
.caption{font-size:13px;color:#555;margin:4px 6px}
details{margin:6px 0} summary{cursor:pointer;font-weight:bold;font-size:14px}
details.section>summary h2{display:inline-block;border:0;margin:18px 0 6px}
details.figure>summary{font-size:15px;padding:4px 0}
.first{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start} .first>div{flex:1 1 520px;min-width:0}
.noplot{color:#8a6d00;font-size:13px;padding:8px}
pre{background:#f4f4f4;padding:8px;overflow:auto;font-size:12px}
.name{max-width:640px;word-break:break-all}
"""

_CONFIG = {"responsive": True, "displaylogo": False, "showLink": False, "showSendToCloud": False,
           "showEditInChartStudio": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


def esc(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def script_json(obj: Any) -> str:
    """JSON that is safe inside ``<script>``: no ``<``, ``>``, ``&`` characters at all."""
    text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _table(table: Mapping[str, Any], *, steps: int = 0, max_rows: int | None = None, per_step: bool | None = None
           ) -> str:
    """``per_step``: whether ``*_per_step`` columns are per step (default: ``steps`` > 0)."""
    cols, all_rows = display_rows(table, steps)
    rows = all_rows if max_rows is None else all_rows[:max_rows]
    if not rows:
        return '<p class="meta">(no rows)</p>'
    per = steps > 0 if per_step is None else per_step
    out = ["<table><thead><tr>" + "".join(f"<th>{esc(column_label(c, per))}</th>" for c in cols)
           + "</tr></thead><tbody>"]
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            cls = ' class="num"' if isinstance(v, (int, float)) and not isinstance(v, bool) else (
                ' class="name"' if isinstance(v, str) and len(v) > 60 else "")
            cells.append(f"<td{cls}>{esc(format_cell(c, v))}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    total = table.get("total_rows", len(rows)) if len(all_rows) == len(table["rows"]) else len(all_rows)
    if total > len(rows):
        order = f", largest {column_label(table['sorted_by'])} first" if table.get("sorted_by") else ""
        out.append(f'<p class="meta">{len(rows)} of {total:,} rows{esc(order)}; the JSON report '
                   "(--format json) has the report's rows, the Python API all of them.</p>")
    return "".join(out)


def _kv_table(rows: list[tuple[str, str, str]]) -> str:
    out = ["<table><tbody>"]
    for label, value, note in rows:
        note_html = f'<div class="warn">{esc(note)}</div>' if note else ""
        out.append(f"<tr><th>{esc(label)}</th><td>{esc(value)}{note_html}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _evidence(evidence: Mapping[str, Any], per_step: bool = True) -> str:
    def is_records(v: Any) -> bool:
        return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)

    scalars = [(k, v) for k, v in evidence.items() if not is_records(v)]
    lists = [(k, v) for k, v in evidence.items() if is_records(v)]
    out = []
    if scalars:
        out.append("<table><tbody>" + "".join(
            f"<tr><th>{esc(k if per_step or not k.endswith('_per_step') else column_label(k, per_step))}</th>"
            f"<td>{esc(format_cell(k, v))}</td></tr>" for k, v in scalars) + "</tbody></table>")
    for k, v in lists:
        cols = list(dict.fromkeys(c for x in v for c in x))
        out.append(f"<h3>{esc(k)}</h3>" + _table({"columns": cols, "rows": v, "total_rows": len(v)}, steps=2,
                                                 per_step=per_step))
    return "".join(out)


def _finding_row(f: Mapping[str, Any], nested_rows: str = "") -> str:
    """One finding's row (``id="finding-F1"``); ``nested_rows``: its nested findings' rows, folded
    in its title cell so the first screen lists the top-level findings only."""
    nested = f.get("parent") is not None
    part = f'<div class="meta">{esc(nested_note(f))}</div>' if nested else ""
    shown = _evidence(f["evidence"], f.get("cost_basis") != "whole trace") if f.get("evidence") else ""
    evidence = f"<details><summary>evidence</summary>{shown}</details>" if f.get("evidence") else ""
    if nested_rows:
        count = nested_rows.count("<tr class=nested")
        evidence += (f"<details class=nested-findings><summary>{count} nested finding{'s' if count != 1 else ''} "
                     f"(their time is part of this one)</summary><table><tbody>{nested_rows}</tbody></table></details>")
    return (f'<tr{" class=nested" if nested else ""} id="finding-{esc(f["id"])}"><td class="fid">{esc(f["id"])}</td>'
            f'<td><span class="sev sev-{esc(f["severity"])}">{esc(f["severity"])}</span></td>'
            f'<td class="title">{"↳ " if nested else ""}{esc(f["title"])}<div class="code">{esc(f["code"])}</div>'
            f"{part}{evidence}</td><td>{esc(finding_where(f))}</td><td class=num>{esc(finding_cost(f))}</td>"
            f"<td>{esc(f['recommendation'])}</td></tr>")


def _finding_rows(report: Mapping[str, Any], groups: list[list[dict[str, Any]]]) -> str:
    """A findings table, in the report's order: each top-level finding with its nested ones folded in it."""
    out = ["<table><thead><tr><th>id</th><th>severity</th><th>finding</th><th>where</th>"
           f"<th>{esc(cost_heading(report))}</th><th>recommendation</th></tr></thead><tbody>"]
    for group in groups:
        out.append(_finding_row(group[0], "".join(_finding_row(f) for f in group[1:])))
    out.append("</tbody></table>")
    return "".join(out)


def _findings(report: Mapping[str, Any], *, first: int, max_findings: int | None) -> str:
    """The report's findings in its order: the ``first`` top-level ones (with the findings nested
    under them) on the first screen, the rest folded; ``max_findings`` top-level ones at most (the
    rest are counted, and are in the JSON report). Nothing is re-ranked: the lists are cuts."""
    groups = finding_groups(report)
    if not groups:
        return "<p>No findings: nothing here costs a noticeable share of the GPU time.</p>"
    shown = groups if max_findings is None else groups[:max_findings]
    out = [_finding_rows(report, shown[:first])]
    if len(shown) > first:
        out.append(f"<details><summary>{len(shown) - first} more findings</summary>"
                   f"{_finding_rows(report, shown[first:])}</details>")
    if len(shown) < len(groups):
        out.append(f'<p class="meta">{len(groups) - len(shown)} more top-level findings are left out '
                   f"(--max-findings {max_findings}); the JSON report (--format json) has them all.</p>")
    return "".join(out)


def _environment(report: Mapping[str, Any]) -> str:
    env = report.get("environment") or {}
    rows: list[tuple[str, str, str]] = []
    for g in env.get("gpus") or []:
        spec = ", ".join(x for x in (
            f"{g['sm_count']} SMs" if g.get("sm_count") else "",
            fmt_bytes(g["memory_bytes"]) if g.get("memory_bytes") else "",
            f"compute capability {g['compute_capability']}" if g.get("compute_capability") else "") if x)
        rows.append(("GPU", f"{g['count']} × {g.get('model') or 'unnamed GPU'}" + (f" ({spec})" if spec else ""), ""))
    if env.get("world_size"):
        rows.append(("world size", str(env["world_size"]), ""))
    if env.get("backend"):
        rows.append(("distributed backend", str(env["backend"]), ""))
    for name, v in (env.get("versions") or {}).items():
        rows.append((name.replace("_", " "), f"{v['value']} (from {v['source']})", ""))
    if env.get("profiler"):
        rows.append(("profiler settings", ", ".join(f"{k}={v}" for k, v in env["profiler"].items()), ""))
    for f in env.get("trace_formats") or []:
        rows.append(("trace format", f, ""))
    return _kv_table(rows) if rows else "<p>The trace records nothing about its environment.</p>"


def _ranks(report: Mapping[str, Any]) -> str:
    rows = []
    for r in report.get("ranks", []):
        util = ", ".join(format_cell("utilization", b["utilization"]) for b in r["breakdown"]) or None
        rows.append({"rank": r["rank"], "file": r["file"],
                     "format": f"{r['format']} {r.get('format_version') or ''}".strip(),
                     "rank from": r.get("rank_source"), "GPUs": ", ".join(str(g["device"]) for g in r["gpus"]) or None,
                     "events": r["events"], "steps": r["steps"], "span": fmt_ns(r["span_ns"]), "GPU utilization": util,
                     "unmapped events": sum(r["unmapped"].values()) if r.get("unmapped") else 0})
    cols = ["rank", "file", "format", "rank from", "GPUs", "events", "steps", "span", "GPU utilization",
            "unmapped events"]
    return _table({"columns": cols, "rows": rows, "total_rows": len(rows)})


def _warnings(messages: list[str]) -> str:
    return "".join(f'<div class="warn">⚠ {esc(m)}</div>' for m in messages)


#: the template keys a 2-D chart uses (plotly's full template adds ~7 KB of colour scales and 3-D,
#: polar and map defaults to every figure)
TEMPLATE_LAYOUT_KEYS = ("colorway", "font", "hovermode", "hoverlabel", "paper_bgcolor", "plot_bgcolor", "xaxis",
                        "yaxis", "title", "autotypenumbers")
#: draws a figure now, or when the ``<details>`` holding it is first opened (plotly lays out a hidden
#: div at zero width); without plotly.js (the CDN out of reach) it says how to get the charts offline
_PLOT_JS = ("function tvPlot(id,f){var el=document.getElementById(id),d=el.closest('details');"
            "function draw(){if(el.dataset.drawn)return;el.dataset.drawn='1';if(!window.Plotly){"
            "el.className+=' noplot';el.style.minHeight='0';el.textContent=%s;return;}"
            "Plotly.newPlot(el,f.data,f.layout,%s);}"
            "if(!d||d.open)draw();else d.addEventListener('toggle',function(){if(d.open)draw();});}")
#: shown in place of a chart when plotly.js could not be loaded
NO_PLOTLY_NOTE = ("This chart needs plotly.js, which could not be loaded (offline?). The figures are in the tables; "
                  "render the report with --plotlyjs inline for charts that work offline.")


def figure_json(fig: "go.Figure") -> dict[str, Any]:
    """The figure as plotly JSON with only the template keys a 2-D chart uses."""
    import plotly.io as pio

    data: dict[str, Any] = json.loads(pio.to_json(fig, validate=False))
    template = (data.get("layout") or {}).get("template") or {}
    layout = template.get("layout") or {}
    data.setdefault("layout", {})["template"] = {"layout": {k: layout[k] for k in TEMPLATE_LAYOUT_KEYS if k in layout}}
    return data


def _figure_div(name: str, fig: "go.Figure") -> str:
    div = f"fig-{name}"
    data = script_json(json.dumps(figure_json(fig), ensure_ascii=False, separators=(",", ":")))
    return (f'<div id="{div}" class="plot" style="width:100%;min-height:{int(fig.layout.height or 450)}px"></div>'
            f"<script>tvPlot({json.dumps(div)},{data});</script>")


def _charts(report: Mapping[str, Any], figures: Mapping[str, "go.Figure"], has_trace: bool,
            warnings_by_scope: Mapping[str, list[str]], *, first: str = "breakdown") -> tuple[str, str]:
    """The figures, each next to its analysis's warnings (each warning once): the ``first`` one
    open (for the first screen), the others each folded in its own ``<details>``."""
    shown_warnings: set[tuple[str, str]] = set()
    head, rest = [], []
    for name, fig in figures.items():
        title, analysis, caption = FIGURES.get(name, (name, "", ""))
        notes = [w for w in warnings_by_scope.get(analysis, []) if (analysis, w) not in shown_warnings]
        shown_warnings.update((analysis, w) for w in notes)
        inner = f'{_warnings(notes)}{_figure_div(name, fig)}<p class="caption">{esc(caption)}</p>'
        if name == first:
            head.append(f'<div class="figure"><h3>{esc(title)}</h3>{inner}</div>')
        else:
            rest.append(f'<details class="figure"><summary>{esc(title)}</summary>{inner}</details>')
    if not has_trace and report.get("charts", {}).get("timeline"):
        rest.append(f'<p class="meta" id="no-timeline">{esc(NO_TRACE_NOTE)}</p>')
    return "".join(head), ("<h2>More charts</h2>" + "".join(rest) if rest else "")


def _analyses(report: Mapping[str, Any]) -> str:
    steps = int(report["summary"].get("steps") or 0)
    body = []
    for name, analysis in report.get("analyses", {}).items():
        n = analysis.get("findings", 0)
        parts = [_warnings(analysis.get("warnings", []))]
        for table in analysis["tables"].values():
            if not table["rows"]:
                continue
            parts.append(f"<details><summary>{esc(table['title'])} ({table['total_rows']:,} rows)</summary>"
                         f"{_table(table, steps=steps)}</details>")
        body.append(f"<h3>{esc(analysis.get('title') or name)} ({n} finding{'s' if n != 1 else ''})</h3>"
                    + "".join(parts))
    return _folded("Details per analysis", "".join(body))


def _folded(title: str, body: str) -> str:
    """A section folded under its heading."""
    return f'<details class="section"><summary><h2>{esc(title)}</h2></summary>{body}</details>'


def _trust(report: Mapping[str, Any]) -> str:
    """Warnings about the inputs; the unmapped categories once, only when those events are many."""
    messages = [f"{w['scope']}: {w['message']}" for w in input_warnings(report)]
    unmapped = unmapped_line(report)
    if unmapped:
        messages.append(unmapped)
    return "<h2>Trust warnings</h2>" + _warnings(messages) if messages else ""


#: how the page gets plotly.js: from its CDN (pinned to plotly.py's bundled version) or inlined
PLOTLYJS_MODES = ("cdn", "inline")
#: the default (docs/reports.md says why: attachable size; every number still reads offline)
DEFAULT_PLOTLYJS = "cdn"
#: top-level findings on the first screen (the rest are folded)
FIRST_SCREEN_FINDINGS = 5


def plotlyjs_url() -> str:
    """The CDN address of the plotly.js version plotly.py bundles (what ``inline`` would inline)."""
    from plotly.offline import get_plotlyjs_version

    return f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"


def _head(files: str, plotlyjs: str) -> str:
    """``<head>``: the Content-Security-Policy allows no request at all, except plotly.js from its
    CDN in ``cdn`` mode."""
    from plotly.offline import get_plotlyjs

    if plotlyjs not in PLOTLYJS_MODES:
        raise TraceviewError(f"--plotlyjs {plotlyjs}: choose one of {', '.join(PLOTLYJS_MODES)}")
    cdn = plotlyjs == "cdn"
    script = (f'<script src="{plotlyjs_url()}" charset="utf-8"></script>' if cdn
              else f"<script>{get_plotlyjs()}</script>")
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            "<meta name=viewport content='width=device-width, initial-scale=1'>"
            "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; script-src 'unsafe-inline' "
            f"'unsafe-eval'{' https://cdn.plot.ly' if cdn else ''}; style-src 'unsafe-inline'; img-src data: blob:; "
            "font-src data:; connect-src 'none'\">"
            f"<title>traceview report: {esc(files)}</title><style>{_CSS}</style>{script}"
            f"<script>{_PLOT_JS % (json.dumps(NO_PLOTLY_NOTE), json.dumps(_CONFIG))}</script></head>")


def render_html(report: Mapping[str, Any], *, trace: Trace | None = None,
                figures: Mapping[str, "go.Figure"] | None = None, embed_json: bool = False,
                plotlyjs: str = DEFAULT_PLOTLYJS, max_findings: int | None = None) -> str:
    """The report as one HTML page. The timeline excerpt needs the trace: ``trace``, else
    ``report.trace`` (None for a report computed by a job: the page says the timeline is left out).
    ``figures`` overrides the figures (default: :func:`traceview.figures.report_figures`).
    ``plotlyjs``: ``cdn`` or ``inline`` (:data:`PLOTLYJS_MODES`). ``max_findings``: list at most this
    many top-level findings. ``embed_json`` also embeds the report model
    (``<script type="application/json" id="traceview-report">``)."""
    from traceview.figures import report_figures

    if trace is None:
        trace = getattr(report, "trace", None)
    if figures is None:
        figures = report_figures(report, trace)
    warnings_by_scope: dict[str, list[str]] = {}
    for w in report.get("warnings", []):
        warnings_by_scope.setdefault(w["scope"], []).append(w["message"])
    gen = report["generator"]
    names = list(dict.fromkeys(i["file"] for i in report.get("inputs", [])))
    files = ", ".join(names[:8])
    if len(names) > 8:
        files += f" and {len(names) - 8} more"
    head_chart, more_charts = _charts(report, figures, trace is not None, warnings_by_scope)
    body = [f"<h1>traceview report</h1><p class=meta>{esc(files)}<br>{esc(gen['name'])} {esc(gen['version'])}, "
            f"report schema {esc(report['schema_version'])}</p>",
            # the summary beside the breakdown chart: the answer on the first screen
            f'<div class="first"><div><h2>Summary</h2>{_kv_table(headline_rows(report))}</div>{head_chart}</div>',
            _trust(report),
            "<h2>Findings, most costly first</h2>" + _findings(report, first=FIRST_SCREEN_FINDINGS,
                                                                 max_findings=max_findings),
            more_charts, _analyses(report),
            _folded("Environment", _environment(report)),
            _folded(f"Ranks ({len(report.get('ranks', []))})", _ranks(report))]
    embedded = ""
    if embed_json:
        model = script_json(report_to_json(report, indent=None))
        embedded = f'<script type="application/json" id="traceview-report">{model}</script>'
    return _head(files, plotlyjs) + "<body><main>" + "".join(body) + f"</main>{embedded}</body></html>\n"


@register_renderer
class HtmlRenderer(Renderer):
    """One HTML file with the figures. Options: ``plotlyjs`` (``cdn``, the default, or ``inline``
    for a page that draws its charts offline), ``max_findings``, ``embed_json``."""

    name = "html"
    output_file_extension = ".html"
    description = "one HTML file with charts (plotly.js from its CDN, or inlined with --plotlyjs inline)"

    def render(self, report: "Report") -> str:
        return render_html(report, embed_json=bool(self.options.get("embed_json", False)),
                           plotlyjs=str(self.options.get("plotlyjs") or DEFAULT_PLOTLYJS),
                           max_findings=self.options.get("max_findings"))
