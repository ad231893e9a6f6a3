"""The significance tests `ab` chooses from, each a pure function of two samples (A's, B's)
returning a `TestResult` for B − A: Welch's t across runs, a bootstrap of a percentile over
requests, Mann-Whitney, Fisher's exact test of success shares; and Holm's correction of a family
of p-values. Which one decides what is `ab`'s to say."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats as sps

WELCH = "Welch's t-test across runs"
BOOTSTRAP = "bootstrap of the percentile over requests"
FISHER = "Fisher's exact test over requests"
NO_TEST = "none"


@dataclass(frozen=True)
class TestResult:
    """One test of B − A: the difference it tested, its interval, its p-value, which test."""

    test: str
    diff: float
    ci_low: float = math.nan
    ci_high: float = math.nan
    p: float = math.nan
    note: str = ""


def without_nan(values) -> np.ndarray:
    """The values as float64, NaN left out."""
    arr = np.asarray(values, dtype=np.float64)
    return arr[~np.isnan(arr)]


def welch(a, b, alpha: float = 0.05) -> TestResult:
    """Welch's t-test of mean(b) − mean(a), with its (1 − alpha) interval (Welch–Satterthwaite df).

    Needs two values on each side; with no spread on either side the difference is exact
    (p = 1 when it is zero, else 0).
    """
    a, b = without_nan(a), without_nan(b)
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
    a, b = without_nan(a), without_nan(b)
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
    a, b = without_nan(a), without_nan(b)
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
