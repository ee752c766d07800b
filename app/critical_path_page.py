"""The Critical path page: what bounds each step and what the step could be, from the
``critical_path`` analysis's tables and the report's summary keys (docs/metrics.md, "Critical
path"); nothing here computes a path, a share or a what-if time.

* the headline: median step on the path, what bounds it, the achievable step (summary keys);
* **what-if**: per scenario the step time, the what-if step time, the saving and what the scenario
  assumes (the ``whatif`` table's mean rows, ``step`` missing), as a chart and a table; the
  per-step rows folded below;
* **composition**: one stacked bar per step and rank (the ``steps`` table's ``*_ns`` columns), its
  ``bound_by`` and ``bound_share`` written over it;
* the steps, the top contributors, the analysis's findings, and the edges it used (folded).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from dash import dcc, html

from traceview.render.common import BOUND_TEXT
from traceview.units import fmt_ns, fmt_share

from .components import CARD, frame_table, graph, message, section, stat_cards, time_unit
from .critical_path import ANALYSIS, COLOR
from .features import figures
from .runs import RunContext

#: the segment categories in the order they stack (host, then GPU, then communication), with
#: their labels and colours (those of the timeline and the reports where the class is the same)
CATEGORIES: tuple[tuple[str, str, str], ...] = (
    ("host_compute", "host compute", figures.COLORS.get("cpu_op", "#72B7B2")),
    ("host_untraced", "untraced host time", "#A0A0A0"),
    ("launch_overhead", "launch overhead", figures.COLORS.get("launch_latency", "#EECA3B")),
    ("sync", "synchronisation", figures.COLORS.get("sync_bound", "#B279A2")),
    ("gpu_compute", "GPU compute", figures.COLORS.get("compute", "#4C78A8")),
    ("memory", "memory copies", figures.COLORS.get("memory", "#54A24B")),
    ("gpu_wait", "GPU waits", figures.COLORS.get("idle", "#BAB0AC")),
    ("communication", "communication", figures.COLORS.get("communication", "#F58518")),
    ("waiting_on_rank", "waiting on another rank", figures.COLORS.get("host_bound", "#E45756")),
    ("unlinked", "no known predecessor", figures.COLORS.get("other", "#C7C7C7")),
)
SCENARIOS = {
    "comm_overlapped": "communication fully overlapped",
    "no_host_overhead": "no host overhead",
    "roofline": "kernels at their roofline time",
    "median_rank": "slowest rank as fast as the median",
    "achievable": "achievable (all of them together)",
}
#: most step bars in the composition chart (the first by rank and step; the table has them all)
MAX_STEP_BARS = 240
#: most ranks drawn in the what-if chart (the table has them all)
MAX_CHART_RANKS = 8


def page(ctx: RunContext) -> list[Any]:
    """The page of the critical_path analysis."""
    from .pages import finding_rows, warnings_block, finding_card

    rep = ctx.report
    if ANALYSIS not in rep["analyses"]:
        return [message("The critical path was not computed for this selection (the analysis gave no results).")]
    out: list[Any] = warnings_block(ctx, (ANALYSIS,))
    steps = numbers(ctx.table(ANALYSIS, "steps"))
    whatif = numbers(ctx.table(ANALYSIS, "whatif"))
    if not len(steps):
        out.append(message("No critical path in this selection: it needs GPU activity (kernels, copies) and the "
                           "host events that launched it."))
        return out
    out.append(_headline(rep))
    out.append(html.Div(dcc.Link("show the critical path on the timeline", href="/timeline",
                                 style={"color": COLOR}), style={"margin": "0 0 10px 2px", "fontSize": "14px"}))
    out.extend(whatif_sections(whatif))
    out.append(composition_section(steps))
    out.append(section("Steps", html.Div(id="cp-step-msg"), frame_table(
        _as_pct(steps, "bound_share"), "cp-steps", page_size=15, filter_=True, tooltips={"top_name": "top_name"},
        row_ids=steps.index.tolist(),
        columns=["rank", "step", "step_ns", "path_ns", "bound_by", "bound_share_pct", "top_name", "top_ns",
                 "achievable_ns"], rename={"bound_share_pct": "bound share %", "top_name": "top event on the path",
                                           "top_ns": "its time on the path"}),
        note="One row per rank and step (step blank: the whole trace of a rank without steps). The path's "
             "length equals the step's time. Click a row to see that step's path on the timeline."))
    contributors = numbers(ctx.table(ANALYSIS, "contributors"))
    out.append(section("Top contributors to the path (whole trace)", frame_table(
        _as_pct(contributors, "share"), "cp-contributors", page_size=15, filter_=True,
        columns=["rank", "category", "name", "path_ns", "count", "share_pct"],
        rename={"share_pct": "share of the path %"}, tooltips={"name": "name"})))
    cards: list[Any] = [finding_card(f, origin_ns=ctx.origin_ns) for f in finding_rows(rep, ANALYSIS)]
    out.append(section("Findings", *(cards or [message("No findings.")])))
    edges = ctx.table(ANALYSIS, "edges")
    if len(edges):
        out.append(html.Details([html.Summary("Edges of the dependency graph (recorded and inferred)"),
                                 frame_table(edges, "cp-edges", page_size=20)], style=CARD))
    return out


def _headline(rep: Any) -> html.Div:
    """The summary's critical-path figures as cards (the report's keys, as the terminal prints them)."""
    s = rep.get("summary", {})
    bound = s.get("critical_path_bound_by")
    share = s.get("critical_path_bound_share")
    return stat_cards([
        ("critical path, median step", fmt_ns(s.get("critical_path_step_ns")),
         f"{s.get('critical_path_steps')} step row(s)" if s.get("critical_path_steps") is not None else None),
        ("bound by", BOUND_TEXT.get(str(bound), str(bound)) if bound else "-",
         f"{fmt_share(share)} of the path" if share is not None else None),
        ("achievable step", fmt_ns(s.get("achievable_step_ns")), "all what-if scenarios together"),
    ])


def numbers(frame: pd.DataFrame) -> pd.DataFrame:
    """The table with its times, shares, ranks and counts as numbers: a column of Python ints
    (object dtype) would be shown and sorted as text, and charted not at all."""
    if frame is None or not len(frame):
        return frame
    cols = [c for c in frame.columns if (str(c).endswith(("_ns", "_share")) or c in ("rank", "count", "binding"))
            and frame[c].dtype == object]
    return frame.assign(**{c: pd.to_numeric(frame[c], errors="coerce") for c in cols}) if cols else frame


def _as_pct(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """Shares (0..1) of these columns as ``<column>_pct`` (x100 for reading, not a new metric)."""
    if frame is None or not len(frame):
        return frame
    return frame.assign(**{f"{c}_pct": 100.0 * pd.to_numeric(frame[c], errors="coerce")
                           for c in columns if c in frame.columns})


def _scenario_label(name: Any) -> str:
    return SCENARIOS.get(str(name), str(name))


def whatif_sections(whatif: pd.DataFrame) -> list[Any]:
    """The what-if chart and table (the mean rows: ``step`` missing) and the per-step rows, folded."""
    if whatif is None or not len(whatif):
        return [section("What if", message("No what-if rows in this selection."))]
    whatif = numbers(whatif)
    step = whatif["step"] if "step" in whatif else pd.Series([None] * len(whatif))
    mean = whatif[step.isna().to_numpy()].reset_index(drop=True)
    per_step = whatif[step.notna().to_numpy()].reset_index(drop=True)
    table = _as_pct(mean, "saving_share", "modelled_share")
    table = table.assign(scenario=[_scenario_label(x) for x in table["scenario"]]) if len(table) else table
    columns = ["rank", "scenario", "step_ns", "whatif_ns", "saving_ns", "saving_share_pct",
               "modelled_share_pct", "assumption"]
    rename = {"whatif_ns": "what-if step", "saving_ns": "saving",
              "saving_share_pct": "saving %", "modelled_share_pct": "modelled %", "step_ns": "step"}
    out: list[Any] = [section(
        "What if: the step time under each scenario",
        graph(whatif_figure(mean), "cp-whatif-chart") if len(mean) else message("No mean rows to chart."),
        frame_table(table, "cp-whatif", columns=columns, rename=rename, page_size=20, filter_=True,
                    style_cell={"maxWidth": "520px"}, empty="No mean what-if rows."),
        note="Mean over each rank's steps. Each scenario recomputes the longest path with changed edge "
             "lags (see the assumption); the saving is the step time it would no longer take.")]
    if len(per_step):
        per = _as_pct(per_step, "saving_share", "modelled_share")
        per = per.assign(scenario=[_scenario_label(x) for x in per["scenario"]])
        out.append(html.Details([html.Summary(f"What if, per step ({len(per):,} rows)"),
                                 frame_table(per, "cp-whatif-steps", columns=["rank", "step"] + columns[1:-1],
                                             rename=rename, page_size=20, filter_=True)], style=CARD))
    return out


def whatif_figure(mean: pd.DataFrame) -> Any:
    """Per scenario (a row), the what-if step time of each rank (a bar) and its step time (a tick)."""
    import plotly.graph_objects as go

    unit, div, decimals = time_unit(pd.concat([mean["step_ns"], mean["whatif_ns"]]))
    order = [s for s in SCENARIOS if s in set(mean["scenario"])] + sorted(set(mean["scenario"]) - set(SCENARIOS))
    labels = [_scenario_label(s) for s in order]
    fig = go.Figure()
    ranks = sorted(mean["rank"].unique().tolist())[:MAX_CHART_RANKS]
    for rank in ranks:
        g = mean[mean["rank"] == rank].set_index("scenario").reindex(order)
        custom = [[fmt_ns(st), fmt_ns(sv), str(a)[:160]] for st, sv, a in zip(g["step_ns"], g["saving_ns"],
                                                                          g["assumption"])]
        fig.add_trace(go.Bar(y=labels, x=g["whatif_ns"] / div, orientation="h", name=f"rank {rank}: what-if",
                             customdata=custom,
                             hovertemplate=(f"%{{y}}<br>what-if step %{{x:.{decimals + 1}f}} {unit}<br>step "
                                            "%{customdata[0]} · saving %{customdata[1]}<br>%{customdata[2]}"
                                            f"<extra>rank {rank}</extra>")))
        fig.add_trace(go.Scatter(y=labels, x=g["step_ns"] / div, mode="markers", name="step time (each rank)",
                                 marker={"symbol": "line-ns-open", "size": 16, "line": {"width": 2}, "color": "#333"},
                                 showlegend=rank == ranks[0], hoverinfo="skip"))
    fig.update_layout(template="plotly_white", barmode="group", height=120 + 34 * len(order) * max(1, len(ranks)) // 2,
                      margin=dict(l=240, r=20, t=30, b=50), xaxis_title=f"step time ({unit})",
                      legend=dict(orientation="h", y=1.02, yanchor="bottom"))
    fig.update_yaxes(autorange="reversed")
    return fig


def composition_section(steps: pd.DataFrame) -> html.Div:
    """The composition of each step's path as stacked bars, what bounds it written on top."""
    shown = numbers(steps).sort_values(["rank", "step"], na_position="last", kind="stable").head(MAX_STEP_BARS)
    note = ("Each step's critical path by what its time is spent on; the label says what bounds the step "
            "(host, GPU or communication) and that group's share of the path.")
    if len(steps) > MAX_STEP_BARS:
        note += f" The first {MAX_STEP_BARS} of {len(steps):,} step rows are drawn (all are in the table below)."
    return section("Composition of each step's critical path", graph(composition_figure(shown), "cp-composition"),
                   note=note)


