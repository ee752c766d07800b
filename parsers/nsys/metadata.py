"""What an Nsight Systems export says about its run: metadata, devices, processes, threads.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from traceview.model import DeviceInfo
from traceview.parsers.nsys.event_tables import EventTables
from traceview.parsers.nsys.schema import EVENT_TABLES, INFO_PREFIXES, INFO_TABLES
from traceview.parsers.nsys.strings import Strings


class ExportMetadata(EventTables):
    """What an export says about its run: metadata tables, devices, process and thread names,
    and the tables traceview does not map."""

    # -- metadata ----------------------------------------------------------------------
    def key_values(self, table: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if table not in self.tables or not {"name", "value"} <= self.columns(table):
            return out
        for name, value in self.con.execute(f'SELECT name, value FROM "{table}"'):
            if name in out:
                prev = out[name]
                out[name] = (prev if isinstance(prev, list) else [prev]) + [value]
            else:
                out[name] = value
        return out

    def metadata(self) -> tuple[dict[str, Any], str, int]:
        export_table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in self.tables), None)
        export = self.key_values(export_table) if export_table else {}
        meta: dict[str, Any] = {"export": export}
        capture = self.key_values("META_DATA_CAPTURE")
        if capture:
            meta["capture"] = capture
        version = export.get("EXPORT_PRODUCT_VERSION")
        if not isinstance(version, str):
            version = next((v for k, v in export.items() if "VERSION" in k and isinstance(v, str)
                            and re.match(r"\d{4}\.\d", v)), None)
        format_version = version or "unknown (no export metadata table)"
        base = 0
        session: dict[str, Any] = {}
        if "TARGET_INFO_SESSION_START_TIME" in self.tables:
            cur = self.con.execute("SELECT * FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
            row = cur.fetchone()
            if row is not None:
                session = dict(zip([d[0] for d in cur.description], row))
                if isinstance(session.get("utcEpochNs"), int):
                    base = int(session["utcEpochNs"])
                if isinstance(session.get("systemClockNs"), int):
                    session["timeline_ns"] = session["systemClockNs"]
        analysis = "ANALYSIS_DETAILS" in self.tables and "startTime" in self.columns("ANALYSIS_DETAILS")
        if "timeline_ns" not in session and analysis:
            row = self.con.execute("SELECT startTime FROM ANALYSIS_DETAILS LIMIT 1").fetchone()
            if row is not None and isinstance(row[0], int):
                session["timeline_ns"] = row[0]
        meta["session_start"] = session
        meta["layout"] = ("TARGET_INFO_GPU" if "TARGET_INFO_GPU" in self.tables else
                          "TARGET_INFO_CUDA_GPU" if "TARGET_INFO_CUDA_GPU" in self.tables else "no GPU info table")
        if export_table:
            meta["export_table"] = export_table
        return meta, format_version, base

    def devices(self) -> dict[tuple[int, int], DeviceInfo]:
        """(vm, device id) -> DeviceInfo; vm is ``vmId >> 48`` (the host bits of a globalPid)."""
        out: dict[tuple[int, int], DeviceInfo] = {}
        if "TARGET_INFO_GPU" in self.tables:
            table, id_col = "TARGET_INFO_GPU", "id"
            fields = {"name": "name", "sm": "smCount", "mem": "totalMemory", "major": "computeMajor",
                      "minor": "computeMinor"}
            mem_in_mib = False
        elif "TARGET_INFO_CUDA_GPU" in self.tables:
            table, id_col = "TARGET_INFO_CUDA_GPU", "deviceId"
            fields = {"name": "name", "sm": "numMultiprocessors", "mem": "globalMemorySize",
                      "major": "computeCapabilityMajor", "minor": "computeCapabilityMinor"}
            mem_in_mib = True
        else:
            return out
        cur = self.con.execute(f'SELECT * FROM "{table}"')
        names = [d[0] for d in cur.description]
        for row in cur.fetchall():
            rec = dict(zip(names, row))
            dev_id = rec.get(id_col)
            if not isinstance(dev_id, int):
                continue
            vm = (rec.get("vmId") or 0) >> 48 if isinstance(rec.get("vmId"), int) else 0
            if (vm, dev_id) in out:
                continue
            mem = rec.get(fields["mem"])
            extra = {k: v for k, v in rec.items() if k not in (id_col, *fields.values()) and v is not None}
            if isinstance(mem, int) and mem_in_mib and mem < (1 << 24):
                extra[f"{fields['mem']}_MiB"] = mem
                mem = mem << 20
            major, minor = rec.get(fields["major"]), rec.get(fields["minor"])
            out[(vm, dev_id)] = DeviceInfo(
                id=int(dev_id),
                name=str(rec.get(fields["name"]) or ""),
                sm_count=rec.get(fields["sm"]),
                total_memory_bytes=mem if isinstance(mem, int) else None,
                compute_capability=f"{major}.{minor}" if major is not None else None,
                extra=extra,
            )
        return out

    def process_names(self) -> dict[int, str]:
        """process key (globalPid >> 24) -> name."""
        out: dict[int, str] = {}
        if "PROCESSES" in self.tables and {"globalPid", "name"} <= self.columns("PROCESSES"):
            for gpid, name in self.con.execute("SELECT globalPid, name FROM PROCESSES"):
                if isinstance(gpid, int) and name:
                    out[gpid >> 24] = name
        return out

    def thread_names(self, names: Strings) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(process key, tid, name code) of ``ThreadNames`` rows."""
        if "ThreadNames" not in self.tables or not {"nameId", "globalTid"} <= self.columns("ThreadNames"):
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, empty
        (gtid, name_id), _ = self.fetch("ThreadNames", ['"globalTid"', '"nameId"'])
        before = names.missing
        codes = names.from_ids(name_id)
        names.missing = before
        return gtid >> 24, gtid & 0xFFFFFF, codes

    def unmapped_tables(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in sorted(self.tables):
            if t in EVENT_TABLES or t in INFO_TABLES or t.startswith(INFO_PREFIXES):
                continue
            n = self.con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]
            if n:
                out[t] = int(n)
        return out
