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
from traceview.render.common import column_label, per_step_basis, per_step_text
from traceview.units import fmt_bytes, fmt_ns, fmt_share

from . import critical_path_page, measured_page, modules_page
from .components import CARD, frame_table, graph, message, section, severity_badge, stat_cards, time_unit
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


def warnings_block(ctx: RunContext, analyses: tuple[str, ...]) -> list[Any]:
    """The report's warnings of these analyses (merged across ranks by the pipeline)."""
    out = []
    sections = ctx.report["analyses"]
    for name in analyses:
        for w in sections.get(name, {}).get("warnings", []):
            text = str(w)
            out.append(message(text if text.startswith(f"{name}:") else f"{name}: {text}", "warn"))
    return out


def finding_rows(report: Any, analysis: str | None = None, limit: int | None = None) -> list[dict]:
    """The report's findings (of one analysis), in the report's order."""
    rows = [f for f in report["findings"] if analysis is None or f.get("analysis") == analysis]
    return rows[:limit] if limit else rows


def finding_card(f: dict, *, origin_ns: int = 0) -> html.Details:
    """A finding as the report numbers it (``F1``, ``F1.1``), on one line: id, severity, title, cost
    and rank; its recommendation, evidence and a link to its time range in the timeline when
    expanded. Nested findings are indented under their umbrella."""
    cost = f.get("cost_ns_per_step") or 0
    share = f.get("cost_share")
    line: list[Any] = [html.Span(f.get("id", ""), className="tv-fid",
                                 style={"fontWeight": "700", "marginRight": "8px"}),
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
    if meta:
        line.append(html.Span(" · " + " · ".join(meta), className="tv-fmeta", style={"color": "#555",
                                                                                     "fontSize": "13px"}))
    indent = {"marginLeft": "28px"} if f.get("parent") else {}
    return html.Details([html.Summary(line, style={"cursor": "pointer"}),
                         html.Div(_finding_details(f, origin_ns), style={"marginLeft": "22px"})],
                        className="tv-finding", open=False,
                        style={**CARD, "padding": "6px 12px", "marginBottom": "6px", **indent},
                        **{"data-finding": f.get("id", "")})


def _finding_details(f: dict, origin_ns: int) -> list[Any]:
    """Where it comes from, recommendation, evidence and a link to its time range in the timeline."""
    source = f"{f.get('analysis')} · {f.get('code')}" + (f" · part of {f['part_of']}" if f.get("part_of") else "")
    out: list[Any] = [html.Div(source, style={"color": "#555", "fontSize": "13px", "margin": "4px 0"}),
                      html.Div(f.get("recommendation", ""), className="tv-frec", style={"margin": "6px 0"})]
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
        rank = f"&r={int(f['rank'])}" if isinstance(f.get("rank"), int) else ""  # the timeline opens that rank
        out.append(dcc.Link("show in the timeline", href=f"/timeline?t0={a}&t1={b}&f0={a}&f1={b}{rank}",
                            style={"fontSize": "13px"}))
    return out


# ------------------------------------------------------------------------------------- overview


def overview(ctx: RunContext) -> list[Any]:
    rep = ctx.report
    s = rep.get("summary", {})
    util = s.get("utilization")
    # dropped activity touches every GPU figure: a short mark on each card, the whole note below
    dropped = "; leaves out dropped events (see note)" if (s.get("notes") or {}).get("dropped_activity") else ""
    steps_n = int(s.get("steps") or 0)
    if steps_n:
        steps_card = ("steps", str(steps_n), f"median {fmt_ns(s.get('median_step_time_ns'))}"
                      if s.get("median_step_time_ns") else None)
    else:  # no step: say so once, and label every figure as the whole trace's
        steps_card = ("steps", "none found", "figures are for the whole trace")
    basis = per_step_text(rep) if steps_n else "whole trace"
    cards = stat_cards([
        ("ranks", str(s.get("num_ranks", "-")), f"world size {s.get('world_size')}" if s.get("world_size") else None),
        ("GPUs", str(s.get("gpus", 0)), gpu_description(rep) or None),
        ("events", f"{s.get('events', 0):,}", None),
        steps_card,
        ("GPU utilization", fmt_share(util), "busy / window, all GPUs" + dropped),
        (f"idle, {basis}", fmt_ns(s.get("idle_ns_per_step")), dropped.lstrip("; ") or None),
        (f"exposed comm., {basis}", fmt_ns(s.get("exposed_comm_ns_per_step")),
         dropped.lstrip("; ") or None),
    ])
    out: list[Any] = [cards, *critical_path_page.overview_line(rep)]
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
    out.append(_step_section(ctx))
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
        out.append(html.Div(overview_findings(rep, ctx.origin_ns), id="ov-findings"))
    return out


#: a step chart needs at least this many steps (one or two points per line tell nothing a table does not)
MIN_CHART_STEPS = 3


def _step_section(ctx: RunContext) -> html.Div:
    """Step times: a chart per rank from three steps on; a table below that; what the figures
    cover without steps."""
    steps = ctx.table("temporal", "steps")
    if steps is None or not len(steps):
        return section("Step times", message("No steps in this selection (no ProfilerStep#N or step marker): the "
                                             "figures on this page are for the whole trace."))
    note = "CPU range of each step (ProfilerStep / step marker) and its GPU window."
    if steps["step"].nunique() >= MIN_CHART_STEPS:
        return section("Step times", graph(_step_time_figure(steps, ctx.table("temporal", "breakdown")), "ov-steps"),
                       note=note)
    table = steps.assign(duration_ns=steps["end_ns"] - steps["start_ns"])
    return section("Step times", frame_table(table, "ov-step-table", columns=["rank", "step", "duration_ns"],
                                             rename={"duration_ns": "step time (CPU range)"}, page_size=16),
                   note=f"{steps['step'].nunique()} step(s): too few for a chart. " + note)


def gpu_description(rep: Any) -> str:
    """The accelerators, as the trace describes them: ``8 x AMD Instinct MI300X (AMD, 304 CUs, gfx 9.4,
    206 GB)``; a device the trace does not describe: its vendor when the runtime says it."""
    parts = []
    for g in (rep.get("environment") or {}).get("gpus") or []:
        vendor = g.get("vendor")
        amd = vendor == "AMD"
        name = g.get("model") or (f"{vendor} GPU (model not in the trace)" if vendor else "GPU not described by the "
                                                                                           "trace")
        facts = [vendor] if vendor and g.get("model") and vendor.lower() not in str(g["model"]).lower() else []
        if g.get("sm_count"):
            facts.append(f"{g['sm_count']} {'CUs' if amd else 'SMs'}")
        if g.get("compute_capability"):
            facts.append(f"gfx {g['compute_capability']}" if amd else f"compute {g['compute_capability']}")
        if g.get("memory_bytes"):
            facts.append(fmt_bytes(g["memory_bytes"]))
        count = f"{g['count']} x " if g.get("count", 1) > 1 else ""
        parts.append(f"{count}{name}" + (f" ({', '.join(facts)})" if facts else ""))
    return "; ".join(parts)


def _other_analyses() -> str:
    """The titles of the analyses a partial Overview is waiting for."""
    return ", ".join(spec.title.lower() for spec in analysis_specs() if spec.name != EARLY_ANALYSIS)


def overview_findings(rep: Any, origin_ns: int = 0) -> list[Any]:
    """The Overview's findings section and trust warnings (from the complete report; ``origin_ns``:
    the run's first event, for the timeline links)."""
    top = [f for f in rep["findings"] if f.get("parent") is None][:6]
    body: list[Any] = [finding_card(f, origin_ns=origin_ns) for f in top] or [message("No findings.")]
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
    """Step time per rank (CPU range, solid) and GPU window per rank and device (dotted), in the unit
    the typical step reads best in."""
    import plotly.graph_objects as go

    unit, div, decimals = time_unit(steps["end_ns"] - steps["start_ns"])
    fmt = f"%{{y:.{decimals + 1}f}} {unit}"
    fig = go.Figure()
    for rank, g in steps.groupby("rank"):
        g = g.sort_values("step")
        fig.add_trace(go.Scatter(x=g["step"], y=(g["end_ns"] - g["start_ns"]) / div, mode="lines+markers",
                                 name=f"rank {rank} step (CPU)",
                                 hovertemplate=f"step %{{x}}<br>{fmt}<extra>rank {rank}</extra>"))
    if breakdown is not None and len(breakdown):
        per = breakdown[breakdown["step"].notna()]
        for (rank, dev), g in per.groupby(["rank", "device"]):
            g = g.sort_values("step")
            fig.add_trace(go.Scatter(x=g["step"].astype(int), y=g["window_ns"] / div, mode="lines+markers",
                                     line={"dash": "dot"}, name=f"rank {rank} GPU {dev} window",
                                     hovertemplate=f"step %{{x}}<br>GPU window {fmt}<extra></extra>"))
    fig.update_layout(template="plotly_white", height=340, margin=dict(l=60, r=20, t=30, b=50),
                      legend=dict(orientation="h", y=1.02, yanchor="bottom"), xaxis_title="step",
                      yaxis_title=f"time ({unit})")
    fig.update_xaxes(tickformat="d", dtick=1 if steps["step"].nunique() <= 30 else None)
    return fig


# ------------------------------------------------------------------------------------------ gaps


def gaps(ctx: RunContext) -> list[Any]:
    rep = ctx.report
    g = ctx.table("idle_gaps", "gaps")
    out: list[Any] = warnings_block(ctx, ("idle_gaps",))
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
    out: list[Any] = warnings_block(ctx, ("launch_overhead",))
    for f in finding_rows(rep, "launch_overhead"):
        out.append(finding_card(f))
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
    out: list[Any] = warnings_block(ctx, ("communication",))
    for f in finding_rows(rep, "communication"):
        out.append(finding_card(f))
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


#: kernels drawn in the Kernels page's chart (the largest total first)
TOP_KERNELS_CHART = 15
#: characters of a kernel name on the chart's axis (the hover has the full name)
CHART_NAME_CHARS = 48
#: the aggregate table's columns (``kernel_summary``, docs/metrics.md "Kernel breakdown")
KERNEL_COLUMNS = ["name", "category", "count", "total_ns", "mean_ns", "p50_ns", "p90_ns", "share_pct", "ranks",
                  "min_rank", "min_rank_total_ns", "max_rank", "max_rank_total_ns", "names"]
KERNEL_RENAME = {"share_pct": "share %", "p50_ns": "p50", "p90_ns": "p90", "min_rank": "min rank",
                 "min_rank_total_ns": "min rank total", "max_rank": "max rank",
                 "max_rank_total_ns": "max rank total", "names": "full names", "count": "calls"}


def kernels(ctx: RunContext) -> list[Any]:
    """The Kernels page: the kernels of every rank by normalised name (the report's
    ``kernel_summary``), a chart of the largest, each one's per-rank figures on row select
    (``kernel_ranks``), then categories, tiny kernels and every full name per rank (folded)."""
    out: list[Any] = warnings_block(ctx, ("kernels",))
    summary = ctx.table("kernels", "kernel_summary")
    if summary is None or summary.empty:
        return [*out, message("No GPU activity (kernels, memcpy, memset) in this selection.")]
    ranks = int(summary["ranks"].max())
    out.append(section(f"Largest kernels, over {'all ' + str(ranks) + ' ranks' if ranks > 1 else 'the trace'}",
                       graph(kernel_chart(summary), "kern-chart"),
                       note="Total GPU time of each kernel (instantiations of one kernel under one normalised "
                            "name); hover for the full name, calls and percentiles."))
    note = ("One row per kernel over every rank: p50 and p90 over all its calls; min/max rank: the ranks "
            "with the smallest and the largest total. Select a row for its figures per rank and GPU; hover a "
            "name for the full one. Sort by a header; filter in the row under it (gemm in category, > 1 in "
            "total, nccl in name).")
    out.append(section("Kernels", frame_table(
        summary, "kern-table", columns=KERNEL_COLUMNS, rename=KERNEL_RENAME, page_size=15, filter_=True,
        row_ids=range(len(summary)), tooltips={"name": "full_name"}), html.Div(
        message("Select a kernel in the table to see it per rank and GPU."), id="kern-detail"), note=note))
    cats = _whole(ctx.table("kernels", "categories"))
    if cats is not None and len(cats):
        out.append(section("Categories (whole trace)", frame_table(cats, "kern-categories", page_size=10,
                                                                  columns=["rank", "device", "category", "count",
                                                                           "total_ns", "share_pct"],
                                                                  rename={"share_pct": "share %"})))
    tiny = _whole(ctx.table("kernels", "tiny_kernels"))
    out.append(section("Tiny kernels (< 10 us)", frame_table(tiny, "kern-tiny", page_size=10, empty="No kernels.")))
    per_gpu = ctx.table("kernels", "kernels")
    out.append(html.Details([
        html.Summary(f"Every full kernel name per rank and GPU ({len(per_gpu):,} rows)"),
        frame_table(per_gpu, "kern-full", page_size=15, filter_=True, rename={"share_pct": "share %"},
                    columns=["rank", "device", "name", "category", "kind", "count", "total_ns", "mean_ns", "min_ns",
                             "max_ns", "std_ns", "share_pct"], empty="No GPU activity in this selection."),
    ], style=CARD))
    return out


def short_name(name: str, chars: int = CHART_NAME_CHARS) -> str:
    """``name`` cut in the middle to ``chars`` characters: kernels that differ only at the end (tile
    sizes of ``Cijk_...`` or ``sm90_xmma_gemm_...`` kernels) stay apart."""
    if len(name) <= chars:
        return name
    tail = chars // 3
    return name[: chars - tail - 1] + "…" + name[-tail:]


def kernel_chart(summary: pd.DataFrame) -> Any:
    """Horizontal bars: the total time of the largest kernels (the report's ``kernel_summary``), by
    category, in the unit the largest total reads best in."""
    import plotly.graph_objects as go

    top = summary.head(TOP_KERNELS_CHART).iloc[::-1]  # the largest at the top
    unit, div, _ = time_unit(top["total_ns"])
    labels = [short_name(n) for n in top["name"].astype(str)]
    hover = [f"{full}<br>total {fmt_ns(t)} ({share:.1f}%) · {int(c):,} calls<br>mean {fmt_ns(m)} · p50 {fmt_ns(p50)}"
             f" · p90 {fmt_ns(p90)}<br>ranks {r}: min {fmt_ns(lo)} (rank {lr}), max {fmt_ns(hi)} (rank {hr})"
             for full, t, share, c, m, p50, p90, r, lo, lr, hi, hr in zip(
                 top["full_name"].astype(str).str.slice(0, 400), top["total_ns"], top["share_pct"], top["count"],
                 top["mean_ns"], top["p50_ns"], top["p90_ns"], top["ranks"], top["min_rank_total_ns"],
                 top["min_rank"], top["max_rank_total_ns"], top["max_rank"])]
    fig = go.Figure()
    for category in dict.fromkeys(top["category"].astype(str)):
        sel = (top["category"].astype(str) == category).to_numpy()
        fig.add_trace(go.Bar(
            x=(top["total_ns"].to_numpy()[sel] / div).tolist(), y=[i for i, s in zip(range(len(top)), sel) if s],
            orientation="h", name=category, hovertext=[h for h, s in zip(hover, sel) if s], hoverinfo="text",
            marker_color=CATEGORY_COLORS.get(category, "#95A5A6")))
    fig.update_layout(template="plotly_white", height=120 + 24 * len(top), margin=dict(l=20, r=20, t=30, b=40),
                      barmode="stack", xaxis_title=f"total GPU time ({unit})",
                      legend=dict(orientation="h", y=1.02, yanchor="bottom"))
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(top))), ticktext=labels, automargin=True)
    return fig


