"""The report model: one JSON-able dict that every renderer (terminal, Markdown, HTML, JSON) and the
web app consume. Renderers never recompute a metric; they format what is here.

:func:`build_report` takes the inputs' overview and the analyses' results (from the pipeline) and
returns the model, asking each analysis for the summary figures, per-rank figures and charts its
spec declares (it names no analysis); :func:`report_to_json` serialises it. The keys are stable and documented in
``docs/reports.md`` and ``docs/report.schema.json``; ``schema_version`` follows the rule stated
there (a major bump removes or changes the meaning of a key, a minor bump adds keys).

Conventions: every time is an int in ns (keys and table columns ending in ``_ns``; float means from
the analyses are rounded); shares are fractions in [0, 1], ``*_pct`` are percentages; a figure that
does not exist is ``null``. Everything that comes from the trace passes through
:func:`traceview.secrets.scrub` before it is stored, so no renderer can echo a secret; input files
are named without their directories.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

from traceview.environment import device_properties, environment
from traceview import accounting
from traceview.claims import split_gpu_key
from traceview.findings import SEVERITIES, AnalysisResult, Finding, Options, merge_findings
from traceview.model import RankInfo, Trace
from traceview.registry import ANALYSES, analysis_specs, finding_parents, finding_precedence
from traceview.secrets import input_dirs, scrub, scrub_metadata, without_input_dirs
from traceview.tables import top_order
from traceview.plain import column_rows, plain
from traceview.units import compact_ranks
from traceview.report_inputs import ReportInputs

#: the report format version (see docs/reports.md for the rule)
SCHEMA_VERSION = "1.5"
#: rows kept per table (the largest first for tables with a sort key: see
#: ``traceview.registry.TableSpec``); the total is stated
REPORT_TABLE_ROWS = 50
MAX_TABLE_ROWS = REPORT_TABLE_ROWS
#: a table with at most this many rows is converted whole and its shown rows picked from the
#: converted array (cheaper than selecting them in pandas first)
SMALL_TABLE_ROWS = 4 * REPORT_TABLE_ROWS

# ------------------------------------------------------------------------------------ conversion


def table_records(df: pd.DataFrame | None, *, max_rows: int = MAX_TABLE_ROWS, sort_by: str | None = None,
                  total_rows: int | None = None) -> dict[str, Any]:
    """A table as ``{columns, rows, total_rows, shown_rows, sorted_by}`` (rows are dicts)."""
    table = table_columns(df, max_rows=max_rows, sort_by=sort_by, total_rows=total_rows)
    return {**table, "rows": table["rows"].rows()}


def table_columns(df: pd.DataFrame | None, *, max_rows: int = MAX_TABLE_ROWS, sort_by: str | None = None,
                  total_rows: int | None = None) -> dict[str, Any]:
    """:func:`table_records` with the rows as a :class:`~traceview.secrets.ColumnRows` (what the
    report holds until it is scrubbed: the scrub then works column by column)."""
    if df is None:
        df = pd.DataFrame()
    total = int(len(df)) if total_rows is None else int(total_rows)
    sorted_by = None
    shown_rows: np.ndarray | None = None
    # by the true row count: a table cut to its top rows (a job's, or ``whole_tables=False``) holds
    # them in table order, and shows them in the same order as the whole table would
    if max(total, len(df)) > max_rows and sort_by and sort_by in df.columns:
        shown_rows = top_order(df, sort_by)[:max_rows]
        sorted_by = sort_by
        if len(df) > SMALL_TABLE_ROWS:
            df, shown_rows = df.iloc[shown_rows], None  # only the rows shown: not the whole table converted
    elif len(df) > max_rows:
        df = df.head(max_rows)
    columns = [str(c) for c in df.columns]
    rows = column_rows(df, columns, shown_rows)
    return {"columns": columns, "rows": rows, "total_rows": total, "shown_rows": len(rows), "sorted_by": sorted_by}


def summary(trace: "TraceOverview", inputs: "ReportInputs", env: Mapping[str, Any]) -> dict[str, Any]:
    """The report's summary: what the inputs are, then the figures each analysis declares it owns
    (``AnalysisSpec.summary``, in display order), with their notes."""
    out: dict[str, Any] = {
        "gpu_models": sorted({g["model"] or "unknown GPU" for g in env["gpus"]}),
        "ranks": list(trace.rank_ids),
        "num_ranks": len(trace.rank_ids),
        "world_size": env.get("world_size"),
        "events": int(trace.num_events),
    }
    notes: dict[str, str] = {}
    for spec in analysis_specs():
        if spec.summary is not None and spec.name in inputs.results:
            figures, spec_notes = spec.summary(inputs)
            out.update(figures)
            notes.update(spec_notes)
    dropped = dropped_activity_text(trace.ranks)
    if dropped:
        notes["dropped_activity"] = dropped
    out["notes"] = notes
    return out


def dropped_activity_text(ranks: Mapping[int, RankInfo]) -> str:
    """One line saying which ranks' figures leave out dropped events that may have been activity
    (``RankInfo.activity_dropped``), or "" when none were dropped."""
    per_rank = {r: sum(info.activity_dropped.values()) for r, info in sorted(ranks.items()) if info.activity_dropped}
    if not per_rank:
        return ""
    total = sum(per_rank.values())
    shown = ", ".join(f"rank {r}: {n:,}" for r, n in list(per_rank.items())[:8])
    more = f", and {len(per_rank) - 8} more ranks" if len(per_rank) > 8 else ""
    return (f"{total:,} events that may have been activity were dropped as unusable ({shown}{more}; the warnings "
            "say why): every figure of those ranks leaves them out and may be understated")


def denominator(inputs: "ReportInputs", ranks: Iterable[int] | None = None) -> accounting.Denominator:
    """The one denominator of the report's costs: every GPU's whole-trace window and the steps of
    its rank (``ranks``: only those ranks), from the analysis that declares the timebase."""
    windows, counts = inputs.timebase()
    if ranks is not None:
        wanted = set(ranks)
        windows = {k: w for k, w in windows.items() if k[0] in wanted}
        counts = {r: n for r, n in counts.items() if r in wanted}
    return accounting.Denominator(windows, counts)


def job_findings(findings: list[Finding], n_ranks: int, inputs: "ReportInputs | None" = None) -> list[Finding]:
    """The findings of a job: a problem several ranks have is one finding listing its ranks and its
    worst rank (per-rank detail in its evidence, see :func:`traceview.findings.merge_findings`);
    findings about the job as a whole (no rank) are kept as they are. With ``inputs``, each rank's
    findings are first accounted on that rank's own denominator (:mod:`traceview.accounting`), so
    the per-rank figures in the evidence are the ones that rank's own report shows."""
    if n_ranks <= 1:
        return list(findings)
    if inputs is not None:
        _account_per_rank(findings, inputs)
    per_rank = [(int(f.rank), f) for f in findings if f.rank is not None and _own_rank(f)]
    kept = [f for f in findings if f.rank is None or not _own_rank(f)]
    return kept + merge_findings(per_rank, n_ranks)


