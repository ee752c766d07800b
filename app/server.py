"""The Dash app: layout, callback wiring, and serving.

``create_app(paths)`` finds the runs under ``paths`` and returns a ``dash.Dash`` app; ``serve``
runs it. The callbacks are thin wrappers around :class:`~traceview.app.views.AppController`
methods; the only things they receive from the browser are run ids, ranks, steps, times, row ids
and clicks.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Sequence

import dash
from dash import Input, Output, State, dcc, html

from traceview.findings import Options

from . import critical_path, history, measured_timeline, modules_page, pages, timeline_view
from .runs import RunStore, discover_runs
from .views import AppController

#: every filter control, as callback States/Inputs (same order as the controller's arguments)
FILTER_IDS = (("f-ranks", "value"), ("f-steps", "value"), ("f-t0", "value"), ("f-t1", "value"))

_INDEX = """<!DOCTYPE html>
<html>
<head>
{%metas%}
<title>{%title%}</title>
{%favicon%}
{%css%}
<style>
body { font-family: Helvetica, Arial, sans-serif; margin: 0; background: #F7F8FA; color: #222; }
.tv-header { background: #1F2D3D; color: white; padding: 10px 20px; }
.tv-header h1 { font-size: 20px; margin: 0 16px 0 0; display: inline-block; }
.tv-nav { background: white; border-bottom: 1px solid #ddd; padding: 0 20px; }
.tv-nav a { display: inline-block; padding: 10px 12px; color: #1F2D3D; text-decoration: none; font-size: 14px; }
.tv-nav a.active, .tv-nav a:hover { border-bottom: 3px solid #4C78A8; padding-bottom: 7px; }
.tv-filters { display: flex; flex-wrap: wrap; gap: 14px; align-items: flex-end; padding: 10px 20px;
              background: white; border-bottom: 1px solid #e5e5e5; font-size: 13px; }
.tv-filters label { display: block; color: #555; font-size: 12px; margin-bottom: 2px; }
.tv-main { padding: 12px 20px 60px 20px; max-width: 1500px; }
.tv-status { color: #555; font-size: 12px; padding: 6px 20px 0 20px; }
button { background: white; border: 1px solid #bbb; border-radius: 4px; padding: 4px 10px; cursor: pointer; }
button:hover { background: #EEF3F9; }
</style>
</head>
<body>
{%app_entry%}
<footer>{%config%}{%scripts%}{%renderer%}</footer>
</body>
</html>"""


def build_layout(store: RunStore, page_list: Sequence[pages.Page]) -> html.Div:
    run_options = [{"label": f"{r.id}: {r.label}", "value": r.id} for r in store.runs]
    nav = html.Div([dcc.Link(p.label, href=p.path, id=pages.nav_id(p.path)) for p in page_list], className="tv-nav")
    filters = html.Div([
        html.Div([html.Label("run"), dcc.Dropdown(id="run", options=run_options, value=0, clearable=False,
                                                   style={"minWidth": "320px"})], style={"flex": "2"}),
        html.Div([html.Label("ranks"), dcc.Dropdown(id="f-ranks", multi=True, placeholder="all ranks")],
                 style={"flex": "1", "minWidth": "180px"}),
        html.Div([html.Label("steps"), dcc.RangeSlider(id="f-steps", min=0, max=1, value=[0, 1], step=1,
                                                        allowCross=False, tooltip={"placement": "bottom"})],
                 style={"flex": "2", "minWidth": "240px"}),
        html.Div([html.Label("from (ms)"), dcc.Input(id="f-t0", type="number", debounce=True, placeholder="start",
                                                     style={"width": "100px"})]),
        html.Div([html.Label("to (ms)"), dcc.Input(id="f-t1", type="number", debounce=True, placeholder="end",
                                                   style={"width": "100px"})]),
        html.Div([html.Button("clear filters", id="f-clear", n_clicks=0)]),
    ], className="tv-filters")
    return html.Div([
        dcc.Location(id="url", refresh="callback-nav"),
        html.Div([html.H1("traceview"), html.Span(id="run-info", style={"fontSize": "13px", "color": "#C9D6E3"})],
                 className="tv-header"),
        filters,
        nav,
        html.Div(id="status", className="tv-status"),
        html.Div(dcc.Loading(html.Div(id="page"), type="dot", delay_show=400), className="tv-main"),
        dcc.Download(id="dl-md"), dcc.Download(id="dl-html"), dcc.Download(id="dl-json"),
        dcc.Download(id="dl-perfetto"),
    ])


def _dash_app() -> dash.Dash:
    """A Dash app that serves Dash's own component bundles and nothing else."""
    # no assets folder: the app serves no files of its own, only Dash's component bundles
    empty_assets = Path(__file__).with_name("_no_assets")
    import flask

    # no static folder either: the only files served are Dash's own component bundles
    server = flask.Flask("traceview.app", static_folder=None)
    # Dash's annotations say bool for server and str for update_title; its docs take a Flask app and None
    app = dash.Dash(
        "traceview.app", server=server, title="traceview", suppress_callback_exceptions=True,  # type: ignore[arg-type]
        update_title=None,  # type: ignore[arg-type]
        assets_folder=str(empty_assets), assets_ignore=".*", serve_locally=True, compress=False,
    )
    app.index_string = _INDEX
    # Dash always registers an assets route that serves files under ``assets_folder`` (a path taken
    # from the request); the app has no assets, so that route answers 404 whatever it is asked
    for rule in list(server.url_map.iter_rules()):
        if rule.endpoint.endswith("dash_assets.static"):
            server.view_functions[rule.endpoint] = serves_no_files
    # Dash serves only its registered bundle paths; any other path raises, which would be a 500
    server.register_error_handler(dash.exceptions.DependencyException, _not_found)
    return app


def _not_found(_exc: Exception) -> tuple[str, int]:
    return "not found", 404


def serves_no_files(**_path: Any) -> Any:
    """The view of every route that would serve a file named by the request: always 404."""
    import flask

    flask.abort(404)


def _filter_states() -> list[State]:
    return [State(i, p) for i, p in FILTER_IDS]


def _add_page_callbacks(app: dash.Dash, controller: AppController) -> None:
    """Run choice, page rendering, the overview's polling for findings, and the active nav link."""
    filter_inputs = [Input(i, p) for i, p in FILTER_IDS]

    @app.callback(
        Output("f-ranks", "options"), Output("f-ranks", "value"),
        Output("f-steps", "min"), Output("f-steps", "max"), Output("f-steps", "value"), Output("f-steps", "marks"),
        Output("f-steps", "disabled"), Output("f-t0", "value"), Output("f-t1", "value"), Output("run-info", "children"),
        Input("run", "value"), Input("f-clear", "n_clicks"),
    )
    def _run_changed(run: Any, _clear: Any) -> tuple:
        return controller.run_changed(run)

    @app.callback(
        Output("page", "children"), Output("status", "children"),
        Input("url", "pathname"), Input("url", "search"), Input("run", "value"), *filter_inputs,
    )
    def _render_page(pathname: Any, search: Any, run: Any, ranks: Any, steps: Any, t0: Any, t1: Any) -> tuple:
        return controller.render_page(pathname, search, run, ranks, steps, t0, t1)

    @app.callback(
        Output("load-box", "children"), Output("load-poll", "disabled"),
        Input("load-poll", "n_intervals"), State("url", "pathname"), State("url", "search"), State("run", "value"),
        *_filter_states(), prevent_initial_call=True,
    )
    def _load_poll(n: Any, pathname: Any, search: Any, run: Any, ranks: Any, steps: Any, t0: Any, t1: Any) -> tuple:
        return controller.load_poll(n, pathname, search, run, ranks, steps, t0, t1)

    @app.callback(
        Output("ov-findings", "children"), Output("ov-poll", "disabled"),
        Input("ov-poll", "n_intervals"), State("run", "value"), *_filter_states(),
        prevent_initial_call=True,
    )
    def _overview_poll(n: Any, run: Any, ranks: Any, steps: Any, t0: Any, t1: Any) -> tuple:
        return controller.overview_poll(n, run, ranks, steps, t0, t1)

    @app.callback(
        *[Output(pages.nav_id(p.path), "className") for p in controller.pages],
        Input("url", "pathname"),
    )
    def _nav(pathname: Any) -> list[str]:
        return controller.nav_classes(pathname)


def _add_timeline_callbacks(app: dash.Dash, controller: AppController) -> None:
    """Zooming and panning the timeline, search, event details, open ranks (one callback: every one
    of them redraws the figure), and opening it on a gap clicked in the gap table. Wheel zoom and
    drag pan run in the browser (``timeline_view.INTERACTIONS_JS``) and send the new x range as the
    ``tl-zoom`` store, as do plotly's own range changes (box zoom, double-click), filtered there
    (``timeline_view.RELAYOUT_FILTER_JS``): no other relayout event reaches the server."""
    app.clientside_callback(timeline_view.INTERACTIONS_JS, Output("tl-js", "data"), Input("tl-window", "data"))
    app.clientside_callback(timeline_view.RELAYOUT_FILTER_JS, Output("tl-zoom", "data"),
                            Input("tl-graph", "relayoutData"), prevent_initial_call=True)

    @app.callback(
        Output("tl-graph", "figure"), Output("tl-window", "data"), Output("tl-stats", "children"),
        Output("tl-details", "children"), Output("tl-open", "value"), Output("tl-axis", "figure"),
        Output("tl-legend", "children"),
        Input("tl-zoom", "data"), Input("tl-graph", "clickData"),
        Input("tl-zoom-in", "n_clicks"), Input("tl-zoom-out", "n_clicks"), Input("tl-left", "n_clicks"),
        Input("tl-right", "n_clicks"), Input("tl-reset", "n_clicks"),
        Input("tl-search-next", "n_clicks"), Input("tl-search-prev", "n_clicks"), Input("tl-search", "n_submit"),
        Input("tl-open", "value"), Input(critical_path.TOGGLE_ID, "value"),
        Input(measured_timeline.CONTROL_ID, "value"),
        State("tl-search", "value"), State("tl-window", "data"), State("run", "value"), *_filter_states(),
        prevent_initial_call=True,
    )
    def _timeline(zoom: Any, click: Any, _a: Any, _b: Any, _c: Any, _d: Any, _e: Any, _f: Any, _g: Any,
                  _h: Any, open_value: Any, path_value: Any, color_value: Any, query: Any, state: Any, run: Any,
                  ranks: Any,
                  steps: Any, t0: Any, t1: Any) -> tuple:
        trig = dash.ctx.triggered[0]["prop_id"] if dash.ctx.triggered else None
        if trig == "tl-zoom.data":  # a new x range, in the keys of a plotly relayout event
            trig = "tl-graph.relayoutData"
        out = controller.timeline_action(trig, zoom, click, state, run, ranks, steps, t0, t1, query=query,
                                         open_value=open_value, path_value=path_value, color_value=color_value)
        fig = out[0]
        if fig is dash.no_update:
            return (*out, dash.no_update, dash.no_update)
        return (*out, timeline_view.axis_figure(fig), timeline_view.legend(fig))

    @app.callback(
        Output("url", "pathname"), Output("url", "search"), Output("gap-click-msg", "children"),
        Input("gap-table", "active_cell"), State("run", "value"), *_filter_states(),
        prevent_initial_call=True,
    )
    def _gap_clicked(cell: Any, run: Any, ranks: Any, steps: Any, t0: Any, t1: Any) -> tuple:
        return controller.gap_clicked(cell, run, ranks, steps, t0, t1)


def _add_step_callback(app: dash.Dash, controller: AppController) -> None:
    """A row of the Critical path page's steps table: the timeline on that step."""
    @app.callback(
        Output("url", "pathname", allow_duplicate=True), Output("url", "search", allow_duplicate=True),
        Output("cp-step-msg", "children"),
        Input("cp-steps", "active_cell"), State("run", "value"), *_filter_states(),
        prevent_initial_call=True,
    )
    def _step_clicked(cell: Any, run: Any, ranks: Any, steps: Any, t0: Any, t1: Any) -> tuple:
        return controller.step_clicked(cell, run, ranks, steps, t0, t1)


def _add_modules_callbacks(app: dash.Dash, controller: AppController) -> None:
    """The Modules page: its rank and colouring redraw the rank's sections; a range clicked in the
    icicle or a row of its ranges table opens the timeline on that range."""
    @app.callback(
        Output(modules_page.RANK_BOX_ID, "children"), Output(modules_page.VIEW_MSG_ID, "children"),
        Input(modules_page.RANK_ID, "value"), Input(modules_page.COLOR_ID, "value"), State("run", "value"),
        *_filter_states(), prevent_initial_call=True,
    )
    def _modules_view(rank: Any, color: Any, run: Any, ranks: Any, steps: Any, t0: Any, t1: Any) -> tuple:
        return controller.modules_view(rank, color, run, ranks, steps, t0, t1)

    @app.callback(
        Output("url", "pathname", allow_duplicate=True), Output("url", "search", allow_duplicate=True),
        Output(modules_page.CLICK_MSG_ID, "children"),
        Input(modules_page.ICICLE_ID, "clickData"), State("run", "value"), *_filter_states(),
        prevent_initial_call=True,
    )
    def _range_clicked(click: Any, run: Any, ranks: Any, steps: Any, t0: Any, t1: Any) -> tuple:
        return controller.range_clicked(click, run, ranks, steps, t0, t1)

    @app.callback(
        Output("url", "pathname", allow_duplicate=True), Output("url", "search", allow_duplicate=True),
        Output(modules_page.ROW_MSG_ID, "children"),
        Input(modules_page.RANGES_ID, "active_cell"), State("run", "value"), *_filter_states(),
        prevent_initial_call=True,
    )
    def _range_row_clicked(cell: Any, run: Any, ranks: Any, steps: Any, t0: Any, t1: Any) -> tuple:
        return controller.range_row_clicked(cell, run, ranks, steps, t0, t1)


def _add_kernel_callback(app: dash.Dash, controller: AppController) -> None:
    """A row selected in the Kernels table: that kernel per rank and GPU."""
    @app.callback(Output("kern-detail", "children"), Input("kern-table", "active_cell"), State("run", "value"),
                  *_filter_states(), prevent_initial_call=True)
    def _kernel(cell: Any, run: Any, ranks: Any, steps: Any, t0: Any, t1: Any) -> list:
        return controller.kernel_selected(cell, run, ranks, steps, t0, t1)


def _add_compare_callback(app: dash.Dash, controller: AppController) -> None:
    @app.callback(
        Output("cmp-body", "children"),
        Input("cmp-base", "value"), Input("cmp-new", "value"), State("run", "value"), *_filter_states(),
        prevent_initial_call=True,
    )
    def _compare(base: Any, new: Any, run: Any, ranks: Any, steps: Any, t0: Any, t1: Any) -> list:
        return controller.compare_update(base, new, run, ranks, steps, t0, t1)


def _add_download_callback(app: dash.Dash, controller: AppController, fmt: str) -> None:
    """The report of the filtered run in ``fmt`` (md, html, json) when its button is clicked."""
    @app.callback(Output(f"dl-{fmt}", "data"), Input(f"dl-{fmt}-btn", "n_clicks"), State("run", "value"),
                  *_filter_states(), prevent_initial_call=True)
    def _download(n: Any, run: Any, ranks: Any, steps: Any, t0: Any, t1: Any) -> Any:
        if not n:
            return dash.no_update
        return controller.download(fmt, run, ranks, steps, t0, t1)


def _add_perfetto_callback(app: dash.Dash, controller: AppController) -> None:
    """The filtered run as Chrome trace JSON for the Perfetto UI when its button is clicked."""
    @app.callback(Output("dl-perfetto", "data"), Input("dl-perfetto-btn", "n_clicks"), State("run", "value"),
                  *_filter_states(), prevent_initial_call=True)
    def _perfetto(n: Any, run: Any, ranks: Any, steps: Any, t0: Any, t1: Any) -> Any:
        if not n:
            return dash.no_update
        return controller.download_perfetto(run, ranks, steps, t0, t1)


def create_app(paths: Sequence[str | os.PathLike[str]] | None = None, *, store: RunStore | None = None,
               use_cache: bool = True, warm: bool = True, options: Options | None = None,
               history_db: Path | None = None) -> dash.Dash:
    """The Dash app for the runs found under ``paths`` (or an existing ``store``); ``options``: the
    analysis options (step marker, communication rules, GPU table, model FLOPs), as every analysing
    command builds them from its command line."""
    if store is None:
        store = RunStore(discover_runs(list(paths or [])), options, use_cache=use_cache)
    if warm and store.runs:
        store.warm(0)
    # with a history database, the controller that adds the History page (app/history.py)
    controller = AppController(store) if history_db is None else \
        history.HistoryController(store, history.link_runs(history_db, store))
    app = _dash_app()
    app.layout = build_layout(store, controller.pages)
    # tests and benchmarks reach the controller here (Dash objects take extra attributes)
    app.traceview_controller = controller  # type: ignore[attr-defined]
    _add_page_callbacks(app, controller)
    _add_timeline_callbacks(app, controller)
    _add_kernel_callback(app, controller)
    _add_step_callback(app, controller)
    _add_modules_callbacks(app, controller)
    _add_compare_callback(app, controller)
    for fmt in ("md", "html", "json"):
        _add_download_callback(app, controller, fmt)
    _add_perfetto_callback(app, controller)
    if isinstance(controller, history.HistoryController):
        history.add_callbacks(app, controller)
    return app


def serve(paths: Sequence[str] | None = None, *, host: str = "127.0.0.1", port: int = 8050, use_cache: bool = True,
          debug: bool = False, store: RunStore | None = None, options: Options | None = None,
          history_db: Path | None = None) -> None:
    """Start the app and serve it until interrupted."""
    # the first run loads and its analyses start once the web framework is imported: starting them
    # earlier only makes the two fight for the interpreter lock and delays the first page
    app = create_app(paths, store=store, use_cache=use_cache, options=options, history_db=history_db)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app.run(host=host, port=port, debug=debug, use_reloader=False, threaded=True)
