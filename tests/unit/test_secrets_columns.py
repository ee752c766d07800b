"""Column-wise scrubbing (``traceview.secrets.ColumnRows``, issue 12): a report's tables are scrubbed
column by column, each distinct string once, and must give exactly what scrubbing the same rows as a
list of dicts gives (values, keys, and the hits counted per cell), secrets in table cells included.
Also: every value-shape rule still fires behind the literal-prefix scan that skips ``_SHAPES``."""

from __future__ import annotations

import json
import random
import string

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceview.plain import column_rows
from traceview.report import table_columns
from traceview.secrets import REDACTED, ColumnRows, scrub, scrub_text, scrub_with_report

_rng = random.Random(12)
_ALNUM = string.ascii_letters + string.digits


def _rand(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


#: one token per ``_SHAPES`` alternative, and the context rules (assignment, flag, bearer, URL, JSON)
TOKENS = {
    "hf_token": "hf_" + _rand(34),
    "github_token": "ghp_" + _rand(36),
    "github_pat": "github_pat_11" + _rand(40),
    "aws_access_key_id": "AKIA" + _rand(16, string.ascii_uppercase + string.digits),
    "aws_asia": "ASIA" + _rand(16, string.ascii_uppercase + string.digits),
    "openai_key": "sk-proj-" + _rand(40),
    "slack_token": "xoxb-" + _rand(12, string.digits) + "-" + _rand(20),
    "gitlab_token": "glpat-" + _rand(20),
    "google_api_key": "AIza" + _rand(35),
    "npm_token": "npm_" + _rand(36),
    "pypi_token": "pypi-AgE" + _rand(60),
    "stripe_key": "sk_live_" + _rand(24),
    "stripe_restricted": "rk_test_" + _rand(24),
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ" + _rand(20) + "." + _rand(30),
}
CONTEXT = [
    "HF_TOKEN=" + _rand(20), "train.py --api-key " + _rand(12, string.ascii_lowercase),
    "Authorization: Bearer " + _rand(24), "redis://svc:" + _rand(10) + "@cache:6379/0", _rand(44),
    json.dumps({"client_secret": _rand(12), "region": "us"}), '["--token", "' + _rand(10) + '"]',
]
ORDINARY = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "aten::mm", "ProfilerStep#3",
    "cudaLaunchKernel", "XBLOCK=2,R0_BLOCK=2048", "sk-learn", "--tokenizer gpt2", "", "abc", REDACTED,
]


@pytest.mark.parametrize("rule", sorted(TOKENS))
def test_every_value_shape_is_still_caught(rule):
    token = TOKENS[rule]
    assert scrub_text(token) == REDACTED
    assert scrub_text(f"kernel<{token}>(int) x") == f"kernel<{REDACTED}>(int) x"
    if rule in ("aws_asia", "github_pat", "stripe_restricted"):
        return  # counted under their family's rule name
    _, report = scrub_with_report([f"name {token}"])
    assert set(report.counts) == {"openai_key" if rule == "openai_key" else rule}


def test_a_secret_in_a_table_cell_is_caught_column_wise():
    secret = TOKENS["hf_token"]
    frame = pd.DataFrame({"kernel": ["gemm", f"gemm {secret}", "gemm"], "dur_ns": [3, 2, 1],
                          "token": ["a1b2c3", None, ""], "cpu_context": pd.array(["x", secret, None], dtype="str")})
    table = table_columns(frame, max_rows=50)
    assert isinstance(table["rows"], ColumnRows)
    out = scrub(table)
    assert secret not in json.dumps(out)
    assert out["rows"][1] == {"kernel": f"gemm {REDACTED}", "dur_ns": 2, "token": None, "cpu_context": REDACTED}
    # a value under a secret column name goes whole; empty strings and missing values hide nothing
    assert [r["token"] for r in out["rows"]] == [REDACTED, None, ""]
    assert out["rows"] == scrub({**table, "rows": table["rows"].rows()})["rows"]


