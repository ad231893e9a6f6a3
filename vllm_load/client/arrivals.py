"""Open-loop sending (--rates): a load process's users take turns at its arrival schedule.

The process's `Arrivals` holds its `workload.arrivals.ArrivalSchedule`, started at every level
with the process's share of the level's rate (the run session sends it). A user that is free
calls `next()`: it waits for its turn at the schedule (one user at a time waits for the next
arrival, so no user holds an arrival far in the future when the rate changes), sleeps until the
arrival is due, and gets its time. The user's request then starts its clock at that time, not
when it is sent: an arrival that found no free user, or a user woken late, has been queueing on
the client, and that wait is inside the request's latency (the record's `queued_s` says how
much of it).
"""

from __future__ import annotations

import time

import gevent.event
import gevent.lock

from ..workload.arrivals import ArrivalSchedule


class Arrivals:
    """One load process's arrivals, shared by its users (see the module docstring)."""

    def __init__(self) -> None:
        self.schedule = ArrivalSchedule()
        self._turn = gevent.lock.Semaphore()  # the user waiting for the next arrival holds it
        self._changed = gevent.event.Event()  # set when the schedule starts or stops

    def start(self, rate: float, phase: float, kind: str) -> None:
        """The level's arrivals: this process's `rate` from now, constant ones `phase` late."""
        self.schedule.start(rate, time.perf_counter(), phase, kind)
        self._changed.set()

    def stop(self) -> None:
        """No more arrivals (the test drains or stops) until the next `start`."""
        self.schedule.stop()
        self._changed.set()

    def next(self) -> float:
        """Wait for this user's arrival; its `perf_counter()` time (it may be in the past)."""
        with self._turn:
            while True:
                epoch, due = self.schedule.epoch, self.schedule.peek()
                wait = due - time.perf_counter()
                if wait > 0:
                    self._changed.clear()
                    self._changed.wait(None if wait == float("inf") else wait)
                if self.schedule.epoch == epoch and time.perf_counter() >= due:
                    return self.schedule.take()
