#!/usr/bin/env python3
"""Nsight Systems parser benchmark: today's reader (ADBC straight into Arrow) against the reader
before issue 12 (``sqlite3`` row tuples), same export, same run: rows per second and peak RSS.

    python benchmarks/bench_nsys.py                      # 400 copies of kernels + runtime calls (~292 MB)
    python benchmarks/bench_nsys.py --copies 50          # quick check
    python benchmarks/bench_nsys.py --tables all         # replicate memcpy/memset/sync/NVTX too
    python benchmarks/bench_nsys.py --drivers            # also: raw fetch by ADBC, DuckDB, sqlite3
    python benchmarks/bench_nsys.py --drivers --duckdb-python /tmp/duck/bin/python

The synthetic export is the real ``torchrun_2xh100_nccl_2026.2.sqlite`` (from ``../shared/traces``)
copied into ``benchmarks/out/`` with the rows of the chosen activity tables replicated N times by
``INSERT ... SELECT``: each copy is shifted in time by the span of the original (plus 1 ms) and its
``correlationId`` by the largest id + 1, so launches still join to their kernels within a process and
copies never overlap. Each parse runs in a fresh process, the two readers alternating (median of
``--runs`` each, ``traceview.parsers.nsys.ROW_READER`` set in the child); each child reports its own
wall time, CPU time and peak RSS (``VmHWM``); the file is read once first so it is in the page
cache, and the load average is printed before and after. Targets (issue 12): the new reader >= 4x
faster than today's in the same run, and its peak RSS <= 2x the file. "Today's" is ``--baseline
FILE``, the whole parser before this change (``git show 283d365:parsers/nsys.py > FILE``), where
given; else the ``sqlite3`` mode of this tree, which shares the new assembly and join-free parts and
so flatters the old reader. ``--before FILE`` (repeatable) times an earlier version of this
tree's parser beside them, for before/after figures.

Each child also reports, after the timed parse, its RSS while holding the trace and after freeing
it (each once the C heap's free pages are handed back): their difference is what the trace keeps
resident, and with the RSS before the parse (interpreter and imports) it is the floor under any
reader's peak; the report prints both per reader, and how far the peak is above that floor.
MB in the output are 10^6 bytes.

``--drivers`` times the fetch alone (the kernel and runtime columns the parser reads, into Arrow, or
into row tuples for sqlite3), without imports or connection set-up, for the candidates issue 12
asked to compare: ADBC's SQLite driver and DuckDB's SQLite scanner (DuckDB cannot download its
``sqlite_scanner`` extension here: it is found in a pip package such as ``duckdb-ext-sqlite`` or
``duckdb-extension-sqlite-scanner`` installed beside a matching ``duckdb``, e.g. in a side
environment given by ``--duckdb-python``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _measure import ChildError, Series, check, fmt_rate, machine_line, mb, run_child, table  # noqa: E402

SOURCE = HERE.parent.parent / "shared" / "traces" / "nsys" / "torchrun_2xh100_nccl_2026.2.sqlite"
TABLES = {
    "kernel": "CUPTI_ACTIVITY_KIND_KERNEL",
    "runtime": "CUPTI_ACTIVITY_KIND_RUNTIME",
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "memset": "CUPTI_ACTIVITY_KIND_MEMSET",
    "sync": "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "nvtx": "NVTX_EVENTS",
}
GAP_NS = 1_000_000

#: after the timed parse (so neither time nor peak changes): the RSS while the trace is held and
#: after it is freed, each once the C heap's free pages are handed back (glibc's malloc_trim): the
#: difference is what the trace itself keeps resident, the floor under any reader's peak
HELD = """
import ctypes as _ctypes, gc as _gc
def _settled_rss():
    _gc.collect()
    _trim = getattr(_ctypes.CDLL(None), "malloc_trim", None)
    if _trim is not None:
        _trim(0)
    return _status_bytes("VmRSS")
