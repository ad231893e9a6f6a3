"""A distributed run across real test hosts: target, master and two workers, each in its own
network namespace with its own address, joined by a bridge."""

import os
import signal
import subprocess
import sys
import time

import pytest
from support.netns import NetnsLab, netns_available
from support.runhelpers import load_run_files, only_run_dir

pytestmark = pytest.mark.netns
REASON = netns_available()


def _spawn(host, *argv, log):
    return subprocess.Popen(
        host.command(sys.executable, "-m", "vllm_load", *argv),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_for_health(host, url, timeout=30.0):
    code = (
        f"import sys,time,urllib.request\nend=time.time()+{timeout}\n"
        "while time.time()<end:\n"
        f"  try: urllib.request.urlopen('{url}/health', timeout=1); sys.exit(0)\n"
        "  except Exception: time.sleep(0.2)\nsys.exit(1)"
    )
    assert subprocess.run(host.command(sys.executable, "-c", code)).returncode == 0, (
        f"{url} never became healthy"
    )


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_master_and_two_workers_on_separate_hosts(tmp_path):
    procs = []
    log = open(tmp_path / "processes.log", "w")
    with NetnsLab(["target", "master", "w1", "w2"]) as net:
        target, master, w1, w2 = (net.hosts[n] for n in ("target", "master", "w1", "w2"))
        target_url = f"http://{target.address}:8000"
        try:
            procs.append(
                _spawn(
                    target,
                    "sim",
                    "--host",
                    target.address,
                    "--port",
                    "8000",
                    "--time-scale",
                    "0.02",
                    "--max-num-seqs",
                    "16",
                    log=log,
                )
            )
            _wait_for_health(master, target_url)
            for worker in (w1, w2):
                procs.append(_spawn(worker, "worker", "--master-host", master.address, log=log))
            run = subprocess.run(
                master.command(
                    sys.executable,
                    "-m",
                    "vllm_load",
                    "master",
                    "--host",
                    target_url,
                    "--expect-workers",
                    "2",
                    "--master-bind-host",
                    master.address,
                    "--levels",
                    "4,8",
                    "--input-tokens",
                    "256",
                    "--output-tokens",
                    "32",
                    "--requests-per-level",
                    "20",
                    "--warmup-requests",
                    "4",
                    "--out",
                    str(tmp_path / "runs"),
                ),
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            deadline = time.time() + 15
            while time.time() < deadline and any(p.poll() is None for p in procs[1:]):
                time.sleep(0.2)  # the workers quit when the master does
            assert all(p.poll() is not None for p in procs[1:]), (
                "workers did not quit with the master"
            )
        finally:
            for proc in procs:
                _stop(proc)
            log.close()
    requests, steps, run_json, stats = load_run_files(only_run_dir(tmp_path / "runs"))
    locust_total = int(stats.loc[stats["Name"] == "Aggregated", "Request Count"].item())
    assert len(requests) == locust_total > 0
    assert requests["worker"].nunique() == 2
    assert run_json["outcome"] == "completed"
    assert sorted(run_json["workers_seen"]) == sorted(requests["worker"].unique())
    assert run_json["target"]["host"] == target_url
    assert requests["ok"].all() and list(steps["stop_reason"]) == ["target_reached"] * 2
