"""deploy/grafana/vllm-load.json, the dashboard of the tester's own metrics (--prometheus): it
loads, every metric its queries and variables name is one the exporter serves, and it shows what
docs/prometheus.md says it shows (throughput, TTFT/ITL/E2E p50 and p99, failures by category, in
flight, the current level), each panel from the dashboard's Prometheus data source variable."""

from __future__ import annotations

import re

from support.prometheus_scrape import add, dashboard, exposition, queries, record_row

from vllm_load.run.prometheus_tallies import RequestTallies

#: a metric name in PromQL: ours, or the process collector's
METRIC = re.compile(r"\b(?:vllm_load|process)_[a-z_]+\b")


def served_names() -> set[str]:
    """The sample names a scrape of a run with a success and a failure holds."""
    tallies = RequestTallies("http://127.0.0.1:8000")
    add(tallies, record_row())
    add(tallies, record_row(ok=0))
    return set(exposition(tallies))


def test_every_metric_the_dashboard_reads_is_served():
    names = {name for q in queries(dashboard()) for name in METRIC.findall(q)}
    assert names and not names - served_names(), sorted(names - served_names())


def test_it_shows_throughput_latency_quantiles_failures_in_flight_and_the_level():
    board = dashboard()
    exprs = queries(board)
    text = "\n".join(exprs)
    for histogram in ("ttft", "itl", "e2e"):
        for q in ("0.5", "0.99"):
            assert re.search(
                rf"histogram_quantile\({q}, sum by \(le\) \(rate\(vllm_load_{histogram}_seconds_bucket",
                text,
            ), (histogram, q)
    assert "rate(vllm_load_completion_tokens_total" in text
    assert re.search(r'vllm_load_requests_total\{outcome!="ok"', text)  # failures by category
    for gauge in ("vllm_load_in_flight", "vllm_load_level_value", "vllm_load_level_index"):
        assert gauge in text
    # every quantile is of buckets summed with their `le`
    for expr in exprs:
        for inner in re.findall(r"histogram_quantile\([^,]+, sum by \(([^)]*)\)", expr):
            assert "le" in [label.strip() for label in inner.split(",")], expr


def test_every_panel_reads_the_chosen_prometheus():
    board = dashboard()
    (source,) = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert source["query"] == "prometheus"
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert panels
    for panel in panels:
        sources = [panel["datasource"], *(t["datasource"] for t in panel["targets"])]
        assert all(s == {"type": "prometheus", "uid": "${datasource}"} for s in sources), panel[
            "title"
        ]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
