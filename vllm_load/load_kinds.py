"""What a level is, declared once: a kind of load and its value.

A test steps through levels; each is a kind of load and a value in that kind's unit:

- `CONCURRENCY`: N users, each sending its next request when the last one ends (closed loop);
- `RATE`: requests arriving at N per second (open loop), at most --max-in-flight at a time;
- `TRACE`: a trace's requests, each at its own time (open loop), from N seconds into the trace.

The plan (`run.steps.LevelPlan`), the level message to the load processes, steps.csv (`kind`,
`value`), the printed table, the report's axis and its sentences read a level's kind from here,
so nothing else asks "is this a rate run?".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class LoadKind:
    """A kind of load: how its levels send requests and how they are named."""

    name: str  # steps.csv's `kind`
    unit: str  # what a level's value counts
    label: str  # an axis title
    noun: str  # what follows a level's number in a sentence
    spec: str  # format of a level's value
    open_loop: bool  # requests are sent when they are due, not when the last one ended
    more: str  # what a series of this kind would raise to test further ("concurrency")
    what: str  # what a level of this kind sets, in a sentence ("concurrency", "request rate")
    plural: str  # a series of these levels, in a sentence ("concurrency levels")
    ladder: bool = True  # its levels step the load up, so a series of them can find a knee

    def text(self, value: float) -> str:
        """A level's value as a sentence names it: `64 users`, `2.50 requests/s`."""
        if value != value:
            return "-"
        return f"{value:{self.spec}} {self.unit}"

    def number(self, value: float) -> str:
        """A level's value alone, as a table shows it."""
        return f"{value:{self.spec}}" if value == value else "-"


CONCURRENCY = LoadKind(
    "concurrency", "users", "concurrent users (requested)", "concurrent", ",.0f", False,
    "concurrency", "concurrency", "concurrency levels",
)  # fmt: skip
RATE = LoadKind(
    "rate", "requests/s", "requests/s (requested)", "requests/s", ",.2f", True, "load",
    "request rate", "request rates (--rates)",
)  # fmt: skip
TRACE = LoadKind(
    "trace", "s into the trace", "trace segment (s into the trace)", "s into the trace", ",.0f",
    True, "load", "trace segment", "trace replays (--trace)", False,
)  # fmt: skip

KINDS: Mapping[str, LoadKind] = {kind.name: kind for kind in (CONCURRENCY, RATE, TRACE)}


def kind_named(name: Any) -> LoadKind:
    """The kind a steps.csv or run.json names (an unknown or missing name: concurrency, the kind
    of every run before kinds were recorded)."""
    return KINDS.get(str(name), CONCURRENCY)


@dataclass(frozen=True)
class Level:
    """One level of a plan: its kind, its value, and the users Locust runs for it (the users
    themselves for concurrency; the cap on requests in flight for open-loop kinds)."""

    kind: LoadKind
    value: float
    users: int
    requests: int | None = None  # a trace segment's requests: all of them are measured
    duration: float | None = None  # seconds a trace segment's schedule lasts, as replayed

    def text(self) -> str:
        return self.kind.text(self.value)


def kind_of_settings(settings: Mapping[str, Any]) -> LoadKind:
    """The kind of a run's levels, from its settings (run.json's `settings`)."""
    if settings.get("trace"):
        return TRACE
    if settings.get("rates"):
        return RATE
    return CONCURRENCY
