"""The column-wise rewrites of issue 12 (report records, grouped tables, interval algebra, scrubbing)
give exactly what the per-row / pandas-merge definitions they replaced gave: each test computes the
old definition here, from the same inputs, and compares the tables (values, dtypes, order) or values.

The whole-report proof (every shared and sample trace, JSON byte for byte) is a script run recorded
in the session notes; these tests keep the pieces honest on the sample traces in a few seconds."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import SAMPLE_TRACES, context

import traceview
from traceview import intervals as iv
from traceview.analyses import idle_gaps, synchronization
from traceview.analyses.kernels import kernel_tables
from traceview.analyses.steps import NO_STEP, activity, cpu_op_nesting, step_column
from traceview.findings import Options
from traceview.pipeline import analyze
from traceview.plain import plain, records
from traceview.secrets import REDACTED, scrub

SAMPLES = ["synthetic_4rank", "synthetic_nsys.sqlite", "torch_cpu_mlp.json.gz"]


@pytest.fixture(scope="module", params=SAMPLES)
def trace(request: pytest.FixtureRequest) -> traceview.Trace:
    return traceview.load(SAMPLE_TRACES / request.param, use_cache=False)


# ------------------------------------------------------------------------------------ report


def _plain_reference(value, key=""):
    """The general definition of ``plain`` (before its exact-type fast path)."""
    if isinstance(value, dict):
        return {str(k): _plain_reference(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, np.ndarray)):
        items = sorted(value) if isinstance(value, set) else list(value)
        return [_plain_reference(v, key) for v in items]
    if value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return None
    if np.isscalar(value) and not isinstance(value, str) and bool(pd.isna(value)):
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if math.isinf(float(value)):
            return None
        return int(round(float(value))) if key.endswith(("_ns", "_ns_per_step")) else float(value)
    return str(value)


def test_plain_fast_path_equals_general_definition():
    values = {"a_ns": 2.5, "b_ns": 3.5, "c": 2.5, "n": float("nan"), "i": float("inf"), "t": True, "np_t": np.bool_(0),
              "k": 7, "np_k": np.int32(-3), "f32_ns": np.float32(1.5), "s": "x", "np_s": np.str_("y"), "na": pd.NA,
              "none": None, "l": [1, 2.0, "z", None], "tup": (np.int64(4), np.float64("nan")), "set": {3, 1, 2},
              "arr": np.array([1.5, 2.5]), "nested": {"x_ns": [1.4, 1.6], 5: {"y": np.float64(0.25)}}}
    got, want = plain(values), _plain_reference(values)
    assert got == want
    # the same types too (an int where the reference gives an int, not a float equal to it)
    assert repr(got) == repr(want)


def test_records_equal_per_cell_plain_of_every_table(trace):
    report = analyze(trace, Options())
    tables = [t for r in report.results.values() for t in r.tables.values() if len(t.columns)]
    assert tables
    for frame in tables:
        columns = [str(c) for c in frame.columns]
        expected = [{c: plain(v, c) for c, v in zip(columns, row)} for row in frame.itertuples(index=False, name=None)]
        got = records(frame, columns)
        assert repr(got) == repr(expected)


def test_scrub_keeps_numbers_and_still_redacts_secret_keys():
    rows = [{"name": "k", "dur_ns": 5, "share": 0.5, "flag": True, "none": None}] * 50
    doc = {"rows": rows, "api_key": 12345, "HF_TOKEN": 3.5, "env": {"WANDB_API_KEY": "abc123def456"}}
    out = scrub(doc)
    assert out["rows"] == rows
    assert out["api_key"] == REDACTED and out["HF_TOKEN"] == REDACTED
    assert out["env"]["WANDB_API_KEY"] == REDACTED
    # a secret-shaped key is replaced every time it is met, not only the first
    token = "hf_" + "a1B2" * 9
    again = scrub({"t": [{token: 1}, {token: 2}]})
    assert all(token not in d for d in again["t"])


# ------------------------------------------------------------------------------------ idle gaps


def _by_cause_reference(act, gaps: pd.DataFrame, step_gaps: pd.DataFrame) -> pd.DataFrame:
    groups = [pd.DataFrame({"rank": act.rank, "device": act.device, "step": np.full(len(act), NO_STEP)})]
    in_step = act.step != NO_STEP
    groups.append(pd.DataFrame({"rank": act.rank[in_step], "device": act.device[in_step], "step": act.step[in_step]}))
    keys = pd.concat(groups).drop_duplicates().sort_values(["rank", "device", "step"])
    full = keys.merge(pd.DataFrame({"cause": list(idle_gaps.CAUSES)}), how="cross")
    parts = []
    for frame, whole in ((gaps, True), (step_gaps, False)):
        f = frame[["rank", "device", "step", "cause", "dur_ns"]].copy()
        f["cause"] = f["cause"].astype(str)
        f["step"] = NO_STEP if whole else f["step"].astype("int64")
        parts.append(f)
    agg = pd.concat(parts, ignore_index=True).groupby(["rank", "device", "step", "cause"], sort=False).agg(
        gaps=("dur_ns", "size"), idle_ns=("dur_ns", "sum")).reset_index()
    out = full.merge(agg, on=["rank", "device", "step", "cause"], how="left")
    out["gaps"] = out["gaps"].fillna(0).astype(np.int64)
    out["idle_ns"] = out["idle_ns"].fillna(0).astype(np.int64)
    out["step"] = pd.array([None if s == NO_STEP else int(s) for s in out["step"]], dtype="Int64")
    out["rank"] = out["rank"].astype(np.int64)
    out["device"] = out["device"].astype(np.int64)
    return out.reset_index(drop=True)


def _histogram_reference(gaps: pd.DataFrame) -> pd.DataFrame:
    bucket = np.searchsorted(idle_gaps.BUCKET_EDGES, gaps["dur_ns"].to_numpy(), side="right")
    frame = pd.DataFrame({"rank": gaps["rank"], "device": gaps["device"], "bucket": bucket, "dur_ns": gaps["dur_ns"]})
    agg = frame.groupby(["rank", "device", "bucket"]).agg(gaps=("dur_ns", "size"), idle_ns=("dur_ns", "sum"))
    full = gaps[["rank", "device"]].drop_duplicates().merge(
        pd.DataFrame({"bucket": np.arange(len(idle_gaps.BUCKET_LABELS))}), how="cross")
    out = full.merge(agg.reset_index(), on=["rank", "device", "bucket"], how="left").fillna({"gaps": 0, "idle_ns": 0})
    out["label"] = [idle_gaps.BUCKET_LABELS[b] for b in out["bucket"]]
    out["gaps"] = out["gaps"].astype(np.int64)
    out["idle_ns"] = out["idle_ns"].astype(np.int64)
    out = out[["rank", "device", "bucket", "label", "gaps", "idle_ns"]]
    return out.sort_values(["rank", "device", "bucket"]).reset_index(drop=True)


def _histogram_by_cause_reference(gaps: pd.DataFrame) -> pd.DataFrame:
    bucket = np.searchsorted(idle_gaps.BUCKET_EDGES, gaps["dur_ns"].to_numpy(), side="right")
    frame = pd.DataFrame({"rank": gaps["rank"].to_numpy(), "device": gaps["device"].to_numpy(),
                          "cause": gaps["cause"].astype(str).to_numpy(), "bucket": bucket,
                          "dur_ns": gaps["dur_ns"].to_numpy()})
    agg = frame.groupby(["rank", "device", "cause", "bucket"], sort=True).agg(
        gaps=("dur_ns", "size"), idle_ns=("dur_ns", "sum")).reset_index()
    agg["gaps"] = agg["gaps"].astype(np.int64)
    agg["idle_ns"] = agg["idle_ns"].astype(np.int64)
    return agg


def test_idle_gap_summaries_equal_grouped_definitions(trace):
    ctx = context(trace, Options())
    tables = idle_gaps.compute(ctx)
    act = activity(ctx)
    pd.testing.assert_frame_equal(tables["by_cause"], _by_cause_reference(act, tables["gaps"], tables["step_gaps"]))
    pd.testing.assert_frame_equal(tables["histogram"], _histogram_reference(tables["gaps"]))
    pd.testing.assert_frame_equal(tables["histogram_by_cause"], _histogram_by_cause_reference(tables["gaps"]))


# ------------------------------------------------------------------------------------ kernels


def test_kernel_categories_equal_grouped_definition(trace):
    act = activity(context(trace, Options()))
    if len(act) == 0:
        pytest.skip("no GPU activity in this sample")
    got = kernel_tables(trace, act, 20)["categories"]
    kernels = kernel_tables(trace, act, 20)["kernels"]
    whole = got[got["step"].isna()]
    # each category's whole-trace total is the sum of its kernels' totals, and shares add up per GPU
    expected = kernels.groupby(["rank", "device", "category"])["total_ns"].sum()
    assert whole.set_index(["rank", "device", "category"])["total_ns"].sort_index().equals(expected.sort_index())
    shares = got.groupby(["rank", "device", got["step"].fillna(NO_STEP)])["share_pct"].sum()
    assert np.allclose(shares.to_numpy(), 100.0)


# ------------------------------------------------------------------------------------ synchronization


def _by_step_reference(calls: pd.DataFrame) -> pd.DataFrame:
    c = calls.copy()
    c["is_sync"] = c["call_type"].isin(["device_sync", "stream_sync", "event_sync"])
    c["is_copy"] = c["call_type"].isin(["blocking_copy", "copy_then_sync"])
    c["is_pageable"] = c["call_type"] == "pageable_copy"
    c["copy_count"] = c["is_copy"] & ~(c["call_type"].eq("copy_then_sync") & c["api"].str.contains("Synchronize"))
    sums = {"sync_calls": ("is_sync", None), "sync_blocked_ns": ("is_sync", "dur_ns"),
            "sync_cost_ns": ("is_sync", "cost_ns"), "blocking_copies": ("copy_count", None),
            "blocking_copy_blocked_ns": ("is_copy", "dur_ns"), "blocking_copy_cost_ns": ("is_copy", "cost_ns"),
            "pageable_copies": ("is_pageable", None), "pageable_cost_ns": ("is_pageable", "cost_ns")}
    frames = []
    for whole in (True, False):
        d = c.assign(step_key=NO_STEP) if whole else c[c["step"].notna()].assign(step_key=lambda f: f["step"].astype(
            np.int64))
        if d.empty:
            continue
        masked = pd.DataFrame({n: d[f].astype(np.int64) if v is None else d[v].where(d[f], 0)
                               for n, (f, v) in sums.items()}, index=d.index)
        masked["rank"], masked["step_key"] = d["rank"], d["step_key"]
        frames.append(masked.groupby(["rank", "step_key"])[list(sums)].sum().reset_index())
    st = pd.concat(frames, ignore_index=True).sort_values(["rank", "step_key"])
    st["step"] = step_column(st["step_key"])
    for col in sums:
        st[col] = st[col].astype(np.int64)
    return st[["rank", "step", *sums]].reset_index(drop=True)


def test_sync_by_step_equals_grouped_definition():
    trace = traceview.load(SAMPLE_TRACES / "synthetic_4rank", use_cache=False)
    ctx = context(trace, Options())
    calls = synchronization.call_table(ctx, activity(ctx))
    if calls.empty:
        pytest.skip("no blocking calls in the sample")
    got = synchronization.summaries(calls)["by_step"]
    pd.testing.assert_frame_equal(got, _by_step_reference(calls))


# ------------------------------------------------------------------------------------ intervals


def test_union_by_check_and_skip_give_union_by():
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(0, 30))
        k, s = rng.integers(0, 4, n), rng.integers(0, 200, n)
        e = s + rng.integers(-3, 40, n)
        canon = iv.union_by(k, s, e)
        assert iv.is_union_by(*canon)
        assert iv.is_union_by(k, s, e) == all(np.array_equal(x, y) for x, y in zip(canon, (k, s, e)))
        other = iv.union_by(rng.integers(0, 4, n), s + 7, e + 11)
        # already-canonical inputs skip the sort: the same answer as from the raw intervals
        for fn in (iv.intersect_by, iv.subtract_by):
            assert all(np.array_equal(x, y) for x, y in zip(fn(canon, other), fn((k, s, e), other)))


def test_shared_cpu_op_nesting_answers_as_a_fresh_index(trace):
    """The shared CPU-op index (the derived input ``cpu_op_nesting``: synchronization, memory) finds the same innermost and
    outermost ops as an index built over the ops and the queries' threads together."""
    nest = cpu_op_nesting(context(trace))
    if nest.rows.size == 0:
        pytest.skip("no CPU ops in this sample")
    rng = np.random.default_rng(3)
    q = rng.integers(0, trace.num_events, 500)
    start = trace.column("start_ns")
    ops = nest.rows
    end = start + np.maximum(trace.column("dur_ns"), 0)
    rank, pid, tid = trace.column("rank"), trace.column("pid"), trace.column("tid")
    codes, _ = iv.combine_keys(np.concatenate([rank[ops], rank[q]]).astype(np.int64),
                               np.concatenate([pid[ops], pid[q]]), np.concatenate([tid[ops], tid[q]]))
    ok, qk = codes[: ops.size], codes[ops.size:]
    depth = iv.nesting_depth(ok, start[ops], end[ops])
    want = iv.innermost_covering(ok, start[ops], end[ops], qk, start[q], end[q], depth=depth)
    got = nest.index.covering(nest.thread_codes(rank[q], pid[q], tid[q]), start[q], end[q])
    assert np.array_equal(got, want)
    outer = depth == 0
    want0 = iv.innermost_covering(ok[outer], start[ops][outer], end[ops][outer], qk, start[q], end[q],
                                  depth=depth[outer])
    got0 = nest.outer_index.covering(nest.thread_codes(rank[q], pid[q], tid[q]), start[q], end[q])
    assert np.array_equal(got0, want0)


