"""Every endpoint is declared once (`vllm_load.endpoints`): one declared in a test reaches the
connection's paths and Locust's request names, the request bodies, the prompt's token count, the
stream's parsing, and --endpoint (its choices, its help, the --images check), none of them
edited."""

from __future__ import annotations

import subprocess
import sys
import time

import orjson
import pytest

from vllm_load.client.bodies import BodyTemplate, request_body
from vllm_load.client.endpoint import Endpoint, RequestSpec, Timeouts, stats_name
from vllm_load.client.request import MeasuredRequest
from vllm_load.client.token_counters import LocalTokenCounter
from vllm_load.endpoints import APIS, Api
from vllm_load.settings import Settings

#: a chat at another path, and an endpoint whose prompt is raw text in another field
CHAT_V2 = Api("chat-v2", "/v2/chat/completions", "messages", chat=True)
RAW = Api("raw", "/v1/raw", "input", chat=False)


@pytest.fixture
def declared(monkeypatch):
    for api in (CHAT_V2, RAW):
        monkeypatch.setitem(APIS, api.name, api)


def test_an_endpoint_declared_once_reaches_paths_bodies_counts_and_the_stream(declared):
    endpoint = Endpoint("http://127.0.0.1:9/base", Timeouts(1, 1, 1, 1))
    try:
        assert endpoint.paths["chat-v2"] == "/base/v2/chat/completions"
        assert endpoint.paths["raw"] == "/base/v1/raw"
        assert stats_name("chat-v2", True) == "/v2/chat/completions (stream)"
        assert stats_name("raw", False) == "/v1/raw"
        chat = MeasuredRequest(endpoint, RequestSpec("chat-v2", True, b"{}"), "a", time.time())
        raw = MeasuredRequest(endpoint, RequestSpec("raw", True, b"{}"), "b", time.time())
        assert chat.meter.chat and not raw.meter.chat  # tokens in a delta, or in `text`
    finally:
        endpoint.close()

    settings = Settings()
    assert request_body(settings, "m", "raw", "hi", 5, False)["input"] == "hi"
    assert request_body(settings, "m", "chat-v2", ["x"], 5, False)["messages"] == ["x"]
    assert orjson.loads(BodyTemplate(settings, "m", "chat-v2", 5).fill("hi"))["messages"] == [
        {"role": "user", "content": "hi"}
    ]
    assert orjson.loads(BodyTemplate(settings, "m", "raw", 5).fill("hi"))["input"] == "hi"
    # the prompt's tokens: counted with the chat template for a chat, raw otherwise
    counter = LocalTokenCounter(Tokenizer())
    assert counter.input_ids("hi", "chat-v2") == [1, 2, 3]
    assert counter.input_ids("hi", "raw") == [9]


class Tokenizer:
    """Tells a chat's count (three ids: the template) from a raw prompt's (one)."""

    def encode_chat(self, messages, add_generation_prompt):
        assert messages == [{"role": "user", "content": "hi"}] and add_generation_prompt
        return [1, 2, 3]

    def encode(self, text, add_special_tokens):
        assert text == "hi" and add_special_tokens
        return [9]


_OPTION = """
import argparse
from vllm_load.endpoints import APIS, Api
APIS["raw"] = Api("raw", "/v1/raw", "input", chat=False)  # declared before settings reads it
from vllm_load.settings import Settings, add_arguments
from vllm_load.user_values import SettingsError
parser = argparse.ArgumentParser()
add_arguments(parser)
print(Settings.from_options(parser.parse_args(["--endpoint", "raw"])).endpoint)
print(" ".join(parser.format_help().split()))
try:
    Settings.from_options(parser.parse_args(["--endpoint", "raw", "--images", "1"]))
except SettingsError as e:
    print(e)
"""


def test_endpoint_option_offers_every_declared_endpoint():
    done = subprocess.run(
        [sys.executable, "-c", _OPTION], capture_output=True, text=True, timeout=120, check=True
    )
    chosen, help_text, refused = done.stdout.splitlines()
    assert chosen == "raw"
    assert "{chat,completions,raw}" in help_text
    assert "chat: /v1/chat/completions; completions: /v1/completions; raw: /v1/raw" in help_text
    assert refused == (
        "--images sends images as chat content parts: use --endpoint chat (/v1/raw takes a text "
        "prompt only)"
    )
