"""A reasoning model on the simulator (--reasoning-tokens): the first N tokens of a chat
completion stream in the reasoning field vLLM writes (`reasoning`, or older vLLM's
`reasoning_content`), the rest in `content`; usage counts them all and says how many were
reasoning; timing is that of any other token."""

from __future__ import annotations

import pytest
from support.host_wait import HostWait, within
from support.sim_http import call, sse_events

from vllm_load.client.sse import SseMeter
from vllm_load.sim.child import SimulatorProcess
from vllm_load.sim.trace import read_trace
from vllm_load.tokenization.sim import SimTokenizer

MODEL = "sim-llama-8b"
MESSAGES = [{"role": "user", "content": "Think first, then answer."}]
STREAM = {"stream": True, "stream_options": {"include_usage": True}}


@pytest.fixture(scope="module")
def thinking():
    """Newer vLLM: the `reasoning` field, with reasoning_tokens in the usage."""
    with SimulatorProcess("--echo", "--reasoning-tokens", "6") as sim:
        yield sim


@pytest.fixture(scope="module")
def older():
    """Older vLLM: `reasoning_content`, and no reasoning_tokens in the usage."""
    args = ("--reasoning-field", "reasoning_content", "--no-reasoning-usage")
    with SimulatorProcess("--echo", "--reasoning-tokens", "6", *args) as sim:
        yield sim


def chat(sim, **body):
    return call(
        sim.url + "/v1/chat/completions",
        {"model": MODEL, "messages": MESSAGES, "ignore_eos": True, **body},
    )


def tokens(text: str | None) -> int:
    return len(SimTokenizer().encode(text or ""))


def deltas(text: str) -> list[dict]:
    """The delta of every token chunk (the role announcement and usage left out)."""
    events = sse_events(text)
    assert events[-1] == "[DONE]" and events[0]["choices"][0]["delta"] == {
        "role": "assistant",
        "content": "",
    }
    return [e["choices"][0]["delta"] for e in events[1:-1] if e["choices"]]


def usage_of(text: str) -> dict:
    return sse_events(text)[-2]["usage"]


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_stream_reasoning_deltas_then_content(thinking, older, field):
    sim = thinking if field == "reasoning" else older
    status, text = chat(sim, max_tokens=10, **STREAM)
    assert status == 200
    got = deltas(text)
    assert len(got) == 10
    # one token per chunk: six in the reasoning field alone, then four in content alone
    assert [list(d) for d in got] == [[field]] * 6 + [["content"]] * 4
    assert all(tokens(d.get(field) or d.get("content")) == 1 for d in got)
    # mid-stream chunks say "finish_reason":null as vLLM writes it (a client's fast path keys on it)
    chunks = text.split("\n\n")[1:11]
    assert all('"finish_reason":null' in c for c in chunks[:9])
    assert '"finish_reason":"length"' in chunks[9]
    counts = usage_of(text)
    assert (
        counts["completion_tokens"] == 10 and counts["total_tokens"] == counts["prompt_tokens"] + 10
    )
    if field == "reasoning":
        assert counts["completion_tokens_details"] == {"reasoning_tokens": 6}
    else:  # --no-reasoning-usage: a vLLM that does not count them
        assert "completion_tokens_details" not in counts


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_non_streamed_message_has_reasoning_then_content(thinking, older, field):
    sim = thinking if field == "reasoning" else older
    status, body = chat(sim, max_tokens=10)
    assert status == 200
    message = body["choices"][0]["message"]
    other = "reasoning_content" if field == "reasoning" else "reasoning"
    assert other not in message and message["role"] == "assistant"
    assert tokens(message[field]) == 6 and tokens(message["content"]) == 4
    assert body["usage"]["completion_tokens"] == 10
    if field == "reasoning":
        assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 6}
    else:
        assert "completion_tokens_details" not in body["usage"]


def test_max_tokens_below_the_reasoning_makes_every_token_reasoning(thinking):
    status, text = chat(thinking, max_tokens=4, **STREAM)
    assert status == 200
    assert [list(d) for d in deltas(text)] == [["reasoning"]] * 4
    assert usage_of(text)["completion_tokens_details"] == {"reasoning_tokens": 4}
    status, body = chat(thinking, max_tokens=4)
    message = body["choices"][0]["message"]
    # no answer began: vLLM's reasoning parsers give null content
    assert message["content"] is None and tokens(message["reasoning"]) == 4
    assert body["usage"]["completion_tokens"] == 4
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 4}


