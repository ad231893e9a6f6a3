"""The login's pace (`vllm_load.web.throttle`), on a hand-turned clock: what guessing the web UI's
password costs from one address and from many. The same throttle in front of a running UI is
in test_webui_auth.py."""

from __future__ import annotations

import pytest

from vllm_load.web import throttle
from vllm_load.web.throttle import LoginThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def guess_as_fast_as_allowed(gate: LoginThrottle, clock: Clock, clients, guesses: int) -> int:
    """Wrong passwords, each as soon as the throttle lets it be checked, round-robin over
    `clients`; returns how many were turned away unchecked (the clock moves as they wait)."""
    turned_away = 0
    for i in range(guesses):
        client = clients[i % len(clients)]
        wait = gate.wait_for(client)
        if wait > 0:
            turned_away += 1  # (a try now: refused unchecked; the attacker waits instead)
            clock.now += wait
        assert gate.wait_for(client) == 0
        gate.failed(client)
    return turned_away


def test_100_wrong_passwords_from_one_address_take_hours():
    clock = Clock()
    gate = LoginThrottle(clock=clock)
    start = clock.now
    guess_as_fast_as_allowed(gate, clock, ["10.0.0.9"], 100)
    assert clock.now - start > 7 * 3600  # it took 0.86 s without the throttle


def test_the_first_wrong_passwords_are_free_then_the_wait_doubles_to_a_cap():
    clock = Clock()
    gate = LoginThrottle(clock=clock)
    for _ in range(throttle.FREE_FAILURES - 1):
        assert gate.failed("a") == 0 and gate.wait_for("a") == 0
    waits = []
    for _ in range(12):
        waits.append(gate.failed("a"))
        clock.now += waits[-1]
    assert waits[:4] == [1.0, 2.0, 4.0, 8.0]
    assert max(waits) == throttle.MAX_DELAY and waits[-1] == throttle.MAX_DELAY
    # another address is not held up by this one; a right password clears the record
    assert gate.wait_for("b") == 0
    gate.succeeded("a")
    assert gate.wait_for("a") == 0
    assert gate.failed("a") == 0  # (free again)


def test_a_try_that_comes_too_early_is_refused_and_the_wait_runs_out():
    clock = Clock()
    gate = LoginThrottle(clock=clock)
    for _ in range(throttle.FREE_FAILURES):
        gate.failed("a")
    assert gate.wait_for("a") == pytest.approx(1.0)
    clock.now += 0.4
    assert gate.wait_for("a") == pytest.approx(0.6)
    clock.now += 0.6
    assert gate.wait_for("a") == 0


def test_many_addresses_share_a_bound_on_wrong_passwords():
    clock = Clock()
    gate = LoginThrottle(clock=clock)
    clients = [f"10.1.{i // 250}.{i % 250}" for i in range(1000)]  # each tries once
    start = clock.now
    turned_away = guess_as_fast_as_allowed(gate, clock, clients, 1000)
    assert turned_away == 1000 - throttle.GLOBAL_BURST
    # past the burst, GLOBAL_RATE per second at most, however many addresses guess
    assert clock.now - start == pytest.approx((1000 - throttle.GLOBAL_BURST) / throttle.GLOBAL_RATE)


def test_the_addresses_remembered_are_bounded():
    clock = Clock()
    gate = LoginThrottle(clock=clock)
    for i in range(throttle.MAX_TRACKED + 50):
        clock.now += 10  # (the shared bound never bites)
        gate.failed(f"client-{i}")
    assert len(gate) == throttle.MAX_TRACKED
    assert "client-0" not in gate and f"client-{throttle.MAX_TRACKED + 49}" in gate
