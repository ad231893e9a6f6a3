"""Whether one level's requests prove an SLO (`analysis/decisions/slo_interval.py`): intervals
that cover the true figure as often as they say, and a level near its limit called what it is."""

from __future__ import annotations

import math

import numpy as np

from vllm_load.analysis.decisions.slo_interval import (
    FAILS,
    HOLDS,
    STRADDLES,
    LevelSample,
    hist_interval,
    judge_level,
    level_verdict,
    quantile_interval,
    share_interval,
)
from vllm_load.analysis.levels import group_percentiles
from vllm_load.slo import parse_slo


def test_the_quantile_interval_covers_the_true_p99_at_least_95_percent_of_the_time():
    rng = np.random.default_rng(3)
    true_p99 = -math.log(0.01)  # exponential(1)
    covered = 0
    for _ in range(400):
        low, high = quantile_interval(rng.exponential(1.0, 1000), 0.99)
        covered += low <= true_p99 <= high
    assert covered / 400 >= 0.94


def test_a_hundred_requests_cannot_prove_a_p99_below_its_limit():
    values = np.full(100, 0.1)
    low, high = quantile_interval(values, 0.99)
    assert low == 0.1 and high == math.inf  # 0.99^100 = 37 %: it may well be above
    low, high = quantile_interval(np.full(400, 0.1), 0.99)
    assert high == 0.1  # 0.99^400 < 2.5 %


def test_clopper_pearson_matches_its_known_values():
    low, high = share_interval(0, 100)
    assert low == 0.0 and abs(high - 0.0362) < 1e-3
    low, high = share_interval(5, 100)
    assert abs(low - 0.0164) < 1e-3 and abs(high - 0.1128) < 1e-3


def test_the_itl_interval_is_around_the_reports_nearest_rank_percentile():
    # 200 requests of 50 gaps in bucket 10; one in ten with 5 more in bucket 30: about 1 % of
    # the gaps are slow, so the p99 sits between the two and a resample of requests moves it
    counts = np.zeros((200, 40), np.int64)
    counts[:, 10] = 50
    counts[::10, 30] = 6
    estimate, low, high = hist_interval(counts, 99)
    again = hist_interval(counts, 99)
    assert again == (estimate, low, high)  # seeded: the same level, the same interval
    assert low <= estimate <= high and low < high


def _sample(ttft: np.ndarray, ok: np.ndarray | None = None) -> LevelSample:
    ok = np.ones(len(ttft), bool) if ok is None else ok
    return LevelSample(ok, ok.copy(), {"ttft": ttft})


def test_a_level_is_proven_only_when_its_interval_is_clear_of_the_limit():
    spec = parse_slo("ttft_p99<=500ms")
    rng = np.random.default_rng(5)
    far_below = judge_level(_sample(rng.uniform(0.1, 0.3, 2000)), spec, {})
    assert level_verdict(far_below) == HOLDS
    far_above = judge_level(_sample(rng.uniform(0.6, 0.9, 2000)), spec, {})
    assert level_verdict(far_above) == FAILS
    # p99 at the limit: its estimate meets it or not by chance; the interval says it cannot tell
    near = judge_level(_sample(rng.uniform(0.0, 0.5 / 0.99, 2000)), spec, {})
    assert level_verdict(near) == STRADDLES
    item = near[1]
    assert item.item == "ttft_p99<=500ms"
    values = rng.uniform(0.0, 1.0, 50)
    estimate = judge_level(_sample(values), spec, {})[1].estimate
    assert estimate == group_percentiles(values, np.zeros(50, np.int64), 1, (0.99,))[0, 0]


def test_failed_requests_count_against_the_attainment():
    spec = parse_slo(["ttft_p99<=500ms", "attainment>=90%"])
    ok = np.ones(1000, bool)
    ok[:300] = False  # 30 % failed, 10 % allowed
    items = judge_level(_sample(np.full(1000, 0.1), ok), spec, {})
    assert items[0].item.startswith("missed") and items[0].verdict == FAILS
    assert abs(items[0].ratio - 3.0) < 1e-9
    assert level_verdict(items) == FAILS
