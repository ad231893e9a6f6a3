"""Whether one level's measured requests prove an SLO held, failed, or cannot tell: pure.

Per SLO item, its figure at the level as the report computes it (the estimate) and a 95 %
interval for it, judged against the item's limit: *holds* when the whole interval is within the
limit, *fails* when the whole interval is beyond it, *straddles* when the limit is inside it
(the level's requests are too few, or it is too close to the limit, to tell).

- A per-request figure's percentile (`ttft_p99<=500ms`, over the level's successful measured
  requests) and a per-request threshold (`ttft<=2s`, its attainment quantile with failures as
  infinitely late, `goodput.threshold_values`): the distribution-free interval of a quantile
  from order statistics (the ranks a binomial count of values below the quantile reaches with
  2.5 % and 97.5 %); a rank beyond the sample is an unbounded end. 100 requests cannot bound a
  p99 from above: at least 367 all within the limit are needed (0.99^n < 2.5 %).
- ITL (per token, `itl_p99`): a request's tokens are not independent of one another, so the
  interval is a bootstrap over requests (each resample sums its requests' ITL histograms and
  takes the report's nearest-rank percentile), seeded: the same level gives the same interval.
- The share of measured requests that are not good (failed, or missed a per-request threshold)
  against what the attainment allows (the report's "meets the SLOs" asks that at least the
  attainment share be good): a Clopper-Pearson interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...slo import Objective, SloSpec
from ..levels import group_percentiles
from ..levels.hist import hist_percentiles

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 400
HOLDS = "holds"
FAILS = "fails"
STRADDLES = "straddles"
UNKNOWN = "unknown"
#: the item for the share of measured requests that are not good (`goodput.good_requests`)
MISSED_SHARE = "missed"


@dataclass(frozen=True)
class ItemFigure:
    """One SLO item at one level: the figure's estimate, its interval and its limit."""

    item: str
    limit: float
    estimate: float
    low: float
    high: float

    @property
    def ratio(self) -> float:
        """estimate / limit (a limit of 0, 100 % attainment: 0 when met, else inf)."""
        if self.estimate != self.estimate:
            return math.nan
        if self.limit == 0:
            return 0.0 if self.estimate == 0 else math.inf
        return self.estimate / self.limit

    @property
    def verdict(self) -> str:
        if self.estimate != self.estimate:
            return UNKNOWN
        if self.high <= self.limit:
            return HOLDS
        if self.low > self.limit:
            return FAILS
        return STRADDLES


@dataclass(frozen=True)
class LevelSample:
    """A level's measured requests: whether each succeeded and whether it was good
    (`goodput.good_requests`), each per-request figure (seconds, NaN where it has none), and
    with ITL, each successful one's ITL histogram counts (rows in the order of the successful
    requests, a common bucket grid)."""

    ok: np.ndarray
    good: np.ndarray
    figures: dict[str, np.ndarray] = field(default_factory=dict)
    itl_counts: np.ndarray | None = None


