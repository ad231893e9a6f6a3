"""Fixed-latency sources pushing their tokens from one shared timer (`TokenClock`) instead of
waking a coroutine per token: the same schedule, drains, errors and departures."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from support.host_wait import HostWait, within

from vllm_load.sim.backends import TIMER_LEAD, FixedLatencyBackend
from vllm_load.sim.config import FixedLatency
from vllm_load.sim.counters import ServerStats

TTFT, ITL = 0.05, 0.01


def _backend() -> FixedLatencyBackend:
    return FixedLatencyBackend(FixedLatency(TTFT, ITL), ServerStats())


def test_three_streams_get_their_tokens_on_their_own_absolute_schedules():
    async def main():
        backend = _backend()
        loop = asyncio.get_running_loop()
        calls = {0: [], 1: [], 2: []}
        note()  # the first span starts here
        sources, pushes = [], []
        for i in range(3):
            source = backend.open(10, 12, loop.time() + 0.003 * i)
            sources.append(source)
            pushes.append(
                source.push(
                    lambda got, i=i: (
                        calls[i].append((got, loop.time(), waits[-1], note())) and False
                    ),
                    4,
                )
            )
        await asyncio.gather(*pushes)
        return backend, sources, calls

    host = HostWait(loop=os.getpid())
    waits: list[dict[str, float]] = []

    def note() -> dict[str, float]:
        """The loop's run-queue wait now, kept as the start of the next call's span."""
        waits.append(host.read())
        return waits[-1]

    backend, sources, calls = asyncio.run(main())
    assert backend.stats.generation_tokens == 36
    assert backend.stats.prompt_tokens == 30
    for i, seen in calls.items():
        start = sources[i].start
        due = lambda token: start + TTFT + (token - 1) * ITL  # noqa: E731
        got = [g for g, *_ in seen]
        # the first token alone, then 4 at a time, up to 12, none before it was due; a tick late
        # by an ITL also hands out the tokens that fell due meanwhile
        wants = [min(12, before + (4 if before else 1)) for before in [0, *got[:-1]]]
        assert all(w <= g for w, g in zip(wants, got)) and got[-1] == 12, (i, got)
        for g, (_, at, *_) in zip(got, seen):
            assert due(g) - TIMER_LEAD - 0.001 <= at, (i, g, at - due(g))  # never early
        for want, (_, at, before, after) in zip(wants, seen):
            # on time within 8 ms, or late by no more than the host kept the loop waiting since
            # the call before
            within(
                at - start,
                due(want) - start,
                0.008,
                before,
                after,
                f"stream {i} token {want} (got {got})",
            )
        # each tick on time: tokens 1, 5, 9, 12 (the last group cut short)
        assert got == [1, 5, 9, 12]


def test_a_push_stops_for_a_drain_and_resumes_where_it_was():
    async def main():
        loop = asyncio.get_running_loop()
        backend = _backend()
        source = backend.open(1, 6, loop.time())
        first, then = [], []
        # the buffer fills once 2 tokens are out
        await source.push(lambda got: first.append((got, loop.time())) or got >= 2, 1)
        await source.push(lambda got: then.append((got, loop.time())) or False, 1)
        return source.start, backend.stats, first, then

    host = HostWait(loop=os.getpid())
    before = host.read()
    start, stats, first, then = asyncio.run(main())
    after = host.read()
    got = [g for g, _ in first + then]
    # the first push stopped at the token that asked for the drain, the second went on from there
    # to the end, every token handed out and counted once, none before it was due
    assert [g >= 2 for g, _ in first] == [False] * (len(first) - 1) + [True], first
    assert then and got == sorted(set(got)) and got[-1] == 6, got
    assert stats.generation_tokens == 6 and stats.prompt_tokens == 1
    due = lambda token: start + TTFT + (token - 1) * ITL  # noqa: E731
    assert all(due(g) - TIMER_LEAD - 0.001 <= at for g, at in first + then), (start, first, then)
    # each tick on time hands out one token: [1, 2], then 3 to 6; a tick an ITL late hands out
    # the tokens due by then together, and only where the host kept the loop waiting that long
    late = max(at - due(g_before + 1) for g_before, (_, at) in zip([0, *got], first + then))
    within(
        late,
        0.0,
        ITL,
        before,
        after,
        f"latest tick (handed out {got}, {len(first)} before the drain)",
    )
    assert [g for g, _ in first] == [1, 2] and got == [1, 2, 3, 4, 5, 6]


def test_an_error_in_the_write_reaches_the_handler_and_a_closed_source_gets_no_more_tokens():
    async def main():
        backend = _backend()
        loop = asyncio.get_running_loop()
        failing = backend.open(1, 6, loop.time())

        def reset(got):
            raise ConnectionResetError("the client closed the connection")

        with pytest.raises(ConnectionResetError):
            await failing.push(reset, 1)
        leaving = backend.open(1, 50, loop.time())
        seen = []
        pushed = leaving.push(lambda got: seen.append(got) or False, 1)
        await asyncio.sleep(TTFT + 2.5 * ITL)
        leaving.close()  # the handler's `finally` when the client has gone
        pushed.cancel()
        count = len(seen)
        await asyncio.sleep(5 * ITL)
        return count, seen, backend

    count, seen, backend = asyncio.run(main())
    assert 2 <= count <= 4 and len(seen) == count
    assert backend.in_flight == 1  # the failing source was never closed here; the leaving one was


def test_a_late_tick_hands_out_whole_chunks():
    # the loop held up past token 9's due time by the write of token 5: the tick that hands out 9
    # runs when 10 or more are due; it hands out 9 (then 13, ...), never a count between chunks,
    # which the server would write as a chunk of 4 and one of 1 (CI, 2026-11-29: [1, 4, 4, 4, 1,
    # 4, 3] for 21 tokens 4 a chunk, on a loaded machine)
    async def main():
        loop = asyncio.get_running_loop()
        backend = _backend()
        source = backend.open(1, 20, loop.time())
        got = []

        def emit(n: int) -> bool:
            got.append(n)
            if n == 5:
                time.sleep(5.5 * ITL)  # 4 ITLs to token 9's due time, and 1.5 past it
            return False

        await source.push(emit, 4)
        return got, backend.stats

    got, stats = asyncio.run(main())
    assert got == [1, 5, 9, 13, 17, 20], got
    assert stats.generation_tokens == 20