_held = _settled_rss()
_rows, _links = trace.events.num_rows, trace.links.num_rows
del trace
_report(t, rows=_rows, links=_links, rss_holding=_held, rss_freed=_settled_rss())
"""
CHILD = """
import traceview.parsers.nsys as nsys
nsys.ROW_READER = {reader!r}
with _Timer() as t:
    trace = nsys.parse_nsys({path!r})
""" + HELD
#: ``--baseline FILE``: an older ``parsers/nsys.py`` (e.g. ``git show REV:parsers/nsys.py > FILE``),
#: imported from that file and timed as a third reader
BASELINE_CHILD = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("nsys_baseline", {baseline!r})
nsys = importlib.util.module_from_spec(spec)
sys.modules["nsys_baseline"] = nsys
spec.loader.exec_module(nsys)
with _Timer() as t:
    trace = nsys.parse_nsys({path!r})
""" + HELD
#: (label, ROW_READER): the reader before issue 12 first, then today's
READERS = (("old: sqlite3 tuples + join_on_keys", "sqlite3"), ("new: ADBC -> Arrow + packed-key join", "adbc"))
TARGET_SPEEDUP = 4.0
TARGET_RSS_PER_FILE = 2.0

#: fetch the columns the parser reads from the kernel and runtime tables, nothing else
DRIVER_CHILD = """
import glob, os, sys
path, queries, driver = {path!r}, {queries!r}, {driver!r}
if driver == "adbc":
    import adbc_driver_sqlite.dbapi as adbc
    con = adbc.connect("file:" + path + "?mode=ro")
    def run(sql):
        cur = con.cursor()
        cur.adbc_statement.set_options(**{{"adbc.sqlite.query.batch_rows": str(1 << 30)}})
        cur.execute(sql)
        n = cur.fetch_arrow_table().num_rows
        cur.close()
        return n
elif driver == "duckdb":
    import duckdb
    con = duckdb.connect(config={{"autoinstall_known_extensions": False, "autoload_known_extensions": False}})
    found = [f for p in sys.path if os.path.isdir(p) for f in glob.glob(
        os.path.join(p, "duckdb_ext*", "**", "sqlite_scanner.duckdb_extension"), recursive=True)]
    try:
        con.load_extension(found[0] if found else "sqlite_scanner")
    except Exception as exc:
        print("NO-EXTENSION", type(exc).__name__, str(exc).splitlines()[0][:160])
        raise SystemExit(4)
    con.execute("ATTACH '" + path.replace("'", "''") + "' AS n (TYPE sqlite, READ_ONLY)")
    def run(sql):
        return con.execute(sql.replace(' FROM "', ' FROM n."')).fetch_arrow_table().num_rows
else:
    import sqlite3
    con = sqlite3.connect("file:" + path + "?mode=ro", uri=True)
    def run(sql):
        cur, n = con.execute(sql), 0
        while True:
            batch = cur.fetchmany(1 << 18)
            if not batch:
                return n
            n += len(batch)
with _Timer() as t:
    rows = sum(run(q) for q in queries)
_report(t, rows=rows)
"""
DRIVER_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                   "demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY",
                                   "blockZ"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "eventClass", "globalTid", "correlationId", "nameId"],
}

IMPORT_CHECK = "import traceview.parsers.nsys as m; assert hasattr(m, 'parse_nsys'); print('ok')"


def _table_columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def event_rows(path: Path) -> dict[str, int]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return {t: con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in TABLES.values() if t in names}
    finally:
        con.close()


