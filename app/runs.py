"""Runs: which traces the app may show, loading them, and the per-(run, filters) cache.

The app shows only the traces found under the paths given on the command line. Each is a *run*,
referred to by its index (``RunSpec.id``) everywhere the browser is involved: no callback or route
ever receives a file-system path.

Grouping rule (documented in docs/app.md): trace files in the same folder whose names differ only by
a rank number (``rank0.json.gz`` .. ``rank3.json.gz``, ``worker0_step_12.1694.pt.trace.json.gz``,
``sampled_rank-1.json.gz``) form one multi-rank run; every other file is a run of its own (a file
named on the command line too). A folder given on the command line is searched recursively.

Each run is loaded and analysed through the one entry point (:mod:`traceview.api`) with the
command line's analysis options, so the report of a whole run is the report cache's entry that
``traceview analyze`` of the same files writes and reads (and the other way round): a run's
:class:`~traceview.api.Inputs` are its files in the order ``traceview analyze FOLDER`` loads them
and, when the run is all a folder on the command line holds, the files that folder's scan skipped.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from traceview import report_cache
from traceview.api import Inputs, analyze, find_inputs, load_inputs, report_key
from traceview.errors import TraceviewError
from traceview.findings import Options
from traceview.model import Trace
from traceview.report import Report, build_report

from .filters import Filters, StepInfo, step_info, subset_trace

log = logging.getLogger("traceview.app")

#: a rank number in a file name: what distinguishes the files of one multi-rank run
_RANK_TOKEN = re.compile(r"(?:^|(?<=[^a-z]))(rank|worker)([-_]?)(\d+)", re.IGNORECASE)
#: the analysis run first, on its own, so the Overview draws before the whole pipeline is done
EARLY_ANALYSIS = "temporal"


@dataclass(frozen=True)
class RunSpec:
    """One run the app can show: its id (what the browser sees), a label, its files (in load order)
    and the files a scan of its folder skipped (when the run is all that folder holds)."""

    id: int
    label: str
    files: tuple[Path, ...]
    skipped: tuple[Path, ...] = ()

    @property
    def inputs(self) -> Inputs:
        """The run's inputs for the entry point: the same as ``traceview analyze`` of its folder (when
        the run is all the folder holds) or of its files."""
        return Inputs.of_files(self.files, self.skipped)

    @property
    def size_bytes(self) -> int:
        total = 0
        for f in self.files:
            try:
                total += f.stat().st_size
            except OSError:
                pass
        return total


def _group_key(path: Path) -> tuple[str, str]:
    """(folder, name with its rank number replaced) for rank-numbered files, else the file itself."""
    m = _RANK_TOKEN.search(path.name)
    if m is None:
        return (str(path.parent), "\0" + path.name)
    prefix = path.name[: m.start(3)]
    return (str(path.parent), prefix + "#")


def _label(files: Sequence[Path], root: Path | None) -> str:
    first = files[0]
    base = root.parent if root is not None and root.is_dir() else first.parent
    try:
        rel_dir = first.parent.relative_to(base)
    except ValueError:
        rel_dir = Path(first.parent.name)
    if len(files) == 1:
        name = first.name
    else:
        key = _group_key(first)[1]
        name = key.replace("#", "*") + f" ({len(files)} ranks)"
    text = str(rel_dir / name) if str(rel_dir) not in ("", ".") else name
    return text


def discover_runs(paths: Sequence[str | os.PathLike[str]]) -> list[RunSpec]:
    """The runs under ``paths`` (files or folders), in a stable order; raises
    :class:`~traceview.errors.TraceFormatError` for a missing path or a folder without traces.
    A run's files keep the order a folder scan gives them (``traceview analyze FOLDER``'s); a run
    that is everything a folder holds also gets the files that folder's scan skipped."""
    groups: "OrderedDict[tuple[str, str], list[Path]]" = OrderedDict()
    roots: dict[tuple[str, str], Path] = {}
    scans: list[tuple[set[tuple[str, str]], list[Path]]] = []  # per path: the runs it holds, its skipped files
    for p in paths:
        root = Path(p)
        found = find_inputs([root])  # the one scan of this path
        held: set[tuple[str, str]] = set()
        for f in found.files:
            key = _group_key(f)
            held.add(key)
            groups.setdefault(key, [])
            if f not in groups[key]:
                groups[key].append(f)
            roots.setdefault(key, root)
        scans.append((held, list(found.skipped)))
    runs = []
    for i, (key, files) in enumerate(groups.items()):
        # a folder's skipped files belong to a run only when the folder holds that run alone
        skipped_here = dict.fromkeys(f for held, skipped in scans if held == {key} for f in skipped)
        runs.append(RunSpec(id=i, label=_label(files, roots[key]), files=tuple(files), skipped=tuple(skipped_here)))
    return runs


