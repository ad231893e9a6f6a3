"""Client health: loop lag and CPU of the load processes, and client-bound levels."""

from __future__ import annotations

import math
import os

import pandas as pd
from support.runhelpers import load_run_files, only_run_dir, run_vllm_load

from vllm_load.analysis.levels.client_side import (
    health_problems,
    late_levels,
    level_client_health,
    read_client_health,
)
from vllm_load.analysis.levels.measure import level_metrics
from vllm_load.client.health import HealthProbe, parse_schedstat, runqueue_wait_s
from vllm_load.sim.child import SimulatorProcess


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_probe_measures_oversleep_and_cpu_share():
    wall, cpu = FakeClock(), FakeClock()
    probe = HealthProbe(tick=0.05, clock=wall, cpu_clock=cpu)
    for late in (0.0, 0.002, 0.030):  # three ticks, woken 0, 2 and 30 ms late
        before = wall()
        wall.now += 0.05 + late
        probe.record_lag(wall() - before - probe.tick)
    cpu.now += 0.0741  # 0.0741 s of CPU over the 0.182 s elapsed
    sample = probe.sample("w1", level=3)
    assert math.isclose(sample.loop_lag_mean_ms, 32 / 3, rel_tol=1e-9) and math.isclose(
        sample.loop_lag_max_ms, 30
    )
    assert math.isclose(sample.cpu_percent, 100 * 0.0741 / 0.182, rel_tol=1e-9)
    assert sample.worker == "w1" and sample.level == 3
    assert math.isnan(probe.sample("w1").loop_lag_mean_ms)  # a new interval with no ticks yet


def test_schedstat_is_parsed_to_seconds_waited():
    assert parse_schedstat("123456789 1740000000 4242\n") == 1.74
    assert math.isnan(parse_schedstat("")) and math.isnan(parse_schedstat("12 x 3"))
    assert math.isnan(
        runqueue_wait_s(("/nonexistent/schedstat",))
    )  # no /proc: unknown, not an error
    if os.path.exists("/proc/self/schedstat"):
        assert runqueue_wait_s() >= 0.0


def test_probe_reports_run_queue_wait_per_second_of_wall_time():
    wall, cpu, wait = FakeClock(), FakeClock(), FakeClock()
    probe = HealthProbe(clock=wall, cpu_clock=cpu, wait_clock=wait)
    wall.now, wait.now = 2.0, 0.5  # 0.5 s waited for a CPU over 2 s
    assert math.isclose(probe.sample("w").runqueue_wait_ms_per_s, 250.0)
    wall.now += 1.0
    assert probe.sample("w").runqueue_wait_ms_per_s == 0.0
    wall.now, wait.now = wall.now + 0.004, wait.now + 0.002  # the run's last few ms: no rate
    assert math.isnan(probe.sample("w").runqueue_wait_ms_per_s)
    nowhere = HealthProbe(clock=wall, cpu_clock=cpu, wait_clock=lambda: float("nan"))
    wall.now += 1.0
    assert math.isnan(nowhere.sample("w").runqueue_wait_ms_per_s)


def test_levels_are_judged_over_their_measured_window():
    metrics = pd.DataFrame(
        {
            "level": [0, 1],
            "users": [10, 100],
            "window_start": [10.0, 30.0],
            "window_end": [20.0, 40.0],
        }
    )
    health = pd.DataFrame(
        {
            "ts": [5.0, 12.0, 15.0, 31.0, 35.0, 39.0],
            "worker": ["a", "a", "b", "a", "b", "a"],
            "level": [0, 0, 0, 1, 1, 1],
            "cpu_percent": [
                99.0,
                40.0,
                50.0,
                60.0,
                95.0,
                30.0,
            ],  # the 99% at t=5 is before the window
            "loop_lag_mean_ms": [50.0, 1.0, 2.0, 12.5, 3.0, 1.0],
            "loop_lag_max_ms": [200.0, 3, 4, 40, 9, 2],
            "rss_mib": [50.0, 51, 52, 60, 61, 62],
        }
    )
    out = level_client_health(health, metrics)
    assert list(out["client_bound"]) == [False, True]
    assert out.loc[0, "cpu_percent_max"] == 50.0 and out.loc[0, "processes"] == 2
    assert out.loc[1, "reason"] == "CPU 95% > 80%; loop lag 12.5 ms > 10 ms"


