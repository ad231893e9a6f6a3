"""A/B comparison of two configurations: is B really better than A, or is it noise?

Each side is one or more runs of one configuration. Per level tested on both sides and per
headline figure this module gives A's and B's mean over runs, the difference B − A with its
confidence interval, a p-value, and a verdict ("B better", "B worse", or "no significant
difference at this n"; never "equal": a test that finds nothing has not shown equality; "no
test possible at n = 1" where a side has a single run, which no test can judge).

Which test speaks:

- n >= 2 runs on each side: Welch's t-test on the per-run figures. The run is the unit of
  replication: requests of one run share its server state, so treating them as independent
  samples of the configuration would call run-to-run noise a difference.
- fewer runs: the across-run test is impossible, and no verdict is given. A bootstrap of the
  difference of percentiles over the measured requests (seeded, vectorised), and for the
  success rate Fisher's exact test over requests, are shown for information: they speak only
  for these two runs. They cannot decide, because the requests of one run share its speed:
  splitting runs of one configuration one against one, the bootstrap called most comparisons
  significant (tests/analysis/test_ab_false_positives.py). Throughput and ITL are one figure
  per run (ITL comes as a merged histogram): nothing to show.

Latency figures also get a Mann-Whitney test of the pooled request distributions, shown beside
the verdict but never deciding it. p-values are corrected for multiple comparisons with Holm's
step-down method, per level (the family is that level's headline figures) or across every level.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from ...figures import COMPARE, Figure, shown_in
from ..levels.table import present as level_figure_present
from ..series.stats import Summary, summarize
from .significance import (
    NO_TEST,
    WELCH,
    TestResult,
    bootstrap_percentile_diff,
    holm,
    mann_whitney,
    proportions,
    welch,
    without_nan,
)

BETTER, WORSE, UNSURE = "B better", "B worse", "no significant difference at this n"
#: the verdicts on a figure with no better side (the draft acceptance rate: `figures.SPECULATION`)
HIGHER, LOWER = "B higher", "B lower"
#: the verdict where no test was possible: fewer than two runs of a side measured the figure
NO_TEST_VERDICT = "no test possible at n = {n}"


def no_test_verdict(n: int) -> str:
    """The verdict where no test was possible, "no test possible at n = 1": never "no significant
    difference", which only a test can find."""
    return NO_TEST_VERDICT.format(n=n)


#: Holm's correction within each level, across every level and figure, or none
CORRECTIONS: tuple[str, ...] = ("level", "all", "none")


def compare_figures(
    runs: Sequence["RunLevels"] = (), other: Sequence["RunLevels"] | None = None
) -> list[Figure]:
    """The headline figures `compare` judges (`figures.COMPARE`), those the runs had: a reasoning
    model's where some level of these runs measured reasoning tokens. With `other` (B's runs,
    `runs` A's), a figure that needs something of the server (`only_with`: GPU telemetry,
    speculative decoding) where both sides had it: one side's alone is nothing to compare."""

    def present(key: str) -> bool:
        on = [runs] if other is None else [runs, other]
        return all(any(level_figure_present(r.metrics, key) for r in side) for side in on)

    return shown_in(COMPARE, present)


@dataclass(frozen=True)
class RunLevels:
    """One run as the comparison needs it: `measure_levels`'s `metrics` and `measured`."""

    run_id: str
    metrics: pd.DataFrame
    measured: pd.DataFrame


@dataclass
class Comparison:
    """One headline figure at one level: both sides, the test that decides, and the verdict."""

    level: float
    figure: Figure
    a: Summary  # over A's runs
    b: Summary
    result: TestResult  # the test that gives the verdict
    p_adjusted: float = math.nan  # `result.p` after Holm's correction
    verdict: str = UNSURE
    requests: TestResult | None = None  # the request-level bootstrap, beside Welch's verdict
    distribution_p: float = math.nan  # Mann-Whitney over the pooled requests (latencies)

    @property
    def diff(self) -> float:
        return self.b.mean - self.a.mean

    @property
    def rel_diff(self) -> float:
        return self.diff / self.a.mean if self.a.mean else math.nan

    @property
    def tested(self) -> bool:
        return not math.isnan(self.result.p)


