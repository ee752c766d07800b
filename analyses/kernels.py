"""Kernel breakdown: which kernels (and copies) take the GPU's time, by name and by category.

Definitions (docs/metrics.md, "Kernel breakdown"), per rank and GPU device; all times int64 ns:

- The rows are GPU activity: kernels, memcpy and memset (not sync events), all streams. A
  "kernel name" is the event name as the trace gives it (demangled, unshortened), so memcpy and
  memset appear under their names too (``Memcpy HtoD (Pageable -> Device)``, ``Memset (Device)``).
- Per name: ``count``; ``total_ns`` = sum of durations (not a union: concurrent instances add up);
  ``mean_ns`` = total / count; ``min_ns``, ``max_ns``; ``std_ns`` = the **population** standard
  deviation (ddof = 0) of the durations. ``mean_ns`` and ``std_ns`` are float64 ns (the exact
  ratio; the other time columns are int64). HTA reports the sample std (ddof = 1);
  ``sample std = std_ns * sqrt(count / (count - 1))``.
- ``share_pct`` = 100 x total_ns / (sum of the durations of all GPU activity of that rank, device
  [and step]); the shares of one rank and device add up to 100.
- Category: ``communication`` (a communication kernel: the rule table of ``analyses/comm_rules.py``),
  then ``memory`` (memcpy and memset events, by kind), then the first rule of the kernel-category
  table ``classify.KERNEL_RULES`` that matches the name (regexes, case ignored: attention,
  convolution, GEMM (NVIDIA and AMD libraries: cuBLAS, CUTLASS, hipBLASLt/rocBLAS Tensile ``Cijk_``,
  Composable Kernel, aiter, Triton), elementwise, reduction), else ``other``. docs/metrics.md
  "Kernel breakdown" holds the table as the code writes it.
- Tiny kernel: a compute kernel (not communication, not memcpy/memset) shorter than 10 us.
  ``tiny_gap_ns`` = for each tiny kernel, the idle time on its stream just before it (its start
  minus the end of the previous activity on the same stream), capped at 10 us: an estimate of the
  launch/scheduling overhead that fusing those kernels would remove. ``tiny_graph_kernels`` = the
  tiny kernels replayed from a CUDA/HIP graph (``launch_overhead.graph_replayed``).

Tables: ``kernels`` (every name; per rank and device, by total time), ``top_kernels`` (the top
``Options.top_n`` per rank and device), ``kernels_by_step`` (the same figures per step),
``job_kernels`` (every name over the whole job: the cross-rank step, :func:`job_kernels`),
``categories`` (per rank, device, category; ``step`` None = whole trace, then per step),
``tiny_kernels`` (per rank, device; ``step`` None = whole trace, then per step).

Findings: ``dominant_kernels`` (info: one category, or one kernel, takes most of the GPU time; a
fact to know, not a problem) and ``many_tiny_kernels`` (a fusion opportunity: at least half of the
compute kernels are tiny and there are at least 100 per step). Its claims are GPU idle time: each
device-wide idle gap (idle_gaps' ``gaps``) that a tiny kernel launched on its own (not from a graph)
ends, cut to its last 10 us, so they
are part of low_utilization's idle. Its advice never says "use CUDA graphs" for work already
replayed from graphs: when most tiny kernels are graph-replayed it names what the host was doing in
the host-bound gaps instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, TypedDict

import numpy as np
import pandas as pd

from . import classify
from traceview import intervals as iv
from traceview.claims import Claims
from traceview.units import fmt_ns
from .kernel_names import normalize_kernel_name
from .steps import NO_STEP, Activity, activity, analysed_ranks, count_per, per_step, step_column
from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult, Finding, Headline, Options
from traceview.model import Kind, Trace
from traceview.registry import AnalysisSpec, TableSpec, register_input
from traceview.tables import concat_tables

NAME = "kernels"

CATEGORIES = ("gemm", "attention", "convolution", "elementwise", "reduction", "communication", "memory", "other")

#: name rules, in precedence order (communication and memory are decided before, by class/kind):
#: ``classify.KERNEL_RULES``, the one table (docs/metrics.md)
CATEGORY_RULES: list[tuple[str, re.Pattern[str]]] = [(r.category, r.regex) for r in classify.KERNEL_RULES]

#: a compute kernel shorter than this is "tiny"
TINY_NS = 10_000
#: the per-kernel overhead estimate is capped at this
TINY_GAP_CAP_NS = 10_000
#: many_tiny_kernels: tiny share of compute kernels, and tiny kernels per step, from which it fires
TINY_SHARE = 0.5
TINY_SHARE_MEDIUM = 0.8
TINY_MIN_PER_STEP = 100
#: dominant_kernels: a category (or a single kernel) with at least this share of GPU time
DOMINANT_CATEGORY_SHARE = 0.5
DOMINANT_KERNEL_SHARE = 0.3

STAT_COLUMNS = ["count", "total_ns", "mean_ns", "min_ns", "max_ns", "std_ns", "share_pct"]


def categorize_name(name: str) -> str:
    """Category of a kernel by name alone (rules 3-8; communication/memory need the event)."""
    category = classify.kernel_category_of_name(name)
    if category is not None:
        return category
    if classify.COMM_NAME.search(name):
        return "communication"
    return "other"


def _name_codes(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
    col = trace.events.column("name")
    col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    codes = col.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return codes[rows], [v if v is not None else "" for v in col.dictionary.to_pylist()]


def categories_of(trace: Trace, act: Activity) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(category index into CATEGORIES, name code, dictionary) for every activity entry."""
    codes, dictionary = _name_codes(trace, act.row)
    # the distinct codes, from a count table over the (small, non-negative) code range
    uniq = iv.unique_sorted(codes) if codes.size == 0 or codes.min() < 0 else np.flatnonzero(np.bincount(codes))
    by_name = np.full(len(dictionary) + 1, CATEGORIES.index("other"), dtype=np.int64)
    for c in uniq.tolist():
        by_name[c] = CATEGORIES.index(categorize_name(dictionary[c]))
    cat = by_name[codes]
    cat[act.cls == classify.MEMORY] = CATEGORIES.index("memory")
    cat[act.cls == classify.COMMUNICATION] = CATEGORIES.index("communication")
    return cat, codes, dictionary


