"""Locust users that load an OpenAI-compatible server and measure every request.

Each user is a closed loop: send one request, read it to the end, record it, repeat. The
users are Locust `FastHttpUser`s, but the request itself is driven on the underlying
geventhttpclient socket so that every read is timestamped when it arrives (a blocking
`read(n)` would wait for n bytes and smear chunk times). Every request fires Locust's
`request` event (so Locust's stats, CSVs and web UI stay meaningful) and leaves a
`RequestRecord` in the process's `RecordBuffer`, which reaches the master with Locust's own
worker reports.
"""

from __future__ import annotations

import logging
import socket
import time
from urllib.parse import urlparse

import gevent
import orjson
from gevent import GreenletExit
from gevent.ssl import SSLSocket
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPParseError
from locust import FastHttpUser, constant, task

from ..compat.gevent import raw_socket
from ..compat.geventhttpclient import body_buffer, discard_connection, response_socket
from ..compat.locust import user_stopping
from ..rundir.records import RequestRecord
from ..settings import Settings
from .clock import WallClock, enable_receive_timestamps
from .context import LoadContext
from .pacing import PACER
from .reader import RECV_SIZE, StreamReader, read_unstamped
from .sse import SseMeter, StreamError, chunk_marks, chunk_summary
from .stalls import STALLS

logger = logging.getLogger(__name__)

PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
ERROR_BODY_LIMIT = 300
WALL_CLOCK = WallClock()


class RequestTimeout(Exception):
    """The whole request took longer than --request-timeout."""


class FirstTokenTimeout(Exception):
    """A stream sent no content chunk within --ttft-timeout of the request's start."""


def request_payload(
    settings: Settings, model: str, content: str, stream: bool, endpoint: str
) -> bytes:
    payload: dict = {"model": model, "max_tokens": settings.output_tokens, "stream": stream}
    if endpoint == "chat":
        payload["messages"] = [{"role": "user", "content": content}]
    else:
        payload["prompt"] = content
    if settings.vllm_params:
        payload["min_tokens"] = settings.output_tokens
        payload["ignore_eos"] = True
    if stream:
        payload["stream_options"] = {"include_usage": True}
    if settings.temperature is not None:
        payload["temperature"] = settings.temperature
    return orjson.dumps(payload)


def _error_text(raw: bytes) -> str:
    try:
        body = orjson.loads(raw)
        error = body.get("error", body) if isinstance(body, dict) else body
        text = error.get("message", str(error)) if isinstance(error, dict) else str(error)
    except (orjson.JSONDecodeError, AttributeError):
        text = raw.decode("utf-8", "replace")
    return str(text)[:ERROR_BODY_LIMIT]


