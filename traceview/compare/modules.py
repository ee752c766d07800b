"""Layers in a diff: per rank, each module type path's inclusive GPU time per step, before and after.

Everything is read from the ``modules`` analysis's tables (docs/metrics.md, "Modules and ranges"),
never recomputed:

* ``type_paths`` (per rank and type path: ``depth``, ``inclusive_ns`` summed over its instances,
  ``share`` of the rank's GPU busy time) says which type paths a rank has and, for a rank without
  steps, is its one sample;
* ``type_path_steps`` (per rank, step and type path: ``inclusive_ns``, the union of the GPU time
  attributed at or below its instances in that step, activity in a step by its launch) gives the
  per-step samples of a rank with steps (temporal ``steps``, in start order). A type path with no
  time in a step counts 0 there; activity outside every step is not in the samples, as for every
  per-step figure.

Each type path is judged by the diff's noise rule (:func:`traceview.compare.noise.compare`: more
time is worse). A type path in one report only is ``appeared`` or ``vanished`` (significant when
its time per step exceeds the noise rule's absolute floor). When only one report has module ranges
nothing is compared (a note says so): a model traced without ``with_modules`` is not a change of
every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceview.compare.noise import Change, DiffOptions, compare
from traceview.report import Report
from traceview.secrets import scrub_text

#: the analysis the layers come from
ANALYSIS = "modules"


@dataclass
class LayerSamples:
    """One rank's type path in one report: its depth, whole-trace share and per-step samples."""

    depth: int
    share: float | None
    samples: list[float]


@dataclass
class LayerDelta:
    """One type path of one rank in both reports (None / empty where a report does not have it)."""

    rank: int
    type_path: str
    depth: int
    base_share: float | None
    new_share: float | None
    change: Change

    @property
    def match(self) -> str:
        """``both``, ``appeared`` (only in the new report) or ``vanished`` (only in the base)."""
        return self.change.status if self.change.status in ("appeared", "vanished") else "both"


def has_layers(report: Report) -> bool:
    """Whether the report has module ranges with GPU time (a ``type_paths`` table with rows)."""
    return not report.table(ANALYSIS, "type_paths").empty


def _rank_samples(paths: pd.DataFrame, per_step: pd.DataFrame, steps: pd.DataFrame) -> dict[str, LayerSamples]:
    """type path -> its samples on one rank (``paths``: its type_paths rows; ``per_step``: its
    type_path_steps rows; ``steps``: its temporal steps, empty when it has none)."""
    names = [str(p) for p in paths["type_path"]]
    depths = [int(d) for d in paths["depth"]]
    shares = [None if pd.isna(s) else float(s) for s in paths["share"]]
    if steps.empty:
        values = paths["inclusive_ns"].to_numpy(dtype=np.float64)
        return {n: LayerSamples(d, s, [float(v)]) for n, d, s, v in zip(names, depths, shares, values)}
    matrix = np.zeros((len(names), len(steps)))
    if len(per_step):
        order = pd.Index(steps.sort_values("start_ns", kind="stable")["step"].astype("int64"))
        numbers = pd.to_numeric(per_step["step"], errors="coerce")
        step_pos = order.get_indexer(numbers.fillna(-1).astype("int64"))
        step_pos[numbers.isna().to_numpy()] = -1  # the whole-trace rows, if any
        path_pos = pd.Index(names).get_indexer(per_step["type_path"].astype(str))
        ok = (step_pos >= 0) & (path_pos >= 0)
        np.add.at(matrix, (path_pos[ok], step_pos[ok]), per_step["inclusive_ns"].to_numpy(dtype=np.float64)[ok])
    return {n: LayerSamples(d, s, [float(x) for x in matrix[i]])
            for i, (n, d, s) in enumerate(zip(names, depths, shares))}


def layer_samples(report: Report) -> dict[int, dict[str, LayerSamples]]:
    """rank -> type path -> its samples (see the module docstring); empty without module ranges."""
    paths = report.table(ANALYSIS, "type_paths")
    if paths.empty:
        return {}
    ranges = report.table(ANALYSIS, "type_path_steps")
    steps = report.table("temporal", "steps")
    range_groups = dict(iter(ranges.groupby("rank", sort=False))) if len(ranges) else {}
    step_groups = dict(iter(steps.groupby("rank", sort=False))) if len(steps) else {}
    out: dict[int, dict[str, LayerSamples]] = {}
    for rank, rows in paths.groupby("rank", sort=True):
        out[int(rank)] = _rank_samples(rows, range_groups.get(rank, ranges.iloc[:0]),
                                       step_groups.get(rank, steps.iloc[:0]))
    return out


def _one_sided(side: LayerSamples, status: str, options: DiffOptions) -> Change:
    """The change of a type path that only one report has: ``appeared`` or ``vanished``."""
    mean = float(np.mean(side.samples)) if side.samples else 0.0
    base, new = (None, mean) if status == "appeared" else (mean, None)
    n = len(side.samples)
    return Change(base, new, None, None, n if base is not None else 0, n if new is not None else 0, None,
                  float(options.abs_floor_ns), mean > options.abs_floor_ns, status)


def diff_layers(base: Report, new: Report, options: DiffOptions) -> list[LayerDelta]:
    """Per rank of both reports, each type path of either (see the module docstring), the largest
    change first (deeper type paths first among equal changes: they name the cause)."""
    b, n = layer_samples(base), layer_samples(new)
    if not b or not n:
        return []
    out: list[LayerDelta] = []
    for rank in sorted(set(b) & set(n)):
        rb, rn = b[rank], n[rank]
        for path in sorted(set(rb) | set(rn)):
            sb, sn = rb.get(path), rn.get(path)
            if sb is not None and sn is not None:
                change = compare(sb.samples, sn.samples, options=options, higher_is_worse=True, unit="ns")
            else:
                change = _one_sided(sb or sn, "vanished" if sn is None else "appeared", options)  # type: ignore[arg-type]
            shown = sn or sb
            assert shown is not None
            # type paths are module names from the trace: scrubbed like every name the diff shows
            out.append(LayerDelta(rank, scrub_text(path), shown.depth, sb.share if sb else None,
                                  sn.share if sn else None, change))
    out.sort(key=lambda d: (-round(_size(d.change)), -d.depth, d.rank, d.type_path))  # to the ns: float ties
    return out


def _size(change: Change) -> float:
    """How large a change is: |delta|, or the time of a one-sided type path."""
    if change.delta is not None:
        return abs(change.delta)
    return float(change.new if change.new is not None else change.base or 0.0)


def layer_notes(base: Report, new: Report) -> list[str]:
    """Why layers are not compared, when only one report has module ranges."""
    hb, hn = has_layers(base), has_layers(new)
    if hb == hn:
        return []
    which = "new" if hb else "base"
    return [f"the {which} trace has no module ranges with GPU time (nn.Module events, annotations, NVTX): layers "
            "not compared"]