def build(source: Path, out: Path, copies: int, tables: list[str]) -> None:
    """Copy ``source`` to ``out`` and replicate the rows of ``tables`` ``copies`` more times."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.copyfile(source, tmp)
    os.chmod(tmp, os.stat(tmp).st_mode | stat.S_IWUSR)
    con = sqlite3.connect(tmp)
    try:
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        present = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        all_event = [t for t in TABLES.values() if t in present]
        # one time span and one id range for every table, so copies stay consistent across tables
        lo = min(con.execute(f'SELECT MIN(start) FROM "{t}"').fetchone()[0] or 0 for t in all_event)
        hi = max(con.execute(f'SELECT MAX(COALESCE("end", start)) FROM "{t}"').fetchone()[0] or 0
                 for t in all_event)
        span = hi - lo + GAP_NS
        max_corr = 0
        for t in all_event:
            if "correlationId" in _table_columns(con, t):
                max_corr = max(max_corr, con.execute(f'SELECT MAX(correlationId) FROM "{t}"').fetchone()[0] or 0)
        corr_step = max_corr + 1
        for t in tables:
            cols = _table_columns(con, t)
            con.execute(f'CREATE TEMP TABLE orig AS SELECT * FROM "{t}"')
            exprs = []
            for c in cols:
                if c in ("start", "end"):
                    exprs.append(f'"{c}" + :shift')
                elif c == "correlationId":
                    exprs.append('"correlationId" + :corr')
                else:
                    exprs.append(f'"{c}"')
            sql = (f'INSERT INTO "{t}" ({", ".join(chr(34) + c + chr(34) for c in cols)}) '
                   f'SELECT {", ".join(exprs)} FROM temp.orig')
            with con:
                for i in range(1, copies + 1):
                    con.execute(sql, {"shift": i * span, "corr": i * corr_step})
            con.execute("DROP TABLE temp.orig")
        con.commit()
    finally:
        con.close()
    os.replace(tmp, out)


def ensure_export(source: Path, out_dir: Path, copies: int, tables: list[str]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    short = "+".join(k for k, v in TABLES.items() if v in tables)
    out = out_dir / f"nsys_{source.stem}_x{copies + 1}_{short}.sqlite"
    side = out.with_name(out.name + ".meta.json")
    want = {"source": str(source), "source_bytes": source.stat().st_size, "copies": copies, "tables": tables,
            "script": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]}
    if out.exists() and side.exists():
        try:
            if json.loads(side.read_text()) == want:
                print(f"reusing {out}")
                return out
        except (OSError, ValueError):
            pass
    print(f"building {out} ({copies} extra copies of {short}) ...", flush=True)
    t0 = time.perf_counter()
    build(source, out, copies, tables)
    side.write_text(json.dumps(want, indent=1))
    print(f"  {mb(out.stat().st_size):.0f} MB in {time.perf_counter() - t0:.1f} s")
    return out


def wait_for_parser(python: str, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        proc = subprocess.run([python, "-c", IMPORT_CHECK], capture_output=True, text=True)
        if proc.returncode == 0:
            return True
        if time.monotonic() >= deadline:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            print(f"traceview.parsers.nsys.parse_nsys is not importable with {python}: {last}")
            return False
        print("  parse_nsys not importable yet; retrying in 30 s", flush=True)
        time.sleep(min(30.0, max(1.0, deadline - time.monotonic())))


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "?"


def driver_queries(path: Path) -> list[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out = []
        for t, wanted in DRIVER_COLUMNS.items():
            have = set(_table_columns(con, t))
            cols = [c for c in wanted if c in have]
            if cols:
                out.append("SELECT " + ", ".join(f'"{c}"' for c in cols) + f' FROM "{t}"')
        return out
    finally:
        con.close()


def compare_drivers(path: Path, args: argparse.Namespace) -> list[dict]:
    """Fetch alone, per driver: median of ``args.runs`` fresh processes each, alternating."""
    queries = driver_queries(path)
    candidates = [("ADBC SQLite driver -> Arrow", "adbc", args.python),
                  ("DuckDB SQLite scanner -> Arrow", "duckdb", args.duckdb_python or args.python),
                  ("sqlite3 row tuples", "sqlite3", args.python)]
    series = {label: Series(label) for label, _, _ in candidates}
    missing: dict[str, str] = {}
    for _ in range(args.runs):
        for label, driver, python in candidates:
            if label in missing:
                continue
            try:
                series[label].runs.append(run_child(python, DRIVER_CHILD.format(
                    path=str(path), queries=queries, driver=driver), timeout=3600))
            except ChildError as exc:
                missing[label] = str(exc).splitlines()[-1][:200]
    rows = []
    print(f"\nfetch alone (kernel + runtime columns the parser reads; imports and connection not timed), "
          f"load {loadavg()}:")
    for label, _, python in candidates:
        s = series[label]
        if not s.runs:
            print(f"  {label}: not measured ({missing.get(label, '?')}; python {python})")
            continue
        rows.append({"driver": label, "runs": s.runs, "median_s": s.median_s, "peak_rss": s.peak_rss})
        print(f"  {label}: median {s.median_s:.2f} s ({s.spread()}), cpu {s.median_cpu:.2f} s, "
              f"peak RSS {mb(s.peak_rss):.0f} MB, {fmt_rate(s.runs[0]['rows'] / s.median_s)} rows/s")
    return rows


def time_readers(path: Path, args: argparse.Namespace) -> list[Series] | None:
    """Both readers (and ``--baseline``, ``--before``), alternating, in fresh processes."""
    readers: list[tuple[str, str, Path | None]] = [(label, reader, None) for label, reader in READERS]
    if args.baseline:
        readers.append((f"baseline: {args.baseline.name}", "baseline", args.baseline))
    readers += [(f"before: {f.name}", "before", f) for f in args.before]
    series = [Series(label) for label, _, _ in readers]
    for i in range(args.runs):
        for s, (label, reader, parser_file) in zip(series, readers):
            before = loadavg()
            code = (CHILD.format(path=str(path), reader=reader) if parser_file is None else
                    BASELINE_CHILD.format(path=str(path), baseline=str(parser_file.resolve())))
            try:
                r = run_child(args.python, code, timeout=3 * 3600)
            except ChildError as exc:
                print(f"parse_nsys ({label}) failed: {exc}")
                return None
            r["loadavg_before"], r["loadavg_after"] = before, loadavg()
            s.runs.append(r)
            print(f"  run {i + 1}/{args.runs} {reader:>8}: {r['seconds']:.2f} s, cpu {r['cpu_seconds']:.2f} s, "
                  f"peak RSS {mb(r['peak_rss']):.0f} MB (load {before} -> {r['loadavg_after']})", flush=True)
    return series


def resident_floor(s: Series, file_bytes: int) -> str:
    """What the parsed trace keeps resident and what the interpreter held before the parse: no
    reader's peak can be below their sum (medians over the runs)."""
    held = statistics.median(r["rss_holding"] - r["rss_freed"] for r in s.runs)
    before = statistics.median(r["rss_before"] for r in s.runs)
    return (f"trace resident {mb(held):.0f} MB ({held / file_bytes:.2f}x the file) + interpreter and imports "
            f"before the parse {mb(before):.0f} MB = floor {mb(held + before):.0f} MB "
            f"({(held + before) / file_bytes:.2f}x); peak above the floor {mb(s.peak_rss - held - before):.0f} MB")


