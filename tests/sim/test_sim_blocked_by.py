"""The simulator's own truth about its steps (`vllm_sim:` counters): every planned step is
counted, and a step that left requests waiting names what kept the queue's head out."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from vllm_load.sim.config import EngineConfig, StepCost
from vllm_load.sim.counters import (
    KV_CACHE,
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    PREEMPTION,
    ServerStats,
)
from vllm_load.sim.engine import Engine, Sequence
from vllm_load.sim.exposition import MetricsExporter


def run(*sizes: tuple[int, int], **config) -> Engine:
    """Queue `sizes` (prompt, output) at once and step the engine until it is idle."""
    engine = Engine(EngineConfig(**config), ServerStats())
    engine.waiting.extend(Sequence(p, o, 0.0) for p, o in sizes)
    now = 0.0
    for _ in range(10_000):
        plan = engine.schedule()
        if not plan.work:
            return engine
        now += plan.duration
        engine.complete(plan, now)
    raise AssertionError("the engine never went idle")


def blocked(engine: Engine) -> dict[str, int]:
    return {k: n for k, n in engine.stats.steps.blocked.items() if n}


def test_a_full_batch_blocks_the_queue_at_the_sequence_cap():
    # 2 running at a time, 5 queued: the steps of the first two waves leave some waiting
    engine = run(*[(20, 4)] * 5, max_num_seqs=2)
    steps = engine.stats.steps
    assert blocked(engine) == {MAX_NUM_SEQS: steps.waiting}
    assert steps.waiting == 8  # two waves of 4 steps each left requests waiting
    assert steps.steps == 12  # and a third wave of 4 with the last one alone
    assert steps.full == {MAX_NUM_SEQS: 8, MAX_NUM_BATCHED_TOKENS: 0}


def test_a_batch_just_filled_is_at_the_cap_with_nobody_blocked():
    engine = run(*[(20, 4)] * 2, max_num_seqs=2)
    steps = engine.stats.steps
    assert steps.waiting == 0 and blocked(engine) == {}
    assert steps.full == {MAX_NUM_SEQS: 4, MAX_NUM_BATCHED_TOKENS: 0}


def test_a_spent_token_budget_blocks_the_queue():
    # 64 tokens a step, 100-token prompts: the first prompt's chunk spends the whole budget
    engine = run(*[(100, 4)] * 3, max_num_batched_tokens=64, max_num_seqs=64)
    steps = engine.stats.steps
    assert steps.waiting > 0 and blocked(engine) == {MAX_NUM_BATCHED_TOKENS: steps.waiting}
    assert steps.full[MAX_NUM_BATCHED_TOKENS] >= steps.waiting and steps.full[MAX_NUM_SEQS] == 0


def test_a_full_batch_and_a_spent_budget_count_for_both():
    # 2 decodes spend the 2-token budget with the batch at its cap of 2
    engine = run(*[(2, 6)] * 3, max_num_batched_tokens=2, max_num_seqs=2)
    both = engine.stats.steps.blocked
    assert both[MAX_NUM_SEQS] > 0 and both[MAX_NUM_BATCHED_TOKENS] > 0
    assert both[KV_CACHE] == both[PREEMPTION] == 0


def test_a_full_batch_with_no_room_in_the_kv_cache_counts_for_both():
    # 2 prompts of 7 blocks each fill 14 of 15 usable blocks with the batch at its cap of 2
    engine = run(*[(100, 4)] * 3, num_gpu_blocks=16, max_num_seqs=2)
    both = engine.stats.steps.blocked
    assert both[MAX_NUM_SEQS] == both[KV_CACHE] == engine.stats.steps.waiting > 0


def test_too_few_free_blocks_block_the_queue():
    # 20 blocks of 16 (1 kept back): two 100-token prompts (7 blocks each) fit, a third does not
    engine = run(*[(100, 4)] * 3, num_gpu_blocks=20)
    steps = engine.stats.steps
    assert steps.waiting > 0 and blocked(engine) == {KV_CACHE: steps.waiting}


def test_a_step_that_preempts_admits_nothing_and_says_so():
    # as tests/sim/test_sim_engine.py: three prompts fit, not once they have grown
    engine = run(*[(40, 30)] * 3, block_size=4, num_gpu_blocks=40, max_num_batched_tokens=512)
    assert engine.stats.preemptions >= 1
    assert blocked(engine)[PREEMPTION] >= 1


def test_nothing_blocks_when_everything_fits():
    cost = StepCost(base=0.01, prefill_per_token=0.001, decode_per_seq=0.002)
    engine = run(*[(20, 4)] * 3, cost=cost, time_scale=0.5)
    steps = engine.stats.steps
    assert steps.steps == 4 and steps.waiting == 0 and blocked(engine) == {}
    assert steps.full == {MAX_NUM_SEQS: 0, MAX_NUM_BATCHED_TOKENS: 0}
    # one prefill step of 60 tokens, then 3 steps of 3 decodes; the fixed part is 4 bases
    assert abs(steps.seconds - 0.5 * (4 * 0.01 + 60 * 0.001 + 9 * 0.002)) < 1e-12
    assert abs(steps.fixed_seconds - 0.5 * 4 * 0.01) < 1e-12


def test_the_counters_are_on_metrics_with_the_simulators_prefix():
    engine = run(*[(20, 4)] * 5, max_num_seqs=2)
    exporter = MetricsExporter(engine.stats, engine.occupancy, "m")
    text = exporter.render()[0].decode()
    samples = {
        (s.name, s.labels.get("reason")): s.value
        for f in text_string_to_metric_families(text)
        if f.name.startswith("vllm_sim:")
        for s in f.samples
    }
    assert samples[("vllm_sim:engine_steps_total", None)] == 12
    assert samples[("vllm_sim:engine_steps_waiting_total", None)] == 8
    assert samples[("vllm_sim:engine_steps_blocked_total", MAX_NUM_SEQS)] == 8
    assert samples[("vllm_sim:engine_steps_blocked_total", KV_CACHE)] == 0
    assert samples[("vllm_sim:engine_step_seconds_total", None)] > 0
    full = {
        s.labels["limit"]: s.value
        for f in text_string_to_metric_families(text)
        if f.name == "vllm_sim:engine_steps_full"
        for s in f.samples
        if s.name.endswith("_total")
    }
    assert full == {MAX_NUM_SEQS: 8, MAX_NUM_BATCHED_TOKENS: 0}
