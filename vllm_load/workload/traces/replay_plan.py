"""A trace as the replay sees it: requests with their times from the start of the replay, their
token counts and (Mooncake) the ids of their prompt's blocks; and the ways a replay takes part of
it (a window, a speed-up, one load process's share)."""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...user_values import SettingsError

#: tokens per hash_ids block: Mooncake's traces hash their prompts in blocks of 512 tokens
MOONCAKE_BLOCK_TOKENS = 512
#: the most a trace's times may span, first to last (and a replay last, after its speed): a
#: year holds every published trace (BurstGPT's four months, Azure's weeks), and a damaged
#: time (1e300 ms) is refused instead of waited for
MAX_SPAN_DAYS = 366
MAX_SPAN_SECONDS = MAX_SPAN_DAYS * 86400.0
#: the defaults of --trace-max-tokens and --trace-max-requests
DEFAULT_MAX_TOKENS = 1_048_576
DEFAULT_MAX_REQUESTS = 2_000_000


@dataclass(frozen=True)
class TraceLimits:
    """What a trace's lines may ask, checked as each is read, so a hostile file is refused
    before anything of its size is made: `tokens`, the most prompt + output tokens of one
    request (`says`: where that limit comes from, for the message); `requests`, the most
    requests (every load process holds them all); times within `MAX_SPAN_SECONDS`."""

    tokens: int = DEFAULT_MAX_TOKENS
    requests: int = DEFAULT_MAX_REQUESTS
    says: str = ""

    @property
    def tokens_said(self) -> str:
        return self.says or f"--trace-max-tokens {self.tokens}"


class TraceError(SettingsError):
    """A trace that cannot be replayed as asked: str(e) is one line, `FILE:LINE: what is wrong
    (what to do)` for a line of the file. A `SettingsError`, so `vllm-load` reports it as a bad
    option (one line, exit status 2)."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace. `at`: seconds from the start of the replay (after window and
    speed); `hash_ids`: Mooncake's ids of the prompt's blocks of `Trace.block_tokens` tokens, in
    order (requests that share an id share that block and every block before it); `index`: its
    position among the file's requests (0-based, file order), kept through window and speed;
    `session`: an agentic trace's, the session it opens (`agentic_sessions.SessionPlan`: its turns and
    subagents, replayed from this request on)."""

    at: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    index: int = 0
    session: Any = None


@dataclass(frozen=True)
class Trace:
    """The requests of one trace file, sorted by `at` (the first at 0 as read; a window's may
    start later), and the rows of the file left out, by reason (`skip_reasons`: BurstGPT's
    failed requests)."""

    path: str
    format: str
    requests: tuple[TraceRequest, ...]
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    skip_reasons: Mapping[str, int] = field(default_factory=dict)
    #: what a log should say about how the file was read (a time before the trace's start)
    notes: tuple[str, ...] = ()
    #: the file's longest request, prompt + output tokens, and its line (`check_context`)
    longest: tuple[int, int] = (0, 0)

    @property
    def duration(self) -> float:
        """Seconds from the start of the replay to the last request (0 for one request)."""
        return self.requests[-1].at if self.requests else 0.0

    @property
    def sent_requests(self) -> int:
        """The requests its replay sends: one each, an agentic trace's sessions every turn of
        theirs and of their subagents'."""
        return sum(1 if r.session is None else r.session.requests() for r in self.requests)

    @property
    def skipped(self) -> int:
        """How many rows of the file are not requests here (window and speed aside)."""
        return sum(self.skip_reasons.values())

    def describe(self) -> str:
        """One line for a log: the file, its format, how many requests over how long."""
        count = len(self.requests)
        what = "sessions" if self.format == "agentic" else "requests"
        text = f"{self.path} ({self.format}): {count} {what} over {self.duration:.1f} s"
        if self.duration > 0:
            text += f" ({count / self.duration:.2f}/s)"
        if self.skip_reasons:
            reasons = ", ".join(f"{n} {why}" for why, n in sorted(self.skip_reasons.items()))
            text += f", {self.skipped} rows skipped ({reasons})"
        return text

    def window(self, start: float = 0.0, duration: float | None = None) -> Trace:
        """The requests with start <= at < start + duration (to the end without a duration),
        their times rebased to `start`: the replay begins at the window's start, not at its first
        request. A window with no request in it is refused."""
        if not (math.isfinite(start) and start >= 0):
            raise TraceError(f"{self.path}: the window's start must be 0 s or later, got {start}")
        if duration is not None and not duration > 0:  # NaN too
            raise TraceError(
                f"{self.path}: the window's duration must be above 0 s, got {duration}"
            )
        end = math.inf if duration is None else start + duration
        times = [r.at for r in self.requests]
        first, last = bisect.bisect_left(times, start), bisect.bisect_left(times, end)
        if first == last:
            shown = "the end" if duration is None else f"{end:g} s"
            raise TraceError(
                f"{self.path}: no request from {start:g} s to {shown} (the trace's requests run "
                f"from 0 to {self.duration:g} s: choose a window inside it)"
            )
        taken = tuple(dataclasses.replace(r, at=r.at - start) for r in self.requests[first:last])
        return dataclasses.replace(self, requests=taken)

    def faster(self, speed: float) -> Trace:
        """The same requests, each `at` divided by `speed` (2: twice as fast, 0.5: half)."""
        if not (math.isfinite(speed) and speed > 0):
            raise TraceError(f"{self.path}: the speed must be a number above 0, got {speed}")
        if self.duration / speed > MAX_SPAN_SECONDS:
            raise TraceError(
                f"{self.path}: at speed {speed:g} the replay of {self.duration:,.1f} s would last "
                f"{self.duration / speed:.3g} s, more than {MAX_SPAN_DAYS} days (give a speed "
                "nearer 1, or a shorter --trace-duration)"
            )
        faster = tuple(
            dataclasses.replace(
                r, at=r.at / speed, session=None if r.session is None else r.session.faster(speed)
            )
            for r in self.requests
        )
        return dataclasses.replace(self, requests=faster)

    def check_context(self, limit: int | None) -> None:
        """Refuse the file when its longest request (prompt + output) is longer than the
        model's context (`max_model_len`; None: the server did not say), naming its line: the
        server would refuse every such request."""
        tokens, line = self.longest
        if limit and tokens > limit:
            raise TraceError(
                f"{self.path}:{line}: {tokens} tokens (prompt + output), above the model's "
                f"max_model_len {limit}: the server would refuse it (replay a trace whose "
                "requests fit, or serve the model with a longer context)"
            )

    def share(self, processes: int, index: int) -> tuple[TraceRequest, ...]:
        """Load process `index`'s (from 0) share among `processes`: every processes-th request
        in order from its own index on (round robin), times unchanged. The shares of all the
        processes are the whole trace, each request in exactly one."""
        if processes < 1 or not 0 <= index < processes:
            raise TraceError(
                f"{self.path}: no share {index} of {processes} processes (0 <= index < processes)"
            )
        return self.requests[index::processes]
