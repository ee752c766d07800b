"""The report cache (traceview/report_cache.py): a report read back is the report computed (data,
tables, every renderer's output), and a change of options, trace file or code gives a new key."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

import traceview
from traceview import report_cache
from traceview.findings import Options
from traceview.discovery import find_trace_files
from traceview.render import get_renderer

from conftest import SAMPLE_TRACES, SHARED_TRACES

SAMPLES = [SAMPLE_TRACES / "synthetic_4rank", SAMPLE_TRACES / "torch_cpu_mlp.json.gz",
           SAMPLE_TRACES / "synthetic_nsys.sqlite"]
SHARED_KINETO = sorted((SHARED_TRACES / "kineto").glob("*.json*"))[:2] if (SHARED_TRACES / "kineto").is_dir() else []


def _analyze(path: Path, options: Options | None = None, use_cache: bool = True) -> traceview.Report:
    return traceview.analyze(str(path), options or Options(), cache=use_cache)


def _key(path: Path, options: Options | None = None) -> str | None:
    skipped: list[Path] = []
    files = find_trace_files([str(path)], skipped)
    return report_cache.report_key(files, options or Options(), skipped)


def _rendered(report: traceview.Report) -> dict[str, str | bytes]:
    out: dict[str, str | bytes] = {}
    for name in ("text", "markdown", "json", "html"):
        out[name] = get_renderer(name)(top=5, details=True, summary_only=False).render(report)
    return out


def _assert_same_report(computed: traceview.Report, cached: traceview.Report) -> None:
    assert cached.data == computed.data
    assert cached.to_json() == computed.to_json()
    assert list(cached.results) == list(computed.results)
    for name, result in computed.results.items():
        back = cached.results[name]
        assert back.warnings == result.warnings, name
        assert list(back.tables) == list(result.tables), name
        for table, frame in result.tables.items():
            other = back.tables[table]
            assert other.equals(frame) and other.dtypes.equals(frame.dtypes), f"{name}.{table}"
            assert other.index.equals(frame.index), f"{name}.{table}"
    assert _rendered(cached) == _rendered(computed)


@pytest.mark.parametrize("path", SAMPLES + SHARED_KINETO, ids=lambda p: p.name)
def test_a_report_read_back_is_the_report_computed(path: Path) -> None:
    computed = _analyze(path)
    key = _key(path)
    assert key is not None and report_cache.cache_path(key).exists()
    cached = _analyze(path)
    assert cached is not computed and cached.trace is not None
    assert report_cache.read_report(key, None) is not None  # it came from the file
    _assert_same_report(computed, cached)
    # and both equal a report computed without any cache
    assert _analyze(path, use_cache=False).data == cached.data


def test_the_file_is_data_not_pickle() -> None:
    _analyze(SAMPLES[1])
    files = list(report_cache.cache_folder().glob("*" + report_cache.SUFFIX))
    assert len(files) == 1
    raw = files[0].read_bytes()
    assert raw.startswith(report_cache.MAGIC)
    with pytest.raises(Exception):
        pickle.loads(raw)


def test_options_trace_and_code_make_new_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(SAMPLES[1].read_bytes())
    files = find_trace_files([str(trace)])
    base = report_cache.report_key(files, Options())
    assert base == report_cache.report_key(files, Options())  # stable
    for options in (Options(top_n=21), Options(step_marker="x"), Options(ranks=(0,)), Options(min_gap_ns=1),
                    Options(whole_only=True), Options(comm_patterns=("lib=foo",))):
        assert report_cache.report_key(files, options) != base, options
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    touched = report_cache.report_key(files, Options())
    assert touched != base
    monkeypatch.setattr(traceview, "__version__", traceview.__version__ + ".post1")
    monkeypatch.setattr(report_cache, "_FINGERPRINT", None)
    assert report_cache.report_key(files, Options()) != touched


def test_an_option_change_computes_again() -> None:
    first = _analyze(SAMPLES[0])
    other = _analyze(SAMPLES[0], Options(top_n=21))
    assert len(list(report_cache.cache_folder().glob("*" + report_cache.SUFFIX))) == 2
    assert other.data["summary"] == first.data["summary"]


@pytest.mark.parametrize("damage", ["truncated", "garbage", "other-version"])
def test_a_damaged_file_is_computed_again(damage: str) -> None:
    computed = _analyze(SAMPLES[1])
    key = _key(SAMPLES[1])
    assert key is not None
    path = report_cache.cache_path(key)
    raw = path.read_bytes()
    path.write_bytes({"truncated": raw[: len(raw) // 2], "garbage": b"\x00\xff" * 64,
                      "other-version": raw.replace(f'"version": "{report_cache.FORMAT_VERSION}"'.encode(),
                                                   b'"version": "0"', 1)}[damage])
    assert report_cache.read_report(key, None) is None
    again = _analyze(SAMPLES[1])
    assert again.data == computed.data
    assert report_cache.read_report(key, None) is not None  # stored again


def test_files_a_folder_scan_skips_are_in_the_key(tmp_path: Path) -> None:
    """The report names each skipped file in a warning, as found: another name is another report."""
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "rank0.json.gz").write_bytes(SAMPLES[1].read_bytes())
    (tmp_path / "b" / "notes.json").write_text('{"not": "a trace"}')
    plain, with_notes = _analyze(tmp_path / "a"), _analyze(tmp_path / "b")
    assert "notes.json: skipped" in str(with_notes.data["warnings"])
    assert "notes.json" not in str(plain.data)
    assert _key(tmp_path / "b") != report_cache.report_key(find_trace_files([str(tmp_path / "b")]), Options())
    again = _analyze(tmp_path / "b")
    assert again.data == with_notes.data


def test_the_app_and_analyze_share_a_report() -> None:
    """`traceview analyze TRACE` (default options) stores the report the app's first page reads."""
    from traceview.app.runs import RunStore, discover_runs, result_key

    computed = _analyze(SAMPLES[1], Options(top_n=20))  # `analyze`'s options with the default --top
    [run] = discover_runs([str(SAMPLES[1])])
    assert result_key(run, None) == _key(SAMPLES[1])
    ctx = RunStore([run]).context(0)
    assert ctx.from_disk and ctx.report.data == computed.data


