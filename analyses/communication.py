"""Communication: collectives per rank and kind, their overlap with compute, and across ranks,
skew, stragglers and compute imbalance.

Definitions (docs/metrics.md, "Communication"), per rank and GPU device; all times int64 ns:

- Communication kernel: a kernel a rule of the communication table matches
  (``analyses/comm_rules.py``: NCCL/RCCL, DeepEP, NVSHMEM, symmetric memory, custom all-reduce,
  MSCCL/MSCCL++, all-to-all, send/recv, collective args; the user's rules first). Compute = the
  other kernels (not memcpy/memset).
- Collective kind: the ``collective`` column when present (``allreduce``, ``all_gather_into_tensor``,
  ...), else from the name: NCCL names parsed (``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` ->
  ``AllReduce``; ``ncclKernel_SendRecv_...`` -> ``SendRecv``), normalised to ``AllReduce``,
  ``AllGather``, ``ReduceScatter``, ``AllToAll``, ``Broadcast``, ``Reduce``, ``Gather``,
  ``Scatter``, ``SendRecv``, ``Send``, ``Recv``, ``Barrier``; ``unknown`` when neither says
  (``ncclDevKernel_Generic`` without args); other families ``family:operation``
  (``deepep:combine``, ``symmetric_memory:AllReduce``, ``user:unknown``; :func:`rule_kind`).
  Process group: the ``process_group`` column, else ``process_group_ranks``, else empty.
- Per rank, device [, step] and kind: ``count``; ``total_ns`` = sum of kernel durations;
  ``communication_ns`` = |U(kernels of that kind)|; ``overlap_ns`` = |U(kind) ∩ U(compute)|;
  ``overlap_pct`` = 100 x overlap / communication; ``exposed_ns`` = communication - overlap;
  ``bytes`` = sum of ``msg_bytes`` where known; ``group_size`` = the largest known. The
  ``summary`` table gives the same figures for all communication together (kinds may overlap
  each other, so the per-kind unions need not add up to it). Steps: each kernel belongs to the
  step of its launch call (``analyses/steps.py``); ``step`` = None rows are the whole trace.
- Across ranks (two or more ranks with communication; one GPU per rank assumed): the k-th
  occurrence (in start order) of each (kind, process group) within a step on one rank is matched
  with the k-th on every other rank (kernels outside steps are matched among themselves). An
  occurrence needs at least two ranks; when ranks have different counts only the first
  min(count) are matched and a warning says so.

  - ``skew_ns`` = last start - first start (raw clocks); the ``straggler`` is the rank that
    started last (ties: none); ``late_by_ns`` = its start - the latest start of the others.
  - End-aligned: a collective ends at nearly the same instant on every participant, so each
    rank's start is shifted by (median end - its end): ``aligned start = start - end + median
    end``. ``aligned_skew_ns``, ``aligned_straggler`` and ``aligned_late_by_ns`` are the same
    figures on aligned starts; they are immune to clock offsets between ranks (hosts).
    ``clock_offset_ns`` (stragglers table) = median over occurrences of (end - median end).
  - ``wait_caused_ns`` (per occurrence) = mean over the other ranks of (straggler start - their
    start): the time each of them waits for the straggler.
  - Stragglers table, per rank: ``matched`` (occurrences it took part in), ``times_last``,
    ``share_last``, ``mean_late_by_ns`` (mean of ``late_by_ns`` where it was last), and
    ``wait_caused_ns`` (sum), each also end-aligned.
  - Compute imbalance, per step present on two or more ranks (whole trace when there are no
    steps): compute_ns = |U(compute)| of each rank in that step; ``imbalance_ns`` = max - mean
    (what the average rank waits for the slowest at the next collective); ``imbalance_pct`` =
    100 x imbalance / mean.

- ``rules`` (per rank, device and classification rule, whole trace): ``family``, ``rule``,
  ``kernels``, ``total_ns`` (sum of durations), ``communication_ns`` (|U|): which rule classified how
  much time; the ``summary`` table's ``families`` lists them per rank and device, most time first.

Tables: ``collectives``, ``summary``, ``rules``, and (multi-rank) ``skew`` (one row per matched
collective), ``arrivals`` (one row per matched collective and rank), ``stragglers``,
``compute_by_rank`` (rank x step compute time), ``compute_imbalance`` (per step).

Findings:

- ``exposed_collective``: a collective kind whose exposed time is at least 5% of the step's GPU
  window (mean over ranks; medium, high from 20%); cost = exposed ns per step (mean over ranks).
  The temporal analysis reports exposed communication per rank as a whole; this finding says
  which collective it is (nested under it). Claims: U(that kind's kernels) - U(compute) per rank and
  device (``CrossRankInputs.exposed``).
- ``straggler_rank``: a rank that is last to arrive in at least half of the matched collectives
  (and at least 1.5/n of them, n ranks), in at least 3 of them, and whose caused wait is at least
  1% of the step window; judged on clock-corrected figures when the ranks' clocks look offset
  (|clock_offset| above 20 us on some rank), else on raw ones; cost = the mean wait it causes each
  other rank, per step. Claims: on each other rank, from its own kernel start for the time it
  waits for the straggler (on the judged clock basis), clipped to its kernel, on its own clock;
  ``part_of`` = ``exposed_communication``.
- ``compute_imbalance``: mean imbalance over steps at least 10% of the mean compute time
  (medium from 25%) and at least 1% of the step window; cost = mean imbalance_ns per step; no
  claims (it costs no GPU time of its own).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from . import classify
from .comm_rules import CommRule, rule_table
from traceview import intervals as iv
from traceview.claims import Claims, split_gpu_key
from .collectives import match_collectives
from .steps import NO_STEP, Activity, activity, count_per, per_step, step_column
from traceview.context import AnalysisContext
from traceview.findings import AnalysisResult, Finding, Options
from traceview.model import Trace
from traceview.registry import AnalysisSpec, TableSpec, register_input
from traceview.plain import is_missing
from traceview.report_inputs import ReportInputs

NAME = "communication"

EXPOSED_SHARE = 0.05
EXPOSED_SHARE_HIGH = 0.20
STRAGGLER_SHARE = 0.5
STRAGGLER_FAIR_FACTOR = 1.5
STRAGGLER_MIN_MATCHED = 3
STRAGGLER_MIN_COST_SHARE = 0.01
STRAGGLER_HIGH = 0.10
STRAGGLER_MEDIUM = 0.03
CLOCK_OFFSET_NS = 20_000
IMBALANCE_PCT = 10.0
IMBALANCE_PCT_MEDIUM = 25.0
IMBALANCE_MIN_COST_SHARE = 0.01

_KERNEL_KIND = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
#: normalised collective names, by prefix of the lower-cased letters-only spelling (order matters)
_CANONICAL = [
    ("allreduce", "AllReduce"),
    ("allgather", "AllGather"),
    ("reducescatter", "ReduceScatter"),
    ("alltoall", "AllToAll"),
    ("broadcast", "Broadcast"),
    ("sendrecv", "SendRecv"),
    ("send", "Send"),
    ("recv", "Recv"),
    ("reduce", "Reduce"),
    ("gather", "Gather"),
    ("scatter", "Scatter"),
    ("barrier", "Barrier"),
]
UNKNOWN = "unknown"


def canonical_collective(text: str | None) -> str | None:
    """``all_gather_into_tensor`` -> ``AllGather``; None for empty or unrecognised names."""
    if not text:
        return None
    letters = re.sub(r"[^a-z]", "", text.lower())
    for prefix, name in _CANONICAL:
        if letters.startswith(prefix):
            return name
    return None


def collective_from_kernel(name: str | None) -> str | None:
    """``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` -> ``AllReduce`` (None if the name says nothing)."""
    if not name:
        return None
    match = _KERNEL_KIND.search(name)
    return canonical_collective(match.group(1)) if match else None


def _dict_column(ctx: AnalysisContext, column: str, rows: np.ndarray, fn: Any) -> np.ndarray:
    """``fn`` applied per distinct value of a dictionary column, gathered for ``rows``."""
    codes, dictionary = classify.dictionary_codes(ctx, column)
    mapped = np.array([fn(v) for v in dictionary] + [fn(None)], dtype=object)
    return mapped[codes[rows]]  # a null (-1) is the last entry


def _optional_int(trace: Trace, column: str, rows: np.ndarray) -> np.ndarray:
    """An optional int column for ``rows``, with -1 for null."""
    col = trace.events.column(column)
    filled = col.fill_null(-1) if col.null_count else col
    return np.asarray(filled.to_numpy(), dtype=np.int64)[rows] if len(col) else np.empty(0, np.int64)


def comm_rule_of(ctx: AnalysisContext, act: Activity) -> np.ndarray:
    """Per activity entry: the index in ``comm_rules.rule_table(options.comm_patterns)`` of the rule
    that made it communication (``classify.NONE`` for compute and memory)."""
    return np.asarray(classify.comm_rule_of(ctx)[act.row])


def rule_kind(rule: CommRule, name: str) -> str:
    """The collective kind of a kernel without collective args, from the rule that matched it:
    NCCL/RCCL names are parsed (``ncclDevKernel_AllReduce_...`` -> ``AllReduce``); other families
    say ``family:operation`` (``deepep:combine``, ``symmetric_memory:AllReduce``), the operation
    normalised like the args when it is a known collective, ``unknown`` when the name says nothing."""
    if rule.family == "nccl":
        return collective_from_kernel(name) or UNKNOWN
    op = rule.operation(name)
    return f"{rule.family}:{canonical_collective(op) or op or UNKNOWN}"


def comm_kernels(ctx: AnalysisContext, act: Activity) -> pd.DataFrame:
    """One row per communication kernel of the activity context, with kind, process group and the
    rule family that classified it."""
    trace = ctx.trace
    sel = np.flatnonzero(act.cls == classify.COMMUNICATION)
    rows = act.row[sel]
    rules = rule_table(ctx.options.comm_patterns)
    rule = comm_rule_of(ctx, act)[sel].astype(np.int64)
    names = _dict_column(ctx, "name", rows, lambda v: v or "")
    from_args = _dict_column(ctx, "collective", rows, canonical_collective)
    # the kind from the name is worked out once per distinct (name, rule)
    pair_codes, pairs = pd.factorize(pd.MultiIndex.from_arrays([names, rule]))
    by_pair = np.array([rule_kind(rules[r], n) for n, r in pairs] + [UNKNOWN], dtype=object)
    kind = np.where(pd.isna(from_args), by_pair[pair_codes], from_args)
    pg = _dict_column(ctx, "process_group", rows, lambda v: v or "")
    pg_ranks = _dict_column(ctx, "process_group_ranks", rows, lambda v: v or "")
    pg = np.where(pg == "", pg_ranks, pg)
    return pd.DataFrame(
        {
            "row": rows,
            "rank": act.rank[sel],
            "device": act.device[sel],
            "step": act.step[sel],
            "collective": kind.astype(object),
            "process_group": pg.astype(object),
            "start": act.start[sel],
            "end": act.end[sel],
            "bytes": _optional_int(trace, "msg_bytes", rows),
            "group_size": _optional_int(trace, "group_size", rows),
        }
    )


RULE_COLUMNS = ["rank", "device", "family", "rule", "kernels", "total_ns", "communication_ns"]


def rules_table(ctx: AnalysisContext, act: Activity) -> pd.DataFrame:
    """Per rank, device and classification rule (whole trace): how many kernels the rule made
    communication, the sum of their durations and |U| of them."""
    comm = act.cls == classify.COMMUNICATION
    if not comm.any():
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("family", "rule") else np.int64)
                             for c in RULE_COLUMNS})
    rules = rule_table(ctx.options.comm_patterns)
    rule = comm_rule_of(ctx, act)[comm].astype(np.int64)
    codes, (r, d, k) = iv.combine_keys(act.rank[comm], act.device[comm], rule)
    start, end = act.start[comm], act.end[comm]
    groups = np.arange(r.size, dtype=np.int64)
    nk, n = iv.sum_by(codes, np.ones(codes.size, dtype=np.int64))
    tk, t = iv.sum_by(codes, end - start)
    uk, u = iv.total_by(codes, start, end)
    out = pd.DataFrame({
        "rank": r.astype(np.int64), "device": d.astype(np.int64),
        "family": [rules[i].family for i in k.tolist()], "rule": [rules[i].name for i in k.tolist()],
        "kernels": iv.lookup(nk, n, groups), "total_ns": iv.lookup(tk, t, groups),
        "communication_ns": iv.lookup(uk, u, groups),
    })
    return out.sort_values(["rank", "device", "total_ns"], ascending=[True, True, False]).reset_index(drop=True)


def _finish(frame: pd.DataFrame, keys: list[str], columns: list[str]) -> pd.DataFrame:
    """Sort (whole-trace rows first), label steps, order columns."""
    frame = frame.copy()
    frame["_step_sort"] = frame["step"].to_numpy()
    frame = frame.sort_values([k if k != "step" else "_step_sort" for k in keys]).reset_index(drop=True)
    frame["step"] = step_column(frame["step"].to_numpy())
    return frame[columns]


# ------------------------------------------------------------------------ per-rank figures


def _scopes(act: Activity) -> list[tuple[np.ndarray, np.ndarray]]:
    """(selection mask, step value) for the whole trace, then for the steps."""
    whole = np.ones(len(act), dtype=bool)
    scopes = [(whole, np.full(len(act), NO_STEP, dtype=np.int64))]
    in_step = act.step != NO_STEP
    if in_step.any():
        scopes.append((in_step, act.step))
    return scopes


def summary_table(act: Activity) -> pd.DataFrame:
    columns = ["rank", "device", "step", "collectives", "total_ns", "communication_ns", "compute_ns",
               "overlap_ns", "overlap_pct", "exposed_ns"]
    frames = []
    comm_all = act.cls == classify.COMMUNICATION
    comp_all = act.cls == classify.COMPUTE
    for mask, step in _scopes(act):
        comm = mask & comm_all
        if not comm.any():
            continue
        comp = mask & comp_all
        codes, (r, d, s) = iv.combine_keys(act.rank[mask], act.device[mask], step[mask])
        key = np.full(len(act), -1, dtype=np.int64)
        key[mask] = codes
        uniq = np.arange(r.size)
        ck, cn = iv.sum_by(key[comm], np.ones(int(comm.sum()), dtype=np.int64))
        tk, tt = iv.sum_by(key[comm], act.end[comm] - act.start[comm])
        uk, ut = iv.total_by(key[comm], act.start[comm], act.end[comm])
        pk, pt = iv.total_by(key[comp], act.start[comp], act.end[comp])
        ok, ot = iv.measure_intersection_by(
            (key[comm], act.start[comm], act.end[comm]), (key[comp], act.start[comp], act.end[comp])
        )
        f = pd.DataFrame(
            {
                "rank": r,
                "device": d,
                "step": s,
                "collectives": iv.lookup(ck, cn, uniq),
                "total_ns": iv.lookup(tk, tt, uniq),
                "communication_ns": iv.lookup(uk, ut, uniq),
                "compute_ns": iv.lookup(pk, pt, uniq),
                "overlap_ns": iv.lookup(ok, ot, uniq),
            }
        )
        frames.append(f[f["collectives"] > 0])
    if not frames:
        return _empty(columns)
    out = pd.concat(frames, ignore_index=True)
    out["overlap_pct"] = _pct(out["overlap_ns"], out["communication_ns"])
    out["exposed_ns"] = out["communication_ns"] - out["overlap_ns"]
    return _finish(out, ["rank", "device", "step"], columns)


def collectives_table(act: Activity, comm: pd.DataFrame) -> pd.DataFrame:
    columns = ["rank", "device", "step", "collective", "process_group", "count", "total_ns", "mean_ns",
               "communication_ns", "overlap_ns", "overlap_pct", "exposed_ns", "bytes", "group_size"]
    if comm.empty:
        return _empty(columns)
    comp = act.cls == classify.COMPUTE
    frames = []
    for with_step in (False, True):
        c = comm if not with_step else comm[comm["step"] != NO_STEP]
        if c.empty:
            continue
        c_step = c["step"].to_numpy() if with_step else np.full(len(c), NO_STEP, dtype=np.int64)
        p_sel = comp & ((act.step != NO_STEP) if with_step else True)
        p_step = act.step[p_sel] if with_step else np.full(int(p_sel.sum()), NO_STEP, dtype=np.int64)
        # one code per (rank, device, step) over both sides, so the two can be intersected
        codes, (r, d, s) = iv.combine_keys(
            np.concatenate([c["rank"].to_numpy(), act.rank[p_sel]]),
            np.concatenate([c["device"].to_numpy(), act.device[p_sel]]),
            np.concatenate([c_step, p_step]),
        )
        c_key, p_key = codes[: len(c)], codes[len(c):]
        p_start, p_end = act.start[p_sel], act.end[p_sel]
        for (kind, pg), idx in c.groupby(["collective", "process_group"], sort=True).indices.items():
            g = c.iloc[idx]
            k = c_key[idx]
            starts, ends = g["start"].to_numpy(), g["end"].to_numpy()
            uniq = np.unique(k)
            nk, n = iv.sum_by(k, np.ones(k.size, dtype=np.int64))
            tk, tt = iv.sum_by(k, ends - starts)
            uk, ut = iv.total_by(k, starts, ends)
            ok, ot = iv.measure_intersection_by((k, starts, ends), (p_key, p_start, p_end))
            nbytes = g["bytes"].to_numpy()
            bk, bt = iv.sum_by(k[nbytes >= 0], nbytes[nbytes >= 0])
            has_bytes = np.isin(uniq, bk)
            gsize = g["group_size"].to_numpy()
            gmax = pd.Series(gsize).groupby(k).max().reindex(uniq).to_numpy()
            frames.append(
                pd.DataFrame(
                    {
                        "rank": r[uniq],
                        "device": d[uniq],
                        "step": s[uniq],
                        "collective": kind,
                        "process_group": pg,
                        "count": iv.lookup(nk, n, uniq),
                        "total_ns": iv.lookup(tk, tt, uniq),
                        "communication_ns": iv.lookup(uk, ut, uniq),
                        "overlap_ns": iv.lookup(ok, ot, uniq),
                        "bytes": pd.array(
                            [int(v) if h else None for v, h in zip(iv.lookup(bk, bt, uniq), has_bytes)], dtype="Int64"
                        ),
                        "group_size": pd.array([int(v) if v >= 0 else None for v in gmax], dtype="Int64"),
                    }
                )
            )
    out = pd.concat(frames, ignore_index=True)
    out["mean_ns"] = out["total_ns"] / out["count"]
    out["overlap_pct"] = _pct(out["overlap_ns"], out["communication_ns"])
    out["exposed_ns"] = out["communication_ns"] - out["overlap_ns"]
    return _finish(out, ["rank", "device", "step", "collective", "process_group"], columns)


def _pct(num: pd.Series, den: pd.Series) -> np.ndarray:
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, 100.0 * num / np.where(den > 0, den, 1), np.nan)


def _empty(columns: list[str]) -> pd.DataFrame:
    floats = {"overlap_pct", "mean_ns", "share_last", "imbalance_pct", "aligned_share_last", "mean_ns_per_step"}
    objects = {"collective", "process_group"}
    nullable = {"step", "bytes", "group_size", "straggler", "aligned_straggler", "max_rank", "min_rank"}
    return pd.DataFrame(
        {
            c: pd.Series(
                dtype="float64" if c in floats else object if c in objects else "Int64" if c in nullable else "int64"
            )
            for c in columns
        }
    )


# ------------------------------------------------------------------------ across ranks


def _straggler_of(arr: pd.DataFrame, col: str) -> pd.DataFrame:
    """Per occurrence: straggler rank (unique latest), late_by (vs. next latest), wait caused."""
    occ = ["collective", "process_group", "step", "occurrence"]
    a = arr[occ + ["rank", col]].sort_values(occ + [col, "rank"])  # col: int64 offsets
    g = a.groupby(occ, sort=False)
    last = g.tail(1).set_index(occ)
    second = g.nth(-2).set_index(occ)[col]
    n = g.size()
    total = g[col].sum()
    out = pd.DataFrame({"last_rank": last["rank"], "last": last[col]})
    out["second"] = second.reindex(out.index)
    out["n"] = n.reindex(out.index)
    out["sum"] = total.reindex(out.index)
    out["late_by"] = out["last"] - out["second"]
    out["wait"] = (out["n"] * out["last"] - out["sum"]) / (out["n"] - 1)  # float: a mean
    out["straggler"] = np.where(out["late_by"] > 0, out["last_rank"], -1)
    return out


def align_clocks(arrivals: pd.DataFrame, copy: bool = True) -> pd.DataFrame:
    """Per-rank clock offsets from collective ends, and the arrivals on corrected clocks.

    Every participant leaves a collective at (nearly) the same instant, so the end of the k-th
    occurrence is a common reference point. ``clock_offset_ns`` of a rank = the median, over the
    occurrences it took part in, of (its end - the median end of that occurrence), rounded to ns:
    how far its clock runs ahead of the job's median clock. ``corrected_rel`` /
    ``corrected_end_rel`` are ``start_rel`` / ``end_rel`` minus that offset (int64, relative to the
    occurrence), ``corrected_lateness_ns`` the corrected start minus the first corrected start.
    ``copy=False`` adds the columns to ``arrivals`` itself.
    """
    out = arrivals.copy() if copy else arrivals
    if out.empty:
        for c in ("clock_offset_ns", "corrected_rel", "corrected_end_rel", "corrected_lateness_ns"):
            out[c] = pd.Series(dtype=np.int64)
        return out
    offsets = np.round(out.groupby("rank")["end_offset_ns"].median()).astype(np.int64)
    out["clock_offset_ns"] = offsets.reindex(out["rank"].to_numpy()).to_numpy()
    out["corrected_rel"] = out["start_rel"].to_numpy() - out["clock_offset_ns"].to_numpy()
    out["corrected_end_rel"] = out["end_rel"].to_numpy() - out["clock_offset_ns"].to_numpy()
    occ = ["collective", "process_group", "step", "occurrence"]
    out["corrected_lateness_ns"] = out["corrected_rel"] - out.groupby(occ)["corrected_rel"].transform("min")
    return out


def alignment_table(arrivals: pd.DataFrame) -> pd.DataFrame:
    """One row per rank: how its clock was aligned (see :func:`align_clocks`).

    ``collectives`` = matched occurrences the offset is the median of; ``clock_offset_ns`` = the
    correction (subtracted from the rank's times in the ``corrected_*`` figures);
    ``residual_mad_ns`` / ``residual_max_ns`` = median / largest |end offset - clock offset| over
    those occurrences: how well one constant offset explains that rank's collective ends (a few us
    is NCCL's own end jitter; much more means the clock drifted during the trace).
    """
    cols = ["rank", "collectives", "clock_offset_ns", "residual_mad_ns", "residual_max_ns"]
    if arrivals.empty:
        return _empty(cols)
    if "clock_offset_ns" not in arrivals:
        arrivals = align_clocks(arrivals)
    resid = (arrivals["end_offset_ns"] - arrivals["clock_offset_ns"]).abs()
    g = resid.groupby(arrivals["rank"])
    out = pd.DataFrame(
        {
            "collectives": g.size(),
            "clock_offset_ns": arrivals.groupby("rank")["clock_offset_ns"].first(),
            "residual_mad_ns": np.round(g.median()).astype(np.int64),
            "residual_max_ns": np.round(g.max()).astype(np.int64),
        }
    )
    out.index.name = "rank"
    out = out.reset_index()
    out["rank"] = out["rank"].astype(np.int64)
    out["collectives"] = out["collectives"].astype(np.int64)
    out["clock_offset_ns"] = out["clock_offset_ns"].astype(np.int64)
    return out[cols].sort_values("rank", kind="stable").reset_index(drop=True)


def _signed_us(ns: float) -> str:
    return ("-" if ns < 0 else "+") + _us(abs(float(ns)))


_SKEW_COLS = ["collective", "process_group", "step", "occurrence", "ranks", "first_start_ns", "last_start_ns",
              "skew_ns", "straggler", "late_by_ns", "wait_caused_ns", "end_spread_ns", "aligned_skew_ns",
              "aligned_straggler", "aligned_late_by_ns", "aligned_wait_caused_ns", "corrected_skew_ns",
              "corrected_straggler", "corrected_late_by_ns", "corrected_wait_caused_ns", "corrected_end_spread_ns"]
_STRAGGLER_COLS = ["rank", "matched", "times_last", "share_last", "mean_late_by_ns", "wait_caused_ns",
                   "aligned_times_last", "aligned_share_last", "aligned_mean_late_by_ns", "aligned_wait_caused_ns",
                   "corrected_times_last", "corrected_share_last", "corrected_mean_late_by_ns",
                   "corrected_wait_caused_ns", "mean_lateness_ns", "clock_offset_ns"]


def _skew_per_occurrence(arrivals: pd.DataFrame, stragglers: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per collective occurrence: start skew and end spread on each clock basis, and its
    straggler (``stragglers``: :func:`_straggler_of` per column prefix "", "aligned_", "corrected_")."""
    occ = ["collective", "process_group", "step", "occurrence"]
    g = arrivals.groupby(occ)
    skew = pd.DataFrame(
        {
            "ranks": g.size(),
            "first_start_ns": g["start"].min(),
            "last_start_ns": g["start"].max(),
            "end_spread_ns": g["end"].max() - g["end"].min(),
            "aligned_skew_ns": g["aligned_rel"].max() - g["aligned_rel"].min(),
            "corrected_skew_ns": g["corrected_rel"].max() - g["corrected_rel"].min(),
            "corrected_end_spread_ns": g["corrected_end_rel"].max() - g["corrected_end_rel"].min(),
        }
    )
    skew["skew_ns"] = skew["last_start_ns"] - skew["first_start_ns"]
    for prefix, table in stragglers.items():
        skew[f"{prefix}straggler"] = table["straggler"].reindex(skew.index)
        skew[f"{prefix}late_by_ns"] = np.where(table["straggler"] >= 0, table["late_by"], 0).astype(np.int64)
        skew[f"{prefix}wait_caused_ns"] = np.where(table["straggler"] >= 0, table["wait"], 0.0)
    skew = skew.reset_index().sort_values(["first_start_ns", "collective", "process_group"])
    for c in ("straggler", "aligned_straggler", "corrected_straggler"):
        skew[c] = pd.array([int(v) if v >= 0 else None for v in skew[c]], dtype="Int64")
    for c in ("wait_caused_ns", "aligned_wait_caused_ns", "corrected_wait_caused_ns"):
        skew[c] = np.round(skew[c].to_numpy()).astype(np.int64)
    skew["step"] = step_column(skew["step"].to_numpy())
    return skew[_SKEW_COLS].reset_index(drop=True)


def _straggler_per_rank(arrivals: pd.DataFrame, stragglers: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per rank: how often it was the straggler on each clock basis, by how much, and the
    wait it caused (``stragglers`` as in :func:`_skew_per_occurrence`)."""
    ranks = np.sort(arrivals["rank"].unique())
    by_rank = arrivals.groupby("rank")
    strag = pd.DataFrame(index=pd.Index(ranks, name="rank"))
    strag["matched"] = by_rank.size().reindex(ranks).fillna(0).astype(np.int64)
    strag["mean_lateness_ns"] = by_rank["lateness_ns"].mean().reindex(ranks)
    strag["clock_offset_ns"] = by_rank["clock_offset_ns"].first().reindex(ranks)
    for prefix, table in stragglers.items():
        t = table[table["straggler"] >= 0]
        tg = t.groupby("straggler")
        strag[f"{prefix}times_last"] = tg.size().reindex(ranks).fillna(0).astype(np.int64)
        strag[f"{prefix}share_last"] = strag[f"{prefix}times_last"] / strag["matched"].where(strag["matched"] > 0)
        strag[f"{prefix}mean_late_by_ns"] = tg["late_by"].mean().reindex(ranks)
        strag[f"{prefix}wait_caused_ns"] = np.round(tg["wait"].sum().reindex(ranks).fillna(0.0)).astype(np.int64)
    strag["mean_late_by_ns"] = strag["mean_late_by_ns"].round().astype("Int64")
    strag["aligned_mean_late_by_ns"] = strag["aligned_mean_late_by_ns"].round().astype("Int64")
    strag["corrected_mean_late_by_ns"] = strag["corrected_mean_late_by_ns"].round().astype("Int64")
    strag["mean_lateness_ns"] = strag["mean_lateness_ns"].round().astype(np.int64)
    strag["clock_offset_ns"] = strag["clock_offset_ns"].astype(np.int64)
    strag = strag.reset_index()
    strag["rank"] = strag["rank"].astype(np.int64)
    return strag[_STRAGGLER_COLS]


def skew_tables(arrivals: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The skew per collective occurrence and the stragglers per rank, on raw, end-aligned and
    clock-corrected times."""
    if arrivals.empty:
        return _empty(_SKEW_COLS), _empty(_STRAGGLER_COLS)
    if "corrected_rel" not in arrivals:
        arrivals = align_clocks(arrivals)
    stragglers = {
        "": _straggler_of(arrivals, "start_rel"),
        "aligned_": _straggler_of(arrivals, "aligned_rel"),
        "corrected_": _straggler_of(arrivals, "corrected_rel"),
    }
    return _skew_per_occurrence(arrivals, stragglers), _straggler_per_rank(arrivals, stragglers)


def compute_by_rank(act: Activity) -> pd.DataFrame:
    """|U(compute)| per rank and step (``step`` = NO_STEP: the whole trace), whole-trace rows first."""
    comp = act.cls == classify.COMPUTE
    frames = []
    for mask, step in _scopes(act):
        m = mask & comp
        if not m.any():
            continue
        codes, (r, s) = iv.combine_keys(act.rank[m], step[m])
        k, t = iv.total_by(codes, act.start[m], act.end[m])
        frames.append(pd.DataFrame({"rank": r[k], "step": s[k], "compute_ns": t}))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in ("rank", "step", "compute_ns")})
    return pd.concat(frames, ignore_index=True)


def compute_balance_from(by: pd.DataFrame, active_ranks: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``compute_by_rank`` and ``compute_imbalance`` from per-rank compute times (any row order)."""
    by_cols = ["rank", "step", "compute_ns"]
    imb_cols = ["step", "ranks", "min_ns", "max_ns", "mean_ns", "min_rank", "max_rank", "imbalance_ns",
                "imbalance_pct"]
    if len(active_ranks) < 2 or by.empty:
        return _empty(by_cols), _empty(imb_cols)
    # canonical order (whole trace first, then by rank and step): ties in idxmin/idxmax and float
    # sums then come out the same whichever way the per-rank parts were gathered
    by = by.assign(_scope=(by["step"] != NO_STEP).astype(np.int8))
    by = by.sort_values(["_scope", "rank", "step"], kind="stable").drop(columns="_scope").reset_index(drop=True)
    g = by.groupby("step")
    imb = pd.DataFrame(
        {
            "ranks": g.size(),
            "min_ns": g["compute_ns"].min(),
            "max_ns": g["compute_ns"].max(),
            "mean_ns": g["compute_ns"].mean(),
            "min_rank": by.loc[g["compute_ns"].idxmin(), "rank"].to_numpy(),
            "max_rank": by.loc[g["compute_ns"].idxmax(), "rank"].to_numpy(),
        }
    ).reset_index()
    imb = imb[imb["ranks"] >= 2]
    imb["imbalance_ns"] = np.round(imb["max_ns"] - imb["mean_ns"]).astype(np.int64)
    imb["imbalance_pct"] = np.where(imb["mean_ns"] > 0, 100.0 * imb["imbalance_ns"] / imb["mean_ns"], np.nan)
    for c in ("min_rank", "max_rank"):
        imb[c] = imb[c].astype("Int64")
    imb["min_ns"] = imb["min_ns"].astype(np.int64)
    imb["max_ns"] = imb["max_ns"].astype(np.int64)
    return _finish(by, ["step", "rank"], by_cols), _finish(imb, ["step"], imb_cols)


# ------------------------------------------------------------------------ the analysis


def _step_windows(act: Activity) -> pd.DataFrame:
    """GPU window (first start .. last end of the step's activity) per rank, device and step."""
    in_step = act.step != NO_STEP
    if not in_step.any():
        return pd.DataFrame({"rank": [], "device": [], "step": [], "window_ns": []})
    codes, (r, d, s) = iv.combine_keys(act.rank[in_step], act.device[in_step], act.step[in_step])
    k, lo, hi = iv.window_by(codes, act.start[in_step], act.end[in_step])
    return pd.DataFrame({"rank": r[k], "device": d[k], "step": s[k], "window_ns": hi - lo})


def _whole_window_frame(act: Activity) -> pd.DataFrame:
    """GPU window (first start .. last end of all activity) per rank and device."""
    codes, (r, d) = iv.combine_keys(act.rank, act.device)
    k, lo, hi = iv.window_by(codes, act.start, act.end)
    return pd.DataFrame({"rank": np.asarray(r[k], dtype=np.int64), "device": np.asarray(d[k], dtype=np.int64),
                         "window_ns": np.asarray(hi - lo, dtype=np.int64)})


def _whole_windows(frame: pd.DataFrame) -> dict[tuple[int, int], int]:
    return {(int(r), int(d)): int(w) for r, d, w in zip(frame["rank"], frame["device"], frame["window_ns"])}


# ------------------------------------------------------------------------ per-rank inputs of the
# cross-rank figures, and the cross-rank reduction


@dataclass
class CrossRankInputs:
    """What the cross-rank figures need from each rank: small tables, concatenable across ranks.

    A job (``traceview.jobs``) computes these rank by rank (one trace at a time) and concatenates them;
    :func:`analyze` computes them on a whole multi-rank trace. :func:`cross_rank` gives the same
    figures either way (it puts the rows into a canonical order first).

    - ``kernels``: one row per communication kernel (``row``, ``rank``, ``device``, ``step``,
      ``collective``, ``process_group``, ``start``, ``end``, ``bytes``, ``group_size``);
    - ``collectives``: the per-rank ``collectives`` table;
    - ``compute``: |U(compute)| per rank and step (NO_STEP = whole trace);
    - ``windows``: per-step GPU window per rank, device and step; ``whole_windows``: per rank and
      device over the whole trace;
    - ``steps``: number of steps per rank (ranks with at least one);
    - ``active_ranks``: ranks with any GPU activity;
    - ``exposed``: the exposed intervals of each collective kind over the whole trace, U(kernels of
      that kind) - U(compute), per rank and device (``rank``, ``device``, ``collective``,
      ``process_group``, ``start_ns``, ``end_ns``): the claims of ``exposed_collective``.
    """

    kernels: pd.DataFrame
    collectives: pd.DataFrame
    compute: pd.DataFrame
    windows: pd.DataFrame
    whole_windows: pd.DataFrame
    steps: pd.DataFrame
    active_ranks: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    exposed: pd.DataFrame = field(default_factory=lambda: _exposed_frame_empty())

    def remap_rows(self, rows: np.ndarray | None, offset: int = 0) -> "CrossRankInputs":
        """The same inputs with ``kernels.row`` moved to the rows of a larger trace: ``rows[row]`` (a
        one-rank trace cut from a file) and then ``+ offset`` (files concatenated)."""
        if (rows is None and not offset) or self.kernels.empty:
            return self
        kernels = self.kernels.copy()
        row = kernels["row"].to_numpy()
        if rows is not None:
            row = rows[row]
        kernels["row"] = row + np.int64(offset)
        return dataclasses.replace(self, kernels=kernels)

    def renumber(self, mapping: dict[int, int]) -> "CrossRankInputs":
        """The same inputs with ranks renamed (``{old: new}``)."""
        if not mapping:
            return self

        def ren(frame: pd.DataFrame) -> pd.DataFrame:
            if frame.empty or "rank" not in frame:
                return frame
            frame = frame.copy()
            frame["rank"] = frame["rank"].map(lambda r: mapping.get(int(r), int(r))).astype(frame["rank"].dtype)
            return frame

        active = np.asarray([mapping.get(int(r), int(r)) for r in self.active_ranks], dtype=np.int64)
        return CrossRankInputs(ren(self.kernels), ren(self.collectives), ren(self.compute), ren(self.windows),
                               ren(self.whole_windows), ren(self.steps), np.sort(active), ren(self.exposed))

    @classmethod
    def concat(cls, parts: list["CrossRankInputs"]) -> "CrossRankInputs":
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls(_kernel_frame_empty(), pd.DataFrame(), _int_frame(("rank", "step", "compute_ns")),
                       _int_frame(("rank", "device", "step", "window_ns")),
                       _int_frame(("rank", "device", "window_ns")), _int_frame(("rank", "steps")))

        def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
            nonempty = [f for f in frames if len(f)]
            if not nonempty:
                return frames[0]
            return pd.concat(nonempty, ignore_index=True) if len(nonempty) > 1 else nonempty[0]

        kernels = cat([p.kernels for p in parts])
        for c in _KERNEL_TEXT:  # categorical parts concatenate to object: keep them categorical
            if c in kernels and kernels[c].dtype == object and any(
                    isinstance(p.kernels[c].dtype, pd.CategoricalDtype) for p in parts if c in p.kernels):
                kernels[c] = kernels[c].astype("category")
        return cls(
            kernels=kernels,
            collectives=cat([p.collectives for p in parts]),
            compute=cat([p.compute for p in parts]),
            windows=cat([p.windows for p in parts]),
            whole_windows=cat([p.whole_windows for p in parts]),
            steps=cat([p.steps for p in parts]),
            active_ranks=np.unique(np.concatenate([np.asarray(p.active_ranks, dtype=np.int64) for p in parts])),
            exposed=cat([p.exposed for p in parts]),
        )

    def compact(self) -> "CrossRankInputs":
        """The same inputs in less memory, for sending to a driver that holds thousands of ranks: the
        text columns of ``kernels`` categorical, small integers int32. :func:`cross_rank` restores
        the dtypes :func:`comm_kernels` gives, so the figures do not change."""
        k = self.kernels
        if k.empty:
            return self
        k = k.copy()
        for c in _KERNEL_TEXT:
            k[c] = k[c].astype("category")
        for c in ("rank", "device", "group_size"):
            k[c] = k[c].to_numpy().astype(np.int32)
        exposed = self.exposed
        if len(exposed):
            exposed = exposed.astype({c: "category" for c in _KERNEL_TEXT})
        return dataclasses.replace(self, kernels=k, exposed=exposed)

    def nbytes(self) -> int:
        """Memory held by the tables (deep, strings included)."""
        frames = (self.kernels, self.collectives, self.compute, self.windows, self.whole_windows, self.steps,
                  self.exposed)
        return int(sum(f.memory_usage(deep=True).sum() for f in frames)) + int(self.active_ranks.nbytes)


_KERNEL_INTS = ("row", "rank", "device", "step", "start", "end", "bytes", "group_size")
_KERNEL_TEXT = ("collective", "process_group")


def _int_frame(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in columns})


def _exposed_frame_empty() -> pd.DataFrame:
    frame = _int_frame(("rank", "device", "start_ns", "end_ns"))
    frame.insert(2, "collective", pd.Series(dtype=object))
    frame.insert(3, "process_group", pd.Series(dtype=object))
    return frame


def exposed_intervals(act: Activity, comm: pd.DataFrame) -> pd.DataFrame:
    """Per collective kind and process group: U(its kernels) - U(compute), per rank and device, over
    the whole trace (the intervals whose measure is the ``collectives`` table's ``exposed_ns``)."""
    if comm.empty:
        return _exposed_frame_empty()
    comp = act.cls == classify.COMPUTE
    compute = Claims.of(act.rank[comp], act.device[comp], act.start[comp], act.end[comp])
    frames = []
    # one pass per kind (a handful), every rank and device at once
    for (kind, pg), idx in comm.groupby(["collective", "process_group"], sort=True).indices.items():
        g = comm.iloc[idx]
        exposed = Claims.of(g["rank"].to_numpy(), g["device"].to_numpy(), g["start"].to_numpy(),
                            g["end"].to_numpy()).subtract(compute)
        rank, device = split_gpu_key(exposed.key)
        frames.append(pd.DataFrame({"rank": rank, "device": device, "collective": kind, "process_group": pg,
                                    "start_ns": exposed.start_ns, "end_ns": exposed.end_ns}))
    out = pd.concat(frames, ignore_index=True)
    return out.astype({"rank": np.int64, "device": np.int64, "start_ns": np.int64, "end_ns": np.int64})


def _kernel_frame_empty() -> pd.DataFrame:
    frame = _int_frame(("row", "rank", "device", "step", "start", "end", "bytes", "group_size"))
    frame.insert(4, "collective", pd.Series(dtype=object))
    frame.insert(5, "process_group", pd.Series(dtype=object))
    return frame


def cross_rank_inputs(ctx: AnalysisContext) -> CrossRankInputs:
    """The inputs of the cross-rank figures of the context's ranks (the derived input
    ``communication.cross_rank_inputs``)."""
    value: CrossRankInputs = ctx.input("communication.cross_rank_inputs")
    return value


def _build_inputs(ctx: AnalysisContext) -> CrossRankInputs:
    act = activity(ctx)
    comm = comm_kernels(ctx, act)
    counts = act.steps.counts()
    return CrossRankInputs(
        kernels=comm,
        collectives=collectives_table(act, comm),
        compute=compute_by_rank(act),
        windows=_step_windows(act),
        whole_windows=_whole_window_frame(act),
        steps=pd.DataFrame({"rank": np.asarray(list(counts), dtype=np.int64),
                            "steps": np.asarray(list(counts.values()), dtype=np.int64)}),
        active_ranks=np.unique(act.rank).astype(np.int64),
        exposed=exposed_intervals(act, comm),
    )


@dataclass
class CrossRank:
    """The cross-rank part of the communication analysis."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _canonical(inputs: CrossRankInputs) -> CrossRankInputs:
    """Rows in one fixed order, so the figures do not depend on how the inputs were gathered."""

    def by(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
        if frame.empty:
            return frame.reset_index(drop=True)
        return frame.sort_values(keys, kind="stable").reset_index(drop=True)

    coll = inputs.collectives
    if not coll.empty:
        coll = coll.assign(_step_sort=coll["step"].astype("Float64").fillna(NO_STEP).astype(np.int64))
        coll = by(coll, ["rank", "device", "_step_sort", "collective", "process_group"]).drop(columns="_step_sort")
    windows = inputs.windows
    if len(windows):
        windows = by(windows, ["rank", "device", "step"])
    kernels = inputs.kernels
    if len(kernels):
        # the dtypes comm_kernels gives (int64; text as pandas infers it from Python strings),
        # whatever compact() or concatenation made of them
        kernels = kernels.assign(
            **{c: kernels[c].to_numpy().astype(np.int64) for c in _KERNEL_INTS if c in kernels},
            **{c: pd.Series(kernels[c].astype(object).to_numpy(), index=kernels.index)
               for c in _KERNEL_TEXT if c in kernels},
        )
    return CrossRankInputs(
        kernels=by(kernels, ["rank", "row"]),
        collectives=coll,
        compute=inputs.compute,
        windows=windows,
        whole_windows=by(inputs.whole_windows, ["rank", "device"]),
        steps=by(inputs.steps, ["rank"]),
        active_ranks=np.unique(np.asarray(inputs.active_ranks, dtype=np.int64)),
        exposed=inputs.exposed,
    )


def cross_rank(inputs: CrossRankInputs, arrivals_table: bool = True) -> CrossRank:
    """Skew, stragglers, clock alignment, compute imbalance and the communication findings, from the
    per-rank inputs alone (of one multi-rank trace, or gathered rank by rank).

    ``arrivals_table=False`` leaves out the ``arrivals`` table (one row per matched collective and
    rank: the largest output, millions of rows for thousands of ranks); nothing else changes."""
    inputs = _canonical(inputs)
    out = CrossRank()
    tables = out.tables
    comm = inputs.kernels
    arrivals, warnings = match_collectives(comm)
    out.warnings.extend(warnings)
    multi = comm["rank"].nunique() >= 2 if not comm.empty else False
    if multi:
        arrivals = align_clocks(arrivals, copy=False)
        skew, strag = skew_tables(arrivals)
        tables["skew"] = skew
        if arrivals_table:
            tables["arrivals"] = _arrivals_out(arrivals)
        tables["stragglers"] = strag
        tables["alignment"] = alignment_table(arrivals)
    by_rank, imbalance = compute_balance_from(inputs.compute, inputs.active_ranks)
    several = len(inputs.active_ranks) >= 2
    if several:
        tables["compute_by_rank"] = by_rank
        tables["compute_imbalance"] = imbalance
    if comm.empty:
        return out
    step_counts = {int(r): int(n) for r, n in zip(inputs.steps["rank"], inputs.steps["steps"])}
    if not step_counts:
        out.warnings.append("no steps found: communication figures are for the whole trace; costs are not per step")
    windows = inputs.windows
    whole = _whole_windows(inputs.whole_windows)
    out.findings.extend(_exposed_findings(inputs.collectives, windows, step_counts, whole, inputs.exposed))
    if multi:
        out.findings.extend(_straggler_findings(tables["stragglers"], tables["skew"], windows, step_counts, whole,
                                                arrivals))
    if several:
        out.findings.extend(_imbalance_findings(imbalance, windows, whole))
    return out


def analyze(ctx: AnalysisContext) -> AnalysisResult:
    """Communication figures of ``trace``: the per-rank tables, then the cross-rank ones from the
    per-rank inputs (:func:`reduce_ranks`), exactly as when the ranks are analysed one by one."""
    options = ctx.options
    result = analyze_rank(ctx)
    cross = reduce_ranks([cross_rank_inputs(ctx)], options)
    result.tables.update(cross.tables)
    result.findings.extend(cross.findings)
    result.warnings.extend(cross.warnings)
    return result


def analyze_rank(ctx: AnalysisContext) -> AnalysisResult:
    """The per-rank part: the communication summary (overlap, exposed time) of each rank and GPU."""
    result = AnalysisResult(name=NAME)
    act = activity(ctx)
    rules = rules_table(ctx, act)
    result.tables["summary"] = with_families(summary_table(act), rules)
    result.tables["rules"] = rules
    return result


def with_families(summary: pd.DataFrame, rules: pd.DataFrame) -> pd.DataFrame:
    """``summary`` with a ``families`` column: the rule families of each rank's and device's
    communication (whole trace, most time first), so the headline says what was counted."""
    summary = summary.copy()
    if summary.empty:
        summary["families"] = pd.Series(dtype=object)
        return summary
    per_family = rules.groupby(["rank", "device", "family"], sort=False)["total_ns"].sum().reset_index()
    per_family = per_family.sort_values(["rank", "device", "total_ns"], ascending=[True, True, False])
    label = per_family.groupby(["rank", "device"], sort=False)["family"].agg(", ".join)
    at = pd.MultiIndex.from_arrays([summary["rank"], summary["device"]])
    summary["families"] = label.reindex(at).fillna("").to_numpy(dtype=object)
    return summary


def reduce_ranks(parts: list[CrossRankInputs], options: Options) -> AnalysisResult:
    """The cross-rank part, from every rank's :func:`cross_rank_inputs`: collectives per rank, skew,
    stragglers, clock alignment, compute imbalance and the communication findings.
    ``options.whole_only`` (jobs of thousands of ranks) leaves out the ``arrivals`` table."""
    inputs = CrossRankInputs.concat(parts)
    cross = cross_rank(inputs, arrivals_table=not options.whole_only)
    collectives = inputs.collectives
    if options.whole_only and len(collectives):
        collectives = collectives[collectives["step"].isna()].reset_index(drop=True)
    result = AnalysisResult(name=NAME, tables={"collectives": collectives, **cross.tables},
                            findings=list(cross.findings), warnings=list(cross.warnings))
    return result


def _arrivals_out(arrivals: pd.DataFrame) -> pd.DataFrame:
    cols = ["collective", "process_group", "step", "occurrence", "rank", "row", "start_ns", "end_ns", "dur_ns",
            "lateness_ns", "aligned_lateness_ns", "corrected_lateness_ns", "end_offset_ns"]
    if arrivals.empty:
        return _empty(cols)
    out = arrivals.rename(columns={"start": "start_ns", "end": "end_ns", "dur": "dur_ns"}).copy()
    out["end_offset_ns"] = np.round(out["end_offset_ns"].to_numpy()).astype(np.int64)
    out = out.sort_values(["start_ns", "rank"])
    out["step"] = step_column(out["step"].to_numpy())
    return out[cols].reset_index(drop=True)


def _mean_window(windows: pd.DataFrame, rank: int | None = None) -> float | None:
    w = windows if rank is None else windows[windows["rank"] == rank]
    return float(w["window_ns"].mean()) if len(w) else None


class _ExposedRank(TypedDict):
    """Evidence of an exposed_collective finding, per rank."""

    rank: int
    device: int
    count: int
    communication_ns: int
    exposed_ns: int
    exposed_ns_per_step: int
    overlap_pct: float | None
    window_ns: float | None
    share: float | None


def _exposed_claims(exposed: pd.DataFrame, kind: str, pg: str) -> Claims:
    """The exposed intervals of one collective kind and process group, on every rank and device."""
    if exposed.empty:
        return Claims.empty()
    mine = exposed[(exposed["collective"].astype(object) == kind) & (exposed["process_group"].astype(object) == pg)]
    return Claims.of(mine["rank"].to_numpy(), mine["device"].to_numpy(), mine["start_ns"].to_numpy(),
                     mine["end_ns"].to_numpy())


def _exposed_findings(
    coll: pd.DataFrame, windows: pd.DataFrame, step_counts: dict[int, int], whole_windows: dict[tuple[int, int], int],
    exposed_frame: pd.DataFrame,
) -> list[Finding]:
    whole = coll[coll["step"].isna()]
    if whole.empty:
        return []
    # each rank's mean per-step window, computed once (not by filtering the table for every row)
    rank_windows = {int(r): float(g["window_ns"].mean()) for r, g in windows.groupby("rank", sort=False)} \
        if len(windows) else {}
    findings = []
    for (kind, pg), rows in whole.groupby(["collective", "process_group"]):
        per_rank: list[_ExposedRank] = []
        for _, row in rows.iterrows():
            rank, device = int(row["rank"]), int(row["device"])
            n_steps = step_counts.get(rank, 0)
            exposed = per_step(int(row["exposed_ns"]), n_steps)
            window = rank_windows.get(rank) if n_steps else whole_windows.get((rank, device))
            per_rank.append(
                {
                    "rank": rank,
                    "device": device,
                    "count": int(row["count"]),
                    "communication_ns": int(row["communication_ns"]),
                    "exposed_ns": int(row["exposed_ns"]),
                    "exposed_ns_per_step": exposed,
                    "overlap_pct": None if pd.isna(row["overlap_pct"]) else float(row["overlap_pct"]),
                    "window_ns": window,
                    "share": exposed / window if window else None,
                }
            )
        shares = [p["share"] for p in per_rank if p["share"] is not None]
        if not shares:
            continue
        share = float(np.mean(shares))
        if share < EXPOSED_SHARE:
            continue
        cost = int(round(float(np.mean([p["exposed_ns_per_step"] for p in per_rank]))))
        worst = max(per_rank, key=lambda p: p["exposed_ns_per_step"])
        ranks = sorted(p["rank"] for p in per_rank)
        overlap = [p["overlap_pct"] for p in per_rank if p["overlap_pct"] is not None]
        where = f"rank {ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} ranks"
        pg_text = f" (process group {pg})" if pg else ""
        findings.append(
            Finding(
                code="exposed_collective",
                title=f"{kind}{pg_text} is exposed: {np.mean(overlap):.0f}% of it overlapped with compute ({where})",
                severity="high" if share >= EXPOSED_SHARE_HIGH else "medium",
                analysis=NAME,
                recommendation=exposed_advice(kind),
                cost_ns_per_step=cost,
                cost_share=share,
                rank=ranks[0] if len(ranks) == 1 else None,
                evidence={"collective": kind, "process_group": pg, "worst_rank": worst["rank"], "per_rank": per_rank},
                # temporal's exposed_communication (per rank) already counts this time
                part_of="exposed_communication",
                claims=_exposed_claims(exposed_frame, kind, pg),
            )
        )
    return findings


_EXPOSED_ADVICE = {
    "AllReduce": "Overlap gradient all-reduce with backward compute: DDP buckets (smaller bucket_cap_mb so "
    "the first buckets start earlier), no_sync() for gradient accumulation, gradient compression; check "
    "that nothing synchronises the stream before the all-reduce is launched.",
    "AllGather": "Prefetch parameters: FSDP forward_prefetch / backward_prefetch=BACKWARD_PRE, limit_all_gathers "
    "off when memory allows, or larger FSDP units so each gather hides behind more compute.",
    "ReduceScatter": "Overlap reduce-scatter with the next layer's backward (FSDP backward_prefetch) and avoid a "
    "blocking wait right after it.",
    "default": "Launch the collective asynchronously (async_op=True) and wait for it as late as possible, on a "
    "separate stream, so it runs under compute; make messages larger and fewer if they are latency-bound.",
}


#: advice for the families whose kernels are not torch.distributed collectives
_FAMILY_ADVICE = {
    "deepep": "Overlap DeepEP dispatch/combine with compute: launch them asynchronously (async_finish=True, "
    "passing previous_event) or, in low-latency mode, with return_recv_hook=True so the receive completes "
    "later; split the batch into two micro-batches so one's dispatch/combine runs under the other's compute.",
    "symmetric_memory": "This all-reduce runs in line with the model's compute (tensor parallelism): overlap it "
    "with independent work (micro-batch or async tensor-parallel overlap), fuse it with the neighbouring "
    "kernels, or lower the tensor-parallel degree if the layers are too small to hide it.",
}
_FAMILY_ADVICE["custom_allreduce"] = _FAMILY_ADVICE["symmetric_memory"]


def exposed_advice(kind: str) -> str:
    """The recommendation of an exposed_collective finding: by collective kind (``AllReduce``), by
    family for ``family:operation`` kinds (``deepep:combine``), else the general advice."""
    family = kind.split(":", 1)[0] if ":" in kind else None
    if family in _FAMILY_ADVICE:
        return _FAMILY_ADVICE[family]
    return _EXPOSED_ADVICE.get(kind, _EXPOSED_ADVICE["default"])


def _us(ns: float) -> str:
    return f"{ns / 1000:.1f} us" if ns < 1_000_000 else f"{ns / 1e6:.2f} ms"


def _straggler_cost(wait_caused_ns: int, windows: pd.DataFrame, step_counts: dict[int, int],
                    whole: dict[tuple[int, int], int]) -> tuple[int, float | None]:
    """The wait a straggler causes each other rank per step, and its share of a mean step window
    (of the whole-trace window without steps; None when there is no window)."""
    n_steps = max(step_counts.values()) if step_counts else 0
    cost = per_step(wait_caused_ns, n_steps)
    window = _mean_window(windows) if n_steps else None
    if window is None:
        window = float(np.mean(list(whole.values()))) if whole else None
    return cost, (cost / window if window else None)


def _straggler_severity(cost_share: float | None) -> str:
    share = cost_share or 0
    return "high" if share >= STRAGGLER_HIGH else "medium" if share >= STRAGGLER_MEDIUM else "low"


def _straggler_finding(row: pd.Series, skew: pd.DataFrame, *, prefix: str, ranks: int, max_offset: int,
                       cost: int, cost_share: float | None, steps: int = 1) -> Finding:
    """The straggler_rank finding of one row of the stragglers table, on the clock basis of the
    columns starting with ``prefix``."""
    rank = int(row["rank"])
    matched = int(row["matched"])
    times_last = int(row[f"{prefix}times_last"])
    share = times_last / matched if matched else 0.0
    late_by = row[f"{prefix}mean_late_by_ns"]
    late_by = int(late_by) if pd.notna(late_by) else 0
    mine = skew[skew[f"{prefix}straggler"] == rank]
    return Finding(
        code="straggler_rank",
        title=f"Rank {rank} is the last to reach {times_last} of {matched} collectives, on average "
        f"{_us(late_by)} after the others; each other rank waits {_us(cost)} {count_per(steps)}",
        severity=_straggler_severity(cost_share),
        analysis=NAME,
        recommendation=f"Find what rank {rank} does before the collectives that the others do not: see "
        "its idle gaps (slower DataLoader, host-side work, a slower GPU/thermal throttling, uneven "
        "input sizes). Balance the input (padding/bucketing), give its DataLoader more workers, or "
        "check its hardware.",
        cost_ns_per_step=cost,
        cost_share=cost_share,
        rank=rank,
        evidence={
            "clock_basis": f"end-aligned clocks: per-rank offsets from collective ends removed (up to "
            f"{_us(max_offset)})" if prefix else "raw timestamps",
            "matched": matched,
            "times_last": times_last,
            "share_last": share,
            "mean_late_by_ns": late_by,
            "wait_caused_ns": int(row[f"{prefix}wait_caused_ns"]),
            "raw_times_last": int(row["times_last"]),
            "aligned_times_last": int(row["aligned_times_last"]),
            "corrected_times_last": int(row["corrected_times_last"]),
            "clock_offset_ns": int(row["clock_offset_ns"]),
            "max_clock_offset_ns": max_offset,
            "max_skew_ns": int(mine[f"{prefix}skew_ns"].max()) if len(mine) else 0,
            "ranks": ranks,
        },
    )


def straggler_waits(arrivals: pd.DataFrame, rel_column: str) -> pd.DataFrame:
    """Per matched arrival on the clock basis ``rel_column`` (``start_rel``, ``aligned_rel``,
    ``corrected_rel``): the occurrence's straggler (the unique latest rank; -1 on a tie) and the
    interval this rank waits for it, ``[start, start + min(wait, dur))`` on its own clock, wait =
    the straggler's relative start - its own (zero for the straggler itself)."""
    occ = ["collective", "process_group", "step", "occurrence"]
    occ_id = arrivals.groupby(occ, sort=False).ngroup().to_numpy()
    n_occ = int(occ_id.max()) + 1 if occ_id.size else 0
    rel = arrivals[rel_column].to_numpy().astype(np.int64)
    rank = arrivals["rank"].to_numpy().astype(np.int64)
    last = np.full(n_occ, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, occ_id, rel)
    at_last = rel == last[occ_id]
    straggler = np.full(n_occ, -1, dtype=np.int64)
    unique_last = np.bincount(occ_id[at_last], minlength=n_occ) == 1
    straggler[occ_id[at_last & unique_last[occ_id]]] = rank[at_last & unique_last[occ_id]]
    start = arrivals["start"].to_numpy().astype(np.int64)
    dur = arrivals["end"].to_numpy().astype(np.int64) - start
    wait = last[occ_id] - rel
    return pd.DataFrame({"rank": rank, "device": arrivals["device"].to_numpy().astype(np.int64),
                         "straggler": straggler[occ_id], "start_ns": start,
                         "end_ns": start + np.minimum(wait, np.maximum(dur, 0))})


def _straggler_claims(waits: pd.DataFrame, rank: int) -> Claims:
    """The time the other ranks spend waiting in the collectives where ``rank`` was last."""
    mine = waits[(waits["straggler"] == rank) & (waits["rank"] != rank)]
    return Claims.of(mine["rank"].to_numpy(), mine["device"].to_numpy(), mine["start_ns"].to_numpy(),
                     mine["end_ns"].to_numpy())


def _straggler_findings(
    strag: pd.DataFrame, skew: pd.DataFrame, windows: pd.DataFrame, step_counts: dict[int, int],
    whole: dict[tuple[int, int], int], arrivals: pd.DataFrame,
) -> list[Finding]:
    """A finding per rank that is the last to reach a collective often enough, and costly enough;
    judged on clock-corrected times when some rank's clock is off by more than CLOCK_OFFSET_NS."""
    if strag.empty:
        return []
    n = len(strag)
    max_offset = int(strag["clock_offset_ns"].abs().max())
    p = clock_basis(strag)
    waits = straggler_waits(arrivals, "corrected_rel" if p else "start_rel")
    findings = []
    for _, row in strag.iterrows():
        matched = int(row["matched"])
        times_last = int(row[f"{p}times_last"])
        share = times_last / matched if matched else 0.0
        if times_last < STRAGGLER_MIN_MATCHED or share < max(STRAGGLER_SHARE, STRAGGLER_FAIR_FACTOR / n):
            continue
        # cost: the wait it causes each other rank, spread over the steps
        cost, cost_share = _straggler_cost(int(row[f"{p}wait_caused_ns"]), windows, step_counts, whole)
        if cost_share is not None and cost_share < STRAGGLER_MIN_COST_SHARE:
            continue
        finding = _straggler_finding(row, skew, prefix=p, ranks=n, max_offset=max_offset, cost=cost,
                                     cost_share=cost_share, steps=max(step_counts.values()) if step_counts else 0)
        # the waiting is exposed communication on the other ranks: the engine clips it to that
        finding.claims = _straggler_claims(waits, int(row["rank"]))
        finding.part_of = "exposed_communication"
        findings.append(finding)
    return findings


def _imbalance_findings(
    imbalance: pd.DataFrame, windows: pd.DataFrame, whole: dict[tuple[int, int], int]
) -> list[Finding]:
    if imbalance.empty:
        return []
    per_step_rows = imbalance[imbalance["step"].notna()]
    rows = per_step_rows if len(per_step_rows) else imbalance
    mean_imb = float(rows["imbalance_ns"].mean())
    mean_compute = float(rows["mean_ns"].mean())
    if mean_compute <= 0:
        return []
    pct = 100.0 * mean_imb / mean_compute
    window = _mean_window(windows) if len(per_step_rows) else None
    if window is None:
        window = float(np.mean(list(whole.values()))) if whole else None
    cost = int(round(mean_imb))
    cost_share = cost / window if window else None
    if pct < IMBALANCE_PCT or (cost_share is not None and cost_share < IMBALANCE_MIN_COST_SHARE):
        return []
    slowest = rows["max_rank"].mode()
    slow = int(slowest.iloc[0]) if len(slowest) else None
    times_max = int((rows["max_rank"] == slow).sum()) if slow is not None else 0
    return [
        Finding(
            code="compute_imbalance",
            title=f"Compute time differs across ranks: the busiest rank computes {pct:.0f}% more than the mean "
            f"(rank {slow} is the busiest in {times_max} of {len(rows)} steps)",
            severity="medium" if pct >= IMBALANCE_PCT_MEDIUM else "low",
            analysis=NAME,
            recommendation="Balance the work per rank: equal batch sizes / sequence lengths per rank (bucketing, "
            "packing), even sharding of embedding tables or pipeline stages; the other ranks wait for the "
            "slowest at every collective.",
            cost_ns_per_step=cost,
            cost_share=cost_share,
            rank=slow,
            evidence={
                "steps": int(len(rows)),
                "mean_imbalance_ns": cost,
                "mean_compute_ns": mean_compute,
                "imbalance_pct": pct,
                "busiest_rank": slow,
                "times_busiest": times_max,
            },
        )
    ]


register_input("communication.cross_rank_inputs", _build_inputs,
               requires=("activity", "classify.codes.name", "classify.comm_rule_of"))

# ------------------------------------------------------------------------------------ report hooks

#: collectives (columns) in the report's skew heatmap (the most skewed beyond)
MAX_SKEW_COLUMNS = 200


def clock_basis(stragglers: pd.DataFrame | None) -> str:
    """The column prefix of the clock basis stragglers and skew are judged on: clock-corrected
    times (``corrected_``) when some rank's clock is off by more than CLOCK_OFFSET_NS, raw start
    times (``""``) otherwise. The one rule the straggler findings and the skew chart share."""
    if stragglers is None or stragglers.empty:
        return ""
    return "corrected_" if int(stragglers["clock_offset_ns"].abs().max()) > CLOCK_OFFSET_NS else ""


def skew_chart(inputs: ReportInputs) -> dict[str, Any] | None:
    """The skew heatmap: each rank's lateness at each collective occurrence (the most skewed
    ``MAX_SKEW_COLUMNS``), on the clock basis of :func:`clock_basis`."""
    arrivals, skew = inputs.table(NAME, "arrivals"), inputs.table(NAME, "skew")
    if arrivals is None or arrivals.empty or skew is None or skew.empty:
        return None
    prefix = clock_basis(inputs.table(NAME, "stragglers"))
    sk = skew.copy()
    sk["_step"] = sk["step"].astype("Float64").fillna(-1).astype(np.int64)
    total = int(len(sk))
    if total > MAX_SKEW_COLUMNS:
        sk = sk.sort_values(f"{prefix}skew_ns", ascending=False, kind="stable").head(MAX_SKEW_COLUMNS)
    sk = sk.sort_values("first_start_ns", kind="stable")
    ar = arrivals.copy()
    ar["_step"] = ar["step"].astype("Float64").fillna(-1).astype(np.int64)
    ranks = sorted(int(r) for r in ar["rank"].unique())
    lookup = {(str(c), str(pg), int(s), int(o), int(r)): v for c, pg, s, o, r, v in zip(
        ar["collective"], ar["process_group"], ar["_step"], ar["occurrence"], ar["rank"], ar[f"{prefix}lateness_ns"])}
    columns: list[dict[str, Any]] = []
    matrix: list[list[int | None]] = [[] for _ in ranks]
    for c, pg, s, o in zip(sk["collective"], sk["process_group"], sk["_step"], sk["occurrence"]):
        label = f"{c}" + (f" (pg {pg})" if pg else "") + (f" · step {s}" if s >= 0 else "") + f" · #{int(o)}"
        columns.append({"label": label, "collective": str(c), "process_group": str(pg),
                        "step": None if s < 0 else int(s), "occurrence": int(o)})
        for i, r in enumerate(ranks):
            v = lookup.get((str(c), str(pg), int(s), int(o), r))
            matrix[i].append(None if v is None or is_missing(v) else int(round(float(v))))
    basis = {"": "raw", "corrected_": "corrected"}[prefix]
    return {"basis": basis, "ranks": ranks, "columns": columns, "lateness_ns": matrix, "total": total}


SPEC = AnalysisSpec(
    name=NAME,
    title="Communication",
    run=analyze_rank,
    requires=("activity", "classify.comm_rule_of", "communication.cross_rank_inputs"),
    order=40,
    tables=(
        TableSpec("collectives", "Collectives per kind", cross_rank=True),
        TableSpec("summary", "Communication and overlap"),
        TableSpec("rules", "Communication by classification rule (whole trace)", sort_by="total_ns"),
        TableSpec("skew", "Cross-rank skew per collective", sort_by="skew_ns", cross_rank=True),
        TableSpec("arrivals", "Arrivals per collective and rank", sort_by="lateness_ns", cross_rank=True),
        TableSpec("stragglers", "Stragglers", cross_rank=True),
        TableSpec("alignment", "Clock alignment per rank", cross_rank=True),
        TableSpec("compute_by_rank", "Compute per rank", cross_rank=True),
        TableSpec("compute_imbalance", "Compute imbalance across ranks", cross_rank=True),
    ),
    finding_codes=("exposed_collective", "straggler_rank", "compute_imbalance"),
    finding_parents=(("exposed_collective", "exposed_communication"), ("straggler_rank", "exposed_communication")),
    finding_precedence=(("straggler_rank", 10), ("exposed_collective", 30)),
    page=("/communication", "Communication"),
    gather=cross_rank_inputs,
    reduce=reduce_ranks,
    headline_table="summary",
    charts=(("skew", skew_chart),),
)
