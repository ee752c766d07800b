"""An input format is declared where it lives: a third format (here a toy text format, registered by
this test alone) is found in folders, loaded, analysed, named by its producer and vendor in the
report's environment, numbered across files and redacted by ``traceview redact``, with no edit to
any other module: everything traceview asks of a format comes from its ``InputFormat``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLE_TRACES
from traceview.model import DeviceInfo, Kind, RankInfo, Trace, empty_links, kind_array, make_events_table
from traceview.model import steps_from_annotations
from traceview.registry import INPUT_FORMATS, InputFormat, register_input_format
from traceview.secrets import REDACTED, RedactionReport

MAGIC = b"TOYTRACE 1\n"


def _sniff(_path: Path, head: bytes) -> bool:
    return head.startswith(MAGIC)


def _parse(path: Path, *, progress=None, step_marker=None, jobs=1, hooks=None) -> Trace:
    """Lines ``kernel NAME START_NS DUR_NS``; ``# token=...`` lines are metadata."""
    rows = [line.split() for line in path.read_text().splitlines()[1:] if line.startswith("kernel ")]
    n = len(rows)
    columns = {"kind": kind_array(np.full(n, int(Kind.KERNEL), dtype=np.int8)), "category": ["kernel"] * n,
               "name": [r[1] for r in rows], "start_ns": np.array([int(r[2]) for r in rows], dtype=np.int64),
               "dur_ns": np.array([int(r[3]) for r in rows], dtype=np.int64),
               "device": np.zeros(n, dtype=np.int32), "stream": np.full(n, 7, dtype=np.int64)}
    events = make_events_table(columns, n)
    info = RankInfo(rank=0, source_path=str(path), source_format="toy", rank_source="toy file (numbered)",
                    devices=[DeviceInfo(id=0, name="Toy accelerator")], event_counts={"events_read": n, "mapped": n})
    return Trace(events=events, links=empty_links(), ranks={0: info}, steps=steps_from_annotations(events))


def _redact(in_path: Path, out_path: Path, *, strict: bool = False) -> RedactionReport:
    report = RedactionReport(input_format="toy")
    lines = []
    for line in in_path.read_text().splitlines():
        if line.startswith("# token="):
            report.hits[("header.token", "secret_key")] += 1
            line = f"# token={REDACTED}"
        lines.append(line)
    out_path.write_text("\n".join(lines) + "\n")
    return report


@pytest.fixture
def toy_format():
    fmt = register_input_format(InputFormat(
        name="toy", description="Toy trace text (.toy)", sniff=_sniff, parse=_parse, suffixes=(".toy",),
        order=50, producer="Toy profiler text", redact=_redact, vendor="AcmeGPU", numbers_ranks=True))
    yield fmt
    INPUT_FORMATS.pop("toy", None)


def _write(path: Path, *kernels: tuple[str, int, int]) -> Path:
    body = "".join(f"kernel {name} {start} {dur}\n" for name, start, dur in kernels)
    path.write_bytes(MAGIC + b"# token=hunter2-secret-value\n" + body.encode())
    return path


def test_a_third_format_is_found_loaded_and_named_by_its_declaration(toy_format, tmp_path: Path) -> None:
    import traceview
    from traceview.discovery import discover

    run = tmp_path / "run"
    run.mkdir()
    _write(run / "a.toy", ("gemm", 1000, 500), ("copy", 2000, 100))
    _write(run / "b.toy", ("gemm", 1000, 700))
    (run / "notes.toy").write_text("not a trace\n")  # a .toy file whose content is not: skipped
    found = discover([run])
    assert [f.format.name for f in found.files] == ["toy", "toy"] and found.skipped == [run / "notes.toy"]
    trace = traceview.load(run, use_cache=False)
    # numbers_ranks: both files say rank 0, as a parser that only numbers them would; renumbered
    assert trace.rank_ids == [0, 1] and trace.num_events == 3
    report = traceview.analyze(trace)
    env = report.data["environment"]
    assert env["trace_formats"] == ["Toy profiler text"]
    assert [g["vendor"] for g in env["gpus"]] == ["AcmeGPU"]


def test_a_third_format_is_redacted_by_its_declaration(toy_format, tmp_path: Path, monkeypatch) -> None:
    from traceview.cli import main

    source = _write(tmp_path / "r.toy", ("gemm", 1000, 500))
    out = tmp_path / "r.shared.toy"
    monkeypatch.setattr(sys, "argv", ["traceview", "redact", str(source), "-o", str(out)])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0
    assert "hunter2" not in out.read_text() and f"token={REDACTED}" in out.read_text()


def test_a_format_without_redaction_says_so(tmp_path: Path) -> None:
    from traceview.errors import TraceFormatError
    from traceview.redact import redact_file

    fmt = register_input_format(InputFormat(name="toy-plain", description="Toy text without redaction",
                                            sniff=_sniff, parse=_parse, order=5))
    try:
        source = _write(tmp_path / "p.toy", ("gemm", 1, 1))
        with pytest.raises(TraceFormatError, match="cannot redact"):
            redact_file(source, tmp_path / "out.toy")
        assert fmt.producer_name == "Toy text without redaction"
    finally:
        INPUT_FORMATS.pop("toy-plain", None)


def test_the_built_in_formats_declare_their_redaction_and_producer() -> None:
    from traceview.discovery import registered_formats

    formats = {f.name: f for f in registered_formats()}
    assert formats["kineto"].redact is not None and formats["kineto"].producer_name.startswith("PyTorch profiler")
    assert formats["nsys"].vendor == "NVIDIA" and formats["nsys"].numbers_ranks
    assert not formats["kineto"].numbers_ranks and formats["kineto"].vendor is None
    assert (SAMPLE_TRACES / "synthetic_nsys.sqlite").exists()
