"""The HTML report rendered by headless Chromium (Debian's package): tables and every chart.

Chromium's own rendering is checked, not just our file: the DOM it builds (`--dump-dom`) must
hold the tables and one decoded image per chart, and its screenshot is kept in
test-artifacts/report.png for people to look at.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from PIL import Image, ImageStat
from support import ROOT
from support.reports import embedded_pngs, synthetic_runs

from vllm_load.report.render import build_report

ARTIFACTS = os.path.join(ROOT, "test-artifacts")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it as root)"
    ),
]


def chromium(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-extensions",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_report_renders_in_chromium_with_tables_and_every_chart(tmp_path):
    runs = synthetic_runs(tmp_path / "runs", 3)
    paths = build_report(runs, str(tmp_path / "report.html"), progress=False)
    url = "file://" + paths.html
    expected_charts = len(embedded_pngs(open(paths.html).read()))
    assert expected_charts == 7

    dom = chromium("--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'id="comparison-table"' in html
    assert html.count('class="levels-agg"') == 1 and html.count('class="levels-run"') == 3
    charts = re.findall(
        r'<figure id="chart-([^"]+)" class="chart"><img src="data:image/png;base64,', html
    )
    assert len(charts) == expected_charts
    assert {"throughput", "latency", "tradeoff"} <= set(charts)
    assert (
        sum(c.startswith("timeline-") for c in charts) == 3
        and sum(c.startswith("dist-") for c in charts) == 1
    )

    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "report.png")
    if os.path.exists(shot):
        os.remove(shot)
    result = chromium("--window-size=1280,3000", f"--screenshot={shot}", url)
    assert result.returncode == 0 and os.path.exists(shot), result.stderr[-2000:]
    image = Image.open(shot).convert("L")
    assert image.size == (1280, 3000)
    # a rendered page with charts has ink: far from a blank (uniform) screenshot
    assert ImageStat.Stat(image).stddev[0] > 20
