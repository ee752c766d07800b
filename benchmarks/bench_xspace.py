"""XSpace read speed: traceview's parse of a ``*.xplane.pb`` (protobuf decode, the walk over planes,
lines and events, the trace built) against XLA's own reader (xprof's ``ProfileData``, a C library,
walking every event with its stats) on the same file, in the same run; and the JSON view beside it.

    python benchmarks/bench_xspace.py [PATH.xplane.pb] [--steps N]

Without a path, a JAX CPU profile of N steps (default 300) of the tests' training step is recorded
into ``benchmarks/out/xspace/`` (needs jax). Medians of 3 runs in this process, after one warm-up.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))


def _median_s(fn, runs: int = 3) -> float:  # type: ignore[no-untyped-def]
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _xprof_walk(path: Path) -> int:
    from xprof.profile_data import ProfileData

    n = 0
    for plane in ProfileData.from_file(str(path)).planes:
        for line in plane.lines:
            for event in line.events:
                n += len(event.stats) >= 0
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    path = args.path
    if path is None:
        import jax_profiles

        jax_profiles.STEPS = args.steps
        out = HERE / "out" / "xspace" / f"steps{args.steps}"
        if not out.exists():
            jax_profiles.PROGRAM = jax_profiles.PROGRAM.replace("range(4)", f"range({args.steps})")
            jax_profiles.record(out)
        (path,) = (out / "plugins" / "profile").glob("*/*.xplane.pb")
    from traceview.parsers.xspace import parse_xspace, parse_xspace_json

    events = parse_xspace(path).num_events
    rows = [("traceview parse_xspace", _median_s(lambda: parse_xspace(path)))]
    views = sorted(path.parent.glob("perfetto_trace.json.gz"))
    if views:
        rows.append(("traceview parse_xspace_json (perfetto_trace.json.gz)",
                     _median_s(lambda: parse_xspace_json(views[0]))))
    try:
        rows.append(("xprof ProfileData walk (reference)", _median_s(lambda: _xprof_walk(path))))
    except ImportError:
        print("xprof not installed: no reference reader")
    print(f"{path.name}: {path.stat().st_size / 1e6:.2f} MB, {events:,} events")
    base = rows[0][1]
    for name, seconds in rows:
        print(f"  {name:58s} {seconds:7.3f} s  {events / seconds:>10,.0f} events/s  x{seconds / base:.2f}")


if __name__ == "__main__":
    main()
