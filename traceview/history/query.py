"""``history show`` and ``history check`` as data: the runs selected, their series as a runs x
series matrix, and the detection's verdicts (:mod:`traceview.history.detect`)."""

from __future__ import annotations

import dataclasses

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from traceview.errors import TraceviewError
from traceview.history import detect, store

#: the figure of a series that trends and checks use: its mean time per GPU and step
VALUE_COLUMN = "per_step_ns"
#: series kinds in output order
KINDS = ("step", "kernel", "collective")


@dataclass
class CheckResult:
    """The verdict of ``history check``."""

    runs: pd.DataFrame  # the runs considered, oldest first
    regressions: pd.DataFrame  # one row per regressed series (see :func:`check`)
    series_judged: int
    mode: str  # "change-point" or "baseline"
    gpu_model: str | None
    options: detect.DetectOptions
    notes: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return len(self.regressions) > 0


@dataclass
class ShowResult:
    """The trends of ``history show``."""

    runs: pd.DataFrame
    series: pd.DataFrame  # series_id, kind, key
    values: np.ndarray  # series x runs, ns per GPU and step (NaN: absent)
    notes: list[str] = field(default_factory=list)
    #: with ``--layers``: the type paths shown (type_path, depth), and per type path and run its
    #: inclusive GPU time per GPU and step and its share (NaN: not among that run's stored layers)
    layers: pd.DataFrame | None = None
    layer_values: np.ndarray | None = None  # type paths x runs
    layer_shares: np.ndarray | None = None
    #: with ``--measured``: the measured kernels shown (kernel, grid, block), and per kernel and run
    #: its SOL compute and memory % of peak and bound-by (NaN / "": not among that run's measured kernels)
    measured: pd.DataFrame | None = None
    sol_compute: np.ndarray | None = None  # kernels x runs
    sol_memory: np.ndarray | None = None
    bound_by: np.ndarray | None = None


def parse_tags(items: Sequence[str], option: str = "--tag") -> tuple[tuple[str, str], ...]:
    """``key=value`` pairs, checked (one line, exit 2, when one has no ``=`` or no key)."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise TraceviewError(f"{option}: {item!r} is not key=value (e.g. {option} commit=abc123)")
        out.append((key.strip(), value.strip()))
    return tuple(out)


def _fill_absent(values: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Kernels and collectives absent from a run ran for 0 ns there; a step series stays NaN."""
    out = values.copy()
    zero_fill = kinds != "step"
    block = out[:, zero_fill]
    block[np.isnan(block)] = 0.0
    out[:, zero_fill] = block
    return out


def _series_frame(con: Any, ids: np.ndarray) -> pd.DataFrame:
    names = store.series_names(con).set_index("series_id")
    return names.reindex(ids).reset_index()


def _gpu_selection(con: Any, tags: tuple[tuple[str, str], ...], any_gpu: bool) -> tuple[pd.DataFrame, str | None]:
    selected = store.runs(con, store.Selection(tags=tags))
    if selected.empty:
        raise TraceviewError("no runs in the history" + (" with those tags" if tags else "") +
                             "; add runs with `traceview history add PATH`")
    gpu = str(selected["gpu_model"].iloc[-1] or "")
    if any_gpu:
        return selected, None
    return selected[selected["gpu_model"].fillna("") == gpu].reset_index(drop=True), gpu


def _baseline_rows(con: Any, selected: pd.DataFrame, spec: str, limit: int) -> pd.DataFrame:
    """The baseline runs ``--baseline`` names among ``selected`` (the newest run left out): a run id,
    a run name, or ``key=value`` (the last ``limit`` runs with that tag)."""
    before = selected.iloc[:-1]
    if "=" in spec:
        (key, value), = parse_tags([spec], "--baseline")
        ids = {int(r[0]) for r in con.execute("SELECT run_id FROM run_tags WHERE key = ? AND value = ?",
                                              [key, value]).fetchall()}
        rows = before[before["run_id"].isin(ids)].tail(limit)
    elif spec.isdigit():
        rows = before[before["run_id"] == int(spec)]
    else:
        rows = before[before["name"] == spec].tail(1)
    if rows.empty:
        raise TraceviewError(f"--baseline: no run {spec!r} before the newest run among the runs compared (same GPU "
                             "model unless --any-gpu; `traceview history show` lists them)")
    return rows


