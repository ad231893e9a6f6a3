"""Pacing request turnovers so that a burst of them cannot hold off the reading of streams.

A turn of the gevent hub polls the sockets once, then runs, back to back, every greenlet whose
socket was readable, each until it blocks again. A user whose stream has just ended does not
block soon: it records the request, reports it to Locust, builds and sends the next one (a
"turnover", 0.2-0.3 ms of CPU). Closed-loop users in front of a steady server stay in phase, so
their streams end in waves: at 1000 users and 512 tokens, about every 10 s some 1000 streams
ended within a few hundred ms, and hub turns of up to 300 ms polled no socket. The other streams'
bytes waited in the kernel meanwhile, where TCP merges segments that queue up: a first chunk read
together with the next token took that token's receive time, ITLs (20 ms, 40 ms, ...) late.

The pacer lets at most `budget` seconds of turnovers run per hub turn. A user past that waits,
in a first-come queue, for the next turn, which starts with the queue: the hub polls the
sockets in between, so reads wait at most about a budget. The wait is client-side queueing of the
user's next request, whose clock has started: it counts in that request's latency (TTFT, E2E)
and time in flight, as a wait for a free connection would.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from gevent import get_hub
from gevent.hub import Waiter

TURN_BUDGET = 0.002  # seconds of turnovers per hub turn: what they may add to a read's wait


class TurnoverPacer:
    """A process's users call `wait()` before each request turnover."""

    def __init__(self, budget: float = TURN_BUDGET) -> None:
        self.budget = budget
        self._turn_start = time.perf_counter()
        self._queue: deque[Waiter[None]] = deque()
        self._watcher: Any = None
        # keeps the hub from blocking in its poll while anyone is queued
        self._idle: Any = None

    def wait(self) -> bool:
        """Return at once if this hub turn has budget left and nobody is queued, else at the next
        turn with budget for this caller; True if the caller was queued."""
        if self._idle is None:
            # a check watcher runs right after each poll of the sockets: the start of a turn
            loop = get_hub().loop
            self._watcher = loop.check(ref=False)
            self._watcher.start(self._new_turn)
            self._idle = loop.idle(ref=False)
            self._turn_start = time.perf_counter()
        if not self._queue and time.perf_counter() - self._turn_start < self.budget:
            return False
        waiter: Waiter[None] = Waiter()
        self._queue.append(waiter)
        if not self._idle.active:
            self._idle.start(_nothing)
        try:
            waiter.get()
        except BaseException:  # killed while queued (the test stopping): leave the queue
            if waiter in self._queue:
                self._queue.remove(waiter)
            raise
        return True

    def _new_turn(self) -> None:
        """Start a turn: release queued users, one at a time, while the budget lasts."""
        start = self._turn_start = time.perf_counter()
        queue = self._queue
        while queue and time.perf_counter() - start < self.budget:
            queue.popleft().switch(None)  # runs that user until it blocks again
        idle = self._idle
        assert idle is not None  # this runs on the watcher wait() started along with it
        if not queue and idle.active:
            idle.stop()

    @property
    def queued(self) -> int:
        return len(self._queue)


def _nothing() -> None:
    pass


PACER = TurnoverPacer()
