"""--stop-when (issue 48 item 3): the grammar (`stop_when`), the rules judged on synthetic
requests (`run.stop_rules`), and the ladder ending on a trip (`run.steps`). In-process: nothing
is started (tests/e2e/test_stop_when_e2e.py runs one against the simulator)."""

from __future__ import annotations

import heapq
import math

import numpy as np
import pytest

from vllm_load.analysis.levels import group_percentiles
from vllm_load.cli import run as run_command
from vllm_load.cli.main import build_parser
from vllm_load.figures import PERCENTILES
from vllm_load.load_kinds import CONCURRENCY, RATE, Level
from vllm_load.run.steps import STOP_WHEN, LevelPlan, LevelProgress, StepController
from vllm_load.run.stop_rules import (
    BATCHES,
    MIN_POINTS,
    T_995_DF8,
    StopRules,
    in_flight_at,
    over_saturated,
    settled,
    trend,
)
from vllm_load.run_format.histogram import LogHistogram
from vllm_load.run_format.records import COLUMNS
from vllm_load.slo import level_metrics
from vllm_load.stop_when import (
    FailedShare,
    OverSaturation,
    PercentileAbove,
    parse_stop_when,
    stop_when_argument,
)
from vllm_load.user_values import SettingsError

# --- the grammar -----------------------------------------------------------------------------


def test_the_three_kinds_of_rule_comma_separated_or_repeated():
    rules = parse_stop_when(["failed>5%, ttft_p99 > 10s", "over-saturation", "ITL_P50>200ms"])
    assert rules == (
        FailedShare(0.05),
        PercentileAbove("ttft", 99, 10.0),
        OverSaturation(),
        PercentileAbove("itl", 50, 0.2),
    )
    assert stop_when_argument(["failed>5%, ttft_p99 > 10s"]) == ["failed>5%", "ttft_p99>10s"]
    assert parse_stop_when(stop_when_argument(["e2e_p90>1500ms"])) == parse_stop_when(
        "e2e_p90>1.5s"
    )


def test_every_declared_percentile_of_every_slo_figure_is_a_rule():
    """The names come from the figures' declarations, as the SLO grammar's do."""
    for metric in level_metrics():
        for p in PERCENTILES:
            assert parse_stop_when(f"{metric}_p{p}>1s") == (PercentileAbove(metric, p, 1.0),)


@pytest.mark.parametrize(
    "item, why",
    [
        ("ttfx_p99>1s", "unknown figure ttfx_p99"),
        ("ttft_p98>1s", "percentile 98 is not one the report computes"),
        ("ttft_p99>1min", "give the limit in s or ms"),
        ("ttft_p99>10", "give the limit in s or ms"),
        ("ttft_p99>0s", "the limit must be positive"),
        ("failed>5", "give the failed share in %"),
        ("failed>100%", "from 0% to under 100%"),
        ("failed>x%", ""),
        ("ttft_p99<=2s", "a rule says when to stop"),
        ("oversaturation", ""),
    ],
)
def test_a_bad_rule_is_one_line_naming_the_forms(item, why):
    with pytest.raises(SettingsError) as e:
        parse_stop_when(item)
    message = str(e.value)
    assert "\n" not in message and why in message
    assert message.startswith(f"--stop-when {item.lower()!r} is not a rule")
    assert "failed>N%" in message and "ttft|" in message and "over-saturation" in message


def test_a_rule_given_twice_is_refused():
    with pytest.raises(SettingsError, match="failed>1% is given twice"):
        parse_stop_when(["failed>1%", "failed>2%"])
    with pytest.raises(SettingsError, match="ttft_p99>1s is given twice"):
        parse_stop_when("ttft_p99>1s,ttft_p99>2s")
    assert len(parse_stop_when("ttft_p99>1s,ttft_p90>1s")) == 2


def test_vllm_load_run_refuses_a_bad_rule_before_it_asks_the_target(tmp_path):
    args = build_parser().parse_args(
        ["run", "--host", "http://127.0.0.1:9", "--out", str(tmp_path), "--stop-when", "tft>1s"]
    )
    with pytest.raises(SettingsError, match="--stop-when 'tft>1s' is not a rule"):
        run_command.prepare(args)  # (nothing listens on port 9: a check of it would say so)


