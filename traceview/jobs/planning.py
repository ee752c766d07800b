"""Rank numbers and row numbers across the files of a job, as ``traceview.load`` gives them.

A job learns the ranks of its files only once workers have parsed them, so the driver plans the
numbering afterwards (:func:`plan_ranks`) and has the few files whose ranks change analysed again
under their final numbers; row columns are moved to rows of all files concatenated in file order
(:func:`row_offsets`), so a job's tables match the in-memory path's even in their row numbers.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

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


#: a file at least this large (on disk) is a task of its own: its analyses outweigh their fixed cost
GROUP_FILE_MAX_BYTES = 4 << 20
#: the most bytes (on disk) of the files of one group: what a worker holds parsed at once
GROUP_MAX_BYTES = 32 << 20
#: the most files of one group
GROUP_MAX_FILES = 64
#: groups per worker at least, so workers finish together
GROUPS_PER_WORKER = 4


def group_files(files: list[Path], workers: int) -> list[list[int]]:
    """The job's files (by index) as tasks: small files in groups analysed as one batch each
    (``analyze_group``), large ones alone. A group's ranks should be a run of consecutive ranks
    (the reduce joins batches in rank order), so files are grouped in the order of the rank their
    name says (file order for those whose name says none), and the driver analyses a group whose
    ranks turn out to interleave with another's again file by file. A group holds at most
    :data:`GROUP_MAX_FILES` files and :data:`GROUP_MAX_BYTES`, and there are at least
    :data:`GROUPS_PER_WORKER` tasks per worker where the files allow."""
    sizes = [file_bytes(f) for f in files]
    small = [i for i in range(len(files)) if sizes[i] < GROUP_FILE_MAX_BYTES]
    alone = [[i] for i in range(len(files)) if sizes[i] >= GROUP_FILE_MAX_BYTES]
    named = {i: rank_from_filename(files[i]) for i in small}
    order = sorted(small, key=lambda i: (named[i] is None, named[i] if named[i] is not None else i, i))
    per_group = max(1, min(GROUP_MAX_FILES, math.ceil(len(order) / max(1, workers * GROUPS_PER_WORKER))))
    groups: list[list[int]] = []
    current: list[int] = []
    held = 0
    for i in order:
        if current and (len(current) >= per_group or held + sizes[i] > GROUP_MAX_BYTES):
            groups.append(current)
            current, held = [], 0
        current.append(i)
        held += sizes[i]
    if current:
        groups.append(current)
    return sorted(alone + [sorted(g) for g in groups], key=lambda g: g[0])


def file_bytes(path: Path) -> int:
    """The size of ``path`` on disk (0 when it cannot be read: its task says why)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
