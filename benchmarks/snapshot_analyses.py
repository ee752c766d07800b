#!/usr/bin/env python3
"""Save every analysis's output on some traces, then check a later version gives the same.

    python benchmarks/snapshot_analyses.py save DIR TRACE [TRACE ...]
    python benchmarks/snapshot_analyses.py compare DIR TRACE [TRACE ...]

For a speed change that must not change a figure: ``save`` before the change, ``compare`` after.
Each trace is loaded (without the cache) and ``run_all`` runs on it; every table is written as
Parquet (``DIR/<trace>/<analysis>.<table>.parquet``) and the findings (with their claimed
intervals), warnings and the tables' dtypes and indexes as one JSON file per trace. ``compare``
reads them back and reports every table, dtype, finding or warning that differs (exit 1), or
"identical" (exit 0).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import traceview
from traceview.analyses import run_all
from traceview.findings import AnalysisResult, Options


def _slug(path: Path) -> str:
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    return f"{path.name}-{digest}"


def _claims_json(finding: Any) -> Any:
    c = finding.claims
    if c is None:
        return None
    return [c.key.tolist(), c.start_ns.tolist(), c.end_ns.tolist()]


def _describe(results: dict[str, AnalysisResult]) -> dict[str, Any]:
    """Everything but the table contents, as JSON-able values."""
    out: dict[str, Any] = {}
    for name, res in results.items():
        out[name] = {
            "findings": [{**f.to_dict(), "claims": _claims_json(f)} for f in res.findings],
            "warnings": list(res.warnings),
            "tables": {t: {"dtypes": {str(c): str(d) for c, d in df.dtypes.items()},
                           "index": [str(df.index.dtype), len(df.index), str(type(df.index).__name__)],
                           "columns": [str(c) for c in df.columns]}
                       for t, df in res.tables.items()},
        }
    return json.loads(json.dumps(out, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return repr(value)


def _run(path: Path) -> dict[str, AnalysisResult]:
    trace = traceview.load(path, use_cache=False)
    return run_all(trace, Options())


def save(folder: Path, traces: list[Path]) -> int:
    for path in traces:
        results = _run(path)
        d = folder / _slug(path)
        d.mkdir(parents=True, exist_ok=True)
        for name, res in results.items():
            for t, df in res.tables.items():
                df.reset_index(drop=True).to_parquet(d / f"{name}.{t}.parquet")
        (d / "meta.json").write_text(json.dumps(_describe(results), indent=1, sort_keys=True))
        print(f"saved {path} -> {d}")
    return 0


def _diff_meta(old: Any, new: Any, where: str, out: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new)):
            if k not in old or k not in new:
                out.append(f"{where}/{k}: only in {'new' if k not in old else 'old'}")
            else:
                _diff_meta(old[k], new[k], f"{where}/{k}", out)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            _diff_meta(a, b, f"{where}[{i}]", out)
    elif old != new:
        out.append(f"{where}: {str(old)[:200]} != {str(new)[:200]}")


def compare(folder: Path, traces: list[Path]) -> int:
    problems: list[str] = []
    for path in traces:
        results = _run(path)
        d = folder / _slug(path)
        old_meta = json.loads((d / "meta.json").read_text())
        _diff_meta(old_meta, _describe(results), path.name, problems)
        for name, res in results.items():
            for t, df in res.tables.items():
                f = d / f"{name}.{t}.parquet"
                if not f.exists():
                    problems.append(f"{path.name}: {name}.{t}: new table")
                    continue
                old = pd.read_parquet(f)
                new = pd.read_parquet(_roundtrip(df.reset_index(drop=True)))
                try:
                    pd.testing.assert_frame_equal(old, new, check_exact=True)
                except AssertionError as e:
                    problems.append(f"{path.name}: {name}.{t}: {str(e)[:400]}")
        print(f"compared {path}")
    for p in problems:
        print("DIFF", p)
    print("identical" if not problems else f"{len(problems)} difference(s)")
    return 1 if problems else 0


def _roundtrip(df: pd.DataFrame) -> Any:
    """The table as Parquet bytes, so old and new are read back the same way."""
    import io

    buf = io.BytesIO()
    df.to_parquet(buf)
    buf.seek(0)
    return buf


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("save", "compare"))
    ap.add_argument("folder", type=Path)
    ap.add_argument("traces", type=Path, nargs="+")
    args = ap.parse_args(argv)
    return (save if args.mode == "save" else compare)(args.folder, args.traces)


if __name__ == "__main__":
    sys.exit(main())
