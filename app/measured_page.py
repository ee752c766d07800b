"""The Efficiency page's measured section: Nsight Compute's counters joined to the trace's kernels
(``traceview analyze TRACE --ncu FILE|DIR``), read from the ``measured`` analysis's tables in the
report (docs/metrics.md, "Measured efficiency"); nothing here computes a metric or matches a kernel.

* per matched kernel group (rank, kernel, grid, block, ncu record): its trace time, the SOL
  compute and memory throughput (% of peak), achieved occupancy, L2 hit rate, DRAM bytes, the
  bound-by label, measured and modelled FLOPs and their ratio, and ncu's top rule and its estimated
  speedup (the ``kernels`` table);
* how the ncu records matched the trace's kernels: the rule of each record and why the others did
  not match (the ``matches`` table), with the analysis's warnings that count both sides;
* the ``ncu_rule`` findings.
"""

from __future__ import annotations

from typing import Any

from .components import frame_table, message, section

ANALYSIS = "measured"
KERNELS_ID = "eff-measured"
MATCHES_ID = "eff-ncu-matches"
#: the kernels table's columns as the page shows them (the report's ``measured.kernels`` table)
KERNEL_COLUMNS = ["rank", "name", "grid", "block", "kernels", "trace_ns", "measured_on_invocation", "bound_by",
                  "sm_throughput_pct", "memory_throughput_pct", "achieved_occupancy_pct", "l2_hit_rate_pct",
                  "dram_bytes", "measured_flops", "modelled_flops", "flops_ratio", "model_off", "top_rule",
                  "top_speedup_pct", "match_rule"]
KERNEL_RENAME = {"trace_ns": "trace time", "measured_on_invocation": "measured on invocation",
                 "bound_by": "bound by", "sm_throughput_pct": "SOL compute %", "memory_throughput_pct": "SOL memory %",
                 "achieved_occupancy_pct": "achieved occupancy %", "l2_hit_rate_pct": "L2 hit %",
                 "dram_bytes": "DRAM bytes", "measured_flops": "measured FLOPs", "modelled_flops": "modelled FLOPs",
                 "flops_ratio": "measured / modelled", "model_off": "model off > 20%", "top_rule": "top ncu rule",
                 "top_speedup_pct": "est. speedup %", "match_rule": "match rule"}
MATCH_COLUMNS = ["file", "ncu_id", "kernel", "grid", "block", "invocation", "trace_name", "rule", "matched", "reason"]
MATCH_RENAME = {"ncu_id": "ncu id", "trace_name": "trace kernel", "rule": "match rule",
                "matched": "trace kernels matched", "reason": "why not matched"}


def has_measurements(ctx: Any) -> bool:
    """Whether the report holds ncu records (the run was analysed with ``--ncu``)."""
    return bool(len(ctx.table(ANALYSIS, "matches")))


def sections(ctx: Any) -> list[Any]:
    """The measured sections of the Efficiency page (one line without ``--ncu``)."""
    from .pages import finding_card, finding_rows, warnings_block

    if not has_measurements(ctx):
        return [section("Measured efficiency (Nsight Compute)", message(
            "No Nsight Compute measurements in this report: analyse the trace with --ncu FILE|DIR (ncu --csv "
            "exports) for each profiled kernel's speed of light, occupancy, DRAM and L2 traffic, and ncu's rules."))]
    kernels = ctx.table(ANALYSIS, "kernels")
    out: list[Any] = [section(
        "Measured kernels (Nsight Compute)",
        frame_table(kernels, KERNELS_ID, columns=KERNEL_COLUMNS, rename=KERNEL_RENAME, page_size=15, filter_=True,
                    tooltips={"name": "name", "top_rule": "top_rule"},
                    empty="No ncu record matched a kernel of this selection (see the matches below)."),
        note="One row per rank, kernel, launch configuration and ncu record: its kernels' time in the trace beside "
             "ncu's replay of one of them. SOL compute / memory = ncu's SM and memory throughput as % of peak; bound "
             "by: compute or memory when the larger is at least 60% of peak, else latency (ncu's SOLBottleneck "
             "rule); measured FLOPs from ncu's instruction counts, modelled FLOPs from the efficiency analysis's "
             "cost model (docs/metrics.md, Measured efficiency).")]
    notes = warnings_block(ctx, (ANALYSIS,))
    out.append(section(
        "ncu join: match rules and unmatched records", *notes,
        frame_table(ctx.table(ANALYSIS, "matches"), MATCHES_ID, columns=MATCH_COLUMNS, rename=MATCH_RENAME,
                    page_size=10, filter_=True, tooltips={"kernel": "kernel", "trace_name": "trace_name"}),
        note="Each ncu record, the rule that matched it to the trace's kernels (exact, normalised, loose or unique "
             "base name, then grid and block, then invocation order) and how many trace kernels it measures; a "
             "record no rule matches says why."))
    cards = [finding_card(f, origin_ns=ctx.origin_ns) for f in finding_rows(ctx.report, ANALYSIS)]
    if cards:
        out.append(section("Nsight Compute rules on the trace's kernels", *cards))
    return out
