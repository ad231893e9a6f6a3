"""The web UI's LLM view in headless Chromium (Debian's chromium + chromium-driver, driven by selenium).

A person's path through the UI: `vllm-load run --web --web-login` against the simulator, the
login page, Locust's page, the test started by clicking *Start*; then in the LLM tab of
Locust's UI the charts' lines must grow, with axis labels and units, a mark at each level's
start (with its users) and the current level shaded, under them Locust's table of the levels;
Locust's header must show the current level's users at both levels; the `/llm` page must show
the same charts; the test is stopped with the UI's *Stop* button; then, no level current, the
persona tab draws its charts and the charts take Locust's dark theme. Screenshots of each view are kept in test-artifacts/ for people to look at.

Locust runs only as a child process (never imported here); selenium uses the Debian driver
and browser given explicitly, with SE_OFFLINE so selenium-manager never downloads anything.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest
from support import ROOT
from support.browser import BROWSER_MARKS, click_start, labelled, log_in, new_browser
from support.runhelpers import start_web_run, terminate

from vllm_load.sim.child import SimulatorProcess, free_port
from vllm_load.web.auth import PASSWORD_ENV

ARTIFACTS = os.path.join(ROOT, "test-artifacts")
# each level lasts LEVEL_SECONDS (the time cap; far more requests are asked for than can finish),
# long enough to look at a level in both views, short enough to see the level change
# (beside other tests' load, at a load average of ~28 on 2 cores, the browser's steps took up to
# 55 s of the last level: at 30 s, 3 runs of 5 ended on the cap before the browser was done;
# the steps that need a current level now come first, the views of a stopped run after)
LEVEL_SECONDS = 40
#: how often Locust's UI asks for /stats/requests
UI_POLL_S = 2.0
LEVEL_USERS = (2, 4)
# the simulator's pace: a request ~0.1 s, enough for every chart's lines at a fifth of the
# requests a second of 0.02 (100-150 a second there, which beside other tests' load left the
# load process waiting 0.5-0.7 s a second for a CPU)
SIM_TIME_SCALE = "0.1"
PASSWORD = "pw-browser-3f9d2c"
RUNNING = ("spawning", "running")  # Locust's states of a test that runs
USER = "tester"
SHOTS = ("webui-llm-tab.png", "webui-llm-personas.png", "webui-llm-tab-dark.png", "webui-llm.png")
UNITS = {"tokens": "tok/s", "ttft": "ms", "itl": "ms", "flight": "requests", "errors": "errors/s"}
PERSONA_UNITS = {
    "persona-tokens": "tok/s",
    "persona-ttft": "ms",
    "persona-itl": "ms",
    "persona-errors": "errors/s",
}
#: the user class of `vllm-load run`'s default locustfile: the one persona of this test
PERSONA = "ClosedLoopUser"
RUN_ARGS = (
    "--levels",
    ",".join(map(str, LEVEL_USERS)),
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

pytestmark = BROWSER_MARKS


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


def number(text: str) -> float:
    """A figure as the UI prints it (toLocaleString: "12,345.6")."""
    cleaned = text.replace(",", "").replace("\u202f", "").replace("\xa0", "").strip()
    return float(cleaned) if re.fullmatch(r"-?\d+(\.\d+)?", cleaned) else float("nan")


# the LLM tab's table and Locust's header, read in the page in one call: a read is one step of
# the page's script, so React cannot re-render them under it, and the two are of one render (read
# cell by cell, ~45 driver calls, a busy machine's read could outlast the UI's 2 s re-render and
# came back empty on a stale element: beside other tests' load a level current for its whole 18 s
# was never seen; read apart, a level's change between them paired level 0 with level 1's users)
PAGE_STATE = """
const header = document.querySelector('header');
const rows = (() => {
  for (const table of document.querySelectorAll('table')) {
    const titles = [...table.querySelectorAll('thead th')].map(th => th.innerText.trim());
    if (!titles.includes('Total tok/s') || !titles.includes('Level')) continue;
    return [...table.querySelectorAll('tbody tr')]
      .map(tr => [...tr.querySelectorAll('td')].map(td => td.innerText.trim()))
      .filter(cells => cells.length === titles.length)
      .map(cells => Object.fromEntries(titles.map((title, i) => [title, cells[i]])));
  }
  return [];
})();
return [rows, header ? header.innerText : ''];
"""


def llm_tab_rows(driver) -> list[dict[str, str]]:
    """The LLM tab's table as {column title: cell text} per row (empty while it is not rendered)."""
    return driver.execute_script(PAGE_STATE)[0]


