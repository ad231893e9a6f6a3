"""Images in requests: --image-size, a dataset's image references as the URLs sent, the content
parts of a user message, and the count and bytes of a request's images for its record."""

from __future__ import annotations

import base64
import os

import pytest

from vllm_load.user_values import SettingsError
from vllm_load.workload.images import (
    ImageFiles,
    ImageSize,
    count_images,
    data_url,
    data_url_bytes,
    image_size_argument,
    parse_image_size,
    user_content,
)


def test_image_size_is_width_x_height_within_limits():
    assert parse_image_size("512x512") == ImageSize(512, 512)
    assert parse_image_size(" 640X480 ") == ImageSize(640, 480)
    assert image_size_argument("1024x768") == "1024x768"
    for bad, says in (
        ("512", "WIDTHxHEIGHT"),
        ("512x", "WIDTHxHEIGHT"),
        ("axb", "WIDTHxHEIGHT"),
        ("-5x10", "WIDTHxHEIGHT"),
        ("16x512", "from 32 to 8192"),
        ("512x9000", "from 32 to 8192"),
    ):
        with pytest.raises(SettingsError, match=says) as e:
            parse_image_size(bad)
        assert "\n" not in str(e.value) and "--image-size" in str(e.value)


@pytest.mark.parametrize("length", [0, 1, 2, 3, 4, 5, 100, 1001])
def test_a_data_urls_bytes_come_from_its_length(length):
    data = os.urandom(length)
    assert data_url_bytes(data_url(data, "image/png")) == length
    assert data_url_bytes("https://example.com/cat.jpg") == 0
    assert data_url_bytes("data:image/png,not-base64") == 0


def test_a_user_message_carries_its_images_after_its_text():
    assert user_content("hello", []) == "hello"
    assert user_content("hello", ["https://x/a.png", "data:image/jpeg;base64,AAAA"]) == [
        {"type": "text", "text": "hello"},
        {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
    ]


def test_a_requests_images_are_counted_in_its_whole_history():
    inline = data_url(b"x" * 700, "image/jpeg")
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": user_content("first", [inline, "https://x/a.png"])},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": user_content("second", [inline])},
        {"role": "user", "content": [{"type": "text", "text": "no image"}]},
    ]
    assert count_images(messages) == (3, 1400)  # the URL's image is fetched by the server
    assert count_images([{"role": "user", "content": "text"}]) == (0, 0)


def test_dataset_images_are_read_once_relative_to_the_dataset(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.JPG").write_bytes(b"\xff\xd8jpeg")
    (tmp_path / "b.png").write_bytes(b"\x89PNGpng")
    files = ImageFiles(str(tmp_path))
    url = files.url_of("img/a.JPG")
    assert url == "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8jpeg").decode()
    assert files.url_of(str(tmp_path / "b.png")).startswith("data:image/png;base64,")
    (tmp_path / "img" / "a.JPG").unlink()
    assert files.url_of("img/a.JPG") == url  # read once: a file named twice is held once
    for sent_as_is in ("https://example.com/c.webp", "http://h/x", "data:image/gif;base64,R0lG"):
        assert files.url_of(sent_as_is) == sent_as_is


@pytest.mark.parametrize(
    "reference, says",
    [
        ("missing.png", "image missing.png: No such file or directory"),
        ("notes.txt", "image notes.txt: its extension does not say its type"),
        ("data:text/plain;base64,aGk=", "a data: URL must be data:image/"),
        ("", "an image must be a file path or a URL"),
        (3, "an image must be a file path or a URL, got 3"),
    ],
)
def test_an_image_that_cannot_be_sent_says_why(tmp_path, reference, says):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ValueError, match=says):
        ImageFiles(str(tmp_path)).url_of(reference)
