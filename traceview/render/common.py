"""What every renderer says the same way: cell formatting, column labels with their units, where a
finding applies and what it costs, the job in one line, the headline, the warnings worth showing, the
top kernels. Everything here reads the report; nothing recomputes a figure or re-ranks a finding."""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from traceview.pipeline import compact_ranks
from traceview.units import fmt_bytes, fmt_ns, fmt_pct, fmt_share, is_missing

#: columns the renderers leave out of tables (event row ids, absolute timestamps: they only mean
#: something next to the trace; the JSON report keeps them)
HIDDEN_COLUMNS = frozenset({
    "row", "api_row", "gpu_row", "next_row", "cpu_op_row", "start_ns", "end_ns", "first_start_ns",
    "last_end_ns", "api_start_ns", "gpu_start_ns",
})
#: how the report's warnings about unmapped event categories begin (``traceview.report``): they are
#: collapsed into one line, shown only when the events are many
#: unmapped events matter (shown on the first screen and in the summaries) from this many ...
UNMAPPED_MIN_EVENTS = 1000
#: ... or this share of all events
UNMAPPED_MIN_SHARE = 0.01


def visible_columns(columns: list[str]) -> list[str]:
    return [c for c in columns if c not in HIDDEN_COLUMNS]


#: headers that the suffix rule would make ambiguous (``step_ns`` beside ``step``, the step number)
COLUMN_LABELS = {"step_ns": "step time"}


def column_label(col: str, per_step: bool = True) -> str:
    """A column's header as people read it; the unit the cells are formatted in is in the cells
    (``total_ns`` -> ``total``, whose cells read ``1.23 ms``), so no header names a unit its cells
    do not use. ``per_step`` False (a report without steps): ``cost_ns_per_step`` -> ``cost, whole
    trace``, as its figures are."""
    if col in COLUMN_LABELS:
        return COLUMN_LABELS[col]
    label = col
    per = (("_ns_per_step", " / step"),) if per_step else (("_ns_per_step", ", whole trace"),
                                                              ("_per_step", ", whole trace"))
    for suffix, replacement in (*per, ("_ns", ""), ("_bytes", ""), ("_pct", " %")):
        if label.endswith(suffix) and label != suffix.lstrip("_"):
            label = label[: -len(suffix)] + replacement
            break
    return label.replace("_", " ")


def format_cell(col: str, value: Any) -> str:
    """A table cell as text: times from ns, percentages, shares, sizes; ``-`` for missing."""
    if is_missing(value):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    if col.endswith("_ns") or col.endswith("_ns_per_step"):
        return fmt_ns(value)
    if col.endswith("_pct"):
        return fmt_pct(value)
    if col.endswith("_bytes") or col == "bytes":
        return fmt_bytes(value)
    if col in ("share", "cost_share") or col.endswith("_share") or col.endswith("utilization"):
        return fmt_share(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)


# ------------------------------------------------------------------------------------ findings


def finding_where(f: Mapping[str, Any]) -> str:
    """``rank 3``, ``ranks 0-7`` (a finding merged across ranks), ``step 2``, or ``all``."""
    where = []
    if f.get("rank") is not None:
        where.append(f"rank {f['rank']}")
    else:
        per_rank = (f.get("evidence") or {}).get("per_rank")
        if isinstance(per_rank, list):
            ranks = [p["rank"] for p in per_rank if isinstance(p, dict) and p.get("rank") is not None]
            if ranks:
                where.append(("ranks " if len(set(ranks)) > 1 else "rank ") + compact_ranks(ranks))
    if f.get("step") is not None:
        where.append(f"step {f['step']}")
    return ", ".join(where) or "all"


def per_step_basis(report: Mapping[str, Any]) -> bool:
    """True when the report's costs are per step; False when they are for the whole trace (no steps)."""
    denom = (report.get("findings_summary") or {}).get("denominator") or {}
    if denom.get("basis"):
        return bool(denom["basis"] == "step")
    return bool((report.get("summary") or {}).get("steps"))


def cost_heading(report: Mapping[str, Any]) -> str:
    """The heading of the findings' cost column: what the cost is per, and what the share is of."""
    if per_step_basis(report):
        return "cost/step (share of step)"
    return "cost, whole trace (share of trace)"


def per_step_text(report: Mapping[str, Any]) -> str:
    """``per step`` or, without steps, ``whole trace``."""
    return "per step" if per_step_basis(report) else "whole trace"


def nested_note(f: Mapping[str, Any]) -> str:
    """Why a nested finding's cost is not added again: it is part of its parent's time."""
    parent = f.get("part_of_id") or f.get("parent")
    return f"part of {parent}: its time is included there" if parent else ""