def _stats(keys: list[np.ndarray], dur: np.ndarray) -> pd.DataFrame:
    """count/total/min/max/mean/population std of ``dur`` per distinct combination of ``keys``, groups
    in order of first appearance."""
    # one int64 group code instead of several key columns: the same groups in the same order (and
    # the same rows in each, so the same float sums) for a fraction of pandas' multi-key cost
    codes, values = iv.combine_keys(*keys)
    n_groups = values[0].size
    dur = np.asarray(dur, dtype=np.int64)
    # groups in order of first appearance (as groupby(sort=False) lists them)
    first = np.full(n_groups, codes.size, dtype=np.int64)
    np.minimum.at(first, codes, np.arange(codes.size, dtype=np.int64))
    group = np.argsort(first, kind="stable")
    count = np.bincount(codes, minlength=n_groups).astype(np.int64)
    total = np.zeros(n_groups, dtype=np.int64)
    np.add.at(total, codes, dur)
    low = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(low, codes, dur)
    high = np.full(n_groups, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(high, codes, dur)
    out = pd.DataFrame({f"k{i}": v[group] for i, v in enumerate(values)})
    out["count"], out["total_ns"], out["min_ns"], out["max_ns"] = count[group], total[group], low[group], high[group]
    # population std from deviations about the exact group mean (float64); the squares summed by
    # pandas' (compensated) group sum, over the same rows in the same order as before
    mean = total[codes] / count[codes]
    sq = pd.Series((dur - mean) ** 2).groupby(codes, sort=False).sum().to_numpy()
    out["mean_ns"] = out["total_ns"].to_numpy() / out["count"].to_numpy()
    out["std_ns"] = np.sqrt(sq / out["count"].to_numpy())
    return out


def _category_totals(keys: list[np.ndarray], dur: np.ndarray) -> pd.DataFrame:
    """Count and total of ``dur`` per (rank, device, step, category) in key order, with each
    category's share of its (rank, device, step) total (exact int64 sums)."""
    codes, (k_rank, k_device, k_step, k_cat) = iv.combine_keys(*keys)
    count = np.bincount(codes, minlength=k_rank.size).astype(np.int64)
    total_ns = np.zeros(k_rank.size, dtype=np.int64)
    np.add.at(total_ns, codes, dur.astype(np.int64))
    parent, _ = iv.combine_keys(k_rank, k_device, k_step)
    parent_ns = np.zeros(int(parent.max()) + 1 if parent.size else 0, dtype=np.int64)
    np.add.at(parent_ns, parent, total_ns)
    denom = parent_ns[parent]
    share_pct = np.where(denom > 0, 100.0 * total_ns / np.maximum(denom, 1), 0.0)
    return pd.DataFrame({"rank": k_rank, "device": k_device, "step": k_step, "category": k_cat, "count": count,
                         "total_ns": total_ns, "share_pct": share_pct})


def kernel_tables(trace: Trace, act: Activity, top_n: int) -> dict[str, pd.DataFrame]:
    """The ``kernels``, ``top_kernels``, ``kernels_by_step`` and ``categories`` tables."""
    cat, codes, dictionary = categories_of(trace, act)
    dur = act.end - act.start
    rank, device, step = act.rank, act.device, act.step
    kind_names = {int(Kind.KERNEL): "kernel", int(Kind.MEMCPY): "memcpy", int(Kind.MEMSET): "memset"}
    first_of_name = np.full(int(codes.max()) + 1 if codes.size else 0, codes.size, dtype=np.int64)
    np.minimum.at(first_of_name, codes, np.arange(codes.size, dtype=np.int64))

    def named(stats: pd.DataFrame, with_step: bool) -> pd.DataFrame:
        cols = ["rank", "device"] + (["step"] if with_step else []) + ["name_code"]
        stats = stats.rename(columns={f"k{i}": c for i, c in enumerate(cols)})
        # first event of each name gives its category and kind (both are per name in practice)
        name_code = stats["name_code"].to_numpy()
        at = first_of_name[name_code]
        stats["name"] = [dictionary[c] for c in name_code]
        stats["category"] = [CATEGORIES[c] for c in cat[at]]
        stats["kind"] = [kind_names.get(int(k), "other") for k in act.kind[at]]
        group = ["rank", "device"] + (["step"] if with_step else [])
        parent, _ = iv.combine_keys(*[stats[c].to_numpy() for c in group])
        parent_ns = np.zeros(int(parent.max()) + 1 if parent.size else 0, dtype=np.int64)
        np.add.at(parent_ns, parent, stats["total_ns"].to_numpy(np.int64))
        denom = parent_ns[parent]
        stats["share_pct"] = np.where(denom > 0, 100.0 * stats["total_ns"].to_numpy() / np.maximum(denom, 1), 0.0)
        stats = stats.sort_values(group + ["total_ns", "name"], ascending=[True] * len(group) + [False, True])
        if with_step:
            stats["step"] = step_column(stats["step"].to_numpy())
        return stats[group + ["name", "category", "kind"] + STAT_COLUMNS].reset_index(drop=True)

    empty = len(act) == 0
    if empty:
        kernels = _empty_frame(["rank", "device", "name", "category", "kind"] + STAT_COLUMNS)
        by_step = _empty_frame(["rank", "device", "step", "name", "category", "kind"] + STAT_COLUMNS)
    else:
        kernels = named(_stats([rank, device, codes], dur), with_step=False)
        in_step = step != NO_STEP
        if in_step.any():
            by_step = named(_stats([rank[in_step], device[in_step], step[in_step], codes[in_step]], dur[in_step]), True)
        else:
            by_step = _empty_frame(["rank", "device", "step", "name", "category", "kind"] + STAT_COLUMNS)
    top = kernels.groupby(["rank", "device"], sort=False).head(top_n).reset_index(drop=True) if not empty else kernels

    # categories: whole trace (step None) then per step
    frames = []
    if not empty:
        for with_step in (False, True):
            sel = np.ones(len(act), dtype=bool) if not with_step else step != NO_STEP
            if not sel.any():
                continue
            st = np.where(with_step, step, NO_STEP)[sel]
            frames.append(_category_totals([rank[sel], device[sel], st, cat[sel]], dur[sel]))
    if frames:
        categories = pd.concat(frames, ignore_index=True)
        categories["step_sort"] = categories["step"]
        categories = categories.sort_values(
            ["rank", "device", "step_sort", "total_ns"], ascending=[True, True, True, False]
        )
        categories["step"] = step_column(categories["step"].to_numpy())
        categories["category"] = [CATEGORIES[c] for c in categories["category"].to_numpy()]
        categories["count"] = categories["count"].astype(np.int64)
        categories["total_ns"] = categories["total_ns"].astype(np.int64)
        categories = categories[["rank", "device", "step", "category", "count", "total_ns", "share_pct"]].reset_index(
            drop=True
        )
    else:
        categories = _empty_frame(["rank", "device", "step", "category", "count", "total_ns", "share_pct"])
    return {"kernels": kernels, "top_kernels": top, "kernels_by_step": by_step, "categories": categories}


def _sums_by_key(keys: dict[str, np.ndarray], values: dict[str, np.ndarray]) -> pd.DataFrame:
    """Exact int64 sums of ``values`` per distinct combination of ``keys``, in key order (what a
    sorted ``groupby(keys).sum()`` gives, without pandas' per-key factorisation)."""
    codes, distinct = iv.combine_keys(*keys.values())
    out: dict[str, np.ndarray] = dict(zip(keys, distinct))
    for name, value in values.items():
        sums = np.zeros(distinct[0].size, dtype=np.int64)
        np.add.at(sums, codes, value.astype(np.int64))
        out[name] = sums
    return pd.DataFrame(out)


def tiny_table(act: Activity, graph: np.ndarray | None = None) -> pd.DataFrame:
    """Tiny compute kernels per rank and device (step None = whole trace) and per step; ``graph``
    flags the graph-replayed activity entries (none when not given)."""
    cols = ["rank", "device", "step", "compute_kernels", "tiny_kernels", "tiny_share", "tiny_total_ns", "tiny_gap_ns",
            "tiny_graph_kernels"]
    graph = np.zeros(len(act), dtype=bool) if graph is None else graph
    if len(act) == 0:
        return _empty_frame(cols)
    # idle on the same stream before each activity (capped): its start minus the latest end of the
    # activity that started before it on that stream
    codes, _ = iv.combine_keys(act.rank, act.device, act.stream)
    order = np.lexsort((act.end, act.start, codes))
    frame = pd.DataFrame({"g": codes[order], "end": act.end[order]})
    reach = frame.groupby("g", sort=False)["end"].cummax().to_numpy()
    prev = np.empty(len(act), dtype=np.int64)
    prev[1:] = reach[:-1]
    first = np.concatenate([[True], frame["g"].to_numpy()[1:] != frame["g"].to_numpy()[:-1]])
    gap_sorted = np.where(first, 0, np.clip(act.start[order] - prev, 0, TINY_GAP_CAP_NS))
    gap = np.empty(len(act), dtype=np.int64)
    gap[order] = gap_sorted

    compute = (act.cls == classify.COMPUTE) & (act.kind == int(Kind.KERNEL))
    dur = act.end - act.start
    tiny = compute & (dur < TINY_NS)
    frames = []
    for with_step in (False, True):
        sel = compute.copy() if not with_step else compute & (act.step != NO_STEP)
        if not sel.any():
            continue
        st = np.where(with_step, act.step, NO_STEP)[sel]
        t = tiny[sel]
        frames.append(_sums_by_key({"rank": act.rank[sel], "device": act.device[sel], "step": st}, {
            "compute_kernels": np.ones(int(sel.sum()), dtype=np.int64),
            "tiny_kernels": t.astype(np.int64),
            "tiny_total_ns": np.where(t, dur[sel], 0),
            "tiny_gap_ns": np.where(t, gap[sel], 0),
            "tiny_graph_kernels": (t & graph[sel]).astype(np.int64),
        }))
    if not frames:
        return _empty_frame(cols)
    out = pd.concat(frames, ignore_index=True).sort_values(["rank", "device", "step"]).reset_index(drop=True)
    out["tiny_share"] = out["tiny_kernels"] / out["compute_kernels"]
    out["step"] = step_column(out["step"].to_numpy())
    for c in ("compute_kernels", "tiny_kernels", "tiny_total_ns", "tiny_gap_ns", "tiny_graph_kernels"):
        out[c] = out[c].astype(np.int64)
    return out[cols]


def _empty_frame(columns: list[str]) -> pd.DataFrame:
    dtypes = {"name": object, "category": object, "kind": object, "step": "Int64"}
    floats = {"mean_ns", "std_ns", "share_pct", "tiny_share", "p50_ns", "p90_ns", "total_ns_per_gpu"}
    dtypes.update({"norm_name": object, "full_name": object})
    return pd.DataFrame(
        {c: pd.Series(dtype=dtypes.get(c, "float64" if c in floats else "int64")) for c in columns}
    )


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    trace = ctx.trace
    act = activity(ctx)
    tables = dict(kernel_tables_of(ctx))  # a copy: the cached dict stays as computed
    tables["tiny_kernels"] = tiny_table(act, ctx.input("launch_overhead.kinds").graph)
    result = AnalysisResult(name=NAME, tables=tables)
    result.warn("no GPU activity (kernels, memcpy, memset) in the trace: no kernel breakdown",
                np.setdiff1d(analysed_ranks(ctx), act.rank))
    if len(act) == 0:
        return result
    result.findings.extend(_dominant_findings(tables["categories"], tables["kernels"]))
    result.findings.extend(_tiny_findings(tables["tiny_kernels"], act, ctx.input("idle_gaps.tables")["gaps"],
                                          _tiny_rows(trace, act, ctx.input("launch_overhead.kinds").graph)))
    return result


def _step_windows(act: Activity) -> dict[tuple[int, int], float]:
    """Mean per-step GPU window (first start .. last end of the step's activity) per rank, device."""
    in_step = act.step != NO_STEP
    if not in_step.any():
        return {}
    codes, (r, d, s) = iv.combine_keys(act.rank[in_step], act.device[in_step], act.step[in_step])
    k, lo, hi = iv.window_by(codes, act.start[in_step], act.end[in_step])
    frame = pd.DataFrame({"rank": r[k], "device": d[k], "window": hi - lo})
    return {(int(a), int(b)): float(w) for (a, b), w in frame.groupby(["rank", "device"])["window"].mean().items()}


class _DominantRank(TypedDict):
    """Evidence of a dominant_kernels finding, per rank/device."""

    rank: int
    device: int
    share_pct: float
    total_ns: int
    top_kernel: str | None
    top_kernel_share_pct: float | None


class _TinyGpu(TypedDict):
    """Evidence of a many_tiny_kernels finding, per rank/device."""

    rank: int
    device: int
    steps: int
    compute_kernels: int
    tiny_kernels: int
    tiny_graph_kernels: int
    tiny_share: float
    tiny_per_step: float
    tiny_total_ns: int
    tiny_gap_ns: int
    idle_before_tiny_ns: int
    cost_ns_per_step: int
    cost_share: float | None


def _dominant_findings(categories: pd.DataFrame, kernels: pd.DataFrame) -> list[Finding]:
    whole = categories[categories["step"].isna()]
    if whole.empty:
        return []
    top = whole.sort_values("total_ns", ascending=False).groupby(["rank", "device"], sort=True).head(1)
    top = top[top["share_pct"] >= 100 * DOMINANT_CATEGORY_SHARE]
    top_kernel = kernels.groupby(["rank", "device"], sort=True).head(1)
    findings = []
    for (_, category), rows in top.groupby(["rank", "category"]):  # a finding per rank and category
        ranks = sorted({int(r) for r in rows["rank"]})
        per_rank: list[_DominantRank] = []
        for _, row in rows.iterrows():
            tk = top_kernel[(top_kernel["rank"] == row["rank"]) & (top_kernel["device"] == row["device"])]
            per_rank.append(
                {
                    "rank": int(row["rank"]),
                    "device": int(row["device"]),
                    "share_pct": float(row["share_pct"]),
                    "total_ns": int(row["total_ns"]),
                    "top_kernel": str(tk["name"].iloc[0]) if len(tk) else None,
                    "top_kernel_share_pct": float(tk["share_pct"].iloc[0]) if len(tk) else None,
                }
            )
        lo = min(p["share_pct"] for p in per_rank)
        hi = max(p["share_pct"] for p in per_rank)
        share_text = f"{lo:.0f}%" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}%"
        where = f"rank {ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} ranks"
        single_kernel_pcts = [
            pct for pct in (p["top_kernel_share_pct"] for p in per_rank)
            if pct is not None and pct >= 100 * DOMINANT_KERNEL_SHARE
        ]
        title = f"{category} kernels take {share_text} of GPU time ({where})"
        if single_kernel_pcts:
            title += f"; one kernel alone takes {max(single_kernel_pcts):.0f}%"
        findings.append(
            Finding(
                code="dominant_kernels",
                title=title,
                severity="info",
                analysis=NAME,
                recommendation=_DOMINANT_ADVICE.get(category, _DOMINANT_ADVICE["other"]),
                rank=ranks[0] if len(ranks) == 1 else None,
                evidence={"category": category, "per_rank": per_rank},
                headline=Headline(f"{category} kernels take {{}} of GPU time", hi / 100),
            )
        )
    return findings


