"""Running the simulator as a child process: for tests, `vllm-load demo`, benches and campaigns.

The child is `python -m vllm_load sim --host H --port P ...` in a process group of its own, so
`stop()` reaches its --server-workers children too, and it is only ever stopped by its id; in our
session, not a new one: with the kernel's autogroup scheduling a session is a CPU-share group, and a
server in a session of its own took a whole group's share from the load process beside it (as
`server.process.ServerProcess` found with vLLM).
The kernel ends it when the process that started it ends, however that ends (SIGKILL by a
timeout included): `parent_death`.
"""

from __future__ import annotations

import errno
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import IO, Callable

from ..parent_death import preexec

_handed_out: set[int] = set()


#: the lowest port free_port draws from, below the kernel's ephemeral range
LOWEST_DRAWN = 10000


def ephemeral_start() -> int:
    """The first port the kernel hands out by itself (to a bind of port 0, to a connection's
    local end): Linux's net.ipv4.ip_local_port_range, else the IANA range's 49152."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now, and not one this process was given before.

    Drawn at random below the kernel's ephemeral range, where the kernel never puts a port by
    itself: a port it offered to a probe (port 0) could be the local end of another process's
    next connection before our server binds it, and on a busy machine (a second test suite
    beside, thousands of connections to simulators) a web UI then failed to bind with
    EADDRINUSE. Only another explicit choice can take it meanwhile, one in ~20,000. Falls back
    to the kernel's choice where that range is too small to draw from."""
    top = ephemeral_start()
    draw = random.SystemRandom()
    for _ in range(100 if top - LOWEST_DRAWN >= 1000 else 0):
        port = draw.randrange(LOWEST_DRAWN, top)
        if port not in _handed_out and listen_error(host, port) is None:
            _handed_out.add(port)
            return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def listen_error(host: str, port: int) -> OSError | None:
    """Why a server could not listen on `host`:`port` (EADDRINUSE: something listens there
    already; else the address is not this machine's, or does not resolve), or None when it can.
    The probe sets SO_REUSEADDR as servers do, so connections of an earlier server still in
    TIME_WAIT do not count as busy, and no SO_REUSEPORT, so another server sharing the port
    with it does."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as e:
        return e
    return None


def listen_refusal(host: str, port: int, port_option: str, host_option: str) -> str:
    """Why a server of ours cannot listen on `host`:`port`, as one line naming the option to
    change ("" when it can)."""
    error = listen_error(host, port)
    if error is None:
        return ""
    where, reason = f"{host or '*'}:{port}", error.strerror or str(error)
    if error.errno == errno.EADDRINUSE:
        return (
            f"port {port} is busy ({where}: {reason}): stop what listens there, or choose "
            f"another {port_option}"
        )
    return f"cannot listen on {where} ({reason}): give {host_option} an address of this machine"


class SimulatorProcess:
    """Start `python -m vllm_load sim --host 127.0.0.1 --port <free port> *args` as a subprocess,
    wait for /health, stop it by PID."""

    def __init__(
        self,
        *args: str,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout: float = 30.0,
        nice: int = 0,
    ) -> None:
        """`nice`: lowers the simulator's CPU priority by that much, where it stands in for a
        server on other machines but shares the client's cores (a test of the client's timing)."""
        self.args = list(args)
        self.nice = nice
        self.host = host
        self.port = port or free_port(host)
        self.startup_timeout = startup_timeout
        self.url = f"http://{host}:{self.port}"
        self.proc: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> "SimulatorProcess":
        self._log = tempfile.TemporaryFile(mode="w+b")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vllm_load",
                "sim",
                "--host",
                self.host,
                "--port",
                str(self.port),
                *self.args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=self._in_child(),
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                output = self.output()
                self.stop()
                raise RuntimeError(f"the simulator exited with {self.proc.returncode}:\n{output}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        output = self.output()
        self.stop()
        raise RuntimeError(
            f"the simulator did not answer /health within {self.startup_timeout}s:\n{output}"
        )

    def _in_child(self) -> Callable[[], None]:
        """What the child runs before exec: a process group of its own (Popen's process_group is
        Python >= 3.11), ended by the kernel when this process ends however it ends (a harness or
        a `tune` killed by a timeout had left its simulator running), reniced where asked."""
        own_group_dying_with_us = preexec(os.getpid(), own_process_group=True)
        nice = self.nice

        def setup() -> None:
            own_group_dying_with_us()
            if nice:
                os.nice(nice)

        return setup

    def output(self) -> str:
        """What the simulator printed so far (stdout and stderr)."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def stop(self) -> None:
        """SIGTERM to the simulator's process group, wait, SIGKILL if it lingers."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            self._signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # workers that outlived their supervisor share its process group id
        self._signal_group(proc.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None

    @staticmethod
    def _signal_group(pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> "SimulatorProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
