"""One run's figures per level, each over the level's measured window.

- `measure`: the level's figures; `window`: its measured requests (warm-up W, then K, by start)
  and window; `recorded_levels`: the levels a run recorded, as steps.csv and its requests give
  them.
- `window_rates`: throughput inside a window, independent of where requests happen to finish;
  `spans`: the successful requests' lives and tokens it weighs, from a requests frame.
- `hist`: merged ITL histograms (`run_format.stream_columns` parses the column) and their
  percentiles.
- `rates`: open-loop levels: the rate offered and achieved, queueing, whether the target kept up.
- `breakdown`: per persona, per turn of a conversation, conversations as wholes.
- `client_side`: the client's own health per level; `server_side`: `/metrics` against the client.
- `gpu`: the GPUs' own figures per level (--gpu-metrics, --gpu-nvml), joules per output token.
- `timeline`: a run's work over time (tok/s and requests in flight per time bin).
- `table`: the per-level text table `vllm-load run` prints, and error counts.
- `locust_csv`: levels and their figures from plain Locust CSVs (`--csv-full-history`), for a
  report on any locustfile's test.

One module per per-level concern keeps this package over the ~12 modules a folder holds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...run_format.records import CANCELLED


def as_floats(series: pd.Series) -> np.ndarray:
    """A column as float64, anything unparsable (or missing) as NaN."""
    if series.dtype == np.float64 or isinstance(series.dtype, pd.Int64Dtype):
        # what requests.csv's columns are read as: no parse (a million rows, ~8 ms a column)
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def cancelled(requests: pd.DataFrame) -> np.ndarray:
    """Per request, whether the client closed it on purpose (--cancel-share: error `cancelled`)."""
    if "error" not in requests or not len(requests):
        return np.zeros(len(requests), dtype=bool)
    return (requests["error"] == CANCELLED).fillna(False).to_numpy(dtype=bool)


def failed(requests: pd.DataFrame) -> np.ndarray:
    """Per request, whether it failed: it did not succeed, and the client did not close it on
    purpose (a cancelled request is neither a success nor a failure)."""
    return (as_floats(requests["ok"]) != 1) & ~cancelled(requests)


def group_percentiles(
    values: np.ndarray, groups: np.ndarray, n_groups: int, fractions: tuple[float, ...]
) -> np.ndarray:
    """Per group (0 .. n_groups - 1), the `fractions` quantiles of its non-NaN values, shape
    (n_groups, len(fractions)); NaN where a group has none. The one percentile method of every
    per-request figure: the level tables' (`measure`, `rates`), a replay's windows' and the
    SLOs' (`decisions.goodput`) all come from here. Linear interpolation between the closest ranks (numpy's and pandas' default,
    Hyndman and Fan's type 7); +inf values (goodput's failures) sort last, and a quantile that reaches one
    is inf."""
    out = np.full((n_groups, len(fractions)), np.nan)
    keep = ~np.isnan(values)
    if not keep.any():
        return out
    v, g = values[keep], groups[keep]
    order = np.lexsort((v, g))
    v, g = v[order], g[order]
    counts = np.bincount(g, minlength=n_groups)
    has = counts > 0
    n = counts[has]
    first = (np.cumsum(counts) - counts)[has]
    for j, q in enumerate(fractions):
        h = (n - 1) * q
        lo = np.floor(h).astype(np.int64)
        t = h - lo
        a, b = v[first + lo], v[first + np.minimum(lo + 1, n - 1)]
        with np.errstate(invalid="ignore"):
            lerp = a + (b - a) * t  # as pandas' quantile, the tables' before: the same bits
        out[has, j] = np.where((t == 0) | (a == b), a, np.where(np.isinf(b), b, lerp))
    return out
