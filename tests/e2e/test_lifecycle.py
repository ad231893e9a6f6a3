"""Processes that die together: whatever ends `vllm-load run` (SIGKILL, SIGHUP, Ctrl-C twice) or
its Locust master (SIGKILL), no Locust process goes on sending load, and run.json does not stay
`running` after the run is over."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from support.runhelpers import TWO_SHORT_LEVELS, start_run, stop_group, wait_for_rows

from vllm_load.sim.child import SimulatorProcess, free_port

GONE_WITHIN = 10.0


def long_run_args(out: str, workers: int) -> tuple[str, ...]:
    """A run that would take minutes: 1000 requests per level of about one second each."""
    return ("--workers", str(workers), *TWO_SHORT_LEVELS, "--requests-per-level", "1000")


def start_long_run(sim_url: str, out: str, workers: int) -> subprocess.Popen:
    return start_run(
        sim_url,
        *long_run_args(out, workers),
        "--out",
        out,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    living = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                living.append(p)
        except psutil.NoSuchProcess:
            pass
    return living


def wait_gone(processes: list[psutil.Process], timeout: float) -> float:
    """Seconds until none of `processes` is alive; fails after `timeout`."""
    started = time.monotonic()
    while alive(processes):
        assert time.monotonic() - started < timeout, (
            f"still running after {timeout} s: {[p.pid for p in alive(processes)]}"
        )
        time.sleep(0.1)
    return time.monotonic() - started


def kill_all(processes: list[psutil.Process]) -> None:
    """Cleanup whatever a failed test left, children included (Locust runs in process groups
    of its own)."""
    for p in alive(processes):
        try:
            for child in p.children(recursive=True):
                child.kill()
            p.kill()
        except psutil.NoSuchProcess:
            pass


def read_run(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as fh:
        return json.load(fh)


def open_levels(run_dir: str) -> int:
    with open(os.path.join(run_dir, "steps.csv"), encoding="utf-8") as fh:
        rows = [line.split(",") for line in fh.read().splitlines()[1:]]
    return sum(1 for row in rows if not row[3])


@dataclass
class LongRun:
    """`vllm-load run` of a test that would take minutes, its rows coming in."""

    proc: subprocess.Popen
    run_dir: str
    family: list[psutil.Process]  # Locust's processes under it (in groups of their own)


@contextlib.contextmanager
def long_run(sim: SimulatorProcess, out: str, workers: int):
    """A `LongRun` against `sim`; whatever it leaves is killed at the end."""
    proc = start_long_run(sim.url, out, workers)
    family: list[psutil.Process] = []
    try:
        run_dir = wait_for_rows(out, 5, proc)
        family = psutil.Process(proc.pid).children(recursive=True)
        yield LongRun(proc, run_dir, family)
    finally:
        kill_all(family)
        stop_group(proc)


def test_killing_vllm_load_run_ends_its_locust_processes_and_the_run_is_closed(
    tmp_path, latency_sim
):
    with long_run(latency_sim, str(tmp_path), workers=2) as run:
        assert len(run.family) == 3  # the Locust master and its two workers
        run.proc.kill()  # SIGKILL: no handler of ours runs
        run.proc.wait(timeout=10)
        wait_gone(run.family, GONE_WITHIN)
    closed = read_run(run.run_dir)  # the master, told by the kernel, closed it
    assert closed["outcome"] == "interrupted" and closed["ended_at"]
    assert open_levels(run.run_dir) == 0


def test_a_hangup_stops_the_run_like_ctrl_c(tmp_path, latency_sim):
    with long_run(latency_sim, str(tmp_path), workers=0) as run:
        run.proc.send_signal(signal.SIGHUP)  # the terminal was closed
        output, _ = run.proc.communicate(timeout=GONE_WITHIN + 20)
        wait_gone(run.family, GONE_WITHIN)
    assert run.proc.returncode == 130, output[-3000:]
    assert read_run(run.run_dir)["outcome"] == "interrupted" and open_levels(run.run_dir) == 0


def test_a_second_ctrl_c_is_clean_and_the_run_is_closed(tmp_path, latency_sim):
    with long_run(latency_sim, str(tmp_path), workers=2) as run:
        run.proc.send_signal(signal.SIGINT)
        time.sleep(0.3)  # while the run is being closed
        run.proc.send_signal(signal.SIGINT)
        output, _ = run.proc.communicate(timeout=GONE_WITHIN + 20)
        wait_gone(run.family, GONE_WITHIN)
    assert run.proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "already stopping" in output
    closed = read_run(run.run_dir)
    assert closed["outcome"] == "interrupted" and "closed_by" not in closed  # Locust closed it
    assert open_levels(run.run_dir) == 0


def test_a_killed_master_takes_its_workers_and_vllm_load_run_closes_the_run(tmp_path, latency_sim):
    with long_run(latency_sim, str(tmp_path), workers=2) as run:
        (master,) = psutil.Process(run.proc.pid).children()
        workers = master.children()
        assert len(workers) == 2
        master.kill()
        took = wait_gone(workers, GONE_WITHIN)
        output, _ = run.proc.communicate(timeout=30)
    assert took < 3.5  # told by the kernel, not by a missed heartbeat (5 s)
    lines = [ln for ln in output.splitlines() if ln.startswith("vllm-load run: error: ")]
    assert run.proc.returncode == 1 and len(lines) == 1, output[-3000:]
    assert "killed by signal 9" in lines[0] and run.run_dir in lines[0]
    closed = read_run(run.run_dir)
    assert closed["outcome"] == "interrupted" and closed["ended_at"]
    assert "signal 9" in closed["closed_by"]
    assert open_levels(run.run_dir) == 0


@dataclass
class RemoteTest:
    """`vllm-load worker` started first, as on another machine, and `vllm-load master` running
    a long test on it."""

    port: int
    master: subprocess.Popen
    worker: subprocess.Popen
    run_dir: str
    log: Path  # the worker's output
    family: list[psutil.Process]  # the worker's processes (Locust's in groups of their own)

    def worker_processes(self) -> list[psutil.Process]:
        return [psutil.Process(self.worker.pid), *self.family]


@contextlib.contextmanager
def remote_test(tmp_path: Path, sim: SimulatorProcess, *worker_args: str):
    port, out, log = free_port(), str(tmp_path / "runs"), tmp_path / "worker.log"
    master_cmd = [sys.executable, "-m", "vllm_load", "master", "--host", sim.url]
    master_cmd += ["--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)]
    master_cmd += [*long_run_args(out, 0)[2:], "--out", out]
    worker_cmd = [sys.executable, "-m", "vllm_load", "worker", *worker_args]
    worker_cmd += ["--master-host", "127.0.0.1", "--master-port", str(port)]
    family: list[psutil.Process] = []
    master = None
    with open(log, "w") as fh:
        worker = subprocess.Popen(
            worker_cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 30
        while "waiting for master" not in log.read_text():
            assert time.monotonic() < deadline and worker.poll() is None, log.read_text()
            family = family or psutil.Process(worker.pid).children(recursive=True)
            time.sleep(0.1)
        master = subprocess.Popen(
            master_cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        run_dir = wait_for_rows(out, 5, master)
        family = psutil.Process(worker.pid).children(recursive=True)  # forked ones included
        yield RemoteTest(port, master, worker, run_dir, log, family)
    finally:
        kill_all(family)
        stop_group(worker)
        if master is not None:
            stop_group(master)


def test_a_remote_worker_stops_within_seconds_of_losing_its_master(tmp_path, latency_sim):
    """A worker on another machine (no parent in common with its master) stops on the master's
    missing heartbeats, says so, and exits non-zero; until the master answers it says it waits."""
    with remote_test(tmp_path, latency_sim) as test:
        (locust_master,) = psutil.Process(test.master.pid).children()
        locust_master.kill()
        took = wait_gone(test.worker_processes(), 15)
        test.master.communicate(timeout=30)
    text = test.log.read_text()
    assert f"vllm-load worker: waiting for master at 127.0.0.1:{test.port}" in text
    assert took < 8.0, text[-3000:]  # Locust's own default: 60 s of load nobody records
    assert test.worker.returncode == 1 and "stopped answering" in text and "Traceback" not in text
    assert read_run(test.run_dir)["outcome"] == "interrupted"


def test_ctrl_c_stops_every_process_of_a_worker(tmp_path, latency_sim):
    """`vllm-load worker --processes 2`: Locust's parent of the two waits for them to stop on a
    Ctrl-C of their own, which a terminal sends to them all."""
    with remote_test(tmp_path, latency_sim, "--processes", "2") as test:
        assert len(test.family) == 3  # Locust's parent and the two it forked
        test.worker.send_signal(signal.SIGINT)
        wait_gone(test.worker_processes(), GONE_WITHIN)
    text = test.log.read_text()
    assert test.worker.returncode == 0 and "Traceback" not in text, text[-3000:]
