"""Step budget: where each step's time goes on each GPU, from two other analyses' results.

One row per rank, device and step: the step's CPU range (``step_ns``), the GPU's window inside it
(first start .. last end of the step's activity, ``window_ns``), its busy and idle time, and the
idle time split by cause (``host_bound_ns``, ``sync_bound_ns``, ``launch_latency_ns``,
``unattributed_ns``: the idle-gap analysis's causes, whose sum is ``idle_ns``), with the largest
cause named (``top_idle_cause``) and the share of the step the GPU was busy (``busy_share``).

It computes nothing from the trace itself: it joins the temporal breakdown (``temporal``:
``breakdown`` and ``steps``) and the idle time by cause (``idle_gaps``: ``by_cause``), which it
declares in ``requires``; the pipeline runs it after them, once per batch of ranks. A trace without
steps gives an empty table. It is also the example of an analysis built on other analyses
(docs/architecture.md, "Adding an analysis").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult
from traceview.registry import AnalysisSpec, TableSpec

NAME = "step_budget"

KEYS = ["rank", "device", "step"]
COLUMNS = [*KEYS, "step_ns", "window_ns", "busy_ns", "idle_ns", "busy_share", "top_idle_cause"]


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    temporal, idle = ctx.result("temporal"), ctx.result("idle_gaps")
    breakdown, steps = temporal.tables["breakdown"], temporal.tables["steps"]
    by_cause = idle.tables["by_cause"]
    causes = [str(c) for c in pd.unique(by_cause["cause"].astype(str))] if len(by_cause) else []
    cause_columns = [f"{c}_ns" for c in causes]
    per_step = breakdown[breakdown["step"].notna()]
    if per_step.empty or steps.empty:
        empty = pd.DataFrame({c: pd.Series(dtype=object if c == "top_idle_cause" else "int64")
                              for c in COLUMNS + cause_columns})
        return AnalysisResult(name=NAME, tables={"budget": empty})
    frame = per_step[KEYS + ["window_ns", "busy_ns", "idle_ns"]].reset_index(drop=True)
    frame["step"] = frame["step"].astype("int64")
    durations = steps.assign(step_ns=steps["end_ns"] - steps["start_ns"])[["rank", "step", "step_ns"]]
    frame = frame.merge(durations, on=["rank", "step"], how="left")
    if cause_columns:
        wide = (by_cause[by_cause["step"].notna()].assign(step=lambda f: f["step"].astype("int64"),
                                                          cause=lambda f: f["cause"].astype(str) + "_ns")
                .pivot_table(index=KEYS, columns="cause", values="idle_ns", aggfunc="sum", fill_value=0)
                .reindex(columns=cause_columns, fill_value=0).reset_index())
        frame = frame.merge(wide, on=KEYS, how="left")
        frame[cause_columns] = frame[cause_columns].fillna(0).astype(np.int64)
        values = frame[cause_columns].to_numpy(np.int64)
        top = np.asarray(causes, dtype=object)[values.argmax(axis=1)]
        frame["top_idle_cause"] = np.where(values.max(axis=1) > 0, top, None)
    else:
        frame["top_idle_cause"] = None
    step_ns = frame["step_ns"].to_numpy(np.float64)
    frame["busy_share"] = np.where(step_ns > 0, frame["busy_ns"].to_numpy(np.float64) / np.maximum(step_ns, 1), np.nan)
    frame["step_ns"] = frame["step_ns"].fillna(0).astype(np.int64)
    table = frame[COLUMNS + cause_columns].sort_values(KEYS, kind="stable").reset_index(drop=True)
    return AnalysisResult(name=NAME, tables={"budget": table})


SPEC = AnalysisSpec(
    name=NAME,
    title="Step budget",
    run=analyze,
    requires=("temporal", "idle_gaps"),
    tables=(TableSpec("budget", "Each step on each GPU: busy, idle by cause (step time = its CPU range)"),),
    order=25,
    headline_table="budget",
)
