"""The driver of a job: run the map task on every file (on some executor), number ranks and rows
as ``traceview.load`` does, and hand the core's reduce (:func:`traceview.pipeline.reduce_ranks`) the
per-rank results with what the report says of the inputs (a :class:`TraceOverview` equal to the
in-memory path's) and of the execution.

A file that fails never stops the job: it becomes a warning of the report and an entry of
``execution["missing"]``, and ranks of the job's ``world_size`` that no file provided are listed
in ``execution["absent_ranks"]`` (and warned about); the figures cover the other ranks.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from traceview.errors import TraceviewError
from traceview.findings import Options
from traceview.jobs.planning import conflict_message, group_files, plan_ranks, row_offsets
from traceview.jobs.tasks import FileResult, FileTask, memory_bytes
from traceview.rank_planning import RankPlan, number_rank_infos
from traceview.parsers.kineto import rank_from_filename
from traceview.pipeline import BatchResult, Mapped, compact_ranks, map_rows
from traceview.report import TraceOverview

#: ``progress(files_done, files_total, files_failed)``, called as each file's task completes
JobProgress = Callable[[int, int, int], None]
#: ``steps(phase, done, total)`` (:data:`traceview.pipeline.StepProgress`): the "ranks" phase
StepCallback = Callable[[str, int, int], None]


class TaskRunner(Protocol):
    """Where the map tasks run (``traceview.jobs.executors``)."""

    name: str
    workers: int

    def run(self, tasks: list[list[FileTask]], done: Callable[[FileResult], None]) -> None:
        """Run every task (a group of files: ``analyze_group``); call ``done`` with each file's
        answer (in any order) in this thread."""


def run_tasks(runner: TaskRunner, tasks: list[list[FileTask]], progress: JobProgress | None,
              costs: list[dict[str, Any]], steps: StepCallback | None = None) -> dict[int, FileResult]:
    """The answers of ``tasks`` (groups of files) by file index; each task's cost is appended to
    ``costs``. ``steps("ranks", ranks_done, ranks_expected)`` as each answer arrives: the ranks
    expected are those come back and, for each file still out, the mean ranks per file so far (one
    before any), so the count ends at the job's ranks whatever the files hold."""
    total = sum(len(group) for group in tasks)
    results: dict[int, FileResult] = {}
    failed = 0
    ranks_done = 0
    if steps is not None:
        steps("ranks", 0, total)

    def done(result: FileResult) -> None:
        nonlocal failed, ranks_done
        results[result.index] = result
        failed += int(result.error is not None)
        ranks = len(result.batch.ranks) if result.batch is not None else 0
        if result.stats:  # (the other files of a group: their cost is the carrier's)
            costs.append({**result.stats, "ranks": ranks, "failed": result.error is not None})
        if progress is not None:
            progress(len(results), total, failed)
        if steps is not None:
            ranks_done += ranks
            per_file = ranks_done / len(results) if ranks_done else 1.0
            steps("ranks", ranks_done, ranks_done + round(per_file * (total - len(results))))

    runner.run(tasks, done)
    return results


def run_job(runner: TaskRunner, files: list[Path], options: Options, *, use_cache: bool, skipped: list[Path],
            progress: JobProgress | None = None, steps: StepCallback | None = None) -> Mapped:
    """Analyze every rank of ``files`` on ``runner``: the per-rank results (packed), the inputs'
    overview and the execution figures (see the module docstring)."""
    started = time.perf_counter()
    costs: list[dict[str, Any]] = []
    tasks = [[FileTask(str(files[i]), i, options, use_cache) for i in group]
             for group in group_files(files, runner.workers)]
    results = run_tasks(runner, tasks, progress, costs, steps)
    plan = plan_ranks(list(results.values()), several=len(files) > 1)
    regrouped = regrouped_files(results, plan)
    for index in plan.conflicts:
        results[index] = results[index].failed(conflict_message(plan, index, results[index].file))
    number_ranks(runner, results, plan, options, use_cache, costs, regrouped)
    place_rows(results)
    group_infos(results)
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
                 use_cache: bool, costs: list[dict[str, Any]], regrouped: set[int]) -> None:
    """Apply the rank plan: files whose rank numbers change are analysed again under the new ones
    (rare: files that state no rank, Nsight processes of several files), and so are the files of
    ``regrouped`` (:func:`regrouped_files`), one by one; the others only get the metadata
    ``traceview.load`` gives them."""
    again = plan.renumbered()
    offsets = row_offsets(results)
    redo = set(again) | regrouped
    tasks = [[FileTask(results[i].file, i, options, use_cache, rank_map=again.get(i), row_offset=offsets[i])]
             for i in sorted(redo) if i in again or results[i].error is None]
    if tasks:
        results.update(run_tasks(runner, tasks, None, costs))
    for index, mapping in plan.maps.items():
        result = results[index]
        if index in again or result.error is not None:
            continue
        number_rank_infos(result.infos, mapping)


