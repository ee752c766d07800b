"""The History page (``traceview app --db FILE``, or the default history database when present):
the step time and chosen kernels over the runs of a ``traceview history`` database, the regressions
``history check`` finds marked at the run where they started, and a click on a run opening it in the
other pages when its traces are among the app's runs.

The page reads the database read-only on every draw (a ``history add`` in another process shows up
on the next draw) and shows what :mod:`traceview.history` computes; it computes no figure itself.
The browser sends kernel names chosen from the offered list and run ids read from the chart; both
are checked against the database before use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import dash
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html

from traceview.errors import TraceviewError
from traceview.history import DEFAULT_DB, DetectOptions, Selection, check, matrix, open_history, runs
from traceview.history.query import VALUE_COLUMN
from traceview.history.store import series_names
from traceview.loading import find_trace_files
from traceview.units import fmt_ns

from .components import frame_table, graph, message, section
from .pages import Page
from .runs import RunStore
from .views import AppController

HISTORY_PAGE = Page("/history", "History")
#: kernels offered in the chooser (the newest run's largest) and drawn by default
OFFERED_KERNELS = 200
DEFAULT_KERNELS = 5


def history_db(explicit: Path | None) -> Path | None:
    """The database the app shows: ``--db`` when given (one line, exit 2, when it is not a file), else
    the default one when it exists."""
    if explicit is not None:
        if not explicit.is_file():
            raise TraceviewError(f"{explicit}: no history database here; make one with `traceview history add PATH "
                                 f"--db {explicit}`")
        return explicit
    return DEFAULT_DB if DEFAULT_DB.is_file() else None


#: at most this many of the newest stored runs are offered as app runs (each is scanned at start)
REACHABLE_RUNS = 100


def reachable_paths(db: Path) -> list[str]:
    """The trace paths of the newest stored runs (up to :data:`REACHABLE_RUNS`) that exist on this
    machine, for the app to offer them as runs."""
    try:
        con = open_history(db, read_only=True)
    except TraceviewError:
        return []
    try:
        frame = runs(con, Selection(last=REACHABLE_RUNS))
    finally:
        con.close()
    out: list[str] = []
    for text in frame["paths"]:
        paths = json.loads(text or "[]")
        if paths and all(Path(p).exists() for p in paths):
            out.extend(p for p in paths if p not in out)
    return out


@dataclass
class HistorySource:
    """The database and which of its runs are also app runs (history run id -> app run id)."""

    db: Path
    app_runs: dict[int, int] = field(default_factory=dict)


def link_runs(db: Path, store: RunStore) -> HistorySource:
    """Match the stored runs with the app's runs by their trace files."""
    source = HistorySource(db)
    by_files = {frozenset(str(f.resolve()) for f in spec.files): spec.id for spec in store.runs}
    try:
        con = open_history(db, read_only=True)
    except TraceviewError:
        return source
    try:
        frame = runs(con)
    finally:
        con.close()
    for run_id, text in zip(frame["run_id"], frame["paths"]):
        paths = json.loads(text or "[]")
        if not paths or not all(Path(p).exists() for p in paths):
            continue
        files = frozenset(str(f.resolve()) for f in find_trace_files(paths))
        if files in by_files:
            source.app_runs[int(run_id)] = by_files[files]
    return source


