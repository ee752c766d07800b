"""What the commands that compare (``diff``, ``check``) share: checking ``--format`` and
``--noise-k`` before any work, and the report of one trace (file or folder) from the one pipeline,
with a progress bar on standard error for big inputs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from traceview.commands._common import analyze_in_process
from traceview.errors import TraceviewError

if TYPE_CHECKING:
    from traceview.report import Report


def require_format(fmt: str, formats: Sequence[str]) -> None:
    """One line and exit 2 when ``--format`` is not one of ``formats``."""
    if fmt not in formats:
        raise TraceviewError(f"--format: {fmt!r} is not one of {', '.join(formats)}")


def require_noise_k(noise_k: float) -> None:
    """One line and exit 2 when ``--noise-k`` (pooled standard deviations) is not positive."""
    if not noise_k > 0:
        raise TraceviewError(f"--noise-k: must be positive, not {noise_k:g}")


def check_compare_options(fmt: str, formats: Sequence[str], noise_k: float) -> None:
    """The option checks ``diff`` and ``check`` make before reading any trace."""
    require_format(fmt, formats)
    require_noise_k(noise_k)


def report_of(path: str, *, step_marker: Optional[str], use_cache: bool, jobs: Optional[int] = None,
              gpu_specs: Optional[str] = None) -> Report:
    """The report of the trace at ``path`` (a file or a folder of per-rank files), analysed in this
    process (the comparisons need whole tables), with a progress bar on standard error for big
    inputs. ``gpu_specs``: the user's GPU table, checked (``checked_gpu_specs``)."""
    # imported on use: the CLI imports this module at start (traceview/cli.py)
    from rich.console import Console

    from traceview.findings import Options

    return analyze_in_process([path], Options(step_marker=step_marker, gpu_specs=gpu_specs), use_cache=use_cache,
                              console=Console(stderr=True), jobs=jobs)