def check(con: Any, *, options: detect.DetectOptions, tags: tuple[tuple[str, str], ...] = (),
          baseline: str | None = None, any_gpu: bool = False) -> CheckResult:
    """Regressions of the newest selected run(s): by change-point search over the last runs, or
    against ``baseline`` (see :mod:`traceview.history.detect`)."""
    selected, gpu = _gpu_selection(con, tags, any_gpu)
    notes = []
    if baseline is None:
        considered = selected.tail(options.window + options.baseline).reset_index(drop=True)
        values, ids = store.matrix(con, considered["run_id"].tolist(), VALUE_COLUMN)
        kinds = _series_frame(con, ids)["kind"].to_numpy()
        found = detect.change_points(_fill_absent(values, kinds), options)
        if not found.judged:
            notes.append(f"{len(considered)} run(s) on this GPU model: a change-point search needs at least "
                         f"{options.min_baseline + 1}; nothing judged")
        mode = "change-point"
    else:
        base_rows = _baseline_rows(con, selected, baseline, options.baseline)
        considered = pd.concat([base_rows, selected.tail(1)], ignore_index=True)
        values, ids = store.matrix(con, considered["run_id"].tolist(), VALUE_COLUMN)
        spread, _ = store.matrix(con, considered["run_id"].tolist(), "spread_ns", ids)
        kinds = _series_frame(con, ids)["kind"].to_numpy()
        values = _fill_absent(values, kinds)
        found = detect.against_baseline(values[:-1], values[-1], options, spread)
        mode = "baseline"
        if len(base_rows) < 3:
            notes.append(f"{len(base_rows)} baseline run(s): the noise is the runs' own per-step spread, not the "
                         "spread across runs (give 3 or more for that)")
    frame = _regressions(con, considered, ids, found)
    # the options as applied: k as the test chose it (detect.effective_k), for the renderers
    applied = dataclasses.replace(options, k=found.k) if found.judged else options
    return CheckResult(considered, frame, int(len(ids)), mode, gpu, applied, notes)


def _regressions(con: Any, runs: pd.DataFrame, ids: np.ndarray, found: detect.Detection) -> pd.DataFrame:
    hit = np.flatnonzero(found.regressed)
    names = _series_frame(con, ids[hit])
    start = found.start[hit]
    frame = pd.DataFrame({
        "kind": names["kind"].to_numpy(), "key": names["key"].to_numpy(), "series_id": ids[hit],
        "status": np.where(found.baseline_median[hit] > 0, "slower", "appeared"),
        "start_run": runs["run_id"].to_numpy()[start], "start_name": runs["name"].to_numpy()[start],
        "baseline_ns": found.baseline_median[hit], "current_ns": found.current_median[hit],
        "delta_ns": found.delta[hit], "delta_pct": found.delta_pct[hit], "threshold_ns": found.threshold[hit],
        "sigma_ns": found.sigma[hit], "baseline_runs": found.n_baseline[hit], "runs_since": found.n_after[hit]})
    raw = store.raw_names(con, frame["series_id"].tolist())
    frame["raw_names"] = [raw.get(int(s), []) for s in frame["series_id"]]
    order = pd.Categorical(frame["kind"], categories=list(KINDS), ordered=True)
    return frame.assign(_o=order).sort_values(["_o", "delta_ns"], ascending=[True, False]).drop(
        columns="_o").reset_index(drop=True)


