"""The stepped load plan: when to move from one concurrency level to the next.

Per level: ask for N users. The level's requests are ordered by when they started: the first W
are its warm-up (a concurrency level's warm-up is at least one request per user, so the ramp to
N users is never measured), the next K are its measured requests, chosen when they start and
followed to their end, whatever it is (success, failure, timeout): the level's load is held
until every one of its first W + K requests has ended (or its time cap), so a request slower
than the others is measured like them instead of being left behind. Requests started after them
are load, not measurements. Then the next level, with an optional cooldown at zero users in
between. A request belongs to the level during which it started; counting its starts and ends
per level is the run session's job (`measured_set`).

K is --requests-per-level, by default the larger of `DEFAULT_MEASURED` and `MEASURED_WAVES` per
user: below one per user, a level would measure the requests that start first after its
warm-up, one slice of one wave of its users.

After the last level the test drains: its users send nothing new, and the requests they have
in flight are let finish (bounded by `drain_timeout`) before the test ends.

What a level is comes from `load_kinds`: N users (closed loop), or an open-loop kind whose
levels all run the same users (--max-in-flight, the cap on requests in flight). With --rates a
level is a request rate; it ends by the same rule (W warm-up requests and K measured ones
started, the K followed to their end, or its time cap). With --trace the level is a segment of a
trace, and every one of its requests is measured (no warm-up: the trace says what the load is
from its first request); its time cap is at least its schedule's length and a request timeout.
The last level drains the same way whatever its kind. A --stop-when rule that trips
(`stop_check`, judged by `run.stop_rules`) ends the ladder at the level running: it ends (as
`stop_when` when it tripped before its measured requests had all ended: cut) and drains like the
last.

`StepController` is the decision logic alone (plain data in, plain data out), so it is tested
without Locust; `vllm_load.run.shape.SteppedShape` adapts it to Locust on the master.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from ..load_kinds import CONCURRENCY, RATE, Level
from ..settings import DEFAULT_MEASURED, MEASURED_WAVES

#: a level's stop reason when a --stop-when rule tripped while it ran (`run.stop_rules`)
STOP_WHEN = "stop_when"


@dataclass(frozen=True)
class LevelCounts:
    """How many of a level's requests, in the order they started, are warm-up and measured."""

    warmup: int
    measured: int

    @property
    def selected(self) -> int:
        """The level's first requests to start that it follows to their end: warm-up + measured."""
        return self.warmup + self.measured


@dataclass(frozen=True)
class LevelProgress:
    """One level's requests so far, as the run session knows them."""

    started: int  # requests that started in the level
    open: int  # of its first `LevelCounts.selected` to start, those not known to have ended
    unsent: int = 0  # of those, requests that will never start (a lost worker's trace share)


@dataclass(frozen=True)
class LevelPlan:
    levels: tuple[Level, ...]
    warmup_requests: int = 10
    requests_per_level: int | None = None  # None: `DEFAULT_MEASURED`, or `MEASURED_WAVES` per user
    level_time_cap: float = 1200.0
    cooldown: float = 0.0
    drain_timeout: float = 0.0  # seconds the last level's requests in flight may take to finish
    # seconds a level waits, once its measured requests have all started, for them to end
    measured_timeout: float = float("inf")

    @classmethod
    def concurrency(cls, users: Sequence[int], **counts: Any) -> LevelPlan:
        """A plan stepping through these numbers of users (closed loop)."""
        return cls(tuple(Level(CONCURRENCY, float(u), int(u)) for u in users), **counts)

    @classmethod
    def open_loop(cls, rates: Sequence[float], max_in_flight: int, **counts: Any) -> LevelPlan:
        """A plan stepping through `rates`, every level with `max_in_flight` users."""
        return cls(tuple(Level(RATE, float(r), max_in_flight) for r in rates), **counts)

    def users(self, level: int) -> int:
        """The users Locust runs for the level."""
        return self.levels[level].users

    def counts(self, level: int) -> LevelCounts:
        """The level's warm-up and measured requests (see the module docstring)."""
        load = self.levels[level]
        if load.requests is not None:  # a trace segment: every one of its requests, measured
            return LevelCounts(0, load.requests)
        if load.kind.open_loop:
            return LevelCounts(self.warmup_requests, self.requests_per_level or DEFAULT_MEASURED)
        measured = self.requests_per_level or max(DEFAULT_MEASURED, MEASURED_WAVES * load.users)
        return LevelCounts(max(self.warmup_requests, load.users), measured)

    def time_cap(self, level: int) -> float:
        """Seconds the level may last: --level-time-cap, or a trace segment's whole schedule and
        a request timeout after it when that is longer."""
        duration = self.levels[level].duration
        if duration is None:
            return self.level_time_cap
        return max(self.level_time_cap, duration + self.measured_timeout)

    def thin_levels(self) -> list[int]:
        """The concurrency levels that measure fewer requests than they have users."""
        return [
            i
            for i, load in enumerate(self.levels)
            if not load.kind.open_loop and self.counts(i).measured < load.users
        ]


