"""Where a request's output tokens come from over time: the batching engine, a fixed-latency
timer, or nothing at all (echo). The HTTP layer sees one interface, `Backend.open()` giving a
`TokenSource`, so the way responses are written does not depend on the timing model (and fault
injection can wrap either side of this seam)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Sequence as Ids
from typing import Callable, Protocol

from .config import EngineConfig, FixedLatency
from .counters import Occupancy, ServerStats
from .engine import Engine, Sequence
from .prefix_cache import block_hashes


class TokenSource(Protocol):
    """One request's output as it becomes available."""

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens the prefix cache spared it (known once it was first scheduled)."""

    async def wait(self, want: int) -> int:
        """Return once at least `want` tokens (capped at the output length) exist: how many do."""

    def close(self) -> None:
        """The response is over (or the client left): release whatever the request holds."""


class Backend(Protocol):
    """A timing model for generation."""

    #: whether `open` uses the prompt's token ids (prefix caching): the server only tokenizes
    #: prompts into ids, rather than counting them, for a backend that does
    wants_prompt_ids: bool

    def open(
        self,
        prompt_tokens: int,
        output_tokens: int,
        arrival: float,
        prompt_ids: Ids[int] | None = None,
    ) -> TokenSource:
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

    @property
    def cached_tokens(self) -> int:
        return self.seq.cached_tokens

    def close(self) -> None:
        if not self.seq.finished:
            self.engine.abort(self.seq)


class EngineBackend:
    """Requests share the continuous-batching engine."""

    def __init__(self, config: EngineConfig, stats: ServerStats, seed: int = 0) -> None:
        self.engine = Engine(config, stats, seed)
        self.wants_prompt_ids = config.enable_prefix_caching
        self._block_size = config.block_size

    def open(
        self,
        prompt_tokens: int,
        output_tokens: int,
        arrival: float,
        prompt_ids: Ids[int] | None = None,
        remote_tokens: int = 0,
    ) -> TokenSource:
        """`remote_tokens`: prompt tokens whose KV a prefill instance computed (--disagg)."""
        seq = Sequence(prompt_tokens, output_tokens, arrival, remote_tokens=remote_tokens)
        if prompt_ids is not None and self.wants_prompt_ids:
            seq.block_hashes = block_hashes(prompt_ids, self._block_size)
        self.engine.add(seq)
        return _EngineSource(seq, self.engine)

    def occupancy(self) -> Occupancy:
        return self.engine.occupancy()


Emit = Callable[[int], bool]  # hands out tokens up to n; True: wait for the connection to drain


class TokenClock:
    """One asyncio timer for every stream being pushed: at each due time it hands the stream its
    tokens through a plain call, `PushedStream.tick()`.

    Waking a coroutine per token (a future, a `TimerHandle` in asyncio's heap, a task step and a
    resume through the handler's frames) was about half of what the simulator spent per token
    at 1000 streams; a heap of tuples and one call per token is a fraction of that.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._heap: list[tuple[float, int, "PushedStream"]] = []
        self._order = itertools.count()  # ties go first come, first served
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = float("inf")

    def add(self, when: float, stream: "PushedStream") -> None:
        """Call `stream.tick()` at about loop time `when` (absolute)."""
        when -= TIMER_LEAD
        heapq.heappush(self._heap, (when, next(self._order), stream))
        if when < self._armed_for:
            self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for = self._heap[0][0]
        self._timer = self.loop.call_at(self._armed_for, self._fire)

    def _fire(self) -> None:
        self._timer, self._armed_for = None, float("inf")
        heap, now = self._heap, self.loop.time()
        while heap and heap[0][0] <= now:
            _, _, stream = heapq.heappop(heap)
            when = stream.tick()
            if when is not None:
                heapq.heappush(heap, (when - TIMER_LEAD, next(self._order), stream))
        if heap:
            self._arm()


class PushedStream(Protocol):
    def tick(self) -> float | None:
        """Hand out the tokens now due; the loop time of the next due token, or None when done."""


class _FixedSource:
    cached_tokens = 0  # no prefix cache without an engine
    __slots__ = (
        "backend",
        "start",
        "prompt",
        "total",
        "delivered",
        "closed",
        "_emit",
        "_step",
        "_done",
    )

    def __init__(
        self, backend: "FixedLatencyBackend", start: float, prompt: int, total: int
    ) -> None:
        self.backend = backend
        self.start = start
        self.prompt = prompt
        self.total = total
        self.delivered = 0
        self.closed = False
        self._emit: Emit | None = None
        self._step = 1
        self._done: asyncio.Future | None = None

    def _due(self, want: int) -> float:
        latency = self.backend.latency
        return self.start + latency.ttft + (want - 1) * latency.itl

    def _next_want(self) -> int:
        """The token the next push hands out up to: the first alone, then `_step` at a time."""
        return min(self.total, self.delivered + (1 if self.delivered == 0 else self._step))

    async def wait(self, want: int) -> int:
        want = min(want, self.total)
        if want <= self.delivered:
            return self.delivered
        await sleep_until(self.backend.loop, self._due(want))
        return self._advance(want)

    def push(self, emit: Emit, step: int) -> "asyncio.Future[None]":
        """Hand tokens to `emit` as they fall due, the first alone, then `step` at a time, from
        the backend's `TokenClock` (no coroutine wakes per token). The future is done when all
        were handed out, or `emit` asked for a drain (push again after it), or raised."""
        self._emit, self._step = emit, step
        self._done = done = self.backend.loop.create_future()
        self.backend.clock().add(self._due(self._next_want()), self)
        return done

    def tick(self) -> float | None:
        done, emit = self._done, self._emit
        # the handler has gone (client left), or push() has not run
        if self.closed or done is None or emit is None or done.done():
            return None
        try:
            drain = emit(self._advance(self._next_want()))
        except Exception as e:  # noqa: BLE001  (the connection's error, for the handler to see)
            done.set_exception(e)
            return None
        if self.delivered >= self.total or drain:
            done.set_result(None)
            return None
        return self._due(self._next_want())

    def _advance(self, want: int) -> int:
        """Count the tokens due now (at least `want`) as delivered; how many are."""
        b = self.backend
        ttft, itl = b.latency.ttft, b.latency.itl
        now = b.loop.time()
        elapsed = now - self.start - ttft
        due = self.total if itl <= 0 else min(self.total, 1 + int(elapsed / itl))
        # a late tick hands out what fell due in whole chunks of `_step` (the rest is due on the
        # next): an odd count would make the server split a chunk, [.., 4, 1, 4, 3] for 4 a chunk
        if due <= want or due >= self.total:
            got = max(want, due)
        else:
            got = want + (due - want) // self._step * self._step
        stats = b.stats
        if self.delivered == 0:
            stats.prompt_tokens += self.prompt
            stats.ttft.observe(elapsed + ttft)
            gaps = got - 1
        else:
            gaps = got - self.delivered
        if gaps:
            stats.itl.observe(itl, gaps)
        stats.generation_tokens += got - self.delivered
        self.delivered = got
        if got >= self.total:  # alone from arrival to end: no queue, no preemption, no cache
            start = self.start
            stats.finish_request(start, start, start + ttft, now, self.prompt, 0, got, 0)
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
        self.loop: asyncio.AbstractEventLoop  # the running loop, set by open(), before any use
        self._clock: TokenClock | None = None

    wants_prompt_ids = False

    def open(
        self,
        prompt_tokens: int,
        output_tokens: int,
        arrival: float,
        prompt_ids: Ids[int] | None = None,
    ) -> TokenSource:
        self.loop = asyncio.get_running_loop()
        self.in_flight += 1
        return _FixedSource(self, arrival, prompt_tokens, output_tokens)

    def clock(self) -> TokenClock:
        if self._clock is None or self._clock.loop is not self.loop:
            self._clock = TokenClock(self.loop)
        return self._clock

    def occupancy(self) -> Occupancy:
        return Occupancy(self.in_flight, 0, 0.0)


class _EchoSource:
    cached_tokens = 0
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

    wants_prompt_ids = False

    def open(
        self,
        prompt_tokens: int,
        output_tokens: int,
        arrival: float,
        prompt_ids: Ids[int] | None = None,
    ) -> TokenSource:
        stats = self.stats
        stats.prompt_tokens += prompt_tokens
        stats.generation_tokens += output_tokens
        self.in_flight += 1
        return _EchoSource(self, output_tokens)

    def occupancy(self) -> Occupancy:
        return Occupancy(self.in_flight, 0, 0.0)
