"""`Arrivals.next` with `prepare`: what a user sends is made before its arrival is due, for the
arrival it will take, and made again when the schedule changes while it waits."""

from __future__ import annotations

import time
from dataclasses import dataclass

import gevent
import pytest

from vllm_load.client import arrival_clock
from vllm_load.client.arrival_clock import POLL_GRAIN, WAKE_AHEAD, WAKE_STEP, Arrivals
from vllm_load.client.steal import StealSample


@dataclass(frozen=True)
class Due:
    at: float
    name: str


def test_the_request_is_prepared_before_its_arrival_is_due():
    arrivals = Arrivals()
    start = time.perf_counter() + 0.05
    arrivals.start_trace([Due(0.0, "a"), Due(0.0, "b"), Due(0.03, "c")], start)
    made: list[tuple[str, float]] = []

    def prepare(request: Due) -> str:
        made.append((request.name, time.perf_counter()))
        return request.name.upper()

    got = [arrivals.next(prepare) for _ in range(3)]
    assert [what for _, what in got] == ["A", "B", "C"]  # two due at once are two requests
    assert [due for due, _ in got] == [start, start, start + 0.03]
    assert [name for name, _ in made] == ["a", "b", "c"]  # each made once
    assert made[0][1] < start and made[2][1] < start + 0.03  # before they were due
    assert all(time.perf_counter() >= due for due, _ in got)


def test_an_arrival_withdrawn_while_waiting_is_prepared_again_from_the_new_schedule():
    arrivals = Arrivals()
    arrivals.start_trace([Due(0.5, "old")], time.perf_counter())
    made: list[str] = []

    def prepare(request: Due) -> str:
        made.append(request.name)
        return request.name

    def restart() -> None:
        gevent.sleep(0.02)
        arrivals.start_trace([Due(0.02, "new")], time.perf_counter())

    gevent.spawn(restart)
    due, what = arrivals.next(prepare)
    assert what == "new" and made == ["old", "new"]


def test_a_rate_arrival_prepares_from_nothing_and_without_prepare_returns_nothing():
    arrivals = Arrivals()
    arrivals.start(200.0, 0.0, "constant")
    assert arrivals.next(lambda what: ("made", what))[1] == ("made", None)
    assert arrivals.next()[1] is None


def test_an_idle_wait_sleeps_once_then_in_short_steps_before_its_arrival(monkeypatch):
    """One long sleep to `WAKE_AHEAD` before the arrival, then sleeps of at most `WAKE_STEP`: a
    virtual machine's late wake-ups come after long idle sleeps (see `WAKE_AHEAD`)."""
    arrivals = Arrivals()
    start = time.perf_counter() + 0.1
    arrivals.start_trace([Due(0.0, "a")], start)
    # (seconds left to the arrival before the sleep, the sleep, seconds left after it)
    sleeps: list[tuple[float, float | None, float]] = []
    changed = arrivals._changed

    class Recorded:
        clear, set = changed.clear, changed.set

        def wait(self, timeout=None):
            before = start - time.perf_counter()
            woken = changed.wait(timeout)
            sleeps.append((before, timeout, start - time.perf_counter()))
            return woken

    monkeypatch.setattr(arrivals, "_changed", Recorded())
    due, what = arrivals.next()
    assert due == start and time.perf_counter() >= start
    (left, first, _), *steps = sleeps
    assert first == pytest.approx(left - WAKE_AHEAD, abs=1e-3)  # one sleep to 12 ms before
    # How many steps follow depends on how late the machine woke it, so the test checks the
    # rule itself: every wake before the arrival is followed by a short sleep, never a long one.
    for (_, _, after), (before, step, _) in zip(sleeps, steps):
        assert after > 0 and before <= after
        assert step is not None and step <= WAKE_STEP
    # the last wake is the arrival's, give or take a poll: the loop reads the clock for itself
    # after this wrapper's read, a few us later (a quiet fresh-clone .ci/run read 1.532 ms here,
    # where the loop's own read found no more than its 1.5 ms), so the wrapper's read is allowed
    # the time the loop takes to read again, held at 0.25 ms
    assert sleeps[-1][2] <= POLL_GRAIN + 0.00025
    assert all(before <= WAKE_AHEAD + WAKE_STEP for before, _, _ in steps)


def test_an_arrival_due_during_another_ones_wait_counts_the_hosts_steal_from_its_due_time(
    monkeypatch,
):
    """Each arrival's `waited_from` is the machine's last steal read before it was due: one due
    while the user before it was still being handed out (the host stalling the process past both)
    was late from then, so its window starts there, not when its own, later wait began."""
    reads: list[float] = []

    class Clock:
        def sample(self) -> StealSample:
            now = time.perf_counter()
            if not reads or now - reads[-1] >= 0.01:
                reads.append(now)
            return StealSample(0, (float(len(reads)),), reads[-1])

    monkeypatch.setattr(arrival_clock, "STEAL", Clock())
    arrivals = Arrivals()
    start = time.perf_counter() + 0.05
    arrivals.start_trace([Due(0.0, "a"), Due(0.0, "b"), Due(0.06, "c")], start)
    arrivals.next()
    first = arrivals.waited_from
    assert first is not None and first.at <= start  # read before "a" was due
    time.sleep(0.03)  # a stall: "b", due with "a", is taken 30 ms after it was due
    due, _ = arrivals.next()
    assert due == start and arrivals.waited_from == first  # its window starts before its due
    arrivals.next()  # "c", 60 ms later: read again, in its own wait, before it was due
    third = arrivals.waited_from
    assert third is not None and start < third.at <= start + 0.06 and third != first
