"""--prometheus end to end against the simulator: the master serves /metrics while a test runs,
with the level and the requests in flight as they go, and once the test is over its counts,
histograms and tokens equal requests.csv's; the server stops with the run; a port in use
refuses the test in one line before anything is written.

A test started from the web UI is the one that shows the final counts: its run is closed a few
seconds after it stops (`run.wiring.WEB_UI_CLOSE_GRACE`), and the metrics are served until then.
A headless run closes as soon as its last request is in, so a scrape may come before the last
rows; it is checked for what it served while running."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import requests
from support import ROOT
from support.prometheus_scrape import (
    buckets,
    check_histogram,
    expected_request_counts,
    itl_gaps,
    one,
    phase,
    request_counts,
    scrape,
    wait_until_refused,
)
from support.runhelpers import (
    TWO_SHORT_LEVELS,
    load_run_files,
    only_run_dir,
    run_vllm_load,
    start_run,
    start_web_run,
    stop_group,
    terminate,
    wait_for_ui,
)

from vllm_load.sim.child import SimulatorProcess, free_port

LEVELS = (*TWO_SHORT_LEVELS, "--requests-per-level", "24")


def watch(url: str, proc: subprocess.Popen, until, timeout: float = 90.0) -> list:
    """Every scrape of `url` until `until(samples)` holds (or the run's process ends)."""
    seen: list = []
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        assert time.monotonic() < deadline, f"not within {timeout} s: {seen[-1:]}"
        samples = scrape(url)
        if samples is not None:
            seen.append(samples)
            if until(samples):
                break
        time.sleep(0.1)
    return seen


@pytest.fixture(scope="module")
def sim():
    """One simulator for this file's tests: they compare what the master serves with the run's
    own records, never with the server's counters, so a run before does not change what one
    checks; a simulator's start is seconds of each test."""
    with SimulatorProcess("--time-scale", "0.05") as server:
        yield server


def test_a_web_ui_test_serves_its_metrics_and_they_end_equal_to_requests_csv(tmp_path, sim):
    web, port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    out = str(tmp_path / "runs")
    proc = start_web_run(
        sim.url, web, *LEVELS, "--prometheus", str(port), "--out", out,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for_ui(f"http://127.0.0.1:{web}", proc)
        assert scrape(url) is None  # no test yet: nothing served
        started = requests.post(f"http://127.0.0.1:{web}/swarm", data={"host": sim.url}, timeout=10)
        assert started.json()["success"] is True
        running = watch(url, proc, lambda s: phase(s) == "stopped")
        # all rows are in within a flush (0.2 s) of the stop; the run closes 5 s after it
        time.sleep(1.0)
        final = scrape(url)
        wait_until_refused(url, timeout=20)  # closed with the run
        assert proc.poll() is None  # (the web UI goes on)
    finally:
        terminate(proc)
    assert final is not None and phase(final) == "stopped"
    seen = {(one(s, "vllm_load_level_index"), phase(s)) for s in running}
    assert {(0.0, "running"), (1.0, "running")} <= seen, seen
    values = {
        dict(k)["kind"] + ":" + str(v)
        for s in running
        for k, v in s.get("vllm_load_level_value", {}).items()
    }
    assert values == {"concurrency:4.0", "concurrency:8.0"}
    assert max(one(s, "vllm_load_in_flight") for s in running) > 0
    assert max(one(s, "vllm_load_users") for s in running) == 8

    rows, *_ = load_run_files(only_run_dir(out))
    assert request_counts(final) == expected_request_counts(rows, sim.url)
    ok = rows[rows["ok"] == 1]
    check_histogram(buckets(final, "vllm_load_ttft_seconds"), ok["ttft"].dropna().to_numpy())
    check_histogram(buckets(final, "vllm_load_e2e_seconds"), ok["e2e"].to_numpy())
    assert buckets(final, "vllm_load_itl_seconds")[np.inf] == itl_gaps(rows) > 0
    assert one(final, "vllm_load_ttft_seconds_sum") == pytest.approx(ok["ttft"].sum(), abs=1e-4)
    assert one(final, "vllm_load_completion_tokens_total") == ok["completion_tokens"].sum()
    assert one(final, "vllm_load_prompt_tokens_total") == ok["prompt_tokens"].sum()
    info = dict(next(iter(final["vllm_load_run_info"])))
    assert info["run_dir"] == os.path.basename(only_run_dir(out))


def test_a_headless_master_serves_while_it_runs_and_frees_the_port_when_it_closes(tmp_path, sim):
    """With a worker: the master, which sends no request, serves what the worker's records say."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = start_run(
        sim.url, *LEVELS, "--workers", "1", "--prometheus", str(port), "--out", str(tmp_path),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        running = watch(url, proc, lambda s: False)
        printed = proc.communicate(timeout=60)[0]
    finally:
        stop_group(proc)
    assert proc.returncode == 0, printed[-3000:]
    assert any(phase(s) == "running" for s in running), len(running)
    rows, *_ = load_run_files(only_run_dir(tmp_path))
    served = [sum(request_counts(s).values()) for s in running]
    assert served == sorted(served) and 0 < served[-1] <= len(rows)  # counters only grow
    socket.create_server(("127.0.0.1", port)).close()  # free once the run closed


def taken_port():
    sock = socket.create_server(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


def test_a_port_in_use_refuses_the_run_in_one_line_before_anything_is_written(tmp_path):
    sock, port = taken_port()
    out = tmp_path / "runs"
    with sock:
        proc = run_vllm_load(
            "run", "--host", "http://127.0.0.1:9", "--prometheus", str(port), "--out", str(out),
            expect=2,
        )  # fmt: skip
    assert proc.stderr.strip() == (
        f"vllm-load run: error: --prometheus 127.0.0.1:{port}: cannot listen there (Address "
        "already in use): give a free port (or stop what listens on it)"
    )
    assert not out.exists()


def test_a_locust_started_alone_refuses_a_port_in_use_before_the_run_directory(tmp_path, sim):
    """Without `vllm-load run`'s check (plain locust, or a port taken in between), the run's
    session refuses it as it starts, before it makes the run directory."""
    sock, port = taken_port()
    out = tmp_path / "runs"
    with sock:
        proc = subprocess.run(
            [
                sys.executable, "-m", "locust", "-f", os.path.join(ROOT, "vllm_load", "locustfile.py"),
                "--headless", "--host", sim.url, "--levels", "2", "--prometheus", str(port),
                "--out", str(out),
            ],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"vllm-load: error: --prometheus 127.0.0.1:{port}: cannot listen there" in proc.stderr
    assert not out.exists() or not any(out.iterdir())
