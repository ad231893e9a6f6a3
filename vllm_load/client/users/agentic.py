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

With --fan-out K, a drawn share of a session's tool-calling turns (--fan-out-share) fans out
instead of waiting for tools: K subagent sessions start at once, each in a greenlet of its own
on its own connection (`LLMUser.lane`), each a session as above with a prompt of its own and its
parent's id (`parent` in requests.csv), never fanning out again. The parent is idle until the
last subagent ends (that wait is its next turn's `tool_wait_s`), and its calls' results are the
subagents' final answers (`agent_tools.answers_for_calls`); a subagent that failed or ended
without text gives a drawn result, as a tool does. The user holds one slot of its level; its
subagents are requests in flight beside it, so a level's in-flight requests may exceed its users
(the report's session section shows the peak per level). A user stopped meanwhile stops its
subagents.

With --trace of an agentic trace (docs/traces.md), each arrival is a recorded session instead:
its turns are sent with the trace's lengths (the output exact), each after the turn before has
ended plus its recorded tool latency, the prompt growing by the trace's difference (the tokens
the tools returned, as a user message: no tools are offered, so no reply can cut a turn short);
a turn's subagent sessions start from its end, each on a lane, and the next turn waits for them.
Every turn of the trace is sent, a failed one's followers too (the level measures them all).
"""

from __future__ import annotations

import logging
import random
import secrets
import time
from typing import Any, Callable

import gevent
from locust import task

from ...load_kinds import TRACE
from ...settings import Settings
from ...workload.agent_tools import AgenticPlan, answers_for_calls
from ...workload.traces.agentic_sessions import SessionPlan
from .conversation import Conversation, Reply
from .llm_user import LLMUser

logger = logging.getLogger(__name__)


def agentic_plan(settings: Settings) -> AgenticPlan:
    return AgenticPlan.of(
        settings.agentic_turns,
        settings.tool_latency_ms,
        settings.tool_result_tokens,
        settings.tool_choice,
        settings.fan_out,
        settings.fan_out_share,
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
        """One session, turn by turn, until a reply in text, a failure or its last turn; with
        --trace, the next session of the trace."""
        kind = self.load_context.load_kind
        replayed = self.arrive() if kind.open_loop else None
        if kind is TRACE:
            if replayed is not None and replayed.session is not None:
                self.replay_session(replayed.session, parent="")
            return
        self.hold_session(self.conversation(task="agentic_session"), depth=0)

    def hold_session(self, session: Conversation, depth: int) -> Reply:
        """`session` from its first prompt to its end (module docstring); its last reply."""
        context, plan = self.load_context, self._plan
        prompts, lengths = context.prompts, context.lengths
        assert plan is not None and prompts is not None  # on_start made them
        fields = plan.body_fields()
        prompt = prompts.next_content(lengths.draw_input(prompts.min_tokens))
        reply = session.say(prompt, max_tokens=lengths.draw_output(), **fields)
        while reply.ok and reply.tool_calls and session.turn < plan.turns:
            subagents = plan.draw_fan_out(self._rng, depth)
            if subagents:
                waited, answers = self.fan_out(subagents, session.id, depth + 1)
            else:
                waited, answers = plan.draw_wait(self._rng), []
                gevent.sleep(waited)
            results = [
                prompts.words(plan.draw_result_tokens(self._rng)) if answer is None else answer
                for answer in answers_for_calls(answers, len(reply.tool_calls))
            ]
            reply = session.answer_tools(
                results, waited=waited, max_tokens=lengths.draw_output(), **fields
            )
        return reply

    def fan_out(self, count: int, parent: str, depth: int) -> tuple[float, list[str | None]]:
        """`count` subagent sessions of `parent`, in parallel, each on a lane of its own: the
        seconds until the last ended, and each one's final answer (None: failed, or no text)."""
        started = time.perf_counter()

        def subagent(lane: AgenticUser) -> str | None:
            return lane.subagent(lane.conversation(task="subagent", parent=parent), depth)

        answers = self.on_lanes([(0.0, subagent)] * count)
        return time.perf_counter() - started, answers

    def on_lanes(self, jobs: list[tuple[float, Callable[[AgenticUser], Any]]]) -> list[Any]:
        """Each job (after its delay, s) on a lane of its own, all in parallel; their values
        once all have ended. None outlives the call: a user stopped meanwhile, or a job that
        raised, stops the others and closes every lane."""
        lanes = [self.lane() for _ in jobs]
        greenlets = [
            gevent.spawn_later(delay, job, lane) for lane, (delay, job) in zip(lanes, jobs)
        ]
        try:
            gevent.joinall(greenlets, raise_error=True)
        finally:
            gevent.killall(greenlets)
            for lane in lanes:
                lane.close_lane()
        return [g.value for g in greenlets]

    def subagent(self, session: Conversation, depth: int) -> str | None:
        """A subagent's session on this lane; its final answer (None: failed, or no text)."""
        reply = self.hold_session(session, depth)
        return reply.text if reply.ok and reply.text and not reply.tool_calls else None

    def replay_session(self, plan: SessionPlan, parent: str) -> None:
        """A session of an agentic trace, its subagents' included (module docstring)."""
        prompts = self.load_context.prompts
        assert prompts is not None  # on_start made them
        session = self.conversation(task="agentic_trace", parent=parent)
        held = 0  # the tokens the history holds: the last prompt and its output
        for number, turn in enumerate(plan.turns):
            if number:
                gevent.sleep(turn.wait)
                text = prompts.words(max(turn.input_tokens - held, 1))
            else:
                text = prompts.next_content(max(turn.input_tokens, prompts.min_tokens))
            output = turn.output_tokens
            reply = session.say(text, max_tokens=output, min_tokens=output, ignore_eos=True)
            held = (reply.prompt_tokens or turn.input_tokens) + (reply.completion_tokens or output)
            if turn.children:
                self.replay_children(turn.children, session.id)

    def replay_children(self, children: list[SessionPlan], parent: str) -> None:
        """A turn's subagent sessions, each on a lane from its first turn's wait on; returns when
        all have ended (a user stopped meanwhile stops them)."""

        def replay(child: SessionPlan) -> Callable[[AgenticUser], None]:
            return lambda lane: lane.replay_session(child, parent)

        self.on_lanes([(child.turns[0].wait, replay(child)) for child in children])
