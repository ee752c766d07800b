"""Measured efficiency: Nsight Compute's hardware counters joined to the trace's kernels.

With ``--ncu FILE|DIR`` (``Options.ncu``) the ncu kernel records (``traceview.parsers.ncu``) are
matched to the trace's kernels (rules: ``analyses/ncu_join.py``) and each matched kernel group (rank,
kernel name, grid, block, ncu record) gets its measurements beside its trace time (docs/metrics.md,
"Measured efficiency"):

- ``sm_throughput_pct``: ncu's Compute (SM) Throughput (``sm__throughput.avg.pct_of_peak_sustained_elapsed``);
  ``memory_throughput_pct``: Memory Throughput (``gpu__compute_memory_throughput...``), the busiest
  memory unit; ``dram_throughput_pct``; ``achieved_occupancy_pct``; ``l2_hit_rate_pct``;
  ``dram_bytes`` (``dram__bytes_read.sum`` + ``dram__bytes_write.sum``, or ``dram__bytes.sum``);
  ``duration_ns`` (``gpu__time_duration.sum``, ncu's own replay of the kernel).
- ``bound_by``: ``compute`` or ``memory`` when the larger of SM and memory throughput is at least
  60% of peak (whichever is larger), else ``latency``: ncu's own SOLBottleneck rule ("achieved
  compute throughput and/or memory bandwidth below 60.0% of peak typically indicate latency issues").
- ``measured_flops``: the FLOPs ncu counted, where the export has the metrics: tensor-pipe ops
  (``sm__ops_path_tensor_*.sum``, one FMA counted as 2), the legacy ``flop_count_{hp,sp,dp}.sum`` and
  the SASS FP instruction counts (``sm__sass_thread_inst_executed_op_{h,f,d}{add,mul,fma}_pred_on.sum``,
  an FMA as 2). ``modelled_flops``: the efficiency analysis's model of the same kernels
  (``efficiency.kernel_flops``, mean per kernel); ``flops_ratio`` = measured / modelled, and
  ``model_off`` when it is off by more than 20%.

Findings: ``ncu_rule`` per kernel group with an ncu rule result of an estimated speedup (OPT rules):
the cost basis is the group's time in the trace; the claim is the last (largest speedup) % of each
of its kernels (ncu's speedups are not additive: the largest is used, every rule is listed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceview.claims import Claims
from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult, Finding, Options
from traceview.model import Kind
from traceview.parsers.ncu import NcuMetrics, read_ncu
from traceview.registry import AnalysisSpec, TableSpec, register_input
from traceview.units import fmt_ns

from .ncu_join import DIMS, KEY, Join, join
from .steps import activity

NAME = "measured"
#: a model off by more than this (relative) is flagged
MODEL_TOLERANCE = 0.2
#: ncu's SOLBottleneck threshold (% of peak) between a throughput-bound and a latency-bound kernel
BOUND_PCT = 60.0
#: measure -> (section, metric) candidates, in order ("" section: any section, the raw metric name)
MEASURES: dict[str, tuple[tuple[str, str], ...]] = {
    "duration_ns": (("", "gpu__time_duration.sum"), ("GPU Speed Of Light Throughput", "Duration")),
    "sm_throughput_pct": (("", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
                          ("GPU Speed Of Light Throughput", "Compute (SM) Throughput")),
    "memory_throughput_pct": (("", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
                              ("GPU Speed Of Light Throughput", "Memory Throughput")),
    "dram_throughput_pct": (("", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                            ("GPU Speed Of Light Throughput", "DRAM Throughput")),
    "achieved_occupancy_pct": (("", "sm__warps_active.avg.pct_of_peak_sustained_active"),
                               ("Occupancy", "Achieved Occupancy")),
    "theoretical_occupancy_pct": (("", "sm__maximum_warps_per_active_cycle_pct"),
                                  ("Occupancy", "Theoretical Occupancy")),
    "l2_hit_rate_pct": (("", "lts__t_sector_hit_rate.pct"), ("Memory Workload Analysis", "L2 Hit Rate")),
    "l1_hit_rate_pct": (("", "l1tex__t_sector_hit_rate.pct"), ("Memory Workload Analysis", "L1/TEX Hit Rate")),
    "dram_bytes_per_s": (("", "dram__bytes.sum.per_second"), ("Memory Workload Analysis", "Memory Throughput")),
    "sm_frequency_hz": (("", "gpc__cycles_elapsed.avg.per_second"), ("GPU Speed Of Light Throughput", "SM Frequency")),
    "elapsed_cycles": (("", "gpc__cycles_elapsed.max"), ("GPU Speed Of Light Throughput", "Elapsed Cycles")),
    "dram_read_bytes": (("", "dram__bytes_read.sum"),),
    "dram_write_bytes": (("", "dram__bytes_write.sum"),),
    "dram_total_bytes": (("", "dram__bytes.sum"),),
}
#: FLOP-counting metrics: (prefix, suffix, FLOPs per count)
FLOP_METRICS = tuple([("sm__ops_path_tensor_", ".sum", 1.0)]
                     + [(f"flop_count_{p}", ".sum", 1.0) for p in ("hp", "sp", "dp")]
                     + [(f"{unit}__sass_thread_inst_executed_op_{p}{op}_pred_on", ".sum", 2.0 if op == "fma" else 1.0)
                        for unit in ("sm", "smsp") for p in "hfd" for op in ("add", "mul", "fma")])
KERNEL_COLUMNS = ["rank", "name", "grid", "block", "kernels", "trace_ns", "measured_on_invocation", "match_rule",
                  "bound_by", "sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct",
                  "achieved_occupancy_pct", "l2_hit_rate_pct", "dram_bytes", "duration_ns", "measured_flops",
                  "modelled_flops", "flops_ratio", "model_off", "top_rule", "top_speedup_pct", "ncu_record"]


def ncu_input(ctx: AnalysisContext) -> NcuMetrics | None:
    """The ncu exports of ``Options.ncu``, None without any."""
    if not ctx.options.ncu:
        return None
    return read_ncu(list(ctx.options.ncu))


register_input("measured.ncu", ncu_input)


def measures(metrics: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """One column per measure (and ``measured_flops``), one row per record of ``records``."""
    rec = ["pid", "ncu_id", *KEY]
    keyed = metrics.set_index(rec)
    out = pd.DataFrame(index=pd.MultiIndex.from_frame(records[rec]))
    for measure, candidates in MEASURES.items():
        col = pd.Series(np.nan, index=out.index)
        for section, metric in candidates:
            sel = keyed[(keyed["metric"] == metric) & ((keyed["section"] == section) if section else True)]
            sel = sel[sel["value"].notna()]
            got = sel.groupby(level=list(range(len(rec))))["value"].first()
            col = col.fillna(got.reindex(out.index))
        out[measure] = col.to_numpy()
    flops = pd.Series(0.0, index=out.index)
    any_flops = pd.Series(False, index=out.index)
    for prefix, suffix, per in FLOP_METRICS:
        m = keyed["metric"]
        sel = keyed[m.str.startswith(prefix) & m.str.endswith(suffix) & keyed["value"].notna()]
        got = (sel["value"] * per).groupby(level=list(range(len(rec)))).sum().reindex(out.index)
        flops = flops.add(got.fillna(0.0))
        any_flops |= got.notna()
    out["measured_flops"] = np.where(any_flops, flops, np.nan)
    summed = out["dram_read_bytes"].fillna(0) + out["dram_write_bytes"].fillna(0)
    has_rw = out["dram_read_bytes"].notna() | out["dram_write_bytes"].notna()
    out["dram_bytes"] = out["dram_total_bytes"].where(out["dram_total_bytes"].notna(), summed.where(has_rw))
    return out.reset_index(drop=True)


def bound_by(sm: np.ndarray, mem: np.ndarray) -> np.ndarray:
    """compute / memory / latency (``unknown`` without either throughput)."""
    top = np.fmax(sm, mem)
    label = np.where(np.nan_to_num(sm, nan=-1) >= np.nan_to_num(mem, nan=-1), "compute", "memory")
    return np.where(np.isnan(top), "unknown", np.where(top >= BOUND_PCT, label, "latency")).astype(object)


def trace_kernels(ctx: AnalysisContext) -> tuple[pd.DataFrame, list[str]]:
    """One row per kernel of the activity: entry, rank, device, name_code, start, end, grid/block
    (-1 where the trace has none), and the names of the name codes."""
    act = activity(ctx)
    sel = np.flatnonzero(act.kind == int(Kind.KERNEL))
    rows = act.row[sel]
    col = ctx.trace.events.column("name")
    col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    frame = pd.DataFrame({"entry": sel, "rank": act.rank[sel], "device": act.device[sel],
                          "name_code": col.indices.to_numpy(zero_copy_only=False).astype(np.int64)[rows],
                          "start": act.start[sel], "end": act.end[sel]})
    for dim in DIMS:
        values = ctx.trace.events.column(dim).combine_chunks().fill_null(-1).to_numpy(zero_copy_only=False)
        frame[dim] = values.astype(np.int64)[rows]
    return frame, [v if v is not None else "" for v in col.dictionary.to_pylist()]


def _dims(frame: pd.DataFrame, prefix: str) -> pd.Series:
    parts = [frame[f"{prefix}_{a}"].astype(np.int64).astype(str) for a in "xyz"]
    text = "(" + parts[0] + ", " + parts[1] + ", " + parts[2] + ")"
    return text.where(frame[f"{prefix}_x"] >= 0, "")


def kernel_table(ctx: AnalysisContext, tk: pd.DataFrame, joined: Join, ncu: NcuMetrics) -> pd.DataFrame:
    """One row per (rank, trace kernel name, grid, block, ncu record) matched."""
    records = joined.records
    entry, rec = joined.entry, joined.record
    if not len(entry):
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    by_entry = tk.set_index("entry").loc[entry]
    flops = np.asarray(ctx.input("efficiency.kernel_flops"), dtype=np.float64)[entry]
    rows = pd.DataFrame({"rank": by_entry["rank"].to_numpy(), "record": rec, "trace_ns": (by_entry["end"] -
                         by_entry["start"]).to_numpy(), "modelled": flops})
    grouped = rows.groupby(["rank", "record"], sort=False).agg(kernels=("trace_ns", "size"),
                                                               trace_ns=("trace_ns", "sum"),
                                                               modelled_flops=("modelled", "mean")).reset_index()
    meas = measures(ncu.metrics, records)
    rec_rows = records.iloc[grouped["record"].to_numpy()].reset_index(drop=True)
    m = meas.iloc[grouped["record"].to_numpy()].reset_index(drop=True)
    top = top_rules(ncu.rules, records)
    out = pd.DataFrame({"rank": grouped["rank"], "name": rec_rows["trace_name"], "grid": _dims(rec_rows, "grid"),
                        "block": _dims(rec_rows, "block"), "kernels": grouped["kernels"],
                        "trace_ns": grouped["trace_ns"].astype(np.int64),
                        "measured_on_invocation": rec_rows["invocation"], "match_rule": rec_rows["rule"]})
    out["bound_by"] = bound_by(m["sm_throughput_pct"].to_numpy(), m["memory_throughput_pct"].to_numpy())
    for c in ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "achieved_occupancy_pct",
              "l2_hit_rate_pct", "dram_bytes", "duration_ns", "measured_flops"):
        out[c] = m[c]
    out["modelled_flops"] = grouped["modelled_flops"]
    with np.errstate(invalid="ignore", divide="ignore"):
        out["flops_ratio"] = np.where(out["modelled_flops"] > 0, out["measured_flops"] / out["modelled_flops"], np.nan)
    out["model_off"] = (np.abs(out["flops_ratio"] - 1.0) > MODEL_TOLERANCE).to_numpy()
    out["top_rule"] = top["rule"].iloc[grouped["record"].to_numpy()].to_numpy()
    out["top_speedup_pct"] = top["speedup_pct"].iloc[grouped["record"].to_numpy()].to_numpy()
    out["record"] = grouped["record"].to_numpy()
    out["ncu_record"] = out["record"].astype(np.int64)  # the row of the matches table (records in ncu's order)
    return out.sort_values("trace_ns", ascending=False, kind="stable").reset_index(drop=True)


def top_rules(rules: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """Per record (row of ``records``): the rule with the largest estimated speedup, and all of them."""
    rec = ["pid", "ncu_id", *KEY]
    with_speedup = rules[rules["speedup_pct"].notna() & (rules["speedup_pct"] > 0)]
    idx = records[rec].reset_index().rename(columns={"index": "at"})
    merged = with_speedup.merge(idx, on=rec, how="inner").sort_values("speedup_pct", ascending=False, kind="stable")
    first = merged.drop_duplicates("at").set_index("at")
    every = merged.groupby("at").apply(lambda g: ", ".join(f"{r} ({s:.0f}%)" for r, s in
                                                           zip(g["rule"], g["speedup_pct"])), include_groups=False)
    out = pd.DataFrame(index=range(len(records)))
    out["rule"] = first["rule"].reindex(out.index).fillna("").to_numpy(object)
    out["speedup_pct"] = first["speedup_pct"].reindex(out.index).to_numpy(np.float64)
    out["all"] = every.reindex(out.index).fillna("").to_numpy(object) if len(every) else ""
    return out


def rule_findings(table: pd.DataFrame, tk: pd.DataFrame, joined: Join, rules: pd.DataFrame) -> list[Finding]:
    """``ncu_rule`` per kernel group with an estimated speedup: the last speedup% of its kernels."""
    top = top_rules(rules, joined.records)
    entry, rec = joined.entry, joined.record
    by_entry = tk.set_index("entry")
    rank_of = by_entry.loc[entry, "rank"].to_numpy()
    findings = []
    for row in table[table["top_speedup_pct"].fillna(0) > 0].itertuples(index=False):
        sel = entry[(rec == row.record) & (rank_of == row.rank)]
        k = by_entry.loc[sel]
        share = float(row.top_speedup_pct) / 100.0
        start, end = k["start"].to_numpy(), k["end"].to_numpy()
        cut = end - np.round((end - start) * share).astype(np.int64)
        claims = Claims.of(k["rank"].to_numpy(), k["device"].to_numpy(), cut, end)
        saving = int(round(row.trace_ns * share))
        findings.append(Finding(
            code="ncu_rule", severity="low", analysis=NAME, rank=int(row.rank),
            title=f"Nsight Compute: {row.name[:80]} {row.grid}x{row.block} could run up to {row.top_speedup_pct:.0f}% "
                  f"faster ({row.top_rule}; {row.kernels} kernels, {fmt_ns(int(row.trace_ns))} in the trace)",
            recommendation="Read the rule's description in the measured analysis's rules table (ncu --page details "
                           "gives the same text) and the kernel's source counters in Nsight Compute.",
            cost_ns_per_step=saving, claims=claims,
            evidence={"kernel": row.name, "grid": row.grid, "block": row.block, "kernels": int(row.kernels),
                      "trace_ns": int(row.trace_ns), "measured_on_invocation": int(row.measured_on_invocation),
                      "rules": str(top["all"].iloc[int(row.record)]), "bound_by": row.bound_by,
                      "estimated_speedup_pct": float(row.top_speedup_pct)}))
    return findings


MATCH_COLUMNS = ["file", "ncu_id", "kernel", "grid", "block", "invocation", "trace_name", "rule", "matched",
                 "reason"]
METRIC_COLUMNS = ["file", "ncu_id", "kernel", "grid", "block", "invocation", "section", "metric", "unit", "value",
                  "raw_unit", "raw_value"]
RULE_COLUMNS = ["kernel", "grid", "block", "invocation", "section", "rule", "rule_type", "speedup_type",
                "speedup_pct", "description"]


def _with_dims(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    out = frame.assign(grid=_dims(frame, "grid"), block=_dims(frame, "block")) if len(frame) else \
        frame.assign(grid="", block="")
    return out[columns].reset_index(drop=True)


def _empty_cross() -> dict[str, pd.DataFrame]:
    return {"matches": pd.DataFrame(columns=MATCH_COLUMNS), "rules": pd.DataFrame(columns=RULE_COLUMNS),
            "kernel_metrics": pd.DataFrame(columns=METRIC_COLUMNS)}


@dataclass
class JoinCounts:
    """What the cross-rank step needs of a batch of ranks: each ncu record's match (rule, trace
    name, reason) and matched kernels, and the batch's trace kernels and matched kernels."""

    records: pd.DataFrame
    trace_kernels: int = 0
    matched_kernels: int = 0

    def remap_rows(self, rows: object, offset: int = 0) -> "JoinCounts":
        del rows, offset  # nothing here refers to event rows
        return self

    def compact(self) -> "JoinCounts":
        return self