# --- the rules on synthetic requests ---------------------------------------------------------
_AT = {name: i for i, name in enumerate(COLUMNS)}


def row(start: float, end: float, ok: bool = True, ttft: float | None = 0.1, **values) -> list:
    """A requests.csv row as the master holds it."""
    out: list = [None] * len(COLUMNS)
    fields = dict(start_ts=start, end_ts=end, ok=int(ok), ttft=ttft if ok else None, worker="w")
    fields.update({"itl_hist": "", "level": 0, **values})
    for name, value in fields.items():
        out[_AT[name]] = value
    return out


def level_of(rules: str, warmup: int, measured: int, level: int = 0) -> StopRules:
    judge = StopRules(parse_stop_when(rules))
    judge.level_started(level, Level(CONCURRENCY, 4, 4), warmup, measured, at=0.0)
    return judge


def ranks(rows: list[list], final_until: float = math.inf):
    """`rank` of the rows as started (their order by start), final up to `final_until`."""
    order = {start: i for i, start in enumerate(sorted(r[_AT["start_ts"]] for r in rows))}
    return lambda ts, worker: order.get(ts) if ts <= final_until else None


def test_failed_trips_while_the_level_runs_once_its_share_is_decided():
    """K = 20 measured after 2 warm-up, failed>10%: 2 failures may still end at 10 %, the third
    decides it (3/20 = 15 % whatever the other 17 do); warm-up failures never count."""
    judge = level_of("failed>10%", warmup=2, measured=20)
    rows = [row(i, i + 0.5, ok=i not in (0, 1, 5, 9)) for i in range(12)]  # 0, 1: warm-up
    for r in rows[:10]:
        judge.add(r, 0)
    rank = ranks(rows)
    assert (
        judge.check(False, rank, lambda: [], now=10.0) is None
    )  # 2 measured failures: 10 %, not above
    judge.add(row(20, 20.5, ok=False), 0)
    rows.append(row(20, 20.5, ok=False))
    trip = judge.check(False, ranks(rows), lambda: [], now=21.0)
    assert trip is not None and trip.cut and trip.rule == "failed>10%"
    assert (trip.figure, trip.value, trip.limit, trip.level) == ("failed", 0.15, 0.1, 0)
    assert "3 of its 20 measured requests had failed" in trip.detail
    assert trip.line().startswith("--stop-when failed>10% tripped at level 0 (4 users) while")
    # a failure whose place among the starts is not yet final (a worker has not reported its
    # starts up to it) does not count yet
    assert judge.check(False, ranks(rows, final_until=10.0), lambda: [], now=21.0) is None


def test_failed_at_the_levels_end_is_its_share_of_the_measured_requests_it_had():
    """A level cut by its time cap after 10 of its 20 measured requests: 1 failure is 5 % of
    K, not above it while the level runs; at its end it is 1 of the 10 it measured."""
    judge = level_of("failed>5%", warmup=0, measured=20)
    rows = [row(i, i + 0.5, ok=i != 3) for i in range(10)]
    for r in rows:
        judge.add(r, 0)
    assert judge.check(False, ranks(rows), lambda: [], now=11) is None
    trip = judge.check(True, ranks(rows), lambda: [], now=11)
    assert trip is not None and not trip.cut and trip.value == pytest.approx(0.1)
    assert "1 of its 10 measured requests failed (10.0%, more than 5%)" in trip.detail


def test_a_row_of_another_level_is_not_judged_with_this_one():
    judge = level_of("failed>0%", warmup=0, measured=5, level=1)
    judge.add(row(0, 1, ok=False, level=0), 0)
    assert judge.check(True, lambda ts, w: 0, lambda: [], now=2) is None


