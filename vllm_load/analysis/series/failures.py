"""Levels with failed requests, or open-loop levels whose window was no steady state: which are
named in the findings, which are left out of conclusions.

A level's throughput counts only its successful requests, so a level where the server stopped
answering looks like a slow level, not a broken one. The rule: a level where more than
`max_failed_share` of the measured requests failed in any run (the worst run, from the curve's
`success_rate_min`; `success_rate_mean` when the curve has no minimum) is left out of the peak,
the saturation point, scaling and the recommendations. Every level with a failure is named in
the findings with its failure share, whether left out or kept. The same rule on one run's
levels (`level_problems`, with a level that measured nothing) makes `vllm-load run` exit
non-zero. An open-loop (--rates) level whose measured window was no steady state in some run (`levels.rates`: the target could not
keep up, or the window worked off a backlog) is left out the same way, with the reason.

A level with failures is explained by them: its finding names their categories and counts
(requests.csv's `error`, an HTTP error with its status), from the curve's `failure_kinds`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..frame_records import row_dicts
from ..levels import failed as failed_requests
from ..levels.client_side import shown_past
from ..levels.measure import LevelMeasurement
from ..levels.table import level_name
from .curve import column

#: a level with more than this share of failed measured requests in any run is left out
MAX_FAILED_SHARE = 0.01


@dataclass(frozen=True)
class FailedLevel:
    """One level with failed requests, and whether it is left out of the conclusions."""

    value: float
    worst_share: float  # share of measured requests that failed, in the run where most failed
    mean_share: float  # the same share averaged across runs
    n: int  # runs at this level
    excluded: bool
    unsteady: str = ""  # an open-loop level whose window was no steady state: why (then excluded)
    kinds: str = ""  # its failed requests by category, every run: `612 connect, 3 http_status 503`

    def sentence(self, max_failed_share: float = MAX_FAILED_SHARE) -> str:
        """The finding that names this level."""
        if self.unsteady:
            return (
                f"Rate {self.value:,.4g} requests/s is left out of the peak, saturation point, "
                f"scaling and recommendations: its measured window was no steady state "
                f"({self.unsteady}), so its throughput is not the target's at that rate."
            )
        level = f"{self.value:,.0f}"
        limit = max_failed_share * 100
        share = f"{shown_past(self.worst_share * 100, limit, 1)}% of its measured requests failed"
        if self.n >= 2:
            share += f" in the worst of {self.n} runs (mean {self.mean_share * 100:.1f}%)"
        kinds = f"its failed requests: {self.kinds}" if self.kinds else ""
        if self.excluded:
            return (
                f"Level {level} concurrent is left out of the peak, saturation point, scaling and recommendations: "
                f"{share}, more than the {max_failed_share:.0%} allowed{f' ({kinds})' if kinds else ''}; "
                "its throughput counts only the requests that succeeded."
            )
        return (
            f"Level {level} concurrent is kept although {share} (at most the {max_failed_share:.0%} "
            f"allowed{f'; {kinds}' if kinds else ''})."
        )


def failed_levels(
    curve: pd.DataFrame, max_failed_share: float = MAX_FAILED_SHARE
) -> list[FailedLevel]:
    """Every level of `curve` with a failed measured request, in the curve's order."""
    mean_ok = column(curve, "success_rate_mean")
    worst_ok = column(curve, "success_rate_min") if "success_rate_min" in curve else mean_ok
    n = column(curve, "success_rate_n")
    users = column(curve, "value")
    unsteady = (
        curve["rate_unsteady"].fillna("").astype(str).to_numpy()
        if "rate_unsteady" in curve
        else np.full(len(curve), "")
    )
    kinds = (
        curve["failure_kinds"].fillna("").astype(str).to_numpy()
        if "failure_kinds" in curve
        else np.full(len(curve), "")
    )
    out = []
    for i in np.flatnonzero((worst_ok < 1.0) | (unsteady != "")):
        worst = 1.0 - worst_ok[i] if worst_ok[i] == worst_ok[i] else 0.0
        mean = 1.0 - mean_ok[i] if mean_ok[i] == mean_ok[i] else 0.0
        runs = int(n[i]) if n[i] == n[i] else 1
        excluded = bool(worst > max_failed_share) or bool(unsteady[i])
        out.append(
            FailedLevel(
                float(users[i]), float(worst), float(mean), runs, excluded, unsteady[i], kinds[i]
            )
        )
    return out


