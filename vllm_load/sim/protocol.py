"""The OpenAI requests as vLLM reads them: validation, prompt counting and error bodies (the
responses' bytes are `responses.py`'s)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import orjson

from ..tokenization.base import message_text
from .content import ContentError, ContentReader, mark_positions, place_images

ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    500: "InternalServerError",
}


class ApiError(Exception):
    """A request the server refuses; rendered as OpenAI error JSON like vLLM does."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> bytes:
        return error_body(self.status, self.message, self.param)


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    return orjson.dumps(
        {
            "error": {
                "message": message,
                "type": ERROR_TYPES.get(status, "BadRequestError"),
                "param": param,
                "code": status,
            }
        }
    )


@dataclass(frozen=True)
class ApiLimits:
    """What validation needs to know about the served model."""

    model: str
    max_model_len: int
    image_tokens: int | None = None  # what an image costs (None: Qwen3-VL's charge, by size)


@dataclass(frozen=True)
class GenerationRequest:
    """A validated /v1/chat/completions or /v1/completions request."""

    chat: bool
    model: str
    prompt_tokens: int
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    seed: int | None
    temperature: float | None
    prompt_key: str  # the prompt text (and images), for greedy (temperature 0) determinism
    prompt_ids: list[int] | None = None  # its token ids, when asked for (prefix caching)


def parse_json(raw: bytes) -> dict:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ApiError(400, f"JSON decode error: {e}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "Input should be a valid dictionary or object to extract fields from")
    return body


def check_model(body: dict, limits: ApiLimits) -> str:
    model = body.get("model")
    if model is None:
        return limits.model
    if model != limits.model:
        raise ApiError(404, f"The model `{model}` does not exist.", "model")
    return model


_Default = TypeVar("_Default")  # int, or None for "not given"


def _int_field(body: dict, name: str, default: _Default, minimum: int) -> int | _Default:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name}: Input should be a valid integer", name)
    if value < minimum:
        raise ApiError(400, f"{name} must be at least {minimum}, got {value}.", name)
    return value


def _bool_field(body: dict, name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"{name}: Input should be a valid boolean", name)
    return value


def _prompt(
    body: dict, chat: bool, tokenizer, want_ids: bool, image_tokens: int | None = None
) -> tuple[int, str, list[int] | None]:
    """(prompt tokens, prompt key, token ids if `want_ids`) of a chat or completions body;
    without `want_ids` the tokens are only counted, which is cheaper. The key is the prompt's
    text (and its images'), for greedy determinism."""
    if chat:
        return _chat_prompt(body, tokenizer, want_ids, image_tokens)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        if want_ids:
            ids = tokenizer.encode(prompt, add_special_tokens=True)
            return len(ids), prompt, ids
        return tokenizer.count(prompt, add_special_tokens=True), prompt, None
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        # token ids are taken as they are
        return len(prompt), " ".join(map(str, prompt)), prompt if want_ids else None
    if prompt is None:
        raise ApiError(400, "prompt: Field required", "prompt")
    raise ApiError(
        400,
        "prompt must be a string, a list of token ids, or a list of one of them "
        "(the simulator serves one prompt per request)",
        "prompt",
    )


