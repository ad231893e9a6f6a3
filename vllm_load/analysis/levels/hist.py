"""Vectorised reading of the `itl_hist` column and percentiles of merged log histograms.

`vllm_load.rundir.histogram.LogHistogram` is the reference (one request at a time); this module
does the same over a whole column at once: every `bucket:count;...` string of the selected
rows is parsed in one pass by numpy and summed into a dense (groups x buckets) count matrix.
Percentiles follow `LogHistogram.percentile` exactly (nearest rank).
"""

from __future__ import annotations

import warnings
from itertools import compress, repeat

import numpy as np
import pandas as pd

from ...rundir.histogram import BASE_SECONDS, GROWTH


def bucket_values(n_buckets: int) -> np.ndarray:
    """Seconds that buckets 0..n_buckets-1 stand for."""
    return BASE_SECONDS * GROWTH ** np.arange(n_buckets, dtype=np.float64)


#: rows parsed per pass: bounds the memory of the joined text and the parsed numbers
CHUNK_ROWS = 100_000


def merge_hist_column(texts: pd.Series, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Sum the histograms in `texts` per group into an int64 matrix of shape (n_groups, buckets).

    `groups[i]` (0..n_groups-1) is the group of row i. Empty or missing strings add nothing.
    Raises ValueError on a malformed histogram.
    """
    groups = np.asarray(groups, dtype=np.int64)
    if len(texts) != len(groups):
        raise ValueError("texts and groups differ in length")
    parts = [
        _merge_chunk(texts.iloc[i : i + CHUNK_ROWS], groups[i : i + CHUNK_ROWS], n_groups)
        for i in range(0, len(texts), CHUNK_ROWS)
    ]
    if not parts:
        return np.zeros((n_groups, 1), dtype=np.int64)
    return np.sum(pad_columns(parts), axis=0)


def _merge_chunk(texts: pd.Series, groups: np.ndarray, n_groups: int) -> np.ndarray:
    # plain lists and C-level maps: a pandas string method calls Python once per row
    values = [t if isinstance(t, str) else "" for t in texts.astype(object)]
    nonempty = np.fromiter(map(bool, values), dtype=bool, count=len(values))
    if not nonempty.any():
        return np.zeros((n_groups, 1), dtype=np.int64)
    kept = list(compress(values, nonempty))
    pairs_per_row = np.fromiter(map(str.count, kept, repeat(";")), dtype=np.int64) + 1
    joined = ";".join(kept).replace(";", " ").replace(":", " ")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warns (and stops) at the first unparsable character
        try:
            numbers = np.fromstring(joined, dtype=np.int64, sep=" ")
        except (ValueError, DeprecationWarning) as e:
            raise ValueError(f"malformed itl_hist value: {e}") from e
    if numbers.size != 2 * int(pairs_per_row.sum()):
        raise ValueError("malformed itl_hist value (expected bucket:count;bucket:count...)")
    buckets = numbers[0::2]
    counts = numbers[1::2]
    if buckets.size and (buckets.min() < 0 or counts.min() < 0):
        raise ValueError("malformed itl_hist value (negative bucket or count)")
    row_groups = np.repeat(groups[nonempty], pairs_per_row)
    width = int(buckets.max()) + 1
    flat = np.bincount(row_groups * width + buckets, weights=counts, minlength=n_groups * width)
    return np.rint(flat).astype(np.int64).reshape(n_groups, width)


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
