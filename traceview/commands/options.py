"""The options of the commands that read traces, declared once.

Every command that analyses traces (``analyze``, ``diff``, ``check``, ``app``, ``export-perfetto``,
``history``, ``sql``) takes the same analysis options: it names one parameter
``analysis: AnalysisArgs = ANALYSIS_OPTIONS`` and is decorated with :func:`with_analysis_options`,
which puts the group's parameters (:data:`ANALYSIS_GROUP`) in that parameter's place for typer and
hands the command one :class:`AnalysisArgs`. :meth:`AnalysisArgs.options` is the one place the
command line becomes :class:`~traceview.findings.Options` (every value checked first: a bad one is
one line, exit 2, before any trace is read). The commands that only load traces (``info``,
``convert``) take :data:`LOAD_NO_CACHE_OPTION` and :data:`JOBS_OPTION`.

Start time (``traceview --help``: benchmarks/bench_start.py): typer and the standard library only at
the top; what checking a value needs is imported when a command runs.
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional

import typer

if TYPE_CHECKING:
    from traceview.findings import Options

#: ``--jobs``, for every command that loads traces (None: the cores available)
JOBS_OPTION = typer.Option(
    None, "--jobs", "-j", min=1, help="Processes that parse: a big Kineto file is cut into ranges parsed side by "
    "side, many files are parsed side by side (default: the cores available; 1: this process only). Inputs under "
    "32 MB are read in one process. The same results whatever N. (TRACEVIEW_SPLIT_MIN_EVENTS=N also runs the "
    "analyses of a rank of N events or more in two processes: opt-in, docs/scaling.md.)")

#: ``--no-progress``: no progress bars on standard error (shown only on a terminal; ``TRACEVIEW_PROGRESS=0``
#: also turns them off, ``=1`` forces them)
NO_PROGRESS_OPTION = typer.Option(False, "--no-progress", help="No progress bars on standard error (they show only "
                                  "on a terminal; TRACEVIEW_PROGRESS=0 turns them off too, =1 forces them).")
#: ``--no-cache`` of the commands that only load traces (no report to cache)
LOAD_NO_CACHE_OPTION = typer.Option(False, "--no-cache", help="Parse again instead of reading the cache.")


@dataclass(frozen=True)
class GroupOption:
    """One option of the analysis group: the command parameter's name, its type and typer's option."""

    name: str
    annotation: Any
    option: Any


#: the analysis options, in the order ``--help`` lists them
ANALYSIS_GROUP: tuple[GroupOption, ...] = (
    GroupOption("step_marker", Optional[str], typer.Option(
        None, "--step-marker", metavar="REGEX", help="Regex choosing step ranges among annotations/NVTX ranges "
        "(default: ProfilerStep#N, else step_N / iteration N ranges).")),
    GroupOption("comm_pattern", Optional[List[str]], typer.Option(
        None, "--comm-pattern", metavar="[FAMILY=]REGEX", help="Kernels whose name matches are communication "
        "(repeatable; tried before the built-in table, docs/metrics.md).")),
    # help is plain click text (traceview/cli.py): brackets are shown as written
    GroupOption("comm_config", Optional[Path], typer.Option(
        None, "--comm-config", help="TOML file of communication rules (comm_patterns = [...] or [[comm_rules]], top "
        "level or under [tool.traceview]).")),
    GroupOption("gpu_specs", Optional[Path], typer.Option(
        None, "--gpu-specs", help="TOML file of GPU figures (peak TFLOP/s, memory and link bandwidth) that overrides "
        "or extends the built-in table, for a GPU traceview does not know or figures it has not verified against a "
        "vendor source (docs/metrics.md, Hardware peaks). The efficiency analysis divides by them.")),
    GroupOption("model_flops", Optional[str], typer.Option(
        None, "--model-flops", help="The model's FLOPs of one step on one GPU, a number or a product (6*7e9*4096: "
        "6 x parameters x tokens per GPU per step for a dense transformer's training step). The efficiency analysis "
        "then gives model FLOPs utilisation (MFU) per step; above 100% it says the input is wrong.")),
    GroupOption("mfu_dtype", str, typer.Option(
        "bf16", "--mfu-dtype", help="The dtype whose dense tensor peak MFU divides by (bf16, fp16, fp8, tf32, fp32, "
        "...).")),
    GroupOption("ncu", Optional[List[Path]], typer.Option(
        None, "--ncu", metavar="FILE|DIR", help="Nsight Compute exports (ncu --csv --page details or --page raw, "
        ".ncu-rep with ncu on PATH, or a directory of them) joined to the trace's kernels: measured speed of "
        "light, occupancy, DRAM bytes and rule results (repeatable; docs/metrics.md, Measured efficiency).")),
    GroupOption("graph_capture", Optional[List[Path]], typer.Option(
        None, "--graph-capture", metavar="CAPTURE", help="A trace of the capture of the CUDA/HIP graphs the traces "
        "replay (repeatable): replayed kernels are matched to the captured nodes by kernel name and order and get "
        "their ops and module ranges (docs/metrics.md, Modules and ranges).")),
    GroupOption("no_cache", bool, typer.Option(
        False, "--no-cache", help="Parse and analyse again instead of reading the caches (traces, reports).")),
    GroupOption("jobs", Optional[int], JOBS_OPTION),
    GroupOption("no_progress", bool, NO_PROGRESS_OPTION),
)


@dataclass(frozen=True)
class AnalysisArgs:
    """The analysis options as the command line gave them (unchecked: :meth:`options` checks)."""

    step_marker: Optional[str] = None
    #: ``--comm-pattern`` values in order (typer gives a list, or None when none is given)
    comm_pattern: tuple[str, ...] = ()
    comm_config: Optional[Path] = None
    gpu_specs: Optional[Path] = None
    model_flops: Optional[str] = None
    mfu_dtype: str = "bf16"
    ncu: tuple[Path, ...] = ()
    #: ``--graph-capture`` values in order
    graph_capture: tuple[Path, ...] = ()
    no_cache: bool = False
    jobs: Optional[int] = None
    no_progress: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "comm_pattern", tuple(self.comm_pattern or ()))
        object.__setattr__(self, "ncu", tuple(self.ncu or ()))
        object.__setattr__(self, "graph_capture", tuple(self.graph_capture or ()))

    @property
    def use_cache(self) -> bool:
        """Whether the trace and report caches are read and written (not ``--no-cache``)."""
        return not self.no_cache

    @property
    def show_progress(self) -> bool:
        """Whether progress bars may show (not ``--no-progress``; still only on a terminal)."""
        return not self.no_progress

    def options(self, **fields_: Any) -> Options:
        """The :class:`~traceview.findings.Options` of these arguments (``fields_``: the command's own
        fields, e.g. ``analyze``'s ``top_n``), every value checked before any work: a bad regex,
        rules file, GPU table or FLOPs figure is one line and exit 2."""
        from traceview.findings import Options

        flops, flops_dtype = checked_model_flops(self.model_flops, self.mfu_dtype)
        rules = comm_patterns(list(self.comm_pattern), self.comm_config)
        return Options(step_marker=self.step_marker, comm_patterns=rules, gpu_specs=checked_gpu_specs(self.gpu_specs),
                       model_flops_per_step=flops, mfu_dtype=flops_dtype, ncu=checked_ncu(self.ncu),
                       graph_capture=checked_graph_captures(self.graph_capture), **fields_)

    def given(self) -> dict[str, bool]:
        """Each option (as typed: ``--step-marker``) and whether the command line set it."""
        default = AnalysisArgs()
        return {flag_of(o.name): getattr(self, o.name) != getattr(default, o.name) for o in ANALYSIS_GROUP}


#: the default of the parameter that :func:`with_analysis_options` replaces by the group
ANALYSIS_OPTIONS = AnalysisArgs()


def flag_of(name: str) -> str:
    """The option a group parameter is typed as (``step_marker`` -> ``--step-marker``)."""
    option = next(o.option for o in ANALYSIS_GROUP if o.name == name)
    return str(next(d for d in option.param_decls if d.startswith("--")))


def with_analysis_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with the parameter whose default is :data:`ANALYSIS_OPTIONS` replaced, for typer,
    by the analysis group's parameters (at its place in ``--help``); the command is called with
    them gathered into one :class:`AnalysisArgs` under that parameter's name."""
    hints = typing.get_type_hints(command)  # the command's own annotations, resolved in its module
    signature = inspect.signature(command)
    [group_name] = [p.name for p in signature.parameters.values() if p.default is ANALYSIS_OPTIONS]
    names = [o.name for o in ANALYSIS_GROUP]
    parameters: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        if param.name == group_name:
            parameters.extend(inspect.Parameter(o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=o.option,
                                                annotation=o.annotation) for o in ANALYSIS_GROUP)
        elif param.name in names:
            raise TypeError(f"{command.__qualname__}: parameter {param.name!r} is an analysis option already")
        else:
            parameters.append(param.replace(annotation=hints.get(param.name, param.annotation)))

    @functools.wraps(command)
    def run(**values: Any) -> None:
        group = AnalysisArgs(**{name: values.pop(name) for name in names})
        command(**values, **{group_name: group})

    # typer reads the signature and the annotations: the group's parameters, as real types
    run.__signature__ = signature.replace(parameters=parameters, return_annotation=None)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in parameters}
    return run


