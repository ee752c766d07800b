"""The web app in real headless Chromium (Debian's ``chromium``, driven by Playwright through
``tests/browser/browser.py``): every page renders with data and no console error (the generic page of an
analysis without its own page too), the Findings page lists the pipeline report's findings by id
and in order, clicking a gap zooms the
timeline, drag-zoom and the zoom buttons work, switching runs and comparing works, and the report
downloads parse. Screenshots of every page go to ``test-artifacts/app_*.png``.

Skips with a reason without Chromium; fails in CI (``CI=true``), where it must run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from browser import open_page, require_chromium, screenshot, serve_app
from conftest import SAMPLE_TRACES, SHARED_TRACES

RUNS = [SAMPLE_TRACES / "synthetic_4rank", SAMPLE_TRACES / "regression_pair",
        SAMPLE_TRACES / "torch_cpu_mlp.json.gz"]

#: JavaScript: what each plotly graph on the page holds
_GRAPHS_JS = """() => Array.from(document.querySelectorAll('#page .js-plotly-plot')).map(el => {
    const g = el.closest('.dash-graph');
    const data = el._fullData || el.data || [];  // _fullData: typed arrays (bdata) decoded
    let points = 0;
    for (const t of data) { const v = t.z || t.x || t.y || []; points += v.length || 0; }
    return {id: g ? g.id : '', traces: data.length, points: points,
            height: el.getBoundingClientRect().height};
})"""
_XRANGE_JS = "() => { const el = document.querySelector('#tl-graph .js-plotly-plot'); " \
             "return el && el.layout ? el.layout.xaxis.range : null; }"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    require_chromium()
    from traceview.app.server import create_app

    app = create_app([str(p) for p in RUNS])
    with serve_app(app, "traceview-app-test") as url:
        yield url


@pytest.fixture(scope="module")
def page(server: str) -> Iterator[Any]:
    with open_page(server + "/overview", width=1400, height=1000) as p:
        p.wait_for_selector("#page h2")
        p.wait_for_load_state("networkidle")
        yield p


def _open(page: Any, title: str, nav: str | None = None, url: str | None = None) -> None:
    if url is not None:
        # leave the current page only when it is idle: a navigation aborts requests in flight, and
        # Chromium reports those as failed requests
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(300)
        page.goto(url, wait_until="load")
    elif nav is not None:
        page.click(f"#nav-{nav}")
    page.wait_for_function("t => { const h = document.querySelector('#page h2'); return h && h.textContent === t; }",
                           arg=title)
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => Array.from(document.querySelectorAll('#page .js-plotly-plot'))"
                           ".every(el => el.data && el.layout)")
    page.wait_for_timeout(400)  # let plotly finish drawing before a screenshot


def _graphs(page: Any) -> dict[str, dict]:
    return {g["id"]: g for g in page.evaluate(_GRAPHS_JS)}


def _table_rows(page: Any, table_id: str) -> int:
    return page.locator(f"#{table_id} td.dash-cell").count()


def _no_errors(page: Any) -> None:
    assert page.console_errors == [], page.console_errors


PAGES = [  # nav id, title, graphs that must hold data, tables that must have rows
    ("overview", "Overview", ["ov-breakdown", "ov-steps"], ["ov-util"]),
    ("timeline", "Timeline", ["tl-graph"], []),
    ("gaps", "Gaps", ["gap-hist"], ["gap-table", "gap-causes"]),
    ("launch", "Launch overhead", ["launch-scatter"], ["launch-ops", "launch-steps"]),
    ("communication", "Communication", ["comm-overlap", "comm-skew"], ["comm-stragglers"]),
    ("kernels", "Kernels", ["kern-chart"], ["kern-table", "kern-categories"]),
    # no op shapes in this run: the page says why there is no roofline, and shows the coverage
    ("efficiency", "Efficiency", [], ["eff-coverage"]),
    # an analysis without a page of its own: the generic page of its tables
    ("analysis-synchronization", "Synchronisation", [], ["gen-synchronization-sync_summary"]),
    ("compare", "Compare", [], ["cmp-metrics", "cmp-kernels"]),
    ("findings", "Findings", [], []),
]


@pytest.mark.parametrize("nav,title,graph_ids,table_ids", PAGES, ids=[p[0] for p in PAGES])
def test_page_renders_with_data(page: Any, server: str, nav: str, title: str, graph_ids: list[str],
                                table_ids: list[str]) -> None:
    if nav == "overview":
        _open(page, title, url=server + "/overview")
    else:
        _open(page, title, nav=nav)
    graphs = _graphs(page)
    for gid in graph_ids:
        assert gid in graphs, (gid, list(graphs))
        assert graphs[gid]["traces"] > 0 and graphs[gid]["points"] > 0, graphs[gid]
        assert graphs[gid]["height"] > 200
    for tid in table_ids:
        assert _table_rows(page, tid) > 0, tid
    if nav == "findings":
        # the one report's findings, in its order, with its ids (F1, F1.1, ...)
        from traceview.pipeline import analyze

        report = analyze(sorted((RUNS[0]).glob("rank*.json*")), use_cache=False)
        assert page.locator(".tv-fid").all_inner_texts() == [f["id"] for f in report["findings"]]
        assert page.locator(".tv-ftitle").all_inner_texts() == [f["title"] for f in report["findings"]]
        assert page.locator("#dl-json-btn").is_visible()
    if nav == "timeline":
        stats = page.inner_text("#tl-stats")
        assert "events drawn" in stats and "heatmap cells" in stats
        lanes = page.evaluate("() => document.querySelector('#tl-graph .js-plotly-plot').layout.yaxis.ticktext")
        assert "r0 · GPU 0 · stream 7" in lanes
    if nav == "compare":
        assert page.inner_text("#cmp-verdict") in ("regressed", "improved", "changed", "no significant change")
    screenshot(page, f"app_{nav}.png")
    _no_errors(page)


def test_clicking_a_gap_zooms_the_timeline(page: Any, server: str) -> None:
    _open(page, "Gaps", url=server + "/gaps")
    cell = lambda col: page.locator(f"#gap-table td[data-dash-column='{col}']").first  # noqa: E731
    at_ms = float(cell("at_ms").inner_text().replace(",", ""))
    # the duration column is in the unit its typical gap reads best in, named in its header
    unit = page.locator("#gap-table th[data-dash-column='dur_ns']").first.inner_text().split("(")[-1].rstrip(") \n")
    per_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
    dur_ms = float(cell("dur_ns").inner_text().replace(",", "")) * per_ms
    cause = cell("cause").inner_text().strip()
    cell("cause").click()
    page.wait_for_url("**/timeline?**")
    _open(page, "Timeline")
    x0, x1 = page.evaluate(_XRANGE_JS)
    assert x0 < at_ms < at_ms + dur_ms < x1 + 1e-3
    assert (x1 - x0) <= 5 * dur_ms + 0.01  # zoomed in around the gap (the whole run is 12 ms)
    shapes = page.evaluate("() => document.querySelector('#tl-graph .js-plotly-plot').layout.shapes"
                           ".filter(s => s.type === 'rect').length")
    assert shapes == 1  # the clicked gap, highlighted
    from traceview.app.timeline import CAUSE_LABELS

    assert f"highlighted: {CAUSE_LABELS.get(cause, cause)} gap" in page.inner_text("#tl-stats")
    screenshot(page, "app_timeline_gap.png", full_page=False)
    _no_errors(page)


def test_timeline_drag_zoom_and_buttons(page: Any, server: str) -> None:
    _open(page, "Timeline", url=server + "/timeline")
    x0, x1 = page.evaluate(_XRANGE_JS)
    # drag pans by default (tests/browser/test_app_timeline_browser.py); the modebar's zoom tool makes a drag zoom
    page.hover("#tl-graph .nsewdrag")
    page.click("#tl-graph .modebar-btn[data-attr='dragmode'][data-val='zoom']")
    # drag across the middle fifth of the plot area: plotly zooms, the server sends the detail
    box = page.locator("#tl-graph .nsewdrag").first.bounding_box()
    y = box["y"] + box["height"] * 0.3
    page.mouse.move(box["x"] + box["width"] * 0.4, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=8)
    page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=8)
    page.mouse.up()
    page.wait_for_function("w => document.querySelector('#tl-stats').textContent.indexOf(w) < 0",
                           arg=f"window {x1 - x0:,.3f} ms")
    z0, z1 = page.evaluate(_XRANGE_JS)
    assert x0 < z0 < z1 < x1 and (z1 - z0) < 0.3 * (x1 - x0)
    stats = page.inner_text("#tl-stats")
    assert f"window {z1 - z0:,.3f} ms" in stats
    # the chart's new revision: the stats line alone is no proof that plotly drew the new figure
    revision = "document.querySelector('#tl-graph .js-plotly-plot').layout.meta.revision"
    before = page.evaluate(f"() => {revision}")
    page.click("#tl-zoom-out")
    page.wait_for_function("w => document.querySelector('#tl-stats').textContent.indexOf(w) < 0", arg=stats)
    page.wait_for_function(f"r => {revision} !== r", arg=before)
    o0, o1 = page.evaluate(_XRANGE_JS)
    assert (o1 - o0) == pytest.approx(2 * (z1 - z0), rel=0.01)
    screenshot(page, "app_timeline_zoomed.png", full_page=False)
    _no_errors(page)


def test_switching_runs_and_filters(page: Any, server: str) -> None:
    _open(page, "Overview", url=server + "/overview")
    page.click("#run")
    page.get_by_role("option", name="1: regression_pair/base/rank* (2 ranks)").click()
    page.wait_for_function("() => document.querySelector('#status').textContent.startsWith('regression_pair/base')")
    _open(page, "Compare", nav="compare")
    assert "regression_pair/new" in page.inner_text("#cmp-new")
    assert _table_rows(page, "cmp-kernels") > 0
    screenshot(page, "app_compare_pair.png")
    # rank filter: only rank 1 left in the overview table
    _open(page, "Overview", nav="overview")
    page.click("#f-ranks")
    page.get_by_role("option", name="rank 1").click()
    page.keyboard.press("Escape")
    page.wait_for_function("() => document.querySelector('#status').textContent.includes('ranks 1')")
    _open(page, "Overview")
    ranks = page.locator("#ov-util td[data-dash-column='rank']").all_inner_texts()
    assert ranks == ["1"]
    _no_errors(page)


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_report_download_parses(page: Any, server: str, fmt: str, tmp_path: Path) -> None:
    if "/findings" not in page.url:
        _open(page, "Findings", url=server + "/findings")
    with page.expect_download() as info:
        page.click(f"#dl-{fmt}-btn")
    target = tmp_path / info.value.suggested_filename
    info.value.save_as(target)
    text = target.read_text(encoding="utf-8")
    assert target.suffix == "." + fmt
    if fmt == "json":
        data = json.loads(text)
        assert data["summary"]["num_ranks"] == 4 and data["findings"]
    elif fmt == "md":
        assert text.startswith("#") and "## " in text and "|" in text  # headings and tables
    else:
        assert text.lstrip().lower().startswith("<!doctype html") and "</html>" in text.lower()
    _no_errors(page)


# ------------------------------------------------------------------------------------ efficiency

#: JavaScript: what the roofline chart drew (SVG marks, not only its data)
_ROOFLINE_JS = """() => {
    const el = document.querySelector('#eff-roofline .js-plotly-plot');
    if (!el) return null;
    return {traces: el.data.map(t => ({meta: t.meta, n: (t.x || []).length, name: t.name})),
            markers: el.querySelectorAll('.scatterlayer path.point').length,
            lines: el.querySelectorAll('.scatterlayer path.js-line').length,
            xtype: el.layout.xaxis.type, ytype: el.layout.yaxis.type};
}"""
EFFICIENCY_SAMPLE = SAMPLE_TRACES / "efficiency_roofline.json.gz"


@pytest.fixture(scope="module")
def efficiency_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app over two runs: 0, the planted trace of tests/unit/test_efficiency.py (op shapes set in the
    events table); 1, the efficiency sample (its shapes come from the Kineto parser); on the round
    peaks of both GPU files."""
    require_chromium()
    from test_efficiency import SPEC_TOML, planted
    import traceview
    from traceview.app.runs import RunSpec, RunStore
    from traceview.app.server import create_app
    from traceview.findings import Options

    folder = tmp_path_factory.mktemp("efficiency")
    specs = folder / "gpus.toml"
    specs.write_text(SPEC_TOML + "\n" + EFFICIENCY_SAMPLE.with_name("efficiency_roofline.gpus.toml").read_text())
    trace, _ = planted()

    def loader(files: list[Path]) -> Any:
        return traceview.load(files, use_cache=False) if files[0] == EFFICIENCY_SAMPLE else trace

    runs = [RunSpec(0, "planted", (folder / "planted.json",)), RunSpec(1, "efficiency sample", (EFFICIENCY_SAMPLE,))]
    app = create_app(store=RunStore(runs, use_cache=False, loader=loader, options=Options(gpu_specs=str(specs))))
    with serve_app(app, "traceview-app-efficiency") as url:
        yield url


