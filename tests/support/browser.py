"""Headless Chromium for the browser tests (Debian's chromium and chromium-driver, driven by
selenium): a browser with a profile of its own, and the marks that skip a test without them.
Selenium uses the driver and browser given explicitly, with SE_OFFLINE so selenium-manager
never downloads anything."""

from __future__ import annotations

import importlib.util
import os

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

#: a browser test's marks: `browser`, skipped where Chromium, its driver or selenium is missing
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
    """A headless Chromium with its profile in `profile_dir` (quit it when done)."""
    os.environ["SE_OFFLINE"] = "true"  # selenium-manager: never look anything up or download
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
