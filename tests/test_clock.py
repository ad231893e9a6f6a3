"""WallClock: perf_counter readings to wall-clock seconds."""

import time

from vllm_load.clock import WallClock


def test_wall_of_a_perf_reading_matches_time_time():
    clock = WallClock()
    for _ in range(200):
        before = time.time()
        wall = clock.wall(time.perf_counter())
        after = time.time()
        assert before - 1e-3 <= wall <= after + 1e-3
    # latencies keep their perf_counter precision: a difference of walls is the difference of readings
    assert abs(clock.wall(100.0) - clock.wall(99.5) - 0.5) < 1e-6


def test_reanchors_after_a_while(monkeypatch):
    import vllm_load.clock as clock_module

    monkeypatch.setattr(clock_module, "REANCHOR_SECONDS", 0.0)
    clock = WallClock()
    clock.wall(time.perf_counter())
    first = clock._next_anchor
    time.sleep(0.01)
    clock.wall(time.perf_counter())
    assert clock._next_anchor > first
