"""What a request brings back (`Reply`), and a chat held over several turns of them
(`Conversation`, which `llm_user.LLMUser.conversation()` makes): its messages, the tool calls its
last reply left to answer, and its turns' numbers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from ...run_format.records import RequestRecord
from ...workload.images import user_content
from ..request import MeasuredRequest
from ..tool_calls import ToolCall


@dataclass(slots=True)  # (not frozen: a frozen __init__ costs twice as much, per request)
class Reply:
    """What one request brought back: the reply's text, the server's token counts, the client's
    timings (seconds from when the request was due) and, if it failed, why (`error` is one of the
    categories of docs/run-format.md); `tool_calls`: the calls it ended in (a request that
    offered `tools`)."""

    ok: bool
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    ttft: float | None
    e2e: float
    finish_reason: str | None
    error: str
    error_message: str
    request_id: str
    tool_calls: list[ToolCall]

    @classmethod
    def of(cls, request: MeasuredRequest, record: RequestRecord) -> Reply:
        return cls(  # (positional, in the fields' order: keywords cost 2.0 µs, not 0.9)
            record.ok == 1,  # ok
            request.text if request.spec.keep_text else "",  # text
            record.prompt_tokens,
            record.completion_tokens,
            record.ttft,
            record.e2e,
            request.meter.finish_reason,
            record.error,
            record.error_message,
            record.request_id,
            request.tool_calls,
        )


class Chatter(Protocol):
    """Who holds a conversation: an `llm_user.LLMUser`."""

    def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> Reply: ...


class Conversation:
    """A chat held over several turns: it keeps the messages and numbers the turns.

    `say(text)` appends the user's message (with `images=`: image URLs after its text, as
    OpenAI content parts), sends the whole history, appends the reply (the server's, or a
    scripted `reply=`) and returns the `Reply`. A request that offers `tools=` (OpenAI's chat
    format) may get a reply that ends in tool calls: the history keeps them in the assistant
    message, and `answer_tools(results)` appends one `role: tool` message per call and sends the
    next turn. Every turn's record carries the conversation's id and the turn's index, from 0,
    and `parent`, the id of the session that fanned this one out ("" for a top-level one).
    """

    def __init__(
        self,
        user: Chatter,
        conversation_id: str,
        task: str,
        system: str | None,
        parent: str = "",
    ) -> None:
        self.user = user
        self.id = conversation_id
        self.parent = parent
        self.task = task
        self.messages: list[dict[str, Any]] = []
        if system:
            self.messages.append({"role": "system", "content": system})
        self.turn = 0
        self.pending_calls: list[ToolCall] = []  # the last reply's tool calls, unanswered

    def say(
        self,
        text: str,
        *,
        max_tokens: int | None = None,
        reply: str | None = None,
        images: Sequence[str] = (),
        **fields: Any,
    ) -> Reply:
        """One turn: send `text` (and `images`, URLs: http(s) or data:) after the history; the
        history then holds the answer (`reply` if given, else the server's text, empty if the
        request failed), and the images stay in it, as a client's history keeps them."""
        self.messages.append({"role": "user", "content": user_content(text, images)})
        return self._send(max_tokens, reply, None, fields)

    def answer_tools(
        self,
        results: Sequence[str],
        *,
        waited: float | None = None,
        max_tokens: int | None = None,
        **fields: Any,
    ) -> Reply:
        """One turn after a reply that ended in tool calls: `results[i]` answers its call `i` (a
        `role: tool` message naming the call's id), then the history is sent as `say` does.
        `waited`: the seconds the tools took, recorded as the turn's `tool_wait_s`."""
        calls = self.pending_calls
        if len(results) != len(calls):
            raise ValueError(f"{len(calls)} tool calls to answer, {len(results)} results given")
        for call, result in zip(calls, results):
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return self._send(max_tokens, None, waited, fields)

    def _send(
        self, max_tokens: int | None, reply: str | None, waited: float | None, fields: dict
    ) -> Reply:
        answer = self.user.chat(
            self.messages,
            max_tokens=max_tokens,
            task=self.task,
            conversation=self.id,
            turn=self.turn,
            tool_wait=waited,
            parent=self.parent,
            **fields,
        )
        message: dict[str, Any] = {
            "role": "assistant",
            "content": answer.text if reply is None else reply,
        }
        if answer.tool_calls:
            message["tool_calls"] = [call.message() for call in answer.tool_calls]
        self.messages.append(message)
        self.pending_calls = answer.tool_calls
        self.turn += 1
        return answer
