"""Which requests a level measures, followed from their start to their end, on the master.

A level's warm-up and measured requests are its first `LevelCounts.selected` to start (`steps`).
Load processes report each request's start as it is sent (a worker with its next report, with
the time up to which it has reported them all) and its row when it ends; `LevelTally` keeps, per
level, the earliest starts up to that number and which of them have ended, so the level can end
as soon as every one of them has ended, and not before: a slow or failing request among them
holds the level instead of dropping out of it.

The starts of several workers arrive in different reports, so a start earlier than the ones
held may still come; the selection is final only once every load process has reported its
starts past the last one held (`reported_until`). A request is known by its start and its load
process, so the requests of a worker that was lost (they will never end) stop holding a level.

`LevelFollower` also keeps, per load process, the starts it reported whose rows have not come:
when it is lost, those are its requests in flight, abandoned (`lost`); and per level, how many
each process started, so that a trace level whose share of a lost process will never be sent
stops waiting for it (`forgo`).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from .steps import LevelProgress

Started = tuple[float, str]  # (start_ts, load process)


@dataclass
class LevelTally:
    """One level's starts and ends as they are reported (see the module docstring)."""

    selected: int  # warm-up + measured: how many of the first starts the level follows
    started: int = 0
    _first: list[Started] = field(default_factory=list)  # the earliest starts, at most `selected`
    _ended: set[Started] = field(default_factory=set)  # of those (or any, until it is full)
    _lost: set[str] = field(default_factory=set)  # load processes lost: theirs will never end
    # how many of `_first` are in `_ended`, kept as they change: `progress` is asked several times
    # a second, and counting them there walked every start of the level each time
    _first_ended: int = 0
    by_worker: dict[str, int] = field(default_factory=dict)  # starts per load process
    unsent: int = 0  # requests it follows that will never start (`forgo`)

    def start(self, ts: float, worker: str) -> None:
        self.started += 1
        self.by_worker[worker] = self.by_worker.get(worker, 0) + 1
        first, started = self._first, (ts, worker)
        if len(first) < self.selected:
            bisect.insort(first, started)
        elif started < first[-1]:  # a start reported late by a slower process
            bisect.insort(first, started)
            dropped = first.pop()
            if dropped in self._ended:  # every copy of it in `first` was counted as ended
                self._first_ended -= 1 + self._copies(dropped)
                self._ended.discard(dropped)
        else:
            return
        if started in self._ended:  # its end was reported first
            self._first_ended += 1

    def end(self, start_ts: float, worker: str) -> None:
        first, started = self._first, (start_ts, worker)
        if len(first) < self.selected or started <= first[-1]:
            if started not in self._ended:
                self._ended.add(started)
                self._first_ended += self._copies(started)

    def _copies(self, started: Started) -> int:
        """How many of `_first` are this start (one, unless two requests of a process started at
        the same instant; none while it has not been reported)."""
        first = self._first
        at = end = bisect.bisect_left(first, started)  # (one search: 1.09 -> 0.74 µs)
        while end < len(first) and first[end] == started:
            end += 1
        return end - at

    def rank(self, ts: float, worker: str, reported_until: float = math.inf) -> int | None:
        """Where a start stands among the level's first `selected` to start (0-based), once that
        is final (every process has reported its starts up to it); None before, or when it is
        not among them."""
        if ts > reported_until:
            return None
        first, started = self._first, (ts, worker)
        at = bisect.bisect_left(first, started)
        return at if at < len(first) and first[at] == started else None

    def lose(self, worker: str) -> None:
        self._lost.add(worker)

    def forgo(self, count: int) -> None:
        """`count` of the requests the level follows will never start (a trace share of a lost
        process): it follows that many fewer."""
        count = min(count, self.selected - len(self._first))
        if count > 0:
            self.selected -= count
            self.unsent += count

    def progress(self, reported_until: float = math.inf) -> LevelProgress:
        """Started requests, and how many of the selected ones are not known to have ended; until
        every process has reported its starts past the last selected one, at least one is open."""
        done = self._first_ended
        if self._lost:  # (rare: a worker lost mid-test) theirs will never end, and count as done
            ended, lost = self._ended, self._lost
            done += sum(1 for s in self._first if s[1] in lost and s not in ended)
        open_ = self.selected - done
        full = len(self._first) >= self.selected
        if full and reported_until < self._first[-1][0]:
            open_ = max(open_, 1)
        return LevelProgress(self.started, open_, self.unsent)


class LevelFollower:
    """Every level's tally, and how far each load process has reported its starts."""

    def __init__(self) -> None:
        self.tallies: list[LevelTally] = []
        self.reported_until: dict[str, float] = {}  # worker -> its starts are all in up to then
        # worker -> {start: its starts reported less its rows}: positive while in flight (a row
        # may come before its start is taken, in a local run: then negative until it is)
        self._open: dict[str, dict[float, int]] = {}

    def level_started(self, selected: int) -> None:
        self.tallies.append(LevelTally(selected))

    def started(self, level: int, ts: float, worker: str) -> None:
        self.tallies[level].start(ts, worker)
        self._count(worker, ts, 1)

    def ended(self, level: int, start_ts: float, worker: str) -> None:
        self.tallies[level].end(start_ts, worker)
        self._count(worker, start_ts, -1)

    def abandoned(self, worker: str, starts: list[float]) -> None:
        """Requests `worker` stopped before they ended (they will have no row)."""
        counts = self._open.get(worker, {})
        for ts in starts:
            if counts.get(ts, 0) > 0:
                self._count(worker, ts, -1)

    def _count(self, worker: str, ts: float, step: int) -> None:
        counts = self._open.setdefault(worker, {})
        left = counts.get(ts, 0) + step
        if left:
            counts[ts] = left
        else:
            del counts[ts]

    def in_flight(self, worker: str) -> list[float]:
        """The starts `worker` reported whose rows have not come, in order."""
        counts = self._open.get(worker, {})
        return sorted(ts for ts, n in counts.items() for _ in range(max(n, 0)))

    def open_starts(self) -> list[float]:
        """The starts of every request reported started whose row has not come."""
        return [ts for counts in self._open.values() for ts, n in counts.items() for _ in range(n)]

    def rank(
        self, level: int, ts: float, worker: str, workers: list[str] | None = None
    ) -> int | None:
        """`LevelTally.rank` of `level`, as far as every one of `workers` has reported (None: a
        single load process)."""
        return self.tallies[level].rank(ts, worker, self._until(workers))

    def _until(self, workers: list[str] | None) -> float:
        if workers is None:
            return math.inf
        return min((self.reported_until.get(w, -math.inf) for w in workers), default=math.inf)

    def reported(self, worker: str, until: float) -> None:
        self.reported_until[worker] = until

    def lost(self, worker: str) -> list[float]:
        """`worker` is gone: its requests will never end. Returns the starts of those it had in
        flight (reported, with no row), which no longer hold any level."""
        for tally in self.tallies:
            tally.lose(worker)
        in_flight = self.in_flight(worker)
        self._open.pop(worker, None)
        return in_flight

    def forgo(self, level: int, worker: str, share: int) -> int:
        """A lost `worker` was to start `share` of `level`'s requests (a trace segment's share):
        those it had not started will never start. Returns how many."""
        tally = self.tallies[level]
        unsent = max(share - tally.by_worker.get(worker, 0), 0)
        tally.forgo(unsent)
        return unsent

    def progress(self, level: int, workers: list[str] | None = None) -> LevelProgress:
        """`level`'s progress as far as every one of `workers` has reported (None: a single load
        process, whose starts are all in)."""
        return self.tallies[level].progress(self._until(workers))
