"""Starting Locust as a child of a vllm-load command: its command line, its environment and
its process group (`Launch`, made by `cli.run.prepare`, run by `Launch.run`)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field

from ..settings import Settings, option_argv
from ..sim.process import free_port


def locust_command(args: argparse.Namespace) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "locust",
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


# a process group of its own, in our session (Popen's process_group is Python >= 3.11)
OWN_PROCESS_GROUP: dict = (
    {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
)


def run_locust(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Run Locust as a child, its environment ours with `env` added (the API key goes that way,
    never on a command line).

    Locust runs in a process group of its own so that a terminal's Ctrl-C reaches it exactly
    once, through us (a second SIGINT would cut its shutdown short). It stays in our session:
    with the kernel's autogroup scheduling (on by default in desktop and server kernels) a new
    session is a new scheduling group, which competes as one with every other session, and
    beside vLLM's busy-polling engine on 2 cores Locust then waited up to 1.7 s per second for
    a CPU where the same test started from the same shell did not. SIGINT and SIGTERM are
    forwarded explicitly (SIGINT works even where the caller started us with it ignored:
    `main.honour_ctrl_c`): Locust then flushes every file, marks the run interrupted and exits.
    """
    child = subprocess.Popen(
        cmd, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL, **OWN_PROCESS_GROUP
    )
    forward = lambda signum, _frame: child.send_signal(signum)  # noqa: E731
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if child.poll() is None:
            child.kill()
            child.wait()


@dataclass
class Launch:
    """A validated Locust start (`prepare`): its command, its run directory (None for a worker
    or the web UI), the run's settings (None for a worker), and what its environment adds."""

    cmd: list[str]
    run_dir: str | None
    settings: Settings | None
    env: dict[str, str] = field(default_factory=dict)

    def run(self) -> int:
        """Run Locust (`run_locust`); its exit code."""
        return run_locust(self.cmd, self.env)


def api_key_env(api_key: str) -> dict[str, str]:
    return {"OPENAI_API_KEY": api_key} if api_key else {}
