"""The Pareto frontier of a tuning's configurations: total tok/s per GPU against output tok/s
per user (analysis/decisions/pareto.py)."""

from __future__ import annotations

import math

from vllm_load.analysis.decisions.pareto import (
    ConfigurationPoint,
    choose,
    pareto_frontier,
    per_user_limit,
)


def _point(
    seqs: str, per_user: float, total: float, gpus: float | None = 2, meets: bool | None = None
) -> ConfigurationPoint:
    return ConfigurationPoint(
        {"max_num_seqs": seqs},
        f"vllm serve m --max-num-seqs {seqs}",
        gpus,
        8.0,
        total,
        per_user,
        meets,
    )


def test_a_single_point_is_the_frontier():
    p = _point("8", 40.0, 1000.0)
    front = pareto_frontier([p])
    assert front.frontier == [p] and not front.dominated and not front.missing
    assert p.total_tok_per_s_per_gpu == 500.0


def test_dominated_points_are_off_the_frontier_and_it_is_ordered_by_interactivity():
    fast = _point("4", 60.0, 800.0)  # most interactive
    wide = _point("64", 20.0, 3000.0)  # most throughput
    middle = _point("16", 40.0, 2000.0)
    worse = _point("32", 30.0, 1500.0)  # middle is better on both
    equal_x_lower_y = _point("8", 60.0, 700.0)  # as interactive as fast, less throughput
    front = pareto_frontier([worse, wide, fast, middle, equal_x_lower_y])
    assert front.frontier == [wide, middle, fast]
    assert {id(p) for p in front.dominated} == {id(worse), id(equal_x_lower_y)}


def test_points_equal_on_both_figures_are_both_on_it():
    a, b = _point("8", 40.0, 1000.0), _point("16", 40.0, 1000.0)
    c = _point("4", 40.0, 999.0)
    front = pareto_frontier([a, b, c])
    assert front.frontier == [a, b] and front.dominated == [c]


def test_a_point_missing_a_figure_is_on_no_side_and_named_with_what_it_lacks():
    ok = _point("8", 40.0, 1000.0)
    no_gpus = _point("16", 90.0, 9000.0, gpus=None)  # would dominate everything
    no_tpot = _point("32", math.nan, 5000.0)
    no_tokens = _point("64", 30.0, math.nan)
    front = pareto_frontier([ok, no_gpus, no_tpot, no_tokens])
    assert front.frontier == [ok] and not front.dominated
    why = {p.configuration["max_num_seqs"]: text for p, text in front.missing}
    assert set(why) == {"16", "32", "64"}
    assert "GPU count" in why["16"] and "--gpus" in why["16"]
    assert "output tok/s per user" in why["32"] and "GPU" not in why["32"]
    assert why["64"] == "total tok/s"
    assert math.isnan(no_gpus.total_tok_per_s_per_gpu)


def test_the_chosen_point_meets_the_slo_with_the_most_throughput_per_gpu():
    best_missing = _point("64", 20.0, 4000.0, meets=False)
    chosen = _point("16", 40.0, 2000.0, meets=True)
    slower = _point("8", 50.0, 1500.0, meets=True)
    unknown_gpus = _point("32", 30.0, 3000.0, gpus=None, meets=True)
    assert choose([best_missing, slower, chosen, unknown_gpus]) is chosen
    assert choose([best_missing]) is None
    # no SLO: the most throughput per GPU; on a tie, the more interactive
    a, b = _point("8", 20.0, 1000.0), _point("16", 30.0, 1000.0)
    assert choose([a, b]) is b
    # per GPU, not in all: 4 GPUs serving 3000 tok/s do less per GPU than 1 serving 1000
    big, small = _point("8", 20.0, 3000.0, gpus=4), _point("8", 20.0, 1000.0, gpus=1)
    assert choose([big, small]) is small


def test_the_slo_line_is_one_over_the_tightest_gap_between_tokens():
    assert per_user_limit([("ttft", 0.5), ("itl", 0.05), ("tpot", 0.04)]) == 25.0
    assert per_user_limit([("ttft", 0.5), ("e2e", 20.0)]) is None
    assert per_user_limit([]) is None
