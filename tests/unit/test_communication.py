"""Communication analysis: known answers on hand-made traces, the synthetic 4-rank sample and the
real 8-rank DLRM set.

Definitions under test (docs/metrics.md, "Communication"):

- "Communication kernel: name contains nccl or rccl (any case), or the event carries collective
  args. Compute = the other kernels."
- "overlap % = 100 x |U(compute) ∩ U(comm)| / |U(comm)| (none when there is no communication);
  exposed communication = |U(comm)| - that intersection."
- "skew = last start - first start; the straggler is the last rank to arrive"; end-aligned starts
  = start - end + median end.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import context

import traceview
from builders import TraceBuilder, synthetic_4rank
from traceview.analyses import communication as comm
from traceview.findings import Options
from traceview.model import (
    Trace,
)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces"
DLRM = SHARED / "kineto" / "param_dlrm_8ranks_v100"



def run(trace: Trace, **options):
    return comm.analyze(context(trace, Options(**options)))


def whole(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["step"].isna()].reset_index(drop=True)


# ------------------------------------------------------------------------------ names


@pytest.mark.parametrize(
    "kernel, expected",
    [
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "AllReduce"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "AllReduce"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "SendRecv"),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllGather"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "ReduceScatter"),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", "Broadcast"),
        ("ncclKernel_Reduce_RING_LL_Sum_float", "Reduce"),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", None),
        ("volta_sgemm_128x64_nn", None),
    ],
)
def test_collective_from_kernel_name(kernel: str, expected: str | None) -> None:
    assert comm.collective_from_kernel(kernel) == expected


@pytest.mark.parametrize(
    "arg, expected",
    [
        ("allreduce", "AllReduce"),
        ("all_reduce", "AllReduce"),
        ("_allgather_base", "AllGather"),
        ("all_gather_into_tensor_coalesced", "AllGather"),
        ("reduce_scatter_tensor", "ReduceScatter"),
        ("alltoall_base", "AllToAll"),
        ("broadcast", "Broadcast"),
        ("send", "Send"),
        ("recv", "Recv"),
        ("sendrecv", "SendRecv"),
        ("reduce", "Reduce"),
        ("barrier", "Barrier"),
        ("wait", None),
        ("", None),
    ],
)
def test_canonical_collective(arg: str, expected: str | None) -> None:
    assert comm.canonical_collective(arg) == expected


# ------------------------------------------------------------------------------ one rank


def one_rank_trace() -> Trace:
    """Compute [0, 100) and [150, 300); AllReduce [50, 200); a Broadcast (by args) [280, 320).

    U(comm) = [50, 200) + [280, 320) = 190; compute ∩ comm = [50, 100) + [150, 200) + [280, 300) = 120.
    AllReduce alone: 150 long, 100 overlapped; Broadcast: 40 long, 20 overlapped.
    """
    b = TraceBuilder()
    b.kernel(0, 100)
    b.kernel(150, 150)
    b.memcpy(100, 50)  # memory is neither compute nor communication
    b.nccl(50, 150, msg_bytes=4096, group_size=8, process_group="0")
    b.kernel(280, 40, name="my_custom_bcast_kernel", stream=21, collective="broadcast", msg_bytes=64,
             process_group="0")
    return b.build()


def test_one_rank_overlap_and_exposed() -> None:
    result = run(one_rank_trace())
    s = whole(result.tables["summary"]).iloc[0]
    assert (s["communication_ns"], s["overlap_ns"], s["exposed_ns"], s["compute_ns"]) == (190, 120, 70, 250)
    assert s["overlap_pct"] == pytest.approx(100 * 120 / 190)
    assert s["collectives"] == 2 and s["total_ns"] == 190

    c = whole(result.tables["collectives"]).set_index("collective")
    assert list(c.index) == ["AllReduce", "Broadcast"]
    ar, bc = c.loc["AllReduce"], c.loc["Broadcast"]
    assert (ar["count"], ar["total_ns"], ar["communication_ns"], ar["overlap_ns"], ar["exposed_ns"]) == (1, 150, 150, 100, 50)
    assert (bc["count"], bc["communication_ns"], bc["overlap_ns"], bc["exposed_ns"]) == (1, 40, 20, 20)
    assert ar["bytes"] == 4096 and ar["group_size"] == 8 and pd.isna(bc["group_size"])
    assert ar["process_group"] == "0"
    # single rank: no cross-rank tables
    assert "skew" not in result.tables and "stragglers" not in result.tables
    assert "compute_imbalance" not in result.tables


def test_no_communication_means_no_overlap_figure() -> None:
    b = TraceBuilder()
    b.kernel(0, 100)
    result = run(b.build())
    assert result.tables["summary"].empty and result.tables["collectives"].empty
    assert result.findings == []


def test_per_step_figures() -> None:
    """Two steps; the kernels are assigned by their launch call. Step 1 fully overlapped, step 2
    fully exposed."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.step(2, 1000, 2000)
    for t0, (k0, kd, c0, cd) in ((0, (100, 400, 200, 100)), (1000, (1100, 100, 1300, 200))):
        b.launch(b.runtime("cudaLaunchKernel", t0 + 10, 5), b.kernel(k0, kd))
        b.launch(b.runtime("cudaLaunchKernel", t0 + 20, 5), b.nccl(c0, cd))
    table = run(b.build()).tables["summary"]
    by_step = table.set_index("step")
    assert by_step.loc[1, "overlap_ns"] == 100 and by_step.loc[1, "exposed_ns"] == 0
    assert by_step.loc[2, "overlap_ns"] == 0 and by_step.loc[2, "exposed_ns"] == 200
    w = whole(table).iloc[0]
    assert w["communication_ns"] == 300 and w["exposed_ns"] == 200


