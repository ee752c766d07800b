"""``traceview diff``: kernel-name normalisation, the noise rule, the known-answer regression pair
(sample_traces/regression_pair, written by make_pair.py), real traces against themselves, renderers
and the CLI. The diff compares two reports of the one pipeline (``traceview.pipeline.analyze``)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from traceview.compare import DiffOptions, compare, diff_reports, normalize_kernel_name, pooled_std
from traceview.compare.render import to_json, to_markdown, to_text
from traceview.errors import TraceviewError
from traceview.pipeline import analyze
from traceview.report import Report

from conftest import SAMPLE_TRACES, require_shared

PAIR = SAMPLE_TRACES / "regression_pair"
NSYS_PAIR_FILE = Path("nsys") / "torchrun_2xh100_nccl_2026.2.sqlite"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args], capture_output=True, text=True,
                          env=env, timeout=600)


# ------------------------------------------------------------------------------ name normalisation

@pytest.mark.parametrize("name, expected", [
    # Inductor's kernel counter
    ("triton_poi_fused_add_0", "triton_poi_fused_add"),
    ("triton_poi_fused_add_1", "triton_poi_fused_add"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_123", "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt"),
    # Triton signature specialisation, and a counter before it
    ("triton_poi_fused_add_0_0d1d2de", "triton_poi_fused_add"),
    ("triton__0d1d2d3de", "triton_"),
    # hash-like suffixes (8+ hex digits, at least one a digit)
    ("fused_kernel_3f9a2b7c41", "fused_kernel"),
    ("my_kernel_deadbeef", "my_kernel_deadbeef"),  # no digit: a word, not a hash
    ("my_kernel_ab12", "my_kernel_ab12"),  # too short for a hash
    # template arguments and argument lists
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>, "
     "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::Half>, std::array<char*, 3ul>)",
     "at::native::vectorized_elementwise_kernel"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::Half, float, float, "
     "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, c10::Half const*, int)",
     "at::native::(anonymous namespace)::cunn_SoftMaxForward"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
    ("void foo<(bool)1, 3>(float*) const", "foo"),
    ("std::enable_if<true, void>::type at::native::bar_kernel<float>(int)", "at::native::bar_kernel"),
    # left alone: no suffix, no templates
    ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"),
    ("ampere_sgemm_128x64_nn", "ampere_sgemm_128x64_nn"),
    ("Memcpy DtoH (Device -> Pageable)", "Memcpy DtoH"),
    ("Memset (Device)", "Memset"),
    # operators keep their brackets; unbalanced brackets are kept verbatim
    ("void thrust::less<int>::operator<(int)", "thrust::less::operator<"),
    ("broken_kernel<int, float", "broken_kernel<int, float"),
    # nothing but a suffix: the name is kept
    ("_0", "_0"),
    ("(anonymous)", "(anonymous)"),
])
def test_normalize_kernel_name(name, expected):
    assert normalize_kernel_name(name) == expected


def test_renamed_instantiations_share_a_key():
    a = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, "
         "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, "
         "float, 4>)")
    b = ("void at::native::reduce_kernel<256, 2, at::native::ReduceOp<c10::Half, at::native::MeanOps<float, float>, "
         "unsigned int, c10::Half, 4> >(at::native::ReduceOp<c10::Half, at::native::MeanOps<float, float>, "
         "unsigned int, c10::Half, 4>)")
    assert normalize_kernel_name(a) == normalize_kernel_name(b) == "at::native::reduce_kernel"


# ------------------------------------------------------------------------------ the noise rule

def test_pooled_std():
    assert pooled_std([1.0], [2.0]) is None
    assert pooled_std([1.0, 3.0], [5.0]) == pytest.approx(np.std([1.0, 3.0], ddof=1))
    a, b = [10.0, 12.0, 14.0], [20.0, 21.0, 25.0, 26.0]
    expected = np.sqrt((np.var(a, ddof=1) * 2 + np.var(b, ddof=1) * 3) / 5)
    assert pooled_std(a, b) == pytest.approx(expected)


def test_noise_rule_threshold_and_statuses():
    opts = DiffOptions(k=3.0, rel_floor=0.0, abs_floor_ns=0)
    base, new = [100.0, 102.0, 98.0], [105.0, 107.0, 103.0]  # pooled std 2 -> threshold 6; delta 5
    c = compare(base, new, options=opts)
    assert c.pooled_std == pytest.approx(2.0) and c.threshold == pytest.approx(6.0)
    assert c.delta == pytest.approx(5.0) and not c.significant and c.status == "within_noise"
    c = compare(base, [107.0, 109.0, 105.0], options=opts)  # delta 7 > 6
    assert c.significant and c.status == "worse" and c.delta_pct == pytest.approx(7.0)
    c = compare(base, [93.0, 95.0, 91.0], options=opts)
    assert c.significant and c.status == "better"
    assert compare(base, list(base), options=opts).status == "unchanged"
    # the floors: 1% of the base, at least 1 us
    c = compare([1e6] * 3, [1e6 + 9_000] * 3, options=DiffOptions())
    assert c.pooled_std == 0 and c.threshold == pytest.approx(10_000) and not c.significant
    c = compare([100.0] * 3, [900.0] * 3, options=DiffOptions())
    assert c.threshold == 1_000 and not c.significant
    # overlap: more is better, floor in percentage points, no relative change
    c = compare([40.0, 40.0], [60.0, 60.0], options=DiffOptions(), higher_is_worse=False, unit="pct")
    assert c.status == "better" and c.threshold == 1.0 and c.delta_pct is None


def test_single_step_noise_cannot_be_estimated():
    c = compare([1_000_000.0], [1_200_000.0], options=DiffOptions())
    assert not c.noise_estimated and c.pooled_std is None
    assert c.threshold == pytest.approx(10_000) and c.significant and c.status == "worse"
    c = compare([1_000_000.0], [1_005_000.0], options=DiffOptions())
    assert not c.noise_estimated and c.status == "within_noise"
    assert compare([5.0], None, options=DiffOptions()).status == "only_base"


# ------------------------------------------------------------------------------ the known-answer pair

@pytest.fixture(scope="module")
def truth() -> dict:
    return json.loads((PAIR / "truth.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def pair_reports() -> tuple[Report, Report]:
    return analyze(PAIR / "base", use_cache=False), analyze(PAIR / "new", use_cache=False)


@pytest.fixture(scope="module")
def pair_diff(pair_reports):
    base, new = pair_reports
    return diff_reports(base, new, base_label="base", new_label="new")


def _mean(truth: dict, side: str, rank: int, metric: str) -> float:
    return float(np.mean([s[metric] for s in truth["figures"][side][str(rank)]]))


def test_pair_metric_figures_match_the_construction(pair_diff, truth):
    for rank in truth["ranks"]:
        for metric in ("step_time_ns", "gpu_window_ns", "busy_ns", "idle_ns", "compute_ns", "communication_ns",
                       "memory_ns", "exposed_comm_ns", "overlap_pct"):
            m = pair_diff.metric(metric, rank)
            assert m is not None, (metric, rank)
            assert m.change.base == pytest.approx(_mean(truth, "base", rank, metric), abs=1e-6), (metric, rank)
            assert m.change.new == pytest.approx(_mean(truth, "new", rank, metric), abs=1e-6), (metric, rank)
            assert m.change.base_steps == len(truth["steps"]["base"])
            assert m.change.new_steps == len(truth["steps"]["new"])
            assert m.change.noise_estimated


def test_pair_finds_exactly_the_planted_metric_changes(pair_diff, truth):
    changed = set(truth["changes"]["metrics"]["changed"])
    for rank in truth["ranks"]:
        rows = [m for m in pair_diff.metrics if m.rank == rank]
        assert {m.metric for m in rows if m.change.significant} == changed, rank
        for m in rows:
            if m.metric in changed:
                assert m.change.status == "worse", (m.metric, rank)
            else:
                assert m.change.status in ("within_noise", "unchanged"), (m.metric, rank, m.change)
    assert pair_diff.verdict() == "regressed"


def test_pair_finds_exactly_the_planted_kernel_changes(pair_diff, truth):
    planted = truth["changes"]["kernels"]
    names = truth["kernel_names"]
    regressed = {k["name"] for k in planted["regressed"]}
    for rank in truth["ranks"]:
        rows = [k for k in pair_diff.kernels if k.rank == rank]
        worse = [k for k in rows if k.change.status == "worse"]
        assert {k.name for k in worse} == regressed
        for k in worse:
            assert k.match == "exact"
            assert k.change.delta_pct == pytest.approx(100 * (planted["regressed"][0]["factor"] - 1), abs=3)
        assert sorted(k.name for k in rows if k.match == "appeared") == sorted(planted["appeared"])
        assert sorted(k.name for k in rows if k.match == "vanished") == sorted(planted["vanished"])
        renamed = [k for k in rows if k.renamed]
        assert [[k.base_names[0], k.new_names[0]] for k in renamed] == planted["renamed"]
        assert all(k.match == "normalized" and k.change.status == "within_noise" for k in renamed)
        # everything else is within noise
        others = [k for k in rows if k.match in ("exact", "normalized") and k.name not in regressed]
        assert others and all(k.change.status in ("within_noise", "unchanged") for k in others)
        assert not any(k.change.status == "better" for k in rows)
        # per-step totals agree with the construction
        by_name = {k.new_names[0] if k.new_names else k.base_names[0]: k for k in rows}
        for key, name in names["new"].items():
            expected = np.mean([s["kernels"][key] for s in truth["figures"]["new"][str(rank)]])
            assert by_name[name].change.new == pytest.approx(expected, abs=1e-6), key
        vanished = by_name[planted["vanished"][0]]
        assert vanished.change.base == pytest.approx(
            np.mean([s["kernels"]["cast"] for s in truth["figures"]["base"][str(rank)]]), abs=1e-6)


def test_pair_findings(pair_diff, truth):
    planted = truth["changes"]["findings"]
    by_status: dict[str, list] = {}
    # the critical path's what-ifs restate the planted change's consequence rather than being
    # planted themselves: the new blocking copy is host time on the path, so the step would gain
    # more from no host overhead
    whatif = {f.code: f.status for f in pair_diff.findings if f.code.startswith("whatif_")}
    assert whatif.get("whatif_no_host_overhead") == "worse"
    for f in pair_diff.findings:
        if f.code.startswith("whatif_"):
            continue
        by_status.setdefault(f.status, []).append([f.code, f.rank])
    for status in ("new", "fixed", "worse", "better"):
        assert by_status.get(status, []) == planted[status], status
    assert all(f.status == "unchanged" for f in pair_diff.findings
               if [f.code, f.rank] not in planted["new"] and not f.code.startswith("whatif_"))
    new = next(f for f in pair_diff.findings if f.status == "new")
    assert new.base_severity is None and new.new_cost_ns > 0


def test_pair_findings_are_the_reports_own(pair_reports, pair_diff):
    """The diff's findings are the reports' findings (merged across ranks, numbered once): same
    titles, costs and ids as ``report["findings"]`` shows in every format."""
    base, new = pair_reports
    by_id = {side: {f["id"]: f for f in report["findings"]} for side, report in (("base", base), ("new", new))}
    for f in pair_diff.findings:
        if f.new_id is not None:
            record = by_id["new"][f.new_id]
            assert (record["code"], record["rank"], record["title"]) == (f.code, f.rank, f.title)
            assert record["cost_ns_per_step"] == f.new_cost_ns
        if f.base_id is not None:
            assert by_id["base"][f.base_id]["code"] == f.code
    appeared = next(f for f in pair_diff.findings if f.status == "new")
    assert appeared.base_id is None and appeared.new_id in by_id["new"]
    assert f"{appeared.new_id}: " in to_markdown(pair_diff)


def test_pair_base_against_itself_is_unchanged(pair_reports):
    base, _ = pair_reports
    diff = diff_reports(base, base)
    _assert_no_change(diff)


def test_a_job_report_is_refused(pair_reports):
    """A job's report keeps bounded tables: per-step kernel samples from it would be wrong, so the
    diff says so instead of comparing them."""
    base, new = pair_reports
    job = Report({**new.data, "execution": {"executor": "local-processes", "workers": 2}}, new.results)
    with pytest.raises(TraceviewError, match="job"):
        diff_reports(base, job, new_label="job/")


def _assert_no_change(diff):
    assert diff.metrics and diff.kernels
    for m in diff.metrics:
        assert m.change.delta == 0, (m.metric, m.rank)
        assert m.change.status == "unchanged"
    for k in diff.kernels:
        assert k.match == "exact" and k.change.delta == 0 and k.change.status == "unchanged", k.name
    assert all(f.status == "unchanged" for f in diff.findings)
    assert diff.verdict() == "no significant change"
    s = diff.summary()
    assert s["findings_new"] == s["findings_fixed"] == s["kernels_appeared"] == s["kernels_vanished"] == 0
    if _analysis_landed():  # the critical path of every rank, unchanged
        assert diff.critical_path and {p.rank for p in diff.critical_path} == set(diff.base.ranks)
        for p in diff.critical_path:
            assert not p.significant and p.path.status == "unchanged" and p.base_bound_by == p.new_bound_by
        assert s["critical_path_bound_changed"] == s["achievable_worse"] == s["achievable_better"] == 0


# ------------------------------------------------------------------------------ real traces vs themselves

def test_real_nsys_trace_against_itself():
    path = require_shared() / NSYS_PAIR_FILE
    diff = diff_reports(analyze(path), analyze(path))
    _assert_no_change(diff)
    assert diff.findings  # the trace has findings, all unchanged
    assert any("no steps" in n for n in diff.notes)  # whole-trace figures; noise cannot be estimated
    assert not any(m.change.noise_estimated for m in diff.metrics)


@pytest.mark.parametrize("relative", ["kineto/hta_nccl_parser_config_a100.json.gz", "kineto/hta_trace_filter_2ranks"])
def test_real_kineto_trace_against_itself(relative):
    path = require_shared() / relative
    diff = diff_reports(analyze(path), analyze(path))
    _assert_no_change(diff)


# ------------------------------------------------------------------------------ single step, no steps

def _one_step_trace(path: Path, gemm_us: int) -> Path:
    doc = {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 0, "world_size": 1},
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 5,
             "args": {"correlation": 1}},
            {"ph": "X", "cat": "kernel", "name": "sgemm_128x64_nn", "pid": 0, "tid": 7, "ts": 10, "dur": gemm_us,
             "args": {"correlation": 1, "stream": 7, "device": 0}},
        ],
    }
    path.write_text(json.dumps(doc))
    return path


def test_single_step_says_noise_cannot_be_estimated(tmp_path):
    a = _one_step_trace(tmp_path / "a.json", 500)
    b = _one_step_trace(tmp_path / "b.json", 600)
    diff = diff_reports(analyze(a), analyze(b))
    busy = diff.metric("busy_ns", 0)
    assert busy.change.status == "worse" and not busy.change.noise_estimated
    assert busy.change.threshold == pytest.approx(max(1_000, 0.01 * 500_000))
    assert any("noise cannot be estimated" in n for n in diff.notes)
    assert "floor only" in to_text(diff) and "noise n/a" in to_text(diff)


# ------------------------------------------------------------------------------ renderers and CLI

def test_json_is_stable_with_int_ns(pair_diff):
    data = json.loads(to_json(pair_diff))
    assert list(data) == ["schema_version", "base", "new", "options", "summary", "metrics", "kernels", "findings",
                          "efficiency", "critical_path", "layers", "measured", "notes"]
    assert data["summary"]["verdict"] == "regressed"
    for row in data["metrics"]:
        assert list(row)[:4] == ["metric", "unit", "rank", "device"]
        if row["unit"] == "ns":
            assert all(isinstance(row[k], int) for k in ("base", "new", "delta", "threshold"))
    for row in data["kernels"]:
        for k in ("base", "new", "delta"):
            assert row[k] is None or isinstance(row[k], int)
    assert to_json(pair_diff) == to_json(pair_diff)


def test_markdown_and_text(pair_diff, truth):
    md = to_markdown(pair_diff)
    assert md.startswith("## traceview diff")
    assert "| figure | where | base | new | delta | delta % | noise threshold | verdict |" in md
    assert "regressed" in md and "`blocking_copy`" in md
    assert "triton_poi_fused_add_mul_0 -> triton_poi_fused_add_mul_1" in md
    for line in md.splitlines():
        if line.startswith("| `"):
            assert line.count(" | ") == 7  # no stray pipes from kernel names
    text = to_text(pair_diff)
    assert "Verdict: regressed" in text and "appeared" in text and "vanished" in text and "within noise" in text


def test_cli_diff_formats(tmp_path):
    out = tmp_path / "diff.json"
    result = run_cli("diff", str(PAIR / "base"), str(PAIR / "new"), "--format", "json", "-o", str(out))
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["summary"]["verdict"] == "regressed" and data["summary"]["findings_new"] == 1
    result = run_cli("diff", str(PAIR / "base"), str(PAIR / "new"), "--format", "markdown")
    assert result.returncode == 0 and result.stdout.startswith("## traceview diff")
    result = run_cli("diff", str(PAIR / "base"), str(PAIR / "new"))
    assert result.returncode == 0 and "Verdict: regressed" in result.stdout


def test_cli_diff_bad_input(tmp_path):
    result = run_cli("diff", str(PAIR / "base"), str(tmp_path / "missing.json"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "missing.json" in result.stderr
    for args, fragment in ((["--format", "yaml"], "--format"), (["--noise-k", "0"], "--noise-k"),
                           (["--min-change", "5"], "--min-change"), (["-o", str(tmp_path)], "is a directory")):
        result = run_cli("diff", str(PAIR / "base"), str(PAIR / "new"), *args)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and fragment in lines[0], result.stderr


# ------------------------------------------------------------------------------ efficiency

def _faster(trace, rows: list[int], dur_ns: int):
    """``trace`` with the events at ``rows`` lasting ``dur_ns``."""
    import dataclasses

    import pyarrow as pa

    dur = trace.events.column("dur_ns").to_numpy().copy()
    dur[rows] = dur_ns
    at = trace.events.schema.get_field_index("dur_ns")
    events = trace.events.set_column(at, trace.events.schema.field("dur_ns"), pa.array(dur, pa.int64()))
    return dataclasses.replace(trace, events=events)


@pytest.fixture(scope="module")
def efficiency_pair(tmp_path_factory):
    """The planted efficiency trace (tests/unit/test_efficiency.py) and the same with its two aten::mm
    kernels at 5 us instead of 10 us, analysed on the round peaks of its GPU file."""
    from test_efficiency import SPEC_TOML, planted

    from traceview.findings import Options

    specs = tmp_path_factory.mktemp("gpus") / "gpus.toml"
    specs.write_text(SPEC_TOML)
    options = Options(gpu_specs=str(specs))
    base, kernels = planted()
    new = _faster(base, kernels["mm"], 5_000)
    return analyze(base, options), analyze(new, options)


def test_efficiency_per_op_type_and_coverage_before_after(efficiency_pair):
    from test_efficiency import BANDWIDTH, MM_BYTES, MM_FLOPS, PEAK_BF16

    base, new = efficiency_pair
    diff = diff_reports(base, new)
    by_name = {o.name: o for o in diff.op_types}
    assert set(by_name) == {"aten::mm", "aten::add"} and all(o.match == "both" for o in diff.op_types)
    mm = by_name["aten::mm"]
    roof_ns = 2 * max(MM_FLOPS / PEAK_BF16, MM_BYTES / BANDWIDTH) * 1e9  # two calls
    assert (mm.base_gpu_ns, mm.new_gpu_ns) == (20_000, 10_000)
    assert mm.base_efficiency == pytest.approx(roof_ns / 20_000) and mm.new_efficiency == pytest.approx(roof_ns / 10_000)
    assert mm.base_tflops == pytest.approx(2 * MM_FLOPS / 20_000 / 1e3)
    assert mm.new_tflops == pytest.approx(2 * MM_FLOPS / 10_000 / 1e3)
    assert mm.efficiency_delta_pp == pytest.approx(100 * roof_ns / 20_000) and mm.tflops_delta_pct == pytest.approx(100)
    add = by_name["aten::add"]
    assert add.base_efficiency == add.new_efficiency and add.tflops_delta_pct == 0
    assert diff.op_types[0].name == "aten::add"  # the most GPU time first (24 us, then mm's 20 us)
    (overall,) = diff.efficiency
    # op-linked: mm 20 us + add 24 us + cat 5 us (not modelled); after: mm 10 us
    assert overall.base_modelled_pct == pytest.approx(100 * 44 / 49)
    assert overall.new_modelled_pct == pytest.approx(100 * 34 / 39)
    whole = base.table("efficiency", "steps")
    assert overall.base_hfu == pytest.approx(float(whole[whole["step"].isna()]["hfu"].iloc[0]))
    # every format shows them; JSON keeps every row
    data = json.loads(to_json(diff))["efficiency"]
    row = next(r for r in data["op_types"] if r["name"] == "aten::mm")
    assert (row["base_gpu_ns"], row["new_gpu_ns"], row["match"]) == (20_000, 10_000, "both")
    assert row["new_efficiency"] == pytest.approx(roof_ns / 10_000, abs=1e-4)
    assert data["overall"][0]["new_modelled_pct"] == pytest.approx(100 * 34 / 39, abs=1e-4)
    md = to_markdown(diff)
    assert "### Efficiency" in md
    mm_line = next(line for line in md.splitlines() if line.startswith("| `aten::mm`"))
    cells = [c.strip() for c in mm_line.strip("|").split(" | ")]
    assert cells[3:] == ["20 us -> 10 us", f"{100 * roof_ns / 20_000:.1f}%", f"{100 * roof_ns / 10_000:.1f}%",
                         f"+{100 * roof_ns / 20_000:.1f} pp", f"{2 * MM_FLOPS / 20_000 / 1e3:.3g}",
                         f"{2 * MM_FLOPS / 10_000 / 1e3:.3g}", "+100.0%"]
    text = to_text(diff, width=220)
    assert "Efficiency per op type" in text and "+100.0%" in text and "89.8%" in text and "87.2%" in text


def test_efficiency_op_types_only_on_one_side(efficiency_pair):
    """A trace without shapes models nothing: every op type of the other one vanished, none is judged."""
    from test_efficiency import planted

    base, _ = efficiency_pair
    bare = analyze(planted(inputs=False)[0])
    diff = diff_reports(base, bare)
    assert {o.match for o in diff.op_types} == {"vanished"}
    assert all(o.new_efficiency is None and o.efficiency_delta_pp is None for o in diff.op_types)
    assert "aten::mm (vanished)" in to_text(diff, width=220)
    back = diff_reports(bare, bare)
    assert back.op_types == [] and "No modelled op types in either trace." in to_markdown(back)


def test_cli_diff_efficiency_of_the_sample(tmp_path):
    """``traceview diff --gpu-specs``: the efficiency_roofline sample against itself, every format."""
    sample = SAMPLE_TRACES / "efficiency_roofline.json.gz"
    truth = json.loads(sample.with_name("efficiency_roofline.truth.json").read_text())
    specs = str(sample.with_name("efficiency_roofline.gpus.toml"))
    out = tmp_path / "diff.json"
    result = run_cli("diff", str(sample), str(sample), "--format", "json", "-o", str(out), "--gpu-specs", specs)
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())["efficiency"]
    if not data["op_types"]:
        pytest.skip("the Kineto parser does not fill input_dims yet: the sample has no op shapes")
    rows = {r["name"]: r for r in data["op_types"]}
    assert set(rows) == set(truth["op_types"])
    for name, expected in truth["op_types"].items():
        assert rows[name]["base_efficiency"] == rows[name]["new_efficiency"] == pytest.approx(expected["efficiency"])
        assert rows[name]["base_gpu_ns"] == expected["gpu_ns"] and rows[name]["efficiency_delta_pp"] == 0
    coverage = truth["coverage"]
    assert data["overall"][0]["base_modelled_pct"] == pytest.approx(
        100 * coverage["modelled_ns"] / coverage["op_ns"], abs=1e-4)
    for fmt, heading in (("markdown", "### Efficiency"), ("text", "Efficiency per op type")):
        result = run_cli("diff", str(sample), str(sample), "--format", fmt, "--gpu-specs", specs)
        assert result.returncode == 0 and heading in result.stdout and "aten::addmm" in result.stdout, result.stderr


# ------------------------------------------------------------------------------ the generator

def test_make_pair_is_byte_identical(tmp_path):
    spec = importlib.util.spec_from_file_location("_sample_traces_make_pair", SAMPLE_TRACES / "make_pair.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    out = module.main(tmp_path)
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert [str(f) for f in files] == ["base/rank0.json.gz", "base/rank1.json.gz", "new/rank0.json.gz",
                                       "new/rank1.json.gz", "truth.json"]
    for f in files:
        assert (out / f).read_bytes() == (PAIR / f).read_bytes(), f
        if f.suffix == ".gz":
            assert (out / f).read_bytes()[4:8] == b"\x00\x00\x00\x00"  # gzip mtime 0
            json.loads(gzip.decompress((out / f).read_bytes()))


# ------------------------------------------------------------------------------ the critical path


def _analysis_landed() -> bool:
    import traceview.analyses  # noqa: F401  (registers every analysis)
    from traceview.registry import ANALYSES

    return "critical_path" in ANALYSES


@pytest.fixture(scope="module")
def path_pair():
    """The 4-rank sample with a contract-shaped critical path (tests/cp_synthetic.py), and the same
    report whose every step has 2 ms more untraced host time on the path, is bound by the host, and
    has a 300 us longer achievable step: a diff with a known answer."""
    from cp_synthetic import changed, synthetic_result, with_critical_path

    report = analyze(SAMPLE_TRACES / "synthetic_4rank", use_cache=False)
    result = synthetic_result(report.trace, report.table("temporal", "steps"))
    after = changed(result, host_untraced_ns=2_000_000, achievable_ns=300_000, bound_by="host")
    return with_critical_path(report, result), with_critical_path(report, after)


def test_critical_path_composition_change_known_answer(path_pair):
    base, new = path_pair
    diff = diff_reports(base, new)
    steps = base.table("critical_path", "steps")
    assert [p.rank for p in diff.critical_path] == sorted(steps["rank"].unique())
    for p in diff.critical_path:
        mine = steps[steps["rank"] == p.rank]
        by_category = {c.category: c.change for c in p.categories}
        assert by_category["host_untraced"].delta == pytest.approx(2_000_000)
        assert by_category["host_untraced"].status == "worse"
        assert by_category["gpu_compute"].status == "unchanged"
        assert by_category["gpu_compute"].base == pytest.approx(mine["gpu_compute_ns"].mean())
        assert p.path.delta == pytest.approx(2_000_000) and p.path.status == "worse"
        assert p.achievable.delta == pytest.approx(300_000) and p.achievable.status == "worse"
        assert p.achievable.base == pytest.approx(mine["achievable_ns"].mean())
        assert (p.base_bound_by, p.new_bound_by) == (mine["bound_by"].mode()[0], "host")
        assert p.new_bound_steps == p.new_steps == len(mine)
        assert p.bound_changed == (p.base_bound_by != "host")
    # the step time (temporal) did not move: the path's change alone makes the verdict
    assert diff.verdict() == "changed"
    s = diff.summary()
    assert s["achievable_worse"] == len(diff.critical_path) and s["achievable_better"] == 0
    assert diff.critical_path_summary["achievable_step_ns"] == {
        "base": base.summary["achievable_step_ns"], "new": new.summary["achievable_step_ns"]}


def test_critical_path_in_every_format(path_pair):
    diff = diff_reports(*path_pair)
    data = json.loads(to_json(diff))
    ranks = data["critical_path"]["ranks"]
    assert len(ranks) == len(diff.critical_path)
    host = next(c for c in ranks[0]["categories"] if c["category"] == "host_untraced")
    assert host["delta"] == 2_000_000 and isinstance(host["base"], int) and host["status"] == "worse"
    assert ranks[0]["new_bound_by"] == "host" and ranks[0]["achievable"]["delta"] == 300_000
    assert set(data["critical_path"]["summary"]) >= {"critical_path_step_ns", "achievable_step_ns"}
    text, markdown = to_text(diff), to_markdown(diff)
    for out in (text, markdown):
        assert "Critical path" in out and "host, untraced" in out and "achievable step" in out
        assert "host (3 of 3 steps)" in out and "+2 ms" in out and "+300 us" in out
    assert "### Critical path" in markdown and "achievable ~" in markdown


def test_critical_path_against_itself_and_one_sided(path_pair):
    base, _ = path_pair
    same = diff_reports(base, base)
    assert same.critical_path and not any(p.significant for p in same.critical_path)
    assert all(c.change.status == "unchanged" for p in same.critical_path for c in p.categories)
    assert "no significant change in the critical path" in to_text(same)
    from cp_synthetic import without_critical_path

    plain = without_critical_path(base)
    one_sided = diff_reports(plain, base)
    assert all(p.path.status == "only_new" and p.base_bound_by is None for p in one_sided.critical_path)
    assert not any(p.bound_changed for p in one_sided.critical_path)
    to_text(one_sided), to_markdown(one_sided), to_json(one_sided)  # every format renders it


def test_the_analysis_path_in_the_pair_diff(pair_reports, pair_diff):
    """On the analysis itself: the path of each step is the step, so its change is the step time's."""
    if not _analysis_landed():
        pytest.skip("the critical_path analysis is not on this branch yet")
    assert [p.rank for p in pair_diff.critical_path] == pair_diff.base.ranks
    for p in pair_diff.critical_path:
        step = pair_diff.metric("step_time_ns", p.rank)
        assert step is not None and p.path.delta == pytest.approx(step.change.delta, abs=1)
        parts = sum(c.change.new or 0.0 for c in p.categories)
        assert parts == pytest.approx(p.path.new, rel=1e-9)  # the composition adds up to the path
        assert p.new_bound_by in ("host", "gpu", "communication")


