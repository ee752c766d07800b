"""Kernel breakdown: statistics, categories, tiny-kernel and dominance findings; known answers on
hand-made traces and on the synthetic 4-rank sample.

Definitions under test (docs/metrics.md, "Kernel breakdown"): per rank, device and name,
count / total / mean / min / max / population std of durations; share of the summed GPU activity
time; categories by ordered name rules; tiny = compute kernel shorter than 10 us.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from traceview.analyses import kernels
from traceview.findings import Options

from conftest import context, warning_messages
from builders import NCCL, TraceBuilder, synthetic_4rank


def run(trace, **options):
    return kernels.analyze(context(trace, Options(**options)))


# ------------------------------------------------------------------------------ categories


@pytest.mark.parametrize(
    "name, category",
    [
        ("volta_sgemm_128x64_nn", "gemm"),
        ("ampere_gcgemm_64x64_nt", "gemm"),
        ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
         "gemm"),
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>(Params)", "gemm"),
        ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>", "gemm"),
        ("triton_tem_fused_addmm_0", "gemm"),
        ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false>(cublasSplitKParams<float>)",
         "gemm"),
        ("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "attention"),
        ("fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)", "attention"),
        ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", "attention"),
        ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw", "convolution"),
        ("void cudnn::detail::implicit_convolve_sgemm<float, float, 128, 5, 5>", "convolution"),
        ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>", "convolution"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "elementwise"),
        ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>", "elementwise"),
        ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
         "at::native::templates::cuda::normal_and_transform<float, float>>", "elementwise"),
        ("triton_poi_fused__to_copy_convert_element_type_0", "elementwise"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>",
         "reduction"),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::Half, float, float>", "reduction"),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float>", "reduction"),
        ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>", "reduction"),
        ("triton_red_fused_sum_1", "reduction"),
        ("void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy>", "other"),
        ("void at::native::index_select_large_index<float, long>", "other"),
    ],
)
def test_category_rules(name: str, category: str) -> None:
    assert kernels.categorize_name(name) == category


def test_memory_and_communication_categories_come_from_the_event() -> None:
    b = TraceBuilder()
    b.kernel(0, 10_000)
    b.nccl(20_000, 5_000)
    b.kernel(30_000, 5_000, name="custom_collective_kernel", collective="allgather")
    b.memcpy(40_000, 3_000)
    b.memcpy(50_000, 1_000, name="Memset (Device)")
    k = run(b.build()).tables["kernels"].set_index("name")
    assert k.loc[NCCL, "category"] == "communication"
    assert k.loc["custom_collective_kernel", "category"] == "communication"
    assert k.loc["Memcpy HtoD (Pinned -> Device)", "category"] == "memory"
    assert k.loc["Memcpy HtoD (Pinned -> Device)", "kind"] == "memcpy"


# ------------------------------------------------------------------------------ statistics


def stats_trace():
    """gemm x4 (1, 2, 3, 4 us), add x2 (6, 6 us), a memcpy (10 us); two steps."""
    b = TraceBuilder()
    b.step(1, 0, 100_000)
    b.step(2, 100_000, 200_000)
    add = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
    for i, (name, dur, t) in enumerate(
        [("volta_sgemm_128x64_nn", 1_000, 1_000), ("volta_sgemm_128x64_nn", 2_000, 5_000), (add, 6_000, 10_000),
         ("volta_sgemm_128x64_nn", 3_000, 101_000), ("volta_sgemm_128x64_nn", 4_000, 105_000), (add, 6_000, 110_000)]
    ):
        api = b.runtime("cudaLaunchKernel", t - 500, 100)
        b.launch(api, b.kernel(t, dur, name=name))
    api = b.runtime("cudaMemcpyAsync", 119_000, 100)
    b.launch(api, b.memcpy(120_000, 10_000))
    return b.build(), add


def test_kernel_statistics_known_answers() -> None:
    trace, add = stats_trace()
    tables = run(trace).tables
    k = tables["kernels"].set_index("name")
    g = k.loc["volta_sgemm_128x64_nn"]
    assert (g["count"], g["total_ns"], g["min_ns"], g["max_ns"]) == (4, 10_000, 1_000, 4_000)
    assert g["mean_ns"] == 2_500.0
    assert g["std_ns"] == pytest.approx(math.sqrt(1.25) * 1000, rel=1e-12)  # population std
    a = k.loc[add]
    assert (a["count"], a["total_ns"], a["std_ns"]) == (2, 12_000, 0.0)
    total = 10_000 + 12_000 + 10_000
    assert g["share_pct"] == pytest.approx(100 * 10_000 / total)
    assert k["share_pct"].sum() == pytest.approx(100.0)
    # ordering: by total time descending (ties by name)
    assert list(tables["kernels"]["total_ns"]) == sorted(tables["kernels"]["total_ns"], reverse=True)

    by_step = tables["kernels_by_step"]
    s1 = by_step[(by_step["step"] == 1) & (by_step["name"] == "volta_sgemm_128x64_nn")].iloc[0]
    s2 = by_step[(by_step["step"] == 2) & (by_step["name"] == "volta_sgemm_128x64_nn")].iloc[0]
    assert (s1["count"], s1["total_ns"], s1["min_ns"], s1["max_ns"]) == (2, 3_000, 1_000, 2_000)
    assert (s2["count"], s2["total_ns"], s2["min_ns"], s2["max_ns"]) == (2, 7_000, 3_000, 4_000)

    cats = tables["categories"]
    whole = cats[cats["step"].isna()].set_index("category")
    assert whole.loc["gemm", "total_ns"] == 10_000 and whole.loc["elementwise", "total_ns"] == 12_000
    assert whole.loc["memory", "count"] == 1
    step2 = cats[cats["step"] == 2].set_index("category")
    assert step2.loc["memory", "total_ns"] == 10_000 and step2.loc["gemm", "total_ns"] == 7_000


def test_top_kernels_keeps_top_n_per_rank() -> None:
    b = TraceBuilder()
    for r in (0, 1):
        for i in range(5):
            b.kernel(i * 100_000, (i + 1) * 1000, name=f"kernel_{i}", rank=r)
    top = run(b.build(), top_n=2).tables["top_kernels"]
    assert len(top) == 4
    assert list(top[top["rank"] == 1]["name"]) == ["kernel_4", "kernel_3"]


# ------------------------------------------------------------------------------ findings


def tiny_trace(n_tiny: int, n_big: int, gap: int = 4_000) -> object:
    """One step; ``n_tiny`` 3-us kernels each ``gap`` after the previous activity, then big ones."""
    b = TraceBuilder()
    b.step(1, 0, 100_000_000)
    t = 1_000
    for _ in range(n_tiny):
        api = b.runtime("cudaLaunchKernel", t - 500, 100)
        b.launch(api, b.kernel(t, 3_000, name="void at::native::vectorized_elementwise_kernel<4, mul>"))
        t += 3_000 + gap
    for _ in range(n_big):
        api = b.runtime("cudaLaunchKernel", t - 500, 100)
        b.launch(api, b.kernel(t, 200_000, name="volta_sgemm_128x64_nn"))
        t += 200_000
    return b.build()


def test_many_tiny_kernels_is_flagged_and_quantified() -> None:
    result = run(tiny_trace(n_tiny=300, n_big=100))
    tiny = result.tables["tiny_kernels"]
    w = tiny[tiny["step"].isna()].iloc[0]
    assert (w["compute_kernels"], w["tiny_kernels"], w["tiny_total_ns"]) == (400, 300, 900_000)
    # the first tiny kernel has no predecessor on its stream; the others each follow a 4 us gap
    assert w["tiny_gap_ns"] == 299 * 4_000
    [f] = [f for f in result.findings if f.code == "many_tiny_kernels"]
    assert f.cost_ns_per_step == 299 * 4_000
    assert f.severity == "low" and f.evidence["per_gpu"][0]["tiny_share"] == 0.75


def test_tiny_gap_is_capped() -> None:
    result = run(tiny_trace(n_tiny=200, n_big=0, gap=50_000))
    w = result.tables["tiny_kernels"].iloc[0]
    assert w["tiny_gap_ns"] == 199 * kernels.TINY_GAP_CAP_NS


def test_few_tiny_kernels_raise_nothing() -> None:
    assert not [f for f in run(tiny_trace(n_tiny=50, n_big=10)).findings if f.code == "many_tiny_kernels"]
    assert not [f for f in run(tiny_trace(n_tiny=300, n_big=400)).findings if f.code == "many_tiny_kernels"]


def test_dominant_category_is_info_only() -> None:
    result = run(tiny_trace(n_tiny=0, n_big=20))
    [f] = result.findings
    assert f.code == "dominant_kernels" and f.severity == "info" and f.cost_ns_per_step == 0
    assert f.evidence["category"] == "gemm"


def test_empty_trace_gives_empty_tables() -> None:
    b = TraceBuilder()
    b.op("aten::add", 0, 100)
    result = run(b.build())
    assert all(t.empty for t in result.tables.values())
    assert result.findings == [] and warning_messages(result)


# ------------------------------------------------------------------------------ synthetic sample


def test_synthetic_kernel_stats_match_truth() -> None:
    trace, truth = synthetic_4rank()
    table = run(trace).tables["kernels"]
    table = table[table["kind"] == "kernel"]  # truth: cat == kernel only
    for rank, t in truth["ranks"].items():
        mine = table[table["rank"] == int(rank)].set_index("name")
        expected = t["overall"]["kernels"]
        assert set(mine.index) == set(expected), rank
        for name, e in expected.items():
            row = mine.loc[name]
            assert (row["count"], row["total_ns"], row["min_ns"], row["max_ns"]) == (
                e["count"], e["total_ns"], e["min_ns"], e["max_ns"]), (rank, name)
            assert row["device"] == t["device"]


def test_synthetic_kernel_counts_per_step_match_truth() -> None:
    trace, truth = synthetic_4rank()
    by_step = run(trace).tables["kernels_by_step"]
    by_step = by_step[by_step["kind"] == "kernel"]
    for rank, t in truth["ranks"].items():
        for s in t["steps"]:
            n = by_step[(by_step["rank"] == int(rank)) & (by_step["step"] == s["step"])]["count"].sum()
            assert n == s["kernel_count"], (rank, s["step"])


def test_population_std_on_synthetic_is_consistent() -> None:
    trace, _ = synthetic_4rank()
    k = run(trace).tables["kernels"]
    assert (k["std_ns"] >= 0).all()
    assert np.allclose(k["mean_ns"] * k["count"], k["total_ns"])
    assert ((k["min_ns"] <= k["mean_ns"]) & (k["mean_ns"] <= k["max_ns"])).all()


# ------------------------------------------------------------------------------ across ranks


def _cross_rank_trace():
    """Two ranks; one kernel under two template instantiations (one normalised name):
    rank 0: 1, 1, 1, 1, 100 us; rank 1: 50, 60 us. Mean of the per-rank medians = (1 + 55) / 2 =
    28 us; the median over all seven calls = 1 us."""
    b = TraceBuilder()
    a = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float)"
    m = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>(int, float)"
    t = 1_000
    for rank, durs in ((0, (1_000, 1_000, 1_000, 1_000, 100_000)), (1, (50_000, 60_000))):
        for i, d in enumerate(durs):
            b.kernel(t, d, name=a if i % 2 else m, rank=rank)
            t += d + 1_000
    b.kernel(t, 7_000, name="volta_sgemm_128x64_nn", rank=1)
    return b.build()


def _pipeline_tables(trace):
    from traceview.pipeline import analyze

    report = analyze(trace, Options())
    return report.table("kernels", "kernel_summary"), report.table("kernels", "kernel_ranks")


def test_kernel_summary_known_answers() -> None:
    summary, per_rank = _pipeline_tables(_cross_rank_trace())
    row = summary.set_index("name").loc["at::native::vectorized_elementwise_kernel"]
    durs = [1_000] * 4 + [100_000, 50_000, 60_000]
    assert (row["count"], row["total_ns"], row["min_ns"], row["max_ns"]) == (7, sum(durs), 1_000, 100_000)
    assert row["p50_ns"] == 1_000.0  # over all calls, not the mean of the per-rank medians (28 us)
    assert row["p90_ns"] == pytest.approx(float(np.percentile(durs, 90)), rel=0, abs=0)
    assert (row["names"], row["ranks"], row["gpus"]) == (2, 2, 2)
    assert (row["min_rank"], row["min_rank_total_ns"], row["max_rank"], row["max_rank_total_ns"]) == (
        0, 104_000, 1, 110_000)
    assert row["category"] == "elementwise" and "<4" in row["full_name"]
    assert summary["share_pct"].sum() == pytest.approx(100.0)
    assert list(summary["name"]) == ["at::native::vectorized_elementwise_kernel", "volta_sgemm_128x64_nn"]
    r1 = per_rank[(per_rank["name"] == row.name) & (per_rank["rank"] == 1)].iloc[0]
    assert (r1["count"], r1["total_ns"], r1["p50_ns"]) == (2, 110_000, 55_000.0)
    assert r1["share_pct"] == pytest.approx(100 * 110_000 / 117_000)


def test_weighted_percentiles_equal_numpy() -> None:
    rng = np.random.default_rng(3)
    groups = rng.integers(0, 7, 400)
    values = rng.integers(0, 30, 400) * 1000  # repeated values, as in a trace
    weights = rng.integers(1, 5, 400)
    for q in (0.0, 10.0, 50.0, 90.0, 99.0, 100.0):
        got = kernels.weighted_percentiles(groups, values, weights, 7, q)
        for g in range(7):
            expanded = np.repeat(values[groups == g], weights[groups == g])
            assert got[g] == np.percentile(expanded, q), (q, g)


def test_kernel_summary_on_real_ranks_equals_all_calls() -> None:
    """On the 8-rank DLRM job: every figure of ``kernel_summary`` from the events of all ranks, by
    the normalised name of each event (the pipeline runs the ranks as one batch)."""
    from conftest import require_shared
    from traceview import load
    from traceview.compare import normalize_kernel_name
    from traceview.analyses.steps import activity

    path = require_shared() / "kineto" / "param_dlrm_8ranks_v100"
    trace = load(path)
    summary, per_rank = _pipeline_tables(trace)
    act = activity(context(trace, Options()))
    names = np.array([normalize_kernel_name(n) for n in trace.events.column("name").take(act.row).to_pylist()])
    dur = act.end - act.start
    assert summary["count"].sum() == len(act) and per_rank["count"].sum() == len(act)
    for row in summary.head(15).itertuples():
        d = dur[names == row.name]
        assert (row.count, row.total_ns, row.min_ns, row.max_ns) == (d.size, d.sum(), d.min(), d.max()), row.name
        assert (row.p50_ns, row.p90_ns) == (np.percentile(d, 50), np.percentile(d, 90)), row.name
        ranks = act.rank[names == row.name]
        totals = {int(r): int(d[ranks == r].sum()) for r in np.unique(ranks)}
        assert row.max_rank_total_ns == max(totals.values()) and totals[row.max_rank] == row.max_rank_total_ns
        assert row.min_rank_total_ns == min(totals.values()) and totals[row.min_rank] == row.min_rank_total_ns
