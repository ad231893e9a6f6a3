"""Every per-level figure is declared once (`vllm_load.figures`): a figure declared in a test
appears in the printed table, the report (HTML, Markdown), its JSON and CSV, and `compare`,
without any of them being edited; a reasoning model's figures appear only where a run had
reasoning."""

from __future__ import annotations

import csv
import json

import pytest

from vllm_load import figures
from vllm_load.analysis.levels.measure import measure_levels
from vllm_load.analysis.levels.table import format_level_table
from vllm_load.cli.main import main
from vllm_load.figures import COMPARE, REPORT, TABLE, PerRequest, shown_in
from vllm_load.report.render import build_report
from vllm_load.run_format.load import load_run
from vllm_load.run_format.synthetic import ServerModel, SyntheticRun, write_synthetic_run

#: a per-request figure no consumer names: each request's longest token gap, as a level p99
LONGEST_GAP = PerRequest(
    "itl_max",
    "longest gap",
    "s",
    "the longest gap between two tokens of a request",
    table=("p99",),
    report=("p99",),
    compare=("p99",),
)


def _runs(base, n: int, seed0: int) -> list[str]:
    spec = dict(levels=(8, 32), warmup_requests=4, requests_per_level=40, output_tokens=32)
    return [
        write_synthetic_run(
            str(base),
            SyntheticRun(
                **spec,
                server=ServerModel(run_noise=0.02),
                seed=seed0 + i,
                start_ts=1_790_000_000.0 + 3600 * (seed0 + i),
            ),
        )
        for i in range(n)
    ]


def test_a_figure_declared_once_is_in_the_table_report_json_csv_and_compare(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(figures, "PER_REQUEST", [*figures.PER_REQUEST, LONGEST_GAP])
    a_runs = _runs(tmp_path / "a", 2, 0)
    _runs(tmp_path / "b", 2, 10)

    run = load_run(a_runs[0])
    metrics = measure_levels(run.requests, run.steps).metrics
    assert metrics["itl_max_p99"].notna().all()
    header = format_level_table(metrics).splitlines()[0]
    assert "longest gap p99 ms" in header

    paths = build_report(a_runs, str(tmp_path / "r.html"), progress=False)
    assert "<th>longest gap p99</th>" in open(paths.html, encoding="utf-8").read()
    assert "| longest gap p99 |" in open(paths.markdown, encoding="utf-8").read()
    summary = json.load(open(paths.json, encoding="utf-8"))
    assert all("itl_max_p99" in lv for lv in summary["runs"][0]["levels"])
    assert all("itl_max_p99_mean" in lv for lv in summary["series"][0]["levels"])
    with open(paths.json.replace(".summary.json", ".summary.csv"), encoding="utf-8") as fh:
        assert any("itl_max_p99" in ",".join(row) for row in csv.reader(fh))

    out = str(tmp_path / "ab.html")
    code = main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "-o", out])
    assert code == 0
    assert "18 comparisons tested at 2 level(s)" in capsys.readouterr().out  # 8 + 1 a level
    compared = json.load(open(str(tmp_path / "ab.json"), encoding="utf-8"))
    keys = {f["figure"] for level in compared["levels"] for f in level["figures"]}
    assert "itl_max_p99" in keys


def test_reasoning_figures_are_shown_only_where_a_run_had_reasoning():
    with_reasoning = {"reasoning_tokens_mean": 200.0}
    without = {"reasoning_tokens_mean": 0.0}
    for where in (TABLE, REPORT, COMPARE):
        shown = {f.key for f in shown_in(where, lambda key: with_reasoning.get(key, 0) > 0)}
        hidden = {f.key for f in shown_in(where, lambda key: without.get(key, 0) > 0)}
        assert "ttfat_p99" in shown and "ttfat_p99" not in hidden, where
        assert "ttft_p99" in shown and "ttft_p99" in hidden, where


@pytest.mark.parametrize("key", ["ttft", "ttfat", "itl", "tpot", "e2e"])
def test_every_latency_has_percentiles_an_slo_may_name(key):
    from vllm_load.slo import parse_slo

    spec = parse_slo([f"{key}_p99<=2s"])
    assert spec.objectives[0].column == f"{key}_p99"


# --- every SLO name, generated from the declarations: held against a run where it fails, and
# against one that lacks its figure (issue 46: `ttfat<=10ms` passed a run whose TTFAT p99 was
# 24 ms, as the frame goodput read had no TTFAT, and its value read as 0)


def _slo_names() -> list[str]:
    """Every per-request SLO name (`ttft`, `itl_max`) and per-level objective (`ttft_p99`) the
    declared figures give (`figures.slo_quantities`), as collected."""
    from vllm_load.slo import level_metrics, request_metrics

    return [*request_metrics(), *(f"{m}_p99" for m in level_metrics())]


