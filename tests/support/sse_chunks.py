"""Chat-completion SSE chunks as vLLM streams them, for the stream-reading tests."""

import orjson


def chat_chunk(
    content=None, role=None, finish=None, usage=None, choices=True, reasoning=None, key="reasoning"
) -> bytes:
    """One chunk; `reasoning` goes under `key` (`reasoning`, or older vLLM's
    `reasoning_content`). Only the fields given are written, as vLLM does (exclude_unset)."""
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta[key] = reasoning
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if choices
        else [],
    }
    if usage:
        body["usage"] = usage
    return b"data: " + orjson.dumps(body) + b"\n\n"


STREAM = [
    chat_chunk(role="assistant", content=""),
    chat_chunk(content="Hello"),
    chat_chunk(content=" world"),
    chat_chunk(content="!", finish="length"),
    chat_chunk(
        choices=False, usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    ),
    b"data: [DONE]\n\n",
]
