"""Interrupting `vllm-load run`: every file flushed, outcome `interrupted`, out within 10 s,
and the partial run still analysable."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request

import psutil
import pytest
from support.runhelpers import (
    TWO_SHORT_LEVELS,
    load_run_files,
    start_run,
    stop_group,
    wait_for_rows,
)

from vllm_load.analysis.levels.measure import level_metrics
from vllm_load.run_format.load import load_run
from vllm_load.sim.child import SimulatorProcess

EXIT_WITHIN = 10.0


def served_requests(url: str) -> dict[str, int]:
    """The server's own count of the requests it ended, by why (`abort`: its client left)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = re.findall(
        r'^vllm:request_success_total\{[^}]*finished_reason="(\w+)"[^}]*\} (\S+)', text, re.M
    )
    return {"stop": 0, "length": 0, "abort": 0} | {why: int(float(n)) for why, n in found}


def processes_under(pid: int, count: int, timeout: float = 60.0) -> list[psutil.Process]:
    """The processes under `pid` once there are `count` (a loaded machine may have recorded the
    first rows of one worker before the second has started), or as many as there are by then."""
    deadline = time.monotonic() + timeout
    while True:
        children = psutil.Process(pid).children(recursive=True)
        if len(children) >= count or time.monotonic() > deadline:
            return children
        time.sleep(0.1)


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_long_run(sim_url: str, out: str, workers: int, sigint_ignored: bool) -> subprocess.Popen:
    """A run that would take minutes: 1000 requests per level of about one second each; started
    with SIGINT ignored, as a non-interactive shell starts a background job, when asked."""
    return start_run(
        sim_url,
        "--workers",
        str(workers),
        *TWO_SHORT_LEVELS,
        "--requests-per-level",
        "1000",
        "--out",
        out,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=ignore_sigint if sigint_ignored else None,
    )


@pytest.mark.parametrize(
    "sig,workers,sigint_ignored",
    [(signal.SIGINT, 0, False), (signal.SIGINT, 2, True), (signal.SIGTERM, 0, False)],
    ids=["sigint-local", "sigint-2-workers-started-ignoring-it", "sigterm-local"],
)
def test_an_interrupted_run_is_complete_on_disk_and_analysable(
    sig, workers, sigint_ignored, tmp_path
):
    out = str(tmp_path)
    with SimulatorProcess("--ttft", "0.05", "--itl", "0.05") as sim:
        proc = start_long_run(sim.url, out, workers, sigint_ignored)
        try:
            run_dir = wait_for_rows(out, 5, proc)
            children = processes_under(proc.pid, 1 + workers)
            assert len(children) == 1 + workers  # Locust, and its workers
            sent = time.monotonic()
            proc.send_signal(sig)
            output, _ = proc.communicate(timeout=EXIT_WITHIN + 20)
            took = time.monotonic() - sent
            served = served_requests(sim.url)
        finally:
            stop_group(proc)
    assert took < EXIT_WITHIN, output[-3000:]
    assert proc.returncode == 130, output[-3000:]  # ended early, and says so to a pipeline
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]

    requests, steps, run, stats = load_run_files(run_dir)
    assert run["outcome"] == "interrupted" and run["ended_at"]
    assert list(steps["stop_reason"]) == ["interrupted"] and steps["end_ts"].notna().all()
    locust_total = int(stats.loc[stats["Name"] == "Aggregated", "Request Count"].item())
    assert (
        len(requests)
        == locust_total
        == run["locust_totals"]["requests"]
        == run["requests_recorded"]
        >= 5
    )
    # the requests in flight when the signal came (the server saw their client leave) are
    # counted, at level 0, with the next requests due of the 4 users: every request the server
    # saw has its row or is counted (on a quiet machine all 4 users had one in flight: 3-4)
    abandoned = run["requests_abandoned"]
    print("server:", served, "run: recorded", len(requests), "abandoned", abandoned)
    assert served["abort"] <= abandoned["total"] <= 4, (served, abandoned)
    assert sum(served.values()) <= len(requests) + abandoned["total"], (served, abandoned)
    assert abandoned["by_level"] == {"0": abandoned["total"]}, abandoned
    assert not [p for p in os.listdir(run_dir) if p.endswith(".tmp")]

    data = load_run(run_dir)
    metrics = level_metrics(data.requests, data.steps)
    assert len(metrics) == 1 and metrics.loc[0, "stop_reason"] == "interrupted"
    assert metrics.loc[0, "started"] == len(requests) and metrics.loc[0, "success_rate"] == 1.0
    # the warm-up is the first request of each of the 4 users
    assert (
        metrics.loc[0, "measured"] == len(requests) - 4 and metrics.loc[0, "output_tok_per_s"] > 0
    )
    if workers:
        assert len(run["workers_seen"]) == workers
