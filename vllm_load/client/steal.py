"""CPU time the machine's hypervisor took from its virtual CPUs: "steal" in /proc/stat.

On a virtual machine, while the host does not run a vCPU nothing on it runs, a load process
included, however little it has to do: its wake-ups come late. On the 2-core VM vllm-load is
developed on, every one of 4 waits in 1,495 that woke more than 3 ms late (idle waits of
20-250 ms, slept as `arrivals` sleeps) lost steal ticks on its CPU meanwhile, and 5 % of the
waits that woke on time did too (the host takes short slices as well). So a request sent late
records the steal of its process's CPU during its wait (`stolen_s`), and a replay's report can
tell the host's stalls from the client's own lateness.

Linux counts steal in clock ticks (10 ms at the usual USER_HZ of 100): the figure says whether
the host took the CPU, and about how long. `stolen_s` is empty where there is no /proc/stat.
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass

#: a sample this recent (seconds) stands for "now" when a wait starts: steal moves in 10 ms
#: ticks, and a rate of thousands of arrivals a second must not read /proc/stat for each
MAX_AGE = 0.01
#: a read this recent (seconds) stands for "now" when a late send asks what its wait lost: the
#: process ran since, so no stall longer than it is missed, and a burst of late sends (a client
#: at its cap) does not read /proc/stat, which sums every interrupt over every CPU, for each
FRESH = 0.001
#: a request sent this late (seconds) or later records the steal of its wait
LATE = 0.001
STEAL_FIELD = 8  # cpuN user nice system idle iowait irq softirq steal ...


@dataclass(frozen=True)
class StealSample:
    """Each CPU's steal so far (seconds), read at `at` (`perf_counter()`), and the CPU this
    process was on (-1: unknown)."""

    cpu: int
    steal: tuple[float, ...]
    at: float = 0.0


def _sched_getcpu():
    try:
        return ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):  # not glibc: every CPU counts
        return lambda: -1


class StealClock:
    """Reads this machine's steal per CPU; `since` says how much a wait lost on its CPU.

    /proc/stat is opened on the first `sample()`, in the process that samples (one pacing
    arrivals or sending late): every process imports the clock, and most never read it."""

    def __init__(self, path: str = "/proc/stat") -> None:
        self._path = path
        self._fd: int | None = None
        self._opened = False  # whether `_fd` was tried: None after that means no /proc/stat
        self._tick = 1.0 / os.sysconf("SC_CLK_TCK")
        self._cpu = _sched_getcpu()
        self._last: tuple[float, ...] = ()
        self._last_at = -1.0

    def _read(self) -> tuple[float, ...]:
        assert self._fd is not None
        steal = []
        for line in os.pread(self._fd, 65536, 0).split(b"\n")[1:]:  # [0]: all CPUs together
            if not line.startswith(b"cpu"):
                break
            steal.append(int(line.split()[STEAL_FIELD]) * self._tick)
        self._last, self._last_at = tuple(steal), time.perf_counter()
        return self._last

    def _open(self) -> int | None:
        if not self._opened:
            self._opened = True
            try:
                self._fd = os.open(self._path, os.O_RDONLY)
            except OSError:
                self._fd = None
        return self._fd

    def sample(self) -> StealSample | None:
        """Now, or a read at most `MAX_AGE` old (None without /proc/stat)."""
        if self._fd is None and self._open() is None:
            return None
        if time.perf_counter() - self._last_at >= MAX_AGE:
            self._read()
        return StealSample(self._cpu(), self._last, self._last_at)

    def since(self, before: StealSample) -> float:
        """Seconds of steal, since `before`, on the CPUs this process was on then and now (every
        CPU when either is unknown)."""
        fresh = time.perf_counter() - self._last_at < FRESH
        now = StealSample(self._cpu(), self._last if fresh else self._read())
        cpus = {before.cpu, now.cpu}
        if -1 in cpus or max(cpus) >= len(now.steal) or len(now.steal) != len(before.steal):
            cpus = set(range(min(len(now.steal), len(before.steal))))
        return max(0.0, sum(now.steal[c] - before.steal[c] for c in cpus))


#: this process's clock
STEAL = StealClock()
