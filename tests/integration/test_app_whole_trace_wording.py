"""Issue 30 item 1 in the app: on traces without steps the Efficiency and Compare pages say "whole
trace", never "per step" (as the renderers do: ``TableSpec.title_without_steps``,
``render.common.column_label``); the same pages of runs with steps still say "per step". Server
side: the pages' component trees (section titles, notes, table column names, chart axis titles)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("dash")

from ncu_example import write_example  # noqa: E402

from traceview.app.server import create_app  # noqa: E402
from traceview.app.views import AppController, compare_basis  # noqa: E402

PER_STEP = re.compile(r"per step|/ ?step\b|cost/step", re.IGNORECASE)
SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _controller(tmp: pytest.TempPathFactory, paths: list[str]) -> Iterator[AppController]:
    monkey = pytest.MonkeyPatch()
    monkey.setenv("TRACEVIEW_CACHE_DIR", str(tmp.mktemp("cache")))
    app = create_app(paths, warm=False)
    yield app.traceview_controller  # type: ignore[attr-defined]
    monkey.undo()


@pytest.fixture(scope="module")
def no_steps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppController]:
    """Two runs without steps (the ncu example, and the same kernels in another file)."""
    folder = tmp_path_factory.mktemp("runs")
    paths = []
    for name in ("a", "b"):
        (folder / name).mkdir()
        paths.append(str(write_example(folder / name / "example.json")))
    yield from _controller(tmp_path_factory, paths)


@pytest.fixture(scope="module")
def with_steps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppController]:
    """The roofline sample (three steps, modelled op types) and the regression pair's base run."""
    yield from _controller(tmp_path_factory, [str(SAMPLES / "efficiency_roofline.json.gz"),
                                              str(SAMPLES / "regression_pair" / "base")])


def texts(node: Any) -> list[str]:
    """Every text a person reads in a component tree: children strings, table column names, chart
    titles and axis titles."""
    out: list[str] = []
    if isinstance(node, str):
        return [node]
    if isinstance(node, (list, tuple)):
        return [t for n in node for t in texts(n)]
    if node is None or isinstance(node, (int, float)):
        return out
    for col in getattr(node, "columns", None) or []:
        if isinstance(col, dict) and "name" in col:
            out.append(str(col["name"]))
    figure = getattr(node, "figure", None)
    if figure is not None:
        layout = figure.get("layout", {}) if isinstance(figure, dict) else figure.layout.to_plotly_json()
        for axis in ("xaxis", "yaxis"):
            title = (layout.get(axis) or {}).get("title")
            out.append(str(title.get("text", "")) if isinstance(title, dict) else str(title or ""))
    out.extend(texts(getattr(node, "children", None)))
    return out


def _page(ctl: AppController, path: str) -> list[str]:
    body, _ = ctl.render_page(path, "", 0)
    return texts(body)


def test_efficiency_and_compare_say_whole_trace_without_steps(no_steps: AppController) -> None:
    ctx = no_steps._context(0)  # noqa: SLF001
    assert not ctx.report.summary.get("steps")
    for path in ("/efficiency", "/compare"):
        words = _page(no_steps, path)
        assert words, path
        assert [w for w in words if PER_STEP.search(w)] == [], path
        assert any("whole trace" in w for w in words), path
    efficiency = _page(no_steps, "/efficiency")
    assert "FLOPs utilisation over the whole trace (HFU; MFU with --model-flops)" in efficiency
    compare = _page(no_steps, "/compare")
    assert "Side by side: whole trace" in compare and "Metrics (whole trace)" in compare
    assert "whole trace (ms)" in compare


def test_with_steps_they_still_say_per_step(with_steps: AppController) -> None:
    assert with_steps._context(0).report.summary.get("steps")  # noqa: SLF001
    efficiency = _page(with_steps, "/efficiency")
    assert any(w.startswith("FLOPs utilisation per step") for w in efficiency)
    assert "above roofline / step (ns)" in efficiency
    compare = _page(with_steps, "/compare")
    assert "Side by side: mean per step" in compare and "Metrics (mean per step)" in compare
    assert "mean per step (ms)" in compare


def test_a_compare_of_a_run_with_steps_and_one_without_says_which() -> None:
    stepped = {"summary": {"steps": 3}}
    whole = {"summary": {"steps": 0}}
    assert compare_basis(stepped, stepped) == "mean per step"
    assert compare_basis(whole, whole) == "whole trace"
    assert "new run has no steps" in compare_basis(stepped, whole)
    assert "base run has no steps" in compare_basis(whole, stepped)