@dataclass
class ABResult:
    """Everything `vllm-load compare` shows: the comparisons per level, and what was dropped."""

    alpha: float
    correction: str
    levels: list[float]
    comparisons: list[Comparison]
    only_a: list[float] = field(default_factory=list)  # levels A tested and B did not
    only_b: list[float] = field(default_factory=list)

    @property
    def n_tested(self) -> int:
        return sum(c.tested for c in self.comparisons)

    def at(self, level: float) -> list[Comparison]:
        return [c for c in self.comparisons if c.level == level]


def verdict(diff: float, p_adjusted: float, alpha: float, higher_is_better: bool | None) -> str:
    """B better / B worse when the adjusted p is under alpha, else no significant difference;
    for a figure with no better side (the draft acceptance rate), B higher / B lower."""
    if math.isnan(p_adjusted) or p_adjusted >= alpha or diff == 0 or math.isnan(diff):
        return UNSURE
    if higher_is_better is None:
        return HIGHER if diff > 0 else LOWER
    return BETTER if (diff > 0) == higher_is_better else WORSE


# --- putting runs together -----------------------------------------------------------------------
def level_values(metrics: pd.DataFrame) -> np.ndarray:
    """What names each level across runs: its value in its kind of load (`load_kinds`)."""
    column = "value" if "value" in metrics else "users"  # (tables from before kinds)
    return pd.to_numeric(metrics[column], errors="coerce").to_numpy(np.float64)


@dataclass(frozen=True)
class SideData:
    """One side's runs indexed by level: each figure per run, and the latencies of the
    successful measured requests pooled over runs. Built once (`side_data`), read per figure."""

    figures: dict[float, dict[str, list[float]]]
    latencies: dict[float, dict[str, np.ndarray]]

    def per_run(self, level: float, column: str) -> list[float]:
        return self.figures.get(level, {}).get(column, [])

    def requests(self, level: float, column: str) -> np.ndarray:
        return self.latencies.get(level, {}).get(column, np.array([]))

    @property
    def levels(self) -> list[float]:
        """The levels at least one run measured a request of."""
        return sorted(lv for lv, f in self.figures.items() if any(m > 0 for m in f["measured"]))


def side_data(runs: Sequence[RunLevels], figures_: Sequence[Figure]) -> SideData:
    """Index one side's runs by level (its users, or its requested rate): the metrics columns
    of `figures_` and the counts Fisher's test needs; the latencies their request-level tests
    read."""
    columns = (*(f.key for f in figures_), "ok", "measured")
    latencies_read = sorted({f.latency for f in figures_ if f.latency})
    figures: dict[float, dict[str, list[float]]] = {}
    parts: dict[float, dict[str, list[np.ndarray]]] = {}
    for run in runs:
        values = level_values(run.metrics)
        table = {
            c: pd.to_numeric(run.metrics[c], errors="coerce").to_numpy(np.float64)
            if c in run.metrics
            else np.full(len(values), np.nan)
            for c in columns
        }
        for i, lv in enumerate(values):
            if lv != lv:
                continue
            slot = figures.setdefault(float(lv), {c: [] for c in columns})
            for c in columns:
                slot[c].append(float(table[c][i]))
        level_of = dict(zip(run.metrics["level"].tolist(), values.tolist()))
        for index, group in run.measured.groupby("level"):
            lv = level_of.get(index)
            if lv is None or lv != lv:
                continue
            slot_r = parts.setdefault(float(lv), {c: [] for c in latencies_read})
            for c in latencies_read:
                slot_r[c].append(
                    pd.to_numeric(group[c], errors="coerce").to_numpy(np.float64)
                    if c in group
                    else np.full(len(group), np.nan)
                )
    latencies = {
        lv: {c: without_nan(np.concatenate(arrays)) for c, arrays in cols.items()}
        for lv, cols in parts.items()
    }
    return SideData(figures, latencies)


def _seed(base: int, level: float, key: str) -> int:
    """A seed per (level, figure): the same data give the same interval in any order."""
    return base + zlib.crc32(f"{level!r}/{key}".encode())


