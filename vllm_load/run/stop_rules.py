"""Judging a run's --stop-when rules (`stop_when`) on the master, one level at a time.

Which requests a rule reads: the level's measured requests (`steps`: the W + 1-th to W + K-th to
start), as the report measures them; a percentile over the successful ones, as every percentile
of the report (linear interpolation; ITL from the requests' merged histograms, by nearest rank).

When each rule is checked:

- `failed>N%` as the level's measured requests end (every tick of the load shape, a fraction
  of a second): once more of them have failed than N % of the level's K, its failed share is
  above N % however the rest end (a level cut short measures fewer, so its share only grows),
  so the rule trips then, and the load is not held on a target that fails; the level is cut
  there (steps.csv `stop_when`).
  A failure counts once its place among the level's starts is final (every load process has
  reported its starts up to it). At the level's end, over the measured requests it had.
- a percentile and `over-saturation` at the level's end: a percentile of part of a level is
  not the level's (its slowest requests end last), and a trend needs the whole level.

Over-saturation: TTFT and the requests in flight both rising within the level, each a slope
whose 99 % confidence interval lies above 0. Over the level's successful measured requests that
started once the level had settled (`settled`: one median E2E of them after the level's start,
the time the requests in flight take to climb from the level before to this level's load, which
a target that keeps up also shows; at most the first half of them is left out; at least
`MIN_POINTS` remain, or the level is not judged): each request's TTFT, and the requests in
flight when it started (due and not yet finished: every request of the run with a row, and
those still open). Successive requests' figures are correlated (a queue moves slowly), so a
least-squares slope over the requests themselves would claim far more certainty than it has;
they are cut into `BATCHES` consecutive batches of equal count, and the slope is fitted to the
batches' means (the batch-means method: batches longer than the queue's memory are nearly
independent), its interval from the t distribution with `BATCHES - 2` degrees of freedom.
A target that keeps up holds both flat; one that cannot keep up queues, and both grow through
the level. Measured on simulated levels of 10 warm-up and 100 measured requests (an 8-slot FIFO
queue, Poisson arrivals; tests/run/test_stop_rules.py): it fires on 0.8 % of levels at 60 % of
capacity, on about 1 in 7 at 90 % (a queue that close to its capacity drifts for longer than
a level, and a drift is a rise while it lasts), on 70 % at 130 %, 82 % at 150 % and 98.5 % at
200 %; 200 measured requests make those 85 %, 97 % and all (0.7 % at 60 %). A
closed-loop level holds its requests in flight at its users, so the rule fires on open-loop
levels (--rates, --trace), where arrivals do not wait for the target.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from ..load_kinds import Level
from ..run_format.histogram import LogHistogram
from ..run_format.records import COLUMNS, START_INDEX, WORKER_INDEX
from ..stop_when import FailedShare, OverSaturation, PercentileAbove, StopRule

#: batches a settled level's requests are cut into for the over-saturation slopes
BATCHES = 10
#: at least this many of them (3 a batch), or the rule does not judge the level
MIN_POINTS = 3 * BATCHES
#: the t distribution's 99.5th percentile at BATCHES - 2 = 8 degrees of freedom: the half-width
#: of a two-sided 99 % interval, in standard errors (scipy.stats.t.ppf(0.995, 8); a constant,
#: so the load process never imports scipy; tests/run/test_stop_rules.py checks it)
T_995_DF8 = 3.355387331333395

_END, _OK, _TTFT = COLUMNS.index("end_ts"), COLUMNS.index("ok"), COLUMNS.index("ttft")
_ITL_HIST = COLUMNS.index("itl_hist")

#: where a measured request stands among its level's starts (0-based), None while not final
Rank = Callable[[float, str], "int | None"]


@dataclass(frozen=True)
class Trend:
    """A slope per second of start time, and its 99 % interval (batch means)."""

    slope: float
    low: float
    high: float

    @property
    def rising(self) -> bool:
        return self.low > 0

    def text(self, unit: str) -> str:
        return f"{self.slope:+.3g} {unit} per s (99% CI {self.low:.3g} to {self.high:.3g})"


def trend(x: np.ndarray, y: np.ndarray, batches: int = BATCHES) -> Trend | None:
    """The batch-means slope of `y` against `x` (`x` ascending), None with fewer than three
    points a batch or no spread in time."""
    if len(x) < 3 * batches or batches != BATCHES:  # (the t value is for BATCHES)
        return None
    xm = np.array([part.mean() for part in np.array_split(x, batches)])
    ym = np.array([part.mean() for part in np.array_split(y, batches)])
    dx = xm - xm.mean()
    spread = float(np.dot(dx, dx))
    if not spread > 0:
        return None
    slope = float(np.dot(dx, ym - ym.mean()) / spread)
    residual = ym - ym.mean() - slope * dx
    se = math.sqrt(float(np.dot(residual, residual)) / (batches - 2) / spread)
    half = T_995_DF8 * se
    return Trend(slope, slope - half, slope + half)


def settled(start: np.ndarray, e2e: np.ndarray, level_start: float) -> np.ndarray:
    """Which of a level's requests (`start` ascending) started once it had settled: one median
    `e2e` after `level_start`, leaving out at most the first half of them."""
    if not len(start):
        return np.zeros(0, dtype=bool)
    wait = min(float(np.median(e2e)), float(start[len(start) // 2]) - level_start)
    return start >= level_start + wait


def in_flight_at(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per time, the requests due by then and not yet finished (`ends` inf: still open)."""
    started = np.searchsorted(np.sort(starts), times, side="right")
    ended = np.searchsorted(np.sort(ends), times, side="right")
    return (started - ended).astype(np.float64)


