"""The interactive timeline: lanes per GPU stream and CPU thread, idle gaps by cause, zoom and pan.

Large traces stay responsive because nothing here scans the whole trace per request:

* :meth:`LaneIndex.build` sorts every drawable event once per run by (lane, start), computes the
  nesting depth of CPU events (``traceview.intervals.nesting_depth``) and, per lane, the
  union of its intervals with a running total, so the busy time of any lane in any time range is
  two binary searches;
* :func:`render` then only binary-searches each lane for the window: lanes with few events in the
  window show their real events as a raster (one heatmap per lane, a row per nesting level, a
  column per ~pixel, each cell the event drawn there), the others show per-bin busy fractions (one
  heatmap row per lane); a heatmap is one image for the browser however many events it shows, and
  the cells + names + lane separators sent never exceed :data:`SHAPE_BUDGET`;
* :func:`locate` finds the event or gap under a click (plotly's heatmap clicks carry no customdata).

Figures are plain dicts (``{"data": [...], "layout": {...}}``) so building one costs no plotly
validation; colours and cause labels are those of :mod:`traceview.figures`.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from traceview.model import Kind, Trace

from traceview.secrets import scrub_text
from traceview.units import fmt_ns

from .features import figures

if TYPE_CHECKING:  # app/critical_path.py draws on this module's lanes (it imports this module)
    from .critical_path import PathIndex

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
    # the "measured bound-by" colouring of kernels (app/measured_timeline.py): never in the index's series
    ("bound_compute", "kernel: compute-bound (ncu)", "#C0392B"),
    ("bound_memory", "kernel: memory-bound (ncu)", "#2874A6"),
    ("bound_latency", "kernel: latency-bound (ncu)", "#E67E22"),
    ("unmeasured", "kernel: not measured", "#BDC3C7"),
]
_SERIES_INDEX = {key: i for i, (key, _, _) in enumerate(SERIES)}
#: the series index of each series key (public: the measured colouring recolours kernels)
SERIES_INDEX = dict(_SERIES_INDEX)
#: measured bound-by label -> its series key
BOUND_SERIES = {"compute": "bound_compute", "memory": "bound_memory", "latency": "bound_latency",
                "unmeasured": "unmeasured"}
CAUSES = ("host_bound", "sync_bound", "launch_latency", "unattributed")

GPU_LANE, GAP_LANE, CPU_LANE, RANK_LANE = "gpu", "gaps", "cpu", "rank"


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
    names: list[str]  # scrubbed (traceview.secrets): they are shown in the browser
    origin_ns: int
    end_ns: int
    #: the trace row of each position (positions are what the browser sends back on a click)
    row: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: the event lanes in position order (``lo`` increasing): position -> lane by binary search
    event_lanes: list[Lane] = field(default_factory=list)
    num_rows: int = 0

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
        names = [scrub_text(str(x)) if x is not None else "" for x in name_col.dictionary.to_pylist()]
        name_code = trace.column("name")[rows]

        bounds = np.searchsorted(lane_of, np.arange(len(keys) + 1))
        event_lanes = _event_lanes(keys, bounds, start, end, depth, _thread_names(trace))
        return cls(_display_order(event_lanes), start, end, s_rows, depth, name_code, names, origin, last,
                   row=rows.astype(np.int64), event_lanes=event_lanes, num_rows=n)

    @property
    def span_ns(self) -> int:
        return max(0, self.end_ns - self.origin_ns)

    def lanes_for(self, ranks: Sequence[int] | None) -> list[Lane]:
        if ranks is None:
            return list(self.lanes)
        chosen = {int(r) for r in ranks}
        return [ln for ln in self.lanes if ln.rank in chosen]

    # ------------------------------------------------------------------ queries
    def lane_at(self, pos: int) -> Lane:
        """The lane holding position ``pos`` (0 <= pos < number of positions)."""
        los = np.fromiter((ln.lo for ln in self.event_lanes), dtype=np.int64, count=len(self.event_lanes))
        i = int(np.searchsorted(los, pos, "right")) - 1
        return self.event_lanes[max(i, 0)]

    def position_of_row(self, row: int) -> int | None:
        """The position of trace row ``row``, None when the timeline does not draw it."""
        inv = self.__dict__.get("_inverse")
        if inv is None:  # built on the first lookup (a click), not for every run
            inv = np.full(self.num_rows, -1, dtype=np.int64)
            inv[self.row] = np.arange(self.row.size, dtype=np.int64)
            self.__dict__["_inverse"] = inv
        if not 0 <= row < inv.size or inv[row] < 0:
            return None
        return int(inv[row])

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
    from traceview.context import AnalysisContext

    kinds = trace.kind_codes()
    series = np.full(trace.num_events, -1, dtype=np.int8)
    cls_all = classify.activity_class(AnalysisContext(trace))
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

#: plot area width the label and hover-point spacing assume (px; the page is at most 1500 px wide)
PLOT_WIDTH_PX = 1100
#: pixels per lane height unit
LANE_PX = 30
#: most names drawn on events (SVG text: one element each, unlike the raster images)
LABEL_BUDGET = 300
#: most flow arrows drawn for the selected event
FLOW_BUDGET = 40
MARGIN_TOP, MARGIN_BOTTOM = 96, 24
#: height of plotly's modebar over the plot's top (px): the colorbar starts below it
MODEBAR_PX = 30


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
    labels: int = 0  # names drawn on bars
    hidden_lanes: int = 0  # lanes with nothing in the window
    collapsed_ranks: tuple[int, ...] = ()
    matches_in_window: int = 0
    path_text: str = ""  # what the critical-path overlay drew (app/critical_path.py)
    path_points: int = 0

    @property
    def shapes(self) -> int:
        """What the browser has to draw: heatmap cells (events and gaps are drawn as rasters, one
        cell per bin and nesting level), names on events, layout shapes and the critical path's points."""
        return self.cells + self.labels + self.layout_shapes + self.path_points

    def describe(self) -> str:
        t0, t1 = self.window_ns
        parts = [f"window {fmt_ns(t1 - t0, 'ms')}"]
        if self.focus_label:
            parts.append(f"highlighted: {self.focus_label}")
        if self.bars:
            parts.append(f"{self.bars:,} events drawn on {self.detail_lanes} lane(s) in {self.bins:,} columns")
        if self.aggregated_lanes:
            parts.append(f"{self.aggregated_lanes} busy lane(s) shown as busy fraction in {self.bins:,} bins "
                         "(zoom in to see events)")
        if self.gaps_in_window:
            shown = "" if self.gap_bars >= self.gaps_in_window else f" ({self.gap_bars:,} largest drawn)"
            parts.append(f"{self.gaps_in_window:,} idle gaps{shown}")
        if self.hidden_lanes:
            parts.append(f"{self.hidden_lanes} empty lane(s) hidden")
        if self.collapsed_ranks:
            parts.append(f"rank(s) {', '.join(str(r) for r in self.collapsed_ranks)} collapsed")
        if self.path_text:
            parts.append(self.path_text)
        # what the browser draws, counted as the budget counts it (not SVG shapes: rasters)
        parts.append(f"sent: {self.cells:,} heatmap cells, {self.labels:,} names, {self.layout_shapes:,} lines")
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
    def px_per_ns(self) -> float:
        return PLOT_WIDTH_PX / max(self.width_ns, 1)

    def ms(self, ns: Any) -> np.ndarray:
        """Absolute ns -> ms since the origin (subtracted in int64: exact)."""
        arr = np.asarray(ns)
        if arr.dtype.kind in "iu":
            return (arr.astype(np.int64) - self.origin_ns) / 1e6
        return (arr - float(self.origin_ns)) / 1e6


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
                  budget: int) -> tuple[dict[int, np.ndarray], list[Lane], set[int]]:
    """Lanes drawn in detail (fewest events first, up to ``budget`` events: their visible rows by
    lane id), lanes with events in the window that are aggregated instead, and the ids of the
    lanes with nothing in the window."""
    event_lanes = [ln for ln in lanes if ln.kind != GAP_LANE]
    counts = {id(ln): index.count_upper(ln, win.t0, win.t1) for ln in event_lanes}
    detail: dict[int, np.ndarray] = {}
    empty: set[int] = set()
    used = 0
    for ln in sorted(event_lanes, key=lambda ln: counts[id(ln)]):
        if counts[id(ln)] == 0:
            empty.add(id(ln))
            continue
        if used + counts[id(ln)] > budget and counts[id(ln)] > 4 * budget:
            continue  # far over the budget: aggregated without listing its events
        # the upper bound may overestimate: the exact count decides when it is over the budget
        vis = index.visible(ln, win.t0, win.t1)
        if not vis.size:
            empty.add(id(ln))
        elif used + vis.size <= budget:
            detail[id(ln)] = vis
            used += int(vis.size)
    aggregated = [ln for ln in event_lanes if id(ln) not in detail and id(ln) not in empty]
    return detail, aggregated, empty


