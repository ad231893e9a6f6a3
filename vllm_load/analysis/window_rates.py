"""Rates over a measured window that do not depend on where requests happen to finish.

A closed loop of equal requests finishes them in waves: 8 users whose requests all take 2 s
finish 8 at a time. Counting the requests (or their tokens) that *finish* inside a window whose
edges are themselves finish times then depends on where in a wave each edge falls: with W = 10
warm-up and K = 20 measured requests at 8 users, the window spans two waves (16 requests' worth
of time) but counts 20, and throughput reads 25 % high (−19 % with other edges). Measured on a
real vLLM, that was the difference between the client's and the server's token rates.

So every rate here counts the work done *inside* the window, by every successful request of
the run (any level, warm-up and unmeasured ones included), each spread over the part of its
life in which it was done:

- output tokens: the first at the first content chunk, the others evenly from there to the end
  (what the server's `generation_tokens_total` counts, as tokens are generated);
- prompt tokens: evenly from the request's start to its first content chunk (the prefill);
- requests: evenly over the request's life (a back-to-back chain of requests covers its user's
  time exactly, so a window covers as many requests as fit in it, fractions included).

Without a first-chunk time (non-streaming: TTFT = E2E), prompt and output tokens are spread
over the whole request. Failed requests add nothing: their tokens are unknown to the client.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RequestSpans:
    """What each successful request did and when (Unix seconds), as parallel arrays."""

    start: np.ndarray
    first: np.ndarray  # first content chunk; NaN when unknown
    end: np.ndarray
    prompt_tokens: np.ndarray
    completion_tokens: np.ndarray

    @classmethod
    def build(cls, start, ttft, end, prompt_tokens, completion_tokens) -> "RequestSpans":
        start = np.asarray(start, dtype=np.float64)
        end = np.asarray(end, dtype=np.float64)
        first = start + np.asarray(ttft, dtype=np.float64)
        # a first chunk at the very end (non-streaming, or a one-chunk stream) dates nothing apart
        first = np.where(first < end, first, np.nan)
        return cls(start, first, end, np.nan_to_num(np.asarray(prompt_tokens, dtype=np.float64)),
                   np.nan_to_num(np.asarray(completion_tokens, dtype=np.float64)))


@dataclass(frozen=True)
class WindowWork:
    """Work done inside one window: requests (fractional), prompt and output tokens."""

    requests: float
    prompt_tokens: float
    output_tokens: float


def share_inside(lo: np.ndarray, hi: np.ndarray, a: float, b: float) -> np.ndarray:
    """The share of each span [lo, hi] that lies inside [a, b]; a span of zero length counts
    whole when its instant is in (a, b]."""
    length = hi - lo
    overlap = np.clip(np.minimum(hi, b) - np.maximum(lo, a), 0.0, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(length > 0, overlap / length, ((lo > a) & (lo <= b)).astype(np.float64))
    return np.nan_to_num(share)


def work_in_window(spans: RequestSpans, a: float, b: float) -> WindowWork:
    """The requests and tokens of `spans` done inside the window [a, b]."""
    streamed = ~np.isnan(spans.first)
    first = np.where(streamed, spans.first, spans.start)
    lifetime = share_inside(spans.start, spans.end, a, b)
    prefill = np.where(streamed, share_inside(spans.start, first, a, b), lifetime)
    first_token = share_inside(first, first, a, b)
    decode = share_inside(first, spans.end, a, b)
    rest = np.maximum(spans.completion_tokens - 1.0, 0.0)
    output = np.where(streamed, np.minimum(spans.completion_tokens, 1.0) * first_token + rest * decode,
                      spans.completion_tokens * lifetime)
    return WindowWork(float(lifetime.sum()), float((spans.prompt_tokens * prefill).sum()), float(output.sum()))
