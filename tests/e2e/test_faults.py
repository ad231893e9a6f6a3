"""The fault matrix: a short stepped test against the simulator with each fault on.

Each case checks that the run finishes, that every failure carries the category the fault
calls for, that requests.csv has exactly the requests Locust counted (failures included), and
that the per-level success rates and throughput are those of the rows.
"""

from __future__ import annotations

import os

import pandas as pd
import pytest
from support.fault_runs import (
    CASES,
    LEVELS,
    OUTPUT_TOKENS,
    REQUESTS,
    SLOW_CASES,
    fault_run,
    simulators,
)
from support.runhelpers import load_run_files

from vllm_load.analysis.levels.measure import level_metrics


def measured_success_rates(requests, steps) -> list[float]:
    """Per level, from the rows: the share of successes among the K requests after the first W to
    start."""
    rates = []
    for step in steps.itertuples():
        rows = requests[requests["level"] == step.level].sort_values(["start_ts", "end_ts"])
        measured = rows.iloc[step.warmup_requests : step.target_requests]
        rates.append(float(measured["ok"].mean()))
    return rates


@pytest.fixture(scope="module")
def simulator():
    """The simulator of a fault's options, started at its first ask (support.fault_runs)."""
    with simulators() as of:
        yield of


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_CASES else n for n in CASES],
)
def test_a_stepped_run_survives_the_fault_and_accounts_for_every_request(name, simulator):
    case = CASES[name]
    made = fault_run(name, simulator)
    requests, steps, run, stats = load_run_files(made.run_dir)
    assert run["outcome"] == "completed" and list(steps["stop_reason"]) == ["target_reached"] * 2

    # every request Locust counted is a row, and every failure Locust counted is a failed row
    aggregated = stats.loc[stats["Name"] == "Aggregated"].iloc[0]
    failed = requests[requests["ok"] == 0]
    assert len(requests) == aggregated["Request Count"] == run["locust_totals"]["requests"]
    assert len(failed) == aggregated["Failure Count"] == run["locust_totals"]["failures"]
    # no request escaped as an exception in the user (it would be in neither count)
    assert pd.read_csv(os.path.join(made.run_dir, "locust_exceptions.csv")).empty

    if case.category is None:
        assert failed.empty
        assert (
            requests["ttft"].max() > 0.3 > requests["ttft"].median()
        )  # the outliers are there, and rare
    else:
        assert set(failed["error"]) == {case.category}
        assert set(failed["status"]) == {case.status}
        assert (failed["error_message"].str.len() > 0).all()
        assert 0.05 < len(failed) / len(requests) < 0.45  # about the injected rate
        assert requests.loc[requests["ok"] == 1, "error"].isna().all()
        # the run's last line names the failed levels and the fault's category (exit 5)
        said = made.stderr.strip().splitlines()[-1]
        assert said.startswith(f"vllm-load run: 2 level(s) failed: {LEVELS[0]} users: "), said
        assert case.category in said and "(exit 5)" in said, said

    metrics = level_metrics(requests, steps)
    assert list(metrics["measured"]) == [REQUESTS] * len(LEVELS)
    assert list(steps["warmup_requests"]) == [4, 8]  # at least one per user
    assert list(metrics["success_rate"]) == pytest.approx(measured_success_rates(requests, steps))
    assert (metrics["ok"] + metrics["failed"] == metrics["measured"]).all()
    # only successful requests count as throughput: the window's output tokens are at most those
    # of the successful requests overlapping it (window_rates), and some were counted
    work = metrics["output_tok_per_s"] * metrics["window_s"]
    good = requests[requests["ok"] == 1]
    for i, level in metrics.iterrows():
        overlapping = (good["end_ts"] > level.window_start) & (good["start_ts"] < level.window_end)
        assert 0 < work[i] <= overlapping.sum() * OUTPUT_TOKENS + 1e-6
    if case.category is not None:
        assert metrics["failed"].sum() > 0
