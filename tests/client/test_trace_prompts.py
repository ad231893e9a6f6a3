"""A trace request asking for a prompt shorter than the target allows is sent at the shortest
exact length, and run.json's `trace` counts the prompt tokens as sent, block prompts or not."""

from __future__ import annotations

from vllm_load.client.prompts import PromptFactory, calibrate
from vllm_load.client.replay import TraceReplay, replay_header
from vllm_load.client.token_counters import LocalTokenCounter
from vllm_load.settings import Settings
from vllm_load.tokenization.sim import SimTokenizer
from vllm_load.workload.traces.model import Trace, TraceRequest


def test_the_header_counts_the_prompt_tokens_each_request_is_sent_with():
    counter = LocalTokenCounter(SimTokenizer())
    plan = calibrate(counter, "chat", 1000)
    prompts = PromptFactory(plan, seed=1)
    requests = (
        TraceRequest(0.0, 1, 8),  # shorter than any prompt: the factory's shortest
        TraceRequest(0.1, 1, 8, (7,)),  # shorter, in blocks: the template, lead and one atom
        TraceRequest(0.2, 700, 8),
        TraceRequest(0.3, 600, 8, (7, 8)),
    )
    segment = Trace("t.jsonl", "mooncake", requests)
    replay = TraceReplay.__new__(TraceReplay)  # (its segment is this one, not a file's)
    replay.segment, replay._blocks, replay._salt, replay.lengthened = segment, None, 3, 0
    sent = []
    for request in requests:
        content, tokens = replay.prompt(request, prompts, plan)
        assert counter.count_input(content, "chat") == tokens  # exact, as the server counts
        sent.append(tokens)
    assert sent[0] == prompts.min_tokens > plan.overhead + 1 == sent[1]
    assert sent[2:] == [700, 600] and replay.lengthened == 2
    header = replay_header(Settings(trace="t.jsonl"), segment, plan, {})
    assert header["prompt_tokens"] == sum(sent)
