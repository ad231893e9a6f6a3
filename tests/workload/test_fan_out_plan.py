"""Subagent fan-out as planned offline (`workload.agent_tools`): which tool-calling turns fan out
(a seeded share of a top-level session's, never a subagent's), and how K subagents' answers
become the results of the parent's calls."""

from __future__ import annotations

import random

import pytest

from vllm_load.user_values import SettingsError
from vllm_load.workload.agent_tools import MAX_FAN_OUT, AgenticPlan, answers_for_calls


def test_a_share_of_top_level_turns_fans_out_and_no_subagent_does():
    plan = AgenticPlan.of(8, "100", "16", "auto", fan_out=3, fan_out_share=0.25)
    rng = random.Random(7)
    draws = [plan.draw_fan_out(rng, depth=0) for _ in range(4000)]
    assert set(draws) == {0, 3}
    assert 0.22 < draws.count(3) / len(draws) < 0.28
    again = random.Random(7)
    assert draws[:50] == [plan.draw_fan_out(again, depth=0) for _ in range(50)]  # seeded
    assert all(plan.draw_fan_out(rng, depth=1) == 0 for _ in range(200))
    always = AgenticPlan.of(8, "100", "16", "auto", fan_out=2, fan_out_share=1.0)
    assert always.draw_fan_out(rng, 0) == 2 and always.describe()["fan_out"] == 2
    never = AgenticPlan.of(8, "100", "16", "auto")
    assert never.draw_fan_out(rng, 0) == 0


def test_subagents_answer_the_calls_in_turn():
    assert answers_for_calls(["x", "y", "z"], 1) == ["x\n\ny\n\nz"]
    assert answers_for_calls(["x", "y", "z"], 2) == ["x\n\nz", "y"]
    assert answers_for_calls(["x"], 3) == ["x", None, None]  # a call no subagent answered
    assert answers_for_calls([None, "y"], 2) == [None, "y"]  # a subagent without an answer


@pytest.mark.parametrize(
    "fan_out, share, words",
    [
        (
            MAX_FAN_OUT + 1,
            0.5,
            f"--fan-out must be a whole number of subagents from 0 .* {MAX_FAN_OUT}",
        ),
        ("-1", 0.5, "--fan-out must be"),
        (2, 1.5, "--fan-out-share must be a share of turns from 0 to 1"),
        (2, "nan", "--fan-out-share must be"),
    ],
)
def test_bad_fan_out_options_are_one_line(fan_out, share, words):
    with pytest.raises(SettingsError, match=words):
        AgenticPlan.of(8, "100", "16", "auto", fan_out=fan_out, fan_out_share=share)
