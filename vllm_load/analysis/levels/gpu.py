"""The GPUs' own figures per level, over each level's measured window, from gpu_metrics.csv.

Each GPU's readings form a series (one per source, host and GPU; a GPU two sources read, known by
its UUID, counts once, from the first). Over the window [`window_start`, `window_end`]:

- utilisation and SM activity: each GPU's gauge averaged over the window (linear between
  readings, `server_side.gauge_mean`), then over the GPUs; recorded as shares (0..1);
- memory used: the fullest GPU's highest reading in the window (or at its edges);
- power: each GPU's mean over the window, summed over the GPUs;
- energy: each GPU's energy counter interpolated at the window's edges (`counter_delta`)
  between the readings where it changed (dcgm-exporter refreshes its fields every 30 s unless
  started with `-c`: scraped every second, the counter repeats a stale value 29 times, and only
  the first reading of each value is dated right), the growth summed over the GPUs, in J; NaN
  when a GPU's readings do not cover the window, its counter went back (a reset), or the window
  is shorter than `MIN_UPDATES` of the counter's own update interval;
- joules per output token and per request: that energy over the output tokens and requests done
  inside the same window (the level's `output_tok_per_s` and `req_per_s` times `window_s`:
  `window_rates`, the work every successful request did inside the window).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...figures import gpu_columns
from ...run_format.gpu_metrics import source_line
from ...server.dcgm import ENERGY, FB_USED, GPU_UTIL, POWER, SM_ACTIVE
from ..frame_records import row_dicts
from .scrapes import counter_delta, gauge_mean

#: a window must span this many updates of the energy counter for its growth to be read
MIN_UPDATES = 4


def gpu_series(gpu: pd.DataFrame) -> list[pd.DataFrame]:
    """One wide frame (`ts` and a column per figure) per GPU, each GPU once."""
    out, seen = [], set()
    keys = ["source", "hostname", "gpu", "uuid"]
    frame = gpu.assign(**{k: gpu[k].fillna("") for k in keys})
    for (source, host, index, uuid), rows in frame.groupby(keys, sort=False):
        identity = (uuid, index) if uuid else (source, host, index)
        if identity in seen:
            continue
        seen.add(identity)
        wide = rows.pivot_table(index="ts", columns="figure", values="value", aggfunc="last")
        out.append(wide.reset_index().rename_axis(columns=None))
    return out


def counter_updates(series: pd.DataFrame, figure: str = ENERGY) -> pd.DataFrame:
    """A counter's readings where it changed (and its first): a GPU under power never uses
    no energy, so a reading equal to the one before is the exporter's stale value, which would
    turn the counter into a staircase of steps read at the wrong times."""
    if figure not in series:
        return pd.DataFrame({"ts": [], figure: []})
    values = series[["ts", figure]].dropna()
    v = values[figure].to_numpy(np.float64)
    fresh = np.concatenate([[True], np.diff(v) != 0]) if len(v) else np.array([], dtype=bool)
    return values[fresh].reset_index(drop=True)


def update_interval(updates: pd.DataFrame) -> float:
    """The median time between a counter's changes (NaN with fewer than three readings)."""
    t = updates["ts"].to_numpy(np.float64)
    return float(np.median(np.diff(t))) if len(t) >= 3 else np.nan


def _energy(series: list[pd.DataFrame], a: float, b: float) -> float:
    """Joules the GPUs used over [a, b] (NaN where some GPU's counter cannot say)."""
    total = 0.0
    for s in series:
        updates = counter_updates(s)
        delta = counter_delta(updates, ENERGY, a, b)
        step = update_interval(updates)
        if not delta >= 0 or not (b - a >= MIN_UPDATES * step):
            return np.nan
        total += delta / 1000.0  # mJ
    return total


def _highest(s: pd.DataFrame, figure: str, a: float, b: float) -> float:
    if figure not in s:
        return np.nan
    values = s[["ts", figure]].dropna()
    t, v = values["ts"].to_numpy(np.float64), values[figure].to_numpy(np.float64)
    if not len(t) or b < t[0] or a > t[-1]:
        return np.nan
    edges = np.interp([max(a, t[0]), min(b, t[-1])], t, v)
    return float(max(edges.max(), v[(t >= a) & (t <= b)].max(initial=-np.inf)))


