"""Loading with a progress bar, and writing outputs (``-o``), shared by the commands."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence

import typer

from traceview.errors import OutputError, output_error

if TYPE_CHECKING:
    from rich.console import Console

    from traceview.discovery import Inputs
    from traceview.findings import Options
    from traceview.model import Trace
    from traceview.report import Report

#: below this total size loading is instant: no progress bar
PROGRESS_MIN_BYTES = 32 * 1024 * 1024
#: the width of piped output, as the terminal report's (``traceview.render.terminal.TEXT_WIDTH``;
#: tests/test_cli.py checks they agree): importing the renderers costs pandas, which ``info`` needs not
PIPED_WIDTH = 160

#: ``--jobs``, for every command that loads traces (None: the cores available)
JOBS_OPTION = typer.Option(
    None, "--jobs", "-j", min=1, help="Processes that parse: a big Kineto file is cut into ranges parsed side by "
    "side, many files are parsed side by side (default: the cores available; 1: this process only). Inputs under "
    "32 MB are read in one process. The same results whatever N. (TRACEVIEW_SPLIT_MIN_EVENTS=N also runs the "
    "analyses of a rank of N events or more in two processes: opt-in, docs/scaling.md.)")

#: ``--gpu-specs``, for every command that analyses traces
GPU_SPECS_OPTION = typer.Option(
    None, "--gpu-specs", help="TOML file of GPU figures (peak TFLOP/s, memory and link bandwidth) that overrides or "
    "extends the built-in table, for a GPU traceview does not know or figures it has not verified against a vendor "
    "source (docs/metrics.md, Hardware peaks). The efficiency analysis divides by them.")


def checked_gpu_specs(path: Optional[Path]) -> str | None:
    """``--gpu-specs``: the file read and checked before any work (a bad one is one line, exit 2),
    as the absolute path the analyses read it from (job workers too)."""
    if path is None:
        return None
    from traceview.hardware import load_specs

    load_specs(path)
    return str(path.resolve())


#: ``--model-flops`` and ``--mfu-dtype``, for the commands that analyse traces
MODEL_FLOPS_OPTION = typer.Option(
    None, "--model-flops", help="The model's FLOPs of one step on one GPU, a number or a product (6*7e9*4096: "
    "6 x parameters x tokens per GPU per step for a dense transformer's training step). The efficiency analysis "
    "then gives model FLOPs utilisation (MFU) per step; above 100% it says the input is wrong.")
MFU_DTYPE_OPTION = typer.Option("bf16", "--mfu-dtype", help="The dtype whose dense tensor peak MFU divides by "
                                "(bf16, fp16, fp8, tf32, fp32, ...).")


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


#: ``progress(file, bytes_done, bytes_total)``, as :func:`traceview.load` and the pipeline call it
LoadProgress = Callable[[Path, int, int], None]
#: ``progress(files_done, files_total, files_failed)``, as a job's executor calls it
JobProgress = Callable[[int, int, int], None]


def make_console() -> Console:
    """A console for standard output, wide enough for tables when output is piped (rich assumes 80)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=PIPED_WIDTH)


def _wants_bar(console: Console) -> bool:
    return console.is_terminal or os.environ.get("TRACEVIEW_PROGRESS") == "1"


@contextlib.contextmanager
def load_progress(inputs: Inputs, console: Console) -> Iterator[LoadProgress | None]:
    """A progress callback for loading ``inputs`` (a bar per file on ``console``), or None when the
    inputs are small or ``console`` is not a terminal (``TRACEVIEW_PROGRESS=1`` forces the bar)."""
    if inputs.total_bytes < PROGRESS_MIN_BYTES or not _wants_bar(console):
        yield None
        return
    # only for a bar: rich.progress and what it imports cost an unattended run ~10 ms
    from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("loading {task.description}"), BarColumn(), DownloadColumn(),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        tasks: dict[Path, TaskID] = {}

        def progress(file: Path, done: int, size: int) -> None:
            if file not in tasks:
                tasks[file] = bar.add_task(file.name, total=max(size, 1))
            bar.update(tasks[file], completed=min(done, size))

        yield progress


def load_in_command(inputs: Inputs, *, use_cache: bool, step_marker: str | None, console: Console,
                    jobs: int | None = None, meanwhile: Callable[[], None] | None = None) -> Trace:
    """:func:`traceview.load` as a command runs it: with a progress bar for big inputs, ``--jobs``,
    and the command process's runtime (``traceview.runtime``: Arrow's system pool, the heap
    settings around each parse and a trim after, ``meanwhile`` while the parse workers run)."""
    from traceview import runtime
    from traceview.loading import load

    runtime.prefer_system_memory_pool()
    with load_progress(inputs, console) as progress:
        return load(inputs, use_cache=use_cache, step_marker=step_marker, progress=progress, jobs=jobs,
                    hooks=runtime.cli_parse_hooks(meanwhile))


