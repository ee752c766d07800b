"""The timeline's interactions through the controller (no browser): name search and next/previous
match, the details panel of a clicked event (its columns, times, links, op stack), flow arrows from
the launch call, collapsed ranks and empty lanes, a gap click that opens only the gap's rank, and
hostile values for every new input. The browser side: tests/browser/test_app_timeline_browser.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

import dash
import numpy as np
import pytest

pytest.importorskip("dash")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gen_job  # noqa: E402  (the benchmark's 8-rank job generator)

from traceview.app.server import create_app  # noqa: E402
from traceview.app.timeline import SHAPE_BUDGET, count_shapes, expand_figure  # noqa: E402
from traceview.app.views import AppController, gap_search  # noqa: E402


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("job8")
    gen_job.generate(out, ranks=8, steps=4, layers=8, gz=True)
    (out / "truth.json").unlink()  # not a trace
    return out


@pytest.fixture(scope="module")
def ctl(job: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppController]:
    mp = pytest.MonkeyPatch()
    mp.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    app = create_app([str(job)], warm=False)
    yield app.traceview_controller  # type: ignore[attr-defined]
    mp.undo()


def by_id(tree: Any, ident: str) -> Any:
    if getattr(tree, "id", None) == ident:
        return tree
    children = tree if isinstance(tree, list) else getattr(tree, "children", None)
    if children is None or isinstance(children, str):
        return None
    for c in children if isinstance(children, list) else [children]:
        hit = by_id(c, ident)
        if hit is not None:
            return hit
    return None


def text_of(tree: Any) -> str:
    if tree is None:
        return ""
    if isinstance(tree, (str, int, float)):
        return str(tree)
    if isinstance(tree, list):
        return " ".join(text_of(c) for c in tree)
    return text_of(getattr(tree, "children", None))


def _page(ctl: AppController, search: str = "") -> tuple[dict, dict, str]:
    body, _ = ctl.render_page("/timeline", search, 0)
    return by_id(body, "tl-graph").figure, by_id(body, "tl-window").data, by_id(body, "tl-stats").children


def _lanes(fig: dict) -> list[str]:
    return list(fig["layout"]["yaxis"]["ticktext"])


def test_ranks_beyond_four_start_collapsed_and_open_on_demand(ctl: AppController) -> None:
    fig, state, stats = _page(ctl)
    lanes = _lanes(fig)
    assert state["open"] == [0]
    assert [t for t in lanes if "collapsed" in t] == [f"r{r} · collapsed (5 lanes)" for r in range(1, 8)]
    assert "r0 · GPU 0 · stream 7" in lanes and "rank(s) 1, 2, 3, 4, 5, 6, 7 collapsed" in stats
    assert fig["layout"]["xaxis"]["side"] == "top"
    assert count_shapes(fig) <= SHAPE_BUDGET
    fig2, st2, _s, _d, open2 = ctl.timeline_action("tl-open.value", None, None, state, 0, open_value=[0, 3])
    assert open2 == [0, 3] and st2["open"] == [0, 3] and (st2["t0"], st2["t1"]) == (state["t0"], state["t1"])
    lanes2 = _lanes(fig2)
    assert "r3 · GPU 3 · stream 7" in lanes2 and "r3 · collapsed (5 lanes)" not in lanes2


def test_empty_lanes_are_hidden(ctl: AppController) -> None:
    _fig, state, _ = _page(ctl)
    index = ctl.store.timeline(0)
    # a window on rank 0 where its memcpy stream (the batch copy) has nothing
    lane = next(ln for ln in index.lanes if ln.rank == 0 and ln.kind == "gpu" and ln.ident == 7)
    s = int(index.start[lane.lo + lane.size // 2]) - index.origin_ns
    fig, st, text = ctl.timeline_update("tl-graph.relayoutData", {"xaxis.range[0]": s / 1e6,
                                                                  "xaxis.range[1]": s / 1e6 + 0.05}, None, state, 0)
    lanes = _lanes(fig)
    drawn = {tr["name"] for tr in fig["data"] if tr["type"] == "heatmap"}
    assert "empty lane(s) hidden" in text
    assert all(t in drawn or "collapsed" in t for t in lanes)  # every lane shown has something drawn
    assert len([ln for ln in index.lanes if ln.rank == 0]) > len([t for t in lanes if t.startswith("r0 ")])


def test_search_highlights_and_jumps(ctl: AppController) -> None:
    _fig, state, _ = _page(ctl)
    index = ctl.store.timeline(0)
    fig, st, stats, panel, _open = ctl.timeline_action("tl-search.n_submit", None, None, state, 0, query="GEMM")
    names = np.array(index.names, dtype=object)[index.name_code]
    expected = int(sum("gemm" in n.lower() for n in names))
    assert f"search “GEMM”: {expected:,} match(es)" in stats and "match 1 selected" in stats
    first = int(st["sel"])
    assert "gemm" in index.names[int(index.name_code[first])].lower()
    # the first match of the run (every rank), centred in a window that draws it, its rank opened
    starts = index.start[[i for i in range(index.start.size) if "gemm" in names[i].lower()]]
    assert index.start[first] == starts.min()
    o = index.origin_ns
    assert o + st["t0"] <= index.start[first] < index.end[first] <= o + st["t1"]
    centre = o + (st["t0"] + st["t1"]) // 2
    at_edge = st["t0"] == state["t0"]  # the run's first match: the window stops at the run's start
    assert at_edge or abs(centre - (int(index.start[first]) + int(index.end[first])) // 2) <= 1
    assert index.lane_at(first).rank in st["open"]
    assert "gemm" in text_of(panel).lower()  # the details of the match
    # the match is marked in the raster (yellow/selected cells)
    from traceview.app import timeline

    marked = {timeline.MATCH_VALUE + 0.5, timeline.SELECTED_VALUE + 0.5}
    assert any(v in marked for tr in expand_figure(fig)["data"] if tr["type"] == "heatmap"
               for row in tr["z"] for v in row)
    _f, st2, stats2, _p, _o = ctl.timeline_action("tl-search-next.n_clicks", None, None, st, 0, query="GEMM")
    assert "match 2 selected" in stats2 and index.start[st2["sel"]] >= index.start[first]
    s2, e2 = int(index.start[st2["sel"]]), int(index.end[st2["sel"]])
    assert o + st2["t0"] <= s2 < e2 <= o + st2["t1"]
    # a match in the middle of the run: centred
    middle = {**state, "t0": (state["t1"] - state["t0"]) // 2, "t1": (state["t1"] - state["t0"]) // 2 + 10**6}
    _f, stm, _s, _p, _o = ctl.timeline_action("tl-search.n_submit", None, None, middle, 0, query="GEMM")
    sm, em = int(index.start[stm["sel"]]), int(index.end[stm["sel"]])
    assert sm >= o + middle["t0"] and abs(o + (stm["t0"] + stm["t1"]) // 2 - (sm + em) // 2) <= 1
    _f, st3, stats3, _p, _o = ctl.timeline_action("tl-search-prev.n_clicks", None, None, st2, 0, query="GEMM")
    assert st3["sel"] == first and "match 1 selected" in stats3
    _f, st4, _s, _p, _o = ctl.timeline_action("tl-search-prev.n_clicks", None, None, st3, 0, query="GEMM")
    assert "match" in _s and index.start[st4["sel"]] == starts.max()  # wraps around
    _f, st5, stats5, panel5, _o = ctl.timeline_action("tl-search.n_submit", None, None, st4, 0,
                                                      query="no_such_kernel_name")
    assert "0 match(es)" in stats5 and "No event name contains" in text_of(panel5) and "sel" not in st5


def _click_series(ctl: AppController, state: dict, series: str) -> tuple[int, tuple]:
    """Click (through the controller) the first event of ``series`` drawn in the current window."""
    from traceview.app.timeline import SERIES

    index = ctl.store.timeline(0)
    si = [k for k, _n, _c in SERIES].index(series)
    fig = expand_figure(ctl.timeline_figure(ctl.store.context(0), state)[0])
    for tr in fig["data"]:
        if tr["type"] != "heatmap" or not tr.get("customdata"):
            continue
        for row in tr["customdata"]:
            for cd in row:
                if isinstance(cd, list) and len(cd) == 1 and int(index.series[cd[0]]) == si:
                    click = {"points": [{"customdata": cd, "curveNumber": 0}]}
                    return cd[0], ctl.timeline_action("tl-graph.clickData", None, click, state, 0)
    raise AssertionError(f"no {series} drawn")


def _zoom_near_a_kernel(ctl: AppController, *, before_ms: float, after_ms: float) -> dict:
    """The timeline state zoomed around the 11th kernel of rank 0's stream 7 (in its first step),
    so that its kernels and their launch calls are drawn one by one."""
    _fig, state, _ = _page(ctl)
    ctx = ctl.store.context(0)
    index = ctl.store.timeline(0)
    lane = next(ln for ln in index.lanes if ln.rank == 0 and ln.kind == "gpu" and ln.ident == 7)
    at_ms = (int(index.start[lane.lo + 10]) - ctx.origin_ns) / 1e6
    _f, state, _s = ctl.timeline_update("tl-graph.relayoutData", {"xaxis.range[0]": at_ms - before_ms,
                                                                  "xaxis.range[1]": at_ms + after_ms}, None, state, 0)
    return state


def test_clicking_a_kernel_shows_its_details_link_stack_and_flow(ctl: AppController) -> None:
    ctx = ctl.store.context(0)
    index = ctl.store.timeline(0)
    state = _zoom_near_a_kernel(ctl, before_ms=0.05, after_ms=0.25)
    pos, (fig, st, stats, panel, _open) = _click_series(ctl, state, "compute")
    assert st["sel"] == pos and (st["t0"], st["t1"]) == (state["t0"], state["t1"])  # a click keeps the window
    row = int(index.row[pos])
    ev = ctx.full.events.slice(row, 1).to_pylist()[0]
    text = text_of(panel)
    for expected in (ev["name"], f"{ev['correlation']}", f"{ev['grid_x']} x {ev['grid_y']} x {ev['grid_z']}",
                     f"{ev['block_x']} x {ev['block_y']} x {ev['block_z']}", f"{ev['start_ns']:,} ns",
                     f"{(ev['start_ns'] - ctx.origin_ns) / 1e6:,.6f} ms", "stream"):
        assert expected in text, expected
    # the launch call it links to (by correlation, the trace's links table) and the call's op stack
    src, dst = ctx.full.launch_links()
    call = int(src[dst == row][0])
    call_name = ctx.full.events.column("name")[call].as_py()
    assert f"launch link from: runtime {call_name}" in text and f"(row {call})" in text
    stack = by_id(panel, "tl-stack")
    assert stack is not None and "ProfilerStep#" in text_of(stack) and "aten::" in text_of(stack)
    # the flow arrow: from the launch call (a CPU lane) to the kernel
    arrows = [a for a in fig["layout"]["annotations"] if a.get("showarrow")]
    assert len(arrows) == 1 and "1 flow arrow(s)" in stats
    call_pos = index.position_of_row(call)
    assert call_pos is not None
    assert arrows[0]["x"] == pytest.approx((index.start[pos] - ctx.origin_ns) / 1e6)
    assert arrows[0]["ax"] == pytest.approx((index.start[call_pos] - ctx.origin_ns) / 1e6)
    assert arrows[0]["ay"] != arrows[0]["y"]


def test_clicking_a_launch_call_draws_its_flow_to_the_gpu(ctl: AppController) -> None:
    ctx = ctl.store.context(0)
    index = ctl.store.timeline(0)
    state = _zoom_near_a_kernel(ctl, before_ms=0.1, after_ms=0.1)
    pos, (fig, _st, _stats, panel, _o) = _click_series(ctl, state, "runtime")
    text = text_of(panel)
    assert "launch link to:" in text
    arrows = [a for a in fig["layout"]["annotations"] if a.get("showarrow")]
    assert arrows and all(a["ax"] == pytest.approx((index.start[pos] - ctx.origin_ns) / 1e6) for a in arrows)


def test_a_click_on_a_raster_cell_finds_its_event_or_gap(ctl: AppController) -> None:
    """Plotly's click on a heatmap cell carries x and y, not the cell's customdata: the controller
    finds what is drawn there."""
    fig, state, _ = _page(ctl)
    index = ctl.store.timeline(0)
    o = index.origin_ns
    gap_lane = next(t for t in fig["data"] if t["type"] == "heatmap" and t["name"].endswith("idle gaps"))
    i = next(k for k, cd in enumerate(gap_lane["customdata"][0]) if cd is not None)
    g0, g1 = gap_lane["customdata"][0][i]
    x = gap_lane["x0"] + i * gap_lane["dx"]  # the centre of column i
    y = (gap_lane["y"][0] + gap_lane["y"][1]) / 2
    _f, st, stats, _p, _o = ctl.timeline_action("tl-graph.clickData", None, {"points": [{"x": x, "y": y, "z": 1}]},
                                                state, 0)
    assert (st["f0"], st["f1"]) == (g0, g1) and st["t0"] < g0 < g1 < st["t1"] and "highlighted:" in stats
    lane = next(t for t in fig["data"] if t["type"] == "heatmap" and t["name"] == "r0 · GPU 0 · stream 20")
    i = next(k for k, cd in enumerate(lane["customdata"][0]) if isinstance(cd, list))
    pos = lane["customdata"][0][i][0]
    x = float(index.start[pos] + index.end[pos]) / 2e6 - o / 1e6
    y = (lane["y"][0] + lane["y"][1]) / 2
    _f, st, _s, panel, _o = ctl.timeline_action("tl-graph.clickData", None, {"points": [{"x": x, "y": y}]}, state, 0)
    assert st["sel"] == pos and index.names[int(index.name_code[pos])][:40] in text_of(panel)
    # nothing there (below the last lane): nothing changes
    out = ctl.timeline_action("tl-graph.clickData", None, {"points": [{"x": x, "y": 1e5}]}, state, 0)
    assert out[0] is dash.no_update


def test_gap_click_opens_only_the_gaps_rank_with_the_gap_centred(ctl: AppController) -> None:
    ctx = ctl.store.context(0)
    gaps = ctx.table("idle_gaps", "gaps")
    g = gaps[gaps["rank"] == 3].sort_values("dur_ns").iloc[-1]
    row_id = int(gaps[gaps["rank"] == 3].sort_values("dur_ns").index[-1])
    path, search, _msg = ctl.gap_clicked({"row": 0, "column": 0, "column_id": "rank", "row_id": row_id}, 0)
    s, e = int(g["start_ns"]) - ctx.origin_ns, int(g["end_ns"]) - ctx.origin_ns
    assert path == "/timeline" and search == gap_search(s, e)
    fig, state, stats = _page(ctl, search)
    assert state["open"] == [3]
    lanes = _lanes(fig)
    gap_lane = "r3 · GPU 3 · idle gaps"
    assert gap_lane in lanes and not any(t.startswith("r0 · GPU") for t in lanes)
    # near the top: only the collapsed rows of ranks 0-2 above it
    assert lanes.index(gap_lane) == 3
    x0, x1 = fig["layout"]["xaxis"]["range"]
    assert abs((x0 + x1) / 2 * 1e6 - (s + e) / 2) <= 1e3  # centred (to the us)
    assert "highlighted:" in stats and "rank 3 GPU 3" in stats


def test_a_finding_link_opens_its_rank(ctl: AppController) -> None:
    _fig, state, _ = _page(ctl, "?t0=0&t1=5000000&r=5")
    assert state["open"] == [5]
    _fig, state, _ = _page(ctl, "?t0=0&t1=5000000&r=99")  # not a rank of the run: the default
    assert state["open"] == [0]


HOSTILE = [None, "abc", 1e303, float("inf"), float("nan"), -1, 10**30, [1, 2], {"a": 1}, "/etc/passwd", True,
           "x" * 500, [["a"]]]


@pytest.mark.parametrize("value", HOSTILE, ids=lambda v: repr(v)[:20])
def test_hostile_values_get_a_message_not_an_error(ctl: AppController, value: Any) -> None:
    _fig, state, _ = _page(ctl)
    calls = {
        "query": lambda: ctl.timeline_action("tl-search.n_submit", None, None, state, 0, query=value),
        "open": lambda: ctl.timeline_action("tl-open.value", None, None, state, 0, open_value=value),
        "click": lambda: ctl.timeline_action("tl-graph.clickData", None, {"points": [{"customdata": [value]}]},
                                             state, 0),
        "state.sel": lambda: ctl.timeline_action("tl-zoom-in.n_clicks", None, None, {**state, "sel": value}, 0),
        "state.q": lambda: ctl.timeline_action("tl-zoom-in.n_clicks", None, None, {**state, "q": value}, 0),
        "state.open": lambda: ctl.timeline_action("tl-zoom-in.n_clicks", None, None, {**state, "open": value}, 0),
    }
    for name, call in calls.items():
        out = call()
        assert len(out) == 5, name
        if out[0] is dash.no_update and out[2] is not dash.no_update:
            assert isinstance(out[2], str) and out[2], name  # said on the page


def test_compact_cells_expand_to_the_cells_they_encode() -> None:
    """The rasters are sent run-length encoded; expanded (as the page does) they give back each
    cell's z, customdata and hover text, empty cells included."""
    from traceview.app.timeline import CELLS_KEY, compact_cells, expand_cells

    nan = float("nan")
    vals = [np.array([nan, 2.5, 2.5, 3.5, 3.5, nan, 7.5]), np.array([nan, nan]), np.array([])]
    keys = [np.array([0, 0, 0, 0, 1, 0, 2]), np.array([0, 0]), np.array([], dtype=np.int64)]
    has = [np.array([False, True, True, True, True, False, True]), np.zeros(2, bool), np.zeros(0, bool)]
    cd, text = [[10], [11], [12]], ["a", "b", "c"]
    cells = compact_cells(vals, keys, has, cd, text)
    assert len(cells["runs"][0]) == 3 * 6  # empty, 0 as 2.5 (x2), 0 as 3.5, 1 as 3.5, empty, 2 as 7.5
    out = expand_cells({"type": "heatmap", "name": "lane", CELLS_KEY: cells})
    assert CELLS_KEY not in out and out["name"] == "lane"
    assert out["z"] == [[None, 2.5, 2.5, 3.5, 3.5, None, 7.5], [None, None], []]
    assert out["customdata"] == [[None, [10], [10], [10], [11], None, [12]], [None, None], []]
    assert out["text"] == [["", "a", "a", "a", "b", "", "c"], ["", ""], []]


def test_the_benchmark_knows_the_wheel_debounce() -> None:
    """bench_app names the debounce its wheel figure includes: the page's."""
    import bench_app

    from traceview.app import timeline_view

    assert bench_app.WHEEL_DEBOUNCE_MS == timeline_view.WHEEL_DEBOUNCE_MS
