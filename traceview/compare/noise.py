"""The noise rule of the diff: is the change of one figure between two traces more than noise?

``delta = mean(new) - mean(base)`` over the per-step samples of each side. The change is
significant when ``|delta| > threshold`` with ``threshold = max(k * s_pooled, abs_floor,
rel_floor * |mean(base)|)``, where ``s_pooled`` is the pooled sample standard deviation of the
per-step values (:func:`pooled_std`). For percentages (``overlap_pct``) the floor is
``abs_floor_pct`` percentage points and there is no relative floor. With a single step on both
sides the noise cannot be estimated and only the floors apply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass
class DiffOptions:
    """Thresholds of the noise rule (see the module docstring)."""

    #: a change is significant beyond k pooled per-step standard deviations ...
    k: float = 3.0
    #: ... and beyond this share of the base value ...
    rel_floor: float = 0.01
    #: ... and beyond this absolute amount (ns) ...
    abs_floor_ns: int = 1_000
    #: ... (percentage points, for overlap_pct)
    abs_floor_pct: float = 1.0
    #: a finding's cost must change by this share of its base cost (and beyond noise) to count
    finding_rel_floor: float = 0.10


@dataclass
class Change:
    """The noise-rule verdict on one pair of sample sets."""

    base: float | None
    new: float | None
    delta: float | None
    delta_pct: float | None  # 100 x delta / |base| (None when base is 0 or missing, and for percentages)
    base_steps: int
    new_steps: int
    pooled_std: float | None  # None: noise cannot be estimated
    threshold: float | None
    significant: bool
    status: str  # unchanged, within_noise, worse, better, only_base, only_new (appeared, vanished: kernels)

    @property
    def noise_estimated(self) -> bool:
        return self.pooled_std is not None


def pooled_std(base: Sequence[float], new: Sequence[float]) -> float | None:
    """Pooled sample standard deviation of two sample sets (None with fewer than 2 samples on both
    sides: no degree of freedom)."""
    df = max(len(base) - 1, 0) + max(len(new) - 1, 0)
    if df < 1:
        return None
    ss = 0.0
    for xs in (base, new):
        if len(xs) > 1:
            arr = np.asarray(xs, dtype=np.float64)
            ss += float(((arr - arr.mean()) ** 2).sum())
    return math.sqrt(ss / df)


def compare(base: Sequence[float] | None, new: Sequence[float] | None, *, options: DiffOptions,
            higher_is_worse: bool = True, unit: str = "ns") -> Change:
    """Apply the noise rule to the per-step samples of one figure in the two traces (``unit``:
    ``ns`` or ``pct``, percentage points)."""
    nb = len(base) if base is not None else 0
    nn = len(new) if new is not None else 0
    mb = float(np.mean(base)) if base is not None and nb else None
    mn = float(np.mean(new)) if new is not None and nn else None
    if base is None or new is None or mb is None or mn is None:
        return Change(mb, mn, None, None, nb, nn, None, None, False, "only_base" if mn is None else "only_new")
    delta = mn - mb
    sp = pooled_std(base, new)
    if unit == "pct":
        floor = options.abs_floor_pct
    else:
        floor = max(float(options.abs_floor_ns), options.rel_floor * abs(mb))
    threshold = floor if sp is None else max(options.k * sp, floor)
    significant = abs(delta) > threshold
    if delta == 0:
        status = "unchanged"
    elif not significant:
        status = "within_noise"
    else:
        status = "worse" if (delta > 0) == higher_is_worse else "better"
    pct = 100.0 * delta / abs(mb) if mb and unit != "pct" else None
    return Change(mb, mn, delta, pct, nb, nn, sp, threshold, significant, status)
