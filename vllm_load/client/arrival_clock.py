"""Open-loop sending (--rates, --trace): a load process's users take turns at its arrivals.

The process's `Arrivals` holds its current schedule: a `workload.arrivals.ArrivalSchedule`
started at every rate level with the process's share of the level's rate, or a
`workload.trace_schedule.TraceSchedule` started on the process's share of a trace segment (the
run session's level message says which). A user that is free calls `next()`: it waits for its
turn at the schedule (one user at a time waits for the next arrival, so no user holds an arrival
far in the future when the level changes), sleeps until the arrival is due, and gets its time and,
for a trace, the request to send. The user's request then starts its clock at that time, not
when it is sent: an arrival that found no free user, or a user woken late, has been queueing on
the client, and that wait is inside the request's latency (the record's `queued_s` says how
much of it).
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any, Callable, Sequence

import gevent
import gevent.event
import gevent.lock

from ..workload.arrivals import ArrivalSchedule
from ..workload.trace_schedule import Scheduled, TraceSchedule
from .steal import STEAL, StealSample

#: seconds before an arrival that its user stops sleeping and yields until it is due: the hub's
#: poll sleeps in whole milliseconds, rounded up, so a timer for the due time itself fired 1 ms
#: late at the median (a trace replay's requests left 1.1 ms after their time, p50)
POLL_GRAIN = 0.0015
#: seconds before an arrival that its user's sleep is cut into steps of `WAKE_STEP`: on a virtual
#: machine, waking from a long idle sleep is sometimes late by several milliseconds (this 2-core
#: VM: `time.sleep` of 20-250 ms overshot by more than 5 ms 7 times in 1,100, up to 18 ms), and
#: short sleeps before the due time made that 2 in 1,100, up to 8 ms (measured interleaved); the
#: steps cost a few wake-ups of the hub per arrival that finds its process idle
WAKE_AHEAD = 0.012
WAKE_STEP = 0.001


class Arrivals:
    """One load process's arrivals, shared by its users (see the module docstring)."""

    def __init__(self) -> None:
        self.rates = ArrivalSchedule()
        self.trace = TraceSchedule()
        self.schedule: ArrivalSchedule | TraceSchedule = self.rates
        self.epoch = 0  # counts starts and stops: a waiter can tell its arrival was withdrawn
        self.taken = 0  # arrivals handed out: names the one a waiter prepared for
        self._turn = gevent.lock.Semaphore()  # the user waiting for the next arrival holds it
        self._changed = gevent.event.Event()  # set when the schedule starts or stops
        #: the machine's steal before the last arrival handed out was due (`steal.py`)
        self.waited_from: StealSample | None = None
        self._steal_reads: deque[StealSample] = deque(maxlen=64)  # while arrivals are awaited

    def start(self, rate: float, phase: float, kind: str) -> None:
        """A rate level's arrivals: this process's `rate` from now, constant ones `phase` late."""
        self.rates.start(rate, time.perf_counter(), phase, kind)
        self._switch(self.rates)

    def start_trace(self, requests: Sequence[Scheduled], at: float) -> None:
        """A trace segment: this process's share of its requests, from `at` (`perf_counter()`)."""
        self.trace.start(requests, at)
        self._switch(self.trace)

    def stop(self) -> None:
        """No more arrivals (the test drains or stops, or a closed-loop level starts) until the
        next `start`."""
        self.rates.stop()
        self.trace.stop()
        self._switch(self.schedule)

    def _switch(self, schedule: ArrivalSchedule | TraceSchedule) -> None:
        self.schedule = schedule
        self.epoch += 1
        self._changed.set()

    @staticmethod
    def _sleep(wait: float) -> float | None:
        """How long to sleep with `wait` seconds left before the arrival (None: for ever)."""
        if wait == math.inf:
            return None
        if wait > WAKE_AHEAD + WAKE_STEP:
            return wait - WAKE_AHEAD
        return min(wait - POLL_GRAIN, WAKE_STEP)

    def _note_steal(self) -> None:
        read = STEAL.sample()
        if read is not None and (not self._steal_reads or self._steal_reads[-1].at != read.at):
            self._steal_reads.append(read)

    def _steal_before(self, due: float) -> StealSample | None:
        """The last steal read at or before `due`: an arrival due while earlier ones were being
        handed out (a burst, or a stall) was late from then, before its own wait began."""
        for read in reversed(self._steal_reads):
            if read.at <= due:
                return read
        return self._steal_reads[0] if self._steal_reads else None

    def next(self, prepare: Callable[[Any], Any] | None = None) -> tuple[float, Any]:
        """Wait for this user's arrival: its `perf_counter()` time (it may be in the past) and
        what to send (a trace's request; None at a rate level), or what `prepare` made of that
        while the arrival was not yet due (made again if the schedule changed meanwhile)."""
        made: tuple[int, int, Any] | None = None  # (epoch, arrivals taken, prepared)
        with self._turn:
            while True:
                self._note_steal()  # up to the due time: the later, the fewer stalls it blames
                epoch, due = self.epoch, self.schedule.peek()
                ready = made is not None and made[:2] == (epoch, self.taken)
                if prepare is not None and due != math.inf and not ready:
                    made = (epoch, self.taken, prepare(self.schedule.upcoming()))
                    continue  # preparing took time: look at the schedule again
                wait = due - time.perf_counter()
                if wait > POLL_GRAIN:
                    self._changed.clear()
                    self._changed.wait(self._sleep(wait))
                elif wait > 0:
                    gevent.sleep(0)  # the hub polls without sleeping: I/O goes on meanwhile
                if self.epoch == epoch and time.perf_counter() >= due:
                    taken = self.schedule.take()
                    self.taken += 1
                    due, what = taken if isinstance(taken, tuple) else (taken, None)
                    self.waited_from = self._steal_before(due)
                    return due, what if made is None else made[2]