@dataclass(frozen=True)
class Trip:
    """A rule that tripped: which, at which level, the figure and its limit, and whether it
    tripped while the level ran (the level cut) or at its end."""

    rule: str  # as --stop-when writes it
    level: int
    load: str  # the level as a sentence names it: `8 users`, `2.00 requests/s`
    figure: str  # `failed`, a per-level column (`ttft_p99`), or `ttft_slope`
    value: float  # a share, seconds, or seconds per second
    limit: float
    detail: str
    cut: bool
    at: float

    def line(self) -> str:
        """One line for the log, the end of the run and its exit."""
        when = "while it ran (the level was cut there)" if self.cut else "at its end"
        return (
            f"--stop-when {self.rule} tripped at level {self.level} ({self.load}) {when}: "
            f"{self.detail}"
        )

    def as_json(self) -> dict:
        """run.json's `stopped_by` (docs/run-format.md)."""
        return {**asdict(self), "line": self.line()}


@dataclass
class _Measured:
    """What the rules read of one of the level's requests that ended."""

    start: float
    worker: str
    ok: bool
    row: list  # the whole row where a percentile or over-saturation reads it, else empty


@dataclass
class StopRules:
    """The run's rules and what they read of the running level's requests."""

    rules: tuple[StopRule, ...]
    level: int = -1
    load: Level | None = None
    warmup: int = 0
    measured: int = 0  # K, the level's measured requests
    started_at: float = 0.0
    _rows: list[_Measured] = field(default_factory=list)  # the level's requests that ended
    _failed: list[_Measured] = field(default_factory=list)  # ... that failed
    _spans: list[tuple[float, float]] = field(default_factory=list)  # every row's (start, end)

    @property
    def _whole_rows(self) -> bool:
        return any(not isinstance(rule, FailedShare) for rule in self.rules)

    def level_started(self, level: int, load: Level, warmup: int, measured: int, at: float) -> None:
        self.level, self.load, self.warmup, self.measured = level, load, warmup, measured
        self.started_at = at
        self._rows, self._failed = [], []
        self._spans = [s for s in self._spans if s[1] >= at]  # (earlier ones end before it)

    def add(self, row: list, level: int) -> None:
        """A request that ended (a requests.csv row, with its level)."""
        if any(isinstance(rule, OverSaturation) for rule in self.rules):  # (only it reads them)
            self._spans.append((row[START_INDEX], row[_END]))
        if level != self.level:
            return
        kept = row if self._whole_rows else []  # (a failed share alone: a level's rows not held)
        seen = _Measured(row[START_INDEX], str(row[WORKER_INDEX]), bool(row[_OK]), kept)
        self._rows.append(seen)
        if not seen.ok:
            self._failed.append(seen)

    def check(
        self, over: bool, rank: Rank, open_starts: Callable[[], list[float]], now: float
    ) -> Trip | None:
        """The first rule the running level trips: while it runs (`over` False) the failed share
        alone, at its end (`over`) every rule. `rank` places a start among the level's starts;
        `open_starts()` gives the run's requests in flight (started, no row yet), asked only at
        a level's end."""
        for rule in self.rules:
            if isinstance(rule, FailedShare):
                trip = self._failed_share(rule, over, rank)
            elif not over:
                continue
            elif isinstance(rule, PercentileAbove):
                trip = self._percentile(rule, self._successes(rank))
            else:
                trip = self._over_saturation(rule, self._successes(rank), open_starts())
            if trip is not None:
                return Trip(rule.text, self.level, self._load_text(), *trip, cut=not over, at=now)
        return None

    def _load_text(self) -> str:
        return self.load.text() if self.load is not None else ""

    def _is_measured(self, seen: _Measured, rank: Rank) -> bool:
        place = rank(seen.start, seen.worker)
        return place is not None and self.warmup <= place < self.warmup + self.measured

    def _successes(self, rank: Rank) -> list[_Measured]:
        return sorted(
            (s for s in self._rows if s.ok and self._is_measured(s, rank)), key=lambda s: s.start
        )

    def _failed_share(
        self, rule: FailedShare, over: bool, rank: Rank
    ) -> tuple[str, float, float, str] | None:
        failed = sum(1 for s in self._failed if self._is_measured(s, rank))
        if over:
            ended = sum(1 for s in self._rows if self._is_measured(s, rank))
            if ended and failed / ended > rule.limit:
                share = failed / ended
                return (
                    "failed",
                    share,
                    rule.limit,
                    f"{failed} of its {ended} measured requests failed ({share:.1%}, more than "
                    f"{rule.limit * 100:g}%)",
                )
            return None
        if self.measured and failed > rule.limit * self.measured:
            share = failed / self.measured
            return (
                "failed",
                share,
                rule.limit,
                f"{failed} of its {self.measured} measured requests had failed, at least "
                f"{share:.1%} whatever the rest do (more than {rule.limit * 100:g}%)",
            )
        return None

    def _percentile(
        self, rule: PercentileAbove, rows: list[_Measured]
    ) -> tuple[str, float, float, str] | None:
        value = level_percentile_of([s.row for s in rows], rule.metric, rule.percentile)
        if not value > rule.limit:  # (NaN: the level has none of that figure)
            return None
        return (
            rule.column,
            value,
            rule.limit,
            f"{rule.column} {_seconds(value)} over its {len(rows)} successful measured "
            f"requests, above {_seconds(rule.limit)}",
        )

    def _over_saturation(
        self, rule: OverSaturation, rows: list[_Measured], open_starts: list[float]
    ) -> tuple[str, float, float, str] | None:
        timed = [s for s in rows if s.row[_TTFT] is not None]
        starts = np.array([s.start for s in timed], dtype=np.float64)
        ttft = np.array([s.row[_TTFT] for s in timed], dtype=np.float64)
        e2e = np.array([s.row[_END] - s.start for s in timed], dtype=np.float64)
        keep = settled(starts, e2e, self.started_at)
        starts, ttft = starts[keep], ttft[keep]
        spans = np.array(self._spans, dtype=np.float64).reshape(-1, 2)
        all_starts = np.concatenate([spans[:, 0], np.asarray(open_starts, dtype=np.float64)])
        all_ends = np.concatenate([spans[:, 1], np.full(len(open_starts), np.inf)])
        found = over_saturated(starts, ttft, in_flight_at(starts, all_starts, all_ends))
        if found is None:
            return None
        rising_ttft, rising_flight = found
        return (
            "ttft_slope",
            rising_ttft.slope,
            0.0,
            f"over its {len(starts)} successful measured requests once it had settled, TTFT rose "
            f"{rising_ttft.text('s')} and the requests in flight {rising_flight.text('requests')}",
        )


