"""What one run leaves in the history: a :class:`RunSummary` taken from its :class:`Report` (the one
pipeline's answer; nothing here analyses a trace).

Every time series is per GPU and per step, so runs of different world sizes and step counts compare:

* ``step``, ``step_time``: the step's duration (mean over the ranks that have that step);
* ``kernel``, one per normalised name (:func:`traceview.compare.normalize_kernel_name`, as ``diff``
  matches renamed kernels): in each step, the kernels' GPU time on all GPUs divided by the number of
  GPUs (0 in a step where it did not run), from the kernels analysis's ``kernels_by_step`` table;
* ``collective``, one per collective and process group: the same from the communication analysis's
  ``collectives`` table.

Per series the summary keeps ``calls`` and ``total_ns`` (whole trace, all GPUs), ``calls_per_step``,
``per_step_ns`` (mean of the per-step samples), ``mean_ns`` (per call), ``median_ns``, ``p90_ns`` and
``spread_ns`` (the median absolute deviation) of the per-step samples. A trace without steps gives
one sample (the whole trace) per series. The raw names behind each normalised one are kept too.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd

from traceview.compare.names import normalize_kernel_name
from traceview.history.schema import LAYER_COLUMNS, LAYERS_KEPT, MEASURED_COLUMNS, MEASURED_KEPT, SERIES_COLUMNS
from traceview.trace_cache import digest_file_ends

if TYPE_CHECKING:
    from traceview.report import Report


@dataclass
class RunSummary:
    """One run's aggregates, as stored (docs/history.md)."""

    identity: str
    name: str
    gpu_model: str
    traceview_version: str
    paths: list[str]
    tags: dict[str, str]
    figures: dict[str, float | int | str | None]
    series: pd.DataFrame  # SERIES_COLUMNS
    raw_names: pd.DataFrame  # kind, key, name
    findings: pd.DataFrame = field(default_factory=pd.DataFrame)  # code, rank, severity, cost_ns_per_step, title
    efficiency: pd.DataFrame = field(default_factory=pd.DataFrame)
    layers: pd.DataFrame = field(default_factory=pd.DataFrame)  # LAYER_COLUMNS
    measured: pd.DataFrame = field(default_factory=pd.DataFrame)  # MEASURED_COLUMNS
    added_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc).replace(tzinfo=None))


def files_identity(files: Sequence[Path]) -> str:
    """The content identity of a run's trace files: per file its size and a hash of its first and
    last MiB (what the trace cache reads of a file, without its path or mtime, so a copy of the same
    traces elsewhere is the same run), over the files in a fixed order."""
    parts = []
    for path in files:
        size = os.stat(path).st_size
        digest = hashlib.sha256(str(size).encode())
        digest_file_ends(digest, path, size)
        parts.append(digest.hexdigest())
    return hashlib.sha256("|".join(sorted(parts)).encode()).hexdigest()[:32]


def _sample_stats(frame: pd.DataFrame, value: str, steps: int) -> pd.DataFrame:
    """Per ``key``: mean, median, p90 and MAD of the per-step samples in ``frame`` (columns key, step,
    ``value``), the steps a key is absent from counted as 0 (vectorised: one key x step matrix)."""
    keys = pd.Index(frame["key"].unique())
    step_ids = pd.Index(frame["step"].unique())
    width = max(steps, len(step_ids), 1)
    matrix = np.zeros((len(keys), width))
    np.add.at(matrix, (keys.get_indexer(frame["key"]), step_ids.get_indexer(frame["step"])),
              frame[value].to_numpy(dtype=np.float64))
    median = np.median(matrix, axis=1)
    return pd.DataFrame({"key": keys, "per_step_ns": matrix.mean(axis=1), "median_ns": median,
                         "p90_ns": np.percentile(matrix, 90, axis=1),
                         "spread_ns": np.median(np.abs(matrix - median[:, None]), axis=1)})


