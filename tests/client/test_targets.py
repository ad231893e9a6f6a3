"""Several targets (--hosts, a repeated --host): the list of targets, the choice per request, and
a target lost to the end of a run."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
import pytest

from vllm_load.analysis.levels.per_target import TargetFigures, target_findings, target_loss
from vllm_load.cli.run import configure_parser
from vllm_load.client.target_picker import EJECT_AFTER, TargetPicker, target_list
from vllm_load.user_values import SettingsError, hosts_argument

A, B, C = "http://127.0.0.1:8001", "http://127.0.0.1:8002", "http://127.0.0.1:8003"


def test_a_repeated_host_becomes_the_target_list_and_host_its_first():
    parser = argparse.ArgumentParser()
    configure_parser(parser, "run")
    args = parser.parse_args(["--host", A, "--host", B, "--host", C])
    assert args.host == A and args.hosts == [A, B, C]
    assert parser.parse_args(["--host", A]).hosts == []


def test_hosts_are_checked_and_each_given_once():
    assert hosts_argument([f"{A}/", f"{B},{C}"]) == [A, B, C]
    with pytest.raises(SettingsError, match="twice"):
        hosts_argument(f"{A},{A}/")
    with pytest.raises(SettingsError, match="scheme|not a URL"):
        hosts_argument("127.0.0.1:8000")


def test_the_target_list_puts_host_first_unless_hosts_name_it():
    assert target_list(A, []) == [A]
    assert target_list(B, [A, B]) == [A, B]
    assert target_list(C + "/", [A, B]) == [C, A, B]


def test_round_robin_takes_the_targets_in_turn():
    picker = TargetPicker([A, B, C])
    assert [picker.pick() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert picker.in_flight == [3, 2, 2]


def test_least_loaded_takes_the_target_with_fewest_in_flight():
    picker = TargetPicker([A, B], "least-loaded")
    assert [picker.pick() for _ in range(4)] == [0, 1, 0, 1]
    picker.done(1)
    picker.done(1)
    assert picker.pick() == 1 and picker.pick() == 1  # B had none in flight
    assert picker.pick() == 0  # a tie: the next in turn


def rows(outcomes: list[tuple[float, int, str]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"start_ts": t, "end_ts": t + 0.5, "ok": ok, "error": e, "level": int(t // 10)}
            for t, ok, e in outcomes
        ]
    )


def test_a_target_whose_requests_fail_to_the_end_is_lost():
    history = [(t, 1, "") for t in range(0, 12)] + [(t, 0, "connect") for t in (13, 14, 15, 16)]
    loss = target_loss(rows(history))
    assert loss is not None and loss.failed == 4 and loss.level == 1
    assert loss.last_ok == 11 and loss.errors == "connect 4"


def test_a_target_finishing_its_streams_while_refusing_connections_is_lost():
    """A replica stopping refuses new connections while it finishes the streams it has: the
    failures that got it ejected (`EJECT_AFTER`) can end before its last success does."""
    history = [(t, 1, "") for t in range(0, 12)]
    history += [(12.0, 0, "connect"), (12.1, 0, "connect"), (12.2, 0, "connect")]
    requests = rows(history)
    requests.loc[11, "end_ts"] = 12.3  # the last success, started at 11, streamed to 12.3
    loss = target_loss(requests)
    assert loss is not None and loss.failed == 3 and loss.first_failed == 12.0


def test_failures_followed_by_a_success_or_too_few_are_no_loss():
    assert target_loss(rows([(0, 1, ""), (1, 0, "connect"), (2, 0, "connect"), (3, 1, "")])) is None
    assert target_loss(rows([(0, 1, ""), (1, 0, "connect"), (2, 0, "http_status")])) is None


def test_a_target_that_stops_answering_is_ejected_and_gets_no_new_request():
    """Round-robin kept sending a dead replica its share of requests to the end of the run."""
    picker = TargetPicker([A, B, C])
    for _ in range(EJECT_AFTER - 1):
        assert picker.pick() == 0 and not picker.done(0, "connect")
        picker.done(picker.pick())
        picker.done(picker.pick())
    assert picker.pick() == 0
    in_flight = picker.pick(), picker.pick()  # (still in flight when B is ejected)
    assert picker.done(0, "connect")  # the last in a row: ejected
    assert 0 in picker.ejected
    assert [picker.pick() for _ in range(6)] == [1, 2, 1, 2, 1, 2]
    for index in in_flight:
        picker.done(index)
    assert picker.in_flight == [0, 3, 3]  # the ejected target's requests were all counted out


def test_least_loaded_no_longer_pours_requests_into_a_target_that_fails_at_once():
    picker = TargetPicker([A, B], "least-loaded")
    assert picker.pick() == 0 and picker.pick() == 1  # B's request takes its time
    picker.done(0, "connect")  # A's fails at once: it has the fewest in flight again
    for _ in range(EJECT_AFTER - 1):
        assert picker.pick() == 0
        picker.done(0, "connect")
    assert picker.ejected == {0}
    assert [picker.pick() for _ in range(5)] == [1] * 5


def test_a_target_that_answers_badly_or_recovers_or_is_the_last_is_not_ejected():
    picker = TargetPicker([A, B])
    for error in ("http_status", "timeout_ttft", "connect", "connect", "", "connect", "connect"):
        picker.pick()
        picker.done(0, error)
    assert not picker.ejected  # never EJECT_AFTER connects in a row
    for _ in range(EJECT_AFTER):
        picker.done(0, "connect")
    for _ in range(EJECT_AFTER + 2):
        assert not picker.done(1, "connect")  # the last one left: the run goes on failing
    assert picker.ejected == {0} and picker.pick() == 1


def test_the_findings_say_when_new_requests_stopped_going_to_a_lost_target():
    history = [(t, 1, "") for t in range(0, 12)] + [(t, 0, "connect") for t in (13, 14, 15)]
    starts = np.array([t for t, _, _ in history] + list(range(16, 40)), dtype=float)
    loss = target_loss(rows(history), starts)
    assert loss is not None and loss.last_sent == 15 and loss.sent_after == 24
    target = TargetFigures(A, pd.DataFrame(), None, "", loss)
    (line,) = target_findings("r1", [target])
    assert "was lost during level 1: its 3 requests started after its last success" in line
    assert "no new request went to it after 00:00:15 UTC" in line
    assert "the 24 the run sent after that all went to the other targets" in line


def test_a_lost_target_that_does_not_answer_at_the_end_fails_the_run(monkeypatch):
    """Ejected, a lost target leaves the levels whole: the run said nothing of it and exited 0."""
    from vllm_load.cli import run_end as run_cli

    monkeypatch.setattr(run_cli, "still_answers", lambda url, api_key: url == A)
    run = {"targets": [{"url": A}, {"url": B}, {"url": C}], "end_checks": {"lost_targets": [B]}}
    line = run_cli.lost_targets_line(run, None)
    assert line.startswith(f"target {B} was lost during the run and does not answer now")
    assert C not in line  # not found lost in the run: its silence now is not the run's
    assert run_cli.lost_targets_line({**run, "end_checks": {"lost_targets": []}}, None) == ""
    unrecorded = run_cli.lost_targets_line({**run, "end_checks": "damaged"}, None)
    assert B in unrecorded and C in unrecorded  # every target that does not answer
    assert run_cli.lost_targets_line({"targets": [{"url": B}]}, None) == ""  # one target
