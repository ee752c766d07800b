"""``traceview sql`` and ``Trace.sql`` (traceview/sqlviews.py, docs/sql.md): the views against the
trace's own tables and the report's figures, computed views built only when named, secrets
scrubbed as the report scrubs them, one-line errors, and the output formats."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import traceview
from conftest import REPO, SAMPLE_TRACES, require_shared
from builders import TraceBuilder
from traceview.analyses import communication, idle_gaps, steps
from traceview.findings import Options
from traceview.model import KINDS, Kind, Trace
from traceview.sqlviews import VIEW_NAMES, VIEWS, SqlError, SqlSession

FOUR_RANK = SAMPLE_TRACES / "synthetic_4rank"
DOCS = REPO / "docs" / "sql.md"
TOKEN = "hf_" + "Zq8rT2vLm9XwP4sKd7NbYc3JfGh6AeRu1o"


@lru_cache(maxsize=None)
def four_rank() -> Trace:
    return traceview.load(FOUR_RANK)


@lru_cache(maxsize=None)
def four_rank_report() -> traceview.Report:
    return traceview.analyze(four_rank(), use_cache=False)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceview.cli", "sql", *args], capture_output=True, text=True,
                          timeout=300)


# ------------------------------------------------------------------------------ views vs the trace


def test_events_view_is_the_events_table() -> None:
    trace = four_rank()
    df = trace.sql("SELECT kind, count(*) AS n, sum(dur_ns) AS total_ns FROM events GROUP BY kind")
    kinds = trace.kind_codes()
    dur = trace.column("dur_ns")
    expected = {KINDS[k]: (int((kinds == k).sum()), int(dur[kinds == k].sum())) for k in np.unique(kinds)}
    got = {r.kind: (r.n, r.total_ns) for r in df.itertuples()}
    assert got == expected
    assert df["total_ns"].dtype == np.int64  # DuckDB's 128-bit sums narrowed back to exact int64
    # row is the position in Trace.events: names, times and end_ns read back at chosen rows
    rows = [0, 17, trace.num_events - 1]
    picked = trace.sql(f"SELECT row, name, start_ns, end_ns FROM events WHERE row IN {tuple(rows)} ORDER BY row")
    names = trace.names()
    start = trace.column("start_ns")
    assert picked["name"].tolist() == [names[r] for r in rows]
    assert picked["start_ns"].tolist() == [int(start[r]) for r in rows]
    assert (picked["end_ns"] - picked["start_ns"]).tolist() == [int(dur[r]) for r in rows]


def available_views() -> list:
    """The views whose analysis this branch has (an analysis's table is a view only where it runs)."""
    import traceview.analyses  # noqa: F401
    from traceview.registry import ANALYSES

    return [v for v in VIEWS if v.table_of is None or v.table_of[0] in ANALYSES]


def test_declared_columns_are_the_views_columns() -> None:
    """VIEWS (what --views and docs/sql.md list) names exactly the columns each view has, in order."""
    conn = SqlSession(four_rank())
    for view in available_views():
        assert [c for c, _ in conn.columns(view.name)] == [c for c, _ in view.columns], view.name


def test_docs_list_every_view_and_column() -> None:
    text = DOCS.read_text()
    sections = dict(re.findall(r"^### ([^\n]+)\n(.*?)(?=^### |^## |\Z)", text, re.S | re.M))
    for view in VIEWS:
        section = next((body for head, body in sections.items() if re.search(rf"\b{view.name}\b", head)), None)
        assert section is not None, f"docs/sql.md has no section for {view.name}"
        missing = [c for c, _ in view.columns if f"`{c}`" not in section]
        assert not missing, f"docs/sql.md, {view.name}: columns not described: {missing}"


def test_plain_queries_run_no_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kw: object) -> None:
        raise AssertionError("an analysis ran for a query that does not need one")

    trace = four_rank()
    conn = SqlSession(trace)
    monkeypatch.setattr(steps, "activity", refuse)
    monkeypatch.setattr(idle_gaps, "compute", refuse)
    monkeypatch.setattr(communication, "cross_rank_inputs", refuse)
    for view in ("events", "launches", "ops", "steps", "ranks", "links", "memory", "counters"):
        conn.arrow(f"SELECT count(*) FROM {view}")
    # a view's name in a string or a column alias is not a use of it
    conn.arrow("SELECT 'kernels' AS gaps, count(*) AS collectives FROM events")
    assert conn.computed == []
    # and the patch bites: a query naming a computed view calls the analyses
    with pytest.raises(AssertionError, match="an analysis ran"):
        conn.arrow("SELECT count(*) FROM kernels")