@pytest.mark.parametrize("run", [0, 1], ids=["planted", "sample"])
def test_efficiency_roofline_renders(page: Any, efficiency_server: str, run: int) -> None:
    """The roofline chart is drawn: a marker per op type with FLOPs and a line per roof, on log axes;
    the op-type table has rows. Screenshot: test-artifacts/app_efficiency_<run>.png. (The browser of
    the module's ``page`` fixture: Playwright's sync API runs one at a time.)"""
    if run == 1:
        import traceview

        sample = traceview.load(EFFICIENCY_SAMPLE, use_cache=False)
        if sample.events.column("input_dims").null_count == sample.num_events:
            pytest.skip("the Kineto parser does not fill input_dims yet: the sample has no op shapes")
    _open(page, "Efficiency", url=efficiency_server + "/efficiency")
    if run:
        page.click("#run")
        page.get_by_role("option", name="1: efficiency sample").click()
        page.wait_for_function("() => document.querySelector('#status').textContent.startsWith('efficiency')")
        _open(page, "Efficiency")
    page.wait_for_selector("#eff-roofline .scatterlayer path.point")
    drawn = page.evaluate(_ROOFLINE_JS)
    assert drawn is not None, "no roofline chart on the page"
    points = [t for t in drawn["traces"] if t["meta"] == "points"]
    roofs = [t for t in drawn["traces"] if t["meta"] == "roof"]
    assert len(roofs) == 2 and all(t["n"] == 3 for t in roofs), drawn  # bf16 tensor and fp32 vector roofs
    assert sum(t["n"] for t in points) == 2 and drawn["markers"] == 2, drawn  # one per op type with FLOPs
    assert drawn["lines"] >= 2 and (drawn["xtype"], drawn["ytype"]) == ("log", "log"), drawn
    assert _table_rows(page, "eff-op-types") > 0 and _table_rows(page, "eff-coverage") > 0
    screenshot(page, f"app_efficiency_{'sample' if run else 'planted'}.png")
    _no_errors(page)


