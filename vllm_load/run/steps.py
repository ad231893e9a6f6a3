"""The stepped load plan: when to move from one concurrency level to the next.

Per level: ask for N users, let the first W requests of the level finish as warm-up, then
keep the level until K more have finished (or the level's time cap), then the next level,
with an optional cooldown at zero users in between. A request belongs to the level during
which it started; counting finished requests per level is the run recorder's job.

After the last level the test drains: its users send nothing new, and the requests they have
in flight are let finish (bounded by `drain_timeout`) before the test ends. Every other level's
in-flight requests finish during the next level, so this measures the last level like the
others: its requests in flight during the window have rows, and count in its achieved
concurrency and throughput, instead of being cut off.

With --rates a level is a request rate instead (open loop): every level runs the same users
(--max-in-flight, the cap on requests in flight), sends at the level's rate, and ends by the
same rule (W warm-up and K measured requests finished, or its time cap); the last one drains
the same way.

`StepController` is the decision logic alone (plain data in, plain data out), so it is tested
without Locust; `vllm_load.run.shape.SteppedShape` adapts it to Locust on the master.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class LevelPlan:
    levels: tuple[int, ...]
    warmup_requests: int = 10
    requests_per_level: int = 100
    level_time_cap: float = 1200.0
    cooldown: float = 0.0
    drain_timeout: float = 0.0  # seconds the last level's requests in flight may take to finish
    rates: tuple[float, ...] = ()  # open loop: each level's rate (requests/s); levels: the users

    @classmethod
    def open_loop(cls, rates: tuple[float, ...], max_in_flight: int, **counts: Any) -> LevelPlan:
        """A plan stepping through `rates`, every level with `max_in_flight` users."""
        return cls((max_in_flight,) * len(rates), rates=rates, **counts)

    def rate(self, level: int) -> float | None:
        """The level's rate (requests/s) in an open-loop plan, else None."""
        return self.rates[level] if self.rates else None

    @property
    def finish_target(self) -> int:
        """Finished requests a level needs: warm-up plus measured."""
        return self.warmup_requests + self.requests_per_level


@dataclass(frozen=True)
class LevelChange:
    """Something the controller decided: a level started or ended."""

    kind: str  # "start", "end", "drain" (the last level's users stop sending) or "drained"
    level: int
    users: int
    at: float
    reason: str = ""
    rate: float | None = None  # the level's rate (requests/s) in an open-loop plan


@dataclass
class StepController:
    """Decides, tick by tick, how many users the test should have."""

    plan: LevelPlan
    level: int = -1
    phase: str = "idle"  # idle -> running -> (cooldown -> running)* -> draining -> done
    phase_started: float = 0.0
    changes: list[LevelChange] = field(default_factory=list)

    def tick(
        self,
        now: float,
        finished_in_level: Callable[[int], int],
        in_flight: Callable[[], int] = lambda: 0,
    ) -> Optional[int]:
        """The user count to run now, or None when the test is over.

        `finished_in_level(i)` is how many requests that started in level i have finished so far;
        `in_flight()` how many requests are in flight (asked only while draining).
        """
        if self.phase == "idle":
            return self._start(0, now)
        if self.phase == "running":
            reason = ""
            if finished_in_level(self.level) >= self.plan.finish_target:
                reason = "target_reached"
            elif now - self.phase_started >= self.plan.level_time_cap:
                reason = "time_cap"
            if not reason:
                return self.plan.levels[self.level]
            users = self.plan.levels[self.level]
            self.changes.append(LevelChange("end", self.level, users, now, reason))
            if self.level + 1 >= len(self.plan.levels):
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

    def _drain(self, now: float, in_flight: Callable[[], int]) -> Optional[int]:
        """Keep the last level's users (sending nothing new) until their requests have finished."""
        reason = ""
        if in_flight() <= 0:
            reason = "all_finished"
        elif now - self.phase_started >= self.plan.drain_timeout:
            reason = "drain_timeout"
        if not reason:
            return self.plan.levels[self.level]
        self.changes.append(
            LevelChange("drained", self.level, self.plan.levels[self.level], now, reason)
        )
        self.phase = "done"
        return None

    def _start(self, level: int, now: float) -> int:
        self.level, self.phase, self.phase_started = level, "running", now
        users = self.plan.levels[level]
        self.changes.append(LevelChange("start", level, users, now, rate=self.plan.rate(level)))
        return users

    def take_changes(self) -> list[LevelChange]:
        changes, self.changes = self.changes, []
        return changes