def _own_rank(f: Finding) -> bool:
    """The finding's claims (if any) lie on its own rank (not e.g. a straggler's waiting peers)."""
    return f.claims is None or not f.claims or f.claims.ranks() <= {int(f.rank or 0)}


def _account_per_rank(findings: list[Finding], inputs: "ReportInputs") -> None:
    by_rank: dict[int, list[Finding]] = {}
    for f in findings:
        if f.rank is not None and _own_rank(f):
            by_rank.setdefault(int(f.rank), []).append(f)
    denominators = rank_denominators(inputs)
    for rank, mine in by_rank.items():
        accounting.account(mine, denominators.get(rank, accounting.Denominator({}, {})), finding_parents(),
                           finding_precedence())


def rank_denominators(inputs: "ReportInputs") -> dict[int, accounting.Denominator]:
    """Each rank's own denominator, as ``denominator(inputs, [rank])`` gives it, from one pass over
    the timebase (a job of thousands of ranks: not one filter per rank)."""
    windows, counts = inputs.timebase()
    per_rank: dict[int, dict[tuple[int, int], tuple[int, int]]] = {}
    for (r, d), window in windows.items():
        per_rank.setdefault(r, {})[(r, d)] = window
    return {r: accounting.Denominator(w, {r: counts[r]} if r in counts else {}) for r, w in per_rank.items()}


