"""Jobs: analyze a whole job rank by rank, on local worker processes or a Dask cluster, and get the
same :class:`~traceview.report.Report` as the in-memory path.

The executors here run the map step of the core's pipeline elsewhere: one task per trace file
parses it and runs :func:`traceview.pipeline.analyze_rank` on each of its ranks alone (tables cut to
what any report figure needs), so a worker holds one file's trace at a time; the driver numbers
ranks and rows as ``traceview.load`` does, and the core reduces and builds the report::

    from traceview.jobs import make_executor
    report = traceview.pipeline.analyze("run/", executor=make_executor(workers=8))
    report = traceview.pipeline.analyze("run/", executor=make_executor(scheduler="tcp://head:8786"))

Only ``report["execution"]`` (executor, workers, timings, memory, failed files, absent ranks)
differs from ``traceview.pipeline.analyze("run/")``. See docs/scaling.md.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from traceview.errors import TraceviewError
from traceview.jobs.driver import JobProgress
from traceview.jobs.executors import DaskCluster, InProcess, JobExecutor, LocalProcesses
from traceview.jobs.planning import conflict_message, plan_ranks
from traceview.rank_planning import RankPlan
from traceview.jobs.tasks import FileResult, FileTask, analyze_file, analyze_group

#: the Dask scheduler address used when none is given (``tcp://host:port``)
SCHEDULER_ENV = "TRACEVIEW_SCHEDULER"


def make_executor(workers: int | None = None, scheduler: Any = None, *,
                  progress: JobProgress | None = None,
                  steps: Callable[[str, int, int], None] | None = None) -> JobExecutor:
    """The executor for ``analyze --workers N`` / ``--scheduler ADDR``.

    ``scheduler`` (an address or a ``distributed.Client``; when neither it nor ``workers`` is
    given, ``$TRACEVIEW_SCHEDULER``): a :class:`DaskCluster`, connected now. Otherwise
    :class:`LocalProcesses` with ``workers`` processes (0 or None: one per core). ``progress(done,
    total, failed)`` counts files as their tasks complete; ``steps("ranks", done, expected)`` the
    ranks (:data:`traceview.pipeline.StepProgress`). Raises :class:`TraceviewError` (one line)
    for a negative ``workers``, a missing ``dask.distributed`` or an unreachable scheduler.
    """
    if workers is not None and workers < 0:
        raise TraceviewError(f"--workers {workers}: must be 0 (one per core) or more")
    if scheduler is None and workers is None:
        scheduler = os.environ.get(SCHEDULER_ENV) or None
    executor: JobExecutor = (DaskCluster(scheduler, progress=progress) if scheduler is not None
                             else LocalProcesses(workers or 0, progress=progress))
    executor.steps = steps
    return executor


__all__ = [
    "SCHEDULER_ENV", "DaskCluster", "FileResult", "FileTask", "InProcess", "JobExecutor", "JobProgress",
    "LocalProcesses", "RankPlan", "analyze_file", "analyze_group", "conflict_message", "make_executor", "plan_ranks",
]
