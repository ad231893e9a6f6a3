"""The report's "Replay over time" for a run that replayed a trace: its chart, tables and
sentences in HTML and Markdown, its figures in summary.json and summary.csv; and no such section
for a run that replayed none."""

from __future__ import annotations

import csv
import re
import subprocess
import sys

import pytest
from markupsafe import escape
from support.reports import embedded_pngs, report, synthetic_runs

from vllm_load.run_format.synthetic_trace import (
    TraceRequest,
    TraceRun,
    bursty_trace,
    write_trace_run,
)


@pytest.fixture(scope="module")
def bursty(tmp_path_factory):
    base = tmp_path_factory.mktemp("bursty")
    requests = bursty_trace(seed=1, duration=60.0)
    hits = sum(r.server_hits for r in requests)
    run = write_trace_run(
        str(base / "runs"),
        TraceRun(
            requests,
            cap=32,
            scrape_interval=1.0,
            predicted_cached_tokens=hits,
            settings={"slo": ["ttft<=200ms"]},
        ),
    )
    summary, html, md = report([run], base / "out" / "r.html")
    return run, summary, html, md, base / "out" / "r.summary.csv"


def test_the_section_shows_the_replay_in_html(bursty):
    _run, summary, html, _md, _csv = bursty
    (replay,) = summary["runs"][0]["replays"]
    assert '<a href="#replay">Replay over time</a>' in html
    section = html[html.index('<section id="replay">') : html.index('<section id="methodology">')]
    # one row per window, the chart, and every finding
    rows = re.findall(r"<tr>", section.split('class="replay-windows"')[1].split("</table>")[0])
    assert len(rows) == len(replay["windows"]) + 1  # and the header's
    assert replay["window_s"] == 5.0 and len(replay["windows"]) == 13  # 60 s and the tail
    key = f"chart-replay-{summary['runs'][0]['run_id']}-0"
    assert f'id="{key}"' in section
    (png,) = embedded_pngs(section)
    assert png.size[0] > 600 and png.size[1] > 500  # three panels stacked
    for finding in replay["findings"]:
        assert str(escape(finding)) in section
    assert "The client kept up with the trace: p99 send lateness" in section
    assert "hits +0.0% from the prediction, within 5%" in section
    assert "SLOs (ttft&lt;=200ms):" in section  # the run's own SLOs, over the replay


def test_the_section_shows_the_replay_in_markdown(bursty):
    _run, summary, _html, md, _csv = bursty
    (replay,) = summary["runs"][0]["replays"]
    section = md[md.index("## Replay over time") : md.index("## Methodology")]
    assert "Per window (5 s windows: about a twelfth of the replay's" in section
    first = replay["windows"][0]
    assert (
        f"| 0.0 | 5.0 | 0.0 | {first['scheduled']} | {first['ended']} | {first['failed']} | "
        f"{first['in_flight']:,.1f} | {first['total_tok_per_s']:,.0f} |" in section
    )
    assert "- The client kept up with the trace" in section
    assert "Throughput against the server's /metrics, over the replay's" in section


def test_the_summary_files_hold_the_replay_s_figures(bursty):
    _run, summary, _html, _md, csv_path = bursty
    (replay,) = summary["runs"][0]["replays"]
    totals = replay["totals"]
    assert totals["requests"] == sum(w["scheduled"] for w in replay["windows"])
    # the synthetic server counted what the client did: client/server 1 in every window the
    # scrapes resolve (5 s windows of 1 s scrapes, but the last, 1.3 s long)
    compared = [w for w in replay["windows"] if w["server.why_not"] == ""]
    assert len(compared) == len(replay["windows"]) - 1
    for window in compared:
        assert window["server.output_ratio"] == pytest.approx(1.0)
        assert window["server.total_ratio"] == pytest.approx(1.0)
    assert replay["server"]["output_ratio"] == pytest.approx(1.0)
    assert replay["lateness"]["kept_up"] is True and replay["lateness"]["limit_s"] == 0.005
    assert replay["prefix_cache"]["agrees"] is True
    assert replay["slo"]["items"] == ["ttft<=200ms"]
    with open(csv_path, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["scope"] == "replay"]
    cell = {r["metric"]: float(r["value"]) for r in rows}
    assert cell["window3.total_tok_per_s"] == pytest.approx(replay["windows"][3]["total_tok_per_s"])
    assert cell["total.ttft_p99"] == pytest.approx(totals["ttft_p99"])
    assert cell["lateness.p99"] == pytest.approx(replay["lateness"]["p99"])
    assert cell["prefix_cache.server_hits"] == pytest.approx(replay["prefix_cache"]["server_hits"])
    # the replay's level, and its cap (the Locust users run for it)
    assert {(r["kind"], r["level_value"]) for r in rows} == {("trace", str(replay["trace_start"]))}
    assert cell["cap"] == replay["cap"] == 32


def test_a_late_client_is_a_warning_in_the_section(tmp_path):
    requests = tuple(
        TraceRequest(at=0.1 * i, queued=0.05 if i % 2 else 0.0, ttft=0.2, e2e=0.6)
        for i in range(40)
    )
    run = write_trace_run(str(tmp_path / "runs"), TraceRun(requests, cap=64))
    summary, html, md = report([run], tmp_path / "r.html")
    assert summary["runs"][0]["replays"][0]["lateness"]["kept_up"] is False
    assert '<li class="warn">The client could not keep up with the trace: p99 send lateness' in html
    assert "- ⚠ The client could not keep up with the trace" in md


def test_a_run_without_a_trace_has_no_replay_section(tmp_path):
    (run,) = synthetic_runs(tmp_path / "runs", 1)
    summary, html, md = report([run], tmp_path / "r.html")
    assert summary["runs"][0]["replays"] == []
    assert 'id="replay"' not in html and "#replay" not in html
    assert "Replay over time" not in md


def test_the_cli_takes_the_window_length_and_refuses_a_bad_one(tmp_path):
    run = write_trace_run(str(tmp_path / "runs"), TraceRun(bursty_trace(duration=20.0)))
    out = tmp_path / "r.html"
    command = [sys.executable, "-m", "vllm_load", "report", run, "-o", str(out), "--quiet"]
    done = subprocess.run([*command, "--trace-window", "4"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Per window (4 s windows as asked)" in (tmp_path / "r.md").read_text()
    refused = subprocess.run([*command, "--trace-window", "-1"], capture_output=True, text=True)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--trace-window must be seconds, 0 or more (0: the default), got -1.0" in refused.stderr


def test_the_key_findings_do_not_ask_a_replay_for_a_higher_level(bursty):
    _run, _summary, _html, md, _csv = bursty
    findings = md[md.index("## Key findings") : md.index("## Why it saturates")]
    assert "a trace's load is its own, so where throughput saturates is not tested" in findings
    assert "test higher" not in findings and "still rising" not in findings
