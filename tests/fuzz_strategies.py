"""Hypothesis strategies for hostile traces, and the contract every generated case is checked against.

Kineto cases start from a small valid document (``ProfilerStep``, ``cpu_op``, ``cuda_runtime``,
``kernel``, ``ac2g`` flows, ``[memory]`` instants, ``M`` metadata) and apply one mutation: of a
value's type, of a number's range, of the bytes' encoding, or of the document's structure. Nsight
cases start from a copy of ``sample_traces/synthetic_nsys.sqlite`` and apply one SQL mutation (NULLs,
wrong types, non-UTF-8 BLOB strings, dropped tables and columns).

The contract (``check_contract``): the CLI exits 0 and accounts for every event it read (events
read = mapped + skipped by reason), or exits 2 with one line naming the file and the problem. Never
a traceback or an internal error (exit 3). ``tests/integration/test_fuzz.py`` runs a few hundred cases;
``benchmarks/fuzz_long.py`` runs many more and counts their outcomes.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hypothesis import strategies as st

from traceview.parsers.kineto import FATE_TEXT

REPO = Path(__file__).resolve().parents[1]
NSYS_SAMPLE = REPO / "sample_traces" / "synthetic_nsys.sqlite"

#: Values no well-formed trace holds where a number or a short string is expected.
HOSTILE_VALUES: tuple[Any, ...] = (
    None, "", "abc", "12", "NaN", "Infinity", "-1e400", 1.5, -1, 0, True,
    2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64 + 1, -(2**63) - 1, 1e308, -1e308, 5e-324,
    [], {}, [1, [2]], {"a": {"b": 1}}, "k\u00e9", "gpu0", "C:\\runs\\",
)
#: Numbers at the edges of int64, float64 and the microsecond timestamps Kineto writes.
EDGE_NUMBERS: tuple[Any, ...] = (
    -1, -(2**40), 0, 2**53 + 1, 2**60, 2**63 - 1, 2**63, 2**64, 2**64 + 1, 1e19, 1e308, -1e308, 5e-324, 1e-7,
)
#: Keys a mutation may hit inside an event and inside its ``args``.
EVENT_KEYS = ("ts", "dur", "pid", "tid", "ph", "cat", "name", "args", "id")
ARG_KEYS = ("correlation", "External id", "stream", "device", "grid", "block", "In msg nelems", "Group size",
            "Process Group Ranks", "Bytes", "Total Allocated", "Device Id", "Addr")
#: Top-level metadata that the parser interprets.
META_KEYS = ("deviceProperties", "distributedInfo", "baseTimeNanoseconds", "schemaVersion", "traceName")
#: Event-count keys that are a fate of an event read (the rest annotate: coerced, re-read, ...).
#: Any key starting with ``skipped`` is a fate too: the reasons an event was not kept.
#: (``paired_end``: an ``E`` event merged with its ``B`` into one mapped duration event; likewise
#: ``async_paired_end`` for async ``e``/``F``; ``counter``: a ``C`` event kept as samples in Trace.counters.)
KINETO_FATES = frozenset({"mapped", "metadata", "flow", "memory", "paired_end", "async_paired_end", "counter",
                          "unmapped_ph"})
#: Nsight tables whose rows the parser maps to events.
NSYS_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS")


@dataclass(frozen=True)
class FuzzCase:
    """One generated input: its bytes, the suffix its file gets, and what was done to it."""

    data: bytes
    suffix: str
    label: str  # the mutation class and its details, e.g. "type: events[3].ts = None"
    #: entries of ``traceEvents`` when the mutated file is still a readable trace; None when unknown
    n_events: int | None = None

    @property
    def mutation_class(self) -> str:
        return self.label.split(":", 1)[0]

    def reproducer(self, limit: int = 400) -> str:
        head = self.data[:limit]
        more = f" ... ({len(self.data)} bytes)" if len(self.data) > limit else ""
        return f"{self.label} | {self.suffix} | {head!r}{more}"


# ---------------------------------------------------------------------------------- Kineto documents
def _step_events(step: int, t0_us: int, corr: int, n_kernels: int, memory: bool) -> list[dict[str, Any]]:
    """One profiler step: annotation, an op per kernel with its launch, the kernel, its ac2g flow; a
    counter sample and an async b/e pair (kept as Trace.counters and an 'other' row)."""
    step_us = 100 * (n_kernels + 1)
    events: list[dict[str, Any]] = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                                     "pid": 1, "tid": 1, "ts": t0_us, "dur": step_us, "args": {"External id": corr}}]
    events += [{"ph": "C", "name": "queue", "pid": 1, "tid": 1, "ts": t0_us, "args": {"depth": step, "bytes": 2.5}},
               {"ph": "b", "cat": "dataloader", "name": "batch", "id": step, "pid": 1, "tid": 1, "ts": t0_us + 1},
               {"ph": "e", "cat": "dataloader", "name": "batch", "id": step, "pid": 1, "tid": 1, "ts": t0_us + 3}]
    for k in range(n_kernels):
        c, ts = corr + k + 1, t0_us + 10 + 100 * k
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ts, "dur": 20,
             "args": {"External id": c, "Input Dims": [[4, 4], [4, 4]]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 2,
             "dur": 5, "args": {"correlation": c, "External id": c}},
            {"ph": "X", "cat": "kernel", "name": f"sgemm_{k}", "pid": 0, "tid": 7, "ts": ts + 30, "dur": 50,
             "args": {"correlation": c, "stream": 7, "device": 0, "grid": [8, 1, 1], "block": [128, 1, 1]}},
            {"ph": "s", "id": c, "pid": 1, "tid": 1, "ts": ts + 2, "cat": "ac2g", "name": "ac2g"},
            {"ph": "f", "id": c, "pid": 0, "tid": 7, "ts": ts + 30, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        ]
        if memory:
            events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                           "ts": ts + 1, "s": "t", "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096 * c,
                                                            "Bytes": 64, "Total Allocated": 64 * c,
                                                            "Total Reserved": 1 << 20}})
    return events


def clean_document(n_steps: int = 2, n_kernels: int = 2, memory: bool = True) -> dict[str, Any]:
    """A small valid Kineto trace, in the key order recent PyTorch writes."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    ]
    for s in range(n_steps):
        events += _step_events(s + 1, 1000 + s * 100 * (n_kernels + 2), 100 * (s + 1), n_kernels, memory)
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Fuzz GPU", "numSms": 132, "totalGlobalMem": 1 << 34,
                              "computeMajor": 9, "computeMinor": 0}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "traceEvents": events,
        "traceName": "fuzz",
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }


