"""The critical path in headless Chromium (Debian ``chromium`` through Playwright,
tests/browser/browser.py) on ``sample_traces/synthetic_4rank``: the timeline draws it over the
lanes (an SVG path in the overlay's colour, a legend entry), the "critical path" switch hides it
and shows it again, and the Critical path page draws its what-if and composition charts, a click on a step row
opening the timeline on that step. The
report's critical_path tables are the real ones when the analysis is on this branch, else the
synthetic ones of tests/integration/test_app_critical_path.py. Screenshots:
``test-artifacts/app_critical_path_*.png``.

Skips with a reason without Chromium; fails in CI (``CI=true``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from browser import open_page, require_chromium, screenshot, serve_app

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_app  # noqa: E402  (the benchmark's in-browser timing helpers)

TIMES: dict[str, list[float]] = {}
#: the overlay's outlines as the browser drew them: SVG paths stroked in its colour
_PATH_JS = """() => [...document.querySelectorAll('#tl-graph .scatterlayer path.js-line')]
    .filter(p => (p.style.stroke || '').replace(/ /g, '') === 'rgb(216,27,96)' && (p.getAttribute('d') || '').length > 4)
    .length"""
_TRACES_JS = f"() => {bench_app._TL}.data.filter(t => (t.name || '').startsWith('critical path')).length"  # noqa: SLF001


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_chromium()
    from test_app_critical_path import SAMPLE, use_synthetic_tables

    from traceview.app.server import create_app

    mp = pytest.MonkeyPatch()
    mp.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    app = create_app([str(SAMPLE)])
    use_synthetic_tables(mp, app.traceview_controller)  # type: ignore[attr-defined]
    try:
        with serve_app(app, "traceview-critical-path-test") as url:
            yield url
    finally:
        mp.undo()
        for name, ts in TIMES.items():
            print(f"\n{name}: {', '.join(f'{t:.0f} ms' for t in ts)}")


@pytest.fixture(scope="module")
def page(server: str) -> Iterator[Any]:
    with open_page(server + "/overview", width=1400, height=1000, timeout_ms=40_000) as p:
        p.wait_for_selector("#page h2")
        yield p


def _no_errors(page: Any) -> None:
    errors = [e for e in page.console_errors if "favicon" not in e]
    assert errors == [], errors


def _legend(page: Any) -> list[str]:
    return page.locator("#tl-legend .tl-legend-entry").all_inner_texts()


def _open(page: Any, url: str) -> None:
    page.wait_for_load_state("networkidle")
    before = len(page.console_errors)
    TIMES.setdefault("open " + url.rsplit("/", 1)[-1], []).append(bench_app.open_timeline(page, url)
                                                                   if url.endswith("/timeline") else 0.0)
    # what the previous page still loaded is aborted by this navigation (net::ERR_ABORTED): no error of the app
    page.console_errors[before:] = [e for e in page.console_errors[before:]
                                    if not (e.startswith("request failed: ") and "net::ERR_ABORTED" in e)]
    page.wait_for_load_state("networkidle")


def test_the_switch_hides_and_shows_the_critical_path(page: Any, server: str) -> None:
    _open(page, server + "/timeline")
    box = page.locator("#tl-cp input[type=checkbox]")
    assert box.is_checked() and box.is_enabled()  # on by default
    assert page.evaluate(_TRACES_JS) >= 1 and page.evaluate(_PATH_JS) >= 1
    assert "critical path" in _legend(page) and "critical path:" in page.inner_text("#tl-stats")
    screenshot(page, "app_critical_path_timeline.png", full_page=False)

    bench_app.timed_in_browser(page, box.uncheck, TIMES, "critical path off")
    assert not box.is_checked()
    assert page.evaluate(_TRACES_JS) == 0 and page.evaluate(_PATH_JS) == 0
    assert "critical path" not in _legend(page) and "critical path:" not in page.inner_text("#tl-stats")

    bench_app.timed_in_browser(page, lambda: page.click("#tl-zoom-in"), TIMES, "zoom in (path off)")
    assert page.evaluate(_TRACES_JS) == 0  # a zoom keeps it off

    bench_app.timed_in_browser(page, box.check, TIMES, "critical path on")
    assert box.is_checked() and page.evaluate(_TRACES_JS) >= 1 and page.evaluate(_PATH_JS) >= 1
    assert "critical path" in _legend(page)
    screenshot(page, "app_critical_path_timeline_zoomed.png", full_page=False)
    _no_errors(page)


def test_the_critical_path_page_draws_whatif_and_composition(page: Any, server: str) -> None:
    from traceview.app.pages import page_list

    found = [p for p in page_list() if p.analysis == "critical_path"]
    if not found:
        pytest.skip("the critical_path analysis is not on this branch yet (no page in the navigation)")
    before = len(page.console_errors)
    page.goto(server + found[0].path, wait_until="load")
    page.console_errors[before:] = [e for e in page.console_errors[before:]
                                    if not (e.startswith("request failed: ") and "net::ERR_ABORTED" in e)]
    page.wait_for_selector("#cp-composition .js-plotly-plot .barlayer", timeout=60_000)
    page.wait_for_selector("#cp-whatif-chart .js-plotly-plot .barlayer")
    assert page.locator("#cp-composition .barlayer .point").count() >= 1
    assert page.locator("#cp-whatif-chart .barlayer .point").count() >= 1
    assert page.locator("#cp-whatif td").count() >= 1
    screenshot(page, "app_critical_path_page.png")
    # a step row opens the timeline on that step, the path drawn
    page.locator("#cp-steps td[data-dash-column='step']").first.click()
    page.wait_for_url("**/timeline?*", timeout=30_000)
    page.wait_for_function(f"() => {{ const el = {bench_app._TL}; return el && el.data && "  # noqa: SLF001
                           "el.data.some(t => (t.name || '').startsWith('critical path')); }", timeout=60_000)
    assert "highlighted: selected range" in page.inner_text("#tl-stats")
    _no_errors(page)
