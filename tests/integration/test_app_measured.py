"""The Efficiency page's measured section in the app, server side: the ``measured`` analysis's
kernels table (SOL compute/memory %, occupancy, L2 hit, DRAM bytes, bound-by, measured vs modelled
FLOPs, top ncu rule) and the ncu join's matches, shown as the report holds them, on the generated
example of tests/ncu_example.py joined to the shared ncu exports (skipped without them); and the
section's one line without ``--ncu``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

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