def _layer_trends(con: Any, run_ids: list[int], top: int) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The ``top`` largest type paths in any of ``run_ids`` (by time per GPU and step; deeper first
    among equals) and their type paths x runs matrices of time per GPU and step and of share."""
    stored = store.layers(con, run_ids)
    if stored.empty:
        return pd.DataFrame(columns=["type_path", "depth"]), np.zeros((0, len(run_ids))), np.zeros((0, len(run_ids)))
    largest = stored.groupby("type_path", as_index=False).agg(depth=("depth", "max"), v=("per_step_ns", "max"))
    chosen = largest.sort_values(["v", "depth", "type_path"], ascending=[False, False, True]).head(top)
    rows = pd.Index(chosen["type_path"]).get_indexer(stored["type_path"])
    cols = pd.Index(run_ids).get_indexer(stored["run_id"])
    ok = (rows >= 0) & (cols >= 0)
    values = np.full((len(chosen), len(run_ids)), np.nan)
    shares = np.full((len(chosen), len(run_ids)), np.nan)
    values[rows[ok], cols[ok]] = stored["per_step_ns"].to_numpy(dtype=np.float64)[ok]
    shares[rows[ok], cols[ok]] = pd.to_numeric(stored["share"], errors="coerce").to_numpy(dtype=np.float64)[ok]
    return chosen[["type_path", "depth"]].reset_index(drop=True), values, shares


def _measured_trends(con: Any, run_ids: list[int], top: int) -> tuple[pd.DataFrame, np.ndarray, np.ndarray,
                                                                      np.ndarray]:
    """The ``top`` measured kernels (name, grid, block) with the most trace time in any of
    ``run_ids`` and their kernels x runs matrices of SOL compute %, SOL memory % and bound-by."""
    stored = store.measured(con, run_ids)
    key = ["kernel", "grid", "block"]
    shape = (0, len(run_ids))
    if stored.empty:
        return pd.DataFrame(columns=key), np.zeros(shape), np.zeros(shape), np.zeros(shape, dtype=object)
    largest = stored.groupby(key, as_index=False).agg(v=("trace_ns", "max"))
    chosen = largest.sort_values(["v", "kernel"], ascending=[False, True], kind="stable").head(top)
    chosen_keys = pd.MultiIndex.from_frame(chosen[key])
    rows = chosen_keys.get_indexer(pd.MultiIndex.from_frame(stored[key]))
    cols = pd.Index(run_ids).get_indexer(stored["run_id"])
    ok = (rows >= 0) & (cols >= 0)
    compute = np.full((len(chosen), len(run_ids)), np.nan)
    memory = np.full((len(chosen), len(run_ids)), np.nan)
    bound = np.full((len(chosen), len(run_ids)), "", dtype=object)
    compute[rows[ok], cols[ok]] = pd.to_numeric(stored["sm_throughput_pct"], errors="coerce").to_numpy(float)[ok]
    memory[rows[ok], cols[ok]] = pd.to_numeric(stored["memory_throughput_pct"], errors="coerce").to_numpy(float)[ok]
    bound[rows[ok], cols[ok]] = stored["bound_by"].fillna("").astype(str).to_numpy(object)[ok]
    return chosen[key].reset_index(drop=True), compute, memory, bound


def show(con: Any, *, kernel: str | None = None, tags: tuple[tuple[str, str], ...] = (), last: int = 10,
         top: int = 10, layers: bool = False, measured: bool = False) -> ShowResult:
    """The selected runs and the trends of the step time and of the kernels matching ``kernel`` (a
    regex over normalised names; default: the ``top`` largest kernels, and half as many collectives,
    in any of the runs shown)."""
    selected = store.runs(con, store.Selection(tags=tags, last=last))
    if selected.empty:
        raise TraceviewError("no runs in the history" + (" with those tags" if tags else "") +
                             "; add runs with `traceview history add PATH`")
    names = store.series_names(con)
    run_ids = selected["run_id"].tolist()
    if kernel is not None:
        try:
            pattern = re.compile(kernel)
        except re.error as exc:
            raise TraceviewError(f"--kernel: {kernel!r} is not a regular expression ({exc})") from None
        keep = (names["kind"] == "step") | (names["kind"] != "step") & names["key"].str.contains(pattern, regex=True)
        chosen = names[keep]
        values, ids = store.matrix(con, run_ids, VALUE_COLUMN, chosen["series_id"].tolist())
    else:  # the largest in any of the runs shown (the newest run may have no kernels)
        every, every_ids = store.matrix(con, run_ids, VALUE_COLUMN)
        with np.errstate(invalid="ignore"):
            largest = np.nanmax(np.where(np.isnan(every), -1.0, every), axis=0) if len(every_ids) else np.zeros(0)
        frame = _series_frame(con, every_ids).assign(v=largest, column=np.arange(len(every_ids)))
        picked = pd.concat([frame[frame["kind"] == "step"],
                            frame[frame["kind"] == "kernel"].nlargest(top, "v"),
                            frame[frame["kind"] == "collective"].nlargest(max(top // 2, 1), "v")])
        values, ids = every[:, picked["column"].to_numpy()], every_ids[picked["column"].to_numpy()]
    series = _series_frame(con, np.asarray(ids))
    notes = [] if len(series) > 1 or kernel is None else [f"no kernel matches --kernel {kernel!r}"]
    result = ShowResult(selected, series, values.T, notes)
    if layers:
        result.layers, result.layer_values, result.layer_shares = _layer_trends(con, run_ids, top)
        if result.layers.empty:
            notes.append("no layers stored for these runs (traces without module ranges, or runs added before "
                         "history schema version 4)")
    if measured:
        result.measured, result.sol_compute, result.sol_memory, result.bound_by = _measured_trends(con, run_ids, top)
        if result.measured.empty:
            notes.append("no measured kernels stored for these runs (runs added without --ncu, or before history "
                         "schema version 5)")
    return result
