"""Reports that travel: the report model, Markdown, HTML and JSON renderers, the shared figures,
finding de-duplication (``part_of``) and redaction in every output format.

Every format is rendered for the bundled samples and for every real trace in ``shared/traces``
(skipped with a reason when that folder is absent). Traces are loaded once per module.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from traceview import figures
from traceview.errors import TraceviewError
from traceview import accounting
from traceview.claims import Claims
from traceview.findings import Finding
from traceview.pipeline import analyze
from traceview.registry import RENDERERS
from traceview.render import get_renderer
from traceview.render.common import findings_count_text
from traceview.render.markdown import MD_TABLE_ROWS, md_escape
from traceview.report import Report, findings_tree, report_to_json

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces"
SCHEMA = json.loads((REPO / "docs" / "report.schema.json").read_text())

SAMPLE_INPUTS = {
    "synthetic_4rank": SAMPLES / "synthetic_4rank",
    "synthetic_nsys": SAMPLES / "synthetic_nsys.sqlite",
    "torch_cpu_mlp": SAMPLES / "torch_cpu_mlp.json.gz",
}


def _shared_inputs() -> dict[str, Path]:
    if not SHARED.exists():
        return {}
    out = {}
    for folder in ("kineto", "nsys"):
        for p in sorted((SHARED / folder).iterdir()):
            out[f"shared/{p.name}"] = p
    return out


SHARED_INPUTS = _shared_inputs()
ALL_IDS = list(SAMPLE_INPUTS) + (list(SHARED_INPUTS) or ["shared/(absent)"])


class Case:
    """One trace with its report (from the pipeline) and rendered outputs (built lazily, cached)."""

    def __init__(self, path: Path):
        self.report = analyze(path, use_cache=False)
        self.trace = self.report.trace
        self.results = self.report.results
        self._out: dict[str, str] = {}

    def render(self, fmt: str, **options) -> str:
        key = fmt + repr(sorted(options.items()))
        if key not in self._out:
            text = get_renderer(fmt)(**options).render(self.report)
            assert isinstance(text, str)
            self._out[key] = text
        return self._out[key]


@pytest.fixture(scope="module")
def cases():
    cache: dict[str, Case] = {}

    def get(case_id: str) -> Case:
        if case_id.startswith("shared/"):
            if not SHARED_INPUTS:
                pytest.skip(f"real traces not available: {SHARED} is absent (it sits beside the repo in CI)")
            path = SHARED_INPUTS[case_id]
        else:
            path = SAMPLE_INPUTS[case_id]
        if case_id not in cache:
            cache[case_id] = Case(path)
        return cache[case_id]

    return get


# ----------------------------------------------------------------------------- GFM checking


def gfm_html(text: str) -> str:
    """Render Markdown the way GitHub does for what we use: CommonMark + GFM tables, raw HTML on."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table").render(text)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.tables: list[dict] = []
        self._cell: list[str] | None = None
        self._stack: list[dict] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "table":
            self._stack.append({"header": [], "rows": []})
        elif tag == "tr" and self._stack:
            self._stack[-1]["rows"].append([])
        elif tag in ("td", "th") and self._stack:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._stack and self._cell is not None:
            self._stack[-1]["rows"][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table" and self._stack:
            t = self._stack.pop()
            t["header"], t["rows"] = (t["rows"][0], t["rows"][1:]) if t["rows"] else ([], [])
            self.tables.append(t)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse_html(text: str) -> _Tags:
    p = _Tags()
    p.feed(text)
    return p


#: the HTML the Markdown report may produce once rendered (anything else is a name that escaped)
GFM_TAGS = {"h2", "h3", "p", "br", "table", "thead", "tbody", "tr", "th", "td", "details", "summary", "strong",
            "em", "code", "pre", "ul", "li", "blockquote"}


# ----------------------------------------------------------------------------- every format, every trace


@pytest.mark.parametrize("case_id", ALL_IDS)
def test_every_format_renders(cases, case_id):
    import jsonschema

    case = cases(case_id)
    report = case.report
    # JSON: valid against the versioned schema, and round-trips
    text = case.render("json")
    data = json.loads(text)
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert data == json.loads(report_to_json(report))
    assert re.match(SCHEMA["properties"]["schema_version"]["pattern"], data["schema_version"])
    for inp in data["inputs"]:
        assert "/" not in inp["file"] and "\\" not in inp["file"]
    # Markdown: GFM tables and <details> come out as intended, no stray HTML from trace strings
    md = case.render("markdown")
    rendered = parse_html(gfm_html(md))
    assert set(rendered.tags) <= GFM_TAGS, set(rendered.tags) - GFM_TAGS
    summary = rendered.tables[0]
    assert [row[0] for row in summary["rows"]][:4] == ["GPUs", "ranks", "steps", "step time"]
    assert all(len(row) == len(t["header"]) for t in rendered.tables for row in t["rows"])
    n_details = md.count("<details")
    assert rendered.tags.count("details") == n_details and n_details >= 2
    if report["findings"]:
        findings_table = next(t for t in rendered.tables if t["header"][:3] == ["id", "severity", "finding"])
        assert len(findings_table["rows"]) == len(report["findings"])
    # HTML: self-contained (no external script, style or request), figures present, names escaped
    page = case.render("html", plotlyjs="inline")
    assert_offline_html(page)
    assert page.count('class="js-plotly-plot"') == 0  # plotly adds it at run time
    n_figs = len(figures.report_figures(report, case.trace))
    assert page.count('tvPlot("fig-') == n_figs
    assert 'id="traceview-report"' not in page  # no embedded model: the charts carry what they draw


def assert_offline_html(page: str) -> None:
    """No script, style, image or frame from elsewhere: the page (outside script bodies, whose
    library code mentions URLs it never loads here) has no external URL in any attribute or CSS."""
    opens = re.findall(r"<script\b[^>]*>", page, re.I)
    assert opens and all("src" not in tag.lower() for tag in opens), "external script"
    # every script body is closed only by its own </script>: data never closes it early
    assert len(opens) == len(re.findall(r"</script", page, re.I))
    markup = re.sub(r"(<script\b[^>]*>).*?(</script>)", r"\1\2", page, flags=re.S | re.I)
    assert len(markup) < 2_000_000
    assert not re.search(r"<(link|iframe|img|object|embed)\b", markup, re.I), "embedded resource"
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?(?:https?:)?//""", markup, re.I), "external URL"
    assert not re.search(r"@import|url\(", markup, re.I), "external CSS"
    assert "default-src 'none'" in markup  # the CSP forbids any request the page might try anyway


def assert_cdn_html(page: str) -> None:
    """The default page: its one external script is plotly.js from its CDN, pinned to the version
    plotly.py bundles, and the Content-Security-Policy allows that host only."""
    from plotly.offline import get_plotlyjs_version

    srcs = re.findall(r"<script\b[^>]*\bsrc=\"([^\"]+)\"", page, re.I)
    assert srcs == [f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"], srcs
    assert "default-src 'none'" in page and "'unsafe-eval' https://cdn.plot.ly;" in page
    assert len(page) < 1_500_000  # plotly.js (4.8 MB) is not inlined


def test_sample_html_escapes_kernel_names(cases):
    case = cases("synthetic_4rank")
    page = case.render("html")
    names = [r["name"] for r in case.report["analyses"]["kernels"]["tables"]["top_kernels"]["rows"] if "<" in r["name"]]
    assert names, "the sample has templated kernel names"
    for name in names[:5]:
        assert name not in page  # raw `<...>` never reaches the page
    assert "&lt;" in page
    # figure data inside <script> carries no raw < > &
    bodies = re.findall(r"<script>(tvPlot\(.*?)</script>", page, re.S)
    assert bodies
    for body in bodies:
        assert "<" not in body and ">" not in body.replace("=>", "") and "&" not in body.replace("&&", "")


def test_markdown_escapes_names_and_keeps_them_readable():
    name = "void at::native::vectorized_elementwise_kernel<4, float*>(int | x) `tick` $x$ [link](u)"
    html = gfm_html(f"| a |\n| --- |\n| {md_escape(name)} |\n")
    table = parse_html(html).tables[0]
    assert table["rows"][0][0] == name
    assert set(parse_html(html).tags) <= {"table", "thead", "tbody", "tr", "th", "td"}


# ----------------------------------------------------------------------------- headline figures


def test_headline_equals_analyses_and_truth(cases):
    case = cases("synthetic_4rank")
    s = case.report["summary"]
    bd = case.results["temporal"].tables["breakdown"]
    whole = bd[bd["step"].isna()]
    for key in ("window_ns", "busy_ns", "idle_ns", "compute_ns", "communication_ns", "exposed_comm_ns"):
        assert s[key] == int(whole[key].sum()), key
    assert s["utilization"] == pytest.approx(whole["busy_ns"].sum() / whole["window_ns"].sum())
    steps = case.results["temporal"].tables["steps"]
    assert s["median_step_time_ns"] == int(round(float(np.median(steps["end_ns"] - steps["start_ns"]))))

    truth = json.loads((SAMPLES / "synthetic_4rank" / "truth.json").read_text())
    ranks = truth["ranks"]
    for key in ("window_ns", "busy_ns", "idle_ns", "compute_ns", "communication_ns", "exposed_comm_ns"):
        assert s[key] == sum(r["overall"][key] for r in ranks.values()), key
    step_times = [st["cpu_end_ns"] - st["cpu_start_ns"] for r in ranks.values() for st in r["steps"]]
    assert s["median_step_time_ns"] == int(round(float(np.median(step_times))))
    assert s["steps"] == len(truth["steps"])
    assert s["world_size"] == truth["world_size"] == 4
    assert s["ranks"] == [0, 1, 2, 3]
    assert s["gpu_models"] == ["NVIDIA H100 80GB HBM3"]
    # per rank: the breakdown in the rank section is the truth's overall
    for r in case.report["ranks"]:
        (b,) = r["breakdown"]
        t = ranks[str(r["rank"])]["overall"]
        assert (b["busy_ns"], b["idle_ns"], b["overlap_ns"]) == (t["busy_ns"], t["idle_ns"], t["overlap_ns"])
        assert b["overlap_pct"] == pytest.approx(t["overlap_pct"], abs=1e-5)
    # charts: the breakdown bars add up to the window; the gap histogram holds every gap
    for row in case.report["charts"]["breakdown"]:
        assert row["compute_ns"] + row["exposed_comm_ns"] + row["memory_only_ns"] + row["idle_ns"] == row["window_ns"]
    hist = case.report["charts"]["gap_histogram"]
    n_truth_gaps = sum(len(r["overall"]["gaps"]) for r in ranks.values())
    assert hist["total_gaps"] == n_truth_gaps == sum(sum(v) for v in hist["gaps"].values())
    assert sum(sum(v) for v in hist["idle_ns"].values()) == s["idle_ns"]
    # environment: versions the Kineto header records
    env = case.report["environment"]
    assert env["versions"]["nccl"]["value"] == "2.26.2"
    assert env["gpus"][0]["sm_count"] == 132 and env["gpus"][0]["count"] == 4


def test_time_values_are_integer_ns(cases):
    case = cases("synthetic_4rank")

    def walk(obj, key=""):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, k)
        elif isinstance(obj, list):
            for v in obj:
                walk(v, key)
        elif key.endswith("_ns") or key.endswith("_ns_per_step"):
            assert obj is None or (isinstance(obj, int) and not isinstance(obj, bool)), (key, obj)

    walk(json.loads(case.render("json")))


def test_tables_are_bounded_with_total_stated(cases):
    case = cases("synthetic_4rank")
    launches = case.report["analyses"]["launch_overhead"]["tables"]["launches"]
    assert launches["total_rows"] == len(case.results["launch_overhead"].tables["launches"]) > 50
    assert launches["shown_rows"] == len(launches["rows"]) == 50
    assert launches["sorted_by"] == "launch_delay_ns"
    delays = [r["launch_delay_ns"] for r in launches["rows"]]
    assert delays == sorted(delays, reverse=True)
    assert "of 804 rows" in case.render("html").replace(",", "")


def test_no_steps_and_no_gpu_say_so(cases):
    case = cases("torch_cpu_mlp")  # CPU only: no GPU activity
    s = case.report["summary"]
    assert s["utilization"] is None and "no GPU activity" in s["notes"]["utilization"]
    md = case.render("markdown")
    assert "no GPU activity" in md
    assert any(w["scope"] == "temporal" for w in case.report["warnings"])


# ----------------------------------------------------------------------------- findings nesting


def _f(code, claims, *, rank=None, part_of=None, severity="medium", per_rank=None):
    evidence = {"per_rank": [{"rank": r} for r in per_rank]} if per_rank else {}
    return Finding(code=code, title=code, severity=severity, analysis="x", recommendation="r",
                   rank=rank, part_of=part_of, evidence=evidence, claims=claims)


def _nested(findings, windows):
    acc = accounting.account(findings, accounting.Denominator(windows, {}))
    return [(top.finding, [k.finding for k, _ in kids]) for top, kids in accounting.tree(acc)]


def test_findings_nest_under_their_umbrella_by_the_time_they_share():
    windows = {(0, 0): (0, 1000), (1, 0): (0, 1000)}
    umbrella0 = _f("exposed_communication", Claims.of(0, 0, [0], [500]), rank=0)
    umbrella1 = _f("exposed_communication", Claims.of(1, 0, [0], [300]), rank=1)
    part = _f("exposed_collective", Claims.of([0, 1], [0, 0], [0, 0], [450, 100]), part_of="exposed_communication")
    other = _f("low_utilization", Claims.of(0, 0, [600], [1000]), rank=0)
    nested = _nested([part, umbrella1, other, umbrella0], windows)
    assert [(p.code, p.rank, [k.code for k in kids]) for p, kids in nested] == [
        ("exposed_communication", 0, ["exposed_collective"]),
        ("low_utilization", 0, []),
        ("exposed_communication", 1, []),
    ]
    # clipped to the umbrella it is nested in: its rank-1 time is that umbrella's, not its parent's
    assert part.cost_ns_per_step <= umbrella0.cost_ns_per_step


def test_part_without_its_umbrella_stands_alone_and_counts_once():
    windows = {(0, 0): (0, 1000), (2, 0): (0, 1000)}
    part = _f("sync_calls", Claims.of(2, 0, [0], [100]), part_of="sync_bound_gaps", per_rank=[2])
    umbrella_elsewhere = _f("sync_bound_gaps", Claims.of(0, 0, [0], [50]), rank=0)
    nested = _nested([part, umbrella_elsewhere], windows)
    assert [(p.code, len(k)) for p, k in nested] == [("sync_calls", 0), ("sync_bound_gaps", 0)]
    assert _nested([part], windows)[0][0] is part
    # the umbrella holds its time: nested
    nested = _nested([part, _f("sync_bound_gaps", Claims.of(2, 0, [0], [120]), rank=2)], windows)
    assert [(p.code, [k.code for k in kids]) for p, kids in nested] == [("sync_bound_gaps", ["sync_calls"])]


def test_analyses_mark_overlapping_findings(cases):
    case = cases("synthetic_4rank")
    by_code = {f.code: f for r in case.results.values() for f in r.findings}
    assert by_code["exposed_collective"].part_of == "exposed_communication"
    assert by_code["blocking_copy"].part_of == "sync_bound_gaps"
    records = case.report["findings"]
    child = next(f for f in records if f["code"] == "exposed_collective")
    parent = next(f for f in records if f["id"] == child["parent"])
    assert parent["code"] == "exposed_communication"
    assert records.index(parent) < records.index(child)
    fs = case.report["findings_summary"]
    assert fs["nested"] == sum(1 for f in records if f["parent"]) >= 1
    assert fs["top_level"] == len(findings_tree(case.report)) == sum(fs["by_severity"].values())
    # blocking_copy has no sync_bound_gaps umbrella in this sample: it goes under the next umbrella of
    # its chain that holds its time (the idle), never beside it at top level
    copy = next(f for f in records if f["code"] == "blocking_copy")
    direct = next(f for f in records if f["id"] == copy["part_of_id"])
    assert direct["code"] in ("sync_bound_gaps", "low_utilization")
    assert copy["cost_ns_per_step"] <= direct["cost_ns_per_step"]


# ----------------------------------------------------------------------------- figures


def _check_figure(fig: go.Figure) -> None:
    assert isinstance(fig, go.Figure)
    assert fig.layout.title.text
    assert fig.layout.showlegend is not False
    for axis in ("xaxis", "yaxis"):
        title = fig.layout[axis].title.text
        assert title, axis
    assert fig.data, "no traces"


def test_figures_have_titles_axes_units_and_legends(cases):
    case = cases("synthetic_4rank")
    figs = figures.report_figures(case.report, case.trace)
    assert list(figs) == ["breakdown", "overlap", "gap_histogram", "timeline", "launch_scatter", "skew_heatmap"]
    for name, fig in figs.items():
        _check_figure(fig)
        if name != "skew_heatmap":
            # the unit the figure's magnitude reads best in (traceview.units.duration_unit)
            assert re.search(r"\((s|ms|us|ns)\)", fig.layout.yaxis.title.text + fig.layout.xaxis.title.text), name
    heat = figs["skew_heatmap"]
    z = np.array(heat.data[0].z, dtype=float)
    assert z.shape == (4, 6) and np.nanargmax(z.mean(axis=1)) == 3  # rank 3 is the planted straggler
    # one rank: no heatmap
    single = cases("torch_cpu_mlp")
    assert figures.skew_heatmap_figure(single.report) is None
    assert figures.report_figures(single.report, single.trace) == {}
    # the empty-data figures still say why
    for fn in (figures.breakdown_figure, figures.gap_histogram_figure, figures.launch_scatter_figure,
               figures.overlap_figure):
        fig = fn(single.report)
        assert fig.layout.title.text and fig.layout.annotations


def test_timeline_is_bounded_and_escapes_names(cases):
    case = cases("synthetic_4rank")
    tr = case.trace
    start = int(tr.column("start_ns").min())
    end = int((tr.column("start_ns") + tr.column("dur_ns")).max())
    gaps = case.results["idle_gaps"].tables["gaps"]
    fig = figures.timeline_figure(tr, start, end, rank=0, gaps=gaps, max_shapes=150)
    bars = sum(len(t.x) for t in fig.data if isinstance(t, go.Bar))
    shapes = len(fig.layout.shapes)
    assert bars + shapes <= 150 + figures.MAX_GAP_LABELS
    assert any("merged" in str(a.text) for a in fig.layout.annotations)
    full = figures.timeline_figure(tr, start, end, rank=0, gaps=gaps)
    texts = [t for tr_ in full.data for t in (tr_.customdata if tr_.customdata is not None else [])
             if isinstance(t, str)]
    assert texts and not any("<4096ul>" in t for t in texts) and any("&lt;4096ul&gt;" in t for t in texts)


@pytest.mark.parametrize("case_id", [i for i in ALL_IDS if i.startswith("shared/")])
def test_timeline_never_exceeds_the_shape_budget(cases, case_id):
    case = cases(case_id)
    fig = figures.worst_gap_timeline(case.trace, case.report)
    if fig is None:
        assert case.report["charts"]["timeline"] is None
        return
    bars = sum(len(t.x) for t in fig.data if isinstance(t, go.Bar))
    assert bars + len(fig.layout.shapes) <= figures.MAX_SHAPES + figures.MAX_GAP_LABELS


# ----------------------------------------------------------------------------- secrets

HF = "hf_" + "Qw3rTy7UiOp9AsDfGhJkLzXcVbNm12Ab34"
WANDB = "5f4dcc3b5aa765d61d8327deb882cf99e4a1b2c3"
AWS = "AKIAZ7QX3MPLE4KEYH2Q"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImlhdCI6MTcwMDAwMDAwMH0."
       "S1gn4tur3V4lu3sH0uldN3v3rAppe4rInR3p0rtsXx")
