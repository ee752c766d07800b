"""The history database's schema, its versions and the migrations between them.

The schema version is kept in ``meta`` (key ``schema_version``). A database of an older version is
migrated in place when a command opens it (:func:`traceview.history.store.open_history`), one
version at a time, each step in its own transaction; opened read-only (the app) it is refused with
one line saying to run a ``traceview history`` command on it once. A database of a newer version
than this code knows is refused with one line.

Version 1 kept a run's tags only as a JSON text column of ``runs``. Version 2 adds the ``run_tags``
table (one row per run and tag), which ``--tag k=v`` filters use, filled from that column by the
v1 -> v2 migration; the JSON column stays (it is the tags as given, in order). Version 3 adds the
critical path's run figures to ``runs`` (the report summary's ``critical_path_step_ns``,
``achievable_step_ns``, ``critical_path_bound_by``, ``critical_path_bound_share``: docs/metrics.md);
runs stored before it have them null (their reports are not kept, so nothing can fill them).
Version 4 adds the ``layers`` table: per run its :data:`LAYERS_KEPT` largest module type paths (the
modules analysis's ``type_paths``, docs/metrics.md "Modules and ranges"), empty for the runs stored
before it and for runs without module ranges. Version 5 adds the ``measured`` table: per run its
:data:`MEASURED_KEPT` largest kernels measured by Nsight Compute (``--ncu``: the measured analysis's
``kernels`` table, docs/metrics.md "Measured efficiency") with their SOL compute and memory %, empty
for the runs stored before it and for runs analysed without ``--ncu``.
"""

from __future__ import annotations

import json
from typing import Any, Callable

#: the version this code writes and reads
SCHEMA_VERSION = 5
#: the columns of a run summary's ``series`` frame, in the database's order
SERIES_COLUMNS = ("kind", "key", "calls", "calls_per_step", "total_ns", "per_step_ns", "mean_ns", "median_ns",
                  "p90_ns", "spread_ns")
#: the run-level figures of ``runs`` (per GPU and step where the name says so)
RUN_FIGURES = ("ranks", "gpus", "steps", "step_time_ns", "step_p90_ns", "step_spread_ns", "window_ns_per_step",
               "busy_ns_per_step", "idle_ns_per_step", "compute_ns_per_step", "communication_ns_per_step",
               "exposed_comm_ns_per_step", "utilization", "critical_path_step_ns", "achievable_step_ns",
               "critical_path_bound_share")
#: how many type paths a run keeps in ``layers`` (its largest by inclusive GPU time)
LAYERS_KEPT = 20
#: the columns of a run summary's ``layers`` frame, in the database's order
LAYER_COLUMNS = ("position", "type_path", "depth", "instances", "inclusive_ns", "per_step_ns", "share")
#: how many measured kernels a run keeps in ``measured`` (its largest by trace time)
MEASURED_KEPT = 20
#: the columns of a run summary's ``measured`` frame, in the database's order
MEASURED_COLUMNS = ("position", "kernel", "grid", "block", "kernels", "trace_ns", "sm_throughput_pct",
                    "memory_throughput_pct", "bound_by")
#: the run-level text figures of ``runs`` (version 3)
RUN_TEXT = ("critical_path_bound_by",)

#: the tables of version 1 (kept verbatim: the migration test builds a version-1 database from it)
SCHEMA_V1 = """
CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE runs (
    run_id INTEGER PRIMARY KEY,        -- 1, 2, ... in the order runs were added
    name VARCHAR NOT NULL,
    added_at TIMESTAMP NOT NULL,       -- UTC
    identity VARCHAR NOT NULL UNIQUE,  -- the trace files' content identity (refuses a second add)
    gpu_model VARCHAR,                 -- '' when the traces name none
    traceview_version VARCHAR,
    paths VARCHAR,                     -- JSON list of the paths given
    tags VARCHAR,                      -- JSON object of --tag key=value, in the order given
    ranks INTEGER, gpus INTEGER, steps INTEGER,
    step_time_ns DOUBLE, step_p90_ns DOUBLE, step_spread_ns DOUBLE,
    window_ns_per_step DOUBLE, busy_ns_per_step DOUBLE, idle_ns_per_step DOUBLE,
    compute_ns_per_step DOUBLE, communication_ns_per_step DOUBLE, exposed_comm_ns_per_step DOUBLE,
    utilization DOUBLE
);
CREATE TABLE series_names (
    series_id INTEGER PRIMARY KEY,
    kind VARCHAR NOT NULL,             -- step, kernel, collective
    key VARCHAR NOT NULL,              -- normalised kernel name, collective name, 'step_time'
    UNIQUE (kind, key)
);
CREATE TABLE series (
    run_id INTEGER NOT NULL,
    series_id INTEGER NOT NULL,
    -- whole ns as integers: DuckDB packs them in a few bytes each (doubles of noisy timings do not
    -- compress); the per-step figures are means and quantiles, rounded to the ns
    calls BIGINT,                      -- launches (steps for the step series) in the whole trace
    calls_per_step REAL,               -- per GPU and step
    total_ns BIGINT,                   -- whole trace, all GPUs
    per_step_ns BIGINT,                -- per GPU and step (mean over the steps)
    mean_ns BIGINT,                    -- per call
    median_ns BIGINT, p90_ns BIGINT,   -- of the per-step samples (per GPU)
    spread_ns BIGINT                   -- median absolute deviation of the per-step samples
);
CREATE TABLE raw_names (
    series_id INTEGER NOT NULL,
    name VARCHAR NOT NULL,
    first_run INTEGER, last_run INTEGER,
    UNIQUE (series_id, name)
);
CREATE TABLE findings (
    run_id INTEGER NOT NULL, code VARCHAR, rank INTEGER, severity VARCHAR,
    cost_ns_per_step BIGINT, title VARCHAR
);
CREATE TABLE efficiency (
    run_id INTEGER NOT NULL, rank INTEGER, device INTEGER, name VARCHAR, dtype VARCHAR, unit VARCHAR,
    calls BIGINT, gpu_ns BIGINT, efficiency DOUBLE, achieved_tflops DOUBLE
);
INSERT INTO meta VALUES ('schema_version', '1');
"""

