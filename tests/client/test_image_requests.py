"""Requests with images: the built-in test's chat body carries --images generated images after
its exact text, distinct per request, and their count and bytes reach the record; a
locustfile's `chat()` and a conversation's `say(images=...)` count theirs, history included; a
user that sends to /v1/completions refuses --images; the images' prompt-token charge is logged
once, and a charge that varies is named.

Runs in a subprocess: Locust (gevent) must not be imported into pytest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import argparse, base64, io, types

    import orjson
    from locust.env import Environment
    from PIL import Image

    from vllm_load.client.endpoint import Endpoint, Timeouts
    from vllm_load.client.prompts import PromptFactory, PromptPlan, UNIQUE_HEAD_ATOMS, WORDS
    from vllm_load.client.request import MeasuredRequest
    from vllm_load.client.users.closed_loop import ClosedLoopUser
    from vllm_load.client.users.llm_user import LLMUser
    from vllm_load.settings import Settings

    HOST = "http://127.0.0.1:9"  # nothing is sent: `send` is replaced

    class Images(ClosedLoopUser):
        host = HOST

    options = argparse.Namespace(images=2, image_size="64x48", image_format="png",
                                 input_tokens=100, output_tokens=8)
    user = Images(Environment(user_classes=[Images], parsed_options=options))
    context = user.load_context
    context.model = "m"
    context.plan = PromptPlan("chat", 100, tuple(WORDS), 5, "server_tokenize")
    context.prompts = PromptFactory(context.plan)
    assert context.ensure_images() is context.ensure_images()  # one pool per process
    sent = []

    def send(spec):
        sent.append(spec)
        return types.SimpleNamespace(ok=True, prompt_tokens=100 + 2 * 17, tool_calls=[])

    user.send = send
    for _ in range(3):
        assert user.send_request()
    seen = set()
    for spec in sent:
        body = orjson.loads(spec.body)
        (message,) = body["messages"]
        text, *images = message["content"]
        words = 1 + UNIQUE_HEAD_ATOMS + context.plan.body_atoms  # LEAD, head, body: as today
        assert text["type"] == "text" and len(text["text"].split()) == words
        assert [part["type"] for part in images] == ["image_url", "image_url"]
        data = [base64.b64decode(p["image_url"]["url"].split(",", 1)[1]) for p in images]
        assert all(p["image_url"]["url"].startswith("data:image/png;base64,") for p in images)
        for image in data:
            assert Image.open(io.BytesIO(image)).size == (64, 48)
            seen.add(image)
        assert spec.images == 2 and spec.image_bytes == sum(map(len, data))
        assert spec.prompt_tokens == 100  # the text's: the images' tokens are the server's to say
    assert len(seen) == 6  # every image of every request distinct
    assert context.extras["image_charge"].charges == {2: 34}

    # the record carries them
    request = MeasuredRequest(Endpoint(HOST, Timeouts(1, 1, 1, 1)), sent[0], "r-1", 0.0)
    request.end, request.error = 0.5, "connect"
    record = request.record("local")
    assert (record.images, record.image_bytes) == (2, sent[0].image_bytes)

    # without --images the body is what it was: a plain string content
    context.images = None
    user.send_request()
    assert isinstance(orjson.loads(sent[-1].body)["messages"][0]["content"], str)
    assert sent[-1].images == 0 and sent[-1].image_bytes == 0

    # a locustfile's user: chat() and a conversation count the images in the whole history
    class Own(LLMUser):
        host = HOST

    own = Own(Environment(user_classes=[Own], parsed_options=argparse.Namespace()))
    own.load_context.model = "m"
    own.send = send
    inline = "data:image/jpeg;base64," + base64.b64encode(b"x" * 300).decode()
    talk = own.conversation()
    talk.say("first", images=[inline, "https://example.com/a.png"], reply="ok")
    assert (sent[-1].images, sent[-1].image_bytes) == (2, 300)
    talk.say("second", reply="ok")
    assert (sent[-1].images, sent[-1].image_bytes) == (2, 300)  # the history's images
    assert orjson.loads(sent[-1].body)["messages"][0]["content"][1]["image_url"]["url"] == inline
    own.chat([{"role": "user", "content": "no images"}])
    assert (sent[-1].images, sent[-1].image_bytes) == (0, 0)

    # a locustfile's CompletionUser cannot carry them: refused before any load
    from vllm_load.client.users.closed_loop import ChatCompletionUser, CompletionUser
    from vllm_load.user_values import SettingsError

    assert ChatCompletionUser.prepare_run(Settings(images=1), HOST, "m") is None
    try:
        CompletionUser.prepare_run(Settings(images=1), HOST, "m")
        raise AssertionError("CompletionUser took --images")
    except SettingsError as e:
        assert "CompletionUser sends to /v1/completions" in str(e), e
    print("ok")
""")


CHARGE_SCRIPT = textwrap.dedent("""
    import logging

    from vllm_load.client.users.closed_loop import ImageCharge

    class Kept(logging.Handler):
        def __init__(self):
            super().__init__(logging.INFO)
            self.records = []

        def emit(self, record):
            self.records.append((record.levelno, record.getMessage()))

    kept = Kept()
    logger = logging.getLogger("vllm_load.client.users.closed_loop")
    logger.addHandler(kept)
    logger.setLevel(logging.INFO)
    watch = ImageCharge()
    watch.observe(2, 2048 + 660, 2048)
    watch.observe(2, 1000 + 660, 1000)  # another text length, the same charge
    watch.observe(2, None, 2048)  # no usage: nothing to judge
    assert kept.records == [(logging.INFO, "the server charges 660 prompt tokens for 2 image(s)")]
    watch.observe(1, 2048 + 330, 2048)  # another count has its own charge
    watch.observe(2, 2048 + 662, 2048)
    watch.observe(2, 2048 + 664, 2048)  # named once
    assert [m for level, m in kept.records if level == logging.WARNING] == [
        "the server charged 660 prompt tokens for the 2 image(s) of one request and 662 for "
        "another's of the same size: the report judges prompt exactness on the most common "
        "charge, so the others count as inexact"
    ], kept.records
    assert watch.charges == {2: 660, 1: 330} and watch.varied
    print("ok")
""")


def run_script(script: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


def test_requests_carry_their_images_and_records_count_them():
    run_script(SCRIPT)


def test_the_images_charge_is_said_once_and_one_that_varies_is_named():
    run_script(CHARGE_SCRIPT)