def over_saturated(
    start: np.ndarray, ttft: np.ndarray, in_flight: np.ndarray
) -> tuple[Trend, Trend] | None:
    """The TTFT and in-flight trends of requests ordered by start when both rise (the module
    docstring), else None (also with fewer than `MIN_POINTS`)."""
    ttft_trend, flight_trend = trend(start, ttft), trend(start, in_flight)
    if ttft_trend is None or flight_trend is None:
        return None
    return (ttft_trend, flight_trend) if ttft_trend.rising and flight_trend.rising else None


def level_percentile_of(rows: list[list], metric: str, percentile: int) -> float:
    """The `percentile` of `metric` over `rows` (requests.csv rows) as the report computes it:
    linear interpolation over the requests with a value; ITL from their merged histograms
    (nearest rank). NaN when none has a value."""
    if metric == "itl":
        merged = LogHistogram()
        for row in rows:
            merged.add_text(row[_ITL_HIST] or "")
        return merged.percentile(percentile)
    at = COLUMNS.index(metric)
    values = np.array([r[at] for r in rows if r[at] is not None], dtype=np.float64)
    values = values[~np.isnan(values)]
    return float(np.percentile(values, percentile)) if len(values) else math.nan


def _seconds(value: float) -> str:
    return f"{value * 1000:,.0f} ms" if value < 1 else f"{value:,.2f} s"
