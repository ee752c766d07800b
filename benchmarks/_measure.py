"""Shared helpers for the benchmarks: run one measurement in a fresh Python process and read back
its wall time, CPU time and peak RSS, then summarise and print tables.

Each measurement is a child process so that peak RSS belongs to one loader only: the child reads its
own ``VmHWM`` (high-water mark of resident memory) from ``/proc/self/status`` after the work, and its
own CPU time from ``getrusage(RUSAGE_SELF)``. The parent's ``RUSAGE_CHILDREN`` would give the maximum
over every child waited for so far, which is why it is not used.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Optional

MARKER = "@@BENCH_RESULT@@"

#: Code every child runs first: a timer around the measured call and a reader of /proc/self/status.
CHILD_PRELUDE = textwrap.dedent(
    f"""
    import json as _json, os as _os, resource as _resource, sys as _sys, time as _time

    def _status_bytes(key):
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith(key + ":"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None

    def _cpu():
        ru = _resource.getrusage(_resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime

    class _Timer:
        def __enter__(self):
            self.rss_before = _status_bytes("VmRSS")
            self.cpu0 = _cpu()
            self.t0 = _time.perf_counter()
            return self

        def __exit__(self, *exc):
            self.seconds = _time.perf_counter() - self.t0
            self.cpu_seconds = _cpu() - self.cpu0
            return False

    def _report(timer, **extra):
        peak = _status_bytes("VmHWM")
        if peak is None:  # not Linux: ru_maxrss is KiB on Linux, bytes on macOS
            peak = _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss
            peak *= 1 if _sys.platform == "darwin" else 1024
        out = dict(seconds=timer.seconds, cpu_seconds=timer.cpu_seconds, peak_rss=peak,
                   rss_before=timer.rss_before, threads=len(_os.listdir("/proc/self/task"))
                   if _os.path.isdir("/proc/self/task") else None)
        out.update(extra)
        print({MARKER!r} + _json.dumps(out), flush=True)
    """
)


class ChildError(RuntimeError):
    pass


def run_child(python: str, code: str, *, env: Optional[dict] = None, timeout: Optional[float] = None,
              cwd: Optional[str] = None) -> dict:
    """Run ``code`` (after the prelude) in a fresh ``python`` process; return the dict it reported."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.run([python, "-c", CHILD_PRELUDE + "\n" + textwrap.dedent(code)], capture_output=True,
                          text=True, env=full_env, timeout=timeout, cwd=cwd)
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
    raise ChildError(f"child exited with {proc.returncode} and reported nothing:\n{tail}")


def probe(python: str, module: str, dist: Optional[str] = None) -> Optional[str]:
    """Version of distribution ``dist`` (default: ``module``) when ``module`` imports in ``python``,
    else None."""
    if not python or not os.path.exists(python):
        return None
    code = (f"import importlib.metadata as m, {module}\n"
            f"try:\n    print(m.version({dist or module!r}))\nexcept Exception:\n    print('?')")
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (proc.stdout.strip().splitlines() or ["?"])[-1] if proc.returncode == 0 else None


@dataclass
class Series:
    """Repeated runs of one loader."""

    label: str
    runs: list = field(default_factory=list)  # dicts from run_child
    note: str = ""

    @property
    def seconds(self) -> list:
        return [r["seconds"] for r in self.runs]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def median_cpu(self) -> float:
        return statistics.median(r["cpu_seconds"] for r in self.runs)

    @property
    def cores(self) -> float:
        """CPU seconds per wall second of the median-time run (threads show up here)."""
        r = sorted(self.runs, key=lambda r: r["seconds"])[len(self.runs) // 2]
        return r["cpu_seconds"] / r["seconds"] if r["seconds"] > 0 else 1.0

    @property
    def peak_rss(self) -> int:
        return max(r["peak_rss"] for r in self.runs)

    def spread(self) -> str:
        s = self.seconds
        return f"{min(s):.3g}-{max(s):.3g}" if len(s) > 1 else "-"


def mb(n: float) -> float:
    return n / 1e6


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.0f}k"
    return f"{x:.0f}"


def table(headers: list, rows: list) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).rjust(w) if i else str(h).ljust(w) for i, (h, w) in enumerate(zip(headers, widths)))
    out = [line, "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(out)


def check(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def machine_line() -> str:
    cores = os.cpu_count()
    try:
        with open("/proc/meminfo") as fh:
            mem_kb = int(fh.readline().split()[1])
        mem = f", {mem_kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        mem = ""
    try:
        load = os.getloadavg()[0]
        load_s = f", load {load:.2f}"
    except OSError:
        load_s = ""
    return f"{cores} cores{mem}{load_s}, Python {sys.version.split()[0]}"
