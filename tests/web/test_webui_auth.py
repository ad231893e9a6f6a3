"""`--web-login`: the web UI (Locust's pages and the LLM view) only after a username/password login.

Plain HTTP against `vllm-load run --web --web-login` on the simulator: every page and JSON
endpoint is refused without a login, a wrong user or password is refused, after five wrong
passwords even the right one waits, the right ones then open the UI and the LLM view, and a
test can then be started. The password comes only from
$VLLM_LOAD_WEB_PASSWORD, appears in no command line, file or output, and without it
`--web-login` is one clear error line (from `vllm-load run` and from Locust itself).
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import requests
from support import ROOT
from support.runhelpers import every_file_text, start_web_run, stop_group, wait_for_ui

from vllm_load.sim.child import SimulatorProcess, free_port
from vllm_load.web.auth import PASSWORD_ENV

PASSWORD = "pw-7c1e9a53f0d2-web"
USER = "tester"
SMALL = (
    "--levels",
    "2",
    "--input-tokens",
    "128",
    "--output-tokens",
    "8",
    "--requests-per-level",
    "10",
    "--warmup-requests",
    "2",
)


def env_without_password() -> dict:
    return {k: v for k, v in os.environ.items() if k != PASSWORD_ENV}


def descendant_command_lines(pid: int) -> list[str]:
    """The command lines of a process and all its descendants (vllm-load runs Locust in a process group of its own)."""
    parent_of, cmdline = {}, {}
    for stat_path in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat_path) as fh:
                fields = fh.read().rsplit(")", 1)[1].split()  # after "(comm)": state, ppid, ...
            with open(os.path.join(os.path.dirname(stat_path), "cmdline"), "rb") as fh:
                line = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, IndexError):
            continue
        child = int(stat_path.split("/")[2])
        parent_of[child], cmdline[child] = int(fields[1]), line
    family = {pid}
    while True:
        more = {child for child, parent in parent_of.items() if parent in family} - family
        if not more:
            return [cmdline[p] for p in family if p in cmdline]
        family |= more


def login(session: requests.Session, base: str, username: str, password: str) -> requests.Response:
    return session.post(
        base + "/login_submit",
        data={"username": username, "password": password},
        allow_redirects=False,
        timeout=10,
    )


@pytest.fixture(scope="module")
def sim():
    """One simulator for this file's tests: they judge the web UI, its login and what the run
    wrote, never the server's counters; a simulator's start is seconds of each test."""
    with SimulatorProcess("--time-scale", "0.02") as server:
        yield server


def test_web_ui_needs_the_login_and_the_password_stays_secret(tmp_path, sim):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_web_run(
        sim.url,
        port,
        "--web-login",
        "--web-user",
        USER,
        *SMALL,
        "--out",
        str(tmp_path / "runs"),
        env={PASSWORD_ENV: PASSWORD},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_ui(base, proc)
        # the password travels by environment only: no command line of the run or its Locust holds it
        command_lines = descendant_command_lines(proc.pid)
        assert any("locust" in line and "--web-login" in line for line in command_lines), (
            command_lines
        )
        assert not any(PASSWORD in line for line in command_lines)

        anonymous = requests.Session()
        get = lambda s, path: s.get(base + path, allow_redirects=False, timeout=10)  # noqa: E731
        for path in ("/", "/llm", "/stats/requests", "/llm/assets/llm-charts.js"):
            resp = get(anonymous, path)
            assert resp.status_code == 302 and resp.headers["Location"].endswith("/login"), (
                path,
                resp.status_code,
            )
        resp = get(anonymous, "/llm/stats")
        assert resp.status_code == 401 and resp.json() == {"error": "login required"}
        assert (
            anonymous.post(
                base + "/swarm", data={"host": sim.url}, allow_redirects=False, timeout=10
            ).status_code
            == 302
        )  # no test started without a login
        login_page = get(anonymous, "/login")
        assert (
            login_page.status_code == 200
            and '"username_password_callback": "/login_submit"' in login_page.text
        )

        for username, password in (
            (USER, "wrong"),
            (USER, ""),
            ("admin", PASSWORD),
            (USER, PASSWORD + "x"),
            (USER.upper(), PASSWORD),
        ):
            refused = requests.Session()
            resp = login(refused, base, username, password)
            assert resp.status_code == 302 and resp.headers["Location"].endswith("/login"), (
                username,
                password,
            )
            assert (
                "Invalid username or password" in get(refused, "/login").text
            )  # the page it is sent back to
            assert get(refused, "/llm/stats").status_code == 401, (username, password)
            assert get(refused, "/").status_code == 302

        # a login posted by another site's page is refused before it is looked at
        forged = requests.post(
            base + "/login_submit",
            data={"username": USER, "password": PASSWORD},
            headers={"Origin": "http://evil.example"},
            allow_redirects=False,
            timeout=10,
        )
        assert forged.status_code == 403 and "session" not in forged.cookies
        # five wrong passwords from this address: the next try (the right password too) is
        # turned away unchecked for a second (web.throttle), then checked again
        user = requests.Session()
        refused_at = time.monotonic()
        resp = login(user, base, USER, PASSWORD)
        assert resp.status_code == 302 and resp.headers["Location"].endswith("/login")
        assert "Too many failed logins: try again in 1 s" in get(user, "/login").text
        assert get(user, "/llm/stats").status_code == 401
        time.sleep(max(0.0, refused_at + 1.2 - time.monotonic()))
        resp = login(user, base, USER, PASSWORD)
        assert resp.status_code == 302 and resp.headers["Location"].endswith("/"), resp.headers
        assert get(user, "/").status_code == 200 and get(user, "/llm").status_code == 200
        # Locust's page carries the LLM tab's charts, served by the master behind the login
        assert '<script src="./llm/assets/llm-tab.js">' in get(user, "/").text
        for asset in ("llm-charts.js", "llm-tab.js", "llm.css"):
            resp = get(user, "/llm/assets/" + asset)
            assert resp.status_code == 200 and len(resp.content) > 500, asset
        assert get(user, "/llm/assets/view.py").status_code == 404
        stats = get(user, "/llm/stats")
        assert stats.status_code == 200 and stats.json()["current_level"] is None
        assert PASSWORD not in " ".join(f"{c.name}={c.value}" for c in user.cookies)

        # logged in, the UI drives a test: it runs and the LLM view follows it
        assert (
            user.post(base + "/swarm", data={"host": sim.url}, timeout=10).json()["success"] is True
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            levels = get(user, "/llm/stats").json()["levels"]
            if levels and levels[0]["finished"] >= 12:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(
                f"the test started from the UI did not run: {get(user, '/llm/stats').text}"
            )
        assert levels[0]["success_pct"] == 100.0
        deadline = time.monotonic() + 10  # a point is closed 2 s after its second
        while not (series := get(user, "/llm/stats").json()["series"])["t"]:
            assert time.monotonic() < deadline, series
            time.sleep(0.2)
        assert series["marks"][0]["users"] == 2, series
        newer = get(user, f"/llm/stats?since={series['t'][-1]}").json()["series"]
        assert all(t > series["t"][-1] for t in newer["t"]), (series["t"], newer["t"])
    finally:
        if proc.poll() is None:
            os.killpg(
                proc.pid, signal.SIGTERM
            )  # vllm-load forwards it: Locust closes the run, quits
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        stop_group(proc)
    output = proc.stdout.read()
    proc.stdout.close()
    run_json = glob.glob(str(tmp_path / "runs" / "*" / "*" / "run.json"))
    assert len(run_json) == 1, output[-3000:]
    with open(run_json[0]) as fh:
        assert json.load(fh)["model"]
    assert "refused a login" in output and "Traceback" not in output, output[-3000:]
    assert PASSWORD not in every_file_text(tmp_path) + output


@pytest.mark.parametrize("how", ["vllm-load", "locust"])
def test_web_login_without_the_password_is_one_clear_error(tmp_path, how, sim):
    if how == "vllm-load":
        cmd = [
            sys.executable,
            "-m",
            "vllm_load",
            "run",
            "--host",
            sim.url,
            "--web",
            "--web-login",
            "--web-port",
            str(free_port()),
            *SMALL,
            "--out",
            str(tmp_path / "runs"),
        ]
    else:  # the locustfile on its own refuses too, rather than serve a UI whose login cannot work
        cmd = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            os.path.join(ROOT, "locustfiles", "chat_stepped.py"),
            "--host",
            sim.url,
            "--web-login",
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(free_port()),
            *SMALL,
            "--out",
            str(tmp_path / "runs"),
        ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env_without_password(),
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            stop_group(proc)
    assert proc.returncode == 2, (proc.returncode, stdout[-2000:], stderr[-2000:])
    errors = [ln for ln in stderr.splitlines() if "error" in ln.lower()]
    assert len(errors) == 1 and PASSWORD_ENV in errors[0], stderr[-2000:]
    if how == "vllm-load":  # refused before anything starts: a single line, no run directory
        assert len([ln for ln in stderr.splitlines() if ln.strip()]) == 1, stderr
    assert not os.path.exists(tmp_path / "runs")


def test_web_login_needs_the_web_ui(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_load", "run", "--host", "http://127.0.0.1:9", "--web-login"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, PASSWORD_ENV: PASSWORD},
    )
    assert (
        proc.returncode == 2
        and proc.stderr.strip().count("\n") == 0
        and "use it with --web" in proc.stderr
    )
