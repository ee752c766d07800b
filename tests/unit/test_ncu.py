"""Nsight Compute exports (parsers/ncu) and their join to a trace's kernels (analyses/measured.py)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import traceview
from builders import TraceBuilder
from conftest import REPO, context, require_shared
from ncu_example import write_example
from traceview.errors import TraceFormatError
from traceview.findings import Options
from traceview.parsers.ncu import read_ncu
from traceview.parsers.ncu.reading import read_file

SHARED_NCU = Path("../shared/traces/ncu")
#: unit as written -> factor to its base unit, written out here independently of parsers/ncu/units.py
FACTORS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Gbyte/s": 1e9, "Mbyte/s": 1e6, "us": 1e3,
           "usecond": 1e3, "msecond": 1e6, "ms": 1e3 * 1e3, "nsecond": 1, "ns": 1, "Ghz": 1e9, "Mhz": 1e6,
           "%": 1, "cycle": 1, "warp": 1, "block": 1, "cluster": 1, "": 1}
BASES = {"byte": "byte", "Kbyte": "byte", "Mbyte": "byte", "Gbyte": "byte", "Gbyte/s": "byte/s", "Mbyte/s": "byte/s",
         "us": "ns", "usecond": "ns", "msecond": "ns", "ms": "ns", "nsecond": "ns", "ns": "ns", "Ghz": "hz",
         "Mhz": "hz"}


def shared_csvs() -> list[Path]:
    folder = require_shared() / "ncu"
    return sorted(folder.glob("*.csv"))


def recount(path: Path) -> tuple[list[tuple[str, str, str, str]], int]:
    """(metric rows as (section, metric, unit, value), rule rows) read with the csv module."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    metrics = [(r["Section Name"], r["Metric Name"], r["Metric Unit"] or "", r["Metric Value"] or "")
               for r in rows if (r["Metric Name"] or "").strip()]
    rules = sum(1 for r in rows if not (r["Metric Name"] or "").strip() and (r.get("Rule Name") or "").strip())
    assert len(metrics) + rules == len(rows)
    return metrics, rules


def test_every_shared_csv_loads_with_every_value_and_unit(tmp_path):
    files = shared_csvs()
    assert len(files) == 10
    for path in files:
        want, rules = recount(path)
        got = read_file(path)
        assert got.counts["metric_rows"] == len(want) and got.counts["rule_rows"] == rules
        assert len(got.metrics) == len(want) and len(got.rules) == rules
        for (section, metric, unit, value), row in zip(want, got.metrics.itertuples(index=False)):
            assert (row.section, row.metric, row.raw_unit, row.raw_value) == (section, metric, unit, value)
            assert row.unit == BASES.get(unit, unit)
            if value == "n/a":
                assert np.isnan(row.value)
            else:
                assert row.value == pytest.approx(float(value.replace(",", "")) * FACTORS[unit], rel=1e-12)


def test_a_directory_merges_the_details_and_metrics_exports_of_one_kernel():
    ncu = read_ncu([require_shared() / "ncu"])
    kernels = ncu.kernels
    assert len(kernels) == 5  # five kernels, each in a details and a metrics export
    assert kernels["invocation"].tolist() == [0] * 5
    merged = ncu.files[-1][2]
    assert merged["records"] == 5 and merged["duplicate_metric_rows"] == 5 * 11
    assert merged["duplicate_metric_rows_differing"] == 0
    assert len(ncu.metrics) == 5 * 44
    gemm = ncu.metrics[(ncu.metrics["grid_x"] == 152) & (ncu.metrics["metric"] == "dram__bytes_read.sum")]
    assert gemm["value"].tolist() == [3.35e6]


RAW = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
       '"Device","CC","dram__bytes_read.sum","gpu__time_duration.sum",'
       '"sm__sass_thread_inst_executed_op_ffma_pred_on.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed"\n'
       '"","","","","","","","","","","","Kbyte","usecond","inst","%"\n'
       '"0","11","python","host-a","gemm_k","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","1,024.5","2.5","1000","71.5"\n'
       '"1","11","python","host-a","gemm_k","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","2,000","3","n/a","40"\n')


