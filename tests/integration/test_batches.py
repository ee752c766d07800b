"""Batches of ranks (issue 26): every analysis runs once per batch (all ranks in memory, one file's
ranks in a job's task), on an analysis context of that batch alone. So:

- a job of 64 ranks gives the same report analysed as one batch in memory and as 64 batches (one
  per file, ``InProcess``), figure for figure (the JSON equal apart from ``execution``);
- two threads analysing two traces at the same time get the reports each gets alone (nothing is
  shared between two contexts).
"""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import traceview
from builders import comparable_report as comparable, json_differences as differences
from conftest import SAMPLE_TRACES, require_shared
from traceview.jobs import InProcess
from traceview.pipeline import analyze

SAMPLE_4RANK = SAMPLE_TRACES / "synthetic_4rank"


def copies_of(folder: Path, out: Path, copies: int) -> int:
    """``copies`` copies of every Kineto file of ``folder`` in ``out``, copy ``c`` of rank ``r`` as
    rank ``r + c * ranks`` of a job ``copies`` times the size (the files' order is their ranks');
    returns the job's ranks."""
    files = sorted(p for p in folder.iterdir() if p.name.startswith("rank") and p.name.endswith((".json", ".json.gz")))
    docs = [json.loads(gzip.open(p).read() if p.suffix == ".gz" else p.read_text()) for p in files]
    ranks = len(docs)
    for c in range(copies):
        for r, doc in enumerate(docs):
            info = dict(doc.get("distributedInfo") or {})
            info["rank"] = r + c * ranks
            info["world_size"] = ranks * copies
            (out / f"rank{info['rank']}.json").write_text(json.dumps({**doc, "distributedInfo": info}))
    return ranks * copies


def test_64_ranks_same_report_as_one_batch_and_as_a_batch_per_file(tmp_path: Path) -> None:
    assert copies_of(SAMPLE_4RANK, tmp_path, 16) == 64
    one_batch = analyze(tmp_path, use_cache=False)
    per_file = analyze(tmp_path, use_cache=False, executor=InProcess())
    assert one_batch["summary"]["num_ranks"] == 64 and per_file["execution"]["ranks"] == 64
    diff = differences(comparable(one_batch), comparable(per_file))
    assert diff == [], f"{len(diff)} differences, first: " + "\n".join(diff[:20])
    # the 16 copies of a rank are found alike: every finding of the job covers its 16 copies
    per_rank = [f for f in one_batch["findings"] if f.get("evidence", {}).get("ranks")]
    assert per_rank and all(f["evidence"]["ranks"] % 16 == 0 for f in per_rank)


def test_the_shared_8_rank_job_as_one_batch_and_a_batch_per_file() -> None:
    job = require_shared() / "kineto" / "param_dlrm_8ranks_v100"
    diff = differences(comparable(analyze(job, use_cache=False)),
                       comparable(analyze(job, use_cache=False, executor=InProcess())))
    assert diff == [], f"{len(diff)} differences, first: " + "\n".join(diff[:20])


def test_two_threads_two_traces_as_one_after_the_other() -> None:
    traces = [traceview.load(SAMPLE_4RANK, use_cache=False),
              traceview.load(SAMPLE_TRACES / "synthetic_nsys.sqlite", use_cache=False)]
    alone = [comparable(analyze(t)) for t in traces]
    for _ in range(3):
        got: list[Any] = [None, None]
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def run(i: int) -> None:
            try:
                start.wait()
                got[i] = comparable(analyze(traces[i]))
            except BaseException as exc:  # surfaced below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for i in range(2):
            diff = differences(alone[i], got[i])
            assert diff == [], f"trace {i}: {len(diff)} differences, first: " + "\n".join(diff[:10])


@pytest.mark.parametrize("other", ["synthetic_4rank", "synthetic_nsys.sqlite"])
def test_the_same_trace_in_two_threads(other: str) -> None:
    """One trace object analysed by two threads at once (the app does this): the contexts share the
    trace read-only and nothing else."""
    trace = traceview.load(SAMPLE_TRACES / other, use_cache=False)
    alone = comparable(analyze(trace))
    got: list[Any] = []
    lock = threading.Lock()

    def run() -> None:
        report = comparable(analyze(trace))
        with lock:
            got.append(report)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 2 and all(differences(alone, g) == [] for g in got)
