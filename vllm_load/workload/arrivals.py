"""When open-loop requests are due (--rates): one load process's arrival times, pure.

Each of the P load processes generates its share of the rate, rate / P. A Poisson process split
evenly is still Poisson, and P independent Poisson processes at rate / P add up to one at the
rate, so with `poisson` arrivals every process draws its own exponential gaps. With `constant`
arrivals every process spaces its arrivals P / rate apart and starts `phase` of a gap late
(process i of P: phase i / P), so the processes' arrivals interleave into one even stream (as
evenly as their clocks agree on the level's start: within the few milliseconds a message takes).

Times are whatever clock the caller gives (`perf_counter()` seconds in a load process); nothing
here sleeps or reads a clock, so the schedule is tested on its own.
"""

from __future__ import annotations

import math
import random

KINDS = ("poisson", "constant")


class ArrivalSchedule:
    """The arrival times of one load process at its share of the current level's rate.

    `start(rate, at)` begins a level's arrivals at `at` (a new level forgets the arrivals the
    last one had not handed out); `peek()` is the next arrival's time, `take()` hands it out and
    moves on. Stopped (or never started), the next arrival is at infinity.
    """

    def __init__(self, kind: str = "poisson", seed: int | None = None) -> None:
        self.kind = _checked(kind)
        self.rate = 0.0
        self.epoch = 0  # counts starts and stops: a waiter can tell its arrival was withdrawn
        self._rng = random.Random(seed)
        self._next = math.inf

    def start(self, rate: float, at: float, phase: float = 0.0, kind: str | None = None) -> None:
        """Arrivals at `rate` per second from `at` on (`phase`, in [0, 1), shifts constant ones)."""
        if kind is not None:  # a new test (web UI) may change the kind
            self.kind = _checked(kind)
        self.rate = rate
        self.epoch += 1
        if rate <= 0:
            self._next = math.inf
        elif self.kind == "constant":
            self._next = at + (phase % 1.0) / rate
        else:  # memoryless: the first arrival after `at` is an exponential gap away
            self._next = at + self._rng.expovariate(rate)

    def stop(self) -> None:
        """No more arrivals until the next `start`."""
        self.start(0.0, 0.0)

    def peek(self) -> float:
        return self._next

    def upcoming(self) -> None:
        """What the next arrival asks to send: nothing but a time (see `TraceSchedule`)."""
        return None

    def take(self) -> float:
        """The next arrival's time, handed out; the schedule moves on to the one after it."""
        due = self._next
        if self.rate > 0:
            gap = 1.0 / self.rate if self.kind == "constant" else self._rng.expovariate(self.rate)
            self._next = due + gap
        return due


def _checked(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"arrivals must be one of {', '.join(KINDS)}, got {kind!r}")
    return kind


def process_share(rate: float, processes: int, index: int) -> tuple[float, float]:
    """(rate, phase) of load process `index` of `processes` for a test at `rate` requests/s."""
    processes = max(processes, 1)
    return rate / processes, (index % processes) / processes
