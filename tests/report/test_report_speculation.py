"""A report on a run against a speculating server: its acceptance figures per level in the
level table, a speculation section with its chart, a level whose counters were reset marked
unknown; a run against a server without speculation has none of it."""

from __future__ import annotations

from support.reports import embedded_pngs, report, synthetic_runs

from vllm_load.analysis.measured_run import measure_run
from vllm_load.run_format.synthetic import ServerModel

LEVELS = (4, 16)


def runs(base, **server):
    return synthetic_runs(
        base,
        1,
        levels=LEVELS,
        requests_per_level=40,
        warmup_requests=4,
        scrape_interval=0.25,
        server=ServerModel(**server),
    )


def test_a_speculating_servers_report_has_its_figures_table_and_chart_and_unknowns(tmp_path):
    (plain,) = runs(tmp_path / "a", speculation=(0.9, 0.6))
    measured = measure_run(plain)  # the same requests as the run below (same seed)
    first = measured.meas.metrics.iloc[0]
    restart = (first["window_start"] + first["window_end"]) / 2
    restart -= measured.data.requests["start_ts"].min()  # the synthetic server's time 0
    (run,) = runs(tmp_path / "b", speculation=(0.9, 0.6), spec_restart_s=restart)
    (none,) = runs(tmp_path / "c")  # the same requests from a server without speculation
    _, html, md = report([run, none], tmp_path / "report.html")
    assert "Speculative decoding</h4>" in html
    assert 'id="chart-speculation-' in html and len(embedded_pngs(html)) >= 1
    assert "<th>acceptance length</th>" in html  # the level table (figures.SPECULATION)
    assert "<th>accepted at position 1</th>" in html
    assert "| 16 | 3,125 | 2.50 | 75.0% | 90.0% | 60.0% |" in md  # 1 + 0.9 + 0.6
    # the first level: a restart inside its window
    assert "unknown: spec_drafts went back between scrapes" in html
    assert "speculative decoding figures unknown at 4" in html  # a key finding
    # the same throughput with K = 2 and without: the tie goes to no speculation
    assert (
        "synthetic/model-8b: Draft tokens by load (most output tok/s; within 2%, the smaller "
        "K): no speculation from 4 to 16 users."
    ) in md


def test_a_server_without_speculation_gets_no_speculation_in_its_report(tmp_path):
    (run,) = runs(tmp_path / "runs")
    _, html, md = report([run], tmp_path / "report.html")
    assert "Speculative decoding" not in html and "acceptance length" not in html
    assert "speculative decoding" not in md.lower()
