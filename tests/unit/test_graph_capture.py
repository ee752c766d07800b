"""Graph replays matched to a capture (analyses/graph_capture.py, docs/metrics.md "Modules and ranges").

Known answers from sample_traces/make_graph_pair.py (a HIP pair matched by kernel name and
occurrence, with a node the replay skips and a kernel the capture lacks; a CUDA pair matched by
position), the shared xDiT Flux.1 capture/replay pair when ../shared is there, and the bad inputs.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import traceview
from traceview import Options

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "traces" / "kineto"
CAPTURE = SHARED / "tracelens_xdit_flux1_aiter_sage_capture_mi300x.json.gz"
REPLAY = SHARED / "tracelens_xdit_flux1_aiter_sage_profile_mi300x.json.gz"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    spec = importlib.util.spec_from_file_location("make_graph_pair", ROOT / "sample_traces" / "make_graph_pair.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("graph_pair")
    return out, module.write(out)


def analyze(replay: Path, capture: Path | None) -> traceview.Report:
    options = Options(graph_capture=(str(capture),) if capture else ())
    return traceview.analyze(str(replay), options, cache=False)


@pytest.mark.parametrize("variant", ["hip", "cuda", "cuda_nodes"])
def test_generated_pair_known_answer(pair: tuple[Path, dict], variant: str) -> None:
    out, truth = pair
    answer = truth[variant]
    report = analyze(out / variant / "replay.json.gz", out / variant / "capture.json.gz")
    matches = report.table("modules", "graph_capture")
    matched = matches[matches["rule"] == answer["rule"]]
    assert int(matched["activities"].sum()) == answer["matched_activities"]
    assert int(matches["activities"].sum()) == answer["replayed_activities"]
    gpu = report.table("modules", "range_gpu")
    leaves = gpu[gpu["path"].astype(str).isin(answer["gpu_ns_by_path"])]
    got = leaves.groupby(leaves["path"].astype(str))["inclusive_ns"].sum().to_dict()
    assert got == answer["gpu_ns_by_path"]
    # every replayed activity is still counted once: attributed + unattributed = busy
    att = report.table("modules", "attribution")
    busy = int(att["busy_ns"].iloc[0])
    assert int(att.loc[att["rule"].isin(["attributed", "unattributed"]), "gpu_ns"].sum()) == busy


def test_unmatched_kernels_are_counted_with_their_reason(pair: tuple[Path, dict]) -> None:
    out, truth = pair
    report = analyze(out / "hip" / "replay.json.gz", out / "hip" / "capture.json.gz")
    matches = report.table("modules", "graph_capture").set_index("rule")
    answer = truth["hip"]
    unmatched = answer["replayed_activities"] - answer["matched_activities"]
    reason = "not matched: no node of its kernel at that occurrence in the chosen capture"
    assert int(matches.loc[reason, "activities"]) == unmatched
    # the kernels no node matches keep the launch's range (rule graph_replay), never a guessed node
    att = report.table("modules", "attribution").set_index("rule")
    assert int(att.loc["graph_replay", "activities"]) == unmatched
    ops = report.table("modules", "graph_ops")
    assert set(ops["op"]) == {"aten::mm", "aten::_flash_attention_forward", "aten::gelu"}
    assert int(ops["activities"].sum()) == answer["matched_activities"]


def test_without_capture_replays_stay_under_the_launch_range(pair: tuple[Path, dict]) -> None:
    out, _ = pair
    report = analyze(out / "hip" / "replay.json.gz", None)
    assert report["summary"]["graph_replay_matched_share"] == 0.0
    assert report["summary"]["graph_replay_share"] > 0.9
    rules = set(report.table("modules", "attribution")["rule"])
    assert "capture" not in rules and "graph_replay" in rules
    paths = set(report.table("modules", "range_gpu")["path"].astype(str))
    assert paths == {"decode"}


def test_position_matching_needs_one_stream(pair: tuple[Path, dict], tmp_path: Path) -> None:
    """A CUDA replay whose kernels run on two streams is not matched by position."""
    import gzip

    out, _ = pair
    doc = json.loads(gzip.decompress((out / "cuda" / "replay.json.gz").read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[1]["tid"] = kernels[1]["args"]["stream"] = 99
    path = tmp_path / "replay.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    report = analyze(path, out / "cuda" / "capture.json.gz")
    matches = report.table("modules", "graph_capture")
    assert int(matches.loc[matches["rule"] == "capture_order", "activities"].sum()) == len(kernels) - 12
    assert "not matched: no captured graph shares a kernel with its replay" in set(matches["rule"])


def test_recorded_node_ids_give_the_order_and_a_node_table(pair: tuple[Path, dict]) -> None:
    """Two streams: start order is not the capture's order, node ids are; each node in every replay."""
    out, _ = pair
    report = analyze(out / "cuda_nodes" / "replay.json.gz", out / "cuda_nodes" / "capture.json.gz")
    nodes = report.table("modules", "graph_nodes")
    assert len(nodes) == 12 and set(nodes["replays"]) == {4} and set(nodes["graph_id"]) == {7}
    assert nodes["graph_node_id"].is_unique
    plain = analyze(out / "cuda" / "replay.json.gz", None)
    assert plain.table("modules", "graph_nodes").empty


