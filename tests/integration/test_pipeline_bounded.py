"""``traceview analyze --no-cache`` cuts each analysis's tables to the rows the report needs as the
analysis ends (``pipeline.analyze(..., whole_tables=False)``, as a job's workers do): the JSON report
must be the one the whole tables give, figure for figure, on the sample traces and every shared
trace. Also: a table cut to its top rows is shown in the order the whole table gives
(``report.table_records`` sorts by the true row count), and the command leaves the cyclic garbage
collector of an in-process caller as it found it (``traceview.runtime.quiet_collector``)."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SAMPLE_TRACES, SHARED_TRACES, require_shared

import traceview
from traceview import pipeline
from traceview.findings import Options
from traceview.render import get_renderer
from traceview.report import REPORT_TABLE_ROWS, table_records

SAMPLES = ["synthetic_4rank", "synthetic_nsys.sqlite", "torch_cpu_mlp.json.gz", "efficiency_roofline.json.gz",
           "regression_pair/new"]
SHARED = sorted([*SHARED_TRACES.glob("kineto/*"), *SHARED_TRACES.glob("nsys/*.sqlite")]) \
    if SHARED_TRACES.exists() else []


def _both(path: Path) -> tuple[traceview.Report, traceview.Report]:
    trace = traceview.load(path, use_cache=False, jobs=1)
    options = Options(top_n=20)
    return pipeline.analyze(trace, options), pipeline.analyze(trace, options, whole_tables=False)


def _same_json(path: Path) -> traceview.Report:
    whole, cut = _both(path)
    render = get_renderer("json")().render
    assert render(cut) == render(whole)
    return cut


@pytest.mark.parametrize("name", SAMPLES)
def test_cut_tables_give_the_same_report_on_samples(name: str) -> None:
    _same_json(SAMPLE_TRACES / name)


@pytest.mark.parametrize("path", SHARED, ids=[p.name for p in SHARED])
def test_cut_tables_give_the_same_report_on_shared_traces(path: Path) -> None:
    _same_json(path)


def test_cut_tables_hold_only_the_rows_a_report_needs() -> None:
    """What the cut is for: a real trace's long per-event tables shrink (none grows)."""
    shared = require_shared()
    whole, cut = _both(shared / "kineto" / "hta_df_index_resolver_v100_rank1.json.gz")
    pairs = [(len(whole.table(a, t)), len(cut.table(a, t))) for a, r in whole.results.items() for t in r.tables]
    assert all(c <= w for w, c in pairs)
    assert any(w > 10 * REPORT_TABLE_ROWS and c < w for w, c in pairs), "no long table was cut"


def test_table_cut_to_its_top_rows_is_shown_in_whole_table_order() -> None:
    rng = np.random.default_rng(7)
    frame = pd.DataFrame({"cost_ns": rng.integers(0, 50, 500), "row": np.arange(500)})
    whole = table_records(frame, max_rows=20, sort_by="cost_ns")
    # the rows a job or whole_tables=False keeps: the top 60, in table order
    kept = frame.iloc[np.sort(np.argsort(-frame["cost_ns"].to_numpy(), kind="stable")[:60])]
    cut = table_records(kept, max_rows=20, sort_by="cost_ns", total_rows=len(frame))
    assert cut == whole and cut["sorted_by"] == "cost_ns" and cut["total_rows"] == 500


def test_analyze_command_leaves_the_collector_as_it_found_it(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from traceview.cli import app

    assert gc.isenabled() and gc.get_freeze_count() == 0
    out = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["analyze", str(SAMPLE_TRACES / "torch_cpu_mlp.json.gz"), "--no-cache",
                                      "-f", "json", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 0
    assert gc.isenabled() and gc.get_freeze_count() == 0
