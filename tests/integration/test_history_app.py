"""The app's History page (app/history.py) on real history databases: the chart, the regressions
marked where they start, and a click on a run opening it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import traceview
from traceview.history import add_runs, open_history
from traceview.history.summary import files_identity, summarize
from traceview.discovery import find_trace_files

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_traces"))

import make_history  # noqa: E402

PAIR = ROOT / "sample_traces" / "regression_pair"

dash = pytest.importorskip("dash")


def _pair_db(tmp_path: Path) -> Path:
    db = tmp_path / "pair.duckdb"
    con = open_history(db)
    for side in ("base", "new"):
        path = PAIR / side
        report = traceview.analyze(str(path))
        add_runs(con, [summarize(report, identity=files_identity(find_trace_files([str(path)])), name=side,
                                 paths=[str(path.resolve())], tags={})])
    con.close()
    return db


def _walk(component):
    yield component
    children = getattr(component, "children", None)
    if isinstance(children, (list, tuple)):
        for child in children:
            yield from _walk(child)
    elif children is not None and hasattr(children, "children"):
        yield from _walk(children)


def test_history_page_marks_planted_regressions(tmp_path):
    from traceview.app import history
    from traceview.app.server import create_app

    db = tmp_path / "h.duckdb"
    con = open_history(db)
    add_runs(con, make_history.planted_history().summaries)
    con.close()
    app = create_app([str(PAIR / "base")], history_db=db, warm=False)
    controller = app.traceview_controller
    assert history.HISTORY_PAGE in controller.pages
    assert controller.nav_classes("/history")[-1] == "active"
    body, status = controller.render_page("/history", "", 0)
    assert str(db) in status
    graphs = [c for part in body for c in _walk(part) if getattr(c, "id", None) == "hist-graph"]
    assert len(graphs) == 1
    fig = history.figure(history.history_data(history.HistorySource(db), [make_history.PLANTED_SLOW]))
    markers = [t for t in fig.data if t.marker.symbol == "triangle-up"]
    assert len(markers) == 1 and list(markers[0].x) == [make_history.SLOW_FROM]
    names = [t.name for t in fig.data if t.mode == "lines+markers"]
    assert names == ["step_time", make_history.PLANTED_SLOW]
    # no stored run's traces are among the app's runs: a click says so
    run, path, msg = history.open_clicked(controller.history, {"points": [{"customdata": 31}]})
    assert "not among" in msg
    # the other pages still work
    assert controller.page("/overview").path == "/overview"


def test_click_opens_a_stored_run_whose_traces_are_app_runs(tmp_path):
    from traceview.app import history
    from traceview.app.server import create_app

    db = _pair_db(tmp_path)
    assert set(history.reachable_paths(db)) == {str((PAIR / "base").resolve()), str((PAIR / "new").resolve())}
    app = create_app(history.reachable_paths(db), history_db=db, warm=False)
    controller = app.traceview_controller
    labels = {spec.id: spec.files[0].parent.name for spec in controller.store.runs}
    assert {labels[v] for v in controller.history.app_runs.values()} == {"base", "new"}
    app_run = controller.history.app_runs[2]
    assert history.open_clicked(controller.history, {"points": [{"customdata": 2}]}) == (app_run, "/overview", "")
    # anything else from the browser is ignored
    assert history.open_clicked(controller.history, {"points": [{}]})[2] == ""
    assert history.open_clicked(controller.history, None)[2] == ""
    assert "hist-graph.figure" in app.callback_map


def test_missing_db_is_one_line(tmp_path):
    from traceview.app import history
    from traceview.errors import TraceviewError

    with pytest.raises(TraceviewError, match="no history database"):
        history.history_db(tmp_path / "nope.duckdb")
    assert history.history_db(None) in (None, history.DEFAULT_DB)


def test_default_chart_shows_the_regressions_as_changes_and_a_db_alone_is_no_error(tmp_path):
    """Without a choice the chart draws the regressed kernels (then the largest), each as the change
    from its own baseline, so an 8% step on a 100 us kernel is as visible as on the step time; an
    app opened on a database alone lands on the History page, with no "unknown run" error."""
    import numpy as np

    from traceview.app import history
    from traceview.app.server import create_app

    db = tmp_path / "h.duckdb"
    con = open_history(db)
    add_runs(con, make_history.planted_history().summaries)
    con.close()
    data = history.history_data(history.HistorySource(db), None)
    assert set(data["chosen"][:2]) == {make_history.PLANTED_NEW, make_history.PLANTED_SLOW}
    fig = history.figure(data)
    slow = next(t for t in fig.data if t.name == make_history.PLANTED_SLOW)
    y = np.asarray(slow.y, dtype=float)
    before, after = y[: make_history.SLOW_FROM - 1], y[make_history.SLOW_FROM - 1:]
    assert abs(np.median(before)) < 1.0 and 6.0 < np.median(after) < 10.0  # the planted 8%
    x = np.arange(1.0, 6.0)
    assert history.change_pct(np.array([100.0, 100.0, 0.0, 108.0, 108.0]), x, 4).tolist()[3] == pytest.approx(8.0)
    assert np.isnan(history.change_pct(np.array([100.0, 100.0, 0.0, 108.0, 108.0]), x, 4)[2])
    app = create_app([], history_db=db, warm=False)
    controller = app.traceview_controller
    assert controller.page("/").path == history.HISTORY_PAGE.path
    desc = controller.run_changed(None)[-1]
    assert isinstance(desc, str) and "history only" in desc