_DOMINANT_ADVICE = {
    "gemm": "Expected for dense models. Check the GEMMs run on tensor cores (bf16/fp16/tf32, dimensions "
    "multiple of 8/16) and compare their time with the roofline before looking elsewhere.",
    "attention": "Expected for transformers; make sure a fused attention kernel (FlashAttention / SDPA) is "
    "used rather than unfused matmul + softmax.",
    "convolution": "Expected for CNNs; try channels_last memory format and torch.backends.cudnn.benchmark=True.",
    "communication": "Communication dominates GPU time: see the communication analysis for exposed time and "
    "stragglers.",
    "memory": "Copies dominate GPU time: see the synchronisation analysis (pageable and blocking copies) and "
    "keep data resident on the GPU.",
    "elementwise": "Elementwise kernels are memory-bound; fuse them (torch.compile) to cut memory traffic.",
    "reduction": "Reductions/normalisations dominate; fused implementations (e.g. fused LayerNorm/RMSNorm, "
    "torch.compile) usually help.",
    "other": "Informational: most GPU time is in one kind of kernel; optimise that first.",
}


def _tiny_rows(trace: Trace, act: Activity, graph: np.ndarray) -> np.ndarray:
    """Boolean per event row of ``trace``: a tiny compute kernel launched on its own (the idle before a
    graph-replayed kernel is not its launch cost: a graph replay has one launch, and the host time
    before it is the host's, claimed by the host-bound gaps)."""
    tiny = (act.cls == classify.COMPUTE) & (act.kind == int(Kind.KERNEL)) & (act.end - act.start < TINY_NS) & ~graph
    out = np.zeros(trace.num_events, dtype=bool)
    out[act.row[tiny]] = True
    return out


