"""A report judged against SLOs: goodput in every output, the headline, the SLOs' source."""

from __future__ import annotations

import csv
import json

import pytest
from support.reports import synthetic_runs

from vllm_load.report.render import build_report
from vllm_load.slo import parse_slo

# the synthetic server's decode slows as its batch grows: TPOT p99 ~15 ms at 50 users, ~17 at 100
SLO = ["tpot<=16ms", "e2e_p99<=10s"]


@pytest.fixture(scope="module")
def slo_report(tmp_path_factory):
    base = tmp_path_factory.mktemp("slo")
    runs = synthetic_runs(base / "runs", 3)
    return build_report(runs, str(base / "r.html"), progress=False, slo=parse_slo(SLO))


def test_goodput_and_the_headline_are_in_every_output(slo_report):
    summary = json.loads(open(slo_report.json).read())
    assert summary["slo"]["items"] == SLO
    series = summary["series"][0]
    levels = {row["value"]: row for row in series["levels"]}
    assert [levels[u]["slo_met_mean"] for u in (10, 50, 100, 200)] == [1, 1, 0, 0]
    assert levels[100]["goodput_req_per_s_mean"] < levels[100]["req_per_s_mean"]
    assert levels[100]["slo_binding"].startswith("tpot<=16ms")
    assert series["slo"]["highest_level_meeting"]["mean"] == 50
    assert series["slo"]["highest_level_meeting"]["n"] == 3
    assert series["findings"][0].startswith("Highest concurrency meeting the SLOs")
    run_levels = summary["runs"][0]["levels"]
    assert all("goodput_output_tok_per_s" in row for row in run_levels)
    with open(slo_report.csv, newline="") as fh:
        metrics = {(r["scope"], r["metric"], r["stat"]) for r in csv.DictReader(fh)}
    assert ("series", "goodput_req_per_s", "mean") in metrics
    assert ("slo", "highest_level_meeting", "mean") in metrics
    markdown = open(slo_report.markdown).read()
    assert "goodput req/s" in markdown and "SLOs: a request is good when" in markdown
    html = open(slo_report.html).read()
    assert 'id="chart-goodput"' in html and "<th>goodput out tok/s</th>" in html


def test_without_slos_the_report_is_as_before(tmp_path):
    paths = build_report(
        synthetic_runs(tmp_path / "runs", 1), str(tmp_path / "r.html"), progress=False
    )
    summary = json.loads(open(paths.json).read())
    assert summary["slo"] is None and summary["series"][0]["slo"] is None
    assert "goodput" not in open(paths.html).read()


def test_runs_started_with_different_slos_need_the_report_s_own(tmp_path):
    runs = synthetic_runs(tmp_path / "runs", 2)
    for run, slo in zip(runs, (["ttft<=1s"], ["ttft<=2s"])):
        path = f"{run}/run.json"
        data = json.loads(open(path).read())
        data["settings"]["slo"] = slo
        open(path, "w").write(json.dumps(data))
    with pytest.raises(ValueError, match="different --slo .*pass --slo"):
        build_report(runs, str(tmp_path / "r.html"), progress=False)
    paths = build_report(
        runs, str(tmp_path / "r.html"), progress=False, slo=parse_slo(["ttft<=3s"])
    )
    assert json.loads(open(paths.json).read())["slo"]["items"] == ["ttft<=3s"]


def test_an_slo_on_a_figure_the_runs_lack_is_unknown_in_every_output(tmp_path):
    # the synthetic server records no TTFAT (no reasoning): never 0, never good, never met
    runs = synthetic_runs(tmp_path / "runs", 1, levels=(10, 50), requests_per_level=30)
    paths = build_report(
        runs, str(tmp_path / "r.html"), progress=False, slo=parse_slo(["ttfat<=10ms"])
    )
    summary = json.loads(open(paths.json).read())
    series = summary["series"][0]
    assert series["findings"][0].startswith(
        "Whether any tested level meets the SLOs (ttfat<=10ms) is unknown"
    )
    assert series["slo"]["runs_unknown"] == 1 and series["slo"]["highest_level_meeting"]["n"] == 0
    for level in series["levels"]:
        assert level["slo_met_n"] == 0 and level["goodput_req_per_s_n"] == 0
        assert "unknown: no successful measured request recorded ttfat" in level["slo_binding"]
    markdown = open(paths.markdown).read()
    rows = [line for line in markdown.splitlines() if "recorded ttfat) |" in line]
    assert len(rows) == 2 and all("| unknown | unknown | unknown | unknown |" in r for r in rows)
    html = open(paths.html).read()
    assert html.count("<td>unknown</td>") == 2 * 4 + 2 * 4  # across runs, and the run's own
