"""The critical path in the app, server side: the overlay drawn from the ``segments`` table on the
lanes it names (app/critical_path.py: outlines merged per pixel, connectors between lanes, the point
budget), the timeline's "critical path" switch through the controller (on by default, off and on
again, kept across zooms, hostile values), and the Critical path page (what-if table and chart,
composition per step) from the ``whatif`` and ``steps`` tables.

Until the critical_path analysis is on main, the report's tables are synthetic, built here by the
contract (/work/lead/critical_path_spec.md) from the events of ``sample_traces/synthetic_4rank``;
the browser side is tests/browser/test_app_critical_path_browser.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import dash
import numpy as np
import pandas as pd
import pytest

pytest.importorskip("dash")

from traceview.app import critical_path as cp  # noqa: E402
from traceview.app.runs import RunContext  # noqa: E402
from traceview.app.server import create_app  # noqa: E402
from traceview.app.timeline import CPU_LANE, GPU_LANE, SHAPE_BUDGET, Lane, count_shapes  # noqa: E402
from traceview.app.validate import BadValue  # noqa: E402
from traceview.app.views import AppController  # noqa: E402
from traceview.model import Kind, Trace  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "synthetic_4rank"
CATEGORY_COLUMNS = ("host_compute", "host_untraced", "launch_overhead", "sync", "gpu_compute", "memory",
                    "communication", "gpu_wait", "waiting_on_rank")


# ------------------------------------------------------------------------------ synthetic tables


def synthetic_segments(trace: Trace, kernels_per_rank: int = 60) -> pd.DataFrame:
    """A chain per rank as the contract's ``segments`` table: host time on the thread that launches
    most (from the previous kernel's end to the next kernel's start), then the kernel on its stream;
    kernels overlapping the chain are skipped, so the segments of a rank touch end to start."""
    kinds, rank_col = trace.kind_codes(), trace.column("rank")
    start, end = trace.column("start_ns"), trace.column("start_ns") + trace.column("dur_ns")
    rows: list[dict[str, Any]] = []
    for r in sorted(set(rank_col.tolist())):
        runtime = np.flatnonzero((rank_col == r) & (kinds == int(Kind.RUNTIME)))
        tid = int(np.bincount(trace.column("tid")[runtime] - trace.column("tid")[runtime].min()).argmax()
                  + trace.column("tid")[runtime].min())
        kern = np.flatnonzero((rank_col == r) & (kinds == int(Kind.KERNEL)))
        kern = kern[np.argsort(start[kern], kind="stable")]
        t = int(start[runtime].min())
        for k in kern.tolist():
            if len([x for x in rows if x["rank"] == r]) >= 2 * kernels_per_rank:
                break
            if start[k] <= t:
                continue
            rows.append(dict(rank=r, step=0, start_ns=t, end_ns=int(start[k]), category="host_compute", name="host",
                             row=-1, tid=tid, device=-1, stream=-1))
            rows.append(dict(rank=r, step=0, start_ns=int(start[k]), end_ns=int(end[k]), category="gpu_compute",
                             name="kernel", row=k, tid=-1, device=int(trace.column("device")[k]),
                             stream=int(trace.column("stream")[k])))
            t = int(end[k])
    out = pd.DataFrame(rows)
    return out.assign(dur_ns=out["end_ns"] - out["start_ns"])


def synthetic_steps(segments: pd.DataFrame) -> pd.DataFrame:
    """The contract's ``steps`` table of those chains (one whole window per rank)."""
    rows = []
    for r, g in segments.groupby("rank"):
        by_cat = g.groupby("category")["dur_ns"].sum()
        path = int(g["dur_ns"].sum())
        cats = {f"{c}_ns": int(by_cat.get(c, 0)) for c in CATEGORY_COLUMNS}
        host = cats["host_compute_ns"]
        rows.append(dict(rank=r, step=pd.NA, start_ns=int(g["start_ns"].min()), end_ns=int(g["end_ns"].max()),
                         step_ns=path, path_ns=path, **cats, bound_by="host" if host * 2 > path else "gpu",
                         bound_share=max(host, path - host) / path, top_name="kernel", top_ns=cats["gpu_compute_ns"],
                         achievable_ns=path // 2))
    return pd.DataFrame(rows)


def synthetic_whatif(steps: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for s in steps.itertuples():
        for i, scenario in enumerate(("comm_overlapped", "no_host_overhead", "roofline", "median_rank",
                                      "achievable")):
            saving = int(s.step_ns) * i // 10
            rows.append(dict(rank=s.rank, step=pd.NA, scenario=scenario, step_ns=int(s.step_ns),
                             whatif_ns=int(s.step_ns) - saving, saving_ns=saving, saving_share=saving / s.step_ns,
                             modelled_share=0.5 if scenario in ("roofline", "achievable") else float("nan"),
                             assumption=f"assumption of {scenario}"))
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def ctl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppController]:
    """The app on the 4-rank sample, its report's critical_path tables synthetic (while the
    analysis is not on main, or when its report has none)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    app = create_app([str(SAMPLE)], warm=False)
    controller: AppController = app.traceview_controller  # type: ignore[attr-defined]
    use_synthetic_tables(mp, controller)
    yield controller
    mp.undo()


def use_synthetic_tables(mp: pytest.MonkeyPatch, controller: AppController) -> None:
    """Give every report of the controller's first run the synthetic critical_path tables when its
    own report has no segments (the analysis is not on this branch, or found no path)."""
    ctx = controller._context(0)  # noqa: SLF001
    if len(ctx.table(cp.ANALYSIS, cp.SEGMENTS)):
        return
    segments = synthetic_segments(ctx.full)
    steps = synthetic_steps(segments)
    tables = {"segments": segments, "steps": steps, "whatif": synthetic_whatif(steps)}
    original = RunContext.table

    def table(self: RunContext, analysis: str, name: str) -> pd.DataFrame:
        if analysis == cp.ANALYSIS and name in tables:
            return tables[name]
        return original(self, analysis, name)

    mp.setattr(RunContext, "table", table)


# ------------------------------------------------------------------------------------ the overlay


def _lanes() -> list[cp.LaneRow]:
    """A thread lane (rank 0, tid 5), two stream lanes (rank 0, GPU 0, streams 7 and 8)."""
    return [cp.LaneRow(Lane(CPU_LANE, 0, -1, 5, "r0 · thread 5"), 0.5, 0.5),
            cp.LaneRow(Lane(GPU_LANE, 0, 0, 7, "r0 · GPU 0 · stream 7"), 1.5, 0.5),
            cp.LaneRow(Lane(GPU_LANE, 0, 0, 8, "r0 · GPU 0 · stream 8"), 2.5, 0.5)]


def _segments(*rows: tuple[int, int, int, int, int]) -> pd.DataFrame:
    """(start, end, tid, device, stream) rows of rank 0."""
    frame = pd.DataFrame(rows, columns=["start_ns", "end_ns", "tid", "device", "stream"])
    return frame.assign(rank=0, step=0, category="x", name="x", row=-1, dur_ns=frame["end_ns"] - frame["start_ns"])


def _outline_rects(drawn: cp.Drawn) -> list[tuple[float, float, float, float]]:
    """(x0, x1, y top, y bottom) of each outline the overlay drew."""
    tr = next(t for t in drawn.traces if t["name"] == "critical path" and t["mode"] == "lines")
    xs, ys = tr["x"], tr["y"]
    assert len(xs) % 6 == 0 and all(v is None for v in xs[5::6])
    return [(xs[i], xs[i + 1], ys[i], ys[i + 2]) for i in range(0, len(xs), 6)]


def _connectors(drawn: cp.Drawn) -> list[tuple[float, float, float]]:
    tr = [t for t in drawn.traces if t["name"] == "critical path (lane change)"]
    if not tr:
        return []
    xs, ys = tr[0]["x"], tr[0]["y"]
    return [(xs[i], ys[i], ys[i + 1]) for i in range(0, len(xs), 3)]


def test_segments_are_drawn_on_their_lanes_with_connectors() -> None:
    seg = _segments((0, 100_000, 5, -1, -1), (100_000, 300_000, -1, 0, 7), (300_000, 400_000, 5, -1, -1),
                    (400_000, 450_000, -1, 0, 8))
    drawn = cp.draw(cp.PathIndex.build(seg), _lanes(), 0, 1_000_000, 0)
    rects = _outline_rects(drawn)
    # thread lane (y 0..1), stream 7 (1..2), thread again, stream 8 (2..3); ms since the origin 0
    assert [(a, b) for a, b, _, _ in rects] == [(0.0, 0.1), (0.3, 0.4), (0.1, 0.3), (0.4, 0.45)]
    lanes_y = [round((t + b) / 2, 3) for _, _, t, b in rects]
    assert lanes_y == [0.5, 0.5, 1.5, 2.5]
    # the path moves thread -> stream 7 at 0.1 ms, back at 0.3 ms, then to stream 8 at 0.4 ms
    assert _connectors(drawn) == [(0.1, 0.5, 1.5), (0.3, 1.5, 0.5), (0.4, 0.5, 2.5)]
    assert drawn.points == 5 * 4 + 2 * 3 == count_shapes({"data": drawn.traces, "layout": {}})
    assert any(t.get("showlegend") and t["name"] == "critical path" for t in drawn.traces)
    assert all(t["hoverinfo"] == "skip" for t in drawn.traces)  # clicks stay with the events


def test_narrow_segments_merge_wide_ones_stay_apart_and_the_window_clips() -> None:
    # 1,000 back-to-back segments of 1 us on stream 7: in a 10 ms window (~9 us a pixel) one outline
    seg = _segments(*[(i * 1_000, (i + 1) * 1_000, -1, 0, 7) for i in range(1_000)])
    index = cp.PathIndex.build(seg)
    rects = _outline_rects(cp.draw(index, _lanes(), 0, 10_000_000, 0))
    assert [(a, b) for a, b, _, _ in rects] == [(0.0, 1.0)]
    # zoomed to 20 us (a pixel ~ 18 ns): one outline per segment, the window's ends clipped
    rects = _outline_rects(cp.draw(index, _lanes(), 500_500, 520_500, 0))
    assert len(rects) == 21 and rects[0][0] == pytest.approx(0.5005) and rects[-1][1] == pytest.approx(0.5205)


def test_the_point_budget_keeps_the_widest_outlines() -> None:
    # 400 separated segments of growing length: a budget of 100 points keeps 20 outlines, the widest
    seg = _segments(*[(i * 100_000, i * 100_000 + 1_000 + 100 * i, -1, 0, 7) for i in range(400)])
    drawn = cp.draw(cp.PathIndex.build(seg), _lanes(), 0, 40_000_000, 0, point_budget=100)
    rects = _outline_rects(drawn)
    assert drawn.points <= 100 and len(rects) == 20
    assert [round(a * 1e6 / 100_000) for a, *_ in rects] == list(range(380, 400))
    assert "the 20 widest of 400" in drawn.text


def test_segments_on_lanes_not_drawn_are_counted_not_drawn() -> None:
    seg = _segments((0, 100, 5, -1, -1), (100, 200, -1, 0, 9), (200, 300, 6, -1, -1), (300, 400, -1, -1, -1))
    index = cp.PathIndex.build(seg)
    assert index.off_lane == 1 and index.total == 4
    drawn = cp.draw(index, _lanes(), 0, 1_000, 0)
    assert len(_outline_rects(drawn)) == 1 and _connectors(drawn) == []
    assert "3 segment(s) in the window, 1 on the lanes drawn" in drawn.text and "2 on lanes not drawn" in drawn.text


def test_a_table_without_the_lane_columns_says_so() -> None:
    drawn = cp.draw(cp.PathIndex.build(pd.DataFrame({"rank": [0], "start_ns": [0], "end_ns": [5]})),
                    _lanes(), 0, 10, 0)
    assert drawn.traces == [] and "no column tid, device, stream" in drawn.text


@pytest.mark.parametrize("value", ["on", ["off"], ["on", "on"], [1], {"a": 1}, 1e303, "x" * 500])
def test_the_switch_takes_on_or_nothing(value: Any) -> None:
    from traceview.app.validate import switch

    with pytest.raises(BadValue, match="critical path"):
        switch(value, "critical path", cp.TOGGLE_ON)
    assert switch([cp.TOGGLE_ON], "x", cp.TOGGLE_ON) and not switch([], "x", cp.TOGGLE_ON)


# ------------------------------------------------------------------------------------ the timeline


def _by_id(tree: Any, ident: str) -> Any:
    if getattr(tree, "id", None) == ident:
        return tree
    children = tree if isinstance(tree, list) else getattr(tree, "children", None)
    if children is None or isinstance(children, str):
        return None
    for c in children if isinstance(children, list) else [children]:
        hit = _by_id(c, ident)
        if hit is not None:
            return hit
    return None


def _path_rects(fig: dict) -> list[tuple[float, float, float, float]]:
    return _outline_rects(cp.Drawn([t for t in fig["data"] if t.get("name", "").startswith("critical path")]))


def _lane_y(fig: dict) -> dict[str, float]:
    y = fig["layout"]["yaxis"]
    return dict(zip(y["ticktext"], y["tickvals"]))


def test_the_timeline_draws_the_reports_path_on_its_lanes(ctl: AppController) -> None:
    body, _ = ctl.render_page("/timeline", "", 0)
    fig, state = _by_id(body, "tl-graph").figure, _by_id(body, "tl-window").data
    assert _by_id(body, cp.TOGGLE_ID).value == [cp.TOGGLE_ON]  # on by default
    ctx = ctl._context(0)  # noqa: SLF001
    seg = ctx.table(cp.ANALYSIS, cp.SEGMENTS)
    rects = _path_rects(fig)
    assert rects and "critical path:" in _by_id(body, "tl-stats").children
    assert "critical path" in [e[0] for e in fig["layout"]["meta"]["legend"]]
    # every outline lies on the lane of a segment it covers: its centre is that lane's
    lanes = _lane_y(fig)
    o = ctx.origin_ns
    for a, b, top, bot in rects:
        mid_ns = o + (a + b) / 2 * 1e6
        under = seg[(seg["start_ns"] <= mid_ns + 1e4) & (seg["end_ns"] >= mid_ns - 1e4)]
        labels = {f"r{s.rank} · thread {s.tid}" if s.tid >= 0 else f"r{s.rank} · GPU {s.device} · stream {s.stream}"
                  for s in under.itertuples()}
        ys = {round(y, 4) for lab, y in lanes.items() if any(lab.startswith(x) for x in labels)}
        assert round((top + bot) / 2, 4) in ys, (a, b, labels)
    assert count_shapes(fig) <= SHAPE_BUDGET
    assert state.get("cp", True) is True


def test_the_switch_hides_and_shows_the_path_and_survives_a_zoom(ctl: AppController) -> None:
    body, _ = ctl.render_page("/timeline", "", 0)
    state = _by_id(body, "tl-window").data
    off = ctl.timeline_action(f"{cp.TOGGLE_ID}.value", None, None, state, 0, path_value=[])
    fig, state = off[0], off[1]
    assert state["cp"] is False and _path_rects_or_none(fig) is None and "critical path" not in off[2]
    zoomed = ctl.timeline_action("tl-zoom-in.n_clicks", None, None, state, 0)
    assert zoomed[1]["cp"] is False and _path_rects_or_none(zoomed[0]) is None
    on = ctl.timeline_action(f"{cp.TOGGLE_ID}.value", None, None, zoomed[1], 0, path_value=[cp.TOGGLE_ON])
    assert on[1]["cp"] is True and _path_rects(on[0])
    assert on[1]["t0"] == zoomed[1]["t0"] and on[1]["t1"] == zoomed[1]["t1"]  # the window stays


def _path_rects_or_none(fig: dict) -> Any:
    return next((t for t in fig["data"] if t.get("name", "").startswith("critical path")), None)


@pytest.mark.parametrize("value", ["on", ["off"], [1, 2], {"a": 1}, 1e303, float("nan"), "x" * 500])
def test_hostile_switch_values_get_a_message(ctl: AppController, value: Any) -> None:
    body, _ = ctl.render_page("/timeline", "", 0)
    state = _by_id(body, "tl-window").data
    for out in (ctl.timeline_action(f"{cp.TOGGLE_ID}.value", None, None, state, 0, path_value=value),
                ctl.timeline_action("tl-zoom-in.n_clicks", None, None, {**state, "cp": value}, 0)):
        assert out[0] is dash.no_update and ("critical path:" in out[2] or "timeline state cp:" in out[2]), out[2]


# ------------------------------------------------------------------------------------ the page


def _sections(ctl: AppController) -> tuple[list[Any], pd.DataFrame, pd.DataFrame]:
    """The page's body (through the navigation once the analysis declares its page, else its
    sections from the report's tables), with the ``whatif`` and ``steps`` tables."""
    from traceview.app import critical_path_page as page
    from traceview.app.pages import page_list

    ctx = ctl._context(0)  # noqa: SLF001
    whatif, steps = ctx.table(cp.ANALYSIS, "whatif"), ctx.table(cp.ANALYSIS, "steps")
    path = next((p.path for p in page_list() if p.analysis == cp.ANALYSIS), None)
    if path is not None:
        body, _ = ctl.render_page(path, "", 0)
    else:  # the analysis is not registered on this branch: its sections, from the same tables
        body = [*page.whatif_sections(whatif), page.composition_section(steps)]
    return body, whatif, steps


def test_the_whatif_panel_lists_every_scenario_with_its_assumption(ctl: AppController) -> None:
    from traceview.app.critical_path_page import SCENARIOS

    body, whatif, _ = _sections(ctl)
    table = _by_id(body, "cp-whatif")
    mean = whatif[whatif["step"].isna()]
    assert len(table.data) == len(mean)
    assert {r["scenario"] for r in table.data} == {SCENARIOS[s] for s in mean["scenario"]}
    assert [r["assumption"] for r in table.data] == mean["assumption"].tolist()
    chart = _by_id(body, "cp-whatif-chart").figure
    bars = [t for t in chart.data if t.type == "bar"]
    shown = mean[mean["rank"].isin(sorted(mean["rank"].unique())[:8])]
    assert sorted(np.round(np.concatenate([b.x for b in bars]), 6)) == sorted(
        np.round(shown["whatif_ns"].to_numpy(np.float64) / _scale(chart), 6))


def test_the_composition_is_a_stacked_bar_per_step_labelled_with_its_bound(ctl: AppController) -> None:
    body, _, steps = _sections(ctl)
    comp = _by_id(body, "cp-composition").figure
    stacked = [t for t in comp.data if t.type == "bar"]
    ordered = steps.sort_values(["rank", "step"], na_position="last", kind="stable")
    assert comp.layout.barmode == "stack" and len(stacked[0].x) == len(steps)
    totals = np.sum([np.asarray(t.y, dtype=float) for t in stacked], axis=0)  # each bar adds up to its path
    assert totals == pytest.approx(ordered["path_ns"].to_numpy() / _scale(comp, "y"))
    on_top = next(t for t in comp.data if t.type == "scatter").text
    assert all(text.startswith(str(b) + " ") for b, text in zip(ordered["bound_by"], on_top))


def test_the_page_is_in_the_navigation(ctl: AppController) -> None:
    from traceview.registry import ANALYSES

    if cp.ANALYSIS not in ANALYSES:
        pytest.skip("the critical_path analysis is not on this branch yet")
    from traceview.app.pages import page_list

    page = next(p for p in page_list() if p.analysis == cp.ANALYSIS)
    body, _ = ctl.render_page(page.path, "", 0)
    assert _by_id(body, "cp-whatif") is not None and _by_id(body, "cp-composition") is not None
    assert _by_id(body, "cp-steps") is not None


def _scale(fig: Any, axis: str = "x") -> float:
    """ns per unit of a chart's time axis, from its title ('... (ms)')."""
    title = (fig.layout.xaxis if axis == "x" else fig.layout.yaxis).title.text
    return {"(s)": 1e9, "(ms)": 1e6, "(us)": 1e3, "(ns)": 1.0}[title[title.rindex("("):]]


def test_a_step_row_opens_the_timeline_on_that_step(ctl: AppController) -> None:
    ctx = ctl._context(0)  # noqa: SLF001
    steps = ctx.table(cp.ANALYSIS, "steps")
    row_id = int(steps.index[-1])
    step = steps.loc[row_id]
    pathname, search, msg = ctl.step_clicked({"row": 0, "column": 0, "row_id": row_id}, 0)
    assert pathname == "/timeline" and msg is None
    body, _ = ctl.render_page(pathname, search, 0)
    state = _by_id(body, "tl-window").data
    o = ctx.origin_ns
    assert state["open"] == [int(step["rank"])]
    assert state["f0"] == int(step["start_ns"]) - o and state["f1"] == int(step["end_ns"]) - o  # highlighted
    assert state["t0"] <= state["f0"] < state["f1"] <= state["t1"]
    assert (state["t1"] - state["t0"]) < 1.1 * (state["f1"] - state["f0"]) + 2_000
    assert _path_rects(_by_id(body, "tl-graph").figure)  # the step's path drawn


@pytest.mark.parametrize("cell", ["/etc/passwd", 1e303, {"row_id": -1}, {"row_id": "abc"}, {"row_id": 10**9},
                                  {"row_id": float("inf")}, [1]])
def test_hostile_step_clicks_get_a_message(ctl: AppController, cell: Any) -> None:
    pathname, search, msg = ctl.step_clicked(cell, 0)
    assert pathname is dash.no_update and search is dash.no_update
    assert msg is not None and ("row" in str(msg.children) or "cell" in str(msg.children))


def test_the_summary_line_reads_the_reports_keys() -> None:
    summary = {"critical_path_step_ns": 112_000_000, "critical_path_bound_by": "host",
               "critical_path_bound_share": 0.41, "achievable_step_ns": 71_000_000, "median_step_time_ns": 1}
    assert cp.summary_text({"summary": summary}) == ("critical path: step 112 ms, bound by host thread 41.0%; "
                                                     "achievable ~71 ms")
    assert cp.summary_text({"summary": {}}) == "" and cp.summary_text({"summary": {"critical_path_step_ns": None}}) == ""


def test_a_long_path_on_a_large_trace_stays_under_the_shape_budget() -> None:
    """The 1.2M-event trace of test_app's budget test with a path of 100k segments per rank
    alternating between its thread and a stream: every zoom stays within the budget, the
    overlay's points counted, and a whole-trace view is a few outlines per lane."""
    from test_app import _large_trace

    from traceview.app.timeline import LaneIndex, render

    trace = _large_trace()
    index = LaneIndex.build(trace)
    rows = []
    for r in range(2):
        edges = np.linspace(index.origin_ns, index.end_ns, 100_001).astype(np.int64)
        host = np.arange(100_000) % 2 == 0
        rows.append(pd.DataFrame({"rank": r, "step": pd.NA, "start_ns": edges[:-1], "end_ns": edges[1:],
                                  "tid": np.where(host, 1000 + r, -1), "device": np.where(host, -1, r),
                                  "stream": np.where(host, -1, 7), "category": "x", "name": "x", "row": -1}))
    path = cp.path_index(pd.concat(rows, ignore_index=True))
    span = index.span_ns
    for frac in (1.0, 0.1, 0.01, 0.001, 0.0001):
        width = max(int(span * frac), 1_000)
        t0 = index.origin_ns + int((span - width) * 0.4)
        fig, stats = render(index, t0, t0 + width, path=path)
        assert count_shapes(fig) == stats.shapes <= SHAPE_BUDGET, (frac, stats)
        assert 0 < stats.path_points <= cp.POINT_BUDGET
        if frac == 1.0:  # 200k segments under a pixel each: one outline per lane and rank
            assert "drawn as 4 outline(s)" in stats.path_text, stats.path_text


def test_the_overview_links_the_reports_critical_path_line(ctl: AppController) -> None:
    ctx = ctl._context(0)  # noqa: SLF001
    if ctx.report["summary"].get("critical_path_step_ns") is None:
        pytest.skip("the report has no critical-path summary keys (the analysis is not on this branch)")
    body, _ = ctl.render_page("/overview", "", 0)
    link = _by_id(body, "ov-critical-path")
    assert link is not None and link.children == cp.summary_text(ctx.report)
    assert link.children.startswith("critical path: step ") and "bound by" in link.children
    from traceview.app.pages import page_list

    assert link.href == next(p.path for p in page_list() if p.analysis == cp.ANALYSIS)