def test_well_overlapped_single_rank_raises_nothing() -> None:
    b = TraceBuilder()
    for i in range(10):
        b.kernel(i * 1000, 1000)
        b.nccl(i * 1000 + 100, 300)
    assert run(b.build()).findings == []


# ------------------------------------------------------------------------------ several ranks


def multi_rank(arrivals: list[dict[int, int]], ends: list[int], offsets: dict[int, int] | None = None,
               compute: dict[int, int] | None = None) -> Trace:
    """One AllReduce per step per rank; ``arrivals[k][rank]`` = its start in step k, ``ends[k]`` the
    common end. ``offsets`` shifts a rank's whole clock. Compute kernels fill each step before the
    collective (``compute[rank]`` long, default 500 us) so that steps have a window."""
    offsets = offsets or {}
    b = TraceBuilder()
    ranks = sorted(arrivals[0])
    for k, (arr, end) in enumerate(zip(arrivals, ends)):
        t0 = k * 10_000_000
        for r in ranks:
            off = offsets.get(r, 0)
            b.step(k + 1, t0 + off, t0 + 9_000_000 + off, rank=r)
            api = b.runtime("cudaLaunchKernel", t0 + 1000 + off, 5, rank=r)
            b.launch(api, b.kernel(t0 + 2000 + off, (compute or {}).get(r, 500_000), rank=r))
            api = b.runtime("ncclAllReduce", t0 + 3000 + off, 5, rank=r)
            b.launch(api, b.nccl(t0 + arr[r] + off, end - arr[r], rank=r))
    return b.build()


