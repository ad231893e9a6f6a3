"""A bad option or an unusable target is one line `vllm-load CMD: error: ...` and exit 2, never a
traceback, for every command that takes a target (and for `report` without its runs); the URL is
checked before anything is started or written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support import ROOT

from vllm_load.sim.child import free_port
from vllm_load.user_values import SettingsError, parse_host

BAD_HOSTS = {
    "notaurl": "is not a URL",
    "127.0.0.1:8000": "is not a URL",
    "http://": "names no host",
    "ftp://x": "has scheme ftp://",
    "http://127.0.0.1:8000/v1": "has a path",
    "http://127.0.0.1:99999": "Port out of range",
    "http://127.0.0.1:0": "has port 0",
    "http://[::1": "Invalid IPv6 URL",
    "http://a b:8000": "spaces",
    "http://user:secret@127.0.0.1:8000": "holds credentials",
}


def command(name: str, host: str, out: str) -> list[str]:
    """`vllm-load NAME` with `host` as its target and everything it writes under `out`."""
    extra = {
        "tune": ["--server-cmd", "true {a}", "--matrix", "a=1", "--ready-timeout", "1"],
        "campaign": ["--ready-timeout", "1", "--runs", "1"],
    }.get(name, [])
    return [sys.executable, "-m", "vllm_load", name, "--host", host, "--out", out, *extra]


def one_error_line(proc: subprocess.CompletedProcess, name: str, status: int = 2) -> str:
    """The single line the command printed, after checking its exit status (2: a usage error)
    and that it printed nothing more."""
    assert proc.returncode == status, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"vllm-load {name}: error: "), proc.stderr[
        -3000:
    ]
    return lines[0]


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT
    )


@pytest.mark.parametrize("host,message", BAD_HOSTS.items(), ids=list(BAD_HOSTS))
def test_parse_host_says_what_is_wrong(host, message):
    with pytest.raises(SettingsError) as caught:
        parse_host(host)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize(
    "host", ["http://127.0.0.1:8000", "https://gpu-host/", "http://[::1]:8000", "HTTP://H:1"]
)
def test_parse_host_takes_a_base_url_unchanged(host):
    assert parse_host(host) == host


#: through the command line: every bad host is the same SettingsError from parse_host (each
#: message is checked above), so three stand for them: parse_host's own word, urllib's error
#: passed on, and credentials that must not be echoed
CLI_BAD_HOSTS = ("notaurl", "http://[::1", "http://user:secret@127.0.0.1:8000")


@pytest.mark.parametrize("host", CLI_BAD_HOSTS)
def test_run_refuses_a_bad_host_in_one_line(tmp_path, host):
    line = one_error_line(run(command("run", host, str(tmp_path / "out"))), "run")
    assert "argument --host" in line and BAD_HOSTS[host] in line and "secret" not in line
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("name", ["master", "campaign", "tune", "validate-client"])
def test_every_command_refuses_a_bad_host_before_it_starts_anything(tmp_path, name):
    line = one_error_line(run(command(name, "notaurl", str(tmp_path / "out"))), name)
    assert "'notaurl' is not a URL" in line and "http://127.0.0.1:8000" in line
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("name", ["run", "master", "validate-client"])
def test_a_refused_connection_is_one_line_saying_what_to_do(tmp_path, name):
    host = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    line = one_error_line(run(command(name, host, str(tmp_path / "out"))), name)
    assert host in line and "Connection refused" in line
    assert "is the server running" in line


@pytest.mark.parametrize("name", ["campaign", "tune"])
def test_a_server_that_does_not_come_up_is_one_failure_line_saying_what_to_do(tmp_path, name):
    """Campaign waits for the server it (re)starts, tune starts one per configuration: a server
    that is not ready in time is a failure while running (exit 1) in both, not a usage error."""
    host = f"http://127.0.0.1:{free_port()}"  # nothing listens there ("true" exits at once)
    line = one_error_line(run(command(name, host, str(tmp_path / "out"))), name, status=1)
    assert host in line or "the server command exited" in line, line
    assert "run the same command again" in line


def test_locust_with_a_bad_host_is_one_error_line(tmp_path):
    proc = run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            os.path.join(ROOT, "locustfiles", "chat_stepped.py"),
            "--headless",
            "--host",
            "notaurl",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("vllm-load: error:")]
    assert len(errors) == 1 and "'notaurl' is not a URL" in errors[0], proc.stderr[-3000:]
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize(
    "argv,option",
    [
        (["run", "--host", "http://127.0.0.1:1", "--web", "--web-port", "99999"], "--web-port"),
        (
            ["master", "--host", "http://127.0.0.1:1", "--master-bind-port", "70000"],
            "--master-bind-port",
        ),
        (["worker", "--master-host", "127.0.0.1", "--master-port", "0"], "--master-port"),
    ],
    ids=["web-port", "master-bind-port", "master-port"],
)
def test_a_port_out_of_range_is_one_line(argv, option):
    line = one_error_line(run([sys.executable, "-m", "vllm_load", *argv]), argv[0])
    assert f"argument {option}: a port is a whole number from 1 to 65535" in line


@pytest.mark.parametrize(
    "argv",
    [["report", "MISSING"], ["validate-client", "--run", "MISSING"]],
    ids=["report", "validate-client-run"],
)
def test_a_missing_run_directory_is_one_line(tmp_path, argv):
    argv = [str(tmp_path / "nothing-here") if a == "MISSING" else a for a in argv]
    line = one_error_line(run([sys.executable, "-m", "vllm_load", *argv]), argv[0])
    assert str(tmp_path / "nothing-here") in line


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--cancel-share", "1.5", "--cancel-after", "2s"], "--cancel-share must be a share"),
        (["--cancel-share", "some", "--cancel-after", "2s"], "--cancel-share must be a share"),
        (["--cancel-share", "0.1", "--cancel-after", "soon"], "--cancel-after 'soon': no unit"),
    ],
    ids=["share-above-1", "share-not-a-number", "after-without-unit"],
)
def test_a_bad_cancellation_is_one_line_before_anything_starts(tmp_path, argv, words):
    cmd = [*command("run", "http://127.0.0.1:9", str(tmp_path)), *argv]
    assert words in one_error_line(run(cmd), "run")
    assert os.listdir(tmp_path) == []
