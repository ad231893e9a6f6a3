"""Saturation analysis of one series: peak, saturation point, scaling, recommendations.

Input is a *curve*: the per-level aggregate of a series (`stats.aggregate` over its runs),
one row per requested concurrency with `<metric>_mean`, `_std`, `_ci_low`, `_ci_high`, `_n`
columns (and `success_rate_min`, the worst run's success rate, when the report adds it).
Throughput is the figure `SaturationRule.throughput` names: total throughput (input + output
tokens per second) for run directories; requests/s or output tokens/s for a report from Locust's
CSVs, which know neither prompt tokens nor, unless told, output tokens (`locust_csv`). Levels with
too many failed requests are left out first (`failures`); whether the runs decide the
saturation point is `decide`'s question; the sentences a report makes of it are `findings`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...load_kinds import CONCURRENCY, LoadKind
from . import failures
from .curve import column, value_text
from .decide import Decision, decide
from .failures import FailedLevel, failed_levels, kept, why_left_out
from .stats import t_quantile

THROUGHPUT = "total_tok_per_s"
#: the scaling ratio's levels when none are asked for and the ladder has both
DEFAULT_SCALING = (10.0, 200.0)


@dataclass(frozen=True)
class Throughput:
    """The per-level figure the peak and saturation point are judged on: a curve column (without
    its `_mean`), its unit and what it is, as sentences name them."""

    column: str = THROUGHPUT
    unit: str = "tok/s"
    name: str = "total throughput (input + output tokens/s)"


TOTAL_TOKENS = Throughput()


@dataclass(frozen=True)
class SaturationRule:
    """When a level counts as reaching the peak, and the recommendation rules."""

    throughput: Throughput = TOTAL_TOKENS  # what is judged
    tolerance: float = 0.05  # within this fraction of the peak mean counts as the peak
    low_latency_slack: float = 0.10  # low latency: p99 E2E within this fraction of the best
    balanced_share: float = 0.5  # balanced: at least this share of the peak throughput
    # the scaling ratio's levels; None: `DEFAULT_SCALING` where both were tested, else the
    # lowest to the highest level kept (a ratio never names a level its ladder did not have)
    scaling_from: float | None = None
    scaling_to: float | None = None
    max_failed_share: float = (
        failures.MAX_FAILED_SHARE
    )  # more failed in any run: the level is left out

    def describe(self) -> str:
        tol = f"{self.tolerance:.0%}"
        return (
            f"The peak is the level with the highest mean {self.throughput.name} among the levels "
            f"kept (see failed levels). The saturation point is the lowest tested concurrency whose mean throughput "
            f"is within {tol} of the peak mean; the runs' spread never moves it (overlapping confidence intervals are "
            f"not evidence of equal throughput). When only the highest tested level is within {tol}, the curve is "
            "still rising: not saturated within the tested levels. Whether the runs decide it: which level is truly "
            f"the peak is uncertain too, so each level's mean minus {1 - self.tolerance:.0%} of every other level's "
            "mean gets a 95 % t-interval (the two standard errors combined as independent, df = the smaller n − 1). "
            "A level is credibly within the tolerance when all of its intervals lie above zero, credibly below when "
            "one lies below zero. The point is decided when it is credibly within and every lower level credibly "
            "below. Otherwise it is undetermined at that n: the levels not credibly below, up to the first one "
            "credibly within, remain plausible, and the runs needed are estimated as the smallest n with "
            "t(0.975, n − 1) · s / √n below the observed gap for everything unresolved (s: the per-run standard "
            "deviation of the difference), assuming the observed means and spreads hold. With a single run there "
            "is no spread: the point rests on that run."
        )

    def describe_failures(self) -> str:
        return failures.describe(self.max_failed_share)

    def describe_recommendations(self) -> str:
        return (
            f"Low latency: the highest level whose p99 E2E latency is within {self.low_latency_slack:.0%} of the "
            f"lowest p99 E2E of any tested level. Balanced: the lowest level reaching at least "
            f"{self.balanced_share:.0%} of the peak throughput. High throughput: the saturation point (more "
            "concurrency adds latency, not throughput); the highest tested level when not saturated."
        )


@dataclass(frozen=True)
class LevelPoint:
    """One level of a curve, as quoted in the analysis."""

    value: float
    tok_per_s: float
    ci_low: float
    ci_high: float
    n: int
    e2e_p99: float
    ttft_p99: float


@dataclass(frozen=True)
class Scaling:
    """Throughput at one level divided by throughput at another."""

    requested_from: float
    requested_to: float
    from_value: float
    to_value: float
    ratio: float

    @property
    def substituted(self) -> bool:
        return (self.from_value, self.to_value) != (self.requested_from, self.requested_to)

    def note(self) -> str:
        if not self.substituted:
            return ""
        return (
            f"{value_text(self.requested_from)}→{value_text(self.requested_to)} was not tested; nearest tested levels "
            f"{value_text(self.from_value)}→{value_text(self.to_value)} used"
        )


@dataclass(frozen=True)
class LatencyCost:
    """What going from the saturation point to the highest tested level costs and gains."""

    from_value: float
    to_value: float
    e2e_p99_from: float
    e2e_p99_to: float
    ttft_p99_from: float
    ttft_p99_to: float
    throughput_change: float  # fraction, to vs from

    @property
    def e2e_p99_added(self) -> float:
        return self.e2e_p99_to - self.e2e_p99_from

    @property
    def e2e_p99_change(self) -> float:
        return self.e2e_p99_to / self.e2e_p99_from - 1 if self.e2e_p99_from else math.nan


@dataclass(frozen=True)
class Recommendation:
    use_case: str
    point: LevelPoint
    note: str = ""


@dataclass
class Saturation:
    """The saturation analysis of one series."""

    peak: LevelPoint | None
    saturation: LevelPoint | None
    saturated: bool
    reason: str  # why not saturated, or ""
    scaling: Scaling | None
    past_saturation: LatencyCost | None
    recommendations: list[Recommendation] = field(default_factory=list)
    failed: list[FailedLevel] = field(
        default_factory=list
    )  # levels with failures, left out or kept
    decision: Decision | None = None  # whether the runs decide the saturation point
    axis: LoadKind = CONCURRENCY  # what the levels are
    # why the levels above the highest one kept (every level, when none was) were left out,
    # `failures.why_left_out`'s words ("" when none was)
    left_out_above: str = ""

    @property
    def status(self) -> str:
        if self.saturated and self.saturation is not None:
            return f"~{value_text(self.saturation.value)} {self.axis.noun}"
        if self.peak is None:
            return "no level to judge"
        return "not saturated within the tested levels"

    @property
    def decision_text(self) -> str:
        """The decision as a finding, its levels named by the series' axis ("" without one)."""
        return self.decision.sentence(self.axis.noun) if self.decision is not None else ""

    @property
    def headline(self) -> str:
        """The status with whether the runs decide it, for tables: "~100 concurrent (decided at n = 5)"."""
        return (
            f"{self.status} ({self.decision.short()})" if self.decision is not None else self.status
        )


