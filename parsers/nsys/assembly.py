"""Assembling an Nsight Systems export into one Trace: ranks from processes, one events table
written column by column in its final order (``Placement``), each rank's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from traceview.errors import TraceFormatError
from traceview.model import (
    EVENT_SCHEMA, join_on_keys, Kind, kind_array, lazy_zeros, make_events_table, RankInfo,
    steps_from_annotations, Trace,
)
from traceview.parsers.nsys.gpu_metrics import gpu_metric_counters
from traceview.parsers.nsys.columns import (
    device_of, distinct_rows, distinct_values, masked_array, pid_of, runs, sparse_dictionary, threads_of,
)
from traceview.parsers.nsys import links as link_module
from traceview.parsers.nsys.links import launch_links
from traceview.parsers.nsys.metadata import ExportMetadata
from traceview.parsers.nsys.queries import Group
from traceview.parsers.nsys.schema import (
    CORE_TABLES, DTYPE_COLUMN, KERNEL_T, MEMCPY_T, MEMSET_T, NCCL_COLLECTIVES, NCCL_DTYPES, NCCL_KERNEL,
    RUNTIME_T, SYNC_T,
)
from traceview.parsers.nsys.strings import Strings
from traceview.parsing import do_nothing


#: up to this many processes, ranks are found by one comparison per process rather than a search
_FEW_PROCESSES = 8


@dataclass
class _RankMap:
    """Processes -> ranks. A process that ran GPU activity ranks by its lowest device id; then
    processes with CUDA API calls only, then the others (NVTX only); ties by pid."""

    ordered: list[int]  # process keys (globalPid >> 24), by rank
    api_procs: set[int]  # processes with CUDA runtime or synchronisation rows
    stream_device: dict[tuple[int, int], int]  # (process, stream) -> lowest device of its activity
    devices: dict[int, set[int]]  # process -> devices of its kernels, copies and memsets
    proc_sorted: np.ndarray  # the process keys, sorted
    rank_lookup: np.ndarray  # rank of each of proc_sorted

    @property
    def n_ranks(self) -> int:
        return len(self.ordered)

    def ranks_for(self, proc: np.ndarray) -> np.ndarray:
        """Rank of each process key; -1 for a process that is no rank."""
        if len(self.proc_sorted) <= _FEW_PROCESSES:  # one comparison per process beats a search
            out = np.full(len(proc), -1, dtype=np.int64)
            for p, r in zip(self.proc_sorted.tolist(), self.rank_lookup.tolist()):
                out[proc == p] = r
            return out
        pos = np.minimum(np.searchsorted(self.proc_sorted, proc), len(self.proc_sorted) - 1)
        return np.where(self.proc_sorted[pos] == proc, self.rank_lookup[pos], -1)


#: The skip reasons (``<TABLE>.<reason>``) of rows that were activity (a kernel, copy, API call or
#: range with a time): every figure of the rank leaves them out (``RankInfo.activity_dropped``).
ACTIVITY_LOSS_SUFFIXES = (".skipped_null_start", ".skipped_time_out_of_range", ".skipped_null_device")


@dataclass
class _Tally:
    """Row counts for the rank infos."""

    counts: list[dict[str, int]]  # per rank: "<table>.read", "<table>.mapped", ...
    no_rank: dict[str, int]  # "<table>.no_rank": rows of processes that are no rank
    open_per_rank: np.ndarray  # NVTX ranges without an end, per rank


@dataclass
class _Rows:
    """The assembled events and launch links, and the columns of the events the rank infos need."""

    events: pa.Table
    links: pa.Table
    rows_per_rank: np.ndarray  # events of each rank (the events are by rank, then start)


def _rank_map(groups: list[Group]) -> _RankMap:
    proc_all = np.concatenate([g.proc[g.keep] for g in groups]) if groups else np.empty(0, np.int64)
    procs = distinct_values(proc_all)
    min_device: dict[int, int] = {}
    stream_device: dict[tuple[int, int], int] = {}
    devices: dict[int, set[int]] = {}
    for g in groups:
        if g.table not in (KERNEL_T, MEMCPY_T, MEMSET_T):
            continue
        sel = g.keep & (g.device >= 0)
        if not sel.any():
            continue
        for p, s, d in distinct_rows(g.proc[sel], g.stream[sel], g.device[sel]):
            devices.setdefault(p, set()).add(d)
            min_device[p] = min(d, min_device.get(p, d))
            stream_device[(p, s)] = min(d, stream_device.get((p, s), d))
    api_procs: set[int] = set()
    for g in groups:
        if g.table in (RUNTIME_T, SYNC_T):
            api_procs |= {int(p) for p in distinct_values(g.proc)}
    proc_list = procs.tolist()

    def order_key(p: int) -> tuple[int, int, int, int]:
        if p in min_device:
            return (0, min_device[p], p & 0xFFFFFF, p)
        if p in api_procs:
            return (1, 0, p & 0xFFFFFF, p)
        return (2, 0, p & 0xFFFFFF, p)

    ordered = sorted(proc_list, key=order_key)
    rank_of = {p: r for r, p in enumerate(ordered)}
    return _RankMap(
        ordered=ordered, api_procs=api_procs, stream_device=stream_device, devices=devices,
        proc_sorted=np.asarray(proc_list, dtype=np.int64),
        rank_lookup=np.asarray([rank_of[p] for p in proc_list], dtype=np.int64),
    )


def _fix_sync_devices(groups: list[Group], rank_map: _RankMap) -> np.ndarray:
    """Give synchronisation rows the device of the same (process, stream) activity, else the
    process's only device (in place); returns how many rows changed, per rank."""
    stream_device = rank_map.stream_device
    devices_per_proc: dict[int, set[int]] = {}
    for (p, _s), d in stream_device.items():
        devices_per_proc.setdefault(p, set()).add(d)
    sync_fixed = np.zeros(rank_map.n_ranks, dtype=np.int64)
    for g in groups:
        if g.table != SYNC_T or len(g.proc) == 0:
            continue
        lookup: dict[tuple[int, int], int] = {}
        for p, s in distinct_rows(g.proc, g.stream):
            if (p, s) in stream_device:
                lookup[(p, s)] = stream_device[(p, s)]
            elif len(devices_per_proc.get(p, ())) == 1:
                lookup[(p, s)] = next(iter(devices_per_proc[p]))
        if not lookup:
            continue
        kp = np.array([k[0] for k in lookup], dtype=np.int64)
        ks = np.array([k[1] for k in lookup], dtype=np.int64)
        kd = np.array(list(lookup.values()), dtype=np.int64)
        li, ri = join_on_keys([g.proc, g.stream], [kp, ks])
        new_device = g.device.copy()
        new_device[li] = kd[ri]
        changed_ranks = rank_map.ranks_for(g.proc[new_device != g.device])
        sync_fixed += np.bincount(changed_ranks[changed_ranks >= 0], minlength=rank_map.n_ranks)
        g.device = new_device
    return sync_fixed


