"""SIGINT, SIGTERM and SIGHUP at any moment of `vllm-load run`, any number of times, with or
without workers: exit 130, no traceback, one last line, and the run directory it names exists
(`support.stop_signals` says how each try is made and judged)."""

from __future__ import annotations

import dataclasses
import random
import signal

import pytest
from support.stop_signals import Try, random_tries, run_dirs, stop_a_run

from vllm_load.sim.child import SimulatorProcess

SEED = 46


def check(tries: list[Try], sim_url: str, tmp_path, seed: int) -> list[tuple[Try, str]]:
    """Make each try (again where the run ended before a signal) and fail on any problem; the
    tries as made, each with its output directory."""
    rng = random.Random(seed)
    failed, made = [], []
    for i, attempt in enumerate(tries):
        out = str(tmp_path / f"try{i}")
        for again in range(3):  # a run that ended before any signal was sent tells nothing
            if again:
                attempt = dataclasses.replace(attempt, code=None, stderr="", sent=0)
                out = str(tmp_path / f"try{i}-{again}")
            stop_a_run(sim_url, out, attempt, rng)
            if attempt.sent:
                break
        assert attempt.sent, f"{attempt.describe()}: the run ended before a signal, 3 times"
        made.append((attempt, out))
        problems = attempt.problems(out)
        if problems:
            failed.append(f"{attempt.describe()}: {problems}\n{attempt.stderr[-2000:]}")
    assert not failed, "\n\n".join(failed)
    return made


# before Locust (vllm-load's imports and checks), then while Locust starts: each signal, once
# to three times, to the command or to its process group
EARLY = [
    Try("before", signal.SIGINT, 1, 0, True),
    Try("before", signal.SIGTERM, 2, 0, False),
    Try("before", signal.SIGHUP, 1, 0, False),
    Try("startup", signal.SIGINT, 3, 0, False),
    Try("startup", signal.SIGTERM, 1, 0, True),
    Try("startup", signal.SIGHUP, 2, 0, False),
]


def test_each_stop_signal_early_in_a_run_ends_it_with_130_and_one_line(tmp_path):
    with SimulatorProcess("--ttft", "0.02", "--itl", "0.01") as sim:
        made = check([dataclasses.replace(attempt) for attempt in EARLY], sim.url, tmp_path, SEED)
    # stopped before Locust started, a run leaves no directory behind (nor a claim of one)
    before = [out for attempt, out in made if attempt.phase == "before"]
    unstarted = [out for attempt, out in made if not attempt.locust_started]
    assert set(unstarted) <= set(before), "a signal at Locust's start or later came before it"
    assert unstarted, "no 'before' try was signalled before Locust started"
    assert not [d for out in unstarted for d in run_dirs(out)]


@pytest.mark.slow
def test_twenty_stops_at_random_phases_signals_counts_and_workers(tmp_path):
    """20 tries: every phase (before Locust, its start, a level, the end) with each signal, 0
    and 2 workers, 1 to 3 signals, to the command or its group."""
    with SimulatorProcess("--ttft", "0.02", "--itl", "0.01") as sim:
        check(random_tries(SEED, 20), sim.url, tmp_path, SEED)
