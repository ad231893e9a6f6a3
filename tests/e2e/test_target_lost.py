"""A target that stops answering mid-run: the run still walks every level and records every
failure, but `vllm-load run` exits 4 with one line saying when it happened, and a campaign counts
the run as failed. The rule (`vllm_load.server.loss`) is checked on hand-made run directories;
the end-to-end tests kill the built-in simulator (SIGKILL) during the second level."""

from __future__ import annotations

import csv
import glob
import json
import os
import re
import signal
import subprocess
import sys

import pandas as pd
import pytest
from support.runhelpers import stop_group, wait_for_level, wait_for_rows
from support.sim_http import listening_pid

from vllm_load.run_format.records import COLUMNS
from vllm_load.server.loss import MIN_STREAK, final_streak, target_lost
from vllm_load.sim.child import SimulatorProcess, free_port

RUN_ARGS = (
    "--levels",
    "2,4,8",
    "--input-tokens",
    "64",
    "--output-tokens",
    "20",
    "--requests-per-level",
    "30",
    "--warmup-requests",
    "2",
    "--metrics-interval",
    "0",
)
FIRST_LEVEL_ROWS = 32  # warm-up + measured requests of level 0


def write_requests(run_dir, rows: list[tuple[int, int, float, int, str]]) -> str:
    """A requests.csv of (level, users, end_ts, ok, error) rows, the other columns empty."""
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "requests.csv"), "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for level, users, end_ts, ok, error in rows:
            values = dict(
                level=level, users=users, end_ts=end_ts, start_ts=end_ts - 1, ok=ok, error=error
            )
            writer.writerow([values.get(column, "") for column in COLUMNS])
    return str(run_dir)


def healthy_then(
    level: int, users: int, failures: list[str]
) -> list[tuple[int, int, float, int, str]]:
    """20 successes at level 0, then `failures` at `level`, in the order they ended."""
    rows = [(0, 2, float(i), 1, "") for i in range(20)]
    return rows + [(level, users, 100.0 + i, 0, error) for i, error in enumerate(failures)]


def dead_host() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_a_run_ending_on_connect_failures_against_a_dead_target_is_lost(tmp_path):
    run_dir = write_requests(
        tmp_path / "run", healthy_then(2, 8, ["disconnect"] * 3 + ["connect"] * 4062)
    )
    streak = final_streak(run_dir)
    assert (streak.level, streak.users, streak.count) == (2, 8, 4065)
    host = dead_host()
    line = target_lost(run_dir, host)
    assert line == (
        f"the target stopped answering during level 2 (users 8): 4,062 connect failures, "
        f"3 disconnect failures and no success after them, and {host}/v1/models does not answer now; "
        f"{run_dir} holds what was measured"
    )


@pytest.mark.parametrize(
    "failures",
    [
        ["http_status"] * 50,  # the server answered, badly: not lost
        ["connect"] * (MIN_STREAK - 1),  # too few to tell
        ["connect"] * 10 + ["bad_sse"] * 5,  # a third of them answered
    ],
    ids=["http-status", "short", "mixed"],
)
def test_failures_that_do_not_say_the_target_is_gone(tmp_path, failures):
    assert (
        target_lost(write_requests(tmp_path / "run", healthy_then(1, 4, failures)), dead_host())
        is None
    )


def test_a_run_ending_on_a_success_is_not_lost(tmp_path):
    rows = healthy_then(1, 4, ["connect"] * 50) + [(1, 4, 500.0, 1, "")]
    assert final_streak(write_requests(tmp_path / "run", rows)) is None


def test_a_target_that_answers_after_the_run_is_not_lost(tmp_path):
    run_dir = write_requests(tmp_path / "run", healthy_then(1, 4, ["connect"] * 50))
    with SimulatorProcess() as sim:  # it came back (or the failures were the network's)
        assert target_lost(run_dir, sim.url) is None


