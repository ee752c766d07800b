"""traceview: GPU profiler traces (PyTorch/Kineto JSON, Nsight Systems SQLite) into answers.

>>> import traceview
>>> trace = traceview.load("sample_traces/synthetic_4rank")   # doctest: +SKIP
"""

from traceview.errors import TraceFormatError, TraceviewError
from traceview.loading import load
from traceview.model import Kind, RankInfo, Trace

__all__ = ["load", "Trace", "Kind", "RankInfo", "TraceFormatError", "TraceviewError"]
__version__ = "0.1.0"
