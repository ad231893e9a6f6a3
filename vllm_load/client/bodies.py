"""Request bodies: the body every request starts from (`request_body`), the fields that force an
exact output length (`exact_output`), and a body's JSON made once per kind of request with its
prompt left to fill in (`BodyTemplate`).

The built-in test sends bodies that differ only in their prompt (and, with drawn lengths, in
their output length): a template holds the JSON before and after the prompt, so a request costs
one `orjson.dumps` of its prompt and a join, not a dict and a dump of the whole body. The bytes
are those `orjson.dumps` makes of the whole body (keys in the same order).
"""

from __future__ import annotations

from typing import Any

import orjson

from ..endpoints import APIS
from ..settings import Settings

# where a template's prompt goes: a string no prompt holds (NUL is never in one)
_SLOT = "\x00vllm-load: the prompt\x00"
_SLOT_JSON = orjson.dumps(_SLOT)


def request_body(
    settings: Settings, model: str | None, api: str, content: Any, max_tokens: int, stream: bool
) -> dict[str, Any]:
    """The body every request starts from: the model, the prompt in its API's field (a chat's
    messages, a completion's prompt), `max_tokens`, streaming with usage, and --temperature if set."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": stream}
    body[APIS[api].prompt_field] = content
    if stream:
        body["stream_options"] = {"include_usage": True}
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    return body


def exact_output(tokens: int) -> dict[str, Any]:
    """The body fields that make vLLM generate exactly `tokens` tokens."""
    return {"min_tokens": tokens, "ignore_eos": True}


class BodyTemplate:
    """The JSON body of one kind of single-prompt request with its prompt left out: `fill(prompt)`
    gives the bytes of the body with that prompt (a chat message's content: text, or content
    parts; a completion's prompt)."""

    __slots__ = ("_head", "_tail")

    def __init__(self, settings: Settings, model: str | None, api: str, output_tokens: int) -> None:
        """The body of a request to `api` for `output_tokens` (exactly that many with
        --vllm-params), streamed as --stream says."""
        content = APIS[api].prompt(_SLOT)
        body = request_body(settings, model, api, content, output_tokens, settings.stream)
        if settings.vllm_params:
            body.update(exact_output(output_tokens))
        self._head, self._tail = orjson.dumps(body).split(_SLOT_JSON)

    def fill(self, prompt: Any) -> bytes:
        return self._head + orjson.dumps(prompt) + self._tail


class BodyTemplates:
    """One process's templates for one test, by API and output length (made on first use)."""

    KEY = "body_templates"  # in `LoadContext.extras`: one per process and test

    __slots__ = ("settings", "model", "_made")

    def __init__(self, settings: Settings, model: str | None) -> None:
        self.settings = settings
        self.model = model
        self._made: dict[tuple[str, int], BodyTemplate] = {}

    def body(self, api: str, output_tokens: int, prompt: Any) -> bytes:
        """The body of a request to `api` for `output_tokens` with this prompt."""
        template = self._made.get((api, output_tokens))
        if template is None:
            template = self._made[(api, output_tokens)] = BodyTemplate(
                self.settings, self.model, api, output_tokens
            )
        return template.fill(prompt)
