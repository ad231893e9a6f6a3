"""Open-loop levels (--rates): the rate offered and achieved, the queueing, and whether the
target kept up.

Per level, over the same measured window as every other figure (`levels`):

- `requested_rate`: the level's rate from steps.csv (NaN for a concurrency level).
- `offered_rate`: the arrivals that became due inside the measured window, per second of it:
  the load actually offered while the window's completions were counted. A request's `start_ts`
  is its scheduled arrival, so these are the level's requests whose `start_ts` falls in the
  window. (Only the level's own: a request belongs to the level during which it was due, the
  next level's arrivals begin when this one ends, after its window, and the previous level's
  ended before this one began; counting every level's would only add clock skew between load
  processes.) Arrivals that were due but that no user took before the level ended (every one of
  --max-in-flight busy: a target far behind) have no row; past a load process's last recorded
  arrival, while it had arrivals waiting (all its users busy, or a recorded request due and not
  yet sent), they are counted as its share of the requested rate times that time (a Poisson schedule draws an arrival only when it is taken, so there is
  nothing else to count).
  With Poisson arrivals the offered rate differs from the requested one by chance: K arrivals
  vary by 1/√K (5.8 % at K = 300, 4.1 % at K = 600); with constant arrivals it is the requested
  rate.
- `achieved_rate`: the level's successful requests that finished inside the window, per second
  of it. The window runs from the W-th to the (W + K)-th finish of the level's requests, so this
  is the rate at which the target completed them: the offered rate while it keeps up, its capacity when
  it cannot. (Counting sends instead would miss a target that accepts every request and queues
  it.)
- `in_flight_start`/`in_flight_end`: the level's requests due and not yet finished (sent or
  still waiting for a user) at the window's start and end.
- `queued_p50`/`queued_p99`: seconds the successful measured requests waited between when they
  were due (their scheduled arrival) and their sending: no free user (--max-in-flight), or a
  late wake-up. In a concurrency level the wait for the turnover pacer.
- `delay_growth`: the least-squares slope of the level's TTFT against its requests' scheduled
  start (seconds of delay added per second). TTFT counts from the scheduled arrival, so it holds
  the client's queueing and the server's: a target that keeps up keeps it flat; one that cannot
  makes it grow by about rate / capacity − 1 (a FIFO queue: the n-th request waits n/capacity −
  n/rate).

Keeping up is judged against the offered rate, not the requested one, so the arrivals' own
noise is out of the verdict. Over the window, arrivals A and finishes F of the level's requests
differ exactly by the change in requests in flight: A − F = in_flight_end − in_flight_start
(Little's law in counts). A target that keeps up holds the number in flight steady, about
rate × latency, but not constant: it fluctuates like a Poisson count (an M/G/∞ queue), so the
difference of its two values at the window's edges, far apart, has a standard deviation of
√(in_flight_start + in_flight_end) requests. At 50 requests/s and 0.5 s latency that is √50 ≈ 7
requests; against K = 600 that is 1.2 %, so a 2 % rule on raw counts would fail a target that
keeps up about one time in twenty; at 2 s latency (√200 ≈ 14, 2.4 %) one time in five. A
target that cannot keep up, on the other hand, makes the number in flight grow through the
window by the whole shortfall ((rate − capacity) × window: 60 of 600 arrivals for a target 10 % short),
far beyond that noise.

A level *could not keep up* when its successful completions in the window fell short of the
arrivals in it by more than `RateRule.tolerance` (2 %) of the arrivals, or by more than
`RateRule.noise_z` (3) standard deviations of the in-flight count at the window's edges when
that is larger (3 × 7 = 21 of 600, 3.5 %, at 50 requests/s and 0.5 s; below 2 % when rate ×
latency is under 8 at K = 600), or when its delay grew by more than `RateRule.max_growth`
(0.02 s) per second: a queue growing by 2 % of the rate, whatever the counts at the edges.
Failed requests count as not completed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..frame_records import row_dicts
from . import group_percentiles

RATE_COLUMNS: tuple[str, ...] = (
    "requested_rate",
    "offered_rate",
    "achieved_rate",
    "in_flight_start",
    "in_flight_end",
    "queued_p50",
    "queued_p99",
    "delay_growth",
)


def rate_figures(
    requested: np.ndarray,
    group: np.ndarray,
    start: np.ndarray,
    ttft: np.ndarray,
    queued: np.ndarray,
    window_s: np.ndarray,
    completed: np.ndarray,
) -> dict[str, np.ndarray]:
    """`RATE_COLUMNS` per level from the successful measured requests: their level's row in
    `group` (0..n_levels-1), scheduled start, TTFT and queued seconds; `requested`, `window_s`
    and `completed` (the level's successful requests that finished inside the window) per level."""
    n_levels = len(requested)
    with np.errstate(invalid="ignore", divide="ignore"):
        achieved = np.where(np.isnan(requested), np.nan, completed / window_s)
    out = {"requested_rate": requested, "achieved_rate": achieved}
    q = group_percentiles(queued, group, n_levels, (0.5, 0.99))
    out["queued_p50"], out["queued_p99"] = q[:, 0], q[:, 1]
    growth = np.full(n_levels, np.nan)
    for i in np.flatnonzero(~np.isnan(requested)):
        pick = (group == i) & ~np.isnan(ttft) & ~np.isnan(start)
        growth[i] = delay_slope(start[pick], ttft[pick])
    out["delay_growth"] = growth
    return out


def offered_figures(
    requested: np.ndarray,
    users: np.ndarray,
    group: np.ndarray,
    start: np.ndarray,
    sent: np.ndarray,
    end: np.ndarray,
    worker: np.ndarray,
    window_start: np.ndarray,
    window_end: np.ndarray,
) -> dict[str, np.ndarray]:
    """`offered_rate`, `in_flight_start` and `in_flight_end` per level (the module docstring).

    From every recorded request, any outcome: its level's row in `group`, its scheduled start,
    its sending (start + queued), its end and its load process (a number); per level
    `requested`, `users` (--max-in-flight) and the window."""
    n_levels = len(requested)
    offered = np.full(n_levels, np.nan)
    flight_a, flight_b = np.full(n_levels, np.nan), np.full(n_levels, np.nan)
    for i in np.flatnonzero(~np.isnan(requested) & (window_end > window_start)):
        a, b = window_start[i], window_end[i]
        pick = (group == i) & ~np.isnan(start)
        due, done = start[pick], end[pick]
        processes = np.unique(worker[pick])
        n_proc = max(len(processes), 1)
        backlog = _Backlog(
            requested[i] / n_proc,  # the processes split the rate evenly
            max(1, int(users[i] // n_proc)) if users[i] == users[i] else 1,
            {int(w): float(due[worker[pick] == w].max()) for w in processes},
            worker,
            start,
            sent,
            end,
        )
        untaken_a, untaken_b = backlog.untaken(a), backlog.untaken(b)
        arrived = np.count_nonzero((due > a) & (due <= b)) + untaken_b - untaken_a
        offered[i] = arrived / (b - a)
        flight_a[i] = np.count_nonzero((due <= a) & ~(done <= a)) + untaken_a
        flight_b[i] = np.count_nonzero((due <= b) & ~(done <= b)) + untaken_b
    return {"offered_rate": offered, "in_flight_start": flight_a, "in_flight_end": flight_b}


@dataclass(frozen=True)
class _Backlog:
    """A level's arrivals that no user took before it ended: they have no row.

    A process's arrivals past its last recorded one (`last`, by process) count only while it had
    arrivals waiting: all its users busy (its share, `cap`, of --max-in-flight in flight: sent and
    unfinished, any level), or one of its recorded requests due and not yet sent (a user between
    two requests at that instant still leaves the queue behind it: first come, first served).
    A process with a free user and nothing waiting took every arrival as it became due.
    They count as the process's `share` of the requested rate: a Poisson schedule draws an
    arrival only when it is taken, so there is nothing else to count."""

    share: float
    cap: int
    last: dict[int, float]
    worker: np.ndarray
    due: np.ndarray
    sent: np.ndarray
    end: np.ndarray

    def untaken(self, t: float) -> float:
        """Arrivals due by `t` that no user took (an estimate)."""
        total = 0.0
        for w, t_last in self.last.items():
            if t <= t_last:
                continue
            # the request ending at `t` (a window's edge) counts: its user takes the next
            # arrival only after it
            mine = self.worker == w
            busy = np.count_nonzero(mine & (self.sent <= t) & ~(self.end < t))
            waiting = np.any(mine & (self.due <= t) & (self.sent > t))
            if busy >= self.cap or waiting:
                total += self.share * (t - t_last)
        return total


def delay_slope(start: np.ndarray, delay: np.ndarray) -> float:
    """Least-squares slope of `delay` against `start` (NaN for fewer than 3 points or no spread)."""
    if len(start) < 3:
        return math.nan
    x = start - start.mean()
    spread = float(np.dot(x, x))
    return float(np.dot(x, delay - delay.mean()) / spread) if spread > 0 else math.nan


@dataclass(frozen=True)
class RateRule:
    """When an open-loop level counts as kept up (the module docstring)."""

    tolerance: float = 0.02  # completions this far short of the arrivals: not kept up
    noise_z: float = 3.0  # ... unless the in-flight count's fluctuation could explain it (z sd)
    max_growth: float = 0.02  # delay growing faster than this (s per s): not kept up

    def allowed_shortfall(
        self, arrivals: float, in_flight_start: float, in_flight_end: float
    ) -> float:
        """The fraction of `arrivals` the completions may fall short by while the target keeps
        up: the tolerance, or the noise of the in-flight count at the window's edges if larger."""
        edges = in_flight_start + in_flight_end
        if not arrivals > 0 or not edges > 0:  # NaN too
            return self.tolerance
        return max(self.tolerance, self.noise_z * math.sqrt(edges) / arrivals)

    def describe(self) -> str:
        return (
            "An open-loop level's offered rate is the arrivals that became due in its measured "
            "window, per second of it (with Poisson arrivals it differs from the requested rate "
            "by chance); its achieved rate is its successful measured requests per second of the "
            "window (the rate the target completed them at). A level could not keep up when its "
            f"completions fell short of its arrivals by more than {self.tolerance:.0%} (or by "
            f"more than {self.noise_z:g} standard deviations of the requests in flight at the "
            "window's edges, √(at start + at end), when that is more: arrivals and completions "
            "differ by the change in requests in flight, which fluctuates even when the target "
            "keeps up), or when its TTFT, which counts from the scheduled arrival, grew by more "
            f"than {self.max_growth:.0%} of the elapsed time (a queue building up). A level whose "
            "completions exceeded its arrivals by as much worked off a backlog in its window. "
            "Either way its window is no steady state, and the level is left out of the peak and "
            "the saturation point."
        )


@dataclass(frozen=True)
class RateVerdict:
    """Whether one open-loop level kept up, and the figures that say so."""

    requested: float
    offered: float
    achieved: float
    allowed: float  # shortfall of achieved below offered allowed, fraction
    growth: float
    queued_p99: float
    max_growth: float = RateRule.max_growth

    @property
    def short(self) -> bool:
        return self.achieved < (1.0 - self.allowed) * self.offered

    @property
    def growing(self) -> bool:
        return self.growth > self.max_growth if self.growth == self.growth else False

    @property
    def kept_up(self) -> bool:
        return not (self.short or self.growing)

    @property
    def draining(self) -> bool:
        """More completions than arrivals beyond the noise: the window caught a backlog (from
        the level's start, or the level before) being worked off, not a steady state."""
        return self.achieved > (1.0 + self.allowed) * self.offered

    @property
    def steady(self) -> bool:
        """Completions kept pace with arrivals, neither behind nor working off a backlog: only
        then is the level's throughput the target's at this rate."""
        return self.kept_up and not self.draining

    def unsteady_text(self) -> str:
        """Why the level's window was no steady state ("" when it was)."""
        if self.steady:
            return ""
        if not self.kept_up:
            return "the target could not keep up: " + self.text()
        return (
            f"achieved {self.achieved:,.2f} requests/s, more than the {self.offered:,.2f} offered "
            f"({self.achieved / self.offered - 1:+.1%}): the window worked off a backlog "
            "(raise --warmup-requests above the rate times the E2E latency)"
        )

    def text(self) -> str:
        """Why the level could not keep up ("" when it did)."""
        if self.kept_up:
            return ""
        why = []
        if self.short:
            why.append(
                f"achieved {self.achieved:,.2f} of {self.offered:,.2f} requests/s offered "
                f"({self.achieved / self.offered - 1:+.1%}; {self.requested:,.2f} requested)"
            )
        if self.growing:
            why.append(f"delay growing {self.growth:.2f} s per s")
        return "; ".join(why) + f", p99 queued {self.queued_p99:,.3f} s"


def rate_verdicts(metrics: pd.DataFrame, rule: RateRule = RateRule()) -> dict[int, RateVerdict]:
    """{level: verdict} for the open-loop levels of `metrics` with a measured achieved rate. The
    achieved rate is judged against the offered one, whatever the arrivals."""
    out: dict[int, RateVerdict] = {}
    for rec in row_dicts(metrics):
        requested, achieved = _float(rec.get("requested_rate")), _float(rec.get("achieved_rate"))
        if math.isnan(requested) or math.isnan(achieved):
            continue
        offered = _float(rec.get("offered_rate"))
        if math.isnan(offered):  # figures from before the offered rate: judge by the request
            offered = requested
        window = _float(rec.get("window_s"))
        out[int(rec["level"])] = RateVerdict(
            requested,
            offered,
            achieved,
            rule.allowed_shortfall(
                offered * window,
                _float(rec.get("in_flight_start")),
                _float(rec.get("in_flight_end")),
            ),
            _float(rec.get("delay_growth")),
            _float(rec.get("queued_p99")),
            rule.max_growth,
        )
    return out


def _float(value: Any) -> float:
    """`value` as a float, NaN for a missing one."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
