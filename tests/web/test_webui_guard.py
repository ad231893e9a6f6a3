"""The web UI refuses what another web page, or its own form, must not do (`vllm_load.web.guard`).

One `vllm-load run --web --api-key KEY` (no login, as the issue found it) against the
simulator, and a second address OTHER where a bare socket records whatever connects: the
issue's curl (a POST to /swarm from another origin, host OTHER) gets 403 and nothing reaches
OTHER; every state-changing route of Locust's UI refuses another origin; a name that is not an
address is refused (DNS rebinding); the UI's own form cannot send the key to OTHER, nor choose
a path; and the form, left as the UI shows it, still starts a test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest
import requests
from support.runhelpers import start_web_run, stop_group, wait_for_ui

from vllm_load.sim.child import SimulatorProcess, free_port

KEY = "sk-guard-5f1c0d9e"
SMALL = ("--levels", "2", "--input-tokens", "64", "--output-tokens", "8")
#: Locust's routes that change state (its web.py), and ours
STATE_CHANGING = ("/swarm", "/stop", "/stats/reset", "/user")


class Recorder:
    """A bare listening socket that keeps every byte sent to it (the load, or a key, going
    where it must not)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.received = b""
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(2)
            try:
                self.received += conn.recv(65536) or b"(a connection)"
            except OSError:
                self.received += b"(a connection)"
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    other = Recorder()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with SimulatorProcess("--time-scale", "0.02") as sim:
        proc = start_web_run(
            sim.url,
            port,
            "--api-key",
            KEY,
            *SMALL,
            "--out",
            str(out),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_for_ui(base, proc)
            yield base, sim.url, other, out
        finally:
            if proc.poll() is None:  # vllm-load forwards SIGTERM to the Locust it started
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    pass
            stop_group(proc)
            other.close()


def nothing_reached(other: Recorder, seconds: float = 2.0) -> None:
    time.sleep(seconds)  # a test started by a request begins sending within a second
    assert other.received == b"", other.received[:300]


def state(base: str) -> str:
    return requests.get(base + "/stats/requests", timeout=10).json()["state"]


@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl")
def test_the_issues_curl_gets_403_and_nothing_reaches_the_other_host(ui):
    base, _, other, _ = ui
    result = subprocess.run(
        [
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "POST",
            base + "/swarm",
            "-H",
            "Origin: http://evil.example",
            "-d",
            f"user_count=1&spawn_rate=1&host={other.url}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.stdout == "403", result
    nothing_reached(other)
    assert state(base) != "running"


@pytest.mark.parametrize("path", STATE_CHANGING)
@pytest.mark.parametrize("origin", ["http://evil.example", "null", "other port"])
def test_every_state_changing_route_refuses_another_origin(ui, path, origin):
    base, _, other, _ = ui
    if origin == "other port":  # a page on another port of this machine: same site, other origin
        origin = other.url
    body = (
        json.dumps({"user_class_name": "ClosedLoopUser", "host": other.url})
        if path == "/user"
        else f"user_count=1&spawn_rate=1&host={other.url}"
    )
    resp = requests.post(base + path, data=body, headers={"Origin": origin}, timeout=10)
    assert resp.status_code == 403 and "cross-origin" in resp.text, (resp.status_code, resp.text)
    assert other.received == b""


def test_another_origin_cannot_read_the_ui_either(ui):
    base, _, _, _ = ui
    for path in ("/", "/stats/requests", "/llm/stats", "/llm"):
        resp = requests.get(base + path, headers={"Origin": "http://evil.example"}, timeout=10)
        assert resp.status_code == 403 and "cross-origin" in resp.text, (path, resp.status_code)
    # the UI's own pages (same origin) are answered
    own = requests.get(base + "/llm/stats", headers={"Origin": base}, timeout=10)
    assert own.status_code == 200 and "levels" in own.json()


def test_without_login_the_ui_answers_only_to_its_address(ui):
    base, _, _, _ = ui
    port = base.rsplit(":", 1)[1]
    # a DNS name someone else controls, pointed at 127.0.0.1 (rebinding): refused
    for name in (f"evil.example:{port}", f"evil.example.:{port}", "attacker"):
        resp = requests.get(base + "/", headers={"Host": name}, timeout=10)
        assert resp.status_code == 403 and "no login" in resp.text, (name, resp.status_code)
    for name in (f"127.0.0.1:{port}", f"localhost:{port}"):
        assert requests.get(base + "/", headers={"Host": name}, timeout=10).status_code == 200


def test_the_form_cannot_send_the_key_to_another_host(ui):
    base, sim_url, other, _ = ui
    for form in (
        {"user_count": "1", "spawn_rate": "1", "host": other.url},
        {"host": other.url, "form_api_key": KEY},  # the configured key, typed again
        {"host": other.url + "/"},
    ):
        answer = requests.post(base + "/swarm", data=form, timeout=10).json()
        assert answer["success"] is False, (form, answer)
        assert f"goes only to {sim_url}" in answer["message"], answer
    resp = requests.post(
        base + "/user",
        data=json.dumps({"user_class_name": "ClosedLoopUser", "host": other.url}),
        timeout=10,
    )
    assert resp.status_code == 403 and f"goes only to {sim_url}" in resp.text
    nothing_reached(other)


@pytest.mark.parametrize(
    "field, value",
    [
        ("out", "{elsewhere}"),
        ("run_dir", "{elsewhere}/run"),
        ("dataset", "/etc/passwd"),
        ("tokenizer", "/etc"),
        ("meta_file", "/etc/passwd"),
        ("csv_prefix", "{elsewhere}/stats"),  # Locust's own files too
        ("html_file", "{elsewhere}/report.html"),
        ("logfile", "{elsewhere}/log"),
    ],
)
def test_the_form_cannot_choose_a_path(ui, field, value):
    base, sim_url, other, out = ui
    elsewhere = out.parent / "elsewhere"
    value = value.format(elsewhere=elsewhere)
    answer = requests.post(base + "/swarm", data={"host": sim_url, field: value}, timeout=10).json()
    assert answer["success"] is False and f"cannot set {field}" in answer["message"], answer
    time.sleep(0.5)
    assert not elsewhere.exists()


def test_the_form_shows_no_path_and_left_as_shown_starts_a_test(ui):
    base, sim_url, _, out = ui
    page = requests.get(base + "/", timeout=10).text
    template = json.loads(re.search(r"window\.templateArgs = (\{.*\})\s*$", page, re.M).group(1))
    shown = set(template["extra_options"])
    assert {"input_tokens", "levels", "form_api_key"} <= shown
    assert not shown & {"out", "run_dir", "dataset", "tokenizer", "meta_file"}, shown
    # every field the form shows, at the value it shows, plus Locust's own: accepted
    form = {name: shown_value(option["default_value"]) for name, option in shown_options(template)}
    form.update(host=sim_url, user_count="1", spawn_rate="1")
    answer = requests.post(base + "/swarm", data=form, timeout=10).json()
    assert answer["success"] is True, answer
    try:
        deadline = time.monotonic() + 30
        while not list(out.glob("*/*/requests.csv")):
            assert time.monotonic() < deadline, "the test started from the form wrote no run"
            time.sleep(0.2)
    finally:
        requests.post(base + "/stop", headers={"Origin": base}, timeout=10)


def shown_value(value) -> str:
    """A field's value as the form sends it."""
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def shown_options(template: dict):
    for name, option in template["extra_options"].items():
        if isinstance(option["default_value"], list):
            continue  # (a repeatable option: sent once per item, none here)
        yield name, option
