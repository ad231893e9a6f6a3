"""Whether advice paid off (`analysis.decisions.advice_check`), on hand-made runs with known
answers: the peak compared across runs, and the knee placed on the grid of tested levels."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from vllm_load.analysis.decisions.ab import BETTER, UNSURE, WORSE, RunLevels
from vllm_load.analysis.decisions.advice_check import (
    grid_position,
    knee_check,
    peak_comparison,
    run_peak,
)
from vllm_load.analysis.decisions.significance import NO_TEST, WELCH, welch

LEVELS = (1.0, 2.0, 4.0, 8.0)


def _run(curve: dict[float, float], measured: int = 10) -> RunLevels:
    rows = [
        {"level": i, "users": u, "measured": measured, "total_tok_per_s": tok}
        for i, (u, tok) in enumerate(curve.items())
    ]
    return RunLevels("r", pd.DataFrame(rows), pd.DataFrame({"level": []}))


def test_a_runs_peak_is_its_highest_measured_level():
    run = _run({1: 100.0, 2: 300.0, 4: 250.0})
    assert run_peak(run) == 300.0
    # a level that measured nothing has no throughput to offer
    run.metrics.loc[1, "measured"] = 0
    assert run_peak(run) == 250.0
    assert math.isnan(run_peak(_run({1: 100.0}, measured=0)))


def test_peaks_are_compared_across_runs_with_welch():
    # A saturates at 2 users, B keeps climbing: the peaks are what moved
    a = [_run({1: 100, 2: 200 + d, 4: 200, 8: 190}) for d in (0, 6, -4)]
    b = [_run({1: 100, 2: 200, 4: 400, 8: 790 + d}) for d in (0, 9, -5)]
    c = peak_comparison(a, b)
    expected = welch([200, 206, 200], [790, 799, 785])
    assert c.result.test == WELCH and c.result.p == pytest.approx(expected.p)
    assert c.verdict == BETTER and c.rel_diff == pytest.approx((2374 / 3 - 202) / 202)
    assert math.isnan(c.level)
    assert peak_comparison(b, a).verdict == WORSE
    # the same peaks within noise: nothing found at this n
    same = [_run({1: 100, 2: 200 + d}) for d in (0, 30, -30)]
    assert peak_comparison(same, same[::-1]).verdict == UNSURE


def test_one_run_a_side_gives_no_verdict():
    c = peak_comparison([_run({1: 100})], [_run({1: 300}), _run({1: 310})])
    assert c.result.test == NO_TEST and c.verdict == "no test possible at n = 1"


def test_grid_positions_are_steps_between_tested_levels():
    assert [grid_position(LEVELS, x) for x in LEVELS] == [0, 1, 2, 3]
    assert grid_position(LEVELS, 3.0) == pytest.approx(1 + math.log(1.5) / math.log(2))
    assert grid_position(LEVELS, 16.0) == pytest.approx(4.0)  # one step beyond, the last step
    assert grid_position(LEVELS, 0.5) == pytest.approx(-1.0)
    assert grid_position((10, 50, 100), 75) == pytest.approx(1 + math.log(1.5) / math.log(2))


@pytest.mark.parametrize(
    "measured, expected, agrees",
    [
        (4.0, 8.0, True),  # one level apart
        (4.0, 2.0, True),
        (4.0, 4.0, True),
        (2.0, 8.0, False),  # two levels apart
        (8.0, 12.0, True),  # between the last level and the next one
        (1.0, 0.5, True),
        # not saturated up to 8: the knee is above it, so at least one level from 4
        (None, 8.0, True),
        (None, 4.0, True),
        (None, 64.0, True),
        (None, 2.0, False),
    ],
)
def test_the_knee_is_where_the_model_said_within_one_tested_level(measured, expected, agrees):
    check = knee_check(LEVELS, measured, expected)
    assert check.agrees is agrees and check.saturated is (measured is not None)


def test_the_knee_check_says_when_it_cannot_tell():
    assert knee_check(LEVELS, 4.0, None).agrees is None  # the model gave no knee
    assert knee_check((4.0,), 4.0, 4.0).agrees is None  # one level: no grid
    assert knee_check((4.0, float("nan"), 0.0), 4.0, 4.0).agrees is None


def test_a_knee_that_stayed_where_it_was_did_not_move_however_close_the_advised_one():
    from vllm_load.analysis.decisions.advice_check import knee_moved, knee_stayed

    levels = (1.0, 2.0, 4.0, 8.0)
    a = knee_check(levels, 4.0, 4.0)
    stayed = knee_check(levels, 4.0, 8.0)  # within one tested level of the advised 8
    assert stayed.agrees is True
    assert knee_moved(a, stayed) is False and knee_stayed(a, stayed)
    moved = knee_check(levels, 8.0, 8.0)
    assert knee_moved(a, moved) is True and not knee_stayed(a, moved)
    assert knee_moved(a, knee_check(levels, 4.0, None)) is None


def test_a_modelled_knee_in_advice_is_whole_as_the_models_limits_show_it():
    # a real vLLM's report (budget2048, nothing told) read "to ~7.93798 concurrent"
    from vllm_load.analysis.diagnosis.advice import _moves
    from vllm_load.analysis.diagnosis.capacity import Limit, Prediction

    after = Prediction(
        limits=(Limit("max_num_batched_tokens", 7.93798, "a budget of 1,024"),),
        unknown=(),
        knee=None,
        first="max_num_batched_tokens",
    )
    text = _moves(1.0, after, "concurrent")
    assert "~8 concurrent" in text and "7.9" not in text and "from its ~1 " in text
