"""The Modules page in the app, server side: the icicle of a rank's range tree drawn from the
``modules`` analysis's ``range_gpu`` and ``ranges`` tables (one sector per range under its parent,
as wide as its inclusive GPU time, the rank's busy time at the top and the time outside every range
beside its ranges), the rank and colour controls, the ranges / type paths / attribution tables, and a
range clicked (in the icicle or the ranges table) opening the timeline on that range with its rank
opened; hostile control values and clicks get a message.

On ``sample_traces/synthetic_4rank`` (annotation ranges, four ranks) and on
``tracelens_qwen05b_h100`` (nn.Module ranges; skipped without the shared traces). The browser side
is tests/browser/test_app_modules_browser.py.
"""

from __future__ import annotations

from typing import Any, Iterator

import dash
import pandas as pd
import pytest

pytest.importorskip("dash")

from conftest import SHARED_TRACES  # noqa: E402
from test_app_critical_path import SAMPLE, _by_id  # noqa: E402

from traceview.app import modules_page as mp  # noqa: E402
from traceview.app.server import create_app  # noqa: E402
from traceview.app.validate import BadValue  # noqa: E402
from traceview.app.views import AppController  # noqa: E402
from traceview.render.common import layers_text  # noqa: E402

QWEN = SHARED_TRACES / "kineto" / "tracelens_qwen05b_h100.json.gz"


def _controller(tmp_path_factory: pytest.TempPathFactory, path: Any) -> Iterator[AppController]:
    monkey = pytest.MonkeyPatch()
    monkey.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    app = create_app([str(path)], warm=False)
    yield app.traceview_controller  # type: ignore[attr-defined]
    monkey.undo()


@pytest.fixture(scope="module")
def ctl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppController]:
    yield from _controller(tmp_path_factory, SAMPLE)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppController]:
    if not QWEN.exists():
        pytest.skip(f"{QWEN} is absent (the shared traces are not on this machine)")
    yield from _controller(tmp_path_factory, QWEN)


def _page_path() -> str:
    from traceview.app.pages import page_list

    return next(p.path for p in page_list() if p.analysis == mp.ANALYSIS)


def _body(ctl: AppController) -> list[Any]:
    body, _ = ctl.render_page(_page_path(), "", 0)
    return body


def _sectors(fig: Any) -> pd.DataFrame:
    trace = fig.data[0]
    return pd.DataFrame({"id": list(trace.ids), "parent": list(trace.parents), "label": list(trace.labels),
                         "value": list(trace.values), "color": list(trace.marker.colors)})


def gpu_order(ctl: AppController, rank: int) -> list[int]:
    """The range ids of a rank's ``range_gpu`` rows in start order (an outer range before the ranges
    it contains when they start together)."""
    gpu = _rank_rows(ctl, "range_gpu", rank)
    return gpu.sort_values(["start_ns", "depth"], kind="stable")["range_id"].tolist()


def _rank_rows(ctl: AppController, table: str, rank: int) -> pd.DataFrame:
    frame = ctl._context(0).table(mp.ANALYSIS, table)  # noqa: SLF001
    return frame[frame["rank"] == rank]


# ------------------------------------------------------------------------------------ the page


def test_the_page_is_in_the_navigation_with_its_sections(ctl: AppController) -> None:
    body = _body(ctl)
    for ident in (mp.ICICLE_ID, mp.RANK_ID, mp.COLOR_ID, mp.RANGES_ID, mp.TYPES_ID, "mod-attribution"):
        assert _by_id(body, ident) is not None, ident
    gpu = ctl._context(0).table(mp.ANALYSIS, "range_gpu")  # noqa: SLF001
    options = _by_id(body, mp.RANK_ID).options
    assert [o["value"] for o in options] == sorted(gpu["rank"].unique().tolist()) and len(options) == 4
    assert _by_id(body, mp.RANK_ID).value == options[0]["value"]


