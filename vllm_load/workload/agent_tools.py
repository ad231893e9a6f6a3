"""What an agentic session offers and waits for, decided offline (`--agentic`, docs/workload.md).

A session is one task given to an agent: a prompt, then turns. Every request offers the same
`TOOLS` (OpenAI chat format) with --tool-choice; a reply that ends in tool calls is answered,
after the tools' latency (a draw of --tool-latency-ms per turn: the calls of one turn run in
parallel), with one `role: tool` message per call of --tool-result-tokens; a reply in text ends
the session, as does its --agentic-turns-th request. `AgenticPlan` holds the settings read once,
and draws with the caller's `random.Random`, so a seeded process draws the same session.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from ..user_values import SettingsError
from .lengths import LengthDistribution, parse_length

#: the tools every agentic request offers: an agent's usual three
TOOLS: tuple[dict[str, Any], ...] = tuple(
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {argument: {"type": "string", "description": what}},
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

    @classmethod
    def of(cls, turns: int, latency_spec: str, result_spec: str, tool_choice: str) -> AgenticPlan:
        return cls(
            turns,
            parse_length(latency_spec, "--tool-latency-ms"),
            parse_length(result_spec, "--tool-result-tokens"),
            parse_tool_choice(tool_choice),
        )

    def body_fields(self) -> dict[str, Any]:
        """The fields every request of a session adds to its body."""
        return {"tools": list(TOOLS), "tool_choice": tool_choice_field(self.tool_choice)}

    def draw_wait(self, rng: random.Random) -> float:
        """Seconds one turn's tools take (its calls run in parallel: one draw per turn)."""
        return self.latency_ms.sample(rng) / 1000.0

    def draw_result_tokens(self, rng: random.Random) -> int:
        return self.result_tokens.sample(rng)

    def describe(self) -> dict[str, Any]:
        """For run.json's `workload`."""
        return {
            "turns": self.turns,
            "tool_latency_ms": self.latency_ms.spec,
            "tool_result_tokens": self.result_tokens.spec,
            "tool_choice": self.tool_choice,
            "tools": list(TOOL_NAMES),
        }