def _tally_rows(groups: list[Group], rank_map: _RankMap, sync_fixed: np.ndarray) -> _Tally:
    """Rows read and mapped per table and rank; takes the ``_open`` markers out of the groups."""
    n_ranks = rank_map.n_ranks
    counts: list[dict[str, int]] = [{} for _ in range(n_ranks)]
    no_rank: dict[str, int] = {}
    open_per_rank = np.zeros(n_ranks, dtype=np.int64)
    for g in groups:
        r_all = rank_map.ranks_for(g.proc)
        read = np.bincount(r_all[r_all >= 0], minlength=n_ranks)
        mapped = np.bincount(r_all[(r_all >= 0) & g.keep], minlength=n_ranks)
        for r in range(n_ranks):
            counts[r][f"{g.table}.read"] = int(read[r])
            counts[r][f"{g.table}.mapped"] = int(mapped[r])
        # rows with a NULL process have their own reason; the others of no rank are "no_rank"
        orphan = g.notes.pop("no_rank_null_process", np.zeros(len(r_all), dtype=bool))
        if orphan.any():
            no_rank[f"{g.table}.no_rank_null_process"] = int(orphan.sum())
        if ((r_all < 0) & ~orphan).any():
            no_rank[f"{g.table}.no_rank"] = int(((r_all < 0) & ~orphan).sum())
        if "_open" in g.optional:
            opened = g.optional.pop("_open")[1]
            open_per_rank += np.bincount(r_all[opened & (r_all >= 0)], minlength=n_ranks)
        for note, rows in g.notes.items():
            per_rank = np.bincount(r_all[rows & (r_all >= 0)], minlength=n_ranks)
            for hit in np.flatnonzero(per_rank).tolist():
                counts[hit][f"{g.table}.{note}"] = int(per_rank[hit])
    for r in range(n_ranks):
        if sync_fixed[r]:
            counts[r][f"{SYNC_T}.device_from_activity"] = int(sync_fixed[r])
    if n_ranks and no_rank:
        counts[0].update(no_rank)
    return _Tally(counts=counts, no_rank=no_rank, open_per_rank=open_per_rank)


