"""Efficiency roll-up by model family and dtype: "GEMMs: X TFLOP at Y TFLOP/s = Z% of peak;
elementwise at W% of the memory bandwidth" (docs/metrics.md, "Efficiency", "Roll-up").

Every modelled op instance (the ``efficiency.roofs`` input) belongs to one family by its cost
model (:data:`FAMILY_OF_MODEL`); per rank, device, family and dtype the ``families`` table sums its
calls, ``gpu_ns``, FLOPs and bytes, and over the ops with a roof (verified peaks) their roof times:
``compute_roof_ns`` = FLOPs / peak, ``memory_roof_ns`` = bytes / bandwidth and ``roofline_ns`` =
the max of the two per op. Then, over the roofed ops' ``roofed_gpu_ns``: ``peak_share`` =
compute_roof_ns / roofed_gpu_ns (the achieved FLOP/s over the peak, for one peak), ``bandwidth_share``
= memory_roof_ns / roofed_gpu_ns (the achieved bytes/s over the bandwidth) and ``efficiency`` =
roofline_ns / roofed_gpu_ns. A share above 105% is not a result (cache hits, a TF32 product on the
fp32 roof): it is left empty, as in ``op_types``. The report's summary ``efficiency_families`` is the
same over the whole job (every rank and GPU summed), largest GPU time first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceview.report_inputs import ReportInputs

NAME = "efficiency"
#: cost model -> family (a model not listed is "other")
FAMILY_OF_MODEL = {
    "gemm": "GEMM", "scaled_mm": "GEMM",
    "attention": "attention", "attention_backward": "attention",
    "conv": "conv", "conv_backward": "conv",
    "layer_norm": "norm", "rms_norm": "norm", "layer_norm_backward": "norm", "batch_norm": "norm",
    "batch_norm_backward": "norm", "softmax": "norm", "softmax_backward": "norm",
    "elementwise": "elementwise",
    "reduction": "reduction", "pool": "reduction", "pool_backward": "reduction", "loss": "reduction",
    "loss_backward": "reduction",
    "copy": "copy", "gather": "copy", "scatter_add": "copy",
    # XLA's recorded cost per op (efficiency_recorded): what kind of op is not recorded with it
    "xla recorded": "xla recorded",
}
#: families judged by their FLOP rate in the headline (the others by their memory bandwidth)
COMPUTE_FAMILIES = ("GEMM", "attention", "conv")
#: integer and boolean dtypes: off the tensor units they are indices, masks, offsets and counters,
#: which have no published peak and are not judged (efficiency.is_bookkeeping)
INTEGER_DTYPES = ("int64", "int32", "int16", "int8", "uint8", "bool")
#: a share above this is not a result (op_types' rule)
OVER_ROOF = 1.05
#: the summary lists at most this many (family, dtype) rows
SUMMARY_ROWS = 10
SUMS = ["calls", "gpu_ns", "flops", "bytes", "roofed_gpu_ns", "compute_roof_ns", "memory_roof_ns", "roofline_ns"]
FAMILY_COLUMNS = ["rank", "device", "family", "dtype", *SUMS, "achieved_tflops", "achieved_gbs", "peak_share",
                  "bandwidth_share", "efficiency"]


def family_of(models: pd.Series) -> np.ndarray:
    """The family of each cost model name."""
    return models.astype(str).map(FAMILY_OF_MODEL).fillna("other").to_numpy(dtype=object)


def _shares(out: pd.DataFrame) -> pd.DataFrame:
    gpu, roofed = out["gpu_ns"].to_numpy(np.float64), out["roofed_gpu_ns"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["achieved_tflops"] = np.where(gpu > 0, out["flops"].to_numpy(np.float64) / gpu / 1e3, np.nan)
        out["achieved_gbs"] = np.where(gpu > 0, out["bytes"].to_numpy(np.float64) / gpu, np.nan)
        for column, source in (("peak_share", "compute_roof_ns"), ("bandwidth_share", "memory_roof_ns"),
                               ("efficiency", "roofline_ns")):
            share = np.where(roofed > 0, out[source].to_numpy(np.float64) / roofed, np.nan)
            out[column] = np.where(share > OVER_ROOF, np.nan, share)
    return out


def family_table(roofed: pd.DataFrame) -> pd.DataFrame:
    """Per rank, device, family and dtype: the sums and shares of the module docstring."""
    if roofed.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("family", "dtype") else np.float64)
                             for c in FAMILY_COLUMNS})
    flops, nbytes = roofed["flops"].to_numpy(np.float64), roofed["bytes"].to_numpy(np.float64)
    has_roof = roofed["roofline_ns"].notna().to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        memory_ns = nbytes / roofed["bandwidth"].to_numpy(np.float64) * 1e9
    frame = pd.DataFrame({
        "rank": roofed["rank"].to_numpy(np.int64), "device": roofed["device"].to_numpy(np.int64),
        "family": family_of(roofed["model"]), "dtype": roofed["dtype"].astype(str).to_numpy(dtype=object),
        "calls": 1, "gpu_ns": roofed["gpu_ns"].to_numpy(np.int64), "flops": flops, "bytes": nbytes,
        "roofed_gpu_ns": np.where(has_roof, roofed["gpu_ns"].to_numpy(np.float64), 0.0),
        "compute_roof_ns": np.where(has_roof, np.nan_to_num(roofed["compute_roof_ns"].to_numpy(np.float64)), 0.0),
        "memory_roof_ns": np.where(has_roof, memory_ns, 0.0),
        "roofline_ns": np.where(has_roof, roofed["roofline_ns"].to_numpy(np.float64), 0.0)})
    out = frame.groupby(["rank", "device", "family", "dtype"], sort=False, as_index=False)[SUMS].sum()
    out = _shares(out).sort_values(["rank", "device", "gpu_ns"], ascending=[True, True, False])
    return out[FAMILY_COLUMNS].reset_index(drop=True)


def report_summary(inputs: ReportInputs) -> tuple[dict[str, Any], dict[str, str]]:
    """The summary's ``efficiency_families``: the ``families`` table over the whole job."""
    table = inputs.table(NAME, "families")
    if table is None or table.empty:
        return {"efficiency_families": None}, {}
    job = _shares(table.groupby(["family", "dtype"], sort=False, as_index=False)[SUMS].sum())
    job = job.sort_values(["gpu_ns", "family", "dtype"], ascending=[False, True, True]).head(SUMMARY_ROWS)
    total = float(table["gpu_ns"].sum())
    rows = []
    for r in job.itertuples(index=False):
        rows.append({"family": str(r.family), "dtype": str(r.dtype), "gpu_ns": int(r.gpu_ns),
                     "gpu_share": float(r.gpu_ns) / max(total, 1.0), "flops": float(r.flops),
                     "bytes": float(r.bytes), "achieved_tflops": _num(r.achieved_tflops),
                     "achieved_gbs": _num(r.achieved_gbs), "peak_share": _num(r.peak_share),
                     "bandwidth_share": _num(r.bandwidth_share), "efficiency": _num(r.efficiency),
                     "roofed_share": float(r.roofed_gpu_ns) / max(float(r.gpu_ns), 1.0),
                     "judged_by": _judged_by(str(r.family), str(r.dtype))})
    return {"efficiency_families": rows}, {}


def _judged_by(family: str, dtype: str) -> str:
    """Which share the headline gives: the peak for products, the bandwidth for the others, none
    for integer bookkeeping (an integer op off the tensor units)."""
    if family in COMPUTE_FAMILIES:
        return "peak"
    return "none" if dtype in INTEGER_DTYPES else "bandwidth"


def _num(value: Any) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)