def _tiny_claims(gaps: pd.DataFrame, tiny_rows: np.ndarray, gpus: list[tuple[int, int]]) -> Claims:
    """The idle before each tiny kernel on ``gpus``: every device-wide idle gap a tiny kernel ends,
    cut to its last ``TINY_GAP_CAP_NS``."""
    if gaps.empty or not gpus:
        return Claims.empty()
    rank, device = gaps["rank"].to_numpy(), gaps["device"].to_numpy()
    on_gpu = pd.MultiIndex.from_arrays([rank, device]).isin(gpus)
    sel = tiny_rows[gaps["next_row"].to_numpy()] & on_gpu
    end = gaps["end_ns"].to_numpy()[sel]
    start = np.maximum(gaps["start_ns"].to_numpy()[sel], end - TINY_GAP_CAP_NS)
    return Claims.of(rank[sel], device[sel], start, end)


def _tiny_gpus(tiny: pd.DataFrame, act: Activity, claimed: dict[tuple[int, int], int],
               windows: dict[tuple[int, int], float]) -> list[_TinyGpu]:
    """The rank/devices where tiny kernels qualify (see module docstring), with their evidence
    (``windows``: :func:`_step_windows` of ``act``)."""
    step_counts = act.steps.counts()
    per_gpu: list[_TinyGpu] = []
    for row in tiny[tiny["step"].isna()].itertuples(index=False):  # one row per GPU
        rank, device = int(row.rank), int(row.device)
        n_steps = step_counts.get(rank, 0)
        per = row.tiny_kernels / n_steps if n_steps else float(row.tiny_kernels)
        if row.tiny_share < TINY_SHARE or per < TINY_MIN_PER_STEP:
            continue
        cost = per_step(claimed.get((rank, device), 0), n_steps)
        window = windows.get((rank, device))
        per_gpu.append({
            "rank": rank, "device": device, "steps": n_steps, "compute_kernels": int(row.compute_kernels),
            "tiny_kernels": int(row.tiny_kernels), "tiny_graph_kernels": int(row.tiny_graph_kernels),
            "tiny_share": float(row.tiny_share), "tiny_per_step": per, "tiny_total_ns": int(row.tiny_total_ns),
            "tiny_gap_ns": int(row.tiny_gap_ns), "idle_before_tiny_ns": claimed.get((rank, device), 0),
            "cost_ns_per_step": cost, "cost_share": cost / window if window else None,
        })
    return per_gpu


