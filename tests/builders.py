"""Traces made for the tests, in one place: canonical traces built event by event
(:class:`TraceBuilder`), the synthetic 4-rank sample with its truth (:func:`synthetic_4rank`), and
small Kineto documents written to files (:func:`kineto_document`, :func:`write_kineto`).

Big generated traces come from the project's generators (``sample_traces/``, ``benchmarks/``),
which write through ``sample_traces/kineto_writer.py``.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import traceview
from conftest import SAMPLE_TRACES
from traceview.model import (
    EVENT_SCHEMA,
    Kind,
    RankInfo,
    Trace,
    kind_array,
    make_events_table,
    make_links_table,
    steps_from_annotations,
)

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
HTOD = "Memcpy HtoD (Pinned -> Device)"
#: TRACEVIEW_SAMPLE_TRACES points the 4-rank tests at another copy (e.g. freshly generated)
SAMPLES_4RANK = Path(os.environ.get("TRACEVIEW_SAMPLE_TRACES", SAMPLE_TRACES)) / "synthetic_4rank"

#: identifier columns that default to -1 (absent) rather than null
_ID_COLUMNS = ("pid", "tid", "device", "stream", "correlation", "external_id")
_FIELDS = {f.name: f for f in EVENT_SCHEMA}


# ----------------------------------------------------------------------------- canonical traces


class TraceBuilder:
    """Small hand-made canonical traces: add events (of ``rank`` unless an event says another),
    link launches and CPU ops, :meth:`build` a :class:`~traceview.model.Trace`.

    Any column of the events schema can be given to an event as a keyword (``collective=``,
    ``msg_bytes=``, ``bytes=`` ...); an unknown one is an error. A kernel's device is the rank it
    is given (0 unless given)."""

    def __init__(self, rank: int = 0) -> None:
        self.rank = rank
        self.rows: list[dict[str, Any]] = []
        self.links: list[tuple[str, int, int]] = []  # (type, source row, destination row)
        self.corr = 1000

    def add(self, kind: Kind, name: str, start: int, dur: int, rank: int | None = None, **fields: Any) -> int:
        unknown = set(fields) - set(_FIELDS)
        if unknown:
            raise TypeError(f"not columns of the events table: {sorted(unknown)}")
        row = {"kind": int(kind), "name": name, "start_ns": start, "dur_ns": dur,
               "rank": self.rank if rank is None else rank, **fields}
        row.setdefault("category", kind.name.lower())
        self.rows.append(row)
        return len(self.rows) - 1

    # GPU side
    def kernel(self, start: int, dur: int, name: str = "gemm", device: int | None = None, stream: int = 7,
               rank: int | None = None, **kw: Any) -> int:
        device = (rank or 0) if device is None else device
        return self.add(Kind.KERNEL, name, start, dur, rank=rank, device=device, stream=stream, pid=device, tid=stream,
                        **kw)

    def nccl(self, start: int, dur: int, rank: int | None = None, name: str = NCCL, **kw: Any) -> int:
        return self.kernel(start, dur, name=name, rank=rank, stream=20, **kw)

    def memcpy(self, start: int, dur: int, name: str = HTOD, device: int | None = None, stream: int = 7,
               rank: int | None = None, **kw: Any) -> int:
        device = (rank or 0) if device is None else device
        return self.add(Kind.MEMCPY, name, start, dur, rank=rank, device=device, stream=stream, **kw)

    def memset(self, start: int, dur: int, device: int = 0, stream: int = 7, **kw: Any) -> int:
        return self.add(Kind.MEMSET, "Memset (Device)", start, dur, device=device, stream=stream, **kw)

    def gpu_sync(self, start: int, dur: int, device: int = 0, stream: int = 7) -> int:
        return self.add(Kind.SYNC, "Stream Sync", start, dur, device=device, stream=stream)

    # CPU side
    def runtime(self, name: str, start: int, dur: int, tid: int = 1, pid: int = 100, rank: int | None = None,
                **kw: Any) -> int:
        return self.add(Kind.RUNTIME, name, start, dur, rank=rank, tid=tid, pid=pid, **kw)

    def op(self, name: str, start: int, dur: int, tid: int = 1, pid: int = 100, kind: Kind = Kind.CPU_OP,
           rank: int | None = None) -> int:
        return self.add(kind, name, start, dur, rank=rank, tid=tid, pid=pid)

    def step(self, number: int, start: int, end: int, tid: int = 1, pid: int = 100, rank: int | None = None) -> int:
        return self.add(Kind.ANNOTATION, f"ProfilerStep#{number}", start, end - start, rank=rank, tid=tid, pid=pid)

    # links
    def launched(
        self, api: str, api_start: int, api_dur: int, gpu_start: int, gpu_dur: int, *, kind: Kind = Kind.KERNEL,
        name: str = "gemm", tid: int = 1, device: int = 0, stream: int = 7, op: int | None = None, **kw: Any,
    ) -> tuple[int, int]:
        """A launch call and the GPU activity it launched, linked by a fresh correlation id (and the
        call to the CPU op ``op`` that issued it)."""
        self.corr += 1
        a = self.runtime(api, api_start, api_dur, tid=tid, correlation=self.corr)
        if kind == Kind.KERNEL:
            g = self.kernel(gpu_start, gpu_dur, name=name, device=device, stream=stream, correlation=self.corr, **kw)
        elif kind == Kind.MEMCPY:
            g = self.memcpy(gpu_start, gpu_dur, device=device, stream=stream, correlation=self.corr)
        else:
            g = self.memset(gpu_start, gpu_dur, device=device, stream=stream, correlation=self.corr)
        self.link(a, g)
        if op is not None:
            self.issued_by(op, a)
        return a, g

    def launch(self, api_row: int, gpu_row: int) -> None:
        """Link a launch call to its GPU activity under a fresh correlation id."""
        self.corr += 1
        self.rows[api_row]["correlation"] = self.corr
        self.rows[gpu_row]["correlation"] = self.corr
        self.link(api_row, gpu_row)

    def link(self, api_row: int, gpu_row: int) -> None:
        """A launch link as given (correlation ids unchanged)."""
        self.links.append(("launch", api_row, gpu_row))

    def issued_by(self, op_row: int, runtime_row: int) -> None:
        self.links.append(("cpu_op", op_row, runtime_row))

    def flow(self, src_row: int, dst_row: int, category: str = "fwdbwd") -> None:
        """A Chrome-trace flow link of ``category`` (``fwdbwd``: forward op -> its backward op)."""
        self.links.append((f"flow:{category}", src_row, dst_row))

    def build(self) -> Trace:
        events = make_events_table(self._columns(), len(self.rows))
        tables = []
        kinds = {t for t, _, _ in self.links}
        for kind in [k for k in ("launch", "cpu_op") if k in kinds] + sorted(kinds - {"launch", "cpu_op"}):
            pairs = [(s, d) for t, s, d in self.links if t == kind]
            link_type, _, category = kind.partition(":")
            src = np.array([p[0] for p in pairs], dtype=np.int64)
            dst = np.array([p[1] for p in pairs], dtype=np.int64)
            rank = np.array([self.rows[s]["rank"] for s in src])
            tables.append(make_links_table(rank, link_type, category or link_type, src, dst))
        links = (pa.concat_tables(tables).unify_dictionaries().combine_chunks() if tables
                 else make_links_table(np.empty(0), "launch", "launch", np.empty(0), np.empty(0)))
        ranks = sorted({r["rank"] for r in self.rows}) or [self.rank]
        return Trace(events=events, links=links,
                     ranks={r: RankInfo(rank=r, source_path="<test>", source_format="kineto") for r in ranks},
                     steps=steps_from_annotations(events))

    def _columns(self) -> dict[str, Any]:
        """The events' columns: the required ones, and every optional one some event has."""
        given = {key for row in self.rows for key in row}
        columns: dict[str, Any] = {
            "rank": pa.array(np.array([r["rank"] for r in self.rows], dtype=np.int32)),
            "kind": kind_array(np.array([r["kind"] for r in self.rows], dtype=np.int8)),
            "category": [r["category"] for r in self.rows],
            "name": [r["name"] for r in self.rows],
            "start_ns": np.array([r["start_ns"] for r in self.rows], dtype=np.int64),
            "dur_ns": np.array([r["dur_ns"] for r in self.rows], dtype=np.int64),
        }
        for key in _ID_COLUMNS:
            columns[key] = np.array([r.get(key, -1) for r in self.rows], dtype=_FIELDS[key].type.to_pandas_dtype())
        for key in given - set(columns):
            values = [r.get(key) for r in self.rows]
            dictionary = pa.types.is_dictionary(_FIELDS[key].type)
            columns[key] = values if dictionary else pa.array(values, _FIELDS[key].type)
        return columns


