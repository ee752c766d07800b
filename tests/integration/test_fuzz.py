"""The fuzz suite: generated hostile Kineto traces and Nsight exports against the CLI's contract.

Each case must end in exit 0 with every event accounted for (events read = mapped + skipped by
reason), or in exit 2 with one line naming the file; never a traceback or an internal error, and
never over ``TIME_FACTOR`` times the time (or memory) of the clean input. Cases are generated with a
fixed derandomized seed, so CI runs the same few hundred every time; a failing test lists every
distinct problem found with one reproducer each (instead of stopping at the first and shrinking,
which would cost minutes). ``benchmarks/fuzz_long.py`` runs many more.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fuzz_strategies import (
    NSYS_SAMPLE, TIME_FACTOR, Findings, FuzzCase, NsysMutation, Outcome, analyze_kineto, analyze_nsys,
    check_exit, clean_document, clean_kineto_seconds, clean_seconds, encoding_mutations, kineto_accounting,
    metadata_mutations, nsys_accounting, nsys_mutations, range_mutations, run_cli, structure_mutations,
    timed_limit_s, to_bytes, type_mutations, write_case,
)

#: Resident memory of the clean input below this is noise (allocator arenas, imports).
MIN_CLEAN_RSS_KB = 20_000
#: Examples per test; TRACEVIEW_FUZZ_SCALE multiplies them (CI keeps the default: ~1 minute in all).
SCALE = float(os.environ.get("TRACEVIEW_FUZZ_SCALE", "1"))
FAST = settings(max_examples=1, deadline=None, derandomize=True, database=None,
                phases=(Phase.explicit, Phase.generate),
                suppress_health_check=list(HealthCheck))


def examples(n: int) -> settings:
    return settings(FAST, max_examples=max(1, int(n * SCALE)))


def assert_none(findings: Findings) -> None:
    if findings.first:
        pytest.fail(findings.summary(), pytrace=False)


@pytest.fixture(scope="module")
def clean_analyze_s() -> float:
    return clean_kineto_seconds()


# ---------------------------------------------------------------------------------- Kineto
KINETO_CLASSES: dict[str, Callable[[], st.SearchStrategy[FuzzCase]]] = {
    "type": type_mutations, "range": range_mutations, "metadata": metadata_mutations,
    "structure": structure_mutations, "encoding": encoding_mutations,
}


@pytest.mark.parametrize("mutation_class", sorted(KINETO_CLASSES))
def test_kineto_mutations_keep_the_contract(mutation_class, clean_analyze_s):
    findings = Findings()
    limit_s = timed_limit_s(clean_analyze_s)

    @examples(30)
    @given(KINETO_CLASSES[mutation_class]())
    def one(case: FuzzCase) -> None:
        findings.add(case.mutation_class, case.reproducer(), *analyze_kineto(case, limit_s))

    one()
    assert findings.cases >= 1
    assert_none(findings)


@pytest.mark.parametrize("command", ["info", "redact", "convert"])
def test_other_commands_answer_bad_bytes_in_one_line(command):
    """info, redact and convert read the same inputs through their own paths (redact re-writes
    the JSON): each ends in exit 0 or in one line naming the file."""
    findings = Findings()

    @examples(25)
    @given(st.one_of(encoding_mutations(), structure_mutations(), type_mutations()))
    def one(case: FuzzCase) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = write_case(case, Path(tmp))
            extra = {"info": ["--no-cache"], "redact": ["-o", f"{tmp}/out{case.suffix}"],
                     "convert": ["-o", f"{tmp}/out", "--no-cache"]}[command]
            outcome = run_cli(command, str(path), *extra)
        findings.add(case.mutation_class, case.reproducer(), outcome.code, check_exit(outcome, path))

    one()
    assert_none(findings)


# ---------------------------------------------------------------------------------- Nsight
@pytest.fixture(scope="module")
def clean_nsys_s() -> float:
    return clean_seconds(NSYS_SAMPLE, runs=2)


def test_nsys_mutations_keep_the_contract(clean_nsys_s):
    findings = Findings()
    limit_s = timed_limit_s(clean_nsys_s)

    @examples(30)
    @given(nsys_mutations())
    def one(mutation: NsysMutation) -> None:
        findings.add(mutation.label.split(":", 1)[0], mutation.label, *analyze_nsys(mutation, limit_s))

    one()
    assert_none(findings)


def test_the_accounting_checks_can_fail():
    """The checks above are not vacuous: a report that loses an event, or an export row, fails them."""
    rank = {"event_counts": {"events_read": 5, "mapped": 3, "metadata": 1}, "span_ns": 10}
    assert kineto_accounting(rank, 5)
    assert kineto_accounting({"event_counts": {"events_read": 4, "mapped": 4}, "span_ns": 1}, 5)
    counts = {"NVTX_EVENTS.read": 3, "NVTX_EVENTS.mapped": 3}
    assert nsys_accounting([{"rank": 0, "event_counts": counts, "span_ns": 1}], {"NVTX_EVENTS": 4})
    two_lines = Outcome(2, "", "traceview: error: x\nmore\n", 0.0)
    assert check_exit(two_lines, Path("x"))
    assert check_exit(Outcome(3, "", "traceview: error: internal error: boom", 0.0), Path("x"))


# ---------------------------------------------------------------------------------- memory
PROBE = """
import json, resource, sys, time
from traceview import cli
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
sys.argv = ["traceview", *sys.argv[1:]]
code = 0
try:
    cli.main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "seconds": time.perf_counter() - started,
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before}), file=sys.stderr)
"""


def many_names_document(n_names: int, long_name_bytes: int = 0, decoys: int = 0, depth: int = 0) -> bytes:
    """A trace with many distinct kernel names (what made one long name cost distinct x longest)."""
    doc = clean_document(1, 1, False)
    events = doc["traceEvents"]
    events += [{"ph": "X", "cat": "kernel", "name": f"kernel_{k}", "pid": 0, "tid": 7, "ts": 2000 + 10 * k,
                "dur": 5, "args": {"stream": 7, "device": 0}} for k in range(n_names)]
    if long_name_bytes:
        events[-1]["name"] = "L" * long_name_bytes
    if depth:
        events[-1]["args"]["deep"] = "DEEP"
    if decoys:
        doc = {"decoy": [{"traceEvents": []}] * decoys, **doc}
    text = to_bytes(doc)
    return text.replace(b'"DEEP"', b'{"a": ' * depth + b"1" + b"}" * depth) if depth else text


def measure(path: Path, folder: Path) -> dict[str, Any]:
    """Exit code, seconds and peak resident memory growth of one analyze run, in its own process."""
    env = dict(os.environ, COLUMNS="200")
    done = subprocess.run([sys.executable, "-c", PROBE, "analyze", str(path), "--no-cache", "--format", "json",
                           "-o", str(folder / "report.json")], capture_output=True, text=True, env=env,
                          timeout=120)
    return dict(json.loads(done.stderr.strip().splitlines()[-1]), stderr=done.stderr)


@pytest.mark.parametrize("label, hostile", [
    ("1 MB kernel name", {"long_name_bytes": 1 << 20}),
    ("20,000 decoy traceEvents in metadata", {"decoys": 20_000}),
    ("args nested 10,000 deep", {"depth": 10_000}),
])
def test_hostile_input_costs_at_most_10x_the_clean_one(tmp_path, label, hostile):
    clean, bad = tmp_path / "clean.json", tmp_path / "fuzz_case.json"
    clean.write_bytes(many_names_document(300))
    bad.write_bytes(many_names_document(300, **hostile))
    base = measure(clean, tmp_path)
    got = measure(bad, tmp_path)
    assert base["code"] == 0, base["stderr"]
    assert got["code"] in (0, 2), f"{label}: {got['stderr'][-500:]}"
    assert got["seconds"] <= timed_limit_s(base["seconds"]), f"{label}: {got['seconds']:.2f} s vs {base['seconds']:.2f} s"
    limit_kb = TIME_FACTOR * max(base["rss_kb"], MIN_CLEAN_RSS_KB)
    assert got["rss_kb"] <= limit_kb, f"{label}: {got['rss_kb']} kB vs clean {base['rss_kb']} kB"