def _tiny_findings(tiny: pd.DataFrame, act: Activity, gaps: pd.DataFrame, tiny_rows: np.ndarray) -> list[Finding]:
    """One finding per rank over its devices where tiny kernels qualify (see module docstring)."""
    windows = _step_windows(act)
    qualifying = [(p["rank"], p["device"]) for p in _tiny_gpus(tiny, act, {}, windows)]
    claims = _tiny_claims(gaps, tiny_rows, qualifying)
    by_rank: dict[int, list[_TinyGpu]] = {}
    for gpu in _tiny_gpus(tiny, act, claims.by_gpu(), windows):
        by_rank.setdefault(gpu["rank"], []).append(gpu)
    return [_tiny_finding(gpus, gaps, claims.only_ranks([rank])) for rank, gpus in sorted(by_rank.items())]


def _tiny_finding(per_gpu: list[_TinyGpu], gaps: pd.DataFrame, claims: Claims) -> Finding:
    """The many_tiny_kernels finding of one rank's qualifying GPUs ``per_gpu``."""
    qualifying = [(p["rank"], p["device"]) for p in per_gpu]
    cost = int(round(float(np.mean([p["cost_ns_per_step"] for p in per_gpu]))))
    shares = [p["cost_share"] for p in per_gpu if p["cost_share"] is not None]
    cost_share = float(np.mean(shares)) if shares else None
    tiny_share = float(np.mean([p["tiny_share"] for p in per_gpu]))
    per = float(np.mean([p["tiny_per_step"] for p in per_gpu]))
    graphed = sum(p["tiny_graph_kernels"] for p in per_gpu) / max(sum(p["tiny_kernels"] for p in per_gpu), 1)
    ranks = sorted({p["rank"] for p in per_gpu})
    where = f"GPU {per_gpu[0]['device']} of rank {ranks[0]}" if len(per_gpu) == 1 else f"{len(ranks)} ranks"
    in_graphs = f", {100 * graphed:.0f}% of them replayed from graphs" if graphed else ""
    recommendation, contexts = _tiny_advice(graphed, gaps, qualifying)
    return Finding(
        code="many_tiny_kernels",
        part_of="low_utilization",  # its claims are idle time before tiny kernels
        headline=Headline(f"{{}} of the compute kernels are shorter than {TINY_NS // 1000} us (a fusion opportunity)",
                          tiny_share),
        title=f"{100 * tiny_share:.0f}% of the compute kernels on {where} are shorter than {TINY_NS // 1000} us "
        f"({per:.0f} {count_per(max(p['steps'] for p in per_gpu))}{in_graphs}): a fusion opportunity",
        severity="medium" if tiny_share >= TINY_SHARE_MEDIUM or (cost_share or 0) >= 0.1 else "low",
        analysis=NAME,
        recommendation=recommendation,
        cost_ns_per_step=cost,
        cost_share=cost_share,
        rank=ranks[0] if len(ranks) == 1 else None,
        claims=claims,
        evidence={
            "cost_estimate": "device idle gaps ended by a tiny kernel, each cut to its last 10 us",
            "graph_replayed_share": graphed,
            "host_contexts": contexts,
            "per_gpu": per_gpu,
        },
    )


#: tiny kernels mostly graph-replayed from this share: no "use CUDA graphs" advice
TINY_GRAPHED_SHARE = 0.5
#: CPU contexts of host-bound gaps named when the work is already graphed
TINY_TOP_CONTEXTS = 3


