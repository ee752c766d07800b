"""The interactive timeline: lanes per GPU stream and CPU thread, idle gaps by cause, zoom and pan.

Large traces stay responsive because nothing here scans the whole trace per request:

* :meth:`LaneIndex.build` sorts every drawable event once per run by (lane, start), computes the
  nesting depth of CPU events (``traceview.intervals.nesting_depth``) and, per lane, the
  union of its intervals with a running total, so the busy time of any lane in any time range is
  two binary searches;
* :func:`render` then only binary-searches each lane for the window: lanes with few events in the
  window show their real events (bars), the others show per-bin busy fractions (one heatmap row
  per lane), and the number of bars + heatmap cells + gap bars sent to the browser never exceeds
  :data:`SHAPE_BUDGET`.

Figures are plain dicts (``{"data": [...], "layout": {...}}``) so building one costs no plotly
validation; colours and cause labels are those of :mod:`traceview.figures`.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from traceview.model import Kind, Trace

from traceview.units import fmt_ns

from .features import figures

# the shared palette and labels of the reports (same class, same colour everywhere)
COLORS = figures.COLORS
CAUSE_LABELS = figures.CAUSE_LABELS

#: most bars + heatmap cells + gap bars in one timeline response
SHAPE_BUDGET = 50_000
#: most real events drawn as bars in one response (the rest of the lanes are aggregated)
DETAIL_BUDGET = 8_000
#: most idle gaps drawn in one response (the largest in the window)
GAP_BUDGET = 2_000
#: most bins per aggregated lane
MAX_BINS = 1_200
#: CPU nesting levels drawn per thread lane (deeper events are drawn at the last level)
MAX_DEPTH = 6

# series: (key, legend name, colour)
SERIES: list[tuple[str, str, str]] = [
    ("compute", "compute kernel", COLORS.get("compute", "#4C78A8")),
    ("communication", "communication kernel", COLORS.get("communication", "#F58518")),
    ("memcpy", "memcpy", COLORS.get("memory", "#54A24B")),
    ("memset", "memset", COLORS.get("memset", "#88D27A")),
    ("cpu_op", "CPU op", COLORS.get("cpu_op", "#72B7B2")),
    ("python_function", "Python function", COLORS.get("python_function", "#9ECAE9")),
    ("annotation", "annotation", "#B8B8B8"),
    ("runtime", "CUDA/HIP API call", COLORS.get("runtime", "#FF9DA6")),
]
_SERIES_INDEX = {key: i for i, (key, _, _) in enumerate(SERIES)}
CAUSES = ("host_bound", "sync_bound", "launch_latency", "unattributed")

GPU_LANE, GAP_LANE, CPU_LANE = "gpu", "gaps", "cpu"


def esc(text: Any, limit: int = 90) -> str:
    s = "" if text is None else str(text)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return html.escape(s, quote=False)


@dataclass(eq=False)
class Lane:
    """One row of the timeline."""

    kind: str  # gpu, gaps, cpu
    rank: int
    device: int
    ident: int  # stream (gpu), tid (cpu), -1 (gaps)
    label: str
    lo: int = 0  # slice of the index's sorted arrays
    hi: int = 0
    long_thr: int = 0  # events longer than this are in ``long_idx``
    long_idx: np.ndarray | None = None  # absolute positions (into the index arrays) of long events
    ustart: np.ndarray | None = None  # union of the lane's intervals
    uend: np.ndarray | None = None
    ucum: np.ndarray | None = None  # busy time before each union interval
    levels: int = 1  # nesting levels drawn (CPU lanes)

    @property
    def height(self) -> float:
        """Height of the lane in y units: GPU streams 1, gap lanes 0.7, CPU threads grow with nesting."""
        if self.kind == GAP_LANE:
            return 0.7
        if self.kind == CPU_LANE:
            return min(1.0 + 0.3 * (self.levels - 1), 2.5)
        return 1.0

    @property
    def size(self) -> int:
        return self.hi - self.lo


@dataclass
class LaneIndex:
    """Every drawable event of a run sorted by (lane, start), plus per-lane summaries."""

    lanes: list[Lane]
    start: np.ndarray
    end: np.ndarray
    series: np.ndarray  # int8 index into SERIES
    depth: np.ndarray  # int16 nesting depth (CPU lanes), 0 on GPU lanes
    name_code: np.ndarray
    names: list[str]
    origin_ns: int
    end_ns: int

    # ------------------------------------------------------------------ build
    @classmethod
    def build(cls, trace: Trace) -> "LaneIndex":
        from traceview import intervals as iv

        n = trace.num_events
        empty = np.zeros(0, dtype=np.int64)
        if n == 0:
            return cls([], empty, empty, empty.astype(np.int8), empty.astype(np.int16), empty, [], 0, 0)
        start_all = trace.column("start_ns")
        end_all = start_all + np.maximum(trace.column("dur_ns"), 0)
        origin, last = int(start_all.min()), int(end_all.max())
        series = _event_series(trace)
        rows = np.flatnonzero(series >= 0)
        s_rows = series[rows]
        is_gpu = s_rows <= _SERIES_INDEX["memset"]
        rank = trace.column("rank")[rows].astype(np.int64)
        a = np.where(is_gpu, trace.column("device")[rows].astype(np.int64), trace.column("pid")[rows])
        b = np.where(is_gpu, trace.column("stream")[rows], trace.column("tid")[rows])
        group = np.where(is_gpu, 0, 2).astype(np.int64)
        keys, lane_of = _factorize_rows(rank, group, a, b)
        order = np.lexsort((start_all[rows], lane_of))
        rows, lane_of, s_rows = rows[order], lane_of[order], s_rows[order]
        start = start_all[rows]
        end = end_all[rows]
        depth = np.zeros(rows.size, dtype=np.int16)
        cpu = keys[lane_of, 1] == 2
        if cpu.any():
            depth[cpu] = np.minimum(iv.nesting_depth(lane_of[cpu], start[cpu], end[cpu]), 32000).astype(np.int16)
        name_col = trace.events.column("name")
        name_col = name_col.combine_chunks() if name_col.num_chunks != 1 else name_col.chunk(0)
        names = [str(x) if x is not None else "" for x in name_col.dictionary.to_pylist()]
        name_code = trace.column("name")[rows]

        bounds = np.searchsorted(lane_of, np.arange(len(keys) + 1))
        event_lanes = _event_lanes(keys, bounds, start, end, depth, _thread_names(trace))
        return cls(_display_order(event_lanes), start, end, s_rows, depth, name_code, names, origin, last)

    @property
    def span_ns(self) -> int:
        return max(0, self.end_ns - self.origin_ns)

    def lanes_for(self, ranks: Sequence[int] | None) -> list[Lane]:
        if ranks is None:
            return list(self.lanes)
        chosen = {int(r) for r in ranks}
        return [ln for ln in self.lanes if ln.rank in chosen]

    # ------------------------------------------------------------------ queries
    def visible(self, lane: Lane, t0: int, t1: int) -> np.ndarray:
        """Positions (into the index arrays) of the lane's events overlapping ``[t0, t1)``, by start."""
        if lane.size == 0:
            return np.zeros(0, dtype=np.int64)
        s = self.start[lane.lo:lane.hi]
        i0 = int(np.searchsorted(s, t0 - lane.long_thr, "left"))
        i1 = int(np.searchsorted(s, t1, "left"))
        cand = np.arange(lane.lo + i0, lane.lo + i1, dtype=np.int64)
        cand = cand[self.end[cand] > t0]
        if lane.long_idx is not None and lane.long_idx.size:
            li = lane.long_idx
            extra = li[(self.start[li] < t0 - lane.long_thr) & (self.end[li] > t0)]
            if extra.size:
                cand = np.union1d(cand, extra)
        return cand

    def count_upper(self, lane: Lane, t0: int, t1: int) -> int:
        """Cheap upper bound of the number of events of the lane overlapping ``[t0, t1)``."""
        if lane.size == 0:
            return 0
        s = self.start[lane.lo:lane.hi]
        n = int(np.searchsorted(s, t1, "left") - np.searchsorted(s, t0 - lane.long_thr, "left"))
        li = lane.long_idx
        if li is not None and li.size:
            n += int(((self.start[li] < t0 - lane.long_thr) & (self.end[li] > t0)).sum())
        return n

    def busy_fraction(self, lane: Lane, edges: np.ndarray) -> np.ndarray:
        """Fraction of each bin ``[edges[i], edges[i+1])`` covered by the lane's events."""
        if lane.ustart is None or lane.ustart.size == 0:
            return np.zeros(edges.size - 1)
        covered = _covered_before(lane, edges)
        width = np.diff(edges).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.diff(covered).astype(np.float64) / width
        return np.clip(np.nan_to_num(frac), 0.0, 1.0)

    def starts_per_bin(self, lane: Lane, edges: np.ndarray) -> np.ndarray:
        s = self.start[lane.lo:lane.hi]
        return np.diff(np.searchsorted(s, edges, "left"))