#: bar colours of the kernel categories (``analyses/kernels.py`` CATEGORIES)
CATEGORY_COLORS = {"gemm": "#4C78A8", "attention": "#9D755D", "convolution": "#B279A2", "elementwise": "#F58518",
                   "reduction": "#54A24B", "communication": "#E45756", "memory": "#72B7B2", "other": "#BAB0AC"}


def kernel_detail(ctx: RunContext, row: int) -> list[Any]:
    """The figures of the ``row``-th kernel of ``kernel_summary`` per rank and GPU (``kernel_ranks``)."""
    summary = ctx.table("kernels", "kernel_summary")
    if summary is None or not 0 <= row < len(summary):
        return [message(f"row {row} is not a kernel of this selection: the table may be stale; reload the page",
                        "error")]
    name = str(summary["name"].iloc[row])
    per_rank = ctx.table("kernels", "kernel_ranks")
    rows = per_rank[per_rank["name"] == name].sort_values(["rank", "device"]) if len(per_rank) else per_rank
    return [html.Div([html.B(name), html.Span(f" on {len(rows)} GPU(s); full name: ",
                                              style={"color": "#555"}),
                      html.Code(str(summary["full_name"].iloc[row])[:2000], style={"fontSize": "12px"})],
                     className="tv-kernel-name", style={"margin": "8px 0 4px 0", "wordBreak": "break-all"}),
            frame_table(rows, "kern-ranks", page_size=16, rename={"share_pct": "share of GPU %", "count": "calls",
                                                                   "p50_ns": "p50", "p90_ns": "p90"},
                        columns=["rank", "device", "count", "total_ns", "mean_ns", "p50_ns", "p90_ns", "min_ns",
                                 "max_ns", "share_pct"])]


