"""The built-in stepped test as a Locust user: `ClosedLoopUser` sends exact-length prompts
(--input-tokens, or draws from --input-lengths) for exactly --output-tokens each, back to back
with no think time; with --rates, each at the user's next arrival instead. Written on the public
`LLMUser` API like any locustfile's user."""

from __future__ import annotations

import orjson
from locust import task

from ...compat.locust import user_stopping
from ...settings import Settings
from ..endpoint import RequestSpec
from .llm_user import LLMUser, exact_output, request_body


class ClosedLoopUser(LLMUser):
    """The built-in stepped test: calibrated exact-length prompts (--input-tokens), exactly
    --output-tokens each (with --vllm-params), sent back to back with no think time, to the API
    --endpoint names; with --rates, each at the next arrival instead."""

    exact_prompts = True
    open_loop = True
    endpoint: str | None = None  # None: from --endpoint

    @classmethod
    def wanted(cls, settings: Settings) -> bool:
        return not settings.dataset

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

        With --rates a request is sent at each arrival the user takes, not back to back.
        """
        open_loop = bool(self.load_context.settings.rates)
        while True:
            if open_loop:
                self.arrive()
            if not self.send_request() or user_stopping(self):
                return

    def on_start(self) -> None:
        super().on_start()
        assert self.host is not None  # FastHttpUser.__init__ refuses a user without one
        self.load_context.ensure_prompts(self.host)  # before the first request's clock starts

    def send_request(self) -> bool:
        """One exact-length request, measured, recorded and reported; True if it succeeded."""
        context = self.load_context
        settings = context.settings
        prompts = context.prompts
        assert prompts is not None  # on_start calibrated them
        api = self.endpoint or settings.endpoint
        lengths = context.lengths
        input_tokens, output_tokens = lengths.draw_input(prompts.min_tokens), lengths.draw_output()
        content = prompts.next_content(input_tokens)
        body = request_body(
            settings,
            context.model,
            api,
            [{"role": "user", "content": content}] if api == "chat" else content,
            output_tokens,
            settings.stream,
        )
        if settings.vllm_params:
            body.update(exact_output(output_tokens))
        spec = RequestSpec(
            api,
            settings.stream,
            orjson.dumps(body),
            input_tokens,
            output_tokens,
            user_class=type(self).__name__,
            task="open_loop" if settings.rates else "closed_loop",
        )
        return self.send(spec).ok


class ChatCompletionUser(ClosedLoopUser):
    """Always /v1/chat/completions, whatever --endpoint says."""

    endpoint = "chat"


class CompletionUser(ClosedLoopUser):
    """Always /v1/completions, whatever --endpoint says."""

    endpoint = "completions"
