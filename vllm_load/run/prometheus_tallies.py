"""What the tester's own Prometheus metrics count, row by row: pure tallies, no I/O.

`RequestTallies.add` takes every record row as the master appends it (`RunSession.add_rows`)
and only increments: a counter per (outcome, user class, task, target), and per (user class,
target) the TTFT, ITL and E2E histograms and the prompt and completion tokens. Exposing them
(`prometheus_export`) reads these tallies when a scraper asks, never per row.

The histograms' bounds are `LATENCY_BOUNDS`: 20 per decade from 0.1 ms to 1000 s, each 12.2 %
above the one before. `histogram_quantile` interpolates inside the bucket that holds the
quantile's rank, and the same requests' exact quantile lies in that bucket too, so the two
differ by less than one bucket: 12.2 % of the value. ITL comes from each row's own histogram
(`run_format.histogram`, 1 % buckets), each of its buckets counted at the value it stands for; the
live figures parse it, and hand the parse on (`RunSession.add_rows`), so a row is parsed once.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable, Sequence

from ..run_format.histogram import bucket_value
from ..run_format.records import COLUMNS

BOUNDS_PER_DECADE = 20
LOWEST_BOUND_EXPONENT = -4  # 0.1 ms
HIGHEST_BOUND_EXPONENT = 3  # 1000 s
#: each bound over the one before it: the widest a quantile read from the histogram can be off
BUCKET_GROWTH = 10 ** (1 / BOUNDS_PER_DECADE)


def latency_bounds() -> tuple[float, ...]:
    """The histograms' `le` bounds in seconds, log-spaced, 4 significant digits each."""
    steps = (HIGHEST_BOUND_EXPONENT - LOWEST_BOUND_EXPONENT) * BOUNDS_PER_DECADE
    return tuple(
        float(f"{10 ** (LOWEST_BOUND_EXPONENT + k / BOUNDS_PER_DECADE):.4g}")
        for k in range(steps + 1)
    )


LATENCY_BOUNDS = latency_bounds()
OK = "ok"  # the outcome of a successful request; a failure's is its error category
FAILED = "error"  # a failure whose record names no category (a locustfile's own record)

_I = {name: COLUMNS.index(name) for name in COLUMNS}
_OK, _ERROR, _USER_CLASS, _TASK = (_I[c] for c in ("ok", "error", "user_class", "task"))
_TTFT, _E2E, _ITL_MEAN = _I["ttft"], _I["e2e"], _I["itl_mean"]
_PROMPT, _COMPLETION = _I["prompt_tokens"], _I["completion_tokens"]
_ASKED_PROMPT, _ASKED_COMPLETION = (
    _I["requested_prompt_tokens"],
    _I["requested_completion_tokens"],
)


def target_lookup(columns: Sequence[str], host: str) -> Callable[[Sequence], str]:
    """How a row names the server it went to: its `target` column where records have one
    (several --host targets), else the run's one `host`; an empty cell is the run's host too."""
    if "target" not in columns:
        return lambda row: host
    at = list(columns).index("target")
    return lambda row: row[at] or host


class LatencyHistogram:
    """Counts per bucket of `LATENCY_BOUNDS` (the last one above every bound), their sum and count."""

    __slots__ = ("counts", "total", "count")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BOUNDS) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BOUNDS, seconds)] += 1  # `le`: a bound holds its equal
        self.total += seconds
        self.count += 1

    def cumulative(self) -> list[int]:
        """Counts at or under each bound, then the count of all (Prometheus' `+Inf`)."""
        running, out = 0, []
        for n in self.counts:
            running += n
            out.append(running)
        return out


class FineBuckets:
    """Which `LATENCY_BOUNDS` bucket each of a row histogram's 1 % buckets falls in, found once
    per bucket: `index` maps the ones seen so far, `learn` adds one."""

    def __init__(self) -> None:
        self.index: dict[int, int] = {}

    def learn(self, fine: int) -> int:
        found = self.index[fine] = bisect_left(LATENCY_BOUNDS, bucket_value(fine))
        return found


class SeriesTally:
    """One (user class, target)'s latencies and tokens: its successful requests'."""

    __slots__ = ("ttft", "itl", "e2e", "prompt_tokens", "completion_tokens")

    def __init__(self) -> None:
        self.ttft = LatencyHistogram()
        self.itl = LatencyHistogram()
        self.e2e = LatencyHistogram()
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def add_itl(self, pairs: list[tuple[int, int]], mean: float | None, fine: FineBuckets) -> None:
        """A row's ITL histogram, as (1 % bucket, gaps) pairs, into the ITL histogram; its gaps'
        sum from the row's mean where it has one (exact), else from the buckets' values."""
        counts, index, gaps = self.itl.counts, fine.index, 0
        for bucket, n in pairs:  # (per gap bucket of every row: plain lookups)
            found = index.get(bucket)
            counts[fine.learn(bucket) if found is None else found] += n
            gaps += n
        self.itl.count += gaps
        if mean is None:
            self.itl.total += sum(bucket_value(bucket) * n for bucket, n in pairs)
        else:
            self.itl.total += mean * gaps


class RequestTallies:
    """Everything the exporter counts, from the record rows of one run."""

    def __init__(self, host: str, columns: Sequence[str] = COLUMNS) -> None:
        self.target_of = target_lookup(columns, host)
        #: (outcome, user class, task, target) -> requests that ended so
        self.requests: dict[tuple[str, str, str, str], int] = {}
        self.series: dict[tuple[str, str], SeriesTally] = {}  # (user class, target) -> tally
        self._fine = FineBuckets()

    def expect(self, user_classes: Sequence[str], targets: Sequence[str]) -> None:
        """The latency and token series of every user class and target, at zero before their
        first request: Prometheus takes a series' first sample as where it starts, so a rate
        over the run's first minutes then counts that request. (The request counters are
        labelled by task and outcome too, which are known only from the rows.)"""
        for user_class in user_classes:
            for target in targets:
                self.series.setdefault((user_class, target), SeriesTally())

    def add(self, row: Sequence, itl: list[tuple[int, int]]) -> None:
        """One record row (on the master, for every request: counts and buckets only), with its
        `itl_hist` already parsed into (bucket, gaps) pairs (`run.live.parse_counts`: the live
        figures parse it once for both)."""
        user_class, target = row[_USER_CLASS] or "", self.target_of(row)
        ok = bool(row[_OK])
        key = (OK if ok else row[_ERROR] or FAILED, user_class, row[_TASK] or "", target)
        self.requests[key] = self.requests.get(key, 0) + 1
        if not ok:
            return
        tally = self.series.get((user_class, target))
        if tally is None:
            tally = self.series[(user_class, target)] = SeriesTally()
        if (ttft := row[_TTFT]) is not None:  # (a request not streamed has none)
            tally.ttft.observe(ttft)
        tally.e2e.observe(row[_E2E])
        tally.add_itl(itl, row[_ITL_MEAN], self._fine)
        prompt = row[_PROMPT]
        completion = row[_COMPLETION]
        tally.prompt_tokens += (row[_ASKED_PROMPT] or 0) if prompt is None else prompt
        tally.completion_tokens += (
            (row[_ASKED_COMPLETION] or 0) if completion is None else completion
        )
