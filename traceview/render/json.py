"""JSON report: the report model as is (schema: docs/report.schema.json, versioned by
``schema_version``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from traceview.registry import Renderer, register_renderer
from traceview.report import report_to_json

if TYPE_CHECKING:
    from traceview.report import Report


def render_json(report: Mapping[str, Any], *, indent: int | None = 1) -> str:
    """The report as JSON text, ending with a newline."""
    return report_to_json(report, indent=indent) + "\n"


@register_renderer
class JsonRenderer(Renderer):
    """The report model as JSON (option ``indent``, default 1)."""

    name = "json"
    output_file_extension = ".json"
    description = "the report model for tools, CI gates and notebooks (docs/report.schema.json)"

    def render(self, report: "Report") -> str:
        return render_json(report, indent=self.options.get("indent", 1))