def build_join(ctx: AnalysisContext) -> tuple[pd.DataFrame, Join] | None:
    """The trace's kernels and their join to the ncu records (None without ``--ncu``), once per context."""
    ncu: NcuMetrics | None = ctx.input("measured.ncu")
    if ncu is None:
        return None
    tk, names = trace_kernels(ctx)
    return tk, join(ncu.kernels.reset_index(drop=True), tk, names)


register_input("measured.join", build_join, requires=("activity", "measured.ncu"))


def gather(ctx: AnalysisContext) -> JoinCounts:
    joined: tuple[pd.DataFrame, Join] | None = ctx.input("measured.join")
    if joined is None:
        return JoinCounts(pd.DataFrame(columns=MATCH_COLUMNS))
    tk, j = joined
    return JoinCounts(j.records, len(tk), int(j.entry.size))


def reduce(parts: list[JoinCounts], options: Options) -> AnalysisResult:
    """The records' matches over every batch of ranks, the rule results and every metric (once)."""
    result = AnalysisResult(name=NAME, tables=_empty_cross())
    parts = [p for p in parts if len(p.records)]
    if not parts or not options.ncu:
        return result
    ncu = read_ncu(list(options.ncu))
    records = parts[0].records.copy()
    records["matched"] = np.sum([p.records["matched"].to_numpy() for p in parts], axis=0)
    for p in parts[1:]:  # a record matched on any batch takes that batch's rule and name
        take = (records["rule"] == "") & (p.records["rule"] != "")
        records.loc[take, ["rule", "trace_name", "reason"]] = p.records.loc[take, ["rule", "trace_name", "reason"]]
    records.loc[records["rule"] != "", "reason"] = ""
    records.loc[(records["matched"] == 0) & (records["reason"] == ""), "reason"] = \
        "more ncu records of this kernel than trace kernels"
    result.tables = {"matches": _with_dims(records, MATCH_COLUMNS), "rules": _with_dims(ncu.rules, RULE_COLUMNS),
                     "kernel_metrics": _with_dims(ncu.metrics, METRIC_COLUMNS)}
    _match_warnings(result, records, sum(p.trace_kernels for p in parts), sum(p.matched_kernels for p in parts))
    return result