def _tiny_advice(graphed: float, gaps: pd.DataFrame, gpus: list[tuple[int, int]]) -> tuple[str, list[dict]]:
    """The recommendation, and the top CPU contexts of host-bound gaps on ``gpus`` (graphed work)."""
    if graphed <= TINY_GRAPHED_SHARE:
        text = ("Fuse small kernels: torch.compile (or fused optimizers, foreach=True / fused=True in torch.optim, "
                "fused LayerNorm/activation kernels); if the sequence repeats every step, capture it in a CUDA graph "
                "(torch.compile mode='reduce-overhead').")
        if graphed:
            text += f" ({100 * graphed:.0f}% of the tiny kernels are already replayed from graphs.)"
        return text, []
    on_gpu = pd.MultiIndex.from_arrays([gaps["rank"].to_numpy(), gaps["device"].to_numpy()]).isin(gpus)
    host = gaps[on_gpu & (gaps["cause"] == classify.HOST_BOUND).to_numpy()]
    top = (host.assign(ctx=host["cpu_context"].astype(str).replace("", "(no CPU op)"))
           .groupby("ctx")["dur_ns"].agg(["size", "sum"]).sort_values("sum", ascending=False).head(TINY_TOP_CONTEXTS))
    contexts = [{"cpu_context": str(c), "gaps": int(v["size"]), "idle_ns": int(v["sum"])} for c, v in top.iterrows()]
    text = (f"{100 * graphed:.0f}% of the tiny kernels are already replayed from CUDA/HIP graphs, so their launches "
            "cost nothing more to remove; fusing them (torch.compile, fused kernels) still trims per-kernel GPU "
            "overhead. ")
    if contexts:
        named = ", ".join(f"`{c['cpu_context']}` ({fmt_ns(c['idle_ns'])})" for c in contexts)
        text += (f"Where the GPU idles, it waits for the host, which was in {named}: make that host work faster "
                 "or overlap it with the replays (e.g. schedule the next batch while the current one runs).")
    else:
        text += "The GPU does not wait on the host between replays."
    return text, contexts


# ------------------------------------------------------------------------ job-wide totals per kernel

JOB_COLUMNS = ["name", "category", "kind", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "gpus",
               "total_ns_per_gpu", "share_pct"]


@dataclass
class KernelTotals:
    """One rank's kernel figures for the cross-rank tables: ``frame``, totals per full kernel name
    (count, total, min, max, GPUs it ran on; for ``job_kernels``), and ``calls``, every distinct
    (full name, device, duration) with its number of calls (for ``kernel_summary`` and
    ``kernel_ranks``: exact percentiles over all calls, at the size of the distinct durations rather
    than of the calls). No row numbers, so nothing to remap."""

    #: the reduce starts by concatenating each frame over the parts: a driver may join them first
    #: (``traceview.packed_frames.join_inputs``), categories united as
    #: :func:`traceview.tables.concat_tables` unites them (the reduce concatenates with it)
    merge_fields: ClassVar[bool] = True
    merge_unites_categories: ClassVar[bool] = True

    frame: pd.DataFrame
    calls: pd.DataFrame

    def remap_rows(self, rows: np.ndarray | None, offset: int = 0) -> "KernelTotals":
        del rows, offset  # per-name figures hold no event rows
        return self

    def compact(self) -> "KernelTotals":
        return self


def kernel_tables_of(ctx: AnalysisContext) -> dict[str, pd.DataFrame]:
    """:func:`kernel_tables` (the derived input ``kernel_tables``: the analysis and the job-wide
    totals both read it)."""
    tables: dict[str, pd.DataFrame] = ctx.input("kernel_tables")
    return tables


CALL_COLUMNS = ["name", "norm_name", "category", "kind", "rank", "device", "dur_ns", "calls"]
#: the string columns of the distinct calls, as categories: a rank's few dozen names repeat over its
#: thousands of distinct calls, and a job's driver holds and joins the calls of thousands of ranks
CALL_NAME_COLUMNS = ["name", "norm_name", "category", "kind"]


def _distinct_calls(trace: Trace, act: Activity) -> pd.DataFrame:
    """Every distinct (rank, device, name, duration) of ``act`` with its number of calls."""
    cat, codes, dictionary = categories_of(trace, act)
    dur = (act.end - act.start).astype(np.int64)
    group, (rank, device, code, value) = iv.combine_keys(act.rank, act.device, codes, dur)
    calls = np.bincount(group, minlength=rank.size).astype(np.int64)
    first = np.zeros(rank.size, dtype=np.int64)
    first[group[::-1]] = np.arange(len(group) - 1, -1, -1)  # an event of each group: its category, kind
    kind_names = {int(Kind.KERNEL): "kernel", int(Kind.MEMCPY): "memcpy", int(Kind.MEMSET): "memset"}
    first_of_name = np.full(int(codes.max()) + 1 if codes.size else 0, codes.size, dtype=np.int64)
    np.minimum.at(first_of_name, codes, np.arange(codes.size, dtype=np.int64))
    names = [dictionary[c] for c in code.tolist()]
    # normalised once per distinct name: a trace repeats its few thousand names on every rank
    normalized = {name: normalize_kernel_name(name) for name in set(names)}
    return pd.DataFrame({
        "name": names, "norm_name": [normalized[n] for n in names],
        "category": [CATEGORIES[c] for c in cat[first].tolist()],
        "kind": [kind_names.get(int(k), "other") for k in act.kind[first].tolist()],
        "rank": rank.astype(np.int64), "device": device.astype(np.int64), "dur_ns": value, "calls": calls,
    }).astype({c: "category" for c in CALL_NAME_COLUMNS})


def kernel_totals(ctx: AnalysisContext) -> KernelTotals:
    """What one rank gives the cross-rank tables: per full kernel name over every GPU of ``trace``,
    count, total, min and max duration and the number of (rank, device) pairs it ran on; and its
    distinct calls (:func:`_distinct_calls`)."""
    trace = ctx.trace
    act = activity(ctx)
    if len(act) == 0:
        return KernelTotals(_empty_frame(["name", "category", "kind", "count", "total_ns", "min_ns", "max_ns",
                                          "gpus"]),
                            _empty_frame(CALL_COLUMNS).astype({c: "category" for c in CALL_NAME_COLUMNS}))
    per_gpu = kernel_tables_of(ctx)["kernels"]
    grouped = per_gpu.groupby(["name", "category", "kind"], sort=False)
    frame = grouped.agg(count=("count", "sum"), total_ns=("total_ns", "sum"), min_ns=("min_ns", "min"),
                        max_ns=("max_ns", "max"), gpus=("count", "size")).reset_index()
    return KernelTotals(frame, _distinct_calls(trace, act))