@st.composite
def kineto_documents(draw: st.DrawFn) -> dict[str, Any]:
    return clean_document(draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.booleans()))


def to_bytes(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def _case(doc: dict[str, Any], label: str) -> FuzzCase:
    return FuzzCase(to_bytes(doc), ".json", label, len(doc["traceEvents"]))


# ---------------------------------------------------------------------------------- Kineto mutations
@st.composite
def type_mutations(draw: st.DrawFn) -> FuzzCase:
    """One field of one event (or of its args) gets a value of the wrong type or out of range."""
    doc = draw(kineto_documents())
    events = doc["traceEvents"]
    i = draw(st.integers(0, len(events) - 1))
    value = draw(st.sampled_from(HOSTILE_VALUES + EDGE_NUMBERS))
    if draw(st.booleans()) and isinstance(events[i].get("args"), dict):
        key = draw(st.sampled_from(ARG_KEYS))
        events[i]["args"][key] = value
        return _case(doc, f"type: events[{i}].args[{key!r}] = {value!r}")
    key = draw(st.sampled_from(EVENT_KEYS))
    events[i][key] = value
    return _case(doc, f"type: events[{i}].{key} = {value!r}")


@st.composite
def range_mutations(draw: st.DrawFn) -> FuzzCase:
    """Timestamps, durations and ids at the edges of int64/float64, on one event or on all of them."""
    doc = draw(kineto_documents())
    events = doc["traceEvents"]
    key = draw(st.sampled_from(("ts", "dur", "pid", "tid")))
    value = draw(st.sampled_from(EDGE_NUMBERS))
    every = draw(st.booleans())
    hit = range(len(events)) if every else [draw(st.integers(0, len(events) - 1))]
    for i in hit:
        events[i][key] = value
    where = "all events" if every else f"events[{hit[0]}]"
    return _case(doc, f"range: {where}.{key} = {value!r}")


@st.composite
def metadata_mutations(draw: st.DrawFn) -> FuzzCase:
    """Top-level metadata of odd shapes: device properties, rank, base time."""
    doc = draw(kineto_documents())
    key = draw(st.sampled_from(META_KEYS))
    value = draw(st.sampled_from(HOSTILE_VALUES + EDGE_NUMBERS))
    where = draw(st.sampled_from(("whole", "inner")))
    if where == "inner" and key == "deviceProperties":
        sub = draw(st.sampled_from(("id", "name", "numSms", "totalGlobalMem", "computeMajor")))
        doc[key][0][sub] = value
        label = f"metadata: deviceProperties[0].{sub} = {value!r}"
    elif where == "inner" and key == "distributedInfo":
        sub = draw(st.sampled_from(("rank", "world_size", "backend")))
        doc[key][sub] = value
        label = f"metadata: distributedInfo.{sub} = {value!r}"
    else:
        doc[key] = value
        label = f"metadata: {key} = {value!r}"
    return _case(doc, label)


#: Events of the phases Chrome/Perfetto accept besides X/i/M/s/f: B/E pairs, counters, async b/e.
OTHER_PHASES: tuple[list[dict[str, Any]], ...] = (
    [{"ph": "B", "name": "region", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 1001},
     {"ph": "E", "name": "region", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 1050}],
    [{"ph": "C", "name": "mem", "pid": 1, "tid": 1, "ts": 1010, "args": {"bytes": 10}}],
    [{"ph": "b", "name": "io", "cat": "async", "id": 5, "pid": 1, "tid": 1, "ts": 1002},
     {"ph": "e", "name": "io", "cat": "async", "id": 5, "pid": 1, "tid": 1, "ts": 1040}],
    [{"ph": "E", "name": "unmatched", "pid": 1, "tid": 1, "ts": 1003}],
    [{"ph": "Z", "name": "unknown phase", "pid": 1, "tid": 1, "ts": 1004}],
)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@st.composite
def structure_mutations(draw: st.DrawFn) -> FuzzCase:
    """Events that are not objects, missing keys, duplicates, other phases, deep nesting, bare arrays,
    a second ``traceEvents`` key and duplicate keys."""
    doc = draw(kineto_documents())
    events = doc["traceEvents"]
    i = draw(st.integers(0, len(events) - 1))
    kind = draw(st.sampled_from(("non_object", "missing_key", "args_null", "duplicate_event", "other_phase",
                                 "deep_args", "bare_array", "bare_array_open", "second_trace_events",
                                 "duplicate_key", "empty_events")))
    if kind == "non_object":
        value = draw(st.sampled_from((1, "x", None, [], True, [{"ph": "X"}])))
        events[i] = value
        return _case(doc, f"structure: events[{i}] = {value!r}")
    if kind == "missing_key":
        key = draw(st.sampled_from(EVENT_KEYS))
        events[i].pop(key, None)
        return _case(doc, f"structure: events[{i}] without {key!r}")
    if kind == "args_null":
        events[i]["args"] = None
        return _case(doc, f"structure: events[{i}].args = null")
    if kind == "duplicate_event":
        events.insert(i, dict(events[i]))
        return _case(doc, f"structure: events[{i}] twice")
    if kind == "other_phase":
        extra = draw(st.sampled_from(OTHER_PHASES))
        events[i:i] = [dict(e) for e in extra]
        return _case(doc, f"structure: phases {[e['ph'] for e in extra]} inserted at {i}")
    if kind == "deep_args":
        depth = draw(st.sampled_from((64, 1000, 10_000)))
        text = to_bytes(doc).replace(b'"args": {"External id"', b'"args": {"deep": ' + b'{"a": ' * depth + b"1"
                                     + b"}" * depth + b', "External id"', 1)
        return FuzzCase(text, ".json", f"structure: args nested {depth} deep", len(events))
    if kind in ("bare_array", "bare_array_open"):
        text = json.dumps(events).encode()
        if kind == "bare_array_open":  # Chrome accepts the array format without its closing bracket
            text = text[:-1]
        return FuzzCase(text, ".json", f"structure: {kind}", len(events))
    if kind == "second_trace_events":
        extra = events[:i + 1]
        text = to_bytes(doc)[:-1] + b', "traceEvents": ' + json.dumps(extra).encode() + b"}"
        return FuzzCase(text, ".json", f"structure: second traceEvents key with {len(extra)} events", None)
    if kind == "duplicate_key":
        text = to_bytes(doc).replace(b'"ts": ', b'"ts": "dup", "ts": ', 1)
        return FuzzCase(text, ".json", "structure: duplicate key ts in the first event with ts", len(events))
    doc["traceEvents"] = []
    return _case(doc, "structure: empty traceEvents")


@st.composite
def encoding_mutations(draw: st.DrawFn) -> FuzzCase:
    """The bytes: BOM, invalid UTF-8 and Latin-1 strings, raw NaN, backslash-ended metadata, other
    encodings, truncation of plain and gzip files."""
    doc = draw(kineto_documents())
    n = len(doc["traceEvents"])
    text = to_bytes(doc)
    kind = draw(st.sampled_from(("bom", "invalid_utf8", "latin1", "raw_nan", "backslash_meta", "utf16",
                                 "truncated", "gzip", "gzip_truncated", "gzip_header_only", "nul_bytes")))
    if kind == "bom":
        return FuzzCase(b"\xef\xbb\xbf" + text, ".json", "encoding: UTF-8 byte-order mark", n)
    if kind == "invalid_utf8":
        bad = draw(st.sampled_from((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80abc")))
        return FuzzCase(text.replace(b'"sgemm_0"', b'"sgemm_0' + bad + b'"'), ".json",
                        f"encoding: kernel name with bytes {bad!r}", n)
    if kind == "latin1":
        return FuzzCase(text.replace(b'"aten::mm"', '"aten::mm caf\u00e9"'.encode("latin-1")), ".json",
                        "encoding: Latin-1 op names", n)
    if kind == "raw_nan":
        token = draw(st.sampled_from((b"NaN", b"Infinity", b"-Infinity", b"1e999")))
        return FuzzCase(text.replace(b'"dur": 20', b'"dur": ' + token, 1), ".json", f"encoding: dur = {token!r}",
                        n if token == b"1e999" else None)
    if kind == "backslash_meta":
        doc = {"traceName": "C:\\runs\\", **doc}
        return FuzzCase(to_bytes(doc), ".json", "encoding: metadata string ending in a backslash first", n)
    if kind == "utf16":
        return FuzzCase(text.decode().encode("utf-16"), ".json", "encoding: UTF-16 with BOM", None)
    if kind == "nul_bytes":
        return FuzzCase(text.replace(b'"python"', b'"py\\u0000thon"'), ".json", "encoding: NUL in a name", n)
    cut = draw(st.integers(0, len(text) - 1))
    if kind == "truncated":
        return FuzzCase(text[:cut], ".json", f"encoding: truncated at byte {cut} of {len(text)}", None)
    packed = gzip.compress(text, mtime=0)
    if kind == "gzip":
        return FuzzCase(packed, ".json.gz", "encoding: gzip", n)
    if kind == "gzip_header_only":
        return FuzzCase(packed[:10], ".json.gz", "encoding: gzip header only", None)
    cut = cut * len(packed) // len(text)
    return FuzzCase(packed[:cut], ".json.gz", f"encoding: gzip truncated at byte {cut} of {len(packed)}", None)


def kineto_cases() -> st.SearchStrategy[FuzzCase]:
    return st.one_of(type_mutations(), range_mutations(), metadata_mutations(), structure_mutations(),
                     encoding_mutations())


# ---------------------------------------------------------------------------------- Nsight mutations
NSYS_COLUMNS = ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "globalTid", "nameId",
                "demangledName", "shortName", "eventType", "text", "textId", "domainId", "bytes", "copyKind",
                "gridX", "syncType")
SQL_VALUES = ("NULL", "'abc'", "1.5", "-1", "9223372036854775807", "-9223372036854775808", "1e308",
              "x'ff00fe'", "''", "0")


@dataclass(frozen=True)
class NsysMutation:
    """SQL statements applied to a copy of the sample export."""

    statements: tuple[str, ...]
    label: str = field(default="")


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def _sample_schema() -> dict[str, list[str]]:
    with contextlib.closing(sqlite3.connect(f"file:{NSYS_SAMPLE}?mode=ro", uri=True)) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {name: _columns(db, name) for name in names}


def without_constraints(table: str) -> tuple[str, ...]:
    """Rebuild a table without its NOT NULL constraints (columns keep their declared types), as
    exports written by other tools or edited by scripts come."""
    return (f"CREATE TABLE fuzz_copy AS SELECT * FROM {table}", f"DROP TABLE {table}",
            f"ALTER TABLE fuzz_copy RENAME TO {table}")


@st.composite
def nsys_mutations(draw: st.DrawFn) -> NsysMutation:
    schema = _sample_schema()
    kind = draw(st.sampled_from(("set", "set", "strings", "drop_table", "drop_column", "duplicate_rows")))
    if kind == "strings":
        value = draw(st.sampled_from(("x'ff'", "x'41ff42'", "NULL", "7", "x''")))
        target = draw(st.sampled_from(("StringIds.value", "NVTX_EVENTS.text", "PROCESSES.name", "ThreadNames.nameId")))
        table, column = target.split(".")
        sql = f"UPDATE {table} SET {column} = {value} WHERE rowid % 3 = 0"
        return NsysMutation((*without_constraints(table), sql), f"nsys strings: {sql}")
    if kind == "drop_table":
        table = draw(st.sampled_from(sorted(schema)))
        return NsysMutation((f"DROP TABLE {table}",), f"nsys drop table: {table}")
    table = draw(st.sampled_from(NSYS_TABLES))
    columns = [c for c in schema[table] if c in NSYS_COLUMNS]
    column = draw(st.sampled_from(columns))
    if kind == "drop_column":
        sql = f"ALTER TABLE {table} DROP COLUMN {column}"
        return NsysMutation((sql,), f"nsys drop column: {sql}")
    if kind == "duplicate_rows":
        sql = f"INSERT INTO {table} SELECT * FROM {table} WHERE rowid <= 2"
        return NsysMutation((sql,), f"nsys duplicate rows: {sql}")
    value = draw(st.sampled_from(SQL_VALUES))
    which = draw(st.sampled_from(("rowid = 1", "rowid % 2 = 0", "1")))
    sql = f"UPDATE {table} SET {column} = {value} WHERE {which}"
    return NsysMutation((*without_constraints(table), sql), f"nsys set: {sql}")


def write_nsys_case(mutation: NsysMutation, target: Path) -> Path:
    """A copy of the sample export with the mutation applied."""
    target.write_bytes(NSYS_SAMPLE.read_bytes())
    with contextlib.closing(sqlite3.connect(target)) as db:
        for sql in mutation.statements:
            db.execute(sql)
        db.commit()
    return target


def table_rows(path: Path) -> dict[str, int]:
    """Rows per mapped table of an export, as the truth for the accounting."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        present = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return {t: int(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in NSYS_TABLES if t in present}


# ---------------------------------------------------------------------------------- the contract
@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    seconds: float


def run_cli(*args: str) -> Outcome:
    """Run ``traceview`` in this process (a subprocess per case would cost ~1 s of imports)."""
    from traceview import cli

    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = ["traceview", *args]
    code: Any = 0
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = saved
    return Outcome(code if isinstance(code, int) else 1, out.getvalue(), err.getvalue(),
                   time.perf_counter() - started)


def check_exit(outcome: Outcome, path: Path) -> list[str]:
    """Problems with how the run ended: exit 0, or exit 2 with one line naming the file."""
    problems = []
    if "Traceback" in outcome.stderr or "Traceback" in outcome.stdout:
        problems.append("traceback shown")
    if outcome.code == 2:
        lines = outcome.stderr.strip().splitlines()
        if len(lines) != 1:
            problems.append(f"exit 2 with {len(lines)} lines on stderr")
        elif path.name not in lines[0]:
            problems.append(f"exit 2 message does not name the file: {lines[0][:200]}")
    elif outcome.code != 0:
        problems.append(f"exit {outcome.code}: {outcome.stderr.strip()[:300]}")
    return problems


def kineto_accounting(rank: dict[str, Any], n_events: int | None) -> list[str]:
    """Every event read has one fate: events_read = mapped + metadata + flow + memory + ... + skipped_*."""
    counts: dict[str, int] = rank.get("event_counts") or {}
    read = counts.get("events_read", 0)  # counts of zero are left out
    problems = []
    if n_events is not None and read != n_events:
        problems.append(f"events_read {read} != {n_events} entries in traceEvents")
    fates = {k: v for k, v in counts.items() if k in KINETO_FATES or k.startswith("skipped")}
    if sum(fates.values()) != read:
        problems.append(f"events_read {read} != sum of fates {fates} (all counts {counts})")
    if int(rank.get("span_ns", 0)) < 0:
        problems.append(f"negative span {rank.get('span_ns')}")
    warnings = rank.get("warnings") or []
    samples = f"{counts.get('counter_samples', 0):,}"
    for key, text in FATE_TEXT.items():  # every skip and coercion is said in the report, with its count
        if counts.get(key) and text.format(n=f"{counts[key]:,}", samples=samples) not in warnings:
            problems.append(f"{key} = {counts[key]} is not in the report's warnings {warnings}")
    return problems


def nsys_accounting(ranks: list[dict[str, Any]], rows: dict[str, int]) -> list[str]:
    """Per table: rows in the export = rows read by the ranks + rows of no rank; and per rank, rows
    read = mapped + skipped by reason."""
    problems = []
    for table, n_rows in rows.items():
        read = sum(int(r["event_counts"].get(f"{table}.read", 0)) for r in ranks)
        # rows of no rank: no_rank (another process) and no_rank_null_process (NULL globalPid/globalTid)
        no_rank = sum(int(v) for r in ranks for k, v in r["event_counts"].items()
                      if k in (f"{table}.no_rank", f"{table}.no_rank_null_process"))
        if read + no_rank != n_rows:
            problems.append(f"{table}: {n_rows} rows but {read} read + {no_rank} without a rank")
        for r in ranks:
            counts = r["event_counts"]
            fates = sum(v for k, v in counts.items()
                        if k == f"{table}.mapped" or k.startswith(f"{table}.skipped"))
            if counts.get(f"{table}.read", 0) != fates:
                problems.append(f"rank {r['rank']} {table}: read {counts.get(f'{table}.read')} != mapped + "
                                f"skipped {fates}")
    for r in ranks:
        if int(r.get("span_ns", 0)) < 0:
            problems.append(f"rank {r['rank']}: negative span {r.get('span_ns')}")
    return problems


def check_analyze(outcome: Outcome, path: Path, accounting: Callable[[list[dict[str, Any]]], list[str]]) -> list[str]:
    """The exit contract of ``analyze --format json``, and the accounting of a report it wrote."""
    problems = check_exit(outcome, path)
    if outcome.code != 0 or problems:
        return problems
    try:
        report = json.loads(outcome.stdout)
    except ValueError as exc:
        return [f"exit 0 but the JSON report does not parse: {exc}"]
    return accounting(report.get("ranks") or [])


# ---------------------------------------------------------------------------------- running cases
#: A mutated input may cost at most this many times the time and memory of its clean input.
TIME_FACTOR = 10
#: Below this, the clean time is noise on a shared machine: the limit never drops under 10x it.
MIN_CLEAN_S = 0.1


def timed_limit_s(clean_s: float) -> float:
    return TIME_FACTOR * max(clean_s, MIN_CLEAN_S)


def problem_key(case_class: str, problem: str) -> str:
    """Problems that differ only in numbers are one class."""
    return f"{case_class} | {re.sub(r'[0-9]+', 'N', problem)[:120]}"


class Findings:
    """Outcomes of a run (exit 0, exit 2, failed) and its distinct problems, with the first
    reproducer of each."""

    def __init__(self) -> None:
        self.first: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.outcomes: dict[str, int] = {"exit 0": 0, "exit 2": 0, "failed": 0}
        self.cases = 0

    def add(self, case_class: str, reproducer: str, code: int, problems: list[str]) -> None:
        self.cases += 1
        outcome = "failed" if problems else f"exit {code}"
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        for p in problems:
            key = problem_key(case_class, p)
            self.counts[key] = self.counts.get(key, 0) + 1
            self.first.setdefault(key, f"{p}\n      reproducer: {reproducer}")

    def summary(self) -> str:
        outcomes = ", ".join(f"{k}: {v}" for k, v in self.outcomes.items())
        lines = [f"{self.cases} cases ({outcomes}); {len(self.first)} distinct problems"]
        lines += [f"- [{self.counts[k]}x] {k}\n      {v}" for k, v in sorted(self.first.items())]
        return "\n".join(lines)


def write_case(case: FuzzCase, folder: Path) -> Path:
    path = folder / f"fuzz_case{case.suffix}"
    path.write_bytes(case.data)
    return path


def _over_time(outcome: Outcome, limit_s: float) -> list[str]:
    if outcome.seconds <= limit_s:
        return []
    return [f"took {outcome.seconds:.2f} s, over {limit_s:.2f} s ({TIME_FACTOR}x the clean input)"]


def analyze_kineto(case: FuzzCase, limit_s: float) -> tuple[int, list[str]]:
    """Exit code and contract problems of ``analyze --format json`` on one Kineto case."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write_case(case, Path(tmp))
        outcome = run_cli("analyze", str(path), "--format", "json", "--no-cache")

    def accounting(ranks: list[dict[str, Any]]) -> list[str]:
        if len(ranks) != 1:
            return [f"{len(ranks)} ranks from one file"]
        return kineto_accounting(ranks[0], case.n_events)

    return outcome.code, check_analyze(outcome, path, accounting) + _over_time(outcome, limit_s)


def analyze_nsys(mutation: NsysMutation, limit_s: float) -> tuple[int, list[str]]:
    """Exit code and contract problems of ``analyze --format json`` on one mutated export."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write_nsys_case(mutation, Path(tmp) / "fuzz_case.sqlite")
        rows = table_rows(path)
        outcome = run_cli("analyze", str(path), "--format", "json", "--no-cache")
    problems = check_analyze(outcome, path, lambda ranks: nsys_accounting(ranks, rows))
    return outcome.code, problems + _over_time(outcome, limit_s)


def clean_seconds(path: Path, runs: int = 3) -> float:
    """Best time of ``analyze --format json`` on a clean input (it must succeed)."""
    outcomes = [run_cli("analyze", str(path), "--format", "json", "--no-cache") for _ in range(runs)]
    if any(o.code != 0 for o in outcomes):
        raise RuntimeError(f"the clean input {path} fails: {outcomes[0].stderr.strip()}")
    return min(o.seconds for o in outcomes)


def clean_kineto_seconds() -> float:
    """The largest clean document the strategies start from."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "clean.json"
        path.write_bytes(to_bytes(clean_document(3, 3, True)))
        return clean_seconds(path)