def _factorize_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of the int64 columns (sorted) and each row's index among them."""
    import pandas as pd

    frame = pd.DataFrame({str(i): c for i, c in enumerate(cols)})
    grouped = frame.groupby(list(frame.columns), sort=True)
    codes = grouped.ngroup().to_numpy().astype(np.int64)
    keys = np.asarray(list(grouped.groups.keys()), dtype=np.int64).reshape(-1, len(cols))
    return keys, codes


def _event_series(trace: Trace) -> np.ndarray:
    """Index into SERIES of each event (int8), -1 for events the timeline does not draw."""
    from traceview.analyses import classify

    kinds = trace.kind_codes()
    series = np.full(trace.num_events, -1, dtype=np.int8)
    cls_all = classify.activity_class(trace)
    series[(kinds == int(Kind.KERNEL)) & (cls_all == classify.COMMUNICATION)] = _SERIES_INDEX["communication"]
    series[(kinds == int(Kind.KERNEL)) & (cls_all != classify.COMMUNICATION)] = _SERIES_INDEX["compute"]
    series[kinds == int(Kind.MEMCPY)] = _SERIES_INDEX["memcpy"]
    series[kinds == int(Kind.MEMSET)] = _SERIES_INDEX["memset"]
    series[kinds == int(Kind.CPU_OP)] = _SERIES_INDEX["cpu_op"]
    series[kinds == int(Kind.PYTHON_FUNCTION)] = _SERIES_INDEX["python_function"]
    series[kinds == int(Kind.ANNOTATION)] = _SERIES_INDEX["annotation"]
    series[kinds == int(Kind.RUNTIME)] = _SERIES_INDEX["runtime"]
    return series