@pytest.mark.parametrize("which", ["sample", "qwen"])
def test_the_icicle_draws_every_range_under_its_parent_as_wide_as_its_time(
        which: str, ctl: AppController, request: pytest.FixtureRequest) -> None:
    controller = ctl if which == "sample" else request.getfixturevalue("qwen")
    body = _body(controller)
    rank = _by_id(body, mp.RANK_ID).value
    sectors = _sectors(_by_id(body, mp.ICICLE_ID).figure)
    assert sectors["id"].iloc[0] == f"{rank}/root" and sectors["id"].iloc[-1] == f"{rank}/none"
    # left to right in start order (the icicle keeps the given order)
    drawn = [int(i.split("/")[1]) for i in sectors["id"].iloc[1:-1]]
    assert drawn == gpu_order(controller, rank)
    sectors = sectors.set_index("id")
    gpu = _rank_rows(controller, "range_gpu", rank)
    ranges = _rank_rows(controller, "ranges", rank).set_index("range_id")
    att = _rank_rows(controller, "attribution", rank).set_index("rule")
    # one sector per range with GPU activity, its parent's sector above it, its name as label
    want = {f"{rank}/{r}" for r in gpu["range_id"]}
    assert set(sectors.index) == want | {f"{rank}/root", f"{rank}/none"}
    for r in gpu.itertuples():
        s = sectors.loc[f"{rank}/{r.range_id}"]
        p = int(ranges.loc[r.range_id, "parent_id"])
        assert s["parent"] == (f"{rank}/root" if p == -1 else f"{rank}/{p}")
        assert s["label"] == ranges.loc[r.range_id, "name"]
        assert s["value"] >= r.inclusive_ns
    # a range whose children together are not wider than its union is drawn exactly as wide as it
    kids = gpu.assign(parent=ranges["parent_id"].reindex(gpu["range_id"]).to_numpy()).groupby("parent")[
        "inclusive_ns"].sum()
    exact = gpu[[kids.get(r, 0) <= inc for r, inc in zip(gpu["range_id"], gpu["inclusive_ns"])]]
    assert len(exact) > len(gpu) // 2
    assert [sectors.loc[f"{rank}/{r}", "value"] for r in exact["range_id"]] == exact["inclusive_ns"].tolist()
    # the rank's busy time at the top; the busy time no range covers beside its top-level ranges
    assert sectors.loc[f"{rank}/none", "value"] == att.loc["unattributed", "gpu_ns"]
    assert sectors.loc[f"{rank}/root", "value"] >= att.loc["range", "busy_ns"]
    if which == "qwen":  # one thread of nn.Module ranges: its top ranges and the rest add up to the busy time
        assert len(gpu) == 316 and (gpu["kind"] == "module").all()
        assert sectors.loc[f"{rank}/root", "value"] == att.loc["range", "busy_ns"]
        top = sectors[sectors["parent"] == f"{rank}/root"]
        assert top["value"].sum() == att.loc["range", "busy_ns"]


def test_colours_by_kind_or_by_type_path(ctl: AppController) -> None:
    ctx = ctl._context(0)  # noqa: SLF001
    tree = mp.rank_tree(ctx, 0)
    by_kind = _sectors(mp.icicle_figure(tree, 0, 1, 0, "kind", ctx.origin_ns)[0]).iloc[1:-1]
    assert by_kind["color"].tolist() == [mp.KIND_COLORS[k] for k in tree["kind"]]
    by_type = _sectors(mp.icicle_figure(tree, 0, 1, 0, "type_path", ctx.origin_ns)[0]).iloc[1:-1]
    colour_of = dict(zip(tree["type_path"], by_type["color"]))
    assert len(colour_of) > 1 and len(set(colour_of.values())) == len(colour_of)  # one colour per type path
    assert by_type["color"].tolist() == [colour_of[t] for t in tree["type_path"]]


def test_the_tables_read_the_analysis(ctl: AppController) -> None:
    body = _body(ctl)
    rank = _by_id(body, mp.RANK_ID).value
    types = _by_id(body, mp.TYPES_ID).data
    want = _rank_rows(ctl, "type_paths", rank).sort_values("inclusive_ns", ascending=False)
    assert [r["type_path"] for r in types] == want["type_path"].tolist()
    assert [r["instances"] for r in types] == want["instances"].tolist()
    att = ctl._context(0).table(mp.ANALYSIS, "attribution")  # noqa: SLF001
    shown = _by_id(body, "mod-attribution").data
    assert [(r["rank"], r["rule"]) for r in shown] == list(zip(att["rank"], att["rule"]))
    assert [r["share_pct"] for r in shown] == pytest.approx((100 * att["share"]).tolist())
    ranges = _by_id(body, mp.RANGES_ID).data
    gpu = _rank_rows(ctl, "range_gpu", rank)
    assert sorted(r["id"] for r in ranges) == sorted(gpu.index.tolist())
    assert [r["path"] for r in ranges] == gpu.sort_values("inclusive_ns", ascending=False, kind="stable")[
        "path"].tolist()


