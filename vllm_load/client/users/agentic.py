"""Users that hold agentic sessions (--agentic): turns that offer tools, tool calls answered
after the tools' latency, the context growing turn by turn (`workload.agent_tools` says what a
session offers and waits for).

A session starts with a prompt of --input-tokens (or a draw of --input-lengths) and sends it
with the tools; while the reply ends in tool calls and the session has turns left
(--agentic-turns), the user waits the turn's tool latency (the user is idle: no request in
flight), appends the assistant's calls and one `role: tool` result per call, and sends the
history again. A reply in text, or a failed turn (a malformed tool call included:
`bad_tool_call`), ends the session; the next starts at once, or with --rates at the next arrival.
Every turn asks for at most --output-tokens (or a draw of --output-lengths) without forcing it:
a forced length would have the model write past its tool call.
"""

from __future__ import annotations

import logging
import random
import secrets

import gevent
from locust import task

from ...settings import Settings
from ...workload.agent_tools import AgenticPlan
from .llm_user import LLMUser

logger = logging.getLogger(__name__)


def agentic_plan(settings: Settings) -> AgenticPlan:
    return AgenticPlan.of(
        settings.agentic_turns,
        settings.tool_latency_ms,
        settings.tool_result_tokens,
        settings.tool_choice,
    )


class AgenticUser(LLMUser):
    """Holds --agentic sessions back to back, or one per arrival with --rates (module docstring)."""

    exact_prompts = True  # a session's first prompt is a calibrated one (its tools come on top)
    open_loop = True

    @classmethod
    def wanted(cls, settings: Settings) -> bool:
        return settings.agentic

    @classmethod
    def prepare_run(cls, settings: Settings, host: str, model: str) -> dict | None:
        return agentic_plan(settings).describe()

    def __init__(self, environment) -> None:
        super().__init__(environment)
        self._plan: AgenticPlan | None = None
        self._rng = random.Random(secrets.randbits(32))

    def on_start(self) -> None:
        super().on_start()
        assert self.host is not None  # FastHttpUser.__init__ refuses a user without one
        self.load_context.ensure_prompts(self.host)  # before the first request's clock starts
        self._plan = agentic_plan(self.load_context.settings)

    @task
    def agentic_session(self) -> None:
        """One session, turn by turn, until a reply in text, a failure or its last turn."""
        context, plan = self.load_context, self._plan
        prompts, lengths = context.prompts, context.lengths
        assert plan is not None and prompts is not None  # on_start made them
        fields = plan.body_fields()
        if context.load_kind.open_loop:
            self.arrive()
        session = self.conversation()
        prompt = prompts.next_content(lengths.draw_input(prompts.min_tokens))
        reply = session.say(prompt, max_tokens=lengths.draw_output(), **fields)
        while reply.ok and reply.tool_calls and session.turn < plan.turns:
            waited = plan.draw_wait(self._rng)
            gevent.sleep(waited)
            results = [prompts.words(plan.draw_result_tokens(self._rng)) for _ in reply.tool_calls]
            reply = session.answer_tools(
                results, waited=waited, max_tokens=lengths.draw_output(), **fields
            )
