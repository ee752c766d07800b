"""Plotly figures shared by the HTML report and the web app.

Every figure is drawn from the report model (:func:`traceview.report.build_report`), whose
``charts`` section holds the bounded, pre-computed data for each chart; nothing here recomputes a
metric. The timeline is the exception: it draws the trace's own events, so it takes a
:class:`~traceview.model.Trace` and a time window, and never draws more than ``max_shapes`` bars
(events are merged into "aggregated" blocks beyond that).

Stable API (the web app imports these):

``breakdown_figure(report)``
    per rank and GPU: compute / communication (not overlapped) / memory (alone) / idle, stacked
    bars that add up to the GPU window.
``gap_histogram_figure(report)``
    idle gaps by duration bucket, stacked by cause (idle time; gap counts in the hover).
``timeline_figure(trace, start_ns, end_ns, *, rank=None, gaps=None, max_shapes=5000, title=None)``
    an excerpt of the timeline: lanes per GPU stream and CPU thread, idle gaps shaded and
    labelled with their cause. ``gaps``: records (dicts or a DataFrame) with ``start_ns``,
    ``end_ns``, ``cause`` and optionally ``device``, ``rank``, ``cpu_context``.
``worst_gap_timeline(trace, report)``
    :func:`timeline_figure` on the window the report chose around the worst gaps (``None`` when
    the trace has no gaps).
``launch_scatter_figure(report)``
    kernel duration against launch-call duration and against launch delay (a sample, its size
    in the title).
``overlap_figure(report)``
    communication overlapped with compute vs exposed, per rank and GPU.
``skew_heatmap_figure(report)``
    rank x collective arrival lateness (``None`` with fewer than two ranks communicating).
``report_figures(report, trace=None)``
    the figures that have data, by name, in display order.

Every function returns a ``plotly.graph_objects.Figure`` with a title, axis titles with units,
and a legend. Strings from the trace are HTML-escaped before plotly sees them (plotly renders a
subset of HTML in labels, and kernel names contain ``<`` and ``>``).
"""

from __future__ import annotations

import html
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from traceview.model import Kind, Trace
from traceview.units import duration_unit

#: the most bars a timeline draws; beyond it events are merged per lane
MAX_SHAPES = 5000
#: gaps shaded (as rectangles with a label) on a timeline; the others only get a bar in the gap lane
MAX_GAP_LABELS = 12

#: colours shared by every chart (the same class has the same colour everywhere)
COLORS = {
    "compute": "#4C78A8",
    "communication": "#F58518",
    "communication_overlapped": "#FFBF79",
    "memory": "#54A24B",
    "idle": "#BAB0AC",
    "host_bound": "#E45756",
    "sync_bound": "#B279A2",
    "launch_latency": "#EECA3B",
    "unattributed": "#9D755D",
    "cpu_op": "#72B7B2",
    "python_function": "#9ECAE9",
    "annotation": "#D4D4D4",
    "runtime": "#FF9DA6",
    "memset": "#88D27A",
    "other": "#C7C7C7",
}
CAUSE_LABELS = {
    "host_bound": "host-bound",
    "sync_bound": "sync-bound",
    "launch_latency": "launch latency",
    "unattributed": "unattributed",
}
_FONT = dict(family="Helvetica, Arial, sans-serif", size=12)


def esc(text: Any) -> str:
    """A trace string made safe for plotly labels (which interpret a subset of HTML)."""
    return html.escape("" if text is None else str(text), quote=False)


def _short(text: Any, limit: int = 80) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _layout(fig: go.Figure, title: str, *, height: int | None = None, legend_below: bool = False,
            **kwargs: Any) -> go.Figure:
    legend = dict(orientation="h", yanchor="bottom", y=1.01, xanchor="left", x=0, title_text="", traceorder="normal")
    margin = dict(l=70, r=30, t=90, b=60)
    if legend_below:  # charts with labels or subplot titles along their top edge
        legend.update(yanchor="top", y=-0.16)
        margin.update(t=80, b=130)
    fig.update_layout(
        title=dict(text=title, x=0.01, xanchor="left"),
        template="plotly_white",
        font=_FONT,
        legend=legend,
        margin=margin,
        showlegend=True,
        **kwargs,
    )
    if height:
        fig.update_layout(height=height)
    return fig


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=esc(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title, height=260)


#: characters of a kernel name in a scatter point's hover text
HOVER_NAME_CHARS = 48


def _sig(value: float, digits: int = 4) -> float:
    """``value`` to ``digits`` significant digits: what a log-scale point needs, in fewer bytes."""
    return float(f"{value:.{digits}g}")


def _gpu_label(row: Mapping[str, Any]) -> str:
    return f"rank {row['rank']} · GPU {row['device']}"


