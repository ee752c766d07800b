"""An Nsight Systems export whose GPU tables lack ``globalPid`` (issue 30, item 8).

Before: the kernels (process -1) became a rank of their own and the runtime calls another, so no
launch linked anything (``SELECT count(*) FROM launches`` = 0). Now the rows are joined on what the
export has: the device (its one process in the GPU tables that keep ``globalPid``), the correlation
id of the CUDA API calls (process from the runtime table's ``globalTid``), the export's only
process; a warning says which join placed how many rows, and rows none places are skipped and
counted. The exports are copies of the shared ones with the column dropped (SQLite >= 3.35).
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import traceview
from traceview.model import Kind

from conftest import require_shared

GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
              "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")


def without_global_pid(tmp_path: Path, name: str, tables: tuple[str, ...]) -> tuple[Path, Path]:
    if sqlite3.sqlite_version_info < (3, 35):
        pytest.skip(f"SQLite {sqlite3.sqlite_version} cannot drop a column")
    original = require_shared() / "nsys" / f"{name}.sqlite"
    if not original.exists():
        pytest.skip(f"{original} is absent")
    copy = tmp_path / f"{name}_no_gpid.sqlite"
    shutil.copyfile(original, copy)
    copy.chmod(0o644)
    con = sqlite3.connect(copy)
    for table in tables:
        columns = {row[1] for row in con.execute(f'PRAGMA table_info("{table}")')}
        if "globalPid" in columns:
            con.execute(f'ALTER TABLE "{table}" DROP COLUMN globalPid')
    con.commit()
    con.close()
    return original, copy


def kernels_per_rank(trace: traceview.Trace) -> dict[int, int]:
    kind = trace.kind_codes()
    rank = trace.events.column("rank").to_numpy()
    return {int(r): int(((kind == int(Kind.KERNEL)) & (rank == r)).sum()) for r in np.unique(rank)}


def global_pid_warnings(trace: traceview.Trace) -> list[str]:
    return [w for w in trace.warnings if "has no globalPid column" in w]


@pytest.mark.parametrize("name", ["fuser_matmul_h100_2024.6", "torchrun_2xh100_nccl_2026.2"])
def test_kernel_table_without_global_pid_joins_on_the_device(tmp_path: Path, name: str) -> None:
    original, copy = without_global_pid(tmp_path, name, GPU_TABLES[:1])
    want = traceview.load(original, use_cache=False)
    got = traceview.load(copy, use_cache=False)
    assert sorted(got.ranks) == sorted(want.ranks)  # no phantom rank of kernels
    assert kernels_per_rank(got) == kernels_per_rank(want)
    assert got.links.num_rows == want.links.num_rows > 0
    (warning,) = global_pid_warnings(got)
    kernels = sum(kernels_per_rank(want).values())
    assert f"{kernels:,} on their device" in warning and "skipped" not in warning, warning


def test_single_process_export_without_any_global_pid_joins_on_correlation(tmp_path: Path) -> None:
    original, copy = without_global_pid(tmp_path, "fuser_matmul_h100_2024.6", GPU_TABLES)
    want = traceview.load(original, use_cache=False)
    got = traceview.load(copy, use_cache=False)
    assert sorted(got.ranks) == sorted(want.ranks) == [0]
    assert got.num_events == want.num_events
    assert got.links.num_rows == want.links.num_rows > 0
    kernel_warning = next(w for w in global_pid_warnings(got) if "CUPTI_ACTIVITY_KIND_KERNEL" in w)
    assert "19 on the correlation id of their CUDA API call" in kernel_warning, kernel_warning


def test_two_processes_without_any_global_pid_keep_two_ranks_and_count_what_is_skipped(tmp_path: Path) -> None:
    original, copy = without_global_pid(tmp_path, "torchrun_2xh100_nccl_2026.2", GPU_TABLES)
    want = traceview.load(original, use_cache=False)
    got = traceview.load(copy, use_cache=False)
    assert sorted(got.ranks) == sorted(want.ranks) == [0, 1]
    kernel_warning = next(w for w in global_pid_warnings(got) if "CUPTI_ACTIVITY_KIND_KERNEL" in w)
    assert "on the correlation id of their CUDA API call" in kernel_warning, kernel_warning
    # every kernel row is accounted for: kept in a rank, or skipped under its reason
    skipped = sum(info.event_counts.get("CUPTI_ACTIVITY_KIND_KERNEL.no_rank_null_process", 0)
                  for info in got.ranks.values())
    assert sum(kernels_per_rank(got).values()) + skipped == sum(kernels_per_rank(want).values())
    # most launches are found again (before: none)
    assert got.links.num_rows >= 0.9 * want.links.num_rows
