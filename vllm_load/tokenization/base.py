"""What the simulator and the prompt builder need from a tokenizer, and the text of a message."""

from __future__ import annotations

from typing import Any, Protocol, Sequence


class Tokenizer(Protocol):
    """What the simulator and the prompt builder need from a tokenizer."""

    name: str

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`; special-token strings inside it count as one token each."""

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, special tokens included."""

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The prompt text the chat template makes of `messages`."""

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """Token ids of `render_chat(...)`, each special token counted once."""


def message_text(content: Any) -> str:
    """The text of an OpenAI message `content`: a string, or a list of parts whose text parts
    are joined (image parts and the like carry no text here)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)
