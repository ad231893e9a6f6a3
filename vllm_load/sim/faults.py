"""Fault injection: a simulator that misbehaves on purpose, so the client's handling of a
misbehaving server can be tested (all off by default; options `--fault-*`).

Each generation request draws at most one fault, in arrival order, from a generator seeded by
`--seed` (so the sequence of faults is reproducible; which request gets which depends only on
the order in which requests arrive):

| kind | what the client sees |
| --- | --- |
| `error` | an HTTP error (500, 503, or 429 with `Retry-After`) with OpenAI error JSON, at once |
| `reset` | headers and half the output, then a TCP reset (RST) |
| `bad_sse` | half the output, one malformed SSE event, then the rest of the stream |
| `stall` | half the output, then no bytes for `--fault-stall-seconds`, then the rest |
| `slow_first_token` | headers at once, the first token `--fault-slow-first-token-seconds` late, then the normal output |
| `close_after_headers` | headers, then the connection closes (FIN) |

A non-streaming response gets the same fault on its body: the headers (with the full
Content-Length) and half the body, then the reset, stall or close; `bad_sse` sends a
truncated JSON body instead.

Two seams keep this out of the normal path: `open_source` wraps the backend's `TokenSource`
(timing faults), and the server calls `strike` while it writes a stream (connection and
framing faults).
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import orjson
from aiohttp import web

from .backends import Backend, TokenSource, sleep_until
from .config import FaultConfig

#: the error statuses `--fault-error-status` offers, with the OpenAI error type of each
ERROR_TYPES = {500: "InternalServerError", 503: "ServiceUnavailableError", 429: "RateLimitError"}
RETRY_AFTER_SECONDS = 1
#: a chunk cut off in the middle of its JSON (and without `"finish_reason":null`, which a client
#: may take as a content chunk without parsing it)
MALFORMED_EVENT = b'data: {"id":"fault","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" the\n\n'
MALFORMED_BODY = (
    b'{"id":"fault","object":"chat.completion","choices":[{"index":0,"message":{"content":" the'
)
#: faults that strike while the response is being written, after half the output
MID_RESPONSE = frozenset({"reset", "bad_sse", "stall"})
#: faults `strike` applies while a stream is written
STREAM_STRIKES = frozenset({"reset", "bad_sse", "close_after_headers"})


class FaultInjected(ConnectionResetError):
    """The fault ended the response: the handler stops writing, as if the client had left."""


@dataclass(frozen=True)
class Fault:
    """The fault one request gets."""

    kind: str
    seconds: float = 0.0  # stall / slow-first-token delay

    def strike_at(self, total_tokens: int) -> int:
        """Tokens sent before a mid-stream fault strikes: half the output, at least the first token."""
        return 0 if self.kind == "close_after_headers" else max(1, total_tokens // 2)


class FaultPlan:
    """Draws each generation request's fault, and counts what it injected."""

    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self.enabled = config.enabled
        self.injected: Counter[str] = Counter()
        self._rng = random.Random(f"vllm-load-sim-faults-{config.seed}")
        self._bounds: list[tuple[float, str]] = []
        cumulative = 0.0
        for kind, rate in config.rates().items():
            if rate > 0:
                cumulative += rate
                self._bounds.append((cumulative, kind))

    def draw(self) -> Fault | None:
        """The next request's fault, or None (always None, drawing nothing, when faults are off)."""
        if not self.enabled:
            return None
        u = self._rng.random()
        for bound, kind in self._bounds:
            if u < bound:
                self.injected[kind] += 1
                seconds = {
                    "stall": self.config.stall_seconds,
                    "slow_first_token": self.config.slow_first_token_seconds,
                }.get(kind, 0.0)
                return Fault(kind, seconds)
        return None


def error_response(status: int) -> web.Response:
    """An injected error: OpenAI error JSON; a 429 says when to retry."""
    body = orjson.dumps(
        {
            "error": {
                "message": f"injected fault: HTTP {status}",
                "type": ERROR_TYPES[status],
                "param": None,
                "code": status,
            }
        }
    )
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 429 else None
    return web.Response(body=body, status=status, content_type="application/json", headers=headers)


