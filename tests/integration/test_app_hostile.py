"""The app's trust boundary (issue 11, "Safe by default"): every callback answers hostile control
values with a message instead of an error (a 500 in the browser), the result cache is data that is
never unpickled, the server binds this machine only unless told otherwise, and no route serves a
file named by the request."""

from __future__ import annotations

import logging
import math
import re
import pickle
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import SAMPLE_TRACES

dash = pytest.importorskip("dash")

from traceview.app import runs as runs_mod  # noqa: E402
from traceview.app import validate  # noqa: E402
from traceview.app.filters import Filters  # noqa: E402
from traceview.app.runs import RunStore, discover_runs  # noqa: E402
from traceview.app.server import create_app  # noqa: E402
from traceview.app.views import AppController  # noqa: E402

#: what a hostile (or merely careless) browser can send for any control
HOSTILE: list[Any] = [1e303, -1e303, math.inf, -math.inf, math.nan, "Infinity", "-Infinity", "NaN", "abc",
                      "1e303", 10**30, -(10**30), 2**63, True, [], {}, [0, 1e30], ["x", None], {"a": [1]},
                      "x" * 10_000, [[[[1]]]], "/etc/passwd", "../../x"]
#: hostile values the app must *say* something about (not silently ignore)
SAID = [1e303, -1e303, math.inf, math.nan, "Infinity", "abc", 10**30]


def _short(value: Any) -> str:
    return repr(value)[:24]


@pytest.fixture(scope="module")
def ctl() -> AppController:
    app = create_app([str(SAMPLE_TRACES / "synthetic_4rank")], warm=False)
    controller: AppController = app.traceview_controller
    controller.store.context(0)  # analyses once, so the hostile calls below are quick
    return controller


def text_of(tree: Any) -> str:
    """All the text in a tree of Dash components (or a plain string)."""
    if isinstance(tree, str):
        return tree
    if isinstance(tree, (list, tuple)):
        return " ".join(text_of(t) for t in tree)
    children = getattr(tree, "children", None)
    return text_of(children) if children is not None else ""


# ------------------------------------------------------------------------------ the validator


@pytest.mark.parametrize("value", SAID)
def test_the_validator_names_the_control_and_the_value(value: Any) -> None:
    with pytest.raises(validate.BadValue) as err:
        validate.filters(None, None, value, None)
    assert "from (ms)" in str(err.value)
    with pytest.raises(validate.BadValue) as err:
        validate.filters(None, [0, value], None, None)
    assert "steps" in str(err.value)


def test_the_validator_keeps_good_values() -> None:
    assert validate.filters([2, "1"], [2, 4], "1.5", None) == Filters(ranks=(1, 2), steps=(2, 4),
                                                                       time_ns=(1_500_000, 2**62))
    assert validate.filters(None, [3, 3], "1", "2.5").time_ns == (1_000_000, 2_500_000)


@pytest.mark.parametrize(("steps", "t0", "t1", "said"), [
    ([4, 2], None, None, "steps: [4, 2] ends before it starts"),
    (None, "5", "3", "from (ms) 5 is not before to (ms) 3"),
    (None, 2, 2, "from (ms) 2 is not before to (ms) 2"),
])
def test_reversed_or_empty_windows_are_said_not_read_as_the_whole_run(
        ctl: AppController, steps: Any, t0: Any, t1: Any, said: str) -> None:
    with pytest.raises(validate.BadValue, match=re.escape(said)):
        validate.filters(None, steps, t0, t1)
    body, _ = ctl.render_page("/gaps", "", 0, None, steps, t0, t1)
    assert said in text_of(body)
    assert validate.filters(None, None, None, None) == Filters()
    assert validate.filters([], None, "", "") == Filters()


@pytest.mark.parametrize("value", HOSTILE)
def test_lenient_filters_never_raise(value: Any) -> None:
    Filters.from_controls(value, value, value, value)  # the old entry point ignores what it cannot use


# ------------------------------------------------------------------------------ every callback


