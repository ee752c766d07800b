"""The Modules page in headless Chromium (Debian ``chromium`` through Playwright,
tests/browser/browser.py) on ``sample_traces/synthetic_4rank``: the page draws the icicle of a
rank's range tree (an SVG sector per range), the rank selector and the colouring redraw it, and a
click on a layer opens the timeline on that range, its rank opened and the range highlighted.
Screenshots: ``test-artifacts/app_modules_*.png``.

Skips with a reason without Chromium; fails in CI (``CI=true``).
"""

from __future__ import annotations

from typing import Any, Iterator
from urllib.parse import parse_qs, urlparse

import pytest

from browser import open_page, require_chromium, screenshot, serve_app

#: the icicle's sectors as the browser drew them
_SECTORS = "#mod-icicle .iciclelayer g.slice"
#: a large annotation range of the sample on every rank (~25% of its GPU busy time)
LAYER = "DistributedDataParallel.forward"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_chromium()
    from test_app_critical_path import SAMPLE

    from traceview.app.server import create_app

    mp = pytest.MonkeyPatch()
    mp.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    app = create_app([str(SAMPLE)])
    try:
        with serve_app(app, "traceview-modules-test") as url:
            yield url
    finally:
        mp.undo()


def _sector_colors(page: Any) -> list[str]:
    return page.evaluate(f"""() => [...document.querySelectorAll('{_SECTORS} path.surface')]
        .map(p => p.style.fill || '')""")


def test_the_modules_page_draws_the_tree_and_a_layer_opens_the_timeline(server: str) -> None:
    from traceview.app.pages import page_list

    path = next(p.path for p in page_list() if p.analysis == "modules")
    with open_page(server + path, width=1400, height=1000, timeout_ms=60_000) as page:
        page.wait_for_selector(_SECTORS, timeout=60_000)
        drawn = page.locator(_SECTORS).count()
        assert drawn >= 3  # the rank, the time outside every range and at least one range
        assert page.locator("#mod-types td").count() >= 1 and page.locator("#mod-attribution td").count() >= 1
        assert "by layer:" in page.inner_text("#mod-by-layer")
        by_kind = _sector_colors(page)
        screenshot(page, "app_modules_page.png")

        # colour by type path: the same sectors, other colours
        page.locator("#mod-color input[value='type_path']").check()
        page.wait_for_function(f"""(before) => {{
            const now = [...document.querySelectorAll('{_SECTORS} path.surface')].map(p => p.style.fill || '');
            return now.length === before.length && now.some((c, i) => c !== before[i]); }}""",
                               arg=by_kind, timeout=30_000)

        # rank 2 from the selector: its tree is drawn
        page.click("#mod-rank")
        page.get_by_role("option", name="rank 2", exact=True).click()
        page.wait_for_function("() => (document.querySelector('#mod-rank').innerText || '').includes('rank 2')")
        page.wait_for_selector(f"{_SECTORS}:has-text('{LAYER}')", timeout=30_000)
        page.wait_for_function("() => document.querySelector('#mod-icicle h3, #mod-rank-box h3')"
                               ".innerText.includes('rank 2')", timeout=30_000)
        screenshot(page, "app_modules_rank2.png")

        # a click on the layer opens the timeline on it, rank 2 opened, the range highlighted
        page.locator(_SECTORS, has_text=LAYER).first.click()
        page.wait_for_url("**/timeline?*", timeout=30_000)
        query = parse_qs(urlparse(page.url).query)
        assert query["r"] == ["2"] and int(query["f0"][0]) < int(query["f1"][0])
        page.wait_for_function("() => (document.querySelector('#tl-stats') || {}).innerText"
                               "?.includes('highlighted: selected range')", timeout=60_000)
        checked = page.evaluate("() => [...document.querySelectorAll('#tl-open input:checked')]"
                                ".map(i => i.value)")
        assert checked == ["2"], checked
        screenshot(page, "app_modules_timeline.png", full_page=False)
        errors = [e for e in page.console_errors if "favicon" not in e and "net::ERR_ABORTED" not in e]
        assert errors == [], errors