def _finding_records(findings: list[Finding], denom: accounting.Denominator,
                     claims_table: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Account the findings (nesting, precedence, costs, severity) and list them in rank order with
    ids F1, F1.1, ...: nested findings under their top-level finding, ``part_of_id`` naming the
    finding whose time they are part of. ``claims_table`` (a dict): filled with every claimed
    interval of every finding (:func:`claims_rows`)."""
    accounted = accounting.account(findings, denom, finding_parents(), finding_precedence())
    records = []
    by_severity = {s: 0 for s in SEVERITIES}
    ids: dict[int, str] = {}
    tops = accounting.tree(accounted)
    for n, (top, descendants) in enumerate(tops, start=1):
        pid = f"F{n}"
        ids[id(top.finding)] = pid
        by_severity[top.finding.severity] += 1
        records.append(_record(top, pid, None, None, denom))
        for j, (child, direct) in enumerate(descendants, start=1):
            cid = f"{pid}.{j}"
            ids[id(child.finding)] = cid
            records.append(_record(child, cid, pid, ids.get(id(direct.finding)), denom, direct.finding.code))
    if claims_table is not None:
        claims_table.update(claims_rows([(ids[id(a.finding)], a) for a in accounted]))
    top_shares = [t.finding.cost_share for t, _ in tops if t.finding.cost_share is not None]
    stats = {"total": len(records), "top_level": len(tops), "nested": len(records) - len(tops),
             "by_severity": by_severity, "denominator": denom.describe(),
             "top_level_cost_share": float(sum(top_shares)) if top_shares else None}
    return records, stats


#: the columns of the report's ``claims`` table (``Options.claims == "all"``)
CLAIMS_COLUMNS = ("finding", "rank", "device", "start_ns", "end_ns")


def claims_rows(entries: list[tuple[str, accounting.Accounted]]) -> dict[str, Any]:
    """The ``claims`` table: one row ``[finding id, rank, device, start_ns, end_ns]`` per claimed
    interval of each finding after accounting (half-open, on the rank's clock), in id order, each
    finding's intervals by GPU and start; ``intervals`` counts them."""
    rows: list[list[Any]] = []
    for fid, a in sorted(entries, key=lambda e: [int(x) for x in e[0][1:].split(".")]):
        if a.claims is None or not a.claims:
            continue
        rank, device = split_gpu_key(a.claims.key)
        rows.extend([fid, r, d, s, e] for r, d, s, e in zip(
            rank.tolist(), device.tolist(), a.claims.start_ns.tolist(), a.claims.end_ns.tolist()))
    return {"columns": list(CLAIMS_COLUMNS), "intervals": len(rows), "rows": rows}


def _record(a: accounting.Accounted, fid: str, parent: str | None, part_of_id: str | None,
            denom: accounting.Denominator, part_of: str | None = None) -> dict[str, Any]:
    # ``part_of``: the code of the finding it went under (part_of_id), not a declared umbrella that
    # does not hold its time (traceview.accounting: nesting by containment); None at top level
    record = {"id": fid, "parent": parent, **plain(a.finding.to_dict()), "part_of": part_of, "part_of_id": part_of_id,
              "cost_basis": denom.describe()["basis"], "claims": plain(accounting.claims_record(a, denom))}
    if a.claims is not None and not a.claims and a.ceded_to:
        # its time is all another cause's (precedence): say so beside the figure its title quotes
        record["title"] += f" (its time is already counted in {', '.join(a.ceded_to)})"
    return record


def _warnings(trace: "TraceOverview", results: Mapping[str, AnalysisResult]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen = set()
    dirs = input_dirs(info.source_path for info in trace.ranks.values())

    def add(scope: str, message: str, applies_to: list[str], kind: str) -> None:
        message = without_input_dirs(message, dirs)
        if (scope, message) in seen:
            return
        seen.add((scope, message))
        out.append({"scope": scope, "kind": kind, "message": message, "applies_to": applies_to})

    for w in trace.warnings:
        add("trace", w, ["all"], "input")
    for rank in trace.rank_ids:
        info = trace.ranks[rank]
        for w in info.warnings:
            add(f"rank {rank}", w, [f"rank {rank}"], "input")
        if info.unmapped:
            total = sum(info.unmapped.values())
            cats = ", ".join(f"{k} ({v:,})" for k, v in sorted(info.unmapped.items(), key=lambda kv: -kv[1])[:8])
            add(f"rank {rank}", f"{total:,} events of categories traceview does not map were kept as kind 'other' and "
                "are in no figure: " + cats, [f"rank {rank}"], "unmapped")
    for name, result in results.items():
        for w in result.warnings:
            add(name, w, [name], "analysis")
    return group_rank_warnings(out)


#: where a warning names one rank: its scope ("rank 3"), a lead after an optional analysis name
#: ("efficiency: rank 3 GPU 3: ...") or a tail (" (rank 3)")
_RANK_SCOPE = re.compile(r"^rank (?P<rank>[0-9]+)$")
_RANK_LEAD = re.compile(r"^(?P<head>[a-z_]+: )?rank (?P<rank>[0-9]+)(?: GPU [0-9]+)?: ")
_RANK_TAIL = re.compile(r" \(rank (?P<rank>[0-9]+)\)$")


def _without_rank(w: Mapping[str, Any]) -> tuple[tuple[str, str, str], set[int], bool]:
    """(the warning's key with its rank left out, the ranks it names, whether its message named them)."""
    message, scope, ranks = str(w["message"]), str(w["scope"]), set()
    in_scope = _RANK_SCOPE.match(scope)
    if in_scope:
        ranks.add(int(in_scope["rank"]))
        scope = "rank"
    lead = _RANK_LEAD.match(message)
    if lead:
        ranks.add(int(lead["rank"]))
        message = (lead["head"] or "") + message[lead.end():]
    tail = _RANK_TAIL.search(message)
    if tail:
        ranks.add(int(tail["rank"]))
        message = message[:tail.start()]
    return (str(w["kind"]), scope, message), ranks, bool(lead or tail)


def group_rank_warnings(warnings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Warnings that say the same of several ranks become one, naming the ranks: the per-rank
    "3 events of categories ... (rank 0)" .. "(rank 7)" of an 8-rank job are one warning of scope
    "ranks 0-7" (its ``applies_to`` every one of them), and "efficiency: rank 3 GPU 3: X" of each
    rank one "efficiency: X (ranks 0-7)". A warning of one rank only is kept as it is; order kept."""
    groups: dict[tuple[str, str, str], list[tuple[dict[str, Any], set[int], bool]]] = {}
    for w in warnings:
        key, ranks, named = _without_rank(w)
        groups.setdefault(key if ranks else (key[0], str(w["scope"]), str(w["message"])), []).append((w, ranks, named))
    out: list[dict[str, Any]] = []
    for (_, scope, message), same in groups.items():
        ranks = set().union(*(r for _, r, _ in same))
        if len(same) == 1 or len(ranks) <= 1:
            out.extend(w for w, _, _ in same)
            continue
        where = f"ranks {compact_ranks(ranks)}"
        applies = list(dict.fromkeys(a for w, _, _ in same for a in w.get("applies_to") or []))
        out.append({"scope": where if scope == "rank" else scope, "kind": same[0][0]["kind"],
                    "message": f"{message} ({where})" if any(named for _, _, named in same) else message,
                    "applies_to": applies})
    return out


def _ranks(trace: "TraceOverview", safe: Mapping[int, Mapping[str, Any]], inputs: "ReportInputs",
           summ: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per rank: its input file, GPUs and events, then the figures each analysis declares
    for it (``AnalysisSpec.rank_summary``)."""
    per_spec = [spec.rank_summary(inputs) for spec in analysis_specs()
                if spec.rank_summary is not None and spec.name in inputs.results]
    out = []
    dirs = input_dirs(info.source_path for info in trace.ranks.values())
    for rank in trace.rank_ids:
        info = safe[rank]
        s = summ.get(rank, {})
        listed = {int(d["id"]): d for d in info.get("devices") or []}
        entry: dict[str, Any] = {
            "rank": int(rank),
            "file": Path(str(info.get("source_path") or "")).name,
            "format": info.get("source_format"),
            "format_version": info.get("format_version") or None,
            "rank_source": info.get("rank_source") or None,
            "world_size": info.get("world_size"),
            "gpus": [{"device": int(d), "model": device_properties(listed, int(d))[0].get("name") or None}
                     for d in s.get("devices", [])],
            "events": int(s.get("events", 0)),
            "events_by_kind": dict(s.get("by_kind", {})),
            "span_ns": int(s.get("span_ns", 0)),
            "event_counts": dict(info.get("event_counts") or {}),
            "activity_dropped": dict(info.get("activity_dropped") or {}),
            "unmapped": dict(info.get("unmapped") or {}),
            "warnings": [without_input_dirs(str(w), dirs) for w in info.get("warnings") or []],
        }
        for figures in per_spec:
            entry.update(figures.get(int(rank), {}))
        out.append(entry)
    return out


# ------------------------------------------------------------------------------------ the report


@dataclass
class TraceOverview:
    """What the report says about its inputs: each rank's metadata and summary (``Trace.summary()``
    of that rank) and the warnings of loading. Built from a loaded trace, or by a job from its
    per-rank results (no events needed)."""

    ranks: dict[int, RankInfo]
    summaries: dict[int, dict[str, Any]]
    warnings: list[str] = field(default_factory=list)

    @property
    def rank_ids(self) -> list[int]:
        return sorted(self.ranks)

    @property
    def num_events(self) -> int:
        return int(sum(int(s.get("events", 0)) for s in self.summaries.values()))

    def summary(self) -> dict[int, dict[str, Any]]:
        return self.summaries


class Report(Mapping[str, Any]):
    """The one answer every front end shows: the JSON-able report model (``report["summary"]``,
    ``report["findings"]``, ...: docs/reports.md) with the analyses' tables as DataFrames.

    In a notebook: ``report.findings`` (a DataFrame, one row per finding, in rank order, ``id`` as
    everywhere else), ``report.table("kernels", "kernels")``, ``report.tables("idle_gaps")``,
    ``report.to_json()``. ``report.trace`` is the analysed trace when it was analysed in this process.
    Tables are whole in memory and cut to the rows any figure needs when computed by a job.
    """

    def __init__(self, data: dict[str, Any], results: Mapping[str, AnalysisResult], trace: Trace | None = None) -> None:
        self.data = data
        self.results = dict(results)
        self.trace = trace

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        s = self.data.get("summary", {})
        return (f"<Report {s.get('num_ranks', 0)} rank(s), {s.get('gpus', 0)} GPU(s), {s.get('steps', 0)} step(s), "
                f"{len(self.data.get('findings', []))} finding(s)>")

    @property
    def summary(self) -> dict[str, Any]:
        return self.data["summary"]

    @property
    def findings(self) -> pd.DataFrame:
        """One row per finding (top-level and nested), in rank order, numbered as in every format."""
        rows = self.data.get("findings", [])
        columns = ["id", "parent", "severity", "code", "title", "analysis", "cost_ns_per_step", "cost_share", "rank",
                   "step", "part_of", "recommendation", "evidence"]
        frame = pd.DataFrame(rows)
        return frame.reindex(columns=columns + [c for c in frame.columns if c not in columns])

    def table(self, analysis: str, name: str) -> pd.DataFrame:
        """One of an analysis's tables (an empty DataFrame when it has none of that name)."""
        result = self.results.get(analysis)
        if result is None or name not in result.tables:
            return pd.DataFrame()
        return result.tables[name]

    def tables(self, analysis: str) -> dict[str, pd.DataFrame]:
        result = self.results.get(analysis)
        return dict(result.tables) if result is not None else {}

    def to_dict(self) -> dict[str, Any]:
        return self.data

    def to_json(self, *, indent: int | None = 1) -> str:
        return report_to_json(self.data, indent=indent)


def build_report(overview: TraceOverview, results: Mapping[str, AnalysisResult], *, options: Options | None = None,
                 max_table_rows: int = MAX_TABLE_ROWS, table_rows: Mapping[tuple[str, str], int] | None = None,
                 execution: Mapping[str, Any] | None = None, trace: Trace | None = None) -> Report:
    """The report for ``results`` (from :func:`traceview.pipeline.reduce_ranks`) of the inputs
    ``overview``. ``table_rows``: each table's true row count when the tables were cut (a job);
    ``execution``: how the analyses ran (executor, workers, timings).

    Keys: ``schema_version``, ``generator``, ``inputs``, ``options``, ``execution``, ``summary``,
    ``environment``, ``findings``, ``findings_summary``, ``warnings``, ``ranks``, ``analyses`` (per
    analysis: its title, warnings, and its tables as bounded record lists) and ``charts`` (the bounded
    data the figures draw). See docs/reports.md. Everything is scrubbed of secrets.
    """
    import traceview.analyses  # noqa: F401  (registers every analysis, whose hooks the report asks)
    from traceview.parsers import register_all

    register_all()  # the input formats, which say what their files imply (vendor, producer)

    options = options or Options()
    table_rows = table_rows or {}
    safe_ranks = scrub_metadata(overview.ranks)
    used = {rank: s.get("devices", []) for rank, s in overview.summaries.items()}
    env = environment(safe_ranks, used)
    inputs = ReportInputs(results, table_rows, overview.rank_ids)
    findings = job_findings([f for r in results.values() for f in r.findings], len(overview.ranks), inputs)
    claims_table: dict[str, Any] | None = {} if options.claims == "all" else None
    denom = denominator(inputs)
    finding_records, finding_stats = _finding_records(findings, denom, claims_table)
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "generator": {"name": "traceview", "version": traceview.__version__},
        "inputs": [
            {"file": Path(str(safe_ranks[r].get("source_path") or "")).name, "rank": int(r),
             "format": safe_ranks[r].get("source_format"),
             "format_version": safe_ranks[r].get("format_version") or None}
            for r in overview.rank_ids
        ],
        "options": {"step_marker": options.step_marker, "top_n": options.top_n, "min_gap_ns": options.min_gap_ns,
                    "ranks": list(options.ranks) if options.ranks is not None else None,
                    "comm_patterns": list(options.comm_patterns), "claims": options.claims},
        "execution": dict(execution or {}),
        "summary": summary(overview, inputs, env),
        "environment": env,
        "findings": finding_records,
        "findings_summary": finding_stats,
        "warnings": _warnings(overview, results),
        "ranks": _ranks(overview, safe_ranks, inputs, overview.summaries),
        "analyses": _analysis_sections(results, findings, table_rows, max_table_rows, denom.per_step),
        # each chart from the analysis that declares it (``AnalysisSpec.charts``), in display order
        "charts": {name: build(inputs) for spec in analysis_specs() if spec.name in results
                   for name, build in spec.charts},
    }
    report["summary"]["findings"] = finding_stats
    # the analyses' table rows are plain already (table_records): walk only the rest again
    data = scrub({k: v if k == "analyses" else plain(v, k) for k, v in report.items()})
    if claims_table is not None:  # ids and int64 times only (nothing to scrub): plain ints already
        data["claims"] = claims_table
    return Report(data, results, trace)


def _analysis_sections(results: Mapping[str, AnalysisResult], findings: list[Finding],
                       table_rows: Mapping[tuple[str, str], int], max_rows: int, per_step: bool = True
                       ) -> dict[str, Any]:
    """Per analysis: its title, warnings, number of (job-level) findings, and its tables cut to
    ``max_rows`` rows (the largest by the table's declared sort key) with their titles (those of a
    report without steps, ``per_step`` False, where a table declares one)."""
    out: dict[str, Any] = {}
    for name, result in results.items():
        spec = ANALYSES.get(name)
        tables = {}
        for tname, df in result.tables.items():
            tspec = spec.table(tname) if spec is not None else None
            t = table_columns(df, max_rows=max_rows, sort_by=tspec.sort_by if tspec else None,
                              total_rows=table_rows.get((name, tname)))
            t["title"] = tspec.title_for(per_step) if tspec else tname.replace("_", " ")
            tables[tname] = t
        head = plain({"title": spec.title if spec else name, "warnings": list(result.warnings),
                      "findings": sum(1 for f in findings if f.analysis == name)})
        # each table's rows went through plain() in table_records; the rest of it goes through it here
        out[str(name)] = {**head, "tables": {str(t): {k: v if k == "rows" else plain(v, k) for k, v in table.items()}
                                             for t, table in tables.items()}}
    return out


def report_to_json(report: Mapping[str, Any], *, indent: int | None = 1) -> str:
    """The report as JSON text (UTF-8, no NaN)."""
    if isinstance(report, Report):
        report = report.data
    return json.dumps(report, indent=indent, ensure_ascii=False, allow_nan=False)


def findings_tree(report: Mapping[str, Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The report's findings as (top-level finding, nested findings) pairs, in rank order."""
    out: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    index: dict[str, list[dict[str, Any]]] = {}
    for f in report.get("findings", []):
        if f.get("parent") is None:
            kids: list[dict[str, Any]] = []
            index[f["id"]] = kids
            out.append((f, kids))
        else:
            index.setdefault(f["parent"], []).append(f)
    return out
