"""Locust users that load an OpenAI-compatible server and measure every request.

`LLMUser` is the class a locustfile subclasses. Its tasks call `chat()` or `complete()`, or hold a
`conversation()`; each call sends one request, measures it as the built-in test does (a
`request.MeasuredRequest` on the user's own connection, every read dated when it arrives,
failures in one category each), records it and returns a `Reply` for the next turn. Every request
fires Locust's `request` event (so Locust's stats, CSVs and web UI stay meaningful) and leaves a
`RequestRecord` in the process's `RecordBuffer`, which reaches the master with Locust's own worker
reports. Records carry the user's class, the task, the conversation and the turn, so a report can
break figures down by persona and by turn.

The built-in tests' users are written on this API: `closed_loop.ClosedLoopUser` (exact-length
prompts) and `dataset.DatasetUser` (--dataset's conversations).
"""

from __future__ import annotations

import copy
import inspect
import itertools
import logging
import time
from typing import Any, Callable, TypeVar

import orjson
from gevent import GreenletExit
from locust import FastHttpUser, constant

from ...endpoints import APIS, CHAT, COMPLETIONS
from ...run_format.records import CANCELLED, RequestRecord
from ...settings import Settings
from ...workload.images import count_images
from .. import steal
from ..bodies import request_body
from ..clock import WALL_CLOCK
from ..context import LoadContext
from ..endpoint import Endpoint, RequestSpec, Timeouts, stats_name
from ..pacing import PACER
from ..request import MeasuredRequest
from ..target_picker import EJECT_AFTER
from .conversation import Conversation, Reply

logger = logging.getLogger(__name__)
_User = TypeVar("_User", bound="LLMUser")


