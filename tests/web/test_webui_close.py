"""A test started from the web UI, stopped there, then the process quit: no traceback, and the
run closed once and whole.

After a stop in the web UI the run is closed a few seconds later; that close waits for its last
/metrics scrape. A quit (or a new test) during that wait used to close the run a second time,
writing Locust's stats CSVs the first close had closed (`ValueError: I/O operation on closed
file`) and exiting before the first close had finished run.json. Here the target is frozen
(SIGSTOP) right after the stop, so the delayed close is certainly still waiting for its scrape
when the quit comes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import requests
from support.runhelpers import load_run_files, only_run_dir, start_web_run, stop_group, wait_for_ui

from vllm_load.sim.child import SimulatorProcess, free_port

WEB_UI_CLOSE_GRACE = 5.0  # vllm_load.run.wiring: the run is closed this long after a stop in the UI
METRICS_INTERVAL = 3.0  # a frozen target holds the last scrape for 5 intervals (its timeout)


def test_a_web_ui_test_stopped_then_quit_closes_once_without_a_traceback(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    out = str(tmp_path / "runs")
    with SimulatorProcess("--time-scale", "0.02") as sim:
        proc = start_web_run(
            sim.url,
            port,
            "--levels",
            "2",
            "--input-tokens",
            "128",
            "--output-tokens",
            "8",
            "--warmup-requests",
            "2",
            "--requests-per-level",
            "1000000",
            "--metrics-interval",
            str(METRICS_INTERVAL),
            "--out",
            out,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for_ui(base, proc)
            assert (
                requests.post(base + "/swarm", data={"host": sim.url}, timeout=10).json()["success"]
                is True
            )
            deadline = time.monotonic() + 30
            while not any(
                level["finished"] >= 10
                for level in requests.get(base + "/llm/stats", timeout=10).json()["levels"]
            ):
                assert time.monotonic() < deadline, "the test started from the UI did not run"
                time.sleep(0.2)
            assert requests.post(base + "/stop", timeout=10).json()["success"] is True
            stopped = time.monotonic()
            os.killpg(
                sim.proc.pid, signal.SIGSTOP
            )  # the last scrape now hangs: the delayed close waits on it
            try:
                time.sleep(max(0.0, stopped + WEB_UI_CLOSE_GRACE + 2.0 - time.monotonic()))
                assert proc.poll() is None
                os.killpg(proc.pid, signal.SIGTERM)  # quit while that close is under way
                time.sleep(1.0)
            finally:
                os.killpg(sim.proc.pid, signal.SIGCONT)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                stop_group(proc)
    assert "Traceback" not in stderr and "closed file" not in stderr, stderr[-4000:]
    assert proc.returncode == 0, stderr[-3000:]
    run_dir = only_run_dir(out)
    requests_rows, steps, run, stats = load_run_files(run_dir)
    assert (
        run["outcome"] == "interrupted" and run["ended_at"]
    )  # closed to the end, before the process exited
    locust_total = int(stats.loc[stats["Name"] == "Aggregated", "Request Count"].item())
    assert len(requests_rows) == locust_total == run["requests_recorded"] >= 10
    assert stdout.count(f"Run directory: {run_dir}") == 1  # one close, one summary
    with open(os.path.join(run_dir, "run.json")) as fh:
        assert json.load(fh)["server_metrics"]["samples"] >= 1
