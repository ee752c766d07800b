"""The Modules page: where each rank's GPU time goes in the model's terms (nn.Module, annotation
and NVTX ranges), from the ``modules`` analysis's tables and the report's summary keys
(docs/metrics.md, "Modules and ranges"); nothing here attributes a kernel or computes a time.

* the headline: the share of GPU busy time inside some range and the largest layers (the summary's
  ``attributed_share`` and ``top_layers``);
* **the range tree of one rank** as an icicle (the rank chosen above it): the rank's GPU busy time
  at the top, its top-level ranges and the time outside every range below it, each range under its
  parent, as wide as its inclusive GPU time (``range_gpu``), coloured by kind or by type path, in
  start order; a click on a range opens the timeline on that range's window, its rank opened;
* the ranges of that rank (largest first; a row opens the timeline the same way), its type paths
  (largest first), and how the GPU time of every rank was attributed (``attribution``).
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd
from dash import dcc, html

from traceview.render.common import layers_text
from traceview.units import fmt_ns, fmt_share

from .components import CARD, frame_table, graph, message, section, stat_cards
from .validate import MAX_RANK, BadValue, integer, quote

ANALYSIS = "modules"
ICICLE_ID = "mod-icicle"
RANK_ID = "mod-rank"
COLOR_ID = "mod-color"
RANGES_ID = "mod-ranges"
TYPES_ID = "mod-types"
#: the boxes the rank/colour callback redraws, and where each click says why it opened nothing
RANK_BOX_ID = "mod-rank-box"
VIEW_MSG_ID = "mod-view-msg"
CLICK_MSG_ID = "mod-click-msg"
ROW_MSG_ID = "mod-row-msg"
COLOR_OPTIONS = {"kind": "kind", "type_path": "type path"}
#: the colours of the range kinds (those of the timeline's classes where one fits)
KIND_COLORS = {"module": "#4C78A8", "annotation": "#F58518", "nvtx": "#54A24B", "device": "#B279A2"}
#: the colour of the rank's root and of its time outside every range
ROOT_COLOR, OUTSIDE_COLOR = "#D5DBE1", "#EEEEEE"
RULES = {"range": "inside a range (launched under it)",
         "backward": "backward: to the range of its forward op",
         "graph_replay": "graph replay: to the range around the launch, not to the ops inside the graph",
         "capture": "graph replay matched to a captured node (--graph-capture): its capture range and op",
         "device": "no host range: the device's own range around it (GPU annotation, XLA module or op)",
         "none": "no range (its activities' union may overlap attributed time)",
         "attributed": "in some range, by any rule",
         "unattributed": "outside every range: the busy time no attributed activity covers"}
#: most sectors drawn in one rank's icicle (the largest ranges and all their ancestors; the
#: ranges table below has them all)
MAX_SECTORS = 3000
#: a sector's id: ``<rank>/<range_id>``, ``<rank>/root`` (the rank's busy time) or ``<rank>/none``
_SECTOR_ID = re.compile(r"^(\d{1,10})/(\d{1,18}|root|none)$")


def page(ctx: Any) -> list[Any]:
    """The page of the modules analysis (``ctx``: a :class:`~traceview.app.runs.RunContext`)."""
    from .pages import finding_card, finding_rows, warnings_block

    gpu = ctx.table(ANALYSIS, "range_gpu")
    if ANALYSIS not in ctx.report["analyses"] and not len(gpu):
        return [message("The modules analysis was not computed for this selection (it gave no results).")]
    out: list[Any] = warnings_block(ctx, (ANALYSIS,))
    if not len(gpu):
        out.append(message("No ranges with GPU activity in this selection: the trace has no nn.Module events "
                           "(record with with_modules / with_stack), no user annotations and no NVTX ranges "
                           "around kernel launches."))
        out.append(attribution_section(ctx))
        return out
    out.append(headline(ctx.report))
    ranks = sorted(int(r) for r in pd.unique(gpu["rank"]))
    controls = html.Div([
        html.Div([html.Label("rank"), dcc.Dropdown(id=RANK_ID, options=[{"label": f"rank {r}", "value": r}
                                                                         for r in ranks],
                                                    value=ranks[0], clearable=False, style={"minWidth": "160px"})]),
        html.Div([html.Label("colour by"), dcc.RadioItems(
            id=COLOR_ID, options=[{"label": v, "value": k} for k, v in COLOR_OPTIONS.items()], value="kind",
            inline=True, inputStyle={"marginRight": "4px"}, labelStyle={"marginRight": "12px"})]),
    ], style={**CARD, "display": "flex", "gap": "24px", "alignItems": "flex-end", "fontSize": "13px"})
    out.extend([controls, html.Div(id=VIEW_MSG_ID)])
    out.append(html.Div(rank_sections(ctx, ranks[0], "kind"), id=RANK_BOX_ID))
    out.append(attribution_section(ctx))
    out.extend(graph_replay_section(ctx))
    cards: list[Any] = [finding_card(f, origin_ns=ctx.origin_ns) for f in finding_rows(ctx.report, ANALYSIS)]
    if cards:
        out.append(section("Findings", *cards))
    return out


def headline(rep: Any) -> html.Div:
    """The summary's keys as cards: the share of GPU time inside ranges, the largest layers."""
    s = rep.get("summary", {})
    top = [t for t in (s.get("top_layers") or []) if isinstance(t, dict)]
    layers = layers_text(rep)
    share = s.get("attributed_share")
    items: list[tuple[str, str, str | None]] = [
        ("GPU time in ranges", fmt_share(share) if share is not None else "-", "of the GPU busy time, whole job")]
    if top:
        first = top[0]
        items.append(("largest layer", str(first.get("type_path")),
                      f"{fmt_ns(first.get('inclusive_ns'))} · {fmt_share(first.get('share'))} of GPU busy"))
    out: list[Any] = [stat_cards(items)]
    if layers:  # the terminal's first-screen line
        out.append(html.Div("by layer: " + layers, id="mod-by-layer",
                            style={"color": "#444", "fontSize": "14px", "margin": "0 0 10px 2px"}))
    return html.Div(out)