def test_plain_queries_do_not_even_import_the_analyses() -> None:
    code = ("import sys, traceview\n"
            f"trace = traceview.load({str(FOUR_RANK)!r})\n"
            "trace.sql('SELECT count(*) FROM events JOIN launches ON launches.gpu_row = events.row')\n"
            "print('traceview.analyses' in sys.modules)\n"
            "trace.sql('SELECT count(*) FROM kernels')\n"
            "print('traceview.analyses' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.stdout.split() == ["False", "True"], result.stderr


def test_computed_views_are_built_once_when_named() -> None:
    conn = SqlSession(four_rank())
    conn.arrow("SELECT count(*) FROM gaps g JOIN kernels k ON k.row = g.next_row")
    assert sorted(conn.computed) == ["gaps", "kernels"]
    conn.arrow("SELECT count(*) FROM kernels")
    assert sorted(conn.computed) == ["gaps", "kernels"]


# ------------------------------------------------------------------------------ views vs the report


def kernels_agree(trace: Trace, report: traceview.Report) -> None:
    """Per rank, device and name: the kernels view's count and total time are the kernels analysis's."""
    table = report.table("kernels", "kernels")
    expected = table[table["kind"] == "kernel"][["rank", "device", "name", "count", "total_ns"]]
    got = trace.sql("SELECT rank, device, name, count(*) AS count, sum(dur_ns) AS total_ns FROM kernels "
                    "GROUP BY ALL")
    key = ["rank", "device", "name"]
    merged = expected.astype({"name": object}).merge(got.astype({"name": object}), on=key, how="outer",
                                                     suffixes=("_report", "_sql"), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"]
    assert (merged["count_report"] == merged["count_sql"]).all()
    assert (merged["total_ns_report"] == merged["total_ns_sql"]).all()
    assert len(got) > 0


def test_kernels_agree_with_the_kernels_analysis() -> None:
    kernels_agree(four_rank(), four_rank_report())


def test_kernel_steps_and_categories_agree_with_the_report() -> None:
    trace, report = four_rank(), four_rank_report()
    by_step = report.table("kernels", "kernels_by_step")
    by_step = by_step[by_step["kind"] == "kernel"]
    got = trace.sql("SELECT rank, device, step, name, category, count(*) AS n, sum(dur_ns) AS t FROM kernels "
                    "WHERE step IS NOT NULL GROUP BY ALL")
    merged = by_step.astype({"name": object, "category": object}).merge(
        got.astype({"name": object, "category": object}), on=["rank", "device", "step", "name", "category"])
    assert len(merged) == len(by_step) == len(got) > 0
    assert (merged["count"] == merged["n"]).all() and (merged["total_ns"] == merged["t"]).all()


def test_gaps_are_the_idle_gaps_table() -> None:
    trace, report = four_rank(), four_rank_report()
    gaps = report.table("idle_gaps", "gaps")
    got = trace.sql("SELECT * FROM gaps ORDER BY rank, device, start_ns")
    assert len(got) == len(gaps) > 0
    assert got["dur_ns"].tolist() == gaps["dur_ns"].tolist()
    assert got["cause"].tolist() == gaps["cause"].astype(str).tolist()
    by_cause = report.table("idle_gaps", "by_cause")
    whole = by_cause[by_cause["step"].isna()]
    idle = trace.sql("SELECT rank, device, sum(dur_ns) AS idle_ns FROM gaps GROUP BY ALL ORDER BY rank, device")
    report_idle = whole.groupby(["rank", "device"])["idle_ns"].sum().reset_index()
    assert idle["idle_ns"].tolist() == report_idle["idle_ns"].tolist()


def test_collectives_are_the_communication_table() -> None:
    trace, report = four_rank(), four_rank_report()
    table = report.table("communication", "collectives")
    got = trace.sql("SELECT * FROM collectives")
    assert len(got) == len(table) > 0
    whole = table[table["step"].isna()]
    nccl = trace.sql("SELECT sum(total_ns) AS t, sum(count) AS n FROM collectives WHERE step IS NULL")
    assert int(nccl["t"][0]) == int(whole["total_ns"].sum()) and int(nccl["n"][0]) == int(whole["count"].sum())


def test_launch_delays_are_the_launch_overhead_analysis() -> None:
    """Outside graph replays, each launch link's launch_delay_ns is the analysis's."""
    trace, report = four_rank(), four_rank_report()
    table = report.table("launch_overhead", "launches")
    table = table[~table["graph_replay"]][["api_row", "gpu_row", "launch_delay_ns"]]
    got = trace.sql("SELECT launch_row AS api_row, gpu_row, launch_delay_ns FROM launches WHERE NOT graph")
    merged = table.merge(got, on=["api_row", "gpu_row"], suffixes=("_report", "_sql"))
    assert len(merged) == len(table) == len(got) > 0
    assert (merged["launch_delay_ns_report"].astype(np.int64) == merged["launch_delay_ns_sql"]).all()


# ------------------------------------------------------------------------------ known answers


def hand_made() -> Trace:
    """Two steps; an op launching a kernel (queued 40 ns), a graph launch of two kernels, a memcpy."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.step(2, 1000, 2000)
    op = b.op("aten::mm", 90, 40)
    b.launched("cudaLaunchKernel", 100, 10, 150, 30, name="gemm_a", op=op)
    graph_corr = 5000  # one correlation id for the graph launch and both of its kernels
    graph = b.runtime("cudaGraphLaunch", 1100, 20, correlation=graph_corr)
    k1 = b.kernel(1200, 50, name="graph_k1", correlation=graph_corr)
    k2 = b.kernel(1260, 40, name="graph_k2", correlation=graph_corr)
    b.link(graph, k1)
    b.link(graph, k2)
    b.launched("cudaMemcpyAsync", 1400, 5, 1410, 20, kind=Kind.MEMCPY)
    return b.build()


def test_launches_known_answer() -> None:
    df = hand_made().sql("SELECT api, name, gpu_kind, queue_ns, launch_delay_ns, graph FROM launches "
                         "ORDER BY gpu_start_ns")
    assert df.to_dict("list") == {
        "api": ["cudaLaunchKernel", "cudaGraphLaunch", "cudaGraphLaunch", "cudaMemcpyAsync"],
        "name": ["gemm_a", "graph_k1", "graph_k2", "Memcpy HtoD (Pinned -> Device)"],
        "gpu_kind": ["kernel", "kernel", "kernel", "memcpy"],
        "queue_ns": [150 - 110, 1200 - 1120, 1260 - 1120, 1410 - 1405],
        "launch_delay_ns": [40, 80, 140, 5],
        "graph": [False, True, True, False],
    }


def test_kernels_ops_and_steps_known_answer() -> None:
    trace = hand_made()
    kernels = trace.sql("SELECT name, step, class, category, launch_row FROM kernels ORDER BY start_ns")
    assert kernels["name"].tolist() == ["gemm_a", "graph_k1", "graph_k2"]
    assert kernels["step"].tolist() == [1, 2, 2]
    assert kernels["class"].tolist() == ["compute"] * 3
    assert kernels["category"].tolist() == ["gemm", "other", "other"]
    assert kernels["launch_row"].notna().all()
    ops = trace.sql("SELECT name, runtime_calls, gpu_events, gpu_dur_ns FROM ops")
    assert ops.to_dict("list") == {"name": ["aten::mm"], "runtime_calls": [1], "gpu_events": [1], "gpu_dur_ns": [30]}
    st = trace.sql("SELECT step, dur_ns FROM steps ORDER BY step")
    assert st.to_dict("list") == {"step": [1, 2], "dur_ns": [1000, 1000]}
    # a kernel outside every step has a NULL step (pandas Int64, not a float)
    b = TraceBuilder()
    b.kernel(10, 5, name="alone")
    alone = b.build().sql("SELECT step FROM kernels")
    assert str(alone["step"].dtype) == "Int64" and alone["step"].isna().all()


def test_secret_names_are_scrubbed_as_the_report_scrubs_them() -> None:
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.launched("cudaLaunchKernel", 100, 10, 150, 30, name=f"gemm_{TOKEN}")
    b.op(f"load --token {TOKEN[3:]}", 300, 10)
    trace = b.build()
    everything = trace.sql("SELECT * FROM events")
    text = everything.astype(str).to_string()
    assert TOKEN not in text and TOKEN[3:] not in text
    assert "<redacted>" in text
    # the secret is gone before any query: filters on it find nothing
    assert trace.sql(f"SELECT count(*) AS n FROM events WHERE name LIKE '%{TOKEN[5:15]}%'")["n"][0] == 0
    # the same text as the report's
    report = traceview.analyze(trace, use_cache=False)
    report_names = {r["name"] for r in report["analyses"]["kernels"]["tables"]["kernels"]["rows"]}
    assert set(trace.sql("SELECT DISTINCT name FROM kernels")["name"]) <= report_names


# ------------------------------------------------------------------------------ docs examples


def doc_queries() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", DOCS.read_text(), re.S)


def test_doc_examples_run_on_the_sample_trace() -> None:
    queries = doc_queries()
    assert len(queries) >= 5
    trace, report = four_rank(), four_rank_report()
    results = [trace.sql(q) for q in queries]
    assert all(len(r) > 0 for r in results)
    top, launches, nccl = results[0], results[1], results[2]
    # top kernels per step: at most 3 per (rank, step), the step's largest by the report's per-step table
    assert top.groupby(["rank", "step"]).size().max() == 3
    by_step = report.table("kernels", "kernels_by_step")
    by_step = by_step[by_step["kind"] == "kernel"]
    first = by_step.sort_values("total_ns", ascending=False).groupby(["rank", "step"]).head(1)
    assert set(zip(first["rank"], first["step"], first["total_ns"])) == set(
        zip(*[top.groupby(["rank", "step"]).head(1)[c] for c in ("rank", "step", "total_ns")]))
    # longest queueing first, and it is the longest of all launch links
    assert launches["queue_ns"].is_monotonic_decreasing
    assert launches["queue_ns"].iloc[0] == trace.sql("SELECT max(queue_ns) AS m FROM launches")["m"][0]
    # NCCL time per process group: the communication analysis's whole-trace total
    coll = report.table("communication", "collectives")
    assert int(nccl["total_ns"].sum()) == int(coll[coll["step"].isna()]["total_ns"].sum())


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("query, problem", [
    ("SELEC name FROM events", "Parser Error"),
    ("SELECT * FROM kernel", 'Did you mean "kernels"'),
    ("SELECT nme FROM kernels", "Candidate bindings"),
    ("SELECT * FROM read_csv('/etc/passwd')", "disabled by configuration"),
])
def test_bad_sql_is_one_line_naming_the_views(query: str, problem: str) -> None:
    with pytest.raises(SqlError) as err:
        four_rank().sql(query)
    message = str(err.value)
    assert "\n" not in message and problem in message and "views: events, kernels, launches" in message


def test_cli_bad_sql_exit_2_one_line() -> None:
    result = cli(str(FOUR_RANK), "SELECT * FROM nowhere")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith("traceview: error: SQL: Catalog Error") and "nowhere" in lines[0]
    assert all(v in lines[0] for v in VIEW_NAMES)


@pytest.mark.parametrize("args, problem", [
    ((str(FOUR_RANK),), "give one or more trace paths, then a query"),
    ((str(FOUR_RANK), str(FOUR_RANK)), "the last argument is a path, not a query"),
    ((str(FOUR_RANK), "SELECT 1", "--format", "xml"), "--format: 'xml' is not one of"),
    ((str(FOUR_RANK), "SELECT 1", "--format", "parquet"), "give -o FILE.parquet"),
    ((str(FOUR_RANK), "SELECT 1", "-o", "out.xlsx"), "cannot tell the format"),
])
def test_cli_usage_errors(args: tuple[str, ...], problem: str, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "traceview.cli", "sql", *args], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert problem in result.stderr and len(result.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------------ output formats

QUERY = "SELECT rank, name, step, dur_ns, class FROM kernels ORDER BY rank, start_ns, name"


@pytest.mark.parametrize("ext", ["csv", "json", "parquet"])
def test_formats_round_trip(ext: str, tmp_path: Path) -> None:
    expected = four_rank().sql(QUERY)
    out = tmp_path / f"k.{ext}"
    result = cli(str(FOUR_RANK), QUERY, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert f"wrote {len(expected):,} rows" in result.stderr
    if ext == "csv":
        back = pacsv.read_csv(out).to_pandas()
    elif ext == "json":
        back = pd.DataFrame(json.loads(out.read_text()))
    else:
        back = pq.read_table(out).to_pandas()
    assert list(back.columns) == list(expected.columns)
    assert len(back) == len(expected) > 0
    for col in expected.columns:
        assert back[col].astype(str).tolist() == expected[col].astype(str).tolist(), col


def test_format_to_stdout_and_table(tmp_path: Path) -> None:
    result = cli(str(FOUR_RANK), "SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY kind",
                 "--format", "csv")
    assert result.returncode == 0
    frame = pacsv.read_csv(io.BytesIO(result.stdout.encode())).to_pandas()
    assert frame["n"].sum() == four_rank().num_events
    table = cli(str(FOUR_RANK), "SELECT row, name FROM events ORDER BY row", "--max-rows", "4")
    assert table.returncode == 0
    assert f"{four_rank().num_events:,} rows, the first 4 shown" in table.stdout
    assert "ProfilerStep#2" in table.stdout
    markup = cli(str(FOUR_RANK), "SELECT '[/] index_put_[bold]' AS \"[red]h\"")  # names are not rich markup
    assert markup.returncode == 0 and "[/] index_put_[bold]" in markup.stdout and "[red]h" in markup.stdout
    txt = tmp_path / "t.txt"
    assert cli(str(FOUR_RANK), "SELECT count(*) AS n FROM kernels", "-o", str(txt)).returncode == 0
    n_kernels = int((four_rank().kind_codes() == int(Kind.KERNEL)).sum())
    assert re.search(rf"\b{n_kernels}\b", txt.read_text()) and "1 row" in txt.read_text()


def test_head_streams_the_rest() -> None:
    conn = SqlSession(four_rank())
    head, total = conn.head("SELECT range AS i, range * 2 AS j FROM range(300000)", 7)
    assert total == 300000 and head.num_rows == 7 and head.column("i").to_pylist() == list(range(7))
    kernels, n = conn.head("SELECT name, sum(dur_ns) AS t FROM kernels GROUP BY name ORDER BY t DESC", 3)
    assert n == conn.arrow("SELECT count(DISTINCT name) FROM kernels").column(0)[0].as_py()
    assert kernels.schema.field("t").type == "int64"


def test_cli_views_lists_every_view() -> None:
    plain = cli("--views")
    assert plain.returncode == 0
    assert all(re.search(rf"^{v}: ", plain.stdout, re.M) for v in VIEW_NAMES)
    typed = cli(str(FOUR_RANK), "--views")
    assert typed.returncode == 0 and "BIGINT" in typed.stdout and "VARCHAR" in typed.stdout
    assert all(re.search(rf"^{v}: ", typed.stdout, re.M) for v in VIEW_NAMES)


def test_python_entry_points_agree() -> None:
    q = "SELECT rank, count(*) AS n FROM kernels GROUP BY rank ORDER BY rank"
    a = traceview.sql(FOUR_RANK, q)
    b = four_rank().sql(q)
    assert isinstance(a, pd.DataFrame) and a.equals(b)
    assert "sql" in traceview.__all__


# ------------------------------------------------------------------------------ Nsight and shared traces


def test_nsight_sample() -> None:
    trace = traceview.load(SAMPLE_TRACES / "synthetic_nsys.sqlite")
    kernels_agree(trace, traceview.analyze(trace, use_cache=False))
    n_links = len(trace.launch_links()[0])
    assert trace.sql("SELECT count(*) AS n FROM launches")["n"][0] == n_links > 0


@pytest.mark.parametrize("name", [
    "kineto/hta_df_index_resolver_v100_rank1.json.gz",
    "kineto/tracelens_vllm_piecewise_cudagraph.json.gz",
    "nsys/torchrun_2xh100_nccl_2026.2.sqlite",
])
def test_shared_traces(name: str) -> None:
    path = require_shared() / name
    trace = traceview.load(path)
    report = traceview.analyze(trace, use_cache=False)
    kernels_agree(trace, report)
    api, gpu = trace.launch_links()
    launches = trace.sql("SELECT launch_row, gpu_row, graph FROM launches")
    assert len(launches) == len(api)
    # graph rows are exactly the links from graph launch calls (the analysis's rule)
    names = trace.names()
    from traceview.analyses.launch_overhead import GRAPH_LAUNCH_API

    is_graph = np.array([bool(GRAPH_LAUNCH_API.search(names[r])) for r in api], dtype=bool)
    assert int(launches["graph"].sum()) == int(is_graph.sum())
    gaps = report.table("idle_gaps", "gaps")
    assert trace.sql("SELECT count(*) AS n, sum(dur_ns) AS t FROM gaps").iloc[0].tolist() == [
        len(gaps), int(gaps["dur_ns"].sum()) if len(gaps) else None]


def shared_inputs() -> list[str]:
    from conftest import SHARED_TRACES

    if not SHARED_TRACES.exists():
        return ["(shared traces absent)"]
    files = sorted(str(p.relative_to(SHARED_TRACES)) for p in SHARED_TRACES.glob("kineto/*.json.gz"))
    files += sorted(str(p.relative_to(SHARED_TRACES)) for p in SHARED_TRACES.glob("nsys/*.sqlite"))
    return files + ["kineto/param_dlrm_8ranks_v100", "kineto/hta_trace_filter_2ranks"]


@pytest.mark.parametrize("name", shared_inputs())
def test_every_view_on_every_shared_trace(name: str) -> None:
    trace = traceview.load(require_shared() / name)
    conn = SqlSession(trace)
    counts = {v.name: conn.arrow(f"SELECT count(*) FROM {v.name}").column(0)[0].as_py() for v in available_views()}
    assert counts["events"] == trace.num_events and counts["links"] == trace.links.num_rows
    assert counts["ranks"] == len(trace.ranks) and counts["steps"] == trace.steps.num_rows
    assert counts["memory"] == trace.memory.num_rows and counts["counters"] == trace.counters.num_rows
    assert counts["kernels"] == int((trace.kind_codes() == int(Kind.KERNEL)).sum())
    assert counts["launches"] == len(trace.launch_links()[0])
    assert counts["ops"] == int((trace.kind_codes() == int(Kind.CPU_OP)).sum())


def test_options_reach_the_computed_views() -> None:
    """A step marker chooses the steps the views number kernels by."""
    trace = four_rank()
    default = trace.sql("SELECT count(DISTINCT step) AS n FROM kernels WHERE rank = 0")["n"][0]
    marked = trace.sql("SELECT count(DISTINCT step) AS n FROM steps WHERE rank = 0", step_marker="^nothing$")
    assert default == 3 and marked["n"][0] == 0
    opts = Options(step_marker="^nothing$")
    assert SqlSession(trace, opts).arrow("SELECT count(*) FROM kernels WHERE step IS NOT NULL").column(0)[0].as_py() \
        == 0


# ------------------------------------------------------------------------------ the critical path

PATH_VIEWS = {"critical_path_segments": "segments", "critical_path_steps": "steps", "critical_path_whatif": "whatif"}


@pytest.fixture
def critical_path(monkeypatch: pytest.MonkeyPatch) -> str:
    """The critical_path analysis: the real one when this branch has it, else a contract-shaped
    stand-in registered for the test (tests/cp_synthetic.py); which one, as the fixture's value."""
    import traceview.analyses  # noqa: F401
    from traceview.registry import ANALYSES, AnalysisSpec

    if "critical_path" in ANALYSES:
        return "real"
    from cp_synthetic import synthetic_result

    def run(ctx):  # the steps as the temporal analysis has them: the trace's step ranges
        steps_table = ctx.trace.find_steps(ctx.options.step_marker).to_pandas()
        return synthetic_result(ctx.trace, steps_table[["rank", "step", "start_ns", "end_ns"]])

    monkeypatch.setitem(ANALYSES, "critical_path", AnalysisSpec(name="critical_path", title="Critical path", run=run))
    return "stand-in"


def test_critical_path_views_are_the_analysis_tables(critical_path: str) -> None:
    trace = four_rank()
    report = traceview.analyze(trace, use_cache=False)
    conn = SqlSession(trace)
    declared = {v.name: [c for c, _ in v.columns] for v in VIEWS}
    for view, table in PATH_VIEWS.items():
        expected = report.table("critical_path", table)
        assert len(expected), (critical_path, table)
        got = conn.df(f"SELECT * FROM {view}")
        assert list(got.columns) == declared[view]
        assert len(got) == len(expected)
        keys = [c for c in ("rank", "step", "start_ns", "scenario") if c in got]
        got = got.sort_values(keys).reset_index(drop=True)
        want = expected.sort_values(keys).reset_index(drop=True)[declared[view]]
        for column in ("rank", "start_ns", "dur_ns", "step_ns", "path_ns", "saving_ns", "row"):
            if column in got:
                assert got[column].astype("int64").tolist() == want[column].astype("int64").tolist(), column
    assert sorted(conn.computed) == sorted(PATH_VIEWS) and list(conn.results) == ["critical_path"]


def test_critical_path_segments_add_up_to_the_steps(critical_path: str) -> None:
    df = four_rank().sql("""
        SELECT s.rank, s.step, s.step_ns, sum(g.dur_ns) AS path_ns, count(*) AS segments
        FROM critical_path_steps s JOIN critical_path_segments g ON g.rank = s.rank AND g.step = s.step
        GROUP BY ALL ORDER BY s.rank, s.step""")
    assert len(df) == 12  # 4 ranks x 3 steps
    assert (df["path_ns"] == df["step_ns"]).all() and (df["segments"] > 0).all()
    kernels = four_rank().sql("""
        SELECT count(*) AS n FROM critical_path_segments g JOIN events e ON e.row = g.row
        WHERE g.row >= 0 AND (e.rank <> g.rank OR e.name <> g.name)""")
    assert kernels["n"][0] == 0  # every segment's row is its event


def counted_analyses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the analyses the SQL views run from now on, in order (``analysis_result`` wrapped)."""
    import traceview.sqlviews as sqlviews

    calls: list[str] = []
    real = sqlviews.analysis_result
    monkeypatch.setattr(sqlviews, "analysis_result", lambda ctx, name: calls.append(name) or real(ctx, name))
    return calls


def test_critical_path_is_computed_once_and_only_when_named(critical_path: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counted_analyses(monkeypatch)
    conn = SqlSession(four_rank())
    conn.arrow("SELECT count(*) FROM steps")
    conn.arrow("SELECT 'critical_path_steps' AS x FROM events LIMIT 1")
    assert conn.computed == [] and calls == []
    conn.arrow("SELECT count(*) FROM critical_path_steps")
    conn.arrow("SELECT count(*) FROM critical_path_whatif w JOIN critical_path_segments s USING (rank)")
    assert calls == ["critical_path"] and sorted(conn.computed) == sorted(PATH_VIEWS)


def test_critical_path_names_are_scrubbed(critical_path: str) -> None:
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.launched("cudaLaunchKernel", 100, 10, 150, 700, name=f"gemm_{TOKEN}")
    trace = b.build()
    conn = SqlSession(trace)
    text = " ".join(conn.df(f"SELECT * FROM {v}").astype(str).to_string() for v in PATH_VIEWS)
    assert TOKEN not in text and TOKEN[3:] not in text
    names = set(conn.df("SELECT name FROM critical_path_segments WHERE row >= 0")["name"])
    assert names and all("<redacted>" in n for n in names if n.startswith("gemm_"))


def test_without_the_analysis_a_path_view_is_one_line() -> None:
    import traceview.analyses  # noqa: F401
    from traceview.registry import ANALYSES

    if "critical_path" in ANALYSES:
        pytest.skip("the critical_path analysis is on this branch")
    with pytest.raises(SqlError, match="no critical_path analysis") as err:
        four_rank().sql("SELECT * FROM critical_path_segments")
    assert "\n" not in str(err.value)


def test_cli_queries_the_critical_path() -> None:
    import traceview.analyses  # noqa: F401
    from traceview.registry import ANALYSES

    if "critical_path" not in ANALYSES:
        pytest.skip("the critical_path analysis is not on this branch yet")
    result = cli(str(FOUR_RANK), "SELECT category, sum(dur_ns) AS ns FROM critical_path_segments GROUP BY category "
                 "ORDER BY ns DESC", "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    steps = traceview.analyze(FOUR_RANK, use_cache=False).table("critical_path", "steps")
    assert sum(r["ns"] for r in rows) == int(steps.loc[steps["step"].notna(), "step_ns"].sum())


# ------------------------------------------------------------------------------ modules (ranges)

MODULE_VIEWS = {"ranges": "ranges", "range_gpu": "range_gpu"}


def module_trace(module: str = "Net_0") -> Trace:
    """One step: ``nn.Module: Net_0`` with ``Block_0`` inside it, a kernel launched under each."""
    b = TraceBuilder()
    b.step(1, 0, 10_000)
    b.op(f"nn.Module: {module}", 100, 9_000, kind=Kind.PYTHON_FUNCTION)
    b.op("nn.Module: Block_0", 200, 4_000, kind=Kind.PYTHON_FUNCTION)
    b.launched("cudaLaunchKernel", 300, 50, 400, 2_000, name="gemm_block")
    b.launched("cudaLaunchKernel", 5_000, 50, 5_100, 1_000, name="gemm_net")
    return b.build()


@pytest.fixture
def modules_analysis(monkeypatch: pytest.MonkeyPatch) -> str:
    """The modules analysis: the real one when this branch has it, else a contract-shaped stand-in
    registered for the test (tests/mod_synthetic.py); which one, as the fixture's value."""
    import traceview.analyses  # noqa: F401
    from traceview.registry import ANALYSES, AnalysisSpec

    if "modules" in ANALYSES:
        return "real"
    from mod_synthetic import synthetic_result

    def run(ctx):
        steps_table = ctx.trace.find_steps(ctx.options.step_marker).to_pandas()
        return synthetic_result(ctx.trace, steps_table[["rank", "step", "start_ns", "end_ns"]])

    monkeypatch.setitem(ANALYSES, "modules", AnalysisSpec(name="modules", title="Modules", run=run))
    return "stand-in"


def test_module_views_are_the_analysis_tables(modules_analysis: str) -> None:
    trace = module_trace()
    report = traceview.analyze(trace, use_cache=False)
    conn = SqlSession(trace)
    declared = {v.name: [c for c, _ in v.columns] for v in VIEWS}
    for view, table in MODULE_VIEWS.items():
        expected = report.table("modules", table)
        assert len(expected), (modules_analysis, table)
        got = conn.df(f"SELECT * FROM {view} ORDER BY rank, range_id")
        assert list(got.columns) == declared[view] and len(got) == len(expected)
        want = expected.sort_values(["rank", "range_id"]).reset_index(drop=True)
        for column in ("range_id", "depth", "start_ns", "end_ns", "inclusive_ns", "exclusive_ns"):
            if column in got:
                assert got[column].astype("int64").tolist() == want[column].astype("int64").tolist(), column
        assert got["type_path"].tolist() == want["type_path"].astype(str).tolist()
    assert sorted(conn.computed) == sorted(MODULE_VIEWS) and list(conn.results) == ["modules"]


def test_module_views_join_the_tree(modules_analysis: str) -> None:
    if modules_analysis != "real":
        pytest.skip("the tree's rows and launches are the analysis's own")
    df = module_trace().sql("""
        SELECT r.path, r.parent_id, g.inclusive_ns, g.exclusive_ns, g.kernels
        FROM ranges r JOIN range_gpu g USING (rank, range_id) ORDER BY r.depth""")
    assert df["path"].tolist() == ["Net_0", "Net_0/Block_0"]
    assert df["parent_id"].tolist() == [-1, 0]
    assert df["inclusive_ns"].tolist() == [3_000, 2_000] and df["exclusive_ns"].tolist() == [1_000, 2_000]
    rows = module_trace().sql("SELECT count(*) AS n FROM ranges r JOIN events e ON e.row = r.row "
                              "WHERE e.name NOT LIKE 'nn.Module: %'")
    assert rows["n"][0] == 0  # every range's row is its event


def test_module_views_are_computed_once_and_only_when_named(modules_analysis: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counted_analyses(monkeypatch)
    conn = SqlSession(module_trace())
    conn.arrow("SELECT 'ranges' AS x FROM events LIMIT 1")
    assert conn.computed == [] and calls == []
    conn.arrow("SELECT count(*) FROM ranges")
    conn.arrow("SELECT count(*) FROM range_gpu g JOIN ranges r USING (rank, range_id)")
    assert calls == ["modules"] and sorted(conn.computed) == sorted(MODULE_VIEWS)


def test_module_names_are_scrubbed(modules_analysis: str) -> None:
    conn = SqlSession(module_trace(f"Net_{TOKEN}"))
    text = " ".join(conn.df(f"SELECT * FROM {v}").astype(str).to_string() for v in MODULE_VIEWS)
    assert TOKEN not in text and TOKEN[3:] not in text
    if modules_analysis == "real":
        assert "<redacted>" in text


def test_cli_queries_the_layers_of_qwen() -> None:
    import traceview.analyses  # noqa: F401
    from traceview.registry import ANALYSES

    if "modules" not in ANALYSES:
        pytest.skip("the modules analysis is not on this branch yet")
    path = require_shared() / "kineto" / "tracelens_qwen05b_h100.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    result = cli(str(path), "SELECT type_path, count(*) AS n, sum(inclusive_ns) AS ns FROM range_gpu GROUP BY ALL "
                 "ORDER BY ns DESC LIMIT 3", "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    report = traceview.analyze(str(path))
    paths = report.table("modules", "type_paths").groupby("type_path", observed=True)["inclusive_ns"].sum()
    for row in rows:  # the instances of a type path sum to its type_paths row
        assert row["ns"] == paths[row["type_path"]]
    assert rows[1]["type_path"] == "Qwen2Model/Qwen2DecoderLayer" and rows[1]["n"] == 24
