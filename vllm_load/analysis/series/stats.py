"""Statistics across independent runs, and which runs belong together.

Runs of the same model with the same settings (run.json `settings`, minus what differs from
run to run by construction: where the run was written, its metadata) form a *series*. For
every figure of every level of a series this module gives n, mean, standard deviation
(ddof = 1), the 95 % confidence interval of the mean from the t-distribution with n - 1
degrees of freedom, and the coefficient of variation (std / mean). With n = 1 there is no
spread: std, interval and CoV are missing (NaN), never a zero-width interval.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

CONFIDENCE = 0.95
#: settings that say where or how a run was recorded or judged (its SLOs, the rules that may stop
#: its ladder early), not what was tested
RUN_SPECIFIC_SETTINGS = frozenset(
    {"run_dir", "out", "meta", "api_key_set", "model", "slo", "stop_when"}
)
#: settings of open-loop runs (--rates) only
OPEN_LOOP_SETTINGS = ("rates", "arrivals", "max_in_flight")
#: run.json meta keys with this prefix describe the server's configuration: they separate series
CONFIG_META_PREFIX = "config."
STAT_SUFFIXES: tuple[str, ...] = ("n", "mean", "std", "ci_low", "ci_high", "cov")


@dataclass(frozen=True)
class Summary:
    """Mean and spread of one figure over n runs."""

    n: int
    mean: float
    std: float
    ci_low: float
    ci_high: float
    cov: float

    @property
    def half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2.0


def t_quantile(n: int | np.ndarray, confidence: float = CONFIDENCE):
    """Two-sided t critical value for n observations (df = n - 1); NaN for n < 2."""
    n = np.asarray(n, dtype=np.float64)
    if n.ndim == 0:  # cached: a comparison asks for the same few counts thousands of times
        return _t_critical(float(n) - 1.0, confidence) if n >= 2 else math.nan
    if not (n >= 2).any():
        return np.full(n.shape, np.nan)
    with np.errstate(invalid="ignore"):
        return np.asarray(_t_ppf(0.5 + confidence / 2.0, np.where(n >= 2, n - 1, np.nan)))


@functools.lru_cache(maxsize=1024)
def _t_critical(df: float, confidence: float) -> float:
    return float(_t_ppf(0.5 + confidence / 2.0, df))


def _t_ppf(p: float, df):
    # scipy.special, not scipy.stats: `stats.t.ppf` is this same `stdtrit` behind argument
    # checks, and importing `scipy.stats` costs ~0.9 s of CPU (a third of a small report's
    # analysis) where `scipy.special` costs ~0.1 s. Here, not at the top: most users of this
    # module (a run's end-of-run summary, its diagnosis of one run, the live figures) never
    # compute an interval
    from scipy.special import stdtrit

    return stdtrit(df, p)


def summarize(values: Iterable[float], confidence: float = CONFIDENCE) -> Summary:
    """n, mean, std (ddof 1), t-interval and CoV of the non-missing values."""
    arr = np.asarray([v for v in values if v is not None], dtype=np.float64)
    arr = arr[~np.isnan(arr)]
    n = int(arr.size)
    if n == 0:
        return Summary(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    mean = float(arr.mean())
    if n == 1:
        return Summary(1, mean, math.nan, math.nan, math.nan, math.nan)
    std = float(arr.std(ddof=1))
    half = t_quantile(n, confidence) * std / math.sqrt(n)
    cov = std / mean if mean != 0 else math.nan
    return Summary(n, mean, std, mean - half, mean + half, cov)


def aggregate(
    frame: pd.DataFrame, by: Sequence[str], metrics: Sequence[str], confidence: float = CONFIDENCE
) -> pd.DataFrame:
    """Per group of `by`: `<metric>_n/_mean/_std/_ci_low/_ci_high/_cov` for every metric.

    Vectorised over groups; agrees with `summarize` on each group.
    """
    if frame.empty:
        cols = list(by) + [f"{m}_{s}" for m in metrics for s in STAT_SUFFIXES]
        return pd.DataFrame(columns=cols)
    cols = list(metrics)
    # every metric as one block, and each statistic as one (groups x metrics) array: set and
    # read column by column, a per-level curve's ~80 metrics took ~60 % of this function
    numeric = pd.DataFrame(
        {m: pd.to_numeric(frame[m], errors="coerce").astype(np.float64) for m in cols},
        index=frame.index,
    )
    values = pd.concat([frame[list(by)], numeric], axis=1)
    grouped = values.groupby(list(by), sort=True, dropna=False)[cols]
    counts = grouped.count()
    n = counts.to_numpy(np.float64)
    sd = np.where(n >= 2, grouped.std(ddof=1).to_numpy(np.float64), np.nan)
    mu = np.where(n >= 1, grouped.mean().to_numpy(np.float64), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        half = t_quantile(n, confidence) * sd / np.sqrt(n)
        cov = np.where(mu != 0, sd / mu, np.nan)
    low, high, whole = mu - half, mu + half, n.astype(np.int64)
    columns: dict[str, np.ndarray] = {}
    for j, m in enumerate(cols):
        columns.update(
            {
                f"{m}_n": whole[:, j],
                f"{m}_mean": mu[:, j],
                f"{m}_std": sd[:, j],
                f"{m}_ci_low": low[:, j],
                f"{m}_ci_high": high[:, j],
                f"{m}_cov": cov[:, j],
            }
        )
    return pd.DataFrame(columns, index=counts.index).reset_index()


# --- grouping runs into series -------------------------------------------------------------------
@dataclass
class Series:
    """Runs of one model with the same settings: the unit that statistics are taken over."""

    key: str
    model: str
    settings: dict
    run_indices: list[int] = field(default_factory=list)
    label: str = ""

    @property
    def n_runs(self) -> int:
        return len(self.run_indices)


def comparable_settings(run: dict) -> dict:
    """A run's settings without the fields that differ between repeats of the same test, plus the
    server configuration it was tagged with (`--meta config.max_num_seqs=256`)."""
    settings = run.get("settings") or {}
    # a concurrency run's open-loop options are unused (and absent from older runs), as is an
    # open-loop run's --levels; `rates` present or not keeps the two kinds in separate series
    unused = {"levels"} if settings.get("rates") else set(OPEN_LOOP_SETTINGS)
    out = {
        k: v
        for k, v in sorted(settings.items())
        if k not in RUN_SPECIFIC_SETTINGS and k not in unused
    }
    meta = run.get("meta") or {}
    out.update(
        {k: str(v) for k, v in sorted(meta.items()) if str(k).startswith(CONFIG_META_PREFIX)}
    )
    return out


def _fmt_setting(value) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def group_runs(runs: Sequence[dict]) -> list[Series]:
    """Series of runs (by model and comparable settings), in order of first appearance.

    Labels are the model id, plus the settings that tell apart series of the same model.
    """
    series: dict[str, Series] = {}
    for i, run in enumerate(runs):
        model = str(run.get("model") or (run.get("settings") or {}).get("model") or "unknown")
        settings = comparable_settings(run)
        key = json.dumps([model, settings], sort_keys=True, default=str)
        if key not in series:
            series[key] = Series(key=key, model=model, settings=settings)
        series[key].run_indices.append(i)
    out = list(series.values())
    for s in out:
        siblings = [o for o in out if o.model == s.model and o is not s]
        if not siblings:
            s.label = s.model
            continue
        differing = sorted(
            {
                k
                for o in siblings
                for k in set(s.settings) | set(o.settings)
                if s.settings.get(k) != o.settings.get(k)
            }
        )
        shown = ", ".join(f"{k}={_fmt_setting(s.settings.get(k))}" for k in differing[:3])
        s.label = f"{s.model} ({shown})" if shown else s.model
    labels = [s.label for s in out]
    for s in out:  # still ambiguous (more than three differing settings): number them
        if labels.count(s.label) > 1:
            s.label = f"{s.label} #{out.index(s) + 1}"
    return out
