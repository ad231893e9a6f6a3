"""Headless Chromium for the web UI's browser tests (Debian's chromium + chromium-driver, driven
by selenium): the browser, the marks that skip a test without them, and reading the charts.

Selenium uses the driver and browser given explicitly, with SE_OFFLINE, so selenium-manager
never downloads anything.
"""

from __future__ import annotations

import importlib.util
import os
import re

import pytest

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
    "--window-size=1400,1800",
)

#: a browser test's marks: `browser`, and skipped without chromium, its driver or selenium
BROWSER_MARKS = [
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


def new_browser(profile_dir: str):
    os.environ["SE_OFFLINE"] = "true"  # selenium-manager: never look anything up or download
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def log_in(driver, base: str, user: str, password: str, timeout: float = 20.0) -> None:
    """Open the UI at `base` and sign in on its login page (`--web-login`)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(base + "/")
    WebDriverWait(driver, timeout, poll_frequency=0.25).until(
        lambda d: d.find_elements(By.NAME, "username")
    )
    driver.find_element(By.NAME, "username").send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()


def labelled(driver, css: str, label: str, timeout: float = 20.0):
    """The first element matching `css` whose text reads `label` (any case), once the page the
    driver is on has one; selenium's TimeoutException after `timeout` seconds."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.25).until(
        lambda d: next(
            (e for e in d.find_elements(By.CSS_SELECTOR, css) if e.text.strip().upper() == label),
            None,
        )
    )


def start_button(driver, timeout: float = 20.0):
    """Locust's *Start* (the start form's submit button), once the page the driver is on has it."""
    return labelled(driver, "form button[type=submit]", "START", timeout)


def click_start(driver, timeout: float = 20.0) -> None:
    """Press Locust's *Start* on the page the driver is on."""
    start_button(driver, timeout).click()


# one chart's drawing as the page shows it: each line's points (SVG x, y), the y axis' tick
# labels with their heights, and the x of each level's start mark
CHART_DRAWING = """
const card = document.querySelector(arguments[0] + ' .vl-chart[data-chart="' + arguments[1] + '"]');
if (!card) return null;
const lines = {};
for (const p of card.querySelectorAll('path.vl-line')) {
  lines[p.dataset.series] = [...p.getAttribute('d').matchAll(/[ML](-?[\\d.]+),(-?[\\d.]+)/g)]
    .map(m => [+m[1], +m[2]]);
}
return {
  lines,
  ticks: [...card.querySelectorAll('text.vl-tick:not(.vl-x-tick)')]
    .map(t => [t.textContent, +t.getAttribute('y')]),
  starts: [...card.querySelectorAll('g.vl-mark[data-kind=start] line')].map(l => +l.getAttribute('x1')),
};
"""


def tick_value(label: str) -> float:
    """A y-axis label as the charts print it (toLocaleString, or 12.5k, 1.2M)."""
    text = label.replace(",", "").replace("\u202f", "").replace("\xa0", "").strip()
    scale = {"k": 1e3, "M": 1e6}.get(text[-1:], 1.0)
    text = text[:-1] if scale != 1.0 else text
    if not re.fullmatch(r"-?\d+(\.\d+)?", text):
        raise ValueError(f"not a tick label: {label!r}")
    return float(text) * scale


def chart_lines(driver, root: str, chart: str) -> dict | None:
    """{"lines": {series: [(x, value), ...]}, "starts": [x, ...]} of one chart, the values read
    back from the drawing through its y axis' labels; None while it is not drawn."""
    drawing = driver.execute_script(CHART_DRAWING, root, chart)
    if not drawing or len(drawing["ticks"]) < 2:
        return None
    (label0, y0), (label1, y1) = drawing["ticks"][0], drawing["ticks"][-1]
    v0, v1 = tick_value(label0), tick_value(label1)
    if y1 == y0:
        return None
    per_pixel = (v1 - v0) / (y1 - y0)  # (a label sits at the same offset from its grid line)
    lines = {
        series: [(x, v0 + (y - y0) * per_pixel) for x, y in points]
        for series, points in drawing["lines"].items()
    }
    return {"lines": lines, "starts": drawing["starts"]}
