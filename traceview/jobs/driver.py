"""The driver of a job: run the map task on every file (on some executor), number ranks and rows
as ``traceview.load`` does, and hand the core's reduce (:func:`traceview.pipeline.reduce_ranks`) the
per-rank results with what the report says of the inputs (a :class:`TraceOverview` equal to the
in-memory path's) and of the execution.

A file that fails never stops the job: it becomes a warning of the report and an entry of
``execution["missing"]``, and ranks of the job's ``world_size`` that no file provided are listed
in ``execution["absent_ranks"]`` (and warned about); the figures cover the other ranks.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from traceview.errors import TraceviewError
from traceview.findings import Options
from traceview.jobs.planning import conflict_message, plan_ranks, row_offsets
from traceview.jobs.tasks import FileResult, FileTask, memory_bytes
from traceview.rank_planning import RankPlan, number_rank_infos
from traceview.parsers.kineto import rank_from_filename
from traceview.pipeline import Mapped, compact_ranks
from traceview.report import TraceOverview

#: ``progress(files_done, files_total, files_failed)``, called as each file's task completes
JobProgress = Callable[[int, int, int], None]
#: ``steps(phase, done, total)`` (:data:`traceview.pipeline.StepProgress`): the "ranks" phase
StepCallback = Callable[[str, int, int], None]


class TaskRunner(Protocol):
    """Where the map tasks run (``traceview.jobs.executors``)."""

    name: str
    workers: int

    def run(self, tasks: list[FileTask], done: Callable[[FileResult], None]) -> None:
        """Run every task; call ``done`` with each answer (in any order) in this thread."""


def run_tasks(runner: TaskRunner, tasks: list[FileTask], progress: JobProgress | None,
              costs: list[dict[str, Any]], steps: StepCallback | None = None) -> dict[int, FileResult]:
    """The answers of ``tasks`` by file index; each task's cost is appended to ``costs``.
    ``steps("ranks", ranks_done, ranks_expected)`` as each answer arrives: the ranks expected are
    those come back and, for each file still out, the mean ranks per file so far (one before any),
    so the count ends at the job's ranks whatever the files hold."""
    results: dict[int, FileResult] = {}
    failed = 0
    ranks_done = 0
    if steps is not None:
        steps("ranks", 0, len(tasks))

    def done(result: FileResult) -> None:
        nonlocal failed, ranks_done
        results[result.index] = result
        failed += int(result.error is not None)
        ranks = len(result.batch.ranks) if result.batch is not None else 0
        costs.append({**result.stats, "ranks": ranks, "failed": result.error is not None})
        if progress is not None:
            progress(len(results), len(tasks), failed)
        if steps is not None:
            ranks_done += ranks
            per_file = ranks_done / len(results) if ranks_done else 1.0
            steps("ranks", ranks_done, ranks_done + round(per_file * (len(tasks) - len(results))))

    runner.run(tasks, done)
    return results


def run_job(runner: TaskRunner, files: list[Path], options: Options, *, use_cache: bool, skipped: list[Path],
            progress: JobProgress | None = None, steps: StepCallback | None = None) -> Mapped:
    """Analyze every rank of ``files`` on ``runner``: the per-rank results (packed), the inputs'
    overview and the execution figures (see the module docstring)."""
    started = time.perf_counter()
    costs: list[dict[str, Any]] = []
    tasks = [FileTask(str(f), i, options, use_cache) for i, f in enumerate(files)]
    results = run_tasks(runner, tasks, progress, costs, steps)
    plan = plan_ranks(list(results.values()), several=len(files) > 1)
    for index in plan.conflicts:
        results[index] = results[index].failed(conflict_message(plan, index, results[index].file))
    number_ranks(runner, results, plan, options, use_cache, costs)
    place_rows(results)
    seconds = time.perf_counter() - started
    ok = [results[i] for i in sorted(results) if results[i].error is None]
    failed = [results[i] for i in sorted(results) if results[i].error is not None]
    if not ok:
        reasons = "; ".join(str(r.error) for r in failed[:3]) + (" ..." if len(failed) > 3 else "")
        raise TraceviewError(f"no file of the job could be analysed: {reasons}")
    overview = job_overview(ok, plan, skipped)
    missing = [missing_file(r) for r in failed]
    absent = absent_ranks(overview)
    overview.warnings.extend(f"left out of the job: {r.error}" for r in failed)
    if absent:
        overview.warnings.append(f"rank{'s' if len(absent) > 1 else ''} {compact_ranks(absent)} of the job "
                                 f"(world size {world_size(overview)}) in no file: the figures cover the other ranks")
    batches = [r.batch for r in ok if r.batch is not None]
    n_ranks = sum(len(b.ranks) for b in batches)
    execution: dict[str, Any] = {
        "executor": runner.name, "workers": runner.workers, "files": len(files), "failed_files": len(failed),
        "ranks": n_ranks, "seconds": seconds, "ranks_per_second": n_ranks / seconds if seconds > 0 else None,
        "driver_peak_rss": memory_bytes("VmHWM"), **task_costs(costs),
        "missing": missing, "absent_ranks": absent, "world_size": world_size(overview),
    }
    return Mapped(batches=batches, overview=overview, execution=execution)


