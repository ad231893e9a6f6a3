"""Images a chat request carries, as OpenAI content parts: the --image-size spec, a dataset's
image references (a local file read into a `data:` URL, or a URL sent as it is), the parts of one
user message, and the count and bytes of the images in a list of messages (what a request's
record keeps). Light: the images the built-in test generates are `synthetic_images`'.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..user_values import SettingsError

#: what --image-format offers, and each one's type in a `data:` URL
IMAGE_FORMATS = ("jpeg", "png")
FORMAT_MIME_TYPES = {"jpeg": "image/jpeg", "png": "image/png"}
#: an image's type by its file's extension (what `data:` URLs of local files say)
MIME_TYPES = {
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".png": "image/png",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
}
#: references sent as they are; anything else is a local file
URL_PREFIXES = ("http://", "https://", "data:")
#: --image-size's limits per side: a JPEG of 32 x 32 still has the 4 blocks that make each
#: request's image distinct (`synthetic_images`); 8192 is past every vision encoder's input
MIN_SIDE, MAX_SIDE = 32, 8192


@dataclass(frozen=True)
class ImageSize:
    width: int
    height: int

    def __str__(self) -> str:
        return f"{self.width}x{self.height}"


def parse_image_size(text: str) -> ImageSize:
    """`WxH` in pixels, each side from MIN_SIDE to MAX_SIDE; a SettingsError of one line else."""
    shown = str(text).strip().lower()
    width, sep, height = shown.partition("x")
    if not sep or not width.isdigit() or not height.isdigit():
        raise SettingsError(
            f"--image-size must be WIDTHxHEIGHT in pixels (e.g. 512x512), got {text!r}"
        )
    size = ImageSize(int(width), int(height))
    if not all(MIN_SIDE <= side <= MAX_SIDE for side in (size.width, size.height)):
        raise SettingsError(
            f"--image-size sides must be from {MIN_SIDE} to {MAX_SIDE} pixels, got {text!r}"
        )
    return size


def image_size_argument(value: Any) -> str:
    """--image-size as recorded: `WxH`, checked."""
    return str(parse_image_size(str(value)))


def data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def data_url_bytes(url: str) -> int:
    """The bytes a base64 `data:` URL carries (its image as encoded, before base64), from its
    length alone; 0 for any other URL (the server fetches it: the request does not carry it)."""
    if not url.startswith("data:"):
        return 0
    comma = url.find(",")
    if comma < 0 or ";base64" not in url[:comma]:
        return 0
    payload = len(url) - comma - 1
    padding = (url.endswith("=") + url.endswith("==")) if payload else 0
    return payload * 3 // 4 - padding


def user_content(text: str, image_urls: Sequence[str]) -> str | list[dict[str, Any]]:
    """A user message's content: the text alone, or with images, a text part then an
    `image_url` part per image."""
    if not image_urls:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in image_urls]
    return parts


def count_images(messages: Iterable[Any]) -> tuple[int, int]:
    """The `image_url` parts in chat messages (the history's included: the server reads them all)
    and the bytes their `data:` URLs carry."""
    count = carried = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_url":
                count += 1
                image = part.get("image_url")
                url = image.get("url") if isinstance(image, dict) else None
                carried += data_url_bytes(url) if isinstance(url, str) else 0
    return count, carried


class ImageFiles:
    """A dataset's image references as the URLs to send: a URL (http, https, data) as it is, a
    local file (relative to the dataset's directory) read once into a `data:` URL whose type its
    extension says. A reference that cannot be sent is a ValueError saying why."""

    def __init__(self, base_dir: str) -> None:
        self.base_dir = base_dir
        self._urls: dict[str, str] = {}  # path -> data URL: a file named twice is held once

    def url_of(self, reference: Any) -> str:
        if not isinstance(reference, str) or not reference.strip():
            raise ValueError(f"an image must be a file path or a URL, got {reference!r}")
        if reference.startswith(URL_PREFIXES):
            if reference.startswith("data:") and not reference.startswith("data:image/"):
                raise ValueError(f"image {reference[:40]!r}...: a data: URL must be data:image/...")
            return reference
        path = os.path.join(self.base_dir, os.path.expanduser(reference))
        url = self._urls.get(path)
        if url is None:
            mime = MIME_TYPES.get(os.path.splitext(path)[1].lower())
            if mime is None:
                raise ValueError(
                    f"image {reference}: its extension does not say its type "
                    f"({', '.join(MIME_TYPES)})"
                )
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError as e:
                raise ValueError(f"image {reference}: {e.strerror or e} ({path})") from None
            url = self._urls[path] = data_url(data, mime)
        return url