def _thread_names(trace: Trace) -> dict[tuple[int, str], str]:
    """(rank, "pid:tid") -> thread name, from every rank's metadata."""
    thread_names: dict[tuple[int, str], str] = {}
    for r, info in trace.ranks.items():
        for k, v in (info.thread_names or {}).items():
            thread_names[(int(r), str(k))] = str(v)
    return thread_names


def _event_lanes(keys: np.ndarray, bounds: np.ndarray, start: np.ndarray, end: np.ndarray, depth: np.ndarray,
                 thread_names: dict[tuple[int, str], str]) -> list[Lane]:
    """One lane per (rank, group, pid or device, tid or stream) key, over its slice ``bounds[i]:bounds[i + 1]``
    of the sorted event arrays, labelled and summarised."""
    event_lanes: list[Lane] = []
    for li, (r, g, x, y) in enumerate(keys.tolist()):
        lo, hi = int(bounds[li]), int(bounds[li + 1])
        if g == 0:
            lane = Lane(GPU_LANE, r, x, y, f"r{r} · GPU {x} · stream {y}")
        else:
            tname = thread_names.get((r, f"{x}:{y}"), "")
            tname = tname.replace(f"thread {y}", "").strip(" ()") if tname else ""
            label = f"r{r} · thread {y}" + (f" ({tname})" if tname else "")
            lane = Lane(CPU_LANE, r, -1, y, label)
        lane.lo, lane.hi = lo, hi
        if g == 2 and hi > lo:
            lane.levels = int(min(int(depth[lo:hi].max()) + 1, MAX_DEPTH))
        _summarise(lane, start[lo:hi], end[lo:hi])
        event_lanes.append(lane)
    return event_lanes


