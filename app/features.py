"""The other features of traceview the app shows, imported here and nowhere else in the app: the
report figures, the diff of two reports (Compare page) and the renderers (report downloads). When one
of them moves, this module is the one edit."""

from __future__ import annotations

from typing import Any

from traceview.model import Trace
from traceview.registry import RENDERERS
from traceview.report import Report

# The figures are being moved into a feature package (traceview/render/) while this is written: take
# them from where they are.
try:
    from traceview.render import figures  # type: ignore[attr-defined,unused-ignore]
except ImportError:
    from traceview import figures  # type: ignore[no-redef,unused-ignore]
from traceview.compare import METRICS
from traceview.compare import diff_reports as diff_two_reports

__all__ = ["DOWNLOADS", "diff_reports", "figures", "metric_label", "perfetto_trace", "render_report"]

#: download format (button id suffix) -> (renderer name, file extension)
DOWNLOADS = {"md": ("markdown", "md"), "html": ("html", "html"), "json": ("json", "json")}


def metric_label(metric: str) -> str:
    """A diff metric's label for people (the metric's own name when the diff does not know it)."""
    return str(METRICS.get(metric, ("", False, metric))[2])


def diff_reports(base: Report, new: Report, *, base_label: str, new_label: str) -> dict[str, Any]:
    """The diff of two runs' reports, as the diff's JSON-able dict (``summary``, ``metrics``,
    ``kernels``, ``findings``, ``notes``)."""
    diff = diff_two_reports(base, new, base_label=base_label, new_label=new_label)
    return diff.to_dict()


def render_report(fmt: str, report: Report) -> tuple[str, str]:
    """(text, file extension) of ``report`` in download format ``fmt`` (see :data:`DOWNLOADS`), by the
    registered renderer of that name (``traceview.registry.RENDERERS``)."""
    import traceview.render  # noqa: F401  (registers the renderers)

    name, ext = DOWNLOADS[fmt]
    out = RENDERERS[name]().render(report)
    return (out.decode("utf-8") if isinstance(out, bytes) else out), ext


def perfetto_trace(trace: Trace, report: Report) -> str:
    """``trace`` as Chrome trace JSON for the Perfetto UI, with ``report``'s findings and idle gaps
    as annotation tracks (what ``traceview export-perfetto`` writes)."""
    from traceview.export_perfetto import export_chrome_trace

    return export_chrome_trace(trace, report)
