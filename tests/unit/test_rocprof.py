"""The rocprofv3 CSV parser (parsers/rocprof): the shared llama.cpp run recounted from its raw CSVs
with the csv module, a generated run (ROCTx ranges, copies, counters) against its construction, and
bad inputs as one line."""

from __future__ import annotations

import csv
import importlib.util
import shutil
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import require_shared

import traceview
from traceview.discovery import discover
from traceview.errors import TraceFormatError
from traceview.model import Kind
from traceview.parsers.rocprof import parse_rocprof

REPO = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("make_rocprof", REPO / "sample_traces" / "make_rocprof.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = _generator()


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def kinds_of(trace: traceview.Trace) -> Counter[str]:
    return Counter(trace.events.column("kind").to_pylist())


# ------------------------------------------------------------------------------- the shared run


@pytest.fixture(scope="module")
def shared() -> Path:
    return require_shared() / "rocprof"


def test_shared_run_is_one_input(shared: Path) -> None:
    inputs = discover([shared])
    assert [f.path.name for f in inputs.files] == ["rocprofv3_llamacpp_decode_kernel_trace.csv"]
    assert inputs.files[0].format is not None and inputs.files[0].format.name == "rocprof"
    assert sorted(p.name for p in inputs.files[0].companions) == sorted(
        p.name for p in shared.glob("*.csv") if not p.name.endswith("_kernel_trace.csv"))
    assert not inputs.skipped
    # any file of the run, named alone or with the others, is the same one input
    named = discover(sorted(shared.glob("*.csv")))
    assert [f.path for f in named.files] == [f.path for f in inputs.files]


def test_shared_run_recounted_from_the_raw_csvs(shared: Path) -> None:
    kernels = rows(shared / "rocprofv3_llamacpp_decode_kernel_trace.csv")
    hip = rows(shared / "rocprofv3_llamacpp_decode_hip_api_trace.csv")
    counters = [r for p in sorted(shared.glob("*_counter_collection.csv")) for r in rows(p)]
    trace = traceview.load(shared, use_cache=False)
    assert kinds_of(trace) == {"kernel": len(kernels), "runtime": len(hip)}
    assert trace.num_events == len(kernels) + len(hip)
    counts = trace.ranks[0].event_counts
    # every row read is accounted for: it became an event or a counter sample
    assert counts["events_read"] == len(kernels) + len(hip) + len(counters)
    assert counts["mapped"] + counts["counter"] == counts["events_read"]
    assert trace.counters.num_rows == len(counters)
    assert sorted(set(trace.counters.column("name").to_pylist())) == sorted({r["Counter_Name"] for r in counters})
    # kernels by name, and their busy time (the union of their intervals)
    names = Counter(np.asarray(trace.names())[trace.mask(Kind.KERNEL)].tolist())
    assert names == Counter(r["Kernel_Name"] for r in kernels)
    busy = union_ns([(int(r["Start_Timestamp"]), int(r["End_Timestamp"])) for r in kernels])
    report = traceview.analyze(shared, cache=False)
    assert report["summary"]["busy_ns"] == busy
    assert report["summary"]["events"] == len(kernels) + len(hip)
    # launch links: each HIP call to every kernel of its correlation id
    by_corr = Counter(r["Correlation_Id"] for r in kernels)
    assert len(trace.launch_links()[0]) == sum(by_corr[r["Correlation_Id"]] for r in hip)


def test_shared_counters_sit_at_their_kernels(shared: Path) -> None:
    kernels = {r["Dispatch_Id"]: r for r in rows(shared / "rocprofv3_llamacpp_decode_kernel_trace.csv")}
    trace = traceview.load(shared, use_cache=False)
    series = trace.counters.column("series").to_pylist()
    ts = trace.counters.column("ts_ns").to_numpy()
    fetch = rows(shared / "rocprofv3_llamacpp_decode_fetch_counter_collection.csv")
    stall = rows(shared / "rocprofv3_llamacpp_decode_stall_counter_collection.csv")
    raw = fetch + stall  # the run's counter collections in name order
    assert series == [f"dispatch {r['Dispatch_Id']}" for r in raw]
    expected = [int(kernels[r["Dispatch_Id"]]["Start_Timestamp"]) if r["Dispatch_Id"] in kernels
                else int(r["Start_Timestamp"]) for r in raw]
    assert ts.tolist() == expected
    assert trace.counters.column("value").to_pylist() == [float(r["Counter_Value"]) for r in raw]
    missing = sum(r["Dispatch_Id"] not in kernels for r in raw)
    assert trace.ranks[0].event_counts["counter.dispatch_not_in_trace"] == missing > 0


def test_shared_kernel_columns(shared: Path) -> None:
    kernels = rows(shared / "rocprofv3_llamacpp_decode_kernel_trace.csv")
    trace = traceview.load(shared, use_cache=False)
    k = trace.to_pandas(kinds=(Kind.KERNEL,))
    assert k["device"].tolist() == [int(r["Agent_Id"].split()[-1]) for r in kernels]
    assert k["stream"].tolist() == [int(r["Stream_Id"]) for r in kernels]
    assert k["block_x"].tolist() == [int(r["Workgroup_Size_X"]) for r in kernels]
    assert k["grid_x"].tolist() == [-(-int(r["Grid_Size_X"]) // int(r["Workgroup_Size_X"])) for r in kernels]
    assert trace.ranks[0].rank_source == "rocprofv3 run (process 2684120)"


# ------------------------------------------------------------------------------- a generated run


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, traceview.Trace]:
    folder = tmp_path_factory.mktemp("rocprof") / "run"
    truth = gen.write_run(folder, steps=3, layers=4)
    (folder / "truth.json").unlink()
    return folder, truth, parse_rocprof(folder / "synth_kernel_trace.csv")


def test_generated_run_against_its_construction(generated) -> None:
    _, truth, trace = generated
    kinds = kinds_of(trace)
    assert kinds["kernel"] == truth["kernels"] and kinds["memcpy"] == truth["copies"]
    assert kinds["runtime"] == truth["runtime_calls"] and kinds["annotation"] == truth["ranges"]
    assert kinds["other"] == truth["other_markers"]
    assert trace.steps.num_rows == truth["steps"]
    assert len(trace.launch_links()[0]) == truth["launch_links"]
    assert trace.counters.num_rows == truth["counter_samples"]
    counts = trace.ranks[0].event_counts
    assert counts["events_read"] == truth["rows"] == counts["mapped"] + counts["counter"] + counts["metadata"]
    assert counts["metadata"] == truth["agents"]
    assert [(d.id, d.name, d.sm_count) for d in trace.ranks[0].devices] == [
        (truth["device"], truth["device_name"], truth["compute_units"])]
    copies = trace.to_pandas(kinds=(Kind.MEMCPY,))
    assert set(copies["copy_kind"]) == {"HtoD"} and set(copies["name"]) == {"Memcpy HtoD"}
    assert set(copies["device"]) == {truth["device"]}
    other = trace.to_pandas(kinds=(Kind.OTHER,))
    assert sorted(other["category"].astype(str)) == ["MARKER_CORE_API", "roctx_mark"]


def test_generated_ranges_attribute_the_gpu_time(generated) -> None:
    folder, truth, _ = generated
    report = traceview.analyze(folder, cache=False)
    assert report["summary"]["busy_ns"] == truth["kernel_busy_ns"] + truth["copy_busy_ns"]
    assert report["summary"]["steps"] == truth["steps"]
    ranges = report.table("modules", "range_gpu")
    assert set(ranges["kind"]) == {"annotation"} and len(ranges) == truth["ranges"]
    for layer, gpu_ns in truth["layer_gpu_ns"].items():
        assert ranges.loc[ranges["path"].str.endswith("/" + layer), "inclusive_ns"].sum() == gpu_ns, layer


def test_a_counter_collection_alone_gives_its_dispatches(generated, tmp_path: Path) -> None:
    folder, truth, _ = generated
    shutil.copy(folder / "synth_counter_collection.csv", tmp_path / "p_counter_collection.csv")
    trace = traceview.load(tmp_path, use_cache=False)
    assert kinds_of(trace) == {"kernel": truth["kernels"]}
    counts = trace.ranks[0].event_counts
    assert counts["counter"] == counts["events_read"] == truth["counter_samples"]
    assert counts["counter.dispatch_kernels"] == truth["kernels"]


# ------------------------------------------------------------------------------- bad inputs


def copy_run(generated, tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(generated[0], folder)
    return folder


def test_files_beside_the_run_that_it_does_not_read(generated, tmp_path: Path) -> None:
    folder = copy_run(generated, tmp_path)
    header = '"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"\n'
    (folder / "synth_rccl_api_trace.csv").write_text(
        header + '"RCCL_API","ncclAllReduce",7301,7301,9999,5000000000000,5000000001000\n')
    (folder / "synth_kernel_stats.csv").write_text('"Name","Calls","TotalDurationNs"\n"k",1,5\n')
    inputs = discover([folder])
    assert len(inputs.files) == 1 and sorted(p.name for p in inputs.skipped) == [
        "synth_kernel_stats.csv", "synth_rccl_api_trace.csv"]
    assert traceview.load(inputs, use_cache=False).ranks[0].event_counts["events_read"] == generated[1]["rows"]


def test_agent_info_alone_is_not_a_run(generated, tmp_path: Path) -> None:
    shutil.copy(generated[0] / "synth_agent_info.csv", tmp_path / "x_agent_info.csv")
    with pytest.raises(TraceFormatError, match="agent information alone"):
        traceview.load(tmp_path, use_cache=False)


def test_a_missing_column_is_one_line(generated, tmp_path: Path) -> None:
    folder = copy_run(generated, tmp_path)
    path = folder / "synth_kernel_trace.csv"
    lines = path.read_text().splitlines(keepends=True)
    lines[0] = lines[0].replace(',"Correlation_Id"', "")
    path.write_text("".join(lines[:1] + [line.replace(",5,", ",", 1) for line in lines[1:]]))
    with pytest.raises(TraceFormatError, match="without the column Correlation_Id"):
        traceview.load(folder, use_cache=False)


def test_a_truncated_csv_is_one_line(generated, tmp_path: Path) -> None:
    folder = copy_run(generated, tmp_path)
    path = folder / "synth_hip_api_trace.csv"
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(TraceFormatError, match="truncated"):
        traceview.load(folder, use_cache=False)


def test_a_value_of_the_wrong_type_is_one_line_without_the_record(generated, tmp_path: Path) -> None:
    folder = copy_run(generated, tmp_path)
    path = folder / "synth_kernel_trace.csv"
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace('"layer_1_gemm",9,', '"layer_1_gemm",9,"token=hunter2",')
    path.write_text("".join(lines))
    with pytest.raises(TraceFormatError, match="not a well-formed rocprofv3 CSV") as info:
        traceview.load(folder, use_cache=False)
    assert "hunter2" not in str(info.value) and "Expected 19 columns, got 20" in str(info.value)


def test_two_runs_in_one_folder_are_refused(generated, tmp_path: Path) -> None:
    folder = copy_run(generated, tmp_path)
    shutil.copy(folder / "synth_kernel_trace.csv", folder / "other_kernel_trace.csv")
    with pytest.raises(TraceFormatError, match="more than one rocprofv3 run"):
        traceview.load(folder, use_cache=False)


def test_counters_of_another_program_are_refused(generated, tmp_path: Path) -> None:
    folder = copy_run(generated, tmp_path)
    path = folder / "synth_counter_collection.csv"
    path.write_text(path.read_text().replace('"layer_0_gemm"', '"another_kernel"'))
    with pytest.raises(TraceFormatError, match="another program"):
        traceview.load(folder, use_cache=False)


def test_a_changed_companion_changes_the_cache_key(generated, tmp_path: Path) -> None:
    folder = copy_run(generated, tmp_path)
    before = discover([folder]).files[0].cache_key
    hip = folder / "synth_hip_api_trace.csv"
    hip.write_text(hip.read_text() + '"HIP_RUNTIME_API_EXT","hipGetDevice",7301,7301,999,5000009000000,5000009001000\n')
    assert discover([folder]).files[0].cache_key != before


# ------------------------------------------------------------------------------- the JSON output


def test_json_output_gives_the_csv_runs_trace(generated, tmp_path: Path) -> None:
    """The same run written as rocprofv3's JSON (in the layout its writer and tests use; no real
    JSON file was available) loads to the CSV run's events, links, counters and steps."""
    folder, truth, from_csv = generated
    gen.write_json_run(tmp_path, steps=3, layers=4)
    (tmp_path / "truth.json").unlink()
    inputs = discover([tmp_path])
    assert [f.format.name for f in inputs.files if f.format] == ["rocprof-json"]
    from_json = traceview.load(inputs, use_cache=False)
    columns = ["kind", "category", "name", "start_ns", "dur_ns", "pid", "tid", "device", "stream", "correlation",
               "copy_kind", "grid_x", "block_x"]
    order = ["start_ns", "kind", "name"]
    a = from_csv.to_pandas()[columns].astype(str).sort_values(order).reset_index(drop=True)
    b = from_json.to_pandas()[columns].astype(str).sort_values(order).reset_index(drop=True)
    assert a.equals(b)
    assert len(from_json.launch_links()[0]) == truth["launch_links"]
    assert from_json.steps.num_rows == truth["steps"]
    key = ["name", "series", "ts_ns", "value"]
    assert sorted(from_json.counters.select(key).to_pylist(), key=str) == sorted(
        from_csv.counters.select(key).to_pylist(), key=str)
    assert [d.name for d in from_json.ranks[0].devices] == [truth["device_name"]]
    counts = from_json.ranks[0].event_counts
    assert counts["skipped_scratch_memory"] == 1  # a section traceview does not map, counted
    assert counts["events_read"] == (counts["mapped"] + counts["counter"] + counts["metadata"]
                                     + counts["skipped_scratch_memory"])


def test_truncated_json_is_one_line(tmp_path: Path) -> None:
    gen.write_json_run(tmp_path)
    path = tmp_path / "synth_results.json"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(TraceFormatError, match="truncated"):
        traceview.load(path, use_cache=False)


def test_numeric_agent_ids_and_an_hsa_trace(tmp_path: Path) -> None:
    """The layout rocprofv3's documentation shows for ROCm 6.2 (agents as numbers, segment sizes,
    no register counts), with an HSA API trace beside it; values made up here."""
    (tmp_path / "41_kernel_trace.csv").write_text(
        '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name",'
        '"Correlation_Id","Start_Timestamp","End_Timestamp","Private_Segment_Size","Group_Segment_Size",'
        '"Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
        '"KERNEL_DISPATCH",2,1,1,41,1,11,"void add<float>(float*, float const*)",7,1000,1600,0,0,64,1,1,1024,1024,1\n'
        '"KERNEL_DISPATCH",2,1,1,41,2,12,"scale(float*, int)",9,2000,2300,0,0,64,1,1,1024,1,1\n')
    (tmp_path / "41_hsa_api_trace.csv").write_text(
        '"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"\n'
        '"HSA_CORE_API","hsa_queue_create",41,41,3,500,900\n'
        '"HSA_AMD_EXT_API","hsa_amd_memory_async_copy_on_engine",41,41,9,1800,1900\n')
    trace = traceview.load(tmp_path, use_cache=False)
    kernels = trace.to_pandas(kinds=(Kind.KERNEL,))
    assert kernels["device"].tolist() == [2, 2] and kernels["grid_x"].tolist() == [16, 16]
    assert kernels["grid_y"].tolist() == [1024, 1] and kernels["dur_ns"].tolist() == [600, 300]
    runtime = trace.to_pandas(kinds=(Kind.RUNTIME,))
    assert runtime["category"].astype(str).tolist() == ["HSA_CORE_API", "HSA_AMD_EXT_API"]
    src, dst = trace.launch_links()
    assert [(trace.names()[s], trace.names()[d]) for s, d in zip(src, dst)] == [
        ("hsa_amd_memory_async_copy_on_engine", "scale(float*, int)")]
    assert trace.ranks[0].event_counts == {"events_read": 4, "mapped": 4, "kernel.read": 2, "hsa_api.read": 2,
                                           "kernel.mapped": 2, "hsa_api.mapped": 2}