def test_straggler_detected_with_its_lateness() -> None:
    # rank 2 arrives 200 us after the latest other rank, every step; everyone ends together
    arrivals = [{0: 600_000, 1: 610_000, 2: 810_000}, {0: 620_000, 1: 600_000, 2: 820_000},
                {0: 600_000, 1: 605_000, 2: 805_000}]
    trace = multi_rank(arrivals, [1_000_000] * 3)
    result = run(trace)
    strag = result.tables["stragglers"].set_index("rank")
    assert strag.loc[2, "times_last"] == 3 and strag.loc[2, "share_last"] == 1.0
    assert strag.loc[2, "mean_late_by_ns"] == 200_000
    # wait caused per collective: mean over the others of (its start - their start)
    expected = [((810 - 600) + (810 - 610)) / 2, ((820 - 620) + (820 - 600)) / 2, ((805 - 600) + (805 - 605)) / 2]
    assert strag.loc[2, "wait_caused_ns"] == round(sum(expected) * 1000)
    skew = result.tables["skew"]
    assert list(skew["skew_ns"]) == [210_000, 220_000, 205_000]
    assert list(skew["straggler"]) == [2, 2, 2]
    assert list(skew["aligned_skew_ns"]) == [210_000, 220_000, 205_000]
    assert list(skew["end_spread_ns"]) == [0, 0, 0]
    [finding] = [f for f in result.findings if f.code == "straggler_rank"]
    assert finding.rank == 2
    assert finding.cost_ns_per_step == round(sum(expected) * 1000 / 3)
    assert finding.evidence["clock_basis"] == "raw timestamps"


def test_straggler_survives_a_clock_offset() -> None:
    """Rank 1's clock is 5 ms ahead: raw starts say rank 1 is always last; end-aligned starts
    find the real straggler (rank 0) and the finding uses them."""
    arrivals = [{0: 800_000, 1: 600_000, 2: 610_000}, {0: 820_000, 1: 620_000, 2: 600_000},
                {0: 805_000, 1: 600_000, 2: 605_000}]
    trace = multi_rank(arrivals, [1_000_000] * 3, offsets={1: 5_000_000})
    result = run(trace)
    strag = result.tables["stragglers"].set_index("rank")
    assert strag.loc[1, "times_last"] == 3  # raw: fooled by the offset
    assert strag.loc[0, "aligned_times_last"] == 3
    assert strag.loc[1, "clock_offset_ns"] == 5_000_000
    # aligned late-by: 800-610, 820-620, 805-605 (the offset cancels) -> mean 196_667
    assert strag.loc[0, "aligned_mean_late_by_ns"] == 196_667
    [finding] = [f for f in result.findings if f.code == "straggler_rank"]
    assert finding.rank == 0 and "end-aligned" in finding.evidence["clock_basis"]


def test_balanced_ranks_raise_no_alarm() -> None:
    # the last rank rotates, by a few us; compute is equal
    arrivals = [{0: 600_000, 1: 603_000, 2: 601_000}, {0: 602_000, 1: 600_000, 2: 603_000},
                {0: 603_000, 1: 602_000, 2: 600_000}, {0: 601_000, 1: 600_000, 2: 602_000}]
    result = run(multi_rank(arrivals, [1_000_000] * 4))
    codes = {f.code for f in result.findings}
    assert "straggler_rank" not in codes and "compute_imbalance" not in codes
    imb = result.tables["compute_imbalance"]
    assert (imb["imbalance_ns"] == 0).all()


def test_compute_imbalance() -> None:
    arrivals = [{0: 900_000, 1: 900_000, 2: 900_000}] * 2
    trace = multi_rank(arrivals, [1_000_000] * 2, compute={0: 500_000, 1: 500_000, 2: 800_000})
    result = run(trace)
    imb = result.tables["compute_imbalance"].set_index("step")
    assert imb.loc[1, "max_rank"] == 2 and imb.loc[1, "min_ns"] == 500_000 and imb.loc[1, "max_ns"] == 800_000
    assert imb.loc[1, "imbalance_ns"] == 200_000  # max - mean (600 us)
    by_rank = result.tables["compute_by_rank"]
    assert len(by_rank) == 3 * 3  # whole trace + 2 steps, 3 ranks
    [finding] = [f for f in result.findings if f.code == "compute_imbalance"]
    assert finding.rank == 2 and finding.cost_ns_per_step == 200_000