def test_an_early_eos_inside_the_reasoning_counts_what_was_generated():
    # every token from min_tokens on is the EOS: 3 tokens, the last of them the EOS
    args = ("--echo", "--reasoning-tokens", "6", "--eos-probability", "1")
    with SimulatorProcess(*args) as sim:
        status, text = call(
            sim.url + "/v1/chat/completions",
            {"messages": MESSAGES, "max_tokens": 10, "min_tokens": 2, **STREAM},
        )
    assert status == 200
    got = deltas(text)
    assert [list(d) for d in got] == [["reasoning"]] * 3 and got[-1]["reasoning"] == ""
    assert '"finish_reason":"stop"' in text
    assert usage_of(text)["completion_tokens"] == 3
    assert usage_of(text)["completion_tokens_details"] == {"reasoning_tokens": 3}


def test_a_chunk_across_the_switch_carries_both_fields():
    args = ("--echo", "--reasoning-tokens", "2", "--tokens-per-chunk", "2")
    with SimulatorProcess(*args) as sim:
        status, text = chat(sim, max_tokens=5, **STREAM)
    assert status == 200
    got = deltas(text)
    # token 0 alone, tokens 1-2 (reasoning, then answer), tokens 3-4 (answer)
    assert [sorted(d) for d in got] == [["reasoning"], ["content", "reasoning"], ["content"]]
    assert tokens(got[1]["reasoning"]) == 1 and tokens(got[1]["content"]) == 1
    assert list(got[1]) == ["content", "reasoning"]  # vLLM's DeltaMessage field order
    assert usage_of(text)["completion_tokens_details"] == {"reasoning_tokens": 2}


def test_the_client_meter_counts_every_reasoning_and_answer_token(thinking):
    status, text = chat(thinking, max_tokens=40, **STREAM)
    assert status == 200
    meter = SseMeter(chat=True)
    meter.consume(bytearray(text.encode()), 1.0)
    assert len(meter.chunk_times) == 40 and meter.done and meter.finish_reason == "length"
    assert meter.usage is not None and meter.usage["completion_tokens_details"] == {
        "reasoning_tokens": 6
    }


def test_completions_have_no_reasoning(thinking):
    status, body = call(
        thinking.url + "/v1/completions",
        {"model": MODEL, "prompt": "Once", "max_tokens": 8, "ignore_eos": True},
    )
    assert status == 200 and tokens(body["choices"][0]["text"]) == 8
    assert "completion_tokens_details" not in body["usage"]
    status, text = call(
        thinking.url + "/v1/completions",
        {"model": MODEL, "prompt": "Once", "max_tokens": 8, "ignore_eos": True, **STREAM},
    )
    events = sse_events(text)
    assert all("reasoning" not in str(e) for e in events)
    assert len([e for e in events[:-1] if e["choices"]]) == 8


def test_reasoning_tokens_cost_a_decode_step_like_any_other(tmp_path):
    trace = str(tmp_path / "trace.jsonl")
    args = ("--ttft", "0.05", "--itl", "0.05", "--reasoning-tokens", "5", "--trace", trace)
    with SimulatorProcess(*args) as sim:
        host = HostWait(simulator=sim.proc.pid)
        before = host.read()
        status, text = call(
            sim.url + "/v1/chat/completions",
            {"messages": MESSAGES, "max_tokens": 10, "ignore_eos": True, **STREAM},
            headers={"X-Request-Id": "r"},
        )
        after = host.read()
    assert status == 200 and [list(d) for d in deltas(text)][4:6] == [["reasoning"], ["content"]]
    record = read_trace(trace)["r"]
    gaps = [b - a for a, b in zip(record.tokens, record.tokens[1:])]
    assert len(gaps) == 9
    # the switch from reasoning to answer (gap 4) is one inter-token step like every other; the
    # worst gap held, or its excess covered by the simulator's own wait for a CPU (two suites
    # side by side, load ~6: a gap of 94 ms)
    worst = max(range(len(gaps)), key=lambda i: abs(gaps[i] - 0.05))
    shown = [round(gap * 1000, 1) for gap in gaps]
    within(gaps[worst], 0.05, 0.02, before, after, f"inter-token gap {worst} of {shown} ms")


def test_the_option_is_checked():
    from vllm_load.cli.main import build_parser
    from vllm_load.sim.cli import ConfigError, build_config

    parser = build_parser()
    with pytest.raises(ConfigError, match="--reasoning-tokens"):
        build_config(parser.parse_args(["sim", "--reasoning-tokens", "-1"]))
    with pytest.raises(SystemExit):
        parser.parse_args(["sim", "--reasoning-field", "thoughts"])
    config = build_config(parser.parse_args(["sim"]))
    assert not config.reasoning.enabled  # off by default: today's chat output
