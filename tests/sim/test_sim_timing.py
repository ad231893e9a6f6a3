"""Timing of streamed tokens: fixed-latency mode on absolute deadlines, several tokens per chunk,
and --time-scale. Measured with an asyncio client timestamping each SSE event as it arrives."""

from __future__ import annotations

import asyncio
import os
import statistics

import orjson
from support.host_wait import HostWait, within

from vllm_load.sim.child import SimulatorProcess
from vllm_load.tokenization.sim import SimTokenizer

# Beside other tests' load: the chunk tests count tokens, which load cannot change; the timing
# ones hold each tolerance where the host ran the client and the simulator on time, and skip
# only that tolerance, with the figures, where their run-queue wait (or the host's steal) over
# that span covers the miss (`within`); a miss the waits do not cover fails.


async def _timed_stream(
    url: str, max_tokens: int, host: HostWait | None = None, waits: list | None = None
) -> tuple[float, list[float], list[str]]:
    """(request start, arrival time of every content event, their texts); with `host`, `waits`
    gets its run-queue waits read at the start and at each content event."""
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
        if host is not None and waits is not None:
            waits.append(host.read())
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
                        if host is not None and waits is not None:
                            waits.append(host.read())
    return start, times, texts


def _steal_s() -> float:
    """The host's steal of every CPU so far (seconds; NaN without /proc/stat): a virtual CPU the
    hypervisor does not run stalls its process with no run-queue wait to show for it."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()  # "cpu user nice system idle iowait irq softirq steal"
    except OSError:
        return float("nan")
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else float("nan")


def _softirq_threads() -> dict[str, int]:
    """The kernel's ksoftirqd threads (name: pid): a loopback packet whose processing the kernel
    deferred to them waits on their run queue before its reader sees it."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm", encoding="ascii") as fh:
                name = fh.read().strip()
        except OSError:
            continue
        if name.startswith("ksoftirqd/"):
            found[name] = int(pid)
    return found


class HostStall(HostWait):
    """The named processes' run-queue waits, the kernel's packet threads', their sum and the
    host's steal, read together. A token passes from the simulator through the kernel to the
    client, each of which the host may stall in turn: its lateness is bounded by their waits
    together, not by the larger one (beside load: first token 79 ms past its tolerance with the
    client waiting 47 ms and the simulator 57 ms)."""

    def __init__(self, **pids: int) -> None:
        super().__init__(**pids, **_softirq_threads())

    def read(self) -> dict[str, float]:
        waits = super().read()
        known = [w for w in waits.values() if w == w]
        return {**waits, "together": sum(known), "host steal": _steal_s()}


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]


def test_fixed_latency_first_token_and_gaps_on_absolute_deadlines():
    waits: list[dict[str, float]] = []
    with SimulatorProcess("--ttft", "0.15", "--itl", "0.01") as sim:
        asyncio.run(_timed_stream(sim.url, 2))  # warm the connection path once
        host = HostStall(client=os.getpid(), simulator=sim.proc.pid)
        start, times, texts = asyncio.run(_timed_stream(sim.url, 60, host, waits))
    assert len(times) == 60
    # each within its tolerance, or missed by no more than the host kept the client and the
    # simulator waiting for a CPU over that span (waits[0]: the start, waits[i + 1]: token i).
    # A span between two tokens is bracketed from the request's start: a stall before the first
    # token's read (which merges tokens into one read) shortens the gaps after it
    within(times[0] - start, 0.15, 0.01, waits[0], waits[1], "first token")
    # absolute deadlines: the last token is on time however the individual gaps jittered
    within(times[-1] - times[0], 59 * 0.01, 0.01, waits[0], waits[-1], "first to last token")
    within(statistics.median(_gaps(times)), 0.01, 0.002, waits[0], waits[-1], "median gap")


def test_tokens_per_chunk_groups_tokens_after_the_first():
    tok = SimTokenizer()
    waits: list[dict[str, float]] = []
    with SimulatorProcess("--ttft", "0.05", "--itl", "0.005", "--tokens-per-chunk", "4") as sim:
        host = HostStall(client=os.getpid(), simulator=sim.proc.pid)
        start, times, texts = asyncio.run(_timed_stream(sim.url, 21, host, waits))
    assert [len(tok.encode(t)) for t in texts] == [1, 4, 4, 4, 4, 4]
    # one chunk every 4 tokens' time (the middle gap of five: chunks 2 to 3)
    within(statistics.median(_gaps(times)), 4 * 0.005, 0.003, waits[0], waits[-1], "median gap")
    within(times[-1] - times[0], 20 * 0.005, 0.006, waits[0], waits[-1], "first to last chunk")


def test_engine_streams_grouped_chunks_too():
    tok = SimTokenizer()
    with SimulatorProcess("--time-scale", "0.1", "--tokens-per-chunk", "3") as sim:
        _, _, texts = asyncio.run(_timed_stream(sim.url, 10))
    assert [len(tok.encode(t)) for t in texts] == [1, 3, 3, 3]


def test_an_engine_step_that_makes_several_tokens_still_streams_whole_chunks():
    # a speculating engine makes 1 to 4 tokens a step: the handler woke with 5 of 4 wanted and
    # wrote a chunk of 3 and one of 1 ([1, 3, 1, 3, 3, 1, 3, 1, 3, 1] for 20 tokens); a chunk's
    # rest now waits for the next step
    tok = SimTokenizer()
    args = ("--time-scale", "0.1", "--tokens-per-chunk", "3", "--speculative-tokens", "3")
    with SimulatorProcess(*args) as sim:
        _, _, texts = asyncio.run(_timed_stream(sim.url, 20))
    assert [len(tok.encode(t)) for t in texts] == [1, 3, 3, 3, 3, 3, 3, 1]


def test_time_scale_speeds_the_engine_up_in_proportion():
    durations, waits = {}, {}
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
            host = HostStall(client=os.getpid(), simulator=sim.proc.pid)
            marks: list[dict[str, float]] = []
            start, times, _ = asyncio.run(_timed_stream(sim.url, 40, host, marks))
        durations[scale], waits[scale] = times[-1] - start, (marks[0], marks[-1])
    print("durations:", durations)
    # 40 steps of 10 ms, then of 2 ms (the first step prefills and samples the first token)
    within(durations["1"], 0.40, 0.03, *waits["1"], "40 steps at scale 1")
    within(durations["0.2"], 0.08, 0.02, *waits["0.2"], "40 steps at scale 0.2")