def weighted_percentiles(group: np.ndarray, value: np.ndarray, weight: np.ndarray, n_groups: int,
                         q: float) -> np.ndarray:
    """Per group, the ``q`` percentile (0-100) of the values each repeated ``weight`` times: exactly
    ``np.percentile`` (linear interpolation) of the expanded values, without expanding them.

    ``group``: dense codes 0..n_groups-1; every group must have a positive total weight."""
    order = np.lexsort((value, group))
    g, v, w = group[order], value[order].astype(np.float64), weight[order].astype(np.int64)
    upto = np.cumsum(w)  # calls up to and including each distinct value, over all groups
    size = np.bincount(g, weights=w, minlength=n_groups).astype(np.int64)
    start = np.concatenate([[0], np.cumsum(size)[:-1]])  # first call of each group
    pos = (q / 100.0) * (size - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, size - 1)
    v_lo = v[np.searchsorted(upto, start + lo, side="right")]
    v_hi = v[np.searchsorted(upto, start + hi, side="right")]
    t = pos - lo
    diff = v_hi - v_lo
    # numpy's own lerp (its rounding: from the upper value when t >= 0.5), so the figures equal
    # np.percentile's to the last bit
    return np.where(t >= 0.5, v_hi - diff * (1 - t), v_lo + diff * t)