def _display_order(event_lanes: list[Lane]) -> list[Lane]:
    """Lanes top to bottom: per rank, for each GPU its idle-gap lane (added here) then its streams,
    then the CPU threads (busiest first)."""
    lanes: list[Lane] = []
    for r in sorted({ln.rank for ln in event_lanes}):
        gpus = sorted((ln for ln in event_lanes if ln.rank == r and ln.kind == GPU_LANE),
                      key=lambda ln: (ln.device, ln.ident))
        for dev in sorted({ln.device for ln in gpus}):
            lanes.append(Lane(GAP_LANE, r, dev, -1, f"r{r} · GPU {dev} · idle gaps"))
            lanes.extend(ln for ln in gpus if ln.device == dev)
        cpus = sorted((ln for ln in event_lanes if ln.rank == r and ln.kind == CPU_LANE),
                      key=lambda ln: (-ln.size, ln.ident))
        lanes.extend(cpus)
    return lanes


def _summarise(lane: Lane, start: np.ndarray, end: np.ndarray) -> None:
    """Long-event split and union with running totals (``start`` sorted)."""
    if start.size == 0:
        lane.long_idx = np.zeros(0, dtype=np.int64)
        return
    dur = end - start
    thr = int(np.quantile(dur, 0.995)) if dur.size > 200 else int(dur.max())
    lane.long_thr = max(thr, 1)
    lane.long_idx = (np.flatnonzero(dur > lane.long_thr) + lane.lo).astype(np.int64)
    reach = np.maximum.accumulate(np.maximum(end, start))
    new = np.empty(start.size, dtype=bool)
    new[0] = True
    np.greater(start[1:], reach[:-1], out=new[1:])
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, start.size - 1)
    us, ue = start[first], reach[last]
    keep = ue > us
    us, ue = us[keep], ue[keep]
    lane.ustart, lane.uend = us, ue
    lane.ucum = np.concatenate([[0], np.cumsum(ue - us)]).astype(np.int64)


def _covered_before(lane: Lane, t: np.ndarray) -> np.ndarray:
    """Busy time of the lane in ``(-inf, t)`` for each ``t``."""
    us, ue, cum = lane.ustart, lane.uend, lane.ucum
    assert us is not None and ue is not None and cum is not None, "the lane's union is built first"
    i = np.searchsorted(us, t, "right") - 1
    safe = np.maximum(i, 0)
    part = np.clip(t - us[safe], 0, ue[safe] - us[safe])
    return np.where(i >= 0, cum[safe] + part, 0)


# ------------------------------------------------------------------------------------ rendering


@dataclass
class RenderStats:
    window_ns: tuple[int, int]
    lanes: int
    detail_lanes: int
    aggregated_lanes: int
    bars: int
    cells: int
    gap_bars: int
    gaps_in_window: int
    bins: int
    layout_shapes: int = 0  # lane separators and the highlighted range
    focus_label: str = ""

    @property
    def shapes(self) -> int:
        """What the browser has to draw: bars, heatmap cells, gap bars and layout shapes."""
        return self.bars + self.cells + self.gap_bars + self.layout_shapes

    def describe(self) -> str:
        t0, t1 = self.window_ns
        parts = [f"window {fmt_ns(t1 - t0, 'ms')}"]
        if self.focus_label:
            parts.append(f"highlighted: {self.focus_label}")
        if self.bars:
            parts.append(f"{self.bars:,} events drawn on {self.detail_lanes} lane(s)")
        if self.aggregated_lanes:
            parts.append(f"{self.aggregated_lanes} busy lane(s) shown as busy fraction in {self.bins:,} bins "
                         "(zoom in to see events)")
        if self.gaps_in_window:
            shown = "" if self.gap_bars >= self.gaps_in_window else f" ({self.gap_bars:,} largest drawn)"
            parts.append(f"{self.gaps_in_window:,} idle gaps{shown}")
        parts.append(f"{self.shapes:,} shapes sent")
        return " · ".join(parts)


