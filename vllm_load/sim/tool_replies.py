"""Tool calls, as a vLLM started with a tool parser answers a chat request that offers `tools`.

`read_offer(body)` validates `tools` and `tool_choice` as vLLM does (a 400 for a forced choice
without tools, or one that names no offered function). `ToolCaller.decide` says whether a reply
ends in a call, and to which function: always for `required` or a named function, never for
`none`, and for `auto` a seeded share (--tool-call-share) of the requests. A `ToolCallText`
spreads the call over the reply's generated tokens: the first token's chunk names the function
and gives the call's id, each later token adds a piece of its arguments, `{"<argument>": "...`
(the function's first required parameter, the vocabulary's text as its value) until the last
token closes them; streamed in vLLM's delta format, `delta.tool_calls: [{index, id?, type?,
function: {name?, arguments}}]`, and the reply's finish reason is `tool_calls`. What is
simplified: one call per reply, and a reply that calls a tool carries no reasoning or text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

import orjson

from .output import OutputPlan
from .protocol import ApiError

#: the finish reason of a reply that ends in tool calls
TOOL_CALLS = "tool_calls"
_WORDS = ("auto", "none", "required")


@dataclass(frozen=True)
class ToolOffer:
    """The functions a request offers (name -> the argument a call fills) and its choice:
    `auto`, `none`, `required`, or the name of the function it forces."""

    arguments: dict[str, str]
    choice: str

    @property
    def forced(self) -> str:
        return "" if self.choice in _WORDS else self.choice


def read_offer(body: dict) -> ToolOffer | None:
    """The request's offer of tools, None when it offers none (a 400 for what vLLM refuses)."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is not None and not isinstance(tools, list):
        raise ApiError(400, "tools: Input should be a valid list", "tools")
    arguments = {}
    for tool in tools or ():
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ApiError(400, "tools: every tool must be a function with a name", "tools")
        arguments[function["name"]] = _first_argument(function.get("parameters"))
    word = _choice(choice)
    if not arguments:
        if word not in ("auto", "none"):
            raise ApiError(400, "When using `tool_choice`, `tools` must be set.", "tool_choice")
        return None
    if word not in _WORDS and word not in arguments:
        raise ApiError(400, f"Tool '{word}' has not been passed in `tools`.", "tool_choice")
    return ToolOffer(arguments, word)


def _choice(choice: Any) -> str:
    if choice is None:
        return "auto"
    if isinstance(choice, str) and choice in _WORDS:
        return choice
    if isinstance(choice, dict):
        function = choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return function["name"]
    raise ApiError(
        400,
        "tool_choice must be auto, none, required or {type: function, function: {name}}",
        "tool_choice",
    )


def _first_argument(parameters: Any) -> str:
    """The argument a simulated call fills: the first required one, else the first, else
    `input`."""
    if isinstance(parameters, dict):
        required = parameters.get("required")
        if isinstance(required, list) and required and isinstance(required[0], str):
            return required[0]
        properties = parameters.get("properties")
        if isinstance(properties, dict) and properties:
            return str(next(iter(properties)))
    return "input"


class ToolCaller:
    """Decides, request by request, which replies end in a tool call (seeded)."""

    def __init__(self, share: float, seed: int = 0) -> None:
        self.share = share
        self._rng = random.Random(seed ^ 0x7001_CA11)

    def decide(self, offer: ToolOffer | None) -> str | None:
        """The function the reply calls; None: it answers in text."""
        if offer is None or offer.choice == "none":
            return None
        if offer.forced:
            return offer.forced
        if offer.choice == "required" or self._rng.random() < self.share:
            return self._rng.choice(sorted(offer.arguments))
        return None

    def attach(
        self, plan: OutputPlan, offer: ToolOffer | None, called: str | None, rid: str, vocab
    ) -> OutputPlan:
        """The plan of a reply that calls `called` (`decide`'s answer; None: unchanged)."""
        if offer is None or called is None:
            return plan
        call_id = f"chatcmpl-tool-{rid.rpartition('-')[2]}"
        text = ToolCallText(
            call_id, called, offer.arguments[called], vocab, plan.offset, plan.length
        )
        return replace(plan, tool_call=text)


class ToolCallText:
    """One call spread over a reply's `total` tokens (the vocabulary's text from `offset`)."""

    __slots__ = ("call_id", "name", "argument", "_vocab", "_offset", "_total")

    def __init__(self, call_id: str, name: str, argument: str, vocab, offset: int, total: int):
        self.call_id = call_id
        self.name = name
        self.argument = argument
        self._vocab = vocab
        self._offset = offset
        self._total = total

    def piece(self, index: int) -> str:
        """Token `index`'s part of the arguments' JSON text."""
        opening = "{" + orjson.dumps(self.argument).decode() + ': "'
        pieces = []
        if index == 0:
            pieces.append(opening)
        elif index < self._total - 1:
            text = self._vocab.text(self._offset, index, index + 1)
            pieces.append(orjson.dumps(text).decode()[1:-1])
        if index == self._total - 1:
            pieces.append('"}')
        return "".join(pieces)

    def arguments(self) -> str:
        return "".join(self.piece(i) for i in range(self._total))

    def delta(self, start: int, end: int) -> bytes:
        """The delta of a chunk of tokens [start, end): the call's head with its first."""
        text = "".join(self.piece(i) for i in range(start, end))
        call: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
        if start == 0:
            call = {
                "id": self.call_id,
                "type": "function",
                "index": 0,
                "function": {"name": self.name, "arguments": text},
            }
        return orjson.dumps({"tool_calls": [call]})

    def message(self) -> list[dict[str, Any]]:
        """The whole reply's `message.tool_calls`."""
        return [
            {
                "id": self.call_id,
                "type": "function",
                "function": {"name": self.name, "arguments": self.arguments()},
            }
        ]
