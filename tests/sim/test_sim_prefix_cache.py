"""Automatic prefix caching in the simulator: the cache alone, inside the engine, and over HTTP."""

from __future__ import annotations

import random

import pytest
from support.sim_http import call, metric_value, sse_events

from vllm_load.sim.child import SimulatorProcess
from vllm_load.sim.config import EngineConfig, StepCost
from vllm_load.sim.counters import ServerStats
from vllm_load.sim.engine import Engine, Sequence
from vllm_load.sim.prefix_cache import PrefixCache, block_hashes
from vllm_load.sim.trace import read_trace

BS = 16


def ids(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000, 50000) for _ in range(n)]


def request(token_ids: list[int], output: int = 1) -> Sequence:
    return Sequence(len(token_ids), output, 0.0, block_hashes=block_hashes(token_ids, BS))


def make_engine(**overrides) -> Engine:
    return Engine(EngineConfig(block_size=BS, **overrides), ServerStats())


def run(engine: Engine, *seqs: Sequence) -> list:
    """Queue `seqs` and step until idle; every StepPlan."""
    engine.waiting.extend(seqs)
    plans, now = [], 0.0
    for _ in range(10_000):
        plan = engine.schedule()
        if not plan.work:
            return plans
        now += plan.duration
        engine.complete(plan, now)
        plans.append(plan)
    raise AssertionError("the engine never went idle")


# --- block hashes and the cache alone ------------------------------------------------------


def test_only_full_blocks_are_hashed_and_each_hash_covers_the_whole_prefix():
    a = ids(1, 40)
    assert len(block_hashes(a, BS)) == 2  # the last 8 tokens are a partial block
    assert len(block_hashes(a[:31], BS)) == 1
    b = a[:20] + [7] + a[21:]  # differs inside block 1 only
    assert block_hashes(b, BS)[0] == block_hashes(a, BS)[0]
    assert block_hashes(b, BS)[1] != block_hashes(a, BS)[1]
    c = [7] + a[1:]  # differs in block 0: block 1's hash differs too, its tokens being equal
    assert block_hashes(c, BS)[1] != block_hashes(a, BS)[1]


def test_lookup_stops_at_the_first_miss_and_at_the_limit():
    cache = PrefixCache()
    hashes = block_hashes(ids(1, 64), BS)
    for h in hashes[:3]:
        assert cache.insert(h)
    assert cache.lookup(hashes, 4) == (3, 0)  # all three held by their inserter
    assert cache.lookup(hashes, 2) == (2, 0)
    assert cache.lookup([hashes[0], hashes[3], hashes[2]], 4) == (1, 0)
    assert cache.release(hashes[:3]) == 3
    assert cache.lookup(hashes, 4) == (3, 3)  # now evictable: a hit takes them from free memory


def test_eviction_is_least_recently_used_tail_first_and_spares_held_blocks():
    cache = PrefixCache()
    a, b = block_hashes(ids(1, 48), BS), block_hashes(ids(2, 48), BS)
    for h in a + b:
        cache.insert(h)
    cache.release(a)
    cache.release(b)
    cache.acquire(a[:2])  # a's head is used again, and held
    assert cache.evict(2) == 2
    assert a[2] not in cache and b[2] not in cache  # a's tail went first, then b's (tail first)
    assert b[1] in cache and b[0] in cache
    assert cache.evict(100) == 2  # only b's two unheld blocks are left to evict
    assert a[0] in cache and a[1] in cache and len(cache) == 2
    assert cache.holders(a[0]) == 1


# --- inside the engine ------------------------------------------------------------------------


def test_a_shared_prefix_hits_and_only_the_rest_is_prefilled():
    engine = make_engine()
    shared = ids(1, 40)
    first = request(shared + ids(2, 60))
    run(engine, first)
    second = request(shared + ids(3, 60))
    plans = run(engine, second)
    assert first.cached_tokens == 0 and second.cached_tokens == 32  # 2 full shared blocks
    assert plans[0].prefill_tokens == 100 - 32
    assert engine.stats.prefix_cache_queries == 200 and engine.stats.prefix_cache_hits == 32


def test_distinct_prompts_do_not_hit():
    engine = make_engine()
    seqs = [request(ids(seed, 100)) for seed in range(5)]
    for seq in seqs:
        run(engine, seq)
    assert [s.cached_tokens for s in seqs] == [0] * 5
    assert engine.stats.prefix_cache_hits == 0 and engine.stats.prefix_cache_queries == 500


def test_a_full_hit_still_computes_the_last_token():
    engine = make_engine()
    aligned, ragged = ids(1, 64), ids(2, 65)
    run(engine, request(aligned), request(ragged))
    again_aligned, again_ragged = request(aligned), request(ragged)
    plans = run(engine, again_aligned, again_ragged)
    # 64 tokens: the hit stops before token 64, so the whole last block is recomputed
    assert again_aligned.cached_tokens == 48 and again_ragged.cached_tokens == 64
    assert plans[0].prefill_tokens == 16 + 1


