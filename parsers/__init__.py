"""Input formats: each module here that declares an :class:`traceview.registry.InputFormat` registers
it on import; :mod:`traceview.loading` imports them all (:func:`register_all`) and tries the formats
in their declared order. Adding a format is adding a module here."""

from __future__ import annotations

import importlib
import pkgutil


def register_all() -> None:
    """Import every module of this package (each registers the formats it declares)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
