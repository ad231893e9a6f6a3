"""When open-loop requests are due (--rates): one load process's arrival times, pure.

Each of the P load processes generates its share of the rate, rate / P. A Poisson process split
evenly is still Poisson, and P independent Poisson processes at rate / P add up to one at the
rate, so with `poisson` arrivals every process draws its own exponential gaps. With `constant`
arrivals every process spaces its arrivals P / rate apart and starts `phase` of a gap late
(process i of P: phase i / P), so the processes' arrivals interleave into one even stream (as
evenly as their clocks agree on the level's start: within the few milliseconds a message takes).

Each arrival process is a small class registered by name (`PROCESSES`): --arrivals' choices and
help, and the schedule, read them from there; adding one is its class here.

Times are whatever clock the caller gives (`perf_counter()` seconds in a load process); nothing
here sleeps or reads a clock, so the schedule is tested on its own.
"""

from __future__ import annotations

import math
import random
from typing import ClassVar


class ArrivalProcess:
    """How one load process spaces its arrivals at a rate: a subclass per process, registered
    under its `name` (`@arrival_process`), is what --arrivals chooses from (`help`: what its
    gaps are, as the option's help says). It draws from the schedule's random generator."""

    name: ClassVar[str]
    help: ClassVar[str]

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def first(self, rate: float, phase: float) -> float:
        """Seconds from a level's start to its first arrival (`phase`: this process's share of a
        gap, in [0, 1): process i of P is i / P)."""
        raise NotImplementedError

    def gap(self, rate: float) -> float:
        """Seconds from one arrival to the next."""
        raise NotImplementedError


#: every arrival process, by name, in the order --arrivals lists them
PROCESSES: dict[str, type[ArrivalProcess]] = {}


def arrival_process(cls: type[ArrivalProcess]) -> type[ArrivalProcess]:
    """Register an arrival process under its name."""
    PROCESSES[cls.name] = cls
    return cls


@arrival_process
class Poisson(ArrivalProcess):
    """Memoryless: each gap, the first after a level's start too, is exponential."""

    name, help = "poisson", "exponential gaps"

    def first(self, rate: float, phase: float) -> float:
        return self.rng.expovariate(rate)

    def gap(self, rate: float) -> float:
        return self.rng.expovariate(rate)


@arrival_process
class Constant(ArrivalProcess):
    """Even gaps, the first `phase` of a gap late, so the processes' arrivals interleave."""

    name, help = "constant", "even gaps"

    def first(self, rate: float, phase: float) -> float:
        return (phase % 1.0) / rate

    def gap(self, rate: float) -> float:
        return 1.0 / rate


#: --arrivals' default
DEFAULT_ARRIVALS = Poisson.name


def arrivals_help() -> str:
    """--arrivals' help, from the processes: `poisson (exponential gaps) or constant (...)`."""
    return (
        "with --rates: "
        + " or ".join(f"{n} ({c.help})" for n, c in PROCESSES.items())
        + (" arrivals")
    )


class ArrivalSchedule:
    """The arrival times of one load process at its share of the current level's rate.

    `start(rate, at)` begins a level's arrivals at `at` (a new level forgets the arrivals the
    last one had not handed out); `peek()` is the next arrival's time, `take()` hands it out and
    moves on. Stopped (or never started), the next arrival is at infinity.
    """

    def __init__(self, kind: str = "", seed: int | None = None) -> None:
        self._rng = random.Random(seed)
        self.process = _process(kind or DEFAULT_ARRIVALS, self._rng)
        self.rate = 0.0
        self.epoch = 0  # counts starts and stops: a waiter can tell its arrival was withdrawn
        self._next = math.inf

    @property
    def kind(self) -> str:
        return self.process.name

    def start(self, rate: float, at: float, phase: float = 0.0, kind: str | None = None) -> None:
        """Arrivals at `rate` per second from `at` on (`phase`, in [0, 1), shifts constant ones)."""
        if kind is not None:  # a new test (web UI) may change the kind
            self.process = _process(kind, self._rng)
        self.rate = rate
        self.epoch += 1
        if rate <= 0:
            self._next = math.inf
        else:
            self._next = at + self.process.first(rate, phase)

    def stop(self) -> None:
        """No more arrivals until the next `start`."""
        self.start(0.0, 0.0)

    def peek(self) -> float:
        return self._next

    def upcoming(self) -> None:
        """What the next arrival asks to send: nothing but a time (see `TraceSchedule`)."""
        return None

    def take(self) -> float:
        """The next arrival's time, handed out; the schedule moves on to the one after it."""
        due = self._next
        if self.rate > 0:
            self._next = due + self.process.gap(self.rate)
        return due


def _process(kind: str, rng: random.Random) -> ArrivalProcess:
    if kind not in PROCESSES:
        raise ValueError(f"arrivals must be one of {', '.join(PROCESSES)}, got {kind!r}")
    return PROCESSES[kind](rng)


def process_share(rate: float, processes: int, index: int) -> tuple[float, float]:
    """(rate, phase) of load process `index` of `processes` for a test at `rate` requests/s."""
    processes = max(processes, 1)
    return rate / processes, (index % processes) / processes