def _std(curve: pd.DataFrame, name: str = THROUGHPUT) -> np.ndarray:
    """Per-run standard deviation of throughput; from the interval's width when the curve has no `_std`."""
    if f"{name}_std" in curve:
        return column(curve, f"{name}_std")
    n = column(curve, f"{name}_n")
    half = (column(curve, f"{name}_ci_high") - column(curve, f"{name}_ci_low")) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return half * np.sqrt(n) / t_quantile(n)


def level_point(curve: pd.DataFrame, i: int, name: str = THROUGHPUT) -> LevelPoint:
    """Level i of `curve`, its throughput from the `name` columns (`tok_per_s` holds it whatever
    its unit)."""
    row = curve.iloc[i]
    n = row.get(f"{name}_n", 1)
    return LevelPoint(
        value=float(row["value"]),
        tok_per_s=float(row[f"{name}_mean"]),
        ci_low=float(row.get(f"{name}_ci_low", math.nan)),
        ci_high=float(row.get(f"{name}_ci_high", math.nan)),
        n=int(n) if n == n else 0,
        e2e_p99=float(row.get("e2e_p99_mean", math.nan)),
        ttft_p99=float(row.get("ttft_p99_mean", math.nan)),
    )


def within_tolerance(
    curve: pd.DataFrame, rule: SaturationRule = SaturationRule()
) -> tuple[int, np.ndarray]:
    """(index of the peak, mask of levels whose mean is within `rule.tolerance` of the peak mean).

    Means only: interval width cannot add a level to the mask. Curve sorted by value.
    """
    mean = column(curve, f"{rule.throughput.column}_mean")
    if np.all(np.isnan(mean)):
        return -1, np.zeros(len(curve), dtype=bool)
    peak = int(np.nanargmax(mean))
    mask = (mean >= (1.0 - rule.tolerance) * mean[peak]) & ~np.isnan(mean)
    mask[peak] = True
    return peak, mask


def usable(
    curve: pd.DataFrame, rule: SaturationRule = SaturationRule()
) -> tuple[pd.DataFrame, list[FailedLevel]]:
    """(the levels conclusions are drawn from, sorted by value; every level with failures) of `curve`."""
    curve = curve.sort_values("value").reset_index(drop=True)
    # every level's failures, a level that measured no throughput too (none of its measured
    # requests succeeded): it is named, and left out as the rest are
    failed = failed_levels(curve, rule.max_failed_share)
    measured = ~np.isnan(column(curve, f"{rule.throughput.column}_mean"))
    return kept(curve[measured].reset_index(drop=True), failed), failed


def nearest_level(levels: np.ndarray, target: float) -> float:
    """The tested level closest to `target` (the lower one on a tie)."""
    levels = np.sort(levels)
    return float(levels[int(np.argmin(np.abs(levels - target)))])


