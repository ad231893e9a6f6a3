"""The server's endpoints vllm-load sends to, declared once: --endpoint's choices and help, each
request's `api`, the path it is posted to, the body field its prompt goes in, and whether it is a
chat: a chat's prompt is messages (the server applies its chat template, so the prompt's tokens
are counted as one user message with the generation prompt; images go in as content parts) and
its stream's tokens come in `choices[].delta.content` (beside any reasoning), a completion's in
`choices[].text`.

Everything reads them from here: `settings` (--endpoint), `client.endpoint` (the paths and
Locust's request names), `client.bodies` (where the prompt goes), `client.token_counters`, the
users (`client.users`). Adding an endpoint is its declaration here, and its stream's parsing
where it differs from these two (`client.sse`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Api:
    """An endpoint: its name (--endpoint's value), its path under the server's URL, the body
    field that carries the prompt, and whether it is a chat (see the module's docstring)."""

    name: str
    path: str
    prompt_field: str
    chat: bool

    def prompt(self, content: object) -> object:
        """What the body's `prompt_field` holds for a prompt of `content` (text, or a chat
        message's content parts): one user message for a chat, the content itself otherwise."""
        return [{"role": "user", "content": content}] if self.chat else content


CHAT = Api("chat", "/v1/chat/completions", "messages", chat=True)
COMPLETIONS = Api("completions", "/v1/completions", "prompt", chat=False)

#: every endpoint, by name; the first is --endpoint's default
APIS: Mapping[str, Api] = {api.name: api for api in (CHAT, COMPLETIONS)}


def endpoints_help() -> str:
    """--endpoint's help: `chat: /v1/chat/completions; completions: /v1/completions`."""
    return "; ".join(f"{api.name}: {api.path}" for api in APIS.values())
