"""The timeline page's interactions: name search (highlight, next/previous match), the details panel
of a clicked event (its columns, times, links and op stack), flow arrows from launch calls to GPU
activity, collapsible ranks, and the window state the browser keeps between requests.

The controller (:mod:`traceview.app.views`) calls :func:`page_body` to draw the page and
:func:`action` for every timeline event; both read the run's :class:`~traceview.app.timeline.LaneIndex`
(built once per run). What the browser sends back is only numbers (positions of events in that
index, times, ranks) and the search text, each validated here before use.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from dash import dcc, html

from traceview.secrets import scrub_text
from traceview.units import fmt_ns

from . import critical_path, measured_timeline, validate
from .components import CARD
from .runs import RunContext
from .timeline import CELLS_KEY, CPU_LANE, SERIES, LaneIndex, Marks, expand_figure, render
from .validate import BadValue

#: at most this many ranks open at first (the others collapsed to one row each)
OPEN_RANKS_AT_FIRST = 4
#: longest search text
MAX_QUERY = 200
#: matches kept per search
MAX_MATCHES = 1_000_000
#: linked events listed in the details panel
MAX_LINKS = 20

SEARCH_TRIGGERS = ("tl-search-next", "tl-search-prev", "tl-search.n_submit")
#: height of the pinned time axis above the chart (px): its tick labels (the legend is HTML above it)
AXIS_PX = 34
#: top margin of the chart below the pinned axis (its own tick labels are hidden)
CHART_TOP_PX = 6
#: the browser waits this long after the last wheel event before it asks for the new window (ms)
WHEEL_DEBOUNCE_MS = 40

#: JavaScript (a Dash clientside callback, run on every new window state; installs itself once per
#: page): wheel zoom and drag pan of the timeline done in the browser. Plotly's own handlers redraw
#: the whole figure at the new range, then Dash draws it once more with the figure's new layout,
#: then the server's figure is drawn: three full redraws per zoom. Here the drawn image is only
#: moved and stretched (an SVG transform of the trace layers, the pinned axis relaid out: cheap)
#: until the server's figure for the new window arrives, so one redraw is left. The new window goes
#: to the server through the ``tl-zoom`` store, ``WHEEL_DEBOUNCE_MS`` after the last wheel event or
#: at once on mouse-up. A click (a move of less than plotly's 8 px) is left to plotly. It also hooks
#: ``Plotly.react`` to expand the run-length encoded rasters of the figures the server sends
#: (``timeline.compact_cells``) as plotly draws them: a clientside callback between the server's
#: answer and the chart would cost the answer one more Dash round (25-40 ms measured) and draw the
#: chart after the stats line.
INTERACTIONS_JS = """
function(_state) {
  const w = window;
  if (w.__tvTimeline) { return w.dash_clientside.no_update; }
  w.__tvTimeline = true;
  const DEBOUNCE_MS = %(debounce)d, MIN_DRAG_PX = 8, KEY = '%(key)s';
  let pending = null, sent = null, timer = null, seq = 0, drag = null, axisRange = null;
  const graph = () => document.querySelector('#tl-graph .js-plotly-plot');
  const axis = () => document.querySelector('#tl-axis .js-plotly-plot');
  const inPlot = (t) => t && t.closest && t.closest('#tl-graph .nsewdrag');
  function layers(gd) { return gd.querySelectorAll('.cartesianlayer .plot > g'); }
  function clear(gd) { for (const g of layers(gd)) { g.removeAttribute('transform'); } }
  function preview(gd, r, live) {
    // the drawn range stays in gd._fullLayout (the figure is never relaid out here)
    const xa = gd._fullLayout.xaxis, d = xa.range, width = xa._length, k = width / (r[1] - r[0]);
    const t = 'translate(' + ((d[0] - r[0]) * k) + ',0) scale(' + ((d[1] - d[0]) / (r[1] - r[0])) + ',1)';
    for (const g of layers(gd)) { g.setAttribute('transform', t); }
    // the pinned axis follows once per frame while dragging; during a wheel burst only when the new
    // window is sent (relaying it out costs tens of ms, and each wheel event would wait for it)
    if (live) { followAxis(r); }
  }
  function followAxis(r) {
    if (!axisRange) { requestAnimationFrame(moveAxis); }
    axisRange = r.slice();
  }
  function moveAxis() {
    const ax = axis(), r = axisRange;
    axisRange = null;
    if (r && ax && ax._fullLayout) { Plotly.relayout(ax, {'xaxis.range': r}); }
  }
  function hook(gd) {
    if (gd.__tvHooked) { return; }
    gd.__tvHooked = true;
    pending = sent = null;  // a new chart (the page was drawn again): nothing of the last one is kept
    // the server's figure is drawn: keep previewing only what was asked after it was sent
    gd.on('plotly_afterplot', () => {
      if (pending && pending !== sent) { preview(gd, pending, true); } else { pending = null; clear(gd); }
    });
  }
  function send() {
    timer = null; w.__tvWaiting = false;
    if (!pending) { return; }
    sent = pending; seq += 1;
    w.__tvSent = sent.slice();  // the last window asked for (a benchmark waits to see it drawn)
    followAxis(sent);
    w.dash_clientside.set_props('tl-zoom', {data: {'xaxis.range[0]': sent[0], 'xaxis.range[1]': sent[1], 'n': seq}});
  }
  function ready(e) {
    if (!inPlot(e.target)) { return null; }
    const gd = graph();
    if (!gd || !gd._fullLayout || gd._fullLayout.dragmode !== false) { return null; }  // box zoom: plotly's
    hook(gd);
    return gd;
  }
  document.addEventListener('wheel', (e) => {
    const gd = ready(e);
    if (!gd) { return; }
    e.preventDefault(); e.stopPropagation();  // plotly's wheel zoom would redraw everything
    let delta = -e.deltaY * (e.deltaMode === 1 ? 40 : 1);
    if (!isFinite(delta) || delta === 0) { return; }
    const zoom = Math.exp(-Math.min(Math.max(delta, -20), 20) / 200);  // plotly's step per event
    const box = e.target.getBoundingClientRect();
    const f = Math.min(Math.max((e.clientX - box.left) / box.width, 0), 1);
    const r = pending || gd._fullLayout.xaxis.range, c = r[0] + (r[1] - r[0]) * f;
    pending = [c + (r[0] - c) * zoom, c + (r[1] - c) * zoom];
    preview(gd, pending, false);
    clearTimeout(timer); timer = setTimeout(send, DEBOUNCE_MS); w.__tvWaiting = true;
  }, {capture: true, passive: false});
  document.addEventListener('mousedown', (e) => {
    const gd = e.button === 0 ? ready(e) : null;
    if (!gd) { return; }
    const r = pending || gd._fullLayout.xaxis.range;
    drag = {gd: gd, x: e.clientX, r: [r[0], r[1]], moved: false, perPx: (r[1] - r[0]) / gd._fullLayout.xaxis._length};
  }, true);
  document.addEventListener('mousemove', (e) => {
    if (!drag) { return; }
    const dx = e.clientX - drag.x;
    if (!drag.moved && Math.abs(dx) < MIN_DRAG_PX) { return; }
    drag.moved = true;
    pending = [drag.r[0] - dx * drag.perPx, drag.r[1] - dx * drag.perPx];
    preview(drag.gd, pending, true);
  }, true);
  document.addEventListener('mouseup', () => {
    const moved = drag && drag.moved;
    drag = null;
    if (moved) { clearTimeout(timer); send(); }
  }, true);
  // the rasters of the figures the server sends are run-length encoded (timeline.compact_cells: a
  // cell per column repeated its event's hover text and position, most of every response): they
  // become plotly's z, customdata and text again (as timeline.expand_cells) just before plotly
  // draws them, the repeated values shared
  function expandTrace(t) {
    const c = t[KEY];
    if (!c) { return t; }
    const z = [], cd = [], text = [];
    for (const row of c.runs) {
      const zr = [], cr = [], tr = [];
      for (let i = 0; i < row.length; i += 3) {
        const n = row[i], item = row[i + 1], code = row[i + 2];
        const zv = code < 0 ? null : code + 0.5;
        const cv = item < 0 ? null : c.cd[item], tv = item < 0 ? '' : c.text[item];
        for (let j = 0; j < n; j++) { zr.push(zv); cr.push(cv); tr.push(tv); }
      }
      z.push(zr); cd.push(cr); text.push(tr);
    }
    const out = Object.assign({}, t, {z: z, customdata: cd, text: text});
    delete out[KEY];
    return out;
  }
  const expand = (data) => (Array.isArray(data) && data.some((t) => t && t[KEY])) ? data.map(expandTrace) : data;
  function hookPlotly() {
    // dcc.Graph draws every new figure with Plotly.react(gd, {data, layout, ...}); plotly.js may
    // still be loading when this runs
    const P = w.Plotly;
    if (!P || !P.react) { setTimeout(hookPlotly, 10); return; }
    if (!P.react.__tvExpands) {
      const react = P.react;
      P.react = function(gd, fig, layout, config) {
        if (Array.isArray(fig)) { fig = expand(fig); }
        else if (fig && fig.data) { fig = Object.assign({}, fig, {data: expand(fig.data)}); }
        return react.call(this, gd, fig, layout, config);
      };
      P.react.__tvExpands = true;
    }
    const gd = graph();  // a figure drawn before the hook (a click before plotly.js loaded)
    if (gd && gd.data && expand(gd.data) !== gd.data) { P.react(gd, gd.data, gd.layout); }
  }
  hookPlotly();
  return w.dash_clientside.no_update;
}
""" % {"debounce": WHEEL_DEBOUNCE_MS, "key": CELLS_KEY}

#: JavaScript (a Dash clientside callback): only the relayout events that change the x range (box
#: zoom, double-click, the modebar's reset) reach the server, as the ``tl-zoom`` store. Any other
#: relayout (plotly's autosize after a redraw) would otherwise start the timeline callback again,
#: and Dash drops the answer of a request that a newer one of the same callback overtook: a "next
#: match" answered while such an event came in was never drawn.
RELAYOUT_FILTER_JS = """
function(rel) {
  const keep = ['xaxis.range[0]', 'xaxis.range[1]', 'xaxis.range', 'xaxis.autorange'];
  const out = {};
  for (const k of keep) { if (rel && rel[k] !== undefined) { out[k] = rel[k]; } }
  if (!Object.keys(out).length) { return window.dash_clientside.no_update; }
  out.n = Date.now();
  return out;
}
"""


# ------------------------------------------------------------------------------------------ state


def extras(value: Any, num_positions: int) -> dict[str, Any]:
    """The timeline state's keys beyond the window (``q`` search text, ``sel`` selected event
    position, ``open`` open ranks), validated; raises :class:`BadValue`."""
    out: dict[str, Any] = {}
    if not isinstance(value, dict):
        return out
    q = value.get("q")
    if q is not None:
        out["q"] = query(q)
    sel = value.get("sel")
    if sel is not None:
        out["sel"] = position(sel, num_positions, "timeline state sel")
    if value.get("open") is not None:
        out["open"] = open_ranks(value.get("open"))
    if value.get("cp") is not None:  # the critical path drawn (app/critical_path.py)
        out["cp"] = validate.switch(value.get("cp"), "timeline state cp", critical_path.TOGGLE_ON)
    if value.get("color") is not None:  # what kernels are coloured by (app/measured_timeline.py)
        out["color"] = color_choice(value.get("color"), "timeline state color")
    return out


def color_choice(value: Any, control: str) -> str:
    """What kernels are coloured by: one of ``measured_timeline.OPTIONS``."""
    if value not in measured_timeline.OPTIONS:
        raise BadValue(f"{control}: {validate.quote(value)} is not one of {', '.join(measured_timeline.OPTIONS)}")
    return str(value)


def query(value: Any) -> str:
    """A search text: a string of at most :data:`MAX_QUERY` characters (stripped)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadValue(f"search: {validate.quote(value)} is not text")
    if len(value) > MAX_QUERY:
        raise BadValue(f"search: {len(value)} characters; at most {MAX_QUERY}")
    return value.strip()


