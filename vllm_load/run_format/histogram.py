"""A mergeable log-bucketed histogram for latency gaps (ITL).

Percentiles cannot be merged from per-worker or per-request summaries, so every request
carries its ITL gaps as a sparse histogram; any set of requests is merged by adding counts.
Bucket b stands for 1e-6 * 1.01**b seconds, so values keep a relative error of at most 0.5 %.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable

import numpy as np

BASE_SECONDS = 1e-6
GROWTH = 1.01
_LOG_GROWTH = math.log(GROWTH)


def bucket_of(seconds: float) -> int:
    """Bucket index of a gap in seconds (gaps under 1 µs go to bucket 0)."""
    if seconds <= BASE_SECONDS:
        return 0
    return round(math.log(seconds / BASE_SECONDS) / _LOG_GROWTH)


def buckets_of(seconds: np.ndarray) -> np.ndarray:
    """`bucket_of` for an array of gaps at once (same rule: halves round to even, as `round`)."""
    scaled = np.maximum(seconds, BASE_SECONDS)
    scaled /= BASE_SECONDS  # (in place: one temporary array instead of four)
    np.log(scaled, out=scaled)
    scaled /= _LOG_GROWTH
    return np.rint(scaled, out=scaled).astype(np.int64)


def format_sorted(sorted_seconds: np.ndarray) -> str:
    """The `bucket:count;...` text (`LogHistogram.format`) of values already in ascending order.

    Sorted values have non-decreasing buckets, so counting them is finding where the bucket
    changes: no dictionary, no per-value Python. This is what a request's ITL costs when it
    ends, and 1000 streams tend to end together.
    """
    n = len(sorted_seconds)
    if not n:
        return ""
    buckets = buckets_of(sorted_seconds)
    starts = [0, *(np.flatnonzero(buckets[1:] != buckets[:-1]) + 1).tolist()]
    ends = starts[1:] + [n]
    firsts = buckets[starts].tolist()
    return _text(zip(firsts, [end - start for start, end in zip(starts, ends)]))


def _text(counts: Iterable[tuple[int, int]]) -> str:
    """The `bucket:count;bucket:count` form of requests.csv, from (bucket, count) in bucket order."""
    return ";".join([f"{b}:{c}" for b, c in counts])


def bucket_value(bucket: int) -> float:
    """The value in seconds that a bucket stands for."""
    return BASE_SECONDS * GROWTH**bucket


class LogHistogram:
    """Counts of values per log bucket; add, merge, serialise, and read percentiles."""

    __slots__ = ("counts",)

    def __init__(self, counts: dict[int, int] | None = None) -> None:
        self.counts: Counter[int] = Counter(counts or {})

    @classmethod
    def of(cls, values: Iterable[float]) -> "LogHistogram":
        return cls(Counter(buckets_of(np.fromiter(values, dtype=float)).tolist()))

    @classmethod
    def parse(cls, text: str) -> "LogHistogram":
        """Read the `bucket:count;bucket:count` form used in requests.csv."""
        return cls().add_text(text)

    def add_text(self, text: str) -> "LogHistogram":
        """Add the counts of a `bucket:count;...` text (a merge without an intermediate histogram)."""
        if text:
            counts = self.counts
            for item in text.split(";"):
                bucket, _, count = item.partition(":")
                counts[int(bucket)] += int(count)
        return self

    def format(self) -> str:
        return _text(sorted(self.counts.items()))

    def merge(self, other: "LogHistogram") -> "LogHistogram":
        self.counts.update(other.counts)
        return self

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def percentile(self, q: float) -> float:
        """The q-th percentile (0..100) by nearest rank; NaN when empty."""
        total = self.total
        if total == 0:
            return math.nan
        rank = max(1, math.ceil(q / 100.0 * total))
        seen = 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen >= rank:
                return bucket_value(bucket)
        return bucket_value(max(self.counts))

    def mean(self) -> float:
        total = self.total
        if total == 0:
            return math.nan
        return sum(bucket_value(b) * c for b, c in self.counts.items()) / total
