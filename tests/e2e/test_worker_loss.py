"""Losing Locust workers mid-run (`kill -9`): the master carries on with the others, keeps every
record that reached it, counts the lost worker's requests in flight as abandoned, marks the level
`workers_lost`, names the worker and exits 3; a trace replay stops waiting for the lost worker's
share; losing them all ends the run cleanly."""

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
from vllm_load.sim.child import SimulatorProcess


def start_two_worker_run(sim_url: str, out: str, *args: str) -> subprocess.Popen:
    return start_run(
        sim_url,
        "--workers",
        "2",
        *args,
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
    tmp_path, how_many: int, exit_code: int, *args: str, requests_per_level: int = 0
) -> tuple[str, str, list[int], float]:
    """Start a 2-worker run (`TWO_SHORT_LEVELS` with `requests_per_level`, else `args`),
    `kill -9` `how_many` workers once records flow; (run dir, output, killed pids, when)."""
    out = str(tmp_path)
    if requests_per_level:
        args = (*TWO_SHORT_LEVELS, "--requests-per-level", str(requests_per_level))
    with SimulatorProcess("--ttft", "0.05", "--itl", "0.02") as sim:  # about 0.43 s per request
        proc = start_two_worker_run(sim.url, out, *args)
        try:
            run_dir = wait_for_rows(out, 8, proc)
            master, workers = locust_workers(proc)
            killed = [w.pid for w in workers[:how_many]]
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
            killed_at = time.time()
            time.sleep(1.0)
            assert (
                master.is_running() and proc.poll() is None
            )  # the master is not taken down with them
            output, _ = proc.communicate(timeout=60)
        finally:
            stop_group(proc)
    assert proc.returncode == exit_code, output[-3000:]
    return run_dir, output, killed, killed_at


def assert_every_counted_request_is_recorded(requests, run, stats) -> None:
    locust_total = int(stats.loc[stats["Name"] == "Aggregated", "Request Count"].item())
    assert (
        len(requests)
        == locust_total
        == run["locust_totals"]["requests"]
        == run["requests_recorded"]
    )


def assert_named_and_abandoned(run: dict, output: str, killed: list[int], at: float) -> dict:
    """The one worker lost: found by its process, named by id, host and pid in run.json, the
    printed table and the exit line; what it had in flight (its own count at its last report)
    counted as abandoned in the level it was lost during."""
    (lost,) = run["workers_lost"]
    assert lost["pid"] == killed[0] and lost["found"] == "process_exited"
    # found by its process (checked every second, confirmed 0.5 s later), not by heartbeats
    # missed for ~4.6 s
    assert 0 < lost["lost_at"] - at < 3.0, lost["lost_at"] - at
    assert 0 < lost["in_flight"] == lost["in_flight_reported"]
    assert run["requests_abandoned"] == {
        "total": lost["in_flight"],
        "by_level": {"0": lost["in_flight"]},
    }
    named = f"worker {lost['worker']} (host {lost['host']}, pid {killed[0]})"
    assert f"{named}, {lost['in_flight']} request" in output  # the table's legend
    assert f"vllm-load run: {named} was lost during level 0" in output  # why it exits 3
    return lost


def test_the_master_survives_a_lost_worker_and_names_it(tmp_path):
    run_dir, output, killed, at = run_and_kill(tmp_path, 1, 3, requests_per_level=50)
    requests, steps, run, stats = load_run_files(run_dir)
    # every level ran; the one the worker was lost during says so, and the run exits 3
    assert run["outcome"] == "completed"
    assert list(steps["stop_reason"]) == ["workers_lost", "target_reached"]
    assert_every_counted_request_is_recorded(requests, run, stats)
    lost = assert_named_and_abandoned(run, output, killed, at)
    assert lost["level"] == 0
    assert lost["worker"] in run["workers_seen"] and len(run["workers_seen"]) == 2
    (survivor,) = set(run["workers_seen"]) - {lost["worker"]}
    lost_rows = requests[requests["worker"] == lost["worker"]]
    assert len(lost_rows) > 0  # what it sent before it died is kept
    assert (lost_rows["end_ts"] < lost["lost_at"]).all()
    # the survivor took over the lost worker's users: level 1 ran at full concurrency on it alone
    assert set(requests.loc[requests["level"] == 1, "worker"]) == {survivor}
    metrics = level_metrics(requests, steps)
    assert list(metrics["measured"]) == [50, 50] and metrics.loc[1, "achieved_concurrency"] > 7
    assert f"worker {lost['worker']} lost during level 0" in output


def test_a_worker_killed_during_a_trace_replay(tmp_path):
    started = time.monotonic()
    run_dir, output, killed, at = run_and_kill(
        tmp_path,
        1,
        3,
        *("--trace", "sample:mooncake_60s", "--trace-duration", "16", "--trace-speed", "2"),
        *("--max-in-flight", "100"),  # (1,000 users at once starve a busy machine's workers)
    )
    requests, steps, run, stats = load_run_files(run_dir)
    assert time.monotonic() - started < 60  # not held to its time cap for the share never sent
    assert run["outcome"] == "completed" and list(steps["stop_reason"]) == ["workers_lost"]
    assert_every_counted_request_is_recorded(requests, run, stats)
    lost = assert_named_and_abandoned(run, output, killed, at)
    # every request of the segment: recorded, abandoned with the worker, or never sent by it
    assert len(requests) + lost["in_flight"] + lost["unsent"] == run["trace"]["requests"]
    assert lost["unsent"] > 0 and f"{lost['unsent']} of its trace share never sent" in output


def test_losing_every_worker_ends_the_run_with_outcome_workers_lost(tmp_path):
    started = time.monotonic()
    run_dir, *_ = run_and_kill(tmp_path, 2, 3, requests_per_level=1000)  # a pipeline sees it
    assert time.monotonic() - started < 40  # ended by the loss, not by running out its levels
    requests, steps, run, stats = load_run_files(run_dir)
    assert run["outcome"] == "workers_lost" and run["ended_at"]
    assert list(steps["stop_reason"]) == ["workers_lost"] and steps["end_ts"].notna().all()
    assert sorted(w["worker"] for w in run["workers_lost"]) == sorted(run["workers_seen"])
    assert_every_counted_request_is_recorded(requests, run, stats)
    assert len(requests) >= 8
    metrics = level_metrics(requests, steps)
    assert metrics.loc[0, "stop_reason"] == "workers_lost" and metrics.loc[0, "success_rate"] == 1.0
