"""The web UI's LLM view in headless Chromium (Debian's chromium + chromium-driver, driven by selenium).

A person's path through the UI: `vllm-load run --web` against the simulator, Locust's page
opened in the browser, the test started by clicking *Start*, then the LLM tab of Locust's UI
and the `/llm` page must both show the current level as it moves on and a total tokens/s
above zero; the test is stopped with the UI's *Stop* button. A screenshot of each view is kept
in test-artifacts/ for people to look at.

Locust runs only as a child process (never imported here); selenium uses the Debian driver
and browser given explicitly, with SE_OFFLINE so selenium-manager never downloads anything.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest
from support import ROOT
from support.runhelpers import stop_group

from vllm_load.sim.process import SimulatorProcess, free_port

ARTIFACTS = os.path.join(ROOT, "test-artifacts")
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)
# each level lasts LEVEL_SECONDS (the time cap; far more requests are asked for than can finish),
# long enough to look at a level in both views, short enough to see the level change
LEVEL_SECONDS = 10
RUN_ARGS = (
    "--levels",
    "2,4",
    "--input-tokens",
    "128",
    "--output-tokens",
    "8",
    "--warmup-requests",
    "2",
    "--requests-per-level",
    "1000000",
    "--level-time-cap",
    str(LEVEL_SECONDS),
    "--metrics-interval",
    "0",
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)),
        reason="Debian's chromium and chromium-driver are not installed (.ci/run installs them as root)",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("selenium") is None,
        reason="selenium is not installed (pip install -e '.[test]')",
    ),
]


def wait_http(url: str, proc: subprocess.Popen, log_path: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"vllm-load run --web exited {proc.returncode}:\n{read(log_path)[-3000:]}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise AssertionError(
        f"the web UI did not answer {url} within {timeout} s:\n{read(log_path)[-3000:]}"
    )


def read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def terminate(proc: subprocess.Popen) -> None:
    """SIGTERM (vllm-load forwards it: Locust closes the run and quits), SIGKILL to the group if it lingers."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
            pass
    stop_group(proc)


def number(text: str) -> float:
    """A figure as the UI prints it (toLocaleString: "12,345.6")."""
    cleaned = text.replace(",", "").replace("\u202f", "").replace("\xa0", "").strip()
    return float(cleaned) if re.fullmatch(r"-?\d+(\.\d+)?", cleaned) else float("nan")


