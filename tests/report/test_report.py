"""`vllm-load report` over synthetic run directories: files, numbers, escaping, grouping, errors."""

from __future__ import annotations

import csv
import json
import math
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from support.reports import LEVELS, embedded_pngs, synthetic_runs

from vllm_load.analysis.levels.window_rates import RequestSpans, work_in_window
from vllm_load.analysis.levels.work_timeline import work_timeline
from vllm_load.report.render import build_report, interval, mean_ci
from vllm_load.run_format.synthetic import ServerModel


@pytest.fixture(scope="module")
def three_run_report(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    # enough requests that every level runs at its full concurrency (60 at 100 users would measure the
    # burst of one wave: CoV ~20 %, which the old overlap rule hid and the saturation rule now reports)
    runs = synthetic_runs(base, 3, requests_per_level=400, warmup_requests=200)
    paths = build_report(runs, str(base / "out" / "r.html"), progress=False)
    return runs, paths


def test_three_runs_give_n3_intervals_in_every_output(three_run_report):
    runs, paths = three_run_report
    summary = json.loads(open(paths.json).read())
    (series,) = summary["series"]
    assert series["n_runs"] == 3 and len(series["run_ids"]) == 3
    assert [lv["value"] for lv in series["levels"]] == list(LEVELS)
    for level in series["levels"]:
        assert level["total_tok_per_s_n"] == 3
        assert (
            level["total_tok_per_s_ci_low"]
            < level["total_tok_per_s_mean"]
            < level["total_tok_per_s_ci_high"]
        )
    # the series mean is the mean of the three runs' own figures
    per_run = [
        next(lv for lv in r["levels"] if lv["value"] == 100)["total_tok_per_s"]
        for r in summary["runs"]
    ]
    at_100 = next(lv for lv in series["levels"] if lv["value"] == 100)
    assert at_100["total_tok_per_s_mean"] == pytest.approx(np.mean(per_run))
    assert at_100["total_tok_per_s_std"] == pytest.approx(np.std(per_run, ddof=1))
    # the synthetic server batches 100 sequences: throughput flattens there
    assert (
        series["saturation"]["saturated"]
        and series["saturation"]["saturation_point"]["value"] == 100
    )
    assert series["saturation"]["decision"]["state"] == "decided"
    assert series["saturation"]["failed_levels"] == []
    assert (
        "saturation point is the lowest tested concurrency whose mean"
        in summary["rules"]["saturation"]
    )
    assert "left out" in summary["rules"]["failed_levels"]
    # the CSV holds the same numbers
    with open(paths.csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    peak = series["saturation"]["peak"]["tok_per_s"]
    assert any(
        r["scope"] == "saturation"
        and r["metric"] == "peak.tok_per_s"
        and float(r["value"]) == pytest.approx(peak)
        for r in rows
    )
    assert any(
        r["scope"] == "series"
        and r["metric"] == "total_tok_per_s"
        and r["stat"] == "ci_high"
        and (r["kind"], r["level_value"]) == ("concurrency", "100.0")
        and float(r["value"]) == pytest.approx(at_100["total_tok_per_s_ci_high"])
        for r in rows
    )
    markdown = open(paths.markdown).read()
    assert "| users | n |" in markdown and f"{at_100['total_tok_per_s_mean']:,.0f} ±" in markdown


def test_html_is_self_contained_with_tables_and_every_chart(three_run_report):
    runs, paths = three_run_report
    html = open(paths.html).read()
    assert not re.search(r'(src|href)="(https?:)?//', html)  # no external requests
    assert "<script" not in html
    for section in ("findings", "comparison", "runs", "methodology", "environment"):
        assert f'id="{section}"' in html
    assert html.count('class="levels-run"') == 3 and html.count('class="levels-agg"') == 1
    # overview (throughput, latency, trade-off) + distributions + one timeline per run
    images = embedded_pngs(html)
    assert len(images) == 3 + 1 + 3
    assert all(im.width > 300 and im.height > 150 for im in images)
    assert "Throughput saturates at ~100 concurrent" in html
    assert "synthetic://server" in html  # the test environment section


#: the model name of the single-run report: markup, which the report must show as text
SCRIPT_MODEL = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def single_run_report(tmp_path_factory):
    """One synthetic run whose server names its model `SCRIPT_MODEL`, and its report (shared:
    a run's report is the same whatever its model is called)."""
    base = tmp_path_factory.mktemp("one")
    (run,) = synthetic_runs(base, 1, model=SCRIPT_MODEL)
    return build_report([run], str(base / "one.html"), progress=False)


def test_single_run_is_reported_as_such(single_run_report):
    paths = single_run_report
    summary = json.loads(open(paths.json).read())
    level = summary["series"][0]["levels"][0]
    assert level["total_tok_per_s_n"] == 1 and level["total_tok_per_s_ci_low"] is None
    html = open(paths.html).read()
    assert "n = 1, no interval" in html and "Single run: no confidence intervals" in html


def test_server_strings_are_escaped(single_run_report):
    paths = single_run_report
    html = open(paths.html).read()
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert json.loads(open(paths.json).read())["series"][0]["model"] == SCRIPT_MODEL


def test_two_models_are_compared_per_gpu(tmp_path):
    small = synthetic_runs(tmp_path, 2, model="org/small", server=ServerModel(max_num_seqs=50))
    large = synthetic_runs(tmp_path, 2, model="org/large", server=ServerModel(max_num_seqs=100))
    paths = build_report(
        small + large, str(tmp_path / "cmp.html"), gpus_per_model={"org/small": 1}, progress=False
    )
    summary = json.loads(open(paths.json).read())
    rows = {r["model"]: r for r in summary["comparison"]}
    assert rows["org/small"]["gpus"] == 1 and rows["org/small"]["gpus_source"] == "--gpus-per-model"
    assert rows["org/large"]["gpus"] == 8  # from run.json meta
    assert rows["org/small"]["peak_per_gpu"] == pytest.approx(rows["org/small"]["peak_tok_per_s"])
    assert rows["org/large"]["peak_per_gpu"] == pytest.approx(
        rows["org/large"]["peak_tok_per_s"] / 8
    )
    assert rows["org/large"]["peak_tok_per_s"] > rows["org/small"]["peak_tok_per_s"]
    assert "Cross-model comparison" in open(paths.html).read()
    assert summary["comparison_findings"][0].startswith("org/large has the highest peak throughput")


def test_failures_are_broken_down_and_never_throughput(tmp_path):
    (run,) = synthetic_runs(tmp_path, 1, server=ServerModel(fail_rate=0.2))
    paths = build_report([run], str(tmp_path / "f.html"), progress=False)
    summary = json.loads(open(paths.json).read())
    requests = pd.read_csv(f"{run}/requests.csv")
    assert summary["runs"][0]["errors"], "failures must be listed"
    assert sum(e["count"] for e in summary["runs"][0]["errors"]) == int((requests["ok"] != 1).sum())
    for level in summary["runs"][0]["levels"]:
        assert level["success_rate"] == pytest.approx(level["ok"] / level["measured"])
        # the work of the successful requests only (window_rates), over the same window
        good = requests[requests["ok"] == 1]
        spans = RequestSpans.build(
            good["start_ts"],
            good["ttft"],
            good["end_ts"],
            good["prompt_tokens"],
            good["completion_tokens"],
        )
        work = work_in_window(spans, level["window_start"], level["window_end"])
        assert level["req_per_s"] == pytest.approx(work.requests / level["window_s"])
        assert level["output_tok_per_s"] == pytest.approx(work.output_tokens / level["window_s"])
    assert "Errors per level" in open(paths.html).read()
    # ~20 % failed at every level: none is fit to conclude from, and the report says so
    series = summary["series"][0]
    assert series["saturation"]["peak"] is None and series["saturation"]["recommendations"] == []
    assert len(series["saturation"]["failed_levels"]) == len(LEVELS)
    assert series["findings"][0].startswith("Every tested level had more than 1% failed requests")


def kill_server_during_last_level(run_dir, share=0.75):
    """Rewrite a run's requests so that `share` of its last level's requests failed to connect."""
    path = f"{run_dir}/requests.csv"
    requests = pd.read_csv(
        path, dtype={"error": object, "error_message": object, "itl_hist": object}
    )
    requests = requests.astype(
        {c: np.float64 for c in ("ttft", "prompt_tokens", "completion_tokens", "tpot")}
    )
    last = requests["level"] == requests["level"].max()
    rows = requests.index[last]
    dead = rows[
        len(rows) - int(len(rows) * share) :
    ]  # the server died part-way: the later requests failed
    requests.loc[dead, ["ok", "status"]] = [0, 0]
    requests.loc[dead, ["error", "error_message"]] = ["connect", "Cannot connect to host"]
    for col in (
        "ttft",
        "prompt_tokens",
        "completion_tokens",
        "itl_mean",
        "itl_p50",
        "itl_p90",
        "itl_p99",
        "itl_max",
        "tpot",
    ):
        requests.loc[dead, col] = np.nan
    requests.loc[dead, "itl_hist"] = ""
    requests.loc[dead, "n_chunks"] = 0
    requests.to_csv(path, index=False)


def test_a_level_with_failures_is_left_out_and_flagged_everywhere(tmp_path):
    runs = synthetic_runs(tmp_path, 2, requests_per_level=400, warmup_requests=200)
    for run in runs:
        kill_server_during_last_level(run)
    paths = build_report(runs, str(tmp_path / "dead.html"), progress=False)
    summary = json.loads(open(paths.json).read())
    (series,) = summary["series"]
    sat = series["saturation"]
    (failed,) = sat["failed_levels"]
    assert failed["value"] == 200 and failed["excluded"] and failed["worst_share"] > 0.5
    assert sat["peak"]["value"] != 200 and all(r["value"] != 200 for r in sat["recommendations"])
    flag = next(f for f in series["findings"] if f.startswith("Level 200 concurrent is left out"))
    assert "of its measured requests failed in the worst of 2 runs" in flag
    assert not any("highest tested level (200" in f for f in series["findings"])
    assert "left out" in summary["rules"]["failed_levels"]
    html, markdown = open(paths.html).read(), open(paths.markdown).read()
    for text in (html, markdown):
        assert "Level 200 concurrent is left out of the peak" in text
        assert (
            "Failed levels" in text
            and "more than 1% of the measured requests failed in any run" in text
        )
    assert 'class="warn failed-level"' in html and "<td>⚠ 200</td>" in html
    assert "| ⚠ 200 |" in markdown
    with open(paths.csv, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["scope"] == "failed_level"]
    assert {(r["level_value"], r["metric"]) for r in rows} == {
        ("200.0", "failed_worst_share"),
        ("200.0", "failed_mean_share"),
    }


def test_timeline_spreads_tokens_over_each_request():
    requests = pd.DataFrame(
        {
            "start_ts": [0.0, 0.0, 2.0],
            "end_ts": [2.0, 4.0, 4.0],
            "ok": [1, 1, 0],
            "prompt_tokens": [10, 20, 5],
            "completion_tokens": [10, 20, 5],
            "requested_prompt_tokens": [10, 20, 5],
            "requested_completion_tokens": [10, 20, 5],
        }
    )
    tl = work_timeline(requests, bin_s=1.0)
    # request 1: 20 tokens over 2 s = 10 tok/s in [0, 2); request 2: 40 over 4 s = 10 tok/s in [0, 4)
    assert list(tl["t"][:4]) == [0.5, 1.5, 2.5, 3.5]
    assert list(tl["tok_per_s"][:4]) == [20, 20, 10, 10]
    assert list(tl["in_flight"][:4]) == [2, 2, 1, 1]


def test_interval_formatting():
    assert interval(1.0, 3.0, 3, ",.1f") == "1.0 – 3.0"
    assert interval(math.nan, math.nan, 1) == "n = 1, no interval"
    row = {"x_mean": 0.1, "x_ci_low": 0.09, "x_ci_high": 0.11}
    assert mean_ci(row, "x", "ms") == "100.0 ms ± 10.0 ms"
    assert mean_ci({"x_mean": 5.0, "x_ci_low": math.nan, "x_ci_high": math.nan}, "x", ",.0f") == "5"


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "vllm_load", "report", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_writes_report_and_rejects_bad_input_in_one_line(tmp_path):
    runs = synthetic_runs(tmp_path / "runs", 2)
    out = tmp_path / "cli.html"
    ok = run_cli(
        str(tmp_path / "runs"),
        "-o",
        str(out),
        "--quiet",
        "--gpus-per-model",
        "synthetic/model-8b=4",
        "--max-failed-share",
        "0.05",
    )
    assert ok.returncode == 0, ok.stderr
    assert (
        out.exists() and (tmp_path / "cli.summary.json").exists() and (tmp_path / "cli.md").exists()
    )
    summary = json.loads((tmp_path / "cli.summary.json").read_text())
    assert summary["comparison"][0]["gpus"] == 4
    assert (
        "more than 5% of the measured requests failed in any run"
        in summary["rules"]["failed_levels"]
    )
    for args, message in (
        ([str(tmp_path / "nothing")], "no such run directory"),
        ([runs[0], "--gpus-per-model", "eight"], "MODEL=GPUS"),
        ([runs[0], "--scaling", "10"], "--scaling"),
        ([runs[0], "--max-failed-share", "1.5"], "--max-failed-share"),
    ):
        bad = run_cli(*args)
        assert bad.returncode == 2
        assert message in bad.stderr and len(bad.stderr.strip().splitlines()) <= 2, bad.stderr


def test_distribution_chart_with_all_gaps_in_the_last_bucket():
    from types import SimpleNamespace

    from vllm_load.load_kinds import CONCURRENCY
    from vllm_load.report import charts

    itl = np.zeros(900, dtype=np.int64)
    itl[-1] = 40  # every gap in the widest bucket: the p99.9 cut must stay inside the array
    series = SimpleNamespace(
        ttft_at_dist=np.array([0.1, 0.2]),
        itl_at_dist=itl,
        dist_value=8.0,
        axis=CONCURRENCY,
        label="m",
    )
    chart = charts.distributions(series)
    assert chart is not None and embedded_pngs(f'src="{chart.data_uri}"')


def test_a_lost_worker_is_named_and_its_level_marked(tmp_path):
    (run,) = synthetic_runs(tmp_path, 1)
    with open(f"{run}/run.json") as fh:
        info = json.load(fh)
    info["workers_lost"] = [{"worker": "host_abc<1>", "lost_at": 1.0, "level": 1}]
    with open(f"{run}/run.json", "w") as fh:
        json.dump(info, fh)
    html = open(build_report([run], str(tmp_path / "w.html"), progress=False).html).read()
    assert "host_abc&lt;1&gt;, lost during level 1" in html
    assert html.count("⚠ ") == 1