def _late_case():
    metrics = pd.DataFrame(
        {
            "level": [0, 1, 2],
            "users": [1, 2, 4],
            "window_start": [10.0, 30.0, 50.0],
            "window_end": [20.0, 40.0, 60.0],
        }
    )
    health = pd.DataFrame(
        {
            "ts": [15.0, 35.0, 55.0, 59.0],
            "worker": ["local"] * 4,
            "level": [0, 1, 2, 2],
            "cpu_percent": [20.0, 30.0, 40.0, 45.0],
            "loop_lag_mean_ms": [0.5, 1.0, 2.0, 2.0],
            "loop_lag_max_ms": [1.0, 2.0, 3.0, 3.0],
            "rss_mib": [50.0] * 4,
            "runqueue_wait_ms_per_s": [
                3.0,
                20.0,
                1740.0,
                900.0,
            ],  # the starved co-located client at 4 users
        }
    )
    # level 0: 2 of 200 chunks merged (1%); level 1: 20 of 200 (10%); level 2: none; a failure and a
    # request outside the window do not count
    requests = pd.DataFrame(
        {
            "level": [0, 0, 1, 1, 1, 1, 2],
            "ok": [1, 1, 1, 1, 0, 1, 1],
            "end_ts": [12.0, 18.0, 32.0, 38.0, 39.0, 45.0, 58.0],
            "n_chunks": [100, 100, 100, 100, 100, 100, 100],
            "chunks_merged": [2, 0, 20, 0, 100, 100, 0],
        }
    )
    return health, metrics, requests


def test_a_level_is_client_late_on_merged_chunks_or_run_queue_wait():
    health, metrics, requests = _late_case()
    out = level_client_health(health, metrics, requests)
    assert list(out["client_late"]) == [False, True, True]
    assert list(out["client_bound"]) == [
        False,
        False,
        False,
    ]  # CPU and loop lag looked fine throughout
    assert out["merged_share"].tolist()[:2] == [0.01, 0.1] and out.loc[2, "merged_share"] == 0.0
    assert out.loc[1, "client_late_reason"] == "10% of chunks merged in reads > 5%"
    assert out.loc[2, "client_late_reason"] == "run-queue wait 1,740 ms/s > 100 ms/s"
    assert out.loc[2, "runqueue_wait_ms_per_s_max"] == 1740.0
    assert late_levels(out) == {
        1: out.loc[1, "client_late_reason"],
        2: out.loc[2, "client_late_reason"],
    }
    assert health_problems(out) == [
        "2 users: client-late (10% of chunks merged in reads > 5%)",
        "4 users: client-late (run-queue wait 1,740 ms/s > 100 ms/s)",
    ]


def test_a_rate_level_is_named_in_requests_per_second_not_users():
    """A --rates level's users are Locust's cap on requests in flight: its problems name its
    rate, as the report's axis does."""
    health, metrics, requests = _late_case()
    metrics["kind"], metrics["value"], metrics["users"] = "rate", [0.5, 2.5, 10.0], 256
    out = level_client_health(health, metrics, requests)
    assert health_problems(out) == [
        "2.50 requests/s: client-late (10% of chunks merged in reads > 5%)",
        "10.00 requests/s: client-late (run-queue wait 1,740 ms/s > 100 ms/s)",
    ]
    metrics["kind"], metrics["value"] = "trace", [0.0, 30.0, 60.0]
    assert health_problems(level_client_health(health, metrics, requests))[0].startswith(
        "30 s into the trace: client-late"
    )