def test_prefill_time_and_ttft_depend_on_the_uncached_tokens_only():
    engine = make_engine(cost=StepCost(base=0.01, prefill_per_token=0.001, decode_per_seq=0.0))
    prompt = ids(1, 1000)
    cold, warm = request(prompt), request(prompt)
    run(engine, cold)
    run(engine, warm)
    assert warm.cached_tokens == 992
    assert cold.first_token_at == pytest.approx(0.01 + 1.0)
    assert warm.first_token_at == pytest.approx(0.01 + 0.008)


def test_blocks_of_finished_requests_stay_cached_but_count_as_free():
    engine = make_engine(num_gpu_blocks=100)
    run(engine, request(ids(1, 160)))
    assert len(engine.cache) == 10 and engine.cache.num_evictable == 10
    assert engine.free_blocks == 100 and engine.occupancy().kv_cache_usage == 0.0


def test_eviction_under_capacity_takes_the_least_recently_used_blocks():
    engine = make_engine(num_gpu_blocks=10)  # watermark 1: 9 blocks for admissions
    a, b, c = ids(1, 48), ids(2, 48), ids(3, 48)
    run(engine, request(a))
    run(engine, request(b))
    run(engine, request(a))  # a's first two blocks hit and become the most recently used
    run(engine, request(c))  # fits in the 4 empty blocks: nothing evicted
    assert len(engine.cache) == 9
    run(engine, request(ids(4, 80)))  # 5 blocks, 1 empty: evicts 4, a's stale tail and all of b
    cache = engine.cache
    assert cache is not None
    assert cache.lookup(block_hashes(b, BS), 3) == (0, 0)
    assert cache.lookup(block_hashes(a, BS), 3) == (2, 2)
    assert cache.lookup(block_hashes(c, BS), 3) == (3, 3)


def test_blocks_a_running_request_holds_are_never_evicted():
    engine = make_engine(num_gpu_blocks=12)
    holder = request(ids(1, 48), output=50)
    engine.waiting.append(holder)
    engine.complete(engine.schedule(), 1.0)  # admitted and prefilled; now decoding
    held = list(holder.block_hashes)
    assert all(engine.cache.holders(h) == 1 for h in held)
    others = [request(ids(seed, 64)) for seed in range(2, 8)]  # 4 blocks each, 8 free
    engine.waiting.extend(others)
    for _ in range(10):
        engine.complete(engine.schedule(), 1.0)
    assert all(o.finished for o in others) and not holder.finished
    assert others[0].block_hashes[0] not in engine.cache  # memory ran short: blocks were evicted
    assert all(engine.cache.holders(h) == 1 for h in held)


def test_a_running_requests_blocks_are_shared_with_a_newcomer():
    engine = make_engine()
    prompt = ids(1, 100)
    first = request(prompt, output=20)
    engine.waiting.append(first)
    engine.complete(engine.schedule(), 1.0)
    free_before = engine.free_blocks
    second = request(prompt, output=20)
    engine.waiting.append(second)
    engine.schedule()
    assert second.cached_tokens == 96
    assert engine.cache.holders(first.block_hashes[0]) == 2
    assert free_before - engine.free_blocks == 1  # its last block: the shared ones cost nothing


def test_a_preempted_request_is_counted_once_and_rehits_its_own_blocks():
    prefilled = {}
    for caching in (True, False):
        engine = make_engine(num_gpu_blocks=20, enable_prefix_caching=caching)
        seqs = [request(ids(seed, 96), output=80) for seed in range(3)]
        prefilled[caching] = sum(p.prefill_tokens for p in run(engine, *seqs))
        assert engine.stats.preemptions > 0 and all(s.finished for s in seqs)
        if caching:  # lookups after a preemption are not counted, as in vLLM
            assert engine.stats.prefix_cache_queries == 3 * 96
            assert engine.stats.prefix_cache_hits == 0
    # recomputing after a preemption finds the prompt's blocks still cached
    assert prefilled[True] < prefilled[False]


def test_caching_off_means_no_cache_and_no_counts():
    engine = make_engine(enable_prefix_caching=False)
    prompt = ids(1, 200)
    first, second = request(prompt), request(prompt)
    run(engine, first)
    plans = run(engine, second)
    assert engine.cache is None and second.cached_tokens == 0 and plans[0].prefill_tokens == 200
    assert engine.stats.prefix_cache_queries == 0 and engine.stats.prefix_cache_hits == 0


# --- over HTTP ------------------------------------------------------------------------------

MODEL = "sim-llama-8b"
WORDS = "the of and to in is was for that on as with by he at from his it an were are".split()


def long_text(seed: int, words: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choices(WORDS, k=words))


