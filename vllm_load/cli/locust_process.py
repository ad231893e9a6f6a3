"""Starting Locust as a child of a vllm-load command: its command line, its environment and
its process group (`Launch`, made by `cli.run.prepare`, run by `Launch.run`)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from ..parent_death import preexec
from ..run_format.claim import Claim
from ..run_format.unfinished import close_unfinished
from ..server.group_guard import others_running
from ..settings import Settings, option_argv
from ..sim.child import free_port
from ..stop_signals import COMMAND_STOP, block_in_child, listened
from .errors import Interrupted


def locust_command(args: argparse.Namespace) -> list[str]:
    # Locust's command, with the stop signals safe while it starts (a worker: while it imports)
    until_init = args.command != "worker"
    cmd = [
        sys.executable,
        "-c",
        f"from vllm_load.stop_signals import locust_main; locust_main({until_init})",
        "-f",
        args.locustfile,
        "--loglevel",
        args.loglevel,
        "--exit-code-on-error",
        "0",
    ]
    if args.command == "worker":
        cmd += [
            "--worker",
            "--master-host",
            args.master_host,
            "--master-port",
            str(args.master_port),
        ]
        if args.processes > 1:
            cmd += ["--processes", str(args.processes)]
        return cmd
    cmd += ["--host", args.host]
    if args.web:
        cmd += ["--web-host", args.web_host, "--web-port", str(args.web_port)]
        if args.web_login:  # the password travels by environment only (run_locust passes ours on)
            cmd += ["--web-login", "--web-user", args.web_user]
        if args.web_insecure_no_login:
            cmd.append("--web-insecure-no-login")
    else:
        cmd += ["--headless", "--only-summary"]
    if args.command == "run" and args.workers > 0:
        # local workers talk to their master on loopback, on a port of their own: two runs on one
        # machine must neither fail to bind Locust's default 5557 nor adopt each other's workers
        port = str(free_port())
        cmd += [
            "--processes",
            str(args.workers),
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            port,
            "--master-port",
            port,
        ]
    if args.command == "master":
        cmd += [
            "--master",
            "--expect-workers",
            str(args.expect_workers),
            "--master-bind-host",
            args.master_bind_host,
            "--master-bind-port",
            str(args.master_bind_port),
        ]
    return cmd + option_argv(args)  # includes --run-dir when prepare() chose one


def run_locust(
    cmd: list[str],
    env: dict[str, str] | None = None,
    group: bool = False,
    stopper: "Stopper | None" = None,
) -> int:
    """Run Locust as a child, its environment ours with `env` added (the API key goes that way,
    never on a command line); its exit code (negative: the signal that killed it).

    Locust runs in a process group of its own so that a terminal's Ctrl-C reaches it exactly
    once, through us (a second SIGINT would cut its shutdown short). It stays in our session:
    with the kernel's autogroup scheduling (on by default in desktop and server kernels) a new
    session is a new scheduling group, which competes as one with every other session, and
    beside vLLM's busy-polling engine on 2 cores Locust then waited up to 1.7 s per second for
    a CPU where the same test started from the same shell did not. It gets SIGTERM when we die,
    however we die (`parent_death`), so a `kill -9` of this command never leaves a test running.
    Stop signals go through `Stopper` (to Locust's whole process group with `group`, as a
    terminal sends them: Locust's `--processes` parent waits for its children to stop on theirs);
    after the third, `Stopped` is raised. `stopper`, when given, is the one to use (the caller
    reads from it whether a stop signal came).
    """
    stopper = stopper or Stopper(group=group)
    # taken over before the child exists: a signal from here on is the child's to act on
    previous = {sig: signal.signal(sig, stopper.on_signal) for sig in listened()}
    stopper.take(COMMAND_STOP.take(), COMMAND_STOP.first)  # those the command deferred
    child = None
    try:
        child = subprocess.Popen(
            cmd, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL, **child_options()
        )
        stopper.started(child)
        code = child.wait()
        group_ended(child.pid)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
    if stopper.killed:
        raise Stopped(code)
    return code


#: how long the command waits for Locust's other processes once its first has exited
GROUP_END_S = 5.0


def group_ended(pgid: int, timeout: float = GROUP_END_S) -> bool:
    """Wait until no live process is left in Locust's process group `pgid`, up to `timeout`
    seconds; whether none is. The workers `--processes` forks log as they stop, and stopped at
    Locust's start they outlived their parent: a worker's "already stopping" came after the
    command's last line. (The group's leader is reaped already: a member left is a worker; one
    that ended but was not reaped, a zombie, does not count.)"""
    deadline = time.monotonic() + timeout
    while others_running(pgid, os.getpid()):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def child_options() -> dict:
    """Popen's arguments for a Locust child: a process group of its own, in our session
    (Popen's process_group is Python >= 3.11), that dies with us, and starts with the stop
    signals blocked (`stop_signals.block_in_child`: its `locust_main` unblocks them)."""
    new_group = sys.version_info < (3, 11)
    dies_with_us = preexec(os.getpid(), own_process_group=new_group)

    def setup() -> None:
        dies_with_us()
        block_in_child()

    return {"preexec_fn": setup} if new_group else {"process_group": 0, "preexec_fn": setup}


class Stopped(Exception):
    """Locust was killed on the third stop signal, before it could close its run."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Stopper:
    """What a stop signal to this command does to its Locust child.

    The first SIGINT, SIGTERM or SIGHUP is passed on (a hangup as SIGINT: a closed terminal
    stops the test as Ctrl-C does): Locust then flushes every file, marks the run interrupted and
    exits. SIGINT is forwarded explicitly, so it works even where the caller started us with it
    ignored (`main.honour_ctrl_c`). A second is not passed on (it would cut Locust's closing of
    the run short): it says the run is being closed. A third kills Locust and its workers at
    once; the caller then closes the run Locust left open (`run_format.unfinished`). Each one counts
    as one the command received (`stop_signals.COMMAND_STOP`): after Locust, one more is not
    a first."""

    def __init__(self, child: subprocess.Popen | None = None, group: bool = False) -> None:
        self.child = child
        self.group = group
        self.signals = 0
        self.first = 0  # the first stop signal's number
        self.acted = 0  # signals acted on (those before the child existed wait for it)
        self.killed = False

    def started(self, child: subprocess.Popen) -> None:
        """The child exists: the signals that came before it are acted on now."""
        self.child = child
        self._catch_up()

    def take(self, count: int, first: int) -> None:
        """`count` signals the command received before this took them over (`first`: the
        first of them), to act on as its own, not counted again."""
        if count:
            self.signals += count
            self.first = self.first or first
            self._catch_up()

    def on_signal(self, signum: int, _frame) -> None:
        self.signals += 1
        COMMAND_STOP.received += 1
        self.first = self.first or signum
        self._catch_up()

    def _catch_up(self) -> None:
        while self.child is not None and self.acted < self.signals:
            self.acted += 1
            self._act(self.child, self.acted)

    def _act(self, child: subprocess.Popen, nth: int) -> None:
        if nth == 1:
            forward = signal.SIGINT if self.first == signal.SIGHUP else self.first
            try:
                if self.group:
                    os.killpg(child.pid, forward)
                else:
                    child.send_signal(forward)
            except ProcessLookupError:
                pass
        elif nth == 2:
            print(
                "vllm-load: already stopping (the run is being closed: a few seconds); "
                "press Ctrl-C again to stop at once",
                file=sys.stderr,
                flush=True,
            )
        elif not self.killed:
            self.killed = True
            try:
                os.killpg(child.pid, signal.SIGKILL)  # Locust and the workers it forked
            except ProcessLookupError:
                pass


@dataclass
class Launch:
    """A validated Locust start (`prepare`): its command, its run directory (None for a worker
    or the web UI), the run's settings (None for a worker), and what its environment adds."""

    cmd: list[str]
    run_dir: str | None
    settings: Settings | None
    env: dict[str, str] = field(default_factory=dict)
    closed_by: str = ""  # why `run` closed the run Locust left open ("" when it did not)
    signal_group: bool = False  # stop signals go to Locust's whole process group
    stop_signals: int = 0  # stop signals received from the claim until Locust ended
    claim: Claim | None = (
        None  # the run directory's claim (`run_format.claim`), Locust's to take over
    )

    def run(self) -> int:
        """Run Locust (`run_locust`); its exit code. A run Locust did not close (it was killed
        outright, or on a third stop signal) is closed here as interrupted. The stop signals the
        command deferred when it claimed the run directory (`prepare`) are acted on here: one
        that came before Locust is started leaves it unstarted (`Interrupted`), the claim given
        back in every case before they are raised again."""
        stopper = Stopper(group=self.signal_group)
        code: int | None = None
        killed = False
        try:
            if not COMMAND_STOP.unacted:
                code = run_locust(self.cmd, self.env, self.signal_group, stopper)
        except Stopped as stopped:
            code, killed = stopped.code, True
        finally:
            self.stop_signals = stopper.signals + COMMAND_STOP.take()
            if self.claim is not None:  # a Locust that never started its run leaves nothing
                self.claim.give_back()
            COMMAND_STOP.resume()
        if code is None:
            raise Interrupted(self.kept().lstrip("; "))
        self.close_unfinished(code)
        if killed:
            raise Interrupted(f"stopped at once{self.kept()}")
        return code

    def kept(self) -> str:
        """`; DIR holds what was recorded` when the run directory exists, else that nothing was
        written (a test stopped before Locust made it)."""
        if not self.run_dir:
            return ""
        if not os.path.isdir(self.run_dir):
            return "; the test had not started, nothing was written"
        return f"; {self.run_dir} holds what was recorded"

    def close_unfinished(self, code: int) -> None:
        ended = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        why = f"the Locust process writing the run {ended} before it closed the run"
        if self.run_dir and close_unfinished(self.run_dir, why):
            self.closed_by = why


def api_key_env(api_key: str) -> dict[str, str]:
    return {"OPENAI_API_KEY": api_key} if api_key else {}
