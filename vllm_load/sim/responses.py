"""The bytes of vLLM's OpenAI responses: usage, whole bodies and SSE chunks (built from
per-request templates, never a dict per chunk), and the writer that puts a stream's pieces on
the connection."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

_WRITE_BUFFER_LIMIT = 64 * 1024  # as aiohttp: beyond this a writer waits for the client to read


def usage(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None
) -> dict[str, Any]:
    """The usage object; `cached_tokens` only with --enable-prompt-tokens-details, and like vLLM
    the details stay null when no token was cached."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens} if cached_tokens else None,
    }


class ResponseRenderer:
    """Bytes of one request's responses; the per-request parts are joined once, at creation."""

    __slots__ = ("chat", "rid", "created", "model", "_prefix", "_head")

    def __init__(
        self, chat: bool, rid: str, model: str, model_json: bytes, created: int | None = None
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

    def role_chunk(self) -> bytes:
        return (
            b"data: "
            + self._head
            + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
        )

    def content_chunk(self, text_json: bytes, finish_reason: str | None = None) -> bytes:
        """An SSE event carrying `text_json` (a JSON string literal)."""
        close = b"}" if self.chat else b""
        if finish_reason is None:
            tail = (
                b',"logprobs":null,"finish_reason":null}]}\n\n'
                if self.chat
                else b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
            )
        else:
            tail = (
                b',"logprobs":null,"finish_reason":"'
                + finish_reason.encode()
                + b'","stop_reason":null}]}\n\n'
            )
        return self._prefix + text_json + close + tail

    def usage_chunk(
        self, prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None
    ) -> bytes:
        return (
            b"data: "
            + self._head
            + b'],"usage":'
            + orjson.dumps(usage(prompt_tokens, completion_tokens, cached_tokens))
            + b"}\n\n"
        )

    def full(
        self,
        text: str,
        finish_reason: str,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int | None = None,
    ) -> bytes:
        """The non-streaming response body."""
        if self.chat:
            choice = {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "tool_calls": [],
                    "reasoning_content": None,
                },
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
                "usage": usage(prompt_tokens, completion_tokens, cached_tokens),
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