def position(value: Any, num_positions: int, control: str) -> int:
    """An event position in the run's timeline index."""
    if num_positions <= 0:
        raise BadValue(f"{control}: this run has no events to select")
    v = validate.integer(value, control, 0, num_positions - 1)
    if v is None:
        raise BadValue(f"{control}: empty")
    return v


def open_ranks(value: Any) -> list[int]:
    """The ranks drawn lane by lane (a list of rank numbers)."""
    if not isinstance(value, (list, tuple)) or len(value) > 100_000:
        raise BadValue(f"open ranks: {validate.quote(value)} is not a list of ranks")
    out = []
    for v in value:
        r = validate.integer(v, "open ranks", -(2**31), 2**31 - 1)
        if r is not None:
            out.append(r)
    return sorted(set(out))


def default_open(ranks: Sequence[int]) -> list[int]:
    """Every rank when there are few; else the first (the figure stays one screen high)."""
    ranks = sorted(ranks)
    return list(ranks) if len(ranks) <= OPEN_RANKS_AT_FIRST else ranks[:1]


def ranks_of(index: LaneIndex, ctx: RunContext) -> list[int]:
    chosen = ctx.filters.ranks
    return sorted({ln.rank for ln in index.lanes if chosen is None or ln.rank in chosen})


# ------------------------------------------------------------------------------------------ search


