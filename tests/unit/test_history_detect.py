"""The history check's decision rule (traceview/history/detect.py, issue 30 item 12): on pure noise
the default flags at most one night in twenty, robustly to outlier runs, and still finds planted
steps. The rates over 400 nights are benchmarks/bench_history_alarms.py's."""

from __future__ import annotations

import numpy as np
import pytest

from traceview.history.detect import DetectOptions, change_points, pooled_sigma


def noise_nights(seed: int, nights: int, runs: int = 40, kernels: int = 2000) -> list[np.ndarray]:
    """Histories of ``runs`` checks of ``kernels`` series with their own normal noise (sd 2-3%)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(nights):
        base = rng.uniform(5_000, 200_000, kernels)
        sd = rng.uniform(0.02, 0.03, kernels)
        out.append(base * (1 + sd * rng.standard_normal((runs, kernels))))
    return out


def test_pure_noise_2000_kernels_at_most_one_false_alarm_in_20_nights():
    nights = noise_nights(0, 20)
    alarms = sum(bool(change_points(v, DetectOptions()).regressed.any()) for v in nights)
    assert alarms <= 1
    # the same nights under the earlier rule (the baseline's MAD as the noise): the test can fail
    assert sum(bool(change_points(v, DetectOptions(noise="mad")).regressed.any()) for v in nights) >= 3


def test_pooled_noise_is_precise_and_robust_to_an_outlier_run():
    rng = np.random.default_rng(1)
    values = 100_000 * (1 + 0.025 * rng.standard_normal((40, 4000)))
    before = np.arange(40)[:, None] < 30
    sigma = pooled_sigma(values, np.broadcast_to(before, values.shape)) / 100_000
    assert np.median(sigma) == pytest.approx(0.025, rel=0.05)
    # about three times as precise as a MAD of the same runs (the MAD's efficiency is 37%)
    mad = 1.4826 * np.median(np.abs(values - np.median(values, axis=0)), axis=0) / 100_000
    assert np.std(sigma) < 0.7 * np.std(mad)
    # one run 40 sigma off (a throttled GPU) moves it by a few percent, not by a factor of 6
    spoiled = values.copy()
    spoiled[10] *= 2.0
    moved = pooled_sigma(spoiled, np.broadcast_to(before, values.shape)) / 100_000 / sigma
    assert np.median(moved) < 1.2


def test_a_planted_step_is_found_with_its_start_among_2000_noisy_series():
    values = noise_nights(2, 1)[0]
    values[28:, 7] *= 1.10  # 10% slower for the last 12 runs
    values[:33, 9] = 0.0  # a kernel that appears 7 runs ago
    found = change_points(values, DetectOptions())
    assert np.flatnonzero(found.regressed).tolist() == [7, 9]
    assert found.start[7] == 28 and found.start[9] == 33


def test_an_outlier_run_in_the_baseline_does_not_hide_a_regression():
    values = noise_nights(3, 1, kernels=50)[0]
    values[5, 4] *= 3.0  # one bad run long before
    values[30:, 4] *= 1.08
    found = change_points(values, DetectOptions())
    assert found.regressed[4] and abs(found.start[4] - 30) <= 1  # normal noise: the start may be one off
