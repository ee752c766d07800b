"""Discovery (traceview/discovery.py): a command finds its inputs once, as records (path, format,
stat, cache key), reading each file's head once and keying it once between the trace cache and the
report cache."""

from __future__ import annotations

import collections
import pickle
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES

from traceview import discovery, trace_cache
from traceview.errors import TraceFormatError

FOLDER = SAMPLE_TRACES / "synthetic_4rank"


def _counted(monkeypatch: pytest.MonkeyPatch) -> tuple[collections.Counter, collections.Counter]:
    heads: collections.Counter = collections.Counter()
    keys: collections.Counter = collections.Counter()
    read_head, digest_ends = discovery.read_head, trace_cache.digest_file_ends

    def counted_head(path: Path, size: int = discovery.HEAD_BYTES) -> bytes:
        heads[Path(path).name] += 1
        return read_head(path, size)

    def counted_ends(digest, path: Path, size: int) -> None:
        keys[Path(path).name] += 1
        digest_ends(digest, path, size)

    monkeypatch.setattr(discovery, "read_head", counted_head)
    monkeypatch.setattr(trace_cache, "digest_file_ends", counted_ends)
    return heads, keys


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_command_reads_each_head_once_and_keys_each_file_once(use_cache: bool, monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    from traceview.commands._common import analyze_with_progress
    from traceview.findings import Options

    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path / "cache"))
    heads, keys = _counted(monkeypatch)
    report = analyze_with_progress([str(FOLDER)], Options(), use_cache=use_cache)
    assert report["summary"]
    names = sorted(p.name for p in FOLDER.glob("*.json.gz"))
    assert heads == {name: 1 for name in names} | {"truth.json": 1}  # truth.json: sniffed once, skipped
    # the trace cache and the report cache share one key per file; without the caches none is made
    assert keys == ({name: 1 for name in names} if use_cache else {})


def test_discovery_skips_what_is_not_a_trace_and_keeps_a_named_bad_file(tmp_path: Path) -> None:
    found = discovery.discover([FOLDER])
    assert [f.path.name for f in found.files] == sorted(p.name for p in FOLDER.glob("*.json.gz"))
    assert [p.name for p in found.skipped] == ["truth.json"]
    assert {f.format.name for f in found.files if f.format} == {"kineto"}
    assert found.total_bytes == sum(p.stat().st_size for p in FOLDER.glob("*.json.gz"))
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    listed = discovery.discover([bad])  # listed (the app's runs list it); its load says what is wrong
    assert listed.files[0].problem is not None
    with pytest.raises(TraceFormatError, match="not a trace traceview can read"):
        listed.files[0].checked_format()
    import traceview

    with pytest.raises(TraceFormatError, match="notes.txt"):
        traceview.load(bad, use_cache=False)


def test_records_travel_to_worker_processes(tmp_path: Path) -> None:
    found = discovery.discover([FOLDER])
    back = pickle.loads(pickle.dumps(found))
    assert [(f.path, f.format.name, f.size) for f in back.files] == [(f.path, f.format.name, f.size) for f in found.files]
    import traceview

    # a load of the records a caller found gives the Trace a load of the paths gives
    assert traceview.load(found, use_cache=False).events.equals(traceview.load(FOLDER, use_cache=False).events)
