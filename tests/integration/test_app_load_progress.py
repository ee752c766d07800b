"""The app's progress while a big run loads: the store records the load's and the analyses'
phases, a page of a big run not yet loaded shows a bar polled until the run is in memory, and
then the page itself replaces the bar."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pytest

from conftest import SAMPLE_TRACES

dash = pytest.importorskip("dash")

from traceview.app import runs  # noqa: E402
from traceview.app.components import load_bar  # noqa: E402
from traceview.app.runs import RunStore, discover_runs  # noqa: E402
from traceview.app.server import create_app  # noqa: E402
from traceview.app.views import AppController  # noqa: E402

RUN = SAMPLE_TRACES / "synthetic_4rank"


def walk(component: Any) -> Iterator[Any]:
    if isinstance(component, (list, tuple)):
        for c in component:
            yield from walk(c)
        return
    if component is None or isinstance(component, (str, int, float)):
        return
    yield component
    yield from walk(getattr(component, "children", None))


def ids(tree: Any) -> set[str]:
    return {c.id for c in walk(tree) if isinstance(getattr(c, "id", None), str)}


def test_store_records_the_load_then_the_analyses() -> None:
    store = RunStore(discover_runs([str(RUN)]), use_cache=False)
    assert store.progress(0) is None and not store.loaded(0)
    store.trace(0)
    size = store.spec(0).size_bytes
    assert store.loaded(0) and store.progress(0) == ("parse", size, size)
    store.context(0)
    assert store.progress(0) == ("report", 1, 1)


def test_a_big_run_shows_a_bar_until_it_is_loaded(monkeypatch) -> None:
    release = threading.Event()
    real = runs.load_inputs

    def gated(inputs: Any, **kwargs: Any) -> Any:
        kwargs["steps"]("parse", 5_000_000, 10_000_000)
        release.wait(30)
        return real(inputs, **kwargs)

    monkeypatch.setattr(runs, "load_inputs", gated)
    store = RunStore(discover_runs([str(RUN)]), use_cache=False, load_page_min_bytes=0)
    ctl = AppController(store)
    body, status = ctl.render_page("/overview", "", 0)
    assert status == "loading the run" and {"load-box", "load-poll"} <= ids(body)
    deadline = time.monotonic() + 10
    while store.progress(0) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    bar, done = ctl.load_poll(1, "/overview", "", 0)
    assert done is False
    label = next(c for c in walk(bar) if getattr(c, "id", None) == "load-label")
    assert "parse 5/10 MB" in label.children
    release.set()
    while not store.loaded(0) and time.monotonic() < deadline:
        time.sleep(0.01)
    page, done = ctl.load_poll(2, "/overview", "", 0)
    assert done is True and "ov-breakdown" in ids(page) and "load-bar" not in ids(page)


def test_a_small_run_draws_its_page_at_once() -> None:
    ctl = AppController(RunStore(discover_runs([str(RUN)]), use_cache=False))
    body, status = ctl.render_page("/overview", "", 0)
    assert "load-box" not in ids(body) and "ov-breakdown" in ids(body) and status != "loading the run"


def test_bar_figures_and_the_poll_callback() -> None:
    bar = load_bar(("analyses", 3, 17))
    progress = next(c for c in walk(bar) if getattr(c, "id", None) == "load-bar")
    assert (progress.value, progress.max) == ("3", "17")
    assert "load-bar" in ids(load_bar(None))  # before the load tells anything: an indeterminate bar
    app = create_app([str(RUN)], use_cache=False, warm=False)
    assert any("load-box.children" in key for key in app.callback_map)