def test_the_raw_page_layout_with_its_units_row(tmp_path):
    path = tmp_path / "raw.csv"
    path.write_text("==PROF== Connected to process 11\n==PROF== Disconnected\n" + RAW)
    ncu = read_ncu([path])
    m = ncu.metrics
    assert ncu.files[0][1] == "raw" and ncu.files[0][2]["preamble_lines_skipped"] == 2
    assert len(m) == 8 and sorted(set(m["invocation"])) == [0, 1]
    first = m[m["ncu_id"] == 0].set_index("metric")
    assert first.loc["dram__bytes_read.sum", "value"] == pytest.approx(1024.5e3)
    assert first.loc["gpu__time_duration.sum", "unit"] == "ns"
    assert first.loc["gpu__time_duration.sum", "value"] == pytest.approx(2500.0)
    assert "host-a" not in m.to_string()  # host names are never kept


BAD = {
    "text file": ("hello, world\n", "is not an Nsight Compute CSV export"),
    "missing columns": ('"ID","Kernel Name","Section Name","Metric Name"\n"0","k","S","m"\n', "without the column"),
    "header only": ('"ID","Process ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n',
                    "without any kernel rows"),
    "no metrics": ('"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
                   '"0","k","S","m","%","1"\n"1","j","S","m","%","n/a"\n', "without metric values (ID 1)"),
    "mixed units": ('"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
                    '"0","k","S","m","byte","1"\n"1","k","S","m","%","2"\n', "units of different kinds"),
    "long row": ('"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
                 '"0","k","S","m","%","1","extra"\n', "Expected 6 fields in line 2, saw 7"),
    "bad grid": ('"ID","Kernel Name","Grid Size","Section Name","Metric Name","Metric Unit","Metric Value"\n'
                 '"0","k","(1, 2)","S","m","%","1"\n', "Grid Size that is not (x, y, z)"),
    "raw without units": ('"ID","Kernel Name","dram__bytes.sum"\n"0","k","5"\n', "without its units row"),
}


def test_crlf_a_bom_and_a_megabyte_kernel_name_read(tmp_path):
    src = shared_csvs()[0]
    crlf = tmp_path / "crlf.csv"
    crlf.write_bytes(("\ufeff" + src.read_text().replace("\n", "\r\n")).encode())
    assert read_ncu([crlf]).metrics[["raw_unit", "raw_value"]].equals(read_ncu([src]).metrics[["raw_unit", "raw_value"]])
    big = tmp_path / "big.csv"
    name = "k" * 1_000_000
    big.write_text('"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
                   f'"0","{name}","S","m","%","1"\n')
    assert read_ncu([big]).metrics["kernel"].tolist() == [name]


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_export_is_one_clear_error(tmp_path, case):
    text, message = BAD[case]
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_ncu([path])


def test_the_cli_refuses_a_bad_export_with_one_line_and_exit_2(tmp_path):
    trace = write_example(tmp_path / "trace.json")
    bad = tmp_path / "bad.csv"
    bad.write_text(BAD["mixed units"][0])
    proc = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(trace), "--ncu", str(bad)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "units of different kinds" in proc.stderr
    assert "Traceback" not in proc.stderr
    report = tmp_path / "x.ncu-rep"
    report.write_bytes(b"\x00binary")
    env_path = {"PATH": "/nonexistent"}
    proc = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(trace), "--ncu", str(report)],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=env_path)
    assert proc.returncode == 2 and "run: ncu --import x.ncu-rep --csv --page details > x.csv" in proc.stderr


def test_an_ncu_file_alone_is_described_by_info_and_refused_by_analyze():
    path = shared_csvs()[0]
    info = subprocess.run([sys.executable, "-m", "traceview.cli", "info", str(path)], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert info.returncode == 0, info.stderr
    assert "Nsight Compute export" in info.stdout and "kernel ID 0" in info.stdout
    proc = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(path)], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 2 and "--ncu" in proc.stderr and "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- the join


def _builder_trace(with_config: bool = True) -> traceview.Trace:
    """Kernels of the shared exports under Kineto-style names, built with TraceBuilder."""
    from ncu_example import KERNELS

    b = TraceBuilder()
    t = 1000
    for name, grid, block, dur, count in KERNELS:
        for _ in range(count):
            dims = dict(zip(("grid_x", "grid_y", "grid_z"), grid)) | dict(zip(("block_x", "block_y", "block_z"), block))
            b.kernel(t, dur * 1000, name=name, **(dims if with_config else {}))
            t += dur * 1000 + 2000
    return b.build()


