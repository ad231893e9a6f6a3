"""In headless Chromium: the web UI works behind its login, refuses another page's POST, and
shows a user-chosen name as text (`vllm_load.web.guard`, `static/llm*.{js,html}`).

`vllm-load run --web --web-login --api-key KEY` on a locustfile whose second user class is
named `<img src=x onerror=...>`. Logged in, the browser opens a page of another origin on the
same machine (127.0.0.1, another port: the same site, so the session cookie goes along) whose
form posts to /swarm with that page's own address as the host: the UI answers 403 and no test
starts (nothing reaches that address). Then the test is started with the UI's own *Start*
button; the `/llm` page's persona table and a chart's tooltip show the class's name as text,
and its script never runs.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import tempfile
import textwrap
import threading
import time

import pytest
from support.browser import BROWSER_MARKS, click_start, log_in, new_browser, start_button
from support.runhelpers import start_web_run, stop_group, wait_for_ui

from vllm_load.sim.child import SimulatorProcess, free_port
from vllm_load.web.auth import PASSWORD_ENV

PASSWORD = "pw-guard-browser-8c2d"
USER = "tester"
KEY = "sk-browser-guard-44e1"
EVIL_NAME = '<img src=x onerror="window.vlXss=(window.vlXss||0)+1">'
LOCUSTFILE = textwrap.dedent(
    f"""
    from vllm_load.api import SteppedShape  # noqa: F401 (the shape steps --levels)
    from vllm_load.client.users import closed_loop  # (the module: its class is no user here)

    Plain = type("Plain", (closed_loop.ClosedLoopUser,), {{}})
    Evil = type({EVIL_NAME!r}, (closed_loop.ClosedLoopUser,), {{}})
    """
)
RUN_ARGS = (
    "--levels",
    "2",
    "--input-tokens",
    "64",
    "--output-tokens",
    "8",
    "--warmup-requests",
    "2",
    "--requests-per-level",
    "1000000",
    "--level-time-cap",
    "60",
    "--metrics-interval",
    "0",
)

pytestmark = [*BROWSER_MARKS]


class OtherSite:
    """Another origin on this machine: a page whose form posts to the UI's /swarm on load,
    naming itself as the target; it records every request it gets."""

    def __init__(self, ui: str) -> None:
        self.requests: list[str] = []
        seen = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append(f"GET {self.path}")
                own = f"http://127.0.0.1:{self.server.server_address[1]}"
                page = (
                    f'<form id="f" method="POST" action="{ui}/swarm">'
                    '<input name="user_count" value="1"><input name="spawn_rate" value="1">'
                    f'<input name="host" value="{own}"></form>'
                    "<script>document.getElementById('f').submit()</script>"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def do_POST(self):
                seen.append(f"POST {self.path} {self.headers.get('Authorization')}")
                self.send_response(404)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def body_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def test_login_works_a_cross_origin_post_is_refused_and_names_stay_text(tmp_path):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    locustfile = tmp_path / "evil_names.py"
    locustfile.write_text(LOCUSTFILE)
    log_path = tmp_path / "run.log"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    other = OtherSite(base)
    with SimulatorProcess("--time-scale", "0.02") as sim, open(log_path, "w") as log:
        proc = start_web_run(
            sim.url,
            port,
            "-f",
            str(locustfile),
            "--web-login",
            "--web-user",
            USER,
            "--api-key",
            KEY,
            *RUN_ARGS,
            "--out",
            str(tmp_path / "runs"),
            env={PASSWORD_ENV: PASSWORD},
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        driver = None
        try:
            wait_for_ui(base, proc)
            driver = new_browser(tempfile.mkdtemp(prefix="chromium-", dir=tmp_path))
            wait = lambda seconds: WebDriverWait(driver, seconds, poll_frequency=0.25)  # noqa: E731

            def explain(what: str) -> str:
                return f"{what}\n--- run\n{log_path.read_text()[-3000:]}\n--- page\n{driver.page_source[-3000:]}"

            # 1. the login page, then Locust's page
            log_in(driver, base, USER, PASSWORD)
            start_button(driver)  # Locust's page, behind the login

            # 2. another origin's page posts the start form, with the session cookie: refused
            driver.get(other.url + "/")
            try:
                wait(15).until(lambda d: "cross-origin request refused" in body_text(d))
            except TimeoutException:
                raise AssertionError(explain("the other page's POST was not refused")) from None
            driver.get(base + "/stats/requests")
            stats = json.loads(body_text(driver))
            assert stats["state"] == "ready", stats  # no test started
            time.sleep(2)
            assert other.requests == ["GET /"], other.requests  # no load, no key, went there

            # 3. the UI's own Start button starts the test
            driver.get(base + "/")
            click_start(driver)

            # 4. /llm: both personas in the table, the odd name as text, its script never run
            driver.get(base + "/llm")

            def persona_cells(d) -> list[str]:  # (read in one go: the table is redrawn)
                return d.execute_script(
                    "return [...document.querySelectorAll('#personas tbody td')]"
                    ".map(td => td.textContent)"
                )

            try:
                wait(40).until(lambda d: {"Plain", EVIL_NAME} <= set(persona_cells(d)))
            except TimeoutException:
                raise AssertionError(explain("no persona rows for both classes")) from None
            assert (
                driver.execute_script("return document.querySelectorAll('#personas img').length")
                == 0
            )
            chart = wait(20).until(
                lambda d: d.find_element(
                    By.CSS_SELECTOR, "#persona-charts [data-chart=persona-tokens]"
                )
            )
            legend_js = (
                "return [...document.querySelectorAll('#persona-charts [data-chart=persona-tokens]"
                " .vl-legend-item')].map(e => e.textContent)"
            )
            try:
                wait(20).until(lambda d: EVIL_NAME in d.execute_script(legend_js))
            except TimeoutException:
                raise AssertionError(
                    explain(f"legend {driver.execute_script(legend_js)}")
                ) from None
            ActionChains(driver).move_to_element(chart.find_element(By.TAG_NAME, "svg")).perform()
            tip = wait(10).until(lambda d: chart.find_element(By.CLASS_NAME, "vl-tip").text)
            assert EVIL_NAME in tip, tip
            assert not chart.find_elements(By.CSS_SELECTOR, ".vl-tip img, .vl-legend img")
            assert driver.execute_script("return window.vlXss === undefined"), explain("script ran")
        finally:
            if driver is not None:
                driver.quit()
            other.close()
            if proc.poll() is None:  # vllm-load forwards SIGTERM to its Locust
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    pass
            stop_group(proc)
    assert "Traceback" not in log_path.read_text(), log_path.read_text()[-3000:]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """The browser talks to 127.0.0.1 directly."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
