"""PyTorch profiler (Kineto) Chrome-trace JSON parser.

Reads ``.json`` and ``.json.gz`` into the canonical :class:`traceview.model.Trace`.

How it stays fast and small
---------------------------
A Kineto file is one JSON object whose ``traceEvents`` array holds millions of small objects.
Decoding it whole into Python dicts costs 5-10x the file size in memory. Instead the file is
streamed (gzip decompressed on the fly) and the event array is cut into chunks of whole events;
each chunk is decoded by msgspec straight into typed structs that keep only the fields traceview
uses (unknown keys are skipped without building objects), turned into Arrow columns, and dropped.
Peak memory is the output columns plus one chunk.

The native column decoder
-------------------------
When the package was built with a C compiler, each chunk is first offered to
``_kineto_columns.decode_chunk`` (parsers/kineto/_kineto_columns.c): one strict RFC 8259 scan of the chunk
that fills a column per field traceview reads (strings as codes into the chunk's unique strings,
interned once per chunk; ``ts``/``dur`` as the int or correctly rounded double msgspec would have
put in the struct, plus where their text lies for exact re-reads), with no Python object per event.
It declines (returns None) any chunk with something outside what it reproduces exactly: invalid
JSON, a value of another type than ``_Event``/``_MemoryArgs`` declare, a duplicated known key, an
escaped key, nesting deeper than 64, a ``Process Group Ranks`` list, counter or async events. A
declined chunk is decoded by msgspec exactly as before (the reference path, which also says what is
wrong), so both give the same tables, counts and warnings (``tests/test_kineto_native.py``).
``_ingest`` reads either through the same interface (``_NativeFields`` / ``_StructFields``).
``TRACEVIEW_KINETO_NATIVE=0`` forces the msgspec path; ``NATIVE_CHUNKS`` counts the chunks each took.

Chunk boundaries are found by looking for ``}`` ``,`` ``{`` near the end of the buffer. A cut that
lands inside a string or a nested object makes the chunk fail to decode; then a numpy scan of the
chunk's structure (quotes, escapes, brackets) finds the real boundary. The same scan (in C when the
native decoder is built: ``_events_array_end``) finds the end of the array at end of file, so
metadata written after the events (``baseTimeNanoseconds``, ``traceName``) is read too.

Allocator events
----------------
``[memory]`` instants (``profile_memory=True``) become ``Trace.memory``, not event rows. Their six
args would cost every event of every file time if the event struct declared them (each unknown key
is compared with every field), so chunks are decoded without them until the first chunk that has
allocator events; that chunk's args are read again from its text, from its first allocator event on,
and the rest of the file is decoded with them.

Exact nanoseconds
-----------------
Kineto writes microseconds, recent versions as decimals with three fractional digits. A float64
cannot hold every such value exactly once it exceeds 2**43 us, so times are recovered exactly:
integer values are scaled in int64; a decimal below 2**43 us is the unique integer ``c`` with
``float(c) / 1000 == ts`` (IEEE division is correctly rounded, and distinct ``c`` give distinct
doubles there); larger fractional values are re-read from the JSON text of that chunk. The native
decoder computes that same integer straight from the decimal text (mantissa times a power of ten)
for values with at most three decimals below 2**43 us, so numpy converts only the others.

Counters and async events
-------------------------
Counter events (``ph: "C"``) become ``Trace.counters``: one sample per numeric arg (the series),
named ``name`` or ``name[id]``. Async events become rows of kind OTHER (their category kept as
written, not counted as unmapped): ``b``/``e`` and ``S``/``F`` paired per (pid, category, id or
``id2``'s local/global value, name) in stack order, ``n`` instants as instant rows; ``T``/``p``
steps are skipped. Their args and ids of any shape are read by ``_PhaseProbe``, a second light
decode of only the chunks that hold such events (the slow path keeps a counter's args under
``COUNTER_ARGS_KEY``). Pairing, ``B``/``E`` included, is vectorised (``stack_pairs``).

Every event's fate
------------------
Each entry of ``traceEvents`` is counted once in ``RankInfo.event_counts``: ``mapped`` (a row;
``X``, instants, ``n``, and ``B`` or async begins paired with their end, whose end is
``paired_end`` / ``async_paired_end``), ``metadata``, ``flow``, ``memory``, ``counter``, or
``skipped_<reason>`` (no or out-of-range ``ts``/``dur``, counters without a numeric arg, async
steps, other phases, unmatched begins/ends, non-objects, absurd nesting), so ``events_read`` is
their sum (``counter_samples`` and ``async_instants`` annotate, like ``coerced_*``). Values
changed on the way are counted as ``coerced_<what>`` or ``clamped_<what>``: times beyond +-2**61
ns, integers beyond int64, ``args`` of odd types, counter args that are not numbers, bytes that
are not UTF-8 (replaced in ``jsonstream.Blocks``). Every non-zero count becomes one warning line
(``fate_warnings``) that says exactly what was done; the report carries them to every format.
Chunks with odd value types take a slow path (``_loose_text``) that coerces field by field; clean
traces never pay for it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from traceview.model import Trace
from traceview.parsers.jsonstream import UTF8_BOM
from traceview.parsers.kineto.build import rank_from_filename
from traceview.parsers.kineto.clock import PhaseClock, minor_page_faults, timed
from traceview.parsers.kineto.columns import FATE_TEXT, fate_warnings, microseconds_to_ns, stack_pairs
from traceview.parsers.kineto.events import OP_INPUT_COLUMNS
from traceview.parsers.kineto.fields import NATIVE_CHUNKS, op_input_memo
from traceview.parsers.kineto.reading import KinetoFile
from traceview.parsing import NO_HOOKS, ParseHooks, ProgressFn
from traceview.registry import InputFormat, register_input_format

if TYPE_CHECKING:
    from traceview.secrets import RedactionReport

#: the package's public names (the modules of the parser are ``traceview.parsers.kineto.<module>``:
#: events, fields, reading, ingest, build, columns, clock, state, native, autograd, parallel, redact)
__all__ = ["FATE_TEXT", "FORMAT", "KinetoFile", "NATIVE_CHUNKS", "OP_INPUT_COLUMNS", "PhaseClock", "fate_warnings",
           "kineto_reader", "microseconds_to_ns", "minor_page_faults", "op_input_memo", "parse_kineto",
           "rank_from_filename", "stack_pairs", "timed"]


def parse_kineto(path: str | os.PathLike[str], *, progress: ProgressFn | None = None,
                 jobs: int | None = 1, clock: "PhaseClock | None" = None, hooks: ParseHooks = NO_HOOKS) -> Trace:
    """Parse one Kineto trace file. The rank comes from ``distributedInfo``, else the file name,
    else it is left as -1 (``rank_source == "unknown"``) for the loader to assign.

    ``jobs``: worker processes for a big file (``parsers/kineto/parallel.py``; None: the cores
    available); 1 reads it in this process. The Trace is the same either way. ``clock``: where
    the time of each phase is added (benchmarks). ``hooks``: what the calling process lends the
    parse (:class:`traceview.parsing.ParseHooks`; the default, nothing, changes nothing in it)."""
    path = Path(path)
    with hooks.heap():
        if jobs != 1:
            from traceview.parsers.kineto.parallel import parse_parallel

            return parse_parallel(path, progress=progress, jobs=jobs, clock=clock, hooks=hooks)
        hooks.meanwhile()  # nothing runs beside this parse: the caller's work first
        parser = KinetoFile(path, progress, clock)
        return parser.parse()


def kineto_reader(path: Path, progress: ProgressFn | None = None, clock: "PhaseClock | None" = None) -> "KinetoFile":
    """A parser of one file whose reading the caller drives (``parsers/kineto/parallel.py``:
    ``start_events``, ``read_range``, ``finish``)."""
    return KinetoFile(path, progress, clock)


def _claims(_path: Path, head: bytes) -> bool:
    """A JSON document: Kineto's (the parser says clearly when it is JSON of another kind)."""
    return head.removeprefix(UTF8_BOM).lstrip()[:1] in (b"{", b"[")


