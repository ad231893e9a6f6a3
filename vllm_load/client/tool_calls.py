"""The tool calls an assistant reply ends in (OpenAI chat format), streamed or whole.

A streamed reply sends each call in fragments, `delta.tool_calls: [{index, id?, type?,
function: {name?, arguments?}}]`: the first fragment of a call (by `index`) names it and gives
its `id`, the following ones add pieces of its `arguments` text. `assemble` joins them by index;
`from_message` reads a whole reply's `message.tool_calls`. Either way `checked` refuses a call
the next turn could not answer: no id, no function name, or arguments that are not a JSON object
(`ToolCallError`, one message; the request that brought it is then one recorded error,
`bad_tool_call`, and its user carries on with its next session).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import orjson

from .sse import SseMeter, StreamError


class ToolCallError(Exception):
    """A reply's tool call is malformed; the message says how."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call: its id (the tool message answering it names it), function and arguments as
    the model wrote them (JSON text)."""

    id: str
    name: str
    arguments: str

    def message(self) -> dict[str, Any]:
        """The call as the assistant message of the next turn's history carries it."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


def reply_calls(stream: bool, meter: SseMeter, message_calls: Any) -> list[ToolCall]:
    """A reply's calls: a stream's (its meter kept its events) or a whole reply's
    `message.tool_calls`. A malformed call is the request's failure, `bad_tool_call`."""
    try:
        return assemble(meter.tool_call_fragments()) if stream else from_message(message_calls)
    except ToolCallError as e:
        raise StreamError("bad_tool_call", str(e)[:300]) from None


def assemble(fragments: Iterable[Any]) -> list[ToolCall]:
    """The calls of a stream's `delta.tool_calls` fragments, in order of their index."""
    parts: dict[int, dict[str, Any]] = {}
    for fragment in fragments:
        if not isinstance(fragment, dict):
            raise ToolCallError(f"a tool_calls fragment is not an object: {fragment!r:.80}")
        index = fragment.get("index", 0)
        if not isinstance(index, int) or isinstance(index, bool):
            raise ToolCallError(f"a tool_calls fragment has no whole index: {index!r:.40}")
        call = parts.setdefault(index, {"id": "", "name": "", "arguments": []})
        if isinstance(fragment.get("id"), str) and fragment["id"]:
            call["id"] = fragment["id"]
        function = fragment.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str) and function["name"]:
                call["name"] = function["name"]
            if isinstance(function.get("arguments"), str):
                call["arguments"].append(function["arguments"])
    return [
        checked(parts[i]["id"], parts[i]["name"], "".join(parts[i]["arguments"]))
        for i in sorted(parts)
    ]


def from_message(tool_calls: Any) -> list[ToolCall]:
    """The calls of a whole reply's `message.tool_calls` (None or [] : none)."""
    if tool_calls is None:
        return []
    if not isinstance(tool_calls, list):
        raise ToolCallError(f"message.tool_calls is not a list: {tool_calls!r:.80}")
    calls = []
    for call in tool_calls:
        if not isinstance(call, dict):
            raise ToolCallError(f"a tool call is not an object: {call!r:.80}")
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        call_id, name, arguments = call.get("id"), function.get("name"), function.get("arguments")
        calls.append(
            checked(
                call_id if isinstance(call_id, str) else "",
                name if isinstance(name, str) else "",
                arguments if isinstance(arguments, str) else "",
            )
        )
    return calls


def checked(call_id: str, name: str, arguments: str) -> ToolCall:
    """The call, if the next turn can answer it (else `ToolCallError`)."""
    if not call_id:
        raise ToolCallError(f"a tool call to {name or '(no name)'} has no id")
    if not name:
        raise ToolCallError(f"tool call {call_id} names no function")
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        raise ToolCallError(
            f"tool call {call_id} ({name}) has arguments that are not JSON: {arguments!r:.80}"
        ) from None
    if not isinstance(parsed, dict):
        raise ToolCallError(
            f"tool call {call_id} ({name}) has arguments that are not a JSON object: "
            f"{arguments!r:.80}"
        )
    return ToolCall(call_id, name, arguments)
