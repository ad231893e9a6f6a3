"""`vllm-load run --rates` end to end against the simulator: the rate is achieved below capacity,
the split over workers adds up, and a rate far above capacity is reported as not kept up.

Noise: with Poisson arrivals K measured requests span a window whose relative standard
deviation is 1/sqrt(K), so a 2 % check at 3 standard deviations would need K = (3 / 0.02)^2 =
22,500 requests. The 2 % check therefore uses constant arrivals, whose only noise is the latency
jitter at the window's two ends (milliseconds over seconds); the Poisson run checks the rate to
its own computed noise.
"""

import math

import numpy as np
import pytest
from support.runhelpers import load_run_files, only_run_dir, run_vllm_load

from vllm_load.analysis.levels import level_metrics
from vllm_load.analysis.rates import poisson_arrivals, rate_verdicts
from vllm_load.sim.process import SimulatorProcess

SMALL = ("--input-tokens", "64", "--output-tokens", "16")


def rate_run(tmp_path, sim, *args):
    proc = run_vllm_load("run", "--host", sim.url, *SMALL, "--out", str(tmp_path), *args)
    requests, steps, run, _ = load_run_files(only_run_dir(tmp_path))
    metrics = level_metrics(requests, steps)
    return proc, requests, steps, run, metrics


def test_constant_arrivals_below_capacity_achieve_the_rate_within_2_percent(tmp_path):
    with SimulatorProcess("--time-scale", "0.1") as sim:
        proc, requests, steps, run, metrics = rate_run(
            tmp_path, sim, "--rates", "40", "--arrivals", "constant", "--max-in-flight", "50",
            "--requests-per-level", "240", "--warmup-requests", "20",
        )  # fmt: skip
    row = metrics.iloc[0]
    print("constant:", row[["achieved_rate", "queued_p50", "queued_p99", "delay_growth"]].to_dict())
    assert list(steps["rate"]) == [40.0] and list(steps["users"]) == [50]
    assert row["measured"] == 240 and run["outcome"] == "completed"
    assert abs(row["achieved_rate"] / 40.0 - 1) < 0.02
    starts = np.sort(requests["start_ts"].to_numpy())
    assert np.diff(starts) == pytest.approx(0.025, abs=1e-4)  # scheduled, evenly
    assert row["queued_p99"] < 0.05  # a free user was always there, woken on time
    assert (requests["task"] == "open_loop").all() and requests["ok"].all()
    assert rate_verdicts(metrics, poisson_arrivals(run))[0].kept_up
    assert "rate req/s" in proc.stdout and "could not keep up" not in proc.stdout


def test_poisson_arrivals_split_over_two_workers_add_up_to_the_rate(tmp_path):
    k = 300
    with SimulatorProcess("--time-scale", "0.1") as sim:
        _, requests, _, run, metrics = rate_run(
            tmp_path, sim, "--rates", "50", "--workers", "2", "--max-in-flight", "40",
            "--requests-per-level", str(k), "--warmup-requests", "10",
        )  # fmt: skip
    row = metrics.iloc[0]
    print(
        "poisson x2:", row[["achieved_rate", "queued_p50", "queued_p99", "delay_growth"]].to_dict()
    )
    assert requests["worker"].nunique() == 2 and run["outcome"] == "completed"
    # K Poisson arrivals: relative standard deviation 1/sqrt(K) = 5.8 %; 3 of them
    assert abs(row["achieved_rate"] / 50.0 - 1) < 3 / math.sqrt(k)
    gaps = np.diff(np.sort(requests["start_ts"].to_numpy()))
    assert abs(gaps.std() / gaps.mean() - 1) < 0.25  # exponential gaps (CoV 1), merged
    assert rate_verdicts(metrics, poisson_arrivals(run))[0].kept_up


def test_a_rate_far_above_capacity_is_reported_as_not_kept_up(tmp_path):
    with SimulatorProcess("--time-scale", "0.1", "--max-num-seqs", "2") as sim:
        proc, requests, _, run, metrics = rate_run(
            tmp_path, sim, "--rates", "150", "--max-in-flight", "20", "--output-tokens", "64",
            "--requests-per-level", "60", "--warmup-requests", "10",
        )  # fmt: skip
    row = metrics.iloc[0]
    print("overload:", row[["achieved_rate", "queued_p50", "queued_p99", "delay_growth"]].to_dict())
    assert row["achieved_rate"] < 0.5 * 150  # two sequences at a time: about 30 requests/s
    assert row["queued_p99"] > 0.5  # arrivals waited for one of the 20 users
    verdict = rate_verdicts(metrics, poisson_arrivals(run))[0]
    assert verdict.short and verdict.growing
    assert "could not keep up" in proc.stdout and "150.00 requests/s: achieved" in proc.stdout
    report = tmp_path / "report" / "rate.html"
    run_vllm_load("report", only_run_dir(tmp_path), "-o", str(report))
    markdown = (tmp_path / "report" / "rate.md").read_text()
    assert "The target could not keep up at 150 requests/s" in markdown
    assert "requests/s (requested)" not in markdown  # (a chart label: only in the HTML's images)