# ------------------------------------------------------------------------------ layers (modules)


@pytest.fixture(scope="module")
def layer_pair():
    """The 4-rank sample with contract-shaped module ranges (tests/mod_synthetic.py), and the same
    report whose every ``Model/Layer/Attention`` instance (so each of its ancestors) has 2 ms more
    GPU time: a diff with a known answer (the step time does not move)."""
    from mod_synthetic import changed, synthetic_result, with_modules

    report = analyze(SAMPLE_TRACES / "synthetic_4rank", use_cache=False)
    result = synthetic_result(report.trace, report.table("temporal", "steps"))
    after = changed(result, report.table("temporal", "steps"), "Model/Layer/Attention", 2_000_000)
    return with_modules(report, result), with_modules(report, after)


def test_layers_known_answer(layer_pair):
    base, new = layer_pair
    diff = diff_reports(base, new)
    paths = base.table("modules", "type_paths")
    steps = base.table("temporal", "steps").groupby("rank").size()
    assert len(diff.layers) == len(paths)  # every type path of every rank, both sides
    for x in diff.layers:
        row = paths[(paths["rank"] == x.rank) & (paths["type_path"] == x.type_path)].iloc[0]
        attention = paths[(paths["rank"] == x.rank) & (paths["type_path"] == "Model/Layer/Attention")].iloc[0]
        # the base: the type path's inclusive time per step; the change: 2 ms per attention instance
        assert x.change.base == pytest.approx(row["inclusive_ns"] / steps[x.rank])
        assert x.change.delta == pytest.approx(2_000_000 * attention["instances"] / steps[x.rank])
        assert x.change.status == "worse" and x.base_share == pytest.approx(row["share"])
    # the largest change first, the deepest type path first among equal changes: it names the cause
    assert diff.layers[0].type_path == "Model/Layer/Attention"
    assert diff.verdict() == "changed" and diff.summary()["layers_worse"] == len(paths)


