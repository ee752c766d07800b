"""The event tables of an Nsight Systems export, each read into a ``Group``.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from traceview.model import Kind, lazy_zeros
from traceview.parsers.nsys.columns import factorize_sorted, narrowed, process_key, start_where_no_end, thread_id
from traceview.parsers.nsys.queries import ExportQueries, GRID_LIMIT, Group
from traceview.parsers.nsys.schema import (
    EMIT_NVTX_SUFFIX, EVENT_CLASS_BUILTIN, KERNEL_T, MEMCPY_KINDS_BUILTIN, MEMCPY_T, MEMSET_T,
    NVTX_DOMAIN_CREATE_BUILTIN, NVTX_MARK_TYPES_BUILTIN, NVTX_RANGE_TYPES_BUILTIN, NVTX_T, OSRT_T, RUNTIME_T,
    RUNTIME_VERSION_SUFFIX, SYNC_NAMES_BUILTIN, SYNC_T,
)
from traceview.parsers.nsys.strings import Strings, strip_emit_nvtx


class EventTables(ExportQueries):
    """Each event table of an export read into a ``Group`` of columns: kernels, copies, memsets,
    synchronisations, runtime and driver calls, NVTX ranges, OS runtime calls."""

    def read_kernels(self, names: Strings) -> Group | None:
        t = KERNEL_T
        if t not in self.tables:
            return None
        dims = ["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"]
        extra = [self.col(t, "demangledName", "shortName", "mangledName", default="-1")]
        extra += [self.col(t, d, default="-1") for d in dims]
        # exports with --cuda-graph-trace=node: each replayed kernel's graph and node (0: none)
        extra += [self.col(t, c, default="0") for c in ("graphId", "graphNodeId")]
        cols, proc, tid = self._gpu_common(t, extra)
        start, end, device, stream, corr = cols[:5]
        n = len(start)
        g = self.group(t, proc, tid, start, end, Kind.KERNEL, self.categories.const("kernel"),
                       names.from_ids(cols[6]), device=device, stream=stream, corr=corr)
        beyond = np.zeros(n, dtype=bool)  # a launch dimension is a 32-bit value: a bigger one is no size
        for i, d in enumerate(dims):
            v = cols[7 + i]
            fits = v < GRID_LIMIT
            beyond |= ~fits
            g.optional[f"{d[:-1].lower()}_{d[-1].lower()}"] = (
                (narrowed(v), v >= 0) if fits.all() else (narrowed(np.where(fits, v, -1)), (v >= 0) & fits))
        for name, v in (("graph_id", cols[13]), ("graph_node_id", cols[14])):
            if (v > 0).any():
                g.optional[name] = (v, v > 0)
        g = self.repair_nulls(g)
        beyond &= g.keep
        if beyond.any():
            g.notes["grid_beyond_32_bits_null"] = beyond
            self.warnings.append(f"{t}: {int(beyond.sum())} rows have a grid or block size beyond 32 bits "
                                 "(left unknown)")
        return g

    def _memcpy_kind_names(self) -> dict[int, str]:
        table = self.enum("ENUM_CUDA_MEMCPY_OPER")
        if not table:
            return dict(MEMCPY_KINDS_BUILTIN)
        out = {}
        for i, (name, label) in table.items():
            short = name.removeprefix("CUDA_MEMCPY_KIND_")
            m = re.fullmatch(r"(UVM_)?([A-Z])TO([A-Z])", short)
            if m:
                out[i] = ("UVM " if m.group(1) else "") + f"{m.group(2)}to{m.group(3)}"
            else:
                out[i] = MEMCPY_KINDS_BUILTIN.get(i, label or short.capitalize())
        return out

    def read_memcpy(self, names: Strings) -> Group | None:
        t = MEMCPY_T
        if t not in self.tables:
            return None
        extra = [self.col(t, "bytes", default="-1"), self.col(t, "copyKind", default="0")]
        cols, proc, tid = self._gpu_common(t, extra)
        start, end, device, stream, corr, _, nbytes, copy_kind = cols
        mapping = self._memcpy_kind_names()
        uniq, inverse = factorize_sorted(copy_kind)
        texts = [mapping.get(int(k), f"kind {int(k)}") for k in uniq]
        name_codes = names.consts([f"Memcpy {x}" for x in texts])[inverse]
        copy_codes = names.consts(texts)[inverse]
        g = self.group(t, proc, tid, start, end, Kind.MEMCPY, self.categories.const("gpu_memcpy"),
                       name_codes, device=device, stream=stream, corr=corr)
        g.optional["bytes"] = (nbytes, nbytes >= 0)
        g.copy_kind = narrowed(copy_codes)
        return self.repair_nulls(g)

    def read_memset(self, names: Strings) -> Group | None:
        t = MEMSET_T
        if t not in self.tables:
            return None
        cols, proc, tid = self._gpu_common(t, [self.col(t, "bytes", default="-1")])
        start, end, device, stream, corr, _, nbytes = cols
        g = self.group(t, proc, tid, start, end, Kind.MEMSET, self.categories.const("gpu_memset"),
                       names.const("Memset"), device=device, stream=stream, corr=corr)
        g.optional["bytes"] = (nbytes, nbytes >= 0)
        return self.repair_nulls(g)

    def read_sync(self, names: Strings) -> Group | None:
        t = SYNC_T
        if t not in self.tables:
            return None
        cols, proc, tid = self._gpu_common(t, [self.col(t, "syncType", "deprecatedSyncType", default="0")])
        start, end, device, stream, corr, _, sync_type = cols
        labels = {i: label or name for i, (name, label) in self.enum("ENUM_CUPTI_SYNC_TYPE").items()}
        uniq, inverse = factorize_sorted(sync_type)
        texts = [SYNC_NAMES_BUILTIN.get(int(k)) or labels.get(int(k)) or f"Sync type {int(k)}" for k in uniq]
        return self.repair_nulls(self.group(
            t, proc, tid, start, end, Kind.SYNC, self.categories.const("cuda_sync"),
            names.consts(texts)[inverse], device=device, stream=stream, corr=corr))

    def runtime_exprs(self) -> list[str]:
        t = RUNTIME_T
        exprs = ['"start"', self.end_expr(t), self.col(t, "eventClass"), self.col(t, "globalTid"),
                 self.col(t, "correlationId"), self.col(t, "nameId")]
        return exprs + self.null_checks(t, "start", "end", "globalTid")

    def read_runtime(self, names: Strings) -> Group | None:
        import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
        t = RUNTIME_T
        if t not in self.tables:
            return None
        self.require(t, "start")
        cols, _ = self.fetch(t, self.runtime_exprs())
        start, end, event_class, gtid, corr, name_id = cols[:6]
        end = start_where_no_end(start, end, cols[7])
        self.pending_nulls = [*cols[6:], lazy_zeros(len(start), np.bool_)]
        del cols  # each column is held by its name now, and dropped once used: most of the rows are here
        strip = lambda values: pc.replace_substring_regex(values, RUNTIME_VERSION_SUFFIX, "")  # noqa: E731
        name_codes = names.from_ids(name_id, transform=strip)
        del name_id
        # category: event class through the enum, else the name
        class_enum = {i: n for i, (n, _) in self.enum("ENUM_NSYS_EVENT_CLASS").items()}
        uniq, inverse = factorize_sorted(event_class)
        per_class: list[str] = []  # "" where the class is unknown
        for c in uniq.tolist():
            sym = class_enum.get(c, "")
            if "CUDA_RUNTIME" in sym:
                per_class.append("cuda_runtime")
            elif "CUDA_DRIVER" in sym:
                per_class.append("cuda_driver")
            elif not class_enum and c in EVENT_CLASS_BUILTIN:
                per_class.append(EVENT_CLASS_BUILTIN[c])
            else:
                per_class.append("")
        runtime_code, driver_code = self.categories.const("cuda_runtime"), self.categories.const("cuda_driver")
        by_class = np.array([{"cuda_runtime": runtime_code, "cuda_driver": driver_code}.get(p, -1) for p in per_class],
                            dtype=np.int32)  # (category codes: a handful)
        category = by_class[inverse] if len(uniq) else np.empty(0, dtype=np.int32)
        del event_class, inverse
        unknown = category < 0
        if unknown.any():
            # driver API names start with "cu" but not "cuda"
            u_codes, u_inv = factorize_sorted(name_codes[unknown])
            texts = pa.concat_arrays([b.cast(pa.string()) for b in names.blocks]).take(pa.array(u_codes))
            is_driver = np.asarray(pc.and_(pc.starts_with(texts, "cu"), pc.invert(pc.starts_with(texts, "cuda"))))
            category[unknown] = np.where(is_driver, driver_code, runtime_code)[u_inv]
        proc, tid = process_key(gtid), thread_id(gtid)
        del gtid
        return self.repair_nulls(self.group(t, proc, tid, start, end, Kind.RUNTIME, category, name_codes, corr=corr))

    def read_nvtx(self, names: Strings) -> Group | None:
        import pyarrow.compute as pc  # here: not before the parse workers start (ParseHooks.meanwhile)
        t = NVTX_T
        if t not in self.tables:
            return None
        self.require(t, "start")
        end_exprs = ['"end" IS NULL', 'COALESCE("end", "start")'] if "end" in self.columns(t) else ["1", '"start"']
        exprs = ['"start"', *end_exprs, self.col(t, "eventType", default="59"), self.col(t, "globalTid"),
                 self.col(t, "textId"), self.col(t, "domainId", default="0")]
        flags = self.null_checks(t, "start", "globalTid", "eventType")
        cols, text = self.fetch(t, exprs + flags, text=self.col(t, "text"))
        assert text is not None  # fetch returns the text column it was asked for
        start, end_null, end, event_type, gtid, text_id, domain = cols[:7]
        null_type = cols[9].astype(bool)
        # a NULL end is an open range (counted apart), not a repair: only start and process are checked
        self.pending_nulls = [cols[7], lazy_zeros(len(start), np.bool_), cols[8], lazy_zeros(len(start), np.bool_)]
        ranges, marks, domain_create = self._nvtx_types()
        # NULL eventType read as 59 (COALESCE default for exports without the column): not a range
        is_range = np.isin(event_type, ranges) & ~null_type
        is_mark = np.isin(event_type, marks) & ~null_type
        # names: text, else textId
        has_text = np.asarray(text.is_valid())
        name_codes = names.from_ids(np.where(has_text, -1, text_id), transform=strip_emit_nvtx)
        names.missing -= int((has_text | (text_id < 0)).sum())  # rows without textId are not "missing"
        suffixed = names.ids_matching(np.where(has_text, -1, text_id), EMIT_NVTX_SUFFIX)
        if has_text.any():
            texts = text.filter(pa.array(has_text))
            name_codes[has_text] = names.from_strings(strip_emit_nvtx(texts))
            suffixed[has_text] = np.asarray(pc.match_substring_regex(texts, EMIT_NVTX_SUFFIX).fill_null(False))
        # domain names from domain-create rows (text holds the name)
        domain_names: dict[int, str] = {}
        created = np.flatnonzero(event_type == domain_create)
        if len(created):
            dom_text = text.take(pa.array(created)).to_pylist()
            for d, s in zip(domain[created].tolist(), dom_text):
                if s:
                    domain_names[int(d)] = s
        uniq, inverse = factorize_sorted(domain)
        cat_names = ["nvtx" if d == 0 else f"nvtx:{domain_names.get(int(d), f'domain{int(d)}')}" for d in uniq.tolist()]
        category = self.categories.consts(cat_names)[inverse] if len(uniq) else np.empty(0, np.int64)
        category = np.where(is_mark, self.categories.const("nvtx_mark"), category)
        kind = np.where(is_mark, int(Kind.OTHER), int(Kind.ANNOTATION)).astype(np.int8)
        open_ranges = is_range & (end_null == 1)
        end = np.where(is_range & (end_null == 0), end, start)
        proc, tid = process_key(gtid), thread_id(gtid)
        g = self.group(t, proc, tid, start, end, kind, category, name_codes, keep=is_range | is_mark)
        g.optional["_open"] = (open_ranges.astype(np.int64), open_ranges)
        skipped = ~(is_range | is_mark)
        g.notes["skipped_domain_create"] = (event_type == domain_create) & ~null_type
        g.notes["skipped_other_type"] = skipped & (event_type != domain_create) & ~null_type
        g.notes["emit_nvtx_suffix_removed"] = suffixed & (is_range | is_mark)
        if null_type.any():  # NULL eventType: neither range nor mark can be told, so not guessed
            g.notes["skipped_null_event_type"] = null_type
            self.warnings.append(f"{t}: {int(null_type.sum())} rows have no eventType (NULL): skipped")
        replaced = self.text_replaced.get(t)
        if replaced is not None and replaced.any():
            g.notes["text_not_utf8_replaced"] = replaced
            self.warnings.append(f"{t}: {int(replaced.sum())} texts are not UTF-8 (bad bytes shown as U+FFFD)")
        return self.repair_nulls(g)

    def read_osrt(self, names: Strings) -> Group | None:
        """OS runtime calls (``--trace osrt``: ``poll``, ``pthread_mutex_lock``, ``read`` ...) as
        annotations of category ``os_runtime`` on their thread, so the CPU-context lookup of
        host-bound gaps sees them; they never become steps or launch calls."""
        t = OSRT_T
        if t not in self.tables:
            return None
        self.require(t, "start")
        exprs = ['"start"', self.col(t, "end", default='"start"'), self.col(t, "globalTid"), self.col(t, "nameId")]
        cols, _ = self.fetch(t, exprs + self.null_checks(t, "start", "end", "globalTid"))
        start, end, gtid, name_id = cols[:4]
        self.pending_nulls = [*cols[4:], lazy_zeros(len(start), np.bool_)]
        proc, tid = process_key(gtid), thread_id(gtid)
        return self.repair_nulls(self.group(t, proc, tid, start, end, Kind.ANNOTATION,
                                            self.categories.const("os_runtime"), names.from_ids(name_id)))

    def _nvtx_types(self) -> tuple[list[int], list[int], int]:
        table = self.enum("ENUM_NSYS_EVENT_TYPE")
        if not table:
            return list(NVTX_RANGE_TYPES_BUILTIN), list(NVTX_MARK_TYPES_BUILTIN), NVTX_DOMAIN_CREATE_BUILTIN
        ranges = [i for i, (n, _) in table.items()
                  if n.startswith("Nvtx") and n.endswith(("PushPopRange", "StartEndRange"))]
        marks = [i for i, (n, _) in table.items() if n in ("NvtxMark", "NvtxtMark")]
        create = next((i for i, (n, _) in table.items() if n == "NvtxDomainCreate"), NVTX_DOMAIN_CREATE_BUILTIN)
        return ranges or list(NVTX_RANGE_TYPES_BUILTIN), marks or list(NVTX_MARK_TYPES_BUILTIN), create
