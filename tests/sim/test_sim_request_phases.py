"""What the simulator counts per request and per step, in virtual time (the engine driven step
by step) where every figure is exact: vLLM's request phases (queue, prefill, decode, inference),
preemptions per request, tokens per step, computed prompt tokens."""

from __future__ import annotations

import asyncio

import pytest

from vllm_load.sim.backends import FixedLatencyBackend
from vllm_load.sim.config import EngineConfig, FixedLatency, StepCost
from vllm_load.sim.counters import ServerStats
from vllm_load.sim.engine import Engine, Sequence
from vllm_load.sim.prefix_cache import block_hashes

COST = StepCost(base=0.01, prefill_per_token=0.0001, decode_per_seq=0.001)


def make_engine(**overrides) -> Engine:
    return Engine(EngineConfig(cost=COST, **overrides), ServerStats())


def run(engine: Engine, *seqs: Sequence) -> list:
    """Queue `seqs` at time 0 and step until idle; every StepPlan."""
    return [plan for plan, _ in run_counting(engine, *seqs)]


def run_counting(engine: Engine, *seqs: Sequence) -> list:
    """As run(), with the tokens each step generated: [(StepPlan, tokens)]."""
    engine.waiting.extend(seqs)
    steps, now = [], 0.0
    for _ in range(100_000):
        plan = engine.schedule()
        if not plan.work:
            return steps
        now += plan.duration
        before = engine.stats.generation_tokens
        engine.complete(plan, now)
        steps.append((plan, engine.stats.generation_tokens - before))
    raise AssertionError("the engine never went idle")


def test_one_sequence_at_a_time_the_second_queues_for_the_first_ones_inference():
    engine = make_engine(max_num_seqs=1)
    first, second = Sequence(20, 10, 0.0), Sequence(20, 10, 0.0)
    plans = run(engine, first, second)
    s = engine.stats
    inference = [seq.last_token_at - seq.scheduled_at for seq in (first, second)]
    assert first.scheduled_at == 0.0 and second.scheduled_at == first.last_token_at
    assert s.queue_time.count == 2 and s.queue_time.total == pytest.approx(inference[0])
    assert s.inference_time.total == pytest.approx(sum(inference))
    # prefill (first scheduled -> first token) + decode (first -> last token) = inference
    assert s.prefill_time.total + s.decode_time.total == pytest.approx(s.inference_time.total)
    assert s.prefill_time.total == pytest.approx(2 * plans[0].duration)  # one prefill step each
    assert s.request_preemptions.count == 2 and s.request_preemptions.total == 0
    assert s.request_prompt_tokens.total == 40 and s.request_generation_tokens.total == 20


def test_a_preempted_request_waits_again_inside_its_inference_time_not_its_queue_time():
    # 40 blocks of 4 tokens: three 40-token prompts are admitted at once (no queue), then
    # outgrow the cache as they generate: the newest is preempted and recomputed
    engine = make_engine(block_size=4, num_gpu_blocks=40, max_num_batched_tokens=512)
    seqs = [Sequence(40, 30, 0.0) for _ in range(3)]
    run(engine, *seqs)
    s = engine.stats
    assert s.preemptions >= 1 and any(seq.num_preemptions for seq in seqs)
    # per finished request: the histogram's sum is the engine's counter
    assert s.request_preemptions.count == 3
    assert s.request_preemptions.total == s.preemptions
    assert s.queue_time.total == 0  # all three were scheduled in the first step
    assert s.inference_time.total == pytest.approx(
        sum(seq.last_token_at - seq.scheduled_at for seq in seqs)
    )
    assert s.prefill_time.total + s.decode_time.total == pytest.approx(s.inference_time.total)
    # a recomputation is not a second prompt: each prompt counts once
    assert s.request_prompt_tokens.total == s.prompt_tokens == 120