def report(series: list[Series], path: Path, total_rows: int) -> dict:
    file_bytes = path.stat().st_size
    old, new = series[:2]
    print()
    print(f"export: {path} — {mb(file_bytes):.0f} MB, {total_rows:,} activity/NVTX rows; load now {loadavg()}")
    print(table(["reader", "runs", "median s", "range s", "cpu s", "rows/s", "peak RSS MB", "RSS/file"],
                [[s.label, len(s.runs), f"{s.median_s:.2f}", s.spread(), f"{s.median_cpu:.2f}",
                  fmt_rate(total_rows / s.median_s), f"{mb(s.peak_rss):.0f}", f"{s.peak_rss / file_bytes:.2f}"]
                 for s in series]))
    # "today's" reader is the --baseline file where given (the parser before issue 12, whole); the
    # sqlite3 mode of this tree shares the new assembly, so it flatters the old reader
    today = next((s for s in series if s.label.startswith("baseline:")), old)
    speedup, cpu_speedup = today.median_s / new.median_s, today.median_cpu / new.median_cpu
    for other in series[:1] + series[2:]:
        print(f"new vs {other.label}: {other.median_s / new.median_s:.2f}x faster in wall time, "
              f"{other.median_cpu / new.median_cpu:.2f}x in CPU time")
    rss_ratio = new.peak_rss / file_bytes
    print(f"target: new >= {TARGET_SPEEDUP:g}x faster than today's reader ({today.label}): {speedup:.2f}x wall "
          f"({cpu_speedup:.2f}x CPU) — {check(speedup >= TARGET_SPEEDUP)}")
    print(f"target: new peak RSS <= {TARGET_RSS_PER_FILE:g}x the file: {rss_ratio:.2f}x ({mb(new.peak_rss):.0f} MB; "
          f"today's {today.peak_rss / file_bytes:.2f}x) — {check(rss_ratio <= TARGET_RSS_PER_FILE)}")
    same = old.runs[0]["rows"] == new.runs[0]["rows"] and old.runs[0]["links"] == new.runs[0]["links"]
    print(f"events out: {new.runs[0]['rows']:,}; links: {new.runs[0]['links']:,} (old reader: "
          f"{'the same' if same else 'DIFFERENT'}); RSS before the parse (interpreter + imports): "
          f"{mb(new.runs[0]['rss_before']):.0f} MB")
    for s in series:
        print(f"{s.label}: {resident_floor(s, file_bytes)}")
    return {"file_bytes": file_bytes, "today": today.label, "speedup_wall": speedup, "speedup_cpu": cpu_speedup,
            "rss_per_file": rss_ratio,
            "readers": [{"label": s.label, "runs": s.runs, "median_s": s.median_s, "median_cpu_s": s.median_cpu,
                         "peak_rss": s.peak_rss} for s in series]}


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument("--copies", type=int, default=400, help="extra copies of each replicated row (default 400)")
    ap.add_argument("--tables", default="kernel,runtime",
                    help="comma list of " + ", ".join(TABLES) + ", or 'all' (default kernel,runtime)")
    ap.add_argument("--out-dir", type=Path, default=HERE / "out")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--python", default=sys.executable, help="Python with traceview installed")
    ap.add_argument("--drivers", action="store_true", help="also time the fetch alone per driver")
    ap.add_argument("--baseline", type=Path, help="an older parsers/nsys.py to time as a third reader")
    ap.add_argument("--before", type=Path, action="append", default=[],
                    help="an earlier version of this tree's parsers/nsys.py, timed beside the others for "
                         "before/after figures (not the target's 'today'); repeatable")
    ap.add_argument("--duckdb-python", help="Python with duckdb and its sqlite extension (default --python)")
    ap.add_argument("--wait", type=float, default=0.0,
                    help="seconds to keep retrying while parse_nsys is not importable (default 0)")
    ap.add_argument("--json", type=Path, help="also write the results here as JSON")
    args = ap.parse_args(argv)

    print(f"machine: {machine_line()}; loadavg {loadavg()}; {time.strftime('%Y-%m-%d %H:%M')}")
    if not args.source.exists():
        print(f"source export not found: {args.source} (the shared traces folder is needed)")
        return 2
    keys = list(TABLES) if args.tables == "all" else [k.strip() for k in args.tables.split(",") if k.strip()]
    unknown = [k for k in keys if k not in TABLES]
    if unknown:
        ap.error(f"unknown table(s): {', '.join(unknown)}")
    if not wait_for_parser(args.python, args.wait):
        print("nsys benchmark NOT RUN: parse_nsys is not importable (not written yet, or wrong --python); "
              "--wait SECONDS keeps retrying")
        return 3
    path = ensure_export(args.source, args.out_dir, args.copies, [TABLES[k] for k in keys])
    rows = event_rows(path)
    total_rows = sum(rows.values())
    print("rows: " + ", ".join(f"{t.replace('CUPTI_ACTIVITY_KIND_', '')} {n:,}" for t, n in rows.items())
          + f"; {total_rows:,} in all")
    with open(path, "rb") as fh:
        while fh.read(16 << 20):
            pass
    series = time_readers(path, args)
    if series is None:
        return 1
    result = report(series, path, total_rows)
    if args.drivers:
        result["drivers"] = compare_drivers(path, args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "machine": machine_line(),
                                         "export": str(path), "rows": rows, **result}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
