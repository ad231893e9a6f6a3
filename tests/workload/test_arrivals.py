"""The open-loop arrival schedule: Poisson statistics, constant spacing, the per-process split."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from vllm_load.workload.arrivals import (
    PROCESSES,
    ArrivalProcess,
    ArrivalSchedule,
    arrivals_help,
    process_share,
)


def arrivals(schedule: ArrivalSchedule, n: int) -> np.ndarray:
    return np.array([schedule.take() for _ in range(n)])


def test_poisson_gaps_are_exponential_at_the_rate():
    n, rate = 100_000, 50.0
    schedule = ArrivalSchedule("poisson", seed=1)
    schedule.start(rate, at=10.0)
    times = arrivals(schedule, n)
    gaps = np.diff(np.concatenate([[10.0], times]))
    # the mean gap's relative standard error is 1/sqrt(n) = 0.32 %: 1 % is over 3 of them
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.01)
    # an exponential's standard deviation equals its mean (CoV 1); its standard error ~ 0.45 %
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.02)
    assert stats.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue > 0.001
    # arrivals per second are Poisson: variance equals mean (index of dispersion 1)
    counts = np.bincount(((times - 10.0) // 1.0).astype(int))[:-1]
    assert counts.mean() == pytest.approx(rate, rel=0.02)
    assert counts.var(ddof=1) / counts.mean() == pytest.approx(1.0, abs=0.15)


def test_constant_arrivals_are_evenly_spaced_and_shifted_by_their_phase():
    schedule = ArrivalSchedule("constant")
    schedule.start(4.0, at=100.0, phase=0.5)
    assert list(arrivals(schedule, 4)) == [100.125, 100.375, 100.625, 100.875]


def test_each_process_gets_its_share_and_constant_ones_interleave():
    rate, processes = 100.0, 4
    shares = [process_share(rate, processes, i) for i in range(processes)]
    assert shares == [(25.0, 0.0), (25.0, 0.25), (25.0, 0.5), (25.0, 0.75)]
    merged = []
    for share, phase in shares:
        schedule = ArrivalSchedule("constant")
        schedule.start(share, at=0.0, phase=phase)
        merged += list(arrivals(schedule, 250))
    gaps = np.diff(np.sort(merged))
    assert gaps == pytest.approx(np.full(len(gaps), 1 / rate))  # one even stream at the rate


def test_poisson_processes_split_evenly_add_up_to_one_at_the_rate():
    rate, processes, horizon = 200.0, 4, 200.0
    merged = []
    for i in range(processes):
        share, phase = process_share(rate, processes, i)
        schedule = ArrivalSchedule("poisson", seed=100 + i)
        schedule.start(share, at=0.0, phase=phase)
        times = arrivals(schedule, int(share * horizon * 1.2))
        merged += list(times[times < horizon])
    gaps = np.diff(np.sort(merged))
    # 40,000 arrivals: the count's relative standard deviation is 0.5 %, the gaps' CoV error 0.5 %
    assert len(merged) / horizon == pytest.approx(rate, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)
    assert stats.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue > 0.001


def test_a_new_level_restarts_the_schedule_and_stop_withdraws_it():
    schedule = ArrivalSchedule("constant")
    assert schedule.peek() == math.inf  # nothing due before the first level
    schedule.start(10.0, at=0.0)
    schedule.take()
    epoch = schedule.epoch
    schedule.start(2.0, at=5.0, kind="poisson")  # the next test may change the kind too
    assert schedule.epoch == epoch + 1 and schedule.kind == "poisson"
    assert schedule.peek() > 5.0  # the last level's arrivals not handed out are forgotten
    schedule.stop()
    assert schedule.peek() == math.inf and schedule.take() == math.inf
    with pytest.raises(ValueError):
        ArrivalSchedule("bursty")


# --- an arrival process is one class (`PROCESSES`): one declared here reaches the schedule, a
# load process's arrivals and --arrivals, none of them edited


class Pairs(ArrivalProcess):
    """Two arrivals at once, then a gap of two: the same rate, in pairs."""

    name, help = "pairs", "two at a time"

    def __init__(self, rng) -> None:
        super().__init__(rng)
        self.second = False

    def first(self, rate: float, phase: float) -> float:
        self.second = False
        return 0.0

    def gap(self, rate: float) -> float:
        self.second = not self.second
        return 0.0 if self.second else 2.0 / rate


def test_an_arrival_process_declared_once_reaches_the_schedule_and_a_load_process(monkeypatch):
    from vllm_load.client.arrival_clock import Arrivals

    monkeypatch.setitem(PROCESSES, Pairs.name, Pairs)
    schedule = ArrivalSchedule("pairs", seed=1)
    schedule.start(10.0, at=5.0)
    assert arrivals(schedule, 6).tolist() == pytest.approx([5.0, 5.0, 5.2, 5.2, 5.4, 5.4])
    process = Arrivals()
    process.start(10.0, 0.0, "pairs")
    assert process.rates.kind == "pairs"
    first = process.schedule.take()
    assert process.schedule.take() == first and process.schedule.peek() == pytest.approx(
        first + 0.2
    )
    assert "pairs (two at a time)" in arrivals_help()
    with pytest.raises(ValueError, match="arrivals must be one of poisson, constant, pairs"):
        ArrivalSchedule("bursts")


_OPTION = """
import argparse
from vllm_load.workload.arrivals import PROCESSES
PROCESSES["pairs"] = type("Pairs", (), {"help": "two at a time"})  # declared before settings reads
from vllm_load.settings import Settings, add_arguments
parser = argparse.ArgumentParser()
add_arguments(parser)
print(Settings.from_options(parser.parse_args(["--arrivals", "pairs"])).arrivals)
print(" ".join(parser.format_help().split()))
"""


def test_arrivals_option_offers_every_declared_process():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _OPTION], capture_output=True, text=True, timeout=120, check=True
    )
    chosen, help_text = done.stdout.splitlines()
    assert chosen == "pairs"
    assert "{poisson,constant,pairs}" in help_text
    assert (
        "poisson (exponential gaps) or constant (even gaps) or pairs (two at a time)" in help_text
    )