def _sorted_rank_start(groups: list[Group], rank_map: _RankMap,
                       placement: _Placement) -> tuple[np.ndarray, np.ndarray]:
    """Rank (int32) and start of the kept rows in events-table order (by rank, then start), with
    every group's rows placed in ``placement``; the groups' starts are released."""
    start = _concat_kept(groups, "start")
    for g in groups:
        g.start = _RELEASED  # copied: released before the sort's working arrays are made
    rank = (np.concatenate([rank_map.ranks_for(g.proc[g.keep]).astype(np.int32) for g in groups])
            if groups else np.empty(0, dtype=np.int32))
    # by rank, then start: a stable sort by time (timsort: the tables are runs already in time
    # order), then a stable radix sort by rank
    order = np.argsort(start, kind="stable")
    rank_dtype = np.int16 if rank_map.n_ranks < 32000 else np.int32
    order = order[np.argsort(rank[order].astype(rank_dtype), kind="stable")]
    placement.place_rows(order)
    return rank[order], start[order]


def _concat_kept(groups: list[Group], attr: str) -> np.ndarray:
    """One column of the kept rows of every group, in group order."""
    parts = [getattr(g, attr)[g.keep] for g in groups]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


#: what a group's column holds once :meth:`_Placement.column` has placed it
_RELEASED = np.empty(0, dtype=np.int8)


