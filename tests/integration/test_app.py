"""The web app (``traceview app``): it builds, every callback gives sane output on the bundled
samples, filters select what they say, the timeline stays under its shape budget on a large trace,
clicking a gap opens the timeline around it, and nothing from the browser can name a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pytest

from conftest import SAMPLE_TRACES, require_shared

dash = pytest.importorskip("dash")

from traceview.app import pages  # noqa: E402
from traceview.app.filters import Filters  # noqa: E402
from traceview.app.runs import RunError, RunStore, discover_runs  # noqa: E402
from traceview.app.server import create_app  # noqa: E402
from traceview.app.timeline import SHAPE_BUDGET, LaneIndex, count_shapes, expand_figure, render  # noqa: E402
from traceview.app.views import AppController, gap_search, parse_search  # noqa: E402
from traceview.findings import Options  # noqa: E402

#: every page of the app, in navigation order (from the analyses' specs)
PAGE_LIST = pages.page_list()
PAGE_PATHS = [p.path for p in PAGE_LIST]
LABELS = {p.path: p.label for p in PAGE_LIST}

SAMPLES = [SAMPLE_TRACES / "synthetic_4rank", SAMPLE_TRACES / "synthetic_nsys.sqlite",
           SAMPLE_TRACES / "torch_cpu_mlp.json.gz", SAMPLE_TRACES / "regression_pair"]


# ----------------------------------------------------------------------------------- helpers


def walk(component: Any) -> Iterator[Any]:
    """Every Dash component in a tree (lists, components and their children)."""
    if isinstance(component, (list, tuple)):
        for c in component:
            yield from walk(c)
        return
    if component is None or isinstance(component, (str, int, float)):
        return
    yield component
    yield from walk(getattr(component, "children", None))


def by_id(tree: Any, ident: str) -> Any:
    for c in walk(tree):
        if getattr(c, "id", None) == ident:
            return c
    raise AssertionError(f"no component with id {ident!r}")


def graphs(tree: Any) -> list[Any]:
    return [c for c in walk(tree) if type(c).__name__ == "Graph"]


def text_of(tree: Any) -> str:
    out = []
    for c in walk(tree):
        ch = getattr(c, "children", None)
        if isinstance(ch, str):
            out.append(ch)
        elif isinstance(ch, (list, tuple)):
            out.extend(x for x in ch if isinstance(x, str))
    return " ".join(out)


def figure_points(fig: Any) -> int:
    fig = fig.to_plotly_json() if hasattr(fig, "to_plotly_json") else fig
    total = 0
    for tr in fig.get("data", []):
        for key in ("x", "z", "y"):
            v = tr.get(key)
            if v is not None and len(v):
                total += len(v)
                break
    return total


@pytest.fixture(scope="module")
def app() -> Any:
    return create_app([str(p) for p in SAMPLES], warm=False)


@pytest.fixture(scope="module")
def ctl(app: Any) -> AppController:
    return app.traceview_controller


def run_id(ctl: AppController, label_start: str) -> int:
    for r in ctl.store.runs:
        if r.label.startswith(label_start):
            return r.id
    raise AssertionError(f"no run {label_start!r} in {[r.label for r in ctl.store.runs]}")


# ------------------------------------------------------------------------------------ runs


def test_runs_are_grouped_by_folder_and_rank_number() -> None:
    runs = discover_runs([str(p) for p in SAMPLES])
    labels = [r.label for r in runs]
    assert labels[0] == "synthetic_4rank/rank* (4 ranks)" and len(runs[0].files) == 4
    assert "synthetic_nsys.sqlite" in labels and "torch_cpu_mlp.json.gz" in labels
    pair = [r for r in runs if r.label.startswith("regression_pair/")]
    assert [len(r.files) for r in pair] == [2, 2] and pair[0].label != pair[1].label
    assert [r.id for r in runs] == list(range(len(runs)))


def test_runs_of_the_real_traces_folder() -> None:
    kineto = require_shared() / "kineto"
    runs = discover_runs([str(kineto)])
    by_label = {r.label: r for r in runs}
    assert len(by_label["kineto/param_dlrm_8ranks_v100/worker* (8 ranks)"].files) == 8
    assert len(by_label["kineto/hta_trace_filter_2ranks/sampled_rank-* (2 ranks)"].files) == 2
    # unrelated single files with rank numbers in their names stay separate runs
    assert "kineto/hta_df_index_resolver_v100_rank1.json.gz" in by_label
    assert "kineto/tracelens_resnet_actckpt_mi300x_rank0.json.gz" in by_label


def test_run_ids_from_the_browser_are_validated(ctl: AppController) -> None:
    for bad in ("/etc/passwd", "../sample_traces", "0/../../x", "-1", 99, None, True, 1.5, "1e0", [0], {"id": 0}):
        with pytest.raises(RunError):
            ctl.store.spec(bad)
    assert ctl.store.spec("0").id == 0 and ctl.store.spec(0).id == 0


# ------------------------------------------------------------------------------------ app


def test_app_builds_with_its_callbacks(app: Any) -> None:
    ids = {getattr(c, "id", None) for c in walk(app.layout)}
    assert {"url", "run", "f-ranks", "f-steps", "f-t0", "f-t1", "page", "dl-md", "dl-html", "dl-json"} <= ids
    outputs = " ".join(app.callback_map)
    for needed in ("page.children", "tl-graph.figure", "url.pathname", "cmp-body.children", "dl-json.data",
                   "f-ranks.options"):
        assert needed in outputs
    client = app.server.test_client()
    assert client.get("/").status_code == 200
    assert client.get("/_dash-layout").status_code == 200


def test_run_changed_sets_the_filter_controls(ctl: AppController) -> None:
    rid = run_id(ctl, "synthetic_4rank")
    options, value, smin, smax, svalue, marks, disabled, t0, t1, desc = ctl.run_changed(rid)
    assert [o["value"] for o in options] == [0, 1, 2, 3] and value is None
    assert (smin, smax, svalue, disabled) == (2, 4, [2, 4], False) and marks
    assert t0 is None and t1 is None and "4 rank(s), 3 step(s)" in desc
    cpu = ctl.run_changed(run_id(ctl, "torch_cpu_mlp"))
    assert cpu[0] == [{"label": "rank 0", "value": 0}]
    bad = ctl.run_changed("/etc/passwd")
    assert bad[0] == [] and "unknown run" in str(bad[-1])


@pytest.mark.parametrize("path", PAGE_PATHS)
def test_every_page_renders_for_every_sample(ctl: AppController, path: str) -> None:
    for spec in ctl.store.runs:
        body, status = ctl.render_page(path, "", spec.id)
        text = text_of(body)
        assert "internal error" not in text, (spec.label, path, text[:500])
        assert spec.label in status
        assert body[0].children == LABELS[path]
        for g in graphs(body):
            fig = g.figure.to_plotly_json() if hasattr(g.figure, "to_plotly_json") else g.figure
            assert fig.get("data") is not None and fig.get("layout") is not None


def test_pages_show_data_for_the_4rank_sample(ctl: AppController) -> None:
    rid = run_id(ctl, "synthetic_4rank")
    body, _ = ctl.render_page("/overview", "", rid)
    assert figure_points(by_id(body, "ov-breakdown").figure) >= 4
    assert figure_points(by_id(body, "ov-steps").figure) >= 12
    assert len(by_id(body, "ov-util").data) == 4
    top = ctl.store.context(rid).report["findings"][0]  # the costliest finding is listed first
    assert top["title"] in text_of(body)
    body, _ = ctl.render_page("/gaps", "", rid)
    assert figure_points(by_id(body, "gap-hist").figure) > 0
    table = by_id(body, "gap-table")
    assert len(table.data) == 60 and all("id" in row for row in table.data)
    durs = [row["dur_ns"] for row in table.data]
    assert durs == sorted(durs, reverse=True)
    body, _ = ctl.render_page("/launch", "", rid)
    assert figure_points(by_id(body, "launch-scatter").figure) > 100
    assert len(by_id(body, "launch-ops").data) > 0 and len(by_id(body, "launch-steps").data) > 0
    body, _ = ctl.render_page("/communication", "", rid)
    assert figure_points(by_id(body, "comm-overlap").figure) >= 4
    heat = by_id(body, "comm-skew").figure.to_plotly_json()
    assert len(heat["data"][0]["z"]) == 4
    assert "Rank 3 is the last" in text_of(body)
    body, _ = ctl.render_page("/kernels", "", rid)
    kt = by_id(body, "kern-table")
    assert kt.sort_action == "native" and kt.filter_action == "native" and len(kt.data) > 20
    assert {"name", "category", "count", "total_ns", "mean_ns", "share_pct"} <= {c["id"] for c in kt.columns}
    body, _ = ctl.render_page("/findings", "", rid)
    assert {"dl-md-btn", "dl-html-btn", "dl-json-btn"} <= {getattr(c, "id", None) for c in walk(body)}
    report = ctl.store.context(rid).report
    assert text_of(body).count("costs ") == sum(1 for f in report["findings"] if f.get("cost_ns_per_step"))


def test_unknown_page_falls_back_to_the_overview(ctl: AppController) -> None:
    body, _ = ctl.render_page("/../../etc/passwd", "?t0=/etc/passwd", 0)
    assert body[0].children == "Overview"


# ---------------------------------------------------------------------------------- filters


def test_rank_filter_selects_those_ranks(ctl: AppController) -> None:
    rid = run_id(ctl, "synthetic_4rank")
    ctx = ctl.store.context(rid, Filters(ranks=(1, 3)))
    assert ctx.trace.rank_ids == [1, 3]
    assert set(np.unique(ctx.trace.column("rank"))) == {1, 3}
    bd = ctx.table("temporal", "breakdown")
    assert set(bd["rank"]) == {1, 3}
    body, status = ctl.render_page("/overview", "", rid, [1, 3])
    assert "ranks 1, 3" in status and len(by_id(body, "ov-util").data) == 2
    # the same selection is one cache entry: all ranks is "no filter"
    assert ctl.store.context(rid, Filters(ranks=(0, 1, 2, 3))) is ctl.store.context(rid, Filters())


def test_step_filter_keeps_the_per_step_figures(ctl: AppController) -> None:
    rid = run_id(ctl, "synthetic_4rank")
    whole = ctl.store.context(rid).table("temporal", "breakdown")
    ctx = ctl.store.context(rid, Filters(steps=(3, 3)))
    steps = ctx.table("temporal", "steps")
    assert set(steps["step"]) == {3}
    bd = ctx.table("temporal", "breakdown")
    per = bd[bd["step"].notna()]
    assert set(per["step"].astype(int)) == {3}
    ref = whole[whole["step"] == 3].sort_values(["rank", "device"]).reset_index(drop=True)
    got = per.sort_values(["rank", "device"]).reset_index(drop=True)
    for col in ("window_ns", "busy_ns", "compute_ns", "communication_ns", "idle_ns"):
        assert got[col].tolist() == ref[col].tolist(), col


def test_time_filter_keeps_events_starting_in_the_range(ctl: AppController) -> None:
    rid = run_id(ctl, "synthetic_4rank")
    info = ctl.store.steps(rid)
    ctx = ctl.store.context(rid, Filters.from_controls(None, None, 2.0, 6.0))
    start = ctx.trace.column("start_ns") - info.origin_ns
    assert start.min() >= 2_000_000 and start.max() < 6_000_000
    assert 0 < ctx.trace.num_events < ctl.store.trace(rid).num_events
    # links still point at matching rows (launch call and the kernel it launched share a correlation)
    api, gpu = ctx.trace.launch_links()
    corr = ctx.trace.column("correlation")
    assert len(api) > 0 and np.array_equal(corr[api], corr[gpu])
    body, status = ctl.render_page("/gaps", "", rid, None, None, 2.0, 6.0)
    assert "2.000-6.000 ms" in status and "internal error" not in text_of(body)


def test_malformed_filter_values_are_ignored() -> None:
    f = Filters.from_controls(["a", "/etc"], "x", "/tmp", {"x": 1})
    assert f == Filters()
    assert Filters.from_controls([2, "1"], [2, 4], "1.5", None) == Filters(ranks=(1, 2), steps=(2, 4),
                                                                          time_ns=(1_500_000, 2**62))
    # a reversed range is unusable: ignored like any other unusable control
    assert Filters.from_controls(None, [4, 2], None, None) == Filters()


# --------------------------------------------------------------------------------- timeline


def _timeline_state(body: Any) -> dict:
    return by_id(body, "tl-window").data


def _xrange(fig: dict) -> tuple[float, float]:
    return tuple(fig["layout"]["xaxis"]["range"])  # type: ignore[return-value]


def test_timeline_page_draws_lanes_events_and_gaps(ctl: AppController) -> None:
    rid = run_id(ctl, "synthetic_4rank")
    body, _ = ctl.render_page("/timeline", "", rid)
    fig = by_id(body, "tl-graph").figure
    names = {t.get("name") for t in fig["data"]} | {e.children[1] for e in by_id(body, "tl-legend").children}
    assert {"compute kernel", "communication kernel", "CPU op", "gap: host-bound"} <= names
    ticks = fig["layout"]["yaxis"]["ticktext"]
    assert "r0 · GPU 0 · stream 7" in ticks and "r3 · GPU 3 · idle gaps" in ticks
    assert any(t.startswith("r0 · thread") for t in ticks)
    # gaps are drawn as a raster per gap lane: each gap cell carries the gap's range (a click zooms to it)
    gap_lane = next(t for t in fig["data"] if t.get("name", "").endswith("idle gaps") and t["type"] == "heatmap")
    cells = [cd for row in gap_lane["customdata"] for cd in row if cd is not None]
    assert cells and all(len(cd) == 2 and cd[1] > cd[0] for cd in cells)
    assert any("host-bound gap" in t for row in gap_lane["text"] for t in row)
    assert count_shapes(fig) <= SHAPE_BUDGET
    assert "heatmap cells" in by_id(body, "tl-stats").children


def test_timeline_zoom_pan_reset(ctl: AppController) -> None:
    rid = run_id(ctl, "synthetic_4rank")
    body, _ = ctl.render_page("/timeline", "", rid)
    state = _timeline_state(body)
    full = state["t1"] - state["t0"]
    fig, st, text = ctl.timeline_update("tl-graph.relayoutData", {"xaxis.range[0]": 2.0, "xaxis.range[1]": 3.0},
                                        None, state, rid)
    assert (st["t0"], st["t1"]) == (2_000_000, 3_000_000) and _xrange(fig) == (2.0, 3.0)
    fig, st2, _ = ctl.timeline_update("tl-zoom-in.n_clicks", None, None, st, rid)
    assert st2["t1"] - st2["t0"] == 500_000
    fig, st3, _ = ctl.timeline_update("tl-right.n_clicks", None, None, st2, rid)
    assert st3["t0"] == st2["t0"] + 250_000
    fig, st4, _ = ctl.timeline_update("tl-zoom-out.n_clicks", None, None, st3, rid)
    assert st4["t1"] - st4["t0"] == 1_000_000
    fig, st5, _ = ctl.timeline_update("tl-graph.relayoutData", {"xaxis.autorange": True}, None, st4, rid)
    assert st5["t1"] - st5["t0"] == full
    fig, st6, _ = ctl.timeline_update("tl-reset.n_clicks", None, None, st4, rid)
    assert st6["t1"] - st6["t0"] == full
    # panning past the end stops at the end; a window never leaves the trace
    fig, st7, _ = ctl.timeline_update("tl-graph.relayoutData", {"xaxis.range": [-50.0, -40.0]}, None, st, rid)
    assert st7["t0"] == 0 and st7["t1"] == 10_000_000
    # relayout events that are not a zoom change nothing
    assert ctl.timeline_update("tl-graph.relayoutData", {"autosize": True}, None, st, rid)[0] is dash.no_update
    assert ctl.timeline_update("tl-graph.relayoutData", {"xaxis.range[0]": "x", "xaxis.range[1]": 1}, None, st,
                               rid)[0] is dash.no_update


def test_clicking_a_gap_opens_the_timeline_around_it(ctl: AppController) -> None:
    rid = run_id(ctl, "synthetic_4rank")
    body, _ = ctl.render_page("/gaps", "", rid)
    row = by_id(body, "gap-table").data[0]  # the largest gap
    ctx = ctl.store.context(rid)
    gap = ctx.table("idle_gaps", "gaps").loc[row["id"]]
    start, end = int(gap["start_ns"]) - ctx.origin_ns, int(gap["end_ns"]) - ctx.origin_ns
    path, search, said = ctl.gap_clicked({"row": 0, "column": 0, "column_id": "rank", "row_id": row["id"]}, rid)
    assert path == "/timeline" and search == gap_search(start, end) and said is None
    params = parse_search(search)
    assert params["t0"] < start and params["t1"] > end and params["f0"] == start and params["f1"] == end
    body, _ = ctl.render_page(path, search, rid)
    fig = by_id(body, "tl-graph").figure
    x0, x1 = _xrange(fig)
    assert x0 * 1e6 < start < end < x1 * 1e6
    assert (x1 - x0) * 1e6 <= 5 * (end - start) + 1  # the gap is a fifth of the window
    focus = [sh for sh in fig["layout"]["shapes"] if sh["type"] == "rect"]
    assert len(focus) == 1 and (round(focus[0]["x0"] * 1e6), round(focus[0]["x1"] * 1e6)) == (start, end)
    from traceview.app.timeline import CAUSE_LABELS

    assert f"highlighted: {CAUSE_LABELS[gap['cause']]} gap" in by_id(body, "tl-stats").children
    # clicking a gap bar inside the timeline zooms to it too
    state = _timeline_state(body)
    click = {"points": [{"customdata": [start, end], "curveNumber": 0, "pointNumber": 0}]}
    fig2, st2, _ = ctl.timeline_update("tl-graph.clickData", None, click, {"t0": 0, "t1": 12_000_000}, rid)
    assert (st2["f0"], st2["f1"]) == (start, end) and st2["t0"] < start and st2["t1"] > end
    # a junk click stays on the page and says why beside the table; a cleared selection says nothing
    for cell, said in (({"row_id": "/etc/passwd"}, "row: '/etc/passwd' is not a number"),
                       ({"row_id": 10**9}, "row 1000000000 is not a gap of this selection"),
                       ("abc", "clicked cell: 'abc' is not a table cell")):
        path, search, msg = ctl.gap_clicked(cell, rid)
        assert path is dash.no_update and search is dash.no_update
        assert said in msg.children and "tv-error" in msg.className
    assert ctl.gap_clicked(None, rid) == (dash.no_update, dash.no_update, None)
    assert ctl.timeline_update("tl-graph.clickData", None, {"points": [{"x": 1}]}, state, rid)[0] is dash.no_update


def _large_trace(n_kernels: int = 300_000, n_ops: int = 300_000, ranks: int = 2) -> Any:
    """A big trace built with numpy: per rank two GPU streams of back-to-back kernels and one CPU
    thread with two levels of nested ops."""
    from traceview.model import Kind, Trace, empty_links, empty_steps, kind_array, make_events_table, RankInfo

    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("rank", "kind", "start", "dur", "pid", "tid", "device",
                                                          "stream", "name")}
    rng = np.random.default_rng(7)
    for r in range(ranks):
        for stream in (7, 20):
            dur = rng.integers(20_000, 60_000, n_kernels // 2)
            gap = rng.integers(0, 3_000, n_kernels // 2)
            start = np.cumsum(dur + gap) - dur
            for key, value in (("rank", r), ("kind", int(Kind.KERNEL)), ("pid", r), ("tid", stream), ("device", r),
                               ("stream", stream)):
                cols[key].append(np.full(start.size, value))
            cols["start"].append(start)
            cols["dur"].append(dur)
            cols["name"].append(np.where(stream == 20, 1, 0) + 2 * (np.arange(start.size) % 3 == 0))
        outer = n_ops // 2
        o_dur = rng.integers(20_000, 60_000, outer)
        o_start = np.cumsum(o_dur + 1_000) - o_dur
        i_start = o_start + 1_000
        i_dur = o_dur // 2
        for s, d in ((o_start, o_dur), (i_start, i_dur)):
            for key, value in (("rank", r), ("kind", int(Kind.CPU_OP)), ("pid", 1000 + r), ("tid", 1000 + r),
                               ("device", -1), ("stream", -1), ("name", 4)):
                cols[key].append(np.full(s.size, value))
            cols["start"].append(s)
            cols["dur"].append(d)
    c = {k: np.concatenate(v) for k, v in cols.items()}
    names = np.array(["gemm_kernel", "ncclDevKernel_AllReduce", "elementwise_kernel", "ncclKernel_x", "aten::linear"])
    n = c["start"].size
    events = make_events_table({
        "rank": c["rank"].astype(np.int32), "kind": kind_array(c["kind"].astype(np.int8)),
        "category": ["kernel"] * n, "name": names[c["name"]].tolist(), "start_ns": c["start"].astype(np.int64),
        "dur_ns": c["dur"].astype(np.int64), "pid": c["pid"].astype(np.int64), "tid": c["tid"].astype(np.int64),
        "device": c["device"].astype(np.int32), "stream": c["stream"].astype(np.int64),
    }, n)
    ranks_info = {r: RankInfo(rank=r, source_path=f"rank{r}.json", source_format="kineto") for r in range(ranks)}
    return Trace(events=events, links=empty_links(), ranks=ranks_info, steps=empty_steps())


def test_timeline_stays_under_the_shape_budget_on_a_large_trace() -> None:
    trace = _large_trace()
    index = LaneIndex.build(trace)
    assert len(index.lanes) == 2 * (1 + 2 + 1)  # per rank: gap lane, 2 streams, 1 thread
    # 200k gaps, as a big idle-gap table
    rng = np.random.default_rng(1)
    gs = np.sort(rng.integers(index.origin_ns, index.end_ns, 200_000))
    gaps = pd.DataFrame({"rank": rng.integers(0, 2, gs.size), "device": 0, "start_ns": gs, "end_ns": gs + 500,
                         "dur_ns": 500, "cause": rng.choice(["host_bound", "sync_bound"], gs.size),
                         "cpu_context": None})
    gaps["device"] = gaps["rank"]
    span = index.span_ns
    seen_modes = set()
    for frac in (1.0, 0.3, 0.05, 0.01, 0.001, 0.0001):
        width = max(int(span * frac), 1_000)
        t0 = index.origin_ns + int((span - width) * 0.4)
        fig, stats = render(index, t0, t0 + width, gaps=gaps)
        shapes = count_shapes(fig)
        assert shapes == stats.shapes <= SHAPE_BUDGET, (frac, stats)
        assert len(json.dumps(fig)) < 8_000_000
        seen_modes.add("aggregated" if stats.aggregated_lanes else "detail")
        if frac == 1.0:
            assert stats.aggregated_lanes == 6 and stats.bars == 0 and stats.gap_bars <= 2_000
            heat = [t for t in fig["data"] if t["type"] == "heatmap"]
            frac_busy = np.array(heat[0]["z"][0])
            assert 0.5 < frac_busy.mean() <= 1.0  # the streams are mostly busy
    assert seen_modes == {"aggregated", "detail"}
    # zoomed far in, every lane shows its real events
    t0 = index.origin_ns + span // 2
    fig, stats = render(index, t0, t0 + 200_000)
    assert stats.aggregated_lanes == 0 and 0 < stats.bars < 200
    cpu = next(t for t in expand_figure(fig)["data"] if t["type"] == "heatmap" and "thread" in t["name"])
    assert sum(any(v is not None for v in row) for row in cpu["z"]) >= 2  # nested ops are drawn on sub-levels


def test_busy_fraction_matches_the_union(ctl: AppController) -> None:
    from traceview import intervals as iv

    rid = run_id(ctl, "synthetic_4rank")
    index = ctl.store.timeline(rid)
    lane = next(ln for ln in index.lanes if ln.kind == "cpu")
    s, e = index.start[lane.lo:lane.hi], index.end[lane.lo:lane.hi]
    edges = np.linspace(index.origin_ns, index.end_ns, 41).round().astype(np.int64)
    frac = index.busy_fraction(lane, edges)
    for i in (0, 7, 20, 39):
        a, b = edges[i], edges[i + 1]
        us, ue = iv.union(np.clip(s, a, b), np.clip(e, a, b))
        assert frac[i] == pytest.approx((ue - us).sum() / (b - a))


# ---------------------------------------------------------------------------------- compare


def test_compare_uses_the_diff_module(ctl: AppController) -> None:
    base = run_id(ctl, "regression_pair/base")
    new = run_id(ctl, "regression_pair/new")
    body = ctl.compare_update(base, new, base)
    verdict = by_id(body, "cmp-verdict").children
    truth = json.loads((SAMPLE_TRACES / "regression_pair" / "truth.json").read_text())
    assert verdict in ("regressed", "improved", "changed", "no significant change")
    if "verdict" in truth:
        assert verdict == truth["verdict"]
    assert len(by_id(body, "cmp-metrics").data) > 0 and len(by_id(body, "cmp-kernels").data) > 0
    page, _ = ctl.render_page("/compare", "", base)
    assert {"cmp-base", "cmp-new", "cmp-body"} <= {getattr(c, "id", None) for c in walk(page)}
    assert "unknown run" in text_of(ctl.compare_update("/etc/passwd", new, base))


# -------------------------------------------------------------------------------- downloads


def test_report_downloads_parse(ctl: AppController) -> None:
    rid = run_id(ctl, "synthetic_4rank")
    md = ctl.download("md", rid)
    top = ctl.store.context(rid).report["findings"][0]["title"]
    assert md["filename"].endswith(".md") and top.split(":")[0] in md["content"]
    page = ctl.download("html", rid)
    assert page["filename"].endswith(".html") and page["content"].lstrip().lower().startswith("<!doctype html")
    data = json.loads(ctl.download("json", rid)["content"])
    assert data["summary"]["num_ranks"] == 4 and data["findings"]
    filtered = json.loads(ctl.download("json", rid, [0])["content"])
    assert filtered["summary"]["ranks"] == [0] and filtered["options"]["ranks"] == [0]
    assert ctl.download("json", "/etc/passwd") is dash.no_update


def test_perfetto_download_is_the_export_of_the_selection(ctl: AppController) -> None:
    """The Findings page's "Open in Perfetto" button: the filtered run as Chrome trace JSON, as
    ``traceview export-perfetto`` writes it, with the report's findings as annotation tracks."""
    from traceview.export_perfetto import export_chrome_trace

    rid = run_id(ctl, "synthetic_4rank")
    got = ctl.download_perfetto(rid)
    ctx = ctl.store.context(rid)
    assert got["filename"].endswith(".json") and got["content"] == export_chrome_trace(ctx.trace, ctx.report)
    events = json.loads(got["content"])["traceEvents"]
    assert {e["ph"] for e in events} >= {"X", "M"}
    one_rank = json.loads(ctl.download_perfetto(rid, [1])["content"])["traceEvents"]
    assert 0 < len(one_rank) < len(events)
    assert ctl.download_perfetto("/etc/passwd") is dash.no_update


