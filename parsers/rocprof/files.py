"""The files of one rocprofv3 run: what each CSV is (by its header, its name as the tie-break), which
files of a folder make the run, and each file read into Arrow columns, strictly.

A rocprofv3 run writes one CSV per kind of record, named ``<prefix>_<kind>.csv`` (the prefix is the
process id by default, or ``--output-file``). The run of a file is every rocprofv3 CSV of its
folder: at most one file of each trace kind (two kernel traces in one folder are two runs, an
error), and any number of counter collections (``--pmc`` passes run the program again, one
process each, and are joined to the run's kernels by dispatch id).
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from traceview.errors import TraceFormatError, os_error
from traceview.secrets import scrub_text

#: the file roles, in the order that picks the file standing for the run (the first one present)
ROLES = ("kernel", "hip_api", "hsa_api", "memory_copy", "marker_api", "agent_info", "counter")
#: roles of which a run has one file at most
TRACE_ROLES = ROLES[:-1]
#: roles whose file can stand for the run (agent info is the run's metadata only)
EVENT_ROLES = ROLES[:5]
#: the name ending rocprofv3 gives each role's file
SUFFIXES = {"kernel": "_kernel_trace.csv", "hip_api": "_hip_api_trace.csv", "hsa_api": "_hsa_api_trace.csv",
            "memory_copy": "_memory_copy_trace.csv", "marker_api": "_marker_api_trace.csv",
            "agent_info": "_agent_info.csv", "counter": "_counter_collection.csv"}
#: the columns each role's file must have (more are allowed and not read unless named in OPTIONAL)
REQUIRED: dict[str, tuple[str, ...]] = {
    "kernel": ("Agent_Id", "Queue_Id", "Dispatch_Id", "Kernel_Name", "Correlation_Id", "Start_Timestamp",
               "End_Timestamp", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X",
               "Grid_Size_Y", "Grid_Size_Z"),
    "api": ("Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id", "Start_Timestamp", "End_Timestamp"),
    "memory_copy": ("Direction", "Source_Agent_Id", "Destination_Agent_Id", "Correlation_Id", "Start_Timestamp",
                    "End_Timestamp"),
    "counter": ("Correlation_Id", "Dispatch_Id", "Agent_Id", "Queue_Id", "Process_Id", "Thread_Id", "Kernel_Name",
                "Grid_Size", "Workgroup_Size", "Counter_Name", "Counter_Value", "Start_Timestamp", "End_Timestamp"),
    "agent_info": ("Logical_Node_Id", "Agent_Type"),
}
#: columns read where the file has them (rocprofv3 versions differ)
OPTIONAL: dict[str, tuple[str, ...]] = {"kernel": ("Stream_Id", "Thread_Id"), "api": (),
                                        "memory_copy": ("Stream_Id", "Thread_Id", "Bytes"), "counter": (),
                                        "agent_info": ("Node_Id", "Name", "Product_Name", "Cu_Count",
                                                       "Wave_Front_Size")}
#: columns that are text; the others are read as integers (``Counter_Value`` as a double)
TEXT_COLUMNS = frozenset({"Kind", "Agent_Id", "Kernel_Name", "Domain", "Function", "Direction", "Source_Agent_Id",
                          "Destination_Agent_Id", "Counter_Name", "Agent_Type", "Name", "Product_Name"})
#: the header columns that tell each role (checked in this order)
SIGNATURES: tuple[tuple[str, frozenset[str]], ...] = (
    ("counter", frozenset({"Counter_Name", "Counter_Value", "Dispatch_Id"})),
    ("agent_info", frozenset({"Logical_Node_Id", "Agent_Type", "Cu_Count"})),
    ("kernel", frozenset({"Kernel_Name", "Dispatch_Id", "Grid_Size_X"})),
    ("memory_copy", frozenset({"Direction", "Source_Agent_Id", "Destination_Agent_Id"})),
    ("api", frozenset({"Domain", "Function", "Correlation_Id", "Start_Timestamp"})),
)
#: an API trace's role from its first record's domain, where its name does not say
DOMAIN_ROLES = (("HIP_", "hip_api"), ("HSA_", "hsa_api"), ("MARKER_", "marker_api"))
HINT = "rocprofv3 writes it with --output-format csv; copy the whole file again"


def schema_of(role: str) -> str:
    """The column set a role's file follows (the API traces share one)."""
    return "api" if role.endswith("_api") else role


def header_of(head: bytes) -> list[str] | None:
    """The column names of a CSV whose first line is ``head``'s, or None when it is no CSV header."""
    line, newline, _ = head.partition(b"\n")
    if not newline or not line.startswith(b'"'):
        return None
    try:
        return next(csv.reader([line.decode("utf-8").rstrip("\r")]))
    except (UnicodeDecodeError, csv.Error, StopIteration):
        return None


