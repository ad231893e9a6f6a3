"""Which levels of a run are trace replays, and what run.json says the trace scheduled.

steps.csv's `kind` names a level's kind of load (`concurrency`, `rate`, `trace`) and `value` its
value in that kind's unit: for a trace, where in the trace (trace seconds) the replayed window
starts; `users` is the cap on requests in flight. A run written before levels had a kind has
none that is a trace. run.json's `trace` holds what the replay scheduled (docs/run-format.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..levels import as_floats

TRACE = "trace"


@dataclass(frozen=True)
class TraceRecord:
    """run.json's `trace`: the file replayed and what the replay scheduled from it."""

    path: str
    format: str
    start: float  # trace seconds where the replayed window starts
    duration: float  # replay seconds from its start to its last request (run.json's)
    speed: float  # trace seconds per second of replay
    requests: int  # requests scheduled
    prompt_tokens: int  # their prompt tokens, summed
    predicted_cached_tokens: int | None  # prefix-cache hits the trace's hash_ids imply
    block_tokens: int  # tokens per hash_id block
    window: float = math.nan  # trace seconds the window spans (--trace-duration; NaN: to the end)

    @classmethod
    def of(cls, run: dict) -> "TraceRecord | None":
        """The run's trace record (its field types are checked with run.json,
        `run_format.checks`); None for a run that replayed no trace."""
        trace = run.get("trace")
        if not isinstance(trace, dict):
            return None

        def number(key: str, default: float = math.nan) -> float:
            value = trace.get(key)
            return float(value) if isinstance(value, (int, float)) else default

        predicted = trace.get("predicted_cached_tokens")
        return cls(
            path=str(trace.get("path") or "-"),
            format=str(trace.get("format") or "-"),
            start=number("start", 0.0),
            duration=number("duration"),
            speed=number("speed", 1.0),
            requests=int(number("requests", -1)),
            prompt_tokens=int(number("prompt_tokens", -1)),
            predicted_cached_tokens=int(predicted) if isinstance(predicted, int) else None,
            block_tokens=int(number("block_tokens", 0)),
            window=_window(run.get("settings")),
        )

    def describe(self) -> str:
        """`trace.jsonl (mooncake), trace seconds 0–60 at 1× speed`: the window asked for, in
        the trace's seconds (without one, to the last request's time in the trace)."""
        span = self.window if self.window == self.window else self.duration * self.speed
        end = f"–{self.start + span:,.4g}" if span == span else " on"
        return (
            f"{self.path} ({self.format}), trace seconds {self.start:,.4g}{end} at "
            f"{self.speed:g}× speed"
        )


def _window(settings: object) -> float:
    """--trace-duration from run.json's settings, trace seconds (NaN: none, to the end)."""
    value = settings.get("trace_duration") if isinstance(settings, dict) else None
    return float(value) if isinstance(value, (int, float)) and value > 0 else math.nan


@dataclass(frozen=True)
class ReplayLevel:
    """One trace level of steps.csv."""

    level: int
    cap: float  # `users`: the cap on requests in flight
    trace_start: float  # `value`: trace seconds at the level's start
    start: float  # Unix time the level started: the replay's time 0
    end: float  # Unix time it ended (NaN while running)


def replay_levels(steps: pd.DataFrame) -> list[ReplayLevel]:
    """The trace levels of a run's steps.csv, in order (none without a `kind` column)."""
    if steps is None or "kind" not in steps or not len(steps):
        return []
    rows = steps[steps["kind"].astype("string").str.strip().str.lower() == TRACE]
    rows = rows.drop_duplicates("level", keep="last")  # rewritten while the run goes on
    value = as_floats(rows["value"]) if "value" in rows else np.full(len(rows), np.nan)
    end = as_floats(rows["end_ts"])
    return [
        ReplayLevel(int(level), float(users), float(v) if v == v else 0.0, float(start), float(e))
        for level, users, v, start, e in zip(
            as_floats(rows["level"]),
            as_floats(rows["users"]),
            value,
            as_floats(rows["start_ts"]),
            end,
        )
    ]
