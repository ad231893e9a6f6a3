"""How long the processes a timing test measures waited for a CPU while it measured: the host's
own record (each process's run-queue wait, /proc/PID/schedstat), read before and after.

A timer or a read that fires late on a busy machine is late by at most the time its process sat
runnable on a run queue (plus a timer's own slack), so a timing tolerance missed by less than
that wait is the host's doing and is skipped, saying so; missed by more, it is a defect and
fails. On a quiet machine the wait is ~0 and every tolerance is held as written.
"""

from __future__ import annotations

import os

import pytest

from vllm_load.client.health import parse_schedstat


def _wait_s(pid: int) -> float:
    """Seconds the threads of `pid` have waited on a run queue (NaN without schedstat)."""
    total, found = 0.0, False
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return float("nan")
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as fh:
                total += parse_schedstat(fh.read())
                found = True
        except OSError:
            continue  # a thread that ended meanwhile
    return total if found else float("nan")


class HostWait:
    """Reads the run-queue wait of named processes; `read()` snapshots, and two snapshots taken
    around one timed event say how long the host kept each of them waiting meanwhile."""

    def __init__(self, **pids: int) -> None:
        self.pids = pids

    def read(self) -> dict[str, float]:
        return {name: _wait_s(pid) for name, pid in self.pids.items()}


def _worst_s(waited: dict[str, float]) -> float:
    known = [w for w in waited.values() if w == w]
    return max(known, default=0.0)


def within(
    measured: float,
    expected: float,
    tol: float,
    before: dict[str, float],
    after: dict[str, float],
    what: str,
) -> None:
    """`measured` within `tol` of `expected` (seconds); where it is not, the run-queue wait between
    the snapshots `before` and `after` (taken around that event alone) must cover the excess: then
    the tolerance is skipped with the figures, else it fails."""
    miss = abs(measured - expected)
    if miss < tol:
        return
    waited = {name: after[name] - before[name] for name in before}
    why = (
        f"{what}: {measured * 1000:.2f} ms against {expected * 1000:.2f} ± {tol * 1000:.2f} ms; "
        "run-queue wait meanwhile: "
        + ", ".join(f"{name} {w * 1000:.1f} ms" for name, w in waited.items())
    )
    print(why)
    assert _worst_s(waited) >= miss - tol, why
    pytest.skip(f"timing tolerance not held, the host kept the process waiting: {why}")
