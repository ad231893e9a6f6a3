"""SLOs parsed from what a user types, and goodput per level on hand-made requests."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from support.level_frames import make_requests, make_steps, ok

from vllm_load.analysis.decisions.goodput import (
    SUCCESS,
    format_goodput_table,
    good_requests,
    level_goodput,
    slo_headline,
)
from vllm_load.analysis.levels.measure import measure_levels
from vllm_load.load_kinds import CONCURRENCY, RATE
from vllm_load.slo import Objective, SloSpec, Threshold, parse_slo
from vllm_load.user_values import SettingsError


def test_parse_every_form_and_units():
    spec = parse_slo(["ttft<=2s, tpot<=50ms", "e2e <= 20s itl_max<=0.5s", "e2e_p99<=20s"])
    assert spec.thresholds == (
        Threshold("ttft", 2.0),
        Threshold("tpot", 0.05),
        Threshold("e2e", 20.0),
        Threshold("itl_max", 0.5),
    )
    assert spec.objectives == (Objective("e2e", 99, 20.0),)
    assert spec.attainment == 0.99
    assert parse_slo(["ttft_p90<=1s", "attainment>=90%"]).attainment == pytest.approx(0.9)
    # the items round-trip, as run.json records them
    again = parse_slo(["tpot_p50<=40ms", "attainment>=95%", "ttft<=1.5s"])
    assert parse_slo(again.items()) == again
    assert not parse_slo([]) and not parse_slo(None)


@pytest.mark.parametrize(
    "text, names",
    [
        ("ttft<2s", "'ttft<2s'"),
        ("ttft<=2", "in s or ms"),
        ("ttft<=2min", "'ttft<=2min'"),
        ("queue<=2s", "unknown figure queue"),
        ("e2e_p98<=1s", "percentile 98"),
        ("ttft>=1s", "ttft takes <="),
        ("attainment>=150%", "at most 100%"),
        ("ttft<=0s", "positive"),
    ],
)
def test_bad_slo_is_one_line_naming_the_part_and_the_forms(text, names):
    with pytest.raises(SettingsError) as err:
        parse_slo([text])
    message = str(err.value)
    assert "\n" not in message and names in message
    assert "ttft|ttfat|tpot|e2e|itl_max<=N(s|ms)" in message and "attainment>=N%" in message


def test_same_slo_twice_is_refused():
    with pytest.raises(SettingsError, match="ttft is given twice"):
        parse_slo(["ttft<=1s", "ttft<=2s"])


def test_a_failure_is_never_good_and_an_undefined_figure_does_not_count():
    requests = make_requests(
        [
            ok(0, 1, 100.0, 101.0, ttft=0.2, tpot=None),  # one-token reply: no TPOT
            ok(0, 1, 100.0, 101.0, ttft=0.2, tpot=0.09),  # too slow per token
            {"level": 0, "users": 1, "start_ts": 100.0, "end_ts": 100.1, "ok": 0},  # fast failure
        ]
    )
    assert good_requests(requests, parse_slo(["ttft<=1s", "tpot<=50ms"])).tolist() == [
        True,
        False,
        False,
    ]
    # with no per-request threshold, good = succeeded
    assert good_requests(requests, parse_slo(["e2e_p99<=1s"])).tolist() == [True, True, False]


def test_a_reasoning_reply_whose_answer_never_came_misses_ttfat_and_binds_the_level():
    """TTFAT is declared `absent_misses`: a success with reasoning but no answer token has no
    TTFAT, and its user never got the answer: it misses `ttfat<=`, as the threshold's value (the
    attainment percentile) says, where a TPOT-less one-token reply is exempt from `tpot<=`."""
    requests = make_requests(
        [
            ok(0, 2, 100.0, 101.0, ttft=0.2, ttfat=0.5, reasoning_tokens=20),
            ok(0, 2, 100.0, 101.0, ttft=0.2, ttfat=None, reasoning_tokens=10),  # no answer
        ]
    )
    assert good_requests(requests, parse_slo(["ttfat<=1s"])).tolist() == [True, False]
    assert good_requests(requests, parse_slo(["ttft<=1s"])).tolist() == [True, True]
    steps = make_steps([(0, 2, 100.0, 101.5, 0, 2, 600.0, "target_reached")])
    spec = parse_slo(["ttfat<=1s", "attainment>=90%"])
    row = level_goodput(requests, measure_levels(requests, steps), spec).iloc[0]
    assert row.slo_good == 1 and row.slo_binding == "ttfat<=1s"
    # the 90th percentile of 0.5 s and the never (infinitely late): beyond any limit, not 0
    assert row.slo_binding_value == math.inf and row.slo_met == 0.0


@pytest.fixture
def one_level():
    """Level 0 at 2 users, no warm-up, 4 measured requests over the window [100, 104]."""
    requests = make_requests(
        [
            ok(0, 2, 100.0, 102.0, ttft=0.5),  # good
            ok(0, 2, 100.0, 102.0, ttft=1.5),  # misses ttft<=1s
            ok(0, 2, 102.0, 104.0, ttft=0.5),  # good
            {"level": 0, "users": 2, "start_ts": 102.0, "end_ts": 104.0, "ok": 0},  # failure
        ]
    )
    steps = make_steps([(0, 2, 100.0, 104.5, 0, 4, 600.0, "target_reached")])
    return requests, measure_levels(requests, steps)


def test_goodput_counts_good_requests_work_inside_the_window(one_level):
    requests, meas = one_level
    row = level_goodput(requests, meas, parse_slo(["ttft<=1s"])).iloc[0]
    assert meas.metrics.iloc[0]["window_s"] == 4.0
    assert row.slo_good == 2 and row.slo_good_share == 0.5
    assert row.goodput_req_per_s == pytest.approx(2 / 4)  # throughput: 3 / 4
    assert meas.metrics.iloc[0]["req_per_s"] == pytest.approx(3 / 4)
    assert row.goodput_output_tok_per_s == pytest.approx(20 / 4)
    # a failure in 4 requests is more than the default 1 % allows: failures bound the level
    assert row.slo_met == 0.0 and row.slo_binding == SUCCESS
    assert row.slo_binding_value == pytest.approx(0.75)


def test_binding_is_the_item_closest_to_its_limit(one_level):
    requests, meas = one_level
    lenient = parse_slo(["ttft<=1s", "attainment>=50%"])
    row = level_goodput(requests, meas, lenient).iloc[0]
    # half the requests are good; the median of 0.5, 0.5, 1.5 s and the failure (infinitely
    # late) by the tables' linear interpolation is 1 s, against 1 s
    assert row.slo_met == 1.0 and row.slo_binding == "ttft<=1s"
    assert (row.slo_binding_value, row.slo_binding_ratio) == (1.0, 1.0)
    # a level objective over the successful requests' p99 TTFT (~1.48 s) binds it instead
    strict = parse_slo(["ttft<=1s", "ttft_p99<=1s", "attainment>=50%"])
    row = level_goodput(requests, meas, strict).iloc[0]
    p99 = meas.metrics.iloc[0]["ttft_p99"]
    assert p99 == pytest.approx(np.percentile([0.5, 1.5, 0.5], 99))
    assert row.slo_met == 0.0 and row.slo_binding == "ttft_p99<=1s"
    assert row.slo_binding_ratio == pytest.approx(p99)


def test_every_request_good_gives_goodput_equal_to_throughput(one_level):
    requests, meas = one_level
    row = level_goodput(requests, meas, parse_slo(["e2e<=10s", "attainment>=75%"])).iloc[0]
    assert row.goodput_req_per_s == pytest.approx(meas.metrics.iloc[0]["req_per_s"])
    assert row.slo_met == 1.0


def test_terminal_table_says_which_levels_met_and_what_bound_them(one_level):
    requests, meas = one_level
    spec = parse_slo(["ttft<=1s"])
    text = format_goodput_table(meas.metrics, level_goodput(requests, meas, spec), spec)
    lines = text.splitlines()
    assert lines[0] == f"SLOs: {spec.describe()}."
    assert lines[1].split()[:2] == ["users", "good"]
    assert lines[3].split()[:5] == ["2", "50.0", "0.50", "5", "missed"]
    assert lines[3].endswith("success (75.0% of requests succeeded)")


def _run(users, met, goodput, req_per_s, binding="ttft<=1s", value=1.2):
    n = len(users)
    return pd.DataFrame(
        {
            "value": users,
            "req_per_s": req_per_s,
            "goodput_req_per_s": goodput,
            "slo_met": [float(m) for m in met],
            "slo_binding": [binding] * n,
            "slo_binding_value": [value] * n,
        }
    )


def test_headline_across_runs_gives_the_interval_and_the_objective_missed_above():
    spec = parse_slo(["ttft<=1s"])
    runs = [
        _run([1, 2, 4, 8], [1, 1, 0, 0], [1.0, 1.9, 1.5, 0.5], [1.0, 2.0, 3.5, 4.0]),
        _run([1, 2, 4, 8], [1, 1, 1, 0], [1.0, 2.0, 2.5, 1.0], [1.0, 2.0, 3.6, 4.1]),
        _run([1, 2, 4, 8], [1, 1, 1, 0], [1.0, 2.1, 2.6, 1.1], [1.0, 2.0, 3.4, 4.2]),
    ]
    head = slo_headline(runs, spec)
    assert head.best.n == 3 and head.best.mean == pytest.approx(10 / 3)
    half = 4.302653 * np.std([2, 4, 4], ddof=1) / math.sqrt(3)
    assert head.best.ci_high == pytest.approx(10 / 3 + half, rel=1e-5)
    assert head.binding_missed and head.binding.startswith("ttft<=1s (1.2 s at the 99th")
    assert (head.goodput_peak_value, head.throughput_peak_value) == (4.0, 8.0)
    text = head.sentence(CONCURRENCY, spec)
    assert text.startswith("Highest concurrency meeting the SLOs (ttft<=1s): 3.333 concurrent")
    assert "95% CI" in text and "bound by ttft<=1s" in text
    assert "Goodput peaks at 4 concurrent" in text and "throughput at 8" in text
    assert "Highest request rate" in head.sentence(RATE, spec)


def test_headline_when_every_level_met_or_none_did():
    spec = SloSpec(objectives=(Objective("e2e", 99, 5.0),))
    every = slo_headline([_run([1, 2], [1, 1], [1.0, 2.0], [1.0, 2.0], "e2e_p99<=5s", 4.0)], spec)
    assert every.best.mean == 2 and not every.binding_missed
    assert "closest to its limit: e2e_p99<=5s (4 s)" in every.sentence(CONCURRENCY, spec)
    none = slo_headline([_run([1, 2], [0, 0], [0.0, 0.0], [1.0, 2.0], "e2e_p99<=5s", 6.0)], spec)
    assert none.best.n == 0 and none.runs_without == 1
    assert none.sentence(CONCURRENCY, spec).startswith("No tested level met the SLOs")


def test_the_slo_line_reads_the_tables_percentile(tmp_path):
    """One percentile method: a threshold's value at its attainment percentile is, where every
    request succeeded, the level table's percentile (issue 46: 13.2 ms against the table's 12.4
    ms, the SLO line by the inverted CDF, the table by linear interpolation)."""
    from vllm_load.run_format.load import load_run
    from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run

    spec = SyntheticRun(levels=(4, 16), warmup_requests=4, requests_per_level=37)
    run = load_run(write_synthetic_run(str(tmp_path), spec))
    meas = measure_levels(run.requests, run.steps)
    for slo, column in ((["ttft<=1ms"], "ttft_p99"), (["e2e<=1ms", "attainment>=90%"], "e2e_p90")):
        goodput = level_goodput(run.requests, meas, parse_slo(slo))
        assert (goodput["slo_binding"] == slo[0]).all()
        assert goodput["slo_binding_value"].tolist() == meas.metrics[column].tolist()


def test_a_run_whose_judgement_is_unknown_is_left_out_of_the_headline_and_said():
    spec = parse_slo(["ttfat<=1s"])
    known = _run([1, 2], [1, 0], [1.0, 1.5], [1.0, 2.0]).assign(slo_unknown=0.0)
    unknown = _run([1, 2], [1, 1], [math.nan] * 2, [1.0, 2.0], "ttfat<=1s", math.nan)
    unknown = unknown.assign(slo_met=math.nan, slo_unknown=1.0)
    head = slo_headline([known, unknown], spec)
    assert head.best.n == 1 and head.best.mean == 1 and head.runs_unknown == 1
    text = head.sentence(CONCURRENCY, spec)
    assert text.startswith("Highest concurrency meeting the SLOs (ttfat<=1s): 1 concurrent")
    assert text.endswith(
        "1 run(s) left out, where it is unknown: ttfat<=1s (unknown: no successful measured "
        "request recorded ttfat)."
    )
    alone = slo_headline([unknown], spec).sentence(CONCURRENCY, spec)
    assert alone.startswith("Whether any tested level meets the SLOs (ttfat<=1s) is unknown")


def test_the_one_percentile_function_is_pandas_linear_quantile_and_sorts_failures_last():
    from vllm_load.analysis.levels import group_percentiles

    rng = np.random.default_rng(3)
    values = rng.lognormal(-2.0, 0.5, 5000)
    values[rng.random(5000) < 0.05] = np.nan
    groups = rng.integers(0, 7, 5000)
    groups[groups == 4] = 5  # a group without values: NaN
    fractions = (0.5, 0.9, 0.95, 0.99)
    ours = group_percentiles(values, groups, 7, fractions)
    keep = ~np.isnan(values)
    theirs = pd.Series(values[keep]).groupby(groups[keep]).quantile(list(fractions)).unstack()
    assert np.isnan(ours[4]).all()
    assert ours[theirs.index.to_numpy()].tolist() == theirs.to_numpy().tolist()  # same bits
    # failures as infinitely late: a percentile that reaches one is inf, never NaN
    late = np.array([0.1, 0.2, 0.3, np.inf])
    got = group_percentiles(late, np.zeros(4, np.int64), 1, (0.5, 0.66, 0.67, 1.0))[0]
    assert got[0] == pytest.approx(0.25) and got[1] == pytest.approx(0.298)
    assert got[2] == np.inf and got[3] == np.inf