def _call_stats(calls: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """count, total, mean, p50, p90, min and max of the calls per distinct ``keys`` (key order)."""
    group, distinct = iv.combine_keys(*(calls[k].to_numpy() for k in keys))
    n = distinct[0].size
    dur, w = calls["dur_ns"].to_numpy().astype(np.int64), calls["calls"].to_numpy().astype(np.int64)
    out = pd.DataFrame(dict(zip(keys, distinct)))
    out["count"] = np.bincount(group, weights=w, minlength=n).astype(np.int64)
    total = np.zeros(n, dtype=np.int64)
    np.add.at(total, group, dur * w)
    out["total_ns"] = total
    out["mean_ns"] = total / np.maximum(out["count"].to_numpy(), 1)
    out["p50_ns"] = weighted_percentiles(group, dur, w, n, 50.0)
    out["p90_ns"] = weighted_percentiles(group, dur, w, n, 90.0)
    out["min_ns"] = pd.Series(dur).groupby(group).min().to_numpy()
    out["max_ns"] = pd.Series(dur).groupby(group).max().to_numpy()
    return out


def job_kernels(parts: list[KernelTotals], options: Options) -> AnalysisResult:
    """The ``job_kernels`` table: every kernel name over the whole job (all ranks and GPUs), largest
    total first; ``share_pct`` = 100 x total / (all GPU activity of the job), ``total_ns_per_gpu`` =
    total / GPUs it ran on."""
    del options  # the totals need no option
    frames = [p.frame for p in parts if len(p.frame)]
    result = AnalysisResult(name=NAME)
    if not frames:
        result.tables["job_kernels"] = _empty_frame(JOB_COLUMNS)
        return result
    grouped = pd.concat(frames, ignore_index=True).groupby(["name", "category", "kind"], sort=False)
    job = grouped.agg(count=("count", "sum"), total_ns=("total_ns", "sum"), min_ns=("min_ns", "min"),
                      max_ns=("max_ns", "max"), gpus=("gpus", "sum")).reset_index()
    job["mean_ns"] = job["total_ns"].to_numpy() / np.maximum(job["count"].to_numpy(), 1)
    job["total_ns_per_gpu"] = job["total_ns"].to_numpy() / np.maximum(job["gpus"].to_numpy(), 1)
    all_ns = float(job["total_ns"].sum())
    job["share_pct"] = 100.0 * job["total_ns"].to_numpy() / all_ns if all_ns > 0 else 0.0
    job = job.sort_values(["total_ns", "name"], ascending=[False, True], kind="stable")
    result.tables["job_kernels"] = job[JOB_COLUMNS].reset_index(drop=True)
    return result


SUMMARY_COLUMNS = ["name", "category", "kind", "count", "total_ns", "mean_ns", "p50_ns", "p90_ns", "min_ns",
                   "max_ns", "share_pct", "ranks", "gpus", "min_rank", "min_rank_total_ns", "max_rank",
                   "max_rank_total_ns", "names", "full_name"]
RANK_COLUMNS = ["name", "rank", "device", "count", "total_ns", "mean_ns", "p50_ns", "p90_ns", "min_ns", "max_ns",
                "share_pct"]


def _rank_spread(calls: pd.DataFrame) -> pd.DataFrame:
    """Per normalised name: its ranks, and the ranks with the smallest and the largest total (all
    their devices; the lower rank on a tie)."""
    per_rank = _sums_by_key({"norm_name": calls["norm_name"].to_numpy(), "rank": calls["rank"].to_numpy()},
                            {"total": calls["dur_ns"].to_numpy() * calls["calls"].to_numpy()})
    lo = per_rank.sort_values(["norm_name", "total", "rank"], kind="stable").drop_duplicates("norm_name")
    hi = per_rank.sort_values(["norm_name", "total", "rank"], ascending=[True, False, True],
                              kind="stable").drop_duplicates("norm_name")
    out = per_rank.groupby("norm_name", sort=True).size().rename("ranks").reset_index()
    out = out.merge(lo.rename(columns={"rank": "min_rank", "total": "min_rank_total_ns"}), on="norm_name")
    return out.merge(hi.rename(columns={"rank": "max_rank", "total": "max_rank_total_ns"}), on="norm_name")


def _summary_table(calls: pd.DataFrame, names: dict[str, np.ndarray]) -> pd.DataFrame:
    """``kernel_summary``: one row per normalised name over every rank and GPU (module docstring).
    ``calls``: the distinct calls with their name columns as codes into ``names`` (sorted values,
    so the codes sort as the names do)."""
    stats = _call_stats(calls, ["norm_name"])
    # category, kind and the full name shown: those of the full name with the largest total
    by_name = _sums_by_key({"norm_name": calls["norm_name"].to_numpy(), "name": calls["name"].to_numpy()},
                           {"total": calls["dur_ns"].to_numpy() * calls["calls"].to_numpy()})
    counts = by_name.groupby("norm_name", sort=True).size().rename("names").reset_index()
    largest = by_name.sort_values(["norm_name", "total", "name"], ascending=[True, False, True],
                                  kind="stable").drop_duplicates("norm_name")
    about = calls.drop_duplicates("name")[["name", "category", "kind"]]
    largest = largest.merge(about, on="name", how="left").rename(columns={"name": "full_name"})
    gpus = calls.drop_duplicates(["norm_name", "rank", "device"]).groupby("norm_name").size().rename("gpus")
    out = stats.merge(largest[["norm_name", "full_name", "category", "kind"]], on="norm_name")
    out = out.merge(counts, on="norm_name").merge(gpus.reset_index(), on="norm_name")
    out = out.merge(_rank_spread(calls), on="norm_name")
    for column, values in (("norm_name", "norm_name"), ("full_name", "name"), ("category", "category"),
                           ("kind", "kind")):
        out[column] = names[values][out[column].to_numpy()]
    all_ns = float(out["total_ns"].sum())
    out["share_pct"] = 100.0 * out["total_ns"].to_numpy() / all_ns if all_ns > 0 else 0.0
    out = out.rename(columns={"norm_name": "name"}).sort_values(["total_ns", "name"], ascending=[False, True],
                                                                kind="stable")
    for c in ("ranks", "gpus", "names", "min_rank", "max_rank", "min_rank_total_ns", "max_rank_total_ns"):
        out[c] = out[c].astype(np.int64)
    return out[SUMMARY_COLUMNS].reset_index(drop=True)


def _rank_table(calls: pd.DataFrame, names: dict[str, np.ndarray]) -> pd.DataFrame:
    """``kernel_ranks``: the figures of each normalised name per rank and GPU (``calls`` and
    ``names`` as for :func:`_summary_table`)."""
    out = _call_stats(calls, ["norm_name", "rank", "device"])
    out["norm_name"] = names["norm_name"][out["norm_name"].to_numpy()]
    gpu_ns = out.groupby(["rank", "device"])["total_ns"].transform("sum").to_numpy()
    out["share_pct"] = np.where(gpu_ns > 0, 100.0 * out["total_ns"].to_numpy() / np.maximum(gpu_ns, 1), 0.0)
    return out.rename(columns={"norm_name": "name"})[RANK_COLUMNS].reset_index(drop=True)


def coded_calls(calls: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """``calls`` with each name column (categorical) as int64 codes into sorted values, and those
    values (object arrays) per column: the cross-rank tables group, sort and join the millions of
    calls of a big job on integers, and look the few distinct names up at the end."""
    coded = calls.copy(deep=False)
    names: dict[str, np.ndarray] = {}
    for c in CALL_NAME_COLUMNS:
        column = calls[c].astype("category") if not isinstance(calls[c].dtype, pd.CategoricalDtype) else calls[c]
        if not column.cat.categories.is_monotonic_increasing:
            column = column.cat.reorder_categories(column.cat.categories.sort_values())
        codes = column.cat.codes.to_numpy().astype(np.int64)
        if (codes < 0).any():  # (a missing name: never from the parsers; kept as its own value)
            column = column.astype(object).astype("category")
            codes = column.cat.codes.to_numpy().astype(np.int64)
        coded[c] = codes
        names[c] = np.asarray(column.cat.categories, dtype=object)
    return coded, names


def cross_rank(parts: list[KernelTotals], options: Options) -> AnalysisResult:
    """The cross-rank tables from every rank's :class:`KernelTotals`: ``job_kernels`` (by full
    name), ``kernel_summary`` (by normalised name) and ``kernel_ranks`` (normalised name per rank
    and GPU)."""
    result = job_kernels(parts, options)
    frames = [p.calls for p in parts if len(p.calls)]
    if not frames:
        result.tables["kernel_summary"] = _empty_frame(SUMMARY_COLUMNS)
        result.tables["kernel_ranks"] = _empty_frame(RANK_COLUMNS)
        return result
    calls, names = coded_calls(concat_tables(frames))
    del frames
    result.tables["kernel_summary"] = _summary_table(calls, names)
    result.tables["kernel_ranks"] = _rank_table(calls, names)
    return result


# (category code of each activity entry, the category names the codes index): for analyses that
# report by kernel category without importing this one (the critical path)
register_input("kernels.activity_categories", lambda ctx: (categories_of(ctx.trace, activity(ctx))[0], CATEGORIES),
               requires=("activity",))
register_input("kernel_tables", lambda ctx: kernel_tables(ctx.trace, activity(ctx), ctx.options.top_n),
               requires=("activity",))

SPEC = AnalysisSpec(
    name=NAME,
    title="Kernels",
    run=analyze,
    requires=("activity", "kernel_tables", "idle_gaps.tables", "launch_overhead.kinds"),
    order=50,
    tables=(
        TableSpec("kernel_summary", "Kernels over all ranks, by normalised name", sort_by="total_ns",
                  cross_rank=True),
        TableSpec("kernel_ranks", "Kernels over all ranks: each normalised name per rank and GPU", sort_by="total_ns",
                  cross_rank=True),
        TableSpec("job_kernels", "Kernels over the whole job (all ranks and GPUs), by total time", sort_by="total_ns",
                  cross_rank=True),
        TableSpec("kernels", "Kernels by total time, per rank and GPU", sort_by="total_ns", per_event=True),
        TableSpec("top_kernels", "Top kernels per rank and GPU", sort_by="total_ns"),
        TableSpec("kernels_by_step", "Kernels per step", sort_by="total_ns", per_event=True,
                  title_without_steps="Kernels by step (none: no steps)"),
        TableSpec("categories", "Kernel categories"),
        TableSpec("tiny_kernels", "Tiny kernels"),
    ),
    finding_codes=("dominant_kernels", "many_tiny_kernels"),
    finding_parents=(("many_tiny_kernels", "low_utilization"),),
    finding_precedence=(("many_tiny_kernels", 61),),
    page=("/kernels", "Kernels"),
    gather=kernel_totals,
    reduce=cross_rank,
    headline_table="categories",
)