def test_uneven_counts_are_matched_in_order_and_warned() -> None:
    b = TraceBuilder()
    for r in (0, 1):
        b.nccl(1000, 100, rank=r)
        b.nccl(5000, 100, rank=r)
    b.nccl(9000, 100, rank=0)  # rank 0 ran a third one the profiler did not catch on rank 1
    result = run(b.build())
    assert len(result.tables["skew"]) == 2
    assert any("different numbers" in w for w in result.warnings)


def test_process_groups_are_matched_separately() -> None:
    b = TraceBuilder()
    for r in (0, 1):
        b.nccl(1000 + 10 * r, 100, rank=r, process_group="dp")
        b.nccl(3000 + 30 * r, 100, rank=r, process_group="tp")
    skew = run(b.build()).tables["skew"].set_index("process_group")
    assert skew.loc["dp", "skew_ns"] == 10 and skew.loc["tp", "skew_ns"] == 30


# ------------------------------------------------------------------------------ synthetic sample


def test_synthetic_communication_matches_truth() -> None:
    trace, truth = synthetic_4rank()
    summary = run(trace).tables["summary"]
    for rank, t in truth["ranks"].items():
        scopes = [(None, t["overall"])] + [(s["step"], s) for s in t["steps"]]
        for step, expected in scopes:
            sel = (summary["rank"] == int(rank)) & (summary["step"].isna() if step is None else summary["step"] == step)
            [row] = summary[sel].to_dict("records")
            where = (rank, step)
            assert row["device"] == t["device"], where
            assert row["communication_ns"] == expected["communication_ns"], where
            assert row["overlap_ns"] == expected["overlap_ns"], where
            assert row["exposed_ns"] == expected["exposed_comm_ns"], where
            assert row["compute_ns"] == expected["compute_ns"], where
            assert round(row["overlap_pct"], 6) == expected["overlap_pct"], where


def test_synthetic_straggler_matches_truth() -> None:
    trace, truth = synthetic_4rank()
    result = run(trace)
    planted = truth["straggler"]
    strag = result.tables["stragglers"].set_index("rank")
    n = len(planted["collectives"])
    assert strag.loc[planted["rank"], "times_last"] == n
    assert strag.loc[planted["rank"], "aligned_times_last"] == n
    assert strag.loc[planted["rank"], "mean_late_by_ns"] == planted["late_by_ns"]
    assert strag.loc[planted["rank"], "aligned_mean_late_by_ns"] == planted["late_by_ns"]
    assert (strag.drop(index=planted["rank"])["times_last"] == 0).all()
    skew = result.tables["skew"].sort_values("first_start_ns").reset_index(drop=True)
    assert len(skew) == n
    waits = []
    for row, c in zip(skew.itertuples(), sorted(planted["collectives"], key=lambda c: min(c["arrival_ns"].values()))):
        arrivals = {int(r): v for r, v in c["arrival_ns"].items()}
        assert row.first_start_ns == min(arrivals.values())
        assert row.last_start_ns == max(arrivals.values())
        assert row.late_by_ns == c["straggler_late_by_ns"]
        assert row.straggler == planted["rank"]
        others = [w for r, w in c["wait_ns"].items() if int(r) != planted["rank"]]
        assert row.wait_caused_ns == round(sum(others) / len(others))
        waits.append(sum(others) / len(others))
    [finding] = [f for f in result.findings if f.code == "straggler_rank"]
    assert finding.rank == planted["rank"]
    assert finding.evidence["mean_late_by_ns"] == planted["late_by_ns"]
    assert finding.cost_ns_per_step == round(round(sum(waits)) / len(truth["steps"]))
    # clocks: rank 2's base time differs, absolute times agree, so no offset is seen
    assert (strag["clock_offset_ns"] == 0).all()


def test_synthetic_collective_kind_and_no_false_imbalance() -> None:
    trace, _ = synthetic_4rank()
    result = run(trace)
    assert set(result.tables["collectives"]["collective"]) == {"AllReduce"}
    assert "compute_imbalance" not in {f.code for f in result.findings}


