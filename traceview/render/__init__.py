"""Renderers: one module per output format, each a registered :class:`traceview.registry.Renderer`
that formats one :class:`traceview.report.Report` and computes nothing.

Importing this package fills ``traceview.registry.RENDERERS`` with ``text`` (the terminal),
``markdown``, ``html`` and ``json``; :func:`get_renderer` looks one up by name.
"""

from __future__ import annotations

from traceview.errors import TraceviewError
from traceview.registry import RENDERERS, Renderer
# in the order `--format` lists them; each module registers its renderer
from traceview.render import terminal, markdown, html, json  # noqa: F401,E402


def renderer_names() -> list[str]:
    """The names ``--format`` accepts, in registration order."""
    return list(RENDERERS)


def get_renderer(name: str) -> type[Renderer]:
    """The renderer class registered as ``name`` (case-insensitive); a one-line
    :class:`TraceviewError` listing the choices for any other name."""
    cls = RENDERERS.get(name.strip().lower())
    if cls is None:
        raise TraceviewError(f"--format {name}: not a report format; choose one of {', '.join(renderer_names())}")
    return cls


__all__ = ["get_renderer", "renderer_names"]
