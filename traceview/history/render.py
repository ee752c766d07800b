"""``history show`` and ``history check`` as text tables, Markdown (GitHub tables, for CI comments
and job summaries) and JSON (keys in a fixed order)."""

from __future__ import annotations

import json
import math
import warnings
from typing import Any, Sequence

import numpy as np

from traceview.history.query import CheckResult, ShowResult
from traceview.units import fmt_ns, fmt_pct

#: output formats of show and check
SHOW_FORMATS = ("table", "markdown", "json")
CHECK_FORMATS = ("table", "markdown", "json")
#: longest name shown in a table cell (JSON has them whole)
NAME_WIDTH = 60


def _short(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def _text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _num(x: Any) -> Any:
    """A JSON number (None for NaN / missing; ints where whole)."""
    if x is None:
        return None
    if isinstance(x, (np.integer, int)):
        return int(x)
    try:
        value = float(x)
    except TypeError:  # pandas' NA: a nullable integer column's missing value (a run stored without it)
        return None
    if math.isnan(value):
        return None
    if math.isinf(value):
        return None
    return round(value, 3)


def _tags(text: Any) -> str:
    tags = json.loads(text or "{}")
    return " ".join(f"{k}={v}" for k, v in tags.items())


def _bound(r: Any) -> str:
    """``host 41%``: what bounds the run's steps (the critical path), "-" when the run has no path
    (no GPU activity, or stored before version 3 of the history)."""
    bound = getattr(r, "critical_path_bound_by", None)
    if not isinstance(bound, str) or not bound:
        return "-"
    share = _num(getattr(r, "critical_path_bound_share", None))
    return bound if share is None else f"{bound} {fmt_pct(100 * share, 0)}"


def _run_rows(runs: Any) -> list[list[str]]:
    return [[str(r.run_id), _short(str(r.name), 30), str(r.added_at)[:19], str(r.gpu_model or "-"),
             _tags(r.tags), str(r.steps), fmt_ns(r.step_time_ns), _bound(r), fmt_ns(r.achievable_step_ns)]
            for r in runs.itertuples()]


RUN_HEADER = ("run", "name", "added (UTC)", "GPU", "tags", "steps", "step time", "bound by", "achievable")


def _runs_json(runs: Any) -> list[dict[str, Any]]:
    return [{"run_id": int(r.run_id), "name": str(r.name), "added_at": str(r.added_at), "gpu_model": r.gpu_model,
             "tags": json.loads(r.tags or "{}"), "paths": json.loads(r.paths or "[]"),
             "traceview_version": r.traceview_version, "steps": _num(r.steps), "gpus": _num(r.gpus),
             "step_time_ns": _num(r.step_time_ns), "idle_ns_per_step": _num(r.idle_ns_per_step),
             "utilization": _num(r.utilization), "critical_path_step_ns": _num(r.critical_path_step_ns),
             "achievable_step_ns": _num(r.achievable_step_ns),
             "critical_path_bound_by": r.critical_path_bound_by if isinstance(r.critical_path_bound_by, str) else None,
             "critical_path_bound_share": _num(r.critical_path_bound_share)} for r in runs.itertuples()]


def _trend_pct(values: np.ndarray) -> np.ndarray:
    """The newest value against the median of the runs before it, in percent (NaN when no base)."""
    if values.shape[1] < 2:
        return np.full(values.shape[0], np.nan)
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a series absent before the newest run
        base = np.nanmedian(values[:, :-1], axis=1)
        return np.where(base > 0, 100.0 * (values[:, -1] - base) / base, np.nan)


def _layers_json(result: ShowResult) -> list[dict[str, Any]]:
    assert result.layers is not None and result.layer_values is not None and result.layer_shares is not None
    trend = _trend_pct(result.layer_values)
    return [{"type_path": str(p), "depth": _num(d), "values_ns": [_num(v) for v in values],
             "shares": [_num(x) for x in shares], "trend_pct": _num(t)}
            for p, d, values, shares, t in zip(result.layers["type_path"], result.layers["depth"],
                                               result.layer_values, result.layer_shares, trend)]


def _layers_section(result: ShowResult, fmt: str, run_ids: list[str]) -> list[str]:
    """``--layers``: per type path its time per GPU and step in each run (and its share of the GPU
    busy time in the newest run), the newest against the runs before."""
    if result.layers is None or result.layers.empty:
        return []
    assert result.layer_values is not None and result.layer_shares is not None
    trend = _trend_pct(result.layer_values)
    header = ["layer (type path)", *(f"run {r}" for r in run_ids), "share (newest)", "newest vs before"]
    rows = [[_short(str(p)), *(fmt_ns(v) for v in values), "-" if np.isnan(shares[-1]) else
             fmt_pct(100 * shares[-1], 1), "-" if np.isnan(t) else f"{t:+.1f}%"]
            for p, values, shares, t in zip(result.layers["type_path"], result.layer_values, result.layer_shares,
                                            trend)]
    title = "## " if fmt == "markdown" else ""
    table = _md_table if fmt == "markdown" else _text_table
    return [f"\n{title}Time by layer per GPU and step (inclusive GPU time of each module type path)\n\n",
            table(header, rows)]


def _points_trend(values: np.ndarray) -> np.ndarray:
    """Per row, the newest run's value minus the median of the runs before it (percentage points)."""
    if values.shape[1] < 2:
        return np.full(values.shape[0], np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a kernel measured in the newest run only
        return values[:, -1] - np.nanmedian(values[:, :-1], axis=1)


def _measured_json(result: ShowResult) -> list[dict[str, Any]]:
    assert result.measured is not None and result.sol_compute is not None and result.sol_memory is not None
    assert result.bound_by is not None
    compute_trend, memory_trend = _points_trend(result.sol_compute), _points_trend(result.sol_memory)
    return [{"kernel": str(k), "grid": str(g), "block": str(b), "sol_compute_pct": [_num(v) for v in c],
             "sol_memory_pct": [_num(v) for v in m], "bound_by": [str(x) or None for x in bound],
             "compute_trend_pt": _num(ct), "memory_trend_pt": _num(mt)}
            for k, g, b, c, m, bound, ct, mt in zip(result.measured["kernel"], result.measured["grid"],
                                                   result.measured["block"], result.sol_compute, result.sol_memory,
                                                   result.bound_by, compute_trend, memory_trend)]


def _sol_cell(compute: float, memory: float, bound: str) -> str:
    if np.isnan(compute) and np.isnan(memory):
        return "-"
    text = "/".join("-" if np.isnan(v) else f"{v:.1f}" for v in (compute, memory))
    return text + (f" {bound}" if bound else "")


def _points(x: float) -> str:
    return "-" if np.isnan(x) else f"{x:+.1f} pt"


def _measured_section(result: ShowResult, fmt: str, run_ids: list[str]) -> list[str]:
    """``--measured``: per measured kernel its SOL compute / memory % of peak (and bound-by) in each
    run, the newest against the median of the runs before it in percentage points."""
    if result.measured is None or result.measured.empty:
        return []
    assert result.sol_compute is not None and result.sol_memory is not None and result.bound_by is not None
    compute_trend, memory_trend = _points_trend(result.sol_compute), _points_trend(result.sol_memory)
    header = ["kernel", "grid x block", *(f"run {r}" for r in run_ids), "compute vs before", "memory vs before"]
    rows = [[_short(str(k)), f"{g} x {b}", *(_sol_cell(c, m, str(x)) for c, m, x in zip(cs, ms, bound)),
             _points(ct), _points(mt)]
            for k, g, b, cs, ms, bound, ct, mt in zip(result.measured["kernel"], result.measured["grid"],
                                                     result.measured["block"], result.sol_compute, result.sol_memory,
                                                     result.bound_by, compute_trend, memory_trend)]
    title = "## " if fmt == "markdown" else ""
    table = _md_table if fmt == "markdown" else _text_table
    return [f"\n{title}Measured speed of light per kernel (Nsight Compute: SOL compute / memory, % of peak)\n\n",
            table(header, rows)]


def render_show(result: ShowResult, fmt: str) -> str:
    """The runs and the trends of ``history show`` in ``fmt`` (table, markdown, json)."""
    trend = _trend_pct(result.values)
    run_ids = [str(r) for r in result.runs["run_id"]]
    if fmt == "json":
        data: dict[str, Any] = {
            "runs": _runs_json(result.runs),
            "series": [{"kind": k, "name": n, "values_ns": [_num(v) for v in row], "trend_pct": _num(t)}
                       for k, n, row, t in zip(result.series["kind"], result.series["key"], result.values, trend)]}
        if result.layers is not None:
            data["layers"] = _layers_json(result)
        if result.measured is not None:
            data["measured"] = _measured_json(result)
        return json.dumps({**data, "notes": result.notes}, indent=1) + "\n"
    header = ["kind", "name", *(f"run {r}" for r in run_ids), "newest vs before"]
    rows = [[str(k), _short(str(n)), *(fmt_ns(v) for v in row), "-" if np.isnan(t) else f"{t:+.1f}%"]
            for k, n, row, t in zip(result.series["kind"], result.series["key"], result.values, trend)]
    table = _md_table if fmt == "markdown" else _text_table
    title = "## " if fmt == "markdown" else ""
    parts = [f"{title}Runs ({len(run_ids)})\n\n", table(RUN_HEADER, _run_rows(result.runs)),
             f"\n{title}Time per GPU and step\n\n", table(header, rows)]
    parts += _layers_section(result, fmt, run_ids)
    parts += _measured_section(result, fmt, run_ids)
    parts += [f"\nnote: {n}\n" for n in result.notes]
    return "".join(parts)


def _regression_rows(frame: Any) -> list[list[str]]:
    return [[str(r.kind), _short(str(r.key)), str(r.status), f"{r.start_run} ({_short(str(r.start_name), 24)})",
             fmt_ns(r.baseline_ns), fmt_ns(r.current_ns), "new" if math.isinf(r.delta_pct) else fmt_pct(r.delta_pct, 1),
             fmt_ns(r.threshold_ns), str(r.runs_since)] for r in frame.itertuples()]


REGRESSION_HEADER = ("kind", "name", "status", "since run", "baseline", "now", "change", "threshold", "runs since")


def _verdict(result: CheckResult) -> str:
    n = len(result.regressions)
    scope = f"{len(result.runs)} run(s)" + (f" on {result.gpu_model}" if result.gpu_model else "")
    if n:
        return f"REGRESSED: {n} of {result.series_judged} series slower beyond noise and the threshold ({scope})"
    return f"OK: none of {result.series_judged} series slower beyond noise and the threshold ({scope})"


def render_check(result: CheckResult, fmt: str) -> str:
    """The verdict of ``history check`` in ``fmt`` (table, markdown, json)."""
    o = result.options
    if fmt == "json":
        return json.dumps({
            "verdict": "regressed" if result.regressed else "ok", "mode": result.mode, "gpu_model": result.gpu_model,
            "options": {"max_regression": o.max_regression, "noise_k": o.k, "min_delta_ns": o.min_delta_ns,
                        "window": o.window, "baseline": o.baseline, "min_baseline": o.min_baseline},
            "runs": [int(r) for r in result.runs["run_id"]], "series_judged": result.series_judged,
            "regressions": [{"kind": r.kind, "name": r.key, "status": r.status, "start_run": int(r.start_run),
                             "start_name": r.start_name, "baseline_ns": _num(r.baseline_ns),
                             "current_ns": _num(r.current_ns), "delta_ns": _num(r.delta_ns),
                             "delta_pct": _num(r.delta_pct), "threshold_ns": _num(r.threshold_ns),
                             "sigma_ns": _num(r.sigma_ns), "baseline_runs": int(r.baseline_runs),
                             "runs_since": int(r.runs_since), "raw_names": list(r.raw_names)}
                            for r in result.regressions.itertuples()],
            "notes": result.notes}, indent=1) + "\n"
    rule = (f"rule: median of the runs since the change vs the median of up to {o.baseline} runs before, "
            f"slower by more than max({o.max_regression:.0%}, {_k_text(o.k)} x the noise (MAD), "
            f"{fmt_ns(o.min_delta_ns)})")
    parts = [("## " if fmt == "markdown" else "") + _verdict(result) + "\n\n", rule + "\n\n"]
    if result.regressed:
        table = _md_table if fmt == "markdown" else _text_table
        parts.append(table(REGRESSION_HEADER, _regression_rows(result.regressions)))
    parts += [f"\nnote: {n}\n" for n in result.notes]
    return "".join(parts)


def _k_text(k: float | None) -> str:
    """The k of the rule: as the test applied it, or "k" when nothing was judged (k not chosen)."""
    return "k" if k is None else f"{k:.3g}"
