"""A/B comparison of two configurations: is B really better than A, or is it noise?

Each side is one or more runs of one configuration. Per level tested on both sides and per
headline figure this module gives A's and B's mean over runs, the difference B − A with its
confidence interval, a p-value, and a verdict ("B better", "B worse", or "no significant
difference at this n"; never "equal": a test that finds nothing has not shown equality).

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
from scipy import stats as sps

from ..series.stats import Summary, summarize

BETTER, WORSE, UNSURE = "B better", "B worse", "no significant difference at this n"
WELCH = "Welch's t-test across runs"
BOOTSTRAP = "bootstrap of the percentile over requests"
FISHER = "Fisher's exact test over requests"
NO_TEST = "none"
#: Holm's correction within each level, across every level and figure, or none
CORRECTIONS: tuple[str, ...] = ("level", "all", "none")


@dataclass(frozen=True)
class Figure:
    """A headline figure: where it is in `levels.measure_levels`'s metrics, and which way is good.

    `latency`/`percentile` name the per-request column and percentile it is computed from, for
    the request-level tests; None for figures that are one number per run.
    """

    key: str
    label: str
    unit: str  # "tok/s", "s" or "share"
    higher_is_better: bool
    latency: str | None = None
    percentile: int | None = None


FIGURES: tuple[Figure, ...] = (
    Figure("total_tok_per_s", "total tok/s", "tok/s", True),
    Figure("output_tok_per_s", "output tok/s", "tok/s", True),
    Figure("ttft_p50", "TTFT p50", "s", False, "ttft", 50),
    Figure("ttft_p99", "TTFT p99", "s", False, "ttft", 99),
    Figure("itl_p99", "ITL p99", "s", False),
    Figure("e2e_p50", "E2E p50", "s", False, "e2e", 50),
    Figure("e2e_p99", "E2E p99", "s", False, "e2e", 99),
    Figure("success_rate", "success rate", "share", True),
)


@dataclass(frozen=True)
class RunLevels:
    """One run as the comparison needs it: `measure_levels`'s `metrics` and `measured`."""

    run_id: str
    metrics: pd.DataFrame
    measured: pd.DataFrame


@dataclass(frozen=True)
class TestResult:
    """One test of B − A: the difference it tested, its interval, its p-value, which test."""

    test: str
    diff: float
    ci_low: float = math.nan
    ci_high: float = math.nan
    p: float = math.nan
    note: str = ""


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


# --- the tests ------------------------------------------------------------------------------------
def _clean(values) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    return arr[~np.isnan(arr)]


def welch(a, b, alpha: float = 0.05) -> TestResult:
    """Welch's t-test of mean(b) − mean(a), with its (1 − alpha) interval (Welch–Satterthwaite df).

    Needs two values on each side; with no spread on either side the difference is exact
    (p = 1 when it is zero, else 0).
    """
    a, b = _clean(a), _clean(b)
    if a.size < 2 or b.size < 2:
        diff = float(b.mean() - a.mean()) if a.size and b.size else math.nan
        return TestResult(NO_TEST, diff, note="needs two runs on each side")
    diff = float(b.mean() - a.mean())
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        return TestResult(WELCH, diff, diff, diff, 1.0 if diff == 0 else 0.0, "no spread")
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = float(sps.t.ppf(1 - alpha / 2, df)) * se
    p = float(2 * sps.t.sf(abs(diff) / se, df))
    return TestResult(WELCH, diff, diff - half, diff + half, p)


