"""The configurations a tuning search tried, as points of throughput per GPU against
interactivity, and their Pareto frontier (issue 47): pure.

A point is one configuration at one level (InferenceMAX's charts: each level of a configuration
is a point, so a configuration draws a curve). Its x is the output tok/s one user sees, 1 over
the median request's TPOT (a streaming user's tokens per second once the first arrived); its y
is the level's total tok/s (input + output) over the GPUs that served it. A point is on the
frontier when no other point is at least as good on both and better on one; a point without one
of its figures (no GPU count, no streamed reply to time) is on no side of it and is named with
what it lacks, never guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

#: the SLO figures whose limit bounds the gap between tokens, so a per-user rate (1 / limit)
INTER_TOKEN = ("itl", "tpot")


@dataclass(frozen=True)
class ConfigurationPoint:
    """One configuration at one level: what it is, how it ran there, and whether it met the
    SLO."""

    configuration: dict[str, str]  # the flags that make it this configuration
    server_cmd: str  # the command that serves it ("" when the search did not start the server)
    gpus: float | None  # the GPUs that served it (None: not known)
    level: float  # the level the figures are at (users, or requests/s)
    total_tok_per_s: float  # input + output tokens per second of the level (NaN: none)
    output_tok_per_s_per_user: float  # 1 / median TPOT (NaN: no streamed reply to time)
    meets_slo: bool | None  # None: no SLO to meet
    slo_max: float | None = None  # the configuration's highest level meeting the SLO, if known
    name: str = ""  # what the search calls it ("A", "step 3"); its flags when empty
    source: str = ""  # where the figures come from (run directories)

    @property
    def label(self) -> str:
        flags = ", ".join(f"{k}={v}" for k, v in self.configuration.items()) or "as given"
        return f"{self.name} ({flags})" if self.name else flags

    @property
    def total_tok_per_s_per_gpu(self) -> float:
        if not self.gpus or self.gpus <= 0:
            return math.nan
        return self.total_tok_per_s / self.gpus

    @property
    def missing(self) -> list[str]:
        """What keeps it off the chart: the figures it has none of."""
        out = []
        if not self.gpus or self.gpus <= 0:
            out.append("GPU count (pass --gpus N, or --meta gpus=N to the runs)")
        if not _finite(self.total_tok_per_s):
            out.append("total tok/s")
        if not _finite(self.output_tok_per_s_per_user):
            out.append("output tok/s per user (no streamed reply with a TPOT)")
        return out


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


@dataclass(frozen=True)
class Frontier:
    """The points split three ways: the frontier (by interactivity, rising), the points some
    other point dominates, and those with a figure missing, each with what it lacks."""

    frontier: list[ConfigurationPoint] = field(default_factory=list)
    dominated: list[ConfigurationPoint] = field(default_factory=list)
    missing: list[tuple[ConfigurationPoint, str]] = field(default_factory=list)


def dominates(a: ConfigurationPoint, b: ConfigurationPoint) -> bool:
    """`a` is at least as good as `b` on both figures and better on one."""
    ax, ay = a.output_tok_per_s_per_user, a.total_tok_per_s_per_gpu
    bx, by = b.output_tok_per_s_per_user, b.total_tok_per_s_per_gpu
    return ax >= bx and ay >= by and (ax > bx or ay > by)


def pareto_frontier(points: Iterable[ConfigurationPoint]) -> Frontier:
    """The frontier of total tok/s per GPU against output tok/s per user. Points equal on both
    figures are all on it (neither dominates the other)."""
    drawn, missing = [], []
    for p in points:
        lacks = p.missing
        if lacks:
            missing.append((p, ", ".join(lacks)))
        else:
            drawn.append(p)
    front = [p for p in drawn if not any(dominates(q, p) for q in drawn)]
    front.sort(key=lambda p: (p.output_tok_per_s_per_user, -p.total_tok_per_s_per_gpu))
    chosen = {id(p) for p in front}
    return Frontier(front, [p for p in drawn if id(p) not in chosen], missing)


def choose(points: Sequence[ConfigurationPoint]) -> ConfigurationPoint | None:
    """The configuration to serve: the highest total tok/s per GPU among the points that meet
    the SLO (every point with its figures, where there is no SLO); on a tie, the more
    interactive one. None when no point qualifies."""
    usable = [p for p in points if not p.missing and p.meets_slo is not False]
    if not usable:
        return None
    return max(usable, key=lambda p: (p.total_tok_per_s_per_gpu, p.output_tok_per_s_per_user))


def per_user_limit(limits: Iterable[tuple[str, float]]) -> float | None:
    """The output tok/s per user an SLO's limits on the gap between tokens imply (1 / the
    tightest, in s), from (figure, limit) pairs; None where the SLO bounds no such gap."""
    gaps = [limit for metric, limit in limits if metric in INTER_TOKEN and limit > 0]
    return 1.0 / min(gaps) if gaps else None


def per_user(tpot_p50: float) -> float:
    """Output tok/s one user sees once its first token came: 1 / its median TPOT."""
    return 1.0 / tpot_p50 if tpot_p50 == tpot_p50 and tpot_p50 > 0 else math.nan


def level_figures(curve, with_slo: bool) -> list[dict]:
    """Per level of a configuration's curve (`level_curve`, means over its runs): its total
    tok/s, its output tok/s per user, and whether every run met the SLO there (None: no SLO)."""
    rows = []
    for _, row in curve.iterrows():
        met = float(row.get("slo_met_mean", math.nan))
        rows.append(
            {
                "level": float(row["value"]),
                "total_tok_per_s": float(row.get("total_tok_per_s_mean", math.nan)),
                "output_tok_per_s_per_user": per_user(float(row.get("tpot_p50_mean", math.nan))),
                "meets_slo": bool(met == 1.0) if with_slo else None,
            }
        )
    return rows