def clamp_window(t0: int, t1: int, lo: int, hi: int, min_width: int = 1_000) -> tuple[int, int]:
    """``[t0, t1)`` moved/shrunk to lie inside ``[lo, hi)``, at least ``min_width`` ns wide."""
    t0, t1 = int(t0), int(t1)
    if t1 < t0:
        t0, t1 = t1, t0
    width = max(t1 - t0, min_width)
    if hi - lo <= width:
        return lo, max(hi, lo + min_width)
    if t0 < lo:
        t0 = lo
    if t0 + width > hi:
        t0 = hi - width
    return t0, t0 + width


@dataclass(frozen=True)
class _Window:
    """The drawn time window ``[t0, t1)`` (absolute ns) and how times map onto the x axis."""

    t0: int
    t1: int
    origin_ns: int

    @property
    def width_ns(self) -> int:
        return self.t1 - self.t0

    @property
    def min_draw_ns(self) -> int:
        return max(1, self.width_ns // 1500)  # ~1 px at 1500 px: short events stay visible

    def ms(self, ns: Any) -> np.ndarray:
        """Absolute ns -> ms since the origin (subtracted in int64: exact)."""
        arr = np.asarray(ns)
        if arr.dtype.kind in "iu":
            return (arr.astype(np.int64) - self.origin_ns) / 1e6
        return (arr - float(self.origin_ns)) / 1e6

    def clipped(self, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bar bases (ms) and lengths (ms, at least one pixel) of intervals, clipped near the window
        (a bar far outside it would only make the browser's numbers large)."""
        ss, ee = np.maximum(start, self.t0 - self.width_ns), np.minimum(end, self.t1 + self.width_ns)
        return self.ms(ss), np.maximum(ee - ss, self.min_draw_ns) / 1e6


def _window_gaps(gaps: Any, win: _Window, ranks: Sequence[int] | None, budget: int) -> tuple[np.ndarray, int]:
    """Rows of the gaps in the window (the ``budget`` largest), and how many are in the window."""
    if gaps is None or not len(gaps):
        return np.zeros(0, dtype=np.int64), 0
    gs = gaps["start_ns"].to_numpy(np.int64)
    ge = gaps["end_ns"].to_numpy(np.int64)
    sel = (gs < win.t1) & (ge > win.t0)
    if ranks is not None:
        sel &= np.isin(gaps["rank"].to_numpy(), np.asarray(list(ranks)))
    idx = np.flatnonzero(sel)
    in_window = int(idx.size)
    if idx.size > budget:
        idx = idx[np.argsort(-(ge - gs)[idx], kind="stable")[:budget]]
    return idx, in_window


def _choose_lanes(index: LaneIndex, lanes: list[Lane], win: _Window,
                  budget: int) -> tuple[dict[int, np.ndarray], list[Lane]]:
    """Lanes drawn in detail (fewest events first, up to ``budget`` events: their visible rows by
    lane id) and lanes with events in the window that are aggregated instead."""
    event_lanes = [ln for ln in lanes if ln.kind != GAP_LANE]
    counts = {id(ln): index.count_upper(ln, win.t0, win.t1) for ln in event_lanes}
    detail: dict[int, np.ndarray] = {}
    used = 0
    for ln in sorted(event_lanes, key=lambda ln: counts[id(ln)]):
        if counts[id(ln)] == 0:
            continue
        # the upper bound may overestimate: the exact count decides when it is over the budget
        vis = index.visible(ln, win.t0, win.t1)
        if used + vis.size > budget:
            continue
        if vis.size:
            detail[id(ln)] = vis
            used += int(vis.size)
    aggregated = [ln for ln in event_lanes if id(ln) not in detail and counts[id(ln)] > 0
                  and (counts[id(ln)] > budget or index.visible(ln, win.t0, win.t1).size)]
    return detail, aggregated


def _lane_positions(lanes: list[Lane]) -> tuple[dict[int, float], dict[int, float], float]:
    """Centre and half-height of each lane (by lane id), top to bottom, and the total height (y
    grows downwards: the axis is reversed)."""
    ypos: dict[int, float] = {}
    yhalf: dict[int, float] = {}
    top = 0.0
    for ln in lanes:
        ypos[id(ln)] = top + ln.height / 2
        yhalf[id(ln)] = ln.height / 2
        top += ln.height
    return ypos, yhalf, top


def _heatmap_traces(index: LaneIndex, aggregated: list[Lane], bins: int, win: _Window, ypos: dict[int, float],
                    yhalf: dict[int, float]) -> list[dict]:
    """One heatmap row per aggregated lane: the busy fraction of each of ``bins`` bins."""
    data: list[dict] = []
    edges = np.linspace(win.t0, win.t1, bins + 1).round().astype(np.int64)
    rel = edges - win.origin_ns
    centers = (rel[:-1] + rel[1:]) / 2.0 / 1e6
    first_gpu = True
    for ln in aggregated:
        frac = index.busy_fraction(ln, edges)
        starts = index.starts_per_bin(ln, edges)
        gpu = ln.kind == GPU_LANE
        color = SERIES[0][2] if gpu else COLORS.get("cpu_op", "#72B7B2")
        y, half = ypos[id(ln)], 0.42 * 2 * yhalf[id(ln)]
        trace = {
            "type": "heatmap", "x": centers.round(6).tolist(), "y": [round(y - half, 4), round(y + half, 4)],
            "z": [frac.round(3).tolist()], "customdata": [starts.tolist()],
            "zmin": 0, "zmax": 1,
            "colorscale": [[0, "rgba(255,255,255,0)"], [0.001, "#eef3f9" if gpu else "#eef7f6"], [1, color]],
            "showscale": bool(gpu and first_gpu), "hoverongaps": False, "name": ln.label,
            "hovertemplate": esc(ln.label) + "<br>%{x:.3f} ms<br>busy %{z:.0%} · %{customdata:,} events start here"
                             "<extra>aggregated</extra>",
        }
        if gpu and first_gpu:
            trace["colorbar"] = {"title": {"text": "busy"}, "tickformat": ".0%", "len": 0.5, "y": 1,
                                 "yanchor": "top", "thickness": 12}
            first_gpu = False
        data.append(trace)
    return data


def _lane_bars(index: LaneIndex, ln: Lane, vis: np.ndarray, win: _Window, y0: float, half: float,
               per_series: dict[int, dict[str, list]]) -> None:
    """Add the visible events ``vis`` of one detailed lane to the bars of their series (CPU events
    on the sub-level of their nesting depth)."""
    s, e, ser = index.start[vis], index.end[vis], index.series[vis]
    if ln.kind == CPU_LANE:
        d = np.minimum(index.depth[vis].astype(np.int64), MAX_DEPTH - 1)
        span = 2 * half * 0.88
        h = span / max(ln.levels, 1)
        y = y0 - span / 2 + h * (d + 0.5)
        w = np.full(vis.size, h * 0.9)
    else:
        y = np.full(vis.size, float(y0))
        w = np.full(vis.size, 0.7 * 2 * half)
    uniq, inv = np.unique(index.name_code[vis], return_inverse=True)
    labels = [esc(index.names[c]) for c in uniq.tolist()]
    dur_us = (e - s) / 1e3
    for si in np.unique(ser).tolist():
        m = ser == si
        acc = per_series.setdefault(si, {"base": [], "x": [], "y": [], "width": [], "text": []})
        base, length = win.clipped(s[m], e[m])
        acc["base"].append(base)
        acc["x"].append(length)
        acc["y"].append(y[m])
        acc["width"].append(w[m])
        acc["text"].extend(f"{labels[k]}<br>{dv:,.2f} us" for k, dv in zip(inv[m].tolist(), dur_us[m].tolist()))


def _bar_traces(index: LaneIndex, lanes: list[Lane], detail: dict[int, np.ndarray], win: _Window,
                ypos: dict[int, float], yhalf: dict[int, float]) -> tuple[list[dict], int]:
    """The detailed lanes' events: one bar trace per series; and the number of bars."""
    per_series: dict[int, dict[str, list]] = {}
    for ln in lanes:
        vis = detail.get(id(ln))
        if vis is not None and vis.size:
            _lane_bars(index, ln, vis, win, ypos[id(ln)], yhalf[id(ln)], per_series)
    data, bars = [], 0
    for si in sorted(per_series):
        acc = per_series[si]
        key, name, color = SERIES[si]
        base = np.concatenate(acc["base"])
        bars += int(base.size)
        data.append({
            "type": "bar", "orientation": "h", "name": name, "legendgroup": key,
            "base": base.round(6).tolist(), "x": np.concatenate(acc["x"]).round(6).tolist(),
            "y": np.concatenate(acc["y"]).round(4).tolist(), "width": np.concatenate(acc["width"]).round(4).tolist(),
            "hovertext": acc["text"], "hovertemplate": "%{hovertext}<extra>" + name + "</extra>",
            "marker": {"color": color, "line": {"width": 0}},
        })
    return data, bars


def _gap_traces(gaps: Any, idx: np.ndarray, lanes: list[Lane], win: _Window, ypos: dict[int, float]) -> list[dict]:
    """The gaps ``idx`` of the gap table on their gap lanes: one bar trace per cause, labelled when
    wide enough; each bar carries its range (ns since the origin) for a click to zoom to."""
    data: list[dict] = []
    g = gaps.iloc[idx]
    g_dev = g["device"].to_numpy() if "device" in g else np.zeros(idx.size, dtype=np.int64)
    gap_lane_y = {(ln.rank, ln.device): ypos[id(ln)] for ln in lanes if ln.kind == GAP_LANE}
    g_y = np.array([gap_lane_y.get((int(r), int(d)), -1.0) for r, d in zip(g["rank"].to_numpy().tolist(),
                                                                          g_dev.tolist())], dtype=np.float64)
    gs = g["start_ns"].to_numpy(np.int64)
    ge = g["end_ns"].to_numpy(np.int64)
    causes = g["cause"].astype(str).to_numpy()
    cpu = g["cpu_context"].to_numpy() if "cpu_context" in g else np.full(idx.size, None)
    for cause in list(CAUSES) + sorted(set(causes.tolist()) - set(CAUSES)):
        m = (causes == cause) & (g_y >= 0)
        if not m.any():
            continue
        label = CAUSE_LABELS.get(cause, cause)
        base, length = win.clipped(gs[m], ge[m])
        text = [f"{label} gap · {(b - a) / 1e3:,.1f} us" + (f"<br>CPU: {esc(c)}" if c else "")
                for a, b, c in zip(gs[m].tolist(), ge[m].tolist(), cpu[m].tolist())]
        n = int(m.sum())
        data.append({
            "type": "bar", "orientation": "h", "name": f"gap: {label}", "legendgroup": "gap-" + cause,
            "base": base.round(6).tolist(), "x": length.round(6).tolist(),
            "y": g_y[m].astype(float).tolist(), "width": [0.85 * 0.7] * n,
            "text": [label] * n, "textposition": "inside", "insidetextanchor": "middle",
            "textfont": {"color": "white", "size": 11}, "hovertext": text,
            "customdata": np.stack([gs[m] - win.origin_ns, ge[m] - win.origin_ns], axis=1).tolist(),
            "hovertemplate": "%{hovertext}<br>click to zoom<extra></extra>",
            "marker": {"color": COLORS.get(cause, COLORS.get("other", "#C7C7C7")), "line": {"width": 0}},
        })
    return data


def _layout(lanes: list[Lane], win: _Window, ypos: dict[int, float], y_total: float,
            focus: tuple[int, int] | None, title: str) -> dict:
    """Axes (lane labels on y), lane separators (darker between ranks) and the highlighted range."""
    shapes, annotations = [], []
    edge = 0.0
    for ln, nxt in zip(lanes[:-1], lanes[1:]):
        edge += ln.height
        shapes.append({"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": edge, "y1": edge,
                       "line": {"color": "#999" if ln.rank != nxt.rank else "#e3e3e3", "width": 1},
                       "layer": "below"})
    if focus is not None:
        fa, fb = win.ms(focus[0]).item(), win.ms(focus[1]).item()
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": fa, "x1": fb, "y0": 0, "y1": 1,
                       "fillcolor": "rgba(228,87,86,0.12)", "line": {"color": "#E45756", "width": 1, "dash": "dot"},
                       "layer": "below"})
    if not lanes:
        annotations.append({"text": "Nothing to draw for the selected ranks.", "xref": "paper", "yref": "paper",
                            "x": 0.5, "y": 0.5, "showarrow": False})
    layout = {
        "barmode": "overlay", "hovermode": "closest", "dragmode": "zoom",
        "height": int(max(380, 150 + 30 * y_total)),
        "margin": {"l": 250, "r": 30, "t": 70 if title else 40, "b": 50},
        "paper_bgcolor": "white", "plot_bgcolor": "white",
        "font": {"family": "Helvetica, Arial, sans-serif", "size": 12},
        "xaxis": {"range": [win.ms(win.t0).item(), win.ms(win.t1).item()],
                  "title": {"text": "time since the run's first event (ms)"},
                  "showgrid": True, "gridcolor": "#eee", "zeroline": False, "showline": True, "linecolor": "#999"},
        "yaxis": {"tickmode": "array", "tickvals": [round(ypos[id(ln)], 4) for ln in lanes],
                  "ticktext": [esc(ln.label, 48) for ln in lanes],
                  "range": [y_total, 0] if lanes else [1, 0], "fixedrange": True, "showgrid": False,
                  "zeroline": False},
        "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0, "xanchor": "left"},
        "uniformtext": {"minsize": 9, "mode": "hide"},
        "shapes": shapes, "annotations": annotations,
    }
    if title:
        layout["title"] = {"text": esc(title, 160), "x": 0.01, "xanchor": "left"}
    return layout


def render(index: LaneIndex, t0: int, t1: int, *, ranks: Sequence[int] | None = None, gaps: Any = None,
           focus: tuple[int, int] | None = None, focus_label: str = "", detail_budget: int = DETAIL_BUDGET,
           shape_budget: int = SHAPE_BUDGET, gap_budget: int = GAP_BUDGET, title: str = "") -> tuple[dict, RenderStats]:
    """The timeline of ``[t0, t1)`` (absolute ns) as a plotly figure dict, and what it holds.

    ``gaps``: the idle-gap table (``rank, device, start_ns, end_ns, dur_ns, cause, cpu_context,
    step``); ``focus``: an absolute range to highlight (a clicked gap). Lanes with few events in the
    window are drawn in detail (up to ``detail_budget`` events), the others as busy fractions in as
    many bins as the rest of ``shape_budget`` allows.
    """
    win = _Window(int(t0), max(int(t1), int(t0) + 1), index.origin_ns)
    lanes = index.lanes_for(ranks)
    gap_idx, gaps_in_window = _window_gaps(gaps, win, ranks, gap_budget)
    detail, aggregated = _choose_lanes(index, lanes, win, detail_budget)
    used = sum(int(v.size) for v in detail.values())
    room = max(0, shape_budget - used - int(gap_idx.size) - len(lanes) - 1)
    bins = int(min(MAX_BINS, room // max(1, len(aggregated)))) if aggregated else 0
    if aggregated and bins < 10:  # cannot happen with the default budgets; stay under budget regardless
        aggregated, bins = [], 0
    ypos, yhalf, y_total = _lane_positions(lanes)
    data = _heatmap_traces(index, aggregated, bins, win, ypos, yhalf) if aggregated else []
    bar_data, bars = _bar_traces(index, lanes, detail, win, ypos, yhalf)
    data.extend(bar_data)
    if gap_idx.size:
        data.extend(_gap_traces(gaps, gap_idx, lanes, win, ypos))
    layout = _layout(lanes, win, ypos, y_total, focus, title)
    stats = RenderStats(window_ns=(win.t0, win.t1), lanes=len(lanes), detail_lanes=len(detail),
                        aggregated_lanes=len(aggregated), bars=bars, cells=bins * len(aggregated),
                        gap_bars=int(gap_idx.size), gaps_in_window=gaps_in_window, bins=bins,
                        layout_shapes=len(layout["shapes"]), focus_label=focus_label if focus is not None else "")
    return {"data": data, "layout": layout}, stats


def count_shapes(figure: dict) -> int:
    """Bars, markers and heatmap cells in a figure dict (what the shape budget limits)."""
    total = 0
    for tr in figure.get("data", []):
        if tr.get("type") == "heatmap":
            total += sum(len(row) for row in tr.get("z", []))
        else:
            total += len(tr.get("x", []) or [])
    total += len(figure.get("layout", {}).get("shapes", []) or [])
    return total
