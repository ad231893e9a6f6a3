"""The continuous-batching model, driven step by step (no clock) and then on a real event loop."""

from __future__ import annotations

import asyncio
import time

from vllm_load.sim.config import EngineConfig, StepCost
from vllm_load.sim.counters import ServerStats
from vllm_load.sim.engine import Engine, Sequence


def make_engine(**overrides) -> Engine:
    return Engine(EngineConfig(**overrides), ServerStats())


def queue(engine: Engine, *sizes: tuple[int, int]) -> list[Sequence]:
    seqs = [Sequence(prompt, output, 0.0) for prompt, output in sizes]
    engine.waiting.extend(seqs)
    return seqs


def run_to_end(engine: Engine, now: float = 0.0, limit: int = 100_000) -> list:
    """Step until idle, starting at time `now`; returns every StepPlan."""
    plans = []
    for _ in range(limit):
        plan = engine.schedule()
        if not plan.work:
            return plans
        now += plan.duration
        engine.complete(plan, now)
        plans.append(plan)
    raise AssertionError("the engine never went idle")


def test_prefill_is_chunked_into_the_token_budget():
    engine = make_engine(max_num_batched_tokens=2048)
    (seq,) = queue(engine, (5000, 3))
    plans = run_to_end(engine)
    assert [p.prefill_tokens for p in plans] == [2048, 2048, 904, 0, 0]
    assert [p.decode_seqs for p in plans] == [0, 0, 0, 1, 1]
    assert (
        seq.finished
        and seq.num_generated == 3
        and seq.first_token_at == sum(p.duration for p in plans[:3])
    )


def test_decodes_take_one_token_each_and_prefill_gets_the_rest():
    engine = make_engine(max_num_batched_tokens=1000)
    queue(engine, (10, 50), (10, 50), (10, 50))
    engine.complete(engine.schedule(), 1.0)  # prefill all three, first tokens out
    queue(engine, (3000, 5))
    plan = engine.schedule()
    assert plan.decode_seqs == 3 and plan.prefill_tokens == 997


def test_step_time_model_and_time_scale():
    cost = StepCost(base=0.01, prefill_per_token=0.001, decode_per_seq=0.002)
    engine = make_engine(cost=cost, time_scale=0.5)
    queue(engine, (100, 10), (100, 10))
    first = engine.schedule()
    assert abs(first.duration - 0.5 * (0.01 + 200 * 0.001)) < 1e-12
    engine.complete(first, 1.0)
    assert abs(engine.schedule().duration - 0.5 * (0.01 + 2 * 0.002)) < 1e-12


def test_requests_beyond_max_num_seqs_wait():
    engine = make_engine(max_num_seqs=2)
    seqs = queue(engine, *[(20, 4)] * 5)
    engine.complete(engine.schedule(), 1.0)
    occupancy = engine.occupancy()
    assert (occupancy.running, occupancy.waiting) == (2, 3)
    run_to_end(engine, now=1.0)
    assert all(s.finished and s.num_generated == 4 for s in seqs)
    # first come, first served
    assert [s.first_token_at for s in seqs] == sorted(s.first_token_at for s in seqs)


def test_kv_cache_exhaustion_preempts_the_newest_and_recomputes_it():
    # 40 blocks of 4 tokens = 160 tokens of KV; watermark 1 block. Three 40-token prompts fit
    # (10 blocks each), but not when each grows by 30 tokens.
    engine = make_engine(block_size=4, num_gpu_blocks=40, max_num_batched_tokens=512)
    seqs = queue(engine, (40, 30), (40, 30), (40, 30))
    plans = run_to_end(engine)
    assert engine.stats.preemptions >= 1
    assert all(s.finished and s.num_generated == 30 for s in seqs)
    assert engine.free_blocks == 40 and not engine.running and not engine.waiting
    # the newest is the one preempted, so it finishes last; the oldest is never held back
    assert seqs[0].last_token_at <= seqs[1].last_token_at < seqs[2].last_token_at
    assert seqs[0].last_token_at == plans[29].duration + sum(p.duration for p in plans[:29])
    recompute = [p for p in plans if any(new > 1 and s.num_generated for s, new in p.work)]
    assert recompute, "a preempted sequence recomputes its prompt and the tokens it had generated"


