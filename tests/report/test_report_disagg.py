"""A report on a run against a disaggregated prefill/decode deployment: its TTFT split and KV
transfer figures per level in the level table and a section with its chart (a run without its
servers' scrapes has no figures, and the verdict's rule: test_disagg_figures)."""

from __future__ import annotations

import os

from support.reports import embedded_pngs, report, synthetic_runs
from support.role_scrapes import role_scrapes

from vllm_load.analysis.measured_run import measure_run
from vllm_load.run_format.files import role_metrics_csv


def test_a_disaggregated_runs_report_has_its_split_table_and_chart(tmp_path):
    (run,) = synthetic_runs(tmp_path / "a", 1, levels=(4, 16, 64), requests_per_level=40)
    windows = measure_run(run).metrics
    prefill, decode = role_scrapes(windows, lambda level: 0.01 * 10**level)
    prefill.to_csv(os.path.join(run, role_metrics_csv("prefill")), index=False)
    decode.to_csv(os.path.join(run, role_metrics_csv("decode")), index=False)
    _, html, md = report([run], tmp_path / "report.html")
    assert "Disaggregated prefill/decode</h4>" in html
    assert 'id="chart-disagg-' in html and len(embedded_pngs(html)) >= 1
    assert "<th>TTFT: KV transfer</th>" in html  # the level table (figures.DISAGG)
    assert "| 16 | 40.0 | 100.0 | 15.0 | 0.0419 | 4.00 | 10 |" in md
    assert "| 64 | 40.0 | 1,000.0 | 15.0 | 0.00419 | 4.00 | 10 |" in md