def test_tokens_per_step_count_each_prompt_once_in_the_step_of_its_first_token():
    engine = make_engine(max_num_batched_tokens=64)
    seqs = [Sequence(100, 5, 0.0), Sequence(30, 8, 0.0), Sequence(10, 3, 0.0)]
    steps = run_counting(engine, *seqs)
    s = engine.stats
    it = s.iteration_tokens
    with_output = [plan for plan, generated in steps if generated]
    # the 100-token prompt is prefilled in 64-token chunks: its first step outputs no token and,
    # as in vLLM, is not observed
    assert steps[0][1] == 0 and it.count == len(with_output) == len(steps) - 1
    # so the mean per observed step is every prompt and generated token over those steps
    assert it.total == s.prompt_tokens + s.generation_tokens == 140 + 16
    # the step that finished the 100-token prompt counts it whole: above the 64-token budget
    assert sum(it.counts[5:]) == 1 and it.counts[-1] == 0


def test_tokens_per_step_mean_without_chunks_is_all_tokens_over_all_steps():
    engine = make_engine()
    plans = run(engine, *[Sequence(50, 20, 0.0) for _ in range(4)])
    it = engine.stats.iteration_tokens
    assert it.count == len(plans) == 20
    assert it.total / it.count == pytest.approx((4 * 50 + 4 * 20) / len(plans))
    # the first step: 4 prompts + 4 first tokens = 204, in (128, 256]; then 4 decodes a step
    assert it.counts[6] == 1 and it.counts[1] == 19 and sum(it.counts) == 20


def test_prefill_kv_computed_tokens_leave_out_the_prefix_cache_hit():
    engine = make_engine(block_size=16)
    prompt = list(range(1000, 1100))  # 100 tokens: 6 full blocks
    cold = Sequence(100, 2, 0.0, block_hashes=block_hashes(prompt, 16))
    run(engine, cold)
    warm = Sequence(100, 2, 0.0, block_hashes=block_hashes(prompt, 16))
    run(engine, warm)
    assert warm.cached_tokens == 96
    computed = engine.stats.request_prefill_computed
    assert computed.count == 2 and computed.total == 100 + (100 - 96)


def test_queue_time_runs_from_when_the_request_reached_the_engine():
    async def scenario():
        engine = make_engine(max_num_seqs=1)
        loop = asyncio.get_running_loop()
        first = Sequence(10, 20, loop.time() - 5.0)  # its handler started 5 s ago
        second = Sequence(10, 20, loop.time())
        engine.add(first)
        engine.add(second)
        await second.wait(20)
        return engine, first, second

    engine, first, second = asyncio.run(scenario())
    assert first.queued_at is not None and second.queued_at is not None
    assert first.queued_at - first.arrival >= 5.0
    waits = [seq.scheduled_at - seq.queued_at for seq in (first, second)]
    assert engine.stats.queue_time.total == pytest.approx(sum(max(0.0, w) for w in waits))
    # the first waited ~0 in the engine (not the 5 s since its handler began), the second for
    # the first's inference (give or take the event loop's timer lateness)
    assert waits[0] < 0.05
    assert waits[1] == pytest.approx(first.last_token_at - first.scheduled_at, abs=0.02)


def test_fixed_latency_requests_have_no_queue_and_prefill_is_their_ttft():
    async def scenario():
        backend = FixedLatencyBackend(FixedLatency(0.03, 0.005), ServerStats())
        loop = asyncio.get_running_loop()
        source = backend.open(10, 5, loop.time())
        await source.wait(5)
        return backend.stats

    s = asyncio.run(scenario())
    assert s.queue_time.count == 1 and s.queue_time.total == 0
    assert s.prefill_time.total == pytest.approx(0.03)  # the first token is due at --ttft
    # ... and the last once its 4 gaps have passed, when the timer got round to it
    assert 4 * 0.005 - 0.002 <= s.decode_time.total < 4 * 0.005 + 0.03
    assert s.prefill_time.total + s.decode_time.total == pytest.approx(s.inference_time.total)
    assert s.request_generation_tokens.total == 5 and s.iteration_tokens.count == 0
