"""A load process reports its requests' starts with the time up to which they are all in: a
level follows its first requests to start, and may end only once every process has reported
past the last of them. A request due but not yet sent (its user queued for the pacer, or at its
arrival) starts at a time already past: the reported time must not pass it."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from vllm_load.client.clock import WALL_CLOCK
from vllm_load.client.context import LoadContext


@pytest.fixture
def context() -> LoadContext:
    return LoadContext(SimpleNamespace(parsed_options=None, runner=None))


def test_with_nothing_pending_the_starts_are_all_in_up_to_now(context):
    before = WALL_CLOCK.wall(time.perf_counter())
    context.starts.append(before - 0.5)
    until, starts = context.take_starts()
    assert starts == [before - 0.5] and until >= before


def test_a_user_queued_since_an_earlier_time_holds_the_reported_time_there(context):
    due = WALL_CLOCK.wall(time.perf_counter()) - 0.3
    context.pending_due[1] = due
    until, _ = context.take_starts()
    assert until == due
    context.starts.append(due)  # it is sent, dated when it became due
    context.sent(1)
    until, starts = context.take_starts()
    assert starts == [due] and until > due + 0.29


def test_a_turnover_the_pacer_delayed_backdates_the_next_start_by_as_much(context):
    context.pending_late[7] = 0.2  # its next request, whenever sent, starts 0.2 s earlier
    now = WALL_CLOCK.wall(time.perf_counter())
    until, _ = context.take_starts()
    assert now - 0.21 < until <= now - 0.2 + 0.01
    context.sent(7)
    assert context.take_starts()[0] >= now