# ------------------------------------------------------------------------------ real 8-rank set


def test_dlrm_8_ranks_cross_rank_tables() -> None:
    if not DLRM.exists():
        pytest.skip(f"real traces not available: {DLRM} is absent (it sits beside the repo)")
    result = run(traceview.load(DLRM))
    strag = result.tables["stragglers"]
    assert sorted(strag["rank"]) == list(range(8))
    assert (strag["matched"] == 8).all()  # 3 AllReduce + 5 SendRecv on every rank
    skew = result.tables["skew"]
    assert len(skew) == 8 and (skew["ranks"] == 8).all()
    assert (skew["skew_ns"] >= 0).all() and (skew["aligned_skew_ns"] >= 0).all()
    assert set(result.tables["arrivals"]["rank"]) == set(range(8))
    assert sorted(result.tables["compute_by_rank"]["rank"].unique()) == list(range(8))
    assert not result.warnings


# ------------------------------------------------------------------------------ communication not named nccl

DISPATCH = "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, int*, long*)"
COMBINE = "void dpsk::ep::internode::combine<false, 8, 4>(int4*, float*, int const*)"
FP8_GEMM = "void dpsk::gemm::fp8_gemm_kernel<4096, 7168, 128, 128>(float*, int*)"
CUB_SCAN = "void cdpsk::ep::CUB_DeviceScanKernel<int*, int*>(int*, int*, int)"


def deepep_trace() -> Trace:
    """Compute [0, 1000) and a DeepSeek FP8 GEMM [1500, 2200) (compute, despite its namespace);
    DeepEP dispatch [500, 1500) and combine [2000, 2500) on stream 20; a CUB scan [2600, 2700).

    U(comm) = 1500; U(compute) = 1000 + 700 + 100 = 1800; overlap = [500, 1000) + [2000, 2200) = 700.
    """
    b = TraceBuilder()
    b.kernel(0, 1000)
    b.kernel(1500, 700, name=FP8_GEMM)
    b.kernel(500, 1000, name=DISPATCH, stream=20)
    b.kernel(2000, 500, name=COMBINE, stream=20)
    b.kernel(2600, 100, name=CUB_SCAN)
    return b.build()


def test_deepep_is_communication_and_its_overlap_is_measured() -> None:
    result = run(deepep_trace())
    s = whole(result.tables["summary"]).iloc[0]
    assert (s["communication_ns"], s["compute_ns"], s["overlap_ns"], s["exposed_ns"]) == (1500, 1800, 700, 800)
    assert s["families"] == "deepep"
    c = whole(result.tables["collectives"]).set_index("collective")
    assert sorted(c.index) == ["deepep:combine", "deepep:dispatch"]
    assert (c.loc["deepep:dispatch", "communication_ns"], c.loc["deepep:dispatch", "overlap_ns"]) == (1000, 500)
    assert (c.loc["deepep:combine", "communication_ns"], c.loc["deepep:combine", "overlap_ns"]) == (500, 200)
    rules = result.tables["rules"]
    assert rules[["family", "rule", "kernels", "total_ns", "communication_ns"]].values.tolist() == \
        [["deepep", "deepep", 2, 1500, 1500]]


def test_symmetric_memory_and_custom_allreduce_kinds() -> None:
    b = TraceBuilder()
    b.kernel(0, 100, name="void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>("
             "c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)", stream=20)
    b.kernel(200, 50, name="void (anonymous namespace)::multimem_all_gather_kernel<16>(char*, char*)", stream=20)
    b.kernel(300, 70, name="void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)", stream=20)
    b.kernel(400, 30, name="void tensorrt_llm::kernels::twoShotAllReduceKernel<half, 8>(AllReduceParams)",
             stream=20)
    b.kernel(500, 10)
    result = run(b.build())
    c = whole(result.tables["collectives"]).set_index("collective")
    assert c["count"].to_dict() == {"custom_allreduce:AllReduce": 2, "symmetric_memory:AllGather": 1,
                                    "symmetric_memory:AllReduce": 1}
    rules = result.tables["rules"].set_index("family")
    assert rules["total_ns"].to_dict() == {"symmetric_memory": 150, "custom_allreduce": 100}
    assert list(result.tables["rules"]["family"]) == ["symmetric_memory", "custom_allreduce"]  # most time first
    assert whole(result.tables["summary"]).iloc[0]["families"] == "symmetric_memory, custom_allreduce"


