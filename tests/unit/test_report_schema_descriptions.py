"""Every field of docs/report.schema.json has its own description (issue 30, item 5: e.g.
``findings_summary.total`` had none; by_severity's meaning sat in its parent's text only).

The walk visits every ``properties`` map at any depth (top level, items, additionalProperties,
``$defs``), so a field added without a description fails here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "report.schema.json"


def fields(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, schema) of every property of every ``properties`` map under ``node``."""
    if isinstance(node, dict):
        for name, sub in (node.get("properties") or {}).items():
            yield f"{path}.{name}".lstrip("."), sub
        for key, value in node.items():
            step = "" if key in ("properties", "items", "additionalProperties", "allOf", "anyOf") else key
            if key == "properties":
                for name, sub in value.items():
                    yield from fields(sub, f"{path}.{name}")
            else:
                yield from fields(value, f"{path}.{step}" if step else path)
    elif isinstance(node, list):
        for value in node:
            yield from fields(value, path)


def test_every_field_has_its_own_description() -> None:
    schema = json.loads(SCHEMA.read_text())
    found = list(fields(schema))
    assert len(found) > 150  # the walk reaches the nested maps
    missing = sorted({p for p, sub in found if not (isinstance(sub, dict) and str(sub.get("description", "")).strip())})
    assert not missing, f"{len(missing)} fields without a description: {missing[:20]}"


def test_the_findings_summary_counts_say_what_they_count() -> None:
    counts = json.loads(SCHEMA.read_text())["$defs"]["findingsSummary"]["properties"]
    assert "nested" in counts["total"]["description"] and "top-level" in counts["total"]["description"].lower()
    assert "top-level" in counts["by_severity"]["description"].lower()
