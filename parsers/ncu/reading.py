"""Reading one ``ncu --csv`` export into long rows (one per kernel and metric) and rule rows.

Two layouts, told apart by the header:

* ``--page details`` (and ``--page details --metrics ...``): one row per kernel and metric, columns
  ``ID, ..., Kernel Name, ..., Block Size, Grid Size, ..., Section Name, Metric Name, Metric Unit,
  Metric Value`` and, in recent versions, ``Rule Name, Rule Type, Rule Description, Estimated
  Speedup Type, Estimated Speedup``. A row with a rule name and no metric name is a rule result.
* ``--page raw``: one row per kernel, one column per metric after the identity columns, the units in
  the second row (empty under the identity columns).

Lines before the header that ncu prints on the same stream (``==PROF== ...``, ``==WARNING== ...``)
are skipped and counted. The cells are read as text (the ``csv`` module), then converted per
column.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from traceview.errors import TraceFormatError, os_error
from traceview.parsers.ncu.sniff import HINT, looks_like_ncu_csv, split_preamble
from traceview.parsers.ncu.units import normalise_unit

#: identity columns (any layout); ``Host Name`` and ``Process Name`` are never kept (a host name is
#: a secret of the user's)
IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context", "Stream",
            "Block Size", "Grid Size", "Device", "CC", "Invocations", "Function Name", "Demangled Name")
DETAILS_REQUIRED = ("ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value")
RAW_REQUIRED = ("ID", "Kernel Name")
RULE_COLUMNS = ("Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup")
#: a file is read whole; ncu exports of thousands of kernels are a few MB
MAX_BYTES = 1 << 30


@dataclass
class FileRows:
    """One file's rows: ``metrics`` (ncu_id, kernel, grid, block, section, metric, unit, value,
    raw_unit, raw_value), ``rules`` (ncu_id, kernel, grid, block, section, rule, rule_type,
    description, speedup_type, speedup_pct) and what was counted."""

    layout: str
    metrics: pd.DataFrame
    rules: pd.DataFrame
    counts: dict[str, int] = field(default_factory=dict)


def read_text(path: Path) -> str:
    """The file's text (UTF-8, a BOM dropped); an unreadable or binary file is one line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise os_error(path, exc) from None
    if b"\x00" in data[:4096]:
        raise TraceFormatError(path, "is a binary file, not an Nsight Compute CSV export", HINT)
    return data.decode("utf-8", errors="replace").lstrip("\ufeff")


def read_table(path: Path, text: str) -> pd.DataFrame:
    """The CSV as a frame of strings, one column per header name (pandas' C reader: no field size
    limit, so megabyte kernel names read). ncu ends metric rows of the details page after the value
    (no rule cells): a short row gets empty cells; a row longer than the header is an error."""
    names = next(csv.reader([text.split("\n", 1)[0].rstrip("\r")])) if text else []
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})[0]
        raise TraceFormatError(path, f"has the column {dup!r} twice, so it is not an ncu CSV export", HINT)
    try:
        # header=None: the header line sets the width, so a longer row is an error, not an index
        frame = pd.read_csv(io.StringIO(text), header=None, dtype=str, keep_default_na=False, na_filter=False,
                            skip_blank_lines=True, engine="c")
    except (pd.errors.ParserError, ValueError) as exc:
        detail = " ".join(str(exc).split())[:160]
        raise TraceFormatError(path, f"is not a well-formed CSV file ({detail})", HINT) from None
    frame = frame.iloc[1:].reset_index(drop=True)
    frame.columns = names
    return frame.astype(object)