SECRETS = (HF, WANDB, AWS, JWT)


def _secret_trace(path: Path) -> Path:
    """A small two-step Kineto trace with secrets in metadata, env, distributedInfo and event args."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": f"main WANDB_API_KEY={WANDB}"}},
    ]
    corr = 100
    for step in range(2):
        base = step * 1000
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": base, "dur": 900})
        events.append({"ph": "X", "cat": "user_annotation", "name": f"load HF_TOKEN={HF} {AWS}", "pid": 1, "tid": 1,
                       "ts": base + 5, "dur": 400})
        events.append({"ph": "X", "cat": "python_function", "name": f"fetch(token={JWT})", "pid": 1, "tid": 1,
                       "ts": base + 10, "dur": 380})
        for i in range(3):
            corr += 1
            t = base + 420 + 100 * i
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": t, "dur": 5, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": f"gemm<float, {AWS}>", "pid": 0, "tid": 7,
                           "ts": t + 10, "dur": 60, "args": {"correlation": corr, "stream": 7, "device": 0}})
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": base + 750, "dur": 5, "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0,
                       "tid": 20, "ts": base + 760, "dur": 80,
                       "args": {"correlation": corr, "stream": 20, "device": 0, "Collective name": "allreduce",
                                "Process Group Name": JWT, "Process Group Ranks": "[0]"}})
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Test GPU", "numSms": 4, "totalGlobalMem": 1 << 30}],
        "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl", "nccl_version": "2.21.5",
                            "store_token": HF},
        "cuda_runtime_version": 12040,
        "metadata": {"env": {"HF_TOKEN": HF, "WANDB_API_KEY": WANDB, "AWS_ACCESS_KEY_ID": AWS, "AUTH_JWT": JWT,
                             "CUDA_VERSION": "12.4.1", "NCCL_VERSION": "2.21.5-1"},
                     "command": f"HF_TOKEN={HF} python train.py --wandb-key {WANDB}",
                     "pip_packages": ["torch==2.6.0", "nvidia-cudnn-cu12==9.1.0.70"],
                     "headers": {"Authorization": f"Bearer {JWT}"}},
        "traceEvents": events,
    }
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    return path


def test_planted_secrets_never_appear_in_any_format(tmp_path):
    path = _secret_trace(tmp_path / "rank0.json.gz")
    case = Case(path)
    assert case.report["findings"], "the trace should raise findings (so their text is rendered)"
    env = case.report["environment"]["versions"]
    assert env["pytorch"]["value"] == "2.6.0" and env["cuda_runtime"]["value"] == "12.4"
    assert env["cudnn"]["value"] == "9.1.0.70" and env["nccl"]["value"] == "2.21.5"
    outputs = {fmt: case.render(fmt) for fmt in ("markdown", "json", "html")}
    env_vars = dict(os.environ, COLUMNS="200", TRACEVIEW_CACHE_DIR=str(tmp_path / "cache"))
    text = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(path), "--no-cache", "--top", "50"],
                          capture_output=True, text=True, env=env_vars, timeout=300)
    assert text.returncode == 0, text.stderr
    outputs["text"] = text.stdout
    for fmt, out in outputs.items():
        for secret in SECRETS:
            for piece in (secret, secret[:20], secret[-16:]):
                assert piece not in out, f"{fmt} output leaks {piece!r}"
    assert "<redacted>" in outputs["json"]


# ----------------------------------------------------------------------------- CLI


def _cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200", TRACEVIEW_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_cli_formats_and_output_file(tmp_path):
    sample = str(SAMPLE_INPUTS["synthetic_4rank"])
    out = tmp_path / "reports" / "report.json"
    r = _cli("analyze", sample, "--format", "json", "-o", str(out), tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert str(out) in r.stdout and "json" in r.stdout
    data = json.loads(out.read_text())
    assert data["summary"]["num_ranks"] == 4
    r = _cli("analyze", sample, "--format", "markdown", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("## traceview report") and "| **GPUs** |" in r.stdout
    html_out = tmp_path / "r.html"
    r = _cli("analyze", sample, "-f", "html", "--plotlyjs", "inline", "-o", str(html_out), tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert_offline_html(html_out.read_text())
    r = _cli("analyze", sample, "-f", "html", "-o", str(html_out), tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert_cdn_html(html_out.read_text())
    r = _cli("analyze", sample, "-f", "html", "--plotlyjs", "web", tmp_path=tmp_path)
    assert r.returncode == 2 and "--plotlyjs web" in r.stderr and "Traceback" not in r.stderr
    r = _cli("analyze", sample, "--format", "yaml", tmp_path=tmp_path)
    assert r.returncode == 2 and "yaml" in r.stderr
    text_out = tmp_path / "r.txt"
    r = _cli("analyze", sample, "-o", str(text_out), tmp_path=tmp_path)
    assert r.returncode == 0 and "Findings" in text_out.read_text() and str(text_out) in r.stdout


def test_findings_nest_under_the_root_of_their_part_of_chain():
    windows = {(0, 0): (0, 1000), (1, 0): (0, 1000)}
    util = _f("low_utilization", Claims.of(0, 0, [0], [100]), rank=0)
    sync_gaps = _f("sync_bound_gaps", Claims.of(0, 0, [0], [40]), rank=0, part_of="low_utilization")
    calls = _f("sync_calls", Claims.of(0, 0, [0], [30]), rank=0, part_of="sync_bound_gaps")
    other_rank = _f("sync_calls", Claims.of(1, 0, [0], [50]), rank=1, part_of="sync_bound_gaps")
    nested = _nested([calls, other_rank, sync_gaps, util], windows)
    assert [(p.code, p.rank, [c.code for c in kids]) for p, kids in nested] == [
        ("low_utilization", 0, ["sync_bound_gaps", "sync_calls"]),
        ("sync_calls", 1, []),  # no umbrella on rank 1: stands alone, counted once
    ]


# ----------------------------------------------------------------------------- one list of findings, every format

#: a finding's id at the start of a text line (first screen) or in a table cell (--details)
_TEXT_ID = re.compile(r"^(?:│ )?(F\d+(?:\.\d+)?)\s")


def _expected(report) -> list[tuple[str, str]]:
    return [(f["id"], f["title"]) for f in report["findings"]]


def _markdown_findings(md: str) -> list[tuple[str, str]]:
    table = next(t for t in parse_html(gfm_html(md)).tables if t["header"][:3] == ["id", "severity", "finding"])
    return [(row[0], row[2]) for row in table["rows"]]


def _html_findings(page: str) -> list[tuple[str, str]]:
    import html as html_lib

    rows = re.findall(r'<tr(?: class=nested)? id="finding-([^"]+)"><td class="fid">([^<]*)</td>.*?'
                      r'<td class="title">(?:↳ )?(.*?)<div class="code">', page, re.S)
    assert all(a == b for a, b, _ in rows)
    return [(html_lib.unescape(a), html_lib.unescape(t)) for a, _, t in rows]


def _text_ids(text: str) -> list[str]:
    return [m.group(1) for line in text.splitlines() if (m := _TEXT_ID.match(line))]


@pytest.mark.parametrize("case_id", ["synthetic_4rank", "shared/param_dlrm_8ranks_v100"])
def test_every_format_shows_the_same_findings_in_the_same_order(cases, case_id):
    case = cases(case_id)
    expected = _expected(case.report)
    assert expected, "the trace should raise findings"
    assert [f"F{i}" for i in range(1, 1 + len(top_level_findings_of(case.report)))] == \
        [f["id"] for f in top_level_findings_of(case.report)]
    data = json.loads(case.render("json"))
    assert [(f["id"], f["title"]) for f in data["findings"]] == expected
    md = _markdown_findings(case.render("markdown"))
    assert [i for i, _ in md] == [i for i, _ in expected]
    for (_, cell), (_, title) in zip(md, expected):
        assert cell.startswith(title.replace("\n", " ")) or cell.startswith("↳ " + title), (cell, title)
    assert _html_findings(case.render("html")) == expected
    # the terminal: every id in order under --details; the first screen lists the top-level ones first
    assert _text_ids(case.render("text", details=True, top=3))[-len(expected):] == [i for i, _ in expected]
    first = case.render("text", top=3)
    top = top_level_findings_of(case.report)
    assert _text_ids(first) == [f["id"] for f in top[:3]]
    for f in top[:3]:
        line = next(line for line in first.splitlines() if line.startswith(f["id"] + " "))
        assert f["title"][:40] in line and f["severity"] in line


def top_level_findings_of(report) -> list[dict]:
    return [f for f in report["findings"] if f["parent"] is None]


@pytest.mark.parametrize("case_id", ["synthetic_4rank", "synthetic_nsys", "shared/param_dlrm_8ranks_v100"])
def test_summary_counts_equal_the_list(cases, case_id):
    case = cases(case_id)
    report = case.report
    findings = report["findings"]
    fs = report["findings_summary"]
    top = top_level_findings_of(report)
    assert fs["total"] == len(findings)
    assert fs["top_level"] == len(top) == len(findings_tree(report))
    assert fs["nested"] == len(findings) - len(top)
    assert fs["by_severity"] == {s: sum(1 for f in top if f["severity"] == s) for s in fs["by_severity"]}
    assert report["summary"]["findings"] == fs
    # every format states these counts
    counts = findings_count_text(report)
    assert f"Findings: {counts}" in case.render("text")
    assert counts.replace("_", "\\_") in case.render("markdown")
    assert counts in case.render("html")


def test_first_screen_of_the_8_rank_job(cases):
    case = cases("shared/param_dlrm_8ranks_v100")
    report = case.report
    s = report["summary"]
    text = case.render("text")
    lines = text.rstrip("\n").splitlines()
    assert len(lines) <= 40, text
    assert max(len(line) for line in lines) <= 160, text
    head = "\n".join(lines[:4])
    assert "8 ranks" in lines[0] and "8 × Tesla V100-SXM2-32GB" in lines[0] and "1 step per rank" in lines[0]
    assert "kineto" in lines[0]
    from traceview.units import fmt_ns, fmt_share

    assert f"median {fmt_ns(s['median_step_time_ns'])}" in head and f"p90 {fmt_ns(s['p90_step_time_ns'])}" in head
    assert f"GPU utilization {fmt_share(s['utilization'])}" in head
    for label, key in (("compute", "compute_share"), ("exposed communication", "exposed_comm_share"),
                       ("memory alone", "memory_only_share"), ("idle", "idle_share")):
        assert f"{label} {fmt_share(s[key])}" in head, label
    shares = sum(s[k] for k in ("compute_share", "exposed_comm_share", "memory_only_share", "idle_share"))
    assert shares == pytest.approx(1.0)
    # top findings with cost per step, top kernels, and no unmapped-category noise
    assert "cost/step" in text
    for f in top_level_findings_of(report)[:5]:
        assert any(line.startswith(f["id"] + " ") and f["title"][:30] in line for line in lines), f["id"]
    assert "Top kernels" in text
    # the job's largest kernel, with its total over all ranks and GPUs
    kernels = report["analyses"]["kernels"]["tables"]["job_kernels"]["rows"]
    largest = max(kernels, key=lambda r: r["total_ns"])
    per_gpu = report["analyses"]["kernels"]["tables"]["kernels"]["rows"]
    assert largest["total_ns"] == sum(r["total_ns"] for r in per_gpu if r["name"] == largest["name"])
    assert largest["name"][:40] in text and fmt_ns(largest["total_ns"]) in text
    assert "(no category)" not in text and "Trace 1" not in text
    # no header names a unit its cells do not use
    assert not re.search(r"\b(ns|_ns)\b", "\n".join(line for line in lines if "──" not in line).replace(" ns", ""))


def test_one_step_tables_do_not_repeat_whole_trace_rows(cases):
    case = cases("shared/param_dlrm_8ranks_v100")
    assert case.report["summary"]["steps"] == 1
    md = case.render("markdown")
    table = case.report["analyses"]["temporal"]["tables"]["breakdown"]
    whole = [r for r in table["rows"] if r["step"] is None]
    assert whole and len(table["rows"]) == 2 * len(whole)  # the report keeps both ...
    block = md[md.index("GPU time per rank, device and step"):]
    block = block[: block.index("</details>")]  # up to the end of the analysis's block
    shown = min(len(whole), MD_TABLE_ROWS)
    assert block.count("\n| ") - 2 == shown  # header and rule, then the whole-trace rows once
    if shown < len(whole):
        assert f"{shown} of {len(whole)} rows" in block
    assert "| step |" not in block
    text = case.render("text", details=True)
    section = text[text.index("GPU time per rank, device and step"):].split("\n\n")[0]
    assert sum(1 for line in section.splitlines() if re.match(r"\s*\d", line)) == len(whole)


def test_renderer_registry_and_unknown_format():
    assert {"text", "markdown", "html", "json"} <= set(RENDERERS)
    assert {n: RENDERERS[n].output_file_extension for n in ("text", "markdown", "html", "json")} == \
        {"text": ".txt", "markdown": ".md", "html": ".html", "json": ".json"}
    assert all(RENDERERS[n].description for n in RENDERERS)
    with pytest.raises(TraceviewError, match="choose one of text, markdown, html, json"):
        get_renderer("yaml")
    assert get_renderer("Markdown") is RENDERERS["markdown"]


def test_html_without_the_trace_leaves_the_timeline_out_with_a_note(cases):
    case = cases("synthetic_4rank")
    job_report = Report(case.report.data, case.report.results, trace=None)
    page = get_renderer("html")(plotlyjs="inline").render(job_report)
    assert_offline_html(page)
    assert 'id="no-timeline"' in page and "fig-timeline" not in page
    assert page.count('tvPlot("fig-') == len(figures.report_figures(case.report, None))
    assert 'id="no-timeline"' not in case.render("html")


# ----------------------------------------------------------------------------- reports that attach


def test_the_8rank_reports_are_small_enough_to_attach(cases):
    case = cases("shared/param_dlrm_8ranks_v100")
    html_page = case.render("html")
    assert_cdn_html(html_page)
    assert len(html_page.encode()) < 1_500_000
    md = case.render("markdown")
    # (20.6 kB with the step budget's table: one row per rank, GPU and step; 25.9 kB with the
    # critical path's section, its what-if findings and its headline line; 30.5 kB with the
    # efficiency roll-up, its headline line and the modules analysis's tables named)
    assert len(md.encode()) < 32_000, len(md.encode())
    assert len(md) < 65_536  # a GitHub comment
    inline = case.render("html", plotlyjs="inline")
    assert_offline_html(inline)
    # the inline page is the default page plus plotly.js, nothing else
    assert len(html_page) < len(inline) < len(html_page) + 6_000_000


def test_html_first_screen_is_summary_top_findings_and_breakdown(cases):
    case = cases("synthetic_4rank")
    page = case.render("html")
    # the summary beside the breakdown chart, then the findings; the rest below, folded
    order = [page.index(mark) for mark in ("<h2>Summary</h2>", 'id="fig-breakdown"',
                                           "<h2>Findings, most costly first</h2>", "<h2>More charts</h2>",
                                           '<details class="section"><summary><h2>Details per analysis')]
    assert order == sorted(order)
    # the breakdown chart is open; every other chart is folded in its own <details>
    before = page[: page.index('id="fig-breakdown"')]
    assert before.count("<details") == before.count("</details>")  # in no <details>
    for name in figures.report_figures(case.report, case.trace):
        if name != "breakdown":
            div = page.index(f'id="fig-{name}"')
            assert page.rfind('<details class="figure">', 0, div) > page.rfind("</details>", 0, div)


def test_max_findings_cuts_without_reranking(cases):
    case = cases("synthetic_4rank")
    findings = case.report["findings"]
    top_level = [f["id"] for f in findings if f["parent"] is None]
    assert len(top_level) >= 2
    for n in (1, 2):
        keep = set(top_level[:n])
        expected = [(f["id"], f["title"]) for f in findings if (f["parent"] or f["id"]) in keep]
        assert [i for i, _ in _markdown_findings(case.render("markdown", max_findings=n))] == [i for i, _ in expected]
        assert _html_findings(case.render("html", max_findings=n)) == expected
        assert f"{len(top_level) - n} more top-level findings are left out" in case.render("markdown", max_findings=n)
    assert [i for i, _ in _markdown_findings(case.render("markdown"))] == [f["id"] for f in findings]


def test_warnings_repeated_per_rank_are_said_once():
    from traceview.render.common import grouped_warnings

    msgs = [f"rank {r} GPU {r}: dtype 'int64' has no peak (rank {r})" for r in range(4)] + ["no steps"]
    assert grouped_warnings(msgs) == ["rank 0 GPU 0: dtype 'int64' has no peak (rank 0) (and the same on ranks 1-3)",
                                      "no steps"]
    assert grouped_warnings(["a", "b"]) == ["a", "b"]


def test_duration_unit_follows_the_magnitude():
    from traceview.units import duration_unit

    assert [duration_unit(v)[0] for v in (0, 999, 1_000, 2_500_000, 3_000_000_000)] == ["ns", "ns", "us", "ms", "s"]
    case_report = {"charts": {"breakdown": [{"rank": 0, "device": 0, "window_ns": 40_000, "compute_ns": 30_000,
                                             "exposed_comm_ns": 0, "memory_only_ns": 0, "idle_ns": 10_000}]}}
    fig = figures.breakdown_figure(case_report)
    assert fig.layout.yaxis.title.text == "time (us)" and list(fig.data[0].y) == [30.0]