def new_browser(profile_dir: str):
    os.environ["SE_OFFLINE"] = (
        "true"  # selenium-manager: never look anything up or download a driver
    )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def llm_tab_rows(driver) -> list[dict[str, str]]:
    """The LLM tab's table as {column title: cell text} per row (empty while it is not rendered)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        for table in driver.find_elements(By.TAG_NAME, "table"):
            titles = [th.text.strip() for th in table.find_elements(By.CSS_SELECTOR, "thead th")]
            if "Total tok/s" not in titles or "Level" not in titles:
                continue
            rows = []
            for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr"):
                cells = [td.text.strip() for td in tr.find_elements(By.TAG_NAME, "td")]
                if len(cells) == len(titles):
                    rows.append(dict(zip(titles, cells)))
            return rows
    except StaleElementReferenceException:  # React re-rendered the table while we read it
        pass
    return []


def current_level_row(driver, level: int):
    for row in llm_tab_rows(driver):
        if row["Level"] == f"{level} (current)" and number(row["Total tok/s"]) > 0:
            return row
    return None


def llm_page_state(driver):
    from selenium.webdriver.common.by import By

    return (
        driver.find_element(By.ID, "level").text,
        number(driver.find_element(By.ID, "totps").text),
        number(driver.find_element(By.ID, "tokps").text),
    )


def test_llm_view_in_chromium_after_starting_from_the_ui(tmp_path):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    os.makedirs(ARTIFACTS, exist_ok=True)
    shots = {name: os.path.join(ARTIFACTS, name) for name in ("webui-llm.png", "webui-llm-tab.png")}
    for shot in shots.values():
        if os.path.exists(shot):
            os.remove(shot)
    log_path = str(tmp_path / "run.log")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with SimulatorProcess("--time-scale", "0.02") as sim, open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vllm_load",
                "run",
                "--host",
                sim.url,
                "--web",
                "--web-host",
                "127.0.0.1",
                "--web-port",
                str(port),
                *RUN_ARGS,
                "--out",
                str(tmp_path / "runs"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        driver = None
        try:
            wait_http(base + "/", proc, log_path)
            driver = new_browser(tempfile.mkdtemp(prefix="chromium-", dir=tmp_path))
            wait = lambda seconds: WebDriverWait(driver, seconds, poll_frequency=0.25)  # noqa: E731

            def explain(what: str) -> str:
                return f"{what}\n--- vllm-load\n{read(log_path)[-3000:]}\n--- page\n{driver.page_source[-4000:]}"

            # 1. Locust's start form: with the stepped shape, users and spawn rate are the shape's
            #    (their fields are disabled); Start is the form's submit button
            driver.get(base + "/")
            start = wait(20).until(
                lambda d: d.find_element(By.CSS_SELECTOR, "form button[type=submit]")
            )
            assert start.text.strip().upper() == "START", explain(
                f"unexpected submit button {start.text!r}"
            )
            start.click()

            # 2. the LLM tab of Locust's UI: wait for the second level to be current, with tokens/s
            try:
                tab = wait(20).until(
                    lambda d: next(
                        (
                            t
                            for t in d.find_elements(By.CSS_SELECTOR, "[role=tab]")
                            if t.text.strip().upper() == "LLM"
                        ),
                        None,
                    )
                )
            except TimeoutException:
                raise AssertionError(explain("no LLM tab after Start")) from None
            tab.click()
            try:
                row = wait(LEVEL_SECONDS + 25).until(lambda d: current_level_row(d, 1))
            except TimeoutException:
                raise AssertionError(
                    explain(
                        f"the LLM tab never showed level 1 as current with tokens/s: "
                        f"{llm_tab_rows(driver)}"
                    )
                ) from None
            assert row["Users"] == "4" and number(row["Output tok/s"]) > 0, row
            levels_shown = [r["Level"] for r in llm_tab_rows(driver)]
            assert levels_shown[0] == "0", (
                levels_shown
            )  # the finished first level stays in the table
            driver.save_screenshot(shots["webui-llm-tab.png"])

            # 3. the /llm page: current level, tokens/s and the chart, from /llm/stats
            driver.get(base + "/llm")
            try:
                level_text, total, output = wait(10).until(
                    lambda d: (s := llm_page_state(d))[0] == "Level 1: 4 users" and s[1] > 0 and s
                )
            except TimeoutException:
                raise AssertionError(
                    explain(f"the /llm page showed {llm_page_state(driver)}")
                ) from None
            assert total > output > 0, (level_text, total, output)
            assert driver.find_elements(By.CSS_SELECTOR, "#chart polyline"), explain(
                "no tokens/s chart"
            )
            assert driver.find_elements(By.CSS_SELECTOR, "#levels tbody tr.current"), explain(
                "no current row"
            )
            driver.save_screenshot(shots["webui-llm.png"])

            # 4. stop the test from the UI: Locust's status goes to STOPPED and the LLM page says so
            driver.get(base + "/")
            stop = wait(20).until(
                lambda d: next(
                    (
                        b
                        for b in d.find_elements(By.TAG_NAME, "button")
                        if b.text.strip().upper() == "STOP"
                    ),
                    None,
                )
            )
            stop.click()
            wait(15).until(lambda d: "STOPPED" in d.find_element(By.TAG_NAME, "body").text.upper())
            driver.get(base + "/llm")
            wait(10).until(lambda d: llm_page_state(d)[0].endswith("(stopped)"))
        finally:
            if driver is not None:
                driver.quit()
            terminate(proc)
    for shot in shots.values():
        assert os.path.getsize(shot) > 10_000, shot  # a rendered page, not an empty image
    assert "Traceback" not in read(log_path), read(log_path)[-3000:]
