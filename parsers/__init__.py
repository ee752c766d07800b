"""Input formats: each module (or subpackage) here that declares an :class:`traceview.registry.InputFormat`
registers it on import; :mod:`traceview.discovery` imports them all (:func:`register_all`) and tries the
formats in their declared order. Adding a format is adding a module here that declares its sniff,
parse, redaction and producer (``parsers/kineto/``, ``parsers/nsys/``)."""

from __future__ import annotations

import functools
import importlib
import pkgutil


@functools.lru_cache(maxsize=1)
def register_all() -> None:
    """Import every module of this package (each registers the formats it declares); once per process
    (every format lookup asks)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
