"""Vectorised reading of the `itl_hist` column and percentiles of merged log histograms.

`vllm_load.run_format.histogram.LogHistogram` is the reference (one request at a time); this module
does the same over a whole column at once: the selected rows' histograms (parsed once,
`run_format.stream_columns.ItlHistograms`) are summed into a dense (groups x buckets) count matrix.
Percentiles follow `LogHistogram.percentile` exactly (nearest rank).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...run_format.histogram import BASE_SECONDS, GROWTH
from ...run_format.stream_columns import ItlHistograms


def bucket_values(n_buckets: int) -> np.ndarray:
    """Seconds that buckets 0..n_buckets-1 stand for."""
    return BASE_SECONDS * GROWTH ** np.arange(n_buckets, dtype=np.float64)


def merge_hist_column(texts: pd.Series, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Sum the histograms in `texts` per group into an int64 matrix of shape (n_groups, buckets).

    `groups[i]` (0..n_groups-1) is the group of row i. Empty or missing strings add nothing.
    Raises ValueError on a malformed histogram. (A run's loader parses the column once:
    `RunData.streams.itl.merge` is this without the parse.)
    """
    groups = np.asarray(groups, dtype=np.int64)
    if len(texts) != len(groups):
        raise ValueError("texts and groups differ in length")
    return ItlHistograms.parse(texts).merge(np.arange(len(groups)), groups, n_groups)


def hist_percentiles(counts: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """Nearest-rank percentiles (0..100) in seconds per row of a count matrix; NaN for empty rows."""
    counts = np.atleast_2d(counts)
    totals = counts.sum(axis=1)
    cum = np.cumsum(counts, axis=1)
    values = bucket_values(counts.shape[1])
    out = np.full((counts.shape[0], len(quantiles)), np.nan)
    for j, q in enumerate(quantiles):
        rank = np.maximum(1, np.ceil(q / 100.0 * totals))
        idx = (cum < rank[:, None]).sum(axis=1)
        idx = np.minimum(idx, counts.shape[1] - 1)
        out[:, j] = np.where(totals > 0, values[idx], np.nan)
    return out


def pad_columns(matrices: list[np.ndarray]) -> list[np.ndarray]:
    """The same count matrices, zero-padded to a common number of buckets so they can be added."""
    if not matrices:
        return []
    width = max(m.shape[-1] for m in matrices)
    return [np.pad(m, [(0, 0)] * (m.ndim - 1) + [(0, width - m.shape[-1])]) for m in matrices]