def test_nested_index_with_given_depth_equals_its_own():
    """Passing ``nesting_depth`` to ``NestedIndex`` (computed once, shared) builds the same levels."""
    rng = np.random.default_rng(5)
    for _ in range(500):
        n = int(rng.integers(1, 40))
        scale = 2**55 if rng.random() < 0.2 else 1  # also the compressed-coordinates case
        k, s = rng.integers(0, 4, n), rng.integers(-50, 50, n) * scale
        e = s + rng.integers(-5, 60, n) * max(scale >> 5, 1)
        own, given = iv.NestedIndex(k, s, e), iv.NestedIndex(k, s, e, iv.nesting_depth(k, s, e))
        assert len(own.levels) == len(given.levels)
        assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(own.levels, given.levels))


# ------------------------------------------------------------------------------------ accounting


def test_largest_claims_equal_the_whole_sort():
    """``Claims.largest`` sorts only the intervals as long as the n-th longest: the same list as the
    lexsort of every interval gave, ties (equal lengths, equal starts) included."""
    from traceview.claims import Claims, gpu_key, split_gpu_key

    def whole_sort(c: Claims, n: int) -> list[tuple[int, int, int, int]]:
        dur = c.end_ns - c.start_ns
        order = np.lexsort((c.start_ns, -dur))[:n]
        r, d = split_gpu_key(c.key[order])
        return [(int(a), int(b), int(s), int(e)) for a, b, s, e in zip(r, d, c.start_ns[order], c.end_ns[order])]

    rng = np.random.default_rng(12)
    for _ in range(2000):
        m = int(rng.integers(0, 40))
        start = rng.integers(0, 30, m).astype(np.int64)
        key = gpu_key(rng.integers(0, 3, m), rng.integers(0, 2, m)).astype(np.int64)
        claims = Claims(key, start, start + rng.integers(0, 5, m), normalized=True)  # many equal lengths
        for n in (-2, 0, 1, 3, 10, m - 1, m, m + 2):
            assert claims.largest(n) == whole_sort(claims, n)


