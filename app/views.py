"""The app's callbacks as plain methods of :class:`AppController` (tests call them directly; the Dash
app registers thin wrappers around them in :mod:`traceview.app.server`).

Everything that arrives from the browser is a run *id* (an index into the runs found on the command
line), rank numbers, step numbers, times, row ids and button clicks; never a path.
"""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any, Callable
from urllib.parse import parse_qs

import pandas as pd
from dash import dcc, html, no_update

from . import pages
from traceview.render.common import per_step_basis
from traceview.units import fmt_ns

from . import validate
from .components import CARD, frame_table, graph, load_bar, loading_page, message, section
from .features import DOWNLOADS, diff_reports, metric_label, perfetto_trace, render_report
from .filters import Filters
from .runs import RunContext, RunError, RunStore
from .validate import BadValue
from . import critical_path, critical_path_page, measured_timeline, modules_page, timeline_view
from .timeline import clamp_window
from .timeline import locate as timeline_locate
from .timeline_view import SEARCH_TRIGGERS as SEARCH
from traceview.secrets import scrub_text

log = logging.getLogger("traceview.app")

#: the smallest timeline window (ns)
MIN_WINDOW_NS = 1_000


def parse_search(search: str | None) -> dict[str, int]:
    """Integer query parameters (``?t0=..&t1=..&f0=..&f1=..&r=..``: window, highlighted range, rank
    to open); anything else is ignored."""
    out: dict[str, int] = {}
    if not search:
        return out
    for key, values in parse_qs(search.lstrip("?")).items():
        if key in ("t0", "t1", "f0", "f1", "r") and values:
            try:
                v = validate.integer(values[0], key, -validate.MAX_ABS_NS, validate.MAX_ABS_NS)
            except BadValue:
                continue  # a hand-edited URL: the window falls back to the whole run
            if v is not None:
                out[key] = v
    return out


