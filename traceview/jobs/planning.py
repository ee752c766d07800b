"""Rank numbers and row numbers across the files of a job, as ``traceview.load`` gives them.

A job learns the ranks of its files only once workers have parsed them, so the driver plans the
numbering afterwards (:func:`plan_ranks`) and has the few files whose ranks change analysed again
under their final numbers; row columns are moved to rows of all files concatenated in file order
(:func:`row_offsets`), so a job's tables match the in-memory path's even in their row numbers.
"""

from __future__ import annotations

from traceview.jobs.tasks import FileResult
from traceview.rank_planning import RankPlan
from traceview.rank_planning import plan_ranks as core_plan_ranks
from traceview.parsers.kineto import rank_from_filename


def plan_ranks(results: list[FileResult], several: bool) -> RankPlan:
    """Rank numbers across the job's files, by the loader's own rule (``traceview.rank_planning.plan_ranks``):
    a file that claims a rank an earlier file claimed is left out (where ``traceview.load`` refuses
    the whole run), and a file that could not be read keeps the rank its name says, so no other
    file is given it."""
    ok = sorted((r for r in results if r.error is None and r.infos), key=lambda r: r.index)
    reserved: dict[int, str] = {}
    for failed in results:
        named = rank_from_filename(failed.file) if failed.error is not None else None
        if named is not None:
            reserved.setdefault(named, failed.file)
    return core_plan_ranks([(r.index, r.infos) for r in ok], several=several, reserved=reserved)


def conflict_message(plan: RankPlan, index: int, file: str) -> str:
    """Why file ``index`` is left out of the job (it claims a rank an earlier file claimed)."""
    rank, first, second = plan.conflicts[index]
    return (f"{file}: rank {rank} appears in two files: {first} and {second} (this file is left out; "
            "check the files' distributedInfo)")


def row_offsets(results: dict[int, FileResult]) -> dict[int, int]:
    """File index -> rows of the files before it (failed files hold none): where its rows start
    in the events of the job's files concatenated in file order."""
    offsets: dict[int, int] = {}
    running = 0
    for index in sorted(results):
        offsets[index] = running
        if results[index].error is None:
            running += results[index].events
    return offsets
