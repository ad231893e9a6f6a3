"""The tokens one load process's requests have received so far: the web UI's live tok/s.

Counting the tokens of the requests that *finished* in a few seconds aliases with a closed
loop's waves (8 users whose requests all take 2 s finish 8 at a time, and a 5 s window holds 2
or 3 of those waves: ±20 % at constant load). So each process reports, with every worker report
(in a local run, as often), how many prompt and output tokens its requests have received so far, per user
class: those of the requests that ended, and those of the ones in flight, read from what their
SSE meter already keeps (its list of content chunk times). Nothing is added to the per-chunk
path: the in-flight requests are walked only when a report is taken, once a second (about 1 µs
a request); each request costs a dict entry when it starts and its final count when it ends.

What a request counts, while in flight and once it has ended:

- output tokens: its content chunks so far, times the tokens per chunk of this process's ended
  streams (1 until one has ended: a chunk per token, as vLLM streams by default); at its end,
  its usage's `completion_tokens` (or the same estimate without usage). A non-streamed request
  has no chunks: its tokens count at its end.
- prompt tokens: along its output, `prompt × output so far / requested output` where the request
  fixed its output length (the built-in test), so a wave of requests does not add its prompts
  in one instant (which would alias again); at its first content chunk where it fixed none; at
  its end, its usage's `prompt_tokens`. A request that does not say its prompt length
  (`chat()`/`complete()` of your own users, datasets) counts its prompt at its end.
- a failed request keeps what it received; one that received nothing counts nothing.

Counts only grow, except where a request's usage says fewer tokens than were estimated in flight.
"""

from __future__ import annotations

import time

from .clock import WALL_CLOCK
from .request import MeasuredRequest


def _count(usage: object, key: str) -> int | None:
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class StreamedTokens:
    """Prompt and output tokens received by this process's requests, per user class, so far."""

    __slots__ = ("_flying", "_ended", "_chunks", "_tokens")

    def __init__(self) -> None:
        # each request in flight -> what `counts` reads of it: its meter's list of content chunk
        # times (the meter appends to that one list), user class, prompt and fixed output lengths
        self._flying: dict[MeasuredRequest, tuple[list[float], str, int, int | None]] = {}
        self._ended: dict[str, list[float]] = {}  # user class -> [prompt, output] of ended ones
        self._chunks = 0  # content chunks of the ended streams whose usage gave their output
        self._tokens = 0  # and that output

    def started(self, request: MeasuredRequest) -> None:
        spec = request.spec
        self._flying[request] = (
            request.meter.chunk_times,
            spec.user_class,
            spec.prompt_tokens or 0,
            spec.completion_tokens or None,
        )

    def ended(self, request: MeasuredRequest) -> None:
        """The request is over (recorded, or cut off): its final counts replace its running ones."""
        self._flying.pop(request, None)
        spec, usage, chunks = request.spec, request.usage, len(request.meter.chunk_times)
        output = _count(usage, "completion_tokens")
        if output is not None and chunks:
            self._chunks += chunks
            self._tokens += output
        prompt = _count(usage, "prompt_tokens")
        running = (0.0, 0.0)
        if prompt is None or output is None:
            running = _so_far(
                chunks, self.tokens_per_chunk(), spec.prompt_tokens or 0, spec.completion_tokens
            )
        final_prompt = running[0] if prompt is None else float(prompt)
        final_output = running[1] if output is None else float(output)
        counts = self._ended.get(spec.user_class)
        if counts is None:
            counts = self._ended[spec.user_class] = [0.0, 0.0]
        counts[0] += final_prompt
        counts[1] += final_output

    def tokens_per_chunk(self) -> float:
        """Output tokens per content chunk of this process's ended streams (1 before any)."""
        return self._tokens / self._chunks if self._chunks and self._tokens else 1.0

    def counts(self) -> dict[str, list[float]]:
        """{user class: [prompt, output]} tokens received so far, ended and in-flight requests."""
        totals = {name: list(counts) for name, counts in self._ended.items()}
        per_chunk = self.tokens_per_chunk()
        for times, user_class, prompt, expected in self._flying.values():
            chunks = len(times)
            if not chunks:
                continue
            counts = totals.get(user_class)
            if counts is None:
                counts = totals[user_class] = [0.0, 0.0]
            output = chunks * per_chunk
            counts[0] += prompt * min(1.0, output / expected) if expected else prompt
            counts[1] += output
        return totals

    def report(self) -> list:
        """[time, `counts()`]: what rides in a worker report (`vllm_tokens`); the time on the
        process's `WALL_CLOCK`, as its records' are."""
        return [WALL_CLOCK.wall(time.perf_counter()), self.counts()]


def _so_far(
    chunks: int, per_chunk: float, prompt: int, expected: int | None
) -> tuple[float, float]:
    """(prompt, output) tokens received by a request with `chunks` content chunks so far."""
    if not chunks:
        return 0.0, 0.0
    output = chunks * per_chunk
    return (prompt * min(1.0, output / expected) if expected else float(prompt)), output