def choice(ctx: Any, rank_value: Any, color_value: Any) -> tuple[int, str]:
    """The rank and colour the controls chose, checked: raises ``BadValue`` for a value that is not
    one of their options (a rank without ranges in this selection, an unknown colouring)."""
    rank = integer(rank_value, "rank", 0, MAX_RANK)
    if rank is None:
        raise BadValue("rank: choose a rank")
    gpu = ctx.table(ANALYSIS, "range_gpu")
    if not len(gpu) or not (pd.to_numeric(gpu["rank"]) == rank).any():
        raise BadValue(f"rank: rank {rank} has no ranges with GPU activity in this selection")
    if not isinstance(color_value, str) or color_value not in COLOR_OPTIONS:
        raise BadValue(f"colour by: {quote(color_value)} is not one of {', '.join(COLOR_OPTIONS)}")
    return rank, color_value


def rank_sections(ctx: Any, rank: int, color_by: str) -> list[Any]:
    """The icicle, the ranges and the type paths of one rank."""
    tree = rank_tree(ctx, rank)
    busy = busy_ns(ctx, rank)
    fig, drawn = icicle_figure(tree, rank, busy, outside_ns(ctx, rank), color_by, ctx.origin_ns)
    note = ("Each range is as wide as its inclusive GPU time (the union of the kernels, copies and memsets "
            "attributed to it or to a range below it), under the range that contains it; left to right in start "
            "order. Click a range to open the timeline on it.")
    if drawn < len(tree):
        note += f" The {drawn:,} largest of {len(tree):,} ranges are drawn (the table below has them all)."
    if _overlapping_children(tree):
        note += (" Where the kernels of sibling ranges overlap in time (several streams), the siblings together "
                 "are wider than their parent's union; the parent is drawn as wide as they are (hover: its own time).")
    ranges = _as_pct(tree.sort_values("inclusive_ns", ascending=False, kind="stable"), "share")
    types = ctx.table(ANALYSIS, "type_paths")
    types = types[pd.to_numeric(types["rank"]) == rank] if len(types) else types
    types = _as_pct(types.sort_values("inclusive_ns", ascending=False, kind="stable"), "share") if len(types) \
        else types
    return [
        section(f"Range tree of rank {rank}", graph(fig, ICICLE_ID, style={"height": f"{fig.layout.height}px"}),
                html.Div(id=CLICK_MSG_ID), note=note),
        section(f"Ranges of rank {rank} (largest first)", html.Div(id=ROW_MSG_ID), frame_table(
            _relative(ranges, ctx.origin_ns), RANGES_ID, page_size=15, filter_=True, row_ids=ranges.index.tolist(),
            columns=["depth", "kind", "path", "inclusive_ns", "exclusive_ns", "share_pct", "kernels", "compute_ns",
                     "communication_ns", "memory_ns", "backward_ns", "graph_replay_ns", "start_ns", "end_ns"],
            rename={"share_pct": "share of GPU busy %", "start_ns": "start", "end_ns": "end"},
            tooltips={"path": "path"}),
            note="Start and end since the run's first event. Click a row to open the timeline on that range."),
        section(f"Type paths of rank {rank} (largest first)", frame_table(
            types, TYPES_ID, page_size=15, filter_=True,
            columns=["type_path", "depth", "instances", "inclusive_ns", "exclusive_ns", "kernels", "backward_ns",
                     "share_pct"], rename={"share_pct": "share of GPU busy %", "type_path": "type path"},
            tooltips={"type_path": "type_path"}, empty="No type paths for this rank."),
            note="The ranges of one type path with the instance index dropped (all 24 attention layers as one "
                 "row): their times summed over the instances."),
    ]


