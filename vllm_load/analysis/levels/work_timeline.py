"""A run's work over time, for its timeline chart: total tok/s and requests in flight per time
bin, each request's tokens spread evenly over its duration."""

from __future__ import annotations

import numpy as np
import pandas as pd


def work_timeline(requests: pd.DataFrame, bin_s: float | None = None) -> pd.DataFrame:
    """Total tok/s and requests in flight per time bin, from successful requests, vectorised.

    Each request's tokens are spread evenly over its duration, so the curve shows the rate
    at which the server was working rather than spikes when batches of requests finish.
    """
    start = pd.to_numeric(requests["start_ts"], errors="coerce").to_numpy(np.float64)
    end = pd.to_numeric(requests["end_ts"], errors="coerce").to_numpy(np.float64)
    ok = (
        (pd.to_numeric(requests["ok"], errors="coerce").to_numpy(np.float64) == 1)
        & ~np.isnan(start)
        & ~np.isnan(end)
    )
    if not ok.any():
        return pd.DataFrame({"t": [], "tok_per_s": [], "in_flight": []})
    t0, t1 = np.nanmin(start[ok]), np.nanmax(end[ok])
    span = max(t1 - t0, 1.0)
    if bin_s is None:
        bin_s = max(0.25, span / 400.0)  # at most ~400 points
    n_bins = int(span // bin_s) + 2
    tokens = np.zeros(len(requests))
    for col, fallback in (
        ("prompt_tokens", "requested_prompt_tokens"),
        ("completion_tokens", "requested_completion_tokens"),
    ):
        used = pd.to_numeric(requests[col], errors="coerce").to_numpy(np.float64)
        asked = pd.to_numeric(requests[fallback], errors="coerce").to_numpy(np.float64)
        tokens += np.nan_to_num(np.where(np.isnan(used), asked, used))
    # sampled at bin centres c_i = t0 + (i + 0.5) * bin_s: a request counts where start <= c_i < end
    first = np.ceil((start[ok] - t0) / bin_s - 0.5).astype(np.int64)
    last = np.ceil((end[ok] - t0) / bin_s - 0.5).astype(np.int64) - 1
    keep = last >= first
    first, last = first[keep], last[keep]
    duration = np.maximum(end[ok] - start[ok], 1e-9)
    rate = (tokens[ok] / duration)[keep]
    # difference arrays: a request adds its rate (and one in flight) from its first sample to its last
    delta_rate = np.bincount(first, weights=rate, minlength=n_bins + 1) - np.bincount(
        last + 1, weights=rate, minlength=n_bins + 1
    )
    delta_n = np.bincount(first, minlength=n_bins + 1) - np.bincount(last + 1, minlength=n_bins + 1)
    return pd.DataFrame(
        {
            "t": t0 + (np.arange(n_bins) + 0.5) * bin_s,
            "tok_per_s": np.cumsum(delta_rate)[:n_bins],
            "in_flight": np.cumsum(delta_n)[:n_bins],
        }
    )
