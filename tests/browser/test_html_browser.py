"""The HTML report in a real browser: headless Chromium opens it offline, with no console errors and
no network request, and every plotly chart renders with content. Screenshots go to
``test-artifacts/`` (look at them: a chart that renders but is empty or unreadable is a failure).

Chromium comes from the Debian package (``apt-get install -y chromium chromium-driver``); without it
these tests fail in CI (``CI=true``) and skip elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from traceview.figures import report_figures
from traceview.pipeline import analyze
from traceview.render import get_renderer

from browser import ARTIFACTS, open_page, require_chromium, screenshot

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces"

#: per chart: how many drawn data elements (bars, points, heatmap image) it has, and its legend size
_PLOT_STATS = """
() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(div => ({
  id: div.id,
  svgs: div.querySelectorAll('svg.main-svg').length,
  bars: div.querySelectorAll('g.trace.bars path').length,
  points: div.querySelectorAll('g.trace.scatter path.point').length,
  heatmap: div.querySelectorAll('g.hm image').length,
  legend: div.querySelectorAll('g.legend g.traces').length,
  colorbar: div.querySelectorAll('g.colorbar').length,
  title: (div.querySelector('g.g-gtitle text') || {}).textContent || '',
  xtitle: (div.querySelector('g.g-xtitle text') || {}).textContent || '',
  ytitle: (div.querySelector('g.g-ytitle text') || {}).textContent || '',
  width: div.getBoundingClientRect().width,
  height: div.getBoundingClientRect().height,
}))
"""


def _report_html(path: Path, out: Path, plotlyjs: str = "inline") -> tuple[Path, int]:
    report = analyze(path, use_cache=False)
    figures = report_figures(report, report.trace)
    out.write_text(get_renderer("html")(plotlyjs=plotlyjs).render(report), encoding="utf-8")
    return out, len(figures)


#: folded charts are drawn when their <details> opens: open them all
_OPEN_ALL = "() => document.querySelectorAll('details').forEach(d => { d.open = true; })"


def _check_page(html: Path, n_figures: int, shot: str) -> list[dict]:
    with open_page(html) as page:
        # the first screen: only the breakdown chart is drawn before anything is opened
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot svg.main-svg').length >= 1")
        assert page.evaluate("document.querySelectorAll('.js-plotly-plot').length") == 1
        page.evaluate(_OPEN_ALL)
        page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot svg.main-svg').length >= {n_figures}")
        page.wait_for_timeout(500)  # let plotly finish laying out text
        stats = page.evaluate(_PLOT_STATS)
        screenshot(page, shot)
        figs = page.locator(".figure")
        for i in range(figs.count()):
            figs.nth(i).screenshot(path=str(ARTIFACTS / f"{Path(shot).stem}-{stats[i]['id']}.png"))
        errors = list(page.console_errors)
        requests = [u for u in page.requests if not u.startswith(("file://", "data:", "blob:"))]
    assert errors == [], errors
    assert requests == [], f"the offline report made network requests: {requests}"
    assert len(stats) == n_figures
    for s in stats:
        assert s["svgs"] >= 1, s
        assert s["bars"] + s["points"] + s["heatmap"] > 0, f"chart {s['id']} drew nothing: {s}"
        assert s["legend"] >= 1 or s["colorbar"] >= 1, f"chart {s['id']} has no legend: {s}"
        assert s["title"] and s["xtitle"] and s["ytitle"], s
        assert s["width"] > 600 and s["height"] > 250, s
    return stats


def test_sample_report_renders_in_chromium(tmp_path):
    require_chromium()
    html, n = _report_html(REPO / "sample_traces" / "synthetic_4rank", tmp_path / "synthetic_4rank.html")
    assert n == 6
    stats = _check_page(html, n, "report_synthetic_4rank.png")
    by_id = {s["id"]: s for s in stats}
    assert by_id["fig-breakdown"]["bars"] >= 16  # 4 GPUs x 4 parts
    assert by_id["fig-skew_heatmap"]["heatmap"] == 1
    assert by_id["fig-launch_scatter"]["points"] > 100
    assert "Timeline" in by_id["fig-timeline"]["title"]


def test_real_multi_rank_report_renders_in_chromium(tmp_path):
    require_chromium()
    folder = SHARED / "kineto" / "param_dlrm_8ranks_v100"
    if not folder.exists():
        pytest.skip(f"real traces not available: {SHARED} is absent (it sits beside the repo in CI)")
    html, n = _report_html(folder, tmp_path / "dlrm_8ranks.html")
    stats = _check_page(html, n, "report_dlrm_8ranks.png")
    assert "fig-skew_heatmap" in {s["id"] for s in stats}


def test_cdn_report_offline_reads_and_says_why_charts_are_missing(tmp_path):
    """The default page (plotly.js from its CDN) opened with no network: every section is there and
    each chart's place says how to get charts offline, instead of an empty box."""
    require_chromium()
    html, n = _report_html(REPO / "sample_traces" / "synthetic_4rank", tmp_path / "cdn.html", plotlyjs="cdn")
    with open_page(html) as page:
        page.route("**/*", lambda route: route.abort() if route.request.url.startswith("http") else route.continue_())
        page.reload()
        page.evaluate(_OPEN_ALL)
        page.wait_for_timeout(300)
        notes = page.evaluate("Array.from(document.querySelectorAll('.plot.noplot')).map(d => d.textContent)")
        headings = page.evaluate("Array.from(document.querySelectorAll('h2')).map(h => h.textContent)")
        screenshot(page, "report_cdn_offline.png")
    assert len(notes) == n and all("--plotlyjs inline" in t for t in notes)
    assert headings[0] == "Summary" and "Findings, most costly first" in headings