def test_admission_waits_for_room_for_the_whole_prompt():
    engine = make_engine(block_size=16, num_gpu_blocks=100, max_num_batched_tokens=256)
    queue(engine, (1000, 2), (1000, 2))  # 63 blocks each: the second must wait
    plan = engine.schedule()
    assert [new for _, new in plan.work] == [256]
    assert engine.occupancy().waiting == 1 and 0 < engine.occupancy().kv_cache_usage < 1


def test_abort_frees_blocks_and_wakes_the_waiter():
    async def scenario():
        engine = make_engine(time_scale=0.1)
        seq = Sequence(100, 1000, asyncio.get_running_loop().time())
        engine.add(seq)
        waiter = asyncio.ensure_future(seq.wait(1000))
        await asyncio.sleep(0.05)
        assert 0 < seq.num_generated < 1000
        engine.abort(seq)
        got = await asyncio.wait_for(waiter, 1)
        await asyncio.sleep(0.01)
        return engine, got

    engine, got = asyncio.run(scenario())
    assert got < 1000 and engine.free_blocks == engine.config.num_gpu_blocks
    assert not engine.running and not engine.waiting


def test_steps_run_on_absolute_deadlines():
    """200 steps of 2 ms each take 0.4 s of wall time: Python overhead is absorbed, not added."""
    cost = StepCost(base=0.002, prefill_per_token=0.0, decode_per_seq=0.0)

    async def scenario():
        engine = Engine(EngineConfig(cost=cost), ServerStats())
        loop = asyncio.get_running_loop()
        seq = Sequence(10, 200, loop.time())
        start = time.perf_counter()
        engine.add(seq)
        await seq.wait(200)
        return time.perf_counter() - start, engine

    elapsed, engine = asyncio.run(scenario())
    assert 0.4 <= elapsed < 0.4 + 0.1, elapsed
    assert engine.stats.itl.count == 199 and engine.stats.generation_tokens == 200


def _closed_loop(users: int, duration: float = 240.0, warmup: float = 60.0) -> tuple[float, float]:
    """Virtual-time closed loop with the default engine, 2048 in / 512 out: (total tok/s, p99 latency)."""
    engine = Engine(EngineConfig(), ServerStats())
    engine.waiting.extend(Sequence(2048, 512, 0.0) for _ in range(users))
    now, latencies, tokens = 0.0, [], 0
    while now < duration:
        plan = engine.schedule()
        now += plan.duration
        engine.complete(plan, now)
        for seq, _ in plan.work:
            if seq.finished and seq.last_token_at == now:
                if now >= warmup:
                    latencies.append(now - seq.arrival)
                    tokens += 2048 + 512
                engine.waiting.append(Sequence(2048, 512, now))
    latencies.sort()
    return tokens / (duration - warmup), latencies[int(0.99 * (len(latencies) - 1))]


def test_defaults_saturate_a_2048_in_512_out_test_between_100_and_200_users():
    results = {users: _closed_loop(users) for users in (10, 100, 200, 1000)}
    peak = max(tput for tput, _ in results.values())
    assert results[10][0] < 0.3 * peak
    assert results[100][0] < 0.95 * peak  # still climbing at 100
    assert results[200][0] >= 0.95 * peak and results[1000][0] >= 0.95 * peak  # flat from 200 on
    assert results[1000][1] > 3 * results[200][1]  # while latency keeps growing


def test_the_kv_cache_takes_vllms_flag_too():
    # a command a report advised (`--num-gpu-blocks-override`, vLLM's name) runs on the simulator
    from vllm_load.cli.main import build_parser
    from vllm_load.sim.cli import build_config

    parser = build_parser()
    args = parser.parse_args(["sim", "--num-gpu-blocks-override", "512", "--max-model-len", "4096"])
    assert build_config(args).engine.num_gpu_blocks == 512
    # reported as vLLM reports an override, so the diagnosis advises raising it (not the GPU
    # memory share or fp8, which the simulator has no flag for)
    from vllm_load.sim.exposition import cache_config_labels

    assert cache_config_labels(build_config(args).engine)["num_gpu_blocks_override"] == "512"
    plain = parser.parse_args(["sim", "--num-gpu-blocks", "512", "--max-model-len", "4096"])
    assert build_config(plain).engine.num_gpu_blocks == 512
    assert cache_config_labels(build_config(plain).engine)["num_gpu_blocks_override"] == "None"
