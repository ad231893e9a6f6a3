"""Whether the runs' spread decides a saturation point, and how many runs would.

The saturation point itself is a point estimate from mean throughputs alone (`saturation`):
the lowest level whose mean is within the tolerance of the peak mean. This module asks the
separate question whether the runs support it. For every level it takes the difference
between the level's mean and the tolerance line, (1 - tolerance) × the peak mean, and gives
that difference a 95 % t-interval: the two means' standard errors combined as independent,
df = the smaller n - 1 (conservative). A level is *credibly within* when the interval lies
above zero, *credibly below* when it lies below zero; the peak is within by definition (it is
the reference). The point is decided when it is credibly within and every lower level is
credibly below. Interval width only decides whether the point is *decided*; it never moves it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .stats import CONFIDENCE, t_quantile

#: the largest run count `runs_to_decide` searches; above it the estimate says "more than"
MAX_RUNS = 1000

DECIDED, UNDETERMINED, SINGLE_RUN = "decided", "undetermined", "single run"


@dataclass(frozen=True)
class Margin:
    """How far one level's mean lies from the tolerance line, with the uncertainty of that gap."""

    users: float
    gap: float  # level mean - (1 - tolerance) * peak mean, tok/s
    half_width: float  # 95 % half-width of the gap; NaN without spread
    spread: float  # per-run standard deviation of the difference (s of the level and of the line combined)
    n: int  # the smaller run count of the level and the peak
    is_peak: bool = False

    @property
    def within(self) -> bool:
        """Credibly within the tolerance of the peak (the peak always is)."""
        return self.is_peak or (self.half_width == self.half_width and self.gap - self.half_width > 0)

    @property
    def below(self) -> bool:
        """Credibly below the tolerance line."""
        return not self.is_peak and self.half_width == self.half_width and self.gap + self.half_width < 0


def margin(users: float, mean: float, std: float, n: int, peak_mean: float, peak_std: float, peak_n: int,
           tolerance: float, is_peak: bool = False, confidence: float = CONFIDENCE) -> Margin:
    """The `Margin` of one level against the tolerance line of a peak (the peak's own when `is_peak`)."""
    line = 1.0 - tolerance
    if is_peak:  # mean - line * mean: one variable, not two independent ones
        gap, spread, se, m = tolerance * mean, tolerance * std, tolerance * std / math.sqrt(max(n, 1)), n
    else:
        gap = mean - line * peak_mean
        spread = math.sqrt(std ** 2 + (line * peak_std) ** 2)
        se = math.sqrt(std ** 2 / max(n, 1) + (line * peak_std) ** 2 / max(peak_n, 1))
        m = min(n, peak_n)
    half = t_quantile(m, confidence) * se if m >= 2 else math.nan
    return Margin(users, gap, half, spread if m >= 2 else math.nan, int(m), is_peak)


def runs_to_decide(gap: float, spread: float, confidence: float = CONFIDENCE, max_runs: int = MAX_RUNS) -> int | None:
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
    users: float  # the point estimate
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

    def sentence(self) -> str:
        """The decision as a finding."""
        u = _u(self.users)
        subject = (f"That throughput still rises at the highest tested level ({u} concurrent)" if self.at_top
                   else f"The saturation point (~{u} concurrent)")
        if self.state == SINGLE_RUN:
            where = ", ".join(_u(x) for x in self.single_levels)
            return (f"{subject} rests on a single run at {where} concurrent: there is no spread to judge it by; "
                    "repeat the test (n ≥ 3) to know whether it holds.")
        if self.state == DECIDED:
            lower = "every lower level is credibly below that" if self.has_lower else "no lower level was tested"
            return (f"{subject} is decided at n = {self.n}: its throughput is credibly within {self.tolerance:.0%} "
                    f"of the peak and {lower} (95 % t-intervals of the differences).")
        lo, hi = _u(min(self.plausible)), _u(max(self.plausible))
        text = (f"{subject} is undetermined at n = {self.n}: the runs' spread leaves any level from {lo} to {hi} "
                "concurrent plausible as the saturation point")
        if self.runs_needed is None:
            return text + "; no run count decides it while a level's mean sits exactly on the tolerance line."
        if self.runs_needed > MAX_RUNS:
            return text + f"; even {MAX_RUNS:,} runs would not decide it at the observed spread (an estimate)."
        return (text + f"; about {self.runs_needed} runs would decide it if the observed means and standard "
                "deviations hold (an estimate).")


def _u(users: float) -> str:
    return f"{users:,.0f}" if users == users else "-"


def decide(users: Sequence[float], mean: Sequence[float], std: Sequence[float], n: Sequence[int], peak_i: int,
           sat_i: int, tolerance: float, confidence: float = CONFIDENCE) -> Decision:
    """The `Decision` for a curve's levels (sorted by users) with its peak and point estimate found.

    Decided: the saturation level is credibly within the tolerance and every lower level credibly
    below. Plausible: every level up to the first credibly within that is not credibly below.
    Runs needed: the largest `runs_to_decide` over the levels still unresolved for the decision.
    """
    users, mean, std = (np.asarray(a, dtype=np.float64) for a in (users, mean, std))
    n = np.asarray(n, dtype=np.float64)
    n = np.where(np.isnan(n), 1, n).astype(np.int64)
    top = dict(at_top=sat_i == len(users) - 1, has_lower=sat_i > 0, tolerance=tolerance)
    compared = sorted(set(range(sat_i + 1)) | {peak_i})
    single = tuple(float(users[i]) for i in compared if n[i] < 2 or std[i] != std[i])
    if single:
        return Decision(SINGLE_RUN, int(min(n[i] for i in compared)), float(users[sat_i]), (float(users[sat_i]),),
                        single_levels=single, **top)
    margins = [margin(users[i], mean[i], std[i], n[i], mean[peak_i], std[peak_i], n[peak_i], tolerance,
                      is_peak=i == peak_i, confidence=confidence) for i in range(len(users))]
    first_within = next(i for i, m in enumerate(margins) if m.within)  # the peak at the latest
    plausible = tuple(float(users[i]) for i in range(first_within + 1) if not margins[i].below)
    n_min = int(min(n[i] for i in compared))
    if first_within == sat_i and plausible == (float(users[sat_i]),):
        return Decision(DECIDED, n_min, float(users[sat_i]), plausible, **top)
    open_ = [m for i, m in enumerate(margins[: sat_i + 1]) if (i == sat_i and not m.within) or (i < sat_i and not m.below)]
    needed = [runs_to_decide(m.gap, m.spread, confidence) for m in open_]
    runs = None if any(k is None for k in needed) else max(needed)
    return Decision(UNDETERMINED, n_min, float(users[sat_i]), plausible, runs, **top)
