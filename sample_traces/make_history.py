"""Generated run histories with known answers, for tests/integration/test_history.py and
benchmarks/bench_history.py: per-kernel aggregates (what ``history add`` stores), not traces.

``planted_history`` gives 50 runs (oldest first) of one model on one GPU with noise of 2-3% (each
kernel its own width in that range, independent per run), and two planted changes:

* ``PLANTED_SLOW`` is 8% slower from run ``SLOW_FROM`` (1-based, as run ids count) on;
* ``PLANTED_NEW`` appears in run ``NEW_FROM`` and stays.

The step time is the sum of the kernels plus idle time, so it moves with them (below the 5%
threshold: the slow kernel is a small part of the step). ``other_gpu_runs`` are interleaved on
another GPU model with twice the times (never the newest run): a check of the newest run's GPU
model must not see them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from traceview.history.schema import SERIES_COLUMNS
from traceview.history.summary import RunSummary

GPU = "NVIDIA H100 80GB HBM3"
OTHER_GPU = "NVIDIA A100-SXM4-80GB"
PLANTED_SLOW = "flash_fwd_kernel"
PLANTED_NEW = "triton_red_fused_layer_norm"
SLOW_FROM = 31
NEW_FROM = 44
SLOW_FACTOR = 1.08
STEPS = 10


@dataclass
class Planted:
    summaries: list[RunSummary]
    truth: dict[str, Any]


def kernel_names(n: int) -> list[str]:
    """``n`` kernel names: the planted slow one first, then generic ones."""
    return [PLANTED_SLOW, *(f"kernel_{i:04d}" for i in range(1, n))]


def _summary(i: int, gpu: str, names: list[str], per_step: np.ndarray, rng: np.random.Generator,
             start: datetime, idle_ns: float, collective_ns: float | None = None) -> RunSummary:
    """Run ``i`` (0-based) with kernel times ``per_step`` (ns per GPU and step)."""
    calls = np.full(len(names), STEPS * 2, dtype=np.int64)
    spread = per_step * rng.uniform(0.005, 0.02, len(names))
    frame = pd.DataFrame({"kind": "kernel", "key": names, "calls": calls, "calls_per_step": 2.0,
                          "total_ns": (per_step * STEPS).round().astype(np.int64), "per_step_ns": per_step,
                          "mean_ns": per_step / 2, "median_ns": per_step, "p90_ns": per_step * 1.02,
                          "spread_ns": spread})
    step = float(per_step.sum() + idle_ns + (collective_ns or 0.0))
    rows = [{"kind": "step", "key": "step_time", "calls": STEPS, "calls_per_step": 1.0, "total_ns": int(step * STEPS),
             "per_step_ns": step, "mean_ns": step, "median_ns": step, "p90_ns": step * 1.01, "spread_ns": step * 0.005}]
    if collective_ns is not None:
        rows.append({"kind": "collective", "key": "AllReduce [0]", "calls": STEPS, "calls_per_step": 1.0,
                     "total_ns": int(collective_ns * STEPS), "per_step_ns": collective_ns, "mean_ns": collective_ns,
                     "median_ns": collective_ns, "p90_ns": collective_ns, "spread_ns": collective_ns * 0.01})
    series = pd.concat([pd.DataFrame(rows), frame], ignore_index=True)[list(SERIES_COLUMNS)]
    raw = pd.DataFrame({"kind": "kernel", "key": names, "name": [f"void {n}<128>(float*)" for n in names]})
    figures = {"ranks": 1, "gpus": 1, "steps": STEPS, "step_time_ns": step, "step_p90_ns": step * 1.01,
               "step_spread_ns": step * 0.005, "window_ns_per_step": step, "busy_ns_per_step": step - idle_ns,
               "idle_ns_per_step": idle_ns, "compute_ns_per_step": step - idle_ns, "communication_ns_per_step": 0.0,
               "exposed_comm_ns_per_step": 0.0, "utilization": 1 - idle_ns / step}
    return RunSummary(identity=f"generated-{gpu}-{i}", name=f"nightly-{i + 1}", gpu_model=gpu,
                      traceview_version="test", paths=[f"/runs/{i + 1}"],
                      tags={"branch": "main" if i + 1 < SLOW_FROM else "dev", "run": str(i + 1)},
                      figures=figures, series=series, raw_names=raw, added_at=start + timedelta(hours=i))


def _noise(rng: np.random.Generator, width: np.ndarray | float, n: int, gaussian: bool) -> np.ndarray:
    """Relative noise: uniform within +-width, or normal with standard deviation width."""
    if gaussian:
        return np.asarray(width * rng.standard_normal(n))
    return np.asarray(width * rng.uniform(-1.0, 1.0, n))


def planted_history(n_runs: int = 50, n_kernels: int = 40, seed: int = 14, other_gpu_runs: int = 0,
                    gaussian: bool = False) -> Planted:
    """The planted history (module docstring); ``other_gpu_runs`` runs on :data:`OTHER_GPU` come in
    between the main series' runs. Noise: uniform within +-2-3% (each kernel its own width), or with
    ``gaussian`` normal with a standard deviation of 2-3% (heavier tails: a run 6-9% off happens)."""
    rng = np.random.default_rng(seed)
    names = kernel_names(n_kernels)
    base = rng.uniform(5_000, 200_000, n_kernels)  # ns per step
    base[0] = 100_000.0  # the slow kernel: 8% of it is well above the 1 us floor
    sd = rng.uniform(0.02, 0.03, n_kernels)
    new_base = 40_000.0
    start = datetime(2026, 1, 1)
    out: list[RunSummary] = []
    every = max(n_runs // max(other_gpu_runs, 1), 1)
    for i in range(n_runs):
        times = base * (1 + _noise(rng, sd, n_kernels, gaussian))
        if i + 1 >= SLOW_FROM:
            times[0] *= SLOW_FACTOR
        run_names = names
        if i + 1 >= NEW_FROM:
            times = np.append(times, new_base * (1 + _noise(rng, 0.025, 1, gaussian)))
            run_names = [*names, PLANTED_NEW]
        if other_gpu_runs and i % every == every // 2 and len(out) < n_runs + other_gpu_runs:
            slow = base * 2 * (1 + 0.02 * rng.standard_normal(n_kernels))
            out.append(_summary(1000 + i, OTHER_GPU, names, slow, rng, start, idle_ns=400_000))
        coll = 300_000 * (1 + _noise(rng, 0.02, 1, gaussian)[0])
        idle = 200_000 * (1 + _noise(rng, 0.02, 1, gaussian)[0])
        out.append(_summary(i, GPU, run_names, times, rng, start, idle_ns=idle, collective_ns=coll))
    truth = {"slow": {"kind": "kernel", "name": PLANTED_SLOW, "start_run_name": f"nightly-{SLOW_FROM}"},
             "new": {"kind": "kernel", "name": PLANTED_NEW, "start_run_name": f"nightly-{NEW_FROM}"}}
    return Planted(out, truth)


def bulk_history(n_runs: int, n_kernels: int, seed: int = 1) -> list[RunSummary]:
    """``n_runs`` runs of ``n_kernels`` kernels with 2-3% noise and no change (for the benchmark)."""
    rng = np.random.default_rng(seed)
    names = kernel_names(n_kernels)
    base = rng.uniform(5_000, 200_000, n_kernels)
    sd = rng.uniform(0.02, 0.03, n_kernels)
    start = datetime(2026, 1, 1)
    return [_summary(i, GPU, names, base * (1 + sd * rng.standard_normal(n_kernels)), rng, start, idle_ns=200_000)
            for i in range(n_runs)]