def _callbacks(ctl: AppController) -> dict[str, Callable[[Any], Any]]:
    """Every callback of the app (server.py registers thin wrappers around these), with one
    argument position fed the hostile value. Kept in step with ``test_every_callback_is_covered``."""
    return {
        "run_changed": lambda v: ctl.run_changed(v),
        "render_page.pathname": lambda v: ctl.render_page(v, "", 0),
        "render_page.search": lambda v: ctl.render_page("/timeline", v, 0),
        "render_page.ranks": lambda v: ctl.render_page("/gaps", "", 0, v),
        "render_page.steps": lambda v: ctl.render_page("/gaps", "", 0, None, v),
        "render_page.t0": lambda v: ctl.render_page("/gaps", "", 0, None, None, v),
        "render_page.t1": lambda v: ctl.render_page("/kernels", "", 0, None, None, None, v),
        "overview_poll": lambda v: ctl.overview_poll(v, 0, None, None, v, None),
        "load_poll": lambda v: ctl.load_poll(1, v, v, 0),
        "load_poll.run": lambda v: ctl.load_poll(1, "/", "", v),
        "load_poll.filters": lambda v: ctl.load_poll(1, "/gaps", "", 0, v, v, v, v),
        "nav": lambda v: ctl.nav_classes(v),
        "timeline.relayout": lambda v: ctl.timeline_update(
            "tl-graph.relayoutData", {"xaxis.range[0]": 0, "xaxis.range[1]": v}, None, None, 0),
        "timeline.relayout_list": lambda v: ctl.timeline_update(
            "tl-graph.relayoutData", {"xaxis.range": [v, v]}, None, None, 0),
        "timeline.click": lambda v: ctl.timeline_update(
            "tl-graph.clickData", None, {"points": [{"customdata": [0, v]}]}, None, 0),
        "timeline.state": lambda v: ctl.timeline_update("tl-zoom-in.n_clicks", None, None, v, 0),
        "timeline.state_field": lambda v: ctl.timeline_update(
            "tl-left.n_clicks", None, None, {"t0": 0, "t1": v, "f0": v, "f1": 5}, 0),
        "timeline.trigger": lambda v: ctl.timeline_update(v, None, None, None, 0),
        "timeline.filters": lambda v: ctl.timeline_update("tl-reset.n_clicks", None, None, None, 0, v, v, v, v),
        "timeline.path_switch": lambda v: ctl.timeline_action("tl-cp.value", None, None, None, 0, path_value=v),
        "timeline.path_state": lambda v: ctl.timeline_update("tl-zoom-in.n_clicks", None, None, {"cp": v}, 0),
        "gap_clicked": lambda v: ctl.gap_clicked({"row_id": v}, 0, None, None, v),
        "step_clicked": lambda v: ctl.step_clicked({"row_id": v}, 0, None, None, v),
        "step_clicked.cell": lambda v: ctl.step_clicked(v, 0),
        "kernel_selected": lambda v: ctl.kernel_selected({"row_id": v}, 0, None, None, v),
        "kernel_selected.cell": lambda v: ctl.kernel_selected(v, 0),
        "compare": lambda v: ctl.compare_update(v, 0, 0, None, v),
        "download": lambda v: ctl.download("json", 0, None, None, None, v),
        "download.fmt": lambda v: ctl.download(v, 0),
        "download_perfetto": lambda v: ctl.download_perfetto(v),
        "download_perfetto.filters": lambda v: ctl.download_perfetto(0, v, v, v, v),
        "modules_view.rank": lambda v: ctl.modules_view(v, "kind", 0),
        "modules_view.color": lambda v: ctl.modules_view(None, v, 0),
        "modules_view.filters": lambda v: ctl.modules_view(None, "kind", 0, v, v, v, v),
        "range_clicked": lambda v: ctl.range_clicked({"points": [{"customdata": v}]}, 0),
        "range_clicked.click": lambda v: ctl.range_clicked(v, 0),
        "range_row_clicked": lambda v: ctl.range_row_clicked({"row_id": v}, 0),
        "range_row_clicked.cell": lambda v: ctl.range_row_clicked(v, 0),
    }