def test_layers_in_every_format(layer_pair):
    diff = diff_reports(*layer_pair)
    data = json.loads(to_json(diff))
    first = data["layers"][0]
    assert first["type_path"] == "Model/Layer/Attention" and first["status"] == "worse"
    assert isinstance(first["delta"], int) and first["depth"] == 2 and first["match"] == "both"
    text, markdown = to_text(diff), to_markdown(diff)
    for out in (text, markdown):
        assert "Layers: GPU time per step by module type path" in out and "Model/Layer/Attention" in out
    assert "### Layers" in markdown and "`Model/Layer/Attention`" in markdown


def test_layers_against_itself_and_one_sided(layer_pair):
    base, _ = layer_pair
    same = diff_reports(base, base)
    assert same.layers and all(x.change.status == "unchanged" for x in same.layers)
    assert "Layers: all" in to_text(same)
    from mod_synthetic import without_modules

    one_sided = diff_reports(without_modules(base), base)
    assert one_sided.layers == [] and one_sided.verdict() == "no significant change"
    assert any("base trace has no module ranges" in n for n in one_sided.notes)


def test_a_layer_only_in_one_report(layer_pair):
    from mod_synthetic import with_modules
    from traceview.findings import AnalysisResult

    base, _ = layer_pair
    result = base.results["modules"]
    paths = result.tables["type_paths"]
    fewer = AnalysisResult(name="modules", tables={**result.tables,
                                                   "type_paths": paths[paths["type_path"] != "Model/Layer/Attention"],
                                                   "type_path_steps": result.tables["type_path_steps"].query(
                                                       "type_path != 'Model/Layer/Attention'")})
    diff = diff_reports(with_modules(base, fewer), base)
    appeared = [x for x in diff.layers if x.match == "appeared"]
    assert sorted(x.rank for x in appeared) == sorted(paths["rank"].unique())
    assert all(x.type_path == "Model/Layer/Attention" and x.change.significant for x in appeared)
    assert diff.summary()["layers_appeared"] == len(appeared) and diff.verdict() == "changed"


def test_layers_of_a_real_trace_against_itself():
    """On the analysis itself (once it is on this branch): a trace with nn.Module ranges."""
    import traceview.analyses  # noqa: F401
    from traceview.registry import ANALYSES

    if "modules" not in ANALYSES:
        pytest.skip("the modules analysis is not on this branch yet")
    path = require_shared() / "kineto" / "tracelens_qwen05b_h100.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    report = analyze(path, use_cache=False)
    diff = diff_reports(report, report)
    assert diff.layers and all(x.change.status == "unchanged" for x in diff.layers)
    paths = report.table("modules", "type_paths")
    assert {x.type_path for x in diff.layers} <= set(paths["type_path"].astype(str))
