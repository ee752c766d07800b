"""XSpace profiles: what ``jax.profiler`` and TensorFlow's profiler write (``*.xplane.pb``).

An XSpace holds planes (``/host:CPU``, ``/device:GPU:N``, ``/device:TPU:N``, ``/host:metadata``,
``Task Environment``), each with lines (threads, streams, derived views such as ``XLA Ops``,
``XLA Modules``, ``Steps``) of events whose stats say what they are (``hlo_op``, ``hlo_module``,
``program_id``, ``correlation_id``, ``step_num``, ``flops``, ...). The file is decoded by the
``protobuf`` package (the optional extra ``traceview[xspace]``; :mod:`.schema` declares the
messages); without it an ``.xplane.pb`` input is one line saying what to install, exit 2.

One file is one host's profile: one rank (numbered by the loader: the file does not say which
global rank it was), with every device plane of that host as a device.

What becomes what
-----------------
=========================================== =================== ===================================
event                                        kind                category
=========================================== =================== ===================================
device plane, a ``Stream #N`` line           kernel (memcpy,     ``xla_op`` (``gpu_memcpy``,
                                             memset by name)     ``gpu_memset``)
device plane, ``XLA Ops`` (no stream lines)  kernel              ``xla_op``  (TPU: what ran)
device plane, ``XLA Ops`` beside streams     gpu_annotation      ``xla_op`` (derived view)
device plane, ``XLA Modules`` / ``Steps``    gpu_annotation      ``xla_module`` / ``xla_step``
device plane, any other line                 gpu_annotation      ``xla:<line name>``
host plane, ``hlo_op`` stat, no device plane kernel on device    ``xla_op`` (XLA CPU backend: the
                                             ``device_ordinal``  ops run on host threads; stream =
                                                                 the thread's line)
host plane, ``hlo_op`` stat, device planes   cpu_op              ``xla_op_host``
host plane, ``step_num`` stat                annotation          ``xla_step`` (StepTraceAnnotation)
host plane, name ``$file:line fn``           python_function     ``python`` (the Python tracer)
host plane, ``correlation_id``, ``cu*``/     runtime             ``xla_launch_api``
``cuda*``/``hip*`` name
host plane, anything else (TraceMe)          cpu_op              ``xla_host``
any other plane                              other               the plane's name (``unmapped``)
=========================================== =================== ===================================

Device events have ``device`` = N of ``/device:X:N``, ``stream`` = the line's id (the
``stream_id`` stat where present), ``pid`` = the device, ``tid`` = the stream; host events have
``pid`` = the plane's ``process_id`` stat and ``tid`` = the line (thread) id. ``correlation`` is the
``correlation_id`` stat; a launch link joins a host launch API call to the device activity of the
same correlation id. Steps: per ``step_num`` of the host's step annotations, the outermost extent
(``train#3``); without them, the first device's ``Steps`` line; ``--step-marker`` matches names of
annotations instead.

Cost: the ``flops`` and ``bytes_accessed`` stats (event or metadata; a number >= 0) become the
``recorded_flops`` and ``recorded_bytes`` columns (null where absent), which the efficiency analysis
puts on the roofline.

Times: ``line.timestamp_ns`` plus the event's ``offset_ps``, and ``duration_ps``, each rounded to
the nearest ns. JAX writes times relative to the profile's start; ``RankInfo.base_time_ns`` is
then ``Task Environment``'s ``profile_start_time``. Devices: one ``DeviceInfo`` per device plane,
named by its type (``TPU``, ``GPU``), ``extra["accelerator"]`` the same; the CPU backend's one
device is named ``CPU``.

Accounting: ``events_read`` = every ``XEvent`` of every plane; ``mapped`` the events kept (all that
have a time); ``skipped_aggregated`` the aggregated ones (``num_occurrences``, no time);
``<plane>.read`` per plane. Not read: the serialized HLO protos of ``/host:metadata``, stats other
than those in ``reading.READ_STATS``, line display ids, event metadata children.

A profile directory (``plugins/profile/<run>/``) is read through its ``*.xplane.pb`` files; the
Chrome-trace JSON that the profiler writes beside them (``*.trace.json.gz``,
``perfetto_trace.json.gz``) is then skipped in a folder scan (the XSpace has everything it has).
Named explicitly (or in a folder without an XSpace), such a JSON file is the ``xspace-json`` format
(``json_view.py``): the same planes, lines, events and stats, built the same way. A folder holding
XSpace files of several runs is refused (one line, exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from traceview.errors import TraceFormatError
from traceview.model import Trace
from traceview.parsers.xspace.build import build_trace
from traceview.parsers.xspace.json_view import looks_like_json_view, read_json_view
from traceview.parsers.xspace.reading import read_flat
from traceview.parsing import NO_HOOKS, ParseHooks
from traceview.registry import InputFormat, register_input_format

if TYPE_CHECKING:
    from traceview.secrets import RedactionReport

__all__ = ["FORMAT", "JSON_FORMAT", "looks_like_xspace", "parse_xspace", "parse_xspace_json"]

SUFFIX = ".xplane.pb"
#: the JSON views the profiler writes beside an XSpace
JSON_VIEWS = (".trace.json.gz", ".trace.json", "perfetto_trace.json.gz")


def looks_like_xspace(path: Path, head: bytes) -> bool:
    """An ``XSpace``: field 1 (planes) length-delimited first, and a plane name near the start, or
    the ``.xplane.pb`` name."""
    if not head or head[:1] != b"\x0a":
        return False
    return path.name.endswith(SUFFIX) or b"/host:" in head[:4096] or b"/device:" in head[:4096]


def parse_xspace(path: str | Path, *, step_marker: str | None = None) -> Trace:
    """One ``*.xplane.pb`` as a :class:`Trace` (see the module docstring)."""
    path = Path(path)
    return build_trace(path, read_flat(path), step_marker)


def parse_xspace_json(path: str | Path, *, step_marker: str | None = None) -> Trace:
    """The Chrome-trace JSON view of an XSpace as a :class:`Trace` (``json_view.py``)."""
    path = Path(path)
    return build_trace(path, read_json_view(path), step_marker)


def _parse_json(path: Path, *, progress: Callable[[int, int], None] | None = None, step_marker: str | None = None,
                jobs: int = 1, hooks: ParseHooks = NO_HOOKS) -> Trace:
    del jobs, hooks  # the InputFormat.parse signature; one decode of the file
    return _with_ends(progress, lambda: parse_xspace_json(path, step_marker=step_marker))


def _with_ends(progress: Callable[[int, int], None] | None, parse: Callable[[], Trace]) -> Trace:
    """``parse()`` between ``progress(0, 1)`` and ``progress(1, 1)``: one decode call has no bytes
    read to tell in between, but a bar still shows which file is being read and when it is done."""
    if progress is not None:
        progress(0, 1)
    trace = parse()
    if progress is not None:
        progress(1, 1)
    return trace


def _is_json_view(_path: Path, head: bytes) -> bool:
    return looks_like_json_view(head)


def _parse(path: Path, *, progress: Callable[[int, int], None] | None = None, step_marker: str | None = None,
           jobs: int = 1, hooks: ParseHooks = NO_HOOKS) -> Trace:
    del jobs, hooks  # the InputFormat.parse signature; protobuf decodes the file in one call
    return _with_ends(progress, lambda: parse_xspace(path, step_marker=step_marker))


def _redact(in_path: Path, out_path: Path, *, strict: bool = False) -> RedactionReport:
    from traceview.parsers.xspace.redact import redact_xspace

    return redact_xspace(in_path, out_path, strict=strict)


def check_runs(paths: list[Path]) -> None:
    """The XSpace files found in one folder scan must be one profiling run: they sit in one run
    folder (``plugins/profile/<run>/``, one file per host)."""
    folders = sorted({p.parent for p in paths})
    if len(folders) > 1:
        names = ", ".join(f.name for f in folders[:4]) + (", ..." if len(folders) > 4 else "")
        raise TraceFormatError(folders[0].parent, f"holds XSpace profiles of {len(folders)} runs ({names})",
                               "give one run's folder (plugins/profile/<run>/) or its .xplane.pb files")


def is_json_view(path: Path) -> bool:
    """A Chrome-trace JSON the profiler wrote beside an XSpace of the same run."""
    return path.name.endswith(JSON_VIEWS) and any(path.parent.glob(f"*{SUFFIX}"))


#: not put in the Arrow trace cache: a cached trace's steps are found again from annotation names
#: (trace_cache), which would lose the StepTraceAnnotation steps; protobuf decodes a file quickly
FORMAT = register_input_format(InputFormat(
    name="xspace", description="JAX / TensorFlow profiler XSpace (.xplane.pb)",
    sniff=looks_like_xspace, parse=_parse, suffixes=(SUFFIX,), order=15, cacheable=False,
    producer="XSpace profile (jax.profiler / TensorFlow profiler)", redact=_redact, numbers_ranks=True,
    check_inputs=check_runs, shadows=is_json_view))
JSON_FORMAT = register_input_format(InputFormat(
    name="xspace-json", description="JAX / TensorFlow profiler trace JSON (*.trace.json.gz, perfetto_trace.json.gz)",
    sniff=_is_json_view, parse=_parse_json, suffixes=JSON_VIEWS, order=18,
    producer="XSpace trace JSON (jax.profiler / TensorFlow profiler)", numbers_ranks=True))
