"""Forward -> backward (``fwdbwd``) links derived from autograd sequence numbers.

Newer PyTorch writes these links as Chrome-trace flow events (category ``fwdbwd``); older traces
(e.g. PyTorch 1.8-1.10, 2021) only record, in each CPU op's args, the ``Sequence number`` of the
autograd node and the ``Fwd thread id``. This module rebuilds the links from those two numbers
with the rule PyTorch's profiler applies when it writes the flows
(``generateForwardBackwardLink`` in ``torch/csrc/profiler/collection.cpp``):

* An op with a sequence number >= 0 and ``Fwd thread id`` > 0 is a **backward** op (the autograd
  node's own record); one with a sequence number and ``Fwd thread id`` 0 (or absent) is a
  **forward** op. Every forward op entered through the autograd layer records the number of the
  *next* node its thread will create (``at::sequence_number::peek()``, per thread, when grad mode
  is on: ``Dispatcher::sequenceNumberForRunningRecordFunction`` in ATen), so nested
  forward ops (``aten::conv2d`` > ``aten::convolution`` > ... ) share one number.
* Per (forward thread, sequence number), ops are taken in order of end time; a forward op
  replaces the remembered one when it starts at or after it (the op that started last created the
  node: the number only advances when a node is made); a backward op links to the remembered
  forward op, which is then forgotten, so a second backward op with the same key links only to a
  forward op that ended after the first backward op.

The trace records the forward thread as PyTorch's internal thread number, not the system thread
id the events carry, so the forward thread is taken as the one thread whose forward ops carry the
backward op's sequence number. Where several threads carry it the link would be a guess: no link,
counted as ``ambiguous``; where no forward op with it ended before the node ran, ``missing`` (both
counted per node; a trace whose forward ops record no number at all gives no links and no counts).
Ties in start time go to the op that ends later, then to the later row (file order). On a PyTorch
2.x trace with its own ``fwdbwd`` flows this rule, fed only the numbers, gives exactly those flows
(tests/test_kineto_autograd.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The two args the parser keeps per event for these links (not columns of ``Trace.events``).
AUTOGRAD_ARG_COLUMNS = ("sequence_number", "fwd_thread_id")


@dataclass(frozen=True)
class DerivedLinks:
    """``src_row`` (forward op) -> ``dst_row`` (backward op), and the nodes left unlinked."""

    src_row: np.ndarray
    dst_row: np.ndarray
    ambiguous: int  # nodes whose sequence number several forward threads carry
    missing: int  # nodes no forward op (ended before them) carries the number of


def derive_fwdbwd_links(rows: np.ndarray, is_op: np.ndarray, tid: np.ndarray, start_ns: np.ndarray,
                        end_ns: np.ndarray, sequence_number: np.ndarray, fwd_thread_id: np.ndarray) -> DerivedLinks:
    """The forward -> backward links of one rank's events (module docstring), vectorised.

    All arrays are per event and aligned: ``rows`` the event's row (returned in the pairs),
    ``is_op`` which events are CPU ops, ``tid`` their thread, ``sequence_number`` and
    ``fwd_thread_id`` the args (-1 where absent). A backward op whose key an earlier backward op
    used up is not counted as missing: newer PyTorch records the node twice, the engine's
    ``autograd::engine::evaluate_function: X`` around ``X``, and only ``X`` (which ends first) is
    linked.
    """
    numbered = is_op & (sequence_number >= 0)
    forward = np.flatnonzero(numbered & (fwd_thread_id <= 0))
    backward = np.flatnonzero(numbered & (fwd_thread_id > 0))
    empty = np.empty(0, dtype=np.int64)
    if len(backward) == 0 or len(forward) == 0:  # numbers on one side only: nothing to pair, nothing to say
        return DerivedLinks(empty, empty, 0, 0)
    thread, candidates = _forward_thread(tid[forward], sequence_number[forward], sequence_number[backward])
    ambiguous = _nodes(backward[candidates > 1], fwd_thread_id, sequence_number)
    resolved = candidates == 1
    src, dst, unmatched = _match_in_end_order(forward, backward[resolved], thread[resolved], tid, start_ns, end_ns,
                                              sequence_number)
    missing = _nodes(backward[candidates == 0], fwd_thread_id, sequence_number) + unmatched
    return DerivedLinks(rows[src].astype(np.int64), rows[dst].astype(np.int64), ambiguous, missing)


def _nodes(backward: np.ndarray, fwd_thread_id: np.ndarray, sequence_number: np.ndarray) -> int:
    """How many autograd nodes these backward ops are: newer PyTorch records each node twice (the
    engine's ``evaluate_function`` wrapper carries the node's key), so count keys, not ops."""
    return len(_unique_pairs(fwd_thread_id[backward], sequence_number[backward])[0])


def _unique_pairs(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (first, second) pairs, sorted by first then second (np.unique(axis=1) sorts
    them as raw bytes, several times slower)."""
    order = np.lexsort((second, first))
    first, second = first[order], second[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (first[1:] != first[:-1]) | (second[1:] != second[:-1])
    return first[new], second[new]


def _forward_thread(forward_tid: np.ndarray, forward_seq: np.ndarray,
                    backward_seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per backward op: the one forward thread carrying its sequence number (any value where
    there is not exactly one) and how many threads carry it; ``forward_seq`` is not empty."""
    pair_seq, pair_tid = _unique_pairs(forward_seq, forward_tid)
    first = np.flatnonzero(np.r_[True, pair_seq[1:] != pair_seq[:-1]])  # pair_seq is sorted
    seqs, counts = pair_seq[first], np.diff(np.r_[first, len(pair_seq)])
    at = np.minimum(np.searchsorted(seqs, backward_seq), len(seqs) - 1)
    found = seqs[at] == backward_seq
    candidates = np.where(found, counts[at], 0)
    return pair_tid[first[at]], candidates


def _match_in_end_order(forward: np.ndarray, backward: np.ndarray, backward_thread: np.ndarray,
                        tid: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray,
                        seq: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """PyTorch's walk in end order per (thread, sequence number), without a Python loop: each
    backward op closes a segment of its key; it links to the forward op of its segment that
    started last (ties: later end, then later row). Also returns how many backward ops found no
    forward op and were the first of their key (the others' forward op was used up)."""
    n_f = len(forward)
    index = np.concatenate([forward, backward])
    key_tid = np.concatenate([tid[forward], backward_thread])
    key_seq = seq[index]
    is_back = np.concatenate([np.zeros(n_f, dtype=bool), np.ones(len(backward), dtype=bool)])
    # forward before backward at one end time: the forward op had ended when the node ran
    order = np.lexsort((is_back, end_ns[index], key_seq, key_tid))
    key_tid, key_seq, is_back, index = key_tid[order], key_seq[order], is_back[order], index[order]
    new_key = np.ones(len(order), dtype=bool)
    new_key[1:] = (key_tid[1:] != key_tid[:-1]) | (key_seq[1:] != key_seq[:-1])
    new_segment = new_key.copy()
    new_segment[1:] |= is_back[:-1]  # a backward op ends its segment
    segment = np.cumsum(new_segment) - 1
    # the last forward op of each segment in (start, end, row) order
    fwd_pos = np.flatnonzero(~is_back)
    best = fwd_pos[np.lexsort((index[fwd_pos], end_ns[index[fwd_pos]], start_ns[index[fwd_pos]], segment[fwd_pos]))]
    last_of_segment = np.ones(len(best), dtype=bool)
    last_of_segment[:-1] = segment[best[1:]] != segment[best[:-1]]
    best = best[last_of_segment]
    chosen = np.full(segment[-1] + 1 if len(segment) else 0, -1, dtype=np.int64)
    chosen[segment[best]] = index[best]
    back_pos = np.flatnonzero(is_back)
    src = chosen[segment[back_pos]]
    ok = src >= 0
    key = np.cumsum(new_key)[back_pos]
    first_of_key = np.ones(len(back_pos), dtype=bool)
    first_of_key[1:] = key[1:] != key[:-1]
    return src[ok], index[back_pos][ok], int((~ok & first_of_key).sum())


def autograd_warnings(links: DerivedLinks) -> list[str]:
    """The report's lines for backward ops left without a derived link (none when all linked)."""
    lines = []
    if links.ambiguous:
        lines.append(f"{links.ambiguous:,} backward ops not linked to their forward op: several forward threads "
                     "carry their autograd sequence number (fwdbwd links derived from sequence numbers)")
    if links.missing:
        lines.append(f"{links.missing:,} backward ops not linked to their forward op: no forward op with their "
                     "autograd sequence number is in the trace (fwdbwd links derived from sequence numbers)")
    return lines
