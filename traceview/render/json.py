"""JSON report: the report model as is (schema: docs/report.schema.json, versioned by
``schema_version``)."""

from __future__ import annotations

from typing import Any, Mapping

from traceview.report import report_to_json


def render_json(report: Mapping[str, Any], *, indent: int | None = 1) -> str:
    """The report as JSON text, ending with a newline."""
    return report_to_json(report, indent=indent) + "\n"