def compare_figure(
    a_side: SideData,
    b_side: SideData,
    level: float,
    figure: Figure,
    alpha: float = 0.05,
    resamples: int = 2000,
    seed: int = 0,
) -> Comparison:
    """One figure at one level, before the multiple-comparison correction."""
    a_vals, b_vals = a_side.per_run(level, figure.key), b_side.per_run(level, figure.key)
    a, b = summarize(a_vals, 1 - alpha), summarize(b_vals, 1 - alpha)
    across = welch(a_vals, b_vals, alpha)
    reqs: TestResult | None = None
    dist = math.nan
    if figure.latency and figure.percentile is not None:
        ra, rb = a_side.requests(level, figure.latency), b_side.requests(level, figure.latency)
        reqs = bootstrap_percentile_diff(
            ra, rb, figure.percentile, alpha, resamples, _seed(seed, level, figure.key)
        )
        dist = mann_whitney(ra, rb)
    if across.test == WELCH:
        return Comparison(level, figure, a, b, across, requests=reqs, distribution_p=dist)
    if figure.key == "success_rate":
        ok_a, n_a = (
            np.nansum(a_side.per_run(level, "ok")),
            np.nansum(a_side.per_run(level, "measured")),
        )
        ok_b, n_b = (
            np.nansum(b_side.per_run(level, "ok")),
            np.nansum(b_side.per_run(level, "measured")),
        )
        reqs = proportions(int(ok_a), int(n_a), int(ok_b), int(n_b), alpha)
    why = (
        "one run on a side: no verdict (the across-run test is impossible: it needs two runs a "
        "side; a test over requests cannot tell run-to-run noise from a difference)"
    )
    if reqs is not None:
        why += f"; over these runs' requests, for information: {reqs.test}"
    no_verdict = TestResult(NO_TEST, b.mean - a.mean, note=why)
    return Comparison(level, figure, a, b, no_verdict, requests=reqs, distribution_p=dist)


def compare_runs(
    a_runs: Sequence[RunLevels],
    b_runs: Sequence[RunLevels],
    alpha: float = 0.05,
    correction: str = "level",
    resamples: int = 2000,
    seed: int = 0,
    figures: Sequence[Figure] | None = None,
) -> ABResult:
    """Every headline figure (`compare_figures` of both sides, or `figures`) at every level both
    sides measured, Holm-corrected and judged."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    if figures is None:
        figures = compare_figures(a_runs, b_runs)
    a_side, b_side = side_data(a_runs, figures), side_data(b_runs, figures)
    levels_a, levels_b = a_side.levels, b_side.levels
    common = [lv for lv in levels_a if lv in levels_b]
    rows = [
        compare_figure(a_side, b_side, lv, f, alpha, resamples, seed)
        for lv in common
        for f in figures
    ]
    families: list[list[Comparison]]
    if correction == "level":
        families = [[c for c in rows if c.level == lv] for lv in common]
    else:
        families = [rows]
    for family in families:
        raw = [c.result.p for c in family]
        adjusted = holm(raw) if correction != "none" else np.asarray(raw, dtype=np.float64)
        for c, p in zip(family, adjusted):
            c.p_adjusted = float(p)
            c.verdict = (
                verdict(c.result.diff, c.p_adjusted, alpha, c.figure.higher_is_better)
                if c.tested
                else no_test_verdict(min(c.a.n, c.b.n))
            )
    return ABResult(
        alpha=alpha,
        correction=correction,
        levels=common,
        comparisons=rows,
        only_a=[lv for lv in levels_a if lv not in levels_b],
        only_b=[lv for lv in levels_b if lv not in levels_a],
    )


def worse_by(result: ABResult, threshold: float) -> list[Comparison]:
    """The comparisons where B is significantly worse than A by more than `threshold` (relative):
    throughput or success rate lower, latency higher."""
    return [
        c
        for c in result.comparisons
        if c.verdict == WORSE and not math.isnan(c.rel_diff) and abs(c.rel_diff) > threshold
    ]
