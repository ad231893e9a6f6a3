"""How `vllm-load run` starts Locust: its own process group, but our session (scheduling group);
dying with us; and what our stop signals do to it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from vllm_load.cli.locust_process import Stopper, child_options, group_ended, run_locust


def test_locust_runs_in_its_own_process_group_inside_our_session(capfd):
    code = run_locust(
        [sys.executable, "-c", "import os; print(os.getsid(0), os.getpgid(0), os.getpid())"]
    )
    assert code == 0
    sid, pgid, pid = map(int, capfd.readouterr().out.split())
    # a terminal's Ctrl-C (sent to the foreground group) reaches the child only through us
    assert pgid == pid and pgid != os.getpgid(0)
    # and it is not a new session: with autogroup scheduling that would be a new CPU-share group
    assert sid == os.getsid(0)


PR_GET_PDEATHSIG = 2  # <linux/prctl.h>

READ_PDEATHSIG = (
    "import ctypes, signal; v = ctypes.c_int(); "
    f"ctypes.CDLL(None).prctl({PR_GET_PDEATHSIG}, ctypes.byref(v), 0, 0, 0); print(v.value)"
)


def test_locust_is_told_by_the_kernel_when_we_die(capfd):
    """The parent-death signal is set before exec, so even a `kill -9` of vllm-load run reaches
    Locust (as SIGTERM: it closes its run as interrupted)."""
    assert run_locust([sys.executable, "-c", READ_PDEATHSIG]) == 0
    assert int(capfd.readouterr().out) == signal.SIGTERM


# a child that reports each SIGINT it gets and otherwise waits (it unblocks them, as
# `stop_signals.locust_main` does once it can take them)
COUNT_SIGINTS = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGINT, lambda *a: print('SIGINT', flush=True))\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def test_only_the_first_stop_signal_is_passed_on_and_the_third_kills():
    child = subprocess.Popen(
        [sys.executable, "-c", COUNT_SIGINTS], stdout=subprocess.PIPE, text=True, **child_options()
    )
    try:
        assert child.stdout.readline() == "ready\n"
        stopper = Stopper(child)
        stopper.on_signal(signal.SIGHUP, None)  # a closed terminal stops the test as Ctrl-C does
        assert child.stdout.readline() == "SIGINT\n"
        stopper.on_signal(signal.SIGINT, None)  # a second would cut Locust's close short
        time.sleep(0.5)
        assert child.poll() is None and not stopper.killed
        stopper.on_signal(signal.SIGINT, None)  # the third: at once
        assert child.wait(timeout=10) == -signal.SIGKILL and stopper.killed
        assert child.stdout.read() == ""  # never got the second
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# a child that says which stop signals it was started with blocked, then waits for a SIGTERM
# while they stay blocked, and takes it when it unblocks them
BLOCKED_THEN_TAKEN = (
    "import signal, sys, time\n"
    "print(*sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])), flush=True)\n"
    "signal.signal(signal.SIGTERM, lambda *a: print('SIGTERM', flush=True))\n"
    "sys.stdin.readline()\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])\n"
    "time.sleep(0.5)\n"
)


def test_locust_starts_with_the_stop_signals_blocked_so_an_early_one_waits_for_it():
    """A stop signal sent while Locust imports neither kills it nor raises there: it waits until
    the child can take it (`stop_signals.hold`)."""
    child = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_THEN_TAKEN],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        **child_options(),
    )
    try:
        blocked = {int(s) for s in child.stdout.readline().split()}
        assert {signal.SIGINT, signal.SIGTERM, signal.SIGHUP} <= blocked
        child.send_signal(signal.SIGTERM)  # blocked: it waits
        time.sleep(0.2)
        assert child.poll() is None
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "SIGTERM\n"
        assert child.wait(timeout=10) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_stop_signals_before_locust_exists_are_acted_on_when_it_starts():
    """Signals caught between taking them over and the child's start: the first is passed on
    then, and a third still kills."""
    stopper = Stopper()
    stopper.on_signal(signal.SIGHUP, None)
    child = subprocess.Popen(
        [sys.executable, "-c", COUNT_SIGINTS], stdout=subprocess.PIPE, text=True, **child_options()
    )
    try:
        assert child.stdout.readline() == "ready\n"
        stopper.started(child)
        assert child.stdout.readline() == "SIGINT\n"  # the hangup, as Ctrl-C
        stopper.on_signal(signal.SIGTERM, None)
        stopper.on_signal(signal.SIGTERM, None)
        assert child.wait(timeout=10) == -signal.SIGKILL and stopper.killed
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_the_command_waits_for_locusts_other_processes_before_its_last_line():
    # a leader that exits at once, leaving a member of its group running 0.5 s (as `--processes`
    # workers stopped at Locust's start outlived it)
    leader = subprocess.Popen(["sh", "-c", "sleep 0.5 & exit 0"], preexec_fn=os.setpgrp)
    leader.wait()
    assert group_ended(leader.pid, timeout=0.1) is False  # the member still runs
    started = time.monotonic()
    assert group_ended(leader.pid, timeout=5.0) is True
    assert time.monotonic() - started < 2.0