def current_of(rows: list[dict[str, str]]) -> tuple[int, int] | None:
    """(level, users) of the row the LLM tab's table marks current."""
    for row in rows:
        if row["Level"].endswith("(current)"):
            return int(row["Level"].split()[0]), int(row["Users"])
    return None


def current_level(driver) -> tuple[int, int] | None:
    return current_of(llm_tab_rows(driver))


def users_in(header: str) -> int | None:
    """The user count in Locust's header text (its "Users" label, then the figure)."""
    lines = [line.strip() for line in header.split("\n") if line.strip()]
    if "Users" in lines and lines.index("Users") + 1 < len(lines):
        value = number(lines[lines.index("Users") + 1])
        return int(value) if value == value else None
    return None


def header_users(driver) -> int | None:
    return users_in(driver.execute_script(PAGE_STATE)[1])


def level_and_header(driver, within: float = 2.0) -> tuple[tuple[int, int] | None, int | None]:
    """The table's current level and the header's users, of one render; read again while the
    header shows no figure (between two renders, which a busy machine makes likely), for up to
    `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        rows, header = driver.execute_script(PAGE_STATE)
        if (users := users_in(header)) is not None or time.monotonic() >= deadline:
            return current_of(rows), users
        time.sleep(0.05)


# what the charts show, read in the page: per chart its lines' points, axis labels and marks
CHARTS_STATE = """
const out = {};
for (const card of document.querySelectorAll(arguments[0] + ' .vl-chart')) {
  const q = s => [...card.querySelectorAll(s)];
  out[card.dataset.chart] = {
    points: Object.fromEntries(q('path.vl-line').map(p => [p.dataset.series, +p.dataset.points])),
    yLabel: q('.vl-y-label').map(t => t.textContent).join(),
    xLabel: q('.vl-x-label').map(t => t.textContent).join(),
    xTicks: q('.vl-x-tick').map(t => t.textContent),
    yTicks: q('.vl-tick:not(.vl-x-tick)').map(t => t.textContent),
    marks: q('g.vl-mark[data-kind=start] text').map(t => t.textContent),
    current: q('rect.vl-current').length,
    legend: q('.vl-legend-item').map(t => t.textContent),
    background: getComputedStyle(card).backgroundColor,
  };
}
return out;
"""


def charts(driver, root: str) -> dict:
    return driver.execute_script(CHARTS_STATE, root)


def runner_state(driver) -> str:
    """Locust's state as its /stats/requests answers now (the runner's, read at each request)."""
    return driver.execute_script(
        "return fetch('/stats/requests').then(r => r.json()).then(j => j.state)"
    )


def skip_if_ended(driver, started: float, what: str, log_path: str) -> None:
    """Skip, saying so, where Locust says the test no longer runs because its last level ended
    on its cap (the run's log says so), LEVEL_SECONDS after it became current (at `started`),
    before the browser's steps were done, which a busy machine's slow browser makes possible;
    a test that ended for any other reason fails."""
    if (ran := runner_state(driver)) not in RUNNING:
        took = time.monotonic() - started
        assert "level 1 ended (time_cap)" in read(log_path), f"{what}; Locust {ran}"
        pytest.skip(
            f"{what}: the last level ended on its {LEVEL_SECONDS} s cap ({took:.1f} s after it "
            f"became current, Locust {ran}) before the browser's steps were done"
        )


def check_charts(
    state: dict,
    levels_started: int,
    units: dict = UNITS,
    driver=None,
    started: float = 0.0,
    log_path: str = "",
    running: bool = True,
) -> None:
    """Every chart with its unit, times, a mark per level started with its users, the current
    level shaded: while the test runs. The last level ends at its time cap, LEVEL_SECONDS after
    it started; a busy machine can slow the browser's steps past it, and the page then rightly
    shades no level: skipped, with Locust's own state and the time, where the test has stopped."""
    assert set(state) == set(units), state.keys()
    for key, chart in state.items():
        assert chart["yLabel"] == units[key], (key, chart)
        assert chart["xLabel"].startswith("time"), (key, chart)
        assert chart["xTicks"] and all(re.search(r"\d:\d\d:\d\d", t) for t in chart["xTicks"]), (
            chart
        )
        assert len(chart["yTicks"]) >= 3, chart
        expected = [f"L{i} · {LEVEL_USERS[i]} users" for i in range(levels_started)]
        assert chart["marks"][:levels_started] == expected, (key, chart["marks"])
        assert chart["legend"], chart
    if not running:  # stopped: no level is current
        assert all(chart["current"] == 0 for chart in state.values()), state
        return
    unshaded = [key for key, chart in state.items() if chart["current"] != 1]
    if unshaded and driver is not None:
        skip_if_ended(driver, started, f"no current level shaded in {unshaded}", log_path)
    assert not unshaded, {key: state[key] for key in unshaded}


def test_llm_charts_in_chromium_after_starting_from_the_ui(tmp_path):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    os.makedirs(ARTIFACTS, exist_ok=True)
    shots = {name: os.path.join(ARTIFACTS, name) for name in SHOTS}
    for shot in shots.values():
        if os.path.exists(shot):
            os.remove(shot)
    log_path = str(tmp_path / "run.log")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with SimulatorProcess("--time-scale", SIM_TIME_SCALE) as sim, open(log_path, "w") as log:
        proc = start_web_run(
            sim.url,
            port,
            "--web-host",
            "127.0.0.1",
            "--web-login",
            "--web-user",
            USER,
            *RUN_ARGS,
            "--out",
            str(tmp_path / "runs"),
            env={PASSWORD_ENV: PASSWORD},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        driver = None
        try:
            wait_http(base + "/login", proc, log_path)
            driver = new_browser(tempfile.mkdtemp(prefix="chromium-", dir=tmp_path))
            wait = lambda seconds: WebDriverWait(driver, seconds, poll_frequency=0.25)  # noqa: E731

            def explain(what: str) -> str:
                return f"{what}\n--- vllm-load\n{read(log_path)[-3000:]}\n--- page\n{driver.page_source[-4000:]}"

            # 1. --web-login: Locust's login page, our account
            log_in(driver, base, USER, PASSWORD)

            # 2. Locust's start form: with the stepped shape, users and spawn rate are the shape's
            #    (their fields are disabled); Start is the form's submit button
            click_start(driver)

            # 3. the LLM tab of Locust's UI: its charts above Locust's table of the levels
            try:
                tab = labelled(driver, "[role=tab]", "LLM")
            except TimeoutException:
                raise AssertionError(explain("no LLM tab after Start")) from None
            tab.click()
            tab_charts = "#vllm-load-charts"
            try:
                first = wait(20).until(
                    lambda d: (
                        (c := charts(d, tab_charts)).get("tokens", {}).get("points", {})
                        and c["tokens"]["points"]["total_tok_per_s"] >= 3
                        and c
                    )
                )
            except TimeoutException:
                raise AssertionError(
                    explain(f"no charts in the LLM tab: {charts(driver, tab_charts)}")
                ) from None

            # 4. at each level, Locust's header shows that level's users as soon as the LLM table
            #    (in the same /stats/requests answer) shows the level current, or at the next of
            #    the UI's polls, 2 s apart, where that answer fell between the level's start and
            #    its users' spawning (30 ms quiet; a run at load 2.5 showed level 1 current beside
            #    2 users, 2026-11-30); then it keeps showing them. (Locust's memoized answer had
            #    the count up to 2 s older than the table, so the previous level's for a poll or
            #    two: tests/web/test_llm_stats.py holds that the count is the runner's, as of now)
            for level, users in enumerate(LEVEL_USERS):
                try:
                    wait(LEVEL_SECONDS + 20).until(lambda d: current_level(d) == (level, users))
                except TimeoutException:
                    raise AssertionError(
                        explain(f"level {level} never current: {llm_tab_rows(driver)}")
                    ) from None
                last_level_at = time.monotonic()
                try:
                    wait(UI_POLL_S + 1.5).until(lambda d: header_users(d) == users)
                except TimeoutException:
                    raise AssertionError(
                        explain(f"level {level}: header users {header_users(driver)}, not {users}")
                    ) from None
                seen = []
                for _ in range(6):
                    time.sleep(0.5)
                    current, header = level_and_header(driver)
                    if current == (level, users):
                        seen.append(header)
                assert seen and set(seen) == {users}, (level, users, seen)

            # 5. the lines grew, every chart has its units, times and both levels' marks
            later = charts(driver, tab_charts)
            check_charts(
                later, levels_started=2, driver=driver, started=last_level_at, log_path=log_path
            )
            for key, chart in later.items():
                for series, points in chart["points"].items():
                    assert points > first[key]["points"][series] >= 1, (
                        key,
                        series,
                        points,
                        first[key],
                    )
            # a tooltip names the time, the level and each line's figure; a legend name hides its line
            tokens = driver.find_element(By.CSS_SELECTOR, f"{tab_charts} [data-chart=tokens]")
            ActionChains(driver).move_to_element(tokens.find_element(By.TAG_NAME, "svg")).perform()
            tip = wait(5).until(lambda d: tokens.find_element(By.CLASS_NAME, "vl-tip").text)
            assert re.search(r"\d:\d\d:\d\d.*level [01] \([24] users\)", tip), tip
            assert "Total tok/s: " in tip and "Output tok/s: " in tip and "tok/s" in tip, tip
            tokens.find_element(
                By.CSS_SELECTOR, ".vl-legend-item[data-series=output_tok_per_s]"
            ).click()
            wait(5).until(
                lambda d: set(charts(d, tab_charts)["tokens"]["points"]) == {"total_tok_per_s"}
            )
            tokens.find_element(
                By.CSS_SELECTOR, ".vl-legend-item[data-series=output_tok_per_s]"
            ).click()
            ActionChains(driver).move_to_element(tab).perform()  # (no tooltip in the screenshot)
            wait(5).until(lambda d: len(charts(d, tab_charts)["tokens"]["points"]) == 2)
            rows = llm_tab_rows(driver)
            if [r["Level"] for r in rows] != ["0", "1 (current)"]:
                skip_if_ended(driver, last_level_at, f"the LLM tab's levels {rows}", log_path)
            assert [r["Level"] for r in rows] == ["0", "1 (current)"], rows
            assert number(rows[1]["Output tok/s"]) > 0, rows
            driver.save_screenshot(shots["webui-llm-tab.png"])

            def click_tab(title: str):
                found = [
                    t
                    for t in driver.find_elements(By.CSS_SELECTOR, "[role=tab]")
                    if t.text.strip().upper() == title.upper()
                ]
                assert found, explain(f"no {title} tab")
                found[0].click()

            # the steps that need the last level current come first, while it lasts (its time
            # cap ends it: LEVEL_SECONDS); the views of what the run drew come once it is stopped

            # 6. the /llm page: the same charts, the current level, the levels' table
            driver.get(base + "/llm")
            try:
                page = wait(10).until(
                    lambda d: (
                        d.find_element(By.ID, "level").text == "Level 1: 4 users"
                        and (c := charts(d, "#charts")).get("tokens", {}).get("points", {})
                        and c["tokens"]["points"]["output_tok_per_s"] > 5
                        and c
                    )
                )
            except TimeoutException:
                shown = charts(driver, "#charts")
                skip_if_ended(driver, last_level_at, f"the /llm page showed {shown}", log_path)
                raise AssertionError(explain(f"the /llm page showed {shown}")) from None
            check_charts(
                page, levels_started=2, driver=driver, started=last_level_at, log_path=log_path
            )
            assert page["tokens"]["background"] == "rgb(255, 255, 255)", page["tokens"]
            assert driver.find_elements(By.CSS_SELECTOR, "#levels tbody tr.current"), explain(
                "no current row"
            )
            driver.save_screenshot(shots["webui-llm.png"])

            # 7. stop the test from the UI: Locust's status goes to STOPPED and the LLM page says so
            driver.get(base + "/")
            try:
                stop = labelled(driver, "button", "STOP")
            except TimeoutException:
                skip_if_ended(driver, last_level_at, "no Stop button", log_path)
                raise AssertionError(explain("no Stop button while the test runs")) from None
            stop.click()
            wait(15).until(lambda d: "STOPPED" in d.find_element(By.TAG_NAME, "body").text.upper())
            driver.get(base + "/llm")
            wait(10).until(lambda d: d.find_element(By.ID, "level").text.endswith("(stopped)"))

            # 8. the persona tab: the same kind of charts, a line per persona (here the one); the
            #    test stopped, no level is current
            driver.get(base + "/")
            click_tab("LLM by persona")
            by_persona = "#vllm-load-persona-charts"
            try:
                personas = wait(10).until(
                    lambda d: (
                        (c := charts(d, by_persona))
                        .get("persona-tokens", {})
                        .get("points", {})
                        .get(PERSONA, 0)
                        >= 3
                        and c
                    )
                )
            except TimeoutException:
                raise AssertionError(
                    explain(f"no persona charts: {charts(driver, by_persona)}")
                ) from None
            check_charts(personas, levels_started=2, units=PERSONA_UNITS, running=False)
            for key, chart in personas.items():
                assert chart["legend"] == [PERSONA] and chart["points"][PERSONA] >= 3, (key, chart)
            assert not driver.find_elements(
                By.CSS_SELECTOR, tab_charts
            )  # one tab's charts at a time
            # its table names the one persona too (an empty table read as "no data")
            try:
                wait(10).until(
                    lambda d: any(
                        c.text.strip() == PERSONA
                        for c in d.find_elements(By.CSS_SELECTOR, "table td")
                    )
                )
            except TimeoutException:
                raise AssertionError(explain(f"no table row for {PERSONA}")) from None
            driver.save_screenshot(shots["webui-llm-personas.png"])
            click_tab("LLM")
            wait(10).until(lambda d: charts(d, tab_charts).get("tokens", {}).get("points"))

            # 9. Locust's dark theme (its switch stores the choice in localStorage.theme)
            driver.execute_script("localStorage.theme = 'dark'")
            driver.refresh()
            try:
                dark = wait(10).until(
                    lambda d: (
                        (c := charts(d, tab_charts)).get("tokens", {}).get("background")
                        == "rgb(39, 39, 42)"
                        and c
                    )
                )
            except TimeoutException:
                raise AssertionError(
                    explain(f"charts not dark: {charts(driver, tab_charts)}")
                ) from None
            check_charts(dark, levels_started=2, running=False)
            driver.save_screenshot(shots["webui-llm-tab-dark.png"])
            driver.execute_script("localStorage.theme = 'light'")

        finally:
            if driver is not None:
                driver.quit()
            terminate(proc)
    for shot in shots.values():
        assert os.path.getsize(shot) > 10_000, shot  # a rendered page, not an empty image
    assert "Traceback" not in read(log_path), read(log_path)[-3000:]
