"""The simulator's /metrics against a real vLLM 0.32.0's (tests/data): the families a bottleneck
diagnosis reads, with the same names, types, HELP texts, label names and buckets; and their
numbers in known scenarios over HTTP."""

from __future__ import annotations

import os
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.sim_http import call

from vllm_load.sim.child import SimulatorProcess
from vllm_load.sim.config import EngineConfig
from vllm_load.sim.exposition import cache_config_labels

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "data", "vllm_0.32.0_cpu_metrics_full.txt")
MODEL = "sim-llama-8b"

#: what issue 36's diagnosis reads (counters by their family name, without `_total`)
DIAGNOSIS_FAMILIES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_requests_waiting_by_reason",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions",
    "vllm:request_num_preemptions",
    "vllm:iteration_tokens_total",
    "vllm:request_queue_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_prefill_kv_computed_tokens",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:cache_config_info",
)


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def label_names(family) -> set[str]:
    return {name for s in family.samples for name in s.labels} - {"le"}


def buckets(family) -> list[str]:
    return [s.labels["le"] for s in family.samples if s.name.endswith("_bucket")]


def value(fams: dict, name: str, suffix: str = "", **labels) -> float:
    for s in fams[name].samples:
        if s.name == name + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((name, suffix, labels))


def complete(sim, max_tokens: int, prompt: str = "Say something, please!") -> None:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
    status, _ = call(sim.url + "/v1/completions", body)
    assert status == 200


def start_together(*calls) -> list[threading.Thread]:
    """Run `calls` in threads released at once (a barrier), so they reach the server together."""
    barrier = threading.Barrier(len(calls))

    def released(c):
        barrier.wait(10)
        c()

    threads = [threading.Thread(target=released, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    return threads


def concurrently(*calls) -> None:
    for t in start_together(*calls):
        t.join(30)


@pytest.fixture(scope="module")
def real():
    with open(FIXTURE, encoding="utf-8") as fh:
        return families(fh.read())


def test_every_vllm_family_of_the_simulator_is_as_real_vllm_exposes_it(real):
    # the real server ran with --max-model-len 4096, which sets the token histograms' buckets
    with SimulatorProcess("--time-scale", "0.01", "--max-model-len", "4096") as sim:
        concurrently(lambda: complete(sim, 8), lambda: complete(sim, 12))
        ours = families(call(sim.url + "/metrics")[1])
    assert set(DIAGNOSIS_FAMILIES) <= set(ours), set(DIAGNOSIS_FAMILIES) - set(ours)
    for name, family in ours.items():
        if not name.startswith("vllm:"):
            continue
        assert name in real, f"{name}: real vLLM 0.32 has no such family"
        theirs = real[name]
        assert (family.type, family.documentation) == (theirs.type, theirs.documentation), name
        assert label_names(family) == label_names(theirs), name
        assert buckets(family) == buckets(theirs), name


def test_cache_config_info_computes_the_kv_size_as_vllm_does(real):
    # the real server: 4096 blocks of 128 tokens, max_model_len 4096, prefix caching on
    (sample,) = real["vllm:cache_config_info"].samples
    ours = cache_config_labels(
        EngineConfig(block_size=128, num_gpu_blocks=4096, max_model_len=4096)
    )
    assert set(ours) | {"engine"} == set(sample.labels)
    for known in (
        "block_size",
        "effective_attention_block_size",
        "num_gpu_blocks",
        "kv_cache_size_tokens",
        "kv_cache_max_concurrency",
        "enable_prefix_caching",
    ):
        assert ours[known] == sample.labels[known], known
    # a context that is not a whole number of blocks: a request of max_model_len takes 63
    # blocks of 16, so 630 blocks hold 10 of them, 10,000 tokens (not 630 x 16 = 10,080)
    odd = cache_config_labels(EngineConfig(block_size=16, num_gpu_blocks=630, max_model_len=1000))
    assert (odd["kv_cache_max_concurrency"], odd["kv_cache_size_tokens"]) == ("10.0", "10000")
    off = cache_config_labels(EngineConfig(enable_prefix_caching=False))
    assert off["enable_prefix_caching"] == "False"


def test_one_sequence_at_a_time_queue_waiting_and_phases():
    """--max-num-seqs 1, identical requests: each waits in the queue for those before it, and
    every waiting one waits for capacity."""
    with SimulatorProcess("--max-num-seqs", "1") as sim:  # real time: ~0.5 s a request
        threads = start_together(*[lambda: complete(sim, 50) for _ in range(3)])
        deadline, mid = time.monotonic() + 5, None
        while time.monotonic() < deadline:
            fams = families(call(sim.url + "/metrics")[1])
            if value(fams, "vllm:num_requests_waiting") >= 1:
                mid = fams
                break
            time.sleep(0.01)
        for t in threads:
            t.join(30)
        end = families(call(sim.url + "/metrics")[1])
    assert mid is not None, "no request was ever seen waiting"
    waiting = value(mid, "vllm:num_requests_waiting")
    assert value(mid, "vllm:num_requests_running") == 1
    assert value(mid, "vllm:num_requests_waiting_by_reason", reason="capacity") == waiting
    assert value(mid, "vllm:num_requests_waiting_by_reason", reason="deferred") == 0

    def total(name: str) -> float:
        return value(end, name, "_sum")

    inference = total("vllm:request_inference_time_seconds")
    assert value(end, "vllm:request_inference_time_seconds", "_count") == 3
    # the 2nd waits 1 inference, the 3rd 2 of them: 3 inferences of queue for 3 of running
    assert total("vllm:request_queue_time_seconds") == pytest.approx(inference, rel=0.1)
    assert total("vllm:request_prefill_time_seconds") + total(
        "vllm:request_decode_time_seconds"
    ) == pytest.approx(inference, rel=1e-6)
    assert value(end, "vllm:request_generation_tokens", "_sum") == 150
    steps = value(end, "vllm:iteration_tokens_total", "_count")
    assert steps == 150  # one request at a time, short prompts: every step outputs one token
    tokens = value(end, "vllm:prompt_tokens", "_total") + value(
        end, "vllm:generation_tokens", "_total"
    )
    assert value(end, "vllm:iteration_tokens_total", "_sum") / steps == pytest.approx(
        tokens / steps
    )
    assert value(end, "vllm:request_prompt_tokens", "_sum") == value(
        end, "vllm:request_prefill_kv_computed_tokens", "_sum"
    )  # nothing cached: every prompt token computed


def test_a_small_kv_cache_preempts_and_each_request_says_how_often():
    # 12 blocks of 16 tokens: three ~10-token prompts are admitted together, and outgrow the
    # cache as they generate 100 tokens each (7 blocks apiece; any two overlapping suffice: at
    # --time-scale 0.1 a request takes ~0.1 s)
    args = ("--num-gpu-blocks", "12", "--max-model-len", "128", "--time-scale", "0.1")
    with SimulatorProcess(*args) as sim:
        concurrently(*[lambda: complete(sim, 100, "Hi") for _ in range(3)])
        end = families(call(sim.url + "/metrics")[1])
    preemptions = value(end, "vllm:num_preemptions", "_total")
    assert preemptions >= 1
    assert value(end, "vllm:request_num_preemptions", "_count") == 3
    assert value(end, "vllm:request_num_preemptions", "_sum") == preemptions
    (info,) = end["vllm:cache_config_info"].samples
    assert (info.labels["num_gpu_blocks"], info.labels["kv_cache_size_tokens"]) == ("12", "192")
    assert info.labels["kv_cache_max_concurrency"] == "1.5" and info.value == 1.0