def rank_tree(ctx: Any, rank: int) -> pd.DataFrame:
    """The ``range_gpu`` rows of one rank with each range's parent and name from ``ranges``, in
    start order (the index: the row's in ``range_gpu``, as the ranges table's row ids)."""
    gpu = ctx.table(ANALYSIS, "range_gpu")
    gpu = gpu[pd.to_numeric(gpu["rank"]) == rank]
    ranges = ctx.table(ANALYSIS, "ranges")
    if len(ranges) and {"parent_id", "name"} <= set(ranges.columns):
        ranges = ranges[pd.to_numeric(ranges["rank"]) == rank].set_index("range_id")
        parent = ranges["parent_id"].reindex(gpu["range_id"]).to_numpy()
        name = ranges["name"].reindex(gpu["range_id"]).to_numpy()
        parent_id = pd.Series(parent, index=gpu.index).fillna(-1).astype("int64")
        domain = ranges["domain"].reindex(gpu["range_id"]).to_numpy() if "domain" in ranges else None
        gpu = gpu.assign(parent_id=parent_id, name=pd.Series(name, index=gpu.index),
                         domain=pd.Series(domain, index=gpu.index) if domain is not None else None)
    else:  # no ranges table: every range at the top, named by its path's last component
        gpu = gpu.assign(parent_id=-1, name=None)
    last = gpu["path"].astype(str).str.rsplit("/", n=1).str[-1]
    gpu = gpu.assign(name=gpu["name"].where(gpu["name"].notna(), last))
    return gpu.sort_values(["start_ns", "depth"], kind="stable")


def busy_ns(ctx: Any, rank: int) -> int | None:
    """The rank's GPU busy time (the ``attribution`` table's ``busy_ns``), None without it."""
    att = ctx.table(ANALYSIS, "attribution")
    if not len(att):
        return None
    vals = pd.to_numeric(att.loc[pd.to_numeric(att["rank"]) == rank, "busy_ns"], errors="coerce").dropna()
    return int(vals.iloc[0]) if len(vals) else None


def outside_ns(ctx: Any, rank: int) -> int:
    """The rank's GPU time outside every range: the ``attribution`` table's ``unattributed`` row
    (busy time not covered by attributed activity), or its ``none`` row where it has no such row."""
    att = ctx.table(ANALYSIS, "attribution")
    if not len(att):
        return 0
    mine = att[pd.to_numeric(att["rank"]) == rank]
    rule = "unattributed" if (mine["rule"] == "unattributed").any() else "none"
    vals = pd.to_numeric(mine.loc[mine["rule"] == rule, "gpu_ns"], errors="coerce").dropna()
    return int(vals.sum())


