"""The fault matrix: a short stepped test against the simulator with each fault on.

Each case checks that the run finishes, that every failure carries the category the fault
calls for, that requests.csv has exactly the requests Locust counted (failures included), and
that the per-level success rates and throughput are those of the rows.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import pandas as pd
import pytest
from support.runhelpers import load_run_files, only_run_dir, run_vllm_load

from vllm_load.analysis.levels.measure import level_metrics
from vllm_load.sim.child import SimulatorProcess

RATE = "0.2"
OUTPUT_TOKENS = 16


@dataclass(frozen=True)
class FaultCase:
    """One fault: simulator options, client options, and the failures it must produce."""

    sim: tuple[str, ...]
    client: tuple[str, ...] = ()
    category: str | None = None  # None: the fault must not fail any request
    status: int = 200  # HTTP status of the failed rows


CASES = {
    "error_500": FaultCase(("--fault-error-rate", RATE), category="http_status", status=500),
    "error_503": FaultCase(
        ("--fault-error-rate", RATE, "--fault-error-status", "503"),
        category="http_status",
        status=503,
    ),
    "error_429": FaultCase(
        ("--fault-error-rate", RATE, "--fault-error-status", "429"),
        category="http_status",
        status=429,
    ),
    "reset": FaultCase(("--fault-reset-rate", RATE), category="disconnect"),
    "bad_sse": FaultCase(("--fault-bad-sse-rate", RATE), category="bad_sse"),
    "stall": FaultCase(
        ("--fault-stall-rate", RATE, "--fault-stall-seconds", "1.5"),
        ("--stall-timeout", "0.4"),
        category="timeout_stall",
    ),
    "slow_first_token": FaultCase(
        ("--fault-slow-first-token-rate", RATE, "--fault-slow-first-token-seconds", "1.5"),
        ("--ttft-timeout", "0.4"),
        category="timeout_ttft",
    ),
    # silence after the headers, caught by --stall-timeout before any content: a TTFT failure
    "slow_first_token_stall": FaultCase(
        ("--fault-slow-first-token-rate", RATE, "--fault-slow-first-token-seconds", "1.5"),
        ("--stall-timeout", "0.4"),
        category="timeout_ttft",
    ),
    "slow_first_token_outliers": FaultCase(
        ("--fault-slow-first-token-rate", "0.1", "--fault-slow-first-token-seconds", "0.3")
    ),
    "close_after_headers": FaultCase(
        ("--fault-close-after-headers-rate", RATE), category="disconnect"
    ),
    # non-streaming responses: the same faults on a JSON body
    "json_error_503": FaultCase(
        ("--fault-error-rate", RATE, "--fault-error-status", "503"),
        ("--no-stream",),
        category="http_status",
        status=503,
    ),
    "json_reset": FaultCase(("--fault-reset-rate", RATE), ("--no-stream",), category="disconnect"),
    "json_bad_body": FaultCase(
        ("--fault-bad-sse-rate", RATE), ("--no-stream",), category="bad_sse"
    ),
    "json_close_after_headers": FaultCase(
        ("--fault-close-after-headers-rate", RATE), ("--no-stream",), category="disconnect"
    ),
}


def measured_success_rates(requests, steps) -> list[float]:
    """Per level, from the rows: the share of successes among the K requests after the first W to
    start."""
    rates = []
    for step in steps.itertuples():
        rows = requests[requests["level"] == step.level].sort_values(["start_ts", "end_ts"])
        measured = rows.iloc[step.warmup_requests : step.target_requests]
        rates.append(float(measured["ok"].mean()))
    return rates


#: cases whose category and code path another case already covers (error_503, json_error_503,
#: reset): in the slow suite only, to keep the default suite's time
SLOW_CASES = {"error_500", "error_429", "json_reset"}


@pytest.fixture(scope="module")
def simulator():
    """The simulator of a fault's options, started once for this module's worker: the streamed
    and JSON cases of one fault, and the two slow-first-token cases, run against the same one (a
    simulator's start is about a third of a case's time). Each case judges only its own run."""
    with contextlib.ExitStack() as stack:
        started: dict[tuple[str, ...], SimulatorProcess] = {}

        def of(options: tuple[str, ...]) -> SimulatorProcess:
            if options not in started:
                started[options] = stack.enter_context(
                    SimulatorProcess(
                        "--time-scale", "0.05", "--max-num-seqs", "16", "--seed", "3", *options
                    )
                )
            return started[options]

        yield of


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_CASES else n for n in CASES],
)
def test_a_stepped_run_survives_the_fault_and_accounts_for_every_request(name, tmp_path, simulator):
    case = CASES[name]
    sim = simulator(case.sim)
    run_vllm_load(
        "run",
        "--host",
        sim.url,
        "--levels",
        "4,8",
        "--input-tokens",
        "128",
        "--output-tokens",
        str(OUTPUT_TOKENS),
        "--requests-per-level",
        "40",
        "--warmup-requests",
        "4",
        "--out",
        str(tmp_path),
        *case.client,
        timeout=60,
        expect=0 if case.category is None else 5,  # more than 1 % failed: levels_failed
    )
    requests, steps, run, stats = load_run_files(only_run_dir(tmp_path))
    assert run["outcome"] == "completed" and list(steps["stop_reason"]) == ["target_reached"] * 2

    # every request Locust counted is a row, and every failure Locust counted is a failed row
    aggregated = stats.loc[stats["Name"] == "Aggregated"].iloc[0]
    failed = requests[requests["ok"] == 0]
    assert len(requests) == aggregated["Request Count"] == run["locust_totals"]["requests"]
    assert len(failed) == aggregated["Failure Count"] == run["locust_totals"]["failures"]
    # no request escaped as an exception in the user (it would be in neither count)
    assert pd.read_csv(os.path.join(only_run_dir(tmp_path), "locust_exceptions.csv")).empty

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

    metrics = level_metrics(requests, steps)
    assert list(metrics["measured"]) == [40, 40]
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
