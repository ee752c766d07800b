"""The export's strings (``StringIds``) as one pool of codes, and names cleaned of nsys's suffixes.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa

from traceview.parsers.nsys.columns import factorize_sorted, sparse_dictionary, used_positions
from traceview.parsers.nsys import links as link_module
from traceview.parsers.nsys.schema import EMIT_NVTX_SUFFIX


class Strings:
    """Integer codes for strings from several sources, turned into one dictionary at the end.

    Codes index a list of string blocks (``StringIds`` values first); duplicates across blocks are
    merged by :meth:`dictionary_array`. Everything is vectorised; only distinct values are touched.
    """

    def __init__(self, ids: np.ndarray | None = None, values: pa.Array | None = None) -> None:
        self.ids = ids if ids is not None else np.empty(0, dtype=np.int64)
        first = values if values is not None else pa.array([], pa.string())
        self.blocks: list[pa.Array] = [first]
        self.size = len(first)
        self._consts: dict[str, int] = {}
        self.missing = 0

    def add_block(self, values: pa.Array) -> int:
        base = self.size
        values = values.cast(pa.string()).fill_null("")
        self.blocks.append(values)
        self.size += len(values)
        return base

    def const(self, value: str) -> int:
        if value not in self._consts:
            self._consts[value] = self.add_block(pa.array([value], pa.string()))
        return self._consts[value]

    def consts(self, values: list[str]) -> np.ndarray:
        return np.array([self.const(v) for v in values], dtype=np.int64)

    def from_ids(self, ids: np.ndarray, transform: Callable[[pa.Array], pa.Array] | None = None) -> np.ndarray:
        """Codes for ``StringIds`` ids (unknown ids -> ``""``, counted in ``missing``): int64, or
        int32 while the pool is far from 2**31 strings (callers may write more codes into them)."""
        empty = self.const("")
        if len(self.ids) == 0 or len(ids) == 0:
            self.missing += int(len(ids))
            return np.full(len(ids), empty, dtype=np.int64)
        # look up each distinct id once (a table refers to few names): its code, then spread to
        # the rows, so that the only arrays as long as the rows are the inverse and the codes
        distinct_ids, inverse = factorize_sorted(np.asarray(ids))
        distinct_pos = np.minimum(np.searchsorted(self.ids, distinct_ids), len(self.ids) - 1)
        found = self.ids[distinct_pos] == distinct_ids
        self.missing += int(np.bincount(inverse, minlength=len(distinct_ids))[~found].sum())
        code_of = np.full(len(distinct_ids), empty, dtype=np.int64)
        if transform is None:
            code_of[found] = distinct_pos[found]
        else:  # the distinct ids are sorted, so are their positions: one block in pool order
            base = self.add_block(transform(self.blocks[0].take(pa.array(distinct_pos[found]))))
            code_of[found] = base + np.arange(int(found.sum()), dtype=np.int64)
        return code_of.astype(np.int32 if self.size < (1 << 30) else np.int64)[inverse]

    def ids_matching(self, ids: np.ndarray, pattern: str) -> np.ndarray:
        """Boolean per id: its ``StringIds`` value matches ``pattern`` (unknown ids: False)."""
        import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
        ids = np.asarray(ids, dtype=np.int64)
        out = np.zeros(len(ids), dtype=bool)
        if len(self.ids) == 0 or len(ids) == 0:
            return out
        pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        found = self.ids[pos] == ids
        uniq, inverse = used_positions(pos[found], len(self.ids))
        hits = pc.match_substring_regex(self.blocks[0].take(pa.array(uniq)), pattern).fill_null(False)
        out[found] = np.asarray(hits, dtype=bool)[inverse]
        return out

    def from_strings(self, values: pa.Array) -> np.ndarray:
        """Codes for a string array (nulls -> ``""``)."""
        encoded = values.cast(pa.string()).dictionary_encode()
        base = self.add_block(encoded.dictionary)
        idx = encoded.indices
        out = np.full(len(values), self.const(""), dtype=np.int64)
        valid = np.asarray(idx.is_valid())
        out[valid] = base + np.asarray(idx.drop_null(), dtype=np.int64)
        return out

    def dictionary_array(self, codes: np.ndarray, mask: np.ndarray | None = None, *,
                         reuse: bool = False) -> pa.DictionaryArray:
        """A compact int32 dictionary array of ``codes`` (any integer type); rows where ``mask`` is
        True are null. The codes are mapped through a lookup as long as the pool, so the only array
        as long as the rows that is made is the int32 indices themselves; with ``reuse`` (the
        caller's own int32 codes, not read again) not even that: the codes become the indices."""
        masked = mask is not None and bool(mask.any())
        if masked:
            assert mask is not None
            fill = codes[~mask][0] if (~mask).any() else self.const("")
            codes = np.where(mask, fill, codes)
        if len(codes) == 0:
            return pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string()))
        lookup, dictionary = self._lookup(codes)
        if reuse and not masked and codes.dtype == np.int32:
            for first in range(0, len(codes), link_module.JOIN_BLOCK_ROWS):  # in place, a block at a time
                block = codes[first:first + link_module.JOIN_BLOCK_ROWS]
                block[...] = lookup[block]
            indices = codes
        else:
            indices = lookup[codes]
        arr = pa.array(indices, pa.int32(), mask=mask if masked else None)
        return pa.DictionaryArray.from_arrays(arr, dictionary)

    def sparse_dictionary_array(self, n: int, rows: np.ndarray, codes: np.ndarray) -> pa.DictionaryArray:
        """``dictionary_array(full, mask=full < 0)`` of a column that only ``rows`` (distinct, at
        least one) of ``n`` have, with ``codes`` there (the copy kind of memcpy rows), without a
        column of codes as long as the table. Under the nulls are zeros (:func:`~traceview.model.lazy_zeros`) (where
        ``dictionary_array`` repeats the first row's index): only the pages of ``rows`` are ever
        written, so a column that a few thousand copies have costs next to no memory."""
        lookup, dictionary = self._lookup(codes)
        return sparse_dictionary(n, rows, lookup[codes], dictionary)

    def _lookup(self, codes: np.ndarray) -> tuple[np.ndarray, pa.Array]:
        """(pool position -> index into the dictionary, the dictionary) of the strings ``codes`` use,
        each distinct string once."""
        present = np.zeros(self.size, dtype=bool)
        present[codes] = True
        used = np.flatnonzero(present)
        values = pa.concat_arrays([b.cast(pa.string()) for b in self.blocks]).take(pa.array(used))
        merged = values.dictionary_encode()
        lookup = np.zeros(self.size, dtype=np.int32)
        lookup[used] = np.asarray(merged.indices, dtype=np.int32)
        return lookup, merged.dictionary


def strip_emit_nvtx(values: pa.Array) -> pa.Array:
    """NVTX names without the ``emit_nvtx`` suffix (``aten::addmm, seq = 7, op_id = 9`` -> ``aten::addmm``)."""
    import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
    return pc.replace_substring_regex(values, EMIT_NVTX_SUFFIX, "")