def test_lookalike_gemm_stays_compute() -> None:
    """A GEMM and a CUB kernel in DeepSeek's `dpsk::`/`cdpsk::ep::` namespaces are compute: alone,
    they give no communication at all."""
    b = TraceBuilder()
    b.kernel(0, 100, name=FP8_GEMM)
    b.kernel(100, 100, name=CUB_SCAN)
    b.kernel(200, 100, name="void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*)")
    b.kernel(300, 100, name="void moe_combine_kernel<float>(float*, float const*, int)")
    result = run(b.build())
    assert result.tables["summary"].empty and result.tables["rules"].empty


def test_comm_pattern_adds_a_family_and_the_cache_keys_on_it() -> None:
    b = TraceBuilder()
    b.kernel(0, 100)
    b.kernel(50, 200, name="my_fancy_exchange_kernel<float>", stream=20)
    trace = b.build()
    assert run(trace).tables["summary"].empty  # unknown to the table: compute
    result = run(trace, comm_patterns=("fancy=fancy_exchange",))
    s = whole(result.tables["summary"]).iloc[0]
    assert (s["communication_ns"], s["overlap_ns"], s["exposed_ns"], s["families"]) == (200, 50, 150, "fancy")
    rules = result.tables["rules"]
    assert rules[["family", "rule", "kernels", "total_ns"]].values.tolist() == \
        [["fancy", "user:fancy_exchange", 1, 200]]
    assert list(whole(result.tables["collectives"])["collective"]) == ["fancy:unknown"]
    assert run(trace).tables["summary"].empty  # the cache did not hand back the other options' figures


def two_rank_deepep(exposed_ns: int = 400) -> Trace:
    """Two ranks, each: compute [0, 1000), DeepEP combine [1000 - 100, 1000 + exposed_ns) on stream 20
    (100 ns overlapped), and a second combine fully under compute [200, 300)."""
    b = TraceBuilder()
    for r in (0, 1):
        b.kernel(0, 1000, rank=r)
        b.kernel(900, 100 + exposed_ns, name=COMBINE, rank=r, stream=20)
        b.kernel(200, 100, name=COMBINE, rank=r, stream=20)
    return b.build()


def test_exposed_collective_claims_are_its_exposed_intervals() -> None:
    result = run(two_rank_deepep())
    [f] = [f for f in result.findings if f.code == "exposed_collective"]
    assert f.evidence["collective"] == "deepep:combine" and f.part_of == "exposed_communication"
    assert "DeepEP" in f.recommendation
    assert f.claims is not None
    assert f.claims.by_gpu() == {(0, 0): 400, (1, 1): 400}
    assert f.claims.largest(2) == [(0, 0, 1000, 1400), (1, 1, 1000, 1400)]
    exposed = whole(result.tables["collectives"]).set_index("rank")["exposed_ns"].to_dict()
    assert exposed == {0: 400, 1: 400}


def test_straggler_claims_are_the_other_ranks_waits() -> None:
    arrivals = [{0: 600_000, 1: 610_000, 2: 810_000}, {0: 620_000, 1: 600_000, 2: 820_000},
                {0: 600_000, 1: 605_000, 2: 805_000}]
    result = run(multi_rank(arrivals, [1_000_000] * 3))
    [f] = [f for f in result.findings if f.code == "straggler_rank"]
    assert f.rank == 2 and f.part_of == "exposed_communication" and f.claims is not None
    # on each other rank: from its own start, for (straggler start - its start)
    assert f.claims.by_gpu() == {(0, 0): (210 + 200 + 205) * 1000, (1, 1): (200 + 220 + 200) * 1000}
    first_step = sorted(i for i in f.claims.largest(6) if i[2] < 10_000_000)
    assert first_step == [(0, 0, 600_000, 810_000), (1, 1, 610_000, 810_000)]
    assert all(x.claims is None for x in result.findings if x.code == "compute_imbalance")


