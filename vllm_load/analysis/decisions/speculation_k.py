"""Which number of draft tokens (K) pays at which load, from runs of one workload against servers
speculating with different K (and without speculation: K = 0).

A run's K is the number of draft positions its server exposed (`spec_pos_acceptance_<i>`
columns, `analysis.levels.speculation`); a run whose server was scraped but had no speculation
counters is K = 0. At each level value that runs of at least two K measured, the K with the most
output tokens/s wins; within `TIE` of the best, the smallest K does (it costs the least
verification). Throughput ranks, and acceptance length is the evidence beside it: the draft
acceptance rate falls mechanically as K rises, so it never ranks.

Speculation stops paying at a level where a larger K gives less output tokens/s than a smaller
one (beyond `TIE`): at a high batch the verification of K draft tokens per sequence costs more
than the tokens it accepts (docs/simulator.md's cost model). The advice is the winning K per
range of consecutive levels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from ...figures import spec_position_keys

#: throughputs within this share of the best are a tie, won by the smaller K
TIE = 0.02


def draft_tokens(metrics: pd.DataFrame) -> int | None:
    """A run's K: its server's draft positions; 0 where it was scraped without speculation
    counters; None where nothing says (no server figures at all)."""
    positions = spec_position_keys(metrics.columns)
    if positions:
        return len(positions)
    scraped = "server_batch" in metrics and bool(metrics["server_batch"].notna().any())
    return 0 if scraped else None


@dataclass(frozen=True)
class LevelChoice:
    """At one level value: output tok/s and acceptance length per K, and the K that wins."""

    value: float
    throughput: dict[int, float]
    acceptance: dict[int, float]
    best: int
    #: the draft acceptance rate per K (NaN for K = 0): evidence, never a rank
    rate: dict[int, float] = field(default_factory=dict)

    def stops_paying(self) -> tuple[int, int] | None:
        """(larger K, smaller K with more throughput beyond `TIE`), the largest such pair; None
        where every larger K did at least as well."""
        ks = sorted(self.throughput)
        for big in reversed(ks):
            for small in ks:
                if small < big and self.throughput[big] < (1 - TIE) * self.throughput[small]:
                    return big, small
        return None


def _by_k(runs: Sequence[tuple[str, pd.DataFrame]]) -> dict[int, pd.DataFrame]:
    """Per K: the mean output tok/s and acceptance length per level value over its runs."""
    frames: dict[int, list[pd.DataFrame]] = {}
    for _, metrics in runs:
        k = draft_tokens(metrics)
        if k is None:
            continue
        columns = ["value", "output_tok_per_s"]
        part = metrics[columns].copy()
        part["acceptance"] = metrics.get("spec_acceptance_length", np.nan) if k else 1.0
        part["rate"] = metrics.get("spec_draft_acceptance_rate", np.nan) if k else np.nan
        frames.setdefault(k, []).append(part)
    return {
        k: pd.concat(parts).groupby("value").mean(numeric_only=True) for k, parts in frames.items()
    }


def level_choices(runs: Sequence[tuple[str, pd.DataFrame]]) -> list[LevelChoice]:
    """Per level value measured by runs of at least two K: the throughputs and the winner."""
    by_k = _by_k(runs)
    if len(by_k) < 2:
        return []
    values = sorted(set().union(*(set(frame.index) for frame in by_k.values())))
    out = []
    for value in values:
        tput = {
            k: float(f.loc[value, "output_tok_per_s"])
            for k, f in by_k.items()
            if value in f.index and np.isfinite(f.loc[value, "output_tok_per_s"])
        }
        if len(tput) < 2:
            continue
        top = max(tput.values())
        best = min(k for k, t in tput.items() if t >= (1 - TIE) * top)
        accept = {k: float(by_k[k].loc[value, "acceptance"]) for k in tput}
        rate = {k: float(by_k[k].loc[value, "rate"]) for k in tput}
        out.append(LevelChoice(float(value), tput, accept, best, rate))
    return out


def _k_text(k: int) -> str:
    return "no speculation" if k == 0 else f"K = {k}"


def _evidence(c: LevelChoice, k: int) -> str:
    """What K measured at a level: output tok/s, acceptance length and draft acceptance rate."""
    text = f"{_k_text(k)} {c.throughput[k]:,.0f} output tok/s"
    if k and math.isfinite(c.acceptance[k]):
        text += f", acceptance length {c.acceptance[k]:.2f}"
    if k and math.isfinite(c.rate.get(k, math.nan)):
        text += f", draft acceptance {c.rate[k]:.0%}"
    return text


@dataclass(frozen=True)
class StopsPaying:
    """Where a server's K stops paying: the first level at which a smaller K (or none) gave
    more output tok/s beyond `TIE`; `advised` is that level's winner."""

    k: int
    choice: LevelChoice

    @property
    def value(self) -> float:
        return self.choice.value

    @property
    def advised(self) -> int:
        return self.choice.best

    def sentence(self, unit: str) -> str:
        c, k = self.choice, self.k
        return (
            f"Speculation with K = {k} stops paying at {c.value:,.4g} {unit}: "
            f"{_evidence(c, k)}, against {_evidence(c, c.best)}: verifying {k} draft "
            f"token{'s' if k > 1 else ''} per sequence costs more than the tokens they add at "
            "this batch"
        )


def stops_paying(choices: Sequence[LevelChoice], k: int) -> StopsPaying | None:
    """The first level where K = `k` lost to a smaller K beyond `TIE` (ranked by throughput);
    None where it never did, or where `k` is no speculation."""
    for c in choices:
        if k and k in c.throughput and c.best < k:
            if c.throughput[k] < (1 - TIE) * c.throughput[c.best]:
                return StopsPaying(k, c)
    return None


def _ranges(choices: Sequence[LevelChoice]) -> list[tuple[float, float, int]]:
    """(first value, last value, K) of each run of consecutive levels with the same winner."""
    out: list[tuple[float, float, int]] = []
    for c in choices:
        if out and out[-1][2] == c.best:
            out[-1] = (out[-1][0], c.value, c.best)
        else:
            out.append((c.value, c.value, c.best))
    return out


def speculation_k_findings(
    runs: Sequence[tuple[str, pd.DataFrame]], unit: str = "users"
) -> list[str]:
    """The verdict (where speculation stops paying, with its evidence) and the advice (K per
    range of levels), for runs of several K; [] otherwise."""
    choices = level_choices(runs)
    if not choices:
        return []
    out = []
    stop = next((c for c in choices if c.stops_paying()), None)
    if stop is not None:
        big, small = stop.stops_paying() or (0, 0)
        out.append(
            f"Speculation stops paying at {stop.value:,.4g} {unit}: {_evidence(stop, big)}; "
            f"{_evidence(stop, small)}: verifying more draft tokens per sequence costs more "
            "than the tokens they add at this batch (the draft acceptance rate falls as K rises "
            "whatever the drafts are worth: it is shown, never ranked by)."
        )
    advice = "; ".join(
        f"{_k_text(k)} at {a:,.4g} {unit}"
        if a == b
        else f"{_k_text(k)} from {a:,.4g} to {b:,.4g} {unit}"
        for a, b, k in _ranges(choices)
    )
    out.append(
        f"Draft tokens by load (most output tok/s; within {TIE:.0%}, the smaller K): {advice}."
    )
    return out
