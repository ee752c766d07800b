"""The history database (DuckDB): open (create or migrate), add a run, read runs and series.

One file holds every run (``.traceview/history.duckdb`` by default). Storage is aggregates only:
one ``runs`` row per run, one ``series`` row per run and kernel / collective / step series (numbers
only: names live once in ``series_names``, raw names once per name in ``raw_names``), so 10,000 runs
of 5,000 kernels are 50 million narrow rows that DuckDB stores column-compressed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from traceview.errors import TraceviewError
from traceview.history import schema
from traceview.history.schema import RUN_FIGURES, RUN_TEXT, SERIES_COLUMNS

if TYPE_CHECKING:  # summary imports traceview.compare: show and check never need it
    from traceview.history.summary import RunSummary

#: the default database, relative to the working directory
DEFAULT_DB = Path(".traceview") / "history.duckdb"
#: the ``runs`` columns read back for listing and filtering
RUN_COLUMNS = ("run_id", "name", "added_at", "identity", "gpu_model", "traceview_version", "paths", "tags",
               *RUN_FIGURES, *RUN_TEXT)


class DuplicateRunError(TraceviewError):
    """The same trace files are already in the history."""


def open_history(path: Path, *, read_only: bool = False, create: bool = True) -> Any:
    """A DuckDB connection to the history at ``path``: created when absent (and ``create``), migrated
    to the current schema when older. One line (exit 2) for a file that is not a history, one of a
    newer version, or one that cannot be opened."""
    import duckdb

    if not path.exists():
        if not create or read_only:
            raise TraceviewError(f"{path}: no history database here; add a run first (traceview history add "
                                 "PATH --db FILE)")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TraceviewError(f"{path}: cannot create its folder ({exc.strerror or exc})") from None
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except (duckdb.Error, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TraceviewError(f"{path}: cannot open the history database ({first}); is it a DuckDB file, and is "
                             "another process writing it?") from None
    version = schema.version_of(con)
    if version is None:
        schema.create(con)
    elif version == -1:
        con.close()
        raise TraceviewError(f"{path}: is a DuckDB file but not a traceview history; give another --db")
    elif version > schema.SCHEMA_VERSION:
        con.close()
        raise TraceviewError(f"{path}: history schema version {version} is newer than this traceview knows "
                             f"({schema.SCHEMA_VERSION}); upgrade traceview")
    elif version < schema.SCHEMA_VERSION:
        if read_only:
            con.close()
            raise TraceviewError(f"{path}: history schema version {version} needs a migration; run any "
                                 "`traceview history` command on it once")
        schema.migrate(con, version)
    return con


def _series_ids(con: Any, keys: pd.DataFrame) -> np.ndarray:
    """The ``series_id`` of each (kind, key) row of ``keys``, adding the names not yet known."""
    con.register("tv_new_keys", pa.Table.from_pandas(keys[["kind", "key"]].drop_duplicates(), preserve_index=False))
    try:
        con.execute("""
            INSERT INTO series_names
            SELECT (SELECT coalesce(max(series_id), 0) FROM series_names) + row_number() OVER (), n.kind, n.key
            FROM tv_new_keys n ANTI JOIN series_names s ON s.kind = n.kind AND s.key = n.key""")
        known = con.execute("""SELECT s.kind, s.key, s.series_id FROM series_names s
                               SEMI JOIN tv_new_keys n ON s.kind = n.kind AND s.key = n.key""").df()
    finally:
        con.unregister("tv_new_keys")
    index = pd.MultiIndex.from_frame(known[["kind", "key"]])
    return known["series_id"].to_numpy()[index.get_indexer(pd.MultiIndex.from_frame(keys[["kind", "key"]]))]


def _insert_frame(con: Any, table: str, frame: pd.DataFrame) -> None:
    if frame.empty:
        return
    con.register("tv_rows", pa.Table.from_pandas(frame, preserve_index=False))
    try:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM tv_rows")
    finally:
        con.unregister("tv_rows")


def add_runs(con: Any, summaries: Sequence[RunSummary]) -> list[int]:
    """Store ``summaries`` (in order) as new runs in one transaction; their run ids. A summary whose
    trace files are already stored (same identity) refuses the whole batch (:class:`DuplicateRunError`)."""
    identities = [s.identity for s in summaries]
    if len(set(identities)) != len(identities):
        raise DuplicateRunError("the same trace files are given twice")
    con.register("tv_ids", pd.DataFrame({"identity": identities}))
    try:
        dup = schema.first_row(con, "SELECT r.run_id, r.name FROM runs r SEMI JOIN tv_ids i USING (identity)")
    finally:
        con.unregister("tv_ids")
    if dup is not None:
        raise DuplicateRunError(f"these trace files are already in the history as run {dup[0]} ({dup[1]}); "
                                "nothing added")
    con.execute("BEGIN TRANSACTION")
    try:
        first = int(schema.first_row(con, "SELECT coalesce(max(run_id), 0) + 1 FROM runs")[0])
        ids = list(range(first, first + len(summaries)))
        _insert_frame(con, "runs", _runs_frame(summaries, ids))
        tags = [(rid, k, v) for rid, s in zip(ids, summaries) for k, v in s.tags.items()]
        _insert_frame(con, "run_tags", pd.DataFrame(tags, columns=["run_id", "key", "value"]))
        _insert_children(con, summaries, ids)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return ids


def _runs_frame(summaries: Sequence[RunSummary], ids: list[int]) -> pd.DataFrame:
    rows = [{"run_id": rid, "name": s.name, "added_at": s.added_at, "identity": s.identity, "gpu_model": s.gpu_model,
             "traceview_version": s.traceview_version, "paths": json.dumps(s.paths), "tags": json.dumps(s.tags),
             **{k: s.figures.get(k) for k in (*RUN_FIGURES, *RUN_TEXT)}} for rid, s in zip(ids, summaries)]
    frame = pd.DataFrame(rows)
    for column in ("ranks", "gpus", "steps"):
        frame[column] = frame[column].astype("Int32")
    for column in RUN_FIGURES[3:]:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(np.float64)
    for column in RUN_TEXT:
        frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame


def _insert_children(con: Any, summaries: Sequence[RunSummary], ids: list[int]) -> None:
    """The series, raw names, findings and efficiency rows of new runs, in one insert per table."""
    series = pd.concat([s.series.assign(run_id=rid) for rid, s in zip(ids, summaries) if len(s.series)],
                       ignore_index=True) if any(len(s.series) for s in summaries) else None
    if series is not None:
        series = series.assign(series_id=_series_ids(con, series))
        numeric = {c: pd.to_numeric(series[c], errors="coerce").astype(np.float64) for c in SERIES_COLUMNS[2:]}
        frame = pd.DataFrame({"run_id": series["run_id"].astype(np.int32),
                              "series_id": series["series_id"].astype(np.int32), **numeric})
        for column in ("calls", "total_ns", "per_step_ns", "mean_ns", "median_ns", "p90_ns", "spread_ns"):
            frame[column] = frame[column].round().astype("Int64")
        frame["calls_per_step"] = frame["calls_per_step"].astype(np.float32)
        _insert_frame(con, "series", frame)
    raws = [s.raw_names.assign(run_id=rid) for rid, s in zip(ids, summaries) if len(s.raw_names)]
    if raws:
        raw = pd.concat(raws, ignore_index=True)
        raw = raw.assign(series_id=_series_ids(con, raw)).groupby(["series_id", "name"], as_index=False).agg(
            first_run=("run_id", "min"), last_run=("run_id", "max"))
        con.register("tv_raw", raw)
        try:
            con.execute("""INSERT INTO raw_names SELECT series_id, name, first_run, last_run FROM tv_raw
                           ON CONFLICT (series_id, name) DO UPDATE SET last_run = excluded.last_run""")
        finally:
            con.unregister("tv_raw")
    for table, attr in (("findings", "findings"), ("efficiency", "efficiency"), ("layers", "layers"),
                        ("measured", "measured")):
        parts = [getattr(s, attr).assign(run_id=rid) for rid, s in zip(ids, summaries) if len(getattr(s, attr))]
        if parts:
            _insert_frame(con, table, pd.concat(parts, ignore_index=True))


@dataclass
class Selection:
    """Which runs a query looks at: tag filters, the GPU model, the last N."""

    tags: tuple[tuple[str, str], ...] = ()
    gpu_model: str | None = None  # None: any
    last: int | None = None


def runs(con: Any, selection: Selection | None = None) -> pd.DataFrame:
    """The selected runs, oldest first (columns :data:`RUN_COLUMNS`)."""
    selection = selection or Selection()
    where, params = [], []
    for key, value in selection.tags:
        where.append("run_id IN (SELECT run_id FROM run_tags WHERE key = ? AND value = ?)")
        params += [key, value]
    if selection.gpu_model is not None:
        where.append("gpu_model = ?")
        params.append(selection.gpu_model)
    sql = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY run_id DESC"
    if selection.last is not None:
        sql += f" LIMIT {int(selection.last)}"
    return con.execute(sql, params).df().iloc[::-1].reset_index(drop=True)


def series_names(con: Any, kind: str | None = None) -> pd.DataFrame:
    """Every series name (series_id, kind, key)."""
    if kind is None:
        return con.execute("SELECT series_id, kind, key FROM series_names ORDER BY series_id").df()
    return con.execute("SELECT series_id, kind, key FROM series_names WHERE kind = ? ORDER BY series_id",
                       [kind]).df()


def matrix(con: Any, run_ids: Sequence[int], column: str = "median_ns",
           series_ids: Sequence[int] | np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(runs x series matrix of ``column``, NaN where a run has no row; the series ids of its columns)
    for ``run_ids`` (rows in that order), read as Arrow columns and scattered with numpy."""
    if column not in SERIES_COLUMNS[2:]:
        raise ValueError(f"not a series column: {column}")
    con.register("tv_runs", pa.table({"run_id": pa.array(list(run_ids), pa.int32())}))
    try:
        sql = f"SELECT s.run_id, s.series_id, s.{column} AS v FROM series s SEMI JOIN tv_runs r USING (run_id)"
        if series_ids is not None:
            con.register("tv_sids", pa.table({"series_id": pa.array(list(series_ids), pa.int32())}))
            sql += " SEMI JOIN tv_sids i USING (series_id)"
        cols = con.execute(sql).fetchnumpy()
    finally:
        con.unregister("tv_runs")
        if series_ids is not None:
            con.unregister("tv_sids")
    run_index = pd.Index(np.asarray(run_ids))
    ids = np.asarray(series_ids) if series_ids is not None else np.unique(np.asarray(cols["series_id"]))
    out = np.full((len(run_ids), len(ids)), np.nan)
    rows = run_index.get_indexer(np.asarray(cols["run_id"]))
    columns = pd.Index(ids).get_indexer(np.asarray(cols["series_id"]))
    values = np.ma.filled(np.ma.asarray(cols["v"]).astype(np.float64), np.nan)
    ok = (rows >= 0) & (columns >= 0)
    out[rows[ok], columns[ok]] = values[ok]
    return out, ids


