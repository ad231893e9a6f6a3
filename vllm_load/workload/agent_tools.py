"""What an agentic session offers and waits for, decided offline (`--agentic`, docs/workload.md).

A session is one task given to an agent: a prompt, then turns. Every request offers the same
`TOOLS` (OpenAI chat format) with --tool-choice; a reply that ends in tool calls is answered,
after the tools' latency (a draw of --tool-latency-ms per turn: the calls of one turn run in
parallel), with one `role: tool` message per call of --tool-result-tokens; a reply in text ends
the session, as does its --agentic-turns-th request. A turn that calls tools may instead fan
out (--fan-out K subagents, a draw of --fan-out-share per such turn of a top-level session): K
subagent sessions run in parallel, each a session of its own (depth 1: a subagent never fans
out), and their final answers are the results of the parent's calls. `AgenticPlan` holds the
settings read once, and draws with the caller's `random.Random`, so a seeded process draws the
same session.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Sequence

from ..user_values import SettingsError, probability
from .lengths import LengthDistribution, parse_length

#: what a tool's argument may hold, at most 64 plain characters: a server that forces a call
#: with a JSON-schema structured output (vLLM with a named or required tool_choice) then closes
#: the argument's string however long the model would go on, and writes no control character
#: raw into it (a tiny random model did both: its arguments were cut at max_tokens, or were not
#: JSON; bench/README.md)
ARGUMENT_PATTERN = "^[A-Za-z0-9 ._/-]{1,64}$"
#: the tools every agentic request offers: an agent's usual three
TOOLS: tuple[dict[str, Any], ...] = tuple(
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    argument: {"type": "string", "description": what, "pattern": ARGUMENT_PATTERN}
                },
                "required": [argument],
            },
        },
    }
    for name, description, argument, what in (
        ("search", "Search the web and return the top results.", "query", "what to look for"),
        ("read_file", "Read a file of the workspace.", "path", "the file's path"),
        ("run_command", "Run a shell command and return its output.", "command", "the command"),
    )
)
TOOL_NAMES: tuple[str, ...] = tuple(t["function"]["name"] for t in TOOLS)
#: --tool-choice's words; any other value names one of `TOOL_NAMES`
CHOICES = ("auto", "required", "none")
#: the most subagents one turn may fan out (--fan-out): each is a request in flight beside its
#: parent's user, so a level's in-flight requests may reach its users times this plus one
MAX_FAN_OUT = 16


def parse_fan_out_share(value: Any) -> float:
    """--fan-out-share: a share of a session's tool-calling turns, 0 to 1."""
    return probability(
        value, "--fan-out-share", "turns", "0.25: one tool-calling turn in four fans out"
    )


def parse_fan_out(value: Any) -> int:
    """--fan-out: subagents per fanned-out turn, 0 (none) to `MAX_FAN_OUT`."""
    text = str(value).strip()
    if not text.isdigit() or int(text) > MAX_FAN_OUT:
        raise SettingsError(
            f"--fan-out must be a whole number of subagents from 0 (none) to {MAX_FAN_OUT}, "
            f"got {value!r}"
        )
    return int(text)


def answers_for_calls(answers: Sequence[str | None], calls: int) -> list[str | None]:
    """The results of a fanned-out turn's `calls` tool calls: subagent j answers call j % calls
    (a call's answers joined by a blank line); a call no subagent answered (none assigned, or
    each failed or ended without text: None) gets None, and the caller a drawn result, as a
    tool's."""
    joined: list[list[str]] = [[] for _ in range(calls)]
    for j, answer in enumerate(answers):
        if answer is not None:
            joined[j % calls].append(answer)
    return ["\n\n".join(parts) if parts else None for parts in joined]


def parse_tool_choice(value: Any) -> str:
    """--tool-choice as given, checked: a word of `CHOICES` or the name of a tool."""
    text = str(value).strip()
    if text not in CHOICES and text not in TOOL_NAMES:
        raise SettingsError(
            f"--tool-choice must be {', '.join(CHOICES)} or a tool's name "
            f"({', '.join(TOOL_NAMES)}), got {value!r}"
        )
    return text


def tool_choice_field(choice: str) -> Any:
    """The body's `tool_choice` for --tool-choice: the word, or a named function."""
    if choice in CHOICES:
        return choice
    return {"type": "function", "function": {"name": choice}}


@dataclass(frozen=True)
class AgenticPlan:
    """One process's agentic sessions: turns at most, the tools' latency (ms) and each result's
    length (tokens), and what each request adds to its body."""

    turns: int
    latency_ms: LengthDistribution
    result_tokens: LengthDistribution
    tool_choice: str
    fan_out: int = 0  # subagents per fanned-out turn (0: none)
    fan_out_share: float = 0.0  # the share of a top-level session's tool-calling turns

    @classmethod
    def of(
        cls,
        turns: int,
        latency_spec: str,
        result_spec: str,
        tool_choice: str,
        fan_out: int = 0,
        fan_out_share: float = 0.0,
    ) -> AgenticPlan:
        return cls(
            turns,
            parse_length(latency_spec, "--tool-latency-ms"),
            parse_length(result_spec, "--tool-result-tokens"),
            parse_tool_choice(tool_choice),
            parse_fan_out(fan_out),
            parse_fan_out_share(fan_out_share),
        )

    def body_fields(self) -> dict[str, Any]:
        """The fields every request of a session adds to its body."""
        return {"tools": list(TOOLS), "tool_choice": tool_choice_field(self.tool_choice)}

    def draw_wait(self, rng: random.Random) -> float:
        """Seconds one turn's tools take (its calls run in parallel: one draw per turn)."""
        return self.latency_ms.sample(rng) / 1000.0

    def draw_result_tokens(self, rng: random.Random) -> int:
        return self.result_tokens.sample(rng)

    def draw_fan_out(self, rng: random.Random, depth: int) -> int:
        """How many subagents a tool-calling turn of a session at `depth` fans out: --fan-out
        for a drawn --fan-out-share of a top-level session's turns, else 0 (its tools run).
        Every top-level turn draws, so which turns fan out does not depend on the replies."""
        if depth > 0 or not self.fan_out:
            return 0
        return self.fan_out if rng.random() < self.fan_out_share else 0

    def describe(self) -> dict[str, Any]:
        """For run.json's `workload`."""
        return {
            "turns": self.turns,
            "tool_latency_ms": self.latency_ms.spec,
            "tool_result_tokens": self.result_tokens.spec,
            "tool_choice": self.tool_choice,
            "tools": list(TOOL_NAMES),
            "fan_out": self.fan_out,
            "fan_out_share": self.fan_out_share,
        }