def _charts(report: Mapping[str, Any]) -> Mapping[str, Any]:
    return report.get("charts") or {}


# --------------------------------------------------------------------------------------- breakdown


def breakdown_figure(report: Mapping[str, Any]) -> go.Figure:
    """Stacked bars per rank and GPU (whole trace) that add up to the GPU window."""
    rows = _charts(report).get("breakdown") or []
    title = "Where GPU time goes, per rank (whole trace)"
    if not rows:
        return _empty(title, "No GPU activity in the trace.")
    labels = [_gpu_label(r) for r in rows]
    parts = [
        ("compute", "compute", "compute_ns"),
        ("communication (not overlapped)", "communication", "exposed_comm_ns"),
        ("memory copies/sets (alone)", "memory", "memory_only_ns"),
        ("idle", "idle", "idle_ns"),
    ]
    fig = go.Figure()
    unit, scale = duration_unit(max((r["window_ns"] or 0) for r in rows))
    for name, color, key in parts:
        values = [r[key] / scale for r in rows]
        share = [100.0 * r[key] / r["window_ns"] if r["window_ns"] else 0.0 for r in rows]
        fig.add_trace(
            go.Bar(
                name=name, x=labels, y=values, marker_color=COLORS[color], customdata=share,
                hovertemplate="%{x}<br>" + name + f": %{{y:.3g}} {unit} (%{{customdata:.1f}}% of the window)"
                "<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text=f"time ({unit})")
    fig.update_xaxes(title_text="rank and GPU")
    return _layout(fig, title, height=420)


def overlap_figure(report: Mapping[str, Any]) -> go.Figure:
    """Communication per rank and GPU, split into overlapped with compute and exposed."""
    rows = [r for r in (_charts(report).get("breakdown") or []) if r.get("communication_ns")]
    title = "Communication overlapped with compute, per rank"
    if not rows:
        return _empty(title, "No communication kernels in the trace.")
    labels = [_gpu_label(r) for r in rows]
    fig = go.Figure()
    unit, scale = duration_unit(max((r["overlap_ns"] or 0) + (r["exposed_comm_ns"] or 0) for r in rows))
    fig.add_trace(go.Bar(name="overlapped with compute", x=labels, y=[r["overlap_ns"] / scale for r in rows],
                         marker_color=COLORS["communication_overlapped"],
                         hovertemplate=f"%{{x}}<br>overlapped: %{{y:.3g}} {unit}<extra></extra>"))
    fig.add_trace(go.Bar(name="exposed (GPU only communicating)", x=labels,
                         y=[r["exposed_comm_ns"] / scale for r in rows],
                         marker_color=COLORS["communication"],
                         text=[f"{r['overlap_pct']:.0f}% overlapped" if r.get("overlap_pct") is not None else ""
                               for r in rows],
                         textposition="outside",
                         hovertemplate=f"%{{x}}<br>exposed: %{{y:.3g}} {unit}<extra></extra>"))
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text=f"communication time ({unit})")
    fig.update_xaxes(title_text="rank and GPU")
    return _layout(fig, title, height=400)


# ------------------------------------------------------------------------------------------ gaps


def gap_histogram_figure(report: Mapping[str, Any]) -> go.Figure:
    """Idle time in gaps of each duration bucket, stacked by cause (all ranks and GPUs)."""
    hist = _charts(report).get("gap_histogram") or {}
    title = "Idle gaps by duration and cause (all ranks)"
    if not hist or not hist.get("total_gaps"):
        return _empty(title, "No idle gaps: the GPUs were never idle inside their windows.")
    buckets = hist["buckets"]
    fig = go.Figure()
    # the unit of the tallest stack (the sum over causes of a bucket)
    unit, scale = duration_unit(max(map(sum, zip(*hist["idle_ns"].values()))) if hist["idle_ns"] else 0)
    for cause in hist["causes"]:
        idle = hist["idle_ns"][cause]
        if not any(idle):
            continue
        fig.add_trace(
            go.Bar(
                name=CAUSE_LABELS.get(cause, cause), x=buckets, y=[v / scale for v in idle],
                customdata=hist["gaps"][cause], marker_color=COLORS.get(cause, COLORS["other"]),
                hovertemplate="gaps %{x}<br>" + CAUSE_LABELS.get(cause, cause)
                + f": %{{y:.3g}} {unit} in %{{customdata}} gaps<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="gap duration", type="category", categoryorder="array", categoryarray=buckets)
    fig.update_yaxes(title_text=f"idle time ({unit})")
    return _layout(fig, f"{title}: {hist['total_gaps']:,} gaps", height=400)


# --------------------------------------------------------------------------------------- launches


def launch_scatter_figure(report: Mapping[str, Any]) -> go.Figure:
    """Kernel duration vs launch-call duration and vs launch delay, for a sample of launches."""
    data = _charts(report).get("launches") or {}
    points = data.get("points") or []
    title = "Launch overhead: kernel duration vs launch call"
    if not points:
        return _empty(title, "No launch links between host calls and GPU activity.")
    total, shown = int(data.get("total", len(points))), len(points)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        "kernel vs launch-call duration", "kernel duration vs launch delay"))
    floor = 0.01  # us: zero durations are drawn at the axis floor (log scale)
    # hover text is most of a page's bytes (2,000 points, twice): a name cut to HOVER_NAME_CHARS, the
    # rank as a number, and the launch API in the template when every point shares it
    apis = {p["api"] for p in points}
    api = esc(next(iter(apis))) + " · " if len(apis) == 1 else ""
    for short, name, color in ((True, "kernel shorter than its launch call", COLORS["host_bound"]),
                               (False, "kernel longer than its launch call", COLORS["compute"])):
        sel = [p for p in points if bool(p["short"]) == short]
        if not sel:
            continue
        hover = [esc(_short(p["kernel"], HOVER_NAME_CHARS)) + ("" if api else f"<br>{esc(p['api'])} · ") for p in sel]
        ranks = [p["rank"] for p in sel]
        where = ("<br>" + api if api else "") + "rank %{customdata}"
        gpu = [_sig(max(p["gpu_dur_ns"] / 1e3, floor)) for p in sel]
        fig.add_trace(go.Scatter(
            x=[_sig(max(p["api_dur_ns"] / 1e3, floor)) for p in sel], y=gpu, mode="markers", name=name,
            legendgroup=name, marker=dict(color=color, size=5, opacity=0.6), text=hover, customdata=ranks,
            hovertemplate="%{text}" + where + "<br>launch call %{x:.2f} us, kernel %{y:.2f} us<extra></extra>"),
            row=1, col=1)
        # the later activities of a graph replay have no launch delay of their own (None): not drawn
        timed = [i for i, p in enumerate(sel) if p["launch_delay_ns"] is not None]
        fig.add_trace(go.Scatter(
            x=[_sig(max(sel[i]["launch_delay_ns"] / 1e3, floor)) for i in timed], y=[gpu[i] for i in timed],
            mode="markers", name=name, legendgroup=name, showlegend=False,
            marker=dict(color=color, size=5, opacity=0.6), text=[hover[i] for i in timed],
            customdata=[ranks[i] for i in timed],
            hovertemplate="%{text}" + where + "<br>launch delay %{x:.2f} us, kernel %{y:.2f} us<extra></extra>"),
            row=1, col=2)
    hi = max(max(p["api_dur_ns"], p["gpu_dur_ns"]) for p in points) / 1e3
    lo = max(min(min(p["api_dur_ns"], p["gpu_dur_ns"]) for p in points) / 1e3, floor)
    fig.add_trace(go.Scatter(x=[lo, max(hi, lo * 10)], y=[lo, max(hi, lo * 10)], mode="lines",
                             name="kernel = launch call", line=dict(color="#888", dash="dash", width=1),
                             hoverinfo="skip"), row=1, col=1)
    fig.update_xaxes(type="log", dtick=1, title_text="launch call duration (us)", row=1, col=1)
    fig.update_xaxes(type="log", dtick=1, title_text="launch delay: GPU start - call end (us)", row=1, col=2)
    fig.update_yaxes(type="log", dtick=1, title_text="kernel duration (us)", row=1, col=1)
    fig.update_yaxes(type="log", dtick=1, title_text="kernel duration (us)", row=1, col=2)
    sample = f"all {total:,} launches" if shown >= total else f"a sample of {shown:,} of {total:,} launches"
    return _layout(fig, f"{title} ({sample})", height=500, legend_below=True)


# ------------------------------------------------------------------------------------------ skew


def skew_heatmap_figure(report: Mapping[str, Any]) -> go.Figure | None:
    """Arrival lateness per rank (rows) and matched collective (columns); None with < 2 ranks."""
    skew = _charts(report).get("skew")
    if not skew or len(skew.get("ranks") or []) < 2 or not skew.get("columns"):
        return None
    z = [[None if v is None else v / 1e3 for v in row] for row in skew["lateness_ns"]]
    cols = [esc(c["label"]) for c in skew["columns"]]
    fig = go.Figure(go.Heatmap(
        z=z, x=cols, y=[f"rank {r}" for r in skew["ranks"]], colorscale="Reds", zmin=0,
        colorbar=dict(title=dict(text="late by (us)")), name="lateness",
        hovertemplate="%{y}, %{x}<br>arrived %{z:.1f} us after the first rank<extra></extra>", showscale=True,
    ))
    basis = {"aligned": "end-aligned starts (rank clocks look offset)",
             "corrected": "clock-corrected starts (rank clocks look offset)"}.get(skew.get("basis"), "raw start times")
    shown, total = len(skew["columns"]), int(skew.get("total", len(skew["columns"])))
    what = f"{total:,} collectives" if shown >= total else f"the {shown:,} most skewed of {total:,} collectives"
    fig.update_xaxes(title_text="collective (kind · step · occurrence), in time order", showticklabels=shown <= 40)
    fig.update_yaxes(title_text="rank", autorange="reversed")
    return _layout(fig, f"Collective arrival skew: lateness per rank, {what}, {basis}",
                   height=max(300, 120 + 28 * len(skew["ranks"])))


# -------------------------------------------------------------------------------------- timeline


_GPU_KINDS = {int(Kind.KERNEL): "kernel", int(Kind.MEMCPY): "memcpy", int(Kind.MEMSET): "memset"}
_CPU_KINDS = {int(Kind.CPU_OP): "cpu_op", int(Kind.PYTHON_FUNCTION): "python_function",
              int(Kind.ANNOTATION): "annotation", int(Kind.RUNTIME): "runtime"}
_SERIES = [  # (series key, legend name, colour)
    ("compute", "compute kernel", COLORS["compute"]),
    ("communication", "communication kernel", COLORS["communication"]),
    ("memcpy", "memcpy", COLORS["memory"]),
    ("memset", "memset", COLORS["memset"]),
    ("cpu_op", "CPU op", COLORS["cpu_op"]),
    ("python_function", "Python function", COLORS["python_function"]),
    ("annotation", "annotation", COLORS["annotation"]),
    ("runtime", "CUDA/HIP API call", COLORS["runtime"]),
]
#: CPU nesting levels drawn per thread (deeper ones are counted, not drawn)
_CPU_DEPTH = 6
#: CPU threads drawn (the busiest in the window)
_CPU_THREADS = 3


def _records(gaps: Any) -> list[dict[str, Any]]:
    if gaps is None:
        return []
    if hasattr(gaps, "to_dict"):
        return list(gaps.to_dict("records"))
    return [dict(g) for g in gaps]


def _depths(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of each interval (sorted by start, longer first) on one thread."""
    depth = np.zeros(len(start), dtype=np.int64)
    stack: list[int] = []
    for i in range(len(start)):
        while stack and end[stack[-1]] <= start[i]:
            stack.pop()
        depth[i] = len(stack)
        stack.append(i)
    return depth


def _merge(start: np.ndarray, end: np.ndarray, tolerance: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge sorted intervals separated by at most ``tolerance`` ns; returns starts, ends, counts."""
    if len(start) == 0:
        return start, end, np.zeros(0, dtype=np.int64)
    run_end = np.maximum.accumulate(end)
    new = np.ones(len(start), dtype=bool)
    new[1:] = start[1:] > run_end[:-1] + tolerance
    idx = np.flatnonzero(new)
    counts = np.diff(np.append(idx, len(start)))
    ends = np.maximum.reduceat(end, idx)
    return start[idx], ends, counts


class _WindowEvents(NamedTuple):
    """The GPU and CPU events of one rank that overlap a window, clipped to it (parallel arrays)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    kind: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    tid: np.ndarray
    collective: np.ndarray  # bool: the event carries collective metadata
    names: list[str]  # scrubbed, shortened, HTML-escaped


def _window_events(trace: Trace, rank: int, start_ns: int, end_ns: int) -> _WindowEvents:
    """The events of ``rank`` drawn on a timeline of ``[start_ns, end_ns)``, clipped to the window."""
    from traceview.redact import scrub_text  # local: redact imports are heavy

    ev_start = trace.column("start_ns")
    ev_end = ev_start + trace.column("dur_ns")
    kinds = trace.kind_codes()
    sel = (trace.column("rank") == rank) & (ev_end > start_ns) & (ev_start < end_ns)
    sel &= np.isin(kinds, np.asarray(list(_GPU_KINDS) + list(_CPU_KINDS), dtype=kinds.dtype))
    rows = np.flatnonzero(sel)
    name_codes = trace.column("name")[rows]
    name_col = trace.events.column("name")
    dictionary = (name_col.combine_chunks() if name_col.num_chunks != 1 else name_col.chunk(0)).dictionary
    # scrub and escape each distinct name once
    uniq_codes, inverse = np.unique(name_codes, return_inverse=True)
    uniq_names = [esc(_short(scrub_text(str(dictionary[int(c)].as_py() or "")), 120)) for c in uniq_codes]
    collective = trace.events.column("collective").take(rows).is_valid().to_numpy(zero_copy_only=False) \
        if len(rows) else np.zeros(0, dtype=bool)
    return _WindowEvents(
        start_ns=np.maximum(ev_start[rows], start_ns),
        end_ns=np.minimum(ev_end[rows], end_ns),
        kind=kinds[rows],
        device=trace.column("device")[rows],
        stream=trace.column("stream")[rows],
        tid=trace.column("tid")[rows],
        collective=collective,
        names=[uniq_names[i] for i in inverse],
    )


class _Lanes:
    """Events grouped by lane: lane key (sort key..., label) -> starts, ends, series and names.

    A lane exists once something was added to it, even nothing (it is still shown on the y axis).
    """

    def __init__(self, events: _WindowEvents) -> None:
        self.events = events
        self.by_key: dict[tuple, dict[str, list]] = {}

    def add(self, lane: tuple, series: str, idx: np.ndarray) -> None:
        ev = self.events
        d = self.by_key.setdefault(lane, {"start": [], "end": [], "series": [], "name": []})
        d["start"].append(ev.start_ns[idx])
        d["end"].append(ev.end_ns[idx])
        d["series"].extend([series] * len(idx))
        d["name"].extend(ev.names[i] for i in idx)

    def labels(self) -> list[str]:
        """Lane labels in display order."""
        return [key[-1] for key in sorted(self.by_key)]

    def items(self) -> list[tuple[tuple, np.ndarray, np.ndarray, list[str], list[str]]]:
        """(lane key, starts, ends, series, names) of each lane with events, in insertion order."""
        items = []
        for key, d in self.by_key.items():
            st_arr = np.concatenate(d["start"]) if d["start"] else np.zeros(0, dtype=np.int64)
            if len(st_arr) == 0:
                continue
            items.append((key, st_arr, np.concatenate(d["end"]), d["series"], d["name"]))
        return items


def _is_gpu(kind: np.ndarray) -> np.ndarray:
    return np.isin(kind, np.asarray(list(_GPU_KINDS), dtype=kind.dtype))


def _add_gpu_lanes(lanes: _Lanes) -> None:
    """One lane per device and stream: compute and communication kernels, memcpy, memset."""
    ev = lanes.events
    k, device, stream, names = ev.kind, ev.device, ev.stream, ev.names
    gpu = _is_gpu(k)
    for dev, st in sorted({(int(a), int(b)) for a, b in zip(device[gpu], stream[gpu])}):
        mine = np.flatnonzero(gpu & (device == dev) & (stream == st))
        lane = (0, dev, st, 0, f"GPU {dev} · stream {st}")
        is_comm = np.array(["nccl" in names[i].lower() or "rccl" in names[i].lower() for i in mine], dtype=bool)
        is_comm |= ev.collective[mine]
        kernel = k[mine] == int(Kind.KERNEL)
        lanes.add(lane, "compute", mine[kernel & ~is_comm])
        lanes.add(lane, "communication", mine[kernel & is_comm])
        lanes.add(lane, "memcpy", mine[k[mine] == int(Kind.MEMCPY)])
        lanes.add(lane, "memset", mine[k[mine] == int(Kind.MEMSET)])


class _CpuOmissions(NamedTuple):
    """CPU events a timeline leaves out (said in a note under the title)."""

    too_deep: int  # nested deeper than _CPU_DEPTH levels
    enclosing: int  # ranges covering the whole window
    enclosing_names: list[str]  # a couple of their names, shortest first
    threads: int  # less busy threads


def _add_cpu_lanes(lanes: _Lanes, start_ns: int, end_ns: int) -> _CpuOmissions:
    """The busiest CPU threads: a lane per nesting level of CPU ops, Python functions and annotations,
    and one for runtime API calls."""
    ev = lanes.events
    s, e, k, tid = ev.start_ns, ev.end_ns, ev.kind, ev.tid
    cpu = ~_is_gpu(k)
    busy_threads = []
    for t in np.unique(tid[cpu]):
        mine = cpu & (tid == t)
        busy_threads.append((-int((e[mine] - s[mine]).sum()), int(t)))
    too_deep = 0
    # ranges that enclose the whole window (the training loop, the step) say nothing here: leave them out
    enclosing = cpu & (s <= start_ns) & (e >= end_ns) & (k != int(Kind.RUNTIME))
    enclosing_names = sorted({ev.names[i] for i in np.flatnonzero(enclosing)}, key=len)[:2]
    for _, t in sorted(busy_threads)[:_CPU_THREADS]:
        mine = np.flatnonzero(cpu & (tid == t) & (k != int(Kind.RUNTIME)) & ~enclosing)
        if len(mine):
            order = np.lexsort((-(e[mine] - s[mine]), s[mine]))
            mine = mine[order]
            depth = _depths(s[mine], e[mine])
            too_deep += int((depth >= _CPU_DEPTH).sum())
            for d in range(min(_CPU_DEPTH, int(depth.max()) + 1)):
                at = mine[depth == d]
                for series in ("cpu_op", "python_function", "annotation"):
                    code = [c for c, n in _CPU_KINDS.items() if n == series][0]
                    lanes.add((1, t, 0, d, f"thread {t} · level {d}"), series, at[k[at] == code])
        api = np.flatnonzero(cpu & (tid == t) & (k == int(Kind.RUNTIME)))
        if len(api):
            lanes.add((1, t, 1, 0, f"thread {t} · API calls"), "runtime", api)
    return _CpuOmissions(too_deep=too_deep, enclosing=int(enclosing.sum()), enclosing_names=enclosing_names,
                         threads=max(0, len(busy_threads) - _CPU_THREADS))


def _longest_first(gap: Mapping[str, Any]) -> int:
    return int(gap["start_ns"]) - int(gap["end_ns"])


def _window_gaps(gaps: Any, start_ns: int, end_ns: int, rank: int,
                 max_shapes: int) -> tuple[list[dict[str, Any]], int]:
    """The gaps of ``rank`` overlapping the window, within their share of the shape budget (the
    longest), and how many were left out."""
    gap_records = [g for g in _records(gaps)
                   if int(g["end_ns"]) > start_ns and int(g["start_ns"]) < end_ns
                   and (g.get("rank") is None or int(g["rank"]) == rank)]
    # gaps get at most a fifth of the shape budget: the longest ones
    gap_budget = max(1, max_shapes // 5)
    hidden_gaps = max(0, len(gap_records) - gap_budget)
    if hidden_gaps:
        gap_records = sorted(gap_records, key=_longest_first)[:gap_budget]
    return gap_records, hidden_gaps


def _series_bars(lane_items: list, start_ns: int, tolerance: int,
                 aggregated: bool) -> tuple[dict[str, dict[str, list]], int]:
    """Bars per series (base and width in ms since the window start, lane, text), events of a
    series merged when closer than ``tolerance`` ns if ``aggregated``; and the bar count."""
    bars: dict[str, dict[str, list]] = {key: {"base": [], "x": [], "y": [], "text": []} for key, _, _ in _SERIES}
    merged_total = 0
    for key, st_arr, en_arr, series, nm in lane_items:
        label = key[-1]
        series_arr = np.asarray(series)
        for ser in dict.fromkeys(series):
            idx = np.flatnonzero(series_arr == ser)
            order = idx[np.argsort(st_arr[idx], kind="stable")]
            ms, me, counts = _merge(st_arr[order], en_arr[order], tolerance) if aggregated else (
                st_arr[order], en_arr[order], np.ones(len(order), dtype=np.int64))
            firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
            merged_total += len(ms)
            b = bars[ser]
            b["base"].extend(((ms - start_ns) / 1e6).tolist())
            b["x"].extend(((me - ms) / 1e6).tolist())
            b["y"].extend([label] * len(ms))
            b["text"].extend(
                nm[order[f]] if c == 1 else f"{c} events (first: {nm[order[f]]})"
                for f, c in zip(firsts, counts)
            )
    return bars, merged_total


def _bars_within_budget(lane_items: list, start_ns: int, end_ns: int,
                        budget: int) -> tuple[dict[str, dict[str, list]], int, bool]:
    """Bars per series, events merged with a growing tolerance until at most ``budget`` bars remain
    (or the tolerance is the whole window); the bar count; whether events were merged."""
    total = sum(len(x[1]) for x in lane_items)
    aggregated = total > budget
    tolerance = max(1, (end_ns - start_ns) // (4 * budget)) if aggregated else 0
    while True:
        bars, merged_total = _series_bars(lane_items, start_ns, tolerance, aggregated)
        if merged_total <= budget or tolerance >= (end_ns - start_ns):
            return bars, merged_total, aggregated
        tolerance *= 2


def _add_event_bars(fig: go.Figure, bars: dict[str, dict[str, list]], span_ns: int) -> None:
    """One horizontal bar trace per series with bars."""
    for key, name, color in _SERIES:
        b = bars[key]
        if not b["x"]:
            continue
        # names written on bars wide enough to hold them; every bar has its name in the hover
        wide = 0.06 * span_ns / 1e6
        labels = [t if w >= wide else "" for t, w in zip(b["text"], b["x"])]
        fig.add_trace(go.Bar(
            orientation="h", base=b["base"], x=b["x"], y=b["y"], name=name, marker_color=color,
            marker_line_width=0, customdata=b["text"], text=labels, textposition="inside",
            insidetextanchor="start", textfont=dict(size=10), constraintext="none", cliponaxis=True,
            hovertemplate="%{customdata}<br>start %{base:.4f} ms, %{x:.4f} ms<extra>" + name + "</extra>",
        ))


def _gap_lane(gap: Mapping[str, Any]) -> str:
    dev = int(gap.get("device", -1))
    return f"GPU {dev} · idle gaps" if dev >= 0 else "idle gaps"


def _add_gap_bars(fig: go.Figure, gap_records: list[dict[str, Any]], start_ns: int, end_ns: int) -> None:
    """The gaps as bars in their device's gap lane, one trace per cause."""
    from traceview.redact import scrub_text  # local: redact imports are heavy

    by_cause: dict[str, dict[str, list]] = {}
    for g in gap_records:
        cause = str(g.get("cause") or "unattributed")
        c = by_cause.setdefault(cause, {"base": [], "x": [], "y": [], "text": []})
        gs, ge = max(int(g["start_ns"]), start_ns), min(int(g["end_ns"]), end_ns)
        c["base"].append((gs - start_ns) / 1e6)
        c["x"].append((ge - gs) / 1e6)
        c["y"].append(_gap_lane(g))
        context = g.get("cpu_context")
        c["text"].append(f"{CAUSE_LABELS.get(cause, cause)} gap, {(int(g['end_ns']) - int(g['start_ns'])) / 1e3:.1f} us"
                         + (f"<br>CPU: {esc(_short(scrub_text(str(context))))}" if context else ""))
    for cause, c in by_cause.items():
        fig.add_trace(go.Bar(
            orientation="h", base=c["base"], x=c["x"], y=c["y"], name=f"gap: {CAUSE_LABELS.get(cause, cause)}",
            marker_color=COLORS.get(cause, COLORS["other"]), marker_line_width=0, text=c["text"],
            textposition="none", hovertemplate="%{text}<extra></extra>",
        ))


def _add_gap_bands(fig: go.Figure, gap_records: list[dict[str, Any]], start_ns: int, end_ns: int) -> None:
    """The longest gaps shaded across all lanes, labelled with their cause where the label fits."""
    labelled: list[tuple[float, float]] = []
    span = end_ns - start_ns
    for g in sorted(gap_records, key=_longest_first)[:MAX_GAP_LABELS]:
        cause = str(g.get("cause") or "unattributed")
        gs, ge = max(int(g["start_ns"]), start_ns), min(int(g["end_ns"]), end_ns)
        fig.add_vrect(x0=(gs - start_ns) / 1e6, x1=(ge - start_ns) / 1e6, fillcolor=COLORS.get(cause, COLORS["other"]),
                      opacity=0.15, line_width=0, layer="below")
        # a label where it fits: wide enough, and not on top of another label
        mid = (gs + ge) / 2
        room = max(ge - gs, 0.09 * span)
        if ge - gs >= 0.02 * span and all(abs(mid - m) > (room + r) / 2 for m, r in labelled):
            labelled.append((mid, room))
            gap_us = (int(g["end_ns"]) - int(g["start_ns"])) / 1e3
            fig.add_annotation(x=(mid - start_ns) / 1e6, y=1.0, yref="paper", yanchor="bottom",
                               text=f"{CAUSE_LABELS.get(cause, cause)} {gap_us:,.0f} us",
                               showarrow=False, font=dict(size=11))


def _timeline_notes(*, events: int, bars: int, aggregated: bool, max_shapes: int, hidden_gaps: int,
                    cpu: _CpuOmissions) -> list[str]:
    """What the timeline merged or left out, one phrase each."""
    notes = []
    if aggregated:
        notes.append(f"{events:,} events merged into {bars:,} blocks to stay under {max_shapes:,} shapes")
    if hidden_gaps:
        notes.append(f"{hidden_gaps:,} shortest idle gaps not drawn")
    if cpu.enclosing:
        notes.append(f"{cpu.enclosing} CPU ranges spanning the whole window not drawn (e.g. "
                     + ", ".join(cpu.enclosing_names) + ")")
    if cpu.too_deep:
        notes.append(f"{cpu.too_deep:,} CPU events nested deeper than {_CPU_DEPTH} levels not drawn")
    if cpu.threads:
        notes.append(f"{cpu.threads} less busy CPU threads not drawn")
    return notes


def _lay_out_timeline(fig: go.Figure, title: str, lanes_shown: list[str], notes: list[str], span_ns: int) -> None:
    """Axes (lanes top to bottom), the notes under the title, and a height that fits the lanes."""
    fig.update_yaxes(title_text="GPU stream / CPU thread", categoryorder="array",
                     categoryarray=list(reversed(lanes_shown)), type="category")
    fig.update_xaxes(title_text=f"time since window start (ms); window = {span_ns / 1e6:.3f} ms",
                     range=[0, span_ns / 1e6])
    fig.update_layout(barmode="overlay", bargap=0.25)
    if notes:
        fig.add_annotation(text="; ".join(notes), xref="paper", yref="paper", x=1, y=1.0, yanchor="bottom",
                           yshift=18, showarrow=False, xanchor="right", font=dict(size=10, color="#666"))
    height = max(400, 230 + 26 * len(lanes_shown))
    _layout(fig, title, height=height, legend_below=True)
    fig.update_layout(legend=dict(y=-110 / (height - 210)), margin=dict(t=100))


def timeline_figure(
    trace: Trace,
    start_ns: int,
    end_ns: int,
    *,
    rank: int | None = None,
    gaps: Any = None,
    max_shapes: int = MAX_SHAPES,
    title: str | None = None,
) -> go.Figure:
    """The events of one rank (the first by default) in ``[start_ns, end_ns)`` as lanes.

    GPU lanes: one per device and stream (kernels split into compute and communication, memcpy,
    memset). CPU lanes: the busiest threads, one lane per nesting level of CPU ops, Python
    functions and annotations, and one for runtime API calls. Gaps (``gaps`` records) get a bar
    in an "idle gaps" lane per device and, for the longest, a shaded band labelled with the cause.
    """
    start_ns, end_ns = int(start_ns), int(end_ns)
    if rank is None:
        rank = trace.rank_ids[0] if trace.rank_ids else 0
    fig_title = title or f"Timeline of rank {rank}"
    if end_ns <= start_ns or trace.num_events == 0:
        return _empty(fig_title, "Nothing to show in this window.")
    lanes = _Lanes(_window_events(trace, rank, start_ns, end_ns))
    _add_gpu_lanes(lanes)
    cpu_omissions = _add_cpu_lanes(lanes, start_ns, end_ns)
    gap_records, hidden_gaps = _window_gaps(gaps, start_ns, end_ns, rank, max_shapes)

    # budget: merge events per lane until the bar count fits
    lane_items = lanes.items()
    bars, merged_total, aggregated = _bars_within_budget(
        lane_items, start_ns, end_ns, max(100, max_shapes - len(gap_records)))

    fig = go.Figure()
    _add_event_bars(fig, bars, end_ns - start_ns)
    _add_gap_bars(fig, gap_records, start_ns, end_ns)
    _add_gap_bands(fig, gap_records, start_ns, end_ns)
    gap_lanes = [_gap_lane({"device": dev}) for dev in sorted({int(g.get("device", -1)) for g in gap_records})]
    notes = _timeline_notes(events=sum(len(x[1]) for x in lane_items), bars=merged_total, aggregated=aggregated,
                            max_shapes=max_shapes, hidden_gaps=hidden_gaps, cpu=cpu_omissions)
    _lay_out_timeline(fig, fig_title, gap_lanes + lanes.labels(), notes, end_ns - start_ns)
    return fig


def worst_gap_timeline(trace: Trace, report: Mapping[str, Any], *, max_shapes: int = MAX_SHAPES) -> go.Figure | None:
    """The timeline excerpt the report chose (around its worst gaps); None when there are no gaps."""
    window = _charts(report).get("timeline")
    if not window:
        return None
    gap = window.get("worst_gap") or {}
    cause = CAUSE_LABELS.get(str(gap.get("cause")), str(gap.get("cause")))
    title = (f"Timeline around the largest idle gap: rank {window['rank']}, GPU {window['device']}, "
             f"{cause} gap of {int(gap.get('dur_ns', 0)) / 1e3:,.1f} us")
    return timeline_figure(trace, window["start_ns"], window["end_ns"], rank=window["rank"], gaps=window.get("gaps"),
                           max_shapes=max_shapes, title=title)


# ------------------------------------------------------------------------------------------- all


def report_figures(report: Mapping[str, Any], trace: Trace | None = None) -> dict[str, go.Figure]:
    """Figures that have data, by name, in display order (the timeline only with a trace)."""
    out: dict[str, go.Figure] = {}
    charts = _charts(report)
    if charts.get("breakdown"):
        out["breakdown"] = breakdown_figure(report)
    if any(r.get("communication_ns") for r in charts.get("breakdown") or []):
        out["overlap"] = overlap_figure(report)
    if (charts.get("gap_histogram") or {}).get("total_gaps"):
        out["gap_histogram"] = gap_histogram_figure(report)
    if trace is not None:
        tl = worst_gap_timeline(trace, report)
        if tl is not None:
            out["timeline"] = tl
    if (charts.get("launches") or {}).get("points"):
        out["launch_scatter"] = launch_scatter_figure(report)
    heat = skew_heatmap_figure(report)
    if heat is not None:
        out["skew_heatmap"] = heat
    return out


__all__: Sequence[str] = (
    "MAX_SHAPES",
    "breakdown_figure",
    "overlap_figure",
    "gap_histogram_figure",
    "timeline_figure",
    "worst_gap_timeline",
    "launch_scatter_figure",
    "skew_heatmap_figure",
    "report_figures",
)