# ----------------------------------------------------------------------------- path isolation


def test_no_route_serves_files(app: Any, tmp_path: Path) -> None:
    rules = {r.rule for r in app.server.url_map.iter_rules()}
    with_paths = {r for r in rules if "<path:" in r}
    # Dash's own: its component bundles (checked against a registered list), the empty assets
    # folder, and the catch-all that serves the app's HTML for client-side page URLs
    assert with_paths == {"/assets/<path:filename>",
                          "/_dash-component-suites/<string:package_name>/<path:fingerprinted_path>",
                          "/<path:path>"}
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    client = app.server.test_client()
    probes = ["/assets/../../etc/passwd", "/assets/%2e%2e/%2e%2e/etc/passwd", f"/assets/{secret}",
              f"/{secret}", "/..%2f..%2fetc%2fpasswd", f"/_dash-component-suites/dash/../../../..{secret}",
              "/_dash-component-suites/dash/..%2f..%2f..%2fetc%2fpasswd"]
    for url in probes:
        resp = client.get(url)
        assert b"TOP-SECRET" not in resp.data and b"root:" not in resp.data, url


def test_no_callback_accepts_a_path(app: Any, tmp_path: Path) -> None:
    """Every callback, through the real HTTP endpoint, with a file path in every input and state:
    nothing is read from that path."""
    secret = tmp_path / "trace.json"
    secret.write_text('{"traceEvents": [], "TOP": "SECRET-IN-FILE"}')
    client = app.server.test_client()
    for output, spec in app.callback_map.items():
        if "callback" not in spec:  # a clientside callback: it runs in the browser, the server has none
            continue
        single = not isinstance(spec["output"], (list, tuple))
        outs = [spec["output"]] if single else list(spec["output"])
        outputs = [{"id": o.component_id, "property": o.component_property} for o in outs]
        for value in (str(secret), {"path": str(secret)}, [str(secret)]):
            payload = {
                "output": output, "outputs": outputs[0] if single else outputs,
                "inputs": [{**i, "value": value} for i in spec["inputs"]],
                "state": [{**s, "value": value} for s in spec["state"]],
                "changedPropIds": [f"{i['id']}.{i['property']}" for i in spec["inputs"]],
            }
            resp = client.post("/_dash-update-component", json=payload)
            assert b"SECRET-IN-FILE" not in resp.data, output
            assert resp.status_code in (200, 204), (output, resp.status_code, resp.data[:300])


