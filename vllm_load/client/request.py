"""One request to the server, measured from send to record: its state and its steps.

A `MeasuredRequest` is built from a request body and the `Endpoint` it goes to, is `run()`
once, and then holds what was measured; `record()` turns that into the `RequestRecord` of
requests.csv. `run()` is four named steps: start the timeouts, `_send` the POST, read the
response (`_read_stream` hands a streamed body to `reader.py`; `_read_json` reads a whole one),
and `_classify` whatever the steps raised into exactly one error category.

Every time limit, and where it fails a request (`Timeouts` holds their values):

- `connect` (--connect-timeout): the HTTP client's connection timeout; category `connect`.
- `stall` (--stall-timeout) until the response headers: the HTTP client's network timeout,
  `connect`; after them, the process's `stalls.STALLS` watch, `timeout_ttft` before the first
  content chunk, `timeout_stall` after it.
- `first_token` (--ttft-timeout, streams only): a timer (`_deadline`) from the request's start,
  started in `_start_timeouts` and stopped only by `end_first_token_wait` (the reader calls it
  on the first content chunk); `timeout_ttft`.
- `total` (--request-timeout): a timer (`_deadline`) from the request's start, started in
  `_start_timeouts` and stopped in `_stop_timeouts`; `timeout_total`.

A request chosen to be cancelled (--cancel-share: its `cancel`, a `CancelPoint`) is closed by
the client on purpose, category `cancelled`: after a time, by a timer started with the others
but counted from the sending (the user gives up on what it sent, not on the client's queue), or
once its stream has brought that many content chunks (the reader checks after every read).

"The request's start" is `t0`, which may be before the request was sent: a user that queued
for the pacer (`pacing.py`) has had its next request due since then, and the wait counts.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Callable

import orjson
from gevent import get_hub, getcurrent
from gevent.ssl import SSLSocket
from geventhttpclient.response import HTTPParseError

from ..compat.gevent import raw_socket
from ..compat.geventhttpclient import body_buffer, discard_connection, response_socket
from ..endpoints import APIS
from ..run_format.records import CANCELLED, RequestRecord
from ..workload.cancel import CancelPoint
from .clock import WALL_CLOCK, enable_receive_timestamps
from .endpoint import Endpoint, RequestSpec
from .health import CLIENT_LIMIT, client_limit
from .reader import ClientCancelled, StreamReader, read_unstamped
from .sse import SseMeter, StreamError, chunk_marks, chunk_summary, split_completion
from .stalls import STALLS
from .tool_calls import ToolCall, reply_calls

ERROR_BODY_LIMIT = 300
NEVER = 1 << 62  # a count of content chunks no stream reaches


class RequestTimeout(Exception):
    """The whole request took longer than --request-timeout."""


class FirstTokenTimeout(Exception):
    """A stream sent no content chunk within --ttft-timeout of the request's start."""


# what `run()` classifies; anything else (a bug) propagates
_CLASSIFIED = (
    ClientCancelled,
    StreamError,
    RequestTimeout,
    FirstTokenTimeout,
    OSError,  # socket timeouts, refused connections, resets, failed name lookups
    EOFError,
    HTTPParseError,
    orjson.JSONDecodeError,
)


