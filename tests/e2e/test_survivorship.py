"""Every request counted: a level measures the requests that start first after its warm-up, each
followed to its end, so slow and failing requests stay in its figures (issue 35's three
survivorship cases on the simulator); and a run whose levels failed, or whose load processes hit
a client-side limit, never exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from support.fault_runs import LEVELS as FAULT_LEVELS
from support.fault_runs import fault_run, simulators
from support.report_summary import report_summary
from support.runhelpers import (
    load_run_files,
    only_run_dir,
    run_vllm_load,
    stop_group,
    wait_for_rows,
)

from vllm_load.analysis.levels.measure import measure_levels
from vllm_load.run.outcomes import EXIT_CODES
from vllm_load.sim.child import SimulatorProcess, free_port

SHORT = ("--input-tokens", "128", "--output-tokens", "32")


def stepped(sim, tmp_path, *args: str, expect: int = 0):
    proc = run_vllm_load(
        "run", "--host", sim.url, *SHORT, "--out", str(tmp_path), *args, timeout=180, expect=expect
    )
    run_dir = only_run_dir(tmp_path)
    requests, steps, run, _ = load_run_files(run_dir)
    return proc, run_dir, requests, steps, measure_levels(requests, steps)


def test_a_slow_first_token_is_measured_at_every_level(tmp_path):
    """10 % of requests wait 2 s for their first token: the p99 TTFT is that wait (it read 8.5
    and 27.8 ms when a level measured its first requests to finish)."""
    with SimulatorProcess(
        "--time-scale",
        "0.1",
        "--fault-slow-first-token-rate",
        "0.1",
        "--fault-slow-first-token-seconds",
        "2",
        "--seed",
        "5",
    ) as sim:
        _, _, requests, steps, measurement = stepped(sim, tmp_path, "--levels", "16,64")
    metrics = measurement.metrics.set_index("users")
    for users in (16, 64):
        # the wait itself, never less; a busy machine adds to it (2.11 s in a loaded CI run), and
        # the survivorship this guards against read milliseconds
        assert 1.95 <= metrics.loc[users, "ttft_p99"] < 2.5, metrics.loc[users]
        assert metrics.loc[users, "success_rate"] == 1.0
    # each level followed its first W + K requests to start: every one of them has ended, in it
    assert list(steps["stop_reason"]) == ["target_reached"] * 2
    assert (measurement.metrics["measured_after_end"] == 0).all()
    assert list(steps["warmup_requests"]) == [16, 64]  # at least one per user: no ramp measured
    assert list(measurement.metrics["measured"]) == [100, 128]  # 100, or 2 per user


def test_stalled_requests_are_measured_as_failures_and_the_run_fails(tmp_path):
    """30 % of streams stall 3 s and are failed by --stall-timeout 1: the levels show the
    failures (it read 100 % success, and level 64 was the peak), the run exits 5 with one line
    naming them, and no level is taken for the peak."""
    with SimulatorProcess(
        "--time-scale", "0.1", "--fault-stall-rate", "0.3", "--fault-stall-seconds", "3"
    ) as sim:
        proc, run_dir, _, _, measurement = stepped(
            sim,
            tmp_path,
            "--levels",
            "16,64",
            "--stall-timeout",
            "1",
            expect=EXIT_CODES["levels_failed"],
        )
    metrics = measurement.metrics.set_index("users")
    for users in (16, 64):
        assert 0.5 < metrics.loc[users, "success_rate"] < 0.9, metrics.loc[users]
    said = proc.stderr.strip().splitlines()[-1]
    assert (
        said.startswith("vllm-load run: 2 level(s) failed: 16 users: ") and "timeout_stall" in said
    )
    saturation = report_summary(run_dir)["series"][0]["saturation"]  # as its report says
    assert saturation["peak"] is None
    assert {lv["value"] for lv in saturation["failed_levels"] if lv["excluded"]} == {16.0, 64.0}


def test_the_measured_outputs_are_the_levels_own_mix(tmp_path):
    """Output lengths drawn from 4..128: the measured requests' mean output is the level's
    (it read 183 against 270 from 16..512 when the shortest finished first and were measured).
    The measured requests are a share of the level's, drawn alike: at 1,000 of about 1,300, the
    two means differ by chance by about 0.8 % (one standard deviation: 4..128 spreads about its
    mean as 16..512 does, a coefficient of variation of 0.54, at a quarter of the tokens to
    stream). The first 1,000 to finish after the warm-up averaged 0.96 of the level from either
    range (one run each), the measured ones 0.993 (4..128) and 1.000 (16..512)."""
    with SimulatorProcess("--time-scale", "0.05") as sim:
        _, _, requests, _, measurement = stepped(
            sim,
            tmp_path,
            "--levels",
            "128",
            "--output-lengths",
            "uniform:4,128",
            "--requests-per-level",
            "1000",
        )
    measured = measurement.labelled["completion_tokens"].astype(float).mean()
    level = requests.loc[requests["level"] == 0, "completion_tokens"].astype(float).mean()
    assert measured == pytest.approx(level, rel=0.03)


@pytest.fixture(scope="module")
def fault_simulator():
    """The simulator of a fault's options, started at its first ask (support.fault_runs)."""
    with simulators() as of:
        yield of


