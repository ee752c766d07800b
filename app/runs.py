"""Runs: which traces the app may show, loading them, and the per-(run, filters) cache.

The app shows only the traces found under the paths given on the command line. Each is a *run*,
referred to by its index (``RunSpec.id``) everywhere the browser is involved: no callback or route
ever receives a file-system path.

Grouping rule (documented in docs/app.md): trace files in the same folder whose names differ only by
a rank number (``rank0.json.gz`` .. ``rank3.json.gz``, ``worker0_step_12.1694.pt.trace.json.gz``,
``sampled_rank-1.json.gz``) form one multi-rank run; every other file is a run of its own (a file
named on the command line too). A folder given on the command line is searched recursively.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from traceview.errors import TraceviewError
from traceview.findings import AnalysisResult, Options
from traceview.loading import find_trace_files
from traceview.model import Trace

from .filters import Filters, StepInfo, step_info, subset_trace

#: a rank number in a file name: what distinguishes the files of one multi-rank run
_RANK_TOKEN = re.compile(r"(?:^|(?<=[^a-z]))(rank|worker)([-_]?)(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class RunSpec:
    """One run the app can show: its id (what the browser sees), a label, and its files."""

    id: int
    label: str
    files: tuple[Path, ...]

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
    :class:`~traceview.errors.TraceFormatError` for a missing path or a folder without traces."""
    groups: "OrderedDict[tuple[str, str], list[Path]]" = OrderedDict()
    roots: dict[tuple[str, str], Path] = {}
    for p in paths:
        root = Path(p)
        for f in find_trace_files([root]):
            key = _group_key(f)
            groups.setdefault(key, [])
            if f not in groups[key]:
                groups[key].append(f)
            roots.setdefault(key, root)
    runs = []
    for i, (key, files) in enumerate(groups.items()):
        files = sorted(files, key=_rank_number)
        runs.append(RunSpec(id=i, label=_label(files, roots[key]), files=tuple(files)))
    return runs


def _rank_number(path: Path) -> tuple[int, str]:
    m = _RANK_TOKEN.search(path.name)
    return (int(m.group(3)) if m else -1, path.name)


# --------------------------------------------------------------------------------- result cache
#
# The analyses of a whole run (no filter) are also kept on disk next to traceview's Arrow cache, so a
# restart of the app on the same traces shows its first page without running them again. The key
# covers the input files (traceview's own cache key: path, size, mtime, both ends of the file), the
# step marker, and the code that computes the results (size and mtime of the analysis, model,
# findings and report modules), so editing an analysis never serves stale figures.

RESULT_CACHE_VERSION = "1"
RESULT_CACHE_KEEP = 16
_FINGERPRINT: str | None = None


def result_cache_dir() -> Path:
    from traceview.loading import cache_dir

    return cache_dir() / "app-results"


def clear_result_cache() -> None:
    """Forget every cached analysis result of the app (the Arrow cache of traces is kept)."""
    folder = result_cache_dir()
    if folder.is_dir():
        for f in folder.glob("*.pkl"):
            try:
                f.unlink()
            except OSError:
                pass


def _code_fingerprint() -> str:
    global _FINGERPRINT
    if _FINGERPRINT is None:
        import hashlib

        import traceview
        import traceview.analyses as analyses

        files = sorted(Path(analyses.__file__).parent.glob("*.py"))
        root = Path(traceview.__file__).parent
        files += [root / n for n in ("model.py", "findings.py", "report.py", "redact.py", "loading.py")]
        digest = hashlib.sha256(traceview.__version__.encode())
        for f in files:
            try:
                st = f.stat()
            except OSError:
                continue
            digest.update(f"{f.name}|{st.st_size}|{st.st_mtime_ns}".encode())
        _FINGERPRINT = digest.hexdigest()[:16]
    return _FINGERPRINT


def _result_key(spec: "RunSpec", step_marker: str | None) -> str | None:
    import hashlib

    from traceview.loading import cache_key

    try:
        parts = [cache_key(Path(f)) for f in spec.files]
    except OSError:
        return None
    text = "|".join([RESULT_CACHE_VERSION, _code_fingerprint(), repr(step_marker), *parts])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _read_results(key: str) -> tuple[dict, Any] | None:
    import pickle

    path = result_cache_dir() / f"{key}.pkl"
    try:
        with open(path, "rb") as fh:
            data = pickle.load(fh)
        if data.get("version") != RESULT_CACHE_VERSION:
            return None
        os.utime(path)  # recently used: pruned last
        return data["results"], data.get("report")
    except Exception:  # missing, damaged or from another version: compute again
        return None


