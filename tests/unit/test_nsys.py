"""Nsight Systems SQLite parser: the synthetic export against the truth it was built from, every
real shared export against independent SQL counts, and errors a user can act on."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import context

import traceview
from traceview.errors import TraceFormatError
from traceview.model import Kind
from traceview.parsers.nsys import export_nsys_rep, looks_like_nsys, parse_nsys

REPO = Path(__file__).resolve().parents[2]
SHARED_TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
NSYS_DIR = SHARED_TRACES / "nsys"
NSYS_FILES = sorted(NSYS_DIR.glob("*.sqlite")) if NSYS_DIR.is_dir() else []
TORCHRUN = NSYS_DIR / "torchrun_2xh100_nccl_2026.2.sqlite"
OMP_2021 = NSYS_DIR / "ompoffload_2xv100_2021.sqlite"
FUSER = NSYS_DIR / "fuser_matmul_h100_2024.6.sqlite"


def _load_generator():
    spec = importlib.util.spec_from_file_location("make_nsys", REPO / "sample_traces" / "make_nsys.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_nsys = _load_generator()


def need_shared(path: Path | None = None) -> Path:
    if not NSYS_DIR.is_dir():
        pytest.skip(f"real Nsight exports not available: {NSYS_DIR} is absent (it sits beside the repo)")
    if path is not None and not path.exists():
        pytest.skip(f"{path.name} is not in {NSYS_DIR}")
    return NSYS_DIR


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    make_nsys.main(out)
    db = out / make_nsys.DB_NAME
    truth = json.loads((out / make_nsys.TRUTH_NAME).read_text())
    return db, truth, parse_nsys(db)


def sql(path: Path, query: str, args: tuple = ()) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query, args).fetchall()
    finally:
        con.close()


def copy_db(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    dst.chmod(dst.stat().st_mode | stat.S_IWUSR)
    return dst


def kinds_by_pid(trace) -> dict[tuple[int, str], int]:
    pid = trace.column("pid")
    kind = trace.kind_codes()
    out: dict[tuple[int, str], int] = {}
    for p, k in zip(*np.unique(np.stack([pid, kind.astype(np.int64)]), axis=1)):
        out[(int(p), Kind(int(k)).name.lower())] = int(((pid == p) & (kind == k)).sum())
    return out


# ------------------------------------------------------------------------- synthetic export


def test_generator_is_deterministic_and_committed_sample_is_current(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    make_nsys.main(a)
    make_nsys.main(b)
    assert (a / make_nsys.DB_NAME).read_bytes() == (b / make_nsys.DB_NAME).read_bytes()
    assert (a / make_nsys.TRUTH_NAME).read_text() == (b / make_nsys.TRUTH_NAME).read_text()
    committed = REPO / "sample_traces" / make_nsys.DB_NAME
    assert committed.stat().st_size < 200_000

    def dump(p: Path) -> list[str]:
        con = sqlite3.connect(p)
        try:
            return list(con.iterdump())
        finally:
            con.close()

    assert dump(committed) == dump(a / make_nsys.DB_NAME), "sample_traces/ is stale: rerun make_nsys.py"
    assert json.loads((REPO / "sample_traces" / make_nsys.TRUTH_NAME).read_text()) == json.loads(
        (a / make_nsys.TRUTH_NAME).read_text())


def test_synthetic_counts_equal_truth(synthetic):
    _, truth, tr = synthetic
    assert sorted(tr.ranks) == [0, 1]
    summary = tr.summary()
    names = tr.names()
    cats = tr.events.column("category").to_numpy(zero_copy_only=False)
    rank_col = tr.column("rank")
    for rank_text, want in truth["ranks"].items():
        r = int(rank_text)
        info = tr.ranks[r]
        sel = rank_col == r
        assert set(tr.column("pid")[sel].tolist()) == {want["pid"]}
        assert [d.id for d in info.devices] == [want["device"]]
        assert info.devices[0].name == "NVIDIA H100 80GB HBM3" and info.devices[0].compute_capability == "9.0"
        assert f"pid={want['pid']}" in info.rank_source
        by_kind = summary[r]["by_kind"]
        assert by_kind.get("kernel", 0) == want["kernels"]
        assert by_kind.get("memcpy", 0) == want["memcpy"]
        assert by_kind.get("memset", 0) == want["memset"]
        assert by_kind.get("sync", 0) == want["sync"]
        assert by_kind.get("runtime", 0) == want["runtime_calls"]
        assert by_kind.get("annotation", 0) == want["nvtx_ranges"]
        assert by_kind.get("other", 0) == want["nvtx_marks"]
        assert int((sel & (cats == "cuda_runtime")).sum()) == want["cuda_runtime_calls"]
        assert int((sel & (cats == "cuda_driver")).sum()) == want["cuda_driver_calls"]
        nccl = sel & np.array(["ncclDevKernel_AllReduce_Sum_f32_RING_LL" in n for n in names])
        assert int(nccl.sum()) == want["nccl_kernels"]
        assert int((tr.steps.column("rank").to_numpy() == r).sum()) == want["steps"]
        assert summary[r]["steps"] == want["steps"]
        assert info.event_counts["CUPTI_ACTIVITY_KIND_KERNEL.mapped"] == want["kernels"]
        assert info.event_counts["mapped"] == int(sel.sum())
        open_warnings = [w for w in info.warnings if "no end" in w]
        assert len(open_warnings) == (1 if want["nvtx_open_ranges"] else 0)
    # the process on device 0 has the larger pid: ranks follow devices, not pids
    assert truth["ranks"]["0"]["pid"] > truth["ranks"]["1"]["pid"]


def test_synthetic_launch_delays_equal_truth(synthetic):
    _, truth, tr = synthetic
    api, gpu = tr.launch_links()
    kind = tr.kind_codes()
    start, dur = tr.column("start_ns"), tr.column("dur_ns")
    pid, corr = tr.column("pid"), tr.column("correlation")
    activity = np.isin(kind[gpu], [int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET)])
    a, g = api[activity], gpu[activity]
    delays = np.maximum(0, start[g] - (start[a] + dur[a]))
    got = {f"{p}:{c}": int(d) for p, c, d in zip(pid[a], corr[a], delays)}
    assert len(got) == len(a), "a launch was linked to more than one GPU activity"
    assert got == truth["launch_delays_ns"]
    assert any(v == 0 for v in got.values()) and max(got.values()) > 0


def test_synthetic_correlation_join_respects_processes(synthetic):
    db, truth, tr = synthetic
    repeated = sql(db, """SELECT COUNT(DISTINCT k.correlationId) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                          JOIN CUPTI_ACTIVITY_KIND_KERNEL o ON o.correlationId = k.correlationId
                          AND o.globalPid != k.globalPid""")[0][0]
    assert repeated > 0, "the synthetic export must repeat correlation ids across processes"
    assert truth["correlations_in_both_processes"] > 0
    api, gpu = tr.launch_links()
    pid, rank = tr.column("pid"), tr.column("rank")
    assert len(api) > 0
    assert (pid[api] == pid[gpu]).all() and (rank[api] == rank[gpu]).all()
    expected = sum(w["launches"] + w["sync"] for w in truth["ranks"].values())
    assert len(api) == expected
    naive = sum(sql(db, f"""SELECT COUNT(*) FROM "{t}" g JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                             ON r.correlationId = g.correlationId""")[0][0]
                for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                          "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"))
    assert naive > expected  # joining on correlation alone would be wrong here


def test_synthetic_gpu_idle_gaps_equal_truth(synthetic):
    _, truth, tr = synthetic
    rank, kind = tr.column("rank"), tr.kind_codes()
    start, end = tr.column("start_ns"), tr.column("start_ns") + tr.column("dur_ns")
    for rank_text, want in truth["ranks"].items():
        sel = (rank == int(rank_text)) & np.isin(kind, [int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET)])
        order = np.argsort(start[sel], kind="stable")
        s, e = start[sel][order], end[sel][order]
        reach = np.maximum.accumulate(e)
        gaps = (s[1:] - reach[:-1])
        gaps = gaps[gaps > 0].tolist()
        assert gaps == want["gpu_idle_gaps_ns"]
        assert sum(1 for g in gaps if g >= truth["step_gap_ns"]) >= want["steps"] - 1


def test_synthetic_names_categories_metadata(synthetic):
    _, truth, tr = synthetic
    df = tr.to_pandas()
    runtime_names = set(df.loc[df["kind"] == "runtime", "name"])
    assert {"cudaLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync", "cudaStreamSynchronize"} <= runtime_names
    assert not any(n.endswith("_v7000") or n.endswith("_v3020") for n in runtime_names)
    assert set(df.loc[df["name"] == "cuLaunchKernelEx", "category"]) == {"cuda_driver"}
    assert set(df.loc[df["name"] == "cudaLaunchKernel", "category"]) == {"cuda_runtime"}
    memcpy = df[df["kind"] == "memcpy"]
    assert set(memcpy["copy_kind"]) == {"HtoD", "DtoH"} and set(memcpy["name"]) == {"Memcpy HtoD", "Memcpy DtoH"}
    assert (memcpy.loc[memcpy["copy_kind"] == "HtoD", "bytes"] == 4 << 20).all()
    nccl = df[df["name"].str.startswith("ncclDevKernel")]
    assert set(nccl["collective"]) == {"allreduce"} and set(nccl["stream"]) == {make_nsys.NCCL_STREAM}
    compute = df[(df["kind"] == "kernel") & ~df["name"].str.startswith("nccl")]
    assert compute["collective"].isna().all() and (compute["grid_x"] > 0).all() and (compute["block_x"] > 0).all()
    assert (df.loc[df["kind"] == "kernel", "tid"] == -1).all()
    # sync records say device 0 for both processes; the parser takes the stream's device
    for r, want in truth["ranks"].items():
        assert set(df.loc[(df["kind"] == "sync") & (df["rank"] == int(r)), "device"]) == {want["device"]}
    ann = df[df["kind"] == "annotation"]
    assert set(ann.loc[ann["name"] == "ncclAllReduce", "category"]) == {"nvtx:NCCL"}
    assert (ann.loc[ann["name"] == "shutdown", "dur_ns"] == 0).all()
    assert list(tr.steps.column("name").to_pylist()[:4]) == [f"step_{i}" for i in range(4)]
    info0, info1 = tr.ranks[0], tr.ranks[1]
    assert info0.base_time_ns == make_nsys.SESSION_UTC_NS
    assert info0.raw_metadata["session_start"]["timeline_ns"] == make_nsys.SESSION_CLOCK_NS
    assert info0.format_version == "2026.2.1.210" and info0.source_format == "nsys"
    assert info0.unmapped == {"PROFILER_OVERHEAD": 4} and info1.unmapped == {}
    pid0 = truth["ranks"]["0"]["pid"]
    assert info0.process_names == {pid0: "python3"}
    assert info0.thread_names[f"{pid0}:{pid0}"] == "python3"
    assert any("no end" in w for w in tr.warnings)


def test_step_marker_override(synthetic):
    db, truth, _ = synthetic
    tr = parse_nsys(db, step_marker=r"^forward$")
    assert tr.steps.num_rows == sum(w["steps"] for w in truth["ranks"].values())
    assert set(tr.steps.column("name").to_pylist()) == {"forward"}


def test_nvtx_only_process_and_negative_duration(synthetic, tmp_path):
    db, truth, _ = synthetic
    work = copy_db(db, tmp_path / "extra.sqlite")
    con = sqlite3.connect(work)
    gtid = make_nsys.VM | (3003 << 24) | 3003
    con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                "VALUES (5, 50, 59, 'loader', ?, 0)", (gtid,))
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 10 WHERE rowid = 1")
    con.commit()
    con.close()
    tr = parse_nsys(work)
    assert sorted(tr.ranks) == [0, 1, 2]
    assert "pid=3003" in tr.ranks[2].rank_source and "NVTX only" in tr.ranks[2].rank_source
    assert tr.summary()[2]["by_kind"] == {"annotation": 1}
    assert (tr.column("dur_ns") >= 0).all()
    assert any("end before they start" in w for w in tr.warnings)


def test_old_layout_without_enum_or_metadata_tables(synthetic, tmp_path):
    db, truth, fresh = synthetic
    work = copy_db(db, tmp_path / "old.sqlite")
    con = sqlite3.connect(work)
    for t in ("ENUM_CUDA_MEMCPY_OPER", "ENUM_CUPTI_SYNC_TYPE", "ENUM_NSYS_EVENT_CLASS", "ENUM_NSYS_EVENT_TYPE",
              "META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME"):
        con.execute(f"DROP TABLE {t}")
    con.commit()
    con.close()
    tr = parse_nsys(work)
    assert tr.ranks[0].format_version.startswith("unknown")
    assert tr.ranks[0].base_time_ns == 0
    for col in ("name", "category", "copy_kind", "kind"):
        assert tr.events.column(col).to_pylist() == fresh.events.column(col).to_pylist()
    assert tr.links.num_rows == fresh.links.num_rows


def test_loads_through_traceview_load(synthetic):
    db, truth, _ = synthetic
    tr = traceview.load(db, use_cache=False)
    assert sorted(tr.ranks) == [0, 1]
    assert tr.summary()[0]["by_kind"]["kernel"] == truth["ranks"]["0"]["kernels"]


# ------------------------------------------------------------------------- real exports


def independent_counts(path: Path) -> dict[tuple[int, str], int]:
    """Rows per (pid, kind) straight from the raw tables, by the export's own documentation."""
    tables = {r[0] for r in sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    want: dict[tuple[int, str], int] = {}

    def add(rows, kind):
        for pid, n in rows:
            if n:
                want[(pid, kind)] = want.get((pid, kind), 0) + n

    for table, kind in (("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
                        ("CUPTI_ACTIVITY_KIND_MEMSET", "memset"), ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "sync")):
        if table in tables:
            add(sql(path, f"SELECT (globalPid >> 24) & 16777215, COUNT(*) FROM {table} GROUP BY 1"), kind)
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        add(sql(path, "SELECT (globalTid >> 24) & 16777215, COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 1"),
            "runtime")
    if "NVTX_EVENTS" in tables:
        # 59/60/70/71: push-pop and start-end ranges; 34/65: marks
        add(sql(path, "SELECT (globalTid >> 24) & 16777215, COUNT(*) FROM NVTX_EVENTS "
                      "WHERE eventType IN (59, 60, 70, 71) GROUP BY 1"), "annotation")
        add(sql(path, "SELECT (globalTid >> 24) & 16777215, COUNT(*) FROM NVTX_EVENTS "
                      "WHERE eventType IN (34, 65) GROUP BY 1"), "other")
    if "OSRT_API" in tables:  # OS runtime calls are annotations of category os_runtime
        add(sql(path, "SELECT (globalTid >> 24) & 16777215, COUNT(*) FROM OSRT_API GROUP BY 1"), "annotation")
    return want


@pytest.mark.parametrize("path", NSYS_FILES or [None], ids=lambda p: p.name if p else "no-shared-traces")
def test_real_export_counts_equal_raw_tables(path):
    need_shared()
    if path is None:
        pytest.skip(f"no .sqlite files in {NSYS_DIR}")
    assert looks_like_nsys(path)
    tr = parse_nsys(path)
    want = independent_counts(path)
    assert want, "the export has no events at all"
    assert kinds_by_pid(tr) == want
    assert tr.num_events == sum(want.values())
    for info in tr.ranks.values():
        assert info.source_format == "nsys" and info.source_path == str(path)
        for key, n in info.event_counts.items():
            assert n >= 0, key
    api, gpu = tr.launch_links()
    pid = tr.column("pid")
    assert (pid[api] == pid[gpu]).all()
    assert (tr.kind_codes()[api] == int(Kind.RUNTIME)).all()
    assert_every_row_accounted_for(tr)


def assert_every_row_accounted_for(tr) -> None:
    """Per rank and table: rows read = rows mapped + rows skipped (each counted under its reason)."""
    for info in tr.ranks.values():
        counts = info.event_counts
        for key in [k for k in counts if k.endswith(".read")]:
            table = key.removesuffix(".read")
            skipped = sum(n for k, n in counts.items() if k.startswith(f"{table}.skipped_"))
            assert counts[key] == counts[f"{table}.mapped"] + skipped, (info.rank, table, counts)


def test_torchrun_2026_two_ranks_sendrecv_and_links():
    need_shared(TORCHRUN)
    tr = parse_nsys(TORCHRUN)
    assert sorted(tr.ranks) == [0, 1]
    assert [d.id for d in tr.ranks[0].devices] == [0] and [d.id for d in tr.ranks[1].devices] == [1]
    assert tr.ranks[0].format_version.startswith("2026.2")
    kernels = tr.mask(Kind.KERNEL)
    names = tr.names()
    sendrecv = kernels & np.array(["SendRecv" in n for n in names])
    assert int(sendrecv.sum()) == 66
    assert set(tr.to_pandas().loc[sendrecv, "collective"]) == {"sendrecv"}
    api, gpu = tr.launch_links()
    pid, rank, corr = tr.column("pid"), tr.column("rank"), tr.column("correlation")
    assert (pid[api] == pid[gpu]).all() and (rank[api] == rank[gpu]).all()
    assert (corr[api] == corr[gpu]).all()
    per_process = sum(sql(TORCHRUN, f"""SELECT COUNT(*) FROM "{t}" g JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                                         ON r.correlationId = g.correlationId
                                         AND (r.globalTid >> 24) = (g.globalPid >> 24)""")[0][0]
                      for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"))
    naive = sql(TORCHRUN, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL g JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                             ON r.correlationId = g.correlationId""")[0][0]
    kernel_links = int(np.isin(gpu, np.flatnonzero(kernels)).sum())
    assert len(api) == per_process
    assert kernel_links < naive
    cats = tr.events.column("category").to_numpy(zero_copy_only=False)
    assert set(names[cats == "cuda_driver"]) >= {"cuLaunchKernelEx"}
    ann = tr.to_pandas(kinds=(Kind.ANNOTATION,))
    assert (ann["name"] == "ncclSend").sum() == 132  # NVTX names through textId
    assert ann["name"].str.startswith("aten::").any()  # and through text


def test_2021_layout_loads_with_device_names():
    need_shared(OMP_2021)
    tr = parse_nsys(OMP_2021)
    assert list(tr.ranks) == [0]
    info = tr.ranks[0]
    assert [d.name for d in info.devices] == ["Tesla V100-PCIE-32GB"]
    assert info.devices[0].compute_capability == "7.0" and info.devices[0].sm_count == 80
    assert 30 << 30 < info.devices[0].total_memory_bytes < 34 << 30
    assert info.format_version.startswith("unknown")
    df = tr.to_pandas()
    assert set(df.loc[df["kind"] == "runtime", "category"]) == {"cuda_driver"}
    assert set(df.loc[df["kind"] == "memcpy", "copy_kind"]) == {"HtoD", "DtoH"}


def test_fuser_2024_metadata_and_devices():
    need_shared(FUSER)
    tr = parse_nsys(FUSER)
    info = tr.ranks[0]
    assert info.format_version == "2024.6.2.25"
    assert info.devices[0].name == "NVIDIA H100 80GB HBM3" and info.devices[0].total_memory_bytes == 84942979072
    assert info.base_time_ns == 1733860139400912216
    assert info.raw_metadata["export"]["EXPORT_PRODUCT_VERSION"] == "2024.6.2.25"
    assert info.unmapped.get("SCHED_EVENTS") == 288


# ------------------------------------------------------------------------------ errors


def test_text_file_is_rejected(tmp_path):
    p = tmp_path / "notes.sqlite"
    p.write_text("this is not a database\n")
    with pytest.raises(TraceFormatError) as exc:
        parse_nsys(p)
    assert str(p) in str(exc.value) and "SQLite" in str(exc.value)
    assert not looks_like_nsys(p)


def test_empty_file_is_rejected(tmp_path):
    p = tmp_path / "empty.sqlite"
    p.write_bytes(b"")
    with pytest.raises(TraceFormatError) as exc:
        parse_nsys(p)
    assert str(p) in str(exc.value)


@pytest.mark.parametrize("statement", ["PRAGMA user_version = 7", "CREATE TABLE notes (x TEXT)"])
def test_sqlite_without_nsight_tables_is_rejected(tmp_path, statement):
    p = tmp_path / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute(statement)
    con.commit()
    con.close()
    assert p.read_bytes().startswith(b"SQLite format 3\x00")
    with pytest.raises(TraceFormatError) as exc:
        parse_nsys(p)
    assert str(p) in str(exc.value) and "Nsight" in str(exc.value)
    assert not looks_like_nsys(p)


def test_damaged_sqlite_is_rejected(synthetic, tmp_path):
    db, _, _ = synthetic
    p = tmp_path / "cut.sqlite"
    p.write_bytes(db.read_bytes()[: 3 * 4096])
    with pytest.raises(TraceFormatError) as exc:
        parse_nsys(p)
    assert str(p) in str(exc.value)


def test_nsys_rep_without_nsys_explains_export(tmp_path, monkeypatch):
    p = tmp_path / "run.nsys-rep"
    p.write_bytes(b"\x00NSYS report, not SQLite")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(TraceFormatError) as exc:
        parse_nsys(p)
    text = str(exc.value)
    assert str(p) in text and "nsys export --type sqlite" in text


def _fake_nsys(bin_dir: Path, body: str) -> None:
    bin_dir.mkdir()
    script = bin_dir / "nsys"
    script.write_text(f"#!{sys.executable}\nimport sys, shutil\nargs = sys.argv[1:]\n{body}\n")
    script.chmod(0o755)


def test_nsys_rep_is_exported_with_nsys_on_path(synthetic, tmp_path, monkeypatch):
    db, truth, _ = synthetic
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00NSYS report")
    _fake_nsys(tmp_path / "bin", f"assert args[:3] == ['export', '--type', 'sqlite'], args\n"
                                 f"shutil.copyfile({str(db)!r}, args[args.index('--output') + 1])")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    tr = parse_nsys(rep)
    assert tr.summary()[1]["by_kind"]["kernel"] == truth["ranks"]["1"]["kernels"]
    exported = export_nsys_rep(rep)
    assert exported.suffix == ".sqlite" and looks_like_nsys(exported)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # cached: nsys is not needed again
    assert export_nsys_rep(rep) == exported


def test_nsys_rep_export_failure_is_a_format_error(tmp_path, monkeypatch):
    rep = tmp_path / "broken.nsys-rep"
    rep.write_bytes(b"garbage")
    _fake_nsys(tmp_path / "bin", "sys.stderr.write('Importer error: corrupt report\\n'); sys.exit(1)")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(TraceFormatError) as exc:
        parse_nsys(rep)
    assert str(rep) in str(exc.value) and "corrupt report" in str(exc.value)


def test_export_with_empty_tables_has_one_empty_rank(synthetic, tmp_path):
    db, _, _ = synthetic
    work = copy_db(db, tmp_path / "blank.sqlite")
    con = sqlite3.connect(work)
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS"):
        con.execute(f"DELETE FROM {t}")
    con.commit()
    con.close()
    tr = parse_nsys(work)
    assert tr.num_events == 0 and list(tr.ranks) == [0]
    assert [d.name for d in tr.ranks[0].devices] == ["NVIDIA H100 80GB HBM3"] * 2
    assert any("no events" in w for w in tr.warnings)


# ------------------------------------------------------- steps, emit_nvtx names, OS runtime calls


def _main_thread(pid: int) -> int:
    return make_nsys.VM | (pid << 24) | pid


def _insert_nvtx(con: sqlite3.Connection, rows: list[tuple[int, int, str, int]]) -> None:
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                    "VALUES (?, ?, 59, ?, ?, 0)", rows)


def _steps_of(db: Path) -> list[tuple[int, int, int, int]]:
    """(pid, start, end, N) of the synthetic export's step_N ranges, straight from the table."""
    rows = sql(db, "SELECT (globalTid >> 24) & 16777215, start, end, text FROM NVTX_EVENTS "
                   "WHERE text LIKE 'step\\_%' ESCAPE '\\' ORDER BY globalTid, start")
    return [(pid, start, end, int(text.split("_")[1])) for pid, start, end, text in rows]


def test_synthetic_nvtx_steps_are_found_by_default(synthetic):
    db, truth, tr = synthetic
    raw = _steps_of(db)
    assert len(raw) == sum(r["steps"] for r in truth["ranks"].values())
    steps = tr.steps.to_pandas()
    by_rank = {r: truth["ranks"][str(r)]["pid"] for r in tr.ranks}
    got = sorted((by_rank[int(r)], int(s), int(e), int(n)) for r, s, e, n in
                 zip(steps["rank"], steps["start_ns"], steps["end_ns"], steps["step"]))
    assert got == sorted(raw)


def test_profiler_steps_as_nvtx_win_and_lose_their_emit_nvtx_suffix(synthetic, tmp_path):
    """emit_nvtx records ProfilerStep#N as an NVTX range with ", op_id = K" appended: it is the
    default step marker over step_N, and the suffix goes from every name (counted)."""
    db, truth, _ = synthetic
    work = copy_db(db, tmp_path / "profiler_steps.sqlite")
    raw = _steps_of(db)
    con = sqlite3.connect(work)
    _insert_nvtx(con, [(s, e, f"ProfilerStep#{n + 10}, op_id = {900 + i}", _main_thread(pid))
                       for i, (pid, s, e, n) in enumerate(raw)])
    _insert_nvtx(con, [(s + 1, s + 2, f"aten::add, seq = {i}, op_id = {i + 1}, sizes = [[2, 3], []]",
                        _main_thread(pid)) for i, (pid, s, e, n) in enumerate(raw)])
    con.commit()
    con.close()
    tr = parse_nsys(work)
    names = set(tr.steps.column("name").to_pylist())
    assert names == {f"ProfilerStep#{n + 10}" for _, _, _, n in raw}
    assert sorted(tr.steps.column("step").to_pylist()) == sorted(n + 10 for _, _, _, n in raw)
    all_names = set(tr.names())
    assert "aten::add" in all_names and not any(", op_id =" in str(n) or ", seq =" in str(n) for n in all_names)
    renamed = sum(i.event_counts.get("NVTX_EVENTS.emit_nvtx_suffix_removed", 0) for i in tr.ranks.values())
    assert renamed == 2 * len(raw)
    # the user's marker still picks the other ranges
    chosen = tr.find_steps(r"^step_\d+$")
    assert sorted(chosen.column("step").to_pylist()) == sorted(n for _, _, _, n in raw)
    assert_every_row_accounted_for(tr)


def test_step_marker_reaches_the_nsys_parser_through_load_and_analyze(synthetic):
    db, truth, _ = synthetic
    tr = traceview.load(db, use_cache=False, step_marker=r"^backward$")
    assert set(tr.steps.column("name").to_pylist()) == {"backward"}
    report = traceview.analyze(db, step_marker=r"^backward$", use_cache=False)
    steps = report.table("temporal", "steps")
    assert len(steps) == sum(r["steps"] for r in truth["ranks"].values())
    assert set(steps["name"]) == {"backward"}


def _stall_gap(tr) -> tuple[int, int, int]:
    """(pid, start, end) of rank 0's first host-bound gap between two steps (the data-loader stall)."""
    from traceview.analyses import idle_gaps
    from traceview.findings import Options

    gaps = idle_gaps.analyze(context(tr, Options())).tables["gaps"]
    stall = gaps[(gaps["cause"] == "host_bound") & (gaps["rank"] == 0)].sort_values("dur_ns").iloc[-1]
    return int(tr.column("pid")[int(stall["api_row"])]), int(stall["start_ns"]), int(stall["end_ns"])


def _host_contexts(tr) -> dict[tuple[int, int], str]:
    from traceview.analyses import idle_gaps
    from traceview.findings import Options

    gaps = idle_gaps.analyze(context(tr, Options())).tables["gaps"]
    host = gaps[gaps["cause"] == "host_bound"]
    return {(int(s), int(e)): str(c) for s, e, c in zip(host["start_ns"], host["end_ns"], host["cpu_context"])}


def test_os_runtime_calls_and_nvtx_ranges_name_the_host_bound_gap(synthetic, tmp_path):
    db, truth, tr = synthetic
    pid, gap_start, gap_end = _stall_gap(tr)
    assert _host_contexts(tr)[(gap_start, gap_end)] == ""  # nothing on the thread spans the stall
    work = copy_db(db, tmp_path / "osrt.sqlite")
    con = sqlite3.connect(work)
    _insert_nvtx(con, [(gap_start - 50, gap_end + 50, "DataLoader.__next__", _main_thread(pid))])
    con.execute("CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, "
                "globalTid INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, nestingLevel INTEGER, "
                "callchainId INTEGER NOT NULL)")
    con.execute("INSERT INTO StringIds (id, value) VALUES (90001, 'pthread_cond_wait'), (90002, 'read')")
    con.executemany("INSERT INTO OSRT_API VALUES (?, ?, 27, ?, ?, 0, 0, 0)", [
        (gap_start - 20, gap_end + 20, _main_thread(pid), 90001),  # spans the gap, inside the NVTX range
        (gap_end + 100, gap_end + 200, _main_thread(pid), 90002),
    ])
    con.commit()
    con.close()
    with_nvtx_only = copy_db(work, tmp_path / "nvtx_only.sqlite")
    con = sqlite3.connect(with_nvtx_only)
    con.execute("DROP TABLE OSRT_API")
    con.commit()
    con.close()

    assert _host_contexts(parse_nsys(with_nvtx_only))[(gap_start, gap_end)] == "DataLoader.__next__"
    osrt = parse_nsys(work)
    assert _host_contexts(osrt)[(gap_start, gap_end)] == "pthread_cond_wait"  # the innermost range
    rows = np.flatnonzero(osrt.events.column("category").to_numpy(zero_copy_only=False) == "os_runtime")
    assert rows.size == 2
    assert set(osrt.kind_codes()[rows]) == {int(Kind.ANNOTATION)}
    assert set(osrt.column("pid")[rows]) == {pid} and set(osrt.column("tid")[rows]) == {pid}
    rank0 = osrt.ranks[0].event_counts
    assert rank0["OSRT_API.read"] == rank0["OSRT_API.mapped"] == 2
    assert "OSRT_API" not in osrt.ranks[0].unmapped
    assert osrt.steps.num_rows == tr.steps.num_rows  # OS runtime calls never become steps
    assert_every_row_accounted_for(osrt)


def test_torchrun_host_bound_gaps_name_an_nvtx_range():
    """Before: 93 of 501 host-bound gaps had no context and rank 1's finding read "mostly during
    (no CPU op)": they start in the pause between two top-level NVTX ranges, and every emit_nvtx name
    was unique (", seq = N, op_id = M"). Now each names the NVTX op the thread ran in the gap."""
    need_shared(TORCHRUN)
    from traceview.analyses import idle_gaps
    from traceview.findings import Options

    tr = parse_nsys(TORCHRUN)
    gaps = idle_gaps.analyze(context(tr, Options())).tables["gaps"]
    host = gaps[gaps["cause"] == "host_bound"]
    assert len(host) > 100
    contexts = host["cpu_context"].astype(str)
    assert (contexts != "").all()
    nvtx_names = set(tr.names()[tr.mask(Kind.ANNOTATION)])
    assert set(contexts) <= nvtx_names
    assert not any(", op_id =" in c for c in contexts)
    top = host.groupby(["rank", contexts])["dur_ns"].sum().groupby(level=0).idxmax()
    assert all(name.startswith(("aten::", "FlashAttnFunc", "FSDP::")) for _, name in top)
    report = traceview.analyze(tr)
    titles = [f["title"] for f in report["findings"] if f["code"] == "host_bound_gaps"]
    assert titles and all("(no CPU op)" not in t for t in titles)


# ------------------------------------------------------- NULLs, bad text, missing columns, locks


def _loosen(con: sqlite3.Connection, table: str) -> None:
    """Rebuild ``table`` without its NOT NULL constraints (CREATE TABLE AS keeps none), as a
    hand-edited or exotic export may be."""
    con.execute(f"CREATE TABLE loose AS SELECT * FROM {table}")
    con.execute(f"DROP TABLE {table}")
    con.execute(f"ALTER TABLE loose RENAME TO {table}")


def _edited(db: Path, tmp_path: Path, table: str, *statements: str) -> Path:
    work = copy_db(db, tmp_path / "edited.sqlite")
    con = sqlite3.connect(work)
    _loosen(con, table)
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()
    return work


KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


def _first_kernel_sql(column_sets: str) -> str:
    return f"UPDATE {KERNEL} SET {column_sets} WHERE rowid = (SELECT MIN(rowid) FROM {KERNEL})"


def _count(tr, key: str) -> int:
    return sum(info.event_counts.get(key, 0) for info in tr.ranks.values())


def test_null_start_is_skipped_and_counted(synthetic, tmp_path):
    db, _, fresh = synthetic
    tr = parse_nsys(_edited(db, tmp_path, KERNEL, _first_kernel_sql("start = NULL")))
    assert _count(tr, f"{KERNEL}.skipped_null_start") == 1
    assert tr.summary()[0]["by_kind"]["kernel"] + tr.summary()[1]["by_kind"]["kernel"] == sum(
        fresh.summary()[r]["by_kind"]["kernel"] for r in (0, 1)) - 1
    # it read as -1 before: one kernel spanning the whole clock
    assert tr.column("start_ns").min() >= fresh.column("start_ns").min()
    assert (tr.column("dur_ns") <= fresh.column("dur_ns").max()).all()
    assert any("no start" in w for w in tr.warnings)
    assert_every_row_accounted_for(tr)


def test_null_end_is_duration_zero_counted(synthetic, tmp_path):
    db, _, _ = synthetic
    tr = parse_nsys(_edited(db, tmp_path, KERNEL, _first_kernel_sql("end = NULL")))
    assert _count(tr, f"{KERNEL}.null_end_duration_0") == 1
    assert any(f"{KERNEL}: 1 rows have no end" in w for w in tr.warnings)
    assert_every_row_accounted_for(tr)


def test_null_device_is_skipped_not_gpu_minus_one(synthetic, tmp_path):
    db, _, _ = synthetic
    tr = parse_nsys(_edited(db, tmp_path, KERNEL, _first_kernel_sql("deviceId = NULL")))
    kernels = tr.kind_codes() == int(Kind.KERNEL)
    assert (tr.column("device")[kernels] >= 0).all()
    assert all(d.id >= 0 for info in tr.ranks.values() for d in info.devices)
    assert _count(tr, f"{KERNEL}.skipped_null_device") == 1
    assert_every_row_accounted_for(tr)


def test_null_global_tid_makes_no_extra_rank(synthetic, tmp_path):
    db, _, _ = synthetic
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    tr = parse_nsys(_edited(db, tmp_path, t, f"UPDATE {t} SET globalTid = NULL WHERE rowid <= 3"))
    assert sorted(tr.ranks) == [0, 1]
    assert (tr.column("pid") >= 0).all()
    assert tr.ranks[0].event_counts[f"{t}.no_rank_null_process"] == 3
    assert any("no process" in w for w in tr.warnings)
    assert_every_row_accounted_for(tr)


def test_null_event_type_is_skipped_with_its_reason(synthetic, tmp_path):
    db, _, _ = synthetic
    tr = parse_nsys(_edited(db, tmp_path, "NVTX_EVENTS",
                            "UPDATE NVTX_EVENTS SET eventType = NULL WHERE rowid = (SELECT MIN(rowid) FROM NVTX_EVENTS)"))
    assert _count(tr, "NVTX_EVENTS.skipped_null_event_type") == 1
    assert any("no eventType" in w for w in tr.warnings)
    assert_every_row_accounted_for(tr)


def test_string_values_that_are_null_or_not_utf8(synthetic, tmp_path):
    db, _, _ = synthetic
    kernel_name_id = sql(db, f"SELECT demangledName FROM {KERNEL} LIMIT 1")[0][0]
    work = _edited(db, tmp_path, "StringIds",
                   f"UPDATE StringIds SET value = CAST(X'6b65726e656cff' AS BLOB) WHERE id = {kernel_name_id}",
                   "UPDATE StringIds SET value = NULL WHERE id = (SELECT MAX(id) FROM StringIds)")
    con = sqlite3.connect(work)
    _loosen(con, "NVTX_EVENTS")
    con.execute("UPDATE NVTX_EVENTS SET text = X'66ff' WHERE text IS NOT NULL AND "
                "rowid = (SELECT MIN(rowid) FROM NVTX_EVENTS WHERE text IS NOT NULL AND eventType = 59)")
    con.commit()
    con.close()
    tr = parse_nsys(work)
    names = set(tr.names())
    assert "kernel\ufffd" in names and "f\ufffd" in names
    assert tr.ranks[0].event_counts["StringIds.value_not_utf8_replaced"] == 1
    assert tr.ranks[0].event_counts["StringIds.value_null_empty"] == 1
    assert _count(tr, "NVTX_EVENTS.text_not_utf8_replaced") == 1
    assert any("not UTF-8" in w for w in tr.warnings)


@pytest.mark.parametrize("table, column", [(KERNEL, "start"), ("StringIds", "value"), ("NVTX_EVENTS", "start")])
def test_missing_column_names_table_and_column(synthetic, tmp_path, table, column):
    db, _, _ = synthetic
    work = _edited(db, tmp_path, table, f"ALTER TABLE {table} DROP COLUMN {column}")
    with pytest.raises(TraceFormatError) as exc:
        parse_nsys(work)
    text = str(exc.value)
    assert f"lacks column {column} of table {table}" in text and "nsys version" in text, text


def test_locked_database_is_in_use_not_damaged(synthetic, tmp_path, monkeypatch):
    from traceview.parsers.nsys import rows as nsys_rows

    db, _, _ = synthetic
    work = copy_db(db, tmp_path / "busy.sqlite")
    monkeypatch.setattr(nsys_rows, "BUSY_TIMEOUT_S", 0.05)
    holder = sqlite3.connect(work)
    holder.execute("BEGIN EXCLUSIVE")  # another program writing it
    try:
        with pytest.raises(TraceFormatError) as exc:
            parse_nsys(work)
    finally:
        holder.rollback()
        holder.close()
    text = str(exc.value)
    assert str(work) in text and "locked" in text and "damaged" not in text, text
