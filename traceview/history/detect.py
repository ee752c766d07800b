"""Regression detection over a history: which series (step time, kernels, collectives) got slower,
beyond noise and beyond a threshold, and since which run. Everything is numpy over a runs x series
matrix (one column per series): no Python loop over series.

**Change-point search** (the default). Of the runs considered (oldest first), the candidate start
runs are the last ``window`` ones that have at least ``min_baseline`` runs before them. For every
candidate ``t`` the runs are split into ``before = runs[region_start:t]`` and ``after = runs[t:]``
(``region_start`` = ``window + baseline`` runs before the newest) and the split's cost is the sum of
squared deviations from each part's mean (the maximum-likelihood single change point under normal
noise; on the planted histories it placed the start right more often than absolute deviations from
medians did), computed on the values winsorised per series at its median +- 3 x 1.4826 x MAD (one
run 10x off would otherwise drag the split early, and the real step then goes unseen); each series
takes its cheapest split. That split is then tested, robustly:

* baseline: the last ``baseline`` runs of ``before``; its centre is the **median**; the noise
  ``sigma`` is pooled over the whole region around the split (``pooled_sigma``): each run's
  deviation from its own part's median, winsorised at 3 x (1.4826 x their MAD), root mean square
  over n - 2. As robust as the MAD, about three times as precise: the MAD of 20-40 runs is 20% too
  small now and then, and at k = 4.7 that made most false alarms: on 400 generated nights of
  2,000 kernels of pure noise (sd 2-3%) the rule before flagged 14% of the nights, the MAD with
  the winsorised split (``noise="mad"``) 11.5%, this one 2.5% (95% interval 1.4-4.5%), and it
  finds more planted steps (8%: 83% against 77%; benchmarks/bench_history_alarms.py);
* ``delta = median(after) - median(baseline)``; its noise ``se = sigma x sqrt(pi/2) x
  sqrt(1/n_baseline + 1/n_after)`` (the standard error of a difference of two medians);
* regressed when ``delta > max(k x se, max_regression x median(baseline), min_delta_ns)``, with
  ``k`` chosen for the number of tests by default (Bonferroni): the normal quantile at which
  ``family_alpha`` (5%) is shared by every series and candidate split of the check, at least 4.
  2,000 series x 20 splits is 40,000 tests (k = 4.7); 40 series x 20 splits gives 4; a fixed 3 (or
  4) would raise false alarms on most checks of a big history (docs/history.md). ``--noise-k``
  fixes it;
* with only one or two runs after the split, their smallest value stands for them (every one of
  them must be slower): one outlier run is not a regression.

Medians and winsorised spreads rather than means and standard deviations: one bad run (a noisy
neighbour, a throttled GPU) in the baseline moves a mean and inflates a standard deviation so that
real regressions hide; the medians ignore up to half the runs being outliers and the winsorised
spread counts a run 40 sigma off as 3.

A kernel absent from a run counts 0 there: a kernel that appears is a rise from 0 (status
``appeared``) and is reported when its time per step exceeds the floors.

**Explicit baseline** (``--baseline``): the newest run against the given runs, the same test with
``n_after = 1``; with fewer than 3 baseline runs no spread across runs can be measured and ``sigma``
is the stored within-run spread of the per-step samples (1.4826 x their MAD) of the baseline runs
and the newest run, the larger.
"""

from __future__ import annotations

import math
from statistics import NormalDist
import warnings
from dataclasses import dataclass

import numpy as np

#: MAD -> standard deviation of a normal distribution
MAD_TO_SIGMA = 1.4826
#: the variance of a sample median relative to a sample mean's, for normal data
MEDIAN_EFFICIENCY = math.pi / 2
#: the noise estimate clips deviations at this many (MAD-based) standard deviations
WINSOR = 3.0