def history_data(source: HistorySource, kernels: Sequence[str] | None) -> dict[str, Any]:
    """Runs, offered kernels, the chosen series' values and the check's regressions."""
    con = open_history(source.db, read_only=True)
    try:
        frame = runs(con)
        names = series_names(con)
        ids = frame["run_id"].tolist()
        newest, newest_ids = matrix(con, ids[-1:], VALUE_COLUMN)
        sizes = pd.Series(newest[0], index=newest_ids)
        kernel_names = names[names["kind"] == "kernel"].assign(v=lambda d: sizes.reindex(d["series_id"]).to_numpy())
        try:
            regressions = check(con, options=DetectOptions(), any_gpu=False).regressions
        except TraceviewError:
            regressions = pd.DataFrame()
        # the regressed kernels first (what the page is for), then the largest of the newest run
        regressed = [] if regressions.empty else \
            regressions.loc[regressions["kind"] == "kernel", "key"].drop_duplicates().tolist()
        largest = kernel_names.nlargest(OFFERED_KERNELS, "v")["key"].tolist()
        offered = regressed + [k for k in largest if k not in set(regressed)]
        default = (regressed + [k for k in largest if k not in set(regressed)])[:max(DEFAULT_KERNELS, len(regressed))]
        chosen = [k for k in (kernels if kernels is not None else default) if k in set(offered)]
        shown = names[(names["kind"] == "step") | names["key"].isin(chosen) & (names["kind"] == "kernel")]
        values, sids = matrix(con, ids, VALUE_COLUMN, shown["series_id"].tolist())
    finally:
        con.close()
    key_of = dict(zip(shown["series_id"], shown["key"]))
    return {"runs": frame, "offered": offered, "chosen": chosen, "values": values,
            "keys": [key_of[int(s)] for s in sids], "regressions": regressions}


def figure(data: dict[str, Any]) -> go.Figure:
    """Time per GPU and step of each shown series over the runs; regressions marked at their start."""
    frame = data["runs"]
    fig = go.Figure()
    x = frame["run_id"].to_numpy()
    text = [f"run {r}: {n}" for r, n in zip(frame["run_id"], frame["name"])]
    reg = data["regressions"]
    for j, key in enumerate(data["keys"]):
        us = data["values"][:, j] / 1e3
        start = None
        if len(reg) and key in set(reg["key"]):
            start = int(reg.loc[reg["key"] == key, "start_run"].iloc[0])
        y = change_pct(us, x, start)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=key[:60], text=text, customdata=x,
                                 meta=key[:60], hovertemplate="%{text}<br>%{y:+.1f}% (%{hovertext})<extra>%{meta}"
                                 "</extra>", hovertext=[f"{v:,.1f} us" for v in us]))
        if len(reg) and key in set(reg["key"]):
            row = reg[reg["key"] == key].iloc[0]
            at = np.flatnonzero(x == row["start_run"])
            if len(at):
                fig.add_trace(go.Scatter(
                    x=[x[at[0]]], y=[y[at[0]]], mode="markers", showlegend=False, customdata=[x[at[0]]],
                    marker={"symbol": "triangle-up", "size": 14, "color": "#C0392B"},
                    hovertemplate=f"regression starts here: {key[:60]} "
                                  f"{'appeared' if row['status'] == 'appeared' else f'+{row.delta_pct:.1f}%'}"
                                  "<extra></extra>"))
    fig.update_layout(height=460, margin={"l": 60, "r": 20, "t": 30, "b": 40}, xaxis_title="run",
                      yaxis_title="change vs the series' baseline (%)", legend={"orientation": "h", "y": -0.2},
                      clickmode="event")
    return fig


def change_pct(values: np.ndarray, runs: np.ndarray, start_run: int | None) -> np.ndarray:
    """Each run's value as a change (%) from the series' baseline: the median of its runs before
    the regression's start run (of all its runs when it has none), over runs where it ran (> 0). On
    one axis a 100 us kernel's 8% step is as visible as the 5 ms step time's; the hover keeps the
    absolute figure."""
    ran = values > 0
    before = ran & (runs < start_run) if start_run is not None else ran
    pool = values[before] if before.any() else values[ran]
    if not len(pool):
        return np.full(len(values), np.nan)
    base = float(np.median(pool))
    return np.where(ran, (values / base - 1.0) * 100.0, np.nan)


def _regression_table(reg: pd.DataFrame) -> Any:
    if reg.empty:
        return message("history check: nothing regressed beyond noise and 5% on the newest run's GPU model.")
    rows = pd.DataFrame({
        "kind": reg["kind"], "name": reg["key"], "status": reg["status"],
        "since run": [f"{r} ({n})" for r, n in zip(reg["start_run"], reg["start_name"])],
        "baseline": [fmt_ns(v) for v in reg["baseline_ns"]], "now": [fmt_ns(v) for v in reg["current_ns"]],
        "change": ["new" if np.isinf(p) else f"+{p:.1f}%" for p in reg["delta_pct"]]})
    return frame_table(rows, "hist-regressions", page_size=10, sort=False)


