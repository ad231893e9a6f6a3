"""Live per-level figures on the master, for the web UI while a test runs.

Fed with every attributed record row as it arrives; cheap per row (counters and mergeable
histograms); the time series for the charts is `timeline`'s. These are running figures over every finished request of a level, warm-up
included; the report's figures over each level's measured window are the ones to publish.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ..rundir.histogram import LogHistogram, bucket_of
from ..rundir.records import COLUMNS
from .timeline import Timeline

_I = {name: COLUMNS.index(name) for name in COLUMNS}


@dataclass
class LiveLevel:
    """Running figures of one level, or of one persona (user class) within it."""

    level: int
    users: int
    user_class: str = ""
    ok: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    first_start: float = math.inf
    last_end: float = 0.0
    ttft: LogHistogram = field(default_factory=LogHistogram)
    e2e: LogHistogram = field(default_factory=LogHistogram)
    itl: LogHistogram = field(default_factory=LogHistogram)

    def add(self, row, itl: list[tuple[int, int]]) -> None:
        """One record row, its ITL histogram already parsed (`parse_counts`)."""
        self.first_start = min(self.first_start, row[_I["start_ts"]])
        self.last_end = max(self.last_end, row[_I["end_ts"]])
        if not row[_I["ok"]]:
            self.failed += 1
            return
        self.ok += 1
        self.input_tokens += row[_I["prompt_tokens"]] or row[_I["requested_prompt_tokens"]] or 0
        self.output_tokens += row[_I["completion_tokens"]] or 0
        if row[_I["ttft"]] is not None:
            self.ttft.counts[bucket_of(row[_I["ttft"]])] += 1
        self.e2e.counts[bucket_of(row[_I["e2e"]])] += 1
        counts = self.itl.counts
        for bucket, count in itl:
            counts[bucket] += count

    def as_dict(self) -> dict:
        span = self.last_end - self.first_start if self.last_end > self.first_start else math.nan
        finished = self.ok + self.failed
        ms = lambda hist, q: round(hist.percentile(q) * 1000, 1) if hist.total else None  # noqa: E731
        rate = lambda x: round(x / span, 1) if span == span and span > 0 else None  # noqa: E731
        return {
            "level": self.level,
            "users": self.users,
            **({"user_class": self.user_class} if self.user_class else {}),
            "finished": finished,
            "req_per_s": rate(finished),
            "total_tok_per_s": rate(self.input_tokens + self.output_tokens),
            "output_tok_per_s": rate(self.output_tokens),
            "ttft_p50_ms": ms(self.ttft, 50),
            "ttft_p99_ms": ms(self.ttft, 99),
            "itl_p99_ms": ms(self.itl, 99),
            "e2e_p50_ms": ms(self.e2e, 50),
            "e2e_p99_ms": ms(self.e2e, 99),
            "success_pct": round(100.0 * self.ok / finished, 2) if finished else None,
        }


def parse_counts(text: str) -> list[tuple[int, int]]:
    """The (bucket, count) pairs of a `bucket:count;...` histogram text (parsed once per row)."""
    if not text:
        return []
    pairs = []
    for item in text.split(";"):
        bucket, _, count = item.partition(":")
        pairs.append((int(bucket), int(count)))
    return pairs


class LiveStats:
    """Per-level running figures and the test's time series (`timeline`) for the charts."""

    def __init__(self) -> None:
        self.levels: dict[int, LiveLevel] = {}
        self.personas: dict[tuple[int, str], LiveLevel] = {}  # per level and user class
        self.current_level: int | None = None
        self.current_users = 0
        self.timeline = Timeline()

    def level_started(
        self, level: int, users: int, at: float | None = None, rate: float | None = None
    ) -> None:
        self.current_level, self.current_users = level, users
        self.levels.setdefault(level, LiveLevel(level, users))
        self.timeline.mark(time.time() if at is None else at, "start", level, users, rate)

    def drain_started(self, level: int, users: int, at: float) -> None:
        self.timeline.mark(at, "drain", level, users)

    def sample(self, now: float, users: int, in_flight: int) -> None:
        """The users running and the requests in flight now (the run session's shape tick)."""
        self.timeline.sample(now, users, in_flight)

    def stopped(self, at: float) -> None:
        self.timeline.stop(at)

    def add(self, row) -> None:
        level = row[_I["level"]]
        entry = self.levels.get(level)
        if entry is None:
            entry = self.levels[level] = LiveLevel(level, row[_I["users"]])
        itl = parse_counts(row[_I["itl_hist"]]) if row[_I["ok"]] else []
        entry.add(row, itl)
        key = (level, row[_I["user_class"]] or "")
        persona = self.personas.get(key)
        if persona is None:
            persona = self.personas[key] = LiveLevel(level, entry.users, key[1] or "(unnamed)")
        persona.add(row, itl)
        self.timeline.add(
            row[_I["end_ts"]],
            bool(row[_I["ok"]]),
            row[_I["prompt_tokens"]] or row[_I["requested_prompt_tokens"]] or 0,
            row[_I["completion_tokens"]] or 0,
            row[_I["ttft"]],
            itl,
        )

    def snapshot(self, now: float, series: bool = True, since: float | None = None) -> dict:
        """The levels (and personas); with `series`, the time series too (only its points after
        `since`, when given: a page that has the earlier ones asks for the new ones only)."""
        data: dict = {
            "current_level": self.current_level,
            "current_users": self.current_users,
            "levels": [self.levels[k].as_dict() for k in sorted(self.levels)],
            # per persona only when there are several (one would repeat the levels)
            "personas": [self.personas[k].as_dict() for k in sorted(self.personas)]
            if len({cls for _, cls in self.personas}) > 1
            else [],
        }
        if series:
            data["series"] = self.timeline.as_dict(now, since)
        return data
