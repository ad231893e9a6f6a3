"""Timing of streamed tokens: fixed-latency mode on absolute deadlines, several tokens per chunk,
and --time-scale. Measured with an asyncio client timestamping each SSE event as it arrives."""

from __future__ import annotations

import asyncio
import statistics

import orjson
import pytest

from vllm_load.sim.child import SimulatorProcess
from vllm_load.tokenization.sim import SimTokenizer

#: timing and rates within a tolerance: no other test's load beside them (tests/conftest.py)
pytestmark = pytest.mark.alone


async def _timed_stream(url: str, max_tokens: int) -> tuple[float, list[float], list[str]]:
    """(request start, arrival time of every content event, their texts)."""
    import aiohttp

    body = {
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    loop = asyncio.get_running_loop()
    times, texts, buf = [], [], b""
    async with aiohttp.ClientSession() as session:
        start = loop.time()
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            async for data in resp.content.iter_any():
                now = loop.time()
                buf += data
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    payload = event[len(b"data: ") :]
                    if payload == b"[DONE]":
                        continue
                    content = orjson.loads(payload)["choices"][0]["delta"].get("content")
                    if content:
                        times.append(now)
                        texts.append(content)
    return start, times, texts


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]


def test_fixed_latency_first_token_and_gaps_on_absolute_deadlines():
    with SimulatorProcess("--ttft", "0.15", "--itl", "0.01") as sim:
        asyncio.run(_timed_stream(sim.url, 2))  # warm the connection path once
        start, times, texts = asyncio.run(_timed_stream(sim.url, 60))
    assert len(times) == 60
    assert abs((times[0] - start) - 0.15) < 0.01
    # absolute deadlines: the last token is on time however the individual gaps jittered
    assert abs((times[-1] - times[0]) - 59 * 0.01) < 0.01
    assert abs(statistics.median(_gaps(times)) - 0.01) < 0.002


def test_tokens_per_chunk_groups_tokens_after_the_first():
    tok = SimTokenizer()
    with SimulatorProcess("--ttft", "0.05", "--itl", "0.005", "--tokens-per-chunk", "4") as sim:
        start, times, texts = asyncio.run(_timed_stream(sim.url, 21))
    assert [len(tok.encode(t)) for t in texts] == [1, 4, 4, 4, 4, 4]
    assert (
        abs(statistics.median(_gaps(times)) - 4 * 0.005) < 0.003
    )  # one chunk every 4 tokens' time
    assert abs((times[-1] - times[0]) - 20 * 0.005) < 0.006


def test_engine_streams_grouped_chunks_too():
    tok = SimTokenizer()
    with SimulatorProcess("--time-scale", "0.1", "--tokens-per-chunk", "3") as sim:
        _, _, texts = asyncio.run(_timed_stream(sim.url, 10))
    assert [len(tok.encode(t)) for t in texts] == [1, 3, 3, 3]


def test_time_scale_speeds_the_engine_up_in_proportion():
    durations = {}
    for scale in ("1", "0.2"):
        with SimulatorProcess(
            "--time-scale",
            scale,
            "--step-base",
            "0.01",
            "--decode-cost",
            "0",
            "--prefill-cost",
            "0",
        ) as sim:
            start, times, _ = asyncio.run(_timed_stream(sim.url, 40))
        durations[scale] = times[-1] - start
    # 40 steps of 10 ms, then of 2 ms (the first step prefills and samples the first token)
    assert abs(durations["1"] - 0.40) < 0.03, durations
    assert abs(durations["0.2"] - 0.08) < 0.02, durations