def test_the_join_states_its_rules_and_counts_both_sides():
    require_shared()
    result = traceview.analyze(_builder_trace(), Options(ncu=(str(SHARED_NCU),)), cache=False)
    kernels = result.table("measured", "kernels")
    matches = result.table("measured", "matches")
    assert len(kernels) == 3 and kernels["kernels"].tolist() == [3, 2, 4]
    rules = dict(zip(kernels["grid"], kernels["match_rule"]))
    assert rules["(152, 4, 1)"] == "exact name + grid and block"
    assert rules["(332, 1, 1)"] == rules["(42, 1, 1)"] == "normalised name + grid and block"
    assert (kernels["measured_on_invocation"] == 0).all()
    unmatched = matches[matches["matched"] == 0]
    assert sorted(unmatched["reason"]) == ["no trace kernel of this name"] * 2
    warnings = result["analyses"]["measured"]["warnings"]
    assert any("3 of 12 trace kernels have no ncu record" in w for w in warnings)
    assert any("normalised name + grid and block (7 trace kernels)" in w for w in warnings)
    gemm = kernels[kernels["grid"] == "(152, 4, 1)"].iloc[0]
    # measured in the export: SOL 41.49% compute, 61.83% memory (L2-bound) -> memory
    assert (gemm["sm_throughput_pct"], gemm["memory_throughput_pct"], gemm["bound_by"]) == (41.49, 61.83, "memory")
    assert gemm["achieved_occupancy_pct"] == 15.18 and gemm["l2_hit_rate_pct"] == 95.40
    assert gemm["dram_bytes"] == 3.35e6 and gemm["measured_flops"] == 1_275_068_416
    assert gemm["duration_ns"] == pytest.approx(23420.0)


def test_without_a_launch_configuration_the_name_alone_matches_and_says_so():
    require_shared()
    result = traceview.analyze(_builder_trace(with_config=False), Options(ncu=(str(SHARED_NCU),)), cache=False)
    kernels = result.table("measured", "kernels")
    assert set(kernels["match_rule"]) == {"exact name + name only: no launch configuration in the trace",
                                          "normalised name + name only: no launch configuration in the trace"}
    # without grids the (76, 4, 1) Kernel2 launch joins the profiled (152, 4, 1) one's name
    assert int(kernels["kernels"].sum()) == 10


def test_invocation_order_takes_the_kth_record_for_the_kth_kernel(tmp_path):
    path = tmp_path / "raw.csv"
    path.write_text(RAW)
    b = TraceBuilder()
    for i in range(3):
        b.kernel(1000 + i * 10_000, 5000, name="gemm_k", grid_x=64, grid_y=1, grid_z=1, block_x=128, block_y=1,
                 block_z=1)
    ctx = context(b.build(), Options(ncu=(str(path),)))
    from traceview.analyses import measured

    result = measured.analyze(ctx)
    kernels = result.tables["kernels"].sort_values("measured_on_invocation")
    assert kernels["measured_on_invocation"].tolist() == [0, 1]
    assert kernels["kernels"].tolist() == [1, 2]  # the third kernel takes the last record
    first = kernels.iloc[0]
    assert first["measured_flops"] == 2000  # 1000 FFMA instructions, 2 FLOPs each
    assert first["bound_by"] == "compute" and kernels.iloc[1]["bound_by"] == "latency"


def test_rule_results_become_findings_costed_on_the_trace_time(tmp_path):
    require_shared()
    trace = write_example(tmp_path / "trace.json")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(trace), "--ncu",
                           str(SHARED_NCU), "--format", "json", "-o", str(out), "--no-cache"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    found = [f for f in report["findings"] if f["code"] == "ncu_rule"]
    assert len(found) == 3
    gemm = next(f for f in found if f["evidence"]["grid"] == "(332, 1, 1)")
    speedup = gemm["evidence"]["estimated_speedup_pct"]
    # 3 kernels of 300 us in the trace: the cost is the speedup's share of them
    assert gemm["evidence"]["trace_ns"] == 900_000
    assert gemm["cost_ns_per_step"] == pytest.approx(900_000 * speedup / 100, abs=3)
    assert "measured" in report["analyses"] and report["analyses"]["measured"]["tables"]["kernels"]


def test_the_report_key_follows_the_ncu_exports(tmp_path):
    from traceview.report_cache import report_key

    trace = write_example(tmp_path / "trace.json")
    export = tmp_path / "raw.csv"
    export.write_text(RAW)
    plain = report_key([trace], Options())
    joined = report_key([trace], Options(ncu=(str(export),)))
    export.write_text(RAW + RAW.splitlines()[-1].replace('"1","11"', '"2","11"') + "\n")
    edited = report_key([trace], Options(ncu=(str(export),)))
    assert len({plain, joined, edited}) == 3