def test_cli_app_command_rejects_bad_paths() -> None:
    from typer.testing import CliRunner

    from traceview.cli import app as cli

    result = CliRunner().invoke(cli, ["app", "--help"])
    assert result.exit_code == 0 and "--port" in result.output
    from traceview.errors import TraceFormatError

    result = CliRunner().invoke(cli, ["app", "/nonexistent/trace.json"])
    assert isinstance(result.exception, TraceFormatError)
    # a GPU table that cannot be read fails before any trace is looked at, naming the file
    result = CliRunner().invoke(cli, ["app", str(SAMPLE_TRACES / "torch_cpu_mlp.json.gz"), "--gpu-specs",
                                      "/nonexistent/gpus.toml"])
    assert result.exit_code != 0 and "/nonexistent/gpus.toml" in str(result.exception or result.output)


# ------------------------------------------------------------------ partial results and caches


def test_overview_draws_before_the_slow_analyses_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Overview shows the temporal breakdown while the pipeline runs, then its findings."""
    import threading

    from traceview.findings import AnalysisResult
    from traceview.registry import ANALYSES, AnalysisSpec

    release = threading.Event()

    def slow(ctx: Any) -> AnalysisResult:
        release.wait(30)
        return AnalysisResult("zz_slow")

    monkeypatch.setitem(ANALYSES, "zz_slow", AnalysisSpec(name="zz_slow", title="Slow", run=slow, order=999))
    store = RunStore(discover_runs([str(SAMPLE_TRACES / "synthetic_4rank")]), use_cache=False)
    ctl = AppController(store)
    body, status = ctl.render_page("/overview", "", 0)
    assert "analyses running" in status
    assert figure_points(by_id(body, "ov-breakdown").figure) >= 4
    waiting = text_of(by_id(body, "ov-findings"))
    assert "Running the other analyses" in waiting and "slow" in waiting
    assert ctl.overview_poll(1, 0) == (dash.no_update, dash.no_update)
    release.set()
    store.context(0)  # waits for the background computation
    findings, disabled = ctl.overview_poll(2, 0)
    assert disabled is True and store.context(0).report["findings"][0]["title"] in text_of(findings)
    body, status = ctl.render_page("/overview", "", 0)
    assert "analyses ran in" in status and "Running the other" not in text_of(body)


def test_whole_run_reports_are_cached_on_disk() -> None:
    runs = discover_runs([str(SAMPLE_TRACES / "synthetic_4rank")])
    first = RunStore(runs).context(0)
    assert not first.from_disk
    again = RunStore(runs).context(0)  # a restart of the app
    assert again.from_disk and again.report.trace is again.trace
    assert again.report.data == first.report.data  # the whole report, findings and ids included
    pd.testing.assert_frame_equal(again.table("idle_gaps", "gaps"), first.table("idle_gaps", "gaps"))
    assert not RunStore(runs, use_cache=False).context(0).from_disk
    # filtered selections are not written to disk
    assert not RunStore(runs).context(0, Filters(ranks=(1,))).from_disk


# ------------------------------------------------------------- one report, the same findings everywhere


def _finding_cards(body: Any) -> list[tuple[str, str]]:
    """(id, title) of every finding card on a page, in page order."""
    out = []
    for card in walk(body):
        if getattr(card, "className", None) == "tv-finding":
            fid = next(c.children for c in walk(card) if getattr(c, "className", None) == "tv-fid")
            title = next(c.children for c in walk(card) if getattr(c, "className", None) == "tv-ftitle")
            out.append((fid, title))
    return out


@pytest.mark.parametrize("label", ["synthetic_4rank", "regression_pair/new", "synthetic_nsys"])
def test_findings_page_is_the_pipeline_report(ctl: AppController, label: str) -> None:
    """The Findings page lists exactly ``traceview.pipeline.analyze(same files)["findings"]``: the same
    ids, titles and order (merged across ranks once, ranked once), and its header counts are the
    report's ``findings_summary``, which add up to the list."""
    from traceview.pipeline import analyze

    rid = run_id(ctl, label)
    report = analyze(list(ctl.store.spec(rid).files), use_cache=False)
    expected = [(f["id"], f["title"]) for f in report["findings"]]
    assert expected, "the sample should have findings"
    body, _ = ctl.render_page("/findings", "", rid)
    assert _finding_cards(body) == expected
    stats = report["findings_summary"]
    top_level = [f for f in report["findings"] if f["parent"] is None]
    assert stats["top_level"] == len(top_level) == sum(stats["by_severity"].values())
    assert stats["total"] == len(expected)
    headline = by_id(body, "fnd-headline").children
    assert headline == pages.findings_headline(stats) and headline.startswith(f"{len(top_level)} findings: ")
    for severity, n in stats["by_severity"].items():
        assert (f"{n} {severity}" in headline) == (n > 0)
    # the Overview's top findings are the first top-level ones of that list
    body, _ = ctl.render_page("/overview", "", rid)
    ctl.store.context(rid)  # complete: the Overview shows the findings, not a placeholder
    body, _ = ctl.render_page("/overview", "", rid)
    assert _finding_cards(body) == [(f["id"], f["title"]) for f in top_level[:6]]


