"""The roofline chart of the Efficiency page, drawn from the efficiency analysis's ``op_types`` table
as the report holds it (docs/metrics.md, "Efficiency"): nothing here computes a metric.

x = arithmetic intensity (the table's ``intensity``, FLOP/byte), y = achieved TFLOP/s
(``achieved_tflops``), both log. One point per op type (rank, device, name, dtype, unit), its area
proportional to its GPU time. Each roof the table reports (``peak_tflops``, ``bandwidth_gbs``) is
drawn as the memory roof ``bandwidth x intensity`` up to the ridge point (``peak / bandwidth``),
then flat at the peak. Op types without FLOPs (copies, gathers: intensity 0) cannot sit on a log
axis; :func:`plotted` says which rows are drawn.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from traceview.secrets import scrub_text
from traceview.units import fmt_ns, fmt_share

#: marker diameters (px) of the shortest and the longest op type
MIN_MARKER_PX, MAX_MARKER_PX = 7.0, 46.0
#: one colour per roof (and its points); points without a roof are grey
ROOF_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#B279A2", "#E45756", "#72B7B2", "#9D755D", "#EECA3B")
NO_ROOF_COLOR = "#8C8C8C"
#: the x range reaches this factor beyond the outermost point or ridge
X_MARGIN = 4.0
#: op names are cut to this length in the hover
NAME_WIDTH = 80


@dataclass(frozen=True)
class Roof:
    """One roof of the chart: its peak (TFLOP/s), bandwidth (GB/s) and what it bounds."""

    peak_tflops: float
    bandwidth_gbs: float
    label: str

    @property
    def ridge(self) -> float:
        """The ridge point (FLOP/byte): where the memory roof meets the compute roof."""
        return self.peak_tflops * 1e3 / self.bandwidth_gbs


def plotted(op_types: pd.DataFrame) -> pd.DataFrame:
    """The op types the chart can place: FLOPs, bytes and GPU time all above zero."""
    if op_types is None or op_types.empty:
        return pd.DataFrame()
    keep = (pd.to_numeric(op_types["flops"], errors="coerce") > 0) & (
        pd.to_numeric(op_types["bytes"], errors="coerce") > 0) & (
        pd.to_numeric(op_types["gpu_ns"], errors="coerce") > 0)
    return op_types[keep.to_numpy(bool)].reset_index(drop=True)


def _roof_key(frame: pd.DataFrame) -> pd.Series:
    """Per row: "peak|bandwidth" of its roof, or "" when it has none (NaN figures)."""
    missing = pd.Series(np.nan, index=frame.index)
    peak = pd.to_numeric(frame["peak_tflops"] if "peak_tflops" in frame else missing, errors="coerce")
    bandwidth = pd.to_numeric(frame["bandwidth_gbs"] if "bandwidth_gbs" in frame else missing, errors="coerce")
    has = peak.notna() & bandwidth.notna() & (peak > 0) & (bandwidth > 0)
    key = peak.map("{:.6g}".format) + "|" + bandwidth.map("{:.6g}".format)
    return key.where(has, "")


def roofs(points: pd.DataFrame) -> list[tuple[str, Roof]]:
    """The distinct roofs of the plotted op types (key, roof), labelled by the dtypes and units they
    bound, in order of first appearance."""
    if points.empty:
        return []
    keyed = points.assign(_roof=_roof_key(points))
    out = []
    for key, group in keyed[keyed["_roof"] != ""].groupby("_roof", sort=False):
        what = ", ".join(dict.fromkeys(f"{d} {u}" for d, u in zip(group["dtype"], group["unit"])))
        peak, bandwidth = float(group["peak_tflops"].iloc[0]), float(group["bandwidth_gbs"].iloc[0])
        out.append((str(key), Roof(peak, bandwidth, f"{what} roof: {peak:.4g} TFLOP/s, {bandwidth:.4g} GB/s")))
    return out


def _sizes(gpu_ns: np.ndarray) -> np.ndarray:
    """Marker diameters with the area proportional to GPU time."""
    top = float(gpu_ns.max()) if gpu_ns.size else 1.0
    return MIN_MARKER_PX + (MAX_MARKER_PX - MIN_MARKER_PX) * np.sqrt(gpu_ns / max(top, 1.0))


def _hover(frame: pd.DataFrame) -> list[list[str]]:
    """Per point: name, dtype and unit, time, efficiency, where, bound (HTML-escaped, scrubbed)."""
    out = []
    for row in frame.itertuples(index=False):
        name = scrub_text(str(row.name))
        name = name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"
        eff = row.efficiency
        if eff is None or (isinstance(eff, float) and math.isnan(eff)):
            eff_text = "none (faster than its roof: see the warnings)" if bool(row.over_roofline) else "no roof"
        else:
            eff_text = fmt_share(float(eff))
        bound = f", {row.bound}-bound" if isinstance(row.bound, str) and row.bound else ""
        out.append([html.escape(name), html.escape(f"{row.dtype} on {row.unit} units"),
                    f"{fmt_ns(int(row.gpu_ns))} in {int(row.calls):,} call(s)", eff_text + bound,
                    f"rank {int(row.rank)} GPU {int(row.device)}"])
    return out


_HOVER = ("<b>%{customdata[0]}</b><br>%{customdata[1]}<br>GPU time %{customdata[2]}<br>"
          "efficiency %{customdata[3]}<br>%{y:.4g} TFLOP/s at %{x:.4g} FLOP/byte<br>%{customdata[4]}<extra></extra>")


def _x_range(points: pd.DataFrame, drawn: list[Roof]) -> tuple[float, float]:
    """The x extent (FLOP/byte): every point and ridge, with a margin either side."""
    xs = [float(x) for x in points["intensity"]] + [r.ridge for r in drawn]
    return min(xs) / X_MARGIN, max(xs) * X_MARGIN


def roofline_figure(op_types: pd.DataFrame) -> Any:
    """The chart (a plotly Figure), or None when no op type can be placed on it."""
    import plotly.graph_objects as go

    points = plotted(op_types)
    if points.empty:
        return None
    points = points.assign(_size=_sizes(points["gpu_ns"].to_numpy(np.float64)))  # one scale for all
    found = roofs(points)
    x0, x1 = _x_range(points, [r for _, r in found])
    fig = go.Figure()
    keys = _roof_key(points)
    for i, (key, roof) in enumerate(found):
        color = ROOF_COLORS[i % len(ROOF_COLORS)]
        xs = [x0, roof.ridge, x1]
        ys = [roof.bandwidth_gbs * x0 / 1e3, roof.peak_tflops, roof.peak_tflops]  # GB/s x FLOP/B = GFLOP/s
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=roof.label, line={"color": color, "width": 2},
                                 meta="roof", hovertemplate=f"{html.escape(roof.label)}<br>ridge at "
                                                            f"{roof.ridge:.4g} FLOP/byte<extra></extra>"))
        _add_points(fig, points[(keys == key).to_numpy()], color, f"op types on the {roof.label.split(' roof')[0]} "
                                                                   "roof")
    unroofed = points[(keys == "").to_numpy()]
    if len(unroofed):
        _add_points(fig, unroofed, NO_ROOF_COLOR, "op types without a roof")
    fig.update_layout(template="plotly_white", height=520, margin=dict(l=70, r=20, t=30, b=60),
                      legend=dict(orientation="h", y=-0.16, yanchor="top"),
                      xaxis_title="arithmetic intensity (FLOP/byte)", yaxis_title="achieved TFLOP/s")
    fig.update_xaxes(type="log", range=[math.log10(x0), math.log10(x1)])
    fig.update_yaxes(type="log")
    return fig


def _add_points(fig: Any, frame: pd.DataFrame, color: str, name: str) -> None:
    import plotly.graph_objects as go

    fig.add_trace(go.Scatter(
        x=frame["intensity"].astype(float).tolist(), y=frame["achieved_tflops"].astype(float).tolist(),
        mode="markers", name=name, meta="points", customdata=_hover(frame), hovertemplate=_HOVER,
        marker={"size": frame["_size"].tolist(), "color": color, "opacity": 0.75,
                "line": {"width": 1, "color": "white"}}))
