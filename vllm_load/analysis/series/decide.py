"""Whether the runs' spread decides a saturation point, and how many runs would.

The saturation point itself is a point estimate from mean throughputs alone (`saturation`):
the lowest level whose mean is within the tolerance of the peak mean. This module asks the
separate question whether the runs support it. Which level is truly the peak is itself
uncertain, so every level is compared with every other: the difference between level i's
mean and (1 - tolerance) × level j's mean gets a 95 % t-interval (the two means' standard
errors combined as independent, df = the smaller n - 1, which is conservative). Level i is
*credibly within* the tolerance of the peak when all its intervals lie above zero, and
*credibly below* it when one lies below zero (it is below the tolerance line of some level,
so of the peak's). The point is decided when it is credibly within and every lower level is
credibly below. Interval width only decides whether the point is *decided*; it never moves it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .curve import value_text
from .stats import CONFIDENCE, t_quantile

#: the largest run count `runs_to_decide` searches; above it the estimate says "more than"
MAX_RUNS = 1000

DECIDED, UNDETERMINED, SINGLE_RUN = "decided", "undetermined", "single run"


@dataclass(frozen=True)
class Margin:
    """How far one level's mean lies above the tolerance line of another level, with its uncertainty."""

    value: float
    against: float  # the level whose tolerance line this is
    gap: float  # level mean - (1 - tolerance) * the other level's mean, tok/s
    half_width: float  # 95 % half-width of the gap; NaN without spread
    spread: float  # per-run standard deviation of the difference; NaN without spread
    n: int  # the smaller run count of the two levels

    @property
    def above(self) -> bool:
        return self.half_width == self.half_width and self.gap - self.half_width > 0

    @property
    def below(self) -> bool:
        return self.half_width == self.half_width and self.gap + self.half_width < 0


def margin(
    value: float,
    mean: float,
    std: float,
    n: int,
    against: float,
    other_mean: float,
    other_std: float,
    other_n: int,
    tolerance: float,
    confidence: float = CONFIDENCE,
) -> Margin:
    """The `Margin` of one level against the tolerance line (1 - tolerance) × another level's mean."""
    line = 1.0 - tolerance
    gap = mean - line * other_mean
    m = min(n, other_n)
    if m < 2:
        return Margin(value, against, gap, math.nan, math.nan, int(m))
    spread = math.sqrt(std**2 + (line * other_std) ** 2)
    se = math.sqrt(std**2 / n + (line * other_std) ** 2 / other_n)
    return Margin(value, against, gap, t_quantile(m, confidence) * se, spread, int(m))


def runs_to_decide(
    gap: float, spread: float, confidence: float = CONFIDENCE, max_runs: int = MAX_RUNS
) -> int | None:
    """Smallest n with t(n - 1) · spread / √n below |gap|: runs per level that would resolve this gap
    if the observed mean and spread held. An estimate; None when the gap is zero or unknown, and
    `max_runs + 1` when even `max_runs` would not."""
    if gap != gap or spread != spread or gap == 0:
        return None
    if spread == 0:
        return 2
    n = np.arange(2, max_runs + 1)
    ok = np.flatnonzero(t_quantile(n, confidence) * spread / np.sqrt(n) < abs(gap))
    return int(n[ok[0]]) if ok.size else max_runs + 1