def _bar_label(rank: Any, step: Any) -> str:
    return f"r{rank} · " + ("whole trace" if pd.isna(step) else f"step {int(step)}")


def composition_figure(steps: pd.DataFrame) -> Any:
    """One stacked bar per (rank, step) of the ``steps`` table's categories, in the unit its typical
    path reads best in; ``bound_by`` and ``bound_share`` written over each bar."""
    import plotly.graph_objects as go

    unit, div, decimals = time_unit(steps["path_ns"])
    x = [_bar_label(r, s) for r, s in zip(steps["rank"], steps["step"])]
    fig = go.Figure()
    for key, label, color in CATEGORIES:
        col = f"{key}_ns"
        if col not in steps or not (pd.to_numeric(steps[col], errors="coerce").fillna(0) > 0).any():
            continue  # a category with no time on any path: no legend entry
        fig.add_trace(go.Bar(x=x, y=pd.to_numeric(steps[col], errors="coerce").fillna(0) / div, name=label,
                             marker_color=color,
                             hovertemplate=f"%{{x}}<br>{label} %{{y:.{decimals + 1}f}} {unit}<extra></extra>"))
    bound = [f"{b} {fmt_share(sh, 0)}" if isinstance(b, str) else "" for b, sh in zip(steps["bound_by"],
                                                                                      steps["bound_share"])]
    fig.add_trace(go.Scatter(x=x, y=pd.to_numeric(steps["path_ns"], errors="coerce") / div, mode="text", text=bound,
                             textposition="top center", textfont={"size": 10, "color": "#333"}, name="bound by",
                             showlegend=False, hoverinfo="skip", cliponaxis=False))
    fig.update_layout(template="plotly_white", barmode="stack", height=420, margin=dict(l=60, r=20, t=40, b=110),
                      yaxis_title=f"path ({unit})", legend=dict(orientation="h", y=1.08, yanchor="bottom"),
                      bargap=0.25)
    fig.update_xaxes(tickangle=-45, type="category")
    return fig


