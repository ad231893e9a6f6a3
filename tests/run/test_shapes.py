"""Level transitions of the stepped shape: the measured requests followed to their end, time
caps, cooldown, the end; and which of a level's requests it follows (`measured_set`)."""

from vllm_load.load_kinds import TRACE, Level
from vllm_load.run.measured_set import LevelFollower, LevelTally
from vllm_load.run.steps import (
    DEFAULT_MEASURED,
    MEASURED_WAVES,
    LevelCounts,
    LevelPlan,
    LevelProgress,
    StepController,
)


def run_ticks(controller, script):
    """script: list of (now, {level: (started, open)}); returns user counts per tick."""
    out = []
    for now, seen in script:
        out.append(controller.tick(now, lambda level: LevelProgress(*seen.get(level, (0, 10**9)))))
    return out


def test_a_level_ends_once_its_first_requests_to_start_have_all_ended():
    # users 10, 50, 100 with W = 2, K = 5: each level follows its first max(2, users) + 5 starts
    c = StepController(
        LevelPlan.concurrency(
            (10, 50, 100), warmup_requests=2, requests_per_level=5, level_time_cap=100
        )
    )
    users = run_ticks(
        c,
        [
            (0, {}),
            (1, {0: (14, 1)}),  # one of its first 15 has not ended: the level holds
            (2, {0: (30, 0)}),
            (3, {1: (54, 0)}),  # 54 of 55 started: not all chosen yet
            (4, {1: (56, 0)}),
            (5, {2: (200, 3)}),  # later requests ended, three of the chosen ones not yet
            (6, {2: (210, 0)}),
        ],
    )
    assert users == [10, 10, 50, 50, 100, 100, None]
    changes = c.take_changes()
    assert [(ch.kind, ch.level, ch.at) for ch in changes] == [
        ("start", 0, 0),
        ("end", 0, 2),
        ("start", 1, 2),
        ("end", 1, 4),
        ("start", 2, 4),
        ("end", 2, 6),
        ("drain", 2, 6),
        ("drained", 2, 6),
    ]  # nothing in flight: the drain ends at once
    assert {ch.reason for ch in changes if ch.kind == "end"} == {"target_reached"}


def test_warmup_covers_every_user_and_the_default_measures_whole_waves():
    plan = LevelPlan.concurrency((10, 500), warmup_requests=10)
    assert plan.counts(0) == LevelCounts(10, DEFAULT_MEASURED)
    assert plan.counts(1) == LevelCounts(500, MEASURED_WAVES * 500)
    assert plan.thin_levels() == []
    seeds = LevelPlan.concurrency((10, 1000), warmup_requests=10, requests_per_level=100)
    assert seeds.counts(1) == LevelCounts(1000, 100)
    assert seeds.thin_levels() == [1]  # 100 measured of 1000 users: less than one wave
    rated = LevelPlan.open_loop((5.0,), 1000, warmup_requests=3)
    assert rated.counts(0) == LevelCounts(3, DEFAULT_MEASURED) and rated.thin_levels() == []


def test_time_cap_ends_a_level_that_is_short_of_requests():
    c = StepController(
        LevelPlan.concurrency(
            (10, 20), warmup_requests=0, requests_per_level=100, level_time_cap=30
        )
    )
    users = run_ticks(c, [(0, {}), (29, {0: (5, 95)}), (30, {0: (6, 94)}), (61, {1: (1, 99)})])
    assert users == [10, 10, 20, None]
    assert [ch.reason for ch in c.take_changes() if ch.kind == "end"] == ["time_cap", "time_cap"]


def test_measured_requests_never_heard_of_again_end_the_level_after_the_request_timeout():
    c = StepController(
        LevelPlan.concurrency((2, 4), warmup_requests=0, requests_per_level=2, measured_timeout=30)
    )
    users = run_ticks(c, [(0, {}), (1, {0: (9, 1)}), (20, {0: (50, 1)}), (31, {0: (80, 1)})])
    assert users == [2, 2, 2, 4]
    assert [ch.reason for ch in c.take_changes() if ch.kind == "end"] == ["measured_lost"]


def test_cooldown_runs_zero_users_between_levels():
    c = StepController(
        LevelPlan.concurrency((5, 6), warmup_requests=0, requests_per_level=1, cooldown=10)
    )
    done = (7, 0)  # each level follows its first users + 1 to start
    users = run_ticks(
        c, [(0, {}), (1, {0: done}), (5, {0: done}), (11, {0: done}), (12, {1: done})]
    )
    assert users == [5, 0, 0, 6, None]


