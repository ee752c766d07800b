"""Collectives matched across ranks: the occurrences of each collective kind, process group and
step lined up rank by rank (the ``arrivals`` the communication analysis's skew and stragglers and
the efficiency analysis's bus bandwidth are computed from). A helper module, no analysis: both
analyses import it, neither imports the other."""

from __future__ import annotations

import pandas as pd

from .steps import NO_STEP


def match_collectives(comm: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The ``arrivals`` table: occurrences of collectives matched across ranks (see docstring)."""
    warnings: list[str] = []
    if comm.empty or comm["rank"].nunique() < 2:
        return pd.DataFrame(), warnings
    c = comm.sort_values(["rank", "start", "end"]).copy()
    keys = ["collective", "process_group", "step"]
    c["occurrence"] = c.groupby(["rank"] + keys, sort=False).cumcount()
    counts = c.groupby(keys + ["rank"]).size().unstack("rank")
    uneven = counts[counts.nunique(axis=1, dropna=False) > 1]
    for (kind, pg, step), row in uneven.iterrows():
        present = {int(r): int(v) for r, v in row.items() if pd.notna(v)}
        if len(present) < 2:
            continue
        where = "outside steps" if step == NO_STEP else f"in step {step}"
        pg_text = f" (process group {pg})" if pg else ""
        warnings.append(
            f"{kind}{pg_text} {where}: ranks ran different numbers of kernels {present}; only the first "
            f"{min(present.values())} are matched across ranks, so later ones may be mismatched"
        )
    c["ranks"] = c.groupby(keys + ["occurrence"])["rank"].transform("size")
    c = c[c["ranks"] >= 2]
    if c.empty:
        return pd.DataFrame(), warnings
    # only occurrences up to the smallest count among the ranks that have the collective at all
    # (each row's count of its rank in its group, then the least over the group: column operations,
    # not a Python call per group, of which there is one per collective and step)
    c["min_count"] = c.groupby(keys + ["rank"])["rank"].transform("size")
    c["min_count"] = c.groupby(keys)["min_count"].transform("min")
    c = c[c["occurrence"] < c["min_count"]].drop(columns="min_count")
    occ = keys + ["occurrence"]
    g = c.groupby(occ)
    # all arithmetic on int64 offsets from the occurrence's first start / first end: absolute ns
    # (~1.7e18) lose precision in float64 and overflow int64 when summed over ranks
    c["dur"] = c["end"] - c["start"]
    c["start_rel"] = c["start"] - g["start"].transform("min")
    c["end_rel"] = c["end"] - g["end"].transform("min")
    c["lateness_ns"] = c["start_rel"]
    # end-aligned start = start - end + median end; relative to the occurrence: median end - dur
    c["aligned_rel"] = -c["dur"]
    c["aligned_lateness_ns"] = c["aligned_rel"] - c.groupby(occ)["aligned_rel"].transform("min")
    c["end_offset_ns"] = c["end_rel"] - c.groupby(occ)["end_rel"].transform("median")
    return c.reset_index(drop=True), warnings
