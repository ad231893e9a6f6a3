"""Server metrics: parsing, scraping, and agreement with the client's token counts."""

from __future__ import annotations

import json
import math
import os
import threading

import pytest
from support import DATA
from support.runhelpers import load_run_files, only_run_dir, run_vllm_load

from vllm_load.analysis.levels.client_side import (
    late_levels,
    level_client_health,
    read_client_health,
)
from vllm_load.analysis.levels.measure import level_metrics
from vllm_load.analysis.levels.scrapes import gauge_mean
from vllm_load.analysis.levels.server_side import (
    level_server_figures,
    read_server_metrics,
    run_token_check,
)
from vllm_load.run.server_metrics import MetricsScraper, parse_exposition, parse_metrics
from vllm_load.sim.child import SimulatorProcess

EXPOSITION = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_running{engine="0",model_name="other"} 7.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 100.0
vllm:generation_tokens_total{engine="1",model_name="m"} 50.0
"""


def test_parse_sums_engines_of_the_model_and_knows_old_names():
    values = parse_metrics(EXPOSITION, "m")
    assert values["running"] == 5.0 and values["generation_tokens_total"] == 150.0
    assert values["kv_cache_usage"] == 0.25  # vLLM's older name
    assert math.isnan(values["waiting"])
    assert parse_metrics(EXPOSITION)["running"] == 12.0


def test_parse_the_queue_time_histogram():
    """The evidence for a server queue in the findings: vLLM's queue-time histogram, by its
    `_sum`/`_count` samples, as the simulator serves it too."""
    text = (
        "# TYPE vllm:request_queue_time_seconds histogram\n"
        'vllm:request_queue_time_seconds_bucket{le="+Inf",model_name="m"} 4.0\n'
        'vllm:request_queue_time_seconds_count{model_name="m"} 4.0\n'
        'vllm:request_queue_time_seconds_sum{model_name="m"} 1.5\n'
    )
    values = parse_metrics(text, "m")
    assert (values["queue_time_sum"], values["queue_time_count"]) == (1.5, 4.0)


REAL_EXPOSITION = os.path.join(DATA, "vllm_0.32.0_cpu_metrics.txt")


def test_parse_a_real_vllm_exposition():
    """vLLM 0.32.0's own text (captured from bench/real_vllm.py's server): every column it holds is
    found, counters by their `_total` sample names, the TTFT and E2E histograms by their `_sum`/`_count`
    samples."""
    with open(REAL_EXPOSITION, encoding="utf-8") as fh:
        text = fh.read()
    values = parse_metrics(text, "tiny-llama")
    found = {k: v for k, v in values.items() if v == v}
    assert found == {
        k: v for k, v in parse_metrics(text).items() if v == v
    }  # one model, one engine
    assert values["running"] == 0.0 and values["waiting"] == 0.0 and values["kv_cache_usage"] == 0.0
    assert values["prompt_tokens_total"] == 1042.0 and values["generation_tokens_total"] == 576.0
    assert values["preemptions_total"] == 0.0
    assert values["ttft_count"] == 5.0 and math.isclose(values["ttft_sum"], 0.48218560218811035)
    assert values["prefix_cache_queries"] == 1042.0 and values["prefix_cache_hits"] == 384.0
    assert values["e2e_count"] == 16.0 and math.isclose(values["e2e_sum"], 57.015642404556274)
    # the excerpt was cut before the queue-time histogram and the diagnosis's families were
    # scraped: those columns read empty
    missing = {k for k, v in values.items() if v != v}
    diagnosis = {"waiting_capacity", "inference_time_sum", "inference_time_count"}
    diagnosis |= {"prefill_time_sum", "prefill_time_count", "step_tokens_sum", "steps"}
    # and a server started without speculative decoding has none of its counters
    speculation = {"spec_drafts", "spec_draft_tokens", "spec_accepted_tokens"}
    # nor one without a KV connector (NIXL) its transfer metrics
    transfer = {"kv_xfer_sum", "kv_xfer_count", "kv_bytes_sum"}
    assert missing == {"queue_time_sum", "queue_time_count", *diagnosis, *speculation, *transfer}
    assert math.isnan(parse_metrics(text, "another-model")["prefix_cache_hits"])


def test_parse_the_full_real_vllm_exposition_with_every_family_the_diagnosis_reads():
    """vLLM 0.32.0's whole /metrics after four requests (tests/data/vllm_0.32.0_cpu_metrics_full.txt):
    every column is found, the waiting gauge by its `reason="capacity"` sample, and the labels of
    `vllm:cache_config_info`."""
    with open(
        os.path.join(os.path.dirname(REAL_EXPOSITION), "vllm_0.32.0_cpu_metrics_full.txt")
    ) as fh:
        values, cache_config = parse_exposition(fh.read(), "tiny-llama")
    # every column but speculative decoding's and the KV connector's, which a server started
    # without them does not have
    missing = [k for k, v in values.items() if v != v]
    speculation = ["spec_drafts", "spec_draft_tokens", "spec_accepted_tokens"]
    assert missing == [*speculation, "kv_xfer_sum", "kv_xfer_count", "kv_bytes_sum"], values
    assert values["waiting_capacity"] == 0.0 and values["steps"] == 65.0
    assert (
        values["step_tokens_sum"]
        == values["prompt_tokens_total"] + values["generation_tokens_total"]
    )
    assert math.isclose(values["inference_time_sum"], 2.50050165200264)
    assert (cache_config["block_size"], cache_config["num_gpu_blocks"]) == ("128", "4096")


def test_a_target_without_metrics_is_noted_not_an_error(tmp_path):
    with SimulatorProcess("--echo") as sim:
        scraper = MetricsScraper(
            sim.url + "/no-such-prefix", str(tmp_path / "m.csv"), interval=0.05
        )
        thread = threading.Thread(target=scraper.run)
        thread.start()
        thread.join(timeout=10)
    assert not thread.is_alive() and not os.path.exists(tmp_path / "m.csv")
    assert scraper.status.samples == 0 and "HTTP 404" in scraper.status.note


# beside other tests' load: the token rates compare the server's counter and the client's tokens
# over one window, between two of the run's scrapes, many scrape intervals long; the in-flight
# and TTFT agreement is held only where the run found its client on time (below)
def test_server_metrics_agree_with_client_output_tokens_within_2_percent(tmp_path):
    with SimulatorProcess("--time-scale", "0.1", "--max-num-seqs", "8") as sim:
        run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--levels",
            "4,16",
            "--input-tokens",
            "256",
            "--output-tokens",
            "64",
            "--requests-per-level",
            "160",
            "--warmup-requests",
            "8",
            "--metrics-interval",
            "0.1",
            "--out",
            str(tmp_path),
        )
    run_dir = only_run_dir(tmp_path)
    requests, steps, run, _ = load_run_files(run_dir)
    assert run["server_metrics"]["samples"] >= 8 and run["server_metrics"]["errors"] == 0
    server = read_server_metrics(os.path.join(run_dir, "server_metrics.csv")).frame
    figures = level_server_figures(server, level_metrics(requests, steps), requests, 0.1)
    # windows of many scrape intervals; a loaded machine can still starve the scraper, and a window
    # it cannot resolve is not judged, saying why from the run's own scrapes (their gaps, how long
    # each took); every judged one agrees
    judged = figures[figures["comparable"]]
    reasons = figures.loc[~figures["comparable"], "not_comparable_reason"]
    assert reasons.str.contains("scrapes").all(), figures
    assert (judged["difference"].abs() <= 0.02).all(), figures
    # requests the client had in flight are the server's running + waiting ones, where the client
    # kept up (a load process that waited for a CPU turns its requests over late)
    health = level_client_health(
        read_client_health(os.path.join(run_dir, "client_health.csv")).frame,
        level_metrics(requests, steps),
        requests,
    )
    kept_up = judged[
        ~judged["level"].isin(late_levels(health))
        & ~judged["level"].isin(health.loc[health["client_bound"], "level"])
    ]
    assert (kept_up["concurrency_difference"].abs() <= 0.05).all(), (figures, health)
    # nothing flagged where the client kept up; where the run found its client late or bound,
    # its in-flight count and TTFT are the client's lateness, never its tokens (judged above)
    late = figures[~figures["level"].isin(kept_up["level"])]
    assert not figures.loc[figures["level"].isin(kept_up["level"]), "flagged"].any(), figures
    assert not late["disagrees"].any(), figures
    if late["flagged"].any():
        print(
            "concurrency and TTFT agreement not held at the levels the run found its client late "
            "or bound:",
            late.loc[late["flagged"], ["level", "concurrency_difference", "ttft_difference"]],
            health,
        )
    # 16 users on 8 sequences: a queue, whether or not the scrapes resolve the comparison window
    busy = level_metrics(requests, steps).iloc[1]
    assert gauge_mean(server, "waiting", busy["window_start"], busy["window_end"]) > 0
    # every completion the client received was generated by the server; the only excess is requests
    # still in flight when the run stopped
    check = run_token_check(server, requests)
    assert 0 <= check["server_generation_tokens"] - check["client_completion_tokens"] <= 16 * 64
    run_vllm_load("report", run_dir, "-o", str(tmp_path / "r.html"), "--quiet")
    summary = json.loads((tmp_path / "r.summary.json").read_text())
    assert summary["runs"][0]["server_levels"][0]["server_gen_tok_per_s"] > 0
    if judged.empty:  # a fresh-clone CI beside two other tests: both levels' scrapes blurred
        pytest.skip(
            f"no level's token rate judged: the run's scrapes could not date a window: {list(reasons)}"
        )
    if late["flagged"].any():  # the report rightly names the late level's disagreement
        pytest.skip(
            "in-flight/TTFT agreement not checked at the levels the run found its client late or "
            f"bound: {late.loc[late['flagged'], 'level'].tolist()}"
        )
    assert "agree with the client's within tolerance" in (tmp_path / "r.html").read_text()


def _frames(window_start, window_end, ts, gen, running, ttft_sum=None, ttft_count=None):
    import pandas as pd

    server = pd.DataFrame(
        {
            "ts": ts,
            "generation_tokens_total": gen,
            "running": running,
            "waiting": [0.0] * len(ts),
            "kv_cache_usage": [0.1] * len(ts),
            "preemptions_total": [0.0] * len(ts),
        }
    )
    if ttft_sum is not None:
        server["ttft_sum"], server["ttft_count"] = ttft_sum, ttft_count
    metrics = pd.DataFrame(
        {
            "level": [0],
            "users": [4.0],
            "level_start": [window_start - 1],
            "level_end": [window_end + 1],
            "window_start": [window_start],
            "window_end": [window_end],
            "output_tok_per_s": [100.0],
            "achieved_concurrency": [4.0],
        }
    )
    return server, metrics


def test_a_window_of_few_scrape_intervals_is_too_short_to_compare_not_a_disagreement():
    ts = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    gen = [0.0, 0.0, 0.0, 300.0, 300.0, 300.0, 600.0, 600.0, 900.0, 900.0, 1200.0]  # bursty counter
    server, metrics = _frames(3.2, 4.1, ts, gen, [4.0] * len(ts))
    row = level_server_figures(server, metrics, interval=1.0).iloc[0]
    assert not row.comparable and row.too_short and not row.disagrees and not row.flagged
    # the same counter over a window of 6 intervals is compared, and a 2 % gap is flagged
    server, metrics = _frames(2.0, 8.0, ts, [100.0 * t for t in ts], [4.0] * len(ts))
    metrics["output_tok_per_s"] = 100.0 * 1.05
    row = level_server_figures(server, metrics, interval=1.0).iloc[0]
    assert row.comparable and row.server_gen_tok_per_s == 100.0 and row.disagrees and row.flagged


def test_server_ttft_and_requests_in_server_over_the_window():
    import pandas as pd

    ts = [float(t) for t in range(11)]
    server, metrics = _frames(
        2.0,
        8.0,
        ts,
        [100.0 * t for t in ts],
        [2.0, 2, 4, 4, 4, 4, 4, 4, 4, 2, 2],
        ttft_sum=[0.5 * t for t in ts],
        ttft_count=[2.0 * t for t in ts],
    )
    # client requests: first chunks at 3.0 and 5.0 (inside (2, 8]) and at 9.0 (outside)
    requests = pd.DataFrame(
        {
            "ok": [1, 1, 1, 0],
            "start_ts": [2.5, 4.6, 8.7, 3.0],
            "ttft": [0.5, 0.4, 0.3, 1.0],
            "end_ts": [4.0, 6.0, 9.5, 4.0],
            "prompt_tokens": [1, 1, 1, 1],
            "completion_tokens": [2, 2, 2, 2],
            "requested_prompt_tokens": [1, 1, 1, 1],
            "requested_completion_tokens": [2, 2, 2, 2],
        }
    )
    row = level_server_figures(server, metrics, requests, interval=1.0).iloc[0]
    assert row.server_ttft_mean == 0.25  # (3.0 - 1.0) / (12 - 4)
    assert row.client_ttft_mean == 0.45  # the two successful requests whose first chunk is inside
    assert row.ttft_difference == 0.45 / 0.25 - 1 and row.ttft_disagrees
    assert row.running_mean == 4.0
    # the client's side over the same span: in flight 1.5 + 1.4 + 1.0 (the failure) s over 6 s
    assert row.achieved_concurrency == pytest.approx(3.9 / 6)
    assert math.isnan(row.prefix_cache_hits)  # not scraped: unknown, not zero
