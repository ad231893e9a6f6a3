"""The host's steal of a wait's CPU (`client/steal.py`), read from a /proc/stat of our own."""

import os
import subprocess
import sys

import pytest

from vllm_load.client import steal
from vllm_load.client.steal import StealClock, StealSample

TICK = 1.0 / os.sysconf("SC_CLK_TCK")


def proc_stat(path, *steals: int) -> None:
    lines = [f"cpu  10 0 10 100 0 0 0 {sum(steals)} 0 0"]
    lines += [f"cpu{i} 5 0 5 50 0 0 0 {s} 0 0" for i, s in enumerate(steals)]
    with open(path, "w") as fh:
        fh.write("\n".join([*lines, "intr 12 0 0", "ctxt 99", ""]))


def test_a_wait_counts_the_steal_of_the_cpus_it_was_on(tmp_path, monkeypatch):
    path = tmp_path / "stat"
    proc_stat(path, 100, 200, 300)
    now = [100.0]
    monkeypatch.setattr(steal.time, "perf_counter", lambda: now[0])
    clock = StealClock(str(path))
    cpu = iter([1, 1, 1, 1, 2, -1])
    monkeypatch.setattr(clock, "_cpu", lambda: next(cpu))
    before = clock.sample()
    assert before == StealSample(1, (100 * TICK, 200 * TICK, 300 * TICK), at=100.0)
    proc_stat(path, 150, 201, 305)  # the host took 1 tick of CPU 1, 5 of CPU 2, 50 of CPU 0
    now[0] += steal.FRESH / 2  # a read that recent stands for now: the process ran since
    assert clock.since(before) == 0.0
    now[0] += steal.FRESH
    assert clock.since(before) == pytest.approx(1 * TICK)  # on CPU 1 then and now
    now[0] += steal.MAX_AGE / 2  # a wait beginning now starts from that read
    assert clock.sample().steal == (150 * TICK, 201 * TICK, 305 * TICK)
    now[0] += steal.MAX_AGE
    assert clock.since(StealSample(1, before.steal)) == pytest.approx(6 * TICK)  # CPUs 1 and 2
    # a CPU unknown either side (not glibc): every CPU counts
    assert clock.since(StealSample(0, before.steal)) == pytest.approx(56 * TICK)


def test_without_proc_stat_nothing_is_sampled(tmp_path):
    assert StealClock(str(tmp_path / "absent")).sample() is None


def test_this_machine_reads_its_own_steal():
    sample = steal.STEAL.sample()
    if not os.path.exists("/proc/stat"):
        assert sample is None
        return
    assert sample is not None and len(sample.steal) >= 1  # the online CPUs
    assert sample.cpu in range(len(sample.steal))
    assert steal.STEAL.since(sample) >= 0.0


def _open_fds_to(path: str) -> int:
    """How many of this process's descriptors are open on `path`."""
    fds = os.listdir("/proc/self/fd")
    target = os.path.realpath(path)
    return sum(1 for fd in fds if os.path.realpath(f"/proc/self/fd/{fd}") == target)


def test_proc_stat_is_opened_only_by_a_process_that_samples(tmp_path):
    """Every process imports `STEAL` (the master, the simulator, `report`); only one that pacing
    or a late send makes sample it holds /proc/stat open, once."""
    path = tmp_path / "stat"
    proc_stat(path, 100)
    clock = StealClock(str(path))
    assert _open_fds_to(str(path)) == 0
    assert clock.sample() is not None and clock.sample() is not None
    assert _open_fds_to(str(path)) == 1
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, vllm_load.client.steal as s\n"
            "print(sum(os.path.realpath(f'/proc/self/fd/{fd}') == '/proc/stat'"
            " for fd in os.listdir('/proc/self/fd')))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() == "0", (proc.stdout, proc.stderr)
