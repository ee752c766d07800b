#!/usr/bin/env python3
"""Nsight Systems parser benchmark: rows per second and peak RSS of ``parse_nsys`` on a big export.

    python benchmarks/bench_nsys.py                      # 400 copies of kernels + runtime calls
    python benchmarks/bench_nsys.py --copies 50          # quick check
    python benchmarks/bench_nsys.py --tables all         # replicate memcpy/memset/sync/NVTX too

The synthetic export is the real ``torchrun_2xh100_nccl_2026.2.sqlite`` (from ``../shared/traces``)
copied into ``benchmarks/out/`` with the rows of the chosen activity tables replicated N times by
``INSERT ... SELECT``: each copy is shifted in time by the span of the original (plus 1 ms) and its
``correlationId`` by the largest id + 1, so launches still join to their kernels within a process and
copies never overlap. Each parse runs in a fresh process (median of 3), which reports its own wall
time, CPU time and peak RSS (``VmHWM``); the file is read once first so it is in the page cache.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _measure import ChildError, Series, fmt_rate, machine_line, mb, run_child, table  # noqa: E402

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

CHILD = """
from traceview.parsers.nsys import parse_nsys
with _Timer() as t:
    trace = parse_nsys({path!r})
_report(t, rows=trace.events.num_rows, links=trace.links.num_rows)
"""

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


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument("--copies", type=int, default=400, help="extra copies of each replicated row (default 400)")
    ap.add_argument("--tables", default="kernel,runtime",
                    help="comma list of " + ", ".join(TABLES) + ", or 'all' (default kernel,runtime)")
    ap.add_argument("--out-dir", type=Path, default=HERE / "out")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--python", default=sys.executable, help="Python with traceview installed")
    ap.add_argument("--wait", type=float, default=0.0,
                    help="seconds to keep retrying while parse_nsys is not importable (default 0)")
    ap.add_argument("--json", type=Path, help="also write the results here as JSON")
    args = ap.parse_args(argv)

    print(f"machine: {machine_line()}; {time.strftime('%Y-%m-%d %H:%M')}")
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
    series = Series("parse_nsys")
    for i in range(args.runs):
        try:
            r = run_child(args.python, CHILD.format(path=str(path)), timeout=3 * 3600)
        except ChildError as exc:
            print(f"parse_nsys failed: {exc}")
            return 1
        series.runs.append(r)
        print(f"  run {i + 1}/{args.runs}: {r['seconds']:.2f} s, cpu {r['cpu_seconds']:.2f} s, "
              f"peak RSS {mb(r['peak_rss']):.0f} MB", flush=True)
    file_bytes = path.stat().st_size
    s = series
    print()
    print(f"export: {path} — {mb(file_bytes):.0f} MB, {total_rows:,} activity/NVTX rows")
    print(table(["parser", "runs", "median s", "range s", "rows/s", "events out/s", "cores", "peak RSS MB",
                 "RSS/file"],
                [["traceview parse_nsys", len(s.runs), f"{s.median_s:.2f}", s.spread(),
                  fmt_rate(total_rows / s.median_s), fmt_rate(s.runs[0]["rows"] / s.median_s), f"{s.cores:.2f}",
                  f"{mb(s.peak_rss):.0f}", f"{s.peak_rss / file_bytes:.2f}"]]))
    print(f"events out: {s.runs[0]['rows']:,}; links: {s.runs[0]['links']:,}; "
          f"RSS before the parse (interpreter + imports): {mb(s.runs[0]['rss_before']):.0f} MB")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "machine": machine_line(),
                                         "export": str(path), "file_bytes": file_bytes, "rows": rows,
                                         "runs": s.runs, "median_s": s.median_s, "peak_rss": s.peak_rss},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