def scaling_ratio(
    curve: pd.DataFrame, from_value: float, to_value: float, name: str = THROUGHPUT
) -> Scaling | None:
    """Mean throughput at `to_value` / at `from_value`, using the nearest tested levels if absent."""
    values = column(curve, "value")
    mean = column(curve, f"{name}_mean")
    ok = ~np.isnan(mean)
    if ok.sum() < 2:
        return None
    a, b = nearest_level(values[ok], from_value), nearest_level(values[ok], to_value)
    if a == b:
        return None
    ta, tb = mean[values == a][0], mean[values == b][0]
    return Scaling(from_value, to_value, a, b, tb / ta if ta > 0 else math.nan)


def scaling_levels(curve: pd.DataFrame, rule: SaturationRule) -> tuple[float, float]:
    """The levels of the scaling ratio: those `rule` asks for (the nearest tested ones stand in,
    and the ratio says so), else `DEFAULT_SCALING` where both were tested, else the lowest and
    the highest level of `curve`."""
    if rule.scaling_from is not None and rule.scaling_to is not None:
        return rule.scaling_from, rule.scaling_to
    values = set(column(curve, "value").tolist())
    if all(level in values for level in DEFAULT_SCALING):
        return DEFAULT_SCALING
    tested = column(curve, "value")
    return (float(np.nanmin(tested)), float(np.nanmax(tested))) if len(tested) else DEFAULT_SCALING


def analyse(curve: pd.DataFrame, rule: SaturationRule = SaturationRule()) -> Saturation:
    """Peak, saturation point, scaling, latency cost past saturation, recommendations, and whether the
    runs decide the point, over the levels `failures` keeps."""
    curve, failed = usable(curve, rule)
    if curve.empty:
        cut = why_left_out(failed, rule.max_failed_share)
        reason = "every level " + cut if failed else "no level has a measured throughput"
        return Saturation(None, None, False, reason, None, None, failed=failed, left_out_above=cut)
    peak_i, mask = within_tolerance(curve, rule)
    sat_i = int(np.flatnonzero(mask)[0])
    top = len(curve) - 1
    # why the levels above the highest one kept were left out ("" when none was)
    cut = why_left_out(failed, rule.max_failed_share, above=curve["value"].iloc[-1])
    if len(curve) == 1:
        saturated, reason = (
            False,
            "only one level was tested" if not failed else "only one level was kept",
        )
    elif sat_i == top:
        saturated, reason = (
            False,
            (
                f"throughput still rises at the highest level kept; the levels above it {cut}"
                if cut
                else "throughput still rises at the highest tested level"
            ),
        )
    else:
        saturated, reason = True, ""
    name = rule.throughput.column
    peak, sat = level_point(curve, peak_i, name), level_point(curve, sat_i, name)
    cost = None
    if saturated and sat_i < top:
        last = level_point(curve, top, name)
        cost = LatencyCost(
            sat.value,
            last.value,
            sat.e2e_p99,
            last.e2e_p99,
            sat.ttft_p99,
            last.ttft_p99,
            last.tok_per_s / sat.tok_per_s - 1 if sat.tok_per_s else math.nan,
        )
    result = Saturation(
        peak,
        sat,
        saturated,
        reason,
        scaling_ratio(curve, *scaling_levels(curve, rule), name),
        cost,
        failed=failed,
        left_out_above=cut,
    )
    result.recommendations = recommend(curve, sat_i, saturated, rule, cut)
    if len(curve) > 1:
        result.decision = decide(
            curve["value"],
            column(curve, f"{name}_mean"),
            _std(curve, name),
            column(curve, f"{name}_n"),
            sat_i,
            rule.tolerance,
        )
    return result


def recommend(
    curve: pd.DataFrame,
    sat_i: int,
    saturated: bool,
    rule: SaturationRule,
    left_out_above: str = "",
) -> list[Recommendation]:
    """Low-latency, balanced and high-throughput levels by the rules of `rule` (curve sorted by value;
    `left_out_above`: why the levels above the curve's top were left out, `why_left_out`'s)."""
    name = rule.throughput.column
    mean = column(curve, f"{name}_mean")
    p99 = column(curve, "e2e_p99_mean")
    out = []
    if not np.all(np.isnan(p99)):
        best = np.nanmin(p99)
        near = np.flatnonzero(p99 <= best * (1 + rule.low_latency_slack))
        out.append(Recommendation("Low latency", level_point(curve, int(near.max()), name)))
    else:
        out.append(
            Recommendation(
                "Low latency", level_point(curve, 0, name), "no latency measured; lowest level"
            )
        )
    reaching = np.flatnonzero(mean >= rule.balanced_share * np.nanmax(mean))
    out.append(Recommendation("Balanced", level_point(curve, int(reaching[0]), name)))
    if saturated:
        out.append(
            Recommendation(
                "High throughput",
                level_point(curve, sat_i, name),
                "the saturation point; more adds only latency",
            )
        )
    else:
        note = (
            f"highest level kept; the levels above it {left_out_above}"
            if left_out_above
            else "highest tested level; not saturated, test higher concurrency"
        )
        out.append(
            Recommendation("High throughput", level_point(curve, len(curve) - 1, name), note)
        )
    return out