@dataclass
class _Rows:
    """The drawn lanes top to bottom: centre and half-height of each (by lane id), total height."""

    lanes: list[Lane]
    ypos: dict[int, float]
    yhalf: dict[int, float]
    total: float

    @classmethod
    def of(cls, lanes: list[Lane]) -> "_Rows":
        ypos: dict[int, float] = {}
        yhalf: dict[int, float] = {}
        top = 0.0
        for ln in lanes:
            ypos[id(ln)] = top + ln.height / 2
            yhalf[id(ln)] = ln.height / 2
            top += ln.height
        return cls(lanes, ypos, yhalf, top)

    @property
    def plot_px(self) -> int:
        return int(max(380 - MARGIN_TOP - MARGIN_BOTTOM, LANE_PX * self.total + 20))

    @property
    def px_per_unit(self) -> float:
        return self.plot_px / max(self.total, 1e-9)


def columns(win: "_Window", bins: int) -> dict[str, float]:
    """The x of a raster's ``bins`` equal columns across the window as plotly's ``x0`` (centre of
    the first column, ms since the origin) and ``dx`` (column width, ms): two numbers instead of a
    list of ``bins + 1`` edges in every heatmap of every response."""
    dx = win.width_ns / max(bins, 1) / 1e6
    return {"x0": round(float(win.ms(win.t0)) + dx / 2, 9), "dx": dx}


def _heatmap_traces(index: LaneIndex, aggregated: list[Lane], bins: int, win: _Window, rows: _Rows,
                    collapsed: dict[int, list[Lane]]) -> list[dict]:
    """One heatmap row per aggregated lane: the busy fraction of each of ``bins`` bins (a collapsed
    rank's row: the largest busy fraction of its GPU streams per bin)."""
    data: list[dict] = []
    edges = np.linspace(win.t0, win.t1, bins + 1).round().astype(np.int64)
    first_gpu = True
    for ln in aggregated:
        members = collapsed.get(id(ln))
        if members is not None:
            frac = np.zeros(bins)
            starts = np.zeros(bins, dtype=np.int64)
            for m in members:
                frac = np.maximum(frac, index.busy_fraction(m, edges))
                starts = starts + index.starts_per_bin(m, edges)
        else:
            frac = index.busy_fraction(ln, edges)
            starts = index.starts_per_bin(ln, edges)
        gpu = ln.kind in (GPU_LANE, RANK_LANE)
        color = SERIES[0][2] if gpu else COLORS.get("cpu_op", "#72B7B2")
        y, half = rows.ypos[id(ln)], 0.42 * 2 * rows.yhalf[id(ln)]
        trace = {
            "type": "heatmap", **columns(win, bins), "y": [round(y - half, 4), round(y + half, 4)],
            "z": [frac.round(3).tolist()], "customdata": [starts.tolist()],
            "zmin": 0, "zmax": 1,
            "colorscale": [[0, "rgba(255,255,255,0)"], [0.001, "#eef3f9" if gpu else "#eef7f6"], [1, color]],
            "showscale": bool(gpu and first_gpu), "hoverongaps": False, "name": ln.label,
            "hovertemplate": esc(ln.label) + "<br>%{x:.3f} ms<br>busy %{z:.0%} · %{customdata:,} events start here"
                             "<extra>aggregated</extra>",
        }
        if gpu and first_gpu:
            # below the modebar, which plotly shows over the plot's top right corner on hover
            trace["colorbar"] = {"title": {"text": "busy"}, "tickformat": ".0%", "len": 0.5,
                                 "y": round(max(0.5, 1 - MODEBAR_PX / rows.plot_px), 4),
                                 "yanchor": "top", "thickness": 12}
            first_gpu = False
        data.append(trace)
    return data