def test_straggler_claims_stay_on_each_ranks_own_clock() -> None:
    """Rank 1's clock runs 5 ms ahead: the straggler (rank 0) is judged on corrected clocks, but the
    time rank 1 waits is claimed at rank 1's own timestamps."""
    arrivals = [{0: 800_000, 1: 600_000, 2: 610_000}, {0: 820_000, 1: 620_000, 2: 600_000},
                {0: 805_000, 1: 600_000, 2: 605_000}]
    trace = multi_rank(arrivals, [1_000_000] * 3, offsets={1: 5_000_000})
    [f] = [f for f in run(trace).findings if f.code == "straggler_rank"]
    assert f.rank == 0 and f.claims is not None
    assert f.claims.by_gpu() == {(1, 1): (200 + 200 + 205) * 1000, (2, 2): (190 + 220 + 200) * 1000}
    rank1 = sorted(i for i in f.claims.largest(6) if i[0] == 1)
    assert rank1[0] == (1, 1, 5_600_000, 5_800_000)


def test_straggler_claims_are_clipped_to_the_waiting_kernel() -> None:
    """Rank 1 starts after rank 0's kernel has ended: rank 0's claim is its whole kernel, no more."""
    b = TraceBuilder()
    for k in range(3):
        t0 = k * 10_000
        b.kernel(t0, 50, rank=0)
        b.kernel(t0, 50, rank=1)
        b.nccl(t0 + 100, 100, rank=0)
        b.nccl(t0 + 400, 100, rank=1)
    [f] = [f for f in run(b.build()).findings if f.code == "straggler_rank"]
    assert f.rank == 1 and f.claims is not None
    assert f.claims.by_gpu() == {(0, 0): 3 * 100}


def test_claims_travel_in_the_cross_rank_inputs() -> None:
    """Rank by rank (as a job gathers them: compacted and pickled) the claims are the same as on
    the whole trace."""
    import pickle

    from traceview.pipeline import select_rank

    arrivals = [{0: 600_000, 1: 610_000, 2: 810_000}, {0: 620_000, 1: 600_000, 2: 820_000},
                {0: 600_000, 1: 605_000, 2: 805_000}]
    trace = multi_rank(arrivals, [1_000_000] * 3)
    whole_trace = {f.code: f.claims for f in run(trace).findings}
    options = Options()
    parts = []
    for rank in trace.rank_ids:
        sub, rows = select_rank(trace, rank)
        part = comm.cross_rank_inputs(context(sub, options)).remap_rows(rows, 0).compact()
        parts.append(pickle.loads(pickle.dumps(part)))
    by_rank = {f.code: f.claims for f in comm.reduce_ranks(parts, options).findings}
    assert set(by_rank) == set(whole_trace) and "straggler_rank" in by_rank and "exposed_collective" in by_rank
    for code, claims in whole_trace.items():
        assert claims is not None and by_rank[code] is not None
        assert by_rank[code].by_gpu() == claims.by_gpu(), code