# ----------------------------------------------------------------------------- the 4-rank sample


@lru_cache(maxsize=1)
def _load_4rank() -> tuple[Trace, dict]:
    files = sorted(SAMPLES_4RANK.glob("rank*.json.gz"))
    return traceview.load(files, use_cache=False), json.loads((SAMPLES_4RANK / "truth.json").read_text())


def synthetic_4rank() -> tuple[Trace, dict]:
    """The 4-rank sample (sample_traces/synthetic_4rank) and its truth, loaded once (skips when absent)."""
    if not (SAMPLES_4RANK / "truth.json").exists() or not list(SAMPLES_4RANK.glob("rank*.json.gz")):
        pytest.skip("sample_traces/synthetic_4rank (rank*.json.gz with truth.json) is absent")
    return _load_4rank()


def truth_scopes(truth: dict) -> Iterator[tuple[int, int, int | None, dict]]:
    """(rank, device, step or None, expected figures) for the whole trace and every step."""
    for rank, t in sorted(truth["ranks"].items()):
        yield int(rank), t["device"], None, t["overall"]
        for s in t["steps"]:
            yield int(rank), t["device"], s["step"], s


# ----------------------------------------------------------------------------- Kineto files


def kineto_document(events: list[Any], schema_version: bool = True, **top: Any) -> dict[str, Any]:
    """A Kineto document: ``schemaVersion`` (unless not wanted), the top-level fields ``top``, the
    events."""
    return {**({"schemaVersion": 1} if schema_version else {}), **top, "traceEvents": events}