def _darker(color: str, factor: float = 0.78) -> str:
    """``#rrggbb`` darkened (the shade of every other event, so back-to-back events stay apart)."""
    c = color.lstrip("#")
    if len(c) != 6:
        return color
    r, g, b = (int(c[i:i + 2], 16) for i in (0, 2, 4))
    return "#%02x%02x%02x" % (int(r * factor), int(g * factor), int(b * factor))


#: cell values of the event rasters: two shades per series, then causes of gaps, then the marks
_PALETTE: list[str] = [c for _k, _n, col in SERIES for c in (col, _darker(col))]
_CAUSE_BASE = len(_PALETTE)
_PALETTE += [COLORS.get(c, COLORS.get("other", "#C7C7C7")) for c in CAUSES] + [COLORS.get("other", "#C7C7C7")]
MATCH_VALUE, SELECTED_VALUE = len(_PALETTE), len(_PALETTE) + 1
_PALETTE += ["#F4D03F", "#7B241C"]
_COLORSCALE = [s for i, col in enumerate(_PALETTE)
               for s in ([i / len(_PALETTE), col], [(i + 1) / len(_PALETTE), col])]


def _lane_levels(index: LaneIndex, ln: Lane, vis: np.ndarray, rows: _Rows) -> tuple[list[np.ndarray], list[float]]:
    """The lane's visible events split by the row they are drawn on (nesting level for CPU
    threads), and the y edges of those rows (top to bottom)."""
    y0, half = rows.ypos[id(ln)], rows.yhalf[id(ln)]
    if ln.kind != CPU_LANE:
        return [vis], [y0 - 0.7 * half, y0 + 0.7 * half]
    span = 2 * half * 0.88
    level = span / max(ln.levels, 1)
    d = np.minimum(index.depth[vis].astype(np.int64), MAX_DEPTH - 1)
    top = y0 - span / 2
    return [vis[d == k] for k in range(ln.levels)], [top + level * k for k in range(ln.levels + 1)]