@dataclass
class _Placement:
    """Where the kept rows of every group go in the events table, so that each column is written
    straight to its final order (one pass) rather than concatenated and then reordered (two)."""

    groups: list[Group]
    kept: list[np.ndarray | None]  # per group: positions of its kept rows (None: all kept)
    offsets: list[int]  # per group: its first row among the kept rows of all groups
    dest: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    #: per group, its rows' destinations of its own, once :meth:`keep_destinations_of` dropped ``dest``
    own_dest: list[np.ndarray | None] = field(default_factory=list)
    n_rows: int = 0
    #: the parse's ``release_memory`` hook (``ExportParser.release_memory``)
    release_memory: Callable[[], None] = do_nothing

    @classmethod
    def of(cls, groups: list[Group], release_memory: Callable[[], None] = do_nothing) -> _Placement:
        kept = [None if g.keep.all() else np.flatnonzero(g.keep) for g in groups]
        sizes = [len(g.keep) if k is None else len(k) for g, k in zip(groups, kept)]
        return cls(groups=groups, kept=kept, offsets=np.concatenate([[0], np.cumsum(sizes)]).tolist(),
                   release_memory=release_memory)

    def place_rows(self, order: np.ndarray) -> None:
        """Row ``order[i]`` of the concatenated kept rows becomes row ``i``."""
        # int32 where the rows fit: the destinations live through the whole assembly
        dtype = np.int32 if len(order) < (1 << 31) else np.int64
        self.dest = np.empty(len(order), dtype=dtype)
        self.dest[order] = np.arange(len(order), dtype=dtype)
        self.n_rows = len(order)

    def _where(self, i: int) -> np.ndarray:
        """The events-table rows of group ``i``'s kept rows."""
        own = self.own_dest[i] if self.own_dest else None
        return own if own is not None else self.dest[self.offsets[i]: self.offsets[i + 1]]

    def keep_destinations_of(self, needed: list[bool]) -> None:
        """Keep the destinations of the groups ``needed`` marks only (a copy each), dropping the
        whole permutation: the columns that some tables have (launch dimensions, byte counts) are
        placed last, on top of an almost whole table, and need the kernels' rows, not every row's."""
        self.own_dest = [self.dest[self.offsets[i]: self.offsets[i + 1]].copy() if need else None
                         for i, need in enumerate(needed)]
        self.dest = _RELEASED

    def _write(self, out: np.ndarray, i: int, values: np.ndarray) -> None:
        k = self.kept[i]
        where = self._where(i)
        if values.strides == (0,) and len(values):  # a constant: one value, no rows to gather
            out[where] = values[0]
        else:
            out[where] = values if k is None else values[k]

    def column(self, attr: str, dtype: type[np.integer] | None = None) -> np.ndarray:
        """One column of the kept rows of every group, in events-table order, as ``dtype`` (the
        events table's: the groups' narrower values are widened as they are written), else the
        groups' common type. The groups' own column is released once placed (nothing reads the
        groups after assembly): that keeps the peak memory near the size of the events table
        rather than twice it."""
        if dtype is None:
            dtype = np.result_type(*[getattr(g, attr) for g in self.groups]).type if self.groups else np.int64
        out = np.empty(self.n_rows, dtype=dtype)
        for i, g in enumerate(self.groups):
            self._write(out, i, getattr(g, attr))
            setattr(g, attr, _RELEASED)
        # the groups' columns were mostly below glibc's mmap threshold: freed, they stay resident
        # until trimmed, and each placed column would add its whole size to the RSS
        self.release_memory()
        return out

    def release(self, attr: str) -> None:
        """Drop the groups' column ``attr`` unplaced (the events table does not need it as a column)."""
        for g in self.groups:
            setattr(g, attr, _RELEASED)

    def set_rows(self, attr: str) -> tuple[np.ndarray, np.ndarray]:
        """(events-table rows, values) where ``attr`` is set (>= 0), for a column few rows have (the
        copy kind of memcpy rows): groups where it is the constant -1 are skipped, not written out
        as a column as long as the table. The groups' columns are released."""
        rows, values = [], []
        for i, g in enumerate(self.groups):
            column = getattr(g, attr)
            setattr(g, attr, _RELEASED)
            if len(column) == 0 or (column.strides == (0,) and column[0] < 0):
                continue
            k = self.kept[i]
            kept = column if k is None else column[k]
            hit = kept >= 0
            rows.append(self._where(i)[hit])
            values.append(kept[hit])
        if not rows:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        return np.concatenate(rows), np.concatenate(values)

    def optional_columns(self) -> dict[str, pa.Array]:
        """The columns only some tables have (null on the rows of the others)."""
        columns: dict[str, pa.Array] = {}
        bitmaps: list[np.ndarray] = []  # validity bitmaps made so far, shared where equal
        for col_name in sorted({k for g in self.groups for k in g.optional}):
            have = [(i, g.optional.pop(col_name)) for i, g in enumerate(self.groups) if col_name in g.optional]
            values = lazy_zeros(self.n_rows, np.result_type(*[v for _, (v, _) in have]).type)
            present = lazy_zeros(self.n_rows, np.bool_)
            for i, (v, ok) in have:
                self._write(values, i, v)
                self._write(present, i, ok)
            del have
            columns[col_name] = masked_array(values, present, EVENT_SCHEMA.field(col_name).type, bitmaps)
            del values, present
            self.release_memory()  # as in column()
        return columns


