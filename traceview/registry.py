"""The three extension points of traceview, declared where each extension lives.

* :class:`AnalysisSpec`: each module of :mod:`traceview.analyses` declares one as ``SPEC`` (its name,
  title, function, tables with their titles, sort keys and row limits, the finding codes it raises,
  how its per-rank results reduce across ranks, and its app page). Titles, sort orders and top-table
  choices live there and nowhere else. ``traceview.analyses`` finds the modules by itself: adding an
  analysis is adding one module.
* :class:`InputFormat`: each parser declares its name, a sniff of a file's first bytes, a parse
  function, its redaction and its producer's name; :mod:`traceview.discovery` tries the sniffs in
  order. Adding a format is adding a parser module that declares one.
* :class:`Renderer`: each output format (terminal, Markdown, HTML, JSON) declares its name and file
  extension and turns one :class:`traceview.report.Report` into text or bytes.

The registries are plain dicts filled at import (``traceview.analyses``, ``traceview.parsers`` and
``traceview.render`` import their modules); this module imports nothing of traceview's but the model
and the findings, so every layer can depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol

from traceview.model import Trace

if TYPE_CHECKING:  # only for annotations: the report model imports this module, and findings
    # import numpy and the interval algebra (pandas), which loading a trace needs not
    from traceview.context import AnalysisContext
    from traceview.findings import AnalysisResult, Options
    from traceview.report_inputs import ReportInputs
    from traceview.secrets import RedactionReport

# ------------------------------------------------------------------------------------ analyses


@dataclass(frozen=True)
class TableSpec:
    """One table an analysis produces.

    ``sort_by``: the column its largest rows are chosen by (per-event tables: gaps, launches, calls,
    kernels); the report shows the top ``report_rows`` of them and a job keeps, per rank, the rows any
    report figure can need. ``keep_rows``: rows per rank that a chart needs beyond the report's
    (e.g. the timeline's largest gaps). ``sample_by``/``sample_rows``: a uniform sample of the table
    (for scatter charts), drawn as the rows with the smallest hash of that column: the same rows
    whether the ranks were analysed together or one by one, provided the column is intrinsic to the
    event (a start time), not a row number (a job's worker samples before its rows are moved to rows
    across files). ``per_event``: one row per event
    (left out of jobs that keep only whole-trace rows). ``top_overall``: a table of the top
    ``Options.top_n`` rows over all ranks, by these (column, ascending) keys: the per-rank tables are
    concatenated and cut again. ``cross_rank``: computed by the analysis's reduce step from every
    rank's inputs, never concatenated from per-rank tables.
    """

    name: str
    title: str
    sort_by: str | None = None
    keep_rows: int = 0
    sample_by: str | None = None
    sample_rows: int = 0
    per_event: bool = False
    top_overall: tuple[tuple[str, bool], ...] = ()
    cross_rank: bool = False


class RankInputs(Protocol):
    """What an analysis gathers from each rank for its cross-rank step (see ``AnalysisSpec.gather``)."""

    def remap_rows(self, rows: Any, offset: int) -> "RankInputs": ...

    def compact(self) -> "RankInputs": ...


@dataclass(frozen=True)
class DerivedInput:
    """Something several analyses read, computed from the trace and the options once per
    :class:`~traceview.context.AnalysisContext` (``build(ctx)``), declared by the module that
    computes it (``register_input``). ``requires``: the other derived inputs ``build`` reads."""

    name: str
    build: Callable[["AnalysisContext"], Any]
    requires: tuple[str, ...] = ()


#: name -> derived input, filled when the modules that declare them are imported
DERIVED_INPUTS: dict[str, DerivedInput] = {}


def register_input(name: str, build: Callable[["AnalysisContext"], Any],
                   requires: tuple[str, ...] = ()) -> DerivedInput:
    """Declare a derived input (at import of the module that computes it)."""
    declared = DerivedInput(name=name, build=build, requires=requires)
    known = DERIVED_INPUTS.get(name)
    if known is not None and known.build is not build:
        raise ValueError(f"two derived inputs are named {name!r}")
    DERIVED_INPUTS[name] = declared
    return declared


def derived_inputs() -> dict[str, DerivedInput]:
    """Every declared derived input, by name (those of the modules imported so far: the pipeline
    imports the analyses package, whose modules declare theirs)."""
    return dict(DERIVED_INPUTS)


@dataclass(frozen=True)
class AnalysisSpec:
    """An analysis, as its module declares it (``SPEC = AnalysisSpec(...)``).

    ``run(ctx)`` is the analysis itself: a pure function of an
    :class:`~traceview.context.AnalysisContext` (the trace of one or several ranks, the options, the
    derived inputs and the other analyses' results); one call handles every rank of the context.
    ``requires``: the derived inputs (:class:`DerivedInput` names) and other analyses (their names)
    it reads; the pipeline runs analyses after those they require and frees each input after its
    last reader. ``gather(ctx)`` (optional) returns what the cross-rank step needs of the context's
    ranks, and ``reduce(parts, options)`` turns the gathered parts of every batch of ranks into the
    cross-rank tables, findings and warnings (an :class:`AnalysisResult`). ``page``: (URL path,
    label) of the analysis's page in the web app; analyses without a page of their own get a generic
    one listing their tables. ``order``: where the analysis is shown (ascending); the run order
    follows ``requires``, ties in this order.
    """

    name: str
    title: str
    run: Callable[["AnalysisContext"], AnalysisResult]
    tables: tuple[TableSpec, ...] = ()
    finding_codes: tuple[str, ...] = ()
    order: int = 100
    page: tuple[str, str] | None = None
    requires: tuple[str, ...] = ()
    gather: Callable[["AnalysisContext"], Any] | None = None
    reduce: Callable[[list[Any], Options], AnalysisResult] | None = None
    #: the table shown first for this analysis by renderers that show one table per analysis
    headline_table: str | None = None
    #: finding code -> the code of the umbrella finding whose time includes it (``Finding.part_of``),
    #: declared so the findings engine (traceview.accounting) knows a chain even when a link of it
    #: raised no finding (``blocking_copy`` -> ``sync_bound_gaps`` -> ``low_utilization``)
    finding_parents: tuple[tuple[str, str], ...] = ()
    #: finding code -> its place on ``traceview.accounting.PRECEDENCE_SCALE`` (lower wins time two
    #: top-level findings claim)
    finding_precedence: tuple[tuple[str, int], ...] = ()
    # The report asks the analyses for these (it names none); each reads the report's inputs
    # (``traceview.report.ReportInputs``: every analysis's result, true row counts, a per-report memo).
    #: the report summary's figures this analysis owns: ``summary(inputs) -> (figures, notes)``
    summary: Callable[["ReportInputs"], tuple[dict[str, Any], dict[str, str]]] | None = None
    #: per rank, the figures of the report's ``ranks`` entries this analysis owns: ``{rank: figures}``
    rank_summary: Callable[["ReportInputs"], dict[int, dict[str, Any]]] | None = None
    #: the charts' data this analysis owns: (chart name, ``build(inputs)``) each
    charts: tuple[tuple[str, Callable[["ReportInputs"], Any]], ...] = ()
    #: the report's one denominator of costs, when this analysis owns it: ``timebase(inputs)`` ->
    #: (each GPU's whole-trace window by (rank, device), steps per rank)
    timebase: Callable[["ReportInputs"], tuple[dict[tuple[int, int], tuple[int, int]], dict[int, int]]] | None = None

    def table(self, name: str) -> TableSpec:
        """The spec of table ``name`` (an undeclared table gets a default one: its name as title)."""
        for t in self.tables:
            if t.name == name:
                return t
        return TableSpec(name=name, title=name.replace("_", " ").capitalize())


def finding_parents() -> dict[str, str]:
    """Every declared finding code -> umbrella code, over all registered analyses."""
    return {code: parent for spec in ANALYSES.values() for code, parent in spec.finding_parents}


def finding_precedence() -> dict[str, int]:
    """Every declared finding code -> its precedence, over all registered analyses."""
    return {code: rank for spec in ANALYSES.values() for code, rank in spec.finding_precedence}


#: name -> spec, filled when ``traceview.analyses`` is imported
ANALYSES: dict[str, AnalysisSpec] = {}


def register_analysis(spec: AnalysisSpec) -> AnalysisSpec:
    """Add an analysis (``traceview.analyses`` calls this for every module's ``SPEC``)."""
    if spec.name in ANALYSES and ANALYSES[spec.name] is not spec:
        raise ValueError(f"two analyses are named {spec.name!r}")
    ANALYSES[spec.name] = spec
    return spec


def analysis_specs() -> list[AnalysisSpec]:
    """Every registered analysis, in display order (``traceview.analyses`` registers them as it is
    imported: the pipeline and the report import it; the registry, below them, does not)."""
    return sorted(ANALYSES.values(), key=lambda s: (s.order, s.name))


def run_order(specs: list[AnalysisSpec]) -> list[AnalysisSpec]:
    """``specs`` ordered so that each comes after the analyses it requires (ties in display order);
    a requirement cycle, or a requirement on an analysis not in ``specs``, is an error."""
    names = {s.name for s in specs} | set(ANALYSES)
    done: list[AnalysisSpec] = []
    placed: set[str] = set()
    pending = sorted(specs, key=lambda s: (s.order, s.name))
    while pending:
        ready = [s for s in pending if all(r in placed for r in s.requires if r in names)]
        if not ready:
            left = ", ".join(s.name for s in pending)
            raise ValueError(f"analyses require each other in a cycle, or an analysis that is not run: {left}")
        done.append(ready[0])
        placed.add(ready[0].name)
        pending.remove(ready[0])
    return done


def with_requirements(specs: list[AnalysisSpec]) -> list[AnalysisSpec]:
    """``specs`` and every registered analysis they require, transitively, in run order."""
    chosen = {s.name: s for s in specs}
    todo = list(specs)
    while todo:
        for name in todo.pop().requires:
            if name in ANALYSES and name not in chosen:
                chosen[name] = ANALYSES[name]
                todo.append(ANALYSES[name])
    return run_order(list(chosen.values()))


# ------------------------------------------------------------------------------------ input formats


@dataclass(frozen=True)
class InputFormat:
    """A trace format, declared by the parser module that reads it (everything else about a format
    is asked of this declaration, never decided by its name):

    ``sniff(path, head)`` says whether a file's first bytes (decompressed when the file is gzip)
    are this format; ``parse(path, progress=, step_marker=, jobs=, hooks=)`` reads it into a
    :class:`Trace` (``jobs``: processes it may use; ``hooks``: the caller's
    :class:`traceview.parsing.ParseHooks`, which the parse runs inside and calls).

    ``cacheable``: parsed traces of this format go to the Arrow cache. ``suffixes``: file name endings
    a directory scan picks up for this format.
    """

    name: str
    description: str
    sniff: Callable[[Path, bytes], bool]
    parse: Callable[..., Trace]
    suffixes: tuple[str, ...] = ()
    cacheable: bool = True
    order: int = 100
    #: a stricter check for files found by scanning a directory (default: ``sniff``), so that files
    #: beside the traces (configs, truth files) are skipped; a file named explicitly is always parsed
    scan: Callable[[Path, bytes], bool] | None = None
    #: ``parse`` itself calls ``hooks.meanwhile`` once whatever runs beside this process has started
    #: (Kineto: its parse workers); for other formats the loader calls it first
    runs_meanwhile: bool = False
    #: what wrote the files, as reports list the inputs' formats ("PyTorch profiler (Kineto) JSON");
    #: empty: the description
    producer: str = ""
    #: ``redact(in_path, out_path, strict=False)`` writes a copy of a file of this format with its
    #: secrets replaced and returns what it replaced (a ``traceview.secrets.RedactionReport``);
    #: it raises a ``TraceFormatError`` saying what to do for a file it cannot redact. None: the
    #: format has no redaction (``traceview redact`` says so)
    redact: Callable[..., RedactionReport] | None = None
    #: the accelerator vendor every file of this format comes from (Nsight Systems: "NVIDIA"); None:
    #: only the file's own metadata can say
    vendor: str | None = None
    #: the parser numbers the ranks of a file itself (Nsight: an export does not say which global
    #: rank each process was), so across several files those numbers are given out again rather
    #: than taken as global ranks (``traceview.rank_planning``)
    numbers_ranks: bool = False
    #: for a format whose run is written as several files (rocprofv3: one CSV per kind of record):
    #: ``run_files(path)`` gives (the file that stands for the run of ``path``, the run's other
    #: files), raising a ``TraceFormatError`` for files that are not one run. Discovery lists a run
    #: once, as that file; its cache keys cover every file; ``parse`` of that file reads them all.
    #: None: every file is a run of its own
    run_files: Callable[[Path], tuple[Path, tuple[Path, ...]]] | None = None
    #: ``check_inputs(paths)``: the files of this format one folder scan found, checked together
    #: (raises a ``TraceFormatError`` when they cannot be one input: XSpace files of several runs)
    check_inputs: Callable[[list[Path]], None] | None = None
    #: ``shadows(path)``: a file found by a folder scan that this format reads better from another
    #: file beside it (the JSON view an XSpace profiler writes next to its ``.xplane.pb``): skipped
    shadows: Callable[[Path], bool] | None = None

    @property
    def producer_name(self) -> str:
        return self.producer or self.description

    def in_directory(self, path: Path, head: bytes) -> bool:
        return (self.scan or self.sniff)(path, head)


INPUT_FORMATS: dict[str, InputFormat] = {}


def register_input_format(fmt: InputFormat) -> InputFormat:
    INPUT_FORMATS[fmt.name] = fmt
    return fmt


def input_formats() -> list[InputFormat]:
    """Every registered input format, in the order files are sniffed."""
    return sorted(INPUT_FORMATS.values(), key=lambda f: (f.order, f.name))


# ------------------------------------------------------------------------------------ renderers


class Renderer:
    """An output format: subclasses set ``name``, ``output_file_extension`` and ``description`` and
    implement :meth:`render`. A renderer formats the one :class:`~traceview.report.Report` it is
    given; it never recomputes a figure or re-ranks a finding.

    ``binary``: :meth:`render` returns bytes. Options a renderer takes (``details``, ``width``) are
    keyword arguments of its constructor.
    """

    name: ClassVar[str] = ""
    output_file_extension: ClassVar[str] = ""
    description: ClassVar[str] = ""
    binary: ClassVar[bool] = False

    def __init__(self, **options: Any) -> None:
        self.options = options

    def render(self, report: Any) -> str | bytes:
        """``report``: a :class:`traceview.report.Report` (not named here: the report is a layer above)."""
        raise NotImplementedError


RENDERERS: dict[str, type[Renderer]] = {}


def register_renderer(cls: type[Renderer]) -> type[Renderer]:
    """Class decorator: make a renderer available under its ``name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    RENDERERS[cls.name] = cls
    return cls