# ------------------------------------------------------------------- pages at a glance (issue 15)

GLANCE_RUNS = ("job8", "mi300x")


@pytest.fixture(scope="module")
def glance_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app over the 8-rank job of benchmarks/gen_job.py (4 steps) and, when the shared traces
    are there, the MI300X torch.compile trace (AMD, no steps)."""
    require_chromium()
    import subprocess
    import sys

    from conftest import REPO
    from traceview.app.server import create_app

    job = tmp_path_factory.mktemp("glance") / "job8"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "gen_job.py"), str(job), "--ranks", "8", "--steps", "4"],
                   check=True, capture_output=True)
    paths = [str(job)]
    amd = SHARED_TRACES / "kineto" / "tracelens_torch_compile_triton_mi300x.json.gz"
    if amd.exists():
        paths.append(str(amd))
    app = create_app(paths, use_cache=False)
    with serve_app(app, "traceview-app-glance") as url:
        yield url


def _choose_run(page: Any, server: str, run: int) -> None:
    _open(page, "Overview", url=server + "/overview")
    if run:
        page.click("#run")
        page.get_by_role("option", name="1: tracelens_torch_compile_triton_mi300x.json.gz").click()
        page.wait_for_function("() => document.querySelector('#status').textContent.startsWith('tracelens')")
        _open(page, "Overview")


@pytest.mark.parametrize("run", [0, 1], ids=GLANCE_RUNS)
def test_pages_at_a_glance(page: Any, glance_server: str, run: int) -> None:
    """Kernels (one row per normalised kernel, a chart, the per-rank detail of a selected row),
    Overview (the GPU named, whole-trace wording without steps) and Findings (one line each, the
    evidence on expand), with screenshots ``app_glance_<run>_<page>.png``."""
    if run and not (SHARED_TRACES / "kineto").exists():
        pytest.skip("the shared traces (MI300X) are absent")
    _choose_run(page, glance_server, run)
    page.wait_for_function("() => { const f = document.querySelector('#ov-findings'); return f && "
                           "(f.querySelector('.tv-finding') || f.textContent.includes('No findings.')); }",
                           timeout=60_000)
    cards = page.inner_text("#page .tv-stat:nth-child(2)")
    if run:
        assert "AMD Instinct MI300X" in cards and "304 CUs" in cards
        assert "none found" in page.inner_text("#page") and "IDLE, WHOLE TRACE" in page.inner_text("#page").upper()
        assert "ov-steps" not in _graphs(page)
    else:
        assert "ov-steps" in _graphs(page)
    screenshot(page, f"app_glance_{GLANCE_RUNS[run]}_overview.png")
    _open(page, "Kernels", nav="kernels")
    assert _graphs(page)["kern-chart"]["points"] > 0
    page.locator("#kern-table td[data-dash-column='name']").first.click()
    page.wait_for_selector("#kern-ranks td.dash-cell")
    assert _table_rows(page, "kern-ranks") > 0
    align = page.evaluate("() => getComputedStyle(document.querySelector("
                          "\"#kern-table td[data-dash-column='name']\")).textAlign")
    assert align == "left"
    page.mouse.move(0, 0)  # no tooltip in the picture
    page.wait_for_timeout(300)
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 1400, width  # no long name widens the page
    screenshot(page, f"app_glance_{GLANCE_RUNS[run]}_kernels.png")
    _open(page, "Findings", nav="findings")
    first = page.locator(".tv-finding").first
    line = first.locator(":scope > summary").bounding_box()
    assert line is not None and line["height"] < 40  # one line
    assert not first.locator(".tv-frec").is_visible()
    first.locator(":scope > summary").click()
    page.wait_for_function("() => document.querySelector('.tv-finding').open")
    assert first.locator(".tv-frec").is_visible()
    screenshot(page, f"app_glance_{GLANCE_RUNS[run]}_findings.png")
    _no_errors(page)