def _pick(start: np.ndarray, end: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per bin ``[edges[i], edges[i+1])``: the index (into ``start``, sorted) of the event covering the
    bin's middle, else of the first event starting in the bin (a sub-pixel event stays visible), else -1."""
    if start.size == 0:
        return np.full(edges.size - 1, -1, dtype=np.int64)
    mid = (edges[:-1] + edges[1:]) // 2
    i = np.searchsorted(start, mid, "right") - 1
    cover = (i >= 0) & (end[np.maximum(i, 0)] > mid)
    j = np.searchsorted(start, edges, "left")
    first = np.where(j[:-1] < j[1:], j[:-1], -1)
    return np.where(cover, i, first)


def _mark_bins(pick: np.ndarray, sub: np.ndarray, start: np.ndarray, edges: np.ndarray,
               marked: np.ndarray) -> np.ndarray:
    """Bins to draw as marked: those whose picked event is marked, and those a marked event starts in."""
    is_marked = np.isin(sub, marked)
    out = (pick >= 0) & is_marked[np.maximum(pick, 0)]
    if is_marked.any():
        k = np.searchsorted(edges, start[is_marked], "right") - 1
        k = k[(k >= 0) & (k < out.size)]
        out[k] = True
    return out


def _raster_row(index: LaneIndex, sub: np.ndarray, edges: np.ndarray, marks: "Marks",
                level: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One row of events: each bin's cell value (None where empty) and the position of its event.
    The shade alternates event by event, starting with the other one on every other nesting level:
    the rows touch (plotly draws a raster with gaps between its rows cell by cell onto a full-size
    canvas, without them as one pixel per cell, scaled: far less work per redraw)."""
    if not sub.size:  # a nesting level with nothing in the window
        return np.full(edges.size - 1, np.nan), np.full(edges.size - 1, -1, dtype=np.int64)
    start, end = index.start[sub], index.end[sub]
    pick = _pick(start, end, edges)
    val = np.full(pick.size, np.nan)
    has = pick >= 0
    safe = np.maximum(pick, 0)
    series = index.series if marks.series is None else marks.series
    val[has] = 2 * series[sub[safe[has]]].astype(np.int64) + ((safe[has] + level) % 2) + 0.5
    pos = np.where(has, sub[safe] if sub.size else -1, -1)
    if marks.matches is not None and marks.matches.size:
        hit = _mark_bins(pick, sub, start, edges, marks.matches)
        val[hit] = MATCH_VALUE + 0.5
    if marks.selected is not None:
        hit = _mark_bins(pick, sub, start, edges, np.array([marks.selected]))
        val[hit] = SELECTED_VALUE + 0.5
        pos[hit] = marks.selected  # a click there selects it again
    return val, pos


def _event_rasters(index: LaneIndex, rows: _Rows, detail: dict[int, np.ndarray], win: _Window, bins: int,
                   marks: "Marks") -> list[dict]:
    """The detailed lanes drawn as rasters: one heatmap per lane (a row per nesting level), each
    cell coloured by the event it shows (by series, alternating shades; search matches and the
    selected event marked), its name in the hover and its position as customdata (a click selects
    it). The cells are sent run-length encoded (:func:`compact_cells`; the page expands them)."""
    edges = np.linspace(win.t0, win.t1, bins + 1).round().astype(np.int64)
    x = columns(win, bins)
    memo = _label_cache(index)
    out: list[dict] = []
    for ln in rows.lanes:
        vis = detail.get(id(ln))
        if vis is None or not vis.size:
            continue
        levels, y_edges = _lane_levels(index, ln, vis, rows)
        vals, poss = zip(*(_raster_row(index, sub, edges, marks, k) for k, sub in enumerate(levels)))
        shown = np.unique(np.concatenate(poss))
        shown = shown[shown >= 0]
        cells = compact_cells(list(vals), [np.searchsorted(shown, p) if shown.size else p for p in poss],
                              [p >= 0 for p in poss], [[p] for p in shown.tolist()],
                              _event_labels(index, shown, win, memo))
        out.append({"type": "heatmap", **x, "y": [round(v, 4) for v in y_edges], CELLS_KEY: cells,
                    "zmin": 0, "zmax": len(_PALETTE), "colorscale": _COLORSCALE, "showscale": False,
                    "hoverongaps": False, "name": ln.label, "xgap": 0, "ygap": 0,
                    "hovertemplate": "%{text}<br>click for details<extra></extra>"})
    return out


#: the key of a raster heatmap's cells as sent (:func:`compact_cells`) in place of z, customdata
#: and text: a cell per bin repeats its event's name and position; runs of equal cells are sent once
CELLS_KEY = "tvcells"


def compact_cells(vals: list[np.ndarray], keys: list[np.ndarray], has: list[np.ndarray], items_cd: list[Any],
                  items_text: list[str]) -> dict:
    """Raster rows (cell values, NaN where empty; the item each cell shows) as ``{"runs": [[count,
    item, code, ...] per row], "cd": [customdata of each item], "text": [hover text of each item]}``
    where a cell's z is ``code + 0.5`` (``code`` -1: empty, item -1: no item). :func:`expand_cells`
    and the page's JavaScript (in ``timeline_view.INTERACTIONS_JS``) turn it back into z, customdata
    and text."""
    runs: list[list[int]] = []
    for val, key, ok in zip(vals, keys, has):
        code = np.where(np.isnan(val), -1, np.floor(np.nan_to_num(val, nan=-1.0))).astype(np.int64)
        item = np.where(ok, key, -1).astype(np.int64)
        if not code.size:
            runs.append([])
            continue
        change = np.flatnonzero((code[1:] != code[:-1]) | (item[1:] != item[:-1])) + 1
        first = np.concatenate([[0], change])
        count = np.diff(np.concatenate([first, [code.size]]))
        runs.append(np.column_stack([count, item[first], code[first]]).ravel().tolist())
    return {"runs": runs, "cd": items_cd, "text": items_text}


def expand_cells(trace: dict) -> dict:
    """A raster heatmap as plotly takes it (z, customdata, text per cell) from one sent with
    :data:`CELLS_KEY` (what the page's JavaScript does before drawing); other traces as they are."""
    cells = trace.get(CELLS_KEY)
    if cells is None:
        return trace
    z: list[list[Any]] = []
    cd: list[list[Any]] = []
    text: list[list[str]] = []
    for row in cells["runs"]:
        zr: list[Any] = []
        cr: list[Any] = []
        tr: list[str] = []
        for count, item, code in zip(row[0::3], row[1::3], row[2::3]):
            zr += [None if code < 0 else code + 0.5] * count
            cr += [None if item < 0 else cells["cd"][item]] * count
            tr += ["" if item < 0 else cells["text"][item]] * count
        z.append(zr)
        cd.append(cr)
        text.append(tr)
    out = {k: v for k, v in trace.items() if k != CELLS_KEY}
    out.update(z=z, customdata=cd, text=text)
    return out


def expand_figure(figure: dict) -> dict:
    """A figure with every raster expanded (:func:`expand_cells`)."""
    return {**figure, "data": [expand_cells(tr) for tr in figure.get("data", [])]}


#: most hover texts kept per run (:func:`_label_cache`; ~100 bytes each)
LABEL_CACHE_SIZE = 200_000


def _label_cache(index: LaneIndex) -> dict[int, str]:
    """The run's hover texts by position (they do not depend on the window: the next request, a
    zoom or a click, shows mostly the same events); emptied when it reaches LABEL_CACHE_SIZE."""
    memo: dict[int, str] = index.__dict__.setdefault("_labels", {})
    if len(memo) > LABEL_CACHE_SIZE:
        memo.clear()
    return memo


def _event_labels(index: LaneIndex, pos: np.ndarray, win: _Window, memo: dict[int, str]) -> list[str]:
    """The hover text of each event at ``pos``: its name, duration and start (since the run's
    origin, the same for every window)."""
    out: list[str] = []
    for p in pos.tolist():
        t = memo.get(p)
        if t is None:
            s, e = int(index.start[p]), int(index.end[p])
            t = memo[p] = (f"{esc(index.names[int(index.name_code[p])], 80)}<br>{fmt_ns(e - s)} · at "
                           f"{(s - win.origin_ns) / 1e6:,.3f} ms")
        out.append(t)
    return out


def _lane_y(index: LaneIndex, ln: Lane, vis: np.ndarray, rows: _Rows) -> np.ndarray:
    """The y of each visible event of a lane (CPU events in the middle of their nesting level's row)."""
    y0 = rows.ypos[id(ln)]
    if ln.kind != CPU_LANE:
        return np.full(vis.size, float(y0))
    span = 2 * rows.yhalf[id(ln)] * 0.88
    level = span / max(ln.levels, 1)
    d = np.minimum(index.depth[vis].astype(np.int64), MAX_DEPTH - 1)
    return y0 - span / 2 + level * (d + 0.5)


def _labels(index: LaneIndex, rows: _Rows, detail: dict[int, np.ndarray],
            win: _Window) -> tuple[list[float], list[float], list[str]]:
    """Names on the events wide enough to hold at least a few characters (widest first, at most
    :data:`LABEL_BUDGET`), cut to the event's width."""
    parts = [(vis, _lane_y(index, ln, vis, rows), ln.kind == CPU_LANE and ln.levels > 3)
             for ln in rows.lanes if (vis := detail.get(id(ln))) is not None and vis.size]
    if not parts:
        return [], [], []
    pos = np.concatenate([p[0] for p in parts])
    ys = np.concatenate([p[1] for p in parts])
    lo = np.maximum(index.start[pos], win.t0)
    hi = np.minimum(index.end[pos], win.t1)
    px = (hi - lo) * win.px_per_ns
    chars = (px // 7).astype(np.int64) - 1
    cand = np.flatnonzero(chars >= 4)
    cand = cand[np.argsort(-px[cand], kind="stable")[:LABEL_BUDGET]]
    mid = win.ms((lo[cand] + hi[cand]) // 2).round(6).tolist()
    texts = [esc(index.names[code], int(c)) for code, c in zip(index.name_code[pos[cand]].tolist(),
                                                                 chars[cand].tolist())]
    return mid, ys[cand].round(4).tolist(), texts


def _label_trace(xs: list[float], ys: list[float], texts: list[str]) -> dict:
    return {"type": "scatter", "mode": "text", "x": xs, "y": ys, "text": texts, "name": "names",
            "textposition": "middle center", "textfont": {"color": "white", "size": 10},
            "hoverinfo": "skip", "showlegend": False, "cliponaxis": True}


def _marks_drawn(detail: dict[int, np.ndarray], marks: "Marks") -> tuple[bool, bool]:
    """Whether a search match and the selected event are among the events drawn one by one (the
    rasters mark every one of them, :func:`_mark_bins`)."""
    if not detail:
        return False, False
    shown = np.concatenate(list(detail.values()))
    match = marks.matches is not None and bool(np.isin(marks.matches, shown).any())
    selected = marks.selected is not None and bool(np.isin(shown, [marks.selected]).any())
    return match, selected


def _legend_traces(index: LaneIndex, detail: dict[int, np.ndarray], causes: list[str], aggregated: list[Lane],
                   marks: tuple[bool, bool] = (False, False), series: np.ndarray | None = None) -> list[dict]:
    """One legend entry per thing drawn (the rasters have no legend of their own): each series drawn
    event by event, each gap cause, the busy fraction of aggregated GPU and CPU lanes (collapsed
    ranks are GPU streams), the search matches and the selected event."""
    by = index.series if series is None else series
    drawn = sorted(set(np.unique(by[np.concatenate(list(detail.values()))]).tolist())) if detail else []
    entries = [(SERIES[s][1], SERIES[s][2]) for s in drawn]
    entries += [(f"gap: {CAUSE_LABELS.get(c, c)}", COLORS.get(c, COLORS.get("other", "#C7C7C7"))) for c in causes]
    if any(ln.kind in (GPU_LANE, RANK_LANE) for ln in aggregated):
        entries.append(("GPU busy fraction (aggregated lanes)", SERIES[0][2]))
    if any(ln.kind == CPU_LANE for ln in aggregated):
        entries.append(("CPU busy fraction (aggregated lanes)", COLORS.get("cpu_op", "#72B7B2")))
    if marks[0]:
        entries.append(("search match", _PALETTE[MATCH_VALUE]))
    if marks[1]:
        entries.append(("selected event", _PALETTE[SELECTED_VALUE]))
    return [{"type": "scatter", "mode": "markers", "x": [None], "y": [None], "name": name, "showlegend": True,
             "hoverinfo": "skip", "marker": {"color": color, "symbol": "square", "size": 11}}
            for name, color in entries]


def _gap_rasters(gaps: Any, idx: np.ndarray, rows: _Rows, win: _Window, bins: int) -> tuple[list[dict], list[str]]:
    """The gaps ``idx`` of the gap table on their gap lanes, as rasters coloured by cause; each cell's
    customdata is its gap's range (ns since the origin) for a click to zoom to. Also the causes drawn."""
    g = gaps.iloc[idx]
    dev = g["device"].to_numpy() if "device" in g else np.zeros(idx.size, dtype=np.int64)
    rank = g["rank"].to_numpy()
    gs, ge = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
    causes = g["cause"].astype(str).to_numpy()
    cause_code = np.array([CAUSES.index(c) if c in CAUSES else len(CAUSES) for c in causes.tolist()], dtype=np.int64)
    cpu = g["cpu_context"].to_numpy() if "cpu_context" in g else np.full(idx.size, None)
    edges = np.linspace(win.t0, win.t1, bins + 1).round().astype(np.int64)
    x = columns(win, bins)
    out: list[dict] = []
    for ln in rows.lanes:
        if ln.kind != GAP_LANE:
            continue
        mine = np.flatnonzero((rank == ln.rank) & (dev == ln.device))
        if not mine.size:
            continue
        mine = mine[np.argsort(gs[mine], kind="stable")]
        pick = _pick(gs[mine], ge[mine], edges)
        has = pick >= 0
        at = mine[np.maximum(pick, 0)]
        val = np.where(has, _CAUSE_BASE + cause_code[at] + 0.5, np.nan)
        shown = np.unique(at[has])
        labels = [(f"{CAUSE_LABELS.get(causes[k], causes[k])} gap · {fmt_ns(int(ge[k] - gs[k]))}"
                   + (f"<br>CPU: {esc(scrub_text(str(cpu[k])))}" if cpu[k] else "")) for k in shown.tolist()]
        ranges = [[int(gs[k] - win.origin_ns), int(ge[k] - win.origin_ns)] for k in shown.tolist()]
        y0, half = rows.ypos[id(ln)], rows.yhalf[id(ln)]
        out.append({"type": "heatmap", **x, "y": [round(y0 - 0.85 * half, 4), round(y0 + 0.85 * half, 4)],
                    CELLS_KEY: compact_cells([val], [np.searchsorted(shown, at)], [has], ranges, labels),
                    "zmin": 0, "zmax": len(_PALETTE), "colorscale": _COLORSCALE, "showscale": False,
                    "hoverongaps": False, "name": ln.label, "hovertemplate": "%{text}<br>click to zoom<extra></extra>"})
    drawn = [c for c in list(CAUSES) + sorted(set(causes.tolist()) - set(CAUSES)) if c in set(causes.tolist())]
    return out, drawn


def _gap_labels(gaps: Any, idx: np.ndarray, rows: _Rows, win: _Window) -> tuple[list[float], list[float], list[str]]:
    """The cause written on gaps wide enough for it."""
    g = gaps.iloc[idx]
    dev = g["device"].to_numpy() if "device" in g else np.zeros(idx.size, dtype=np.int64)
    ys = {(ln.rank, ln.device): rows.ypos[id(ln)] for ln in rows.lanes if ln.kind == GAP_LANE}
    lo = np.maximum(g["start_ns"].to_numpy(np.int64), win.t0)
    hi = np.minimum(g["end_ns"].to_numpy(np.int64), win.t1)
    labels = [CAUSE_LABELS.get(c, c) for c in g["cause"].astype(str).tolist()]
    wide = np.flatnonzero((hi - lo) * win.px_per_ns >= 7 * np.array([len(t) + 2 for t in labels]))[:LABEL_BUDGET]
    out_x, out_y, out_t = [], [], []
    for k in wide.tolist():
        y = ys.get((int(g["rank"].iloc[k]), int(dev[k])))
        if y is not None:
            out_x.append(round(float(win.ms((lo[k] + hi[k]) // 2)), 6))
            out_y.append(round(y, 4))
            out_t.append(labels[k])
    return out_x, out_y, out_t


def _flow_annotations(index: LaneIndex, flows: Sequence[tuple[int, int]], rows: _Rows, win: _Window) -> list[dict]:
    """An arrow per (launch call, GPU activity) pair of positions whose lanes are both drawn: from
    the end of the call's bar to the start of the activity's bar."""
    out: list[dict] = []
    for src, dst in list(flows)[:FLOW_BUDGET]:
        a_lane, b_lane = index.lane_at(src), index.lane_at(dst)
        if id(a_lane) not in rows.ypos or id(b_lane) not in rows.ypos:
            continue
        ay = float(_lane_y(index, a_lane, np.array([src]), rows)[0])
        by = float(_lane_y(index, b_lane, np.array([dst]), rows)[0])
        out.append({"x": win.ms(index.start[dst]).item(), "y": round(by, 4), "ax": win.ms(index.start[src]).item(),
                    "ay": round(ay, 4), "xref": "x", "yref": "y", "axref": "x", "ayref": "y", "text": "",
                    "showarrow": True, "arrowhead": 2, "arrowsize": 1.2, "arrowwidth": 1.6, "arrowcolor": "#C0392B",
                    "standoff": 2, "startstandoff": 2})
    return out


def _layout(rows: _Rows, win: _Window, focus: tuple[int, int] | None, title: str) -> dict:
    """Axes (time on top, lane labels on y), lane separators (darker between ranks) and the
    highlighted range."""
    lanes = rows.lanes
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
    plot_px = rows.plot_px
    layout = {
        "barmode": "overlay", "hovermode": "closest", "dragmode": "pan", "hoverdistance": 12,
        "height": int(plot_px + MARGIN_TOP + MARGIN_BOTTOM),
        "margin": {"l": 250, "r": 30, "t": MARGIN_TOP, "b": MARGIN_BOTTOM},
        "paper_bgcolor": "white", "plot_bgcolor": "white",
        "font": {"family": "Helvetica, Arial, sans-serif", "size": 12},
        "xaxis": {"range": [win.ms(win.t0).item(), win.ms(win.t1).item()], "side": "top", "ticksuffix": " ms",
                  "showgrid": True, "gridcolor": "#eee", "zeroline": False, "showline": True, "linecolor": "#999",
                  "mirror": "ticks"},
        "yaxis": {"tickmode": "array", "tickvals": [round(rows.ypos[id(ln)], 4) for ln in lanes],
                  "ticktext": [esc(ln.label, 48) for ln in lanes],
                  "range": [rows.total, 0] if lanes else [1, 0], "fixedrange": True, "showgrid": False,
                  "zeroline": False},
        # above the time axis (which is on top): 34 px over the plot area
        "legend": {"orientation": "h", "y": 1 + 34 / plot_px, "yanchor": "bottom", "x": 0, "xanchor": "left"},
        "shapes": shapes, "annotations": annotations,
    }
    if title:
        layout["title"] = {"text": esc(title, 160), "x": 0.01, "xanchor": "left"}
    return layout


def _collapse(lanes: list[Lane], open_ranks: Sequence[int] | None) -> tuple[list[Lane], dict[int, list[Lane]]]:
    """The lanes with each rank not in ``open_ranks`` (None: all open) replaced by one summary lane
    (its GPU streams' busy fraction), and each summary lane's member lanes by lane id."""
    if open_ranks is None:
        return lanes, {}
    keep = {int(r) for r in open_ranks}
    out: list[Lane] = []
    members: dict[int, list[Lane]] = {}
    for r in sorted({ln.rank for ln in lanes}, key=lambda r: min(i for i, ln in enumerate(lanes) if ln.rank == r)):
        own = [ln for ln in lanes if ln.rank == r]
        if r in keep:
            out.extend(own)
            continue
        gpu = [ln for ln in own if ln.kind == GPU_LANE] or [ln for ln in own if ln.kind == CPU_LANE]
        summary = Lane(RANK_LANE, r, -1, -1, f"r{r} · collapsed ({len(own)} lanes)")
        members[id(summary)] = gpu
        out.append(summary)
    return out, members


@dataclass
class Marks:
    """What to mark on top of the events: search matches, the selected event and its flows
    (positions in the index)."""

    matches: np.ndarray | None = None
    selected: int | None = None
    flows: Sequence[tuple[int, int]] = ()
    #: each position's series to draw it in, in place of the index's (the measured bound-by colouring)
    series: np.ndarray | None = None


def _visible_lanes(index: LaneIndex, lanes: list[Lane], win: _Window, gap_idx: np.ndarray, gaps: Any,
                   detail_budget: int) -> tuple[list[Lane], dict[int, np.ndarray], list[Lane], int]:
    """The lanes to draw (empty ones hidden: event lanes with nothing in the window, gap lanes with
    no gap drawn), the detailed lanes' events, the aggregated lanes and how many lanes were hidden."""
    detail, aggregated, empty = _choose_lanes(index, lanes, win, detail_budget)
    with_gaps: set[tuple[int, int]] = set()
    if gap_idx.size:
        g = gaps.iloc[gap_idx]
        dev = g["device"].to_numpy() if "device" in g else np.zeros(gap_idx.size, dtype=np.int64)
        with_gaps = set(zip(g["rank"].to_numpy().astype(int).tolist(), dev.astype(int).tolist()))
    shown = [ln for ln in lanes if not (id(ln) in empty or (ln.kind == GAP_LANE
                                                            and (ln.rank, ln.device) not in with_gaps))]
    return shown, detail, aggregated, len(lanes) - len(shown)


@dataclass
class _Plan:
    """Which lanes a response draws, top to bottom, and how."""

    lanes: list[Lane]
    detail: dict[int, np.ndarray]
    aggregated: list[Lane]
    collapsed: dict[int, list[Lane]]
    summary: list[Lane]
    gap_idx: np.ndarray
    gaps_in_window: int
    hidden: int


def _plan(index: LaneIndex, win: _Window, ranks: Sequence[int] | None, gaps: Any, open_ranks: Sequence[int] | None,
          detail_budget: int, gap_budget: int) -> _Plan:
    all_lanes, collapsed = _collapse(index.lanes_for(ranks), open_ranks)
    gap_idx, gaps_in_window = _window_gaps(gaps, win, ranks, gap_budget)
    if collapsed and gap_idx.size:  # a collapsed rank has no gap lane
        open_set = {ln.rank for ln in all_lanes if ln.kind != RANK_LANE}
        gap_idx = gap_idx[np.isin(gaps["rank"].to_numpy()[gap_idx], list(open_set))]
    event_lanes = [ln for ln in all_lanes if ln.kind != RANK_LANE]
    shown, detail, aggregated, hidden = _visible_lanes(index, event_lanes, win, gap_idx, gaps, detail_budget)
    summary = [ln for ln in all_lanes if ln.kind == RANK_LANE]
    order = {id(ln): i for i, ln in enumerate(all_lanes)}
    lanes = sorted(shown + summary, key=lambda ln: order[id(ln)])
    return _Plan(lanes, detail, aggregated + summary, collapsed, summary, gap_idx, gaps_in_window, hidden)


def locate(index: LaneIndex, t0: int, t1: int, x_ms: float, y: float, *, ranks: Sequence[int] | None = None,
           gaps: Any = None, open_ranks: Sequence[int] | None = None, detail_budget: int = DETAIL_BUDGET,
           gap_budget: int = GAP_BUDGET) -> tuple[str, Any] | None:
    """What a click at (``x_ms``, ``y``) on the figure :func:`render` draws for the same arguments
    hit (plotly's click on a heatmap carries no customdata): ``("event", position)``, ``("gap",
    (start, end))`` in ns since the origin, or None (an aggregated lane, nothing there)."""
    win = _Window(int(t0), max(int(t1), int(t0) + 1), index.origin_ns)
    plan = _plan(index, win, ranks, gaps, open_ranks, detail_budget, gap_budget)
    rows = _Rows.of(plan.lanes)
    lane = next((ln for ln in plan.lanes if abs(y - rows.ypos[id(ln)]) <= rows.yhalf[id(ln)]), None)
    if lane is None:
        return None
    t = index.origin_ns + int(round(x_ms * 1e6))
    slack = max(1, win.width_ns // 600)  # about two raster columns
    if lane.kind == GAP_LANE:
        if not plan.gap_idx.size:
            return None
        g = gaps.iloc[plan.gap_idx]
        dev = g["device"].to_numpy() if "device" in g else np.zeros(len(g), dtype=np.int64)
        gs, ge = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
        hit = np.flatnonzero((g["rank"].to_numpy() == lane.rank) & (dev == lane.device)
                             & (gs <= t + slack) & (ge >= t - slack))
        if not hit.size:
            return None
        k = hit[np.argmin(np.abs((gs[hit] + ge[hit]) // 2 - t))]
        return "gap", (int(gs[k] - index.origin_ns), int(ge[k] - index.origin_ns))
    vis = plan.detail.get(id(lane))
    if vis is None or not vis.size:
        return None
    levels, y_edges = _lane_levels(index, lane, vis, rows)
    k = int(np.clip(np.searchsorted(np.asarray(y_edges), y) - 1, 0, len(levels) - 1))
    sub = levels[k]
    hit = sub[(index.start[sub] <= t + slack) & (index.end[sub] >= t - slack)]
    if not hit.size:
        return None
    covering = hit[(index.start[hit] <= t) & (index.end[hit] >= t)]
    return "event", int(covering[0] if covering.size else hit[0])


def render(index: LaneIndex, t0: int, t1: int, *, ranks: Sequence[int] | None = None, gaps: Any = None,
           focus: tuple[int, int] | None = None, focus_label: str = "", detail_budget: int = DETAIL_BUDGET,
           shape_budget: int = SHAPE_BUDGET, gap_budget: int = GAP_BUDGET, title: str = "",
           open_ranks: Sequence[int] | None = None, marks: Marks | None = None,
           path: "PathIndex | None" = None) -> tuple[dict, RenderStats]:
    """The timeline of ``[t0, t1)`` (absolute ns) as a plotly figure dict, and what it holds.

    ``gaps``: the idle-gap table (``rank, device, start_ns, end_ns, dur_ns, cause, cpu_context,
    step``); ``focus``: an absolute range to highlight (a clicked gap); ``open_ranks``: the ranks
    drawn lane by lane (the others collapse to one row each; None: all); ``marks``: search matches,
    the selected event and its flow arrows. Lanes with few events in the window are drawn in detail
    (up to ``detail_budget`` events, as rasters), the others as busy fractions in as many bins as
    the rest of ``shape_budget`` allows; lanes with nothing in the window are left out. ``path``:
    the critical path's segments to draw over the lanes (:mod:`traceview.app.critical_path`; None:
    not drawn), their points taken from the shape budget first.
    """
    marks = marks or Marks()
    win = _Window(int(t0), max(int(t1), int(t0) + 1), index.origin_ns)
    plan = _plan(index, win, ranks, gaps, open_ranks, detail_budget, gap_budget)
    lanes, detail, aggregated, collapsed = plan.lanes, plan.detail, plan.aggregated, plan.collapsed
    gap_idx = plan.gap_idx
    gaps_in_window, hidden, summary = plan.gaps_in_window, plan.hidden, plan.summary
    rows = _Rows.of(lanes)
    label_x, label_y, label_text = _labels(index, rows, detail, win)
    if gap_idx.size:
        gx, gy, gt = _gap_labels(gaps, gap_idx, rows, win)
        label_x, label_y, label_text = label_x + gx, label_y + gy, label_text + gt
    used = sum(int(v.size) for v in detail.values())
    raster_rows = sum(ln.levels if ln.kind == CPU_LANE else 1 for ln in lanes if id(ln) in detail)
    raster_rows += sum(1 for ln in lanes if ln.kind == GAP_LANE)
    overlay = _path_overlay(path, rows, win, shape_budget // 4)
    room = max(0, shape_budget - len(lanes) - 1 - len(label_text) - overlay.points)
    bins = int(min(MAX_BINS, room // max(1, raster_rows + len(aggregated))))
    data = _heatmap_traces(index, aggregated, bins, win, rows, collapsed) if aggregated else []
    # only the matches in the window can be drawn: the rasters test every row's events against these
    marks = Marks(_window_matches(index, marks, win), marks.selected, marks.flows, marks.series)
    data.extend(_event_rasters(index, rows, detail, win, bins, marks))
    causes: list[str] = []
    if gap_idx.size:
        gap_data, causes = _gap_rasters(gaps, gap_idx, rows, win, bins)
        data.extend(gap_data)
    data.extend(overlay.traces)  # over the rasters, under the names
    data.extend(_legend_traces(index, detail, causes, aggregated, _marks_drawn(detail, marks), marks.series))
    if label_text:
        data.append(_label_trace(label_x, label_y, label_text))
    layout = _layout(rows, win, focus, title)
    layout["annotations"].extend(_flow_annotations(index, marks.flows, rows, win))
    cells = sum(len(tr["y"]) - 1 if CELLS_KEY in tr else len(tr["z"]) for tr in data if tr["type"] == "heatmap") * bins
    stats = RenderStats(window_ns=(win.t0, win.t1), lanes=len(lanes), detail_lanes=len(detail),
                        aggregated_lanes=len(aggregated), bars=used, cells=cells,
                        gap_bars=int(gap_idx.size), gaps_in_window=gaps_in_window, bins=bins,
                        layout_shapes=len(layout["shapes"]), focus_label=focus_label if focus is not None else "",
                        labels=len(label_text), hidden_lanes=hidden,
                        collapsed_ranks=tuple(ln.rank for ln in summary),
                        matches_in_window=0 if marks.matches is None else int(marks.matches.size),
                        path_text=overlay.text, path_points=overlay.points)
    return {"data": data, "layout": layout}, stats


def _path_overlay(path: "PathIndex | None", rows: _Rows, win: _Window, budget: int) -> Any:
    """The critical path drawn over the lanes (nothing when ``path`` is None)."""
    from . import critical_path

    if path is None:
        return critical_path.Drawn([])
    lane_rows = [critical_path.LaneRow(ln, rows.ypos[id(ln)], rows.yhalf[id(ln)]) for ln in rows.lanes]
    return critical_path.draw(path, lane_rows, win.t0, win.t1, win.origin_ns,
                              min(budget, critical_path.POINT_BUDGET))


def _window_matches(index: LaneIndex, marks: Marks, win: _Window) -> np.ndarray | None:
    """The search matches overlapping the window (None without a search)."""
    m = marks.matches
    if m is None or not m.size:
        return m
    return m[(index.start[m] < win.t1) & (index.end[m] > win.t0)]


def count_shapes(figure: dict) -> int:
    """What the shape budget limits, counted from a figure dict: heatmap cells (the event and gap
    rasters and the busy fractions), names drawn on events, points and layout shapes."""
    total = 0
    for tr in figure.get("data", []):
        if tr.get("type") == "heatmap":
            total += sum(len(row) for row in expand_cells(tr).get("z", []))
        elif tr.get("mode") == "text":
            total += len(tr.get("text", []) or [])
        else:
            total += sum(1 for v in tr.get("x", []) or [] if v is not None)
    total += len(figure.get("layout", {}).get("shapes", []) or [])
    return total
