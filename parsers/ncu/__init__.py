"""Nsight Compute exports (``ncu --csv``): per-kernel hardware measurements, not a timeline.

An ncu export holds, for each profiled kernel, its metrics (speed of light, memory workload,
occupancy, scheduler statistics, raw counters) and its rule results with estimated speedups. It is
read into one :class:`NcuMetrics` (two tables, long: one row per kernel and metric; one row per
kernel and rule), which ``traceview analyze TRACE --ncu FILE`` joins to the trace's kernels
(``analyses/measured.py``). Layouts, units and checks: :mod:`traceview.parsers.ncu.reading`,
:mod:`traceview.parsers.ncu.units`; docs/formats.md, "Nsight Compute".

Given as a trace, an ncu file is refused with what to do instead (its :data:`FORMAT`'s parse); a
directory scan never picks it up as a trace. ``.ncu-rep`` reports are exported with
``ncu --import X.ncu-rep --csv --page details`` when ``ncu`` is on PATH, else the command is said.

``invocation``: the k-th profiled record (0, 1, ...) of one kernel name and launch configuration,
in the order of the files given and ncu's ``ID`` within a file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from traceview.errors import TraceFormatError
from traceview.model import Trace
# the sniffs only: reading needs pandas, which a process that merely sniffs files (a Kineto parse's
# workers) must not import
from traceview.parsers.ncu.sniff import HINT, looks_like_json, looks_like_ncu_csv
from traceview.parsing import NO_HOOKS, ParseHooks
from traceview.registry import InputFormat, register_input_format

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FORMAT", "REPORT_FORMAT", "NcuMetrics", "export_ncu_rep", "is_ncu_input", "looks_like_ncu_csv",
           "ncu_files", "read_ncu"]

REPORT_SUFFIX = ".ncu-rep"
KEY_COLUMNS = ["kernel", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]


@dataclass
class NcuMetrics:
    """What one or several ncu exports hold. ``metrics``: file, ncu_id, kernel, grid_x..z, block_x..z
    (-1: not in the export), invocation, section, metric, unit (base unit), value (in it; NaN: n/a),
    raw_unit, raw_value (as written). ``rules``: the same identity columns, section, rule,
    rule_type (OPT, WRN, INF, ...), description, speedup_type (local, global), speedup_pct (NaN:
    none). ``files``: (file name, layout, counts) per file read, and last ("(all files)", "merged",
    the counts of merging the files' records)."""

    metrics: pd.DataFrame
    rules: pd.DataFrame
    files: list[tuple[str, str, dict[str, int]]] = field(default_factory=list)

    @property
    def kernels(self) -> pd.DataFrame:
        """One row per profiled kernel record: file, pid, ncu_id, identity, invocation, metrics (count)."""
        keys = ["file", "pid", "ncu_id", *KEY_COLUMNS, "invocation"]
        return self.metrics.groupby(keys, sort=False, dropna=False).size().rename("metrics").reset_index()


def ncu_files(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The files of ``paths``: files as given, directories expanded to their ncu CSVs and
    reports (sorted by name); a directory without any is one line."""
    out: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and is_ncu_input(p))
            if not found:
                raise TraceFormatError(path, "holds no Nsight Compute CSV export (.csv with an ncu header) or "
                                       ".ncu-rep report", HINT)
            out.extend(found)
        else:
            out.append(path)
    return out


def is_ncu_input(path: Path) -> bool:
    """An ncu CSV (by its header) or an ``.ncu-rep`` (by name); never raises."""
    if path.name.endswith(REPORT_SUFFIX):
        return True
    try:
        with open(path, "rb") as fh:
            return looks_like_ncu_csv(fh.read(4096))
    except OSError:
        return False


def read_ncu(paths: Sequence[str | os.PathLike[str]]) -> NcuMetrics:
    """Every kernel record of the ncu exports ``paths`` (files or directories), numbered by
    invocation per kernel name and launch configuration."""
    import pandas as pd

    from traceview.parsers.ncu.cupti import read_ranges
    from traceview.parsers.ncu.reading import read_file

    metric_parts: list[pd.DataFrame] = []
    rule_parts: list[pd.DataFrame] = []
    files: list[tuple[str, str, dict[str, int]]] = []
    for order, path in enumerate(ncu_files(paths)):
        csv_path = export_ncu_rep(path) if path.name.endswith(REPORT_SUFFIX) else path
        rows = read_ranges(csv_path) if _is_json(csv_path) else read_file(csv_path)
        label = path.name  # the name only: a path could name the user's home
        for part, out in ((rows.metrics, metric_parts), (rows.rules, rule_parts)):
            out.append(part.assign(file=label, file_order=order))
        files.append((label, rows.layout, rows.counts))
    metrics, rules, merged = merge_records(pd.concat(metric_parts, ignore_index=True),
                                           pd.concat(rule_parts, ignore_index=True))
    files.append(("(all files)", "merged", merged))
    return NcuMetrics(metrics=metrics, rules=rules, files=files)


def _is_json(path: Path) -> bool:
    """A JSON (or gzipped) file: a Kineto trace with CUPTI range-profiler events (``cupti.py``)."""
    try:
        with open(path, "rb") as fh:
            return looks_like_json(fh.read(64))
    except OSError:
        return False


def merge_records(metrics: pd.DataFrame, rules: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, int]]:
    """One record per profiled launch (process, ncu ID, kernel, launch configuration) over all
    files (a details and a raw export of one run hold the same records): a metric or rule given
    twice is kept once (counted; a second value that differs is counted apart), and records are
    numbered by invocation per kernel name and launch configuration."""
    record = ["pid", "ncu_id", *KEY_COLUMNS]
    before_m, before_r = len(metrics), len(rules)
    metrics = metrics.sort_values(["file_order"], kind="stable")
    dup = metrics.duplicated([*record, "section", "metric"], keep="first")
    first = metrics[~dup].set_index([*record, "section", "metric"])["value"]
    again = metrics[dup].set_index([*record, "section", "metric"])["value"]
    differ = int((~((again - first.reindex(again.index)).abs().fillna(0) <= 1e-9 * again.abs().fillna(0))).sum())
    metrics = metrics[~dup]
    rules = rules.drop_duplicates([*record, "section", "rule"], keep="first")
    records = metrics[["file_order", *record]].drop_duplicates(record).sort_values(["file_order", "ncu_id"])
    records["invocation"] = records.groupby(KEY_COLUMNS, sort=False).cumcount()
    records = records.drop(columns="file_order")
    metrics = metrics.merge(records, on=record, how="left").drop(columns="file_order")
    rules = rules.merge(records, on=record, how="left").drop(columns="file_order")
    rules["invocation"] = rules["invocation"].fillna(-1).astype("int64")
    counts = {"records": len(records), "duplicate_metric_rows": before_m - len(metrics),
              "duplicate_metric_rows_differing": differ, "duplicate_rule_rows": before_r - len(rules)}
    return metrics.reset_index(drop=True), rules.reset_index(drop=True), counts


def export_ncu_rep(path: Path) -> Path:
    """A ``.ncu-rep`` report's details page as CSV (``ncu --import``), cached by path, size and
    mtime; without ``ncu`` on PATH, one line with the command to run."""
    if not path.is_file():
        raise TraceFormatError(path, "no such file")
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    try:
        from traceview.parsing import cache_dir

        out_dir = cache_dir() / "ncu-export"
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        out_dir = Path(tempfile.mkdtemp(prefix="traceview-ncu-"))
    target = out_dir / f"{path.stem}-{key}.csv"
    if target.is_file() and target.stat().st_size > 0:
        return target
    ncu = shutil.which("ncu")
    command = f"ncu --import {path.name} --csv --page details > {path.stem}.csv"
    if ncu is None:
        raise TraceFormatError(path, "is an Nsight Compute report (.ncu-rep); traceview reads its CSV export, and "
                               "no ncu binary is on PATH to make one", f"run: {command}")
    try:
        proc = subprocess.run([ncu, "--import", str(path), "--csv", "--page", "details"], capture_output=True,
                              timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TraceFormatError(path, f"ncu --import failed ({exc})", f"run: {command}") from None
    if proc.returncode != 0 or not proc.stdout:
        tail = (proc.stderr or b"").decode(errors="replace").strip().splitlines()
        raise TraceFormatError(path, f"ncu --import failed: {tail[-1] if tail else proc.returncode}",
                               f"run: {command}")
    tmp = out_dir / f".{path.stem}-{key}.{os.getpid()}.tmp.csv"
    tmp.write_bytes(proc.stdout)
    os.replace(tmp, target)
    return target


def _refuse(path: Path, **_: Any) -> Trace:
    """An ncu export given as a trace: say what it is and how to use it."""
    raise TraceFormatError(path, "is an Nsight Compute export (per-kernel measurements, no timeline), not a trace",
                           f"join it to a trace: traceview analyze TRACE --ncu {path.name}; "
                           f"describe it: traceview info {path.name}")


def _sniff(_path: Path, head: bytes) -> bool:
    return looks_like_ncu_csv(head)


def _sniff_report(path: Path, _head: bytes) -> bool:
    return path.name.endswith(REPORT_SUFFIX)


def _never(_path: Path, _head: bytes) -> bool:
    return False  # a directory scan leaves ncu files out: they are joined with --ncu, not loaded


_parse: Callable[..., Trace] = _refuse
FORMAT = register_input_format(InputFormat(
    name="ncu", description="Nsight Compute CSV export (ncu --csv; joined with --ncu, not a trace)",
    sniff=_sniff, parse=_parse, cacheable=False, order=90, scan=_never, producer="Nsight Compute CSV export",
    vendor="NVIDIA"))
REPORT_FORMAT = register_input_format(InputFormat(
    name="ncu-rep", description="Nsight Compute report (.ncu-rep; joined with --ncu, not a trace)",
    sniff=_sniff_report, parse=_parse, cacheable=False, order=91, scan=_never, producer="Nsight Compute report",
    vendor="NVIDIA"))

del ParseHooks, NO_HOOKS  # the parse signature needs no hooks: the file is refused before anything is read