def kineto_bytes(events: list[Any], indent: int | None = None, schema_version: bool = True, **top: Any) -> bytes:
    return json.dumps(kineto_document(events, schema_version, **top), indent=indent).encode()


def write_kineto(path: Path, events: list[Any], indent: int | None = None, schema_version: bool = True,
                 **top: Any) -> Path:
    """Write a Kineto document to ``path`` (gzipped, mtime 0, when its name ends in .gz)."""
    data = kineto_bytes(events, indent, schema_version, **top)
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
    return path


def comparable_report(report: Any) -> dict:
    """A report as JSON readers see it, less ``execution`` (how it ran: the one key allowed to
    differ between the ways of running the same analysis)."""
    data = json.loads(report.to_json())
    data.pop("execution")
    return data


def json_differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two JSON values differ (paths), so a failure says what differs, not just that."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}/{k}: only on one side" for k in sorted(set(a) ^ set(b))]
        for k in sorted(a.keys() & b.keys()):
            out += json_differences(a[k], b[k], f"{where}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = [f"{where}: {len(a)} != {len(b)} items"] if len(a) != len(b) else []
        for i, (x, y) in enumerate(zip(a, b)):
            out += json_differences(x, y, f"{where}[{i}]")
        return out
    return [] if a == b else [f"{where}: {str(a)[:120]!r} != {str(b)[:120]!r}"]


def with_analysis_result(report: Any, name: str, title: str, result: Any, summary: dict[str, Any]) -> Any:
    """``report`` (a :class:`traceview.report.Report`) with ``result`` as analysis ``name``: in its
    results, its report section (tables as bounded records, titled ``title``) and ``summary``'s keys
    in its summary; for front-end tests of an analysis's contract on synthetic results."""
    from traceview.report import Report, table_records

    data = dict(report.data)
    data["summary"] = {**report.summary, **summary}
    section = {"title": title, "warnings": [], "findings": 0,
               "tables": {t: {**table_records(frame), "title": t} for t, frame in result.tables.items()}}
    data["analyses"] = {**report["analyses"], name: section}
    return Report(data, {**report.results, name: result}, report.trace)

