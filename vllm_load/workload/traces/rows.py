"""What a format's reader hands on: the requests of a file in file order, times in the file's own
unit (so rebasing them loses nothing), and the rows it left out by reason. Each request is
checked against the `TraceLimits` as it is added, so a hostile file is refused at its line before
anything of its size is made."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .fields import BadValue, shown
from .replay_plan import MAX_SPAN_DAYS, MAX_SPAN_SECONDS, TraceLimits


@dataclass
class Rows:
    """Parallel lists, one entry per request, in file order. `units_per_second`: the times'
    unit (1000 for milliseconds); `lines`: how many lines the file has; `low` and `high`: the
    earliest and latest time so far; `negative`: the first line with a time below 0 and how
    many there are; `longest`: the most prompt + output tokens of a request, and its line."""

    units_per_second: float
    limits: TraceLimits = field(default_factory=TraceLimits)
    times: list[float] = field(default_factory=list)
    prompts: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    hash_ids: list[tuple[int, ...]] = field(default_factory=list)
    sessions: list[Any] = field(default_factory=list)  # an agentic trace's: each one's plan
    skip_reasons: Counter[str] = field(default_factory=Counter)
    lines: int = 0
    low: float = math.inf
    high: float = -math.inf
    negative: tuple[int, int] = (0, 0)
    longest: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        self._span = MAX_SPAN_SECONDS * self.units_per_second  # in the file's unit

    def add(
        self, line: int, time: float, prompt: int, output: int, hash_ids: tuple[int, ...] = ()
    ) -> None:
        """Line `line`'s request; `BadValue` when it is past the limits. (Per line of a trace
        of millions: the common line, no longer than the longest and in the span so far, costs
        a few comparisons.)"""
        if prompt + output > self.longest[0]:
            self._longer(line, prompt, output)
        if time > self.high or time < self.low:
            low = time if time < self.low else self.low
            high = time if time > self.high else self.high
            if high - low > self._span:
                raise self._too_long(high - low, time)
            self.low, self.high = low, high
        if time < 0:
            first, count = self.negative
            self.negative = (first or line, count + 1)
        times = self.times
        if len(times) >= self.limits.requests:
            raise BadValue(
                f"more than {self.limits.requests:,} requests (--trace-max-requests "
                f"{self.limits.requests}: every load process holds them all; cut the file to "
                "the part to replay, or raise it)"
            )
        times.append(time)
        self.prompts.append(prompt)
        self.outputs.append(output)
        self.hash_ids.append(hash_ids)

    def _longer(self, line: int, prompt: int, output: int) -> None:
        tokens = prompt + output
        if tokens > self.limits.tokens:
            raise BadValue(
                f"{tokens} tokens (input_length {prompt} + output_length {output}), above "
                f"{self.limits.tokens_said} (fix the line, or raise --trace-max-tokens "
                "for a model with a longer context)"
            )
        self.longest = (tokens, line)

    def _too_long(self, span: float, time: float) -> BadValue:
        return BadValue(
            f"time {shown(time)} would make the trace span {span / self.units_per_second:.3g} s, "
            f"more than {MAX_SPAN_DAYS} days (a damaged time? fix the line)"
        )
