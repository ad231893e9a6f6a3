"""Whether a piece of advice paid off: configuration A (as run) against B (the advice applied).

Two questions, each answered with `ab`'s statistics:

- Peak total tok/s, one figure per run (the highest of its levels): Welch's t-test across runs,
  as `ab` tests every per-run figure, and `ab.verdict` at alpha. It is the one question the
  advice asks (does the knee, and the throughput with it, move?), so no other test shares its
  alpha. `ab` judges throughput level by level; the peak is the figure a moved knee changes,
  wherever each side's peak lies.
- Where the knee is: the measured saturation point against the knee the capacity model gave,
  "within one tested level" on the grid of tested levels (`knee_check`).

The latencies are `ab.compare_runs`'s comparisons, level by level, as `vllm-load compare`
prints them; the caller picks the level it quotes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ...figures import Figure
from ..series.stats import summarize
from .ab import Comparison, RunLevels, no_test_verdict, verdict
from .significance import NO_TEST, welch

PEAK_THROUGHPUT = Figure(
    "peak_total_tok_per_s", "peak total tok/s", "tok/s", True, frozenset(), ",.0f"
)


def run_peak(run: RunLevels) -> float:
    """A run's highest total tok/s over the levels that measured a request; NaN if none did."""
    metrics = run.metrics
    if "total_tok_per_s" not in metrics:
        return math.nan
    values = pd.to_numeric(metrics["total_tok_per_s"], errors="coerce")
    if "measured" in metrics:
        values = values[pd.to_numeric(metrics["measured"], errors="coerce") > 0]
    values = values.dropna()
    return float(values.max()) if len(values) else math.nan


def peak_comparison(
    a_runs: Sequence[RunLevels], b_runs: Sequence[RunLevels], alpha: float = 0.05
) -> Comparison:
    """B's peak total tok/s against A's, across runs: Welch's t-test and its verdict, or "no test
    possible" with fewer than two runs on a side. Its `level` is NaN: each run peaks where it
    peaks."""
    a_vals = [run_peak(r) for r in a_runs]
    b_vals = [run_peak(r) for r in b_runs]
    a, b = summarize(a_vals, 1 - alpha), summarize(b_vals, 1 - alpha)
    result = welch(a_vals, b_vals, alpha)
    judged = (
        no_test_verdict(min(a.n, b.n))
        if result.test == NO_TEST
        else verdict(result.diff, result.p, alpha, True)  # (more peak throughput is better)
    )
    return Comparison(math.nan, PEAK_THROUGHPUT, a, b, result, p_adjusted=result.p, verdict=judged)


# --- the knee ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KneeCheck:
    """The measured knee of one configuration against the knee the capacity model gave for it."""

    levels: tuple[float, ...]  # the tested levels
    measured: float | None  # the saturation point; None when not saturated within `levels`
    expected: float | None  # the capacity model's knee; None when it gave none
    #: whether the two lie within one tested level of each other; None when it cannot be said
    agrees: bool | None

    @property
    def saturated(self) -> bool:
        return self.measured is not None


def grid_position(levels: Sequence[float], x: float) -> float:
    """Where `x` lies on the grid of tested levels, in steps: level i is at i, a value between
    two levels in between on a log scale (levels are usually geometric), a value outside the
    grid extrapolated with its end step. Needs two or more positive levels."""
    grid = np.log(np.asarray(sorted(levels), dtype=np.float64))
    if x <= 0:
        return -math.inf
    lx = math.log(x)
    if lx <= grid[0]:
        return float((lx - grid[0]) / (grid[1] - grid[0]))
    if lx >= grid[-1]:
        return float(len(grid) - 1 + (lx - grid[-1]) / (grid[-1] - grid[-2]))
    j = int(np.searchsorted(grid, lx, side="right") - 1)
    return float(j + (lx - grid[j]) / (grid[j + 1] - grid[j]))


def knee_check(
    levels: Sequence[float], measured: float | None, expected: float | None
) -> KneeCheck:
    """Whether the measured knee lies within one tested level of the expected one.

    A series not saturated within its levels has its knee above the highest: it agrees with an
    expected knee no more than one level below the highest tested one (the knee may lie just
    above it), or anywhere above. Cannot be said (None) without an expected knee or with fewer
    than two tested levels.
    """
    tested = tuple(sorted({float(v) for v in levels if v == v and v > 0}))
    if expected is None or not math.isfinite(expected) or len(tested) < 2:
        return KneeCheck(tested, measured, expected, None)
    at = grid_position(tested, expected)
    if measured is None:
        agrees = at >= len(tested) - 2
    else:
        agrees = abs(at - grid_position(tested, measured)) <= 1 + 1e-9
    return KneeCheck(tested, measured, expected, bool(agrees))


def knee_moved(a: KneeCheck, b: KneeCheck) -> bool | None:
    """Whether B's knee lies where the advice put it (`b.agrees`) and moved from A's: a knee that
    stayed where A's was did not move, however close the advised knee lies (one tested level
    around an advised 8 passed a knee that stayed at 4). None where it cannot be told."""
    if b.agrees and a.measured is not None and b.measured == a.measured:
        return False
    return b.agrees


def knee_stayed(a: KneeCheck, b: KneeCheck) -> bool:
    """B's knee stayed where A's was, though the advice put it elsewhere."""
    return (
        a.measured is not None
        and b.measured == a.measured
        and b.expected is not None
        and b.expected != a.measured
    )
