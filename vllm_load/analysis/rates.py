"""Open-loop levels (--rates): the rate achieved, the queueing, and whether the target kept up.

Per level, over the same measured window as every other figure (`levels`):

- `requested_rate`: the level's rate from steps.csv (NaN for a concurrency level).
- `achieved_rate`: the level's successful measured requests per second of its measured window.
  The window runs from the W-th to the (W + K)-th finish of the level's requests, so this is the
  rate at which the target completed the level's requests: equal to the arrival rate while the
  target keeps up, its capacity when it cannot. (Counting sends instead would miss a target
  that accepts every request and queues it; counting starts would count the schedule, since a
  request starts at its scheduled arrival.) With Poisson arrivals it carries their noise: K
  arrivals span a window whose relative standard deviation is 1/√K.
- `queued_p50`/`queued_p99`: seconds the successful measured requests waited between when they
  were due (their scheduled arrival) and their sending: no free user (--max-in-flight), or a
  late wake-up. In a concurrency level the wait for the turnover pacer.
- `delay_growth`: the least-squares slope of the level's TTFT against its requests' scheduled
  start (seconds of delay added per second). TTFT counts from the scheduled arrival, so it holds
  the client's queueing and the server's: a target that keeps up keeps it flat; one that cannot
  makes it grow by about rate / capacity − 1 (a FIFO queue: the n-th request waits n/capacity −
  n/rate).

A level *could not keep up* when its achieved rate fell short of the requested one by more than
`RateRule.tolerance` (2 %), or by more than the arrivals' own noise allows when that is larger
(`RateRule.noise_z` standard deviations of Poisson arrivals), or when its delay grew by more
than `RateRule.max_growth` per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

RATE_COLUMNS: tuple[str, ...] = (
    "requested_rate",
    "achieved_rate",
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
) -> dict[str, np.ndarray]:
    """`RATE_COLUMNS` per level from the successful measured requests: their level's row in
    `group` (0..n_levels-1), scheduled start, TTFT and queued seconds; `requested` and
    `window_s` per level."""
    n_levels = len(requested)
    n_ok = np.bincount(group, minlength=n_levels)
    with np.errstate(invalid="ignore", divide="ignore"):
        achieved = np.where(np.isnan(requested), np.nan, n_ok / window_s)
    out = {"requested_rate": requested, "achieved_rate": achieved}
    q50, q99 = np.full(n_levels, np.nan), np.full(n_levels, np.nan)
    keep = ~np.isnan(queued)
    if keep.any():
        frame = pd.DataFrame({"g": group[keep], "q": queued[keep]})
        q = frame.groupby("g")["q"].quantile([0.5, 0.99]).unstack()
        rows = q.index.to_numpy(dtype=np.int64)
        q50[rows], q99[rows] = q[0.5].to_numpy(), q[0.99].to_numpy()
    out["queued_p50"], out["queued_p99"] = q50, q99
    growth = np.full(n_levels, np.nan)
    for i in np.flatnonzero(~np.isnan(requested)):
        pick = (group == i) & ~np.isnan(ttft) & ~np.isnan(start)
        growth[i] = delay_slope(start[pick], ttft[pick])
    out["delay_growth"] = growth
    return out


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

    tolerance: float = 0.02  # achieved rate this far short of the requested one: not kept up
    noise_z: float = 3.0  # ... unless Poisson arrivals could explain it (z standard deviations)
    max_growth: float = 0.02  # delay growing faster than this (s per s): not kept up

    def allowed_shortfall(self, measured: float, poisson: bool) -> float:
        """The fraction the achieved rate may fall short of the requested one by chance."""
        noise = self.noise_z / math.sqrt(measured) if poisson and measured > 0 else 0.0
        return max(self.tolerance, noise)

    def describe(self) -> str:
        return (
            "An open-loop level's achieved rate is its successful measured requests per second of "
            "its measured window (the rate the target completed them at). A level could not keep "
            f"up when that fell short of the requested rate by more than {self.tolerance:.0%} "
            f"(with Poisson arrivals, or {self.noise_z:g}/√K when that is more: K arrivals vary "
            f"that much by chance), or when its TTFT, which counts from the scheduled arrival, "
            f"grew by more than {self.max_growth:.0%} of the elapsed time (a queue building up)."
        )


@dataclass(frozen=True)
class RateVerdict:
    """Whether one open-loop level kept up, and the figures that say so."""

    requested: float
    achieved: float
    allowed: float  # shortfall allowed, fraction
    growth: float
    queued_p99: float
    max_growth: float = RateRule.max_growth

    @property
    def short(self) -> bool:
        return self.achieved < (1.0 - self.allowed) * self.requested

    @property
    def growing(self) -> bool:
        return self.growth > self.max_growth if self.growth == self.growth else False

    @property
    def kept_up(self) -> bool:
        return not (self.short or self.growing)

    def text(self) -> str:
        """Why the level could not keep up ("" when it did)."""
        if self.kept_up:
            return ""
        why = []
        if self.short:
            why.append(
                f"achieved {self.achieved:,.2f} of {self.requested:,.2f} requests/s "
                f"({self.achieved / self.requested - 1:+.1%})"
            )
        if self.growing:
            why.append(f"delay growing {self.growth:.2f} s per s")
        return "; ".join(why) + f", p99 queued {self.queued_p99:,.3f} s"


def rate_verdicts(
    metrics: pd.DataFrame, poisson: bool, rule: RateRule = RateRule()
) -> dict[int, RateVerdict]:
    """{level: verdict} for the open-loop levels of `metrics` with a measured achieved rate."""
    out: dict[int, RateVerdict] = {}
    for rec in metrics.to_dict("records"):
        requested, achieved = rec.get("requested_rate"), rec.get("achieved_rate")
        if requested is None or achieved is None or requested != requested or achieved != achieved:
            continue
        out[int(rec["level"])] = RateVerdict(
            float(requested),
            float(achieved),
            rule.allowed_shortfall(float(rec.get("measured") or 0), poisson),
            float(rec.get("delay_growth", math.nan)),
            float(rec.get("queued_p99", math.nan)),
            rule.max_growth,
        )
    return out


def poisson_arrivals(run: dict) -> bool:
    """Whether a run's arrivals were Poisson (run.json settings; the default)."""
    return (run.get("settings") or {}).get("arrivals", "poisson") == "poisson"


def is_rate_run(run: dict) -> bool:
    """Whether a run stepped through request rates (--rates) rather than concurrency levels."""
    return bool((run.get("settings") or {}).get("rates"))
