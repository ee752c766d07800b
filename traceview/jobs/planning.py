"""Rank numbers and row numbers across the files of a job, as ``traceview.load`` gives them.

A job learns the ranks of its files only once workers have parsed them, so the driver plans the
numbering afterwards (:func:`plan_ranks`) and has the few files whose ranks change analysed again
under their final numbers; row columns are moved to rows of all files concatenated in file order
(:func:`row_offsets`), so a job's tables match the in-memory path's even in their row numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traceview.jobs.tasks import FileResult, unranked_warning
from traceview.model import RankInfo
from traceview.parsers.kineto import rank_from_filename


@dataclass
class RankPlan:
    """How the job numbers its files' ranks."""

    #: file index -> ``{old rank: new rank}`` for every file some of whose ranks the job numbers
    maps: dict[int, dict[int, int]] = field(default_factory=dict)
    #: file index -> why it is left out (it claims a rank an earlier file claimed)
    conflicts: dict[int, str] = field(default_factory=dict)
    #: what ``traceview.load`` warns about the numbering, in its order
    warnings: list[str] = field(default_factory=list)

    def renumbered(self) -> dict[int, dict[int, int]]:
        """The files whose rank numbers change (they are analysed again under the new ones)."""
        return {i: m for i, m in self.maps.items() if any(old != new for old, new in m.items())}


def plan_ranks(results: list[FileResult], several: bool) -> RankPlan:
    """Rank numbers across files, following ``traceview.loading``: ranks a file states are kept;
    Nsight processes (when there are several files) and files without a rank get the lowest free
    numbers in file order. A file that claims a rank an earlier file claimed is left out (where
    ``traceview.load`` refuses the whole job), and a file that could not be read keeps the rank its
    name says, so no other file is given it."""
    plan = RankPlan()
    claimed: dict[int, str] = {}

    def numbered_only(info: RankInfo) -> bool:
        return several and info.rank_source.startswith("nsys")

    ok = sorted((r for r in results if r.error is None and r.infos), key=lambda r: r.index)
    for result in ok:
        stated = [(rank, info) for rank, info in result.infos.items() if rank >= 0 and not numbered_only(info)]
        clash = [(rank, info) for rank, info in stated if rank in claimed and several]
        if clash:
            rank, info = clash[0]
            plan.conflicts[result.index] = (f"{result.file}: rank {rank} appears in two files: {claimed[rank]} and "
                                            f"{info.source_path} (this file is left out; check the files' "
                                            "distributedInfo)")
            continue
        claimed.update((rank, info.source_path) for rank, info in stated)
    for failed in results:
        named = rank_from_filename(failed.file) if failed.error is not None else None
        if named is not None:
            claimed.setdefault(named, failed.file)
    next_free = 0
    for result in ok:
        if result.index in plan.conflicts:
            continue
        mapping: dict[int, int] = {}
        for rank, info in sorted(result.infos.items()):
            if rank >= 0 and not numbered_only(info):
                continue
            while next_free in claimed:
                next_free += 1
            mapping[rank] = next_free
            claimed[next_free] = info.source_path
            if rank < 0 and several:
                plan.warnings.append(unranked_warning(info.source_path, next_free))
        if mapping:
            plan.maps[result.index] = mapping
    return plan


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