def test_dlrm_claims() -> None:
    if not DLRM.exists():
        pytest.skip(f"real traces not available: {DLRM} is absent (it sits beside the repo)")
    result = run(traceview.load(DLRM))
    exposed = whole(result.tables["collectives"])
    for f in (f for f in result.findings if f.code == "exposed_collective"):
        rows = exposed[exposed["collective"] == f.evidence["collective"]]
        assert f.claims is not None
        assert f.claims.by_gpu() == {(int(r), int(d)): int(e) for r, d, e in
                                     zip(rows["rank"], rows["device"], rows["exposed_ns"])}
    [strag] = [f for f in result.findings if f.code == "straggler_rank"]
    assert strag.rank == 7 and strag.claims is not None
    assert strag.claims.ranks() == set(range(7))  # the others wait, on their own GPUs
    # each claimed interval lies inside a communication kernel of its rank
    arr = result.tables["arrivals"]
    for rank, _, start, end in strag.claims.largest(len(strag.claims)):
        mine = arr[arr["rank"] == rank]
        assert ((mine["start_ns"] <= start) & (end <= mine["end_ns"])).any()
    # without clipping the waits would add up to the caused wait times the other ranks
    stragglers = result.tables["stragglers"].set_index("rank")
    assert strag.claims.total_ns() <= stragglers.loc[7, "wait_caused_ns"] * 7 + 7 * len(arr)
    assert result.tables["rules"]["family"].unique().tolist() == ["nccl"]


def test_rule_table_reaches_the_report() -> None:
    """Through the pipeline (rank by rank), with a user rule: the report's communication section
    has the rules table and the summary's families, and the DeepEP time is communication."""
    from traceview.pipeline import analyze as pipeline_analyze

    b = TraceBuilder()
    for r in (0, 1):
        b.kernel(0, 1000, rank=r)
        b.kernel(900, 500, name=COMBINE, rank=r, stream=20)
        b.kernel(1400, 300, name="my_fancy_exchange_kernel", rank=r, stream=20)
    report = pipeline_analyze(b.build(), Options(comm_patterns=("fancy=fancy_exchange",)))
    rules = report.table("communication", "rules")
    assert rules[["rank", "family", "kernels", "total_ns"]].values.tolist() == [
        [0, "deepep", 1, 500], [0, "fancy", 1, 300], [1, "deepep", 1, 500], [1, "fancy", 1, 300]]
    assert report["analyses"]["communication"]["tables"]["rules"]["title"] == \
        "Communication by classification rule (whole trace)"
    summary = report.table("communication", "summary")
    assert set(summary["families"]) == {"deepep, fancy"} and set(summary["exposed_ns"]) == {700}


def test_matched_occurrences_stop_at_the_fewest_any_rank_ran() -> None:
    """Across ranks, each (collective, process group, step) is matched up to the smallest number of
    kernels any rank ran of it (the least per-rank count, computed with column operations); the
    reference is the former per-group ``value_counts().min()``. Many steps, uneven counts."""
    rng = np.random.default_rng(7)
    rows = []
    for step in range(400):
        for kind, pg in (("all_reduce", "0"), ("all_gather", "1"), ("broadcast", "")):
            for rank in range(4):
                n = int(rng.integers(0, 4))  # 0..3 kernels: some ranks miss a collective in a step
                for k in range(n):
                    start = step * 10_000_000 + k * 1_000_000 + int(rng.integers(0, 50_000))
                    rows.append({"rank": rank, "collective": kind, "process_group": pg, "step": step,
                                 "start": start, "end": start + int(rng.integers(1_000, 90_000))})
    frame = pd.DataFrame(rows)
    matched, _ = comm.match_collectives(frame)
    keys = ["collective", "process_group", "step"]
    c = frame.sort_values(["rank", "start", "end"]).copy()
    c["occurrence"] = c.groupby(["rank"] + keys, sort=False).cumcount()
    c["ranks"] = c.groupby(keys + ["occurrence"])["rank"].transform("size")
    c = c[c["ranks"] >= 2]
    c["min_count"] = c.groupby(keys)["rank"].transform(lambda s: s.value_counts().min())
    expected = c[c["occurrence"] < c["min_count"]]
    got = matched[["rank", *keys, "occurrence"]].sort_values(["rank", *keys, "occurrence"]).reset_index(drop=True)
    want = expected[["rank", *keys, "occurrence"]].sort_values(["rank", *keys, "occurrence"]).reset_index(drop=True)
    assert len(want) > 1000 and got.equals(want)