class MeasuredRequest:
    """One request: built from a `RequestSpec`, `run()` once, then it holds what was measured.

    `t0` is the `perf_counter()` time the request became due; `request_id` goes out as the
    `X-Request-Id` header (vLLM names the request after it in its logs, the simulator's --trace
    too), so a requests.csv row can be found there; `traceparent`, where given (--traceparent),
    goes out as the W3C header of that name. `cancel`: where the client is to close it (None:
    never). `on_response` is called when the response headers arrive. The reader (`reader.py`)
    sets `stall_mark[0]` on every read and calls `end_first_token_wait` on the first content
    chunk.
    """

    __slots__ = (
        "endpoint",
        "spec",
        "request_id",
        "t0",
        "start_ts",
        "meter",
        "status",
        "error",
        "message",
        "usage",
        "end",
        "json_text",
        "json_reasoning",
        "json_tool_calls",
        "tool_calls",
        "stall_mark",
        "queued",
        "stolen",
        "traceparent",
        "cancel",
        "cancel_at_chunk",
        "_on_response",
        "_total",
        "_first_token",
        "_cancel_timer",
    )

    def __init__(
        self,
        endpoint: Endpoint,
        spec: RequestSpec,
        request_id: str,
        t0: float,
        on_response: Callable[[], None] | None = None,
        cancel: CancelPoint | None = None,
        traceparent: str = "",
    ) -> None:
        self.endpoint = endpoint
        self.spec = spec
        self.request_id = request_id
        self.t0 = t0
        self.start_ts = WALL_CLOCK.wall(t0)
        self.meter = SseMeter(chat=APIS[spec.api].chat, keep_text=spec.keep_text)
        self.status = 0  # the HTTP status, once the headers are in
        self.error = ""  # the error category (docs/run-format.md), empty on success
        self.message = ""
        self.usage: dict | None = None
        self.end: float | None = None  # perf_counter() time the response ended
        self.json_text: str | None = None  # the text a whole (non-streamed) response carried
        self.json_reasoning: bool | None = None  # whether it carried reasoning (None: no reply)
        self.json_tool_calls: Any = None  # a whole response's message.tool_calls, as it came
        self.tool_calls: list[ToolCall] = []  # the reply's tool calls (a spec with `tools`)
        self.stall_mark: list | None = None  # [0]: perf_counter() time of the last read
        self.queued = 0.0  # seconds from t0 to when the request was handed to be sent
        self.stolen: float | None = None  # a late send: the host's steal since due (steal.py)
        self.traceparent = traceparent
        self.cancel = cancel
        # the reader closes the stream once it holds this many content chunks (never, unless
        # cancelled by tokens: one comparison per read, no test of None)
        self.cancel_at_chunk = (
            cancel.tokens if cancel is not None and cancel.tokens is not None else NEVER
        )
        self._on_response = on_response
        self._total: Any = None  # the timers `_deadline` starts
        self._first_token: Any = None
        self._cancel_timer: Any = None

    @property
    def ok(self) -> bool:
        return not self.error

    def run(self) -> None:
        """Send the request, read the response to the end and classify the outcome.

        Every outcome is kept (`error` names a failure, `end` is set either way); only an
        unexpected exception, or `GreenletExit` (the test stopping the user mid-request),
        propagates.
        """
        response = None
        self._start_timeouts()
        try:
            response = self._send()
            if self.status != 200:
                self.error = "http_status"
                self.message = f"HTTP {self.status}: {_error_text(response.read())}"
            elif self.spec.stream:
                self._read_stream(response)
            else:
                self._read_json(response)
            if self.spec.tools:  # (a malformed call raises StreamError: `bad_tool_call`)
                self.tool_calls = reply_calls(self.spec.stream, self.meter, self.json_tool_calls)
        except _CLASSIFIED as e:
            self.error, self.message = self._classify(e)
        finally:
            self._stop_timeouts()
            if response is not None and (self.error or not response.message_complete):
                discard_connection(response)
        if self.end is None:  # a request that failed ends when it was classified
            self.end = time.perf_counter()

    def end_first_token_wait(self) -> None:
        """Stop the first-token timeout: a content chunk arrived, or the request is over."""
        if self._first_token is not None:
            self._first_token.close()
            self._first_token = None

    def _start_timeouts(self) -> None:
        timeouts = self.endpoint.timeouts
        waited = time.perf_counter() - self.t0  # both count from t0
        self._total = _deadline(max(timeouts.total - waited, 0.0), RequestTimeout)
        if self.spec.stream:
            self._first_token = _deadline(
                max(timeouts.first_token - waited, 0.0), FirstTokenTimeout
            )
        cancel = self.cancel
        if cancel is not None and cancel.seconds is not None:
            self._cancel_timer = _deadline(cancel.seconds, ClientCancelled)

    def _stop_timeouts(self) -> None:
        assert self._total is not None  # _start_timeouts made it
        self._total.close()
        self.end_first_token_wait()
        if self._cancel_timer is not None:
            self._cancel_timer.close()
            self._cancel_timer = None

    def _send(self):
        """POST the body; returns the response once its headers are in."""
        spec = self.spec
        response = self.endpoint.post(
            spec.api, spec.stream, self.request_id, spec.body, self.traceparent
        )
        self.status = response.status_code
        if self._on_response is not None:
            self._on_response()
        return response

    def _read_stream(self, response) -> None:
        """Read SSE events until the body ends; the request ends at the read that brought
        `data: [DONE]`.

        Bytes that came with the response headers (read by geventhttpclient) are dated when
        this step starts, and no later read is dated earlier (chunk times never go backwards).
        The rest is read by a `reader.StreamReader` in the hub, every read dated by the kernel's
        receive timestamp; a TLS socket (whose bytes on the wire are not the chunks) by
        `reader.read_unstamped`, in this greenlet.
        """
        meter = self.meter
        buf = body_buffer(response)  # the parser appends decoded body bytes here, in place
        floor = time.perf_counter()
        if buf:
            meter.consume(buf, floor)
        if not response.message_complete:  # (a complete response gave its socket back already)
            sock = response_socket(response)
            self.stall_mark = STALLS.watch(self.endpoint.timeouts.stall)
            try:
                if not isinstance(sock, SSLSocket) and enable_receive_timestamps(raw_socket(sock)):
                    StreamReader(self, sock, response, floor).read()
                else:
                    read_unstamped(self, sock, response, floor)
            finally:
                STALLS.forget()
        if buf:  # an event the server did not terminate
            meter.consume(buf + b"\n\n", time.perf_counter())
        if not meter.done:
            raise StreamError("disconnect", "stream ended without data: [DONE]")
        self.usage = meter.usage
        self.end = meter.done_at
        if not meter.chunk_times:
            raise StreamError("bad_sse", "stream finished without any content chunk")

    def _read_json(self, response) -> None:
        """Read a whole (non-streamed) response; it ends when its last byte has been read."""
        raw = response.read()
        end = time.perf_counter()
        answer = orjson.loads(raw)
        if not isinstance(answer, dict):
            raise StreamError("bad_sse", f"response body is not a JSON object: {raw[:120]!r}")
        usage, choices = answer.get("usage"), answer.get("choices")
        self.usage = usage if isinstance(usage, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else {}
        message = choice.get("message") if isinstance(choice, dict) else None
        text = (message.get("content") if isinstance(message, dict) else None) or (
            choice.get("text") if isinstance(choice, dict) else None
        )
        self.json_text = text if isinstance(text, str) else None
        if isinstance(message, dict):
            self.json_tool_calls = message.get("tool_calls")
        if isinstance(choice, dict):  # a reply: did it reason (either field, a non-empty text)?
            if isinstance(message, dict):
                said, said_too = message.get("reasoning"), message.get("reasoning_content")
                self.json_reasoning = (isinstance(said, str) and said != "") or (
                    isinstance(said_too, str) and said_too != ""
                )
            else:
                self.json_reasoning = False
        self.end = end

    def _classify(self, e: Exception) -> tuple[str, str]:
        """The error category (docs/run-format.md, `error`) and message for what `run()` caught."""
        timeouts = self.endpoint.timeouts
        if isinstance(e, ClientCancelled):
            cancel = self.cancel
            assert cancel is not None  # only a request to cancel is cancelled
            return CANCELLED, (
                f"closed by the client as planned (--cancel-after: {cancel.label}) after "
                f"{len(self.meter.chunk_times)} content chunks"
            )
        if isinstance(e, StreamError):
            return e.category, e.message
        if isinstance(e, RequestTimeout):
            return "timeout_total", f"no complete response within {timeouts.total:g} s"
        if isinstance(e, FirstTokenTimeout):
            return "timeout_ttft", f"no content chunk within {timeouts.first_token:g} s"
        if isinstance(e, TimeoutError):  # (socket.timeout): the client's or STALLS'
            if self.status == 0:
                return "connect", (
                    f"no connection within {timeouts.connect:g} s "
                    f"or no response headers within {timeouts.stall:g} s"
                )
            category = "timeout_stall" if self.meter.chunk_times else "timeout_ttft"
            return category, f"no bytes for {timeouts.stall:g} s"
        limit = client_limit(e)
        if limit is not None:  # the client's own machine, not the server
            return CLIENT_LIMIT, limit
        if isinstance(e, (ConnectionRefusedError, socket.gaierror)):
            return "connect", str(e)[:ERROR_BODY_LIMIT]
        if isinstance(e, orjson.JSONDecodeError):
            return "bad_sse", f"unparseable response body: {e}"[:ERROR_BODY_LIMIT]
        # resets, closed connections, truncated or garbled HTTP
        return "disconnect", f"{type(e).__name__}: {e}"[:ERROR_BODY_LIMIT]

    @property
    def text(self) -> str:
        """The reply's text (chat content or completion text); kept only with `keep_text`."""
        if self.spec.stream:
            return self.meter.text()
        return self.json_text or ""

    def record(self, worker: str) -> RequestRecord:
        """The request's row of requests.csv (its level and users are set by the master)."""
        spec = self.spec
        stream = spec.stream
        t0, times, usage = self.t0, self.meter.chunk_times, self.usage
        assert self.end is not None  # run() has ended
        e2e = self.end - t0
        if stream:
            ttft = times[0] - t0 if times else None
            n_chunks = len(times)
            answer_at = self.meter.answer_at
            ttfat = times[answer_at] - t0 if answer_at is not None else None
            # the chunks before the answer's first were reasoning (all of them without an answer)
            reasoning_chunks = (n_chunks if answer_at is None else answer_at) if times else None
        else:
            replied = bool(self.json_text) or bool(self.tool_calls)  # (tool calls: no text)
            ttft = ttfat = e2e if replied and not self.error else None
            n_chunks = 1 if replied else 0
            # a reply without reasoning had none; one with it, as many tokens as usage says
            reasoning_chunks = 0 if self.json_reasoning is False else None
        prompt_tokens = completion_tokens = cached_tokens = None
        if isinstance(usage, dict):
            prompt_tokens = usage.get("prompt_tokens")
            completion_tokens = usage.get("completion_tokens")
            details = usage.get("prompt_tokens_details")  # vLLM: --enable-prompt-tokens-details
            cached_tokens = details.get("cached_tokens") if isinstance(details, dict) else None
        tpot = None
        if ttft is not None and completion_tokens and completion_tokens >= 2:
            tpot = (e2e - ttft) / (completion_tokens - 1)
        itl_mean, itl_p50, itl_p90, itl_p99, itl_max, itl_hist, chunks_merged = chunk_summary(times)
        reasoning, answer, reasoning_source = split_completion(
            usage, completion_tokens, reasoning_chunks, n_chunks
        )
        # each field stored by name into an unset record: what the positional call cost (43
        # keyword arguments cost 2.3 us more per request; bench/record_cost.py compares)
        r = RequestRecord.unset()
        r.request_id = self.request_id
        r.worker = worker
        r.level = -1
        r.users = 0
        r.endpoint = spec.api
        r.stream = int(stream)
        r.start_ts = self.start_ts
        r.end_ts = self.start_ts + e2e
        r.ttft = ttft
        r.e2e = e2e
        r.tpot = tpot
        r.itl_mean = itl_mean
        r.itl_p50 = itl_p50
        r.itl_p90 = itl_p90
        r.itl_p99 = itl_p99
        r.itl_max = itl_max
        r.itl_hist = itl_hist
        r.n_chunks = n_chunks
        r.chunks_merged = chunks_merged
        r.chunk_marks = chunk_marks(times, t0) if stream else ""
        r.prompt_tokens = prompt_tokens
        r.completion_tokens = completion_tokens
        r.requested_prompt_tokens = spec.prompt_tokens
        r.requested_completion_tokens = spec.completion_tokens
        r.ok = 0 if self.error else 1
        r.status = self.status
        r.error = self.error
        r.error_message = self.message
        r.user_class = spec.user_class
        r.task = spec.task
        r.conversation = spec.conversation
        r.turn = spec.turn
        r.cached_tokens = cached_tokens
        r.queued_s = self.queued
        r.ttfat = ttfat
        r.reasoning_tokens = reasoning
        r.answer_tokens = answer
        r.reasoning_source = reasoning_source
        r.images = spec.images
        r.image_bytes = spec.image_bytes
        r.trace_index = spec.trace_index
        r.target = self.endpoint.name
        r.stolen_s = self.stolen
        r.tool_calls = len(self.tool_calls)
        r.tool_wait_s = spec.tool_wait
        r.parent = spec.parent
        r.cancel_after = self.cancel.label if self.cancel is not None else ""
        r.traceparent = self.traceparent
        return r


def _deadline(seconds: float, error: type[Exception]) -> Any:
    """A timer that raises `error` in this greenlet in `seconds`, until it is `close()`d: what a
    started `gevent.Timeout(seconds, error)` does (its timer, at its priority), without the
    Timeout object (0.7 µs to start and close, not 2.1, per request)."""
    timer = get_hub().loop.timer(seconds, priority=-1)
    timer.start(getcurrent().throw, error)
    return timer


def _error_text(raw: bytes) -> str:
    """The message of an error response's body, whatever its shape, cut to ERROR_BODY_LIMIT."""
    try:
        body = orjson.loads(raw)
        error = body.get("error", body) if isinstance(body, dict) else body
        text = error.get("message", str(error)) if isinstance(error, dict) else str(error)
    except (orjson.JSONDecodeError, AttributeError):
        text = raw.decode("utf-8", "replace")
    return str(text)[:ERROR_BODY_LIMIT]