def test_the_last_level_drains_its_requests_in_flight_before_the_test_ends():
    c = StepController(
        LevelPlan.concurrency((2, 4), warmup_requests=0, requests_per_level=2, drain_timeout=60)
    )
    flying = {"n": 4}
    ticks = []
    for now, seen, in_flight in [
        (0, {}, 2),
        (1, {0: (4, 0)}, 2),
        (2, {1: (6, 0)}, 4),
        (3, {1: (7, 0)}, 3),
        (4, {1: (7, 0)}, 0),
    ]:
        flying["n"] = in_flight
        ticks.append(
            c.tick(now, lambda level: LevelProgress(*seen.get(level, (0, 9))), lambda: flying["n"])
        )
    # the last level's users stay (sending nothing new) while requests are in flight
    assert ticks == [2, 4, 4, 4, None]
    changes = [(ch.kind, ch.at, ch.reason) for ch in c.take_changes()]
    assert changes[-3:] == [
        ("end", 2, "target_reached"),
        ("drain", 2, ""),
        ("drained", 4, "all_finished"),
    ]


def test_a_drain_that_outlasts_its_timeout_ends_the_test():
    c = StepController(
        LevelPlan.concurrency((3,), warmup_requests=0, requests_per_level=1, drain_timeout=10)
    )
    ticks = [
        c.tick(now, lambda level: LevelProgress(5, 0 if now else 1), lambda: 2)
        for now in (0, 1, 5, 11)
    ]
    assert ticks == [3, 3, 3, None]
    assert [(ch.kind, ch.reason) for ch in c.take_changes()][-1] == ("drained", "drain_timeout")


def test_an_open_loop_plan_keeps_its_users_and_says_each_level_rate():
    plan = LevelPlan.open_loop((5.0, 20.0), 100, warmup_requests=1, requests_per_level=2)
    c = StepController(plan)
    ticks = run_ticks(c, [(0, {}), (1, {0: (2, 1)}), (2, {0: (3, 0)}), (3, {1: (3, 0)})])
    assert ticks == [100, 100, 100, None]
    starts = [
        (ch.level, ch.users, ch.load.kind.name, ch.load.value)
        for ch in c.take_changes()
        if ch.kind == "start" and ch.load is not None
    ]
    assert starts == [(0, 100, "rate", 5.0), (1, 100, "rate", 20.0)]
    assert [load.kind.name for load in LevelPlan.concurrency((4, 8)).levels] == ["concurrency"] * 2


def test_a_trace_segment_measures_every_request_and_lasts_its_schedule():
    segment = Level(TRACE, 0.0, 50, requests=120, duration=60.0)
    plan = LevelPlan((segment,), warmup_requests=10, level_time_cap=30, measured_timeout=40)
    assert plan.counts(0) == LevelCounts(0, 120)  # no warm-up: the trace is the load
    assert plan.time_cap(0) == 100.0  # its schedule and a request timeout, above the cap
    assert plan.thin_levels() == []  # (its users are a cap on requests in flight)
    c = StepController(plan)
    assert run_ticks(c, [(0, {}), (50, {0: (119, 3)}), (61, {0: (120, 0)})]) == [50, 50, None]


def test_a_slow_request_among_the_first_to_start_holds_the_level():
    tally = LevelTally(selected=3)
    for ts in (1.0, 2.0, 3.0, 4.0, 5.0):
        tally.start(ts, "w1")
    for ts in (1.0, 3.0, 4.0, 5.0):  # every request but the one started at 2.0 has ended
        tally.end(ts, "w1")
    assert tally.progress() == LevelProgress(5, 1)
    tally.end(2.0, "w1")
    assert tally.progress() == LevelProgress(5, 0)


def test_a_start_reported_late_by_another_worker_joins_the_selection():
    tally = LevelTally(selected=2)
    for ts in (1.0, 3.0):
        tally.start(ts, "w1")
        tally.end(ts, "w1")
    assert tally.progress(reported_until=3.5) == LevelProgress(2, 0)
    # until every process has reported past the last chosen start, the choice may still change
    assert tally.progress(reported_until=2.5) == LevelProgress(2, 1)
    tally.start(
        2.0, "w2"
    )  # a slower worker's request, earlier than 3.0: it is measured, 3.0 is not
    assert tally.progress(reported_until=4.0) == LevelProgress(3, 1)
    tally.end(2.0, "w2")
    assert tally.progress(reported_until=4.0) == LevelProgress(3, 0)


def test_ends_of_requests_started_after_the_selection_do_not_count():
    tally = LevelTally(selected=2)
    for ts in (1.0, 2.0, 3.0, 4.0):
        tally.start(ts, "local")
    tally.end(3.0, "local")
    tally.end(4.0, "local")
    assert tally.progress() == LevelProgress(4, 2)


def test_the_requests_of_a_lost_worker_stop_holding_the_level():
    follower = LevelFollower()
    follower.level_started(4)
    for ts, worker in ((1.0, "a"), (1.1, "b"), (2.0, "a"), (2.1, "b")):
        follower.started(0, ts, worker)
        follower.reported(worker, ts + 0.5)
    for ts in (1.0, 2.0):
        follower.ended(0, ts, "a")
    assert follower.progress(0, ["a", "b"]) == LevelProgress(4, 2)
    follower.lost("b")  # its two requests in flight will never end
    assert follower.progress(0, ["a"]) == LevelProgress(4, 0)
    # the same start time in two processes is two requests
    follower.level_started(1)
    follower.started(1, 5.0, "a")
    follower.ended(1, 5.0, "c")
    assert follower.progress(1).open == 1
