"""Where a request's output tokens come from over time: the batching engine, a fixed-latency
timer, or nothing at all (echo). The HTTP layer sees one interface, `Backend.open()` giving a
`TokenSource`, so the way responses are written does not depend on the timing model (and fault
injection can wrap either side of this seam)."""

from __future__ import annotations

import asyncio
from typing import Protocol

from .config import EngineConfig, FixedLatency
from .engine import Engine, Sequence
from .stats import Occupancy, ServerStats


class TokenSource(Protocol):
    """One request's output as it becomes available."""

    async def wait(self, want: int) -> int:
        """Return once at least `want` tokens (capped at the output length) exist: how many do."""

    def close(self) -> None:
        """The response is over (or the client left): release whatever the request holds."""


class Backend(Protocol):
    """A timing model for generation."""

    def open(self, prompt_tokens: int, output_tokens: int, arrival: float) -> TokenSource:
        """Start generating; `arrival` is the loop time the request's handler began."""

    def occupancy(self) -> Occupancy: ...


# asyncio's timers fire late by 0 to ~1.5 ms (epoll waits whole milliseconds, rounded up, plus
# wake-up latency); arming fixed-latency deadlines this much early centres them on time.
TIMER_LEAD = 0.0005


def _set_done(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


async def sleep_until(loop: asyncio.AbstractEventLoop, when: float) -> None:
    """Sleep until about the absolute loop time `when` (absolute, so delays never accumulate)."""
    when -= TIMER_LEAD
    if when <= loop.time():
        return
    fut = loop.create_future()
    handle = loop.call_at(when, _set_done, fut)
    try:
        await fut
    finally:
        handle.cancel()


class _EngineSource:
    __slots__ = ("seq", "engine", "wait")

    def __init__(self, seq: Sequence, engine: Engine) -> None:
        self.seq = seq
        self.engine = engine
        self.wait = seq.wait

    def close(self) -> None:
        if not self.seq.finished:
            self.engine.abort(self.seq)


class EngineBackend:
    """Requests share the continuous-batching engine."""

    def __init__(self, config: EngineConfig, stats: ServerStats, seed: int = 0) -> None:
        self.engine = Engine(config, stats, seed)

    def open(self, prompt_tokens: int, output_tokens: int, arrival: float) -> TokenSource:
        seq = Sequence(prompt_tokens, output_tokens, arrival)
        self.engine.add(seq)
        return _EngineSource(seq, self.engine)

    def occupancy(self) -> Occupancy:
        return self.engine.occupancy()


class _FixedSource:
    __slots__ = ("backend", "start", "prompt", "total", "delivered", "closed")

    def __init__(self, backend: "FixedLatencyBackend", start: float, prompt: int, total: int) -> None:
        self.backend = backend
        self.start = start
        self.prompt = prompt
        self.total = total
        self.delivered = 0
        self.closed = False

    async def wait(self, want: int) -> int:
        b = self.backend
        want = min(want, self.total)
        if want <= self.delivered:
            return self.delivered
        ttft, itl = b.latency.ttft, b.latency.itl
        loop = b.loop
        await sleep_until(loop, self.start + ttft + (want - 1) * itl)
        elapsed = loop.time() - self.start - ttft
        due = self.total if itl <= 0 else min(self.total, 1 + int(elapsed / itl))
        got = max(want, due)
        stats = b.stats
        if self.delivered == 0:
            stats.prompt_tokens += self.prompt
            stats.ttft.observe(elapsed + ttft)
            stats.queue_time.observe(0.0)
            gaps = got - 1
        else:
            gaps = got - self.delivered
        if gaps:
            stats.itl.observe(itl, gaps)
        stats.generation_tokens += got - self.delivered
        self.delivered = got
        return got

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.backend.in_flight -= 1


class FixedLatencyBackend:
    """Every request alone: first token `ttft` after arrival, then one every `itl`, no batching.
    Deadlines are absolute (arrival + ttft + i * itl), so measured gaps are true to the timer's
    resolution (about a millisecond) however late Python runs in between."""

    def __init__(self, latency: FixedLatency, stats: ServerStats) -> None:
        self.latency = latency
        self.stats = stats
        self.in_flight = 0
        self.loop: asyncio.AbstractEventLoop | None = None

    def open(self, prompt_tokens: int, output_tokens: int, arrival: float) -> TokenSource:
        self.loop = asyncio.get_running_loop()
        self.in_flight += 1
        return _FixedSource(self, arrival, prompt_tokens, output_tokens)

    def occupancy(self) -> Occupancy:
        return Occupancy(self.in_flight, 0, 0.0)


class _EchoSource:
    __slots__ = ("backend", "total", "closed")

    def __init__(self, backend: "EchoBackend", total: int) -> None:
        self.backend = backend
        self.total = total
        self.closed = False

    async def wait(self, want: int) -> int:
        return self.total

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.backend.in_flight -= 1


class EchoBackend:
    """No model delays: every token exists the moment the request arrives."""

    def __init__(self, stats: ServerStats) -> None:
        self.stats = stats
        self.in_flight = 0

    def open(self, prompt_tokens: int, output_tokens: int, arrival: float) -> TokenSource:
        stats = self.stats
        stats.prompt_tokens += prompt_tokens
        stats.generation_tokens += output_tokens
        self.in_flight += 1
        return _EchoSource(self, output_tokens)

    def occupancy(self) -> Occupancy:
        return Occupancy(self.in_flight, 0, 0.0)