def test_multi_rank_findings_are_merged_once(ctl: AppController) -> None:
    """A problem every rank has is one finding of the job, as in every other front end."""
    rid = run_id(ctl, "synthetic_4rank")
    titles = [f["title"] for f in ctl.store.context(rid).findings]
    assert any(t.startswith("On all ranks") for t in titles)
    assert len(titles) == len(set(titles))


def test_pages_come_from_the_analysis_specs() -> None:
    from traceview.registry import analysis_specs

    by_analysis = {p.analysis: p for p in PAGE_LIST if p.analysis is not None}
    assert set(by_analysis) == {s.name for s in analysis_specs()}
    for spec in analysis_specs():
        expected = spec.page or (pages.generic_path(spec.name), spec.title)
        assert (by_analysis[spec.name].path, by_analysis[spec.name].label) == expected
    assert PAGE_PATHS[:2] == ["/overview", "/timeline"] and PAGE_PATHS[-2:] == ["/compare", "/findings"]
    assert by_analysis["synchronization"].path == "/analysis/synchronization"
    assert len(set(PAGE_PATHS)) == len(PAGE_PATHS)


def test_an_analysis_without_a_page_gets_the_generic_page(ctl: AppController) -> None:
    """Synchronisation declares no page: its page lists its tables under the report's titles, and
    its findings as the report numbers them."""
    rid = run_id(ctl, "synthetic_4rank")
    report = ctl.store.context(rid).report
    about = report["analyses"]["synchronization"]
    body, _ = ctl.render_page("/analysis/synchronization", "", rid)
    assert body[0].children == about["title"]
    text = text_of(body)
    assert "internal error" not in text
    for name, table in about["tables"].items():
        assert table["title"] in text
        frame = report.table("synchronization", name)
        if len(frame):
            assert len(by_id(body, f"gen-synchronization-{name}").data) == min(len(frame), pages.GENERIC_TABLE_ROWS)
    mine = [(f["id"], f["title"]) for f in report["findings"] if f["analysis"] == "synchronization"]
    assert mine and _finding_cards(body) == mine