def run_then_kill(
    cmd: list[str], out: str, rows: int, kill, runs: str | None = None
) -> tuple[subprocess.Popen, str, str]:
    """Start `cmd`; once level 1 is under way with `rows` rows (in the run directories under
    `runs`, default `out`), call `kill()` and wait for the run to end; (process, stdout, stderr)."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for_level(runs or out, 1, proc, timeout=120)
        wait_for_rows(runs or out, rows, proc)
        kill()
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            stop_group(proc)
    return proc, stdout, stderr


def run_and_kill_the_target(
    cmd: list[str], out: str, runs: str | None = None
) -> tuple[subprocess.Popen, str, str]:
    """Start `cmd` against a simulator, SIGKILL the simulator once level 1 is under way (in the run
    directories under `runs`, default `out`); (process, stdout, stderr)."""
    with SimulatorProcess("--ttft", "0.02", "--itl", "0.005") as sim:
        return run_then_kill(
            [*cmd, "--host", sim.url, "--out", out],
            out,
            FIRST_LEVEL_ROWS + 8,
            lambda: os.killpg(sim.proc.pid, signal.SIGKILL),
            runs,
        )


def test_run_exits_4_when_the_target_dies_mid_run(tmp_path):
    out = str(tmp_path / "runs")
    proc, stdout, stderr = run_and_kill_the_target(
        [sys.executable, "-m", "vllm_load", "run", *RUN_ARGS], out
    )
    assert proc.returncode == 4, (proc.returncode, stdout[-2000:], stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    (run_dir,) = glob.glob(os.path.join(out, "*", "*"))
    lines = [ln for ln in stderr.splitlines() if ln.startswith("vllm-load run:")]
    assert len(lines) == 1, stderr[-3000:]
    match = re.fullmatch(
        r"vllm-load run: the target stopped answering during level (\d) \(users (\d)\): "
        r"([\d,]+) connect failures(, \d+ disconnect failures?)? and no success after them, and "
        r"http://127\.0\.0\.1:\d+/v1/models does not answer now; (.+) holds what was measured "
        r"\(exit 4\)",
        lines[0],
    )
    assert match and match.group(5) == run_dir, lines[0]
    assert (int(match.group(1)), int(match.group(2))) == (
        1,
        4,
    )  # the level the failures began in, by steps.csv

    # every level ran and every failure is in the run directory, by category
    with open(os.path.join(run_dir, "run.json")) as fh:
        assert json.load(fh)["outcome"] == "completed"
    assert len(pd.read_csv(os.path.join(run_dir, "steps.csv"))) == 3
    requests = pd.read_csv(os.path.join(run_dir, "requests.csv"))
    assert (requests["error"] == "connect").sum() == int(match.group(3).replace(",", ""))
    assert (requests["ok"] == 1).sum() > FIRST_LEVEL_ROWS


def test_a_campaign_counts_a_run_whose_target_died_as_failed(tmp_path):
    out = str(tmp_path / "campaigns")
    proc, stdout, stderr = run_and_kill_the_target(
        [
            sys.executable,
            "-m",
            "vllm_load",
            "campaign",
            "--runs",
            "2",
            "--run-cooldown",
            "0",
            "--ready-timeout",
            "10",
            "--name",
            "lost",
            *RUN_ARGS,
        ],
        out,
        runs=os.path.join(out, "lost", "runs"),
    )
    assert proc.returncode == 1, (proc.returncode, stdout[-2000:], stderr[-3000:])
    assert "the target stopped answering during level" in stderr and "Traceback" not in stderr, (
        stderr[-3000:]
    )
    assert "run ended with outcome 'target_lost'; stopping" in stdout, stdout[-2000:]
    with open(os.path.join(out, "lost", "campaign.json")) as fh:
        runs = json.load(fh)["runs"]
    assert [r["outcome"] for r in runs] == [
        "target_lost"
    ]  # and no second run against a dead server


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["prefill", "decode"])
def test_a_disaggregated_instance_killed_mid_run_fails_its_levels(tmp_path, victim):
    """`sim --disagg` with one instance killed by its PID during level 1: the proxy answers, so the
    target is not lost, but every request it could not complete is a failure, the levels that
    held them fail (no figure given as a clean level's) and the run exits 5."""
    out = str(tmp_path / "runs")
    ports = {"prefill": free_port(), "decode": free_port()}
    argv = ("--disagg", "--prefill-port", str(ports["prefill"]), "--decode-port", str(ports["decode"]),
            "--time-scale", "0.05")  # fmt: skip
    with SimulatorProcess(*argv) as sim:
        pid = listening_pid(ports[victim])
        assert pid is not None and pid != sim.proc.pid
        proc, stdout, stderr = run_then_kill(
            [sys.executable, "-m", "vllm_load", "run", *RUN_ARGS[:1], "2,4", *RUN_ARGS[2:]]
            + ["--host", sim.url, "--out", out],
            out,
            FIRST_LEVEL_ROWS + 4,
            lambda: os.kill(pid, signal.SIGKILL),
        )
    assert proc.returncode == 5, (proc.returncode, stdout[-2000:], stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    (run_dir,) = glob.glob(os.path.join(out, "*", "*"))
    requests = pd.read_csv(os.path.join(run_dir, "requests.csv"))
    failed = requests[requests["ok"] == 0]
    assert len(failed) > 0 and (requests[requests["level"] == 0]["ok"] == 1).all()
    assert failed["error_message"].str.contains(f"the {victim} instance did not answer").any()
    line = next(ln for ln in stderr.splitlines() if ln.startswith("vllm-load run:"))
    assert "4 users:" in line and "http_status 502" in line and "(exit 5)" in line, line