def quantile_interval(
    values: np.ndarray, fraction: float, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """The distribution-free interval of the `fraction` quantile of the population `values`
    (non-NaN; +inf allowed) were drawn from: (-inf or 0 below the first rank, inf above the
    last). Empty: NaN, NaN."""
    # at call time: scipy costs ~1 s to import (as `series.stats` notes)
    from scipy import stats as sps

    v = np.sort(values[~np.isnan(values)])
    n = len(v)
    if n == 0:
        return math.nan, math.nan
    alpha = 1.0 - confidence
    lo_rank = int(sps.binom.ppf(alpha / 2.0, n, fraction))  # 1-based rank of the low end
    hi_rank = int(sps.binom.ppf(1.0 - alpha / 2.0, n, fraction)) + 1
    low = float(v[lo_rank - 1]) if lo_rank >= 1 else min(0.0, float(v[0]))
    high = float(v[hi_rank - 1]) if hi_rank <= n else math.inf
    return low, high


def share_interval(count: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Clopper-Pearson interval of a share from `count` of `n`."""
    from scipy import stats as sps

    if n == 0:
        return math.nan, math.nan
    alpha = 1.0 - confidence
    low = 0.0 if count == 0 else float(sps.beta.ppf(alpha / 2.0, count, n - count + 1))
    high = 1.0 if count == n else float(sps.beta.ppf(1.0 - alpha / 2.0, count + 1, n - count))
    return low, high


def _estimate(values: np.ndarray, fraction: float) -> float:
    """The report's percentile (`levels.group_percentiles`)."""
    groups = np.zeros(len(values), np.int64)
    return float(group_percentiles(values, groups, 1, (fraction,))[0, 0])


def hist_interval(
    counts: np.ndarray,
    percentile: float,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(estimate, low, high) of a per-token percentile (0..100) from per-request histogram
    counts (requests x buckets): the report's nearest-rank percentile of their sum, and the
    percentile bootstrap over requests."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.ndim != 2 or counts.shape[0] == 0 or counts.sum() == 0:
        return math.nan, math.nan, math.nan
    estimate = float(hist_percentiles(counts.sum(axis=0), (percentile,))[0, 0])
    n = counts.shape[0]
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples)
    values = hist_percentiles(weights @ counts, (percentile,))[:, 0]
    values = values[~np.isnan(values)]  # a resample of requests without a token gap
    alpha = 1.0 - confidence
    low, high = np.quantile(values, [alpha / 2.0, 1.0 - alpha / 2.0])
    return estimate, float(low), float(high)


def _objective(sample: LevelSample, o: Objective, confidence: float) -> ItemFigure:
    fraction = o.percentile / 100.0
    if o.metric in sample.figures:
        values = np.asarray(sample.figures[o.metric], dtype=np.float64)[np.asarray(sample.ok, bool)]
        values = values[~np.isnan(values)]
        if not len(values):
            return ItemFigure(o.text, o.limit, math.nan, math.nan, math.nan)
        low, high = quantile_interval(values, fraction, confidence)
        return ItemFigure(o.text, o.limit, _estimate(values, fraction), low, high)
    if sample.itl_counts is not None:  # a per-token figure: ITL
        return ItemFigure(o.text, o.limit, *hist_interval(sample.itl_counts, o.percentile))
    return ItemFigure(o.text, o.limit, math.nan, math.nan, math.nan)


def judge_level(
    sample: LevelSample,
    spec: SloSpec,
    threshold_values: dict[str, np.ndarray | None],
    confidence: float = CONFIDENCE,
) -> list[ItemFigure]:
    """Every item of `spec` at one level: the share not good first, then each threshold (its
    `threshold_values`, per measured request as `goodput.threshold_values` gives them; None:
    unknown), then each objective."""
    good = np.asarray(sample.good, dtype=bool)
    n = len(good)
    missed = int(n - good.sum())
    allowed = 1.0 - spec.attainment
    low, high = share_interval(missed, n, confidence)
    items = [
        ItemFigure(
            f"{MISSED_SHARE}<={allowed * 100:.3g}%",
            allowed,
            missed / n if n else math.nan,
            low,
            high,
        )
    ]
    for t in spec.thresholds:
        values = threshold_values.get(t.metric)
        if values is None or not len(values):
            items.append(ItemFigure(t.text, t.limit, math.nan, math.nan, math.nan))
            continue
        low, high = quantile_interval(values, spec.attainment, confidence)
        items.append(ItemFigure(t.text, t.limit, _estimate(values, spec.attainment), low, high))
    items.extend(_objective(sample, o, confidence) for o in spec.objectives)
    return items


def level_verdict(items: list[ItemFigure]) -> str:
    """The level's: fails when any item fails, unknown when any is unknown, holds when every
    item holds, else straddles."""
    verdicts = [i.verdict for i in items]
    for v in (FAILS, UNKNOWN, STRADDLES):
        if v in verdicts:
            return v
    return HOLDS
