"""When a trace's requests are due (--trace): one load process's share of a trace segment, pure.

The master starts every load process on the same segment at the same wall time; each takes its
share of the segment's requests (`Trace.share`: every P-th, so the shares interleave into the
whole trace) and hands them out in order, each due at the segment's start plus its time in the
trace. A request is due at its time whether or not a user is free then: the wait for one is the
client's, inside the request's latency (`queued_s`), never a shift of the schedule.

Times are whatever clock the caller gives; nothing here sleeps or reads a clock.
"""

from __future__ import annotations

import math
from typing import Protocol, Sequence


class Scheduled(Protocol):
    """A trace request as far as its schedule goes: its time from the segment's start."""

    @property
    def at(self) -> float: ...


class TraceSchedule:
    """One load process's share of a trace segment (see the module docstring); the same
    `start`/`peek`/`take`/`stop` as `workload.arrivals.ArrivalSchedule`, but `take` also says
    what to send."""

    def __init__(self) -> None:
        self._requests: tuple[Scheduled, ...] = ()
        self._next = 0
        self._at = math.inf

    def start(self, requests: Sequence[Scheduled], at: float) -> None:
        """The segment's requests (this process's share, in order) from `at` on."""
        self._requests, self._next, self._at = tuple(requests), 0, at

    def stop(self) -> None:
        self._requests, self._next = (), 0

    @property
    def left(self) -> int:
        """Requests not handed out yet."""
        return len(self._requests) - self._next

    def peek(self) -> float:
        if self._next >= len(self._requests):
            return math.inf
        return self._at + self._requests[self._next].at

    def upcoming(self) -> Scheduled | None:
        """The request `take` hands out next (None: none is left)."""
        return self._requests[self._next] if self._next < len(self._requests) else None

    def take(self) -> tuple[float, Scheduled]:
        """The next request's due time and the request; the schedule moves on."""
        request = self._requests[self._next]
        self._next += 1
        return self._at + request.at, request
