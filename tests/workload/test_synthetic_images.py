"""The built-in test's generated images (--images): valid files of the size asked, every one
distinct in its pixels, joined from a pool's bands that decode as the pool's own pictures."""

from __future__ import annotations

import base64
import hashlib
import io
import random
import struct
import zlib

import pytest
from PIL import Image

from vllm_load.workload.images import ImageSize, data_url_bytes
from vllm_load.workload.synthetic_images import (
    JPEG_QUALITY,
    SyntheticImages,
    adler32_combine,
    random_picture,
)


def decoded(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


@pytest.mark.parametrize("image_format", ["jpeg", "png"])
@pytest.mark.parametrize("size", [ImageSize(512, 512), ImageSize(32, 32), ImageSize(100, 37)])
def test_every_image_is_distinct_in_its_pixels(image_format, size):
    images = SyntheticImages(size, image_format, seed=3)
    digests = set()
    for _ in range(120):
        image = decoded(images.next_image())
        assert image.format == image_format.upper() and image.size == (size.width, size.height)
        digests.add(hashlib.sha256(image.tobytes()).digest())
    # (a server's cache keyed on decoded pixels, or on the file's bytes, finds none of them twice)
    assert len(digests) == 120
    assert images.codec.bits * images.codec.bands >= 32  # 2^32 distinct images per process


def test_processes_with_other_seeds_send_other_images():
    size = ImageSize(64, 64)
    one, other = (SyntheticImages(size, "jpeg", seed=seed) for seed in (1, 2))
    assert not {one.next_image() for _ in range(50)} & {other.next_image() for _ in range(50)}


@pytest.mark.parametrize("image_format", ["jpeg", "png"])
def test_a_data_url_carries_the_image_and_says_its_bytes(image_format):
    by_bytes = SyntheticImages(ImageSize(96, 64), image_format, seed=5)
    by_url = SyntheticImages(ImageSize(96, 64), image_format, seed=5)
    urls, total = by_url.next_urls(3)
    images = [by_bytes.next_image() for _ in range(3)]
    prefix = f"data:image/{image_format};base64,"
    assert all(url.startswith(prefix) for url in urls)
    assert [base64.b64decode(url[len(prefix) :]) for url in urls] == images
    assert total == sum(map(len, images)) == sum(map(data_url_bytes, urls))


def test_jpeg_bands_decode_as_the_pool_picture_they_come_from():
    # the fill bytes and the comment that pad the parts change no pixel: an image whose bands
    # all come from pool picture 0 decodes as that picture encoded on its own
    size = ImageSize(128, 96)
    images = SyntheticImages(size, "jpeg", seed=9)
    codec = images.codec
    joined = codec.header + b"".join(choices[0] for choices in codec.pool)
    own = io.BytesIO()
    random_picture(size, random.Random(9)).save(own, "JPEG", quality=JPEG_QUALITY, subsampling=2)
    assert decoded(joined).tobytes() == decoded(own.getvalue()).tobytes()
    assert all(len(part) % 3 == 0 for choices in codec.pool for part in choices)
    assert len(codec.header) % 3 == 0


def test_png_bands_are_rows_of_the_pictures_chosen_and_the_stream_checks():
    size = ImageSize(40, 48)
    images = SyntheticImages(size, "png", seed=4)
    rng = random.Random(4)
    pictures = [random_picture(size, rng).tobytes() for _ in range(1 << images.codec.bits)]
    stride = size.width * 3
    for k in range(20):
        data = images.next_image()
        Image.open(io.BytesIO(data)).verify()  # every chunk's CRC
        pixels = decoded(data).convert("RGB").tobytes()
        rows = [size.height * b // images.codec.bands for b in range(images.codec.bands + 1)]
        for b, choice in enumerate(images.choices(k)):
            band = slice(rows[b] * stride, rows[b + 1] * stride)
            assert pixels[band] == pictures[choice][band]
        # the zlib stream across the IDAT chunks, its Adler-32 included, is what zlib reads
        stream, at = b"", 8
        while at < len(data):
            (length,) = struct.unpack(">I", data[at : at + 4])
            if data[at + 4 : at + 8] == b"IDAT":
                stream += data[at + 8 : at + 8 + length]
            at += 12 + length
        assert len(zlib.decompress(stream)) == size.height * (stride + 1)


def test_adler32_combine_is_zlibs():
    rng = random.Random(0)
    for _ in range(50):
        a, b = rng.randbytes(rng.randrange(0, 200_000)), rng.randbytes(rng.randrange(0, 70_000))
        assert adler32_combine(zlib.adler32(a), zlib.adler32(b), len(b)) == zlib.adler32(a + b)
