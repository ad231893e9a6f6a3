"""Chat message content as OpenAI writes it: a string, or a list of parts, `text` ones and
`image_url` ones carrying a `data:` URL. Text parts are joined in order and tokenized as the
prompt; each image is charged a number of prompt tokens (a vision-language model's placeholder
tokens), and its bytes are hashed so that the prefix cache tells two images apart.

The charge is Qwen3-VL's by default, read from the image's header (docs/simulator.md): the
image is resized to multiples of 32 pixels within 65,536 to 16,777,216 pixels, each 32 x 32
tile is one token, and two more tokens open and close the image. `--image-tokens N` charges
every image N instead. Only PNG and JPEG are read; an http(s) URL is refused, as the simulator
fetches nothing.
"""

from __future__ import annotations

import binascii
import math
from collections.abc import Sequence
from dataclasses import dataclass

# Qwen3-VL's image processor (patch 16, merge 2) and its pixel budget
TILE = 32
MIN_PIXELS = 65_536
MAX_PIXELS = 16_777_216
MAX_ASPECT = 200  # the processor refuses a longer side over 200 times the shorter
IMAGE_DELIMITERS = 2  # <|vision_start|> and <|vision_end|> around the image's tokens
# stands where an image was, in the text rendered to find where its tokens go
IMAGE_MARK = "\U000f0000"
_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG = b"\xff\xd8"
# JPEG start-of-frame markers (they carry the size); C4, C8 and CC are other segments
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_HEAD_CHARS = 4096  # base64 characters decoded to read a header: 3 KiB of image
_ID_BITS = 2**63 - 1


class ContentError(ValueError):
    """Content the server refuses (the HTTP layer answers 400 with this message)."""


@dataclass(frozen=True)
class Image:
    """One image part: the prompt tokens it costs and its content's token id (a negative number
    no text token has, the same for the same image data)."""

    tokens: int
    token_id: int


@dataclass(frozen=True)
class ChatContent:
    """Chat messages split into what the template renders (string content) and the images."""

    messages: list[dict]  # content parts joined to their text
    images: list[Image]  # in the order they appear
    marked: list[dict]  # the same with IMAGE_MARK where each image was

    @property
    def image_tokens(self) -> int:
        return sum(image.tokens for image in self.images)