def to_number(text: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(float values, which were not numbers) of ncu's value texts: thousands separators removed,
    ``n/a`` and empty cells NaN (and flagged), anything else that is no number flagged too."""
    cleaned = text.str.replace(",", "", regex=False).str.strip()
    values = pd.to_numeric(cleaned, errors="coerce").to_numpy(np.float64)
    return values, np.isnan(values)


def parse_dims(path: Path, text: pd.Series, column: str) -> np.ndarray:
    """``(x, y, z)`` texts -> an (n, 3) int64 array (-1: the cell is empty)."""
    out = np.full((len(text), 3), -1, dtype=np.int64)
    if not len(text):
        return out
    stripped = text.str.strip()
    given = (stripped != "").to_numpy()
    parts = stripped[given].str.strip("()").str.split(",", expand=True)
    if parts.shape[1] != 3:
        raise TraceFormatError(path, f"has a {column} that is not (x, y, z): {stripped[given].iloc[0][:60]!r}", HINT)
    nums = parts.apply(lambda c: pd.to_numeric(c.str.strip(), errors="coerce")).to_numpy(np.float64)
    if np.isnan(nums).any():
        bad = stripped[given].iloc[int(np.flatnonzero(np.isnan(nums).any(axis=1))[0])]
        raise TraceFormatError(path, f"has a {column} that is not (x, y, z): {bad[:60]!r}", HINT)
    out[given] = nums.astype(np.int64)
    return out


def identity(path: Path, frame: pd.DataFrame) -> pd.DataFrame:
    """pid (-1: not given), ncu_id, kernel, grid_x..z, block_x..z of each row."""
    ids, bad = to_number(frame["ID"])
    if bad.any():
        row = int(np.flatnonzero(bad)[0]) + 2
        raise TraceFormatError(path, f"line {row}: the ID {frame['ID'].iloc[row - 2][:40]!r} is not a number", HINT)
    pids = to_number(frame["Process ID"])[0] if "Process ID" in frame else np.full(len(frame), np.nan)
    out = pd.DataFrame({"pid": np.nan_to_num(pids, nan=-1).astype(np.int64), "ncu_id": ids.astype(np.int64),
                        "kernel": frame["Kernel Name"].to_numpy(object)})
    for column, prefix in (("Grid Size", "grid"), ("Block Size", "block")):
        dims = parse_dims(path, frame[column], column) if column in frame else np.full((len(frame), 3), -1)
        for i, axis in enumerate("xyz"):
            out[f"{prefix}_{axis}"] = dims[:, i]
    return out


def convert(metrics: pd.DataFrame, counts: dict[str, int]) -> pd.DataFrame:
    """``unit``/``value`` from ``raw_unit``/``raw_value`` (base units; NaN for n/a)."""
    units = pd.Series(metrics["raw_unit"].unique())
    table = {u: normalise_unit(u) for u in units}
    metrics["unit"] = metrics["raw_unit"].map({u: t[0] for u, t in table.items()}).astype(object)
    factor = metrics["raw_unit"].map({u: t[1] for u, t in table.items()}).to_numpy(np.float64)
    unknown = {u for u, t in table.items() if not t[2]}
    values, missing = to_number(metrics["raw_value"])
    metrics["value"] = values * factor
    counts["values_not_a_number"] = int(missing.sum())
    counts["units_kept_as_written"] = int(metrics["raw_unit"].isin(unknown).sum())
    return metrics


def read_details(path: Path, frame: pd.DataFrame, counts: dict[str, int]) -> FileRows:
    """The long layout: metric rows and rule rows."""
    missing = [c for c in DETAILS_REQUIRED if c not in frame.columns]
    if missing:
        raise TraceFormatError(path, f"is an ncu CSV without the column(s) {', '.join(missing)}", HINT)
    ids = identity(path, frame)
    section = frame["Section Name"].to_numpy(object)
    metric_name = frame["Metric Name"].str.strip()
    has_rule = (frame["Rule Name"].str.strip() != "") if "Rule Name" in frame else pd.Series(False, index=frame.index)
    is_metric = (metric_name != "").to_numpy()
    is_rule = (~is_metric) & has_rule.to_numpy()
    empty = ~is_metric & ~is_rule
    counts.update(rows=len(frame), metric_rows=int(is_metric.sum()), rule_rows=int(is_rule.sum()),
                  empty_rows=int(empty.sum()))
    metrics = ids[is_metric].assign(section=section[is_metric], metric=metric_name[is_metric].to_numpy(object),
                                    raw_unit=frame["Metric Unit"][is_metric].str.strip().to_numpy(object),
                                    raw_value=frame["Metric Value"][is_metric].to_numpy(object))
    metrics = convert(metrics.reset_index(drop=True), counts)
    rules = ids[is_rule].assign(section=section[is_rule])
    for column, name in zip(RULE_COLUMNS, ("rule", "rule_type", "description", "speedup_type", "speedup_pct")):
        rules[name] = frame[column][is_rule].to_numpy(object) if column in frame else ""
    speedup, _ = to_number(rules["speedup_pct"].astype(str)) if len(rules) else (np.zeros(0), None)
    rules["speedup_pct"] = speedup
    return FileRows("details", metrics, rules.reset_index(drop=True), counts)


def read_raw(path: Path, frame: pd.DataFrame, counts: dict[str, int]) -> FileRows:
    """The wide layout: the units in the first data row, one column per metric."""
    if not len(frame) or frame["ID"].iloc[0].strip() != "":
        raise TraceFormatError(path, "is an ncu raw-page CSV without its units row (the second line)", HINT)
    units = frame.iloc[0]
    body = frame.iloc[1:].reset_index(drop=True)
    metric_columns = [c for c in frame.columns if c not in IDENTITY]
    if not metric_columns:
        raise TraceFormatError(path, "is an ncu CSV with no metric columns", HINT)
    counts.update(rows=len(body), units_row=1)
    ids = identity(path, body)
    n, m = len(body), len(metric_columns)
    metrics = pd.DataFrame({c: np.repeat(ids[c].to_numpy(), m) for c in ids.columns})
    metrics["section"] = ""
    metrics["metric"] = np.tile(np.asarray(metric_columns, dtype=object), n)
    metrics["raw_unit"] = np.tile(np.asarray([units[c].strip() for c in metric_columns], dtype=object), n)
    metrics["raw_value"] = body[metric_columns].to_numpy(object).reshape(-1)
    counts["metric_cells"] = n * m
    rules = pd.DataFrame(columns=list(ids.columns) + ["section", "rule", "rule_type", "description",
                                                      "speedup_type", "speedup_pct"])
    return FileRows("raw", convert(metrics, counts), rules, counts)


def read_file(path: Path) -> FileRows:
    """One ncu CSV export (either layout), checked: a file that is not one, a missing column, a
    kernel without metrics or a metric in units of two dimensions is one line."""
    text = read_text(path)
    body, skipped = split_preamble(text)
    if not body.strip():
        raise TraceFormatError(path, "holds no CSV header, so it is not an ncu CSV export", HINT)
    if not looks_like_ncu_csv(body[:4096].encode()):
        raise TraceFormatError(path, "is not an Nsight Compute CSV export (its header has no \"ID\" and "
                               "\"Kernel Name\" columns)", HINT)
    frame = read_table(path, body)
    counts = {"preamble_lines_skipped": skipped}
    rows = read_details(path, frame, counts) if "Metric Name" in frame.columns else read_raw(path, frame, counts)
    check_rows(path, rows)
    return rows


def check_rows(path: Path, rows: FileRows) -> None:
    """Every kernel has a metric with a value; a metric's units share one dimension."""
    kernels = rows.metrics.groupby("ncu_id")["value"].count()
    seen = set(rows.metrics["ncu_id"].tolist()) | set(rows.rules["ncu_id"].tolist())
    empty = sorted((seen - set(kernels.index.tolist())) | set(kernels[kernels == 0].index.tolist()))
    if not seen:
        raise TraceFormatError(path, "is an ncu CSV header without any kernel rows", HINT)
    if empty:
        raise TraceFormatError(path, f"has a kernel without metric values (ID {empty[0]}): the export is "
                               "partial", "profile it again, or remove that kernel's rows")
    valued = rows.metrics[rows.metrics["value"].notna()]
    per_metric = valued.groupby(["section", "metric"])["unit"].nunique()
    mixed = per_metric[per_metric > 1]
    if len(mixed):
        section, name = mixed.index[0]
        same = (valued["metric"] == name) & (valued["section"] == section)
        seen_units = sorted(set(valued.loc[same, "raw_unit"].tolist()))
        raise TraceFormatError(path, f"gives the metric {name!r} in units of different kinds ({', '.join(seen_units)})",
                               "export the kernels with one ncu version and --print-units")
