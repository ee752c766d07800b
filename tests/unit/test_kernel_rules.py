"""The kernel-category table (analyses/classify.py ``KERNEL_RULES``, docs/metrics.md "Kernel
breakdown"; issue 30, item 6).

Definitions under test:

- "Categories: communication, then memory, then the first rule of this table that matches the
  kernel name, else other", the table in docs/metrics.md being the code's.
- GEMM libraries of AMD GPUs are GEMMs: hipBLASLt/rocBLAS Tensile kernels (``Cijk_Alik_Bljk_...``),
  Composable Kernel (``ck::``, ``ck_tile::``), aiter; so are Triton and CUTLASS 3 GEMMs. On the
  shared MI300X traces, where these GEMMs take most of the GPU time, "other kernels take 67%" was
  said; the GEMMs are now ``gemm``.

Kernel names are spelled as the shared traces and the libraries' sources spell them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from traceview.analyses import classify, kernels
from traceview.findings import Options

from conftest import context, require_shared

REPO = Path(__file__).resolve().parents[2]
METRICS_DOC = REPO / "docs" / "metrics.md"


def doc_block(text: str, tag: str) -> str:
    start = text.index(f"<!-- {tag}:begin")
    body = text[text.index("\n", start) + 1: text.index(f"<!-- {tag}:end -->")]
    return "\n".join(line.strip() for line in body.strip().splitlines())


def test_the_documented_table_is_the_codes() -> None:
    assert doc_block(METRICS_DOC.read_text(), "kernel-rules") == classify.kernel_rules_markdown()
    # the categories the table names are the analysis's
    assert {r.category for r in classify.KERNEL_RULES} <= set(kernels.CATEGORIES)
    assert all(r.matches for r in classify.KERNEL_RULES)
    assert [(c, p.pattern) for c, p in kernels.CATEGORY_RULES] == [(r.category, r.pattern) for r in classify.KERNEL_RULES]


@pytest.mark.parametrize("name, category", [
    # hipBLASLt / rocBLAS Tensile (tracelens_*_mi300x traces)
    ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1", "gemm"),
    ("Cijk_Ailk_Bljk_BBS_BH_MT32x32x64_MI16x16x16x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1", "gemm"),
    ("Cijk_Ailk_Bjlk_BBS_BH_Bias_HAS_SAV_UserArgs_MT64x32x64_MI16x16x1_SN_LDSB0_AFC1", "gemm"),
    ("Custom_Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0", "gemm"),
    # rocBLAS's own kernels
    ("void rocblas_gemm_batched_kernel<float, 16, 16, 4>(int, int, int, float const*)", "gemm"),
    ("void rocblas_gemvn_kernel<64, 16, long, float>(int, int, float, long, float const*)", "gemm"),
    # Composable Kernel
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::tensor_layout::gemm::RowMajor>>",
     "gemm"),
    ("void ck_tile::kentry<256, 1, ck_tile::GemmKernel<ck_tile::GemmTile1DPartitioner<ck_tile::sequence<256>>>>",
     "gemm"),
    ("void ck_tile::kentry<256, 2, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<ck_tile::Gemm>>>",
     "attention"),
    ("void ck::kernel_grouped_conv_fwd_multiple_abd_xdl_cshuffle<ck::GridwiseGemmMultipleABD_xdl_cshuffle>",
     "convolution"),
    ("void ck::kernel_elementwise<ck::GridwiseElementwise<ck::Tuple<ck::half_t const*>>>", "elementwise"),
    ("void ck::kernel_normalization<ck::GridwiseNormalizationWelfordVariance_mk_to_mk<ck::half_t>>", "reduction"),
    # aiter
    ("_ZN5aiter24gemm_a8w8_bpreshuffle_kernelILi256ELi128EEEvPKaS2_", "gemm"),
    ("fmoe_bf16_g1u1_subGU_256", "gemm"),
    ("void aiter::paged_attention_ll4mi_QKV_mfma16_kernel<__hip_bfloat16, 256, 16>(...)", "attention"),
    ("sage_fwd", "attention"),  # SageAttention (tracelens_xdit_flux1_aiter_sage_*_mi300x)
    # Triton
    ("triton_tem_fused_addmm_0", "gemm"),
    ("matmul_kernel", "gemm"),
    ("fused_moe_kernel", "gemm"),
    ("_attn_fwd", "attention"),
    ("triton_poi_fused_add_0", "elementwise"),
    ("triton_red_fused_sum_1", "reduction"),
    # CUTLASS 3, cuDNN / cuBLAS on Hopper
    ("cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8_warpspecialized",
     "gemm"),
    ("void cutlass::device_kernel<cutlass3x_sm90_tensorop_gemm_f16_f16_f32_void_f16_128x256x64_2x1x1_0_tnn>", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off", "gemm"),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64", "convolution"),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", "gemm"),
    # MIOpen (tracelens_resnet_actckpt_mi300x_rank0)
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2", "convolution"),
    ("Im2d2Col_v2", "convolution"),
    ("SubTensorOpWithCastTensor1d", "elementwise"),
    ("MIOpenBatchNormFwdTrainSpatial", "reduction"),
    # cuDNN convolutions that name neither conv nor gemm (hta_alexnet_a100)
    ("cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "convolution"),
    ("void cudnn::detail::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int, float const*)",
     "convolution"),
    # still other: layout transforms, copies, sorts
    ("batched_transpose_32x32_half", "other"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::OpaqueType<2u>, unsigned int, 4>",
     "other"),
    ("void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy>", "other"),
    ("sage_quant_kernel", "other"),
])
def test_library_kernels_are_in_their_category(name: str, category: str) -> None:
    assert kernels.categorize_name(name) == category


MI300X_TRACES = ["tracelens_qwen05b_mi300x.json.gz", "tracelens_torch_compile_triton_mi300x.json.gz",
                 "tracelens_xdit_flux1_aiter_sage_capture_mi300x.json.gz"]


@pytest.mark.parametrize("file", MI300X_TRACES)
def test_mi300x_gemms_are_gemms_not_other(file: str) -> None:
    from traceview import load

    trace = load(require_shared() / "kineto" / file)
    result = kernels.analyze(context(trace, Options()))
    cats = result.tables["categories"]
    whole = cats[cats["step"].isna()].groupby("category")["share_pct"].sum()
    assert whole.get("gemm", 0.0) > 30.0, whole.to_dict()
    assert whole.get("other", 0.0) < 10.0, whole.to_dict()
    titles = [f.title for f in result.findings if f.code == "dominant_kernels"]
    assert not any(t.startswith("other kernels") for t in titles), titles
