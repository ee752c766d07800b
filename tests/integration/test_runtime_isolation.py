"""The library has no side effects on its host process: ``traceview.load`` and ``traceview.analyze``
called from Python leave the C allocator, the garbage collector, the exit handlers and Arrow's
memory pool as they found them. Allocator tuning, GC tricks and the early exit belong to the
``traceview`` command (``traceview.runtime``), and only the command imports that module.

Each case runs in a fresh interpreter that, before importing traceview, replaces ``ctypes.CDLL``
with a subclass recording every call of the C library's heap functions (``mallopt``,
``malloc_trim``, ...) made through ctypes, the only way Python code reaches them, from any module
and any forked worker (each appends to a log file). Whatever accessor the code uses, a call is seen.
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE_TRACES, SHARED_TRACES

#: the C library's functions that change or trim the heap
HEAP_FUNCTIONS = ("mallopt", "malloc_trim", "mallctl", "malloc_set_state")

SCRIPT = r'''
import atexit, ctypes, gc, json, os, signal, sys

LOG = os.environ["TV_HEAP_CALLS"]
WATCHED = set(sys.argv[2].split(","))


def recorded(name, function):
    def call(*args):
        with open(LOG, "a") as log:
            log.write(json.dumps([os.getpid(), name, [int(a) for a in args]]) + "\n")
        return function(*args)
    return call


class RecordingCDLL(ctypes.CDLL):  # CDLL.__getattr__ looks functions up through __getitem__
    def __getitem__(self, name):
        function = super().__getitem__(name)
        return recorded(name, function) if name in WATCHED else function


ctypes.CDLL = RecordingCDLL
ctypes.cdll = ctypes.LibraryLoader(RecordingCDLL)
forks = []
os.register_at_fork(after_in_parent=lambda: forks.append(1))


def state():
    import pyarrow as pa
    return {"gc_enabled": gc.isenabled(), "gc_threshold": list(gc.get_threshold()),
            "gc_freeze_count": gc.get_freeze_count(), "atexit_handlers": atexit._ncallbacks(),
            "arrow_pool": pa.default_memory_pool().backend_name, "sigint": repr(signal.getsignal(signal.SIGINT)),
            "switch_interval": sys.getswitchinterval(), "recursion_limit": sys.getrecursionlimit()}


case, path = sys.argv[1], sys.argv[3]
# the standard library's own exit handler, registered when multiprocessing is first imported (the
# loader asks it for the cores), is not a setting of traceview's: imported before the snapshot
import multiprocessing, concurrent.futures.process  # noqa: E401,F401
import traceview
before = state()
if case == "load":
    trace = traceview.load(path, use_cache=False)
    rows = trace.num_events
else:
    report = traceview.analyze(path, use_cache=False)
    rows = len(report.findings)
after = state()
print(json.dumps({"before": before, "after": after, "rows": rows, "forks": len(forks),
                  "runtime_imported": "traceview.runtime" in sys.modules}))
'''


def run_case(case: str, path: Path, tmp_path: Path) -> dict:
    log = tmp_path / "heap_calls.jsonl"
    env = {**os.environ, "TV_HEAP_CALLS": str(log), "TRACEVIEW_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", SCRIPT, case, ",".join(HEAP_FUNCTIONS), str(path)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["heap_calls"] = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return out


def assert_untouched(out: dict) -> None:
    assert out["rows"] > 0
    assert out["heap_calls"] == [], f"library code called the C heap: {out['heap_calls'][:5]}"
    assert out["after"] == out["before"], "process-wide state changed"
    assert not out["runtime_imported"], "the library imported traceview.runtime (the command's process only)"


@pytest.mark.parametrize("case", ["load", "analyze"])
def test_the_four_rank_sample_leaves_the_process_alone(case: str, tmp_path: Path) -> None:
    assert_untouched(run_case(case, SAMPLE_TRACES / "synthetic_4rank", tmp_path))


@pytest.fixture(scope="module")
def big_plain_kineto(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real Kineto trace as plain JSON above the parallel parse's threshold (54 MB), so that a
    load with two or more cores cuts it into ranges parsed by worker processes."""
    source = SHARED_TRACES / "kineto" / "hta_df_index_resolver_v100_rank1.json.gz"
    if not source.exists():
        pytest.skip(f"{source} is absent (the shared traces)")
    target = tmp_path_factory.mktemp("big") / "rank1.json"
    target.write_bytes(gzip.decompress(source.read_bytes()))
    return target


def test_a_parallel_parse_and_its_analyses_leave_the_process_alone(big_plain_kineto: Path, tmp_path: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: the load parses in one process")
    out = run_case("analyze", big_plain_kineto, tmp_path)
    assert out["forks"] > 0, "the parse did not take the parallel path"
    assert_untouched(out)


def test_the_recorder_sees_the_commands_heap_calls(tmp_path: Path) -> None:
    """The recording is not blind: the ``traceview`` command's own load makes the calls."""
    log = tmp_path / "heap_calls.jsonl"
    script = SCRIPT.split("def state():")[0] + (
        "sys.argv = ['traceview', 'info', sys.argv[3], '--no-cache']\n"
        "from traceview.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n")
    env = {**os.environ, "TV_HEAP_CALLS": str(log), "TRACEVIEW_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", script, "cli", ",".join(HEAP_FUNCTIONS),
                           str(SAMPLE_TRACES / "synthetic_4rank")], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    names = {json.loads(line)[1] for line in log.read_text().splitlines()}
    assert {"mallopt", "malloc_trim"} <= names, names


def test_only_the_command_line_imports_the_runtime() -> None:
    """``traceview.runtime`` is imported by ``traceview.cli`` and the commands only, and no parser
    imports the loader (parsers get what they need from ``traceview.parsing``), at any depth."""
    offenders = []
    folders = {"traceview": "traceview", "parsers": "traceview.parsers", "analyses": "traceview.analyses",
               "app": "traceview.app"}
    for folder, package in folders.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            module = ".".join([package, *path.relative_to(REPO / folder).with_suffix("").parts])
            cli = module == "traceview.cli" or module.startswith("traceview.commands.") or module == "traceview.runtime"
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [f"{node.module}.{a.name}" for a in node.names] + [str(node.module)]
                         if isinstance(node, ast.ImportFrom) and node.module else [])
                for name in names:
                    if (name == "traceview.runtime" or name.startswith("traceview.runtime.")) and not cli:
                        offenders.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
                    if folder == "parsers" and (name == "traceview.loading" or name.startswith("traceview.loading.")):
                        offenders.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
    assert not offenders, "\n".join(offenders)


def test_a_library_process_keeps_its_collector(tmp_path: Path) -> None:
    """In this (test) process too: the collector's state is what it was before a load and an analysis."""
    import gc

    import traceview

    before = (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count())
    traceview.analyze(traceview.load(SAMPLE_TRACES / "synthetic_4rank", use_cache=False))
    assert (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()) == before
