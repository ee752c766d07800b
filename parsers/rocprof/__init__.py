"""AMD rocprofv3 output: CSV (``rocprofv3 --kernel-trace --hip-trace ... --output-format csv``) and
JSON (``--output-format json``, :mod:`.json_output`: the same tables, one file per run).

A run is several files, ``<prefix>_<kind>.csv``, one per kind of record (:mod:`.files`). traceview
reads a run as one input: given a folder, or any of its files, it reads every rocprofv3 CSV of that
folder (the run, :func:`files.run_of`), listed once (``InputFormat.run_files``: discovery keeps the
file standing for the run, the trace cache keys on all of them). A folder holding two files of one
trace kind (two runs), API traces of two processes, or a counter collection whose dispatch ids ran
other kernels than the kernel trace's is an error: one line, exit 2.

What becomes what
-----------------
=========================== =========== ============================== ===============================
file                        kind        category                       name
=========================== =========== ============================== ===============================
``*_kernel_trace.csv``      kernel      ``kernel``                     ``Kernel_Name``
``*_hip_api_trace.csv``     runtime     ``Domain`` (``HIP_RUNTIME_API_EXT`` ...) ``Function``
``*_hsa_api_trace.csv``     runtime     ``Domain`` (``HSA_CORE_API`` ...)  ``Function``
``*_memory_copy_trace.csv`` memcpy      ``memory_copy``                ``Memcpy HtoD`` ...
``*_marker_api_trace.csv``  annotation  ``roctx`` (ranges)             the ROCTx message
                            other       ``roctx_mark`` (no duration), else the domain
``*_counter_collection.csv`` (not events: ``Trace.counters``, below)
=========================== =========== ============================== ===============================

* Times: ``Start_Timestamp``/``End_Timestamp`` as written (int64 ns, one clock per run);
  ``dur_ns = End - Start`` (negative: 0, counted as ``<role>.clamped_negative_duration``).
* Kernels: ``device`` is the agent's number (``Agent 1`` -> 1), ``stream`` the ``Stream_Id`` (the
  ``Queue_Id`` where the file has none), ``correlation`` the ``Correlation_Id``, ``block_*`` the
  workgroup size, ``grid_*`` the grid in **workgroups** (rocprofv3 counts work-items:
  ``ceil(Grid_Size / Workgroup_Size)``, as CUDA's grid counts blocks); ``pid`` is the run's process.
* Runtime calls: ``pid``/``tid`` as written; launch links join each HIP or HSA call to the kernels
  and copies of its ``Correlation_Id`` (one ``hipGraphLaunch`` -> many kernels).
* Copies: ``copy_kind`` from ``Direction`` (``MEMORY_COPY_HOST_TO_DEVICE`` -> ``HtoD``; DtoH, DtoD,
  HtoH), on the GPU end (the destination agent of a host-to-device copy, else the source), stream
  ``Stream_Id`` (0 where absent), ``bytes`` from ``Bytes`` where the file has it.
* ROCTx: records of ``MARKER_CORE_API`` (or ``MARKER_CORE_RANGE_API``) with a duration are ranges on
  their thread (kind ``annotation``, category ``roctx``: the ``modules`` analysis attributes the GPU
  work launched under them, and ``step_N`` ranges are steps); the ROCTx API's own calls
  (``roctxGetThreadId``...) and other domains are ``other``.
* Counter collections: one ``Trace.counters`` row per record: ``name`` the ``Counter_Name``,
  ``series`` ``dispatch <Dispatch_Id>``, ``value`` the ``Counter_Value``, ``pid``/``tid`` the
  counting pass's, ``ts_ns`` the start of the kernel of that dispatch id in the kernel trace (a
  pass's dispatch numbers are the program's; its kernel names are checked), else its own start. A
  run with no kernel trace takes its kernels from the first counter collection's dispatches.

Counts (``RankInfo.event_counts``): ``<role>.read`` rows per file role, ``events_read`` their sum,
whose fates are ``mapped`` (rows that became events) and ``counter`` (counter samples);
``counter.dispatch_not_in_trace`` annotates samples whose dispatch the kernel trace lacks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from traceview.model import Trace
# sniffing and listing a run's files only: building (pyarrow.compute) is imported by the parse, so a
# process that merely sniffs files (a Kineto parse's workers) stays light
from traceview.parsers.rocprof.files import role_of, run_of
from traceview.parsers.rocprof.json_sniff import looks_like_rocprof_json
from traceview.parsing import NO_HOOKS, ParseHooks
from traceview.registry import InputFormat, register_input_format

__all__ = ["FORMAT", "JSON_FORMAT", "parse_rocprof", "parse_rocprof_json", "run_files"]


def looks_like_rocprof(path: Path, head: bytes) -> bool:
    """A CSV whose header is a rocprofv3 one (by its columns)."""
    return role_of(path, head) is not None


def run_files(path: Path) -> tuple[Path, tuple[Path, ...]]:
    """(the file standing for ``path``'s run, the run's other files)."""
    run = run_of(Path(path))
    primary = run.primary
    return primary, tuple(p for p in run.all() if p != primary)


def parse_rocprof(path: str | Path, *, step_marker: str | None = None) -> Trace:
    """The rocprofv3 run of ``path`` (a file of it) as a Trace of one rank."""
    from traceview.parsers.rocprof.build import build_trace

    path = Path(path)
    return build_trace(run_of(path), path, step_marker)


def parse_rocprof_json(path: str | Path, *, step_marker: str | None = None) -> Trace:
    """A rocprofv3 JSON output file (``--output-format json``) as a Trace of one rank."""
    from traceview.parsers.rocprof.build import assemble
    from traceview.parsers.rocprof.json_output import read_json_run

    path = Path(path)
    return assemble(read_json_run(path), path, step_marker)


def _parse_json(path: Path, *, progress: Callable[[int, int], None] | None = None, step_marker: str | None = None,
                jobs: int = 1, hooks: ParseHooks = NO_HOOKS) -> Trace:
    del progress, jobs, hooks  # the InputFormat.parse signature
    return parse_rocprof_json(path, step_marker=step_marker)


def _parse(path: Path, *, progress: Callable[[int, int], None] | None = None, step_marker: str | None = None,
           jobs: int = 1, hooks: ParseHooks = NO_HOOKS) -> Trace:
    del progress, jobs, hooks  # the InputFormat.parse signature; a run's CSVs are small and read at once
    return parse_rocprof(path, step_marker=step_marker)


#: a run states no distributed rank: each run is numbered by the parser (rank 0), renumbered across runs
FORMAT = register_input_format(InputFormat(
    name="rocprof", description="AMD rocprofv3 CSV output (a run's *_kernel_trace.csv, *_hip_api_trace.csv, ...)",
    sniff=looks_like_rocprof, parse=_parse, suffixes=(".csv",), order=40, producer="AMD rocprofv3 (CSV)",
    vendor="AMD", numbers_ranks=True, run_files=run_files))
#: before Kineto's (order 20), which claims any JSON
JSON_FORMAT = register_input_format(InputFormat(
    name="rocprof-json", description="AMD rocprofv3 JSON output (--output-format json)",
    sniff=looks_like_rocprof_json, parse=_parse_json, suffixes=(".json",), order=15,
    producer="AMD rocprofv3 (JSON)", vendor="AMD", numbers_ranks=True))