def regrouped_files(results: dict[int, FileResult], plan: RankPlan) -> set[int]:
    """The files of the groups that must be analysed again file by file: a group holding a file
    whose ranks the plan renumbers or leaves out, or whose ranks interleave with another batch's
    (the reduce joins batches in rank order, so each group must be a run of the job's ranks)."""
    again = set(plan.renumbered()) | set(plan.conflicts)
    units = {i: r.batch_files for i, r in results.items() if r.batch is not None and len(r.batch_files) > 1}
    bad = {i for i, members in units.items() if again & set(members)}

    def ranks_of(members: tuple[int, ...]) -> list[int]:  # as the plan numbers them
        return [plan.maps.get(m, {}).get(rank, rank) for m in members for rank in results[m].infos]

    while True:
        spans = []
        for i, r in results.items():
            ranks = ranks_of(units.get(i, (i,))) if r.batch is not None and i not in bad else []
            if ranks:
                spans.append((min(ranks), max(ranks), i))
        for i in bad:  # its files' batches once analysed alone
            spans.extend((rank, rank, -1) for rank in ranks_of(units[i]))
        overlapping = interleaved(spans) & set(units)
        if not overlapping - bad:
            break
        bad |= overlapping
    return {m for i in bad for m in units[i]}


def interleaved(spans: list[tuple[int, int, int]]) -> set[int]:
    """The owners of the rank spans ``(lowest, highest, owner)`` that overlap another span."""
    out: set[int] = set()
    reach, reach_owner = None, -1
    for low, high, owner in sorted(spans):
        if reach is not None and low <= reach:
            out.update((owner, reach_owner))
        if reach is None or high > reach:
            reach, reach_owner = high, owner
    return out


def place_rows(results: dict[int, FileResult]) -> None:
    """Row columns moved to rows of all (readable) files concatenated in file order, where the
    task could not know the offset (the files before it were being parsed at the same time). A
    group's batch holds its files' rows concatenated: each file's rows are moved to its own place."""
    offsets = row_offsets(results)
    for index, result in results.items():
        if result.error is not None or result.batch is None:
            continue
        members = result.batch_files or (index,)
        starts = np.cumsum([0] + [results[m].events for m in members])[:-1]
        shifts = {offsets[m] - int(start) for m, start in zip(members, starts)}
        if len(shifts) == 1:
            shift = shifts.pop() - result.row_offset
            if shift:
                result.batch = result.batch.shift_rows(shift).pack()
        else:  # files of the group apart in file order: a row map
            rows = np.concatenate([np.arange(offsets[m], offsets[m] + results[m].events, dtype=np.int64)
                                   for m in members])
            result.batch = rows_mapped(result.batch, rows)
        result.row_offset = offsets[index]


def rows_mapped(batch: BatchResult, rows: np.ndarray) -> BatchResult:
    """``batch`` (packed) with each row column's row ``r`` moved to ``rows[r]``."""
    tables, gathered = batch.unpack()
    moved = {a: {t: map_rows(f, rows) for t, f in ts.items()} for a, ts in tables.items()}
    inputs = {a: g.remap_rows(rows, 0) for a, g in gathered.items()}
    return dataclasses.replace(batch, tables=moved, gathered=inputs, payload=b"").pack()


def group_infos(results: dict[int, FileResult]) -> None:
    """Each batch's rank metadata: that of the files it holds, as numbered (also where a pickle
    made it a copy)."""
    for index, result in results.items():
        if result.batch is None or result.error is not None:
            continue
        infos = {rank: info for m in (result.batch_files or (index,)) for rank, info in results[m].infos.items()}
        result.batch.infos = {r: infos[r] for r in result.batch.ranks}


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
