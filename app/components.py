"""Small building blocks of the pages: formatted tables, cards, graphs, messages. Times, sizes and
shares are formatted by :mod:`traceview.units`, as in every other front end."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import pandas as pd
from dash import dash_table, dcc, html
from dash.dash_table.Format import Format, Scheme

from traceview.units import is_missing

#: columns in ns are shown in these units (table cells stay numeric so sorting works)
_NS_UNITS = (("ms", 1e6), ("us", 1e3))

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
            html.Div(value, style={"fontSize": "22px", "fontWeight": "600", "marginTop": "2px"}),
            html.Div(hint or "", style={"color": "#888", "fontSize": "12px"}),
        ], className="tv-stat", style={**CARD, "minWidth": "150px", "flex": "1"}))
    return html.Div(cards, style={"display": "flex", "gap": "10px", "flexWrap": "wrap"})


def severity_badge(severity: str) -> html.Span:
    return html.Span(severity, className=f"tv-sev tv-sev-{severity}",
                     style={"background": SEVERITY_COLORS.get(severity, "#999"), "color": "white",
                            "borderRadius": "4px", "padding": "1px 7px", "fontSize": "12px", "marginRight": "8px"})


def _time_unit(df: pd.DataFrame) -> tuple[str, float]:
    """The unit (name, ns per unit) of a table's ``*_ns`` columns: ms unless every time is small.

    One unit per table, because columns compared side by side share it."""
    ns_cols = [c for c in df.columns if c.endswith("_ns") and pd.api.types.is_numeric_dtype(df[c])]
    biggest = 0.0
    for c in ns_cols:
        top = pd.to_numeric(df[c], errors="coerce").astype("float64").abs().max()
        if top == top and top is not None:
            biggest = max(biggest, float(top))
    return _NS_UNITS[0] if biggest >= 1e5 else _NS_UNITS[1]


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


def _table_column(c: str, s: pd.Series, rename: dict[str, str], unit: str,
                  div: float) -> tuple[dict[str, Any], pd.Series]:
    """The DataTable column spec of one column and the values it shows."""
    spec: dict[str, Any] = {"id": c, "name": rename.get(c, c.replace("_", " "))}
    if c == "step" and c not in rename and s.isna().any():
        spec["name"] = "step (blank: whole trace)"
    if c.endswith("_ns") and pd.api.types.is_numeric_dtype(s):
        vals = pd.to_numeric(s, errors="coerce").astype("float64")
        spec["name"] = rename.get(c, c[:-3].replace("_", " ")) + f" ({unit})"
        spec["type"] = "numeric"
        spec["format"] = Format(precision=3 if unit == "ms" else 1,
                                                  scheme=Scheme.fixed).group(True)
        return spec, (vals / div).round(4 if unit == "ms" else 2)
    if pd.api.types.is_bool_dtype(s):
        spec["type"] = "text"
        return spec, s.map({True: "yes", False: "no"})
    if pd.api.types.is_numeric_dtype(s):
        return spec, _numeric_column(c, s, spec)
    spec["type"] = "text"
    return spec, s.map(lambda v: None if is_missing(v) else str(v))


def frame_table(df: pd.DataFrame | None, table_id: str, *, columns: Sequence[str] | None = None,
                rename: dict[str, str] | None = None, page_size: int = 15, sort: bool = True,
                filter_: bool = False, row_ids: Iterable[Any] | None = None, max_rows: int = 5000,
                style_cell: dict[str, Any] | None = None, empty: str = "No rows.", **kwargs: Any) -> Any:
    """A DataFrame as a sortable (and optionally filterable) DataTable.

    Columns ending in ``_ns`` are shown in ms (or us when all values are small), as numbers so
    that sorting is numeric; ``*_pct`` with one decimal; text is truncated with a tooltip.
    """
    if df is None or len(df) == 0:
        return message(empty)
    df = df if columns is None else df[[c for c in columns if c in df.columns]]
    if len(df) > max_rows:
        df = df.head(max_rows)
    rename = rename or {}
    out = pd.DataFrame(index=range(len(df)))
    cols = []
    unit, div = _time_unit(df)
    for c in df.columns:
        spec, values = _table_column(c, df[c].reset_index(drop=True), rename, unit, div)
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
        tooltip_data=[{c: {"value": str(r.get(c) or ""), "type": "text"} for c in text_cols
                       if r.get(c) and len(str(r.get(c))) > 50} for r in records[: page_size * 40]],
        tooltip_duration=None,
        css=[{"selector": ".dash-spreadsheet td div", "rule": "line-height: 18px;"}],
    )
    if filter_:
        props["filter_options"] = {"case": "insensitive"}
    props.update(kwargs)
    return dash_table.DataTable(**props)  # type: ignore[attr-defined]  # not in dash's type stubs