def _mean_over(series: list[pd.DataFrame], figure: str, a: float, b: float) -> np.ndarray:
    return np.array([gauge_mean(s, figure, a, b) if figure in s else np.nan for s in series])


def level_gpu_figures(gpu: pd.DataFrame | None, metrics: pd.DataFrame) -> pd.DataFrame:
    """Per level of `metrics` (its `level`, window and throughput): the `figures.GPU` columns,
    NaN where the run recorded no GPU (or the window no reading)."""
    out = pd.DataFrame({"level": metrics["level"].to_numpy()})
    for column in gpu_columns():
        out[column] = np.nan
    if gpu is None or not len(gpu) or not len(metrics):
        return out
    series = gpu_series(gpu)
    rows: list[dict[str, float]] = []
    for rec in row_dicts(metrics):
        a, b = float(rec["window_start"]), float(rec["window_end"])
        if not (a == a and b == b and b > a):
            rows.append({})
            continue
        util, sm = _mean_over(series, GPU_UTIL, a, b), _mean_over(series, SM_ACTIVE, a, b)
        power = _mean_over(series, POWER, a, b)
        energy = _energy(series, a, b)
        window = b - a
        tokens = float(rec["output_tok_per_s"]) * window
        requests = float(rec["req_per_s"]) * window
        rows.append(
            {
                "gpu_util_mean": _nanmean(util) / 100.0,
                "gpu_sm_active_mean": _nanmean(sm),
                "gpu_memory_used_max": _nanmax([_highest(s, FB_USED, a, b) for s in series]),
                "gpu_power_mean": float(power.sum()) if np.isfinite(power).all() else np.nan,
                "gpu_energy_j": energy,
                "gpu_j_per_output_token": energy / tokens if tokens > 0 else np.nan,
                "gpu_j_per_request": energy / requests if requests > 0 else np.nan,
            }
        )
    figures = pd.DataFrame(rows, columns=list(gpu_columns()), dtype=np.float64)
    for column in gpu_columns():
        out[column] = figures[column].to_numpy()
    return out


def _nanmean(values) -> float:
    values = np.asarray(values, dtype=np.float64)
    return float(np.nanmean(values)) if np.isfinite(values).any() else np.nan


def _nanmax(values) -> float:
    values = np.asarray(values, dtype=np.float64)
    return float(np.nanmax(values)) if np.isfinite(values).any() else np.nan


def with_gpu(metrics: pd.DataFrame, gpu: pd.DataFrame | None) -> pd.DataFrame:
    """`measure_levels`'s per-level table with its GPU columns filled from the run's
    gpu_metrics.csv (`RunData.gpu`; left NaN without one)."""
    if gpu is None:
        return metrics
    figures = level_gpu_figures(gpu, metrics)
    out = metrics.copy()
    for column in gpu_columns():
        out[column] = figures[column].to_numpy()
    return out


def gpu_findings(run_id: str, run: dict, metrics: pd.DataFrame) -> list[str]:
    """What a report must say about a run's GPU figures: where they came from (simulated ones
    named as such), and the levels whose energy could not be read."""
    line = source_line(run)
    if not line:
        return []
    out = [f"Run {run_id}: {line}."]
    power = pd.to_numeric(metrics["gpu_power_mean"], errors="coerce")
    energy = pd.to_numeric(metrics["gpu_energy_j"], errors="coerce")
    unread = metrics.loc[power.notna() & energy.isna(), "value"]
    if len(unread):
        levels = ", ".join(f"{u:,.4g}" for u in unread)
        out.append(
            f"Run {run_id}: GPU energy (and joules per token) not read at {levels}: the energy "
            "counter's readings did not cover the measured window, or it changed fewer than "
            f"{MIN_UPDATES} times within it (dcgm-exporter updates every 30 s unless started "
            "with -c 1000; more requests per level make longer windows)."
        )
    return out