def _named_series(kind: str, whole: pd.DataFrame, by_step: pd.DataFrame, keys: pd.Series, gpus: int,
                  steps: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The series of one kind from its whole-trace rows (``whole``: name, count, total_ns) and
    per-step rows (``by_step``: name, step, count, total_ns), names mapped to ``keys``."""
    if whole.empty:
        return pd.DataFrame(columns=list(SERIES_COLUMNS)), pd.DataFrame(columns=["kind", "key", "name"])
    key_of = dict(zip(keys.index, keys))
    whole = whole.assign(key=whole["name"].map(key_of))
    totals = whole.groupby("key", sort=True).agg(calls=("count", "sum"), total_ns=("total_ns", "sum"))
    if steps and not by_step.empty:
        by_step = by_step[by_step["step"].notna()]
        rows = by_step.assign(key=by_step["name"].map(key_of)).groupby(["key", "step"], as_index=False)[
            ["count", "total_ns"]].sum()
        stats = _sample_stats(rows.assign(per_gpu=rows["total_ns"] / gpus), "per_gpu", steps).set_index("key")
        step_calls = rows.groupby("key")["count"].sum() / (gpus * steps)
    else:  # one sample: the whole trace
        per_gpu = totals["total_ns"] / gpus
        stats = pd.DataFrame({"per_step_ns": per_gpu, "median_ns": per_gpu, "p90_ns": per_gpu, "spread_ns": 0.0})
        step_calls = totals["calls"] / gpus
    out = totals.join(stats, how="left").fillna({"per_step_ns": 0.0, "median_ns": 0.0, "p90_ns": 0.0,
                                                 "spread_ns": 0.0})
    out["calls_per_step"] = step_calls.reindex(out.index).fillna(0.0)
    out["mean_ns"] = out["total_ns"] / out["calls"].where(out["calls"] > 0)
    out = out.reset_index().assign(kind=kind)
    raw = whole[["key", "name"]].drop_duplicates().assign(kind=kind)
    return out[list(SERIES_COLUMNS)], raw[["kind", "key", "name"]]


def _step_samples(report: Report) -> np.ndarray:
    """The step durations, per step the mean over the ranks that have it (start order)."""
    steps = report.table("temporal", "steps")
    if steps.empty:
        return np.zeros(0)
    dur = (steps["end_ns"] - steps["start_ns"]).astype(np.float64)
    per = steps.assign(dur=dur).groupby("step", sort=False).agg(dur=("dur", "mean"), start=("start_ns", "min"))
    return per.sort_values("start")["dur"].to_numpy()


def _step_series(samples: np.ndarray) -> pd.DataFrame:
    if not len(samples):
        return pd.DataFrame(columns=list(SERIES_COLUMNS))
    median = float(np.median(samples))
    return pd.DataFrame([{"kind": "step", "key": "step_time", "calls": len(samples), "calls_per_step": 1.0,
                          "total_ns": int(samples.sum()), "per_step_ns": float(samples.mean()),
                          "mean_ns": float(samples.mean()), "median_ns": median,
                          "p90_ns": float(np.percentile(samples, 90)),
                          "spread_ns": float(np.median(np.abs(samples - median)))}])


def _figures(report: Report, samples: np.ndarray) -> dict[str, float | int | str | None]:
    s = report.summary
    gpus = max(int(s.get("gpus") or 0), 1)
    steps = int(s.get("steps") or 0)
    per = gpus * max(steps, 1)
    step = _step_series(samples)
    out: dict[str, float | int | str | None] = {"ranks": int(s.get("num_ranks") or 0), "gpus": int(s.get("gpus") or 0),
                                          "steps": steps}
    for name, column in (("step_time_ns", "median_ns"), ("step_p90_ns", "p90_ns"), ("step_spread_ns", "spread_ns")):
        out[name] = float(step[column].iloc[0]) if len(step) else None
    for name in ("window", "busy", "idle", "compute", "communication", "exposed_comm"):
        value = s.get(f"{name}_ns")
        out[f"{name}_ns_per_step"] = None if value is None else float(value) / per
    out["utilization"] = s.get("utilization")
    # the critical path's figures, as the report summary holds them (None without GPU activity)
    for name in ("critical_path_step_ns", "achievable_step_ns", "critical_path_bound_share"):
        value = s.get(name)
        out[name] = None if value is None else float(value)
    bound = s.get("critical_path_bound_by")
    out["critical_path_bound_by"] = None if bound is None else str(bound)
    return out


def _kernel_keys(names: pd.Series) -> pd.Series:
    """Raw name -> normalised name, normalising each distinct name once."""
    unique = pd.unique(names.astype(str))
    return pd.Series([normalize_kernel_name(n) or n for n in unique], index=unique)


def _findings(report: Report) -> pd.DataFrame:
    rows = [{"code": f.get("code"), "rank": f.get("rank"), "severity": f.get("severity"),
             "cost_ns_per_step": int(f.get("cost_ns_per_step") or 0), "title": f.get("title")}
            for f in report["findings"]]
    return pd.DataFrame(rows, columns=["code", "rank", "severity", "cost_ns_per_step", "title"])


def _efficiency(report: Report) -> pd.DataFrame:
    columns = ["rank", "device", "name", "dtype", "unit", "calls", "gpu_ns", "efficiency", "achieved_tflops"]
    table = report.table("efficiency", "op_types")
    if table.empty:
        return pd.DataFrame(columns=columns)
    return table.reindex(columns=columns)


def _layers(report: Report, gpus: int, steps: int) -> pd.DataFrame:
    """The run's :data:`LAYERS_KEPT` largest module type paths over all ranks, from the modules
    analysis's ``type_paths`` (summed over ranks) and ``attribution`` (each rank's GPU busy time,
    the denominator of the share); empty without module ranges."""
    paths = report.table("modules", "type_paths")
    if paths.empty:
        return pd.DataFrame(columns=list(LAYER_COLUMNS))
    attribution = report.table("modules", "attribution")
    busy = float(attribution.groupby("rank")["busy_ns"].first().sum()) if len(attribution) else 0.0
    job = paths.assign(type_path=paths["type_path"].astype(str)).groupby("type_path", as_index=False).agg(
        depth=("depth", "first"), instances=("instances", "sum"), inclusive_ns=("inclusive_ns", "sum"))
    job = job.sort_values(["inclusive_ns", "depth", "type_path"], ascending=[False, False, True]).head(LAYERS_KEPT)
    job["per_step_ns"] = job["inclusive_ns"] / (gpus * max(steps, 1))
    job["share"] = job["inclusive_ns"] / busy if busy > 0 else np.nan
    job["position"] = np.arange(1, len(job) + 1)
    return job[list(LAYER_COLUMNS)].reset_index(drop=True)


def _measured(report: Report) -> pd.DataFrame:
    """The run's :data:`MEASURED_KEPT` measured kernels (normalised name, ncu's grid and block) with
    the most trace time over all ranks, from the measured analysis's ``kernels`` table: kernels and
    trace time summed over its rows (ranks, ncu records), the SOL figures and bound-by those of its
    row with the most trace time (every rank's rows of one ncu record carry the same figures); empty
    without ``--ncu``."""
    table = report.table("measured", "kernels")
    if table.empty:
        return pd.DataFrame(columns=list(MEASURED_COLUMNS))
    keys = _kernel_keys(table["name"])
    rows = table.assign(kernel=keys.reindex(table["name"].astype(str)).to_numpy(),
                        grid=table["grid"].astype(str), block=table["block"].astype(str))
    rows = rows.sort_values("trace_ns", ascending=False, kind="stable")
    key = ["kernel", "grid", "block"]
    job = rows.groupby(key, as_index=False, sort=False).agg(
        kernels=("kernels", "sum"), trace_ns=("trace_ns", "sum"), sm_throughput_pct=("sm_throughput_pct", "first"),
        memory_throughput_pct=("memory_throughput_pct", "first"), bound_by=("bound_by", "first"))
    job = job.sort_values(["trace_ns", "kernel"], ascending=[False, True], kind="stable").head(MEASURED_KEPT)
    job["position"] = np.arange(1, len(job) + 1)
    return job[list(MEASURED_COLUMNS)].reset_index(drop=True)


def summarize(report: Report, *, identity: str, name: str, paths: Sequence[str],
              tags: dict[str, str]) -> RunSummary:
    """The history's summary of ``report`` (see the module docstring)."""
    import traceview

    s = report.summary
    gpus = max(int(s.get("gpus") or 0), 1)
    samples = _step_samples(report)
    steps = len(samples)
    kernels = report.table("kernels", "kernels")
    by_step = report.table("kernels", "kernels_by_step")
    parts = [_step_series(samples)]
    raws = []
    if not kernels.empty:
        k_series, k_raw = _named_series("kernel", kernels, by_step, _kernel_keys(kernels["name"]), gpus, steps)
        parts.append(k_series)
        raws.append(k_raw)
    coll = report.table("communication", "collectives")
    if not coll.empty:
        group = coll["process_group"].astype(str)
        named = coll["process_group"].notna() & (group != "")
        names = coll["collective"].astype(str) + np.where(named, " [" + group + "]", "")
        coll = coll.assign(name=names)
        # the table has per-step rows and, when the trace has steps, whole-trace rows (step null)
        whole_rows = coll[coll["step"].isna()] if coll["step"].isna().any() else coll
        whole = whole_rows.groupby("name", as_index=False)[["count", "total_ns"]].sum()
        c_series, c_raw = _named_series("collective", whole, coll[coll["step"].notna()],
                                        pd.Series(whole["name"].to_numpy(), index=whole["name"].to_numpy()),
                                        gpus, steps)
        parts.append(c_series)
        raws.append(c_raw)
    series = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) \
        else pd.DataFrame(columns=list(SERIES_COLUMNS))
    raw = pd.concat(raws, ignore_index=True) if raws else pd.DataFrame(columns=["kind", "key", "name"])
    models = [str(m) for m in s.get("gpu_models") or []]
    return RunSummary(identity=identity, name=name, gpu_model=", ".join(sorted(set(models))),
                      traceview_version=str(traceview.__version__), paths=[str(p) for p in paths], tags=dict(tags),
                      figures=_figures(report, samples), series=series, raw_names=raw, findings=_findings(report),
                      efficiency=_efficiency(report), layers=_layers(report, gpus, steps),
                      measured=_measured(report))


def as_records(value: Any) -> Any:
    """A frame's rows as plain Python values (for JSON)."""
    return value.astype(object).where(value.notna(), None).to_dict("records")
