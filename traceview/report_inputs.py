"""What the report's hooks on the analyses read (``AnalysisSpec.summary``, ``rank_summary``,
``charts``, ``timebase``): the analyses' results and what is derived from them once per report.
Below the report in the layers, so an analysis can declare hooks without importing the report."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pandas as pd

from traceview.findings import AnalysisResult
from traceview.registry import analysis_specs


class ReportInputs:
    """What the report's hooks on the analyses (``AnalysisSpec.summary``, ``rank_summary``,
    ``charts``, ``timebase``) read: every analysis's result, each table's true row count (a job cut
    the tables) and values derived once per report (:meth:`once`)."""

    def __init__(self, results: Mapping[str, AnalysisResult], table_rows: Mapping[tuple[str, str], int],
                 ranks: Iterable[int] = ()) -> None:
        self.results = results
        self.table_rows = table_rows
        #: the ranks of the inputs (those a per-rank figure is for)
        self.ranks = sorted(int(r) for r in ranks)
        self.memo: dict[str, Any] = {}

    def table(self, analysis: str, name: str) -> pd.DataFrame | None:
        """A table of an analysis's result (None when the analysis or the table is absent)."""
        result = self.results.get(analysis)
        return None if result is None else result.tables.get(name)

    def rows(self, analysis: str, name: str) -> int:
        """A table's true row count: as counted before a job cut it, else its length."""
        if (analysis, name) in self.table_rows:
            return int(self.table_rows[(analysis, name)])
        table = self.table(analysis, name)
        return 0 if table is None else int(len(table))

    def once(self, name: str, make: Any) -> Any:
        """``make()``, computed once per report (the same object for every caller: read it, never change it)."""
        if name not in self.memo:
            self.memo[name] = make()
        return self.memo[name]

    def timebase(self) -> tuple[dict[tuple[int, int], tuple[int, int]], dict[int, int]]:
        """(each GPU's whole-trace window by (rank, device), steps per rank): the report's one
        denominator, from the first analysis (display order) that declares a timebase."""
        def make() -> tuple[dict[tuple[int, int], tuple[int, int]], dict[int, int]]:
            for spec in analysis_specs():
                if spec.timebase is not None and spec.name in self.results:
                    return spec.timebase(self)
            return {}, {}
        value: tuple[dict[tuple[int, int], tuple[int, int]], dict[int, int]] = self.once("timebase", make)
        return value
