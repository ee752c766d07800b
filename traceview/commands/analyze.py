"""``traceview analyze PATH...``: one path for every format and every way of running. The options
become :class:`~traceview.findings.Options`; :func:`traceview.pipeline.analyze` gives the
:class:`~traceview.report.Report` (in this process, or rank by rank on local worker processes or a
Dask cluster: the same report); the renderer named by ``--format`` formats it, to ``-o FILE`` or to
standard output (the terminal text in colour when standard output is a terminal)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional

import typer

from traceview.commands._common import (GPU_SPECS_OPTION, JOBS_OPTION, MFU_DTYPE_OPTION, MODEL_FLOPS_OPTION,
                                        analyze_in_process, check_output_file, checked_gpu_specs,
                                        checked_model_flops, job_progress, write_output_file)
from traceview.errors import TraceviewError
from traceview.units import fmt_bytes

if TYPE_CHECKING:
    from traceview.findings import Options

#: the analyses' top-N tables keep at least this many rows, whatever ``--top`` lists
MIN_TABLE_TOP_N = 20


def command(
    paths: List[str] = typer.Argument(..., help="Trace files or directories (Kineto .json/.json.gz, Nsight .sqlite)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Parse and analyse again instead of reading the caches "
                                  "(traces, reports)."),
    jobs: Optional[int] = JOBS_OPTION,
    step_marker: Optional[str] = typer.Option(
        None, "--step-marker", help="Regex choosing step ranges among annotations/NVTX ranges."),
    top: int = typer.Option(5, "--top", min=1, help="How many findings the terminal lists first."),
    details: bool = typer.Option(False, "--details", help="Terminal: also the per-rank table, every finding with its "
                                 "nested ones and recommendations, every warning and each analysis's table."),
    summary_only: bool = typer.Option(False, "--summary-only", help="Terminal: the job, the headline, the per-rank "
                                      "table and the warnings only (the analyses still run: the headline needs them)."),
    fmt_name: str = typer.Option("text", "--format", "-f", help="text (terminal), markdown (GitHub issues), "
                                 "html (one self-contained file) or json (docs/report.schema.json)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report to this file and print "
                                          "where (default: standard output)."),
    workers: Optional[int] = typer.Option(
        None, "--workers", "-w", help="Analyze rank by rank in N local worker processes (0: one per core): bounded "
        "memory for jobs of many ranks, the same report (docs/scaling.md)."),
    scheduler: Optional[str] = typer.Option(
        None, "--scheduler", envvar="TRACEVIEW_SCHEDULER", help="Analyze rank by rank on a running Dask cluster "
        "(tcp://HOST:PORT; its workers must see the trace files at the same paths)."),
    comm_pattern: Optional[List[str]] = typer.Option(
        None, "--comm-pattern", help="[FAMILY=]REGEX: kernels whose name matches are communication (repeatable; "
        "tried before the built-in table, docs/metrics.md)."),
    # help is plain click text (traceview/cli.py): brackets are shown as written
    comm_config: Optional[Path] = typer.Option(
        None, "--comm-config", help="TOML file of communication rules (comm_patterns = [...] or "
        "[[comm_rules]], top level or under [tool.traceview])."),
    gpu_specs: Optional[Path] = GPU_SPECS_OPTION,
    model_flops: Optional[str] = MODEL_FLOPS_OPTION,
    mfu_dtype: str = MFU_DTYPE_OPTION,
    max_findings: Optional[int] = typer.Option(
        None, "--max-findings", min=1, metavar="N", help="Markdown and HTML: list at most N top-level findings (with "
        "those nested under them), in the report's order; the JSON report keeps them all."),
    plotlyjs: str = typer.Option(
        "cdn", "--plotlyjs", metavar="cdn|inline", help="HTML: load plotly.js from its CDN (a small file; every "
        "number reads offline, the charts need the network) or inline it (~4.8 MB more; charts work offline)."),
) -> None:
    """Analyze traces: the answer first (step time, utilization, where time goes, top findings and
    kernels); --details or --format markdown|html|json for everything.

    Example: traceview analyze run/ -f markdown -o report.md --max-findings 5
    """
    from traceview.runtime import collector_paused, quiet_collector  # the command process's runtime

    with quiet_collector():
        # imported here, not at the top: the CLI imports every command module at start (traceview/cli.py);
        # the analyses, the report and the renderers (pandas with them) while the trace is parsed (_analyze)
        with collector_paused():
            from traceview.discovery import registered_formats

            registered_formats()  # the parsers' modules
        _analyze(paths, no_cache=no_cache, jobs=jobs, step_marker=step_marker, top=top, details=details,
                 summary_only=summary_only, fmt_name=fmt_name, output=output, workers=workers, scheduler=scheduler,
                 comm_pattern=comm_pattern, comm_config=comm_config, gpu_specs=gpu_specs, model_flops=model_flops,
                 mfu_dtype=mfu_dtype, max_findings=max_findings, plotlyjs=plotlyjs)


def _analyze(paths: List[str], *, no_cache: bool, jobs: Optional[int], step_marker: Optional[str], top: int,
             details: bool, summary_only: bool, fmt_name: str, output: Optional[Path], workers: Optional[int],
             scheduler: Optional[str], comm_pattern: Optional[List[str]], comm_config: Optional[Path],
             gpu_specs: Optional[Path], model_flops: Optional[str], mfu_dtype: str, max_findings: Optional[int],
             plotlyjs: str) -> None:
    """The command's work (its options as :func:`command` documents them)."""
    from rich.console import Console

    from traceview.findings import Options

    if plotlyjs not in ("cdn", "inline"):
        raise TraceviewError(f"--plotlyjs {plotlyjs}: choose cdn or inline")
    if output is not None:
        check_output_file(output)  # before the work: a path that cannot be written fails at once
    flops, flops_dtype = checked_model_flops(model_flops, mfu_dtype)
    options = Options(step_marker=step_marker, top_n=max(top, MIN_TABLE_TOP_N),
                      comm_patterns=comm_patterns(comm_pattern or [], comm_config),
                      gpu_specs=checked_gpu_specs(gpu_specs), model_flops_per_step=flops, mfu_dtype=flops_dtype)

    from traceview.runtime import collector_paused

    def prepare() -> None:
        """What comes after the parse, done while parse workers run: the imports (~0.3 s, pandas
        among them) and the check that needs them (a bad --format fails as the work starts)."""
        with collector_paused():
            import traceview.analyses  # noqa: F401
            import traceview.pipeline  # noqa: F401
            import traceview.report_cache  # noqa: F401
            from traceview.render import get_renderer
        get_renderer(fmt_name)

    report = run_pipeline(paths, options, use_cache=not no_cache, workers=workers, scheduler=scheduler, jobs=jobs,
                          only_rendered=True, meanwhile=prepare)
    from traceview.render import get_renderer  # imported by prepare(), which run_pipeline ran

    renderer = get_renderer(fmt_name)(top=top, details=details, summary_only=summary_only, max_findings=max_findings,
                                      plotlyjs=plotlyjs)
    if output is None:
        _to_stdout(renderer, report)
        return
    content = renderer.render(report)
    data = content if isinstance(content, bytes) else content.encode("utf-8")
    write_output_file(output, data)
    Console().print(f"wrote the {renderer.name} report to {output} ({fmt_bytes(len(data))})", highlight=False,
                    soft_wrap=True)


