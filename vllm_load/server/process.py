"""Starting, restarting and waiting for the server under test (campaigns and tuning).

Two ways to control a server: a *server command* that vllm-load starts and stops itself
(`vllm serve ...`, `vllm-load sim ...`: it runs in the foreground until stopped), or a *restart
command* that returns once it has restarted a server managed elsewhere (`docker restart vllm`,
`systemctl restart vllm`). Either way the server counts as ready only when `/health` answers
200 and `/v1/models` lists a model.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import IO

from .control import HttpError, auth_headers, model_ids, request_json


class ServerError(RuntimeError):
    """The server could not be started, restarted or reached; the message says what to do."""


def wait_ready(
    host: str, timeout: float, api_key: str | None = None, process: subprocess.Popen | None = None
) -> list[str]:
    """Poll `/health` then `/v1/models` until both answer; return the served model ids."""
    import urllib.error
    import urllib.request

    base = host.rstrip("/")
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ServerError(
                f"the server command exited with code {process.returncode} before {base} was ready"
            )
        try:
            req = urllib.request.Request(base + "/health", headers=auth_headers(api_key))
            with urllib.request.urlopen(req, timeout=5) as resp:
                healthy = resp.status == 200
            if healthy:
                ids = model_ids(request_json(base + "/v1/models", api_key=api_key, timeout=10))
                if ids:
                    return ids
                last = "/v1/models lists no model"
        except (OSError, urllib.error.URLError, HttpError, ValueError) as e:
            last = str(getattr(e, "reason", e))
        time.sleep(0.25)
    raise ServerError(
        f"{base} was not ready within {timeout:.0f} s ({last}); raise --ready-timeout or check the server"
    )


class ServerProcess:
    """A server command run by vllm-load, in its own process group (so it can be stopped whole)
    and in vllm-load's session (so it shares the load process's CPU group)."""

    def __init__(self, command: str, log_path: str | None = None):
        self.command = command
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> subprocess.Popen:
        if self.log_path:
            os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
            self._log = open(self.log_path, "ab")
        out = self._log or subprocess.DEVNULL
        self.process = subprocess.Popen(
            self.command,
            shell=True,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            # a process group of its own (stopped whole), in our session: with the kernel's
            # autogroup scheduling a session is a CPU-share group, and a vLLM busy-polling a core
            # in a session of its own left the load process waiting for a CPU (533 ms/s at one
            # user on a 2-core machine, its TTFT marked late: bench/README.md); setpgrp, as
            # Popen's process_group is Python >= 3.11
            preexec_fn=os.setpgrp,
        )
        return self.process

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the whole process group, SIGKILL after `timeout`; return when every process
        of the group is gone, not only its leader: a server's other processes (vLLM's API server
        and engine) can hold its port for seconds after the command's shell exited, and the next
        configuration's readiness check then found the old server answering."""
        proc, self.process = self.process, None
        if proc is not None and _group_alive(proc.pid):
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                if _group_ends(proc, wait):
                    break
        elif proc is not None:
            proc.poll()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> "ServerProcess":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal is still a member
        return True
    return True


def _group_ends(proc: subprocess.Popen, wait: float) -> bool:
    """Whether `proc` and every other process of its group ended within `wait` seconds."""
    deadline = time.monotonic() + wait
    try:
        proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        return False
    while _group_alive(proc.pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def run_restart_command(command: str, timeout: float) -> None:
    """Run a restart command to completion; a failure or a hang is a ServerError."""
    try:
        done = subprocess.run(
            command,
            shell=True,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise ServerError(
            f"--restart-cmd did not return within {timeout:.0f} s; it must restart the server and "
            "exit (use --server-cmd for a server that runs in the foreground)"
        ) from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        raise ServerError(f"--restart-cmd exited with code {done.returncode}: {tail[0]}")