def finding_cost(f: Mapping[str, Any]) -> str:
    """Cost per step and its share of the step: ``7.68 ms (54.5%)``; ``-`` when it has none."""
    cost = fmt_ns(f["cost_ns_per_step"]) if f.get("cost_ns_per_step") else "-"
    if f.get("cost_share") is not None:
        cost += f" ({fmt_share(f['cost_share'])})"
    return cost


def top_level(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The report's top-level findings, in the report's order."""
    return [f for f in report.get("findings", []) if f.get("parent") is None]


def finding_groups(report: Mapping[str, Any]) -> list[list[dict[str, Any]]]:
    """The report's findings in its order, grouped: each top-level finding with the findings nested
    under it (a cut of the list keeps every group whole)."""
    groups: list[list[dict[str, Any]]] = []
    for f in report.get("findings", []):
        if f.get("parent") is None or not groups:
            groups.append([f])
        else:
            groups[-1].append(f)
    return groups


def findings_count_text(report: Mapping[str, Any]) -> str:
    """``5 (3 high, 1 low, 1 info), plus 5 nested under them`` from ``findings_summary``."""
    fs = report.get("findings_summary") or {}
    sev = fs.get("by_severity") or {}
    text = f"{fs.get('top_level', 0)}"
    if any(sev.values()):
        text += " (" + ", ".join(f"{n} {k}" for k, n in sev.items() if n) + ")"
    if fs.get("nested"):
        text += f", plus {fs['nested']} nested under them"
    return text


# ------------------------------------------------------------------------------------ the job


def rank_text(report: Mapping[str, Any]) -> str:
    s = report["summary"]
    ranks = list(s.get("ranks") or [])
    world = s.get("world_size")
    text = f"{len(ranks)} rank{'s' if len(ranks) != 1 else ''}" + (f" of world size {world}" if world else "")
    if len(ranks) > 1:
        text += f" ({compact_ranks(ranks)})"
    return text


def gpu_text(report: Mapping[str, Any], *, specs: bool = True) -> str:
    gpus = (report.get("environment") or {}).get("gpus") or []
    parts = []
    for g in gpus:
        text = f"{g['count']} × {g.get('model') or 'unnamed GPU'}"
        if specs and g.get("sm_count") and g.get("memory_bytes"):
            text += f" ({g['sm_count']} SMs, {fmt_bytes(g['memory_bytes'])})"
        parts.append(text)
    return ", ".join(parts) or "no GPU activity"


def source_text(report: Mapping[str, Any]) -> str:
    """The inputs' formats: ``kineto, 8 files``."""
    inputs = report.get("inputs") or []
    formats = sorted({str(i.get("format")) for i in inputs if i.get("format")})
    files = len({i["file"] for i in inputs})
    return f"{', '.join(formats) or 'unknown format'}, {files} file{'s' if files != 1 else ''}"


def steps_text(report: Mapping[str, Any]) -> str:
    steps = report["summary"].get("steps") or 0
    return f"{steps} step{'s' if steps != 1 else ''} per rank" if steps else "no steps found"


def job_line(report: Mapping[str, Any]) -> str:
    """The job in one line: ranks, GPUs and model, steps, source format."""
    return " · ".join((rank_text(report), gpu_text(report, specs=False), steps_text(report), source_text(report)))


def time_shares(report: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Where the GPU window goes: (label, share) for compute, exposed communication, memory alone and
    idle (they add up to 1)."""
    s = report["summary"]
    return [("compute", s.get("compute_share")), ("exposed communication", s.get("exposed_comm_share")),
            ("memory alone", s.get("memory_only_share")), ("idle", s.get("idle_share"))]


def shares_text(report: Mapping[str, Any]) -> str:
    return " · ".join(f"{label} {fmt_share(share)}" for label, share in time_shares(report))


def headline_rows(report: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(label, value, trust note) rows of the report's headline, for the summary tables."""
    s = report["summary"]
    notes = s.get("notes") or {}
    steps = s.get("steps") or 0
    # dropped activity touches every GPU figure: said beside each of them, briefly after the first
    dropped = notes.get("dropped_activity", "")
    brief = "leaves out dropped events: see the note on GPU utilization" if dropped else ""
    rows = [
        ("GPUs", gpu_text(report), ""),
        ("ranks", rank_text(report), ""),
        ("steps", f"{steps} per rank" if steps else "none found", ""),
        ("step time", f"median {fmt_ns(s.get('median_step_time_ns'))}, p90 {fmt_ns(s.get('p90_step_time_ns'))}"
         if s.get("median_step_time_ns") is not None else "no steps: figures are for the whole trace",
         notes.get("median_step_time_ns", "")),
    ]
    if s.get("window_ns"):
        gpus = s.get("gpus") or 0
        rows.append(("GPU utilization", f"{fmt_share(s.get('utilization'))} (busy {fmt_ns(s['busy_ns'])} of "
                     f"{fmt_ns(s['window_ns'])}, summed over {gpus} GPU{'s' if gpus != 1 else ''})",
                     "; ".join(n for n in (notes.get("utilization", ""), dropped) if n)))
        rows.append(("where GPU time goes", shares_text(report),
                     "; ".join(n for n in (notes.get("exposed_comm_ns", ""), brief) if n)))
        per = "per step and GPU" if per_step_basis(report) else "per GPU, whole trace"
        rows.append(("GPU idle", f"{fmt_ns(s.get('idle_ns_per_step'))} {per}", brief))
        rows.append(("exposed communication", f"{fmt_ns(s.get('exposed_comm_ns_per_step'))} {per}", brief))
    else:
        rows.append(("GPU utilization", "-", "; ".join(n for n in (notes.get("utilization", ""), dropped) if n)))
    path = critical_path_text(report)
    if path:
        rows.append(("critical path", path, notes.get("critical_path_step_ns", "")))
    layers = layers_text(report)
    if layers:
        rows.append(("by layer", layers, ""))
    rolled = efficiency_text(report)
    if rolled:
        # not a trust note: the note column is for figures that cannot be trusted as they stand
        rows.append(("efficiency (per GPU, modelled ops)", rolled, ""))
    rows.append(("findings", findings_count_text(report), ""))
    return rows


#: how the headline names what bounds the step (the summary's ``critical_path_bound_by``)
BOUND_TEXT = {"host": "host thread", "gpu": "GPU work", "communication": "communication"}


def short_path(path: str, keep: int = 2, width: int = 60) -> str:
    """A range path as a headline shows it: its last ``keep`` parts (``…/Qwen2DecoderLayer/Qwen2Attention``),
    each part cut to ``width`` characters; the tables have the whole path."""
    parts = [p if len(p) <= width else p[: width - 1] + "…" for p in path.split("/")]
    return "/".join(parts) if len(parts) <= keep else "…/" + "/".join(parts[-keep:])


def layers_text(report: Mapping[str, Any]) -> str:
    """Where the GPU time goes by layer in one line ("Qwen2Model/Qwen2DecoderLayer/Qwen2Attention 34% ·
    ..."), from the summary's ``top_layers``; empty when the report has none."""
    s = report["summary"]
    layers = s.get("top_layers") or []
    if not layers:
        return ""
    text = " · ".join(f"{short_path(str(layer['type_path']))} {fmt_share(layer.get('share'))}" for layer in layers)
    attributed = s.get("attributed_share")
    text += (f" (of the GPU busy time; {fmt_share(attributed)} attributed to a layer or range)"
             if attributed is not None else "")
    return text + replay_text(s)


def replay_text(summary: Mapping[str, Any]) -> str:
    """How much of the graph-replayed GPU time a capture gave ops and ranges ("; graph replays 85%
    of it: 100% matched to the capture's nodes"), empty without graph replays."""
    replayed, matched = summary.get("graph_replay_share"), summary.get("graph_replay_matched_share")
    if not replayed:
        return ""
    if not matched:
        return (f"; graph replays {fmt_share(replayed)} of it: not attributed to ops inside the graphs "
                "(--graph-capture CAPTURE_TRACE gives them)")
    return f"; graph replays {fmt_share(replayed)} of it: {fmt_share(matched)} matched to the capture's nodes"


#: the headline names at most this many model families (largest GPU time first)
HEADLINE_FAMILIES = 3


def _flop_text(flops: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops / 1e6:.3g} MFLOP"


def efficiency_text(report: Mapping[str, Any], top: int = HEADLINE_FAMILIES) -> str:
    """The efficiency roll-up in one line ("GEMM fp32 2.1 TFLOP at 9.8 TFLOP/s = 62% of peak ·
    elementwise fp32 at 410 GB/s = 46% of memory bandwidth"), from the summary's
    ``efficiency_families`` (rates per GPU, amounts over the job); empty when the report has none."""
    rows = (report["summary"].get("efficiency_families") or [])[:top]
    parts = []
    for r in rows:
        name = f"{r['family']} {r['dtype']}".strip()  # XLA's recorded cost has no dtype
        if r.get("judged_by") == "none":
            parts.append(f"{name} at {r.get('achieved_gbs') or 0:.4g} GB/s (integer op: not judged)")
            continue
        by_peak = r.get("judged_by") == "peak"
        share = r.get("peak_share") if by_peak else r.get("bandwidth_share")
        of = "of peak" if by_peak else "of memory bandwidth"
        if by_peak:
            text = f"{name} {_flop_text(float(r.get('flops') or 0))} at {r.get('achieved_tflops') or 0:.3g} TFLOP/s"
        else:
            text = f"{name} at {r.get('achieved_gbs') or 0:.4g} GB/s"
        parts.append(f"{text} = {fmt_share(share)} {of}" if share is not None else f"{text} (no verified roof)")
    return " · ".join(parts)


def critical_path_text(report: Mapping[str, Any]) -> str:
    """The critical path in one line ("step 112 ms, bound by host thread 41%; achievable ~71 ms"),
    from the summary's figures; empty when the report has none."""
    s = report["summary"]
    if s.get("critical_path_step_ns") is None or s.get("critical_path_bound_by") is None:
        return ""
    what = "step" if s.get("median_step_time_ns") is not None else "whole trace"
    bound = BOUND_TEXT.get(str(s["critical_path_bound_by"]), str(s["critical_path_bound_by"]))
    text = (f"{what} {fmt_ns(s['critical_path_step_ns'])}, bound by {bound} "
            f"{fmt_share(s.get('critical_path_bound_share'))}")
    if s.get("achievable_step_ns") is not None:
        text += f"; achievable ~{fmt_ns(s['achievable_step_ns'])}"
    return text


# ------------------------------------------------------------------------------------ warnings


def is_unmapped_warning(w: Mapping[str, Any]) -> bool:
    return w.get("kind") == "unmapped"


_RANK_PLACE = re.compile(r"\b(rank|GPU) \d+")


def grouped_warnings(messages: list[str]) -> list[str]:
    """Warnings that say the same of several ranks once: messages equal but for their ``rank N`` /
    ``GPU N`` are shown as the first of them with ``(and the same on ranks 1-7)``; order kept."""
    groups: dict[str, list[str]] = {}
    for message in messages:
        groups.setdefault(_RANK_PLACE.sub(r"\1 N", message), []).append(message)
    out = []
    for same in groups.values():
        ranks = sorted({int(m) for text in same[1:] for m in re.findall(r"\brank (\d+)", text)})
        more = f" (and the same on rank{'s' if len(ranks) > 1 else ''} {compact_ranks(ranks)})" if ranks else ""
        out.append(same[0] + more if len(same) > 1 else same[0])
    return out


def input_warnings(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Trust warnings about the inputs (kind ``input``: scope ``trace`` or ``rank N``), without the
    per-rank lists of unmapped categories (see :func:`unmapped_line`)."""
    return [w for w in report.get("warnings", []) if w.get("kind") == "input"]


def unmapped_counts(report: Mapping[str, Any]) -> dict[str, int]:
    """Events of unmapped categories over all ranks, by category, most first."""
    counts: dict[str, int] = {}
    for r in report.get("ranks", []):
        for category, n in (r.get("unmapped") or {}).items():
            counts[category] = counts.get(category, 0) + int(n)
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def unmapped_line(report: Mapping[str, Any], *, always: bool = False) -> str | None:
    """One line about events of categories traceview does not map, when they are many (or
    ``always`` when there are any); None otherwise."""
    counts = unmapped_counts(report)
    total = sum(counts.values())
    events = int(report["summary"].get("events") or 0)
    share = total / events if events else 0.0
    if not total or not (always or total >= UNMAPPED_MIN_EVENTS or share >= UNMAPPED_MIN_SHARE):
        return None
    cats = ", ".join(f"{k} {v:,}" for k, v in list(counts.items())[:6])
    more = f" and {len(counts) - 6} more" if len(counts) > 6 else ""
    return (f"{total:,} events ({fmt_share(share)}) of categories traceview does not map are in no figure: "
            f"{cats}{more}")


# ------------------------------------------------------------------------------------ tables


def display_rows(table: Mapping[str, Any], steps: int) -> tuple[list[str], list[dict[str, Any]]]:
    """A report table's visible columns and its rows as shown: with one step per rank, the per-step
    rows repeat the whole-trace rows (``step`` empty), so only the latter are shown; a ``step``
    column left all empty is dropped."""
    columns = visible_columns(list(table["columns"]))
    rows = list(table["rows"])
    if "step" in columns and steps <= 1:
        whole = [r for r in rows if r.get("step") is None]
        if whole:
            rows = whole
    if "step" in columns and rows and all(r.get("step") is None for r in rows):
        columns.remove("step")
    return columns, rows


def top_kernels(report: Mapping[str, Any], n: int) -> list[dict[str, Any]]:
    """The ``n`` kernels with the largest total time over the whole job (all ranks and GPUs): the
    first rows of the report's ``job_kernels`` table (largest total first)."""
    table = ((report.get("analyses") or {}).get("kernels") or {}).get("tables", {}).get("job_kernels")
    if not table:
        return []
    return list(table["rows"][:n])