def test_every_callback_is_covered(ctl: AppController) -> None:
    """Each ``@app.callback`` of server.py is driven below (a new callback needs its hostile test)."""
    source = (Path(runs_mod.__file__).with_name("server.py")).read_text()
    assert source.count("@app.callback(") == 15
    names = {k.split(".")[0] for k in _callbacks(ctl)}
    assert names >= {"run_changed", "render_page", "overview_poll", "load_poll", "nav", "timeline", "gap_clicked",
                     "kernel_selected", "compare", "download", "download_perfetto", "step_clicked",
                     "modules_view", "range_clicked", "range_row_clicked"}


@pytest.mark.parametrize("value", HOSTILE, ids=_short)
def test_no_callback_raises_on_hostile_values(ctl: AppController, value: Any) -> None:
    for name, call in _callbacks(ctl).items():
        try:
            call(value)
        except Exception as exc:  # pragma: no cover - the failure message is the point
            pytest.fail(f"{name}({value!r}) raised {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("value", SAID, ids=_short)
def test_bad_filter_values_are_said_on_the_page(ctl: AppController, value: Any) -> None:
    body, _status = ctl.render_page("/gaps", "", 0, None, None, value, None)
    assert "from (ms)" in text_of(body)
    body, _status = ctl.render_page("/gaps", "", 0, None, [0, value])
    assert "steps" in text_of(body)
    fig, state, stats = ctl.timeline_update("tl-reset.n_clicks", None, None, None, 0, None, None, None, value)
    assert fig is dash.no_update and "to (ms)" in stats
    assert "from (ms)" in text_of(ctl.compare_update(0, 0, 0, None, None, value))
    assert "from (ms)" in text_of(ctl.overview_poll(1, 0, None, None, value)[0])


def test_the_issue_examples_get_a_message(ctl: AppController) -> None:
    _fig, _state, stats = ctl.timeline_update("tl-graph.relayoutData",
                                              {"xaxis.range[0]": 0, "xaxis.range[1]": 1e303}, None, None, 0)
    assert "zoom range" in stats
    _fig, _state, stats = ctl.timeline_update("tl-graph.clickData", None, {"points": [{"customdata": [0, 1e30]}]},
                                              None, 0)
    assert "clicked" in stats
    _fig, _state, stats = ctl.timeline_update("tl-zoom-in.n_clicks", None, None, "abc", 0)
    assert "timeline state" in stats
    _fig, _state, stats = ctl.timeline_update("tl-zoom-in.n_clicks", None, None, {"t0": 0, "t1": 1e303}, 0)
    assert "timeline state" in stats
    # good values still work after the bad ones
    fig, state, _stats = ctl.timeline_update("tl-graph.relayoutData", {"xaxis.range[0]": 1.0, "xaxis.range[1]": 2.0},
                                             None, None, 0)
    assert fig is not dash.no_update and state["t1"] - state["t0"] == 1_000_000


# ------------------------------------------------------------------------------ the result cache


class _Planted:
    """Unpickling this writes a marker file: proof that the cache was unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (Path.write_text, (self.marker, "unpickled"))


def _store() -> RunStore:
    return RunStore(discover_runs([str(SAMPLE_TRACES / "synthetic_4rank")]))


def test_the_result_cache_is_data_not_pickle() -> None:
    first = _store().context(0)
    files = [f for f in runs_mod.result_cache_dir().iterdir() if not f.name.startswith(".")]
    assert len(files) == 1 and files[0].suffix != ".pkl"
    raw = files[0].read_bytes()
    with pytest.raises(Exception):
        pickle.loads(raw)
    assert raw.startswith(runs_mod.RESULT_CACHE_MAGIC)
    again = _store().context(0)
    assert again.from_disk and again.report.data == first.report.data


@pytest.mark.parametrize("content", ["pickle", "garbage", "truncated", "other-version"])
def test_a_foreign_or_damaged_cache_file_is_ignored_with_a_log_line(tmp_path: Path, caplog: Any,
                                                                    content: str) -> None:
    store = _store()
    key = runs_mod.result_key(store.runs[0])
    assert key is not None
    store.context(0)  # writes the genuine entry
    path = runs_mod.result_cache_path(key)
    marker = tmp_path / "marker"
    genuine = path.read_bytes()
    if content == "pickle":
        data = pickle.dumps({"version": runs_mod.RESULT_CACHE_VERSION, "data": _Planted(marker)})
    elif content == "garbage":
        data = b"\x00\xff" * 100
    elif content == "truncated":
        data = genuine[: len(genuine) // 2]
    else:
        # the header's version field only (the tables' Arrow bytes may hold the same digits)
        field = b'"version": "%s"' % runs_mod.RESULT_CACHE_VERSION.encode()
        at = genuine.rfind(field)
        assert at > 0
        other = b'"version": "%s"' % (b"9" * len(runs_mod.RESULT_CACHE_VERSION))
        data = genuine[:at] + other + genuine[at + len(field):]
    # the old cache file name too: a planted .pkl must not be read either
    path.with_suffix(".pkl").write_bytes(data)
    path.write_bytes(data)
    # the app's runs go through the one entry point: the report cache's notes are on its logger
    with caplog.at_level(logging.INFO, logger="traceview"):
        ctx = _store().context(0)
    assert not ctx.from_disk and not marker.exists()
    assert any("result cache" in r.getMessage() and path.name in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------ serving


def test_the_app_binds_this_machine_unless_told() -> None:
    import inspect

    from traceview.app import server
    from traceview.commands import app as app_command

    assert inspect.signature(server.serve).parameters["host"].default == "127.0.0.1"
    option = inspect.signature(app_command.command).parameters["host"].default
    assert option.default == "127.0.0.1"


def test_serve_passes_the_host_it_was_given(monkeypatch: Any) -> None:
    from traceview.app import server

    seen: dict[str, Any] = {}
    monkeypatch.setattr(dash.Dash, "run", lambda self, **kw: seen.update(kw))
    store = RunStore(discover_runs([str(SAMPLE_TRACES / "synthetic_4rank")]))
    server.serve(store=store)
    assert seen["host"] == "127.0.0.1"
    server.serve(store=store, host="0.0.0.0")
    assert seen["host"] == "0.0.0.0"


#: Dash's own routes that carry a path: component bundles (looked up in Dash's registry of
#: packages, never a file-system path) and the catch-all that answers the page for any URL
_DASH_PATH_ROUTES = {"/_dash-component-suites/<string:package_name>/<path:fingerprinted_path>", "/<path:path>"}


def test_no_route_takes_a_file_path_from_the_request(tmp_path: Path) -> None:
    from traceview.app import server

    secret = tmp_path / "not-named.json"
    secret.write_text('{"traceEvents": [], "secret": "DO-NOT-SERVE"}')
    app = create_app([str(SAMPLE_TRACES / "synthetic_4rank")], warm=False)
    rules = {r.rule for r in app.server.url_map.iter_rules()}
    with_path = {r for r in rules if "<path:" in r}
    # Dash's assets route cannot be left out; its view is replaced by one that serves nothing
    assets = {r.rule: r.endpoint for r in app.server.url_map.iter_rules() if r.rule.startswith("/assets/")}
    assert all(app.server.view_functions[e] is server.serves_no_files for e in assets.values())
    assert with_path - set(assets) <= _DASH_PATH_ROUTES, with_path - set(assets) - _DASH_PATH_ROUTES
    assert not any(r.startswith("/static") for r in rules)
    client = app.server.test_client()
    for url in (f"/{secret}", f"/..{secret}", "/_dash-component-suites/os/" + str(secret),
                "/_dash-component-suites/dash/../../../../" + str(secret), "/assets/" + secret.name,
                f"/_dash-component-suites/dash/{secret.name}", "/static/" + secret.name,
                "/_dash-component-suites/traceview/loading.py", "/_dash-component-suites/dash/__init__.py"):
        resp = client.get(url)
        assert b"DO-NOT-SERVE" not in resp.data and b"import " not in resp.data, url
        assert resp.status_code in (200, 404, 400), (url, resp.status_code)
    # the runs are the files of the command line, nothing else
    store = app.traceview_controller.store
    assert {f for r in store.runs for f in r.files} == set((SAMPLE_TRACES / "synthetic_4rank").glob("rank*"))
    for bad in (str(secret), str(tmp_path), len(store.runs)):
        body, _ = app.traceview_controller.render_page("/overview", "", bad)
        assert "unknown run" in text_of(body)
