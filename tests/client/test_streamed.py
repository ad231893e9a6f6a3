"""The tokens a load process's requests have received so far (the live tok/s): in flight from
their SSE meters' content chunks, at their end from their usage."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from vllm_load.client.endpoint import RequestSpec
from vllm_load.client.sse import SseMeter
from vllm_load.client.streamed import StreamedTokens


@dataclass(eq=False)
class Request:
    """What `StreamedTokens` reads of a `request.MeasuredRequest`: its spec, meter and usage."""

    spec: RequestSpec
    meter: SseMeter = field(default_factory=SseMeter)
    usage: dict | None = None

    def chunks(self, n: int) -> Request:
        self.meter.chunk_times.extend([0.0] * n)
        return self

    def ends(self, prompt: int | None, output: int | None) -> Request:
        self.usage = {"prompt_tokens": prompt, "completion_tokens": output}
        return self


def spec(prompt=None, output=None, user_class="Chat", stream=True) -> RequestSpec:
    return RequestSpec("chat", stream, b"{}", prompt, output, user_class=user_class)


def test_a_stream_counts_its_chunks_as_they_come_and_its_usage_at_the_end():
    tokens = StreamedTokens()
    request = Request(spec(prompt=100, output=40))
    tokens.started(request)
    assert tokens.counts() == {}  # nothing received yet: not even its prompt
    request.chunks(1)
    # the prompt goes along the output (1 of 40 tokens so far), not all at the first token
    assert tokens.counts() == {"Chat": [pytest.approx(100 / 40), 1.0]}
    request.chunks(19)
    assert tokens.counts() == {"Chat": [pytest.approx(50.0), 20.0]}
    request.chunks(20).ends(prompt=100, output=40)
    tokens.ended(request)
    assert tokens.counts() == {"Chat": [100.0, 40.0]}


def test_a_prompt_of_a_request_that_fixed_no_output_length_counts_at_its_first_token():
    tokens = StreamedTokens()
    request = Request(spec(prompt=100))
    tokens.started(request)
    request.chunks(3)
    assert tokens.counts() == {"Chat": [100.0, 3.0]}


def test_a_request_that_says_no_prompt_length_counts_it_at_its_end_from_its_usage():
    tokens = StreamedTokens()
    request = Request(spec())
    tokens.started(request)
    request.chunks(5)
    assert tokens.counts() == {"Chat": [0.0, 5.0]}
    tokens.ended(request.chunks(1).ends(prompt=321, output=6))
    assert tokens.counts() == {"Chat": [321.0, 6.0]}


def test_a_non_streamed_request_counts_at_its_end():
    tokens = StreamedTokens()
    request = Request(spec(prompt=100, output=40, stream=False))
    tokens.started(request)
    assert tokens.counts() == {}
    tokens.ended(request.ends(prompt=100, output=40))
    assert tokens.counts() == {"Chat": [100.0, 40.0]}


def test_a_failed_request_keeps_what_it_received_and_one_that_received_nothing_counts_nothing():
    tokens = StreamedTokens()
    broken, refused = Request(spec(prompt=100, output=40)), Request(spec(prompt=100, output=40))
    tokens.started(broken)
    tokens.started(refused)
    tokens.ended(broken.chunks(10))  # no usage: the stream broke after 10 chunks
    tokens.ended(refused)
    assert tokens.counts() == {"Chat": [pytest.approx(25.0), 10.0]}


def test_chunks_of_several_tokens_count_at_the_process_s_tokens_per_chunk():
    """A server that streams 4 tokens a chunk: once one stream has ended with its usage, the
    chunks of those in flight count 4 tokens each, so their end adds no burst."""
    tokens = StreamedTokens()
    first, second = Request(spec(output=40)), Request(spec(output=40))
    tokens.started(first)
    tokens.started(second)
    second.chunks(5)
    assert tokens.counts()["Chat"][1] == 5.0  # a chunk a token, until a stream says otherwise
    tokens.ended(first.chunks(10).ends(prompt=7, output=40))
    assert tokens.tokens_per_chunk() == 4.0
    assert tokens.counts()["Chat"][1] == 40.0 + 5 * 4.0


def test_counts_are_kept_per_user_class_and_report_carries_a_time():
    tokens = StreamedTokens()
    chat, rag = Request(spec(user_class="Chat")), Request(spec(user_class="Rag"))
    tokens.started(chat)
    tokens.started(rag)
    chat.chunks(2)
    rag.chunks(3)
    at, counts = tokens.report()
    assert counts == {"Chat": [0.0, 2.0], "Rag": [0.0, 3.0]} and at > 1e9