#: what version 2 adds to version 1
V2_ADDITIONS = """
CREATE TABLE run_tags (run_id INTEGER NOT NULL, key VARCHAR NOT NULL, value VARCHAR);
"""


#: what version 3 adds to version 2: the critical path's figures of each run (the report summary's)
V3_ADDITIONS = """
ALTER TABLE runs ADD COLUMN critical_path_step_ns DOUBLE;   -- median step's critical path (= the step)
ALTER TABLE runs ADD COLUMN achievable_step_ns DOUBLE;      -- median over steps of the achievable step
ALTER TABLE runs ADD COLUMN critical_path_bound_by VARCHAR; -- host, gpu or communication
ALTER TABLE runs ADD COLUMN critical_path_bound_share DOUBLE;
"""


#: what version 4 adds to version 3: each run's largest module type paths (layers)
V4_ADDITIONS = """
CREATE TABLE layers (
    run_id INTEGER NOT NULL,
    position INTEGER NOT NULL,         -- 1 = the run's largest type path
    type_path VARCHAR NOT NULL,        -- module names from the root, indices dropped (Model/Layer/Attention)
    depth INTEGER,                     -- 0 at the top
    instances BIGINT,                  -- ranges of that type path, all ranks
    inclusive_ns BIGINT,               -- inclusive GPU time, whole trace, all ranks
    per_step_ns BIGINT,                -- the same per GPU and step
    share DOUBLE                       -- of the GPU busy time of all ranks
);
"""


#: what version 5 adds to version 4: each run's largest kernels measured by Nsight Compute
V5_ADDITIONS = """
CREATE TABLE measured (
    run_id INTEGER NOT NULL,
    position INTEGER NOT NULL,         -- 1 = the run's measured kernel with the most trace time
    kernel VARCHAR NOT NULL,           -- normalised name (traceview.compare.normalize_kernel_name)
    grid VARCHAR, block VARCHAR,       -- ncu's launch configuration, '(x, y, z)'
    kernels BIGINT,                    -- trace kernels of that name and configuration measured, all ranks
    trace_ns BIGINT,                   -- their GPU time in the trace, whole trace, all ranks
    sm_throughput_pct DOUBLE,          -- SOL compute: ncu's SM throughput, % of peak
    memory_throughput_pct DOUBLE,      -- SOL memory: ncu's memory throughput, % of peak
    bound_by VARCHAR                   -- compute, memory, latency (unknown)
);
"""


def _migrate_1_to_2(con: Any) -> None:
    """v1 -> v2: the ``run_tags`` table, filled from each run's JSON tags."""
    con.execute(V2_ADDITIONS)
    rows = con.execute("SELECT run_id, tags FROM runs").fetchall()
    pairs = [(run_id, str(k), str(v)) for run_id, text in rows for k, v in json.loads(text or "{}").items()]
    if pairs:
        con.executemany("INSERT INTO run_tags VALUES (?, ?, ?)", pairs)


def _migrate_2_to_3(con: Any) -> None:
    """v2 -> v3: the critical-path columns of ``runs`` (null for the runs stored before)."""
    con.execute(V3_ADDITIONS)


def _migrate_3_to_4(con: Any) -> None:
    """v3 -> v4: the ``layers`` table (no rows for the runs stored before)."""
    con.execute(V4_ADDITIONS)


def _migrate_4_to_5(con: Any) -> None:
    """v4 -> v5: the ``measured`` table (no rows for the runs stored before)."""
    con.execute(V5_ADDITIONS)


#: from-version -> the function that brings a database to the next version (inside a transaction)
MIGRATIONS: dict[int, Callable[[Any], None]] = {1: _migrate_1_to_2, 2: _migrate_2_to_3, 3: _migrate_3_to_4,
                                                 4: _migrate_4_to_5}


def create(con: Any) -> None:
    """Create the current schema in an empty database."""
    con.execute("BEGIN TRANSACTION")
    con.execute(SCHEMA_V1)
    for version in range(1, SCHEMA_VERSION):
        MIGRATIONS[version](con)
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])
    con.execute("COMMIT")


def first_row(con: Any, sql: str, params: list[Any] | None = None) -> Any:
    """The first row of a query (None when it has none), the result read whole: DuckDB 2 refuses
    other work on a connection whose last result was not read to the end."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0] if rows else None


def version_of(con: Any) -> int | None:
    """The schema version of the database (None when it has no ``meta`` table: empty or foreign)."""
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "meta" not in tables:
        return None if not tables else -1
    row = first_row(con, "SELECT value FROM meta WHERE key = 'schema_version'")
    return int(row[0]) if row and str(row[0]).isdigit() else -1


def migrate(con: Any, from_version: int) -> None:
    """Bring a database of ``from_version`` to :data:`SCHEMA_VERSION`, one step at a time, each step
    in its own transaction (a failed step leaves the database at the previous version)."""
    for version in range(from_version, SCHEMA_VERSION):
        con.execute("BEGIN TRANSACTION")
        MIGRATIONS[version](con)
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(version + 1)])
        con.execute("COMMIT")
