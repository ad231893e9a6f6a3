"""A trace request asking for a prompt shorter than the target allows is sent at the shortest
exact length, and run.json's `trace` counts the prompt tokens as sent, block prompts or not."""

from __future__ import annotations

import json

from vllm_load.client.prompts import PromptFactory, calibrate
from vllm_load.client.replay_share import LevelShare, TraceReplay, replay_header
from vllm_load.client.token_counters import LocalTokenCounter
from vllm_load.settings import Settings
from vllm_load.tokenization.sim import SimTokenizer
from vllm_load.workload.traces.replay_plan import TraceRequest


def test_the_header_counts_the_prompt_tokens_each_request_is_sent_with(tmp_path):
    counter = LocalTokenCounter(SimTokenizer())
    plan = calibrate(counter, "chat", 1000)
    prompts = PromptFactory(plan, seed=1)
    requests = (
        TraceRequest(0.0, 1, 8),  # shorter than any prompt: the factory's shortest
        TraceRequest(0.1, 1, 8, (7,)),  # shorter, in blocks: the template, lead and one atom
        TraceRequest(0.2, 700, 8),
        TraceRequest(0.3, 600, 8, (7, 8)),
    )
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "timestamp": int(r.at * 1000),
                    "input_length": r.input_tokens,
                    "output_length": r.output_tokens,
                    "hash_ids": list(r.hash_ids),
                }
            )
            + "\n"
            for r in requests
        )
    )
    settings = Settings(trace=str(path))
    replay = TraceReplay(settings)
    segment = replay.segment
    assert [(r.input_tokens, r.hash_ids) for r in segment.requests] == [
        (r.input_tokens, r.hash_ids) for r in requests
    ]
    replay.share(LevelShare(0, "trace", 0.0, salt=3))
    sent = []
    for request in segment.requests:
        content, tokens = replay.prompt(request, prompts, plan)
        assert counter.count_input(content, "chat") == tokens  # exact, as the server counts
        sent.append(tokens)
    assert sent[0] == prompts.min_tokens > plan.overhead + 1 == sent[1]
    assert sent[2:] == [700, 600] and replay.lengthened == 2
    header = replay_header(settings, segment, plan, {})
    assert header["prompt_tokens"] == sum(sent)