def test_a_new_analysis_appears_in_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    """An analysis registered as one module (here: a spec added to the registry) gets a nav entry and
    a generic page with its table, its title and its finding, with no change to the app."""
    from traceview.claims import Claims
    from traceview.findings import AnalysisResult, Finding
    from traceview.registry import ANALYSES, AnalysisSpec, TableSpec

    def per_stream(ctx: Any) -> AnalysisResult:
        events = ctx.trace.events.to_pandas()
        kernels = events[["rank", "stream", "dur_ns"]]
        table = kernels[kernels["stream"] >= 0].groupby(["rank", "stream"], as_index=False)["dur_ns"].sum()
        gpu = events[(events["stream"] >= 0) & (events["device"] >= 0)]
        findings = []
        for rank in sorted(table["rank"].unique().tolist()):  # the batch's ranks: one finding each
            mine = gpu[gpu["rank"] == rank]
            # the GPU time it costs: every interval of the rank's GPU activity (the findings engine needs claims)
            findings.append(Finding(code="zz_busy_stream", severity="low", title=f"Rank {rank} has busy streams",
                                    analysis="zz_streams", recommendation="none", rank=int(rank),
                                    claims=Claims.of(mine["rank"].to_numpy(), mine["device"].to_numpy(),
                                                     mine["start_ns"].to_numpy(),
                                                     (mine["start_ns"] + mine["dur_ns"]).to_numpy())))
        return AnalysisResult("zz_streams", tables={"busy": table}, findings=findings)

    spec = AnalysisSpec(name="zz_streams", title="Busy streams", run=per_stream, order=999,
                        tables=(TableSpec("busy", "Busy time per stream", sort_by="dur_ns"),))
    monkeypatch.setitem(ANALYSES, "zz_streams", spec)
    new_app = create_app([str(SAMPLE_TRACES / "synthetic_4rank")], warm=False, use_cache=False)
    new_ctl = new_app.traceview_controller
    nav = by_id(new_app.layout, pages.nav_id("/analysis/zz_streams"))
    assert nav.children == "Busy streams" and nav.href == "/analysis/zz_streams"
    body, _ = new_ctl.render_page("/analysis/zz_streams", "", 0)
    assert body[0].children == "Busy streams" and "Busy time per stream" in text_of(body)
    rows = by_id(body, "gen-zz_streams-busy").data
    assert len(rows) == 4 * 2  # 4 ranks x 2 streams, the largest first
    assert [r["dur_ns"] for r in rows] == sorted((r["dur_ns"] for r in rows), reverse=True)
    # every rank raised it: one finding of the job, about its busiest rank, numbered by the report
    report = new_ctl.store.context(0).report
    [job] = [f for f in report["findings"] if f["analysis"] == "zz_streams"]
    per_rank = job["evidence"]["per_rank"]
    assert len(per_rank) == 4 and job["claims"]["claimed_ns"] > 0
    worst = max(per_rank, key=lambda p: p["cost_ns_per_step"])["rank"]
    mine = [(f["id"], f["title"]) for f in report["findings"] if f["analysis"] == "zz_streams"]
    assert [t for _, t in mine] == [f"On all ranks (worst: rank {worst}): Rank {worst} has busy streams"]
    assert _finding_cards(body) == mine


