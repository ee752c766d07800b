"""The timeline in headless Chromium (Debian ``chromium`` through Playwright, tests/browser/browser.py) on the
8-rank job of benchmarks/gen_job.py: name search (highlight, next/previous), click an event for its
details and the flow arrow from its launch call, wheel zoom, drag pan, opening a rank, and a gap
click in the Gaps table that opens the timeline on the gap's rank with the gap centred. Each
interaction's latency in the browser is printed (``-s``); targets are checked by
``benchmarks/bench_app.py --browser`` (speed lives in benchmarks, not in tests).

Skips with a reason without Chromium; fails in CI (``CI=true``).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from browser import open_page, require_chromium, screenshot, serve_app

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_app  # noqa: E402  (the benchmark's in-browser timing helpers)
import gen_job  # noqa: E402

_XRANGE_JS = f"() => {bench_app._TL}.layout.xaxis.range"  # noqa: SLF001
_LANES_JS = f"() => {bench_app._TL}.layout.yaxis.ticktext"  # noqa: SLF001
TIMES: dict[str, list[float]] = {}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_chromium()
    from traceview.app.server import create_app

    job = tmp_path_factory.mktemp("job8")
    gen_job.generate(job, ranks=8, steps=4, layers=8, gz=True)
    (job / "truth.json").unlink()
    mp = pytest.MonkeyPatch()
    mp.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    app = create_app([str(job)])
    try:
        with serve_app(app, "traceview-timeline-test") as url:
            yield url
    finally:
        mp.undo()
        if TIMES:
            print("\ntimeline interactions in the browser (ms, median / max):")
            for name, ts in TIMES.items():
                print(f"  {name:44s} {statistics.median(ts):8.1f} {max(ts):8.1f}  (n={len(ts)})")


@pytest.fixture(scope="module")
def page(server: str) -> Iterator[Any]:
    with open_page(server + "/overview", width=1400, height=1000, timeout_ms=40_000) as p:
        p.wait_for_selector("#page h2")
        yield p


def _timeline(page: Any, server: str) -> None:
    page.wait_for_load_state("networkidle")
    before = len(page.console_errors)
    TIMES.setdefault("open the timeline page", []).append(bench_app.open_timeline(page, server + "/timeline"))
    # the page is shared by the tests: an answer the previous test's last zoom still waited for is
    # aborted by this navigation (net::ERR_ABORTED), which says nothing about the app
    page.console_errors[before:] = [e for e in page.console_errors[before:]
                                    if not (e.startswith("request failed: ") and "net::ERR_ABORTED" in e)]
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(500)  # plotly binds its mouse handlers after the first draw


def _no_errors(page: Any) -> None:
    errors = [e for e in page.console_errors if "favicon" not in e]
    assert errors == [], errors


def _settled(page: Any) -> tuple[float, float]:
    """The x range once the last answer of the server is drawn (a burst of wheel events may send
    several zooms: the stats line then says the window of the last one)."""
    page.wait_for_load_state("networkidle")
    page.wait_for_function(f"""() => {{ const r = {bench_app._TL}.layout.xaxis.range;
        const w = (r[1] - r[0]).toLocaleString('en-US', {{minimumFractionDigits: 3, maximumFractionDigits: 3}});
        return document.querySelector('#tl-stats').textContent.indexOf('window ' + w + ' ms') >= 0; }}""")  # noqa: SLF001
    return tuple(page.evaluate(_XRANGE_JS))  # type: ignore[return-value]


def _plot_box(page: Any) -> dict:
    return page.locator("#tl-graph .nsewdrag").first.bounding_box()


def test_wheel_zooms_and_drag_pans(page: Any, server: str) -> None:
    _timeline(page, server)
    x0, x1 = page.evaluate(_XRANGE_JS)
    box = _plot_box(page)
    cx, cy = box["x"] + box["width"] * 0.5, box["y"] + 40

    def wheel() -> None:
        page.mouse.move(cx, cy)
        for _ in range(6):  # a wheel turn is a burst of events; plotly zooms ~10% per event
            page.mouse.wheel(0, -100)

    bench_app.timed_in_browser(page, wheel, TIMES, f"wheel zoom (incl. the {bench_app.WHEEL_DEBOUNCE_MS} ms debounce)",
                               final=True)
    z0, z1 = _settled(page)  # the server drew that window
    assert x0 <= z0 < z1 <= x1 and (z1 - z0) < 0.7 * (x1 - x0)

    def drag() -> None:
        page.mouse.move(cx, cy)
        page.mouse.down()
        page.mouse.move(cx - box["width"] * 0.2, cy, steps=5)
        page.mouse.up()

    bench_app.timed_in_browser(page, drag, TIMES, "drag pan")
    p0, p1 = _settled(page)
    assert p1 - p0 == pytest.approx(z1 - z0, rel=1e-3) and p0 > z0  # same width, moved later in time
    _no_errors(page)


def test_next_match_moves_the_view_every_time(page: Any, server: str) -> None:
    """Each click on "next" draws the next match (a relayout event of the previous redraw used to
    overtake the click's request, and Dash dropped the answer: no new figure)."""
    _timeline(page, server)
    for _ in range(2):  # away from the run's start, where a window centred on a match is clamped
        bench_app.timed_in_browser(page, lambda: page.click("#tl-zoom-in"), TIMES, "button zoom in")
    page.fill("#tl-search", "gemm")
    bench_app.timed_in_browser(page, lambda: page.press("#tl-search", "Enter"), TIMES, "search (Enter)")
    import re

    def selected() -> int:
        hit = re.search(r"match ([\d,]+) selected", page.inner_text("#tl-stats"))
        assert hit, page.inner_text("#tl-stats")
        return int(hit.group(1).replace(",", ""))

    seen = [(tuple(page.evaluate(_XRANGE_JS)), selected())]
    for _ in range(5):  # back to back, as a user clicks through the matches
        bench_app.timed_in_browser(page, lambda: page.click("#tl-search-next"), TIMES, "search: next match")
        seen.append((tuple(page.evaluate(_XRANGE_JS)), selected()))
        assert seen[-1][1] == seen[-2][1] + 1  # the next match is selected ...
        assert seen[-1][0] != seen[-2][0]  # ... and the window moved to it
    _no_errors(page)


def test_time_axis_is_pinned_and_the_legend_names_what_is_drawn(page: Any, server: str) -> None:
    _timeline(page, server)
    legend = page.locator("#tl-legend .tl-legend-entry").all_inner_texts()
    # ranks 1-7 are collapsed to their GPU busy fraction; rank 0 is drawn event by event
    assert "GPU busy fraction (aggregated lanes)" in legend and "compute kernel" in legend, legend
    axis_range = page.evaluate("() => document.querySelector('#tl-axis .js-plotly-plot').layout.xaxis.range")
    assert axis_range == pytest.approx(page.evaluate(_XRANGE_JS))
    for r in (1, 2, 3):  # a chart taller than the window
        bench_app.timed_in_browser(page, page.locator("#tl-open input[type=checkbox]").nth(r).check, TIMES,
                                   "open a rank")
    box = page.locator("#tl-axis-box")
    page.evaluate("() => window.scrollTo(0, 0)")
    top_before = box.bounding_box()["y"]
    page.evaluate(f"() => window.scrollTo(0, {top_before + 300})")
    page.wait_for_timeout(100)
    graph_top = page.locator("#tl-graph").bounding_box()["y"]
    assert top_before > 0 and graph_top < 0  # the chart's top scrolled out of the window ...
    assert box.bounding_box()["y"] == pytest.approx(0, abs=1)  # ... and the axis stayed at its top
    assert page.locator("#tl-axis .xtick").count() >= 3  # with its time labels
    screenshot(page, "app_timeline_scrolled.png", full_page=False)
    page.evaluate("() => window.scrollTo(0, 0)")
    _no_errors(page)


def test_search_highlights_and_jumps_between_matches(page: Any, server: str) -> None:
    _timeline(page, server)
    page.fill("#tl-search", "gemm")
    bench_app.timed_in_browser(page, lambda: page.press("#tl-search", "Enter"), TIMES, "search (Enter)")
    stats = page.inner_text("#tl-stats")
    assert "search “gemm”:" in stats and "match 1 selected" in stats
    assert "gemm" in page.inner_text("#tl-details-body").lower()
    bench_app.timed_in_browser(page, lambda: page.click("#tl-search-next"), TIMES, "search: next match")
    assert "match 2 selected" in page.inner_text("#tl-stats")
    bench_app.timed_in_browser(page, lambda: page.click("#tl-search-prev"), TIMES, "search: previous match")
    assert "match 1 selected" in page.inner_text("#tl-stats")
    # the matches are marked in the drawn rasters
    from traceview.app.timeline import MATCH_VALUE, SELECTED_VALUE

    marked = page.evaluate(f"""() => {{ let n = 0; for (const t of {bench_app._TL}.data) {{
        if (t.type !== 'heatmap') continue;
        for (const row of t.z) for (const v of row) if (v === {MATCH_VALUE + 0.5} || v === {SELECTED_VALUE + 0.5}) n++;
        }} return n; }}""")  # noqa: SLF001
    assert marked > 0
    # the server sent the rasters run-length encoded; plotly drew them expanded, a cell per column
    from traceview.app.timeline import CELLS_KEY

    rows = page.evaluate(f"""() => {bench_app._TL}.data.filter(t => t.type === 'heatmap')
        .map(t => [t['{CELLS_KEY}'] === undefined, t.z.length, t.z[0].length, t.text ? t.text[0].length : -1,
                   t.customdata ? t.customdata[0].length : -1])""")  # noqa: SLF001
    bins = {r[2] for r in rows}
    assert rows and all(r[0] and r[1] >= 1 for r in rows) and len(bins) == 1 and bins.pop() > 100
    assert all(r[3] in (-1, r[2]) and r[4] == r[2] for r in rows)
    screenshot(page, "app_timeline_search.png", full_page=False)
    _no_errors(page)


def test_clicking_a_kernel_shows_details_and_its_launch_flow(page: Any, server: str) -> None:
    _timeline(page, server)
    page.fill("#tl-search", "gemm")  # brings a gemm kernel into a window where it is drawn wide
    bench_app.timed_in_browser(page, lambda: page.press("#tl-search", "Enter"), TIMES, "search (Enter)")
    pt = page.evaluate(bench_app._EVENT_POINT_JS, "gemm")  # noqa: SLF001
    assert pt is not None, "no gemm kernel drawn wide enough to click"
    bench_app.timed_in_browser(page, lambda: page.mouse.click(pt["x"], pt["y"]), TIMES,
                               "click an event (details + flows)")
    page.wait_for_selector("#tl-details-body")
    details = page.inner_text("#tl-details-body")
    for needed in ("grid", "block", "correlation", "since the run's first event", "launch link from: runtime",
                   "op stack"):
        assert needed in details, needed
    arrows = page.evaluate(f"() => ({bench_app._TL}.layout.annotations || []).filter(a => a.showarrow).length")  # noqa: SLF001
    assert arrows >= 1
    assert page.locator("#tl-graph .annotation-arrow-g path").count() >= 1  # drawn
    screenshot(page, "app_timeline_details.png", full_page=True)
    _no_errors(page)


def test_opening_a_rank_draws_its_lanes(page: Any, server: str) -> None:
    _timeline(page, server)
    assert "r5 · collapsed (5 lanes)" in page.evaluate(_LANES_JS)
    checkbox = page.locator("#tl-open input[type=checkbox]").nth(5)
    bench_app.timed_in_browser(page, checkbox.check, TIMES, "open a rank")
    lanes = page.evaluate(_LANES_JS)
    assert "r5 · collapsed (5 lanes)" not in lanes and "r5 · GPU 5 · stream 7" in lanes
    _no_errors(page)


def test_gap_click_focuses_the_gaps_rank_with_the_gap_centred(page: Any, server: str) -> None:
    page.wait_for_load_state("networkidle")
    page.goto(server + "/gaps", wait_until="load")
    page.wait_for_selector("#gap-table td[data-dash-column='cause']")
    page.wait_for_load_state("networkidle")
    # the largest gap of a rank other than 0 (rank 0 is open anyway)
    rows = page.locator("#gap-table tr:has(td[data-dash-column='rank'])")
    target = None
    for i in range(rows.count()):
        rank = int(rows.nth(i).locator("td[data-dash-column='rank']").inner_text())
        if rank != 0:
            target = (i, rank)
            break
    assert target is not None
    i, rank = target
    at_ms = float(rows.nth(i).locator("td[data-dash-column='at_ms']").inner_text().replace(",", ""))
    TIMES.setdefault("gap click -> timeline focused on it", []).append(0.0)
    import time

    t0 = time.perf_counter()
    rows.nth(i).locator("td[data-dash-column='cause']").click()
    page.wait_for_url("**/timeline?**")
    page.wait_for_function(f"() => {{ const el = {bench_app._TL}; return el && el._fullLayout; }}")  # noqa: SLF001
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    TIMES["gap click -> timeline focused on it"][-1] = (time.perf_counter() - t0) * 1000
    lanes = page.evaluate(_LANES_JS)
    gap_lane = f"r{rank} · GPU {rank} · idle gaps"
    assert gap_lane in lanes and lanes.index(gap_lane) <= rank  # its rank open, the others one row each
    x0, x1 = page.evaluate(_XRANGE_JS)
    assert x0 < at_ms < x1
    rect = page.evaluate(f"() => {bench_app._TL}.layout.shapes.filter(s => s.type === 'rect')")  # noqa: SLF001
    assert len(rect) == 1 and abs((rect[0]["x0"] + rect[0]["x1"]) / 2 - (x0 + x1) / 2) < 1e-3 * (x1 - x0)
    # the gap lane is on screen (the page is not scrolled; the lane is in the first viewport)
    y = page.evaluate(f"""(lane) => {{ const el = {bench_app._TL}; const ya = el._fullLayout.yaxis;
        const i = el.layout.yaxis.ticktext.indexOf(lane);
        return el.querySelector('.nsewdrag').getBoundingClientRect().top + ya.l2p(el.layout.yaxis.tickvals[i]); }}""",
                      gap_lane)  # noqa: SLF001
    assert 0 < y < 1000
    screenshot(page, "app_timeline_gap_focus.png", full_page=False)
    _no_errors(page)
