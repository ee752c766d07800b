"""The long fuzz job: many more generated cases than ``tests/integration/test_fuzz.py``, with a fresh seed.

    python benchmarks/fuzz_long.py                      # 2,000 Kineto + 300 Nsight cases
    python benchmarks/fuzz_long.py --kineto 500 --nsys 50 --seed 7
    python benchmarks/fuzz_long.py --atheris -- -max_total_time=600   # coverage-guided (pip install atheris)

It uses the strategies and the contract of ``tests/fuzz_strategies.py``: each case ends in exit 0
with every event accounted for, or in exit 2 with one line naming the file; never an internal error,
never over 10x the time of the clean input. It prints the number of cases run and their outcomes
(exit 0 / exit 2 / failed) per class, then every distinct problem with one reproducer, and exits 1
when there is any. The atheris entry point feeds coverage-guided bytes to the Kineto reader through
the same CLI path; it is skipped with a message when atheris is not installed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import hypothesis  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fuzz_strategies import (  # noqa: E402
    NSYS_SAMPLE, Findings, FuzzCase, NsysMutation, analyze_kineto, analyze_nsys, check_exit, clean_kineto_seconds,
    clean_document, clean_seconds, encoding_mutations, metadata_mutations, nsys_mutations, range_mutations, run_cli,
    structure_mutations, timed_limit_s, to_bytes, type_mutations,
)

KINETO_CLASSES: dict[str, Callable[[], st.SearchStrategy[FuzzCase]]] = {
    "type": type_mutations, "range": range_mutations, "metadata": metadata_mutations,
    "structure": structure_mutations, "encoding": encoding_mutations,
}


def long_settings(n: int, seed: int | None) -> Callable[[Any], Any]:
    """Plain generation (no shrinking: a problem is kept with its first reproducer), seeded when asked."""
    base = settings(max_examples=max(1, n), deadline=None, database=None, derandomize=False,
                    phases=(Phase.generate,), suppress_health_check=list(HealthCheck))

    def apply(test: Any) -> Any:
        wrapped = base(test)
        return hypothesis.seed(seed)(wrapped) if seed is not None else wrapped

    return apply


def run_kineto(n_per_class: int, seed: int | None, findings: dict[str, Findings]) -> None:
    limit_s = timed_limit_s(clean_kineto_seconds())
    for name, strategy in KINETO_CLASSES.items():
        found = findings.setdefault(f"kineto {name}", Findings())

        @long_settings(n_per_class, seed)
        @given(strategy())
        def one(case: FuzzCase) -> None:
            found.add(case.mutation_class, case.reproducer(), *analyze_kineto(case, limit_s))

        one()


def run_nsys(n: int, seed: int | None, findings: dict[str, Findings]) -> None:
    limit_s = timed_limit_s(clean_seconds(NSYS_SAMPLE, runs=2))
    found = findings.setdefault("nsight", Findings())

    @long_settings(n, seed)
    @given(nsys_mutations())
    def one(mutation: NsysMutation) -> None:
        found.add(mutation.label.split(":", 1)[0], mutation.label, *analyze_nsys(mutation, limit_s))

    one()


def atheris_main(argv: list[str]) -> int:
    """Coverage-guided: atheris mutates bytes that start from the clean documents; every input is
    written to a file and read by ``traceview info``, which must exit 0 or 2 in one line."""
    try:
        import atheris
    except ImportError:
        print("atheris is not installed (pip install atheris): skipping the coverage-guided run")
        return 0
    with atheris.instrument_imports():  # the modules whose coverage guides the mutations
        from traceview import cli, loading  # noqa: F401
        from traceview.parsers import jsonstream, kineto  # noqa: F401
    folder = Path(tempfile.mkdtemp(prefix="traceview-atheris-"))
    path = folder / "fuzz_case.json"
    if not any(not a.startswith("-") for a in argv):  # no corpus named: seed one with clean documents
        corpus = folder / "corpus"
        corpus.mkdir()
        for n_steps, n_kernels, memory in ((1, 1, False), (2, 2, True), (3, 3, True)):
            (corpus / f"clean_{n_steps}_{n_kernels}_{memory}.json").write_bytes(
                to_bytes(clean_document(n_steps, n_kernels, memory)))
        argv = [*argv, str(corpus)]
    if not any(a.startswith("-max_len") for a in argv):
        argv = [*argv, "-max_len=65536"]  # the seeds are ~2-8 kB; libFuzzer's default is 4 kB

    def one_input(data: bytes) -> None:
        path.write_bytes(data)
        outcome = run_cli("info", str(path), "--no-cache")
        problems = check_exit(outcome, path)
        if problems:
            raise AssertionError(f"{problems}: input {data[:300]!r}")

    atheris.Setup([sys.argv[0], *argv], one_input)
    atheris.Fuzz()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kineto", type=int, default=2000, help="Kineto cases in all (split over 5 classes).")
    parser.add_argument("--nsys", type=int, default=300, help="Nsight cases.")
    parser.add_argument("--seed", type=int, default=None, help="Fix the seed (default: a fresh one).")
    parser.add_argument("--atheris", action="store_true", help="Run the coverage-guided entry point instead; "
                        "arguments after -- go to libFuzzer.")
    args, rest = parser.parse_known_args()
    os.environ.setdefault("TRACEVIEW_CACHE_DIR", tempfile.mkdtemp(prefix="traceview-fuzz-cache-"))
    if args.atheris:
        return atheris_main([a for a in rest if a != "--"])
    findings: dict[str, Findings] = {}
    started = time.perf_counter()
    run_kineto(args.kineto // len(KINETO_CLASSES), args.seed, findings)
    if args.nsys:
        run_nsys(args.nsys, args.seed, findings)
    total = sum(f.cases for f in findings.values())
    outcomes: dict[str, int] = {}
    for f in findings.values():
        for k, v in f.outcomes.items():
            outcomes[k] = outcomes.get(k, 0) + v
    print(f"{total} cases in {time.perf_counter() - started:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in outcomes.items()))
    for name, f in findings.items():
        print(f"\n== {name}: {f.summary()}")
    return 1 if outcomes.get("failed") else 0


if __name__ == "__main__":
    raise SystemExit(main())