def _resampled_percentiles(
    x: np.ndarray, q: float, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """The `q`th percentile (numpy's linear interpolation) of `resamples` bootstrap resamples of
    x, drawn without building the resamples, so a level of a million requests costs no more.

    A resample is x_sorted[floor(n U_i)] for n uniforms U_i, so its k-th smallest value is
    x_sorted[floor(n U_(k))], and the k-th of n uniforms is Beta(k, n + 1 - k); the next one
    is U_(k) plus the smallest of the n - k uniforms above it, (1 - U_(k)) Beta(1, n - k).
    """
    xs = np.sort(x)
    n = xs.size
    h = (n - 1) * q / 100.0
    k = int(math.floor(h))  # 0-based: the percentile lies between order statistics k and k + 1
    frac = h - k
    u = rng.beta(k + 1, n - k, size=resamples)
    low = xs[np.minimum((n * u).astype(np.int64), n - 1)]
    if frac == 0 or k + 1 >= n:
        return low
    u_next = u + (1.0 - u) * rng.beta(1, n - k - 1, size=resamples)
    high = xs[np.minimum((n * u_next).astype(np.int64), n - 1)]
    return low + frac * (high - low)


def bootstrap_percentile_diff(
    a, b, q: float, alpha: float = 0.05, resamples: int = 2000, seed: int = 0
) -> TestResult:
    """Percentile bootstrap of percentile_q(b) − percentile_q(a) over requests.

    The interval is the alpha/2 and 1 − alpha/2 quantiles of the resampled differences; the
    p-value is the interval inverted (twice the smaller share of resamples on either side of
    0, counted with the observed one so it is never 0).
    """
    a, b = _clean(a), _clean(b)
    if a.size < 2 or b.size < 2:
        return TestResult(NO_TEST, math.nan, note="fewer than two requests on a side")
    diff = float(np.percentile(b, q) - np.percentile(a, q))
    rng = np.random.default_rng(seed)
    d = _resampled_percentiles(b, q, resamples, rng) - _resampled_percentiles(a, q, resamples, rng)
    low, high = np.quantile(d, [alpha / 2, 1 - alpha / 2])
    tail = min(int((d <= 0).sum()), int((d >= 0).sum()))
    p = min(1.0, 2 * (tail + 1) / (resamples + 1))
    return TestResult(BOOTSTRAP, diff, float(low), float(high), p, f"{resamples} resamples")


def mann_whitney(a, b) -> float:
    """Two-sided Mann-Whitney p-value: do the two request distributions differ at all?"""
    a, b = _clean(a), _clean(b)
    if a.size < 1 or b.size < 1:
        return math.nan
    return float(sps.mannwhitneyu(b, a, alternative="two-sided").pvalue)


def proportions(ok_a: int, n_a: int, ok_b: int, n_b: int, alpha: float = 0.05) -> TestResult:
    """Success share of B − A over requests: Fisher's exact p, Agresti–Caffo interval (one
    success and one failure added to each side, which keeps it honest near 0 and 1)."""
    if n_a < 1 or n_b < 1:
        return TestResult(NO_TEST, math.nan, note="no measured requests on a side")
    diff = ok_b / n_b - ok_a / n_a
    p = float(sps.fisher_exact(np.array([[ok_a, n_a - ok_a], [ok_b, n_b - ok_b]])).pvalue)
    pa, pb = (ok_a + 1) / (n_a + 2), (ok_b + 1) / (n_b + 2)
    se = math.sqrt(pa * (1 - pa) / (n_a + 2) + pb * (1 - pb) / (n_b + 2))
    half = float(sps.norm.ppf(1 - alpha / 2)) * se
    return TestResult(FISHER, diff, pb - pa - half, pb - pa + half, min(p, 1.0))


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values; NaN (untested) entries stay NaN and do not count."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    if idx.size == 0:
        return out
    order = idx[np.argsort(p[idx], kind="mergesort")]
    m = order.size
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


def verdict(diff: float, p_adjusted: float, alpha: float, higher_is_better: bool) -> str:
    """B better / B worse when the adjusted p is under alpha, else no significant difference."""
    if math.isnan(p_adjusted) or p_adjusted >= alpha or diff == 0 or math.isnan(diff):
        return UNSURE
    return BETTER if (diff > 0) == higher_is_better else WORSE


# --- putting runs together -----------------------------------------------------------------------
def level_values(metrics: pd.DataFrame) -> np.ndarray:
    """What names each level across runs: its requested rate in rate mode, else its users."""
    if "requested_rate" in metrics and metrics["requested_rate"].notna().any():
        return pd.to_numeric(metrics["requested_rate"], errors="coerce").to_numpy(np.float64)
    return pd.to_numeric(metrics["users"], errors="coerce").to_numpy(np.float64)


#: the metrics columns a side keeps per level: the figures, and the counts Fisher's test needs
_COLUMNS: tuple[str, ...] = (*(f.key for f in FIGURES), "ok", "measured")
_LATENCIES: tuple[str, ...] = tuple(sorted({f.latency for f in FIGURES if f.latency}))


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


def side_data(runs: Sequence[RunLevels]) -> SideData:
    """Index one side's runs by level (its users, or its requested rate)."""
    figures: dict[float, dict[str, list[float]]] = {}
    parts: dict[float, dict[str, list[np.ndarray]]] = {}
    for run in runs:
        values = level_values(run.metrics)
        table = {
            c: pd.to_numeric(run.metrics[c], errors="coerce").to_numpy(np.float64)
            if c in run.metrics
            else np.full(len(values), np.nan)
            for c in _COLUMNS
        }
        for i, lv in enumerate(values):
            if lv != lv:
                continue
            slot = figures.setdefault(float(lv), {c: [] for c in _COLUMNS})
            for c in _COLUMNS:
                slot[c].append(float(table[c][i]))
        level_of = dict(zip(run.metrics["level"].tolist(), values.tolist()))
        for index, group in run.measured.groupby("level"):
            lv = level_of.get(index)
            if lv is None or lv != lv:
                continue
            slot_r = parts.setdefault(float(lv), {c: [] for c in _LATENCIES})
            for c in _LATENCIES:
                slot_r[c].append(pd.to_numeric(group[c], errors="coerce").to_numpy(np.float64))
    latencies = {
        lv: {c: _clean(np.concatenate(arrays)) for c, arrays in cols.items()}
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
    figures: Sequence[Figure] = FIGURES,
) -> ABResult:
    """Every headline figure at every level both sides measured, Holm-corrected and judged."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    a_side, b_side = side_data(a_runs), side_data(b_runs)
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
            c.verdict = verdict(c.result.diff, c.p_adjusted, alpha, c.figure.higher_is_better)
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