def number_ranks(runner: TaskRunner, results: dict[int, FileResult], plan: RankPlan, options: Options,
                 use_cache: bool, costs: list[dict[str, Any]]) -> None:
    """Apply the rank plan: files whose rank numbers change are analysed again under the new ones
    (rare: files that state no rank, Nsight processes of several files); the others only get the
    metadata ``traceview.load`` gives them."""
    again = plan.renumbered()
    offsets = row_offsets(results)
    tasks = [FileTask(results[i].file, i, options, use_cache, rank_map=mapping, row_offset=offsets[i])
             for i, mapping in sorted(again.items())]
    if tasks:
        results.update(run_tasks(runner, tasks, None, costs))
    for index, mapping in plan.maps.items():
        result = results[index]
        if index in again or result.error is not None:
            continue
        number_rank_infos(result.infos, mapping)
        if result.batch is not None:  # (the same metadata, also where a pickle made it a copy)
            result.batch.infos = {r: result.infos[r] for r in result.batch.ranks}


def place_rows(results: dict[int, FileResult]) -> None:
    """Row columns moved to rows of all (readable) files concatenated in file order, where the
    task could not know the offset (the files before it were being parsed at the same time)."""
    offsets = row_offsets(results)
    for index, result in results.items():
        shift = offsets[index] - result.row_offset
        if result.error is None and shift and result.batch is not None:
            result.batch = result.batch.shift_rows(shift).pack()
            result.row_offset = offsets[index]


def job_overview(ok: list[FileResult], plan: RankPlan, skipped: list[Path]) -> TraceOverview:
    """What ``traceview.load`` of the readable files says: their ranks' metadata (in rank order),
    each analysed rank's summary, and the warnings in the loader's order (the files' own, then
    the numbering's, then the files a directory held that are not traces)."""
    infos = dict(sorted(((rank, info) for r in ok for rank, info in r.infos.items()), key=lambda kv: kv[0]))
    summaries = {rank: s for r in ok if r.batch is not None for rank, s in r.batch.summaries.items()}
    warnings = list(dict.fromkeys([w for r in ok for w in r.warnings] + plan.warnings))
    warnings.extend(f"{p}: skipped, not a trace" for p in skipped)
    return TraceOverview(ranks=infos, summaries=summaries, warnings=warnings)


def world_size(overview: TraceOverview) -> int | None:
    sizes = [int(info.world_size) for info in overview.ranks.values() if info.world_size]
    return max(sizes) if sizes else None


def absent_ranks(overview: TraceOverview) -> list[int]:
    """Ranks of the job's world size that no readable file provided."""
    size = world_size(overview)
    return sorted(set(range(size)) - set(overview.ranks)) if size else []


def missing_file(result: FileResult) -> dict[str, Any]:
    """A failed file for ``execution["missing"]``: its name (no directory), the rank its name says,
    and why it failed."""
    path = Path(result.file)
    reason = str(result.error)
    if str(path.parent) not in ("", "."):
        reason = reason.replace(str(path.parent) + "/", "")
    return {"file": path.name, "rank": rank_from_filename(path), "reason": reason}


def task_costs(costs: list[dict[str, Any]]) -> dict[str, Any]:
    """Peak RSS of each worker process (the high-water mark over the tasks it ran; workers are
    numbered, host names are left out of the report), the size of each rank's result, and the
    tasks' wall and CPU seconds."""
    peaks: dict[str, int] = {}
    for c in costs:
        if c.get("peak_rss"):
            key = f"{c.get('host', '?')}:{c.get('pid', '?')}"
            peaks[key] = max(peaks.get(key, 0), int(c["peak_rss"]))
    workers = {f"worker {i}": peaks[key] for i, key in enumerate(sorted(peaks), start=1)}
    sizes = [float(c["result_bytes"]) / c["ranks"] for c in costs if c.get("result_bytes") and c["ranks"]]
    seconds = [float(c["seconds"]) for c in costs if c.get("seconds") is not None]
    cpu = [float(c["cpu_seconds"]) for c in costs if c.get("cpu_seconds") is not None]

    def spread(values: list[float]) -> dict[str, float] | None:
        if not values:
            return None
        return {"mean": float(np.mean(values)), "max": float(max(values)), "min": float(min(values)),
                "sum": float(sum(values))}

    return {"worker_peak_rss": workers, "max_worker_peak_rss": max(workers.values()) if workers else None,
            "result_bytes_per_rank": spread(sizes), "task_seconds": spread(seconds),
            "task_cpu_seconds": spread(cpu)}
