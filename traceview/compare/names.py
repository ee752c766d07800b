"""Kernel-name normalisation: the name under which renamed instantiations of one kernel still
match between two traces (another template argument, Inductor's ``triton_poi_fused_add_0`` ->
``triton_poi_fused_add_1``). The rules are in :func:`normalize_kernel_name` and
docs/diff_and_check.md. The function lives in the core (``traceview.analyses.kernel_names``), where
the kernels analysis groups kernels across ranks by it; the diff takes it from here."""

from __future__ import annotations

from traceview.analyses.kernel_names import normalize_kernel_name

__all__ = ["normalize_kernel_name"]