def test_missing_capture_file_is_one_line(pair: tuple[Path, dict], tmp_path: Path) -> None:
    out, _ = pair
    run = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(out / "hip" / "replay.json.gz"),
                          "--graph-capture", str(tmp_path / "nope.json"), "--no-cache"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--graph-capture" in lines[0], run.stderr


def test_capture_changes_the_cache_key(pair: tuple[Path, dict]) -> None:
    from traceview.report_cache import report_key

    out, _ = pair
    files = [out / "hip" / "replay.json.gz"]
    plain = report_key(files, Options())
    with_capture = report_key(files, Options(graph_capture=(str(out / "hip" / "capture.json.gz"),)))
    other = report_key(files, Options(graph_capture=(str(out / "cuda" / "capture.json.gz"),)))
    assert len({plain, with_capture, other}) == 3


@pytest.mark.skipif(not CAPTURE.exists(), reason="../shared/traces is not here (the shared xDiT capture/replay pair)")
def test_shared_xdit_pair_matches_at_least_95_percent() -> None:
    before = analyze(REPLAY, None)
    after = analyze(REPLAY, CAPTURE)
    assert before["summary"]["graph_replay_matched_share"] == 0.0
    assert after["summary"]["graph_replay_share"] == pytest.approx(before["summary"]["graph_replay_share"])
    assert after["summary"]["graph_replay_matched_share"] >= 0.95
    # an independent count from the raw files: kernels under the 4 hipGraphLaunch calls, named nodes captured
    import gzip

    events = json.loads(gzip.decompress(REPLAY.read_bytes()))["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if e.get("name") == "hipGraphLaunch"}
    replayed = sum(1 for e in events if e.get("cat") == "kernel" and e["args"].get("correlation") in launches)
    matches = after.table("modules", "graph_capture")
    assert int(matches["activities"].sum()) == replayed
    ops = after.table("modules", "graph_ops")
    assert ops.iloc[0]["op"] == "aten::mm"
    assert np.isclose(float(after["summary"]["attributed_share"]), 1.0)


def test_nsight_graph_node_ids_are_read(tmp_path: Path) -> None:
    """An export with --cuda-graph-trace=node has graphId/graphNodeId kernel columns (0: none)."""
    import shutil
    import sqlite3

    path = tmp_path / "graph_nodes.sqlite"
    shutil.copy(ROOT / "sample_traces" / "synthetic_nsys.sqlite", path)
    with sqlite3.connect(path) as db:
        columns = {r[1] for r in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        assert {"graphId", "graphNodeId"} <= columns  # the export's own columns, 0 or NULL off graphs
        rowids = [r[0] for r in db.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 5")]
        for i, rowid in enumerate(rowids):
            db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphId = 3, graphNodeId = ? WHERE rowid = ?",
                       (100 + i, rowid))
    trace = traceview.load(str(path), use_cache=False)
    node_ids = trace.events.column("graph_node_id")
    assert len(node_ids) - node_ids.null_count == 5
    assert sorted(v for v in node_ids.to_pylist() if v is not None) == list(range(100, 105))
    graph_ids = trace.events.column("graph_id")
    assert {v for v in graph_ids.to_pylist() if v is not None} == {3}
