"""The timeline's "measured bound-by" colouring: each kernel coloured by the bound-by label of the
Nsight Compute record it was matched to (compute, memory, latency: the ``measured`` analysis's
``kernels`` table, docs/metrics.md "Measured efficiency"), every other kernel grey.

Which record measures which kernel is the measured analysis's own join (``measured.join``, the
rules of ``analyses/ncu_join.py``), run once per run on the run's trace with the run's options, as
the timeline's classes come from the classify analysis; the label itself is read from the report's
table (its ``ncu_record`` and ``rank`` columns), never recomputed here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import pandas as pd

from .timeline import BOUND_SERIES, SERIES_INDEX, LaneIndex

#: the analysis and table the colouring reads
ANALYSIS = "measured"
#: the timeline's colour choice (state key ``color``)
CONTROL_ID = "tl-color"
CLASS, BOUND = "class", "bound"
OPTIONS = {CLASS: "class", BOUND: "measured bound-by (ncu)"}
#: joins kept (one per run the app holds)
CACHE_SIZE = 8

_LOCK = threading.Lock()
_JOINS: "OrderedDict[int, tuple[LaneIndex, np.ndarray, np.ndarray, np.ndarray]]" = OrderedDict()


def _joined(index: LaneIndex, trace: Any, options: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(timeline positions, ranks, ncu records) of the trace's kernels the measured analysis's join
    matched (empty without ``--ncu``); cached per index."""
    with _LOCK:
        hit = _JOINS.get(id(index))
        if hit is not None and hit[0] is index:
            _JOINS.move_to_end(id(index))
            return hit[1], hit[2], hit[3]
    from traceview.analyses.steps import activity
    from traceview.context import AnalysisContext

    empty = np.zeros(0, dtype=np.int64)
    pos, rank, record = empty, empty, empty
    ctx = AnalysisContext(trace, options)
    joined = ctx.input("measured.join") if options is not None and getattr(options, "ncu", None) else None
    if joined is not None:
        _tk, j = joined
        act = activity(ctx)
        rows = act.row[j.entry].astype(np.int64)
        inverse = np.full(index.num_rows, -1, dtype=np.int64)
        inverse[index.row] = np.arange(index.row.size, dtype=np.int64)
        pos = inverse[rows]
        keep = pos >= 0
        pos, rank, record = pos[keep], act.rank[j.entry][keep].astype(np.int64), j.record[keep].astype(np.int64)
    with _LOCK:
        _JOINS[id(index)] = (index, pos, rank, record)
        while len(_JOINS) > CACHE_SIZE:
            _JOINS.popitem(last=False)
    return pos, rank, record


def available(kernels: pd.DataFrame | None) -> bool:
    """Whether the report has measured kernels to colour by."""
    return kernels is not None and len(kernels) > 0 and {"rank", "ncu_record", "bound_by"} <= set(kernels.columns)


def bound_series(index: LaneIndex, trace: Any, options: Any, kernels: pd.DataFrame | None) -> np.ndarray | None:
    """The series of every timeline position with kernels recoloured: by their record's bound-by
    where measured, grey where not (None when the report has no measured kernels)."""
    if not available(kernels):
        return None
    assert kernels is not None
    series = index.series.copy()
    is_kernel = np.isin(series, [SERIES_INDEX["compute"], SERIES_INDEX["communication"]])
    series[is_kernel] = SERIES_INDEX[BOUND_SERIES["unmeasured"]]
    pos, rank, record = _joined(index, trace, options)
    if not pos.size:
        return series
    labels = pd.Series(kernels["bound_by"].astype(str).to_numpy(),
                       index=pd.MultiIndex.from_arrays([pd.to_numeric(kernels["rank"]).astype(np.int64),
                                                        pd.to_numeric(kernels["ncu_record"]).astype(np.int64)]))
    labels = labels[~labels.index.duplicated()]
    got = labels.reindex(pd.MultiIndex.from_arrays([rank, record])).to_numpy(object)
    for label, key in BOUND_SERIES.items():
        if label != "unmeasured":
            series[pos[got == label]] = SERIES_INDEX[key]
    return series


def control(value: str, can_colour: bool) -> Any:
    """The timeline's colour choice (the measured option disabled, with why, without measurements)."""
    from dash import dcc, html

    hint = ("kernels coloured by what Nsight Compute measured them bound by (compute, memory, latency); grey: not "
            "measured" if can_colour else "no Nsight Compute measurements in this report (analyse with --ncu)")
    radio = dcc.RadioItems(id=CONTROL_ID, options=[{"label": f" {label}", "value": key,
                                                    "disabled": key == BOUND and not can_colour}
                                                   for key, label in OPTIONS.items()],
                           value=value if can_colour else CLASS, inline=True,
                           inputStyle={"marginLeft": "10px"}, style={"fontSize": "13px"})
    return html.Span([html.Span("colour kernels by:", style={"color": "#555", "marginLeft": "16px"}), radio],
                     title=hint, style={"display": "inline-flex", "alignItems": "center"})