def test_a_file_is_keyed_once_per_discovery_and_read_again_after(tmp_path: Path) -> None:
    """A discovered file (one command's inputs) keeps the key computed first: the load and the report
    key read it once between them; a new discovery reads a rewrite of the same size and mtime again
    and gets a new key."""
    from traceview.discovery import discover

    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [1]}')
    stamp = path.stat().st_mtime_ns

    def rewrite(text: bytes) -> None:
        path.write_bytes(text)
        os.utime(path, ns=(stamp, stamp))  # same size, same mtime: only the content says it changed

    found = discover([path]).files[0]
    first = found.cache_key
    rewrite(b'{"traceEvents": [2]}')
    assert found.cache_key == first  # not read again within the operation
    second = discover([path]).files[0].cache_key
    assert second != first  # a new operation reads the file
    rewrite(b'{"traceEvents": [3]}')
    path.touch()  # a new mtime: a new identity
    assert discover([path]).files[0].cache_key not in (first, second)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_a_report_cut_in_memory_is_stored_whole(path: Path) -> None:
    """`traceview analyze` keeps cut tables in memory (``whole_tables=False``) while the cache's writer
    is given every whole table as its analysis ends: the report read back is the whole report."""
    cut = traceview.analyze(str(path), Options(), whole_tables=False)
    key = _key(path)
    assert key is not None and report_cache.cache_path(key).exists()
    cached = _analyze(path)
    whole = _analyze(path, use_cache=False)
    _assert_same_report(whole, cached)
    assert cut.data == whole.data


def test_the_cut_tables_of_a_run_are_smaller_than_the_stored_ones() -> None:
    """(the test above would not see a writer given the cut tables on traces whose tables are small)"""
    path = SAMPLES[0]
    cut = traceview.analyze(str(path), Options(top_n=1), whole_tables=False)
    cached = _analyze(path, Options(top_n=1))
    rows = {(a, t): len(f) for a, r in cut.results.items() for t, f in r.tables.items()}
    assert any(len(f) > rows.get((a, t), 0) for a, r in cached.results.items() for t, f in r.tables.items())


def test_a_report_read_back_converts_its_tables_when_used() -> None:
    """The file is memory-mapped and a table converted from it when first used: a rendered report
    (from its data) converts none."""
    computed = _analyze(SAMPLES[0])
    key = _key(SAMPLES[0])
    assert key is not None
    cached = report_cache.read_report(key, None)
    assert cached is not None
    mapped = [r.tables for r in cached.results.values() if r.tables]
    assert mapped and all(isinstance(t, report_cache.MappedTables) and not t.frames for t in mapped)
    assert get_renderer("json")().render(cached) == get_renderer("json")().render(computed)
    name, result = next((n, r) for n, r in computed.results.items() if r.tables)
    table = next(iter(result.tables))
    assert cached.table(name, table).equals(result.tables[table])
    assert list(cached.results[name].tables.frames) == [table]


def test_a_run_stopped_midway_stores_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped after every analysis has written its tables (Ctrl-C in the reduce): no report file and
    no temporary file are left, and the next run computes and stores the report."""
    from traceview import pipeline

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    real = pipeline.sink_cross_rank_tables
    monkeypatch.setattr(pipeline, "sink_cross_rank_tables", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _analyze(SAMPLES[0])
    folder = report_cache.cache_folder()
    assert not list(folder.glob("*" + report_cache.SUFFIX)) and not list(folder.glob(".*"))
    monkeypatch.setattr(pipeline, "sink_cross_rank_tables", real)  # (not undo: the cache folder is patched too)
    _analyze(SAMPLES[0])
    assert len(list(folder.glob("*" + report_cache.SUFFIX))) == 1


def test_the_file_of_a_killed_run_is_never_read_and_is_removed(tmp_path: Path) -> None:
    """A writer killed midway (no rename) leaves its temporary file: it is not the key's file, so
    the report is computed again, and the next writer removes it (its process is gone)."""
    import subprocess
    import sys

    key = _key(SAMPLES[1])
    assert key is not None
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    writer = report_cache.ReportWriter(key)
    writer.add_table("kernels", "kernels", _analyze(SAMPLES[1], use_cache=False).table("kernels", "kernels"))
    writer.file.close()  # as a kill leaves it: written in part, never renamed
    assert writer.temp_path is not None
    left = writer.temp_path.with_name(f".{key}.{gone.stdout.strip()}{report_cache.TEMP_SUFFIX}")
    writer.temp_path.rename(left)
    assert report_cache.read_report(key, None) is None
    _analyze(SAMPLES[1])
    assert report_cache.read_report(key, None) is not None
    assert not left.exists()


def test_a_file_of_the_previous_format_is_computed_again() -> None:
    """Format 4 (header first, no end marker) is ignored, not misread."""
    computed = _analyze(SAMPLES[1])
    key = _key(SAMPLES[1])
    assert key is not None
    path = report_cache.cache_path(key)
    header = b'{"version": "4", "data": {}, "analyses": {}}'
    path.write_bytes(report_cache.MAGIC + len(header).to_bytes(8, "little") + header)
    assert report_cache.read_report(key, None) is None
    assert _analyze(SAMPLES[1]).data == computed.data
