"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import pytest

from vllm_load.sim.child import SimulatorProcess


@pytest.fixture(scope="session")
def latency_sim() -> SimulatorProcess:
    """The fixed-latency simulator (50 ms to the first token, then 50 ms a token) that the
    lifecycle tests start their runs against and stop them: one for the session's worker instead
    of one per test (a simulator's start is seconds of each such test). Those tests judge the
    processes and the run directory, never the simulator's counters. (test_interrupt keeps its
    own: its two-worker case failed its count of requests abandoned sharing one, and on a fresh
    one too on a loaded machine, so sharing is not cleared for it.)"""
    with SimulatorProcess("--ttft", "0.05", "--itl", "0.05") as sim:
        yield sim