@dataclass
class _SearchCache:
    lock: threading.Lock
    entries: "OrderedDict[tuple, np.ndarray]"


_CACHE = _SearchCache(threading.Lock(), OrderedDict())


def matches(index: LaneIndex, text: str, ranks: Sequence[int] | None) -> np.ndarray:
    """Positions of the events whose name contains ``text`` (case-insensitive), by start time
    (cached: the browser asks again at every zoom while a search is active)."""
    if not text:
        return np.zeros(0, dtype=np.int64)
    key = (id(index), text.lower(), None if ranks is None else tuple(sorted(ranks)))
    with _CACHE.lock:
        hit = _CACHE.entries.get(key)
        if hit is not None:
            _CACHE.entries.move_to_end(key)
            return hit
    import pyarrow as pa
    import pyarrow.compute as pc

    names = pa.array(index.names, type=pa.string())
    codes = np.flatnonzero(pc.match_substring(names, text, ignore_case=True).to_numpy(zero_copy_only=False))
    hit = np.flatnonzero(np.isin(index.name_code, codes))
    if ranks is not None:
        hit = hit[np.isin(index_ranks(index)[hit], np.asarray(list(ranks)))]
    hit = hit[np.argsort(index.start[hit], kind="stable")][:MAX_MATCHES]
    with _CACHE.lock:
        _CACHE.entries[key] = hit
        while len(_CACHE.entries) > 8:
            _CACHE.entries.popitem(last=False)
    return hit