# ------------------------------------------------------------------------------------ checking values


def checked_gpu_specs(path: Optional[Path]) -> str | None:
    """``--gpu-specs``: the file read and checked before any work (a bad one is one line, exit 2),
    as the absolute path the analyses read it from (job workers too)."""
    if path is None:
        return None
    from traceview.hardware import load_specs

    load_specs(path)
    return str(path.resolve())


def checked_ncu(paths: tuple[Path, ...]) -> tuple[str, ...]:
    """``--ncu``: every export read and checked before any work (a bad one is one line, exit 2), as
    the absolute paths the analyses read them from."""
    if not paths:
        return ()
    from traceview.parsers.ncu import read_ncu

    read_ncu(list(paths))
    return tuple(str(p.resolve()) for p in paths)


def checked_graph_captures(paths: tuple[Path, ...]) -> tuple[str, ...]:
    """``--graph-capture``: each file must exist (one line, exit 2), named as the user gave it."""
    from traceview.errors import TraceviewError

    for path in paths:
        if not path.is_file():
            raise TraceviewError(f"{path}: no such file (--graph-capture takes a trace of the graphs' capture)")
    return tuple(str(p) for p in paths)


def checked_model_flops(text: Optional[str], dtype: str) -> tuple[float | None, str]:
    """``--model-flops`` (a positive number or a product of numbers) and ``--mfu-dtype`` checked
    before any work: one line and exit 2 when wrong."""
    from traceview.errors import TraceviewError
    from traceview.hardware import DTYPES, normalize_dtype

    key = normalize_dtype(dtype) or dtype.lower()
    if key not in DTYPES:
        raise TraceviewError(f"--mfu-dtype: {dtype!r} is not one of {', '.join(DTYPES)}")
    if text is None:
        return None, key
    value = 1.0
    try:
        for factor in text.split("*"):
            value *= float(factor.strip())
    except ValueError:
        raise TraceviewError(f"--model-flops: {text!r} is not a number or a product of numbers (e.g. 6*7e9*4096)") \
            from None
    if not 0 < value < float("inf"):
        raise TraceviewError(f"--model-flops: {text!r} must be a positive, finite number of FLOPs")
    return value, key


def comm_patterns(patterns: List[str], config: Optional[Path]) -> tuple[str, ...]:
    """The user's communication rules: the config file's, then the ``--comm-pattern`` ones, checked
    here so that a bad regex or file stops before any work (one line, exit 2)."""
    if not patterns and config is None:
        return ()  # (and the analyses are not imported before the parse for nothing)
    from traceview.analyses.comm_rules import load_config, rule_table

    found = (*(load_config(config) if config is not None else ()), *patterns)
    rule_table(found)  # raises TraceviewError on a bad rule
    return found
