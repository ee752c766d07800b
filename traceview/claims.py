"""GPU time a finding claims: the intervals its cost is made of, per rank and GPU.

A finding that costs GPU time says which time (``Finding.claims``): idle gaps for an idle cause,
exposed communication intervals for a communication problem, and so on. The findings engine
(:mod:`traceview.accounting`) checks the claims against each other so that no time is counted twice:
top-level findings never claim the same interval of the same GPU, nested findings claim a subset of
their parent's time, and every cost and share is computed from the claimed time on one denominator.

Intervals are half-open ``[start_ns, end_ns)`` on the rank's own clock (the trace's timestamps), in
int64 ns, keyed by (rank, device). Everything here is vectorised (:mod:`traceview.intervals`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from traceview import intervals as iv

#: devices take the low bits of a GPU key; ranks the rest (devices are small non-negative ids)
_DEVICE_BITS = 20
_DEVICE_MASK = (1 << _DEVICE_BITS) - 1


def gpu_key(rank: np.ndarray | int, device: np.ndarray | int) -> np.ndarray:
    """One int64 key per (rank, device)."""
    r = np.asarray(rank, dtype=np.int64)
    d = np.asarray(device, dtype=np.int64)
    return (r << _DEVICE_BITS) | (d & _DEVICE_MASK)


def split_gpu_key(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rank, device) of GPU keys made by :func:`gpu_key`."""
    k = np.asarray(key, dtype=np.int64)
    return k >> _DEVICE_BITS, k & _DEVICE_MASK


class Claims:
    """A set of GPU-time intervals keyed by (rank, device), always kept as a per-GPU union
    (sorted, disjoint, non-touching), so :meth:`total_ns` never counts an instant twice."""

    __slots__ = ("key", "start_ns", "end_ns")

    def __init__(self, key: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray, *, normalized: bool = False) -> None:
        if normalized:
            self.key, self.start_ns, self.end_ns = key, start_ns, end_ns
        else:
            self.key, self.start_ns, self.end_ns = iv.union_by(key, start_ns, end_ns)

    # ------------------------------------------------------------------ construction
    @classmethod
    def empty(cls) -> Claims:
        e = np.empty(0, dtype=np.int64)
        return cls(e, e.copy(), e.copy(), normalized=True)

    @classmethod
    def of(
        cls, rank: np.ndarray | int, device: np.ndarray | int, start_ns: Sequence[int] | np.ndarray,
        end_ns: Sequence[int] | np.ndarray,
    ) -> Claims:
        """Claims from parallel arrays (``rank``/``device`` may be scalars)."""
        s = np.asarray(start_ns, dtype=np.int64).reshape(-1)
        e = np.asarray(end_ns, dtype=np.int64).reshape(-1)
        key = np.broadcast_to(gpu_key(rank, device), s.shape)
        return cls(np.ascontiguousarray(key), s, e)

    @classmethod
    def concat(cls, parts: Iterable[Claims | None]) -> Claims:
        ps = [p for p in parts if p is not None and p.start_ns.size]
        if not ps:
            return cls.empty()
        if len(ps) == 1:
            return ps[0]
        return cls(np.concatenate([p.key for p in ps]), np.concatenate([p.start_ns for p in ps]),
                   np.concatenate([p.end_ns for p in ps]))

    # ------------------------------------------------------------------ algebra
    def intersect(self, other: Claims) -> Claims:
        k, s, e = iv.intersect_by((self.key, self.start_ns, self.end_ns), (other.key, other.start_ns, other.end_ns))
        return Claims(k, s, e, normalized=True)

    def subtract(self, other: Claims) -> Claims:
        if other.start_ns.size == 0 or self.start_ns.size == 0:
            return self
        k, s, e = iv.subtract_by((self.key, self.start_ns, self.end_ns), (other.key, other.start_ns, other.end_ns))
        return Claims(k, s, e, normalized=True)

    def union(self, other: Claims) -> Claims:
        return Claims.concat([self, other])

    def only_gpu(self, rank: int, device: int) -> Claims:
        keep = self.key == gpu_key(rank, device)
        return Claims(self.key[keep], self.start_ns[keep], self.end_ns[keep], normalized=True)

    def only_ranks(self, ranks: Iterable[int]) -> Claims:
        r, _ = split_gpu_key(self.key)
        keep = np.isin(r, np.fromiter(ranks, dtype=np.int64))
        return Claims(self.key[keep], self.start_ns[keep], self.end_ns[keep], normalized=True)

    # ------------------------------------------------------------------ measures
    def __len__(self) -> int:
        return int(self.start_ns.size)

    def __bool__(self) -> bool:
        return bool(self.start_ns.size)

    def total_ns(self) -> int:
        return int((self.end_ns - self.start_ns).sum())

    def by_gpu(self) -> dict[tuple[int, int], int]:
        """Claimed ns per (rank, device)."""
        k, tot = iv.sum_by(self.key, self.end_ns - self.start_ns)
        r, d = split_gpu_key(k)
        return {(int(a), int(b)): int(t) for a, b, t in zip(r, d, tot)}

    def ranks(self) -> set[int]:
        r, _ = split_gpu_key(iv.unique_sorted(self.key) if self.key.size else self.key)
        return {int(x) for x in r}

    def largest(self, n: int) -> list[tuple[int, int, int, int]]:
        """The ``n`` longest intervals as (rank, device, start_ns, end_ns), longest first."""
        dur = self.end_ns - self.start_ns
        rows = np.arange(dur.size)
        if 0 < n < dur.size:
            # only the intervals at least as long as the n-th longest can be among the n: sort those
            # (a whole lexsort was 1 ms per 66k claims, for a report's 10 intervals per finding)
            rows = np.flatnonzero(dur >= np.partition(dur, dur.size - n)[dur.size - n])
        order = rows[np.lexsort((self.start_ns[rows], -dur[rows]))][:n]
        r, d = split_gpu_key(self.key[order])
        return [(int(a), int(b), int(s), int(e))
                for a, b, s, e in zip(r, d, self.start_ns[order], self.end_ns[order])]

    def __repr__(self) -> str:
        return f"<Claims {len(self)} intervals, {self.total_ns()} ns on {len(self.by_gpu())} GPU(s)>"
