"""The communication rule table (analyses/comm_rules.py, docs/metrics.md "Common definitions").

Definitions under test:

- "A kernel is communication when a rule of the table matches it; the first rule that matches names
  its rule and family."
- "User rules (--comm-pattern [FAMILY=]REGEX, a --comm-config TOML file) come first ... Rules only
  ever add communication: a kernel no rule matches is compute."
- Bad regex or bad file: one line, exit 2.

Kernel names are spelled as the libraries' sources and public traces spell them (DeepEP
``csrc/kernels``, DeepSeek's profile-data traces, PyTorch ``CUDASymmetricMemoryOps.cu``, vLLM
``custom_all_reduce.cuh``, TensorRT-LLM / FlashInfer all-reduce kernels).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from traceview.analyses import classify, comm_rules
from traceview.errors import TraceviewError
from traceview.findings import Options
from traceview.model import Kind

from conftest import context
from builders import TraceBuilder

REPO = Path(__file__).resolve().parents[2]
METRICS_DOC = REPO / "docs" / "metrics.md"


def family_of(name: str, patterns: tuple[str, ...] = ()) -> str | None:
    """The family of the first rule whose name regex matches (None: compute)."""
    for rule in comm_rules.rule_table(patterns):
        if rule.matches_name(name):
            return rule.family
    return None


@pytest.mark.parametrize("name, family", [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "nccl"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "nccl"),
    ("rcclGenericKernel", "nccl"),
    ("void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, int*)", "deepep"),
    ("void dpsk::ep::internode::combine<false, 8, 4>(int4*, float*)", "deepep"),
    ("void dpsk::ep::internode::notify_dispatch<false, 4>(int const*, long*, int, int const*)", "deepep"),
    ("void dpsk::ep::internode::cached_notify<false>(int, int, int)", "deepep"),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)", "deepep"),
    ("void deep_ep::internode_ll::combine<false, 7168>(void*, void const*)", "deepep"),
    ("void deep_ep::internode_ll::clean_low_latency_buffer<32>(int*, int, int*, int)", "deepep"),
    ("nvshmemi_proxy_quiet_entrypoint()", "nvshmem"),
    ("void nvshmemi_reduce_ring_kernel<float>(float*, float const*, float*)", "nvshmem"),
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, "
     "unsigned long, unsigned int**, unsigned long, unsigned long)", "symmetric_memory"),
    ("void (anonymous namespace)::one_shot_all_reduce_kernel<float, 16, 8>(float**, float*)", "symmetric_memory"),
    ("void (anonymous namespace)::two_shot_all_reduce_kernel_inplace<c10::BFloat16, 16, 8>(c10::BFloat16**)",
     "symmetric_memory"),
    ("void (anonymous namespace)::multimem_all_gather_kernel<16>(char*, char*)", "symmetric_memory"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals)",
     "custom_allreduce"),
    ("void vllm::cross_device_reduce_2stage<float, 4>(vllm::RankData*)", "custom_allreduce"),
    ("void tensorrt_llm::kernels::oneShotAllReduceKernel<half, 8>(AllReduceParams)", "custom_allreduce"),
    ("void tensorrt_llm::kernels::twoShotAllReduceKernel<half, 8>(AllReduceParams)", "custom_allreduce"),
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<(flashinfer::"
     "trtllm_allreduce_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, false, false>(...)",
     "custom_allreduce"),
    ("mscclKernel_Sum_half_Simple_false(ncclDevComm*, mscclAlgo*, mscclWork*)", "msccl"),
    ("mscclKernel_Sum_hip_bfloat16_Simple_false", "msccl"),
    ("void mscclpp::executionKernel<__half>(int, __half*)", "msccl"),
    ("dlslime::intranode_alltoall_kernel", "all_to_all"),
    ("AllToAllKernel<float>", "all_to_all"),
    ("p2p_send_kernel", "send_recv"),
    # XLA collective HLO ops (XSpace): whole names, async halves, .N suffixes
    ("all-reduce", "xla"),
    ("all-reduce.3", "xla"),
    ("all-gather-start", "xla"),
    ("all-gather-done.2", "xla"),
    ("reduce-scatter.1", "xla"),
    ("collective-permute-done.1", "xla"),
    ("all-to-all", "xla"),
    ("%collective-broadcast.4", "xla"),
])
def test_known_communication_kernels(name: str, family: str) -> None:
    assert family_of(name) == family


@pytest.mark.parametrize("name", [
    # DeepSeek's traces: CUB scan kernels in a `cdpsk::ep::` namespace, and the local layout kernel
    "void cdpsk::ep::CUB_DeviceScanKernel<int*, int*>(int*, int*, int)",
    "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int)",
    "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*)",
    "void dpsk::gemm::fp8_gemm_kernel<4096, 7168, 128, 128>(float*, int*)",
    # "combine", "dispatch", "all reduce" words in compute kernels
    "void moe_combine_kernel<float>(float*, float const*, int)",
    "void vllm::moe::dispatch_tokens_kernel(int*, int)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_combine",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>",
    "triton_red_fused_all_reduce_sum_0",
    "void recall_to_all_kernel(float*)",
    "volta_sgemm_128x64_nn",
    # XLA fusions that contain a collective's name are compute
    "all-reduce-fusion",
    "fusion.all-reduce",
    "loop_all-gather_fusion",
])
def test_compute_kernels_that_look_like_communication_stay_compute(name: str) -> None:
    assert family_of(name) is None


def test_user_patterns_come_first_and_relabel() -> None:
    name = "void vllm::cross_device_reduce_1stage<float, 8>(vllm::RankData*)"
    assert family_of(name, ("mine=cross_device",)) == "mine"
    assert family_of("my_fancy_exchange_kernel") is None
    assert family_of("my_fancy_exchange_kernel", ("fancy_exchange",)) == comm_rules.USER_FAMILY
    rules = comm_rules.rule_table(("mine=cross_device", "fancy_exchange"))
    assert [r.name for r in rules[:2]] == ["user:cross_device", "user:fancy_exchange"]
    assert rules[2:] == comm_rules.BUILTIN_RULES


@pytest.mark.parametrize("spec, family, regex", [
    ("deepep2=foo::dispatch", "deepep2", "foo::dispatch"),
    ("foo", "user", "foo"),
    ("user=a=b", "user", "a=b"),
    ("(?P<x>y)=z", "user", "(?P<x>y)=z"),  # not a family name before "=": all of it is the regex
])
def test_parse_pattern(spec: str, family: str, regex: str) -> None:
    rule = comm_rules.parse_pattern(spec)
    assert (rule.family, rule.pattern) == (family, regex)


@pytest.mark.parametrize("spec, fragment", [
    ("(", "not a regular expression"),
    ("fam=[", "not a regular expression"),
    ("x*", "matches the empty string"),
    ("fam=", "empty"),
])
def test_bad_patterns_are_one_clear_error(spec: str, fragment: str) -> None:
    with pytest.raises(TraceviewError, match=fragment):
        comm_rules.rule_table((spec,))


def test_config_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text('comm_patterns = ["lib=my_allreduce"]\n\n[[comm_rules]]\nfamily = "lib2"\n'
                    'pattern = "my_alltoall_\\\\w+"\n')
    assert comm_rules.load_config(path) == ("lib=my_allreduce", "lib2=my_alltoall_\\w+")
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n\n[tool.traceview]\ncomm_patterns = ["a=b"]\n')
    assert comm_rules.load_config(pyproject) == ("a=b",)


@pytest.mark.parametrize("content, fragment", [
    ("comm_patterns = [", "not a TOML file"),
    ("comm_patterns = 3", "list of strings"),
    ("[[comm_rules]]\nfamily = 'x'\n", "needs a string pattern"),
    ("[[comm_rules]]\nfamily = 'no spaces'\npattern = 'y'\n", "family"),
    ("comm_patterns = ['(']", "not a regular expression"),
    ("other = 1", "no comm_patterns"),
])
def test_bad_config_is_one_clear_error(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(content)
    with pytest.raises(TraceviewError, match=fragment):
        comm_rules.load_config(path)
    with pytest.raises(TraceviewError, match="cannot read"):
        comm_rules.load_config(tmp_path / "absent.toml")


def test_classification_uses_the_table_on_events() -> None:
    """Per event: the first matching rule; args make a kernel communication when no name rule does;
    a memcpy named like NCCL is memory, never communication."""
    b = TraceBuilder()
    b.kernel(0, 10, name="void dpsk::ep::internode::combine<false, 8, 4>(int4*)")
    b.kernel(10, 10, name="volta_sgemm_128x64_nn")
    b.kernel(20, 10, name="my_custom_bcast_kernel", collective="broadcast")
    b.kernel(30, 10, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", collective="allreduce")
    b.memcpy(40, 10, name="nccl staging copy")
    b.kernel(50, 10, name="my_fancy_exchange_kernel")
    trace = b.build()
    rules = comm_rules.rule_table()
    got = [rules[i].name if i >= 0 else None for i in classify.comm_rule_of(context(trace)).tolist()]
    assert got == ["deepep", None, "collective_args", "nccl", None, None]
    cls = classify.activity_class(context(trace, Options(comm_patterns=("x=fancy_exchange",))))
    assert cls.tolist() == [classify.COMMUNICATION, classify.COMPUTE, classify.COMMUNICATION,
                            classify.COMMUNICATION, classify.MEMORY, classify.COMMUNICATION]
    assert classify.is_communication(context(trace)).tolist() == [True, False, True, True, False, False]
    assert int(trace.kind_codes()[4]) == int(Kind.MEMCPY)


def test_every_builtin_rule_is_documented() -> None:
    text = METRICS_DOC.read_text()
    for rule in comm_rules.BUILTIN_RULES:
        assert f"`{rule.name}`" in text, rule.name
        assert rule.name in (comm_rules.__doc__ or "")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


@pytest.mark.parametrize("args, fragment", [
    (["--comm-pattern", "("], "not a regular expression"),
    (["--comm-pattern", "a*"], "matches the empty string"),
    (["--comm-config", "/nonexistent/rules.toml"], "cannot read"),
])
def test_cli_bad_rule_is_one_line_and_exit_2(tmp_path: Path, args: list[str], fragment: str) -> None:
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    proc = run_cli("analyze", str(trace), *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in proc.stderr


def _doc_table(tag: str) -> str:
    text = METRICS_DOC.read_text()
    start = text.index(f"<!-- {tag}:begin")
    body = text[text.index("\n", start) + 1: text.index(f"<!-- {tag}:end -->")]
    return "\n".join(line.strip() for line in body.strip().splitlines())


def test_the_documented_table_is_the_codes() -> None:
    # issue 30 (14): the table said less than the patterns match; it is now the code's, regexes included
    assert _doc_table("comm-rules") == comm_rules.rules_markdown()
    assert all(rule.matches for rule in comm_rules.BUILTIN_RULES)


@pytest.mark.parametrize("name, family", [
    # what the patterns matched beyond the old table's words, now written in it
    ("void deep_ep::internode_foo::dispatch<8>(int4*)", "deepep"),       # any (intra|inter)node* namespace
    ("void dpsk::ep::intranode_v2::combine<4>(float*)", "deepep"),
    ("void one_shot_all_reduce_kernel_fused<float>(float**)", "symmetric_memory"),  # a prefix
    ("my_two_shot_all_reduce_kernel", "symmetric_memory"),               # `_` may precede
    ("ncclP2P_Recv", "nccl"),
    ("P2P_Recv_kernel", "send_recv"),                                     # P2P, either case
    ("p2pSend", "send_recv"),
    ("Send_RecvKernel", "send_recv"),
    ("all_to_all_single_kernel", "all_to_all"),
])
def test_what_the_table_says_the_patterns_match(name: str, family: str) -> None:
    assert family_of(name) == family


@pytest.mark.parametrize("name", [
    "sendrecvs_kernel",                  # followed by a lower-case letter
    "void xdeep_ep::intranode::dispatch<8>(int4*)",  # preceded by a word character
    "twoshot_all_reduce_kernel",         # not one of the symmetric-memory names
    "XOneShotAllReduceKernel",           # preceded by a letter
])
def test_what_the_table_says_the_patterns_do_not_match(name: str) -> None:
    assert family_of(name) is None