def role_of(path: Path, head: bytes) -> str | None:
    """The role of a rocprofv3 CSV (``kernel``, ``hip_api``, ...), None when ``head`` is not one."""
    columns = header_of(head)
    if columns is None:
        return None
    # rocprofv3's own name says the role: a file so named that lacks a column is a damaged one
    # of that role (its read names the column), not something else
    named = next((role for role, suffix in SUFFIXES.items() if path.name.endswith(suffix)), None)
    if named is not None:
        return named
    have = set(columns)
    family = next((role for role, needed in SIGNATURES if needed <= have), None)
    if family != "api":
        return family
    first = head.partition(b"\n")[2].partition(b"\n")[0].decode("utf-8", "replace")
    domain = next(csv.reader([first]), [""])[0] if first else ""
    # another API's trace (RCCL, rocDecode, rocJPEG ...) or an empty one of unknown kind: not read
    return next((role for prefix, role in DOMAIN_ROLES if domain.startswith(prefix)), None)


@dataclass(frozen=True)
class RunFiles:
    """The files of one run by role (counter collections: a tuple, in name order)."""

    folder: Path
    files: dict[str, Path]
    counters: tuple[Path, ...]

    @property
    def primary(self) -> Path:
        """The file that stands for the run (a kernel trace where there is one)."""
        return next((self.files[r] for r in EVENT_ROLES if r in self.files), None) or self.counters[0]

    def all(self) -> list[Path]:
        return [*self.files.values(), *self.counters]


def run_of(path: Path) -> RunFiles:
    """The run ``path`` belongs to: the rocprofv3 CSVs of its folder (:data:`ROLES`), checked to be
    one run; raises :class:`TraceFormatError` for two files of one trace kind (two runs)."""
    folder = path.parent
    files: dict[str, Path] = {}
    counters: list[Path] = []
    try:
        names = sorted(os.listdir(folder or "."))
    except OSError as exc:
        raise os_error(folder, exc) from None
    for name in names:
        candidate = folder / name
        if not name.endswith(".csv") or name.startswith(".") or not candidate.is_file():
            continue
        role = role_of(candidate, read_head(candidate))
        if role == "counter":
            counters.append(candidate)
        elif role is not None and role in files:
            raise TraceFormatError(folder, f"holds files of more than one rocprofv3 run ({files[role].name} and "
                                           f"{name} are both {role} traces)",
                                   "give the folder of one run: move each run's files to a folder of its own")
        elif role is not None:
            files[role] = candidate
    if not counters and not any(r in files for r in EVENT_ROLES):
        raise TraceFormatError(path, "is rocprofv3's agent information alone, without a trace of the run beside it",
                               "give the folder of the run (its *_kernel_trace.csv, *_hip_api_trace.csv, ...)")
    return RunFiles(folder=folder, files=files, counters=tuple(counters))


def read_head(path: Path, size: int = 1 << 16) -> bytes:
    """The first bytes of a file (its header line and first records); empty when it cannot be read
    (the run's reader then names the file and what is wrong)."""
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return b""


def read_table(path: Path, role: str) -> pa.Table:
    """One file's columns (:data:`REQUIRED` and the :data:`OPTIONAL` ones it has), integers as
    int64; a missing column, a truncated file or a value of the wrong type is one line naming the file."""
    family = schema_of(role)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise os_error(path, exc) from None
    header = header_of(data[:1 << 16]) or []
    missing = [c for c in REQUIRED[family] if c not in header]
    if missing:
        raise TraceFormatError(path, f"is a rocprofv3 {role} trace without the column{'s' * (len(missing) > 1)} "
                                     f"{', '.join(missing)}", "traceview reads rocprofv3 0.x CSV output; " + HINT)
    if not data.endswith(b"\n"):
        raise TraceFormatError(path, "ends in the middle of a line: the CSV is truncated", HINT)
    columns = [c for c in REQUIRED[family] + OPTIONAL[family] if c in header]
    types = {c: (pa.string() if c in TEXT_COLUMNS else pa.float64() if c == "Counter_Value" else pa.int64())
             for c in columns}
    try:
        return pacsv.read_csv(io.BytesIO(data), parse_options=pacsv.ParseOptions(newlines_in_values=False),
                              convert_options=pacsv.ConvertOptions(column_types=types, include_columns=columns,
                                                                   strings_can_be_null=False))
    except pa.ArrowInvalid as exc:
        # the parser's words, not the record it quotes (names from the trace reach output scrubbed only)
        first = str(exc).splitlines()[0]
        if first.startswith("CSV parse error: "):  # "...: Expected 22 columns, got 9: <the record>"
            first = first.split(": ", 2)[1]
        detail = scrub_text(first)[:200]
        raise TraceFormatError(path, f"is not a well-formed rocprofv3 CSV ({detail})", HINT) from None
