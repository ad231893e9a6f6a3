"""Wall-clock times for `perf_counter()` readings.

A record's `start_ts` is wall-clock time (it lines up with steps.csv, the server's logs and
its traces) while its latencies are `perf_counter()` differences. Reading both clocks for every
request leaves a gap between the two reads in which the OS may preempt the process: then
`start_ts + ttft` is off by the preemption (tens of µs or more on a busy machine). Converting
one `perf_counter()` reading with a per-process offset cannot be split like that. The offset
is re-anchored every few seconds (so NTP slewing of the wall clock is followed) from the
tightest of a few paired reads.
"""

from __future__ import annotations

import time

REANCHOR_SECONDS = 5.0
_PAIRED_READS = 5


class WallClock:
    """Maps `perf_counter()` readings to `time.time()` seconds."""

    __slots__ = ("_offset", "_next_anchor")

    def __init__(self) -> None:
        self._offset = 0.0
        self._next_anchor = -1.0

    def _anchor(self) -> None:
        best_gap, offset = None, 0.0
        for _ in range(_PAIRED_READS):
            before = time.perf_counter()
            wall = time.time()
            after = time.perf_counter()
            if best_gap is None or after - before < best_gap:
                best_gap, offset = after - before, wall - (before + after) / 2
        self._offset = offset
        self._next_anchor = time.perf_counter() + REANCHOR_SECONDS

    def wall(self, perf: float) -> float:
        """The `time.time()` value at the moment `perf_counter()` read `perf`."""
        if perf >= self._next_anchor:
            self._anchor()
        return perf + self._offset
