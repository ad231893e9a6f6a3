"""What an agentic session offers and waits for (`workload.agent_tools`): the tools in OpenAI's
chat format, --tool-choice as the body's field, and seeded draws of the tools' latency (ms in
the length-spec syntax, seconds out) and of each result's length."""

from __future__ import annotations

import random

from vllm_load.workload.agent_tools import TOOL_NAMES, AgenticPlan, tool_choice_field


def test_every_request_offers_the_tools_with_the_choice():
    plan = AgenticPlan.of(8, "uniform:200,2000", "256", "search")
    fields = plan.body_fields()
    assert [t["function"]["name"] for t in fields["tools"]] == list(TOOL_NAMES)
    assert all(t["type"] == "function" and t["function"]["parameters"] for t in fields["tools"])
    assert fields["tool_choice"] == {"type": "function", "function": {"name": "search"}}
    assert tool_choice_field("required") == "required"


def test_draws_are_seeded_and_in_seconds():
    plan = AgenticPlan.of(8, "uniform:200,2000", "uniform:10,20", "auto")
    first = [plan.draw_wait(random.Random(5)) for _ in range(3)]
    assert first == [plan.draw_wait(random.Random(5)) for _ in range(3)]
    rng = random.Random(1)
    waits = [plan.draw_wait(rng) for _ in range(200)]
    assert 0.2 <= min(waits) and max(waits) <= 2.0
    assert all(10 <= plan.draw_result_tokens(rng) <= 20 for _ in range(50))
    assert plan.describe()["tool_latency_ms"] == "uniform:200,2000"