def _write_results(key: str, results: dict, report: Any) -> None:
    import pickle

    folder = result_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            pickle.dump({"version": RESULT_CACHE_VERSION, "results": results, "report": report}, fh, protocol=5)
        os.replace(tmp, folder / f"{key}.pkl")
        entries = sorted(folder.glob("*.pkl"), key=lambda f: f.stat().st_mtime, reverse=True)
        for old in entries[RESULT_CACHE_KEEP:]:
            old.unlink()
    except OSError:
        pass  # a read-only or full disk: the cache is an optimisation only


# --------------------------------------------------------------------------------- per-run data


@dataclass
class RunContext:
    """Everything the pages show for one run under one set of filters (cached).

    ``trace`` is the filtered trace the analyses ran on; ``full`` the whole run (the timeline draws
    from it, limited to the selected ranks and window).
    """

    run: RunSpec
    filters: Filters
    full: Trace
    trace: Trace
    results: dict[str, AnalysisResult]
    options: Options
    origin_ns: int
    steps: StepInfo
    seconds: float = 0.0
    from_disk: bool = False  # results read from the app's result cache
    partial: bool = False  # only the first analysis (temporal) is done; the others are running
    _report: Any = None
    _report_lock: threading.Lock = field(default_factory=threading.Lock)

    def table(self, analysis: str, name: str) -> Any:
        """A result table (empty DataFrame when the analysis or table is absent)."""
        import pandas as pd

        res = self.results.get(analysis)
        if res is None or name not in res.tables:
            return pd.DataFrame()
        return res.tables[name]

    @property
    def findings(self) -> list[Any]:
        from traceview.findings import rank_findings

        out = []
        for res in self.results.values():
            out.extend(res.findings)
        return rank_findings(out)

    @property
    def warnings(self) -> list[str]:
        out = list(self.trace.warnings)
        for res in self.results.values():
            out.extend(res.warnings)
        return list(dict.fromkeys(out))

    def report(self) -> Any:
        """The report model (``traceview.report.build_report``), built once on first use."""
        with self._report_lock:
            if self._report is None:
                from traceview.report import build_report

                self._report = build_report(self.trace, self.results, options=self.options)
            return self._report


class RunError(TraceviewError):
    """A run could not be loaded (shown in the app instead of its pages)."""


class RunStore:
    """Loads runs lazily (through ``traceview.load`` and its Arrow cache) and caches analysis
    results per (run, filters) in memory, least recently used first out."""

    def __init__(self, runs: Sequence[RunSpec], *, use_cache: bool = True, step_marker: str | None = None,
                 max_contexts: int = 12, loader: Callable[..., Trace] | None = None) -> None:
        self.runs = list(runs)
        self.use_cache = use_cache
        self.step_marker = step_marker
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

    # ------------------------------------------------------------------ lookup
    def spec(self, run_id: Any) -> RunSpec:
        """The run with this id; ids come from the browser, so anything else is rejected."""
        try:
            idx = int(run_id)
        except (TypeError, ValueError):
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
                    import traceview

                    trace = traceview.load(list(spec.files), use_cache=self.use_cache, step_marker=self.step_marker)
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
        filters = (filters or Filters()).normalized(full, info)
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
        """Run the analyses (or read them from the result cache). The temporal breakdown comes
        first and is published as a partial context, so the Overview can draw while the other
        analyses run."""
        from traceview.analyses import REGISTRY, _import_all

        t0 = time.perf_counter()
        sub = subset_trace(full, filters, info)
        options = Options(step_marker=self.step_marker, ranks=filters.ranks)
        disk_key = _result_key(spec, self.step_marker) if self.use_cache and not filters.active else None
        cached = _read_results(disk_key) if disk_key else None
        report = None
        if cached is not None:
            results, report = cached
        else:
            _import_all()
            done: dict[str, Any] = {}
            # what run_all does, with the temporal breakdown first and published as soon as it is done
            order = sorted(REGISTRY, key=lambda name: name != "temporal")
            for name in order:
                done[name] = REGISTRY[name](sub, options)
                if name == "temporal":
                    partial = RunContext(run=spec, filters=filters, full=full, trace=sub, results=dict(done),
                                         options=options, origin_ns=info.origin_ns, steps=info,
                                         seconds=time.perf_counter() - t0, partial=True)
                    with self._lock:
                        self._partials[key] = partial
                    self._partial_event(key).set()
            results = {name: done[name] for name in REGISTRY if name in done}  # registry (display) order
        ctx = RunContext(run=spec, filters=filters, full=full, trace=sub, results=results, options=options,
                         origin_ns=info.origin_ns, steps=info, seconds=time.perf_counter() - t0,
                         from_disk=cached is not None)
        if report is not None:
            ctx._report = report
        elif disk_key:
            _write_results(disk_key, results, ctx.report())
        return ctx

    def partial_context(self, run_id: Any, filters: Filters | None = None, wait: float = 30.0) -> RunContext:
        """The full context when it is in memory; else start computing it (in the background) and
        return as soon as the first analysis (the temporal breakdown) is done: a context with
        ``partial`` set, whose results hold only that analysis."""
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
