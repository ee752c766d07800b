"""Kineto parse throughput with the native column decoder on and off, against msgspec's typed decode.

Issue 12's targets for the single-process parse: >= 200 MB/s per core, and >= 0.8x of msgspec's
typed-decode throughput on the same file. That reference is benchmarks/_msgspec_ref.py, shared
with bench_load.py: msgspec decoding the whole file into structs of the fields the parser reads,
with nothing done with them and their freeing not timed (the floor of any design that builds
Python structs first); the output says what it decodes.

Each figure is the median of ``--runs`` runs in this process, alternating the variants; MB/s is
per core: file bytes over the process's CPU time (single-threaded, so close to wall time on an
idle machine). The load average is printed before and after.

    python benchmarks/bench_kineto_native.py benchmarks/out/v100_x3.json
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _msgspec_ref  # noqa: E402

import pandas  # noqa: E402,F401  (the parser imports it at first use; not part of any run's time)
from traceview.parsers.kineto import parse_kineto  # noqa: E402

TARGET_MB_S = 200.0
TARGET_RATIO = 0.8


def _cpu_seconds(work: Callable[[], object]) -> tuple[float, float]:
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    result = work()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    del result
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path, help="a Kineto JSON trace (.json or .json.gz)")
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    path: Path = options.trace
    data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    mb = len(data) / 1e6

    def parse(native: bool) -> Callable[[], object]:
        def run() -> object:
            os.environ["TRACEVIEW_KINETO_NATIVE"] = "1" if native else "0"
            return parse_kineto(path)
        return run

    variants = {"parse, native decoder": parse(True), "parse, msgspec path": parse(False),
                "msgspec typed decode only": lambda: _msgspec_ref.decode(data)}
    print(f"{path} ({mb:.1f} MB of JSON); load average before: {open('/proc/loadavg').read().strip()}")
    print(f"msgspec reference (benchmarks/_msgspec_ref.py): {_msgspec_ref.DESCRIPTION}")
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(options.runs):
        for name, work in variants.items():
            times[name].append(_cpu_seconds(work))
    medians = {name: (statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs))
               for name, runs in times.items()}
    for name, (cpu, wall) in medians.items():
        print(f"  {name:28s} cpu {cpu:6.2f} s  wall {wall:6.2f} s  {mb / cpu:6.0f} MB/s per core")
    native_cpu, msgspec_cpu = medians["parse, native decoder"][0], medians["msgspec typed decode only"][0]
    print(f"  native parse: {mb / native_cpu:.0f} MB/s per core (target >= {TARGET_MB_S:.0f}); "
          f"{msgspec_cpu / native_cpu:.2f}x of msgspec's typed decode (target >= {TARGET_RATIO}); "
          f"{medians['parse, msgspec path'][0] / native_cpu:.2f}x faster than the msgspec path")
    print(f"load average after: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()