def test_claims_in_window_equal_their_intersection_with_it():
    """``accounting.in_window`` returns the claims themselves only when intersecting them with the
    window would give them back; claims partly outside, on a GPU without a window, or not a union
    (built with ``normalized=True``) go through the intersection."""
    from traceview.accounting import in_window
    from traceview.claims import Claims

    rng = np.random.default_rng(15)
    shortcuts = 0
    for _ in range(2000):
        gpus = int(rng.integers(1, 4))
        lo = rng.integers(0, 20, gpus)
        window = Claims.of(np.arange(gpus), 0, lo, lo + rng.integers(1, 60, gpus) + (20 if rng.random() < 0.5 else 0))
        m = int(rng.integers(0, 12))
        start = rng.integers(-5, 70, m) if rng.random() < 0.5 else rng.integers(20, 30, m)  # half inside, often
        rank = rng.integers(0, gpus + (1 if rng.random() < 0.2 else 0), m)
        if rng.random() < 0.2:  # not a union: overlapping or empty intervals
            claims = Claims(np.sort(rank).astype(np.int64), start, start + rng.integers(0, 8, m), normalized=True)
        else:
            claims = Claims.of(rank, 0, start, start + rng.integers(1, 8, m))
        got, want = in_window(claims, window), claims.intersect(window)
        shortcuts += got is claims
        for a, b in ((got.key, want.key), (got.start_ns, want.start_ns), (got.end_ns, want.end_ns)):
            assert np.array_equal(a, b)
    assert 200 < shortcuts < 1800  # both ways were taken, and checked, often


def test_small_tables_sorted_after_conversion_equal_sorted_in_pandas(monkeypatch):
    """A table of up to ``SMALL_TABLE_ROWS`` rows is converted whole and its top rows picked from the
    converted array; larger ones are cut in pandas first: the same rows either way (ties, missing keys)."""
    import traceview.report as report

    rng = np.random.default_rng(3)
    n = 150
    frame = pd.DataFrame({"name": pd.array([f"k{i % 7}" if i % 11 else None for i in range(n)], dtype="str"),
                          "cost_ns": pd.array([None if i % 13 == 0 else int(v) for i, v in
                                               enumerate(rng.integers(0, 20, n))], dtype="Int64"),
                          "share": rng.random(n), "cat": pd.Categorical(rng.choice(["a", "b"], n))})
    small = report.table_records(frame, max_rows=50, sort_by="cost_ns")
    monkeypatch.setattr(report, "SMALL_TABLE_ROWS", 0)
    assert repr(report.table_records(frame, max_rows=50, sort_by="cost_ns")) == repr(small)
    assert small["sorted_by"] == "cost_ns" and small["shown_rows"] == 50