class LLMUser(FastHttpUser):
    """A Locust user of an OpenAI-compatible server: subclass it and write `@task`s that call
    `chat()`, `complete()` or `conversation()`. Think time between tasks is Locust's `wait_time`;
    weights between user classes are Locust's `weight`. Options (`--host`, `--model`,
    `--output-tokens` as the default `max_tokens`, `--stream`, timeouts) are vllm-load's."""

    abstract = True
    wait_time = constant(0)
    #: the built-in test's users send calibrated exact-length prompts: the run calibrates them
    #: (and records the plan) only when a user class in the test says it does
    exact_prompts = False
    #: whether the class's tasks take their requests' start from --rates' arrivals (`arrive`);
    #: a test with --rates refuses classes that do not
    open_loop = False

    _conversation_ids = itertools.count()

    @classmethod
    def prepare_run(cls, settings: Settings, host: str, model: str) -> dict | None:
        """Checked once on the master before any load is sent (raise `SettingsError` to stop the
        test with one line); what it returns is recorded in run.json's `workload`."""
        return None

    @classmethod
    def wanted(cls, settings: Settings) -> bool:
        """Whether this class takes part in a test with these settings: a locustfile's own
        classes always do; the built-in locustfile holds the synthetic test's and the dataset's,
        and --dataset picks one."""
        return True

    def __init__(self, environment) -> None:
        super().__init__(environment)
        self.load_context = LoadContext.of(environment)
        self._targets: list[Endpoint] = []  # one per target (--hosts), in its picker's order
        self._settled = True
        self._due: float | None = None  # the next request's arrival (--rates)
        self._waited_from: steal.StealSample | None = None  # the steal read before it was due
        self._late = 0.0  # how long the last turnover waited for the pacer (it is in the next t0)

    def on_start(self) -> None:
        self._settled = False
        self.load_context.user_starting()
        host = self.host
        assert host is not None  # FastHttpUser.__init__ refuses a user without one
        self.load_context.ensure_model(host)
        self.load_context.ensure_targets(host)
        self._targets = self._endpoints()

    def _endpoints(self) -> list[Endpoint]:
        """A connection to each target, in its picker's order."""
        settings, picker = self.load_context.settings, self.load_context.targets
        assert picker is not None  # on_start made it
        timeouts = Timeouts.of(settings)
        endpoints = [
            Endpoint(
                h,
                timeouts,
                settings.api_key,
                name=h if picker.several else "",
                traced=settings.traceparent,
            )
            for h in picker.hosts
        ]
        for endpoint in endpoints:
            self.load_context.addresses.install(endpoint.client)
        return endpoints

    def on_stop(self) -> None:
        self.load_context.sent(id(self))
        self._settle()
        for endpoint in self._targets:
            endpoint.close()

    # -- the public API -----------------------------------------------------------------------

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        task: str | None = None,
        conversation: str = "",
        turn: int = 0,
        tool_wait: float | None = None,
        parent: str = "",
        **fields: Any,
    ) -> Reply:
        """Send one /v1/chat/completions request with these messages; returns its `Reply`.

        `max_tokens` defaults to --output-tokens; `stream` to --stream; other keyword arguments
        go into the body as they are (`temperature`, `ignore_eos`, ...). `task` names the task in
        the records (default: the calling method's name); `conversation` and `turn` place the
        request in a conversation (`Conversation.say` passes them), `tool_wait` the seconds it
        waited for tools before (`Conversation.answer_tools`), `parent` the session that fanned
        out its subagent session."""
        return self._ask(
            CHAT.name,
            messages,
            max_tokens,
            task or _caller(),
            conversation,
            turn,
            fields,
            tool_wait,
            parent,
        )

    def complete(
        self, prompt: str, *, max_tokens: int | None = None, task: str | None = None, **fields: Any
    ) -> Reply:
        """Send one /v1/completions request with this prompt; as `chat()` otherwise."""
        return self._ask(COMPLETIONS.name, prompt, max_tokens, task or _caller(), "", 0, fields)

    def conversation(
        self, system: str | None = None, task: str | None = None, parent: str = ""
    ) -> Conversation:
        """A new conversation (optionally with a system message), named after the calling task;
        `parent`: the id of the session that fans it out, for a subagent's."""
        number = next(self._conversation_ids)
        return Conversation(
            self, f"{self.load_context.process_tag}-c{number}", task or _caller(), system, parent
        )

    def lane(self: _User) -> _User:
        """This user again, on connections of its own: a subagent's requests are sent beside the
        user's (in a greenlet of its own), measured and recorded as the user's are, one at a
        time per lane. Its clock state starts fresh; `close_lane` closes its connections."""
        lane = copy.copy(self)
        lane.open_lane()
        return lane

    def open_lane(self) -> None:
        """A `lane`'s own connections and a fresh clock state (its copy shared the user's)."""
        self._targets = self._endpoints()
        self._due, self._late, self._waited_from, self._settled = None, 0.0, None, True

    def close_lane(self) -> None:
        """Close a `lane`'s connections (never the user's own: they are the lane's only once
        copied)."""
        for endpoint in self._targets:
            endpoint.close()

    def arrive(self, prepare: Callable[[Any], Any] | None = None) -> Any:
        """Wait for the process's next arrival (--rates, --trace: `arrival_clock.py`): the next request
        this user sends starts its clock at the arrival's time, so any wait for a free user is
        inside it. Returns what the arrival asks to send (a trace's request; None for a rate), or
        with `prepare`, what `prepare` made of it before the arrival was due."""
        arrivals = self.load_context.arrivals
        self._due, what = arrivals.next(prepare)
        self._waited_from = arrivals.waited_from
        self.load_context.pending_due[id(self)] = WALL_CLOCK.wall(self._due)
        return what

    # -- one request, from body to record -------------------------------------------------------

    def _ask(
        self,
        api: str,
        content: Any,
        max_tokens: int | None,
        task_name: str,
        conversation: str,
        turn: int,
        fields: dict[str, Any],
        tool_wait: float | None = None,
        parent: str = "",
    ) -> Reply:
        settings = self.load_context.settings
        stream = bool(fields.pop("stream", settings.stream))
        limit = settings.output_tokens if max_tokens is None else max_tokens
        body = request_body(settings, self.load_context.model, api, content, limit, stream)
        body.update(fields)
        forced = fields.get("ignore_eos") is True and fields.get("min_tokens") == limit
        images, image_bytes = count_images(content) if APIS[api].chat else (0, 0)
        spec = RequestSpec(
            api,
            stream,
            orjson.dumps(body),
            completion_tokens=limit if forced else None,
            user_class=type(self).__name__,
            task=task_name,
            conversation=conversation,
            turn=turn,
            keep_text=True,
            images=images,
            image_bytes=image_bytes,
            tools=bool(fields.get("tools")),
            tool_wait=tool_wait,
            parent=parent,
        )
        return self.send(spec)

    def send(self, spec: RequestSpec) -> Reply:
        """Send one request, measure, record and report it; returns what it brought back.

        Its clock starts now, less the time this user's last turnover queued for the pacer
        (`_late`: with no think time, when the previous request ended), or at its arrival
        (`arrive`, `_due`): the wait is in its latency, and recorded as `queued_s`. Once the test drains (its last level is over) nothing new is
        sent: the user waits here until the test stops it.
        """
        context = self.load_context
        if context.draining:
            context.park()
        now = time.perf_counter()
        t0 = self._due if self._due is not None else now - self._late
        self._due, self._late = None, 0.0
        picker = context.targets
        assert picker is not None and self._targets  # on_start made them
        target = picker.pick()
        endpoint = self._targets[target]
        cancels = context.cancels
        cancel = cancels.draw() if cancels is not None else None  # decided now, as it starts
        if cancel is not None and cancel.tokens is not None and not spec.stream:
            cancel = None  # (a whole response has no tokens to count: it is read to its end)
        request = MeasuredRequest(
            endpoint,
            spec,
            context.next_request_id(),
            t0,
            on_response=None if self._settled else self._settle,
            cancel=cancel,
            traceparent=context.new_traceparent() if endpoint.traced else "",
        )
        request.queued = max(time.perf_counter() - t0, 0.0)
        if self._waited_from is not None:
            if request.queued >= steal.LATE:  # was the host holding the CPU meanwhile?
                request.stolen = steal.STEAL.since(self._waited_from)
            self._waited_from = None
        context.starts.append(request.start_ts)
        context.sent(id(self))
        context.in_flight += 1
        context.streamed.started(request)
        try:
            record = self.measure(request)
        finally:
            context.in_flight -= 1
            if picker.done(target, request.error):
                logger.warning(
                    "target %s ejected: its last %d requests found nothing to connect to; "
                    "new requests go to the other targets",
                    picker.hosts[target],
                    EJECT_AFTER,
                )
            context.streamed.ended(request)
        return Reply.of(request, record)

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
        context = self.load_context
        context.pending_due[id(self)] = WALL_CLOCK.wall(due)  # its next start, while it queues
        try:
            queued = PACER.wait()
        except GreenletExit:  # stopped while queued: the next request was due, and is cut off
            context.sent(id(self))
            self.load_context.abandoned.append(WALL_CLOCK.wall(due))
            raise
        finally:  # (a request that ended is recorded even if the user is stopped meanwhile)
            record = request.record(self.load_context.worker_name)
            self.report(request, record)
        # the turnover waited: whatever this user does next (a request at once, or after its
        # think time) was due that much earlier
        self._late = time.perf_counter() - due if queued else 0.0
        context.sent(id(self))
        if self._late:  # its next start is backdated by as much, whenever it comes
            context.pending_late[id(self)] = self._late
        return record

    def report(self, request: MeasuredRequest, record: RequestRecord) -> None:
        """Hand a finished request to the record buffer and to Locust's `request` event."""
        target, spec = request.endpoint, request.spec
        self.load_context.buffer.append(record)
        cancelled = record.error == CANCELLED  # (its own name: not a failure, nor a latency)
        self.environment.events.request.fire(
            request_type="POST",
            name=stats_name(spec.api, spec.stream) + (" (cancelled)" if cancelled else ""),
            response_time=record.e2e * 1000.0,
            response_length=record.completion_tokens or 0,
            exception=None
            if record.ok or cancelled
            else Exception(f"{record.error}: {record.error_message}"),
            context={},
            url=target.paths[spec.api],
            start_time=record.start_ts,
            response=None,
        )

    def _settle(self) -> None:
        if not self._settled:
            self._settled = True
            self.load_context.user_settled()


def _caller() -> str:
    """The name of the function that called the public method that called this: the task."""
    frame = inspect.currentframe()
    caller = frame.f_back.f_back if frame is not None and frame.f_back is not None else None
    return caller.f_code.co_name if caller is not None else ""