def test_a_percentile_is_judged_at_the_levels_end_as_the_report_computes_it():
    rng = np.random.default_rng(7)
    ttfts = rng.exponential(2.0, 40)
    rows = [row(i, i + 1 + t, ttft=float(t)) for i, t in enumerate(ttfts)]
    rows.append(row(50, 80, ok=False))  # a failure: no TTFT, out of the percentile
    report_p99 = group_percentiles(ttfts, np.zeros(40, dtype=np.int64), 1, (0.99,))[0, 0]
    below = level_of(f"ttft_p99>{report_p99 + 0.001:.6f}s", warmup=0, measured=41)
    above = level_of(f"ttft_p99>{report_p99 - 0.001:.6f}s", warmup=0, measured=41)
    for judge in (below, above):
        for r in rows:
            judge.add(r, 0)
    assert below.check(True, ranks(rows), lambda: [], now=100) is None
    assert (
        above.check(False, ranks(rows), lambda: [], now=100) is None
    )  # never while the level runs
    trip = above.check(True, ranks(rows), lambda: [], now=100)
    assert trip is not None and trip.figure == "ttft_p99"
    assert trip.value == pytest.approx(report_p99)
    assert "over its 40 successful measured requests" in trip.detail


def test_itl_percentiles_come_from_the_merged_histograms():
    gaps = [[0.01] * 50, [0.02] * 30, [0.5] * 2]
    rows = [row(i, i + 1, itl_hist=LogHistogram.of(g).format()) for i, g in enumerate(gaps)]
    merged = LogHistogram.of([x for g in gaps for x in g])
    judge = level_of("itl_p99>100ms", warmup=0, measured=3)
    for r in rows:
        judge.add(r, 0)
    trip = judge.check(True, ranks(rows), lambda: [], now=5)
    assert trip is not None and trip.value == pytest.approx(merged.percentile(99))
    assert trip.value == pytest.approx(0.5, rel=0.01)


def test_the_t_quantile_is_scipys():
    from scipy import stats

    assert T_995_DF8 == pytest.approx(stats.t.ppf(0.995, BATCHES - 2), rel=1e-12)