def comm_patterns(patterns: List[str], config: Optional[Path]) -> tuple[str, ...]:
    """The user's communication rules: the config file's, then the ``--comm-pattern`` ones, checked
    here so that a bad regex or file stops before any work (one line, exit 2)."""
    if not patterns and config is None:
        return ()  # (and the analyses are not imported before the parse for nothing: _analyze)
    from traceview.analyses.comm_rules import load_config, rule_table

    found = (*(load_config(config) if config is not None else ()), *patterns)
    rule_table(found)  # raises TraceviewError on a bad rule
    return found


def run_pipeline(paths: List[str], options: Options, *, use_cache: bool, workers: Optional[int],
                 scheduler: Optional[str], jobs: Optional[int] = None, only_rendered: bool = False,
                 meanwhile: Optional[Callable[[], None]] = None) -> Any:
    """The report, with a progress bar on standard error for big inputs (files loaded) or for a job
    (files analyzed). In this process the report cache is used with the trace cache
    (:func:`analyze_in_process`; ``only_rendered``: the report is only rendered, its tables need
    not stay whole); a job's workers analyse every time. The job executors are imported only for a
    job. ``meanwhile``: the command's work to overlap with the parse (done before this returns)."""
    from rich.console import Console

    progress_console = Console(stderr=True)
    if workers is not None or scheduler:
        from traceview.jobs import make_executor
        from traceview.pipeline import analyze

        if meanwhile is not None:
            meanwhile()  # this process parses nothing: the caller's work (and checks) first

        with job_progress(progress_console) as counted:
            executor = make_executor(workers, scheduler, progress=counted)
            return analyze(paths, options, use_cache=use_cache, executor=executor)
    return analyze_in_process(paths, options, use_cache=use_cache, console=progress_console, jobs=jobs,
                              only_rendered=only_rendered, meanwhile=meanwhile)


def _to_stdout(renderer: Any, report: Any) -> None:
    from traceview.render.terminal import TextRenderer, make_console

    if isinstance(renderer, TextRenderer):
        renderer.print(report, make_console())  # colour when standard output is a terminal
        return
    content = renderer.render(report)
    if isinstance(content, bytes):
        sys.stdout.buffer.write(content)
        sys.stdout.flush()
    else:
        typer.echo(content, nl=False)