def _kept(tree: pd.DataFrame, limit: int) -> pd.DataFrame:
    """Of the ``limit`` largest ranges, those whose ancestors are all there too (a child is never
    wider than its parent's union, so the largest are mostly whole subtrees; a range whose parent
    the table does not hold, e.g. a report whose table was cut to its largest rows, is left out)."""
    tree = tree[tree["range_id"].isin(_closed(tree))]  # the orphans first: they take no place
    top = tree.sort_values(["inclusive_ns", "depth"], ascending=[False, True], kind="stable").head(limit)
    return tree[tree["range_id"].isin(_closed(top))]


def _closed(top: pd.DataFrame) -> set[int]:
    """The range ids of ``top`` whose every ancestor is also in ``top``."""
    parent = dict(zip(top["range_id"].astype(int), top["parent_id"].astype(int)))
    ok: dict[int, bool] = {}

    def closed(rid: int) -> bool:
        chain = []
        while rid not in ok:
            chain.append(rid)
            p = parent[rid]
            if p == -1:
                ok[rid] = True
                break
            if p not in parent:
                ok[rid] = False
                break
            rid = p
        verdict = ok[rid]
        for r in chain:
            ok[r] = verdict
        return verdict

    return {r for r in parent if closed(r)}


def _overlapping_children(tree: pd.DataFrame) -> bool:
    """Whether some range's children together have more inclusive time than it (their kernels
    overlap on several streams)."""
    kids = tree[tree["parent_id"] >= 0].groupby("parent_id")["inclusive_ns"].sum()
    own = tree.set_index("range_id")["inclusive_ns"].reindex(kids.index)
    return bool((kids > own.fillna(float("inf"))).any())


def drawn_sizes(tree: pd.DataFrame, root_ns: int | None, outside: int) -> tuple[dict[int, float], float]:
    """The width of each range's sector (its inclusive time, or its children's together where
    they are wider: the icicle needs a parent at least as wide as its children) and the root's
    (the rank's busy time, or its top-level ranges and the time outside them where wider)."""
    size = dict(zip(tree["range_id"].astype(int), pd.to_numeric(tree["inclusive_ns"]).astype("float64")))
    parent = dict(zip(tree["range_id"].astype(int), tree["parent_id"].astype(int)))
    depth = dict(zip(tree["range_id"].astype(int), pd.to_numeric(tree["depth"]).astype(int)))
    children_ns: dict[int, float] = {}
    for rid in sorted(size, key=lambda r: -depth[r]):  # the deepest first: a child's width is final
        size[rid] = max(size[rid], children_ns.get(rid, 0.0))
        children_ns[parent[rid]] = children_ns.get(parent[rid], 0.0) + size[rid]
    top = children_ns.get(-1, 0.0) + float(outside)
    return size, max(float(root_ns or 0), top)


def _hover(r: Any, origin_ns: int) -> str:
    """What hovering a range says: the table's values, formatted (names escaped: plotly reads tags)."""
    from html import escape

    kind = str(r.kind) + (f" · {r.domain}" if isinstance(getattr(r, "domain", None), str) and r.domain else "")
    lines = [f"<b>{escape(str(r.path))}</b>", kind,
             f"inclusive {fmt_ns(r.inclusive_ns)} · exclusive {fmt_ns(r.exclusive_ns)} · "
             f"{fmt_share(r.share)} of GPU busy",
             f"{int(r.kernels):,} kernel(s) · compute {fmt_ns(r.compute_ns)} · communication "
             f"{fmt_ns(r.communication_ns)} · memory {fmt_ns(r.memory_ns)}"]
    if (r.backward_ns or 0) > 0 or (r.graph_replay_ns or 0) > 0:
        lines.append(f"backward {fmt_ns(r.backward_ns)} · graph replay {fmt_ns(r.graph_replay_ns)}")
    lines.append(f"{fmt_ns(int(r.start_ns) - origin_ns)} to {fmt_ns(int(r.end_ns) - origin_ns)} since the run's "
                 "first event · click: the timeline on it")
    return "<br>".join(lines)