def test_the_headline_is_the_terminals_by_layer_line(ctl: AppController) -> None:
    rep = ctl._context(0).report  # noqa: SLF001
    line = _by_id(_body(ctl), "mod-by-layer")
    assert rep["summary"]["top_layers"] and line.children == "by layer: " + layers_text(rep)


# ------------------------------------------------------------------------------------ the controls


def test_the_rank_selector_draws_that_rank(ctl: AppController) -> None:
    sections, msg = ctl.modules_view(2, "type_path", 0)
    assert msg is None
    sectors = _sectors(_by_id(sections, mp.ICICLE_ID).figure)
    assert sectors["id"].str.startswith("2/").all()
    assert len(sectors) == len(_rank_rows(ctl, "range_gpu", 2)) + 2
    types = _by_id(sections, mp.TYPES_ID).data
    assert len(types) == len(_rank_rows(ctl, "type_paths", 2))


@pytest.mark.parametrize("rank,color", [(99, "kind"), (-1, "kind"), ("abc", "kind"), (1e303, "kind"),
                                        (None, "kind"), ([0], "kind"), (0, "size"), (0, ["kind"]), (0, None)])
def test_hostile_control_values_get_a_message(ctl: AppController, rank: Any, color: Any) -> None:
    sections, msg = ctl.modules_view(rank, color, 0)
    assert sections is dash.no_update
    assert msg is not None and ("rank" in msg.children or "colour by" in msg.children), msg.children


# ------------------------------------------------------------------------------------ clicks


def _opened(ctl: AppController, pathname: str, search: str) -> dict:
    body, _ = ctl.render_page(pathname, search, 0)
    return _by_id(body, "tl-window").data


def test_a_range_clicked_opens_the_timeline_on_it(ctl: AppController) -> None:
    ctx = ctl._context(0)  # noqa: SLF001
    gpu = _rank_rows(ctl, "range_gpu", 1)
    r = gpu.sort_values("inclusive_ns").iloc[-1]
    pathname, search, msg = ctl.range_clicked({"points": [{"id": f"1/{int(r['range_id'])}", "label": "x"}]}, 0)
    assert pathname == "/timeline" and msg is None
    state = _opened(ctl, pathname, search)
    o = ctx.origin_ns
    assert state["open"] == [1]
    assert state["f0"] == int(r["start_ns"]) - o and state["f1"] == int(r["end_ns"]) - o
    assert state["t0"] <= state["f0"] < state["f1"] <= state["t1"]
    assert (state["t1"] - state["t0"]) < 1.1 * (state["f1"] - state["f0"]) + 2_000
    # a row of the ranges table opens the same range
    row_id = int(gpu.sort_values("inclusive_ns").index[-1])
    assert ctl.range_row_clicked({"row": 0, "column": 0, "row_id": row_id}, 0) == (pathname, search, None)


@pytest.mark.parametrize("click", [{"points": [{"id": "0/root"}]}, {"points": [{"id": "0/none"}]},
                                   {"points": [{"id": "0/999999"}]}, {"points": [{"id": "../etc/passwd"}]},
                                   {"points": []}, {"points": "x"}, [1], "0/1", 1e303, {"points": [{"id": 5}]},
                                   {"points": [{"id": "9" * 30 + "/1"}]}])
def test_hostile_clicks_get_a_message(ctl: AppController, click: Any) -> None:
    pathname, search, msg = ctl.range_clicked(click, 0)
    assert pathname is dash.no_update and search is dash.no_update
    assert msg is not None and any(w in msg.children for w in ("range", "sector")), msg.children


@pytest.mark.parametrize("cell", ["/etc/passwd", 1e303, {"row_id": -1}, {"row_id": "abc"}, {"row_id": 10**9},
                                  {"row_id": float("inf")}, [1]])
def test_hostile_row_clicks_get_a_message(ctl: AppController, cell: Any) -> None:
    pathname, search, msg = ctl.range_row_clicked(cell, 0)
    assert pathname is dash.no_update and search is dash.no_update
    assert msg is not None and ("row" in str(msg.children) or "cell" in str(msg.children))


# ------------------------------------------------------------------------------------ the drawing


