"""The web UI's live figures carry each level's bottleneck verdict (`run.live_verdict`), against
the simulator: what `/llm/stats` (the `/llm` page and the LLM tab's charts) and `/stats/requests`'
LLM table (Locust's LLM tab) poll.

The simulator runs at most 2 sequences, and the run says so (`--meta config.max_num_seqs=2`, a
given fact): at 1 user nothing waits, at 6 users 2 run and 4 wait.
"""

from __future__ import annotations

import subprocess
import time

import requests
from support.runhelpers import start_web_run, terminate, wait_for_ui

from vllm_load.sim.child import SimulatorProcess, free_port


def test_the_live_json_carries_each_levels_verdict_from_the_servers_metrics(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with SimulatorProcess("--max-num-seqs", "2", "--time-scale", "0.2") as sim:
        proc = start_web_run(
            sim.url,
            port,
            "--levels",
            "1,6",
            "--input-tokens",
            "64",
            "--output-tokens",
            "16",
            "--warmup-requests",
            "2",
            "--requests-per-level",
            "1000000",
            "--level-time-cap",
            "4",  # each level lasts 4 s: 8 scrapes
            "--metrics-interval",
            "0.5",
            "--meta",
            "config.max_num_seqs=2",
            "--out",
            str(tmp_path / "runs"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_ui(base, proc)
            started = requests.post(base + "/swarm", data={"host": sim.url}, timeout=10)
            assert started.json()["success"] is True
            seen = []  # the verdicts of the first level as the test went
            deadline = time.monotonic() + 45
            while True:
                stats = requests.get(base + "/llm/stats", timeout=10).json()
                levels = stats["levels"]
                if levels:
                    seen.append(levels[0]["verdict"])
                if len(levels) == 2 and levels[1]["verdict"] == "max_num_seqs":
                    break
                assert time.monotonic() < deadline, stats
                time.sleep(0.25)
            table = requests.get(base + "/stats/requests", timeout=10).json()["extended_stats"]
        finally:
            terminate(proc)
    # "not yet" before the level's second scrape (when a poll came that early), then its verdict
    assert set(seen) <= {"not yet", "not_saturated"}, seen
    assert levels[0]["verdict"] == "not_saturated"
    assert levels[0]["verdict_reason"].startswith("room left: ")
    assert levels[1]["verdict_reason"].startswith("the batch is full: ")
    assert " requests in it against --max-num-seqs 2 (given), " in levels[1]["verdict_reason"]
    assert stats["verdict"] == {
        "level": 1,
        "kind": "max_num_seqs",
        "reason": levels[1]["verdict_reason"],
    }
    # Locust's LLM tab: its table has the same columns
    (llm,) = [t for t in table if t["key"] == "llm"]
    assert [row["verdict"] for row in llm["data"]][:2] == ["not_saturated", "max_num_seqs"]
    # a plain model's tables: no reasoning columns (test_webui_live_reasoning.py has them)
    shown = [key for key, _ in stats["columns"]["levels"]]
    assert "ttft_p99_ms" in shown and not [k for k in shown if k.startswith(("ttfat", "reasoning"))]