def _colors(tree: pd.DataFrame, color_by: str) -> list[str]:
    """A sector colour per range: its kind's, or one per type path (the largest type paths first,
    so that the colours of a rank's main layers are the palette's first)."""
    if color_by == "kind":
        return [KIND_COLORS.get(str(k), "#9D755D") for k in tree["kind"]]
    import plotly.express as px

    palette = px.colors.qualitative.Plotly + px.colors.qualitative.D3 + px.colors.qualitative.Alphabet
    order = tree.groupby("type_path")["inclusive_ns"].sum().sort_values(ascending=False, kind="stable").index
    color = {t: palette[i % len(palette)] for i, t in enumerate(order)}
    return [color[t] for t in tree["type_path"]]


def icicle_figure(tree: pd.DataFrame, rank: int, root_ns: int | None, outside: int, color_by: str,
                  origin_ns: int) -> tuple[Any, int]:
    """The icicle of one rank's range tree (see :func:`drawn_sizes`) and how many ranges it draws."""
    import plotly.graph_objects as go

    shown = _kept(tree, MAX_SECTORS)
    size, root_size = drawn_sizes(shown, root_ns, outside)
    rid = shown["range_id"].astype(int).tolist()
    # the ranges in start order, the time outside every range after them (sort=False keeps it)
    ids = [f"{rank}/root"] + [f"{rank}/{r}" for r in rid] + [f"{rank}/none"]
    parents = [""] + [f"{rank}/root" if p == -1 else f"{rank}/{p}" for p in shown["parent_id"].astype(int)] + \
        [f"{rank}/root"]
    labels = [f"rank {rank}"] + [str(n) for n in shown["name"]] + ["outside every range"]
    root_hover = (f"<b>rank {rank}</b><br>GPU busy {fmt_ns(root_ns)}" if root_ns is not None
                  else f"<b>rank {rank}</b>")
    hover = [root_hover] + [_hover(r, origin_ns) for r in shown.itertuples()] + \
        [f"outside every range: {fmt_ns(outside)} of GPU busy time"]
    fig = go.Figure(go.Icicle(
        ids=ids, parents=parents, labels=labels, values=[root_size] + [size[r] for r in rid] + [float(outside)],
        branchvalues="total", sort=False, hovertext=hover, hovertemplate="%{hovertext}<extra></extra>",
        marker={"colors": [ROOT_COLOR] + _colors(shown, color_by) + [OUTSIDE_COLOR]},
        tiling={"orientation": "v"}, pathbar={"visible": False}, textinfo="label"))
    levels = int(pd.to_numeric(shown["depth"]).max()) + 2 if len(shown) else 1
    fig.update_layout(template="plotly_white", height=min(120 + 64 * levels, 900),
                      margin=dict(l=10, r=10, t=10, b=10), uniformtext={"minsize": 9, "mode": "hide"})
    return fig, len(shown)