def _column(name: str) -> str:
    """The requests.csv column an SLO name reads: a per-token figure's histogram (`itl_hist`)."""
    key = name.removesuffix("_p99")
    source = figures.per_request(key)
    return f"{key}_hist" if source is not None and source.from_histogram else key


@pytest.fixture(scope="module")
def slo_run(tmp_path_factory):
    """A small synthetic run with a value of every declared per-request figure in seconds (one
    the synthetic server does not make, such as TTFAT, is its TTFT and 20 ms)."""
    base = tmp_path_factory.mktemp("slo-run")
    spec = SyntheticRun(levels=(4, 16), warmup_requests=4, requests_per_level=30, output_tokens=16)
    run = load_run(write_synthetic_run(str(base), spec))
    return run


def _with_every_figure(requests, extra=()):
    requests = requests.copy()
    for source in [*figures.PER_REQUEST, *extra]:
        key = source.key
        if source.unit == "s" and not source.from_histogram and requests[key].isna().all():
            requests[key] = requests["ttft"] + 0.02
    return requests


def _failing_slo(name: str, requests, metrics) -> str:
    """`name` at half the lowest value the run has of it: every request and level misses it."""
    if name.endswith("_p99"):
        lowest = float(metrics[name].min())
    else:
        ok = requests["ok"] == 1
        lowest = float(requests.loc[ok, name].min())
    assert lowest > 0, name
    return f"{name}<={lowest * 500:.6g}ms"


def _judged(run, requests, item):
    from vllm_load.analysis.decisions.goodput import (
        binding_text,
        format_goodput_table,
        level_goodput,
        slo_headline,
    )
    from vllm_load.load_kinds import CONCURRENCY
    from vllm_load.slo import parse_slo

    spec = parse_slo([item])
    meas = measure_levels(requests, run.steps)
    goodput = level_goodput(requests, meas, spec)
    table = format_goodput_table(meas.metrics, goodput, spec)
    texts = [
        binding_text(n, v, spec) for n, v in zip(goodput.slo_binding, goodput.slo_binding_value)
    ]
    frame = meas.metrics.merge(goodput, on="level")
    headline = slo_headline([frame], spec).sentence(CONCURRENCY, spec)
    return goodput, table, texts, headline


def _check_missed(run, requests, name):
    metrics = measure_levels(requests, run.steps).metrics
    item = _failing_slo(name, requests, metrics)
    goodput, table, texts, headline = _judged(run, requests, item)
    assert (goodput["slo_met"] == 0).all(), (item, goodput)
    assert (goodput["slo_good"] == 0).all() or name.endswith("_p99"), item
    assert (goodput["slo_binding"] == item).all(), (item, goodput)
    assert (goodput["slo_binding_ratio"] > 1).all(), (item, goodput)  # never 0, never good
    assert all(t.startswith(item) and "unknown" not in t for t in texts), texts
    assert table.count("missed") == len(goodput), table
    assert headline.startswith("No tested level met the SLOs"), headline


def _check_unknown(run, requests, name):
    item = f"{name}<=1s"
    goodput, table, texts, headline = _judged(run, requests, item)
    assert goodput["slo_met"].isna().all() and (goodput["slo_unknown"] == 1).all(), goodput
    if not name.endswith("_p99"):  # which requests are good is unknown too
        assert goodput["slo_good_share"].isna().all() and goodput["goodput_req_per_s"].isna().all()
    assert all(t.startswith(f"{item} (unknown") for t in texts), texts
    assert "met" not in table.split("\n", 2)[2] and "unknown" in table, table
    assert headline.startswith("Whether any tested level meets the SLOs"), headline


@pytest.mark.parametrize("name", _slo_names())
def test_every_slo_name_misses_a_run_where_its_figure_fails(slo_run, name):
    _check_missed(slo_run, _with_every_figure(slo_run.requests), name)


@pytest.mark.parametrize("name", _slo_names())
def test_every_slo_name_is_unknown_on_a_run_without_its_figure(slo_run, name):
    requests = _with_every_figure(slo_run.requests)
    column = _column(name)
    requests[column] = "" if column.endswith("_hist") else float("nan")
    _check_unknown(slo_run, requests, name)


def test_a_newly_declared_slo_figure_is_held_too(slo_run, monkeypatch):
    queued = PerRequest("queued_s", "queued", "s", "time queued before sending", slo=True)
    monkeypatch.setattr(figures, "PER_REQUEST", [*figures.PER_REQUEST, queued])
    assert "queued_s" in _slo_names() and "queued_s_p99" in _slo_names()
    requests = _with_every_figure(slo_run.requests, [queued])
    _check_missed(slo_run, requests, "queued_s")
    _check_missed(slo_run, requests, "queued_s_p99")