class _HeldSource:
    """Slow first token: the request reaches the backend `delay` seconds after it arrived."""

    __slots__ = ("backend", "prompt", "length", "arrival", "delay", "ids", "inner")

    def __init__(
        self,
        backend: Backend,
        prompt: int,
        length: int,
        arrival: float,
        delay: float,
        ids: Sequence[int] | None,
    ) -> None:
        self.backend, self.prompt, self.length = backend, prompt, length
        self.arrival, self.delay, self.ids = arrival, delay, ids
        self.inner: TokenSource | None = None

    @property
    def cached_tokens(self) -> int:
        return 0 if self.inner is None else self.inner.cached_tokens

    async def wait(self, want: int) -> int:
        if self.inner is None:
            await sleep_until(asyncio.get_running_loop(), self.arrival + self.delay)
            self.inner = self.backend.open(
                self.prompt, self.length, self.arrival + self.delay, self.ids
            )
        return await self.inner.wait(want)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


class _StallingSource:
    """Stall: the first wait past token `at` takes `delay` seconds longer (tokens made meanwhile
    come out together afterwards, as after a network stall)."""

    __slots__ = ("inner", "at", "delay", "stalled")

    def __init__(self, inner: TokenSource, at: int, delay: float) -> None:
        self.inner, self.at, self.delay = inner, at, delay
        self.stalled = False

    @property
    def cached_tokens(self) -> int:
        return self.inner.cached_tokens

    async def wait(self, want: int) -> int:
        if not self.stalled and want > self.at:
            self.stalled = True
            await asyncio.sleep(self.delay)
        return await self.inner.wait(want)

    def close(self) -> None:
        self.inner.close()


def open_source(
    fault: Fault | None,
    backend: Backend,
    prompt: int,
    length: int,
    arrival: float,
    stream: bool,
    prompt_ids: Sequence[int] | None = None,
) -> TokenSource:
    """The request's token source, with a timing fault applied to it if it has one."""
    if fault is not None and fault.kind == "slow_first_token":
        return _HeldSource(backend, prompt, length, arrival, fault.seconds, prompt_ids)
    source = backend.open(prompt, length, arrival, prompt_ids)
    if fault is not None and fault.kind == "stall" and stream:
        return _StallingSource(source, fault.strike_at(length), fault.seconds)
    return source


def reset_connection(request: web.Request) -> None:
    """Abort the connection with a TCP RST (SO_LINGER 0), not an orderly close."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


async def strike(fault: Fault, request: web.Request, response: web.StreamResponse) -> None:
    """Apply a connection or framing fault to a stream being written (stalls are in the source)."""
    if fault.kind == "bad_sse":
        await response.write(MALFORMED_EVENT)
    elif fault.kind == "reset":
        reset_connection(request)
        raise FaultInjected("injected fault: connection reset")
    elif fault.kind == "close_after_headers":
        if request.transport is not None:
            request.transport.close()
        raise FaultInjected("injected fault: closed after headers")


async def faulted_body(fault: Fault, request: web.Request, body: bytes) -> web.StreamResponse:
    """A non-streaming response with a fault on its body (see the module docstring)."""
    if fault.kind == "bad_sse":
        body = MALFORMED_BODY
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = len(body)
    try:
        await response.prepare(request)
        if fault.kind == "close_after_headers":
            await strike(fault, request, response)
        half = len(body) // 2 if fault.kind in MID_RESPONSE else len(body)
        await response.write(body[:half])
        if fault.kind == "stall":
            await asyncio.sleep(fault.seconds)
        elif fault.kind == "reset":
            await strike(fault, request, response)
        await response.write(body[half:])
        await response.write_eof()
    except ConnectionError:  # the fault (or the client) ended it; nothing to report
        pass
    return response
