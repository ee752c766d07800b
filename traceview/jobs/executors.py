"""Where a job's map tasks run: local worker processes, this process, or a Dask cluster.

Each executor implements the core's :class:`traceview.pipeline.Executor` protocol
(``analyze_files``) through :func:`traceview.jobs.driver.run_job`; they differ only in how they
run the tasks (``run``), so every executor gives the same report.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from traceview.errors import TraceviewError
from traceview.findings import Options
from traceview.jobs.driver import JobProgress, run_job
from traceview.jobs.tasks import FileResult, FileTask, analyze_file, analyze_group, failed_task
from traceview.pipeline import Mapped

Done = Callable[[FileResult], None]
#: one map task: the files ``analyze_group`` analyses as one batch (most often one file)
Group = list[FileTask]


class JobExecutor:
    """Runs a job's map tasks somewhere (``run``); ``analyze_files`` is the core's executor step."""

    name = "job"
    workers = 1

    #: ``steps("ranks", done, expected)`` as each file's ranks come back (set by ``make_executor``)
    steps: Callable[[str, int, int], None] | None = None

    def __init__(self, progress: JobProgress | None = None) -> None:
        #: called with (files done, files in all, files failed) as each file's task completes
        self.progress = progress

    def run(self, tasks: list[Group], done: Done) -> None:
        raise NotImplementedError

    def analyze_files(self, files: list[Path], options: Options, *, use_cache: bool,
                      skipped: list[Path]) -> Mapped:
        return run_job(self, files, options, use_cache=use_cache, skipped=skipped, progress=self.progress,
                       steps=self.steps)


class InProcess(JobExecutor):
    """In this process, one file after the other: no memory isolation (tests, debugging)."""

    name = "in-process (file by file)"

    def run(self, tasks: list[Group], done: Done) -> None:
        for group in tasks:
            for result in analyze_group(group):
                done(result)


class LocalProcesses(JobExecutor):
    """Local worker processes, spawned (safe with the threads pyarrow and numpy start).

    A worker that dies (killed, out of memory) breaks the whole pool and every unfinished task
    with it; their files are run again one per process, so only the file that kills its worker is
    lost. The workers are reused from task to task (imports paid once per worker).
    """

    def __init__(self, workers: int = 0, *, progress: JobProgress | None = None) -> None:
        super().__init__(progress)
        self.workers = max(1, int(workers) or os.cpu_count() or 1)
        self.name = f"local processes ({self.workers})"

    def run(self, tasks: list[Group], done: Done) -> None:
        context = multiprocessing.get_context("spawn")
        broken: list[FileTask] = []
        with cf.ProcessPoolExecutor(max_workers=min(self.workers, max(1, len(tasks))), mp_context=context) as pool:
            futures = {pool.submit(analyze_group, group): group for group in tasks}
            for future in cf.as_completed(futures):
                group = futures[future]
                try:
                    results = future.result()
                except cf.process.BrokenProcessPool:
                    broken.extend(group)
                    continue
                except Exception as exc:  # the result could not come back (e.g. not picklable)
                    results = [failed_task(task, f"{type(exc).__name__}: {exc}") for task in group]
                for result in results:
                    done(result)
        if broken:
            with cf.ThreadPoolExecutor(max_workers=self.workers) as threads:
                isolated = [threads.submit(run_isolated, task, context) for task in broken]
                for alone in cf.as_completed(isolated):
                    done(alone.result())


def run_isolated(task: FileTask, context: Any) -> FileResult:
    """``task`` in a process of its own: if it kills that process, only this file is lost."""
    try:
        with cf.ProcessPoolExecutor(max_workers=1, mp_context=context) as one:
            return one.submit(analyze_file, task).result()
    except cf.process.BrokenProcessPool:
        return failed_task(task, "the worker process died while analysing it (killed, or out of memory)")
    except Exception as exc:
        return failed_task(task, f"{type(exc).__name__}: {exc}")


class DaskCluster(JobExecutor):
    """A running ``dask.distributed`` cluster, by scheduler address or ``distributed.Client``. Its
    workers must see the trace files at the same paths (relative paths are made absolute here)."""

    def __init__(self, scheduler: Any, *, progress: JobProgress | None = None, connect_timeout_s: float = 20) -> None:
        super().__init__(progress)
        self.connect_timeout_s = connect_timeout_s
        try:
            import distributed
        except ImportError:
            raise TraceviewError("--scheduler needs dask.distributed: pip install 'traceview[scale]'") from None
        self.distributed = distributed
        self.scheduler = scheduler
        self.own = not isinstance(scheduler, distributed.Client)
        self.client: Any = self.connect()
        info = self.client.scheduler_info()
        workers = info.get("workers", {})
        threads = sum(int(w.get("nthreads", 1)) for w in workers.values())
        self.workers = max(1, len(workers))
        self.name = f"dask {info.get('address', scheduler)} ({len(workers)} workers, {threads} threads)"

    def connect(self) -> Any:
        if not self.own:
            return self.scheduler
        try:
            return self.distributed.Client(self.scheduler, timeout=f"{self.connect_timeout_s}s")
        except (OSError, TimeoutError, ValueError) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise TraceviewError(f"cannot reach the Dask scheduler at {self.scheduler}: {reason}") from None

    def close(self) -> None:
        """Close the client this executor opened (one given to it stays open)."""
        if self.own and self.client is not None:
            self.client.close()
            self.client = None

    def analyze_files(self, files: list[Path], options: Options, *, use_cache: bool,
                      skipped: list[Path]) -> Mapped:
        try:
            return super().analyze_files(files, options, use_cache=use_cache, skipped=skipped)
        finally:
            self.close()

    def run(self, tasks: list[Group], done: Done) -> None:
        if self.client is None:
            self.client = self.connect()
        token = uuid.uuid4().hex[:8]  # task keys unique across jobs sharing the cluster
        lost = self.submitted(tasks, token, done)
        if lost:  # a group whose worker died: its files again one by one, so only the one at fault is lost
            self.submitted([[task] for group in lost for task in group], token + "-alone", done)

    def submitted(self, tasks: list[Group], token: str, done: Done) -> list[Group]:
        """Run ``tasks`` on the cluster; the groups of several files whose task failed are returned
        (the files of a failed one-file task are answered as failed)."""
        futures = {}
        for group in tasks:
            absolute = [replace(task, path=str(Path(task.path).absolute())) for task in group]
            key = f"traceview-{token}-{group[0].index}"
            futures[self.client.submit(analyze_group, absolute, pure=False, key=key)] = group
        lost: list[Group] = []
        for future in self.distributed.as_completed(list(futures)):
            group = futures[future]
            try:
                results = future.result()
            except Exception as exc:  # KilledWorker, a lost worker, a cancelled task
                if len(group) > 1:
                    lost.append(group)
                    future.release()
                    continue
                results = [failed_task(group[0], f"the Dask task failed: {type(exc).__name__}: {exc}")]
            for result in results:
                done(result)
            future.release()
        return lost