@dataclass(frozen=True)
class DetectOptions:
    """The test's knobs (``history check`` options)."""

    max_regression: float = 0.05  # a rise must exceed this share of the baseline median ...
    k: float | None = None  # ... and k standard errors of the change (None: effective_k) ...
    min_delta_ns: float = 1_000.0  # ... and this many ns per step
    window: int = 20  # candidate start runs: the last `window` runs
    baseline: int = 20  # baseline runs before the start run, at most
    min_baseline: int = 5  # fewer runs before a candidate: it is not a candidate
    family_alpha: float = 0.05  # the chance of any false alarm in one check, when k is None
    min_k: float = 4.0  # k never lower than this when chosen
    # the change-point search's noise: "pooled" (winsorised, both sides of the split: pooled_sigma) or
    # "mad" (the rule before issue 30: the baseline's MAD, at least that of every run before the split)
    noise: str = "pooled"


def effective_k(options: DetectOptions, n_tests: int) -> float:
    """The k of the test: the one given, else the normal quantile at which ``family_alpha`` is
    shared by ``n_tests`` one-sided tests (Bonferroni), at least ``min_k``."""
    if options.k is not None:
        return float(options.k)
    p = options.family_alpha / max(n_tests, 1)
    return max(options.min_k, NormalDist().inv_cdf(1.0 - p))


@dataclass
class Detection:
    """Per series (arrays over the columns of the matrix given)."""

    regressed: np.ndarray  # bool
    start: np.ndarray  # int: row of the first run of the regressed part (-1: none judged)
    baseline_median: np.ndarray
    current_median: np.ndarray
    delta: np.ndarray
    threshold: np.ndarray
    sigma: np.ndarray
    n_baseline: np.ndarray
    n_after: np.ndarray
    judged: bool  # False: too few runs to judge anything
    k: float = 0.0  # the k the test used (effective_k)

    @property
    def delta_pct(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.baseline_median > 0, 100.0 * self.delta / self.baseline_median, np.inf)