def _chat_prompt(
    body: dict, tokenizer, want_ids: bool, image_tokens: int | None
) -> tuple[int, str, list[int] | None]:
    """A chat body's prompt: its template's text tokens plus each image's charge; with
    `want_ids` the ids carry each image's content where it stands, so that the prefix cache
    shares only what comes before the first image two prompts differ in."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages: Field required (a non-empty list of messages)", "messages")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, "messages: every message must be an object with a role", "messages")
    add_generation_prompt = _bool_field(body, "add_generation_prompt", True)
    try:
        content = ContentReader(image_tokens).read(messages)
    except ContentError as e:
        raise ApiError(400, str(e), "messages") from None
    text = render_chat(tokenizer, content.messages, add_generation_prompt)
    key = text + "".join(f"<image {image.token_id}>" for image in content.images)
    if not want_ids:
        return tokenizer.count(text) + content.image_tokens, key, None
    ids = tokenizer.encode(text, add_special_tokens=False)
    if content.images:
        marked = render_chat(tokenizer, content.marked, add_generation_prompt)
        ids = place_images(ids, content.images, mark_positions(tokenizer, marked))
    return len(ids), key, ids


def parse_generation(
    body: dict, chat: bool, limits: ApiLimits, tokenizer, want_ids: bool = False
) -> GenerationRequest:
    """Validate a completion request the way vLLM does and count its prompt (and tokenize it
    into ids if `want_ids`)."""
    model = check_model(body, limits)
    n = _int_field(body, "n", 1, 1)
    if n != 1:
        raise ApiError(400, "the simulator supports n=1 only", "n")
    stream = _bool_field(body, "stream", False)
    stream_options = body.get("stream_options")
    if stream_options is not None:
        if not stream:
            raise ApiError(
                400, "Stream options can only be defined when `stream=True`.", "stream_options"
            )
        if not isinstance(stream_options, dict):
            raise ApiError(
                400, "stream_options: Input should be a valid dictionary", "stream_options"
            )
    include_usage = bool((stream_options or {}).get("include_usage"))
    temperature = body.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or temperature < 0
    ):
        raise ApiError(400, "temperature must be a non-negative number", "temperature")
    seed = _int_field(body, "seed", None, -(2**63))
    prompt_tokens, prompt_text, prompt_ids = _prompt(
        body, chat, tokenizer, want_ids, limits.image_tokens
    )
    max_tokens = _int_field(body, "max_tokens", None, 1)
    if chat:
        max_tokens = _int_field(body, "max_completion_tokens", max_tokens, 1)
    room = limits.max_model_len - prompt_tokens
    if max_tokens is None:
        if room < 1:
            raise ApiError(
                400,
                f"This model's maximum context length is {limits.max_model_len} tokens. "
                f"However, your request has {prompt_tokens} input tokens. Please reduce the length "
                "of the input messages.",
                "messages" if chat else "prompt",
            )
        max_tokens = room if chat else 16  # vLLM: completions default to 16 tokens
    if prompt_tokens + max_tokens > limits.max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {limits.max_model_len} tokens. However, you "
            f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages or completion.",
            "max_tokens",
        )
    min_tokens = _int_field(body, "min_tokens", 0, 0)
    if min_tokens > max_tokens:
        raise ApiError(
            400,
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.",
            "min_tokens",
        )
    ignore_eos = _bool_field(body, "ignore_eos", False)
    return GenerationRequest(
        chat,
        model,
        prompt_tokens,
        max_tokens,
        min_tokens,
        ignore_eos,
        stream,
        include_usage,
        seed,
        temperature,
        prompt_text,
        prompt_ids,
    )


def render_chat(tokenizer, messages: list[dict], add_generation_prompt: bool) -> str:
    """The chat template applied to `messages`, content parts joined to strings first (as vLLM
    does for string-content templates); a template error is the client's 400."""
    plain = [
        m if isinstance(m.get("content"), str) else {**m, "content": message_text(m.get("content"))}
        for m in messages
    ]
    try:
        return tokenizer.render_chat(plain, add_generation_prompt)
    except ApiError:
        raise
    except Exception as e:  # jinja2 errors, raise_exception() in the template
        raise ApiError(400, f"chat template error: {e}", "messages") from None


def tokenize_answer(body: dict, limits: ApiLimits, tokenizer) -> dict:
    """vLLM's /tokenize answer to `body` (a prompt, or chat messages rendered by the template)."""
    check_model(body, limits)
    if "messages" in body:
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ApiError(400, "messages: Input should be a valid list of messages", "messages")
        text = render_chat(
            tokenizer, messages, body.get("add_generation_prompt", True) is not False
        )
        tokens = tokenizer.encode(
            text, add_special_tokens=bool(body.get("add_special_tokens", False))
        )
    elif isinstance(body.get("prompt"), str):
        tokens = tokenizer.encode(
            body["prompt"], add_special_tokens=body.get("add_special_tokens", True) is not False
        )
    else:
        raise ApiError(400, "prompt (a string) or messages: Field required", "prompt")
    return {
        "count": len(tokens),
        "max_model_len": limits.max_model_len,
        "tokens": tokens,
        "token_strs": None,
    }


def detokenize_answer(body: dict, limits: ApiLimits, tokenizer) -> dict:
    """vLLM's /detokenize answer to `body` (a list of token ids)."""
    check_model(body, limits)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in tokens
    ):
        raise ApiError(400, "tokens: Input should be a valid list of integers", "tokens")
    try:
        return {"prompt": tokenizer.decode(tokens)}
    except (ValueError, OverflowError, TypeError) as e:
        raise ApiError(400, f"tokens: {e}", "tokens") from None
