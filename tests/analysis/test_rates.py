"""Open-loop levels: requested and achieved rate, queueing, and the keep-up verdict, on
hand-made requests whose figures are worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from vllm_load.analysis.levels import format_level_table, level_metrics
from vllm_load.analysis.rates import RateRule, delay_slope, rate_verdicts
from vllm_load.rundir.load import read_requests_frame, read_steps
from vllm_load.rundir.records import COLUMNS, PANDAS_DTYPES

STEPS = ["level", "users", "start_ts", "end_ts", "warmup_requests", "target_requests"]
STEPS += ["time_cap", "stop_reason", "rate"]


def requests_frame(rows: list[dict]) -> pd.DataFrame:
    full = []
    for i, row in enumerate(rows):
        rec = {c: None for c in COLUMNS}
        rec.update(request_id=str(i), ok=1, itl_hist="", error="", prompt_tokens=10)
        rec.update(completion_tokens=10, stream=1)
        rec.update(row)
        rec["e2e"] = rec["end_ts"] - rec["start_ts"]
        full.append(rec)
    return pd.DataFrame(full, columns=list(COLUMNS)).astype(PANDAS_DTYPES)


def kept_up_level(level: int, t0: float, n: int) -> list[dict]:
    """10 requests/s, each due every 0.1 s, sent 2 ms late, done 50 ms after it was due."""
    return [
        dict(level=level, start_ts=t0 + 0.1 * i, end_ts=t0 + 0.1 * i + 0.05, ttft=0.01)
        | dict(queued_s=0.002)
        for i in range(n)
    ]


def behind_level(level: int, t0: float, n: int) -> list[dict]:
    """100 requests/s offered to a target that finishes one every 1/30 s, first come first served."""
    rows = []
    for i in range(n):
        start, end = t0 + 0.01 * i, t0 + (i + 1) / 30
        rows.append(dict(level=level, start_ts=start, end_ts=end, ttft=end - start - 0.005))
        rows[-1]["queued_s"] = max(0.0, end - start - 2 / 30)  # two in flight at most
    return rows


def steps_frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=STEPS)


def test_a_level_that_keeps_up_achieves_its_rate_with_flat_delay():
    requests = requests_frame(kept_up_level(0, 1000.0, 40))
    steps = steps_frame([(0, 50, 1000.0, 1004.0, 10, 40, 60.0, "target_reached", 10.0)])
    row = level_metrics(requests, steps).iloc[0]
    # window: the 10th end (1000.95) to the 40th (1003.95): 30 measured requests in 3 s
    assert row["requested_rate"] == 10.0
    assert row["achieved_rate"] == pytest.approx(10.0)
    assert row["queued_p50"] == pytest.approx(0.002) and row["queued_p99"] == pytest.approx(0.002)
    assert row["delay_growth"] == pytest.approx(0.0, abs=1e-9)
    verdict = rate_verdicts(level_metrics(requests, steps), poisson=False)[0]
    assert verdict.kept_up and verdict.text() == ""


def test_a_level_above_capacity_falls_short_and_its_delay_grows():
    requests = requests_frame(behind_level(0, 1000.0, 70))
    steps = steps_frame([(0, 1000, 1000.0, 1003.0, 10, 70, 60.0, "target_reached", 100.0)])
    metrics = level_metrics(requests, steps)
    row = metrics.iloc[0]
    assert row["achieved_rate"] == pytest.approx(30.0)
    # the n-th request waits n/30 - n/100: 30 / 100 ... its TTFT grows 100/30 - 1 s per s
    assert row["delay_growth"] == pytest.approx(100 / 30 - 1, rel=1e-6)
    verdict = rate_verdicts(metrics, poisson=True)[0]
    assert verdict.short and verdict.growing and not verdict.kept_up
    assert "achieved 30.00 of 100.00 requests/s (-70.0%)" in verdict.text()
    table = format_level_table(metrics, behind={0: verdict.text()})
    header = table.splitlines()[0].split()
    assert header[:5] == ["rate", "req/s", "achieved", "in", "flight"]
    assert "30.00!" in table and "the target could not keep up" in table
    assert "100.00 requests/s: achieved 30.00" in table


def test_poisson_noise_widens_the_allowed_shortfall_constant_arrivals_do_not():
    rule = RateRule()
    assert rule.allowed_shortfall(100, poisson=True) == pytest.approx(0.3)  # 3 / sqrt(100)
    assert rule.allowed_shortfall(100_000, poisson=True) == 0.02
    assert rule.allowed_shortfall(100, poisson=False) == 0.02
    metrics = pd.DataFrame(
        dict(level=[0], requested_rate=[10.0], achieved_rate=[9.0], measured=[100])
        | dict(delay_growth=[0.0], queued_p99=[0.01])
    )
    assert rate_verdicts(metrics, poisson=True)[0].kept_up  # 10 % short: Poisson could do that
    assert not rate_verdicts(metrics, poisson=False)[0].kept_up


def test_delay_slope():
    x = np.arange(10.0)
    assert delay_slope(x, 0.5 * x + 3) == pytest.approx(0.5)
    assert math.isnan(delay_slope(x[:2], x[:2]))


def test_concurrency_levels_and_old_runs_have_no_rate_figures(tmp_path):
    rows = kept_up_level(0, 1000.0, 20)
    frame = requests_frame(rows).drop(columns=["queued_s"])  # written before queued_s existed
    frame.to_csv(tmp_path / "requests.csv", index=False)
    old = steps_frame([(0, 4, 1000.0, 1003.0, 5, 20, 60.0, "target_reached", None)])
    old.drop(columns=["rate"]).to_csv(tmp_path / "steps.csv", index=False)
    requests = read_requests_frame(str(tmp_path / "requests.csv"))
    assert requests["queued_s"].isna().all() and requests["queued_s"].dtype == "float64"
    metrics = level_metrics(requests, read_steps(str(tmp_path / "steps.csv")))
    assert metrics[["requested_rate", "achieved_rate", "delay_growth"]].isna().all().all()
    assert rate_verdicts(metrics, poisson=True) == {}
    assert format_level_table(metrics).splitlines()[0].split()[0] == "users"
