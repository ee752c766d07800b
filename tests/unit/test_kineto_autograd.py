"""Forward -> backward links derived from autograd sequence numbers (parsers/kineto/autograd.py)."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
from conftest import require_shared
from test_efficiency import fwdbwd_from_sequence_numbers

import traceview
from traceview.analyses import run_all
from traceview.findings import Options
from traceview.model import Kind, make_links_table
from traceview.parsers.kineto.autograd import DerivedLinks, derive_fwdbwd_links

V100 = ("kineto", "tbplugin_resnet50_v100_2021.json.gz")


def derive(ops: list[tuple[int, int, int, int, int]], *, is_op: list[bool] | None = None) -> DerivedLinks:
    """``ops``: (tid, start, end, sequence number, fwd thread id) per event; rows are 100 + index
    so a row is never confused with an index."""
    tid, start, end, seq, fwd = (np.array(col, dtype=np.int64) for col in zip(*ops))
    mask = np.ones(len(ops), dtype=bool) if is_op is None else np.array(is_op)
    return derive_fwdbwd_links(np.arange(len(ops), dtype=np.int64) + 100, mask, tid, start, end, seq, fwd)


def pairs(links: DerivedLinks) -> set[tuple[int, int]]:
    return set(zip(links.src_row.tolist(), links.dst_row.tolist()))


def test_nested_forward_ops_link_the_innermost_to_the_node():
    """conv2d > convolution > cudnn_convolution share number 7: the one that started last made the
    node; a second node (8) on the next op; backward ops on another thread with Fwd thread id 1."""
    links = derive([
        (1, 0, 100, 7, 0),     # 100 aten::conv2d
        (1, 10, 90, 7, 0),     # 101 aten::convolution
        (1, 20, 80, 7, 0),     # 102 aten::cudnn_convolution: creates node 7
        (1, 110, 150, 8, 0),   # 103 aten::relu: node 8
        (2, 500, 520, 8, 1),   # 104 ReluBackward
        (2, 530, 600, 7, 1),   # 105 CudnnConvolutionBackward
        (2, 540, 560, -1, -1),  # 106 a nested op of the backward: no number
    ])
    assert pairs(links) == {(103, 104), (102, 105)}
    assert (links.ambiguous, links.missing) == (0, 0)


def test_equal_starts_go_to_the_op_that_ends_later_then_to_the_later_row():
    links = derive([(1, 0, 50, 3, 0), (1, 0, 100, 3, 0), (2, 200, 210, 3, 1)])
    assert pairs(links) == {(101, 102)}
    links = derive([(1, 0, 50, 3, 0), (1, 0, 50, 3, 0), (2, 200, 210, 3, 1)])
    assert pairs(links) == {(101, 102)}


def test_a_reused_number_links_each_backward_op_to_the_forward_ops_before_it():
    """The same (thread, number) twice (a thread id reused by the system): the first backward op
    takes the forward op that started last among those that ended before it, and forgets it; the
    second takes the later forward op; a third with nothing left is not linked, and not missing
    (newer PyTorch records each node twice: the engine's wrapper around it)."""
    links = derive([
        (1, 0, 10, 5, 0),      # 100
        (1, 20, 30, 5, 0),     # 101: started last before the first backward op
        (2, 40, 50, 5, 1),     # 102: -> 101
        (1, 60, 70, 5, 0),     # 103
        (2, 80, 90, 5, 1),     # 104: -> 103
        (2, 80, 99, 5, 1),     # 105: ends after 104, encloses it: nothing left
    ])
    assert pairs(links) == {(101, 102), (103, 104)}
    assert (links.ambiguous, links.missing) == (0, 0)


def test_several_forward_threads_with_the_number_are_ambiguous():
    links = derive([
        (1, 0, 10, 4, 0),      # 100 thread 1, number 4
        (3, 0, 10, 4, 0),      # 101 thread 3, number 4 too
        (3, 20, 30, 9, 0),     # 102 only thread 3 has number 9
        (2, 40, 50, 4, 1),     # 103 which thread? no link
        (2, 35, 55, 4, 1),     # 104 its wrapper: the same node, counted once
        (2, 60, 70, 9, 2),     # 105 -> 102
    ])
    assert pairs(links) == {(102, 105)}
    assert (links.ambiguous, links.missing) == (1, 0)


def test_missing_forward_and_non_ops():
    """A backward op whose forward ran before profiling is missing (once per node, not again for
    its wrapper); events that are not CPU ops are ignored."""
    links = derive([
        (1, 0, 10, 2, 0),      # 100
        (2, 20, 30, 1, 1),     # 101 number 1 never seen forward: missing
        (2, 40, 50, 2, 1),     # 102 -> 100
        (1, 60, 70, 6, 0),     # 103 not a CPU op (e.g. an annotation)
        (2, 80, 90, 6, 1),     # 104 missing: 103 is not an op
        (2, 75, 95, 6, 1),     # 105 its wrapper: not counted again
    ], is_op=[True, True, True, False, True, True])
    assert pairs(links) == {(100, 102)}
    assert (links.ambiguous, links.missing) == (0, 2)


def test_no_numbers_give_no_links():
    links = derive([(1, 0, 10, -1, -1), (2, 20, 30, -1, -1)])
    assert len(links.src_row) == len(links.dst_row) == 0 and links.src_row.dtype == np.int64
    assert (links.ambiguous, links.missing) == (0, 0)
    links = derive([(2, 20, 30, 4, 1)])  # numbers on backward ops only (no forward op recorded one)
    assert pairs(links) == set() and links.missing == 0
    links = derive([(1, 0, 10, 3, 0), (2, 20, 30, 4, 1)])
    assert pairs(links) == set() and links.missing == 1


# ----------------------------------------------------------------------------- the 2021 V100 trace


def derive_from_raw_args(trace: traceview.Trace, path: Path) -> DerivedLinks:
    """The links derived from per-event arrays: the ops' args in the raw JSON joined to the parsed
    events by External id (unique per op in these traces)."""
    raw = json.loads(gzip.open(path).read())["traceEvents"]
    numbered = [e for e in raw if e.get("ph") == "X" and "Sequence number" in e.get("args", {})]
    args = {e["args"]["External id"]: e["args"] for e in numbered}
    assert len(args) == len(numbered)
    external = trace.column("external_id")
    is_op = trace.kind_codes() == int(Kind.CPU_OP)
    seq, fwd = (np.array([args[x][key] if ok and x in args else -1 for x, ok in zip(external.tolist(), is_op.tolist())],
                         dtype=np.int64) for key in ("Sequence number", "Fwd thread id"))
    start = trace.column("start_ns")
    return derive_fwdbwd_links(np.arange(trace.num_events), is_op, trace.column("tid"), start,
                               start + trace.column("dur_ns"), seq, fwd)


def test_derived_links_equal_those_pytorch_wrote():
    """The MI300X ResNet trace (PyTorch 2.x) has the profiler's own fwdbwd flows: the rule, fed only
    the sequence numbers, gives exactly those (its evaluate_function wrappers carry the nodes' keys
    and are linked by neither); activation checkpointing recomputes forwards, which stay unlinked."""
    path = require_shared() / "kineto" / "tracelens_resnet_actckpt_mi300x_rank0.json.gz"
    trace = traceview.load(path)
    flows = trace.links.to_pandas()
    fwdbwd = flows[(flows["type"] == "flow") & (flows["category"] == "fwdbwd")]
    links = derive_from_raw_args(trace, path)
    assert pairs(links) == set(zip(fwdbwd["src_row"].tolist(), fwdbwd["dst_row"].tolist())) and len(fwdbwd) > 200
    assert (links.ambiguous, links.missing) == (0, 0)


def v100_links() -> tuple[traceview.Trace, DerivedLinks, set[tuple[int, int]]]:
    """The trace, the links derived from the raw args, and the test helper's pairs."""
    path = require_shared().joinpath(*V100)
    trace = traceview.load(path)
    links = derive_from_raw_args(trace, path)
    helper = fwdbwd_from_sequence_numbers(dataclasses.replace(trace, links=trace.links.slice(0, 0)), path).links
    expected = set(zip(helper.column("src_row").to_pylist(), helper.column("dst_row").to_pylist()))
    return trace, links, expected


def test_v100_links_equal_the_raw_json_pairing_and_cover_80_percent():
    trace, links, expected = v100_links()
    assert pairs(links) == expected and len(expected) == 1068
    assert (links.ambiguous, links.missing) == (0, 0)
    derived = make_links_table(np.zeros(len(links.src_row)), "flow", "fwdbwd", links.src_row, links.dst_row)
    linked = dataclasses.replace(trace, links=pa.concat_tables([trace.links, derived]))
    coverage = run_all(linked, Options(), only=["efficiency"])["efficiency"].tables["coverage"]
    assert (coverage["modelled_pct"] >= 80).all(), coverage.to_dict("records")


def test_the_parser_derives_the_v100_links():
    """The parser derives the links itself (parsers/kineto/build.py): the parsed trace carries the same links."""
    trace, _, expected = v100_links()
    flows = trace.links.to_pandas()
    fwdbwd = flows[(flows["type"] == "flow") & (flows["category"] == "fwdbwd")]
    assert set(zip(fwdbwd["src_row"].tolist(), fwdbwd["dst_row"].tolist())) == expected
    coverage = run_all(trace, Options(), only=["efficiency"])["efficiency"].tables["coverage"]
    assert (coverage["modelled_pct"] >= 80).all(), coverage.to_dict("records")