# --------------------------------------------------------------------------------- result cache
#
# The report of a whole run (no filter) is kept on disk by the core's report cache
# (traceview/report_cache.py), read and written by the one entry point (traceview.api.analyze) as for
# `traceview analyze`: keyed by the input files, every option and the code a report depends on, data
# only (never pickle). A restart of the app on the same traces, or an app started after `traceview
# analyze` of them with the same options, shows its first page without running the analyses again.
# The names below are the app's view of it.

RESULT_CACHE_VERSION = report_cache.FORMAT_VERSION
RESULT_CACHE_MAGIC = report_cache.MAGIC
result_cache_dir = report_cache.cache_folder
result_cache_path = report_cache.cache_path
clear_result_cache = report_cache.clear


def run_options(ranks: tuple[int, ...] | None = None, base: Options | None = None) -> Options:
    """The options of the app's analyses of a run: ``base`` (the command line's analysis options,
    as every analysing command builds them: traceview/commands/options.py) with the selection's
    ranks; with no filter, those of ``traceview analyze`` with the same options."""
    return dataclasses.replace(base or Options(), ranks=ranks)


def result_key(spec: "RunSpec", base: Options | None = None) -> str | None:
    """The report cache's key for the whole run ``spec`` under the command line's options ``base``
    (None when a file cannot be read): the entry point's key (:func:`traceview.api.report_key`)."""
    return report_key(spec.inputs, run_options(base=base))


# --------------------------------------------------------------------------------- per-run data


@dataclass
class RunContext:
    """Everything the pages show for one run under one set of filters (cached).

    ``trace`` is the filtered trace the analyses ran on; ``full`` the whole run (the timeline draws
    from it, limited to the selected ranks and window). ``report`` is the one
    :class:`~traceview.report.Report` of ``traceview.pipeline.analyze(trace)``: every figure, table
    and finding the pages show comes from it. While ``partial`` is set, the report holds only the
    temporal breakdown (the other analyses are still running) and has no findings worth showing.
    """

    run: RunSpec
    filters: Filters
    full: Trace
    trace: Trace
    report: Report
    options: Options
    origin_ns: int
    steps: StepInfo
    seconds: float = 0.0
    from_disk: bool = False  # report read from the app's result cache
    partial: bool = False  # only the temporal breakdown is done; the other analyses are running

    def table(self, analysis: str, name: str) -> pd.DataFrame:
        """A whole table of the report (an empty DataFrame when the analysis or table is absent)."""
        return self.report.table(analysis, name)

    @property
    def findings(self) -> list[dict[str, Any]]:
        """The report's findings, merged across ranks, ranked and numbered (F1, F1.1, ...) once."""
        return list(self.report["findings"])


def early_report(trace: Trace, options: Options) -> Report:
    """A report of the temporal breakdown only: what the Overview draws while the pipeline runs."""
    from traceview.analyses import run_all
    from traceview.pipeline import overview_of

    results = run_all(trace, options, only=[EARLY_ANALYSIS])
    return build_report(overview_of(trace), results, options=options, trace=trace)


#: below this much input a run loads in a moment: its first page waits for it, with no progress bar
LOAD_PAGE_MIN_BYTES = 32 * 1024 * 1024


class RunError(TraceviewError):
    """A run could not be loaded (shown in the app instead of its pages)."""