class ExportParser(ExportMetadata):
    """A parser of one Nsight Systems export: :meth:`run` reads every table, assembles one events
    table sorted by rank and start, the launch links and each rank's metadata.
    ``progress(done, total)``: set by the caller, called after each event table is read (the
    tables read so far out of those read, scaled to the file's bytes); None: silent."""

    progress: Callable[[int, int], None] | None = None

    # -- assembly ----------------------------------------------------------------------
    def run(self) -> Trace:
        self._check_core_tables()
        if self.arrow_rows is not None and RUNTIME_T in self.tables and "start" in self.columns(RUNTIME_T):
            # the CUDA API calls are most of a big export's rows: read while the kernels are built
            self.arrow_rows.prefetch(RUNTIME_T, self.runtime_exprs())
        names = self.read_strings()
        groups = []
        reads = (self.read_kernels, self.read_memcpy, self.read_memset, self.read_sync, self.read_runtime,
                 self.read_nvtx, self.read_osrt)
        for done, read in enumerate(reads, 1):
            group = read(names)
            if group is not None:
                groups.append(group)
            self.release_memory()  # the fetched columns and the group's temporaries, before the next table
            if self.progress is not None:  # the last step, assembling the tables, is not counted
                self.progress(done, len(reads) + 1)
        if names.missing:
            self.warnings.append(f"{names.missing} names refer to string ids missing from StringIds (left empty)")
        self._place_processes(groups)
        rank_map = _rank_map(groups)
        sync_fixed = _fix_sync_devices(groups, rank_map)
        tally = _tally_rows(groups, rank_map, sync_fixed)  # takes the "_open" markers out: before the columns
        for g in groups:
            g.notes = {}  # counted
        tally.no_rank.update(self.file_counts)
        if tally.counts:
            tally.counts[0].update(self.file_counts)
        self.release_memory()  # what the fetch and the counts left free, before the assembly's peak
        rows = self._assemble_events(groups, rank_map, names)
        del groups
        self.release_memory()
        ranks, all_warnings = self._rank_infos(rank_map, names, tally, rows)
        self.release_memory()
        steps = steps_from_annotations(rows.events, self.step_marker)
        counters = gpu_metric_counters(self.con, self.tables, ranks)  # GPU_METRICS (gpu_metrics.py)
        return Trace(events=rows.events, links=rows.links, ranks=ranks, steps=steps, counters=counters,
                     warnings=[f"{self.path}: {w}" for w in all_warnings])

    def _place_processes(self, groups: list[Group]) -> None:
        """GPU tables without a ``globalPid`` column: their rows take the process of the CUDA API
        call that launched them (:func:`links.processes_by_launch`), and a warning says which join
        placed how many (without it the rows formed a rank of their own, linked to nothing)."""
        gpu_tables = (KERNEL_T, MEMCPY_T, MEMSET_T, SYNC_T)
        missing = [g for g in groups if g.table in gpu_tables and "globalPid" not in self.columns(g.table)]
        if not missing:
            return
        known = [(g.proc[g.keep], g.device[g.keep]) for g in groups
                 if g.table in gpu_tables and g.table != SYNC_T and not any(g is m for m in missing)]
        runtime = next((g for g in groups if g.table == RUNTIME_T), None)
        empty = np.empty(0, dtype=np.int64)
        api_proc = runtime.proc[runtime.keep] if runtime is not None else empty
        api_corr = runtime.corr[runtime.keep] if runtime is not None else empty
        for g in missing:
            placed = link_module.processes_by_launch(g, api_proc, api_corr, known)
            said = {"device": "on their device (its one process in the tables with globalPid)",
                    "correlation": "on the correlation id of their CUDA API call (runtime table)",
                    "device_of_correlated": "on their device (its one process among the rows so joined)",
                    "only_process": "to the export's only process"}
            joins = [f"{placed[k]:,} {text}" for k, text in said.items() if placed[k]]
            text = f"{g.table} has no globalPid column: its rows were given a process by joining " + (
                "; ".join(joins) or "none")
            if placed["none"]:
                text += f"; {placed['none']:,} rows no join places were skipped"
            self.warnings.append(text)

    def _check_core_tables(self) -> None:
        if not self.tables & set(CORE_TABLES):
            what = "has no tables at all" if not self.tables else "has none of the Nsight Systems tables"
            raise TraceFormatError(
                self.path,
                f"is an SQLite database but {what} (expected {', '.join(CORE_TABLES)})",
                "is it an Nsight Systems export? make one with: nsys export --type sqlite --output X.sqlite X.nsys-rep",
            )

    def _assemble_events(self, groups: list[Group], rank_map: _RankMap, names: Strings) -> _Rows:
        """The kept rows of every group as one events table, by rank, then start.

        Each column is written in its final order, handed to Arrow without a copy, and the groups'
        column released before the next is made, so that the peak memory is the events table plus
        about one column rather than the groups and the table side by side."""
        placement = _Placement.of(groups, self.release_memory)
        rank, start = _sorted_rank_start(groups, rank_map, placement)
        placement.release("keep")  # (the placement has the kept rows' positions)
        n = len(start)
        bounds = np.searchsorted(rank, np.arange(rank_map.n_ranks + 1, dtype=rank.dtype))  # rows of each rank
        columns: dict[str, Any] = {"start_ns": pa.array(start)}
        del start
        kind = placement.column("kind").astype(np.int8, copy=False)
        columns["kind"] = kind_array(kind)
        corr = placement.column("corr", np.int64)
        columns["correlation"] = pa.array(corr)
        # the links now: their search needs ~100 MB for a while on a 4.6 M-row export, which here
        # comes on top of the groups' columns not yet placed rather than on top of the whole table
        links = launch_links(rank, kind, corr, exact=self.arrow_rows is not None)
        columns["rank"] = pa.array(rank)  # flat: every analysis reads it, and a chunked column is copied to be read
        del rank
        # one value per rank (a rank is one process), or one in all: runs of one value (runs)
        columns["pid"] = runs([pid_of(p) for p in rank_map.ordered], bounds, np.int64)
        columns["external_id"] = runs([-1], np.array([0, n]), np.int64)  # Nsight has no external ids
        placement.release("proc")
        # the table only grows from here (int32 and constant parts become full columns), and each
        # column is made while its groups' parts still exist: the columns whose parts are biggest
        # first, so the last steps, on top of an almost whole table, add the least
        name_array = names.dictionary_array(placement.column("name"), reuse=True)
        columns["name"] = name_array
        columns["category"] = self.categories.dictionary_array(placement.column("category"), reuse=True)
        for attr, column_name in (("dur", "dur_ns"), ("tid", "tid"), ("stream", "stream")):
            columns[column_name] = pa.array(placement.column(attr, np.int64))
        columns["device"] = pa.array(placement.column("device", np.int32))
        placement.keep_destinations_of([bool(g.optional) or g.copy_kind.strides != (0,) for g in groups])
        columns.update(placement.optional_columns())
        copy_rows, copy_codes = placement.set_rows("copy_kind")  # memcpy rows only
        if len(copy_rows):
            columns["copy_kind"] = names.sparse_dictionary_array(n, copy_rows, copy_codes)
        del placement  # its row destinations: not needed once every column is placed
        self.release_memory()
        self._collectives(columns, name_array, kind)
        unknown = set(columns) - set(EVENT_SCHEMA.names)
        assert not unknown, f"columns not in EVENT_SCHEMA: {sorted(unknown)}"
        self.release_memory()  # and the dictionaries' temporaries, before make_events_table adds external_id
        # the columns an export has no data for (message sizes, process groups ...) are made there,
        # all-null over one shared buffer of untouched zero pages (model.null_array)
        return _Rows(events=make_events_table(columns, n), links=links, rows_per_rank=np.diff(bounds))

    def _rank_infos(self, rank_map: _RankMap, names: Strings, tally: _Tally,
                    rows: _Rows) -> tuple[dict[int, RankInfo], list[str]]:
        """One RankInfo per process that became a rank, and the trace's warnings."""
        meta, format_version, base = self.metadata()
        device_info = self.devices()
        pnames = self.process_names()
        t_proc, t_tid, t_codes = self.thread_names(names)
        t_names = names.dictionary_array(t_codes) if len(t_codes) else None
        unmapped = self.unmapped_tables()
        mapped_per_rank = rows.rows_per_rank
        several_vms = len({p >> 24 for p in rank_map.ordered}) > 1
        ranks: dict[int, RankInfo] = {}
        all_warnings = list(self.warnings)
        for r, p in enumerate(rank_map.ordered):
            pid = pid_of(p)
            used = sorted(rank_map.devices.get(p, ()))
            devs = [device_of(device_info, p, d) for d in used]
            where = f"device {used[0]}" if len(used) == 1 else (f"devices {used}" if used else
                    ("CUDA API calls only" if p in rank_map.api_procs else "NVTX only"))
            host = f" vm={p >> 24}" if several_vms else ""
            warnings = []
            if tally.open_per_rank[r]:
                warnings.append(f"{int(tally.open_per_rank[r])} NVTX ranges have no end (kept with duration 0)")
            threads = threads_of(p, pid, t_proc, t_tid, t_names)
            pname = pnames.get(p) or threads.get(f"{pid}:{pid}")
            tally.counts[r]["mapped"] = int(mapped_per_rank[r])
            ranks[r] = RankInfo(
                rank=r,
                source_path=str(self.path),
                source_format="nsys",
                format_version=format_version,
                rank_source=f"nsys process pid={pid}{host} ({where}); rank by device order",
                world_size=None,
                devices=devs,
                process_names={pid: pname} if pname else {},
                thread_names=threads,
                base_time_ns=base,
                raw_metadata=dict(meta),
                event_counts=tally.counts[r],
                activity_dropped={k: v for k, v in tally.counts[r].items() if v and k.endswith(ACTIVITY_LOSS_SUFFIXES)},
                unmapped=dict(unmapped) if r == 0 else {},
                warnings=warnings + list(self.warnings),
            )
            all_warnings += [f"rank {r} (pid {pid}): {w}" for w in warnings]
        if not ranks:  # Nsight tables but no rows: one empty rank keeps the metadata visible
            ranks[0] = RankInfo(
                rank=0, source_path=str(self.path), source_format="nsys", format_version=format_version,
                rank_source="nsys export without events", devices=sorted(device_info.values(), key=lambda d: d.id),
                base_time_ns=base, raw_metadata=dict(meta), event_counts={**tally.no_rank, "mapped": 0},
                unmapped=dict(unmapped), warnings=["the export holds no events"] + list(self.warnings),
            )
            all_warnings.append("the export holds no events")
        return ranks, all_warnings

    def _collectives(self, columns: dict[str, Any], name_array: pa.DictionaryArray, kind: np.ndarray) -> None:
        """Fill ``collective``/``dtype`` of NCCL kernels from their names (per distinct name)."""
        dictionary = name_array.dictionary.to_pylist()
        coll_of, dtype_of = [], []
        for text in dictionary:
            m = NCCL_KERNEL.match(text or "")
            coll = dt = None
            if m:
                coll = NCCL_COLLECTIVES.get(m.group(1).lower(), m.group(1).lower())
                base = (text or "").split("(", 1)[0]
                dt = next((NCCL_DTYPES[tok] for tok in base.split("_")[2:] if tok in NCCL_DTYPES), None)
            coll_of.append(coll)
            dtype_of.append(dt)
        if not any(coll_of):
            return
        idx = name_array.indices.to_numpy()  # int32, no copy
        is_nccl = np.array([c is not None for c in coll_of], dtype=bool)
        # the NCCL kernels: a few per step, so both columns are sparse (see sparse_dictionary);
        # found a block at a time, as the table is complete by now and at its largest
        block = link_module.JOIN_BLOCK_ROWS
        rows = np.concatenate([np.empty(0, dtype=np.int64)] + [np.flatnonzero(is_nccl[idx[i:i + block]] & (
            kind[i:i + block] == int(Kind.KERNEL))) + i for i in range(0, len(idx), block)])
        for column, per_name in (("collective", coll_of), (DTYPE_COLUMN, dtype_of)):
            values = sorted({v for v in per_name if v})
            if not values:
                continue
            code_of = np.array([values.index(v) if v else -1 for v in per_name], dtype=np.int32)
            codes = code_of[idx[rows]]
            have = codes >= 0
            columns[column] = sparse_dictionary(len(idx), rows[have], codes[have], pa.array(values, pa.string()))
