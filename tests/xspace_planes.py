"""What the tests' hand-made XSpaces share (tests/unit/test_xspace*.py)."""

from __future__ import annotations


def stat_id(meta: dict[str, int], plane: object, name: str) -> int:
    """The id of the stat ``name`` in ``plane`` (an ``XPlane`` message), declared in its
    ``stat_metadata`` on first use (``meta``: the ids given so far)."""
    if name not in meta:
        meta[name] = len(meta) + 1
        plane.stat_metadata[meta[name]].id = meta[name]  # type: ignore[attr-defined]
        plane.stat_metadata[meta[name]].name = name  # type: ignore[attr-defined]
    return meta[name]
