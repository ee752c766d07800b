"""Small building blocks of the pages: formatted tables, cards, graphs, messages. Times, sizes and
shares are formatted by :mod:`traceview.units`, as in every other front end."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import pandas as pd
from dash import dash_table, dcc, html
from dash.dash_table.Format import Format, Scheme

from traceview.units import is_missing

#: columns in ns are shown in these units (table cells stay numeric so sorting works)
_NS_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3))

CARD = {"border": "1px solid #e3e3e3", "borderRadius": "6px", "padding": "10px 14px", "background": "white",
        "marginBottom": "12px"}
SEVERITY_COLORS = {"high": "#C0392B", "medium": "#D68910", "low": "#2E86C1", "info": "#7F8C8D"}


def message(text: str, kind: str = "info") -> html.Div:
    colors = {"info": ("#F4F6F7", "#555"), "warn": ("#FEF5E7", "#935116"), "error": ("#FDEDEC", "#922B21")}
    bg, fg = colors.get(kind, colors["info"])
    return html.Div(text, className=f"tv-message tv-{kind}",
                    style={"background": bg, "color": fg, "padding": "10px 14px", "borderRadius": "6px",
                           "margin": "8px 0"})


def section(title: str, *children: Any, note: str | None = None) -> html.Div:
    items: list[Any] = [html.H3(title, style={"margin": "4px 0 8px 0", "fontSize": "17px"})]
    if note:
        items.append(html.Div(note, style={"color": "#666", "fontSize": "13px", "marginBottom": "6px"}))
    items.extend(children)
    return html.Div(items, style=CARD)


def graph(figure: Any, graph_id: str | None = None, **kwargs: Any) -> dcc.Graph:
    props: dict[str, Any] = {"figure": figure, "config": {"displaylogo": False, "responsive": True}}
    if graph_id:
        props["id"] = graph_id
    props.update(kwargs)
    return dcc.Graph(**props)


def stat_cards(items: Sequence[tuple[str, str, str | None]]) -> html.Div:
    """A row of (label, value, hint) cards."""
    cards = []
    for label, value, hint in items:
        cards.append(html.Div([
            html.Div(label, style={"color": "#666", "fontSize": "12px", "textTransform": "uppercase"}),
            # long values (a layer's path) wrap inside the card instead of running past it
            html.Div(value, style={"fontSize": "22px", "fontWeight": "600", "marginTop": "2px",
                                   "overflowWrap": "anywhere"}),
            html.Div(hint or "", style={"color": "#888", "fontSize": "12px"}),
        ], className="tv-stat", style={**CARD, "minWidth": "150px", "flex": "1"}))
    return html.Div(cards, style={"display": "flex", "gap": "10px", "flexWrap": "wrap"})


def severity_badge(severity: str) -> html.Span:
    return html.Span(severity, className=f"tv-sev tv-sev-{severity}",
                     style={"background": SEVERITY_COLORS.get(severity, "#999"), "color": "white",
                            "borderRadius": "4px", "padding": "1px 7px", "fontSize": "12px", "marginRight": "8px"})


def time_unit(values: pd.Series) -> tuple[str, float, int]:
    """The unit (name, ns per unit) and decimals a column of ns is shown in, chosen per column by
    the magnitude of its typical (median non-zero) value: ns, us, ms or s, with about three
    significant digits there (``3.0 us``, not ``0.003 ms``). Per column, not per cell, so that the
    cells stay numbers the browser sorts."""
    vals = pd.to_numeric(values, errors="coerce").astype("float64").abs()
    vals = vals[(vals > 0) & vals.notna()]
    typical = float(vals.median()) if len(vals) else 0.0
    for name, scale in _NS_UNITS:
        if typical >= scale:
            scaled = typical / scale
            return name, scale, 2 if scaled < 10 else 1 if scaled < 100 else 0
    return "ns", 1.0, 0


def _numeric_column(c: str, s: pd.Series, spec: dict[str, Any]) -> pd.Series:
    """Values of a numeric column: whole floats as integers (ranks, steps, counts), other floats
    with a fixed precision (set in ``spec``)."""
    vals = pd.to_numeric(s, errors="coerce")
    spec["type"] = "numeric"
    whole = vals.dropna()
    if pd.api.types.is_float_dtype(vals) and len(whole) and bool((whole == whole.round()).all()) \
            and not c.endswith("pct") and not c.endswith("share") and c != "utilization":
        return vals.astype("Int64").astype(object).where(vals.notna(), None)  # ranks, steps, counts
    if pd.api.types.is_float_dtype(vals):
        prec = 1 if (c.endswith("_pct") or c.endswith("pct")) else 3
        spec["format"] = Format(precision=prec, scheme=Scheme.fixed)
        return vals.astype("float64")
    return vals


def _table_column(c: str, s: pd.Series, rename: dict[str, str]) -> tuple[dict[str, Any], pd.Series]:
    """The DataTable column spec of one column and the values it shows."""
    spec: dict[str, Any] = {"id": c, "name": rename.get(c, c.replace("_", " "))}
    if c == "step" and c not in rename and s.isna().any():
        spec["name"] = "step (blank: whole trace)"
    if c.endswith("_ns") and pd.api.types.is_numeric_dtype(s):
        vals = pd.to_numeric(s, errors="coerce").astype("float64")
        unit, div, decimals = time_unit(vals)
        spec["name"] = rename.get(c, c[:-3].replace("_", " ")) + f" ({unit})"
        spec["type"] = "numeric"
        spec["format"] = Format(precision=decimals, scheme=Scheme.fixed).group(True)
        return spec, (vals / div).round(decimals + 2)
    if pd.api.types.is_bool_dtype(s):
        spec["type"] = "text"
        return spec, s.map({True: "yes", False: "no"})
    if pd.api.types.is_numeric_dtype(s):
        return spec, _numeric_column(c, s, spec)
    spec["type"] = "text"
    return spec, s.map(lambda v: None if is_missing(v) else str(v))


#: a text cell longer than this gets its full value as a tooltip (it may be cut at the cell's width)
TOOLTIP_CHARS = 40


def _tooltip_data(records: list[dict[str, Any]], text_cols: list[str],
                  sources: dict[str, pd.Series]) -> list[dict[str, Any]]:
    """Per row, the tooltip of each long text cell (its value, or the value of its source column)."""
    out = []
    for i, r in enumerate(records):
        tips = {}
        for c in text_cols:
            value = str(sources[c].iloc[i]) if c in sources and not is_missing(sources[c].iloc[i]) else r.get(c)
            if value and (c in sources or len(str(value)) > TOOLTIP_CHARS):
                tips[c] = {"value": str(value), "type": "text"}
        out.append(tips)
    return out


def frame_table(df: pd.DataFrame | None, table_id: str, *, columns: Sequence[str] | None = None,
                rename: dict[str, str] | None = None, page_size: int = 15, sort: bool = True,
                filter_: bool = False, row_ids: Iterable[Any] | None = None, max_rows: int = 5000,
                style_cell: dict[str, Any] | None = None, empty: str = "No rows.",
                tooltips: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """A DataFrame as a sortable (and optionally filterable) DataTable.

    Columns ending in ``_ns`` are shown in the unit their typical value reads best in (ns, us, ms or
    s: :func:`time_unit`), as numbers so that sorting is numeric; ``*_pct`` with one decimal; text
    is left-aligned and truncated, with its full value as a tooltip (``tooltips``: column -> another
    column whose value is the tooltip instead, e.g. a kernel's full name).
    """
    if df is None or len(df) == 0:
        return message(empty)
    if len(df) > max_rows:
        df = df.head(max_rows)
    sources = {c: df[src].reset_index(drop=True) for c, src in (tooltips or {}).items() if src in df.columns}
    df = df if columns is None else df[[c for c in columns if c in df.columns]]
    rename = rename or {}
    out = pd.DataFrame(index=range(len(df)))
    cols = []
    for c in df.columns:
        spec, values = _table_column(c, df[c].reset_index(drop=True), rename)
        out[c] = values
        cols.append(spec)
    records = out.astype(object).where(pd.notna(out), None).to_dict("records")
    if row_ids is not None:
        for rec, rid in zip(records, row_ids):
            rec["id"] = rid
    text_cols = [c["id"] for c in cols if c.get("type") == "text"]
    props: dict[str, Any] = dict(
        id=table_id, columns=cols, data=records, page_size=page_size,
        sort_action="native" if sort else "none", filter_action="native" if filter_ else "none",
        style_table={"overflowX": "auto"},
        style_cell={"fontFamily": "Helvetica, Arial, sans-serif", "fontSize": "13px", "padding": "4px 8px",
                    "maxWidth": "420px", "overflow": "hidden", "textOverflow": "ellipsis", "whiteSpace": "nowrap",
                    **(style_cell or {})},
        style_header={"fontWeight": "600", "background": "#F4F6F7"},
        # text reads from the left (names, categories); numbers stay right-aligned to compare digits
        style_cell_conditional=[{"if": {"column_id": c}, "textAlign": "left"} for c in text_cols],
        style_header_conditional=[{"if": {"column_id": c}, "textAlign": "left"} for c in text_cols],
        tooltip_data=_tooltip_data(records[: page_size * 40], text_cols, sources),
        tooltip_duration=None,
        css=[{"selector": ".dash-spreadsheet td div", "rule": "line-height: 18px;"},
             # a long name's tooltip wraps instead of widening the page
             {"selector": ".dash-table-tooltip", "rule": "max-width: 640px; white-space: normal; "
                                                        "word-break: break-all;"}],
    )
    if filter_:
        props["filter_options"] = {"case": "insensitive"}
    props.update(kwargs)
    return dash_table.DataTable(**props)  # type: ignore[attr-defined]  # not in dash's type stubs


#: how often a loading page asks how far the run's load is
LOAD_POLL_MS = 300


def load_bar(progress: tuple[str, int, int] | None) -> html.Div:
    """The bar of a run being loaded: the phase, a progress element and its figures (``parse``: MB
    read of every input; then the analyses, counted), from :meth:`RunStore.progress`."""
    if progress is None:
        return html.Div([html.Span("loading the run…"), html.Progress(id="load-bar")], className="tv-load")
    phase, done, total = progress
    total = max(total, 1)
    figure = f"{done / 1e6:,.0f}/{total / 1e6:,.0f} MB" if phase == "parse" else f"{done:,}/{total:,}"
    return html.Div([html.Span(f"{phase} {figure} ", id="load-label"),
                     html.Progress(id="load-bar", value=str(min(done, total)), max=str(total),
                                   style={"width": "320px"})], className="tv-load")


def loading_page(progress: tuple[str, int, int] | None) -> list[Any]:
    """What a page shows while its run loads: the bar, polled every :data:`LOAD_POLL_MS` until the
    run is in memory, when the box is replaced by the page itself (``load-poll``'s callback)."""
    return [html.Div(load_bar(progress), id="load-box"),
            dcc.Interval(id="load-poll", interval=LOAD_POLL_MS, n_intervals=0)]