def page(source: HistorySource, kernels: Sequence[str] | None = None) -> list[Any]:
    """The History page's body."""
    try:
        data = history_data(source, kernels)
    except TraceviewError as exc:
        return [message(str(exc), "error")]
    if data["runs"].empty:
        return [message(f"{source.db}: no runs yet; add some with `traceview history add PATH --db {source.db}`")]
    chooser = dcc.Dropdown(id="hist-kernels", options=[{"label": k[:90], "value": k} for k in data["offered"]],
                           value=data["chosen"], multi=True, placeholder="kernels to draw")
    note = (f"{len(data['runs'])} run(s) in {source.db}; time per GPU and step as the change from each series' "
            "baseline (its median before a regression; hover for the time). Red triangles: where a regression "
            "found by `traceview history check` starts. Click a point to open that run"
            + ("" if source.app_runs else " (none of the stored runs' traces are among this app's runs)") + ".")
    return [section("Step time and kernels over runs", chooser, graph(figure(data), "hist-graph"),
                    html.Div(id="hist-click-msg", style={"fontSize": "13px", "color": "#555"}), note=note),
            section("Regressions (history check)", _regression_table(data["regressions"]))]


def open_clicked(source: HistorySource, click: Any) -> tuple[Any, Any, str]:
    """(app run id, page path, message) for a click on a point of the History chart."""
    try:
        run_id = int(click["points"][0]["customdata"])
    except (TypeError, KeyError, IndexError, ValueError):
        return dash.no_update, dash.no_update, ""
    app_run = source.app_runs.get(run_id)
    if app_run is None:
        return dash.no_update, dash.no_update, f"run {run_id}: its traces are not among this app's runs"
    return app_run, "/overview", ""


class HistoryController(AppController):
    """The app's controller with the History page added to its pages."""

    def __init__(self, store: RunStore, source: HistorySource) -> None:
        super().__init__(store)
        self.history = source
        self.pages.append(HISTORY_PAGE)

    def page(self, pathname: Any) -> Page:
        # a database alone (no run opened): every path is the History page
        return HISTORY_PAGE if pathname == HISTORY_PAGE.path or not self.store.runs else super().page(pathname)

    def run_changed(self, run: Any) -> tuple:
        """As the app's, but with no run to open (a database alone) the header says so, not an error."""
        if not self.store.runs:
            return ([], None, 0, 1, [0, 1], {}, True, None, None,
                    f"history only: {len(self.history.app_runs)} stored run(s) open here; the History page")
        return super().run_changed(run)

    def render_page(self, pathname: str | None, search: str | None, run: Any, ranks: Any = None, steps: Any = None,
                    t0: Any = None, t1: Any = None) -> tuple[Any, Any]:
        if pathname == HISTORY_PAGE.path or not self.store.runs:
            return [html.H2(HISTORY_PAGE.label, style={"margin": "6px 0 10px 0"}), *page(self.history)], \
                f"history: {self.history.db}"
        return super().render_page(pathname, search, run, ranks, steps, t0, t1)


def add_callbacks(app: dash.Dash, controller: HistoryController) -> None:
    """Kernel choice redraws the chart; a click on a run opens it."""
    @app.callback(Output("hist-graph", "figure"), Input("hist-kernels", "value"), prevent_initial_call=True)
    def _kernels(kernels: Any) -> Any:
        chosen = [str(k) for k in kernels] if isinstance(kernels, list) else []
        return figure(history_data(controller.history, chosen))

    @app.callback(Output("run", "value"), Output("url", "pathname", allow_duplicate=True),
                  Output("hist-click-msg", "children"), Input("hist-graph", "clickData"),
                  State("run", "value"), prevent_initial_call=True)
    def _clicked(click: Any, _run: Any) -> tuple:
        return open_clicked(controller.history, click)