def qwen_vl_tokens(width: int, height: int) -> int:
    """Prompt tokens Qwen3-VL charges an image of `width` x `height` pixels."""
    if max(width, height) > MAX_ASPECT * min(width, height):
        raise ContentError(
            f"image_url: an image of {width}x{height} has an aspect ratio over {MAX_ASPECT}, "
            "which the vision processor refuses"
        )
    w, h = round(width / TILE) * TILE, round(height / TILE) * TILE
    if w * h > MAX_PIXELS:
        scale = math.sqrt(width * height / MAX_PIXELS)
        w = max(TILE, math.floor(width / scale / TILE) * TILE)
        h = max(TILE, math.floor(height / scale / TILE) * TILE)
    elif w * h < MIN_PIXELS:
        scale = math.sqrt(MIN_PIXELS / (width * height))
        w = math.ceil(width * scale / TILE) * TILE
        h = math.ceil(height * scale / TILE) * TILE
    return (w // TILE) * (h // TILE) + IMAGE_DELIMITERS


class _Truncated(ValueError):
    """The header goes on past the bytes decoded so far."""


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's or a JPEG's header; ValueError names what is wrong
    (_Truncated when `data` ends inside the header)."""
    if data.startswith(_PNG):
        if len(data) < 24:
            raise _Truncated("a PNG cut short in its header")
        if data[12:16] != b"IHDR":
            raise ValueError("a PNG without its IHDR header")
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    elif data.startswith(_JPEG):
        width, height = _jpeg_size(data)
    else:
        raise ValueError("neither a PNG nor a JPEG (the simulator reads those two)")
    if width < 1 or height < 1:
        raise ValueError(f"an image of {width}x{height} pixels")
    return width, height


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """The size in a JPEG's start-of-frame segment, found by walking the segments before it."""
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            raise ValueError("a JPEG whose segments are damaged")
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            i += 2
            continue
        if marker == 0xDA:  # image data began before any frame header
            raise ValueError("a JPEG without a frame header")
        if marker in _JPEG_SOF and i + 9 <= n:
            height = int.from_bytes(data[i + 5 : i + 7], "big")
            return int.from_bytes(data[i + 7 : i + 9], "big"), height
        if marker not in _JPEG_SOF:
            i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
            continue
        break
    raise _Truncated("a JPEG cut short before its frame header")


def _base64_payload(url: object) -> str:
    """The base64 text of an image's `data:image/...;base64,` URL, its alphabet and padding
    checked (decoding all of it would cost the server ~5 ms a megabyte); ContentError for
    anything else."""
    if not isinstance(url, str):
        raise ContentError("image_url.url: Input should be a valid string")
    if url.startswith(("http://", "https://")):
        raise ContentError(
            "image_url: the simulator does not fetch images; send each as a data: URL "
            "(data:image/png;base64,...)"
        )
    header, comma, payload = url.partition(",")
    media, _, encoding = header.removeprefix("data:").partition(";")
    if not url.startswith("data:") or not comma or encoding != "base64":
        raise ContentError(
            f"image_url: {url[:40]!r}... is not a base64 data URL "
            "(data:image/png;base64,... or data:image/jpeg;base64,...)"
        )
    if not media.startswith("image/"):
        raise ContentError(f"image_url: media type {media!r} is not an image")
    if not payload:
        raise ContentError("image_url: the data URL holds no image")
    raw = payload.encode("ascii", "replace")
    text = raw.rstrip(b"=")
    if len(raw) % 4 or len(raw) - len(text) > 2 or text.translate(None, _BASE64_ALPHABET):
        raise ContentError(
            "image_url: the data URL's base64 is malformed (a character outside the base64 "
            "alphabet, or a length that is not a multiple of 4)"
        )
    return payload


def read_image_size(payload: str) -> tuple[int, int]:
    """The image's (width, height), from as few of its bytes as its header needs."""
    head = binascii.a2b_base64(payload[:_HEAD_CHARS])
    try:
        return image_size(head)
    except _Truncated:
        if len(payload) <= _HEAD_CHARS:
            raise
    return image_size(binascii.a2b_base64(payload))  # a JPEG with large metadata first


class ContentReader:
    """Splits chat messages' content parts into text and charged images."""

    __slots__ = ("image_tokens",)

    def __init__(self, image_tokens: int | None = None) -> None:
        self.image_tokens = image_tokens  # a fixed charge per image; None: Qwen3-VL's by size

    def image(self, part: dict) -> Image:
        ref = part.get("image_url")
        payload = _base64_payload(ref.get("url") if isinstance(ref, dict) else ref)
        try:
            width, height = read_image_size(payload)
        except ValueError as e:
            raise ContentError(f"image_url: the image is {e}") from None
        tokens = qwen_vl_tokens(width, height) if self.image_tokens is None else self.image_tokens
        # the same bytes have the same base64 text; str hashes differ between processes, but
        # each simulator process has its own prefix cache
        return Image(tokens, -1 - (hash(payload) & _ID_BITS))

    def read(self, messages: Sequence[dict]) -> ChatContent:
        """The messages with string content, their images, and where each image was."""
        plain: list[dict] = []
        marked: list[dict] = []
        images: list[Image] = []
        for message in messages:
            content = message.get("content")
            if not isinstance(content, list):
                plain.append(message)
                marked.append(message)
                continue
            texts, marks = [], []
            for part in content:
                kind = _part_type(part)
                if kind == "image_url":
                    images.append(self.image(part))
                    marks.append(IMAGE_MARK)
                elif kind == "text":
                    text = part if isinstance(part, str) else part.get("text")
                    if not isinstance(text, str):
                        raise ContentError("messages: a text part needs a string `text`")
                    texts.append(text)
                    marks.append(text)
                else:
                    raise ContentError(
                        f"messages: unknown content part type {kind!r} (the simulator takes "
                        '"text" and "image_url" parts)'
                    )
            plain.append({**message, "content": "".join(texts)})
            marked.append({**message, "content": "".join(marks)})
        return ChatContent(plain, images, marked if images else plain)


def _part_type(part: object) -> str | None:
    """A part's type: its `type`, else what its keys say."""
    if isinstance(part, str):
        return "text"  # a bare string among the parts
    if not isinstance(part, dict):
        raise ContentError("messages: a content part must be an object with a type")
    kind = part.get("type")
    if kind is None:
        kind = next((key for key in ("text", "image_url") if key in part), None)
    return kind


def place_images(ids: list[int], images: Sequence[Image], positions: Sequence[int]) -> list[int]:
    """The prompt's token ids with each image's tokens inserted at its position (a token index
    into `ids`); an image whose position is unknown goes at the end."""
    out: list[int] = []
    last = 0
    for k, image in enumerate(images):
        at = min(max(positions[k] if k < len(positions) else len(ids), last), len(ids))
        out += ids[last:at]
        out += [image.token_id] * image.tokens
        last = at
    out += ids[last:]
    return out


def mark_positions(tokenizer, marked_text: str) -> list[int]:
    """For each IMAGE_MARK in a rendered prompt, how many tokens the text before it has."""
    pieces = marked_text.split(IMAGE_MARK)
    positions, before = [], ""
    for piece in pieces[:-1]:
        before += piece
        positions.append(tokenizer.count(before))
    return positions