def _as_pct(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """Shares (0..1) of these columns as ``<column>_pct`` (x100 for reading, not a new metric)."""
    if frame is None or not len(frame):
        return frame
    return frame.assign(**{f"{c}_pct": 100.0 * pd.to_numeric(frame[c], errors="coerce")
                           for c in columns if c in frame.columns})


def _relative(frame: pd.DataFrame, origin_ns: int) -> pd.DataFrame:
    """Start and end as ns since the run's first event (as the timeline's axis reads)."""
    cols = [c for c in ("start_ns", "end_ns") if c in frame.columns]
    return frame.assign(**{c: pd.to_numeric(frame[c]) - origin_ns for c in cols}) if len(frame) else frame


def attribution_section(ctx: Any) -> html.Div:
    """How each rank's GPU time was attributed: per rule its activities, its time and its share."""
    att = ctx.table(ANALYSIS, "attribution")
    if len(att):
        att = _as_pct(att.assign(meaning=[RULES.get(str(r), str(r)) for r in att["rule"]]), "share")
    return section("Attribution of the GPU time", frame_table(
        att, "mod-attribution", page_size=20, filter_=True,
        columns=["rank", "rule", "meaning", "activities", "gpu_ns", "busy_ns", "share_pct"],
        rename={"gpu_ns": "GPU time", "busy_ns": "rank's GPU busy", "share_pct": "share of GPU busy %"},
        style_cell={"maxWidth": "560px"}, empty="No attribution rows in this selection."),
        note="Each kernel, copy and memset goes to the innermost range open at its launch on the launching "
             "thread (range); else a backward kernel to the range of its forward op (backward); a graph's "
             "replayed kernels to the range around the graph launch (graph replay); else to none.")


def graph_replay_section(ctx: Any) -> list[Any]:
    """How graph replays were matched to a capture, and the replayed GPU time by captured op (none
    without graph replays)."""
    matches = ctx.table(ANALYSIS, "graph_capture")
    if not len(matches):
        return []
    ops = ctx.table(ANALYSIS, "graph_ops")
    parts: list[Any] = [frame_table(
        _as_pct(matches, "share"), "mod-graph-capture", page_size=10,
        columns=["rank", "rule", "launches", "activities", "gpu_ns", "replayed_ns", "share_pct"],
        rename={"gpu_ns": "GPU time", "replayed_ns": "replayed GPU time", "share_pct": "share of replayed %"},
        style_cell={"maxWidth": "560px"}, empty="No graph replays in this selection.")]
    if len(ops):
        parts.append(frame_table(
            _as_pct(ops, "share"), "mod-graph-ops", page_size=15, filter_=True,
            columns=["rank", "op", "activities", "gpu_ns", "share_pct"],
            rename={"gpu_ns": "GPU time", "share_pct": "share of replayed %"}, style_cell={"maxWidth": "560px"},
            empty="No captured ops."))
    return [section("Graph replays", *parts,
                    note="Kernels replayed from CUDA/HIP graphs, matched to the nodes of a capture trace given with "
                         "--graph-capture (by kernel name and occurrence, else by position); the second table is the "
                         "replayed GPU time by the op that issued each node in the capture.")]


# ------------------------------------------------------------------------------ clicks


def range_search(ctx: Any, rank: int, range_id: int) -> str:
    """The timeline's query string for one range: its window (a little wider), the range
    highlighted, its rank opened. Raises ``BadValue`` for a range that is not in this selection."""
    gpu = ctx.table(ANALYSIS, "range_gpu")
    hit = gpu[(pd.to_numeric(gpu["rank"]) == rank) & (pd.to_numeric(gpu["range_id"]) == range_id)] if len(gpu) \
        else gpu
    if not len(hit):
        raise BadValue(f"range {rank}/{range_id} is not a range of this selection: the page may be stale; reload it")
    row = hit.iloc[0]
    a, b = int(row["start_ns"]) - ctx.origin_ns, int(row["end_ns"]) - ctx.origin_ns
    pad = max((b - a) // 50, 1_000)
    return f"?t0={a - pad}&t1={b + pad}&f0={a}&f1={b}&r={rank}"


def clicked_sector(click: Any) -> tuple[int, int]:
    """The (rank, range id) of a clicked icicle sector (plotly's ``clickData``); raises
    ``BadValue`` for anything else, and for the rank's root and its time outside every range."""
    points = click.get("points") if isinstance(click, dict) else None
    point = points[0] if isinstance(points, list) and points else None
    ident = point.get("id") if isinstance(point, dict) else None
    m = _SECTOR_ID.match(ident) if isinstance(ident, str) and len(ident) < 40 else None
    if m is None:
        raise BadValue(f"clicked sector: {quote(click)} is not a range of the icicle")
    if m.group(2) in ("root", "none"):
        raise BadValue("that is the rank's GPU time as a whole, not a range: click a range below it" if
                       m.group(2) == "root" else "that is the GPU time outside every range: click a range")
    return int(m.group(1)), int(m.group(2))


def row_range(ctx: Any, row_id: int) -> tuple[int, int]:
    """The (rank, range id) of the row ``row_id`` of ``range_gpu`` (the ranges table's row ids)."""
    gpu = ctx.table(ANALYSIS, "range_gpu")
    if not len(gpu) or row_id not in gpu.index:
        raise BadValue(f"row {row_id} is not a range of this selection: the table may be stale; reload the page")
    row = gpu.loc[row_id]
    return int(row["rank"]), int(row["range_id"])
