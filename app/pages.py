"""The pages. Each takes a :class:`~traceview.app.runs.RunContext` (a run under the current filters)
and returns Dash components. Everything shown comes from the context's one
:class:`~traceview.report.Report`: figures from :mod:`traceview.figures` (drawn from the report),
tables from the report's analysis tables, findings from ``report["findings"]`` in their order and
with their ids; nothing here computes a metric or ranks a finding.

Which pages exist comes from the analyses' specs (``traceview.registry.ANALYSES``): an analysis with
a ``page`` is shown at that path under that label, by its hand-made view below when it has one;
every other analysis gets the generic page (its tables with their titles, and its findings), so an
analysis added as one module appears in the app without any change here. Timeline, Compare and
Findings are the app's own pages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd
from dash import dcc, html

import traceview.analyses  # noqa: F401  (fills the registry of analyses)
from traceview.pipeline import row_columns
from traceview.registry import ANALYSES, analysis_specs
from traceview.tables import top_order
from traceview.render.common import per_step_text
from traceview.units import fmt_ns, fmt_share

from .components import CARD, frame_table, graph, message, section, severity_badge, stat_cards
from .features import figures
from .roofline import plotted, roofline_figure, roofs
from .runs import EARLY_ANALYSIS, RunContext

#: the page shown for an unknown path (the temporal analysis's page)
DEFAULT_PATH = "/overview"
#: the app's own pages: the timeline (shown after the first page) and compare/findings (shown last)
TIMELINE_PAGE = ("/timeline", "Timeline")
COMPARE_PAGE = ("/compare", "Compare")
FINDINGS_PAGE = ("/findings", "Findings")
END_PAGES = (COMPARE_PAGE, FINDINGS_PAGE)
#: rows of the largest-gaps table (the largest first)
GAP_TABLE_ROWS = 500
#: rows of a table on the generic page (the largest first when the table has a sort key)
GENERIC_TABLE_ROWS = 5000

#: how often the Overview asks for its findings while the analyses run (ms)
OVERVIEW_POLL_MS = 200


@dataclass(frozen=True)
class Page:
    """One page of the navigation: its path, its label, and the analysis it shows (None for the
    app's own pages)."""

    path: str
    label: str
    analysis: str | None = None


def generic_path(analysis: str) -> str:
    """The path of the generic page of an analysis that declares no page of its own."""
    return f"/analysis/{analysis}"


def page_list() -> list[Page]:
    """Every page, in navigation order: the analyses' pages in their declared order (the Timeline
    after the first of them), then Compare and Findings."""
    out = []
    for spec in analysis_specs():
        path, label = spec.page or (generic_path(spec.name), spec.title)
        out.append(Page(path, label, spec.name))
    out.insert(min(1, len(out)), Page(*TIMELINE_PAGE))
    out.extend(Page(path, label) for path, label in END_PAGES)
    return out


def nav_id(path: str) -> str:
    """The id of a page's navigation link (no slashes: it is also a CSS selector)."""
    return "nav-" + path.strip("/").replace("/", "-")


def _whole(df: pd.DataFrame) -> pd.DataFrame:
    """Whole-trace rows (``step`` is None) of a per-step table."""
    if df is None or df.empty or "step" not in df.columns:
        return df
    return df[df["step"].isna()].reset_index(drop=True)


def _warnings_block(ctx: RunContext, analyses: tuple[str, ...]) -> list[Any]:
    """The report's warnings of these analyses (merged across ranks by the pipeline)."""
    out = []
    sections = ctx.report["analyses"]
    for name in analyses:
        for w in sections.get(name, {}).get("warnings", []):
            text = str(w)
            out.append(message(text if text.startswith(f"{name}:") else f"{name}: {text}", "warn"))
    return out


def _finding_rows(report: Any, analysis: str | None = None, limit: int | None = None) -> list[dict]:
    """The report's findings (of one analysis), in the report's order."""
    rows = [f for f in report["findings"] if analysis is None or f.get("analysis") == analysis]
    return rows[:limit] if limit else rows


def finding_card(f: dict, *, compact: bool = False, origin_ns: int = 0) -> html.Div:
    """A finding as the report numbers it (``F1``, ``F1.1``): id, severity, title, cost, where."""
    cost = f.get("cost_ns_per_step") or 0
    share = f.get("cost_share")
    head = [html.Span(f.get("id", ""), className="tv-fid", style={"fontWeight": "700", "marginRight": "8px"}),
            severity_badge(f.get("severity", "info")),
            html.Span(f.get("title", ""), className="tv-ftitle", style={"fontWeight": "600"})]
    meta = []
    if cost:
        per_step = f.get("cost_basis") != "whole trace"
        of = (" of the step" if per_step else " of the trace")
        of_step = f" ({fmt_share(share)}{of})" if share is not None else ""
        meta.append(f"costs {fmt_ns(cost)} {'per step' if per_step else 'over the whole trace'}{of_step}")
    if f.get("rank") is not None:
        meta.append(f"rank {f['rank']}")
    meta.append(f"{f.get('analysis')} · {f.get('code')}" + (f" · part of {f['part_of']}" if f.get("part_of") else ""))
    children: list[Any] = [html.Div(head), html.Div(" · ".join(meta), style={"color": "#555", "fontSize": "13px",
                                                                               "margin": "3px 0"})]
    if not compact:
        children.extend(_finding_details(f, origin_ns))
    indent = {"marginLeft": "28px"} if f.get("parent") and not compact else {}
    return html.Div(children, className="tv-finding", style={**CARD, **indent},
                    **{"data-finding": f.get("id", "")})


def _finding_details(f: dict, origin_ns: int) -> list[Any]:
    """Recommendation, evidence and a link to the finding's time range in the timeline."""
    out: list[Any] = [html.Div(f.get("recommendation", ""), style={"margin": "6px 0"})]
    evidence = f.get("evidence") or {}
    if evidence:
        out.append(html.Details([
            html.Summary("evidence"),
            html.Pre(json.dumps(evidence, indent=1, default=str)[:20000],
                     style={"fontSize": "12px", "background": "#F8F9F9", "padding": "8px", "overflowX": "auto",
                            "maxHeight": "360px"}),
        ], open=False))
    tr = f.get("time_range_ns")
    if tr and len(tr) == 2 and tr[0] is not None and tr[1] is not None:
        a, b = int(tr[0]) - origin_ns, int(tr[1]) - origin_ns
        out.append(dcc.Link("show in the timeline", href=f"/timeline?t0={a}&t1={b}&f0={a}&f1={b}",
                            style={"fontSize": "13px"}))
    return out


# ------------------------------------------------------------------------------------- overview


def overview(ctx: RunContext) -> list[Any]:
    rep = ctx.report
    s = rep.get("summary", {})
    util = s.get("utilization")
    # dropped activity touches every GPU figure: a short mark on each card, the whole note below
    dropped = "; leaves out dropped events (see note)" if (s.get("notes") or {}).get("dropped_activity") else ""
    cards = stat_cards([
        ("ranks", str(s.get("num_ranks", "-")), f"world size {s.get('world_size')}" if s.get("world_size") else None),
        ("GPUs", str(s.get("gpus", 0)), ", ".join(s.get("gpu_models") or [])[:60] or None),
        ("events", f"{s.get('events', 0):,}", None),
        ("steps", str(s.get("steps", 0)), f"median {fmt_ns(s.get('median_step_time_ns'))}"
         if s.get("median_step_time_ns") else "no steps found"),
        ("GPU utilization", fmt_share(util), "busy / window, all GPUs" + dropped),
        (f"idle, {per_step_text(rep)}", fmt_ns(s.get("idle_ns_per_step")), dropped.lstrip("; ") or None),
        (f"exposed comm., {per_step_text(rep)}", fmt_ns(s.get("exposed_comm_ns_per_step")),
         dropped.lstrip("; ") or None),
    ])
    out: list[Any] = [cards]
    for note in (s.get("notes") or {}).values():
        out.append(message(note, "warn"))
    # breakdown per rank
    util_rows = pd.DataFrame(rep.get("charts", {}).get("breakdown") or [])
    if len(util_rows):
        util_rows = util_rows.assign(utilization_pct=100.0 * pd.to_numeric(util_rows["utilization"], errors="coerce"))
    out.append(section("Utilization and breakdown per rank",
                       graph(figures.breakdown_figure(rep), "ov-breakdown"),
                       frame_table(util_rows, "ov-util",
                                   columns=["rank", "device", "utilization_pct", "window_ns", "busy_ns", "compute_ns",
                                            "communication_ns", "memory_ns", "idle_ns", "overlap_pct"],
                                   rename={"utilization_pct": "utilization %", "overlap_pct": "comm. overlap %"},
                                   page_size=16, empty="No GPU activity in the trace.")))
    # step times
    steps = ctx.table("temporal", "steps")
    if steps is not None and len(steps):
        fig = _step_time_figure(steps, ctx.table("temporal", "breakdown"))
        out.append(section("Step times", graph(fig, "ov-steps"),
                           note="CPU range of each step (ProfilerStep / step marker) and its GPU window."))
    else:
        out.append(section("Step times", message("No steps in this selection (no ProfilerStep#N or step marker).")))
    # top findings (when the analyses are still running: a placeholder the poll callback replaces)
    if ctx.partial:
        out.append(html.Div([
            section("Top findings, by what they cost",
                    message(f"Running the other analyses ({_other_analyses()})… the findings appear here "
                            "in a moment.")),
        ], id="ov-findings"))
        # every 200 ms for up to 10 minutes: a poll is a few ms of server time, and the findings
        # show at most 0.2 s after they are ready (issue 12: the Overview complete in 2 s)
        out.append(dcc.Interval(id="ov-poll", interval=OVERVIEW_POLL_MS, n_intervals=0,
                                max_intervals=600_000 // OVERVIEW_POLL_MS))
    else:
        out.append(html.Div(overview_findings(rep), id="ov-findings"))
    return out


def _other_analyses() -> str:
    """The titles of the analyses a partial Overview is waiting for."""
    return ", ".join(spec.title.lower() for spec in analysis_specs() if spec.name != EARLY_ANALYSIS)


def overview_findings(rep: Any) -> list[Any]:
    """The Overview's findings section and trust warnings (from the complete report)."""
    top = [f for f in rep["findings"] if f.get("parent") is None][:6]
    body: list[Any] = [finding_card(f, compact=True) for f in top] or [message("No findings.")]
    body.append(dcc.Link("all findings and the downloadable reports →", href="/findings"))
    return [section(f"Top findings, by what they cost ({per_step_text(rep)})", *body), *warnings_details(rep)]


def warnings_details(rep: Any) -> list[Any]:
    """The report's trust warnings, folded (they can be many and repetitive)."""
    warns = rep.get("warnings") or []
    if not warns:
        return []
    items = [html.Li(f"{w.get('scope')}: {w.get('message')}") for w in warns[:200]]
    return [html.Details([html.Summary(f"{len(warns)} warning(s) about what these figures can be trusted for"),
                          html.Ul(items, style={"fontSize": "13px"})],
                         style={**CARD, "background": "#FEF9E7"})]


def _step_time_figure(steps: pd.DataFrame, breakdown: pd.DataFrame) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    for rank, g in steps.groupby("rank"):
        g = g.sort_values("step")
        fig.add_trace(go.Scatter(x=g["step"], y=(g["end_ns"] - g["start_ns"]) / 1e6, mode="lines+markers",
                                 name=f"rank {rank} step (CPU)",
                                 hovertemplate="step %{x}<br>%{y:.3f} ms<extra>rank " + str(rank) + "</extra>"))
    if breakdown is not None and len(breakdown):
        per = breakdown[breakdown["step"].notna()]
        for (rank, dev), g in per.groupby(["rank", "device"]):
            g = g.sort_values("step")
            fig.add_trace(go.Scatter(x=g["step"].astype(int), y=g["window_ns"] / 1e6, mode="lines+markers",
                                     line={"dash": "dot"}, name=f"rank {rank} GPU {dev} window",
                                     hovertemplate="step %{x}<br>GPU window %{y:.3f} ms<extra></extra>"))
    fig.update_layout(template="plotly_white", height=340, margin=dict(l=60, r=20, t=30, b=50),
                      legend=dict(orientation="h", y=1.02, yanchor="bottom"), xaxis_title="step",
                      yaxis_title="time (ms)")
    fig.update_xaxes(tickformat="d", dtick=1 if steps["step"].nunique() <= 30 else None)
    return fig


# ------------------------------------------------------------------------------------- timeline


def timeline(figure: dict, stats_text: str, state: dict) -> list[Any]:
    btn = {"marginRight": "6px"}
    controls = html.Div([
        html.Button("zoom in", id="tl-zoom-in", n_clicks=0, style=btn),
        html.Button("zoom out", id="tl-zoom-out", n_clicks=0, style=btn),
        html.Button("◀ pan", id="tl-left", n_clicks=0, style=btn),
        html.Button("pan ▶", id="tl-right", n_clicks=0, style=btn),
        html.Button("whole selection", id="tl-reset", n_clicks=0, style=btn),
        html.Span("Drag on the chart to zoom into a range; click an idle gap to zoom to it.",
                  style={"color": "#666", "fontSize": "13px", "marginLeft": "8px"}),
    ], style={"marginBottom": "6px"})
    return [
        dcc.Store(id="tl-window", data=state),
        html.Div([controls, html.Div(stats_text, id="tl-stats", style={"color": "#555", "fontSize": "13px"}),
                  dcc.Graph(id="tl-graph", figure=figure, config={"displaylogo": False, "scrollZoom": False})],
                 style=CARD),
    ]


# ------------------------------------------------------------------------------------------ gaps


def gaps(ctx: RunContext) -> list[Any]:
    rep = ctx.report
    g = ctx.table("idle_gaps", "gaps")
    out: list[Any] = _warnings_block(ctx, ("idle_gaps",))
    out.append(section("Idle gaps by duration and cause", graph(figures.gap_histogram_figure(rep), "gap-hist")))
    by_cause = _whole(ctx.table("idle_gaps", "by_cause"))
    if by_cause is not None and len(by_cause):
        by_cause = by_cause[by_cause["gaps"] > 0]
    out.append(section("Idle time by cause (whole trace)",
                       frame_table(by_cause, "gap-causes", columns=["rank", "device", "cause", "gaps", "idle_ns"],
                                   page_size=12, empty="No idle gaps.")))
    if g is not None and len(g):
        largest = g.sort_values("dur_ns", ascending=False, kind="stable").head(GAP_TABLE_ROWS)
        view = pd.DataFrame({
            "rank": largest["rank"].to_numpy(), "device": largest["device"].to_numpy(),
            "step": largest["step"].to_numpy(),
            "at_ms": (largest["start_ns"].to_numpy() - ctx.origin_ns) / 1e6,
            "dur_ns": largest["dur_ns"].to_numpy(), "cause": largest["cause"].astype(str).to_numpy(),
            "cpu_context": largest["cpu_context"].to_numpy(),
        })
        table = frame_table(view, "gap-table", rename={"at_ms": "starts at (ms)", "cpu_context": "CPU context"},
                            row_ids=[int(i) for i in largest.index], page_size=15, filter_=True,
                            style_data_conditional=[{"if": {"state": "active"}, "backgroundColor": "#FDEBD0"}],
                            style_cell={"cursor": "pointer"})
        note = (f"The {len(view):,} largest of {len(g):,} gaps. Click a row to open the timeline around that gap.")
        # the row-click callback writes here when a clicked row cannot be opened
        out.append(section("Largest gaps", html.Div(id="gap-click-msg"), table, note=note))
    else:
        out.append(section("Largest gaps", message("No idle gaps in this selection.")))
    ctxs = ctx.table("idle_gaps", "cpu_contexts")
    out.append(section("What the host was doing in host-bound gaps",
                       frame_table(ctxs, "gap-contexts", page_size=10, empty="No host-bound gaps.")))
    return out


# -------------------------------------------------------------------------------------- launches


def launch(ctx: RunContext) -> list[Any]:
    rep = ctx.report
    out: list[Any] = _warnings_block(ctx, ("launch_overhead",))
    for f in _finding_rows(rep, "launch_overhead"):
        out.append(finding_card(f, compact=True))
    out.append(section("Kernel duration vs launch cost", graph(figures.launch_scatter_figure(rep), "launch-scatter"),
                       note="Left: kernels below the diagonal are shorter than the call that launched them."))
    out.append(section("Short kernels by the CPU op that launched them",
                       frame_table(ctx.table("launch_overhead", "tiny_kernel_ops"), "launch-ops", page_size=10,
                                   filter_=True, empty="No kernel shorter than its launch call.")))
    steps = ctx.table("launch_overhead", "steps")
    if steps is not None and len(steps):
        steps = steps.sort_values(["launch_bound", "launch_scale_share"], ascending=[False, False], kind="stable")
        n_bound = int(steps["launch_bound"].fillna(False).astype(bool).sum())
        note = (f"{n_bound} launch-bound step(s): launch-scale gaps are most of the host-bound idle and most kernels "
                "launched one by one are shorter than their launch (docs/metrics.md, Launch overhead).")
    else:
        note = None
    out.append(section("Launch-bound steps", frame_table(steps, "launch-steps", page_size=10,
                                                          empty="No launches in this selection."), note=note))
    out.append(section("Launch APIs", frame_table(ctx.table("launch_overhead", "by_api"), "launch-apis", page_size=10)))
    return out


# --------------------------------------------------------------------------------- communication


def communication(ctx: RunContext) -> list[Any]:
    rep = ctx.report
    out: list[Any] = _warnings_block(ctx, ("communication",))
    for f in _finding_rows(rep, "communication"):
        out.append(finding_card(f, compact=True))
    out.append(section("Overlap of communication with compute, per rank",
                       graph(figures.overlap_figure(rep), "comm-overlap")))
    heat = figures.skew_heatmap_figure(rep)
    if heat is not None:
        out.append(section("Rank x collective skew", graph(heat, "comm-skew"),
                           note="How late each rank arrived at each matched collective."))
    else:
        out.append(section("Rank x collective skew",
                           message("Skew needs two or more ranks with matched collectives in the selection.")))
    out.append(section("Stragglers", frame_table(ctx.table("communication", "stragglers"), "comm-stragglers",
                                                 page_size=16, empty="No cross-rank matching (fewer than two ranks).")))
    out.append(section("Collectives (whole trace)",
                       frame_table(_whole(ctx.table("communication", "collectives")), "comm-collectives",
                                   page_size=12, filter_=True, empty="No communication kernels.")))
    out.append(section("Compute imbalance across ranks",
                       frame_table(ctx.table("communication", "compute_imbalance"), "comm-imbalance", page_size=10,
                                   empty="Needs two or more ranks.")))
    return out


# --------------------------------------------------------------------------------------- kernels


def kernels(ctx: RunContext) -> list[Any]:
    out: list[Any] = _warnings_block(ctx, ("kernels",))
    k = ctx.table("kernels", "kernels")
    cats = _whole(ctx.table("kernels", "categories"))
    if cats is not None and len(cats):
        out.append(section("Categories (whole trace)", frame_table(cats, "kern-categories", page_size=10,
                                                                  columns=["rank", "device", "category", "count",
                                                                           "total_ns", "share_pct"])))
    note = ("Sort by clicking a column header; filter by typing in the row under the headers "
            "(e.g. gemm in category, > 1 in total, nccl in name).")
    out.append(section("Kernels", frame_table(k, "kern-table", page_size=20, filter_=True,
                                              columns=["rank", "device", "name", "category", "kind", "count",
                                                       "total_ns", "mean_ns", "min_ns", "max_ns", "std_ns",
                                                       "share_pct"],
                                              empty="No GPU activity in this selection."), note=note))
    tiny = _whole(ctx.table("kernels", "tiny_kernels"))
    out.append(section("Tiny kernels (< 10 us)", frame_table(tiny, "kern-tiny", page_size=10, empty="No kernels.")))
    return out


# ------------------------------------------------------------------------------------ efficiency

#: the op-type table's columns on the Efficiency page (the table has a few more: see docs/metrics.md)
EFFICIENCY_COLUMNS = ["rank", "device", "name", "dtype", "unit", "model", "calls", "gpu_ns", "achieved_tflops",
                      "achieved_gbs", "intensity", "bound", "roofline_ns", "efficiency_pct", "above_roofline_ns",
                      "above_roofline_ns_per_step", "roof"]
#: rows of the per-collective table (the longest first)
COLLECTIVE_ROWS = 2000


def _as_pct(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """``frame`` with ``column`` (a fraction) also as ``<column>_pct``, shown with one decimal."""
    if frame is None or frame.empty or column not in frame.columns:
        return frame
    return frame.assign(**{f"{column}_pct": 100.0 * pd.to_numeric(frame[column], errors="coerce")})


def efficiency(ctx: RunContext) -> list[Any]:
    """The Efficiency page: the roofline of the op types, their table, coverage, HFU per step and the
    collectives' bandwidth, all from the efficiency analysis's tables in the report."""
    if "efficiency" not in ctx.report["analyses"]:
        return [message("The efficiency analysis gave no results for this selection.")]
    out: list[Any] = _warnings_block(ctx, ("efficiency",))
    out.extend(finding_card(f, compact=True) for f in _finding_rows(ctx.report, "efficiency"))
    op_types = ctx.table("efficiency", "op_types")
    out.append(section("Roofline: op types against the GPU's peaks", *_roofline_body(ctx, op_types),
                       note="One point per op type (rank, GPU, op, dtype, unit), its area proportional to its GPU "
                            "time; a line per roof: memory bandwidth x intensity up to the ridge point, then the "
                            "dense peak of the dtype (docs/metrics.md, Efficiency)."))
    out.append(section("Op types against the roofline", frame_table(
        _as_pct(op_types, "efficiency"), "eff-op-types", columns=EFFICIENCY_COLUMNS, page_size=15, filter_=True,
        rename={"achieved_tflops": "achieved TFLOP/s", "achieved_gbs": "achieved GB/s",
                "intensity": "FLOP/byte", "efficiency_pct": "efficiency %"},
        empty="No op type was modelled (see the coverage below).")))
    out.append(section("Coverage: modelled share of the op-linked kernel time", frame_table(
        ctx.table("efficiency", "coverage"), "eff-coverage", page_size=10, rename={"modelled_pct": "modelled %"},
        empty="No compute kernels in this selection."),
        note="kernel = compute kernel time; op = the part launched under a CPU op; modelled = the part of ops "
             "with a cost model; the rest by reason (graph replay, no launch call, no CPU op, annotation only)."))
    out.append(section("Op-linked kernel time without a cost model", frame_table(
        ctx.table("efficiency", "unmodelled"), "eff-unmodelled", page_size=10, filter_=True,
        rename={"share_pct": "share of op time %"}, empty="Every op-linked kernel is modelled.")))
    steps = _as_pct(ctx.table("efficiency", "steps"), "hfu")
    with_mfu = steps is not None and "mfu" in steps and bool(steps["mfu"].notna().any())
    steps = _as_pct(steps, "mfu") if with_mfu else steps
    out.append(section("FLOPs utilisation per step", frame_table(
        steps, "eff-steps", page_size=12,
        columns=["rank", "device", "step", "window_ns", "modelled_ops", "flops", "achieved_tflops",
                 "compute_roof_ns", "hfu_pct", "roofline_ns", "modelled_gpu_ns", *(["mfu_pct"] if with_mfu else [])],
        rename={"achieved_tflops": "achieved TFLOP/s", "hfu_pct": "HFU %", "mfu_pct": "MFU %"},
        empty="No GPU window."),
        note="HFU = time the modelled FLOPs need at the dtype's peak / the step's GPU window; MFU (with "
             "--model-flops) = the model's FLOPs per step / (peak x window)."))
    out.extend(_collective_sections(ctx))
    return out


def _roofline_body(ctx: RunContext, op_types: pd.DataFrame) -> list[Any]:
    """The chart, with what it leaves out; or why there is none."""
    fig = roofline_figure(op_types)
    if fig is None:
        return [message(_no_roofline_reason(ctx, op_types), "warn")]
    body: list[Any] = [graph(fig, "eff-roofline")]
    points = plotted(op_types)
    if not roofs(points):
        why = "; ".join(dict.fromkeys(str(r) for r in points["roof"]))
        body.append(message(f"No roof is drawn (achieved figures need no GPU peak, the roofs do): {why}", "warn"))
    left = len(op_types) - len(points)
    if left:
        body.append(html.Div(f"{left} op type(s) without FLOPs (copies, gathers) are not on the chart: an "
                             "intensity of 0 has no place on a log axis; the table below lists them.",
                             style={"color": "#666", "fontSize": "13px"}))
    return body


def _no_roofline_reason(ctx: RunContext, op_types: pd.DataFrame) -> str:
    """What could not be computed, and why, when no op type can be placed on the roofline."""
    coverage = ctx.table("efficiency", "coverage")
    if coverage.empty:
        return "No roofline: there are no compute kernels in this selection."
    if int(coverage["op_ns"].sum()) == 0:
        return ("No roofline: no compute kernel was launched under a CPU op (the trace records no ops around the "
                "launch calls, as in an Nsight export), so no kernel time can be given a FLOP or byte count.")
    if not op_types.empty:
        return ("No roofline: the modelled op types have no FLOPs (copies, gathers): they are bound by memory "
                "bandwidth alone and have no place on a FLOP/s axis (the table below lists them).")
    unmodelled = ctx.table("efficiency", "unmodelled")  # the most time first
    reasons = ""
    if not unmodelled.empty:
        reasons = " (reasons: " + ", ".join(dict.fromkeys(str(r) for r in unmodelled["reason"])) + \
            "; the table below has the time of each op)"
    return ("No roofline: no op with kernels could be modelled" + reasons + ". An op needs its recorded input "
            "shapes and types (profile with record_shapes=True) and a cost model for its name.")


def _collective_sections(ctx: RunContext) -> list[Any]:
    """Algorithm and bus bandwidth per collective kind, and per collective (the longest first)."""
    kinds = _as_pct(ctx.table("efficiency", "collective_kinds"), "link_share")
    rename = {"algbw_gbs": "algbw GB/s", "busbw_gbs": "busbw GB/s", "link_gbs": "link GB/s",
              "link_share_pct": "share of link %"}
    out = [section("Collectives: algorithm and bus bandwidth per kind", frame_table(
        kinds, "eff-coll-kinds", page_size=10, rename=rename,
        columns=["rank", "device", "collective", "process_group", "count", "timed_over_group", "bytes", "time_ns",
                 "algbw_gbs", "busbw_gbs", "link_gbs", "link_share_pct", "link"],
        empty="No collective with a known message size in this selection."),
        note="busbw = algbw x the nccl-tests factor of the kind; time = the shortest duration over the group when "
             "every rank is in the trace (the others include waiting), else the rank's own.")]
    per = ctx.table("efficiency", "collectives")
    if per is not None and len(per):
        shown = per.iloc[top_order(per, "time_ns")[:COLLECTIVE_ROWS]]
        note = f"{len(per):,} collective(s), the longest first" + (
            f"; the first {COLLECTIVE_ROWS:,} are shown" if len(per) > COLLECTIVE_ROWS else "")
        out.append(section("Bus bandwidth per collective", frame_table(
            _as_pct(shown, "link_share"), "eff-collectives", page_size=10, filter_=True, rename=rename,
            columns=["rank", "device", "step", "collective", "process_group", "occurrence", "bytes", "group_size",
                     "dur_ns", "time_ns", "time_basis", "algbw_gbs", "busbw_gbs", "link_share_pct"]), note=note))
    return out


# -------------------------------------------------------------------------------------- findings


def findings_headline(stats: dict[str, Any]) -> str:
    """"N findings: x high, y medium, ..." from ``report["findings_summary"]`` (the severities count
    the top-level findings, so they add up to N; nested findings are counted apart)."""
    by = stats.get("by_severity", {})
    text = f"{stats.get('top_level', 0)} findings: " + (", ".join(f"{n} {s}" for s, n in by.items() if n) or "none")
    if stats.get("nested"):
        text += f" ({stats['nested']} more nested under them; {stats.get('total', 0)} in all)"
    return text


def findings(ctx: RunContext) -> list[Any]:
    """Every finding of the report, in its order and with its ids, and the report downloads."""
    rep = ctx.report
    btn = {"marginRight": "8px"}
    head = html.Div([
        html.Div(findings_headline(rep["findings_summary"]), id="fnd-headline", style={"marginBottom": "8px"}),
        html.Button("Download Markdown report", id="dl-md-btn", n_clicks=0, style=btn),
        html.Button("Download HTML report", id="dl-html-btn", n_clicks=0, style=btn),
        html.Button("Download JSON report", id="dl-json-btn", n_clicks=0, style=btn),
        html.Span(" for a bug report: secrets in the trace metadata are redacted.",
                  style={"color": "#666", "fontSize": "13px"}),
    ], style=CARD)
    cards = [finding_card(f, origin_ns=ctx.origin_ns) for f in rep["findings"]]
    if not cards:
        cards = [message("No findings: nothing in this selection crossed a threshold.")]
    return [head, *cards, *warnings_details(rep)]


# -------------------------------------------------------------------------- any other analysis


def _relative_times(frame: pd.DataFrame, origin_ns: int) -> pd.DataFrame:
    """Instants (``*start_ns``, ``*end_ns`` columns) as ns since the run's first event, as on the
    timeline (epoch nanoseconds are unreadable); durations are left as they are."""
    instants = [c for c in frame.columns if str(c).endswith(("start_ns", "end_ns"))
                and pd.api.types.is_numeric_dtype(frame[c])]
    if not instants:
        return frame
    return frame.assign(**{c: frame[c] - origin_ns for c in instants})


def _generic_table(ctx: RunContext, analysis: str, table: str, meta: dict[str, Any]) -> html.Div:
    """One table of an analysis, whole (the largest rows first when it declares a sort key)."""
    frame = ctx.table(analysis, table)
    spec = ANALYSES.get(analysis)
    sort_by = spec.table(table).sort_by if spec is not None else None
    note = None
    total = len(frame)
    if total:
        if sort_by is not None and sort_by in frame.columns:
            frame = frame.iloc[top_order(frame, sort_by)[:GENERIC_TABLE_ROWS]]
            note = f"{total:,} row(s), the largest {sort_by.replace('_', ' ')} first"
        else:
            frame = frame.head(GENERIC_TABLE_ROWS)
            note = f"{total:,} row(s)"
        if total > GENERIC_TABLE_ROWS:
            note += f"; the first {GENERIC_TABLE_ROWS:,} are shown"
        if any(str(c).endswith(("start_ns", "end_ns")) for c in frame.columns):
            note += "; start and end times are since the run's first event"
        frame = _relative_times(frame.drop(columns=row_columns(frame)), ctx.origin_ns)  # row numbers: no use
    return section(meta.get("title") or table, frame_table(frame, f"gen-{analysis}-{table}", page_size=15,
                                                           filter_=True, max_rows=GENERIC_TABLE_ROWS,
                                                           empty="No rows in this selection."), note=note)


def generic(ctx: RunContext, analysis: str) -> list[Any]:
    """The page of an analysis without a hand-made view: its warnings, its findings (as the report
    ranks and numbers them) and every table it produced, titled as its spec declares."""
    sections = ctx.report["analyses"]
    if analysis not in sections:
        return [message(f"The analysis {analysis!r} gave no results for this selection.")]
    about = sections[analysis]
    out: list[Any] = _warnings_block(ctx, (analysis,))
    cards = [finding_card(f, compact=True) for f in _finding_rows(ctx.report, analysis)]
    out.append(section(f"Findings of {about['title']}", *(cards or [message("No findings.")])))
    spec = ANALYSES.get(analysis)
    names = list(about["tables"])
    if spec is not None and spec.headline_table in names:  # the headline table first
        names.remove(spec.headline_table)
        names.insert(0, spec.headline_table)
    out.extend(_generic_table(ctx, analysis, name, about["tables"][name]) for name in names)
    if not names:
        out.append(message("This analysis produced no tables."))
    return out


#: the hand-made views of analyses, by analysis name; any other analysis is shown by :func:`generic`
ANALYSIS_VIEWS: dict[str, Callable[[RunContext], list[Any]]] = {
    "temporal": overview,
    "idle_gaps": gaps,
    "launch_overhead": launch,
    "communication": communication,
    "kernels": kernels,
    "efficiency": efficiency,
}


def analysis_page(ctx: RunContext, analysis: str) -> list[Any]:
    """The page of one analysis: its hand-made view, or the generic one."""
    view = ANALYSIS_VIEWS.get(analysis)
    return view(ctx) if view is not None else generic(ctx, analysis)
