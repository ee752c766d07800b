"""Rank planning: one distinct rank number for every rank across the files of one run.

Ranks a file states are kept; ranks a parser only numbered (a format that does not say which global
rank a process was: ``InputFormat.numbers_ranks``) and files with no rank get the lowest free
numbers. :func:`assign_ranks` numbers and concatenates the traces of one load; a job
(``traceview.jobs``) plans with :func:`plan_ranks` from its files' rank metadata alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa

from traceview.errors import DuplicateRankError
from traceview.model import RankInfo, Trace, concat_traces


@dataclass
class RankPlan:
    """How ranks are numbered across the files of one run (see :func:`plan_ranks`)."""

    #: file index -> ``{old rank: new rank}`` for every file some of whose ranks get a number
    maps: dict[int, dict[int, int]] = field(default_factory=dict)
    #: file index -> (rank, the file that claimed it first, this file): a rank two files claim
    conflicts: dict[int, tuple[int, str, str]] = field(default_factory=dict)
    #: warnings about files that state no rank, in file order
    warnings: list[str] = field(default_factory=list)

    def renumbered(self) -> dict[int, dict[int, int]]:
        """The files whose rank numbers change."""
        return {i: m for i, m in self.maps.items() if any(old != new for old, new in m.items())}


def numbers_its_ranks(source_format: str) -> bool:
    """Whether the parser of ``source_format`` only numbers a file's ranks (``InputFormat.numbers_ranks``)."""
    from traceview.discovery import format_named

    fmt = format_named(source_format)
    return fmt is not None and fmt.numbers_ranks


def unranked_warning(source_path: str, rank: int) -> str:
    """What loading says of a file that states no rank."""
    return f"{source_path}: no rank in distributedInfo or file name; treated as rank {rank}"


def plan_ranks(files: Sequence[tuple[int, Mapping[int, RankInfo]]], *, several: bool,
               reserved: Mapping[int, str] | None = None) -> RankPlan:
    """Give every rank a distinct number across files (``files``: (file index, ranks), in file order).

    Ranks a file states (Kineto ``distributedInfo``, a file name) are kept; a file stating a rank an
    earlier file stated is a conflict. Ranks a parser only numbered (Nsight processes, when there are
    several files: an export does not say which global rank a process was) and files with no rank at
    all get the lowest free numbers, in file order, with a warning for the latter. ``reserved``:
    numbers no file may be given (a file that could not be read keeps the rank its name says).
    """
    plan = RankPlan()
    claimed: dict[int, str] = {}

    def numbered_only(info: RankInfo) -> bool:
        return several and numbers_its_ranks(info.source_format)

    for index, infos in files:
        stated = [(rank, info) for rank, info in infos.items() if rank >= 0 and not numbered_only(info)]
        clash = [(rank, info) for rank, info in stated if rank in claimed and several]
        if clash:
            rank, info = clash[0]
            plan.conflicts[index] = (rank, claimed[rank], info.source_path)
            continue
        claimed.update((rank, info.source_path) for rank, info in stated)
    for rank, name in (reserved or {}).items():
        claimed.setdefault(rank, name)
    next_free = 0
    for index, infos in files:
        if index in plan.conflicts:
            continue
        mapping: dict[int, int] = {}
        for rank, info in sorted(infos.items()):
            if rank >= 0 and not numbered_only(info):
                continue
            while next_free in claimed:
                next_free += 1
            mapping[rank] = next_free
            claimed[next_free] = info.source_path
            if rank < 0 and several:
                plan.warnings.append(unranked_warning(info.source_path, next_free))
        if mapping:
            plan.maps[index] = mapping
    return plan


def number_rank_infos(infos: Mapping[int, RankInfo], mapping: Mapping[int, int]) -> None:
    """Rank metadata numbered as planned (``{old: new}``; ``infos`` keyed by the old numbers): the new
    rank, how it was found, a warning when the file stated none."""
    for old, new in mapping.items():
        info = infos.get(old)
        if info is None:
            continue
        info.rank = new
        if old < 0:
            info.rank_source = "assigned (no rank in file or file name)"
            info.warnings.append(unranked_warning(info.source_path, new))
        else:
            info.rank_source += f"; renumbered {old} -> {new} across files"


def apply_rank_numbers(trace: Trace, mapping: Mapping[int, int]) -> Trace:
    """``trace`` with its ranks numbered as planned (:func:`number_rank_infos`, and the rank columns
    renamed when a number changes)."""
    number_rank_infos(trace.ranks, mapping)
    if any(old != new for old, new in mapping.items()):
        trace = renumber_ranks(trace, dict(mapping))
    return trace


def assign_ranks(traces: list[Trace]) -> Trace:
    """Number every rank across files (:func:`plan_ranks`) and concatenate; two files stating the
    same rank is an error naming both."""
    plan = plan_ranks(list(enumerate(tr.ranks for tr in traces)), several=len(traces) > 1)
    if plan.conflicts:
        rank, first, second = plan.conflicts[min(plan.conflicts)]
        raise DuplicateRankError(f"rank {rank} appears in two files: {first} and {second} "
                                 "(load one run at a time, or check the files' distributedInfo)")
    remapped = [apply_rank_numbers(tr, plan.maps.get(i, {})) for i, tr in enumerate(traces)]
    merged = concat_traces(remapped)
    merged.warnings = list(dict.fromkeys(merged.warnings + plan.warnings))
    return merged


def _with_ranks(table: pa.Table, mapping: dict[int, int]) -> pa.Table:
    """``table`` with its ``rank`` column (the first) renamed by ``mapping``."""
    if table.num_rows == 0:
        return table
    rank = table.column("rank").to_numpy()
    new_rank = rank.copy()
    for old, new in mapping.items():
        new_rank[rank == old] = new
    return table.set_column(0, table.schema.field("rank"), pa.array(new_rank.astype(np.int32)))


def renumber_ranks(tr: Trace, mapping: dict[int, int]) -> Trace:
    """``tr`` with its ranks renamed (``{old: new}``) in its events, links, steps, memory, counters
    and ranks dict (``traceview.jobs`` renames a file's ranks with it as :func:`load` does)."""
    events, links, steps, memory, counters = (_with_ranks(t, mapping) for t in
                                              (tr.events, tr.links, tr.steps, tr.memory, tr.counters))
    ranks = {mapping.get(r, r): info for r, info in tr.ranks.items()}
    return Trace(events=events, links=links, ranks=ranks, steps=steps, warnings=tr.warnings, memory=memory,
                 counters=counters)
