"""Levels with failed requests: which are named in the findings, which are left out of conclusions.

A level's throughput counts only its successful requests, so a level where the server stopped
answering looks like a slow level, not a broken one. The rule: a level where more than
`max_failed_share` of the measured requests failed in any run (the worst run, from the curve's
`success_rate_min`; `success_rate_mean` when the curve has no minimum) is left out of the peak,
the saturation point, scaling and the recommendations. Every level with a failure is named in
the findings with its failure share, whether left out or kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .curve import column

#: a level with more than this share of failed measured requests in any run is left out
MAX_FAILED_SHARE = 0.01


@dataclass(frozen=True)
class FailedLevel:
    """One level with failed requests, and whether it is left out of the conclusions."""

    users: float
    worst_share: float  # share of measured requests that failed, in the run where most failed
    mean_share: float  # the same share averaged across runs
    n: int  # runs at this level
    excluded: bool

    def sentence(self, max_failed_share: float = MAX_FAILED_SHARE) -> str:
        """The finding that names this level."""
        users = f"{self.users:,.0f}"
        share = f"{self.worst_share * 100:.1f}% of its measured requests failed"
        if self.n >= 2:
            share += f" in the worst of {self.n} runs (mean {self.mean_share * 100:.1f}%)"
        if self.excluded:
            return (
                f"Level {users} concurrent is left out of the peak, saturation point, scaling and recommendations: "
                f"{share}, more than the {max_failed_share:.0%} allowed; its throughput counts only the requests "
                "that succeeded."
            )
        return f"Level {users} concurrent is kept although {share} (at most the {max_failed_share:.0%} allowed)."


def failed_levels(
    curve: pd.DataFrame, max_failed_share: float = MAX_FAILED_SHARE
) -> list[FailedLevel]:
    """Every level of `curve` with a failed measured request, in the curve's order."""
    mean_ok = column(curve, "success_rate_mean")
    worst_ok = column(curve, "success_rate_min") if "success_rate_min" in curve else mean_ok
    n = column(curve, "success_rate_n")
    users = column(curve, "users")
    out = []
    for i in np.flatnonzero(worst_ok < 1.0):
        worst, mean = 1.0 - worst_ok[i], 1.0 - mean_ok[i]
        runs = int(n[i]) if n[i] == n[i] else 1
        out.append(
            FailedLevel(
                float(users[i]), float(worst), float(mean), runs, bool(worst > max_failed_share)
            )
        )
    return out


def kept(curve: pd.DataFrame, failed: list[FailedLevel]) -> pd.DataFrame:
    """`curve` without the levels `failed` leaves out."""
    out = {f.users for f in failed if f.excluded}
    if not out:
        return curve
    return curve[~curve["users"].astype(float).isin(out)].reset_index(drop=True)


def describe(max_failed_share: float = MAX_FAILED_SHARE) -> str:
    """The rule, as printed in the report beside the saturation rule."""
    return (
        f"A level where more than {max_failed_share:.0%} of the measured requests failed in any run is left out "
        "of the peak, the saturation point, scaling, the recommendations and the throughput and latency findings "
        "(its throughput counts only the requests that succeeded, so it would pass for a slow level); a level "
        f"with failures at or below {max_failed_share:.0%} is kept. Either way the findings name the level and "
        "its failure share. When every level is left out, no peak or saturation point is given."
    )