def test_measured_and_modelled_flops_side_by_side_with_a_flag_beyond_20_percent(tmp_path):
    path = tmp_path / "raw.csv"
    path.write_text(RAW)
    b = TraceBuilder()
    for i in range(2):
        b.kernel(1000 + i * 10_000, 5000, name="gemm_k", grid_x=64, grid_y=1, grid_z=1, block_x=128, block_y=1,
                 block_z=1)
    ctx = context(b.build(), Options(ncu=(str(path),)))
    from traceview.analyses import measured
    from traceview.analyses.steps import activity

    # the efficiency analysis's model, given here: 1900 FLOPs for the first kernel (ncu: 2000, within
    # 20%), 100 for the second (ncu counted none of its FFMAs: n/a -> no measured FLOPs)
    ctx.values["efficiency.kernel_flops"] = np.array([1900.0, 100.0])[: len(activity(ctx))]
    kernels = measured.analyze(ctx).tables["kernels"].sort_values("measured_on_invocation")
    assert kernels["modelled_flops"].tolist() == [1900.0, 100.0]
    assert kernels.iloc[0]["flops_ratio"] == pytest.approx(2000 / 1900)
    assert not kernels.iloc[0]["model_off"]
    assert np.isnan(kernels.iloc[1]["measured_flops"]) and not kernels.iloc[1]["model_off"]
    ctx.values["efficiency.kernel_flops"] = np.array([1000.0, 100.0])
    kernels = measured.analyze(ctx).tables["kernels"].sort_values("measured_on_invocation")
    assert kernels.iloc[0]["flops_ratio"] == pytest.approx(2.0) and kernels.iloc[0]["model_off"]


def test_a_job_rank_by_rank_gives_the_same_measured_section(tmp_path):
    require_shared()
    from builders import write_kineto
    from ncu_example import kernel_events

    for r in (0, 1):
        write_kineto(tmp_path / f"rank{r}.json", kernel_events(), distributedInfo={"rank": r, "world_size": 2})
    sections = []
    for extra in ([], ["--workers", "2"]):
        out = tmp_path / f"r{len(extra)}.json"
        proc = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(tmp_path), "--ncu",
                               str(SHARED_NCU), "--no-cache", "--format", "json", "-o", str(out), *extra],
                              capture_output=True, text=True, timeout=300, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        sections.append(json.loads(out.read_text())["analyses"]["measured"])
    assert sections[0] == sections[1]
    # the ncu records and metrics once, not once per batch of ranks; the matches counted over both ranks
    assert sections[0]["tables"]["kernel_metrics"]["total_rows"] == 220
    assert "6 of 24 trace kernels have no ncu record" in " ".join(sections[0]["warnings"])


# ----------------------------------------------------------------------------- CUPTI range events


def range_trace(path: Path) -> Path:
    """A Kineto trace as the CUPTI range profiler writes it (CuptiRangeProfiler.cpp): one
    cuda_profiler_range event per profiled kernel, its metrics as args, times spread evenly."""
    from builders import write_kineto
    from ncu_example import KERNELS

    gemm = KERNELS[1][0]
    events = []
    for i, (ffma, pct) in enumerate(((5_000, 71.5), (7_000, 20.0))):
        events.append({"ph": "X", "cat": "cuda_profiler_range", "name": gemm, "pid": 0, "tid": 0,
                       "ts": 100 + 10 * i, "dur": 10, "args": {
                           "device": 0, "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": ffma,
                           "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 100,
                           "sm__throughput.avg.pct_of_peak_sustained_elapsed": pct,
                           "dram__bytes_read.sum": 4096, "sm__inst_executed_pipe_tensor.sum": 12}})
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 90, "dur": 50})
    return write_kineto(path, events)