# ------------------------------------------------------------------------------------ efficiency

#: the op-type table's columns on the Efficiency page (the table has a few more: see docs/metrics.md)
EFFICIENCY_COLUMNS = ["rank", "device", "name", "dtype", "unit", "model", "calls", "gpu_ns", "achieved_tflops",
                      "achieved_gbs", "intensity", "bound", "roofline_ns", "efficiency_pct", "above_roofline_ns",
                      "above_roofline_ns_per_step", "roof"]
#: the roll-up table's columns on the Efficiency page
FAMILY_COLUMNS = ["rank", "device", "family", "dtype", "calls", "gpu_ns", "flops", "bytes", "achieved_tflops",
                  "achieved_gbs", "peak_share_pct", "bandwidth_share_pct", "efficiency_pct"]
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
    per_step = per_step_basis(ctx.report)  # without steps every figure is the whole trace's
    out: list[Any] = warnings_block(ctx, ("efficiency",))
    out.extend(finding_card(f) for f in finding_rows(ctx.report, "efficiency"))
    families = ctx.table("efficiency", "families")
    for share in ("peak_share", "bandwidth_share", "efficiency"):
        families = _as_pct(families, share)
    out.append(section("Roll-up: model families and dtypes", frame_table(
        families, "eff-families", columns=FAMILY_COLUMNS, page_size=12, filter_=True,
        rename={"achieved_tflops": "achieved TFLOP/s", "achieved_gbs": "achieved GB/s", "peak_share_pct": "% of peak",
                "bandwidth_share_pct": "% of memory bandwidth", "efficiency_pct": "efficiency %"},
        empty="No op was modelled (see the coverage below)."),
        note="Per rank, GPU, model family (GEMM, attention, conv, norm, elementwise, reduction, copy) and dtype: "
             "FLOPs / peak and bytes / bandwidth over the kernel time of the ops with a verified roof "
             "(docs/metrics.md, Efficiency, Roll-up)."))
    op_types = ctx.table("efficiency", "op_types")
    out.append(section("Roofline: op types against the GPU's peaks", *_roofline_body(ctx, op_types),
                       note="One point per op type (rank, GPU, op, dtype, unit), its area proportional to its GPU "
                            "time; a line per roof: memory bandwidth x intensity up to the ridge point, then the "
                            "dense peak of the dtype (docs/metrics.md, Efficiency)."))
    out.append(section("Op types against the roofline", frame_table(
        _as_pct(op_types, "efficiency"), "eff-op-types", columns=EFFICIENCY_COLUMNS, page_size=15, filter_=True,
        rename={"achieved_tflops": "achieved TFLOP/s", "achieved_gbs": "achieved GB/s",
                "intensity": "FLOP/byte", "efficiency_pct": "efficiency %",
                "above_roofline_ns_per_step": column_label("above_roofline_ns_per_step", per_step) + " (ns)"},
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
    out.append(section(ANALYSES["efficiency"].table("steps").title_for(per_step), frame_table(
        steps, "eff-steps", page_size=12,
        columns=["rank", "device", "step", "window_ns", "modelled_ops", "flops", "achieved_tflops",
                 "compute_roof_ns", "hfu_pct", "roofline_ns", "modelled_gpu_ns", *(["mfu_pct"] if with_mfu else [])],
        rename={"achieved_tflops": "achieved TFLOP/s", "hfu_pct": "HFU %", "mfu_pct": "MFU %"},
        empty="No GPU window."),
        note="HFU = time the modelled FLOPs need at the dtype's peak / the step's GPU window; MFU (with "
             "--model-flops) = the model's FLOPs per step / (peak x window)." if per_step else
             "No steps: one row per rank and GPU, the whole trace. HFU = time the modelled FLOPs need at the dtype's "
             "peak / the GPU window of the whole trace; MFU (with --model-flops) = the model's FLOPs / (peak x "
             "window)."))
    out.extend(_collective_sections(ctx))
    out.extend(measured_page.sections(ctx))
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
        html.Button("Open in Perfetto (download trace JSON)", id="dl-perfetto-btn", n_clicks=0, style=btn,
                    title="Chrome trace JSON of this selection with the findings and gaps as annotation tracks: "
                          "drop it on ui.perfetto.dev"),
        html.Span(" for a bug report: secrets in the trace metadata are redacted.",
                  style={"color": "#666", "fontSize": "13px"}),
    ], style=CARD)
    cards: list[Any] = [finding_card(f, origin_ns=ctx.origin_ns) for f in rep["findings"]]
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
    out: list[Any] = warnings_block(ctx, (analysis,))
    cards: list[Any] = [finding_card(f) for f in finding_rows(ctx.report, analysis)]
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
    "critical_path": critical_path_page.page,
    "modules": modules_page.page,
}


def analysis_page(ctx: RunContext, analysis: str) -> list[Any]:
    """The page of one analysis: its hand-made view, or the generic one."""
    view = ANALYSIS_VIEWS.get(analysis)
    return view(ctx) if view is not None else generic(ctx, analysis)
