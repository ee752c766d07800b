"""``traceview check``: limits, rules files, the rules judged on the reports of the regression pair,
and the exit codes of the real CLI (0 pass, 1 violation, 2 malformed rule or unusable input)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from traceview.compare import DiffOptions, Limit, RuleError, evaluate, gather_rules, load_config, parse_limit
from traceview.compare import rules as rules_mod
from traceview.errors import TraceviewError
from traceview.pipeline import analyze

from conftest import SAMPLE_TRACES, require_shared

PAIR = SAMPLE_TRACES / "regression_pair"


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "traceview.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


# ------------------------------------------------------------------------------ limits

@pytest.mark.parametrize("rule, raw, form, value", [
    ("max-idle", "20%", "share", 0.20),
    ("max-idle", "0.2", "share", 0.20),
    ("max-idle", 0.2, "share", 0.20),
    ("max-idle", "12.5 %", "share", 0.125),
    ("max-idle", "5ms", "time", 5_000_000),
    ("max-idle", "1.5s", "time", 1_500_000_000),
    ("max-exposed-comm", "250 us", "time", 250_000),
    ("max-launch-delay-p50", "50us", "time", 50_000),
    ("max-launch-delay-p50", "50µs", "time", 50_000),
    ("max-launch-delay-p50", "800ns", "time", 800),
    ("min-overlap", "50%", "share", 0.5),
    ("min-overlap", "1", "share", 1.0),
    ("max-regression", "5%", "share", 0.05),
    ("max-regression", "150%", "share", 1.5),
    ("max-regression", "2ms", "time", 2_000_000),
    ("max-regression", "1e-2", "share", 0.01),
    ("max-achievable-gap", "40%", "share", 0.4),
    ("max-achievable-gap", "2ms", "time", 2_000_000),
])
def test_parse_limit(rule, raw, form, value):
    limit = parse_limit(rule, raw)
    assert limit.form == form and limit.value == pytest.approx(value) and limit.text == str(raw).strip()


@pytest.mark.parametrize("rule, raw, fragment", [
    ("max-idle", "20", "ambiguous"),  # a share needs % or a value <= 1
    ("max-idle", 20, "ambiguous"),
    ("max-launch-delay-p50", "50", "give a unit"),
    ("max-idle", "abc", "cannot read"),
    ("max-idle", "", "cannot read"),
    ("max-idle", "-5%", "cannot read"),
    ("max-idle", "20 percent", "cannot read"),
    ("max-idle", "5 min", "cannot read"),
    ("max-idle", "150%", "more than 100%"),
    ("max-idle", True, "not a limit"),
    ("min-overlap", "5ms", "takes a share"),
    ("max-launch-delay-p50", "20%", "takes a time"),
    ("max-speed", "20%", "unknown rule"),
])
def test_malformed_limits(rule, raw, fragment):
    with pytest.raises(RuleError, match=fragment) as info:
        parse_limit(rule, raw)
    assert isinstance(info.value, TraceviewError)  # printed as one line, exit 2


# ------------------------------------------------------------------------------ rules files

def test_config_top_level_check_table_and_pyproject(tmp_path):
    top = tmp_path / "rules.toml"
    top.write_text('max-idle = "20%"\nmin_overlap = 0.5\nmax-launch-delay-p50 = "50us"\nbaseline = "runs/base"\n')
    rules, baseline = load_config(top)
    assert rules == {"max-idle": Limit("share", 0.2, "20%"), "min-overlap": Limit("share", 0.5, "0.5"),
                     "max-launch-delay-p50": Limit("time", 50_000, "50us")}
    assert baseline == tmp_path / "runs" / "base"
    table = tmp_path / "ci.toml"
    table.write_text('[check]\nmax-regression = "5%"\n[other]\nanything = 1\n')
    assert load_config(table)[0] == {"max-regression": Limit("share", 0.05, "5%")}
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n[tool.traceview.check]\nmax-exposed-comm = "10%"\n')
    assert load_config(pyproject)[0] == {"max-exposed-comm": Limit("share", 0.1, "10%")}


def test_flags_override_config(tmp_path):
    cfg = tmp_path / "rules.toml"
    cfg.write_text('max-idle = "20%"\nmax-exposed-comm = "10%"\n')
    rules, _ = gather_rules({"max-idle": "5%", "min-overlap": None}, cfg)
    assert rules["max-idle"].value == pytest.approx(0.05) and rules["max-exposed-comm"].value == pytest.approx(0.1)
    assert "min-overlap" not in rules


@pytest.mark.parametrize("text, fragment", [
    ('max-idel = "20%"\n', "unknown rule"),
    ('max-idle = "20"\n', "ambiguous"),
    ('max-idle = \n', "not valid TOML"),
    ('baseline = 3\n', "baseline must be a path"),
    ('check = 3\n', "must be a table"),
])
def test_malformed_config(tmp_path, text, fragment):
    cfg = tmp_path / "rules.toml"
    cfg.write_text(text)
    with pytest.raises(RuleError, match=fragment):
        load_config(cfg)


def test_missing_config_and_no_toml_parser(tmp_path, monkeypatch):
    with pytest.raises(RuleError, match="no such rules file"):
        load_config(tmp_path / "absent.toml")
    cfg = tmp_path / "rules.toml"
    cfg.write_text('max-idle = "20%"\n')
    monkeypatch.setattr(rules_mod, "_toml_module", lambda: None)  # Python 3.10 without tomli
    with pytest.raises(RuleError, match="tomli"):
        load_config(cfg)


# ------------------------------------------------------------------------------ rules on the pair

@pytest.fixture(scope="module")
def results():
    """The reports of the base and the new trace of the pair."""
    return analyze(PAIR / "base", use_cache=False), analyze(PAIR / "new", use_cache=False)


@pytest.fixture(scope="module")
def truth() -> dict:
    return json.loads((PAIR / "truth.json").read_text(encoding="utf-8"))


def _rules(**kw) -> dict[str, Limit]:
    return {name.replace("_", "-"): parse_limit(name.replace("_", "-"), raw) for name, raw in kw.items()}


def test_regression_rule(results, truth):
    base, new = results
    report = evaluate(_rules(max_regression="5%"), new, base)
    assert not report.passed
    assert {(v.rule, v.rank) for v in report.violations} == {("max-regression", 0), ("max-regression", 1)}
    for v in report.violations:
        steps_b = [s["step_time_ns"] for s in truth["figures"]["base"][str(v.rank)]]
        steps_n = [s["step_time_ns"] for s in truth["figures"]["new"][str(v.rank)]]
        expected = (sum(steps_n) / len(steps_n)) / (sum(steps_b) / len(steps_b)) - 1
        assert v.value == pytest.approx(expected)
        assert "beyond noise" in v.detail and "step time" in v.detail
        assert v.line().startswith("max-regression: measured +9.")
    assert evaluate(_rules(max_regression="20%"), new, base).passed
    # time form: the step got ~68 us slower
    assert not evaluate(_rules(max_regression="50us"), new, base).passed
    assert evaluate(_rules(max_regression="100us"), new, base).passed
    # no regression against itself
    assert evaluate(_rules(max_regression="0%"), base, base).passed


def test_regression_within_noise_passes(results):
    base, new = results
    report = evaluate(_rules(max_regression="5%"), new, base, diff_options=DiffOptions(k=1000))
    assert report.passed
    assert all("within noise" in r.detail for r in report.results)


def test_absolute_rules(results):
    _, new = results
    report = evaluate(_rules(max_idle="20%", min_overlap="50%", max_exposed_comm="10%",
                             max_launch_delay_p50="50us"), new)
    assert report.passed, [r.line() for r in report.violations]
    assert {r.rule for r in report.results} == {"max-idle", "min-overlap", "max-exposed-comm", "max-launch-delay-p50"}
    idle = [r for r in report.results if r.rule == "max-idle"]
    assert [r.rank for r in idle] == [0, 1] and all(0.03 < r.value < 0.05 for r in idle)
    delay = [r for r in report.results if r.rule == "max-launch-delay-p50"]
    assert all(r.value == pytest.approx(2_000, abs=1_000) for r in delay)  # launches end 2 us before the GPU starts
    overlap = [r for r in report.results if r.rule == "min-overlap"]
    assert all(r.value == pytest.approx(1.0) for r in overlap)

    failing = evaluate(_rules(max_idle="2%", max_launch_delay_p50="1us", min_overlap="100%"), new)
    assert {v.rule for v in failing.violations} == {"max-idle", "max-launch-delay-p50"}
    assert "worst step" in failing.violations[0].detail
    idle_time = evaluate(_rules(max_idle="10us"), new)  # ~33 us of idle per step (with the gaps between steps)
    assert not idle_time.passed and all(r.value > 10_000 for r in idle_time.results)


def test_regression_needs_a_baseline(results):
    with pytest.raises(RuleError, match="needs a baseline"):
        evaluate(_rules(max_regression="5%"), results[1])


def test_min_overlap_without_communication_does_not_apply():
    path = require_shared() / "kineto" / "hta_alexnet_a100.json.gz"
    report = evaluate(_rules(min_overlap="50%", max_idle="100%"), analyze(path))
    assert report.passed and any("no rank has communication" in n for n in report.notes)


# ------------------------------------------------------------------------------ the real CLI

def test_cli_exit_1_names_the_regressed_metric():
    result = run_cli("check", str(PAIR / "new"), "--baseline", str(PAIR / "base"), "--max-regression", "5%",
                     "--max-idle", "20%")
    assert result.returncode == 1, result.stdout + result.stderr
    fails = [line for line in result.stdout.splitlines() if line.startswith("FAIL ")]
    assert len(fails) == 2 and all("max-regression" in f and "step time" in f and "limit 5%" in f for f in fails)
    assert "rank 0" in fails[0] and "rank 1" in fails[1]
    assert "FAILED: 1 of 2 rules violated (max-regression)" in result.stdout


def test_cli_exit_0_with_a_looser_limit():
    result = run_cli("check", str(PAIR / "new"), "--baseline", str(PAIR / "base"), "--max-regression", "20%",
                     "--min-overlap", "50%", "--max-exposed-comm", "10%", "--max-launch-delay-p50", "50us")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED: 4 rules hold" in result.stdout


@pytest.mark.parametrize("args, fragment", [
    (["--max-idle", "20"], "ambiguous"),
    (["--max-launch-delay-p50", "fast"], "cannot read"),
    (["--max-regression", "5%"], "needs a baseline"),
    ([], "no rules given"),
    (["--max-idle", "20%", "--format", "xml"], "--format"),
])
def test_cli_exit_2_for_malformed_rules(args, fragment):
    result = run_cli("check", str(PAIR / "new"), *args)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.stderr


def test_cli_exit_2_for_unusable_input(tmp_path):
    bad = tmp_path / "rank0.json"
    bad.write_text("not a trace")
    for target in (tmp_path / "absent.json.gz", bad):
        result = run_cli("check", str(target), "--max-idle", "20%")
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    result = run_cli("check", str(PAIR / "new"), "--baseline", str(bad), "--max-regression", "5%")
    assert result.returncode == 2 and str(bad) in result.stderr


def test_cli_toml_config(tmp_path):
    cfg = tmp_path / "rules.toml"
    cfg.write_text(f'[check]\nbaseline = "{(PAIR / "base").as_posix()}"\nmax-regression = "5%"\nmax-idle = "20%"\n')
    result = run_cli("check", str(PAIR / "new"), "--config", str(cfg), "--format", "json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["passed"] is False and {v["rule"] for v in data["violations"]} == {"max-regression"}
    assert data["rules"] == {"max-idle": "20%", "max-regression": "5%"}
    # a flag overrides the file
    result = run_cli("check", str(PAIR / "new"), "--config", str(cfg), "--max-regression", "20%")
    assert result.returncode == 0, result.stdout + result.stderr
    cfg.write_text('max-idle = "lots"\n')
    result = run_cli("check", str(PAIR / "new"), "--config", str(cfg))
    assert result.returncode == 2 and "max-idle" in result.stderr


# ------------------------------------------------------------------------------ the achievable step

@pytest.fixture(scope="module")
def path_report():
    """The 4-rank sample with a contract-shaped critical path (tests/cp_synthetic.py)."""
    from cp_synthetic import with_critical_path

    return with_critical_path(analyze(SAMPLE_TRACES / "synthetic_4rank", use_cache=False))


def test_achievable_gap_rule_reads_the_whatif(path_report):
    whatif = path_report.table("critical_path", "whatif")
    means = whatif[(whatif["scenario"] == "achievable") & whatif["step"].isna()].set_index("rank")
    loose = evaluate(_rules(max_achievable_gap="99%"), path_report)
    assert loose.passed and [r.rank for r in loose.results] == sorted(means.index)
    for r in loose.results:
        assert r.value == pytest.approx(means.loc[r.rank, "saving_share"])
        assert "achievable" in r.detail and "worst step" in r.detail and "modelled" in r.detail
    tight_share = min(means["saving_share"]) / 2
    tight = evaluate(_rules(max_achievable_gap=f"{100 * tight_share:.4f}%"), path_report)
    assert {v.rank for v in tight.violations} == set(means.index)
    assert tight.violations[0].line().startswith("max-achievable-gap: measured ")
    timed = evaluate(_rules(max_achievable_gap="1ms"), path_report)
    assert [r.value for r in timed.results] == [pytest.approx(means.loc[r.rank, "saving_ns"]) for r in timed.results]
    assert timed.passed == all(means["saving_ns"] <= 1_000_000)


def test_achievable_gap_without_a_critical_path_does_not_apply(path_report):
    from cp_synthetic import without_critical_path

    report = without_critical_path(path_report)
    check = evaluate(_rules(max_achievable_gap="50%", max_idle="100%"), report)
    assert check.passed and not [r for r in check.results if r.rule == "max-achievable-gap"]
    assert any("max-achievable-gap" in n and "does not apply" in n for n in check.notes)


def test_cli_achievable_gap():
    import traceview.analyses  # noqa: F401
    from traceview.registry import ANALYSES

    if "critical_path" not in ANALYSES:
        pytest.skip("the critical_path analysis is not on this branch yet")
    result = run_cli("check", str(PAIR / "new"), "--max-achievable-gap", "100%", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert {r["rule"] for r in data["results"]} == {"max-achievable-gap"}
    assert all(0 <= r["value"] <= 1 for r in data["results"])
    bad = run_cli("check", str(PAIR / "new"), "--max-achievable-gap", "fast")
    assert bad.returncode == 2 and "max-achievable-gap" in bad.stderr
