"""The search for the highest level at which an SLO holds (`tune --slo`, SLO-max): pure.

Each measured level is a `Probe`: its level and, per SLO item, the item's figure over its limit
(`ratio`; the item holds at <= 1). The search first grows the level (doubling from
`--min-level`, up to `--max-level`) until the SLO fails; then, between the highest level that met
it and the lowest that did not (the bracket), it measures where the curve of each item's ratio,
interpolated between the bracket's two ends, meets 1 (the lowest such level over the items):
regula falsi on every item, with the Illinois rule (an end kept twice in a row has its distance
from the limit halved) so one end that never moves cannot stall it, and a bisection where an end
has no finite figure (a level whose requests failed). A point closer than the tolerance to an
end is moved away from it to half the tolerance, so that a crossing near an end closes the
bracket at the next level. It stops when the bracket is within the tolerance of its low end
(5 %), when no level lies strictly inside it (concurrency is whole users), at the level
budget, when the lowest level already fails, or when the highest allowed level still meets
the SLO.

Whether a level met the SLO here is its point estimate (the figures the report prints);
whether the measurement proves it is `slo_interval`'s business, reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: the bracket's relative width at which the search stops: (high - low) / low
TOLERANCE = 0.05
#: what the levels grow by, at least and at most, until the SLO fails
GROWTH = 2.0
MAX_GROWTH = 8.0
#: levels in a row on one side of the bracket after which the next is its middle
KEPT_BEFORE_BISECTING = 2
#: how many levels a search measures at most, unless told
DEFAULT_MAX_LEVELS = 12


@dataclass(frozen=True)
class Probe:
    """One measured level: per SLO item, its figure / its limit (inf: unbounded, such as a
    percentile that reaches a failed request; NaN: unknown)."""

    level: float
    ratios: tuple[float, ...]

    @property
    def met(self) -> bool:
        """Every item's estimate within its limit (an unknown one is not)."""
        return bool(self.ratios) and all(r <= 1.0 for r in self.ratios)


@dataclass(frozen=True)
class Bounds:
    """Where the search may go: the lowest and highest level, how many levels it may measure,
    the bracket width it stops at, and whether levels are whole numbers (users)."""

    min_level: float
    max_level: float
    max_probes: int = DEFAULT_MAX_LEVELS
    tolerance: float = TOLERANCE
    integer: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.min_level <= self.max_level:
            raise ValueError(f"levels {self.min_level}..{self.max_level} are not a range")
        if self.max_probes < 1 or not self.tolerance > 0:
            raise ValueError("the search needs a level budget and a positive tolerance")


#: why a search stopped (or that it goes on: MEASURE)
MEASURE = "measure"
CONVERGED = "converged"  # the bracket is within the tolerance (or holds no level inside)
NONE_MET = "none_met"  # the lowest level already fails the SLO
MAX_MET = "max_met"  # the highest allowed level still meets it: the SLO-max is at least that
BUDGET = "budget"  # the level budget ran out first


@dataclass(frozen=True)
class Step:
    """What to do next: measure `level`, or stop (`status`), with the bracket as it stands:
    `low` the highest level that met the SLO below `high`, the lowest that did not."""

    status: str
    level: float | None
    low: Probe | None
    high: Probe | None

    @property
    def done(self) -> bool:
        return self.status != MEASURE

    @property
    def width(self) -> float:
        """(high - low) / low; NaN without both ends."""
        if self.low is None or self.high is None:
            return math.nan
        return (self.high.level - self.low.level) / self.low.level


def bracket(probes: list[Probe]) -> tuple[Probe | None, Probe | None]:
    """(highest level meeting the SLO below the lowest that does not, that lowest one). A level
    above the lowest failure that met it again (noise, or a curve that is not monotone) does
    not move the bracket up."""
    failed = [p for p in probes if not p.met]
    high = min(failed, key=lambda p: p.level) if failed else None
    below = [p for p in probes if p.met and (high is None or p.level < high.level)]
    low = max(below, key=lambda p: p.level) if below else None
    return low, high


def growth(probes: list[Probe]) -> float:
    """What to multiply the highest level by while every level met the SLO: where the line
    through the two highest levels' figures reaches the limit (the lowest over the items), as a
    multiple of the highest level, within GROWTH..MAX_GROWTH (GROWTH with one level, or a figure
    that did not rise)."""
    met = sorted(probes, key=lambda p: p.level)[-2:]
    if len(met) < 2:
        return GROWTH
    a, b = met
    factors = []
    for r_a, r_b in zip(a.ratios, b.ratios):
        slope = (r_b - r_a) / (b.level - a.level)
        if math.isfinite(slope) and slope > 0:
            factors.append((b.level + (1.0 - r_b) / slope) / b.level)
    factor = min(factors) if factors else MAX_GROWTH
    return min(max(factor, GROWTH), MAX_GROWTH)


def _snap(level: float, bounds: Bounds) -> float:
    if bounds.integer:
        return float(round(level))
    # a rate to three significant figures: a level the user can read and type again
    return float(f"{level:.3g}")