# ------------------------------------------------------------------------------------ efficiency


def planted_controller(tmp_path: Path, *, inputs: bool = True, device_name: str | None = None,
                       gpu_specs: bool = True) -> AppController:
    """The app over one run: the planted efficiency trace of tests/unit/test_efficiency.py (two aten::mm in
    bf16, one aten::add in fp32, one aten::cat without a model), on the round peaks of its GPU file."""
    from test_efficiency import GPU, SPEC_TOML, planted

    from traceview.app.runs import RunSpec

    specs = tmp_path / "gpus.toml"
    specs.write_text(SPEC_TOML)
    trace, _ = planted(inputs=inputs, device_name=device_name or GPU)
    store = RunStore([RunSpec(0, "planted", (tmp_path / "planted.json",))], use_cache=False,
                     loader=lambda files: trace, options=Options(gpu_specs=str(specs)) if gpu_specs else None)
    return AppController(store)


def test_efficiency_page_draws_the_roofline_from_the_report(tmp_path: Path) -> None:
    """Points at the report's intensity and achieved TFLOP/s, one per op type, sized by GPU time; a
    roof per (peak, bandwidth) the report gives: bandwidth x intensity up to the ridge, then flat."""
    ctl = planted_controller(tmp_path)
    assert "/efficiency" in [p.path for p in ctl.pages]
    body, _ = ctl.render_page("/efficiency", "", 0)
    assert body[0].children == "Efficiency" and "internal error" not in text_of(body)
    op_types = ctl.store.context(0).report.table("efficiency", "op_types").set_index("name")
    fig = by_id(body, "eff-roofline").figure
    points = {t.name: t for t in fig.data if t.meta == "points"}
    roof_lines = [t for t in fig.data if t.meta == "roof"]
    assert len(points) == 2 and len(roof_lines) == 2
    for trace in points.values():
        (x,), (y,) = trace.x, trace.y
        name = trace.customdata[0][0]
        assert x == op_types.loc[name, "intensity"] and y == op_types.loc[name, "achieved_tflops"]
    # the larger GPU time has the larger marker (add: 24 us, mm: 20 us)
    sizes = {t.customdata[0][0]: t.marker.size[0] for t in points.values()}
    assert sizes["aten::add"] > sizes["aten::mm"]
    mm_hover = next(t for t in points.values() if t.customdata[0][0] == "aten::mm").customdata[0]
    assert mm_hover[1] == "bf16 on tensor units" and mm_hover[3].startswith(
        f"{100 * op_types.loc['aten::mm', 'efficiency']:.1f}%")
    for line in roof_lines:
        peaks = {float(op_types.loc[n, "peak_tflops"]) for n in op_types.index}
        x0, ridge, x1 = line.x
        y0, top, flat = line.y
        assert top == flat and top in peaks  # flat at the peak the report used
        bandwidth = float(op_types["bandwidth_gbs"].iloc[0])  # one GPU: one bandwidth
        assert y0 == pytest.approx(bandwidth * x0 / 1e3) and ridge == pytest.approx(top * 1e3 / bandwidth)
        assert x0 < min(op_types["intensity"]) and x1 > max(op_types["intensity"])
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    # the tables: op types, coverage, unmodelled (aten::cat), HFU per step
    assert {r["name"] for r in by_id(body, "eff-op-types").data} == {"aten::mm", "aten::add"}
    # the roll-up (issue 30.11): one row per family and dtype, shares as the report's table gives them
    families = ctl.store.context(0).report.table("efficiency", "families").set_index("family")
    rolled = {r["family"]: r for r in by_id(body, "eff-families").data}
    assert set(rolled) == {"GEMM", "elementwise"}
    assert rolled["GEMM"]["peak_share_pct"] == pytest.approx(100 * families.loc["GEMM", "peak_share"])
    assert rolled["elementwise"]["bandwidth_share_pct"] == pytest.approx(100 * families.loc["elementwise",
                                                                                           "bandwidth_share"])
    [coverage] = by_id(body, "eff-coverage").data
    assert coverage["modelled_pct"] == pytest.approx(100 * 44 / 49)
    assert [r["name"] for r in by_id(body, "eff-unmodelled").data] == ["aten::cat"]
    steps = by_id(body, "eff-steps").data
    assert len(steps) == 2 and all(r["hfu_pct"] is not None for r in steps)
    # the finding of the analysis, as the report numbers it
    mine = [(f["id"], f["title"]) for f in ctl.store.context(0).report["findings"] if f["analysis"] == "efficiency"]
    assert mine and _finding_cards(body) == mine