def raw_names(con: Any, series_ids: Sequence[int]) -> dict[int, list[str]]:
    """series id -> the raw names stored for it (sorted)."""
    if not len(series_ids):
        return {}
    con.register("tv_sids", pa.table({"series_id": pa.array(list(series_ids), pa.int32())}))
    try:
        frame = con.execute("SELECT series_id, name FROM raw_names SEMI JOIN tv_sids USING (series_id) "
                            "ORDER BY series_id, name").df()
    finally:
        con.unregister("tv_sids")
    return {int(k): list(g["name"]) for k, g in frame.groupby("series_id", sort=False)}


def layers(con: Any, run_ids: Sequence[int]) -> pd.DataFrame:
    """The stored layers of ``run_ids`` (run_id, position, type_path, depth, per_step_ns, share),
    by run and position."""
    con.register("tv_runs", pa.table({"run_id": pa.array(list(run_ids), pa.int32())}))
    try:
        return con.execute("SELECT run_id, position, type_path, depth, per_step_ns, share FROM layers "
                           "SEMI JOIN tv_runs USING (run_id) ORDER BY run_id, position").df()
    finally:
        con.unregister("tv_runs")


def measured(con: Any, run_ids: Sequence[int]) -> pd.DataFrame:
    """The stored measured kernels of ``run_ids`` (run_id, position, kernel, grid, block, trace_ns,
    sm_throughput_pct, memory_throughput_pct, bound_by), by run and position."""
    con.register("tv_runs", pa.table({"run_id": pa.array(list(run_ids), pa.int32())}))
    try:
        return con.execute("SELECT run_id, position, kernel, grid, block, trace_ns, sm_throughput_pct, "
                           "memory_throughput_pct, bound_by FROM measured SEMI JOIN tv_runs USING (run_id) "
                           "ORDER BY run_id, position").df()
    finally:
        con.unregister("tv_runs")