def _tree(rows: list[tuple[int, int, int, int]]) -> pd.DataFrame:
    """(range_id, parent_id, depth, inclusive_ns) rows of rank 0."""
    frame = pd.DataFrame(rows, columns=["range_id", "parent_id", "depth", "inclusive_ns"])
    return frame.assign(rank=0, kind="module", name=[f"m{r}" for r in frame["range_id"]],
                        path=[f"p/m{r}" for r in frame["range_id"]], type_path="p/m")


def test_a_parent_is_as_wide_as_its_overlapping_children() -> None:
    # two children of 0 whose kernels overlap (streams): 60 + 70 > the parent's union of 100
    size, root = mp.drawn_sizes(_tree([(0, -1, 0, 100), (1, 0, 1, 60), (2, 0, 1, 70), (3, 2, 2, 80)]), 150, 30)
    assert size == {3: 80.0, 2: 80.0, 1: 60.0, 0: 140.0}
    assert root == 170.0  # its top range (140) and the 30 outside every range: wider than the busy 150
    size, root = mp.drawn_sizes(_tree([(0, -1, 0, 100), (1, 0, 1, 60)]), 150, 30)
    assert size == {1: 60.0, 0: 100.0} and root == 150.0


def test_the_largest_ranges_are_drawn_with_all_their_ancestors() -> None:
    # a chain 0 > 1 > 2 (small leaf) and wide siblings 3, 4 of 0; a range whose parent 9 is absent
    tree = _tree([(0, -1, 0, 1000), (1, 0, 1, 500), (2, 1, 2, 5), (3, 0, 1, 400), (4, 0, 1, 300), (5, 9, 1, 900)])
    assert sorted(mp._kept(tree, 4)["range_id"]) == [0, 1, 3, 4]  # noqa: SLF001
    assert sorted(mp._kept(tree, 10)["range_id"]) == [0, 1, 2, 3, 4]  # noqa: SLF001
    assert sorted(mp._kept(tree, 2)["range_id"]) == [0, 1]  # noqa: SLF001  (5's parent is not there: never drawn)
    # a child as wide as its parent (one kernel in both) but kept without it is not drawn
    tied = _tree([(0, -1, 0, 100), (1, 0, 1, 100), (2, -1, 0, 100)])
    assert sorted(mp._kept(tied, 2)["range_id"]) == [0, 2]  # noqa: SLF001  (the top ranges first on a tie)


def test_a_sector_id_is_parsed_or_refused() -> None:
    assert mp.clicked_sector({"points": [{"id": "3/17"}]}) == (3, 17)
    with pytest.raises(BadValue, match="whole"):
        mp.clicked_sector({"points": [{"id": "3/root"}]})
    with pytest.raises(BadValue, match="not a range"):
        mp.clicked_sector({"points": [{"id": "3/17; drop"}]})


def _texts(node: Any) -> list[str]:
    """Every string in a Dash component tree."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, (list, tuple)):
        return [t for child in node for t in _texts(child)]
    children = getattr(node, "children", None)
    return _texts(children) if children is not None else []


def test_graph_replay_section_shows_the_capture_match(tmp_path_factory: pytest.TempPathFactory) -> None:
    """With --graph-capture, the page shows how the replays matched and their GPU time by captured op,
    read from the analysis's graph_capture and graph_ops tables."""
    import importlib.util
    from pathlib import Path

    from traceview import Options

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("make_graph_pair", root / "sample_traces" / "make_graph_pair.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("graph_pair")
    module.write(out)
    monkey = pytest.MonkeyPatch()
    monkey.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    try:
        app = create_app([str(out / "hip" / "replay.json.gz")], warm=False,
                         options=Options(graph_capture=(str(out / "hip" / "capture.json.gz"),)))
        ctl = app.traceview_controller  # type: ignore[attr-defined]
        texts = _texts(_body(ctl))
        assert "Graph replays" in texts
        ops = ctl._context(0).table(mp.ANALYSIS, "graph_ops")  # noqa: SLF001
        assert set(ops["op"]) == {"aten::mm", "aten::_flash_attention_forward", "aten::gelu"}
        tables = [n for n in _walk(_body(ctl)) if getattr(n, "id", None) == "mod-graph-ops"]
        assert tables and {row["op"] for row in tables[0].data} == set(ops["op"])
    finally:
        monkey.undo()


def _walk(node: Any) -> Iterator[Any]:
    if isinstance(node, (list, tuple)):
        for child in node:
            yield from _walk(child)
        return
    yield node
    children = getattr(node, "children", None)
    if children is not None and not isinstance(children, str):
        yield from _walk(children)
