"""Losing Locust workers mid-run (`kill -9`): the master carries on with the others, keeps every
record that reached it and names the lost worker; losing them all ends the run cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
from support.runhelpers import (
    TWO_SHORT_LEVELS,
    load_run_files,
    start_run,
    stop_group,
    wait_for_rows,
)

from vllm_load.analysis.levels.measure import level_metrics
from vllm_load.sim.process import SimulatorProcess


def start_two_worker_run(sim_url: str, out: str, requests_per_level: int) -> subprocess.Popen:
    return start_run(
        sim_url,
        "--workers",
        "2",
        *TWO_SHORT_LEVELS,
        "--requests-per-level",
        str(requests_per_level),
        "--out",
        out,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def locust_workers(proc: subprocess.Popen) -> tuple[psutil.Process, list[psutil.Process]]:
    """The Locust master (`vllm-load run`'s child) and its worker processes."""
    (master,) = psutil.Process(proc.pid).children()
    workers = master.children()
    assert len(workers) == 2
    return master, workers


def run_and_kill(
    tmp_path, how_many: int, requests_per_level: int, exit_code: int
) -> tuple[str, str, list[int]]:
    """Start a 2-worker run, `kill -9` `how_many` workers once records flow; (run dir, output, killed pids)."""
    out = str(tmp_path)
    with SimulatorProcess("--ttft", "0.05", "--itl", "0.02") as sim:  # about 0.43 s per request
        proc = start_two_worker_run(sim.url, out, requests_per_level)
        try:
            run_dir = wait_for_rows(out, 8, proc)
            master, workers = locust_workers(proc)
            killed = [w.pid for w in workers[:how_many]]
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
            time.sleep(1.0)
            assert (
                master.is_running() and proc.poll() is None
            )  # the master is not taken down with them
            output, _ = proc.communicate(timeout=60)
        finally:
            stop_group(proc)
    assert proc.returncode == exit_code, output[-3000:]
    return run_dir, output, killed


def assert_every_counted_request_is_recorded(requests, run, stats) -> None:
    locust_total = int(stats.loc[stats["Name"] == "Aggregated", "Request Count"].item())
    assert (
        len(requests)
        == locust_total
        == run["locust_totals"]["requests"]
        == run["requests_recorded"]
    )


def test_the_master_survives_a_lost_worker_and_names_it(tmp_path):
    run_dir, output, _ = run_and_kill(tmp_path, 1, requests_per_level=50, exit_code=0)
    requests, steps, run, stats = load_run_files(run_dir)
    assert run["outcome"] == "completed" and list(steps["stop_reason"]) == ["target_reached"] * 2
    assert_every_counted_request_is_recorded(requests, run, stats)

    (lost,) = run["workers_lost"]
    assert (
        lost["level"] == 0
        and lost["worker"] in run["workers_seen"]
        and len(run["workers_seen"]) == 2
    )
    (survivor,) = set(run["workers_seen"]) - {lost["worker"]}
    lost_rows = requests[requests["worker"] == lost["worker"]]
    assert len(lost_rows) > 0  # what it sent before it died is kept
    assert (lost_rows["end_ts"] < lost["lost_at"]).all()
    # the survivor took over the lost worker's users: level 1 ran at full concurrency on it alone
    assert set(requests.loc[requests["level"] == 1, "worker"]) == {survivor}
    metrics = level_metrics(requests, steps)
    assert list(metrics["measured"]) == [50, 50] and metrics.loc[1, "achieved_concurrency"] > 7
    assert f"worker {lost['worker']} lost during level 0" in output


def test_losing_every_worker_ends_the_run_with_outcome_workers_lost(tmp_path):
    started = time.monotonic()
    run_dir, _, _ = run_and_kill(
        tmp_path, 2, requests_per_level=1000, exit_code=3
    )  # a pipeline sees it
    assert time.monotonic() - started < 40  # ended by the loss, not by running out its levels
    requests, steps, run, stats = load_run_files(run_dir)
    assert run["outcome"] == "workers_lost" and run["ended_at"]
    assert list(steps["stop_reason"]) == ["workers_lost"] and steps["end_ts"].notna().all()
    assert sorted(w["worker"] for w in run["workers_lost"]) == sorted(run["workers_seen"])
    assert_every_counted_request_is_recorded(requests, run, stats)
    assert len(requests) >= 8
    metrics = level_metrics(requests, steps)
    assert metrics.loc[0, "stop_reason"] == "workers_lost" and metrics.loc[0, "success_rate"] == 1.0