def test_cupti_range_events_are_kernel_records_joined_by_name_and_order(tmp_path):
    ranges = range_trace(tmp_path / "ranges.json.gz")
    ncu = read_ncu([ranges])
    layout, counts = ncu.files[0][1], ncu.files[0][2]
    assert layout == "kineto cuda_profiler_range"
    assert counts["range_events"] == 2 and counts["other_events"] == 1 and counts["metric_values"] == 10
    units = dict(zip(ncu.metrics["metric"], ncu.metrics["unit"]))
    assert units["dram__bytes_read.sum"] == "byte" and units["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == "%"
    assert sorted(set(ncu.metrics["invocation"])) == [0, 1]
    trace = write_example(tmp_path / "trace.json")
    report = traceview.analyze(trace, Options(ncu=(str(ranges),)), cache=False)
    kernels = report.table("measured", "kernels").sort_values("measured_on_invocation")
    # Kineto names the ranges by the demangled name, as the kernels of the trace
    assert kernels["match_rule"].unique().tolist() == ["exact name + name only: no launch configuration in the record"]
    assert kernels["kernels"].tolist() == [1, 2]  # three launches: the 1st takes record 0, the others record 1
    assert kernels["measured_flops"].tolist() == [2 * 5_000 + 100, 2 * 7_000 + 100]
    assert kernels["bound_by"].tolist() == ["compute", "latency"]


def test_a_kineto_trace_without_range_events_is_one_clear_error(tmp_path):
    trace = write_example(tmp_path / "trace.json")
    with pytest.raises(TraceFormatError, match="without CUPTI range-profiler events"):
        read_ncu([trace])


def test_convert_writes_an_ncu_exports_metrics_as_parquet(tmp_path):
    import pyarrow.parquet as pq

    path = shared_csvs()[0]
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "traceview.cli", "convert", str(path), "-o", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    metrics = pq.read_table(out / "kernel_metrics.parquet").to_pandas()
    want, rules = recount(path)
    assert len(metrics) == len(want) and len(pq.read_table(out / "kernel_rules.parquet")) == rules
    assert "127.0.0.1" not in metrics.to_string()


def test_a_real_kineto_trace_joins_the_kernel_two_demanglers_spell_differently():
    """tracelens_qwen05b_h100 (PyTorch's cxxabi names: ``{lambda()#3}``, ``const``, ``2ul``) holds
    the direct_copy kernel of llmperfopt_dsocr_kernel0004 (ncu's names: ``[lambda() (instance 3)]``)
    at the same launch configuration, grid (2, 1, 1) and block (128, 1, 1)."""
    trace = require_shared() / "kineto" / "tracelens_qwen05b_h100.json.gz"
    report = traceview.analyze(trace, Options(ncu=(str(SHARED_NCU),)), cache=False)
    kernels = report.table("measured", "kernels")
    assert len(kernels) == 1
    row = kernels.iloc[0]
    assert (row["grid"], row["block"], row["match_rule"]) == ("(2, 1, 1)", "(128, 1, 1)", "loose name + grid and block")
    assert "direct_copy_kernel_cuda" in row["name"] and "{lambda()#3}" in row["name"]
    matches = report.table("measured", "matches")
    assert sorted(matches["reason"].tolist()) == ["", "no trace kernel of this name", "no trace kernel of this name",
                                                  "no trace kernel of this name",
                                                  "trace kernels of this name have another grid or block"]


def test_diff_shows_measured_kernels_before_and_after(tmp_path):
    """The base measured with the shared exports, the new one with kernel0003's export edited: its
    SM throughput 41.49% -> 85% (bound by memory -> compute)."""
    folder = require_shared() / "ncu"
    trace = write_example(tmp_path / "trace.json")
    new_ncu = tmp_path / "new_ncu"
    new_ncu.mkdir()
    for f in folder.glob("*details.csv"):
        text = f.read_text()
        if "kernel0003" in f.name:
            text = text.replace('"Compute (SM) Throughput","%","41.49"', '"Compute (SM) Throughput","%","85.00"')
            text = text.replace('"sm__throughput.avg.pct_of_peak_sustained_elapsed","%","41.49"',
                                '"sm__throughput.avg.pct_of_peak_sustained_elapsed","%","85.00"')
        (new_ncu / f.name).write_text(text)
    out = tmp_path / "diff.json"
    proc = subprocess.run([sys.executable, "-m", "traceview.cli", "diff", str(trace), str(trace), "--ncu", str(new_ncu),
                           "--base-ncu", str(SHARED_NCU), "--format", "json", "-o", str(out), "--no-cache"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    measured = json.loads(out.read_text())["measured"]
    changed = [m for m in measured if m["changed"]]
    assert len(measured) == 3 and len(changed) == 1
    gemm = changed[0]
    assert gemm["grid"] == "(152, 4, 1)"
    assert (gemm["base_sm_throughput_pct"], gemm["new_sm_throughput_pct"]) == (41.49, 85.0)
    assert (gemm["base_bound_by"], gemm["new_bound_by"]) == ("memory", "compute")
    md = subprocess.run([sys.executable, "-m", "traceview.cli", "diff", str(trace), str(trace), "--ncu", str(new_ncu),
                         "--base-ncu", str(SHARED_NCU), "--format", "markdown"],
                        capture_output=True, text=True, timeout=300, cwd=REPO)
    assert "### Measured kernels" in md.stdout and "memory -> compute" in md.stdout
