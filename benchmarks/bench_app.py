#!/usr/bin/env python3
"""Web-app benchmark: ``traceview app`` on a ~500 MB Kineto trace that is already in the Arrow cache.

    python benchmarks/bench_app.py                          # benchmarks/out/kineto_500mb.json (made if absent)
    python benchmarks/bench_app.py --trace FILE             # any trace
    python benchmarks/bench_app.py --runs 3 --repeat 5
    python benchmarks/bench_app.py --browser JOB_DIR --screenshots /tmp/tl   # timeline latencies in Chromium

With ``--browser PATH...`` it instead starts ``traceview app PATH...`` and drives the timeline in
headless Chromium (tests/browser/browser.py), timing each interaction from the user's action until the
server's new figure is drawn (two animation frames after plotly got it): opening the page, wheel
zoom (the page asks the server ``WHEEL_DEBOUNCE_MS`` after the last wheel event: included; also timed
from the last wheel event), drag pan, the buttons,
search, next/previous match, an event click (details and flow arrows), and a gap click in the Gaps
table (until the timeline focused on it is drawn). Target: 300 ms on the 8-rank job of gen_job.py,
1 s on benchmarks/out/kineto_150mb.json.

It starts ``traceview app`` as a fresh process (``--runs`` times) and talks to it over HTTP exactly as
the browser does (``GET /``, ``/_dash-layout``, ``/_dash-dependencies``, then the Overview page's
callback), and measures:

* **first page ready**: from starting the process to the Overview page's callback returning its
  figures ("drawn": the temporal breakdown at least; "complete": its findings too, polled for as
  the page does). Two cases: *cold* (trace parsed before, in the Arrow cache; no report cached: the
  analyses run at start-up) and *warm* (a restart, or a start after ``traceview analyze`` of the same
  trace: the report is in the report cache, traceview/report_cache.py). Targets (issue 12):
  complete within 2 s cold and 1 s warm "after the parse"; the Arrow cache is warm, so the figures
  are printed both from the process start and from the moment the server first answers (the
  imports of the web framework and the core, ~1-1.5 s here, are in the first, not the second).
  Cold and warm alternate run by run so that the machine's load hits both alike; the load average
  is printed before and after;
* **server time per interaction** (ms, median, target <= 300 ms): page switches, timeline zoom/pan/
  reset at every zoom level, a gap click and the timeline around it, each repeated ``--repeat`` times;
  a filter change (which re-runs the analyses on the selection) is reported apart;
  the first page is "drawn" when the Overview shows the temporal breakdown, "complete" when its
  findings are there too (the page polls for them while the other analyses finish);
* **timeline shapes per response** (target <= ~50k): bars + heatmap cells + gap bars + layout shapes
  in every timeline response, and the response size.

Times are wall-clock on this (shared, noisy) machine; medians are printed next to the targets.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_TRACE = HERE / "out" / "kineto_500mb.json"

TARGET_FIRST_PAGE_S = 2.0
OVERVIEW_POLL_MS = 200  # the page's poll interval (app/pages.py OVERVIEW_POLL_MS)
TARGET_COLD_COMPLETE_S = 2.0
TARGET_WARM_COMPLETE_S = 1.0
TARGET_INTERACTION_MS = 300.0
TARGET_SHAPES = 50_000
#: the page asks for a new window this long after the last wheel event (app/timeline_view.py)
WHEEL_DEBOUNCE_MS = 40

PAGE_OUT = "..page.children...status.children.."
TL_OUT = ("..tl-graph.figure...tl-window.data...tl-stats.children...tl-details.children...tl-open.value..."
          "tl-axis.figure...tl-legend.children..")
GAP_OUT = "..url.pathname...url.search...gap-click-msg.children.."
FILTERS = [("f-ranks", "value"), ("f-steps", "value"), ("f-t0", "value"), ("f-t1", "value")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(base: str, payload: dict, timeout: float = 120.0) -> tuple[float, dict, int]:
    data = json.dumps(payload).encode()
    req = urllib.request.Request(base + "/_dash-update-component", data=data,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read()
    dt = time.perf_counter() - t0
    return dt, (json.loads(body) if body else {}), len(body)


def get(base: str, path: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(base + path, timeout=timeout) as resp:
        return resp.read()


def filt(values: dict | None = None) -> list[dict]:
    values = values or {}
    return [{"id": i, "property": p, "value": values.get(i)} for i, p in FILTERS]


def page_payload(path: str, search: str = "", run: int = 0, filters: dict | None = None) -> dict:
    return {
        "output": PAGE_OUT,
        "outputs": [{"id": "page", "property": "children"}, {"id": "status", "property": "children"}],
        "inputs": [{"id": "url", "property": "pathname", "value": path},
                   {"id": "url", "property": "search", "value": search},
                   {"id": "run", "property": "value", "value": run}, *filt(filters)],
        "changedPropIds": ["url.pathname"], "state": [],
    }


def timeline_payload(trigger: str, state: dict, relayout: Any = None, click: Any = None, run: int = 0) -> dict:
    buttons = ["tl-zoom-in", "tl-zoom-out", "tl-left", "tl-right", "tl-reset"]
    return {
        "output": TL_OUT,
        "outputs": [{"id": "tl-graph", "property": "figure"}, {"id": "tl-window", "property": "data"},
                    {"id": "tl-stats", "property": "children"}, {"id": "tl-details", "property": "children"},
                    {"id": "tl-open", "property": "value"}, {"id": "tl-axis", "property": "figure"},
                    {"id": "tl-legend", "property": "children"}],
        "inputs": [{"id": "tl-zoom", "property": "data", "value": relayout},
                   {"id": "tl-graph", "property": "clickData", "value": click},
                   *[{"id": b, "property": "n_clicks", "value": 1} for b in buttons],
                   {"id": "tl-search-next", "property": "n_clicks", "value": 0},
                   {"id": "tl-search-prev", "property": "n_clicks", "value": 0},
                   {"id": "tl-search", "property": "n_submit", "value": 0},
                   {"id": "tl-open", "property": "value", "value": (state or {}).get("open")}],
        "changedPropIds": [trigger],
        "state": [{"id": "tl-search", "property": "value", "value": ""},
                  {"id": "tl-window", "property": "data", "value": state},
                  {"id": "run", "property": "value", "value": run}, *filt()],
    }


def poll_payload(n: int, run: int = 0) -> dict:
    return {
        "output": "..ov-findings.children...ov-poll.disabled..",
        "outputs": [{"id": "ov-findings", "property": "children"}, {"id": "ov-poll", "property": "disabled"}],
        "inputs": [{"id": "ov-poll", "property": "n_intervals", "value": n}],
        "changedPropIds": ["ov-poll.n_intervals"],
        "state": [{"id": "run", "property": "value", "value": run}, *filt()],
    }


def gap_payload(row_id: int, run: int = 0) -> dict:
    return {
        "output": GAP_OUT,
        "outputs": [{"id": "url", "property": "pathname"}, {"id": "url", "property": "search"},
                    {"id": "gap-click-msg", "property": "children"}],
        "inputs": [{"id": "gap-table", "property": "active_cell",
                    "value": {"row": 0, "column": 0, "column_id": "rank", "row_id": row_id}}],
        "changedPropIds": ["gap-table.active_cell"],
        "state": [{"id": "run", "property": "value", "value": run}, *filt()],
    }


def find_component(tree: Any, ident: str) -> dict | None:
    if isinstance(tree, dict):
        if tree.get("props", {}).get("id") == ident:
            return tree
        for v in tree.values():
            hit = find_component(v, ident)
            if hit is not None:
                return hit
    elif isinstance(tree, list):
        for v in tree:
            hit = find_component(v, ident)
            if hit is not None:
                return hit
    return None


def count_shapes(fig: dict) -> int:
    """Bars, heatmap cells, names and layout shapes of a timeline figure (the app's own count)."""
    from traceview.app.timeline import count_shapes as app_count

    return app_count(fig)


class App:
    """A ``traceview app`` process."""

    def __init__(self, trace: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.t_start = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "traceview.cli", "app", str(trace), "--port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=str(REPO))

    def wait_up(self, timeout: float = 120.0) -> float:
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("traceview app exited: " + self.proc.stderr.read().decode()[-2000:])
            try:
                get(self.base, "/")
                return time.perf_counter() - self.t_start
            except OSError:
                if time.perf_counter() - self.t_start > timeout:
                    raise
                time.sleep(0.02)

    def first_page(self) -> tuple[float, float, float]:
        """Seconds from start until the server answers, until the Overview page is drawn (with the
        temporal breakdown at least), and until it is complete (its findings there too)."""
        up = self.wait_up()
        get(self.base, "/_dash-layout")
        get(self.base, "/_dash-dependencies")
        _, resp, _ = post(self.base, page_payload("/overview"))
        text = json.dumps(resp)
        assert "Overview" in text[:2000] and "ov-breakdown" in text, "the overview did not render"
        first = time.perf_counter() - self.t_start
        self.status = str(resp.get("response", {}).get("status", {}).get("children", ""))
        n = 0
        if "Running the other analyses" in text:  # partial: poll like the page until the findings come
            while True:
                time.sleep(OVERVIEW_POLL_MS / 1000)  # as the page polls
                n += 1
                _, resp, _ = post(self.base, poll_payload(n))
                if "ov-findings" in (resp.get("response") or {}):
                    break
        return up, first, time.perf_counter() - self.t_start

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def ensure_trace(path: Path, env: dict[str, str]) -> None:
    if not path.exists():
        print(f"generating {path} (~500 MB) ...", flush=True)
        subprocess.run([sys.executable, str(HERE / "gen_kineto.py"), str(path), "--size-mb", "500"], check=True)
    # make sure it is in the Arrow cache (the benchmark measures the app, not the parser)
    subprocess.run([sys.executable, "-c", f"import traceview; traceview.load({str(path)!r})"], check=True, env=env)


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def start_ups(trace: Path, env: dict[str, str], runs: int) -> tuple[dict[str, Any], "App"]:
    """Cold and warm start-ups, alternating run by run: for each case the medians of server up, first
    page drawn and complete (from the process start). Returns them and the last warm app, left
    running (alone) for the interactions."""
    figures: dict[str, list[tuple[float, float, float]]] = {"cold": [], "warm": []}
    kept: App | None = None
    for i in range(runs):
        for temp in ("cold", "warm"):
            clear_result_cache(env)
            if temp == "warm":  # one start-up to fill the report cache
                filler = App(trace, env)
                filler.first_page()
                time.sleep(1.0)
                filler.stop()
            app = App(trace, env)
            try:
                figures[temp].append(app.first_page())
            finally:
                if i == runs - 1 and temp == "warm":
                    kept = app
                else:
                    app.stop()
            up, first, complete = figures[temp][-1]
            print(f"  {temp} start-up {i + 1}: up {up:.2f} s, drawn {first:.2f} s, complete {complete:.2f} s; "
                  f"{app.status.split(' · ')[-1]}", flush=True)
    out: dict[str, Any] = {}
    for temp, rows in figures.items():
        for j, name in enumerate(("server_up", "first_page", "complete_page")):
            out[f"{name}_{temp}_s"] = statistics.median(r[j] for r in rows)
        out[f"complete_after_up_{temp}_s"] = statistics.median(r[2] - r[0] for r in rows)
    assert kept is not None
    return out, kept


def print_start_ups(results: dict[str, Any]) -> None:
    print()
    print("start-up (medians, s)     server up   drawn  complete  complete - up   target")
    for temp, target in (("cold", TARGET_COLD_COMPLETE_S), ("warm", TARGET_WARM_COMPLETE_S)):
        r = {k: results[f"{k}_{temp}_s"] for k in ("server_up", "first_page", "complete_page", "complete_after_up")}
        verdict = ("ok" if r["complete_page"] <= target else "MISSED from start, "
                   + ("ok" if r["complete_after_up"] <= target else "MISSED") + " from server up")
        print(f"{temp:24s} {r['server_up']:9.2f} {r['first_page']:7.2f} {r['complete_page']:9.2f} "
              f"{r['complete_after_up']:14.2f}   <= {target:.0f}  {verdict}")


def clear_result_cache(env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-c", "from traceview.app.runs import clear_result_cache; clear_result_cache()"],
                   check=True, env=env)


def interactions(app: App, repeat: int) -> dict[str, Any]:
    base = app.base
    times: dict[str, list[float]] = {}
    shapes: list[int] = []
    sizes: list[int] = []

    def timed(name: str, payload: dict) -> dict:
        dt, resp, size = post(base, payload)
        times.setdefault(name, []).append(dt * 1000)
        if name.startswith("timeline"):
            fig = resp.get("response", {}).get("tl-graph", {}).get("figure")
            if fig is None:
                fig = (find_component(resp, "tl-graph") or {}).get("props", {}).get("figure")
            if fig:
                shapes.append(count_shapes(fig))
                sizes.append(size)
        return resp

    from traceview.app.pages import page_list

    pages = [p.path for p in page_list()]  # every page of the navigation, generic analysis pages too
    for _ in range(repeat):
        for p in pages:
            resp = timed("page " + p, page_payload(p))
            if p == "/timeline":
                fig = (find_component(resp, "tl-graph") or {}).get("props", {}).get("figure")
                shapes.append(count_shapes(fig))
            if p == "/gaps":
                table = find_component(resp, "gap-table")
                gap_rows = table["props"]["data"] if table else []
    # the timeline at every zoom level: whole run, then 10x narrower each time
    resp = timed("page /timeline", page_payload("/timeline"))
    state = find_component(resp, "tl-window")["props"]["data"]
    full0, full1 = state["t0"], state["t1"]
    for _ in range(repeat):
        width = full1 - full0
        center = full0 + width * 0.37
        while width >= 20_000:
            a, b = (center - width / 2) / 1e6, (center + width / 2) / 1e6
            r = timed("timeline zoom (drag)", timeline_payload("tl-zoom.data", state,
                                                               relayout={"xaxis.range[0]": a, "xaxis.range[1]": b}))
            state = r["response"]["tl-window"]["data"]
            width /= 10
        for trig in ("tl-zoom-out.n_clicks", "tl-left.n_clicks", "tl-right.n_clicks", "tl-zoom-in.n_clicks"):
            r = timed("timeline " + trig.split(".")[0].replace("tl-", ""), timeline_payload(trig, state))
            state = r["response"]["tl-window"]["data"]
        r = timed("timeline reset", timeline_payload("tl-reset.n_clicks", state))
        state = r["response"]["tl-window"]["data"]
    # gap clicks: the table row -> url, then the timeline page around the gap
    for row in gap_rows[:repeat * 2]:
        dt, resp, _ = post(base, gap_payload(int(row["id"])))
        times.setdefault("gap click (table row)", []).append(dt * 1000)
        search = resp["response"]["url"]["search"]
        timed("timeline around the gap (page)", page_payload("/timeline", search))
    # a filter change: the analyses run again on the selection. The Overview draws once the temporal
    # breakdown is done; the Gaps page waits for every analysis; after that the selection is cached.
    sel = {"f-steps": [20, 29]}
    t0 = time.perf_counter()
    dt_overview, _, _ = post(base, page_payload("/overview", filters=sel))
    dt_gaps, _, _ = post(base, page_payload("/gaps", filters=sel))
    all_done = time.perf_counter() - t0
    dt_cached, _, _ = post(base, page_payload("/launch", filters=sel))
    return {"times": times, "shapes": shapes, "sizes": sizes, "filter_overview_ms": dt_overview * 1000,
            "filter_all_ms": all_done * 1000, "filter_cached_ms": dt_cached * 1000}



# ------------------------------------------------------------------------------ in the browser
#: JavaScript: the timeline's plotly element
_TL = "document.querySelector('#tl-graph .js-plotly-plot')"
#: JavaScript: the revision of the drawn figure (``layout.meta.revision``: the server numbers the
#: figures it sends; a new layout object alone is no proof, Dash re-draws the old figure with a new
#: layout after a plotly zoom)
_REVISION_JS = (f"(() => {{ const el = {_TL}; "
                "return el && el.layout && el.layout.meta ? el.layout.meta.revision : null; })()")
#: JavaScript: remember the drawn figure's revision
_MARK_JS = f"() => {{ window.__tlRevision = {_REVISION_JS}; }}"
#: JavaScript: resolves (true) once the server's new figure is in and two frames were painted after
#: it; false after 30 s without one
_DRAWN_JS = f"""() => new Promise(resolve => {{
    const t0 = performance.now();
    const check = () => {{
        const el = {_TL};
        if (el && el._fullLayout && {_REVISION_JS} !== window.__tlRevision) {{
            requestAnimationFrame(() => requestAnimationFrame(() => resolve(true)));
        }} else if (performance.now() - t0 > 30000) {{ resolve(false); }} else {{ setTimeout(check, 2); }}
    }};
    check();
}})"""
#: JavaScript: whether the drawn figure shows the last window the page sent (``window.__tvSent``,
#: set by timeline_view.INTERACTIONS_JS) and no wheel event waits to be sent
_FINAL_JS = f"""() => {{
    const el = {_TL}, s = window.__tvSent, r = el.layout.xaxis.range;
    if (window.__tvWaiting) {{ return false; }}
    if (!s) {{ return true; }}
    const tol = 1e-6 * Math.abs(s[1] - s[0]) + 1e-6;
    return Math.abs(r[0] - s[0]) <= tol && Math.abs(r[1] - s[1]) <= tol;
}}"""
#: JavaScript: the page coordinates of a raster cell showing an event wider than a few pixels whose
#: name contains the argument and that is not the selected one (a click there selects it), and the
#: event's position
_EVENT_POINT_JS = f"""(needle) => {{
    const el = {_TL};
    const fl = el._fullLayout, xa = fl.xaxis, ya = fl.yaxis;
    const r = el.querySelector('.nsewdrag').getBoundingClientRect();
    for (const t of el.data) {{
        if (t.type !== 'heatmap' || !t.customdata || !t.text) continue;
        for (let k = 0; k < t.z.length; k++) {{
            const row = t.customdata[k];
            for (let i = 2; i < row.length - 2; i++) {{
                const cd = row[i];
                if (!Array.isArray(cd) || cd.length !== 1 || !row[i - 1] || !row[i + 1]) continue;
                if (row[i - 1][0] !== cd[0] || row[i + 1][0] !== cd[0]) continue;
                if (String(t.text[k][i]).toLowerCase().indexOf(needle) < 0) continue;
                if (t.z[k][i] === t.zmax - 0.5) continue;  // the selected event (the last colour)
                const px = xa.l2p(t.x0 + i * t.dx), py = ya.l2p((t.y[k] + t.y[k + 1]) / 2);
                if (px > 5 && px < xa._length - 5 && py > 2 && py < ya._length - 2) {{
                    return {{x: r.left + px, y: r.top + py, pos: cd[0], lane: t.name}};
                }}
            }}
        }}
    }}
    return null;
}}"""


def timed_in_browser(page: Any, action: Any, times: dict[str, list[float]], name: str, final: bool = False) -> float:
    """Milliseconds from the user's action until the server's new figure is drawn in the browser
    (two animation frames painted after plotly received it); appended to ``times[name]``. ``final``: a
    wheel burst may send several windows; wait for the figure of the last one the page sent."""
    page.evaluate(_MARK_JS)
    t0 = time.perf_counter()
    action()
    if not page.evaluate(_DRAWN_JS):
        raise RuntimeError(f"{name}: no new timeline figure within 30 s")
    while final:
        page.evaluate(_MARK_JS)  # first: a figure drawn after this check is waited for below
        if page.evaluate(_FINAL_JS):
            break
        if not page.evaluate(_DRAWN_JS):
            raise RuntimeError(f"{name}: no figure of the last window within 30 s")
    dt = (time.perf_counter() - t0) * 1000
    times.setdefault(name, []).append(dt)
    return dt


def open_timeline(page: Any, url: str) -> float:
    """Go to the timeline at ``url``; milliseconds until its figure is drawn."""
    t0 = time.perf_counter()
    page.goto(url, wait_until="load")
    # the page draws the chart's axes first, then the server's figure (which carries a revision)
    page.wait_for_function(f"() => {{ const el = {_TL}; return el && el._fullLayout && el.data && {_REVISION_JS}; }}",
                           timeout=120_000)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    return (time.perf_counter() - t0) * 1000


def attempt(page: Any, action: Any, times: dict[str, list[float]], name: str, final: bool = False) -> None:
    """:func:`timed_in_browser`, counting an action that got no new figure instead of stopping."""
    try:
        timed_in_browser(page, action, times, name, final)
    except RuntimeError:
        times.setdefault("NO ANSWER: " + name, []).append(float("nan"))
        page.wait_for_load_state("networkidle")


def browser_interactions(page: Any, base: str, repeat: int, query: str,
                         shots: str | None = None) -> dict[str, list[float]]:
    """Every kind of timeline interaction, ``repeat`` times, timed in the browser (ms); with
    ``shots``, ``{shots}_details.png`` is taken with the details panel of the first event clicked."""
    times: dict[str, list[float]] = {}
    for _ in range(repeat):
        times.setdefault("open the timeline page", []).append(open_timeline(page, base + "/timeline"))
        page.wait_for_load_state("networkidle")
        box = page.locator("#tl-graph .nsewdrag").first.bounding_box()
        cx, cy = box["x"] + box["width"] * 0.5, box["y"] + min(box["height"] * 0.3, 200)

        last_wheel: list[float] = []

        def wheel(cx: float = cx, cy: float = cy) -> None:
            page.mouse.move(cx, cy)
            for _ in range(6):  # a wheel turn is a burst of events; plotly zooms ~10% per event
                page.mouse.wheel(0, -100)
            last_wheel.append(time.perf_counter())

        # the page stretches the drawn image at once on the wheel, and asks for the new window
        # WHEEL_DEBOUNCE_MS after the last wheel event: included below. Timed twice: from the first
        # wheel event (Playwright takes ~30 ms per wheel event it sends, 150-200 ms for the burst of
        # 6 on this machine, on a blank page as well), and from the last (what the user waits for
        # once the wheel stops); both until the figure of the last window asked for is drawn.
        name = f"wheel zoom in (incl. the {WHEEL_DEBOUNCE_MS} ms debounce)"
        for _ in range(3):
            t0 = time.perf_counter()
            n = len(times.get(name, []))
            attempt(page, wheel, times, name, final=True)
            if len(times.get(name, [])) > n and last_wheel:
                times.setdefault("wheel zoom in, from the last wheel event", []).append(
                    times[name][-1] - (last_wheel[-1] - t0) * 1000)

        def drag(cx: float = cx, cy: float = cy) -> None:
            page.mouse.move(cx, cy)
            page.mouse.down()
            page.mouse.move(cx - 150, cy, steps=4)
            page.mouse.up()

        attempt(page, drag, times, "drag pan")
        attempt(page, lambda: page.click("#tl-zoom-out"), times, "button zoom out")
        attempt(page, lambda: page.click("#tl-left"), times, "button pan")
        attempt(page, lambda: page.click("#tl-reset"), times, "whole selection (reset)")
        page.fill("#tl-search", query)
        attempt(page, lambda: page.press("#tl-search", "Enter"), times, "search (Enter)")
        attempt(page, lambda: page.click("#tl-search-next"), times, "search: next match")
        attempt(page, lambda: page.click("#tl-search-prev"), times, "search: previous match")
        for needle in ("gemm", "cudalaunchkernel", "aten::"):
            pt = page.evaluate(_EVENT_POINT_JS, needle)
            if pt is None:
                continue
            attempt(page, lambda pt=pt: page.mouse.click(pt["x"], pt["y"]), times,
                             "click an event (details + flows)")
            page.wait_for_selector("#tl-details-body")
            if shots and not os.path.exists(f"{shots}_details.png"):
                page.screenshot(path=f"{shots}_details.png", full_page=True)
        page.fill("#tl-search", "")
        attempt(page, lambda: page.press("#tl-search", "Enter"), times, "search cleared")
    return times


def gap_click_focus(page: Any, base: str) -> float:
    """Milliseconds from a click on the largest gap in the Gaps table until the timeline is drawn
    around it."""
    page.goto(base + "/gaps", wait_until="load")
    page.wait_for_selector("#gap-table td[data-dash-column='cause']", timeout=120_000)
    page.wait_for_load_state("networkidle")
    t0 = time.perf_counter()
    page.locator("#gap-table td[data-dash-column='cause']").first.click()
    page.wait_for_url("**/timeline?**")
    page.wait_for_function(f"() => {{ const el = {_TL}; return el && el._fullLayout && el.data && {_REVISION_JS}; }}")
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    return (time.perf_counter() - t0) * 1000


def browser_bench(paths: list[str], repeat: int, query: str, shots: str | None) -> dict[str, Any]:
    """Start ``traceview app PATHS``, drive its timeline in headless Chromium, print the latencies."""
    sys.path.insert(0, str(REPO / "tests" / "browser"))
    from browser import open_page

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    import tempfile

    log = tempfile.NamedTemporaryFile("w+", prefix="traceview-app-", suffix=".log")  # the app's errors, if any
    proc = subprocess.Popen([sys.executable, "-m", "traceview.cli", "app", *paths, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=log, cwd=str(REPO))
    try:
        t0 = time.perf_counter()
        while True:
            try:
                get(base, "/")
                break
            except OSError:
                if time.perf_counter() - t0 > 300 or proc.poll() is not None:
                    raise RuntimeError("traceview app did not start")
                time.sleep(0.1)
        print(f"load average before: {loadavg()}", flush=True)
        with open_page(base + "/overview", width=1400, height=1000, timeout_ms=300_000) as page:
            page.wait_for_selector("#page h2", timeout=300_000)
            open_timeline(page, base + "/timeline")  # the first one builds the timeline index: not timed
            if shots:
                page.screenshot(path=f"{shots}_full.png", full_page=True)
            if shots and os.path.exists(f"{shots}_details.png"):
                os.unlink(f"{shots}_details.png")  # taken anew below, once an event is clicked
            times = browser_interactions(page, base, repeat, query, shots)
            times["gap click -> timeline focused on it"] = [gap_click_focus(page, base) for _ in range(repeat)]
            if shots:
                page.screenshot(path=f"{shots}_gap.png", full_page=False)
            errors = list(page.console_errors)
        print(f"load average after: {loadavg()}")
    except Exception:
        log.seek(0)
        print("the app's log (end):\n" + log.read()[-3000:])
        raise
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(f"{'timeline interaction, in the browser':46s} {'n':>3s} {'median ms':>10s} {'max ms':>9s}")
    for name, ts in times.items():
        print(f"{name:46s} {len(ts):3d} {statistics.median(ts):10.1f} {max(ts):9.1f}")
    if errors:
        print("console errors:", errors[:5])
    return {"times": times, "console_errors": errors}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--runs", type=int, default=3, help="start-ups measured per case (median)")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions of each interaction")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--browser", nargs="+", metavar="PATH",
                    help="instead: time the timeline's interactions in headless Chromium on `traceview app PATH...` "
                         "(e.g. a gen_job.py job folder, benchmarks/out/kineto_150mb.json)")
    ap.add_argument("--query", default="gemm", help="with --browser: the name searched")
    ap.add_argument("--screenshots", metavar="PREFIX", help="with --browser: save PREFIX_{full,details,gap}.png")
    args = ap.parse_args()
    if args.browser:
        out = browser_bench(args.browser, args.repeat, args.query, args.screenshots)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1))
        return
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", "")
    ensure_trace(args.trace, env)
    size_mb = args.trace.stat().st_size / 1e6
    print(f"trace: {args.trace} ({size_mb:,.0f} MB), Arrow cache warm; machine: {os.cpu_count()} cores", flush=True)

    results: dict[str, Any] = {"trace": str(args.trace), "size_mb": size_mb, "load_before": loadavg()}
    print(f"load average before: {results['load_before']}", flush=True)
    figures, app = start_ups(args.trace, env, args.runs)
    results.update(figures)
    results["load_after_start_ups"] = loadavg()
    print(f"load average after the start-ups: {results['load_after_start_ups']}", flush=True)
    try:
        time.sleep(1.0)  # let the background warm-up (timeline index) finish
        inter = interactions(app, args.repeat)
    finally:
        app.stop()

    print()
    print(f"{'interaction':38s} {'n':>3s} {'median ms':>10s} {'max ms':>9s}")
    all_times = []
    for name, ts in inter["times"].items():
        all_times.extend(ts)
        print(f"{name:38s} {len(ts):3d} {statistics.median(ts):10.1f} {max(ts):9.1f}")
    med = statistics.median(all_times)
    p90 = sorted(all_times)[int(0.9 * (len(all_times) - 1))]
    print(f"{'all interactions':38s} {len(all_times):3d} {med:10.1f}   p90 {p90:.1f}")
    print(f"filter change to steps 20-29 (the analyses run again): Overview drawn after "
          f"{inter['filter_overview_ms']:.0f} ms, every analysis done after {inter['filter_all_ms']:.0f} ms, "
          f"then another page of that selection in {inter['filter_cached_ms']:.0f} ms")
    max_shapes = max(inter["shapes"]) if inter["shapes"] else 0
    max_kb = max(inter["sizes"]) / 1024 if inter["sizes"] else 0
    print()
    print_start_ups(results)
    print()
    print("figure                                   value      target")
    v = results["first_page_cold_s"]
    print(f"{'first page drawn, cold start (s)':39s}{v:8.2f}   <= {TARGET_FIRST_PAGE_S:.0f}"
          f"  {'ok' if v <= TARGET_FIRST_PAGE_S else 'MISSED'}")
    print(f"server time per interaction, median (ms) {med:6.1f}   <= {TARGET_INTERACTION_MS:.0f}"
          f"  {'ok' if med <= TARGET_INTERACTION_MS else 'MISSED'}")
    print(f"timeline shapes per response, max      {max_shapes:8,d}   <= {TARGET_SHAPES:,}"
          f"  {'ok' if max_shapes <= TARGET_SHAPES else 'MISSED'} (largest response {max_kb:,.0f} KB)")
    results.update(interaction_median_ms=med, interaction_p90_ms=p90,
                   filter_change_overview_ms=inter["filter_overview_ms"], filter_change_all_ms=inter["filter_all_ms"],
                   timeline_max_shapes=max_shapes, timeline_max_kb=max_kb,
                   per_interaction={k: statistics.median(v) for k, v in inter["times"].items()})
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