@dataclass(frozen=True)
class LevelChange:
    """Something the controller decided: a level started or ended."""

    kind: str  # "start", "end", "drain" (the last level's users stop sending) or "drained"
    level: int
    users: int
    at: float
    reason: str = ""
    load: Level | None = None  # the level's kind and value (on "start")


@dataclass
class StepController:
    """Decides, tick by tick, how many users the test should have."""

    plan: LevelPlan
    level: int = -1
    phase: str = "idle"  # idle -> running -> (cooldown -> running)* -> draining -> done
    phase_started: float = 0.0
    selected_at: float | None = None  # when the running level's measured requests had all started
    changes: list[LevelChange] = field(default_factory=list)
    #: asked every tick while a level runs, with why it is over ("" while it runs): whether a
    #: --stop-when rule trips on it (`run.stop_rules`); then the ladder ends with it
    stop_check: Optional[Callable[[int, str], bool]] = None

    def tick(
        self,
        now: float,
        progress: Callable[[int], LevelProgress],
        in_flight: Callable[[], int] = lambda: 0,
    ) -> Optional[int]:
        """The user count to run now, or None when the test is over.

        `progress(i)` is what level i's requests have done so far; `in_flight()` how many requests
        are in flight (asked only while draining).
        """
        if self.phase == "idle":
            return self._start(0, now)
        if self.phase == "running":
            reason = self._level_over(now, progress(self.level))
            stop = self.stop_check is not None and self.stop_check(self.level, reason)
            if stop and not reason:  # tripped while it ran: the level is cut there
                reason = STOP_WHEN
            if not reason:
                return self.plan.users(self.level)
            users = self.plan.users(self.level)
            self.changes.append(LevelChange("end", self.level, users, now, reason))
            if stop or self.level + 1 >= len(self.plan.levels):
                self.phase, self.phase_started = "draining", now
                self.changes.append(LevelChange("drain", self.level, users, now))
                return self._drain(now, in_flight)
            if self.plan.cooldown > 0:
                self.phase, self.phase_started = "cooldown", now
                return 0
            return self._start(self.level + 1, now)
        if self.phase == "draining":
            return self._drain(now, in_flight)
        if self.phase == "cooldown":
            if now - self.phase_started >= self.plan.cooldown:
                return self._start(self.level + 1, now)
            return 0
        return None

    def _level_over(self, now: float, progress: LevelProgress) -> str:
        """Why the running level is over ("" while it is not)."""
        if progress.started + progress.unsent >= self.plan.counts(self.level).selected:
            if progress.open <= 0:
                return "target_reached"
            if self.selected_at is None:
                self.selected_at = now
            elif now - self.selected_at >= self.plan.measured_timeout:
                return "measured_lost"  # started, and never heard of again (a worker lost them)
        if now - self.phase_started >= self.plan.time_cap(self.level):
            return "time_cap"
        return ""

    def _drain(self, now: float, in_flight: Callable[[], int]) -> Optional[int]:
        """Keep the last level's users (sending nothing new) until their requests have finished."""
        reason = ""
        if in_flight() <= 0:
            reason = "all_finished"
        elif now - self.phase_started >= self.plan.drain_timeout:
            reason = "drain_timeout"
        if not reason:
            return self.plan.users(self.level)
        self.changes.append(
            LevelChange("drained", self.level, self.plan.users(self.level), now, reason)
        )
        self.phase = "done"
        return None

    def _start(self, level: int, now: float) -> int:
        self.level, self.phase, self.phase_started = level, "running", now
        self.selected_at = None
        load = self.plan.levels[level]
        self.changes.append(LevelChange("start", level, load.users, now, load=load))
        return load.users

    def take_changes(self) -> list[LevelChange]:
        changes, self.changes = self.changes, []
        return changes
