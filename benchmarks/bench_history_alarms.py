#!/usr/bin/env python3
"""History check false alarms and recall (issue 30, item 12): how often the default ``history
check`` flags a regression in a history of pure noise, and how often it finds planted ones.

    python benchmarks/bench_history_alarms.py                    # 400 nights x 2,000 kernels
    python benchmarks/bench_history_alarms.py --nights 100 --kernels 500 --seed 3

A *night* is one check of a history of ``window + baseline`` (40) runs, what ``history check``
considers: ``--kernels`` series of per-step times (5-200 us), each with its own normal noise of sd
2-3% run to run and no change (the bulk history of sample_traces/make_history.py). A night with any
series flagged is a false alarm; the target is at most 1 in 20 nights (5%) at the default options.

Recall: on a second history per night, ``len(SIZES)`` series get a planted step (5, 8, 10, 15,
20% slower) from a random run with 3 to 20 runs after it, and one new kernel appears 3-20 runs
before the newest. Printed per size: the share found, and the share found with its exact start run;
and the false alarms among the other series of those nights.

Both noise rules are measured in the same run on the same histories (``DetectOptions.noise``):
``pooled`` (the default) and ``mad`` (the rule before: the baseline's median absolute deviation).
Printed with each rate: its 95% interval (Wilson), so that a rate near the target reads honestly.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from traceview.history.detect import DetectOptions, change_points  # noqa: E402

SIZES = (0.05, 0.08, 0.10, 0.15, 0.20)
TARGET = 1 / 20


def noise_history(rng: np.random.Generator, runs: int, kernels: int) -> np.ndarray:
    """runs x kernels per-step times with 2-3% normal noise and no change."""
    base = rng.uniform(5_000, 200_000, kernels)
    sd = rng.uniform(0.02, 0.03, kernels)
    return base * (1 + sd * rng.standard_normal((runs, kernels)))


def planted(rng: np.random.Generator, values: np.ndarray) -> tuple[np.ndarray, list[tuple[float, int]]]:
    """``values`` with a step in each of the first len(SIZES) series and one kernel appearing (the
    last column: NaN, then present): per planted series (size, start row); the new one's size is inf."""
    runs = values.shape[0]
    out = values.copy()
    truth = []
    for j, size in enumerate(SIZES):
        start = int(rng.integers(runs - 20, runs - 2))  # 3 to 20 runs after it
        out[start:, j] *= 1 + size
        truth.append((size, start))
    start = int(rng.integers(runs - 20, runs - 2))
    out[:start, -1] = 0.0  # absent: the check counts an absent kernel as 0 (history.query._fill_absent)
    truth.append((math.inf, start))
    return out, truth


def wilson(hits: int, n: int) -> str:
    if n == 0:
        return "n/a"
    z = 1.96
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{100 * max(centre - half, 0):.1f}-{100 * min(centre + half, 1):.1f}%"


def measure(nights: int, kernels: int, seed: int, options: DetectOptions) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    runs = options.window + options.baseline
    alarms = 0
    alarms_planted = 0
    found = {s: 0 for s in (*SIZES, math.inf)}
    exact = dict(found)
    t0 = time.perf_counter()
    for _ in range(nights):
        alarms += bool(change_points(noise_history(rng, runs, kernels), options).regressed.any())
        values, truth = planted(rng, noise_history(rng, runs, kernels))
        d = change_points(values, options)
        others = np.ones(kernels, bool)
        for j, (size, start) in enumerate(truth):
            col = j if math.isfinite(size) else kernels - 1
            others[col] = False
            found[size] += bool(d.regressed[col])
            exact[size] += int(d.start[col]) == start
        alarms_planted += bool(d.regressed[others].any())
    return {"alarms": alarms, "alarms_planted": alarms_planted, "found": found, "exact": exact,
            "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nights", type=int, default=400)
    parser.add_argument("--kernels", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=30)
    args = parser.parse_args(argv)
    print(f"{args.nights} nights x {args.kernels} kernels, 40 runs each, normal noise sd 2-3%, default options "
          f"(target: false alarms <= {TARGET:.0%} of nights)")
    verdicts = []
    for noise in ("pooled", "mad"):
        r = measure(args.nights, args.kernels, args.seed, DetectOptions(noise=noise))
        alarms, n = int(r["alarms"]), args.nights  # type: ignore[call-overload]
        ok = alarms / n <= TARGET
        verdicts.append(ok if noise == "pooled" else True)
        print(f"\nnoise={noise}: false-alarm nights {alarms}/{n} = {100 * alarms / n:.1f}% "
              f"(95% {wilson(alarms, n)}) {'ok' if ok else 'OVER'}; with planted changes, other series flagged "
              f"on {r['alarms_planted']}/{n} nights; {r['seconds']:.1f} s")
        found, exact = r["found"], r["exact"]
        for size in (*SIZES, math.inf):
            label = "appears" if size == math.inf else f"+{size:.0%}"
            print(f"  {label:>8}: found {found[size]}/{n} = {100 * found[size] / n:5.1f}%, exact start "  # type: ignore[index]
                  f"{100 * exact[size] / n:5.1f}%")  # type: ignore[index]
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