def _match_warnings(result: AnalysisResult, records: pd.DataFrame, trace_kernels: int, matched: int) -> None:
    used = records[records["rule"] != ""].groupby("rule")["matched"].agg(["size", "sum"])
    for rule, row in used.iterrows():
        result.warnings.append(f"ncu join: {int(row['size'])} ncu record(s) matched by {rule} "
                               f"({int(row['sum'])} trace kernels)")
    for reason, n in records.loc[records["matched"] == 0, "reason"].value_counts().items():
        result.warnings.append(f"ncu join: {int(n)} ncu record(s) not matched: {reason}")
    if trace_kernels - matched:
        result.warnings.append(f"ncu join: {trace_kernels - matched:,} of {trace_kernels:,} trace kernels have no ncu "
                               "record: the measured figures cover the others only")


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    joined: tuple[pd.DataFrame, Join] | None = ctx.input("measured.join")
    ncu: NcuMetrics | None = ctx.input("measured.ncu")
    if joined is None or ncu is None:
        return AnalysisResult(name=NAME, tables={"kernels": pd.DataFrame(columns=KERNEL_COLUMNS)})
    tk, j = joined
    table = kernel_table(ctx, tk, j, ncu)
    result = AnalysisResult(name=NAME, tables={"kernels": table[KERNEL_COLUMNS]})
    off = table[table["model_off"]]
    if len(off):
        result.warnings.append(f"{len(off)} matched kernel group(s) have modelled FLOPs off the measured ones by more "
                               f"than {MODEL_TOLERANCE:.0%} (kernels table, model_off)")
    result.findings.extend(rule_findings(table, tk, j, ncu.rules))
    return result


SPEC = AnalysisSpec(
    name=NAME,
    title="Measured efficiency (Nsight Compute)",
    run=analyze,
    requires=("activity", "measured.ncu", "measured.join", "efficiency.kernel_flops"),
    order=92,
    tables=(
        TableSpec("kernels", "Measured kernels: ncu's speed of light, occupancy, DRAM and FLOPs beside the trace time",
                  sort_by="trace_ns"),
        TableSpec("matches", "ncu kernel records and how each matched the trace's kernels", cross_rank=True),
        TableSpec("rules", "ncu rule results (estimated speedups)", cross_rank=True),
        TableSpec("kernel_metrics", "Every ncu metric of every kernel record (base units)", cross_rank=True),
    ),
    finding_codes=("ncu_rule",),
    finding_precedence=(("ncu_rule", 100),),  # busy time above what the kernel can reach
    gather=gather,
    reduce=reduce,
    headline_table="kernels",
)
