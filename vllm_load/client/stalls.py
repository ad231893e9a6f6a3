"""Failing streams that have gone quiet (--stall-timeout), with one timer per process.

A gevent socket with a timeout arms and cancels a `gevent.Timeout` around every wait: at 1000
streams that is one per chunk and ~9 % of the profile samples. Stream reads wait without one;
instead each stream notes when it last got bytes, and a timer in the hub (every 0.1 s) throws
`socket.timeout` into the greenlet of any stream quiet for longer than its stall timeout, as a
timed-out read would have. The throw happens inside the timer's callback, so it can only land
in a greenlet that is still parked on that very stream.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Any

from gevent import get_hub, getcurrent

if TYPE_CHECKING:
    from greenlet import greenlet

CHECK_SECONDS = 0.1


class StallWatch:
    """The streams of this process being read, and when each last got bytes."""

    def __init__(self) -> None:
        # greenlet -> [last bytes (perf_counter), stall timeout (s)]
        self._marks: dict[greenlet, list[float]] = {}
        self._timer: Any = None

    def watch(self, stall_timeout: float) -> list[float]:
        """Watch the calling greenlet's stream; returns the mark whose [0] the reader sets to the
        perf_counter() time of every read."""
        mark = [time.perf_counter(), stall_timeout]
        self._marks[getcurrent()] = mark
        if self._timer is None:
            self._timer = get_hub().loop.timer(CHECK_SECONDS, CHECK_SECONDS, ref=False)
            self._timer.start(self._check)
        return mark

    def forget(self) -> None:
        self._marks.pop(getcurrent(), None)

    def _check(self) -> None:
        now = time.perf_counter()
        stalled = [(glet, mark) for glet, mark in self._marks.items() if now - mark[0] > mark[1]]
        for glet, mark in stalled:
            if self._marks.get(glet) is mark:
                del self._marks[glet]
                glet.throw(socket.timeout(f"no bytes for {mark[1]:g} s"))


STALLS = StallWatch()
