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
import sys
import time
from typing import IO

from ..parent_death import die_with_parent
from . import group_guard
from .control import HttpError, auth_headers, model_ids, request_json

#: a guard ends a server's group when vllm-load dies (`group_guard`: Linux's parent-death signal)
GUARDED = sys.platform.startswith("linux")
#: how long a server gets to end on SIGTERM once vllm-load has died, before SIGKILL
ORPHAN_GRACE_S = 10.0


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
    and in vllm-load's session (so it shares the load process's CPU group); the group ends when
    vllm-load does, however vllm-load ends (`group_guard`). Start it from the main thread: the
    parent-death signal comes when the thread that started the process ends."""

    def __init__(self, command: str, log_path: str | None = None):
        self.command = command
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self._guard: _Guard | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> subprocess.Popen:
        if self.log_path:
            os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
            self._log = open(self.log_path, "ab")
        out = self._log or subprocess.DEVNULL
        guard = _Guard.start(out) if GUARDED else None
        try:
            self.process = subprocess.Popen(
                self.command,
                shell=True,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # a process group of its own (stopped whole), in our session: with the kernel's
                # autogroup scheduling a session is a CPU-share group, and a vLLM busy-polling a
                # core in a session of its own left the load process waiting for a CPU (533 ms/s
                # at one user on a 2-core machine, its TTFT marked late: bench/README.md);
                # setpgrp, as Popen's process_group is Python >= 3.11
                preexec_fn=guard.joined_by_shell if guard else os.setpgrp,
            )
        except BaseException as e:
            if guard is not None:
                guard.end()
            if guard is not None and isinstance(e, subprocess.SubprocessError):
                raise ServerError(
                    "the server command was not started: the process that ends it with vllm-load "
                    f"did not start (see {self.log_path or 'its error'})"
                ) from e
            raise
        finally:
            if guard is not None:
                guard.close_pipes()
        self._guard = guard
        return self.process

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the whole process group, SIGKILL after `timeout`; return when every process
        of the group is gone, not only its leader: a server's other processes (vLLM's API server
        and engine) can hold its port for seconds after the command's shell exited, and the next
        configuration's readiness check then found the old server answering."""
        proc, self.process = self.process, None
        guard, self._guard = self._guard, None
        ours = [p for p in (proc, guard.process if guard else None) if p is not None]
        if proc is not None and _group_alive(proc.pid):
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                if _group_ends(proc.pid, ours, wait):
                    break
        for child in ours:
            child.poll()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> "ServerProcess":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class _Guard:
    """vllm-load's side of a server group's guard (`group_guard`): the guard started and armed,
    and the pipes through which the server's shell hands it its group before exec."""

    def __init__(self, process: subprocess.Popen, to_guard: int, from_guard: int):
        self.process = process
        self._to_guard = to_guard
        self._from_guard = from_guard

    @classmethod
    def start(cls, log: IO[bytes] | int) -> "_Guard":
        to_guard_r, to_guard_w = os.pipe()
        from_guard_r, from_guard_w = os.pipe()
        parent = os.getpid()

        def armed() -> None:  # in the guard, before exec
            signal.pthread_sigmask(signal.SIG_BLOCK, group_guard.WATCHED)
            die_with_parent(None, group_guard.DIED)
            if os.getppid() != parent:  # died already: the signal will never come
                os.kill(os.getpid(), group_guard.DIED)

        try:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", group_guard.__file__, str(ORPHAN_GRACE_S)],
                stdin=to_guard_r,
                stdout=from_guard_w,
                stderr=log,
                preexec_fn=armed,
            )
        except BaseException:
            os.close(to_guard_w)
            os.close(from_guard_r)
            raise
        finally:
            os.close(to_guard_r)
            os.close(from_guard_w)  # so that the shell reads an end where the guard died
        return cls(process, to_guard_w, from_guard_r)

    def joined_by_shell(self) -> None:
        """In the server's shell, before exec: a group of its own, which the guard joins. SIGPIPE
        is blocked meanwhile: the child runs this with SIGPIPE's default action restored, so a
        guard that had already ended killed the shell on the write, silently (Popen took that
        for a started server: a CI run, 2026-11-30), where it must fail the start."""
        os.setpgrp()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPIPE})
        os.write(self._to_guard, b"%d\n" % os.getpid())  # EPIPE: an OSError, the start fails
        if not os.read(self._from_guard, 16):
            raise OSError("the server's guard ended before joining its process group")
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGPIPE})

    def close_pipes(self) -> None:
        os.close(self._to_guard)
        os.close(self._from_guard)

    def end(self) -> None:
        """Where the server could not be started."""
        self.process.kill()
        self.process.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal is still a member
        return True
    return True


def _group_ends(pgid: int, ours: list[subprocess.Popen], wait: float) -> bool:
    """Whether every process of group `pgid` ended within `wait` seconds; `ours`, the group's
    processes that are our children, are reaped on the way (a zombie is still a member)."""
    deadline = time.monotonic() + wait
    while True:
        for child in ours:
            child.poll()
        if not _group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


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