# --- over-saturation on simulated levels -----------------------------------------------------
def queue_level(rate: float, servers: int, service: float, n: int, seed: int):
    """A first-come-first-served queue with `servers` slots fed Poisson arrivals at `rate`:
    (start, ttft, end) per request. TTFT counts from the arrival (as an open-loop level's does):
    the wait for a slot and a prefill of a tenth of the service."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, n))
    work = rng.exponential(service, n)
    free = [0.0] * servers
    start, ttft, end = arrivals, np.empty(n), np.empty(n)
    for i, t in enumerate(arrivals):
        begin = max(t, heapq.heappop(free))
        ttft[i] = begin - t + 0.1 * work[i]
        end[i] = begin + work[i]
        heapq.heappush(free, end[i])
    return start, ttft, end


def judged(rate: float, seed: int, measured: int = 100, warmup: int = 10):
    """What `over_saturated` finds on a level of an 8-slot queue with a service time of 1 s,
    over its measured requests once settled, as `StopRules` takes them."""
    start, ttft, end = queue_level(rate, 8, 1.0, warmup + measured, seed)
    s, t = start[warmup:], ttft[warmup:]
    keep = settled(s, end[warmup:] - s, level_start=0.0)
    return over_saturated(s[keep], t[keep], in_flight_at(s[keep], start, end))


def test_a_steady_level_does_not_trip_over_saturation():
    """At 60 % of capacity the queue holds steady: over 300 simulated levels of 100 measured
    requests the rule fires on 2 (0.7 %; each slope's 99 % interval above 0 by chance 0.5 %)."""
    fired = sum(judged(0.6 * 8, seed) is not None for seed in range(300))
    assert fired <= 6, f"{fired} of 300 steady levels tripped"


def test_an_overloaded_level_trips_over_saturation():
    """At 200 % of capacity the queue grows through the level: TTFT and in flight both rise, on
    all but a few of the levels; at 150 % on most, with 200 measured requests on nearly all."""
    found = [judged(2.0 * 8, seed) for seed in range(100)]
    assert sum(f is not None for f in found) >= 95
    ttft, flight = next(f for f in found if f is not None)
    assert ttft.low > 0 and flight.low > 0
    assert ttft.slope == pytest.approx(0.5, rel=0.4)  # a FIFO queue: 1 - capacity / rate
    assert sum(judged(1.5 * 8, seed) is not None for seed in range(100)) >= 65
    assert sum(judged(1.5 * 8, seed, measured=200) is not None for seed in range(100)) >= 90


def test_a_closed_loop_level_holds_its_in_flight_and_never_trips():
    rng = np.random.default_rng(3)
    start = np.sort(rng.uniform(0, 100, 200))
    ttft = 0.5 + 0.01 * start + rng.normal(0, 0.05, 200)  # TTFT drifting up alone
    assert trend(start, ttft).rising
    assert over_saturated(start, ttft, np.full(200, 16.0)) is None


def test_too_few_requests_are_not_judged():
    start = np.arange(MIN_POINTS - 1, dtype=np.float64)
    assert trend(start, start) is None
    assert trend(np.arange(MIN_POINTS, dtype=np.float64), np.arange(MIN_POINTS) * 1.0).rising


def test_stop_rules_judge_an_overloaded_rate_level_from_its_rows():
    """The whole path: the rows of an overloaded open-loop level, and the requests still open."""
    start, ttft, end = queue_level(1.3 * 8, 8, 1.0, 220, seed=1)
    judge = StopRules(parse_stop_when("over-saturation"))
    judge.level_started(0, Level(RATE, 10.4, 1000), 20, 200, at=0.0)
    open_at = end.max() - 5  # the last requests have not ended yet when the level ends
    rows = [row(s, e, ttft=t) for s, t, e in zip(start, ttft, end) if e <= open_at]
    for r in rows:
        judge.add(r, 0)
    still_open = [float(s) for s, e in zip(start, end) if e > open_at]
    order = {(float(s), "w"): i for i, s in enumerate(start)}
    trip = judge.check(True, lambda ts, w: order.get((ts, w)), lambda: still_open, now=open_at)
    assert trip is not None and trip.rule == "over-saturation" and trip.figure == "ttft_slope"
    assert trip.value > 0 and "TTFT rose" in trip.detail and "requests in flight" in trip.detail
    assert trip.load == "10.40 requests/s"


# --- the ladder ends ------------------------------------------------------------------------
def run_ladder(stop_at: tuple[int, bool]) -> StepController:
    """Three levels of 1 + 2 requests; the rule trips at level `stop_at[0]`, while it runs
    (`stop_at[1]` False) or at its end."""
    plan = LevelPlan.concurrency([1, 2, 3], warmup_requests=1, requests_per_level=2)
    asked: list[tuple[int, str]] = []

    def stop_check(level: int, over: str) -> bool:
        asked.append((level, over))
        return level == stop_at[0] and bool(over) == stop_at[1]

    controller = StepController(plan, stop_check=stop_check)
    now, done = 0.0, {0: 0, 1: 0, 2: 0}

    def progress(level: int) -> LevelProgress:
        return LevelProgress(done[level], plan.counts(level).selected - done[level])

    while controller.tick(now, progress) is not None:
        now += 1.0
        if controller.phase == "running":
            selected = plan.counts(controller.level).selected
            done[controller.level] = min(selected, done[controller.level] + 1)
    return controller


@pytest.mark.parametrize("at_end", [False, True])
def test_a_trip_ends_the_ladder_at_its_level(at_end):
    controller = StepController(LevelPlan.concurrency([1]))  # (the field defaults to no rules)
    assert controller.stop_check is None
    controller = run_ladder((1, at_end))
    ends = [c for c in controller.changes if c.kind == "end"]
    assert [c.level for c in controller.changes if c.kind == "start"] == [0, 1]
    assert [(c.level, c.reason) for c in ends] == [
        (0, "target_reached"),
        (1, "target_reached" if at_end else STOP_WHEN),
    ]
    assert [c.kind for c in controller.changes[-2:]] == ["drain", "drained"]
    assert controller.phase == "done"
