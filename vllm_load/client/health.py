"""Is the client the bottleneck right now? CPU use, event-loop lag and run-queue wait of every
load process.

Each load-generating process (a worker, or the single local process) runs a `HealthProbe`: a
greenlet that sleeps `TICK` seconds at a time and measures how late it wakes up. A loop that
wakes late is a loop whose users also read their streams late, which inflates TTFT and ITL
(the starving users of the pitfall list). A process can also be starved by others: its loop
thread ready to run but waiting for a CPU (a busy-polling server engine on the same cores). The
kernel counts that wait (`/proc/thread-self/schedstat`, field 2: ns spent on a run queue), and
the probe reports it as ms waited per second of wall time. With CPU time over wall time, that
makes one `HealthSample` per report interval; workers ship theirs to the master with their records, and
the run keeps them in `client_health.csv`. What a sample says of a level (its
limits: possibly client-bound, client-late) is judged by `analysis.levels.client_side`.

The probe uses only `time` and `/proc` (no extra dependency) and `sleep` is injected, so the
module imports no gevent and the arithmetic can be tested alone.

A process can also run out of what it needs to open a socket (file descriptors, local ports,
kernel buffers): such a request fails before anything reaches the server, and recorded as a
`disconnect` or `connect` it would blame the server for the client's machine. It is
`client_limit` (`client_limit()` gives its message: the limit and how to raise it), and the run
session stops the test on the first one (`run.session`).
"""

from __future__ import annotations

import csv
import errno
import os
import resource
import time
from dataclasses import astuple, dataclass, fields

TICK = 0.05
#: a sample over a shorter interval gives no run-queue rate: one scheduler wait of a few ms
#: would read as tens of ms per second (the last sample of a run covers a few ms)
MIN_RATE_INTERVAL = 0.1
#: the calling thread's scheduler statistics (`/proc/self/schedstat` is the main thread's)
SCHEDSTAT_PATHS = ("/proc/thread-self/schedstat", "/proc/self/schedstat")


@dataclass
class HealthSample:
    """One process over one interval."""

    ts: float
    worker: str
    level: int
    cpu_percent: float
    loop_lag_mean_ms: float
    loop_lag_max_ms: float
    rss_mib: float
    runqueue_wait_ms_per_s: float = float("nan")  # last: a worker's sample without it still loads


HEADER = tuple(f.name for f in fields(HealthSample))


def rss_mib() -> float:
    """Resident set size of this process (Linux /proc; NaN elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return float("nan")


def parse_schedstat(text: str) -> float:
    """Seconds spent waiting on a run queue, from the text of a `schedstat` file (`cpu_ns wait_ns
    timeslices`); NaN if it does not parse."""
    try:
        return int(text.split()[1]) / 1e9
    except (ValueError, IndexError):
        return float("nan")


def runqueue_wait_s(paths: tuple[str, ...] = SCHEDSTAT_PATHS) -> float:
    """How long the calling thread has waited for a CPU since it started, in seconds; NaN where
    the kernel does not say (no /proc, or a kernel without scheduler statistics)."""
    for path in paths:
        try:
            with open(path, encoding="ascii") as fh:
                return parse_schedstat(fh.read())
        except OSError:
            continue
    return float("nan")


class HealthProbe:
    """Measures loop lag with a ticking loop (`run`), and CPU use and run-queue wait between
    `sample()` calls (call it from the thread that runs the event loop)."""

    def __init__(
        self,
        tick: float = TICK,
        clock=time.perf_counter,
        cpu_clock=time.process_time,
        wait_clock=runqueue_wait_s,
    ):
        self.tick = tick
        self._clock, self._cpu_clock, self._wait_clock = clock, cpu_clock, wait_clock
        self._wall0, self._cpu0, self._wait0 = clock(), cpu_clock(), wait_clock()
        self._lags: list[float] = []

    def record_lag(self, lag_s: float) -> None:
        self._lags.append(max(0.0, lag_s))

    def run(self, sleep) -> None:
        """Tick forever: `sleep(tick)` and record how much longer than `tick` it took."""
        while True:
            before = self._clock()
            sleep(self.tick)
            self.record_lag(self._clock() - before - self.tick)

    def sample(self, worker: str, level: int = -1) -> HealthSample:
        """The interval since the previous sample, then start a new one."""
        wall, cpu, wait = self._clock(), self._cpu_clock(), self._wait_clock()
        elapsed = max(wall - self._wall0, 1e-9)
        lags = self._lags
        self._lags = []
        waited = wait - self._wait0  # NaN when either reading is
        self._wall0, self._cpu0, self._wait0, cpu_used = wall, cpu, wait, cpu - self._cpu0
        return HealthSample(
            ts=time.time(),
            worker=worker,
            level=level,
            cpu_percent=100.0 * cpu_used / elapsed,
            loop_lag_mean_ms=1000.0 * sum(lags) / len(lags) if lags else float("nan"),
            loop_lag_max_ms=1000.0 * max(lags) if lags else float("nan"),
            rss_mib=rss_mib(),
            runqueue_wait_ms_per_s=1000.0 * waited / elapsed
            if elapsed >= MIN_RATE_INTERVAL
            else float("nan"),
        )


class HealthWriter:
    """Appends samples to `client_health.csv` in a run directory."""

    def __init__(self, path: str):
        self._fh = open(path, "w", newline="", encoding="utf-8")
        self._writer = csv.writer(self._fh)
        self._writer.writerow(HEADER)
        self._fh.flush()

    def write(self, samples) -> None:
        for s in samples:
            self._writer.writerow([f"{v:.3f}" if isinstance(v, float) else v for v in astuple(s)])
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


# --- the client's own limits -----------------------------------------------------------------

CLIENT_LIMIT = "client_limit"  # the error category


def _open_files() -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    shown = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    return (
        f"this load process ran out of file descriptors (EMFILE: ulimit -n is {soft}, hard "
        f"limit {shown}); run vllm-load from a shell with a higher limit (ulimit -n 65536, or "
        "LimitNOFILE= for a service) or spread the users over more processes (--workers N)"
    )


def _ports() -> str:
    return (
        "no free local port to connect from (EADDRNOTAVAIL): the machine's ephemeral ports "
        "(sysctl net.ipv4.ip_local_port_range) are in use; widen that range, or send from more "
        "load machines (vllm-load worker)"
    )


_MESSAGES = {
    errno.EMFILE: _open_files,
    errno.ENFILE: lambda: (
        "the machine ran out of file descriptors (ENFILE: sysctl fs.file-max); raise it, or "
        "send from more load machines (vllm-load worker)"
    ),
    errno.EADDRNOTAVAIL: _ports,
    errno.ENOBUFS: lambda: (
        "the kernel had no buffer space for another socket (ENOBUFS); raise net.core.rmem_max/"
        "wmem_max and the socket memory limits (net.ipv4.tcp_mem), or spread the users over "
        "more load machines"
    ),
}


def client_limit(e: BaseException) -> str | None:
    """The message for a failure that is a client-side resource limit; None for any other."""
    if not isinstance(e, OSError):
        return None
    message = _MESSAGES.get(e.errno or 0)
    return message() if message else None
