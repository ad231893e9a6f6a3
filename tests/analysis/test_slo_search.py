"""The SLO-max search (`analysis/decisions/slo_search.py`) on synthetic latency curves: seeded
families of curves whose crossings the test does not pick, measured with and without noise; how
often the search ends within 5 % of the true crossing, and how many levels it takes, against a
plain bisection of the same bracket."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vllm_load.analysis.decisions import slo_search as search
from vllm_load.analysis.decisions.slo_search import Bounds, Probe, next_step


def _curve(rng: np.random.Generator):
    """A figure / limit curve of the level and where it crosses 1: a queue's hockey stick, a
    power law, or flat then linear, the crossing drawn log-uniform in 3..700."""
    kind = int(rng.integers(3))
    crossing = math.exp(rng.uniform(math.log(3), math.log(700)))
    if kind == 0:
        cap = crossing * rng.uniform(1.05, 3.0)

        def figure(x: float) -> float:
            return 1.0 / (1.0 - x / cap) if x < cap else 1e9

    elif kind == 1:
        power = rng.uniform(1.0, 4.0)

        def figure(x: float) -> float:
            return 1.0 + 3.0 * (x / crossing) ** power

    else:
        knee = crossing * rng.uniform(0.3, 0.95)

        def figure(x: float) -> float:
            return 1.0 + max(0.0, x - knee)

    limit = figure(crossing)
    return (lambda x: figure(x) / limit), crossing


def _bisect_step(probes: list[Probe], bounds: Bounds) -> search.Step:
    """The baseline: the same growth, then the bracket's middle."""
    step = next_step(probes, bounds)
    if step.done or step.high is None or step.low is None:
        return step
    low, high = step.low.level, step.high.level
    middle = float(round((low + high) / 2)) if bounds.integer else (low + high) / 2
    if not low < middle < high:
        return search.Step(search.CONVERGED, None, step.low, step.high)
    return search.Step(search.MEASURE, middle, step.low, step.high)


def _search(figure, bounds: Bounds, rng: np.random.Generator, noise: float, bisect: bool):
    probes: list[Probe] = []
    while True:
        step = _bisect_step(probes, bounds) if bisect else next_step(probes, bounds)
        if step.done:
            return step, len(probes)
        assert step.level is not None
        assert bounds.min_level <= step.level <= bounds.max_level
        assert step.level not in {p.level for p in probes}  # never measures a level twice
        measured = figure(step.level) * math.exp(rng.normal(0.0, noise))
        probes.append(Probe(step.level, (measured,)))


def _score(noise: float, bisect: bool, integer: bool, n: int = 300, seed: int = 7):
    """(share within 5 % of the true crossing, mean levels, statuses) over `n` seeded curves."""
    rng = np.random.default_rng(seed)
    hits, levels, statuses = 0, [], {}
    for _ in range(n):
        figure, crossing = _curve(rng)
        bounds = Bounds(1.0, 1024.0, 12, integer=integer)
        step, count = _search(figure, bounds, rng, noise, bisect)
        statuses[step.status] = statuses.get(step.status, 0) + 1
        truth = math.floor(crossing) if integer else crossing
        found = step.low.level if step.low is not None else math.nan
        # whole users: the crossing's own user is as close as the levels go
        if abs(found - truth) <= max(0.05 * truth, 1.0 if integer else 0.0):
            hits += 1
        levels.append(count)
    return hits / n, float(np.mean(levels)), statuses


@pytest.mark.parametrize("integer", [True, False], ids=["users", "rates"])
def test_the_search_ends_within_5_percent_of_the_crossing_on_noiseless_curves(integer):
    share, mean_levels, statuses = _score(0.0, bisect=False, integer=integer)
    # measured: 98-99 % within 5 %, the rest stopped by the 12-level budget; ~8.5-9.1 levels
    assert share >= 0.97, statuses
    assert statuses.get(search.CONVERGED, 0) >= 0.95 * sum(statuses.values())
    assert mean_levels <= 9.6


@pytest.mark.parametrize("integer", [True, False], ids=["users", "rates"])
def test_interpolating_takes_no_more_levels_than_bisecting(integer):
    # measured on these curves: about a third of a level fewer (the doubling is common to both)
    _, mean_levels, _ = _score(0.0, bisect=False, integer=integer)
    _, base_levels, _ = _score(0.0, bisect=True, integer=integer)
    assert mean_levels < base_levels, (mean_levels, base_levels)


def test_noise_of_3_percent_still_ends_near_the_crossing_mostly():
    # measured figures 3 % off at random: a level near the crossing may land on either side
    share, mean_levels, _ = _score(0.03, bisect=False, integer=True)
    assert share >= 0.9
    assert mean_levels <= 10.0


def test_the_lowest_level_failing_ends_the_search_there():
    bounds = Bounds(1.0, 64.0)
    first = next_step([], bounds)
    assert first.level == 1.0
    step = next_step([Probe(1.0, (1.4, 0.2))], bounds)
    assert step.status == search.NONE_MET and step.high is not None and step.high.level == 1.0


def test_the_highest_level_meeting_it_says_the_slo_max_is_above():
    bounds = Bounds(1.0, 8.0)
    probes = [Probe(float(x), (0.1,)) for x in (1, 2, 4)]
    step = next_step(probes, bounds)
    assert step.status == search.MEASURE and step.level == 8.0  # doubling, capped at the bound
    step = next_step([*probes, Probe(8.0, (0.5,))], bounds)
    assert step.status == search.MAX_MET and step.low is not None and step.low.level == 8.0


def test_the_budget_ends_the_search_with_its_bracket():
    bounds = Bounds(1.0, 1024.0, max_probes=3)
    probes = [Probe(1.0, (0.1,)), Probe(2.0, (0.2,)), Probe(4.0, (3.0,))]
    step = next_step(probes, bounds)
    assert step.status == search.BUDGET
    assert (step.low.level, step.high.level) == (2.0, 4.0)  # type: ignore[union-attr]


def test_the_next_level_is_where_the_interpolated_figure_meets_the_limit():
    # ratio 0.5 at 10, 1.5 at 20: the line reaches 1 at 15
    step = next_step([Probe(10.0, (0.5,)), Probe(20.0, (1.5,))], Bounds(10.0, 100.0))
    assert step.level == 15.0
    # two items: the one that reaches its limit first decides (0.9 -> 1.9 reaches 1 at 11)
    two = [Probe(10.0, (0.5, 0.9)), Probe(20.0, (1.5, 1.9))]
    assert next_step(two, Bounds(10.0, 100.0)).level == 11.0
    # a level whose requests failed (an infinite figure): no line to follow, the middle
    failed = [Probe(10.0, (0.5,)), Probe(20.0, (math.inf,))]
    assert next_step(failed, Bounds(10.0, 100.0)).level == 15.0


def test_a_bracket_with_no_whole_user_inside_is_as_narrow_as_it_goes():
    step = next_step([Probe(4.0, (0.5,)), Probe(5.0, (1.5,))], Bounds(1.0, 100.0))
    assert step.status == search.CONVERGED and step.width == pytest.approx(0.25)


def test_a_level_that_meets_the_slo_above_a_failure_does_not_move_the_bracket_up():
    probes = [Probe(10.0, (0.5,)), Probe(20.0, (1.2,)), Probe(40.0, (0.9,))]
    low, high = search.bracket(probes)
    assert low is not None and high is not None and (low.level, high.level) == (10.0, 20.0)
