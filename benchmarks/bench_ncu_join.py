"""The measured analysis's join (analyses/ncu_join.py) at scale: N trace kernels of K names against
R ncu records, timed against one pass over the trace's kernel frame (a groupby of the same rows),
measured in the same run. Usage: python benchmarks/bench_ncu_join.py [N] [K] [R]."""

from __future__ import annotations

import sys
import time

import numpy as np
import pandas as pd

from traceview.analyses.ncu_join import KEY, join

def frames(n: int, k: int, r: int) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    rng = np.random.default_rng(0)
    names = [f"void at::native::kernel_{i}<float, {i % 7}>(int, float*)" for i in range(k)]
    code = rng.integers(0, k, n)
    trace = pd.DataFrame({"entry": np.arange(n), "rank": rng.integers(0, 8, n), "name_code": code,
                          "start": np.arange(n) * 10, "grid_x": 64, "grid_y": 1, "grid_z": 1, "block_x": 128,
                          "block_y": 1, "block_z": 1})

    records = pd.DataFrame({"kernel": [f"kernel_{i}<float,{i % 7}>(T1, T2)" for i in range(r)],
                            "grid_x": 64, "grid_y": 1, "grid_z": 1, "block_x": 128, "block_y": 1, "block_z": 1,
                            "invocation": 0})
    return records[[*KEY, "invocation"]], trace, names

def main() -> None:
    n, k, r = (int(a) for a in (sys.argv[1:] + ["2000000", "500", "200"])[:3])
    records, trace, names = frames(n, k, r)
    t0 = time.perf_counter()
    trace.groupby(["rank", "name_code"]).size()
    base = time.perf_counter() - t0
    t0 = time.perf_counter()
    joined = join(records, trace, names)
    took = time.perf_counter() - t0
    print(f"{n:,} trace kernels, {k} names, {r} ncu records: join {took:.2f} s, one groupby {base:.2f} s "
          f"(ratio {took / base:.1f}); matched {joined.entry.size:,} kernels")

if __name__ == "__main__":
    main()
