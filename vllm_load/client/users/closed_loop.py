"""The built-in stepped test as a Locust user: `ClosedLoopUser` sends exact-length prompts
(--input-tokens, or draws from --input-lengths) for exactly --output-tokens each, back to back
with no think time; with --rates, each at the user's next arrival instead; with --trace, each
trace request at its time, with its lengths and shared prompt blocks; with --images, each
chat prompt followed by that many generated images, distinct per request. Written on the public
`LLMUser` API like any locustfile's user."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from locust import task

from ...compat.locust import user_stopping
from ...endpoints import APIS, CHAT, COMPLETIONS
from ...settings import Settings
from ...user_values import SettingsError
from ...workload.images import user_content
from ..bodies import BodyTemplates
from ..endpoint import RequestSpec
from .llm_user import LLMUser

if TYPE_CHECKING:
    from ...workload.traces import TraceRequest

logger = logging.getLogger(__name__)

#: the task name a request's record carries, by its level's kind of load
TASKS = {"concurrency": "closed_loop", "rate": "open_loop", "trace": "trace"}


class ImageCharge:
    """The prompt tokens the server charges for a request's images, watched as the test runs.

    With --images the text is still exact, but the server's `prompt_tokens` adds what the images
    cost, which the client cannot count beforehand; the report learns it from the records
    (`analysis.levels.measure.image_charges`). This logs the first charge per image count, and
    warns once when a request is charged otherwise, so a charge that varies is named while the
    test runs, not only as a lower exactness share."""

    KEY = "image_charge"  # in `LoadContext.extras`: one per process and test

    def __init__(self) -> None:
        self.charges: dict[int, int] = {}
        self.varied = False

    def observe(self, images: int, served: int | None, text_tokens: int) -> None:
        """A successful request with `images` images, `text_tokens` of exact text, and the
        server's `served` prompt tokens (None: it said none)."""
        if served is None or self.varied:
            return
        charge = served - text_tokens
        first = self.charges.get(images)
        if first is None:
            self.charges[images] = charge
            logger.info("the server charges %d prompt tokens for %d image(s)", charge, images)
        elif charge != first:
            self.varied = True
            logger.warning(
                "the server charged %d prompt tokens for the %d image(s) of one request and %d "
                "for another's of the same size: the report judges prompt exactness on the most "
                "common charge, so the others count as inexact",
                first,
                images,
                charge,
            )


class ClosedLoopUser(LLMUser):
    """The built-in stepped test: calibrated exact-length prompts (--input-tokens), exactly
    --output-tokens each (with --vllm-params), sent back to back with no think time, to the API
    --endpoint names; with --rates, each at the next arrival instead."""

    exact_prompts = True
    open_loop = True
    endpoint: str | None = None  # None: from --endpoint

    @classmethod
    def wanted(cls, settings: Settings) -> bool:
        return not settings.dataset and not settings.agentic

    @classmethod
    def prepare_run(cls, settings: Settings, host: str, model: str) -> dict | None:
        api = APIS[cls.endpoint or settings.endpoint]
        if settings.images and not api.chat:
            raise SettingsError(
                f"--images sends images as chat content parts; {cls.__name__} sends to "
                f"{api.path}, which takes a text prompt only"
            )
        return None

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

        At an open-loop level (--rates, --trace) a request is sent at each arrival the user
        takes, not back to back; a trace's arrival says which request to send. Its body is
        built while the user waits for the arrival, so building it is not inside its lateness.
        """
        context = self.load_context
        while True:
            if context.load_kind.open_loop:
                spec = self.arrive(self.request_spec)
            else:
                spec = self.request_spec()
            if not self.send_spec(spec) or user_stopping(self):
                return

    def on_start(self) -> None:
        super().on_start()
        assert self.host is not None  # FastHttpUser.__init__ refuses a user without one
        self.load_context.ensure_prompts(self.host)  # before the first request's clock starts
        self.load_context.ensure_images()

    def send_request(self, replayed: TraceRequest | None = None) -> bool:
        """One exact-length request (`replayed`: a trace's, with its lengths and prompt blocks),
        measured, recorded and reported; True if it succeeded."""
        return self.send_spec(self.request_spec(replayed))

    def request_spec(self, replayed: TraceRequest | None = None) -> RequestSpec:
        """The next exact-length request (`replayed`: a trace's, with its lengths and prompt
        blocks), ready to send."""
        context = self.load_context
        settings = context.settings
        prompts = context.prompts
        assert prompts is not None and context.plan is not None  # on_start calibrated them
        api = APIS[self.endpoint or settings.endpoint]
        if replayed is not None and context.replay is not None:
            content, input_tokens = context.replay.prompt(replayed, prompts, context.plan)
            output_tokens = replayed.output_tokens
        else:
            lengths = context.lengths
            input_tokens = lengths.draw_input(prompts.min_tokens)
            output_tokens = lengths.draw_output()
            content = prompts.next_content(input_tokens)
        images = context.images if api.chat else None  # (prepare_run refused the rest)
        urls, image_bytes = images.next_urls(settings.images) if images is not None else ([], 0)
        templates = context.extras.get(BodyTemplates.KEY)
        if not isinstance(templates, BodyTemplates):  # (the test's first request in this process)
            templates = context.extras[BodyTemplates.KEY] = BodyTemplates(settings, context.model)
        body = templates.body(
            api.name, output_tokens, user_content(content, urls) if api.chat else content
        )
        return RequestSpec(
            api.name,
            settings.stream,
            body,
            input_tokens,
            output_tokens,
            user_class=type(self).__name__,
            task=TASKS[context.load_kind.name],
            images=len(urls),
            image_bytes=image_bytes,
            trace_index=None if replayed is None else replayed.index,
        )

    def send_spec(self, spec: RequestSpec) -> bool:
        """Send a request `request_spec` built: measured, recorded and reported; True if it
        succeeded."""
        context = self.load_context
        reply = self.send(spec)
        plan = context.plan
        if spec.images and reply.ok and plan is not None and plan.method != "approximate":
            charge = context.extras.setdefault(ImageCharge.KEY, ImageCharge())
            assert isinstance(charge, ImageCharge) and spec.prompt_tokens is not None
            charge.observe(spec.images, reply.prompt_tokens, spec.prompt_tokens)
        return reply.ok


class ChatCompletionUser(ClosedLoopUser):
    """Always /v1/chat/completions, whatever --endpoint says."""

    endpoint = CHAT.name


class CompletionUser(ClosedLoopUser):
    """Always /v1/completions, whatever --endpoint says."""

    endpoint = COMPLETIONS.name