_CELLS = st.one_of(
    st.integers(-3, 3), st.sampled_from([0.5, 2.5, float("nan"), True, False, None]),
    st.sampled_from(list(TOKENS.values()) + CONTEXT + ORDINARY),
    st.builds(lambda a, b: f"{a} {b}", st.sampled_from(ORDINARY), st.sampled_from(list(TOKENS.values()) + CONTEXT)),
    st.lists(st.sampled_from(["--token", "--lr", "x", TOKENS["hf_token"], "0.1"]), max_size=4),
    st.dictionaries(st.sampled_from(["password", "name", "sort_key", TOKENS["aws_access_key_id"]]),
                    st.sampled_from(["v", 7, TOKENS["slack_token"], None]), max_size=3),
)
_NAMES = st.sampled_from(["kernel", "dur_ns", "token", "HF_TOKEN", "api_key", "sort_key", "name", REDACTED,
                          TOKENS["aws_access_key_id"], "AKIAABCDEFGHIJKLMNOP", "--token", 7])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(_NAMES, min_size=0, max_size=6), n_rows=st.integers(0, 6), data=st.data(),
       strict=st.booleans(), context=st.sampled_from(["plain", "secret_key", "after_flag"]))
def test_column_wise_scrub_equals_the_per_row_scrub(names, n_rows, data, strict, context):
    values = [data.draw(st.lists(_CELLS, min_size=n_rows, max_size=n_rows)) for _ in names]
    table = ColumnRows(names, values)
    rows = table.rows()

    def place(rows_value):
        if context == "secret_key":
            return {"client_secret": rows_value, "columns": names}
        if context == "after_flag":
            return {"argv": ["--token", rows_value], "columns": names}
        return {"tables": {"t": {"rows": rows_value, "columns": names}}}

    got, got_report = scrub_with_report(place(table), strict=strict)
    want, want_report = scrub_with_report(place(rows), strict=strict)
    assert json.dumps(got, default=str) == json.dumps(want, default=str)
    assert got_report.hits == want_report.hits


def test_column_rows_of_a_frame_with_every_kind_of_column():
    """``column_rows`` (one object array) gives ``plain`` of each cell as iterating the columns does,
    for each dtype a table can hold; the missing values of every kind become None."""
    from traceview.plain import plain

    frame = pd.DataFrame({
        "i": [1, 2, 3], "start_ns": [1.5, float("nan"), float("inf")], "f": [0.25, 2.0, float("-inf")],
        "b": [True, False, True], "s": pd.array(["a", None, "c"], dtype="str"),
        "n": pd.array([1, None, 3], dtype="Int64"), "nb": pd.array([True, None, False], dtype="boolean"),
        "c": pd.Categorical(["x", None, "x"]), "o": [[1, 2], {"k_ns": 2.5}, None],
        "u": pd.array([1, 2, 3], dtype="uint64"), "t": pd.to_datetime(["2024-01-01", None, "2024-01-02"]),
    })
    frame.insert(0, "dup", [7, 8, 9])
    frame.columns = ["i", *frame.columns[1:]]  # a repeated name: rows keep the first place, the last value
    columns = [str(c) for c in frame.columns]
    want = [[plain(v, c) for v in series] for c, (_, series) in zip(columns, frame.items())]
    got = column_rows(frame, columns)
    assert repr(got.values) == repr(want)
    assert got.rows()[0]["i"] == 1 and list(got.rows()[0])[0] == "i"
    assert column_rows(frame.iloc[:0], columns).rows() == []
    assert column_rows(pd.DataFrame(index=range(3)), []).rows() == []


def test_a_module_path_is_not_a_random_token_but_a_random_one_with_slashes_is():
    """A layer's type path (issue 28) is CamelCase identifiers joined by slashes: no secret; base64
    with slashes in it still is."""
    from traceview.secrets import looks_secret

    assert not looks_secret("Qwen2Model/Qwen2DecoderLayer/Qwen2RMSNorm")
    assert not looks_secret("LlamaForCausalLM/LlamaModel/LlamaDecoderLayer/LlamaMLP")
    assert looks_secret("aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5zA7bC9/dE1fG3hI5jK7lM9nO1pQ3")

    assert not looks_secret("Qwen2Model/Qwen2DecoderLayer/Qwen2MLP/SiLU")
    assert not looks_secret("T5EncoderModel/T5Stack/T5Block")


def test_few_random_slashed_tokens_pass_for_module_paths():
    """The module-path exception lets almost no random base64 with slashes through (fixed seed)."""
    import random
    import string

    from traceview.secrets import is_identifier_path

    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits
    tokens = ["/".join("".join(rng.choice(alphabet) for _ in range(rng.randint(10, 20)))
                       for _ in range(rng.randint(2, 4))) for _ in range(1000)]
    exempted = sum(is_identifier_path(t) for t in tokens)
    assert exempted <= 10, exempted  # <= 1%
    assert is_identifier_path("Qwen2Model/Qwen2DecoderLayer/Qwen2MLP/SiLU")
