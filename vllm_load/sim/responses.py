"""The bytes of vLLM's OpenAI responses: usage, whole bodies and SSE chunks (built from
per-request templates, never a dict per chunk), and the writer that puts a stream's pieces on
the connection."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from .config import ReasoningConfig

_WRITE_BUFFER_LIMIT = 64 * 1024  # as aiohttp: beyond this a writer waits for the client to read


def model_card(name: str, root: str, created: int, max_model_len: int, perm_id: str) -> bytes:
    """The body of GET /v1/models, serving one model."""
    card = {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": root,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [
            {
                "id": f"modelperm-{perm_id}",
                "object": "model_permission",
                "created": created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }
    return orjson.dumps({"object": "list", "data": [card]})


def usage(
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int | None = None,
    reasoning_tokens: int | None = None,
) -> dict[str, Any]:
    """The usage object; `cached_tokens` only with --enable-prompt-tokens-details, and then 0 too
    where no token was cached, as vLLM 0.32's V1 engine counts every request's (an int from 0). `reasoning_tokens`, when given, is how many
    of the completion tokens were reasoning (a vLLM that counts them says so in
    `completion_tokens_details`; `completion_tokens` counts them either way)."""
    counts: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": (
            None if cached_tokens is None else {"cached_tokens": cached_tokens}
        ),
    }
    if reasoning_tokens is not None:
        counts["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return counts


class ResponseRenderer:
    """Bytes of one request's responses; the per-request parts are joined once, at creation.

    With `reasoning` (a reasoning model's chat completion), a reasoning token's delta carries its
    text in the reasoning field instead of `content`, as vLLM's reasoning parsers write it."""

    __slots__ = (
        "chat",
        "rid",
        "created",
        "model",
        "_prefix",
        "_head",
        "_field",
        "_reasoning_prefix",
        "_reasoning_usage",
    )

    def __init__(
        self,
        chat: bool,
        rid: str,
        model: str,
        model_json: bytes,
        created: int | None = None,
        reasoning: ReasoningConfig | None = None,
    ) -> None:
        self.chat = chat
        self.rid = rid
        self.created = int(time.time()) if created is None else created
        self.model = model
        obj = b"chat.completion.chunk" if chat else b"text_completion"
        self._head = (
            b'{"id":"'
            + rid.encode()
            + b'","object":"'
            + obj
            + b'","created":'
            + str(self.created).encode()
            + b',"model":'
            + model_json
            + b',"choices":['
        )
        self._prefix = (
            b"data: "
            + self._head
            + (b'{"index":0,"delta":{"content":' if chat else b'{"index":0,"text":')
        )
        self._field = reasoning.field if reasoning is not None and chat else None
        self._reasoning_prefix = self._prefix
        if self._field is not None:
            self._reasoning_prefix = (
                b"data: " + self._head + b'{"index":0,"delta":{"' + self._field.encode() + b'":'
            )
        self._reasoning_usage = (
            self._field is not None and reasoning is not None and reasoning.usage
        )

    def role_chunk(self) -> bytes:
        return (
            b"data: "
            + self._head
            + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
        )

    def content_chunk(
        self, text_json: bytes, finish_reason: str | None = None, reasoning: bool = False
    ) -> bytes:
        """An SSE event carrying `text_json` (a JSON string literal): answer text, or with
        `reasoning` reasoning text."""
        close = b"}" if self.chat else b""
        prefix = self._reasoning_prefix if reasoning else self._prefix
        return prefix + text_json + close + self._tail(finish_reason)

    def delta_chunk(self, delta_json: bytes, finish_reason: str | None = None) -> bytes:
        """A chat SSE event whose delta is `delta_json` (a JSON object: a tool call's part)."""
        return (
            b"data: " + self._head + b'{"index":0,"delta":' + delta_json + self._tail(finish_reason)
        )

    def switch_chunk(
        self, reasoning_json: bytes, content_json: bytes, finish_reason: str | None = None
    ) -> bytes:
        """An SSE event whose tokens straddle the end of the reasoning: one delta with both
        fields, content first, as vLLM's DeltaMessage serializes them."""
        assert self._field is not None  # only a reasoning renderer has a switch
        return (
            self._prefix
            + content_json
            + b',"'
            + self._field.encode()
            + b'":'
            + reasoning_json
            + b"}"
            + self._tail(finish_reason)
        )

    def _tail(self, finish_reason: str | None) -> bytes:
        if finish_reason is None:
            return (
                b',"logprobs":null,"finish_reason":null}]}\n\n'
                if self.chat
                else b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
            )
        return (
            b',"logprobs":null,"finish_reason":"'
            + finish_reason.encode()
            + b'","stop_reason":null}]}\n\n'
        )

    def _usage(
        self, prompt: int, completion: int, cached: int | None, reasoning: int
    ) -> dict[str, Any]:
        return usage(prompt, completion, cached, reasoning if self._reasoning_usage else None)

    def usage_chunk(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int | None = None,
        reasoning_tokens: int = 0,
    ) -> bytes:
        return (
            b"data: "
            + self._head
            + b'],"usage":'
            + orjson.dumps(
                self._usage(prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens)
            )
            + b"}\n\n"
        )

    def full(
        self,
        text: str,
        finish_reason: str,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int | None = None,
        reasoning: str = "",
        reasoning_tokens: int = 0,
        tool_calls: list[dict[str, Any]] | None = None,
    ) -> bytes:
        """The non-streaming response body; `text` is the answer, `reasoning` the reasoning text
        of its first `reasoning_tokens` tokens (a reasoning renderer's); with `tool_calls`, the
        reply is those calls (no text)."""
        if self.chat:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "tool_calls": [],
                "reasoning_content": None,
            }
            if self._field is not None:
                # vLLM's reasoning parsers give no content (null) when the answer never began
                message["content"] = text or None
                del message["reasoning_content"]
                message[self._field] = reasoning
            if tool_calls:
                message["content"], message["tool_calls"] = None, tool_calls
                finish_reason = "tool_calls"
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
            obj = "text_completion"
        return orjson.dumps(
            {
                "id": self.rid,
                "object": obj,
                "created": self.created,
                "model": self.model,
                "choices": [choice],
                "usage": self._usage(
                    prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens
                ),
                "system_fingerprint": None,
                "prompt_logprobs": None,
            }
        )


class BodyWriter:
    """Writes pieces of a prepared streaming response straight to the connection.

    `StreamResponse.write` is a coroutine through three layers of aiohttp for every token; this
    is the same bytes (chunked framing when the response is chunked) in one `transport.write`.
    """

    __slots__ = ("transport", "chunked")

    def __init__(self, transport: asyncio.Transport | None, chunked: bool) -> None:
        self.transport = transport
        self.chunked = chunked  # aiohttp frames an HTTP/1.1 stream of unknown length in chunks

    def write(self, data: bytes) -> bool:
        """Send `data`; True when the connection's buffer is full and the caller should drain."""
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        transport.write(b"%x\r\n%b\r\n" % (len(data), data) if self.chunked else data)
        return transport.get_write_buffer_size() > _WRITE_BUFFER_LIMIT
