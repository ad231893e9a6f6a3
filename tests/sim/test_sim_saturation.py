"""The simulator saturates like a real vLLM server: throughput rises with concurrency, flattens
once the batch is full, and latency keeps growing (closed-loop load, asyncio client)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import orjson
import pytest
from support.sim_http import metric_value

from vllm_load.sim.child import SimulatorProcess

MAX_NUM_SEQS = 64
# (users, warm-up seconds, measured seconds): long enough at 1000 users for the queue to turn over
LEVELS = [(10, 1.0, 3.0), (100, 1.0, 3.0), (200, 1.5, 3.0), (1000, 5.0, 7.0)]
# Output lengths vary (8..24 tokens) so that requests do not finish in lockstep waves, which
# would make a level's count depend on where its window happens to cut a wave.
PAYLOADS = [
    orjson.dumps(
        {
            "model": "sim-llama-8b",
            "max_tokens": n,
            "min_tokens": n,
            "ignore_eos": True,
            "messages": [
                {
                    "role": "user",
                    "content": "Count the sheep in the field and tell me how many there are.",
                }
            ],
        }
    )
    for n in range(8, 25)
]


@dataclass
class Level:
    users: int
    throughput: float  # total tokens per second over the measured window
    p99: float  # seconds, requests finished in the measured window
    requests: int
    waiting: float | None  # vllm:num_requests_waiting mid-level
    running: float | None


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def _level(session, url: str, users: int, warmup: float, measure: float) -> Level:
    import aiohttp

    loop = asyncio.get_running_loop()
    start = loop.time()
    measured_from, stop_at = start + warmup, start + warmup + measure
    done: list[tuple[float, float, int]] = []

    async def user(index: int) -> None:
        while loop.time() < stop_at:
            index += 7
            t0 = loop.time()
            async with session.post(
                url + "/v1/chat/completions",
                data=PAYLOADS[index % len(PAYLOADS)],
                headers={"Content-Type": "application/json"},
            ) as resp:
                body = await resp.read()
                assert resp.status == 200, body[:300]
            t1 = loop.time()
            done.append((t1, t1 - t0, orjson.loads(body)["usage"]["total_tokens"]))

    tasks = [asyncio.create_task(user(i)) for i in range(users)]
    await asyncio.sleep(warmup + measure / 2)
    async with session.get(url + "/metrics") as resp:
        metrics = await resp.text()
    await asyncio.sleep(max(0.0, stop_at - loop.time()))
    for t in tasks:
        t.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [
        r
        for r in results
        if isinstance(r, BaseException)
        and not isinstance(r, (asyncio.CancelledError, aiohttp.ClientError))
    ]
    assert not failures, failures[:3]
    window = [d for d in done if measured_from <= d[0] <= stop_at]
    assert len(window) >= 50, f"only {len(window)} requests finished at {users} users"
    return Level(
        users,
        sum(d[2] for d in window) / measure,
        _p99([d[1] for d in window]),
        len(window),
        metric_value(metrics, "vllm:num_requests_waiting"),
        metric_value(metrics, "vllm:num_requests_running"),
    )


async def _drive(url: str) -> list[Level]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=120)
    ) as session:
        levels = []
        for users, warmup, measure in LEVELS:
            levels.append(await _level(session, url, users, warmup, measure))
            await asyncio.sleep(0.3)  # let the server drop the cancelled requests
        return levels


@pytest.mark.slow  # ~25 s up to 1000 users; the engine model's saturation is unit-tested (test_sim_engine.py)
def test_throughput_saturates_and_latency_keeps_growing():
    with SimulatorProcess("--max-num-seqs", str(MAX_NUM_SEQS)) as sim:
        levels = {lv.users: lv for lv in asyncio.run(_drive(sim.url))}
    table = "\n".join(
        f"{lv.users:>5} users: {lv.throughput:8.0f} tok/s  p99 {lv.p99:6.3f}s  n={lv.requests:5d}  "
        f"running={lv.running:.0f} waiting={lv.waiting:.0f}"
        for lv in levels.values()
    )
    print("\n" + table)
    peak = max(lv.throughput for lv in levels.values())
    assert abs(levels[1000].throughput - levels[200].throughput) <= 0.10 * levels[200].throughput, (
        table
    )
    assert levels[10].throughput < 0.40 * peak, table
    assert levels[1000].p99 > 2 * levels[100].p99, table
    assert levels[200].waiting > 0 and levels[1000].waiting > 0, table
    assert levels[200].running == levels[1000].running == MAX_NUM_SEQS, table