@contextlib.contextmanager
def job_progress(console: Console) -> Iterator[JobProgress | None]:
    """A progress callback counting a job's files as their tasks complete (None off a terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    if not _wants_bar(console):
        yield None
        return
    with Progress(TextColumn("analyzing files"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        task = bar.add_task("", total=None)

        def progress(done: int, total: int, failed: int) -> None:
            bar.update(task, completed=done, total=total, description=f"{failed} failed" if failed else "")

        yield progress


def load_with_progress(paths: Sequence[str], *, use_cache: bool, step_marker: str | None,
                       console: Console, jobs: int | None = None) -> Trace:
    """:func:`traceview.load` with a progress bar for big inputs (the commands that need a Trace),
    parsing with ``jobs`` processes (``--jobs``)."""
    from traceview.discovery import discover

    return load_in_command(discover(paths), use_cache=use_cache, step_marker=step_marker, console=console, jobs=jobs)


def analyze_in_process(paths: Sequence[str], options: Options, *, use_cache: bool, console: Console,
                       jobs: int | None = None, only_rendered: bool = False,
                       meanwhile: Callable[[], None] | None = None) -> Report:
    """The report of ``paths`` analysed in this process (:func:`traceview.pipeline.analyze`), with a
    progress bar for big inputs. With ``use_cache`` the report is read from the report cache when
    the same files were analysed with the same options by the same code (traceview/report_cache.py),
    else computed and stored there; the trace is loaded either way (from its Arrow cache), so the
    report is the same object a computation gives (its HTML timeline needs the trace).
    ``only_rendered``: the caller only renders the report (``analyze``), so without the cache its
    tables are cut to what the report shows as each analysis ends (less memory, the same output:
    ``whole_tables`` of :func:`traceview.pipeline.analyze`); the comparisons need them whole.
    ``meanwhile``: the command's work to do while the parse workers run (its imports); done by the
    time the load returns. The inputs are found once: the load and the report key share their
    records (and so each file's cache key, read once)."""
    from traceview import runtime
    from traceview.discovery import discover
    from traceview.loading import parse_jobs

    inputs = discover(paths)
    # the pipeline and the report cache (pandas with them) are imported after the load starts: the
    # caller's work for meanwhile may be importing them while the parse runs
    trace = load_in_command(inputs, use_cache=use_cache, step_marker=options.step_marker, console=console,
                            jobs=jobs, meanwhile=meanwhile)
    from traceview import report_cache
    from traceview.pipeline import analyze

    if not use_cache:
        with parse_jobs(jobs):  # --jobs bounds the pipeline's opt-in split too (until its rewrite)
            report = analyze(trace, options, whole_tables=not only_rendered)
        runtime.release_free_memory()  # the analyses' free pages, before the report is rendered
        return report
    key = report_cache.report_key(inputs.files, options, inputs.skipped)
    cached = report_cache.read_report(key, trace) if key is not None else None
    if cached is not None:
        return cached
    with parse_jobs(jobs):
        report = analyze(trace, options)  # what analyze(paths) does after this same load
    runtime.release_free_memory()
    if key is not None:
        report_cache.write_report(key, report)
    return report


def check_output_file(path: Path) -> None:
    """Fail before any work when ``path`` (``-o FILE``) cannot be written: its folders are made and
    a probe file is written and removed, so a path under a regular file, a read-only folder or
    /proc is one line (exit 2) at once instead of a traceback after the analysis."""
    if path.is_dir():
        raise OutputError(path, "is a directory", "-o takes a file name")
    check_output_dir(path.parent, named=path)
    probe = path.with_name(path.name + ".tmp")
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise output_error(path, exc) from None


def check_output_dir(folder: Path, named: Path | None = None) -> None:
    """Make the output folder ``folder`` (and its parents) and check a file can be made in it, or
    fail with one line naming ``named`` (the user's ``-o``; default ``folder``)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # FileExistsError: a part of the path is a regular file
        raise output_error(named or folder, exc) from None
    if named is None:
        probe = folder / ".traceview-write-test"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise output_error(folder, exc) from None


def write_output_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file, then a rename)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise output_error(path, exc) from None
