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
from vllm_load.rundir.load import load_run
from vllm_load.rundir.synthetic import ServerModel, SyntheticRun, write_synthetic_run

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
    from vllm_load.analysis.decisions.slo import parse_slo

    spec = parse_slo([f"{key}_p99<=2s"])
    assert spec.objectives[0].column == f"{key}_p99"