class RunStore:
    """Loads runs lazily (through ``traceview.load`` and its Arrow cache) and caches analysis
    results per (run, filters) in memory, least recently used first out."""

    def __init__(self, runs: Sequence[RunSpec], options: Options | None = None, *, use_cache: bool = True,
                 jobs: int | None = None, max_contexts: int = 12, loader: Callable[..., Trace] | None = None,
                 load_page_min_bytes: int = LOAD_PAGE_MIN_BYTES) -> None:
        self.runs = list(runs)
        self.use_cache = use_cache
        #: the command line's analysis options (``run_options``' base: the step marker, the
        #: communication rules, the GPU table, the model's FLOPs for MFU); the defaults when None
        self.options = options or Options()
        #: ``--jobs``: the processes a run's parse may use
        self.jobs = jobs
        self.max_contexts = max_contexts
        self._loader = loader
        self._traces: dict[int, Trace] = {}
        self._errors: dict[int, str] = {}
        self._steps: dict[int, StepInfo] = {}
        self._contexts: "OrderedDict[tuple, RunContext]" = OrderedDict()
        self._partials: dict[tuple, RunContext] = {}
        self._partial_events: dict[tuple, threading.Event] = {}
        self._lock = threading.Lock()
        self._key_locks: dict[tuple, threading.Lock] = {}
        self._timelines: dict[int, Any] = {}
        #: set once a page has been served (background work waits for it, to keep start-up fast)
        self.first_page_served = threading.Event()
        #: each run's latest step progress while it loads and is analysed: (phase, done, total)
        self._progress: dict[int, tuple[str, int, int]] = {}
        self._loading: set[int] = set()
        #: runs of at least this many bytes load in the background behind a progress bar
        self.load_page_min_bytes = load_page_min_bytes

    @property
    def step_marker(self) -> str | None:
        """The step marker of every run (``--step-marker``)."""
        return self.options.step_marker

    # ------------------------------------------------------------------ lookup
    def spec(self, run_id: Any) -> RunSpec:
        """The run with this id; ids come from the browser, so anything else is rejected."""
        try:
            idx = int(run_id)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
            raise RunError(f"unknown run {run_id!r}") from None
        if isinstance(run_id, bool) or not 0 <= idx < len(self.runs) or str(run_id).strip() != str(idx):
            raise RunError(f"unknown run {run_id!r}")
        return self.runs[idx]

    def _key_lock(self, key: tuple) -> threading.Lock:
        with self._lock:
            lock = self._key_locks.get(key)
            if lock is None:
                lock = self._key_locks[key] = threading.Lock()
            return lock

    # ------------------------------------------------------------------ progress
    def _recorder(self, run_id: int) -> Callable[[str, int, int], None]:
        """The step progress (:data:`traceview.pipeline.StepProgress`) of a run's load and analyses:
        the latest (phase, done, total) kept for :meth:`progress` (pages poll it while a run loads)."""

        def record(phase: str, done: int, total: int) -> None:
            self._progress[run_id] = (phase, done, total)  # one assignment: readers see whole tuples

        return record

    def progress(self, run_id: Any) -> tuple[str, int, int] | None:
        """How far the run's load (then its analyses) is: (phase, done, total); None before it starts."""
        return self._progress.get(self.spec(run_id).id)

    def loaded(self, run_id: Any) -> bool:
        """Whether the run's trace is in memory, or its load failed (its pages can be drawn)."""
        spec = self.spec(run_id)
        return spec.id in self._traces or spec.id in self._errors

    def shows_load_bar(self, run_id: Any) -> bool:
        """Whether a page should show the run's progress bar instead of waiting for it: a big run
        (``load_page_min_bytes``) not loaded yet; a small one loads in the page's own request."""
        spec = self.spec(run_id)
        return not self.loaded(spec.id) and spec.size_bytes >= self.load_page_min_bytes

    def start_loading(self, run_id: Any) -> None:
        """Load the run in a background thread (once), so a page can show its progress meanwhile."""
        spec = self.spec(run_id)
        with self._lock:
            if spec.id in self._loading or self.loaded(spec.id):
                return
            self._loading.add(spec.id)

        def work() -> None:
            try:
                self.trace(spec.id)
            except Exception:  # kept in _errors, shown when a page asks for the run
                pass

        threading.Thread(target=work, name=f"traceview-load-{spec.id}", daemon=True).start()

    # ------------------------------------------------------------------ loading
    def trace(self, run_id: Any) -> Trace:
        spec = self.spec(run_id)
        if spec.id in self._traces:
            return self._traces[spec.id]
        with self._key_lock(("trace", spec.id)):
            if spec.id in self._traces:
                return self._traces[spec.id]
            if spec.id in self._errors:
                raise RunError(self._errors[spec.id])
            try:
                if self._loader is not None:
                    trace = self._loader(list(spec.files))
                else:
                    trace = load_inputs(spec.inputs, step_marker=self.step_marker, cache=self.use_cache,
                                        jobs=self.jobs, steps=self._recorder(spec.id))
            except TraceviewError as exc:
                self._errors[spec.id] = str(exc)
                raise RunError(str(exc)) from None
            self._traces[spec.id] = trace
            return trace

    def error(self, run_id: Any) -> str | None:
        spec = self.spec(run_id)
        return self._errors.get(spec.id)

    def steps(self, run_id: Any) -> StepInfo:
        spec = self.spec(run_id)
        hit = self._steps.get(spec.id)
        if hit is None:
            hit = self._steps[spec.id] = step_info(self.trace(spec.id), self.step_marker)
        return hit

    def origin_ns(self, run_id: Any) -> int:
        return self.steps(run_id).origin_ns

    # ------------------------------------------------------------------ analyses
    def _key(self, run_id: Any, filters: Filters | None) -> tuple[RunSpec, Trace, StepInfo, Filters, tuple]:
        spec = self.spec(run_id)
        full = self.trace(spec.id)
        info = self.steps(spec.id)
        filters = (filters or Filters()).normalized(info)
        return spec, full, info, filters, (spec.id, filters)

    def ready(self, run_id: Any, filters: Filters | None = None) -> bool:
        """Whether the analyses of this run and selection are in memory."""
        *_, key = self._key(run_id, filters)
        with self._lock:
            return key in self._contexts

    def context(self, run_id: Any, filters: Filters | None = None) -> RunContext:
        """Analysis results of a run under ``filters`` (computed once, then served from memory)."""
        spec, full, info, filters, key = self._key(run_id, filters)
        with self._lock:
            hit = self._contexts.get(key)
            if hit is not None:
                self._contexts.move_to_end(key)
                return hit
        with self._key_lock(("ctx",) + key):
            with self._lock:
                hit = self._contexts.get(key)
                if hit is not None:
                    return hit
            try:
                ctx = self._compute(spec, full, info, filters, key)
            finally:
                self._partial_event(key).set()  # nobody waits for a partial result any longer
            with self._lock:
                self._contexts[key] = ctx
                self._partials.pop(key, None)
                while len(self._contexts) > self.max_contexts:
                    self._contexts.popitem(last=False)
            return ctx

    def _partial_event(self, key: tuple) -> threading.Event:
        with self._lock:
            evt = self._partial_events.get(key)
            if evt is None:
                evt = self._partial_events[key] = threading.Event()
            return evt

    def _compute(self, spec: RunSpec, full: Trace, info: StepInfo, filters: Filters, key: tuple) -> RunContext:
        """The report of the selection from the one entry point (:func:`traceview.api.analyze`): a
        whole run's through the report cache, shared with ``traceview analyze``; a filtered
        selection's computed (never stored). Before the analyses run, the temporal breakdown alone
        is published as a partial context, so the Overview can draw while they run."""
        t0 = time.perf_counter()
        sub = subset_trace(full, filters, info, self.step_marker)
        options = run_options(filters.ranks, self.options)
        computed: list[bool] = []

        def publish_early(trace: Trace) -> None:
            computed.append(True)
            early = RunContext(run=spec, filters=filters, full=full, trace=trace,
                               report=early_report(trace, options), options=options, origin_ns=info.origin_ns,
                               steps=info, seconds=time.perf_counter() - t0, partial=True)
            with self._lock:
                self._partials[key] = early
            self._partial_event(key).set()

        if filters.active:
            report = analyze(sub, options, cache=False, on_compute=publish_early)
        else:
            report = analyze(spec.inputs, options, cache=self.use_cache, trace=full, on_compute=publish_early,
                             steps=self._recorder(spec.id))
        return RunContext(run=spec, filters=filters, full=full, trace=sub, report=report,
                          options=options, origin_ns=info.origin_ns, steps=info, seconds=time.perf_counter() - t0,
                          from_disk=not computed)

    def partial_context(self, run_id: Any, filters: Filters | None = None, wait: float = 30.0) -> RunContext:
        """The full context when it is in memory; else start computing it (in the background) and
        return as soon as the temporal breakdown is done: a context with ``partial`` set, whose
        report holds only that analysis."""
        spec, full, info, filters, key = self._key(run_id, filters)
        with self._lock:
            hit = self._contexts.get(key) or self._partials.get(key)
        if hit is not None:
            return hit
        evt = self._partial_event(key)
        thread = threading.Thread(target=self._background, args=(spec.id, filters), daemon=True,
                                  name=f"traceview-analyses-{spec.id}")
        thread.start()
        evt.wait(wait)
        with self._lock:
            hit = self._contexts.get(key) or self._partials.get(key)
        return hit if hit is not None else self.context(spec.id, filters)

    def _background(self, run_id: int, filters: Filters) -> None:
        try:
            self.context(run_id, filters)
        except Exception:  # reported when a page asks for it
            pass

    def cached_contexts(self) -> int:
        with self._lock:
            return len(self._contexts)

    def timeline(self, run_id: Any) -> Any:
        """The timeline lane index of a run (built once: events sorted per lane)."""
        spec = self.spec(run_id)
        hit = self._timelines.get(spec.id)
        if hit is not None:
            return hit
        with self._key_lock(("timeline", spec.id)):
            hit = self._timelines.get(spec.id)
            if hit is None:
                from .timeline import LaneIndex

                hit = self._timelines[spec.id] = LaneIndex.build(self.trace(spec.id))
            return hit

    def warm(self, run_id: int = 0) -> threading.Thread:
        """Load a run, run its analyses and index its timeline in a background thread."""

        def work() -> None:
            try:
                self.context(run_id)
                # the timeline index is for later: let the first page be served before building it
                self.first_page_served.wait(5.0)
                self.timeline(run_id)
            except Exception:  # shown to the user when a page asks for it
                pass

        thread = threading.Thread(target=work, name=f"traceview-warm-{run_id}", daemon=True)
        thread.start()
        return thread