def _kept_count(probes: list[Probe], high: Probe) -> int:
    """How many of the latest levels in a row landed on the same side of the bracket (all met,
    or all failed), counting only those measured once there was a bracket."""
    first = next(i for i, p in enumerate(probes) if not p.met)
    inside = probes[first + 1 :]
    if not inside:
        return 0
    side = inside[-1].met
    count = 0
    for p in reversed(inside):
        if p.met != side:
            break
        count += 1
    return count


def crossing(low: Probe, high: Probe, low_weight: float = 1.0, high_weight: float = 1.0) -> float:
    """The level where the SLO's items, each interpolated linearly between the bracket's ends,
    first reach their limits (weights scale an end's distance from the limit: Illinois); the
    bracket's middle where no item can be interpolated (an end without a finite figure)."""
    middle = (low.level + high.level) / 2.0
    levels = []
    for r_lo, r_hi in zip(low.ratios, high.ratios):
        if not r_hi > 1.0:
            continue  # this item held at the high end: it crosses above the bracket
        if not (math.isfinite(r_lo) and math.isfinite(r_hi)):
            return middle
        if not r_lo > 0:
            return middle
        # on log scales: a latency's curve of the level is closer to a line there
        f_lo, f_hi = math.log(r_lo) * low_weight, math.log(r_hi) * high_weight
        if f_hi <= f_lo:  # the figure fell while the level rose: no slope to follow
            return middle
        a, b = math.log(low.level), math.log(high.level)
        levels.append(math.exp(a + (0.0 - f_lo) / (f_hi - f_lo) * (b - a)))
    return min(levels) if levels else middle


def _with_extrapolation(x: float, probes: list[Probe], low: Probe, high: Probe) -> float:
    """`x` (the line across the bracket) with the line through the two highest levels that met
    the SLO, extended to where it reaches the limit: on a curve that bends up, the first falls
    short of the crossing and the second beyond it; the next level is between them (their
    geometric mean), where that second line reaches into the bracket."""
    met = sorted((p for p in probes if p.met and p.level <= low.level), key=lambda p: p.level)
    if len(met) < 2:
        return x
    a, b = met[-2], met[-1]
    ahead = []
    for r_a, r_b, r_hi in zip(a.ratios, b.ratios, high.ratios):
        if not r_hi > 1.0:
            continue
        if not (r_a > 0 and r_b > 0 and math.isfinite(r_b)):
            return x
        slope = (math.log(r_b) - math.log(r_a)) / (math.log(b.level) - math.log(a.level))
        if not slope > 0:
            return x
        ahead.append(math.log(b.level) - math.log(r_b) / slope)
    if not ahead or not math.log(low.level) < min(ahead) < math.log(high.level * 4):
        return x
    return math.sqrt(x * min(math.exp(min(ahead)), high.level))


def _inside(x: float, low: float, high: float, bounds: Bounds) -> float:
    """`x` kept half the tolerance (of `low`) away from both ends, where the bracket allows."""
    margin = min(0.5 * bounds.tolerance * low, (high - low) / 2.0)
    return min(max(x, low + margin), high - margin)


def next_step(probes: list[Probe], bounds: Bounds) -> Step:
    """The next level to measure, or why the search is over."""
    low, high = bracket(probes)
    if not probes:
        return Step(MEASURE, _snap(bounds.min_level, bounds), None, None)
    lowest = min(probes, key=lambda p: p.level)
    if not lowest.met and lowest.level <= bounds.min_level:
        return Step(NONE_MET, None, None, lowest)
    if high is None:
        assert low is not None
        if low.level >= bounds.max_level:
            return Step(MAX_MET, None, low, None)
        if len(probes) >= bounds.max_probes:
            return Step(BUDGET, None, low, None)
        grown = _snap(min(bounds.max_level, low.level * growth(probes)), bounds)
        if grown <= low.level:
            grown = min(bounds.max_level, low.level + 1.0)
        return Step(MEASURE, grown, low, None)
    if low is None:  # a failure below every level that met it: look below it
        if len(probes) >= bounds.max_probes:
            return Step(BUDGET, None, None, high)
        level = _snap(max(bounds.min_level, high.level / GROWTH), bounds)
        if level >= high.level:
            return Step(NONE_MET, None, None, high)
        return Step(MEASURE, level, None, high)
    done = Step(CONVERGED, None, low, high)
    if (high.level - low.level) <= bounds.tolerance * low.level:
        return done
    kept = _kept_count(probes, high)
    side_met = probes[-1].met
    # Illinois: an end kept twice in a row or more counts for half as much each time
    weight = 0.5 ** max(0, kept - 1)
    x = crossing(
        low,
        high,
        low_weight=1.0 if side_met else weight,
        high_weight=weight if side_met else 1.0,
    )
    x = _with_extrapolation(x, probes, low, high)
    if kept >= KEPT_BEFORE_BISECTING:  # the line keeps missing on one side: halve it
        x = (low.level + high.level) / 2.0
    level = _snap(_inside(x, low.level, high.level, bounds), bounds)
    if bounds.integer:  # whole users: the nearest one strictly inside, where there is one
        level = min(max(level, low.level + 1.0), high.level - 1.0)
    if not low.level < level < high.level:
        return done  # no level strictly inside: the bracket is as narrow as levels go
    if len(probes) >= bounds.max_probes:
        return Step(BUDGET, None, low, high)
    return Step(MEASURE, level, low, high)