def why_left_out(
    levels: list[FailedLevel], max_failed_share: float = MAX_FAILED_SHARE, above: float = -math.inf
) -> str:
    """Why the levels left out of the conclusions (those above `above` users or requests/s)
    were, to follow "the levels ..." or "every level ...": they had failed requests, or were
    open-loop levels whose window was no steady state, or both ("" when none was left out)."""
    out = [f for f in levels if f.excluded and f.value > above]
    unsteady = any(f.unsteady for f in out)
    failing = any(not f.unsteady for f in out)
    failed = f"had more than {max_failed_share:.0%} failed requests"
    if unsteady and failing:
        return f"{failed} or were no steady state"
    if unsteady:
        return "were no steady state (the target fell behind the rate, or worked off a backlog)"
    return failed if failing else ""


def failure_kinds(errors: pd.DataFrame) -> dict[float, str]:
    """{level: its failed requests by category, most first, e.g. `612 connect, 3 http_status
    503`} from failure counts (`levels.table.error_counts`' columns, with `value` for the level
    and every run of a series in one frame)."""
    if errors.empty:
        return {}
    label = errors["error"].astype(str)
    if "status" in errors:
        status = pd.to_numeric(errors["status"], errors="coerce").fillna(0).astype(int)
        http = (label == "http_status") & (status > 0)
        label = label.where(~http, label + " " + status.astype(str))
    counts = (
        pd.DataFrame({"value": errors["value"].astype(float), "kind": label, "n": errors["count"]})
        .groupby(["value", "kind"])["n"]
        .sum()
        .reset_index()
        .sort_values(["value", "n", "kind"], ascending=[True, False, True])
    )
    return {
        float(users): ", ".join(f"{int(n):,} {kind}" for kind, n in zip(g["kind"], g["n"]))
        for users, g in counts.groupby("value")
    }


def kept(curve: pd.DataFrame, failed: list[FailedLevel]) -> pd.DataFrame:
    """`curve` without the levels `failed` leaves out."""
    out = {f.value for f in failed if f.excluded}
    if not out:
        return curve
    return curve[~curve["value"].astype(float).isin(out)].reset_index(drop=True)


def describe(max_failed_share: float = MAX_FAILED_SHARE) -> str:
    """The rule, as printed in the report beside the saturation rule."""
    return (
        f"A level where more than {max_failed_share:.0%} of the measured requests failed in any run is left out "
        "of the peak, the saturation point, scaling, the recommendations and the throughput and latency findings "
        "(its throughput counts only the requests that succeeded, so it would pass for a slow level); a level "
        f"with failures at or below {max_failed_share:.0%} is kept. Either way the findings name the level and "
        "its failure share. When every level is left out, no peak or saturation point is given."
    )


# --- one run: the levels that make `vllm-load run` exit non-zero (`run.outcomes`) ---------------


@dataclass(frozen=True)
class LevelProblem:
    level: int
    name: str  # "64 users" or "5 requests/s"
    text: str  # what went wrong, with the figures it stands on


def level_problems(
    measurement: LevelMeasurement, max_failed_share: float = MAX_FAILED_SHARE
) -> list[LevelProblem]:
    """Every level that failed more than `max_failed_share` of its measured requests, or measured
    none, in level order."""
    metrics, labelled = measurement.metrics, measurement.labelled
    column = {c: metrics[c].to_numpy(np.float64) for c in ("value", "started", "finished")}
    measured = metrics["measured"].to_numpy(np.int64)
    failed = metrics["failed"].to_numpy(np.int64)
    if "cancelled" in metrics:  # (closed by the client on purpose: not judged)
        judged = measured - metrics["cancelled"].to_numpy(np.int64)
    else:
        judged = measured
    levels = metrics["level"].to_numpy(np.int64)
    records = row_dicts(metrics)
    out = []
    for i, level in enumerate(levels):
        if measured[i] == 0:
            started, finished = int(column["started"][i]), int(column["finished"][i])
            text = f"measured no request ({started} started, {finished} finished)"
        elif judged[i] and failed[i] / judged[i] > max_failed_share:
            text = (
                f"{failed[i] / judged[i]:.1%} of its {judged[i]} measured requests failed "
                f"({_categories(labelled, int(level))}), more than the {max_failed_share:.0%} "
                "allowed"
            )
        else:
            continue
        out.append(LevelProblem(int(level), level_name(records[i]), text))
    return out


def _categories(labelled: pd.DataFrame, level: int) -> str:
    """The level's measured failures by category, most first (`failure_kinds`' words)."""
    if "error" not in labelled:
        return "categories unknown"
    failed = labelled[(labelled["level"] == level) & failed_requests(labelled)]
    errors = pd.DataFrame(
        {
            "value": float(level),
            "error": failed["error"].astype("string").fillna("").replace("", "unknown"),
            "status": failed["status"] if "status" in failed else 0,
            "count": 1,
        }
    )
    return failure_kinds(errors).get(float(level), "")


def describe_problems(problems: list[LevelProblem]) -> str:
    """One line for them all."""
    listed = "; ".join(f"{p.name}: {p.text}" for p in problems)
    return f"{len(problems)} level(s) failed: {listed}"
