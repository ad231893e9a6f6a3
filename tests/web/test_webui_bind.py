"""Where the web UI and the master's worker port listen (`vllm_load.web.bind`).

Unless told otherwise both listen on 127.0.0.1, whether started by `vllm-load run --web`,
`vllm-load master` or plain `locust -f locustfiles/chat_stepped.py` (Locust's own default is
every interface). A web UI on any other address needs `--web-login` (or the loud
`--web-insecure-no-login`): without either it is one clear error line and exit 2.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from support import ROOT
from support.runhelpers import stop_group

from vllm_load.sim.child import SimulatorProcess, free_port
from vllm_load.web.auth import PASSWORD_ENV
from vllm_load.web.bind import is_loopback, open_web_ui_refusal

CHAT_STEPPED = os.path.join(ROOT, "locustfiles", "chat_stepped.py")
SMALL = ("--levels", "2", "--input-tokens", "64", "--output-tokens", "8")


def listening(port: int) -> set[str]:
    """The addresses a TCP port listens on in this network namespace (/proc/net/tcp, tcp6)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            with open(table) as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # the kernel prints each 32-bit word in host (little-endian) order
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            family = socket.AF_INET if width == 8 else socket.AF_INET6
            found.add(socket.inet_ntop(family, words))
    return found


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> set[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {proc.communicate()[0][-3000:]}")
        found = listening(port)
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on {port} within {timeout} s")


def start(cmd: list[str], env: dict | None = None, inherit: bool = True) -> subprocess.Popen:
    """`cmd` in a session of its own, its output kept; `env` added to ours (or, not
    `inherit`ing, instead of it)."""
    return subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})} if inherit else env,
        start_new_session=True,
    )


def end(proc: subprocess.Popen) -> str:
    """Stop a run started by `start` (SIGTERM to its group: vllm-load forwards it to the Locust
    it started in a group of its own), then kill what is left; its output."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        return proc.communicate(timeout=20)[0]
    except subprocess.TimeoutExpired:
        stop_group(proc)
        return ""


def vllm_load(*args: str) -> list[str]:
    return [sys.executable, "-m", "vllm_load", *args]


def locust(*args: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", CHAT_STEPPED, *args]


@pytest.fixture(scope="module")
def sim():
    with SimulatorProcess("--time-scale", "0.02") as server:
        yield server


@pytest.mark.parametrize("how", ["vllm-load run --web", "locust -f chat_stepped.py"])
def test_the_web_ui_listens_on_loopback_unless_told(sim, how, tmp_path):
    port = free_port()
    out = ("--out", str(tmp_path / "runs"))
    if how.startswith("vllm-load"):
        cmd = vllm_load("run", "--host", sim.url, "--web", "--web-port", str(port), *SMALL, *out)
    else:
        cmd = locust("--host", sim.url, "--web-port", str(port), *SMALL, *out)
    # Locust's own variable for the bind address must not be what binds it here
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    proc = start(cmd, env=env, inherit=False)
    try:
        assert wait_listening(port, proc) == {"127.0.0.1"}
    finally:
        end(proc)


@pytest.mark.parametrize("how", ["vllm-load master", "locust --master"])
def test_the_masters_worker_port_listens_on_loopback_unless_told(sim, how, tmp_path):
    web_port, master_port = free_port(), free_port()
    ports = ("--web-port", str(web_port), "--master-bind-port", str(master_port))
    out = ("--out", str(tmp_path / "runs"))
    if how.startswith("vllm-load"):
        cmd = vllm_load("master", "--host", sim.url, "--web", *ports, *SMALL, *out)
    else:
        cmd = locust("--host", sim.url, "--master", *ports, *SMALL, *out)
    proc = start(cmd)
    try:
        assert wait_listening(master_port, proc) == {"127.0.0.1"}
        assert wait_listening(web_port, proc) == {"127.0.0.1"}
    finally:
        end(proc)
    # told otherwise, it binds where it is told
    master_port = free_port()
    ports = ("--web-port", str(free_port()), "--master-bind-port", str(master_port))
    if how.startswith("vllm-load"):
        cmd = vllm_load("master", "--host", sim.url, "--web", *ports, *SMALL, *out)
    else:
        cmd = locust("--host", sim.url, "--master", *ports, *SMALL, *out)
    proc = start([*cmd, "--master-bind-host", "0.0.0.0"])
    try:
        assert wait_listening(master_port, proc) == {"0.0.0.0"}
    finally:
        end(proc)


# each way of starting it once, and each address once: whether an address is beyond loopback is
# `is_loopback`'s (all three in test_what_counts_as_loopback), and every way refuses through
# `open_web_ui_refusal`, so the other six pairs ran the same code again; `*` goes to plain Locust,
# which alone turns it into its own every-interface value ("") before vllm-load sees it
@pytest.mark.parametrize(
    "how, address", [("vllm-load run", "0.0.0.0"), ("vllm-load master", "::"), ("locust", "*")]
)
def test_a_web_ui_beyond_loopback_without_a_login_is_one_clear_error(sim, how, address, tmp_path):
    port = free_port()
    args = ("--web-host", address, "--web-port", str(port), *SMALL, "--out", str(tmp_path / "r"))
    if how == "locust":
        cmd = locust("--host", sim.url, *args)
    else:
        cmd = vllm_load(how.split()[1], "--host", sim.url, "--web", *args)
    proc = start(cmd)
    try:
        output, _ = proc.communicate(timeout=60)
    finally:
        end(proc)
    errors = [line for line in output.splitlines() if "error" in line.lower()]
    assert proc.returncode == 2, output[-2000:]
    assert len(errors) == 1 and "--web-login" in errors[0], output[-2000:]
    assert "Traceback" not in output and not listening(port)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("how", ["vllm-load run", "locust"])
@pytest.mark.parametrize("protection", ["--web-login", "--web-insecure-no-login"])
def test_a_login_or_the_loud_opt_out_lets_it_listen_beyond_loopback(sim, how, protection, tmp_path):
    port = free_port()
    args = ("--web-host", "0.0.0.0", "--web-port", str(port), *SMALL, "--out", str(tmp_path / "r"))
    if how == "locust":
        cmd = locust("--host", sim.url, protection, *args)
    else:
        cmd = vllm_load("run", "--host", sim.url, "--web", protection, *args)
    proc = start(cmd, env={PASSWORD_ENV: "pw-bind-test-1f2e"})
    try:
        assert wait_listening(port, proc) == {"0.0.0.0"}
    finally:
        output = end(proc)
    if protection == "--web-insecure-no-login":  # said loudly
        assert "WITHOUT A LOGIN" in output, output[-2000:]
    else:
        assert "WITHOUT A LOGIN" not in output, output[-2000:]


def test_what_counts_as_loopback():
    for address in ("127.0.0.1", "127.3.4.5", "localhost", "::1", "[::1]", "LOCALHOST"):
        assert is_loopback(address), address
    for address in ("", "*", "0.0.0.0", "::", "10.0.0.5", "myhost", "localhost.evil.example"):
        assert not is_loopback(address), address
    assert open_web_ui_refusal("127.0.0.1", False, False) is None
    assert open_web_ui_refusal("0.0.0.0", True, False) is None
    assert open_web_ui_refusal("0.0.0.0", False, True) is None
    refusal = open_web_ui_refusal("", False, False)
    assert refusal and "every interface" in refusal and "--web-login" in refusal
