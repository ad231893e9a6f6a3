"""Locust users that load an OpenAI-compatible server and measure every request.

Each user is a closed loop: send one request, read it to the end, record it, repeat. The
users are Locust `FastHttpUser`s, but each request is a `request.MeasuredRequest` on the
user's own geventhttpclient connection (`request.Endpoint`), so that every read is timestamped
when it arrives (a blocking `read(n)` would wait for n bytes and smear chunk times). The user
builds the body, runs the request, paces the turnover and reports. Every request fires Locust's
`request` event (so Locust's stats, CSVs and web UI stay meaningful) and leaves a
`RequestRecord` in the process's `RecordBuffer`, which reaches the master with Locust's own
worker reports.
"""

from __future__ import annotations

import logging
import time

import orjson
from gevent import GreenletExit
from locust import FastHttpUser, constant, task

from ..compat.locust import user_stopping
from ..rundir.records import RequestRecord
from ..settings import Settings
from .clock import WALL_CLOCK
from .context import LoadContext
from .pacing import PACER
from .request import Endpoint, MeasuredRequest, Timeouts

logger = logging.getLogger(__name__)


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


class LLMUser(FastHttpUser):
    """A closed-loop user of /v1/chat/completions or /v1/completions (per --endpoint)."""

    wait_time = constant(0)
    endpoint: str | None = None  # None: from --endpoint

    def __init__(self, environment) -> None:
        super().__init__(environment)
        self.load_context = LoadContext.of(environment)
        self._target: Endpoint | None = None
        self._settled = True
        self._due: float | None = None  # when the next request became due, if it queued since

    def on_start(self) -> None:
        self._settled = False
        self.load_context.user_starting()
        settings = self.load_context.settings
        host = self.host
        assert host is not None  # FastHttpUser.__init__ refuses a user without one
        self.load_context.ensure_ready(host)
        self._target = Endpoint(
            host,
            self.endpoint or settings.endpoint,
            settings.stream,
            Timeouts.of(settings),
            settings.api_key,
        )
        self.load_context.addresses.install(self._target.client)

    def on_stop(self) -> None:
        self._settle()
        if self._target is not None:
            self._target.close()

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
        target = self._target
        model, prompts = context.model, context.prompts
        assert target is not None and model is not None and prompts is not None  # on_start set them
        t0 = self._due if self._due is not None else time.perf_counter()
        self._due = None
        body = request_payload(settings, model, prompts.next_content(), target.stream, target.api)
        request = MeasuredRequest(
            target,
            body,
            context.next_request_id(),
            t0,
            settings.input_tokens,
            settings.output_tokens,
            on_response=None if self._settled else self._settle,
        )
        context.in_flight += 1
        try:
            return bool(self.measure(request).ok)
        finally:
            context.in_flight -= 1

    def measure(self, request: MeasuredRequest) -> RequestRecord:
        """Run one request, then record and report what it measured.

        Once the response has ended, the turnover (this record, its report, the user's next
        request) waits for a turn of the process's `pacing.PACER`: at once, unless a wave of
        requests is turning over. A user that had to queue has had its next request due since
        this one ended: that wait is client-side queueing, inside the next request's latency and
        its time in flight.
        """
        try:
            request.run()
        except GreenletExit:
            # the test is stopping this user mid-request: nothing to record, but the run counts it
            self.load_context.abandoned.append(request.start_ts)
            raise
        due = time.perf_counter()
        try:
            queued = PACER.wait()
        except GreenletExit:  # stopped while queued: the next request was due, and is cut off
            self.load_context.abandoned.append(WALL_CLOCK.wall(due))
            raise
        finally:  # (a request that ended is recorded even if the user is stopped meanwhile)
            record = request.record(self.load_context.worker_name)
            self.report(record)
        self._due = due if queued else None
        return record

    def report(self, record: RequestRecord) -> None:
        """Hand a finished request to the record buffer and to Locust's `request` event."""
        target = self._target
        assert target is not None  # on_start made it
        self.load_context.buffer.append(record)
        self.environment.events.request.fire(
            request_type="POST",
            name=target.name,
            response_time=record.e2e * 1000.0,
            response_length=record.completion_tokens or 0,
            exception=None if record.ok else Exception(f"{record.error}: {record.error_message}"),
            context={},
            url=target.path,
            start_time=record.start_ts,
            response=None,
        )

    def _settle(self) -> None:
        if not self._settled:
            self._settled = True
            self.load_context.user_settled()


class ChatCompletionUser(LLMUser):
    """Always /v1/chat/completions, whatever --endpoint says."""

    endpoint = "chat"


class CompletionUser(LLMUser):
    """Always /v1/completions, whatever --endpoint says."""

    endpoint = "completions"
