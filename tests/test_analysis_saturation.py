"""Saturation point, scaling, recommendations and findings on constructed curves."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from vllm_load.analysis.saturation import SaturationRule, analyse, findings, scaling_ratio
from vllm_load.analysis.stats import summarize, t_quantile


def curve(users, tok, p99=None, n=1, half=None, **extra):
    """A curve as `stats.aggregate` would give it: means, and std and intervals when n >= 2."""
    tok = np.asarray(tok, dtype=float)
    half = np.asarray(half if half is not None else [math.nan] * len(tok), dtype=float)
    std = half * math.sqrt(n) / t_quantile(n) if n >= 2 else np.full(len(tok), math.nan)
    frame = pd.DataFrame({
        "users": users,
        "total_tok_per_s_mean": tok,
        "total_tok_per_s_std": std,
        "total_tok_per_s_n": n,
        "total_tok_per_s_ci_low": tok - half,
        "total_tok_per_s_ci_high": tok + half,
        "total_tok_per_s_cov": math.nan,
        "e2e_p99_mean": p99 if p99 is not None else [1.0] * len(tok),
        "ttft_p99_mean": [0.1] * len(tok),
        "success_rate_mean": 1.0,
        "achieved_concurrency_mean": np.asarray(users, dtype=float),
    })
    for k, v in extra.items():
        frame[k] = v
    return frame


QWEN_USERS = [10, 50, 100, 200, 500, 750, 1000]
QWEN_TOK = [1902, 6961, 11198, 11193, 11209, 11208, 11218]
QWEN_P99 = [9.24, 12.50, 15.46, 15.46, 15.44, 15.44, 15.43]


def test_flat_after_100_saturates_at_100():
    sat = analyse(curve(QWEN_USERS, QWEN_TOK, QWEN_P99))
    assert sat.saturated and sat.saturation.users == 100
    assert sat.peak.users == 1000 and sat.peak.tok_per_s == 11218
    assert sat.peak.e2e_p99 == 15.43
    assert sat.status == "~100 concurrent"
    assert sat.scaling.from_users == 10 and sat.scaling.to_users == 200 and not sat.scaling.substituted
    assert sat.scaling.ratio == pytest.approx(11193 / 1902)  # 5.9x as in the seed table
    cost = sat.past_saturation
    assert (cost.from_users, cost.to_users) == (100, 1000)
    assert cost.e2e_p99_added == pytest.approx(15.43 - 15.46)
    assert cost.throughput_change == pytest.approx(11218 / 11198 - 1)
    recs = {r.use_case: r.point.users for r in sat.recommendations}
    # low latency: p99 within 10 % of the best (9.24 -> 10.16): only 10; balanced: >= 50 % of peak
    assert recs == {"Low latency": 10, "Balanced": 50, "High throughput": 100}
    text = " ".join(findings(curve(QWEN_USERS, QWEN_TOK, QWEN_P99), sat, n_runs=1))
    assert "saturates at ~100 concurrent" in text and "adds no throughput" in text
    assert "scales 5.9x from 10 to 200" in text
    assert "Single run" in text


def test_still_rising_is_not_saturated():
    c = curve([10, 50, 100, 200], [1000, 4000, 7000, 9000], [1.0, 1.2, 1.5, 2.0])
    sat = analyse(c)
    assert not sat.saturated
    assert sat.status == "not saturated within the tested levels"
    assert sat.peak.users == 200 and sat.saturation.users == 200
    assert sat.past_saturation is None
    # balanced: the first level with >= 50 % of 9000 is 100 (50 has 4000)
    assert [r.point.users for r in sat.recommendations] == [10, 100, 200]
    text = " ".join(findings(c, sat, n_runs=1))
    assert "not saturated within the tested levels" in text
    assert "+29% over 100" in text  # 9000 / 7000 - 1


def test_overlapping_intervals_do_not_make_a_level_the_peak():
    # n = 3: 100 is 5.9 % under the peak at 200; its interval overlaps the peak's, which the old rule took
    # for equality. The point is from the means alone, with or without intervals.
    users = [10, 50, 100, 200, 500, 1000]
    tok = [2000, 6000, 9500, 10100, 9400, 10000]
    half = [100, 300, 900, 1000, 1200, 800]
    sat = analyse(curve(users, tok, n=3, half=half))
    assert sat.peak.users == 200
    assert sat.saturated and sat.saturation.users == 200  # 9500 < 0.95 * 10100
    assert analyse(curve(users, tok, n=1)).saturation.users == 200
    # ... but the runs cannot tell 100 from 200 apart: undetermined, 100 and 200 plausible
    d = sat.decision
    assert d.state == "undetermined" and d.n == 3 and d.plausible == (100, 200)


def test_noisy_single_runs_with_a_dip_after_the_knee():
    sat = analyse(curve([10, 50, 100, 200, 500, 1000], [2000, 6000, 9800, 9300, 10100, 9700]))
    assert sat.peak.users == 500 and sat.saturation.users == 100 and sat.saturated


def test_intervals_from_real_summaries():
    runs = {10: [1900, 1880, 1925], 50: [6900, 7050, 6980], 100: [11150, 11300, 11190], 200: [11210, 11250, 11260]}
    rows = []
    for users, values in runs.items():
        s = summarize(values)
        rows.append({"users": users, "total_tok_per_s_mean": s.mean, "total_tok_per_s_n": s.n,
                     "total_tok_per_s_ci_low": s.ci_low, "total_tok_per_s_ci_high": s.ci_high,
                     "total_tok_per_s_cov": s.cov, "e2e_p99_mean": 1.0})
    sat = analyse(pd.DataFrame(rows))
    assert sat.saturation.users == 100 and sat.peak.users == 200 and sat.peak.n == 3


def test_scaling_uses_nearest_levels_and_says_so():
    c = curve([2, 8, 16, 32, 48], [100, 380, 700, 900, 910])
    sc = scaling_ratio(c, 10, 200)
    assert (sc.from_users, sc.to_users) == (8, 48) and sc.substituted
    assert sc.ratio == pytest.approx(910 / 380)
    assert "10→200 was not tested; nearest tested levels 8→48 used" == sc.note()
    assert scaling_ratio(curve([10], [5.0]), 10, 200) is None


def test_latency_cost_and_failures_in_findings():
    c = curve([10, 50, 100, 200], [1000, 3000, 3100, 3050], [1.0, 2.0, 2.5, 5.0])
    c["ttft_p99_mean"] = [0.1, 0.3, 0.5, 2.6]
    c["success_rate_mean"] = [1.0, 1.0, 0.995, 1.0]
    c["achieved_concurrency_mean"] = [10, 50, 100, 150]
    sat = analyse(c)
    assert sat.saturation.users == 50
    assert sat.past_saturation.e2e_p99_change == pytest.approx(1.5)
    text = " ".join(findings(c, sat, n_runs=1))
    assert "more concurrency only adds latency (p99 E2E 2.00 s at 50 → 5.00 s at 200, +150%" in text
    assert "TTFT p99 grows 26.0x" in text
    # 0.5 % failed: kept, and said so
    assert "Level 100 concurrent is kept although 0.5% of its measured requests failed (at most the 1% allowed)" in text
    assert "100% success" not in text
    assert "Achieved concurrency fell short" in text and "first at 200 (150.0" in text


def test_rule_is_described_and_configurable():
    rule = SaturationRule(tolerance=0.01)
    assert "is within 1% of the peak mean; the runs' spread never moves it" in rule.describe()
    assert "overlap" not in rule.describe().replace("overlapping confidence intervals are not evidence", "")
    assert "more than 1% of the measured requests failed in any run is left out" in rule.describe_failures()
    sat = analyse(curve(QWEN_USERS, QWEN_TOK), rule)
    assert sat.saturation.users == 100  # 11198 >= 0.99 * 11218
    sat = analyse(curve(QWEN_USERS, QWEN_TOK), SaturationRule(tolerance=0.0001))
    assert sat.saturation.users == 1000 and not sat.saturated
