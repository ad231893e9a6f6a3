"""Mean, std, t-interval and CoV across runs, against hand arithmetic and scipy's t-quantile."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest
from scipy import stats as sps

from vllm_load.analysis.series.stats import aggregate, group_runs, summarize, t_quantile


def test_summary_of_three_runs_by_hand():
    s = summarize([10.0, 12.0, 14.0])
    assert s.n == 3 and s.mean == 12.0
    assert s.std == pytest.approx(2.0)  # sqrt(((-2)^2 + 0 + 2^2) / 2)
    t = sps.t.ppf(0.975, 2)
    assert t == pytest.approx(4.302652729911275)
    half = t * 2.0 / math.sqrt(3)  # 4.9683...
    assert s.ci_low == pytest.approx(12.0 - half) and s.ci_high == pytest.approx(12.0 + half)
    assert s.half_width == pytest.approx(4.96827, rel=1e-5)
    assert s.cov == pytest.approx(2.0 / 12.0)


def test_five_runs_use_df_four():
    values = [11218, 11190, 11250, 11205, 11230]
    s = summarize(values)
    mean = sum(values) / 5
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / 4)
    assert (s.mean, s.std) == (pytest.approx(mean), pytest.approx(std))
    assert s.ci_high - s.mean == pytest.approx(sps.t.ppf(0.975, 4) * std / math.sqrt(5))
    assert t_quantile(5) == pytest.approx(2.7764451051977987)


def test_single_run_has_no_interval():
    s = summarize([5.0, float("nan")])
    assert s.n == 1 and s.mean == 5.0
    assert (
        math.isnan(s.std) and math.isnan(s.ci_low) and math.isnan(s.ci_high) and math.isnan(s.cov)
    )
    assert summarize([]).n == 0


def test_aggregate_matches_summarize_per_group():
    frame = pd.DataFrame(
        {
            "series": ["a"] * 5 + ["b"],
            "users": [10, 10, 10, 50, 50, 10],
            "tok": [100.0, 110.0, 90.0, 400.0, 420.0, 7.0],
        }
    )
    agg = aggregate(frame, ["series", "users"], ["tok"]).set_index(["series", "users"])
    for key, values in {("a", 10): [100, 110, 90], ("a", 50): [400, 420], ("b", 10): [7]}.items():
        s = summarize(values)
        row = agg.loc[key]
        assert row.tok_n == s.n and row.tok_mean == pytest.approx(s.mean)
        for name in ("std", "ci_low", "ci_high", "cov"):
            expected = getattr(s, name)
            got = row[f"tok_{name}"]
            assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)
    assert math.isnan(agg.loc[("b", 10)].tok_ci_low)


def test_runs_grouped_by_model_and_settings():
    base = {
        "levels": [10, 50],
        "input_tokens": 2048,
        "run_dir": "x",
        "out": "runs",
        "meta": {"gpus": "8"},
    }
    runs = [
        {"model": "A", "settings": {**base, "run_dir": "r1"}},
        {"model": "B", "settings": base},
        {"model": "A", "settings": {**base, "run_dir": "r2", "meta": {"note": "other"}}},
        {"model": "A", "settings": {**base, "input_tokens": 512}},
    ]
    series = group_runs(runs)
    assert [s.run_indices for s in series] == [[0, 2], [1], [3]]
    assert series[0].label == "A (input_tokens=2048)"
    assert series[1].label == "B"
    assert series[2].label == "A (input_tokens=512)"


def test_config_meta_separates_series_and_labels_them():
    from vllm_load.analysis.series.stats import group_runs

    def run(seqs, other="x"):
        return {
            "model": "m",
            "settings": {"levels": [1]},
            "meta": {"config.max_num_seqs": seqs, "note": other},
        }

    series = group_runs([run(8), run(32), run(8, other="y")])
    assert [s.run_indices for s in series] == [[0, 2], [1]]
    assert [s.label for s in series] == ["m (config.max_num_seqs=8)", "m (config.max_num_seqs=32)"]


def test_t_quantile_is_scipy_stats_t_ppf_without_importing_scipy_stats():
    """The interval's quantile is `scipy.stats.t.ppf` to the bit, but a report that computes
    only t-intervals must not pay ~0.9 s of CPU importing `scipy.stats` for it."""
    import numpy as np

    n = np.array([0, 1, 2, 3, 5, 10, 30, 1000])
    want = sps.t.ppf(0.975, np.where(n >= 2, n - 1, np.nan))
    assert np.array_equal(t_quantile(n), want, equal_nan=True)
    assert t_quantile(4) == sps.t.ppf(0.975, 3)
    code = (
        "import sys; from vllm_load.analysis.series.stats import t_quantile; t_quantile(3); "
        "t_quantile([2, 5]); print('scipy.stats' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