def step_search(ctx: RunContext, row_id: int) -> str:
    """The timeline's query string for the step at ``row_id`` of the ``steps`` table: its window
    (a little wider), the step highlighted, its rank opened. Raises ``BadValue`` for a row that is
    not in this selection's table."""
    from .validate import BadValue

    steps = ctx.table(ANALYSIS, "steps")
    if row_id not in steps.index:
        raise BadValue(f"row {row_id} is not a step of this selection: the table may be stale; reload the page")
    row = steps.loc[row_id]
    a, b = int(row["start_ns"]) - ctx.origin_ns, int(row["end_ns"]) - ctx.origin_ns
    pad = max((b - a) // 50, 1_000)
    return f"?t0={a - pad}&t1={b + pad}&f0={a}&f1={b}&r={int(row['rank'])}"


def overview_line(rep: Any) -> list[Any]:
    """The Overview's line on the critical path (the report's summary keys, as the terminal's first
    screen says it), a link to its page; nothing without them (no GPU activity, a partial report)."""
    from traceview.registry import ANALYSES

    from .critical_path import summary_text
    from .pages import generic_path

    text = summary_text(rep)
    if not text:
        return []
    spec = ANALYSES.get(ANALYSIS)
    href = spec.page[0] if spec is not None and spec.page else generic_path(ANALYSIS)
    return [html.Div([dcc.Link(text, href=href, id="ov-critical-path", style={"color": COLOR}),
                      html.Span(" · what bounds each step, and what-if step times",
                                style={"color": "#666", "fontSize": "13px"})],
                     style={**CARD, "fontSize": "15px"})]