def stream_chat(url: str, messages: list[dict], request_id: str) -> tuple[str, dict]:
    """(reply text, usage) of a streamed chat completion."""
    status, body = call(
        url + "/v1/chat/completions",
        {
            "model": MODEL,
            "messages": messages,
            "max_tokens": 8,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        headers={"X-Request-Id": request_id},
    )
    assert status == 200, body
    events = sse_events(body)
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-2])
    return text, events[-2]["usage"]


def counters(url: str) -> tuple[float, float]:
    text = call(url + "/metrics")[1]
    return (
        metric_value(text, "vllm:prefix_cache_queries_total"),
        metric_value(text, "vllm:prefix_cache_hits_total"),
    )


def ttft(record) -> float:
    return record.tokens[0] - record.received


def test_http_a_repeated_long_prompt_is_cheaper_the_second_time(tmp_path):
    trace = str(tmp_path / "trace.jsonl")
    # 0.1 ms per prefill token: a 4,000-token prompt takes 0.4 s, its cached repeat ~0.01 s
    args = ("--prefill-cost", "0.0001", "--trace", trace, "--enable-prompt-tokens-details")
    messages = [{"role": "user", "content": long_text(1, 4000)}]
    with SimulatorProcess(*args) as sim:
        _, cold = stream_chat(sim.url, messages, "cold")
        assert counters(sim.url) == (cold["prompt_tokens"], 0)
        _, warm = stream_chat(sim.url, messages, "warm")
        queries, hits = counters(sim.url)
    prompt = cold["prompt_tokens"]
    # a count of 0 is said, as vLLM 0.32 says it (was null: the cold turn's share unknown)
    assert prompt > 4000 and cold["prompt_tokens_details"] == {"cached_tokens": 0}
    cached = (prompt - 1) // 16 * 16
    assert warm["prompt_tokens_details"] == {"cached_tokens": cached}
    assert (queries, hits) == (2 * prompt, cached)
    records = read_trace(trace)
    assert records["cold"].cached_tokens == 0 and records["warm"].cached_tokens == cached
    assert ttft(records["cold"]) > 0.4
    assert ttft(records["warm"]) < ttft(records["cold"]) - 0.3


def test_http_the_second_turn_of_a_chat_hits_on_the_first_turns_prompt():
    turn1 = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": long_text(2, 300)},
    ]
    with SimulatorProcess("--time-scale", "0.01", "--enable-prompt-tokens-details") as sim:
        reply, usage1 = stream_chat(sim.url, turn1, "turn-1")
        turn2 = [
            *turn1,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "And then?"},
        ]
        _, usage2 = stream_chat(sim.url, turn2, "turn-2")
        queries, hits = counters(sim.url)
    assert reply and usage1["prompt_tokens_details"] == {"cached_tokens": 0}
    # every full block of turn 1's prompt, and nothing of the reply (generated blocks are not cached)
    cached = usage1["prompt_tokens"] // 16 * 16
    assert cached > 250 and usage2["prompt_tokens"] > usage1["prompt_tokens"] + 8
    assert usage2["prompt_tokens_details"] == {"cached_tokens": cached}
    assert (queries, hits) == (usage1["prompt_tokens"] + usage2["prompt_tokens"], cached)


def test_http_no_hits_with_prefix_caching_off(tmp_path):
    trace = str(tmp_path / "trace.jsonl")
    args = ("--no-enable-prefix-caching", "--enable-prompt-tokens-details", "--trace", trace)
    messages = [{"role": "user", "content": long_text(3, 2000)}]
    with SimulatorProcess("--prefill-cost", "0.0001", *args) as sim:
        _, first = stream_chat(sim.url, messages, "first")
        _, second = stream_chat(sim.url, messages, "second")
        assert counters(sim.url) == (0, 0)
    assert first["prompt_tokens_details"] == second["prompt_tokens_details"] == {"cached_tokens": 0}
    records = read_trace(trace)
    assert records["second"].cached_tokens == 0
    assert ttft(records["second"]) > 0.2  # the whole prompt prefilled again


def complete(url: str, prompt: str) -> dict:
    """The usage of a non-streamed completion."""
    status, body = call(
        url + "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 2}
    )
    assert status == 200, body
    return body["usage"]


@pytest.mark.parametrize("details", [True, False])
def test_http_usage_reports_cached_tokens_only_with_the_details_option(details):
    prompt = long_text(4, 500)
    args = ["--time-scale", "0.01"] + (["--enable-prompt-tokens-details"] if details else [])
    with SimulatorProcess(*args) as sim:
        first = complete(sim.url, prompt)
        second = complete(sim.url, prompt)
        hits = counters(sim.url)[1]
    cached = (first["prompt_tokens"] - 1) // 16 * 16
    assert hits == cached
    assert first["prompt_tokens_details"] == ({"cached_tokens": 0} if details else None)
    assert second["prompt_tokens_details"] == ({"cached_tokens": cached} if details else None)
