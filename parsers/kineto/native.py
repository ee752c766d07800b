"""The native column decoder of the Kineto parser (``_kineto_columns.c``, built when a C compiler was
present at install), or None for each of its functions: then msgspec decodes every chunk."""

from __future__ import annotations

__all__ = ["native_array_end", "native_decode_chunk", "native_first_seen"]

try:
    from traceview.parsers.kineto._kineto_columns import (array_end as native_array_end,
                                                          decode_chunk as native_decode_chunk,
                                                          first_seen as native_first_seen)
except ImportError:  # pragma: no cover - no compiler at install
    native_decode_chunk = native_first_seen = native_array_end = None
