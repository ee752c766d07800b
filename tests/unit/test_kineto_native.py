"""The native column decoder of the Kineto parser (parsers/kineto/_kineto_columns.c) gives the Trace the
msgspec path gives: every table, every event count and warning, on every shared and sample trace,
on generated chunks and on edge cases; and it declines (returns None) what it does not handle
exactly, so msgspec decodes those chunks as before.

``TRACEVIEW_KINETO_NATIVE=0`` forces the msgspec path: each comparison parses once with it and
once without, and checks the native path was actually taken where it should be.
"""

from __future__ import annotations

import gzip
import math
import sys
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SAMPLE_TRACES, SHARED_TRACES
from fuzz_strategies import FuzzCase, kineto_cases, kineto_documents, to_bytes
from traceview.errors import TraceFormatError
from traceview.parsers import kineto
from traceview.parsers.jsonstream import bracket_depths
from traceview.parsers.kineto import parse_kineto

columns = pytest.importorskip("traceview.parsers.kineto._kineto_columns", reason="the native decoder was not built")

TABLES = ("events", "links", "memory", "steps", "counters")


class _Times(msgspec.Struct):
    """The parser's typing of ``ts`` (``_Event.ts``)."""

    ts: int | float = float("nan")


def msgspec_events(body: bytes) -> list[_Times]:
    return msgspec.json.decode(b"[" + body + b"]", type=list[_Times])


