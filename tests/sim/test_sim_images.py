"""Images in chat messages on the simulator: OpenAI content parts with `data:` URLs, each image
charged Qwen3-VL's prompt tokens for its size (or --image-tokens N), refused with a 400 when
malformed, counted in /metrics, and told apart by the prefix cache."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image as PILImage
from support.sim_http import call, metric_value, sse_events

from vllm_load.sim.child import SimulatorProcess
from vllm_load.sim.content import (
    ContentError,
    ContentReader,
    image_size,
    mark_positions,
    place_images,
    qwen_vl_tokens,
)
from vllm_load.tokenization.sim import SimTokenizer

MODEL = "sim-llama-8b"
TEXT = "Describe what you see in these pictures, please."


def image_bytes(width: int, height: int, fmt: str = "PNG", colour: int = 0, **save) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (width, height), (colour, 255 - colour, 77)).save(out, fmt, **save)
    return out.getvalue()


def data_url(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64," + base64.b64encode(data).decode()


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def png_part(width: int = 512, height: int = 512, colour: int = 0) -> dict:
    return image_part(data_url(image_bytes(width, height, colour=colour)))


def chat(url: str, content, **body) -> tuple[int, dict]:
    return call(
        url + "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 2}
        | body,
    )


# --- the charge -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size, tokens",
    [
        ((512, 512), 16 * 16 + 2),  # 512 / 32 tiles a side, and the two delimiters
        ((400, 300), 12 * 9 + 2),  # rounded to 384 x 288 (Qwen3-VL's 400x300 example: 108 tiles)
        ((32, 32), 8 * 8 + 2),  # scaled up to the 65,536-pixel minimum: 256 x 256
        ((8000, 8000), 128 * 128 + 2),  # scaled down to the 16,777,216-pixel maximum
        ((2000, 80), 62 * 2 + 2),  # 1984 x 64: 62.5 and 2.5 tiles round half to even
    ],
)
def test_qwen_vl_charge_by_size(size, tokens):
    assert qwen_vl_tokens(*size) == tokens


def test_an_image_over_200_to_1_is_refused_like_the_vision_processor_does():
    with pytest.raises(ContentError, match="aspect ratio"):
        qwen_vl_tokens(5000, 20)


def test_the_size_is_read_from_png_and_jpeg_headers():
    assert image_size(image_bytes(640, 480)) == (640, 480)
    assert image_size(image_bytes(300, 200, "JPEG")) == (300, 200)
    # an ICC profile of 20 kB before the frame header: past the first bytes read
    jpeg = image_bytes(123, 45, "JPEG", icc_profile=b"\0" * 20000)
    reader = ContentReader()
    assert reader.image(image_part(data_url(jpeg, "image/jpeg"))).tokens == qwen_vl_tokens(123, 45)


def test_images_are_placed_where_they_stand_in_the_token_ids():
    tokenizer = SimTokenizer()
    content = [{"type": "text", "text": TEXT}, png_part(), {"type": "text", "text": " Thanks."}]
    read = ContentReader(image_tokens=7).read([{"role": "user", "content": content}])
    assert [m["content"] for m in read.messages] == [TEXT + " Thanks."]
    text = tokenizer.render_chat(read.messages)
    marked = tokenizer.render_chat(read.marked)
    positions = mark_positions(tokenizer, marked)
    before = tokenizer.count("<|im_start|>user\n" + TEXT)
    assert positions == [before]
    ids = place_images(tokenizer.encode(text), read.images, positions)
    assert len(ids) == tokenizer.count(text) + 7
    assert ids[before : before + 7] == [read.images[0].token_id] * 7
    assert ids[:before] == tokenizer.encode(text)[:before]


# --- over HTTP ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim():
    with SimulatorProcess("--echo") as s:
        yield s


def test_each_image_adds_its_charge_to_the_prompt_tokens_exactly(sim):
    status, plain = chat(sim.url, TEXT)
    assert status == 200
    text_only = plain["usage"]["prompt_tokens"]
    parts = [{"type": "text", "text": TEXT}, png_part(), png_part(colour=99)]
    status, answer = chat(sim.url, parts)
    assert status == 200 and answer["usage"]["prompt_tokens"] == text_only + 2 * 258
    # text split around images is the same text: parts are joined in order
    parts = [
        {"type": "text", "text": TEXT[:10]},
        png_part(400, 300),
        {"type": "text", "text": TEXT[10:]},
    ]
    status, answer = chat(sim.url, parts)
    assert answer["usage"]["prompt_tokens"] == text_only + 110
    # streamed: the usage chunk says the same
    jpeg = image_part(data_url(image_bytes(512, 512, "JPEG"), "image/jpeg"))
    status, text = chat(
        sim.url,
        [{"type": "text", "text": TEXT}, jpeg],
        stream=True,
        stream_options={"include_usage": True},
    )
    assert status == 200 and sse_events(text)[-2]["usage"]["prompt_tokens"] == text_only + 258


def test_image_tokens_fixes_the_charge_and_metrics_count_it():
    with SimulatorProcess("--time-scale", "0.01", "--image-tokens", "100") as sim:
        _, plain = chat(sim.url, TEXT)
        _, answer = chat(sim.url, [{"type": "text", "text": TEXT}, png_part(), png_part(64, 64)])
        metrics = call(sim.url + "/metrics")[1]
    text_only = plain["usage"]["prompt_tokens"]
    assert answer["usage"]["prompt_tokens"] == text_only + 200
    # vLLM counts an image's placeholder tokens as prompt tokens
    assert metric_value(metrics, "vllm:prompt_tokens_total") == 2 * text_only + 200
    assert metric_value(metrics, "vllm:request_prompt_tokens_sum") == 2 * text_only + 200


@pytest.mark.parametrize(
    "part, message",
    [
        (image_part("data:image/png;base64,iVBOR!!!"), "base64 is malformed"),
        (image_part("data:image/png;base64,iVBORw0"), "base64 is malformed"),
        (image_part("https://example.com/cat.png"), "does not fetch images"),
        (image_part("data:image/png,rawbytes"), "is not a base64 data URL"),
        (image_part("/tmp/cat.png"), "is not a base64 data URL"),
        (image_part("data:text/plain;base64,aGVsbG8="), "is not an image"),
        (image_part(data_url(b"GIF89a" + b"\0" * 30, "image/gif")), "neither a PNG nor a JPEG"),
        (image_part(data_url(image_bytes(64, 64)[:20])), "cut short"),
        ({"type": "image_url", "image_url": {}}, "valid string"),
        ({"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}, "unknown content"),
        ({"type": "text", "text": 5}, "string `text`"),
        (7, "must be an object"),
    ],
)
def test_bad_parts_are_a_400_that_says_what_is_wrong(sim, part, message):
    status, body = chat(sim.url, [{"type": "text", "text": TEXT}, part])
    assert status == 400, body
    assert body["error"]["type"] == "BadRequestError" and body["error"]["param"] == "messages"
    assert message in body["error"]["message"]


def test_the_option_is_checked():
    from vllm_load.cli.main import build_parser
    from vllm_load.sim.cli import ConfigError, build_config

    parser = build_parser()
    assert build_config(parser.parse_args(["sim"])).image_tokens is None  # by size
    assert build_config(parser.parse_args(["sim", "--image-tokens", "258"])).image_tokens == 258
    for bad in ("0", "many"):
        with pytest.raises(ConfigError, match="--image-tokens"):
            build_config(parser.parse_args(["sim", "--image-tokens", bad]))


# --- the prefix cache -----------------------------------------------------------------------


def cached(url: str, content) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of a chat request."""
    status, answer = chat(url, content)
    assert status == 200, answer
    usage = answer["usage"]
    return usage["prompt_tokens"], (usage["prompt_tokens_details"] or {}).get("cached_tokens", 0)


def test_the_prefix_cache_shares_only_the_text_before_an_image_that_differs():
    text = " ".join(["the of and to in is was for"] * 25)  # 200 tokens
    before = SimTokenizer().count("<|im_start|>user\n" + text)
    after = {"type": "text", "text": " What is in it?"}
    first = [{"type": "text", "text": text}, png_part(colour=1), after]
    other = [{"type": "text", "text": text}, png_part(colour=2), after]
    args = ("--time-scale", "0.01", "--enable-prompt-tokens-details")
    with SimulatorProcess(*args) as sim:
        prompt, hit = cached(sim.url, first)
        assert hit == 0
        # another image after the same text: only the full blocks before the image are shared
        prompt_other, hit = cached(sim.url, other)
        assert prompt_other == prompt and hit == before // 16 * 16
        # the same image again: the whole prompt is shared but its last block
        _, hit = cached(sim.url, first)
        assert hit == (prompt - 1) // 16 * 16