def test_efficiency_page_unknown_gpu_draws_points_without_roofs(tmp_path: Path) -> None:
    ctl = planted_controller(tmp_path, device_name="Mystery GPU 9000")
    body, _ = ctl.render_page("/efficiency", "", 0)
    fig = by_id(body, "eff-roofline").figure
    assert [t.meta for t in fig.data] == ["points"]  # achieved figures need no peak: no roof drawn
    text = text_of(body)
    assert "No roof is drawn" in text and "Mystery GPU 9000" in text


def test_efficiency_page_without_shapes_says_why_and_draws_no_chart(tmp_path: Path) -> None:
    ctl = planted_controller(tmp_path, inputs=False)
    body, _ = ctl.render_page("/efficiency", "", 0)
    assert not [g for g in graphs(body) if getattr(g, "id", None) == "eff-roofline"]
    text = text_of(body)
    assert "No roofline: no op with kernels could be modelled (reasons: missing_shapes" in text
    assert "record_shapes=True" in text


def test_efficiency_page_on_a_trace_without_cpu_ops() -> None:
    """An Nsight export records no ops: the page says no kernel could be given a cost."""
    store = RunStore(discover_runs([str(SAMPLE_TRACES / "synthetic_nsys.sqlite")]), use_cache=False)
    body, _ = AppController(store).render_page("/efficiency", "", 0)
    assert not [g for g in graphs(body) if getattr(g, "id", None) == "eff-roofline"]
    assert "No roofline: no compute kernel was launched under a CPU op" in text_of(body)


def test_efficiency_page_on_the_sample_with_its_gpu_file() -> None:
    """The efficiency_roofline sample (shapes from the Kineto parser) with ``gpu_specs`` given to the
    app, as ``traceview app --gpu-specs``: its planted efficiencies (truth file) on the chart."""
    sample = SAMPLE_TRACES / "efficiency_roofline.json.gz"
    truth = json.loads(sample.with_name("efficiency_roofline.truth.json").read_text())
    app = create_app([str(sample)], warm=False, use_cache=False,
                     options=Options(gpu_specs=str(sample.with_name("efficiency_roofline.gpus.toml"))))
    body, _ = app.traceview_controller.render_page("/efficiency", "", 0)
    if not any(getattr(g, "id", None) == "eff-roofline" for g in graphs(body)):
        pytest.skip("the Kineto parser does not fill input_dims yet: the sample has no op shapes")
    fig = by_id(body, "eff-roofline").figure
    hovers = {t.customdata[0][0]: t.customdata[0] for t in fig.data if t.meta == "points"}
    assert set(hovers) == set(truth["op_types"])
    for name, expected in truth["op_types"].items():
        assert hovers[name][3] == f"{100 * expected['efficiency']:.1f}%, {expected['bound']}-bound"
    peaks = sorted(t.y[-1] for t in fig.data if t.meta == "roof")
    assert peaks == sorted([truth["peaks"]["bf16_tensor_flop_per_ns"] / 1e3, truth["peaks"]["fp32_vector_flop_per_ns"] / 1e3])


def test_efficiency_page_shows_mfu_when_the_model_flops_are_given() -> None:
    """``traceview app --model-flops``: the page's per-step table gains MFU, from the report's own
    figures (75 GFLOP per 0.150 ms step on the sample's 1000 TFLOP/s bf16 peak: 50%)."""
    sample = SAMPLE_TRACES / "efficiency_roofline.json.gz"
    specs = str(sample.with_name("efficiency_roofline.gpus.toml"))
    without = create_app([str(sample)], warm=False, use_cache=False, options=Options(gpu_specs=specs))
    body, _ = without.traceview_controller.render_page("/efficiency", "", 0)
    assert all("mfu_pct" not in r for r in by_id(body, "eff-steps").data)
    app = create_app([str(sample)], warm=False, use_cache=False,
                     options=Options(gpu_specs=specs, model_flops_per_step=7.5e10))
    body, _ = app.traceview_controller.render_page("/efficiency", "", 0)
    rows = by_id(body, "eff-steps").data
    assert [r["mfu_pct"] for r in rows] == pytest.approx([50.0] * len(rows))


def test_compare_page_shows_efficiency_per_op_type(tmp_path: Path) -> None:
    ctl = planted_controller(tmp_path)
    rows = by_id(ctl.compare(0, 0, Filters()), "cmp-efficiency").data
    assert {r["name"] for r in rows} == {"aten::mm", "aten::add"}
    assert all(r["match"] == "both" and r["efficiency_delta_pp"] == 0 for r in rows)


def test_every_page_renders_for_every_shared_trace() -> None:
    """The issue's bar: all pages work on every shared trace (Kineto and Nsight)."""
    shared = require_shared()
    shared_app = create_app([str(shared / "kineto"), str(shared / "nsys")], warm=False)
    ctl = shared_app.traceview_controller
    assert len(ctl.store.runs) >= 20
    failures = []
    for spec in ctl.store.runs:
        for path in PAGE_PATHS:
            body, status = ctl.render_page(path, "", spec.id)
            text = text_of(body)
            if "internal error" in text or "Traceback" in text:
                failures.append(f"{spec.label} {path}: {text[:300]}")
                continue
            for g in graphs(body):
                fig = g.figure.to_plotly_json() if hasattr(g.figure, "to_plotly_json") else g.figure
                if fig.get("data") is None or fig.get("layout") is None:
                    failures.append(f"{spec.label} {path}: a figure without data/layout")
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------------------- pages at a glance (issue 15)


