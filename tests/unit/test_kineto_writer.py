"""sample_traces/kineto_writer.py, the one writer of Kineto JSON the generators share: its two
layouts (Kineto's text, dict documents) give the same trace to the parser, times stay exact to the
ns, and its files are the same bytes on every run. (The committed samples it writes are checked
byte for byte in test_sample_traces.py, test_diff.py and test_efficiency.py.)"""

from __future__ import annotations

import gzip
import json
import sys
from decimal import Decimal

import pytest

import traceview
from conftest import SAMPLE_TRACES

sys.path.insert(0, str(SAMPLE_TRACES))

import kineto_writer as kw  # noqa: E402

BASE_NS = 1_760_000_000_000_000_000
T0_NS = 5_000_123_400_000_001  # above 2**42 us: a float would lose the last ns


def _events_text() -> list[str]:
    return [
        kw.x_event_text("user_annotation", "ProfilerStep#1", 100, 100, T0_NS, 90_000, kw.fields(("External id", 1))),
        kw.x_event_text("cpu_op", 'aten::mm "quoted"', 100, 100, T0_NS + 1_000, 20_000,
                        kw.fields(("External id", 2), ("Input Dims", [[8, 8], [8, 8]]))),
        kw.x_event_text("cuda_runtime", "cudaLaunchKernel", 100, 100, T0_NS + 2_000, 5_001,
                        kw.fields(("External id", 2), ("cbid", 211), ("correlation", 7))),
        kw.flow_event_text("s", 7, 100, 100, T0_NS + 2_000),
        kw.x_event_text("kernel", "gemm", 0, 7, T0_NS + 9_000, 40_123,
                        kw.fields(("External id", 2), ("device", 0), ("stream", 7), ("correlation", 7))),
        kw.flow_event_text("f", 7, 0, 7, T0_NS + 9_000),
        kw.metadata_event_text("process_name", 100, 0, T0_NS, {"name": "python3"}),
        kw.profiler_span_text(T0_NS, 95_000),
        kw.instant_event_text("Record Window End", "", "", T0_NS + 96_000),
    ]


def _events_dict() -> list[dict]:
    us = kw.micros
    return [
        kw.x_event("user_annotation", "ProfilerStep#1", 100, 100, us(T0_NS), us(90_000), {"External id": 1}),
        kw.x_event("cpu_op", 'aten::mm "quoted"', 100, 100, us(T0_NS + 1_000), us(20_000),
                   {"External id": 2, "Input Dims": [[8, 8], [8, 8]]}),
        kw.x_event("cuda_runtime", "cudaLaunchKernel", 100, 100, us(T0_NS + 2_000), us(5_001),
                   {"External id": 2, "cbid": 211, "correlation": 7}),
        kw.flow_event("s", 7, 100, 100, us(T0_NS + 2_000)),
        kw.x_event("kernel", "gemm", 0, 7, us(T0_NS + 9_000), us(40_123),
                   {"External id": 2, "device": 0, "stream": 7, "correlation": 7}),
        kw.flow_event("f", 7, 0, 7, us(T0_NS + 9_000)),
        kw.metadata_event("process_name", 100, 0, us(T0_NS), {"name": "python3"}),
        kw.profiler_span(us(T0_NS), us(95_000)),
        kw.instant_event("Record Window End", "", "", us(T0_NS + 96_000), scope="g"),
    ]


HEADER = {"deviceProperties": kw.device_properties([0]), "distributedInfo": kw.distributed_info(0, 1)}


def _text_document() -> str:
    header = {**HEADER, "deviceProperties": kw.device_properties_text(HEADER["deviceProperties"])}
    return kw.document_head(header) + ",\n".join(_events_text()) + kw.document_tail("t.json", BASE_NS)


def test_the_text_and_dict_layouts_are_the_same_document():
    text = json.loads(_text_document(), parse_float=Decimal)
    as_dict = json.loads(kw.dumps(kw.document(HEADER, _events_dict(), trace_name="t.json", base_time_ns=BASE_NS)),
                         parse_float=Decimal)
    assert text == as_dict
    assert list(text)[:2] == ["schemaVersion", "deviceProperties"]
    assert list(text)[-4:] == ["traceEvents", "traceName", "displayTimeUnit", "baseTimeNanoseconds"]
    # exact to the ns: ts is read as a decimal, never as a float
    assert text["traceEvents"][0]["ts"] == Decimal(T0_NS) / 1000
    assert text["deviceProperties"] == [{"id": 0, **kw.H100}]


@pytest.mark.parametrize("layout", ["text", "dict"])
def test_traceview_reads_what_the_writer_writes(tmp_path, layout):
    if layout == "text":
        data = _text_document()
    else:
        data = kw.dumps(kw.document(HEADER, _events_dict(), trace_name="t.json", base_time_ns=BASE_NS), indent=1)
    path = tmp_path / "t.json.gz"
    path.write_bytes(kw.gzip_bytes(data.encode()))
    trace = traceview.load(path)
    kernels = trace.events.filter(trace.mask(traceview.Kind.KERNEL)).to_pylist()
    assert [(k["name"], k["start_ns"], k["dur_ns"]) for k in kernels] == [("gemm", BASE_NS + T0_NS + 9_000, 40_123)]
    assert 'aten::mm "quoted"' in trace.events.column("name").to_pylist()  # names are escaped
    assert len(trace.launch_links()[0]) == 1  # the flow and the correlation link the launch to its kernel


def test_times_are_three_decimal_microseconds():
    assert kw.us(1_234_567) == "1234.567" and kw.us(5) == "0.005"
    assert kw.dumps({"ts": kw.micros(2_000)}) == '{"ts": 2.000}'
    with pytest.raises(ValueError):
        kw.us(-1)
    with pytest.raises(ValueError):
        kw.x_event_text("kernel", "k", 0, 7, -5, 1, None)


def test_files_are_the_same_bytes_on_every_run(tmp_path):
    data = _text_document().encode()
    assert kw.gzip_bytes(data) == kw.gzip_bytes(data)
    assert kw.gzip_bytes(data)[4:8] == b"\0\0\0\0"  # mtime 0
    for name in ("a.json.gz", "b.json.gz"):
        with kw.open_output(tmp_path / name, gz=True) as out:
            out.write(data)
    first, second = (tmp_path / "a.json.gz").read_bytes(), (tmp_path / "b.json.gz").read_bytes()
    assert first == second and first[3] == 0  # no file name in the header
    assert gzip.decompress(first) == data
    with kw.open_output(tmp_path / "plain.json") as out:
        out.write(data)
    assert (tmp_path / "plain.json").read_bytes() == data
