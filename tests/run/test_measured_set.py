"""`measured_set.LevelTally` keeps its count of ended selected requests as starts and ends arrive;
its progress is what counting them afresh every time (as it did) gives, in any order of reports."""

from __future__ import annotations

import bisect
import math
import random

import pytest

from vllm_load.run.measured_set import LevelTally


class Recount:
    """The tally as it was: `progress` counts the selected starts that ended, every time."""

    def __init__(self, selected: int) -> None:
        self.selected, self.started = selected, 0
        self.first: list[tuple[float, str]] = []
        self.ended: set[tuple[float, str]] = set()
        self.lost: set[str] = set()

    def start(self, ts: float, worker: str) -> None:
        self.started += 1
        if len(self.first) < self.selected:
            bisect.insort(self.first, (ts, worker))
        elif (ts, worker) < self.first[-1]:
            bisect.insort(self.first, (ts, worker))
            self.ended.discard(self.first.pop())

    def end(self, ts: float, worker: str) -> None:
        if len(self.first) < self.selected or (ts, worker) <= self.first[-1]:
            self.ended.add((ts, worker))

    def progress(self, until: float = math.inf) -> tuple[int, int]:
        done = sum(1 for s in self.first if s in self.ended or s[1] in self.lost)
        open_ = self.selected - done
        if len(self.first) >= self.selected and until < self.first[-1][0]:
            open_ = max(open_, 1)
        return self.started, open_


@pytest.mark.parametrize("seed", range(40))
def test_the_kept_count_is_the_recount_whatever_the_order_of_reports(seed):
    rng = random.Random(seed)
    selected = rng.choice([1, 3, 10, 40])
    workers = ["w1", "w2", "w3"][: rng.randint(1, 3)]
    # starts on a coarse grid, so that two requests of a process sometimes share one
    requests = [(rng.randint(0, 60) / 4, rng.choice(workers)) for _ in range(rng.randint(1, 120))]
    # each request's start is reported, and its end some time before or after it
    events = [("start", r, rng.random()) for r in requests]
    events += [
        ("end", r, at + rng.uniform(-0.3, 0.6)) for (_, r, at) in events if rng.random() < 0.8
    ]
    events.sort(key=lambda e: e[2])
    if rng.random() < 0.3:  # a worker lost somewhere in the middle
        events.insert(rng.randrange(len(events) + 1), ("lose", (0.0, rng.choice(workers)), 0.0))
    kept, recount = LevelTally(selected), Recount(selected)
    for kind, (ts, worker), _ in events:
        if kind == "lose":
            kept.lose(worker)
            recount.lost.add(worker)
        else:
            getattr(kept, kind)(ts, worker)
            getattr(recount, kind)(ts, worker)
        for until in (math.inf, 5.0):
            progress = kept.progress(until)
            assert (progress.started, progress.open) == recount.progress(until), (kind, ts, worker)
