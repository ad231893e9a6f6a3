"""A body template's bytes are those of the whole body dumped as before (`request_body`)."""

from __future__ import annotations

import orjson
import pytest

from vllm_load.client.bodies import BodyTemplate, BodyTemplates, exact_output, request_body
from vllm_load.settings import Settings

PARTS = [
    {"type": "text", "text": 'a "quoted" prompt\n'},
    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
]


def whole_body(settings: Settings, model: str, api: str, prompt, output_tokens: int) -> bytes:
    """The body as the built-in test dumped it, whole, for every request."""
    content = [{"role": "user", "content": prompt}] if api == "chat" else prompt
    body = request_body(settings, model, api, content, output_tokens, settings.stream)
    if settings.vllm_params:
        body.update(exact_output(output_tokens))
    return orjson.dumps(body)


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize(
    "settings",
    [
        Settings(),
        Settings(stream=False),
        Settings(temperature=0.7, vllm_params=False),
        Settings(stream=False, temperature=0.0),
    ],
    ids=["defaults", "no-stream", "temperature-no-vllm-params", "no-stream-temperature-0"],
)
def test_template_bytes_are_the_whole_bodys(api: str, settings: Settings) -> None:
    prompts = ["Continue the text", 'with "quotes", \\ and \u00e9 and \x01', ""]
    if api == "chat":
        prompts.append(PARTS)
    template = BodyTemplate(settings, "sim-llama-8b", api, 37)
    for prompt in prompts:
        assert template.fill(prompt) == whole_body(settings, "sim-llama-8b", api, prompt, 37)


def test_templates_per_api_and_output_length() -> None:
    settings = Settings(stream=False)
    templates = BodyTemplates(settings, "m")
    for api, tokens in [("chat", 8), ("completions", 8), ("chat", 9), ("chat", 8)]:
        assert templates.body(api, tokens, "p") == whole_body(settings, "m", api, "p", tokens)
    assert orjson.loads(templates.body("chat", 9, "p"))["max_tokens"] == 9
