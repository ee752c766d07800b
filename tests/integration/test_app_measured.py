"""The Efficiency page's measured section in the app, server side: the ``measured`` analysis's
kernels table (SOL compute/memory %, occupancy, L2 hit, DRAM bytes, bound-by, measured vs modelled
FLOPs, top ncu rule) and the ncu join's matches, shown as the report holds them, on the generated
example of tests/ncu_example.py joined to the shared ncu exports (skipped without them); and the
section's one line without ``--ncu``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import dash
import numpy as np
import pytest

pytest.importorskip("dash")

from ncu_example import write_example  # noqa: E402
from test_app_critical_path import _by_id  # noqa: E402

from traceview.app import measured_page as mp  # noqa: E402
from traceview.app.server import create_app  # noqa: E402
from traceview.app.views import AppController  # noqa: E402
from traceview.findings import Options  # noqa: E402

SHARED_NCU = Path("../shared/traces/ncu")


def _controller(tmp: pytest.TempPathFactory, options: Options) -> Iterator[AppController]:
    monkey = pytest.MonkeyPatch()
    monkey.setenv("TRACEVIEW_CACHE_DIR", str(tmp.mktemp("cache")))
    trace = write_example(tmp.mktemp("trace") / "ncu_example.json")
    app = create_app([str(trace)], warm=False, options=options)
    yield app.traceview_controller  # type: ignore[attr-defined]
    monkey.undo()


@pytest.fixture(scope="module")
def joined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppController]:
    if not SHARED_NCU.is_dir():
        pytest.skip(f"{SHARED_NCU} is absent (the shared traces are not on this machine)")
    yield from _controller(tmp_path_factory, Options(ncu=(str(SHARED_NCU),)))


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppController]:
    yield from _controller(tmp_path_factory, Options())


def _efficiency(ctl: AppController) -> list[Any]:
    body, _ = ctl.render_page("/efficiency", "", 0)
    return body


def _text(node: Any) -> str:
    if isinstance(node, str):
        return node
    if isinstance(node, (list, tuple)):
        return " ".join(_text(n) for n in node)
    return _text(getattr(node, "children", None) or "")


def test_the_measured_table_shows_the_reports_rows_and_figures(joined: AppController) -> None:
    body = _efficiency(joined)
    table = _by_id(body, mp.KERNELS_ID)
    assert table is not None
    report = joined._context(0).table(mp.ANALYSIS, "kernels")  # noqa: SLF001
    assert len(report) >= 3 and len(table.data) == len(report)
    names = {c["id"]: c["name"] for c in table.columns}
    assert names["sm_throughput_pct"] == "SOL compute %" and names["memory_throughput_pct"] == "SOL memory %"
    assert names["trace_ns"].startswith("trace time (")
    for shown, (_, want) in zip(table.data, report.iterrows()):
        assert shown["name"] == want["name"] and shown["bound_by"] == want["bound_by"]
        assert shown["bound_by"] in {"compute", "memory", "latency", "unknown"}
        for col in ("sm_throughput_pct", "memory_throughput_pct", "achieved_occupancy_pct", "l2_hit_rate_pct",
                    "dram_bytes", "top_speedup_pct"):
            if want[col] == want[col]:  # not NaN
                assert shown[col] == pytest.approx(float(want[col])), col
            else:
                assert shown[col] is None, col
        assert (shown["top_rule"] or "") == want["top_rule"]
        assert shown["model_off"] == ("yes" if want["model_off"] else "no")
    # some measured kernel has SOL figures and a rule (the shared exports have them)
    assert any(r["sm_throughput_pct"] is not None for r in table.data)
    assert any(r["top_rule"] for r in table.data)


def test_the_join_section_lists_every_record_its_rule_and_the_counts(joined: AppController) -> None:
    body = _efficiency(joined)
    matches = _by_id(body, mp.MATCHES_ID)
    report = joined._context(0).table(mp.ANALYSIS, "matches")  # noqa: SLF001
    assert len(matches.data) == len(report) > 0
    assert [r["rule"] for r in matches.data] == list(report["rule"])
    assert any("grid and block" in (r["rule"] or "") for r in matches.data)
    text = _text(body)
    warnings = joined._context(0).report["analyses"][mp.ANALYSIS]["warnings"]  # noqa: SLF001
    assert warnings and all(str(w) in text for w in warnings)
    assert "ncu join:" in text and "matched by" in text


def test_without_ncu_the_section_says_how_to_get_it(plain: AppController) -> None:
    body = _efficiency(plain)
    assert _by_id(body, mp.KERNELS_ID) is None and _by_id(body, mp.MATCHES_ID) is None
    assert "--ncu FILE|DIR" in _text(body)


# ------------------------------------------------------------------------------ timeline colouring


def test_the_timeline_colours_each_kernel_by_its_records_bound_by(joined: AppController) -> None:
    from ncu_example import KERNELS

    from traceview.app import measured_timeline as mt
    from traceview.app.timeline import SERIES, SERIES_INDEX

    ctx = joined._context(0)  # noqa: SLF001
    index = joined.store.timeline(0)
    table = ctx.table(mt.ANALYSIS, "kernels")
    series = mt.bound_series(index, ctx.full, joined.store.options, table)
    assert series is not None and series.shape == index.series.shape
    # expected, independently: each kernel's name and launch configuration (the example's, found by
    # its duration) looked up in the report's table; a kernel the table has no row for is grey
    grid_of = {(name, dur * 1000): f"({g[0]}, {g[1]}, {g[2]})" for name, g, _b, dur, _n in KERNELS}
    label_of = {(str(r.name), str(r.grid)): str(r.bound_by) for r in table.itertuples()}
    kernels = np.flatnonzero(np.isin(index.series, [SERIES_INDEX["compute"], SERIES_INDEX["communication"]]))
    assert kernels.size == sum(n for *_, n in KERNELS)
    coloured = 0
    for p in kernels.tolist():
        name = index.names[int(index.name_code[p])]
        label = label_of.get((name, grid_of[(name, int(index.end[p] - index.start[p]))]))
        want = mt.BOUND_SERIES.get(label or "unmeasured", "unmeasured")
        assert SERIES[int(series[p])][0] == want, (name, label)
        coloured += label is not None
    assert 0 < coloured < kernels.size  # some measured, some not (another launch configuration, no record)
    others = ~np.isin(np.arange(series.size), kernels)
    assert (series[others] == index.series[others]).all()  # copies, CPU ops: as before


def test_the_colour_choice_redraws_the_timeline_with_its_legend(joined: AppController, plain: AppController) -> None:
    from traceview.app import measured_timeline as mt

    body, _ = joined.render_page("/timeline", "", 0)
    radio = _by_id(body, mt.CONTROL_ID)
    assert radio.value == mt.CLASS and not any(o.get("disabled") for o in radio.options)
    state = _by_id(body, "tl-window").data
    fig, new_state, text, *_ = joined.timeline_action(f"{mt.CONTROL_ID}.value", None, None, state, 0,
                                                      color_value=mt.BOUND)
    assert new_state["color"] == mt.BOUND and (new_state["t0"], new_state["t1"]) == (state["t0"], state["t1"])
    legend = [name for name, _ in fig["layout"]["meta"]["legend"]]
    bounds = set(joined._context(0).table(mt.ANALYSIS, "kernels")["bound_by"])  # noqa: SLF001
    for label in ("compute", "memory", "latency"):
        assert (f"kernel: {label}-bound (ncu)" in legend) == (label in bounds), legend
    assert "kernel: not measured" in legend and "compute kernel" not in legend
    assert "coloured by measured bound-by" in text
    back, back_state, *_ = joined.timeline_action(f"{mt.CONTROL_ID}.value", None, None, new_state, 0,
                                                  color_value=mt.CLASS)
    assert "compute kernel" in [n for n, _ in back["layout"]["meta"]["legend"]]
    # hostile values: one message, the figure kept
    out = joined.timeline_action(f"{mt.CONTROL_ID}.value", None, None, state, 0, color_value="<script>")
    assert out[0] is dash.no_update and "is not one of" in out[2]
    # without --ncu: the choice is there, disabled
    radio = _by_id(plain.render_page("/timeline", "", 0)[0], mt.CONTROL_ID)
    assert radio.value == mt.CLASS and [o["disabled"] for o in radio.options] == [False, True]