def _nanmedian(block: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():  # an all-NaN column (a series absent there) is NaN, quietly
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(block, axis=0)


def _winsorised(region: np.ndarray) -> np.ndarray:
    """``region`` with each column clipped to its median +- ``WINSOR`` x 1.4826 x its MAD (a column
    of MAD 0, e.g. a kernel absent from most runs, is left as it is). A step (a regression) widens
    the MAD of its column and stays; one run 40 sigma off becomes 3 sigma off."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        centre = _nanmedian(region)
        scale = MAD_TO_SIGMA * _nanmedian(np.abs(region - centre))
    half = np.where(scale > 0, WINSOR * scale, np.inf)
    return np.clip(region, centre - half, centre + half)


def pooled_sigma(region: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Per column: the run-to-run noise of ``region`` (runs x series) around a split (``before``:
    True on the rows before it), pooled over both parts: each value's deviation from its own part's
    median, winsorised at ``WINSOR`` x (1.4826 x the MAD of those deviations), and the root mean
    square of the result over ``n - 2`` degrees of freedom (two centres fitted). Robust like the MAD
    (a run 10 sigma off counts as 3), but about three times as precise (the MAD's efficiency is
    37%): with 40 runs a MAD is 20% off now and then, which at k = 4.7 raised most false alarms."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        centre = np.where(before, _nanmedian(np.where(before, region, np.nan)),
                          _nanmedian(np.where(before, np.nan, region)))
        deviation = region - centre
        scale = MAD_TO_SIGMA * _nanmedian(np.abs(deviation))
        clipped = np.clip(deviation, -WINSOR * scale, WINSOR * scale)
        n = np.sum(~np.isnan(region), axis=0)
        return np.sqrt(np.nansum(clipped ** 2, axis=0) / np.maximum(n - 2, 1))


def _test(values_b: np.ndarray, after_median: np.ndarray, n_after: np.ndarray, options: DetectOptions, k: float,
          floor_sigma: np.ndarray | None = None, pooled: bool = False) -> tuple[np.ndarray, ...]:
    """The robust test of every column: (regressed, baseline median, delta, threshold, sigma, n_base).
    ``pooled``: ``floor_sigma`` is the noise (the change-point search's), else its floor."""
    base_median = _nanmedian(values_b)
    mad = _nanmedian(np.abs(values_b - base_median))
    sigma = MAD_TO_SIGMA * mad
    if floor_sigma is not None:
        sigma = floor_sigma if pooled else np.fmax(sigma, floor_sigma)
    n_base = np.sum(~np.isnan(values_b), axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        se = sigma * np.sqrt(MEDIAN_EFFICIENCY * (1.0 / n_base + 1.0 / n_after))
    delta = after_median - base_median
    threshold = np.fmax(np.fmax(k * se, options.max_regression * np.abs(base_median)), options.min_delta_ns)
    regressed = (delta > threshold) & (n_base > 0) & (n_after > 0)
    return regressed, base_median, delta, threshold, sigma, n_base


def _empty(n: int) -> Detection:
    nan = np.full(n, np.nan)
    zeros = np.zeros(n, dtype=np.int64)
    return Detection(np.zeros(n, bool), np.full(n, -1), nan, nan.copy(), nan.copy(), nan.copy(), nan.copy(), zeros,
                     zeros.copy(), False)


def change_points(values: np.ndarray, options: DetectOptions) -> Detection:
    """The change-point search and test on ``values`` (runs x series, oldest run first; NaN: the
    series has no value in that run and is left out there)."""
    n_runs, n_series = values.shape
    first_candidate = max(options.min_baseline, n_runs - options.window)
    if n_runs <= first_candidate or n_series == 0:
        return _empty(n_series)
    region_start = max(0, n_runs - options.window - options.baseline)
    region = values[region_start:]
    candidates = np.arange(first_candidate, n_runs) - region_start
    costs = np.empty((len(candidates), n_series))
    ranked = _winsorised(region)  # the split is placed on values one outlier run cannot drag
    for i, t in enumerate(candidates):  # at most `window` splits, each vectorised over every series
        before, after = ranked[:t], ranked[t:]
        costs[i] = (np.nansum((before - np.nanmean(before, axis=0)) ** 2, axis=0)
                    + np.nansum((after - np.nanmean(after, axis=0)) ** 2, axis=0))
    best = candidates[np.argmin(costs, axis=0)]  # per series: its split (row in region)
    # the test needs each series' own baseline and after parts: gather them by masks over the region
    rows = np.arange(len(region))[:, None]
    in_after = rows >= best[None, :]
    in_base = (rows < best[None, :]) & (rows >= best[None, :] - options.baseline)
    after = np.where(in_after, region, np.nan)
    n_after = np.sum(in_after & ~np.isnan(region), axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        # one or two runs since the split: every one of them must be slower (their minimum), so that
        # a single outlier run cannot make a regression; from three on, their median
        after_median = np.where(n_after <= 2, np.nanmin(after, axis=0), _nanmedian(after))
    before = rows < best[None, :]
    if options.noise == "mad":  # the earlier rule: the larger of the baseline's MAD and all runs before's
        before_all = np.where(before, region, np.nan)
        sigma = MAD_TO_SIGMA * _nanmedian(np.abs(before_all - _nanmedian(before_all)))
    else:
        sigma = pooled_sigma(region, before)
    k = effective_k(options, n_series * len(candidates))
    regressed, base_median, delta, threshold, sigma, n_base = _test(
        np.where(in_base, region, np.nan), after_median, n_after, options, k, sigma, pooled=options.noise != "mad")
    start = np.where(regressed, best + region_start, -1)
    return Detection(regressed, start, base_median, after_median, delta, threshold, sigma, n_base, n_after, True, k)


def against_baseline(baseline: np.ndarray, newest: np.ndarray, options: DetectOptions,
                     spread: np.ndarray | None = None) -> Detection:
    """The newest run (a row of series values) against ``baseline`` (runs x series). ``spread``:
    the within-run MAD of each series (runs x series, baseline runs and the newest), used as the
    noise when fewer than 3 baseline runs are given."""
    floor = None
    if baseline.shape[0] < 3 and spread is not None:
        floor = MAD_TO_SIGMA * np.nanmax(np.where(np.isnan(spread), 0.0, spread), axis=0)
    n_after = (~np.isnan(newest)).astype(np.int64)
    k = effective_k(options, newest.shape[0])
    regressed, base_median, delta, threshold, sigma, n_base = _test(baseline, newest, n_after, options, k, floor)
    start = np.where(regressed, baseline.shape[0], -1)
    return Detection(regressed, start, base_median, newest.astype(np.float64), delta, threshold, sigma, n_base,
                     n_after, baseline.shape[0] > 0, k)