@dataclass(frozen=True)
class Decision:
    """Whether the runs decide the saturation point, which levels stay plausible, and the runs it would take."""

    state: str  # DECIDED, UNDETERMINED or SINGLE_RUN
    n: int  # the smallest run count among the levels compared
    value: float  # the point estimate
    plausible: tuple[float, ...]  # levels that remain plausible as the saturation point
    runs_needed: int | None = None  # estimate, when undetermined; None when no run count would
    tolerance: float = 0.05
    single_levels: tuple[float, ...] = ()  # levels compared that have a single run
    has_lower: bool = True  # a level below the point estimate was tested
    at_top: bool = False  # the point estimate is the highest tested level: not saturated

    @property
    def decided(self) -> bool:
        return self.state == DECIDED

    def short(self) -> str:
        """A few words for tables: "decided at n = 5", "undetermined at n = 3", "single run"."""
        return self.state if self.state == SINGLE_RUN else f"{self.state} at n = {self.n}"

    def sentence(self, noun: str = "concurrent") -> str:
        """The decision as a finding; `noun` names the levels (the series' `Axis.noun`:
        "concurrent", or "requests/s" for an open-loop series)."""
        u = value_text(self.value)
        subject = (
            f"That throughput is still rising at {u} {noun} (not saturated)"
            if self.at_top
            else f"The saturation point (~{u} {noun})"
        )
        if self.state == SINGLE_RUN:
            where = ", ".join(value_text(x) for x in self.single_levels)
            return (
                f"{subject} rests on a single run at {where} {noun}: there is no spread to judge it by; "
                "repeat the test (n ≥ 3) to know whether it holds."
            )
        if self.state == DECIDED:
            lower = (
                "every lower level is credibly below that"
                if self.has_lower
                else "no lower level was tested"
            )
            return (
                f"{subject} is decided at n = {self.n}: its throughput is credibly within {self.tolerance:.0%} "
                f"of the peak and {lower} (95 % t-intervals of the differences)."
            )
        lo, hi = value_text(min(self.plausible)), value_text(max(self.plausible))
        text = (
            f"{subject} is undetermined at n = {self.n}: the runs' spread leaves any level from {lo} to {hi} "
            f"{noun} plausible as the saturation point"
        )
        if self.runs_needed is None:
            return (
                text
                + "; no run count decides it while a level's mean sits exactly on the tolerance line."
            )
        if self.runs_needed > MAX_RUNS:
            return (
                text
                + f"; even {MAX_RUNS:,} runs would not decide it at the observed spread (an estimate)."
            )
        return (
            text
            + f"; about {self.runs_needed} runs would decide it if the observed means and standard "
            "deviations hold (an estimate)."
        )


def _runs(margins: list[Margin], pick) -> int | None:
    needed = [runs_to_decide(m.gap, m.spread) for m in margins]
    return None if any(k is None for k in needed) else pick(needed)


def decide(
    values: ArrayLike,
    mean: ArrayLike,
    std: ArrayLike,
    n: ArrayLike,
    sat_i: int,
    tolerance: float,
    confidence: float = CONFIDENCE,
) -> Decision:
    """The `Decision` for a curve's levels (sorted by values, at least two) with its point estimate found.

    Decided: the saturation level is credibly within the tolerance and every lower level credibly
    below. Plausible: every level not credibly below with no credibly-within level under it.
    Runs needed: the most `runs_to_decide` gives over what is still unresolved for the decision
    (for a level to be credibly below, its most resolvable comparison counts).
    """
    values, mean, std = (np.asarray(a, dtype=np.float64) for a in (values, mean, std))
    n = np.asarray(n, dtype=np.float64)
    n = np.where(np.isnan(n), 1, n).astype(np.int64)
    k = len(values)
    common: dict[str, Any] = dict(at_top=sat_i == k - 1, has_lower=sat_i > 0, tolerance=tolerance)
    n_min = int(n.min())
    single = tuple(float(values[i]) for i in range(k) if n[i] < 2 or std[i] != std[i])
    if single:
        return Decision(
            SINGLE_RUN,
            n_min,
            float(values[sat_i]),
            (float(values[sat_i]),),
            single_levels=single,
            **common,
        )
    margins = [
        [
            margin(
                values[i],
                mean[i],
                std[i],
                n[i],
                values[j],
                mean[j],
                std[j],
                n[j],
                tolerance,
                confidence,
            )
            for j in range(k)
            if j != i
        ]
        for i in range(k)
    ]
    within = [all(m.above for m in row) for row in margins]
    below = [any(m.below for m in row) for row in margins]
    plausible = tuple(float(values[i]) for i in range(k) if not below[i] and not any(within[:i]))
    if within[sat_i] and all(below[:sat_i]):
        return Decision(DECIDED, n_min, float(values[sat_i]), plausible, **common)
    needed = []
    if not within[sat_i]:
        needed.append(_runs([m for m in margins[sat_i] if not m.above], max))
    for i in range(sat_i):
        if not below[i]:
            needed.append(_runs([m for m in margins[i] if m.gap < 0], min))
    known = [x for x in needed if x is not None]
    runs = max(known) if len(known) == len(needed) else None
    return Decision(UNDETERMINED, n_min, float(values[sat_i]), plausible, runs, **common)
