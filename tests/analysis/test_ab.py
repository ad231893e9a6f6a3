"""The A/B statistics (`analysis.ab`) on hand-made data with known answers."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from vllm_load.analysis.decisions import ab, significance
from vllm_load.analysis.decisions.ab import BETTER, UNSURE, WORSE, RunLevels
from vllm_load.analysis.decisions.significance import BOOTSTRAP, NO_TEST, WELCH


def test_welch_matches_the_hand_computation():
    # means 2 and 5, variances 1 and 1, n = 3: se = sqrt(2/3), t = 3 / se, df = 4 exactly
    r = significance.welch([1, 2, 3], [4, 5, 6], alpha=0.05)
    se = math.sqrt(2 / 3)
    assert r.test == WELCH and r.diff == 3
    assert r.p == pytest.approx(2 * sps.t.sf(3 / se, 4))
    assert r.p == pytest.approx(sps.ttest_ind([4, 5, 6], [1, 2, 3], equal_var=False).pvalue)
    half = sps.t.ppf(0.975, 4) * se
    assert (r.ci_low, r.ci_high) == pytest.approx((3 - half, 3 + half))


def test_welch_needs_two_runs_a_side_and_says_so():
    r = significance.welch([1.0], [2.0, 3.0])
    assert r.test == NO_TEST and math.isnan(r.p) and "two runs" in r.note
    assert significance.welch([1, 1], [1, 1]).p == 1.0  # no spread, no difference
    assert significance.welch([1, 1], [2, 2]).p == 0.0  # no spread, a difference: exact
    assert significance.welch([1, np.nan, 3], [4, 5, 6]).diff == 3  # a missing figure is left out


def test_holm_step_down_with_untested_entries():
    adjusted = significance.holm([0.01, 0.04, 0.03, np.nan])
    # sorted 0.01, 0.03, 0.04 times 3, 2, 1 = 0.03, 0.06, 0.04, then made monotone
    assert adjusted[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(adjusted[3])
    assert significance.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_bootstrap_of_a_shift_is_exact_and_significant_and_seeded():
    rng = np.random.default_rng(1)
    a = rng.lognormal(0.0, 0.3, 400)
    b = a + 0.5  # every percentile moves by exactly 0.5
    r = significance.bootstrap_percentile_diff(a, b, 50, resamples=1000, seed=3)
    assert r.test == BOOTSTRAP and r.diff == pytest.approx(0.5)
    assert r.ci_low < 0.5 < r.ci_high
    assert r.p == pytest.approx(2 / 1001)  # no resample crosses 0: the smallest p it can give
    # a p99 of 400 requests is a few of them: the same shift is far less certain there
    tail = significance.bootstrap_percentile_diff(a, b, 99, resamples=1000, seed=3)
    assert tail.diff == pytest.approx(0.5) and tail.ci_high - tail.ci_low > r.ci_high - r.ci_low
    again = significance.bootstrap_percentile_diff(a, b, 50, resamples=1000, seed=3)
    assert (again.ci_low, again.ci_high) == (r.ci_low, r.ci_high)


def test_bootstrap_of_one_distribution_finds_nothing():
    rng = np.random.default_rng(2)
    a, b = rng.normal(1.0, 0.1, 500), rng.normal(1.0, 0.1, 500)
    r = significance.bootstrap_percentile_diff(a, b, 50, resamples=1000, seed=0)
    assert r.ci_low < 0 < r.ci_high and r.p > 0.05
    assert significance.mann_whitney(a, b) > 0.05
    assert significance.mann_whitney(a, b + 0.1) < 1e-6


def test_proportions_fisher_and_interval():
    r = significance.proportions(100, 100, 80, 100)
    assert r.diff == pytest.approx(-0.2)
    assert r.p == pytest.approx(sps.fisher_exact([[100, 0], [80, 20]]).pvalue)
    assert r.p < 1e-5 and r.ci_high < 0
    assert significance.proportions(50, 50, 50, 50).p == 1.0


def test_verdict_direction_follows_what_is_better():
    assert ab.verdict(10.0, 0.01, 0.05, higher_is_better=True) == BETTER
    assert ab.verdict(10.0, 0.01, 0.05, higher_is_better=False) == WORSE  # latency went up
    assert ab.verdict(-10.0, 0.01, 0.05, higher_is_better=False) == BETTER
    assert ab.verdict(10.0, 0.06, 0.05, higher_is_better=True) == UNSURE
    assert ab.verdict(10.0, math.nan, 0.05, higher_is_better=True) == UNSURE


def _run(run_id: str, levels: dict[int, float], speed: float, n: int = 200, seed: int = 0):
    """A hand-made run: per users level, throughput `tok` / speed and latencies * speed."""
    rng = np.random.default_rng(seed)
    rows, measured = [], []
    for i, (users, tok) in enumerate(levels.items()):
        ttft = 0.1 * speed * rng.lognormal(0, 0.2, n)
        e2e = 1.0 * speed * rng.lognormal(0, 0.1, n)
        measured.append(pd.DataFrame({"level": i, "ttft": ttft, "e2e": e2e, "tpot": np.nan}))
        rows.append(
            {
                "level": i,
                "users": float(users),
                "measured": n,
                "ok": n,
                "success_rate": 1.0,
                "total_tok_per_s": tok / speed,
                "output_tok_per_s": tok / speed / 10,
                "ttft_p50": np.percentile(ttft, 50),
                "ttft_p99": np.percentile(ttft, 99),
                "itl_p99": 0.02 * speed,
                "e2e_p50": np.percentile(e2e, 50),
                "e2e_p99": np.percentile(e2e, 99),
            }
        )
    return RunLevels(run_id, pd.DataFrame(rows), pd.concat(measured, ignore_index=True))


def test_compare_runs_across_runs_finds_the_faster_side_and_drops_unshared_levels():
    a = [
        _run(f"a{i}", {8: 1000, 64: 4000, 128: 4100}, s, seed=i)
        for i, s in enumerate([1.0, 1.02, 0.98])
    ]
    b = [
        _run(f"b{i}", {8: 1000, 64: 6000}, s, seed=10 + i) for i, s in enumerate([1.01, 0.99, 1.0])
    ]
    res = ab.compare_runs(a, b, alpha=0.05, resamples=300)
    assert res.levels == [8.0, 64.0] and res.only_a == [128.0] and res.only_b == []
    at64 = {c.figure.key: c for c in res.at(64.0)}
    tok = at64["total_tok_per_s"]
    assert tok.result.test == WELCH and tok.verdict == BETTER
    assert tok.a.mean == pytest.approx(4000 / np.mean([1.0, 1.02, 0.98]) * 1, rel=1e-3)
    assert tok.rel_diff == pytest.approx(0.5, abs=0.03)
    assert tok.p_adjusted >= tok.result.p  # Holm only ever raises a p-value
    assert tok.requests is None and math.isnan(tok.distribution_p)
    e2e = at64["e2e_p50"]
    assert e2e.result.test == WELCH and e2e.requests is not None  # the bootstrap rides along
    assert at64["success_rate"].verdict == UNSURE  # every request succeeded on both sides
    # the same throughput at 8 users on both sides: nothing to report
    assert {c.figure.key: c for c in res.at(8.0)}["total_tok_per_s"].verdict == UNSURE
    assert res.n_tested == 16


def test_one_run_a_side_gives_no_verdict_and_shows_requests_for_information():
    a = [_run("a", {16: 1000}, 1.0, n=400, seed=1)]
    b = [_run("b", {16: 1200}, 1.5, n=400, seed=2)]  # latencies 50 % higher
    res = ab.compare_runs(a, b, resamples=500)
    got = {c.figure.key: c for c in res.at(16.0)}
    assert got["total_tok_per_s"].result.test == NO_TEST
    assert (
        got["total_tok_per_s"].verdict == "no test possible at n = 1"
        and "impossible" in got["total_tok_per_s"].result.note
    )
    assert got["itl_p99"].result.test == NO_TEST and got["itl_p99"].requests is None
    # latencies 50 % higher: the requests of these two runs say so, but decide nothing
    e2e = got["e2e_p50"]
    assert e2e.result.test == NO_TEST and "no verdict" in e2e.result.note
    # never "no significant difference": no test was made
    assert {c.verdict for c in res.comparisons} == {"no test possible at n = 1"}
    assert e2e.requests is not None and e2e.requests.test == BOOTSTRAP
    assert e2e.requests.ci_low > 0 and e2e.requests.p < 0.05
    assert got["success_rate"].requests is not None
    assert got["success_rate"].requests.test == significance.FISHER
    assert res.n_tested == 0


def test_correction_families_and_fail_if_worse():
    a = [_run(f"a{i}", {8: 1000, 64: 4000}, s, seed=i) for i, s in enumerate([1.0, 1.02, 0.98])]
    b = [
        _run(f"b{i}", {8: 1000, 64: 4000}, 1.3 * s, seed=9 + i)
        for i, s in enumerate([1.0, 1.01, 0.99])
    ]
    per_level = ab.compare_runs(a, b, correction="level", resamples=200)
    overall = ab.compare_runs(a, b, correction="all", resamples=200)
    raw = ab.compare_runs(a, b, correction="none", resamples=200)
    for x, y, z in zip(per_level.comparisons, overall.comparisons, raw.comparisons):
        assert z.p_adjusted == z.result.p
        assert x.p_adjusted >= z.p_adjusted and y.p_adjusted >= x.p_adjusted
    worse = ab.worse_by(per_level, 0.05)
    assert worse and {c.figure.key for c in worse} >= {"total_tok_per_s", "e2e_p50"}
    assert ab.worse_by(per_level, 0.5) == []  # 30 % worse is not worse by more than 50 %
    with pytest.raises(ValueError):
        ab.compare_runs(a, b, correction="bonferroni")


@pytest.mark.parametrize("q", [50, 90, 99, 100])
def test_order_statistic_bootstrap_matches_resampling_by_brute_force(q):
    """The bootstrap draws each resample's percentile from order-statistic laws instead of
    building the resample: its distribution must be that of resampling outright."""
    rng = np.random.default_rng(5)
    x = rng.lognormal(0.0, 0.5, 300)
    fast = significance._resampled_percentiles(x, q, 20_000, np.random.default_rng(1))
    idx = np.random.default_rng(2).integers(0, x.size, size=(20_000, x.size))
    slow = np.percentile(x[idx], q, axis=1)
    for level in (0.025, 0.25, 0.5, 0.75, 0.975):
        # quantiles of two samples of 20,000 draws: equal to within their Monte Carlo error
        assert np.quantile(fast, level) == pytest.approx(np.quantile(slow, level), rel=0.03)
    assert fast.std() == pytest.approx(slow.std(), rel=0.05)