@pytest.mark.parametrize(
    "fault, category",
    [
        (("--fault-error-rate", "1.0", "--fault-error-status", "503"), "http_status 503"),
        # the fault matrix's runs (tests/e2e/test_faults.py judges their rows), read here
        ("reset", "disconnect"),
        ("bad_sse", "bad_sse"),
    ],
)
def test_a_failing_target_never_exits_0(tmp_path, fault, category, fault_simulator):
    """Every request failed (its own run), or a share of them (the fault matrix's 20 % reset and
    bad-SSE runs, shared with test_faults): the run exits 5 with one line naming the levels and
    the category."""
    if isinstance(fault, str):
        said, first = fault_run(fault, fault_simulator).stderr, FAULT_LEVELS[0]
    else:
        with SimulatorProcess("--time-scale", "0.05", *fault) as sim:
            proc, *_ = stepped(
                sim,
                tmp_path,
                "--levels",
                "2,4",
                "--requests-per-level",
                "40",
                expect=EXIT_CODES["levels_failed"],
            )
        said, first = proc.stderr, 2
    said = said.strip().splitlines()[-1]
    assert said.startswith(f"vllm-load run: 2 level(s) failed: {first} users: "), said
    assert category in said and "(exit 5)" in said


def test_running_out_of_file_descriptors_is_the_clients_limit_and_stops_the_test(tmp_path):
    """600 users in a process allowed 256 open files: the connections fail on the client's side,
    not the server's; the test stops on the first one with the limit named, and exits 6."""
    with SimulatorProcess("--time-scale", "0.05") as sim:
        limited = (
            "import resource, sys, runpy; resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)); "
            "sys.argv = ['vllm-load', *sys.argv[1:]]; runpy.run_module('vllm_load', run_name='__main__')"
        )
        proc = subprocess.run(
            [sys.executable, "-c", limited, "run", "--host", sim.url, *SHORT]
            + ["--levels", "600", "--out", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == EXIT_CODES["client_limit"], proc.stderr[-3000:]
    said = proc.stderr.strip().splitlines()[-1]
    assert "ran out of file descriptors (EMFILE: ulimit -n is 256" in said, said
    assert "(exit 6)" in said
    with open(os.path.join(only_run_dir(tmp_path), "run.json"), encoding="utf-8") as fh:
        run = json.load(fh)
    assert run["outcome"] == "client_limit" and "EMFILE" in run["client_limit"]["message"]
    requests, *_ = load_run_files(only_run_dir(tmp_path))
    limited_rows = requests[requests["error"] == "client_limit"]
    assert len(limited_rows) > 0
    assert not (requests["error"] == "disconnect").any()  # never blamed on the server


def test_a_target_restarted_mid_run_fails_its_levels_instead_of_completing_them(tmp_path):
    """The target is down for 4 s: its instant connect failures are measured as failures (they
    used to count toward two levels' targets as if served, and the run exited 0). The requests
    arrive at a rate, so that the levels outlast the outage however fast a refused connection
    fails (closed-loop users failing at ~1,300 requests/s ended both levels inside it, and the
    run, rightly, as target_lost)."""
    out = str(tmp_path / "runs")
    with SimulatorProcess("--time-scale", "0.5") as sim:
        run = subprocess.Popen(
            [sys.executable, "-m", "vllm_load", "run", "--host", sim.url, "--out", out]
            + ["--input-tokens", "64", "--output-tokens", "16", "--rates", "200,300"]
            + ["--requests-per-level", "1500"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            wait_for_rows(out, 100, run)
            sim.stop()
            time.sleep(4)
            with SimulatorProcess("--time-scale", "0.5", port=sim.port):
                _, stderr = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                stop_group(run)
    assert run.returncode == EXIT_CODES["levels_failed"], stderr[-3000:]
    said = stderr.strip().splitlines()[-1]
    assert said.startswith("vllm-load run: ") and " connect" in said, said


def test_a_worker_without_the_servers_key_stops_the_test_at_once(tmp_path):
    """A worker whose users cannot list the models (401) used to leave the master running every
    level with no request and saying `completed`; the master now stops with the worker's line."""
    port, out = free_port("127.0.0.1"), str(tmp_path / "runs")
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    with SimulatorProcess("--time-scale", "0.1", "--api-key", "SECRET") as sim:
        worker = subprocess.Popen(
            [sys.executable, "-m", "vllm_load", "worker", "--master-host", "127.0.0.1"]
            + ["--master-port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        try:
            master = subprocess.run(
                [sys.executable, "-m", "vllm_load", "master", "--host", sim.url]
                + ["--api-key", "SECRET", "--expect-workers", "1", "--levels", "2,4"]
                + ["--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)]
                + [*SHORT, "--out", out],
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
            )
        finally:
            stop_group(worker)
    assert master.returncode == 2, master.stderr[-3000:]
    line = next(ln for ln in master.stderr.splitlines() if ln.startswith("vllm-load: error: "))
    assert "HTTP 401" in line and "give this process the server's key" in line, line
    assert "Traceback" not in master.stderr
