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

- output tokens: the first at the first content chunk, the others along the request's chunk
  marks (requests.csv `chunk_marks`: the arrival of every (n/16)-th chunk), evenly between two
  marks (what the server's `generation_tokens_total` counts, as tokens are generated). A stream
  is not even: on a real vLLM on CPU, 8 users' 2048-token prefills stalled every stream for
  ~12 s of each ~23 s cycle, and spreading a request's tokens evenly from its first chunk to its
  end put 6 % too few in a 62 s window. Without marks (older runs): evenly to the end;
- prompt tokens: evenly from the request's start to its first content chunk (the prefill);
- requests: evenly over the request's life (a back-to-back chain of requests covers its user's
  time exactly, so a window covers as many requests as fit in it, fractions included).

Without a first-chunk time (non-streaming: TTFT = E2E), prompt and output tokens are spread
over the whole request. Failed requests add nothing: their tokens are unknown to the client.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...run_format.stream_columns import MarkTable, parse_marks


@dataclass(frozen=True)
class ChunkMarks:
    """Some requests' chunk marks: request i's are row `rows[i]` of `table`, ms since its start
    (`run_format.stream_columns.MarkTable`). The table is a run's whole parse, shared and never
    written: a million requests' marks are 136 MB a copy as floats, so a selection of requests
    selects rows, and the marks become times only for the requests a window weighs."""

    table: MarkTable
    rows: np.ndarray
    tidy: np.ndarray  # per row of `table`: nothing missing before its last mark (every run's)

    @classmethod
    def of(cls, table: MarkTable) -> "ChunkMarks | None":
        """Every row of `table`; None when no request has marks (no column)."""
        if not table.size:
            return None
        missing = table.missing()
        late = (missing[:, :-1] & ~missing[:, 1:]).any(axis=1)  # a mark after a missing one
        return cls(table, np.arange(len(table)), ~late)

    def take(self, rows: np.ndarray) -> "ChunkMarks":
        return ChunkMarks(self.table, self.rows[rows], self.tidy)

    def tidy_rows(self) -> np.ndarray:
        """Per request: its marks are tidy (`tidy`)."""
        return self.tidy[self.rows]

    def times(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """The marks as Unix times, each within its request's life: they are rounded to 0.1 ms,
        so one may land just past the request's end, which is where a window edge may be (the
        W-th request's end)."""
        at = self.table.ms(self.rows)  # a new array: then in place
        at /= 1000.0
        at += start[:, None]
        return np.clip(at, start[:, None], end[:, None], out=at)


@dataclass(frozen=True)
class RequestSpans:
    """What each successful request did and when (Unix seconds), as parallel arrays."""

    start: np.ndarray
    first: np.ndarray  # first content chunk; NaN when unknown
    end: np.ndarray
    prompt_tokens: np.ndarray
    completion_tokens: np.ndarray
    marks: ChunkMarks | None = None  # its chunk marks, where the run recorded them

    @classmethod
    def build(
        cls, start, ttft, end, prompt_tokens, completion_tokens, marks=None, chunk_marks=None
    ) -> "RequestSpans":
        """`marks`: the requests' `chunk_marks` texts; or `chunk_marks`, the same parsed."""
        start = np.asarray(start, dtype=np.float64)
        end = np.asarray(end, dtype=np.float64)
        first = start + np.asarray(ttft, dtype=np.float64)
        # a first chunk at the very end (non-streaming, or a one-chunk stream) dates nothing apart
        first = np.where(first < end, first, np.nan)
        if chunk_marks is None and marks is not None:
            chunk_marks = ChunkMarks.of(MarkTable(parse_marks(marks)))
        return cls(
            start,
            first,
            end,
            np.nan_to_num(np.asarray(prompt_tokens, dtype=np.float64)),
            np.nan_to_num(np.asarray(completion_tokens, dtype=np.float64)),
            chunk_marks,
        )

    def take(self, rows: np.ndarray) -> "RequestSpans":
        """The spans of `rows` (a mask or indices): what `build` gives on those rows alone."""
        return RequestSpans(
            self.start[rows],
            self.first[rows],
            self.end[rows],
            self.prompt_tokens[rows],
            self.completion_tokens[rows],
            self.marks.take(rows) if self.marks is not None else None,
        )

    def mark_times(self) -> np.ndarray | None:
        """(requests, marks) chunk times (`ChunkMarks.times`); None without marks."""
        return self.marks.times(self.start, self.end) if self.marks is not None else None


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
    """The requests and tokens of `spans` done inside the window [a, b].

    Only the requests whose lives meet the window are weighed (a level's window meets a few of
    a run's requests); the others did nothing inside it and keep a share of 0, so the sums run
    over the same arrays, in the same order, as when every request was weighed. A request whose
    whole life is inside the window (after its start, up to its end) has every share exactly 1
    (a span's overlap is its own length, and x / x is 1), so only those that cross an edge are
    weighed segment by segment."""
    near = np.flatnonzero((spans.start <= b) & (spans.end >= a))
    whole = (spans.start[near] > a) & (spans.end[near] <= b)
    if spans.marks is not None:  # (a NaN amid the marks, from a field that is not a number,
        whole &= spans.marks.take(near).tidy_rows()  # is weighed as it always was)
    work = np.zeros((3, len(spans.start)))
    inside = spans.take(near[whole])
    ones = np.ones(len(inside.start))
    work[:, near[whole]] = _work(inside, ones, ones, ones, ones)
    work[:, near[~whole]] = _work_per_request(spans.take(near[~whole]), a, b)
    return WindowWork(float(work[0].sum()), float(work[1].sum()), float(work[2].sum()))


def _work_per_request(
    spans: RequestSpans, a: float, b: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each request's share of its life, prompt tokens and output tokens inside [a, b]."""
    streamed = ~np.isnan(spans.first)
    first = np.where(streamed, spans.first, spans.start)
    lifetime = share_inside(spans.start, spans.end, a, b)
    prefill = np.where(streamed, share_inside(spans.start, first, a, b), lifetime)
    first_token = share_inside(first, first, a, b)
    decode = share_inside(first, spans.end, a, b)
    marks = spans.mark_times()
    if marks is not None:
        decode = np.where(np.isnan(marks[:, 1]), decode, _share_along_marks(marks, a, b))
    return _work(spans, lifetime, prefill, first_token, decode)


def _work(
    spans: RequestSpans,
    lifetime: np.ndarray,
    prefill: np.ndarray,
    first_token: np.ndarray,
    decode: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each request's share of its life, prompt tokens and output tokens, from the shares of its
    life, prefill, first token and decode that fell inside the window."""
    streamed = ~np.isnan(spans.first)
    rest = np.maximum(spans.completion_tokens - 1.0, 0.0)
    output = np.where(
        streamed,
        np.minimum(spans.completion_tokens, 1.0) * first_token + rest * decode,
        spans.completion_tokens * lifetime,
    )
    return lifetime, spans.prompt_tokens * prefill, output


def _share_along_marks(marks: np.ndarray, a: float, b: float) -> np.ndarray:
    """The share of each request's chunks after its first that arrived inside [a, b], with an
    equal share of them between consecutive marks, evenly in between."""
    segments = np.sum(~np.isnan(marks), axis=1) - 1
    known = np.nan_to_num(marks)
    # every segment's share at once, then summed segment after segment (the order the sums
    # always had: the same figures to the last bit)
    inside = share_inside(known[:, :-1], known[:, 1:], a, b)
    inside[np.arange(inside.shape[1]) >= segments[:, None]] = 0.0
    share = np.zeros(len(marks))
    for k in range(inside.shape[1]):
        share += inside[:, k]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(segments > 0, share / np.maximum(segments, 1), 0.0)
