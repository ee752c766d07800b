"""The cost XLA recorded per op (XSpace ``flops`` / ``bytes_accessed`` stats) as efficiency op instances.

A compute kernel whose event carries ``recorded_flops`` or ``recorded_bytes`` (docs/schema.md; only
the XSpace parser fills them) is its own op instance of the efficiency analysis, model
:data:`RECORDED_MODEL`: FLOPs = the recorded FLOPs (rounded to an integer; 0 when only bytes are
recorded), bytes = the recorded bytes (0 when only FLOPs are), ``gpu_ns`` = the kernel's duration.
It is then placed on the roofline like a modelled op, beside the ops modelled from their shapes, and
counts in every figure that sums modelled ops (HFU, the families, ``efficiency.kernel_flops``,
``efficiency.kernel_roofline_factor``). XLA records no dtype with the cost, so the peak is the dense
tensor peak of ``Options.mfu_dtype`` (bf16 unless ``--mfu-dtype`` says otherwise), which the roof
label says; an op of no FLOPs needs only the bandwidth. Kernels without the columns (every Kineto,
Nsight and rocprofv3 trace) are untouched: their op, model and figures are what they were.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceview import hardware as hw
from traceview.model import Trace

#: the cost model name of an op whose cost XLA recorded
RECORDED_MODEL = "xla recorded"
#: the dtype column of such an op: XLA records none (the roof uses Options.mfu_dtype)
RECORDED_DTYPE = ""
#: the cost columns of the events table
FLOPS_COLUMN, BYTES_COLUMN = "recorded_flops", "recorded_bytes"


def recorded_costs(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per event row of ``rows``: (has a recorded cost, FLOPs as float (NaN: none), bytes (-1: none))."""
    names = trace.events.column_names
    if rows.size == 0 or FLOPS_COLUMN not in names or BYTES_COLUMN not in names:
        return np.zeros(rows.size, bool), np.full(rows.size, np.nan), np.full(rows.size, -1, np.int64)
    flops_col, bytes_col = trace.events.column(FLOPS_COLUMN), trace.events.column(BYTES_COLUMN)
    if flops_col.null_count == len(flops_col) and bytes_col.null_count == len(bytes_col):
        return np.zeros(rows.size, bool), np.full(rows.size, np.nan), np.full(rows.size, -1, np.int64)
    at = pa.array(rows, pa.int64())
    flops = pc.fill_null(flops_col.take(at), np.nan).to_numpy().astype(np.float64)
    nbytes = pc.fill_null(bytes_col.take(at), -1).to_numpy().astype(np.int64)
    return ~np.isnan(flops) | (nbytes >= 0), flops, nbytes


def recorded_ops(kernel_rows: np.ndarray, names: np.ndarray, rank: np.ndarray, device: np.ndarray,
                 step: np.ndarray, dur_ns: np.ndarray, flops: np.ndarray, nbytes: np.ndarray) -> pd.DataFrame:
    """One op instance per kernel with a recorded cost, in the columns of the efficiency ops table
    (``efficiency.OpKernels.ops``): every argument holds one entry per such kernel."""
    n = kernel_rows.size
    return pd.DataFrame({
        "row": kernel_rows.astype(np.int64), "rank": rank, "device": device, "step": step,
        "gpu_ns": dur_ns.astype(np.int64), "kernels": np.ones(n, np.int64),
        "name": names, "modelled": np.ones(n, bool),
        "flops": np.round(np.nan_to_num(flops, nan=0.0)).astype(np.int64),
        "bytes": np.maximum(nbytes, 0).astype(np.int64),
        "dtype": [RECORDED_DTYPE] * n, "unit": ["tensor"] * n, "model": [RECORDED_MODEL] * n,
        "reason": [""] * n, "detail": [""] * n, "has_dims": np.ones(n, bool),
    })


def roof_note(mfu_dtype: str) -> str:
    """What the roof label of a recorded op adds: which peak was taken, and why."""
    return f" (XLA records no dtype: the dense {mfu_dtype} tensor peak, --mfu-dtype)"


def not_gpu_warnings(devices: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """(rank, warning) for each (rank, device name) of a device that is no GPU (a TPU, the XLA CPU
    backend's ``CPU``): no peak, so no roofline, whatever ops it ran (said once per cause)."""
    out = []
    for rank, name in devices:
        why = hw.missing_peak_reason(name, None, "bf16") if name.strip().split(" ")[0] in hw.NOT_GPUS else None
        if why is not None:
            out.append((rank, f"efficiency: {why}"))
    return out
