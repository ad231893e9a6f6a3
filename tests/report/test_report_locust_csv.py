"""Acceptance: a tiny hand-written FastHttpUser locustfile, run by plain
`locust --headless --csv PREFIX --csv-full-history` through stepped user counts against the
simulator, turns into a report with a saturation point, labelled as coming from Locust's
aggregates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from support.runhelpers import run_vllm_load

from vllm_load.sim.child import SimulatorProcess

STEPS = (1, 2, 4, 8)
HOLD_S = 6

LOCUSTFILE = f"""
from locust import FastHttpUser, LoadTestShape, task

STEPS = {STEPS!r}
HOLD_S = {HOLD_S}


class Completer(FastHttpUser):
    @task
    def complete(self):
        body = {{"model": "sim-llama-8b", "prompt": "Tell me about rivers.", "max_tokens": 24,
                "ignore_eos": True}}
        with self.client.post("/v1/completions", json=body, catch_response=True) as resp:
            if resp.status_code == 200:  # Locust's response length: the tokens generated
                resp.request_meta["response_length"] = resp.json()["usage"]["completion_tokens"]


class Steps(LoadTestShape):
    def tick(self):
        step = int(self.get_run_time() // HOLD_S)
        return (STEPS[step], 100) if step < len(STEPS) else None
"""


def run_locust(locustfile: str, host: str, prefix: str, timeout: float) -> None:
    """Plain Locust, headless, in its own session; killed by its id if it overruns."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", locustfile, "--headless", "--host", host]
        + ["--csv", prefix, "--csv-full-history", "--only-summary"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"locust ran over {timeout} s:\n{out[-3000:]}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out[-3000:]


def test_plain_locust_csvs_turn_into_a_report_with_a_saturation_point(tmp_path):
    locustfile = tmp_path / "tiny.py"
    locustfile.write_text(LOCUSTFILE, encoding="utf-8")
    prefix = str(tmp_path / "csv" / "tiny")
    # two sequences at a time: throughput stops growing past 2 users
    with SimulatorProcess("--max-num-seqs", "2") as sim:
        run_locust(str(locustfile), sim.url, prefix, timeout=len(STEPS) * HOLD_S + 30)
    out = str(tmp_path / "report" / "tiny.html")
    proc = run_vllm_load("report", prefix, "--locust-length", "tokens", "-o", out, "--quiet")
    assert "from Locust's aggregates" in proc.stdout

    with open(out.replace(".html", ".summary.json"), encoding="utf-8") as fh:
        summary = json.load(fh)
    assert summary["source"] == "locust_csv" and summary["percentiles_approximate"] is True
    assert "ttft" in summary["not_available"]
    (series,) = summary["series"]
    levels = {lv["value"]: lv for lv in series["levels"]}
    assert sorted(levels) == list(STEPS)
    tok = {u: lv["output_tok_per_s_mean"] for u, lv in levels.items()}
    req = {u: lv["req_per_s_mean"] for u, lv in levels.items()}
    # 24 tokens a response, every response counted; 2 users do about twice what 1 does
    assert all(abs(tok[u] / req[u] - 24) < 0.5 for u in STEPS), (tok, req)
    assert 1.6 < tok[2] / tok[1] < 2.4, tok
    assert all(lv["success_rate_mean"] == 1.0 for lv in levels.values())
    for u in STEPS:  # the response time grows past saturation: requests wait for a slot
        assert levels[u]["e2e_p99_mean"] > 0 and levels[u]["e2e_mean_mean"] > 0
    assert levels[8]["e2e_mean_mean"] > 2.5 * levels[2]["e2e_mean_mean"], levels
    sat = series["saturation"]
    assert sat["saturated"] is True, sat
    assert sat["saturation_point"]["value"] in (2, 4), sat
    assert summary["throughput"]["column"] == "output_tok_per_s"
    # every level, the last included, measured over the same share of its plateau
    (run,) = summary["runs"]
    windows = [lv["window_s"] for lv in run["levels"]]
    assert max(windows) - min(windows) <= 1.0, windows

    with open(out, encoding="utf-8") as fh:
        html = fh.read()
    header = html[: html.index('<section id="findings">')]
    assert "From Locust's aggregates" in header and "approximate" in header
    assert "TTFT" in header  # named as not available
    assert "Saturation point:</strong> ~" in html
    for chart in ("throughput", "latency", "tradeoff", "timeline-tiny"):
        assert f'id="chart-{chart}"' in html
    with open(out.replace(".html", ".md"), encoding="utf-8") as fh:
        markdown = fh.read()
    assert "**From Locust's aggregates.**" in markdown and "Saturation point: ~" in markdown