class LLMUser(FastHttpUser):
    """A closed-loop user of /v1/chat/completions or /v1/completions (per --endpoint)."""

    wait_time = constant(0)
    endpoint: str | None = None  # None: from --endpoint

    def __init__(self, environment) -> None:
        super().__init__(environment)
        self.load_context = LoadContext.of(environment)
        self._http: HTTPClient | None = None
        self._settled = True
        self._due: float | None = None  # when the next request became due, if it queued since

    def on_start(self) -> None:
        self._settled = False
        self.load_context.user_starting()
        settings = self.load_context.settings
        host = self.host
        assert host is not None  # FastHttpUser.__init__ refuses a user without one
        self.load_context.ensure_ready(host)
        self._endpoint = self.endpoint or settings.endpoint
        self._stream = settings.stream
        self._path = urlparse(host).path.rstrip("/") + PATHS[self._endpoint]
        self._name = f"{PATHS[self._endpoint]}{' (stream)' if self._stream else ''}"
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if self._stream else "application/json",
        }
        if settings.api_key:
            self._headers["Authorization"] = f"Bearer {settings.api_key}"
        self._http = HTTPClient.from_url(
            host,
            concurrency=1,
            connection_timeout=settings.connect_timeout,
            network_timeout=settings.stall_timeout,
            block_size=RECV_SIZE,
        )
        self.load_context.addresses.install(self._http)

    def on_stop(self) -> None:
        self._settle()
        if self._http is not None:
            self._http.close()

    @task
    def closed_loop(self) -> None:
        """Send requests back to back until one fails or the user is asked to stop.

        Locust's task loop yields to the hub between tasks even with a zero wait: the user
        then waits a whole turn of the hub, in which every other ready user reads its socket,
        with no request in flight. On a saturated core that gap is as long as a request, and
        1000 users held about half their concurrency. A request yields on every socket read
        anyway, so between two successful requests nothing needs to wait. After a failure
        (which may not have touched the network) the loop returns to Locust's, which yields
        once, so a dead target cannot spin the process.
        """
        while self.send_request() and not user_stopping(self):
            pass
        if self.load_context.draining:
            self.load_context.park()

    def send_request(self) -> bool:
        """One request, measured, recorded and reported to Locust; True if it succeeded.

        Its clock starts now, or, if this user queued for the pacer after its previous request,
        when that one ended (`_due`): the wait is in its latency.
        """
        context = self.load_context
        if context.draining:
            return False
        settings = context.settings
        t0 = self._due if self._due is not None else time.perf_counter()
        self._due = None
        model, prompts = context.model, context.prompts
        assert model is not None and prompts is not None  # on_start's ensure_ready() set them
        body = request_payload(
            settings, model, prompts.next_content(), self._stream, self._endpoint
        )
        context.in_flight += 1
        try:
            return bool(self.measure(body, settings, context.next_request_id(), t0).ok)
        finally:
            context.in_flight -= 1

    def report(self, record: RequestRecord) -> None:
        """Hand a finished request to the record buffer and to Locust's `request` event."""
        self.load_context.buffer.append(record)
        self.environment.events.request.fire(
            request_type="POST",
            name=self._name,
            response_time=record.e2e * 1000.0,
            response_length=record.completion_tokens or 0,
            exception=None if record.ok else Exception(f"{record.error}: {record.error_message}"),
            context={},
            url=self._path,
            start_time=record.start_ts,
            response=None,
        )

    def measure(self, body: bytes, settings: Settings, request_id: str, t0: float) -> RequestRecord:
        """Send one request due since `t0` (perf_counter), read it to the end, and record and
        report what was measured.

        `request_id` goes out as the `X-Request-Id` header (vLLM names the request after it in
        its logs, and the simulator's --trace too), so a requests.csv row can be found there.

        Once the response has ended, the turnover (this record, its report, the user's next
        request) waits for a turn of the process's `pacing.PACER`: at once, unless a wave of
        requests is turning over. A user that had to queue has had its next request due since
        this one ended: that wait is client-side queueing, inside the next request's latency and
        its time in flight.
        """
        http = self._http
        assert http is not None  # on_start made it
        meter = SseMeter(chat=self._endpoint == "chat")
        status = 0
        error = message = ""
        usage: dict | None = None
        response = None
        non_stream_text = False
        start_ts = WALL_CLOCK.wall(t0)
        t_end = None
        waited = time.perf_counter() - t0  # timeouts count from t0 too
        timeout = gevent.Timeout(max(settings.request_timeout - waited, 0.0), RequestTimeout)
        timeout.start()
        first_token = (
            gevent.Timeout(max(settings.ttft_timeout - waited, 0.0), FirstTokenTimeout)
            if self._stream
            else None
        )
        if first_token is not None:
            first_token.start()
        try:
            headers = self._headers.copy()
            headers["X-Request-Id"] = request_id
            response = http.request("POST", self._path, body=body, headers=headers)
            self._settle()
            status = response.status_code
            if status != 200:
                error, message = "http_status", f"HTTP {status}: {_error_text(response.read())}"
            elif self._stream:
                t_end = self._read_stream(response, meter, first_token)
                usage = meter.usage
            else:
                raw = response.read()
                t_end = time.perf_counter()
                answer = orjson.loads(raw)
                usage = answer.get("usage")
                choice = (answer.get("choices") or [{}])[0]
                non_stream_text = bool(
                    (choice.get("message") or {}).get("content") or choice.get("text")
                )
        except GreenletExit:
            # the test is stopping this user mid-request: nothing to record, but the run counts it
            self.load_context.abandoned.append(start_ts)
            raise
        except StreamError as e:
            error, message = e.category, e.message
        except RequestTimeout:
            error, message = (
                "timeout_total",
                f"no complete response within {settings.request_timeout:g} s",
            )
        except FirstTokenTimeout:
            error, message = "timeout_ttft", f"no content chunk within {settings.ttft_timeout:g} s"
        except (socket.timeout, TimeoutError):
            if status == 0:
                error, message = (
                    "connect",
                    f"no response headers within {settings.stall_timeout:g} s",
                )
            else:
                error = "timeout_ttft" if not meter.chunk_times else "timeout_stall"
                message = f"no bytes for {settings.stall_timeout:g} s"
        except (ConnectionRefusedError, socket.gaierror) as e:
            error, message = "connect", str(e)[:ERROR_BODY_LIMIT]
        except orjson.JSONDecodeError as e:
            error, message = "bad_sse", f"unparseable response body: {e}"[:ERROR_BODY_LIMIT]
        except (
            OSError,
            EOFError,
            HTTPParseError,
        ) as e:  # resets, closed connections, truncated or garbled HTTP
            error, message = "disconnect", f"{type(e).__name__}: {e}"[:ERROR_BODY_LIMIT]
        finally:
            timeout.cancel()
            if first_token is not None:
                first_token.cancel()
            if response is not None and (error or not response.message_complete):
                discard_connection(response)
        end = t_end if t_end is not None and not error else time.perf_counter()
        due = time.perf_counter()
        try:
            queued = PACER.wait()
        except GreenletExit:  # stopped while queued: the next request was due, and is cut off
            self.load_context.abandoned.append(WALL_CLOCK.wall(due))
            raise
        finally:  # (a request that ended is recorded even if the user is stopped meanwhile)
            record = self._record(
                request_id,
                meter,
                usage,
                status,
                error,
                message,
                start_ts,
                t0,
                end,
                non_stream_text,
                settings,
            )
            self.report(record)
        self._due = due if queued else None
        return record

    def _settle(self) -> None:
        if not self._settled:
            self._settled = True
            self.load_context.user_settled()

    def _read_stream(self, response, meter: SseMeter, first_token: gevent.Timeout | None) -> float:
        """Read SSE events until the body ends; return the perf_counter time of the read that
        brought `data: [DONE]`.

        A plain socket is read by a `reader.StreamReader`, in the hub's callbacks, every read
        dated by the kernel's receive timestamp: when the bytes reached the machine, not when
        the hub got round to them. A TLS socket (whose bytes on the wire are not the chunks) is
        read in this greenlet (`reader.read_unstamped`), each read dated when it returns. Bytes
        that came with the response headers were read by geventhttpclient: they are dated when
        this method starts, and no later read is dated earlier than that (chunk times never go
        backwards).
        `first_token` (the --ttft-timeout) is cancelled as soon as a content chunk has arrived.
        """
        buf = body_buffer(response)  # the parser appends decoded body bytes here, in place
        floor = time.perf_counter()
        if buf:
            meter.consume(buf, floor)
        if not response.message_complete:  # (a complete response has given its socket back already)
            sock = response_socket(response)
            mark = STALLS.watch(self.load_context.settings.stall_timeout)
            try:
                if first_token is not None and meter.chunk_times:
                    first_token.cancel()
                    first_token = None
                if not isinstance(sock, SSLSocket) and enable_receive_timestamps(raw_socket(sock)):
                    StreamReader(sock, response, meter, WALL_CLOCK, mark, first_token, floor).read()
                else:
                    read_unstamped(sock, response, meter, mark, first_token, floor)
            finally:
                STALLS.forget()
        if buf:
            meter.consume(buf + b"\n\n", time.perf_counter())
        if meter.done_at is None:
            raise StreamError("disconnect", "stream ended without data: [DONE]")
        return meter.done_at

    def _record(
        self,
        request_id,
        meter,
        usage,
        status,
        error,
        message,
        start_ts,
        t0,
        t_end,
        non_stream_text,
        settings,
    ) -> RequestRecord:
        context = self.load_context
        e2e = t_end - t0
        times = meter.chunk_times
        if self._stream:
            ttft = times[0] - t0 if times else None
            n_chunks = len(times)
        else:
            ttft = e2e if non_stream_text and not error else None
            n_chunks = 1 if non_stream_text else 0
        prompt_tokens = completion_tokens = None
        if isinstance(usage, dict):
            prompt_tokens = usage.get("prompt_tokens")
            completion_tokens = usage.get("completion_tokens")
        tpot = None
        if ttft is not None and completion_tokens and completion_tokens >= 2:
            tpot = (e2e - ttft) / (completion_tokens - 1)
        itl_mean, itl_p50, itl_p90, itl_p99, itl_max, itl_hist, chunks_merged = chunk_summary(times)
        if not error and self._stream and not times:
            error, message = "bad_sse", "stream finished without any content chunk"
        return RequestRecord(
            request_id=request_id,
            worker=context.worker_name,
            level=-1,
            users=0,
            endpoint=self._endpoint,
            stream=int(self._stream),
            start_ts=start_ts,
            end_ts=start_ts + e2e,
            ttft=ttft,
            e2e=e2e,
            tpot=tpot,
            itl_mean=itl_mean,
            itl_p50=itl_p50,
            itl_p90=itl_p90,
            itl_p99=itl_p99,
            itl_max=itl_max,
            itl_hist=itl_hist,
            n_chunks=n_chunks,
            chunks_merged=chunks_merged,
            chunk_marks=chunk_marks(times, t0) if self._stream else "",
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            requested_prompt_tokens=settings.input_tokens,
            requested_completion_tokens=settings.output_tokens,
            ok=0 if error else 1,
            status=status,
            error=error,
            error_message=message,
        )


class ChatCompletionUser(LLMUser):
    """Always /v1/chat/completions, whatever --endpoint says."""

    endpoint = "chat"


class CompletionUser(LLMUser):
    """Always /v1/completions, whatever --endpoint says."""

    endpoint = "completions"
