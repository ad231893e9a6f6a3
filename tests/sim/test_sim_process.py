"""SimulatorProcess and --server-workers: several processes on one port, all stopped together."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from support import ROOT
from support.sim_http import call

from vllm_load.sim import child
from vllm_load.sim.child import SimulatorProcess, free_port


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry))
    return members


def test_free_port_is_bindable():
    port = free_port()
    # a real port: binding to 0 would succeed too, the kernel picking another one
    assert 0 < port <= 65535
    with socket.socket() as probe:  # nothing listens on it yet
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        assert s.getsockname()[1] == port
        s.listen(1)
        with socket.create_connection(("127.0.0.1", port), timeout=5):  # and one can listen on it
            pass


def test_free_port_never_hands_out_a_port_twice():
    # the kernel offers a just-closed port again; a simulator and a web UI once got the same one
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_free_port_draws_below_the_kernels_own_range(monkeypatch):
    # the kernel puts a connection's local end in its ephemeral range: a port it offered a probe
    # could be taken so before a web UI bound it (a second suite beside: EADDRINUSE)
    top = child.ephemeral_start()
    ports = [free_port() for _ in range(50)]
    assert all(child.LOWEST_DRAWN <= port < top for port in ports), (top, ports)
    monkeypatch.setattr(child, "ephemeral_start", lambda: child.LOWEST_DRAWN + 10)
    assert free_port() > 0  # no room to draw: the kernel's choice


def test_workers_share_the_port_and_stop_together():
    sim = SimulatorProcess("--echo", "--server-workers", "2").start()
    try:
        pgid = sim.proc.pid
        assert len(_group_members(pgid)) == 3  # the supervisor and two servers
        for _ in range(20):  # connections land on either worker; all are answered
            status, answer = call(sim.url + "/v1/completions", {"prompt": "hi", "max_tokens": 2})
            assert status == 200 and answer["usage"]["completion_tokens"] == 2
    finally:
        sim.stop()
    assert sim.proc.returncode is not None and _group_members(pgid) == []


def test_the_simulator_has_its_own_process_group_in_our_session():
    """With autogroup scheduling a session is a CPU-share group: a server in a session of its own
    took a group's share from the load process (533 ms/s of run-queue wait at one user, with a
    vLLM); in ours it shares ours, and its group still stops it whole."""
    with SimulatorProcess("--echo") as sim:
        pid = sim.proc.pid
        assert os.getpgid(pid) == pid
        assert os.getsid(pid) == os.getsid(0)
    assert _group_members(pid) == []


STARTS_A_SIMULATOR_AND_WAITS = "\n".join(
    [
        "import sys, time",
        "from vllm_load.sim.child import SimulatorProcess",
        "sim = SimulatorProcess('--echo').start()",
        "print(sim.proc.pid, flush=True)",
        "time.sleep(120)",
    ]
)


def test_the_simulator_ends_with_the_process_that_started_it_however_that_ends():
    # a harness or a `tune` killed by a timeout (SIGKILL: no clean-up of its own runs) had left
    # its simulator running, parent 1
    parent = subprocess.Popen(
        [sys.executable, "-c", STARTS_A_SIMULATOR_AND_WAITS],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        sim_pid = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait(timeout=30)
    deadline = time.monotonic() + 20
    while _alive(sim_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(sim_pid):
        os.kill(sim_pid, signal.SIGKILL)
        pytest.fail(f"the simulator {sim_pid} outlived the process that started it")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_failing_simulator_reports_its_output():
    with pytest.raises(RuntimeError, match="--ttft and --itl go together"):
        SimulatorProcess("--ttft", "0.1").start()


def test_context_manager_stops_on_error():
    with pytest.raises(ZeroDivisionError):
        with SimulatorProcess("--echo") as sim:
            pid = sim.proc.pid
            1 / 0
    assert sim.proc.poll() is not None and _group_members(pid) == []


def test_help_documents_every_option_and_the_docs_do_too():
    import re
    import subprocess
    import sys

    from vllm_load.cli.main import build_parser
    from vllm_load.compat.argparse import parser_actions

    help_text = subprocess.run(
        [sys.executable, "-m", "vllm_load", "sim", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    commands = next(a for a in parser_actions(build_parser()) if a.dest == "command")
    sim_parser = commands.choices["sim"]
    options = [
        opt
        for action in parser_actions(sim_parser)
        for opt in action.option_strings
        if opt.startswith("--")
    ]
    assert len(options) > 20
    docs = open(os.path.join(ROOT, "docs", "simulator.md"), encoding="utf-8").read()
    for action in parser_actions(sim_parser):
        if action.dest != "help":
            assert action.help and action.help.strip(), action.dest
    for option in options:
        if option != "--help":
            assert re.search(rf"{option}\b", help_text), option
            assert f"`{option}" in docs, f"{option} is not in docs/simulator.md"


def test_only_the_echo_server_runs_on_uvloop():
    import asyncio

    import uvloop  # a dependency everywhere but Windows

    from vllm_load.sim.serving import loop_runner

    assert loop_runner("echo") is uvloop.run
    # millisecond clock and early timers: no loop for a server whose token times are the truth
    assert loop_runner("fixed") is asyncio.run and loop_runner("engine") is asyncio.run
