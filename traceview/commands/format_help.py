"""The input formats in the help of the commands that take traces. The help names docs/formats.md,
whose table lists every registered ``InputFormat`` (tests/unit/test_help_formats.py checks the
table against the registry, so a new format must be added there): listing the formats from the
registry itself would import every parser, and with them numpy and pyarrow, for ``--help`` (fast
start: benchmarks/bench_start.py)."""

from __future__ import annotations

#: how the help of an argument that takes traces ends
ANY_TRACE_FORMAT = ("in any input format traceview reads: PyTorch profiler (Kineto) JSON, Nsight Systems "
                    "SQLite or .nsys-rep, JAX/TensorFlow XSpace, AMD rocprofv3 (docs/formats.md lists them all)")
ANY_REDACTABLE_FORMAT = ("in a format that has a redaction: PyTorch profiler (Kineto) JSON, Nsight Systems "
                         "SQLite or .nsys-rep, JAX/TensorFlow XSpace (docs/formats.md)")