def test_old_runs_without_the_new_columns_judge_only_what_they_have():
    health, metrics, requests = _late_case()
    out = level_client_health(
        health.drop(columns="runqueue_wait_ms_per_s"),
        metrics,
        requests.drop(columns="chunks_merged"),
    )
    assert not out["client_late"].any() and out["merged_share"].isna().all()
    assert out["runqueue_wait_ms_per_s_max"].isna().all()
    only_requests = level_client_health(None, metrics, requests)  # no client_health.csv at all
    assert (
        list(only_requests["client_late"]) == [False, True, False]
        and (only_requests["processes"] == 0).all()
    )


def _busy_shares(health: pd.DataFrame, window: pd.Series) -> pd.Series:
    """Per health sample in a level's measured window, the share of the interval the client ran
    or sat ready to run (its CPU plus its run-queue wait): ~1 for a client that never waited
    for a response, however many other processes the host ran beside it."""
    ts = health["ts"]
    part = health[(ts > window["window_start"]) & (ts <= window["window_end"])]
    return part["cpu_percent"] / 100 + part["runqueue_wait_ms_per_s"] / 1000


#: health samples (one a second) the flat-out test wants in its measured window
FLAT_OUT_SAMPLES = 3


def _flat_out_run(out, sim, requests: int):
    """A run whose single client process goes flat out against `sim`'s echo: its client health
    samples and its one level's figures."""
    run_vllm_load(
        "run",
        "--host",
        sim.url,
        "--levels",
        "64",
        "--input-tokens",
        "64",
        "--output-tokens",
        "100",
        "--requests-per-level",
        str(requests),
        "--warmup-requests",
        "64",
        "--out",
        str(out),
        # a CPU-bound run: 20-30 s beside other tests, over 240 s at load 29 on 2 cores
        timeout=540,
    )
    run_dir = only_run_dir(out)
    requests_frame, steps, *_ = load_run_files(run_dir)
    health = read_client_health(os.path.join(run_dir, "client_health.csv")).frame
    assert health is not None and (health["worker"] == "local").all()
    return health, level_metrics(requests_frame, steps)


def test_a_client_flat_out_against_echo_is_marked_client_bound(tmp_path):
    # two echo processes: one alone can no longer keep the client busy, the SSE meter is that fast.
    # 8,000 requests: at the 700-1,100 requests/s one client process made against echo on the
    # machines this was written on, a measured window of 7-11 s, so 5 or more health samples (one
    # a second, later while the loop is busy). A faster host makes more (an AMD EPYC one: 6,100
    # requests/s, a window of 1.3 s, one sample), so a window too short for FLAT_OUT_SAMPLES is run
    # again with as many requests as this host's own pace needs for a ~8 s window (5 s gave 3
    # samples). The verdict takes the window's worst sample, and each of a flat-out client's shows
    # it: over 80 % CPU on a free core, or hundreds of ms/s waiting for a shared one
    with SimulatorProcess("--echo", "--server-workers", "2") as sim:
        health, metrics = _flat_out_run(tmp_path / "first", sim, 8000)
        window = metrics.iloc[0]
        if len(_busy_shares(health, window)) < FLAT_OUT_SAMPLES:
            paced = window["measured"] / window["window_s"] * 8.0
            health, metrics = _flat_out_run(tmp_path / "paced", sim, int(min(paced, 60_000)))
    verdict = level_client_health(health, metrics)
    # an echo server costs nothing, so the single client process runs flat out: over 80% of a core,
    # or, on a box whose cores others share, as much as it gets and waiting for more
    row = verdict.loc[0]
    assert (row["client_bound"] and row["cpu_percent_max"] > 80) or (
        row["client_late"] and "run-queue wait" in row["client_late_reason"]
    ), verdict.to_dict("records")
    # beside other tests' load any client waits for a CPU and may be marked late by that wait
    # alone: that this one was flat out is its own samples' word, on any host, ran or ready to run
    # through the window (a client waiting for responses is neither: not runnable)
    busy = _busy_shares(health, metrics.iloc[0])
    print("client busy shares (CPU + run-queue wait):", busy.round(2).tolist())
    assert len(busy) >= FLAT_OUT_SAMPLES and busy.median() > 0.8, verdict.to_dict("records")
