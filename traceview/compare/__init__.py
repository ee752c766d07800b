"""Compare: what changed between two runs, and whether one run passes performance rules.

A feature on top of the core: both take :class:`~traceview.report.Report` objects made by the one
pipeline (:func:`traceview.pipeline.analyze`) and never run analyses themselves.

* :func:`diff_reports` (``traceview diff BASE NEW``): every step-time, GPU-time, kernel and finding
  figure of two reports, with a noise rule (:mod:`traceview.compare.diff`,
  :mod:`traceview.compare.noise`, kernel names matched by :mod:`traceview.compare.names`);
* :func:`evaluate` (``traceview check PATH``): rules with limits (:mod:`traceview.compare.rules`)
  judged on a report and a baseline (:mod:`traceview.compare.check`);
* :mod:`traceview.compare.render`: the diff as text, Markdown or JSON; the check as text.

The rules of both are in docs/diff_and_check.md.
"""

from traceview.compare.check import CheckReport, RuleResult, evaluate
from traceview.compare.diff import METRICS, TraceDiff, diff_reports
from traceview.compare.names import normalize_kernel_name
from traceview.compare.noise import Change, DiffOptions, compare, pooled_std
from traceview.compare.rules import RULES, Limit, RuleError, gather_rules, load_config, parse_limit, parse_share

__all__ = ["METRICS", "RULES", "Change", "CheckReport", "DiffOptions", "Limit", "RuleError", "RuleResult",
           "TraceDiff", "compare", "diff_reports", "evaluate", "gather_rules", "load_config", "normalize_kernel_name",
           "parse_limit", "parse_share", "pooled_std"]