def index_ranks(index: LaneIndex) -> np.ndarray:
    """The rank of every position (built on first use)."""
    got = index.__dict__.get("_rank_of_pos")
    if got is None:
        got = np.zeros(index.start.size, dtype=np.int64)
        for ln in index.event_lanes:
            got[ln.lo:ln.hi] = ln.rank
        index.__dict__["_rank_of_pos"] = got
    return got


def step_match(index: LaneIndex, found: np.ndarray, selected: int | None, window: tuple[int, int],
               forward: bool) -> int:
    """The next (or previous) match after the selected event, or the first match starting in the
    window (the last before its end, backwards) when the selection is not a match; wraps around."""
    starts = index.start[found]
    where = np.flatnonzero(found == selected) if selected is not None else np.zeros(0, dtype=np.int64)
    if where.size:
        i = int(where[0]) + (1 if forward else -1)
    elif forward:
        i = int(np.searchsorted(starts, window[0], "left"))
    else:
        i = int(np.searchsorted(starts, window[1], "left")) - 1
    return int(found[i % found.size])


# ------------------------------------------------------------------------------------------ details


def _links(index: LaneIndex, trace: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """The run's links as numpy (src row, dst row, type code) and the type names (cached)."""
    got = index.__dict__.get("_links")
    if got is None:
        lk = trace.links
        if lk.num_rows:
            col = lk.column("type").combine_chunks()
            types = [str(x) for x in col.dictionary.to_pylist()]
            got = (lk.column("src_row").to_numpy(), lk.column("dst_row").to_numpy(),
                   col.indices.to_numpy(zero_copy_only=False).astype(np.int64), types)
        else:
            e = np.zeros(0, dtype=np.int64)
            got = (e, e, e, [])
        index.__dict__["_links"] = got
    return got


def linked(index: LaneIndex, trace: Any, row: int) -> list[tuple[str, str, int]]:
    """The links of trace row ``row``: (link type, "to" or "from", the other row)."""
    src, dst, code, types = _links(index, trace)
    out = [(types[c], "to", int(d)) for c, d in zip(code[src == row].tolist(), dst[src == row].tolist())]
    out += [(types[c], "from", int(s)) for c, s in zip(code[dst == row].tolist(), src[dst == row].tolist())]
    return out


def flows(index: LaneIndex, trace: Any, pos: int) -> list[tuple[int, int]]:
    """(launch call, GPU activity) position pairs to draw for the selected event: its own launch
    link, or, for a CPU op, the launches of the runtime calls it issued."""
    row = int(index.row[pos])
    pairs: list[tuple[int, int]] = []
    rows = [(t, d, r) for t, d, r in linked(index, trace, row)]
    calls = [row] + [r for t, d, r in rows if t == "cpu_op" and d == "to"]
    for call in calls:
        for t, d, other in (linked(index, trace, call) if call != row else rows):
            if t != "launch":
                continue
            a, b = (call, other) if d == "to" else (other, call)
            pa_, pb = index.position_of_row(a), index.position_of_row(b)
            if pa_ is not None and pb is not None:
                pairs.append((pa_, pb))
    return pairs[:100]


def op_stack(index: LaneIndex, pos: int) -> list[int]:
    """Positions of the CPU events enclosing the event at ``pos`` on its thread, outermost first."""
    lane = index.lane_at(pos)
    if lane.kind != CPU_LANE:
        return []
    s, e, d = index.start[pos], index.end[pos], int(index.depth[pos])
    lo = lane.lo
    hi = int(np.searchsorted(index.start[lane.lo:lane.hi], s, "right")) + lane.lo
    cand = np.arange(lo, hi, dtype=np.int64)
    cand = cand[(index.end[cand] >= e) & (index.depth[cand] < d) & (cand != pos)]
    return cand[np.argsort(index.depth[cand], kind="stable")].tolist()


def _when(ns: int, origin_ns: int) -> str:
    rel = f"{(ns - origin_ns) / 1e6:,.6f} ms since the run's first event"
    if ns > 10**17:  # epoch ns: also as a UTC date
        stamp = _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
        return f"{rel} · {ns:,} ns ({stamp})"
    return f"{rel} · {ns:,} ns (trace clock)"


def _value(v: Any) -> str:
    return scrub_text(str(v))[:2000]


def _event_line(trace: Any, row: int, origin_ns: int) -> str:
    name = _value(trace.events.column("name")[row].as_py())
    kind = trace.events.column("kind")[row].as_py()
    start = int(trace.events.column("start_ns")[row].as_py())
    dur = int(trace.events.column("dur_ns")[row].as_py())
    return f"{kind} {name} · at {(start - origin_ns) / 1e6:,.3f} ms · {fmt_ns(dur)} (row {row})"


def details(ctx: RunContext, index: LaneIndex, pos: int) -> html.Div:
    """The details panel of the event at ``pos``: every column the model keeps for it, its times
    (relative and absolute), its links (launch call or GPU activity, CPU op or runtime call) and its
    op stack. Strings from the trace are scrubbed (traceview.secrets)."""
    trace = ctx.full
    row = int(index.row[pos])
    record = trace.events.slice(row, 1).to_pylist()[0]
    start, dur = int(record["start_ns"]), int(record["dur_ns"])
    lane = index.lane_at(pos)
    head = [("name", _value(record["name"])), ("kind", str(record["kind"])),
            ("series", SERIES[int(index.series[pos])][1]), ("lane", lane.label),
            ("start", _when(start, ctx.origin_ns)), ("end", _when(start + dur, ctx.origin_ns)),
            ("duration", f"{fmt_ns(dur)} ({dur:,} ns)")]
    if record.get("grid_x") is not None:
        head.append(("grid", f"{record['grid_x']} x {record.get('grid_y')} x {record.get('grid_z')}"))
    if record.get("block_x") is not None:
        head.append(("block", f"{record['block_x']} x {record.get('block_y')} x {record.get('block_z')}"))
    shown = {"name", "kind", "start_ns", "dur_ns"} | {f"{a}_{x}" for a in ("grid", "block") for x in "xyz"}
    rest = [(k, _value(v)) for k, v in record.items() if k not in shown and v is not None]
    rows = [html.Tr([html.Th(k, style=_TH), html.Td(v, style=_TD)]) for k, v in head + rest]
    out: list[Any] = [html.H4(_value(record["name"])[:300], style={"margin": "0 0 6px 0", "wordBreak": "break-all"}),
                      html.Table(rows, style={"fontSize": "12px", "borderCollapse": "collapse"})]
    links = linked(index, trace, row)
    if links:
        items = [html.Li(f"{t} link {d}: {_event_line(trace, other, ctx.origin_ns)}")
                 for t, d, other in links[:MAX_LINKS]]
        more = [html.Li(f"... and {len(links) - MAX_LINKS} more")] if len(links) > MAX_LINKS else []
        out.append(html.Div([html.B("linked events"), html.Ul(items + more, style=_UL)], id="tl-links"))
    stack_of = pos
    if lane.kind != CPU_LANE:  # a GPU activity's op stack is the one of the call that launched it
        calls = [other for t, d, other in links if t == "launch" and d == "from"]
        launch_pos = index.position_of_row(calls[0]) if calls else None
        stack_of = launch_pos if launch_pos is not None else -1
    if stack_of >= 0:
        stack = op_stack(index, stack_of) + ([stack_of] if stack_of != pos else [])
        if stack:
            items = [html.Li(("  " * i) + _event_line(trace, int(index.row[p]), ctx.origin_ns))
                     for i, p in enumerate(stack)]
            out.append(html.Div([html.B("op stack (outermost first)"), html.Ul(items, style=_UL)], id="tl-stack"))
    return html.Div(out, id="tl-details-body", style={**CARD, "overflowX": "auto"})


_TH = {"textAlign": "left", "padding": "2px 10px 2px 0", "color": "#555", "verticalAlign": "top",
       "whiteSpace": "nowrap"}
_TD = {"padding": "2px 0", "wordBreak": "break-all", "fontFamily": "monospace"}
_UL = {"fontSize": "12px", "margin": "4px 0 8px 0", "fontFamily": "monospace"}


# ------------------------------------------------------------------------------------------ page


def figure(ctx: RunContext, index: LaneIndex, state: dict[str, Any], gaps: Any, focus_label: str,
           path: critical_path.PathIndex | None = None, series: np.ndarray | None = None) -> tuple[dict, str]:
    """The figure of the stored state (window, focus, search, selection, open ranks) and its stats;
    ``path``: the critical path drawn over the lanes (None: not drawn); ``series``: each position's
    series in place of the index's (the measured bound-by colouring; None: by class)."""
    o = ctx.origin_ns
    focus = None
    if state.get("f0") is not None and state.get("f1") is not None:
        focus = (o + int(state["f0"]), o + int(state["f1"]))
    found = matches(index, state.get("q") or "", ctx.filters.ranks)
    sel = state.get("sel")
    marks = Marks(matches=found if found.size else None, selected=sel,
                  flows=flows(index, ctx.full, sel) if sel is not None else (), series=series)
    fig, stats = render(index, o + int(state["t0"]), o + int(state["t1"]), ranks=ctx.filters.ranks, gaps=gaps,
                        focus=focus, focus_label=focus_label, open_ranks=state.get("open"), marks=marks,
                        path=path)
    text = stats.describe()
    if state.get("q"):
        where = ""
        if sel is not None and found.size:
            hit = np.flatnonzero(found == sel)
            where = f", match {int(hit[0]) + 1:,} selected" if hit.size else ""
        text += (f" · search “{state['q'][:40]}”: {found.size:,} match(es), {stats.matches_in_window:,} "
                 f"in the window{where}")
    if marks.flows:
        text += f" · {len(marks.flows)} flow arrow(s)"
    if series is not None:
        text += " · kernels coloured by measured bound-by (Nsight Compute; grey: not measured)"
    return pin_axis(fig), text


_REVISION = itertools.count(1)


def pin_axis(fig: dict) -> dict:
    """The chart as the page shows it: its legend and time-axis labels moved to the pinned axis
    figure (:func:`axis_figure`, drawn above it in a sticky box), its top margin shrunk to match;
    ``layout.meta.revision`` numbers the figures the server sent (a benchmark waits for a new one)."""
    layout = dict(fig["layout"])
    data = [tr for tr in fig["data"] if not _is_legend_entry(tr)]
    margin = dict(layout["margin"])
    layout["height"] = int(layout["height"]) - int(margin["t"]) + CHART_TOP_PX
    margin["t"] = CHART_TOP_PX
    layout["margin"] = margin
    layout["xaxis"] = {**layout["xaxis"], "showticklabels": False}
    layout["showlegend"] = False
    layout["dragmode"] = False  # wheel and drag are handled in the browser (INTERACTIONS_JS)
    layout["meta"] = {"revision": next(_REVISION),
                      "legend": [[tr["name"], tr["marker"]["color"]] for tr in fig["data"] if _is_legend_entry(tr)]}
    return {"data": data, "layout": layout}


def _is_legend_entry(trace: dict) -> bool:
    return bool(trace.get("showlegend")) and trace.get("type") == "scatter" and trace.get("x") == [None]


def axis_figure(fig: dict) -> dict:
    """The pinned time axis of a chart made by :func:`pin_axis`: its x range and margins, the time
    labels on top (no data: redrawing it costs the browser next to nothing)."""
    lay = fig["layout"]
    xaxis = {**lay["xaxis"], "showticklabels": True, "side": "top", "showgrid": False, "fixedrange": True}
    return {"data": [], "layout": {
        "height": AXIS_PX, "margin": {"l": lay["margin"]["l"], "r": lay["margin"]["r"], "t": AXIS_PX - 4, "b": 0},
        "paper_bgcolor": "white", "plot_bgcolor": "white", "font": lay.get("font", {}), "xaxis": xaxis,
        "yaxis": {"visible": False, "fixedrange": True, "range": [0, 1]}, "showlegend": False, "dragmode": False,
    }}


def legend(fig: dict) -> list[Any]:
    """The legend of a chart made by :func:`pin_axis`, as HTML (a colour square and a name per
    thing drawn): the browser lays it out without plotly measuring every entry at each redraw."""
    entries = (fig["layout"].get("meta") or {}).get("legend") or []
    square = {"display": "inline-block", "width": "11px", "height": "11px", "marginRight": "4px",
              "verticalAlign": "-1px"}
    return [html.Span([html.Span(style={**square, "background": color}), name], className="tl-legend-entry",
                      style={"marginRight": "14px", "whiteSpace": "nowrap"}) for name, color in entries]


def page_body(fig: dict, stats_text: str, state: dict, ranks: Sequence[int], panel: Any = None,
              path_toggle: Any = None, color_control: Any = None) -> list[Any]:
    """The timeline page: buttons, search, open ranks (and the critical-path switch, ``path_toggle``),
    the stats line, the figure and the details panel."""
    btn = {"marginRight": "6px"}
    controls = html.Div([
        html.Button("zoom in", id="tl-zoom-in", n_clicks=0, style=btn),
        html.Button("zoom out", id="tl-zoom-out", n_clicks=0, style=btn),
        html.Button("◀ pan", id="tl-left", n_clicks=0, style=btn),
        html.Button("pan ▶", id="tl-right", n_clicks=0, style=btn),
        html.Button("whole selection", id="tl-reset", n_clicks=0, style=btn),
        dcc.Input(id="tl-search", type="text", placeholder="search names (Enter: next)", debounce=False,
                  value=state.get("q") or "", maxLength=MAX_QUERY, n_submit=0,
                  style={"width": "240px", "marginLeft": "12px"}),
        html.Button("◀ prev", id="tl-search-prev", n_clicks=0, style={"marginLeft": "4px"}),
        html.Button("next ▶", id="tl-search-next", n_clicks=0, style=btn),
        html.Span("Wheel: zoom · drag: pan · click an event for details, a gap to zoom to it.",
                  style={"color": "#666", "fontSize": "13px", "marginLeft": "8px"}),
    ], style={"marginBottom": "6px"})
    open_list = dcc.Checklist(id="tl-open", options=[{"label": f" rank {r}", "value": r} for r in ranks],
                              value=list(state.get("open") or []), inline=True,
                              inputStyle={"marginLeft": "10px"}, style={"fontSize": "13px"})
    # the time axis (and legend) stays at the top of the window while the page scrolls over the chart
    pinned = html.Div([html.Div(legend(fig), id="tl-legend",
                                style={"fontSize": "12px", "color": "#333", "padding": "2px 0 0 250px"}),
                       dcc.Graph(id="tl-axis", figure=axis_figure(fig),
                                 config={"staticPlot": True, "displayModeBar": False})],
                      id="tl-axis-box", style={"position": "sticky", "top": "0px", "zIndex": 5,
                                               "background": "white", "borderBottom": "1px solid #ddd"})
    return [
        dcc.Store(id="tl-window", data=state),
        dcc.Store(id="tl-zoom"),  # a new x range from the browser (INTERACTIONS_JS, RELAYOUT_FILTER_JS)
        dcc.Store(id="tl-js"),  # the output of the clientside callback that installs INTERACTIONS_JS
        html.Div([controls, html.Div([html.Span("ranks shown lane by lane:", style={"color": "#555"}), open_list,
                                      path_toggle or critical_path.toggle(False, False),
                                      color_control or measured_timeline.control(measured_timeline.CLASS, False)],
                                     style={"display": "flex", "alignItems": "center", "fontSize": "13px"}),
                  html.Div(stats_text, id="tl-stats", style={"color": "#555", "fontSize": "13px"}),
                  pinned,
                  # the page's first figure goes expanded (plotly.js may not be loaded and hooked yet)
                  dcc.Graph(id="tl-graph", figure=expand_figure(fig),
                            config={"displaylogo": False, "scrollZoom": True, "doubleClick": "reset"})],
                 style=CARD),
        html.Div(panel or html.Div("Click an event for its details.", style={"color": "#777", "fontSize": "13px"}),
                 id="tl-details"),
    ]