def _msgspec_ok(body: bytes) -> bool:
    try:
        msgspec_events(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return True
SAMPLE_KINETO = sorted(SAMPLE_TRACES.rglob("*.json.gz"))
SHARED_KINETO = sorted((SHARED_TRACES / "kineto").rglob("*.json*")) if SHARED_TRACES.exists() else []


def _parse(path: Path, native: bool, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRACEVIEW_KINETO_NATIVE", "1" if native else "0")
    before = dict(kineto.NATIVE_CHUNKS)
    try:
        trace = parse_kineto(path)
    except TraceFormatError as exc:
        trace = exc
    used = {key: kineto.NATIVE_CHUNKS[key] - before[key] for key in before}
    return trace, used


def _assert_same(a, b, what: str) -> None:
    if isinstance(a, TraceFormatError) or isinstance(b, TraceFormatError):
        assert type(a) is type(b) and str(a) == str(b), f"{what}: {a!r} vs {b!r}"
        return
    for name in TABLES:
        x, y = getattr(a, name, None), getattr(b, name, None)
        if x is None and y is None:
            continue
        assert x.schema.equals(y.schema), f"{what}: {name} schema differs"
        assert x.num_rows == y.num_rows, f"{what}: {name} has {x.num_rows} rows native, {y.num_rows} msgspec"
        for column in x.column_names:
            assert x.column(column).equals(y.column(column)), f"{what}: {name}.{column} differs"
    assert a.ranks.keys() == b.ranks.keys()
    for rank, info in a.ranks.items():
        assert info.event_counts == b.ranks[rank].event_counts, what
        assert info == b.ranks[rank], f"{what}: rank info differs"
    assert a.warnings == b.warnings, what


def _compare(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    native, used = _parse(path, True, monkeypatch)
    reference, unused = _parse(path, False, monkeypatch)
    assert unused == {"native": 0, "fallback": 0}, "TRACEVIEW_KINETO_NATIVE=0 must keep the native decoder off"
    _assert_same(native, reference, path.name)
    return used


@pytest.mark.parametrize("path", SAMPLE_KINETO, ids=lambda p: str(p.relative_to(SAMPLE_TRACES)))
def test_sample_traces_same_native(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    used = _compare(path, monkeypatch)
    assert used["native"] > 0, f"{path.name}: the native decoder was never used ({used})"


@pytest.mark.parametrize("path", SHARED_KINETO, ids=lambda p: p.name)
def test_shared_traces_same_native(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    used = _compare(path, monkeypatch)
    assert used["native"] + used["fallback"] > 0, path.name


def test_shared_traces_mostly_native(monkeypatch: pytest.MonkeyPatch) -> None:
    """Most real files are read natively (a decoder that always declines would pass the others)."""
    if not SHARED_KINETO:
        pytest.skip("../shared/traces is absent")
    native_files = sum(_parse(p, True, monkeypatch)[1]["native"] > 0 for p in SHARED_KINETO)
    assert native_files >= len(SHARED_KINETO) // 2, f"only {native_files} of {len(SHARED_KINETO)} files read natively"


def _write(tmp_path: Path, events_text: str, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text('{"traceEvents": [' + events_text + "]}", encoding="utf-8")
    return path


_KERNEL = ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2, '
           '"args": {"correlation": 3, "stream": 7, "device": 0, "grid": [1, 2, 3], "block": [4]}}')
_LAUNCH = ('{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 9, "dur": 1, '
           '"args": {"correlation": 3, "External id": 5}}')
_META = '{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}'

EDGE_CASES = {
    "plain": f"{_META}, {_LAUNCH}, {_KERNEL}",
    "escapes": _KERNEL.replace('"name": "k"', r'"name": "a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00"'),
    "lone_high_surrogate": _KERNEL.replace('"name": "k"', r'"name": "x\ud800"'),
    "lone_low_surrogate": _KERNEL.replace('"name": "k"', r'"name": "x\udc00y"'),
    "unknown_nested": _KERNEL.replace('"ph": "X"', '"ph": "X", "zz": {"a": [1, {"b": [true, null, "\\u0041"]}], '
                                      '"c": -1.5e-3}'),
    "unknown_arg_nested": _KERNEL.replace('"correlation": 3', '"correlation": 3, "shape": [[1, 2], [3]]'),
    "huge_int_arg": _KERNEL.replace('"correlation": 3', '"correlation": 18446744073709551615'),
    "huge_pid": _KERNEL.replace('"pid": 0', '"pid": 9223372036854775808'),
    "huge_ts": _KERNEL.replace('"ts": 10.5', '"ts": 123456789012345678901234567890'),
    "ts_beyond_double": _KERNEL.replace('"ts": 10.5', '"ts": 1e400'),
    "ambiguous_ts": _KERNEL.replace('"ts": 10.5', '"ts": 17000000000000.123'),
    "ambiguous_int_ts": f"{_LAUNCH}, " + _KERNEL.replace('"ts": 10.5', '"ts": 9007199254740993'),
    "minus_zero": _KERNEL.replace('"ts": 10.5', '"ts": -0').replace('"dur": 2', '"dur": -0.0'),
    "exponent": _KERNEL.replace('"ts": 10.5', '"ts": 1e3').replace('"dur": 2', '"dur": 2E+0'),
    "float_for_int": _KERNEL.replace('"correlation": 3', '"correlation": 3.0'),
    "float_pid": _KERNEL.replace('"pid": 0', '"pid": 1.0'),
    "text_pid": _KERNEL.replace('"pid": 0', '"pid": "GPU 0"'),
    "null_ts": _KERNEL.replace('"ts": 10.5', '"ts": null'),
    "bool_dur": _KERNEL.replace('"dur": 2', '"dur": true'),
    "duplicate_key": _KERNEL.replace('"ph": "X"', '"ph": "i", "ph": "X"'),
    "duplicate_arg": _KERNEL.replace('"correlation": 3', '"correlation": 1, "correlation": 3'),
    "escaped_key": _KERNEL.replace('"ph": "X"', r'"p\u0068": "X"'),
    "grid_of_floats": _KERNEL.replace("[1, 2, 3]", "[1.0, 2, 3]"),
    "grid_four": _KERNEL.replace("[1, 2, 3]", "[1, 2, 3, 4]"),
    "grid_empty": _KERNEL.replace("[1, 2, 3]", "[]"),
    "grid_negative": _KERNEL.replace("[1, 2, 3]", "[-5, 2, 3000000000]"),
    "string_id_flow": '{"ph": "s", "cat": "fwdbwd", "name": "f", "pid": 1, "tid": 2, "ts": 1, "id": "7"}, '
                      '{"ph": "f", "cat": "fwdbwd", "name": "f", "pid": 1, "tid": 2, "ts": 2, "id": 7, "bp": "e"}',
    "int_flow": '{"ph": "s", "cat": "fwdbwd", "name": "f", "pid": 1, "tid": 2, "ts": 1, "id": 7}, '
                '{"ph": "f", "cat": "fwdbwd", "name": "f", "pid": 1, "tid": 2, "ts": 2, "id": -7, "bp": "e"}',
    "bp_not_text": '{"ph": "f", "cat": "fwdbwd", "name": "f", "pid": 1, "tid": 2, "ts": 2, "id": 7, "bp": 1}',
    "collective": _KERNEL.replace('"correlation": 3', '"Collective name": "allreduce", "In msg nelems": 10, '
                                  '"Out msg nelems": 12, "dtype": "Float", "Group size": 4, '
                                  '"Process Group Name": "0", "Process Group Ranks": "[0, 1, 2, 3]"'),
    "ranks_list": _KERNEL.replace('"correlation": 3', '"Collective name": "allreduce", "Process Group Ranks": [0, 1]'),
    "ranks_null": _KERNEL.replace('"correlation": 3', '"Collective name": "allreduce", "Process Group Ranks": null'),
    "args_null": _KERNEL.replace('"args": {', '"args": null, "zargs": {'),
    "counter": f'{_KERNEL}, {{"ph": "C", "name": "mem", "pid": 1, "ts": 3, "args": {{"used": 5}}}}',
    "async": f'{_KERNEL}, {{"ph": "b", "cat": "a", "name": "n", "id": 1, "pid": 1, "ts": 3}}, '
             '{"ph": "e", "cat": "a", "name": "n", "id": 1, "pid": 1, "ts": 4}',
    "memory": f'{_KERNEL}, {{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, '
              '"ts": 3, "args": {"Bytes": 512, "Total Allocated": 1024, "Device Id": 0, "Addr": 1}}',
    "memory_float_bytes": '{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, '
                          '"ts": 3, "args": {"Bytes": 512.0, "Device Id": 0}}',
    "memory_text_bytes_elsewhere": _KERNEL.replace('"correlation": 3', '"Bytes": "many"') + ", "
                                   + _KERNEL.replace('"name": "k"', '"name": "[memory]"').replace('"X"', '"i"'),
    "begin_end": '{"ph": "B", "name": "b", "pid": 1, "tid": 1, "ts": 1}, {"ph": "E", "pid": 1, "tid": 1, "ts": 5}',
    "odd_phase": f'{_KERNEL}, {{"ph": "Q", "pid": 1, "ts": 3}}',
    "not_an_object": f"{_KERNEL}, 5, [1]",
    "empty_object": f"{_KERNEL}, {{}}",
    "missing_ts": _KERNEL.replace('"ts": 10.5, ', ""),
    "nul_in_string": _KERNEL.replace('"name": "k"', '"name": "a\\u0000b"'),
    "depth_bomb": _KERNEL.replace('"ph": "X"', '"ph": "X", "deep": ' + "[" * 200 + "]" * 200),
    "depth_63": _KERNEL.replace('"ph": "X"', '"ph": "X", "deep": ' + "[" * 62 + "]" * 62),
    "whitespace": _KERNEL.replace(", ", " ,\n\t ").replace(": ", "\r\n: "),
    "form_feed": _KERNEL.replace(", ", ",\f"),
    "tiny_times": _KERNEL.replace('"ts": 10.5', '"ts": 1e-400').replace('"dur": 2', '"dur": 4.9e-324'),
    "long_decimals": _KERNEL.replace('"ts": 10.5', '"ts": 1700000000.1234567890123456789012345')
                            .replace('"dur": 2', '"dur": 0.30000000000000001665'),
    "huge_unknown_numbers": _KERNEL.replace('"ph": "X"', '"ph": "X", "x": 1e400, "y": -1e99999999999999999999, '
                                            '"z": 123456789012345678901234567890123456789'),
    "int64_edges": _KERNEL.replace('"pid": 0', '"pid": -9223372036854775808')
                          .replace('"correlation": 3', '"correlation": 9223372036854775807'),
}


@pytest.mark.parametrize("case", sorted(EDGE_CASES))
def test_edge_cases_same_native(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare(_write(tmp_path, EDGE_CASES[case]), monkeypatch)


@pytest.mark.parametrize("case", ["plain", "escapes", "unknown_nested", "minus_zero", "exponent", "ambiguous_ts",
                                  "collective", "int_flow", "grid_four", "grid_empty", "begin_end", "depth_63",
                                  "memory", "string_id_flow", "text_pid"])
def test_edge_cases_taken_natively(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _compare(_write(tmp_path, EDGE_CASES[case]), monkeypatch)["native"] > 0


@pytest.mark.parametrize("text", [
    b'{"a": 1},', b'{"a": [1,]}', b'{"a": 01}', b'{"a": 1.}', b'{"a": .5}', b'{"a": -}', b'{"a": 1e}',
    b'{"a": tru}', b'{"a": nulll}', b'{"a": "\\x"}', b'{"a": "\x01"}', b'{"a": "unterminated', b'{"a" 1}',
    b'{"a": 1', b'{"ph": "X"} {"ph": "X"}', b'{"ph": "\xff"}', b"{\x00}", b"[" * 100 + b"]" * 100,
    b'{"a": "\\u12"}', b'{"a": "\\ud800\\u0041"}', b"", b"   ",
])
def test_declines_invalid_or_odd(text: bytes) -> None:
    assert columns.decode_chunk(bytearray(text), 0, len(text)) is None


def test_truncated_chunks_never_read_past_the_range() -> None:
    text = (EDGE_CASES["plain"] + ", " + EDGE_CASES["escapes"]).encode()
    buf = bytearray(text)
    for end in range(len(text)):  # every prefix: declined or whole events, never beyond `end`
        result = columns.decode_chunk(buf, 0, end)
        if result is not None:
            assert text[:end].rstrip().endswith(b"}")
        # alone in a buffer of its own (under ASan with PYTHONMALLOC=malloc, a read past it is caught)
        alone = bytearray(text[:end])
        assert (columns.decode_chunk(alone, 0, end) is None) == (result is None)
    with pytest.raises(ValueError):
        columns.decode_chunk(buf, 0, len(buf) + 1)


def test_allocator_args_must_be_integers() -> None:
    """The allocator's args are typed (msgspec reads them once it has seen an allocator event)."""
    text = bytearray(b'{"ph": "X", "args": {"Bytes": "many"}}')
    assert columns.decode_chunk(text, 0, len(text)) is None
    text = bytearray(b'{"ph": "X", "args": {"Bytes": 5, "Addr": -1}}')
    assert columns.decode_chunk(text, 0, len(text)) is not None


_SETTINGS = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                            HealthCheck.function_scoped_fixture])


@_SETTINGS
@given(document=kineto_documents())
def test_generated_documents_same_native(document, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("gen") / "t.json"
    path.write_bytes(to_bytes(document))
    with pytest.MonkeyPatch.context() as monkeypatch:
        used = _compare(path, monkeypatch)
    if not any(e.get("ph") in ("C", "b", "e", "n", "S", "T", "p", "F") for e in document["traceEvents"]):
        assert used["native"] > 0, "a clean document without counter or async events is read natively"


@_SETTINGS
@given(case=kineto_cases())
def test_mutated_documents_same_native(case: FuzzCase, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("gen") / f"t{case.suffix}"
    path.write_bytes(case.data)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _compare(path, monkeypatch)


def test_gzip_and_plain_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(('{"traceEvents": [' + EDGE_CASES["plain"] + "]}").encode()))
    assert _compare(path, monkeypatch)["native"] > 0


_DIGITS = st.text(alphabet="0123456789", min_size=1, max_size=25)


@st.composite
def _number_texts(draw: st.DrawFn) -> str:
    """JSON number texts of every shape: integers, decimals of many digits, exponents, floats' reprs."""
    kind = draw(st.sampled_from(["int", "decimal", "exponent", "float", "kineto"]))
    if kind == "kineto":  # what Kineto writes: us with up to 3 decimals, near 2**43 us at most
        whole, decimals = draw(st.integers(-(2**44), 2**44)), draw(st.text(alphabet="0123456789", min_size=1, max_size=4))
        return f"{whole}.{decimals}"
    if kind == "float":
        return repr(draw(st.floats(allow_nan=False, allow_infinity=False)))
    sign = draw(st.sampled_from(["", "-"]))
    whole = draw(_DIGITS).lstrip("0") or "0"
    text = sign + whole
    if kind in ("decimal", "exponent"):
        text += "." + draw(_DIGITS)
    if kind == "exponent":
        text += draw(st.sampled_from(["e", "E", "e+", "e-"])) + str(draw(st.integers(0, 400)))
    return text


@settings(max_examples=400, deadline=None)
@given(texts=st.lists(_number_texts(), min_size=1, max_size=20))
def test_times_are_what_msgspec_decodes(texts: list[str]) -> None:
    """ts as the int (within int64) or the correctly rounded double that msgspec puts in the struct."""
    body = ", ".join(f'{{"ts": {t}}}' for t in texts).encode()
    result = columns.decode_chunk(bytearray(body), 0, len(body))
    expected = [event.ts for event in msgspec_events(body)] if _msgspec_ok(body) else None
    if result is None:  # declined: only numbers beyond a double (msgspec: out of range) or very long texts
        assert expected is None or any(len(t) > 400 or math.isinf(float(t)) for t in texts)
        return
    assert expected is not None
    kind = np.frombuffer(result["ts_kind"], dtype=np.uint8)
    raw = np.frombuffer(result["ts_value"], dtype=np.int64)
    for i, value in enumerate(expected):
        if type(value) is int and -(2**63) <= value < 2**63:
            assert kind[i] == 1 and int(raw[i]) == value, texts[i]
        else:
            got = float(raw[i:i + 1].view(np.float64)[0]) if kind[i] == 2 else float(int(raw[i]))
            assert got == float(value) and math.copysign(1, got) == math.copysign(1, float(value)), texts[i]
    # where the decoder gives exact ns from the text, they are what microseconds_to_ns makes of the double
    exact_ns = np.frombuffer(result["ts_ns"], dtype=np.int64)
    for i in np.flatnonzero(np.frombuffer(result["ts_exact"], dtype=np.uint8)).tolist():
        ns, ambiguous = kineto.microseconds_to_ns(np.array([float(expected[i])]))
        assert not ambiguous[0] and int(ns[0]) == int(exact_ns[i]), texts[i]


@settings(max_examples=400, deadline=None)
@given(text=st.binary(max_size=60).map(lambda b: bytes(b"[]{}\\\" a,:"[c % 10] for c in b)))
def test_array_end_agrees_with_bracket_depths(text: bytes) -> None:
    """The native end-of-array scan finds the bracket the numpy scan finds, on any text."""
    buf = bytearray(b"[" + text)
    brackets, depth = bracket_depths(memoryview(buf)[1:])
    ends = np.flatnonzero(depth == -1)
    assert columns.array_end(buf, 1) == (int(brackets[ends[0]]) + 1 if len(ends) else None)


_HOSTILE_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8), st.just("[memory]"), st.just(""), st.lists(st.integers(-5, 2**64), max_size=4),
    st.just({"a": [1, {"b": None}]}), st.just([[[[[]]]]]),
)
_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "args", "zz")
_ARG_KEYS = ("External id", "external id", "correlation", "stream", "device", "bytes", "grid", "block",
             "Collective name", "In msg nelems", "Group size", "dtype", "Process Group Name",
             "Process Group Ranks", "name", "Bytes", "Addr", "Total Allocated", "other")


@st.composite
def _natively_readable_mutations(draw: st.DrawFn) -> dict:
    """A clean document without the events only msgspec reads (counters, async), with a few fields
    or args set to values of any type: the native decoder reads or declines, never differs."""
    document = draw(kineto_documents())
    events = [e for e in document["traceEvents"] if e.get("ph") not in ("C", "b", "e")]
    for _ in range(draw(st.integers(1, 3))):
        event = events[draw(st.integers(0, len(events) - 1))]
        if draw(st.booleans()):
            event[draw(st.sampled_from(_KEYS))] = draw(_HOSTILE_VALUES)
        elif isinstance(event.get("args"), dict):
            event["args"][draw(st.sampled_from(_ARG_KEYS))] = draw(_HOSTILE_VALUES)
    document["traceEvents"] = events
    return document


@_SETTINGS
@given(document=_natively_readable_mutations())
def test_mutated_fields_same_native(document: dict, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("gen") / "t.json"
    path.write_bytes(to_bytes(document))
    with pytest.MonkeyPatch.context() as monkeypatch:
        _compare(path, monkeypatch)


_INTEGER_TEXTS = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.builds(lambda sign, digits: sign + (digits.lstrip("0") or "0"), st.sampled_from(["", "-"]),
              st.text(alphabet="0123456789", min_size=1, max_size=22)),
)


@settings(max_examples=400, deadline=None)
@given(texts=st.lists(_INTEGER_TEXTS, min_size=1, max_size=12))
def test_integers_are_what_msgspec_decodes(texts: list[str]) -> None:
    """pid and an int arg of every digit count (1 to 22, both signs, the int64 bounds), mid-chunk and
    as the chunk's last bytes (fewer than 8 after the digits: the decoder's other digit path): the
    value msgspec gives, and a number beyond int64 makes the chunk msgspec's."""
    body = ", ".join(f'{{"pid": {t}, "args": {{"correlation": {t}}}, "tid": {t}}}' for t in texts).encode()
    result = columns.decode_chunk(bytearray(body), 0, len(body))
    values = [int(t) for t in texts]
    if any(not -(2**63) <= v < 2**63 for v in values):
        assert result is None
        return
    assert result is not None
    assert np.frombuffer(result["pid"], dtype=np.int64).tolist() == values
    assert np.frombuffer(result["tid"], dtype=np.int64).tolist() == values
    assert np.frombuffer(result["correlation_value"], dtype=np.int64).tolist() == values
    assert np.frombuffer(result["correlation_index"], dtype=np.int32).tolist() == list(range(len(values)))


def test_msgspec_reference_decodes_the_keys_the_decoder_reads() -> None:
    """benchmarks/_msgspec_ref.py (issue 12's msgspec reference) types exactly the keys the native
    decoder reads: the two benchmarks' ratio compares the same work."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import _msgspec_ref

    event_keys, args_keys = columns.decoded_keys()
    assert sorted(_msgspec_ref.EVENT_KEYS) == sorted(event_keys)
    assert sorted(_msgspec_ref.ARGS_KEYS) == sorted(args_keys)
