"""The interactive web app (``traceview app PATH...``): a Dash app over the runs found under the
given paths. See docs/app.md.

Importing this package is cheap; Dash is imported by :func:`create_app` and :func:`serve`.
"""

from __future__ import annotations

from typing import Any


def create_app(*args: Any, **kwargs: Any) -> Any:
    """The ``dash.Dash`` app (see :func:`traceview.app.server.create_app`)."""
    from .server import create_app as _create

    return _create(*args, **kwargs)


def serve(*args: Any, **kwargs: Any) -> None:
    """Start the app and serve it until interrupted (see :func:`traceview.app.server.serve`)."""
    from .server import serve as _serve

    _serve(*args, **kwargs)


__all__ = ["create_app", "serve"]
