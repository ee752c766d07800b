"""Input formats: each module here declares an :class:`traceview.registry.InputFormat` (name, sniff,
parse) and registers it on import; :mod:`traceview.loading` tries them in order. Adding a format is
adding a module here and its name to ``FORMAT_MODULES``."""

from __future__ import annotations

import importlib

#: modules that declare input formats (imported, so they register themselves)
FORMAT_MODULES = ("nsys", "kineto")


def register_all() -> None:
    for name in FORMAT_MODULES:
        importlib.import_module(f"{__name__}.{name}")
