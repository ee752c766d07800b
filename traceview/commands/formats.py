"""What the commands that compare (``diff``, ``check``) share: checking ``--format`` and
``--noise-k`` before any work, and the report of one trace (file or folder) from the one entry
point, with a progress bar on standard error for big inputs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from traceview.commands._common import analyze_with_progress
from traceview.errors import TraceviewError

if TYPE_CHECKING:
    from traceview.commands.options import AnalysisArgs
    from traceview.findings import Options
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


def report_of(path: str, options: Options, analysis: AnalysisArgs) -> Report:
    """The report of the trace at ``path`` (a file or a folder of per-rank files) from the one entry
    point, in this process (the comparisons need whole tables), with a progress bar on standard
    error for big inputs: ``options`` as :meth:`AnalysisArgs.options` made them (once per command,
    for every trace it compares), ``analysis`` for the caches and ``--jobs``."""
    return analyze_with_progress([path], options, use_cache=analysis.use_cache, jobs=analysis.jobs,
                                 show_progress=analysis.show_progress)
