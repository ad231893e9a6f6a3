"""vLLM's /metrics counters over a time window, from hold.py's metrics.csv (one scrape a second).

`window(csv, t0, t1)` interpolates every counter linearly between the scrapes around t0 and t1
(wall time, s) and returns the increases and the window length; counters are cumulative, so the
increase over [t0, t1] is what the server counted in it, up to a second's resolution at each edge.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def load(path: str) -> pd.DataFrame:
    return pd.read_csv(path).sort_values("ts").reset_index(drop=True)


def at(frame: pd.DataFrame, t: float) -> dict[str, float]:
    ts = frame["ts"].to_numpy()
    return {c: float(np.interp(t, ts, frame[c].to_numpy(dtype=float))) for c in frame.columns}


def window(frame: pd.DataFrame, t0: float, t1: float) -> dict[str, float]:
    a, b = at(frame, t0), at(frame, t1)
    out = {c: b[c] - a[c] for c in frame.columns if c != "ts"}
    out["seconds"] = t1 - t0
    return out