def _in_directory(path: Path, head: bytes) -> bool:
    """In a directory scan, only JSON that looks like a trace (not a config or truth file beside it)."""
    return _claims(path, head) and (b'"traceEvents"' in head or b'"ph"' in head)


def _parse(path: Path, *, progress: ProgressFn | None = None, step_marker: str | None = None, jobs: int = 1,
           hooks: ParseHooks = NO_HOOKS) -> Trace:
    del step_marker  # part of the InputFormat.parse signature; Kineto marks steps itself (ProfilerStep#N)
    return parse_kineto(path, progress=progress, jobs=jobs, hooks=hooks)


def _redact(in_path: Path, out_path: Path, *, strict: bool = False) -> RedactionReport:
    """``traceview redact`` of a Kineto file (``redact.py``, imported only when a file is redacted)."""
    from traceview.parsers.kineto.redact import redact_kineto

    return redact_kineto(in_path, out_path, strict=strict)


FORMAT = register_input_format(InputFormat(
    name="kineto", description="PyTorch profiler (Kineto) Chrome-trace JSON (.json, .json.gz)",
    sniff=_claims, scan=_in_directory, parse=_parse, suffixes=(".json", ".json.gz", ".gz"), order=20,
    runs_meanwhile=True, producer="PyTorch profiler (Kineto) JSON", redact=_redact))