def test_kernels_page_shows_the_cross_rank_table_of_the_report(ctl: AppController) -> None:
    """One row per normalised kernel over every rank, as the report's ``kernel_summary`` has it (the
    app computes nothing); a chart of the largest; the full names as tooltips; text left-aligned;
    a selected row shows that kernel per rank and GPU (``kernel_ranks``)."""
    from traceview.app.components import time_unit

    rid = run_id(ctl, "synthetic_4rank")
    ctx = ctl.store.context(rid)
    summary = ctx.table("kernels", "kernel_summary")
    body, _ = ctl.render_page("/kernels", "", rid)
    table = by_id(body, "kern-table")
    assert [r["name"] for r in table.data] == list(summary["name"]) and len(table.data) == len(summary)
    assert [r["count"] for r in table.data] == list(summary["count"])
    unit, div, _ = time_unit(summary["total_ns"])
    header = next(c["name"] for c in table.columns if c["id"] == "total_ns")
    assert header == f"total ({unit})"
    assert [r["total_ns"] for r in table.data] == pytest.approx(list(summary["total_ns"] / div), rel=1e-3)
    assert {"p50_ns", "p90_ns", "min_rank", "max_rank", "share_pct"} <= {c["id"] for c in table.columns}
    assert [r["id"] for r in table.data] == list(range(len(summary)))
    assert [t["name"]["value"] for t in table.tooltip_data[:10]] == list(summary["full_name"][:10])
    left = {c["if"]["column_id"] for c in table.style_cell_conditional if c.get("textAlign") == "left"}
    assert {"name", "category"} <= left and "total_ns" not in left
    chart = by_id(body, "kern-chart").figure.to_plotly_json()
    bars = sorted((x for tr in chart["data"] for x in tr["x"]), reverse=True)
    top = summary["total_ns"].head(pages.TOP_KERNELS_CHART)
    chart_unit, chart_div, _ = time_unit(top)  # the unit the largest kernels read best in
    assert bars == pytest.approx(list(top / chart_div), rel=1e-9)
    assert chart["layout"]["xaxis"]["title"]["text"] == f"total GPU time ({chart_unit})"
    # row select: the per-rank figures of that kernel
    per_rank = ctx.table("kernels", "kernel_ranks")
    for row in (0, len(summary) - 1):
        detail = ctl.kernel_selected({"row": 0, "column": 0, "row_id": row}, rid)
        mine = per_rank[per_rank["name"] == summary["name"].iloc[row]]
        rows = by_id(detail, "kern-ranks").data
        assert [(r["rank"], r["device"], r["count"]) for r in rows] == sorted(
            zip(mine["rank"], mine["device"], mine["count"]))
    for bad in ({"row_id": 10**6}, {"row_id": "x"}, "cell", {"row_id": -1}):
        assert "error" in detail_class(ctl.kernel_selected(bad, rid))
    assert "Select a kernel" in text_of(ctl.kernel_selected(None, rid))


def detail_class(tree: Any) -> str:
    return " ".join(str(getattr(c, "className", "")) for c in walk(tree))


@pytest.mark.parametrize("values, unit, shown", [
    ([3_000, 2_500, 4_000], "us", 3.0),          # not 0.003 ms
    ([450, 520, 610], "ns", 450.0),
    ([2_500_000, 9_000_000], "ms", 2.5),
    ([3.2e9, 4.1e9], "s", 3.2),
    ([0, 0], "ns", 0.0),
])
def test_times_are_shown_in_the_unit_of_their_magnitude(values: list[float], unit: str, shown: float) -> None:
    from traceview.app.components import frame_table

    table = frame_table(pd.DataFrame({"name": ["k"] * len(values), "dur_ns": values}), "t")
    column = next(c for c in table.columns if c["id"] == "dur_ns")
    assert column["name"] == f"dur ({unit})" and column["type"] == "numeric"
    assert table.data[0]["dur_ns"] == pytest.approx(shown)


def amd_trace(path: Path) -> Path:
    """A one-GPU AMD trace without steps: kernels on device 2 (ROCm numbers HSA agents, CPUs first),
    its GPU listed as device 0."""
    events = [{"ph": "X", "cat": "kernel", "pid": 2, "tid": 0, "ts": 1000 + 50 * i, "dur": 20 + i,
               "name": f"void at::native::vectorized_elementwise_kernel<4, F{i % 3}>(int)" if i % 2 else
               "Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1",
               "args": {"device": 2, "stream": 0, "correlation": i}} for i in range(40)]
    trace = {"schemaVersion": 1, "hip_runtime_version": 60443483, "roctracer_version": 4.1, "traceEvents": events,
             "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 206141652992,
                                   "computeMajor": 9, "computeMinor": 4, "numSms": 304}]}
    path.write_text(json.dumps(trace))
    return path


def test_overview_without_steps_speaks_of_the_whole_trace_and_names_the_amd_gpu(tmp_path: Path) -> None:
    new_ctl = create_app([str(amd_trace(tmp_path / "amd.json"))], warm=False, use_cache=False).traceview_controller
    new_ctl.store.context(0)  # complete, findings included
    body, _ = new_ctl.render_page("/overview", "", 0)
    text = text_of(body)
    assert "idle, per step" not in text and "comm., per step" not in text and "costs per step" not in text
    assert "idle, whole trace" in text and "exposed comm., whole trace" in text and "none found" in text
    assert "AMD Instinct MI300X (304 CUs, gfx 9.4, 206.1 GB)" in text
    assert "device 2" not in text and "unknown GPU" not in text
    assert not [g for g in graphs(body) if getattr(g, "id", None) == "ov-steps"]
    assert "No steps in this selection" in text
    # the Kernels page groups the three instantiations of one kernel
    body, _ = new_ctl.render_page("/kernels", "", 0)
    names = [r["name"] for r in by_id(body, "kern-table").data]
    assert sorted(names) == ["Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1",
                             "at::native::vectorized_elementwise_kernel"]


def test_step_chart_needs_three_steps(ctl: AppController, monkeypatch: pytest.MonkeyPatch) -> None:
    rid = run_id(ctl, "synthetic_4rank")
    ctx = ctl.store.context(rid)
    steps = ctx.table("temporal", "steps")
    assert steps["step"].nunique() >= pages.MIN_CHART_STEPS
    body, _ = ctl.render_page("/overview", "", rid)
    assert figure_points(by_id(body, "ov-steps").figure) > 0
    # the same run with one step left: a table of step times instead of a chart
    one = steps[steps["step"] == steps["step"].min()]
    original = type(ctx).table
    monkeypatch.setattr(type(ctx), "table", lambda self, a, t: one if (a, t) == ("temporal", "steps")
                        else original(self, a, t))
    section_ = pages._step_section(ctx)
    assert not graphs(section_)
    rows = by_id(section_, "ov-step-table").data
    assert [r["rank"] for r in rows] == list(one["rank"]) and "too few for a chart" in text_of(section_)


def test_findings_page_is_compact_with_evidence_on_expand(ctl: AppController) -> None:
    """One line per finding (id, severity, title, cost), in the report's order; recommendation and
    evidence folded inside."""
    rid = run_id(ctl, "synthetic_4rank")
    report = ctl.store.context(rid).report
    body, _ = ctl.render_page("/findings", "", rid)
    cards = [c for c in walk(body) if getattr(c, "className", None) == "tv-finding"]
    assert [c._namespace + c._type for c in cards] == ["dash_html_components" + "Details"] * len(report["findings"])
    for card, f in zip(cards, report["findings"]):
        assert card.open is False
        summary, details = card.children
        line = text_of(summary)
        assert line.startswith(f["id"]) and f["title"] in line and "\n" not in line
        assert f["recommendation"] in text_of(details) and f["recommendation"] not in line
        if f.get("evidence"):
            assert any(type(c).__name__ == "Pre" for c in walk(details))
        assert ("costs " in line) == bool(f.get("cost_ns_per_step"))


def test_overview_and_kernels_on_the_mi300x_shared_trace() -> None:
    path = require_shared() / "kineto" / "tracelens_torch_compile_triton_mi300x.json.gz"
    new_ctl = create_app([str(path)], warm=False).traceview_controller
    new_ctl.store.context(0)
    body, _ = new_ctl.render_page("/overview", "", 0)
    text = text_of(body)
    assert "AMD Instinct MI300X (304 CUs, gfx 9.4" in text and "unknown GPU" not in text
    body, _ = new_ctl.render_page("/kernels", "", 0)
    assert len(by_id(body, "kern-table").data) == len(new_ctl.store.context(0).table("kernels", "kernel_summary"))
