"""The critical path drawn over the timeline's lanes, read from the ``critical_path`` analysis's
``segments`` table (docs/metrics.md, "Critical path"): nothing here computes the path.

Each segment is drawn on the lane of what it is on: a host segment (``tid`` >= 0: CPU op,
untraced host time, launch call, synchronising call) on its thread lane ``(rank, tid)``, a GPU
segment (``stream`` >= 0: kernel, copy, GPU wait) on its stream lane ``(rank, device, stream)``.
A segment whose lane is not drawn (a collapsed rank, an empty lane, a lag on neither) is left out
and counted. The overlay is one outlined, lightly filled polygon per run of segments on a lane
(segments under two pixels wide merged with their neighbours: a whole-run view stays a few
hundred outlines), plus a dotted
connector where the path moves from one lane to another (a launch: thread -> stream; a sync:
stream -> thread). Both are plain SVG paths (one per trace) whose points are counted against the
timeline's shape budget, and they take no hover or click (those stay with the event rasters).

The index of a report's segments is built once (:func:`path_index`, cached per table) and each
window is then two binary searches per rank.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .timeline import CPU_LANE, GPU_LANE, PLOT_WIDTH_PX, Lane

#: the analysis and table the overlay reads
ANALYSIS, SEGMENTS = "critical_path", "segments"
#: the timeline's toggle (a checklist with one option)
TOGGLE_ID, TOGGLE_ON = "tl-cp", "on"
#: the overlay's colour (none of the series, gap causes or marks use it)
COLOR = "#D81B60"
FILL = "rgba(216,27,96,0.10)"
#: most points the overlay sends (5 per outline, 2 per connector): part of timeline.SHAPE_BUDGET
POINT_BUDGET = 8_000
#: share of the point budget the connectors may take
CONNECTOR_SHARE = 0.3
#: the columns the overlay needs (the contract's ``segments`` table has more)
NEEDED = ("rank", "start_ns", "end_ns", "tid", "device", "stream")
#: segment indexes kept (one per report of a selection the app caches)
INDEX_CACHE = 12

_HOST, _GPU = 0, 1


@dataclass
class PathIndex:
    """A report's segments sorted by (rank, start), with per rank the slice and the running
    maximum of the end (a window's segments are then two binary searches)."""

    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    on: np.ndarray  # _HOST or _GPU (segments on neither are left out at build)
    a: np.ndarray  # tid (host) or device (GPU)
    b: np.ndarray  # -1 (host) or stream (GPU)
    reach: np.ndarray  # running max of ``end`` within each rank
    bounds: dict[int, tuple[int, int]] = field(default_factory=dict)
    total: int = 0  # rows of the table
    off_lane: int = 0  # rows on neither a thread nor a stream
    problem: str = ""  # why the table cannot be drawn (missing columns)

    @classmethod
    def build(cls, frame: pd.DataFrame | None) -> "PathIndex":
        empty = np.zeros(0, dtype=np.int64)
        if frame is None or not len(frame):
            return cls(empty, empty, empty, empty, empty, empty, empty)
        missing = [c for c in NEEDED if c not in frame.columns]
        if missing:
            return cls(empty, empty, empty, empty, empty, empty, empty, total=len(frame),
                       problem=f"the critical path's segments table has no column {', '.join(missing)}")
        cols = {c: pd.to_numeric(frame[c], errors="coerce").fillna(-1).to_numpy(np.int64) for c in NEEDED}
        host = cols["tid"] >= 0
        gpu = ~host & (cols["stream"] >= 0)
        keep = (host | gpu) & (cols["end_ns"] > cols["start_ns"])
        order = np.flatnonzero(keep)
        order = order[np.lexsort((cols["start_ns"][order], cols["rank"][order]))]
        rank, start, end = cols["rank"][order], cols["start_ns"][order], cols["end_ns"][order]
        on = np.where(host[order], _HOST, _GPU).astype(np.int64)
        a = np.where(host[order], cols["tid"][order], cols["device"][order])
        b = np.where(host[order], -1, cols["stream"][order])
        reach = np.empty_like(end)
        bounds: dict[int, tuple[int, int]] = {}
        firsts = np.flatnonzero(np.concatenate([[True], rank[1:] != rank[:-1]])) if rank.size else empty
        for lo, hi in zip(firsts.tolist(), np.append(firsts[1:], rank.size).tolist()):
            bounds[int(rank[lo])] = (lo, hi)
            reach[lo:hi] = np.maximum.accumulate(end[lo:hi])
        return cls(rank, start, end, on, a, b, reach, bounds, total=len(frame),
                   off_lane=int((~(host | gpu)).sum()))

    def window(self, rank: int, t0: int, t1: int) -> np.ndarray:
        """Positions of the rank's segments overlapping ``[t0, t1)``, by start."""
        lo, hi = self.bounds.get(int(rank), (0, 0))
        if hi <= lo:
            return np.zeros(0, dtype=np.int64)
        i0 = lo + int(np.searchsorted(self.reach[lo:hi], t0, "right"))  # before: ended by t0
        i1 = lo + int(np.searchsorted(self.start[lo:hi], t1, "left"))
        cand = np.arange(i0, max(i0, i1), dtype=np.int64)
        return cand[self.end[cand] > t0]


_CACHE: "OrderedDict[int, tuple[pd.DataFrame, PathIndex]]" = OrderedDict()


def path_index(frame: pd.DataFrame | None) -> PathIndex:
    """The index of a segments table, built once per table (the report's tables do not change)."""
    if frame is None:
        return PathIndex.build(None)
    hit = _CACHE.get(id(frame))
    if hit is not None and hit[0] is frame:
        _CACHE.move_to_end(id(frame))
        return hit[1]
    index = PathIndex.build(frame)
    _CACHE[id(frame)] = (frame, index)  # the frame is kept with it: its id stays its own
    while len(_CACHE) > INDEX_CACHE:
        _CACHE.popitem(last=False)
    return index


@dataclass
class Drawn:
    """What the overlay put on the figure: its traces (outlines, connectors, a legend entry),
    the points counted against the shape budget, and a line for the stats."""

    traces: list[dict]
    points: int = 0
    text: str = ""


@dataclass(frozen=True)
class LaneRow:
    """A drawn lane as the overlay needs it: the lane and its centre and half-height (y units)."""

    lane: Lane
    y: float
    half: float


def _lane_ids(index: PathIndex, pos: np.ndarray, rows: Sequence[LaneRow]) -> np.ndarray:
    """For each segment at ``pos``, the index in ``rows`` of its lane (-1: its lane is not drawn)."""
    table: dict[tuple[int, int, int, int], int] = {}
    for i, r in enumerate(rows):
        ln = r.lane
        if ln.kind == CPU_LANE:
            table.setdefault((ln.rank, _HOST, ln.ident, -1), i)  # the first (busiest) thread of that tid
        elif ln.kind == GPU_LANE:
            table.setdefault((ln.rank, _GPU, ln.device, ln.ident), i)
    if not pos.size:
        return np.zeros(0, dtype=np.int64)
    keys = np.column_stack([index.rank[pos], index.on[pos], index.a[pos], index.b[pos]])
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    ids = np.array([table.get((int(k[0]), int(k[1]), int(k[2]), int(k[3])), -1) for k in uniq], dtype=np.int64)
    return ids[inverse.reshape(-1)]


def _outlines(start: np.ndarray, end: np.ndarray, lane: np.ndarray, tol_ns: float,
              budget: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Runs of segments to outline (lane, start, end): a segment joins the one before it on its lane
    when they are less than a pixel (``tol_ns``) apart and either is under two pixels wide (a
    whole-run view: a few outlines per lane; zoomed in: one per event, its boundaries shown). At
    most ``budget`` runs, the widest kept. Also how many runs there were."""
    order = np.lexsort((start, lane))
    s, e, ln = start[order], end[order], lane[order]
    narrow = (e - s) < 2 * tol_ns
    new = np.ones(s.size, dtype=bool)
    new[1:] = (ln[1:] != ln[:-1]) | (s[1:] - e[:-1] > tol_ns) | ~(narrow[1:] | narrow[:-1])
    first = np.flatnonzero(new)
    rs, re_, rl = s[first], np.maximum.reduceat(e, first), ln[first]
    runs = int(first.size)
    if runs > budget:
        keep = np.sort(np.argsort(-(re_ - rs), kind="stable")[:budget])
        rs, re_, rl = rs[keep], re_[keep], rl[keep]
    return rl, rs, re_, runs


def _connectors(index: PathIndex, pos: np.ndarray, lane: np.ndarray, tol_ns: float,
                budget: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where the path moves between two drawn lanes (consecutive segments of a rank on different
    lanes): (x ns, from lane, to lane), one per pixel column and lane pair, at most ``budget``."""
    if pos.size < 2:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    same_rank = index.rank[pos[1:]] == index.rank[pos[:-1]]
    # the path goes on where the previous segment ended (not across the time between two steps)
    touching = index.start[pos[1:]] - index.end[pos[:-1]] <= tol_ns
    moves = np.flatnonzero(same_rank & touching & (lane[1:] != lane[:-1]) & (lane[1:] >= 0) & (lane[:-1] >= 0))
    x = index.end[pos[moves]]
    src, dst = lane[moves], lane[moves + 1]
    col = np.floor(x / max(tol_ns, 1.0)).astype(np.int64)
    _, first = np.unique(np.column_stack([col, src, dst]), axis=0, return_index=True)
    first = np.sort(first)[:budget]
    return x[first], src[first], dst[first]


def draw(index: PathIndex, rows: Sequence[LaneRow], t0: int, t1: int, origin_ns: int,
         point_budget: int = POINT_BUDGET) -> Drawn:
    """The overlay of the window ``[t0, t1)`` (absolute ns) on the drawn lanes ``rows``."""
    if index.problem:
        return Drawn([], 0, f"critical path not drawn: {index.problem}")
    if not index.rank.size:
        return Drawn([], 0, "")
    ranks = sorted({r.lane.rank for r in rows})
    parts = [index.window(r, t0, t1) for r in ranks]
    pos = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if not pos.size:
        return Drawn([], 0, "critical path: none in this window")
    lane = _lane_ids(index, pos, rows)
    tol = (t1 - t0) / PLOT_WIDTH_PX  # a pixel of the window
    on = lane >= 0
    conn_budget = int(point_budget * CONNECTOR_SHARE) // 2
    cx, csrc, cdst = _connectors(index, pos, lane, tol, conn_budget)
    rect_budget = max(0, (point_budget - 2 * cx.size) // 5)
    rl, rs, re_, runs = _outlines(np.maximum(index.start[pos[on]], t0), np.minimum(index.end[pos[on]], t1),
                                  lane[on], tol, rect_budget)
    traces = _traces(rows, rl, rs, re_, cx, csrc, cdst, origin_ns)
    points = 5 * int(rs.size) + 2 * int(cx.size)
    text = (f"critical path: {pos.size:,} segment(s) in the window, {int(on.sum()):,} on the lanes drawn "
            f"as {rs.size:,} outline(s)")
    if rs.size < runs:
        text += f" (the {rs.size:,} widest of {runs:,})"
    if (~on).any():
        text += f", {int((~on).sum()):,} on lanes not drawn"
    return Drawn(traces, points, text)


def _ms(ns: np.ndarray, origin_ns: int) -> np.ndarray:
    return ((ns.astype(np.int64) - origin_ns) / 1e6).round(6)


def _traces(rows: Sequence[LaneRow], rl: np.ndarray, rs: np.ndarray, re_: np.ndarray, cx: np.ndarray,
            csrc: np.ndarray, cdst: np.ndarray, origin_ns: int) -> list[dict]:
    """The outlines (closed polygons separated by None), the connectors and the legend entry."""
    y = np.array([r.y for r in rows], dtype=np.float64)
    half = np.array([r.half for r in rows], dtype=np.float64) * 0.92
    xs: list[Any] = []
    ys: list[Any] = []
    if rs.size:
        a, b = _ms(rs, origin_ns), _ms(re_, origin_ns)
        top, bot = (y[rl] - half[rl]).round(4), (y[rl] + half[rl]).round(4)
        nan = np.full(a.size, np.nan)
        xs = np.column_stack([a, b, b, a, a, nan]).ravel().tolist()
        ys = np.column_stack([top, top, bot, bot, top, nan]).ravel().tolist()
    out: list[dict] = []
    if xs:
        out.append({"type": "scatter", "mode": "lines", "name": "critical path", "x": _none(xs), "y": _none(ys),
                    "line": {"color": COLOR, "width": 2.2}, "fill": "toself", "fillcolor": FILL,
                    "hoverinfo": "skip", "showlegend": False, "connectgaps": False, "cliponaxis": True})
    if cx.size:
        xm = _ms(cx, origin_ns)
        nan = np.full(cx.size, np.nan)
        cxs = np.column_stack([xm, xm, nan]).ravel().tolist()
        cys = np.column_stack([y[csrc].round(4), y[cdst].round(4), nan]).ravel().tolist()
        out.append({"type": "scatter", "mode": "lines", "name": "critical path (lane change)", "x": _none(cxs),
                    "y": _none(cys), "line": {"color": COLOR, "width": 1.3, "dash": "dot"}, "hoverinfo": "skip",
                    "showlegend": False, "connectgaps": False, "cliponaxis": True})
    if out:  # the legend entry (the page moves it to its HTML legend: timeline_view.pin_axis)
        out.append({"type": "scatter", "mode": "markers", "x": [None], "y": [None], "name": "critical path",
                    "showlegend": True, "hoverinfo": "skip",
                    "marker": {"color": COLOR, "symbol": "square", "size": 11}})
    return out


def _none(values: list[Any]) -> list[Any]:
    """NaN separators as None (JSON has no NaN; plotly breaks a line at a null)."""
    return [None if v != v else v for v in values]


# ------------------------------------------------------------------------------------ toggle


def available(frame: pd.DataFrame | None) -> bool:
    """Whether the report has a critical path to draw."""
    return frame is not None and len(frame) > 0


def toggle(on: bool, can_draw: bool) -> Any:
    """The "critical path" switch of the timeline (disabled, with why, when there is none)."""
    from dash import dcc, html

    hint = ("the longest chain of dependent host and GPU work in each step (critical_path analysis)"
            if can_draw else "no critical path in this selection's report (no GPU activity, or the analysis "
                             "did not run)")
    box = dcc.Checklist(id=TOGGLE_ID, options=[{"label": " critical path", "value": TOGGLE_ON,
                                                "disabled": not can_draw}],
                        value=[TOGGLE_ON] if on and can_draw else [], inline=True,
                        inputStyle={"marginLeft": "12px", "accentColor": COLOR},
                        style={"fontSize": "13px", "color": COLOR if can_draw else "#999"})
    return html.Span(box, title=hint, style={"display": "inline-block"})


def summary_text(report: Any) -> str:
    """The terminal's line on the critical path ("critical path: step 112 ms, bound by host thread
    41.0%; achievable ~71 ms": ``traceview.render.common.critical_path_text`` of the summary keys),
    empty without them."""
    from traceview.render.common import critical_path_text

    if report is None or not report.get("summary"):
        return ""
    text = critical_path_text(report)
    return f"critical path: {text}" if text else ""
