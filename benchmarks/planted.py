"""Recall and false alarms of traceview's findings on traces with planted, known problems.

    python benchmarks/planted.py                          # every case, sizes small+medium, seeds 1-2
    python benchmarks/planted.py --sizes small,medium,large --seeds 1,2,3
    python benchmarks/planted.py --kinds straggler,item_sync -v

Generates the cases of ``sample_traces/make_planted.py`` into a temporary directory, runs
``traceview.analyze(path)`` (the Python API, no cache) on each and prints, per planted problem, how
often its finding code was found with a cost within 5% of the planted cost (recall), the median
cost error and the false alarms; per healthy twin, its false alarms; then every miss and false
alarm, and the load average. Exit status 1 when recall is below 100% or any false alarm fired, 2 on
bad arguments.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "sample_traces"))

import make_planted  # noqa: E402

import traceview  # noqa: E402


@dataclass
class Outcome:
    case: make_planted.Case
    score: make_planted.Score
    seconds: float


def run_case(case: make_planted.Case, out_dir: Path) -> Outcome:
    path = make_planted.write_case(case, out_dir)
    started = time.perf_counter()
    report = traceview.analyze(path, use_cache=False)
    seconds = time.perf_counter() - started
    return Outcome(case, make_planted.score(case.expected, list(report["findings"])), seconds)


def _fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def planted_table(outcomes: list[Outcome]) -> list[str]:
    """One row per planted problem: the finding code(s) that diagnose it, recall, cost error, false alarms."""
    rows = [f"{'planted problem':<24} {'expected code':<44} {'cases':>5} {'found':>5} {'recall':>7} "
            f"{'med |cost err|':>14} {'false alarms':>12}"]
    kinds = dict.fromkeys(o.case.kind for o in outcomes if not o.case.healthy)
    for kind in kinds:
        mine = [o for o in outcomes if o.case.kind == kind]
        exp = mine[0].case.expected
        assert exp is not None
        found = sum(o.score.found for o in mine)
        errors = [o.score.cost_error for o in mine if o.score.cost_error is not None]
        med = statistics.median(errors) if errors else None
        false = sum(len(o.score.false_alarms) for o in mine)
        rows.append(f"{kind:<24} {' | '.join(exp.codes):<44} {len(mine):>5} {found:>5} "
                    f"{100 * found / len(mine):>6.0f}% {_fmt_pct(med):>14} {false:>12}")
    return rows


def healthy_table(outcomes: list[Outcome]) -> list[str]:
    rows = [f"{'healthy twin':<24} {'cases':>5} {'false alarms':>12}  codes that fired above info"]
    for kind in dict.fromkeys(o.case.kind for o in outcomes if o.case.healthy):
        mine = [o for o in outcomes if o.case.kind == kind]
        codes = sorted({f["code"] for o in mine for f in o.score.false_alarms})
        false = sum(len(o.score.false_alarms) for o in mine)
        rows.append(f"{kind:<24} {len(mine):>5} {false:>12}  {', '.join(codes) or '-'}")
    return rows


def by_code_table(outcomes: list[Outcome]) -> list[str]:
    """False alarms per finding code, over every case."""
    counts: dict[str, list[str]] = {}
    for o in outcomes:
        for f in o.score.false_alarms:
            counts.setdefault(f["code"], []).append(o.case.kind)
    if not counts:
        return ["false alarms by finding code: none"]
    rows = [f"{'finding code':<34} {'false alarms':>12}  in"]
    for code, kinds in sorted(counts.items(), key=lambda kv: -len(kv[1])):
        rows.append(f"{code:<34} {len(kinds):>12}  {', '.join(sorted(set(kinds)))}")
    return rows


def _finding(f: dict[str, Any]) -> str:
    cost = f.get("cost_ns_per_step")
    return f"{f['code']} ({f['severity']}, {(cost or 0) / 1e3:,.1f} us/step)"


def details(outcomes: list[Outcome]) -> list[str]:
    """Each miss (what was found instead) and each false alarm."""
    rows = []
    for o in outcomes:
        exp, sc = o.case.expected, o.score
        if exp is not None and not sc.found:
            planted = "" if exp.cost_ns_per_step is None else f" planted {exp.cost_ns_per_step / 1e3:,.1f} us/step"
            got = f"closest {_finding(sc.matched)}, error {_fmt_pct(sc.cost_error)}" if sc.matched else "not found"
            rows.append(f"MISS   {o.case.name}: {' | '.join(exp.codes)}{planted}; {got}")
        for f in sc.false_alarms:
            rows.append(f"FALSE  {o.case.name}: {_finding(f)}: {f.get('title', '')[:110]}")
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="small,medium", help=f"of {', '.join(make_planted.SIZES)}")
    ap.add_argument("--seeds", default="1,2", help="comma-separated integers")
    ap.add_argument("--kinds", default=None, help=f"of {', '.join(make_planted.CASES)} (default all)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each case as it runs")
    args = ap.parse_args(argv)
    args.sizes = args.sizes.split(",")
    args.kinds = args.kinds.split(",") if args.kinds else None
    try:
        args.seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds: not integers: {args.seeds!r}")
    for s in args.sizes:
        if s not in make_planted.SIZES:
            ap.error(f"--sizes: unknown size {s!r}")
    for k in args.kinds or ():
        if k not in make_planted.CASES:
            ap.error(f"--kinds: unknown case {k!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="planted-") as tmp:
        for case in make_planted.planted_cases(args.sizes, args.seeds, args.kinds):
            o = run_case(case, Path(tmp))
            outcomes.append(o)
            if args.verbose:
                print(f"{case.name}: found={o.score.found} error={_fmt_pct(o.score.cost_error)} "
                      f"false={len(o.score.false_alarms)} ({o.seconds:.2f} s)", flush=True)
    planted = [o for o in outcomes if not o.case.healthy]
    recall = sum(o.score.found for o in planted) / len(planted) if planted else 1.0
    false = sum(len(o.score.false_alarms) for o in outcomes)
    print(f"Planted problems: sizes {','.join(args.sizes)} (steps x kernels: "
          f"{', '.join(f'{make_planted.SIZES[s][0]}x{make_planted.SIZES[s][1]}' for s in args.sizes)}), "
          f"seeds {','.join(map(str, args.seeds))}; a cost counts when within "
          f"{100 * make_planted.COST_TOLERANCE:.0f}% of the planted cost\n")
    for table in (planted_table(outcomes), healthy_table(outcomes), by_code_table(outcomes), details(outcomes)):
        if table:
            print("\n".join(table) + "\n")
    load = os.getloadavg()
    print(f"recall {100 * recall:.1f}% over {len(planted)} planted cases, {false} false alarms over "
          f"{len(outcomes)} cases; {time.perf_counter() - started:.0f} s, load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    return 0 if recall == 1.0 and false == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