class AppController:
    """State shared by the callbacks: the runs and their cached analysis contexts."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.timings: list[tuple[str, float]] = []
        #: the pages, in navigation order (from the analyses' specs, when the app is built)
        self.pages = pages.page_list()
        self._by_path = {p.path: p for p in self.pages}

    def page(self, pathname: Any) -> pages.Page:
        """The page at ``pathname`` (the Overview for any other path)."""
        default = self._by_path.get(pages.DEFAULT_PATH, self.pages[0])
        return self._by_path.get(pathname, default) if isinstance(pathname, str) else default

    def nav_classes(self, pathname: Any) -> list[str]:
        """The class of each navigation link: "active" for the page at ``pathname``."""
        current = self.page(pathname).path
        return ["active" if p.path == current else "" for p in self.pages]

    # ------------------------------------------------------------------ helpers
    def _context(self, run: Any, ranks: Any = None, steps: Any = None, t0: Any = None, t1: Any = None) -> RunContext:
        """The context of ``run`` under the header's filters; raises :class:`RunError` for an unknown
        run and :class:`BadValue` for an unusable control value (callers put either on the page)."""
        return self.store.context(run, validate.filters(ranks, steps, t0, t1))

    def _timed(self, name: str, start: float) -> None:
        self.timings.append((name, time.perf_counter() - start))
        del self.timings[:-200]

    # ------------------------------------------------------------------ filters
    def run_changed(self, run: Any) -> tuple:
        """New run (or "clear filters"): rank options, step slider, time inputs, run description."""
        try:
            spec = self.store.spec(run)
            info = self.store.steps(spec.id)
        except RunError as exc:
            empty: list[Any] = []
            return (empty, None, 0, 1, [0, 1], {}, True, None, None, message(str(exc), "error"))
        rank_options = [{"label": f"rank {r}", "value": r} for r in info.ranks]
        if info.steps:
            lo, hi = info.steps[0], info.steps[-1]
            n = len(info.steps)
            every = max(1, n // 8)
            shown = list(info.steps[::every])
            if shown[-1] != hi and len(shown) > 1 and info.steps.index(hi) - info.steps.index(shown[-1]) < every / 2:
                shown.pop()  # too close to the last step's mark: the labels would overlap
            marks = {int(s): str(s) for s in shown + [hi]}
            slider = (lo, hi if hi > lo else lo + 1, [lo, hi], marks, False)
        else:
            slider = (0, 1, [0, 1], {0: "no steps", 1: ""}, True)
        files = len(spec.files)
        desc = (f"{len(info.ranks)} rank(s), {len(info.steps)} step(s), {files} file(s), "
                f"{fmt_ns(info.span_ns)}")
        return (rank_options, None, *slider, None, None, desc)

    # ------------------------------------------------------------------ pages
    def render_page(self, pathname: str | None, search: str | None, run: Any, ranks: Any = None, steps: Any = None,
                    t0: Any = None, t1: Any = None) -> tuple[Any, Any]:
        """The page at ``pathname`` for the run under the filters, and the status line."""
        start = time.perf_counter()
        page = self.page(pathname)
        try:
            if self.store.shows_load_bar(run):  # a big run: a progress bar until its trace is in memory
                self.store.start_loading(run)
                return loading_page(self.store.progress(run)), "loading the run"
            if page.path == pages.DEFAULT_PATH:  # draws as soon as the temporal breakdown is there
                ctx = self.store.partial_context(run, validate.filters(ranks, steps, t0, t1))
            else:
                ctx = self._context(run, ranks, steps, t0, t1)
        except RunError as exc:
            return [message(f"This run cannot be shown: {exc}", "error")], ""
        except BadValue as exc:
            return [message(f"This selection cannot be shown: {exc}", "error")], ""
        if ctx.partial:
            how = "analyses running: temporal breakdown ready"
        elif ctx.from_disk:
            how = "read from the result cache"
        else:
            how = f"analyses ran in {ctx.seconds:.2f} s"
        status = f"{ctx.run.label} · {ctx.filters.describe()} · {ctx.trace.num_events:,} events · {how}"
        try:
            body = self._page_body(page, ctx, search)
        except Exception as exc:  # a bug: say so on the page, log the traceback
            log.error("page %s failed:\n%s", page.path, traceback.format_exc())
            body = [message(f"internal error while drawing this page: {type(exc).__name__}: {exc}", "error")]
        self._timed("page " + page.path, start)
        self.store.first_page_served.set()
        return [html.H2(page.label, style={"margin": "6px 0 10px 0"}), *body], status

    def _page_body(self, page: pages.Page, ctx: RunContext, search: str | None) -> list[Any]:
        if page.analysis is not None:
            return pages.analysis_page(ctx, page.analysis)
        if page.path == pages.TIMELINE_PAGE[0]:
            return self._timeline_page(ctx, parse_search(search))
        if page.path == pages.COMPARE_PAGE[0]:
            return self._compare_page(ctx)
        return pages.findings(ctx)

    def load_poll(self, _n_intervals: Any, pathname: str | None, search: str | None, run: Any, ranks: Any = None,
                  steps: Any = None, t0: Any = None, t1: Any = None) -> tuple:
        """While a run loads: its progress bar; once loaded, the page itself (with its status line)
        in place of the bar, and the polling stops."""
        try:
            if not self.store.loaded(run):
                return load_bar(self.store.progress(run)), False
        except RunError as exc:
            return [message(f"This run cannot be shown: {exc}", "error")], True
        body, status = self.render_page(pathname, search, run, ranks, steps, t0, t1)
        return [html.Div(status, className="tv-status"), *body], True

    def overview_poll(self, _n_intervals: Any, run: Any, ranks: Any = None, steps: Any = None, t0: Any = None,
                      t1: Any = None) -> tuple:
        """While the Overview shows a partial result: the findings once every analysis is done."""
        try:
            filters = validate.filters(ranks, steps, t0, t1)
            if not self.store.ready(run, filters):
                return no_update, no_update
            ctx = self.store.context(run, filters)
            return pages.overview_findings(ctx.report, ctx.origin_ns), True
        except (RunError, BadValue) as exc:
            return [message(str(exc), "error")], True

    # ------------------------------------------------------------------ timeline
    # (the page's interactions beyond the window: app/timeline_view.py)
    def extent(self, ctx: RunContext) -> tuple[int, int]:
        """Absolute time range the timeline may show for this selection."""
        tr = ctx.trace
        if tr.num_events == 0:
            return ctx.origin_ns, ctx.origin_ns + MIN_WINDOW_NS
        if tr is ctx.full:
            return ctx.steps.origin_ns, max(ctx.steps.end_ns, ctx.steps.origin_ns + MIN_WINDOW_NS)
        start = tr.column("start_ns")
        end = start + tr.column("dur_ns")
        return int(start.min()), max(int(end.max()), int(start.min()) + MIN_WINDOW_NS)

    def timeline_figure(self, ctx: RunContext, state: dict) -> tuple[dict, str]:
        index = self.store.timeline(ctx.run.id)
        gaps = ctx.table("idle_gaps", "gaps")
        return timeline_view.figure(ctx, index, state, gaps, state.get("label") or "", self._path(ctx, state),
                                    self._bound_series(ctx, index, state))

    def _bound_series(self, ctx: RunContext, index: Any, state: dict) -> Any:
        """Each position's series with kernels coloured by measured bound-by, when chosen (None: by class)."""
        if state.get("color") != measured_timeline.BOUND:
            return None
        return measured_timeline.bound_series(index, ctx.full, self.store.options,
                                              ctx.table(measured_timeline.ANALYSIS, "kernels"))

    @staticmethod
    def _path(ctx: RunContext, state: dict) -> critical_path.PathIndex | None:
        """The critical path the timeline draws: the report's segments, unless switched off (the
        switch is on by default: drawing it is two binary searches per rank and a few thousand points)."""
        segments = ctx.table(critical_path.ANALYSIS, critical_path.SEGMENTS)
        if not state.get("cp", True) or not critical_path.available(segments):
            return None
        return critical_path.path_index(segments)

    def _initial_window(self, ctx: RunContext, params: dict[str, int]) -> dict:
        lo, hi = self.extent(ctx)
        o = ctx.origin_ns
        state: dict[str, Any] = {}
        if "t0" in params and "t1" in params:
            a, b = clamp_window(o + params["t0"], o + params["t1"], lo, hi, MIN_WINDOW_NS)
        else:
            a, b = lo, hi
        state["t0"], state["t1"] = a - o, b - o
        ranks = timeline_view.ranks_of(self.store.timeline(ctx.run.id), ctx)
        state["open"] = timeline_view.default_open(ranks)
        if "f0" in params and "f1" in params:
            state["f0"], state["f1"] = params["f0"], params["f1"]
            state["label"] = self._gap_label(ctx, o + params["f0"], o + params["f1"])
            gap = self._gap_at(ctx, o + params["f0"], o + params["f1"])
            if gap is not None:  # a gap opens its own rank (the others collapsed): it is in view
                state["open"] = [gap[0]]
        if params.get("r") in ranks:  # a finding of one rank
            state["open"] = [params["r"]]
        return state

    def _gap_at(self, ctx: RunContext, start: int, end: int) -> tuple[int, int] | None:
        """(rank, device) of the gap of the selection spanning exactly ``[start, end)``."""
        gaps = ctx.table("idle_gaps", "gaps")
        if gaps is None or not len(gaps):
            return None
        hit = gaps[(gaps["start_ns"] == start) & (gaps["end_ns"] == end)]
        if not len(hit):
            return None
        return int(hit.iloc[0]["rank"]), int(hit.iloc[0]["device"])

    def _gap_label(self, ctx: RunContext, start: int, end: int) -> str:
        gaps = ctx.table("idle_gaps", "gaps")
        if gaps is not None and len(gaps):
            hit = gaps[(gaps["start_ns"] == start) & (gaps["end_ns"] == end)]
            if len(hit):
                g = hit.iloc[0]
                from .timeline import CAUSE_LABELS

                cause = CAUSE_LABELS.get(str(g["cause"]), str(g["cause"]))
                text = f"{cause} gap, {fmt_ns(int(g['dur_ns']))}, rank {int(g['rank'])} GPU {int(g['device'])}"
                if g.get("cpu_context"):
                    text += f" · CPU: {scrub_text(str(g['cpu_context']))[:60]}"
                return text
        return f"selected range, {fmt_ns(end - start)}"

    def _timeline_page(self, ctx: RunContext, params: dict[str, int]) -> list[Any]:
        state = self._initial_window(ctx, params)
        fig, text = self.timeline_figure(ctx, state)
        ranks = timeline_view.ranks_of(self.store.timeline(ctx.run.id), ctx)
        can_draw = critical_path.available(ctx.table(critical_path.ANALYSIS, critical_path.SEGMENTS))
        can_colour = measured_timeline.available(ctx.table(measured_timeline.ANALYSIS, "kernels"))
        return timeline_view.page_body(fig, text, state, ranks,
                                       path_toggle=critical_path.toggle(bool(state.get("cp", True)), can_draw),
                                       color_control=measured_timeline.control(
                                           str(state.get("color") or measured_timeline.CLASS), can_colour))

    def timeline_update(self, trigger: str | None, relayout: Any, click: Any, state: Any, run: Any,
                        ranks: Any = None, steps: Any = None, t0: Any = None, t1: Any = None) -> tuple:
        """Zoom, pan, reset or click on the timeline: the new figure, window state and stats line
        (:meth:`timeline_action` without search, details or open ranks)."""
        return self.timeline_action(trigger, relayout, click, state, run, ranks, steps, t0, t1)[:3]

    def timeline_action(self, trigger: str | None, relayout: Any, click: Any, state: Any, run: Any,
                        ranks: Any = None, steps: Any = None, t0: Any = None, t1: Any = None, *,
                        query: Any = None, open_value: Any = None, path_value: Any = None,
                        color_value: Any = None) -> tuple:
        """Any timeline event: the new figure, window state, stats line, details panel and open ranks.

        ``trigger``: the id (and property) that fired: ``tl-graph.relayoutData``,
        ``tl-graph.clickData``, ``tl-zoom-in``, ``tl-zoom-out``, ``tl-left``, ``tl-right``, ``tl-reset``,
        ``tl-search-next``, ``tl-search-prev``, ``tl-search.n_submit`` (``query``: the search box),
        ``tl-open.value`` (``open_value``: the ranks drawn lane by lane), ``tl-cp.value``
        (``path_value``: the critical-path switch), ``tl-color.value`` (``color_value``: what kernels
        are coloured by).
        """
        start = time.perf_counter()
        trig = trigger if isinstance(trigger, str) else ""
        try:
            ctx = self._context(run, ranks, steps, t0, t1)
            index = self.store.timeline(ctx.run.id)
            extra = timeline_view.extras(state, int(index.start.size))
            state = {**validate.window_state(state), **extra}
            if "t0" not in state or "t1" not in state:
                lo, hi = self.extent(ctx)
                state["t0"], state["t1"] = lo - ctx.origin_ns, hi - ctx.origin_ns
            if "open" not in state:
                state["open"] = timeline_view.default_open(timeline_view.ranks_of(index, ctx))
            if trig.startswith(critical_path.TOGGLE_ID + ".value"):
                state["cp"] = validate.switch(path_value, "critical path", critical_path.TOGGLE_ON)
            if trig.startswith(measured_timeline.CONTROL_ID + ".value"):
                state["color"] = timeline_view.color_choice(color_value, "colour kernels by")
            panel, event = self._timeline_choice(ctx, index, trig, click, state, query, open_value)
            window = event if event is not None else self._new_window(ctx, trig, relayout, click, state)
        except (RunError, BadValue) as exc:
            return no_update, no_update, str(exc), no_update, no_update
        if window is None:  # not a zoom (autosize, a legend click) nor a click on a gap or an event
            return no_update, no_update, no_update, no_update, no_update
        (a, b), new_focus = window
        o = ctx.origin_ns
        state["t0"], state["t1"] = a - o, b - o
        if new_focus is not None:
            state["f0"], state["f1"] = new_focus
            state["label"] = self._gap_label(ctx, o + new_focus[0], o + new_focus[1])
        fig, text = self.timeline_figure(ctx, state)
        if panel is None and state.get("sel") is not None and trig.startswith(("tl-graph.clickData",) + SEARCH):
            panel = timeline_view.details(ctx, index, int(state["sel"]))
        self._timed("timeline", start)
        return fig, state, text, (panel if panel is not None else no_update), state.get("open")

    def _timeline_choice(self, ctx: RunContext, index: Any, trig: str, click: Any, state: dict[str, Any],
                         query: Any, open_value: Any) -> tuple[Any, Any]:
        """Search, event clicks and open ranks (which keep the window unless a match or event must be
        brought into view): the details panel (or None) and the new window (or None: the window
        logic of :meth:`_new_window` decides)."""
        cur = (ctx.origin_ns + int(state.get("t0", 0)), ctx.origin_ns + int(state.get("t1", 0)))
        if trig.startswith("tl-open.value"):
            state["open"] = timeline_view.open_ranks(open_value if open_value is not None else [])
            return None, (cur, None)
        if trig.startswith((critical_path.TOGGLE_ID + ".value", measured_timeline.CONTROL_ID + ".value")):
            return None, (cur, None)  # switched by timeline_action: the same window
        if trig.startswith(SEARCH):
            state["q"] = timeline_view.query(query)
            found = timeline_view.matches(index, state["q"], ctx.filters.ranks)
            if not found.size:
                state.pop("sel", None)
                return html.Div(f"No event name contains “{state['q'][:80]}”." if state["q"] else "",
                                style={"color": "#777", "fontSize": "13px"}), (cur, None)
            forward = not trig.startswith("tl-search-prev")
            pos = timeline_view.step_match(index, found, state.get("sel"), cur, forward)
            return None, (self._bring_into_view(ctx, index, state, pos, cur), None)
        if trig.startswith("tl-graph.clickData"):
            clicked = _clicked_event(click, int(index.start.size))
            if clicked is None:
                hit = self._clicked_cell(ctx, index, click, state)
                if hit is not None and hit[0] == "gap":  # as a click on a gap bar: zoom to it
                    g0, g1 = hit[1]
                    pad = max(2 * (g1 - g0), 20_000)
                    lo, hi = self.extent(ctx)
                    o = ctx.origin_ns
                    return None, (clamp_window(o + g0 - pad, o + g1 + pad, lo, hi, MIN_WINDOW_NS), (g0, g1))
                clicked = hit[1] if hit is not None else None
            if clicked is not None:
                state["sel"] = clicked
                return None, (cur, None)
        return None, None

    def _clicked_cell(self, ctx: RunContext, index: Any, click: Any, state: dict[str, Any]) -> tuple[str, Any] | None:
        """What a click on a raster cell hit (plotly sends a heatmap click's x and y, not its
        customdata): the event or gap at that place of the figure drawn for ``state``."""
        points = click.get("points") if isinstance(click, dict) else None
        if not isinstance(points, list) or not points or not isinstance(points[0], dict):
            return None
        x, y = points[0].get("x"), points[0].get("y")
        if x is None or y is None:
            return None
        x_ms, _ = validate.zoom_range_ms(x, x)
        y_val = validate.number(y, "clicked lane", 1e6)
        o = ctx.origin_ns
        return timeline_locate(index, o + int(state["t0"]), o + int(state["t1"]), x_ms, float(y_val or 0.0),
                               ranks=ctx.filters.ranks, gaps=ctx.table("idle_gaps", "gaps"),
                               open_ranks=state.get("open"))

    def _bring_into_view(self, ctx: RunContext, index: Any, state: dict[str, Any], pos: int,
                         cur: tuple[int, int]) -> tuple[int, int]:
        """Select the event at ``pos``, open its rank, and centre the window on it (zoomed in to about
        40 times its length when the window is wider)."""
        state["sel"] = pos
        rank = index.lane_at(pos).rank
        if rank not in state["open"]:
            state["open"] = sorted(state["open"] + [rank])
        s, e = int(index.start[pos]), int(index.end[pos])
        # close enough that its lane is drawn event by event (a wider window keeps the user's zoom)
        width = max(min(cur[1] - cur[0], max(40 * (e - s), 100_000)), 3 * (e - s), MIN_WINDOW_NS)
        c = (s + e) // 2
        lo, hi = self.extent(ctx)
        return clamp_window(c - width // 2, c + width // 2, lo, hi, MIN_WINDOW_NS)

    def _new_window(self, ctx: RunContext, trig: str, relayout: Any, click: Any,
                    state: dict[str, Any]) -> tuple[tuple[int, int], tuple[int, int] | None] | None:
        """The absolute window after the event ``trig`` (clamped to the selection) and the gap to
        highlight, if one was clicked; None when the event changes nothing."""
        lo, hi = self.extent(ctx)
        o = ctx.origin_ns
        cur0, cur1 = state.get("t0"), state.get("t1")
        if cur0 is None or cur1 is None:
            cur0, cur1 = lo - o, hi - o
        a, b = o + cur0, o + cur1
        new_focus = None
        if trig.startswith("tl-graph.relayoutData"):
            window = _relayout_window(relayout, o, (lo, hi))
            if window is None:
                return None
            a, b = window
        elif trig.startswith("tl-graph.clickData"):
            gap = _clicked_gap(click)
            if gap is None:
                return None
            g0, g1 = o + gap[0], o + gap[1]
            pad = max(2 * (g1 - g0), 20_000)
            a, b = g0 - pad, g1 + pad
            new_focus = gap
        else:
            a, b = _button_window(trig, a, b, (lo, hi))
        return clamp_window(a, b, lo, hi, MIN_WINDOW_NS), new_focus

    # ------------------------------------------------------------------ table rows -> timeline
    def _row_to_timeline(self, active_cell: Any, run: Any, ranks: Any, steps: Any, t0: Any, t1: Any,
                         search: Callable[[RunContext, int], str]) -> tuple:
        """A clicked table row opened on the timeline: (pathname, search, message beside the table).
        ``search(ctx, row_id)`` gives the timeline's query for the row, or raises ``BadValue``. A
        cleared selection opens nothing; a click that cannot be opened says why beside the table."""
        if active_cell is None:  # the selection was cleared (or the table redrawn): nothing to open
            return no_update, no_update, None
        if not isinstance(active_cell, dict):
            return no_update, no_update, message(f"clicked cell: {validate.quote(active_cell)} is not a table cell",
                                                 "error")
        try:
            row_id = validate.row_id(active_cell.get("row_id"))
            ctx = self._context(run, ranks, steps, t0, t1)
            return "/timeline", search(ctx, row_id), None
        except (RunError, BadValue) as exc:
            return no_update, no_update, message(str(exc), "error")

    # ------------------------------------------------------------------ gaps
    def gap_clicked(self, active_cell: Any, run: Any, ranks: Any = None, steps: Any = None, t0: Any = None,
                    t1: Any = None) -> tuple:
        """A row of the largest-gaps table was clicked: open the timeline around that gap."""
        def search(ctx: RunContext, row_id: int) -> str:
            gaps = ctx.table("idle_gaps", "gaps")
            if gaps is None or row_id not in gaps.index:
                raise BadValue(f"row {row_id} is not a gap of this selection: the table may be stale; reload the page")
            g = gaps.loc[row_id]
            return gap_search(int(g["start_ns"]) - ctx.origin_ns, int(g["end_ns"]) - ctx.origin_ns)

        return self._row_to_timeline(active_cell, run, ranks, steps, t0, t1, search)

    # ------------------------------------------------------------------ critical path
    def step_clicked(self, active_cell: Any, run: Any, ranks: Any = None, steps: Any = None, t0: Any = None,
                     t1: Any = None) -> tuple:
        """A row of the Critical path page's steps table was clicked: open the timeline on that step
        (its rank opened, the step highlighted, the path drawn)."""
        return self._row_to_timeline(active_cell, run, ranks, steps, t0, t1, critical_path_page.step_search)

    # ------------------------------------------------------------------ modules
    def modules_view(self, rank: Any, color: Any, run: Any, ranks: Any = None, steps: Any = None, t0: Any = None,
                     t1: Any = None) -> tuple:
        """The Modules page's rank or colouring changed: that rank's icicle and tables, or a message
        (and the page as it was) for a value that is not one of the controls' options."""
        try:
            ctx = self._context(run, ranks, steps, t0, t1)
            chosen_rank, color_by = modules_page.choice(ctx, rank, color)
        except (RunError, BadValue) as exc:
            return no_update, message(str(exc), "error")
        return modules_page.rank_sections(ctx, chosen_rank, color_by), None

    def range_clicked(self, click: Any, run: Any, ranks: Any = None, steps: Any = None, t0: Any = None,
                      t1: Any = None) -> tuple:
        """A range of the Modules page's icicle was clicked: the timeline on that range (its rank
        opened, the range highlighted); a click that opens nothing says why beside the icicle."""
        if click is None:
            return no_update, no_update, None
        try:
            rank, range_id = modules_page.clicked_sector(click)
            ctx = self._context(run, ranks, steps, t0, t1)
            return "/timeline", modules_page.range_search(ctx, rank, range_id), None
        except (RunError, BadValue) as exc:
            return no_update, no_update, message(str(exc), "error")

    def range_row_clicked(self, active_cell: Any, run: Any, ranks: Any = None, steps: Any = None, t0: Any = None,
                          t1: Any = None) -> tuple:
        """A row of the Modules page's ranges table was clicked: the timeline on that range."""
        def search(ctx: RunContext, row_id: int) -> str:
            return modules_page.range_search(ctx, *modules_page.row_range(ctx, row_id))

        return self._row_to_timeline(active_cell, run, ranks, steps, t0, t1, search)

    # ------------------------------------------------------------------ kernels
    def kernel_selected(self, active_cell: Any, run: Any, ranks: Any = None, steps: Any = None, t0: Any = None,
                        t1: Any = None) -> list[Any]:
        """A row of the Kernels table was selected: that kernel's figures per rank and GPU."""
        if active_cell is None:
            return [message("Select a kernel in the table to see it per rank and GPU.")]
        if not isinstance(active_cell, dict):
            return [message(f"selected cell: {validate.quote(active_cell)} is not a table cell", "error")]
        try:
            row = validate.row_id(active_cell.get("row_id"))
            ctx = self._context(run, ranks, steps, t0, t1)
        except (RunError, BadValue) as exc:
            return [message(str(exc), "error")]
        return pages.kernel_detail(ctx, row)

    # ------------------------------------------------------------------ compare
    def _compare_page(self, ctx: RunContext) -> list[Any]:
        runs = self.store.runs
        options = [{"label": f"{r.id}: {r.label}", "value": r.id} for r in runs]
        other = runs[(ctx.run.id + 1) % len(runs)].id  # the next run (e.g. base/ -> new/)
        controls = html.Div([
            html.Div([html.Label("base"), dcc.Dropdown(id="cmp-base", options=options, value=ctx.run.id,
                                                       clearable=False)], style={"flex": "1"}),
            html.Div([html.Label("new"), dcc.Dropdown(id="cmp-new", options=options, value=other,
                                                      clearable=False)], style={"flex": "1"}),
        ], style={**CARD, "display": "flex", "gap": "16px"})
        body = self.compare(ctx.run.id, other, ctx.filters)
        note = [] if len(runs) > 1 else [message(
            "Only one run was given on the command line: it is compared with itself. Start the app with "
            "two runs (e.g. traceview app before/ after/) to compare them.", "warn")]
        return [controls, *note, html.Div(body, id="cmp-body")]

    def compare_update(self, base: Any, new: Any, _run: Any, ranks: Any = None, steps: Any = None, t0: Any = None,
                       t1: Any = None) -> list[Any]:
        try:
            filters = validate.filters(ranks, steps, t0, t1)
        except BadValue as exc:
            return [message(str(exc), "error")]
        return self.compare(base, new, filters)

    def compare(self, base: Any, new: Any, filters: Filters) -> list[Any]:
        """The Compare page's body: the diff of two runs' reports under the same filters."""
        start = time.perf_counter()
        try:
            a = self.store.context(base, filters)
            b = self.store.context(new, filters)
        except RunError as exc:
            return [message(str(exc), "error")]
        d = diff_reports(a.report, b.report, base_label=a.run.label, new_label=b.run.label)
        s = d["summary"]
        verdict = s["verdict"]
        color = {"regressed": "#C0392B", "improved": "#1E8449", "changed": "#B9770E"}.get(verdict, "#555")
        out: list[Any] = [html.Div([
            html.Span("verdict: ", style={"fontSize": "18px"}),
            html.Span(verdict, id="cmp-verdict", style={"fontSize": "18px", "fontWeight": "700", "color": color}),
            html.Div(f"base: {a.run.label} · new: {b.run.label} · filters: {filters.describe()}",
                     style={"color": "#555", "fontSize": "13px", "marginTop": "4px"}),
            html.Div(", ".join(f"{k.replace('_', ' ')} {v}" for k, v in s.items()
                               if isinstance(v, int) and not isinstance(v, bool) and v),
                     style={"fontSize": "13px", "marginTop": "4px"}),
        ], style=CARD)]
        out.extend(message(n, "warn") for n in d.get("notes", []))
        out.extend(_compare_sections(d, compare_basis(a.report, b.report)))
        self._timed("compare", start)
        return out

    # ------------------------------------------------------------------ downloads
    def download(self, fmt: str, run: Any, ranks: Any = None, steps: Any = None, t0: Any = None,
                 t1: Any = None) -> Any:
        """The report of the run under the filters, as a dcc.Download payload (``no_update`` for
        an unknown run or format)."""
        if not isinstance(fmt, str) or fmt not in DOWNLOADS:
            return no_update
        try:
            ctx = self._context(run, ranks, steps, t0, t1)
        except (RunError, BadValue):  # the page shows the same filters' message
            return no_update
        text, ext = render_report(fmt, ctx.report)
        return dcc.send_string(text, filename=f"traceview-report-run{ctx.run.id}.{ext}")

    def download_perfetto(self, run: Any, ranks: Any = None, steps: Any = None, t0: Any = None,
                          t1: Any = None) -> Any:
        """The run under the filters as Chrome trace JSON for the Perfetto UI (``traceview
        export-perfetto``), with the report's findings and gaps as annotation tracks."""
        try:
            ctx = self._context(run, ranks, steps, t0, t1)
        except (RunError, BadValue):  # the page shows the same filters' message
            return no_update
        return dcc.send_string(perfetto_trace(ctx.trace, ctx.report),
                               filename=f"traceview-perfetto-run{ctx.run.id}.json")


def gap_search(start_rel: int, end_rel: int) -> str:
    """Query string of a timeline window around a gap (ns since the run's first event)."""
    pad = max(2 * (end_rel - start_rel), 20_000)
    return f"?t0={start_rel - pad}&t1={end_rel + pad}&f0={start_rel}&f1={end_rel}"


def _relayout_window(relayout: Any, origin_ns: int, extent: tuple[int, int]) -> tuple[int, int] | None:
    """The absolute window of a plotly zoom (x range in ms since the origin) or autorange (the whole
    ``extent``); None for any other relayout event."""
    rel = relayout if isinstance(relayout, dict) else {}
    r0, r1 = rel.get("xaxis.range[0]"), rel.get("xaxis.range[1]")
    if r0 is None and isinstance(rel.get("xaxis.range"), (list, tuple)) and len(rel["xaxis.range"]) == 2:
        r0, r1 = rel["xaxis.range"]
    if r0 is not None and r1 is not None:
        a, b = validate.zoom_range_ms(r0, r1)  # raises BadValue: said on the page
        return origin_ns + int(round(a * 1e6)), origin_ns + int(round(b * 1e6))
    if rel.get("xaxis.autorange"):
        return extent
    return None


def _button_window(trigger: str, a: int, b: int, extent: tuple[int, int]) -> tuple[int, int]:
    """The window ``[a, b)`` after a zoom, pan or reset button (unchanged for anything else)."""
    width = max(b - a, MIN_WINDOW_NS)
    c = (a + b) // 2
    if trigger.startswith("tl-zoom-in"):
        return c - width // 4, c + width // 4
    if trigger.startswith("tl-zoom-out"):
        return c - width, c + width
    if trigger.startswith("tl-left"):
        return a - width // 2, b - width // 2
    if trigger.startswith("tl-right"):
        return a + width // 2, b + width // 2
    if trigger.startswith("tl-reset"):
        return extent
    return a, b


def _clicked_customdata(click: Any) -> Any:
    """The ``customdata`` of the first point of a plotly click (None for anything else)."""
    if not isinstance(click, dict):
        return None
    points = click.get("points")
    if not isinstance(points, list) or not points or not isinstance(points[0], dict):
        return None
    return points[0].get("customdata")


def _clicked_event(click: Any, num_positions: int) -> int | None:
    """The position of a clicked event (a point whose ``customdata`` is ``[position]``); None for a
    click on anything else. An unusable position raises :class:`BadValue`."""
    cd = _clicked_customdata(click)
    if not isinstance(cd, list) or len(cd) != 1:
        return None
    return timeline_view.position(cd[0], num_positions, "clicked event")


def _clicked_gap(click: Any) -> tuple[int, int] | None:
    """The gap range of a click on a gap bar; None for a click on anything else (a bar without
    ``customdata``). A gap bar with an unusable range raises :class:`BadValue`."""
    cd = _clicked_customdata(click)
    if cd is None:
        return None
    return validate.clicked_range_ns(cd)


def compare_basis(base: Any, new: Any) -> str:
    """What the diff's figures are of: ``mean per step`` when both reports have steps, ``whole
    trace`` when neither has (the diff then compares the whole traces, as its renderers say), and
    which is which when one has steps and the other not."""
    base_steps, new_steps = per_step_basis(base), per_step_basis(new)
    if base_steps and new_steps:
        return "mean per step"
    if not base_steps and not new_steps:
        return "whole trace"
    return "mean per step; the " + ("new" if base_steps else "base") + " run has no steps: its whole trace"


def _compare_sections(d: dict[str, Any], basis: str = "mean per step") -> list[Any]:
    """The diff's metrics (a chart and a table), kernels and findings, as page sections (``basis``:
    what the figures are of, :func:`compare_basis`)."""
    out: list[Any] = []
    metrics = pd.DataFrame(d["metrics"])
    per_step = basis == "mean per step"
    if len(metrics):
        out.append(section(f"Side by side: {basis}", graph(_compare_figure(metrics, basis))))
        m = metrics.copy()
        m["metric"] = [metric_label(x) for x in m["metric"]]
        # times in the unit each reads best in (ns .. s), other metrics with their unit: one column
        # mixes both, so the cells are text
        for c in ("base", "new", "delta", "threshold"):
            m[c + "_text"] = [_metric_text(v, unit) for v, unit in zip(m[c], m["unit"])]
        out.append(section(f"Metrics ({basis})", frame_table(
            m, "cmp-metrics", columns=["metric", "rank", "device", "base_text", "new_text", "delta_text", "delta_pct",
                                       "threshold_text", "status"],
            rename={"base_text": "base", "new_text": "new", "delta_text": "delta",
                    "threshold_text": "noise threshold"},
            page_size=20, filter_=True,
            style_data_conditional=[
                {"if": {"filter_query": '{status} = "worse"'}, "backgroundColor": "#FADBD8"},
                {"if": {"filter_query": '{status} = "better"'}, "backgroundColor": "#D5F5E3"}])))
    kern = pd.DataFrame(d["kernels"])
    if len(kern):
        abs_delta = pd.to_numeric(kern["delta"], errors="coerce").abs().fillna(0)
        kern = kern.assign(abs_delta=abs_delta).sort_values("abs_delta", ascending=False)
        out.append(section("Kernels: GPU time per step" if per_step else f"Kernels: GPU time ({basis})", frame_table(
            kern.rename(columns={"base": "base_ns", "new": "new_ns", "delta": "delta_ns"}), "cmp-kernels",
            columns=["rank", "device", "name", "match", "base_ns", "new_ns", "delta_ns", "delta_pct", "status"],
            page_size=15, filter_=True)))
    eff = pd.DataFrame((d.get("efficiency") or {}).get("op_types") or [])
    if len(eff):
        eff = eff.assign(**{f"{side}_efficiency_pct": 100.0 * pd.to_numeric(eff[f"{side}_efficiency"], errors="coerce")
                            for side in ("base", "new")})
        out.append(section("Efficiency per op type (whole trace; shown side by side, not judged)", frame_table(
            eff, "cmp-efficiency", page_size=15, filter_=True,
            columns=["rank", "device", "name", "dtype", "unit", "match", "base_gpu_ns", "new_gpu_ns",
                     "base_efficiency_pct", "new_efficiency_pct", "efficiency_delta_pp", "base_tflops", "new_tflops",
                     "tflops_delta_pct"],
            rename={"base_efficiency_pct": "base efficiency %", "new_efficiency_pct": "new efficiency %",
                    "efficiency_delta_pp": "delta (pp)", "base_tflops": "base TFLOP/s", "new_tflops": "new TFLOP/s",
                    "tflops_delta_pct": "TFLOP/s delta %"})))
    fnd = pd.DataFrame(d["findings"])
    if len(fnd):
        out.append(section("Findings", frame_table(
            fnd, "cmp-findings", columns=["status", "code", "rank", "title", "base_severity", "new_severity",
                                          "base_cost_ns", "new_cost_ns"], page_size=15)))
    return out


def _metric_text(value: Any, unit: Any) -> str | None:
    """A metric of the diff for people: a time in its own unit, anything else with its unit."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if unit == "ns":
        return fmt_ns(value)
    if unit == "pct":
        return f"{float(value):.1f}%"
    return f"{float(value):,.2f}" + (f" {unit}" if unit else "")


def _compare_figure(metrics: Any, basis: str = "mean per step") -> Any:
    """Base vs new (mean per step, or the whole trace: ``basis``) for the time metrics of the diff
    (grouped bars per rank)."""
    import plotly.graph_objects as go

    key = ("step_time_ns", "gpu_window_ns", "busy_ns", "idle_ns", "exposed_comm_ns")
    m = metrics[metrics["metric"].isin(key)]
    if not len(m):
        m = metrics[metrics["unit"] == "ns"]
    labels = [f"{metric_label(r.metric)} · rank {r.rank}"
              + ("" if r.device is None or r.device != r.device else f" GPU {int(r.device)}") for r in m.itertuples()]
    fig = go.Figure()
    fig.add_trace(go.Bar(name="base", x=labels, y=[None if v is None else v / 1e6 for v in m["base"]],
                         marker_color="#9DB4CF", hovertemplate="%{x}<br>base %{y:.3f} ms<extra></extra>"))
    fig.add_trace(go.Bar(name="new", x=labels, y=[None if v is None else v / 1e6 for v in m["new"]],
                         marker_color="#4C78A8", hovertemplate="%{x}<br>new %{y:.3f} ms<extra></extra>"))
    fig.update_layout(template="plotly_white", barmode="group", height=380, margin=dict(l=60, r=20, t=30, b=120),
                      yaxis_title=("mean per step" if basis == "mean per step" else "whole trace") + " (ms)",
                      legend=dict(orientation="h", y=1.02, yanchor="bottom"))
    return fig
