"""Level transitions of the stepped shape: targets, time caps, cooldown, the end."""

from vllm_load.run.steps import LevelPlan, StepController


def run_ticks(controller, script):
    """script: list of (now, finished counts per level); returns user counts per tick."""
    out = []
    for now, finished in script:
        out.append(controller.tick(now, lambda level: finished.get(level, 0)))
    return out


def test_levels_advance_when_warmup_plus_target_finished():
    c = StepController(
        LevelPlan((10, 50, 100), warmup_requests=2, requests_per_level=5, level_time_cap=100)
    )
    users = run_ticks(
        c,
        [
            (0, {}),
            (1, {0: 6}),
            (2, {0: 7}),
            (3, {0: 9, 1: 3}),
            (4, {1: 7}),
            (5, {2: 6}),
            (6, {2: 7}),
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


def test_time_cap_ends_a_level_that_is_short_of_requests():
    c = StepController(
        LevelPlan((10, 20), warmup_requests=0, requests_per_level=100, level_time_cap=30)
    )
    users = run_ticks(c, [(0, {}), (29, {0: 5}), (30, {0: 6}), (61, {1: 1})])
    assert users == [10, 10, 20, None]
    assert [ch.reason for ch in c.take_changes() if ch.kind == "end"] == ["time_cap", "time_cap"]


def test_cooldown_runs_zero_users_between_levels():
    c = StepController(LevelPlan((5, 6), warmup_requests=0, requests_per_level=1, cooldown=10))
    users = run_ticks(c, [(0, {}), (1, {0: 1}), (5, {0: 1}), (11, {0: 1}), (12, {1: 1})])
    assert users == [5, 0, 0, 6, None]


def test_the_last_level_drains_its_requests_in_flight_before_the_test_ends():
    c = StepController(LevelPlan((2, 4), warmup_requests=0, requests_per_level=2, drain_timeout=60))
    flying = {"n": 4}
    ticks = []
    for now, finished, in_flight in [
        (0, {}, 2),
        (1, {0: 2}, 2),
        (2, {1: 2}, 4),
        (3, {1: 3}, 3),
        (4, {1: 6}, 0),
    ]:
        flying["n"] = in_flight
        ticks.append(c.tick(now, lambda level: finished.get(level, 0), lambda: flying["n"]))
    # the last level's users stay (sending nothing new) while requests are in flight
    assert ticks == [2, 4, 4, 4, None]
    changes = [(ch.kind, ch.at, ch.reason) for ch in c.take_changes()]
    assert changes[-3:] == [
        ("end", 2, "target_reached"),
        ("drain", 2, ""),
        ("drained", 4, "all_finished"),
    ]


def test_a_drain_that_outlasts_its_timeout_ends_the_test():
    c = StepController(LevelPlan((3,), warmup_requests=0, requests_per_level=1, drain_timeout=10))
    ticks = [c.tick(now, lambda level: 1 if now else 0, lambda: 2) for now in (0, 1, 5, 11)]
    assert ticks == [3, 3, 3, None]
    assert [(ch.kind, ch.reason) for ch in c.take_changes()][-1] == ("drained", "drain_timeout")


def test_an_open_loop_plan_keeps_its_users_and_says_each_level_rate():
    plan = LevelPlan.open_loop((5.0, 20.0), 100, warmup_requests=1, requests_per_level=2)
    c = StepController(plan)
    assert run_ticks(c, [(0, {}), (1, {0: 2}), (2, {0: 3}), (3, {1: 3})]) == [100, 100, 100, None]
    starts = [(ch.level, ch.users, ch.rate) for ch in c.take_changes() if ch.kind == "start"]
    assert starts == [(0, 100, 5.0), (1, 100, 20.0)]
    assert LevelPlan((4, 8)).rate(0) is None  # a concurrency plan has no rates
