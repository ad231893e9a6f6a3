"""A reasoning model's live figures, against the simulator (`--reasoning-tokens 12`): once its
requests finish, the live JSON (`/llm/stats`, what the `/llm` page draws its tables from) names
TTFAT and reasoning-token columns and fills them, and Locust's page loaded then has them in its
LLM table, whose rows (`/stats/requests`) carry them. Without reasoning they are absent
(`test_webui_live_verdict.py`)."""

from __future__ import annotations

import json
import re
import subprocess
import time

import requests
from support.runhelpers import start_web_run, terminate, wait_for_ui

from vllm_load.sim.child import SimulatorProcess, free_port

#: the first answer token's due time after arrival (5 ms, then 12 reasoning tokens 5 ms apart),
#: less the simulator's timer lead and a millisecond of rounding
ANSWER_DUE_MS = 5 + 12 * 5 - 1.5
TTFAT = [("ttfat_p50_ms", "TTFAT p50 (ms)"), ("ttfat_p99_ms", "TTFAT p99 (ms)")]


def test_a_reasoning_models_live_table_shows_ttfat(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # 12 reasoning then 4 answer tokens, 5 ms apart: TTFAT = TTFT + 60 ms
    with SimulatorProcess(
        "--reasoning-tokens", "12", "--ttft", "0.05", "--itl", "0.05", "--time-scale", "0.1"
    ) as sim:
        proc = start_web_run(
            sim.url,
            port,
            "--levels",
            "2",
            "--input-tokens",
            "32",
            "--output-tokens",
            "16",
            "--warmup-requests",
            "1",
            "--requests-per-level",
            "1000000",
            "--level-time-cap",
            "30",
            "--out",
            str(tmp_path / "runs"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_ui(base, proc)
            before = requests.get(base + "/llm/stats", timeout=10).json()
            started = requests.post(base + "/swarm", data={"host": sim.url}, timeout=10)
            assert started.json()["success"] is True
            deadline = time.monotonic() + 30
            while True:
                stats = requests.get(base + "/llm/stats", timeout=10).json()
                if stats["levels"] and stats["levels"][0]["finished"] >= 4:
                    break
                assert time.monotonic() < deadline, stats
                time.sleep(0.25)
            index = requests.get(base + "/", timeout=10).text
            table = requests.get(base + "/stats/requests", timeout=10).json()["extended_stats"]
        finally:
            terminate(proc)
    # before any request: the columns of a plain model
    assert not any(c in before["columns"]["levels"] for c in map(list, TTFAT))
    columns = stats["columns"]
    for column in map(list, TTFAT):
        assert column in columns["levels"] and column in columns["personas"]
    assert ["reasoning_tokens_mean", "Reasoning tok mean"] in columns["levels"]
    (level,) = stats["levels"]
    assert level["reasoning_tokens_mean"] == 12
    # The simulator's schedule is absolute (arrival + 5 ms + 12 gaps of 5 ms), and it never writes
    # early: TTFAT is at least 65 ms less its timer lead on any machine, and after the first
    # token. The gap between the two medians is not a floor: a first token the busy simulator
    # writes late (19 ms at load 20) is followed by reasoning tokens already due, so the gap
    # shrinks (51.6 ms there) while TTFAT stays on time (70.6 ms).
    assert level["ttfat_p50_ms"] >= ANSWER_DUE_MS and level["ttfat_p50_ms"] > level["ttft_p50_ms"]
    assert level["ttfat_p50_ms"] - level["ttft_p50_ms"] <= 90, level
    # Locust's page loaded now: its LLM table has the columns, and its rows the figures
    args = json.loads(re.search(r"window\.templateArgs = (\{.*?\})\s*$", index, re.M).group(1))
    (llm,) = [t for t in args["extended_tables"] if t["key"] == "llm"]
    assert {"key": "ttfat_p99_ms", "title": "TTFAT p99 (ms)"} in llm["structure"]
    (rows,) = [t["data"] for t in table if t["key"] == "llm"]
    assert rows[0]["ttfat_p50_ms"] >= ANSWER_DUE_MS, rows[0]
    assert rows[0]["ttfat_p50_ms"] > rows[0]["ttft_p50_ms"], rows[0]
