"""Tool calls on the simulator: a chat request that offers `tools` is answered with a call for
a seeded share of `auto` turns, always for `required` or a named function, never for `none`;
streamed as vLLM's `delta.tool_calls` fragments (one per token, the client assembles them into
one valid call), whole as `message.tool_calls`; and a session's next turn, which carries the
call and its result, finds its prefix in the cache."""

from __future__ import annotations

import json

import pytest
from support.sim_http import call, sse_events

from vllm_load.client.tool_calls import assemble, from_message
from vllm_load.sim.child import SimulatorProcess
from vllm_load.workload.agent_tools import TOOLS

MODEL = "sim-llama-8b"
STREAM = {"stream": True, "stream_options": {"include_usage": True}}
PROMPT = [{"role": "user", "content": " ".join(["word"] * 300)}]


@pytest.fixture(scope="module")
def sim():
    args = ("--time-scale", "0.01", "--enable-prompt-tokens-details", "--seed", "7")
    with SimulatorProcess(*args) as sim:
        yield sim


def chat(sim, messages=PROMPT, **body):
    body = {"model": MODEL, "messages": messages, "max_tokens": 12, "ignore_eos": True, **body}
    return call(sim.url + "/v1/chat/completions", body)


def named(name: str) -> dict:
    return {"type": "function", "function": {"name": name}}


def test_a_named_function_is_called_in_vllm_stream_format(sim):
    status, text = chat(sim, tools=list(TOOLS), tool_choice=named("read_file"), **STREAM)
    assert status == 200, text
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    choices = [e["choices"][0] for e in events[1:-1] if e["choices"]]
    fragments = [f for c in choices for f in c["delta"].get("tool_calls", [])]
    assert len(fragments) == 12  # one per generated token
    assert all("content" not in c["delta"] for c in choices)
    assert choices[-1]["finish_reason"] == "tool_calls"
    (made,) = assemble(fragments)
    assert made.name == "read_file" and made.id.startswith("chatcmpl-tool-")
    assert list(json.loads(made.arguments)) == ["path"]  # its required argument
    assert events[-2]["usage"]["completion_tokens"] == 12


def test_required_calls_in_a_whole_reply_and_none_never(sim):
    status, body = chat(sim, tools=list(TOOLS), tool_choice="required")
    assert status == 200, body
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (made,) = from_message(choice["message"]["tool_calls"])
    assert made.name in {t["function"]["name"] for t in TOOLS}
    status, body = chat(sim, tools=list(TOOLS), tool_choice="none")
    assert status == 200 and body["choices"][0]["message"]["tool_calls"] == []
    status, body = chat(sim)  # no tools offered
    assert status == 200 and body["choices"][0]["finish_reason"] == "length"


def test_auto_calls_a_share_of_the_turns(sim):
    called = 0
    for _ in range(40):
        status, body = chat(sim, tools=list(TOOLS), max_tokens=2)
        assert status == 200, body
        called += bool(body["choices"][0]["message"]["tool_calls"])
    assert 8 <= called <= 32, called  # --tool-call-share 0.5 (default)


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"tool_choice": "required"}, "`tools` must be set"),
        ({"tools": list(TOOLS), "tool_choice": named("fly")}, "Tool 'fly' has not been passed"),
        ({"tools": list(TOOLS), "tool_choice": "always"}, "tool_choice must be"),
        ({"tools": "search"}, "tools: Input should be a valid list"),
    ],
)
def test_what_vllm_refuses_is_a_400(sim, fields, words):
    status, body = chat(sim, **fields)
    assert status == 400 and words in body["error"]["message"], body


def test_the_next_turn_finds_the_session_prefix_cached(sim):
    status, first = chat(sim, tools=list(TOOLS), tool_choice="required")
    assert status == 200, first
    message = first["choices"][0]["message"]
    (made,) = from_message(message["tool_calls"])
    history = [
        *PROMPT,
        {"role": "assistant", "content": "", "tool_calls": message["tool_calls"]},
        {"role": "tool", "tool_call_id": made.id, "content": "result " * 40},
    ]
    status, second = chat(sim, history, tools=list(TOOLS), tool_choice="required")
    assert status == 200, second
    usage = second["usage"]
    # the first turn's whole prompt (its full blocks) is cached; the call and the result are not
    assert usage["prompt_tokens"] > first["usage"]["prompt_tokens"] + 40
    cached = (usage["prompt_tokens_details"] or {}).get("cached_tokens", 0)
    assert first["usage"]["prompt_tokens"] - 16 <= cached < first["usage"]["prompt_tokens"] + 16
